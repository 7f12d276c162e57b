/*-------------------------------------------------------------------------
 *
 * exporter.c
 *		The exporter background worker: agent.tool_invocations to
 *		ClickHouse through a logical replication slot, exactly once as a
 *		reader of the deduplicated table sees it.
 *
 * Design (docs/export.md has the operator's view).  The worker owns one
 * permanent logical slot (sandbox.export_slot, plugin pgoutput, publication
 * sandbox_ext_tool_invocations).  One round:
 *
 *   1. short transaction: upto := pg_current_wal_flush_lsn(); peek at most
 *      sandbox.export_batch_rows messages up to upto; decode them into
 *      TabSeparated rows (pgoutput.c); commit.  No snapshot or slot is held
 *      from here on.
 *   2. POST the rows to ClickHouse (chclient.c), then POST the watermark
 *      (end LSN of the last transaction of the batch) to export_progress.
 *   3. short transaction: pg_replication_slot_advance(slot, target), where
 *      target is upto when the peek drained everything (an empty poll too,
 *      so unrelated WAL is released) and the last commit's end otherwise.
 *
 * Exactly once.  Every row carries its transaction's commit LSN as the
 * ReplacingMergeTree version, so a batch sent twice collapses.  The
 * watermark (read from ClickHouse once at start) makes the worker skip
 * transactions it already delivered, so a crash between 2 and 3, or a
 * slot that lost its last advance in a PostgreSQL crash (an advance
 * reaches disk at the next checkpoint, or at once only when restart_lsn
 * moves), does not even insert them twice.  Rows are
 * written before the watermark: a crash between the two re-sends rows
 * that then collapse.
 *
 * Slot lifecycle.  The slot is created by this worker in its own
 * transaction (PostgreSQL refuses to create one in a transaction that
 * wrote), after agent.export_setup() has created the publication; its
 * consistent point C is recorded in agent.export_state together with a
 * pending copy of the whole table, which the worker then sends page by
 * page with version C - 1, below anything the slot will stream.  The same
 * path serves agent.export_resync() after a lost slot.
 *
 * Failures.  ClickHouse unreachable or overloaded: exponential backoff, the
 * slot keeps the WAL.  Permanent errors (schema mismatch on either side,
 * rejected data, lost slot): state "error", an ERROR in the server log, and
 * no retries until agent.export_reset() or a configuration reload.
 *
 * Audit anchors.  Each round that finds sandbox.anchor_interval passed,
 * and each delivered batch, is followed by a publication of the audit
 * chain heads that changed (anchor.c) into sandbox.clickhouse_anchor_table;
 * a failure there is a ClickHouse failure like any other (backoff, or the
 * error state).
 *
 * Wake-up.  A statement trigger on agent.tool_invocations marks the
 * transaction; at commit the exporter's latch is set (the pattern of
 * agent._wake_supervisor() in shmem.c).  sandbox.export_poll_interval is a
 * slow backstop.
 *
 * Locking: the export fields of SandboxShared are protected by its
 * spinlock; nothing is held across a call that can fail.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/standby.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "sandbox_ext.h"
#include "exporter.h"

#define EXPORT_PUBLICATION "sandbox_ext_tool_invocations"

/* WAL between restart_lsn and the advance target that prompts a snapshot. */
#define EXPORT_RESTART_GAP ((XLogRecPtr) 64 * 1024)

typedef enum ExportFault
{
	EXPORT_FAULT_NONE,
	EXPORT_FAULT_PAUSE_AFTER_ROWS,
	EXPORT_FAULT_PAUSE_AFTER_WATERMARK
} ExportFault;

static const struct config_enum_entry export_fault_options[] = {
	{"none", EXPORT_FAULT_NONE, false},
	{"pause_after_rows", EXPORT_FAULT_PAUSE_AFTER_ROWS, false},
	{"pause_after_watermark", EXPORT_FAULT_PAUSE_AFTER_WATERMARK, false},
	{NULL, 0, false}
};

/* Outcome of one round of work. */
typedef enum StepResult
{
	STEP_CAUGHT_UP,				/* nothing left up to the flush LSN */
	STEP_MORE,					/* go again at once */
	STEP_TRANSIENT,				/* back off, retry */
	STEP_PERMANENT				/* stop until reset */
} StepResult;

/* What one look at the catalogs says about the export's objects. */
typedef struct ExportObjects
{
	bool		table_exists;
	bool		publication_ok;
	bool		state_row;
	bool		slot_exists;
	bool		slot_lost;
	bool		slot_recorded;	/* export_state knows the slot was created */
	bool		resync_requested;
	bool		copy_pending;
	XLogRecPtr	confirmed_flush;
	XLogRecPtr	restart_lsn;
	XLogRecPtr	copy_lsn;
	char		copy_after[40];
	bool		has_copy_after;
} ExportObjects;

