-- Bad input to the API: nulls, unknown ids, out-of-range limits, the wrong
-- tenant.  Each is an error with a specific SQLSTATE and leaves no row
-- behind.  (Invalid language, empty and oversized code are IAM refusals:
-- see 10_request_execution.)
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	-- Ids are random: keep them out of the expected output.
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;

INSERT INTO agent.models (id, name, supports_code_execution) VALUES
	('10000000-0000-4000-8000-000000000051', 'regress-bad-input', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a5000000-0000-4000-8000-000000000001', 'Strict', 'pro'),
	('a5000000-0000-4000-8000-000000000002', 'Elsewhere', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000001', 'one'),
	('b5000000-0000-4000-8000-000000000003', 'a5000000-0000-4000-8000-000000000001', 'two'),
	('b5000000-0000-4000-8000-000000000002', 'a5000000-0000-4000-8000-000000000002', 'theirs');
-- Credits, so that requests are not refused for want of them (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'regress')) AS funded FROM agent.orgs WHERE id IN ('a5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000002');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('c5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000001',
	 'b5000000-0000-4000-8000-000000000001', 'Mine', 'specialist',
	 '10000000-0000-4000-8000-000000000051', true),
	('c5000000-0000-4000-8000-000000000002', 'a5000000-0000-4000-8000-000000000002',
	 'b5000000-0000-4000-8000-000000000002', 'Theirs', 'specialist',
	 '10000000-0000-4000-8000-000000000051', true),
	('c5000000-0000-4000-8000-000000000003', 'a5000000-0000-4000-8000-000000000001',
	 'b5000000-0000-4000-8000-000000000003', 'Other workspace', 'specialist',
	 '10000000-0000-4000-8000-000000000051', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('d5000000-0000-4000-8000-000000000002', 'a5000000-0000-4000-8000-000000000002',
	 'b5000000-0000-4000-8000-000000000002', 'c5000000-0000-4000-8000-000000000002', true);

CREATE TEMP TABLE bad (n serial, label text, stmt text);
INSERT INTO bad (label, stmt) VALUES
	('null workspace', $$agent.request_execution(NULL, 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'alice')$$),
	('null agent', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', NULL, NULL, 'python', 'print(1)', 'alice')$$),
	('null language', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, NULL, 'print(1)', 'alice')$$),
	('null code', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', NULL, 'alice')$$),
	('null requester', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', NULL)$$),
	('empty requester', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', ' ')$$),
	('unknown agent', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000000', NULL, 'python', 'print(1)', 'alice')$$),
	('agent of another workspace', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000003', NULL, 'python', 'print(1)', 'alice')$$),
	('agent of another org', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000002', NULL, 'python', 'print(1)', 'alice')$$),
	('unknown conversation', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', '00000000-0000-4000-8000-000000000000', 'python', 'print(1)', 'alice')$$),
	('conversation of another org', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', 'd5000000-0000-4000-8000-000000000002', 'python', 'print(1)', 'alice')$$),
	('workspace not the current one', $$agent.request_execution('b5000000-0000-4000-8000-000000000003', 'c5000000-0000-4000-8000-000000000003', NULL, 'python', 'print(1)', 'alice')$$),
	('workspace of another org', $$agent.request_execution('b5000000-0000-4000-8000-000000000002', 'c5000000-0000-4000-8000-000000000002', NULL, 'python', 'print(1)', 'alice')$$),
	('wall time zero', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'alice', wall_time_s => 0)$$),
	('wall time over the maximum', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'alice', wall_time_s => 301)$$),
	('memory over the maximum', $$agent.request_execution('b5000000-0000-4000-8000-000000000001', 'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'alice', memory_mb => 4096)$$);

-- In Strict's workspace "one".
BEGIN;
SELECT agent.set_tenant('a5000000-0000-4000-8000-000000000001', 'b5000000-0000-4000-8000-000000000001');
SELECT label, pg_temp.sqlstate_of('SELECT ' || stmt) AS result FROM bad ORDER BY n;
-- Limits in range are accepted and recorded.
SELECT status FROM agent.request_execution('b5000000-0000-4000-8000-000000000001',
	'c5000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'alice',
	wall_time_s => 300, memory_mb => 2048);
COMMIT;
-- No tenant at all; an org without a workspace.
SELECT pg_temp.sqlstate_of('SELECT ' || stmt) AS no_tenant FROM bad WHERE label = 'unknown agent';
BEGIN;
SELECT agent.set_tenant('a5000000-0000-4000-8000-000000000001', NULL);
SELECT pg_temp.sqlstate_of('SELECT ' || stmt) AS no_workspace FROM bad WHERE label = 'unknown agent';
COMMIT;

-- Nothing was written by any of them: one invocation (the valid request),
-- one card, one audit event.
SELECT (SELECT count(*) FROM agent.invocations WHERE org_id IN ('a5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000002')) AS invocations,
	   (SELECT count(*) FROM agent.approval_requests WHERE org_id IN ('a5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000002')) AS cards,
	   (SELECT count(*) FROM agent.audit_events WHERE org_id IN ('a5000000-0000-4000-8000-000000000001', 'a5000000-0000-4000-8000-000000000002') AND event_type <> 'credits.granted') AS events;
SELECT wall_time_s, memory_mb FROM agent.invocations WHERE org_id = 'a5000000-0000-4000-8000-000000000001';
-- A malformed tenant id never reaches the API.
SELECT pg_temp.sqlstate_of($$SELECT agent.set_tenant('not-a-uuid', NULL)$$);
