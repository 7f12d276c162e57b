-- Runner hosts: the sandbox-runner processes that run the sandboxes (the
-- local one the supervisor starts, and those on other machines), their
-- leases, and the one role they log in with.  docs/runners.md, "Database
-- contract", says what holds; this header is the contract's text.
--
-- The functions a runner calls (EXECUTE granted to agent_runner only; all
-- SECURITY DEFINER, SET search_path = pg_catalog, agent, pg_temp):
--
--   agent.runner_register(name text, host text, version text, slots integer,
--       OUT runner_id uuid, OUT incarnation uuid, OUT lease_seconds integer,
--       OUT heartbeat_seconds integer, OUT state text, OUT ended integer)
--   agent.runner_heartbeat(runner uuid, incarnation uuid, in_use integer,
--       held uuid[] DEFAULT NULL, slots integer DEFAULT NULL,
--       OUT state text, OUT renewed integer, OUT lost uuid[],
--       OUT lease_seconds integer, OUT heartbeat_seconds integer)
--   agent.runner_claim(runner uuid, incarnation uuid, max_rows integer,
--       notified uuid DEFAULT NULL)
--       RETURNS TABLE (id uuid, lease_token uuid, language text, code text,
--           wall_time_s integer, memory_mb integer, conversation_id uuid,
--           session_id uuid, fresh_session boolean, has_skills boolean,
--           max_files integer, max_bytes bigint, max_file_bytes bigint,
--           output_limit_bytes bigint, has_egress boolean, image_name text,
--           image_digest text, isolation text)
--   agent.runner_prepare(runner uuid, token uuid, invocation uuid,
--       workspace_is_new boolean)
--       RETURNS TABLE (kind text, name text, content bytea, skill_id uuid)
--   agent.runner_skill_files(runner uuid, token uuid, invocation uuid, skill uuid)
--       RETURNS TABLE (path text, content bytea, executable boolean)
--   agent.runner_mark_running(runner uuid, token uuid, invocation uuid,
--       pid integer) RETURNS boolean
--   agent.runner_append_output(runner uuid, token uuid, invocation uuid,
--       stream text, data text) RETURNS integer
--   agent.runner_store_produced_file(runner uuid, token uuid, invocation uuid,
--       name text, status text, reason text, content bytea) RETURNS integer
--   agent.runner_store_skipped_files(runner uuid, token uuid, invocation uuid,
--       names text[], statuses text[], reasons text[]) RETURNS integer
--   agent.runner_finish(runner uuid, token uuid, invocation uuid,
--       verdict text, jail_status integer, error text, spawned boolean,
--       truncated boolean DEFAULT false, workspace_bytes bigint DEFAULT NULL,
--       workspace_entries integer DEFAULT NULL, workspace_reset text DEFAULT NULL)
--       RETURNS text
--   agent.runner_cancel_requested(runner uuid, invocations uuid[]) RETURNS SETOF uuid
--   agent.runner_live_sessions(runner uuid) RETURNS SETOF uuid
--   agent.runner_skills_in_use(runner uuid) RETURNS SETOF uuid
--   agent.runner_report_images(runner uuid, incarnation uuid, images jsonb)
--       RETURNS integer (46_images.sql)
--   agent.runner_report_isolation(runner uuid, incarnation uuid, classes text[],
--       problems text DEFAULT NULL) RETURNS text[] (49_isolation.sql)
--
-- The operator's (the owner's; granted to no role):
--
--   agent.reap_expired_leases(as_of timestamptz DEFAULT now()) RETURNS integer
--   agent.drain_runner(name text, resume boolean DEFAULT false) RETURNS text
--   agent.remove_runner(name text) RETURNS integer
--   agent.set_runner_slots(name text, max_slots integer) RETURNS integer
--   agent.runner_status (a view; agent_auditor reads it)
--
-- Identity.  A runner acts only for the agent.runners row registered by its
-- own role: agent._runner_role(), the login role its session connected as
-- (the steps are SECURITY DEFINER, so current_user inside them is the
-- owner).  A session that SET ROLE to another role (agent_runner, another
-- runner's role) is refused, as is a role that cannot log in; the local
-- runner's superuser session acting as sandbox_runner_local is the one
-- exception.  Any other runner id, existing or not, is refused alike: 42501.
--
-- Leases.  A claimed invocation carries runner_id, lease_token and
-- lease_expires_at (the deadline its claim set).  The runner renews all its
-- leases at once with its heartbeat, which moves agent.runners.last_heartbeat
-- only: the deadline of a lease is
--     greatest(invocations.lease_expires_at, runners.last_heartbeat + lease)
-- but never later than the run's wall time from its claim, nor than a
-- cancel of it, each plus runner_grace_seconds (agent._lease_deadline): a
-- runner that heartbeats on past either loses the run all the same.
-- Renewal never writes the invocation rows: a backend may hold its own
-- invocation's row lock in an open transaction (agent.cancel), and a
-- renewal that waited for it, or skipped it, would let a tenant stall a
-- runner or turn a charged run into a refunded one.
-- A lease is held while the invocation is in flight with that runner and
-- token, the runner is not removed, the deadline has not passed, and no
-- result is staged for it.  Every step that names an invocation checks its
-- lease before it writes and again after (a new snapshot, so a reaper's
-- commit in between is seen) and raises 55000, rolling its writes back,
-- when the lease is not held.  The finish stages the result under the
-- primary key of agent.run_results, which the reaper's result of a lost
-- lease uses too: whichever is staged first is the result, applied once by
-- the one billing rule.  An expired lease stays expired: the heartbeat of a
-- runner whose leases have expired ends them first, exactly as the reaper
-- would.  Nothing here waits for a lock a tenant can take.

-- ----------------------------------------------------------------------
-- Roles
-- ----------------------------------------------------------------------

-- Roles are cluster-wide (10_tenancy.sql): created when missing, never
-- dropped.  Each runner host logs in as a role of its own, member of
-- agent_runner; the local runner logs in as the server's OS user and SETs
-- ROLE sandbox_runner_local.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'agent_runner') THEN
		CREATE ROLE agent_runner NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'sandbox_runner_local') THEN
		CREATE ROLE sandbox_runner_local NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
					WHERE m.roleid = 'agent_runner'::regrole
					  AND m.member = 'sandbox_runner_local'::regrole) THEN
		GRANT agent_runner TO sandbox_runner_local;
	END IF;
END
$roles$;
GRANT USAGE ON SCHEMA agent TO agent_runner;

INSERT INTO agent.settings (key, value, description) VALUES
	('runner_lease_seconds', '30',
	 'seconds a runner host''s leases last without a heartbeat; it heartbeats every third of it, and ends its own sandboxes when it could not renew for this long'),
	('runner_grace_seconds', '60',
	 'seconds a runner host may hold a run beyond its wall time (from the claim) or beyond a cancel of it, to start it and return its result; then its lease ends, however it heartbeats'),
	('runner_max_slots', '8',
	 'runs a runner host may hold at once unless an operator set its own cap (agent.set_runner_slots); what it declares counts only up to this (not for the local runner, whose slots are sandbox.max_concurrent_runs)');

-- ----------------------------------------------------------------------
-- Runners
-- ----------------------------------------------------------------------

CREATE TABLE agent.runners (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	name			text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
	-- the role it acts as (agent._runner_role()); one runner per role
	login_role		name NOT NULL UNIQUE,
	host			text,
	version			text,
	slots			integer NOT NULL CHECK (slots BETWEEN 0 AND 1024),
	-- active: claims work; draining: finishes what it holds, claims nothing;
	-- removed: out of the fleet (agent.remove_runner), cannot register
	state			text NOT NULL DEFAULT 'active'
						CHECK (state IN ('active', 'draining', 'removed')),
	-- a new one at every registration: the process that holds it
	incarnation		uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	registered_at	timestamptz NOT NULL DEFAULT now(),
	last_heartbeat	timestamptz NOT NULL DEFAULT now(),
	in_use			integer NOT NULL DEFAULT 0 CHECK (in_use >= 0),	-- as it reported
	-- set by the reaper when its heartbeat is older than a lease; cleared
	-- by its next heartbeat or registration
	gone_at			timestamptz,
	removed_at		timestamptz,
	-- the operator's cap on slots (agent.set_runner_slots); NULL: the
	-- setting runner_max_slots.  Registration and heartbeat never touch it.
	max_slots		integer CHECK (max_slots BETWEEN 0 AND 1024)
);
COMMENT ON TABLE agent.runners IS
	'runner hosts (sandbox-runner processes, local and remote) and their heartbeat; see docs/runners.md';