/* GUC variables (the first three are read by anchor.c too) */
char	   *sandbox_clickhouse_url = NULL;
char	   *sandbox_anchor_table = NULL;
int			sandbox_export_timeout_s = 30;
static char *export_table = NULL;
static char *export_progress_table = NULL;
static char *export_slot = NULL;
static int	export_batch_rows = 50000;
static int	export_poll_interval_ms = 10000;
static int	export_min_interval_ms = 100;
static int	anchor_interval_ms = 60000;
static char *anchor_insert_table = NULL;
static int	export_max_backoff_s = 60;
static int	export_fault = EXPORT_FAULT_NONE;

/* Worker-local state */
static MemoryContext export_cxt = NULL;	/* lives as long as the worker */
static MemoryContext round_cxt = NULL;	/* reset before every round */
static MemoryContext xact_caller_cxt = NULL;
static bool watermark_known = false;
static XLogRecPtr watermark = InvalidXLogRecPtr;
static int	backoff_ms = 0;
static TimestampTz last_insert_at = 0;	/* for sandbox.export_min_interval */
static char step_err[SANDBOX_EXPORT_ERRLEN];
static bool step_permanent = false;	/* set just before a permanent ERROR */
static char *seen_url = NULL;
static char *seen_table = NULL;
static char *seen_slot = NULL;
static char *seen_anchor_table = NULL;
static TimestampTz anchor_round_at = 0;	/* last anchor round; 0: none yet */

/* Backend-local: wake the exporter when this transaction commits. */
static bool export_wake_pending = false;
static bool export_reset_pending = false;
static bool export_callback_registered = false;

PGDLLEXPORT void sandbox_export_main(Datum main_arg);

/* ---- GUCs ---- */

static bool
check_identifier_path(char **newval, void **extra, GucSource source)
{
	const char *s;

	for (s = *newval; *s; s++)
		if (!(isalnum((unsigned char) *s) || *s == '_' || *s == '.'))
		{
			GUC_check_errdetail("Only letters, digits, \"_\" and \".\" are allowed.");
			return false;
		}
	if (**newval == '\0')
	{
		GUC_check_errdetail("The name must not be empty.");
		return false;
	}
	return true;
}

static bool
check_optional_identifier_path(char **newval, void **extra, GucSource source)
{
	return **newval == '\0' || check_identifier_path(newval, extra, source);
}

