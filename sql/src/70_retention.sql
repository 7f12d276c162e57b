-- Retention: how long the bulky content of a run is kept, per org, and
-- the batched pruning that enforces it (docs/operations.md, "Retention").
--
-- Five kinds of content, each with a default in agent.settings and an
-- optional per-org value in agent.org_retention (the operator's, like the
-- limits of 14_limits.sql):
--
--   output          agent.invocation_output chunks (by the chunk's created_at)
--   previews        agent.agent_tool_calls.output_preview (by the call's created_at)
--   produced_files  agent.files of origin 'produced' (by created_at)
--   uploaded_files  agent.files of origin 'uploaded' (by created_at)
--   requests        the code and description of an invocation in a
--                   terminal state (by its created_at): what its card
--                   showed, stored once with the invocation
--
-- A value is an interval, or 'forever'.  Pruning keeps the row and what
-- identifies the content (its sha256 and size, and when it was pruned) and
-- drops only the content: an output chunk's data becomes '', a preview
-- NULL, a file's content NULL with status 'pruned', an invocation's code
-- and description NULL with pruned_at (its code_sha256, states, billing,
-- card and events stay; the code's size is in its capability.invoke_allowed
-- event).  The audit trail is not pruned (its chain is the point), and
-- neither is agent.tool_invocations (the exported analytics row:
-- untouched, so the export stays exactly once).  The bytes pruned are
-- given back to the org's storage count (agent.org_usage).
--
-- agent.prune_retention() (a procedure, scheduled hourly with pg_cron by
-- agent.schedule_maintenance()) works one org and one kind at a time, in
-- batches of at most `batch` rows, each batch its own transaction that
-- locks only the rows it prunes (FOR UPDATE SKIP LOCKED: a row someone
-- holds is left for the next round) and the org's usage row at the end.
-- Called inside a transaction block (BEGIN; CALL ...; COMMIT), where a
-- procedure cannot commit, it prunes everything in the caller's
-- transaction instead, batch by batch, and the caller's COMMIT keeps it.

INSERT INTO agent.settings (key, value, description) VALUES
	('retention_output', '30 days',
	 'how long the output chunks of a run are kept before agent.prune_retention() empties them (an interval, or forever)'),
	('retention_previews', '90 days',
	 'how long the output preview of a tool call is kept (an interval, or forever)'),
	('retention_produced_files', '90 days',
	 'how long the content of a file a run produced is kept (an interval, or forever)'),
	('retention_uploaded_files', 'forever',
	 'how long the content of an uploaded conversation file is kept (an interval, or forever)'),
	('retention_requests', '90 days',
	 'how long the code and description of a finished request (invocation and approval card) are kept (an interval, or forever)'),
	('retention_batch', '1000',
	 'rows agent.prune_retention() prunes per transaction');

CREATE TABLE agent.org_retention (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	output			text,
	previews		text,
	produced_files	text,
	uploaded_files	text,
	updated_at		timestamptz NOT NULL DEFAULT now(),
	requests		text	-- (0.3.0)
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

-- (a pruned invocation keeps code_sha256; its pruned_at and the constraint
-- that only pruning empties its code are with its table, 15_invocations.sql)
CREATE INDEX invocations_retention_idx ON agent.invocations (org_id, created_at)
	WHERE pruned_at IS NULL;

-- The retention of one kind for one org: the interval, or NULL for forever.
-- A malformed value is a broken configuration, reported as such.
CREATE FUNCTION agent.retention_of(org uuid, kind text) RETURNS interval
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v	text;
BEGIN
	IF kind IS NULL OR kind NOT IN ('output', 'previews', 'produced_files', 'uploaded_files', 'requests') THEN
		RAISE EXCEPTION 'unknown retention kind "%"', agent._shown(kind)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'The kinds are output, previews, produced_files, uploaded_files and requests.';
	END IF;
	SELECT CASE kind WHEN 'output' THEN r.output WHEN 'previews' THEN r.previews
					 WHEN 'produced_files' THEN r.produced_files
					 WHEN 'uploaded_files' THEN r.uploaded_files ELSE r.requests END
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
										produced_files text DEFAULT NULL, uploaded_files text DEFAULT NULL,
										requests text DEFAULT NULL)
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
			agent._check_text(uploaded_files, 'uploaded_files', 'retention'),
			agent._check_text(requests, 'requests', 'retention');
	FOREACH v IN ARRAY ARRAY[output, previews, produced_files, uploaded_files, requests] LOOP
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
	INSERT INTO agent.org_retention AS r (org_id, output, previews, produced_files, uploaded_files,
										  requests)
		VALUES (org, output, previews, produced_files, uploaded_files, requests)
		ON CONFLICT (org_id) DO UPDATE
			SET output = excluded.output, previews = excluded.previews,
				produced_files = excluded.produced_files, uploaded_files = excluded.uploaded_files,
				requests = excluded.requests, updated_at = now();
	PERFORM agent._audit(org, NULL, 'org.retention_changed', NULL, current_user::text,
						 jsonb_build_object('output', output, 'previews', previews,
											'produced_files', produced_files,
											'uploaded_files', uploaded_files,
											'requests', requests));
END
$$;
COMMENT ON FUNCTION agent.set_org_retention(uuid, text, text, text, text, text) IS
	'set how long an org keeps run output, previews, produced and uploaded files, and the code of finished requests (NULL: the default; ''forever'')';

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
	ELSIF kind = 'requests' THEN
		-- Only an invocation that can no longer run (its code is what a
		-- claim checks and runs); its card shows the same copy.  FOR NO KEY
		-- UPDATE, as everywhere an invocation is locked.
		WITH c AS (
			SELECT i.id, agent._request_bytes(i.code, i.description, NULL) AS bytes
			  FROM agent.invocations i
			 WHERE i.org_id = org AND i.created_at < cutoff AND i.pruned_at IS NULL
			   AND agent._state_is_terminal(i.state)
			 ORDER BY i.created_at LIMIT batch
			 FOR NO KEY UPDATE SKIP LOCKED),
		u AS (
			UPDATE agent.invocations i
			   SET code = NULL, description = NULL, pruned_at = now()
			  FROM c WHERE i.id = c.id
			RETURNING c.bytes)
		SELECT count(*)::integer, coalesce(sum(u.bytes), 0)::bigint INTO n, v_bytes FROM u;
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
-- Whether the caller is inside BEGIN ... COMMIT (C, src/api.c).
CREATE FUNCTION agent._in_transaction_block() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_in_transaction_block'
	LANGUAGE C VOLATILE;

CREATE PROCEDURE agent.prune_retention(INOUT pruned bigint DEFAULT NULL, as_of timestamptz DEFAULT NULL)
	LANGUAGE plpgsql
AS $$
DECLARE
	o		uuid;
	k		text;
	keep	interval;
	batch	integer := agent._setting('retention_batch')::integer;
	n		integer;
	-- (in a transaction block a procedure cannot commit: 2D000)
	v_commit boolean := NOT agent._in_transaction_block();
BEGIN
	pruned := 0;
	FOR o IN SELECT x.id FROM agent.orgs x ORDER BY x.id LOOP
		FOREACH k IN ARRAY ARRAY['output', 'previews', 'produced_files', 'uploaded_files', 'requests'] LOOP
			keep := agent.retention_of(o, k);
			CONTINUE WHEN keep IS NULL;
			LOOP
				n := agent._prune_batch(o, k, coalesce(as_of, pg_catalog.now()) - keep, batch);
				pruned := pruned + n;
				IF v_commit THEN
					COMMIT;
				END IF;
				EXIT WHEN n < batch;
			END LOOP;
		END LOOP;
	END LOOP;
END
$$;
COMMENT ON PROCEDURE agent.prune_retention(bigint, timestamptz) IS
	'empty run content past its retention, in short batches (CALL it; pg_cron does, hourly)';

REVOKE ALL ON FUNCTION agent.retention_of(uuid, text), agent.set_org_retention(uuid, text, text, text, text, text),
	agent._prune_batch(uuid, text, timestamptz, integer), agent._in_transaction_block() FROM PUBLIC;
REVOKE ALL ON PROCEDURE agent.prune_retention(bigint, timestamptz) FROM PUBLIC;
