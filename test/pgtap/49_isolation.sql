-- Isolation classes (issue 32, docs/security.md "The two isolation
-- classes"), through the functions each role calls: the operator sets a
-- plan's or an org's class, the org's admin its org's (never below its
-- plan's), the backend an agent's (which only narrows); a request gets the
-- strictest; the card shows it, the approval binds it, the invocation's
-- copy is frozen; runners report the classes they run, and the claim gives
-- a gvisor run only to one that reported gvisor (a runner that did not
-- never takes it; queue_status says why it waits, with the runners'
-- reasons); a class rewritten past the freeze fails the run, uncharged.
-- The supervisor is paused while this runs (test/run.sh); everything here
-- is rolled back.
BEGIN;
UPDATE agent.invocations SET state = 'cancelled', state_reason = 'set aside by 49_isolation'
 WHERE state = 'approved';

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('a7600000-0000-4000-8000-000000000001', 'tap-isolation', true);
INSERT INTO agent.plans (plan, code_execution) VALUES ('tap-isolated', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a7100000-0000-4000-8000-00000000000a', 'Isolation org A', 'pro'),
	('a7100000-0000-4000-8000-00000000000b', 'Isolation org B', 'tap-isolated');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('a7200000-0000-4000-8000-00000000000a', 'a7100000-0000-4000-8000-00000000000a', 'A'),
	('a7200000-0000-4000-8000-00000000000b', 'a7100000-0000-4000-8000-00000000000b', 'B');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('a7400000-0000-4000-8000-00000000000a', 'a7100000-0000-4000-8000-00000000000a',
	 'a7200000-0000-4000-8000-00000000000a', 'A agent', 'specialist', 'a7600000-0000-4000-8000-000000000001', true),
	('a7400000-0000-4000-8000-0000000000a2', 'a7100000-0000-4000-8000-00000000000a',
	 'a7200000-0000-4000-8000-00000000000a', 'A agent 2', 'specialist', 'a7600000-0000-4000-8000-000000000001', true),
	('a7400000-0000-4000-8000-00000000000b', 'a7100000-0000-4000-8000-00000000000b',
	 'a7200000-0000-4000-8000-00000000000b', 'B agent', 'specialist', 'a7600000-0000-4000-8000-000000000001', true);
SELECT agent.grant_credits('a7100000-0000-4000-8000-00000000000a', 100, 'tap');
SELECT agent.grant_credits('a7100000-0000-4000-8000-00000000000b', 100, 'tap');
UPDATE agent.orgs SET max_concurrent_runs = 10 WHERE id::text LIKE 'a7100000-%';
CREATE ROLE tap_iso_ns LOGIN;
CREATE ROLE tap_iso_gv LOGIN;
GRANT agent_runner TO tap_iso_ns, tap_iso_gv;

CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
CREATE TEMP TABLE reg (name text PRIMARY KEY, runner uuid, incarnation uuid);
CREATE FUNCTION pg_temp.rid(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT runner FROM reg WHERE name = n $$;
CREATE FUNCTION pg_temp.inc(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT incarnation FROM reg WHERE name = n $$;
-- request as an agent of org a (or b) and return the result
CREATE FUNCTION pg_temp.request(tag text, ag text DEFAULT 'a', org text DEFAULT 'a')
	RETURNS agent.execution_request LANGUAGE plpgsql AS $$
DECLARE
	r	agent.execution_request;
	w	uuid := ('a7200000-0000-4000-8000-00000000000' || org)::uuid;
BEGIN
	PERFORM agent.set_tenant(('a7100000-0000-4000-8000-00000000000' || org)::uuid, w);
	r := agent.request_execution(w, ('a7400000-0000-4000-8000-0000000000' || lpad(ag, 2, '0'))::uuid, NULL,
								 'python', 'print(1) # ' || tag, 'requester', NULL, tag);
	PERFORM agent.set_tenant(NULL, NULL);
	RETURN r;
END
$$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS agent.invocations LANGUAGE sql
	AS $$ SELECT * FROM agent.invocations WHERE idempotency_key = k AND org_id::text LIKE 'a7100000-%' $$;
CREATE FUNCTION pg_temp.approve(tag text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM agent.set_tenant((pg_temp.inv(tag)).org_id, (pg_temp.inv(tag)).workspace_id);
	PERFORM agent.approve((pg_temp.inv(tag)).approval_id, 'approver');
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
-- what a runner's claim of n gave it: "tag=class,..."
CREATE FUNCTION pg_temp.claim(name text, n integer) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(substring(c.code from '# (\S+)$') || '=' || c.isolation, ',' ORDER BY c.code), '')
	  FROM agent.runner_claim(pg_temp.rid(name), pg_temp.inc(name), n) c
$$;

SELECT plan(36);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;

-- ---- who may set a class --------------------------------------------------------
SELECT results_eq($$SELECT pg_temp.error_of(s) FROM unnest(ARRAY[
		'SELECT agent.set_isolation(''firecracker'', plan => ''pro'')',
		'SELECT agent.set_isolation(NULL, plan => ''pro'')',
		'SELECT agent.set_isolation(''gvisor'')',
		'SELECT agent.set_isolation(''gvisor'', ''pro'', ''a7100000-0000-4000-8000-00000000000a'')',
		'SELECT agent.set_isolation(''gvisor'', plan => ''platinum'')',
		'SELECT agent.set_isolation(''gvisor'', org => ''a7100000-0000-4000-8000-0000000000ff'')']) s$$,
	ARRAY['22023: unknown isolation class "firecracker"', '22004: isolation must not be null',
		  '22023: exactly one of plan and org must be given', '22023: exactly one of plan and org must be given',
		  'P0002: plan "platinum" does not exist', 'P0002: org <id> does not exist'],
	'set_isolation refuses an unknown class, NULL, not exactly one of plan and org, an unknown plan or org');
SELECT ok(NOT has_function_privilege('agent_backend', 'agent.set_isolation(text, text, uuid)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_admin', 'agent.set_isolation(text, text, uuid)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_runner', 'agent.set_isolation(text, text, uuid)', 'EXECUTE'),
		  'only the operator sets a plan''s class');
SELECT ok(has_function_privilege('agent_admin', 'agent.set_org_isolation(text, text)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_backend', 'agent.set_org_isolation(text, text)', 'EXECUTE')
		  AND has_function_privilege('agent_backend', 'agent.set_agent_isolation(uuid, text, text)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_admin', 'agent.set_agent_isolation(uuid, text, text)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_runner', 'agent.set_agent_isolation(uuid, text, text)', 'EXECUTE'),
		  'the admin sets its org''s class, the backend an agent''s, and neither the other''s');
SELECT ok(NOT has_table_privilege('agent_backend', 'agent.isolation_settings', 'INSERT')
		  AND NOT has_table_privilege('agent_backend', 'agent.agent_isolation', 'INSERT')
		  AND NOT has_table_privilege('agent_runner', 'agent.runner_isolation', 'INSERT')
		  AND NOT has_table_privilege('agent_backend', 'agent.invocations', 'UPDATE'),
		  'no role writes the classes'' tables (or an invocation) around the functions');

-- ---- a request's class: the strictest -------------------------------------------
SELECT pg_temp.request('ns-1');
SELECT is((pg_temp.inv('ns-1')).isolation, 'namespaces', 'with nothing set, a run is namespaced');
SELECT ok(agent.set_isolation('gvisor', plan => 'tap-isolated'), 'the operator puts plan tap-isolated on gvisor');
SELECT ok(NOT agent.set_isolation('gvisor', plan => 'tap-isolated'), '... once');
SET ROLE agent_admin;
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000b', NULL);
SELECT is(pg_temp.error_of('SELECT agent.set_org_isolation(''namespaces'', ''admin-b'')'),
		  '42501: the isolation class of this organization cannot be weaker than its plan''s (gvisor)',
		  'org B''s admin cannot go below its plan''s class');
SELECT ok(agent.set_org_isolation('gvisor', 'admin-b'), '... it may set gvisor, its plan''s class, as its own');
SELECT agent.set_tenant(NULL, NULL);
RESET ROLE;
SELECT is((SELECT status FROM pg_temp.request('b-1', 'b', 'b')), 'pending_approval', 'org B requests');
SELECT is((pg_temp.inv('b-1')).isolation, 'gvisor', '... and its run is in gvisor, its plan''s class');

SET ROLE agent_backend;
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000b', 'a7200000-0000-4000-8000-00000000000b');
SELECT ok(agent.set_agent_isolation('a7400000-0000-4000-8000-00000000000b', 'gvisor', 'alice')
		  AND agent.set_agent_isolation('a7400000-0000-4000-8000-00000000000b', 'namespaces', 'alice'),
		  'the backend sets and unsets agent B''s class');
SELECT is((SELECT format('%s/%s/%s/%s', plan_isolation, org_isolation, agent_isolation, isolation)
			 FROM agent.isolation_policy('a7400000-0000-4000-8000-00000000000b')),
		  'gvisor/gvisor/namespaces/gvisor', 'an agent asking for namespaces does not weaken its org''s gvisor');
SELECT is(pg_temp.error_of('SELECT agent.set_agent_isolation(''a7400000-0000-4000-8000-00000000000a'', ''gvisor'', ''alice'')'),
		  'P0002: agent <id> does not exist', 'the backend cannot set another tenant''s agent');
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000a', 'a7200000-0000-4000-8000-00000000000a');
SELECT ok(agent.set_agent_isolation('a7400000-0000-4000-8000-00000000000a', 'gvisor', 'alice'),
		  'org A (namespaces) narrows agent A to gvisor');
SELECT agent.set_tenant(NULL, NULL);
RESET ROLE;
SELECT pg_temp.request('b-2', 'b', 'b');
SELECT pg_temp.request('a-2');
SELECT pg_temp.request('a2-ns', 'a2');
SELECT is(format('%s %s', (pg_temp.inv('b-2')).isolation, (pg_temp.inv('a-2')).isolation),
		  'gvisor gvisor', 'the gvisor plan''s agent, and the agent narrowed to gvisor, run in gvisor');
SELECT is((pg_temp.inv('a2-ns')).isolation, 'namespaces', 'org A''s other agent stays namespaced');
SELECT ok(EXISTS (SELECT 1 FROM agent.audit_events WHERE org_id = 'a7100000-0000-4000-8000-00000000000a'
					AND event_type = 'agent.changed' AND details ->> 'setting' = 'isolation'
					AND details ->> 'to' = 'gvisor'),
		  'an agent''s class is an event of its org''s chain');

-- ---- the card, the approval, the freeze ---------------------------------------------
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000a', 'a7200000-0000-4000-8000-00000000000a');
SELECT is((SELECT string_agg(c.isolation, ',' ORDER BY c.code) FROM agent.pending_approvals() c
			WHERE c.invocation_id IN ((pg_temp.inv('a-2')).id, (pg_temp.inv('a2-ns')).id)),
		  'gvisor,namespaces', 'the card shows each run''s class');
SELECT agent.set_tenant(NULL, NULL);
SELECT pg_temp.approve('a-2');
SELECT pg_temp.approve('a2-ns');
SELECT pg_temp.approve('b-2');
SELECT is((SELECT approved_isolation FROM agent.approval_requests WHERE invocation_id = (pg_temp.inv('a-2')).id),
		  'gvisor', 'the approval records the class it covers');
SELECT ok(EXISTS (SELECT 1 FROM agent.audit_events WHERE invocation_id = (pg_temp.inv('a-2')).id
					AND event_type = 'approval.approved' AND details ->> 'isolation' = 'gvisor'),
		  '... and so does its event');
SELECT is(pg_temp.error_of(format('UPDATE agent.invocations SET isolation = ''namespaces'' WHERE id = %L',
								  (pg_temp.inv('a-2')).id)),
		  '55000: cannot change the isolation class of invocation <id>', 'the invocation''s class is frozen');

-- ---- runners: what they run, what they claim ---------------------------------------
SET SESSION AUTHORIZATION tap_iso_ns;
INSERT INTO reg SELECT 'ns', r.runner_id, r.incarnation FROM agent.runner_register('tap-iso-ns', 'host-ns', '1.0', 4) r;
SELECT is(agent.runner_report_isolation(pg_temp.rid('ns'), pg_temp.inc('ns'), '{}',
										'gvisor: runsc not found in PATH'),
		  ARRAY['namespaces'], 'a runner without runsc reports namespaces only (always included)');
SELECT is(pg_temp.error_of(format('SELECT agent.runner_report_isolation(%L, %L, ''{kata}'')',
								  pg_temp.rid('ns'), pg_temp.inc('ns'))),
		  '22023: unknown isolation class "kata"', 'a runner cannot report a class that does not exist');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION tap_iso_gv;
INSERT INTO reg SELECT 'gv', r.runner_id, r.incarnation FROM agent.runner_register('tap-iso-gv', 'host-gv', '1.0', 4) r;
SELECT is(pg_temp.error_of(format('SELECT agent.runner_report_isolation(%L, %L, ''{gvisor}'')',
								  pg_temp.rid('ns'), pg_temp.inc('ns'))),
		  '42501: permission denied for runner <id>', 'a runner cannot report for another');
RESET SESSION AUTHORIZATION;
-- (the cluster's own local runner, when it is live, adds its reason to
-- the detail: only the test runner's is asserted)
SELECT is((SELECT string_agg(format('%s %s', waiting_for,
									regexp_replace(regexp_replace(detail, 'local: [^;)]*(; )?', ''), '; \)', ')')), '; ')
			 FROM agent.queue_status() WHERE invocation_id = (pg_temp.inv('a-2')).id),
		  'isolation_unavailable no live runner can run the gvisor isolation class (tap-iso-ns: gvisor: runsc not found in PATH)',
		  'queue_status: the gvisor run waits, with the reason the runner gave');
SET SESSION AUTHORIZATION tap_iso_ns;
SELECT is(pg_temp.claim('ns', 4), 'a2-ns=namespaces', 'the runner without gvisor takes only the namespaced run');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT string_agg(state, ',') FROM agent.invocations WHERE id IN ((pg_temp.inv('a-2')).id, (pg_temp.inv('b-2')).id)),
		  'approved,approved', '... the gvisor runs are left approved, uncharged');
SET SESSION AUTHORIZATION tap_iso_gv;
SELECT is(agent.runner_report_isolation(pg_temp.rid('gv'), pg_temp.inc('gv'), '{gvisor,namespaces,gvisor}'),
		  ARRAY['namespaces', 'gvisor'], 'a runner with runsc reports both (once each)');
SELECT is(pg_temp.claim('gv', 4), 'a-2=gvisor,b-2=gvisor', 'it takes the gvisor runs, with their class');
RESET SESSION AUTHORIZATION;

-- a class rewritten past the freeze (an owner's doing) is not claimed: it fails, uncharged
SELECT pg_temp.request('a-3');
SELECT pg_temp.approve('a-3');
ALTER TABLE agent.invocations DISABLE TRIGGER invocations_freeze_isolation;
UPDATE agent.invocations SET isolation = 'namespaces' WHERE id = (pg_temp.inv('a-3')).id;
ALTER TABLE agent.invocations ENABLE TRIGGER invocations_freeze_isolation;
SET SESSION AUTHORIZATION tap_iso_ns;
SELECT is(pg_temp.claim('ns', 4), '', 'a gvisor-approved run rewritten to namespaces is not claimed');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s %s %s', state, credits_charged, state_reason) FROM pg_temp.inv('a-3')),
		  format('provision_failed 0 could not provision: the isolation class of invocation %s is not the one its approval covers',
				 (pg_temp.inv('a-3')).id),
		  '... it fails, uncharged, with the reason');

-- an approval policy's approval binds the class too: the run is claimable
SET ROLE agent_admin;
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000a', NULL);
SELECT agent.set_approval_policy('automatic', 'admin-a');
SELECT agent.set_tenant(NULL, NULL);
RESET ROLE;
SELECT is((SELECT status FROM pg_temp.request('a-auto')), 'approved',
		  'org A''s automatic policy approves agent A''s (gvisor) run in its request');
SELECT is((SELECT format('%s %s %s', a.decided_by, a.approved_isolation, i.isolation)
			 FROM agent.approval_requests a JOIN agent.invocations i ON i.id = a.invocation_id
			WHERE i.id = (pg_temp.inv('a-auto')).id),
		  'policy gvisor gvisor', '... its card binds the gvisor class, as a person''s approval does');
SET SESSION AUTHORIZATION tap_iso_gv;
SELECT is(pg_temp.claim('gv', 4), 'a-auto=gvisor', '... and the gvisor runner claims it');
RESET SESSION AUTHORIZATION;
SET ROLE agent_admin;
SELECT agent.set_tenant('a7100000-0000-4000-8000-00000000000a', NULL);
SELECT agent.remove_approval_policy('admin-a');
SELECT agent.set_tenant(NULL, NULL);
RESET ROLE;

SELECT is((SELECT count(*)::integer FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v
			WHERE o.id::text LIKE 'a7100000-%' AND NOT v.ok), 0, 'every chain verifies');

SELECT * FROM finish();
ROLLBACK;