static bool
check_slot_name(char **newval, void **extra, GucSource source)
{
	const char *s;

	if (strlen(*newval) == 0 || strlen(*newval) >= NAMEDATALEN)
	{
		GUC_check_errdetail("A slot name has 1 to %d characters.", NAMEDATALEN - 1);
		return false;
	}
	for (s = *newval; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
		{
			GUC_check_errdetail("Replication slot names contain only lower case letters, digits and \"_\".");
			return false;
		}
	return true;
}

static bool
check_url(char **newval, void **extra, GucSource source)
{
	if (**newval == '\0' ||
		strncmp(*newval, "http://", 7) == 0 || strncmp(*newval, "https://", 8) == 0)
		return true;
	GUC_check_errdetail("The URL must start with http:// or https://, or be empty to turn the export off.");
	return false;
}

void
sandbox_export_define_gucs(void)
{
	DefineCustomStringVariable("sandbox.clickhouse_url",
							   "ClickHouse HTTP interface the exporter writes to.",
							   "Empty turns the export off.",
							   &sandbox_clickhouse_url, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   check_url, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_table",
							   "ClickHouse table (optionally database.table) receiving tool invocations.",
							   NULL,
							   &export_table, "tool_invocations",
							   PGC_SIGHUP, 0,
							   check_identifier_path, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_progress_table",
							   "ClickHouse table holding the export watermark.",
							   NULL,
							   &export_progress_table, "export_progress",
							   PGC_SIGHUP, 0,
							   check_identifier_path, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_anchor_table",
							   "ClickHouse table (optionally database.table) holding the audit chain anchors.",
							   "agent.verify_audit_chain() reads the anchors here; the exporter inserts them here too unless sandbox.clickhouse_anchor_insert_table is set.",
							   &sandbox_anchor_table, "audit_anchors",
							   PGC_SIGHUP, 0,
							   check_identifier_path, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_anchor_insert_table",
							   "ClickHouse table the exporter inserts audit chain anchors into, when not sandbox.clickhouse_anchor_table.",
							   "For an insert-only entry table in front of the anchors (docs/export.md); empty means sandbox.clickhouse_anchor_table.",
							   &anchor_insert_table, "",
							   PGC_SIGHUP, 0,
							   check_optional_identifier_path, NULL, NULL);
	DefineCustomIntVariable("sandbox.anchor_interval",
							"Longest time between two publications of the audit chain heads to ClickHouse.",
							"Heads are also published after every export batch; only heads that changed are sent.",
							&anchor_interval_ms, 60000, 1000, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.export_slot",
							   "Logical replication slot of the ClickHouse export.",
							   NULL,
							   &export_slot, "sandbox_ext_export",
							   PGC_SIGHUP, 0,
							   check_slot_name, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_batch_rows",
							"Most pgoutput messages decoded, and rows sent, per export batch.",
							"Kept below ClickHouse's max_insert_block_size so each batch is inserted atomically.",
							&export_batch_rows, 50000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_poll_interval",
							"Longest sleep of the exporter between two looks at the slot.",
							"Commits wake the exporter at once; this is a backstop.",
							&export_poll_interval_ms, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_min_interval",
							"Shortest time between two ClickHouse inserts of the exporter.",
							"Each insert makes a part in ClickHouse; this bounds parts per second under a trickle of commits, at the cost of that much latency.",
							&export_min_interval_ms, 100, 0, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_timeout",
							"Timeout of one HTTP request to ClickHouse.",
							NULL,
							&sandbox_export_timeout_s, 30, 1, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_max_backoff",
							"Longest wait between retries while ClickHouse is unreachable.",
							NULL,
							&export_max_backoff_s, 60, 1, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomEnumVariable("sandbox.export_fault",
							 "Fault injection for tests: pause the exporter between its ClickHouse insert and the slot advance.",
							 "Never set this in production.",
							 &export_fault, EXPORT_FAULT_NONE, export_fault_options,
							 PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							 NULL, NULL, NULL);
}

void
sandbox_export_register(void)
{
	sandbox_register_worker("sandbox_export_main", "sandbox_ext exporter");
}

/* ---- shared state ---- */

static void
set_state(SandboxExportState st)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.state = st;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
set_error(SandboxExportState st, const char *msg)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.state = st;
	strlcpy(sandbox_shared->export.last_error, msg, SANDBOX_EXPORT_ERRLEN);
	sandbox_shared->export.last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
note_success(uint64 rows)
{
	last_insert_at = GetCurrentTimestamp();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.rows_exported += rows;
	sandbox_shared->export.batches++;
	sandbox_shared->export.watermark = watermark;
	sandbox_shared->export.last_success = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
export_shmem_exit(int code, Datum arg)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->exporter_pid = 0;
	sandbox_shared->exporter_latch = NULL;
	if (sandbox_shared->export.state != SANDBOX_EXPORT_ERROR)
		sandbox_shared->export.state = SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_shared->mutex);
	ch_close();
}

/* ---- transactions ---- */

/*
 * Short transactions.  Commit leaves CurrentMemoryContext at
 * TopMemoryContext, so xact_end() returns to the caller's context (the
 * round's), or every round would leak into TopMemoryContext.
 */
static void
xact_begin(const char *activity)
{
	xact_caller_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

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

static void
xact_end(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(xact_caller_cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
}

static void
spi_exec(const char *sql, int nargs, Oid *types, Datum *values,
		 const char *nulls, int expect)
{
	int			rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);

	if (rc != expect)
		elog(ERROR, "SPI_execute_with_args failed (%d): %s", rc, sql);
}

static Datum
slot_name_datum(void)
{
	return CStringGetTextDatum(export_slot);
}

/* ---- ClickHouse requests ---- */

/* ch_post with the step's error buffer and a WARNING for retries. */
static StepResult
post(const char *query, const char *body, size_t len, StringInfo response)
{
	ChResult	r;

	pgstat_report_activity(STATE_RUNNING, "sending to ClickHouse");
	r = ch_post(sandbox_clickhouse_url, query, body, len, sandbox_export_timeout_s, response,
				CH_RESPONSE_MAX, step_err, sizeof(step_err));
	pgstat_report_activity(STATE_IDLE, NULL);
	if (r == CH_OK)
		return STEP_MORE;
	if (r == CH_PERMANENT)
		return STEP_PERMANENT;
	ereport(WARNING,
			(errmsg("ClickHouse export will be retried: %s", step_err)));
	return STEP_TRANSIENT;
}

static StepResult
read_watermark(void)
{
	StringInfoData q;
	StringInfoData resp;
	StepResult	r;

	initStringInfo(&q);
	initStringInfo(&resp);
	/* The slot name is checked to be [a-z0-9_], so quoting it is safe. */
	appendStringInfo(&q, "SELECT max(lsn) FROM %s WHERE slot = '%s' FORMAT TabSeparated",
					 export_progress_table, export_slot);
	r = post(q.data, NULL, 0, &resp);
	if (r != STEP_MORE)
		return r;
	watermark = (XLogRecPtr) strtoull(resp.data, NULL, 10);
	watermark_known = true;
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.watermark = watermark;
	SpinLockRelease(&sandbox_shared->mutex);
	return STEP_MORE;
}

static StepResult
send_rows(ExportBatch *b)
{
	StringInfoData q;
	StringInfoData resp;

	initStringInfo(&q);
	initStringInfo(&resp);
	appendStringInfo(&q, "INSERT INTO %s (%s) FORMAT TabSeparated",
					 export_table, export_clickhouse_column_list());
	return post(q.data, b->tsv.data, b->tsv.len, &resp);
}

static StepResult
send_watermark(XLogRecPtr lsn, uint64 rows)
{
	StringInfoData q;
	StringInfoData body;
	StringInfoData resp;

	initStringInfo(&q);
	initStringInfo(&body);
	initStringInfo(&resp);
	appendStringInfo(&q, "INSERT INTO %s (slot, lsn, rows) FORMAT TabSeparated",
					 export_progress_table);
	appendStringInfo(&body, "%s\t" UINT64_FORMAT "\t" UINT64_FORMAT "\n",
					 export_slot, (uint64) lsn, rows);
	return post(q.data, body.data, body.len, &resp);
}

/*
 * Publish the audit chain heads that changed since the last round
 * (anchor.c reads them, committed and flushed, in a short transaction).
 */
static StepResult
publish_anchors(void)
{
	StringInfoData tsv;
	StringInfoData q;
	StringInfoData resp;
	int			n;
	StepResult	r;

	initStringInfo(&tsv);
	xact_begin("reading the audit chain heads");
	n = anchor_collect(&tsv, export_slot);
	xact_end();
	if (n > 0)
	{
		initStringInfo(&q);
		initStringInfo(&resp);
		appendStringInfo(&q, "INSERT INTO %s (%s) FORMAT TabSeparated",
						 anchor_insert_table[0] ? anchor_insert_table : sandbox_anchor_table,
						 anchor_column_list());
		r = post(q.data, tsv.data, tsv.len, &resp);
		if (r != STEP_MORE)
			return r;
		anchor_mark_sent();
	}
	anchor_round_at = GetCurrentTimestamp();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.anchors_published += n;
	sandbox_shared->export.last_anchor_at = anchor_round_at;
	SpinLockRelease(&sandbox_shared->mutex);
	return STEP_MORE;
}

/* Milliseconds until the next periodic anchor round is due (0: now). */
static long
anchor_due_in_ms(void)
{
	TimestampTz due;

	if (anchor_round_at == 0)
		return 0;
	due = TimestampTzPlusMilliseconds(anchor_round_at, anchor_interval_ms);
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
	if (export_fault != where)
		return;
	ereport(LOG,
			(errmsg("sandbox.export_fault: exporter paused, waiting to be terminated")));
	set_state(SANDBOX_EXPORT_PAUSED);
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
	vals[0] = slot_name_datum();
	vals[1] = CStringGetTextDatum(EXPORT_PUBLICATION);
	xact_begin("checking export objects");
	spi_exec("SELECT to_regclass('agent.tool_invocations') IS NOT NULL,"
			 " EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables"
			 "         WHERE pubname = $2 AND schemaname = 'agent' AND tablename = 'tool_invocations'),"
			 " s.slot_name IS NOT NULL, coalesce(s.wal_status = 'lost', false),"
			 " s.confirmed_flush_lsn,"
			 " e.slot_name IS NOT NULL, coalesce(e.slot_created_at IS NOT NULL, false),"
			 " coalesce(e.resync_requested, false), e.copy_lsn, e.copy_after::text,"
			 " s.restart_lsn"
			 " FROM (SELECT 1) AS one"
			 " LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = $1"
			 " LEFT JOIN agent.export_state e ON e.slot_name = $1",
			 2, types, vals, NULL, SPI_OK_SELECT);
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
	}
	xact_end();
}

static void
run_export_setup(void)
{
	xact_begin("agent.export_setup()");
	spi_exec("SELECT agent.export_setup()", 0, NULL, NULL, NULL, SPI_OK_SELECT);
	xact_end();
}

static void
drop_slot(void)
{
	Oid			types[1] = {TEXTOID};
	Datum		vals[1] = {slot_name_datum()};

	xact_begin("dropping the export slot");
	spi_exec("SELECT pg_catalog.pg_drop_replication_slot(slot_name)"
			 " FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
			 1, types, vals, NULL, SPI_OK_SELECT);
	xact_end();
}

/*
 * Record that the slot exists from consistent point `lsn` on, and that the
 * table must be copied once with a version below anything it streams.
 */
static void
record_slot(XLogRecPtr lsn)
{
	Oid			types[2] = {TEXTOID, PG_LSNOID};
	Datum		vals[2] = {slot_name_datum(), LSNGetDatum(lsn)};

	xact_begin("recording the export slot");
	spi_exec("INSERT INTO agent.export_state AS e (slot_name, slot_created_at, copy_lsn, copy_after, copied_rows, resync_requested)"
			 " VALUES ($1, now(), $2, NULL, 0, false)"
			 " ON CONFLICT (slot_name) DO UPDATE SET slot_created_at = now(), copy_lsn = $2,"
			 "   copy_after = NULL, copied_rows = 0, resync_requested = false",
			 2, types, vals, NULL, SPI_OK_INSERT);
	xact_end();
}

static void
create_slot(void)
{
	Oid			types[1] = {TEXTOID};
	Datum		vals[1] = {slot_name_datum()};
	XLogRecPtr	lsn;
	bool		isnull;

	/* Must be the transaction's first and only work: it may not write. */
	xact_begin("creating the export slot");
	spi_exec("SELECT lsn FROM pg_catalog.pg_create_logical_replication_slot($1, 'pgoutput')",
			 1, types, vals, NULL, SPI_OK_SELECT);
	lsn = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	xact_end();
	ereport(LOG,
			(errmsg("created replication slot \"%s\" for the ClickHouse export at %X/%X",
					export_slot, LSN_FORMAT_ARGS(lsn))));
	record_slot(lsn);
}

/* Note a copied page: move the cursor, and end the copy after the last. */
static void
record_copy_progress(const char *last, uint64 n, bool done)
{
	Oid			types[4] = {TEXTOID, TEXTOID, BOOLOID, INT8OID};
	Datum		vals[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	vals[0] = slot_name_datum();
	vals[1] = CStringGetTextDatum(last);
	nulls[1] = n > 0 ? ' ' : 'n';
	vals[2] = BoolGetDatum(done);
	vals[3] = Int64GetDatum((int64) n);
	xact_begin("recording copy progress");
	spi_exec("UPDATE agent.export_state SET copy_after = coalesce($2::uuid, copy_after),"
			 " copied_rows = copied_rows + $4,"
			 " copy_lsn = CASE WHEN $3 THEN NULL ELSE copy_lsn END"
			 " WHERE slot_name = $1",
			 4, types, vals, nulls, SPI_OK_UPDATE);
	xact_end();
	if (done)
		ereport(LOG,
				(errmsg("ClickHouse export: table copy for slot \"%s\" finished", export_slot)));
}

/*
 * One page of the table copy (initial export or resync).  Pages are keyed
 * on invocation_id, each read in its own short transaction; every row
 * goes out with version copy_lsn - 1, so whatever the slot streams later
 * (version >= copy_lsn) wins, and re-sending a page after a crash is
 * harmless.  Rows are read with the types' output functions, the same text
 * pgoutput sends, so one conversion serves both paths.
 */
static StepResult
copy_page(ExportObjects *o, ExportBatch *b)
{
	Oid			types[2] = {UUIDOID, INT4OID};
	Datum		vals[2];
	char		nulls[2] = {' ', ' '};
	uint64		n;
	uint64		i;
	char		last[40] = "";
	StringInfoData sql;
	StepResult	r;
	int			j;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");
	for (j = 0; j < EXPORT_NCOLUMNS; j++)
		appendStringInfo(&sql, "%s%s", j ? ", " : "", export_pg_columns[j]);
	appendStringInfoString(&sql, " FROM agent.tool_invocations"
						   " WHERE $1 IS NULL OR invocation_id > $1"
						   " ORDER BY invocation_id LIMIT $2");

	export_batch_reset(b, InvalidXLogRecPtr);
	if (o->has_copy_after)
		vals[0] = DirectFunctionCall1(uuid_in, CStringGetDatum(o->copy_after));
	else
	{
		vals[0] = (Datum) 0;
		nulls[0] = 'n';
	}
	vals[1] = Int32GetDatum(export_batch_rows);

	xact_begin("copying agent.tool_invocations");
	spi_exec(sql.data, 2, types, vals, nulls, SPI_OK_SELECT);
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		char	   *row[EXPORT_NCOLUMNS];

		for (j = 0; j < EXPORT_NCOLUMNS; j++)
			row[j] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, j + 1);
		export_append_row(b, row, false, o->copy_lsn - 1);
		if (i == n - 1)
			strlcpy(last, row[2], sizeof(last));	/* invocation_id */
	}
	xact_end();

	if (n > 0)
	{
		set_state(SANDBOX_EXPORT_EXPORTING);
		r = send_rows(b);
		if (r != STEP_MORE)
			return r;
		note_success(n);
	}
	record_copy_progress(last, n, n < (uint64) export_batch_rows);
	return STEP_MORE;
}

