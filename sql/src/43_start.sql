-- The start of a run, its second step after the claim (42_claim.sql):
-- what to put into its workspace, the caps on what it may return, the
-- jail's start and its output as it comes (40_supervisor.sql has the
-- tables).  Runners reach these through agent.runner_prepare,
-- agent.runner_mark_running and agent.runner_append_output
-- (45_runners.sql), which check the runner's lease first.

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

REVOKE ALL ON FUNCTION agent._mark_running(uuid, integer),
	agent._append_output(uuid, text, text),
	agent._prepare_invocation(uuid, boolean), agent._skill_files(uuid), agent._produced_caps()
	FROM PUBLIC;
