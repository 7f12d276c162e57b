-- What the client libraries call beside the run API (80_clients.sql):
-- agent.is_terminal(state), the state machine's own answer to "is this
-- final?", and agent.latency(period, as_of), the operators' p50/p99 per
-- language.  Both from the caller's side: every state, a typo, NULL, who
-- may call them, and a window over rows of two tenants whose numbers are
-- known.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('80e00000-0000-4000-8000-000000000001', 'tap-clients', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('80a00000-0000-4000-8000-00000000000a', 'Clients A', 'pro'),
	('80a00000-0000-4000-8000-00000000000b', 'Clients B', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('80b00000-0000-4000-8000-00000000000a', '80a00000-0000-4000-8000-00000000000a', 'A'),
	('80b00000-0000-4000-8000-00000000000b', '80a00000-0000-4000-8000-00000000000b', 'B');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('80c00000-0000-4000-8000-00000000000a', '80a00000-0000-4000-8000-00000000000a',
	 '80b00000-0000-4000-8000-00000000000a', 'A', 'specialist', '80e00000-0000-4000-8000-000000000001', true),
	('80c00000-0000-4000-8000-00000000000b', '80a00000-0000-4000-8000-00000000000b',
	 '80b00000-0000-4000-8000-00000000000b', 'B', 'specialist', '80e00000-0000-4000-8000-000000000001', true);

-- Finished runs in a window long past (no other test's row is there):
-- [2001-01-01 00:00, 01:00).  Seconds from the approval to the end (a),
-- from the start to the end (r), NULL: never started.
--   python, org A: a 1 2, r 0.5 1; org B: a 3, r 1.5
--     → runs 3, a p50 2 s, p99 2.98 s; started 3, r p50 1 s, p99 1.49 s
--   node, org B: a 4, never started (provision_failed)
--     → runs 1, a 4 s / 4 s; started 0, r NULL
--   outside: python that ended at 01:00 (the window's end is open), one
--   that ended at 23:59:59 the day before, a denial (never approved)
CREATE TEMP TABLE runs (org char, lang text, state text, a_s numeric, r_s numeric, ends timestamptz,
						approved boolean DEFAULT true);
INSERT INTO runs VALUES
	('a', 'python', 'succeeded', 1, 0.5, '2001-01-01 00:10+00', true),
	('a', 'python', 'failed', 2, 1, '2001-01-01 00:20+00', true),
	('b', 'python', 'timed_out', 3, 1.5, '2001-01-01 00:59:59+00', true),
	('b', 'node', 'provision_failed', 4, NULL, '2001-01-01 00:30+00', true),
	('a', 'python', 'succeeded', 100, 100, '2001-01-01 01:00+00', true),
	('b', 'python', 'succeeded', 100, 100, '2000-12-31 23:59:59+00', true),
	('a', 'shell', 'denied', 100, NULL, '2001-01-01 00:30+00', false);
INSERT INTO agent.invocations (org_id, workspace_id, agent_id, requested_by, language, code, state,
							   created_at, approved_at, started_at, finished_at)
SELECT ('80a00000-0000-4000-8000-00000000000' || org)::uuid, ('80b00000-0000-4000-8000-00000000000' || org)::uuid,
	   ('80c00000-0000-4000-8000-00000000000' || org)::uuid, 'alice', lang, 'true', state,
	   ends - interval '1 hour',
	   CASE WHEN approved THEN ends - a_s * interval '1 s' END,
	   ends - r_s * interval '1 s', ends
  FROM runs;

SELECT plan(21);

-- ---- is_terminal ----
SELECT is((SELECT string_agg(s, ' ' ORDER BY s) FROM unnest(ARRAY['pending_approval', 'approved',
			'provisioning', 'running', 'succeeded', 'failed', 'timed_out', 'killed', 'denied',
			'expired', 'cancelled', 'provision_failed', 'insufficient_credits']) s
			WHERE agent.is_terminal(s)),
	'cancelled denied expired failed insufficient_credits killed provision_failed succeeded timed_out',
	'is_terminal: the final states of docs/execution.md, and only those');
SELECT is((SELECT count(*) FROM unnest(ARRAY['pending_approval', 'approved', 'provisioning', 'running',
			'succeeded', 'failed', 'timed_out', 'killed', 'denied', 'expired', 'cancelled',
			'provision_failed', 'insufficient_credits']) s
			WHERE agent.is_terminal(s) IS DISTINCT FROM NOT EXISTS (
				SELECT 1 FROM unnest(ARRAY['pending_approval', 'approved', 'provisioning', 'running',
					'succeeded', 'failed', 'timed_out', 'killed', 'denied', 'expired', 'cancelled',
					'provision_failed', 'insufficient_credits']) t
				 WHERE t <> s AND agent.invocation_transition_allowed(s, t))),
	0::bigint, 'a state is final exactly when the state machine lets it go nowhere else');
SELECT throws_ok($$SELECT agent.is_terminal('succeded')$$, '22023',
	'unknown invocation state "succeded"', 'a misspelt state is 22023, never "not final"');
SELECT throws_ok($$SELECT agent.is_terminal('')$$, '22023',
	'unknown invocation state ""', 'so is the empty string');
SELECT throws_ok(format('SELECT agent.is_terminal(%L)', repeat('x', 300)), '22023',
	format('unknown invocation state "%s"', repeat('x', 64)), 'the message shows at most 64 characters of it');
SELECT is(agent.is_terminal(NULL), NULL, 'NULL in, NULL out (strict)');

SET ROLE agent_backend;
SELECT is(agent.is_terminal('running'), false, 'agent_backend may ask, without a tenant');
RESET ROLE;
SET ROLE agent_auditor;
SELECT is(agent.is_terminal('expired'), true, 'agent_auditor may ask');
RESET ROLE;
SET ROLE agent_runner;
SELECT throws_ok($$SELECT agent.is_terminal('running')$$, '42501', NULL, 'agent_runner may not');
RESET ROLE;

-- ---- latency ----
CREATE TEMP TABLE lat AS SELECT * FROM agent.latency('1 hour', '2001-01-01 01:00+00');
SELECT is((SELECT string_agg(language, ' ' ORDER BY language) FROM lat), 'node python',
	'latency: one row per language that had approved runs ending in the window');
SELECT is((SELECT (runs, started) FROM lat WHERE language = 'python'), (3::bigint, 3::bigint),
	'python: three runs of two tenants, all started (the window''s end and the day before left out)');
SELECT is((SELECT (approve_to_finish_p50, approve_to_finish_p99) FROM lat WHERE language = 'python'),
	(interval '2 s', interval '2.98 s'), 'python: approve to finish p50 2 s, p99 2.98 s');
SELECT is((SELECT (run_time_p50, run_time_p99) FROM lat WHERE language = 'python'),
	(interval '1 s', interval '1.49 s'), 'python: run time p50 1 s, p99 1.49 s');
SELECT is((SELECT (runs, started, approve_to_finish_p50, run_time_p50) FROM lat WHERE language = 'node'),
	(1::bigint, 0::bigint, interval '4 s', NULL::interval),
	'node: a run that never started counts for the wait, not for run time');
SELECT is((SELECT runs FROM agent.latency('1 hour', '2001-01-01 01:00:01+00') WHERE language = 'python'),
	4::bigint, 'a window one second later holds the run that ended at 01:00 too...');
SELECT is((SELECT runs FROM agent.latency('1 second', '2001-01-01 01:00:01+00') WHERE language = 'python'),
	1::bigint, '... and a one-second window holds it alone');

SELECT throws_ok($$SELECT * FROM agent.latency('0 s', now())$$, '22023', 'period must be positive',
	'a zero period is 22023');
SELECT throws_ok($$SELECT * FROM agent.latency('-1 hour', now())$$, '22023', 'period must be positive',
	'so is a negative one');
SELECT throws_ok($$SELECT * FROM agent.latency(NULL, now())$$, '22004', 'period must not be null',
	'a NULL period is 22004');

-- Every tenant's runs are the operators' (the auditor's); a tenant's
-- backend may not call it at all, with or without a tenant.
SET ROLE agent_auditor;
SELECT is((SELECT sum(runs) FROM agent.latency('1 hour', '2001-01-01 01:00+00')), 4::numeric,
	'agent_auditor sees the runs of both tenants');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('80a00000-0000-4000-8000-00000000000a', '80b00000-0000-4000-8000-00000000000a');
SELECT throws_ok($$SELECT * FROM agent.latency('1 hour', '2001-01-01 01:00+00')$$, '42501', NULL,
	'agent_backend may not read latency, not even for its own tenant');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
