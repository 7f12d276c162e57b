-- Approval policies (issue 28; docs/control-plane.md, "Approval
-- policies"): the admin's modes and an agent's narrowing, what a request
-- gets under each, the approval a policy makes (a real approval row bound
-- to the code's sha256 and the egress hash, its approval.auto event), a
-- conversation's allowance and its limits, revocation, and that a policy
-- never approves what the org's rules refuse.  The attacks of a hostile
-- backend are 47_policies_attacks.sql.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution) VALUES
	('47e00000-0000-4000-8000-000000000001', 'tap-policies', true),
	('47e00000-0000-4000-8000-000000000002', 'tap-policies-nocode', false);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('47a00000-0000-4000-8000-000000000001', 'Policies', 'pro'),
	('47a00000-0000-4000-8000-000000000002', 'Policies broke', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('47b00000-0000-4000-8000-000000000001', '47a00000-0000-4000-8000-000000000001', 'ws'),
	('47b00000-0000-4000-8000-000000000002', '47a00000-0000-4000-8000-000000000002', 'ws');
SELECT agent.grant_credits('47a00000-0000-4000-8000-000000000001', 1000, 'tap') AS funded;
-- a1: automatic under the org's policy; a2: narrowed to every_run;
-- a3: code execution off; a4: a model without code execution;
-- b1: an org without credits.
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('47c00000-0000-4000-8000-000000000001', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', 'a1', 'specialist', '47e00000-0000-4000-8000-000000000001', true),
	('47c00000-0000-4000-8000-000000000002', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', 'a2', 'specialist', '47e00000-0000-4000-8000-000000000001', true),
	('47c00000-0000-4000-8000-000000000003', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', 'a3', 'specialist', '47e00000-0000-4000-8000-000000000001', false),
	('47c00000-0000-4000-8000-000000000004', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', 'a4', 'specialist', '47e00000-0000-4000-8000-000000000002', true),
	('47c00000-0000-4000-8000-000000000005', '47a00000-0000-4000-8000-000000000002',
	 '47b00000-0000-4000-8000-000000000002', 'b1', 'specialist', '47e00000-0000-4000-8000-000000000001', true);
-- c1, c2: conversations of a1; c3 of a2.
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('47d00000-0000-4000-8000-000000000001', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', '47c00000-0000-4000-8000-000000000001', true),
	('47d00000-0000-4000-8000-000000000002', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', '47c00000-0000-4000-8000-000000000001', true),
	('47d00000-0000-4000-8000-000000000003', '47a00000-0000-4000-8000-000000000001',
	 '47b00000-0000-4000-8000-000000000001', '47c00000-0000-4000-8000-000000000002', true);

-- A request as the backend: its result, kept by key.
CREATE TEMP TABLE req (k text PRIMARY KEY, invocation_id uuid, approval_id uuid, status text, reason text);
CREATE FUNCTION pg_temp.request(k text, agent_n int, conv_n int, lang text, code text,
								who text DEFAULT 'requester', wall int DEFAULT NULL) RETURNS text
	LANGUAGE plpgsql AS $$
DECLARE
	r agent.execution_request;
BEGIN
	r := agent.request_execution(agent.current_workspace(),
								 format('47c00000-0000-4000-8000-%s', lpad(agent_n::text, 12, '0'))::uuid,
								 CASE WHEN conv_n IS NOT NULL
									  THEN format('47d00000-0000-4000-8000-%s', lpad(conv_n::text, 12, '0'))::uuid END,
								 lang, code, who, NULL, NULL, wall);
	INSERT INTO pg_temp.req VALUES (k, r.invocation_id, r.approval_id, r.status, r.reason);
	RETURN r.status || coalesce(':' || r.reason, '');
END
$$;
CREATE FUNCTION pg_temp.card(k text) RETURNS uuid LANGUAGE sql AS $$ SELECT approval_id FROM pg_temp.req WHERE req.k = card.k $$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS uuid LANGUAGE sql AS $$ SELECT invocation_id FROM pg_temp.req WHERE req.k = inv.k $$;
-- What the card of a request says: "status|decided_by|policy?|allowance?|person_needed".
CREATE FUNCTION pg_temp.says(k text) RETURNS text LANGUAGE sql AS $$
	SELECT concat_ws('|', a.status, coalesce(a.decided_by, '-'),
					 (a.approval_policy_id IS NOT NULL)::text, (a.allowance_id IS NOT NULL)::text,
					 coalesce(a.person_reason, '-'))
	  FROM agent.approval_requests a WHERE a.id = pg_temp.card(k)
$$;
SELECT plan(52);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;

-- ---- the admin sets the policy ----
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('once_per_conversation', 'admin@org') AS p_once \gset
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'admin@org', '47c00000-0000-4000-8000-000000000001')$$,
	'42501', 'an agent''s approval policy cannot be wider than its organization''s',
	'an agent''s narrowing cannot be wider than its org''s mode');
SELECT throws_ok($$SELECT agent.set_approval_policy('always', 'admin@org')$$,
	'22023', 'invalid approval mode "always"', 'a mode that does not exist is refused');
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'admin@org', languages => '{python,cobol}')$$,
	'22023', 'invalid languages for an approval policy', 'a language that does not exist is refused');
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'admin@org', max_wall_time_s => 0)$$,
	'22023', NULL, 'a wall time limit out of range is refused');
SELECT throws_ok($$SELECT agent.set_approval_policy('automatic', 'policy')$$,
	'42939', NULL, 'the admin cannot act under the name a policy decides with');
SELECT agent.set_approval_policy('automatic', 'admin@org') AS p_auto \gset
SELECT is(agent.set_approval_policy('automatic', 'admin@org'), :'p_auto'::uuid,
	'the same policy again changes nothing (same id)');
SELECT agent.set_approval_policy('every_run', 'admin@org', '47c00000-0000-4000-8000-000000000002') AS p_a2 \gset
SELECT is((SELECT string_agg(mode || ':' || (ended_at IS NULL) || ':' || coalesce(agent_id::text, 'org'), ',' ORDER BY (ended_at IS NULL), agent_id NULLS FIRST)
			 FROM agent.approval_policies WHERE org_id = '47a00000-0000-4000-8000-000000000001'),
	'once_per_conversation:false:org,automatic:true:org,every_run:true:47c00000-0000-4000-8000-000000000002',
	'policies are history: the replaced one ended, the org''s and the agent''s are current');
RESET ROLE;
SELECT is((SELECT string_agg(event_type || ':' || actor || ':' || (details ->> 'mode'), ',' ORDER BY id)
			 FROM agent.audit_events WHERE org_id = '47a00000-0000-4000-8000-000000000001'
			  AND event_type LIKE 'approval_policy.%'),
	'approval_policy.set:admin@org:once_per_conversation,approval_policy.set:admin@org:automatic,approval_policy.set:admin@org:every_run',
	'each change is audited, with the admin who made it');

-- ---- what a request gets ----
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is((SELECT mode || '|' || automatic || '|' || (policy_id = :'p_auto') FROM agent.approval_policy_of('47c00000-0000-4000-8000-000000000001')),
	'automatic|true|true', 'approval_policy_of: a request of a1 would be approved by the org''s policy');
SELECT is((SELECT mode || '|' || automatic || '|' || person_needed FROM agent.approval_policy_of('47c00000-0000-4000-8000-000000000002')),
	'every_run|false|the agent''s approval policy asks a person for every run',
	'... one of a2 (narrowed) would need a person, and it says why');
SELECT is(pg_temp.request('auto1', 1, 1, 'python', 'print(6 * 7)'), 'approved',
	'a request of a1 is approved in its own transaction');
SELECT is(pg_temp.says('auto1'), 'approved|policy|true|false|-', 'its card: approved by the policy, no person needed');
SELECT is((SELECT a.approved_code_sha256 = i.code_sha256 AND a.code_sha256 = agent.code_sha256('print(6 * 7)')
				  AND a.approved_egress_sha256 IS NOT DISTINCT FROM i.egress_sha256
				  AND a.approval_policy_id = :'p_auto' AND i.state = 'approved' AND i.approved_at IS NOT NULL
			 FROM agent.approval_requests a JOIN agent.invocations i ON i.id = a.invocation_id
			WHERE a.id = pg_temp.card('auto1')),
	true, 'the approval row binds the code''s sha256 and the egress hash; the invocation is approved');
SELECT is((SELECT string_agg(e.event_type || ':' || e.actor, ',' ORDER BY e.id) FROM agent.audit_events e
			WHERE e.invocation_id = pg_temp.inv('auto1')),
	'capability.invoke_allowed:requester,approval.auto:policy',
	'the request''s event, then approval.auto by the policy, in the same transaction');
SELECT is((SELECT (e.details ->> 'code_sha256') = agent.code_sha256('print(6 * 7)')
				  AND (e.details ->> 'policy_id')::uuid = :'p_auto' AND e.details ->> 'policy_set_by' = 'admin@org'
				  AND e.details ->> 'mode' = 'automatic' AND (e.details ->> 'approval_id')::uuid = pg_temp.card('auto1')
				  AND e.details ? 'egress_sha256' = (i.egress_sha256 IS NOT NULL)
			 FROM agent.audit_events e JOIN agent.invocations i ON i.id = e.invocation_id
			WHERE e.invocation_id = pg_temp.inv('auto1') AND e.event_type = 'approval.auto'),
	true, 'approval.auto names the code''s hash, the policy, who set it, the mode and the card');
RESET ROLE;
SELECT is(agent.approved_code_matches(pg_temp.inv('auto1')), true, 'the claim''s check of the approved code holds (the owner''s)');
SET ROLE agent_backend;
SELECT is((SELECT approved_by_policy LIKE 'policy ' || :'p_auto' || ' (automatic), set by admin@org at %' AND person_needed IS NULL
			 FROM agent.approval_card(pg_temp.card('auto1'))),
	true, 'the card says which policy approved it, who set it and when');
SELECT is(pg_temp.request('narrow1', 2, 3, 'python', 'print(1)'), 'pending_approval', 'a request of a2 waits for a person');
SELECT is((SELECT person_needed FROM agent.pending_approvals() WHERE approval_id = pg_temp.card('narrow1')),
	'the agent''s approval policy asks a person for every run', 'pending_approvals() says why a person is needed');
RESET ROLE;

-- ---- a policy never approves what the org's rules refuse ----
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('toggle', 3, NULL, 'python', 'print(2)'), 'denied:agent_code_execution_disabled',
	'automatic: an agent with code execution off is still refused');
SELECT is(pg_temp.request('model', 4, NULL, 'python', 'print(2)'), 'denied:model_lacks_code_execution',
	'... a model without code execution is still refused');
RESET ROLE;
SELECT agent.set_org_plan('47a00000-0000-4000-8000-000000000001', 'free');
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('plan', 1, NULL, 'python', 'print(2)'), 'denied:plan_excludes_code_execution',
	'... a plan without code execution is still refused');