/* ---- streaming ---- */

static void
advance_slot(XLogRecPtr target)
{
	Oid			types[2] = {TEXTOID, PG_LSNOID};
	Datum		vals[2] = {slot_name_datum(), LSNGetDatum(target)};

	xact_begin("advancing the export slot");
	quiet_decoding_logs();
	/* Never move backwards: advance refuses a target below confirmed. */
	spi_exec("SELECT pg_catalog.pg_replication_slot_advance(slot_name, $2)"
			 " FROM pg_catalog.pg_replication_slots"
			 " WHERE slot_name = $1 AND confirmed_flush_lsn < $2",
			 2, types, vals, NULL, SPI_OK_SELECT);
	xact_end();
}

static void
lag_poll_starts(void)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	if (sandbox_shared->export.pending_since != 0 &&
		(sandbox_shared->export.inflight_since == 0 ||
		 sandbox_shared->export.pending_since < sandbox_shared->export.inflight_since))
		sandbox_shared->export.inflight_since = sandbox_shared->export.pending_since;
	sandbox_shared->export.pending_since = 0;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
lag_poll_drained(void)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.inflight_since = 0;
	SpinLockRelease(&sandbox_shared->mutex);
}

static StepResult
stream_batch(ExportObjects *o, ExportBatch *b)
{
	Oid			types[4] = {TEXTOID, PG_LSNOID, INT4OID, TEXTOID};
	Datum		vals[4];
	XLogRecPtr	upto;
	XLogRecPtr	target;
	uint64		nmsgs;
	uint64		i;
	bool		isnull;
	bool		drained;
	StepResult	r;

	lag_poll_starts();
	export_batch_reset(b, watermark);

	xact_begin("peeking the export slot");
	quiet_decoding_logs();
	spi_exec("SELECT pg_catalog.pg_current_wal_flush_lsn()", 0, NULL, NULL, NULL, SPI_OK_SELECT);
	upto = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	vals[0] = slot_name_datum();
	vals[1] = LSNGetDatum(upto);
	vals[2] = Int32GetDatum(export_batch_rows);
	vals[3] = CStringGetTextDatum(EXPORT_PUBLICATION);
	spi_exec("SELECT data FROM pg_catalog.pg_logical_slot_peek_binary_changes($1, $2, $3,"
			 " 'proto_version', '1', 'publication_names', $4)",
			 4, types, vals, NULL, SPI_OK_SELECT);
	nmsgs = SPI_processed;
	for (i = 0; i < nmsgs; i++)
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		bytea	   *msg = DatumGetByteaPP(d);

		export_decode_message(b, VARDATA_ANY(msg), VARSIZE_ANY_EXHDR(msg));
	}
	xact_end();

	drained = nmsgs < (uint64) export_batch_rows;
	target = drained ? upto : b->last_end_lsn;

	if (b->rows > 0)
	{
		set_state(SANDBOX_EXPORT_EXPORTING);
		r = send_rows(b);
		if (r != STEP_MORE)
			return r;
		fault_point(EXPORT_FAULT_PAUSE_AFTER_ROWS);
		r = send_watermark(b->last_end_lsn, b->rows);
		if (r != STEP_MORE)
			return r;
		watermark = b->last_end_lsn;
		note_success(b->rows);
		fault_point(EXPORT_FAULT_PAUSE_AFTER_WATERMARK);
	}
	if (b->skipped_txns > 0)
	{
		/* Replayed after a crash: delivered before, not sent again. */
		ereport(DEBUG1,
				(errmsg("skipped " UINT64_FORMAT " transactions already in ClickHouse",
						b->skipped_txns)));
		SpinLockAcquire(&sandbox_shared->mutex);
		sandbox_shared->export.txns_skipped += b->skipped_txns;
		SpinLockRelease(&sandbox_shared->mutex);
	}
	/* Reported here: the peek transaction kept WARNINGs out of the log. */
	if (b->truncates > 0)
		ereport(WARNING,
				(errmsg("truncate of agent.tool_invocations is not exported"),
				 errhint("Rows removed by TRUNCATE stay in ClickHouse; agent.export_resync() re-copies the table.")));
	if (b->dropped_deletes > 0)
		ereport(WARNING,
				(errmsg("ClickHouse export skipped " UINT64_FORMAT " deletes that carried only the key",
						b->dropped_deletes),
				 errhint("agent.export_setup() sets REPLICA IDENTITY FULL on agent.tool_invocations.")));

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
			SpinLockAcquire(&sandbox_shared->mutex);
			sandbox_shared->export.last_success = GetCurrentTimestamp();
			SpinLockRelease(&sandbox_shared->mutex);
		}
		return STEP_CAUGHT_UP;
	}
	return STEP_MORE;
}

