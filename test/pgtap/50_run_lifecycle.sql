-- A run's life in the database, without a jail, through a runner's steps
-- (the production path: test/pgtap/fixture/runner.psql): the one billing
-- rule, the claim (fair across orgs, within each org's and workspace's
-- limits, unfunded rows refused without taking a slot), finishing (a
-- result the database refuses reaches the runner with its SQLSTATE, and
-- the runner's record of the failure ends the row, refunded), and the
-- runner's restart (ours failed: refunded; a staged result applied as it
-- is).  The supervisor is paused while this runs (test/run.sh), so only
-- these calls claim.
BEGIN;
-- The claim takes every approved row of the database: approved rows other
-- suites left behind (the regress suite commits its own) are set aside for
-- the length of this transaction, so the claims below see only this file's.
UPDATE agent.invocations SET state = 'cancelled', state_reason = 'set aside by 50_run_lifecycle'
 WHERE state = 'approved';
SELECT plan(46);
\ir fixture/runner.psql

-- ---- the billing rule ----------------------------------------------------
CREATE TEMP TABLE outcomes AS
SELECT c.name, o.state, o.charged
  FROM (VALUES
	('ours: an error', NULL::jsonb, 'jail died', false),
	('no verdict', NULL, NULL, false),
	('setup error', '{"status":"setup_error","setup_error":"no workspace"}', NULL, false),
	('exit 0', '{"status":"exited","exit_code":0}', NULL, false),
	('exit 3', '{"status":"exited","exit_code":3}', NULL, false),
	('signal', '{"status":"signaled","signal":9}', NULL, false),
	('oom', '{"status":"signaled","signal":9,"oom_killed":true}', NULL, false),
	('workspace limit', '{"status":"signaled","signal":9,"file_too_large":true}', NULL, false),
	('exit 0 past a file limit', '{"status":"exited","exit_code":0,"file_too_large":true}', NULL, false),
	('timeout', '{"status":"timed_out","timed_out":true}', NULL, false),
	('timeout, cancel requested', '{"status":"timed_out","timed_out":true}', NULL, true),
	('killed, cancel requested', '{"status":"killed","killed":true}', NULL, true),
	('killed by the host', '{"status":"killed","killed":true}', NULL, false),
	('ours, cancel requested', NULL, 'supervisor restarted', true)
	) c(name, verdict, error, cancel),
	LATERAL agent._run_outcome(c.verdict, c.error, c.cancel) o;
SELECT results_eq('SELECT name, state, charged FROM outcomes ORDER BY name',
	$$VALUES ('exit 0', 'succeeded', true), ('exit 0 past a file limit', 'failed', true),
			 ('exit 3', 'failed', true),
			 ('killed by the host', 'killed', false), ('killed, cancel requested', 'cancelled', true),
			 ('no verdict', 'provision_failed', false), ('oom', 'failed', true),
			 ('ours, cancel requested', 'provision_failed', false),
			 ('ours: an error', 'provision_failed', false), ('setup error', 'provision_failed', false),
			 ('signal', 'failed', true), ('timeout', 'timed_out', true),
			 ('timeout, cancel requested', 'timed_out', true), ('workspace limit', 'failed', true)$$,
	'_run_outcome(): the payload''s doing is charged, a failure of ours is refunded');
SELECT results_eq($$SELECT s FROM unnest(ARRAY['pending_approval', 'approved', 'provisioning', 'running',
		'succeeded', 'failed', 'timed_out', 'killed', 'denied', 'expired', 'cancelled',
		'provision_failed', 'insufficient_credits']) s WHERE agent._state_is_terminal(s) ORDER BY s$$,
	$$VALUES ('cancelled'), ('denied'), ('expired'), ('failed'), ('insufficient_credits'), ('killed'),
			 ('provision_failed'), ('succeeded'), ('timed_out')$$,
	'_state_is_terminal(): the nine states without a way out, from the transition table');
SELECT is((SELECT reason FROM agent._run_outcome('{"status":"signaled","signal":9,"oom_killed":true}', NULL, false)),
		  'out of memory', 'the reason names an OOM');
SELECT is((SELECT reason FROM agent._run_outcome('{"status":"killed","killed":true}', NULL, true, 'bob')),
		  'cancelled by bob', 'the reason names who cancelled');

