/*-------------------------------------------------------------------------
 *
 * db.c
 *		The runner's connection to the database: connecting (and again,
 *		with backoff, whenever it breaks), LISTEN for wake-ups, and a step
 *		as one parameterised call, or several pipelined in one round trip,
 *		with a deadline.
 *
 * The connection is DOWN (waiting for the next attempt), CONNECTING
 * (libpq's PQconnectPoll, driven by the loop's poll()) or UP.  Nothing
 * here blocks longer than a deadline: a connection that does not answer
 * in time is dropped and made again, so that the loop goes on reading its
 * jails' output and reaping them while the database is away.  Every step
 * is idempotent in SQL (fenced on the state it expects), so a step whose
 * answer was lost may be sent again.
 *
 * A step's deadline is its own (STEP_TIMEOUT_MS, and more for a large
 * one), not the fence's, and the start of a connection resolves a host
 * name synchronously (PQconnectStartParams: DNS, as long as the resolver
 * takes): the self-fencing kill does not wait for either, the fence's
 * thread does it at the deadline wherever this thread waits (fence.c).
 * Cutting a step short at a fence deadline would add nothing to that and
 * lose what the step could still do: a heartbeat answered late still
 * renews the runs claimed after the one whose deadline passed, and a
 * finish that arrives in time is judged by the database's deadline, not
 * ours.
 *
 * The conninfo is the operator's (config.c); this file adds what the
 * runner needs unless the operator set it: application_name, a short
 * lock_timeout (no step may wait long for a lock a tenant holds),
 * target_session_attrs=read-write (with several hosts, the primary), a
 * connect timeout and TCP keepalives; for the local runner, role
 * sandbox_runner_local (a member of agent_runner: the runner's rights only,
 * whatever the login role may do).  In pipeline mode the calls up to a
 * sync point form one implicit transaction: they commit together, or a
 * failure rolls them all back.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <poll.h>

#include "libpq-fe.h"

#include "../channels.h"

/* A step's deadline: this long, plus a second per megabyte it sends and
 * STEP_CALL_MS per call it pipelines (a run may report 10,000 files). */
#define STEP_TIMEOUT_MS		10000
#define STEP_CALL_MS		2
#define CONNECT_TIMEOUT_MS	10000
#define BACKOFF_MIN_MS		500
#define BACKOFF_MAX_MS		30000
/* Backstop for any lock a step did not foresee (the SQL steps skip or NOWAIT theirs). */
#define RUNNER_LOCK_TIMEOUT	"500ms"
/* The role the local runner acts as (45_runners.sql creates it). */
#define LOCAL_RUNNER_ROLE	"sandbox_runner_local"

typedef enum DbState
{
	DBS_DOWN,
	DBS_CONNECTING,
	DBS_UP
} DbState;

static PGconn *conn = NULL;
static DbState state = DBS_DOWN;
static PostgresPollingStatusType poll_status;
static msec next_attempt = 0;
static msec connect_deadline = 0;
static int	backoff_ms = BACKOFF_MIN_MS;
static char status_text[512] = "not connected";
static bool woken_work = false;
static bool woken_cancel = false;
static char woken_invocation[37] = "";	/* the last wake-up's invocation, or "" */
static char last_failure[400] = "";
static msec last_failure_at = 0;

bool
db_connected(void)
{
	return state == DBS_UP;
}

const char *
db_status(void)
{
	return status_text;
}

msec
db_next_attempt(void)
{
	if (state == DBS_DOWN)
		return next_attempt;
	if (state == DBS_CONNECTING)
		return connect_deadline;
	return 0;
}

int
db_socket(void)
{
	return (state != DBS_DOWN && conn) ? PQsocket(conn) : -1;
}

short
db_poll_events(void)
{
	if (state == DBS_CONNECTING)
		return poll_status == PGRES_POLLING_WRITING ? POLLOUT : POLLIN;
	if (state == DBS_UP)
		return POLLIN;
	return 0;
}

