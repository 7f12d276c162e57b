/*-------------------------------------------------------------------------
 *
 * pgoutput.c
 *		Decode pgoutput (protocol version 1) messages of the export slot
 *		into TabSeparated rows for ClickHouse.
 *
 * Owns the mapping between agent.tool_invocations and the ClickHouse
 * table: the column list, the value conversions, the version and delete
 * marker.  It keeps no state outside the ExportBatch the caller passes, and
 * runs inside the exporter's short peek transaction (type input functions
 * need one), never during HTTP.
 *
 * Messages: Begin opens a transaction and gives its commit LSN, which
 * becomes the row version and decides whether the transaction was already
 * delivered (commit LSN below the ClickHouse watermark: skip it).  Relation
 * maps the columns by name and checks their types: a missing column or a
 * changed type is a schema mismatch, a permanent error.  Insert and Update
 * write the new row; Delete writes the old row (REPLICA IDENTITY FULL) with
 * _deleted = 1.  Commit closes the transaction.  Truncate is not mirrored
 * (the publication does not publish it; see docs/export.md).  Origin, Type
 * and logical messages carry nothing we export.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "port/pg_bswap.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "exporter.h"

typedef enum ExportKind
{
	EK_UUID,
	EK_TEXT,
	EK_INT4,
	EK_INT8,
	EK_BOOL,
	EK_TIMESTAMPTZ
} ExportKind;

typedef struct ExportColumn
{
	const char *name;
	Oid			typoid;
	ExportKind	kind;
} ExportColumn;

/* agent.tool_invocations, in the order the ClickHouse rows are written. */
static const ExportColumn export_columns[EXPORT_NCOLUMNS] = {
	{"org_id", UUIDOID, EK_UUID},
	{"workspace_id", UUIDOID, EK_UUID},
	{"invocation_id", UUIDOID, EK_UUID},
	{"agent_id", UUIDOID, EK_UUID},
	{"conversation_id", UUIDOID, EK_UUID},
	{"tool_name", TEXTOID, EK_TEXT},
	{"language", TEXTOID, EK_TEXT},
	{"status", TEXTOID, EK_TEXT},
	{"exit_code", INT4OID, EK_INT4},
	{"signal", INT4OID, EK_INT4},
	{"duration_ms", INT8OID, EK_INT8},
	{"cpu_ms", INT8OID, EK_INT8},
	{"peak_memory_bytes", INT8OID, EK_INT8},
	{"credits_charged", INT4OID, EK_INT4},
	{"timed_out", BOOLOID, EK_BOOL},
	{"oom_killed", BOOLOID, EK_BOOL},
	{"output_truncated", BOOLOID, EK_BOOL},
	{"started_at", TIMESTAMPTZOID, EK_TIMESTAMPTZ},
	{"finished_at", TIMESTAMPTZOID, EK_TIMESTAMPTZ},
	{"created_at", TIMESTAMPTZOID, EK_TIMESTAMPTZ},
};

const char *const sandbox_export_pg_columns[EXPORT_NCOLUMNS] = {
	"org_id", "workspace_id", "invocation_id", "agent_id", "conversation_id",
	"tool_name", "language", "status", "exit_code", "signal", "duration_ms",
	"cpu_ms", "peak_memory_bytes", "credits_charged", "timed_out",
	"oom_killed", "output_truncated", "started_at", "finished_at", "created_at",
};

/* Timestamps become two ClickHouse columns: DateTime and epoch ms. */
const char *
sandbox_export_clickhouse_columns(void)
{
	return "org_id, workspace_id, invocation_id, agent_id, conversation_id, "
		"tool_name, language, status, exit_code, signal, duration_ms, cpu_ms, "
		"peak_memory_bytes, credits_charged, timed_out, oom_killed, "
		"output_truncated, started_at, started_at_ms, finished_at, "
		"finished_at_ms, created_at, created_at_ms, _deleted, _version";
}

void
sandbox_export_batch_init(ExportBatch *b, XLogRecPtr skip_below)
{
	memset(b, 0, sizeof(*b));
	initStringInfo(&b->tsv);
	b->skip_below = skip_below;
}

