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
-- (No SET clause, as agent._setting: a request checks five arguments, and
-- a SET clause is a configuration save and restore per call; every name,
-- operator and type below is schema-qualified.)
CREATE FUNCTION agent._check_text(value text, argument text, kind text,
								  header boolean DEFAULT false)
	RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
	v_max	pg_catalog.int4;
BEGIN
	IF value IS NULL THEN
		RETURN true;
	END IF;
	SELECT l.max_bytes INTO v_max FROM agent.text_limits() l
	 WHERE l.kind OPERATOR(pg_catalog.=) _check_text.kind;
	IF v_max IS NULL THEN
		RAISE EXCEPTION 'unknown kind of text argument "%"', kind;	-- a bug of ours
	END IF;
	IF pg_catalog.octet_length(value) OPERATOR(pg_catalog.>) v_max THEN
		RAISE EXCEPTION '% is too long', argument
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = pg_catalog.format('It is %s bytes; the limit is %s.',
											 pg_catalog.octet_length(value), v_max);
	END IF;
	IF header AND value OPERATOR(pg_catalog.~) '[[:cntrl:]]'::pg_catalog.text THEN
		RAISE EXCEPTION '% must not contain control characters', argument
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'Line breaks and other control characters are refused where the value could end up in a header.';
	END IF;
	RETURN true;
END
$$;

-- A person's name as names are compared (requester against approver,
-- reserved names): Unicode's NFKC_Casefold (compatibility forms and case
-- folded, default-ignorable code points removed), without format
-- characters (General_Category Cf) and with white space trimmed at both
-- ends.  In C (src/person_key.c), from the Unicode Character Database.
CREATE FUNCTION agent._person_key(name text) RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_person_key'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The check of every argument that names a person (requested_by, approver,
-- actor, uploaded_by, created_by, owner): not null, not empty, and not a
-- name the product records for itself: the actors of its own audit events
-- ('system', 'supervisor', 'runner', 'exporter'; 'policy', who decides an
-- approval an approval policy makes: 26_policies.sql), the owner's role
-- (current_user here, as the SECURITY DEFINER API runs as the owner;
-- owner-run functions record it), and every role of the product: its
-- group roles (agent_backend, agent_admin, agent_auditor, agent_runner),
-- the local runner's sandbox_runner_local, and every role that is a member
-- of one of them (the backend's and admin console's logins, each runner
-- host's).  So no person can pass for the product in the audit trail.
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
	IF v_key IN ('system', 'supervisor', 'runner', 'exporter', 'sandbox_ext', 'policy',
				 'agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner',
				 'sandbox_runner_local')
	   OR v_key = agent._person_key(current_user::text)
	   OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r, pg_catalog.pg_roles g
				   WHERE pg_catalog.lower(r.rolname::text) = v_key
					 AND g.rolname IN ('agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner')
					 AND pg_catalog.pg_has_role(r.oid, g.oid, 'MEMBER')) THEN
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
		('max_pending_requests_per_org', 'integer', '0', '100000'),
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
		('retention_requests', 'retention', '0 seconds', '100 years'),
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
-- No SET clause: a function's SET costs each call a change of search_path
-- and back (and a new lookup of the path), and this one is called about a
-- dozen times per run.  Every name in it is schema-qualified, its operator
-- and its variable's type too, so the caller's search_path changes nothing
-- (the callers are the owner's functions, which pin it; it is granted to
-- no role).
CREATE FUNCTION agent._setting(key text) RETURNS text
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	v pg_catalog.text;
BEGIN
	SELECT s.value INTO v FROM agent.settings s WHERE s.key OPERATOR(pg_catalog.=) _setting.key;
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