void
db_disconnect(const char *why)
{
	char		reason[400];

	/* why may be the connection's own error message: copy it first */
	strlcpy(reason, why ? why : "", sizeof(reason));
	reason[strcspn(reason, "\n")] = '\0';
	if (conn)
	{
		if (state == DBS_UP)
			runner_log(RLOG_WARNING, "lost the connection to the database: %s", reason);
		else if (strcmp(reason, last_failure) != 0 || runner_now_ms() - last_failure_at > 60000)
		{
			/* once per reason and minute, not once per attempt */
			runner_log(RLOG_WARNING, "could not connect to the database: %s", reason);
			strlcpy(last_failure, reason, sizeof(last_failure));
			last_failure_at = runner_now_ms();
		}
		PQfinish(conn);
	}
	conn = NULL;
	state = DBS_DOWN;
	snprintf(status_text, sizeof(status_text), "not connected: %s", reason);
	status_dirty = true;
	next_attempt = runner_now_ms() + backoff_ms;
	backoff_ms = Min(backoff_ms * 2, BACKOFF_MAX_MS);
}

/* ---- connecting ---- */

/* Set keyword to value in the (keyword, value) arrays unless it is set. */
static void
conn_default(const char **kw, const char **val, int *n, const char *keyword, const char *value)
{
	for (int i = 0; i < *n; i++)
		if (strcmp(kw[i], keyword) == 0)
		{
			if (val[i] == NULL || val[i][0] == '\0')
				val[i] = value;
			return;
		}
	kw[*n] = keyword;
	val[*n] = value;
	(*n)++;
}

/*
 * The connection's parameters: the operator's conninfo and what the runner
 * adds (see the header).  kw/val get at most 64 entries and a NULL; the
 * strings live until the next call (*opts: free with PQconninfoFree).
 * False with *err (PQfreemem it) when the conninfo does not parse.
 */
bool
db_conn_params(const char **kw, const char **val, PQconninfoOption **opts, char **err)
{
	static char appname[128];
	static char options[1024];
	int			n = 0;

	*opts = PQconninfoParse(runner_conf.conninfo, err);
	if (*opts == NULL)
		return false;
	options[0] = '\0';
	for (PQconninfoOption *o = *opts; o->keyword && n < 48; o++)
	{
		if (o->val == NULL)
			continue;
		if (strcmp(o->keyword, "options") == 0)
		{
			strlcpy(options, o->val, sizeof(options));
			continue;
		}
		kw[n] = o->keyword;
		val[n] = o->val;
		n++;
	}
	/* ours come last: a later -c wins, and lock_timeout is not the operator's to lift */
	strlcat(options, " -c lock_timeout=" RUNNER_LOCK_TIMEOUT, sizeof(options));
	/* the local runner logs in as the server's OS user and acts as its role */
	if (runner_local)
		strlcat(options, " -c role=" LOCAL_RUNNER_ROLE, sizeof(options));
	kw[n] = "options";
	val[n] = options;
	n++;
	snprintf(appname, sizeof(appname), "sandbox-runner %s", runner_conf.name);
	conn_default(kw, val, &n, "application_name", appname);
	conn_default(kw, val, &n, "target_session_attrs", "read-write");
	conn_default(kw, val, &n, "connect_timeout", "10");
	conn_default(kw, val, &n, "keepalives", "1");
	conn_default(kw, val, &n, "keepalives_idle", "10");
	conn_default(kw, val, &n, "keepalives_interval", "5");
	conn_default(kw, val, &n, "keepalives_count", "3");
	conn_default(kw, val, &n, "tcp_user_timeout", "20000");
	kw[n] = NULL;
	val[n] = NULL;
	return true;
}

/* Start connecting (non-blocking); the loop drives it with db_progress(). */
void
db_start_connect(void)
{
	PQconninfoOption *opts;
	char	   *err = NULL;
	const char *kw[64];
	const char *val[64];

	if (state != DBS_DOWN)
		return;
	if (!db_conn_params(kw, val, &opts, &err))
	{
		snprintf(status_text, sizeof(status_text), "invalid conninfo: %s",
				 err ? err : "out of memory");
		runner_log(RLOG_ERROR, "%s", status_text);
		PQfreemem(err);
		next_attempt = runner_now_ms() + BACKOFF_MAX_MS;
		return;
	}
	conn = PQconnectStartParams(kw, val, 0);
	PQconninfoFree(opts);
	if (conn == NULL || PQstatus(conn) == CONNECTION_BAD)
	{
		db_disconnect(conn ? PQerrorMessage(conn) : "out of memory");
		return;
	}
	state = DBS_CONNECTING;
	poll_status = PGRES_POLLING_WRITING;
	connect_deadline = runner_now_ms() + CONNECT_TIMEOUT_MS;
	snprintf(status_text, sizeof(status_text), "connecting");
}

