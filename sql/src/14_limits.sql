-- Limits that keep one tenant from hurting the others: how many runs an org
-- (and optionally one of its workspaces) may have in flight, how many
-- requests it may have waiting for a decision, and how many bytes it may
-- store in the database.  The limits are the platform operator's (the
-- owner's), like plans: neither the backend nor an org's admin can raise
-- them.
--
-- A NULL column means "the default in agent.settings"; the settings are
-- the defaults for every org.  Usage is counted in agent.org_usage, one row
-- per org, updated in the transaction of the write it counts, under the
-- row's lock (so two uploads of one org cannot both pass the check).
--
-- What counts (docs/control-plane.md, "Storage quota"): the content of
-- files, skills and run output; the code, description and idempotency key
-- of every request (until retention prunes the code and description,
-- 70_retention.sql); and every audit event of the org, its details and
-- actor (added by a trigger on agent.audit_events, 21_audit_usage.sql, in
-- the transaction that appends it; the trail is never pruned).  Names,
-- titles and reasons a tenant sets are in the audit event that records
-- them, and count there.
--
-- Lock order.  An audit append holds the org's audit head to its commit
-- and its trigger then updates the org's usage row, so every writer takes
-- the head first and the usage row second (agent._lock_storage; the
-- supervisor's steps try both without waiting).  A writer that took the
-- usage row and then appended could deadlock with another append of the
-- org.

-- (the columns are declared with their tables, 12_catalog.sql)
COMMENT ON COLUMN agent.orgs.max_concurrent_runs IS
	'runs of this org provisioning or running at once, on every host together (NULL: setting max_runs_per_org)';
COMMENT ON COLUMN agent.orgs.max_stored_bytes IS
	'bytes of files, skills, output, requests and audit events this org may keep (NULL: setting max_stored_bytes_per_org)';
COMMENT ON COLUMN agent.orgs.max_pending_requests IS
	'requests of this org waiting for an approval decision at once (NULL: setting max_pending_requests_per_org)';

COMMENT ON COLUMN agent.workspaces.max_concurrent_runs IS
	'runs of this workspace in flight at once (NULL: only the org''s limit applies)';

INSERT INTO agent.settings (key, value, description) VALUES
	('max_runs_per_org', '2',
	 'runs one org may have provisioning or running at once, unless agent.orgs.max_concurrent_runs says otherwise'),
	('max_stored_bytes_per_org', '1073741824',
	 'bytes of files, skills, stored output, requests and audit events one org may keep, unless agent.orgs.max_stored_bytes says otherwise'),
	('max_pending_requests_per_org', '100',
	 'requests one org may have waiting for an approval decision at once, unless agent.orgs.max_pending_requests says otherwise'),
	('max_session_disk_per_org', '1073741824',
	 'bytes the sandbox session workspaces of one org may hold on the supervisor''s disk; beyond it the least recently used sessions are ended (their files stay in the database)');

CREATE TABLE agent.org_usage (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	stored_bytes	bigint NOT NULL DEFAULT 0 CHECK (stored_bytes >= 0),
	updated_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE agent.org_usage IS
	'bytes each org stores (files, skills, output, requests, audit events), counted against its max_stored_bytes';

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

-- What a request stores beside its audit event: its code, description and
-- idempotency key (the one definition: agent.request_execution() counts
-- it, retention gives back the code and description, the upgrade to 0.3.0
-- counted the requests it found).
CREATE FUNCTION agent._request_bytes(code text, description text, idempotency_key text)
	RETURNS bigint
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN coalesce(pg_catalog.octet_length(code), 0)::bigint
		   OPERATOR(pg_catalog.+) coalesce(pg_catalog.octet_length(description), 0)
		   OPERATOR(pg_catalog.+) coalesce(pg_catalog.octet_length(idempotency_key), 0);

-- What an audit event stores of the org's: its details, in their text
-- form, and its actor (the one definition: the trigger of
-- 21_audit_usage.sql counts it, request_execution() reckons with its own
-- event before it writes it).  The fixed columns (ids, hashes, time) are
-- row overhead, like those of every other row, and are not counted.
CREATE FUNCTION agent._audit_event_bytes(details jsonb, actor text) RETURNS bigint
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN coalesce(pg_catalog.octet_length(details::pg_catalog.text), 2)::bigint
		   OPERATOR(pg_catalog.+) coalesce(pg_catalog.octet_length(actor), 0);

-- Take the org's storage locks in their order (the header: its audit head,
-- then its usage row), waiting for both, and return what it stores and may
-- store.  Held to the caller's commit; the decisions taken under them are
-- exact (two writers of one org queue here).
CREATE FUNCTION agent._lock_storage(org uuid, OUT stored_bytes bigint, OUT max_stored_bytes bigint)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	-- (no head yet: the org's first append makes it, and nothing else of
	-- the org can be holding it)
	PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = org FOR UPDATE;
	SELECT u.stored_bytes INTO stored_bytes FROM agent.org_usage u WHERE u.org_id = org
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN		-- made with the org (trigger below); an old org may lack it
		INSERT INTO agent.org_usage (org_id) VALUES (org) ON CONFLICT (org_id) DO NOTHING;
		SELECT u.stored_bytes INTO stored_bytes FROM agent.org_usage u WHERE u.org_id = org
		   FOR NO KEY UPDATE;
	END IF;
	max_stored_bytes := agent._org_storage_limit(org);
END
$$;

-- Count bytes an org stores (negative: gives them back, never below zero),
-- under its storage locks (agent._lock_storage); then, unless allow_over or
-- the call gives bytes back, raise 53400 if the org stores more than its
-- limit: whatever this transaction stored, its audit events included, is
-- then rolled back with it.  bytes 0 is the check alone (of a call whose
-- storage is its events: agent._check_storage, below).  allow_over: what
-- the system must keep whatever the quota (a run's output, bounded by
-- sandbox.output_limit).  Returns the new total.
CREATE FUNCTION agent._use_storage(org uuid, bytes bigint, what text,
								   allow_over boolean DEFAULT false)
	RETURNS bigint
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		record := agent._lock_storage(org);
	v_total	bigint := v.stored_bytes;
BEGIN
	IF coalesce(bytes, 0) <> 0 THEN
		UPDATE agent.org_usage u
		   SET stored_bytes = greatest(u.stored_bytes + bytes, 0), updated_at = now()
		 WHERE u.org_id = org
		RETURNING u.stored_bytes INTO v_total;
	END IF;
	IF coalesce(bytes, 0) >= 0 AND v_total > v.max_stored_bytes AND NOT allow_over THEN
		RAISE EXCEPTION 'the organization''s storage quota is exhausted'
			USING ERRCODE = 'configuration_limit_exceeded',
				  DETAIL = format('Storing %s would bring it to %s of %s bytes.',
								  CASE WHEN bytes > 0 THEN format('%s (%s bytes)', what, bytes) ELSE what END,
								  v_total, v.max_stored_bytes),
				  HINT = 'Delete files or skills the organization no longer needs (agent.delete_file(), agent.delete_skill()), or ask the operator for a larger quota (agent.orgs.max_stored_bytes).';
	END IF;
	RETURN v_total;
END
$$;

-- The check of a tenant's call whose storage is its audit events (a
-- setter, an approval), made after its appends: raise 53400 (through
-- agent._use_storage, with the figures) if the org now stores more than
-- its limit, so that everything the call wrote is rolled back with it.
-- Exact without a lock of its own: the appends' trigger holds the org's
-- usage row (21_audit_usage.sql).  (PL/pgSQL without a SET clause, as
-- agent._org_storage_limit: it is on the approval's path.  One query: the
-- limit is agent._org_storage_limit's, read inline.)
CREATE FUNCTION agent._check_storage(org uuid, what text) RETURNS void
	LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM agent.org_usage u
				 JOIN agent.orgs o ON o.id OPERATOR(pg_catalog.=) u.org_id
				WHERE u.org_id OPERATOR(pg_catalog.=) org
				  AND u.stored_bytes OPERATOR(pg_catalog.>)
					  coalesce(o.max_stored_bytes,
							   (SELECT s.value FROM agent.settings s
								 WHERE s.key OPERATOR(pg_catalog.=) 'max_stored_bytes_per_org')::pg_catalog.int8,
							   agent._setting('max_stored_bytes_per_org')::pg_catalog.int8)) THEN
		PERFORM agent._use_storage(org, 0::pg_catalog.int8, what);
	END IF;
