/*-------------------------------------------------------------------------
 *
 * steps.c
 *		A run's steps in the database, as the runner takes them: each is
 *		one parameterised call of one named SQL function of
 *		sql/src/45_runners.sql, which states the step's contract, is fenced
 *		on this runner's identity and the invocation's lease, and is granted
 *		to agent_runner.  No other SQL is run by the runner (but BEGIN and
 *		COMMIT around the prepare step, and LISTEN): a guarantee lives in one
 *		place, in SQL.
 *
 *	register		agent.runner_register(name, host, version, slots)
 *	heartbeat		agent.runner_heartbeat(runner, incarnation, in_use, held, slots)
 *	claim			agent.runner_claim(runner, incarnation, n[, notified])
 *	prepare			agent.runner_prepare(runner, token, id, workspace_is_new),
 *					agent.runner_skill_files(runner, token, id, skill)
 *	mark started	agent.runner_mark_running(runner, token, id, pid)
 *	output			agent.runner_append_output(runner, token, id, stream, data)
 *					(steps_result.c)
 *	result			(steps_result.c) agent.runner_store_produced_file(runner, token, id, ...) per
 *					saved file, agent.runner_store_skipped_files(runner, token,
 *					id, names, statuses, reasons) for the rest at once,
 *					agent.runner_record_egress(runner, token, id, log, verdict)
 *					for a run with egress (47_egress.sql),
 *					agent.runner_finish(runner, token, id, verdict, ...)
 *	cancellations	agent.runner_cancel_requested(runner, ids)
 *	sweep			agent.runner_live_sessions(runner),
 *					agent.runner_skills_in_use(runner)
 *
 * A step for an invocation whose lease is not ours any more is refused
 * with 55000 (DB_FENCED here): the run is fenced (run.c), its sandbox
 * killed and its result dropped.  The claim and the heartbeat answer 55000
 * when another process of this runner registered since: every run is
 * fenced and the runner registers again.
 *
 * Several calls of one step (every run's output, a run's files and its
 * result) are pipelined: one round trip, one transaction.  A failed step
 * is logged; what happens to the run then is run.c's decision.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <signal.h>

#include "libpq-fe.h"

static const char SQL_REGISTER[] =
"SELECT runner_id, incarnation, lease_seconds, heartbeat_seconds, state, ended "
"FROM agent.runner_register($1, $2, $3, $4)";
static const char SQL_HEARTBEAT[] =
"SELECT state, renewed, lost, lease_seconds, heartbeat_seconds "
"FROM agent.runner_heartbeat($1, $2, $3, $4, $5)";
/*
 * has_egress came with 0.2.0, image_name, image_digest and isolation with 0.3.0:
 * read by name, so that this runner still claims from an older catalog
 * until ALTER EXTENSION ... UPDATE (no run has egress or an image there).
 * notified (0.3.0) is passed only when a wake-up named an invocation,
 * which only a 0.3.0 catalog's approvals do.
 */
#define SQL_CLAIM_COLUMNS \
"SELECT c.id, c.lease_token, c.language, c.code, c.wall_time_s, c.memory_mb, c.session_id, " \
"c.fresh_session, c.has_skills, c.max_files, c.max_bytes, c.max_file_bytes, " \
"c.output_limit_bytes, coalesce((pg_catalog.to_jsonb(c) ->> 'has_egress')::boolean, false), " \
"(pg_catalog.to_jsonb(c) ->> 'image_name') || '@' || (pg_catalog.to_jsonb(c) ->> 'image_digest'), " \
"coalesce(pg_catalog.to_jsonb(c) ->> 'isolation', 'namespaces') "
static const char SQL_CLAIM[] = SQL_CLAIM_COLUMNS "FROM agent.runner_claim($1, $2, $3) c";
static const char SQL_CLAIM_NOTIFIED[] = SQL_CLAIM_COLUMNS "FROM agent.runner_claim($1, $2, $3, $4) c";
static const char SQL_PREPARE[] =
"SELECT kind, name, content, skill_id FROM agent.runner_prepare($1, $2, $3, $4)";
static const char SQL_SKILL_FILES[] =
"SELECT path, content, executable FROM agent.runner_skill_files($1, $2, $3, $4)";
static const char SQL_MARK[] = "SELECT agent.runner_mark_running($1, $2, $3, $4)";
static const char SQL_CANCELS[] = "SELECT id FROM agent.runner_cancel_requested($1, $2) AS id";
static const char SQL_LIVE[] = "SELECT id::text FROM agent.runner_live_sessions($1) AS id";
static const char SQL_SKILLS[] = "SELECT id::text FROM agent.runner_skills_in_use($1) AS id";

