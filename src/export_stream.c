/*-------------------------------------------------------------------------
 *
 * export_stream.c
 *		One round of the exporter's work: agent.tool_invocations and
 *		agent.egress_connections to ClickHouse through a logical
 *		replication slot, exactly once as a reader of the deduplicated
 *		tables sees them, and the audit anchors.
 *
 * Design (docs/export.md has the operator's view).  The worker owns one
 * permanent logical slot (sandbox.export_slot, plugin pgoutput, publication
 * sandbox_ext_tool_invocations, which holds both tables: the name is
 * 0.1.0's).  One round (sandbox_export_step):
 *
 *   1. short transaction: upto := pg_current_wal_flush_lsn(); peek at most
 *      sandbox.export_batch_rows messages up to upto; decode them into
 *      TabSeparated rows (pgoutput.c); commit.  No snapshot or slot is held
 *      from here on.
 *   2. insert the rows into ClickHouse (chclient.c), one insert per table,
 *      then the watermark (end LSN of the last transaction of the batch)
 *      into export_progress.
 *   3. short transaction: pg_replication_slot_advance(slot, target), where
 *      target is upto when the peek drained everything (an empty poll too,
 *      so unrelated WAL is released) and the last commit's end otherwise.
 *
 * Exactly once.  Every row carries its transaction's commit LSN as the
 * ReplacingMergeTree version (a run's egress rows commit with its
 * invocation row: one version for both), so a batch sent twice, or in
 * part, collapses.  The watermark (read from ClickHouse once at start)
 * makes the worker skip transactions it already delivered, so a crash
 * between 2 and 3, or a slot that lost its last advance in a PostgreSQL
 * crash (an advance reaches disk at the next checkpoint, or at once only
 * when restart_lsn moves), does not even insert them twice.  Rows are
 * written before the watermark: a crash between the two (or between the
 * two tables' inserts) re-sends rows that then collapse.
 *
 * Slot lifecycle.  The slot is created by this worker in its own
 * transaction (PostgreSQL refuses to create one in a transaction that
 * wrote), after agent.export_setup() has created the publication; its
 * consistent point C is recorded in agent.export_state together with a
 * pending copy of the tables, which the worker then sends table by table,
 * page by page, with version C - 1, below anything the slot will stream
 * (export_copy.c).
 * The same path serves agent.export_resync() after a lost slot, and a
 * table agent.export_setup() adds to the publication of a running export
 * (an upgrade from 0.1.0 adds agent.egress_connections): the setup holds
 * the table's writers off while it adds it, so every row committed before
 * is in the copy's snapshot and every later one in the stream, and records
 * a copy of it from that point.
 *
 * Audit anchors.  A round that finds sandbox.anchor_interval passed, and
 * each delivered batch, is followed by a publication of the audit chain
 * heads that changed (anchor.c) into the anchor table; a failure there is a
 * ClickHouse failure like any other (backoff, or the error state).
 *
 * Failures come back to the loop (export_worker.c) as a StepResult, with
 * the reason in sandbox_export_err; a permanent condition found in the
 * database raises an ERROR with sandbox_export_err.permanent set.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/standby.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "exporter.h"
#include "sandbox_ext.h"

#define EXPORT_PUBLICATION "sandbox_ext_tool_invocations"

/* WAL between restart_lsn and the advance target that prompts a snapshot. */
#define EXPORT_RESTART_GAP ((XLogRecPtr) 64 * 1024)

ExportStepError sandbox_export_err;
TimestampTz sandbox_export_last_insert_at = 0;

/* What this worker knows of ClickHouse (forgotten on a restart). */
static bool watermark_known = false;
static XLogRecPtr watermark = InvalidXLogRecPtr;
static TimestampTz anchor_round_at = 0;	/* last anchor round; 0: none yet */


/* Forget what is known of ClickHouse: the next round reads it again. */
void
sandbox_export_forget(void)
{
	watermark_known = false;
	sandbox_anchor_forget();
	anchor_round_at = 0;
}