/*
 * One round: make sure the publication, slot and copy are in place, then
 * copy a page or stream a batch.  Permanent conditions raise an ERROR with
 * step_permanent set; ClickHouse failures come back as a StepResult.
 */
static StepResult
export_step(ExportBatch *b)
{
	ExportObjects o;
	StepResult	r;

	if (!watermark_known)
	{
		r = read_watermark();
		if (r != STEP_MORE)
			return r;
	}
	if (anchor_due_in_ms() == 0)
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
				(errmsg("ClickHouse export: resync requested, recreating slot \"%s\" and copying the table",
						export_slot)));
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
			step_permanent = true;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("replication slot \"%s\" of the ClickHouse export does not exist", export_slot),
					 errdetail("The export delivered rows through this slot before; changes made since it disappeared were not exported."),
					 errhint("Call agent.export_resync() to recreate the slot and copy the table again.")));
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
		step_permanent = true;
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("replication slot \"%s\" of the ClickHouse export has been invalidated", export_slot),
				 errdetail("The slot fell behind by more than max_slot_wal_keep_size and the WAL it needed was removed."),
				 errhint("Call agent.export_resync() to recreate the slot and copy the table again.")));
	}
	r = o.copy_pending ? copy_page(&o, b) : stream_batch(&o, b);
	/* Every delivered batch is followed by the heads that cover it. */
	if ((r == STEP_MORE || r == STEP_CAUGHT_UP) && b->rows > 0)
	{
		StepResult	ar = publish_anchors();

		if (ar != STEP_MORE)
			return ar;
	}
	return r;
}

