-- The control plane's schema: the tables and columns other parts of the
-- project (the supervisor, the exporter) are written against, the indexes
-- they rely on, the roles, row-level security and the API's security.
BEGIN;
-- The contract's columns are all there (others may add more).
CREATE FUNCTION pg_temp.has_columns(tbl text, cols text[], description text) RETURNS text
	LANGUAGE sql AS $$
	SELECT is(ARRAY(SELECT c FROM unnest(cols) c
					EXCEPT SELECT attname::text FROM pg_attribute
					 WHERE attrelid = ('agent.' || tbl)::regclass AND attnum > 0 AND NOT attisdropped),
			  '{}'::text[], description)
$$;
SELECT plan(51);

-- Other parts of the project add their own tables and columns to schema
-- agent: these checks name what the control plane owns, not everything.
SELECT is(ARRAY(SELECT t FROM unnest(ARRAY[
	'settings', 'plans', 'orgs', 'workspaces', 'models', 'agents', 'conversations',
	'runtimes', 'invocations', 'approval_requests', 'agent_tool_calls',
	'tool_invocations', 'credit_balances', 'credit_ledger', 'audit_events',
	'audit_heads']) t
	EXCEPT SELECT tablename::text FROM pg_tables WHERE schemaname = 'agent'), '{}'::text[],
	'schema agent has the control plane''s tables');
SELECT is(ARRAY(SELECT v FROM unnest(ARRAY['invocation_overview', 'iam_decisions', 'credit_overview']) v
	EXCEPT SELECT viewname::text FROM pg_views WHERE schemaname = 'agent'), '{}'::text[],
	'the DBA views exist');

SELECT pg_temp.has_columns('invocations', ARRAY[
	'id', 'org_id', 'workspace_id', 'agent_id', 'conversation_id', 'requested_by',
	'language', 'code', 'code_sha256', 'description', 'idempotency_key', 'state',
	'state_reason', 'approval_id', 'credits_charged', 'wall_time_s', 'memory_mb',
	'exit_code', 'signal', 'timed_out', 'oom_killed', 'output_truncated', 'created_at',
	'approved_at', 'provisioned_at', 'started_at', 'finished_at', 'session_generation'],
	'invocations has the contract''s columns');
SELECT pg_temp.has_columns('tool_invocations', ARRAY[
	'invocation_id', 'org_id', 'workspace_id', 'agent_id', 'conversation_id', 'tool_name',
	'language', 'status', 'exit_code', 'signal', 'duration_ms', 'cpu_ms',
	'peak_memory_bytes', 'credits_charged', 'timed_out', 'oom_killed', 'output_truncated',
	'started_at', 'finished_at', 'created_at'],
	'tool_invocations has the contract''s columns');
SELECT pg_temp.has_columns('agent_tool_calls', ARRAY[
	'id', 'invocation_id', 'org_id', 'workspace_id', 'agent_id', 'conversation_id',
	'tool_name', 'input_hash', 'status', 'exit_code', 'output_preview', 'created_at'],
	'agent_tool_calls has the contract''s columns');
-- The card's code and description are its invocation's (stored once);
-- the card as shown, agent.approval_cards, has them.
SELECT pg_temp.has_columns('approval_requests', ARRAY[
	'id', 'invocation_id', 'org_id', 'workspace_id', 'status', 'code_sha256',
	'language', 'runtime', 'risk_level', 'requested_by', 'decided_by',
	'decided_at', 'decision_reason', 'approved_code_sha256', 'expires_at', 'created_at'],
	'approval_requests has the contract''s columns');
SELECT pg_temp.has_columns('approval_cards', ARRAY[
	'approval_id', 'invocation_id', 'status', 'code', 'code_sha256', 'language', 'runtime',
	'risk_level', 'description', 'requested_by', 'decided_by', 'decided_at',
	'decision_reason', 'expires_at', 'created_at'],
	'the card as shown has the contract''s columns');
SELECT is(ARRAY(SELECT attname::text FROM pg_attribute
				 WHERE attrelid = 'agent.approval_requests'::regclass AND attname IN ('code', 'description')
				   AND NOT attisdropped),
		  '{}'::text[], 'the card holds no copy of the code or description');
