/*-------------------------------------------------------------------------
 *
 * steps.c
 *		A run's steps in the database, as the runner takes them: each is
 *		one parameterised call of one named SQL function, which states the
 *		step's contract and is fenced on the state it expects.  No other SQL
 *		is run by the runner (but BEGIN/COMMIT around the prepare step and
 *		LISTEN): a guarantee lives in one place, in SQL.
 *
 *	claim			agent._claim_invocations(n), agent._produced_caps()
 *	prepare			agent._prepare_invocation(id, workspace_is_new),
 *					agent._skill_files(skill)
 *	mark started	agent._mark_running(id, pid)
 *	output			agent._append_output(id, stream, data)
 *	result			agent._store_produced_file(...), agent._finish_invocation(...)
 *	cancellations	agent._cancel_requested(ids)
 *	sweep			agent._live_session_ids(), agent._skill_ids_in_use()
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

static const char SQL_CLAIM[] =
"SELECT id, language, code, wall_time_s, memory_mb, session_id, fresh_session, has_skills "
"FROM agent._claim_invocations($1)";
static const char SQL_CAPS[] =
"SELECT max_files, max_bytes, max_file_bytes FROM agent._produced_caps()";
static const char SQL_PREPARE[] =
"SELECT kind, name, content, skill_id FROM agent._prepare_invocation($1, $2)";
static const char SQL_SKILL_FILES[] =
"SELECT path, content, executable FROM agent._skill_files($1)";
static const char SQL_MARK[] = "SELECT agent._mark_running($1, $2)";
static const char SQL_OUTPUT[] = "SELECT agent._append_output($1, $2, $3)";
static const char SQL_STORE_FILE[] = "SELECT agent._store_produced_file($1, $2, $3, $4, $5)";
static const char SQL_FINISH[] =
"SELECT agent._finish_invocation($1, $2, $3, $4, $5, $6, $7, $8, $9)";
static const char SQL_CANCELS[] = "SELECT id FROM agent._cancel_requested($1) AS id";
static const char SQL_LIVE[] = "SELECT id::text FROM agent._live_session_ids() AS id";
static const char SQL_SKILLS[] = "SELECT id::text FROM agent._skill_ids_in_use() AS id";

static const char *const stream_names[NSTREAMS] = {"stdout", "stderr"};

static DbParam
text_param(const char *s)
{
	DbParam		p = {s, -1};

	return p;
}

static bool
is_true(const char *v)
{
	return v != NULL && v[0] == 't';
}

/* ---- claim ---- */

/* Read one row of the claim into c (the code malloc'd). */
static void
read_claimed(const DbResult *r, int row, ClaimedRun *c)
{
	const char *v;

	memset(c, 0, sizeof(*c));
	strlcpy(c->id, db_value(r, row, 0) ? db_value(r, row, 0) : "", sizeof(c->id));
	strlcpy(c->language, db_value(r, row, 1) ? db_value(r, row, 1) : "", sizeof(c->language));
	c->code = pg_strdup(db_value(r, row, 2) ? db_value(r, row, 2) : "");
	v = db_value(r, row, 3);
	c->wall_s = v ? atoi(v) : runner_conf.default_wall_time_s;
	v = db_value(r, row, 4);
	c->memory_mb = v ? atoi(v) : runner_conf.default_memory_mb;
	v = db_value(r, row, 5);
	c->has_session = v != NULL;
	if (v)
		strlcpy(c->session, v, sizeof(c->session));
	c->fresh_session = is_true(db_value(r, row, 6));
	c->has_skills = is_true(db_value(r, row, 7));
}

/*
 * Claim up to `want` approved invocations into out[] (with the caps on
 * what they may return, read in the same transaction).  Returns how many;
 * 0 also when the claim failed (logged).  Once this commits every claimed
 * run must be finished.
 */
