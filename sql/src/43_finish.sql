-- The finish of a run, its last step: a result applied to its invocation
-- (the final state by the billing rule of 40_supervisor.sql, the files it
-- returned, refund or not, its tool call and analytics row, its events,
-- its session's bookkeeping, the org's stored bytes and the end's
-- notification), one way and in one locking order, for a runner's finish
-- (agent.runner_finish, 45_runners.sql) and for a result staged behind a
-- tenant's lock (agent._finish_pending, the supervisor's); and the
-- supervisor's recovery at its start.

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

REVOKE ALL ON FUNCTION agent._finish_pending(integer), agent._try_apply(uuid), agent._apply_result(uuid),
	agent._apply_run_result(agent.invocations, agent.run_results, boolean),
	agent._apply_failure(uuid, text), agent._lock_for_finish(agent.invocations),
	agent._lock_invocation(uuid),
	agent._supervisor_recover(), agent._record_tool_call(agent.invocations),
	agent._write_tool_call(agent.invocations, text), agent._output_preview(text, integer),
	agent._refund_and_audit(agent.invocations, text) FROM PUBLIC;
