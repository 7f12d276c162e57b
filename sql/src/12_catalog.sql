-- The catalog the IAM decision reads: plans, orgs, workspaces, models,
-- agents and conversations (threads), plus the runtimes a language maps to.
-- Whether a plan includes code execution and what one run costs are data
-- (agent.plans), not code.

CREATE TABLE agent.plans (
	plan					text PRIMARY KEY,
	code_execution			boolean NOT NULL DEFAULT false,
	credits_per_invocation	integer NOT NULL DEFAULT 2 CHECK (credits_per_invocation >= 0)
);
COMMENT ON TABLE agent.plans IS 'what each plan includes and what one code execution costs';

INSERT INTO agent.plans (plan, code_execution, credits_per_invocation) VALUES
	('free', false, 2),
	('growth', false, 2),
	('pro', true, 2);

CREATE TABLE agent.orgs (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	name			text NOT NULL,
	plan			text NOT NULL DEFAULT 'free' REFERENCES agent.plans (plan),
	-- Org policy, the admin's (agent_admin), never the backend's:
	-- the central switch for code execution by personal agents,
	personal_agents_code_execution boolean NOT NULL DEFAULT false,
	-- and whether an approver must be someone other than the requester.
	require_distinct_approver boolean NOT NULL DEFAULT true,
	-- limits (14_limits.sql): NULL means the default in agent.settings
	max_concurrent_runs integer CHECK (max_concurrent_runs >= 0),
	max_stored_bytes bigint CHECK (max_stored_bytes >= 0),
	created_at		timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.workspaces (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL REFERENCES agent.orgs (id),
	name		text NOT NULL,
	max_concurrent_runs integer CHECK (max_concurrent_runs >= 0),	-- 14_limits.sql
	created_at	timestamptz NOT NULL DEFAULT now(),
	UNIQUE (org_id, id)
);

-- Models are global: the platform's catalog, not a tenant's.
CREATE TABLE agent.models (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	name		text NOT NULL UNIQUE,
	provider	text,
	supports_code_execution boolean NOT NULL DEFAULT false
);

CREATE TABLE agent.agents (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL,
	workspace_id uuid NOT NULL,
	name		text NOT NULL,
	-- Fixed when the agent is created: the IAM checks depend on it.
	kind		text NOT NULL CHECK (kind IN ('specialist', 'shared', 'personal')),
	owner		text,			-- the user a personal agent belongs to
	model_id	uuid REFERENCES agent.models (id),
	code_execution_enabled boolean NOT NULL DEFAULT false,
	file_upload_enabled boolean NOT NULL DEFAULT false,
	created_at	timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id) REFERENCES agent.workspaces (org_id, id),
	UNIQUE (org_id, workspace_id, id)
);

CREATE TABLE agent.conversations (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL,
	workspace_id uuid NOT NULL,
	agent_id	uuid NOT NULL,
	title		text,
	created_by	text,
	code_execution_enabled boolean NOT NULL DEFAULT false,
	created_at	timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id)
		REFERENCES agent.agents (org_id, workspace_id, id),
	UNIQUE (org_id, workspace_id, id)
);
COMMENT ON TABLE agent.conversations IS 'threads; code_execution_enabled is the per-thread toggle';

-- What the approval card shows as the runtime of each language.
CREATE TABLE agent.runtimes (
	language	text PRIMARY KEY CHECK (language IN ('python', 'node', 'shell')),
	interpreter	text NOT NULL,
	version		text NOT NULL
);
INSERT INTO agent.runtimes (language, interpreter, version) VALUES
	('python', 'python3', '3.11'),
	('node', 'node', '18'),
	('shell', 'bash', '5.2');