END
$$;

-- Give bytes back to the org's storage (a deletion): never below zero,
-- never refused.  Under the org's storage locks, in their order.
CREATE FUNCTION agent._free_storage(org uuid, bytes bigint) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._lock_storage(org);
	UPDATE agent.org_usage u
	   SET stored_bytes = greatest(u.stored_bytes - coalesce(bytes, 0), 0), updated_at = now()
	 WHERE u.org_id = org;
END
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

-- The operator sets an org's limits, all of them at once (NULL: back to
-- the default).  A negative limit is a bad argument (22023, naming it),
-- checked here rather than left to the table's CHECK, whose violation
-- would name the constraint and echo the org's row.  Owner only: not
-- granted to any role.
CREATE FUNCTION agent.set_org_limits(org uuid, max_concurrent_runs integer,
									 max_stored_bytes bigint,
									 max_pending_requests integer DEFAULT NULL)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_bad	text;
BEGIN
	IF org IS NULL THEN
		RAISE EXCEPTION 'org must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	v_bad := CASE WHEN max_concurrent_runs < 0 THEN 'max_concurrent_runs'
				  WHEN max_stored_bytes < 0 THEN 'max_stored_bytes'
				  WHEN max_pending_requests < 0 THEN 'max_pending_requests' END;
	IF v_bad IS NOT NULL THEN
		RAISE EXCEPTION '% must not be negative', v_bad
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('It is %s.', CASE v_bad
										 WHEN 'max_concurrent_runs' THEN max_concurrent_runs::bigint
										 WHEN 'max_stored_bytes' THEN max_stored_bytes
										 ELSE max_pending_requests::bigint END),
				  HINT = 'Pass 0 or more, or NULL for the default in agent.settings.';
	END IF;
	UPDATE agent.orgs o
	   SET max_concurrent_runs = set_org_limits.max_concurrent_runs,
		   max_stored_bytes = set_org_limits.max_stored_bytes,
		   max_pending_requests = set_org_limits.max_pending_requests
	 WHERE o.id = org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	PERFORM agent._audit(org, NULL, 'org.limits_changed', NULL, current_user::text,
						 jsonb_build_object('max_concurrent_runs', max_concurrent_runs,
											'max_stored_bytes', max_stored_bytes,
											'max_pending_requests', max_pending_requests));
END
$$;
COMMENT ON FUNCTION agent.set_org_limits(uuid, integer, bigint, integer) IS
	'set an org''s concurrent-run, storage and pending-request limits (NULL: the defaults in agent.settings)';

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
