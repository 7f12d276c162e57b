-- What the client libraries (clients/python, clients/node; docs/clients.md)
-- need beside the API they call, and what operators read about the
-- latency those clients see.
--
--   agent.is_terminal(state)   whether an invocation's state is final: the
--                              state machine's own answer (src/guards.c), so
--                              no client keeps a list of final states
--   agent.latency(period, as_of)  p50/p99 of approve→finished and of run
--                              time per language over a window (operators)

-- A client streams a run until its state is final (execution.md,
-- "Streaming"); the list of final states lives in one place, the state
-- machine's table in C.  agent._state_is_terminal() answers false for a
-- word that is not a state, which suits the internal callers (they pass
-- a column that the CHECK keeps valid); a client's typo must not read as
-- "keep waiting forever", so this one refuses it.  Security definer: the
-- two helpers it asks are the owner's alone (99_privileges.sql).
CREATE FUNCTION agent.is_terminal(state text) RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF NOT agent.is_invocation_state(state) THEN
		RAISE EXCEPTION 'unknown invocation state "%"', left(state, 64)
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'The states are those of docs/control-plane.md, "Invocation states".';
	END IF;
	RETURN agent._state_is_terminal(state);
END
$$;
COMMENT ON FUNCTION agent.is_terminal(text) IS
	'whether an invocation state is final (nothing happens to the invocation after it); an unknown state is 22023';

-- Latency per language over a window, for operators: how long approved
-- runs took from the approval to their end (what an approver waits for:
-- the queue, provisioning and the run), and how long the runs themselves
-- took (started to finished), as p50 and p99.  A run counts in the window
-- in which it finished, [as_of - period, as_of).  `runs` counts the
-- approved runs that finished there, whatever their end (a refunded
-- provision_failed included: an approver waited for it too); `started`
-- those of them that ran (a start was recorded), over which run time is
-- taken.  Security invoker: the auditor reads every tenant's runs, the
-- owner too.  It reads agent.invocations by a sequential scan (no index
-- on finished_at: this is an operator's occasional query, and an index
-- would cost every run's finish a write): docs/operations.md says so.
CREATE FUNCTION agent.latency(period interval DEFAULT '01:00:00', as_of timestamptz DEFAULT now())
	RETURNS TABLE (language text, runs bigint,
				   approve_to_finish_p50 interval, approve_to_finish_p99 interval,
				   started bigint, run_time_p50 interval, run_time_p99 interval)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF period IS NULL OR as_of IS NULL THEN
		RAISE EXCEPTION '% must not be null', CASE WHEN period IS NULL THEN 'period' ELSE 'as_of' END
			USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF period <= interval '0' THEN
		RAISE EXCEPTION 'period must be positive'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('The period given is %s.', period);
	END IF;
	RETURN QUERY
		SELECT i.language, count(*),
			   percentile_cont(0.5) WITHIN GROUP (ORDER BY i.finished_at - i.approved_at),
			   percentile_cont(0.99) WITHIN GROUP (ORDER BY i.finished_at - i.approved_at),
			   count(i.started_at),
			   percentile_cont(0.5) WITHIN GROUP (ORDER BY i.finished_at - i.started_at),
			   percentile_cont(0.99) WITHIN GROUP (ORDER BY i.finished_at - i.started_at)
		  FROM agent.invocations i
		 WHERE i.finished_at >= as_of - period AND i.finished_at < as_of
		   AND i.approved_at IS NOT NULL
		 GROUP BY i.language
		 ORDER BY i.language;
END
$$;
COMMENT ON FUNCTION agent.latency(interval, timestamptz) IS
	'p50 and p99 of approve-to-finished and of run time per language, for the approved runs that finished in [as_of - period, as_of)';

GRANT EXECUTE ON FUNCTION agent.is_terminal(text) TO agent_backend, agent_auditor;
GRANT EXECUTE ON FUNCTION agent.latency(interval, timestamptz) TO agent_auditor;
