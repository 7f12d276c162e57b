-- The request path's calls, as rewritten for cost (issue 13): agent.approve()
-- records its event and wakes the runners in one query; request_execution()
-- checks its text arguments in one query and announces the card itself; the
-- egress trigger (in C) skips the policy of an org without rules;
-- agent.wait() keeps its plan.  Each rule of the decision is
-- tried from the attacker's side (a backend that names another tenant's
-- card, its own request, a hash it was not shown; an owner who tampers
-- with the code behind a card) and the decision is checked row by row.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('43e00000-0000-4000-8000-000000000001', 'tap-request-path', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('43a00000-0000-4000-8000-000000000001', 'Request path', 'pro'),
	('43a00000-0000-4000-8000-000000000002', 'Request path, egress', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('43b00000-0000-4000-8000-000000000001', '43a00000-0000-4000-8000-000000000001', 'ws'),
	('43b00000-0000-4000-8000-000000000002', '43a00000-0000-4000-8000-000000000002', 'ws');
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs
 WHERE id IN ('43a00000-0000-4000-8000-000000000001', '43a00000-0000-4000-8000-000000000002');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('43c00000-0000-4000-8000-000000000001', '43a00000-0000-4000-8000-000000000001',
	 '43b00000-0000-4000-8000-000000000001', 'agent', 'specialist', '43e00000-0000-4000-8000-000000000001', true),
	('43c00000-0000-4000-8000-000000000002', '43a00000-0000-4000-8000-000000000002',
	 '43b00000-0000-4000-8000-000000000002', 'agent', 'specialist', '43e00000-0000-4000-8000-000000000001', true);
INSERT INTO agent.egress_rules (org_id, host, ports, created_by)
	VALUES ('43a00000-0000-4000-8000-000000000002', 'api.example.com', '{443}', 'tap');

CREATE TEMP TABLE req (k int PRIMARY KEY, invocation_id uuid, approval_id uuid);
CREATE FUNCTION pg_temp.request(k int, org int, who text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
	r agent.execution_request;
BEGIN
	PERFORM agent.set_tenant(format('43a00000-0000-4000-8000-00000000000%s', org)::uuid,
							 format('43b00000-0000-4000-8000-00000000000%s', org)::uuid);
	r := agent.request_execution(format('43b00000-0000-4000-8000-00000000000%s', org)::uuid,
								 format('43c00000-0000-4000-8000-00000000000%s', org)::uuid,
								 NULL, 'shell', format('echo %s', k), who);
	INSERT INTO pg_temp.req VALUES (k, r.invocation_id, r.approval_id);
	RETURN r.approval_id;
END
$$;
CREATE FUNCTION pg_temp.card(k int) RETURNS uuid LANGUAGE sql AS $$ SELECT approval_id FROM pg_temp.req WHERE req.k = card.k $$;
CREATE FUNCTION pg_temp.inv(k int) RETURNS uuid LANGUAGE sql AS $$ SELECT invocation_id FROM pg_temp.req WHERE req.k = inv.k $$;
CREATE FUNCTION pg_temp.tenant(org int) RETURNS void LANGUAGE sql AS $$
	SELECT agent.set_tenant(format('43a00000-0000-4000-8000-00000000000%s', org)::uuid,
							format('43b00000-0000-4000-8000-00000000000%s', org)::uuid) $$;

SELECT plan(50);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

SET ROLE agent_backend;
SELECT pg_temp.request(k, 1, 'alice') FROM generate_series(1, 8) k;
SELECT pg_temp.request(9, 2, 'alice');

---- approve, when every rule holds: the card, the invocation, the event ----
SELECT pg_temp.tenant(1);
SELECT is(agent.approve(pg_temp.card(1), 'bob', agent.code_sha256('echo 1')), pg_temp.inv(1),
	'approve returns the invocation');
RESET ROLE;
SELECT is((SELECT (status, decided_by, approved_code_sha256, approved_egress_sha256, decided_at = now())::text
			 FROM agent.approval_requests WHERE id = pg_temp.card(1)),
		  ROW('approved', 'bob', agent.code_sha256('echo 1'), NULL::text, true)::text,
		  'the card is approved by bob, bound to the code''s hash, no egress hash for an org without rules');
SELECT is((SELECT (state, approved_at = now(), egress_policy IS NULL, egress_sha256 IS NULL)::text
			 FROM agent.invocations WHERE id = pg_temp.inv(1)),
		  ROW('approved', true, true, true)::text, 'the invocation is approved');
SELECT is((SELECT e.details FROM agent.audit_events e
			WHERE e.invocation_id = pg_temp.inv(1) AND e.event_type = 'approval.approved'),
		  jsonb_build_object('approval_id', pg_temp.card(1), 'code_sha256', agent.code_sha256('echo 1')),
		  'approval.approved names the card and the code hash (no egress_sha256 key without a policy)');
SELECT is((SELECT e.actor FROM agent.audit_events e
			WHERE e.invocation_id = pg_temp.inv(1) AND e.event_type = 'approval.approved'),
		  'bob', '... and bob as its actor');

-- An org with egress rules: the approval is bound to the policy's hash.
SET ROLE agent_backend;
SELECT pg_temp.tenant(2);
SELECT is(agent.approve(pg_temp.card(9), 'bob'), pg_temp.inv(9), 'approve without a hash argument');
RESET ROLE;
SELECT isnt((SELECT egress_sha256 FROM agent.invocations WHERE id = pg_temp.inv(9)), NULL,
	'the invocation of an org with rules has an egress hash');
SELECT is((SELECT approved_egress_sha256 FROM agent.approval_requests WHERE id = pg_temp.card(9)),
		  (SELECT egress_sha256 FROM agent.invocations WHERE id = pg_temp.inv(9)),
		  'the card is bound to that egress hash');
SELECT is((SELECT e.details FROM agent.audit_events e
			WHERE e.invocation_id = pg_temp.inv(9) AND e.event_type = 'approval.approved'),
		  jsonb_build_object('approval_id', pg_temp.card(9), 'code_sha256', agent.code_sha256('echo 9'),
							 'egress_sha256', (SELECT egress_sha256 FROM agent.invocations WHERE id = pg_temp.inv(9))),
		  'approval.approved carries the egress hash');

---- approve, when a rule fails: the error of that rule, nothing decided ----
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(9), 'bob'),
	'P0002', format('approval request %s does not exist in the current workspace', pg_temp.card(9)),
	'another tenant''s card does not exist');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(2), 'Alice '),
	'42501', 'cannot approve an execution request made by the same person',
	'the requester cannot approve her own request');
