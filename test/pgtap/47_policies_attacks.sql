-- Approval policies from the attacker's side (issue 28): a hostile
-- backend cannot set, widen or forge a policy, cannot approve by naming
-- a policy, cannot reach the policy's internals, cannot reuse a
-- conversation's allowance in another conversation, agent, org or under
-- another version of the policy; a superuser cannot rewrite a policy's
-- history in place.  The rules themselves: 47_policies_rules.sql.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution) VALUES
	('a7e00000-0000-4000-8000-000000000001', 'tap-policies-attacks', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a7a00000-0000-4000-8000-000000000001', 'Policies victim', 'pro'),
	('a7a00000-0000-4000-8000-000000000002', 'Policies other', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('a7b00000-0000-4000-8000-000000000001', 'a7a00000-0000-4000-8000-000000000001', 'ws'),
	('a7b00000-0000-4000-8000-000000000002', 'a7a00000-0000-4000-8000-000000000002', 'ws');
SELECT agent.grant_credits(o, 1000, 'tap') FROM unnest(ARRAY['a7a00000-0000-4000-8000-000000000001',
	'a7a00000-0000-4000-8000-000000000002']::uuid[]) o;
-- a1, a2 in org 1; b1 in org 2.  c1, c2 of a1; c3 of a2; c4 of b1.
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('a7c00000-0000-4000-8000-000000000001', 'a7a00000-0000-4000-8000-000000000001',
	 'a7b00000-0000-4000-8000-000000000001', 'a1', 'specialist', 'a7e00000-0000-4000-8000-000000000001', true),
	('a7c00000-0000-4000-8000-000000000002', 'a7a00000-0000-4000-8000-000000000001',
	 'a7b00000-0000-4000-8000-000000000001', 'a2', 'specialist', 'a7e00000-0000-4000-8000-000000000001', true),
	('a7c00000-0000-4000-8000-000000000003', 'a7a00000-0000-4000-8000-000000000002',
	 'a7b00000-0000-4000-8000-000000000002', 'b1', 'specialist', 'a7e00000-0000-4000-8000-000000000001', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('a7d00000-0000-4000-8000-000000000001', 'a7a00000-0000-4000-8000-000000000001',
	 'a7b00000-0000-4000-8000-000000000001', 'a7c00000-0000-4000-8000-000000000001', true),
	('a7d00000-0000-4000-8000-000000000002', 'a7a00000-0000-4000-8000-000000000001',
	 'a7b00000-0000-4000-8000-000000000001', 'a7c00000-0000-4000-8000-000000000001', true),
	('a7d00000-0000-4000-8000-000000000003', 'a7a00000-0000-4000-8000-000000000001',
	 'a7b00000-0000-4000-8000-000000000001', 'a7c00000-0000-4000-8000-000000000002', true),
	('a7d00000-0000-4000-8000-000000000004', 'a7a00000-0000-4000-8000-000000000002',
	 'a7b00000-0000-4000-8000-000000000002', 'a7c00000-0000-4000-8000-000000000003', true);

CREATE TEMP TABLE req (k text PRIMARY KEY, invocation_id uuid, approval_id uuid, status text);
-- A request as the backend of the tenant set: agent n, conversation n.
CREATE FUNCTION pg_temp.request(k text, agent_n int, conv_n int, lang text, code text) RETURNS text
	LANGUAGE plpgsql AS $$
DECLARE
	r agent.execution_request;
BEGIN
	r := agent.request_execution(agent.current_workspace(),
								 format('a7c00000-0000-4000-8000-%s', lpad(agent_n::text, 12, '0'))::uuid,
								 format('a7d00000-0000-4000-8000-%s', lpad(conv_n::text, 12, '0'))::uuid,
								 lang, code, 'requester');
	INSERT INTO pg_temp.req VALUES (k, r.invocation_id, r.approval_id, r.status);
	RETURN r.status || coalesce(':' || r.reason, '') || '|'
		|| coalesce((SELECT a.person_reason FROM agent.approval_requests a WHERE a.id = r.approval_id), '-');
END
$$;
CREATE FUNCTION pg_temp.card(k text) RETURNS uuid LANGUAGE sql AS $$ SELECT approval_id FROM pg_temp.req WHERE req.k = card.k $$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS uuid LANGUAGE sql AS $$ SELECT invocation_id FROM pg_temp.req WHERE req.k = inv.k $$;
SELECT plan(29);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;

-- The org's admin: once per conversation.
SET ROLE agent_admin;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('once_per_conversation', 'admin@victim') AS p_once \gset
RESET ROLE;

-- ---- the backend cannot set, widen or forge a policy ----
SET ROLE agent_backend;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', 'a7b00000-0000-4000-8000-000000000001');
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'mallory')$$,
	'42501', NULL, 'the backend cannot set the org''s policy');
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'mallory', 'a7c00000-0000-4000-8000-000000000001')$$,
	'42501', NULL, '... nor an agent''s');
SELECT throws_ok($$SELECT agent.remove_approval_policy('mallory', 'a7c00000-0000-4000-8000-000000000001')$$,
	'42501', NULL, '... nor remove one');
SELECT throws_ok($$INSERT INTO agent.approval_policies (org_id, mode, set_by)
				   VALUES ('a7a00000-0000-4000-8000-000000000001', 'automatic', 'mallory')$$,
	'42501', NULL, '... nor write a policy row');
SELECT throws_ok(format($$UPDATE agent.approval_policies SET mode = 'automatic' WHERE id = %L$$, :'p_once'),
	'42501', NULL, '... nor widen the current one in place');