/* Start a new batch; the buffer is kept unless one huge batch grew it. */
void
sandbox_export_batch_reset(ExportBatch *b, XLogRecPtr skip_below)
{
	StringInfoData keep = b->tsv;

	if (keep.maxlen > 64 * 1024 * 1024)
	{
		MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(keep.data));

		pfree(keep.data);
		initStringInfo(&keep);
		MemoryContextSwitchTo(old);
	}
	memset(b, 0, sizeof(*b));
	b->tsv = keep;
	resetStringInfo(&b->tsv);
	b->skip_below = skip_below;
}

/* ---- value conversion ---- */

void
sandbox_export_append_tsv_escaped(StringInfo out, const char *s)
{
	for (; *s; s++)
	{
		switch (*s)
		{
			case '\\':
				appendStringInfoString(out, "\\\\");
				break;
			case '\t':
				appendStringInfoString(out, "\\t");
				break;
			case '\n':
				appendStringInfoString(out, "\\n");
				break;
			case '\r':
				appendStringInfoString(out, "\\r");
				break;
			default:
				appendStringInfoChar(out, *s);
		}
	}
}

/*
 * A timestamptz as DateTime seconds (clamped to DateTime's unsigned 32-bit
 * range) and exact epoch milliseconds.  The text comes from the type's
 * output function in this same session, so reading it back with the input
 * function does not depend on DateStyle or TimeZone.
 */
static void
append_timestamptz(StringInfo out, const char *text)
{
	TimestampTz ts;
	int64		ms;
	int64		secs;

	ts = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in,
												 CStringGetDatum(text),
												 ObjectIdGetDatum(InvalidOid),
												 Int32GetDatum(-1)));
	if (TIMESTAMP_NOT_FINITE(ts))
	{
		appendStringInfoString(out, "\\N\t\\N");
		return;
	}
	/* TimestampTz counts microseconds since 2000-01-01. */
	ms = ts / 1000 + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * 1000;
	if (ts < 0 && ts % 1000 != 0)
		ms -= 1;				/* floor, not truncation */
	secs = ms >= 0 ? ms / 1000 : 0;
	if (secs > (int64) PG_UINT32_MAX)
		secs = PG_UINT32_MAX;
	appendStringInfo(out, INT64_FORMAT "\t" INT64_FORMAT, secs, ms);
}

/*
 * Append one row: values[i] is the text of export_columns[i] or NULL.
 */
void
sandbox_export_append_row(ExportBatch *b, char *const *values, bool deleted,
				  uint64 version)
{
	StringInfo	out = &b->tsv;
	int			i;

	for (i = 0; i < EXPORT_NCOLUMNS; i++)
	{
		const char *v = values[i];

		if (i > 0)
			appendStringInfoChar(out, '\t');
		if (v == NULL)
		{
			appendStringInfoString(out, "\\N");
			if (export_columns[i].kind == EK_TIMESTAMPTZ)
				appendStringInfoString(out, "\t\\N");
			continue;
		}
		switch (export_columns[i].kind)
		{
			case EK_BOOL:
				appendStringInfoChar(out, v[0] == 't' ? '1' : '0');
				break;
			case EK_TIMESTAMPTZ:
				append_timestamptz(out, v);
				break;
			case EK_TEXT:
				sandbox_export_append_tsv_escaped(out, v);
				break;
			default:
				/* uuid and integers: output text is ClickHouse's text */
				appendStringInfoString(out, v);
				break;
		}
	}
	appendStringInfo(out, "\t%d\t" UINT64_FORMAT "\n", deleted ? 1 : 0, version);
	b->rows++;
}

/* ---- pgoutput message reader ---- */

typedef struct MsgReader
{
	const char *data;
	int			len;
	int			pos;
} MsgReader;

static void
need(MsgReader *r, int n)
{
	if (n < 0 || r->pos + n > r->len)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("truncated pgoutput message"),
				 errdetail("Message type \"%c\" of %d bytes ended at byte %d.",
						   r->len > 0 ? r->data[0] : '?', r->len, r->pos)));
}

static uint8
read_byte(MsgReader *r)
{
	need(r, 1);
	return (uint8) r->data[r->pos++];
}