-- ---- fixtures: four pro orgs --------------------------------------------
INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('5e000000-0000-4000-8000-000000000001', 'tap-lifecycle', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('5a000000-0000-4000-8000-00000000000a', 'A (backlog)', 'pro'),
	('5a000000-0000-4000-8000-00000000000b', 'B (one run)', 'pro'),
	('5a000000-0000-4000-8000-00000000000c', 'C (cannot pay)', 'pro'),
	('5a000000-0000-4000-8000-00000000000d', 'D (late)', 'pro');
INSERT INTO agent.workspaces (id, org_id, name)
	SELECT ('5b000000-0000-4000-8000-00000000000' || x)::uuid,
		   ('5a000000-0000-4000-8000-00000000000' || x)::uuid, x
	  FROM unnest(ARRAY['a', 'b', 'c', 'd']) x;
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('5b000000-0000-4000-8000-0000000000a2', '5a000000-0000-4000-8000-00000000000a', 'a2');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled)
	SELECT ('5c000000-0000-4000-8000-00000000000' || x)::uuid,
		   ('5a000000-0000-4000-8000-00000000000' || x)::uuid,
		   ('5b000000-0000-4000-8000-00000000000' || x)::uuid, x, 'specialist',
		   '5e000000-0000-4000-8000-000000000001', true
	  FROM unnest(ARRAY['a', 'b', 'c', 'd']) x;
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('5c000000-0000-4000-8000-0000000000a2', '5a000000-0000-4000-8000-00000000000a',
	 '5b000000-0000-4000-8000-0000000000a2', 'a2', 'specialist', '5e000000-0000-4000-8000-000000000001', true);
SELECT agent.grant_credits(('5a000000-0000-4000-8000-00000000000' || x)::uuid, 100, 'tap')
  FROM unnest(ARRAY['a', 'b', 'd']) x;
-- Org c can pay for a run when it asks (a request the balance cannot cover is
-- refused at once), and can no longer when its runs are claimed (below).
SELECT agent.grant_credits('5a000000-0000-4000-8000-00000000000c', 2, 'tap');

-- request and approve `n` shell runs for org x (workspace ws), tagged tag1..tagn
CREATE FUNCTION pg_temp.queue(x text, n integer, tag text, ws text DEFAULT NULL) RETURNS void
	LANGUAGE plpgsql AS $$
DECLARE
	r	agent.execution_request;
	w	uuid := coalesce(ws, '5b000000-0000-4000-8000-00000000000' || x)::uuid;
	a	uuid := CASE WHEN ws IS NULL THEN '5c000000-0000-4000-8000-00000000000' || x
					 ELSE '5c000000-0000-4000-8000-0000000000a2' END::uuid;
BEGIN
	PERFORM agent.set_tenant(('5a000000-0000-4000-8000-00000000000' || x)::uuid, w);
	FOR i IN 1..n LOOP
		r := agent.request_execution(w, a, NULL, 'shell', 'true', 'requester', NULL, tag || i);
		PERFORM agent.approve(r.approval_id, 'approver');
	END LOOP;
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
CREATE FUNCTION pg_temp.tag(inv uuid) RETURNS text LANGUAGE sql
	AS $$ SELECT idempotency_key FROM agent.invocations WHERE id = inv $$;
CREATE FUNCTION pg_temp.state(k text) RETURNS text LANGUAGE sql
	AS $$ SELECT state FROM agent.invocations WHERE idempotency_key = k
		   AND org_id::text LIKE '5a000000-%' $$;
CREATE FUNCTION pg_temp.id(k text) RETURNS uuid LANGUAGE sql
	AS $$ SELECT id FROM agent.invocations WHERE idempotency_key = k AND org_id::text LIKE '5a000000-%' $$;
CREATE FUNCTION pg_temp.finish(k text, verdict text, error text DEFAULT NULL) RETURNS text
	LANGUAGE sql AS $$ SELECT pg_temp.fx_finish(pg_temp.id(k), verdict, error) $$;

SELECT pg_temp.queue('a', 6, 'a');
SELECT pg_temp.queue('c', 30, 'c');
SELECT pg_temp.queue('b', 1, 'b');
INSERT INTO agent.credit_ledger (org_id, kind, amount, reason)
	VALUES ('5a000000-0000-4000-8000-00000000000c', 'adjust', -1, 'tap: less than a run');

-- ---- the claim ------------------------------------------------------------
CREATE TEMP TABLE claimed AS SELECT pg_temp.tag(id) AS tag FROM pg_temp.fx_claim(3) id;
SELECT results_eq('SELECT tag FROM claimed ORDER BY tag', $$VALUES ('a1'), ('a2'), ('b1')$$,
	'three free slots: the backlogged org gets its limit (2), the other org its run');
