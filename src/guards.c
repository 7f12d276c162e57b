/*-------------------------------------------------------------------------
 *
 * guards.c
 *	  The control plane's row guards and tenant setter, in C because they
 *	  run on every request and every approval.
 *
 * What is here, and why not PL/pgSQL:
 *	  agent.set_tenant()				two set_config() calls
 *	  agent.is_invocation_state()		CHECK of invocations.state
 *	  agent.is_approval_status()		CHECK of approval_requests.status
 *	  agent.invocation_transition_allowed()
 *										the state machine, one table shared
 *										with the trigger below
 *	  agent._state_is_terminal()		a state without a way out, from the
 *										same table
 *	  agent._invocations_check_transition()	BEFORE UPDATE OF state; an
 *										invocation that ends wakes the
 *										waiters of agent.wait() at commit
 *	  agent._runner_role()				the role a runner host acts as (or
 *										42501: not one a runner may act as)
 *	  agent._outer_role()				the role outside a SECURITY DEFINER
 *										function
 *	  agent._run_limits()				the GUCs a runner's steps check
 *	  agent._invocations_hash_code()	BEFORE INSERT: code_sha256 derived
 *	  agent._invocations_egress()		BEFORE INSERT: the egress policy and
 *										its hash copied in (none without rules)
 *	  agent._approval_requests_guard()	BEFORE UPDATE: the card is frozen,
 *										a decision is final
 *	  agent._audit_events_count()		AFTER INSERT on agent.audit_events:
 *										the event's bytes added to its org's
 *										usage row (six times a run)
 *	  agent._log_invocation_end()		deferred AFTER UPDATE OF state: the
 *										end's log line, at commit
 * A PL/pgSQL trigger costs about 8 us a row (a fresh expression state per
 * transaction, NEW and OLD expanded into records); these cost about one.
 * The control plane's throughput is bounded by CPU per request+approve
 * pair (bench/control_plane), so that is worth the C.  Behaviour, SQLSTATEs
 * and messages are those of the PL/pgSQL versions they replace; pgTAP and
 * the regression suite check them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"

/* The states of an invocation (docs/control-plane.md). */
static const char *const invocation_states[] = {
	"pending_approval", "approved", "provisioning", "running", "succeeded",
	"failed", "timed_out", "killed", "denied", "expired", "cancelled",
	"provision_failed", "insufficient_credits", NULL
};

static const char *const approval_statuses[] = {
	"pending", "approved", "denied", "expired", "cancelled", NULL
};

/*
 * The state machine: for each state that may still change, where it may
 * go.  Terminal states are absent (no way out).
 */
typedef struct Transition
{
	const char *from;
	const char *const to[8];
} Transition;

static const Transition transitions[] = {
	{"pending_approval", {"approved", "denied", "expired", "cancelled", NULL}},
	{"approved", {"provisioning", "cancelled", "insufficient_credits", "provision_failed", NULL}},
	/* to its end directly: a run reported by its finish (docs/execution.md) */
	{"provisioning", {"running", "succeeded", "failed", "timed_out", "killed", "cancelled",
	"provision_failed", NULL}},
	/* provision_failed: a failure of ours after the start (docs/execution.md) */
	{"running", {"succeeded", "failed", "timed_out", "killed", "cancelled", "provision_failed", NULL}},
	{NULL, {NULL}}
};

static bool
in_list(const char *s, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(s, *list) == 0)
			return true;
	return false;
}

static bool
transition_allowed(const char *from, const char *to)
{
	if (strcmp(from, to) == 0)
		return true;
	for (const Transition *t = transitions; t->from; t++)
		if (strcmp(t->from, from) == 0)
			return in_list(to, t->to);
	return false;
}

/* A state with no way out of it: absent from the table of transitions. */
static bool
state_is_terminal(const char *s)
{
	if (!in_list(s, invocation_states))
		return false;
	for (const Transition *t = transitions; t->from; t++)
		if (strcmp(t->from, s) == 0)
			return false;
	return true;
}

PG_FUNCTION_INFO_V1(sandbox_is_invocation_state);
Datum
sandbox_is_invocation_state(PG_FUNCTION_ARGS)
{
	char	   *s = text_to_cstring(PG_GETARG_TEXT_PP(0));

	PG_RETURN_BOOL(in_list(s, invocation_states));
}

