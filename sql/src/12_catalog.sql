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
	created_at		timestamptz NOT NULL DEFAULT now(),
	-- (a limit added in 0.3.0, last as columns added later are)
	max_pending_requests integer CHECK (max_pending_requests >= 0)
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

-- The versions the card shows are the interpreters' own: the jail runs
-- /usr/bin/python3, /usr/bin/node and /bin/bash of the host (bind-mounted
-- read-only, src/jail/sandbox.c), so agent.refresh_runtimes() asks those
-- binaries on the database host (COPY FROM PROGRAM: the owner only, as a
-- superuser).  The install runs it once; run it again after upgrading an
-- interpreter (agent.after_restore() does, after a restore: 98_backup.sql).  A runner host with other versions is not reflected here
-- (docs/control-plane.md, "Runtimes").
CREATE TABLE agent._runtime_probe (
	language	text NOT NULL,
	version		text
);
COMMENT ON TABLE agent._runtime_probe IS 'scratch rows of agent.refresh_runtimes()';

CREATE FUNCTION agent.refresh_runtimes()
	RETURNS TABLE (language text, interpreter text, version text, probed boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_column
BEGIN
	DELETE FROM agent._runtime_probe;
	-- One fixed program (no input reaches it); an interpreter that is
	-- missing or fails prints an empty version and keeps the old one.
	COPY agent._runtime_probe (language, version) FROM PROGRAM $prog$/bin/sh -c '
printf "python\t%s\n" "$(/usr/bin/python3 -I -c "import platform; print(platform.python_version())" 2>/dev/null)"
printf "node\t%s\n" "$(/usr/bin/node -e "process.stdout.write(process.versions.node)" 2>/dev/null)"
printf "shell\t%s\n" "$(/bin/bash --norc --noprofile -c "echo \${BASH_VERSINFO[0]}.\${BASH_VERSINFO[1]}.\${BASH_VERSINFO[2]}" 2>/dev/null)"
'$prog$;
	UPDATE agent.runtimes r SET version = p.version
	  FROM agent._runtime_probe p
	 WHERE p.language = r.language AND p.version ~ '^[0-9]+(\.[0-9]+)*$';
	RETURN QUERY
		SELECT r.language, r.interpreter, r.version,
			   EXISTS (SELECT 1 FROM agent._runtime_probe p
						WHERE p.language = r.language AND p.version = r.version)
		  FROM agent.runtimes r ORDER BY r.language;
	DELETE FROM agent._runtime_probe;
END
$$;
COMMENT ON FUNCTION agent.refresh_runtimes() IS
	'read the versions of the interpreters the jail runs into agent.runtimes (what approval cards show)';

SELECT count(*) FROM agent.refresh_runtimes();
