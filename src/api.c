/*-------------------------------------------------------------------------
 *
 * api.c
 *		SQL-callable C functions for backends: agent.wait(),
 *		agent.worker_status() and agent._in_transaction_block().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/mman.h>

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "jail/wire_protocol.h"
#include "runner/local_link.h"
#include "sandbox_ext.h"

/* the plan of current_state()'s query, kept for the backend's life */
static SPIPlanPtr state_plan = NULL;

/*
 * Look up the state of an invocation through agent._invocation_state(),
 * which applies the caller's tenant context.  Returns NULL if the caller
 * cannot see it.  Each call takes a fresh snapshot (READ COMMITTED), so a
 * finish committed by the supervisor is seen on the next look.
 */
static char *
current_state(Datum id, bool *terminal)
{
	Oid			argtype = UUIDOID;
	char	   *state = NULL;
	int			rc;

	*terminal = false;
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("agent.wait() cannot run in a REPEATABLE READ or SERIALIZABLE transaction"),
				 errhint("Its snapshot would never see the invocation finish; call it in READ COMMITTED.")));
	SPI_connect();
	/* Prepared once per backend (agent.wait() is on every run's path). */
	rc = SPI_execute_plan(sandbox_keep_plan(&state_plan,
											"SELECT state, agent._state_is_terminal(state) "
											"FROM agent._invocation_state($1) AS state",
											1, &argtype),
						  &id, NULL, false, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "agent._invocation_state failed: %s", SPI_result_code_string(rc));
	if (SPI_processed > 0)
	{
		char	   *s = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		char	   *t = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		if (s)
			state = MemoryContextStrdup(TopTransactionContext, s);
		*terminal = (t != NULL && t[0] == 't');
	}
	SPI_finish();
	return state;
}

PG_FUNCTION_INFO_V1(sandbox_wait);

/*
 * agent.wait(invocation uuid, timeout interval DEFAULT '30 s') RETURNS text
 *
 * Blocks until the invocation reaches a final state or the timeout passes,
 * and returns its state.  It sleeps on a condition variable the supervisor
 * broadcasts after each finish commits, so it does not poll the table.
 */
Datum
sandbox_wait(PG_FUNCTION_ARGS)
{
	Datum		id;
	Interval   *timeout;
	int64		timeout_ms;
	TimestampTz deadline;
	char	   *state;
	bool		terminal;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("invocation and timeout must not be null")));
	id = PG_GETARG_DATUM(0);
	timeout = PG_GETARG_INTERVAL_P(1);

	timeout_ms = (int64) (timeout->time / 1000) +
		(int64) timeout->day * 86400000 + (int64) timeout->month * 30 * 86400000LL;
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative")));
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	state = current_state(id, &terminal);
	if (state == NULL)
	{
		/*
		 * Without a tenant nothing is visible: say so, as wait_result()
		 * does (42501), rather than that the invocation does not exist.
		 */
		SPI_connect();
		if (SPI_execute("SELECT agent._require_tenant(true)", true, 1) != SPI_OK_SELECT)
			elog(ERROR, "agent._require_tenant failed");
		SPI_finish();
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("invocation %s does not exist",
						DatumGetCString(DirectFunctionCall1(uuid_out, id))),
				 errhint("Check the id, and that agent.set_tenant() named its org and workspace.")));
	}
	if (terminal || sandbox_shared == NULL)
		PG_RETURN_TEXT_P(cstring_to_text(state));

	ConditionVariablePrepareToSleep(&sandbox_shared->finished_cv);
	for (;;)
	{
		long		remaining;

		state = current_state(id, &terminal);
		if (terminal || state == NULL)
			break;
		remaining = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (remaining <= 0)
			break;
		/* Wake at least once a second in case a broadcast is missed. */
		(void) ConditionVariableTimedSleep(&sandbox_shared->finished_cv,
										   Min(remaining, 1000L),
										   PG_WAIT_EXTENSION);
		CHECK_FOR_INTERRUPTS();
	}
	ConditionVariableCancelSleep();
	if (state == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * The warm pool, as the launcher's page tells it (wire_protocol.h):
 * interpreters waiting now, the memory they hold, the bound, and why the
 * last one of a language did not start; into values[first..first+3].
 * NULL without a pool (or without a supervisor, whose launcher it is).
 */
static void
warm_pool_columns(bool supervisor_running, Datum *values, bool *nulls, int first)
{
	char		sock[MAXPGPATH];
	JailWarmPage *page;
	int			waiting;
	uint64		held;
	char		why[2 * sizeof(page->problem[0]) + 16] = "";

	snprintf(sock, sizeof(sock), "%s/%s", DataDir, SANDBOX_LAUNCHER_SOCKET);
	page = supervisor_running ? jail_wire_warm_map(sock, false) : NULL;
	if (page == NULL)
	{
		for (int c = first; c < first + 4; c++)
			nulls[c] = true;
		return;
	}
	held = jail_wire_warm_held(page, &waiting);
	for (int l = 0; l < JAIL_WARM_NLANG; l++)
	{
		char		one[sizeof(page->problem[0])];

		memcpy(one, page->problem[l], sizeof(one));
		one[sizeof(one) - 1] = '\0';
		if (one[0])
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "%s%s: %s",
					 why[0] ? "; " : "", l == JAIL_WARM_PYTHON ? "python" : "node", one);
	}
	values[first] = Int32GetDatum(waiting);
	values[first + 1] = Int64GetDatum((int64) held);
	values[first + 2] = Int64GetDatum((int64) page->limit_bytes);
	values[first + 3] = CStringGetTextDatum(why);
	nulls[first + 3] = why[0] == '\0';
	munmap(page, sizeof(JailWarmPage));
}

