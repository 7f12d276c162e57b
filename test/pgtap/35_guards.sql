-- The C guards and hashes (src/guards.c, src/digest.c) against the SQL
-- definitions they replaced: the same hashes byte for byte, the same state
-- machine, the same refusals with the same SQLSTATEs.
BEGIN;
SELECT plan(37);

-- ---- hashes ----
CREATE TEMP TABLE samples (s text);
INSERT INTO samples
	SELECT repeat(chr(97 + n % 26), n) FROM generate_series(0, 300) n;	-- 0..300 bytes: 0..5 SHA blocks
INSERT INTO samples VALUES ('import math; print(math.pi)'), (E'tab\there\nnewline'),
	('é ü ß'), ('日本語のコード'), ('emoji 🙂 in code'), (repeat('é', 100));

SELECT is((SELECT count(*) FROM samples
			WHERE agent.code_sha256(s) = encode(sha256(convert_to(s, 'UTF8')), 'hex')),
		  (SELECT count(*) FROM samples),
		  'code_sha256() equals encode(sha256(convert_to(code, ''UTF8'')), ''hex'') for ASCII, multi-block and non-ASCII code');
SELECT is(agent.code_sha256(''), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
		  'the empty code hashes to the well-known empty SHA-256');
SELECT ok(agent.code_sha256(NULL) IS NULL, 'code_sha256(NULL) is NULL');

-- The audit formulas as the documentation states them (sql/src/20_audit.sql,
-- docs/security.md): version 1 (events appended before 0.3.0) and version 2.
CREATE FUNCTION pg_temp.audit_hash_v1_sql(prev_hash text, id bigint, org_id uuid,
	workspace_id uuid, event_type text, invocation_id uuid, actor text, details jsonb,
	created_at timestamptz) RETURNS text LANGUAGE sql STABLE
	RETURN encode(sha256(convert_to(concat_ws(E'\x1f',
		coalesce(prev_hash, ''), id::text, org_id::text,
		coalesce(workspace_id::text, ''), event_type,
		coalesce(invocation_id::text, ''), coalesce(actor, ''),
		details::text,
		(extract(epoch FROM created_at) * 1000000)::bigint::text), 'UTF8')), 'hex');
CREATE FUNCTION pg_temp.f(t text) RETURNS bytea LANGUAGE sql IMMUTABLE
	RETURN CASE WHEN t IS NULL THEN '\x2d'::bytea
		   ELSE convert_to(octet_length(convert_to(t, 'UTF8')) || ':', 'UTF8') || convert_to(t, 'UTF8') END;
CREATE FUNCTION pg_temp.audit_hash_v2_sql(prev_hash text, id bigint, org_id uuid,
	workspace_id uuid, event_type text, invocation_id uuid, actor text, details jsonb,
	created_at timestamptz) RETURNS text LANGUAGE sql STABLE
	RETURN encode(sha256(convert_to('sandbox_ext audit v2', 'UTF8')
		|| pg_temp.f(prev_hash) || pg_temp.f(id::text) || pg_temp.f(org_id::text)
		|| pg_temp.f(workspace_id::text) || pg_temp.f(event_type) || pg_temp.f(invocation_id::text)
		|| pg_temp.f(actor) || pg_temp.f(details::text)
		|| pg_temp.f((extract(epoch FROM created_at) * 1000000)::bigint::text)), 'hex');
CREATE FUNCTION pg_temp.audit_hash_sql(v integer, prev_hash text, id bigint, org_id uuid,
	workspace_id uuid, event_type text, invocation_id uuid, actor text, details jsonb,
	created_at timestamptz) RETURNS text LANGUAGE sql STABLE
	RETURN CASE v WHEN 1 THEN pg_temp.audit_hash_v1_sql(prev_hash, id, org_id, workspace_id,
								event_type, invocation_id, actor, details, created_at)
			   WHEN 2 THEN pg_temp.audit_hash_v2_sql(prev_hash, id, org_id, workspace_id,
								event_type, invocation_id, actor, details, created_at) END;

CREATE TEMP TABLE hash_cases AS
SELECT * FROM (VALUES
	(NULL::text, 1::bigint, 'a3000000-0000-4000-8000-000000000001'::uuid, NULL::uuid, 'x.first',
	 NULL::uuid, NULL::text, '{}'::jsonb, '2026-01-01 00:00:00+00'::timestamptz),
	(repeat('ab', 32), 9007199254740993, 'a3000000-0000-4000-8000-000000000001',
	 'b3000000-0000-4000-8000-000000000001', 'approval.approved',
	 'c3000000-0000-4000-8000-000000000001', 'Zoë the approver 🙂',
	 '{"b": [1, 2.50, null, "é"], "a": {"nested": true}}', '2026-11-29 12:34:56.789012+05:30'),
	('', 0, 'a3000000-0000-4000-8000-000000000002', NULL, 'e', NULL, '', '"just a string"',
	 '1969-12-31 23:59:59.999999+00'),
	('p', -5, 'a3000000-0000-4000-8000-000000000002', NULL, NULL, NULL, NULL, NULL, NULL),
	(NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
	 E'alice\x1f{"a": 1}', NULL, '2026-01-01 00:00:00+00')
) v(prev_hash, id, org_id, workspace_id, event_type, invocation_id, actor, details, created_at);

