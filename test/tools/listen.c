/*
 * listen: print the notifications of one channel as they arrive.
 *
 *	listen CONNINFO CHANNEL TIMEOUT_S
 *
 * Each line is "<unix epoch ms> <payload>".  A notification is only a hint
 * (anyone who can name a channel can NOTIFY on it), so this tool never
 * decides that a run is over: its caller reads the state and stops it
 * (SIGTERM).  Exits 0 when TIMEOUT_S has passed, 1 on error.  Used by
 * scripts/follow.sh (the demo's client) and the streaming test
 * (test/suites/supervisor.sh).  "ready" is printed on stderr once LISTEN is
 * in effect, so a caller can start the run after it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/time.h>

#include <libpq-fe.h>

static long long
now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (long long) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

int
main(int argc, char **argv)
{
	PGconn	   *conn;
	PGresult   *res;
	char	   *ident;
	char	   *sql;
	long long	deadline;

	if (argc != 4)
	{
		fprintf(stderr, "usage: listen CONNINFO CHANNEL TIMEOUT_S\n");
		return 2;
	}
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "listen: %s", PQerrorMessage(conn));
		return 1;
	}
	ident = PQescapeIdentifier(conn, argv[2], strlen(argv[2]));
	sql = malloc(strlen(ident) + 16);
	sprintf(sql, "LISTEN %s", ident);
	res = PQexec(conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "listen: %s", PQerrorMessage(conn));
		return 1;
	}
	PQclear(res);
	fprintf(stderr, "ready\n");
	fflush(stderr);

	deadline = now_ms() + atoll(argv[3]) * 1000;
	for (;;)
	{
		PGnotify   *n;
		fd_set		rfds;
		struct timeval tv;
		long long	left = deadline - now_ms();
		int			sock = PQsocket(conn);

		if (left <= 0)
		{
			PQfinish(conn);
			return 0;
		}
		FD_ZERO(&rfds);
		FD_SET(sock, &rfds);
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		if (select(sock + 1, &rfds, NULL, NULL, &tv) < 0)
		{
			perror("select");
			return 1;
		}
		if (!PQconsumeInput(conn))
		{
			fprintf(stderr, "listen: %s", PQerrorMessage(conn));
			return 1;
		}
		while ((n = PQnotifies(conn)) != NULL)
		{
			printf("%lld %s\n", now_ms(), n->extra);
			fflush(stdout);
			PQfreemem(n);
		}
	}
}