ALTER TABLE agent.runners ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.runners FOR SELECT TO agent_auditor USING (true);

-- (agent.invocations.runner_id is declared with the table; its key here)
ALTER TABLE agent.invocations ADD FOREIGN KEY (runner_id) REFERENCES agent.runners (id);
-- What each runner holds: its heartbeat, the reaper, the claim's slot count.
CREATE INDEX invocations_runner_in_flight_idx ON agent.invocations (runner_id)
	WHERE state IN ('provisioning', 'running');

COMMENT ON COLUMN agent.invocations.runner_id IS
	'the runner host that holds it (NULL: the in-database supervisor)';
COMMENT ON COLUMN agent.invocations.lease_token IS
	'the lease of that runner: every runner step for this invocation names it';
COMMENT ON COLUMN agent.invocations.lease_expires_at IS
	'the deadline its claim gave the lease; renewed through the runner''s heartbeat, never past the run''s wall time or a cancel (agent._lease_deadline)';

-- ----------------------------------------------------------------------
-- Internals (owner only)
-- ----------------------------------------------------------------------

-- The role the calling runner acts as (C, src/guards.c: the outer user,
-- which SECURITY DEFINER does not change), or 42501 when that is not a
-- role a runner may act as: agent_runner itself, a role that cannot log
-- in, or any role the session SET ROLE to (but sandbox_runner_local from
-- a superuser session, the local runner's way).
CREATE FUNCTION agent._runner_role() RETURNS name
	AS 'MODULE_PATHNAME', 'sandbox_runner_role'
	LANGUAGE C STABLE STRICT;

-- The role outside a SECURITY DEFINER function (C: the outer user), without
-- the runner's check: for functions that decide what their caller sees.
CREATE FUNCTION agent._outer_role() RETURNS name
	AS 'MODULE_PATHNAME', 'sandbox_outer_role'
	LANGUAGE C STABLE STRICT;

-- How long a lease lasts without a heartbeat.
-- (The helpers of a claim have no SET clause, as agent._setting: a SET
-- costs each call a change of search_path and back.  Their callers are the
-- owner's functions, which pin it; they qualify every name and type.)
CREATE FUNCTION agent._runner_lease() RETURNS interval
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN pg_catalog.make_interval(secs => agent._setting('runner_lease_seconds')::integer);
END
$$;

-- How long past its wall time, or past a cancel, a runner may hold a run.
CREATE FUNCTION agent._runner_grace() RETURNS interval
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN pg_catalog.make_interval(secs => agent._setting('runner_grace_seconds')::integer);
END
$$;

-- When the lease of an invocation ends unless renewed, and what ends it
-- there (cause), whichever comes first:
--   heartbeat  the deadline of its claim or the runner's last heartbeat plus
--              a lease, whichever is later (the runner stopped renewing);
--   wall_time  the run's wall time (wall_time_s, the server's default
--              filled in) from its claim, plus the grace;
--   cancel     the grace after a cancel of it was asked for.
-- However often a runner heartbeats, it holds a run no longer than the run
-- may last, nor long after a cancel: a compromised runner cannot keep a
-- tenant's run (and with it a place in the org's limit) for ever.
CREATE FUNCTION agent._lease_deadline(lease_expires_at timestamptz, last_heartbeat timestamptz,
									  lease interval, provisioned_at timestamptz,
									  wall_time_s integer, cancel_requested_at timestamptz,
									  grace interval,
									  OUT deadline timestamptz, OUT cause text)
	LANGUAGE plpgsql STABLE PARALLEL SAFE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_wall		timestamptz := provisioned_at + pg_catalog.make_interval(secs => wall_time_s) + grace;
	v_cancel	timestamptz := cancel_requested_at + grace;
BEGIN
	deadline := greatest(lease_expires_at, last_heartbeat + lease);
	cause := 'heartbeat';
	IF v_wall < deadline THEN
		deadline := v_wall;
		cause := 'wall_time';
	END IF;
	IF v_cancel < deadline THEN
		deadline := v_cancel;
		cause := 'cancel';
	END IF;
END
$$;

-- The calling role's runner row, or 42501 (the same error for an id that
-- does not exist: a runner learns nothing of the others).
-- (No SET clause: see agent._runner_lease.)
CREATE FUNCTION agent._runner_self(runner uuid) RETURNS agent.runners
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	rn		agent.runners;
	v_role	pg_catalog.name := agent._runner_role();
BEGIN
	SELECT * INTO rn FROM agent.runners x WHERE x.id OPERATOR(pg_catalog.=) runner;
	IF NOT FOUND OR rn.login_role OPERATOR(pg_catalog.<>) v_role THEN
		RAISE EXCEPTION 'permission denied for runner %', coalesce(runner::pg_catalog.text, 'NULL')
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = pg_catalog.format('Role %s acts only for the runner it registered.', v_role),
				  HINT = 'Use the runner id that agent.runner_register() returned to this role.';
	END IF;
	RETURN rn;
END
$$;

-- The same, for a call that names the runner's incarnation: a process of
-- this runner that registered before the current one is refused (55000).
-- (No SET clause: see agent._runner_lease.)
CREATE FUNCTION agent._runner_current(runner uuid, incarnation uuid) RETURNS agent.runners
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	rn agent.runners;
BEGIN
	-- (agent._runner_self's lookup inline, on every claim and heartbeat;
	-- a runner that is not the caller's is refused by it, 42501)
	SELECT * INTO rn FROM agent.runners x WHERE x.id OPERATOR(pg_catalog.=) runner;
	IF NOT FOUND OR rn.login_role OPERATOR(pg_catalog.<>) agent._runner_role() THEN
		rn := agent._runner_self(runner);		-- raises
	END IF;
	-- (rn.incarnation is NOT NULL: a NULL argument is distinct from it)
	IF coalesce(incarnation OPERATOR(pg_catalog.<>) rn.incarnation, true) THEN
		RAISE EXCEPTION 'runner "%" has registered again since this process did', rn.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'A newer process of this runner registered; the leases of this one have ended.',
				  HINT = 'Stop this process''s sandboxes and register again.';
	END IF;
	RETURN rn;
END
$$;

-- Whether `runner`, the calling role's, holds the lease of invocation i
-- (rn: its runner row) under `token`, now: the run in flight, the runner
-- not removed, the lease's deadline (agent._lease_deadline) not passed;
-- with staged_ok, the deadline no longer matters (the caller's result was
-- staged under the lease).  One definition for every lookup of a lease:
-- agent._runner_lease_of() and the locked read of agent.runner_finish().
-- The deadline is agent._lease_deadline's, computed inline with the two
-- settings read in one query (as agent.runner_status does): every step
-- of a run looks its lease up, some twice.
CREATE FUNCTION agent._lease_held(i agent.invocations, rn agent.runners, runner uuid,
								  token uuid, staged_ok boolean)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	RETURN coalesce(i.runner_id = runner AND rn.id = i.runner_id
					AND rn.login_role = agent._runner_role()
					AND i.lease_token = token
					AND i.state IN ('provisioning', 'running')
					AND rn.state <> 'removed'
					AND (staged_ok
						 OR (SELECT CASE WHEN d.heartbeat IS NOT NULL
										 THEN least(d.heartbeat, d.wall_time, d.cancel) END
							   FROM (SELECT greatest(i.lease_expires_at, rn.last_heartbeat + x.lease) AS heartbeat,
											i.provisioned_at
											+ make_interval(secs => coalesce(i.wall_time_s,
																			 (agent._run_limits()).default_wall_time_s))
											+ x.grace AS wall_time,
											i.cancel_requested_at + x.grace AS cancel
									   FROM (SELECT make_interval(secs => coalesce(
														max(s.value) FILTER (WHERE s.key = 'runner_lease_seconds'),
														agent._setting('runner_lease_seconds'))::integer) AS lease,
													make_interval(secs => coalesce(
														max(s.value) FILTER (WHERE s.key = 'runner_grace_seconds'),
														agent._setting('runner_grace_seconds'))::integer) AS grace
											   FROM agent.settings s
											  WHERE s.key IN ('runner_lease_seconds', 'runner_grace_seconds')) x) d)
							> pg_catalog.clock_timestamp()),
					false);
END
$$;

-- The invocation if `runner`, the calling role's (agent._runner_self),
-- holds its lease under `token` (agent._lease_held) and no result is staged
-- for it; otherwise 42501 when the runner is not the caller's, else 55000
-- (also for an invocation that does not exist or is another runner's).
-- With staged_ok, the caller has just staged its own result: the lease
-- must still name it and the run still be in flight (the deadline no
-- longer matters: the result was staged under the lease).  Every
-- invocation step starts with it: the runner's identity and its lease in
-- one lookup.
CREATE FUNCTION agent._runner_lease_of(runner uuid, token uuid, invocation uuid,
									   staged_ok boolean DEFAULT false)
	RETURNS agent.invocations
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
BEGIN
	SELECT i.* INTO r
	  FROM agent.invocations i
	  JOIN agent.runners rn ON rn.id = i.runner_id
	 WHERE i.id = invocation
	   AND agent._lease_held(i, rn, runner, token, staged_ok)
	   AND (staged_ok
			OR NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id));
	IF NOT FOUND THEN
		PERFORM agent._lease_refused(runner, invocation);
	END IF;
	RETURN r;
END
$$;

-- A step named an invocation whose lease `runner` does not hold: 42501
-- when the runner is not the caller's (agent._runner_self), else 55000.
-- Always raises.
CREATE FUNCTION agent._lease_refused(runner uuid, invocation uuid) RETURNS void
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);		-- not the caller's runner: 42501
	RAISE EXCEPTION 'lease of invocation % is not held by this runner', coalesce(invocation::text, 'NULL')
		USING ERRCODE = 'object_not_in_prerequisite_state',
			  DETAIL = 'The lease expired, was taken over, or was never this runner''s; the invocation has ended or will end without this runner.',
			  HINT = 'Kill the sandbox and drop its result.';