/* "Not ours": the lease (or, for the runner's own calls, its registration). */
#define SQLSTATE_FENCED "55000"

RunnerIdentity me;

DbParam
step_param(const char *s)
{
	DbParam		p = {s, -1};

	return p;
}

static bool
is_true(const char *v)
{
	return v != NULL && v[0] == 't';
}

static const char *
or_empty(const char *v)
{
	return v ? v : "";
}

/* Did this result say the lease (or registration) is not ours? */
bool
step_fenced(const DbResult *r)
{
	return r->outcome == DB_FAILED && strcmp(r->sqlstate, SQLSTATE_FENCED) == 0;
}

/* The runner and lease parameters every invocation step starts with. */
void
step_lease_params(DbParam *p, const Run *run)
{
	p[0] = step_param(me.id);
	p[1] = step_param(run->lease);
	p[2] = step_param(run->id);
}

/* ---- register and heartbeat ---- */

/* Fence every run: the registration they were claimed under is gone. */
static void
fence_all(const char *why)
{
	for (int i = 0; i < nruns; i++)
		run_fence(&runs[i], why);
	me.registered = false;
}

/*
 * Register (or re-join) this runner: a new incarnation, which ends what a
 * previous process of this runner still held.  Called when a connection
 * comes up and we hold no registration (at start, or after the database
 * said another process registered since).  False when it was refused
 * (logged): the caller drops the connection and tries again later.
 */
bool
step_register(void)
{
	char		host[256] = "";
	char		slots[16];
	DbParam		p[4];
	DbResult	r;
	msec		sent = runner_now_ms();
	bool		ok;

	(void) gethostname(host, sizeof(host) - 1);
	snprintf(slots, sizeof(slots), "%d", runner_conf.slots);
	p[0] = step_param(runner_conf.name);
	p[1] = step_param(host);
	p[2] = step_param(RUNNER_VERSION);
	p[3] = step_param(slots);
	r = db_call(SQL_REGISTER, 4, p);
	ok = r.outcome == DB_OK && db_ntuples(&r) == 1;
	if (ok)
	{
		strlcpy(me.id, or_empty(db_value(&r, 0, 0)), sizeof(me.id));
		strlcpy(me.incarnation, or_empty(db_value(&r, 0, 1)), sizeof(me.incarnation));
		me.lease_ms = (msec) atoi(or_empty(db_value(&r, 0, 2))) * 1000;
		me.heartbeat_ms = (msec) Max(atoi(or_empty(db_value(&r, 0, 3))), 1) * 1000;
		strlcpy(me.state, or_empty(db_value(&r, 0, 4)), sizeof(me.state));
		me.registered = true;
		me.refused[0] = '\0';
		images_registered();	/* a new registration hears our images anew */
		secrets_registered();
		isolation_registered(); /* ... and our isolation classes */
		me.renewed_at = sent;
		me.next_heartbeat = runner_now_ms() + me.heartbeat_ms;
		runner_log(RLOG_LOG, "registered as runner \"%s\" (%s, incarnation %s, %s); lease %d s%s",
				   runner_conf.name, me.id, me.incarnation, me.state, (int) (me.lease_ms / 1000),
				   atoi(or_empty(db_value(&r, 0, 5))) > 0 ?
				   psprintf(", %s run(s) of a previous process ended", db_value(&r, 0, 5)) : "");
	}
	else if (r.outcome != DB_LOST)
	{
		snprintf(me.refused, sizeof(me.refused), "could not register runner \"%s\": %s",
				 runner_conf.name, r.message ? r.message : "no row");
		runner_log(RLOG_ERROR, "%s%s%s", me.refused, r.sqlstate[0] ? " SQLSTATE " : "", r.sqlstate);
	}
	db_result_free(&r);
	status_dirty = true;
	return ok;
}

