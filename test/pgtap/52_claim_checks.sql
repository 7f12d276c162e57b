-- The checks a claim makes on each row, and the helpers it (and a request)
-- reads its limits through, from the attacker's side: a superuser who
-- rewrites the code and the approval card together (triggers off) or sends
-- the card back to pending is still refused by the hash checks, uncharged
-- and audited; an org at its storage quota starts nothing, at one byte
-- below it does; the price of a plan is charged whether or not the org has
-- a balance row.  And the settings helpers, which run without a SET clause
-- (their names and operators qualified): a caller's search_path that puts
-- a hostile `=` before pg_catalog changes none of their answers; a missing
-- setting is still a broken install (P0001).
-- The claims go through a runner (test/pgtap/fixture/runner.psql).  The
-- supervisor is paused while this runs (test/run.sh); everything here is
-- rolled back.
BEGIN;
-- Approved rows other suites left behind are set aside for this
-- transaction: the claims below see only this file's.
UPDATE agent.invocations SET state = 'cancelled', state_reason = 'set aside by 52_claim_checks'
 WHERE state = 'approved';
SELECT plan(25);
\ir fixture/runner.psql

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('52e00000-0000-4000-8000-000000000001', 'tap-claim-checks', true);
INSERT INTO agent.plans (plan, code_execution, credits_per_invocation) VALUES ('tap-zero', true, 0);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('52a00000-0000-4000-8000-00000000000a', 'Claim checks A', 'pro'),
	('52a00000-0000-4000-8000-00000000000b', 'Claim checks B (storage)', 'pro'),
	('52a00000-0000-4000-8000-00000000000c', 'Claim checks C (free plan, no balance row)', 'tap-zero');
INSERT INTO agent.workspaces (id, org_id, name)
	SELECT ('52b00000-0000-4000-8000-00000000000' || x)::uuid,
		   ('52a00000-0000-4000-8000-00000000000' || x)::uuid, x
	  FROM unnest(ARRAY['a', 'b', 'c']) x;
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled)
	SELECT ('52c00000-0000-4000-8000-00000000000' || x)::uuid,
		   ('52a00000-0000-4000-8000-00000000000' || x)::uuid,
		   ('52b00000-0000-4000-8000-00000000000' || x)::uuid, x, 'specialist',
		   '52e00000-0000-4000-8000-000000000001', true
	  FROM unnest(ARRAY['a', 'b', 'c']) x;
-- A second agent of A, with a skill.
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('52c00000-0000-4000-8000-0000000000a2', '52a00000-0000-4000-8000-00000000000a',
	 '52b00000-0000-4000-8000-00000000000a', 'a2', 'specialist', '52e00000-0000-4000-8000-000000000001', true);
INSERT INTO agent.skills (id, org_id, name, version)
	VALUES ('52f00000-0000-4000-8000-00000000000a', '52a00000-0000-4000-8000-00000000000a', 'tools', 1);
INSERT INTO agent.agent_skills (org_id, workspace_id, agent_id, skill_id)
	VALUES ('52a00000-0000-4000-8000-00000000000a', '52b00000-0000-4000-8000-00000000000a',
			'52c00000-0000-4000-8000-0000000000a2', '52f00000-0000-4000-8000-00000000000a');
SELECT agent.grant_credits('52a00000-0000-4000-8000-00000000000a', 100, 'tap');
SELECT agent.grant_credits('52a00000-0000-4000-8000-00000000000b', 100, 'tap');
SELECT agent.set_org_limits('52a00000-0000-4000-8000-00000000000a', 10, NULL);