void
sandbox_export_note_success(uint64 rows)
{
	sandbox_export_last_insert_at = GetCurrentTimestamp();
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->rows_exported += rows;
	sandbox_export_shared->batches++;
	sandbox_export_shared->watermark = watermark;
	sandbox_export_shared->last_success = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_export_shared->mutex);
}

/* ---- transactions ---- */

/* Short transactions: sandbox_xact_begin() / sandbox_xact_commit() (xact.c). */

/*
 * Logical decoding logs "starting logical decoding for slot" at LOG level
 * each time it starts, i.e. on every peek and advance; keep that out of
 * the server log for this transaction only.  Errors are still logged;
 * warnings found while decoding are counted and reported after commit.
 */
static void
quiet_decoding_logs(void)
{
	(void) set_config_option("log_min_messages", "error", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

void
sandbox_export_spi_exec(const char *sql, int nargs, Oid *types, Datum *values,
						const char *nulls, int expect)
{
	int			rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);

	if (rc != expect)
		elog(ERROR, "SPI_execute_with_args failed (%d): %s", rc, sql);
}

Datum
sandbox_export_slot_name_datum(void)
{
	return CStringGetTextDatum(sandbox_export_slot);
}

/* ---- ClickHouse requests ---- */

static ChTarget
target(void)
{
	ChTarget	t = {sandbox_clickhouse_url, sandbox_export_timeout_s};

	return t;
}

static void
sending(void)
{
	pgstat_report_activity(STATE_RUNNING, "sending to ClickHouse");
}

/* A request's outcome as a step's, with a WARNING for retries. */
static StepResult
outcome(ChResult r)
{
	pgstat_report_activity(STATE_IDLE, NULL);
	if (r == CH_OK)
		return STEP_MORE;
	if (r == CH_PERMANENT)
		return STEP_PERMANENT;
	ereport(WARNING,
			(errmsg("ClickHouse export will be retried: %s", sandbox_export_err.msg)));
	return STEP_TRANSIENT;
}

static StepResult
read_watermark(void)
{
	ChTarget	t = target();
	XLogRecPtr	lsn = InvalidXLogRecPtr;
	StepResult	r;

	sending();
	r = outcome(sandbox_ch_read_watermark(&t, sandbox_clickhouse_progress_table,
										  sandbox_export_slot, &lsn,
										  sandbox_export_err.msg, sizeof(sandbox_export_err.msg)));
	if (r != STEP_MORE)
		return r;
	watermark = lsn;
	watermark_known = true;
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->watermark = watermark;
	SpinLockRelease(&sandbox_export_shared->mutex);
	return STEP_MORE;
}

/* The ClickHouse table an exported table's rows go to (settings). */
static const char *
clickhouse_table(ExportTable t)
{
	return t == EXPORT_EGRESS_CONNECTIONS ? sandbox_clickhouse_egress_table : sandbox_clickhouse_table;
}

static void fault_point(ExportFault where);

/*
 * The batch's rows, table by table (each insert is one block).  A crash
 * between two inserts, or before the watermark, re-sends the batch: the
 * rows carry the same versions and collapse with the ones already there.
 */
StepResult
sandbox_export_send_rows(ExportBatch *b)
{
	ChTarget	t = target();
	bool		sent = false;
	int			i;

	for (i = 0; i < EXPORT_NTABLES; i++)
	{
		StepResult	r;

		if (b->table_rows[i] == 0)
			continue;
		if (sent)
			fault_point(EXPORT_FAULT_PAUSE_BETWEEN_TABLES);
		sending();
		r = outcome(sandbox_ch_insert(&t, clickhouse_table((ExportTable) i),
									  sandbox_export_clickhouse_columns((ExportTable) i), &b->tsv[i],
									  sandbox_export_err.msg, sizeof(sandbox_export_err.msg)));
		if (r != STEP_MORE)
			return r;
		sent = true;
	}
	return STEP_MORE;
}

static StepResult
send_watermark(XLogRecPtr lsn, uint64 rows)
{
	ChTarget	t = target();

	sending();
	return outcome(sandbox_ch_write_watermark(&t, sandbox_clickhouse_progress_table,
											  sandbox_export_slot, lsn, rows,
											  sandbox_export_err.msg, sizeof(sandbox_export_err.msg)));
}

/*
 * Publish the audit chain heads that changed since the last round
 * (anchor.c reads them, committed and flushed, in a short transaction).
 */
static StepResult
publish_anchors(void)
{
	StringInfoData tsv;
	int			n;

	initStringInfo(&tsv);
	sandbox_xact_begin("reading the audit chain heads");
	n = sandbox_anchor_collect(&tsv, sandbox_export_slot);
	sandbox_xact_commit();
	if (n > 0)
	{
		ChTarget	t = target();
		StepResult	r;

		sending();
		r = outcome(sandbox_ch_insert(&t, sandbox_anchor_insert_table[0] ?
									  sandbox_anchor_insert_table : sandbox_anchor_table,
									  sandbox_anchor_columns(), &tsv,
									  sandbox_export_err.msg, sizeof(sandbox_export_err.msg)));
		if (r != STEP_MORE)
			return r;
		sandbox_anchor_mark_sent();
	}
	anchor_round_at = GetCurrentTimestamp();
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->anchors_published += n;
	sandbox_export_shared->last_anchor_at = anchor_round_at;
	SpinLockRelease(&sandbox_export_shared->mutex);
	return STEP_MORE;
}

/* Milliseconds until the next periodic anchor round is due (0: now). */
long
sandbox_export_anchor_due_in_ms(void)
{
	TimestampTz due;

	if (anchor_round_at == 0)
		return 0;
	due = TimestampTzPlusMilliseconds(anchor_round_at, sandbox_anchor_interval_ms);
	return Max(0, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), due));
}