/*
 * Renew every lease we hold (the heartbeat), report our slots and how many
 * are in use, and fence the runs the database says we no longer hold.  me.renewed_at moves
 * to when the heartbeat was sent: our leases last at least a lease from
 * then.  False when it could not be done (try again).
 */
bool
step_heartbeat(void)
{
	StringInfoData held;
	char		in_use[16];
	char		slots[16];
	DbParam		p[5];
	DbResult	r;
	msec		sent = runner_now_ms();
	bool		ok = false;
	int			n = 0;

	initStringInfo(&held);
	appendStringInfoChar(&held, '{');
	/*
	 * (a run whose sandbox the fence's thread killed is not ours to name,
	 * though its slot is not free yet: the database ends it now)
	 */
	for (int i = 0; i < nruns; i++)
		if (runs[i].phase != RUN_FREE && !fence_fired(&runs[i]))
			appendStringInfo(&held, "%s%s", n++ ? "," : "", runs[i].id);
	appendStringInfoChar(&held, '}');
	snprintf(in_use, sizeof(in_use), "%d", nactive);
	snprintf(slots, sizeof(slots), "%d", runner_conf.slots);
	p[0] = step_param(me.id);
	p[1] = step_param(me.incarnation);
	p[2] = step_param(in_use);
	p[3] = step_param(held.data);
	p[4] = step_param(slots);
	r = db_call(SQL_HEARTBEAT, 5, p);
	if (r.outcome == DB_OK && db_ntuples(&r) == 1)
	{
		/* the lease as the database counts it now (an operator may change it) */
		me.lease_ms = (msec) atoi(or_empty(db_value(&r, 0, 3))) * 1000;
		me.heartbeat_ms = (msec) Max(atoi(or_empty(db_value(&r, 0, 4))), 1) * 1000;
	}
	me.next_heartbeat = runner_now_ms() + (r.outcome == DB_OK ? me.heartbeat_ms : 1000);
	if (r.outcome == DB_OK && db_ntuples(&r) == 1)
	{
		const char *state = or_empty(db_value(&r, 0, 0));
		char	   *lost = pg_strdup(or_empty(db_value(&r, 0, 2)));
		char	   *save = NULL;

		if (strcmp(state, me.state) != 0)
		{
			runner_log(RLOG_LOG, "runner \"%s\" is %s%s", runner_conf.name, state,
					   strcmp(state, "active") == 0 ? "" : ": it claims nothing new");
			me.drained_said = false;
		}
		strlcpy(me.state, state, sizeof(me.state));
		me.renewed_at = sent;
		step_fence_update();
		for (char *t = strtok_r(lost, "{},", &save); t; t = strtok_r(NULL, "{},", &save))
			for (int i = 0; i < nruns; i++)
				if (runs[i].phase != RUN_FREE && strcmp(runs[i].id, t) == 0)
					run_fence(&runs[i], "the database says its lease is gone");
		free(lost);
		/* a drain is over when nothing runs: say so once (the operator waits for it) */
		if (strcmp(me.state, "draining") == 0 && nactive == 0 && !me.drained_said)
		{
			runner_log(RLOG_LOG, "runner \"%s\" is drained: it runs nothing and claims nothing",
					   runner_conf.name);
			me.drained_said = true;
		}
		ok = true;
	}
	else if (step_fenced(&r))
	{
		runner_log(RLOG_WARNING, "%s", r.message);
		fence_all("another process of this runner registered");
	}
	else if (r.outcome == DB_FAILED)
		runner_log(RLOG_WARNING, "the heartbeat failed: %s", r.message);
	db_result_free(&r);
	free(held.data);
	status_dirty = true;
	return ok;
}

/*
 * When our lease of a run runs out, by our clock: a lease from its claim,
 * renewed by every heartbeat since (both counted from when they were
 * sent, so never later than the database's deadline), less a margin.
 */
msec
step_lease_deadline(const Run *run)
{
	return Max(run->leased_at, me.renewed_at) + me.lease_ms - SELF_FENCE_MARGIN_MS;
}

