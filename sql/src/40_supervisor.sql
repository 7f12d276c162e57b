-- Execution: what the supervisor background worker (src/supervisor.c) calls,
-- and the API around a running invocation: output, cancel, wait, status.
--
-- Every function the supervisor calls is one short step fenced on the state
-- it expects, so a supervisor that dies between two steps leaves rows that
-- agent._supervisor_recover() resolves at the next start.

ALTER TABLE agent.invocations
	ADD COLUMN cancel_requested_at timestamptz,
	ADD COLUMN cancel_requested_by text,
	ADD COLUMN jail_pid integer,
	ADD COLUMN cpu_ms bigint,
	ADD COLUMN peak_memory_bytes bigint,
	ADD COLUMN stdout_bytes bigint,
	ADD COLUMN stderr_bytes bigint,
	-- Request order: breaks ties between invocations approved at the same
	-- instant (one transaction), so a conversation's runs keep their order.
	ADD COLUMN request_seq bigint GENERATED ALWAYS AS IDENTITY;

-- Terminal states: nothing happens to an invocation after these.
CREATE FUNCTION agent._state_is_terminal(state text) RETURNS boolean
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN state IN ('succeeded', 'failed', 'timed_out', 'killed', 'denied',
					 'expired', 'cancelled', 'provision_failed',
					 'insufficient_credits');

-- The NOTIFY channel of one invocation is named after a random token, not
-- after the invocation's id: any role may LISTEN on (or NOTIFY) any
-- channel it can name, so only the invocation's tenant may learn the name,
-- through agent.output_channel().  (The token is as secret as the rows the
-- tenant reads: row-level security.)
ALTER TABLE agent.invocations
	ADD COLUMN channel_token uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid();

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
	v_ok	boolean;
	v_token	uuid;
BEGIN
	v_ok := agent._require_tenant(true);
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
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.pg_notify(agent._channel_name(i.channel_token),
								CASE WHEN payload ->> 'done' = 'true' THEN 'done' ELSE 'output' END)
	  FROM agent.invocations i
	 WHERE i.id = invocation
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
-- Supervisor steps (owner only; never granted)
-- ----------------------------------------------------------------------