/*
 * Fault injection (sandbox.export_fault): stay here until terminated, so
 * a test can kill the worker at an exact point.  A reload does not end
 * the pause; only SIGTERM (pg_terminate_backend) does.
 */
static void
fault_point(ExportFault where)
{
	if (sandbox_export_fault != where)
		return;
	ereport(LOG,
			(errmsg("sandbox.export_fault: exporter paused, waiting to be terminated")));
	sandbox_export_set_state(SANDBOX_EXPORT_PAUSED);
	for (;;)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---- catalog checks and slot lifecycle ---- */

static void
read_objects(ExportObjects *o)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		vals[2];
	bool		isnull;

	memset(o, 0, sizeof(*o));
	vals[0] = sandbox_export_slot_name_datum();
	vals[1] = CStringGetTextDatum(EXPORT_PUBLICATION);
	sandbox_xact_begin("checking export objects");
	sandbox_export_spi_exec("SELECT * FROM agent._export_objects($1, $2)", 2, types, vals, NULL, SPI_OK_SELECT);
	if (SPI_processed == 1)
	{
		HeapTuple	t = SPI_tuptable->vals[0];
		TupleDesc	d = SPI_tuptable->tupdesc;
		Datum		v;

		o->table_exists = DatumGetBool(SPI_getbinval(t, d, 1, &isnull));
		o->publication_ok = DatumGetBool(SPI_getbinval(t, d, 2, &isnull));
		o->slot_exists = DatumGetBool(SPI_getbinval(t, d, 3, &isnull));
		o->slot_lost = DatumGetBool(SPI_getbinval(t, d, 4, &isnull));
		v = SPI_getbinval(t, d, 5, &isnull);
		o->confirmed_flush = isnull ? InvalidXLogRecPtr : DatumGetLSN(v);
		o->state_row = DatumGetBool(SPI_getbinval(t, d, 6, &isnull));
		o->slot_recorded = DatumGetBool(SPI_getbinval(t, d, 7, &isnull));
		o->resync_requested = DatumGetBool(SPI_getbinval(t, d, 8, &isnull));
		v = SPI_getbinval(t, d, 9, &isnull);
		o->copy_pending = !isnull;
		o->copy_lsn = isnull ? InvalidXLogRecPtr : DatumGetLSN(v);
		v = SPI_getbinval(t, d, 10, &isnull);
		o->has_copy_after = !isnull;
		if (!isnull)
			text_to_cstring_buffer(DatumGetTextPP(v), o->copy_after, sizeof(o->copy_after));
		v = SPI_getbinval(t, d, 11, &isnull);
		o->restart_lsn = isnull ? InvalidXLogRecPtr : DatumGetLSN(v);
		/*
		 * 0.1.0's function has 11 columns; this library drives that catalog
		 * until ALTER EXTENSION ... UPDATE (docs/operations.md), exporting
		 * agent.tool_invocations alone, as 0.1.0 did.
		 */
		o->catalog_0_1 = d->natts < 13;
		v = SPI_getbinval(t, d, 12, &isnull);
		o->copy_table = EXPORT_TOOL_INVOCATIONS;
		if (!isnull)
		{
			char	   *rel = TextDatumGetCString(v);
			int			i;

			for (i = 0; i < EXPORT_NTABLES; i++)
				if (strcmp(rel, sandbox_export_relname((ExportTable) i)) == 0)
					o->copy_table = (ExportTable) i;
		}
		v = SPI_getbinval(t, d, 13, &isnull);
		o->copy_after_seq = isnull ? 0 : DatumGetInt32(v);
	}
	sandbox_xact_commit();
}