/*
 * Is the run to be fenced: did the fence's thread kill its jail, or did
 * its lease run out by our clock (a run without a jail: claimed, exited,
 * waiting to record its result)?
 */
bool
step_fence_due(const Run *run)
{
	if (run->phase == RUN_FREE)
		return false;
	if (fence_fired(run))
		return true;
	return me.registered && me.lease_ms > 0 && runner_now_ms() >= step_lease_deadline(run);
}

/*
 * Tell the fence's thread the deadline of every running jail: after a
 * heartbeat renewed our leases (or said the lease changed).
 */
void
step_fence_update(void)
{
	for (int i = 0; i < nruns; i++)
		if (runs[i].phase == RUN_STARTED)
			fence_set_deadline(&runs[i], me.lease_ms > 0 ? step_lease_deadline(&runs[i]) : FENCE_NEVER);
}

/*
 * Self-fencing, the main thread's part: a run whose lease we could not
 * renew in time is about to be reaped, or is: whatever its sandbox does
 * now is no invocation's.  Its jail is killed (already, when the fence's
 * thread did it at the deadline, fence.c) and its result dropped before
 * the database ends it.  Called every turn and whenever the main thread
 * may have been held up (a step, a finish).
 */
void
step_self_fence(void)
{
	if (nactive == 0)
		return;
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (!step_fence_due(run))
			continue;
		if (fence_fired(run))
			run_fence(run, "its lease could not be renewed in time; the fence killed its sandbox at the deadline");
		else
		{
			runner_log(RLOG_WARNING, "could not renew the lease of invocation %s for %d s",
					   run->id, (int) ((runner_now_ms() - Max(run->leased_at, me.renewed_at)) / 1000));
			run_fence(run, "its lease could not be renewed");
		}
	}
}

/* ---- claim ---- */

/* Read one row of the claim into c (the code malloc'd). */
static void
read_claimed(const DbResult *r, int row, ClaimedRun *c)
{
	const char *v;

	memset(c, 0, sizeof(*c));
	strlcpy(c->id, or_empty(db_value(r, row, 0)), sizeof(c->id));
	strlcpy(c->lease, or_empty(db_value(r, row, 1)), sizeof(c->lease));
	strlcpy(c->language, or_empty(db_value(r, row, 2)), sizeof(c->language));
	c->code = pg_strdup(or_empty(db_value(r, row, 3)));
	v = db_value(r, row, 4);
	c->wall_s = v ? atoi(v) : runner_conf.default_wall_time_s;
	v = db_value(r, row, 5);
	c->memory_mb = v ? atoi(v) : runner_conf.default_memory_mb;
	v = db_value(r, row, 6);
	c->has_session = v != NULL;
	if (v)
		strlcpy(c->session, v, sizeof(c->session));
	c->fresh_session = is_true(db_value(r, row, 7));
	c->has_skills = is_true(db_value(r, row, 8));
	c->caps.max_files = atoi(or_empty(db_value(r, row, 9)));
	c->caps.max_total_bytes = atoll(or_empty(db_value(r, row, 10)));
	c->caps.max_file_bytes = atoll(or_empty(db_value(r, row, 11)));
	c->caps.max_scan_entries = runner_conf.workspace_entries + 1;
	c->output_limit = atoll(or_empty(db_value(r, row, 12)));
	c->has_egress = is_true(db_value(r, row, 13));
	/* NULL for a run on the host's root */
	strlcpy(c->image, or_empty(db_value(r, row, 14)), sizeof(c->image));
	/* the claim matched it to us: we said we run it (isolation.c) */
	c->gvisor = strcmp(or_empty(db_value(r, row, 15)), "gvisor") == 0;
}

/*
 * Claim up to `want` approved invocations into out[], each with its lease.
 * Returns how many, or -1 when the claim failed (logged).  Once this
 * commits every claimed run must be finished (or its lease lost).
 */
