-- Runner hosts from the attacker's side (issue 13): the role agent_runner,
-- enumerated over the catalog (EXECUTE on the runner steps only, no table,
-- view or sequence privilege, no role), and what a compromised runner tries
-- through the steps it may call: act for another runner, touch an
-- invocation it holds no lease on (with its own token or a stolen one), read
-- a skill it was not given, write after the reaper took its lease over, or
-- after its leases expired, or after it restarted.  And the reaper's billing:
-- a lost lease is a failure of ours, refunded, audited, exactly once.
-- Sessions keep to their runner while it lives and move when it is gone.
-- The supervisor is paused while this runs (test/run.sh); everything here
-- is rolled back.
BEGIN;
-- Approved rows other suites left behind (the regress suite commits its
-- own) are set aside for this transaction: the claims below see only ours.
UPDATE agent.invocations SET state = 'cancelled', state_reason = 'set aside by 60_runners'
 WHERE state = 'approved';

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('e6000000-0000-4000-8000-000000000001', 'tap-runners', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('e1000000-0000-4000-8000-00000000000a', 'Runner org X', 'pro'),
	('e1000000-0000-4000-8000-00000000000b', 'Runner org Y', 'pro'),
	('e1000000-0000-4000-8000-00000000000c', 'Runner org Z', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('e2000000-0000-4000-8000-00000000000a', 'e1000000-0000-4000-8000-00000000000a', 'X'),
	('e2000000-0000-4000-8000-00000000000b', 'e1000000-0000-4000-8000-00000000000b', 'Y'),
	('e2000000-0000-4000-8000-00000000000c', 'e1000000-0000-4000-8000-00000000000c', 'Z');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('e4000000-0000-4000-8000-00000000000a', 'e1000000-0000-4000-8000-00000000000a',
	 'e2000000-0000-4000-8000-00000000000a', 'X agent', 'specialist', 'e6000000-0000-4000-8000-000000000001', true),
	('e4000000-0000-4000-8000-00000000000b', 'e1000000-0000-4000-8000-00000000000b',
	 'e2000000-0000-4000-8000-00000000000b', 'Y agent', 'specialist', 'e6000000-0000-4000-8000-000000000001', true),
	('e4000000-0000-4000-8000-00000000000c', 'e1000000-0000-4000-8000-00000000000c',
	 'e2000000-0000-4000-8000-00000000000c', 'Z agent', 'specialist', 'e6000000-0000-4000-8000-000000000001', true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('e5000000-0000-4000-8000-00000000000a', 'e1000000-0000-4000-8000-00000000000a',
	 'e2000000-0000-4000-8000-00000000000a', 'e4000000-0000-4000-8000-00000000000a', true);
-- X's agent mounts one skill; Y's skill is mounted nowhere X runs.
INSERT INTO agent.skills (id, org_id, name, version) VALUES
	('e7000000-0000-4000-8000-00000000000a', 'e1000000-0000-4000-8000-00000000000a', 'tools', 1),
	('e7000000-0000-4000-8000-00000000000b', 'e1000000-0000-4000-8000-00000000000b', 'secret', 1);
INSERT INTO agent.skill_files (skill_id, path, content) VALUES
	('e7000000-0000-4000-8000-00000000000a', 'run.sh', '\x74727565'),
	('e7000000-0000-4000-8000-00000000000b', 'key.txt', '\x736563726574');
INSERT INTO agent.agent_skills (org_id, workspace_id, agent_id, skill_id) VALUES
	('e1000000-0000-4000-8000-00000000000a', 'e2000000-0000-4000-8000-00000000000a',
	 'e4000000-0000-4000-8000-00000000000a', 'e7000000-0000-4000-8000-00000000000a');
SELECT agent.grant_credits('e1000000-0000-4000-8000-00000000000a', 100, 'tap');
SELECT agent.grant_credits('e1000000-0000-4000-8000-00000000000b', 100, 'tap');
SELECT agent.grant_credits('e1000000-0000-4000-8000-00000000000c', 100, 'tap');

-- Three runner hosts (c for the slot cap and the lease's limits), and a
-- login that is not a runner.
CREATE ROLE tap_runner_a LOGIN;
CREATE ROLE tap_runner_b LOGIN;
CREATE ROLE tap_runner_c LOGIN;
CREATE ROLE tap_not_runner LOGIN;
GRANT agent_runner TO tap_runner_a, tap_runner_b, tap_runner_c;

-- The SQLSTATE and message of a statement, ids taken out.
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
-- request and approve a shell run of org x ('a' or 'b'), tagged (the tag
-- is in the code, so that a runner can tell its claims apart)
CREATE FUNCTION pg_temp.queue(x text, tag text, conversation uuid DEFAULT NULL) RETURNS void
	LANGUAGE plpgsql AS $$
DECLARE
	r	agent.execution_request;
	w	uuid := ('e2000000-0000-4000-8000-00000000000' || x)::uuid;
BEGIN
	PERFORM agent.set_tenant(('e1000000-0000-4000-8000-00000000000' || x)::uuid, w);
	r := agent.request_execution(w, ('e4000000-0000-4000-8000-00000000000' || x)::uuid, conversation,
								 'shell', 'true # ' || tag, 'requester', NULL, tag);
	PERFORM agent.approve(r.approval_id, 'approver');
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS agent.invocations LANGUAGE sql
	AS $$ SELECT * FROM agent.invocations WHERE idempotency_key = k AND org_id::text LIKE 'e1000000-%' $$;
-- Everything a run step could write, for the runners' orgs: a change here
-- is a write.
CREATE FUNCTION pg_temp.writes() RETURNS text LANGUAGE sql AS $$
	SELECT format('output %s, staged %s/%s, ledger %s, audit %s, files %s, calls %s, states %s',
		(SELECT count(*) FROM agent.invocation_output WHERE org_id::text LIKE 'e1000000-%'),
		(SELECT count(*) FROM agent.run_results), (SELECT count(*) FROM agent.run_result_files),
		(SELECT count(*) FROM agent.credit_ledger WHERE org_id::text LIKE 'e1000000-%'),
		(SELECT count(*) FROM agent.audit_events WHERE org_id::text LIKE 'e1000000-%'),
		(SELECT count(*) FROM agent.files WHERE org_id::text LIKE 'e1000000-%'),
		(SELECT count(*) FROM agent.agent_tool_calls WHERE org_id::text LIKE 'e1000000-%'),
		(SELECT string_agg(idempotency_key || '=' || state || '/' || credits_charged || '/' || coalesce(jail_pid, 0),
						   ',' ORDER BY idempotency_key)
		   FROM agent.invocations WHERE org_id::text LIKE 'e1000000-%'))
$$;
CREATE FUNCTION pg_temp.deadline(k text) RETURNS timestamptz LANGUAGE sql AS $$
	SELECT (agent._lease_deadline(i.lease_expires_at, r.last_heartbeat, agent._runner_lease(), i.provisioned_at,
								  coalesce(i.wall_time_s, (agent._run_limits()).default_wall_time_s),
								  i.cancel_requested_at, agent._runner_grace())).deadline
	  FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id
	 WHERE i.idempotency_key = k AND i.org_id::text LIKE 'e1000000-%'
$$;

CREATE TEMP TABLE reg (name text PRIMARY KEY, runner uuid, incarnation uuid);
CREATE TEMP TABLE cl (tag text PRIMARY KEY, runner text, id uuid, token uuid, wall integer,
					  caps bigint, session uuid, fresh boolean);
CREATE TEMP TABLE seen (what text, value text);
-- the ids of a runner, and a claim's id and token, for the runner roles
CREATE FUNCTION pg_temp.rid(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT runner FROM reg WHERE name = n $$;
CREATE FUNCTION pg_temp.inc(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT incarnation FROM reg WHERE name = n $$;
CREATE FUNCTION pg_temp.cid(t text) RETURNS uuid LANGUAGE sql AS $$ SELECT id FROM cl WHERE tag = t $$;
CREATE FUNCTION pg_temp.tok(t text) RETURNS uuid LANGUAGE sql AS $$ SELECT token FROM cl WHERE tag = t $$;
-- claim up to n as runner `name`, recording what came back under its tag
CREATE FUNCTION pg_temp.claim(name text, n integer) RETURNS text LANGUAGE sql AS $$
	WITH c AS (SELECT * FROM agent.runner_claim(pg_temp.rid(name), pg_temp.inc(name), n)),
	ins AS (INSERT INTO cl SELECT substring(c.code from '# (\S+)$'),
								  name, c.id, c.lease_token, c.wall_time_s, c.max_file_bytes,
								  c.session_id, c.fresh_session FROM c
			ON CONFLICT (tag) DO UPDATE SET runner = EXCLUDED.runner, id = EXCLUDED.id,
				token = EXCLUDED.token, session = EXCLUDED.session, fresh = EXCLUDED.fresh
			RETURNING tag)
	SELECT coalesce(string_agg(tag, ',' ORDER BY tag), '') FROM ins
$$;

SELECT plan(180);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

-- ---- the role, over the catalog --------------------------------------------
SELECT is((SELECT string_agg(format('%s:%s%s%s%s%s%s', rolname, rolcanlogin, rolsuper, rolcreaterole,
									 rolcreatedb, rolreplication, rolbypassrls), ',' ORDER BY rolname)
			 FROM pg_roles WHERE rolname IN ('agent_runner', 'sandbox_runner_local')),
		  'agent_runner:ffffff,sandbox_runner_local:ffffff',
		  'agent_runner and sandbox_runner_local cannot log in and have no role attribute');
SELECT ok(pg_has_role('sandbox_runner_local', 'agent_runner', 'MEMBER'),
		  'sandbox_runner_local (the local runner''s SET ROLE) is a member of agent_runner');
SELECT is(ARRAY(SELECT r.rolname::text FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid
				 WHERE m.member IN ('agent_runner'::regrole, 'sandbox_runner_local'::regrole)
				   AND r.rolname <> 'agent_runner' ORDER BY 1),
		  '{}'::text[], 'the runner roles are members of no other role (no backend, admin or auditor rights)');
SELECT cmp_ok((SELECT count(*)::integer FROM pg_class c
				WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')),
			  '>=', 30, 'the checks below see every relation of schema agent (at least 30)');
SELECT is(ARRAY(SELECT DISTINCT c.relname::text || ': ' || priv
				  FROM pg_class c,
					   unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) priv
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
				   AND (has_table_privilege('tap_runner_a', c.oid, priv)
						OR (priv IN ('SELECT', 'INSERT', 'UPDATE', 'REFERENCES')
							AND has_any_column_privilege('tap_runner_a', c.oid, priv)))
				 ORDER BY 1),
		  '{}'::text[], 'a runner has no privilege on any table or view of schema agent, not one column');
SELECT is(ARRAY(SELECT DISTINCT c.relname::text || ': ' || priv
				  FROM pg_class c, unnest(ARRAY['USAGE', 'SELECT', 'UPDATE']) priv
				 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'S'
				   AND has_sequence_privilege('tap_runner_a', c.oid, priv)
				 ORDER BY 1),
		  '{}'::text[], 'a runner has no privilege on any sequence of schema agent');
SELECT is(ARRAY(SELECT p.oid::regprocedure::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace
				   AND has_function_privilege('tap_runner_a', p.oid, 'EXECUTE')
				   AND NOT has_function_privilege('public', p.oid, 'EXECUTE')
				 ORDER BY 1),
		  ARRAY['agent.runner_append_output(uuid,uuid,uuid,text,text)',
				'agent.runner_cancel_requested(uuid,uuid[])',
				'agent.runner_claim(uuid,uuid,integer,uuid)',
				'agent.runner_finish(uuid,uuid,uuid,text,integer,text,boolean,boolean,bigint,integer,text)',
				'agent.runner_heartbeat(uuid,uuid,integer,uuid[],integer)',
				'agent.runner_live_sessions(uuid)',
				'agent.runner_mark_running(uuid,uuid,uuid,integer)',
				'agent.runner_prepare(uuid,uuid,uuid,boolean)',
				'agent.runner_record_egress(uuid,uuid,uuid,text,jsonb)',
				'agent.runner_register(text,text,text,integer)',
				'agent.runner_report_images(uuid,uuid,jsonb)',
				'agent.runner_report_isolation(uuid,uuid,text[],text)',
				'agent.runner_report_secret_keys(uuid,uuid,text[])',
				'agent.runner_skill_files(uuid,uuid,uuid,uuid)',
				'agent.runner_skills_in_use(uuid)',
				'agent.runner_store_produced_file(uuid,uuid,uuid,text,text,text,bytea)',
				'agent.runner_store_skipped_files(uuid,uuid,uuid,text[],text[],text[])'],
		  'a runner executes the seventeen runner steps (egress'', images'', secrets'' and isolation''s included) and no other function of schema agent (beyond PUBLIC''s)');
SELECT is(ARRAY(SELECT p.proname::text FROM pg_proc p
				 WHERE p.pronamespace = 'agent'::regnamespace AND p.proname LIKE 'runner\_%'
				   AND NOT (p.prosecdef AND has_function_privilege('agent_runner', p.oid, 'EXECUTE'))
				 ORDER BY 1),
		  '{}'::text[], 'every runner step is SECURITY DEFINER and granted to agent_runner');
SELECT ok(NOT has_schema_privilege('tap_runner_a', 'agent', 'CREATE')
		  AND has_schema_privilege('tap_runner_a', 'agent', 'USAGE'),
		  'a runner may use schema agent, not create in it');
SELECT ok(NOT has_table_privilege('agent_backend', 'agent.runners', 'SELECT')
		  AND NOT has_table_privilege('agent_backend', 'agent.runner_status', 'SELECT')
		  AND has_table_privilege('agent_auditor', 'agent.runner_status', 'SELECT'),
		  'the backend does not see the runners; the auditor reads agent.runner_status');

-- ---- as a runner: nothing directly ------------------------------------------
SET SESSION AUTHORIZATION tap_runner_a;
SELECT results_eq($$SELECT s, left(pg_temp.error_of(s), 5) FROM unnest(ARRAY[
		'SELECT count(*) FROM agent.invocations',
		'SELECT count(*) FROM agent.runners',
		'SELECT count(*) FROM agent.runner_status',
		'SELECT count(*) FROM agent.skill_files',
		'SELECT count(*) FROM agent.run_results',
		'INSERT INTO agent.invocation_output (invocation_id, seq, org_id, workspace_id, stream, data) VALUES (gen_random_uuid(), 1, gen_random_uuid(), gen_random_uuid(), ''stdout'', ''x'')',
		'INSERT INTO agent.audit_events (org_id, event_type, actor) VALUES (gen_random_uuid(), ''x'', ''runner'')',
		'INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES (gen_random_uuid(), ''grant'', 1, ''x'')',
		'UPDATE agent.runners SET state = ''active''',
		'DELETE FROM agent.run_results',
		'LOCK TABLE agent.runners IN SHARE MODE',
		'LOCK TABLE agent.invocations IN ROW EXCLUSIVE MODE',
		'SELECT agent._claim_invocations(1, gen_random_uuid(), NULL)',
		'SELECT agent._apply_result(gen_random_uuid())',
		'SELECT agent._append_output(gen_random_uuid(), ''stdout'', ''x'')',
		'SELECT agent._skill_files(gen_random_uuid())',
		'SELECT agent.grant_credits(gen_random_uuid(), 1, ''x'')',
		'SELECT agent.refund_invocation(gen_random_uuid(), ''x'')',
		'SELECT agent._audit(gen_random_uuid(), NULL, ''x'', NULL, ''runner'', NULL)',
		'SELECT agent.reap_expired_leases()',
		'SELECT agent.remove_runner(''tap-b'')',
		'SELECT agent.drain_runner(''tap-b'')',
		'SELECT agent.read_output(gen_random_uuid())',
		'SELECT agent.set_tenant(gen_random_uuid(), gen_random_uuid())',
		'SET ROLE agent_backend',
		'SET ROLE agent_auditor',
		'SET ROLE tap_runner_b',
		'SET ROLE sandbox_runner_local',
		'GRANT agent_runner TO tap_not_runner',
		'GRANT SELECT ON agent.invocations TO tap_runner_a',
		'CREATE TABLE agent.mine (x int)'
	]) s ORDER BY 1$$,
	$$SELECT s, '42501' FROM unnest(ARRAY[
		'SELECT count(*) FROM agent.invocations',
		'SELECT count(*) FROM agent.runners',
		'SELECT count(*) FROM agent.runner_status',
		'SELECT count(*) FROM agent.skill_files',
		'SELECT count(*) FROM agent.run_results',
		'INSERT INTO agent.invocation_output (invocation_id, seq, org_id, workspace_id, stream, data) VALUES (gen_random_uuid(), 1, gen_random_uuid(), gen_random_uuid(), ''stdout'', ''x'')',
		'INSERT INTO agent.audit_events (org_id, event_type, actor) VALUES (gen_random_uuid(), ''x'', ''runner'')',
		'INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES (gen_random_uuid(), ''grant'', 1, ''x'')',
		'UPDATE agent.runners SET state = ''active''',
		'DELETE FROM agent.run_results',
		'LOCK TABLE agent.runners IN SHARE MODE',
		'LOCK TABLE agent.invocations IN ROW EXCLUSIVE MODE',
		'SELECT agent._claim_invocations(1, gen_random_uuid(), NULL)',
		'SELECT agent._apply_result(gen_random_uuid())',
		'SELECT agent._append_output(gen_random_uuid(), ''stdout'', ''x'')',
		'SELECT agent._skill_files(gen_random_uuid())',
		'SELECT agent.grant_credits(gen_random_uuid(), 1, ''x'')',
		'SELECT agent.refund_invocation(gen_random_uuid(), ''x'')',
		'SELECT agent._audit(gen_random_uuid(), NULL, ''x'', NULL, ''runner'', NULL)',
		'SELECT agent.reap_expired_leases()',
		'SELECT agent.remove_runner(''tap-b'')',
		'SELECT agent.drain_runner(''tap-b'')',
		'SELECT agent.read_output(gen_random_uuid())',
		'SELECT agent.set_tenant(gen_random_uuid(), gen_random_uuid())',
		'SET ROLE agent_backend',
		'SET ROLE agent_auditor',
		'SET ROLE tap_runner_b',
		'SET ROLE sandbox_runner_local',
		'GRANT agent_runner TO tap_not_runner',
		'GRANT SELECT ON agent.invocations TO tap_runner_a',
		'CREATE TABLE agent.mine (x int)'
	]) s ORDER BY 1$$,
	'a runner reads, writes, locks, grants and becomes nothing directly: every attempt is 42501');
SELECT is(current_user::text, 'tap_runner_a', '... and it is still itself');

-- ---- registration -------------------------------------------------------------
INSERT INTO reg SELECT 'tap-a', r.runner_id, r.incarnation FROM agent.runner_register('tap-a', 'host-a', '1.0', 2) r;
SELECT is((SELECT format('%s %s', lease_seconds, heartbeat_seconds) FROM agent.runner_register('tap-a', 'host-a', '1.0', 2)),
		  '30 10', 'registration returns the lease (30 s) and the heartbeat interval (a third)');
UPDATE reg SET incarnation = (SELECT r.incarnation FROM agent.runner_register('tap-a', 'host-a', '1.0', 2) r) WHERE name = 'tap-a';
SELECT isnt((SELECT incarnation FROM reg WHERE name = 'tap-a'), NULL, '... and a new incarnation each time');
SELECT is((SELECT count(*)::integer FROM reg WHERE runner = (SELECT r.runner_id FROM agent.runner_register('tap-a', 'host-a', '1.0', 2) r)),
		  1, '... always the same runner for the same role');
UPDATE reg SET incarnation = (SELECT r.incarnation FROM agent.runner_register('tap-a', 'host-a', '1.0', 2) r) WHERE name = 'tap-a';
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('Bad Name', 'h', 'v', 1)$$),
		  '22023: invalid runner name "Bad Name"', 'a bad runner name is refused');
SELECT is(left(pg_temp.error_of($$SELECT agent.runner_register('tap-a', 'h', 'v', 5000)$$), 5),
		  '22023', 'slots out of range are refused');
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-a', repeat('h', 256), 'v', 2)$$),
		  '22001: host is too long', 'a host longer than 255 bytes is 22001, as every argument over its limit');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-a', 'host-b', '1.0', 2)$$),
		  '42710: runner name "tap-a" is registered by another role',
		  'a runner cannot take over another runner''s name');
INSERT INTO reg SELECT 'tap-b', r.runner_id, r.incarnation FROM agent.runner_register('tap-b', 'host-b', '1.0', 2) r;
SET SESSION AUTHORIZATION tap_not_runner;
SELECT is(left(pg_temp.error_of($$SELECT agent.runner_register('tap-c', 'h', 'v', 1)$$), 5),
		  '42501', 'a login that is not a member of agent_runner cannot register');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(format('%s:%s:%s:%s', name, login_role, slots, state), ',' ORDER BY name)
			 FROM agent.runners WHERE name LIKE 'tap-%'),
		  'tap-a:tap_runner_a:2:active,tap-b:tap_runner_b:2:active',
		  'each runner is the row of its own role');