SELECT is((SELECT count(*) FROM hash_cases c, (VALUES (1), (2)) v(v)
			WHERE agent._audit_hash(v.v, c.prev_hash, c.id, c.org_id, c.workspace_id, c.event_type,
									c.invocation_id, c.actor, c.details, c.created_at)
				= pg_temp.audit_hash_sql(v.v, c.prev_hash, c.id, c.org_id, c.workspace_id, c.event_type,
										 c.invocation_id, c.actor, c.details, c.created_at)),
		  10::bigint,
		  '_audit_hash() equals the documented SQL formula of versions 1 and 2 (NULLs, non-ASCII, big ids, pre-1970 and fractional timestamps)');
SET LOCAL timezone = 'America/St_Johns';
SELECT is((SELECT array_agg(agent._audit_hash(v.v, c.prev_hash, c.id, c.org_id, c.workspace_id, c.event_type,
									c.invocation_id, c.actor, c.details, c.created_at) ORDER BY v.v)
			 FROM hash_cases c, (VALUES (1), (2)) v(v) WHERE c.id = 9007199254740993),
		  (SELECT array_agg(pg_temp.audit_hash_sql(v.v, c.prev_hash, c.id, c.org_id, c.workspace_id, c.event_type,
										 c.invocation_id, c.actor, c.details, c.created_at) ORDER BY v.v)
			 FROM hash_cases c, (VALUES (1), (2)) v(v) WHERE c.id = 9007199254740993),
		  '_audit_hash() does not depend on the session time zone');
RESET timezone;
SELECT throws_ok($$SELECT agent._audit_hash(2, NULL, 1, 'a3000000-0000-4000-8000-000000000001', NULL,
		'e', NULL, NULL, '{}', 'infinity')$$,
	'22003', NULL, 'an infinite timestamp is refused, as the SQL formula refuses it');
SELECT throws_ok($$SELECT agent._audit_hash(3, NULL, 1, 'a3000000-0000-4000-8000-000000000001', NULL,
		'e', NULL, NULL, '{}', now())$$,
	'22023', 'unknown audit hash version 3', 'an unknown hash version is refused');

-- The re-split of issue 27: the details moved into the actor behind the
-- separator, details made NULL.  Version 1 hashes both alike (which is why
-- verify_audit_chain refuses such a version 1 event); version 2 does not,
-- nor does it hash NULL as the empty string.
SELECT is(agent._audit_hash(1, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							'alice', '{"a": 1}', '2026-01-01 00:00:00+00'),
		  agent._audit_hash(1, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							E'alice\x1f{"a": 1}', NULL, '2026-01-01 00:00:00+00'),
		  'version 1: a field re-split at the separator keeps the hash (the hole version 2 closes)');
SELECT isnt(agent._audit_hash(2, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							  'alice', '{"a": 1}', '2026-01-01 00:00:00+00'),
			agent._audit_hash(2, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							  E'alice\x1f{"a": 1}', NULL, '2026-01-01 00:00:00+00'),
			'version 2: the re-split event hashes differently');
SELECT isnt(agent._audit_hash(2, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							  NULL, '{}', '2026-01-01 00:00:00+00'),
			agent._audit_hash(2, NULL, 7, 'a3000000-0000-4000-8000-000000000002', NULL, 'x.split', NULL,
							  '', '{}', '2026-01-01 00:00:00+00'),
			'version 2: a NULL actor is not an empty one');

