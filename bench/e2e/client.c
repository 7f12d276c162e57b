/*
 * bench/e2e/client.c: end-to-end latency and throughput of the control
 * plane plus supervisor plus jail, measured from a libpq client.
 *
 *	client latency CONNINFO ORG WS AGENT LANGUAGE CODE N
 *				   [ROUNDS BASE_CONNINFO BASE_ORG BASE_WS BASE_AGENT]
 *		N sequential request+approve (after 3 uncounted warm-up runs); for
 *		each, the time from approve's COMMIT returning to the end of the
 *		run as a client learns it: LISTEN on the invocation's channel
 *		(agent.output_channel(), subscribed before approving), and on a
 *		"done" hint read the state, which must be final (a notification is
 *		only a hint; also read once a second without one, as agent.wait()
 *		does, saying so on stderr).  Prints "p50_ms p99_ms mean_ms".  A run that does not
 *		succeed ends the client with status 1 (its time is not a sample).
 *
 *		With a baseline (a second cluster, another install: bench/e2e/
 *		run.sh BASE_PG_CONFIG=...), N runs on each, taken in ROUNDS blocks
 *		of about N/ROUNDS that alternate between the two (the one that
 *		goes first alternates too), so that the machine's drift falls on
 *		both alike; prints "p50 p99 mean base_p50 base_p99 base_mean".
 *		Both are timed by the same code, over the same interval, with the
 *		same statements (below: the versions differ in no statement the
 *		client sends).
 *
 *	client throughput CONNINFO ORG WS AGENT LANGUAGE CODE CLIENTS SECONDS
 *		CLIENTS processes, each looping request+approve+agent.wait() for
 *		SECONDS (a fraction is allowed); a request the org's approval
 *		policy approved is not approved again.  Prints "completed
 *		per_second seconds" (the time from the first fork to the last
 *		client's end).
 *
 *	client policy CONNINFO ORG WS AGENT AUTO_AGENT LANGUAGE CODE N ROUNDS
 *		Approval policies (policy_rows below): today's approve path
 *		against runs the org's policy approves, interleaved.
 *
 * What the client relies on exists in every version since the supervisor's
 * first (b80ecf0): agent.request_execution, agent.approve, agent.wait(uuid,
 * interval), agent.output_channel(uuid), agent._state_is_terminal(text).
 * What changed is the "done" hint's payload: 'done' since eb956f3, JSON
 * with a "done" key before (e.g. 3777718's {"done":true,"state":...}); the
 * channel's name changed too (a hash since eb956f3), but the client asks
 * agent.output_channel() for it.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

static double
now_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

static PGresult *
exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "client: %s: %s", sql, PQerrorMessage(conn));
		exit(1);
	}
	return res;
}

static PGconn *
connect_tenant(const char *conninfo, const char *org, const char *ws)
{
	PGconn	   *conn = PQconnectdb(conninfo);
	const char *p[2] = {org, ws};

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "client: %s", PQerrorMessage(conn));
		exit(1);
	}
	/* Session-level tenant: set_config(..., false) lasts the connection. */
	PQclear(exec_ok(conn, "SELECT set_config('sandbox.org_id', $1, false), "
					"set_config('sandbox.workspace_id', $2, false)", 2, p));
	return conn;
}

/*
 * request_execution; fills inv and approval (37 bytes each).  Returns
 * whether the org's approval policy approved it (status 'approved': no
 * person, no approve call; docs/control-plane.md, "Approval policies").
 */
static int
request(PGconn *conn, const char *ws, const char *agent, const char *lang,
		const char *code, char *inv, char *approval)
{
	const char *p[4] = {ws, agent, lang, code};
	PGresult   *res = exec_ok(conn,
							  "SELECT invocation_id, approval_id, status FROM agent.request_execution("
							  "$1::uuid, $2::uuid, NULL, $3, $4, 'bench-user')", 4, p);
	int			automatic;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
	{
		fprintf(stderr, "client: request refused\n");
		exit(1);
	}
	snprintf(inv, 37, "%s", PQgetvalue(res, 0, 0));
	snprintf(approval, 37, "%s", PQgetvalue(res, 0, 1));
	automatic = strcmp(PQgetvalue(res, 0, 2), "approved") == 0;
	PQclear(res);
	return automatic;
}