/*
 * agent._state_is_terminal(state): a state with no way out of it, from the
 * same table (no second list of terminal states anywhere).
 */
PG_FUNCTION_INFO_V1(sandbox_state_is_terminal);
Datum
sandbox_state_is_terminal(PG_FUNCTION_ARGS)
{
	char	   *s = text_to_cstring(PG_GETARG_TEXT_PP(0));

	PG_RETURN_BOOL(state_is_terminal(s));
}

PG_FUNCTION_INFO_V1(sandbox_is_approval_status);
Datum
sandbox_is_approval_status(PG_FUNCTION_ARGS)
{
	char	   *s = text_to_cstring(PG_GETARG_TEXT_PP(0));

	PG_RETURN_BOOL(in_list(s, approval_statuses));
}

PG_FUNCTION_INFO_V1(sandbox_invocation_transition_allowed);
Datum
sandbox_invocation_transition_allowed(PG_FUNCTION_ARGS)
{
	char	   *from = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *to = text_to_cstring(PG_GETARG_TEXT_PP(1));

	PG_RETURN_BOOL(transition_allowed(from, to));
}

/*
 * agent.set_tenant(org, workspace): SET LOCAL sandbox.org_id and
 * sandbox.workspace_id; NULL clears.  The GUCs' check hooks validate.
 */
PG_FUNCTION_INFO_V1(sandbox_set_tenant);
Datum
sandbox_set_tenant(PG_FUNCTION_ARGS)
{
	const char *const names[2] = {"sandbox.org_id", "sandbox.workspace_id"};

	for (int i = 0; i < 2; i++)
	{
		const char *value = "";

		if (!PG_ARGISNULL(i))
			value = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(i)));
		(void) set_config_option(names[i], value,
								 superuser() ? PGC_SUSET : PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
	}
	PG_RETURN_VOID();
}

/*
 * agent._xid_is_current(xid): whether a row version's xmin is the calling
 * transaction or one of its subtransactions (agent._invocation_state()
 * refuses to wait for an invocation this transaction changed and has not
 * committed: nothing else can move it until then).
 */
PG_FUNCTION_INFO_V1(sandbox_xid_is_current);
Datum
sandbox_xid_is_current(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(TransactionIdIsCurrentTransactionId(PG_GETARG_TRANSACTIONID(0)));
}

/*
 * agent._runner_role(): the role a runner host acts as, for the fence of
 * the runner steps (45_runners.sql), or 42501 when the session may not act
 * as a runner at all.  The steps are SECURITY DEFINER, so current_user
 * inside them is the owner; the outer user is the role the session runs
 * as, after SET ROLE.
 *
 * A runner acts as the LOGIN role its session connected as, and only as
 * that: SET ROLE reaches every role the login is a member of, agent_runner
 * among them, so honouring it would let a runner host register a second
 * runner as the shared role (or as another runner's role, granted by
 * mistake).  The one exception is the local runner's documented way: the
 * server's superuser session with SET ROLE sandbox_runner_local (a
 * superuser can be anyone anyway).  agent_runner itself, and a role that
 * cannot log in, never act as a runner, whoever the session is.
 */
PG_FUNCTION_INFO_V1(sandbox_runner_role);
Datum
sandbox_runner_role(PG_FUNCTION_ARGS)
{
	Oid			outer = GetOuterUserId();
	Oid			session = GetSessionUserId();
	Oid			shared = get_role_oid("agent_runner", true);
	Oid			local = get_role_oid("sandbox_runner_local", true);
	const char *name = GetUserNameFromId(outer, false);
	bool		allowed;
	Name		result;

	if (outer == shared)
		allowed = false;
	else if (outer == local)
		allowed = superuser_arg(session);
	else
	{
		HeapTuple	tup = SearchSysCache1(AUTHOID, ObjectIdGetDatum(outer));
		bool		canlogin;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for role %u", outer);
		canlogin = ((Form_pg_authid) GETSTRUCT(tup))->rolcanlogin;
		ReleaseSysCache(tup);
		allowed = canlogin && outer == session;
	}
	if (!allowed)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to act as runner role \"%s\"", name),
				 errdetail("A runner acts as the login role its session connected as (session role \"%s\"), never through SET ROLE; the local runner acts as sandbox_runner_local from the server's superuser session.",
						   GetUserNameFromId(session, false)),
				 errhint("Connect as the runner host's own role, a member of agent_runner, and do not change role.")));

	result = (Name) palloc0(NAMEDATALEN);
	namestrcpy(result, name);
	PG_RETURN_NAME(result);
}

