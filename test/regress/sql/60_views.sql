-- The DBA views: one row per invocation (request, IAM decision, approval,
-- charge, tool call), every IAM decision, and balances next to ledger totals.
INSERT INTO agent.models (id, name, supports_code_execution) VALUES
	('10000000-0000-4000-8000-000000000061', 'regress-views', true);
INSERT INTO agent.orgs (id, name, plan) VALUES ('a6000000-0000-4000-8000-000000000001', 'Viewed', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b6000000-0000-4000-8000-000000000001', 'a6000000-0000-4000-8000-000000000001', 'ws');
-- Credits, so that requests are not refused for want of them (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'regress')) AS funded FROM agent.orgs WHERE id IN ('a6000000-0000-4000-8000-000000000001');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('c6000000-0000-4000-8000-000000000001', 'a6000000-0000-4000-8000-000000000001',
	 'b6000000-0000-4000-8000-000000000001', 'Analyst', 'specialist',
	 '10000000-0000-4000-8000-000000000061', true);
SELECT agent.grant_credits('a6000000-0000-4000-8000-000000000001', 10, 'welcome');

-- One run that finished, one provisioning failure (refunded), one denied
-- card, one IAM refusal.  One transaction, the test playing the supervisor
-- (a running one would claim approved invocations as soon as they commit).
BEGIN;
SELECT agent.set_tenant('a6000000-0000-4000-8000-000000000001', 'b6000000-0000-4000-8000-000000000001');
CREATE TEMP TABLE r AS
SELECT k, (agent.request_execution('b6000000-0000-4000-8000-000000000001',
		'c6000000-0000-4000-8000-000000000001', NULL, 'python', 'print(' || k || ')', 'alice',
		NULL, 'v' || k)).*
  FROM generate_series(1, 3) k;
SELECT agent.approve(approval_id, 'carol') IS NOT NULL AS approved FROM r WHERE k IN (1, 2);
SELECT agent.deny(approval_id, 'carol', 'not today') IS NOT NULL AS denied FROM r WHERE k = 3;
SELECT status, reason FROM agent.request_execution('b6000000-0000-4000-8000-000000000001',
		'c6000000-0000-4000-8000-000000000001', NULL, 'cobol', 'DISPLAY 1', 'alice');
-- What the supervisor will do: charge, run, record; or charge, fail, refund.
SELECT agent.charge_invocation(invocation_id) FROM r WHERE k IN (1, 2) ORDER BY k;
UPDATE agent.invocations SET state = 'provisioning' WHERE id IN (SELECT invocation_id FROM r WHERE k IN (1, 2));
UPDATE agent.invocations SET state = 'running' WHERE id = (SELECT invocation_id FROM r WHERE k = 1);
UPDATE agent.invocations SET state = 'succeeded', exit_code = 0 WHERE id = (SELECT invocation_id FROM r WHERE k = 1);
SELECT agent._audit('a6000000-0000-4000-8000-000000000001', 'b6000000-0000-4000-8000-000000000001',
	'invocation.finished', invocation_id, 'supervisor', '{}') > 0 AS audited FROM r WHERE k = 1;
INSERT INTO agent.agent_tool_calls (invocation_id, org_id, workspace_id, agent_id, status, exit_code, output_preview)
	SELECT invocation_id, 'a6000000-0000-4000-8000-000000000001', 'b6000000-0000-4000-8000-000000000001',
		   'c6000000-0000-4000-8000-000000000001', 'succeeded', 0, '1'
	  FROM r WHERE k = 1;
UPDATE agent.invocations SET state = 'provision_failed', state_reason = 'no cgroup'
 WHERE id = (SELECT invocation_id FROM r WHERE k = 2);
SELECT agent._audit('a6000000-0000-4000-8000-000000000001', 'b6000000-0000-4000-8000-000000000001',
	'invocation.provision_failed', invocation_id, 'supervisor', '{}') > 0 AS audited FROM r WHERE k = 2;
SELECT agent.refund_invocation(invocation_id, 'provisioning failed') FROM r WHERE k = 2;

SELECT r.k, o.state, o.iam_decision, o.approval_status, o.decided_by,
	   o.approved_code_sha256 = o.code_sha256 AS approved_this_code,
	   o.credits_charged_ledger, o.credits_refunded, o.credits_charged,
	   o.tool_call_status, o.tool_call_exit_code
  FROM agent.invocation_overview o JOIN r ON r.invocation_id = o.invocation_id ORDER BY r.k;
SELECT allowed, reason, language, requested_by FROM agent.iam_decisions
 WHERE org_id = 'a6000000-0000-4000-8000-000000000001' ORDER BY event_id;
SELECT name, plan, balance, granted, charged, refunded, adjusted, ledger_sum, consistent
  FROM agent.credit_overview WHERE org_id = 'a6000000-0000-4000-8000-000000000001';
COMMIT;