-- ---- acting for another runner ----------------------------------------------
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_heartbeat(%L, %L, 0)', pg_temp.rid('tap-b'), pg_temp.inc('tap-b'))),
		  '42501: permission denied for runner <id>', 'a runner cannot heartbeat for another');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_claim(%L, %L, 1)', pg_temp.rid('tap-b'), pg_temp.inc('tap-b'))),
		  '42501: permission denied for runner <id>', '... nor claim for it');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_live_sessions(%L)', pg_temp.rid('tap-b'))),
		  '42501: permission denied for runner <id>', '... nor list its sessions');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_claim(%L, %L, 1)', gen_random_uuid(), gen_random_uuid())),
		  '42501: permission denied for runner <id>', 'an unknown runner id gets the same answer (no existence leak)');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_heartbeat(%L, %L, 0)', pg_temp.rid('tap-a'), gen_random_uuid())),
		  '55000: runner "tap-a" has registered again since this process did',
		  'a process with an old incarnation is refused');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_claim(%L, NULL, 1)', pg_temp.rid('tap-a'))),
		  '55000: runner "tap-a" has registered again since this process did',
		  '... and so is one that names no incarnation');
RESET SESSION AUTHORIZATION;

-- ---- a second identity: the shared role, another role, the local one -----------------------
-- A runner acts as the role its session logged in as.  A runner host's
-- role may SET ROLE agent_runner (it is a member), and a shared role must
-- not become a runner of its own: every step refuses it.
CREATE FUNCTION pg_temp.step_errors() RETURNS text LANGUAGE sql AS $$
	SELECT format('%s of %s: %s', count(*) FILTER (WHERE e LIKE '42501: permission denied to act as runner role %'),
				  count(*), string_agg(DISTINCT e, ' | '))
	  FROM (SELECT pg_temp.error_of(format('SELECT %s(%s)', p.oid::regproc,
			   (SELECT string_agg('(SELECT NULL::' || format_type(t, NULL) || ')', ', ' ORDER BY i)
				  FROM unnest(p.proargtypes) WITH ORDINALITY a(t, i)))) e
			  FROM pg_proc p
			 WHERE p.pronamespace = 'agent'::regnamespace AND p.proname LIKE 'runner\_%') x