SELECT is((SELECT count(*) FROM agent.invocations WHERE idempotency_key LIKE 'c%'
			 AND state = 'insufficient_credits' AND org_id = '5a000000-0000-4000-8000-00000000000c'),
		  30::bigint, 'all 30 unfunded rows are refused in the same claim, without a slot');
SELECT is((SELECT count(*) FROM agent.credit_ledger WHERE org_id = '5a000000-0000-4000-8000-00000000000c'
			 AND kind = 'charge'), 0::bigint, '... and charged nothing');
SELECT is((SELECT count(*) FROM agent.audit_events WHERE org_id = '5a000000-0000-4000-8000-00000000000c'
			 AND event_type = 'invocation.insufficient_credits'), 30::bigint, '... each audited');
SELECT is((SELECT count(*) FROM pg_temp.fx_claim(10)), 0::bigint,
		  'the backlogged org at its limit gets no more slots, however many are free');
SELECT is(pg_temp.state('a3'), 'approved', 'its next run waits');

-- A late org with nothing in flight goes before the backlog of an org that
-- already has runs in flight, although it was approved later.
SELECT pg_temp.finish('a1', '{"status":"exited","exit_code":0}');
SELECT pg_temp.queue('d', 1, 'd');
SELECT is((SELECT string_agg(pg_temp.tag(id), ',') FROM pg_temp.fx_claim(1) id), 'd1',
		  'one free slot: the org with nothing in flight first, not the older backlog');
SELECT is((SELECT string_agg(pg_temp.tag(id), ',') FROM pg_temp.fx_claim(1) id), 'a3',
		  'the next free slot: the backlog, in approval order');

-- Limits are the operator's data.
SELECT agent.set_org_limits('5a000000-0000-4000-8000-00000000000a', 3, NULL);
SELECT is((SELECT string_agg(pg_temp.tag(id), ',') FROM pg_temp.fx_claim(5) id), 'a4',
		  'an org limit of 3: one more run of the backlog');
SELECT agent.set_org_limits('5a000000-0000-4000-8000-00000000000a', 10, NULL);
UPDATE agent.workspaces SET max_concurrent_runs = 1 WHERE id = '5b000000-0000-4000-8000-0000000000a2';
SELECT pg_temp.queue('a', 3, 'w', '5b000000-0000-4000-8000-0000000000a2');
SELECT is((SELECT string_agg(pg_temp.tag(id), ',' ORDER BY pg_temp.tag(id)) FROM pg_temp.fx_claim(10) id),
		  'a5,a6,w1', 'a workspace limit of 1: one run of that workspace, the org''s others still run');
SELECT is(pg_temp.state('w2'), 'approved', 'the workspace''s next run waits');
SELECT is((SELECT count(*) FROM agent.invocations
			WHERE org_id = '5a000000-0000-4000-8000-00000000000a' AND state = 'provisioning'),
		  6::bigint, 'the org has six in flight (a2 to a6 and w1), below its limit of 10');
-- A row that cannot be claimed fails alone (fault injection: a trigger
-- stands in for a bug or a broken row, raising when the claim moves that
-- row to provisioning): it ends provision_failed with the reason,
-- uncharged and audited, and the same claim goes on to the next org's.
SELECT pg_temp.queue('b', 1, 'x');
SELECT pg_temp.queue('d', 1, 'e');
CREATE FUNCTION pg_temp.broken_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state = 'provisioning' AND NEW.idempotency_key = 'x1' THEN
		RAISE EXCEPTION 'injected fault';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER tap_broken_row BEFORE UPDATE ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION pg_temp.broken_row();
SELECT is((SELECT string_agg(pg_temp.tag(id), ',') FROM pg_temp.fx_claim(10) id), 'e1',
		  'a row whose claim fails does not stop the claim: the next org''s run is claimed');
DROP TRIGGER tap_broken_row ON agent.invocations;
SELECT is((SELECT state || ': ' || state_reason FROM agent.invocations WHERE idempotency_key = 'x1'
			 AND org_id = '5a000000-0000-4000-8000-00000000000b'),
		  'provision_failed: could not provision: injected fault', '... it ends provision_failed, with the reason');
SELECT is((SELECT count(*) FROM agent.credit_ledger l JOIN agent.invocations i ON i.id = l.invocation_id
			WHERE i.idempotency_key = 'x1' AND i.org_id = '5a000000-0000-4000-8000-00000000000b'),
		  0::bigint, '... uncharged (its charge rolled back with the rest)');
