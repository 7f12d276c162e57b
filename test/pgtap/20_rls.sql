-- Tenant isolation, attacked from the backend's side: acting for org A,
-- agent_backend can neither see nor change any row of org B, through any
-- table or function, and writes nothing except through the API.  The
-- auditor reads every tenant and writes nothing.
BEGIN;

-- Two pro orgs, A and B, each with a workspace, an agent, a thread, a
-- pending request, an approved-and-charged request with its tool call and
-- analytics row, credits and audit events.  Set up as the owner.
INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('1f000000-0000-4000-8000-000000000001', 'tap-rls', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('af000000-0000-4000-8000-00000000000a', 'Org A', 'pro'),
	('af000000-0000-4000-8000-00000000000b', 'Org B', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('bf000000-0000-4000-8000-00000000000a', 'af000000-0000-4000-8000-00000000000a', 'A'),
	('bf000000-0000-4000-8000-00000000000b', 'af000000-0000-4000-8000-00000000000b', 'B'),
	('bf000000-0000-4000-8000-0000000000a2', 'af000000-0000-4000-8000-00000000000a', 'A2');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('cf000000-0000-4000-8000-00000000000a', 'af000000-0000-4000-8000-00000000000a',
	 'bf000000-0000-4000-8000-00000000000a', 'A agent', 'specialist', '1f000000-0000-4000-8000-000000000001', true),
	('cf000000-0000-4000-8000-00000000000b', 'af000000-0000-4000-8000-00000000000b',
	 'bf000000-0000-4000-8000-00000000000b', 'B agent', 'specialist', '1f000000-0000-4000-8000-000000000001', true),
	('cf000000-0000-4000-8000-0000000000a2', 'af000000-0000-4000-8000-00000000000a',
	 'bf000000-0000-4000-8000-0000000000a2', 'A2 agent', 'specialist', '1f000000-0000-4000-8000-000000000001', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('df000000-0000-4000-8000-00000000000a', 'af000000-0000-4000-8000-00000000000a',
	 'bf000000-0000-4000-8000-00000000000a', 'cf000000-0000-4000-8000-00000000000a', true),
	('df000000-0000-4000-8000-00000000000b', 'af000000-0000-4000-8000-00000000000b',
	 'bf000000-0000-4000-8000-00000000000b', 'cf000000-0000-4000-8000-00000000000b', true);

CREATE TEMP TABLE ids (tenant text, kind text, id uuid);
CREATE FUNCTION pg_temp.seed(t text, org uuid, ws uuid, ag uuid, conv uuid) RETURNS void
	LANGUAGE plpgsql AS $$
DECLARE
	r agent.execution_request;
BEGIN
	PERFORM agent.grant_credits(org, 10, 'tap');
	PERFORM agent.set_tenant(org, ws);
	r := agent.request_execution(ws, ag, conv, 'python', 'print("pending")', t || '-user');
	INSERT INTO pg_temp.ids VALUES (t, 'pending_approval', r.approval_id), (t, 'pending_invocation', r.invocation_id);
	r := agent.request_execution(ws, ag, conv, 'python', 'print("ran")', t || '-user');
	PERFORM agent.approve(r.approval_id, t || '-approver');
	PERFORM agent.charge_invocation(r.invocation_id);
	INSERT INTO pg_temp.ids VALUES (t, 'approved_approval', r.approval_id), (t, 'approved_invocation', r.invocation_id);
	INSERT INTO agent.agent_tool_calls (invocation_id, org_id, workspace_id, agent_id, conversation_id, status, exit_code)
		VALUES (r.invocation_id, org, ws, ag, conv, 'succeeded', 0);
	INSERT INTO agent.tool_invocations (invocation_id, org_id, workspace_id, agent_id, language, status, credits_charged)
		VALUES (r.invocation_id, org, ws, ag, 'python', 'succeeded', 2);
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
SELECT pg_temp.seed('A', 'af000000-0000-4000-8000-00000000000a', 'bf000000-0000-4000-8000-00000000000a',
	'cf000000-0000-4000-8000-00000000000a', 'df000000-0000-4000-8000-00000000000a');
SELECT pg_temp.seed('B', 'af000000-0000-4000-8000-00000000000b', 'bf000000-0000-4000-8000-00000000000b',
	'cf000000-0000-4000-8000-00000000000b', 'df000000-0000-4000-8000-00000000000b');
CREATE FUNCTION pg_temp.id(t text, k text) RETURNS uuid LANGUAGE sql
	AS $$ SELECT id FROM pg_temp.ids WHERE tenant = t AND kind = k $$;

-- Counts of B's rows in every tenant table, as the current role sees them.
CREATE FUNCTION pg_temp.visible(org uuid) RETURNS TABLE (tbl text, n bigint) LANGUAGE sql AS $$
	SELECT 'orgs', count(*) FROM agent.orgs WHERE id = org UNION ALL
	SELECT 'workspaces', count(*) FROM agent.workspaces WHERE org_id = org UNION ALL
	SELECT 'agents', count(*) FROM agent.agents WHERE org_id = org UNION ALL
	SELECT 'conversations', count(*) FROM agent.conversations WHERE org_id = org UNION ALL
	SELECT 'invocations', count(*) FROM agent.invocations WHERE org_id = org UNION ALL
	SELECT 'approval_requests', count(*) FROM agent.approval_requests WHERE org_id = org UNION ALL
	SELECT 'agent_tool_calls', count(*) FROM agent.agent_tool_calls WHERE org_id = org UNION ALL
	SELECT 'tool_invocations', count(*) FROM agent.tool_invocations WHERE org_id = org UNION ALL
	SELECT 'credit_balances', count(*) FROM agent.credit_balances WHERE org_id = org UNION ALL
	SELECT 'credit_ledger', count(*) FROM agent.credit_ledger WHERE org_id = org UNION ALL
	SELECT 'audit_events', count(*) FROM agent.audit_events WHERE org_id = org UNION ALL
	SELECT 'invocation_overview', count(*) FROM agent.invocation_overview WHERE org_id = org UNION ALL
	SELECT 'iam_decisions', count(*) FROM agent.iam_decisions WHERE org_id = org UNION ALL
	SELECT 'credit_overview', count(*) FROM agent.credit_overview WHERE org_id = org
$$;

CREATE FUNCTION pg_temp.rows_changed(stmt text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
	n bigint;
BEGIN
	EXECUTE stmt;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

SELECT plan(53);
-- pgTAP keeps its state in temp tables; let the roles under test write it.
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

---- The backend acting for A ----
SET ROLE agent_backend;
SELECT agent.set_tenant('af000000-0000-4000-8000-00000000000a', 'bf000000-0000-4000-8000-00000000000a');

SELECT is((SELECT count(*) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000b') WHERE n > 0),
	0::bigint, 'A sees no row of B in any table or view');
SELECT is((SELECT count(*) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000a') WHERE n > 0),
	14::bigint, 'A sees its own rows in every table and view');
SELECT is((SELECT count(*) FROM agent.agents WHERE workspace_id = 'bf000000-0000-4000-8000-0000000000a2'),
	0::bigint, 'A sees no agent of its other workspace');
SELECT is((SELECT count(*) FROM agent.invocations), 2::bigint, 'A sees exactly its two invocations');

-- B's cards cannot be read, approved or denied.
SELECT throws_ok(format('SELECT agent.approval_card(%L)', pg_temp.id('B', 'pending_approval')),
	'P0002', NULL, 'A cannot read B''s approval card');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.id('B', 'pending_approval'), 'mallory'),
	'P0002', NULL, 'A cannot approve B''s request');
SELECT throws_ok(format('SELECT agent.deny(%L, %L, %L)', pg_temp.id('B', 'pending_approval'), 'mallory', 'no'),
	'P0002', NULL, 'A cannot deny B''s request');
SELECT throws_ok(format('SELECT agent.request_execution(%L, %L, NULL, %L, %L, %L)',
	'bf000000-0000-4000-8000-00000000000b', 'cf000000-0000-4000-8000-00000000000b', 'python', 'print(1)', 'mallory'),
	'42501', NULL, 'A cannot request in B''s workspace');
SELECT throws_ok(format('SELECT agent.request_execution(%L, %L, %L, %L, %L, %L)',
	'bf000000-0000-4000-8000-00000000000a', 'cf000000-0000-4000-8000-00000000000a',
	'df000000-0000-4000-8000-00000000000b', 'python', 'print(1)', 'mallory'),
	'P0002', NULL, 'A cannot request in B''s conversation');
SELECT throws_ok(format('SELECT agent.request_execution(%L, %L, NULL, %L, %L, %L)',
	'bf000000-0000-4000-8000-00000000000a', 'cf000000-0000-4000-8000-00000000000b', 'python', 'print(1)', 'mallory'),
	'P0002', NULL, 'A cannot request with B''s agent');
SELECT throws_ok(format('SELECT agent.approve(%L, %L, %L)', pg_temp.id('A', 'pending_approval'), 'alice',
	encode(sha256('print("something else")'::bytea), 'hex')),
	'22023', NULL, 'an approval with a hash other than the card''s is refused');

-- No direct writes to the API's tables.
SELECT throws_ok(format($$UPDATE agent.invocations SET state = 'approved' WHERE id = %L$$, pg_temp.id('A', 'pending_invocation')),
	'42501', NULL, 'the backend cannot approve by updating an invocation');
SELECT throws_ok(format($$UPDATE agent.approval_requests SET status = 'approved' WHERE id = %L$$, pg_temp.id('A', 'pending_approval')),
	'42501', NULL, 'the backend cannot approve by updating a card');
SELECT throws_ok($$INSERT INTO agent.invocations (org_id, workspace_id, agent_id, requested_by, language, code, code_sha256)
	VALUES ('af000000-0000-4000-8000-00000000000a', 'bf000000-0000-4000-8000-00000000000a',
			'cf000000-0000-4000-8000-00000000000a', 'x', 'python', 'print(1)', 'x')$$,
	'42501', NULL, 'the backend cannot insert an invocation directly');
SELECT throws_ok('DELETE FROM agent.invocations', '42501', NULL, 'the backend cannot delete invocations');
SELECT throws_ok($$INSERT INTO agent.audit_events (org_id, event_type, hash) VALUES ('af000000-0000-4000-8000-00000000000a', 'x', 'x')$$,
	'42501', NULL, 'the backend cannot insert audit events');
SELECT throws_ok($$UPDATE agent.audit_events SET actor = 'x'$$, '42501', NULL, 'the backend cannot update audit events');
SELECT throws_ok($$DELETE FROM agent.audit_events$$, '42501', NULL, 'the backend cannot delete audit events');
SELECT throws_ok($$TRUNCATE agent.audit_events$$, '42501', NULL, 'the backend cannot truncate audit events');
SELECT throws_ok($$INSERT INTO agent.credit_ledger (org_id, kind, amount) VALUES ('af000000-0000-4000-8000-00000000000a', 'grant', 1000)$$,
	'42501', NULL, 'the backend cannot grant itself credits through the ledger');
SELECT throws_ok($$UPDATE agent.credit_ledger SET amount = 0$$, '42501', NULL, 'the backend cannot update the ledger');
SELECT throws_ok($$DELETE FROM agent.credit_ledger$$, '42501', NULL, 'the backend cannot delete from the ledger');
SELECT throws_ok($$UPDATE agent.credit_balances SET balance = 1000000$$, '42501', NULL, 'the backend cannot set its balance');
SELECT throws_ok($$INSERT INTO agent.agent_tool_calls (invocation_id, org_id, workspace_id)
	VALUES ('00000000-0000-4000-8000-000000000000', 'af000000-0000-4000-8000-00000000000a', 'bf000000-0000-4000-8000-00000000000a')$$,
	'42501', NULL, 'the backend cannot write tool calls');
SELECT throws_ok($$INSERT INTO agent.tool_invocations (invocation_id, org_id, workspace_id, language, status)
	VALUES ('00000000-0000-4000-8000-000000000000', 'af000000-0000-4000-8000-00000000000a', 'bf000000-0000-4000-8000-00000000000a', 'python', 'succeeded')$$,
	'42501', NULL, 'the backend cannot write analytics rows');
SELECT throws_ok($$UPDATE agent.orgs SET plan = 'pro'$$, '42501', NULL, 'the backend cannot change its plan');
SELECT throws_ok($$UPDATE agent.plans SET code_execution = true$$, '42501', NULL, 'the backend cannot change plans');

-- Nor the owner's functions.
SELECT throws_ok($$SELECT agent._audit('af000000-0000-4000-8000-00000000000a', NULL, 'x', NULL, 'x', '{}')$$,
	'42501', NULL, 'the backend cannot append audit events itself');
SELECT throws_ok($$SELECT agent.grant_credits('af000000-0000-4000-8000-00000000000a', 1000, 'free money')$$,
	'42501', NULL, 'the backend cannot grant credits');
SELECT throws_ok(format('SELECT agent.charge_invocation(%L)', pg_temp.id('B', 'pending_invocation')),
	'42501', NULL, 'the backend cannot charge');
SELECT throws_ok(format('SELECT agent.refund_invocation(%L, %L)', pg_temp.id('A', 'approved_invocation'), 'x'),
	'42501', NULL, 'the backend cannot refund');
SELECT throws_ok('SELECT agent.expire_pending_approvals()', '42501', NULL, 'the backend cannot expire other tenants'' cards');

-- What the backend may change (through the API), it may change only in
-- its tenant; the org's policy is not its to change at all.
SELECT lives_ok($$SELECT agent.set_agent_file_upload('cf000000-0000-4000-8000-00000000000a', true, 'alice')$$,
	'the backend changes its own agent''s toggles through the API');
SELECT throws_ok($$SELECT agent.set_agent_code_execution('cf000000-0000-4000-8000-00000000000b', false, 'mallory')$$,
	'P0002', NULL, 'B''s agent does not exist for A''s backend');
SELECT throws_ok($$UPDATE agent.orgs SET personal_agents_code_execution = true$$,
	'42501', NULL, 'the backend cannot turn on the admin switch');
SELECT throws_ok($$INSERT INTO agent.agents (org_id, workspace_id, name, kind)
	VALUES ('af000000-0000-4000-8000-00000000000b', 'bf000000-0000-4000-8000-00000000000b', 'planted', 'shared')$$,
	'42501', NULL, 'the backend cannot plant an agent in B');
SELECT throws_ok($$UPDATE agent.conversations SET org_id = 'af000000-0000-4000-8000-00000000000b'$$,
	'42501', NULL, 'the backend cannot move a thread to B');

-- Without a tenant it sees nothing and can do nothing.
SELECT agent.set_tenant(NULL, NULL);
SELECT is((SELECT sum(n) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000a')), 0::numeric,
	'without a tenant the backend sees nothing');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.id('A', 'pending_approval'), 'alice'),
	'42501', NULL, 'without a tenant the backend cannot approve');

-- Acting for B, the same holds the other way round.
SELECT agent.set_tenant('af000000-0000-4000-8000-00000000000b', 'bf000000-0000-4000-8000-00000000000b');
SELECT is((SELECT count(*) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000a') WHERE n > 0),
	0::bigint, 'B sees no row of A');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.id('A', 'pending_approval'), 'mallory'),
	'P0002', NULL, 'B cannot approve A''s request');
RESET ROLE;

---- The auditor ----
SET ROLE agent_auditor;
SELECT is((SELECT count(*) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000a') WHERE n > 0),
	14::bigint, 'the auditor sees A in every table and view');
SELECT is((SELECT count(*) FROM pg_temp.visible('af000000-0000-4000-8000-00000000000b') WHERE n > 0),
	14::bigint, 'the auditor sees B in every table and view');
SELECT is((SELECT ok FROM agent.verify_audit_chain('af000000-0000-4000-8000-00000000000b')), true,
	'the auditor verifies any org''s chain');
SELECT throws_ok($$UPDATE agent.invocations SET state_reason = 'x'$$, '42501', NULL, 'the auditor cannot update');
SELECT throws_ok($$DELETE FROM agent.approval_requests$$, '42501', NULL, 'the auditor cannot delete');
SELECT throws_ok($$INSERT INTO agent.orgs (name) VALUES ('x')$$, '42501', NULL, 'the auditor cannot insert');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.id('A', 'pending_approval'), 'auditor'),
	'42501', NULL, 'the auditor cannot approve');
SELECT throws_ok(format('SELECT agent.request_execution(%L, %L, NULL, %L, %L, %L)',
	'bf000000-0000-4000-8000-00000000000a', 'cf000000-0000-4000-8000-00000000000a', 'python', 'print(1)', 'auditor'),
	'42501', NULL, 'the auditor cannot request executions');
SELECT throws_ok($$SELECT agent.grant_credits('af000000-0000-4000-8000-00000000000a', 1, 'x')$$,
	'42501', NULL, 'the auditor cannot grant credits');
RESET ROLE;

-- Nothing any of the attacks tried stuck.
SELECT results_eq(
	$$SELECT i.state, a.status FROM agent.invocations i JOIN agent.approval_requests a ON a.invocation_id = i.id
	   WHERE i.org_id IN ('af000000-0000-4000-8000-00000000000a', 'af000000-0000-4000-8000-00000000000b')
	   ORDER BY i.org_id, i.state$$,
	$$VALUES ('approved'::text, 'approved'::text), ('pending_approval', 'pending'),
			 ('approved', 'approved'), ('pending_approval', 'pending')$$,
	'every invocation and card is as it was');
SELECT results_eq(
	$$SELECT balance FROM agent.credit_balances
	   WHERE org_id IN ('af000000-0000-4000-8000-00000000000a', 'af000000-0000-4000-8000-00000000000b') ORDER BY org_id$$,
	$$VALUES (8::bigint), (8::bigint)$$, 'both balances are as they were');
SELECT is((SELECT code_execution_enabled FROM agent.agents WHERE id = 'cf000000-0000-4000-8000-00000000000b'),
	true, 'B''s agent is untouched');

SELECT * FROM finish();
ROLLBACK;