int
step_claim(int want, ClaimedRun *out)
{
	char		nbuf[16];
	char		notified[37];
	DbParam		p[4];
	DbResult	r;
	msec		sent = runner_now_ms();
	int			n = 0;

	if (!me.registered || strcmp(me.state, "active") != 0)
		return 0;
	snprintf(nbuf, sizeof(nbuf), "%d", want);
	p[0] = step_param(me.id);
	p[1] = step_param(me.incarnation);
	p[2] = step_param(nbuf);
	p[3] = step_param(db_take_notified(notified));
	if (p[3].value != NULL)
		r = db_call(SQL_CLAIM_NOTIFIED, 4, p);
	else
		r = db_call(SQL_CLAIM, 3, p);
	for (int i = 0; r.outcome == DB_OK && i < db_ntuples(&r) && n < want; i++)
	{
		read_claimed(&r, i, &out[n]);
		out[n++].leased_at = sent;
	}
	if (step_fenced(&r))
	{
		runner_log(RLOG_WARNING, "%s", r.message);
		fence_all("another process of this runner registered");
	}
	else if (r.outcome == DB_FAILED)
		runner_log(RLOG_WARNING, "claiming approved invocations failed: %s", r.message);
	if (r.outcome != DB_OK)
		n = -1;
	db_result_free(&r);
	return n;
}

/* ---- prepare ---- */

/* A bytea value of a result, unescaped (PQfreemem it); NULL when null. */
static unsigned char *
bytea_value(const DbResult *r, int row, int col, size_t *len)
{
	const char *v = db_value(r, row, col);

	*len = 0;
	return v ? PQunescapeBytea((const unsigned char *) v, len) : NULL;
}

/*
 * Materialise one skill version, unless it is on disk already.  The
 * directory (malloc'd), or NULL with *err set (*fence when the lease is
 * gone).
 */
static char *
materialize_skill(Run *run, const char *skill_id, char **err, bool *fence)
{
	bool		installed;
	char	   *final = skill_dir(skill_id, &installed);
	char	   *tmp;
	DbParam		p[4];
	DbResult	r;
	bool		ok = true;

	if (installed)
		return final;
	tmp = skill_begin(skill_id, err);
	if (tmp == NULL)
	{
		free(final);
		return NULL;
	}
	step_lease_params(p, run);
	p[3] = step_param(skill_id);
	r = db_call(SQL_SKILL_FILES, 4, p);
	if (r.outcome != DB_OK)
	{
		*err = psprintf("could not read the files of skill %s: %s", skill_id, r.message);
		*fence = step_fenced(&r);
		ok = false;
	}
	for (int i = 0; ok && i < db_ntuples(&r); i++)
	{
		size_t		len;
		unsigned char *content = bytea_value(&r, i, 1, &len);

		ok = skill_add(tmp, or_empty(db_value(&r, i, 0)), (const char *) content, len,
					   is_true(db_value(&r, i, 2)), err);
		PQfreemem(content);
	}
	db_result_free(&r);
	if (ok)
		ok = skill_install(tmp, final, err);
	else
		files_remove_dir(tmp);
	free(tmp);
	if (!ok)
	{
		free(final);
		return NULL;
	}
	return final;
}

/* Put what the prepare step returned in place; false with *err set. */
static bool
place_prepared(Run *run, const DbResult *r, char **err, bool *fence)
{
	for (int i = 0; i < db_ntuples(r); i++)
	{
		const char *kind = db_value(r, i, 0);
		const char *name = or_empty(db_value(r, i, 1));
		char	   *dir;

		if (kind && (strcmp(kind, "file") == 0 || strcmp(kind, "egress") == 0))
		{
			size_t		len;
			unsigned char *content = bytea_value(r, i, 2, &len);
			bool		ok;

			/* the policy goes beside the workspace, never in it */
			if (strcmp(kind, "egress") == 0)
				ok = egress_place_policy(run, (const char *) content, len, err);
			else
				ok = workspace_place(run, name, (const char *) content, len, err);
			PQfreemem(content);
			if (!ok)
				return false;
			continue;
		}
		if (kind && strcmp(kind, "secret") == 0)
		{
			size_t		len;
			unsigned char *content = bytea_value(r, i, 2, &len);
			bool		ok = secrets_add(run, name, (const char *) content, len, err);

			PQfreemem(content);
			if (!ok)
				return false;
			continue;
		}
		if (kind == NULL || strcmp(kind, "skill") != 0)
		{
			*err = psprintf("the prepare step returned a row of unknown kind \"%s\"",
							kind ? kind : "(null)");
			return false;
		}
		if (run->disk.nbinds >= RUNNER_MAX_SKILLS)
		{
			*err = psprintf("at most %d skills can be mounted", RUNNER_MAX_SKILLS);
			return false;
		}
		if ((dir = materialize_skill(run, or_empty(db_value(r, i, 3)), err, fence)) == NULL)
			return false;
		run->disk.binds[run->disk.nbinds++] = arena_printf(&run->arena, "%s:/skills/%s", dir, name);
		free(dir);
	}
	return true;
}