static void
run_export_setup(void)
{
	sandbox_xact_begin("agent.export_setup()");
	sandbox_export_spi_exec("SELECT agent.export_setup()", 0, NULL, NULL, NULL, SPI_OK_SELECT);
	sandbox_xact_commit();
}

static void
drop_slot(void)
{
	Oid			types[1] = {TEXTOID};
	Datum		vals[1] = {sandbox_export_slot_name_datum()};

	sandbox_xact_begin("dropping the export slot");
	sandbox_export_spi_exec("SELECT agent._export_drop_slot($1)", 1, types, vals, NULL, SPI_OK_SELECT);
	sandbox_xact_commit();
}

/*
 * Record that the slot exists from consistent point `lsn` on, and that the
 * table must be copied once with a version below anything it streams.
 */
static void
record_slot(XLogRecPtr lsn)
{
	Oid			types[2] = {TEXTOID, PG_LSNOID};
	Datum		vals[2] = {sandbox_export_slot_name_datum(), LSNGetDatum(lsn)};

	sandbox_xact_begin("recording the export slot");
	sandbox_export_spi_exec("SELECT agent._export_record_slot($1, $2)", 2, types, vals, NULL, SPI_OK_SELECT);
	sandbox_xact_commit();
}

static void
create_slot(void)
{
	Oid			types[1] = {TEXTOID};
	Datum		vals[1] = {sandbox_export_slot_name_datum()};
	XLogRecPtr	lsn;
	bool		isnull;

	/* Must be the transaction's first and only work: it may not write. */
	sandbox_xact_begin("creating the export slot");
	sandbox_export_spi_exec("SELECT agent._export_create_slot($1)", 1, types, vals, NULL, SPI_OK_SELECT);
	lsn = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	sandbox_xact_commit();
	ereport(LOG,
			(errmsg("created replication slot \"%s\" for the ClickHouse export at %X/%X",
					sandbox_export_slot, LSN_FORMAT_ARGS(lsn))));
	record_slot(lsn);
}

/* ---- streaming ---- */

static void
advance_slot(XLogRecPtr target)
{
	Oid			types[2] = {TEXTOID, PG_LSNOID};
	Datum		vals[2] = {sandbox_export_slot_name_datum(), LSNGetDatum(target)};

	sandbox_xact_begin("advancing the export slot");
	quiet_decoding_logs();
	/* Never move backwards: advance refuses a target below confirmed. */
	sandbox_export_spi_exec("SELECT agent._export_advance_slot($1, $2)", 2, types, vals, NULL, SPI_OK_SELECT);
	sandbox_xact_commit();
}