/*
 * agent._outer_role(): the role the session runs as, after SET ROLE (the
 * caller of a SECURITY DEFINER function, which current_user inside it is
 * not).  No check: for functions that decide what a caller sees
 * (agent.queue_status).
 */
PG_FUNCTION_INFO_V1(sandbox_outer_role);
Datum
sandbox_outer_role(PG_FUNCTION_ARGS)
{
	Name		result = (Name) palloc0(NAMEDATALEN);

	namestrcpy(result, GetUserNameFromId(GetOuterUserId(), false));
	PG_RETURN_NAME(result);
}

/*
 * agent._run_limits(): the server's limits of a run, for runner hosts
 * (agent.runner_claim fills in the defaults, and the runner steps check
 * what a runner sends against them): the GUCs themselves, not pg_settings,
 * which would build every setting's row on each call.
 */
PG_FUNCTION_INFO_V1(sandbox_run_limits);
Datum
sandbox_run_limits(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[4];
	bool		nulls[4] = {false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int32GetDatum(sandbox_default_wall_time_s);
	values[1] = Int32GetDatum(sandbox_default_memory_mb);
	values[2] = Int64GetDatum((int64) sandbox_output_limit_kb * 1024);
	values[3] = Int32GetDatum(sandbox_workspace_entries);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/*
 * agent._request_limits(): the GUCs a request and a finish check against
 * (sandbox.max_wall_time, sandbox.max_memory, sandbox.preview_size), read
 * as agent._run_limits() reads its own: not through pg_settings, which
 * builds a row for every setting of the server on each call (about 1.4 ms
 * of every finish, measured with bench/runners).
 */
PG_FUNCTION_INFO_V1(sandbox_request_limits);
Datum
sandbox_request_limits(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[3];
	bool		nulls[3] = {false};

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	values[0] = Int32GetDatum(sandbox_max_wall_time_s);
	values[1] = Int32GetDatum(sandbox_max_memory_mb);
	values[2] = Int32GetDatum(sandbox_preview_bytes);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(tupdesc), values, nulls)));
}

/* ---- triggers ---- */

static TriggerData *
trigger_args(FunctionCallInfo fcinfo, const char *name, TriggerEvent want)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		(td->tg_event & TRIGGER_EVENT_OPMASK) != want)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("%s must be fired BEFORE %s FOR EACH ROW", name,
						want == TRIGGER_EVENT_INSERT ? "INSERT" : "UPDATE")));
	return td;
}

static int
column(Relation rel, const char *name)
{
	int			attno = SPI_fnumber(RelationGetDescr(rel), name);

	if (attno <= 0)
		elog(ERROR, "table \"%s\" has no column \"%s\"",
			 RelationGetRelationName(rel), name);
	return attno;
}

/* A column as a C string, or NULL. */
static char *
text_column(HeapTuple tuple, Relation rel, const char *name)
{
	bool		isnull;
	Datum		d = heap_getattr(tuple, column(rel, name), RelationGetDescr(rel), &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

PG_FUNCTION_INFO_V1(sandbox_invocations_check_transition);
Datum
sandbox_invocations_check_transition(PG_FUNCTION_ARGS)
{
	TriggerData *td = trigger_args(fcinfo, "_invocations_check_transition",
								   TRIGGER_EVENT_UPDATE);
	Relation	rel = td->tg_relation;
	char	   *from = text_column(td->tg_trigtuple, rel, "state");
	char	   *to = text_column(td->tg_newtuple, rel, "state");

	/* a NULL new state is the NOT NULL constraint's to refuse */
	if (from && to && !transition_allowed(from, to))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("invalid state transition from \"%s\" to \"%s\"", from, to),
				 errdetail("Invocation %s is %s.",
						   SPI_getvalue(td->tg_trigtuple, RelationGetDescr(rel),
										column(rel, "id")), from)));

	/*
	 * It ends here: whichever process commits this (the supervisor, a runner
	 * host's backend, a backend that cancels or denies), the backends in
	 * agent.wait() look again at that commit.  A rollback wakes nobody.
	 */
	if (to && state_is_terminal(to))
		sandbox_wake_at_commit(SANDBOX_WAKE_FINISHED);
	return PointerGetDatum(td->tg_newtuple);
}