-- Real events verify with the formula too (an external auditor's check).
INSERT INTO agent.orgs (id, name, plan) VALUES ('a3000000-0000-4000-8000-000000000009', 'Tap guards', 'pro');
CREATE TEMP TABLE appended AS
	SELECT agent._audit('a3000000-0000-4000-8000-000000000009', NULL, 'tap.guard', NULL, 'Zoë',
						jsonb_build_object('n', n, 'é', 'ü')) AS id FROM generate_series(1, 3) n;
SELECT is((SELECT count(*) FROM agent.audit_events e
			WHERE e.org_id = 'a3000000-0000-4000-8000-000000000009' AND e.hash_version = 2
			  AND e.hash = pg_temp.audit_hash_v2_sql(e.prev_hash, e.id, e.org_id, e.workspace_id,
					e.event_type, e.invocation_id, e.actor, e.details, e.created_at)),
		  3::bigint, 'appended events carry version 2 and the documented hash');

-- ---- the state machine ----
CREATE FUNCTION pg_temp.transition_sql(from_state text, to_state text) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	RETURN from_state = to_state OR CASE from_state
		WHEN 'pending_approval' THEN to_state IN ('approved', 'denied', 'expired', 'cancelled')
		WHEN 'approved' THEN to_state IN ('provisioning', 'cancelled', 'insufficient_credits', 'provision_failed')
		WHEN 'provisioning' THEN to_state IN ('running', 'succeeded', 'failed', 'timed_out', 'killed',
											  'cancelled', 'provision_failed')
		WHEN 'running' THEN to_state IN ('succeeded', 'failed', 'timed_out', 'killed', 'cancelled', 'provision_failed')
		ELSE false
	END;
CREATE TEMP TABLE states (s text);
INSERT INTO states VALUES ('pending_approval'), ('approved'), ('provisioning'), ('running'),
	('succeeded'), ('failed'), ('timed_out'), ('killed'), ('denied'), ('expired'), ('cancelled'),
	('provision_failed'), ('insufficient_credits');

SELECT is((SELECT count(*) FROM states a, states b
			WHERE agent.invocation_transition_allowed(a.s, b.s) = pg_temp.transition_sql(a.s, b.s)),
		  169::bigint, 'invocation_transition_allowed() is the documented table for all 13 x 13 pairs');
SELECT is((SELECT count(*) FROM states WHERE agent.is_invocation_state(s)), 13::bigint,
		  'is_invocation_state() accepts the 13 states');
SELECT ok(NOT agent.is_invocation_state('Approved') AND NOT agent.is_invocation_state('')
		  AND NOT agent.is_invocation_state('approved '),
		  'is_invocation_state() refuses near misses');
SELECT ok(agent.is_approval_status('pending') AND agent.is_approval_status('approved')
		  AND agent.is_approval_status('denied') AND agent.is_approval_status('expired')
		  AND agent.is_approval_status('cancelled') AND NOT agent.is_approval_status('withdrawn'),
		  'is_approval_status() accepts exactly the five statuses');

-- ---- the triggers, on real rows ----
INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('13000000-0000-4000-8000-000000000001', 'tap-guards', true);
INSERT INTO agent.workspaces (id, org_id, name)
	VALUES ('b3000000-0000-4000-8000-000000000009', 'a3000000-0000-4000-8000-000000000009', 'ws');
-- Credits, or requests are refused (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs WHERE id IN ('a3000000-0000-4000-8000-000000000009');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled)
	VALUES ('c3000000-0000-4000-8000-000000000009', 'a3000000-0000-4000-8000-000000000009',
			'b3000000-0000-4000-8000-000000000009', 'agent', 'specialist',
			'13000000-0000-4000-8000-000000000001', true);
DO $$ BEGIN PERFORM agent.set_tenant('a3000000-0000-4000-8000-000000000009', 'b3000000-0000-4000-8000-000000000009'); END $$;
CREATE TEMP TABLE req AS
	SELECT * FROM agent.request_execution('b3000000-0000-4000-8000-000000000009',
		'c3000000-0000-4000-8000-000000000009', NULL, 'python', 'print("é")', 'tap');

SELECT is((SELECT code_sha256 FROM agent.invocations i JOIN req ON i.id = req.invocation_id),
		  encode(sha256(convert_to('print("é")', 'UTF8')), 'hex'),
		  'the insert trigger derives code_sha256 from the code');
SELECT is((SELECT code_sha256 FROM agent.approval_requests a JOIN req ON a.id = req.approval_id),
		  encode(sha256(convert_to('print("é")', 'UTF8')), 'hex'),
		  'the card carries the same hash');
INSERT INTO agent.invocations (id, org_id, workspace_id, agent_id, requested_by, language, code, code_sha256)
	VALUES ('e3000000-0000-4000-8000-000000000009', 'a3000000-0000-4000-8000-000000000009', 'b3000000-0000-4000-8000-000000000009',
			'c3000000-0000-4000-8000-000000000009', 'tap', 'shell', 'echo hi', repeat('0', 64));
SELECT is((SELECT code_sha256 FROM agent.invocations WHERE id = 'e3000000-0000-4000-8000-000000000009'),
		  agent.code_sha256('echo hi'), 'a supplied code_sha256 is overwritten by the derived one');

SELECT throws_ok(format($$UPDATE agent.invocations SET state = 'running' WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', 'invalid state transition from "pending_approval" to "running"',
	'a transition outside the table is refused');
SELECT throws_ok(format($$UPDATE agent.approval_requests SET code_sha256 = agent.code_sha256('print("swapped")') WHERE id = %L$$,
						(SELECT approval_id FROM req)),
	'55000', format('cannot change the card of approval request %s', (SELECT approval_id FROM req)),
	'the card''s hash cannot be changed');
SELECT throws_ok(format($$UPDATE agent.approval_requests SET created_at = created_at - interval '1 hour' WHERE id = %L$$,
						(SELECT approval_id FROM req)),
	'55000', NULL, 'the card''s creation time cannot be changed');
-- What the card shows is its invocation's code and description (one copy):
-- frozen there, and only retention may empty them, once the run is over.
SELECT throws_ok(format($$UPDATE agent.invocations SET code = 'print("swapped")' WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', format('cannot change the request of invocation %s', (SELECT invocation_id FROM req)),
	'the code the card shows cannot be changed');
SELECT throws_ok(format($$UPDATE agent.invocations SET description = 'reworded' WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', NULL, 'the description the card shows cannot be changed');
SELECT throws_ok(format($$UPDATE agent.invocations SET code = NULL, description = NULL, pruned_at = now() WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', NULL, 'the code of a pending invocation cannot be pruned');
SELECT is(agent.approve((SELECT approval_id FROM req), 'tap-approver'),
		  (SELECT invocation_id FROM req), 'approve() returns the invocation');
SELECT is((SELECT state FROM agent.invocations i JOIN req ON i.id = req.invocation_id), 'approved',
		  'the invocation is approved');
SELECT throws_ok(format($$UPDATE agent.approval_requests SET decision_reason = 'afterthought' WHERE id = %L$$,
						(SELECT approval_id FROM req)),
	'55000', format('approval request %s has already been decided', (SELECT approval_id FROM req)),
	'a decided card cannot change at all');
SELECT lives_ok(format($$UPDATE agent.approval_requests SET decided_by = decided_by WHERE id = %L$$,
					   (SELECT approval_id FROM req)),
	'an update of a decided card that changes nothing is allowed (IS DISTINCT FROM semantics)');
SELECT throws_ok(format($$SELECT agent.approve(%L, 'tap-approver')$$, (SELECT approval_id FROM req)),
	'55000', NULL, 'a second approval is refused');
SELECT throws_ok(format($$UPDATE agent.invocations SET code = NULL, description = NULL, pruned_at = now() WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', NULL, 'nor the code of an approved one (it is what the claim runs)');
UPDATE agent.invocations SET state = 'cancelled' WHERE id = (SELECT invocation_id FROM req);
SELECT throws_ok(format($$UPDATE agent.invocations SET code = NULL WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', NULL, 'a finished invocation''s code is emptied only with pruned_at');
SELECT lives_ok(format($$UPDATE agent.invocations SET code = NULL, description = NULL, pruned_at = now() WHERE id = %L$$,
					   (SELECT invocation_id FROM req)),
	'a finished invocation''s code and description are pruned (retention)');
SELECT throws_ok(format($$UPDATE agent.invocations SET code = 'print("back")', pruned_at = NULL WHERE id = %L$$,
						(SELECT invocation_id FROM req)),
	'55000', NULL, 'a pruned invocation''s code cannot come back');
SELECT throws_ok(format($$INSERT INTO agent.invocations (org_id, workspace_id, agent_id, requested_by, language, code, pruned_at)
							VALUES (%L, %L, %L, 'tap', 'shell', NULL, now())$$,
						'a3000000-0000-4000-8000-000000000009', 'b3000000-0000-4000-8000-000000000009',
						'c3000000-0000-4000-8000-000000000009'),
	'23502', NULL, 'an invocation cannot be inserted without code (no hash)');
SELECT is((SELECT code_sha256 FROM agent.invocations i JOIN req ON i.id = req.invocation_id),
		  encode(sha256(convert_to('print("é")', 'UTF8')), 'hex'),
		  'the pruned invocation keeps its hash');

-- set_tenant(): transaction-local, NULL clears, and the GUC check refuses junk.
SELECT is(agent.current_org(), 'a3000000-0000-4000-8000-000000000009'::uuid, 'set_tenant() sets the org');
DO $$ BEGIN PERFORM agent.set_tenant(NULL, NULL); END $$;
SELECT ok(agent.current_org() IS NULL AND agent.current_workspace() IS NULL,
		  'set_tenant(NULL, NULL) clears the tenant');

SELECT * FROM finish();
ROLLBACK;
