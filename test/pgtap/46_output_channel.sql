-- Output notifications (issue 11, item 8): any role may LISTEN on (and
-- NOTIFY) any channel it can name, so the channel of an invocation is named
-- after a random token that only the invocation's tenant can learn.  A
-- stranger (another tenant's backend, a role without grants) cannot learn
-- it from the id.  (That clients read the state rather than trust a
-- notification: test/suites/supervisor.sh.)
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('8e000000-0000-4000-8000-000000000001', 'tap-output-channel', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('8a000000-0000-4000-8000-00000000000a', 'Channel A', 'pro'),
	('8a000000-0000-4000-8000-00000000000b', 'Channel B', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('8b000000-0000-4000-8000-00000000000a', '8a000000-0000-4000-8000-00000000000a', 'A'),
	('8b000000-0000-4000-8000-00000000000b', '8a000000-0000-4000-8000-00000000000b', 'B');
-- Credits, or requests are refused (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs WHERE id::text LIKE '8a000000-%';
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('8c000000-0000-4000-8000-00000000000a', '8a000000-0000-4000-8000-00000000000a',
	 '8b000000-0000-4000-8000-00000000000a', 'A', 'specialist', '8e000000-0000-4000-8000-000000000001', true),
	('8c000000-0000-4000-8000-00000000000b', '8a000000-0000-4000-8000-00000000000b',
	 '8b000000-0000-4000-8000-00000000000b', 'B', 'specialist', '8e000000-0000-4000-8000-000000000001', true);
CREATE TEMP TABLE inv (k text PRIMARY KEY, id uuid);
DO $$
BEGIN
	PERFORM agent.set_tenant('8a000000-0000-4000-8000-00000000000a', '8b000000-0000-4000-8000-00000000000a');
	INSERT INTO pg_temp.inv
		SELECT 'a' || n, (agent.request_execution('8b000000-0000-4000-8000-00000000000a',
					'8c000000-0000-4000-8000-00000000000a', NULL, 'shell', 'echo ' || n, 'alice')).invocation_id
		  FROM generate_series(1, 2) n;
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
CREATE FUNCTION pg_temp.a(k text) RETURNS uuid LANGUAGE sql AS $$ SELECT id FROM pg_temp.inv WHERE inv.k = a.k $$;

SELECT plan(10);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

-- The tenant learns its channel; it is not derived from the id.
SET ROLE agent_backend;
SELECT agent.set_tenant('8a000000-0000-4000-8000-00000000000a', '8b000000-0000-4000-8000-00000000000a');
CREATE TEMP TABLE chan AS SELECT k, agent.output_channel(id) AS name FROM pg_temp.inv;
SELECT is((SELECT count(*) FROM chan WHERE name ~ '^sandbox_output_[0-9a-f]{32}$'), 2::bigint,
	'the tenant learns its channels (sandbox_output_ and 32 hex digits)');
SELECT is((SELECT count(*) FROM chan c JOIN pg_temp.inv i USING (k)
			WHERE position(replace(i.id::text, '-', '') IN c.name) > 0
			   OR position(i.id::text IN c.name) > 0
			   OR c.name = 'sandbox_output_' || i.id),
	0::bigint, 'a channel name contains nothing of the invocation''s id');
SELECT isnt((SELECT name FROM chan WHERE k = 'a1'), (SELECT name FROM chan WHERE k = 'a2'),
	'two invocations have two channels');
SELECT is(agent.output_channel(pg_temp.a('a1')), (SELECT name FROM chan WHERE k = 'a1'),
	'an invocation keeps its channel');
SELECT throws_ok($$SELECT agent.output_channel('8f000000-0000-4000-8000-000000000000')$$,
	'P0002', 'invocation 8f000000-0000-4000-8000-000000000000 does not exist', 'an unknown id has no channel');

-- Another tenant's backend cannot learn it, through the function or the table.
SELECT agent.set_tenant('8a000000-0000-4000-8000-00000000000b', '8b000000-0000-4000-8000-00000000000b');
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.a('a1')),
	'P0002', format('invocation %s does not exist', pg_temp.a('a1')),
	'another tenant cannot learn the channel of A''s invocation (as for an unknown id)');
SELECT is((SELECT count(*) FROM agent.invocations WHERE id = pg_temp.a('a1')), 0::bigint,
	'nor read its token from the table (row-level security)');
SELECT agent.set_tenant(NULL, NULL);
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.a('a1')),
	'42501', NULL, 'without a tenant there is no channel');
RESET ROLE;

-- A role of no tenant at all.
SET ROLE agent_auditor;
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.a('a1')),
	'42501', NULL, 'a role without the grant cannot call output_channel');
RESET ROLE;
CREATE ROLE tap_stranger NOLOGIN;
SET ROLE tap_stranger;
SELECT throws_ok(format('SELECT agent.output_channel(%L)', pg_temp.a('a1')),
	'42501', NULL, 'nor can a stranger role');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
