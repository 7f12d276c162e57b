/*-------------------------------------------------------------------------
 *
 * export_worker.c
 *		The exporter background worker: its settings and its loop.
 *
 * The loop (sandbox_export_main) sleeps on its latch until a round is due,
 * runs one round at a time (export_stream.c does the work) inside a
 * PG_TRY that turns any ERROR into a state, and decides from the outcome
 * how long to wait: at once again for a backlog, sandbox.export_poll_interval
 * (or the next audit anchor round) when caught up, an exponential backoff
 * after a transient failure, and until a reset or reload after a permanent
 * one.  While caught up, inserts are at least sandbox.export_min_interval
 * apart.  Commits wake it early (the commit-time wake-up, shmem.c and
 * export_state.c); a reload that changes the target, or any reload while
 * stopped, starts afresh, as does agent.export_reset().
 *
 * Off until sandbox.clickhouse_url is set: the worker holds no database
 * connection meanwhile.  Failures (docs/export.md): ClickHouse unreachable
 * or overloaded is a backoff and the slot keeps the WAL; schema mismatches,
 * rejected data and a lost slot are the error state, an ERROR in the
 * server log, and no retries until agent.export_reset() or a reload.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/slot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "sandbox_ext.h"
#include "exporter.h"

static const struct config_enum_entry export_fault_options[] = {
	{"none", EXPORT_FAULT_NONE, false},
	{"pause_after_rows", EXPORT_FAULT_PAUSE_AFTER_ROWS, false},
	{"pause_after_watermark", EXPORT_FAULT_PAUSE_AFTER_WATERMARK, false},
	{"pause_between_tables", EXPORT_FAULT_PAUSE_BETWEEN_TABLES, false},
	{NULL, 0, false}
};

/* GUC variables (exporter.h: the ones other files of the exporter read) */
char	   *sandbox_clickhouse_url = NULL;
char	   *sandbox_clickhouse_table = NULL;
char	   *sandbox_clickhouse_egress_table = NULL;
char	   *sandbox_clickhouse_progress_table = NULL;
char	   *sandbox_anchor_table = NULL;
char	   *sandbox_anchor_insert_table = NULL;
char	   *sandbox_export_slot = NULL;
int			sandbox_export_batch_rows = 50000;
int			sandbox_export_timeout_s = 30;
int			sandbox_anchor_interval_ms = 60000;
int			sandbox_export_fault = EXPORT_FAULT_NONE;
static int	export_poll_interval_ms = 10000;
static int	export_min_interval_ms = 100;
static int	export_max_backoff_s = 60;

/* Worker-local state */
static MemoryContext export_cxt = NULL;	/* lives as long as the worker */
static MemoryContext round_cxt = NULL;	/* reset before every round */
static int	backoff_ms = 0;
static char *seen_url = NULL;
static char *seen_table = NULL;
static char *seen_egress_table = NULL;
static char *seen_slot = NULL;
static char *seen_anchor_table = NULL;

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
							   &sandbox_clickhouse_table, "tool_invocations",
							   PGC_SIGHUP, 0,
							   check_identifier_path, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_egress_table",
							   "ClickHouse table (optionally database.table) receiving the egress connection log.",
							   NULL,
							   &sandbox_clickhouse_egress_table, "egress_connections",
							   PGC_SIGHUP, 0,
							   check_identifier_path, NULL, NULL);
	DefineCustomStringVariable("sandbox.clickhouse_progress_table",
							   "ClickHouse table holding the export watermark.",
							   NULL,
							   &sandbox_clickhouse_progress_table, "export_progress",
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
							   &sandbox_anchor_insert_table, "",
							   PGC_SIGHUP, 0,
							   check_optional_identifier_path, NULL, NULL);
	DefineCustomIntVariable("sandbox.anchor_interval",
							"Longest time between two publications of the audit chain heads to ClickHouse.",
							"Heads are also published after every export batch; only heads that changed are sent.",
							&sandbox_anchor_interval_ms, 60000, 1000, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.export_slot",
							   "Logical replication slot of the ClickHouse export.",
							   NULL,
							   &sandbox_export_slot, "sandbox_ext_export",
							   PGC_SIGHUP, 0,
							   check_slot_name, NULL, NULL);
	DefineCustomIntVariable("sandbox.export_batch_rows",
							"Most pgoutput messages decoded, and rows sent, per export batch.",
							"Kept below ClickHouse's max_insert_block_size so each batch is inserted atomically.",
							&sandbox_export_batch_rows, 50000, 1, 1000000,
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
							 &sandbox_export_fault, EXPORT_FAULT_NONE, export_fault_options,
							 PGC_SIGHUP,
							 GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
}