END
$$;

-- End an invocation a runner held, as a failure of ours (refunded, by the
-- billing rule), unless a result is staged for it already: then that result
-- is applied as it is (a runner's own result staged behind a lock).
-- Returns true when this call's result ended it (or is staged to, behind a
-- lock).  Waits only for another of our own stagings of the same row.
CREATE FUNCTION agent._end_leased(invocation uuid, reason text, spawned boolean)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v uuid;
BEGIN
	INSERT INTO agent.run_results (invocation_id, error, spawned)
	VALUES (invocation, reason, coalesce(spawned, false))
	ON CONFLICT (invocation_id) DO NOTHING
	RETURNING invocation_id INTO v;
	IF v IS NULL THEN
		PERFORM agent._try_apply(invocation);
		RETURN false;
	END IF;
	-- A finish may have ended it while we waited for its staging.
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i
					WHERE i.id = invocation AND i.state IN ('provisioning', 'running')) THEN
		DELETE FROM agent.run_results x WHERE x.invocation_id = invocation;
		RETURN false;
	END IF;
	PERFORM agent._try_apply(invocation);
	RETURN true;
END
$$;

-- End every lease (of one runner, or of all: NULL) whose deadline passed
-- before as_of, with the reason of what ended it (agent._lease_deadline's
-- cause).  Returns how many this call ended.
CREATE FUNCTION agent._reap_leases(runner uuid, as_of timestamptz) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	x		record;
	n		integer := 0;
	v_lease interval := agent._runner_lease();
	v_grace	interval := agent._runner_grace();
	v_wall	integer := (agent._run_limits()).default_wall_time_s;
BEGIN
	FOR x IN
		SELECT i.id, i.state, rn.name, d.cause
		  FROM agent.invocations i
		  JOIN agent.runners rn ON rn.id = i.runner_id
		 CROSS JOIN LATERAL agent._lease_deadline(i.lease_expires_at, rn.last_heartbeat, v_lease,
												  i.provisioned_at, coalesce(i.wall_time_s, v_wall),
												  i.cancel_requested_at, v_grace) d
		 WHERE i.state IN ('provisioning', 'running')
		   AND (runner IS NULL OR i.runner_id = runner)
		   AND d.deadline < as_of
		 ORDER BY i.provisioned_at, i.id
	LOOP
		IF agent._end_leased(x.id,
							 pg_catalog.format(CASE x.cause
												   WHEN 'wall_time' THEN 'the runner "%s" held it past its wall time'
												   WHEN 'cancel' THEN 'the runner "%s" did not stop it after it was cancelled'
												   ELSE 'the runner "%s" stopped renewing its lease' END,
											   x.name),
							 x.state = 'running') THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;

-- The most runs a runner may hold at once: the slots it declared, within
-- the operator's cap (agent.runners.max_slots, agent.set_runner_slots), or
-- else the setting runner_max_slots.  A runner declares its slots itself
-- (at registration, in a heartbeat): a compromised host declaring 1024
-- would claim the whole backlog, every tenant's code and files.  The local
-- runner's slots are the operator's own (sandbox.max_concurrent_runs,
-- which only a superuser sets): no default cap.
CREATE FUNCTION agent._runner_slots(rn agent.runners) RETURNS integer
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN least(rn.slots,
				 coalesce(rn.max_slots,
						  CASE WHEN rn.login_role OPERATOR(pg_catalog.=) 'sandbox_runner_local' THEN rn.slots
							   ELSE agent._setting('runner_max_slots')::integer END));
END
$$;

-- Free slots of a runner: what it may still claim (agent._runner_slots).
-- A run whose result is staged no longer takes a slot on the runner.
-- (PL/pgSQL, as every helper on a run's path: its plan is kept for the
-- session, where a SQL function's body is planned again on every call.)
CREATE FUNCTION agent._runner_free_slots(rn agent.runners) RETURNS integer
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN agent._runner_slots(rn) OPERATOR(pg_catalog.-)
		(SELECT pg_catalog.count(*)::integer FROM agent.invocations i
		  WHERE i.runner_id OPERATOR(pg_catalog.=) rn.id
			AND i.state OPERATOR(pg_catalog.=) ANY ('{provisioning,running}'::pg_catalog.text[])
			AND NOT EXISTS (SELECT 1 FROM agent.run_results x
							 WHERE x.invocation_id OPERATOR(pg_catalog.=) i.id));
END
$$;

-- The live runner that holds the conversation's active session (its id),
-- or NULL (no active session, or its runner is not live).  Its runs are
-- that runner's (affinity).  A runner is live while it is active and has
-- heartbeated within a lease; a draining, removed or silent runner's
-- sessions are rebuilt by whoever claims the conversation next.  (At most
-- one session of a conversation is active: sessions_one_active.)
-- (PL/pgSQL: agent.sessions is created after this file, 50_sessions.sql.
-- No SET clause, as agent._setting: the claim calls it for each row of a
-- conversation, and a SET clause is a configuration save and restore per
-- call; every name and operator is qualified.)
CREATE FUNCTION agent._session_runner(conversation uuid) RETURNS uuid
	LANGUAGE plpgsql STABLE
AS $$
BEGIN
	RETURN (SELECT s.runner_id
			  FROM agent.sessions s
			  JOIN agent.runners r ON r.id OPERATOR(pg_catalog.=) s.runner_id
			 WHERE s.conversation_id OPERATOR(pg_catalog.=) conversation
			   AND s.state OPERATOR(pg_catalog.=) 'active'::pg_catalog.text
			   AND r.state OPERATOR(pg_catalog.=) 'active'::pg_catalog.text
			   AND r.last_heartbeat OPERATOR(pg_catalog.>=)
				   (pg_catalog.now() OPERATOR(pg_catalog.-) agent._runner_lease()));
END
$$;

-- Is the conversation's active session on a live runner other than
-- `runner` (NULL: the in-database supervisor)?  Then its runs are that
-- runner's (agent._session_runner).  (No SET clause: see there.)
CREATE FUNCTION agent._session_elsewhere(conversation uuid, runner uuid) RETURNS boolean
	LANGUAGE plpgsql STABLE
AS $$
DECLARE
	holder		uuid := agent._session_runner(conversation);
BEGIN
	RETURN holder IS NOT NULL AND (runner IS NULL OR holder OPERATOR(pg_catalog.<>) runner);
END
$$;

-- The server's limits of a run, for a runner (C, src/guards.c: the GUCs
-- sandbox.default_wall_time, sandbox.default_memory, sandbox.output_limit
-- and sandbox.workspace_entries, read without the cost of pg_settings).
CREATE FUNCTION agent._run_limits(OUT default_wall_time_s integer, OUT default_memory_mb integer,
								  OUT output_limit_bytes bigint, OUT workspace_entries integer)
	AS 'MODULE_PATHNAME', 'sandbox_run_limits'
	LANGUAGE C STABLE STRICT;

