-- Approvals: the card, approve bound to the code hash, deny, deciding twice,
-- expiry, another tenant's card, and the invocation state machine.
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
	('10000000-0000-4000-8000-000000000021', 'regress-approvals', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a2000000-0000-4000-8000-000000000001', 'Approvers', 'pro'),
	('a2000000-0000-4000-8000-000000000002', 'Other', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b2000000-0000-4000-8000-000000000001', 'a2000000-0000-4000-8000-000000000001', 'ws'),
	('b2000000-0000-4000-8000-000000000002', 'a2000000-0000-4000-8000-000000000002', 'ws');
-- Credits, so that requests are not refused for want of them (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'regress')) AS funded FROM agent.orgs WHERE id IN ('a2000000-0000-4000-8000-000000000001', 'a2000000-0000-4000-8000-000000000002');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('c2000000-0000-4000-8000-000000000001', 'a2000000-0000-4000-8000-000000000001',
	 'b2000000-0000-4000-8000-000000000001', 'Analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000021', true),
	('c2000000-0000-4000-8000-000000000002', 'a2000000-0000-4000-8000-000000000002',
	 'b2000000-0000-4000-8000-000000000002', 'Analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000021', true);

-- Four requests in org Approvers (keys k1..k4), one in Other.
CREATE TEMP TABLE req AS
SELECT k, (agent.request_execution('b2000000-0000-4000-8000-000000000001',
		   'c2000000-0000-4000-8000-000000000001', NULL, 'python',
		   format('print(%s)', k), 'alice', 'step ' || k, 'k' || k)).*
  FROM (SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000001',
								'b2000000-0000-4000-8000-000000000001')) t,
	   generate_series(1, 4) k;
SELECT k, status FROM req ORDER BY k;
BEGIN;
SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000002', 'b2000000-0000-4000-8000-000000000002');
INSERT INTO req SELECT 99, r.* FROM agent.request_execution('b2000000-0000-4000-8000-000000000002',
		'c2000000-0000-4000-8000-000000000002', NULL, 'shell', 'id', 'mallory') r;
COMMIT;

-- The card, as the UI renders it.
SELECT approval_id = (SELECT approval_id FROM req WHERE k = 1) AS right_card, status, title,
	   agent_name, language, runtime ~ '^python3 3\.[0-9]' AS runtime_python3, risk_level, description, code, code_lines,
	   code_sha256 = encode(sha256('print(1)'::bytea), 'hex') AS hash_ok, requested_by,
	   decided_by
  FROM agent.approval_card((SELECT approval_id FROM req WHERE k = 1));
SELECT pg_temp.sqlstate_of($$SELECT agent.approval_card('00000000-0000-4000-8000-000000000000')$$);

-- Everything from the first decision on runs in one transaction: a running
-- supervisor claims approved invocations as soon as they commit, and this
-- test moves them by hand.
BEGIN;
SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000001', 'b2000000-0000-4000-8000-000000000001');
-- An approver who was shown other code cannot approve this card.
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'carol', %L)$$,
	(SELECT approval_id FROM req WHERE k = 1), encode(sha256('print(666)'::bytea), 'hex')));
-- With the hash of the code shown, or without one, approval works.
SELECT agent.approve((SELECT approval_id FROM req WHERE k = 1), 'carol',
	encode(sha256('print(1)'::bytea), 'hex')) = (SELECT invocation_id FROM req WHERE k = 1) AS approved_1;
SELECT agent.approve((SELECT approval_id FROM req WHERE k = 2), 'carol') IS NOT NULL AS approved_2;
-- Deciding twice is an error, either way.
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'dave')$$, (SELECT approval_id FROM req WHERE k = 1)));
SELECT pg_temp.sqlstate_of(format($$SELECT agent.deny(%L, 'dave', 'changed my mind')$$, (SELECT approval_id FROM req WHERE k = 1)));
-- Deny is final.
SELECT agent.deny((SELECT approval_id FROM req WHERE k = 3), 'carol', 'touches production') IS NOT NULL AS denied_3;
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'dave')$$, (SELECT approval_id FROM req WHERE k = 3)));
-- Another tenant's card cannot be seen, approved or denied from here.
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'carol')$$, (SELECT approval_id FROM req WHERE k = 99)));
SELECT pg_temp.sqlstate_of(format($$SELECT agent.deny(%L, 'carol', 'no')$$, (SELECT approval_id FROM req WHERE k = 99)));
-- Bad arguments.
SELECT pg_temp.sqlstate_of($$SELECT agent.approve(NULL, 'carol')$$);
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, NULL)$$, (SELECT approval_id FROM req WHERE k = 4)));
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, '  ')$$, (SELECT approval_id FROM req WHERE k = 4)));
-- No tenant, no decision.
SELECT agent.set_tenant(NULL, NULL);
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'carol')$$, (SELECT approval_id FROM req WHERE k = 4)));