-- request and approve a shell run of org x (agent `ag`, default x's own), tagged
CREATE FUNCTION pg_temp.queue(x text, tag text, ag text DEFAULT NULL) RETURNS uuid
	LANGUAGE plpgsql AS $$
DECLARE
	r	agent.execution_request;
	w	uuid := ('52b00000-0000-4000-8000-00000000000' || x)::uuid;
BEGIN
	PERFORM agent.set_tenant(('52a00000-0000-4000-8000-00000000000' || x)::uuid, w);
	r := agent.request_execution(w, ('52c00000-0000-4000-8000-0000000000' || coalesce(ag, '0' || x))::uuid,
								 NULL, 'shell', 'echo ' || tag, 'requester', NULL, tag);
	PERFORM agent.approve(r.approval_id, 'approver');
	PERFORM agent.set_tenant(NULL, NULL);
	RETURN r.invocation_id;
END
$$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS agent.invocations LANGUAGE sql
	AS $$ SELECT * FROM agent.invocations WHERE idempotency_key = k AND org_id::text LIKE '52a00000-%' $$;
CREATE FUNCTION pg_temp.charged(k text) RETURNS bigint LANGUAGE sql
	AS $$ SELECT count(*) FROM agent.credit_ledger l
		   WHERE l.invocation_id = (pg_temp.inv(k)).id AND l.kind = 'charge' $$;
CREATE FUNCTION pg_temp.event(k text, type text) RETURNS jsonb LANGUAGE sql
	AS $$ SELECT e.details FROM agent.audit_events e
		   WHERE e.invocation_id = (pg_temp.inv(k)).id AND e.event_type = type
		   ORDER BY e.id DESC LIMIT 1 $$;
-- The SQLSTATE and message of a statement.
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;

-- ---- the hash checks, attacked --------------------------------------------
SELECT pg_temp.queue('a', 'clean') IS NOT NULL AS queued;
SELECT pg_temp.queue('a', 'skills', 'a2') IS NOT NULL AS queued;
SELECT pg_temp.queue('a', 'together') IS NOT NULL AS queued;
SELECT pg_temp.queue('a', 'repending') IS NOT NULL AS queued;
CREATE TEMP TABLE approved_hash AS SELECT (pg_temp.inv('together')).code_sha256 AS h;
-- A superuser covering tracks: the code, its hash and the card's approved
-- hash rewritten together, triggers off; and another card sent back to
-- pending.  Only the audit trail still holds what was approved.
SET LOCAL session_replication_role = replica;
UPDATE agent.invocations SET code = 'echo EVIL', code_sha256 = agent.code_sha256('echo EVIL')
 WHERE id = (pg_temp.inv('together')).id;
UPDATE agent.approval_requests SET code_sha256 = agent.code_sha256('echo EVIL'),
	   approved_code_sha256 = agent.code_sha256('echo EVIL')
 WHERE invocation_id = (pg_temp.inv('together')).id;
UPDATE agent.approval_requests
   SET status = 'pending', decided_by = NULL, decided_at = NULL, approved_code_sha256 = NULL
 WHERE invocation_id = (pg_temp.inv('repending')).id;
SET LOCAL session_replication_role = origin;

CREATE TEMP TABLE claimed_ids AS SELECT c AS id FROM pg_temp.fx_claim(10) c;
CREATE TEMP TABLE claimed AS SELECT l.* FROM claimed_ids JOIN fx_lease l USING (id);
SELECT is((SELECT string_agg(i.idempotency_key, ',' ORDER BY i.idempotency_key)
			 FROM claimed c JOIN agent.invocations i ON i.id = c.id),
		  'clean,skills', 'the claim takes the two rows whose code is the approved code, and only those');
SELECT is((SELECT string_agg(i.idempotency_key || '=' || c.has_skills, ',' ORDER BY i.idempotency_key)
			 FROM claimed c JOIN agent.invocations i ON i.id = c.id),
		  'clean=false,skills=true', 'has_skills says which claimed run''s agent has skills');
SELECT is((SELECT state || '|' || credits_charged FROM pg_temp.inv('clean')), 'provisioning|2',
		  'a clean row is provisioning, charged the plan''s price');
SELECT is(ARRAY[(pg_temp.inv('together')).state, (pg_temp.inv('repending')).state],
		  ARRAY['provision_failed', 'provision_failed'],
		  'a rewritten card and code, and a card sent back to pending, are refused at the claim');
SELECT is(ARRAY[pg_temp.charged('together'), pg_temp.charged('repending')], ARRAY[0::bigint, 0::bigint],
		  '... uncharged');
SELECT is((pg_temp.inv('together')).state_reason,
		  'the code does not match the approved code (sha256 mismatch); nothing ran', '... with the reason');
SELECT is(pg_temp.event('together', 'invocation.hash_mismatch'),
		  jsonb_build_object('approved_sha256', agent.code_sha256('echo EVIL'),
							 'audited_sha256', (SELECT h FROM approved_hash),
							 'code_sha256', agent.code_sha256('echo EVIL')),
		  'the rewrite together is caught by the audited hash, which the event names');
SELECT is(pg_temp.event('repending', 'invocation.hash_mismatch') -> 'approved_sha256', 'null'::jsonb,
		  'a card no longer approved has no approved hash: refused');
SELECT is((SELECT count(*) FROM agent.invocation_output o
			WHERE o.invocation_id IN ((pg_temp.inv('together')).id, (pg_temp.inv('repending')).id)),
		  0::bigint, 'nothing ran for either');

-- ---- storage quota at the claim ---------------------------------------------
-- (a quota that holds the two requests and their events, which count)
SELECT agent.set_org_limits('52a00000-0000-4000-8000-00000000000b', 10, 100000);
SELECT pg_temp.queue('b', 'below') IS NOT NULL AS queued;
SELECT pg_temp.queue('b', 'at') IS NOT NULL AS queued;
-- One byte below the quota between the request and the claim: it runs.
UPDATE agent.org_usage SET stored_bytes = 99999 WHERE org_id = '52a00000-0000-4000-8000-00000000000b';
SELECT is((SELECT string_agg(i.idempotency_key, ',') FROM pg_temp.fx_claim(1) c
			 JOIN agent.invocations i ON i.id = c),
		  'below', 'an org one byte below its storage quota has its run claimed');
-- At the quota: the next one is refused, nothing ran, nothing charged.
UPDATE agent.org_usage SET stored_bytes = 100000 WHERE org_id = '52a00000-0000-4000-8000-00000000000b';
SELECT is((SELECT count(*) FROM pg_temp.fx_claim(1)), 0::bigint,
		  'an org at its storage quota has nothing claimed');
SELECT is((SELECT state || '|' || state_reason FROM pg_temp.inv('at')),
		  'provision_failed|the organization''s storage quota is exhausted (100000 of 100000 bytes); nothing ran',
		  '... its run fails with the figures');
SELECT is(pg_temp.charged('at'), 0::bigint, '... uncharged');
SELECT is(pg_temp.event('at', 'invocation.provision_failed'),
		  '{"reason": "storage_quota_exhausted", "stored_bytes": 100000, "max_stored_bytes": 100000}'::jsonb,
		  '... audited with the reason and the figures');

-- ---- the price, with no balance row -----------------------------------------
SELECT is((SELECT count(*) FROM agent.credit_balances WHERE org_id = '52a00000-0000-4000-8000-00000000000c'),
		  0::bigint, 'org C has no balance row');
SELECT pg_temp.queue('c', 'free') IS NOT NULL AS queued;
SELECT is((SELECT count(*) FROM pg_temp.fx_claim(1)), 1::bigint,
		  'a run of a plan priced 0 is claimed without a balance row');
SELECT is((SELECT state || '|' || credits_charged FROM pg_temp.inv('free')), 'provisioning|0',
		  '... charged the plan''s price, 0');

-- ---- the settings helpers -----------------------------------------------------
SELECT is(agent._org_run_limit('52a00000-0000-4000-8000-00000000000c'),
		  (SELECT value::integer FROM agent.settings WHERE key = 'max_runs_per_org'),
		  '_org_run_limit: the setting for an org without its own');
SELECT is(agent._org_run_limit('52a00000-0000-4000-8000-00000000000a'), 10,
		  '_org_run_limit: the org''s own');
SELECT is((SELECT row(s.exhausted, s.stored_bytes, s.max_stored_bytes)::text
			 FROM agent._storage_exhausted('52a00000-0000-4000-8000-00000000000c') s),
		  row(false, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '52a00000-0000-4000-8000-00000000000c'),
			  (SELECT value::bigint FROM agent.settings WHERE key = 'max_stored_bytes_per_org'))::text,
		  '_storage_exhausted: an org under the default quota');