$$;
SET SESSION AUTHORIZATION tap_runner_a;
SET ROLE agent_runner;
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-shared', 'h', 'v', 2)$$),
		  '42501: permission denied to act as runner role "agent_runner"',
		  'a runner host that SETs ROLE agent_runner cannot register a runner of the shared role');
SELECT is(pg_temp.step_errors(),
		  format('%1$s of %1$s: 42501: permission denied to act as runner role "agent_runner"',
				 (SELECT count(*) FROM pg_proc WHERE pronamespace = 'agent'::regnamespace AND proname LIKE 'runner\_%')),
		  '... and every runner step refuses that role (42501), whatever its arguments');
RESET ROLE;
SELECT is((SELECT state FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 0)), 'active',
		  '... while as itself it still acts for its runner');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT count(*)::integer FROM agent.runners WHERE login_role = 'agent_runner'),
		  0, '... and no runner of the shared role was made');
SET SESSION AUTHORIZATION agent_runner;
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-shared', 'h', 'v', 2)$$),
		  '42501: permission denied to act as runner role "agent_runner"',
		  'nor can a session of the shared role itself (a role that cannot log in)');
RESET SESSION AUTHORIZATION;
-- a runner's role that (wrongly) may SET ROLE to another runner's
GRANT tap_runner_b TO tap_runner_a;
SET SESSION AUTHORIZATION tap_runner_a;
SET ROLE tap_runner_b;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_heartbeat(%L, %L, 0)', pg_temp.rid('tap-b'), pg_temp.inc('tap-b'))),
		  '42501: permission denied to act as runner role "tap_runner_b"',
		  'a runner role granted another runner''s role cannot act for that runner through SET ROLE');
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-b', 'host-b', '1.0', 2)$$),
		  '42501: permission denied to act as runner role "tap_runner_b"', '... nor register as it');
