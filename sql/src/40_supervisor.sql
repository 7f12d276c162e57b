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
	IF agent.current_org() IS NULL OR agent.current_workspace() IS NULL THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
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
--   _claim_invocations(runner, n)  approved -> provisioning, charged and
--                            leased (42_claim.sql: fair across orgs, within
--                            each org's limits, through agent._claim_gate)
--   _prepare_invocation(id)  what to put in the workspace before the start
--   _mark_running(id, pid)   provisioning -> running
--   _append_output(id, ...)  one chunk of output
--   _store_produced_file(..) one file the run left behind (staged)
--   _apply_run_result(..)    a result applied: -> a final state by the one
--                            billing rule (agent.runner_finish; or a staged
--                            one, agent._apply_result)
--   _finish_pending(n)       apply results staged earlier (a lock was held)
--   _supervisor_recover()    at the supervisor's start: the rows an
--                            in-database supervisor of 0.2.0 left in flight
--                            (no runner) get a result ("ours failed")
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

-- (the claim: 42_claim.sql)

-- ---- start ---------------------------------------------------------------

-- What to write into a claimed invocation's workspace before the jail
-- starts: the conversation's files its session does not hold yet (all of
-- them when the workspace is new, e.g. its directory vanished), marked as
-- held in this transaction; and the skills to mount, one row per skill
-- (kind 'skill': skill_id and name; the files are read with
-- agent._skill_files()); its egress policy file (kind 'egress') and the
-- sealed secrets its proxy puts in (kind 'secret', 48_secrets.sql).
-- Fenced: nothing unless the row is provisioning.
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
		-- and the sealed secrets its proxy puts in (48_secrets.sql)
		FOR f IN SELECT x.name, x.content FROM agent._secrets_to_place(invocation) x LOOP
			kind := 'secret';
			name := f.name;
			content := f.content;
			RETURN NEXT;
		END LOOP;
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
-- One read of the three settings; a missing one raises as agent._setting().
CREATE FUNCTION agent._produced_caps(OUT max_files integer, OUT max_bytes bigint,
									 OUT max_file_bytes bigint)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n	integer;
BEGIN
	SELECT max(s.value) FILTER (WHERE s.key = 'max_produced_files')::integer,
		   max(s.value) FILTER (WHERE s.key = 'max_produced_bytes')::bigint,
		   max(s.value) FILTER (WHERE s.key = 'max_produced_file_bytes')::bigint,
		   count(*)::integer
	  INTO max_files, max_bytes, max_file_bytes, n
	  FROM agent.settings s
	 WHERE s.key IN ('max_produced_files', 'max_produced_bytes', 'max_produced_file_bytes');
	IF n < 3 THEN
		max_files := agent._setting('max_produced_files')::integer;
		max_bytes := agent._setting('max_produced_bytes')::bigint;
		max_file_bytes := agent._setting('max_produced_file_bytes')::bigint;
	END IF;
END
$$;

-- The jail started.  Skipped (false) when the row or its org's audit head
-- (or usage row, which the append updates) is locked elsewhere: the finish
-- then moves it through running itself.
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
	IF NOT agent._try_audit_head(r.org_id) THEN
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

-- The preview of a run's output: its output as it arrived (the chunks in
-- order), cut at a character boundary within preview_bytes.
CREATE FUNCTION agent._output_preview(output text, preview_bytes integer) RETURNS text
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	preview text := coalesce(output, '');
BEGIN
	IF octet_length(preview) > preview_bytes THEN
		preview := left(preview, preview_bytes);
		WHILE octet_length(preview) > preview_bytes LOOP
			preview := left(preview, length(preview) - 1);
		END LOOP;
	END IF;
	RETURN preview;
END
$$;