RESET ROLE;
SELECT agent.set_org_plan('47a00000-0000-4000-8000-000000000001', 'pro');
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000002', NULL);
SELECT ok(agent.set_approval_policy('automatic', 'admin@b') IS NOT NULL, '(org b: automatic, no credits)');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000002', '47b00000-0000-4000-8000-000000000002');
SELECT is(pg_temp.request('credits', 5, NULL, 'python', 'print(2)'), 'denied:insufficient_credits',
	'... an org whose balance cannot cover the run is still refused');
SELECT is((SELECT count(*) FROM agent.audit_events WHERE event_type = 'approval.auto'
			  AND invocation_id IN (SELECT invocation_id FROM pg_temp.req WHERE status = 'denied')),
	0::bigint, 'no refused request has an approval.auto event');
RESET ROLE;

-- ---- conditions: language, wall time, network ----
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('automatic', 'admin@org', languages => '{python}', max_wall_time_s => 10) AS p_cond \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('lang', 1, NULL, 'shell', 'echo hi') || '|' || pg_temp.says('lang'),
	'pending_approval|pending|-|false|false|language', 'a language the policy does not list waits for a person');
SELECT is(pg_temp.request('wall', 1, NULL, 'python', 'print(3)', wall => 20) || '|' || pg_temp.says('wall'),
	'pending_approval|pending|-|false|false|wall_time', 'a wall time over the policy''s waits for a person');