RESET ROLE;
RESET SESSION AUTHORIZATION;
REVOKE tap_runner_b FROM tap_runner_a;
-- the local runner: the server's superuser session, SET ROLE sandbox_runner_local
SET ROLE sandbox_runner_local;
SELECT is(pg_temp.error_of('SELECT agent.runner_live_sessions(gen_random_uuid())'),
		  '42501: permission denied for runner <id>',
		  'the local runner''s way (a superuser session, SET ROLE sandbox_runner_local) is a runner''s identity');
RESET ROLE;
GRANT sandbox_runner_local TO tap_not_runner;
SET SESSION AUTHORIZATION tap_not_runner;
SET ROLE sandbox_runner_local;
SELECT is(pg_temp.error_of('SELECT agent.runner_live_sessions(gen_random_uuid())'),
		  '42501: permission denied to act as runner role "sandbox_runner_local"',
		  '... from any other session it is refused');
RESET ROLE;
RESET SESSION AUTHORIZATION;
REVOKE sandbox_runner_local FROM tap_not_runner;

-- ---- claims with leases ---------------------------------------------------------
SELECT pg_temp.queue('a', 'x1'), pg_temp.queue('a', 'x2');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 1), 'x1', 'runner a claims one run');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(pg_temp.claim('tap-b', 5), 'x2', 'runner b claims the other (never the same row)');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(format('%s:%s:%s', i.idempotency_key, r.name, i.lease_token = c.token), ',' ORDER BY i.idempotency_key)
			 FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id JOIN cl c ON c.id = i.id
			WHERE i.org_id = 'e1000000-0000-4000-8000-00000000000a'),
		  'x1:tap-a:t,x2:tap-b:t', 'each claimed row carries its runner and the token it returned');
SELECT ok((SELECT bool_and(i.lease_expires_at > now()) AND count(DISTINCT i.lease_token) = 2
			 FROM agent.invocations i WHERE i.idempotency_key IN ('x1', 'x2')
			  AND i.org_id = 'e1000000-0000-4000-8000-00000000000a'),
		  '... with a deadline ahead and a token of its own');
SELECT is((SELECT format('%s/%s', wall, caps) FROM cl WHERE tag = 'x1'), '30/20971520',
		  'the claim fills in the server''s default wall time and returns the caps of a run');

-- ---- a lease that is another runner's -----------------------------------------------
INSERT INTO seen VALUES ('before', pg_temp.writes());
SELECT agent.set_tenant('e1000000-0000-4000-8000-00000000000a', 'e2000000-0000-4000-8000-00000000000a');
SELECT agent.cancel(pg_temp.cid('x2'), 'alice');
SELECT agent.set_tenant(NULL, NULL);
INSERT INTO seen VALUES ('cancel', pg_temp.writes());
SET SESSION AUTHORIZATION tap_runner_a;
SELECT results_eq($$SELECT s, pg_temp.error_of(format(s, pg_temp.rid('tap-a'), pg_temp.tok(t), pg_temp.cid('x2')))
					  FROM (VALUES
						('own token', 'x1', 'SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''forged'')'),
						('stolen token', 'x2', 'SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''forged'')'),
						('prepare', 'x1', 'SELECT agent.runner_prepare(%L, %L, %L, true)'),
						('mark running', 'x1', 'SELECT agent.runner_mark_running(%L, %L, %L, 1)'),
						('store file', 'x2', 'SELECT agent.runner_store_produced_file(%L, %L, %L, ''f'', ''saved'', NULL, ''\x00'')'),
						('store skipped', 'x2', 'SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f}'', ''{skipped}'', ''{r}'')'),
						('finish', 'x2', 'SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)'),
						('skill', 'x2', 'SELECT agent.runner_skill_files(%L, %L, %L, ''e7000000-0000-4000-8000-00000000000a'')')
					  ) v(s_name, t, s)
					 ORDER BY 1$$,
	$$SELECT s, '55000: lease of invocation <id> is not held by this runner'
		FROM (VALUES ('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''forged'')'),
					 ('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''forged'')'),
					 ('SELECT agent.runner_prepare(%L, %L, %L, true)'),
					 ('SELECT agent.runner_mark_running(%L, %L, %L, 1)'),
					 ('SELECT agent.runner_store_produced_file(%L, %L, %L, ''f'', ''saved'', NULL, ''\x00'')'),
					 ('SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f}'', ''{skipped}'', ''{r}'')'),
					 ('SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)'),
					 ('SELECT agent.runner_skill_files(%L, %L, %L, ''e7000000-0000-4000-8000-00000000000a'')')) v(s)
	   ORDER BY 1$$,
	'on another runner''s invocation every step is refused with 55000, with its own token or a stolen one');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''forged'')',
								  pg_temp.rid('tap-b'), pg_temp.tok('x2'), pg_temp.cid('x2'))),
		  '42501: permission denied for runner <id>', '... and in the other runner''s name with its token, 42501');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)',
								  pg_temp.rid('tap-b'), pg_temp.tok('x2'), pg_temp.cid('x2'))),
		  '42501: permission denied for runner <id>', '... its finish too (the finish checks the lease and locks in one read)');
SELECT is(ARRAY(SELECT agent.runner_cancel_requested(pg_temp.rid('tap-a'), ARRAY[pg_temp.cid('x2'), pg_temp.cid('x1')])),
		  '{}'::uuid[], 'another runner''s cancel request is not shown to it');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.writes(), (SELECT value FROM seen WHERE what = 'cancel'), '... and nothing was written');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(ARRAY(SELECT agent.runner_cancel_requested(pg_temp.rid('tap-b'), ARRAY[pg_temp.cid('x2'), pg_temp.cid('x1')])),
		  ARRAY[pg_temp.cid('x2')], 'the holder sees the cancel request of its own run');

-- ---- the holder's own run, end to end -------------------------------------------------
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is((SELECT string_agg(kind || ':' || name, ',' ORDER BY name)
			 FROM agent.runner_prepare(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'), true)),
		  'skill:tools', 'the holder prepares its run: the skill its agent mounts');
SELECT is((SELECT string_agg(path, ',') FROM agent.runner_skill_files(pg_temp.rid('tap-a'), pg_temp.tok('x1'),
			pg_temp.cid('x1'), 'e7000000-0000-4000-8000-00000000000a')),
		  'run.sh', '... reads that skill''s files');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_skill_files(%L, %L, %L, %L)', pg_temp.rid('tap-a'),
			pg_temp.tok('x1'), pg_temp.cid('x1'), 'e7000000-0000-4000-8000-00000000000b')),
		  '42501: skill <id> is not mounted for invocation <id>',
		  '... but not another org''s skill, by id, through its own lease');