-- The limits a request and a finish check against (C, src/guards.c: the
-- GUCs sandbox.max_wall_time, sandbox.max_memory and sandbox.preview_size).
CREATE FUNCTION agent._request_limits(OUT max_wall_time_s integer, OUT max_memory_mb integer,
									  OUT preview_bytes integer)
	AS 'MODULE_PATHNAME', 'sandbox_request_limits'
	LANGUAGE C STABLE STRICT;

-- Wait for the other claimers (runners woken by the same approval) to
-- commit, so that this claim sees what they took: the transaction's
-- advisory lock of the claim, tried every millisecond for at most 20 (a
-- poll, not a lock wait, so that no claimer ever queues behind another).
-- A claimer that holds it longer (a runner host that left its claim's
-- transaction open) costs the others that much per claim, never a stall;
-- past it the claim goes on without its turn, as every claim is safe
-- against concurrent ones anyway (row locks, SKIP LOCKED).  Returns
-- whether it got the turn.
-- (No SET clause: see agent._runner_lease.)
CREATE FUNCTION agent._claim_turn() RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
	FOR i IN 1..20 LOOP
		IF pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtext('agent.runner_claim'), 0) THEN
			RETURN true;
		END IF;
		PERFORM pg_catalog.pg_sleep(0.001);
	END LOOP;
	RETURN false;
END
$$;

-- Refuse a text argument longer than `max_bytes`: 22001, with the sizes in
-- the detail, as agent._check_text (docs/reference.md, "Conventions").
CREATE FUNCTION agent._runner_arg_fits(value text, argument text, max_bytes integer)
	RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF octet_length(value) > max_bytes THEN
		RAISE EXCEPTION '% is too long', argument
			USING ERRCODE = 'string_data_right_truncation',
				  DETAIL = pg_catalog.format('It is %s bytes; the limit is %s.',
											 pg_catalog.octet_length(value), max_bytes);
	END IF;
	RETURN true;
END
$$;

-- ----------------------------------------------------------------------
-- The runner's steps (agent_runner)
-- ----------------------------------------------------------------------

-- Register (or re-join) the runner of the calling role.  A new incarnation
-- every time: whatever the runner's previous process still held in flight
-- ends now, as a failure of ours (refunded), with its audit event.
CREATE FUNCTION agent.runner_register(name text, host text, version text, slots integer,
									  OUT runner_id uuid, OUT incarnation uuid,
									  OUT lease_seconds integer, OUT heartbeat_seconds integer,
									  OUT state text, OUT ended integer)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_role	name := agent._runner_role();
	rn		agent.runners;
	w		record;
BEGIN
	-- (1 to 64 ASCII characters: text_limits()'s runner_name, which
	-- drain_runner and remove_runner check)
	IF runner_register.name IS NULL OR runner_register.name !~ '^[a-z0-9][a-z0-9_.-]{0,63}$' THEN
		RAISE EXCEPTION 'invalid runner name "%"', coalesce(agent._shown(runner_register.name), 'NULL')
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use 1 to 64 characters: lower-case letters, digits, "_", "." and "-", starting with a letter or digit.';
	END IF;
	IF runner_register.slots IS NULL OR runner_register.slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF runner_register.host ~ '[[:cntrl:]]' OR runner_register.version ~ '[[:cntrl:]]' THEN
		RAISE EXCEPTION 'host and version must not contain control characters'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._runner_arg_fits(runner_register.host, 'host', 255);
	PERFORM agent._runner_arg_fits(runner_register.version, 'version', 255);
	IF EXISTS (SELECT 1 FROM agent.runners x
				WHERE x.name = runner_register.name AND x.login_role <> v_role) THEN
		RAISE EXCEPTION 'runner name "%" is registered by another role', runner_register.name
			USING ERRCODE = 'duplicate_object',
				  HINT = 'Give each runner host a name of its own.';
	END IF;

	-- Two registrations at the same moment both pass the check above: the
	-- unique indexes decide (the second waits for the first to commit), and
	-- the loser is told why, not with the index's 23505.  Another role that
	-- took the name: 42710, as above.  Another process of this role that
	-- registered first (this one found no row yet): 55000; it is the
	-- runner now, and this process may register again to take over, as a
	-- restart does.
	SELECT * INTO rn FROM agent.runners x WHERE x.login_role = v_role FOR UPDATE;
	IF NOT FOUND THEN
		BEGIN
			INSERT INTO agent.runners AS x (name, login_role, host, version, slots)
			VALUES (runner_register.name, v_role, runner_register.host, runner_register.version,
					runner_register.slots)
			RETURNING * INTO rn;
		EXCEPTION
			WHEN unique_violation THEN
				-- (which index the insert met first says nothing of whose
				-- row it is: the row that won, committed now, says it)
				IF EXISTS (SELECT 1 FROM agent.runners x WHERE x.login_role = v_role) THEN
					RAISE EXCEPTION 'runner "%" was registered by another process of role % at the same time',
						runner_register.name, v_role
						USING ERRCODE = 'object_not_in_prerequisite_state',
							  HINT = 'Run one sandbox-runner per role; registering again takes over from the other process.';
				END IF;
				RAISE EXCEPTION 'runner name "%" is registered by another role', runner_register.name
					USING ERRCODE = 'duplicate_object',
						  HINT = 'Give each runner host a name of its own.';
		END;
		ended := 0;
	ELSE
		IF rn.state = 'removed' THEN
			RAISE EXCEPTION 'runner "%" has been removed', rn.name
				USING ERRCODE = 'object_not_in_prerequisite_state',
					  HINT = 'An operator may admit it again with agent.drain_runner(name, resume => true).';
		END IF;
		-- The previous process's work: its sandboxes died with it (or it
		-- is another process of the same role, which now loses them).
		ended := 0;
		FOR w IN SELECT i.id, i.state FROM agent.invocations i
				  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
				  ORDER BY i.provisioned_at, i.id LOOP
			IF agent._end_leased(w.id, pg_catalog.format('the runner "%s" restarted', rn.name),
								 w.state = 'running') THEN
				ended := ended + 1;
			END IF;
		END LOOP;
		-- (a new name another role took meanwhile: 42710, as above, and the
		-- whole registration is undone, the leases ended above included)
		BEGIN
			UPDATE agent.runners x
			   SET name = runner_register.name, host = runner_register.host,
				   version = runner_register.version, slots = runner_register.slots,
				   incarnation = pg_catalog.gen_random_uuid(), registered_at = now(),
				   last_heartbeat = pg_catalog.clock_timestamp(), in_use = 0, gone_at = NULL
			 WHERE x.id = rn.id
			RETURNING * INTO rn;
		EXCEPTION
			WHEN unique_violation THEN
				RAISE EXCEPTION 'runner name "%" is registered by another role', runner_register.name
					USING ERRCODE = 'duplicate_object',
						  HINT = 'Give each runner host a name of its own.';
		END;
	END IF;

	runner_id := rn.id;
	incarnation := rn.incarnation;
	lease_seconds := agent._setting('runner_lease_seconds')::integer;
	heartbeat_seconds := greatest(lease_seconds / 3, 1);
	state := rn.state;
END
$$;
COMMENT ON FUNCTION agent.runner_register(text, text, text, integer) IS
	'register or re-join the runner of the calling role; ends what its previous process held';