static uint32
read_int32(MsgReader *r)
{
	uint32		v;

	need(r, 4);
	memcpy(&v, r->data + r->pos, 4);
	r->pos += 4;
	return pg_ntoh32(v);
}

static uint16
read_int16(MsgReader *r)
{
	uint16		v;

	need(r, 2);
	memcpy(&v, r->data + r->pos, 2);
	r->pos += 2;
	return pg_ntoh16(v);
}

static uint64
read_int64(MsgReader *r)
{
	uint64		v;

	need(r, 8);
	memcpy(&v, r->data + r->pos, 8);
	r->pos += 8;
	return pg_ntoh64(v);
}

static const char *
read_string(MsgReader *r)
{
	const char *s = r->data + r->pos;
	const char *end = memchr(s, '\0', r->len - r->pos);

	if (end == NULL)
		need(r, r->len - r->pos + 1);	/* raises */
	r->pos += (end - s) + 1;
	return s;
}

/*
 * A tuple: per attribute 'n' (null), 'u' (unchanged TOAST value, not
 * sent) or 't' (text).  values[] gets palloc'd copies, NULL for null;
 * unchanged[] marks 'u'.
 */
static int
read_tuple(MsgReader *r, char **values, bool *unchanged, int maxatts)
{
	int			natts = read_int16(r);
	int			i;

	if (natts > maxatts)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("pgoutput tuple has %d columns, relation has %d", natts, maxatts)));
	for (i = 0; i < natts; i++)
	{
		uint8		kind = read_byte(r);
		uint32		len;

		values[i] = NULL;
		unchanged[i] = false;
		switch (kind)
		{
			case 'n':
				break;
			case 'u':
				unchanged[i] = true;
				break;
			case 't':
				len = read_int32(r);
				need(r, (int) len);
				values[i] = pnstrdup(r->data + r->pos, len);
				r->pos += len;
				break;
			default:
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("unexpected pgoutput column kind \"%c\"", kind)));
		}
	}
	return natts;
}

static ExportRelation *
find_relation(ExportBatch *b, Oid relid)
{
	int			i;

	for (i = 0; i < b->nrels; i++)
		if (b->rels[i].relid == relid)
			return &b->rels[i];
	return NULL;
}

static void
decode_relation(ExportBatch *b, MsgReader *r)
{
	Oid			relid = read_int32(r);
	const char *nsp = read_string(r);
	const char *rel = read_string(r);
	int			natts;
	int			i;
	int			j;
	ExportRelation *er;

	(void) read_byte(r);		/* replica identity */
	natts = read_int16(r);

	er = find_relation(b, relid);
	if (er == NULL)
	{
		if (b->nrels >= lengthof(b->rels))
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("too many relations in the export publication")));
		er = &b->rels[b->nrels++];
	}
	er->relid = relid;
	er->natts = natts;
	for (j = 0; j < EXPORT_NCOLUMNS; j++)
		er->attmap[j] = -1;

	for (i = 0; i < natts; i++)
	{
		const char *name;
		Oid			typoid;

		(void) read_byte(r);	/* flags: part of the key */
		name = read_string(r);
		typoid = read_int32(r);
		(void) read_int32(r);	/* typmod */
		for (j = 0; j < EXPORT_NCOLUMNS; j++)
		{
			if (strcmp(export_columns[j].name, name) != 0)
				continue;
			if (export_columns[j].typoid != typoid)
			{
				b->schema_error = true;
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("column \"%s\" of published relation \"%s.%s\" has type %u, the export expects %u",
								name, nsp, rel, typoid, export_columns[j].typoid),
						 errhint("Align the table with sql/clickhouse/ and the exporter, then call agent.export_reset().")));
			}
			er->attmap[j] = i;
		}
	}
	for (j = 0; j < EXPORT_NCOLUMNS; j++)
		if (er->attmap[j] < 0)
		{
			b->schema_error = true;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("published relation \"%s.%s\" has no column \"%s\"",
							nsp, rel, export_columns[j].name),
					 errhint("Align the table with sql/clickhouse/ and the exporter, then call agent.export_reset().")));
		}
}