SELECT throws_ok($$INSERT INTO agent.conversation_allowances (org_id, workspace_id, agent_id, conversation_id, approval_id, policy_id, language, granted_by)
				   SELECT 'a7a00000-0000-4000-8000-000000000001', 'a7b00000-0000-4000-8000-000000000001',
						  'a7c00000-0000-4000-8000-000000000001', 'a7d00000-0000-4000-8000-000000000001',
						  gen_random_uuid(), id, 'python', 'mallory' FROM agent.approval_policies LIMIT 1$$,
	'42501', NULL, '... nor forge an allowance');
SELECT is(pg_temp.request('first', 1, 1, 'python', 'print(1)'), 'pending_approval|first_run',
	'(the first run of c1 waits for a person)');
SELECT throws_ok(format($$SELECT agent._approve_by_policy(%L, %L, '{}')$$,
						pg_temp.inv('first'), pg_temp.card('first')),
	'42501', NULL, 'the backend cannot call the policy''s approval itself');
SELECT throws_ok(format($$SELECT agent._allow_further_runs(%L, %L, 'mallory')$$, pg_temp.inv('first'), pg_temp.card('first')),
	'42501', NULL, '... nor give an allowance without approving');
SELECT throws_ok(format($$UPDATE agent.approval_requests SET approval_policy_id = %L WHERE id = %L$$,
						:'p_once', pg_temp.card('first')),
	'42501', NULL, '... nor mark a card as approved by a policy');
SELECT throws_ok(format($$SELECT agent.approve(%L, 'policy')$$, pg_temp.card('first')),
	'42939', NULL, 'the backend cannot approve by naming the policy');
SELECT throws_ok(format($$SELECT agent.approve(%L, ' Policy ')$$, pg_temp.card('first')),
	'42939', NULL, '... under any spelling');
SELECT is((SELECT status FROM agent.approval_requests WHERE id = pg_temp.card('first')), 'pending',
	'the card is still pending');

-- ---- an allowance stays where it was given ----
SELECT agent.approve(pg_temp.card('first'), 'bob', NULL, true) IS NOT NULL AS approved;
SELECT is(pg_temp.request('c1', 1, 1, 'python', 'print(2)'), 'approved|-', '(c1''s further python runs are approved)');
SELECT is(pg_temp.request('c2', 1, 2, 'python', 'print(2)'), 'pending_approval|first_run',
	'the allowance of c1 does not hold in c2 (same agent)');
SELECT is(pg_temp.request('c3', 2, 3, 'python', 'print(2)'), 'pending_approval|first_run',
	'... nor for another agent''s conversation');
SELECT throws_ok($$SELECT pg_temp.request('mix', 2, 1, 'python', 'print(2)')$$,
	'P0002', NULL, '... nor by naming c1 with another agent');
SELECT is(pg_temp.request('lang', 1, 1, 'shell', 'echo 2'), 'pending_approval|allowance_language',
	'... nor for another language');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000002', 'a7b00000-0000-4000-8000-000000000002');
SELECT throws_ok($$SELECT pg_temp.request('org', 3, 1, 'python', 'print(2)')$$,
	'P0002', NULL, 'another org''s backend cannot name c1');
SELECT throws_ok($$SELECT * FROM agent.approval_policy_of('a7c00000-0000-4000-8000-000000000001', 'a7d00000-0000-4000-8000-000000000001')$$,
	'P0002', NULL, '... nor ask what c1''s runs would get');
SELECT throws_ok($$SELECT agent.revoke_conversation_allowance('a7d00000-0000-4000-8000-000000000001', 'eve')$$,
	'P0002', NULL, '... nor revoke its allowance');
SELECT is((SELECT count(*) FROM agent.conversation_allowances), 0::bigint, '... nor see it');
RESET ROLE;

-- ---- a new version of the policy drops the allowances of the old one ----
SET ROLE agent_admin;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('once_per_conversation', 'admin@victim', languages => '{python}') AS p_once2 \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', 'a7b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('new_version', 1, 1, 'python', 'print(3)'), 'pending_approval|first_run',
	'an allowance given under the replaced policy no longer approves');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('every_run', 'admin@victim', 'a7c00000-0000-4000-8000-000000000001') AS p_a1 \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('a7a00000-0000-4000-8000-000000000001', 'a7b00000-0000-4000-8000-000000000001');
SELECT throws_ok(format($$SELECT agent.approve(%L, 'bob', NULL, true)$$, pg_temp.card('c2')),
	'42501', 'the approval policy of this agent does not let an approver allow further runs',
	'an approver cannot allow further runs where the agent''s policy is every_run');
SELECT is((SELECT status FROM agent.approval_requests WHERE id = pg_temp.card('c2')), 'pending',
	'... and the refused approval left the card pending');
SELECT is(agent.revoke_conversation_allowance('a7d00000-0000-4000-8000-000000000001', 'carol'), 1,
	'(the backend revokes c1''s allowance)');
RESET ROLE;

-- ---- the owner cannot rewrite history in place ----
SELECT throws_ok(format($$UPDATE agent.approval_policies SET mode = 'automatic' WHERE id = %L$$, :'p_once2'),
	'55000', NULL, 'a superuser cannot change a policy in place (it is history)');
SELECT throws_ok($$UPDATE agent.conversation_allowances SET revoked_at = NULL, revoked_by = NULL
				   WHERE conversation_id = 'a7d00000-0000-4000-8000-000000000001'$$,
	'55000', NULL, '... nor bring a revoked allowance back');
SELECT throws_ok($$UPDATE agent.conversation_allowances SET language = 'shell'
				   WHERE conversation_id = 'a7d00000-0000-4000-8000-000000000001'$$,
	'55000', NULL, '... nor change what it covers');

SELECT * FROM finish();
ROLLBACK;