SELECT is((SELECT string_agg(e.event_type, ',' ORDER BY e.id) FROM agent.audit_events e
			 JOIN agent.invocations i ON i.id = e.invocation_id
			WHERE i.idempotency_key = 'x1' AND i.org_id = '5a000000-0000-4000-8000-00000000000b'
			  AND e.event_type NOT LIKE 'capability.%' AND e.event_type <> 'approval.approved'),
		  'invocation.provision_failed', '... audited once, nothing of the claim left');
SELECT is((SELECT credits_charged FROM agent.invocations WHERE idempotency_key = 'e1'
			 AND org_id = '5a000000-0000-4000-8000-00000000000d'), 2, '... the other run charged as usual');
SELECT ok(agent.invocation_transition_allowed('running', 'provision_failed'),
		  'running -> provision_failed is a legal transition (a failure of ours after the start)');

-- ---- finishing ------------------------------------------------------------
SELECT pg_temp.fx_mark_running(id, 4242) FROM agent.invocations WHERE idempotency_key IN ('a2', 'a3', 'b1')
   AND org_id::text LIKE '5a000000-%';
SELECT is(pg_temp.state('a2'), 'running', 'marked running');
SELECT is(pg_temp.finish('a2', '{"status":"exited","exit_code":3}'), 'failed', 'exit 3: failed');
SELECT is((SELECT credits_charged FROM agent.invocations WHERE idempotency_key = 'a2'
			 AND org_id::text LIKE '5a000000-%'), 2, '... charged');
SELECT is(pg_temp.finish('a3', NULL, 'the resident jail launcher closed the connection without a verdict'),
		  'provision_failed', 'a launcher that died mid-run: provision_failed from running');
SELECT is((SELECT string_agg(kind || ':' || amount, ',' ORDER BY id) FROM agent.credit_ledger
			WHERE invocation_id = (SELECT id FROM agent.invocations WHERE idempotency_key = 'a3'
									AND org_id::text LIKE '5a000000-%')),
		  'charge:-2,refund:2', '... refunded in the same transaction');
SELECT is((SELECT count(*) FROM agent.agent_tool_calls t JOIN agent.invocations i ON i.id = t.invocation_id
			WHERE i.idempotency_key = 'a3' AND i.org_id::text LIKE '5a000000-%'), 1::bigint,
		  '... with its tool call');
SELECT is(pg_temp.fx_error_of($$SELECT pg_temp.finish('a3', '{"status":"exited","exit_code":0}')$$),
		  '55000: lease of invocation <id> is not held by this runner',
		  'a second result for a finished run is refused: its lease ended with it');
SELECT is(pg_temp.state('a3'), 'provision_failed', '... and changes nothing');
SELECT is((SELECT count(*) FROM agent.run_results), 0::bigint, 'nothing is left staged');

