-- A hostile backend (issue 11, items 6 and 9), attacked from its side:
-- agent_backend acting for org A tries to stall every tenant with table or
-- row locks, to pass the IAM checks it is subject to (flip an agent's kind,
-- turn on the org's admin switch), and to learn which ids exist in other
-- orgs by choosing primary keys.  It can do none of it; what it may change
-- (agents, threads and their toggles) it changes through functions that
-- make the ids, check the tenant and audit each change.  The admin switch
-- is agent_admin's.  (The lock a backend can still hold through the API
-- does not block the supervisor's inserts: test/isolation/specs/
-- hostile-backend-locks.spec.)
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('7e000000-0000-4000-8000-000000000001', 'tap-hostile-backend', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('7a000000-0000-4000-8000-00000000000a', 'Hostile A', 'pro'),
	('7a000000-0000-4000-8000-00000000000b', 'Victim B', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('7b000000-0000-4000-8000-00000000000a', '7a000000-0000-4000-8000-00000000000a', 'A'),
	('7b000000-0000-4000-8000-00000000000b', '7a000000-0000-4000-8000-00000000000b', 'B');
-- Credits, or requests are refused (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs WHERE id IN ('7a000000-0000-4000-8000-00000000000a', '7a000000-0000-4000-8000-00000000000b');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, owner, model_id, code_execution_enabled) VALUES
	('7c000000-0000-4000-8000-00000000000a', '7a000000-0000-4000-8000-00000000000a',
	 '7b000000-0000-4000-8000-00000000000a', 'A personal', 'personal', 'alice',
	 '7e000000-0000-4000-8000-000000000001', true),
	('7c000000-0000-4000-8000-00000000000b', '7a000000-0000-4000-8000-00000000000b',
	 '7b000000-0000-4000-8000-00000000000b', 'B agent', 'specialist', NULL,
	 '7e000000-0000-4000-8000-000000000001', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('7d000000-0000-4000-8000-00000000000a', '7a000000-0000-4000-8000-00000000000a',
	 '7b000000-0000-4000-8000-00000000000a', '7c000000-0000-4000-8000-00000000000a', true),
	('7d000000-0000-4000-8000-00000000000b', '7a000000-0000-4000-8000-00000000000b',
	 '7b000000-0000-4000-8000-00000000000b', '7c000000-0000-4000-8000-00000000000b', true);

-- The SQLSTATE and message of a statement, ids taken out (so another
-- tenant's id and an unknown id can be compared).
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
-- The tables of schema agent the current role can lock in a mode that
-- blocks writers (anything above ACCESS SHARE blocks someone).
CREATE FUNCTION pg_temp.lockable(mode text) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
	t	regclass;
	got	text[] := '{}';
BEGIN
	FOR t IN SELECT c.oid FROM pg_class c
			  WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'v')
			  ORDER BY c.relname LOOP
		BEGIN
			EXECUTE format('LOCK TABLE %s IN %s MODE NOWAIT', t, mode);
			got := got || t::text;
		EXCEPTION WHEN insufficient_privilege THEN
			NULL;
		END;
	END LOOP;
	RETURN got;
END
$$;

SELECT plan(46);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

---- The backend acting for A ----
SET ROLE agent_backend;
SELECT agent.set_tenant('7a000000-0000-4000-8000-00000000000a', '7b000000-0000-4000-8000-00000000000a');

-- Locks that would stall every tenant and the supervisor.
SELECT throws_ok($$LOCK TABLE agent.agents IN ACCESS EXCLUSIVE MODE$$,
	'42501', NULL, 'the backend cannot LOCK agents in ACCESS EXCLUSIVE mode');
SELECT throws_ok($$LOCK TABLE agent.conversations IN SHARE MODE$$,
	'42501', NULL, 'the backend cannot LOCK conversations against writers');
SELECT throws_ok($$LOCK TABLE agent.orgs IN ROW EXCLUSIVE MODE$$,
	'42501', NULL, 'the backend cannot LOCK orgs in ROW EXCLUSIVE mode');
SELECT is(pg_temp.lockable('ROW EXCLUSIVE'), '{}'::text[],
	'the backend can LOCK no table of schema agent in ROW EXCLUSIVE mode');
SELECT is(pg_temp.lockable('ACCESS EXCLUSIVE'), '{}'::text[],
	'the backend can LOCK no table of schema agent in ACCESS EXCLUSIVE mode');
SELECT throws_ok($$SELECT 1 FROM agent.agents FOR UPDATE$$,
	'42501', NULL, 'the backend cannot row-lock agents (FOR UPDATE)');
SELECT throws_ok($$SELECT 1 FROM agent.invocations FOR KEY SHARE$$,
	'42501', NULL, 'the backend cannot row-lock invocations (FOR KEY SHARE)');
SELECT throws_ok($$SELECT 1 FROM agent.conversations FOR NO KEY UPDATE$$,
	'42501', NULL, 'the backend cannot row-lock conversations (FOR NO KEY UPDATE)');

-- Passing its own IAM checks.
SELECT throws_ok($$UPDATE agent.agents SET kind = 'specialist' WHERE id = '7c000000-0000-4000-8000-00000000000a'$$,
	'42501', NULL, 'the backend cannot turn its personal agent into a specialist');
SELECT throws_ok($$UPDATE agent.orgs SET personal_agents_code_execution = true$$,
	'42501', NULL, 'the backend cannot turn on the admin switch by UPDATE');
SELECT throws_ok($$UPDATE agent.orgs SET require_distinct_approver = false$$,
	'42501', NULL, 'the backend cannot turn off the four-eyes policy by UPDATE');
SELECT throws_ok($$SELECT agent.set_personal_agents_code_execution(true, 'alice')$$,
	'42501', NULL, 'the backend cannot call the admin switch''s function');
SELECT throws_ok($$SELECT agent.set_require_distinct_approver(false, 'alice')$$,
	'42501', NULL, 'the backend cannot call the four-eyes policy''s function');
SELECT is((agent.request_execution('7b000000-0000-4000-8000-00000000000a', '7c000000-0000-4000-8000-00000000000a',
		   NULL, 'python', 'print(1)', 'alice')).reason,
	'personal_agents_disabled', 'so its personal agent stays under the admin switch');

-- Existence oracle: primary keys chosen by the caller.
SELECT throws_ok($$INSERT INTO agent.agents (id, org_id, workspace_id, name, kind)
	VALUES ('7c000000-0000-4000-8000-00000000000b', '7a000000-0000-4000-8000-00000000000a',
			'7b000000-0000-4000-8000-00000000000a', 'probe', 'shared')$$,
	'42501', NULL, 'INSERT of an agent with another org''s agent id is refused for lack of privilege (no 23505)');
SELECT throws_ok($$INSERT INTO agent.agents (id, org_id, workspace_id, name, kind)
	VALUES ('7c000000-0000-4000-8000-0000000000ff', '7a000000-0000-4000-8000-00000000000a',
			'7b000000-0000-4000-8000-00000000000a', 'probe', 'shared')$$,
	'42501', NULL, '... exactly like one with an unknown id');
SELECT throws_ok($$UPDATE agent.conversations SET id = '7d000000-0000-4000-8000-00000000000b'
	WHERE id = '7d000000-0000-4000-8000-00000000000a'$$,
	'42501', NULL, 'UPDATE conversations SET id = another org''s id is refused for lack of privilege');
SELECT throws_ok($$INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id)
	VALUES ('7d000000-0000-4000-8000-00000000000b', '7a000000-0000-4000-8000-00000000000a',
			'7b000000-0000-4000-8000-00000000000a', '7c000000-0000-4000-8000-00000000000a')$$,
	'42501', NULL, 'INSERT of a conversation with another org''s id is refused for lack of privilege');
SELECT is(pg_temp.error_of($$SELECT agent.create_conversation('7c000000-0000-4000-8000-00000000000b', 'alice')$$),
	'P0002: agent <id> does not exist', 'create_conversation with another org''s agent: "does not exist"');
SELECT is(pg_temp.error_of($$SELECT agent.create_conversation('7c000000-0000-4000-8000-0000000000ff', 'alice')$$),
	pg_temp.error_of($$SELECT agent.create_conversation('7c000000-0000-4000-8000-00000000000b', 'alice')$$),
	'... the same answer as for an unknown agent');
SELECT is(pg_temp.error_of($$SELECT agent.set_agent_code_execution('7c000000-0000-4000-8000-0000000000ff', false, 'alice')$$),
	pg_temp.error_of($$SELECT agent.set_agent_code_execution('7c000000-0000-4000-8000-00000000000b', false, 'alice')$$),
	'set_agent_code_execution: another org''s agent and an unknown one give the same answer');
SELECT is(pg_temp.error_of($$SELECT agent.set_conversation_code_execution('7d000000-0000-4000-8000-0000000000ff', false, 'alice')$$),
	pg_temp.error_of($$SELECT agent.set_conversation_code_execution('7d000000-0000-4000-8000-00000000000b', false, 'alice')$$),
	'set_conversation_code_execution: another org''s thread and an unknown one give the same answer');

-- What the backend may do, through the API: ids made inside, audited.
CREATE TEMP TABLE made (k text PRIMARY KEY, id uuid);
INSERT INTO made SELECT 'agent', agent.create_agent('Data analyst', 'specialist',
	'7e000000-0000-4000-8000-000000000001', 'alice');
INSERT INTO made SELECT 'conversation', agent.create_conversation((SELECT id FROM made WHERE k = 'agent'),
	'alice', 'Q3 numbers');
SELECT results_eq($$SELECT org_id, workspace_id, kind, owner, code_execution_enabled, file_upload_enabled
					  FROM agent.agents WHERE id = (SELECT id FROM made WHERE k = 'agent')$$,
	$$VALUES ('7a000000-0000-4000-8000-00000000000a'::uuid, '7b000000-0000-4000-8000-00000000000a'::uuid,
			  'specialist'::text, NULL::text, false, false)$$,
	'create_agent makes an agent in the current workspace, toggles off');
SELECT results_eq($$SELECT agent_id, title, created_by, code_execution_enabled FROM agent.conversations
					 WHERE id = (SELECT id FROM made WHERE k = 'conversation')$$,
	$$SELECT (SELECT id FROM made WHERE k = 'agent'), 'Q3 numbers'::text, 'alice'::text, false$$,
	'create_conversation makes a thread of that agent');
SELECT is(agent.set_agent_code_execution((SELECT id FROM made WHERE k = 'agent'), true, 'alice'), true,
	'set_agent_code_execution turns it on (true: changed)');
SELECT is(agent.set_agent_code_execution((SELECT id FROM made WHERE k = 'agent'), true, 'alice'), false,
	'... and setting it again changes nothing (false)');
SELECT is(agent.set_agent_file_upload((SELECT id FROM made WHERE k = 'agent'), true, 'bob'), true,
	'set_agent_file_upload turns uploads on');
SELECT is(agent.set_conversation_code_execution((SELECT id FROM made WHERE k = 'conversation'), true, 'alice'), true,
	'set_conversation_code_execution turns the thread''s toggle on');
SELECT is((agent.request_execution('7b000000-0000-4000-8000-00000000000a', (SELECT id FROM made WHERE k = 'agent'),
		   (SELECT id FROM made WHERE k = 'conversation'), 'python', 'print(2)', 'alice')).status,
	'pending_approval', 'an agent and thread made and enabled through the API can request');
SELECT results_eq($$SELECT event_type, actor, details - 'agent_id' - 'conversation_id'
					  FROM agent.audit_events
					 WHERE org_id = '7a000000-0000-4000-8000-00000000000a'
					   AND event_type IN ('agent.created', 'conversation.created', 'agent.changed', 'conversation.changed')
					 ORDER BY id$$,
	$$VALUES ('agent.created'::text, 'alice'::text,
			  '{"kind": "specialist", "name": "Data analyst", "owner": null, "model_id": "7e000000-0000-4000-8000-000000000001", "file_upload_enabled": false, "code_execution_enabled": false}'::jsonb),
			 ('conversation.created', 'alice', '{"title": "Q3 numbers", "code_execution_enabled": false}'),
			 ('agent.changed', 'alice', '{"to": true, "from": false, "setting": "code_execution_enabled"}'),
			 ('agent.changed', 'bob', '{"to": true, "from": false, "setting": "file_upload_enabled"}'),
			 ('conversation.changed', 'alice', '{"to": true, "from": false, "setting": "code_execution_enabled"}')$$,
	'one audit event per creation and per change, with the person who did it');
SELECT throws_ok($$SELECT agent.create_agent('x', 'root', NULL, 'alice')$$,
	'22023', NULL, 'an unknown agent kind is refused');
SELECT throws_ok($$SELECT agent.create_agent('x', 'personal', NULL, 'alice')$$,
	'22004', 'owner must not be null', 'a personal agent needs an owner');
SELECT throws_ok($$SELECT agent.create_agent('x', 'shared', NULL, 'alice', owner => 'alice')$$,
	'22023', NULL, 'only a personal agent has an owner');
SELECT throws_ok($$SELECT agent.create_agent('x', 'shared', '7e000000-0000-4000-8000-0000000000ff', 'alice')$$,
	'P0002', NULL, 'an unknown model is refused');
SELECT throws_ok($$SELECT agent.create_agent('x', 'shared', NULL, 'Supervisor')$$,
	'42939', NULL, 'the product''s own names cannot create agents');
RESET ROLE;

---- The org's admin, for A ----
SET ROLE agent_admin;
SELECT agent.set_tenant('7a000000-0000-4000-8000-00000000000a', NULL);
SELECT is((SELECT array_agg(id) FROM agent.orgs), ARRAY['7a000000-0000-4000-8000-00000000000a'::uuid],
	'the admin reads its own org''s row only');
SELECT is(agent.set_personal_agents_code_execution(true, 'root@a'), true,
	'the admin turns on code execution for personal agents');
SELECT throws_ok($$UPDATE agent.orgs SET plan = 'pro'$$, '42501', NULL, 'the admin cannot change the plan');
SELECT throws_ok($$UPDATE agent.orgs SET personal_agents_code_execution = false$$,
	'42501', NULL, 'the admin, too, changes policy only through the functions');
SELECT throws_ok($$SELECT agent.set_agent_code_execution('7c000000-0000-4000-8000-00000000000a', false, 'root@a')$$,
	'42501', NULL, 'the admin has no backend functions');
RESET ROLE;
SELECT results_eq($$SELECT workspace_id, actor, details FROM agent.audit_events
					 WHERE org_id = '7a000000-0000-4000-8000-00000000000a' AND event_type = 'org.policy_changed'$$,
	$$VALUES (NULL::uuid, 'root@a'::text,
			  '{"to": true, "from": false, "setting": "personal_agents_code_execution"}'::jsonb)$$,
	'the policy change is an org-wide audit event by the admin');

SET ROLE agent_backend;
SELECT agent.set_tenant('7a000000-0000-4000-8000-00000000000a', '7b000000-0000-4000-8000-00000000000a');
SELECT is((agent.request_execution('7b000000-0000-4000-8000-00000000000a', '7c000000-0000-4000-8000-00000000000a',
		   NULL, 'python', 'print(3)', 'alice')).status,
	'pending_approval', 'with the admin''s switch on, the personal agent may request');
RESET ROLE;

-- Nothing the attacks tried stuck.
SELECT results_eq($$SELECT kind, code_execution_enabled FROM agent.agents
					 WHERE id IN ('7c000000-0000-4000-8000-00000000000a', '7c000000-0000-4000-8000-00000000000b')
					 ORDER BY id$$,
	$$VALUES ('personal'::text, true), ('specialist', true)$$, 'both original agents are as they were');
SELECT is((SELECT count(*) FROM agent.agents WHERE id = '7c000000-0000-4000-8000-0000000000ff'), 0::bigint,
	'no probe agent was planted');
SELECT results_eq($$SELECT personal_agents_code_execution, require_distinct_approver FROM agent.orgs
					 WHERE id = '7a000000-0000-4000-8000-00000000000b'$$,
	$$VALUES (false, true)$$, 'B''s policy is untouched');
SELECT results_eq($$SELECT ok FROM agent.verify_audit_chain('7a000000-0000-4000-8000-00000000000a')$$,
	$$VALUES (true)$$, 'A''s audit chain verifies');

SELECT * FROM finish();
ROLLBACK;