SELECT pg_temp.has_columns('credit_ledger', ARRAY[
	'id', 'org_id', 'workspace_id', 'invocation_id', 'kind', 'amount', 'reason', 'created_at'],
	'credit_ledger has the contract''s columns');
SELECT pg_temp.has_columns('credit_balances', ARRAY['org_id', 'balance', 'updated_at'],
	'credit_balances has the contract''s columns');
SELECT pg_temp.has_columns('audit_events', ARRAY[
	'id', 'org_id', 'workspace_id', 'event_type', 'invocation_id', 'actor', 'details',
	'created_at', 'prev_hash', 'hash'], 'audit_events has the contract''s columns');
SELECT pg_temp.has_columns('plans', ARRAY['plan', 'code_execution', 'credits_per_invocation'],
	'plans has the contract''s columns');

SELECT col_type_is('agent', 'invocations', 'id', 'uuid', 'ids are uuids');
SELECT col_not_null('agent', 'invocations', 'state', 'an invocation always has a state');
SELECT col_default_is('agent', 'invocations', 'credits_charged', '0', 'nothing is charged by default');
SELECT col_type_is('agent', 'credit_balances', 'balance', 'bigint', 'balances are bigint');
SELECT col_default_is('agent', 'tool_invocations', 'tool_name', 'code_execution', 'the tool is code_execution');
SELECT col_default_is('agent', 'agent_tool_calls', 'tool_name', 'code_execution', 'the tool call is code_execution');
SELECT col_is_pk('agent', 'tool_invocations', 'invocation_id', 'one analytics row per invocation');
SELECT col_is_unique('agent', 'agent_tool_calls', 'invocation_id', 'one tool call per invocation');
SELECT col_is_fk('agent', 'agent_tool_calls', 'invocation_id', 'a tool call belongs to an invocation');

SELECT is((SELECT pg_get_indexdef(indexrelid) ~ '\(state, approved_at\) WHERE \(state = ''approved''::text\)'
			 FROM pg_index WHERE indexrelid = 'agent.invocations_approved_idx'::regclass),
		  true, 'approved work is found by a partial index on (state, approved_at)');
SELECT is((SELECT indisunique AND pg_get_indexdef(indexrelid) ~ '\(invocation_id, kind\) WHERE'
			 FROM pg_index WHERE indexrelid = 'agent.credit_ledger_once_per_invocation'::regclass),
		  true, 'at most one charge and one refund per invocation');
SELECT is((SELECT count(*)::int FROM pg_constraint
			WHERE conrelid = 'agent.invocations'::regclass AND contype = 'u'
			  AND pg_get_constraintdef(oid) = 'UNIQUE (org_id, idempotency_key)'),
		  1, 'idempotency keys are unique per org');
SELECT is((SELECT count(*)::int FROM pg_constraint
			WHERE conrelid = 'agent.credit_balances'::regclass AND contype = 'c'
			  AND pg_get_constraintdef(oid) = 'CHECK ((balance >= 0))'),
		  1, 'a balance can never be negative (a CHECK)');
SELECT results_eq($$SELECT plan, code_execution, credits_per_invocation FROM agent.plans ORDER BY plan$$,
	$$VALUES ('free'::text, false, 2), ('growth', false, 2), ('pro', true, 2)$$,
	'only pro includes code execution, at 2 credits');
SELECT ok((SELECT value::interval > '0'::interval FROM agent.settings WHERE key = 'approval_timeout'),
	'the approval timeout is a setting');

SELECT has_role('agent_backend', 'role agent_backend exists');
SELECT has_role('agent_auditor', 'role agent_auditor exists');
SELECT is((SELECT rolbypassrls OR rolsuper FROM pg_roles WHERE rolname = 'agent_backend'), false,
	'agent_backend is bound by row-level security');
SELECT is((SELECT rolbypassrls OR rolsuper FROM pg_roles WHERE rolname = 'agent_auditor'), false,
	'agent_auditor reads through policies, not BYPASSRLS');