static void
approve(PGconn *conn, const char *approval)
{
	const char *p[1] = {approval};

	PQclear(exec_ok(conn, "SELECT agent.approve($1::uuid, 'bench-approver')", 1, p));
}

/*
 * agent.wait() for up to `timeout` ('0 s': a look): whether the state it
 * returned is final, read under the tenant.  One round trip; a wait sleeps
 * on the condition variable the supervisor broadcasts after each finish.
 */
static int
wait_final(PGconn *conn, const char *inv, const char *timeout)
{
	const char *p[2] = {inv, timeout};
	PGresult   *res = exec_ok(conn, "SELECT agent._state_is_terminal(agent.wait($1::uuid, $2::interval))",
							  2, p);
	int			done = strcmp(PQgetvalue(res, 0, 0), "t") == 0;

	PQclear(res);
	return done;
}

static int
finished(PGconn *conn, const char *inv)
{
	return wait_final(conn, inv, "0 s");
}

/*
 * Whether the (final) invocation succeeded; says why not on stderr.  A run
 * that failed is not a sample: its time measures the failure.
 */
static int
succeeded(PGconn *conn, const char *inv)
{
	const char *p[1] = {inv};
	PGresult   *res = exec_ok(conn, "SELECT state, coalesce(state_reason, '') FROM agent.invocations WHERE id = $1::uuid",
							  1, p);
	int			ok = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "succeeded") == 0;

	if (!ok)
		fprintf(stderr, "client: run %s ended %s (%s), not succeeded\n", inv,
				PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "?",
				PQntuples(res) == 1 ? PQgetvalue(res, 0, 1) : "");
	PQclear(res);
	return ok;
}

static void
listen_verb(PGconn *conn, const char *verb, const char *ident)
{
	char		sql[160];

	snprintf(sql, sizeof(sql), "%s %s", verb, ident);
	PQclear(exec_ok(conn, sql, 0, NULL));
}

/*
 * LISTEN on the invocation's channel; its quoted name, for the UNLISTEN
 * (PQfreemem it), as a client that keeps what it learned would.
 */