/*
 * code_sha256 := encode(sha256(convert_to(code, 'UTF8')), 'hex'), the
 * same as agent.code_sha256().
 */
PG_FUNCTION_INFO_V1(sandbox_invocations_hash_code);
Datum
sandbox_invocations_hash_code(PG_FUNCTION_ARGS)
{
	TriggerData *td = trigger_args(fcinfo, "_invocations_hash_code",
								   TRIGGER_EVENT_INSERT);
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	int			code_att = column(rel, "code");
	int			hash_att = column(rel, "code_sha256");
	bool		isnull;
	Datum		code = heap_getattr(td->tg_trigtuple, code_att, desc, &isnull);
	Datum		value = (Datum) 0;
	bool		value_null = true;

	if (!isnull)
	{
		text	   *t = DatumGetTextPP(code);

		value = PointerGetDatum(sandbox_sha256_utf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)));
		value_null = false;
	}
	/* a NULL code leaves a NULL hash for the NOT NULL constraints */
	return PointerGetDatum(heap_modify_tuple_by_cols(td->tg_trigtuple, desc, 1,
													 &hash_att, &value, &value_null));
}

/*
 * The effective egress policy of a new invocation and its hash, copied in
 * at request time (47_egress.sql): whoever inserts cannot supply their own.
 * An org without egress rules (most) has neither: both NULL, as
 * agent._effective_egress() and agent._egress_sha256() return then, without
 * calling them.  Otherwise they build and hash it, in one query.  Both
 * queries are prepared once per backend; every name in them is
 * schema-qualified, the operator too.
 */
static SPIPlanPtr egress_any_plan = NULL;
static SPIPlanPtr egress_policy_plan = NULL;

PG_FUNCTION_INFO_V1(sandbox_invocations_egress);
Datum
sandbox_invocations_egress(PG_FUNCTION_ARGS)
{
	TriggerData *td = trigger_args(fcinfo, "_invocations_egress",
								   TRIGGER_EVENT_INSERT);
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	int			cols[2] = {column(rel, "egress_policy"), column(rel, "egress_sha256")};
	Datum		values[2] = {(Datum) 0, (Datum) 0};
	bool		nulls[2] = {true, true};
	Oid			types[3] = {UUIDOID, UUIDOID, UUIDOID};
	Datum		args[3];
	char		argnulls[3];
	const char *const names[3] = {"org_id", "agent_id", "conversation_id"};
	bool		isnull;
	int			rc;

	for (int i = 0; i < 3; i++)
	{
		args[i] = heap_getattr(td->tg_trigtuple, column(rel, names[i]), desc, &isnull);
		argnulls[i] = isnull ? 'n' : ' ';
	}
	/* (not read-only: each query sees what has committed, as PL/pgSQL's) */
	SPI_connect();
	rc = SPI_execute_plan(sandbox_keep_plan(&egress_any_plan,
									"SELECT EXISTS (SELECT 1 FROM agent.egress_rules r"
									" WHERE r.org_id OPERATOR(pg_catalog.=) $1)",
									1, types),
						  args, argnulls, false, 1);
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "the egress rules query failed: %s", SPI_result_code_string(rc));
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
	{
		rc = SPI_execute_plan(sandbox_keep_plan(&egress_policy_plan,
										"SELECT p, agent._egress_sha256(p)"
										" FROM agent._effective_egress($1, $2, $3) AS p",
										3, types),
							  args, argnulls, false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "the egress policy query failed: %s", SPI_result_code_string(rc));
		for (int i = 0; i < 2; i++)
		{
			Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, i);
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &nulls[i]);

			/* out of SPI's memory, into the trigger's caller's */
			values[i] = nulls[i] ? (Datum) 0 : SPI_datumTransfer(d, att->attbyval, att->attlen);
		}
	}
	SPI_finish();
	return PointerGetDatum(heap_modify_tuple_by_cols(td->tg_trigtuple, desc, 2,
													 cols, values, nulls));
}