-- Renew the runner's leases (all at once: its heartbeat) and report its
-- slots in use.  Leases that expired before this heartbeat are ended first,
-- as the reaper would: a lease never comes back.  held, when given, is
-- every invocation the runner runs: a lease of it that held does not name,
-- claimed before the runner's previous heartbeat (so the runner had a whole
-- heartbeat to learn of it: a claim whose answer was lost with the
-- connection), is ended too, as a failure of ours.  Returns the runner's
-- state (draining: claim nothing new; removed: stop), how many leases it
-- holds now, and, of held, those it no longer holds: their sandboxes must
-- be killed and their results dropped.  slots, when given, is how many runs
-- the runner takes at once from now on (its configuration was reloaded):
-- fewer than it runs now only makes it claim nothing until enough end.
-- lease_seconds and heartbeat_seconds are the setting as it is now (an
-- operator may change runner_lease_seconds while runners run): the runner
-- heartbeats and fences itself by them from this answer on.
CREATE FUNCTION agent.runner_heartbeat(runner uuid, incarnation uuid, in_use integer,
									   held uuid[] DEFAULT NULL, slots integer DEFAULT NULL,
									   OUT state text, OUT renewed integer, OUT lost uuid[],
									   OUT lease_seconds integer, OUT heartbeat_seconds integer)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	v_lease interval := agent._runner_lease();
	w		record;
BEGIN
	IF runner_heartbeat.in_use IS NULL OR runner_heartbeat.in_use < 0 THEN
		RAISE EXCEPTION 'in_use must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF runner_heartbeat.slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._reap_leases(rn.id, pg_catalog.clock_timestamp());
	IF held IS NOT NULL THEN
		-- (the claim set lease_expires_at to its clock plus a lease)
		FOR w IN SELECT i.id, i.state FROM agent.invocations i
				  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
					AND i.lease_expires_at - v_lease < rn.last_heartbeat
					AND NOT i.id = ANY (held)
					AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)
				  ORDER BY i.provisioned_at, i.id LOOP
			PERFORM agent._end_leased(w.id, pg_catalog.format('the runner "%s" no longer runs it', rn.name),
									  w.state = 'running');
		END LOOP;
	END IF;
	UPDATE agent.runners x
	   SET last_heartbeat = pg_catalog.clock_timestamp(), in_use = runner_heartbeat.in_use,
		   slots = coalesce(runner_heartbeat.slots, x.slots), gone_at = NULL
	 WHERE x.id = rn.id
	RETURNING * INTO rn;

	state := rn.state;
	SELECT count(*)::integer INTO renewed
	  FROM agent.invocations i
	 WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running') AND rn.state <> 'removed'
	   AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id);
	lost := ARRAY(SELECT h FROM unnest(held) h
				   WHERE h IS NOT NULL
					 AND NOT EXISTS (SELECT 1 FROM agent.invocations i
									  WHERE i.id = h AND i.runner_id = rn.id
										AND i.state IN ('provisioning', 'running')
										AND rn.state <> 'removed'
										AND NOT EXISTS (SELECT 1 FROM agent.run_results x
														 WHERE x.invocation_id = i.id))
				   ORDER BY h);
	lease_seconds := pg_catalog.date_part('epoch', v_lease)::integer;
	heartbeat_seconds := greatest(lease_seconds / 3, 1);
END
$$;
COMMENT ON FUNCTION agent.runner_heartbeat(uuid, uuid, integer, uuid[], integer) IS
	'renew the calling runner''s leases; returns its state, the leases it holds and which of held it lost';

