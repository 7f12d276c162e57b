-- What operators and DBAs look at beside agent.worker_status(): what each
-- run slot runs, why an approved run has not started, and what each org
-- spends per day.  Read-only; the backend sees its own tenant through
-- each (row-level security, or the tenant filter of queue_status), the
-- auditor every tenant.

-- Every run in flight, one row per occupied slot (the supervisor's or a
-- runner host's): the org, the language, since when and the jail's pid.
-- runner_id is NULL for the in-database supervisor's runs; the runner's
-- name is in agent.runner_status (auditor).  (agent.worker_status() stays
-- the supervisor's own summary, in C.)
CREATE VIEW agent.run_slots WITH (security_invoker = true) AS
SELECT i.id AS invocation_id, i.org_id, i.workspace_id, i.conversation_id, i.language,
	   i.state, i.provisioned_at, i.started_at,
	   coalesce(i.started_at, i.provisioned_at) AS since,
	   i.jail_pid AS pid, i.runner_id,
	   i.cancel_requested_at IS NOT NULL AS cancelling
  FROM agent.invocations i
 WHERE i.state IN ('provisioning', 'running');
COMMENT ON VIEW agent.run_slots IS
	'runs in flight (one per occupied slot): org, language, since, jail pid, runner';

-- Why an approved run waits, for each approved invocation the caller may
-- see: the claim's own answer (agent._claim_gate, 42_claim.sql, asked for
-- the fleet), after what holds every run back.  Every run is a runner's
-- (the local runner, whose slots are sandbox.max_concurrent_runs, or a
-- runner host: runners.md); the supervisor runs none itself, so the slots
-- are the live active runners'.
--   supervisor_paused     no live active runner has a slot: the detail says
--                         what holds the local runner (draining, removed, not
--                         running, sandbox.max_concurrent_runs 0, capped at 0),
--                         and no runner host with slots is active
--   not_approved          the code is not the code that was approved: the
--                         next claim ends it, uncharged
--   insufficient_credits  the org cannot pay: the next claim refuses it
--   storage_quota_exhausted  the org is at its storage quota: the next claim refuses it
--   image_not_held        it runs on an image whose digest no live active runner
--                         with slots holds (46_images.sql)
--   secrets_key_not_held  its secrets are sealed to a key no live active runner
--                         with slots holds (48_secrets.sql)
--   isolation_unavailable  its isolation class is one no live active runner with
--                         slots runs (49_isolation.sql; the detail has the reasons
--                         the runners reported)
--   conversation_busy     a run of its conversation is in flight or queued before it
--   session_elsewhere     its conversation's session is on a live runner host
--                         with no free slot (its runs are that host's)
--   org_at_limit          the org has its limit of runs in flight
--   workspace_at_limit    the workspace has its limit of runs in flight
--   no_free_slot          every slot of the live active runners is taken
--   next                  nothing holds it: the next claim takes it
-- Security definer, because the limits count runs the caller cannot see
-- (other workspaces of its org, other orgs' use of the slots): it shows
-- only the current workspace's rows to a tenant, and every tenant's to the
-- auditor and the owner (no tenant set).
CREATE FUNCTION agent.queue_status()
	RETURNS TABLE (invocation_id uuid, org_id uuid, workspace_id uuid, conversation_id uuid,
				   approved_at timestamptz, waiting_for text, detail text)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_all		boolean := agent.current_workspace() IS NULL;
	v_caller	name := agent._outer_role();	-- the role outside this function
	v_slots		integer;
	v_free		integer;
	v_runners	integer;
	x			record;
	v_paused	text;			-- why the local runner has no slot, when none has
BEGIN
	IF v_all AND NOT (pg_catalog.pg_has_role(v_caller, 'agent_auditor', 'USAGE')
					  OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller)) THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	-- (a runner's slots as it declared them, within its cap: agent._runner_slots)
	SELECT count(*)::integer, coalesce(sum(agent._runner_slots(rn)), 0)::integer,
		   coalesce(sum(greatest(agent._runner_free_slots(rn), 0)), 0)::integer
	  INTO v_runners, v_slots, v_free
	  FROM agent.runners rn
	 WHERE rn.state = 'active' AND agent._runner_slots(rn) > 0
	   AND rn.last_heartbeat >= now() - agent._runner_lease();
	IF v_runners = 0 THEN
		-- (the first that holds, in the order an operator would look)
		SELECT CASE
				   WHEN rn.state = 'draining' THEN 'the local runner is draining (agent.drain_runner)'
				   WHEN rn.state = 'removed' THEN 'the local runner is removed (agent.remove_runner)'
				   WHEN rn.last_heartbeat < now() - agent._runner_lease() THEN 'the local runner is not running'
				   WHEN rn.slots = 0 THEN 'sandbox.max_concurrent_runs is 0'
				   ELSE 'the local runner''s slots are capped at 0 (agent.set_runner_slots)' END
		  INTO v_paused
		  FROM agent.runners rn WHERE rn.login_role = 'sandbox_runner_local';
		v_paused := coalesce(v_paused, 'no local runner has registered (sandbox.local_runner)')
					|| ', and no runner host with slots is active';
	END IF;

	FOR x IN
		SELECT i AS inv, agent._claim_gate(i, NULL) AS gate
		  FROM agent.invocations i
		 WHERE i.state = 'approved'
		   AND (v_all OR (i.org_id = agent.current_org() AND i.workspace_id = agent.current_workspace()))
		 ORDER BY i.approved_at, i.request_seq
	LOOP
		invocation_id := (x.inv).id;
		org_id := (x.inv).org_id;
		workspace_id := (x.inv).workspace_id;
		conversation_id := (x.inv).conversation_id;
		approved_at := (x.inv).approved_at;
		IF v_runners = 0 THEN
			waiting_for := 'supervisor_paused';
			detail := v_paused;
		ELSE
			waiting_for := coalesce(x.gate, CASE WHEN v_free = 0 THEN 'no_free_slot' ELSE 'next' END);
			detail := agent._queue_detail(x.inv, waiting_for, v_all, v_slots, v_free, v_runners);
		END IF;
		RETURN NEXT;
	END LOOP;
END
$$;
COMMENT ON FUNCTION agent.queue_status() IS
	'why each approved invocation has not started yet (the current workspace''s, or every tenant''s for an auditor)';

-- The detail of agent.queue_status() for invocation r waiting for `reason`:
-- the numbers behind it.  How busy the platform is counts other orgs' runs:
-- only the auditor and the owner (all) see those numbers.
CREATE FUNCTION agent._queue_detail(r agent.invocations, reason text, v_all boolean,
									slots integer, free integer, runners integer)
	RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN CASE reason
		WHEN 'not_approved' THEN 'the code is not the code that was approved; the next claim ends it'
		WHEN 'insufficient_credits' THEN
			(SELECT pg_catalog.format('the org has %s credits; a run costs %s',
									  coalesce(b.balance, 0), p.credits_per_invocation)
			   FROM agent.orgs o JOIN agent.plans p ON p.plan = o.plan
			   LEFT JOIN agent.credit_balances b ON b.org_id = o.id
			  WHERE o.id = r.org_id)
		WHEN 'storage_quota_exhausted' THEN 'the org is at its storage quota'
		WHEN 'image_not_held' THEN agent._image_wait(r.image_name, r.image_digest)
		WHEN 'secrets_key_not_held' THEN agent._secrets_wait(r.egress_policy)
		WHEN 'isolation_unavailable' THEN agent._isolation_wait(r.isolation)
		WHEN 'conversation_busy' THEN 'runs of a conversation are serial'
		WHEN 'session_elsewhere' THEN 'its session''s runner host has no free slot'
		WHEN 'org_at_limit' THEN
			pg_catalog.format('%s of %s runs in flight',
							  (SELECT count(*) FROM agent.invocations j
								WHERE j.org_id = r.org_id AND j.state IN ('provisioning', 'running')),
							  agent._org_run_limit(r.org_id))
		WHEN 'workspace_at_limit' THEN
			(SELECT pg_catalog.format('%s of %s runs in flight',
									  (SELECT count(*) FROM agent.invocations j
										WHERE j.org_id = r.org_id AND j.workspace_id = r.workspace_id
										  AND j.state IN ('provisioning', 'running')),
									  w.max_concurrent_runs)
			   FROM agent.workspaces w WHERE w.id = r.workspace_id)
		WHEN 'no_free_slot' THEN
			CASE WHEN v_all
				 THEN pg_catalog.format('%s of %s run slots in use on %s active runners',
										slots - free, slots, runners)
				 ELSE 'every run slot is in use' END
		END;
END
$$;

-- What each org spent per day (UTC): runs charged, credits charged,
-- refunded and the net.
CREATE VIEW agent.spend_per_org_day WITH (security_invoker = true) AS
SELECT l.org_id, (l.created_at AT TIME ZONE 'UTC')::date AS day,
	   count(*) FILTER (WHERE l.kind = 'charge') AS runs_charged,
	   coalesce(-sum(l.amount) FILTER (WHERE l.kind = 'charge'), 0) AS charged,
	   coalesce(sum(l.amount) FILTER (WHERE l.kind = 'refund'), 0) AS refunded,
	   coalesce(-sum(l.amount) FILTER (WHERE l.kind IN ('charge', 'refund')), 0) AS net_spent,
	   coalesce(sum(l.amount) FILTER (WHERE l.kind = 'grant'), 0) AS granted
  FROM agent.credit_ledger l
 GROUP BY l.org_id, (l.created_at AT TIME ZONE 'UTC')::date;
COMMENT ON VIEW agent.spend_per_org_day IS
	'credits charged, refunded and granted per org per day (UTC)';

GRANT SELECT ON agent.run_slots, agent.spend_per_org_day TO agent_backend, agent_auditor;
GRANT EXECUTE ON FUNCTION agent.queue_status() TO agent_backend, agent_auditor;
-- The export's state for DBAs (reads no tenant data).
GRANT EXECUTE ON FUNCTION agent.export_status(), agent._export_worker_state() TO agent_auditor;