/* Strip libpq's trailing newline from an error message (a copy). */
static const char *
one_line(const char *msg, char *buf, size_t len)
{
	size_t		l;

	strlcpy(buf, msg ? msg : "", len);
	l = strlen(buf);
	while (l > 0 && (buf[l - 1] == '\n' || buf[l - 1] == '\r'))
		buf[--l] = '\0';
	return buf;
}

/* Collect the notifications that arrived (only hints: no payload is read). */
static void
take_notifies(void)
{
	PGnotify   *n;

	while ((n = PQnotifies(conn)) != NULL)
	{
		if (strcmp(n->relname, SANDBOX_CHANNEL_CANCEL) == 0)
			woken_cancel = true;
		else
		{
			woken_work = true;
			/* an approval names its invocation: only a well-formed id is kept */
			if (strlen(n->extra) == 36 && strspn(n->extra, "0123456789abcdef-") == 36)
				strlcpy(woken_invocation, n->extra, sizeof(woken_invocation));
		}
		PQfreemem(n);
	}
}

/*
 * Drive the connection after poll() said its socket is ready (revents),
 * or on a timeout.  *connected_now: the connection just came up (the
 * caller registers, recovers, looks at the queue).  *work, *cancel: a
 * wake-up arrived (they are only ever set here, never cleared).
 */
void
db_progress(short revents, bool *connected_now, bool *work, bool *cancel)
{
	char		buf[512];

	*connected_now = false;
	if (state == DBS_DOWN)
	{
		if (runner_now_ms() >= next_attempt)
			db_start_connect();
		return;
	}
	if (state == DBS_CONNECTING)
	{
		if (revents == 0 && runner_now_ms() >= connect_deadline)
		{
			db_disconnect("timeout while connecting");
			return;
		}
		if (revents == 0)
			return;
		poll_status = PQconnectPoll(conn);
		if (poll_status == PGRES_POLLING_FAILED)
			db_disconnect(one_line(PQerrorMessage(conn), buf, sizeof(buf)));
		else if (poll_status == PGRES_POLLING_OK)
		{
			state = DBS_UP;
			last_failure[0] = '\0';
			/* the backoff is reset once the runner is let in (db_accepted) */
			PQsetnonblocking(conn, 1);
			snprintf(status_text, sizeof(status_text), "connected to %s:%s as %s",
					 PQhost(conn), PQport(conn), PQuser(conn));
			*connected_now = true;
		}
		return;
	}
	if (revents & (POLLIN | POLLHUP | POLLERR))
	{
		if (!PQconsumeInput(conn))
		{
			db_disconnect(one_line(PQerrorMessage(conn), buf, sizeof(buf)));
			return;
		}
		take_notifies();
	}
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		db_disconnect(one_line(PQerrorMessage(conn), buf, sizeof(buf)));
		return;
	}
	*work |= woken_work;
	*cancel |= woken_cancel;
	woken_work = woken_cancel = false;
}

/*
 * The invocation the last wake-up named (copied into buf, 37 bytes), or
 * NULL; forgotten once taken: the claim tries it first (a hint only).
 */
const char *
db_take_notified(char *buf)
{
	if (woken_invocation[0] == '\0')
		return NULL;
	strlcpy(buf, woken_invocation, 37);
	woken_invocation[0] = '\0';
	return buf;
}

/*
 * The wake-ups read while a step ran (take_notifies in db_batch_run): the
 * socket has nothing left to say about them, so the loop asks before it
 * waits, or a NOTIFY read during a step would wait for the slow poll.
 */
void
db_take_wakeups(bool *work, bool *cancel)
{
	if (conn && state == DBS_UP)
		take_notifies();
	*work |= woken_work;
	*cancel |= woken_cancel;
	woken_work = woken_cancel = false;
}

/*
 * The connection is up and the database let us in (listening,
 * registered or renewed): the next failure starts from the shortest
 * backoff again.  A connection that is refused after it is made (a
 * removed runner's registration) keeps doubling it.
 */
void
db_accepted(void)
{
	backoff_ms = BACKOFF_MIN_MS;
}

/* ---- steps ---- */

/* Wait until the socket is ready for events, or the deadline: false on timeout. */
static bool
wait_socket(short events, msec deadline)
{
	struct pollfd p;
	int			rc;

	p.fd = PQsocket(conn);
	p.events = events;
	do
	{
		long		left = (long) Max(deadline - runner_now_ms(), 0);

		rc = poll(&p, 1, left);
	} while (rc < 0 && errno == EINTR);
	return rc > 0;
}

