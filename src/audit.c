/*-------------------------------------------------------------------------
 *
 * audit.c
 *	  agent._audit(org, workspace, event_type, invocation, actor, details):
 *	  append one event to its org's hash chain and return its id.
 *
 * Every API call and every supervisor step appends at least one event, in
 * the caller's transaction (if that rolls back, so does the event).  The
 * append is one statement, prepared once per backend:
 *
 *	  WITH head AS (UPDATE agent.audit_heads ... RETURNING ...)
 *	  INSERT INTO agent.audit_events ... SELECT ... FROM head RETURNING id
 *
 * The UPDATE of the org's head row takes its lock (held to commit) and, in
 * the same projection, draws the event id and hashes the event onto the
 * previous tip, with the audit hash's current version (SANDBOX_AUDIT_HASH_VERSION,
 * digest.c).  Under concurrency it waits for the lock and re-evaluates
 * its SET list on the newest tip (READ COMMITTED's recheck), so the id is
 * drawn and the predecessor read only once the lock is ours: within an org
 * id order is chain order and the chain never forks (isolation spec
 * audit-chain).  On the org's first event there is no head row yet: it is
 * created (a concurrent first event may win; then we chain onto it) and the
 * statement runs again.
 *
 * The head row is writable only here: the statement runs with
 * audit_appending set, and the guard trigger on agent.audit_heads
 * (sandbox_audit_heads_guard, ENABLE ALWAYS) refuses any INSERT, UPDATE or
 * DELETE made without it, and any append-time change that does not move
 * the tip by exactly one event.  No code of anyone else runs while the
 * flag is up (the statement calls only agent._audit_hash and nextval).
 *
 * In C rather than PL/pgSQL only for speed: the function is on every
 * request and every decision (bench/control_plane).  Every name in the
 * statements is schema-qualified, operators included, so the caller's
 * search_path plays no part.  Not a security definer: only the owner (the
 * API functions, the supervisor) may execute it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"

static const char append_sql[] =
"WITH head AS ("
"  UPDATE agent.audit_heads h"
"     SET prev_hash = h.last_hash,"
"         (last_id, last_hash) ="
"          (SELECT n.id, agent._audit_hash(" CppAsString2(SANDBOX_AUDIT_HASH_VERSION) ", CASE WHEN h.last_hash OPERATOR(pg_catalog.=) '' THEN NULL"
"                                             ELSE h.last_hash END, n.id, $1, $2, $3, $4, $5, $6, $7)"
"             FROM (SELECT pg_catalog.nextval('agent.audit_events_id_seq'::pg_catalog.regclass) AS id) n),"
"         events = h.events OPERATOR(pg_catalog.+) 1"
"   WHERE h.org_id OPERATOR(pg_catalog.=) $1"
"  RETURNING h.last_id, h.last_hash, h.prev_hash)"
" INSERT INTO agent.audit_events (id, org_id, workspace_id, event_type, invocation_id,"
"                                 actor, details, created_at, prev_hash, hash, hash_version)"
"  SELECT head.last_id, $1, $2, $3, $4, $5, $6, $7,"
"         CASE WHEN head.prev_hash OPERATOR(pg_catalog.=) '' THEN NULL ELSE head.prev_hash END,"
"         head.last_hash, " CppAsString2(SANDBOX_AUDIT_HASH_VERSION)
"    FROM head"
" RETURNING id";

/*
 * The same append on the catalog of 0.2.0, which this library runs between
 * its install and ALTER EXTENSION UPDATE (docs/operations.md): no
 * hash_version column, the version 1 hash (the update marks these events
 * version 1 with the rest).
 */
static const char append_v1_sql[] =
"WITH head AS ("
"  UPDATE agent.audit_heads h"
"     SET prev_hash = h.last_hash,"
"         (last_id, last_hash) ="
"          (SELECT n.id, agent._audit_hash(CASE WHEN h.last_hash OPERATOR(pg_catalog.=) '' THEN NULL"
"                                          ELSE h.last_hash END, n.id, $1, $2, $3, $4, $5, $6, $7)"
"             FROM (SELECT pg_catalog.nextval('agent.audit_events_id_seq'::pg_catalog.regclass) AS id) n),"
"         events = h.events OPERATOR(pg_catalog.+) 1"
"   WHERE h.org_id OPERATOR(pg_catalog.=) $1"
"  RETURNING h.last_id, h.last_hash, h.prev_hash)"
" INSERT INTO agent.audit_events (id, org_id, workspace_id, event_type, invocation_id,"
"                                 actor, details, created_at, prev_hash, hash)"
"  SELECT head.last_id, $1, $2, $3, $4, $5, $6, $7,"
"         CASE WHEN head.prev_hash OPERATOR(pg_catalog.=) '' THEN NULL ELSE head.prev_hash END,"
"         head.last_hash"
"    FROM head"
" RETURNING id";

static const char head_sql[] =
"INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events)"
" VALUES ($1, 0, '', 0) ON CONFLICT (org_id) DO NOTHING";

static SPIPlanPtr append_plan = NULL;
static SPIPlanPtr append_v1_plan = NULL;
static SPIPlanPtr head_plan = NULL;

/* Raised only while this file's own statements run (see the header). */
static bool audit_appending = false;

/*
 * Whether the installed catalog versions its audit hashes (0.3.0 on): a
 * few syscache look-ups per append, so an ALTER EXTENSION UPDATE in
 * another session is followed at the next append.
 */