SELECT is(pg_temp.request('cond_ok', 1, NULL, 'python', 'print(3)', wall => 10), 'approved',
	'a run within every condition is approved');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.add_egress_rule('api.example.com', '{443}', 'admin@org') AS rule1 \gset
SELECT agent.set_approval_policy('automatic', 'admin@org', no_network => true) AS p_nonet \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('net', 1, NULL, 'python', 'print(4)') || '|' || pg_temp.says('net'),
	'pending_approval|pending|-|false|false|network', 'no_network: a run that may reach a host waits for a person');
RESET ROLE;

-- ---- once per conversation ----
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.remove_egress_rule(:'rule1', 'admin@org');
SELECT agent.set_approval_policy('once_per_conversation', 'admin@org') AS p_once2 \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('first', 1, 1, 'python', 'print(5)') || '|' || pg_temp.says('first'),
	'pending_approval|pending|-|false|false|first_run', 'once per conversation: the first run waits for a person');
SELECT throws_ok(format('SELECT agent.approve(%L, %L, NULL, true)', pg_temp.card('first'), 'requester'),
	'42501', NULL, 'four eyes govern the person''s decision: the requester cannot allow further runs herself');
SELECT agent.approve(pg_temp.card('first'), 'bob', agent.code_sha256('print(5)'), true);
SELECT is((SELECT granted_by || '|' || language || '|' || (policy_id = :'p_once2') || '|' || (revoked_at IS NULL)
			 FROM agent.conversation_allowances WHERE approval_id = pg_temp.card('first')),
	'bob|python|true|true', 'the approver allowed further runs: an allowance for python under the current policy');
