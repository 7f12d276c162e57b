-- Isolation classes (docs/security.md, "The two isolation classes";
-- docs/jail.md, "The gvisor class"): what stands between a run's code and
-- the runner host's kernel.
--
--   namespaces  the jail's namespaces, seccomp filter, capabilities and
--               cgroup around the payload on the host's kernel (the
--               default, every runner runs it)
--   gvisor      the same sandbox around a gVisor kernel that runs the
--               payload (runsc); only on runners that advertise it
--
-- Who chooses (each can only make it stricter than what is above it):
--   agent.isolation_settings  the operator's per plan (agent.set_isolation
--                             with plan), the org's admin's per org
--                             (agent.set_org_isolation; the operator may
--                             set it too: agent.set_isolation with org)
--   agent.agent_isolation     an agent's (the backend:
--                             agent.set_agent_isolation)
-- A run's class is the strictest of its plan's, its org's and its
-- agent's (agent._isolation_choose), fixed when it is requested, copied
-- into the invocation, frozen, shown on the card and bound to the
-- approval (approved_isolation).  Runners advertise the classes they can
-- run after each registration (agent.runner_report_isolation; no report:
-- namespaces only); the claim gives a run only to a runner that
-- advertises its class (agent._isolation_claimable, the claim's one
-- call), and agent.queue_status() says when none can
-- (agent._isolation_wait).

CREATE TABLE agent.isolation_settings (
	plan			text REFERENCES agent.plans (plan),
	org_id			uuid REFERENCES agent.orgs (id),
	isolation		text NOT NULL CHECK (isolation IN ('namespaces', 'gvisor')),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	CHECK ((plan IS NULL) <> (org_id IS NULL)),
	UNIQUE NULLS NOT DISTINCT (plan, org_id)
);
COMMENT ON TABLE agent.isolation_settings IS
	'the isolation class of the orgs of a plan, or of one org (no row: namespaces)';

CREATE TABLE agent.agent_isolation (
	agent_id		uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	isolation		text NOT NULL CHECK (isolation IN ('namespaces', 'gvisor')),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
);
COMMENT ON TABLE agent.agent_isolation IS
	'the isolation class an agent asks for (no row: its org''s); it can only narrow its org''s';

