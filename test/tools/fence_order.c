/*
 * fence_order: which came first, the end of a process or the database's
 * deadline for an invocation's lease?  An order observed from outside, not
 * a time compared with a threshold (the runners suite, test/suites/runners.sh:
 * a runner must kill its sandbox before that deadline).
 *
 *	fence_order CONNINFO INVOCATION PID TIMEOUT_S
 *
 * It opens a pidfd of PID and one connection, then in rounds: looks
 * whether PID has ended (without waiting), asks the database whether the
 * deadline of the invocation's lease has passed by its own clock
 * (agent._lease_deadline, as the reaper and every step read it), and waits
 * on the pidfd for at most 20 ms (it wakes at once when PID ends, so the
 * round after the end is one query).  It prints one line and exits 0:
 *
 *	killed before the deadline		PID was seen ended, and after that the
 *									database said the deadline had not passed
 *	alive after the deadline		the database said the deadline had
 *									passed, and after that PID was seen alive
 *	killed, seen after the deadline	neither order was seen: an end within
 *									one round of the deadline
 *	neither within TIMEOUT_S s
 *
 * On stderr: how far the database's clock was from the deadline at the
 * query that decided, for the log (a measure, not a check).  Exits 1 on an
 * error (no such process, no connection, a query that fails).
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <time.h>

#include <libpq-fe.h>

static const char *const deadline_sql =
"SELECT c.t >= d.deadline, round(extract(epoch FROM d.deadline - c.t)::numeric, 3) "
"FROM (SELECT pg_catalog.clock_timestamp() AS t) c, agent.invocations i "
"JOIN agent.runners rn ON rn.id = i.runner_id "
"CROSS JOIN LATERAL agent._lease_deadline(i.lease_expires_at, rn.last_heartbeat, "
"agent._runner_lease(), i.provisioned_at, "
"coalesce(i.wall_time_s, (agent._run_limits()).default_wall_time_s), "
"i.cancel_requested_at, agent._runner_grace()) d "
"WHERE i.id = $1";

static PGconn *conn;
static const char *invocation;

/* Has PID ended?  (No wait.) */
static int
ended(int pidfd)
{
	struct pollfd p = {pidfd, POLLIN, 0};

	return poll(&p, 1, 0) > 0;
}

/* Has the deadline passed?  *left: seconds to it, as the database said. */
static int
passed(char *left, size_t len)
{
	const char *params[1] = {invocation};
	PGresult   *res = PQexecParams(conn, deadline_sql, 1, NULL, params, NULL, NULL, 0);
	int			r;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		fprintf(stderr, "fence_order: %s", PQntuples(res) == 0 && PQresultStatus(res) == PGRES_TUPLES_OK ?
				"no such leased invocation\n" : PQerrorMessage(conn));
		exit(1);
	}
	r = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	snprintf(left, len, "%s", PQgetvalue(res, 0, 1));
	PQclear(res);
	return r;
}

static void
verdict(const char *what, const char *left)
{
	printf("%s\n", what);
	fprintf(stderr, "# (%s: %s s to the database's deadline at the query that decided)\n", what, left);
	PQfinish(conn);
	exit(0);
}

int
main(int argc, char **argv)
{
	int			pidfd;
	time_t		end;
	char		left[64];

	if (argc != 5)
	{
		fprintf(stderr, "usage: fence_order CONNINFO INVOCATION PID TIMEOUT_S\n");
		return 2;
	}
	invocation = argv[2];
	pidfd = pidfd_open(atoi(argv[3]), 0);
	if (pidfd < 0)
	{
		perror("fence_order: pidfd_open");
		return 1;
	}
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "fence_order: %s", PQerrorMessage(conn));
		return 1;
	}
	end = time(NULL) + atoi(argv[4]);
	while (time(NULL) < end)
	{
		int			gone = ended(pidfd);
		struct pollfd p = {pidfd, POLLIN, 0};

		if (passed(left, sizeof(left)))
		{
			if (gone || ended(pidfd))
				verdict("killed, seen after the deadline", left);
			verdict("alive after the deadline", left);
		}
		if (gone)
			verdict("killed before the deadline", left);
		(void) poll(&p, 1, 20);
	}
	printf("neither within %s s\n", argv[4]);
	PQfinish(conn);
	return 0;
}
