-- search_path hijack of SECURITY DEFINER functions (issue 11, item 7).
-- Every SECURITY DEFINER function of schema agent, whichever file made it
-- and whenever it was added, pins search_path to pg_catalog, agent,
-- pg_temp (pg_temp last: when it is not listed, it is searched first for
-- tables).  And from the attacker's side: a caller's temp table named
-- pg_settings does not change what request_execution accepts or stores.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('6e000000-0000-4000-8000-000000000001', 'tap-search-path', true);
INSERT INTO agent.orgs (id, name, plan) VALUES ('6a000000-0000-4000-8000-000000000001', 'Search path', 'pro');
INSERT INTO agent.workspaces (id, org_id, name)
	VALUES ('6b000000-0000-4000-8000-000000000001', '6a000000-0000-4000-8000-000000000001', 'ws');
-- Credits, or requests are refused (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs WHERE id IN ('6a000000-0000-4000-8000-000000000001');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled)
	VALUES ('6c000000-0000-4000-8000-000000000001', '6a000000-0000-4000-8000-000000000001',
			'6b000000-0000-4000-8000-000000000001', 'agent', 'specialist',
			'6e000000-0000-4000-8000-000000000001', true);

SELECT plan(7);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

-- The catalog, so that a function added later cannot forget.
SELECT cmp_ok((SELECT count(*)::int FROM pg_proc p
				WHERE p.pronamespace = 'agent'::regnamespace AND p.prosecdef), '>=', 20,
	'the check below sees the SECURITY DEFINER functions (at least 20)');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace AND p.prosecdef
				   AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c
									WHERE c = 'search_path=pg_catalog, agent, pg_temp')
				 ORDER BY 1),
		  '{}'::text[],
		  'every SECURITY DEFINER function of schema agent has search_path = pg_catalog, agent, pg_temp');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace AND p.prosecdef
				   AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c
									WHERE c LIKE 'search\_path=%' AND c LIKE '%, pg\_temp')
				 ORDER BY 1),
		  '{}'::text[],
		  'so every one ends its search_path with pg_temp');

-- The attack: a temp table that shadows pg_catalog.pg_settings for a
-- function whose search_path does not put pg_temp last.
SET ROLE agent_backend;
CREATE TEMP TABLE pg_settings (name text, setting text);
INSERT INTO pg_temp.pg_settings VALUES ('sandbox.max_wall_time', '2000000000'), ('sandbox.max_memory', '2000000000');
SELECT agent.set_tenant('6a000000-0000-4000-8000-000000000001', '6b000000-0000-4000-8000-000000000001');
SELECT throws_ok($$SELECT agent.request_execution('6b000000-0000-4000-8000-000000000001',
	'6c000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'mallory', wall_time_s => 2000000000)$$,
	'22023', 'wall time limit 2000000000 s is out of range',
	'a temp pg_settings does not raise sandbox.max_wall_time');
SELECT throws_ok($$SELECT agent.request_execution('6b000000-0000-4000-8000-000000000001',
	'6c000000-0000-4000-8000-000000000001', NULL, 'python', 'print(1)', 'mallory', memory_mb => 1000000)$$,
	'22023', 'memory limit 1000000 MB is out of range',
	'a temp pg_settings does not raise sandbox.max_memory');
CREATE TEMP TABLE req AS SELECT * FROM agent.request_execution('6b000000-0000-4000-8000-000000000001',
	'6c000000-0000-4000-8000-000000000001', NULL, 'python', 'print(2)', 'mallory', wall_time_s => 300);
SELECT is((SELECT wall_time_s FROM agent.invocations WHERE id = (SELECT invocation_id FROM req)),
	300, 'the real maximum is still accepted and stored as requested');
DROP TABLE pg_temp.pg_settings;
RESET ROLE;
SELECT is((SELECT count(*) FROM agent.invocations
			WHERE org_id = '6a000000-0000-4000-8000-000000000001' AND wall_time_s > 300),
	0::bigint, 'no invocation was stored with a wall time beyond the real maximum');

SELECT * FROM finish();
ROLLBACK;