static char *
listen_channel(PGconn *conn, const char *inv)
{
	const char *p[1] = {inv};
	PGresult   *res = exec_ok(conn, "SELECT agent.output_channel($1::uuid)", 1, p);
	char	   *ident = PQescapeIdentifier(conn, PQgetvalue(res, 0, 0), strlen(PQgetvalue(res, 0, 0)));

	PQclear(res);
	listen_verb(conn, "LISTEN", ident);
	return ident;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * WARM_PAGE=FILE WARM_LANG=0|1 (python, node): before each timed run, wait
 * (untimed, at most 60 s) until the launcher's page (src/jail/
 * wire_protocol.h: ready[2] after a 16-byte magic, configured[2] after
 * them) counts a waiting interpreter for every warm place of each
 * language, so that every timed run is a warm one and the refill of the
 * pool (an interpreter's start, ~0.5 s of CPU with pandas) is on nobody's
 * clock: with two warm Python places, waiting for one only would time
 * every run beside the other one's refill on these CPUs.  The page is this
 * install's; a baseline's runs wait for it too, so that none of them is
 * timed beside this install's refill either (a baseline without a pool has
 * no page of its own to wait for).  WARM_PAGE2=FILE: a second launcher's
 * page, waited for the same way (bench/e2e/run.sh's image row: the host's
 * launcher and the image's, docs/images.md).
 */
static void
wait_page(const char *page, int lang)
{
	for (int i = 0; page && i < 6000; i++)
	{
		int32_t		counts[4] = {0, 0, 0, 0};	/* ready[2], configured[2] */
		int			fd = open(page, O_RDONLY);

		if (fd >= 0 && pread(fd, counts, sizeof(counts), 16) == sizeof(counts) &&
			counts[lang] > 0 && counts[0] >= counts[2] && counts[1] >= counts[3])
		{
			close(fd);
			return;
		}
		if (fd >= 0)
			close(fd);
		usleep(10000);
	}
}

static void
wait_warm(void)
{
	int			lang = getenv("WARM_LANG") ? atoi(getenv("WARM_LANG")) : 0;

	wait_page(getenv("WARM_PAGE"), lang);
	wait_page(getenv("WARM_PAGE2"), lang);
}

/*
 * Whether a notification on an invocation's channel says the run ended:
 * the payload 'done' (today's), or JSON with a "done" key (before the
 * hint-only payloads of eb956f3, e.g. {"done":true,"state":"succeeded"}).
 * Either is only a hint: the state is read next.
 */
static int
done_hint(const char *payload)
{
	return strcmp(payload, "done") == 0 ||
		(payload[0] == '{' && strstr(payload, "\"done\"") != NULL);
}

/* One cluster under test (this install or the baseline) and its samples. */
typedef struct BenchSide
{
	const char *label;			/* "this" or "base", in messages */
	PGconn	   *conn;
	const char *ws;
	const char *agent;
	double	   *ms;				/* the samples taken so far */
	int			taken;
} BenchSide;

static void
side_open(BenchSide *side, const char *label, char **args, int n)
{
	side->label = label;
	side->conn = connect_tenant(args[0], args[1], args[2]);
	side->ws = args[2];
	side->agent = args[3];
	side->ms = calloc(n, sizeof(double));
	side->taken = 0;
	if (side->ms == NULL)
	{
		fprintf(stderr, "client: out of memory\n");
		exit(1);
	}
}

/*
 * One request+approve on a side; with record, its time is a sample.
 * Returns 0, or 1 when the run did not succeed (said on stderr).
 */
static int
side_run(BenchSide *side, const char *lang, const char *code, int record)
{
	PGconn	   *conn = side->conn;
	char		inv[37],
				appr[37];
	double		t0;
	int			done = 0;
	char	   *channel;

	request(conn, side->ws, side->agent, lang, code, inv, appr);
	channel = listen_channel(conn, inv);
	wait_warm();
	approve(conn, appr);
	t0 = now_ms();
	for (int waited = 0; !done;)
	{
		PGnotify   *note;
		fd_set		r;
		int			sock = PQsocket(conn);
		struct timeval tv = {1, 0};
		int			rc;

		/*
		 * A notification may already be queued: libpq reads those that
		 * arrive with a query's results (finished() below).
		 */
		while ((note = PQnotifies(conn)) != NULL)
		{
			int			hint = done_hint(note->extra);

			PQfreemem(note);
			if (hint && finished(conn, inv))
				done = 1;
		}
		if (done)
			break;
		FD_ZERO(&r);
		FD_SET(sock, &r);
		rc = select(sock + 1, &r, NULL, NULL, &tv);
		if (rc < 0)
		{
			perror("client: select");
			return 1;
		}
		if (rc > 0)
		{
			PQconsumeInput(conn);
			continue;
		}
		/* a hint is only a hint: look once a second, as agent.wait() does */
		if (finished(conn, inv))
		{
			fprintf(stderr, "client: %s: %s ended without a done notification seen\n",
					side->label, inv);
			done = 1;
		}
		else if (++waited >= 60)
		{
			fprintf(stderr, "client: %s: no result within 60 s for %s\n", side->label, inv);
			return 1;
		}
	}
	if (record)
		side->ms[side->taken++] = now_ms() - t0;
	listen_verb(conn, "UNLISTEN", channel);
	PQfreemem(channel);
	if (!succeeded(conn, inv))
	{
		fprintf(stderr, "client: (on %s)\n", side->label);
		return 1;
	}
	return 0;
}

/* "p50 p99 mean" of a side's samples (sorts them). */
static void
side_print(BenchSide *side, const char *sep)
{
	int			n = side->taken;
	double		sum = 0;

	for (int i = 0; i < n; i++)
		sum += side->ms[i];
	qsort(side->ms, n, sizeof(double), cmp_double);
	printf("%.2f %.2f %.2f%s", side->ms[n / 2],
		   side->ms[(int) (n * 0.99) < n ? (int) (n * 0.99) : n - 1], sum / n, sep);
}

static int
latency(int argc, char **argv)
{
	const char *lang = argv[6],
			   *code = argv[7];
	int			n = atoi(argv[8]);
	int			nsides = argc == 14 ? 2 : 1;
	int			rounds = nsides == 2 ? atoi(argv[9]) : 1;
	BenchSide	sides[2];

	if (n < 1 || rounds < 1 || rounds > n)
	{
		fprintf(stderr, "client: N must be at least 1 and ROUNDS between 1 and N\n");
		return 2;
	}
	side_open(&sides[0], "this", argv + 2, n);
	if (nsides == 2)
		side_open(&sides[1], "base", argv + 10, n);

	/*
	 * The first runs of a connection warm caches (plans, page cache); they
	 * are not counted.
	 */
	for (int s = 0; s < nsides; s++)
		for (int i = 0; i < 3; i++)
			if (side_run(&sides[s], lang, code, 0) != 0)
				return 1;

	/*
	 * Round r takes runs [n*r/rounds, n*(r+1)/rounds) of each side; the
	 * base goes first in even rounds, this install in odd ones.
	 */
	for (int r = 0; r < rounds; r++)
	{
		int			block = n * (r + 1) / rounds - n * r / rounds;

		for (int k = 0; k < nsides; k++)
		{
			BenchSide  *side = &sides[nsides == 2 && r % 2 == 0 ? 1 - k : k];

			for (int i = 0; i < block; i++)
				if (side_run(side, lang, code, 1) != 0)
					return 1;
		}
	}
	for (int s = 0; s < nsides; s++)
	{
		side_print(&sides[s], s + 1 < nsides ? " " : "\n");
		PQfinish(sides[s].conn);
	}
	return 0;
}

/*
 * Until a "done" hint on the channel the caller LISTENs on says the run
 * ended (or, without one, the once-a-second look says so).  0, or 1 when
 * no result came within 60 s.
 */
static int
await_done(PGconn *conn, const char *inv, const char *label)
{
	for (int waited = 0;;)
	{
		PGnotify   *note;
		fd_set		r;
		int			sock = PQsocket(conn);
		struct timeval tv = {1, 0};
		int			rc;

		while ((note = PQnotifies(conn)) != NULL)
		{
			int			hint = done_hint(note->extra);

			PQfreemem(note);
			if (hint && finished(conn, inv))
				return 0;
		}
		FD_ZERO(&r);
		FD_SET(sock, &r);
		rc = select(sock + 1, &r, NULL, NULL, &tv);
		if (rc < 0)
		{
			perror("client: select");
			return 1;
		}
		if (rc > 0)
		{
			PQconsumeInput(conn);
			continue;
		}
		if (finished(conn, inv))
		{
			fprintf(stderr, "client: %s: %s ended without a done notification seen\n", label, inv);
			return 0;
		}
		if (++waited >= 60)
		{
			fprintf(stderr, "client: %s: no result within 60 s for %s\n", label, inv);
			return 1;
		}
	}
}

/*
 * One run of the approval-policy rows.  auto: the agent's policy approves
 * it in the request's transaction, whose commit wakes the runners; then
 * agent.wait() until it ends (wait_final); timed from before the request.
 * Else today's path: request, LISTEN,
 * approve, done; timed from before the request (req_ms: request ->
 * finished with an immediate approval), from approve's return (appr_ms:
 * approve -> finished, the existing rows' interval) and from before the
 * approve call (call_ms: the approve's own transaction on the clock, as
 * the request's is on an automatic run's: the one transaction an
 * automatic run saves is the approve).  The warm pool is waited for,
 * untimed, before the request.
 */
static int
policy_run(PGconn *conn, const char *ws, const char *agent, const char *lang,
		   const char *code, int automatic, double *req_ms, double *appr_ms,
		   double *call_ms)
{
	char		inv[37],
				appr[37];
	char	   *channel;
	double		t0,
				t1,
				tc;

	wait_warm();
	t0 = now_ms();
	if (automatic)
	{
		if (!request(conn, ws, agent, lang, code, inv, appr))
		{
			fprintf(stderr, "client: the policy did not approve the request of agent %s\n", agent);
			return 1;
		}
		/*
		 * The run started at the request's commit.  Its channel is known
		 * only now, so a LISTEN would be one more round trip on the
		 * clock: wait with agent.wait(), the one round trip the API has
		 * for a run whose id the caller has just learnt.
		 */
		t1 = tc = t0;
		if (!wait_final(conn, inv, "60 s"))
		{
			fprintf(stderr, "client: auto: no result within 60 s for %s\n", inv);
			return 1;
		}
		*req_ms = now_ms() - t0;
		*appr_ms = *call_ms = *req_ms;
		return succeeded(conn, inv) ? 0 : 1;
	}
	else
	{
		if (request(conn, ws, agent, lang, code, inv, appr))
		{
			fprintf(stderr, "client: agent %s's request was approved by a policy: not the approve path\n", agent);
			return 1;
		}
		channel = listen_channel(conn, inv);
		tc = now_ms();
		approve(conn, appr);
		t1 = now_ms();
	}
	if (await_done(conn, inv, "approve") != 0)
		return 1;
	*req_ms = now_ms() - t0;
	*appr_ms = now_ms() - t1;
	*call_ms = now_ms() - tc;
	listen_verb(conn, "UNLISTEN", channel);
	PQfreemem(channel);
	return succeeded(conn, inv) ? 0 : 1;
}

static void
print_samples(double *ms, int n, const char *sep)
{
	qsort(ms, n, sizeof(double), cmp_double);
	printf("%.2f %.2f%s", ms[n / 2], ms[(int) (n * 0.99) < n ? (int) (n * 0.99) : n - 1], sep);
}

/*
 * client policy CONNINFO ORG WS AGENT AUTO_AGENT LANGUAGE CODE N ROUNDS:
 * N runs through AGENT (a person approves: today's path) and N through
 * AUTO_AGENT (the org's approval policy approves them), both of one org,
 * after 3 uncounted runs of each, in ROUNDS blocks that alternate (the
 * one that goes first alternates too).  Prints "approve_p50 approve_p99
 * reqappr_p50 reqappr_p99 auto_p50 auto_p99 call_p50 call_p99": approve
 * -> finished, request -> finished with the approval right after the
 * request, request -> finished approved by the policy, and approve call
 * -> finished (policy_run).
 */
static int
policy_rows(char **argv)
{
	const char *ws = argv[4],
			   *agents[2] = {argv[5], argv[6]},
			   *lang = argv[7],
			   *code = argv[8];
	int			n = atoi(argv[9]),
				rounds = atoi(argv[10]);
	PGconn	   *conn;
	double	   *appr = calloc(n, sizeof(double)),
			   *reqappr = calloc(n, sizeof(double)),
			   *automatic = calloc(n, sizeof(double)),
			   *call = calloc(n, sizeof(double)),
				unused;
	int			taken[2] = {0, 0};

	if (n < 1 || rounds < 1 || rounds > n || !appr || !reqappr || !automatic || !call)
	{
		fprintf(stderr, "client: N must be at least 1 and ROUNDS between 1 and N\n");
		return 2;
	}
	conn = connect_tenant(argv[2], argv[3], ws);
	for (int a = 0; a < 2; a++)
		for (int i = 0; i < 3; i++)
			if (policy_run(conn, ws, agents[a], lang, code, a, &unused, &unused, &unused) != 0)
				return 1;
	for (int r = 0; r < rounds; r++)
	{
		int			block = n * (r + 1) / rounds - n * r / rounds;

		for (int k = 0; k < 2; k++)
		{
			int			a = r % 2 == 0 ? k : 1 - k;

			for (int i = 0; i < block; i++, taken[a]++)
				if (a == 0 ? policy_run(conn, ws, agents[0], lang, code, 0, &reqappr[taken[0]], &appr[taken[0]],
										&call[taken[0]])
					: policy_run(conn, ws, agents[1], lang, code, 1, &automatic[taken[1]], &unused, &unused))
					return 1;
		}
	}
	print_samples(appr, n, " ");
	print_samples(reqappr, n, " ");
	print_samples(automatic, n, " ");
	print_samples(call, n, "\n");
	PQfinish(conn);
	return 0;
}

static int
throughput(char **argv)
{
	const char *conninfo = argv[2],
			   *org = argv[3],
			   *ws = argv[4],
			   *agent = argv[5],
			   *lang = argv[6],
			   *code = argv[7];
	int			clients = atoi(argv[8]);
	double		seconds = atof(argv[9]);
	int			fds[2];
	long		total = 0;
	double		t0 = now_ms(),
				t1;

	if (pipe(fds) != 0)
		return 1;
	for (int c = 0; c < clients; c++)
	{
		if (fork() == 0)
		{
			PGconn	   *conn = connect_tenant(conninfo, org, ws);
			double		end = t0 + seconds * 1000;
			long		count = 0;

			close(fds[0]);
			while (now_ms() < end)
			{
				char		inv[37],
							appr[37];
				const char *p[1] = {inv};
				PGresult   *res;

				if (!request(conn, ws, agent, lang, code, inv, appr))
					approve(conn, appr);
				res = exec_ok(conn, "SELECT agent.wait($1::uuid, '60 s')", 1, p);
				if (strcmp(PQgetvalue(res, 0, 0), "succeeded") == 0)
					count++;
				PQclear(res);
			}
			if (write(fds[1], &count, sizeof(count)) != sizeof(count))
				_exit(1);
			PQfinish(conn);
			_exit(0);
		}
	}
	close(fds[1]);
	for (int c = 0; c < clients; c++)
	{
		long		count;

		if (read(fds[0], &count, sizeof(count)) == sizeof(count))
			total += count;
	}
	while (wait(NULL) > 0)
		;
	t1 = now_ms();
	printf("%ld %.1f %.3f\n", total, total / ((t1 - t0) / 1000.0), (t1 - t0) / 1000.0);
	return 0;
}

int
main(int argc, char **argv)
{
	if ((argc == 9 || argc == 14) && strcmp(argv[1], "latency") == 0)
		return latency(argc, argv);
	if (argc == 10 && strcmp(argv[1], "throughput") == 0)
		return throughput(argv);
	if (argc == 11 && strcmp(argv[1], "policy") == 0)
		return policy_rows(argv);
	fprintf(stderr,
			"usage: client latency CONNINFO ORG WS AGENT LANGUAGE CODE N\n"
			"                      [ROUNDS BASE_CONNINFO BASE_ORG BASE_WS BASE_AGENT]\n"
			"       client throughput CONNINFO ORG WS AGENT LANGUAGE CODE CLIENTS SECONDS\n"
			"       client policy CONNINFO ORG WS AGENT AUTO_AGENT LANGUAGE CODE N ROUNDS\n");
	return 2;
}
