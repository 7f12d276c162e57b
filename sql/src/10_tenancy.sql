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

-- Name the tenant for the rest of the current transaction (SET LOCAL
-- semantics: outside a transaction block it lasts one statement only).
CREATE FUNCTION agent.set_tenant(org uuid, workspace uuid) RETURNS void
	AS 'MODULE_PATHNAME', 'sandbox_set_tenant'
	LANGUAGE C VOLATILE;
COMMENT ON FUNCTION agent.set_tenant(uuid, uuid) IS
	'set sandbox.org_id and sandbox.workspace_id for the current transaction';

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
	v_key text := agent._person_key(name);
BEGIN
	IF name IS NULL THEN
		RAISE EXCEPTION '% must not be null', argument USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF v_key = '' THEN
		RAISE EXCEPTION '% must not be empty', argument USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF v_key IN ('system', 'supervisor', 'runner', 'exporter', 'sandbox_ext',
				 'agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner')
	   OR v_key = pg_catalog.lower(current_user::text) THEN
		RAISE EXCEPTION '% "%" is a reserved name', argument, v_key
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

INSERT INTO agent.settings (key, value, description) VALUES
	('approval_timeout', '15 minutes',
	 'how long an approval request may stay undecided before agent.expire_pending_approvals() expires it (an interval)'),
	('max_code_bytes', '65536',
	 'largest code, in bytes of UTF-8, that agent.request_execution() accepts');

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
			USING ERRCODE = 'undefined_object';
	END IF;
	RETURN v;
END
$$;