/* ---- the worker ---- */

static bool
config_changed(void)
{
	bool		changed = false;

	if (seen_url == NULL || strcmp(seen_url, sandbox_clickhouse_url) != 0 ||
		strcmp(seen_table, export_table) != 0 || strcmp(seen_slot, export_slot) != 0 ||
		strcmp(seen_anchor_table, anchor_insert_table[0] ? anchor_insert_table : sandbox_anchor_table) != 0)
		changed = true;
	if (changed)
	{
		MemoryContext old = MemoryContextSwitchTo(export_cxt);

		if (seen_url)
		{
			pfree(seen_url);
			pfree(seen_table);
			pfree(seen_slot);
			pfree(seen_anchor_table);
		}
		seen_url = pstrdup(sandbox_clickhouse_url);
		seen_table = pstrdup(export_table);
		seen_slot = pstrdup(export_slot);
		seen_anchor_table = pstrdup(anchor_insert_table[0] ? anchor_insert_table : sandbox_anchor_table);
		MemoryContextSwitchTo(old);
	}
	return changed;
}

/* Forget errors and cached ClickHouse state: a fresh start. */
static void
export_restart(void)
{
	watermark_known = false;
	backoff_ms = 0;
	anchor_forget();
	anchor_round_at = 0;
	ch_close();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.reset_requested = false;
	sandbox_shared->export.backoff_until = 0;
	sandbox_shared->export.state = sandbox_clickhouse_url[0] ? SANDBOX_EXPORT_IDLE : SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
enter_backoff(void)
{
	TimestampTz until;

	backoff_ms = backoff_ms == 0 ? 1000 : Min(backoff_ms * 2, export_max_backoff_s * 1000);
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backoff_ms);
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.backoff_until = until;
	SpinLockRelease(&sandbox_shared->mutex);
	set_error(SANDBOX_EXPORT_BACKOFF, step_err);
}