-- Claim up to max_rows approved invocations: check the code is the code
-- that was approved, charge the credits, move to provisioning.  Runs in the
-- supervisor's short claim transaction, which commits before any jail
-- starts.  Rows another claimer holds are skipped, not waited for.
CREATE FUNCTION agent._claim_invocations(max_rows integer)
	RETURNS TABLE (id uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r			agent.invocations;
	approved	text;
	err			text;
	v_session	uuid;
	v_gen		integer;
	v_fresh		boolean;
	taken		uuid[] := '{}';
BEGIN
	-- Within a conversation runs are serial and in approval order: an
	-- invocation waits while another of its conversation is in flight or
	-- was approved before it.
	FOR r IN
		SELECT i.* FROM agent.invocations i
		 WHERE i.state = 'approved'
		   AND (i.conversation_id IS NULL
				OR (NOT EXISTS (SELECT 1 FROM agent.invocations j
								 WHERE j.conversation_id = i.conversation_id
								   AND j.state IN ('provisioning', 'running'))
					AND NOT EXISTS (SELECT 1 FROM agent.invocations j
									 WHERE j.conversation_id = i.conversation_id
									   AND j.state = 'approved'
									   AND (j.approved_at, j.request_seq) < (i.approved_at, i.request_seq))))
		 ORDER BY i.approved_at, i.request_seq
		 LIMIT max_rows
		   FOR UPDATE SKIP LOCKED
	LOOP
		-- Another claimer may be working on this conversation: its lock on
		-- the conversation row says so.  Re-check under the lock (each
		-- statement here sees what committed before it).
		IF r.conversation_id IS NOT NULL THEN
			IF r.conversation_id = ANY (taken) THEN
				CONTINUE;
			END IF;
			PERFORM 1 FROM agent.conversations c WHERE c.id = r.conversation_id
			   FOR UPDATE SKIP LOCKED;
			IF NOT FOUND THEN
				CONTINUE;
			END IF;
			IF EXISTS (SELECT 1 FROM agent.invocations j
						WHERE j.conversation_id = r.conversation_id
						  AND j.state IN ('provisioning', 'running')) THEN
				CONTINUE;
			END IF;
		END IF;
		SELECT a.approved_code_sha256 INTO approved
		  FROM agent.approval_requests a
		 WHERE a.id = r.approval_id AND a.status = 'approved';

		BEGIN
			-- The code about to run must be, byte for byte, the code approved.
			IF approved IS NULL
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
														'code_sha256', agent.code_sha256(r.code)));
				PERFORM agent._notify_invocation(r.id, '{"done":true}');
				CONTINUE;
			END IF;

			IF NOT agent.charge_invocation(r.id) THEN
				UPDATE agent.invocations i
				   SET state = 'insufficient_credits',
					   state_reason = 'the organization does not have enough credits',
					   finished_at = now()
				 WHERE i.id = r.id;
				PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.insufficient_credits',
									 r.id, 'supervisor', '{}'::jsonb);
				PERFORM agent._notify_invocation(r.id, '{"done":true}');
				CONTINUE;
			END IF;

			v_session := NULL;
			v_gen := NULL;
			v_fresh := NULL;
			IF r.conversation_id IS NOT NULL THEN
				SELECT x.session_id, x.generation, x.fresh INTO v_session, v_gen, v_fresh
				  FROM agent._session_for(r) x;
				taken := taken || r.conversation_id;
			END IF;
			UPDATE agent.invocations i
			   SET state = 'provisioning', provisioned_at = now(),
				   session_id = v_session, session_generation = v_gen
			 WHERE i.id = r.id
			RETURNING * INTO r;
			PERFORM agent._audit(r.org_id, r.workspace_id, 'credits.charged', r.id, 'supervisor',
								 jsonb_build_object('amount', r.credits_charged));
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provisioned', r.id,
								 'supervisor', jsonb_build_object('credits_charged', r.credits_charged));
		EXCEPTION WHEN others THEN
			-- One row that cannot be claimed (a bug, a broken catalog row)
			-- must not block the queue: everything above for this row is
			-- rolled back (uncharged) and the row fails with the reason.
			GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
			UPDATE agent.invocations i
			   SET state = 'provision_failed',
				   state_reason = 'could not provision: ' || err,
				   finished_at = now()
			 WHERE i.id = r.id;
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
								 'supervisor', jsonb_build_object('reason', 'could not provision: ' || err));
			PERFORM agent._notify_invocation(r.id, '{"done":true}');
			CONTINUE;
		END;

		id := r.id;
		language := r.language;
		code := r.code;
		wall_time_s := r.wall_time_s;
		memory_mb := r.memory_mb;
		conversation_id := r.conversation_id;
		session_id := v_session;
		fresh_session := v_fresh;
		RETURN NEXT;
	END LOOP;
END
$$;

-- The jail started.
CREATE FUNCTION agent._mark_running(invocation uuid, pid integer) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r agent.invocations;
BEGIN
	UPDATE agent.invocations i
	   SET state = 'running', started_at = now(), jail_pid = pid
	 WHERE i.id = invocation AND i.state = 'provisioning'
	RETURNING * INTO r;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.started', r.id,
						 'supervisor', jsonb_build_object('language', r.language));
	RETURN true;
END
$$;

-- Append one chunk of output and announce it.
CREATE FUNCTION agent._append_output(invocation uuid, stream text, data text)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r		agent.invocations;
	next_seq	integer;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
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

-- The outcome named by a verdict.
CREATE FUNCTION agent._verdict_state(v jsonb, cancel_requested boolean) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN CASE
		WHEN (v ->> 'killed')::boolean AND cancel_requested THEN 'cancelled'
		WHEN (v ->> 'timed_out')::boolean THEN 'timed_out'
		WHEN (v ->> 'killed')::boolean THEN 'killed'
		WHEN v ->> 'status' = 'exited' AND (v ->> 'exit_code')::integer = 0 THEN 'succeeded'
		ELSE 'failed'
	END;

-- Write the tool call and the analytics row of a finished invocation.
CREATE FUNCTION agent._record_tool_call(r agent.invocations) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	preview_bytes	integer := coalesce((SELECT s.setting::integer FROM pg_settings s
										  WHERE s.name = 'sandbox.preview_size'), 4096);
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
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	amount bigint;
BEGIN
	SELECT -l.amount INTO amount FROM agent.credit_ledger l
	 WHERE l.invocation_id = r.id AND l.kind = 'charge';
	IF agent.refund_invocation(r.id, reason) THEN
		PERFORM agent._audit(r.org_id, r.workspace_id, 'credits.refunded', r.id, 'supervisor',
							 jsonb_build_object('amount', amount, 'reason', reason));
	END IF;