SELECT ok(agent.runner_mark_running(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'), 4242), '... marks it running');
SELECT is(agent.runner_append_output(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'), 'stdout', 'hello'), 1,
		  '... appends its output');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', repeat(''x'', 1048576))',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '54000: output of invocation <id> exceeds the output limit', '... within the output limit');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdin'', ''x'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22023: stream must be stdout or stderr, and data not null', '... on stdout or stderr only');
SELECT is(agent.runner_store_produced_file(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'),
			'out.txt', 'saved', NULL, '\x6f6b'), 1, '... stages a file it produced');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_produced_file(%L, %L, %L, ''big'', ''saved'', NULL, decode(repeat(''00'', 20971521), ''hex''))',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '54000: the files of invocation <id> exceed the caps of a run', '... within the caps of a run');
SELECT is(agent.runner_store_skipped_files(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'),
			ARRAY['a b', 'c"d'], ARRAY['skipped', 'failed'], ARRAY['more than 100 files were produced', 'unreadable']),
		  2, '... stages the entries it does not return, in one call');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(format('%s:%s:%s:%s', seq, name, status, CASE WHEN content IS NULL THEN 'none' ELSE 'content' END), ',' ORDER BY seq)
			 FROM agent.run_result_files WHERE invocation_id = pg_temp.cid('x1')),
		  '1:out.txt:saved:content,2:a b:skipped:none,3:c"d:failed:none', '... numbered after the saved one, without content');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f}'', ''{saved}'', ''{r}'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22023: status must be skipped or failed', '... never a saved one');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f,g}'', ''{skipped}'', ''{r}'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22023: names, statuses and reasons must be lists of as many elements', '... lists of one length');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f}'', ''{skipped}'', ''{NULL}'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22023: a file that is not saved needs a reason', '... each with a reason');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_produced_file(%L, %L, %L, ''f'', ''skipped'', NULL, NULL)',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22023: a file that is not saved needs a reason', '... one by one too');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_produced_file(%L, %L, %L, repeat(''n'', 4097), ''skipped'', ''r'', NULL)',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22001: name is too long', '... a name over 4096 bytes is 22001');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_skipped_files(%L, %L, %L, ''{f}'', ''{skipped}'', ARRAY[repeat(''r'', 4097)])',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22001: a name or reason is too long', '... and so is a reason in a list');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_finish(%L, %L, %L, NULL, 1, repeat(''e'', 4097), false)',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '22001: error is too long', '... and a finish''s error over 4096 bytes');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_store_skipped_files(%L, %L, %L, array_fill(''f''::text, ARRAY[20000]), array_fill(''skipped''::text, ARRAY[20000]), array_fill(''r''::text, ARRAY[20000]))',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '54000: the files of invocation <id> exceed the caps of a run', '... within the caps of a run');
SELECT is(agent.runner_finish(pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'),
			'{"status":"exited","exit_code":0}', 0, NULL, true), 'succeeded', '... and finishes it: succeeded');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":1}'', 0, NULL, true)',
			pg_temp.rid('tap-a'), pg_temp.tok('x1'), pg_temp.cid('x1'))),
		  '55000: lease of invocation <id> is not held by this runner', 'a second finish of an ended run is refused');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s/%s/%s', i.state, i.credits_charged, i.jail_pid,
						 (SELECT string_agg(name || ':' || status, ',' ORDER BY name COLLATE "C") FROM agent.files f WHERE f.invocation_id = i.id))
			 FROM pg_temp.inv('x1') i),
		  'succeeded/2/4242/a b:skipped,c"d:failed,out.txt:saved', 'the holder''s run ended charged, with its pid and its files');

-- ---- the reaper takes a lease over -----------------------------------------------------
SET SESSION AUTHORIZATION tap_runner_b;
SELECT ok(agent.runner_mark_running(pg_temp.rid('tap-b'), pg_temp.tok('x2'), pg_temp.cid('x2'), 4343), 'runner b runs x2');
SELECT is(agent.runner_append_output(pg_temp.rid('tap-b'), pg_temp.tok('x2'), pg_temp.cid('x2'), 'stdout', 'partial'), 1,
		  '... with some output');
RESET SESSION AUTHORIZATION;
SELECT is(agent.reap_expired_leases(pg_temp.deadline('x2') - interval '1 millisecond'), 0,
		  'the reaper leaves a lease alone until its deadline');
SELECT is((pg_temp.inv('x2')).state, 'running', '... (still running)');
INSERT INTO seen VALUES ('reap', pg_temp.writes());
SELECT is(agent.reap_expired_leases(pg_temp.deadline('x2') + interval '1 millisecond'), 1,
		  'past the deadline (the runner stopped renewing), the reaper ends the run');
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('x2')),
		  'provision_failed/0/the runner "tap-b" stopped renewing its lease', '... as a failure of ours, refunded');
SELECT is((SELECT string_agg(kind || ':' || amount, ',' ORDER BY id) FROM agent.credit_ledger
			WHERE invocation_id = pg_temp.cid('x2')), 'charge:-2,refund:2', '... one charge, one refund');
SELECT is((SELECT string_agg(event_type, ',' ORDER BY id) FROM agent.audit_events
			WHERE invocation_id = pg_temp.cid('x2')
			  AND id > (SELECT e.id FROM agent.audit_events e WHERE e.invocation_id = pg_temp.cid('x2')
						   AND e.event_type = 'invocation.started')),
		  'credits.refunded,invocation.provision_failed', '... audited: the refund and the end');
SELECT is((SELECT count(*)::integer FROM agent.agent_tool_calls WHERE invocation_id = pg_temp.cid('x2')), 1,
		  '... with its tool call');
INSERT INTO seen VALUES ('reaped', pg_temp.writes());
SET SESSION AUTHORIZATION tap_runner_b;
SELECT results_eq($$SELECT pg_temp.error_of(format(s, pg_temp.rid('tap-b'), pg_temp.tok('x2'), pg_temp.cid('x2')))
					  FROM unnest(ARRAY[
						'SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''late'')',
						'SELECT agent.runner_mark_running(%L, %L, %L, 1)',
						'SELECT agent.runner_store_produced_file(%L, %L, %L, ''f'', ''saved'', NULL, ''\x00'')',
						'SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)',
						'SELECT agent.runner_prepare(%L, %L, %L, false)']) s$$,
	$$SELECT '55000: lease of invocation <id> is not held by this runner' FROM generate_series(1, 5)$$,
	'the old holder''s late output, start, file and finish (charge) are refused with 55000');
SELECT is((SELECT format('%s/%s/%s', state, renewed, lost = ARRAY[pg_temp.cid('x2')])
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-b'), pg_temp.inc('tap-b'), 1, ARRAY[pg_temp.cid('x2')])),
		  'active/0/t', 'its heartbeat names the run it lost (kill its sandbox)');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.writes(), (SELECT value FROM seen WHERE what = 'reaped'), '... and none of it wrote anything');
SELECT is(agent.reap_expired_leases(pg_temp.deadline('x2') + interval '1 hour'), 0, 'reaping again ends nothing');
SELECT is((SELECT count(*)::integer FROM agent.credit_ledger WHERE invocation_id = pg_temp.cid('x2') AND kind = 'refund'),
		  1, '... the refund is made exactly once');

-- ---- leases that expired before the heartbeat stay expired ---------------------------------
SELECT pg_temp.queue('a', 'x3');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 2), 'x3', 'runner a claims x3');
RESET SESSION AUTHORIZATION;
-- fault injection: the runner was cut off for two leases
UPDATE agent.runners SET last_heartbeat = last_heartbeat - 2 * agent._runner_lease() WHERE name = 'tap-a';
UPDATE agent.invocations SET lease_expires_at = lease_expires_at - 2 * agent._runner_lease()
 WHERE id = pg_temp.cid('x3');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''x'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x3'), pg_temp.cid('x3'))),
		  '55000: lease of invocation <id> is not held by this runner',
		  'past its deadline a lease is not held, even before the reaper runs');
SELECT is((SELECT format('%s/%s/%s', state, renewed, lost = ARRAY[pg_temp.cid('x3')])
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1, ARRAY[pg_temp.cid('x3')])),
		  'active/0/t', 'the heartbeat of a runner back from a cut does not revive its expired lease');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('x3')),
		  'provision_failed/0/the runner "tap-a" stopped renewing its lease', '... it ends it, refunded, as the reaper would');

-- and the finish of a run past its deadline, before the reaper runs: its
-- lease check and its locks are one locked read (agent.runner_finish);
-- a finish past the deadline is refused and writes nothing, neither the
-- end nor a staged result
SELECT pg_temp.queue('a', 'x7');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 2), 'x7', 'runner a claims x7');
RESET SESSION AUTHORIZATION;
-- fault injection: the runner was cut off for two leases
UPDATE agent.runners SET last_heartbeat = last_heartbeat - 2 * agent._runner_lease() WHERE name = 'tap-a';
UPDATE agent.invocations SET lease_expires_at = lease_expires_at - 2 * agent._runner_lease()
 WHERE id = pg_temp.cid('x7');
