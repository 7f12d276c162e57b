-- The claim: which approved invocation a runner may take now, and taking
-- it (approved -> provisioning, charged, leased).  One function states the
-- gates in order (agent._claim_gate); the claim acts on its answer under
-- the row's locks, and agent.queue_status() (72_operators.sql) explains a
-- wait with the same answer, so the rule and its explanation cannot drift.
--
-- Runners reach it through agent.runner_claim (45_runners.sql).  Nothing
-- here waits for a lock a backend may hold: rows, orgs, conversations and
-- audit heads locked elsewhere are skipped until a later claim.

-- ---- the queue -------------------------------------------------------------

-- The orgs that have approved work, each once, in a loose index scan of
-- invocations_approved_org_idx (one probe per org, not one per row).
-- SQL without a SET clause so that the claim's queries inline it.
CREATE FUNCTION agent._orgs_with_approved() RETURNS SETOF uuid
	LANGUAGE sql STABLE
AS $$
	WITH RECURSIVE orgs AS (
		(SELECT i.org_id FROM agent.invocations i WHERE i.state = 'approved'
		  ORDER BY i.org_id LIMIT 1)
		UNION ALL
		SELECT (SELECT i.org_id FROM agent.invocations i
				 WHERE i.state = 'approved' AND i.org_id > o.org_id
				 ORDER BY i.org_id LIMIT 1)
		  FROM orgs o WHERE o.org_id IS NOT NULL)
	SELECT o.org_id FROM orgs o WHERE o.org_id IS NOT NULL
$$;

-- Lock what an org's appends to come take, without waiting, in the
-- caller's (sub)transaction: its audit head, then its usage row (each
-- append counts against the org's storage: 21_audit_usage.sql).  False
-- when either is held elsewhere (a backend's open transaction after an
-- audited call); an org without a head (or usage row) yet has nothing to
-- lock (its first append makes it).
-- (No SET clause, as agent._setting: names and operators are qualified.)
CREATE FUNCTION agent._try_audit_head(org uuid) RETURNS boolean
	LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
	-- (both rows in one statement, the common case; a row missing or held
	-- elsewhere is told apart below, one by one)
	PERFORM 1 FROM agent.audit_heads h, agent.org_usage u
	 WHERE h.org_id OPERATOR(pg_catalog.=) org AND u.org_id OPERATOR(pg_catalog.=) org
	   FOR UPDATE OF h SKIP LOCKED FOR NO KEY UPDATE OF u SKIP LOCKED;
	IF FOUND THEN
		RETURN true;
	END IF;
	PERFORM 1 FROM agent.audit_heads h WHERE h.org_id OPERATOR(pg_catalog.=) org FOR UPDATE SKIP LOCKED;
	IF NOT FOUND AND EXISTS (SELECT 1 FROM agent.audit_heads h WHERE h.org_id OPERATOR(pg_catalog.=) org) THEN
		RETURN false;
	END IF;
	PERFORM 1 FROM agent.org_usage u WHERE u.org_id OPERATOR(pg_catalog.=) org FOR NO KEY UPDATE SKIP LOCKED;
	RETURN FOUND OR NOT EXISTS (SELECT 1 FROM agent.org_usage u WHERE u.org_id OPERATOR(pg_catalog.=) org);
END
$$;

-- ---- the gate --------------------------------------------------------------

