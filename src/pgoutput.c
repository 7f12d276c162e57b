/*-------------------------------------------------------------------------
 *
 * pgoutput.c
 *		Decode pgoutput (protocol version 1) messages of the export slot
 *		into TabSeparated rows for ClickHouse.
 *
 * Owns the mapping between the exported tables (agent.tool_invocations
 * and agent.egress_connections, exporter.h's ExportTable) and their
 * ClickHouse tables: the column lists, the value conversions, the version
 * and delete marker.  It keeps no state outside the ExportBatch the caller
 * passes, and runs inside the exporter's short peek transaction (type
 * input functions need one), never during HTTP.  A batch holds one
 * TabSeparated buffer per table; rows of both tables from one PostgreSQL
 * transaction carry the same version (its commit LSN).
 *
 * Messages: Begin opens a transaction and gives its commit LSN, which
 * becomes the row version and decides whether the transaction was already
 * delivered (commit LSN below the ClickHouse watermark: skip it).  Relation
 * names one of the exported tables (any other is a permanent error: the
 * publication holds only these) and maps its columns by name, checking
 * their types: a missing column or a changed type is a schema mismatch, a
 * permanent error.  Insert and Update
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
static const ExportColumn tool_invocation_columns[] = {
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

/*
 * agent.egress_connections (47_egress.sql), likewise.  The address (inet)
 * goes out as its output text, a String in ClickHouse (18.16 has no IPv6
 * type); a host address has no "/32" or "/128" in that text.
 */
static const ExportColumn egress_connection_columns[] = {
	{"org_id", UUIDOID, EK_UUID},
	{"workspace_id", UUIDOID, EK_UUID},
	{"invocation_id", UUIDOID, EK_UUID},
	{"seq", INT4OID, EK_INT4},
	{"kind", TEXTOID, EK_TEXT},
	{"host", TEXTOID, EK_TEXT},
	{"port", INT4OID, EK_INT4},
	{"address", INETOID, EK_TEXT},
	{"allowed", BOOLOID, EK_BOOL},
	{"rule_id", UUIDOID, EK_UUID},
	{"reason", TEXTOID, EK_TEXT},
	{"bytes_up", INT8OID, EK_INT8},
	{"bytes_down", INT8OID, EK_INT8},
	{"duration_ms", INT8OID, EK_INT8},
	{"created_at", TIMESTAMPTZOID, EK_TIMESTAMPTZ},
};

typedef struct ExportTableDef
{
	const char *relname;		/* in schema agent */
	const ExportColumn *columns;
	int			ncolumns;
	/* Timestamps become two ClickHouse columns: DateTime and epoch ms. */
	const char *clickhouse_columns;
} ExportTableDef;

static const ExportTableDef export_tables[EXPORT_NTABLES] = {
	[EXPORT_TOOL_INVOCATIONS] = {
		"tool_invocations", tool_invocation_columns, lengthof(tool_invocation_columns),
		"org_id, workspace_id, invocation_id, agent_id, conversation_id, "
		"tool_name, language, status, exit_code, signal, duration_ms, cpu_ms, "
		"peak_memory_bytes, credits_charged, timed_out, oom_killed, "
		"output_truncated, started_at, started_at_ms, finished_at, "
		"finished_at_ms, created_at, created_at_ms, _deleted, _version"
	},
	[EXPORT_EGRESS_CONNECTIONS] = {
		"egress_connections", egress_connection_columns, lengthof(egress_connection_columns),
		"org_id, workspace_id, invocation_id, seq, kind, host, port, address, "
		"allowed, rule_id, reason, bytes_up, bytes_down, duration_ms, "
		"created_at, created_at_ms, _deleted, _version"
	},
};

StaticAssertDecl(lengthof(tool_invocation_columns) <= EXPORT_MAX_COLUMNS &&
				 lengthof(egress_connection_columns) <= EXPORT_MAX_COLUMNS,
				 "EXPORT_MAX_COLUMNS is too small");

const char *
sandbox_export_relname(ExportTable t)
{
	return export_tables[t].relname;
}

int
sandbox_export_ncolumns(ExportTable t)
{
	return export_tables[t].ncolumns;
}

const char *
sandbox_export_column(ExportTable t, int i)
{
	return export_tables[t].columns[i].name;
}

const char *
sandbox_export_clickhouse_columns(ExportTable t)
{
	return export_tables[t].clickhouse_columns;
}

void
sandbox_export_batch_init(ExportBatch *b, XLogRecPtr skip_below)
{
	int			t;

	memset(b, 0, sizeof(*b));
	for (t = 0; t < EXPORT_NTABLES; t++)
		initStringInfo(&b->tsv[t]);
	b->skip_below = skip_below;
}