INSERT INTO seen VALUES ('x7 writes', pg_temp.writes());
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)',
			pg_temp.rid('tap-a'), pg_temp.tok('x7'), pg_temp.cid('x7'))),
		  '55000: lease of invocation <id> is not held by this runner',
		  'past its deadline a finish is refused, even before the reaper runs');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.writes(), (SELECT value FROM seen WHERE what = 'x7 writes'),
		  '... and writes nothing: no end, no charge kept, nothing staged');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is((SELECT format('%s/%s/%s', state, renewed, lost = ARRAY[pg_temp.cid('x7')])
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1, ARRAY[pg_temp.cid('x7')])),
		  'active/0/t', '... its heartbeat names it lost');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s', state, credits_charged) FROM pg_temp.inv('x7')),
		  'provision_failed/0', '... and it ends as a failure of ours, refunded');

-- a heartbeat before the deadline renews every lease of the runner
SELECT pg_temp.queue('a', 'x4');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 2), 'x4', 'runner a claims x4');
RESET SESSION AUTHORIZATION;
UPDATE agent.runners SET last_heartbeat = last_heartbeat - agent._runner_lease() / 2 WHERE name = 'tap-a';
UPDATE agent.invocations SET lease_expires_at = lease_expires_at - agent._runner_lease() / 2
 WHERE id = pg_temp.cid('x4');
INSERT INTO seen VALUES ('x4 deadline', pg_temp.deadline('x4')::text);
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is((SELECT format('%s/%s/%s', state, renewed, cardinality(lost))
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1, ARRAY[pg_temp.cid('x4')])),
		  'active/1/0', 'a heartbeat in time renews the lease');
RESET SESSION AUTHORIZATION;
SELECT cmp_ok(pg_temp.deadline('x4'), '>', (SELECT value::timestamptz FROM seen WHERE what = 'x4 deadline'),
			  '... its deadline moves on');
SELECT is(agent.reap_expired_leases((SELECT value::timestamptz FROM seen WHERE what = 'x4 deadline') + interval '1 millisecond'),
		  0, '... and the reaper leaves it past the old deadline');

-- a runner's token is for one invocation: not for another it holds too
SELECT pg_temp.queue('a', 'x5');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 2), 'x5', 'runner a claims x5 too');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''x'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x5'), pg_temp.cid('x4'))),
		  '55000: lease of invocation <id> is not held by this runner',
		  'the token of one of its runs does not open another of its runs');
RESET SESSION AUTHORIZATION;

-- ---- a restart ends what the previous process held ---------------------------------------------
SET SESSION AUTHORIZATION tap_runner_a;
INSERT INTO seen SELECT 'old incarnation', incarnation::text FROM reg WHERE name = 'tap-a';
UPDATE reg SET incarnation = r.incarnation FROM agent.runner_register('tap-a', 'host-a', '1.1', 2) r
 WHERE name = 'tap-a';
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(format('%s:%s/%s/%s', idempotency_key, state, credits_charged, state_reason), ',' ORDER BY idempotency_key)
			 FROM agent.invocations WHERE idempotency_key IN ('x4', 'x5') AND org_id::text LIKE 'e1000000-%'),
		  'x4:provision_failed/0/the runner "tap-a" restarted,x5:provision_failed/0/the runner "tap-a" restarted',
		  're-registering ends what the old process held, refunded');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''x'')',
			pg_temp.rid('tap-a'), pg_temp.tok('x4'), pg_temp.cid('x4'))),
		  '55000: lease of invocation <id> is not held by this runner', '... its old token is refused');
SELECT is(left(pg_temp.error_of(format('SELECT agent.runner_heartbeat(%L, %L, 0)', pg_temp.rid('tap-a'),
			(SELECT value FROM seen WHERE what = 'old incarnation'))), 5),
		  '55000', '... and so is the old process''s heartbeat');
RESET SESSION AUTHORIZATION;

-- a claim whose answer the runner never got (the connection broke): its
-- heartbeat's list of what it runs leaves it out for a whole heartbeat
SELECT pg_temp.queue('a', 'x6');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(pg_temp.claim('tap-a', 2), 'x6', 'runner a claims x6 (and, say, never hears of it)');
SELECT is((SELECT format('%s/%s', renewed, cardinality(lost))
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 0, '{}')),
		  '1/0', 'a run claimed since the previous heartbeat is kept, though held does not name it');
SELECT is((SELECT format('%s/%s', renewed, cardinality(lost))
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 0, '{}')),
		  '0/0', 'one heartbeat later it is ended');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('x6')),
		  'provision_failed/0/the runner "tap-a" no longer runs it', '... as a failure of ours, refunded');

-- ---- slots, drain and remove ---------------------------------------------------------------------
SELECT pg_temp.queue('b', 'y1'), pg_temp.queue('b', 'y2');
SET SESSION AUTHORIZATION tap_runner_a;
UPDATE reg SET incarnation = r.incarnation FROM agent.runner_register('tap-a', 'host-a', '1.1', 1) r
 WHERE name = 'tap-a';
SELECT is(pg_temp.claim('tap-a', 10), 'y1', 'a runner with one slot claims one run, however many it asks for');
SELECT is(pg_temp.claim('tap-a', 10), '', '... and none while that slot is taken');
SELECT is(left(pg_temp.error_of(format('SELECT agent.runner_heartbeat(%L, %L, 1, NULL, 1025)',
			pg_temp.rid('tap-a'), pg_temp.inc('tap-a'))), 5),
		  '22023', 'a heartbeat cannot declare more than 1024 slots');
SELECT is((SELECT renewed FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1, NULL, 3)),
		  1, 'a heartbeat declares new slots (its configuration was reloaded)');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT slots FROM agent.runners WHERE name = 'tap-a'), 3, '... which the runner now has');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is((SELECT format('%s/%s/%s', renewed, lease_seconds, heartbeat_seconds)
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1, NULL, 1)),
		  '1/30/10', '... and back to one; the answer has the lease and the heartbeat interval');
RESET SESSION AUTHORIZATION;
UPDATE agent.settings SET value = '6' WHERE key = 'runner_lease_seconds';
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is((SELECT format('%s/%s', lease_seconds, heartbeat_seconds)
			 FROM agent.runner_heartbeat(pg_temp.rid('tap-a'), pg_temp.inc('tap-a'), 1)),
		  '6/2', 'an operator''s new runner_lease_seconds reaches the runner with its next heartbeat');
RESET SESSION AUTHORIZATION;
UPDATE agent.settings SET value = '30' WHERE key = 'runner_lease_seconds';
SELECT is(agent.drain_runner('tap-b'), 'draining', 'an operator drains runner b');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is((SELECT state FROM agent.runner_heartbeat(pg_temp.rid('tap-b'), pg_temp.inc('tap-b'), 0)), 'draining',
		  '... its heartbeat says so');
SELECT is(pg_temp.claim('tap-b', 5), '', '... and it claims nothing, with work waiting');
RESET SESSION AUTHORIZATION;
SELECT is(agent.drain_runner('tap-b', resume => true), 'active', 'the operator resumes it');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(pg_temp.claim('tap-b', 5), 'y2', '... and it claims again');
RESET SESSION AUTHORIZATION;
SELECT is(agent.remove_runner('tap-b'), 1, 'removing runner b ends what it holds');
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('y2')),
		  'provision_failed/0/the runner "tap-b" was removed', '... as a failure of ours, refunded');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is((SELECT state FROM agent.runner_heartbeat(pg_temp.rid('tap-b'), pg_temp.inc('tap-b'), 0)), 'removed',
		  'a removed runner''s heartbeat says so');
SELECT is(pg_temp.error_of($$SELECT agent.runner_register('tap-b', 'host-b', '1.0', 2)$$),
		  '55000: runner "tap-b" has been removed', '... and it cannot register again by itself');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.error_of($$SELECT agent.drain_runner('tap-nobody')$$), 'P0002: runner "tap-nobody" does not exist',
		  'draining an unknown runner is an error');
