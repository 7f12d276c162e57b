-- agent.request_execution(): the IAM decision in order, the pending
-- invocation and its card, exactly one audit event per request, and the
-- idempotency key.
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	-- Ids are random: keep them out of the expected output.
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;

-- A pro org (Acme) and a free org (Freebie), one workspace each.
INSERT INTO agent.models (id, name, supports_code_execution) VALUES
	('10000000-0000-4000-8000-000000000001', 'regress-coder', true),
	('10000000-0000-4000-8000-000000000002', 'regress-chat', false);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a1000000-0000-4000-8000-000000000001', 'Acme', 'pro'),
	('a1000000-0000-4000-8000-000000000002', 'Freebie', 'free');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000001', 'acme-main'),
	('b1000000-0000-4000-8000-000000000002', 'a1000000-0000-4000-8000-000000000002', 'free-main');
-- Credits, so that requests are not refused for want of them (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'regress')) AS funded FROM agent.orgs WHERE id IN ('a1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000002');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('c1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'Analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000001', true),
	('c1000000-0000-4000-8000-000000000002', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'My helper', 'personal',
	 '10000000-0000-4000-8000-000000000001', true),
	('c1000000-0000-4000-8000-000000000003', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'Writer', 'shared',
	 '10000000-0000-4000-8000-000000000001', false),
	('c1000000-0000-4000-8000-000000000004', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'Chatty', 'specialist',
	 '10000000-0000-4000-8000-000000000002', true),
	('c1000000-0000-4000-8000-000000000005', 'a1000000-0000-4000-8000-000000000002',
	 'b1000000-0000-4000-8000-000000000002', 'Free analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000001', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, title, code_execution_enabled) VALUES
	('d1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'c1000000-0000-4000-8000-000000000001', 'on', true),
	('d1000000-0000-4000-8000-000000000002', 'a1000000-0000-4000-8000-000000000001',
	 'b1000000-0000-4000-8000-000000000001', 'c1000000-0000-4000-8000-000000000001', 'off', false);

-- Happy path: allowed, pending, with a card.
BEGIN;
SELECT agent.set_tenant('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001');
SELECT invocation_id IS NOT NULL AS has_invocation, approval_id IS NOT NULL AS has_approval,
	   status, reason, sqlstate, replayed
  FROM agent.request_execution(
	workspace => 'b1000000-0000-4000-8000-000000000001',
	agent => 'c1000000-0000-4000-8000-000000000001',
	conversation => 'd1000000-0000-4000-8000-000000000001',
	language => 'python', code => E'import math\nprint(math.pi)\n',
	requested_by => 'alice', description => 'print pi',
	idempotency_key => 'req-1');
COMMIT;
SELECT state, language, code_sha256 = encode(sha256(convert_to(code, 'UTF8')), 'hex') AS hash_ok,
	   requested_by, description, credits_charged, approval_id IS NOT NULL AS has_approval
  FROM agent.invocations WHERE org_id = 'a1000000-0000-4000-8000-000000000001';
-- (the card shows its invocation's code and description: one copy)
SELECT a.status, a.language, a.runtime = (SELECT r.interpreter || ' ' || r.version FROM agent.runtimes r WHERE r.language = a.language) AS runtime_probed, a.runtime ~ '^python3 3\.' AS python3, a.risk_level, c.description, a.requested_by,
	   a.code_sha256 = i.code_sha256 AS same_hash, c.code = i.code AS same_code,
	   a.expires_at - a.created_at AS timeout, i.approval_id = a.id AS linked
  FROM agent.approval_requests a JOIN agent.invocations i ON i.id = a.invocation_id
  JOIN agent.approval_cards c ON c.approval_id = a.id
 WHERE a.org_id = 'a1000000-0000-4000-8000-000000000001';

-- The same idempotency key returns the same invocation, writes no second
-- event, and refuses to cover different code.
BEGIN;
SELECT agent.set_tenant('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001');
SELECT r.invocation_id = i.id AS same_invocation, r.status, r.replayed
  FROM agent.request_execution('b1000000-0000-4000-8000-000000000001',
		'c1000000-0000-4000-8000-000000000001', 'd1000000-0000-4000-8000-000000000001',
		'python', E'import math\nprint(math.pi)\n', 'alice', 'print pi', 'req-1') r,
	   agent.invocations i WHERE i.idempotency_key = 'req-1';
SELECT pg_temp.sqlstate_of($$SELECT agent.request_execution('b1000000-0000-4000-8000-000000000001',
		'c1000000-0000-4000-8000-000000000001', 'd1000000-0000-4000-8000-000000000001',
		'python', 'print(2)', 'alice', NULL, 'req-1')$$);
COMMIT;
SELECT count(*) AS invocations FROM agent.invocations WHERE org_id = 'a1000000-0000-4000-8000-000000000001';

-- Every refusal reason, in IAM order.  Each is a returned status with the
-- matching SQLSTATE, creates no invocation, and leaves one denied event.
CREATE FUNCTION pg_temp.try(org uuid, ws uuid, agent uuid, conv uuid, lang text, code text)
	RETURNS TABLE (status text, reason text, sqlstate text) LANGUAGE sql AS $$
	SELECT agent.set_tenant(org, ws);
	SELECT r.status, r.reason, r.sqlstate FROM agent.request_execution(ws, agent, conv, lang, code, 'bob') r;
$$;
-- 1. the plan (Freebie is on free)
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000002', 'b1000000-0000-4000-8000-000000000002',
	'c1000000-0000-4000-8000-000000000005', NULL, 'python', 'print(1)');
-- 2. the admin switch, for personal agents only
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000002', NULL, 'python', 'print(1)');
-- 3. the agent's toggle
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000003', NULL, 'python', 'print(1)');
-- 4. the thread's toggle
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000001', 'd1000000-0000-4000-8000-000000000002', 'python', 'print(1)');
-- 5. the model
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000004', NULL, 'python', 'print(1)');
-- 6. the language
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000001', NULL, 'ruby', 'puts 1');
-- 7. empty code, and code over the size limit
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000001', NULL, 'shell', E'  \n\t');
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000001', NULL, 'node', repeat('x', 65537));
-- The order matters: a free org with every other problem is refused for its plan.
UPDATE agent.agents SET code_execution_enabled = false WHERE id = 'c1000000-0000-4000-8000-000000000005';
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000002', 'b1000000-0000-4000-8000-000000000002',
	'c1000000-0000-4000-8000-000000000005', NULL, 'ruby', '');
-- Turning the switches on lets the same requests through.
UPDATE agent.orgs SET personal_agents_code_execution = true WHERE id = 'a1000000-0000-4000-8000-000000000001';
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000001', 'b1000000-0000-4000-8000-000000000001',
	'c1000000-0000-4000-8000-000000000002', NULL, 'node', 'console.log(1)');