/*
 * Put the conversation's files and the agent's skills in the run's
 * workspace.  The placement is recorded (agent.session_files) in the same
 * transaction as it is written, which is open while the files are placed:
 * a failure leaves no record of files that are not there.  False with
 * run->start_error set on failure, or with the run fenced (FREE) when its
 * lease is gone.
 */
bool
step_prepare(Run *run, bool workspace_is_new)
{
	DbBatch		b;
	DbParam		p[4];
	char	   *err = NULL;
	bool		fence = false;
	bool		ok;

	step_lease_params(p, run);
	p[3] = step_param(workspace_is_new ? "true" : "false");
	db_batch_init(&b);
	db_batch_add(&b, "BEGIN", 0, NULL);
	db_batch_add(&b, SQL_PREPARE, 4, p);
	ok = db_batch_run(&b) == DB_OK;
	if (!ok)
	{
		const DbResult *bad = b.items[1].r.outcome != DB_OK ? &b.items[1].r : &b.items[0].r;

		err = pg_strdup(or_empty(bad->message));
		fence = step_fenced(bad);
	}
	else
		ok = place_prepared(run, &b.items[1].r, &err, &fence);
	db_batch_free(&b);
	if (ok)
	{
		DbResult	r = db_call("COMMIT", 0, NULL);

		ok = r.outcome == DB_OK;
		if (!ok)
			err = pg_strdup(or_empty(r.message));
		db_result_free(&r);
	}
	if (!ok && db_in_transaction())
	{
		DbResult	r = db_call("ROLLBACK", 0, NULL);

		db_result_free(&r);
	}
	if (fence)
		run_fence(run, err);
	else if (!ok)
	{
		run->start_error = arena_strdup(&run->arena, err ? err : "could not prepare the workspace");
		runner_log(RLOG_LOG, "could not prepare invocation %s: %s", run->id, run->start_error);
	}
	free(err);
	return ok;
}

/* ---- mark started ---- */

/*
 * Mark every started jail whose report is due (start_report_delay after
 * its start, runner.h) as running, each in a transaction of its own (one round trip); a
 * run whose lease is gone is fenced.  A run that ended before its report
 * was due is not marked: its finish records the start.  The step skips a
 * row whose lock, or whose org's audit head, is held elsewhere (a claim
 * of the same org on another runner, a tenant's open transaction): it is
 * tried again after a backoff (step_mark_due), so that a run that is running
 * says so; one that ends first is moved through running by its finish.
 */
void
step_mark_started(void)
{
	DbBatch		b;
	DbParam		p[RUNNER_MAX_SLOTS][4];
	char		pid[RUNNER_MAX_SLOTS][16];
	Run		   *marked[RUNNER_MAX_SLOTS];
	int			n = 0;
	msec		now = runner_now_ms();

	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (run->marked || (run->phase != RUN_STARTED && run->phase != RUN_EXITED))
			continue;
		if (run->mark_retry_at > now)
			continue;
		run->marked = true;
		if (run->phase != RUN_STARTED)
			continue;
		snprintf(pid[n], sizeof(pid[n]), "%d", (int) run->jail.pid);
		step_lease_params(p[n], run);
		p[n][3] = step_param(pid[n]);
		db_batch_add(&b, SQL_MARK, 4, p[n]);
		db_batch_sync(&b);
		marked[n++] = run;
	}
	if (n > 0)
	{
		(void) db_batch_run(&b);
		for (int k = 0, i = 0; k < b.n; k++)
		{
			const char *v;

			if (b.items[k].sql == NULL)
				continue;
			if (step_fenced(&b.items[k].r))
				run_fence(marked[i], b.items[k].r.message);
			else if (b.items[k].r.outcome != DB_OK)
				runner_log(RLOG_WARNING, "marking invocation %s running failed: %s",
						   marked[i]->id, b.items[k].r.message);
			else if ((v = db_value(&b.items[k].r, 0, 0)) != NULL && strcmp(v, "f") == 0 &&
					 marked[i]->phase == RUN_STARTED)
			{
				/* skipped: again after 50 ms, doubling up to 1 s */
				Run		   *run = marked[i];

				run->marked = false;
				run->mark_retry_at = runner_now_ms() + Min(50L << Min(run->mark_skips, 5), 1000L);
				run->mark_skips++;
			}
			i++;
		}
	}
	db_batch_free(&b);
}