-- Claim up to max_rows approved invocations for this runner (at most its
-- free slots), each with a lease: agent._claim_invocations (42_claim.sql),
-- fair across orgs and runners, within each org's limits on every host
-- together, with session affinity.  notified: the invocation the runner's
-- wake-up named, if any (tried first when it heads the queue; a hint
-- only).  Nothing when the runner is draining or removed.
-- Returns what the runner needs to start each: the code, the limits (the
-- server's defaults filled in), the caps on what it may return, and the
-- image its root is built from (46_images.sql: one this runner holds).
CREATE FUNCTION agent.runner_claim(runner uuid, incarnation uuid, max_rows integer,
								   notified uuid DEFAULT NULL)
	RETURNS TABLE (id uuid, lease_token uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean, has_skills boolean, max_files integer,
				   max_bytes bigint, max_file_bytes bigint, output_limit_bytes bigint,
				   has_egress boolean, image_name text, image_digest text, isolation text)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn		agent.runners := agent._runner_current(runner, incarnation);
	c		record;
	caps	record;
	lim		record;
	v_want	integer;
BEGIN
	IF max_rows IS NULL OR max_rows < 0 THEN
		RAISE EXCEPTION 'max_rows must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF rn.state <> 'active' THEN
		RETURN;
	END IF;
	v_want := least(max_rows, agent._runner_free_slots(rn));
	IF v_want <= 0 THEN
		RETURN;
	END IF;
	-- Every runner is woken by every approval: they claim in turn, and
	-- those after the first usually find nothing approved, in one index
	-- probe (agent._claim_turn).
	PERFORM agent._claim_turn();
	IF NOT EXISTS (SELECT 1 FROM agent.invocations i WHERE i.state = 'approved') THEN
		RETURN;
	END IF;
	FOR c IN SELECT * FROM agent._claim_invocations(v_want, rn.id, notified) LOOP
		IF caps IS NULL THEN
			caps := agent._produced_caps();
			lim := agent._run_limits();
		END IF;
		id := c.id;
		lease_token := c.lease_token;
		language := c.language;
		code := c.code;
		wall_time_s := coalesce(c.wall_time_s, lim.default_wall_time_s);
		memory_mb := coalesce(c.memory_mb, lim.default_memory_mb);
		conversation_id := c.conversation_id;
		session_id := c.session_id;
		fresh_session := c.fresh_session;
		has_skills := c.has_skills;
		max_files := caps.max_files;
		max_bytes := caps.max_bytes;
		max_file_bytes := caps.max_file_bytes;
		output_limit_bytes := lim.output_limit_bytes;
		has_egress := c.has_egress;
		-- NULL: the host's root; else the runner's NAME@DIGEST image
		image_name := c.image_name;
		image_digest := c.image_digest;
		-- the class the claim matched (49_isolation.sql), frozen
		isolation := c.isolation;
		RETURN NEXT;
	END LOOP;
END
$$;
COMMENT ON FUNCTION agent.runner_claim(uuid, uuid, integer, uuid) IS
	'claim approved invocations for the calling runner, each with a lease token';

-- What to put in the workspace before the start (agent._prepare_invocation),
-- for an invocation this runner holds.
CREATE FUNCTION agent.runner_prepare(runner uuid, token uuid, invocation uuid,
									 workspace_is_new boolean)
	RETURNS TABLE (kind text, name text, content bytea, skill_id uuid)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN QUERY SELECT p.kind, p.name, p.content, p.skill_id
				   FROM agent._prepare_invocation(invocation, coalesce(workspace_is_new, false)) p;
	PERFORM agent._runner_lease_of(runner, token, invocation);
END
$$;

-- The files of a skill mounted for an invocation this runner holds (no
-- other skill: 42501).
CREATE FUNCTION agent.runner_skill_files(runner uuid, token uuid, invocation uuid, skill uuid)
	RETURNS TABLE (path text, content bytea, executable boolean)
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r agent.invocations;
BEGIN
	r := agent._runner_lease_of(runner, token, invocation);
	IF NOT EXISTS (SELECT 1 FROM agent.agent_skills a WHERE a.agent_id = r.agent_id AND a.skill_id = skill) THEN
		RAISE EXCEPTION 'skill % is not mounted for invocation %', coalesce(skill::text, 'NULL'), invocation
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'A runner reads only the skills agent.runner_prepare() named for the invocation.';
	END IF;
	RETURN QUERY SELECT f.path, f.content, f.executable FROM agent._skill_files(skill) f;
END
$$;

-- The jail started (agent._mark_running).
CREATE FUNCTION agent.runner_mark_running(runner uuid, token uuid, invocation uuid, pid integer)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v boolean;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	v := agent._mark_running(invocation, pid);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- One chunk of output (agent._append_output), within the server's
-- sandbox.output_limit per stream (54000 beyond: the runner cuts output
-- there and reports the run truncated).
CREATE FUNCTION agent.runner_append_output(runner uuid, token uuid, invocation uuid,
										   stream text, data text)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	v_limit bigint;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF stream IS NULL OR stream NOT IN ('stdout', 'stderr') OR data IS NULL THEN
		RAISE EXCEPTION 'stream must be stdout or stderr, and data not null'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT l.output_limit_bytes INTO v_limit FROM agent._run_limits() l;
	IF (SELECT coalesce(sum(octet_length(o.data)), 0) FROM agent.invocation_output o
		 WHERE o.invocation_id = invocation AND o.stream = runner_append_output.stream)
	   + octet_length(data) > v_limit THEN
		RAISE EXCEPTION 'output of invocation % exceeds the output limit', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('At most %s bytes per stream are kept (sandbox.output_limit).', v_limit),
				  HINT = 'Cut the output at the limit and finish the run as truncated.';
	END IF;
	v := agent._append_output(invocation, stream, data);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Stage one file the run produced, or could not return
-- (agent._store_produced_file), within the caps runner_claim returned.
CREATE FUNCTION agent.runner_store_produced_file(runner uuid, token uuid, invocation uuid,
												 name text, status text, reason text, content bytea)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	caps	record;
	lim		record;
	n		integer;
	v_bytes bigint;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF status IS NULL OR status NOT IN ('saved', 'skipped', 'failed')
	   OR (status = 'saved') <> (content IS NOT NULL) THEN
		RAISE EXCEPTION 'status must be saved (with content), skipped or failed (without)'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF status <> 'saved' AND reason IS NULL THEN
		RAISE EXCEPTION 'a file that is not saved needs a reason' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM agent._runner_arg_fits(runner_store_produced_file.name, 'name', 4096);
	PERFORM agent._runner_arg_fits(reason, 'reason', 4096);
	SELECT * INTO caps FROM agent._produced_caps();
	SELECT * INTO lim FROM agent._run_limits();
	-- Each check costs O(log n), or O(n) only for the at most max_files + 1
	-- saved ones: a run may report some ten thousand skipped entries in one
	-- transaction, and counting them all at each would be quadratic.  The
	-- staged rows of a run are numbered densely from 1 (_store_produced_file),
	-- so the last number is how many there are.
	SELECT coalesce(max(x.seq), 0) INTO n FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	v_bytes := 0;
	IF content IS NOT NULL THEN
		SELECT coalesce(sum(octet_length(x.content)), 0)::bigint INTO v_bytes
		  FROM agent.run_result_files x WHERE x.invocation_id = invocation AND x.status = 'saved';
	END IF;
	IF octet_length(content) > caps.max_file_bytes
	   OR v_bytes + coalesce(octet_length(content), 0) > caps.max_bytes
	   OR n >= caps.max_files + lim.workspace_entries + 2 THEN
		RAISE EXCEPTION 'the files of invocation % exceed the caps of a run', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('A file may have %s bytes, a run return %s bytes in %s files (and report %s more as skipped).',
											 caps.max_file_bytes, caps.max_bytes, caps.max_files,
											 lim.workspace_entries + 2),
				  HINT = 'Report the files beyond the caps as skipped, without content.';
	END IF;
	v := agent._store_produced_file(invocation, runner_store_produced_file.name, status, reason, content);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Stage at once every entry of a run's workspace that it does not return
-- (skipped or failed, with a reason, without content): one call for what
-- may be ten thousand entries, within the same caps as one by one.
-- Returns how many were staged.
CREATE FUNCTION agent.runner_store_skipped_files(runner uuid, token uuid, invocation uuid,
												 names text[], statuses text[], reasons text[])
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		integer;
	k		integer := coalesce(pg_catalog.cardinality(names), 0);
	caps	record;
	lim		record;
	n		integer;
	v_long	text;
BEGIN
	PERFORM agent._runner_lease_of(runner, token, invocation);
	IF names IS NULL OR pg_catalog.array_ndims(names) > 1
	   OR pg_catalog.cardinality(statuses) IS DISTINCT FROM k
	   OR pg_catalog.cardinality(reasons) IS DISTINCT FROM k THEN
		RAISE EXCEPTION 'names, statuses and reasons must be lists of as many elements'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF EXISTS (SELECT 1 FROM unnest(statuses) s WHERE s IS NULL OR s NOT IN ('skipped', 'failed')) THEN
		RAISE EXCEPTION 'status must be skipped or failed' USING ERRCODE = 'invalid_parameter_value',
			HINT = 'Store a saved file with agent.runner_store_produced_file.';
	END IF;
	IF array_position(reasons, NULL) IS NOT NULL THEN
		RAISE EXCEPTION 'a file that is not saved needs a reason' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	SELECT x INTO v_long FROM unnest(names || reasons) x WHERE octet_length(x) > 4096 LIMIT 1;
	IF FOUND THEN
		PERFORM agent._runner_arg_fits(v_long, 'a name or reason', 4096);
	END IF;
	SELECT * INTO caps FROM agent._produced_caps();
	SELECT * INTO lim FROM agent._run_limits();
	SELECT coalesce(max(x.seq), 0) INTO n FROM agent.run_result_files x WHERE x.invocation_id = invocation;
	IF n + k > caps.max_files + lim.workspace_entries + 2 THEN
		RAISE EXCEPTION 'the files of invocation % exceed the caps of a run', invocation
			USING ERRCODE = 'program_limit_exceeded',
				  DETAIL = pg_catalog.format('A run may return %s files and report %s more as skipped.',
											 caps.max_files, lim.workspace_entries + 2);
	END IF;
	v := agent._store_skipped_files(invocation, names, statuses, reasons);
	PERFORM agent._runner_lease_of(runner, token, invocation);
	RETURN v;
END
$$;

-- Finish an invocation this runner holds from the jail's verdict.  `error`
-- (or a verdict with setup_error, or no verdict, or one that jsonb does
-- not accept) is a failure of ours: refunded.  Files the run produced were
-- staged before, in the same transaction (agent.runner_store_produced_file).
--
-- One way, in the finish's one locking order: the lease and the
-- invocation's row in one locked read (agent._lease_held, and no other
-- result staged, in its WHERE; NOWAIT), the arguments' limits (22001),
-- the rest of the finish's locks (agent._lock_for_finish), then the one
-- apply (agent._apply_run_result).  A lock held elsewhere (55P03), and
-- only that, stages the result under the lease instead: NULL is returned,
-- and the supervisor applies it once the lock is gone (agent._finish_pending).
-- A lease not held is 42501 (another runner's id) or 55000, as for every
-- step of a lease; every other error reaches the caller with its SQLSTATE
-- (the runner then records the run as a failure of ours, with the error as
-- the reason: src/runner/run.c).  Returns the final state, or NULL when
-- staged.
CREATE FUNCTION agent.runner_finish(runner uuid, token uuid, invocation uuid, verdict text,
									jail_status integer, error text, spawned boolean,
									truncated boolean DEFAULT false,
									workspace_bytes bigint DEFAULT NULL,
									workspace_entries integer DEFAULT NULL,
									workspace_reset text DEFAULT NULL)
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v		uuid;
	r		agent.invocations;
	res		agent.run_results;
BEGIN
	res.invocation_id := invocation;
	res.verdict := verdict;
	res.jail_status := jail_status;
	res.error := error;
	res.spawned := coalesce(spawned, false);
	res.truncated := coalesce(truncated, false);
	res.workspace_bytes := workspace_bytes;
	res.workspace_entries := workspace_entries;
	res.workspace_reset := workspace_reset;
	BEGIN
		SELECT i.* INTO r
		  FROM agent.invocations i
		  JOIN agent.runners rn ON rn.id = i.runner_id
		 WHERE i.id = invocation
		   AND agent._lease_held(i, rn, runner, token, false)
		   AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)
		   FOR NO KEY UPDATE OF i NOWAIT;
		IF NOT FOUND THEN
			PERFORM agent._lease_refused(runner, invocation);
		END IF;
		PERFORM agent._runner_finish_args(res);
		PERFORM agent._lock_for_finish(r);
		RETURN agent._apply_run_result(r, res, false);
	EXCEPTION
		WHEN lock_not_available THEN
			NULL;		-- one of the finish's rows is held elsewhere: staged below
	END;

	-- Staged under the lease: the lease read without the row's lock (a
	-- backend may hold it), the arguments' limits, then the result, unless
	-- another (the reaper's) came first.
	PERFORM agent._runner_lease_of(runner, token, invocation);
	PERFORM agent._runner_finish_args(res);
	INSERT INTO agent.run_results AS x (invocation_id, verdict, jail_status, error, spawned,
										truncated, workspace_bytes, workspace_entries,
										workspace_reset)
	VALUES (invocation, res.verdict, res.jail_status, res.error, res.spawned, res.truncated,
			res.workspace_bytes, res.workspace_entries, res.workspace_reset)
	ON CONFLICT (invocation_id) DO NOTHING
	RETURNING x.invocation_id INTO v;
	IF v IS NULL THEN
		-- the reaper's result came first (this raises)
		PERFORM agent._runner_lease_of(runner, token, invocation);
	END IF;
	-- still in flight under this lease: the reaper did not end it meanwhile
	PERFORM agent._runner_lease_of(runner, token, invocation, true);
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION agent.runner_finish(uuid, uuid, uuid, text, integer, text, boolean, boolean, bigint, integer, text) IS
	'finish an invocation the calling runner holds: apply its result, or stage it behind a tenant''s lock';

-- The limits of a runner's finish arguments (agent._runner_arg_fits:
-- 22001 beyond them).
CREATE FUNCTION agent._runner_finish_args(res agent.run_results) RETURNS void
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	IF NOT coalesce(octet_length(res.verdict) <= 65536 AND octet_length(res.error) <= 4096
					AND octet_length(res.workspace_reset) <= 4096, true) THEN
		PERFORM agent._runner_arg_fits(res.verdict, 'verdict', 65536);
		PERFORM agent._runner_arg_fits(res.error, 'error', 4096);
		PERFORM agent._runner_arg_fits(res.workspace_reset, 'workspace_reset', 4096);
	END IF;