SELECT throws_ok(format('SELECT agent.approve(%L, %L, %L)', pg_temp.card(2), 'bob', agent.code_sha256('echo 3')),
	'22023', format('code hash does not match approval request %s', pg_temp.card(2)),
	'a hash of other code is refused');
SELECT throws_ok(format('SELECT agent.approve(%L, %L, %L)', pg_temp.card(2), 'alice', agent.code_sha256('echo 3')),
	'42501', NULL, 'four eyes are checked before the hash');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), 'carol'),
	'55000', format('approval request %s has already been decided', pg_temp.card(1)),
	'a decided card cannot be approved again');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', NULL, 'carol'),
	'22004', 'approval request id must not be null', 'a null card');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(2), 'system'),
	'42939', NULL, 'a reserved name cannot approve');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM agent.approval_requests
			WHERE id IN (pg_temp.card(2), pg_temp.card(3)) AND status = 'pending'), 2,
	'the refused cards are still pending');
SELECT is((SELECT state FROM agent.invocations WHERE id = pg_temp.inv(2)), 'pending_approval',
	'and their invocations still wait');

-- Without a tenant.
SET ROLE agent_backend;
SELECT agent.set_tenant(NULL, NULL);
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(2), 'bob'),
	'42501', 'no tenant is set for this transaction', 'approve needs a tenant');
SELECT pg_temp.tenant(1);

-- An expired card.
RESET ROLE;
UPDATE agent.approval_requests SET expires_at = now() - interval '1 second' WHERE id = pg_temp.card(3);
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'bob'),
	'55000', format('approval request %s has expired', pg_temp.card(3)), 'an expired card cannot be approved');