-- Write the tool call and the analytics row of a finished invocation r,
-- whose output (all of it, in order) is run_output: one statement, the tool
-- call first (its trigger, agent._tool_call_egress, appends the egress
-- event), then the analytics row.
CREATE FUNCTION agent._write_tool_call(r agent.invocations, run_output text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	preview_bytes	integer := (agent._request_limits()).preview_bytes;
	preview			text := coalesce(run_output, '');
BEGIN
	IF octet_length(preview) > preview_bytes THEN
		preview := agent._output_preview(preview, preview_bytes);
	END IF;
	WITH tc AS (
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
		ON CONFLICT (invocation_id) DO NOTHING
		RETURNING 1)
	INSERT INTO agent.tool_invocations
		(invocation_id, org_id, workspace_id, agent_id, conversation_id, tool_name,
		 language, status, exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes,
		 credits_charged, timed_out, oom_killed, output_truncated, started_at, finished_at)
	SELECT r.id, r.org_id, r.workspace_id, r.agent_id, r.conversation_id, 'code_execution',
		   r.language, r.state, r.exit_code, r.signal,
		   CASE WHEN r.started_at IS NOT NULL
				THEN (extract(epoch FROM r.finished_at - r.started_at) * 1000)::bigint END,
		   r.cpu_ms, r.peak_memory_bytes, r.credits_charged,
		   coalesce(r.timed_out, false), coalesce(r.oom_killed, false),
		   coalesce(r.output_truncated, false), r.started_at, r.finished_at
	  FROM (SELECT count(*) FROM tc) written		-- after the tool call, whether or not it was new
	ON CONFLICT (invocation_id) DO NOTHING;
END
$$;

-- Write the tool call and the analytics row of a finished invocation.
CREATE FUNCTION agent._record_tool_call(r agent.invocations) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._write_tool_call(r, (SELECT string_agg(o.data, '' ORDER BY o.seq)
										 FROM agent.invocation_output o
										WHERE o.invocation_id = r.id));
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

-- The finish's one locking order.  The invocation's own row comes first,
-- locked by the caller (FOR NO KEY UPDATE NOWAIT, in the read that checks
-- its lease or its staged result); then, here, what ending it writes
-- besides: its org's audit head and usage row (one statement), its
-- conversation (FOR KEY SHARE: the tool call's foreign key) and its
-- session, each NOWAIT.  Raises lock_not_available (55P03) when any is
-- held elsewhere.  (An org without a usage row, an old one, gets it here:
-- the finish counts its output there.)
CREATE FUNCTION agent._lock_for_finish(r agent.invocations) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM 1 FROM agent.audit_heads h, agent.org_usage u
	 WHERE h.org_id = r.org_id AND u.org_id = r.org_id
	   FOR UPDATE OF h NOWAIT FOR NO KEY UPDATE OF u NOWAIT;
	IF NOT FOUND THEN		-- (no head or no usage row yet)
		PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = r.org_id FOR UPDATE NOWAIT;
		PERFORM 1 FROM agent.org_usage u WHERE u.org_id = r.org_id FOR NO KEY UPDATE NOWAIT;
		IF NOT FOUND THEN
			INSERT INTO agent.org_usage (org_id) VALUES (r.org_id) ON CONFLICT (org_id) DO NOTHING;
		END IF;
	END IF;
	IF r.conversation_id IS NOT NULL THEN
		PERFORM 1 FROM agent.conversations c WHERE c.id = r.conversation_id FOR KEY SHARE NOWAIT;
	END IF;
	IF r.session_id IS NOT NULL THEN
		PERFORM 1 FROM agent.sessions s WHERE s.id = r.session_id FOR NO KEY UPDATE NOWAIT;
	END IF;
END
$$;

-- The invocation, locked first in the finish's order (NOWAIT: 55P03 when
-- held elsewhere), or NULL when it does not exist.
CREATE FUNCTION agent._lock_invocation(invocation uuid) RETURNS agent.invocations
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation FOR NO KEY UPDATE NOWAIT;
	RETURN r;
END
$$;

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

-- Apply a staged result: the invocation's final state by the billing rule,
-- its verdict fields, the files it returned, refund or not, tool call,
-- analytics row, audit event, the session's bookkeeping, the org's stored
-- bytes, and the final notification.  Returns the final state, or NULL
-- when nothing is staged.  Raises lock_not_available when a lock is held
-- elsewhere (nothing is written; the result stays staged).  The
-- staged row first, then the finish's order.
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
	r := agent._lock_invocation(invocation);
	IF r.id IS NULL OR r.state NOT IN ('provisioning', 'running') THEN
		-- Already resolved (or gone): the staged result is moot.
		DELETE FROM agent.run_result_files x WHERE x.invocation_id = invocation;
		DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
		RETURN r.state;
	END IF;
	PERFORM agent._lock_for_finish(r);
	RETURN agent._apply_run_result(r, res, true);
END
$$;

-- Apply a result to its invocation r, in flight and locked in the
-- finish's order (the row, then agent._lock_for_finish): the one apply,
-- for a staged result (agent._apply_result: staged true, the row of
-- agent.run_results is deleted here) and for a runner's finish
-- (agent.runner_finish: staged false).  Returns the final state.
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
	v_output text;
	v_started boolean;
BEGIN
	-- A verdict jsonb does not accept is no verdict (a failure of ours).
	BEGIN
		v := res.verdict::jsonb;
	EXCEPTION WHEN data_exception THEN
		v := NULL;
	END;
	o := agent._run_outcome(v, res.error, r.cancel_requested_at IS NOT NULL, r.cancel_requested_by);
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

	-- The files it returned (a run of ours that failed returns none),
	-- taken out of staging by the same statement.
	FOR f IN WITH staged AS (DELETE FROM agent.run_result_files x WHERE x.invocation_id = invocation
							 RETURNING x.*)
			 SELECT s.* FROM staged s ORDER BY s.seq LOOP
		IF o.charged THEN
			PERFORM agent._save_produced_file(r, f.name, f.status, f.reason, f.content);
		END IF;
	END LOOP;

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
	-- Its output, once: the tool call's preview and the bytes it stores.
	SELECT string_agg(x.data, '' ORDER BY x.seq), coalesce(sum(octet_length(x.data)), 0)
	  INTO v_output, out_bytes
	  FROM agent.invocation_output x WHERE x.invocation_id = invocation;
	PERFORM agent._write_tool_call(r, v_output);

	-- The session: idle time counts from the end of its last run; what its
	-- workspace holds now; rebuilt next time if the run left it over its
	-- limits.
	IF r.session_id IS NOT NULL THEN
		PERFORM agent._session_after_run(r, res.workspace_bytes, res.workspace_entries,
										 res.workspace_reset);
	END IF;

	-- Output is counted against the org's storage; it is kept even past
	-- the quota (it is bounded per run by sandbox.output_limit).  No
	-- output, nothing to count (agent._use_storage of 0 bytes writes
	-- nothing; the usage row is locked already, agent._lock_for_finish).
	IF out_bytes > 0 THEN
		PERFORM agent._use_storage(r.org_id, out_bytes, 'output', true);
	END IF;

	PERFORM agent._notify_invocation(invocation, '{"done":true}');
	PERFORM agent._wake_for_org(r.org_id);
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
	r := agent._lock_invocation(invocation);
	IF r.id IS NOT NULL AND r.state IN ('provisioning', 'running') THEN
		PERFORM agent._lock_for_finish(r);
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
-- It also points the maintenance jobs at this server as it runs now (a
-- restart may have changed its port or sockets; a restored or promoted
-- copy's jobs name the source: agent._point_maintenance_jobs,
-- 44_maintenance.sql).  Its UPDATE of cron.job, even of no row, makes
-- pg_cron's launcher read its jobs again: pg_cron 1.4 misses the jobs
-- of a CREATE EXTENSION sandbox_ext whose invalidations overflowed its
-- queue (its cache callback ignores a reset; fixed upstream in pg_cron
-- f677150), and the supervisor starts seconds after the extension
-- appears, after that reset.  cron.job locked by an operator's open
-- transaction (the supervisor's lock_timeout) is no reason to stay down.
CREATE FUNCTION agent._supervisor_recover() RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n	integer;
BEGIN
	BEGIN
		PERFORM agent._point_maintenance_jobs();
	EXCEPTION
		WHEN lock_not_available THEN
			RAISE LOG 'sandbox_ext did not point the maintenance jobs at this server: cron.job is locked';
	END;
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
-- what the run produced with its tool call, in one statement.  finished
-- is true when the run reached a final state before the wait ended, false
-- when the timeout passed first (the rest then describes it as it is so
-- far).  Whether the run itself timed out is its state ('timed_out'), as
-- everywhere else.  stdout and stderr are '' when the stream is empty.  Output is at most sandbox.output_limit per stream (the
-- supervisor keeps no more).
CREATE TYPE agent.run_result AS (
	invocation_id	uuid,
	state			text,
	finished		boolean,
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
	SELECT i.id, i.state, agent._state_is_terminal(i.state), i.state_reason, i.exit_code,
		   coalesce((SELECT string_agg(o.data, '' ORDER BY o.seq) FROM agent.invocation_output o
					  WHERE o.invocation_id = i.id AND o.stream = 'stdout'), ''),
		   coalesce((SELECT string_agg(o.data, '' ORDER BY o.seq) FROM agent.invocation_output o
					  WHERE o.invocation_id = i.id AND o.stream = 'stderr'), ''),
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
	'wait for an invocation like agent.wait() and return its state, whether it finished before the wait ended, its output and its tool call';

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

REVOKE ALL ON FUNCTION agent._mark_running(uuid, integer),
	agent._append_output(uuid, text, text),
	agent._finish_pending(integer), agent._try_apply(uuid), agent._apply_result(uuid),
	agent._apply_run_result(agent.invocations, agent.run_results, boolean),
	agent._apply_failure(uuid, text), agent._lock_for_finish(agent.invocations),
	agent._lock_invocation(uuid),
	agent._prepare_invocation(uuid, boolean), agent._skill_files(uuid), agent._produced_caps(),
	agent._supervisor_recover(), agent._record_tool_call(agent.invocations),
	agent._write_tool_call(agent.invocations, text), agent._output_preview(text, integer),
	agent._refund_and_audit(agent.invocations, text),
	agent._supervisor_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.read_output(uuid, integer), agent.cancel(uuid, text, text),
	agent.wait(uuid, interval), agent.output_channel(uuid), agent._invocation_state(uuid),
	agent._state_is_terminal(text), agent.wait_result(uuid, interval) TO agent_backend;