/* Log a ClickHouse refusal at ERROR level without leaving the loop. */
static void
log_permanent_refusal(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	PG_TRY();
	{
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("ClickHouse export stopped: %s", step_err),
				 errhint("Fix the cause, then call agent.export_reset().")));
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		EmitErrorReport();
		FlushErrorState();
	}
	PG_END_TRY();
}

/* Run one step, turning any ERROR into a state; returns the wait in ms. */
static long
export_round(ExportBatch *b)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile StepResult r = STEP_TRANSIENT;
	volatile bool raised = false;

	step_err[0] = '\0';
	step_permanent = false;
	MemoryContextReset(round_cxt);
	MemoryContextSwitchTo(round_cxt);
	PG_TRY();
	{
		r = export_step(b);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(export_cxt);
		edata = CopyErrorData();
		/* Logged at its own level (ERROR) with detail and hint. */
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		if (MyReplicationSlot != NULL)
			ReplicationSlotRelease();
		pgstat_report_activity(STATE_IDLE, NULL);
		strlcpy(step_err, edata->message, sizeof(step_err));
		if (edata->hint)
		{
			strlcat(step_err, " HINT: ", sizeof(step_err));
			strlcat(step_err, edata->hint, sizeof(step_err));
		}
		FreeErrorData(edata);
		raised = true;
		r = (step_permanent || b->schema_error) ? STEP_PERMANENT : STEP_TRANSIENT;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);

	switch (r)
	{
		case STEP_MORE:
			/* A backlog goes out at full speed. */
			backoff_ms = 0;
			last_insert_at = 0;
			return 0;
		case STEP_CAUGHT_UP:
			backoff_ms = 0;
			set_state(SANDBOX_EXPORT_IDLE);
			return Max(1, Min((long) export_poll_interval_ms, anchor_due_in_ms()));
		case STEP_TRANSIENT:
			enter_backoff();
			return backoff_ms;
		case STEP_PERMANENT:
			if (!raised)
				log_permanent_refusal();
			set_error(SANDBOX_EXPORT_ERROR, step_err);
			return -1;
	}
	return export_poll_interval_ms;
}

