/*-------------------------------------------------------------------------
 *
 * exporter.h
 *		The ClickHouse exporter: its shared state, settings and the
 *		interfaces between its files.
 *
 * The files of the exporter, one concern each:
 *	 export_worker.c  the background worker: settings, the loop (waits,
 *					  backoff, reloads, resets), one round at a time
 *	 export_stream.c  one round's work: the slot's lifecycle, streaming a
 *					  batch, the audit anchors' round
 *	 export_copy.c	  the tables' copy, page by page, below the slot
 *	 export_state.c   the shared-memory struct and its lock, the
 *					  commit-time wake-up's target, SQL-callable functions
 *	 pgoutput.c		  the exported tables' columns; pgoutput protocol
 *					  version 1 (or rows read with SELECT) into
 *					  TabSeparated rows for ClickHouse
 *	 anchor.c		  the audit chain heads published and read back
 *	 chclient.c		  every request to ClickHouse (libcurl, one reused
 *					  keep-alive handle)
 * Only sandbox_ext.h's few entry points (GUCs, registration, the wake-up)
 * are seen by the rest of the extension.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EXPORTER_H
#define SANDBOX_EXPORTER_H

#include "access/xlogdefs.h"
#include "lib/stringinfo.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

/* ---- shared state (export_state.c) ---- */

/* What agent.export_status() shows as state. */
typedef enum SandboxExportState
{
	SANDBOX_EXPORT_DISABLED = 0,	/* no URL, or no worker */
	SANDBOX_EXPORT_IDLE,		/* caught up, waiting for commits */
	SANDBOX_EXPORT_EXPORTING,	/* a batch is in flight */
	SANDBOX_EXPORT_BACKOFF,		/* transient failure, retrying later */
	SANDBOX_EXPORT_ERROR,		/* permanent failure, waiting for reset */
	SANDBOX_EXPORT_PAUSED		/* fault injection only (sandbox.export_fault) */
} SandboxExportState;

#define SANDBOX_EXPORT_ERRLEN 512

/*
 * The exporter's shared memory, a struct of its own protected by its own
 * spinlock.  The worker writes everything except the two request fields
 * and pending_since, which backends set (agent.export_reset() and the
 * commit-time wake-up).  Nothing is held across a call that can fail.
 */
typedef struct SandboxExportShared
{
	slock_t		mutex;
	int			pid;			/* the worker's, 0 when none runs */
	Latch	   *latch;			/* the worker's, NULL when none runs */
	int			state;			/* SandboxExportState */
	uint64		rows_exported;	/* rows ClickHouse accepted since start */
	uint64		batches;
	uint64		txns_skipped;	/* replayed transactions the watermark skipped */
	XLogRecPtr	watermark;		/* end LSN of the last delivered transaction */
	TimestampTz last_success;
	TimestampTz last_error_at;
	char		last_error[SANDBOX_EXPORT_ERRLEN];
	TimestampTz pending_since;	/* oldest commit not yet seen by a poll */
	TimestampTz inflight_since; /* oldest commit the running poll covers */
	TimestampTz backoff_until;
	bool		reset_requested;
	uint64		anchors_published;	/* anchor rows ClickHouse accepted */
	TimestampTz last_anchor_at; /* end of the last anchor round */
} SandboxExportShared;

extern SandboxExportShared *sandbox_export_shared;

extern void sandbox_export_set_state(SandboxExportState st);
extern void sandbox_export_set_error(SandboxExportState st, const char *msg);

/* ---- settings (export_worker.c) ---- */

typedef enum ExportFault
{
	EXPORT_FAULT_NONE,
	EXPORT_FAULT_PAUSE_AFTER_ROWS,
	EXPORT_FAULT_PAUSE_AFTER_WATERMARK,
	EXPORT_FAULT_PAUSE_BETWEEN_TABLES
} ExportFault;

extern char *sandbox_clickhouse_url;
extern char *sandbox_clickhouse_table;
extern char *sandbox_clickhouse_egress_table;
extern char *sandbox_clickhouse_progress_table;
extern char *sandbox_anchor_table;
extern char *sandbox_anchor_insert_table;
extern char *sandbox_export_slot;
extern int	sandbox_export_batch_rows;
extern int	sandbox_export_timeout_s;
extern int	sandbox_anchor_interval_ms;
extern int	sandbox_export_fault;

extern PGDLLEXPORT void sandbox_export_main(Datum main_arg);

/* ---- one round (export_stream.c) ---- */

/* Outcome of one round of work. */
typedef enum StepResult
{
	STEP_CAUGHT_UP,				/* nothing left up to the flush LSN */
	STEP_MORE,					/* go again at once */
	STEP_TRANSIENT,				/* back off, retry */
	STEP_PERMANENT				/* stop until reset */
} StepResult;

/*
 * Why the last step failed: a one-line text for agent.export_status(), and
 * whether an ERROR raised during the step is permanent (set just before
 * raising it).
 */
typedef struct ExportStepError
{
	char		msg[SANDBOX_EXPORT_ERRLEN];
	bool		permanent;
} ExportStepError;

extern ExportStepError sandbox_export_err;
extern TimestampTz sandbox_export_last_insert_at;	/* last rows insert */

struct ExportBatch;
extern StepResult sandbox_export_step(struct ExportBatch *b);
extern void sandbox_export_forget(void);
extern long sandbox_export_anchor_due_in_ms(void);