END
$$;

-- Of these invocations, the ones this runner holds that someone asked to
-- cancel (its own runs only).
CREATE FUNCTION agent.runner_cancel_requested(runner uuid, invocations uuid[]) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT i.id FROM agent.invocations i
		 WHERE i.id = ANY (invocations) AND i.runner_id = runner
		   AND i.state IN ('provisioning', 'running') AND i.cancel_requested_at IS NOT NULL
		 ORDER BY i.id;
END
$$;

-- The sessions whose workspace this runner keeps: every other workspace
-- directory on its host may go.
CREATE FUNCTION agent.runner_live_sessions(runner uuid) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT s.id FROM agent.sessions s
		 WHERE s.runner_id = runner AND s.state = 'active'
		 ORDER BY s.id;
END
$$;

-- The skill versions this runner may keep materialised: those of the
-- agents of its runs in flight and of its live sessions (its own work
-- only).
CREATE FUNCTION agent.runner_skills_in_use(runner uuid) RETURNS SETOF uuid
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._runner_self(runner);
	RETURN QUERY
		SELECT DISTINCT a.skill_id
		  FROM agent.agent_skills a
		 WHERE a.agent_id IN (SELECT i.agent_id FROM agent.invocations i
							   WHERE i.runner_id = runner AND i.state IN ('provisioning', 'running')
							  UNION
							  SELECT c.agent_id FROM agent.sessions s
								JOIN agent.conversations c ON c.id = s.conversation_id
							   WHERE s.runner_id = runner AND s.state = 'active')
		 ORDER BY a.skill_id;
END
$$;

-- ----------------------------------------------------------------------
-- The reaper and the operator's functions (owner only)
-- ----------------------------------------------------------------------

-- End every invocation whose lease expired before as_of (the runner died,
-- its host is gone, its network is cut): the result "the runner stopped
-- renewing its lease", a failure of ours, refunded by the billing rule and
-- audited like any other end.  A result the runner staged under its lease
-- is applied as it is instead.  Runners without a heartbeat for a lease
-- are marked gone.  Called by the supervisor every few seconds and by
-- pg_cron (agent.schedule_maintenance); as_of is for tests.  Returns how
-- many invocations it ended.
CREATE FUNCTION agent.reap_expired_leases(as_of timestamptz DEFAULT now()) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	n		integer;
	v_lease interval := agent._runner_lease();
	x		record;
BEGIN
	as_of := coalesce(as_of, now());
	n := agent._reap_leases(NULL, as_of);
	FOR x IN
		SELECT rn.id FROM agent.runners rn
		 WHERE rn.gone_at IS NULL AND rn.state <> 'removed' AND rn.last_heartbeat + v_lease < as_of
		   FOR NO KEY UPDATE SKIP LOCKED
	LOOP
		UPDATE agent.runners rn SET gone_at = now() WHERE rn.id = x.id;
	END LOOP;
	IF n > 0 THEN
		RAISE LOG 'ended % invocation(s) whose runner lease expired', n;
	END IF;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.reap_expired_leases(timestamptz) IS
	'end the invocations whose runner lease expired (refunded, audited); mark silent runners gone';

