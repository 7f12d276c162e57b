/*-------------------------------------------------------------------------
 *
 * xact.c
 *		A short transaction around SPI, for the background workers (the
 *		supervisor and the exporter): begin, commit, and give up after an
 *		error caught with PG_TRY.
 *
 * A worker's loop runs outside any transaction and does its work in short
 * ones.  Committing or aborting leaves CurrentMemoryContext in
 * TopMemoryContext, so both return to the context that was current at the
 * begin: without that, whatever a loop turn allocates after its first
 * transaction would live in TopMemoryContext and leak every turn.  One
 * transaction at a time: they do not nest.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "sandbox_ext.h"

static MemoryContext xact_caller_cxt = NULL;

/* Start a transaction with SPI connected and a snapshot; name it in pg_stat_activity. */
void
sandbox_xact_begin(const char *activity)
{
	xact_caller_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

void
sandbox_xact_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(xact_caller_cxt);
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * In PG_CATCH: abort the transaction and return a copy of the error, in
 * the caller's context (the caller reports it and FreeErrorData()s it).
 */
ErrorData *
sandbox_xact_abort(void)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(xact_caller_cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	MemoryContextSwitchTo(xact_caller_cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	return edata;
}

/* The same, logging the error at elevel with what was being done. */
void
sandbox_xact_abort_log(int elevel, const char *doing)
{
	ErrorData  *edata = sandbox_xact_abort();

	ereport(elevel,
			(errcode(edata->sqlerrcode),
			 errmsg("%s failed: %s", doing, edata->message),
			 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
	FreeErrorData(edata);
}

/*
 * The plan of sql, prepared and kept (SPI_keepplan) on the first call of
 * this backend and stored in *slot; the kept one afterwards.  For the
 * statements the hot paths run on every call (audit appends, the egress
 * trigger, agent.wait()); SPI must be connected.
 */
SPIPlanPtr
sandbox_keep_plan(SPIPlanPtr *slot, const char *sql, int nargs, Oid *types)
{
	if (*slot == NULL)
	{
		SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		*slot = plan;
	}
	return *slot;
}