END
$$;

-- Finish an invocation from the jail's verdict, in the supervisor's one
-- finishing transaction.  `error` (or a verdict with setup_error, or no
-- verdict at all) means the sandbox could not be built or broke: the run is
-- provision_failed and its charge refunded here, in the same transaction.
CREATE FUNCTION agent._finish_invocation(invocation uuid, verdict text, jail_status integer,
										 error text, spawned boolean,
										 truncated boolean DEFAULT false)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r			agent.invocations;
	v			jsonb;
	new_state	text;
	reason		text;
BEGIN
	SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation FOR UPDATE;
	IF NOT FOUND OR r.state NOT IN ('provisioning', 'running') THEN
		RETURN r.state;			-- already resolved (e.g. by recovery)
	END IF;

	BEGIN
		v := verdict::jsonb;
		IF jsonb_typeof(v) <> 'object' THEN
			v := NULL;
		END IF;
	EXCEPTION WHEN others THEN
		v := NULL;
	END;

	IF error IS NOT NULL THEN
		new_state := 'provision_failed';
		reason := error;
	ELSIF v IS NULL THEN
		new_state := 'provision_failed';
		reason := format('sandbox-jail exited with status %s without a verdict', jail_status);
	ELSIF v ->> 'setup_error' IS NOT NULL THEN
		new_state := 'provision_failed';
		reason := 'sandbox setup failed: ' || (v ->> 'setup_error');
	ELSE
		new_state := agent._verdict_state(v, r.cancel_requested_at IS NOT NULL);
		reason := CASE new_state
			WHEN 'cancelled' THEN format('cancelled by %s', coalesce(r.cancel_requested_by, 'unknown'))
			WHEN 'timed_out' THEN 'the wall or CPU time limit was reached'
			WHEN 'killed' THEN 'the sandbox was killed'
			WHEN 'failed' THEN
				CASE WHEN (v ->> 'oom_killed')::boolean THEN 'out of memory'
					 WHEN v ->> 'status' = 'signaled' THEN format('killed by signal %s', v ->> 'signal')
					 ELSE format('exited with code %s', v ->> 'exit_code') END
			ELSE NULL END;
	END IF;

	-- The jail ran but the row was never marked running (that short
	-- transaction failed, or the run ended first): it did start.
	IF r.state = 'provisioning' AND new_state <> 'provision_failed' THEN
		UPDATE agent.invocations i SET state = 'running', started_at = coalesce(i.started_at, now())
		 WHERE i.id = invocation;
	END IF;

	UPDATE agent.invocations i
	   SET state = new_state,
		   state_reason = reason,
		   exit_code = (v ->> 'exit_code')::integer,
		   signal = (v ->> 'signal')::integer,
		   timed_out = coalesce((v ->> 'timed_out')::boolean, false),
		   oom_killed = coalesce((v ->> 'oom_killed')::boolean, false),
		   output_truncated = coalesce((v ->> 'output_truncated')::boolean, false)
							  OR coalesce(truncated, false),
		   cpu_ms = (v ->> 'cpu_ms')::bigint,
		   peak_memory_bytes = (v ->> 'peak_memory_bytes')::bigint,
		   stdout_bytes = (v ->> 'stdout_bytes')::bigint,
		   stderr_bytes = (v ->> 'stderr_bytes')::bigint,
		   finished_at = now()
	 WHERE i.id = invocation
	RETURNING * INTO r;

	IF new_state = 'provision_failed' THEN
		PERFORM agent._refund_and_audit(r, reason);
		SELECT * INTO r FROM agent.invocations i WHERE i.id = invocation;
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
							 'supervisor',
							 jsonb_build_object('reason', reason, 'jail_status', jail_status,
												'spawned', spawned));
	ELSE
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.finished', r.id,
							 'supervisor',
							 jsonb_build_object('state', new_state, 'exit_code', r.exit_code,
												'signal', r.signal, 'timed_out', r.timed_out,
												'oom_killed', r.oom_killed,
												'output_truncated', r.output_truncated,
												'credits_charged', r.credits_charged,
												'verdict', v));
	END IF;
	PERFORM agent._record_tool_call(r);
	-- A session's idle time counts from the end of its last run.
	UPDATE agent.sessions x SET last_used_at = now()
	 WHERE x.id = r.session_id AND x.state = 'active';
	PERFORM agent._notify_invocation(invocation, '{"done":true}');
	RETURN new_state;