-- Why the approved invocation r may not be claimed now: the first reason
-- that holds, in this order, or NULL (claimable):
--
--   not_approved          the code is not, byte for byte, what the approval
--                         covers: the hash on the card, the hash the audit
--                         trail recorded at the approval (a change of the
--                         card and the code together, bypassing every
--                         trigger, still disagrees with the chain, anchored
--                         outside the database) and the code's own must
--                         agree; no code at all (pruned behind the triggers'
--                         back) is not approved.  The claim ends the row.
--   insufficient_credits  the org cannot pay: the claim ends the row,
--                         uncharged, without taking a slot
--   storage_quota_exhausted  the org is at its storage quota (its output
--                         would be kept past it): the claim ends the row,
--                         nothing ran, nothing charged
--   image_not_held        it runs on an image whose digest this runner does
--                         not hold; for the fleet, no live active runner
--                         with slots holds it (46_images.sql)
--   secrets_key_not_held  its secrets are sealed to a key this runner does
--                         not hold; for the fleet, no live active runner
--                         with slots holds them all (48_secrets.sql)
--   isolation_unavailable its isolation class is one this runner does not
--                         run; for the fleet, no live active runner with
--                         slots runs it (49_isolation.sql)
--   conversation_busy     a run of its conversation is in flight, or an
--                         earlier one is approved (runs of a conversation
--                         are serial, in approval order)
--   session_elsewhere     its conversation's session is on another live
--                         runner, whose runs it is (affinity); for the
--                         fleet, on a live runner with no free slot
--   org_at_limit          the org has its limit of runs in flight (every
--                         host together)
--   workspace_at_limit    the workspace has its limit of runs in flight
--
-- `runner` is the claiming runner's id; NULL asks for the fleet, as
-- agent.queue_status() explains a wait.  The runners' own capacity (a
-- draining runner, no free slot) is not the row's: agent.runner_claim and
-- agent.queue_status() look at it first.  The counts are exact when the
-- caller holds the org row's lock (the claim does); otherwise they are
-- what a snapshot shows.  What every row is gated on (the hashes, the
-- balance, the storage, the limits) is read in one statement; the other
-- gates are asked only of a row they concern (an image, an egress policy,
-- a class other than namespaces, a conversation, a workspace with a
-- limit), each a query of its own, so that a plain run pays for none of
-- them (a single statement with every gate in a CASE initialised all their
-- subqueries on every call, about 0.9M instructions).  (The org's limits
-- are agent._org_run_limit's and agent._org_storage_limit's, and the
-- hashes agent._approved_hashes', read inline: the same rules.)
CREATE FUNCTION agent._claim_gate(r agent.invocations, runner uuid) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	g		record;
BEGIN
	-- What every run is gated on, in one statement: the hashes, the org's
	-- balance and price, its storage and its limits, the workspace's limit.
	SELECT h.approved, h.audited, coalesce(b.balance, 0) AS balance,
		   p.credits_per_invocation AS price, coalesce(u.stored_bytes, 0) AS stored_bytes,
		   coalesce(o.max_stored_bytes, st.max_stored_bytes,
					agent._setting('max_stored_bytes_per_org')::bigint) AS max_stored_bytes,
		   coalesce(o.max_concurrent_runs, st.max_runs,
					agent._setting('max_runs_per_org')::integer) AS max_runs,
		   w.max_concurrent_runs AS ws_max_runs
	  INTO g
	  FROM agent.orgs o
	  JOIN agent.plans p ON p.plan = o.plan
	  JOIN agent.workspaces w ON w.id = r.workspace_id
	  LEFT JOIN agent.credit_balances b ON b.org_id = o.id
	  LEFT JOIN agent.org_usage u ON u.org_id = o.id
	 CROSS JOIN (SELECT (SELECT a.approved_code_sha256 FROM agent.approval_requests a
						  WHERE a.id = r.approval_id AND a.invocation_id = r.id AND a.status = 'approved')
						 AS approved,
						(SELECT e.details ->> 'code_sha256' FROM agent.audit_events e
						  WHERE e.invocation_id = r.id
							AND e.event_type IN ('approval.approved', 'approval.auto')
						  ORDER BY e.id DESC LIMIT 1) AS audited) h
	 CROSS JOIN (SELECT (max(s.value) FILTER (WHERE s.key = 'max_stored_bytes_per_org'))::bigint
						 AS max_stored_bytes,
						(max(s.value) FILTER (WHERE s.key = 'max_runs_per_org'))::integer AS max_runs
				   FROM agent.settings s
				  WHERE s.key IN ('max_stored_bytes_per_org', 'max_runs_per_org')) st
	 WHERE o.id = r.org_id;
	IF NOT FOUND THEN
		RETURN NULL;
	END IF;
	IF g.approved IS NULL OR g.audited IS DISTINCT FROM g.approved
	   OR g.approved IS DISTINCT FROM agent.code_sha256(r.code)
	   OR g.approved <> r.code_sha256 THEN
		RETURN 'not_approved';
	END IF;
	IF g.balance < g.price THEN
		RETURN 'insufficient_credits';
	END IF;
	IF g.stored_bytes >= g.max_stored_bytes THEN
		RETURN 'storage_quota_exhausted';
	END IF;
	-- The rest only of a row they concern (each a query of its own; a
	-- CASE in parentheses: PL/pgSQL's IF ends at the first THEN).
	IF r.image_digest IS NOT NULL OR r.image_name IS NOT NULL THEN
		IF (CASE WHEN runner IS NOT NULL
				THEN NOT EXISTS (SELECT 1 FROM agent.runner_images ri
								  WHERE ri.runner_id = runner AND ri.name = r.image_name
									AND ri.digest = r.image_digest)
				ELSE agent._image_wait(r.image_name, r.image_digest) IS NOT NULL END) THEN
			RETURN 'image_not_held';
		END IF;
	END IF;
	IF r.egress_policy IS NOT NULL THEN		-- (no policy, no secrets)
		IF (CASE WHEN runner IS NOT NULL THEN NOT agent._secrets_claimable(r, runner)
				ELSE agent._secrets_wait(r.egress_policy) IS NOT NULL END) THEN
			RETURN 'secrets_key_not_held';
		END IF;
	END IF;
	IF r.isolation <> 'namespaces' THEN
		IF (CASE WHEN runner IS NOT NULL THEN NOT agent._runner_runs_class(runner, r.isolation)
				ELSE agent._isolation_wait(r.isolation) IS NOT NULL END) THEN
			RETURN 'isolation_unavailable';
		END IF;
	END IF;
	IF r.conversation_id IS NOT NULL THEN
		IF EXISTS (SELECT 1 FROM agent.invocations j
					WHERE j.conversation_id = r.conversation_id AND j.id <> r.id
					  AND (j.state IN ('provisioning', 'running')
						   OR (j.state = 'approved'
							   AND (j.approved_at, j.request_seq) < (r.approved_at, r.request_seq)))) THEN
			RETURN 'conversation_busy';
		END IF;
		IF (CASE WHEN runner IS NOT NULL THEN agent._session_elsewhere(r.conversation_id, runner)
				ELSE coalesce((SELECT agent._runner_free_slots(rn) <= 0 FROM agent.runners rn
								WHERE rn.id = agent._session_runner(r.conversation_id)), false) END) THEN
			RETURN 'session_elsewhere';
		END IF;
	END IF;
	IF (SELECT count(*) FROM agent.invocations j
		 WHERE j.org_id = r.org_id AND j.state IN ('provisioning', 'running')) >= g.max_runs THEN
		RETURN 'org_at_limit';
	END IF;
	IF g.ws_max_runs IS NOT NULL THEN
		IF (SELECT count(*) FROM agent.invocations j
			 WHERE j.org_id = r.org_id AND j.workspace_id = r.workspace_id
			   AND j.state IN ('provisioning', 'running')) >= g.ws_max_runs THEN
			RETURN 'workspace_at_limit';
		END IF;
	END IF;
	RETURN NULL;
END
$$;
COMMENT ON FUNCTION agent._claim_gate(agent.invocations, uuid) IS
	'why an approved invocation cannot be claimed now (not_approved, insufficient_credits, storage_quota_exhausted, image_not_held, secrets_key_not_held, isolation_unavailable, conversation_busy, session_elsewhere, org_at_limit, workspace_at_limit), or NULL';

-- What the code of invocation r is checked against: the hash its approval
-- card holds (NULL: no card approved it) and the hash the audit trail
-- recorded at the approval (a person's approval.approved or an approval
-- policy's approval.auto).  Both were written by the approval's
-- transaction, committed before the row read approved.  (agent._claim_gate
-- reads the same two inline.)
-- (PL/pgSQL: its plan is kept for the session, where a SQL function with a
-- SET clause is planned on every call.)
CREATE FUNCTION agent._approved_hashes(r agent.invocations, OUT approved text, OUT audited text)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	SELECT (SELECT a.approved_code_sha256 FROM agent.approval_requests a
			 WHERE a.id = r.approval_id AND a.invocation_id = r.id AND a.status = 'approved'),
		   (SELECT e.details ->> 'code_sha256' FROM agent.audit_events e
			 WHERE e.invocation_id = r.id
			   AND e.event_type IN ('approval.approved', 'approval.auto')
			 ORDER BY e.id DESC LIMIT 1)
	  INTO approved, audited;
END
$$;

-- ---- one row ---------------------------------------------------------------

-- End an approved invocation the gate refuses (not_approved,
-- insufficient_credits, storage_quota_exhausted): nothing ran, nothing is
-- charged; its audit event and its end's notification.  The caller holds
-- the row and the org's audit head.
CREATE FUNCTION agent._claim_refuse(r agent.invocations, reason text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_store		record;
	h			record;
BEGIN
	CASE reason
	WHEN 'insufficient_credits' THEN
		UPDATE agent.invocations i
		   SET state = 'insufficient_credits',
			   state_reason = 'the organization does not have enough credits',
			   finished_at = now()
		 WHERE i.id = r.id AND i.state = 'approved';
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.insufficient_credits',
							 r.id, 'supervisor', '{}'::jsonb);
	WHEN 'storage_quota_exhausted' THEN
		v_store := agent._storage_exhausted(r.org_id);
		UPDATE agent.invocations i
		   SET state = 'provision_failed',
			   state_reason = format('the organization''s storage quota is exhausted (%s of %s bytes); nothing ran',
									 v_store.stored_bytes, v_store.max_stored_bytes),
			   finished_at = now()
		 WHERE i.id = r.id;
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id,
							 'supervisor',
							 jsonb_build_object('reason', 'storage_quota_exhausted',
												'stored_bytes', v_store.stored_bytes,
												'max_stored_bytes', v_store.max_stored_bytes));
	WHEN 'not_approved' THEN
		h := agent._approved_hashes(r);
		UPDATE agent.invocations i
		   SET state = 'provision_failed',
			   state_reason = 'the code does not match the approved code (sha256 mismatch); nothing ran',
			   finished_at = now()
		 WHERE i.id = r.id;
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.hash_mismatch', r.id,
							 'supervisor',
							 jsonb_build_object('approved_sha256', h.approved,
												'audited_sha256', h.audited,
												'code_sha256', agent.code_sha256(r.code)));
	END CASE;
	PERFORM agent._notify_invocation(r.id, '{"done":true}');
END
$$;

-- Move the claimable invocation r (approved, locked with its org's audit
-- head and conversation) to provisioning for `runner`:
-- charged, its session attached (fresh: its workspace is new), leased.
-- claimed is its id, or NULL when the balance does not cover it after all
-- (a charge of another claim committed meanwhile): then it is refused.
-- skills: whether its agent has skills to mount.
-- The charge is agent._charge's rule in two statements: the org's balance
-- locked with the plan's price, then the ledger's row.  The row is held
-- and approved, so it was never charged: a charge there anyway (the
-- ledger's unique index, credit_ledger_once_per_invocation), a balance
-- that does not cover the price, or no balance row go to agent._charge,
-- which decides them as for any charge.
CREATE FUNCTION agent._claim_take(r agent.invocations, runner uuid,
								  OUT claimed uuid, OUT fresh boolean, OUT skills boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_price		integer;
	v_balance	bigint;
	v_charged	bigint;
	v_session	uuid;
	v_gen		integer;
BEGIN
	SELECT b.balance, (SELECT p.credits_per_invocation
						 FROM agent.orgs o JOIN agent.plans p ON p.plan = o.plan
						WHERE o.id = r.org_id)
	  INTO v_balance, v_price
	  FROM agent.credit_balances b
	 WHERE b.org_id = r.org_id FOR UPDATE OF b;
	IF FOUND AND v_balance >= v_price THEN
		INSERT INTO agent.credit_ledger (org_id, workspace_id, invocation_id, kind, amount, reason)
			VALUES (r.org_id, r.workspace_id, r.id, 'charge', -v_price, 'code execution')
			ON CONFLICT (invocation_id, kind) WHERE kind IN ('charge', 'refund') DO NOTHING
			RETURNING id INTO v_charged;
	END IF;
	IF v_charged IS NULL THEN
		v_price := agent._charge(r.id);
	END IF;
	IF v_price IS NULL THEN
		PERFORM agent._claim_refuse(r, 'insufficient_credits');
		RETURN;
	END IF;
	IF r.conversation_id IS NOT NULL THEN
		SELECT x.session_id, x.generation, x.fresh INTO v_session, v_gen, fresh
		  FROM agent._session_for(r, runner) x;
	END IF;
	UPDATE agent.invocations i
	   SET state = 'provisioning', provisioned_at = now(), credits_charged = v_price,
		   session_id = v_session, session_generation = v_gen,
		   runner_id = runner, lease_token = gen_random_uuid(),
		   lease_expires_at = clock_timestamp() + agent._runner_lease()
	 WHERE i.id = r.id
	RETURNING i.id,
			  EXISTS (SELECT 1 FROM agent.agent_skills s WHERE s.agent_id = i.agent_id)
	  INTO claimed, skills;
	PERFORM agent._audit(r.org_id, r.workspace_id, 'credits.charged', r.id, 'supervisor',
						 jsonb_build_object('amount', v_price));
	PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provisioned', r.id, 'supervisor',
						 jsonb_build_object('credits_charged', v_price, 'runner_id', runner));
END
$$;

-- A row whose claim raised ends provision_failed with the error, uncharged
-- (what the claim did for it was rolled back), audited, under its locks
-- taken again without waiting (held elsewhere meanwhile: it stays
-- approved, and a later claim tries it again).
CREATE FUNCTION agent._claim_fail(r agent.invocations, err text) RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM 1 FROM agent.invocations i WHERE i.id = r.id AND i.state = 'approved' FOR NO KEY UPDATE NOWAIT;
	IF FOUND THEN
		PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = r.org_id FOR UPDATE NOWAIT;
		PERFORM 1 FROM agent.org_usage u WHERE u.org_id = r.org_id FOR NO KEY UPDATE NOWAIT;
		UPDATE agent.invocations i
		   SET state = 'provision_failed', state_reason = 'could not provision: ' || err,
			   finished_at = now()
		 WHERE i.id = r.id;
		PERFORM agent._audit(r.org_id, r.workspace_id, 'invocation.provision_failed', r.id, 'supervisor',
							 jsonb_build_object('reason', 'could not provision: ' || err));
		PERFORM agent._notify_invocation(r.id, '{"done":true}');
	END IF;
EXCEPTION
	WHEN lock_not_available THEN
		NULL;		-- held elsewhere: it stays approved, for a later claim
END
$$;

-- Try one approved invocation (of org) for `runner`: take its locks
-- without waiting, ask the gate, and do what its answer says: claim it
-- (NULL, when may_take), end it (not_approved, insufficient_credits,
-- storage_quota_exhausted), or leave it approved for a later claim.
-- reason is the gate's, or one of the claim's own: 'org_locked' (the org's
-- row, audit head or usage row is held elsewhere: skip the org this time),
-- 'row_locked' (the row is held elsewhere, or no longer approved),
-- 'conversation_locked' (another claimer is starting its conversation),
-- 'claimable' (the gate let it through but may_take is false), 'failed'
-- (below); NULL when claimed: claimed, fresh and skills as
-- agent._claim_take returned them.
-- The org's row is locked first, in the caller's transaction: one claimer
-- per org at a time, so its limits hold with several claimers.  The row is
-- then locked, checked and written in one subtransaction: the rows it
-- updates (the invocation, the org's audit head) are then locked by the
-- subtransaction that updates them, which needs no multixact (a lock of
-- the parent's would).  A row that cannot be claimed for any other reason
-- (a bug, a broken row) fails alone: everything done for it is rolled back
-- (uncharged) and it ends provision_failed with the error
-- (agent._claim_fail); the claim goes on with the next.
CREATE FUNCTION agent._claim_one(invocation uuid, org uuid, runner uuid, may_take boolean,
								 OUT reason text, OUT claimed uuid,
								 OUT fresh boolean, OUT skills boolean)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	r		agent.invocations;
	t		record;
	err		text;
BEGIN
	PERFORM 1 FROM agent.orgs o WHERE o.id = org FOR NO KEY UPDATE SKIP LOCKED;
	IF NOT FOUND THEN
		reason := 'org_locked';
		RETURN;
	END IF;
	BEGIN
		SELECT * INTO r FROM agent.invocations i
		 WHERE i.id = invocation AND i.state = 'approved'
		   FOR NO KEY UPDATE SKIP LOCKED;
		IF NOT FOUND THEN
			reason := 'row_locked';
			RETURN;
		END IF;
		IF NOT agent._try_audit_head(r.org_id) THEN
			reason := 'org_locked';
			RETURN;
		END IF;
		IF r.conversation_id IS NOT NULL THEN
			PERFORM 1 FROM agent.conversations cv WHERE cv.id = r.conversation_id
			   FOR NO KEY UPDATE SKIP LOCKED;
			IF NOT FOUND THEN
				reason := 'conversation_locked';
				RETURN;
			END IF;
		END IF;
		-- An image digest or an isolation class its approval does not
		-- cover raises (46_images.sql, 49_isolation.sql): the row fails
		-- below, uncharged.
		IF r.image_digest IS NOT NULL OR r.image_name IS NOT NULL THEN	-- (a host run: nothing to check)
			PERFORM agent._image_claimable(r, runner);
		END IF;
		PERFORM agent._isolation_claimable(r, runner);
		reason := agent._claim_gate(r, runner);
		IF reason IS NULL AND NOT may_take THEN
			reason := 'claimable';
		ELSIF reason IS NULL THEN
			t := agent._claim_take(r, runner);
			IF t.claimed IS NULL THEN
				reason := 'insufficient_credits';
			ELSE
				claimed := t.claimed;
				fresh := t.fresh;
				skills := t.skills;
			END IF;
		ELSIF reason IN ('not_approved', 'insufficient_credits', 'storage_quota_exhausted') THEN
			PERFORM agent._claim_refuse(r, reason);
		END IF;
	EXCEPTION
		WHEN lock_not_available THEN
			-- a lock not foreseen above (lock_timeout): not this row's
			-- fault; what the block took is free again
			reason := 'org_locked';
			claimed := NULL;
			fresh := NULL;
			skills := NULL;
		WHEN others THEN
			GET STACKED DIAGNOSTICS err = MESSAGE_TEXT;
			reason := 'failed';
			claimed := NULL;
			fresh := NULL;
			skills := NULL;
			IF r.id IS NOT NULL THEN
				PERFORM agent._claim_fail(r, err);
			END IF;
	END;
END
$$;

-- ---- the claim ---------------------------------------------------------------

-- Claim up to max_rows approved invocations for `runner` (agent.runner_claim
-- checked its identity and counted its free slots): each one the gate lets
-- through is charged, moved to provisioning and leased to the runner
-- (runner_id, a fresh lease_token and lease_expires_at, returned with the
-- row), in the runner's short claim transaction, which commits before any
-- jail starts.
--
-- Fairness.  Each org has at most its limit (agent._org_run_limit, and a
-- workspace its own) in flight, counted on every host together, and the
-- free slots go first to the orgs with the fewest runs in flight, then in
-- approval order: a backlog of one org never delays another org's run
-- beyond the next free slot.  An org's queue is looked at 64 deep per
-- claim; the query ranks what the gate will most likely let through
-- (agent._claim_gate decides, under the locks).  Within a conversation
-- runs are serial and in approval order.
--
-- The notified run first.  An approval's wake-up names its invocation
-- (agent._wake_runners), and the runner passes that name here: when it
-- heads the queue (no other org has approved work, and no earlier
-- approved run of its own org waits) it is tried alone, without reading
-- the queue.  A name is only a hint (any role may NOTIFY any channel): it
-- never puts a run ahead of another that the queue's order puts first.
--
-- Then the approved rows of orgs that cannot pay are refused, at most 100
-- a call, without taking a slot, each on the balance as it is, under the
-- balance row's lock (a grant may be committing right now: funded after
-- all, a later claim takes it).
CREATE FUNCTION agent._claim_invocations(max_rows integer, runner uuid, notified uuid)
	RETURNS TABLE (id uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean, has_skills boolean, lease_token uuid,
				   has_egress boolean, image_name text, image_digest text, isolation text)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c			record;
	one			record;
	r			agent.invocations;
	claimed		integer := 0;
	skip_orgs	uuid[] := '{}'::uuid[];		-- orgs locked elsewhere or at their limit
	v_live_since timestamptz;				-- a runner heartbeating since is live
BEGIN
	IF max_rows IS NULL OR max_rows < 0 THEN
		RAISE EXCEPTION 'max_rows must be a non-negative number' USING ERRCODE = 'invalid_parameter_value';
	END IF;
	-- (runs are claimed by runners only: agent.runner_claim passes its own)
	ASSERT runner IS NOT NULL, 'agent._claim_invocations needs the claiming runner';

	IF notified IS NOT NULL AND max_rows > 0 THEN
		SELECT i.id, i.org_id INTO c FROM agent.invocations i
		 WHERE i.id = notified AND i.state = 'approved'
		   AND NOT EXISTS (SELECT 1 FROM agent.invocations j
							WHERE j.state = 'approved' AND j.org_id < i.org_id)
		   AND NOT EXISTS (SELECT 1 FROM agent.invocations j
							WHERE j.state = 'approved' AND j.org_id > i.org_id)
		   AND NOT EXISTS (SELECT 1 FROM agent.invocations j
							WHERE j.state = 'approved' AND j.org_id = i.org_id
							  AND (j.approved_at, j.request_seq) < (i.approved_at, i.request_seq));
		IF FOUND THEN
			one := agent._claim_one(c.id, c.org_id, runner, true);
			IF one.reason IS NULL THEN
				claimed := claimed + 1;
				-- (the row as the claim left it: a statement after the claim's)
				SELECT * INTO r FROM agent.invocations i WHERE i.id = one.claimed;
				RETURN QUERY SELECT * FROM agent._claimed_row(r, one.fresh, one.skills);
			END IF;
			IF NOT EXISTS (SELECT 1 FROM agent.invocations i WHERE i.state = 'approved') THEN
				RETURN;
			END IF;
		END IF;
	END IF;

	v_live_since := now() - agent._runner_lease();
	FOR c IN
		WITH orgs AS (SELECT x AS org_id FROM agent._orgs_with_approved() x),
		org_info AS MATERIALIZED (	-- once per org: funded, its limit, its runs in flight
			SELECT o.org_id, agent._org_run_limit(o.org_id) AS org_limit,
				   (SELECT count(*) FROM agent.invocations j
					 WHERE j.org_id = o.org_id AND j.state IN ('provisioning', 'running')) AS org_load
			  FROM orgs o
			  JOIN agent.orgs og ON og.id = o.org_id
			  JOIN agent.plans p ON p.plan = og.plan
			  LEFT JOIN agent.credit_balances b ON b.org_id = o.org_id
			 WHERE coalesce(b.balance, 0) >= p.credits_per_invocation),
		queue AS (					-- the oldest approved rows of each org below its limit
			SELECT q.*, oi.org_limit, oi.org_load
			  FROM org_info oi
			  CROSS JOIN LATERAL (
					SELECT i.id, i.org_id, i.workspace_id, i.conversation_id, i.approved_at, i.request_seq
					  FROM agent.invocations i
					 WHERE i.state = 'approved' AND i.org_id = oi.org_id
					 ORDER BY i.approved_at, i.request_seq
					 LIMIT 64) q
			 WHERE oi.org_load < oi.org_limit),
		ws_load AS (				-- runs in flight per workspace of those orgs
			SELECT j.workspace_id, count(*) AS n
			  FROM agent.invocations j
			 WHERE j.state IN ('provisioning', 'running')
			   AND j.org_id IN (SELECT oi.org_id FROM org_info oi)
			 GROUP BY j.workspace_id),
		runnable AS (				-- first of its conversation, conversation idle
			SELECT q.*,
				   row_number() OVER (PARTITION BY q.conversation_id
									  ORDER BY q.approved_at, q.request_seq) AS conv_rank
			  FROM queue q),
		ranked AS (
			SELECT u.*,
				   row_number() OVER (PARTITION BY u.org_id ORDER BY u.approved_at, u.request_seq) AS org_rank,
				   row_number() OVER (PARTITION BY u.workspace_id ORDER BY u.approved_at, u.request_seq) AS ws_rank,
				   w.max_concurrent_runs AS ws_limit,
				   coalesce(l.n, 0) AS ws_load
			  FROM runnable u
			  JOIN agent.workspaces w ON w.id = u.workspace_id
			  LEFT JOIN ws_load l ON l.workspace_id = u.workspace_id
			 WHERE (u.conversation_id IS NULL
					OR (u.conv_rank = 1
						AND NOT EXISTS (SELECT 1 FROM agent.invocations j
										 WHERE j.conversation_id = u.conversation_id
										   AND j.state IN ('provisioning', 'running'))
						-- affinity (agent._claim_gate decides, under the locks)
						AND NOT EXISTS (SELECT 1 FROM agent.sessions s
										  JOIN agent.runners rn ON rn.id = s.runner_id
										 WHERE s.conversation_id = u.conversation_id
										   AND s.state = 'active'
										   AND s.runner_id <> runner
										   AND rn.state = 'active'
										   AND rn.last_heartbeat >= v_live_since))))
		SELECT k.id, k.org_id
		  FROM ranked k
		 WHERE k.org_load + k.org_rank <= k.org_limit
		   AND (k.ws_limit IS NULL OR k.ws_load + k.ws_rank <= k.ws_limit)
		 ORDER BY k.org_load + k.org_rank, k.approved_at, k.request_seq
	LOOP
		EXIT WHEN claimed >= max_rows;
		CONTINUE WHEN c.org_id = ANY (skip_orgs);
		one := agent._claim_one(c.id, c.org_id, runner, true);
		IF one.reason IS NULL THEN
			claimed := claimed + 1;
			SELECT * INTO r FROM agent.invocations i WHERE i.id = one.claimed;
			RETURN QUERY SELECT * FROM agent._claimed_row(r, one.fresh, one.skills);
		ELSIF one.reason IN ('org_locked', 'org_at_limit') THEN
			skip_orgs := skip_orgs || c.org_id;
		END IF;
	END LOOP;

	FOR c IN
		WITH orgs AS (SELECT x AS org_id FROM agent._orgs_with_approved() x),
		unfunded AS MATERIALIZED (
			SELECT o.org_id
			  FROM orgs o
			  JOIN agent.orgs og ON og.id = o.org_id
			  JOIN agent.plans p ON p.plan = og.plan
			  LEFT JOIN agent.credit_balances b ON b.org_id = o.org_id
			 WHERE coalesce(b.balance, 0) < p.credits_per_invocation)
		SELECT i.id, i.org_id
		  FROM unfunded u
		  JOIN agent.invocations i ON i.org_id = u.org_id AND i.state = 'approved'
		 ORDER BY i.approved_at, i.request_seq
		 LIMIT 100
	LOOP
		CONTINUE WHEN c.org_id = ANY (skip_orgs);
		PERFORM 1 FROM agent.credit_balances b WHERE b.org_id = c.org_id FOR UPDATE SKIP LOCKED;
		IF NOT FOUND AND EXISTS (SELECT 1 FROM agent.credit_balances b WHERE b.org_id = c.org_id) THEN
			skip_orgs := skip_orgs || c.org_id;
			CONTINUE;
		END IF;
		one := agent._claim_one(c.id, c.org_id, runner, false);
		IF one.reason = 'org_locked' THEN
			skip_orgs := skip_orgs || c.org_id;
		END IF;
	END LOOP;
END
$$;

-- A claimed row as agent._claim_invocations returns it.  (No SET clause:
-- a SQL function with one is never inlined and is planned again on every
-- call; this one is inlined into the claim's plan.  It names no table,
-- function or operator a search_path could change.)
CREATE FUNCTION agent._claimed_row(r agent.invocations, fresh boolean, skills boolean)
	RETURNS TABLE (id uuid, language text, code text, wall_time_s integer,
				   memory_mb integer, conversation_id uuid, session_id uuid,
				   fresh_session boolean, has_skills boolean, lease_token uuid,
				   has_egress boolean, image_name text, image_digest text, isolation text)
	LANGUAGE sql IMMUTABLE
AS $$
	-- (its egress policy file comes with the prepare step, 47_egress.sql)
	SELECT r.id, r.language, r.code, r.wall_time_s, r.memory_mb, r.conversation_id,
		   r.session_id, fresh, skills, r.lease_token, r.egress_policy IS NOT NULL,
		   r.image_name, r.image_digest, r.isolation
$$;

REVOKE ALL ON FUNCTION agent._orgs_with_approved(), agent._try_audit_head(uuid),
	agent._claim_gate(agent.invocations, uuid), agent._approved_hashes(agent.invocations),
	agent._claim_refuse(agent.invocations, text), agent._claim_take(agent.invocations, uuid),
	agent._claim_fail(agent.invocations, text),
	agent._claim_one(uuid, uuid, uuid, boolean),
	agent._claim_invocations(integer, uuid, uuid),
	agent._claimed_row(agent.invocations, boolean, boolean) FROM PUBLIC;
