-- Row-level security, privileges and the roles' reach.
--
-- agent_backend acts for one tenant at a time: it reads its org's (and
-- workspace's) rows and changes anything only through the SECURITY DEFINER
-- API, which checks the tenant context itself.  It has no table-level
-- write privilege at all: with one it could LOCK a table every tenant and
-- the supervisor use (anything above ACCESS SHARE needs UPDATE, DELETE or
-- TRUNCATE), take row locks with SELECT ... FOR UPDATE, choose primary
-- keys, or rewrite what the IAM checks read.  agent_admin (the org's
-- administrator, also through set_tenant) reads its org's row and changes
-- the org's policy through functions only.  agent_auditor reads every row
-- of every tenant and writes nothing.  The owner (the supervisor, a
-- superuser) bypasses row-level security.

-- Tenant tables: row-level security on, nothing visible without a policy.
ALTER TABLE agent.orgs ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.workspaces ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.conversations ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.invocations ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.approval_requests ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_tool_calls ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.tool_invocations ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.credit_balances ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.credit_ledger ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.audit_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.audit_heads ENABLE ROW LEVEL SECURITY;

-- The backend's view of its tenant.
CREATE POLICY backend_org ON agent.orgs FOR SELECT TO agent_backend
	USING (id = agent.current_org());
CREATE POLICY backend_org ON agent.workspaces FOR SELECT TO agent_backend
	USING (org_id = agent.current_org());
CREATE POLICY backend_workspace ON agent.agents FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.conversations FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.invocations FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.approval_requests FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.agent_tool_calls FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.tool_invocations FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_org ON agent.credit_balances FOR SELECT TO agent_backend
	USING (org_id = agent.current_org());
-- Org-wide rows (grants, credits.granted events) have no workspace.
CREATE POLICY backend_workspace ON agent.credit_ledger FOR SELECT TO agent_backend
	USING (org_id = agent.current_org()
		   AND (workspace_id IS NULL OR workspace_id = agent.current_workspace()));
CREATE POLICY backend_workspace ON agent.audit_events FOR SELECT TO agent_backend
	USING (org_id = agent.current_org()
		   AND (workspace_id IS NULL OR workspace_id = agent.current_workspace()));

-- The admin's view: its org's row (the policy it sets).
CREATE POLICY admin_org ON agent.orgs FOR SELECT TO agent_admin
	USING (id = agent.current_org());

-- The auditor reads every tenant (no BYPASSRLS needed).
CREATE POLICY auditor_read ON agent.orgs FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.workspaces FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agents FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.conversations FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.invocations FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.approval_requests FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agent_tool_calls FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.tool_invocations FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.credit_balances FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.credit_ledger FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.audit_events FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.audit_heads FOR SELECT TO agent_auditor USING (true);

-- Table privileges.
REVOKE ALL ON ALL TABLES IN SCHEMA agent FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA agent FROM PUBLIC;
GRANT USAGE ON SCHEMA agent TO agent_backend, agent_admin, agent_auditor;

GRANT SELECT ON agent.plans, agent.models, agent.runtimes, agent.settings,
	agent.orgs, agent.workspaces, agent.agents, agent.conversations,
	agent.invocations, agent.approval_requests, agent.agent_tool_calls,
	agent.tool_invocations, agent.credit_balances, agent.credit_ledger,
	agent.audit_events, agent.invocation_overview, agent.iam_decisions,
	agent.credit_overview
	TO agent_backend;
GRANT SELECT ON agent.plans, agent.orgs TO agent_admin;

GRANT SELECT ON ALL TABLES IN SCHEMA agent TO agent_auditor;

-- Function privileges: nothing by default, then the API.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agent FROM PUBLIC;
-- Policies call these as the current user.  (The CHECK functions
-- is_invocation_state / is_approval_status need no grant: only the owner
-- writes those tables.)
GRANT EXECUTE ON FUNCTION agent.current_org(), agent.current_workspace(),
	agent.code_sha256(text) TO PUBLIC;
GRANT EXECUTE ON FUNCTION
	agent.set_tenant(uuid, uuid),
	agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer, text),
	agent.approve(uuid, text, text, boolean),
	agent.deny(uuid, text, text),
	agent.approval_card(uuid),
	agent.invocation_transition_allowed(text, text),
	agent.supervisor_available()
	TO agent_backend;
GRANT EXECUTE ON FUNCTION agent.set_tenant(uuid, uuid) TO agent_admin;
-- set_tenant() runs as its caller: its check and the GUCs it sets (which
-- a caller could set with SET LOCAL anyway), and the one-statement form.
GRANT EXECUTE ON FUNCTION agent._tenant_problem(uuid, uuid), agent._set_tenant_gucs(uuid, uuid),
	agent.tenant(uuid, uuid) TO agent_backend, agent_admin;
-- The guard of the security-invoker API functions (pending_approvals,
-- wait_result): it only raises when no tenant is set.
GRANT EXECUTE ON FUNCTION agent._require_tenant(boolean) TO agent_backend, agent_admin;
-- The approver's side (28_approvals.sql).
GRANT SELECT ON agent.approval_cards TO agent_backend;
GRANT EXECUTE ON FUNCTION agent.pending_approvals(), agent.approvals_channel() TO agent_backend;
-- The rules of the API's arguments and settings are no secret.
GRANT EXECUTE ON FUNCTION agent.text_limits(), agent.setting_rules()
	TO agent_backend, agent_admin, agent_auditor;
GRANT EXECUTE ON FUNCTION
	agent.verify_audit_chain(uuid),
	agent._audit_hash(integer, text, bigint, uuid, uuid, text, uuid, text, jsonb, timestamptz),
	agent._audit_v1_unambiguous(text, bigint, uuid, text, text, jsonb, timestamptz),
	agent._audit_anchors(uuid),
	agent._audit_anchors_configured(),
	agent.approval_card(uuid),
	agent.invocation_transition_allowed(text, text),
	agent.supervisor_available()
	TO agent_auditor;