-- The owner changes the code behind a card (the freeze trigger off), or
-- the hash the card holds (its guard off): the approval is refused.
RESET ROLE;
ALTER TABLE agent.invocations DISABLE TRIGGER invocations_freeze_request;
UPDATE agent.invocations SET code = 'rm -rf /' WHERE id = pg_temp.inv(4);
UPDATE agent.invocations SET code = 'rm -rf /', code_sha256 = agent.code_sha256('rm -rf /') WHERE id = pg_temp.inv(5);
ALTER TABLE agent.invocations ENABLE TRIGGER invocations_freeze_request;
ALTER TABLE agent.approval_requests DISABLE TRIGGER approval_requests_guard;
UPDATE agent.approval_requests SET code_sha256 = agent.code_sha256('rm -rf /') WHERE id = pg_temp.card(6);
ALTER TABLE agent.approval_requests ENABLE TRIGGER approval_requests_guard;
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(4), 'bob'),
	'XX001', format('approval request %s does not match the code of invocation %s', pg_temp.card(4), pg_temp.inv(4)),
	'changed code (hash left alone) cannot be approved');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(5), 'bob'),
	'XX001', NULL, 'changed code with a matching new hash cannot be approved');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(6), 'bob'),
	'XX001', NULL, 'a card whose hash was changed cannot be approved');

-- The invocation moved on while its card is still pending.
RESET ROLE;
UPDATE agent.invocations SET state = 'cancelled' WHERE id = pg_temp.inv(7);
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(7), 'bob'),
	'55000', format('invocation %s is no longer waiting for approval', pg_temp.inv(7)),
	'an invocation that no longer waits cannot be approved');
RESET ROLE;
SELECT is((SELECT count(*)::int FROM agent.approval_requests
			WHERE id IN (pg_temp.card(4), pg_temp.card(5), pg_temp.card(6), pg_temp.card(7))
			  AND status = 'pending'), 4, 'none of those cards was decided');
SELECT is((SELECT count(*)::int FROM agent.audit_events
			WHERE event_type = 'approval.approved' AND org_id = '43a00000-0000-4000-8000-000000000001'), 1,
	'only the one good approval is in the audit trail');

-- After all that, a good approval of a refused card goes through.
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT is(agent.approve(pg_temp.card(2), 'carol'), pg_temp.inv(2), 'another person approves card 2');

---- request_execution: the text checks, in their order ----
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, repeat('x', 40), 'true', 'system', repeat('d', 9000))$$,
	'42939', NULL, 'a reserved requester is refused before a long language or description');
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, repeat('x', 40), 'true', 'alice', repeat('d', 9000))$$,
	'22001', 'language is too long', 'a long language before a long description');
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, 'shell', 'true', 'alice', repeat('d', 9000), E'k\n')$$,
	'22001', 'description is too long', 'a long description before a bad idempotency key');
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, 'shell', 'true', 'alice', NULL, E'k\n')$$,
	'22023', 'idempotency_key must not contain control characters', 'an idempotency key with a line break');

---- request_execution announces the card on the workspace's channel ----
CREATE TEMP TABLE chan AS SELECT agent.approvals_channel() AS name;
SELECT is((SELECT count(*)::int FROM pg_temp.chan WHERE name ~ '^sandbox_approvals_[0-9a-f]{32}$'), 1,
	'the workspace has an approvals channel');
RESET ROLE;
SELECT is((SELECT 'sandbox_approvals_' || replace(c.token::text, '-', '') FROM agent.workspace_channels c
			WHERE c.workspace_id = '43b00000-0000-4000-8000-000000000001'),
		  (SELECT name FROM pg_temp.chan), 'named after the workspace''s token (the one request_execution notifies)');