/* From _PG_init, while the postmaster preloads the library. */
void
sandbox_export_register(void)
{
	sandbox_register_worker("sandbox_export_main", "sandbox_ext exporter");
}

static void
export_shmem_exit(int code, Datum arg)
{
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->pid = 0;
	sandbox_export_shared->latch = NULL;
	if (sandbox_export_shared->state != SANDBOX_EXPORT_ERROR)
		sandbox_export_shared->state = SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_export_shared->mutex);
	sandbox_ch_close();
}

/* ---- the worker ---- */

static bool
config_changed(void)
{
	bool		changed = false;

	if (seen_url == NULL || strcmp(seen_url, sandbox_clickhouse_url) != 0 ||
		strcmp(seen_table, sandbox_clickhouse_table) != 0 ||
		strcmp(seen_egress_table, sandbox_clickhouse_egress_table) != 0 ||
		strcmp(seen_slot, sandbox_export_slot) != 0 ||
		strcmp(seen_anchor_table, sandbox_anchor_insert_table[0] ? sandbox_anchor_insert_table : sandbox_anchor_table) != 0)
		changed = true;
	if (changed)
	{
		MemoryContext old = MemoryContextSwitchTo(export_cxt);

		if (seen_url)
		{
			pfree(seen_url);
			pfree(seen_table);
			pfree(seen_egress_table);
			pfree(seen_slot);
			pfree(seen_anchor_table);
		}
		seen_url = pstrdup(sandbox_clickhouse_url);
		seen_table = pstrdup(sandbox_clickhouse_table);
		seen_egress_table = pstrdup(sandbox_clickhouse_egress_table);
		seen_slot = pstrdup(sandbox_export_slot);
		seen_anchor_table = pstrdup(sandbox_anchor_insert_table[0] ? sandbox_anchor_insert_table : sandbox_anchor_table);
		MemoryContextSwitchTo(old);
	}
	return changed;
}

/* Forget errors and cached ClickHouse state: a fresh start. */
static void
export_restart(void)
{
	sandbox_export_forget();
	backoff_ms = 0;
	sandbox_ch_close();
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->reset_requested = false;
	sandbox_export_shared->backoff_until = 0;
	sandbox_export_shared->state = sandbox_clickhouse_url[0] ? SANDBOX_EXPORT_IDLE : SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_export_shared->mutex);
}

static void
enter_backoff(void)
{
	TimestampTz until;

	backoff_ms = backoff_ms == 0 ? 1000 : Min(backoff_ms * 2, export_max_backoff_s * 1000);
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backoff_ms);
	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->backoff_until = until;
	SpinLockRelease(&sandbox_export_shared->mutex);
	sandbox_export_set_error(SANDBOX_EXPORT_BACKOFF, sandbox_export_err.msg);
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
				 errmsg("ClickHouse export stopped: %s", sandbox_export_err.msg),
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

	sandbox_export_err.msg[0] = '\0';
	sandbox_export_err.permanent = false;
	MemoryContextReset(round_cxt);
	MemoryContextSwitchTo(round_cxt);
	PG_TRY();
	{
		r = sandbox_export_step(b);
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
		strlcpy(sandbox_export_err.msg, edata->message, sizeof(sandbox_export_err.msg));
		if (edata->hint)
		{
			strlcat(sandbox_export_err.msg, " HINT: ", sizeof(sandbox_export_err.msg));
			strlcat(sandbox_export_err.msg, edata->hint, sizeof(sandbox_export_err.msg));
		}
		FreeErrorData(edata);
		raised = true;
		r = (sandbox_export_err.permanent || b->schema_error) ? STEP_PERMANENT : STEP_TRANSIENT;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);

	switch (r)
	{
		case STEP_MORE:
			/* A backlog goes out at full speed. */
			backoff_ms = 0;
			sandbox_export_last_insert_at = 0;
			return 0;
		case STEP_CAUGHT_UP:
			backoff_ms = 0;
			sandbox_export_set_state(SANDBOX_EXPORT_IDLE);
			return Max(1, Min((long) export_poll_interval_ms, sandbox_export_anchor_due_in_ms()));
		case STEP_TRANSIENT:
			enter_backoff();
			return backoff_ms;
		case STEP_PERMANENT:
			if (!raised)
				log_permanent_refusal();
			sandbox_export_set_error(SANDBOX_EXPORT_ERROR, sandbox_export_err.msg);
			return -1;
	}
	return export_poll_interval_ms;
}

/* Off until a URL is set: hold no database connection meanwhile. */
static void
wait_for_url(void)
{
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
}

