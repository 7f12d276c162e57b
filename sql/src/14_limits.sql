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

-- The effective limits of an org: its own, else the setting (read inline;
-- agent._setting only to raise when the setting is missing).
-- (PL/pgSQL: its plan is kept for the session.  No SET clause, as
-- agent._setting: every name, operator and type below is schema-qualified.)
CREATE FUNCTION agent._org_run_limit(org uuid) RETURNS integer
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN coalesce((SELECT o.max_concurrent_runs FROM agent.orgs o WHERE o.id OPERATOR(pg_catalog.=) org),
					(SELECT s.value FROM agent.settings s
					  WHERE s.key OPERATOR(pg_catalog.=) 'max_runs_per_org')::integer,
					agent._setting('max_runs_per_org')::integer);
END
$$;

CREATE FUNCTION agent._org_storage_limit(org uuid) RETURNS bigint
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN coalesce((SELECT o.max_stored_bytes FROM agent.orgs o WHERE o.id OPERATOR(pg_catalog.=) org),
					(SELECT s.value FROM agent.settings s
					  WHERE s.key OPERATOR(pg_catalog.=) 'max_stored_bytes_per_org')::bigint,
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
	LANGUAGE plpgsql STABLE
AS $$
-- (PL/pgSQL, one statement: a SQL function's body is planned again on
-- every call.  No SET clause, as agent._org_storage_limit.)
BEGIN
	SELECT coalesce((SELECT x.stored_bytes FROM agent.org_usage x
					  WHERE x.org_id OPERATOR(pg_catalog.=) org), 0),
		   agent._org_storage_limit(org)
	  INTO stored_bytes, max_stored_bytes;
	exhausted := stored_bytes OPERATOR(pg_catalog.>=) max_stored_bytes;
END
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