static bool
catalog_has_hash_version(void)
{
	Oid			nsp = get_namespace_oid("agent", true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid("audit_events", nsp) : InvalidOid;

	return OidIsValid(rel) && get_attnum(rel, "hash_version") != InvalidAttrNumber;
}

PG_FUNCTION_INFO_V1(sandbox_audit);
Datum
sandbox_audit(PG_FUNCTION_ARGS)
{
	Oid			types[7] = {UUIDOID, UUIDOID, TEXTOID, UUIDOID, TEXTOID, JSONBOID, TIMESTAMPTZOID};
	Datum		values[7];
	char		nulls[7];
	volatile int64 id = 0;
	volatile bool done = false;
	SPIPlanPtr	plan;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("an audit event needs an org and an event type")));

	for (int i = 0; i < 5; i++)
	{
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
	}
	nulls[5] = ' ';
	values[5] = PG_ARGISNULL(5) ?
		DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")) : PG_GETARG_DATUM(5);
	nulls[6] = ' ';
	values[6] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());	/* now() */

	SPI_connect();
	if (catalog_has_hash_version())
		plan = sandbox_keep_plan(&append_plan, append_sql, 7, types);
	else
		plan = sandbox_keep_plan(&append_v1_plan, append_v1_sql, 7, types);
	sandbox_keep_plan(&head_plan, head_sql, 1, types);

	audit_appending = true;
	PG_TRY();
	{
		for (int attempt = 0; attempt < 2 && !done; attempt++)
		{
			int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

			if (rc != SPI_OK_INSERT_RETURNING)
				elog(ERROR, "audit append failed: %s", SPI_result_code_string(rc));
			if (SPI_processed == 1)
			{
				bool		isnull;

				id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 1, &isnull));
				done = true;
			}
			else
			{
				rc = SPI_execute_plan(head_plan, values, nulls, false, 0);
				if (rc != SPI_OK_INSERT)
					elog(ERROR, "audit head creation failed: %s", SPI_result_code_string(rc));
			}
		}
	}
	PG_FINALLY();
	{
		audit_appending = false;
	}
	PG_END_TRY();
	SPI_finish();
	if (!done)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("the audit chain of org %s has no head",
						DatumGetCString(DirectFunctionCall1(uuid_out, values[0])))));
	PG_RETURN_INT64(id);
}

/* A column of an agent.audit_heads row, by name (the guard's reads). */
static Datum
head_attr(HeapTuple tuple, TupleDesc desc, const char *name)
{
	int			attno = SPI_fnumber(desc, name);
	bool		isnull;
	Datum		d;

	if (attno <= 0)
		elog(ERROR, "agent.audit_heads has no column \"%s\"", name);
	d = heap_getattr(tuple, attno, desc, &isnull);
	if (isnull)
		elog(ERROR, "agent.audit_heads.%s is null", name);
	return d;
}

/*
 * Whether a change of a head row is the one an append makes: a new head
 * of no events, or the tip moved by exactly one event onto a later id.
 */
static bool
head_change_is_append(TriggerData *td)
{
	TupleDesc	desc = td->tg_relation->rd_att;
	HeapTuple	newtup = td->tg_newtuple;
	HeapTuple	oldtup = td->tg_trigtuple;

	if (TRIGGER_FIRED_BY_INSERT(td->tg_event))
		return DatumGetInt64(head_attr(oldtup, desc, "events")) == 0 &&
			DatumGetInt64(head_attr(oldtup, desc, "last_id")) == 0;
	if (!TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		return false;
	return DatumGetInt64(head_attr(newtup, desc, "events")) ==
		DatumGetInt64(head_attr(oldtup, desc, "events")) + 1 &&
		DatumGetInt64(head_attr(newtup, desc, "last_id")) >
		DatumGetInt64(head_attr(oldtup, desc, "last_id")) &&
		DatumGetBool(DirectFunctionCall2(uuid_eq,
										 head_attr(newtup, desc, "org_id"),
										 head_attr(oldtup, desc, "org_id"))) &&
		DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID,
											 head_attr(newtup, desc, "prev_hash"),
											 head_attr(oldtup, desc, "last_hash")));
}

PG_FUNCTION_INFO_V1(sandbox_audit_heads_guard);

/*
 * agent._audit_heads_guard(): BEFORE INSERT OR UPDATE OR DELETE row
 * trigger on agent.audit_heads (ENABLE ALWAYS).  Only agent._audit moves a
 * tip, and only by one event; everything else is refused with 42501.
 */
Datum
sandbox_audit_heads_guard(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_BEFORE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("agent._audit_heads_guard() must be called as a BEFORE ROW trigger")));
	/*
	 * A restore (pg_restore in session_replication_role = replica,
	 * docs/operations.md) inserts tips as they were.  Only an insert, and
	 * only one that matches the org's audit events: that check is the
	 * ENABLE REPLICA trigger audit_heads_restore_check (98_backup.sql),
	 * which fires in replica mode alone.  A tip that exists is a
	 * primary-key conflict, so no existing chain's tip moves this way.
	 */
	if (TRIGGER_FIRED_BY_INSERT(td->tg_event) &&
		SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
		return PointerGetDatum(td->tg_trigtuple);
	if (!audit_appending || !head_change_is_append(td))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("cannot %s agent.audit_heads: the tip of an audit chain moves only with an append",
						TRIGGER_FIRED_BY_INSERT(td->tg_event) ? "insert into" :
						TRIGGER_FIRED_BY_UPDATE(td->tg_event) ? "update" : "delete from"),
				 errhint("Audit events are appended with agent._audit().")));
	return PointerGetDatum(TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
						   td->tg_newtuple : td->tg_trigtuple);
}