/* ---- pgoutput.c ---- */

/*
 * The exported tables, each to a ClickHouse table of its own (settings
 * sandbox.clickhouse_table and sandbox.clickhouse_egress_table), through
 * one slot and one publication, with one watermark.
 */
typedef enum ExportTable
{
	EXPORT_TOOL_INVOCATIONS = 0,
	EXPORT_EGRESS_CONNECTIONS,
	EXPORT_NTABLES
} ExportTable;

#define EXPORT_MAX_COLUMNS 20

extern const char *sandbox_export_relname(ExportTable t);
extern int	sandbox_export_ncolumns(ExportTable t);
extern const char *sandbox_export_column(ExportTable t, int i);
extern const char *sandbox_export_clickhouse_columns(ExportTable t);

/*
 * A batch of TabSeparated rows being built from one peek, one buffer per
 * table.  The decoder keeps the relation map of the decoding session
 * (pgoutput sends a Relation message before the first change of a
 * relation in each session, and every peek is a new session).
 */
typedef struct ExportRelation
{
	Oid			relid;
	int			table;			/* ExportTable */
	int			attmap[EXPORT_MAX_COLUMNS]; /* table's column -> attribute number */
	int			natts;
} ExportRelation;

typedef struct ExportBatch
{
	StringInfoData tsv[EXPORT_NTABLES]; /* rows, TabSeparated, per table */
	uint64		table_rows[EXPORT_NTABLES]; /* rows in each tsv */
	uint64		rows;			/* rows in all of them */
	uint64		txns;			/* transactions seen (delivered or skipped) */
	uint64		skipped_txns;	/* at or below the watermark */
	uint64		dropped_deletes;	/* deletes without the old row */
	uint64		truncates;		/* Truncate messages (not mirrored) */
	XLogRecPtr	skip_below;		/* skip transactions committed before this */
	XLogRecPtr	last_end_lsn;	/* end of the last complete transaction */
	/* decoder state */
	bool		in_txn;
	bool		skipping;
	XLogRecPtr	final_lsn;		/* commit LSN of the open transaction */
	int			nrels;
	ExportRelation rels[8];
	bool		schema_error;	/* set before raising a schema mismatch */
} ExportBatch;

extern void sandbox_export_batch_init(ExportBatch *b, XLogRecPtr skip_below);
extern void sandbox_export_batch_reset(ExportBatch *b, XLogRecPtr skip_below);
extern void sandbox_export_decode_message(ExportBatch *b, const char *data, int len);
extern void sandbox_export_append_row(ExportBatch *b, ExportTable t,
									  char *const *values, bool deleted,
									  uint64 version);
extern void sandbox_export_append_tsv_escaped(StringInfo out, const char *s);

/* ---- what export_stream.c and export_copy.c share ---- */
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
	ExportTable copy_table;		/* the table the pending copy is at */
	char		copy_after[40];	/* its keyset cursor: invocation_id */
	bool		has_copy_after;
	int32		copy_after_seq; /* and seq (egress_connections) */
	bool		catalog_0_1;	/* 0.1.0's catalog: no egress, old copy step */
} ExportObjects;

extern void sandbox_export_spi_exec(const char *sql, int nargs, Oid *types, Datum *values,
									const char *nulls, int expect);
extern Datum sandbox_export_slot_name_datum(void);
extern StepResult sandbox_export_send_rows(struct ExportBatch *b);
extern void sandbox_export_note_success(uint64 rows);

/* ---- the copy phase (export_copy.c) ---- */
extern StepResult sandbox_export_copy_page(ExportObjects *o, struct ExportBatch *b);

/* ---- anchor.c ---- */

extern const char *sandbox_anchor_columns(void);
extern int	sandbox_anchor_collect(StringInfo tsv, const char *source);
extern void sandbox_anchor_mark_sent(void);
extern void sandbox_anchor_forget(void);

/* ---- chclient.c ---- */

typedef enum ChResult
{
	CH_OK,
	CH_TRANSIENT,				/* retry with backoff */
	CH_PERMANENT				/* stop until reset */
} ChResult;

/* What a request keeps of a response unless told otherwise. */
#define CH_RESPONSE_MAX 65536

/* Where and how long: the settings every request is made with. */
typedef struct ChTarget
{
	const char *url;
	int			timeout_s;
} ChTarget;

extern ChResult sandbox_ch_post(const ChTarget *t, const char *query,
								const char *body, size_t len,
								StringInfo response, size_t max_response,
								char *err, size_t errlen);
extern ChResult sandbox_ch_insert(const ChTarget *t, const char *table,
								  const char *columns, const StringInfo rows,
								  char *err, size_t errlen);
extern ChResult sandbox_ch_read_watermark(const ChTarget *t, const char *table,
										  const char *slot, XLogRecPtr *lsn,
										  char *err, size_t errlen);
extern ChResult sandbox_ch_write_watermark(const ChTarget *t, const char *table,
										   const char *slot, XLogRecPtr lsn,
										   uint64 rows, char *err, size_t errlen);
extern ChResult sandbox_ch_read_anchors(const ChTarget *t, const char *table,
										const char *org, int64 after, int limit,
										StringInfo response, size_t max_response,
										char *err, size_t errlen);
extern void sandbox_ch_close(void);

#endif							/* SANDBOX_EXPORTER_H */