UPDATE agent.plans SET code_execution = true WHERE plan = 'growth';
UPDATE agent.orgs SET plan = 'growth' WHERE id = 'a1000000-0000-4000-8000-000000000002';
UPDATE agent.agents SET code_execution_enabled = true WHERE id = 'c1000000-0000-4000-8000-000000000005';
SELECT * FROM pg_temp.try('a1000000-0000-4000-8000-000000000002', 'b1000000-0000-4000-8000-000000000002',
	'c1000000-0000-4000-8000-000000000005', NULL, 'shell', 'echo hi');
UPDATE agent.plans SET code_execution = false WHERE plan = 'growth';

-- The audit trail: one event per request (none for the replay), with reasons.
SELECT o.name, e.event_type, e.actor, e.details ->> 'reason' AS reason,
	   e.invocation_id IS NOT NULL AS has_invocation
  FROM agent.audit_events e JOIN agent.orgs o ON o.id = e.org_id
 WHERE e.org_id IN ('a1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000002')
 ORDER BY e.id;
SELECT count(*) AS invocations, count(*) FILTER (WHERE state = 'pending_approval') AS pending
  FROM agent.invocations
 WHERE org_id IN ('a1000000-0000-4000-8000-000000000001', 'a1000000-0000-4000-8000-000000000002');
SELECT allowed, reason, language FROM agent.iam_decisions
 WHERE org_id = 'a1000000-0000-4000-8000-000000000001' ORDER BY event_id;