/* IS DISTINCT FROM on one column, with the type's own equality. */
static bool
column_distinct(HeapTuple a, HeapTuple b, TupleDesc desc, int attno)
{
	Form_pg_attribute att = TupleDescAttr(desc, attno - 1);
	bool		anull,
				bnull;
	Datum		ad = heap_getattr(a, attno, desc, &anull);
	Datum		bd = heap_getattr(b, attno, desc, &bnull);
	TypeCacheEntry *tc;

	if (anull || bnull)
		return anull != bnull;
	tc = lookup_type_cache(att->atttypid, TYPECACHE_EQ_OPR_FINFO);
	if (!OidIsValid(tc->eq_opr_finfo.fn_oid))
		return !datumIsEqual(ad, bd, att->attbyval, att->attlen);
	return !DatumGetBool(FunctionCall2Coll(&tc->eq_opr_finfo, att->attcollation, ad, bd));
}

PG_FUNCTION_INFO_V1(sandbox_approval_requests_guard);
Datum
sandbox_approval_requests_guard(PG_FUNCTION_ARGS)
{
	/*
	 * The code a card shows is its invocation's, frozen there (0.3.0).  A
	 * catalog before the update to 0.3.0 still has the card's own copy,
	 * which this library must keep frozen until the update drops it.
	 */
	static const char *const frozen[] = {
		"code_sha256", "language", "runtime", "invocation_id",
		"org_id", "workspace_id", "requested_by", "created_at", NULL
	};
	TriggerData *td = trigger_args(fcinfo, "_approval_requests_guard",
								   TRIGGER_EVENT_UPDATE);
	Relation	rel = td->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	old = td->tg_trigtuple;
	HeapTuple	new = td->tg_newtuple;
	int			old_code = SPI_fnumber(desc, "code");
	char	   *status;

	for (const char *const *c = frozen; *c; c++)
		if (column_distinct(old, new, desc, column(rel, *c)))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("cannot change the card of approval request %s",
							SPI_getvalue(old, desc, column(rel, "id")))));
	if (old_code > 0 && column_distinct(old, new, desc, old_code))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot change the card of approval request %s",
						SPI_getvalue(old, desc, column(rel, "id")))));

	status = text_column(old, rel, "status");
	if (status && strcmp(status, "pending") != 0)
	{
		for (int i = 1; i <= desc->natts; i++)
		{
			if (TupleDescAttr(desc, i - 1)->attisdropped)
				continue;
			if (column_distinct(old, new, desc, i))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("approval request %s has already been decided",
								SPI_getvalue(old, desc, column(rel, "id"))),
						 errdetail("It was %s.", status)));
		}
	}
	return PointerGetDatum(new);
}

/*
 * agent._audit_events_count(): AFTER INSERT FOR EACH ROW on
 * agent.audit_events (21_audit_usage.sql).  The event's bytes
 * (agent._audit_event_bytes of its details and actor, the one definition,
 * inlined into the prepared statement) are added to its org's usage row;
 * an org without one (an old org) gets it.  Never refuses.  The two
 * statements are prepared once per backend; every name in them is
 * schema-qualified, operators included.
 */
static SPIPlanPtr usage_add_plan = NULL;
static SPIPlanPtr usage_insert_plan = NULL;