---- the egress trigger: whoever inserts cannot supply a policy ----
INSERT INTO agent.invocations (id, org_id, workspace_id, agent_id, requested_by, language, code,
							   code_sha256, egress_policy, egress_sha256) VALUES
	('43f00000-0000-4000-8000-000000000001', '43a00000-0000-4000-8000-000000000001',
	 '43b00000-0000-4000-8000-000000000001', '43c00000-0000-4000-8000-000000000001', 'alice', 'shell', 'true',
	 'x', '{"rules": [{"host": "evil.example", "ports": [443]}]}', 'x'),
	('43f00000-0000-4000-8000-000000000002', '43a00000-0000-4000-8000-000000000002',
	 '43b00000-0000-4000-8000-000000000002', '43c00000-0000-4000-8000-000000000002', 'alice', 'shell', 'true',
	 'x', '{"rules": [{"host": "evil.example", "ports": [443]}]}', 'x');
SELECT is((SELECT (egress_policy IS NULL AND egress_sha256 IS NULL) FROM agent.invocations
			WHERE id = '43f00000-0000-4000-8000-000000000001'), true,
	'an org without rules: a supplied policy and hash are dropped');
SELECT is((SELECT (egress_policy, egress_sha256)::text FROM agent.invocations
			WHERE id = '43f00000-0000-4000-8000-000000000002'),
		  (SELECT (p, agent._egress_sha256(p))::text
			 FROM agent._effective_egress('43a00000-0000-4000-8000-000000000002',
										  '43c00000-0000-4000-8000-000000000002', NULL) p),
	'an org with rules: the effective policy and its hash replace them');
SELECT is((SELECT egress_policy->'rules'->0->>'host' FROM agent.invocations
			WHERE id = '43f00000-0000-4000-8000-000000000002'), 'api.example.com',
	'... which is the org''s rule, not the supplied one');
-- Narrowed: the agent to one rule, a conversation of it to another; the
-- trigger passes the agent and the conversation through.
INSERT INTO agent.egress_rules (id, org_id, host, ports, created_by) VALUES
	('43900000-0000-4000-8000-000000000002', '43a00000-0000-4000-8000-000000000002', 'b.example.com', '{443}', 'tap');
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled)
	VALUES ('43d00000-0000-4000-8000-000000000002', '43a00000-0000-4000-8000-000000000002',
			'43b00000-0000-4000-8000-000000000002', '43c00000-0000-4000-8000-000000000002', true);
INSERT INTO agent.egress_narrowing (org_id, workspace_id, agent_id, conversation_id, rule_ids, set_by)
	SELECT '43a00000-0000-4000-8000-000000000002', '43b00000-0000-4000-8000-000000000002',
		   '43c00000-0000-4000-8000-000000000002', c, ARRAY[r.id], 'tap'
	  FROM (VALUES (NULL::uuid, 'api.example.com'), ('43d00000-0000-4000-8000-000000000002', 'b.example.com')) v(c, h)
	  JOIN agent.egress_rules r ON r.host = v.h AND r.org_id = '43a00000-0000-4000-8000-000000000002';
INSERT INTO agent.invocations (id, org_id, workspace_id, agent_id, conversation_id, requested_by, language, code) VALUES
	('43f00000-0000-4000-8000-000000000003', '43a00000-0000-4000-8000-000000000002',
	 '43b00000-0000-4000-8000-000000000002', '43c00000-0000-4000-8000-000000000002', NULL, 'alice', 'shell', 'true'),
	('43f00000-0000-4000-8000-000000000004', '43a00000-0000-4000-8000-000000000002',
	 '43b00000-0000-4000-8000-000000000002', '43c00000-0000-4000-8000-000000000002',
	 '43d00000-0000-4000-8000-000000000002', 'alice', 'shell', 'true');
SELECT is(ARRAY(SELECT i.egress_policy->'rules'->0->>'host' || ' ' || (i.egress_sha256 = agent._egress_sha256(i.egress_policy))::text
				  FROM agent.invocations i
				 WHERE i.id IN ('43f00000-0000-4000-8000-000000000003', '43f00000-0000-4000-8000-000000000004') ORDER BY i.id),
		  ARRAY['api.example.com true', NULL],
	'the agent''s narrowing applies; a conversation narrowed to a rule the agent lacks has none, and no hash');

---- output_channel and wait, from the tenant and from another ----
CREATE TEMP TABLE outchan AS
	SELECT 'sandbox_output_' || replace(channel_token::text, '-', '') AS name
	  FROM agent.invocations WHERE id = pg_temp.inv(1);
