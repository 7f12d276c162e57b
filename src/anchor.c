/*-------------------------------------------------------------------------
 *
 * anchor.c
 *		Audit anchors: each org's audit chain head, published to an
 *		append-only ClickHouse table by the exporter, and read back from
 *		ClickHouse by agent.verify_audit_chain().
 *
 * Why.  Every row of the audit trail lives in this database, so a
 * superuser can rewrite an event, re-hash every later one and move the
 * head to match: the chain alone then verifies.  An anchor is a copy of a
 * head (org_id, last_id, last_hash, events) kept where the database cannot
 * change it.  Once an event is anchored, the chain must contain it, with
 * that hash, at that position, for ever; a rewrite, insertion or removal
 * at or before it changes the hash at the anchored id (each hash covers
 * every earlier event) or the count.  docs/security.md says what this
 * does not catch.
 *
 * Publishing (the exporter worker, export_stream.c).
 * sandbox_anchor_collect() runs in the worker's short transaction: it
 * reads every head through agent._audit_anchor_heads(), keeps those that
 * differ from what this worker last published, renders them as
 * TabSeparated rows, and flushes WAL up to the current insert position
 * before returning, so that every commit the read saw is durable: no
 * anchor claims a head that a crash could still take back (asynchronous
 * commits included).  The worker then inserts the rows and, on success,
 * calls sandbox_anchor_mark_sent().  What was published is remembered in a
 * hash table of this process only; a restarted worker publishes every head
 * once more (ClickHouse then holds the same anchor twice, which the readers
 * treat as one).
 *
 * Reading (any backend).  agent._audit_anchors(org) pages through the
 * org's anchors in ClickHouse, grouped by anchored event, into a
 * materialised result; agent._audit_anchors_configured() tells whether
 * there is a ClickHouse to read.  The same client (chclient.c) and
 * settings (sandbox.clickhouse_url, sandbox.clickhouse_anchor_table,
 * sandbox.export_timeout) as the exporter's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "exporter.h"

/* Anchors read from ClickHouse per request (about 110 bytes each). */
#define ANCHOR_PAGE_ROWS 10000
#define ANCHOR_PAGE_BYTES ((size_t) ANCHOR_PAGE_ROWS * 256)

/* A head as published, and the key it is found by. */
typedef struct AnchorHead
{
	pg_uuid_t	org_id;			/* hash key */
	int64		last_id;
	int64		events;
	char		last_hash[65];
} AnchorHead;

static MemoryContext anchor_cxt = NULL;
static HTAB *anchor_published = NULL;	/* org -> head last published */
static AnchorHead *anchor_pending = NULL;	/* collected, not yet sent */
static int	anchor_npending = 0;
static int	anchor_maxpending = 0;

static const char anchor_columns[] = "org_id, last_id, last_hash, events, read_at_ms, source";

const char *
sandbox_anchor_columns(void)
{
	return anchor_columns;
}