PG_FUNCTION_INFO_V1(sandbox_audit_events_count);
Datum
sandbox_audit_events_count(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	Relation	rel;
	TupleDesc	desc;
	Oid			types[3] = {UUIDOID, JSONBOID, TEXTOID};
	Datum		args[3];
	char		argnulls[3];
	const char *const names[3] = {"org_id", "details", "actor"};
	bool		isnull;
	int			rc;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_INSERT(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("_audit_events_count must be fired AFTER INSERT FOR EACH ROW")));
	rel = td->tg_relation;
	desc = RelationGetDescr(rel);
	for (int i = 0; i < 3; i++)
	{
		args[i] = heap_getattr(td->tg_trigtuple, column(rel, names[i]), desc, &isnull);
		argnulls[i] = isnull ? 'n' : ' ';
	}
	SPI_connect();
	rc = SPI_execute_plan(sandbox_keep_plan(&usage_add_plan,
									"UPDATE agent.org_usage u"
									"   SET stored_bytes = u.stored_bytes OPERATOR(pg_catalog.+)"
									"                      agent._audit_event_bytes($2, $3),"
									"       updated_at = pg_catalog.now()"
									" WHERE u.org_id OPERATOR(pg_catalog.=) $1",
									3, types),
						  args, argnulls, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "the usage update failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		/* made with the org; an old org may lack it */
		rc = SPI_execute_plan(sandbox_keep_plan(&usage_insert_plan,
										"INSERT INTO agent.org_usage AS u (org_id, stored_bytes)"
										" VALUES ($1, agent._audit_event_bytes($2, $3))"
										" ON CONFLICT (org_id) DO UPDATE"
										" SET stored_bytes = u.stored_bytes OPERATOR(pg_catalog.+)"
										"                    agent._audit_event_bytes($2, $3)",
										3, types),
							  args, argnulls, false, 0);
		if (rc != SPI_OK_INSERT)
			elog(ERROR, "the usage insert failed: %s", SPI_result_code_string(rc));
	}
	SPI_finish();
	return PointerGetDatum(NULL);
}

/*
 * agent._log_invocation_end(): the deferred constraint trigger of
 * 41_run_log.sql (AFTER UPDATE OF state, at commit): one LOG line for an
 * invocation that ended, read from the row as it commits (a refund in the
 * same transaction included).  Nothing in it may fail the commit: an error
 * becomes a WARNING, and what it did is rolled back with its
 * subtransaction (as the PL/pgSQL version's EXCEPTION block).
 */
static SPIPlanPtr log_end_plan = NULL;

PG_FUNCTION_INFO_V1(sandbox_log_invocation_end);
Datum
sandbox_log_invocation_end(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Oid			types[1] = {UUIDOID};
	Datum		id;
	char		idnull;
	bool		isnull;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_AFTER(td->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(td->tg_event) || !TRIGGER_FIRED_BY_UPDATE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("_log_invocation_end must be fired AFTER UPDATE FOR EACH ROW")));
	id = heap_getattr(td->tg_newtuple, column(td->tg_relation, "id"),
					  RelationGetDescr(td->tg_relation), &isnull);
	idnull = isnull ? 'n' : ' ';

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		int			rc;

		SPI_connect();
		rc = SPI_execute_plan(sandbox_keep_plan(&log_end_plan,
										"SELECT i.id::pg_catalog.text, i.org_id::pg_catalog.text, i.state,"
										"       coalesce((EXTRACT(epoch FROM i.finished_at OPERATOR(pg_catalog.-) i.started_at)"
										"                 OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8, 0)::pg_catalog.text,"
										"       i.credits_charged::pg_catalog.text"
										"  FROM agent.invocations i WHERE i.id OPERATOR(pg_catalog.=) $1",
										1, types),
							  &id, &idnull, false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "the invocation's row is not there");
		{
			TupleDesc	desc = SPI_tuptable->tupdesc;
			HeapTuple	row = SPI_tuptable->vals[0];
			char	   *v[5];

			for (int i = 0; i < 5; i++)
			{
				v[i] = SPI_getvalue(row, desc, i + 1);
				if (v[i] == NULL)
					v[i] = "<NULL>";
			}
			elog(LOG, "sandbox_ext invocation %s ended: org %s, state %s, %s ms, %s credits charged",
				 v[0], v[1], v[2], v[3], v[4]);
		}
		SPI_finish();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		ereport(WARNING,
				(errmsg("could not log the end of invocation %s: %s",
						isnull ? "NULL" : DatumGetCString(DirectFunctionCall1(uuid_out, id)),
						edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return PointerGetDatum(NULL);
}