/* Connect, and make what lives as long as the worker. */
static ExportBatch *
worker_start(void)
{
	ExportBatch *batch;

	BackgroundWorkerInitializeConnection(sandbox_database, NULL, 0);

	export_cxt = AllocSetContextCreate(TopMemoryContext, "sandbox_ext exporter",
									   ALLOCSET_DEFAULT_SIZES);
	round_cxt = AllocSetContextCreate(export_cxt, "sandbox_ext export round",
									  ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(export_cxt);
	batch = palloc(sizeof(ExportBatch));
	sandbox_export_batch_init(batch, InvalidXLogRecPtr);

	/* Text of timestamps decoded in this session: one fixed form. */
	SetConfigOption("TimeZone", "UTC", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("DateStyle", "ISO, YMD", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("application_name", "sandbox_ext exporter", PGC_USERSET, PGC_S_OVERRIDE);

	(void) config_changed();
	export_restart();
	return batch;
}

/* A changed target, or any reload while stopped, starts afresh. */
static void
reload_config(void)
{
	int			state;

	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
	SpinLockAcquire(&sandbox_export_shared->mutex);
	state = sandbox_export_shared->state;
	SpinLockRelease(&sandbox_export_shared->mutex);
	if (config_changed() || state == SANDBOX_EXPORT_ERROR ||
		state == SANDBOX_EXPORT_BACKOFF)
		export_restart();
}

/* Milliseconds from now until ts, at least 1. */
static long
ms_until(TimestampTz ts)
{
	return Max(1, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), ts) + 1);
}

/*
 * How long to sleep before the next round, from the shared state: -1 until
 * woken, 0 for a round now.  A reset asked for by a backend is taken here.
 */
static long
export_wait_ms(void)
{
	bool		reset;
	TimestampTz backoff_until;
	int			state;

	SpinLockAcquire(&sandbox_export_shared->mutex);
	reset = sandbox_export_shared->reset_requested;
	state = sandbox_export_shared->state;
	backoff_until = sandbox_export_shared->backoff_until;
	SpinLockRelease(&sandbox_export_shared->mutex);
	if (reset)
	{
		export_restart();
		state = SANDBOX_EXPORT_IDLE;
		backoff_until = 0;
	}

	if (sandbox_clickhouse_url[0] == '\0')
	{
		sandbox_export_set_state(SANDBOX_EXPORT_DISABLED);
		return -1;
	}
	if (wal_level < WAL_LEVEL_LOGICAL)
	{
		strlcpy(sandbox_export_err.msg, "wal_level must be \"logical\" for the ClickHouse export",
				sizeof(sandbox_export_err.msg));
		if (state != SANDBOX_EXPORT_ERROR)
			ereport(LOG, (errmsg("%s", sandbox_export_err.msg)));
		sandbox_export_set_error(SANDBOX_EXPORT_ERROR, sandbox_export_err.msg);
		return -1;
	}
	if (state == SANDBOX_EXPORT_ERROR)
		return -1;
	if (state == SANDBOX_EXPORT_BACKOFF && backoff_until > GetCurrentTimestamp())
		return ms_until(backoff_until);

	/*
	 * Let commits gather into one insert.  Commits arriving meanwhile only
	 * shorten this sleep to re-check it; a round follows anyway once the
	 * interval is over.
	 */
	if (export_min_interval_ms > 0 && sandbox_export_last_insert_at != 0 &&
		!TimestampDifferenceExceeds(sandbox_export_last_insert_at, GetCurrentTimestamp(),
									export_min_interval_ms))
		return ms_until(TimestampTzPlusMilliseconds(sandbox_export_last_insert_at,
													export_min_interval_ms));
	return 0;
}

void
sandbox_export_main(Datum main_arg)
{
	ExportBatch *batch;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	SpinLockAcquire(&sandbox_export_shared->mutex);
	sandbox_export_shared->pid = MyProcPid;
	sandbox_export_shared->latch = MyLatch;
	sandbox_export_shared->state = SANDBOX_EXPORT_DISABLED;
	SpinLockRelease(&sandbox_export_shared->mutex);
	on_shmem_exit(export_shmem_exit, (Datum) 0);

	wait_for_url();
	batch = worker_start();

	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
			reload_config();

		wait_ms = export_wait_ms();
		if (wait_ms == 0)
			wait_ms = export_round(batch);
		if (wait_ms != 0)
		{
			int			events = WL_LATCH_SET | WL_EXIT_ON_PM_DEATH;

			if (wait_ms > 0)
				events |= WL_TIMEOUT;
			/*
			 * A commit during a backoff only makes the loop look at the
			 * clock again: the round waits for backoff_until, or a down
			 * ClickHouse would be hammered at the insert rate.
			 */
			(void) WaitLatch(MyLatch, events, wait_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}