/*
 * When a mark is due: the earliest report time of a started run not yet
 * marked, or -1 for none.
 */
msec
step_mark_due(void)
{
	msec		due = -1;

	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (run->marked || run->phase != RUN_STARTED)
			continue;
		if (due < 0 || run->mark_retry_at < due)
			due = run->mark_retry_at;
	}
	return due;
}

/* ---- cancellations ---- */

/*
 * Ask which of our running invocations someone asked to cancel, and ask
 * their jails to stop (the jail kills its sandbox and still reports a
 * verdict, which the billing rule maps to cancelled).  False when the
 * question could not be asked (ask again later).
 */
bool
step_check_cancellations(void)
{
	StringInfoData ids;
	DbParam		p[2];
	DbResult	r;
	int			n = 0;

	initStringInfo(&ids);
	appendStringInfoChar(&ids, '{');
	for (int i = 0; i < nruns; i++)
		if (runs[i].phase == RUN_STARTED && !runs[i].jail.cancel_sent)
			appendStringInfo(&ids, "%s%s", n++ ? "," : "", runs[i].id);
	appendStringInfoChar(&ids, '}');
	if (n == 0 || !me.registered)
	{
		free(ids.data);
		return true;
	}
	p[0] = step_param(me.id);
	p[1] = step_param(ids.data);
	r = db_call(SQL_CANCELS, 2, p);
	for (int j = 0; r.outcome == DB_OK && j < db_ntuples(&r); j++)
	{
		const char *id = db_value(&r, j, 0);

		for (int i = 0; id && i < nruns; i++)
		{
			Run		   *run = &runs[i];

			if (run->phase == RUN_STARTED && strcmp(run->id, id) == 0)
			{
				runner_log(RLOG_LOG, "cancelling invocation %s", run->id);
				jail_signal(run, SIGTERM);
				run->jail.cancel_sent = true;
			}
		}
	}
	if (r.outcome == DB_FAILED)
		runner_log(RLOG_WARNING, "checking cancellations failed: %s", r.message);
	free(ids.data);
	n = r.outcome == DB_OK;
	db_result_free(&r);
	return n;
}

/* ---- sweep ---- */

/* The session workspaces to keep and the skills in use. */
bool
step_sweep_lists(StrList *live_sessions, StrList *skills_in_use)
{
	DbBatch		b;
	DbParam		p[1];
	bool		ok;

	if (!me.registered)
		return false;
	p[0] = step_param(me.id);
	db_batch_init(&b);
	db_batch_add(&b, SQL_LIVE, 1, p);
	db_batch_add(&b, SQL_SKILLS, 1, p);
	ok = db_batch_run(&b) == DB_OK;
	for (int i = 0; ok && i < db_ntuples(&b.items[0].r); i++)
		strlist_add(live_sessions, or_empty(db_value(&b.items[0].r, i, 0)));
	for (int i = 0; ok && i < db_ntuples(&b.items[1].r); i++)
		strlist_add(skills_in_use, or_empty(db_value(&b.items[1].r, i, 0)));
	if (!ok && db_connected())
		runner_log(RLOG_WARNING, "listing live sessions and skills in use failed: %s",
				   b.items[0].r.outcome != DB_OK ? b.items[0].r.message : b.items[1].r.message);
	db_batch_free(&b);
	return ok;
}