/* Send everything queued (reading what comes back meanwhile). */
static bool
flush_all(msec deadline, const char **why)
{
	int			r;

	while ((r = PQflush(conn)) == 1)
	{
		if (!wait_socket(POLLOUT | POLLIN, deadline))
		{
			*why = "timeout while sending a step";
			return false;
		}
		if (!PQconsumeInput(conn))
		{
			*why = PQerrorMessage(conn);
			return false;
		}
	}
	if (r < 0)
		*why = PQerrorMessage(conn);
	return r == 0;
}

/* The next result (NULL at the end of one query's), waiting until the deadline. */
static PGresult *
next_result(msec deadline, bool *lost, const char **why)
{
	while (PQisBusy(conn))
	{
		if (!wait_socket(POLLIN, deadline))
		{
			*lost = true;
			*why = "timeout while waiting for a step";
			return NULL;
		}
		if (!PQconsumeInput(conn))
		{
			*lost = true;
			*why = PQerrorMessage(conn);
			return NULL;
		}
	}
	return PQgetResult(conn);
}

static void
set_lost(DbResult *r, const char *why)
{
	char		buf[512];

	r->outcome = DB_LOST;
	r->message = pg_strdup(one_line(why, buf, sizeof(buf)));
}

/* Fill r from one query's result res (taking it). */
static void
set_result(DbResult *r, PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);
	char		buf[1024];

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
	{
		r->outcome = DB_OK;
		r->res = res;
		return;
	}
	r->outcome = DB_FAILED;
	if (st == PGRES_PIPELINE_ABORTED)
		r->message = pg_strdup("not run: an earlier call of its transaction failed");
	else
	{
		const char *code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

		strlcpy(r->sqlstate, code ? code : "", sizeof(r->sqlstate));
		r->message = pg_strdup(one_line(msg ? msg : PQresultErrorMessage(res), buf, sizeof(buf)));
	}
	PQclear(res);
}

static bool
send_query(const char *sql, int nparams, const DbParam *params)
{
	const char *values[16];
	int			lengths[16];
	int			formats[16];

	for (int i = 0; i < nparams && i < 16; i++)
	{
		values[i] = params[i].value;
		lengths[i] = params[i].len < 0 ? 0 : params[i].len;
		formats[i] = params[i].len < 0 ? 0 : 1;
	}
	return nparams <= 16 &&
		PQsendQueryParams(conn, sql, nparams, NULL, values, lengths, formats, 0) == 1;
}

/*
 * One call, in one round trip: in its own transaction, or in the one the
 * caller opened.  DB_LOST also when there is no connection.
 */
DbResult
db_call(const char *sql, int nparams, const DbParam *params)
{
	DbBatch		b;
	DbResult	r;

	db_batch_init(&b);
	db_batch_add(&b, sql, nparams, params);
	(void) db_batch_run(&b);
	r = b.items[0].r;
	b.items[0].r.res = NULL;
	b.items[0].r.message = NULL;
	db_batch_free(&b);
	return r;
}

void
db_result_free(DbResult *r)
{
	if (r->res)
		PQclear(r->res);
	free(r->message);
	r->res = NULL;
	r->message = NULL;
}

const char *
db_value(const DbResult *r, int row, int col)
{
	if (r->res == NULL || row >= PQntuples(r->res) || col >= PQnfields(r->res) ||
		PQgetisnull(r->res, row, col))
		return NULL;
	return PQgetvalue(r->res, row, col);
}

int
db_ntuples(const DbResult *r)
{
	return r->res ? PQntuples(r->res) : 0;
}

bool
db_in_transaction(void)
{
	return state == DBS_UP && PQtransactionStatus(conn) != PQTRANS_IDLE;
}

/*
 * Listen for the wake-ups: sandbox_ext_work when work was committed (an
 * approval, a session that ended), sandbox_ext_cancel when a cancel was.
 * They are hints; the slow poll finds what a lost one would have said.
 */
bool
db_listen(void)
{
	DbBatch		b;
	DbOutcome	o;

	db_batch_init(&b);
	db_batch_add(&b, "LISTEN " SANDBOX_CHANNEL_WORK, 0, NULL);
	db_batch_add(&b, "LISTEN " SANDBOX_CHANNEL_CANCEL, 0, NULL);
	o = db_batch_run(&b);
	if (o == DB_FAILED)
	{
		runner_log(RLOG_WARNING, "could not listen for wake-ups: %s",
				   b.items[0].r.message ? b.items[0].r.message : b.items[1].r.message);
		db_disconnect("could not listen for wake-ups");
	}
	db_batch_free(&b);
	return o == DB_OK;
}