-- A hostile `=` for text and for uuid, found before pg_catalog's.
CREATE SCHEMA tap_evil;
CREATE FUNCTION tap_evil.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
CREATE FUNCTION tap_evil.never(uuid, uuid) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
CREATE OPERATOR tap_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_evil.never);
CREATE OPERATOR tap_evil.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = tap_evil.never);
-- (Read under that path, checked after it: pgTAP itself compares text.)
SET LOCAL search_path = tap_evil, pg_catalog, public;
CREATE TEMP TABLE under_evil AS
SELECT agent._setting('max_code_bytes') AS code_bytes,
	   agent._org_run_limit('52a00000-0000-4000-8000-00000000000a') AS run_limit,
	   (SELECT row(s.exhausted, s.stored_bytes, s.max_stored_bytes)::text
		  FROM agent._storage_exhausted('52a00000-0000-4000-8000-00000000000b') s) AS storage;
RESET search_path;
SELECT is((SELECT code_bytes FROM under_evil),
		  (SELECT s.value FROM agent.settings s WHERE s.key = 'max_code_bytes'),
		  'a hostile search_path: _setting still finds its key');
SELECT is((SELECT run_limit FROM under_evil), 10, '... _org_run_limit still finds the org');
SELECT is((SELECT storage FROM under_evil),
		  row(true, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '52a00000-0000-4000-8000-00000000000b'),
			  100000)::text,
		  '... _storage_exhausted still finds the org''s usage and quota');

-- A missing setting is a broken install, as before: P0001, named.  (Read
-- inside a savepoint rolled back, into psql variables, checked after.)
SAVEPOINT broken;
SET LOCAL session_replication_role = replica;	-- (the settings' trigger refuses a delete)
DELETE FROM agent.settings WHERE key = 'max_stored_bytes_per_org';
SET LOCAL session_replication_role = origin;
SELECT pg_temp.error_of($$SELECT agent._storage_exhausted('52a00000-0000-4000-8000-00000000000c')$$) AS missing_default,
	   (SELECT s.max_stored_bytes FROM agent._storage_exhausted('52a00000-0000-4000-8000-00000000000b') s) AS own_quota
\gset
ROLLBACK TO SAVEPOINT broken;
SELECT is(:'missing_default'::text,
		  'P0001: setting "max_stored_bytes_per_org" is missing: the installation is broken',
		  'a missing quota setting raises, for an org that has no quota of its own');
SELECT is(:'own_quota'::bigint, 100000::bigint, '... not for an org with its own (the setting is not read)');

SELECT * FROM finish();
ROLLBACK;