SELECT r.k, a.status, a.decided_by, a.decision_reason, a.decided_at IS NOT NULL AS decided,
	   a.approved_code_sha256 = a.code_sha256 AS bound, i.state, i.state_reason,
	   i.approved_at IS NOT NULL AS has_approved_at
  FROM req r JOIN agent.approval_requests a ON a.id = r.approval_id
  JOIN agent.invocations i ON i.id = r.invocation_id ORDER BY r.k;

-- Expiry: nothing is due now; an hour from now k=4 and Other's card are.
SELECT agent.expire_pending_approvals();
-- (Cards of other tests are due too: expiry acts on every tenant.)
SELECT agent.expire_pending_approvals(now() + interval '1 hour') >= 2 AS expired_some;
SELECT agent.expire_pending_approvals(now() + interval '1 hour');
SELECT r.k, a.status, a.decision_reason, i.state, i.state_reason
  FROM req r JOIN agent.approval_requests a ON a.id = r.approval_id
  JOIN agent.invocations i ON i.id = r.invocation_id WHERE r.k IN (4, 99) ORDER BY r.k;
SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000001', 'b2000000-0000-4000-8000-000000000001');
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'carol')$$, (SELECT approval_id FROM req WHERE k = 4)));
-- The timeout is a setting; a card past it is refused even before expiry ran.
UPDATE agent.settings SET value = '0 seconds' WHERE key = 'approval_timeout';
SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000001', 'b2000000-0000-4000-8000-000000000001');
SELECT status FROM agent.request_execution('b2000000-0000-4000-8000-000000000001',
	'c2000000-0000-4000-8000-000000000001', NULL, 'python', 'print(5)', 'alice', NULL, 'k5');
UPDATE agent.settings SET value = '15 minutes' WHERE key = 'approval_timeout';
SELECT agent.set_tenant('a2000000-0000-4000-8000-000000000001', 'b2000000-0000-4000-8000-000000000001');
SELECT pg_temp.sqlstate_of(format($$SELECT agent.approve(%L, 'carol')$$,
	(SELECT approval_id FROM agent.invocations WHERE idempotency_key = 'k5')));

-- The audit trail of the decisions.
SELECT e.event_type, e.actor, e.details ->> 'reason' AS reason,
	   e.details ->> 'code_sha256' = i.code_sha256 AS hash_recorded
  FROM agent.audit_events e JOIN agent.invocations i ON i.id = e.invocation_id
 WHERE e.org_id = 'a2000000-0000-4000-8000-000000000001' AND e.event_type LIKE 'approval.%'
 ORDER BY e.id;

-- The state machine: allowed moves pass, others are refused, terminal
-- states never change.  (As the owner, who bypasses every API check.)
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET state = 'running' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 2)));
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET state = 'approved' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 3)));
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET state = 'provisioning' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 2)));
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET state = 'approved' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 2)));
-- Leave k=2 cancelled rather than provisioning: nothing is working on it.
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET state = 'cancelled', state_reason = 'test' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 2)));
SELECT f.s AS from_state, string_agg(t.s, ', ' ORDER BY t.n) AS may_become
  FROM (VALUES (1, 'pending_approval'), (2, 'approved'), (3, 'provisioning'), (4, 'running'),
			   (5, 'succeeded'), (6, 'failed'), (7, 'timed_out'), (8, 'killed'), (9, 'denied'),
			   (10, 'expired'), (11, 'cancelled'), (12, 'provision_failed'),
			   (13, 'insufficient_credits')) f(n, s)
 CROSS JOIN (VALUES (1, 'pending_approval'), (2, 'approved'), (3, 'provisioning'), (4, 'running'),
			   (5, 'succeeded'), (6, 'failed'), (7, 'timed_out'), (8, 'killed'), (9, 'denied'),
			   (10, 'expired'), (11, 'cancelled'), (12, 'provision_failed'),
			   (13, 'insufficient_credits')) t(n, s)
 WHERE f.s <> t.s AND agent.invocation_transition_allowed(f.s, t.s)
 GROUP BY f.n, f.s ORDER BY f.n;

-- Code never changes after the request, so approved code is the code that runs.
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.invocations SET code = 'rm -rf /' WHERE id = %L$$,
	(SELECT invocation_id FROM req WHERE k = 1)));
SELECT pg_temp.sqlstate_of(format($$UPDATE agent.approval_requests SET code_sha256 = agent.code_sha256('rm -rf /') WHERE id = %L$$,
	(SELECT approval_id FROM req WHERE k = 1)));
SELECT agent.approved_code_matches((SELECT invocation_id FROM req WHERE k = 1)) AS k1_runnable,
	   agent.approved_code_matches((SELECT invocation_id FROM req WHERE k = 3)) AS k3_runnable;
-- Even with the triggers switched off by a superuser, the stored hash tells.
SAVEPOINT tamper;
SET LOCAL session_replication_role = replica;
UPDATE agent.invocations SET code = 'print("evil")' WHERE id = (SELECT invocation_id FROM req WHERE k = 1);
SELECT agent.approved_code_matches((SELECT invocation_id FROM req WHERE k = 1)) AS k1_runnable_after_tamper;
ROLLBACK TO SAVEPOINT tamper;
COMMIT;
