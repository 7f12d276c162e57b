/*-------------------------------------------------------------------------
 *
 * exporter.h
 *		The ClickHouse exporter: shared state, pgoutput decoding into
 *		ClickHouse rows, and the HTTP client.
 *
 * Four files share this header: exporter.c (the background worker, its
 * GUCs and SQL-callable functions), pgoutput.c (turns pgoutput protocol
 * version 1 messages, or rows read with SELECT, into TabSeparated rows for
 * ClickHouse), anchor.c (audit chain heads published to ClickHouse and read
 * back) and chclient.c (libcurl, one reused keep-alive handle).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EXPORTER_H
#define SANDBOX_EXPORTER_H

#include "access/xlogdefs.h"
#include "lib/stringinfo.h"
#include "utils/timestamp.h"

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
 * Exporter state in shared memory, protected by SandboxShared.mutex.  The
 * worker writes everything except the two request flags and pending_since,
 * which backends set (agent.export_reset() and the commit-time wake-up).
 */
typedef struct SandboxExportShared
{
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

/* exporter.c */
extern char *sandbox_clickhouse_url;
extern char *sandbox_anchor_table;
extern int	sandbox_export_timeout_s;
extern void sandbox_export_define_gucs(void);
extern void sandbox_export_register(void);
extern PGDLLEXPORT void sandbox_export_main(Datum main_arg);

/* pgoutput.c */
#define EXPORT_NCOLUMNS 20
extern const char *const export_pg_columns[EXPORT_NCOLUMNS];
extern const char *export_clickhouse_column_list(void);

/*
 * A batch of TabSeparated rows being built from one peek.  The decoder
 * keeps the relation map of the decoding session (pgoutput sends a
 * Relation message before the first change of a relation in each session,
 * and every peek is a new session).
 */
typedef struct ExportRelation
{
	Oid			relid;
	int			attmap[EXPORT_NCOLUMNS];	/* our column -> attribute number */
	int			natts;
} ExportRelation;

typedef struct ExportBatch
{
	StringInfoData tsv;			/* rows, TabSeparated */
	uint64		rows;			/* rows in tsv */
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

extern void export_batch_init(ExportBatch *b, XLogRecPtr skip_below);
extern void export_batch_reset(ExportBatch *b, XLogRecPtr skip_below);
extern void export_decode_message(ExportBatch *b, const char *data, int len);
extern void export_append_row(ExportBatch *b, char *const *values,
							  bool deleted, uint64 version);
extern void export_append_tsv_escaped(StringInfo out, const char *s);

/* anchor.c */
extern const char *anchor_column_list(void);
extern int	anchor_collect(StringInfo tsv, const char *source);
extern void anchor_mark_sent(void);
extern void anchor_forget(void);

/* chclient.c */
typedef enum ChResult
{
	CH_OK,
	CH_TRANSIENT,				/* retry with backoff */
	CH_PERMANENT				/* stop until reset */
} ChResult;

/* What ch_post keeps of a response unless told otherwise. */
#define CH_RESPONSE_MAX 65536

extern ChResult ch_post(const char *base_url, const char *query,
						const char *body, size_t len, int timeout_s,
						StringInfo response, size_t max_response,
						char *err, size_t errlen);
extern void ch_close(void);

#endif							/* SANDBOX_EXPORTER_H */
