-- DBA views.  Security invoker, so a backend sees only its tenant's rows
-- through them and an auditor sees everything.

-- One row per invocation: the request, the IAM decision, the approval (who,
-- when, what), the charge and the tool call.
CREATE VIEW agent.invocation_overview WITH (security_invoker = true) AS
SELECT i.id AS invocation_id, i.org_id, i.workspace_id, i.agent_id, i.conversation_id,
	   i.requested_by, i.language, i.code_sha256, i.description, i.state, i.state_reason,
	   i.created_at,
	   d.id AS iam_event_id, d.event_type AS iam_decision, d.created_at AS iam_decided_at,
	   a.id AS approval_id, a.status AS approval_status, a.decided_by, a.decided_at,
	   a.decision_reason, a.approved_code_sha256, a.expires_at AS approval_expires_at,
	   -ch.amount AS credits_charged_ledger, rf.amount AS credits_refunded,
	   i.credits_charged, ch.created_at AS charged_at,
	   t.id AS tool_call_id, t.status AS tool_call_status, t.exit_code AS tool_call_exit_code,
	   i.exit_code, i.signal, i.timed_out, i.oom_killed, i.output_truncated,
	   i.approved_at, i.provisioned_at, i.started_at, i.finished_at
  FROM agent.invocations i
  LEFT JOIN LATERAL (
		SELECT e.id, e.event_type, e.created_at FROM agent.audit_events e
		 WHERE e.invocation_id = i.id AND e.event_type = 'capability.invoke_allowed'
		 ORDER BY e.id LIMIT 1) d ON true
  LEFT JOIN agent.approval_requests a ON a.id = i.approval_id
  LEFT JOIN agent.credit_ledger ch ON ch.invocation_id = i.id AND ch.kind = 'charge'
  LEFT JOIN agent.credit_ledger rf ON rf.invocation_id = i.id AND rf.kind = 'refund'
  LEFT JOIN agent.agent_tool_calls t ON t.invocation_id = i.id;
COMMENT ON VIEW agent.invocation_overview IS
	'one row per invocation: request, IAM decision, approval, charge, tool call';

-- Every IAM decision, including refusals (which create no invocation).
CREATE VIEW agent.iam_decisions WITH (security_invoker = true) AS
SELECT e.id AS event_id, e.org_id, e.workspace_id, e.created_at,
	   e.event_type = 'capability.invoke_allowed' AS allowed,
	   e.details ->> 'reason' AS reason, e.details ->> 'message' AS message,
	   e.actor AS requested_by, (e.details ->> 'agent_id')::uuid AS agent_id,
	   (e.details ->> 'conversation_id')::uuid AS conversation_id,
	   e.details ->> 'language' AS language, e.details ->> 'code_sha256' AS code_sha256,
	   e.invocation_id
  FROM agent.audit_events e
 WHERE e.event_type IN ('capability.invoke_allowed', 'capability.invoke_denied');

-- Credit balances next to their ledger totals; consistent is balance = sum.
CREATE VIEW agent.credit_overview WITH (security_invoker = true) AS
SELECT o.id AS org_id, o.name, o.plan, p.credits_per_invocation,
	   coalesce(b.balance, 0) AS balance,
	   coalesce(l.granted, 0) AS granted, coalesce(l.charged, 0) AS charged,
	   coalesce(l.refunded, 0) AS refunded, coalesce(l.adjusted, 0) AS adjusted,
	   coalesce(l.ledger_sum, 0) AS ledger_sum,
	   coalesce(b.balance, 0) = coalesce(l.ledger_sum, 0) AS consistent
  FROM agent.orgs o
  JOIN agent.plans p ON p.plan = o.plan
  LEFT JOIN agent.credit_balances b ON b.org_id = o.id
  LEFT JOIN (
		SELECT org_id,
			   sum(amount) FILTER (WHERE kind = 'grant') AS granted,
			   -sum(amount) FILTER (WHERE kind = 'charge') AS charged,
			   sum(amount) FILTER (WHERE kind = 'refund') AS refunded,
			   sum(amount) FILTER (WHERE kind = 'adjust') AS adjusted,
			   sum(amount) AS ledger_sum
		  FROM agent.credit_ledger GROUP BY org_id) l ON l.org_id = o.id;
COMMENT ON VIEW agent.credit_overview IS 'credit balances with ledger totals per org';