SELECT is(agent.drain_runner('tap-b', resume => true), 'active', 'an operator admits it again');
SET SESSION AUTHORIZATION tap_runner_b;
UPDATE reg SET incarnation = r.incarnation FROM agent.runner_register('tap-b', 'host-b', '1.0', 2) r
 WHERE name = 'tap-b';
SELECT is((SELECT state FROM agent.runner_heartbeat(pg_temp.rid('tap-b'), pg_temp.inc('tap-b'), 0)), 'active',
		  '... and then it registers');
RESET SESSION AUTHORIZATION;

-- ---- slots: the runner's declaration, within the operator's cap ----------------------------------
-- A runner declares up to 1024 slots; it claims at most the cap an
-- operator set for it (agent.set_runner_slots), else runner_max_slots.
SELECT agent.set_org_limits('e1000000-0000-4000-8000-00000000000c', 20, NULL);
SELECT pg_temp.queue('c', 's' || n) FROM generate_series(1, 10) n;
SET SESSION AUTHORIZATION tap_runner_c;
INSERT INTO reg SELECT 'cap-c', r.runner_id, r.incarnation FROM agent.runner_register('cap-c', 'host-c', '1.0', 1024) r;
SELECT pg_temp.claim('cap-c', 1024);
RESET SESSION AUTHORIZATION;
SELECT is((SELECT count(*)::integer FROM cl WHERE runner = 'cap-c'),
		  (SELECT value::integer FROM agent.settings WHERE key = 'runner_max_slots'),
		  'a runner that declares 1024 slots claims at most runner_max_slots (8) with more work waiting');
SELECT is((SELECT format('%s/%s', slots, max_slots) FROM agent.runner_status WHERE name = 'cap-c'), '1024/8',
		  '... agent.runner_status shows what it declared and the cap in force');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is((SELECT renewed FROM agent.runner_heartbeat(pg_temp.rid('cap-c'), pg_temp.inc('cap-c'), 8, NULL, 1024)), 8,
		  '... its heartbeat declares 1024 again');
SELECT is(pg_temp.claim('cap-c', 1024), '', '... and it still claims nothing more');
SELECT is(pg_temp.error_of($$SELECT agent.set_runner_slots('cap-c', 1024)$$),
		  '42501: permission denied for function set_runner_slots', '... nor may it raise its own cap');
RESET SESSION AUTHORIZATION;
SELECT is(agent.set_runner_slots('cap-c', 9), 9, 'an operator raises the cap of that runner');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is(length(pg_temp.claim('cap-c', 1024)) > 0, true, '... then it claims one more');
SELECT is((SELECT count(*)::integer FROM cl WHERE runner = 'cap-c'), 9, '... nine in flight');
RESET SESSION AUTHORIZATION;
SELECT is(agent.set_runner_slots('cap-c', 3), 3, 'an operator lowers it');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is(pg_temp.claim('cap-c', 1024), '', '... and with three slots it claims nothing until its runs end');
RESET SESSION AUTHORIZATION;
SELECT is(pg_temp.error_of($$SELECT agent.set_runner_slots('cap-c', 1025)$$),
		  '22023: max_slots must be between 0 and 1024', 'a cap out of range is refused');
SELECT is(pg_temp.error_of($$SELECT agent.set_runner_slots('tap-nobody', 1)$$),
		  'P0002: runner "tap-nobody" does not exist', '... and so is an unknown runner');
SELECT is(agent.set_runner_slots('cap-c', NULL), 8, 'NULL: back to runner_max_slots');
SELECT is(agent.remove_runner('cap-c'), 9, 'removing the runner ends its nine');
SELECT agent.drain_runner('cap-c', resume => true);
SELECT agent.set_runner_slots('cap-c', 1);
SET SESSION AUTHORIZATION tap_runner_c;
UPDATE reg SET incarnation = r.incarnation FROM agent.runner_register('cap-c', 'host-c', '1.0', 1024) r
 WHERE name = 'cap-c';
SELECT is(pg_temp.claim('cap-c', 1024), 's10', 'registering again with 1024 slots keeps the operator''s cap (one)');
SELECT is(agent.runner_finish(pg_temp.rid('cap-c'), pg_temp.tok('s10'), pg_temp.cid('s10'),
			'{"status":"exited","exit_code":0}', 0, NULL, true), 'succeeded', '... and it runs that one');
RESET SESSION AUTHORIZATION;
SELECT agent.set_runner_slots('cap-c', NULL);
SELECT agent.set_org_limits('e1000000-0000-4000-8000-00000000000c', NULL, NULL);

-- ---- a lease never outlasts the run's wall time, nor a cancel -------------------------------------
-- However often a runner heartbeats, it holds a run at most its wall time
-- from the claim plus runner_grace_seconds, and a cancelled one at most
-- runner_grace_seconds after the cancel: a runner that ignores either
-- loses the run (a failure of ours: refunded), and the org's limit and its
-- slot come back.
SELECT pg_temp.queue('c', 'z1'), pg_temp.queue('c', 'z2'), pg_temp.queue('c', 'z3');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is(pg_temp.claim('cap-c', 4), 'z1,z2', 'runner c claims two runs of org Z (the org''s limit is two)');
SELECT ok(agent.runner_mark_running(pg_temp.rid('cap-c'), pg_temp.tok('z1'), pg_temp.cid('z1'), 4444), '... and runs z1');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT state FROM pg_temp.inv('z3')), 'approved', '... z3 waits for the org''s limit');
-- fault injection: z1 was claimed a day ago (its wall time is 30 s)
UPDATE agent.invocations SET provisioned_at = provisioned_at - interval '1 day',
							 started_at = started_at - interval '1 day'
 WHERE id = pg_temp.cid('z1');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is((SELECT format('%s/%s', renewed, lost = ARRAY[pg_temp.cid('z1')])
			 FROM agent.runner_heartbeat(pg_temp.rid('cap-c'), pg_temp.inc('cap-c'), 2,
										 ARRAY[pg_temp.cid('z1'), pg_temp.cid('z2')])),
		  '1/t', 'a runner heartbeating past a run''s wall time and grace does not keep it: its heartbeat lists it lost');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('z1')),
		  'provision_failed/0/the runner "cap-c" held it past its wall time',
		  '... the run ended, a failure of ours, refunded, with the reason');
SELECT is((SELECT string_agg(event_type, ',' ORDER BY id) FROM agent.audit_events
			WHERE invocation_id = pg_temp.cid('z1') AND event_type IN ('credits.charged', 'credits.refunded', 'invocation.provision_failed')),
		  'credits.charged,credits.refunded,invocation.provision_failed', '... audited');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT results_eq($$SELECT pg_temp.error_of(format(s, pg_temp.rid('cap-c'), pg_temp.tok('z1'), pg_temp.cid('z1')))
					  FROM unnest(ARRAY[
						'SELECT agent.runner_append_output(%L, %L, %L, ''stdout'', ''late'')',
						'SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)']) s$$,
	$$SELECT '55000: lease of invocation <id> is not held by this runner' FROM generate_series(1, 2)$$,
	'... its late output and finish are refused (55000)');
SELECT is(pg_temp.claim('cap-c', 4), 'z3', 'the org''s limit came back: the runner claims z3');
RESET SESSION AUTHORIZATION;
-- a cancel it ignores
SELECT agent.set_tenant('e1000000-0000-4000-8000-00000000000c', 'e2000000-0000-4000-8000-00000000000c');
SELECT is(agent.cancel(pg_temp.cid('z2'), 'alice'), 'cancelling', 'the requester cancels z2 in flight');
SELECT agent.set_tenant(NULL, NULL);
SELECT is(agent.reap_expired_leases(), 0, '... within the grace the runner keeps it (to stop it and report)');
UPDATE agent.invocations SET cancel_requested_at = cancel_requested_at - interval '1 day'
 WHERE id = pg_temp.cid('z2');
SELECT is(agent.reap_expired_leases(), 1, 'a runner that ignores a cancel for longer loses the run to the reaper, heartbeat or not');
SELECT is((SELECT format('%s/%s/%s', state, credits_charged, state_reason) FROM pg_temp.inv('z2')),
		  'provision_failed/0/the runner "cap-c" did not stop it after it was cancelled',
		  '... a failure of ours, refunded, with the reason');
