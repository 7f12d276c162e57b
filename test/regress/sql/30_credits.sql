-- Credits: grants, the charge at provisioning (the plan's price, once per
-- invocation, never below zero), the refund for a provisioning failure, and
-- balance = ledger sum throughout.
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
	('10000000-0000-4000-8000-000000000031', 'regress-credits', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('a3000000-0000-4000-8000-000000000001', 'Payer', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b3000000-0000-4000-8000-000000000001', 'a3000000-0000-4000-8000-000000000001', 'ws');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('c3000000-0000-4000-8000-000000000001', 'a3000000-0000-4000-8000-000000000001',
	 'b3000000-0000-4000-8000-000000000001', 'Analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000031', true);

-- Grants return the new balance.  (Before the requests: a request the
-- balance cannot cover is refused, insufficient_credits.)
SELECT agent.grant_credits('a3000000-0000-4000-8000-000000000001', 3, 'welcome');

-- Three approved invocations.  Everything runs in one transaction: a
-- running supervisor claims (and charges) approved invocations as soon as
-- they commit; here the test plays the supervisor.
BEGIN;
SELECT agent.set_tenant('a3000000-0000-4000-8000-000000000001', 'b3000000-0000-4000-8000-000000000001');
CREATE TEMP TABLE inv AS
SELECT k, agent.approve((agent.request_execution('b3000000-0000-4000-8000-000000000001',
		'c3000000-0000-4000-8000-000000000001', NULL, 'shell', 'echo ' || k, 'alice')).approval_id,
		'carol') AS id
  FROM generate_series(1, 3) k;

SELECT pg_temp.sqlstate_of($$SELECT agent.grant_credits('a3000000-0000-4000-8000-000000000001', 0, 'nothing')$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.grant_credits('a3000000-0000-4000-8000-000000000001', -5, 'theft')$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.grant_credits(NULL, 5, 'x')$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.grant_credits('00000000-0000-4000-8000-000000000000', 5, 'x')$$);

-- Charge: 2 credits (the pro price); a second call does not charge again.
SELECT agent.charge_invocation((SELECT id FROM inv WHERE k = 1)) AS charged_1;
SELECT agent.charge_invocation((SELECT id FROM inv WHERE k = 1)) AS charged_1_again;
SELECT balance FROM agent.credit_balances WHERE org_id = 'a3000000-0000-4000-8000-000000000001';
-- 1 credit left: the next charge is refused and changes nothing.
SELECT agent.charge_invocation((SELECT id FROM inv WHERE k = 2)) AS charged_2;
SELECT k, credits_charged FROM inv JOIN agent.invocations i USING (id) ORDER BY k;
-- The supervisor records that as the invocation's state.
UPDATE agent.invocations SET state = 'insufficient_credits', state_reason = 'balance 1, price 2'
 WHERE id = (SELECT id FROM inv WHERE k = 2);
-- Provisioning k=1 fails: refund exactly the charge, once.
UPDATE agent.invocations SET state = 'provisioning' WHERE id = (SELECT id FROM inv WHERE k = 1);
UPDATE agent.invocations SET state = 'provision_failed' WHERE id = (SELECT id FROM inv WHERE k = 1);
SELECT agent._audit('a3000000-0000-4000-8000-000000000001', 'b3000000-0000-4000-8000-000000000001',
	'invocation.provision_failed', (SELECT id FROM inv WHERE k = 1), 'supervisor', '{}') > 0 AS audited;
SELECT agent.refund_invocation((SELECT id FROM inv WHERE k = 1), 'jail setup failed') AS refunded_1;
SELECT agent.refund_invocation((SELECT id FROM inv WHERE k = 1), 'jail setup failed') AS refunded_1_again;
SELECT agent.refund_invocation((SELECT id FROM inv WHERE k = 3), 'never charged') AS refunded_3;
-- One charge per invocation, ever: a refunded one cannot be charged again.
SELECT pg_temp.sqlstate_of(format('SELECT agent.charge_invocation(%L)', (SELECT id FROM inv WHERE k = 1)));
SELECT agent.charge_invocation((SELECT id FROM inv WHERE k = 3)) AS charged_3;
SELECT pg_temp.sqlstate_of($$SELECT agent.charge_invocation(NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.charge_invocation('00000000-0000-4000-8000-000000000000')$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.refund_invocation('00000000-0000-4000-8000-000000000000', 'x')$$);

SELECT l.kind, l.amount, l.reason, inv.k
  FROM agent.credit_ledger l LEFT JOIN inv ON inv.id = l.invocation_id
 WHERE l.org_id = 'a3000000-0000-4000-8000-000000000001' ORDER BY l.id;
SELECT name, plan, credits_per_invocation, balance, granted, charged, refunded, ledger_sum, consistent
  FROM agent.credit_overview WHERE org_id = 'a3000000-0000-4000-8000-000000000001';

-- The price is data: a plan at 5 credits charges 5.
UPDATE agent.plans SET credits_per_invocation = 5 WHERE plan = 'pro';
SELECT agent.grant_credits('a3000000-0000-4000-8000-000000000001', 10, 'top-up');
SELECT agent.set_tenant('a3000000-0000-4000-8000-000000000001', 'b3000000-0000-4000-8000-000000000001');
INSERT INTO inv SELECT 4, agent.approve((agent.request_execution('b3000000-0000-4000-8000-000000000001',
		'c3000000-0000-4000-8000-000000000001', NULL, 'node', 'console.log(4)', 'alice')).approval_id,
		'carol');
SELECT agent.charge_invocation((SELECT id FROM inv WHERE k = 4)) AS charged_4;
UPDATE agent.plans SET credits_per_invocation = 2 WHERE plan = 'pro';
SELECT credits_charged FROM agent.invocations WHERE id = (SELECT id FROM inv WHERE k = 4);

-- The ledger is append-only and balances move only through it, even for
-- the owner; the CHECK stops an overdraft written by hand.
SELECT pg_temp.sqlstate_of($$UPDATE agent.credit_ledger SET amount = 1000 WHERE org_id = 'a3000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.credit_ledger WHERE org_id = 'a3000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$TRUNCATE agent.credit_ledger$$);
SELECT pg_temp.sqlstate_of($$UPDATE agent.credit_balances SET balance = 1000000 WHERE org_id = 'a3000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES ('a3000000-0000-4000-8000-000000000001', 'adjust', -1000, 'overdraft')$$);
SELECT pg_temp.sqlstate_of(format($$INSERT INTO agent.credit_ledger (org_id, invocation_id, kind, amount) VALUES ('a3000000-0000-4000-8000-000000000001', %L, 'charge', -2)$$, (SELECT id FROM inv WHERE k = 4)));
SELECT pg_temp.sqlstate_of($$INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES ('a3000000-0000-4000-8000-000000000001', 'adjust', -1, 'goodwill correction')$$);
SELECT balance, ledger_sum, consistent FROM agent.credit_overview
 WHERE org_id = 'a3000000-0000-4000-8000-000000000001';
-- Every org's balance equals its ledger sum.
SELECT count(*) FILTER (WHERE NOT consistent) AS inconsistent_orgs FROM agent.credit_overview;
COMMIT;