PG_FUNCTION_INFO_V1(sandbox_worker_status);

/*
 * agent._supervisor_status(): one row describing the supervisor, with the
 * invocations the local runner's slots run (agent.worker_status() adds the
 * runners).
 */
Datum
sandbox_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[13];
	bool		nulls[13] = {false};
	char		work_dir[sizeof(sandbox_shared->work_dir)] = "";
	char		problem[sizeof(sandbox_shared->problem)] = "";
	int			pid = 0;
	TimestampTz started = 0;
	int			in_use = 0;
	Datum	   *ids;
	int			n = 0;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	tupdesc = BlessTupleDesc(tupdesc);

	ids = palloc(sizeof(Datum) * SANDBOX_MAX_SLOTS);
	if (sandbox_shared)
	{
		pg_uuid_t	copy[SANDBOX_MAX_SLOTS];

		SpinLockAcquire(&sandbox_shared->mutex);
		pid = sandbox_shared->supervisor_pid;
		started = sandbox_shared->supervisor_started_at;
		in_use = sandbox_shared->slots_in_use;
		for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
		{
			if (!sandbox_shared->slots[i].in_use)
				continue;
			copy[n] = sandbox_shared->slots[i].invocation_id;
			n++;
		}
		if (pid != 0)
		{
			strlcpy(work_dir, sandbox_shared->work_dir, sizeof(work_dir));
			strlcpy(problem, sandbox_shared->problem, sizeof(problem));
		}
		SpinLockRelease(&sandbox_shared->mutex);
		for (int i = 0; i < n; i++)
		{
			pg_uuid_t  *u = palloc(sizeof(pg_uuid_t));

			*u = copy[i];
			ids[i] = UUIDPGetDatum(u);
		}
	}

	values[0] = BoolGetDatum(sandbox_shared != NULL);
	values[1] = BoolGetDatum(pid != 0);
	if (pid != 0)
	{
		values[2] = Int32GetDatum(pid);
		values[3] = TimestampTzGetDatum(started);
	}
	else
		nulls[2] = nulls[3] = true;
	values[4] = Int32GetDatum(in_use);
	values[5] = Int32GetDatum(sandbox_max_concurrent_runs);
	values[6] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[7] = CStringGetTextDatum(work_dir);
	nulls[7] = work_dir[0] == '\0';
	values[8] = CStringGetTextDatum(problem);
	nulls[8] = problem[0] == '\0';

	warm_pool_columns(pid != 0, values, nulls, 9);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

PG_FUNCTION_INFO_V1(sandbox_in_transaction_block);

/*
 * agent._in_transaction_block(): whether the caller runs inside an
 * explicit transaction block (BEGIN ... COMMIT), where a procedure cannot
 * COMMIT (agent.prune_retention() then prunes in the caller's transaction).
 */
Datum
sandbox_in_transaction_block(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(IsTransactionBlock());
}
