/*-------------------------------------------------------------------------
 *
 * export_state.c
 *		The exporter's shared memory and what backends do with it: the
 *		struct and its lock, the target of the commit-time wake-up, and
 *		the SQL-callable functions of the export.
 *
 * One struct of its own (SandboxExportShared, exporter.h), apart from the
 * supervisor's: shmem.c's PG15 hooks request its size and attach it under
 * AddinShmemInitLock; its own spinlock protects every field and is never
 * held across a call that can fail.  The worker (export_worker.c) publishes its
 * pid, latch and progress here; backends read them for
 * agent.export_status(), ask for a reset, and set the latch.
 *
 * Wake-up.  A statement trigger on agent.tool_invocations and
 * agent._export_wake() only mark the transaction (shmem.c's commit-time
 * wake-up, shared with the supervisor's); once the commit is visible,
 * shmem.c calls sandbox_export_wake_now(), here.  A rolled-back
 * transaction wakes nobody.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/trigger.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "sandbox_ext.h"
#include "exporter.h"

SandboxExportShared *sandbox_export_shared = NULL;

/* Shared memory the exporter needs (shmem.c's request hook asks for it). */
Size
sandbox_export_shmem_size(void)
{
	return MAXALIGN(sizeof(SandboxExportShared));
}

/* Attach to (or create) the struct: from shmem.c's startup hook, locked. */
void
sandbox_export_shmem_startup(void)
{
	bool		found;

	sandbox_export_shared = ShmemInitStruct("sandbox_ext exporter",
											sizeof(SandboxExportShared), &found);
	if (!found)
	{
		memset(sandbox_export_shared, 0, sizeof(SandboxExportShared));
		SpinLockInit(&sandbox_export_shared->mutex);
	}
}

void
sandbox_export_set_state(SandboxExportState st)
{
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->state = st;
	SpinLockRelease(&sandbox_export_shared->mutex);
}

void
sandbox_export_set_error(SandboxExportState st, const char *msg)
{
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->state = st;
	strlcpy(sandbox_export_shared->last_error, msg, SANDBOX_EXPORT_ERRLEN);
	sandbox_export_shared->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_export_shared->mutex);
}

/*
 * A transaction that changed agent.tool_invocations (or asked for a
 * reset) committed: note when, and set the worker's latch.
 */
void
sandbox_export_wake_now(bool reset)
{
	Latch	   *latch;

	if (sandbox_export_shared == NULL)
		return;
	SpinLockAcquire(&sandbox_export_shared->mutex);
	latch = sandbox_export_shared->latch;
	if (sandbox_export_shared->pending_since == 0)
		sandbox_export_shared->pending_since = GetCurrentTimestamp();
	if (reset)
		sandbox_export_shared->reset_requested = true;
	SpinLockRelease(&sandbox_export_shared->mutex);
	if (latch)
		SetLatch(latch);
}

/* ---- SQL-callable functions ---- */

PG_FUNCTION_INFO_V1(sandbox_export_wake_trigger);

/*
 * agent._export_wake_trigger(): statement trigger on agent.tool_invocations
 * that wakes the exporter when the transaction commits.
 */
Datum
sandbox_export_wake_trigger(PG_FUNCTION_ARGS)
{
	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("agent._export_wake_trigger() must be called as a trigger")));
	sandbox_wake_at_commit(SANDBOX_WAKE_EXPORTER);
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(sandbox_export_wake);

/*
 * agent._export_wake(reset): wake the exporter when this transaction
 * commits, and with reset also leave its error state then.  At commit, not
 * now: the exporter must see what the transaction wrote (a resync request)
 * when it looks again.
 */
Datum
sandbox_export_wake(PG_FUNCTION_ARGS)
{
	sandbox_wake_at_commit(SANDBOX_WAKE_EXPORTER |
						   (PG_GETARG_BOOL(0) ? SANDBOX_WAKE_EXPORT_RESET : 0));
	PG_RETURN_BOOL(sandbox_export_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_export_reset);

/*
 * agent.export_reset(): leave the error or backoff state and retry now.
 */
Datum
sandbox_export_reset(PG_FUNCTION_ARGS)
{
	Latch	   *latch;

	if (sandbox_export_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the ClickHouse exporter is not running"),
				 errhint("Add sandbox_ext to shared_preload_libraries.")));
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->reset_requested = true;
	latch = sandbox_export_shared->latch;
	SpinLockRelease(&sandbox_export_shared->mutex);
	if (latch)
		SetLatch(latch);
	PG_RETURN_BOOL(latch != NULL);
}

static const char *
state_name(int state)
{
	switch (state)
	{
		case SANDBOX_EXPORT_IDLE:
			return "idle";
		case SANDBOX_EXPORT_EXPORTING:
			return "exporting";
		case SANDBOX_EXPORT_BACKOFF:
			return "backoff";
		case SANDBOX_EXPORT_ERROR:
			return "error";
		case SANDBOX_EXPORT_PAUSED:
			return "paused";
		default:
			return "disabled";
	}
}

PG_FUNCTION_INFO_V1(sandbox_export_worker_state);

/*
 * agent._export_worker_state(): the exporter's shared state, for
 * agent.export_status().
 */
Datum
sandbox_export_worker_state(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[13];
	bool		nulls[13];
	SandboxExportShared s;
	int			pid;
	TimestampTz oldest;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	memset(nulls, 0, sizeof(nulls));
	if (sandbox_export_shared == NULL)
	{
		memset(&s, 0, sizeof(s));
		pid = 0;
	}
	else
	{
		SpinLockAcquire(&sandbox_export_shared->mutex);
		s = *sandbox_export_shared;
		pid = sandbox_export_shared->pid;
		SpinLockRelease(&sandbox_export_shared->mutex);
	}
	if (pid == 0 && s.state != SANDBOX_EXPORT_ERROR)
		s.state = SANDBOX_EXPORT_DISABLED;

	values[0] = CStringGetTextDatum(state_name(s.state));
	values[1] = Int32GetDatum(pid);
	nulls[1] = pid == 0;
	values[2] = Int64GetDatum((int64) s.rows_exported);
	values[3] = Int64GetDatum((int64) s.batches);
	values[4] = LSNGetDatum(s.watermark);
	nulls[4] = s.watermark == InvalidXLogRecPtr;
	values[5] = TimestampTzGetDatum(s.last_success);
	nulls[5] = s.last_success == 0;
	values[6] = CStringGetTextDatum(s.last_error);
	nulls[6] = s.last_error[0] == '\0';
	values[7] = TimestampTzGetDatum(s.last_error_at);
	nulls[7] = s.last_error_at == 0;
	oldest = s.inflight_since;
	if (s.pending_since != 0 && (oldest == 0 || s.pending_since < oldest))
		oldest = s.pending_since;
	values[8] = TimestampTzGetDatum(oldest);
	nulls[8] = oldest == 0;
	values[9] = TimestampTzGetDatum(s.backoff_until);
	nulls[9] = s.backoff_until == 0 || s.state != SANDBOX_EXPORT_BACKOFF;
	values[10] = Int64GetDatum((int64) s.txns_skipped);
	values[11] = Int64GetDatum((int64) s.anchors_published);
	values[12] = TimestampTzGetDatum(s.last_anchor_at);
	nulls[12] = s.last_anchor_at == 0;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