/* Map a decoded tuple onto our columns and append it. */
static void
emit_tuple(ExportBatch *b, ExportRelation *er, char **newvals, bool *newunch,
		   char **oldvals, int oldn, bool deleted)
{
	char	   *vals[EXPORT_NCOLUMNS];
	int			j;

	for (j = 0; j < EXPORT_NCOLUMNS; j++)
	{
		int			a = er->attmap[j];

		vals[j] = newvals[a];
		if (newunch != NULL && newunch[a])
		{
			/* Only the old row (REPLICA IDENTITY FULL) still has it. */
			if (oldvals == NULL || a >= oldn)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("update of an exported row did not carry column \"%s\"",
								export_columns[j].name),
						 errhint("The export needs REPLICA IDENTITY FULL on agent.tool_invocations; agent.export_setup() sets it.")));
			vals[j] = oldvals[a];
		}
	}
	sandbox_export_append_row(b, vals, deleted, b->final_lsn);
}

static ExportRelation *
relation_for_change(ExportBatch *b, Oid relid)
{
	ExportRelation *er = find_relation(b, relid);

	if (er == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("pgoutput change for relation %u before its Relation message", relid)));
	return er;
}

static void
decode_change(ExportBatch *b, MsgReader *r, char action)
{
	Oid			relid = read_int32(r);
	ExportRelation *er = relation_for_change(b, relid);
	char	  **newvals = palloc0(sizeof(char *) * (er->natts + 1));
	bool	   *newunch = palloc0(sizeof(bool) * (er->natts + 1));
	char	  **oldvals = NULL;
	bool	   *oldunch = NULL;
	int			oldn = 0;
	uint8		kind = read_byte(r);

	if (kind == 'K' || kind == 'O')
	{
		oldvals = palloc0(sizeof(char *) * (er->natts + 1));
		oldunch = palloc0(sizeof(bool) * (er->natts + 1));
		oldn = read_tuple(r, oldvals, oldunch, er->natts);
		if (action == 'D')
		{
			if (kind == 'K')
			{
				/* Only the key: no org/workspace to address the row. */
				b->dropped_deletes++;
				return;
			}
			if (!b->skipping)
				emit_tuple(b, er, oldvals, oldunch, NULL, 0, true);
			return;
		}
		kind = read_byte(r);
	}
	if (kind != 'N')
		ereport(ERROR,
				(errcode(ERRCODE_PROTOCOL_VIOLATION),
				 errmsg("unexpected pgoutput tuple marker \"%c\"", kind)));
	read_tuple(r, newvals, newunch, er->natts);
	if (!b->skipping)
		emit_tuple(b, er, newvals, newunch, oldvals, oldn, false);
}

/*
 * Decode one message of a peek.  Whole transactions come out of a peek
 * (the reorder buffer replays a transaction at its commit), so the batch
 * always ends on a Commit.
 */
void
sandbox_export_decode_message(ExportBatch *b, const char *data, int len)
{
	MsgReader	r = {data, len, 0};
	char		type = (char) read_byte(&r);

	switch (type)
	{
		case 'B':
			b->final_lsn = read_int64(&r);
			(void) read_int64(&r);	/* commit time */
			(void) read_int32(&r);	/* xid */
			b->in_txn = true;
			/* Delivered already if it committed before the watermark. */
			b->skipping = b->final_lsn < b->skip_below;
			break;
		case 'C':
			(void) read_byte(&r);	/* flags */
			(void) read_int64(&r);	/* commit LSN */
			b->last_end_lsn = read_int64(&r);
			(void) read_int64(&r);	/* commit time */
			b->txns++;
			if (b->skipping)
				b->skipped_txns++;
			b->in_txn = false;
			b->skipping = false;
			break;
		case 'R':
			decode_relation(b, &r);
			break;
		case 'I':
		case 'U':
		case 'D':
			if (!b->in_txn)
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("pgoutput change outside a transaction")));
			decode_change(b, &r, type);
			break;
		case 'T':
			/* Not published; if it ever is, it is not mirrored. */
			b->truncates++;
			break;
		case 'O':				/* origin */
		case 'Y':				/* type */
		case 'M':				/* logical decoding message */
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("unexpected pgoutput message type \"%c\"", type)));
	}
}