END
$$;

-- Resolve what a dead supervisor left in flight.  Called by the supervisor
-- at start, before it claims anything; its jails died with it
-- (PR_SET_PDEATHSIG).  A run that never got past provisioning did not run
-- user code: it is an infrastructure failure and is refunded.  A run that
-- was running is failed and stays charged (the code ran).
CREATE FUNCTION agent._supervisor_recover() RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	r	agent.invocations;
	n	integer := 0;
BEGIN
	FOR r IN
		SELECT * FROM agent.invocations i
		 WHERE i.state IN ('provisioning', 'running')
		 ORDER BY i.provisioned_at
		   FOR UPDATE
	LOOP
		IF r.state = 'provisioning' THEN
			UPDATE agent.invocations i
			   SET state = 'provision_failed',
				   state_reason = 'supervisor restarted before the sandbox started',
				   finished_at = now()
			 WHERE i.id = r.id;
			PERFORM agent._refund_and_audit(r, 'supervisor restarted before the sandbox started');
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
								 'supervisor',
								 jsonb_build_object('reason', 'supervisor restarted before the sandbox started'));
		ELSE
			UPDATE agent.invocations i
			   SET state = CASE WHEN i.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'failed' END,
				   state_reason = 'supervisor restarted',
				   finished_at = now()
			 WHERE i.id = r.id;
			PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.finished', r.id,
								 'supervisor',
								 jsonb_build_object('state', 'failed', 'reason', 'supervisor restarted',
													'jail_pid', r.jail_pid));
		END IF;
		SELECT * INTO r FROM agent.invocations i WHERE i.id = r.id;
		PERFORM agent._record_tool_call(r);
		PERFORM agent._notify_invocation(r.id, '{"done":true}');
		n := n + 1;
	END LOOP;
	IF n > 0 THEN
		RAISE LOG 'sandbox_ext supervisor: resolved % invocation(s) left in flight', n;
	END IF;
	RETURN n;
END
$$;

-- ----------------------------------------------------------------------
-- API
-- ----------------------------------------------------------------------

-- The state of an invocation the caller's tenant may see (NULL otherwise).
CREATE FUNCTION agent._invocation_state(invocation uuid) RETURNS text
	LANGUAGE sql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT i.state FROM agent.invocations i
			 WHERE i.id = invocation
			   AND i.org_id = agent.current_org()
			   AND i.workspace_id = agent.current_workspace());

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
		UPDATE agent.approval_requests a
		   SET status = 'expired', decided_at = now(), decision_reason = 'invocation cancelled'
		 WHERE a.id = r.approval_id AND a.status = 'pending';
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.cancelled', r.id, actor,
							 jsonb_build_object('reason', reason, 'previous_state', r.state,
												'charged', false));
		PERFORM agent._notify_invocation(r.id, '{"done":true}');
		RETURN 'cancelled';
	ELSIF r.state IN ('provisioning', 'running') THEN
		IF r.cancel_requested_at IS NULL THEN
			UPDATE agent.invocations i
			   SET cancel_requested_at = now(), cancel_requested_by = actor
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

CREATE FUNCTION agent.worker_status(
		OUT preloaded boolean, OUT running boolean, OUT pid integer,
		OUT started_at timestamptz, OUT slots_in_use integer,
		OUT max_concurrent_runs integer, OUT invocations uuid[])
	AS 'MODULE_PATHNAME', 'sandbox_worker_status'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION agent.worker_status() IS
	'the supervisor: whether it runs, its pid, slots in use and the invocations they run';

REVOKE ALL ON FUNCTION agent._claim_invocations(integer), agent._mark_running(uuid, integer),
	agent._append_output(uuid, text, text), agent._finish_invocation(uuid, text, integer, text, boolean, boolean),
	agent._supervisor_recover(), agent._record_tool_call(agent.invocations),
	agent._refund_and_audit(agent.invocations, text),
	agent.worker_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.read_output(uuid, integer), agent.cancel(uuid, text, text),
	agent.wait(uuid, interval), agent.output_channel(uuid), agent._invocation_state(uuid),
	agent._state_is_terminal(text) TO agent_backend;
GRANT EXECUTE ON FUNCTION agent.worker_status() TO agent_auditor;
