-- Execution: what a run's steps share (its channel, its output, its staged
-- result, the billing rule), and the API around a running invocation:
-- output, cancel, wait, status.  The steps each have a file of their own:
-- the claim 42_claim.sql, the start 43_start.sql, the finish
-- 43_finish.sql, the end's log line 41_run_log.sql.
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

REVOKE ALL ON FUNCTION agent._supervisor_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.read_output(uuid, integer), agent.cancel(uuid, text, text),
	agent.wait(uuid, interval), agent.output_channel(uuid), agent._invocation_state(uuid),
	agent._state_is_terminal(text), agent.wait_result(uuid, interval) TO agent_backend;