CREATE TABLE agent.runner_isolation (
	runner_id		uuid PRIMARY KEY REFERENCES agent.runners (id),
	classes			text[] NOT NULL CHECK (classes <@ ARRAY['namespaces', 'gvisor']
										   AND 'namespaces' = ANY (classes)),
	-- why the classes it does not advertise are missing ("gvisor: ..."), as
	-- its probe found (sandbox-runner --check prints the same)
	problems		text,
	reported_at		timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE agent.runner_isolation IS
	'the isolation classes each runner can run, as it last reported them (no row: namespaces)';

ALTER TABLE agent.isolation_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_isolation ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.runner_isolation ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.isolation_settings FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.agent_isolation FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.runner_isolation FOR SELECT TO agent_auditor USING (true);

-- ---- the classes ---------------------------------------------------------------

-- How strict a class is: a setting can only raise what is above it.
-- (No SET clause: a SQL function with one is never inlined and is planned
-- again on every call; this one is inlined into its callers' plans.  It
-- names nothing a search_path could change: the comparisons are of text.)
CREATE FUNCTION agent._isolation_rank(isolation text) RETURNS integer
	LANGUAGE sql IMMUTABLE
	RETURN CASE isolation WHEN 'namespaces' THEN 0 WHEN 'gvisor' THEN 1 END;

-- A class name, or an error (22004 for NULL, 22023 for anything else).
CREATE FUNCTION agent._isolation_check(isolation text) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF isolation IS NULL THEN
		RAISE EXCEPTION 'isolation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF agent._isolation_rank(isolation) IS NULL THEN
		RAISE EXCEPTION 'unknown isolation class "%"', agent._shown(isolation)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'The classes are namespaces and gvisor (docs/security.md).';
	END IF;
END
$$;

-- The class of an org's runs before its agents narrow it: the stricter of
-- its plan's and its own (namespaces without either).
-- (PL/pgSQL, as every helper on a request's path: its plan is kept for the
-- session, where a SQL function with a SET clause is planned on every call.)
CREATE FUNCTION agent._isolation_org(org uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN coalesce((SELECT s.isolation FROM agent.isolation_settings s
					  JOIN agent.orgs o ON o.id = _isolation_org.org
					 WHERE s.org_id = o.id OR s.plan = o.plan
					 ORDER BY agent._isolation_rank(s.isolation) DESC
					 LIMIT 1), 'namespaces');
END
$$;

-- A request's class (request_execution): its org's (agent._isolation_org),
-- narrowed by its agent's: the strictest of the plan's, the org's and the
-- agent's, in one statement.
CREATE FUNCTION agent._isolation_choose(org uuid, agent_id uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN coalesce((SELECT c.isolation
					   FROM (SELECT s.isolation FROM agent.isolation_settings s
							   JOIN agent.orgs o ON o.id = _isolation_choose.org
							  WHERE s.org_id = o.id OR s.plan = o.plan
							 UNION ALL
							 SELECT ai.isolation FROM agent.agent_isolation ai
							  WHERE ai.agent_id = _isolation_choose.agent_id) c
					  ORDER BY agent._isolation_rank(c.isolation) DESC
					  LIMIT 1), 'namespaces');
END
$$;

-- ---- who chooses ----------------------------------------------------------------

-- The operator: the class of the orgs of a plan, or of one org (exactly
-- one of plan and org).  A plan's is a floor its orgs and agents can only
-- narrow; an org's the same for its agents.  namespaces removes the row.
-- An org's change is an event of its audit chain (org.policy_changed,
-- setting isolation).  True when it changed.
CREATE FUNCTION agent.set_isolation(isolation text, plan text DEFAULT NULL, org uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
BEGIN
	PERFORM agent._isolation_check(isolation);
	IF (plan IS NULL) = (org IS NULL) THEN
		RAISE EXCEPTION 'exactly one of plan and org must be given' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF plan IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.plans p WHERE p.plan = plan) THEN
		RAISE EXCEPTION 'plan "%" does not exist', agent._shown(plan)
			USING ERRCODE = 'no_data_found',
				  HINT = 'The plans are the rows of agent.plans.';
	END IF;
	IF org IS NOT NULL AND NOT EXISTS (SELECT 1 FROM agent.orgs o WHERE o.id = org) THEN
		RAISE EXCEPTION 'org % does not exist', org USING ERRCODE = 'no_data_found';
	END IF;
	RETURN agent._isolation_set(isolation, plan, org, current_user::text);
END
$$;
COMMENT ON FUNCTION agent.set_isolation(text, text, uuid) IS
	'the isolation class of the orgs of a plan, or of one org (the operator); true when it changed';

-- The org's admin (agent_admin, for the current org): its runs' class.
-- It cannot go below its plan's (42501).  True when it changed.
CREATE FUNCTION agent.set_org_isolation(isolation text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid;
	v_floor text;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	PERFORM agent._isolation_check(isolation);
	v_org := agent.current_org();
	PERFORM 1 FROM agent.orgs o WHERE o.id = v_org FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'org % does not exist', v_org
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	v_floor := coalesce((SELECT s.isolation FROM agent.isolation_settings s JOIN agent.orgs o ON o.plan = s.plan
						  WHERE o.id = v_org), 'namespaces');
	IF agent._isolation_rank(isolation) < agent._isolation_rank(v_floor) THEN
		RAISE EXCEPTION 'the isolation class of this organization cannot be weaker than its plan''s (%)', v_floor
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'The platform''s operator sets the plan''s class (agent.set_isolation).';
	END IF;
	RETURN agent._isolation_set(isolation, NULL, v_org, actor);
END
$$;
COMMENT ON FUNCTION agent.set_org_isolation(text, text) IS
	'org policy: the isolation class of the current org''s runs (not below its plan''s); true when it changed';

-- The row of a plan or an org, and an org's event.  Locks the org's row
-- first (set_org_isolation has).
CREATE FUNCTION agent._isolation_set(isolation text, plan text, org uuid, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_old	text;
BEGIN
	IF org IS NOT NULL THEN
		PERFORM 1 FROM agent.orgs o WHERE o.id = org FOR NO KEY UPDATE;
	END IF;
	v_old := coalesce((SELECT s.isolation FROM agent.isolation_settings s
						WHERE s.plan IS NOT DISTINCT FROM plan AND s.org_id IS NOT DISTINCT FROM org
						  FOR UPDATE), 'namespaces');
	IF v_old = isolation THEN
		RETURN false;
	END IF;
	DELETE FROM agent.isolation_settings s
	 WHERE s.plan IS NOT DISTINCT FROM plan AND s.org_id IS NOT DISTINCT FROM org;
	IF isolation <> 'namespaces' THEN
		INSERT INTO agent.isolation_settings (plan, org_id, isolation, set_by)
		VALUES (plan, org, isolation, actor);
	END IF;
	IF org IS NOT NULL THEN
		PERFORM agent._audit(org, NULL, 'org.policy_changed', NULL, actor,
							 jsonb_build_object('setting', 'isolation', 'from', v_old, 'to', isolation));
		-- a weaker class is not a narrowing: its event counts as any other
		IF agent._isolation_rank(isolation) < agent._isolation_rank(v_old) THEN
			PERFORM agent._check_storage(org, 'the change of the organization''s policy');
		END IF;
	END IF;
	RETURN true;
END
$$;

-- The backend: the class an agent of the current workspace asks for.  It
-- narrows its org's (namespaces: nothing more than the org's).  Event
-- agent.changed (setting isolation).  True when it changed.
CREATE FUNCTION agent.set_agent_isolation(agent uuid, isolation text, actor text)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	a		agent.agents;
	v_old	text;
BEGIN
	PERFORM agent._require_tenant(true);
	IF agent IS NULL THEN
		RAISE EXCEPTION 'agent must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._isolation_check(isolation);
	PERFORM agent._require_person(actor, 'actor');
	SELECT * INTO a FROM agent.agents x
	 WHERE x.id = agent AND x.org_id = agent.current_org()
	   AND x.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	v_old := coalesce((SELECT ai.isolation FROM agent.agent_isolation ai WHERE ai.agent_id = a.id),
					  'namespaces');
	IF v_old = isolation THEN
		RETURN false;
	END IF;
	IF isolation = 'namespaces' THEN
		DELETE FROM agent.agent_isolation ai WHERE ai.agent_id = a.id;
	ELSE
		INSERT INTO agent.agent_isolation AS ai (agent_id, org_id, workspace_id, isolation, set_by)
		VALUES (a.id, a.org_id, a.workspace_id, isolation, actor)
		ON CONFLICT (agent_id) DO UPDATE SET isolation = excluded.isolation,
											 set_by = excluded.set_by, set_at = now();
	END IF;
	PERFORM agent._audit(a.org_id, a.workspace_id, 'agent.changed', NULL, actor,
						 jsonb_build_object('agent_id', a.id, 'setting', 'isolation',
											'from', v_old, 'to', isolation));
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.set_agent_isolation(uuid, text, text) IS
	'the isolation class an agent of the current workspace asks for (narrows its org''s); true when it changed';

-- What the current org's runs get: the plan's floor, the org's own, and
-- for an agent (or none) the class its requests get now, with how many
-- live runners can run it.
CREATE FUNCTION agent.isolation_policy(agent uuid DEFAULT NULL,
									   OUT plan_isolation text, OUT org_isolation text,
									   OUT agent_isolation text, OUT isolation text,
									   OUT runners integer)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
BEGIN
	PERFORM agent._require_tenant(false);
	plan_isolation := coalesce((SELECT s.isolation FROM agent.isolation_settings s
								  JOIN agent.orgs o ON o.plan = s.plan WHERE o.id = v_org),
							   'namespaces');
	org_isolation := agent._isolation_org(v_org);
	IF agent IS NOT NULL THEN
		IF NOT EXISTS (SELECT 1 FROM agent.agents x WHERE x.id = agent AND x.org_id = v_org) THEN
			RAISE EXCEPTION 'agent % does not exist', agent
				USING ERRCODE = 'no_data_found',
					  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
		END IF;
		agent_isolation := coalesce((SELECT ai.isolation FROM agent.agent_isolation ai
									  WHERE ai.agent_id = agent), 'namespaces');
	END IF;
	isolation := agent._isolation_choose(v_org, agent);
	runners := (SELECT count(*)::integer FROM agent.runners rn
				 WHERE rn.state = 'active' AND rn.last_heartbeat >= now() - agent._runner_lease()
				   AND agent._runner_runs_class(rn.id, isolation));
END
$$;
COMMENT ON FUNCTION agent.isolation_policy(uuid) IS
	'the current org''s isolation classes: its plan''s, its own, an agent''s, what a request gets, live runners that run it';

-- ---- runners: what they can run --------------------------------------------------

-- The classes the calling runner (agent_runner) can run, all of them
-- (namespaces always; gvisor when its probe of the jail's gvisor class
-- ran: sandbox-runner --check), and why the others are missing.  Called
-- after each registration.  Returns the classes as stored.
CREATE FUNCTION agent.runner_report_isolation(runner uuid, incarnation uuid, classes text[],
											  problems text DEFAULT NULL)
	RETURNS text[]
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	c		text;
	v_classes text[] := ARRAY['namespaces'];
BEGIN
	IF classes IS NULL OR array_ndims(classes) > 1 OR cardinality(classes) > 8 THEN
		RAISE EXCEPTION 'classes must be an array of at most 8 isolation classes'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._runner_arg_fits(problems, 'problems', 2048);
	FOREACH c IN ARRAY classes LOOP
		PERFORM agent._isolation_check(c);
		IF NOT c = ANY (v_classes) THEN
			v_classes := v_classes || c;
		END IF;
	END LOOP;
	INSERT INTO agent.runner_isolation AS ri (runner_id, classes, problems)
	VALUES (rn.id, v_classes, problems)
	ON CONFLICT (runner_id) DO UPDATE SET classes = excluded.classes, problems = excluded.problems,
										  reported_at = now();
	RETURN v_classes;
END
$$;
COMMENT ON FUNCTION agent.runner_report_isolation(uuid, uuid, text[], text) IS
	'the isolation classes the calling runner can run (namespaces always), and why not the others';

-- Does this runner run this class?  namespaces: every runner.
CREATE FUNCTION agent._runner_runs_class(runner uuid, isolation text) RETURNS boolean
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN isolation = 'namespaces'
		OR EXISTS (SELECT 1 FROM agent.runner_isolation ri
					WHERE ri.runner_id = _runner_runs_class.runner
					  AND _runner_runs_class.isolation = ANY (ri.classes));

-- ---- the invocation: frozen ---------------------------------------------------------

-- Fixed at request time (request_execution), never changed afterwards: the
-- approval covers this class.
CREATE FUNCTION agent._invocations_freeze_isolation() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	RAISE EXCEPTION 'cannot change the isolation class of invocation %', OLD.id
		USING ERRCODE = 'object_not_in_prerequisite_state',
			  DETAIL = 'The isolation class is fixed when the execution is requested and bound to its approval.',
			  HINT = 'Request a new execution to run in another class.';
END
$$;
CREATE TRIGGER invocations_freeze_isolation
	BEFORE UPDATE OF isolation ON agent.invocations
	FOR EACH ROW WHEN (OLD.isolation IS DISTINCT FROM NEW.isolation)
	EXECUTE FUNCTION agent._invocations_freeze_isolation();

-- ---- the claim and the queue ---------------------------------------------------

-- May this runner take this approved run (the claim's one call,
-- 42_claim.sql)?  Only a runner that advertises its class.  The class
-- must be the one its approval was bound to (an approval from before the
-- classes existed covers namespaces): otherwise the row was rewritten past
-- the freeze, and this raises (the claim then fails the run, uncharged).
CREATE FUNCTION agent._isolation_claimable(r agent.invocations, runner uuid) RETURNS boolean
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF r.isolation IS DISTINCT FROM
	   (SELECT coalesce(a.approved_isolation, 'namespaces') FROM agent.approval_requests a
		 WHERE a.id = r.approval_id AND a.invocation_id = r.id) THEN
		RAISE EXCEPTION 'the isolation class of invocation % is not the one its approval covers', r.id
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	RETURN r.isolation = 'namespaces'
		OR (runner IS NOT NULL AND agent._runner_runs_class(runner, r.isolation));
END
$$;

-- Why an approved run waits, for agent.queue_status(): no live active
-- runner with slots runs its class (with the reasons the runners gave).
-- NULL: its class does not hold it back.
CREATE FUNCTION agent._isolation_wait(isolation text) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_why	text;
BEGIN
	IF isolation = 'namespaces'
	   OR EXISTS (SELECT 1 FROM agent.runners rn
				   WHERE rn.state = 'active' AND agent._runner_slots(rn) > 0
					 AND rn.last_heartbeat >= now() - agent._runner_lease()
					 AND agent._runner_runs_class(rn.id, _isolation_wait.isolation)) THEN
		RETURN NULL;
	END IF;
	SELECT string_agg(format('%s: %s', rn.name, ri.problems), '; ' ORDER BY rn.name) INTO v_why
	  FROM agent.runners rn JOIN agent.runner_isolation ri ON ri.runner_id = rn.id
	 WHERE rn.state = 'active' AND rn.last_heartbeat >= now() - agent._runner_lease()
	   AND ri.problems IS NOT NULL;
	RETURN format('no live runner can run the %s isolation class%s', isolation,
				  CASE WHEN v_why IS NOT NULL THEN ' (' || v_why || ')' ELSE '' END);
END
$$;

-- (99_privileges.sql takes EXECUTE from PUBLIC on every function of agent)
GRANT EXECUTE ON FUNCTION agent.set_org_isolation(text, text) TO agent_admin;
GRANT EXECUTE ON FUNCTION agent.set_agent_isolation(uuid, text, text), agent.isolation_policy(uuid)
	TO agent_backend;
GRANT EXECUTE ON FUNCTION agent.isolation_policy(uuid) TO agent_admin;
GRANT EXECUTE ON FUNCTION agent.runner_report_isolation(uuid, uuid, text[], text) TO agent_runner;
