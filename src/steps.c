/*-------------------------------------------------------------------------
 *
 * steps.c
 *		A run's steps in the database, as the supervisor takes them: each is
 *		one short transaction calling one named SQL function of
 *		sql/src/40_supervisor.sql, which states the step's contract and is
 *		fenced on the state it expects.  No other SQL is run by the
 *		supervisor: a guarantee lives in one place, in SQL, and a runner
 *		on another host can call the same functions.
 *
 *	claim			agent._claim_invocations(n), agent._produced_caps()
 *	prepare			agent._prepare_invocation(id, workspace_is_new),
 *					agent._skill_files(skill)
 *	mark started	agent._mark_running(id, pid)
 *	output			agent._append_output(id, stream, data)
 *	result			agent._store_produced_file(...), agent._record_egress(...),
 *					agent._finish_invocation(...)
 *	pending			agent._finish_pending(n)
 *	recovery		agent._supervisor_recover()
 *	cancellations	agent._cancel_requested(ids)
 *	sweep			agent._live_session_ids(), agent._skill_ids_in_use()
 *
 * A failed step is logged and rolled back; what happens to the run then is
 * run.c's decision.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/ipc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "sandbox_ext.h"
#include "supervisor.h"

/* Results staged behind a lock held elsewhere (agent._finish_pending). */
bool		sandbox_results_pending = false;

static SPIPlanPtr plan_output = NULL;
static uint64 cancel_generation_seen = 0;

static char *
uuid_text(Datum d)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, d));
}

/* ---- claim ---- */

/* Read one row of agent._claim_invocations() into c (copies in cxt). */
static void
read_claimed(HeapTuple tup, TupleDesc desc, ClaimedRun *c, MemoryContext cxt)
{
	bool		isnull;
	Datum		d;
	MemoryContext old;
	char	   *lang;

	d = SPI_getbinval(tup, desc, 1, &isnull);
	memcpy(&c->id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	old = MemoryContextSwitchTo(cxt);
	lang = SPI_getvalue(tup, desc, 2);
	strlcpy(c->language, lang ? lang : "", sizeof(c->language));
	c->code = SPI_getvalue(tup, desc, 3);
	MemoryContextSwitchTo(old);
	d = SPI_getbinval(tup, desc, 4, &isnull);
	c->wall_s = isnull ? sandbox_default_wall_time_s : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	c->memory_mb = isnull ? sandbox_default_memory_mb : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 6, &isnull);
	c->has_session = !isnull;
	if (!isnull)
		strlcpy(c->session, uuid_text(d), sizeof(c->session));
	d = SPI_getbinval(tup, desc, 7, &isnull);
	c->fresh_session = !isnull && DatumGetBool(d);
	d = SPI_getbinval(tup, desc, 8, &isnull);
	c->has_skills = !isnull && DatumGetBool(d);
}

/* The caps on what a run may return (agent.settings), read with the claim. */
static ProducedCaps
read_caps(void)
{
	ProducedCaps caps;
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	desc;

	if (SPI_execute("SELECT max_files, max_bytes, max_file_bytes FROM agent._produced_caps()",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "agent._produced_caps failed");
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	caps.max_files = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
	caps.max_total_bytes = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	caps.max_file_bytes = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
	caps.max_scan_entries = sandbox_workspace_entries + 1;
	return caps;
}

/*
 * Claim up to `want` approved invocations into out[] (their code copied
 * into the caller's context, with the caps on what they may return).
 * Returns how many; 0 also when the claim failed (logged).  Once this
 * commits every claimed run must be finished.
 */
int
sandbox_step_claim(int want, ClaimedRun *out)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile int n = 0;

	PG_TRY();
	{
		Datum		arg = Int32GetDatum(want);
		Oid			argtype = INT4OID;
		int			rc;

		sandbox_xact_begin("claiming approved invocations");
		rc = SPI_execute_with_args("SELECT id, language, code, wall_time_s, memory_mb, "
								   "session_id, fresh_session, has_skills "
								   "FROM agent._claim_invocations($1)",
								   1, &argtype, &arg, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._claim_invocations failed: %s", SPI_result_code_string(rc));
		for (uint64 i = 0; i < SPI_processed && n < want; i++)
			read_claimed(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &out[n++], cxt);
		if (n > 0)
		{
			ProducedCaps caps = read_caps();

			for (int i = 0; i < n; i++)
				out[i].caps = caps;
		}
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "claiming approved invocations");
		n = 0;
	}
	PG_END_TRY();
	return n;
}