SELECT is((SELECT (details ->> 'allowance_id') IS NOT NULL FROM agent.audit_events
			WHERE invocation_id = pg_temp.inv('first') AND event_type = 'approval.approved'),
	true, 'the approval''s event names the allowance');
SELECT is(pg_temp.request('second', 1, 1, 'python', 'print(6)') || '|' || pg_temp.says('second'),
	'approved|approved|policy|true|true|-', 'a further run of the conversation is approved by that decision');
SELECT is((SELECT approved_by_policy LIKE '%; further runs allowed here by bob with approval ' || pg_temp.card('first')
			 FROM agent.approval_card(pg_temp.card('second'))),
	true, 'its card names the person who allowed it and the approval');
SELECT is((SELECT automatic::text || '|' || allowance_granted_by FROM agent.approval_policy_of(
			'47c00000-0000-4000-8000-000000000001', '47d00000-0000-4000-8000-000000000001', 'python')),
	'true|bob', 'approval_policy_of: the conversation''s runs in python would be approved, by bob''s allowance');
SELECT is(pg_temp.request('node', 1, 1, 'node', 'console.log(1)') || '|' || pg_temp.says('node'),
	'pending_approval|pending|-|false|false|allowance_language', 'a run in another language waits for a person');
SELECT is(pg_temp.request('other_conv', 1, 2, 'python', 'print(6)') || '|' || pg_temp.says('other_conv'),
	'pending_approval|pending|-|false|false|first_run', 'a run in another conversation of the agent waits for a person');
SELECT is(pg_temp.request('no_conv', 1, NULL, 'python', 'print(6)') || '|' || pg_temp.says('no_conv'),
	'pending_approval|pending|-|false|false|no_conversation', 'a run outside a conversation waits for a person');
RESET ROLE;
-- The admin widens the org's reach: beyond what bob saw.
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.add_egress_rule('api.example.com', '{443}', 'admin@org') AS rule2 \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('wider', 1, 1, 'python', 'print(7)') || '|' || pg_temp.says('wider'),
	'pending_approval|pending|-|false|false|allowance_reach', 'a run that may reach more than bob saw waits for a person');
SELECT is((SELECT person_needed FROM agent.approval_card(pg_temp.card('wider'))),
	'the run may reach more than the person who allowed further runs here saw', '... and its card says so');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.remove_egress_rule(:'rule2', 'admin@org');
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('back', 1, 1, 'python', 'print(8)'), 'approved', 'within the reach bob saw again: approved');

-- ---- revocation ----
SELECT is(agent.revoke_conversation_allowance('47d00000-0000-4000-8000-000000000001', 'carol'), 1,
	'the backend revokes the conversation''s allowance');