/* Start a new batch; the buffers are kept unless one huge batch grew them. */
void
sandbox_export_batch_reset(ExportBatch *b, XLogRecPtr skip_below)
{
	StringInfoData keep[EXPORT_NTABLES];
	int			t;

	for (t = 0; t < EXPORT_NTABLES; t++)
	{
		keep[t] = b->tsv[t];
		if (keep[t].maxlen > 64 * 1024 * 1024)
		{
			MemoryContext old = MemoryContextSwitchTo(GetMemoryChunkContext(keep[t].data));

			pfree(keep[t].data);
			initStringInfo(&keep[t]);
			MemoryContextSwitchTo(old);
		}
	}
	memset(b, 0, sizeof(*b));
	for (t = 0; t < EXPORT_NTABLES; t++)
	{
		b->tsv[t] = keep[t];
		resetStringInfo(&b->tsv[t]);
	}
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
 * Append one row of table t: values[i] is the text of its i-th column
 * (sandbox_export_column) or NULL.
 */
void
sandbox_export_append_row(ExportBatch *b, ExportTable t, char *const *values,
						  bool deleted, uint64 version)
{
	const ExportTableDef *def = &export_tables[t];
	StringInfo	out = &b->tsv[t];
	int			i;

	for (i = 0; i < def->ncolumns; i++)
	{
		const char *v = values[i];

		if (i > 0)
			appendStringInfoChar(out, '\t');
		if (v == NULL)
		{
			appendStringInfoString(out, "\\N");
			if (def->columns[i].kind == EK_TIMESTAMPTZ)
				appendStringInfoString(out, "\t\\N");
			continue;
		}
		switch (def->columns[i].kind)
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
	b->table_rows[t]++;
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

/* Which exported table a published relation is (-1: none of ours). */
static int
table_of(const char *nsp, const char *rel)
{
	int			t;

	if (strcmp(nsp, "agent") != 0)
		return -1;
	for (t = 0; t < EXPORT_NTABLES; t++)
		if (strcmp(export_tables[t].relname, rel) == 0)
			return t;
	return -1;
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
	int			t;
	const ExportTableDef *def;
	ExportRelation *er;

	(void) read_byte(r);		/* replica identity */
	natts = read_int16(r);

	if ((t = table_of(nsp, rel)) < 0)
	{
		b->schema_error = true;
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("published relation \"%s.%s\" is not one the export knows", nsp, rel),
				 errhint("The export's publication holds agent.tool_invocations and agent.egress_connections only; remove the other table from it, then call agent.export_resync().")));
	}
	def = &export_tables[t];

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
	er->table = t;
	er->natts = natts;
	for (j = 0; j < def->ncolumns; j++)
		er->attmap[j] = -1;

	for (i = 0; i < natts; i++)
	{
		const char *name;
		Oid			typoid;

		(void) read_byte(r);	/* flags: part of the key */
		name = read_string(r);
		typoid = read_int32(r);
		(void) read_int32(r);	/* typmod */
		for (j = 0; j < def->ncolumns; j++)
		{
			if (strcmp(def->columns[j].name, name) != 0)
				continue;
			if (def->columns[j].typoid != typoid)
			{
				b->schema_error = true;
				ereport(ERROR,
						(errcode(ERRCODE_DATATYPE_MISMATCH),
						 errmsg("column \"%s\" of published relation \"%s.%s\" has type %u, the export expects %u",
								name, nsp, rel, typoid, def->columns[j].typoid),
						 errhint("Align the table with sql/clickhouse/ and the exporter, then call agent.export_reset().")));
			}
			er->attmap[j] = i;
		}
	}
	for (j = 0; j < def->ncolumns; j++)
		if (er->attmap[j] < 0)
		{
			b->schema_error = true;
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("published relation \"%s.%s\" has no column \"%s\"",
							nsp, rel, def->columns[j].name),
					 errhint("Align the table with sql/clickhouse/ and the exporter, then call agent.export_reset().")));
		}
}

/* Map a decoded tuple onto its table's columns and append it. */
static void
emit_tuple(ExportBatch *b, ExportRelation *er, char **newvals, bool *newunch,
		   char **oldvals, int oldn, bool deleted)
{
	const ExportTableDef *def = &export_tables[er->table];
	char	   *vals[EXPORT_MAX_COLUMNS];
	int			j;

	for (j = 0; j < def->ncolumns; j++)
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
								def->columns[j].name),
						 errhint("The export needs REPLICA IDENTITY FULL on agent.%s; agent.export_setup() sets it.",
								 def->relname)));
			vals[j] = oldvals[a];
		}
	}
	sandbox_export_append_row(b, er->table, vals, deleted, b->final_lsn);
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