/* ---- prepare ---- */

/* Materialise one skill version from agent._skill_files(), unless it is. */
static char *
materialize_skill(const char *skill_id)
{
	bool		installed;
	char	   *final = sandbox_skill_dir(skill_id, &installed);
	char	   *tmp;
	Oid			argtype = UUIDOID;
	Datum		arg;
	int			rc;

	if (installed)
		return final;
	tmp = sandbox_skill_begin(skill_id);
	arg = DirectFunctionCall1(uuid_in, CStringGetDatum(skill_id));
	rc = SPI_execute_with_args("SELECT path, content, executable FROM agent._skill_files($1)",
							   1, &argtype, &arg, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "agent._skill_files failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, desc, 2, &isnull));

		sandbox_skill_add(tmp, SPI_getvalue(tup, desc, 1), VARDATA_ANY(content),
						  VARSIZE_ANY_EXHDR(content),
						  DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull)));
	}
	sandbox_skill_install(tmp, final);
	return final;
}

/* Put what agent._prepare_invocation() returned (in SPI_tuptable) in place. */
static void
place_prepared(SandboxRun *run)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		n = SPI_processed;

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tt->vals[i];
		bool		isnull;
		char	   *kind = SPI_getvalue(tup, tt->tupdesc, 1);
		char	   *name = SPI_getvalue(tup, tt->tupdesc, 2);

		if (strcmp(kind, "egress") == 0)
		{
			bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, tt->tupdesc, 3, &isnull));

			sandbox_egress_place_policy(run, VARDATA_ANY(content), VARSIZE_ANY_EXHDR(content));
			continue;
		}
		if (strcmp(kind, "file") == 0)
		{
			bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, tt->tupdesc, 3, &isnull));

			sandbox_workspace_place(run, name, VARDATA_ANY(content), VARSIZE_ANY_EXHDR(content));
			continue;
		}
		if (run->disk.nbinds >= SANDBOX_MAX_SKILLS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("at most %d skills can be mounted", SANDBOX_MAX_SKILLS)));
		run->disk.binds[run->disk.nbinds++] =
			MemoryContextStrdup(run->cxt, psprintf("%s:/skills/%s",
												   materialize_skill(SPI_getvalue(tup, tt->tupdesc, 4)),
												   name));
	}
}

/*
 * Put the conversation's files and the agent's skills in the run's
 * workspace.  The placement is recorded (agent.session_files) in the same
 * transaction as it is written, so a failure leaves neither.  False with
 * run->start_error set on failure.
 */