SELECT is(pg_temp.request('after_revoke', 1, 1, 'python', 'print(9)') || '|' || pg_temp.says('after_revoke'),
	'pending_approval|pending|-|false|false|first_run', 'after the revocation a run waits for a person at once');
SELECT is((SELECT actor || '|' || (details -> 'allowance_ids' ->> 0) FROM agent.audit_events
			WHERE org_id = '47a00000-0000-4000-8000-000000000001' AND event_type = 'approval.allowance_revoked'),
	'carol|' || (SELECT id FROM agent.conversation_allowances WHERE approval_id = pg_temp.card('first')),
	'the revocation is audited with the allowance it ended');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('automatic', 'admin@org') AS p_auto2 \gset
SELECT is(agent.remove_approval_policy('admin@org'), true, 'the admin removes the org''s policy');
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('removed', 1, 1, 'python', 'print(10)') || '|' || pg_temp.says('removed'),
	'pending_approval|pending|-|false|false|every_run', 'after the removal every run waits for a person');
SELECT is((SELECT string_agg(k || ':' || a.status, ',' ORDER BY k) FROM agent.approval_requests a JOIN pg_temp.req r ON r.approval_id = a.id
			WHERE r.k IN ('narrow1', 'lang', 'wider', 'after_revoke')),
	'after_revoke:pending,lang:pending,narrow1:pending,wider:pending',
	'cards pending before stay pending');
SELECT is((SELECT string_agg(k || ':' || a.status, ',' ORDER BY k) FROM agent.approval_requests a JOIN pg_temp.req r ON r.approval_id = a.id
			WHERE r.k IN ('auto1', 'second', 'back')),
	'auto1:approved,back:approved,second:approved', 'runs a policy approved stay approved');
RESET ROLE;

-- ---- the isolation class is bound as a person's approval binds it ----
SELECT agent.set_isolation('gvisor', org => '47a00000-0000-4000-8000-000000000001');
SET ROLE agent_admin;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', NULL);
SELECT agent.set_approval_policy('automatic', 'admin@org') AS p_auto3 \gset
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT is(pg_temp.request('gvisor', 1, NULL, 'python', 'print(11)'), 'approved', '(a gvisor run, approved by the policy)');
RESET ROLE;
SELECT is((SELECT a.approved_isolation || '|' || i.isolation || '|' || (e.details ->> 'isolation')
			 FROM agent.approval_requests a JOIN agent.invocations i ON i.id = a.invocation_id
			 JOIN agent.audit_events e ON e.invocation_id = i.id AND e.event_type = 'approval.auto'
			WHERE a.id = pg_temp.card('gvisor')),
	'gvisor|gvisor|gvisor', 'an automatic approval binds the run''s isolation class, and its event names it');

-- The egress fence (a fault injected, rolled back with the file): should
-- the reach the policy judged not be the one the run froze, which cannot
-- happen while the request holds the org's audit head, the request fails
-- (before, the card was left pending for a person and the invocation
-- approved by a second write).
ALTER FUNCTION agent._approval_decision(uuid, uuid, uuid, text, text, text, integer, integer, uuid, text)
	RENAME TO _approval_decision_real;
CREATE FUNCTION agent._approval_decision(org uuid, agent_id uuid, conversation_id uuid,
	language text, image_name text, image_digest text, wall_time_s integer, memory_mb integer,
	approval_id uuid, code_sha256 text,
	OUT mode text, OUT policy_id uuid, OUT allowance_id uuid, OUT egress_sha256 text,
	OUT person_reason text, OUT event jsonb)
	LANGUAGE sql
	AS $$ SELECT d.mode, d.policy_id, d.allowance_id, 'judged-another-reach', d.person_reason, d.event
			FROM agent._approval_decision_real($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) d $$;
SET ROLE agent_backend;
SELECT agent.set_tenant('47a00000-0000-4000-8000-000000000001', '47b00000-0000-4000-8000-000000000001');
SELECT throws_ok($$SELECT pg_temp.request('fence', 1, NULL, 'python', 'print(12)')$$,
	'40001', 'the network reach of agent 47c00000-0000-4000-8000-000000000001 changed while its run was requested',
	'a policy''s approval on a reach other than the run froze fails the request (40001)');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