GRANT SELECT ON pg_temp.outchan TO PUBLIC;
SET ROLE agent_backend;
SELECT pg_temp.tenant(1);
SELECT is(agent.output_channel(pg_temp.inv(1)), (SELECT name FROM pg_temp.outchan),
	'output_channel names the invocation''s channel');
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.inv(9)),
	'P0002', format('invocation %s does not exist', pg_temp.inv(9)), 'not another tenant''s');
SELECT agent.set_tenant(NULL, NULL);
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.inv(1)),
	'42501', 'no tenant is set for this transaction', 'output_channel needs a tenant');
SELECT pg_temp.tenant(1);
-- (wait() on this transaction's own work is refused; its plan is kept
-- between calls, so call it twice)
SELECT throws_ok(format('SELECT agent.wait(%L, %L)', pg_temp.inv(8), '0 s'),
	'55000', format('cannot wait for invocation %s in the transaction that changed it', pg_temp.inv(8)),
	'wait refuses an invocation this transaction changed');
SELECT throws_ok(format('SELECT agent.wait(%L, %L)', pg_temp.inv(9), '0 s'),
	'P0002', format('invocation %s does not exist', pg_temp.inv(9)), 'wait does not see another tenant''s');
SELECT throws_ok(format('SELECT agent.wait(%L, %L)', pg_temp.inv(9), '0 s'),
	'P0002', NULL, '... twice');
-- Without a tenant: one answer from wait and wait_result (issue 27: wait
-- said P0002, wait_result 42501).
SELECT agent.set_tenant(NULL, NULL);
SELECT throws_ok(format('SELECT agent.wait(%L, %L)', pg_temp.inv(1), '0 s'),
	'42501', 'no tenant is set for this transaction', 'wait without a tenant: 42501, as wait_result');
SELECT throws_ok(format('SELECT agent.wait_result(%L, %L)', pg_temp.inv(1), '0 s'),
	'42501', 'no tenant is set for this transaction', 'wait_result without a tenant: 42501');
SELECT pg_temp.tenant(1);

---- an empty idempotency key (issue 27: '' was a key like any other) ----
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, 'shell', 'true', 'alice', NULL, '')$$,
	'22023', 'idempotency_key must not be empty', 'an empty idempotency key is refused');
SELECT throws_ok($$SELECT agent.request_execution('43b00000-0000-4000-8000-000000000001',
	'43c00000-0000-4000-8000-000000000001', NULL, 'shell', 'true', 'alice', NULL, '   ')$$,
	'22023', 'idempotency_key must not be empty', '... and so is one of white space only');

---- the language's names (issue 27: the README said bash, the language was shell) ----
CREATE TEMP TABLE bash_req AS
	SELECT r.* FROM agent.request_execution('43b00000-0000-4000-8000-000000000001',
		'43c00000-0000-4000-8000-000000000001', NULL, 'bash', 'echo $BASH_VERSION', 'alice') r;
SELECT is((SELECT b.status || ' ' || i.language || ' ' || c.language
			 FROM bash_req b JOIN agent.invocations i ON i.id = b.invocation_id
			 JOIN agent.approval_cards c ON c.approval_id = b.approval_id),
		  'pending_approval shell shell', '"bash" is accepted as the shell language, and recorded as shell');
CREATE TEMP TABLE ruby_req AS
	SELECT r.* FROM agent.request_execution('43b00000-0000-4000-8000-000000000001',
		'43c00000-0000-4000-8000-000000000001', NULL, 'ruby', 'puts 1', 'alice') r;
SELECT is((SELECT status || ' ' || reason || ' ' || sqlstate FROM ruby_req),
		  'denied language_not_supported 22023', 'an unknown language is refused');
RESET ROLE;
SELECT is((SELECT details->>'message' FROM agent.audit_events
			WHERE org_id = '43a00000-0000-4000-8000-000000000001' AND event_type = 'capability.invoke_denied'
			ORDER BY id DESC LIMIT 1),
		  'Language "ruby" is not supported; the languages are python, node and shell (or bash).',
		  '... and the refusal names the languages there are');

SELECT * FROM finish();
ROLLBACK;