static void
lag_poll_starts(void)
{
	SpinLockAcquire(&sandbox_export_shared->mutex);
	if (sandbox_export_shared->pending_since != 0 &&
		(sandbox_export_shared->inflight_since == 0 ||
		 sandbox_export_shared->pending_since < sandbox_export_shared->inflight_since))
		sandbox_export_shared->inflight_since = sandbox_export_shared->pending_since;
	sandbox_export_shared->pending_since = 0;
	SpinLockRelease(&sandbox_export_shared->mutex);
}

static void
lag_poll_drained(void)
{
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->inflight_since = 0;
	SpinLockRelease(&sandbox_export_shared->mutex);
}

/*
 * What a batch met besides rows, reported after its peek transaction
 * (which kept WARNINGs out of the log): replayed transactions skipped,
 * truncates and key-only deletes that cannot be mirrored.
 */
static void
report_batch(ExportBatch *b)
{
	if (b->skipped_txns > 0)
	{
		/* Replayed after a crash: delivered before, not sent again. */
		ereport(DEBUG1,
				(errmsg("skipped " UINT64_FORMAT " transactions already in ClickHouse",
						b->skipped_txns)));
		SpinLockAcquire(&sandbox_export_shared->mutex);
		sandbox_export_shared->txns_skipped += b->skipped_txns;
		SpinLockRelease(&sandbox_export_shared->mutex);
	}
	/* Reported here: the peek transaction kept WARNINGs out of the log. */
	if (b->truncates > 0)
		ereport(WARNING,
				(errmsg("truncate of an exported table is not exported"),
				 errhint("Rows removed by TRUNCATE stay in ClickHouse; agent.export_resync() re-copies the tables.")));
	if (b->dropped_deletes > 0)
		ereport(WARNING,
				(errmsg("ClickHouse export skipped " UINT64_FORMAT " deletes that carried only the key",
						b->dropped_deletes),
				 errhint("agent.export_setup() sets REPLICA IDENTITY FULL on the exported tables.")));
}

static StepResult
stream_batch(ExportObjects *o, ExportBatch *b)
{
	Oid			types[3] = {TEXTOID, TEXTOID, INT4OID};
	Datum		vals[3];
	XLogRecPtr	upto;
	XLogRecPtr	target;
	uint64		nmsgs;
	uint64		i;
	bool		isnull;
	bool		drained;
	StepResult	r;

	lag_poll_starts();
	sandbox_export_batch_reset(b, watermark);

	sandbox_xact_begin("peeking the export slot");
	quiet_decoding_logs();
	vals[0] = sandbox_export_slot_name_datum();
	vals[1] = CStringGetTextDatum(EXPORT_PUBLICATION);
	vals[2] = Int32GetDatum(sandbox_export_batch_rows);
	sandbox_export_spi_exec("SELECT upto, data FROM agent._export_peek($1, $2, $3)", 3, types, vals, NULL,
			 SPI_OK_SELECT);
	/* one row with no data when the slot has nothing new */
	upto = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	nmsgs = 0;
	for (i = 0; i < SPI_processed; i++)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull);
		bytea	   *msg;

		if (isnull)
			continue;
		msg = DatumGetByteaPP(d);
		sandbox_export_decode_message(b, VARDATA_ANY(msg), VARSIZE_ANY_EXHDR(msg));
		nmsgs++;
	}
	sandbox_xact_commit();

	drained = nmsgs < (uint64) sandbox_export_batch_rows;
	target = drained ? upto : b->last_end_lsn;

	if (b->rows > 0)
	{
		sandbox_export_set_state(SANDBOX_EXPORT_EXPORTING);
		r = sandbox_export_send_rows(b);
		if (r != STEP_MORE)
			return r;
		fault_point(EXPORT_FAULT_PAUSE_AFTER_ROWS);
		r = send_watermark(b->last_end_lsn, b->rows);
		if (r != STEP_MORE)
			return r;
		watermark = b->last_end_lsn;
		sandbox_export_note_success(b->rows);
		fault_point(EXPORT_FAULT_PAUSE_AFTER_WATERMARK);
	}
	report_batch(b);

	if (target != InvalidXLogRecPtr && target > o->confirmed_flush)
		advance_slot(target);

	/*
	 * Every peek and advance decodes from the slot's restart_lsn, which
	 * moves only past a running-transactions record; the bgwriter logs one
	 * every 15 s at best.  Under load that makes each round re-read up to
	 * 15 s of WAL, so log one ourselves once the gap grows: the next round
	 * decodes it and the advance after that moves restart_lsn up.
	 */
	if (o->restart_lsn != InvalidXLogRecPtr &&
		target > o->restart_lsn + EXPORT_RESTART_GAP)
		(void) LogStandbySnapshot();
	if (drained)
	{
		lag_poll_drained();
		if (b->rows == 0)
		{
			SpinLockAcquire(&sandbox_export_shared->mutex);
			sandbox_export_shared->last_success = GetCurrentTimestamp();
			SpinLockRelease(&sandbox_export_shared->mutex);
		}
		return STEP_CAUGHT_UP;
	}
	return STEP_MORE;
}