-- Files: staged with the result, saved when it is applied, within the quota.
-- (room for 10 bytes more: set after set_org_limits' own audit event,
-- which counts against the org's storage too)
SELECT agent.set_org_limits('5a000000-0000-4000-8000-00000000000b', NULL, 0);
UPDATE agent.orgs SET max_stored_bytes =
	(SELECT stored_bytes FROM agent.org_usage WHERE org_id = '5a000000-0000-4000-8000-00000000000b') + 10
 WHERE id = '5a000000-0000-4000-8000-00000000000b';
SELECT pg_temp.fx_store_file(id, 'small.txt', 'saved', NULL, '\x3031323334'::bytea)
  FROM agent.invocations WHERE idempotency_key = 'b1' AND org_id::text LIKE '5a000000-%';
SELECT pg_temp.fx_store_file(id, 'big.txt', 'saved', NULL, decode(repeat('78', 100), 'hex'))
  FROM agent.invocations WHERE idempotency_key = 'b1' AND org_id::text LIKE '5a000000-%';
SELECT is((SELECT count(*) FROM agent.files WHERE org_id = '5a000000-0000-4000-8000-00000000000b'),
		  0::bigint, 'produced files are staged, not yet in agent.files');
SELECT is(pg_temp.finish('b1', '{"status":"exited","exit_code":0}'), 'succeeded', 'b1 succeeded');
SELECT results_eq($$SELECT name, status FROM agent.files WHERE org_id = '5a000000-0000-4000-8000-00000000000b' ORDER BY name$$,
	$$VALUES ('big.txt', 'skipped'), ('small.txt', 'saved')$$,
	'the file within the org''s storage quota is saved, the one past it skipped');
SELECT matches((SELECT reason FROM agent.files WHERE org_id = '5a000000-0000-4000-8000-00000000000b'
				 AND name = 'big.txt'), 'storage quota', '... with the reason');

-- A result that cannot be applied (fault injected: agent.files refuses a
-- name) reaches the runner with its SQLSTATE, nothing of it applied; the
-- runner then records the failure (src/runner/run.c), which ends the row
-- as a failure of ours, refunded, with the reason.
CREATE FUNCTION pg_temp.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.name = 'poison' THEN
		RAISE EXCEPTION 'injected fault: this file cannot be stored';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER tap_refuse_poison BEFORE INSERT ON agent.files
	FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_poison();
SELECT pg_temp.fx_store_file(id, 'poison', 'saved', NULL, '\x00'::bytea)
  FROM agent.invocations WHERE idempotency_key = 'a4' AND org_id::text LIKE '5a000000-%';
SELECT is(pg_temp.fx_error_of($$SELECT pg_temp.finish('a4', '{"status":"exited","exit_code":0}')$$),
		  'P0001: injected fault: this file cannot be stored',
		  'a result the database refuses: the finish fails with its SQLSTATE (nothing staged, still in flight)');
SELECT is(pg_temp.finish('a4', NULL, 'could not record the result: injected fault: this file cannot be stored'),
		  'provision_failed', '... and the runner''s record of the failure ends the row');
SELECT matches((SELECT state_reason FROM agent.invocations WHERE idempotency_key = 'a4'
				 AND org_id::text LIKE '5a000000-%'),
			   '^could not record the result: injected fault', '... with the reason');
SELECT is((SELECT credits_charged FROM agent.invocations WHERE idempotency_key = 'a4'
			 AND org_id::text LIKE '5a000000-%'), 0, '... refunded');
DROP TRIGGER tap_refuse_poison ON agent.files;

-- ---- the runner restarts -----------------------------------------------------
-- a5 finished (its result staged) before the runner died; a6 was
-- running with a cancel requested; w1 never got past provisioning.
SELECT pg_temp.fx_mark_running(id, 4243) FROM agent.invocations WHERE idempotency_key = 'a6'
   AND org_id::text LIKE '5a000000-%';
INSERT INTO agent.run_results (invocation_id, verdict, jail_status, spawned)
	SELECT id, '{"status":"exited","exit_code":0}', 0, true FROM agent.invocations
	 WHERE idempotency_key = 'a5' AND org_id::text LIKE '5a000000-%';
UPDATE agent.invocations SET cancel_requested_at = now(), cancel_requested_by = 'bob'
 WHERE idempotency_key = 'a6' AND org_id::text LIKE '5a000000-%';
SELECT cmp_ok(pg_temp.fx_restart(), '>=', 3, 'the runner''s restart ends the rows it held in flight');
SELECT results_eq($$SELECT idempotency_key, state, credits_charged FROM agent.invocations
					 WHERE org_id::text LIKE '5a000000-%' AND idempotency_key IN ('a5', 'a6', 'w1', 'd1')
					 ORDER BY 1$$,
	$$VALUES ('a5', 'succeeded', 2), ('a6', 'provision_failed', 0), ('d1', 'provision_failed', 0),
			 ('w1', 'provision_failed', 0)$$,
	'a staged result is applied as it was; every other row in flight is a failure of ours, refunded');
SELECT is((SELECT count(*) FROM agent.invocations WHERE org_id::text LIKE '5a000000-%'
			 AND state IN ('provisioning', 'running')), 0::bigint, 'nothing is left in flight');
SELECT is((SELECT count(*) FROM agent.run_results), 0::bigint, 'nothing is left staged');
SELECT is((SELECT count(*) FROM agent.credit_balances b
			WHERE b.org_id::text LIKE '5a000000-%'
			  AND b.balance <> (SELECT sum(l.amount) FROM agent.credit_ledger l WHERE l.org_id = b.org_id)),
		  0::bigint, 'every balance equals its ledger sum');
SELECT is((SELECT count(*) FROM agent.invocations i WHERE i.org_id::text LIKE '5a000000-%'
			 AND i.state IN ('succeeded', 'failed', 'provision_failed')
			 AND (SELECT count(*) FROM agent.audit_events e WHERE e.invocation_id = i.id
				   AND e.event_type IN ('invocation.finished', 'invocation.provision_failed')) <> 1),
		  0::bigint, 'every ended run has exactly one outcome event');
SELECT is((SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v
			WHERE o.id::text LIKE '5a000000-%' AND NOT v.ok), 0::bigint, 'every chain verifies');

SELECT * FROM finish();
ROLLBACK;