static void
anchor_init_state(void)
{
	HASHCTL		ctl;

	if (anchor_cxt == NULL)
		anchor_cxt = AllocSetContextCreate(TopMemoryContext, "sandbox_ext audit anchors",
										   ALLOCSET_DEFAULT_SIZES);
	if (anchor_published != NULL)
		return;
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(pg_uuid_t);
	ctl.entrysize = sizeof(AnchorHead);
	ctl.hcxt = anchor_cxt;
	anchor_published = hash_create("sandbox_ext published anchors", 1024, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* Forget what was published: the next collect publishes every head. */
void
sandbox_anchor_forget(void)
{
	if (anchor_published != NULL)
		hash_destroy(anchor_published);
	anchor_published = NULL;
	anchor_npending = 0;
}

static bool
anchor_unchanged(const AnchorHead *h)
{
	AnchorHead *seen = hash_search(anchor_published, &h->org_id, HASH_FIND, NULL);

	return seen != NULL && seen->last_id == h->last_id &&
		seen->events == h->events && strcmp(seen->last_hash, h->last_hash) == 0;
}

static void
anchor_add_pending(const AnchorHead *h)
{
	if (anchor_npending == anchor_maxpending)
	{
		int			n = Max(64, anchor_maxpending * 2);

		anchor_pending = anchor_pending == NULL ?
			MemoryContextAlloc(anchor_cxt, n * sizeof(AnchorHead)) :
			repalloc(anchor_pending, n * sizeof(AnchorHead));
		anchor_maxpending = n;
	}
	anchor_pending[anchor_npending++] = *h;
}

static void
anchor_append_row(StringInfo tsv, const AnchorHead *h, int64 read_at_ms,
				  const char *source)
{
	char	   *org = DatumGetCString(DirectFunctionCall1(uuid_out,
														  UUIDPGetDatum(&h->org_id)));

	appendStringInfo(tsv, "%s\t" INT64_FORMAT "\t", org, h->last_id);
	sandbox_export_append_tsv_escaped(tsv, h->last_hash);
	appendStringInfo(tsv, "\t" INT64_FORMAT "\t" INT64_FORMAT "\t", h->events, read_at_ms);
	sandbox_export_append_tsv_escaped(tsv, source);
	appendStringInfoChar(tsv, '\n');
	pfree(org);
}

/*
 * In the caller's transaction (SPI connected): append to tsv one row per
 * org whose committed head differs from the one last published, and
 * return their number.  They stay pending until sandbox_anchor_mark_sent().
 */
int
sandbox_anchor_collect(StringInfo tsv, const char *source)
{
	int64		read_at_ms;
	uint64		i;
	int			rc;

	anchor_init_state();
	anchor_npending = 0;
	read_at_ms = (GetCurrentTimestamp() / 1000) +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;

	rc = SPI_execute("SELECT org_id, last_id, last_hash, events FROM agent._audit_anchor_heads()",
					 true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the audit chain heads: %s", SPI_result_code_string(rc));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	t = SPI_tuptable->vals[i];
		TupleDesc	d = SPI_tuptable->tupdesc;
		AnchorHead	h;
		bool		isnull[4];
		Datum		hash;

		memcpy(&h.org_id, DatumGetUUIDP(SPI_getbinval(t, d, 1, &isnull[0])), sizeof(pg_uuid_t));
		h.last_id = DatumGetInt64(SPI_getbinval(t, d, 2, &isnull[1]));
		hash = SPI_getbinval(t, d, 3, &isnull[2]);
		h.events = DatumGetInt64(SPI_getbinval(t, d, 4, &isnull[3]));
		if (isnull[0] || isnull[1] || isnull[2] || isnull[3])
			continue;			/* the columns are NOT NULL */
		text_to_cstring_buffer(DatumGetTextPP(hash), h.last_hash, sizeof(h.last_hash));
		if (anchor_unchanged(&h))
			continue;
		anchor_add_pending(&h);
		anchor_append_row(tsv, &h, read_at_ms, source);
	}

	/*
	 * Every commit the read saw has its commit record below the current
	 * insert position: once that is flushed, no anchor names a head that a
	 * crash could undo (synchronous_commit = off included).
	 */
	if (anchor_npending > 0)
		XLogFlush(GetXLogInsertRecPtr());
	return anchor_npending;
}

/* ClickHouse accepted the rows of the last collect. */
void
sandbox_anchor_mark_sent(void)
{
	for (int i = 0; i < anchor_npending; i++)
	{
		AnchorHead *e = hash_search(anchor_published, &anchor_pending[i].org_id,
									HASH_ENTER, NULL);

		*e = anchor_pending[i];
	}
	anchor_npending = 0;
}

/* ---- reading anchors back (agent._audit_anchors) ---- */

/*
 * The next TabSeparated field of *p, unescaped into out; false at the end
 * of the line.  *p moves past the field and its separator.
 */
static bool
anchor_next_field(char **p, StringInfo out)
{
	char	   *s = *p;

	resetStringInfo(out);
	if (*s == '\0' || *s == '\n')
		return false;
	while (*s != '\0' && *s != '\t' && *s != '\n')
	{
		if (*s == '\\' && s[1] != '\0')
		{
			s++;
			switch (*s)
			{
				case 't':
					appendStringInfoChar(out, '\t');
					break;
				case 'n':
					appendStringInfoChar(out, '\n');
					break;
				case 'r':
					appendStringInfoChar(out, '\r');
					break;
				case '0':
					appendStringInfoChar(out, ' ');	/* no NUL in a text */
					break;
				default:
					appendStringInfoChar(out, *s);
			}
		}
		else
			appendStringInfoChar(out, *s);
		s++;
	}
	if (*s == '\t')
		s++;
	*p = s;
	return true;
}

static int64
anchor_parse_int64(const char *s)
{
	char	   *end;
	long long	v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("ClickHouse returned a malformed audit anchor: \"%s\" is not a number", s)));
	return (int64) v;
}