SET SESSION AUTHORIZATION tap_runner_c;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_finish(%L, %L, %L, ''{"status":"exited","exit_code":0}'', 0, NULL, true)',
			pg_temp.rid('cap-c'), pg_temp.tok('z2'), pg_temp.cid('z2'))),
		  '55000: lease of invocation <id> is not held by this runner', '... its late finish is refused');
RESET SESSION AUTHORIZATION;
SELECT is(agent.remove_runner('cap-c'), 1, 'runner c removed (z3 ends with it)');

-- ---- session affinity --------------------------------------------------------------------------------
SELECT pg_temp.queue('a', 'c1', 'e5000000-0000-4000-8000-00000000000a');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(agent.runner_finish(pg_temp.rid('tap-a'), pg_temp.tok('y1'), pg_temp.cid('y1'),
			'{"status":"exited","exit_code":0}', 0, NULL, true), 'succeeded', 'runner a frees its slot');
SELECT is(pg_temp.claim('tap-a', 1), 'c1', 'runner a claims the conversation''s first run');
SELECT ok((SELECT fresh FROM cl WHERE tag = 'c1'), '... in a new session');
SELECT is(ARRAY(SELECT agent.runner_live_sessions(pg_temp.rid('tap-a'))), ARRAY[(SELECT session FROM cl WHERE tag = 'c1')],
		  '... which is its live session');
SELECT is(ARRAY(SELECT agent.runner_skills_in_use(pg_temp.rid('tap-a'))), ARRAY['e7000000-0000-4000-8000-00000000000a'::uuid],
		  '... whose agent''s skill it may keep');
SELECT is(agent.runner_finish(pg_temp.rid('tap-a'), pg_temp.tok('c1'), pg_temp.cid('c1'),
			'{"status":"exited","exit_code":0}', 0, NULL, true), 'succeeded', '... and finishes');
RESET SESSION AUTHORIZATION;
SELECT pg_temp.queue('a', 'c2', 'e5000000-0000-4000-8000-00000000000a');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(pg_temp.claim('tap-b', 5), '', 'runner b does not take the conversation while its session''s runner lives');
SELECT is(ARRAY(SELECT agent.runner_live_sessions(pg_temp.rid('tap-b'))), '{}'::uuid[], '... nor sees its session');
RESET SESSION AUTHORIZATION;
-- runner a goes silent for longer than a lease
UPDATE agent.runners SET last_heartbeat = now() - 2 * agent._runner_lease() WHERE name = 'tap-a';
SELECT is(agent.reap_expired_leases(), 0, 'the reaper ends nothing of a silent runner that holds nothing');
SELECT isnt((SELECT gone_at FROM agent.runners WHERE name = 'tap-a'), NULL, '... and marks it gone');
SET SESSION AUTHORIZATION tap_runner_b;
SELECT is(pg_temp.claim('tap-b', 5), 'c2', 'once its runner is gone, runner b takes the conversation');
SELECT ok((SELECT fresh AND session <> (SELECT session FROM cl x WHERE x.tag = 'c1') FROM cl WHERE tag = 'c2'),
		  '... in a session rebuilt there');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s/%s', state, end_reason) FROM agent.sessions WHERE id = (SELECT session FROM cl WHERE tag = 'c1')),
		  'ended/runner_gone', 'the old session ended: its runner is gone');
SELECT is((SELECT format('%s/%s/%s', details ->> 'reason', details ->> 'previous_runner_id' = pg_temp.rid('tap-a')::text,
						 details ->> 'runner_id' = pg_temp.rid('tap-b')::text)
			 FROM agent.audit_events WHERE invocation_id = pg_temp.cid('c2') AND event_type = 'session.rebuilt'),
		  'runner_gone/t/t', '... audited: session.rebuilt, reason runner_gone, from a to b');
SET SESSION AUTHORIZATION tap_runner_a;
SELECT is(ARRAY(SELECT agent.runner_live_sessions(pg_temp.rid('tap-a'))), '{}'::uuid[],
		  'runner a, back, keeps no workspace of it');
RESET SESSION AUTHORIZATION;

-- ---- the auditor's view -----------------------------------------------------------------------------------
SET ROLE agent_auditor;
SELECT is((SELECT string_agg(format('%s:%s:%s:%s:%s', name, host, state, live, leases), ',' ORDER BY name)
			 FROM agent.runner_status WHERE name LIKE 'tap-%'),
		  'tap-a:host-a:active:f:0,tap-b:host-b:active:t:1', 'agent.runner_status shows each runner and its leases');
SELECT is((SELECT string_agg(format('%s:%s:%s:%s:%s:%s', r ->> 'name', r ->> 'local', r ->> 'host', r ->> 'slots',
								   r ->> 'live', r ->> 'leases'), ',' ORDER BY r ->> 'name')
			 FROM agent.worker_status() w, jsonb_array_elements(w.runners) r WHERE r ->> 'name' LIKE 'tap-%'),
		  'tap-a:false:host-a:1:false:0,tap-b:false:host-b:2:true:1',
		  'agent.worker_status() lists every runner with its slots, liveness and leases');
SELECT is((SELECT count(*)::integer FROM agent.worker_status()), 1, '... in the one row of the supervisor');
RESET SESSION AUTHORIZATION;
-- What an operator can tell of a runner (issue 27, item 12): a runner that
-- was killed keeps its leases for a lease, but once it has missed a
-- heartbeat (every third of a lease, and half of one more for a slow
-- transaction) it is no longer shown live: unconfirmed.  Runner b last
-- heard from 0.6 of a lease ago, a (above) longer than a lease ago.
UPDATE agent.runners SET last_heartbeat = now() - 0.6 * agent._runner_lease() WHERE name = 'tap-b';
SET ROLE agent_auditor;
SELECT is((SELECT string_agg(format('%s:%s:%s', name, live, liveness), ',' ORDER BY name)
			 FROM agent.runner_status WHERE name IN ('tap-a', 'tap-b')),
		  'tap-a:f:gone,tap-b:t:unconfirmed',
		  'agent.runner_status: a runner that missed a heartbeat is unconfirmed (it still holds its leases: live), not live');
SELECT is((SELECT string_agg(format('%s:%s', r ->> 'name', r ->> 'liveness'), ',' ORDER BY r ->> 'name')
			 FROM agent.worker_status() w, jsonb_array_elements(w.runners) r
			WHERE r ->> 'name' IN ('tap-a', 'tap-b')),
		  'tap-a:gone,tap-b:unconfirmed', '... and so does agent.worker_status()');
RESET ROLE;
UPDATE agent.runners SET last_heartbeat = now() - 0.45 * agent._runner_lease() WHERE name = 'tap-b';
SELECT is((SELECT liveness FROM agent.runner_status WHERE name = 'tap-b'), 'live',
		  '... while a heartbeat late by less than half an interval is live');
SET ROLE agent_backend;
SELECT is(pg_temp.error_of('SELECT agent.worker_status()'), '42501: permission denied for function worker_status',
		  'the backend may not call agent.worker_status()');
RESET ROLE;
SET ROLE agent_runner;
SELECT is(pg_temp.error_of('SELECT agent._supervisor_status()'), '42501: permission denied for function _supervisor_status',
		  'nor may a runner read the supervisor''s status');
RESET ROLE;

-- ---- every balance and chain --------------------------------------------------------------------------------
SELECT is((SELECT count(*)::integer FROM agent.credit_balances b WHERE b.org_id::text LIKE 'e1000000-%'
			  AND b.balance <> (SELECT sum(l.amount) FROM agent.credit_ledger l WHERE l.org_id = b.org_id)),
		  0, 'every balance equals its ledger sum');
SELECT is((SELECT count(*)::integer FROM agent.invocations i WHERE i.org_id::text LIKE 'e1000000-%'
			  AND agent._state_is_terminal(i.state)
			  AND (SELECT count(*) FROM agent.audit_events e WHERE e.invocation_id = i.id
					AND e.event_type IN ('invocation.finished', 'invocation.provision_failed')) <> 1),
		  0, 'every ended run has exactly one outcome event');
SELECT is((SELECT count(*)::integer FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v
			WHERE o.id::text LIKE 'e1000000-%' AND NOT v.ok), 0, 'every chain verifies');

SELECT * FROM finish();
ROLLBACK;
