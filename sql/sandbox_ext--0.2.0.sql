-- sandbox_ext install script, part 00: the schema's comment and defaults.
-- Parts are applied in file-name order; see the Makefile.

\echo Use "CREATE EXTENSION sandbox_ext" to load this file. \quit

COMMENT ON SCHEMA agent IS 'sandbox_ext: approval-gated, billed, audited code execution for AI agents';
-- Core C entry points shared by the rest of the extension.

-- Wake the supervisor when the calling transaction commits (no-op, returning
-- false, when the library was not preloaded and no supervisor exists).
CREATE FUNCTION agent._wake_supervisor() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_wake_supervisor'
	LANGUAGE C VOLATILE STRICT;

-- The same, for a cancel request: the supervisor then looks for cancelled
-- runs (it does not on other wake-ups).
CREATE FUNCTION agent._wake_supervisor_cancel() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_wake_supervisor_cancel'
	LANGUAGE C VOLATILE STRICT;

-- True when sandbox_ext is in shared_preload_libraries, so approved
-- invocations will actually be run by the supervisor.
CREATE FUNCTION agent.supervisor_available() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_preloaded'
	LANGUAGE C STABLE STRICT;
COMMENT ON FUNCTION agent.supervisor_available() IS
	'true when sandbox_ext is preloaded and a supervisor can run approved invocations';
-- Tenancy: the roles, the tenant context the backend sets per transaction,
-- and the extension's own settings table.
--
-- Every tenant table carries org_id (and workspace_id where the row belongs
-- to one workspace).  The backend names the tenant it acts for with
-- agent.set_tenant() (or SET LOCAL sandbox.org_id / sandbox.workspace_id);
-- row-level security (38_security.sql) and every SECURITY DEFINER API
-- function read it back through agent.current_org() and
-- agent.current_workspace().  The supervisor runs as the owner and is not
-- bound by either.

-- Roles are cluster-wide: another database of the cluster may already have
-- created them, so create them only when missing and never drop them.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'agent_backend') THEN
		CREATE ROLE agent_backend NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'agent_auditor') THEN
		CREATE ROLE agent_auditor NOLOGIN;
	END IF;
	-- The org's administrator (an admin console), acting through
	-- set_tenant() like the backend: org policy is its, not the backend's.
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'agent_admin') THEN
		CREATE ROLE agent_admin NOLOGIN;
	END IF;
END
$roles$;

-- The tenant of the current transaction, or NULL when none is set.  The C
-- check hook has already refused anything that is not a uuid.
CREATE FUNCTION agent.current_org() RETURNS uuid
	LANGUAGE sql STABLE PARALLEL SAFE
	RETURN nullif(pg_catalog.current_setting('sandbox.org_id', true), '')::uuid;

CREATE FUNCTION agent.current_workspace() RETURNS uuid
	LANGUAGE sql STABLE PARALLEL SAFE
	RETURN nullif(pg_catalog.current_setting('sandbox.workspace_id', true), '')::uuid;

-- The two GUCs themselves (SET LOCAL sandbox.org_id / sandbox.workspace_id,
-- NULL clears), in C (src/guards.c).  Internal: agent.set_tenant() below
-- checks the pair first.
CREATE FUNCTION agent._set_tenant_gucs(org uuid, workspace uuid) RETURNS void
	AS 'MODULE_PATHNAME', 'sandbox_set_tenant'
	LANGUAGE C VOLATILE;

-- Whether a tenant exists as named: NULL when it does, otherwise what is
-- wrong.  Security definer, so that the check does not depend on what the
-- caller may read; it tells nothing a caller that may name any tenant
-- (agent_backend, agent_admin) could not learn by naming it.
CREATE FUNCTION agent._tenant_problem(org uuid, workspace uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF org IS NULL THEN
		RETURN CASE WHEN workspace IS NOT NULL THEN 'null_org' END;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = org) THEN
		RETURN 'unknown_org';
	END IF;
	IF workspace IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.workspaces w
											  WHERE w.id = workspace AND w.org_id = org) THEN
		RETURN 'unknown_workspace';
	END IF;
	RETURN NULL;
END
$$;

-- Name the tenant for the rest of the current transaction (SET LOCAL
-- semantics: outside a transaction block it lasts one statement only; see
-- agent.tenant() for one statement).  The org must exist and the workspace
-- (NULL: org-wide, as for agent_admin) must belong to it; (NULL, NULL)
-- clears.  A refused pair leaves the previous tenant in place.
CREATE FUNCTION agent.set_tenant(org uuid, workspace uuid) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_problem text := agent._tenant_problem(org, workspace);
BEGIN
	IF v_problem = 'null_org' THEN
		RAISE EXCEPTION 'org must not be null when a workspace is given'
			USING ERRCODE = 'null_value_not_allowed';
	ELSIF v_problem = 'unknown_org' THEN
		RAISE EXCEPTION 'org % does not exist', org
			USING ERRCODE = 'no_data_found',
				  HINT = 'Create it with agent.create_org() (the operator).';
	ELSIF v_problem = 'unknown_workspace' THEN
		RAISE EXCEPTION 'workspace % does not exist in org %', workspace, org
			USING ERRCODE = 'no_data_found',
				  HINT = 'Name a workspace of that org, or NULL for the org itself.';
	END IF;
	PERFORM agent._set_tenant_gucs(org, workspace);
END
$$;
COMMENT ON FUNCTION agent.set_tenant(uuid, uuid) IS
	'set sandbox.org_id and sandbox.workspace_id for the current transaction (the pair must exist)';

-- The same for one statement: a row source that names the tenant when the
-- statement starts reading it and returns the pair, so that a call in the
-- statement's select list, or a LATERAL call that uses its columns, runs
-- in that tenant without a transaction block:
--   SELECT agent.create_conversation(...) FROM agent.tenant($1, $2);
--   SELECT r.* FROM agent.tenant($1, $2) t,
--          LATERAL agent.request_execution(t.workspace_id, ...) r;
-- Like set_tenant, it lasts to the end of the transaction it runs in.
CREATE FUNCTION agent.tenant(org uuid, workspace uuid DEFAULT NULL,
							 OUT org_id uuid, OUT workspace_id uuid)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent.set_tenant(org, workspace);
	org_id := org;
	workspace_id := workspace;
END
$$;
COMMENT ON FUNCTION agent.tenant(uuid, uuid) IS
	'name the tenant (as set_tenant) and return it, for one-statement calls: SELECT f(...) FROM agent.tenant(org, ws)';

-- The API's guard: the org (and workspace) the caller acts for.  Raises
-- instead of returning NULL so that a forgotten set_tenant() is a clear
-- error, not an empty result.
CREATE FUNCTION agent._require_tenant(need_workspace boolean DEFAULT true)
	RETURNS boolean
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	IF agent.current_org() IS NULL
		OR (need_workspace AND agent.current_workspace() IS NULL) THEN
		RAISE EXCEPTION 'no tenant is set for this transaction'
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Call agent.set_tenant(org, workspace) at the start of the transaction.';
	END IF;
	RETURN true;
END
$$;

-- How long each kind of free-text argument may be, in bytes: the one
-- definition (docs/reference.md, "Limits", lists the same table; pgTAP
-- 70_errors checks it).  File names are agent.valid_relative_path()'s
-- (50_sessions.sql); code is max_code_bytes (agent.settings).
-- (No SET clause, it names nothing: a caller's query inlines it.)
CREATE FUNCTION agent.text_limits() RETURNS TABLE (kind text, max_bytes integer)
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
	VALUES ('person', 256), ('name', 200), ('title', 1000), ('description', 8192),
		   ('reason', 2000), ('idempotency_key', 200), ('content_type', 255),
		   ('language', 32), ('provider', 200), ('host', 253), ('retention', 100),
		   ('runner_name', 64)
$$;
COMMENT ON FUNCTION agent.text_limits() IS
	'the longest value, in bytes, of each kind of free-text argument of the API';

-- A value as an error message may show it: at most 64 characters, so that
-- no error echoes a huge input.
CREATE FUNCTION agent._shown(value text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN CASE WHEN pg_catalog.length(value) > 64
				THEN pg_catalog.left(value, 61) || '...' ELSE value END;

-- The check of one free-text argument: NULL passes (nullness is the
-- caller's rule), longer than its kind's limit is 22001, and a header-like
-- value (header => true: a content type, an idempotency key) with a
-- control character (CR, LF, ...) is 22023.  The message names the
-- argument and the sizes, never the value.
CREATE FUNCTION agent._check_text(value text, argument text, kind text,
								  header boolean DEFAULT false)
	RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_max	integer;
BEGIN
	IF value IS NULL THEN
		RETURN true;
	END IF;
	SELECT l.max_bytes INTO v_max FROM agent.text_limits() l WHERE l.kind = _check_text.kind;
	IF v_max IS NULL THEN
		RAISE EXCEPTION 'unknown kind of text argument "%"', kind;	-- a bug of ours
	END IF;
	IF pg_catalog.octet_length(value) > v_max THEN
		RAISE EXCEPTION '% is too long', argument
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = pg_catalog.format('It is %s bytes; the limit is %s.',
											 pg_catalog.octet_length(value), v_max);
	END IF;
	IF header AND value ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION '% must not contain control characters', argument
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Line breaks and other control characters are refused where the value could end up in a header.';
	END IF;
	RETURN true;
END
$$;

-- A person's name as names are compared (requester against approver,
-- reserved names): white space trimmed at both ends, lower case.
CREATE FUNCTION agent._person_key(name text) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN pg_catalog.lower(pg_catalog.regexp_replace(name,
		'^[[:space:]\u00a0\u200b\ufeff]+|[[:space:]\u00a0\u200b\ufeff]+$', '', 'g'));

-- The check of every argument that names a person (requested_by, approver,
-- actor, uploaded_by, created_by, owner): not null, not empty, and not a
-- name the product records for itself: the actors of its own audit events
-- ('system', 'supervisor', 'runner', 'exporter'), its roles, or the owner's
-- role (current_user here, as the SECURITY DEFINER API runs as the owner;
-- owner-run functions record it).  So no person can pass for the product
-- in the audit trail.
CREATE FUNCTION agent._require_person(name text, argument text) RETURNS boolean
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	v_key text;
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION '% must not be null', argument USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, argument, 'person');
	v_key := agent._person_key(name);
	IF v_key = '' THEN
		RAISE EXCEPTION '% must not be empty', argument USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF v_key IN ('system', 'supervisor', 'runner', 'exporter', 'sandbox_ext',
				 'agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner')
	   OR v_key = pg_catalog.lower(current_user::text) THEN
		RAISE EXCEPTION '% "%" is a reserved name', argument, agent._shown(v_key)
			USING ERRCODE = 'reserved_name',
				  DETAIL = 'sandbox_ext records this name as the actor of its own actions; it cannot name a person.',
				  HINT = pg_catalog.format('Pass the name of the person (%s) as your application identifies them.', argument);
	END IF;
	RETURN true;
END
$$;

-- Settings that only SQL reads.  GUCs can only be defined in C, so the
-- tunables of the control plane live here as key/value rows.
CREATE TABLE agent.settings (
	key			text PRIMARY KEY,
	value		text NOT NULL,
	description text NOT NULL
);
COMMENT ON TABLE agent.settings IS 'tunables of the control plane (key/value)';

-- What each setting may hold: the one list of known keys, their types and
-- ranges (docs/control-plane.md, "Settings").  A file that adds a setting
-- adds its rule here; the trigger below refuses a key without one.
CREATE FUNCTION agent.setting_rules()
	RETURNS TABLE (key text, type text, min_value text, max_value text)
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	VALUES
		('approval_timeout', 'interval', '0 seconds', '7 days'),
		('max_code_bytes', 'integer', '1', '16777216'),
		('max_runs_per_org', 'integer', '0', '1024'),
		('max_stored_bytes_per_org', 'integer', '0', '1125899906842624'),
		('max_session_disk_per_org', 'integer', '0', '1125899906842624'),
		('runner_lease_seconds', 'integer', '3', '3600'),
		('runner_grace_seconds', 'integer', '1', '86400'),
		('runner_max_slots', 'integer', '0', '1024'),
		('session_idle_timeout', 'interval', '0 seconds', '30 days'),
		('max_upload_bytes', 'integer', '1', '1073741823'),
		('max_conversation_bytes', 'integer', '1', '1125899906842624'),
		('max_produced_files', 'integer', '0', '100000'),
		('max_produced_bytes', 'integer', '0', '1125899906842624'),
		('max_produced_file_bytes', 'integer', '0', '1073741823'),
		('max_skill_bytes', 'integer', '1', '1073741823'),
		('max_skill_files', 'integer', '1', '100000'),
		-- 70_retention.sql: an interval, or forever
		('retention_output', 'retention', '0 seconds', '100 years'),
		('retention_previews', 'retention', '0 seconds', '100 years'),
		('retention_produced_files', 'retention', '0 seconds', '100 years'),
		('retention_uploaded_files', 'retention', '0 seconds', '100 years'),
		('retention_batch', 'integer', '1', '100000')
$$;
COMMENT ON FUNCTION agent.setting_rules() IS
	'the known keys of agent.settings with their type and range';

-- Refuse a setting that is not known, a value that is not of its type or
-- out of its range, a changed key and a deleted row (every reader expects
-- every key): so a typo cannot make every request fail later.
CREATE FUNCTION agent._settings_check() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		record;
	v_ok	boolean;
BEGIN
	IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NEW.key IS DISTINCT FROM OLD.key) THEN
		RAISE EXCEPTION 'cannot remove setting "%"', agent._shown(OLD.key)
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Every setting is read by the control plane; set it to another value instead.';
	END IF;
	SELECT * INTO r FROM agent.setting_rules() x WHERE x.key = NEW.key;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'unknown setting "%"', agent._shown(NEW.key)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'The known settings are listed by agent.setting_rules().';
	END IF;
	BEGIN
		IF r.type = 'integer' THEN
			v_ok := NEW.value ~ '^[0-9]{1,18}$'
					AND NEW.value::bigint BETWEEN r.min_value::bigint AND r.max_value::bigint;
		ELSIF r.type = 'retention' AND NEW.value = 'forever' THEN
			v_ok := true;
		ELSE
			v_ok := NEW.value::interval BETWEEN r.min_value::interval AND r.max_value::interval;
		END IF;
	EXCEPTION WHEN data_exception THEN
		v_ok := false;
	END;
	IF NOT coalesce(v_ok, false) THEN
		RAISE EXCEPTION 'invalid value for setting "%": "%"', NEW.key, agent._shown(NEW.value)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('It must be an %s from %s to %s.', r.type,
											 r.min_value, r.max_value);
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER settings_check
	BEFORE INSERT OR UPDATE OR DELETE ON agent.settings
	FOR EACH ROW EXECUTE FUNCTION agent._settings_check();

INSERT INTO agent.settings (key, value, description) VALUES
	('approval_timeout', '15 minutes',
	 'how long an approval request may stay undecided before agent.expire_pending_approvals() expires it (an interval)'),
	('max_code_bytes', '65536',
	 'largest code, in bytes of UTF-8, that agent.request_execution() accepts');

-- The extension's own read of one of its settings (the helpers on a run's
-- path): a key it names is always there, so a missing one is a bug or a
-- broken install (no SQLSTATE of the API: P0001), not the caller's P0002.
CREATE FUNCTION agent._setting(key text) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v text;
BEGIN
	SELECT s.value INTO v FROM agent.settings s WHERE s.key = _setting.key;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'setting "%" is missing: the installation is broken', key;
	END IF;
	RETURN v;
END
$$;

-- A typed read of one setting; a missing key is a broken install.
CREATE FUNCTION agent.setting(key text) RETURNS text
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	v text;
BEGIN
	SELECT s.value INTO v FROM agent.settings s WHERE s.key = setting.key;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'setting "%" does not exist', key
			USING ERRCODE = 'no_data_found';
	END IF;
	RETURN v;
END
$$;
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
-- Limits that keep one tenant from hurting the others: how many runs an org
-- (and optionally one of its workspaces) may have in flight, and how many
-- bytes it may store in the database.  The limits are the platform
-- operator's (the owner's), like plans: neither the backend nor an org's
-- admin can raise them.
--
-- A NULL column means "the default in agent.settings"; the settings are
-- the defaults for every org.  Usage is counted in agent.org_usage, one row
-- per org, updated in the transaction of the write it counts, under the
-- row's lock (so two uploads of one org cannot both pass the check).

-- (the columns are declared with their tables, 12_catalog.sql)
COMMENT ON COLUMN agent.orgs.max_concurrent_runs IS
	'runs of this org provisioning or running at once, on every host together (NULL: setting max_runs_per_org)';
COMMENT ON COLUMN agent.orgs.max_stored_bytes IS
	'bytes of files, skills and output this org may keep (NULL: setting max_stored_bytes_per_org)';

COMMENT ON COLUMN agent.workspaces.max_concurrent_runs IS
	'runs of this workspace in flight at once (NULL: only the org''s limit applies)';

INSERT INTO agent.settings (key, value, description) VALUES
	('max_runs_per_org', '2',
	 'runs one org may have provisioning or running at once, unless agent.orgs.max_concurrent_runs says otherwise'),
	('max_stored_bytes_per_org', '1073741824',
	 'bytes of files, skills and stored output one org may keep, unless agent.orgs.max_stored_bytes says otherwise'),
	('max_session_disk_per_org', '1073741824',
	 'bytes the sandbox session workspaces of one org may hold on the supervisor''s disk; beyond it the least recently used sessions are ended (their files stay in the database)');

CREATE TABLE agent.org_usage (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	stored_bytes	bigint NOT NULL DEFAULT 0 CHECK (stored_bytes >= 0),
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE agent.org_usage IS
	'bytes each org stores (files, skills, output), counted against its max_stored_bytes';

-- The effective limits of an org.
-- (PL/pgSQL: its plan is kept for the session.)
CREATE FUNCTION agent._org_run_limit(org uuid) RETURNS integer
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN coalesce((SELECT o.max_concurrent_runs FROM agent.orgs o WHERE o.id = org),
					agent._setting('max_runs_per_org')::integer);
END
$$;

CREATE FUNCTION agent._org_storage_limit(org uuid) RETURNS bigint
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN coalesce((SELECT o.max_stored_bytes FROM agent.orgs o WHERE o.id = org),
					agent._setting('max_stored_bytes_per_org')::bigint);
END
$$;

-- Count bytes an org is about to store; raise (53400) if that takes it
-- past its limit, unless allow_over (the output of a run that already ran
-- is always kept: it is bounded by sandbox.output_limit).  Returns the new
-- total.  Takes the org's usage row lock until the caller commits.
CREATE FUNCTION agent._use_storage(org uuid, bytes bigint, what text,
								   allow_over boolean DEFAULT false)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_total	bigint;
	v_limit	bigint := agent._org_storage_limit(org);
BEGIN
	IF coalesce(bytes, 0) = 0 THEN
		RETURN (SELECT u.stored_bytes FROM agent.org_usage u WHERE u.org_id = org);
	END IF;
	UPDATE agent.org_usage u
	   SET stored_bytes = greatest(u.stored_bytes + bytes, 0), updated_at = now()
	 WHERE u.org_id = org
	RETURNING u.stored_bytes INTO v_total;
	IF NOT FOUND THEN		-- made with the org (trigger below); an old org may lack it
		INSERT INTO agent.org_usage AS u (org_id, stored_bytes) VALUES (org, greatest(bytes, 0))
			ON CONFLICT (org_id) DO UPDATE SET stored_bytes = greatest(u.stored_bytes + bytes, 0)
			RETURNING u.stored_bytes INTO v_total;
	END IF;
	IF bytes > 0 AND v_total > v_limit AND NOT allow_over THEN
		RAISE EXCEPTION 'the organization''s storage quota is exhausted'
			USING ERRCODE = 'configuration_limit_exceeded',
				  DETAIL = format('Storing %s (%s bytes) would bring it to %s of %s bytes.',
								  what, bytes, v_total, v_limit),
				  HINT = 'Delete files or skills the organization no longer needs (agent.delete_file(), agent.delete_skill()), or ask the operator for a larger quota (agent.orgs.max_stored_bytes).';
	END IF;
	RETURN v_total;
END
$$;

-- Give bytes back to the org's storage (a deletion): never below zero.
CREATE FUNCTION agent._free_storage(org uuid, bytes bigint) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	UPDATE agent.org_usage u
	   SET stored_bytes = greatest(u.stored_bytes - coalesce(bytes, 0), 0), updated_at = now()
	 WHERE u.org_id = org
$$;

-- Would storing bytes more fit the org's quota?  (No lock: the caller that
-- then stores calls agent._use_storage, which checks again under the lock.)
CREATE FUNCTION agent._storage_fits(org uuid, bytes bigint) RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN coalesce((SELECT u.stored_bytes FROM agent.org_usage u WHERE u.org_id = org), 0)
		   + coalesce(bytes, 0) <= agent._org_storage_limit(org);

-- Is the org at or past its storage quota?  Then it starts no new run: a
-- run's output is kept past the quota (agent._use_storage allow_over,
-- bounded by sandbox.output_limit), so runs that keep starting would grow
-- its storage without bound.  The request is refused
-- (storage_quota_exhausted), and so is an approved run at its claim.
CREATE FUNCTION agent._storage_exhausted(org uuid, OUT exhausted boolean,
										 OUT stored_bytes bigint, OUT max_stored_bytes bigint)
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT u.stored_bytes >= l.max, u.stored_bytes, l.max
	  FROM (SELECT coalesce((SELECT x.stored_bytes FROM agent.org_usage x WHERE x.org_id = org), 0)
					 AS stored_bytes) u,
		   (SELECT agent._org_storage_limit(org) AS max) l
$$;

-- The operator sets an org's limits (NULL: back to the defaults).  Owner
-- only: not granted to any role.
CREATE FUNCTION agent.set_org_limits(org uuid, max_concurrent_runs integer,
									 max_stored_bytes bigint)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	UPDATE agent.orgs o
	   SET max_concurrent_runs = set_org_limits.max_concurrent_runs,
		   max_stored_bytes = set_org_limits.max_stored_bytes
	 WHERE o.id = org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	PERFORM agent._audit(org, NULL, 'org.limits_changed', NULL, current_user::text,
						 jsonb_build_object('max_concurrent_runs', max_concurrent_runs,
											'max_stored_bytes', max_stored_bytes));
END
$$;
COMMENT ON FUNCTION agent.set_org_limits(uuid, integer, bigint) IS
	'set an org''s concurrent-run and storage limits (NULL: the defaults in agent.settings)';

ALTER TABLE agent.org_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY backend_org ON agent.org_usage FOR SELECT TO agent_backend
	USING (org_id = agent.current_org());
CREATE POLICY auditor_read ON agent.org_usage FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.org_usage TO agent_backend, agent_auditor;

-- Every org has its usage row from the start, so that counting never has to
-- create one (an insert could wait on a concurrent insert of the same key).
CREATE FUNCTION agent._orgs_make_usage() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	INSERT INTO agent.org_usage (org_id) VALUES (NEW.id) ON CONFLICT (org_id) DO NOTHING;
	RETURN NULL;
END
$$;
CREATE TRIGGER orgs_make_usage
	AFTER INSERT ON agent.orgs
	FOR EACH ROW EXECUTE FUNCTION agent._orgs_make_usage();
-- Invocations and everything hanging off one: the approval request (the
-- card a person decides on), the tool call and the analytics row.  Owns the
-- state machine of an invocation and the binding of an approval to the
-- exact code it showed.

-- The hash an approval is bound to:
--   encode(sha256(convert_to(code, 'UTF8')), 'hex')
-- in C (src/digest.c: SQL's sha256() looks OpenSSL's implementation up
-- again on every call).
CREATE FUNCTION agent.code_sha256(code text) RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_code_sha256'
	LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- Egress (47_egress.sql): what the card shows of a policy: "api.github.com:443, *.example.com:80,443", or
-- 'nothing (no network)'.
CREATE FUNCTION agent.egress_may_reach(policy jsonb) RETURNS text
	LANGUAGE sql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT coalesce(string_agg(coalesce(e->>'host', e->>'cidr') || ':' ||
							   (SELECT string_agg(p, ',' ORDER BY p::integer)
								  FROM jsonb_array_elements_text(e->'ports') p), ', '
							   ORDER BY o), 'nothing (no network)')
	  FROM jsonb_array_elements(coalesce(policy->'rules', '[]')) WITH ORDINALITY AS x(e, o)
$$;

-- The states of an invocation.  A function rather than an IN list in the
-- CHECK: the executor re-reads a table's CHECK expressions for every
-- statement, and a thirteen-element list is the costliest part of that on
-- the request path.  In C (src/guards.c) with the state machine's table.
CREATE FUNCTION agent.is_invocation_state(state text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_invocation_state'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE TABLE agent.invocations (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	requested_by	text NOT NULL,
	language		text NOT NULL CHECK (language IN ('python', 'node', 'shell')),
	code			text NOT NULL,
	code_sha256		text NOT NULL,
	description		text,
	idempotency_key text,
	state			text NOT NULL DEFAULT 'pending_approval'
						CHECK (agent.is_invocation_state(state)),
	state_reason	text,
	approval_id		uuid,
	credits_charged integer NOT NULL DEFAULT 0 CHECK (credits_charged >= 0),
	wall_time_s		integer CHECK (wall_time_s > 0),
	memory_mb		integer CHECK (memory_mb > 0),
	exit_code		integer,
	signal			integer,
	timed_out		boolean,
	oom_killed		boolean,
	output_truncated boolean,
	created_at		timestamptz NOT NULL DEFAULT now(),
	approved_at		timestamptz,
	provisioned_at	timestamptz,
	started_at		timestamptz,
	finished_at		timestamptz,
	-- the conversation's sandbox session it ran in (50_sessions.sql adds the
	-- foreign key, once agent.sessions exists) and that session's generation
	session_id		uuid,
	session_generation integer,
	-- a cancel request while it is provisioning or running (40_supervisor.sql)
	cancel_requested_at timestamptz,
	cancel_requested_by text,
	-- The runner host that holds it while it is provisioning or running,
	-- and its lease (45_runners.sql): every write of that runner for this
	-- invocation names the token, and is refused once the lease is gone.
	-- NULL for runs of the in-database supervisor.  (45_runners.sql adds
	-- the foreign key, once agent.runners exists.)
	runner_id		uuid,
	lease_token		uuid,
	lease_expires_at timestamptz,
	-- the verdict's measurements
	jail_pid		integer,
	cpu_ms			bigint,
	peak_memory_bytes bigint,
	stdout_bytes	bigint,
	stderr_bytes	bigint,
	-- Request order: breaks ties between invocations approved at the same
	-- instant (one transaction), so a conversation's runs keep their order.
	request_seq		bigint GENERATED ALWAYS AS IDENTITY,
	-- The NOTIFY channel is named after this random token, not the id, so
	-- that only the invocation's tenant can learn it (40_supervisor.sql).
	channel_token	uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	-- the reason of a cancel asked for while it is in flight (it reaches
	-- state_reason when the run ends); last, as columns added later are
	cancel_reason	text,
	-- the effective egress policy when it was requested, and its hash
	-- (47_egress.sql: copied by a trigger, frozen, bound to the approval)
	egress_policy	jsonb,
	egress_sha256	text,
	-- the verdict's warm interpreter (docs/jail.md, "Warm interpreters"):
	-- whether the run took one, the CPU its start used (not in cpu_ms) and
	-- what it held at the request (in peak_memory_bytes); NULL until the
	-- run's finish
	warm			boolean,
	warm_cpu_ms		bigint,
	warm_memory_bytes bigint,
	FOREIGN KEY (org_id, workspace_id, agent_id)
		REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE (org_id, idempotency_key),
	-- a lease is a runner, a token and a deadline, or nothing
	CHECK ((runner_id IS NULL) = (lease_token IS NULL)
		   AND (runner_id IS NULL) = (lease_expires_at IS NULL))
);
COMMENT ON TABLE agent.invocations IS 'one requested code execution and its life (see docs/control-plane.md)';

-- The supervisor's queue: approved work, oldest approval first.
-- (Tenant-scoped reads use the (org_id, idempotency_key) index: org_id leads.)
CREATE INDEX invocations_approved_idx ON agent.invocations (state, approved_at)
	WHERE state = 'approved';
CREATE INDEX invocations_conversation_idx ON agent.invocations (conversation_id)
	WHERE conversation_id IS NOT NULL;

-- The state machine.  A transition not listed here is a bug in the caller,
-- and terminal states never change.
CREATE FUNCTION agent.invocation_transition_allowed(from_state text, to_state text)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_invocation_transition_allowed'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION agent.invocation_transition_allowed(text, text) IS
	'whether an invocation may go from one state to another (the same table the state trigger enforces)';

-- Refuses any other transition (SQLSTATE 55000), from the same table as
-- agent.invocation_transition_allowed(); in C (src/guards.c), as it runs on
-- every state change.
CREATE FUNCTION agent._invocations_check_transition() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_invocations_check_transition'
	LANGUAGE C;
CREATE TRIGGER invocations_state_transition
	BEFORE UPDATE OF state ON agent.invocations
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION agent._invocations_check_transition();

-- The hash is derived, never supplied: whoever inserts an invocation (the
-- API or a test) cannot make it disagree with the code.
-- code_sha256 := agent.code_sha256(code), in C (src/guards.c).
CREATE FUNCTION agent._invocations_hash_code() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_invocations_hash_code'
	LANGUAGE C;
CREATE TRIGGER invocations_hash_code
	BEFORE INSERT ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_hash_code();

-- What was requested (and shown on the card) never changes afterwards, so
-- an approval can only ever cover the code it was given.
CREATE FUNCTION agent._invocations_freeze_request() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	IF (NEW.code, NEW.code_sha256, NEW.language, NEW.org_id, NEW.workspace_id,
		NEW.agent_id, NEW.conversation_id, NEW.requested_by, NEW.idempotency_key)
		IS DISTINCT FROM
	   (OLD.code, OLD.code_sha256, OLD.language, OLD.org_id, OLD.workspace_id,
		OLD.agent_id, OLD.conversation_id, OLD.requested_by, OLD.idempotency_key) THEN
		RAISE EXCEPTION 'cannot change the request of invocation %', OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'The code, language, tenant, agent, conversation and requester of an invocation are fixed when it is requested.',
				  HINT = 'Request a new execution instead.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_freeze_request
	BEFORE UPDATE OF code, code_sha256, language, org_id, workspace_id, agent_id,
		conversation_id, requested_by, idempotency_key ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_freeze_request();

-- Like is_invocation_state().
CREATE FUNCTION agent.is_approval_status(status text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_approval_status'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The approval card.  approved_code_sha256 is what the approver approved;
-- the CHECK makes an approval of any other code impossible to record.
CREATE TABLE agent.approval_requests (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	invocation_id	uuid NOT NULL UNIQUE,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	status			text NOT NULL DEFAULT 'pending'
						CHECK (agent.is_approval_status(status)),
	code			text NOT NULL,
	code_sha256		text NOT NULL,
	language		text NOT NULL,
	runtime			text NOT NULL,
	risk_level		text NOT NULL DEFAULT 'high' CHECK (risk_level IN ('low', 'medium', 'high')),
	description		text,
	requested_by	text NOT NULL,
	decided_by		text,
	decided_at		timestamptz,
	decision_reason text,
	approved_code_sha256 text,
	expires_at		timestamptz NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	approved_egress_sha256 text,	-- the egress policy approved (47_egress.sql)
	FOREIGN KEY (invocation_id) REFERENCES agent.invocations (id),
	CHECK ((status = 'approved') = (approved_code_sha256 IS NOT NULL)),
	CHECK (approved_code_sha256 IS NULL OR approved_code_sha256 = code_sha256),
	CHECK ((status = 'pending') = (decided_at IS NULL))
);
COMMENT ON TABLE agent.approval_requests IS 'the approval card of an invocation and its decision';
CREATE INDEX approval_requests_pending_idx ON agent.approval_requests (expires_at)
	WHERE status = 'pending';

-- invocations.approval_id is a convenience pointer back at the card; the
-- authoritative link is approval_requests.invocation_id (unique, a foreign
-- key).  Both are written by request_execution() in one statement pair.

-- A card's content never changes and a decision is final.
-- Refuses (SQLSTATE 55000) a change of code, code_sha256, language,
-- runtime, invocation_id, org_id, workspace_id, requested_by or created_at,
-- and any change at all once the status is no longer pending.  In C
-- (src/guards.c): it runs on every decision.
CREATE FUNCTION agent._approval_requests_guard() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_approval_requests_guard'
	LANGUAGE C;
CREATE TRIGGER approval_requests_guard
	BEFORE UPDATE ON agent.approval_requests
	FOR EACH ROW EXECUTE FUNCTION agent._approval_requests_guard();

-- The tool call a finished invocation leaves in its conversation (written
-- by the supervisor).
CREATE TABLE agent.agent_tool_calls (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	invocation_id	uuid NOT NULL UNIQUE REFERENCES agent.invocations (id),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid,
	conversation_id uuid,
	tool_name		text NOT NULL DEFAULT 'code_execution',
	input_hash		text,
	status			text,
	exit_code		integer,
	output_preview	text,
	files			jsonb NOT NULL DEFAULT '[]',	-- what the run returned (sessions.md)
	created_at		timestamptz NOT NULL DEFAULT now(),
	egress			jsonb		-- the run's egress summary (47_egress.sql)
);
CREATE INDEX agent_tool_calls_tenant_idx ON agent.agent_tool_calls (org_id, workspace_id);

-- The analytics row exported to ClickHouse (written by the supervisor).
CREATE TABLE agent.tool_invocations (
	invocation_id	uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid,
	conversation_id uuid,
	tool_name		text NOT NULL DEFAULT 'code_execution',
	language		text NOT NULL,
	status			text NOT NULL,
	exit_code		integer,
	signal			integer,
	duration_ms		bigint,
	cpu_ms			bigint,
	peak_memory_bytes bigint,
	credits_charged integer NOT NULL DEFAULT 0,
	timed_out		boolean NOT NULL DEFAULT false,
	oom_killed		boolean NOT NULL DEFAULT false,
	output_truncated boolean NOT NULL DEFAULT false,
	started_at		timestamptz,
	finished_at		timestamptz,
	created_at		timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_invocations_tenant_idx ON agent.tool_invocations (org_id, workspace_id);
-- The audit trail: append-only, tamper-evident, one hash chain per org.
--
-- Each event's hash covers its own content and the hash of the org's
-- previous event, so changing, removing or reordering any event breaks
-- every later link.  agent.audit_heads holds the tip of each org's chain;
-- an append updates that row (holding its lock to commit), so appends of
-- one org are serialised until the appending transaction ends and the chain
-- never forks, while different orgs never wait for each other.  Event ids
-- are drawn while the lock is held, so within an org id order is chain
-- order.

CREATE TABLE agent.audit_events (
	id				bigserial PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid,
	event_type		text NOT NULL,
	invocation_id	uuid,
	actor			text,
	details			jsonb NOT NULL DEFAULT '{}',
	created_at		timestamptz NOT NULL DEFAULT now(),
	prev_hash		text,
	hash			text NOT NULL
);
COMMENT ON TABLE agent.audit_events IS 'append-only, per-org hash-chained audit trail';
CREATE INDEX audit_events_org_idx ON agent.audit_events (org_id, id);
CREATE INDEX audit_events_invocation_idx ON agent.audit_events (invocation_id)
	WHERE invocation_id IS NOT NULL;

CREATE TABLE agent.audit_heads (
	org_id		uuid PRIMARY KEY,
	last_id		bigint NOT NULL,
	last_hash	text NOT NULL,
	events		bigint NOT NULL,
	-- the hash before last_hash ('' before the second event): lets an
	-- append move the tip and learn its predecessor in one statement
	prev_hash	text NOT NULL DEFAULT ''
);
COMMENT ON TABLE agent.audit_heads IS 'the tip of each org''s audit chain (its lock serialises appends)';

-- The hash of one event.  Every field is rendered in a form that does not
-- depend on session settings (timestamps as epoch microseconds, jsonb in its
-- canonical text form):
--   encode(sha256(convert_to(concat_ws(E'\x1f',
--       coalesce(prev_hash, ''), id::text, org_id::text,
--       coalesce(workspace_id::text, ''), event_type,
--       coalesce(invocation_id::text, ''), coalesce(actor, ''),
--       details::text,
--       (extract(epoch FROM created_at) * 1000000)::bigint::text),
--     'UTF8')), 'hex')
-- computed in C (src/digest.c); pgTAP checks it against this expression.
CREATE FUNCTION agent._audit_hash(prev_hash text, id bigint, org_id uuid,
								  workspace_id uuid, event_type text,
								  invocation_id uuid, actor text, details jsonb,
								  created_at timestamptz)
	RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_audit_hash'
	LANGUAGE C STABLE PARALLEL SAFE;

-- Append one event to its org's chain and return its id.  Runs in the
-- caller's transaction: if that rolls back, so does the event.  Not a
-- security definer: only the owner (the API functions, the supervisor) may
-- execute it.  In C (src/audit.c) as one prepared statement:
--
--   WITH head AS (
--       UPDATE agent.audit_heads h
--          SET prev_hash = h.last_hash,
--              (last_id, last_hash) =
--               (SELECT n.id, agent._audit_hash(nullif(h.last_hash, ''), n.id, org,
--                           workspace, event_type, invocation, actor, details, now())
--                  FROM (SELECT nextval('agent.audit_events_id_seq') AS id) n),
--              events = h.events + 1
--        WHERE h.org_id = org
--       RETURNING h.last_id, h.last_hash, h.prev_hash)
--   INSERT INTO agent.audit_events (...)
--       SELECT head.last_id, org, ..., nullif(head.prev_hash, ''), head.last_hash
--         FROM head
--   RETURNING id
--
-- The UPDATE takes the org's head lock (to commit) and, in the same
-- projection, draws the id and hashes onto the old tip; waiting for the
-- lock, it re-evaluates its SET list on the newest tip (READ COMMITTED's
-- recheck), so within an org id order is chain order and the chain never
-- forks.  The org's first event creates the head row first.  details NULL
-- is stored as '{}'.
CREATE FUNCTION agent._audit(org uuid, workspace uuid, event_type text,
							 invocation uuid, actor text, details jsonb)
	RETURNS bigint
	AS 'MODULE_PATHNAME', 'sandbox_audit'
	LANGUAGE C VOLATILE;

-- The tip of an audit chain moves only with an append: agent._audit (C,
-- src/audit.c) raises a backend-local flag around its own statement, and
-- this guard (C, src/audit.c) refuses every INSERT, UPDATE or DELETE of
-- agent.audit_heads made without it, and an append-time change that does
-- not move the tip by exactly one event.  Marked ENABLE ALWAYS below, so
-- session_replication_role = replica does not switch it off; a superuser
-- who disables or drops it is caught by the anchors (docs/security.md).
CREATE FUNCTION agent._audit_heads_guard() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_audit_heads_guard'
	LANGUAGE C;

-- Audit anchors: the exporter publishes each org's chain head (org_id,
-- last_id, last_hash, events) to an append-only ClickHouse table
-- (sandbox.clickhouse_anchor_table, docs/export.md) with every export batch
-- and every sandbox.anchor_interval; only heads that committed (and whose
-- commit is flushed) are published.

-- The heads an anchor round publishes (read by the exporter, src/anchor.c).
CREATE FUNCTION agent._audit_anchor_heads(OUT org_id uuid, OUT last_id bigint,
										  OUT last_hash text, OUT events bigint)
	RETURNS SETOF record
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
AS $$
	SELECT h.org_id, h.last_id, h.last_hash, h.events
	  FROM agent.audit_heads h
	 WHERE h.events OPERATOR(pg_catalog.>) 0
$$;

-- Whether anchors are published and checked: sandbox.clickhouse_url is
-- set.  (The URL itself is a superuser-only setting; this tells an auditor
-- no more than whether it is empty.)
CREATE FUNCTION agent._audit_anchors_configured() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_audit_anchors_configured'
	LANGUAGE C VOLATILE;

-- Every anchor ClickHouse holds for an org, read from ClickHouse itself
-- (never from a copy in this database, which a superuser could rewrite),
-- one row per anchored event in chain order: the hash and the number of
-- events the chain had up to it, how many different (hash, events) pairs
-- ClickHouse holds for that event (1 unless someone else wrote there), and
-- when ClickHouse first received it.  An ERROR when ClickHouse cannot be
-- read; no rows when the export is off.  In C (src/anchor.c).
CREATE FUNCTION agent._audit_anchors(org uuid,
	OUT last_id bigint, OUT last_hash text, OUT events bigint,
	OUT variants bigint, OUT anchored_at timestamptz)
	RETURNS SETOF record
	AS 'MODULE_PATHNAME', 'sandbox_audit_anchors'
	LANGUAGE C VOLATILE STRICT;

-- Walk an org's chain from its first event and report the first broken
-- link: an event whose hash does not match its content, whose prev_hash is
-- not its predecessor's hash, or a chain whose end is not the recorded tip
-- (events removed from the end).  While the export is configured, the walk
-- is also checked against every anchor ClickHouse holds for the org: the
-- chain must contain each anchored event with the anchored hash at the
-- anchored position, so a rewrite, re-hash, insertion or removal at or
-- before the last anchor is found even when the chain and its tip were
-- made consistent again (docs/security.md says what is not found).
-- anchors_checked is NULL when the export is off (nothing to compare
-- with); anchor_last_id and anchored_at name the latest anchor compared.
-- The anchors are read before the events, each with its own snapshot
-- (hence VOLATILE and READ COMMITTED), so an anchor published meanwhile
-- is never newer than the events read.  Security invoker: it reads what
-- the caller may read, which for agent_auditor and the owner is every org.
CREATE FUNCTION agent.verify_audit_chain(org uuid,
	OUT ok boolean, OUT events_checked bigint, OUT broken_event_id bigint,
	OUT problem text, OUT anchors_checked bigint, OUT anchor_last_id bigint,
	OUT anchored_at timestamptz)
	LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
	e		record;
	a_id	bigint;
	a_hash	text;
	a_events bigint;
	a_variants bigint;
	a_at	timestamptz;
	v_anchors refcursor;
	v_open	boolean := false;
	v_more	boolean := false;	-- a_* hold the next anchor to compare
	v_prev	text := NULL;
	v_last	bigint := NULL;
	v_head	agent.audit_heads;
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	ok := true;
	events_checked := 0;
	IF agent._audit_anchors_configured() THEN
		IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
			RAISE EXCEPTION 'cannot verify an audit chain against its anchors in a % transaction',
				pg_catalog.current_setting('transaction_isolation')
				USING ERRCODE = 'invalid_transaction_state',
					  DETAIL = 'An anchor published after the transaction''s snapshot would look like removed events.',
					  HINT = 'Call agent.verify_audit_chain() in a READ COMMITTED transaction.';
		END IF;
		anchors_checked := 0;
		-- The first FETCH reads every anchor (a materialised set) before
		-- the walk below takes its snapshot.
		OPEN v_anchors FOR SELECT * FROM agent._audit_anchors(org) x ORDER BY x.last_id;
		v_open := true;
		FETCH v_anchors INTO a_id, a_hash, a_events, a_variants, a_at;
		v_more := FOUND;
	END IF;
	<<walk>>
	BEGIN
		FOR e IN SELECT * FROM agent.audit_events ae WHERE ae.org_id = org ORDER BY ae.id LOOP
			events_checked := events_checked + 1;
			IF e.prev_hash IS DISTINCT FROM v_prev THEN
				ok := false; broken_event_id := e.id;
				problem := CASE WHEN v_prev IS NULL
					THEN 'the first event of the chain has a predecessor hash'
					ELSE 'prev_hash does not match the previous event''s hash' END;
				EXIT walk;
			END IF;
			IF e.hash IS DISTINCT FROM agent._audit_hash(e.prev_hash, e.id, e.org_id,
					e.workspace_id, e.event_type, e.invocation_id, e.actor, e.details,
					e.created_at) THEN
				ok := false; broken_event_id := e.id;
				problem := 'the event''s content does not match its hash';
				EXIT walk;
			END IF;
			v_prev := e.hash;
			v_last := e.id;
			WHILE v_more AND a_id <= e.id LOOP
				anchors_checked := anchors_checked + 1;
				anchor_last_id := a_id;
				anchored_at := a_at;
				ok := false;
				IF a_variants > 1 THEN
					broken_event_id := a_id;
					problem := pg_catalog.format('ClickHouse holds %s different anchors of event %s: one of them was not published by this chain''s exporter',
												 a_variants, a_id);
					EXIT walk;
				ELSIF a_id < e.id THEN
					broken_event_id := a_id;
					problem := pg_catalog.format('event %s, anchored in ClickHouse at %s, is missing from the chain',
												 a_id, a_at);
					EXIT walk;
				ELSIF a_hash IS DISTINCT FROM e.hash OR a_events <> events_checked THEN
					broken_event_id := e.id;
					problem := pg_catalog.format('the chain up to event %s does not match its anchor of %s in ClickHouse (%s events, hash %s; the chain has %s events, hash %s): an event at or before it was changed, added or removed',
												 e.id, a_at, a_events, a_hash, events_checked, e.hash);
					EXIT walk;
				END IF;
				ok := true;
				FETCH v_anchors INTO a_id, a_hash, a_events, a_variants, a_at;
				v_more := FOUND;
			END LOOP;
		END LOOP;
		SELECT * INTO v_head FROM agent.audit_heads h WHERE h.org_id = org;
		IF FOUND AND (v_head.last_id IS DISTINCT FROM v_last
					  OR v_head.last_hash IS DISTINCT FROM v_prev
					  OR v_head.events <> events_checked) THEN
			ok := false; broken_event_id := v_head.last_id;
			problem := 'the chain does not end at its recorded tip (events were removed)';
		ELSIF NOT FOUND AND v_last IS NOT NULL THEN
			ok := false; broken_event_id := v_last;
			problem := 'the chain has no recorded tip';
		ELSIF v_more THEN
			-- Anchored events beyond the end of the chain (and its tip).
			anchors_checked := anchors_checked + 1;
			anchor_last_id := a_id;
			anchored_at := a_at;
			ok := false; broken_event_id := a_id;
			problem := CASE WHEN events_checked = 0
				THEN pg_catalog.format('the org has no audit events, but ClickHouse holds an anchor of %s events up to event %s (%s): they were removed',
									   a_events, a_id, a_at)
				ELSE pg_catalog.format('the chain ends at event %s, before its anchor of %s events up to event %s (%s): events were removed',
									   v_last, a_events, a_id, a_at) END;
		END IF;
	END walk;
	IF v_open THEN
		CLOSE v_anchors;
	END IF;
END
$$;
COMMENT ON FUNCTION agent.verify_audit_chain(uuid) IS
	'check an org''s audit hash chain, and its anchors in ClickHouse; reports the first broken event';

-- Append-only, for everyone including the owner, and ENABLE ALWAYS: a
-- session in session_replication_role = replica (which switches ordinary
-- triggers off) is refused too.  A superuser can still disable or drop a
-- trigger; verify_audit_chain() then shows what was changed, and the
-- anchors show it even when the chain was re-hashed (docs/security.md).
CREATE FUNCTION agent._refuse_change() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot % %.%: it is append-only', lower(TG_OP), TG_TABLE_SCHEMA, TG_TABLE_NAME
		USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only
	BEFORE UPDATE OR DELETE ON agent.audit_events
	FOR EACH ROW EXECUTE FUNCTION agent._refuse_change();
CREATE TRIGGER audit_events_no_truncate
	BEFORE TRUNCATE ON agent.audit_events
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- The tip moves forward only with an append; it is never deleted.
CREATE TRIGGER audit_heads_guard
	BEFORE INSERT OR UPDATE OR DELETE ON agent.audit_heads
	FOR EACH ROW EXECUTE FUNCTION agent._audit_heads_guard();
CREATE TRIGGER audit_heads_no_truncate
	BEFORE TRUNCATE ON agent.audit_heads
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_append_only;
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate;
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_guard;
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_no_truncate;
-- Credits: an append-only ledger and the balance it implies.
--
-- The balance is maintained by a trigger on the ledger, in the same
-- statement as the ledger row, so balance = sum(ledger) holds after every
-- statement; the CHECK (balance >= 0) makes an overdraft fail as a whole
-- (ledger row included).  Charge and refund lock the invocation row first
-- and the balance row second, always in that order, so concurrent charges
-- of one org queue on the balance and concurrent charges of one invocation
-- queue on the invocation; neither deadlocks.

CREATE TABLE agent.credit_balances (
	org_id		uuid PRIMARY KEY REFERENCES agent.orgs (id),
	balance		bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
	updated_at	timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.credit_ledger (
	id				bigserial PRIMARY KEY,
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	workspace_id	uuid,
	invocation_id	uuid REFERENCES agent.invocations (id),
	kind			text NOT NULL CHECK (kind IN ('grant', 'charge', 'refund', 'adjust')),
	amount			bigint NOT NULL,
	reason			text,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CHECK (CASE kind
		WHEN 'grant' THEN amount > 0
		WHEN 'charge' THEN amount <= 0 AND invocation_id IS NOT NULL
		WHEN 'refund' THEN amount >= 0 AND invocation_id IS NOT NULL
		ELSE amount <> 0 END)
);
COMMENT ON TABLE agent.credit_ledger IS 'append-only; the balance is its sum per org';
CREATE INDEX credit_ledger_org_idx ON agent.credit_ledger (org_id, id);
-- At most one charge and one refund per invocation.
CREATE UNIQUE INDEX credit_ledger_once_per_invocation
	ON agent.credit_ledger (invocation_id, kind)
	WHERE kind IN ('charge', 'refund');

-- Fold each ledger row into the balance.
CREATE FUNCTION agent._credit_ledger_apply() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	-- Update first: an INSERT ... ON CONFLICT would check the CHECK against
	-- the proposed row (a negative amount) before finding the conflict.
	UPDATE agent.credit_balances b
	   SET balance = b.balance + NEW.amount, updated_at = now()
	 WHERE b.org_id = NEW.org_id;
	IF NOT FOUND THEN
		INSERT INTO agent.credit_balances AS b (org_id, balance, updated_at)
			VALUES (NEW.org_id, NEW.amount, now())
			ON CONFLICT (org_id) DO UPDATE
				SET balance = b.balance + excluded.balance, updated_at = excluded.updated_at;
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER credit_ledger_apply
	AFTER INSERT ON agent.credit_ledger
	FOR EACH ROW EXECUTE FUNCTION agent._credit_ledger_apply();

CREATE TRIGGER credit_ledger_append_only
	BEFORE UPDATE OR DELETE ON agent.credit_ledger
	FOR EACH ROW EXECUTE FUNCTION agent._refuse_change();
CREATE TRIGGER credit_ledger_no_truncate
	BEFORE TRUNCATE ON agent.credit_ledger
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- ALWAYS, like the audit trail's (20_audit.sql): replica mode does not
-- open the ledger either.  A logical-replication subscriber only ever
-- inserts into it, which these allow.
ALTER TABLE agent.credit_ledger ENABLE ALWAYS TRIGGER credit_ledger_append_only;
ALTER TABLE agent.credit_ledger ENABLE ALWAYS TRIGGER credit_ledger_no_truncate;

-- A balance moves only through the ledger: the only legitimate writer is
-- the trigger above, which runs one trigger level down.
CREATE FUNCTION agent._credit_balances_guard() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	IF pg_trigger_depth() < 2 THEN
		RAISE EXCEPTION 'cannot change a credit balance directly'
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Balances follow agent.credit_ledger; use agent.grant_credits().';
	END IF;
	RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END
$$;
CREATE TRIGGER credit_balances_guard
	BEFORE INSERT OR UPDATE OR DELETE ON agent.credit_balances
	FOR EACH ROW EXECUTE FUNCTION agent._credit_balances_guard();
CREATE TRIGGER credit_balances_no_truncate
	BEFORE TRUNCATE ON agent.credit_balances
	FOR EACH STATEMENT EXECUTE FUNCTION agent._refuse_change();
-- The two balance triggers above (credit_ledger_apply and
-- credit_balances_guard) stay ordinary (origin-only): a replica applying
-- replicated rows receives the balances themselves and must neither apply
-- the ledger a second time nor be refused the replicated balance.  A
-- balance rewritten there shows in agent.credit_overview (consistent =
-- false); the ledger itself stays append-only.
ALTER TABLE agent.credit_balances ENABLE ALWAYS TRIGGER credit_balances_no_truncate;

-- Add credits to an org; returns the new balance.
CREATE FUNCTION agent.grant_credits(org uuid, amount bigint, reason text)
	RETURNS bigint
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_balance bigint;
BEGIN
	IF org IS NULL OR amount IS NULL THEN
		RAISE EXCEPTION 'org and amount must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(reason, 'reason', 'reason');
	IF amount <= 0 THEN
		RAISE EXCEPTION 'credit grant must be positive'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('The amount was %s.', amount);
	END IF;
	PERFORM 1 FROM agent.orgs o WHERE o.id = org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	INSERT INTO agent.credit_ledger (org_id, kind, amount, reason)
		VALUES (org, 'grant', amount, reason);
	SELECT b.balance INTO v_balance FROM agent.credit_balances b WHERE b.org_id = org;
	PERFORM agent._audit(org, NULL, 'credits.granted', NULL, current_user::text,
						 jsonb_build_object('amount', amount, 'reason', reason,
											'balance', v_balance));
	RETURN v_balance;
END
$$;

-- The charge itself, for an invocation that exists (the claim calls it for
-- the row it holds locked; agent.charge_invocation checks its argument):
-- the ledger's row.  Returns the price charged (now, or before), or NULL,
-- changing nothing, when the balance does not cover it.  The caller sets
-- the invocation's credits_charged (the claim in the same UPDATE that
-- makes it provisioning: one row version fewer per run).
CREATE FUNCTION agent._charge(invocation uuid) RETURNS integer
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_inv	agent.invocations;
	v_price integer;
	v_balance bigint;
BEGIN
	-- Concurrent charges of this invocation wait here, then see the charge.
	SELECT * INTO v_inv FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RETURN NULL;		-- (the caller holds the row: it exists)
	END IF;
	SELECT (-l.amount)::integer INTO v_price FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'charge';
	IF FOUND THEN
		PERFORM 1 FROM agent.credit_ledger l
		 WHERE l.invocation_id = invocation AND l.kind = 'refund';
		IF FOUND THEN
			RAISE EXCEPTION 'invocation % was refunded and cannot be charged again', invocation
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  DETAIL = 'An invocation is charged at most once.';
		END IF;
		RETURN v_price;
	END IF;

	SELECT p.credits_per_invocation INTO v_price
	  FROM agent.orgs o JOIN agent.plans p ON p.plan = o.plan
	 WHERE o.id = v_inv.org_id;

	-- Concurrent charges of this org wait here, then see the new balance.
	SELECT b.balance INTO v_balance FROM agent.credit_balances b
	 WHERE b.org_id = v_inv.org_id FOR UPDATE;
	IF coalesce(v_balance, 0) < v_price THEN
		RETURN NULL;
	END IF;

	INSERT INTO agent.credit_ledger (org_id, workspace_id, invocation_id, kind, amount, reason)
		VALUES (v_inv.org_id, v_inv.workspace_id, invocation, 'charge', -v_price,
				'code execution');
	RETURN v_price;
END
$$;

-- Charge the plan's price for an invocation, in the caller's transaction.
-- Returns false, changing nothing, when the balance does not cover it;
-- true when charged now or already charged before.  An invocation whose
-- charge was refunded cannot be charged again (at most one charge each).
CREATE FUNCTION agent.charge_invocation(invocation uuid) RETURNS boolean
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_price integer;
BEGIN
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i WHERE i.id = invocation) THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found';
	END IF;
	v_price := agent._charge(invocation);
	IF v_price IS NULL THEN
		RETURN false;
	END IF;
	UPDATE agent.invocations i SET credits_charged = v_price
	 WHERE i.id = invocation AND i.credits_charged <> v_price;
	RETURN true;
END
$$;

-- Give back exactly what an invocation was charged (provisioning failed).
-- Returns false when nothing was charged; true when refunded now or before.
-- The operator's entry: the reason is free text from outside, limited like
-- every other (22001); the supervisor's own reasons (which may quote a
-- runner's error) take agent._refund directly.
CREATE FUNCTION agent.refund_invocation(invocation uuid, reason text) RETURNS boolean
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(reason, 'reason', 'reason');
	RETURN agent._refund(invocation, reason);
END
$$;

-- The refund itself (refund_invocation's contract, for an invocation id
-- that is not null; the reason unchecked).
CREATE FUNCTION agent._refund(invocation uuid, reason text) RETURNS boolean
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_inv	agent.invocations;
	v_charged bigint;
BEGIN
	SELECT * INTO v_inv FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found';
	END IF;
	SELECT -l.amount INTO v_charged FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'charge';
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM 1 FROM agent.credit_ledger l
	 WHERE l.invocation_id = invocation AND l.kind = 'refund';
	IF FOUND THEN
		RETURN true;
	END IF;
	-- Same lock order as charge_invocation: invocation, then balance.
	PERFORM 1 FROM agent.credit_balances b WHERE b.org_id = v_inv.org_id FOR UPDATE;
	INSERT INTO agent.credit_ledger (org_id, workspace_id, invocation_id, kind, amount, reason)
		VALUES (v_inv.org_id, v_inv.workspace_id, invocation, 'refund', v_charged,
				coalesce(reason, 'refund'));
	UPDATE agent.invocations i SET credits_charged = 0 WHERE i.id = invocation;
	RETURN true;
END
$$;
-- agent.request_execution(): the IAM decision and, when it allows the
-- request, the pending invocation with its approval card.
--
-- Two kinds of "no" are kept apart.  A caller bug (a null argument, an id
-- that does not exist in the caller's tenant, limits out of range) raises
-- an error with a specific SQLSTATE and leaves no row behind.  A policy
-- refusal (plan, admin switch, toggles, model, language, code size,
-- credits, storage quota) is a
-- returned status: the capability.invoke_denied audit event must survive,
-- so raising (and rolling it back) is not an option.  The returned row
-- still carries the SQLSTATE the refusal corresponds to, for callers that
-- map statuses to errors.

CREATE TYPE agent.execution_request AS (
	invocation_id	uuid,		-- NULL when denied
	approval_id		uuid,		-- NULL when denied
	status			text,		-- 'pending_approval', 'denied', or on a replay the invocation's state
	reason			text,		-- refusal reason code, NULL when allowed
	sqlstate		text,		-- the SQLSTATE matching the refusal, NULL when allowed
	replayed		boolean		-- true when an earlier request with the same idempotency key was returned
);
COMMENT ON TYPE agent.execution_request IS 'result of agent.request_execution()';

CREATE FUNCTION agent.request_execution(
	workspace		uuid,
	agent			uuid,
	conversation	uuid,
	language		text,
	code			text,
	requested_by	text,
	description		text DEFAULT NULL,
	idempotency_key text DEFAULT NULL,
	wall_time_s		integer DEFAULT NULL,
	memory_mb		integer DEFAULT NULL)
	RETURNS agent.execution_request
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	v_org		uuid := agent.current_org();
	v_null		text;
	v_max		integer;
	v_ctx		record;
	v_conv_ok	boolean;
	v_prior		agent.invocations;
	v_reason	text;
	v_sqlstate	text;
	v_message	text;
	v_runtime	text;
	v_sha		text;
	v_bytes		integer;
	v_inv		uuid;
	v_appr		uuid;
	r			agent.execution_request;
BEGIN
	---- Arguments: errors, nothing written ----
	v_null := CASE
		WHEN workspace IS NULL THEN 'workspace'
		WHEN agent IS NULL THEN 'agent'
		WHEN language IS NULL THEN 'language'
		WHEN code IS NULL THEN 'code'
		WHEN requested_by IS NULL THEN 'requested_by' END;
	IF v_null IS NOT NULL THEN
		RAISE EXCEPTION '% must not be null', v_null USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(requested_by, 'requested_by');
	PERFORM agent._check_text(language, 'language', 'language');
	PERFORM agent._check_text(description, 'description', 'description');
	PERFORM agent._check_text(idempotency_key, 'idempotency_key', 'idempotency_key', true);
	IF v_org IS NULL OR agent.current_workspace() IS NULL THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	IF workspace <> agent.current_workspace() THEN
		RAISE EXCEPTION 'workspace % is not the current workspace', workspace
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Requests are made in the workspace named by agent.set_tenant().';
	END IF;
	IF wall_time_s IS NOT NULL THEN
		SELECT l.max_wall_time_s INTO v_max FROM agent._request_limits() l;
		IF wall_time_s < 1 OR wall_time_s > coalesce(v_max, 300) THEN
			RAISE EXCEPTION 'wall time limit % s is out of range', wall_time_s
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('It must be between 1 and %s seconds (sandbox.max_wall_time).', coalesce(v_max, 300));
		END IF;
	END IF;
	IF memory_mb IS NOT NULL THEN
		SELECT l.max_memory_mb INTO v_max FROM agent._request_limits() l;
		IF memory_mb < 1 OR memory_mb > coalesce(v_max, 2048) THEN
			RAISE EXCEPTION 'memory limit % MB is out of range', memory_mb
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('It must be between 1 and %s MB (sandbox.max_memory).', coalesce(v_max, 2048));
		END IF;
	END IF;

	-- Everything the decision reads, in one lookup.  Ids are resolved only
	-- inside the caller's tenant: another tenant's ids are unknown here.
	SELECT o.plan, p.code_execution AS plan_ok,
		   o.personal_agents_code_execution AS personal_ok,
		   a.id AS agent_id, a.kind, a.code_execution_enabled AS agent_ok,
		   coalesce(m.supports_code_execution, false) AS model_ok,
		   rt.interpreter || ' ' || rt.version AS runtime,
		   p.credits_per_invocation AS price,
		   coalesce((SELECT b.balance FROM agent.credit_balances b WHERE b.org_id = w.org_id), 0) AS balance,
		   st.exhausted AS storage_exhausted, st.stored_bytes, st.max_stored_bytes,
		   (SELECT s.value::integer FROM agent.settings s WHERE s.key = 'max_code_bytes') AS max_code_bytes,
		   (SELECT s.value::interval FROM agent.settings s WHERE s.key = 'approval_timeout') AS approval_timeout
	  INTO v_ctx
	  FROM agent.workspaces w
	  JOIN agent.orgs o ON o.id = w.org_id
	  JOIN agent.plans p ON p.plan = o.plan
	  CROSS JOIN LATERAL agent._storage_exhausted(o.id) st
	  LEFT JOIN agent.agents a ON a.id = request_execution.agent
							  AND a.org_id = w.org_id AND a.workspace_id = w.id
	  LEFT JOIN agent.models m ON m.id = a.model_id
	  LEFT JOIN agent.runtimes rt ON rt.language = request_execution.language
	 WHERE w.id = request_execution.workspace AND w.org_id = v_org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', workspace USING ERRCODE = 'no_data_found';
	END IF;
	IF v_ctx.agent_id IS NULL THEN
		RAISE EXCEPTION 'agent % does not exist in workspace %', agent, workspace
			USING ERRCODE = 'no_data_found';
	END IF;
	IF conversation IS NOT NULL THEN
		SELECT c.code_execution_enabled INTO v_conv_ok
		  FROM agent.conversations c
		 WHERE c.id = request_execution.conversation AND c.org_id = v_org
		   AND c.workspace_id = request_execution.workspace
		   AND c.agent_id = request_execution.agent;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'conversation % does not exist for agent %', conversation, agent
				USING ERRCODE = 'no_data_found';
		END IF;
	END IF;

	---- Idempotency: the same key returns the same invocation ----
	IF idempotency_key IS NOT NULL THEN
		-- Serialise requests carrying this key; the loser of a race waits
		-- here and then finds the winner's committed invocation.
		PERFORM pg_advisory_xact_lock(hashtextextended(v_org::text || '/' || idempotency_key, 7));
		SELECT * INTO v_prior FROM agent.invocations i
		 WHERE i.org_id = v_org AND i.idempotency_key = request_execution.idempotency_key;
		IF FOUND THEN
			IF (v_prior.workspace_id, v_prior.agent_id, v_prior.conversation_id,
				v_prior.language, v_prior.code_sha256)
			   IS DISTINCT FROM
			   (workspace, agent, conversation, language, agent.code_sha256(code)) THEN
				RAISE EXCEPTION 'idempotency key "%" was already used for a different request', agent._shown(idempotency_key)
					USING ERRCODE = 'unique_violation',
						  DETAIL = format('It belongs to invocation %s.', v_prior.id);
			END IF;
			r := ROW(v_prior.id, v_prior.approval_id, v_prior.state, v_prior.state_reason,
					 NULL, true);
			RETURN r;
		END IF;
	END IF;

	---- IAM, in order; the first failure decides ----
	v_bytes := octet_length(code);
	IF NOT v_ctx.plan_ok THEN
		v_reason := 'plan_excludes_code_execution'; v_sqlstate := '42501';
		v_message := format('The %s plan does not include code execution.', v_ctx.plan);
	ELSIF v_ctx.kind = 'personal' AND NOT v_ctx.personal_ok THEN
		v_reason := 'personal_agents_disabled'; v_sqlstate := '42501';
		v_message := 'The organisation''s administrator has turned off code execution for personal agents.';
	ELSIF NOT v_ctx.agent_ok THEN
		v_reason := 'agent_code_execution_disabled'; v_sqlstate := '42501';
		v_message := 'Code execution is turned off for this agent.';
	ELSIF conversation IS NOT NULL AND NOT v_conv_ok THEN
		v_reason := 'conversation_code_execution_disabled'; v_sqlstate := '42501';
		v_message := 'Code execution is turned off for this conversation.';
	ELSIF NOT v_ctx.model_ok THEN
		v_reason := 'model_lacks_code_execution'; v_sqlstate := '0A000';
		v_message := 'The agent''s model does not support code execution.';
	ELSE
		v_runtime := v_ctx.runtime;
		IF v_runtime IS NULL THEN
			v_reason := 'language_not_supported'; v_sqlstate := '22023';
			v_message := format('Language "%s" is not supported; use python, node or shell.', agent._shown(language));
		ELSIF code !~ '\S' THEN
			v_reason := 'code_empty'; v_sqlstate := '22023';
			v_message := 'The code is empty.';
		ELSIF v_bytes > v_ctx.max_code_bytes THEN
			v_reason := 'code_too_large'; v_sqlstate := '54000';
			v_message := format('The code is %s bytes; the limit is %s.', v_bytes, v_ctx.max_code_bytes);
		ELSIF v_ctx.balance < v_ctx.price THEN
			-- Checked again, under the balance's lock, when the run is
			-- provisioned (a balance may fall between now and then).
			v_reason := 'insufficient_credits'; v_sqlstate := '53000';
			v_message := format('The organization has %s credits; a run costs %s.', v_ctx.balance, v_ctx.price);
		ELSIF v_ctx.storage_exhausted THEN
			-- Checked again when the run is claimed (agent._claim_invocations).
			v_reason := 'storage_quota_exhausted'; v_sqlstate := '53400';
			v_message := format('The organization stores %s of its %s bytes; delete files or skills it no longer needs.',
								v_ctx.stored_bytes, v_ctx.max_stored_bytes);
		END IF;
	END IF;

	IF v_reason IS NOT NULL THEN
		v_sha := agent.code_sha256(code);
		PERFORM agent._audit(v_org, workspace, 'capability.invoke_denied', NULL, requested_by,
			jsonb_build_object('reason', v_reason, 'message', v_message,
							   'agent_id', agent, 'conversation_id', conversation,
							   'language', language, 'code_sha256', v_sha,
							   'code_bytes', v_bytes, 'plan', v_ctx.plan,
							   'idempotency_key', idempotency_key)
			|| CASE WHEN v_reason = 'insufficient_credits'
					THEN jsonb_build_object('balance', v_ctx.balance, 'price', v_ctx.price)
					WHEN v_reason = 'storage_quota_exhausted'
					THEN jsonb_build_object('stored_bytes', v_ctx.stored_bytes,
											'max_stored_bytes', v_ctx.max_stored_bytes)
					ELSE '{}'::jsonb END);
		r := ROW(NULL::uuid, NULL::uuid, 'denied', v_reason, v_sqlstate, false);
		RETURN r;
	END IF;

	---- Allowed: the invocation, its card, and the decision's event ----
	v_inv := gen_random_uuid();
	v_appr := gen_random_uuid();
	-- The invocation and its card in one statement (the card's foreign key
	-- is checked at its end).
	WITH inv AS (
		INSERT INTO agent.invocations (id, org_id, workspace_id, agent_id, conversation_id,
									   requested_by, language, code, code_sha256, description,
									   idempotency_key, state, approval_id, wall_time_s, memory_mb)
			VALUES (v_inv, v_org, workspace, agent, conversation, requested_by, language, code,
					NULL, description, idempotency_key, 'pending_approval', v_appr,
					wall_time_s, memory_mb)
			RETURNING invocations.code_sha256)	-- set by the trigger
	INSERT INTO agent.approval_requests (id, invocation_id, org_id, workspace_id, status,
										 code, code_sha256, language, runtime, risk_level,
										 description, requested_by, expires_at)
		SELECT v_appr, v_inv, v_org, workspace, 'pending', code, inv.code_sha256, language,
			   v_runtime, 'high', description, requested_by, now() + v_ctx.approval_timeout
		  FROM inv
		RETURNING approval_requests.code_sha256 INTO v_sha;
	-- Last, so the org's audit chain is held for as short a time as possible.
	PERFORM agent._audit(v_org, workspace, 'capability.invoke_allowed', v_inv, requested_by,
		jsonb_build_object('agent_id', agent, 'conversation_id', conversation,
						   'language', language, 'code_sha256', v_sha,
						   'code_bytes', v_bytes, 'plan', v_ctx.plan,
						   'approval_id', v_appr));
	-- The approvers of the workspace learn of the card at commit.
	PERFORM agent._notify_new_card(workspace, v_appr);
	IF NOT agent.supervisor_available() THEN
		RAISE NOTICE 'no supervisor is running in this cluster'
			USING HINT = 'Nothing will run until sandbox_ext is in shared_preload_libraries.';
	END IF;
	r := ROW(v_inv, v_appr, 'pending_approval', NULL, NULL, false);
	RETURN r;
END
$$;
COMMENT ON FUNCTION agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer) IS
	'decide whether code may run; on yes, create the pending invocation and its approval card';
-- Approvals: a person approves or denies the card of a pending invocation;
-- cards left undecided expire.
--
-- Lock order, everywhere: the approval request, then its invocation, then
-- the org's audit head (taken by agent._audit()).  Two deciders of one card
-- queue on the card's row lock and the second finds it decided;
-- expire_pending_approvals() skips cards someone is deciding.

-- Lock a pending, unexpired card of the caller's workspace and the
-- invocation behind it (one statement, card first) or explain why not: the
-- invocation must still be waiting for this decision with the code the
-- card shows.  Also returns the requester and the org's policy on
-- self-approval.  Internal: called only from the SECURITY DEFINER functions
-- below.
--
-- The locks are FOR NO KEY UPDATE, not FOR UPDATE: a backend may hold them
-- in a transaction it keeps open, and FOR UPDATE would block the FOR KEY
-- SHARE locks that the foreign-key checks of other inserts (output, files,
-- tool calls, the ledger) take on the invocation.
CREATE FUNCTION agent._lock_pending_approval(approval uuid,
	OUT id uuid, OUT invocation_id uuid, OUT org_id uuid, OUT workspace_id uuid,
	OUT code_sha256 text, OUT requested_by text, OUT require_distinct_approver boolean)
	LANGUAGE plpgsql
AS $$
DECLARE
	v_status	text;
	v_expires	timestamptz;
	v_decided_by text;
	v_code		text;
	v_inv_code	text;
	v_inv_sha	text;
	v_inv_state text;
BEGIN
	IF approval IS NULL THEN
		RAISE EXCEPTION 'approval request id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF agent.current_org() IS NULL OR agent.current_workspace() IS NULL THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	-- Another tenant's card is indistinguishable from a missing one.
	SELECT a.id, a.invocation_id, a.org_id, a.workspace_id, a.code_sha256, a.status,
		   a.expires_at, a.decided_by, a.code, i.code, i.code_sha256, i.state,
		   i.requested_by, o.require_distinct_approver
	  INTO id, invocation_id, org_id, workspace_id, code_sha256, v_status,
		   v_expires, v_decided_by, v_code, v_inv_code, v_inv_sha, v_inv_state,
		   requested_by, require_distinct_approver
	  FROM agent.approval_requests a
	  JOIN agent.invocations i ON i.id = a.invocation_id
	  JOIN agent.orgs o ON o.id = a.org_id
	 WHERE a.id = approval AND a.org_id = agent.current_org()
	   AND a.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE OF a, i;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'approval request % does not exist in the current workspace', approval
			USING ERRCODE = 'no_data_found';
	END IF;
	IF v_status = 'expired' OR (v_status = 'pending' AND v_expires <= now()) THEN
		RAISE EXCEPTION 'approval request % has expired', approval
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'It was not decided in time.',
				  HINT = 'Request the execution again.';
	END IF;
	IF v_status <> 'pending' THEN
		RAISE EXCEPTION 'approval request % has already been decided', approval
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It was %s by %s.', v_status, v_decided_by);
	END IF;
	-- The card shows the invocation's code and its hash; both must still
	-- be what will run.
	IF v_inv_code IS DISTINCT FROM v_code OR v_inv_sha <> code_sha256
	   OR agent.code_sha256(v_inv_code) <> code_sha256 THEN
		RAISE EXCEPTION 'approval request % does not match the code of invocation %', id, invocation_id
			USING ERRCODE = 'data_corrupted',
				  DETAIL = 'The code was changed after the card was shown; it cannot be approved.';
	END IF;
	IF v_inv_state <> 'pending_approval' THEN
		RAISE EXCEPTION 'invocation % is no longer waiting for approval', invocation_id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It is %s.', v_inv_state);
	END IF;
END
$$;

-- Approve the card.  code_sha256, when given, is the hash of the code the
-- approver was shown; a different hash is refused, so an approval can never
-- cover code its approver did not see.  Returns the invocation's id.
CREATE FUNCTION agent.approve(approval uuid, approver text, code_sha256 text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_card	record;
	v_egress text;
BEGIN
	IF approver IS NULL OR btrim(approver) = '' THEN
		RAISE EXCEPTION 'approver must be named' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(approver, 'approver');
	v_card := agent._lock_pending_approval(approval);
	-- Four eyes: unless the org's policy says otherwise, the person who
	-- asked for the run cannot also let it run.
	IF v_card.require_distinct_approver
	   AND agent._person_key(approver) = agent._person_key(v_card.requested_by) THEN
		RAISE EXCEPTION 'cannot approve an execution request made by the same person'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'The organization requires the approver to be someone other than the requester.',
				  HINT = 'Ask another person to approve it; an administrator can change the policy with agent.set_require_distinct_approver().';
	END IF;
	IF code_sha256 IS NOT NULL AND lower(code_sha256) <> v_card.code_sha256 THEN
		RAISE EXCEPTION 'code hash does not match approval request %', approval
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'The approver was shown different code than the card holds.',
				  HINT = 'Reload the approval card and review the code again.';
	END IF;

	-- The card and its invocation in one statement.
	-- The approval is bound to the egress policy the card showed too
	-- (47_egress.sql): the invocation's frozen copy, by its hash.
	v_egress := (SELECT i.egress_sha256 FROM agent.invocations i WHERE i.id = v_card.invocation_id);
	WITH decided AS (
		UPDATE agent.approval_requests a
		   SET status = 'approved', decided_by = approver, decided_at = now(),
			   approved_code_sha256 = v_card.code_sha256,
			   approved_egress_sha256 = v_egress
		 WHERE a.id = v_card.id)
	UPDATE agent.invocations i
	   SET state = 'approved', approved_at = now()
	 WHERE i.id = v_card.invocation_id;
	PERFORM agent._audit(v_card.org_id, v_card.workspace_id, 'approval.approved', v_card.invocation_id,
						 approver, jsonb_strip_nulls(jsonb_build_object('approval_id', v_card.id,
													  'code_sha256', v_card.code_sha256,
													  'egress_sha256', v_egress)));
	-- The supervisor claims approved work when this transaction commits.
	PERFORM agent._wake_supervisor();
	RETURN v_card.invocation_id;
END
$$;

-- Deny the card; final.  Returns the invocation's id.
CREATE FUNCTION agent.deny(approval uuid, approver text, reason text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_card	record;
BEGIN
	IF approver IS NULL OR btrim(approver) = '' THEN
		RAISE EXCEPTION 'approver must be named' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(approver, 'approver');
	PERFORM agent._check_text(reason, 'reason', 'reason');
	-- The requester may deny (withdraw) their own request: a denial runs
	-- nothing, and cancel() could end it anyway.
	v_card := agent._lock_pending_approval(approval);

	WITH decided AS (
		UPDATE agent.approval_requests a
		   SET status = 'denied', decided_by = approver, decided_at = now(),
			   decision_reason = reason
		 WHERE a.id = v_card.id)
	UPDATE agent.invocations i
	   SET state = 'denied', state_reason = coalesce(reason, 'denied by the approver')
	 WHERE i.id = v_card.invocation_id;
	PERFORM agent._audit(v_card.org_id, v_card.workspace_id, 'approval.denied', v_card.invocation_id,
						 approver, jsonb_build_object('approval_id', v_card.id,
													  'code_sha256', v_card.code_sha256,
													  'reason', reason));
	RETURN v_card.invocation_id;
END
$$;

-- Expire every card still pending at as_of (default: now) and its
-- invocation; returns how many.  For pg_cron and the owner; it acts on all
-- tenants.  Cards locked by a concurrent decision are skipped: that
-- decision wins, or the next run expires them.
CREATE FUNCTION agent.expire_pending_approvals(as_of timestamptz DEFAULT now())
	RETURNS integer
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c	record;
	n	integer := 0;
BEGIN
	-- Orgs in a fixed order, so concurrent runs take audit heads in the
	-- same order.
	FOR c IN
		WITH due AS (
			SELECT a.id FROM agent.approval_requests a
			 WHERE a.status = 'pending' AND a.expires_at <= coalesce(as_of, now())
			   FOR NO KEY UPDATE SKIP LOCKED),
		expired AS (
			UPDATE agent.approval_requests a
			   SET status = 'expired', decided_at = now(),
				   decision_reason = 'not decided in time'
			  FROM due WHERE a.id = due.id
			RETURNING a.id, a.invocation_id, a.org_id, a.workspace_id, a.code_sha256,
					  a.expires_at)
		SELECT * FROM expired ORDER BY org_id, expires_at
	LOOP
		UPDATE agent.invocations i
		   SET state = 'expired', state_reason = 'approval not decided in time'
		 WHERE i.id = c.invocation_id AND i.state = 'pending_approval';
		PERFORM agent._audit(c.org_id, c.workspace_id, 'approval.expired', c.invocation_id,
							 'system', jsonb_build_object('approval_id', c.id,
														  'code_sha256', c.code_sha256,
														  'expires_at', c.expires_at));
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

-- The card as the UI renders it, with what the run will cost and what the
-- org has (credits_cost, org_balance: read when the card is read; the
-- charge itself happens when the run is provisioned).
CREATE TYPE agent.approval_card AS (
	approval_id		uuid,
	invocation_id	uuid,
	status			text,
	title			text,
	agent_name		text,
	conversation_id uuid,
	language		text,
	runtime			text,
	risk_level		text,
	description		text,
	code			text,
	code_sha256		text,
	code_lines		integer,
	requested_by	text,
	created_at		timestamptz,
	expires_at		timestamptz,
	decided_by		text,
	decided_at		timestamptz,
	decision_reason text,
	credits_cost	integer,
	org_balance		bigint,
	-- what the run may reach (47_egress.sql): "api.github.com:443, ..." or
	-- "nothing (no network)", and the hash the approval binds
	egress_may_reach text,
	egress_sha256	text
);

-- Every card the caller may see (row-level security decides: a backend
-- its workspace's, an auditor every tenant's), as approval_card renders it.
CREATE VIEW agent.approval_cards WITH (security_invoker = true) AS
SELECT a.id AS approval_id, a.invocation_id, a.status,
	   format('%s wants to run %s code', coalesce(g.name, 'An agent'), a.language) AS title,
	   g.name AS agent_name, i.conversation_id, a.language, a.runtime, a.risk_level,
	   a.description, a.code, a.code_sha256,
	   array_length(regexp_split_to_array(rtrim(a.code, E'\n'), E'\n'), 1) AS code_lines,
	   a.requested_by, a.created_at, a.expires_at, a.decided_by, a.decided_at,
	   a.decision_reason, p.credits_per_invocation AS credits_cost,
	   coalesce(b.balance, 0) AS org_balance,
	   a.org_id, a.workspace_id,
	   agent.egress_may_reach(i.egress_policy) AS egress_may_reach, i.egress_sha256
  FROM agent.approval_requests a
  JOIN agent.invocations i ON i.id = a.invocation_id
  LEFT JOIN agent.agents g ON g.id = i.agent_id
  LEFT JOIN agent.orgs o ON o.id = a.org_id
  LEFT JOIN agent.plans p ON p.plan = o.plan
  LEFT JOIN agent.credit_balances b ON b.org_id = a.org_id;
COMMENT ON VIEW agent.approval_cards IS
	'approval cards as the UI renders them, with the run''s cost and the org''s balance';

CREATE FUNCTION agent.approval_card(approval uuid) RETURNS agent.approval_card
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v agent.approval_card;
BEGIN
	IF approval IS NULL THEN
		RAISE EXCEPTION 'approval request id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT c.approval_id, c.invocation_id, c.status, c.title, c.agent_name, c.conversation_id,
		   c.language, c.runtime, c.risk_level, c.description, c.code, c.code_sha256,
		   c.code_lines, c.requested_by, c.created_at, c.expires_at, c.decided_by,
		   c.decided_at, c.decision_reason, c.credits_cost, c.org_balance,
		   c.egress_may_reach, c.egress_sha256
	  INTO v
	  FROM agent.approval_cards c
	 WHERE c.approval_id = approval;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'approval request % does not exist', approval
			USING ERRCODE = 'no_data_found';
	END IF;
	RETURN v;
END
$$;

-- The cards of the current workspace still waiting for a decision, oldest
-- first: what an approver's inbox shows.  The workspace's approvals
-- channel (agent.approvals_channel()) says when to look again.
CREATE FUNCTION agent.pending_approvals() RETURNS SETOF agent.approval_card
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant(true);
	RETURN QUERY
		SELECT c.approval_id, c.invocation_id, c.status, c.title, c.agent_name, c.conversation_id,
			   c.language, c.runtime, c.risk_level, c.description, c.code, c.code_sha256,
			   c.code_lines, c.requested_by, c.created_at, c.expires_at, c.decided_by,
			   c.decided_at, c.decision_reason, c.credits_cost, c.org_balance,
			   c.egress_may_reach, c.egress_sha256
		  FROM agent.approval_cards c
		 WHERE c.status = 'pending' AND c.expires_at > now()
		   AND c.org_id = agent.current_org() AND c.workspace_id = agent.current_workspace()
		 ORDER BY c.created_at, c.approval_id;
END
$$;
COMMENT ON FUNCTION agent.pending_approvals() IS
	'the current workspace''s cards waiting for a decision, oldest first';

-- ---- the approvals channel -------------------------------------------------

-- Each workspace has a NOTIFY channel on which request_execution()
-- announces every new card at commit (payload: the card's id, a hint to
-- look, never the card).  Like an invocation's output channel it is named
-- after a random token that only the workspace's tenant can learn
-- (agent.approvals_channel()); other workspaces of the same org cannot (the
-- tokens are in a table no tenant role reads).
CREATE TABLE agent.workspace_channels (
	workspace_id	uuid PRIMARY KEY REFERENCES agent.workspaces (id),
	token			uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid()
);
COMMENT ON TABLE agent.workspace_channels IS
	'the random token each workspace''s approvals channel is named after';
ALTER TABLE agent.workspace_channels ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.workspace_channels FOR SELECT TO agent_auditor USING (true);

CREATE FUNCTION agent._workspaces_make_channel() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	INSERT INTO agent.workspace_channels (workspace_id) VALUES (NEW.id)
		ON CONFLICT (workspace_id) DO NOTHING;
	RETURN NULL;
END
$$;
CREATE TRIGGER workspaces_make_channel
	AFTER INSERT ON agent.workspaces
	FOR EACH ROW EXECUTE FUNCTION agent._workspaces_make_channel();

-- The channel of the current workspace.
CREATE FUNCTION agent.approvals_channel() RETURNS text
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_token uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	SELECT c.token INTO v_token
	  FROM agent.workspace_channels c
	  JOIN agent.workspaces w ON w.id = c.workspace_id
	 WHERE c.workspace_id = agent.current_workspace() AND w.org_id = agent.current_org();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', agent.current_workspace()
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	RETURN 'sandbox_approvals_' || pg_catalog.replace(v_token::text, '-', '');
END
$$;
COMMENT ON FUNCTION agent.approvals_channel() IS
	'the LISTEN channel on which new approval cards of the current workspace are announced (its tenant only)';

-- Announce a new card (called by request_execution; delivered at commit).
CREATE FUNCTION agent._notify_new_card(workspace uuid, approval uuid) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM pg_catalog.pg_notify('sandbox_approvals_' || pg_catalog.replace(c.token::text, '-', ''),
								 approval::text)
	   FROM agent.workspace_channels c
	  WHERE c.workspace_id = workspace;
END
$$;

-- For the supervisor, just before it runs an invocation: true only when
-- its approval is approved and bound to the hash of the code as it is now.
CREATE FUNCTION agent.approved_code_matches(invocation uuid) RETURNS boolean
	LANGUAGE sql STABLE
	RETURN EXISTS (
		SELECT 1 FROM agent.invocations i
		  JOIN agent.approval_requests a ON a.id = i.approval_id AND a.invocation_id = i.id
		 WHERE i.id = invocation
		   AND a.status = 'approved'
		   AND a.approved_code_sha256 = agent.code_sha256(i.code)
		   AND i.code_sha256 = a.approved_code_sha256);
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
-- Setup through functions: orgs, plans and models (the operator's, i.e.
-- the owner's), workspaces and org policy (the admin's), agents and
-- conversations (the backend's).  Neither role writes these tables directly: a
-- table-level write grant would let it LOCK a table every tenant and the
-- supervisor read, take row locks, choose primary keys (an existence
-- oracle across tenants), or change what it is not meant to (an agent's
-- kind, the org's policy) and so pass the IAM checks it is subject to.
--
-- Every function here takes the tenant from agent.set_tenant(), makes the
-- ids it creates, names the person acting (agent._require_person), and
-- writes one audit event per change in the org's chain, in the same
-- transaction.  Setters return whether the value changed; setting a value
-- it already has writes nothing.  An id of another tenant is reported
-- exactly like an id that does not exist.
--
-- Row locks are FOR NO KEY UPDATE (a plain UPDATE of non-key columns takes
-- the same): the foreign-key checks of other inserts (invocations of an
-- agent, files of a conversation) take FOR KEY SHARE and do not wait.

-- ----------------------------------------------------------------------
-- Agents and conversations (agent_backend)
-- ----------------------------------------------------------------------

-- Create an agent in the current workspace and return its id.  Its kind is
-- fixed from now on; only a personal agent has an owner (a person).
CREATE FUNCTION agent.create_agent(name text, kind text, model uuid, created_by text,
								   owner text DEFAULT NULL,
								   code_execution_enabled boolean DEFAULT false,
								   file_upload_enabled boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	v_ws	uuid := agent.current_workspace();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	IF name IS NULL OR kind IS NULL OR code_execution_enabled IS NULL
	   OR file_upload_enabled IS NULL THEN
		RAISE EXCEPTION 'name, kind and the toggles must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(created_by, 'created_by');
	IF kind NOT IN ('specialist', 'shared', 'personal') THEN
		RAISE EXCEPTION 'invalid agent kind "%"', agent._shown(kind)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use specialist, shared or personal.';
	END IF;
	IF kind = 'personal' THEN
		PERFORM agent._require_person(owner, 'owner');
	ELSIF owner IS NOT NULL THEN
		RAISE EXCEPTION 'a % agent has no owner', kind
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Only a personal agent belongs to a person; pass owner => NULL.';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.workspaces w WHERE w.id = v_ws AND w.org_id = v_org) THEN
		RAISE EXCEPTION 'workspace % does not exist', v_ws
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	IF model IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.models m WHERE m.id = model) THEN
		RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
	END IF;

	INSERT INTO agent.agents (org_id, workspace_id, name, kind, owner, model_id,
							  code_execution_enabled, file_upload_enabled)
	VALUES (v_org, v_ws, name, kind, owner, model, code_execution_enabled, file_upload_enabled)
	RETURNING agents.id INTO v_id;
	PERFORM agent._audit(v_org, v_ws, 'agent.created', NULL, created_by,
		pg_catalog.jsonb_build_object('agent_id', v_id, 'name', name, 'kind', kind,
									  'owner', owner, 'model_id', model,
									  'code_execution_enabled', code_execution_enabled,
									  'file_upload_enabled', file_upload_enabled));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_agent(text, text, uuid, text, text, boolean, boolean) IS
	'create an agent in the current workspace; returns its id (its kind is fixed from then on)';

-- Create a conversation (thread) of an agent of the current workspace and
-- return its id.
CREATE FUNCTION agent.create_conversation(agent uuid, created_by text, title text DEFAULT NULL,
										  code_execution_enabled boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	v_ws	uuid := agent.current_workspace();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL OR code_execution_enabled IS NULL THEN
		RAISE EXCEPTION 'agent and code_execution_enabled must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(created_by, 'created_by');
	PERFORM agent._check_text(title, 'title', 'title');
	-- Another tenant's agent is indistinguishable from a missing one.
	IF NOT EXISTS (SELECT 1 FROM agent.agents a
					WHERE a.id = agent AND a.org_id = v_org AND a.workspace_id = v_ws) THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;

	INSERT INTO agent.conversations (org_id, workspace_id, agent_id, title, created_by,
									 code_execution_enabled)
	VALUES (v_org, v_ws, agent, title, created_by, code_execution_enabled)
	RETURNING conversations.id INTO v_id;
	PERFORM agent._audit(v_org, v_ws, 'conversation.created', NULL, created_by,
		pg_catalog.jsonb_build_object('conversation_id', v_id, 'agent_id', agent,
									  'title', title,
									  'code_execution_enabled', code_execution_enabled));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_conversation(uuid, text, text, boolean) IS
	'create a conversation of an agent of the current workspace; returns its id';

-- Change an agent's toggles (NULL: leave as it is); one agent.changed event
-- per setting that changes.  Returns whether anything changed.  The one
-- place an agent row is updated, so the setters below and later ones
-- (name, model) share the tenant check, the lock and the audit.
CREATE FUNCTION agent._change_agent(agent uuid, actor text,
									code_execution_enabled boolean DEFAULT NULL,
									file_upload_enabled boolean DEFAULT NULL,
									name text DEFAULT NULL,
									model uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
	a		agent.agents;
	v_changes jsonb := '[]'::jsonb;
	c		jsonb;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL THEN
		RAISE EXCEPTION 'agent must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO a FROM agent.agents x
	 WHERE x.id = agent AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF code_execution_enabled IS DISTINCT FROM a.code_execution_enabled
	   AND code_execution_enabled IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'code_execution_enabled',
			'from', a.code_execution_enabled, 'to', code_execution_enabled);
	END IF;
	IF file_upload_enabled IS DISTINCT FROM a.file_upload_enabled
	   AND file_upload_enabled IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'file_upload_enabled',
			'from', a.file_upload_enabled, 'to', file_upload_enabled);
	END IF;
	IF name IS DISTINCT FROM a.name AND name IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'name',
			'from', a.name, 'to', name);
	END IF;
	IF model IS DISTINCT FROM a.model_id AND model IS NOT NULL THEN
		IF NOT EXISTS (SELECT 1 FROM agent.models m WHERE m.id = model) THEN
			RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
		END IF;
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'model_id',
			'from', a.model_id, 'to', model);
	END IF;
	IF pg_catalog.jsonb_array_length(v_changes) = 0 THEN
		RETURN false;
	END IF;

	UPDATE agent.agents x
	   SET code_execution_enabled = coalesce(code_execution_enabled, x.code_execution_enabled),
		   file_upload_enabled = coalesce(file_upload_enabled, x.file_upload_enabled),
		   name = coalesce(_change_agent.name, x.name),
		   model_id = coalesce(model, x.model_id)
	 WHERE x.id = a.id;
	FOR c IN SELECT * FROM pg_catalog.jsonb_array_elements(v_changes) LOOP
		PERFORM agent._audit(a.org_id, a.workspace_id, 'agent.changed', NULL, actor,
								pg_catalog.jsonb_build_object('agent_id', a.id) || c);
	END LOOP;
	RETURN true;
END
$$;

CREATE FUNCTION agent.set_agent_code_execution(agent uuid, enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, code_execution_enabled => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_agent_code_execution(uuid, boolean, text) IS
	'turn code execution on or off for an agent of the current workspace; true when it changed';

CREATE FUNCTION agent.set_agent_file_upload(agent uuid, enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, file_upload_enabled => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_agent_file_upload(uuid, boolean, text) IS
	'turn file uploads on or off for an agent of the current workspace; true when it changed';

-- An agent's name (what the approval card shows).
CREATE FUNCTION agent.set_agent_name(agent uuid, name text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	RETURN agent._change_agent(agent, actor, name => name);
END
$$;
COMMENT ON FUNCTION agent.set_agent_name(uuid, text, text) IS
	'rename an agent of the current workspace; true when it changed';

-- An agent's model (the IAM decision reads whether it supports code
-- execution at every request).
CREATE FUNCTION agent.set_agent_model(agent uuid, model uuid, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF model IS NULL THEN
		RAISE EXCEPTION 'model must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_agent(agent, actor, model => model);
END
$$;
COMMENT ON FUNCTION agent.set_agent_model(uuid, uuid, text) IS
	'change the model of an agent of the current workspace; true when it changed';

-- The per-thread toggle.
CREATE FUNCTION agent.set_conversation_code_execution(conversation uuid, enabled boolean,
													  actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
BEGIN
	PERFORM agent._require_tenant(true);
	IF conversation IS NULL OR enabled IS NULL THEN
		RAISE EXCEPTION 'conversation and enabled must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF c.code_execution_enabled = enabled THEN
		RETURN false;
	END IF;
	UPDATE agent.conversations x SET code_execution_enabled = enabled WHERE x.id = c.id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'conversation.changed', NULL, actor,
		pg_catalog.jsonb_build_object('conversation_id', c.id, 'setting', 'code_execution_enabled',
									  'from', c.code_execution_enabled, 'to', enabled));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_conversation_code_execution(uuid, boolean, text) IS
	'turn code execution on or off for a conversation of the current workspace; true when it changed';

-- A conversation's title.
CREATE FUNCTION agent.set_conversation_title(conversation uuid, title text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
BEGIN
	PERFORM agent._require_tenant(true);
	IF conversation IS NULL THEN
		RAISE EXCEPTION 'conversation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	PERFORM agent._check_text(title, 'title', 'title');
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF c.title IS NOT DISTINCT FROM title THEN
		RETURN false;
	END IF;
	UPDATE agent.conversations x SET title = set_conversation_title.title WHERE x.id = c.id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'conversation.changed', NULL, actor,
		pg_catalog.jsonb_build_object('conversation_id', c.id, 'setting', 'title',
									  'from', c.title, 'to', title));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_conversation_title(uuid, text, text) IS
	'change the title of a conversation of the current workspace (NULL: none); true when it changed';

-- ----------------------------------------------------------------------
-- Workspaces (agent_admin)
-- ----------------------------------------------------------------------

-- Create a workspace in the org named by set_tenant(org, NULL); returns its
-- id.  Event workspace.created (org-wide).
CREATE FUNCTION agent.create_workspace(name text, actor text)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_org	uuid := agent.current_org();
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	IF name IS NULL THEN
		RAISE EXCEPTION 'name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	IF NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = v_org) THEN
		RAISE EXCEPTION 'org % does not exist', v_org USING ERRCODE = 'no_data_found';
	END IF;
	INSERT INTO agent.workspaces (org_id, name) VALUES (v_org, name)
	RETURNING workspaces.id INTO v_id;
	PERFORM agent._audit(v_org, NULL, 'workspace.created', NULL, actor,
		pg_catalog.jsonb_build_object('workspace_id', v_id, 'name', name));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_workspace(text, text) IS
	'create a workspace in the current org (set_tenant(org, NULL)); returns its id';

CREATE FUNCTION agent.set_workspace_name(workspace uuid, name text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	w	agent.workspaces;
BEGIN
	PERFORM agent._require_tenant(false);
	IF workspace IS NULL OR name IS NULL THEN
		RAISE EXCEPTION 'workspace and name must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO w FROM agent.workspaces x
	 WHERE x.id = workspace AND x.org_id = agent.current_org()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', workspace
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the org set with agent.set_tenant() owns it.';
	END IF;
	IF w.name = name THEN
		RETURN false;
	END IF;
	UPDATE agent.workspaces x SET name = set_workspace_name.name WHERE x.id = w.id;
	PERFORM agent._audit(w.org_id, NULL, 'workspace.changed', NULL, actor,
		pg_catalog.jsonb_build_object('workspace_id', w.id, 'setting', 'name',
									  'from', w.name, 'to', name));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_workspace_name(uuid, text, text) IS
	'rename a workspace of the current org; true when it changed';

-- ----------------------------------------------------------------------
-- Org policy (agent_admin)
-- ----------------------------------------------------------------------

-- Change the current org's policy (NULL: leave as it is); one
-- org.policy_changed event (org-wide, no workspace) per setting that
-- changes.  Returns whether anything changed.  The plan is not policy: it
-- stays the owner's.
CREATE FUNCTION agent._change_org_policy(actor text,
										 personal_agents_code_execution boolean DEFAULT NULL,
										 require_distinct_approver boolean DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_variable
DECLARE
	o		agent.orgs;
	v_changes jsonb := '[]'::jsonb;
	c		jsonb;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO o FROM agent.orgs x WHERE x.id = agent.current_org() FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', agent.current_org()
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	IF personal_agents_code_execution IS DISTINCT FROM o.personal_agents_code_execution
	   AND personal_agents_code_execution IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'personal_agents_code_execution',
			'from', o.personal_agents_code_execution, 'to', personal_agents_code_execution);
	END IF;
	IF require_distinct_approver IS DISTINCT FROM o.require_distinct_approver
	   AND require_distinct_approver IS NOT NULL THEN
		v_changes := v_changes || pg_catalog.jsonb_build_object('setting', 'require_distinct_approver',
			'from', o.require_distinct_approver, 'to', require_distinct_approver);
	END IF;
	IF pg_catalog.jsonb_array_length(v_changes) = 0 THEN
		RETURN false;
	END IF;

	UPDATE agent.orgs x
	   SET personal_agents_code_execution = coalesce(personal_agents_code_execution,
													 x.personal_agents_code_execution),
		   require_distinct_approver = coalesce(require_distinct_approver, x.require_distinct_approver)
	 WHERE x.id = o.id;
	FOR c IN SELECT * FROM pg_catalog.jsonb_array_elements(v_changes) LOOP
		PERFORM agent._audit(o.id, NULL, 'org.policy_changed', NULL, actor, c);
	END LOOP;
	RETURN true;
END
$$;

-- The admin switch for code execution by the org's personal agents.
CREATE FUNCTION agent.set_personal_agents_code_execution(enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_org_policy(actor, personal_agents_code_execution => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_personal_agents_code_execution(boolean, text) IS
	'org policy: allow or forbid code execution by the current org''s personal agents; true when it changed';

-- Whether an approver must be someone other than the requester (on by
-- default).
CREATE FUNCTION agent.set_require_distinct_approver(enabled boolean, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF enabled IS NULL THEN
		RAISE EXCEPTION 'enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	RETURN agent._change_org_policy(actor, require_distinct_approver => enabled);
END
$$;
COMMENT ON FUNCTION agent.set_require_distinct_approver(boolean, text) IS
	'org policy: require an approver other than the requester in the current org; true when it changed';

-- ----------------------------------------------------------------------
-- Orgs, plans and models (the operator: the owner; granted to no role)
-- ----------------------------------------------------------------------

-- Create an org on a plan; returns its id.  Event org.created (actor: the
-- operator's role, as for grant_credits).
CREATE FUNCTION agent.create_org(name text, plan text DEFAULT 'free')
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_id	uuid;
BEGIN
	IF name IS NULL OR plan IS NULL THEN
		RAISE EXCEPTION 'name and plan must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	INSERT INTO agent.orgs (name, plan) VALUES (name, plan) RETURNING orgs.id INTO v_id;
	PERFORM agent._audit(v_id, NULL, 'org.created', NULL, current_user::text,
		pg_catalog.jsonb_build_object('name', name, 'plan', plan));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_org(text, text) IS
	'create an org on a plan (the operator); returns its id';

-- Move an org to another plan.  Event org.plan_changed.
CREATE FUNCTION agent.set_org_plan(org uuid, plan text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	o	agent.orgs;
BEGIN
	IF org IS NULL OR plan IS NULL THEN
		RAISE EXCEPTION 'org and plan must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	SELECT * INTO o FROM agent.orgs x WHERE x.id = org FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	IF o.plan = plan THEN
		RETURN false;
	END IF;
	UPDATE agent.orgs x SET plan = set_org_plan.plan WHERE x.id = o.id;
	PERFORM agent._audit(o.id, NULL, 'org.plan_changed', NULL, current_user::text,
		pg_catalog.jsonb_build_object('from', o.plan, 'to', plan));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_org_plan(uuid, text) IS
	'move an org to another plan (the operator); true when it changed';

-- Models are global (not tenant data): no org's audit chain records them.
CREATE FUNCTION agent.create_model(name text, provider text DEFAULT NULL,
								   supports_code_execution boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_id	uuid;
	v_constraint text;
BEGIN
	IF name IS NULL OR supports_code_execution IS NULL THEN
		RAISE EXCEPTION 'name and supports_code_execution must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._check_text(name, 'name', 'name');
	PERFORM agent._check_text(provider, 'provider', 'provider');
	IF pg_catalog.btrim(name) = '' THEN
		RAISE EXCEPTION 'name must not be empty' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- The check sees committed names; a concurrent create of the same name
	-- passes it and then waits on the unique index, which reports it when
	-- the other commits: the same error either way.
	IF EXISTS (SELECT 1 FROM agent.models m WHERE m.name = name) THEN
		RAISE EXCEPTION 'model "%" already exists', agent._shown(name)
			USING ERRCODE = 'duplicate_object';
	END IF;
	BEGIN
		INSERT INTO agent.models (name, provider, supports_code_execution)
		VALUES (name, provider, supports_code_execution)
		RETURNING models.id INTO v_id;
	EXCEPTION WHEN unique_violation THEN
		GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
		IF v_constraint IS DISTINCT FROM 'models_name_key' THEN
			RAISE;
		END IF;
		RAISE EXCEPTION 'model "%" already exists', agent._shown(name)
			USING ERRCODE = 'duplicate_object',
				  DETAIL = 'Another transaction created it at the same time.';
	END;
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_model(text, text, boolean) IS
	'add a model to the global catalog (the operator); returns its id';

CREATE FUNCTION agent.set_model_code_execution(model uuid, enabled boolean)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	m	agent.models;
BEGIN
	IF model IS NULL OR enabled IS NULL THEN
		RAISE EXCEPTION 'model and enabled must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO m FROM agent.models x WHERE x.id = model FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'model % does not exist', model USING ERRCODE = 'no_data_found';
	END IF;
	IF m.supports_code_execution = enabled THEN
		RETURN false;
	END IF;
	UPDATE agent.models x SET supports_code_execution = enabled WHERE x.id = m.id;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_model_code_execution(uuid, boolean) IS
	'whether a model supports code execution (the operator); true when it changed';

REVOKE ALL ON FUNCTION agent._change_agent(uuid, text, boolean, boolean, text, uuid),
	agent._change_org_policy(text, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	agent.create_agent(text, text, uuid, text, text, boolean, boolean),
	agent.create_conversation(uuid, text, text, boolean),
	agent.set_agent_code_execution(uuid, boolean, text),
	agent.set_agent_file_upload(uuid, boolean, text),
	agent.set_conversation_code_execution(uuid, boolean, text),
	agent.set_agent_name(uuid, text, text),
	agent.set_agent_model(uuid, uuid, text),
	agent.set_conversation_title(uuid, text, text)
	TO agent_backend;
GRANT EXECUTE ON FUNCTION
	agent.set_personal_agents_code_execution(boolean, text),
	agent.set_require_distinct_approver(boolean, text),
	agent.create_workspace(text, text),
	agent.set_workspace_name(uuid, text, text)
	TO agent_admin;
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
	agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer),
	agent.approve(uuid, text, text),
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
	agent._audit_hash(text, bigint, uuid, uuid, text, uuid, text, jsonb, timestamptz),
	agent._audit_anchors(uuid),
	agent._audit_anchors_configured(),
	agent.approval_card(uuid),
	agent.invocation_transition_allowed(text, text),
	agent.supervisor_available()
	TO agent_auditor;
-- Execution: a run's steps in the database, and the API around a running
-- invocation: output, cancel, wait, status.
--
-- Every runner, the local one too, reaches the steps through the
-- agent.runner_* wrappers of 45_runners.sql (called from
-- src/runner/steps.c and steps_result.c), which check its identity and
-- lease first.  The supervisor (src/supervisor.c) calls only
-- _supervisor_recover() at its start and _finish_pending() (with
-- agent.reap_expired_leases()).  Each step is one short transaction
-- fenced on the state it expects, so a runner or supervisor that dies
-- between two steps leaves rows that the lease reaper or
-- agent._supervisor_recover() resolves.


-- Terminal states: nothing happens to an invocation after these.  From the
-- state machine's own table (src/guards.c): a state with no way out.
CREATE FUNCTION agent._state_is_terminal(state text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_state_is_terminal'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The NOTIFY channel of one invocation is named after a random token, not
-- after the invocation's id: any role may LISTEN on (or NOTIFY) any
-- channel it can name, so only the invocation's tenant may learn the name,
-- through agent.output_channel().  (The token is as secret as the rows the
-- tenant reads: row-level security.)
-- (the column is agent.invocations.channel_token, 15_invocations.sql)

-- The channel's name, written once.
CREATE FUNCTION agent._channel_name(token uuid) RETURNS text
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN 'sandbox_output_' || pg_catalog.replace(token::text, '-', '');

-- The channel on which the supervisor announces an invocation's new output
-- and its end, for the invocation's tenant only: another tenant's id, like
-- an unknown one, is an error.
CREATE FUNCTION agent.output_channel(invocation uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_token	uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT i.channel_token INTO v_token FROM agent.invocations i
	 WHERE i.id = invocation
	   AND i.org_id = agent.current_org()
	   AND i.workspace_id = agent.current_workspace();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	RETURN agent._channel_name(v_token);
END
$$;
COMMENT ON FUNCTION agent.output_channel(uuid) IS
	'the LISTEN channel on which the supervisor announces new output and the end of an invocation (its tenant only)';

-- Announce something about an invocation on its channel.  Every
-- notification of an invocation goes through here, so what one carries is
-- decided in one place: only a hint, 'output' (new output) or 'done' (the
-- run ended: payload {"done": true}), never output, sequence numbers or
-- the state.  Whoever learns a channel's name can NOTIFY on it too, so a
-- client treats a notification as a reason to look, and reads the state
-- and the output through the tenant-scoped API (docs/execution.md).
CREATE FUNCTION agent._notify_invocation(invocation uuid, payload jsonb) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM pg_catalog.pg_notify(agent._channel_name(i.channel_token),
								 CASE WHEN payload ->> 'done' = 'true' THEN 'done' ELSE 'output' END)
	   FROM agent.invocations i
	  WHERE i.id = invocation;
END
$$;

-- Output, in the order the supervisor read it.
CREATE TABLE agent.invocation_output (
	invocation_id	uuid NOT NULL REFERENCES agent.invocations (id) ON DELETE CASCADE,
	seq				integer NOT NULL CHECK (seq > 0),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	stream			text NOT NULL CHECK (stream IN ('stdout', 'stderr')),
	data			text NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
	PRIMARY KEY (invocation_id, seq)
);
COMMENT ON TABLE agent.invocation_output IS
	'stdout/stderr of invocations as it arrived, in chunks (UTF-8; invalid bytes replaced)';

ALTER TABLE agent.invocation_output ENABLE ROW LEVEL SECURITY;
CREATE POLICY invocation_output_tenant ON agent.invocation_output
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY invocation_output_auditor ON agent.invocation_output
	FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.invocation_output TO agent_backend, agent_auditor;

-- ----------------------------------------------------------------------
-- Run steps (owner only; never granted: runners reach them through the
-- agent.runner_* wrappers of 45_runners.sql, the supervisor calls the last
-- two)
--
-- A run's life in the database, one named function per step, each fenced
-- on the state it expects:
--
--   _claim_invocations(n)    approved -> provisioning, charged (fair across
--                            orgs, within each org's limits)
--   _prepare_invocation(id)  what to put in the workspace before the start
--   _mark_running(id, pid)   provisioning -> running
--   _append_output(id, ...)  one chunk of output
--   _store_produced_file(..) one file the run left behind (staged)
--   _finish_invocation(id, verdict, ...)
--                            stage the result, then apply it: -> a final
--                            state by the one billing rule
--   _finish_pending(n)       apply results staged earlier (a lock was held)
--   _supervisor_recover()    after a restart: every row still in flight
--                            gets a result ("ours failed") and is applied
--
-- Locks.  A backend acting for one tenant can hold row locks through the
-- API for as long as its transaction lasts (an approval holds the org's
-- audit head; an upload its usage row).  None of these steps may wait for
-- such a lock, or one tenant could stall a runner and so every other
-- tenant: the claim skips what is locked (SKIP LOCKED), and applying a
-- result takes its locks with NOWAIT; a result that cannot be applied now
-- stays staged in agent.run_results, which is written without touching
-- any tenant row, and is applied on a later turn (by the supervisor,
-- _finish_pending).  Runners and the supervisor also run with a short
-- lock_timeout as a backstop for any lock not foreseen here.
-- ----------------------------------------------------------------------

-- Results waiting to be applied.  No foreign keys on purpose: a key check
-- would take a KEY SHARE lock on the invocation, which a backend's FOR
-- UPDATE could block; the rows are removed when the result is applied.
CREATE TABLE agent.run_results (
	invocation_id	uuid PRIMARY KEY,
	verdict			text,			-- the jail's verdict (JSON), NULL if none
	jail_status		integer,
	error			text,			-- an infrastructure failure (ours), or NULL
	spawned			boolean NOT NULL DEFAULT false,
	truncated		boolean NOT NULL DEFAULT false,
	workspace_bytes bigint,			-- the session workspace after the run
	workspace_entries integer,
	workspace_reset text,			-- why the session workspace must be rebuilt, or NULL
	recorded_at		timestamptz NOT NULL DEFAULT clock_timestamp(),
	attempts		integer NOT NULL DEFAULT 0,
	last_error		text
);
COMMENT ON TABLE agent.run_results IS
	'results of finished sandboxes not yet applied to their invocation (normally for milliseconds)';

CREATE TABLE agent.run_result_files (
	invocation_id	uuid NOT NULL,
	seq				integer NOT NULL,
	name			text NOT NULL,
	status			text NOT NULL CHECK (status IN ('saved', 'skipped', 'failed')),
	reason			text,
	content			bytea,
	PRIMARY KEY (invocation_id, seq)
);
COMMENT ON TABLE agent.run_result_files IS
	'files a finished run left in its workspace, until its result is applied';

ALTER TABLE agent.run_results ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.run_result_files ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.run_results FOR SELECT TO agent_auditor USING (true);

-- Rows in flight, for the claim's per-org and per-conversation checks.
CREATE INDEX invocations_in_flight_idx ON agent.invocations (org_id, workspace_id)
	WHERE state IN ('provisioning', 'running');
CREATE INDEX invocations_conversation_in_flight_idx ON agent.invocations (conversation_id)
	WHERE state IN ('provisioning', 'running');
-- The queue, per org in approval order.
CREATE INDEX invocations_approved_org_idx ON agent.invocations (org_id, approved_at, request_seq)
	WHERE state = 'approved';

-- ---- the billing rule --------------------------------------------------

-- How a run ended, and whether it is charged: the one billing rule
-- (docs/execution.md, "States and billing").  What the payload did is
-- charged: its exit, a signal, a limit (time, memory, output, files), a
-- cancel after it was provisioned.  A failure of ours is refunded: an error
-- of the supervisor, the launcher or the jail (setup error, no verdict, a
-- jail that died or was killed by us), a supervisor restart, or a sandbox
-- stopped by the host rather than by a cancel.  `error` names a failure of
-- ours found outside the verdict.
CREATE FUNCTION agent._run_outcome(verdict jsonb, error text, cancel_requested boolean,
								   cancelled_by text DEFAULT NULL,
								   OUT state text, OUT reason text, OUT charged boolean)
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	charged := true;
	IF error IS NOT NULL THEN
		state := 'provision_failed';
		reason := error;
		charged := false;
	ELSIF verdict IS NULL OR jsonb_typeof(verdict) <> 'object' THEN
		state := 'provision_failed';
		reason := 'the sandbox ended without a verdict';
		charged := false;
	ELSIF verdict ->> 'setup_error' IS NOT NULL OR verdict ->> 'status' = 'setup_error' THEN
		state := 'provision_failed';
		reason := 'sandbox setup failed: ' || coalesce(verdict ->> 'setup_error', 'unknown error');
		charged := false;
	ELSIF coalesce((verdict ->> 'killed')::boolean, false) AND coalesce(cancel_requested, false) THEN
		state := 'cancelled';
		reason := format('cancelled by %s', coalesce(cancelled_by, 'unknown'));
	ELSIF coalesce((verdict ->> 'timed_out')::boolean, false) THEN
		state := 'timed_out';
		reason := 'the wall or CPU time limit was reached';
	ELSIF coalesce((verdict ->> 'killed')::boolean, false) THEN
		state := 'killed';
		reason := 'the sandbox was stopped by the host, not by a cancel';
		charged := false;
	ELSIF verdict ->> 'status' = 'exited' AND (verdict ->> 'exit_code')::integer = 0
		  AND NOT coalesce((verdict ->> 'file_too_large')::boolean, false) THEN
		state := 'succeeded';
	ELSE
		state := 'failed';
		reason := CASE
			WHEN coalesce((verdict ->> 'oom_killed')::boolean, false) THEN 'out of memory'
			WHEN coalesce((verdict ->> 'file_too_large')::boolean, false)
				THEN 'a file or the workspace reached its size or entry limit'
			WHEN verdict ->> 'status' = 'signaled' THEN format('killed by signal %s', verdict ->> 'signal')
			ELSE format('exited with code %s', verdict ->> 'exit_code') END;
	END IF;
END
$$;
COMMENT ON FUNCTION agent._run_outcome(jsonb, text, boolean, text) IS
	'the billing rule: final state, reason and whether the run is charged, from a verdict or a failure of ours';

-- ---- claim ---------------------------------------------------------------

-- The orgs that have approved work, each once, in a loose index scan of
-- invocations_approved_org_idx (one probe per org, not one per row).
-- SQL without a SET clause so that the claim's queries inline it.
CREATE FUNCTION agent._orgs_with_approved() RETURNS SETOF uuid
	LANGUAGE sql STABLE
AS $$
	WITH RECURSIVE orgs AS (
		(SELECT i.org_id FROM agent.invocations i WHERE i.state = 'approved'
		  ORDER BY i.org_id LIMIT 1)
		UNION ALL
		SELECT (SELECT i.org_id FROM agent.invocations i
				 WHERE i.state = 'approved' AND i.org_id > o.org_id
				 ORDER BY i.org_id LIMIT 1)
		  FROM orgs o WHERE o.org_id IS NOT NULL)
	SELECT o.org_id FROM orgs o WHERE o.org_id IS NOT NULL
$$;

-- Lock an org's audit head for the appends to come, without waiting, in
-- the caller's (sub)transaction: false when it is held elsewhere (a
-- backend's open transaction after an audited call); an org without a
-- head yet has nothing to lock (its first append makes it).
CREATE FUNCTION agent._try_audit_head(org uuid) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = org FOR UPDATE SKIP LOCKED;
	RETURN FOUND OR NOT EXISTS (SELECT 1 FROM agent.audit_heads h WHERE h.org_id = org);
END
$$;

-- Claim up to max_rows approved invocations: check that the code is the
-- code that was approved, charge the credits, move to provisioning.  Runs
-- in the supervisor's short claim transaction, which commits before any
-- jail starts.
--
-- Fairness.  Each org has at most its limit (agent._org_run_limit, and a
-- workspace its own) in flight, counted on every host together, and the
-- free slots go first to the orgs with the fewest runs in flight, then in
-- approval order: a backlog of one org never delays another org's run
-- beyond the next free slot.  An org's queue is looked at 64 deep per
-- claim.  Within a conversation runs are serial and in approval order.
--
-- An invocation of an org that cannot pay is refused (insufficient_credits)
-- without taking a slot: such rows are resolved apart from the claim, at
-- most 100 per call, after the funded ones.
--
-- Nothing here waits for a lock a backend may hold: rows, orgs and audit
-- heads locked elsewhere are skipped until a later claim.
--
-- Runners (45_runners.sql).  With `runner` (agent.runner_claim() passes
-- it), each claimed row is leased to that runner: runner_id, a fresh
-- lease_token and lease_expires_at, returned with the row.  Without
-- (NULL: the in-database supervisor), no lease.  Session affinity: a
-- conversation whose active session is on another live runner is that
-- runner's, and is skipped here (also by the in-database supervisor); a
-- session on a runner that is gone, draining or removed is rebuilt on the
-- claimer (agent._session_for, reason runner_gone).  The per-org and
-- per-workspace limits count the runs in flight on every host.
CREATE FUNCTION agent._claim_invocations(max_rows integer, runner uuid DEFAULT NULL)
	RETURNS TABLE (id uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean, has_skills boolean, lease_token uuid,
				   has_egress boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c			record;
	r			agent.invocations;
	approved	text;
	audited		text;
	err			text;
	v_session	uuid;
	v_gen		integer;
	v_fresh		boolean;
	v_load		bigint;
	v_balance	bigint;
	v_token		uuid;
	v_price		integer;
	v_lease		interval;
	v_live_since timestamptz;	-- a runner heartbeating since is live
	v_store		record;
	claimed		integer := 0;
	taken		uuid[] := '{}'::uuid[];		-- conversations claimed in this call
	locked_orgs uuid[] := '{}'::uuid[];		-- orgs whose lock this call holds
	head_orgs	uuid[] := '{}'::uuid[];		-- orgs whose audit head it holds
	v_new_head	boolean;
	skip_orgs	uuid[] := '{}'::uuid[];		-- orgs locked elsewhere: next time
BEGIN
	IF max_rows IS NULL OR max_rows < 0 THEN
		RAISE EXCEPTION 'max_rows must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	v_lease := agent._runner_lease();
	v_live_since := now() - v_lease;

	FOR c IN
		WITH orgs AS (SELECT x AS org_id FROM agent._orgs_with_approved() x),
		org_info AS MATERIALIZED (	-- once per org: funded, its limit, its runs in flight
			SELECT o.org_id, agent._org_run_limit(o.org_id) AS org_limit,
				   (SELECT count(*) FROM agent.invocations j
					 WHERE j.org_id = o.org_id AND j.state IN ('provisioning', 'running')) AS org_load
			  FROM orgs o
			  JOIN agent.orgs og ON og.id = o.org_id
			  JOIN agent.plans p ON p.plan = og.plan
			  LEFT JOIN agent.credit_balances b ON b.org_id = o.org_id
			 WHERE coalesce(b.balance, 0) >= p.credits_per_invocation),
		queue AS (					-- the oldest approved rows of each org below its limit
			SELECT q.*, oi.org_limit, oi.org_load
			  FROM org_info oi
			  CROSS JOIN LATERAL (
					SELECT i.id, i.org_id, i.workspace_id, i.conversation_id, i.approved_at, i.request_seq
					  FROM agent.invocations i
					 WHERE i.state = 'approved' AND i.org_id = oi.org_id
					 ORDER BY i.approved_at, i.request_seq
					 LIMIT 64) q
			 WHERE oi.org_load < oi.org_limit),
		ws_load AS (				-- runs in flight per workspace of those orgs
			SELECT j.workspace_id, count(*) AS n
			  FROM agent.invocations j
			 WHERE j.state IN ('provisioning', 'running')
			   AND j.org_id IN (SELECT oi.org_id FROM org_info oi)
			 GROUP BY j.workspace_id),
		runnable AS (				-- first of its conversation, conversation idle
			SELECT q.*,
				   row_number() OVER (PARTITION BY q.conversation_id
									  ORDER BY q.approved_at, q.request_seq) AS conv_rank
			  FROM queue q),
		ranked AS (
			SELECT u.*,
				   row_number() OVER (PARTITION BY u.org_id ORDER BY u.approved_at, u.request_seq) AS org_rank,
				   row_number() OVER (PARTITION BY u.workspace_id ORDER BY u.approved_at, u.request_seq) AS ws_rank,
				   w.max_concurrent_runs AS ws_limit,
				   coalesce(l.n, 0) AS ws_load
			  FROM runnable u
			  JOIN agent.workspaces w ON w.id = u.workspace_id
			  LEFT JOIN ws_load l ON l.workspace_id = u.workspace_id
			 WHERE (u.conversation_id IS NULL
					OR (u.conv_rank = 1
						AND NOT EXISTS (SELECT 1 FROM agent.invocations j
										 WHERE j.conversation_id = u.conversation_id
										   AND j.state IN ('provisioning', 'running'))
						-- affinity (see agent._session_elsewhere, checked again below)
						AND NOT EXISTS (SELECT 1 FROM agent.sessions s
										  JOIN agent.runners rn ON rn.id = s.runner_id
										 WHERE s.conversation_id = u.conversation_id
										   AND s.state = 'active'
										   AND s.runner_id IS DISTINCT FROM runner
										   AND rn.state = 'active'
										   AND rn.last_heartbeat >= v_live_since))))
		SELECT k.id, k.org_id, k.org_limit, k.ws_limit
		  FROM ranked k
		 WHERE k.org_load + k.org_rank <= k.org_limit
		   AND (k.ws_limit IS NULL OR k.ws_load + k.ws_rank <= k.ws_limit)
		 ORDER BY k.org_load + k.org_rank, k.approved_at, k.request_seq
	LOOP
		EXIT WHEN claimed >= max_rows;
		CONTINUE WHEN c.org_id = ANY (skip_orgs);

		-- One claimer per org at a time, so its limit holds with several
		-- claimers (runner hosts): the org row, skipped if locked.
		IF NOT c.org_id = ANY (locked_orgs) THEN
			PERFORM 1 FROM agent.orgs o WHERE o.id = c.org_id FOR NO KEY UPDATE SKIP LOCKED;
			IF NOT FOUND THEN
				skip_orgs := skip_orgs || c.org_id;
				CONTINUE;
			END IF;
			locked_orgs := locked_orgs || c.org_id;
		END IF;
		-- Under the org's lock, the in-flight count is exact (it includes
		-- this call's claims).
		SELECT count(*) INTO v_load FROM agent.invocations j
		 WHERE j.org_id = c.org_id AND j.state IN ('provisioning', 'running');
		CONTINUE WHEN v_load >= c.org_limit;

		-- The row is locked, checked and written in one subtransaction:
		-- the rows it updates (the invocation, the org's audit head) are
		-- then locked by the subtransaction that updates them, which
		-- needs no multixact (a lock of the parent's would).
		r := NULL;
		v_new_head := false;
		BEGIN
			SELECT * INTO r FROM agent.invocations i
			 WHERE i.id = c.id AND i.state = 'approved'
			   FOR NO KEY UPDATE SKIP LOCKED;
			CONTINUE WHEN NOT FOUND;
			-- The audit head is appended to below: skip an org whose head
			-- is held (by a backend's open transaction).
			IF NOT c.org_id = ANY (head_orgs) THEN
				IF NOT agent._try_audit_head(c.org_id) THEN
					skip_orgs := skip_orgs || c.org_id;
					CONTINUE;
				END IF;
				head_orgs := head_orgs || c.org_id;
				v_new_head := true;
			END IF;
			IF c.ws_limit IS NOT NULL THEN
				SELECT count(*) INTO v_load FROM agent.invocations j
				 WHERE j.org_id = r.org_id AND j.workspace_id = r.workspace_id
				   AND j.state IN ('provisioning', 'running');
				CONTINUE WHEN v_load >= c.ws_limit;
			END IF;
			-- Another claimer may be starting this conversation: its lock on
			-- the conversation row says so.
			IF r.conversation_id IS NOT NULL THEN
				CONTINUE WHEN r.conversation_id = ANY (taken);
				PERFORM 1 FROM agent.conversations cv WHERE cv.id = r.conversation_id
				   FOR NO KEY UPDATE SKIP LOCKED;
				CONTINUE WHEN NOT FOUND;
				CONTINUE WHEN EXISTS (SELECT 1 FROM agent.invocations j
									   WHERE j.conversation_id = r.conversation_id
										 AND j.state IN ('provisioning', 'running'));
				-- Its session may have moved to another live runner since the
				-- queue was read (that runner's last run of it has ended).
				CONTINUE WHEN agent._session_elsewhere(r.conversation_id, runner);
			END IF;

			SELECT a.approved_code_sha256 INTO approved
			  FROM agent.approval_requests a
			 WHERE a.id = r.approval_id AND a.invocation_id = r.id AND a.status = 'approved';
			-- The hash the audit trail recorded at approval: a change of the
			-- card and the code together (bypassing every trigger) still
			-- disagrees with the chain, which is anchored outside the database.
			SELECT e.details ->> 'code_sha256' INTO audited
			  FROM agent.audit_events e
			 WHERE e.invocation_id = r.id AND e.event_type = 'approval.approved'
			 ORDER BY e.id DESC LIMIT 1;

			-- The code about to run must be, byte for byte, the code approved.
			IF approved IS NULL OR audited IS DISTINCT FROM approved
			   OR approved <> agent.code_sha256(r.code)
			   OR approved <> r.code_sha256 THEN
				UPDATE agent.invocations i
				   SET state = 'provision_failed',
					   state_reason = 'the code does not match the approved code (sha256 mismatch); nothing ran',
					   finished_at = now()
				 WHERE i.id = r.id;
				PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.hash_mismatch', r.id,
									 'supervisor',
									 jsonb_build_object('approved_sha256', approved,
														'audited_sha256', audited,
														'code_sha256', agent.code_sha256(r.code)));
				PERFORM agent._notify_invocation(r.id, '{"done":true}');
				CONTINUE;
			END IF;

			-- An org at its storage quota starts no new run: its output
			-- would be kept past the quota (agent._storage_exhausted).
			-- Nothing ran, nothing is charged.
			SELECT * INTO v_store FROM agent._storage_exhausted(r.org_id);
			IF v_store.exhausted THEN
				UPDATE agent.invocations i
				   SET state = 'provision_failed',
					   state_reason = format('the organization''s storage quota is exhausted (%s of %s bytes); nothing ran',
											 v_store.stored_bytes, v_store.max_stored_bytes),
					   finished_at = now()
				 WHERE i.id = r.id;
				PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
									 'supervisor',
									 jsonb_build_object('reason', 'storage_quota_exhausted',
														'stored_bytes', v_store.stored_bytes,
														'max_stored_bytes', v_store.max_stored_bytes));
				PERFORM agent._notify_invocation(r.id, '{"done":true}');
				CONTINUE;
			END IF;

			v_price := agent._charge(r.id);
			IF v_price IS NULL THEN
				PERFORM agent._refuse_unfunded(r);
				CONTINUE;
			END IF;

			v_session := NULL;
			v_gen := NULL;
			v_fresh := NULL;
			IF r.conversation_id IS NOT NULL THEN
				SELECT x.session_id, x.generation, x.fresh INTO v_session, v_gen, v_fresh
				  FROM agent._session_for(r, runner) x;
				taken := taken || r.conversation_id;
			END IF;
			v_token := CASE WHEN runner IS NOT NULL THEN gen_random_uuid() END;
			UPDATE agent.invocations i
			   SET state = 'provisioning', provisioned_at = now(), credits_charged = v_price,
				   session_id = v_session, session_generation = v_gen,
				   runner_id = runner, lease_token = v_token,
				   lease_expires_at = CASE WHEN runner IS NOT NULL
										   THEN clock_timestamp() + v_lease END
			 WHERE i.id = r.id
			RETURNING * INTO r;
			PERFORM agent._audit(r.org_id, r.workspace_id, 'credits.charged', r.id, 'supervisor',
								 jsonb_build_object('amount', r.credits_charged));
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provisioned', r.id,
								 'supervisor',
								 jsonb_build_object('credits_charged', r.credits_charged)
								 || CASE WHEN runner IS NOT NULL
										 THEN jsonb_build_object('runner_id', runner)
										 ELSE '{}'::jsonb END);
		EXCEPTION
			WHEN lock_not_available THEN
				-- a lock not foreseen above: not this row's fault; next time
				-- (what the subtransaction locked is free again)
				IF v_new_head THEN
					head_orgs := array_remove(head_orgs, c.org_id);
				END IF;
				skip_orgs := skip_orgs || c.org_id;
				CONTINUE;
			WHEN others THEN
				-- One row that cannot be claimed (a bug, a broken catalog
				-- row) must not block the queue: everything above for this
				-- row is rolled back (uncharged) and the row fails with the
				-- reason, under its locks taken again without waiting (held
				-- elsewhere meanwhile: next time).
				GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
				IF v_new_head THEN
					head_orgs := array_remove(head_orgs, c.org_id);
				END IF;
				IF r.id IS DISTINCT FROM c.id THEN
					skip_orgs := skip_orgs || c.org_id;
					CONTINUE;
				END IF;
				BEGIN
					PERFORM 1 FROM agent.invocations i
					 WHERE i.id = r.id AND i.state = 'approved' FOR NO KEY UPDATE NOWAIT;
					IF FOUND THEN
						PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = r.org_id FOR UPDATE NOWAIT;
						UPDATE agent.invocations i
						   SET state = 'provision_failed',
							   state_reason = 'could not provision: ' || err,
							   finished_at = now()
						 WHERE i.id = r.id;
						PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
											 'supervisor', jsonb_build_object('reason', 'could not provision: ' || err));
						PERFORM agent._notify_invocation(r.id, '{"done":true}');
					END IF;
				EXCEPTION
					WHEN lock_not_available THEN
						skip_orgs := skip_orgs || c.org_id;
				END;
				CONTINUE;
		END;

		claimed := claimed + 1;
		id := r.id;
		language := r.language;
		code := r.code;
		wall_time_s := r.wall_time_s;
		memory_mb := r.memory_mb;
		conversation_id := r.conversation_id;
		session_id := v_session;
		fresh_session := v_fresh;
		has_skills := EXISTS (SELECT 1 FROM agent.agent_skills s WHERE s.agent_id = r.agent_id);
		lease_token := v_token;
		-- its policy file comes with the prepare step (47_egress.sql)
		has_egress := r.egress_policy IS NOT NULL;
		RETURN NEXT;
	END LOOP;

	-- Refuse the approved rows of orgs that cannot pay: no slot, no wait.
	-- (The orgs with approved work, then the rows of those that cannot
	-- pay: not every approved row of every org.)
	FOR c IN
		WITH orgs AS (SELECT x AS org_id FROM agent._orgs_with_approved() x),
		unfunded AS MATERIALIZED (
			SELECT o.org_id, p.credits_per_invocation AS price
			  FROM orgs o
			  JOIN agent.orgs og ON og.id = o.org_id
			  JOIN agent.plans p ON p.plan = og.plan
			  LEFT JOIN agent.credit_balances b ON b.org_id = o.org_id
			 WHERE coalesce(b.balance, 0) < p.credits_per_invocation)
		SELECT i.id, i.org_id, u.price
		  FROM unfunded u
		  JOIN agent.invocations i ON i.org_id = u.org_id AND i.state = 'approved'
		 ORDER BY i.approved_at, i.request_seq
		 LIMIT 100
	LOOP
		CONTINUE WHEN c.org_id = ANY (skip_orgs);
		IF NOT c.org_id = ANY (head_orgs) THEN
			IF NOT agent._try_audit_head(c.org_id) THEN
				skip_orgs := skip_orgs || c.org_id;
				CONTINUE;
			END IF;
			head_orgs := head_orgs || c.org_id;
		END IF;
		-- Decide on the balance as it is, under its lock (a grant may be
		-- committing right now): funded after all, a later claim takes it.
		SELECT b.balance INTO v_balance FROM agent.credit_balances b
		 WHERE b.org_id = c.org_id FOR UPDATE SKIP LOCKED;
		IF NOT FOUND AND EXISTS (SELECT 1 FROM agent.credit_balances b WHERE b.org_id = c.org_id) THEN
			skip_orgs := skip_orgs || c.org_id;
			CONTINUE;
		END IF;
		CONTINUE WHEN coalesce(v_balance, 0) >= c.price;
		SELECT * INTO r FROM agent.invocations i
		 WHERE i.id = c.id AND i.state = 'approved'
		   FOR NO KEY UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		PERFORM agent._refuse_unfunded(r);
	END LOOP;
END
$$;

-- An approved invocation its org cannot pay for ends, uncharged.
CREATE FUNCTION agent._refuse_unfunded(r agent.invocations) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	UPDATE agent.invocations i
	   SET state = 'insufficient_credits',
		   state_reason = 'the organization does not have enough credits',
		   finished_at = now()
	 WHERE i.id = r.id AND i.state = 'approved';
	PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.insufficient_credits',
						 r.id, 'supervisor', '{}'::jsonb);
	PERFORM agent._notify_invocation(r.id, '{"done":true}');
END
$$;

-- ---- start ---------------------------------------------------------------

-- What to write into a claimed invocation's workspace before the jail
-- starts: the conversation's files its session does not hold yet (all of
-- them when the workspace is new, e.g. its directory vanished), marked as
-- held in this transaction; and the skills to mount, one row per skill
-- (kind 'skill': skill_id and name; the files are read with
-- agent._skill_files()).  Fenced: nothing unless the row is provisioning.
CREATE FUNCTION agent._prepare_invocation(invocation uuid, workspace_is_new boolean)
	RETURNS TABLE (kind text, name text, content bytea, skill_id uuid)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r	agent.invocations;
	f	record;
	n	integer := 0;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation AND i.state = 'provisioning';
	IF NOT FOUND THEN
		RETURN;
	END IF;
	IF r.session_id IS NOT NULL THEN
		IF workspace_is_new THEN
			DELETE FROM agent.session_files sf WHERE sf.session_id = r.session_id;
		END IF;
		FOR f IN SELECT x.name, x.content FROM agent._files_to_place(invocation) x LOOP
			kind := 'file';
			name := f.name;
			content := f.content;
			skill_id := NULL;
			RETURN NEXT;
		END LOOP;
	END IF;
	FOR f IN
		SELECT s.id, s.name FROM agent.agent_skills a JOIN agent.skills s ON s.id = a.skill_id
		 WHERE a.agent_id = r.agent_id ORDER BY s.name
	LOOP
		n := n + 1;
		IF n > 16 THEN
			RAISE EXCEPTION 'the agent has more than 16 skills; at most 16 can be mounted'
				USING ERRCODE = 'program_limit_exceeded',
					  HINT = 'Detach skills the agent does not need (agent.set_agent_skill).';
		END IF;
		kind := 'skill';
		name := f.name;
		content := NULL;
		skill_id := f.id;
		RETURN NEXT;
	END LOOP;
	-- The run's egress policy file, for the jail's proxy (47_egress.sql);
	-- no row: no network.
	IF r.egress_policy IS NOT NULL THEN
		kind := 'egress';
		name := 'policy';
		content := convert_to(agent._egress_policy_file(invocation), 'UTF8');
		skill_id := NULL;
		RETURN NEXT;
	END IF;
END
$$;

-- The files of one skill version, to materialise it on disk.
CREATE FUNCTION agent._skill_files(skill uuid)
	RETURNS TABLE (path text, content bytea, executable boolean)
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT f.path, f.content, f.executable FROM agent.skill_files f
	 WHERE f.skill_id = skill ORDER BY f.path
$$;

-- The caps on what one run may return (agent.settings), for the supervisor.
CREATE FUNCTION agent._produced_caps(OUT max_files integer, OUT max_bytes bigint,
									 OUT max_file_bytes bigint)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	max_files := agent._setting('max_produced_files')::integer;
	max_bytes := agent._setting('max_produced_bytes')::bigint;
	max_file_bytes := agent._setting('max_produced_file_bytes')::bigint;
END
$$;

-- The jail started.  Skipped (false) when the row or its org's audit head
-- is locked elsewhere: the finish then moves it through running itself.
CREATE FUNCTION agent._mark_running(invocation uuid, pid integer) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	SELECT * INTO r FROM agent.invocations i
	 WHERE i.id = invocation AND i.state = 'provisioning'
	   FOR NO KEY UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = r.org_id FOR UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	UPDATE agent.invocations i
	   SET state = 'running', started_at = now(), jail_pid = pid
	 WHERE i.id = invocation
	RETURNING * INTO r;
	PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.started', r.id,
						 'supervisor', jsonb_build_object('language', r.language));
	RETURN true;
END
$$;

-- Of these invocations, the ones someone asked to cancel.
CREATE FUNCTION agent._cancel_requested(invocations uuid[]) RETURNS SETOF uuid
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT i.id FROM agent.invocations i
	 WHERE i.id = ANY (invocations) AND i.cancel_requested_at IS NOT NULL
$$;

-- Append one chunk of output and announce it.  Fenced: nothing (NULL) once
-- the invocation is no longer in flight.
CREATE FUNCTION agent._append_output(invocation uuid, stream text, data text)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	next_seq	integer;
BEGIN
	SELECT * INTO r FROM agent.invocations i
	 WHERE i.id = invocation AND i.state IN ('provisioning', 'running');
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	SELECT coalesce(max(o.seq), 0) + 1 INTO next_seq
	  FROM agent.invocation_output o WHERE o.invocation_id = invocation;
	INSERT INTO agent.invocation_output (invocation_id, seq, org_id, workspace_id, stream, data)
	VALUES (invocation, next_seq, r.org_id, r.workspace_id, stream, data);
	PERFORM agent._notify_invocation(invocation, '{}');
	RETURN next_seq;
END
$$;

-- ---- finish ----------------------------------------------------------------

-- Write the tool call and the analytics row of a finished invocation.
CREATE FUNCTION agent._record_tool_call(r agent.invocations) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	preview_bytes	integer := (SELECT l.preview_bytes FROM agent._request_limits() l);
	preview			text;
BEGIN
	-- The preview is the output as it arrived, cut at a character boundary
	-- within the configured number of bytes.
	SELECT string_agg(o.data, '' ORDER BY o.seq) INTO preview
	  FROM (SELECT o.data, o.seq FROM agent.invocation_output o
			 WHERE o.invocation_id = r.id ORDER BY o.seq) o;
	preview := coalesce(preview, '');
	IF octet_length(preview) > preview_bytes THEN
		preview := left(preview, preview_bytes);
		WHILE octet_length(preview) > preview_bytes LOOP
			preview := left(preview, length(preview) - 1);
		END LOOP;
	END IF;

	INSERT INTO agent.agent_tool_calls
		(invocation_id, org_id, workspace_id, agent_id, conversation_id, tool_name,
		 input_hash, status, exit_code, output_preview, files)
	VALUES (r.id, r.org_id, r.workspace_id, r.agent_id, r.conversation_id, 'code_execution',
			r.code_sha256, r.state, r.exit_code, preview,
			coalesce((SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
								'file_id', f.id, 'name', f.name, 'status', f.status,
								'reason', f.reason, 'size', f.size, 'sha256', f.sha256))
							   ORDER BY f.name)
						FROM agent.files f WHERE f.invocation_id = r.id), '[]'::jsonb))
	ON CONFLICT (invocation_id) DO NOTHING;

	INSERT INTO agent.tool_invocations
		(invocation_id, org_id, workspace_id, agent_id, conversation_id, tool_name,
		 language, status, exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes,
		 credits_charged, timed_out, oom_killed, output_truncated, started_at, finished_at)
	VALUES (r.id, r.org_id, r.workspace_id, r.agent_id, r.conversation_id, 'code_execution',
			r.language, r.state, r.exit_code, r.signal,
			CASE WHEN r.started_at IS NOT NULL
				 THEN (extract(epoch FROM r.finished_at - r.started_at) * 1000)::bigint END,
			r.cpu_ms, r.peak_memory_bytes, r.credits_charged,
			coalesce(r.timed_out, false), coalesce(r.oom_killed, false),
			coalesce(r.output_truncated, false), r.started_at, r.finished_at)
	ON CONFLICT (invocation_id) DO NOTHING;
END
$$;

-- Refund what an invocation was charged, with its audit event.
CREATE FUNCTION agent._refund_and_audit(r agent.invocations, reason text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	amount bigint;
BEGIN
	SELECT -l.amount INTO amount FROM agent.credit_ledger l
	 WHERE l.invocation_id = r.id AND l.kind = 'charge';
	IF agent._refund(r.id, reason) THEN
		PERFORM agent._audit(r.org_id, r.workspace_id, 'credits.refunded', r.id, 'supervisor',
							 jsonb_build_object('amount', amount, 'reason', reason));
	END IF;
END
$$;

-- Lock what ending an invocation writes, without waiting: the invocation,
-- its org's audit head and usage row, its conversation and session.
-- Raises lock_not_available (55P03) when any is held elsewhere; returns
-- the invocation, or NULL when it does not exist.
CREATE FUNCTION agent._lock_for_finish(invocation uuid) RETURNS agent.invocations
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE NOWAIT;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF r.state NOT IN ('provisioning', 'running') THEN
		RETURN r;
	END IF;
	PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = r.org_id FOR UPDATE NOWAIT;
	PERFORM 1 FROM agent.org_usage u WHERE u.org_id = r.org_id FOR NO KEY UPDATE NOWAIT;
	IF NOT FOUND THEN		-- made with the org; only an old row lacks it
		INSERT INTO agent.org_usage (org_id) VALUES (r.org_id) ON CONFLICT (org_id) DO NOTHING;
	END IF;
	IF r.conversation_id IS NOT NULL THEN
		PERFORM 1 FROM agent.conversations c WHERE c.id = r.conversation_id FOR KEY SHARE NOWAIT;
	END IF;
	IF r.session_id IS NOT NULL THEN
		PERFORM 1 FROM agent.sessions s WHERE s.id = r.session_id FOR NO KEY UPDATE NOWAIT;
	END IF;
	RETURN r;
END
$$;

-- Apply a staged result: the invocation's final state by the billing rule,
-- its verdict fields, the files it returned, refund or not, tool call,
-- analytics row, audit event, the session's bookkeeping, the org's stored
-- bytes, and the final notification.  Returns the final state, or NULL
-- when nothing is staged.  Raises lock_not_available when a lock is held
-- elsewhere (nothing is written; the result stays staged).
-- A run of the org ended: its slot (and its conversation) is free, so wake
-- the runners if the org has approved work waiting, which its limits may
-- have held back.  (Runners claim at a wake-up, not after each of their
-- own finishes: src/runner/loop.c.)
CREATE FUNCTION agent._wake_for_org(org uuid) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM agent.invocations j WHERE j.org_id = org AND j.state = 'approved') THEN
		PERFORM agent._wake_supervisor();
	END IF;
END
$$;

CREATE FUNCTION agent._apply_result(invocation uuid) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	res		agent.run_results;
	r		agent.invocations;
BEGIN
	SELECT * INTO res FROM agent.run_results x WHERE x.invocation_id = invocation FOR UPDATE NOWAIT;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	r := agent._lock_for_finish(invocation);
	IF r.id IS NULL OR r.state NOT IN ('provisioning', 'running') THEN
		-- Already resolved (or gone): the staged result is moot.
		DELETE FROM agent.run_result_files x WHERE x.invocation_id = invocation;
		DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
		RETURN r.state;
	END IF;
	RETURN agent._apply_run_result(r, res, true);
END
$$;

-- Apply a result to its invocation r, in flight and locked by
-- agent._lock_for_finish(): the body of agent._apply_result(), also called
-- by a runner's finish with its result before it is staged
-- (agent.runner_finish: staged, false, is applied at once or staged
-- then).  Returns the final state.
CREATE FUNCTION agent._apply_run_result(r agent.invocations, res agent.run_results,
										staged boolean)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	invocation uuid := r.id;
	v		jsonb;
	o		record;
	f		agent.run_result_files;
	out_bytes bigint;
	v_started boolean;
BEGIN
	BEGIN
		v := res.verdict::jsonb;
	EXCEPTION WHEN others THEN
		v := NULL;
	END;
	SELECT * INTO o FROM agent._run_outcome(v, res.error, r.cancel_requested_at IS NOT NULL,
											r.cancel_requested_by);
	IF o.state = 'cancelled' AND r.cancel_reason IS NOT NULL THEN
		o.reason := o.reason || ': ' || r.cancel_reason;
	END IF;

	-- The jail ran but the row was never marked running (a run that ends
	-- within its runner's start report delay is reported by its finish;
	-- or that step was skipped): it did start, wall_ms before it ended, as
	-- its verdict says (never before its claim), with its audit event; in
	-- the same UPDATE as its end (provisioning -> its end: src/guards.c).
	v_started := r.state = 'provisioning' AND o.state NOT IN ('provision_failed', 'killed', 'cancelled');
	UPDATE agent.invocations i
	   SET state = o.state,
		   state_reason = o.reason,
		   started_at = CASE WHEN v_started
							 THEN greatest(i.provisioned_at,
										   now() - make_interval(secs => least(greatest(
											   coalesce((v ->> 'wall_ms')::numeric, 0), 0), 1e9) / 1000))
							 ELSE i.started_at END,
		   exit_code = (v ->> 'exit_code')::integer,
		   signal = (v ->> 'signal')::integer,
		   timed_out = coalesce((v ->> 'timed_out')::boolean, false),
		   oom_killed = coalesce((v ->> 'oom_killed')::boolean, false),
		   output_truncated = coalesce((v ->> 'output_truncated')::boolean, false) OR res.truncated,
		   cpu_ms = (v ->> 'cpu_ms')::bigint,
		   peak_memory_bytes = (v ->> 'peak_memory_bytes')::bigint,
		   warm = (v ->> 'warm')::boolean,
		   warm_cpu_ms = (v ->> 'warm_cpu_ms')::bigint,
		   warm_memory_bytes = (v ->> 'warm_memory_bytes')::bigint,
		   stdout_bytes = (v ->> 'stdout_bytes')::bigint,
		   stderr_bytes = (v ->> 'stderr_bytes')::bigint,
		   finished_at = now()
	 WHERE i.id = invocation
	RETURNING * INTO r;
	IF v_started THEN
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.started', r.id,
							 'supervisor', jsonb_build_object('language', r.language,
															  'reported_with_finish', true));
	END IF;

	-- The files it returned (a run of ours that failed returns none).
	IF o.charged THEN
		FOR f IN SELECT * FROM agent.run_result_files x WHERE x.invocation_id = invocation ORDER BY x.seq LOOP
			PERFORM agent._save_produced_file(r, f.name, f.status, f.reason, f.content);
		END LOOP;
	END IF;

	IF NOT o.charged THEN
		PERFORM agent._refund_and_audit(r, o.reason);
		SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
	END IF;
	IF o.state = 'provision_failed' THEN
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
							 'supervisor',
							 jsonb_build_object('reason', o.reason, 'jail_status', res.jail_status,
												'spawned', res.spawned, 'verdict', v));
	ELSE
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.finished', r.id,
							 'supervisor',
							 jsonb_build_object('state', o.state, 'exit_code', r.exit_code,
												'signal', r.signal, 'timed_out', r.timed_out,
												'oom_killed', r.oom_killed,
												'output_truncated', r.output_truncated,
												'credits_charged', r.credits_charged,
												'verdict', v));
	END IF;
	PERFORM agent._record_tool_call(r);

	-- The session: idle time counts from the end of its last run; what its
	-- workspace holds now; rebuilt next time if the run left it over its
	-- limits.
	IF r.session_id IS NOT NULL THEN
		PERFORM agent._session_after_run(r, res.workspace_bytes, res.workspace_entries,
										 res.workspace_reset);
	END IF;

	-- Output is counted against the org's storage; it is kept even past
	-- the quota (it is bounded per run by sandbox.output_limit).
	SELECT coalesce(sum(octet_length(x.data)), 0) INTO out_bytes
	  FROM agent.invocation_output x WHERE x.invocation_id = invocation;
	PERFORM agent._use_storage(r.org_id, out_bytes, 'output', true);

	PERFORM agent._notify_invocation(invocation, '{"done":true}');
	PERFORM agent._wake_for_org(r.org_id);
	DELETE FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	IF staged THEN
		DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
	END IF;
	RETURN o.state;
END
$$;

-- End an in-flight invocation as a failure of ours when its staged result
-- cannot be applied (a bug, a result the database refuses): provision_failed,
-- refunded, with the reason, its tool call and audit event.  Raises
-- lock_not_available like agent._apply_result().
CREATE FUNCTION agent._apply_failure(invocation uuid, reason text) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	r := agent._lock_for_finish(invocation);
	IF r.id IS NOT NULL AND r.state IN ('provisioning', 'running') THEN
		UPDATE agent.invocations i
		   SET state = 'provision_failed', state_reason = reason, finished_at = now()
		 WHERE i.id = invocation
		RETURNING * INTO r;
		PERFORM agent._refund_and_audit(r, reason);
		SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
							 'supervisor', jsonb_build_object('reason', reason));
		PERFORM agent._record_tool_call(r);
		PERFORM agent._notify_invocation(invocation, '{"done":true}');
		PERFORM agent._wake_for_org(r.org_id);
	END IF;
	DELETE FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
	RETURN r.state;
END
$$;

-- Apply one staged result now if its locks are free.  Returns the final
-- state, or NULL when it stays staged (a lock is held elsewhere; a later
-- agent._finish_pending() applies it).  A result that cannot be applied
-- for any other reason still ends the row, as a failure of ours with the
-- reason: no run stays in flight because its result was bad.
CREATE FUNCTION agent._try_apply(invocation uuid) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	err text;
BEGIN
	BEGIN
		RETURN agent._apply_result(invocation);
	EXCEPTION
		WHEN lock_not_available THEN
			UPDATE agent.run_results x
			   SET attempts = x.attempts + 1, last_error = 'a lock is held elsewhere'
			 WHERE x.invocation_id = invocation;
			RETURN NULL;
		WHEN others THEN
			GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
	END;
	BEGIN
		RETURN agent._apply_failure(invocation, 'could not record the result: ' || err);
	EXCEPTION
		WHEN lock_not_available THEN
			UPDATE agent.run_results x
			   SET attempts = x.attempts + 1, last_error = err
			 WHERE x.invocation_id = invocation;
			RETURN NULL;
	END;
END
$$;

-- Finish an invocation from the jail's verdict: stage the result (first
-- result wins; written without touching tenant rows, so this part never
-- waits) and apply it at once if it can be.  `error` (or a verdict with
-- setup_error, or no verdict at all) is a failure of ours: refunded.
-- Files the run produced were staged before with agent._store_produced_file().
-- Returns the final state, or NULL when the result stays staged.
CREATE FUNCTION agent._finish_invocation(invocation uuid, verdict text, jail_status integer,
										 error text, spawned boolean,
										 truncated boolean DEFAULT false,
										 workspace_bytes bigint DEFAULT NULL,
										 workspace_entries integer DEFAULT NULL,
										 workspace_reset text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	INSERT INTO agent.run_results (invocation_id, verdict, jail_status, error, spawned, truncated,
								   workspace_bytes, workspace_entries, workspace_reset)
	VALUES (invocation, verdict, jail_status, error, coalesce(spawned, false),
			coalesce(truncated, false), workspace_bytes, workspace_entries, workspace_reset)
	ON CONFLICT (invocation_id) DO NOTHING;
	RETURN agent._try_apply(invocation);
END
$$;

-- Apply results staged earlier, oldest first, at most max_rows (NULL: all).
-- Returns how many are still staged.
CREATE FUNCTION agent._finish_pending(max_rows integer DEFAULT NULL) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	x record;
BEGIN
	FOR x IN SELECT r.invocation_id FROM agent.run_results r ORDER BY r.recorded_at
			 LIMIT max_rows LOOP
		PERFORM agent._try_apply(x.invocation_id);
	END LOOP;
	RETURN (SELECT count(*)::integer FROM agent.run_results);
END
$$;

-- Resolve what a dead supervisor left in flight.  Called by the supervisor
-- at start, before it claims anything; its jails died with it
-- (PR_SET_PDEATHSIG).  A result it staged before dying is applied as it
-- is.  Every other row in flight ended because we restarted: a failure of
-- ours, refunded (the billing rule).  Rows whose locks are held elsewhere
-- stay staged and are applied by agent._finish_pending() later.  Returns
-- the number of rows it found in flight.  Only the supervisor's own rows
-- (no runner): what runner hosts hold ends with their lease
-- (agent.reap_expired_leases) or their next registration.
CREATE FUNCTION agent._supervisor_recover() RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n	integer;
BEGIN
	SELECT count(*)::integer INTO n FROM agent.invocations i
	 WHERE i.state IN ('provisioning', 'running') AND i.runner_id IS NULL;
	INSERT INTO agent.run_results (invocation_id, error, spawned)
	SELECT i.id,
		   CASE i.state WHEN 'provisioning' THEN 'the supervisor restarted before the sandbox started'
				ELSE 'the supervisor restarted while the run was in progress' END,
		   i.state = 'running'
	  FROM agent.invocations i
	 WHERE i.state IN ('provisioning', 'running') AND i.runner_id IS NULL
	ON CONFLICT (invocation_id) DO NOTHING;
	PERFORM agent._finish_pending(NULL);
	IF n > 0 THEN
		RAISE LOG 'resolved % invocation(s) left in flight', n;
	END IF;
	RETURN n;
END
$$;

-- ----------------------------------------------------------------------
-- API
-- ----------------------------------------------------------------------

-- Whether a row version was written by the calling transaction (or one of
-- its subtransactions), in C (src/guards.c).
CREATE FUNCTION agent._xid_is_current(x xid) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_xid_is_current'
	LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- The state of an invocation the caller's tenant may see (NULL otherwise),
-- for agent.wait().  An invocation this transaction changed (requested,
-- approved, cancelled) and that is not final cannot move before this
-- transaction commits, so waiting for it is refused (55000) rather than
-- left to time out.
CREATE FUNCTION agent._invocation_state(invocation uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_state	text;
	v_ours	boolean;
BEGIN
	SELECT i.state, agent._xid_is_current(i.xmin) INTO v_state, v_ours
	  FROM agent.invocations i
	 WHERE i.id = invocation
	   AND i.org_id = agent.current_org()
	   AND i.workspace_id = agent.current_workspace();
	IF v_ours AND NOT agent._state_is_terminal(v_state) THEN
		RAISE EXCEPTION 'cannot wait for invocation % in the transaction that changed it', invocation
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = pg_catalog.format('It is %s, and nothing can move it before this transaction commits.', v_state),
				  HINT = 'Commit first (the supervisor claims an approval when its transaction commits), then wait.';
	END IF;
	RETURN v_state;
END
$$;

-- Output of an invocation after a sequence number, in order.
CREATE FUNCTION agent.read_output(invocation uuid, after_seq integer DEFAULT 0)
	RETURNS TABLE (seq integer, stream text, data text, created_at timestamptz)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant();
	IF invocation IS NULL THEN
		RAISE EXCEPTION 'invocation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF agent._invocation_state(invocation) IS NULL THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	RETURN QUERY
		SELECT o.seq, o.stream, o.data, o.created_at
		  FROM agent.invocation_output o
		 WHERE o.invocation_id = invocation
		   AND o.seq > coalesce(after_seq, 0)
		   AND o.org_id = agent.current_org()
		   AND o.workspace_id = agent.current_workspace()
		 ORDER BY o.seq;
END
$$;
COMMENT ON FUNCTION agent.read_output(uuid, integer) IS
	'output chunks of an invocation with seq > after_seq, in order (replay after LISTEN)';

-- Cancel an invocation.  Before it runs it is cancelled at once, uncharged.
-- Once provisioned, the supervisor is asked to kill its sandbox; the run
-- ends as `cancelled` and stays charged (it was provisioned).
CREATE FUNCTION agent.cancel(invocation uuid, actor text, reason text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	PERFORM agent._require_tenant();
	IF invocation IS NULL OR actor IS NULL OR btrim(actor) = '' THEN
		RAISE EXCEPTION 'invocation and actor must not be null or empty'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(actor, 'actor');
	PERFORM agent._check_text(reason, 'reason', 'reason');
	-- FOR NO KEY UPDATE: held by a caller's open transaction, it must not
	-- block the FOR KEY SHARE of the supervisor's output inserts.
	SELECT * INTO r FROM agent.invocations i
	 WHERE i.id = invocation
	   AND i.org_id = agent.current_org()
	   AND i.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'invocation % does not exist', invocation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;

	IF r.state IN ('pending_approval', 'approved') THEN
		UPDATE agent.invocations i
		   SET state = 'cancelled',
			   state_reason = coalesce('cancelled by ' || actor || ': ' || reason, 'cancelled by ' || actor),
			   cancel_requested_at = now(), cancel_requested_by = actor,
			   finished_at = now()
		 WHERE i.id = r.id;
		-- The card says who withdrew it, and why.
		UPDATE agent.approval_requests a
		   SET status = 'cancelled', decided_by = actor, decided_at = now(),
			   decision_reason = coalesce(reason, 'invocation cancelled')
		 WHERE a.id = r.approval_id AND a.status = 'pending';
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.cancelled', r.id, actor,
							 jsonb_build_object('reason', reason, 'previous_state', r.state,
												'charged', false));
		PERFORM agent._notify_invocation(r.id, '{"done":true}');
		RETURN 'cancelled';
	ELSIF r.state IN ('provisioning', 'running') THEN
		IF r.cancel_requested_at IS NULL THEN
			UPDATE agent.invocations i
			   SET cancel_requested_at = now(), cancel_requested_by = actor,
				   cancel_reason = reason
			 WHERE i.id = r.id;
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.cancel_requested', r.id, actor,
								 jsonb_build_object('reason', reason, 'previous_state', r.state));
			PERFORM agent._wake_supervisor_cancel();
		END IF;
		RETURN 'cancelling';
	ELSE
		RAISE EXCEPTION 'invocation % has already finished', invocation
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('Its state is %s.', r.state);
	END IF;
END
$$;
COMMENT ON FUNCTION agent.cancel(uuid, text, text) IS
	'cancel a pending, approved or running invocation; returns cancelled or cancelling';

CREATE FUNCTION agent.wait(invocation uuid, timeout interval DEFAULT '30 seconds')
	RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_wait'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION agent.wait(uuid, interval) IS
	'block until the invocation reaches a final state or the timeout passes; returns its state';

-- The common path's last round trip: wait (as agent.wait()) and return
-- what the run produced with its tool call, in one statement.  timed_out
-- is true when the timeout passed before the run reached a final state
-- (the rest then describes it as it is so far).  Output is at most
-- sandbox.output_limit per stream (the supervisor keeps no more).
CREATE TYPE agent.run_result AS (
	invocation_id	uuid,
	state			text,
	timed_out		boolean,
	state_reason	text,
	exit_code		integer,
	stdout			text,
	stderr			text,
	output_truncated boolean,
	credits_charged integer,
	tool_call_id	uuid,
	output_preview	text,
	files			jsonb
);

CREATE FUNCTION agent.wait_result(invocation uuid, timeout interval DEFAULT '30 seconds')
	RETURNS agent.run_result
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r	agent.run_result;
BEGIN
	PERFORM agent._require_tenant(true);
	PERFORM agent.wait(invocation, timeout);
	SELECT i.id, i.state, NOT agent._state_is_terminal(i.state), i.state_reason, i.exit_code,
		   (SELECT string_agg(o.data, '' ORDER BY o.seq) FROM agent.invocation_output o
			 WHERE o.invocation_id = i.id AND o.stream = 'stdout'),
		   (SELECT string_agg(o.data, '' ORDER BY o.seq) FROM agent.invocation_output o
			 WHERE o.invocation_id = i.id AND o.stream = 'stderr'),
		   i.output_truncated, i.credits_charged, t.id, t.output_preview, t.files
	  INTO r
	  FROM agent.invocations i
	  LEFT JOIN agent.agent_tool_calls t ON t.invocation_id = i.id
	 WHERE i.id = invocation
	   AND i.org_id = agent.current_org() AND i.workspace_id = agent.current_workspace();
	RETURN r;
END
$$;
COMMENT ON FUNCTION agent.wait_result(uuid, interval) IS
	'wait for an invocation like agent.wait() and return its state, whether the wait timed out, its output and its tool call';

-- What the supervisor publishes in shared memory (src/supervisor.c): its
-- life, and what the local runner's slots run.  agent.worker_status()
-- (45_runners.sql) adds every runner of agent.runners.
CREATE FUNCTION agent._supervisor_status(
		OUT preloaded boolean, OUT running boolean, OUT pid integer,
		OUT started_at timestamptz, OUT slots_in_use integer,
		OUT max_concurrent_runs integer, OUT invocations uuid[],
		OUT work_dir text, OUT problem text,
		OUT warm_ready integer, OUT warm_memory_bytes bigint,
		OUT warm_memory_limit bigint, OUT warm_problem text)
	AS 'MODULE_PATHNAME', 'sandbox_worker_status'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION agent._supervisor_status() IS
	'the supervisor: whether it runs, its pid, the local runner''s slots in use and their invocations, its work directory, and why it claims nothing (problem); the local launcher''s warm interpreters: how many wait, the memory they hold, its bound, why the last did not start';

REVOKE ALL ON FUNCTION agent._claim_invocations(integer, uuid), agent._try_audit_head(uuid),
	agent._mark_running(uuid, integer),
	agent._append_output(uuid, text, text),
	agent._finish_invocation(uuid, text, integer, text, boolean, boolean, bigint, integer, text),
	agent._finish_pending(integer), agent._try_apply(uuid), agent._apply_result(uuid),
	agent._apply_run_result(agent.invocations, agent.run_results, boolean),
	agent._apply_failure(uuid, text), agent._lock_for_finish(uuid),
	agent._prepare_invocation(uuid, boolean), agent._skill_files(uuid), agent._produced_caps(),
	agent._cancel_requested(uuid[]), agent._refuse_unfunded(agent.invocations),
	agent._supervisor_recover(), agent._record_tool_call(agent.invocations),
	agent._refund_and_audit(agent.invocations, text),
	agent._supervisor_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.read_output(uuid, integer), agent.cancel(uuid, text, text),
	agent.wait(uuid, interval), agent.output_channel(uuid), agent._invocation_state(uuid),
	agent._state_is_terminal(text), agent.wait_result(uuid, interval) TO agent_backend;
-- One server log line per invocation that ends, whoever ended it (the
-- supervisor, a runner host's step, recovery, the lease reaper, a decision,
-- an expiry, a cancel): written when the ending transaction commits.
--
--   LOG:  sandbox_ext invocation 6f1c… ended: org 2b7e…, state succeeded, 412 ms, 2 credits charged
--
-- "ms" is the run's wall time (started to finished; 0 for one that never
-- started), "credits charged" the net charge (0 after a refund).  A
-- deferred constraint trigger runs at commit, after every statement of the
-- transaction, so it reads the row as committed (a refund in the same
-- transaction included).  An ending that rolls back logs nothing.
--
-- A constraint trigger cannot be CREATE OR REPLACE'd (so it is not
-- replayed): the upgrade's hand-written tail
-- (sql/upgrade/0.1.0--0.2.0.post.sql) creates it for an upgraded database.

--
-- The trigger runs at commit as the session's role (agent_runner on a runner
-- host, which may not read the table): a security definer.  Nothing in it
-- may fail the commit of the run's end, so an error becomes a warning.
CREATE FUNCTION agent._log_invocation_end() RETURNS trigger
	LANGUAGE plpgsql SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r	record;
BEGIN
	BEGIN
		SELECT i.id, i.org_id, i.state, i.credits_charged,
			   coalesce((extract(epoch FROM i.finished_at - i.started_at) * 1000)::bigint, 0) AS ms
		  INTO r FROM agent.invocations i WHERE i.id = NEW.id;
		RAISE LOG 'sandbox_ext invocation % ended: org %, state %, % ms, % credits charged',
			r.id, r.org_id, r.state, r.ms, r.credits_charged;
	EXCEPTION WHEN OTHERS THEN
		RAISE WARNING 'could not log the end of invocation %: %', NEW.id, SQLERRM;
	END;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION agent._log_invocation_end() IS
	'log one line when an invocation reaches a terminal state (deferred to commit)';

CREATE CONSTRAINT TRIGGER invocations_log_end
	AFTER UPDATE OF state ON agent.invocations
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND agent._state_is_terminal(NEW.state))
	EXECUTE FUNCTION agent._log_invocation_end();
-- Runner hosts: the sandbox-runner processes that run the sandboxes (the
-- local one the supervisor starts, and those on other machines), their
-- leases, and the one role they log in with.  docs/runners.md, "Database
-- contract", says what holds; this header is the contract's text.
--
-- The functions a runner calls (EXECUTE granted to agent_runner only; all
-- SECURITY DEFINER, SET search_path = pg_catalog, agent, pg_temp):
--
--   agent.runner_register(name text, host text, version text, slots integer,
--       OUT runner_id uuid, OUT incarnation uuid, OUT lease_seconds integer,
--       OUT heartbeat_seconds integer, OUT state text, OUT ended integer)
--   agent.runner_heartbeat(runner uuid, incarnation uuid, in_use integer,
--       held uuid[] DEFAULT NULL, slots integer DEFAULT NULL,
--       OUT state text, OUT renewed integer, OUT lost uuid[],
--       OUT lease_seconds integer, OUT heartbeat_seconds integer)
--   agent.runner_claim(runner uuid, incarnation uuid, max_rows integer)
--       RETURNS TABLE (id uuid, lease_token uuid, language text, code text,
--           wall_time_s integer, memory_mb integer, conversation_id uuid,
--           session_id uuid, fresh_session boolean, has_skills boolean,
--           max_files integer, max_bytes bigint, max_file_bytes bigint,
--           output_limit_bytes bigint, has_egress boolean)
--   agent.runner_prepare(runner uuid, token uuid, invocation uuid,
--       workspace_is_new boolean)
--       RETURNS TABLE (kind text, name text, content bytea, skill_id uuid)
--   agent.runner_skill_files(runner uuid, token uuid, invocation uuid, skill uuid)
--       RETURNS TABLE (path text, content bytea, executable boolean)
--   agent.runner_mark_running(runner uuid, token uuid, invocation uuid,
--       pid integer) RETURNS boolean
--   agent.runner_append_output(runner uuid, token uuid, invocation uuid,
--       stream text, data text) RETURNS integer
--   agent.runner_store_produced_file(runner uuid, token uuid, invocation uuid,
--       name text, status text, reason text, content bytea) RETURNS integer
--   agent.runner_store_skipped_files(runner uuid, token uuid, invocation uuid,
--       names text[], statuses text[], reasons text[]) RETURNS integer
--   agent.runner_finish(runner uuid, token uuid, invocation uuid,
--       verdict text, jail_status integer, error text, spawned boolean,
--       truncated boolean DEFAULT false, workspace_bytes bigint DEFAULT NULL,
--       workspace_entries integer DEFAULT NULL, workspace_reset text DEFAULT NULL)
--       RETURNS text
--   agent.runner_cancel_requested(runner uuid, invocations uuid[]) RETURNS SETOF uuid
--   agent.runner_live_sessions(runner uuid) RETURNS SETOF uuid
--   agent.runner_skills_in_use(runner uuid) RETURNS SETOF uuid
--
-- The operator's (the owner's; granted to no role):
--
--   agent.reap_expired_leases(as_of timestamptz DEFAULT now()) RETURNS integer
--   agent.drain_runner(name text, resume boolean DEFAULT false) RETURNS text
--   agent.remove_runner(name text) RETURNS integer
--   agent.set_runner_slots(name text, max_slots integer) RETURNS integer
--   agent.runner_status (a view; agent_auditor reads it)
--
-- Identity.  A runner acts only for the agent.runners row registered by its
-- own role: agent._runner_role(), the login role its session connected as
-- (the steps are SECURITY DEFINER, so current_user inside them is the
-- owner).  A session that SET ROLE to another role (agent_runner, another
-- runner's role) is refused, as is a role that cannot log in; the local
-- runner's superuser session acting as sandbox_runner_local is the one
-- exception.  Any other runner id, existing or not, is refused alike: 42501.
--
-- Leases.  A claimed invocation carries runner_id, lease_token and
-- lease_expires_at (the deadline its claim set).  The runner renews all its
-- leases at once with its heartbeat, which moves agent.runners.last_heartbeat
-- only: the deadline of a lease is
--     greatest(invocations.lease_expires_at, runners.last_heartbeat + lease)
-- but never later than the run's wall time from its claim, nor than a
-- cancel of it, each plus runner_grace_seconds (agent._lease_deadline): a
-- runner that heartbeats on past either loses the run all the same.
-- Renewal never writes the invocation rows: a backend may hold its own
-- invocation's row lock in an open transaction (agent.cancel), and a
-- renewal that waited for it, or skipped it, would let a tenant stall a
-- runner or turn a charged run into a refunded one.
-- A lease is held while the invocation is in flight with that runner and
-- token, the runner is not removed, the deadline has not passed, and no
-- result is staged for it.  Every step that names an invocation checks its
-- lease before it writes and again after (a new snapshot, so a reaper's
-- commit in between is seen) and raises 55000, rolling its writes back,
-- when the lease is not held.  The finish stages the result under the
-- primary key of agent.run_results, which the reaper's result of a lost
-- lease uses too: whichever is staged first is the result, applied once by
-- the one billing rule.  An expired lease stays expired: the heartbeat of a
-- runner whose leases have expired ends them first, exactly as the reaper
-- would.  Nothing here waits for a lock a tenant can take.

-- ----------------------------------------------------------------------
-- Roles
-- ----------------------------------------------------------------------

-- Roles are cluster-wide (10_tenancy.sql): created when missing, never
-- dropped.  Each runner host logs in as a role of its own, member of
-- agent_runner; the local runner logs in as the server's OS user and SETs
-- ROLE sandbox_runner_local.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'agent_runner') THEN
		CREATE ROLE agent_runner NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'sandbox_runner_local') THEN
		CREATE ROLE sandbox_runner_local NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
					WHERE m.roleid = 'agent_runner'::regrole
					  AND m.member = 'sandbox_runner_local'::regrole) THEN
		GRANT agent_runner TO sandbox_runner_local;
	END IF;
END
$roles$;
GRANT USAGE ON SCHEMA agent TO agent_runner;

INSERT INTO agent.settings (key, value, description) VALUES
	('runner_lease_seconds', '30',
	 'seconds a runner host''s leases last without a heartbeat; it heartbeats every third of it, and ends its own sandboxes when it could not renew for this long'),
	('runner_grace_seconds', '60',
	 'seconds a runner host may hold a run beyond its wall time (from the claim) or beyond a cancel of it, to start it and return its result; then its lease ends, however it heartbeats'),
	('runner_max_slots', '8',
	 'runs a runner host may hold at once unless an operator set its own cap (agent.set_runner_slots); what it declares counts only up to this (not for the local runner, whose slots are sandbox.max_concurrent_runs)');

-- ----------------------------------------------------------------------
-- Runners
-- ----------------------------------------------------------------------

CREATE TABLE agent.runners (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	name			text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
	-- the role it acts as (agent._runner_role()); one runner per role
	login_role		name NOT NULL UNIQUE,
	host			text,
	version			text,
	slots			integer NOT NULL CHECK (slots BETWEEN 0 AND 1024),
	-- active: claims work; draining: finishes what it holds, claims nothing;
	-- removed: out of the fleet (agent.remove_runner), cannot register
	state			text NOT NULL DEFAULT 'active'
						CHECK (state IN ('active', 'draining', 'removed')),
	-- a new one at every registration: the process that holds it
	incarnation		uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	registered_at	timestamptz NOT NULL DEFAULT now(),
	last_heartbeat	timestamptz NOT NULL DEFAULT now(),
	in_use			integer NOT NULL DEFAULT 0 CHECK (in_use >= 0),	-- as it reported
	-- set by the reaper when its heartbeat is older than a lease; cleared
	-- by its next heartbeat or registration
	gone_at			timestamptz,
	removed_at		timestamptz,
	-- the operator's cap on slots (agent.set_runner_slots); NULL: the
	-- setting runner_max_slots.  Registration and heartbeat never touch it.
	max_slots		integer CHECK (max_slots BETWEEN 0 AND 1024)
);
COMMENT ON TABLE agent.runners IS
	'runner hosts (sandbox-runner processes, local and remote) and their heartbeat; see docs/runners.md';

ALTER TABLE agent.runners ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.runners FOR SELECT TO agent_auditor USING (true);

-- (agent.invocations.runner_id is declared with the table; its key here)
ALTER TABLE agent.invocations ADD FOREIGN KEY (runner_id) REFERENCES agent.runners (id);
-- What each runner holds: its heartbeat, the reaper, the claim's slot count.
CREATE INDEX invocations_runner_in_flight_idx ON agent.invocations (runner_id)
	WHERE state IN ('provisioning', 'running');

COMMENT ON COLUMN agent.invocations.runner_id IS
	'the runner host that holds it (NULL: the in-database supervisor)';
COMMENT ON COLUMN agent.invocations.lease_token IS
	'the lease of that runner: every runner step for this invocation names it';
COMMENT ON COLUMN agent.invocations.lease_expires_at IS
	'the deadline its claim gave the lease; renewed through the runner''s heartbeat, never past the run''s wall time or a cancel (agent._lease_deadline)';

-- ----------------------------------------------------------------------
-- Internals (owner only)
-- ----------------------------------------------------------------------

-- The role the calling runner acts as (C, src/guards.c: the outer user,
-- which SECURITY DEFINER does not change), or 42501 when that is not a
-- role a runner may act as: agent_runner itself, a role that cannot log
-- in, or any role the session SET ROLE to (but sandbox_runner_local from
-- a superuser session, the local runner's way).
CREATE FUNCTION agent._runner_role() RETURNS name
	AS 'MODULE_PATHNAME', 'sandbox_runner_role'
	LANGUAGE C STABLE STRICT;

-- The role outside a SECURITY DEFINER function (C: the outer user), without
-- the runner's check: for functions that decide what their caller sees.
CREATE FUNCTION agent._outer_role() RETURNS name
	AS 'MODULE_PATHNAME', 'sandbox_outer_role'
	LANGUAGE C STABLE STRICT;

-- How long a lease lasts without a heartbeat.
CREATE FUNCTION agent._runner_lease() RETURNS interval
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN pg_catalog.make_interval(secs => agent._setting('runner_lease_seconds')::integer);
END
$$;

-- How long past its wall time, or past a cancel, a runner may hold a run.
CREATE FUNCTION agent._runner_grace() RETURNS interval
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN pg_catalog.make_interval(secs => agent._setting('runner_grace_seconds')::integer);
END
$$;

-- When the lease of an invocation ends unless renewed, and what ends it
-- there (cause), whichever comes first:
--   heartbeat  the deadline of its claim or the runner's last heartbeat plus
--              a lease, whichever is later (the runner stopped renewing);
--   wall_time  the run's wall time (wall_time_s, the server's default
--              filled in) from its claim, plus the grace;
--   cancel     the grace after a cancel of it was asked for.
-- However often a runner heartbeats, it holds a run no longer than the run
-- may last, nor long after a cancel: a compromised runner cannot keep a
-- tenant's run (and with it a place in the org's limit) for ever.
CREATE FUNCTION agent._lease_deadline(lease_expires_at timestamptz, last_heartbeat timestamptz,
									  lease interval, provisioned_at timestamptz,
									  wall_time_s integer, cancel_requested_at timestamptz,
									  grace interval,
									  OUT deadline timestamptz, OUT cause text)
	LANGUAGE plpgsql STABLE PARALLEL SAFE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_wall		timestamptz := provisioned_at + pg_catalog.make_interval(secs => wall_time_s) + grace;
	v_cancel	timestamptz := cancel_requested_at + grace;
BEGIN
	deadline := greatest(lease_expires_at, last_heartbeat + lease);
	cause := 'heartbeat';
	IF v_wall < deadline THEN
		deadline := v_wall;
		cause := 'wall_time';
	END IF;
	IF v_cancel < deadline THEN
		deadline := v_cancel;
		cause := 'cancel';
	END IF;
END
$$;

-- The calling role's runner row, or 42501 (the same error for an id that
-- does not exist: a runner learns nothing of the others).
CREATE FUNCTION agent._runner_self(runner uuid) RETURNS agent.runners
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners;
	v_role	name := agent._runner_role();
BEGIN
	SELECT * INTO rn FROM agent.runners x WHERE x.id = runner;
	IF NOT FOUND OR rn.login_role <> v_role THEN
		RAISE EXCEPTION 'permission denied for runner %', coalesce(runner::text, 'NULL')
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = pg_catalog.format('Role %s acts only for the runner it registered.', v_role),
				  HINT = 'Use the runner id that agent.runner_register() returned to this role.';
	END IF;
	RETURN rn;
END
$$;

-- The same, for a call that names the runner's incarnation: a process of
-- this runner that registered before the current one is refused (55000).
CREATE FUNCTION agent._runner_current(runner uuid, incarnation uuid) RETURNS agent.runners
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn agent.runners := agent._runner_self(runner);
BEGIN
	IF incarnation IS DISTINCT FROM rn.incarnation THEN
		RAISE EXCEPTION 'runner "%" has registered again since this process did', rn.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'A newer process of this runner registered; the leases of this one have ended.',
				  HINT = 'Stop this process''s sandboxes and register again.';
	END IF;
	RETURN rn;
END
$$;

-- The invocation if `runner`, the calling role's (agent._runner_self),
-- holds its lease under `token`; otherwise 42501 when the runner is not the
-- caller's, else 55000 (also for an invocation that does not exist or is
-- another runner's).  With staged_ok, the caller has just staged its own
-- result: the lease must still name it and the run still be in flight (the
-- deadline no longer matters: the result was staged under the lease).
-- Every invocation step starts with it: the runner's identity and its
-- lease in one lookup.
CREATE FUNCTION agent._runner_lease_of(runner uuid, token uuid, invocation uuid,
									   staged_ok boolean DEFAULT false)
	RETURNS agent.invocations
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	v_lease	interval := agent._runner_lease();
	v_grace	interval := agent._runner_grace();
	v_wall	integer := (agent._run_limits()).default_wall_time_s;
BEGIN
	SELECT i.* INTO r
	  FROM agent.invocations i
	  JOIN agent.runners rn ON rn.id = i.runner_id
	 WHERE i.id = invocation
	   AND i.runner_id = runner
	   AND rn.login_role = agent._runner_role()
	   AND i.lease_token = token
	   AND i.state IN ('provisioning', 'running')
	   AND rn.state <> 'removed'
	   AND (staged_ok
			OR ((agent._lease_deadline(i.lease_expires_at, rn.last_heartbeat, v_lease, i.provisioned_at,
									   coalesce(i.wall_time_s, v_wall), i.cancel_requested_at,
									   v_grace)).deadline > pg_catalog.clock_timestamp()
				AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)));
	IF NOT FOUND THEN
		PERFORM agent._runner_self(runner);		-- not the caller's runner: 42501
		RAISE EXCEPTION 'lease of invocation % is not held by this runner', coalesce(invocation::text, 'NULL')
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'The lease expired, was taken over, or was never this runner''s; the invocation has ended or will end without this runner.',
				  HINT = 'Kill the sandbox and drop its result.';
	END IF;
	RETURN r;
END
$$;

-- End an invocation a runner held, as a failure of ours (refunded, by the
-- billing rule), unless a result is staged for it already: then that result
-- is applied as it is (a runner's own result staged behind a lock).
-- Returns true when this call's result ended it (or is staged to, behind a
-- lock).  Waits only for another of our own stagings of the same row.
CREATE FUNCTION agent._end_leased(invocation uuid, reason text, spawned boolean)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v uuid;
BEGIN
	INSERT INTO agent.run_results (invocation_id, error, spawned)
	VALUES (invocation, reason, coalesce(spawned, false))
	ON CONFLICT (invocation_id) DO NOTHING
	RETURNING invocation_id INTO v;
	IF v IS NULL THEN
		PERFORM agent._try_apply(invocation);
		RETURN false;
	END IF;
	-- A finish may have ended it while we waited for its staging.
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
		RETURN false;
	END IF;
	PERFORM agent._try_apply(invocation);
	RETURN true;
END
$$;

-- End every lease (of one runner, or of all: NULL) whose deadline passed
-- before as_of, with the reason of what ended it (agent._lease_deadline's
-- cause).  Returns how many this call ended.
CREATE FUNCTION agent._reap_leases(runner uuid, as_of timestamptz) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	x		record;
	n		integer := 0;
	v_lease interval := agent._runner_lease();
	v_grace	interval := agent._runner_grace();
	v_wall	integer := (agent._run_limits()).default_wall_time_s;
BEGIN
	FOR x IN
		SELECT i.id, i.state, rn.name, d.cause
		  FROM agent.invocations i
		  JOIN agent.runners rn ON rn.id = i.runner_id
		 CROSS JOIN LATERAL agent._lease_deadline(i.lease_expires_at, rn.last_heartbeat, v_lease,
												  i.provisioned_at, coalesce(i.wall_time_s, v_wall),
												  i.cancel_requested_at, v_grace) d
		 WHERE i.state IN ('provisioning', 'running')
		   AND (runner IS NULL OR i.runner_id = runner)
		   AND d.deadline < as_of
		 ORDER BY i.provisioned_at, i.id
	LOOP
		IF agent._end_leased(x.id,
							 pg_catalog.format(CASE x.cause
												   WHEN 'wall_time' THEN 'the runner "%s" held it past its wall time'
												   WHEN 'cancel' THEN 'the runner "%s" did not stop it after it was cancelled'
												   ELSE 'the runner "%s" stopped renewing its lease' END,
											   x.name),
							 x.state = 'running') THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;

-- The most runs a runner may hold at once: the slots it declared, within
-- the operator's cap (agent.runners.max_slots, agent.set_runner_slots), or
-- else the setting runner_max_slots.  A runner declares its slots itself
-- (at registration, in a heartbeat): a compromised host declaring 1024
-- would claim the whole backlog, every tenant's code and files.  The local
-- runner's slots are the operator's own (sandbox.max_concurrent_runs,
-- which only a superuser sets): no default cap.
CREATE FUNCTION agent._runner_slots(rn agent.runners) RETURNS integer
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN least(rn.slots,
				 coalesce(rn.max_slots,
						  CASE WHEN rn.login_role = 'sandbox_runner_local' THEN rn.slots
							   ELSE agent._setting('runner_max_slots')::integer END));
END
$$;

-- Free slots of a runner: what it may still claim (agent._runner_slots).
-- A run whose result is staged no longer takes a slot on the runner.
-- (PL/pgSQL, as every helper on a run's path: its plan is kept for the
-- session, where a SQL function's body is planned again on every call.)
CREATE FUNCTION agent._runner_free_slots(rn agent.runners) RETURNS integer
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN agent._runner_slots(rn) - (SELECT count(*)::integer FROM agent.invocations i
						WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
						  AND NOT EXISTS (SELECT 1 FROM agent.run_results x
										   WHERE x.invocation_id = i.id));
END
$$;

-- Is the conversation's active session on a live runner other than
-- `runner` (NULL: the in-database supervisor)?  Then its runs are that
-- runner's (affinity).  A runner is live while it is active and has
-- heartbeated within a lease; a draining, removed or silent runner's
-- sessions are rebuilt by whoever claims the conversation next.
-- (PL/pgSQL: agent.sessions is created after this file, 50_sessions.sql.)
CREATE FUNCTION agent._session_elsewhere(conversation uuid, runner uuid) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN EXISTS (SELECT 1 FROM agent.sessions s
					 JOIN agent.runners rn ON rn.id = s.runner_id
					WHERE s.conversation_id = conversation AND s.state = 'active'
					  AND s.runner_id IS DISTINCT FROM runner
					  AND rn.state = 'active'
					  AND rn.last_heartbeat >= now() - agent._runner_lease());
END
$$;

-- The server's limits of a run, for a runner (C, src/guards.c: the GUCs
-- sandbox.default_wall_time, sandbox.default_memory, sandbox.output_limit
-- and sandbox.workspace_entries, read without the cost of pg_settings).
CREATE FUNCTION agent._run_limits(OUT default_wall_time_s integer, OUT default_memory_mb integer,
								  OUT output_limit_bytes bigint, OUT workspace_entries integer)
	AS 'MODULE_PATHNAME', 'sandbox_run_limits'
	LANGUAGE C STABLE STRICT;

-- The limits a request and a finish check against (C, src/guards.c: the
-- GUCs sandbox.max_wall_time, sandbox.max_memory and sandbox.preview_size).
CREATE FUNCTION agent._request_limits(OUT max_wall_time_s integer, OUT max_memory_mb integer,
									  OUT preview_bytes integer)
	AS 'MODULE_PATHNAME', 'sandbox_request_limits'
	LANGUAGE C STABLE STRICT;

-- Wait for the other claimers (runners woken by the same approval) to
-- commit, so that this claim sees what they took: the transaction's
-- advisory lock of the claim, tried every millisecond for at most 20 (a
-- poll, not a lock wait, so that no claimer ever queues behind another).
-- A claimer that holds it longer (a runner host that left its claim's
-- transaction open) costs the others that much per claim, never a stall;
-- past it the claim goes on without its turn, as every claim is safe
-- against concurrent ones anyway (row locks, SKIP LOCKED).  Returns
-- whether it got the turn.
CREATE FUNCTION agent._claim_turn() RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	FOR i IN 1..20 LOOP
		IF pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('agent.runner_claim'), 0) THEN
			RETURN true;
		END IF;
		PERFORM pg_catalog.pg_sleep(0.001);
	END LOOP;
	RETURN false;
END
$$;

-- Refuse a text argument longer than `max_bytes`: 22001, with the sizes in
-- the detail, as agent._check_text (docs/reference.md, "Conventions").
CREATE FUNCTION agent._runner_arg_fits(value text, argument text, max_bytes integer)
	RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF octet_length(value) > max_bytes THEN
		RAISE EXCEPTION '% is too long', argument
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = pg_catalog.format('It is %s bytes; the limit is %s.',
											 pg_catalog.octet_length(value), max_bytes);
	END IF;
	RETURN true;
END
$$;

-- ----------------------------------------------------------------------
-- The runner's steps (agent_runner)
-- ----------------------------------------------------------------------

-- Register (or re-join) the runner of the calling role.  A new incarnation
-- every time: whatever the runner's previous process still held in flight
-- ends now, as a failure of ours (refunded), with its audit event.
CREATE FUNCTION agent.runner_register(name text, host text, version text, slots integer,
									  OUT runner_id uuid, OUT incarnation uuid,
									  OUT lease_seconds integer, OUT heartbeat_seconds integer,
									  OUT state text, OUT ended integer)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_role	name := agent._runner_role();
	rn		agent.runners;
	w		record;
BEGIN
	-- (1 to 64 ASCII characters: text_limits()'s runner_name, which
	-- drain_runner and remove_runner check)
	IF runner_register.name IS NULL OR runner_register.name !~ '^[a-z0-9][a-z0-9_.-]{0,63}$' THEN
		RAISE EXCEPTION 'invalid runner name "%"', coalesce(agent._shown(runner_register.name), 'NULL')
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 64 characters: lower-case letters, digits, "_", "." and "-", starting with a letter or digit.';
	END IF;
	IF runner_register.slots IS NULL OR runner_register.slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF runner_register.host ~ '[[:cntrl:]]' OR runner_register.version ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION 'host and version must not contain control characters'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._runner_arg_fits(runner_register.host, 'host', 255);
	PERFORM agent._runner_arg_fits(runner_register.version, 'version', 255);
	IF EXISTS (SELECT 1 FROM agent.runners x
				WHERE x.name = runner_register.name AND x.login_role <> v_role) THEN
		RAISE EXCEPTION 'runner name "%" is registered by another role', runner_register.name
			USING ERRCODE = 'duplicate_object',
				  HINT = 'Give each runner host a name of its own.';
	END IF;

	SELECT * INTO rn FROM agent.runners x WHERE x.login_role = v_role FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO agent.runners AS x (name, login_role, host, version, slots)
		VALUES (runner_register.name, v_role, runner_register.host, runner_register.version,
				runner_register.slots)
		RETURNING * INTO rn;
		ended := 0;
	ELSE
		IF rn.state = 'removed' THEN
			RAISE EXCEPTION 'runner "%" has been removed', rn.name
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  HINT = 'An operator may admit it again with agent.drain_runner(name, resume => true).';
		END IF;
		-- The previous process's work: its sandboxes died with it (or it
		-- is another process of the same role, which now loses them).
		ended := 0;
		FOR w IN SELECT i.id, i.state FROM agent.invocations i
				  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
				  ORDER BY i.provisioned_at, i.id LOOP
			IF agent._end_leased(w.id, pg_catalog.format('the runner "%s" restarted', rn.name),
								 w.state = 'running') THEN
				ended := ended + 1;
			END IF;
		END LOOP;
		UPDATE agent.runners x
		   SET name = runner_register.name, host = runner_register.host,
			   version = runner_register.version, slots = runner_register.slots,
			   incarnation = pg_catalog.gen_random_uuid(), registered_at = now(),
			   last_heartbeat = pg_catalog.clock_timestamp(), in_use = 0, gone_at = NULL
		 WHERE x.id = rn.id
		RETURNING * INTO rn;
	END IF;

	runner_id := rn.id;
	incarnation := rn.incarnation;
	lease_seconds := agent._setting('runner_lease_seconds')::integer;
	heartbeat_seconds := greatest(lease_seconds / 3, 1);
	state := rn.state;
END
$$;
COMMENT ON FUNCTION agent.runner_register(text, text, text, integer) IS
	'register or re-join the runner of the calling role; ends what its previous process held';

-- Renew the runner's leases (all at once: its heartbeat) and report its
-- slots in use.  Leases that expired before this heartbeat are ended first,
-- as the reaper would: a lease never comes back.  held, when given, is
-- every invocation the runner runs: a lease of it that held does not name,
-- claimed before the runner's previous heartbeat (so the runner had a whole
-- heartbeat to learn of it: a claim whose answer was lost with the
-- connection), is ended too, as a failure of ours.  Returns the runner's
-- state (draining: claim nothing new; removed: stop), how many leases it
-- holds now, and, of held, those it no longer holds: their sandboxes must
-- be killed and their results dropped.  slots, when given, is how many runs
-- the runner takes at once from now on (its configuration was reloaded):
-- fewer than it runs now only makes it claim nothing until enough end.
-- lease_seconds and heartbeat_seconds are the setting as it is now (an
-- operator may change runner_lease_seconds while runners run): the runner
-- heartbeats and fences itself by them from this answer on.
CREATE FUNCTION agent.runner_heartbeat(runner uuid, incarnation uuid, in_use integer,
									   held uuid[] DEFAULT NULL, slots integer DEFAULT NULL,
									   OUT state text, OUT renewed integer, OUT lost uuid[],
									   OUT lease_seconds integer, OUT heartbeat_seconds integer)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	v_lease interval := agent._runner_lease();
	w		record;
BEGIN
	IF runner_heartbeat.in_use IS NULL OR runner_heartbeat.in_use < 0 THEN
		RAISE EXCEPTION 'in_use must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF runner_heartbeat.slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._reap_leases(rn.id, pg_catalog.clock_timestamp());
	IF held IS NOT NULL THEN
		-- (the claim set lease_expires_at to its clock plus a lease)
		FOR w IN SELECT i.id, i.state FROM agent.invocations i
				  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
					AND i.lease_expires_at - v_lease < rn.last_heartbeat
					AND NOT i.id = ANY (held)
					AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)
				  ORDER BY i.provisioned_at, i.id LOOP
			PERFORM agent._end_leased(w.id, pg_catalog.format('the runner "%s" no longer runs it', rn.name),
									  w.state = 'running');
		END LOOP;
	END IF;
	UPDATE agent.runners x
	   SET last_heartbeat = pg_catalog.clock_timestamp(), in_use = runner_heartbeat.in_use,
		   slots = coalesce(runner_heartbeat.slots, x.slots), gone_at = NULL
	 WHERE x.id = rn.id
	RETURNING * INTO rn;

	state := rn.state;
	SELECT count(*)::integer INTO renewed
	  FROM agent.invocations i
	 WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running') AND rn.state <> 'removed'
	   AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id);
	lost := ARRAY(SELECT h FROM unnest(held) h
				   WHERE h IS NOT NULL
					 AND NOT EXISTS (SELECT 1 FROM agent.invocations i
									  WHERE i.id = h AND i.runner_id = rn.id
										AND i.state IN ('provisioning', 'running')
										AND rn.state <> 'removed'
										AND NOT EXISTS (SELECT 1 FROM agent.run_results x
														 WHERE x.invocation_id = i.id))
				   ORDER BY h);
	lease_seconds := pg_catalog.date_part('epoch', v_lease)::integer;
	heartbeat_seconds := greatest(lease_seconds / 3, 1);
END
$$;
COMMENT ON FUNCTION agent.runner_heartbeat(uuid, uuid, integer, uuid[], integer) IS
	'renew the calling runner''s leases; returns its state, the leases it holds and which of held it lost';

-- Claim up to max_rows approved invocations for this runner (at most its
-- free slots), each with a lease: agent._claim_invocations, fair across
-- orgs and runners, within each org's limits on every host together, with
-- session affinity.  Nothing when the runner is draining or removed.
-- Returns what the runner needs to start each: the code, the limits (the
-- server's defaults filled in) and the caps on what it may return.
CREATE FUNCTION agent.runner_claim(runner uuid, incarnation uuid, max_rows integer)
	RETURNS TABLE (id uuid, lease_token uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean, has_skills boolean, max_files integer,
				   max_bytes bigint, max_file_bytes bigint, output_limit_bytes bigint,
				   has_egress boolean)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	c		record;
	caps	record;
	lim		record;
	v_want	integer;
BEGIN
	IF max_rows IS NULL OR max_rows < 0 THEN
		RAISE EXCEPTION 'max_rows must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF rn.state <> 'active' THEN
		RETURN;
	END IF;
	v_want := least(max_rows, agent._runner_free_slots(rn));
	IF v_want <= 0 THEN
		RETURN;
	END IF;
	-- Every runner is woken by every approval: they claim in turn, and
	-- those after the first usually find nothing approved, in one index
	-- probe (agent._claim_turn).
	PERFORM agent._claim_turn();
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i WHERE i.state = 'approved') THEN
		RETURN;
	END IF;
	FOR c IN SELECT * FROM agent._claim_invocations(v_want, rn.id) LOOP
		IF caps IS NULL THEN
			SELECT * INTO caps FROM agent._produced_caps();
			SELECT * INTO lim FROM agent._run_limits();
		END IF;
		id := c.id;
		lease_token := c.lease_token;
		language := c.language;
		code := c.code;
		wall_time_s := coalesce(c.wall_time_s, lim.default_wall_time_s);
		memory_mb := coalesce(c.memory_mb, lim.default_memory_mb);
		conversation_id := c.conversation_id;
		session_id := c.session_id;
		fresh_session := c.fresh_session;
		has_skills := c.has_skills;
		max_files := caps.max_files;
		max_bytes := caps.max_bytes;
		max_file_bytes := caps.max_file_bytes;
		output_limit_bytes := lim.output_limit_bytes;
		has_egress := c.has_egress;
		RETURN NEXT;
	END LOOP;
END
$$;
COMMENT ON FUNCTION agent.runner_claim(uuid, uuid, integer) IS
	'claim approved invocations for the calling runner, each with a lease token';

-- What to put in the workspace before the start (agent._prepare_invocation),
-- for an invocation this runner holds.
CREATE FUNCTION agent.runner_prepare(runner uuid, token uuid, invocation uuid,
									 workspace_is_new boolean)
	RETURNS TABLE (kind text, name text, content bytea, skill_id uuid)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN QUERY SELECT p.kind, p.name, p.content, p.skill_id
				   FROM agent._prepare_invocation(invocation, coalesce(workspace_is_new, false)) p;
	PERFORM agent._runner_lease_of(runner, token, invocation);
END
$$;

-- The files of a skill mounted for an invocation this runner holds (no
-- other skill: 42501).
CREATE FUNCTION agent.runner_skill_files(runner uuid, token uuid, invocation uuid, skill uuid)
	RETURNS TABLE (path text, content bytea, executable boolean)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	r := agent._runner_lease_of(runner, token, invocation);
	IF NOT EXISTS (SELECT 1 FROM agent.agent_skills a WHERE a.agent_id = r.agent_id AND a.skill_id = skill) THEN
		RAISE EXCEPTION 'skill % is not mounted for invocation %', coalesce(skill::text, 'NULL'), invocation
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'A runner reads only the skills agent.runner_prepare() named for the invocation.';
	END IF;
	RETURN QUERY SELECT f.path, f.content, f.executable FROM agent._skill_files(skill) f;
END
$$;

-- The jail started (agent._mark_running).
CREATE FUNCTION agent.runner_mark_running(runner uuid, token uuid, invocation uuid, pid integer)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v boolean;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	v := agent._mark_running(invocation, pid);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- One chunk of output (agent._append_output), within the server's
-- sandbox.output_limit per stream (54000 beyond: the runner cuts output
-- there and reports the run truncated).
CREATE FUNCTION agent.runner_append_output(runner uuid, token uuid, invocation uuid,
										   stream text, data text)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	v_limit bigint;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF stream IS NULL OR stream NOT IN ('stdout', 'stderr') OR data IS NULL THEN
		RAISE EXCEPTION 'stream must be stdout or stderr, and data not null'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT l.output_limit_bytes INTO v_limit FROM agent._run_limits() l;
	IF (SELECT coalesce(sum(octet_length(o.data)), 0) FROM agent.invocation_output o
		 WHERE o.invocation_id = invocation AND o.stream = runner_append_output.stream)
	   + octet_length(data) > v_limit THEN
		RAISE EXCEPTION 'output of invocation % exceeds the output limit', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('At most %s bytes per stream are kept (sandbox.output_limit).', v_limit),
				  HINT = 'Cut the output at the limit and finish the run as truncated.';
	END IF;
	v := agent._append_output(invocation, stream, data);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Stage one file the run produced, or could not return
-- (agent._store_produced_file), within the caps runner_claim returned.
CREATE FUNCTION agent.runner_store_produced_file(runner uuid, token uuid, invocation uuid,
												 name text, status text, reason text, content bytea)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	caps	record;
	lim		record;
	n		integer;
	v_bytes bigint;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF status IS NULL OR status NOT IN ('saved', 'skipped', 'failed')
	   OR (status = 'saved') <> (content IS NOT NULL) THEN
		RAISE EXCEPTION 'status must be saved (with content), skipped or failed (without)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF status <> 'saved' AND reason IS NULL THEN
		RAISE EXCEPTION 'a file that is not saved needs a reason' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._runner_arg_fits(runner_store_produced_file.name, 'name', 4096);
	PERFORM agent._runner_arg_fits(reason, 'reason', 4096);
	SELECT * INTO caps FROM agent._produced_caps();
	SELECT * INTO lim FROM agent._run_limits();
	-- Each check costs O(log n), or O(n) only for the at most max_files + 1
	-- saved ones: a run may report some ten thousand skipped entries in one
	-- transaction, and counting them all at each would be quadratic.  The
	-- staged rows of a run are numbered densely from 1 (_store_produced_file),
	-- so the last number is how many there are.
	SELECT coalesce(max(x.seq), 0) INTO n FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	v_bytes := 0;
	IF content IS NOT NULL THEN
		SELECT coalesce(sum(octet_length(x.content)), 0)::bigint INTO v_bytes
		  FROM agent.run_result_files x WHERE x.invocation_id = invocation AND x.status = 'saved';
	END IF;
	IF octet_length(content) > caps.max_file_bytes
	   OR v_bytes + coalesce(octet_length(content), 0) > caps.max_bytes
	   OR n >= caps.max_files + lim.workspace_entries + 2 THEN
		RAISE EXCEPTION 'the files of invocation % exceed the caps of a run', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('A file may have %s bytes, a run return %s bytes in %s files (and report %s more as skipped).',
											 caps.max_file_bytes, caps.max_bytes, caps.max_files,
											 lim.workspace_entries + 2),
				  HINT = 'Report the files beyond the caps as skipped, without content.';
	END IF;
	v := agent._store_produced_file(invocation, runner_store_produced_file.name, status, reason, content);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Stage at once every entry of a run's workspace that it does not return
-- (skipped or failed, with a reason, without content): one call for what
-- may be ten thousand entries, within the same caps as one by one.
-- Returns how many were staged.
CREATE FUNCTION agent.runner_store_skipped_files(runner uuid, token uuid, invocation uuid,
												 names text[], statuses text[], reasons text[])
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	k		integer := coalesce(pg_catalog.cardinality(names), 0);
	caps	record;
	lim		record;
	n		integer;
	v_long	text;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF names IS NULL OR pg_catalog.array_ndims(names) > 1
	   OR pg_catalog.cardinality(statuses) IS DISTINCT FROM k
	   OR pg_catalog.cardinality(reasons) IS DISTINCT FROM k THEN
		RAISE EXCEPTION 'names, statuses and reasons must be lists of as many elements'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(statuses) s WHERE s IS NULL OR s NOT IN ('skipped', 'failed')) THEN
		RAISE EXCEPTION 'status must be skipped or failed' USING ERRCODE = 'invalid_parameter_value',
			HINT = 'Store a saved file with agent.runner_store_produced_file.';
	END IF;
	IF array_position(reasons, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'a file that is not saved needs a reason' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT x INTO v_long FROM unnest(names || reasons) x WHERE octet_length(x) > 4096 LIMIT 1;
	IF FOUND THEN
		PERFORM agent._runner_arg_fits(v_long, 'a name or reason', 4096);
	END IF;
	SELECT * INTO caps FROM agent._produced_caps();
	SELECT * INTO lim FROM agent._run_limits();
	SELECT coalesce(max(x.seq), 0) INTO n FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	IF n + k > caps.max_files + lim.workspace_entries + 2 THEN
		RAISE EXCEPTION 'the files of invocation % exceed the caps of a run', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('A run may return %s files and report %s more as skipped.',
											 caps.max_files, lim.workspace_entries + 2);
	END IF;
	v := agent._store_skipped_files(invocation, names, statuses, reasons);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Finish an invocation this runner holds from the jail's verdict
-- (agent._finish_invocation's contract): apply the result at once if its
-- locks are free, else stage it under the lease.  Returns the final
-- state, or NULL when it stays staged (applied later by the supervisor).
CREATE FUNCTION agent.runner_finish(runner uuid, token uuid, invocation uuid, verdict text,
									jail_status integer, error text, spawned boolean,
									truncated boolean DEFAULT false,
									workspace_bytes bigint DEFAULT NULL,
									workspace_entries integer DEFAULT NULL,
									workspace_reset text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		uuid;
	r		agent.invocations;
	res		agent.run_results;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	PERFORM agent._runner_arg_fits(verdict, 'verdict', 65536);
	PERFORM agent._runner_arg_fits(error, 'error', 4096);
	PERFORM agent._runner_arg_fits(workspace_reset, 'workspace_reset', 4096);
	-- At once, without staging, when its locks are free and, under them,
	-- the lease is still ours and no other result (the reaper's) is
	-- staged.  Anything else (a lock held elsewhere, a result that cannot
	-- be applied, a lease lost meanwhile) is rolled back and takes the
	-- staged way below, which decides it as before.
	res.invocation_id := invocation;
	res.verdict := verdict;
	res.jail_status := jail_status;
	res.error := error;
	res.spawned := coalesce(spawned, false);
	res.truncated := coalesce(truncated, false);
	res.workspace_bytes := workspace_bytes;
	res.workspace_entries := workspace_entries;
	res.workspace_reset := workspace_reset;
	BEGIN
		r := agent._lock_for_finish(invocation);
		IF r.state IN ('provisioning', 'running') AND r.runner_id = runner AND r.lease_token = token
		   AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = invocation) THEN
			RETURN agent._apply_run_result(r, res, false);
		END IF;
	EXCEPTION
		WHEN others THEN
			NULL;
	END;
	INSERT INTO agent.run_results AS x (invocation_id, verdict, jail_status, error, spawned,
										truncated, workspace_bytes, workspace_entries,
										workspace_reset)
	VALUES (invocation, verdict, jail_status, error, coalesce(spawned, false),
			coalesce(truncated, false), workspace_bytes, workspace_entries, workspace_reset)
	ON CONFLICT (invocation_id) DO NOTHING
	RETURNING x.invocation_id INTO v;
	IF v IS NULL THEN
		-- the reaper's result came first (this raises)
		PERFORM agent._runner_lease_of(runner, token, invocation);
	END IF;
	-- still in flight under this lease: the reaper did not end it meanwhile
	PERFORM agent._runner_lease_of(runner, token, invocation, true);
	RETURN agent._try_apply(invocation);
END
$$;

-- Of these invocations, the ones this runner holds that someone asked to
-- cancel (agent._cancel_requested, for this runner's only).
CREATE FUNCTION agent.runner_cancel_requested(runner uuid, invocations uuid[]) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT i.id FROM agent.invocations i
		 WHERE i.id = ANY (invocations) AND i.runner_id = runner
		   AND i.state IN ('provisioning', 'running') AND i.cancel_requested_at IS NOT NULL
		 ORDER BY i.id;
END
$$;

-- The sessions whose workspace this runner keeps: every other workspace
-- directory on its host may go (agent._live_session_ids, for one runner).
CREATE FUNCTION agent.runner_live_sessions(runner uuid) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT s.id FROM agent.sessions s
		 WHERE s.runner_id = runner AND s.state = 'active'
		 ORDER BY s.id;
END
$$;

-- The skill versions this runner may keep materialised: those of the
-- agents of its runs in flight and of its live sessions (its own work
-- only; agent._skill_ids_in_use, for one runner).
CREATE FUNCTION agent.runner_skills_in_use(runner uuid) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT DISTINCT a.skill_id
		  FROM agent.agent_skills a
		 WHERE a.agent_id IN (SELECT i.agent_id FROM agent.invocations i
							   WHERE i.runner_id = runner AND i.state IN ('provisioning', 'running')
							  UNION
							  SELECT c.agent_id FROM agent.sessions s
								JOIN agent.conversations c ON c.id = s.conversation_id
							   WHERE s.runner_id = runner AND s.state = 'active')
		 ORDER BY a.skill_id;
END
$$;

-- ----------------------------------------------------------------------
-- The reaper and the operator's functions (owner only)
-- ----------------------------------------------------------------------

-- End every invocation whose lease expired before as_of (the runner died,
-- its host is gone, its network is cut): the result "the runner stopped
-- renewing its lease", a failure of ours, refunded by the billing rule and
-- audited like any other end.  A result the runner staged under its lease
-- is applied as it is instead.  Runners without a heartbeat for a lease
-- are marked gone.  Called by the supervisor every few seconds and by
-- pg_cron (agent.schedule_maintenance); as_of is for tests.  Returns how
-- many invocations it ended.
CREATE FUNCTION agent.reap_expired_leases(as_of timestamptz DEFAULT now()) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n		integer;
	v_lease interval := agent._runner_lease();
	x		record;
BEGIN
	as_of := coalesce(as_of, now());
	n := agent._reap_leases(NULL, as_of);
	FOR x IN
		SELECT rn.id FROM agent.runners rn
		 WHERE rn.gone_at IS NULL AND rn.state <> 'removed' AND rn.last_heartbeat + v_lease < as_of
		   FOR NO KEY UPDATE SKIP LOCKED
	LOOP
		UPDATE agent.runners rn SET gone_at = now() WHERE rn.id = x.id;
	END LOOP;
	IF n > 0 THEN
		RAISE LOG 'ended % invocation(s) whose runner lease expired', n;
	END IF;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.reap_expired_leases(timestamptz) IS
	'end the invocations whose runner lease expired (refunded, audited); mark silent runners gone';

-- Drain a runner: it finishes what it holds and claims nothing new (its
-- next heartbeat says so).  With resume, it claims again (also a removed
-- runner: admitted again).  Returns its state.
CREATE FUNCTION agent.drain_runner(name text, resume boolean DEFAULT false) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn agent.runners;
BEGIN
	PERFORM agent._check_text(drain_runner.name, 'name', 'runner_name');
	SELECT * INTO rn FROM agent.runners x WHERE x.name = drain_runner.name FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(agent._shown(drain_runner.name), 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE agent.runners x
	   SET state = CASE WHEN coalesce(resume, false) THEN 'active' ELSE 'draining' END,
		   removed_at = CASE WHEN coalesce(resume, false) THEN NULL ELSE x.removed_at END
	 WHERE x.id = rn.id AND (x.state <> 'removed' OR coalesce(resume, false))
	RETURNING * INTO rn;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" has been removed', drain_runner.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Admit it again with agent.drain_runner(name, resume => true).';
	END IF;
	IF rn.state = 'active' THEN
		PERFORM agent._wake_supervisor();
	END IF;
	RETURN rn.state;
END
$$;
COMMENT ON FUNCTION agent.drain_runner(text, boolean) IS
	'drain a runner (finish its work, claim nothing new), or resume it';

-- Remove a runner from the fleet now: what it holds ends as a failure of
-- ours (refunded, audited); its sessions are rebuilt elsewhere when their
-- conversations run next; it cannot register again until admitted
-- (agent.drain_runner(name, resume => true)).  To keep a host out for good,
-- also revoke its role's membership in agent_runner.  Returns how many
-- invocations it ended.
CREATE FUNCTION agent.remove_runner(name text) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn	agent.runners;
	x	record;
	n	integer := 0;
BEGIN
	PERFORM agent._check_text(remove_runner.name, 'name', 'runner_name');
	SELECT * INTO rn FROM agent.runners r WHERE r.name = remove_runner.name FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(agent._shown(remove_runner.name), 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE agent.runners r SET state = 'removed', removed_at = now() WHERE r.id = rn.id;
	FOR x IN SELECT i.id, i.state FROM agent.invocations i
			  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
			  ORDER BY i.provisioned_at, i.id LOOP
		IF agent._end_leased(x.id, pg_catalog.format('the runner "%s" was removed', rn.name),
							 x.state = 'running') THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.remove_runner(text) IS
	'remove a runner now: its invocations end refunded, its sessions move; it cannot register until admitted';

-- The runners at a glance (agent_auditor).  No function of schema agent:
-- a view's functions run with the reader's rights.  next_lease_deadline is
-- agent._lease_deadline written out; max_slots is the cap in force
-- (agent._runner_slots; NULL: none, the local runner's).
CREATE VIEW agent.runner_status AS
SELECT rn.name, rn.host, rn.version, rn.state, rn.slots, rn.in_use,
	   rn.state <> 'removed' AND rn.last_heartbeat >= now() - l.lease AS live,
	   count(i.id)::integer AS leases,
	   min(least(greatest(i.lease_expires_at, rn.last_heartbeat + l.lease),
				 i.provisioned_at + coalesce(pg_catalog.make_interval(secs => i.wall_time_s), l.default_wall)
				 + l.grace,
				 i.cancel_requested_at + l.grace)) AS next_lease_deadline,
	   rn.last_heartbeat, rn.registered_at, rn.gone_at, rn.removed_at, rn.login_role, rn.id,
	   coalesce(rn.max_slots, CASE WHEN rn.login_role <> 'sandbox_runner_local' THEN l.max_slots END)
		   AS max_slots
  FROM agent.runners rn
 CROSS JOIN (SELECT pg_catalog.make_interval(secs => (max(s.value) FILTER (WHERE s.key = 'runner_lease_seconds'))::integer) AS lease,
					pg_catalog.make_interval(secs => (max(s.value) FILTER (WHERE s.key = 'runner_grace_seconds'))::integer) AS grace,
					(max(s.value) FILTER (WHERE s.key = 'runner_max_slots'))::integer AS max_slots,
					pg_catalog.current_setting('sandbox.default_wall_time', true)::interval AS default_wall
			   FROM agent.settings s
			  WHERE s.key IN ('runner_lease_seconds', 'runner_grace_seconds', 'runner_max_slots')) l
  LEFT JOIN agent.invocations i
		 ON i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
		AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)
 GROUP BY rn.id, l.lease, l.grace, l.max_slots, l.default_wall;
COMMENT ON VIEW agent.runner_status IS
	'runner hosts: host, version, state, slots (declared, and the cap in force: max_slots), in use, live, leases held, last heartbeat';

-- The supervisor and every runner, for an operator (owner, agent_auditor):
-- the row of agent._supervisor_status() (the supervisor's life, the local
-- runner's slots and why it claims nothing) and `runners`, one object per
-- row of agent.runner_status, the local runner first:
--   {name, local, host, version, state, slots, max_slots, in_use, live, leases,
--    next_lease_deadline, last_heartbeat, registered_at, gone_at, removed_at}
-- SECURITY DEFINER: the caller needs neither the C function nor the view.
CREATE FUNCTION agent.worker_status(
		OUT preloaded boolean, OUT running boolean, OUT pid integer,
		OUT started_at timestamptz, OUT slots_in_use integer,
		OUT max_concurrent_runs integer, OUT invocations uuid[],
		OUT work_dir text, OUT problem text, OUT runners jsonb,
		OUT warm_ready integer, OUT warm_memory_bytes bigint,
		OUT warm_memory_limit bigint, OUT warm_problem text)
	LANGUAGE sql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
SELECT s.preloaded, s.running, s.pid, s.started_at, s.slots_in_use, s.max_concurrent_runs,
	   s.invocations, s.work_dir, s.problem,
	   (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
				'name', r.name, 'local', r.login_role = 'sandbox_runner_local', 'host', r.host,
				'version', r.version, 'state', r.state, 'slots', r.slots, 'max_slots', r.max_slots,
				'in_use', r.in_use,
				'live', r.live, 'leases', r.leases, 'next_lease_deadline', r.next_lease_deadline,
				'last_heartbeat', r.last_heartbeat, 'registered_at', r.registered_at,
				'gone_at', r.gone_at, 'removed_at', r.removed_at)
			  ORDER BY r.login_role <> 'sandbox_runner_local', r.name), '[]'::jsonb)
		  FROM agent.runner_status r),
	   s.warm_ready, s.warm_memory_bytes, s.warm_memory_limit, s.warm_problem
  FROM agent._supervisor_status() s
$$;
COMMENT ON FUNCTION agent.worker_status() IS
	'the supervisor (whether it runs, its pid, the local runner''s slots and invocations, its work directory, why it claims nothing) and every runner, local and remote (runners); the local launcher''s warm pool (warm_*)';
REVOKE ALL ON FUNCTION agent.worker_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.worker_status() TO agent_auditor;

-- Cap the slots of a runner (NULL: back to the setting runner_max_slots):
-- from its next claim on it holds at most that many runs at once, whatever
-- it declares; a cap below what it holds only makes it claim nothing until
-- enough end.  Its registration and heartbeat change only what it declares.
-- Returns the cap in force (agent._runner_slots).  Owner only.
CREATE FUNCTION agent.set_runner_slots(name text, max_slots integer) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn agent.runners;
BEGIN
	IF set_runner_slots.max_slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'max_slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value',
			HINT = 'NULL sets the runner back to the setting runner_max_slots.';
	END IF;
	UPDATE agent.runners r SET max_slots = set_runner_slots.max_slots
	 WHERE r.name = set_runner_slots.name
	RETURNING * INTO rn;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(set_runner_slots.name, 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	IF rn.state = 'active' THEN
		PERFORM agent._wake_supervisor();	-- a raised cap: it may claim now
	END IF;
	RETURN coalesce(rn.max_slots,
					CASE WHEN rn.login_role = 'sandbox_runner_local' THEN NULL
						 ELSE agent._setting('runner_max_slots')::integer END);
END
$$;
COMMENT ON FUNCTION agent.set_runner_slots(text, integer) IS
	'cap the runs a runner holds at once, whatever slots it declares (NULL: runner_max_slots)';

-- ----------------------------------------------------------------------
-- Privileges
-- ----------------------------------------------------------------------

-- agent_runner executes the steps above and nothing else: no table, view
-- or sequence privilege, no other function (99_privileges.sql revokes
-- PUBLIC's EXECUTE).  test/pgtap/60_runners.sql enumerates the catalog.
REVOKE ALL ON agent.runners, agent.runner_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	agent.runner_register(text, text, text, integer),
	agent.runner_heartbeat(uuid, uuid, integer, uuid[], integer),
	agent.runner_claim(uuid, uuid, integer),
	agent.runner_prepare(uuid, uuid, uuid, boolean),
	agent.runner_skill_files(uuid, uuid, uuid, uuid),
	agent.runner_mark_running(uuid, uuid, uuid, integer),
	agent.runner_append_output(uuid, uuid, uuid, text, text),
	agent.runner_store_produced_file(uuid, uuid, uuid, text, text, text, bytea),
	agent.runner_store_skipped_files(uuid, uuid, uuid, text[], text[], text[]),
	agent.runner_finish(uuid, uuid, uuid, text, integer, text, boolean, boolean, bigint, integer, text),
	agent.runner_cancel_requested(uuid, uuid[]),
	agent.runner_live_sessions(uuid),
	agent.runner_skills_in_use(uuid)
	TO agent_runner;
GRANT SELECT ON agent.runners, agent.runner_status TO agent_auditor;
-- Egress: outbound network of a run, limited to an allowlist (docs/egress.md).
-- Owns the policy as data (an org's rules and limits, narrowed per agent and
-- per conversation), the effective policy copied onto the invocation when
-- it is requested (frozen, shown on the card, bound to the approval), the
-- policy file the jail's proxy enforces, and the record of every connection
-- attempt (rows under RLS, a summary in the tool call, one audit event per
-- run with a hash of its connection log).
--
-- Semantics (stated once, here and in docs/egress.md):
--   * default deny: an org without rules has no network at all;
--   * a rule is a host pattern or a CIDR, with ports; "api.example.com"
--     matches that name only; "*.example.com" matches every name below
--     example.com, never example.com itself (the apex needs its own rule);
--     a CIDR rule admits IP-literal hosts in the range (names never match a
--     CIDR rule); the always-refused ranges (loopback, private, link-local,
--     metadata, CGNAT, multicast, reserved, ULA, ...) stay refused whatever
--     a rule says;
--   * an agent (and a conversation) may be narrowed to a subset of its
--     org's rules (agent.narrow_egress); without a narrowing it has all of
--     them; a conversation's narrowing selects from its agent's set; a
--     narrowing can never add a rule.

CREATE TABLE agent.egress_rules (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	host			text,
	cidr			cidr,
	ports			integer[] NOT NULL,
	created_by		text NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CHECK ((host IS NULL) <> (cidr IS NULL)),
	CHECK (host IS NULL OR host ~ '^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$'
		   AND length(host) <= 253 AND host !~ '(^|\.)[0-9]+$' AND host !~ '(^|\.)0x'),
	CHECK (cardinality(ports) BETWEEN 1 AND 16 AND 1 <= ALL (ports) AND 65535 >= ALL (ports)),
	UNIQUE NULLS NOT DISTINCT (org_id, host, cidr)
);
COMMENT ON TABLE agent.egress_rules IS 'an org''s egress allowlist: host patterns or CIDRs with ports (docs/egress.md)';

-- Per-run limits of an org (defaults when it has no row).
CREATE TABLE agent.egress_limits (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	max_connections integer NOT NULL DEFAULT 64 CHECK (max_connections BETWEEN 1 AND 10000),
	max_bytes_up	bigint NOT NULL DEFAULT 10485760 CHECK (max_bytes_up > 0),
	max_bytes_down	bigint NOT NULL DEFAULT 104857600 CHECK (max_bytes_down > 0)
);

-- A narrowing: the subset of the org's rules an agent (conversation_id
-- NULL) or one conversation of it may use.  rule_ids empty: no egress.
CREATE TABLE agent.egress_narrowing (
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	rule_ids		uuid[] NOT NULL,
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE NULLS NOT DISTINCT (agent_id, conversation_id)
);

-- On the invocation and its card (columns in 15_invocations.sql):
-- invocations.egress_policy, egress_sha256; approval_requests.approved_egress_sha256;
-- agent_tool_calls.egress.

-- The effective policy of a request: {"rules": [...], "limits": {...}}, or
-- NULL (no network).  Rules in a fixed order (host, cidr), so the same
-- policy always has the same text and hash.
CREATE FUNCTION agent._effective_egress(org uuid, agent_id uuid, conversation_id uuid)
	RETURNS jsonb
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v jsonb;
BEGIN
	-- An org without rules (most) has no network: no policy to build.
	IF NOT EXISTS (SELECT 1 FROM agent.egress_rules r WHERE r.org_id = org) THEN
		RETURN NULL;
	END IF;
	WITH a AS (SELECT n.rule_ids FROM agent.egress_narrowing n
				WHERE n.agent_id = _effective_egress.agent_id AND n.conversation_id IS NULL),
		 c AS (SELECT n.rule_ids FROM agent.egress_narrowing n
				WHERE n.agent_id = _effective_egress.agent_id
				  AND n.conversation_id = _effective_egress.conversation_id),
		 r AS (SELECT r.* FROM agent.egress_rules r
				WHERE r.org_id = org
				  AND (NOT EXISTS (SELECT 1 FROM a) OR EXISTS (SELECT 1 FROM a WHERE r.id = ANY (a.rule_ids)))
				  AND (NOT EXISTS (SELECT 1 FROM c) OR EXISTS (SELECT 1 FROM c WHERE r.id = ANY (c.rule_ids))))
	SELECT CASE WHEN count(*) = 0 THEN NULL ELSE
		jsonb_build_object(
			'rules', jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
						'id', r.id, 'host', r.host, 'cidr', r.cidr::text,
						'ports', (SELECT jsonb_agg(p ORDER BY p) FROM unnest(r.ports) p)))
					 ORDER BY r.host NULLS LAST, r.cidr),
			'limits', (SELECT jsonb_build_object('connections', coalesce(l.max_connections, 64),
												 'bytes_up', coalesce(l.max_bytes_up, 10485760),
												 'bytes_down', coalesce(l.max_bytes_down, 104857600))
						 FROM (SELECT 1) x LEFT JOIN agent.egress_limits l ON l.org_id = org))
		END INTO v
	  FROM r;
	RETURN v;
END
$$;

-- agent.egress_may_reach(policy), what the card shows, is in
-- 15_invocations.sql: the card's view (28_approvals.sql) needs it.

CREATE FUNCTION agent._egress_sha256(policy jsonb) RETURNS text
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN CASE WHEN policy IS NULL THEN NULL
				ELSE pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(policy::text, 'UTF8')), 'hex') END;
END
$$;

-- Copied at request time; whoever inserts cannot supply their own.
CREATE FUNCTION agent._invocations_egress() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	NEW.egress_policy := agent._effective_egress(NEW.org_id, NEW.agent_id, NEW.conversation_id);
	NEW.egress_sha256 := agent._egress_sha256(NEW.egress_policy);
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_egress
	BEFORE INSERT ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_egress();

-- And never changed afterwards: a rule added after the approval does not
-- widen the approved run.
CREATE FUNCTION agent._invocations_freeze_egress() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot change the egress policy of invocation %', OLD.id
		USING ERRCODE = 'object_not_in_prerequisite_state',
			  DETAIL = 'The effective egress policy is fixed when the execution is requested and bound to its approval.',
			  HINT = 'Request a new execution to run under the current policy.';
END
$$;
CREATE TRIGGER invocations_freeze_egress
	BEFORE UPDATE OF egress_policy, egress_sha256 ON agent.invocations
	FOR EACH ROW WHEN ((OLD.egress_policy, OLD.egress_sha256) IS DISTINCT FROM
					   (NEW.egress_policy, NEW.egress_sha256))
	EXECUTE FUNCTION agent._invocations_freeze_egress();

-- ---- the admin's and the backend's API --------------------------------------

CREATE FUNCTION agent._egress_normalize_host(host text) RETURNS text
	LANGUAGE sql IMMUTABLE
	RETURN lower(regexp_replace(btrim(host), '\.$', ''));

-- Add a rule to the current org (agent_admin).  Exactly one of host and
-- cidr.  Returns the rule's id (an existing identical rule's, with its
-- ports replaced).
CREATE FUNCTION agent.add_egress_rule(host text, ports integer[], actor text, cidr cidr DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_host	text;
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	PERFORM agent._check_text(host, 'host', 'host');
	v_host := agent._egress_normalize_host(host);
	IF (v_host IS NULL) = (cidr IS NULL) THEN
		RAISE EXCEPTION 'an egress rule needs exactly one of host and cidr'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF ports IS NULL OR cardinality(ports) NOT BETWEEN 1 AND 16
	   OR NOT (1 <= ALL (ports) AND 65535 >= ALL (ports)) OR array_position(ports, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'invalid ports for an egress rule'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A rule lists 1 to 16 ports, each between 1 and 65535.';
	END IF;
	IF v_host IS NOT NULL AND (v_host !~ '^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$'
							   OR length(v_host) > 253) THEN
		RAISE EXCEPTION 'invalid host pattern "%"', agent._shown(host)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use a host name (api.example.com) or a wildcard (*.example.com, which does not match example.com itself).';
	END IF;
	IF v_host IS NOT NULL AND (v_host ~ '(^|\.)[0-9]+$' OR v_host ~ '(^|\.)0x') THEN
		RAISE EXCEPTION 'host pattern "%" is an address, not a name', agent._shown(host)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Allow addresses with a CIDR rule (cidr => ''203.0.113.7/32'').';
	END IF;
	UPDATE agent.egress_rules r
	   SET ports = (SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(ports) p)
	 WHERE r.org_id = agent.current_org() AND r.host IS NOT DISTINCT FROM v_host
	   AND r.cidr IS NOT DISTINCT FROM cidr
	RETURNING r.id INTO v_id;
	IF NOT FOUND THEN
		INSERT INTO agent.egress_rules AS r (org_id, host, cidr, ports, created_by)
		VALUES (agent.current_org(), v_host, cidr,
				(SELECT array_agg(DISTINCT p ORDER BY p) FROM unnest(ports) p), actor)
		RETURNING r.id INTO v_id;
	END IF;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.rule_set', NULL, actor,
						 jsonb_strip_nulls(jsonb_build_object('rule_id', v_id, 'host', v_host,
															  'cidr', cidr::text, 'ports', to_jsonb(ports))));
	RETURN v_id;
END
$$;

CREATE FUNCTION agent.remove_egress_rule(rule uuid, actor text) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	DELETE FROM agent.egress_rules r WHERE r.id = rule AND r.org_id = agent.current_org();
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.rule_removed', NULL, actor,
						 jsonb_build_object('rule_id', rule));
	RETURN true;
END
$$;

CREATE FUNCTION agent.set_egress_limits(max_connections integer, max_bytes_up bigint,
										max_bytes_down bigint, actor text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	IF max_connections IS NULL OR max_bytes_up IS NULL OR max_bytes_down IS NULL
	   OR max_connections NOT BETWEEN 1 AND 10000 OR max_bytes_up <= 0 OR max_bytes_down <= 0 THEN
		RAISE EXCEPTION 'invalid egress limits'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Connections per run are 1 to 10000; byte limits are positive.';
	END IF;
	INSERT INTO agent.egress_limits AS l VALUES (agent.current_org(), max_connections, max_bytes_up, max_bytes_down)
	ON CONFLICT (org_id) DO UPDATE
		SET max_connections = EXCLUDED.max_connections, max_bytes_up = EXCLUDED.max_bytes_up,
			max_bytes_down = EXCLUDED.max_bytes_down;
	PERFORM agent._audit(agent.current_org(), NULL, 'egress.limits_set', NULL, actor,
						 jsonb_build_object('max_connections', max_connections,
											'max_bytes_up', max_bytes_up, 'max_bytes_down', max_bytes_down));
END
$$;

-- Narrow an agent (conversation NULL) or one of its conversations to a
-- subset of what it has now: rules is a list of rule ids of the org; a
-- rule its agent does not have is refused, so a narrowing can only take
-- away.  rules NULL removes the narrowing (the conversation gets its
-- agent's set; the agent the org's).  An agent's narrowing is org policy,
-- the admin's (agent_admin; a backend gets 42501: it could otherwise
-- remove or widen what an admin took away); a conversation's is the
-- backend's or the admin's, and only selects from its agent's set (so a
-- backend can narrow within what the admin left, never beyond it).  The
-- admin's tenant needs no workspace: the agent is looked up in the org.
CREATE FUNCTION agent.narrow_egress(agent uuid, conversation uuid, rules uuid[], actor text)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	g		agent.agents;
	v_have	jsonb;
	v_bad	uuid;
	v_caller name := agent._outer_role();	-- the role outside this function
	v_admin	boolean;
BEGIN
	v_admin := pg_catalog.pg_has_role(v_caller, 'agent_admin', 'USAGE')
		OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller);
	PERFORM agent._require_tenant(NOT v_admin);
	PERFORM agent._require_person(actor, 'actor');
	IF conversation IS NULL AND NOT v_admin THEN
		RAISE EXCEPTION 'only an admin can narrow an agent''s egress'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'An agent''s narrowing is org policy (agent_admin).',
				  HINT = 'Narrow one conversation instead: agent.narrow_egress(agent, conversation, rules, actor), within its agent''s rules.';
	END IF;
	SELECT * INTO g FROM agent.agents a
	 WHERE a.id = agent AND a.org_id = agent.current_org()
	   AND (a.workspace_id = agent.current_workspace()
			OR (v_admin AND agent.current_workspace() IS NULL));
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent USING ERRCODE = 'no_data_found';
	END IF;
	IF conversation IS NOT NULL AND NOT EXISTS (
		SELECT 1 FROM agent.conversations c WHERE c.id = conversation AND c.agent_id = g.id
		   AND c.org_id = g.org_id AND c.workspace_id = g.workspace_id) THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation USING ERRCODE = 'no_data_found';
	END IF;
	IF rules IS NULL THEN
		DELETE FROM agent.egress_narrowing n
		 WHERE n.agent_id = g.id AND n.conversation_id IS NOT DISTINCT FROM conversation;
	ELSE
		-- what it may choose from: its agent's set (a conversation) or the org's
		v_have := agent._effective_egress(g.org_id, g.id, NULL);
		IF conversation IS NULL THEN
			v_have := (SELECT jsonb_build_object('rules', jsonb_agg(jsonb_build_object('id', r.id)))
						 FROM agent.egress_rules r WHERE r.org_id = g.org_id);
		END IF;
		SELECT x INTO v_bad FROM unnest(rules) x
		 WHERE x IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(coalesce(v_have->'rules', '[]')) e
										 WHERE (e->>'id')::uuid = x)
		 LIMIT 1;
		IF FOUND THEN
			RAISE EXCEPTION 'egress rule % is not available to narrow to', v_bad
				USING ERRCODE = 'insufficient_privilege',
					  DETAIL = 'A narrowing selects from the rules its agent (or, for an agent, its org) already has; it cannot add one.';
		END IF;
		INSERT INTO agent.egress_narrowing AS n (org_id, workspace_id, agent_id, conversation_id, rule_ids, set_by)
		VALUES (g.org_id, g.workspace_id, g.id, conversation,
				(SELECT coalesce(array_agg(DISTINCT x ORDER BY x), '{}') FROM unnest(rules) x), actor)
		ON CONFLICT (agent_id, conversation_id) DO UPDATE
			SET rule_ids = EXCLUDED.rule_ids, set_by = EXCLUDED.set_by, set_at = now();
	END IF;
	PERFORM agent._audit(g.org_id, g.workspace_id, 'egress.narrowed', NULL, actor,
						 jsonb_build_object('agent_id', g.id, 'conversation_id', conversation,
											'rule_ids', to_jsonb(rules)));
END
$$;

-- What a run of this agent/conversation would be allowed to reach now.
CREATE FUNCTION agent.effective_egress(agent uuid, conversation uuid DEFAULT NULL)
	RETURNS TABLE (may_reach text, policy jsonb)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	g	agent.agents;
BEGIN
	PERFORM agent._require_tenant(true);
	SELECT * INTO g FROM agent.agents a
	 WHERE a.id = agent AND a.org_id = agent.current_org() AND a.workspace_id = agent.current_workspace();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent USING ERRCODE = 'no_data_found';
	END IF;
	policy := agent._effective_egress(g.org_id, g.id, conversation);
	may_reach := agent.egress_may_reach(policy);
	RETURN NEXT;
END
$$;

-- ---- the run: the policy file, and what happened --------------------------------

-- The file the jail hands its proxy (src/egress/policy.c), from the
-- invocation's frozen copy; NULL: the run has no network.  Refuses a copy
-- whose hash is not the one its approval was bound to (a rewrite of the
-- invocation after approval, by someone able to bypass the freeze).
CREATE FUNCTION agent._egress_policy_file(invocation uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		record;
	e		jsonb;
	v		text;
BEGIN
	SELECT i.egress_policy, i.egress_sha256, a.approved_egress_sha256, a.status
	  INTO r
	  FROM agent.invocations i JOIN agent.approval_requests a ON a.invocation_id = i.id
	 WHERE i.id = invocation;
	IF NOT FOUND OR r.egress_policy IS NULL THEN
		RETURN NULL;
	END IF;
	IF r.status <> 'approved' OR r.approved_egress_sha256 IS DISTINCT FROM r.egress_sha256
	   OR r.egress_sha256 IS DISTINCT FROM agent._egress_sha256(r.egress_policy) THEN
		RAISE EXCEPTION 'the egress policy of invocation % is not the one its approval covers', invocation
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	v := E'sandbox-egress/1\n'
		|| format(E'limit connections %s\nlimit bytes_up %s\nlimit bytes_down %s\n',
				  (r.egress_policy->'limits'->>'connections')::bigint,
				  (r.egress_policy->'limits'->>'bytes_up')::bigint,
				  (r.egress_policy->'limits'->>'bytes_down')::bigint);
	FOR e IN SELECT x FROM jsonb_array_elements(r.egress_policy->'rules') x LOOP
		v := v || format(E'rule %s %s %s %s\n', (e->>'id')::uuid,
						 CASE WHEN e ? 'host' THEN 'host' ELSE 'cidr' END,
						 coalesce(e->>'host', (e->>'cidr')::cidr::text),
						 (SELECT string_agg(p::integer::text, ',') FROM jsonb_array_elements_text(e->'ports') p));
	END LOOP;
	RETURN v;
END
$$;

-- One run's egress, from the jail: the summary (the verdict's egress_*
-- fields) and every logged attempt (the proxy's JSON lines).
CREATE TABLE agent.egress_runs (
	invocation_id	uuid PRIMARY KEY REFERENCES agent.invocations (id),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	attempts		bigint NOT NULL,
	allowed			bigint NOT NULL,
	denied			bigint NOT NULL,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	limit_hit		boolean NOT NULL,
	log_rows		integer NOT NULL,
	log_sha256		text NOT NULL,
	recorded_at		timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.egress_connections (
	invocation_id	uuid NOT NULL REFERENCES agent.invocations (id),
	seq				integer NOT NULL,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	kind			text NOT NULL,		-- connect | http
	host			text NOT NULL,
	port			integer NOT NULL,
	address			inet,
	allowed			boolean NOT NULL,
	rule_id			uuid,
	reason			text,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	duration_ms		bigint NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (invocation_id, seq)
);
CREATE INDEX egress_connections_tenant_idx ON agent.egress_connections (org_id, workspace_id);
COMMENT ON TABLE agent.egress_connections IS 'every connection attempt of a run through its egress proxy (docs/egress.md)';

-- The hash of a run's connection log: sha256 over its rows in order, each
-- as the JSON object below and a newline.  The run's audit event carries
-- it; anyone who can read the rows recomputes it (docs/egress.md, "Audit").
CREATE FUNCTION agent.egress_log_sha256(invocation uuid) RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT encode(sha256(convert_to(coalesce(string_agg(jsonb_build_object(
				'seq', c.seq, 'kind', c.kind, 'host', c.host, 'port', c.port,
				'address', host(c.address), 'allowed', c.allowed, 'rule_id', c.rule_id,
				'reason', c.reason, 'bytes_up', c.bytes_up, 'bytes_down', c.bytes_down,
				'duration_ms', c.duration_ms)::text || E'\n', '' ORDER BY c.seq), ''), 'UTF8')), 'hex')
	  FROM agent.egress_connections c WHERE c.invocation_id = invocation
$$;

-- The run's connection log as the supervisor read it from the jail, with
-- the verdict's summary.  Fenced: once per invocation, only while it is
-- provisioning or running, only for an invocation with egress.  The
-- hash covers the log's rows in order (docs/egress.md, "Audit").
CREATE FUNCTION agent._record_egress(invocation uuid, log text, verdict jsonb) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	l		text;
	j		jsonb;
	n		integer := 0;
BEGIN
	SELECT * INTO r FROM agent.invocations i
	 WHERE i.id = invocation AND i.state IN ('provisioning', 'running') AND i.egress_policy IS NOT NULL;
	IF NOT FOUND OR EXISTS (SELECT 1 FROM agent.egress_runs e WHERE e.invocation_id = invocation) THEN
		RETURN false;
	END IF;
	FOR l IN SELECT x FROM regexp_split_to_table(coalesce(log, ''), E'\n') x WHERE x <> '' LOOP
		n := n + 1;
		EXIT WHEN n > 1000;		-- the proxy logs at most 1000 per run
		BEGIN
			j := l::jsonb;
			INSERT INTO agent.egress_connections
				(invocation_id, seq, org_id, workspace_id, kind, host, port, address, allowed,
				 rule_id, reason, bytes_up, bytes_down, duration_ms)
			VALUES (invocation, n, r.org_id, r.workspace_id,
					CASE WHEN j->>'kind' = 'http' THEN 'http' ELSE 'connect' END,
					left(coalesce(j->>'host', '?'), 300), coalesce((j->>'port')::integer, 0),
					(j->>'address')::inet, j->>'decision' = 'allowed',
					CASE WHEN (j->>'rule') ~ '^[0-9a-f-]{36}$' THEN (j->>'rule')::uuid END,
					left(j->>'reason', 1000), coalesce((j->>'bytes_up')::bigint, 0),
					coalesce((j->>'bytes_down')::bigint, 0), coalesce((j->>'ms')::bigint, 0));
		EXCEPTION WHEN data_exception THEN
			-- a line of ours we cannot read must not lose the run's record
			INSERT INTO agent.egress_connections
				(invocation_id, seq, org_id, workspace_id, kind, host, port, allowed, reason,
				 bytes_up, bytes_down, duration_ms)
			VALUES (invocation, n, r.org_id, r.workspace_id, 'connect', '(unreadable log line)', 0,
					false, 'the proxy wrote a line that could not be read', 0, 0, 0);
		END;
	END LOOP;
	INSERT INTO agent.egress_runs
		(invocation_id, org_id, workspace_id, attempts, allowed, denied, bytes_up, bytes_down,
		 limit_hit, log_rows, log_sha256)
	VALUES (invocation, r.org_id, r.workspace_id,
			coalesce((verdict->>'egress_attempts')::bigint, 0),
			coalesce((verdict->>'egress_allowed')::bigint, 0),
			coalesce((verdict->>'egress_denied')::bigint, 0),
			coalesce((verdict->>'egress_bytes_up')::bigint, 0),
			coalesce((verdict->>'egress_bytes_down')::bigint, 0),
			coalesce((verdict->>'egress_limit_hit')::boolean, false),
			least(n, 1000), agent.egress_log_sha256(invocation));
	RETURN true;
END
$$;

-- The tool call carries the run's egress summary, and the finish (the
-- transaction that writes the tool call) appends the run's one egress
-- audit event: the counts and the hash of its connection log.
CREATE FUNCTION agent._tool_call_egress() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	e		agent.egress_runs;
	v_pol	jsonb;
BEGIN
	SELECT i.egress_policy INTO v_pol FROM agent.invocations i WHERE i.id = NEW.invocation_id;
	IF v_pol IS NULL THEN
		RETURN NEW;
	END IF;
	SELECT * INTO e FROM agent.egress_runs x WHERE x.invocation_id = NEW.invocation_id;
	NEW.egress := jsonb_build_object(
		'may_reach', agent.egress_may_reach(v_pol),
		'attempts', coalesce(e.attempts, 0), 'allowed', coalesce(e.allowed, 0),
		'denied', coalesce(e.denied, 0), 'bytes_up', coalesce(e.bytes_up, 0),
		'bytes_down', coalesce(e.bytes_down, 0), 'limit_hit', coalesce(e.limit_hit, false),
		'recorded', e.invocation_id IS NOT NULL);
	PERFORM agent._audit(NEW.org_id, NEW.workspace_id, 'egress.connections', NEW.invocation_id,
						 'system', NEW.egress || jsonb_build_object(
							'egress_sha256', (SELECT i.egress_sha256 FROM agent.invocations i WHERE i.id = NEW.invocation_id),
							'log_rows', coalesce(e.log_rows, 0), 'log_sha256', e.log_sha256));
	RETURN NEW;
END
$$;
CREATE TRIGGER agent_tool_calls_egress
	BEFORE INSERT ON agent.agent_tool_calls
	FOR EACH ROW EXECUTE FUNCTION agent._tool_call_egress();

-- Product data: in a pg_dump of the database (docs/operations.md, when on
-- main: "Backup and restore").
SELECT pg_catalog.pg_extension_config_dump('agent.egress_rules', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_limits', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_narrowing', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_runs', '');
SELECT pg_catalog.pg_extension_config_dump('agent.egress_connections', '');

-- ---- privileges and row-level security -----------------------------------------
ALTER TABLE agent.egress_rules ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_narrowing ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.egress_connections ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_org ON agent.egress_rules FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY tenant_org ON agent.egress_limits FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY backend_workspace ON agent.egress_narrowing FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.egress_runs FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.egress_connections FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY auditor_read ON agent.egress_rules FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_limits FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_narrowing FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_runs FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.egress_connections FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.egress_rules, agent.egress_limits TO agent_backend, agent_admin;
GRANT SELECT ON agent.egress_narrowing, agent.egress_runs, agent.egress_connections TO agent_backend;
GRANT SELECT ON agent.egress_rules, agent.egress_limits, agent.egress_narrowing,
	agent.egress_runs, agent.egress_connections TO agent_auditor;
GRANT EXECUTE ON FUNCTION
	agent.add_egress_rule(text, integer[], text, cidr),
	agent.remove_egress_rule(uuid, text),
	agent.set_egress_limits(integer, bigint, bigint, text)
	TO agent_admin;
GRANT EXECUTE ON FUNCTION
	agent.narrow_egress(uuid, uuid, uuid[], text),
	agent.effective_egress(uuid, uuid),
	agent.egress_may_reach(jsonb),
	agent.egress_log_sha256(uuid)
	TO agent_backend, agent_admin;
GRANT EXECUTE ON FUNCTION agent.egress_log_sha256(uuid) TO agent_auditor;

-- A runner host's way to record a run's egress (docs/runners.md): the same
-- step, fenced on the runner's identity and its lease of the invocation.
CREATE FUNCTION agent.runner_record_egress(runner uuid, token uuid, invocation uuid,
										   log text, verdict jsonb) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN agent._record_egress(invocation, log, verdict);
END
$$;
GRANT EXECUTE ON FUNCTION agent.runner_record_egress(uuid, uuid, uuid, text, jsonb) TO agent_runner;
-- Conversations' sandbox sessions, files in and out, and skills.
--
-- A conversation owns at most one active session: a workspace directory on
-- the supervisor's host that survives between the conversation's runs.  It
-- is rebuilt (a new, empty workspace; the conversation's files put back)
-- when it idled out or when its agent's skills changed.  Files live in the
-- database and outlive every sandbox.  Skills are versioned bundles of
-- files, mounted read-only at /skills/<name>/.

INSERT INTO agent.settings (key, value, description) VALUES
	('session_idle_timeout', '30 minutes',
	 'a conversation''s sandbox session idle longer than this is ended by agent.expire_idle_sessions() (an interval)'),
	('max_upload_bytes', '10485760',
	 'largest file agent.upload_file() accepts, in bytes'),
	('max_conversation_bytes', '104857600',
	 'largest total size of the files of one conversation, in bytes'),
	('max_produced_files', '100',
	 'most files one run may return; the rest are reported as skipped'),
	('max_produced_bytes', '52428800',
	 'largest total size of the files one run may return; the rest are reported as skipped'),
	('max_produced_file_bytes', '20971520',
	 'largest single file one run may return; larger ones are reported as skipped'),
	('max_skill_bytes', '10485760',
	 'largest total size of the files of one skill version, in bytes'),
	('max_skill_files', '1000',
	 'most files one skill version may hold');

-- ----------------------------------------------------------------------
-- Skills
-- ----------------------------------------------------------------------

CREATE TABLE agent.skills (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL REFERENCES agent.orgs (id),
	name		text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
	version		integer NOT NULL CHECK (version > 0),
	description text,
	created_at	timestamptz NOT NULL DEFAULT now(),
	UNIQUE (org_id, name, version),
	UNIQUE (org_id, id)
);
COMMENT ON TABLE agent.skills IS 'a named, versioned, immutable bundle of files mounted read-only at /skills/<name>/';

CREATE TABLE agent.skill_files (
	skill_id	uuid NOT NULL REFERENCES agent.skills (id) ON DELETE CASCADE,
	path		text NOT NULL,
	content		bytea NOT NULL,
	executable	boolean NOT NULL DEFAULT false,
	PRIMARY KEY (skill_id, path)
);

CREATE TABLE agent.agent_skills (
	org_id		uuid NOT NULL,
	workspace_id uuid NOT NULL,
	agent_id	uuid NOT NULL,
	skill_id	uuid NOT NULL,
	attached_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (agent_id, skill_id),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
		ON DELETE CASCADE,
	FOREIGN KEY (org_id, skill_id) REFERENCES agent.skills (org_id, id)
);

-- A relative path inside a workspace or bundle: no absolute path, no "..",
-- no empty or "." component, no NUL or control characters, bounded length.
CREATE FUNCTION agent.valid_relative_path(path text) RETURNS boolean
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN octet_length(path) BETWEEN 1 AND 1024
		AND path !~ '^/'
		AND path !~ '[[:cntrl:]]'
		AND NOT EXISTS (SELECT 1 FROM unnest(string_to_array(path, '/')) c
						 WHERE c IN ('', '.', '..') OR octet_length(c) > 255);

ALTER TABLE agent.skill_files ADD CHECK (agent.valid_relative_path(path));

-- The skills mounted for an agent, as one hash: a session built under one
-- hash is rebuilt when it changes.
CREATE FUNCTION agent._skills_hash(agent uuid) RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent
	RETURN (SELECT encode(sha256(convert_to(coalesce(string_agg(s.id::text || ':' || s.name || ':' || s.version,
														 ',' ORDER BY s.name, s.id), ''), 'UTF8')), 'hex')
			  FROM agent.agent_skills a JOIN agent.skills s ON s.id = a.skill_id
			 WHERE a.agent_id = _skills_hash.agent);

-- Create a new version of a skill from a set of files (jsonb object
-- path → base64 content).  Versions are immutable; returns the new id.
CREATE FUNCTION agent.create_skill(name text, files jsonb, description text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_id		uuid;
	v_version	integer;
	f			record;
	v_content	bytea;
	v_bytes		bigint := 0::bigint;
	n_files		integer := 0;
BEGIN
	PERFORM agent._require_tenant(false);
	IF name IS NULL OR files IS NULL THEN
		RAISE EXCEPTION 'name and files (a json object of path: base64 content) are required'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF jsonb_typeof(files) <> 'object' THEN
		RAISE EXCEPTION 'files must be a json object of path: base64 content'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = pg_catalog.format('It is a json %s.', jsonb_typeof(files));
	END IF;
	PERFORM agent._check_text(description, 'description', 'description');
	IF name !~ '^[a-z0-9][a-z0-9_.-]{0,63}$' THEN
		RAISE EXCEPTION 'invalid skill name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 64 characters: lower-case letters, digits, "_", "." and "-", starting with a letter or digit.';
	END IF;
	PERFORM pg_advisory_xact_lock(hashtext('agent.skills:' || agent.current_org() || ':' || name));
	SELECT coalesce(max(s.version), 0) + 1 INTO v_version
	  FROM agent.skills s WHERE s.org_id = agent.current_org() AND s.name = create_skill.name;
	INSERT INTO agent.skills (org_id, name, version, description)
	VALUES (agent.current_org(), create_skill.name, v_version, create_skill.description)
	RETURNING id INTO v_id;
	FOR f IN SELECT key, value FROM jsonb_each_text(files) LOOP
		n_files := n_files + 1;
		IF n_files > agent._setting('max_skill_files')::integer THEN
			RAISE EXCEPTION 'skill "%" has too many files', create_skill.name
				USING ERRCODE = 'program_limit_exceeded',
					  DETAIL = format('A skill version may hold at most %s files (agent.settings max_skill_files).',
									  agent._setting('max_skill_files'));
		END IF;
		IF NOT agent.valid_relative_path(f.key) THEN
			RAISE EXCEPTION 'invalid skill file path "%"', agent._shown(f.key)
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'Use a relative path without "..", empty components or control characters.';
		END IF;
		BEGIN
			v_content := decode(f.value, 'base64');
		EXCEPTION WHEN invalid_parameter_value THEN
			RAISE EXCEPTION 'the content of skill file "%" is not valid base64', agent._shown(f.key)
				USING ERRCODE = 'invalid_parameter_value';
		END;
		v_bytes := v_bytes + octet_length(v_content);
		IF v_bytes > agent._setting('max_skill_bytes')::bigint THEN
			RAISE EXCEPTION 'skill "%" is too large', create_skill.name
				USING ERRCODE = 'program_limit_exceeded',
					  DETAIL = format('The files of a skill version may hold at most %s bytes (agent.settings max_skill_bytes).',
									  agent._setting('max_skill_bytes'));
		END IF;
		INSERT INTO agent.skill_files (skill_id, path, content, executable)
		VALUES (v_id, f.key, v_content, f.key ~ '\.(sh|py|js)$');
	END LOOP;
	PERFORM agent._use_storage(agent.current_org(), v_bytes, format('skill "%s"', create_skill.name));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.create_skill(text, jsonb, text) IS
	'create the next version of a skill of the current org from {path: base64 content}';

-- Attach / detach a skill to an agent of the current workspace.
CREATE FUNCTION agent.set_agent_skill(agent uuid, skill uuid, attached boolean DEFAULT true)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant();
	IF set_agent_skill.agent IS NULL OR skill IS NULL OR attached IS NULL THEN
		RAISE EXCEPTION 'agent, skill and attached must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.agents a WHERE a.id = set_agent_skill.agent
					  AND a.org_id = agent.current_org() AND a.workspace_id = agent.current_workspace()) THEN
		RAISE EXCEPTION 'agent % does not exist', set_agent_skill.agent USING ERRCODE = 'no_data_found';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.skills s WHERE s.id = skill AND s.org_id = agent.current_org()) THEN
		RAISE EXCEPTION 'skill % does not exist', skill USING ERRCODE = 'no_data_found';
	END IF;
	IF attached THEN
		INSERT INTO agent.agent_skills (org_id, workspace_id, agent_id, skill_id)
		VALUES (agent.current_org(), agent.current_workspace(), set_agent_skill.agent, skill)
		ON CONFLICT DO NOTHING;
	ELSE
		DELETE FROM agent.agent_skills a WHERE a.agent_id = set_agent_skill.agent AND a.skill_id = skill;
	END IF;
	PERFORM agent._audit(agent.current_org(), agent.current_workspace(),
						 CASE WHEN attached THEN 'skill.attached' ELSE 'skill.detached' END, NULL,
						 current_user, jsonb_build_object('agent_id', set_agent_skill.agent, 'skill_id', skill));
END
$$;

-- ----------------------------------------------------------------------
-- Sessions
-- ----------------------------------------------------------------------

CREATE TABLE agent.sessions (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	conversation_id uuid NOT NULL,
	generation		integer NOT NULL CHECK (generation > 0),
	skills_hash		text NOT NULL,
	state			text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'ended')),
	end_reason		text,
	created_at		timestamptz NOT NULL DEFAULT now(),
	last_used_at	timestamptz NOT NULL DEFAULT now(),
	ended_at		timestamptz,
	-- the runner host its workspace is on (45_runners.sql); NULL: the
	-- in-database supervisor's host
	runner_id		uuid REFERENCES agent.runners (id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE (conversation_id, generation)
);
CREATE UNIQUE INDEX sessions_one_active ON agent.sessions (conversation_id) WHERE state = 'active';
-- What the session's workspace held after its last run (the supervisor
-- measures it), for the org's disk budget (max_session_disk_per_org).
ALTER TABLE agent.sessions
	ADD COLUMN disk_bytes bigint NOT NULL DEFAULT 0,
	ADD COLUMN disk_entries integer NOT NULL DEFAULT 0;
CREATE INDEX sessions_org_active_idx ON agent.sessions (org_id, last_used_at) WHERE state = 'active';
-- A runner's live sessions (agent.runner_live_sessions).
CREATE INDEX sessions_runner_active_idx ON agent.sessions (runner_id) WHERE state = 'active';
COMMENT ON TABLE agent.sessions IS 'a conversation''s sandbox workspace, kept between its runs';

-- Files of a conversation (or of a conversation-less run).  A name may have
-- several rows over time; the newest saved row of a name is its current
-- content.  Rows with status skipped/failed record what could not be
-- returned and why; they never carry content.
CREATE TABLE agent.files (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	conversation_id uuid,
	invocation_id	uuid REFERENCES agent.invocations (id),
	name			text NOT NULL,
	origin			text NOT NULL CHECK (origin IN ('uploaded', 'produced')),
	-- pruned: its content was removed by retention (70_retention.sql)
	status			text NOT NULL DEFAULT 'saved' CHECK (status IN ('saved', 'skipped', 'failed', 'pruned')),
	reason			text,
	content			bytea,
	size			bigint,
	sha256			text,
	content_type	text,
	created_by		text,
	created_at		timestamptz NOT NULL DEFAULT clock_timestamp(),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	CHECK ((status = 'saved') = (content IS NOT NULL)),
	CHECK (status = 'saved' OR reason IS NOT NULL),
	CHECK (conversation_id IS NOT NULL OR invocation_id IS NOT NULL)
);
CREATE INDEX files_conversation_idx ON agent.files (conversation_id, name, created_at);
CREATE INDEX files_invocation_idx ON agent.files (invocation_id);
COMMENT ON TABLE agent.files IS 'uploaded and produced files; they outlive every sandbox';

-- Which file rows a session's workspace already holds.
CREATE TABLE agent.session_files (
	session_id	uuid NOT NULL REFERENCES agent.sessions (id) ON DELETE CASCADE,
	file_id		uuid NOT NULL REFERENCES agent.files (id),
	PRIMARY KEY (session_id, file_id)
);

-- (agent.invocations.session_id is declared with the table; its key here)
ALTER TABLE agent.invocations ADD FOREIGN KEY (session_id) REFERENCES agent.sessions (id);

-- The current saved file of each name of a conversation.
CREATE FUNCTION agent._current_files(conversation uuid)
	RETURNS SETOF agent.files
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent
AS $$
	SELECT DISTINCT ON (f.name) f.*
	  FROM agent.files f
	 WHERE f.conversation_id = conversation AND f.status = 'saved'
	 ORDER BY f.name, f.created_at DESC, f.id DESC
$$;

-- ----------------------------------------------------------------------
-- Files API
-- ----------------------------------------------------------------------

CREATE FUNCTION agent.upload_file(conversation uuid, name text, content bytea,
								  uploaded_by text, content_type text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
	a		agent.agents;
	v_id	uuid;
	v_total bigint;
BEGIN
	PERFORM agent._require_tenant();
	IF conversation IS NULL OR name IS NULL OR content IS NULL OR uploaded_by IS NULL THEN
		RAISE EXCEPTION 'conversation, name, content and uploaded_by must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(uploaded_by, 'uploaded_by');
	PERFORM agent._check_text(content_type, 'content_type', 'content_type', true);
	-- Serialises uploads of a conversation with each other and with the
	-- claim of its runs; FOR NO KEY UPDATE, so that a caller holding it does
	-- not block the FOR KEY SHARE of the supervisor's inserts (files,
	-- sessions) that reference the conversation.
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	SELECT * INTO a FROM agent.agents x WHERE x.id = c.agent_id;
	IF NOT a.file_upload_enabled THEN
		RAISE EXCEPTION 'agent "%" does not accept file uploads', a.name
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Enable file uploads for the agent with agent.set_agent_file_upload().';
	END IF;
	IF NOT agent.valid_relative_path(name) THEN
		RAISE EXCEPTION 'invalid file name "%"', agent._shown(name)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A name is at most 1024 bytes, each component at most 255.',
				  HINT = 'Use a relative path without "..", empty components or control characters.';
	END IF;
	IF octet_length(content) > agent._setting('max_upload_bytes')::bigint THEN
		RAISE EXCEPTION 'file "%" is too large (% bytes)', agent._shown(name), octet_length(content)
			USING ERRCODE = 'program_limit_exceeded',
				  HINT = format('The limit is %s bytes (agent.settings max_upload_bytes).',
								agent._setting('max_upload_bytes'));
	END IF;
	SELECT coalesce(sum(f.size), 0)::bigint INTO v_total FROM agent._current_files(conversation) f
	 WHERE f.name <> upload_file.name;
	IF v_total + octet_length(content) > agent._setting('max_conversation_bytes')::bigint THEN
		RAISE EXCEPTION 'the files of conversation % would exceed % bytes', conversation,
			agent._setting('max_conversation_bytes')
			USING ERRCODE = 'program_limit_exceeded';
	END IF;
	PERFORM agent._use_storage(c.org_id, octet_length(content), format('file "%s"', left(name, 256)));
	INSERT INTO agent.files (org_id, workspace_id, conversation_id, name, origin, content, size,
							 sha256, content_type, created_by)
	VALUES (c.org_id, c.workspace_id, c.id, name, 'uploaded', content, octet_length(content),
			encode(sha256(content), 'hex'), content_type, uploaded_by)
	RETURNING id INTO v_id;
	PERFORM agent._audit(c.org_id, c.workspace_id, 'file.uploaded', NULL, uploaded_by,
						 jsonb_build_object('file_id', v_id, 'conversation_id', c.id, 'name', name,
											'size', octet_length(content),
											'sha256', encode(sha256(content), 'hex')));
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.upload_file(uuid, text, bytea, text, text) IS
	'store a file with a conversation; it is in /workspace before the conversation''s next run';

CREATE FUNCTION agent.list_files(conversation uuid)
	RETURNS TABLE (id uuid, name text, origin text, status text, reason text, size bigint,
				   sha256 text, content_type text, invocation_id uuid, created_at timestamptz,
				   current boolean)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF conversation IS NULL THEN
		RAISE EXCEPTION 'conversation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_tenant();
	IF NOT EXISTS (SELECT 1 FROM agent.conversations c WHERE c.id = conversation
					  AND c.org_id = agent.current_org() AND c.workspace_id = agent.current_workspace()) THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	RETURN QUERY
		SELECT f.id, f.name, f.origin, f.status, f.reason, f.size, f.sha256, f.content_type,
			   f.invocation_id, f.created_at,
			   f.id IN (SELECT cf.id FROM agent._current_files(conversation) cf)
		  FROM agent.files f
		 WHERE f.conversation_id = conversation
		 ORDER BY f.created_at, f.name;
END
$$;
COMMENT ON FUNCTION agent.list_files(uuid) IS
	'every file row of a conversation: uploads, returned files, and files that could not be returned (with the reason)';

CREATE FUNCTION agent.download_file(file uuid)
	RETURNS TABLE (name text, content_type text, size bigint, sha256 text, content bytea)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	f agent.files;
BEGIN
	IF file IS NULL THEN
		RAISE EXCEPTION 'file id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_tenant();
	SELECT * INTO f FROM agent.files x
	 WHERE x.id = file AND x.org_id = agent.current_org() AND x.workspace_id = agent.current_workspace();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'file % does not exist', file
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF f.status <> 'saved' THEN
		RAISE EXCEPTION 'file "%" was not saved', f.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = f.reason;
	END IF;
	RETURN QUERY SELECT f.name, f.content_type, f.size, f.sha256, f.content;
END
$$;

-- Delete a file from a conversation: every saved version of the name
-- loses its content (status pruned, size and sha256 kept, as retention
-- does), the org's storage goes down by their size, and the conversation's
-- session, if it holds one of them, ends, so that its next run starts in a
-- workspace rebuilt from the files left (the file is gone from /workspace
-- too).  Refused while a run of the conversation is in flight.  Returns the
-- bytes freed.
CREATE FUNCTION agent.delete_file(conversation uuid, name text, deleted_by text)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c		agent.conversations;
	s		agent.sessions;
	v_ids	uuid[];
	v_bytes	bigint;
	v_sha	text;
BEGIN
	PERFORM agent._require_tenant();
	IF conversation IS NULL OR name IS NULL OR deleted_by IS NULL THEN
		RAISE EXCEPTION 'conversation, name and deleted_by must not be null'
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(deleted_by, 'deleted_by');
	-- the lock uploads and the claim of the conversation's runs take
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	IF EXISTS (SELECT 1 FROM agent.invocations i
				WHERE i.conversation_id = c.id AND i.state IN ('provisioning', 'running')) THEN
		RAISE EXCEPTION 'a run of conversation % is in flight', c.id
			USING ERRCODE = 'object_in_use',
				  HINT = 'Delete the file once the run has ended (agent.wait()).';
	END IF;
	WITH d AS (
		SELECT f.id FROM agent.files f
		 WHERE f.conversation_id = c.id AND f.name = delete_file.name AND f.status = 'saved'
		   FOR UPDATE),
	u AS (
		UPDATE agent.files f
		   SET status = 'pruned', content = NULL,
			   reason = format('deleted by %s on %s', deleted_by, now()::date)
		  FROM d WHERE f.id = d.id
		RETURNING f.id, f.size, f.sha256, f.created_at)
	SELECT array_agg(u.id ORDER BY u.created_at), coalesce(sum(u.size), 0)::bigint,
		   (array_agg(u.sha256 ORDER BY u.created_at DESC))[1]
	  INTO v_ids, v_bytes, v_sha
	  FROM u;
	IF v_ids IS NULL THEN
		RAISE EXCEPTION 'file "%" does not exist in conversation %', agent._shown(name), c.id
			USING ERRCODE = 'no_data_found',
				  HINT = 'agent.list_files() lists the files of a conversation.';
	END IF;
	PERFORM agent._free_storage(c.org_id, v_bytes);
	PERFORM agent._audit(c.org_id, c.workspace_id, 'file.deleted', NULL, deleted_by,
						 jsonb_build_object('conversation_id', c.id, 'name', name,
											'file_ids', to_jsonb(v_ids), 'bytes', v_bytes,
											'sha256', v_sha));
	SELECT * INTO s FROM agent.sessions x
	 WHERE x.conversation_id = c.id AND x.state = 'active'
	   AND EXISTS (SELECT 1 FROM agent.session_files sf
				   WHERE sf.session_id = x.id AND sf.file_id = ANY (v_ids))
	   FOR UPDATE;
	IF FOUND THEN
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'file_deleted', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', NULL, deleted_by,
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'file_deleted'));
		PERFORM agent._wake_supervisor();	-- it deletes the workspace
	END IF;
	RETURN v_bytes;
END
$$;
COMMENT ON FUNCTION agent.delete_file(uuid, text, text) IS
	'delete a file (every saved version of the name) from a conversation and its sandbox session; returns the bytes freed';

-- Delete a version of a skill of the current org that no agent has
-- attached: its files go, the org's storage goes down by their size.
-- Returns the bytes freed.
CREATE FUNCTION agent.delete_skill(skill uuid, deleted_by text)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	k		agent.skills;
	v_bytes	bigint;
	v_n		integer;
BEGIN
	PERFORM agent._require_tenant(false);
	IF skill IS NULL OR deleted_by IS NULL THEN
		RAISE EXCEPTION 'skill and deleted_by must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(deleted_by, 'deleted_by');
	SELECT * INTO k FROM agent.skills x
	 WHERE x.id = skill AND x.org_id = agent.current_org() FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'skill % does not exist', skill
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	-- (an attach takes the skill row's key share: it waits for this lock)
	SELECT count(*)::integer INTO v_n FROM agent.agent_skills a WHERE a.skill_id = k.id;
	IF v_n > 0 THEN
		RAISE EXCEPTION 'skill "%" version % is attached to % agent(s)', k.name, k.version, v_n
			USING ERRCODE = 'object_in_use',
				  HINT = 'Detach it first with agent.set_agent_skill(agent, skill, false).';
	END IF;
	SELECT coalesce(sum(octet_length(f.content)), 0)::bigint INTO v_bytes
	  FROM agent.skill_files f WHERE f.skill_id = k.id;
	DELETE FROM agent.skills x WHERE x.id = k.id;	-- its files with it
	PERFORM agent._free_storage(k.org_id, v_bytes);
	PERFORM agent._audit(k.org_id, NULL, 'skill.deleted', NULL, deleted_by,
						 jsonb_build_object('skill_id', k.id, 'name', k.name, 'version', k.version,
											'bytes', v_bytes));
	RETURN v_bytes;
END
$$;
COMMENT ON FUNCTION agent.delete_skill(uuid, text) IS
	'delete a skill version no agent has attached; returns the bytes freed';

-- ----------------------------------------------------------------------
-- Supervisor steps
-- ----------------------------------------------------------------------

-- Attach an invocation to its conversation's session, creating or
-- rebuilding it, on `runner` (NULL: the in-database supervisor).  Called in
-- the claim transaction with the conversation row locked, after the claim
-- checked that the session is not on another live runner
-- (agent._session_elsewhere): one that is on another host here is on a
-- runner that is gone, draining or removed, and is rebuilt on this one from
-- the files the database keeps (reason runner_gone).  Returns the session
-- and whether its workspace is new.
CREATE FUNCTION agent._session_for(inv agent.invocations, runner uuid,
								   OUT session_id uuid, OUT generation integer, OUT fresh boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	s		agent.sessions;
	v_hash	text := agent._skills_hash(inv.agent_id);
	v_why	text;
	v_prev	uuid;
BEGIN
	PERFORM agent._trim_session_disk(inv.org_id, inv.conversation_id);
	SELECT * INTO s FROM agent.sessions x
	 WHERE x.conversation_id = inv.conversation_id AND x.state = 'active' FOR UPDATE;
	IF FOUND THEN
		v_prev := s.runner_id;
		IF s.runner_id IS DISTINCT FROM _session_for.runner THEN
			v_why := 'runner_gone';
		ELSIF s.last_used_at < now() - agent._setting('session_idle_timeout')::interval THEN
			v_why := 'expired';
		ELSIF s.skills_hash <> v_hash THEN
			v_why := 'skills_changed';
		END IF;
		IF v_why IS NULL THEN
			UPDATE agent.sessions x SET last_used_at = now() WHERE x.id = s.id;
			session_id := s.id;
			generation := s.generation;
			fresh := false;
			RETURN;
		END IF;
		UPDATE agent.sessions x SET state = 'ended', end_reason = v_why, ended_at = now()
		 WHERE x.id = s.id;
	END IF;

	INSERT INTO agent.sessions (org_id, workspace_id, conversation_id, generation, skills_hash,
								runner_id)
	VALUES (inv.org_id, inv.workspace_id, inv.conversation_id,
			coalesce((SELECT max(x.generation) FROM agent.sessions x
					   WHERE x.conversation_id = inv.conversation_id), 0) + 1,
			v_hash, _session_for.runner)
	RETURNING * INTO s;
	PERFORM agent._audit(inv.org_id, inv.workspace_id,
						 CASE WHEN v_why IS NULL AND s.generation = 1 THEN 'session.created'
							  ELSE 'session.rebuilt' END,
						 inv.id, 'supervisor',
						 jsonb_build_object('session_id', s.id, 'generation', s.generation,
											'conversation_id', inv.conversation_id,
											'reason', coalesce(v_why,
															   CASE WHEN s.generation = 1 THEN 'new'
																	ELSE 'ended' END),
											'runner_id', _session_for.runner)
						 || CASE WHEN v_why = 'runner_gone'
								 THEN jsonb_build_object('previous_runner_id', v_prev)
								 ELSE '{}'::jsonb END);
	session_id := s.id;
	generation := s.generation;
	fresh := true;
END
$$;

-- The files to write into an invocation's workspace before it runs: the
-- conversation's current files the session does not hold yet.  Marks them
-- as held.
CREATE FUNCTION agent._files_to_place(invocation uuid)
	RETURNS TABLE (name text, content bytea)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r agent.invocations;
	f agent.files;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
	IF r.session_id IS NULL THEN
		RETURN;
	END IF;
	FOR f IN
		SELECT * FROM agent._current_files(r.conversation_id) cf
		 WHERE NOT EXISTS (SELECT 1 FROM agent.session_files sf
							WHERE sf.session_id = r.session_id AND sf.file_id = cf.id)
		 ORDER BY cf.name
	LOOP
		INSERT INTO agent.session_files (session_id, file_id) VALUES (r.session_id, f.id);
		name := f.name;
		content := f.content;
		RETURN NEXT;
	END LOOP;
END
$$;

-- Keep the session workspaces of an org within max_session_disk_per_org:
-- end its least recently used idle sessions (not `keep`'s, none with a run
-- in flight) until what the others held after their last run fits.  Their
-- files stay in the database and are put back if the conversation runs
-- again; the supervisor deletes the workspaces.
CREATE FUNCTION agent._trim_session_disk(org uuid, keep uuid) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_budget	bigint := agent._setting('max_session_disk_per_org')::bigint;
	v_total		bigint;
	s			agent.sessions;
	n			integer := 0;
BEGIN
	SELECT coalesce(sum(x.disk_bytes), 0)::bigint INTO v_total FROM agent.sessions x
	 WHERE x.org_id = org AND x.state = 'active';
	IF v_total <= v_budget THEN
		RETURN 0;
	END IF;
	FOR s IN
		SELECT x.* FROM agent.sessions x
		 WHERE x.org_id = org AND x.state = 'active' AND x.conversation_id IS DISTINCT FROM keep
		   AND NOT EXISTS (SELECT 1 FROM agent.invocations i
							WHERE i.conversation_id = x.conversation_id
							  AND i.state IN ('provisioning', 'running'))
		 ORDER BY x.last_used_at
		   FOR UPDATE SKIP LOCKED
	LOOP
		EXIT WHEN v_total <= v_budget;
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'disk_budget', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', NULL, 'supervisor',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'disk_budget', 'disk_bytes', s.disk_bytes,
												'org_disk_bytes', v_total, 'budget', v_budget));
		v_total := v_total - s.disk_bytes;
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

-- A session's bookkeeping after one of its runs, in the finishing
-- transaction: idle time counts from now; what the workspace holds; and,
-- when the run left it over its limits (reset names why), the session ends
-- so that the next run gets a fresh workspace with the conversation's
-- files put back, never a workspace it cannot start in.
CREATE FUNCTION agent._session_after_run(r agent.invocations, disk_bytes bigint,
										 disk_entries integer, reset text)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	s agent.sessions;
BEGIN
	UPDATE agent.sessions x
	   SET last_used_at = now(),
		   disk_bytes = coalesce(_session_after_run.disk_bytes, x.disk_bytes),
		   disk_entries = coalesce(_session_after_run.disk_entries, x.disk_entries)
	 WHERE x.id = r.session_id AND x.state = 'active'
	RETURNING * INTO s;
	IF FOUND AND reset IS NOT NULL THEN
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'workspace_over_limit', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.ended', r.id, 'supervisor',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'reason', 'workspace_over_limit', 'detail', reset,
												'disk_bytes', disk_bytes, 'disk_entries', disk_entries));
	END IF;
END
$$;

-- Stage one file a run produced (or could not return) with its result,
-- before agent._finish_invocation(); it reaches agent.files when the result
-- is applied.  Fenced: nothing (NULL) once the run is no longer in flight.
CREATE FUNCTION agent._store_produced_file(invocation uuid, name text, status text,
										   reason text, content bytea)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_seq integer;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		RETURN NULL;
	END IF;
	SELECT coalesce(max(x.seq), 0) + 1 INTO v_seq FROM agent.run_result_files x
	 WHERE x.invocation_id = invocation;
	INSERT INTO agent.run_result_files (invocation_id, seq, name, status, reason, content)
	VALUES (invocation, v_seq, coalesce(name, '?'), status, reason, content);
	RETURN v_seq;
END
$$;

-- Stage, in one statement, the entries a run left that it does not return
-- (status skipped or failed, a reason, no content), numbered after what is
-- staged already: a run may report some ten thousand of them.
CREATE FUNCTION agent._store_skipped_files(invocation uuid, names text[], statuses text[],
										   reasons text[])
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_seq	integer;
	n		integer;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		RETURN NULL;
	END IF;
	SELECT coalesce(max(x.seq), 0) INTO v_seq FROM agent.run_result_files x
	 WHERE x.invocation_id = invocation;
	INSERT INTO agent.run_result_files (invocation_id, seq, name, status, reason, content)
	SELECT invocation, v_seq + u.o::integer, coalesce(u.name, '?'), u.status, u.reason, NULL
	  FROM unnest(names, statuses, reasons) WITH ORDINALITY AS u(name, status, reason, o);
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$$;

-- Record one file a run returned, when its result is applied: a saved file
-- counts against the org's storage quota (past it, the file is recorded as
-- skipped, with the reason).
CREATE FUNCTION agent._save_produced_file(r agent.invocations, name text, status text,
										  reason text, content bytea)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_id	uuid;
	v_name	text := name;
BEGIN
	-- A name the host cannot represent as text is recorded, not dropped.
	IF v_name IS NULL OR NOT agent.valid_relative_path(v_name) THEN
		status := 'skipped';
		reason := coalesce(reason || '; ', '') || 'invalid file name';
		content := NULL;
		v_name := '?';
	END IF;
	IF status = 'saved' AND NOT agent._storage_fits(r.org_id, octet_length(content)) THEN
		status := 'skipped';
		reason := format('the organization''s storage quota (%s bytes) is exhausted',
						 agent._org_storage_limit(r.org_id));
	END IF;
	IF status = 'saved' THEN
		PERFORM agent._use_storage(r.org_id, octet_length(content), format('file "%s"', v_name), true);
	END IF;
	INSERT INTO agent.files (org_id, workspace_id, conversation_id, invocation_id, name, origin,
							 status, reason, content, size, sha256, created_by)
	VALUES (r.org_id, r.workspace_id, r.conversation_id, r.id, v_name, 'produced', status,
			CASE WHEN status = 'saved' THEN NULL ELSE reason END,
			CASE WHEN status = 'saved' THEN content END,
			octet_length(content),
			CASE WHEN status = 'saved' THEN encode(sha256(content), 'hex') END,
			'supervisor')
	RETURNING id INTO v_id;
	IF status = 'saved' AND r.session_id IS NOT NULL THEN
		-- The workspace already holds it: do not write it back next time.
		INSERT INTO agent.session_files (session_id, file_id) VALUES (r.session_id, v_id);
	END IF;
	RETURN v_id;
END
$$;

-- End sessions idle for longer than session_idle_timeout (or as of a given
-- time) whose conversation has nothing provisioning or running.  Their
-- workspaces are deleted by the supervisor (woken at commit).  Scheduled
-- with pg_cron when it is installed.
CREATE FUNCTION agent.expire_idle_sessions(as_of timestamptz DEFAULT now())
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	s	agent.sessions;
	n	integer := 0;
BEGIN
	as_of := coalesce(as_of, now());	-- like expire_pending_approvals()
	FOR s IN
		SELECT x.* FROM agent.sessions x
		  JOIN agent.conversations c ON c.id = x.conversation_id
		 WHERE x.state = 'active'
		   AND x.last_used_at < as_of - agent._setting('session_idle_timeout')::interval
		   FOR NO KEY UPDATE OF x, c SKIP LOCKED
	LOOP
		IF EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.conversation_id = s.conversation_id
					  AND i.state IN ('provisioning', 'running')) THEN
			CONTINUE;
		END IF;
		UPDATE agent.sessions x SET state = 'ended', end_reason = 'expired', ended_at = now()
		 WHERE x.id = s.id;
		PERFORM agent._audit(s.org_id, s.workspace_id, 'session.expired', NULL, 'system',
							 jsonb_build_object('session_id', s.id, 'generation', s.generation,
												'conversation_id', s.conversation_id,
												'idle_since', s.last_used_at));
		n := n + 1;
	END LOOP;
	IF n > 0 THEN
		PERFORM agent._wake_supervisor();
	END IF;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.expire_idle_sessions(timestamptz) IS
	'end idle conversation sessions; the supervisor deletes their workspaces';

-- Sessions whose workspace directory must be kept (for the supervisor).
CREATE FUNCTION agent._live_session_ids() RETURNS SETOF uuid
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT x.id FROM agent.sessions x WHERE x.state = 'active'
$$;

-- Skill versions attached to some agent: the supervisor deletes the
-- materialised copies of all others.
CREATE FUNCTION agent._skill_ids_in_use() RETURNS SETOF uuid
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT DISTINCT a.skill_id FROM agent.agent_skills a
$$;

-- ----------------------------------------------------------------------
-- Security
-- ----------------------------------------------------------------------

ALTER TABLE agent.skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.skill_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_skills ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.files ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.session_files ENABLE ROW LEVEL SECURITY;

CREATE POLICY backend_org ON agent.skills FOR SELECT TO agent_backend
	USING (org_id = agent.current_org());
CREATE POLICY backend_org ON agent.skill_files FOR SELECT TO agent_backend
	USING (EXISTS (SELECT 1 FROM agent.skills s WHERE s.id = skill_id AND s.org_id = agent.current_org()));
CREATE POLICY backend_workspace ON agent.agent_skills FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.sessions FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY backend_workspace ON agent.files FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());

CREATE POLICY auditor_read ON agent.skills FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.skill_files FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agent_skills FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.sessions FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.files FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.session_files FOR SELECT TO agent_auditor USING (true);

GRANT SELECT ON agent.skills, agent.skill_files, agent.agent_skills, agent.sessions, agent.files
	TO agent_backend;
GRANT SELECT ON agent.skills, agent.skill_files, agent.agent_skills, agent.sessions, agent.files,
	agent.session_files TO agent_auditor;

REVOKE ALL ON FUNCTION agent._session_for(agent.invocations, uuid), agent._files_to_place(uuid),
	agent._store_produced_file(uuid, text, text, text, bytea),
	agent._store_skipped_files(uuid, text[], text[], text[]),
	agent._save_produced_file(agent.invocations, text, text, text, bytea),
	agent._session_after_run(agent.invocations, bigint, integer, text),
	agent._trim_session_disk(uuid, uuid), agent._skill_ids_in_use(),
	agent._live_session_ids(), agent.expire_idle_sessions(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.upload_file(uuid, text, bytea, text, text),
	agent.list_files(uuid), agent.download_file(uuid), agent.delete_file(uuid, text, text),
	agent.delete_skill(uuid, text), agent.create_skill(text, jsonb, text),
	agent.set_agent_skill(uuid, uuid, boolean), agent.valid_relative_path(text) TO agent_backend;

-- ----------------------------------------------------------------------
-- pg_cron: schedule the maintenance jobs when pg_cron is installed here.
-- ----------------------------------------------------------------------

CREATE FUNCTION agent.schedule_maintenance(schedule text DEFAULT '* * * * *')
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
		RETURN 'pg_cron is not installed in this database; see docs/sessions.md to schedule '
			   'agent.expire_idle_sessions(), agent.expire_pending_approvals() and '
			   'agent.reap_expired_leases() from elsewhere';
	END IF;
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_expire_idle_sessions', schedule,
				   'SELECT agent.expire_idle_sessions()');
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_expire_pending_approvals', schedule,
				   'SELECT agent.expire_pending_approvals()');
	-- A backstop: the supervisor reaps every few seconds (docs/runners.md).
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_reap_expired_leases', schedule,
				   'SELECT agent.reap_expired_leases()');
	-- Hourly, whatever the schedule above (70_retention.sql).
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_prune_retention', '17 * * * *',
				   'CALL agent.prune_retention()');
	RETURN 'scheduled sandbox_ext_expire_idle_sessions, sandbox_ext_expire_pending_approvals and '
		   'sandbox_ext_reap_expired_leases (' || schedule || '), sandbox_ext_prune_retention (hourly)';
END
$$;
COMMENT ON FUNCTION agent.schedule_maintenance(text) IS
	'schedule agent.expire_idle_sessions(), agent.expire_pending_approvals(), agent.reap_expired_leases() and agent.prune_retention() with pg_cron (idempotent)';

-- Not while a dump is restored (session_replication_role = replica): the
-- dump of cron.job brings the jobs back (98_backup.sql).
SELECT agent.schedule_maintenance() WHERE pg_catalog.current_setting('session_replication_role') <> 'replica';
-- sandbox_ext install script, part 60: export of agent.tool_invocations and
-- agent.egress_connections to ClickHouse through logical replication
-- (docs/export.md).
--
-- Nothing here depends on the exported tables existing yet: the
-- publication, replica identity and wake-up triggers are created by
-- agent.export_setup(), which the exporter worker calls when
-- sandbox.clickhouse_url is set; the worker then creates the slot (in a
-- transaction of its own, as PostgreSQL requires) and copies the tables.
-- The publication keeps 0.1.0's name, sandbox_ext_tool_invocations, for
-- the slots that already decode with it.

-- One row per export slot: when the slot was created and the state of the
-- tables' copy that follows a slot creation (initial export or resync) or
-- the addition of a table to the publication: the copy goes through the
-- tables in order (tool_invocations, then egress_connections), with a
-- keyset cursor in each.
CREATE TABLE agent.export_state (
	slot_name        name PRIMARY KEY,
	slot_created_at  timestamptz,
	copy_lsn         pg_lsn,             -- not null while a copy is pending
	copy_after       uuid,               -- keyset cursor of the copy: invocation_id
	copied_rows      bigint NOT NULL DEFAULT 0,
	resync_requested boolean NOT NULL DEFAULT false,
	copy_relation    text CHECK (copy_relation IN ('tool_invocations', 'egress_connections')),
	                                     -- the table the copy is at (NULL: tool_invocations)
	copy_after_seq   integer             -- and seq, in egress_connections
);
COMMENT ON TABLE agent.export_state IS
	'ClickHouse export: slot creation and table copy progress, per slot (maintained by the exporter)';
SELECT pg_catalog.pg_extension_config_dump('agent.export_state', '');

CREATE FUNCTION agent._export_wake_trigger() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_export_wake_trigger'
	LANGUAGE C;

CREATE FUNCTION agent._export_wake(reset boolean DEFAULT false) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_export_wake'
	LANGUAGE C VOLATILE STRICT;

CREATE FUNCTION agent._export_worker_state(
	OUT state text, OUT pid integer, OUT rows_exported bigint, OUT batches bigint,
	OUT exported_lsn pg_lsn, OUT last_success timestamptz, OUT last_error text,
	OUT last_error_at timestamptz, OUT oldest_pending timestamptz,
	OUT retry_at timestamptz, OUT txns_skipped bigint, OUT anchors_published bigint,
	OUT last_anchor_at timestamptz)
	AS 'MODULE_PATHNAME', 'sandbox_export_worker_state'
	LANGUAGE C VOLATILE STRICT;

-- Create what the export needs in PostgreSQL, idempotently: the
-- publication of both tables (insert, update, delete; TRUNCATE is not
-- mirrored), REPLICA IDENTITY FULL (so a delete carries org and workspace,
-- the ClickHouse key), the commit-time wake-up triggers, and the
-- export_state row.  The slot itself is created by the exporter right
-- after, and the copy that follows its creation covers both tables.
--
-- A table added to the publication of a running export (an upgrade from
-- 0.1.0 adds agent.egress_connections) is locked against writers while it
-- is added: every transaction that wrote it before has committed, and is
-- in the snapshot of a copy read after this commits; every later one is
-- decoded with the table published.  A copy from the added table on is
-- recorded with the current WAL position as its version (above everything
-- streamed before, below everything streamed after this commit); a copy
-- still pending at an earlier table keeps its place.
CREATE FUNCTION agent.export_setup() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
	v_done text[] := '{}'::text[];
	v_tables text[] := ARRAY['tool_invocations', 'egress_connections'];
	v_added text;
	t text;
BEGIN
	FOREACH t IN ARRAY v_tables LOOP
		IF to_regclass('agent.' || t) IS NULL THEN
			RAISE EXCEPTION 'relation "agent.%" does not exist', t
				USING ERRCODE = 'undefined_table',
				      HINT = 'The export starts once the table exists.';
		END IF;
	END LOOP;
	IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'sandbox_ext_tool_invocations') THEN
		CREATE PUBLICATION sandbox_ext_tool_invocations
			FOR TABLE agent.tool_invocations, agent.egress_connections
			WITH (publish = 'insert, update, delete');
		v_done := v_done || 'publication'::text;
	ELSE
		FOREACH t IN ARRAY v_tables LOOP
			IF NOT EXISTS (SELECT 1 FROM pg_publication_tables p
			                WHERE p.pubname = 'sandbox_ext_tool_invocations'
			                  AND p.schemaname = 'agent' AND p.tablename = t) THEN
				EXECUTE format('LOCK TABLE agent.%I IN SHARE MODE', t);
				EXECUTE format('ALTER PUBLICATION sandbox_ext_tool_invocations ADD TABLE agent.%I', t);
				v_done := v_done || ('publication table ' || t);
				v_added := coalesce(v_added, t);
			END IF;
		END LOOP;
	END IF;
	FOREACH t IN ARRAY v_tables LOOP
		IF (SELECT relreplident FROM pg_class WHERE oid = to_regclass('agent.' || t)) <> 'f' THEN
			EXECUTE format('ALTER TABLE agent.%I REPLICA IDENTITY FULL', t);
			v_done := v_done || ('replica identity full on ' || t);
		END IF;
		IF NOT EXISTS (SELECT 1 FROM pg_trigger
		                WHERE tgrelid = to_regclass('agent.' || t)
		                  AND tgname = t || '_export_wake') THEN
			EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON agent.%I
			                FOR EACH STATEMENT EXECUTE FUNCTION agent._export_wake_trigger()',
			               t || '_export_wake', t);
			v_done := v_done || ('trigger on ' || t);
		END IF;
	END LOOP;
	INSERT INTO agent.export_state (slot_name) VALUES (v_slot)
		ON CONFLICT (slot_name) DO NOTHING;
	IF v_added IS NOT NULL THEN
		-- A slot that exists already: the added table's rows so far are
		-- copied, with versions above everything streamed before this and
		-- below everything after.  A copy still at an earlier table keeps
		-- its place; one at or past the added table starts it again.
		UPDATE agent.export_state e
		   SET copy_lsn = pg_current_wal_insert_lsn(),
		       copy_relation = CASE WHEN k.keep_place THEN 'tool_invocations' ELSE v_added END,
		       copy_after = CASE WHEN k.keep_place THEN e.copy_after END,
		       copy_after_seq = CASE WHEN k.keep_place THEN e.copy_after_seq END
		  FROM (SELECT x.copy_lsn IS NOT NULL AND v_added = 'egress_connections'
		               AND coalesce(x.copy_relation, 'tool_invocations') = 'tool_invocations' AS keep_place
		          FROM agent.export_state x WHERE x.slot_name = v_slot) k
		 WHERE e.slot_name = v_slot AND e.slot_created_at IS NOT NULL;
		IF FOUND THEN
			v_done := v_done || ('copy from ' || v_added);
		END IF;
	END IF;
	PERFORM agent._export_wake();
	RETURN CASE WHEN cardinality(v_done) = 0 THEN 'export objects already in place'
	            ELSE 'created: ' || array_to_string(v_done, ', ') END;
END
$$;
COMMENT ON FUNCTION agent.export_setup() IS
	'create the publication, replica identity and wake-up triggers of the ClickHouse export (idempotent)';

-- Recreate the slot and copy the whole tables to ClickHouse again: the way
-- back after the slot was lost (wal_status = lost) or dropped.  The
-- exporter does the work; the call returns at once.
CREATE FUNCTION agent.export_resync() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
BEGIN
	INSERT INTO agent.export_state AS e (slot_name, resync_requested) VALUES (v_slot, true)
		ON CONFLICT (slot_name) DO UPDATE SET resync_requested = true;
	-- At commit: wake the exporter and clear the error state that sent the
	-- caller here (a lost or missing slot), once the request is visible.
	PERFORM agent._export_wake(true);
	RETURN format('resync of slot %s requested: the exporter recreates it and copies agent.tool_invocations and agent.egress_connections', v_slot);
END
$$;
COMMENT ON FUNCTION agent.export_resync() IS
	'recreate the export slot and re-copy the exported tables to ClickHouse';

-- Remove the export's PostgreSQL objects: the slot (which otherwise keeps
-- WAL forever), the publication, the triggers and the state row.  Turn the
-- exporter off first, or it would create them again.
CREATE FUNCTION agent.export_drop() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
BEGIN
	IF current_setting('sandbox.clickhouse_url') <> '' THEN
		RAISE EXCEPTION 'cannot drop the export objects while the exporter is on'
			USING ERRCODE = 'object_in_use',
			      HINT = 'ALTER SYSTEM RESET sandbox.clickhouse_url; SELECT pg_reload_conf(); then call this again.';
	END IF;
	PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = v_slot;
	DROP PUBLICATION IF EXISTS sandbox_ext_tool_invocations;
	IF to_regclass('agent.tool_invocations') IS NOT NULL THEN
		DROP TRIGGER IF EXISTS tool_invocations_export_wake ON agent.tool_invocations;
	END IF;
	IF to_regclass('agent.egress_connections') IS NOT NULL THEN
		DROP TRIGGER IF EXISTS egress_connections_export_wake ON agent.egress_connections;
	END IF;
	DELETE FROM agent.export_state WHERE slot_name = v_slot;
	RETURN format('dropped slot %s, publication sandbox_ext_tool_invocations and the wake-up triggers', v_slot);
END
$$;
COMMENT ON FUNCTION agent.export_drop() IS
	'drop the ClickHouse export slot, publication and triggers (exporter must be off)';

CREATE FUNCTION agent.export_reset() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_export_reset'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION agent.export_reset() IS
	'leave the error or backoff state of the ClickHouse exporter and retry now';

-- The export as an operator sees it.  lag_bytes is WAL the slot still
-- holds; lag_seconds is the age of the oldest committed change to an
-- exported table not yet in ClickHouse (0 when caught up);
-- anchors_published and last_anchor_at tell the audit anchors' progress.
CREATE FUNCTION agent.export_status(
	OUT slot_name name, OUT state text, OUT exporter_pid integer,
	OUT confirmed_flush_lsn pg_lsn, OUT exported_lsn pg_lsn,
	OUT lag_bytes numeric, OUT lag_seconds double precision,
	OUT last_success timestamptz, OUT last_error text, OUT last_error_at timestamptz,
	OUT rows_exported bigint, OUT batches bigint, OUT txns_skipped bigint, OUT retry_at timestamptz,
	OUT wal_status text, OUT copy_pending boolean, OUT copied_rows bigint,
	OUT anchors_published bigint, OUT last_anchor_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT n.slot, w.state, w.pid,
	       s.confirmed_flush_lsn, w.exported_lsn,
	       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn),
	       coalesce(extract(epoch FROM clock_timestamp() - w.oldest_pending)::float8, 0),
	       w.last_success, w.last_error, w.last_error_at,
	       w.rows_exported, w.batches, w.txns_skipped, w.retry_at,
	       s.wal_status, coalesce(e.copy_lsn IS NOT NULL, false), e.copied_rows,
	       w.anchors_published, w.last_anchor_at
	  FROM (SELECT current_setting('sandbox.export_slot')::name AS slot) AS n
	  CROSS JOIN agent._export_worker_state() AS w
	  LEFT JOIN pg_replication_slots AS s ON s.slot_name = n.slot
	  LEFT JOIN agent.export_state AS e ON e.slot_name = n.slot
$$;
COMMENT ON FUNCTION agent.export_status() IS
	'state, position and lag of the ClickHouse export';

REVOKE ALL ON FUNCTION agent.export_setup(), agent.export_resync(), agent.export_reset(), agent.export_drop(),
	agent.export_status(), agent._export_wake(boolean), agent._export_worker_state() FROM PUBLIC;

-- ----------------------------------------------------------------------
-- The exporter's steps (owner only).  The exporter (src/export_stream.c)
-- runs no SQL but these calls; each is one short transaction of its own.
-- ----------------------------------------------------------------------

-- What exists of the export, in one look: the tables, the publication's
-- tables (both in it), the slot (lost or not, its confirmed and restart
-- positions) and the export_state row (slot recorded, resync asked, copy
-- pending, the table it is at and its cursor).
CREATE FUNCTION agent._export_objects(slot name, publication name,
	OUT table_exists boolean, OUT publication_ok boolean, OUT slot_exists boolean,
	OUT slot_lost boolean, OUT confirmed_flush_lsn pg_lsn, OUT state_row boolean,
	OUT slot_recorded boolean, OUT resync_requested boolean, OUT copy_lsn pg_lsn,
	OUT copy_after text, OUT restart_lsn pg_lsn, OUT copy_relation text,
	OUT copy_after_seq integer)
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.to_regclass('agent.tool_invocations') IS NOT NULL
		   AND pg_catalog.to_regclass('agent.egress_connections') IS NOT NULL,
		   (SELECT count(*) = 2 FROM pg_catalog.pg_publication_tables t
			 WHERE t.pubname = publication AND t.schemaname = 'agent'
			   AND t.tablename IN ('tool_invocations', 'egress_connections')),
		   s.slot_name IS NOT NULL, coalesce(s.wal_status = 'lost', false),
		   s.confirmed_flush_lsn,
		   e.slot_name IS NOT NULL, coalesce(e.slot_created_at IS NOT NULL, false),
		   coalesce(e.resync_requested, false), e.copy_lsn, e.copy_after::text,
		   s.restart_lsn, e.copy_relation, e.copy_after_seq
	  FROM (SELECT 1) AS one
	  LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = slot
	  LEFT JOIN agent.export_state e ON e.slot_name = slot
$$;

-- Create the slot; must be its transaction's first and only work.
CREATE FUNCTION agent._export_create_slot(slot name) RETURNS pg_lsn
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT s.lsn FROM pg_catalog.pg_create_logical_replication_slot(slot, 'pgoutput') s);

CREATE FUNCTION agent._export_drop_slot(slot name) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.pg_drop_replication_slot(s.slot_name)
	  FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot
$$;

-- The slot exists from consistent point `lsn` on: the tables must be
-- copied once, with a version below anything the slot streams.
CREATE FUNCTION agent._export_record_slot(slot name, lsn pg_lsn) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	INSERT INTO agent.export_state AS e (slot_name, slot_created_at, copy_lsn, copy_after,
										 copied_rows, resync_requested, copy_relation, copy_after_seq)
	VALUES (slot, now(), lsn, NULL, 0, false, 'tool_invocations', NULL)
	ON CONFLICT (slot_name) DO UPDATE SET slot_created_at = now(), copy_lsn = lsn,
		copy_after = NULL, copied_rows = 0, resync_requested = false,
		copy_relation = 'tool_invocations', copy_after_seq = NULL
$$;

-- A page of the table copy, keyed on invocation_id after `after`.
CREATE FUNCTION agent._export_copy_page(after uuid, max_rows integer)
	RETURNS SETOF agent.tool_invocations
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT * FROM agent.tool_invocations t
	 WHERE after IS NULL OR t.invocation_id > after
	 ORDER BY t.invocation_id LIMIT max_rows
$$;

-- A page of agent.egress_connections' copy, keyed on (invocation_id, seq)
-- after (after, after_seq).
CREATE FUNCTION agent._export_copy_egress_page(after uuid, after_seq integer, max_rows integer)
	RETURNS SETOF agent.egress_connections
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT * FROM agent.egress_connections c
	 WHERE after IS NULL OR (c.invocation_id, c.seq) > (after, after_seq)
	 ORDER BY c.invocation_id, c.seq LIMIT max_rows
$$;

-- A copied page of `relation`: move its cursor; after its last page the
-- copy moves on to the next table, and ends after egress_connections.
-- Fenced on the table the copy is at (NULL, from 0.1.0: tool_invocations).
CREATE FUNCTION agent._export_copy_progress(slot name, relation text, last uuid, last_seq integer,
											done boolean, rows bigint)
	RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	UPDATE agent.export_state e
	   SET copy_after = CASE WHEN done THEN NULL ELSE coalesce(last, e.copy_after) END,
		   copy_after_seq = CASE WHEN done THEN NULL ELSE coalesce(last_seq, e.copy_after_seq) END,
		   copied_rows = e.copied_rows + rows,
		   copy_relation = CASE WHEN NOT done THEN relation
								WHEN relation = 'tool_invocations' THEN 'egress_connections' END,
		   copy_lsn = CASE WHEN done AND relation = 'egress_connections' THEN NULL ELSE e.copy_lsn END
	 WHERE e.slot_name = slot AND e.copy_lsn IS NOT NULL
	   AND coalesce(e.copy_relation, 'tool_invocations') = relation
$$;

-- Move the slot forward to target (never backwards).
CREATE FUNCTION agent._export_advance_slot(slot name, target pg_lsn) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.pg_replication_slot_advance(s.slot_name, target)
	  FROM pg_catalog.pg_replication_slots s
	 WHERE s.slot_name = slot AND s.confirmed_flush_lsn < target
$$;

-- Up to max_changes changes of the slot, up to the WAL flushed now (which
-- is returned with each), without consuming them.
CREATE FUNCTION agent._export_peek(slot name, publication name, max_changes integer)
	RETURNS TABLE (upto pg_lsn, data bytea)
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT f.lsn, c.data
	  FROM (SELECT pg_catalog.pg_current_wal_flush_lsn() AS lsn) f
	  LEFT JOIN LATERAL pg_catalog.pg_logical_slot_peek_binary_changes(slot, f.lsn, max_changes,
			'proto_version', '1', 'publication_names', publication::text) c ON true
$$;

REVOKE ALL ON FUNCTION agent._export_objects(name, name), agent._export_create_slot(name),
	agent._export_drop_slot(name), agent._export_record_slot(name, pg_lsn),
	agent._export_copy_page(uuid, integer), agent._export_copy_egress_page(uuid, integer, integer),
	agent._export_copy_progress(name, text, uuid, integer, boolean, bigint),
	agent._export_advance_slot(name, pg_lsn), agent._export_peek(name, name, integer) FROM PUBLIC;
-- Retention: how long the bulky content of a run is kept, per org, and
-- the batched pruning that enforces it (docs/operations.md, "Retention").
--
-- Four kinds of content, each with a default in agent.settings and an
-- optional per-org value in agent.org_retention (the operator's, like the
-- limits of 14_limits.sql):
--
--   output          agent.invocation_output chunks (by the chunk's created_at)
--   previews        agent.agent_tool_calls.output_preview (by the call's created_at)
--   produced_files  agent.files of origin 'produced' (by created_at)
--   uploaded_files  agent.files of origin 'uploaded' (by created_at)
--
-- A value is an interval, or 'forever'.  Pruning keeps the row and what
-- identifies the content (its sha256 and size, and when it was pruned) and
-- drops only the content: an output chunk's data becomes '', a preview
-- NULL, a file's content NULL with status 'pruned'.  The audit trail is
-- not pruned (its chain is the point), and neither are agent.invocations
-- and agent.tool_invocations (the exported analytics row: untouched, so
-- the export stays exactly once).  The bytes pruned are given back to the
-- org's storage count (agent.org_usage).
--
-- agent.prune_retention() (a procedure, scheduled hourly with pg_cron by
-- agent.schedule_maintenance()) works one org and one kind at a time, in
-- batches of at most `batch` rows, each batch its own transaction that
-- locks only the rows it prunes (FOR UPDATE SKIP LOCKED: a row someone
-- holds is left for the next round) and the org's usage row at the end.

INSERT INTO agent.settings (key, value, description) VALUES
	('retention_output', '30 days',
	 'how long the output chunks of a run are kept before agent.prune_retention() empties them (an interval, or forever)'),
	('retention_previews', '90 days',
	 'how long the output preview of a tool call is kept (an interval, or forever)'),
	('retention_produced_files', '90 days',
	 'how long the content of a file a run produced is kept (an interval, or forever)'),
	('retention_uploaded_files', 'forever',
	 'how long the content of an uploaded conversation file is kept (an interval, or forever)'),
	('retention_batch', '1000',
	 'rows agent.prune_retention() prunes per transaction');

CREATE TABLE agent.org_retention (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	output			text,
	previews		text,
	produced_files	text,
	uploaded_files	text,
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE agent.org_retention IS
	'per-org retention of run content (NULL: the retention_* default in agent.settings)';
-- Read by the org's backend and admin (what is kept, for how long), by the
-- auditor; written by the operator only (set_org_retention).
ALTER TABLE agent.org_retention ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_read ON agent.org_retention FOR SELECT TO agent_backend, agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY auditor_read ON agent.org_retention FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.org_retention TO agent_backend, agent_admin, agent_auditor;

-- What pruning leaves: the content's hash and size, and when.
ALTER TABLE agent.invocation_output
	ADD COLUMN pruned_at timestamptz,
	ADD COLUMN data_bytes integer,
	ADD COLUMN data_sha256 text;
COMMENT ON COLUMN agent.invocation_output.pruned_at IS
	'when retention emptied data (data_bytes and data_sha256 describe what it held)';
CREATE INDEX invocation_output_retention_idx ON agent.invocation_output (org_id, created_at)
	WHERE pruned_at IS NULL;

ALTER TABLE agent.agent_tool_calls
	ADD COLUMN preview_pruned_at timestamptz,
	ADD COLUMN preview_bytes integer,
	ADD COLUMN preview_sha256 text;
COMMENT ON COLUMN agent.agent_tool_calls.preview_pruned_at IS
	'when retention removed output_preview (preview_bytes and preview_sha256 describe it)';
CREATE INDEX agent_tool_calls_retention_idx ON agent.agent_tool_calls (org_id, created_at)
	WHERE output_preview IS NOT NULL;

-- (a pruned file keeps size and sha256, which it always had)
CREATE INDEX files_retention_idx ON agent.files (org_id, origin, created_at)
	WHERE status = 'saved';

-- The retention of one kind for one org: the interval, or NULL for forever.
-- A malformed value is a broken configuration, reported as such.
CREATE FUNCTION agent.retention_of(org uuid, kind text) RETURNS interval
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v	text;
BEGIN
	IF kind IS NULL OR kind NOT IN ('output', 'previews', 'produced_files', 'uploaded_files') THEN
		RAISE EXCEPTION 'unknown retention kind "%"', agent._shown(kind)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'The kinds are output, previews, produced_files and uploaded_files.';
	END IF;
	SELECT CASE kind WHEN 'output' THEN r.output WHEN 'previews' THEN r.previews
					 WHEN 'produced_files' THEN r.produced_files ELSE r.uploaded_files END
	  INTO v FROM agent.org_retention r WHERE r.org_id = org;
	v := coalesce(v, agent._setting('retention_' || kind));
	IF v = 'forever' THEN
		RETURN NULL;
	END IF;
	RETURN v::interval;
EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
	RAISE EXCEPTION 'retention of % is not an interval or forever: "%"', kind, agent._shown(v)
		USING ERRCODE = 'invalid_parameter_value';
END
$$;
COMMENT ON FUNCTION agent.retention_of(uuid, text) IS
	'how long an org keeps one kind of run content (NULL: forever)';

-- Set an org's retention (NULL: the default).  The operator's (owner).
CREATE FUNCTION agent.set_org_retention(org uuid, output text DEFAULT NULL, previews text DEFAULT NULL,
										produced_files text DEFAULT NULL, uploaded_files text DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v	text;
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = org) THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	PERFORM agent._check_text(output, 'output', 'retention'),
			agent._check_text(previews, 'previews', 'retention'),
			agent._check_text(produced_files, 'produced_files', 'retention'),
			agent._check_text(uploaded_files, 'uploaded_files', 'retention');
	FOREACH v IN ARRAY ARRAY[output, previews, produced_files, uploaded_files] LOOP
		CONTINUE WHEN v IS NULL OR v = 'forever';
		BEGIN
			IF v::interval < interval '0' THEN
				RAISE EXCEPTION 'retention must not be negative: "%"', agent._shown(v)
					USING ERRCODE = 'invalid_parameter_value';
			END IF;
		EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
			RAISE EXCEPTION 'retention must be an interval or forever: "%"', agent._shown(v)
				USING ERRCODE = 'invalid_parameter_value';
		END;
	END LOOP;
	INSERT INTO agent.org_retention AS r (org_id, output, previews, produced_files, uploaded_files)
		VALUES (org, output, previews, produced_files, uploaded_files)
		ON CONFLICT (org_id) DO UPDATE
			SET output = excluded.output, previews = excluded.previews,
				produced_files = excluded.produced_files, uploaded_files = excluded.uploaded_files,
				updated_at = now();
	PERFORM agent._audit(org, NULL, 'org.retention_changed', NULL, current_user::text,
						 jsonb_build_object('output', output, 'previews', previews,
											'produced_files', produced_files,
											'uploaded_files', uploaded_files));
END
$$;
COMMENT ON FUNCTION agent.set_org_retention(uuid, text, text, text, text) IS
	'set how long an org keeps run output, previews, produced and uploaded files (NULL: the default; ''forever'')';

-- Prune one batch of one kind for one org: content created before cutoff.
-- Returns the rows pruned (fewer than batch: nothing is left).
CREATE FUNCTION agent._prune_batch(org uuid, kind text, cutoff timestamptz, batch integer)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n		integer;
	v_bytes	bigint;
BEGIN
	IF kind = 'output' THEN
		WITH c AS (
			SELECT o.invocation_id, o.seq FROM agent.invocation_output o
			 WHERE o.org_id = org AND o.created_at < cutoff AND o.pruned_at IS NULL
			 ORDER BY o.created_at LIMIT batch
			 FOR UPDATE SKIP LOCKED),
		u AS (
			UPDATE agent.invocation_output o
			   SET data_bytes = octet_length(o.data),
				   data_sha256 = encode(sha256(convert_to(o.data, 'UTF8')), 'hex'),
				   data = '', pruned_at = now()
			  FROM c WHERE o.invocation_id = c.invocation_id AND o.seq = c.seq
			RETURNING o.data_bytes)
		SELECT count(*)::integer, coalesce(sum(u.data_bytes), 0)::bigint INTO n, v_bytes FROM u;
	ELSIF kind = 'previews' THEN
		WITH c AS (
			SELECT t.id FROM agent.agent_tool_calls t
			 WHERE t.org_id = org AND t.created_at < cutoff AND t.output_preview IS NOT NULL
			 ORDER BY t.created_at LIMIT batch
			 FOR UPDATE SKIP LOCKED),
		u AS (
			UPDATE agent.agent_tool_calls t
			   SET preview_bytes = octet_length(t.output_preview),
				   preview_sha256 = encode(sha256(convert_to(t.output_preview, 'UTF8')), 'hex'),
				   output_preview = NULL, preview_pruned_at = now()
			  FROM c WHERE t.id = c.id
			RETURNING t.id)
		SELECT count(*)::integer, 0::bigint INTO n, v_bytes FROM u;
	ELSIF kind IN ('produced_files', 'uploaded_files') THEN
		WITH c AS (
			SELECT f.id FROM agent.files f
			 WHERE f.org_id = org AND f.status = 'saved'
			   AND f.origin = CASE kind WHEN 'produced_files' THEN 'produced' ELSE 'uploaded' END
			   AND f.created_at < cutoff
			 ORDER BY f.created_at LIMIT batch
			 FOR UPDATE SKIP LOCKED),
		u AS (
			UPDATE agent.files f
			   SET status = 'pruned', content = NULL,
				   reason = format('removed by retention (%s) on %s', kind, now()::date)
			  FROM c WHERE f.id = c.id
			RETURNING f.size)
		SELECT count(*)::integer, coalesce(sum(u.size), 0)::bigint INTO n, v_bytes FROM u;
	ELSE
		RAISE EXCEPTION 'unknown retention kind "%"', kind USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF v_bytes > 0 THEN
		PERFORM agent._use_storage(org, -v_bytes, 'pruned ' || kind);
	END IF;
	RETURN n;
END
$$;

-- Prune everything past its retention, one org, kind and batch per
-- transaction.  No SET clause (a procedure with one cannot commit): every
-- name is schema-qualified.  Returns the rows pruned.
CREATE PROCEDURE agent.prune_retention(INOUT pruned bigint DEFAULT NULL, as_of timestamptz DEFAULT NULL)
	LANGUAGE plpgsql
AS $$
DECLARE
	o		uuid;
	k		text;
	keep	interval;
	batch	integer := agent._setting('retention_batch')::integer;
	n		integer;
BEGIN
	pruned := 0;
	FOR o IN SELECT x.id FROM agent.orgs x ORDER BY x.id LOOP
		FOREACH k IN ARRAY ARRAY['output', 'previews', 'produced_files', 'uploaded_files'] LOOP
			keep := agent.retention_of(o, k);
			CONTINUE WHEN keep IS NULL;
			LOOP
				n := agent._prune_batch(o, k, coalesce(as_of, pg_catalog.now()) - keep, batch);
				pruned := pruned + n;
				COMMIT;
				EXIT WHEN n < batch;
			END LOOP;
		END LOOP;
	END LOOP;
END
$$;
COMMENT ON PROCEDURE agent.prune_retention(bigint, timestamptz) IS
	'empty run content past its retention, in short batches (CALL it; pg_cron does, hourly)';

REVOKE ALL ON FUNCTION agent.retention_of(uuid, text), agent.set_org_retention(uuid, text, text, text, text),
	agent._prune_batch(uuid, text, timestamptz, integer) FROM PUBLIC;
REVOKE ALL ON PROCEDURE agent.prune_retention(bigint, timestamptz) FROM PUBLIC;
-- What operators and DBAs look at beside agent.worker_status(): what each
-- run slot runs, why an approved run has not started, and what each org
-- spends per day.  Read-only; the backend sees its own tenant through
-- each (row-level security, or the tenant filter of queue_status), the
-- auditor every tenant.

-- Every run in flight, one row per occupied slot (the supervisor's or a
-- runner host's): the org, the language, since when and the jail's pid.
-- runner_id is NULL for the in-database supervisor's runs; the runner's
-- name is in agent.runner_status (auditor).  (agent.worker_status() stays
-- the supervisor's own summary, in C.)
CREATE VIEW agent.run_slots WITH (security_invoker = true) AS
SELECT i.id AS invocation_id, i.org_id, i.workspace_id, i.conversation_id, i.language,
	   i.state, i.provisioned_at, i.started_at,
	   coalesce(i.started_at, i.provisioned_at) AS since,
	   i.jail_pid AS pid, i.runner_id,
	   i.cancel_requested_at IS NOT NULL AS cancelling
  FROM agent.invocations i
 WHERE i.state IN ('provisioning', 'running');
COMMENT ON VIEW agent.run_slots IS
	'runs in flight (one per occupied slot): org, language, since, jail pid, runner';

-- Why an approved run waits, for each approved invocation the caller may
-- see: the first reason that holds, in the claim's own order.  Every run
-- is a runner's (the local runner, whose slots are
-- sandbox.max_concurrent_runs, or a runner host: runners.md); the
-- supervisor runs none itself, so the slots are the live active runners'.
--   supervisor_paused     no live active runner has a slot (the local runner's
--                         sandbox.max_concurrent_runs is 0 or it is off, and no
--                         runner host with slots is active)
--   insufficient_credits  the org cannot pay: the next claim refuses it
--   storage_quota_exhausted  the org is at its storage quota: the next claim refuses it
--   conversation_busy     a run of its conversation is in flight or queued before it
--   session_elsewhere     its conversation's session is on another live runner host
--   org_at_limit          the org has its limit of runs in flight
--   workspace_at_limit    the workspace has its limit of runs in flight
--   no_free_slot          every slot of the live active runners is taken
--   next                  nothing holds it: the next claim takes it
-- Security definer, because the limits count runs the caller cannot see
-- (other workspaces of its org, other orgs' use of the slots): it shows
-- only the current workspace's rows to a tenant, and every tenant's to the
-- auditor and the owner (no tenant set).
CREATE FUNCTION agent.queue_status()
	RETURNS TABLE (invocation_id uuid, org_id uuid, workspace_id uuid, conversation_id uuid,
				   approved_at timestamptz, waiting_for text, detail text)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_all		boolean := agent.current_workspace() IS NULL;
	v_caller	name := agent._outer_role();	-- the role outside this function
	v_slots		integer;
	v_free		integer;
	v_runners	integer;
	x			record;
	v_org_load	integer;
	v_ws_load	integer;
	v_limit		integer;
BEGIN
	IF v_all AND NOT (pg_catalog.pg_has_role(v_caller, 'agent_auditor', 'USAGE')
					  OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller)) THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	-- (a runner's slots as it declared them, within its cap: agent._runner_slots)
	SELECT count(*)::integer, coalesce(sum(agent._runner_slots(rn)), 0)::integer,
		   coalesce(sum(greatest(agent._runner_free_slots(rn), 0)), 0)::integer
	  INTO v_runners, v_slots, v_free
	  FROM agent.runners rn
	 WHERE rn.state = 'active' AND agent._runner_slots(rn) > 0
	   AND rn.last_heartbeat >= now() - agent._runner_lease();

	FOR x IN
		SELECT i.*, p.credits_per_invocation AS price,
			   coalesce(b.balance, 0) AS balance, w.max_concurrent_runs AS ws_limit
		  FROM agent.invocations i
		  JOIN agent.orgs o ON o.id = i.org_id
		  JOIN agent.plans p ON p.plan = o.plan
		  JOIN agent.workspaces w ON w.id = i.workspace_id
		  LEFT JOIN agent.credit_balances b ON b.org_id = i.org_id
		 WHERE i.state = 'approved'
		   AND (v_all OR (i.org_id = agent.current_org() AND i.workspace_id = agent.current_workspace()))
		 ORDER BY i.approved_at, i.request_seq
	LOOP
		invocation_id := x.id;
		org_id := x.org_id;
		workspace_id := x.workspace_id;
		conversation_id := x.conversation_id;
		approved_at := x.approved_at;
		detail := NULL;
		SELECT count(*)::integer INTO v_org_load FROM agent.invocations j
		 WHERE j.org_id = x.org_id AND j.state IN ('provisioning', 'running');
		SELECT count(*)::integer INTO v_ws_load FROM agent.invocations j
		 WHERE j.org_id = x.org_id AND j.workspace_id = x.workspace_id
		   AND j.state IN ('provisioning', 'running');
		v_limit := agent._org_run_limit(x.org_id);
		IF v_runners = 0 THEN
			waiting_for := 'supervisor_paused';
			detail := 'no active runner has a run slot (sandbox.max_concurrent_runs is 0 and no runner host with slots is active)';
		ELSIF x.balance < x.price THEN
			waiting_for := 'insufficient_credits';
			detail := pg_catalog.format('the org has %s credits; a run costs %s', x.balance, x.price);
		ELSIF (SELECT q.exhausted FROM agent._storage_exhausted(x.org_id) q) THEN
			waiting_for := 'storage_quota_exhausted';
			detail := 'the org is at its storage quota';
		ELSIF x.conversation_id IS NOT NULL AND EXISTS (
				SELECT 1 FROM agent.invocations j
				 WHERE j.conversation_id = x.conversation_id
				   AND (j.state IN ('provisioning', 'running')
						OR (j.state = 'approved' AND (j.approved_at, j.request_seq) < (x.approved_at, x.request_seq)))) THEN
			waiting_for := 'conversation_busy';
			detail := 'runs of a conversation are serial';
		ELSIF x.conversation_id IS NOT NULL AND agent._session_elsewhere(x.conversation_id, NULL)
			  AND v_free = 0 THEN
			waiting_for := 'session_elsewhere';
			detail := 'its session''s runner host has no free slot';
		ELSIF v_org_load >= v_limit THEN
			waiting_for := 'org_at_limit';
			detail := pg_catalog.format('%s of %s runs in flight', v_org_load, v_limit);
		ELSIF x.ws_limit IS NOT NULL AND v_ws_load >= x.ws_limit THEN
			waiting_for := 'workspace_at_limit';
			detail := pg_catalog.format('%s of %s runs in flight', v_ws_load, x.ws_limit);
		ELSIF v_free = 0 THEN
			waiting_for := 'no_free_slot';
			-- How busy the platform is counts other orgs' runs: only the
			-- auditor and the owner see the numbers.
			detail := CASE WHEN v_all
						   THEN pg_catalog.format('%s of %s run slots in use on %s active runners',
												  v_slots - v_free, v_slots, v_runners)
						   ELSE 'every run slot is in use' END;
		ELSE
			waiting_for := 'next';
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;
COMMENT ON FUNCTION agent.queue_status() IS
	'why each approved invocation has not started yet (the current workspace''s, or every tenant''s for an auditor)';

-- What each org spent per day (UTC): runs charged, credits charged,
-- refunded and the net.
CREATE VIEW agent.spend_per_org_day WITH (security_invoker = true) AS
SELECT l.org_id, (l.created_at AT TIME ZONE 'UTC')::date AS day,
	   count(*) FILTER (WHERE l.kind = 'charge') AS runs_charged,
	   coalesce(-sum(l.amount) FILTER (WHERE l.kind = 'charge'), 0) AS charged,
	   coalesce(sum(l.amount) FILTER (WHERE l.kind = 'refund'), 0) AS refunded,
	   coalesce(-sum(l.amount) FILTER (WHERE l.kind IN ('charge', 'refund')), 0) AS net_spent,
	   coalesce(sum(l.amount) FILTER (WHERE l.kind = 'grant'), 0) AS granted
  FROM agent.credit_ledger l
 GROUP BY l.org_id, (l.created_at AT TIME ZONE 'UTC')::date;
COMMENT ON VIEW agent.spend_per_org_day IS
	'credits charged, refunded and granted per org per day (UTC)';

GRANT SELECT ON agent.run_slots, agent.spend_per_org_day TO agent_backend, agent_auditor;
GRANT EXECUTE ON FUNCTION agent.queue_status() TO agent_backend, agent_auditor;
-- The export's state for DBAs (reads no tenant data).
GRANT EXECUTE ON FUNCTION agent.export_status(), agent._export_worker_state() TO agent_auditor;
-- Logical backup: what pg_dump carries and how pg_restore loads it back
-- (docs/operations.md, "Backup and restore").
--
-- Every table and sequence of the extension holds product data, so every
-- one is marked with pg_extension_config_dump(), whole ('' : no filter).
-- This file runs after every file that creates tables, and marks what it
-- finds, so a table added later is in the dump without a line here; the
-- block is replayed on upgrade (scripts/sql-replay.pl, DO $replay$).
--
-- A restore runs in session_replication_role = replica (one command:
--   PGOPTIONS='-c session_replication_role=replica' pg_restore -1 -d DB FILE).
-- That switches off the ordinary triggers and the foreign-key checks while
-- the dumped rows are loaded, so nothing is applied twice: the ledger's
-- trigger does not fold the ledger into balances restored as they were,
-- a restored org does not get a second usage row, the state machine's and
-- the request freeze's guards do not judge restored rows.  The append-only
-- guards of the ledger and the audit trail stay on (ENABLE ALWAYS) and
-- refuse UPDATE, DELETE and TRUNCATE there too; a restore only inserts.
-- Two things need a rule of their own in replica mode:
--   * audit_heads: its guard (src/audit.c) leaves an INSERT in replica
--     mode to the trigger below, which admits a tip only when it is the
--     one the org's (already restored) audit events imply; UPDATE and
--     DELETE stay refused, and a tip that exists is a primary-key conflict;
--   * the rows the install script writes (settings, plans, runtimes) are
--     dumped too, so an operator's values survive; in replica mode the
--     dumped row replaces the one CREATE EXTENSION just wrote (the triggers
--     below), instead of failing on its key.
-- And the install script schedules no pg_cron job in replica mode: the
-- dump of cron.job (pg_cron's own config table) brings them back.

-- In replica mode only (ENABLE REPLICA): a restored tip must be the tip of
-- the org's restored events (pg_dump writes agent.audit_events before
-- agent.audit_heads), and the org must have some.  prev_hash is the hash
-- before the last ('' for fewer than two events), as agent._audit leaves
-- it.
CREATE FUNCTION agent._audit_heads_restore_check() RETURNS trigger
	LANGUAGE plpgsql
AS $$
DECLARE
	v_events	bigint;
	v_last_id	bigint;
	v_last_hash	text;
	v_prev_hash	text;
BEGIN
	SELECT count(*), coalesce(max(e.id), 0) INTO v_events, v_last_id
	  FROM agent.audit_events e WHERE e.org_id = NEW.org_id;
	SELECT coalesce((SELECT e.hash FROM agent.audit_events e WHERE e.org_id = NEW.org_id
					  ORDER BY e.id DESC LIMIT 1), ''),
		   coalesce((SELECT e.hash FROM agent.audit_events e WHERE e.org_id = NEW.org_id
					  ORDER BY e.id DESC OFFSET 1 LIMIT 1), '')
	  INTO v_last_hash, v_prev_hash;
	-- A committed tip always has events (the first append creates the tip
	-- in its own transaction), so a tip of an org without events is forged.
	IF v_events = 0 OR (NEW.events, NEW.last_id, NEW.last_hash, NEW.prev_hash)
		IS DISTINCT FROM (v_events, v_last_id, v_last_hash, v_prev_hash) THEN
		RAISE EXCEPTION 'cannot insert into agent.audit_heads: the tip does not match the org''s audit events'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = format('Org %s has %s events ending at event %s.', NEW.org_id, v_events, v_last_id),
				  HINT = 'A restore loads agent.audit_events before agent.audit_heads; a tip moves otherwise only with an append.';
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION agent._audit_heads_restore_check() IS
	'restore (session_replication_role = replica): admit an audit tip only when it is the tip of the org''s events';
CREATE TRIGGER audit_heads_restore_check
	BEFORE INSERT ON agent.audit_heads
	FOR EACH ROW EXECUTE FUNCTION agent._audit_heads_restore_check();
ALTER TABLE agent.audit_heads ENABLE REPLICA TRIGGER audit_heads_restore_check;

-- In replica mode only (ENABLE REPLICA): a row inserted with the key of an
-- existing row replaces it.  TG_ARGV[0] names the key column.
CREATE FUNCTION agent._restore_replaces_row() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	EXECUTE format('DELETE FROM %I.%I WHERE %I::text = $1', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0])
		USING pg_catalog.to_jsonb(NEW) ->> TG_ARGV[0];
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION agent._restore_replaces_row() IS
	'restore (session_replication_role = replica): a dumped row replaces the install script''s row with its key';

CREATE TRIGGER settings_restore_replaces_row
	BEFORE INSERT ON agent.settings
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('key');
CREATE TRIGGER plans_restore_replaces_row
	BEFORE INSERT ON agent.plans
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('plan');
CREATE TRIGGER runtimes_restore_replaces_row
	BEFORE INSERT ON agent.runtimes
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('language');
ALTER TABLE agent.settings ENABLE REPLICA TRIGGER settings_restore_replaces_row;
ALTER TABLE agent.plans ENABLE REPLICA TRIGGER plans_restore_replaces_row;
ALTER TABLE agent.runtimes ENABLE REPLICA TRIGGER runtimes_restore_replaces_row;

-- After a restore (or a promotion, docs/operations.md): what the dump
-- carries over from the source server but describes the source, not this
-- one.
--   * cron.job: pg_cron stores per job the server its task connects to
--     (nodename, nodeport: cron.host and the port of the server that
--     scheduled it) and the database.  The restored rows keep the source's,
--     so the maintenance jobs would prune, expire and reap on the source
--     server, or fail to connect.  They are re-pointed to this server; the
--     schedule, command, user and active flag (an operator's choices) are
--     kept.  pg_cron's cache trigger picks the change up.
--   * agent.runtimes: the versions the source host probed; probed again
--     here (agent.refresh_runtimes(): superuser, COPY FROM PROGRAM).
-- The export's slot cannot be carried over: the last step only says
-- whether agent.export_resync() is due.  Idempotent; the owner's.
CREATE FUNCTION agent.after_restore()
	RETURNS TABLE (step text, detail text)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_host	text := coalesce(pg_catalog.current_setting('cron.host', true), 'localhost');
	v_port	integer := pg_catalog.current_setting('port')::integer;
	v_db	text := pg_catalog.current_database()::text;
	v_moved	integer;
	v_jobs	integer;
BEGIN
	IF pg_catalog.current_setting('session_replication_role') = 'replica' THEN
		RAISE EXCEPTION 'cannot run agent.after_restore() in session_replication_role = replica'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Run it in a new session after pg_restore has committed.';
	END IF;

	step := 'cron_jobs';
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension x WHERE x.extname = 'pg_cron') THEN
		detail := 'pg_cron is not installed in this database';
	ELSE
		-- cron.* exists only with pg_cron: dynamic, as agent.schedule_maintenance().
		EXECUTE $sql$WITH u AS (
						 UPDATE cron.job j SET nodename = $1, nodeport = $2, database = $3
						  WHERE j.jobname LIKE 'sandbox\_ext\_%'
							AND (j.nodename, j.nodeport, j.database) IS DISTINCT FROM ($1, $2, $3)
						 RETURNING 1)
					 SELECT (SELECT count(*)::integer FROM u),
							(SELECT count(*)::integer FROM cron.job j WHERE j.jobname LIKE 'sandbox\_ext\_%')$sql$
			INTO v_moved, v_jobs USING v_host, v_port, v_db;
		detail := pg_catalog.format('%s of %s maintenance jobs re-pointed to host %s port %s database %s',
									v_moved, v_jobs, v_host, v_port, v_db);
	END IF;
	RETURN NEXT;

	step := 'runtimes';
	SELECT pg_catalog.string_agg(r.language || ' ' || r.version
								 || CASE WHEN r.probed THEN '' ELSE ' (not probed: kept)' END,
								 ', ' ORDER BY r.language)
	  INTO detail FROM agent.refresh_runtimes() r;
	RETURN NEXT;

	step := 'export';
	detail := CASE
		WHEN NOT EXISTS (SELECT 1 FROM agent.export_state e) THEN 'not set up'
		WHEN EXISTS (SELECT 1 FROM agent.export_state e
					  WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s
										 WHERE s.slot_name = e.slot_name))
			THEN 'the export slot does not exist on this server: run SELECT agent.export_resync()'
		ELSE 'the export slot exists' END;
	RETURN NEXT;
END
$$;
COMMENT ON FUNCTION agent.after_restore() IS
	'after a restore or a promotion: re-point the maintenance jobs to this server, probe the runtimes, say whether the export needs a resync';
REVOKE ALL ON FUNCTION agent.after_restore() FROM PUBLIC;

-- Mark every table and sequence of the extension for pg_dump.
DO $replay$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT c.oid::pg_catalog.regclass AS rel
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
		   AND d.objid = c.oid AND d.deptype = 'e'
		  JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid AND x.extname = 'sandbox_ext'
		 WHERE c.relnamespace = 'agent'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p', 'S')
		 ORDER BY c.relname
	LOOP
		PERFORM pg_catalog.pg_extension_config_dump(r.rel, '');
	END LOOP;
END
$replay$;
-- Runs last, after every file above has created its objects: PUBLIC may
-- execute nothing in schema agent except the functions that row-level
-- security policies and CHECK constraints call as the current user, and
-- reads no table.  (CREATE FUNCTION grants EXECUTE to PUBLIC by default, so
-- a file added later cannot forget this.)  The explicit grants to
-- agent_backend and agent_auditor made by each file stay in place.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA agent FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.current_org(), agent.current_workspace(),
	agent.code_sha256(text) TO PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA agent FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA agent FROM PUBLIC;
GRANT SELECT ON ALL TABLES IN SCHEMA agent TO agent_auditor;