/*
 * Put one page of anchors (the response body) into the tuplestore; return
 * the number of rows and the last anchored id seen.
 */
static int
anchor_store_page(char *body, Tuplestorestate *ts, TupleDesc desc, int64 *last)
{
	StringInfoData f;
	char	   *p = body;
	int			rows = 0;

	initStringInfo(&f);
	while (*p != '\0')
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, false, false, false};
		int64		unix_s;

		for (int col = 0; col < 5; col++)
		{
			if (!anchor_next_field(&p, &f))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
						 errmsg("ClickHouse returned a malformed audit anchor: a row has fewer than 5 fields")));
			if (col == 1)
				values[col] = CStringGetTextDatum(f.data);
			else if (col == 4)
			{
				unix_s = anchor_parse_int64(f.data);
				values[col] = TimestampTzGetDatum((unix_s -
												   (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY) *
												  USECS_PER_SEC);
			}
			else
				values[col] = Int64GetDatum(anchor_parse_int64(f.data));
		}
		if (*p == '\n')
			p++;
		*last = DatumGetInt64(values[0]);
		tuplestore_putvalues(ts, desc, values, nulls);
		rows++;
	}
	pfree(f.data);
	return rows;
}

PG_FUNCTION_INFO_V1(sandbox_audit_anchors);

/*
 * agent._audit_anchors(org): every anchor of the org in ClickHouse, one
 * row per anchored event (last_id, last_hash, events, variants,
 * anchored_at), in chain order, read in pages.  Identical anchors (the
 * same head published twice) collapse; different ones for one event show
 * as variants > 1, with one of them.
 */
Datum
sandbox_audit_anchors(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *org = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(0)));
	StringInfoData resp;
	int64		after = PG_INT64_MIN;
	char		err[SANDBOX_EXPORT_ERRLEN];

	InitMaterializedSRF(fcinfo, 0);
	if (sandbox_clickhouse_url == NULL || sandbox_clickhouse_url[0] == '\0')
		return (Datum) 0;

	initStringInfo(&resp);
	for (;;)
	{
		ChTarget	t = {sandbox_clickhouse_url, sandbox_export_timeout_s};
		ChResult	r;
		int			rows;

		resetStringInfo(&resp);
		r = sandbox_ch_read_anchors(&t, sandbox_anchor_table, org, after,
									ANCHOR_PAGE_ROWS, &resp, ANCHOR_PAGE_BYTES,
									err, sizeof(err));
		if (r != CH_OK)
			ereport(ERROR,
					(errcode(r == CH_TRANSIENT ? ERRCODE_CONNECTION_FAILURE :
							 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("could not read the audit anchors from ClickHouse: %s", err),
					 errhint("While sandbox.clickhouse_url is set, agent.verify_audit_chain() checks each chain against its anchors there and does not vouch for it without them.")));
		rows = anchor_store_page(resp.data, rsinfo->setResult, rsinfo->setDesc, &after);
		if (rows < ANCHOR_PAGE_ROWS)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return (Datum) 0;
}

PG_FUNCTION_INFO_V1(sandbox_audit_anchors_configured);

/*
 * agent._audit_anchors_configured(): whether sandbox.clickhouse_url is
 * set, i.e. anchors are published and verify_audit_chain() reads them.
 */
Datum
sandbox_audit_anchors_configured(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sandbox_clickhouse_url != NULL && sandbox_clickhouse_url[0] != '\0');
}