/*
 * One round: make sure the publication, slot and copy are in place, then
 * copy a page or stream a batch.  Permanent conditions raise an ERROR with
 * sandbox_export_err.permanent set; ClickHouse failures come back as a StepResult.
 */
StepResult
sandbox_export_step(ExportBatch *b)
{
	ExportObjects o;
	StepResult	r;

	if (!watermark_known)
	{
		r = read_watermark();
		if (r != STEP_MORE)
			return r;
	}
	if (sandbox_export_anchor_due_in_ms() == 0)
	{
		r = publish_anchors();
		if (r != STEP_MORE)
			return r;
	}

	read_objects(&o);
	if (!o.table_exists)
		return STEP_CAUGHT_UP;	/* nothing to export yet */
	if (o.resync_requested)
	{
		ereport(LOG,
				(errmsg("ClickHouse export: resync requested, recreating slot \"%s\" and copying the tables",
						sandbox_export_slot)));
		drop_slot();
		if (!o.publication_ok)
			run_export_setup();
		create_slot();
		return STEP_MORE;
	}
	if (!o.publication_ok || !o.state_row)
	{
		run_export_setup();
		return STEP_MORE;
	}
	if (!o.slot_exists)
	{
		if (o.slot_recorded || watermark != InvalidXLogRecPtr)
		{
			sandbox_export_err.permanent = true;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("replication slot \"%s\" of the ClickHouse export does not exist", sandbox_export_slot),
					 errdetail("The export delivered rows through this slot before; changes made since it disappeared were not exported."),
					 errhint("Call agent.export_resync() to recreate the slot and copy the tables again.")));
		}
		create_slot();
		return STEP_MORE;
	}
	if (!o.slot_recorded)
	{
		/* Created, but the worker died before recording it. */
		record_slot(o.confirmed_flush);
		return STEP_MORE;
	}
	if (o.slot_lost)
	{
		sandbox_export_err.permanent = true;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replication slot \"%s\" of the ClickHouse export has been invalidated", sandbox_export_slot),
				 errdetail("The slot fell behind by more than max_slot_wal_keep_size and the WAL it needed was removed."),
				 errhint("Call agent.export_resync() to recreate the slot and copy the tables again.")));
	}
	r = o.copy_pending ? sandbox_export_copy_page(&o, b) : stream_batch(&o, b);
	/* Every delivered batch is followed by the heads that cover it. */
	if ((r == STEP_MORE || r == STEP_CAUGHT_UP) && b->rows > 0)
	{
		StepResult	ar = publish_anchors();

		if (ar != STEP_MORE)
			return ar;
	}
	return r;
}