bool
sandbox_step_prepare(SandboxRun *run, bool workspace_is_new)
{
	volatile bool ok = true;

	PG_TRY();
	{
		Oid			types[2] = {UUIDOID, BOOLOID};
		Datum		values[2];
		int			rc;

		sandbox_xact_begin("preparing a sandbox workspace");
		values[0] = UUIDPGetDatum(&run->id);
		values[1] = BoolGetDatum(workspace_is_new);
		rc = SPI_execute_with_args("SELECT kind, name, content, skill_id "
								   "FROM agent._prepare_invocation($1, $2)",
								   2, types, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._prepare_invocation failed: %s", SPI_result_code_string(rc));
		place_prepared(run);
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		ErrorData  *edata = sandbox_xact_abort();

		run->start_error = MemoryContextStrdup(run->cxt, edata->message);
		ereport(LOG, (errmsg("could not prepare invocation %s: %s", run->idstr, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* ---- mark started ---- */

/*
 * One short transaction marks every started jail as running (a row locked
 * elsewhere is skipped; its finish moves it through running).
 */
void
sandbox_step_mark_started(void)
{
	PG_TRY();
	{
		sandbox_xact_begin("marking invocations running");
		for (int i = 0; i < sandbox_nruns; i++)
		{
			SandboxRun *run = &sandbox_runs[i];
			Oid			types[2] = {UUIDOID, INT4OID};
			Datum		values[2];

			if (run->marked || (run->phase != RUN_STARTED && run->phase != RUN_EXITED))
				continue;
			run->marked = true;
			if (run->phase != RUN_STARTED)
				continue;
			values[0] = UUIDPGetDatum(&run->id);
			values[1] = Int32GetDatum(run->jail.pid);
			SPI_execute_with_args("SELECT agent._mark_running($1, $2)",
								  2, types, values, NULL, false, 0);
		}
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "marking invocations running");
	}
	PG_END_TRY();
}

/* ---- output ---- */

/* One run's ready output, in a subtransaction of the caller's. */
static bool
append_run_output(SandboxRun *run, const bool ready[NSTREAMS])
{
	static const char *const stream_names[NSTREAMS] = {"stdout", "stderr"};
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		for (int st = 0; st < NSTREAMS; st++)
		{
			Datum		values[3];
			int			rc;

			if (!ready[st])
				continue;
			values[0] = UUIDPGetDatum(&run->id);
			values[1] = CStringGetTextDatum(stream_names[st]);
			values[2] = PointerGetDatum(cstring_to_text_with_len(run->out.pending[st].data,
																 run->out.pending[st].len));
			rc = SPI_execute_plan(plan_output, values, NULL, false, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "agent._append_output failed: %s", SPI_result_code_string(rc));
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ereport(LOG, (errmsg("could not store the output of invocation %s yet: %s",
							 run->idstr, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Store the ready output of every run (ready[slot][stream]) in one
 * transaction: stored[slot] says whose was.  False when the transaction
 * itself failed (nothing stored).
 */
bool
sandbox_step_store_output(const bool ready[][NSTREAMS], bool *stored)
{
	volatile bool committed = false;

	PG_TRY();
	{
		sandbox_xact_begin("storing sandbox output");
		if (plan_output == NULL)
		{
			Oid			types[3] = {UUIDOID, TEXTOID, TEXTOID};

			plan_output = SPI_prepare("SELECT agent._append_output($1, $2, $3)", 3, types);
			if (plan_output == NULL)
				elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
			SPI_keepplan(plan_output);
		}
		for (int i = 0; i < sandbox_nruns; i++)
			stored[i] = (ready[i][0] || ready[i][1]) &&
				append_run_output(&sandbox_runs[i], ready[i]);
		sandbox_xact_commit();
		committed = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "storing sandbox output");
	}
	PG_END_TRY();
	return committed;
}

/* ---- result ---- */

/* Stage the files the run produced, inside the result's transaction. */
static void
store_produced(SandboxRun *run)
{
	ListCell   *lc;
	Oid			types[5] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, BYTEAOID};

	foreach(lc, run->disk.produced)
	{
		ProducedFile *pf = (ProducedFile *) lfirst(lc);
		Datum		values[5];
		char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

		values[0] = UUIDPGetDatum(&run->id);
		values[1] = CStringGetTextDatum(pf->name);
		values[2] = CStringGetTextDatum(pf->status);
		if (pf->reason)
			values[3] = CStringGetTextDatum(pf->reason);
		else
			nulls[3] = 'n';
		if (pf->data)
		{
			bytea	   *b = palloc(VARHDRSZ + pf->len);

			SET_VARSIZE(b, VARHDRSZ + pf->len);
			memcpy(VARDATA(b), pf->data, pf->len);
			values[4] = PointerGetDatum(b);
		}
		else
			nulls[4] = 'n';
		if (SPI_execute_with_args("SELECT agent._store_produced_file($1, $2, $3, $4, $5)",
								  5, types, values, nulls, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "agent._store_produced_file failed");
	}
}

/* The arguments of agent._finish_invocation() for a run. */
static void
finish_args(SandboxRun *run, const char *error, int jail_status, Datum *values, char *nulls)
{
	RunDisk    *d = &run->disk;

	memset(nulls, ' ', 9);
	values[0] = UUIDPGetDatum(&run->id);
	if (run->jail.verdict.len > 0 && error == NULL)
		values[1] = CStringGetTextDatum(run->jail.verdict.data);
	else
		nulls[1] = 'n';
	values[2] = Int32GetDatum(jail_status);
	if (error)
		values[3] = CStringGetTextDatum(error);
	else
		nulls[3] = 'n';
	values[4] = BoolGetDatum(run->phase != RUN_UNSTARTED);
	values[5] = BoolGetDatum(run->out.truncated);
	values[6] = Int64GetDatum(d->ws_bytes);
	values[7] = Int32GetDatum(d->ws_entries);
	if (!d->measured)
		nulls[6] = nulls[7] = 'n';
	if (d->ws_reset)
		values[8] = CStringGetTextDatum(d->ws_reset);
	else
		nulls[8] = 'n';
}

/*
 * The run's connection log and the verdict's egress summary
 * (agent._record_egress), in the finish's transaction, before it: the
 * tool call written by the finish (now or when applied) carries the
 * summary and the run's egress audit event (47_egress.sql).
 */
static void
record_egress(SandboxRun *run)
{
	Oid			types[3] = {UUIDOID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	int			rc;

	if (!run->disk.egress)
		return;
	values[0] = UUIDPGetDatum(&run->id);
	values[1] = CStringGetTextDatum(run->disk.egress_log ? run->disk.egress_log : "");
	if (run->jail.verdict.len > 0)
		values[2] = CStringGetTextDatum(run->jail.verdict.data);
	else
		nulls[2] = 'n';
	rc = SPI_execute_with_args("SELECT agent._record_egress($1, $2, $3::jsonb)",
							   3, types, values, nulls, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "agent._record_egress failed: %s", SPI_result_code_string(rc));
}

/*
 * Record the run's result in one transaction: the files it produced (with
 * files) and agent._finish_invocation().  True when it committed; *applied
 * then says whether the result was also applied (false: it is staged).  On
 * failure *err (in the run's context) says why.
 */
bool
sandbox_step_record_result(SandboxRun *run, const char *error, int jail_status,
						   bool with_files, bool *applied, char **err)
{
	volatile bool done = false;

	PG_TRY();
	{
		Oid			types[9] = {UUIDOID, TEXTOID, INT4OID, TEXTOID, BOOLOID, BOOLOID,
		INT8OID, INT4OID, TEXTOID};
		Datum		values[9];
		char		nulls[9];
		bool		isnull;
		int			rc;

		sandbox_xact_begin("finishing an invocation");
		if (with_files)
		{
			store_produced(run);
			/* not on the fallback: a failing record must not keep the slot */
			record_egress(run);
		}
		finish_args(run, error, jail_status, values, nulls);
		rc = SPI_execute_with_args("SELECT agent._finish_invocation($1, $2, $3, $4, $5, $6, $7, $8, $9)",
								   9, types, values, nulls, false, 0);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "agent._finish_invocation failed: %s", SPI_result_code_string(rc));
		(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		*applied = !isnull;
		sandbox_xact_commit();
		done = true;
	}
	PG_CATCH();
	{
		ErrorData  *edata = sandbox_xact_abort();

		*err = MemoryContextStrdup(run->cxt, edata->message);
		ereport(WARNING,
				(errmsg("could not record the result of invocation %s: %s",
						run->idstr, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return done;
}

/*
 * Apply results staged behind a lock held elsewhere, at most 32 (so that a
 * tenant holding many locks cannot make one turn of the loop long).
 * Returns whether some stay staged.
 */
bool
sandbox_step_finish_pending(void)
{
	PG_TRY();
	{
		bool		isnull;
		Datum		d;

		sandbox_xact_begin("applying staged results");
		if (SPI_execute("SELECT agent._finish_pending(32)", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent._finish_pending failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		sandbox_results_pending = !isnull && DatumGetInt32(d) > 0;
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "applying staged results");
	}
	PG_END_TRY();
	return sandbox_results_pending;
}

/* ---- recovery ---- */

/*
 * Resolve what a previous supervisor left in flight.  Without recovery the
 * claim could run on stale state: on failure the worker exits and is
 * restarted.
 */
void
sandbox_step_recover(void)
{
	PG_TRY();
	{
		int			rc;

		sandbox_xact_begin("recovering invocations left by a previous supervisor");
		rc = SPI_execute("SELECT agent._supervisor_recover()", false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._supervisor_recover failed: %s", SPI_result_code_string(rc));
		sandbox_xact_commit();
		/* what stayed staged behind a lock is applied from the loop */
		sandbox_results_pending = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "recovering invocations");
		proc_exit(1);
	}
	PG_END_TRY();
}

/* ---- cancellations ---- */

/*
 * When a cancel request committed since the last look (shmem.c bumps a
 * generation), ask which of our running invocations have one and ask their
 * jails to stop (the jail kills its sandbox and still reports a verdict,
 * which the billing rule maps to cancelled).
 */
void
sandbox_step_check_cancellations(void)
{
	Datum	   *ids;
	int			n = 0;
	uint64		gen;

	SpinLockAcquire(&sandbox_shared->mutex);
	gen = sandbox_shared->cancel_generation;
	SpinLockRelease(&sandbox_shared->mutex);
	if (gen == cancel_generation_seen)
		return;
	ids = palloc(sizeof(Datum) * sandbox_nruns);
	for (int i = 0; i < sandbox_nruns; i++)
		if (sandbox_runs[i].phase == RUN_STARTED && !sandbox_runs[i].jail.cancel_sent)
			ids[n++] = UUIDPGetDatum(&sandbox_runs[i].id);
	if (n == 0)
	{
		cancel_generation_seen = gen;
		pfree(ids);
		return;
	}
	PG_TRY();
	{
		Oid			argtype = UUIDARRAYOID;
		Datum		arg;
		int			rc;

		sandbox_xact_begin("checking cancellations");
		arg = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
		rc = SPI_execute_with_args("SELECT id FROM agent._cancel_requested($1) AS id",
								   1, &argtype, &arg, NULL, true, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._cancel_requested failed: %s", SPI_result_code_string(rc));
		for (uint64 j = 0; j < SPI_processed; j++)
		{
			bool		isnull;
			pg_uuid_t  *id = DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[j],
														 SPI_tuptable->tupdesc, 1, &isnull));

			for (int i = 0; i < sandbox_nruns; i++)
			{
				SandboxRun *run = &sandbox_runs[i];

				if (run->phase == RUN_STARTED && memcmp(&run->id, id, sizeof(pg_uuid_t)) == 0)
				{
					elog(LOG, "cancelling invocation %s", run->idstr);
					sandbox_jail_signal(run, SIGTERM);
					run->jail.cancel_sent = true;
				}
			}
		}
		sandbox_xact_commit();
		cancel_generation_seen = gen;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "checking cancellations");
	}
	PG_END_TRY();
	pfree(ids);
}

/* ---- sweep ---- */

/* Run SQL returning one text column into a list (in cxt). */
static List *
query_names(const char *sql, MemoryContext cxt)
{
	List	   *out = NIL;

	if (SPI_execute(sql, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "\"%s\" failed", sql);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		out = lappend(out, pstrdup(v ? v : ""));
		MemoryContextSwitchTo(old);
	}
	return out;
}

/* The session workspaces to keep and the skills in use (in the caller's context). */
bool
sandbox_step_sweep_lists(List **live_sessions, List **skills_in_use)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = false;

	PG_TRY();
	{
		sandbox_xact_begin("listing live sessions and skills in use");
		*live_sessions = query_names("SELECT id::text FROM agent._live_session_ids() AS id", cxt);
		*skills_in_use = query_names("SELECT id::text FROM agent._skill_ids_in_use() AS id", cxt);
		sandbox_xact_commit();
		ok = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "listing live sessions");
	}
	PG_END_TRY();
	return ok;
}