int
step_claim(int want, ClaimedRun *out)
{
	DbBatch		b;
	char		nbuf[16];
	DbParam		p[1];
	int			n = 0;

	snprintf(nbuf, sizeof(nbuf), "%d", want);
	p[0] = text_param(nbuf);
	db_batch_init(&b);
	db_batch_add(&b, SQL_CLAIM, 1, p);
	db_batch_add(&b, SQL_CAPS, 0, NULL);
	if (db_batch_run(&b) == DB_OK)
	{
		const DbResult *claim = &b.items[0].r;
		const DbResult *caps = &b.items[1].r;
		ProducedCaps pc;

		pc.max_files = atoi(db_value(caps, 0, 0) ? db_value(caps, 0, 0) : "0");
		pc.max_total_bytes = atoll(db_value(caps, 0, 1) ? db_value(caps, 0, 1) : "0");
		pc.max_file_bytes = atoll(db_value(caps, 0, 2) ? db_value(caps, 0, 2) : "0");
		pc.max_scan_entries = runner_conf.workspace_entries + 1;
		for (int i = 0; i < db_ntuples(claim) && n < want; i++)
		{
			read_claimed(claim, i, &out[n]);
			out[n].caps = pc;
			n++;
		}
	}
	else
	{
		for (int i = 0; i < b.n; i++)
			if (b.items[i].sql && b.items[i].r.outcome != DB_OK)
			{
				runner_log(RLOG_WARNING, "claiming approved invocations failed: %s",
						   b.items[i].r.message);
				break;
			}
	}
	db_batch_free(&b);
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
 * Materialise one skill version from agent._skill_files(), unless it is
 * on disk already.  The directory (malloc'd), or NULL with *err set.
 */
static char *
materialize_skill(const char *skill_id, char **err)
{
	bool		installed;
	char	   *final = skill_dir(skill_id, &installed);
	char	   *tmp;
	DbParam		p[1];
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
	p[0] = text_param(skill_id);
	r = db_call(SQL_SKILL_FILES, 1, p);
	if (r.outcome != DB_OK)
	{
		*err = psprintf("could not read the files of skill %s: %s", skill_id, r.message);
		ok = false;
	}
	for (int i = 0; ok && i < db_ntuples(&r); i++)
	{
		size_t		len;
		unsigned char *content = bytea_value(&r, i, 1, &len);

		ok = skill_add(tmp, db_value(&r, i, 0) ? db_value(&r, i, 0) : "", (const char *) content,
					   len, is_true(db_value(&r, i, 2)), err);
		PQfreemem(content);
	}
	db_result_free(&r);
	if (ok)
		ok = skill_install(tmp, final, err);
	else
		remove_work_dir(tmp);
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
place_prepared(Run *run, const DbResult *r, char **err)
{
	for (int i = 0; i < db_ntuples(r); i++)
	{
		const char *kind = db_value(r, i, 0);
		const char *name = db_value(r, i, 1) ? db_value(r, i, 1) : "";
		char	   *dir;

		if (kind && strcmp(kind, "file") == 0)
		{
			size_t		len;
			unsigned char *content = bytea_value(r, i, 2, &len);
			bool		ok = workspace_place(run, name, (const char *) content, len, err);

			PQfreemem(content);
			if (!ok)
				return false;
			continue;
		}
		if (run->disk.nbinds >= RUNNER_MAX_SKILLS)
		{
			*err = psprintf("at most %d skills can be mounted", RUNNER_MAX_SKILLS);
			return false;
		}
		if ((dir = materialize_skill(db_value(r, i, 3) ? db_value(r, i, 3) : "", err)) == NULL)
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
 * run->start_error set on failure.
 */
bool
step_prepare(Run *run, bool workspace_is_new)
{
	DbBatch		b;
	DbParam		p[2];
	char	   *err = NULL;
	bool		ok;

	p[0] = text_param(run->id);
	p[1] = text_param(workspace_is_new ? "true" : "false");
	db_batch_init(&b);
	db_batch_add(&b, "BEGIN", 0, NULL);
	db_batch_add(&b, SQL_PREPARE, 2, p);
	ok = db_batch_run(&b) == DB_OK;
	if (!ok)
		err = pg_strdup(b.items[1].r.outcome != DB_OK ? b.items[1].r.message : b.items[0].r.message);
	else
		ok = place_prepared(run, &b.items[1].r, &err);
	db_batch_free(&b);
	if (ok)
	{
		DbResult	r = db_call("COMMIT", 0, NULL);

		ok = r.outcome == DB_OK;
		if (!ok)
			err = pg_strdup(r.message);
		db_result_free(&r);
	}
	if (!ok && db_in_transaction())
	{
		DbResult	r = db_call("ROLLBACK", 0, NULL);

		db_result_free(&r);
	}
	if (!ok)
	{
		run->start_error = arena_strdup(&run->arena, err ? err : "could not prepare the workspace");
		runner_log(RLOG_LOG, "could not prepare invocation %s: %s", run->id, run->start_error);
	}
	free(err);
	return ok;
}

/* ---- mark started ---- */

/*
 * One transaction marks every started jail as running (a row locked
 * elsewhere is skipped; its finish moves it through running).
 */
void
step_mark_started(void)
{
	DbBatch		b;
	DbParam		p[RUNNER_MAX_SLOTS][2];
	char		pid[RUNNER_MAX_SLOTS][16];

	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (run->marked || (run->phase != RUN_STARTED && run->phase != RUN_EXITED))
			continue;
		run->marked = true;
		if (run->phase != RUN_STARTED)
			continue;
		snprintf(pid[i], sizeof(pid[i]), "%d", (int) run->jail.pid);
		p[i][0] = text_param(run->id);
		p[i][1] = text_param(pid[i]);
		db_batch_add(&b, SQL_MARK, 2, p[i]);
	}
	if (b.n > 0 && db_batch_run(&b) != DB_OK)
	{
		for (int i = 0; i < b.n; i++)
			if (b.items[i].sql && b.items[i].r.outcome != DB_OK)
			{
				runner_log(RLOG_WARNING, "marking invocations running failed: %s",
						   b.items[i].r.message);
				break;
			}
	}
	db_batch_free(&b);
}

/* ---- output ---- */

static void
add_output(DbBatch *b, Run *run, const bool ready[NSTREAMS], DbParam p[NSTREAMS][3])
{
	for (int st = 0; st < NSTREAMS; st++)
	{
		if (!ready[st])
			continue;
		p[st][0] = text_param(run->id);
		p[st][1] = text_param(stream_names[st]);
		p[st][2] = text_param(run->out.pending[st].data);
		db_batch_add(b, SQL_OUTPUT, 3, p[st]);
	}
}

/*
 * Store the ready output of every run (ready[slot][stream]): stored[slot]
 * says whose was.  All of it in one transaction; when that fails, each
 * run's in a transaction of its own (one round trip still), so that the
 * output of a run that cannot be stored now does not hold up the others'.
 * False when the connection broke (nothing stored).
 */
bool
step_store_output(const bool ready[][NSTREAMS], bool *stored)
{
	static DbParam p[RUNNER_MAX_SLOTS][NSTREAMS][3];
	DbBatch		b;
	DbOutcome	o;

	memset(stored, 0, sizeof(bool) * nruns);
	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
		if (ready[i][0] || ready[i][1])
			add_output(&b, &runs[i], ready[i], p[i]);
	o = db_batch_run(&b);
	db_batch_free(&b);
	if (o == DB_LOST)
		return false;
	if (o == DB_OK)
	{
		for (int i = 0; i < nruns; i++)
			stored[i] = ready[i][0] || ready[i][1];
		return true;
	}

	/* one transaction per run */
	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
		if (ready[i][0] || ready[i][1])
		{
			add_output(&b, &runs[i], ready[i], p[i]);
			db_batch_sync(&b);
		}
	o = db_batch_run(&b);
	if (o != DB_LOST)
	{
		int			k = 0;

		for (int i = 0; i < nruns; i++)
		{
			bool		ok = true;

			if (!ready[i][0] && !ready[i][1])
				continue;
			for (; k < b.n && b.items[k].sql; k++)
				if (b.items[k].r.outcome != DB_OK)
				{
					if (ok)
						runner_log(RLOG_LOG, "could not store the output of invocation %s yet: %s",
								   runs[i].id, b.items[k].r.message);
					ok = false;
				}
			k++;				/* the sync point */
			stored[i] = ok;
		}
	}
	db_batch_free(&b);
	return o != DB_LOST;
}

/* ---- result ---- */

/*
 * Record the run's result in one transaction: the files it produced (with
 * files) and the finish step.  DB_OK when it committed; *applied then
 * says whether the result was also applied (false: it is staged).  On
 * failure *err (malloc'd) says why.
 */
DbOutcome
step_record_result(Run *run, const char *error, int jail_status, bool with_files,
				   bool *applied, char **err)
{
	RunDisk    *d = &run->disk;
	int			nfiles = with_files ? d->produced.n : 0;
	DbParam    *fp = pg_malloc0(sizeof(DbParam) * 5 * Max(nfiles, 1));
	DbParam		p[9];
	char		status[16],
				bytes[32],
				entries[16];
	DbBatch		b;
	DbOutcome	o;
	const DbResult *fin;

	db_batch_init(&b);
	for (int i = 0; i < nfiles; i++)
	{
		ProducedFile *pf = &d->produced.v[i];
		DbParam    *q = &fp[i * 5];

		q[0] = text_param(run->id);
		q[1] = text_param(pf->name);
		q[2] = text_param(pf->status);
		q[3] = text_param(pf->reason);
		q[4].value = pf->data;
		q[4].len = pf->data ? (int) pf->len : -1;
		db_batch_add(&b, SQL_STORE_FILE, 5, q);
	}
	snprintf(status, sizeof(status), "%d", jail_status);
	snprintf(bytes, sizeof(bytes), "%lld", (long long) d->ws_bytes);
	snprintf(entries, sizeof(entries), "%d", d->ws_entries);
	p[0] = text_param(run->id);
	p[1] = text_param(run->jail.verdict.len > 0 && error == NULL ? run->jail.verdict.data : NULL);
	p[2] = text_param(status);
	p[3] = text_param(error);
	p[4] = text_param(run->phase != RUN_UNSTARTED ? "true" : "false");
	p[5] = text_param(run->out.truncated ? "true" : "false");
	p[6] = text_param(d->measured ? bytes : NULL);
	p[7] = text_param(d->measured ? entries : NULL);
	p[8] = text_param(d->ws_reset);
	db_batch_add(&b, SQL_FINISH, 9, p);

	o = db_batch_run(&b);
	fin = &b.items[nfiles].r;
	if (o == DB_OK)
		*applied = db_value(fin, 0, 0) != NULL;
	else
	{
		const char *why = fin->message;

		for (int i = 0; i < nfiles; i++)
			if (b.items[i].r.outcome != DB_OK)
			{
				why = b.items[i].r.message;
				break;
			}
		*err = pg_strdup(why ? why : "unknown error");
		runner_log(RLOG_WARNING, "could not record the result of invocation %s: %s", run->id, *err);
	}
	db_batch_free(&b);
	free(fp);
	return o;
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
	DbParam		p[1];
	DbResult	r;
	int			n = 0;

	initStringInfo(&ids);
	appendStringInfoChar(&ids, '{');
	for (int i = 0; i < nruns; i++)
		if (runs[i].phase == RUN_STARTED && !runs[i].jail.cancel_sent)
			appendStringInfo(&ids, "%s%s", n++ ? "," : "", runs[i].id);
	appendStringInfoChar(&ids, '}');
	if (n == 0)
	{
		free(ids.data);
		return true;
	}
	p[0] = text_param(ids.data);
	r = db_call(SQL_CANCELS, 1, p);
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
	if (r.outcome != DB_OK)
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
	bool		ok;

	db_batch_init(&b);
	db_batch_add(&b, SQL_LIVE, 0, NULL);
	db_batch_add(&b, SQL_SKILLS, 0, NULL);
	ok = db_batch_run(&b) == DB_OK;
	for (int i = 0; ok && i < db_ntuples(&b.items[0].r); i++)
		strlist_add(live_sessions, db_value(&b.items[0].r, i, 0) ? db_value(&b.items[0].r, i, 0) : "");
	for (int i = 0; ok && i < db_ntuples(&b.items[1].r); i++)
		strlist_add(skills_in_use, db_value(&b.items[1].r, i, 0) ? db_value(&b.items[1].r, i, 0) : "");
	if (!ok && db_connected())
		runner_log(RLOG_WARNING, "listing live sessions and skills in use failed: %s",
				   b.items[0].r.outcome != DB_OK ? b.items[0].r.message : b.items[1].r.message);
	db_batch_free(&b);
	return ok;
}