/* ---- pipelines ---- */

void
db_batch_init(DbBatch *b)
{
	memset(b, 0, sizeof(*b));
}

static DbBatchItem *
batch_item(DbBatch *b)
{
	DbBatchItem *it;

	if (b->n == b->cap)
	{
		b->cap = b->cap ? b->cap * 2 : 8;
		b->items = pg_realloc(b->items, sizeof(DbBatchItem) * b->cap);
	}
	it = &b->items[b->n++];
	memset(it, 0, sizeof(*it));
	return it;
}

void
db_batch_add(DbBatch *b, const char *sql, int nparams, const DbParam *params)
{
	DbBatchItem *it = batch_item(b);

	it->sql = sql;
	it->nparams = nparams;
	it->params = params;
	for (int i = 0; i < nparams; i++)
		if (params[i].value)
			b->bytes += params[i].len < 0 ? strlen(params[i].value) : (size_t) params[i].len;
}

/* A sync point: the calls before it (back to the previous one) are one transaction. */
void
db_batch_sync(DbBatch *b)
{
	if (b->n > 0 && b->items[b->n - 1].sql != NULL)
		(void) batch_item(b);
}

/*
 * Send every call of the batch in one round trip and read their results
 * into the items.  Returns DB_LOST when the connection is gone (each item
 * then is DB_LOST), DB_FAILED when any call failed, else DB_OK.
 */
DbOutcome
db_batch_run(DbBatch *b)
{
	msec		deadline;
	const char *why = NULL;
	bool		lost = false;
	DbOutcome	worst = DB_OK;

	db_batch_sync(b);
	if (state != DBS_UP)
	{
		for (int i = 0; i < b->n; i++)
			if (b->items[i].sql)
				set_lost(&b->items[i].r, status_text);
		return DB_LOST;
	}
	deadline = runner_now_ms() + STEP_TIMEOUT_MS + (msec) (b->bytes / 1000) + (msec) b->n * STEP_CALL_MS;
	if (!PQenterPipelineMode(conn))
	{
		why = PQerrorMessage(conn);
		lost = true;
	}
	for (int i = 0; i < b->n && !lost; i++)
	{
		if (b->items[i].sql ? !send_query(b->items[i].sql, b->items[i].nparams, b->items[i].params)
			: PQpipelineSync(conn) != 1)
		{
			why = PQerrorMessage(conn);
			lost = true;
		}
	}
	if (!lost && !flush_all(deadline, &why))
		lost = true;
	for (int i = 0; i < b->n && !lost; i++)
	{
		DbBatchItem *it = &b->items[i];
		PGresult   *res = next_result(deadline, &lost, &why);

		if (lost)
			break;
		if (it->sql == NULL)
		{
			/* the sync point's own result */
			if (res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC)
			{
				lost = true;
				why = "the pipeline is out of step";
			}
			if (res)
				PQclear(res);
			continue;
		}
		if (res == NULL)
		{
			lost = true;
			why = "a step returned no result";
			break;
		}
		set_result(&it->r, res);
		if (it->r.outcome != DB_OK)
			worst = DB_FAILED;
		/* the end of this query's results */
		res = next_result(deadline, &lost, &why);
		if (res)
		{
			PQclear(res);
			lost = true;
			why = "a step returned more than one result";
		}
	}
	if (!lost)
		take_notifies();
	if (!lost && !PQexitPipelineMode(conn))
	{
		lost = true;
		why = PQerrorMessage(conn);
	}
	if (lost || PQstatus(conn) == CONNECTION_BAD)
	{
		char		buf[512];

		one_line(why ? why : PQerrorMessage(conn), buf, sizeof(buf));
		for (int i = 0; i < b->n; i++)
			if (b->items[i].sql)
			{
				db_result_free(&b->items[i].r);
				set_lost(&b->items[i].r, buf);
			}
		db_disconnect(buf);
		return DB_LOST;
	}
	return worst;
}

void
db_batch_free(DbBatch *b)
{
	for (int i = 0; i < b->n; i++)
		db_result_free(&b->items[i].r);
	free(b->items);
	memset(b, 0, sizeof(*b));
}