void
sandbox_export_main(Datum main_arg)
{
	ExportBatch *batch;
	long		wait_ms = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->exporter_pid = MyProcPid;
	sandbox_shared->exporter_latch = MyLatch;
	sandbox_shared->export.state = SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_shared->mutex);
	on_shmem_exit(export_shmem_exit, (Datum) 0);

	/* Off until a URL is set: hold no database connection meanwhile. */
	while (sandbox_clickhouse_url[0] == '\0')
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1L,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	BackgroundWorkerInitializeConnection(sandbox_database, NULL, 0);

	export_cxt = AllocSetContextCreate(TopMemoryContext, "sandbox_ext exporter",
									   ALLOCSET_DEFAULT_SIZES);
	round_cxt = AllocSetContextCreate(export_cxt, "sandbox_ext export round",
									  ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(export_cxt);
	batch = palloc(sizeof(ExportBatch));
	export_batch_init(batch, InvalidXLogRecPtr);

	/* Text of timestamps decoded in this session: one fixed form. */
	SetConfigOption("TimeZone", "UTC", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("DateStyle", "ISO, YMD", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "sandbox_ext exporter", PGC_USERSET, PGC_S_OVERRIDE);

	(void) config_changed();
	export_restart();

	for (;;)
	{
		bool		reset;
		TimestampTz backoff_until;
		int			state;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* A changed target, or any reload while stopped, starts afresh. */
			SpinLockAcquire(&sandbox_shared->mutex);
			state = sandbox_shared->export.state;
			SpinLockRelease(&sandbox_shared->mutex);
			if (config_changed() || state == SANDBOX_EXPORT_ERROR ||
				state == SANDBOX_EXPORT_BACKOFF)
				export_restart();
			wait_ms = 0;
		}

		SpinLockAcquire(&sandbox_shared->mutex);
		reset = sandbox_shared->export.reset_requested;
		state = sandbox_shared->export.state;
		backoff_until = sandbox_shared->export.backoff_until;
		SpinLockRelease(&sandbox_shared->mutex);
		if (reset)
		{
			export_restart();
			state = SANDBOX_EXPORT_IDLE;
			backoff_until = 0;
			wait_ms = 0;
		}

		if (sandbox_clickhouse_url[0] == '\0')
		{
			set_state(SANDBOX_EXPORT_DISABLED);
			wait_ms = -1;
		}
		else if (wal_level < WAL_LEVEL_LOGICAL)
		{
			strlcpy(step_err, "wal_level must be \"logical\" for the ClickHouse export", sizeof(step_err));
			if (state != SANDBOX_EXPORT_ERROR)
				ereport(LOG, (errmsg("%s", step_err)));
			set_error(SANDBOX_EXPORT_ERROR, step_err);
			wait_ms = -1;
		}
		else if (state == SANDBOX_EXPORT_ERROR)
			wait_ms = -1;
		else if (state == SANDBOX_EXPORT_BACKOFF &&
				 backoff_until > GetCurrentTimestamp())
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(), backoff_until, &secs, &usecs);
			wait_ms = secs * 1000 + usecs / 1000 + 1;
		}
		else if (export_min_interval_ms > 0 && last_insert_at != 0 &&
				 !TimestampDifferenceExceeds(last_insert_at, GetCurrentTimestamp(),
											 export_min_interval_ms))
		{
			/*
			 * Let commits gather into one insert.  Commits arriving now
			 * only shorten this sleep to re-check it; a round follows
			 * anyway once the interval is over.
			 */
			long		remain;

			remain = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													 TimestampTzPlusMilliseconds(last_insert_at,
																				 export_min_interval_ms));
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 remain + 1, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}
		else
			wait_ms = export_round(batch);

		if (wait_ms != 0)
		{
			int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;

			if (wait_ms > 0)
				events |= WL_TIMEOUT;
			/*
			 * In backoff a commit must not cut the wait short, or a down
			 * ClickHouse would be hammered at the insert rate.
			 */
			(void) WaitLatch(MyLatch, events, wait_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/* ---- commit-time wake-up ---- */

static void
export_wake_now(bool reset)
{
	Latch	   *latch;

	SpinLockAcquire(&sandbox_shared->mutex);
	latch = sandbox_shared->exporter_latch;
	if (sandbox_shared->export.pending_since == 0)
		sandbox_shared->export.pending_since = GetCurrentTimestamp();
	if (reset)
		sandbox_shared->export.reset_requested = true;
	SpinLockRelease(&sandbox_shared->mutex);
	if (latch)
		SetLatch(latch);
}

static void
export_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (export_wake_pending)
			{
				export_wake_now(export_reset_pending);
				export_wake_pending = false;
				export_reset_pending = false;
			}
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			export_wake_pending = false;
			export_reset_pending = false;
			break;
		default:
			break;
	}
}

static void
export_wake_at_commit(bool reset)
{
	if (sandbox_shared == NULL)
		return;
	if (!export_callback_registered)
	{
		RegisterXactCallback(export_xact_callback, NULL);
		export_callback_registered = true;
	}
	export_wake_pending = true;
	if (reset)
		export_reset_pending = true;
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
	export_wake_at_commit(false);
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
	export_wake_at_commit(PG_GETARG_BOOL(0));
	PG_RETURN_BOOL(sandbox_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_export_reset);

/*
 * agent.export_reset(): leave the error or backoff state and retry now.
 */
Datum
sandbox_export_reset(PG_FUNCTION_ARGS)
{
	Latch	   *latch;

	if (sandbox_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the ClickHouse exporter is not running"),
				 errhint("Add sandbox_ext to shared_preload_libraries.")));
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->export.reset_requested = true;
	latch = sandbox_shared->exporter_latch;
	SpinLockRelease(&sandbox_shared->mutex);
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
	if (sandbox_shared == NULL)
	{
		memset(&s, 0, sizeof(s));
		pid = 0;
	}
	else
	{
		SpinLockAcquire(&sandbox_shared->mutex);
		s = sandbox_shared->export;
		pid = sandbox_shared->exporter_pid;
		SpinLockRelease(&sandbox_shared->mutex);
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