-- Drain a runner: it finishes what it holds and claims nothing new (its
-- next heartbeat says so).  With resume, it claims again (also a removed
-- runner: admitted again).  Returns its state.
CREATE FUNCTION agent.drain_runner(name text, resume boolean DEFAULT false) RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn agent.runners;
BEGIN
	PERFORM agent._check_text(drain_runner.name, 'name', 'runner_name');
	SELECT * INTO rn FROM agent.runners x WHERE x.name = drain_runner.name FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(agent._shown(drain_runner.name), 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE agent.runners x
	   SET state = CASE WHEN coalesce(resume, false) THEN 'active' ELSE 'draining' END,
		   removed_at = CASE WHEN coalesce(resume, false) THEN NULL ELSE x.removed_at END
	 WHERE x.id = rn.id AND (x.state <> 'removed' OR coalesce(resume, false))
	RETURNING * INTO rn;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" has been removed', drain_runner.name
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Admit it again with agent.drain_runner(name, resume => true).';
	END IF;
	IF rn.state = 'active' THEN
		PERFORM agent._wake_supervisor();
	END IF;
	RETURN rn.state;
END
$$;
COMMENT ON FUNCTION agent.drain_runner(text, boolean) IS
	'drain a runner (finish its work, claim nothing new), or resume it';

-- Remove a runner from the fleet now: what it holds ends as a failure of
-- ours (refunded, audited); its sessions are rebuilt elsewhere when their
-- conversations run next; it cannot register again until admitted
-- (agent.drain_runner(name, resume => true)).  To keep a host out for good,
-- also revoke its role's membership in agent_runner.  Returns how many
-- invocations it ended.
CREATE FUNCTION agent.remove_runner(name text) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn	agent.runners;
	x	record;
	n	integer := 0;
BEGIN
	PERFORM agent._check_text(remove_runner.name, 'name', 'runner_name');
	SELECT * INTO rn FROM agent.runners r WHERE r.name = remove_runner.name FOR NO KEY UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(agent._shown(remove_runner.name), 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	UPDATE agent.runners r SET state = 'removed', removed_at = now() WHERE r.id = rn.id;
	FOR x IN SELECT i.id, i.state FROM agent.invocations i
			  WHERE i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
			  ORDER BY i.provisioned_at, i.id LOOP
		IF agent._end_leased(x.id, pg_catalog.format('the runner "%s" was removed', rn.name),
							 x.state = 'running') THEN
			n := n + 1;
		END IF;
	END LOOP;
	RETURN n;
END
$$;
COMMENT ON FUNCTION agent.remove_runner(text) IS
	'remove a runner now: its invocations end refunded, its sessions move; it cannot register until admitted';

-- The runners at a glance (agent_auditor).  No function of schema agent:
-- a view's functions run with the reader's rights.  next_lease_deadline is
-- agent._lease_deadline written out; max_slots is the cap in force
-- (agent._runner_slots; NULL: none, the local runner's).
-- live: not removed, and heard from within a lease: it holds its leases and
-- its sessions (what claims and session affinity go by).  liveness says
-- what an operator can tell of it (the one definition; worker_status()
-- shows it too):
--   live         its last heartbeat is at most a heartbeat interval and a
--                half old (a runner heartbeats every heartbeat_seconds, a
--                third of a lease, as runner_register computes it; the
--                half is the margin for a slow transaction)
--   unconfirmed  a heartbeat is missed: it may be dead (killed, cut off)
--                but keeps its leases and sessions until a lease has passed
--   gone         silent for a lease (its leases are reaped), or removed
CREATE VIEW agent.runner_status AS
SELECT rn.name, rn.host, rn.version, rn.state, rn.slots, rn.in_use,
	   rn.state <> 'removed' AND rn.last_heartbeat >= now() - l.lease AS live,
	   count(i.id)::integer AS leases,
	   min(least(greatest(i.lease_expires_at, rn.last_heartbeat + l.lease),
				 i.provisioned_at + coalesce(pg_catalog.make_interval(secs => i.wall_time_s), l.default_wall)
				 + l.grace,
				 i.cancel_requested_at + l.grace)) AS next_lease_deadline,
	   rn.last_heartbeat, rn.registered_at, rn.gone_at, rn.removed_at, rn.login_role, rn.id,
	   coalesce(rn.max_slots, CASE WHEN rn.login_role <> 'sandbox_runner_local' THEN l.max_slots END)
		   AS max_slots,
	   CASE WHEN rn.state = 'removed' OR rn.last_heartbeat < now() - l.lease THEN 'gone'
			WHEN rn.last_heartbeat < now() - 1.5 * l.heartbeat THEN 'unconfirmed'
			ELSE 'live' END AS liveness
  FROM agent.runners rn
 CROSS JOIN (SELECT pg_catalog.make_interval(secs => (max(s.value) FILTER (WHERE s.key = 'runner_lease_seconds'))::integer) AS lease,
					pg_catalog.make_interval(secs => greatest((max(s.value) FILTER (WHERE s.key = 'runner_lease_seconds'))::integer / 3, 1))
						AS heartbeat,
					pg_catalog.make_interval(secs => (max(s.value) FILTER (WHERE s.key = 'runner_grace_seconds'))::integer) AS grace,
					(max(s.value) FILTER (WHERE s.key = 'runner_max_slots'))::integer AS max_slots,
					pg_catalog.current_setting('sandbox.default_wall_time', true)::interval AS default_wall
			   FROM agent.settings s
			  WHERE s.key IN ('runner_lease_seconds', 'runner_grace_seconds', 'runner_max_slots')) l
  LEFT JOIN agent.invocations i
		 ON i.runner_id = rn.id AND i.state IN ('provisioning', 'running')
		AND NOT EXISTS (SELECT 1 FROM agent.run_results x WHERE x.invocation_id = i.id)
 GROUP BY rn.id, l.lease, l.heartbeat, l.grace, l.max_slots, l.default_wall;
COMMENT ON VIEW agent.runner_status IS
	'runner hosts: host, version, state, slots (declared, and the cap in force: max_slots), in use, live, leases held, last heartbeat, liveness (live, unconfirmed after a missed heartbeat, gone)';

-- The supervisor and every runner, for an operator (owner, agent_auditor):
-- the row of agent._supervisor_status() (the supervisor's life, the local
-- runner's slots and why it claims nothing) and `runners`, one object per
-- row of agent.runner_status, the local runner first:
--   {name, local, host, version, state, slots, max_slots, in_use, live,
--    liveness, leases, next_lease_deadline, last_heartbeat, registered_at,
--    gone_at, removed_at}
-- problem adds to the supervisor's what is wrong with the maintenance jobs
-- (agent._maintenance_problem: failing or not running), after a "; ".
-- SECURITY DEFINER: the caller needs neither the C function nor the view
-- (nor pg_cron's tables).
CREATE FUNCTION agent.worker_status(
		OUT preloaded boolean, OUT running boolean, OUT pid integer,
		OUT started_at timestamptz, OUT slots_in_use integer,
		OUT max_concurrent_runs integer, OUT invocations uuid[],
		OUT work_dir text, OUT problem text, OUT runners jsonb,
		OUT warm_ready integer, OUT warm_memory_bytes bigint,
		OUT warm_memory_limit bigint, OUT warm_problem text)
	LANGUAGE sql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
SELECT s.preloaded, s.running, s.pid, s.started_at, s.slots_in_use, s.max_concurrent_runs,
	   s.invocations, s.work_dir,
	   NULLIF(pg_catalog.concat_ws('; ', s.problem, agent._maintenance_problem()), ''),
	   (SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
				'name', r.name, 'local', r.login_role = 'sandbox_runner_local', 'host', r.host,
				'version', r.version, 'state', r.state, 'slots', r.slots, 'max_slots', r.max_slots,
				'in_use', r.in_use,
				'live', r.live, 'liveness', r.liveness, 'leases', r.leases, 'next_lease_deadline', r.next_lease_deadline,
				'last_heartbeat', r.last_heartbeat, 'registered_at', r.registered_at,
				'gone_at', r.gone_at, 'removed_at', r.removed_at)
			  ORDER BY r.login_role <> 'sandbox_runner_local', r.name), '[]'::jsonb)
		  FROM agent.runner_status r),
	   s.warm_ready, s.warm_memory_bytes, s.warm_memory_limit, s.warm_problem
  FROM agent._supervisor_status() s
$$;
COMMENT ON FUNCTION agent.worker_status() IS
	'the supervisor (whether it runs, its pid, the local runner''s slots and invocations, its work directory, why it claims nothing or what fails in the maintenance jobs) and every runner, local and remote (runners); the local launcher''s warm pool (warm_*)';
REVOKE ALL ON FUNCTION agent.worker_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION agent._lease_held(agent.invocations, agent.runners, uuid, uuid, boolean),
	agent._lease_refused(uuid, uuid), agent._runner_finish_args(agent.run_results) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION agent.worker_status() TO agent_auditor;

-- Cap the slots of a runner (NULL: back to the setting runner_max_slots):
-- from its next claim on it holds at most that many runs at once, whatever
-- it declares; a cap below what it holds only makes it claim nothing until
-- enough end.  Its registration and heartbeat change only what it declares.
-- Returns the cap in force (agent._runner_slots).  Owner only.
CREATE FUNCTION agent.set_runner_slots(name text, max_slots integer) RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	rn agent.runners;
BEGIN
	IF set_runner_slots.max_slots NOT BETWEEN 0 AND 1024 THEN
		RAISE EXCEPTION 'max_slots must be between 0 and 1024' USING ERRCODE = 'invalid_parameter_value',
			HINT = 'NULL sets the runner back to the setting runner_max_slots.';
	END IF;
	UPDATE agent.runners r SET max_slots = set_runner_slots.max_slots
	 WHERE r.name = set_runner_slots.name
	RETURNING * INTO rn;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'runner "%" does not exist', coalesce(set_runner_slots.name, 'NULL')
			USING ERRCODE = 'no_data_found';
	END IF;
	IF rn.state = 'active' THEN
		PERFORM agent._wake_supervisor();	-- a raised cap: it may claim now
	END IF;
	RETURN coalesce(rn.max_slots,
					CASE WHEN rn.login_role = 'sandbox_runner_local' THEN NULL
						 ELSE agent._setting('runner_max_slots')::integer END);
END
$$;
COMMENT ON FUNCTION agent.set_runner_slots(text, integer) IS
	'cap the runs a runner holds at once, whatever slots it declares (NULL: runner_max_slots)';

-- ----------------------------------------------------------------------
-- Privileges
-- ----------------------------------------------------------------------

-- agent_runner executes the steps above and nothing else: no table, view
-- or sequence privilege, no other function (99_privileges.sql revokes
-- PUBLIC's EXECUTE).  test/pgtap/60_runners.sql enumerates the catalog.
REVOKE ALL ON agent.runners, agent.runner_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	agent.runner_register(text, text, text, integer),
	agent.runner_heartbeat(uuid, uuid, integer, uuid[], integer),
	agent.runner_claim(uuid, uuid, integer, uuid),
	agent.runner_prepare(uuid, uuid, uuid, boolean),
	agent.runner_skill_files(uuid, uuid, uuid, uuid),
	agent.runner_mark_running(uuid, uuid, uuid, integer),
	agent.runner_append_output(uuid, uuid, uuid, text, text),
	agent.runner_store_produced_file(uuid, uuid, uuid, text, text, text, bytea),
	agent.runner_store_skipped_files(uuid, uuid, uuid, text[], text[], text[]),
	agent.runner_finish(uuid, uuid, uuid, text, integer, text, boolean, boolean, bigint, integer, text),
	agent.runner_cancel_requested(uuid, uuid[]),
	agent.runner_live_sessions(uuid),
	agent.runner_skills_in_use(uuid)
	TO agent_runner;
GRANT SELECT ON agent.runners, agent.runner_status TO agent_auditor;