SELECT has_role('agent_admin', 'role agent_admin exists (org policy)');
SELECT is((SELECT rolbypassrls OR rolsuper OR rolcanlogin FROM pg_roles WHERE rolname = 'agent_admin'), false,
	'agent_admin is NOLOGIN and bound by row-level security');

SELECT is(ARRAY(SELECT c.relname::text FROM pg_class c
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'r'
				   AND NOT c.relrowsecurity
				   AND c.relname IN ('orgs', 'workspaces', 'agents', 'conversations', 'invocations',
									 'approval_requests', 'agent_tool_calls', 'tool_invocations',
									 'credit_balances', 'credit_ledger', 'audit_events', 'audit_heads',
									 'approval_policies', 'conversation_allowances')),
		  '{}'::text[], 'row-level security is on for every tenant table');

SELECT is_definer('agent', 'request_execution', 'request_execution is SECURITY DEFINER');
SELECT is_definer('agent', 'approve', 'approve is SECURITY DEFINER');
SELECT is_definer('agent', 'deny', 'deny is SECURITY DEFINER');
SELECT is_definer('agent', 'charge_invocation', 'charge_invocation is SECURITY DEFINER');
SELECT isnt_definer('agent', '_audit', '_audit runs as its caller (the owner): it is no API');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace AND p.prosecdef
				   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, agent, pg_temp'], false)),
		  '{}'::text[], 'every SECURITY DEFINER function pins search_path (44_search_path.sql attacks it)');
SELECT is(ARRAY(SELECT f FROM unnest(ARRAY[
			'agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer, text)',
			'agent.approve(uuid, text, text, boolean)', 'agent.deny(uuid, text, text)',
			'agent.expire_pending_approvals(timestamptz)', 'agent.grant_credits(uuid, bigint, text)',
			'agent.charge_invocation(uuid)', 'agent.refund_invocation(uuid, text)',
			'agent._audit(uuid, uuid, text, uuid, text, jsonb)', 'agent.verify_audit_chain(uuid)',
			'agent.set_tenant(uuid, uuid)', 'agent.approval_card(uuid)',
			'agent.approved_code_matches(uuid)', 'agent._wake_supervisor()']) f
		  WHERE has_function_privilege('public', f::regprocedure, 'EXECUTE')),
		  '{}'::text[], 'PUBLIC may execute none of the control plane''s API');

SELECT function_privs_are('agent', 'request_execution',
	ARRAY['uuid', 'uuid', 'uuid', 'text', 'text', 'text', 'text', 'text', 'integer', 'integer', 'text'],
	'agent_backend', ARRAY['EXECUTE'], 'agent_backend may request executions');
SELECT function_privs_are('agent', 'approve', ARRAY['uuid', 'text', 'text', 'boolean'],
	'agent_backend', ARRAY['EXECUTE'], 'agent_backend may approve');
SELECT function_privs_are('agent', 'charge_invocation', ARRAY['uuid'],
	'agent_backend', '{}'::text[], 'agent_backend may not charge');
SELECT function_privs_are('agent', 'grant_credits', ARRAY['uuid', 'bigint', 'text'],
	'agent_backend', '{}'::text[], 'agent_backend may not grant credits');
SELECT function_privs_are('agent', '_audit', ARRAY['uuid', 'uuid', 'text', 'uuid', 'text', 'jsonb'],
	'agent_backend', '{}'::text[], 'agent_backend may not write audit events');
SELECT function_privs_are('agent', 'verify_audit_chain', ARRAY['uuid'],
	'agent_auditor', ARRAY['EXECUTE'], 'agent_auditor may verify audit chains');

SELECT table_privs_are('agent', 'audit_events', 'agent_backend', ARRAY['SELECT'],
	'agent_backend only reads audit events');
SELECT table_privs_are('agent', 'credit_ledger', 'agent_backend', ARRAY['SELECT'],
	'agent_backend only reads the ledger');
SELECT table_privs_are('agent', 'agent_tool_calls', 'agent_backend', ARRAY['SELECT'],
	'agent_backend only reads tool calls');
SELECT table_privs_are('agent', 'invocations', 'agent_backend', ARRAY['SELECT'],
	'agent_backend changes invocations only through the API');

SELECT * FROM finish();
ROLLBACK;
