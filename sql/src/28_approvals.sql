-- Approvals: a person approves or denies the card of a pending invocation;
-- cards left undecided expire.
--
-- Lock order, everywhere: the approval request, then its invocation, then
-- the org's audit head (taken by agent._audit()).  Two deciders of one card
-- queue on the card's row lock and the second finds it decided;
-- expire_pending_approvals() skips cards someone is deciding.

-- Lock a pending, unexpired card of the caller's workspace and the
-- invocation behind it (one statement, card first) or explain why not: the
-- invocation must still be waiting for this decision with code whose hash
-- is the card's (the card shows the invocation's code: one copy).  Also
-- returns the requester and the org's policy on self-approval.  Internal:
-- called only from the SECURITY DEFINER functions below.
--
-- The locks are FOR NO KEY UPDATE, not FOR UPDATE: a backend may hold them
-- in a transaction it keeps open, and FOR UPDATE would block the FOR KEY
-- SHARE locks that the foreign-key checks of other inserts (output, files,
-- tool calls, the ledger) take on the invocation.
CREATE FUNCTION agent._lock_pending_approval(approval uuid,
	OUT id uuid, OUT invocation_id uuid, OUT org_id uuid, OUT workspace_id uuid,
	OUT code_sha256 text, OUT requested_by text, OUT require_distinct_approver boolean)
	LANGUAGE plpgsql
AS $$
DECLARE
	v_status	text;
	v_expires	timestamptz;
	v_decided_by text;
	v_inv_code	text;
	v_inv_sha	text;
	v_inv_state text;
BEGIN
	IF approval IS NULL THEN
		RAISE EXCEPTION 'approval request id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF agent.current_org() IS NULL OR agent.current_workspace() IS NULL THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	-- Another tenant's card is indistinguishable from a missing one.
	SELECT a.id, a.invocation_id, a.org_id, a.workspace_id, a.code_sha256, a.status,
		   a.expires_at, a.decided_by, i.code, i.code_sha256, i.state,
		   i.requested_by, o.require_distinct_approver
	  INTO id, invocation_id, org_id, workspace_id, code_sha256, v_status,
		   v_expires, v_decided_by, v_inv_code, v_inv_sha, v_inv_state,
		   requested_by, require_distinct_approver
	  FROM agent.approval_requests a
	  JOIN agent.invocations i ON i.id = a.invocation_id
	  JOIN agent.orgs o ON o.id = a.org_id
	 WHERE a.id = approval AND a.org_id = agent.current_org()
	   AND a.workspace_id = agent.current_workspace()
	   FOR NO KEY UPDATE OF a, i;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'approval request % does not exist in the current workspace', approval
			USING ERRCODE = 'no_data_found';
	END IF;
	IF v_status = 'expired' OR (v_status = 'pending' AND v_expires <= now()) THEN
		RAISE EXCEPTION 'approval request % has expired', approval
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'It was not decided in time.',
				  HINT = 'Request the execution again.';
	END IF;
	IF v_status <> 'pending' THEN
		RAISE EXCEPTION 'approval request % has already been decided', approval
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It was %s by %s.', v_status, v_decided_by);
	END IF;
	-- The card shows the invocation's code and holds its hash; the code
	-- must still be what that hash says (no code at all is a mismatch too).
	IF v_inv_sha IS DISTINCT FROM code_sha256
	   OR agent.code_sha256(v_inv_code) IS DISTINCT FROM code_sha256 THEN
		RAISE EXCEPTION 'approval request % does not match the code of invocation %', id, invocation_id
			USING ERRCODE = 'data_corrupted',
				  DETAIL = 'The code was changed after the card was shown; it cannot be approved.';
	END IF;
	IF v_inv_state <> 'pending_approval' THEN
		RAISE EXCEPTION 'invocation % is no longer waiting for approval', invocation_id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It is %s.', v_inv_state);
	END IF;
END
$$;

-- Approve the card.  code_sha256, when given, is the hash of the code the
-- approver was shown; a different hash is refused, so an approval can never
-- cover code its approver did not see.  allow_further_runs: the approver
-- also allows further runs of the conversation, approved then by the
-- org's policy (once_per_conversation; agent._allow_further_runs,
-- 26_policies.sql).  Returns the invocation's id.
CREATE FUNCTION agent.approve(approval uuid, approver text, code_sha256 text DEFAULT NULL,
							  allow_further_runs boolean DEFAULT false)
	RETURNS uuid
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_card	record;
	v_egress text;
	v_inv	record;
	v_allowance uuid;
BEGIN
	PERFORM agent._require_person(approver, 'approver');
	IF allow_further_runs IS NULL THEN
		RAISE EXCEPTION 'allow_further_runs must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	v_card := agent._lock_pending_approval(approval);
	-- Four eyes: unless the org's policy says otherwise, the person who
	-- asked for the run cannot also let it run.
	IF v_card.require_distinct_approver
	   AND agent._person_key(approver) = agent._person_key(v_card.requested_by) THEN
		RAISE EXCEPTION 'cannot approve an execution request made by the same person'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = 'The organization requires the approver to be someone other than the requester.',
				  HINT = 'Ask another person to approve it; an administrator can change the policy with agent.set_require_distinct_approver().';
	END IF;
	IF code_sha256 IS NOT NULL AND lower(code_sha256) <> v_card.code_sha256 THEN
		RAISE EXCEPTION 'code hash does not match approval request %', approval
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'The approver was shown different code than the card holds.',
				  HINT = 'Reload the approval card and review the code again.';
	END IF;

	-- The card and its invocation in one statement.
	-- The approval is bound to the egress policy the card showed too
	-- (47_egress.sql): the invocation's frozen copy, by its hash; to its
	-- image's digest (46_images.sql); and to its isolation class
	-- (49_isolation.sql).
	SELECT i.egress_sha256, i.image_name, i.image_digest, i.isolation INTO v_inv
	  FROM agent.invocations i WHERE i.id = v_card.invocation_id;
	v_egress := v_inv.egress_sha256;
	WITH decided AS (
		UPDATE agent.approval_requests a
		   SET status = 'approved', decided_by = approver, decided_at = now(),
			   approved_code_sha256 = v_card.code_sha256,
			   approved_egress_sha256 = v_egress,
			   approved_image_digest = v_inv.image_digest,
			   approved_isolation = v_inv.isolation
		 WHERE a.id = v_card.id)
	UPDATE agent.invocations i
	   SET state = 'approved', approved_at = now()
	 WHERE i.id = v_card.invocation_id;
	IF allow_further_runs THEN
		v_allowance := agent._allow_further_runs(v_card.invocation_id, v_card.id, approver);
	END IF;
	-- The event, then the wake-up (the supervisor claims approved work when
	-- this transaction commits): one query, in that order.
	PERFORM agent._audit(v_card.org_id, v_card.workspace_id, 'approval.approved', v_card.invocation_id,
						 approver, jsonb_strip_nulls(jsonb_build_object('approval_id', v_card.id,
													  'code_sha256', v_card.code_sha256,
													  'egress_sha256', v_egress,
													  'image', v_inv.image_name,
													  'image_digest', v_inv.image_digest,
													  'allowance_id', v_allowance,
													  'isolation', CASE WHEN v_inv.isolation <> 'namespaces'
																		THEN v_inv.isolation END))),
			agent._wake_runners(v_card.invocation_id);
	-- The approval's event counts against the org's storage: past the
	-- quota the approval is refused (53400) and rolled back (the claim
	-- would refuse to start the run anyway).  A denial, an expiry, a
	-- cancel are kept past it (counted all the same).
	PERFORM agent._check_storage(v_card.org_id, 'the approval''s audit event');
	RETURN v_card.invocation_id;
END
$$;

-- Deny the card; final.  Returns the invocation's id.
CREATE FUNCTION agent.deny(approval uuid, approver text, reason text DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_card	record;
BEGIN
	PERFORM agent._require_person(approver, 'approver');
	PERFORM agent._check_text(reason, 'reason', 'reason');
	-- The requester may deny (withdraw) their own request: a denial runs
	-- nothing, and cancel() could end it anyway.
	v_card := agent._lock_pending_approval(approval);

	WITH decided AS (
		UPDATE agent.approval_requests a
		   SET status = 'denied', decided_by = approver, decided_at = now(),
			   decision_reason = reason
		 WHERE a.id = v_card.id)
	UPDATE agent.invocations i
	   SET state = 'denied', state_reason = coalesce(reason, 'denied by the approver')
	 WHERE i.id = v_card.invocation_id;
	PERFORM agent._audit(v_card.org_id, v_card.workspace_id, 'approval.denied', v_card.invocation_id,
						 approver, jsonb_build_object('approval_id', v_card.id,
													  'code_sha256', v_card.code_sha256,
													  'reason', reason));
	RETURN v_card.invocation_id;
END
$$;

-- Expire every card still pending at as_of (default: now) and its
-- invocation; returns how many.  For pg_cron and the owner; it acts on all
-- tenants.  Cards locked by a concurrent decision are skipped: that
-- decision wins, or the next run expires them.
CREATE FUNCTION agent.expire_pending_approvals(as_of timestamptz DEFAULT now())
	RETURNS integer
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	c	record;
	n	integer := 0;
BEGIN
	-- Orgs in a fixed order, so concurrent runs take audit heads in the
	-- same order.
	FOR c IN
		WITH due AS (
			SELECT a.id FROM agent.approval_requests a
			 WHERE a.status = 'pending' AND a.expires_at <= coalesce(as_of, now())
			   FOR NO KEY UPDATE SKIP LOCKED),
		expired AS (
			UPDATE agent.approval_requests a
			   SET status = 'expired', decided_at = now(),
				   decision_reason = 'not decided in time'
			  FROM due WHERE a.id = due.id
			RETURNING a.id, a.invocation_id, a.org_id, a.workspace_id, a.code_sha256,
					  a.expires_at)
		SELECT * FROM expired ORDER BY org_id, expires_at
	LOOP
		UPDATE agent.invocations i
		   SET state = 'expired', state_reason = 'approval not decided in time'
		 WHERE i.id = c.invocation_id AND i.state = 'pending_approval';
		PERFORM agent._audit(c.org_id, c.workspace_id, 'approval.expired', c.invocation_id,
							 'system', jsonb_build_object('approval_id', c.id,
														  'code_sha256', c.code_sha256,
														  'expires_at', c.expires_at));
		n := n + 1;
	END LOOP;
	RETURN n;
END
$$;

-- The card as the UI renders it, with what the run will cost and what the
-- org has (credits_cost, org_balance: read when the card is read; the
-- charge itself happens when the run is provisioned).
CREATE TYPE agent.approval_card AS (
	approval_id		uuid,
	invocation_id	uuid,
	status			text,
	title			text,
	agent_name		text,
	conversation_id uuid,
	language		text,
	runtime			text,
	risk_level		text,
	description		text,
	code			text,
	code_sha256		text,
	code_lines		integer,
	requested_by	text,
	created_at		timestamptz,
	expires_at		timestamptz,
	decided_by		text,
	decided_at		timestamptz,
	decision_reason text,
	credits_cost	integer,
	org_balance		bigint,
	-- what the run may reach (47_egress.sql): "api.github.com:443, ..." or
	-- "nothing (no network)", and the hash the approval binds
	egress_may_reach text,
	egress_sha256	text,
	-- the image its sandbox's root is built from (46_images.sql): "host",
	-- or its name and short digest ("data@1a2b3c4d5e6f"; runtime then is
	-- the interpreter its manifest lists), and the digest the approval binds
	image			text,
	image_digest	text,
	-- the approval policy (26_policies.sql): the policy that
	-- approved the run and the conversation's allowance it used (NULL: a
	-- person decides or decided), what the card says of them, and why a
	-- person is needed (NULL once a policy approved it)
	approval_policy_id uuid,
	allowance_id	uuid,
	approved_by_policy text,
	person_needed	text,
	-- the isolation class it runs in (49_isolation.sql): "namespaces" or
	-- "gvisor", which the approval binds
	isolation		text
);

-- Every card the caller may see (row-level security decides: a backend
-- its workspace's, an auditor every tenant's), as approval_card renders it.
-- The code and description are the invocation's (stored once); NULL once
-- retention pruned them (the hash stays).
CREATE VIEW agent.approval_cards WITH (security_invoker = true) AS
SELECT a.id AS approval_id, a.invocation_id, a.status,
	   format('%s wants to run %s code', coalesce(g.name, 'An agent'), a.language) AS title,
	   g.name AS agent_name, i.conversation_id, a.language, a.runtime, a.risk_level,
	   i.description, i.code, a.code_sha256,
	   array_length(regexp_split_to_array(rtrim(i.code, E'\n'), E'\n'), 1) AS code_lines,
	   a.requested_by, a.created_at, a.expires_at, a.decided_by, a.decided_at,
	   a.decision_reason, p.credits_per_invocation AS credits_cost,
	   coalesce(b.balance, 0) AS org_balance,
	   a.org_id, a.workspace_id,
	   agent.egress_may_reach(i.egress_policy) AS egress_may_reach, i.egress_sha256,
	   CASE WHEN i.image_name IS NULL THEN 'host'
			ELSE i.image_name || '@' || left(i.image_digest, 12) END AS image,
	   i.image_digest,
	   a.approval_policy_id, a.allowance_id,
	   CASE WHEN ap.id IS NOT NULL THEN
			format('policy %s (%s), set by %s at %s', ap.id, ap.mode, ap.set_by,
				   to_char(ap.set_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'))
			|| CASE WHEN al.id IS NOT NULL
					THEN format('; further runs allowed here by %s with approval %s', al.granted_by, al.approval_id)
					ELSE '' END END AS approved_by_policy,
	   agent._person_reason_text(a.person_reason) AS person_needed,
	   i.isolation
  FROM agent.approval_requests a
  JOIN agent.invocations i ON i.id = a.invocation_id
  LEFT JOIN agent.agents g ON g.id = i.agent_id
  LEFT JOIN agent.orgs o ON o.id = a.org_id
  LEFT JOIN agent.plans p ON p.plan = o.plan
  LEFT JOIN agent.credit_balances b ON b.org_id = a.org_id
  LEFT JOIN agent.approval_policies ap ON ap.id = a.approval_policy_id
  LEFT JOIN agent.conversation_allowances al ON al.id = a.allowance_id;
COMMENT ON VIEW agent.approval_cards IS
	'approval cards as the UI renders them, with the run''s cost and the org''s balance';

CREATE FUNCTION agent.approval_card(approval uuid) RETURNS agent.approval_card
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v agent.approval_card;
BEGIN
	IF approval IS NULL THEN
		RAISE EXCEPTION 'approval request id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT c.approval_id, c.invocation_id, c.status, c.title, c.agent_name, c.conversation_id,
		   c.language, c.runtime, c.risk_level, c.description, c.code, c.code_sha256,
		   c.code_lines, c.requested_by, c.created_at, c.expires_at, c.decided_by,
		   c.decided_at, c.decision_reason, c.credits_cost, c.org_balance,
		   c.egress_may_reach, c.egress_sha256, c.image, c.image_digest,
		   c.approval_policy_id, c.allowance_id, c.approved_by_policy, c.person_needed, c.isolation
	  INTO v
	  FROM agent.approval_cards c
	 WHERE c.approval_id = approval;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'approval request % does not exist', approval
			USING ERRCODE = 'no_data_found';
	END IF;
	RETURN v;
END
$$;

-- The cards of the current workspace still waiting for a decision, oldest
-- first: what an approver's inbox shows.  The workspace's approvals
-- channel (agent.approvals_channel()) says when to look again.
CREATE FUNCTION agent.pending_approvals() RETURNS SETOF agent.approval_card
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	PERFORM agent._require_tenant(true);
	RETURN QUERY
		SELECT c.approval_id, c.invocation_id, c.status, c.title, c.agent_name, c.conversation_id,
			   c.language, c.runtime, c.risk_level, c.description, c.code, c.code_sha256,
			   c.code_lines, c.requested_by, c.created_at, c.expires_at, c.decided_by,
			   c.decided_at, c.decision_reason, c.credits_cost, c.org_balance,
			   c.egress_may_reach, c.egress_sha256, c.image, c.image_digest,
			   c.approval_policy_id, c.allowance_id, c.approved_by_policy, c.person_needed, c.isolation
		  FROM agent.approval_cards c
		 WHERE c.status = 'pending' AND c.expires_at > now()
		   AND c.org_id = agent.current_org() AND c.workspace_id = agent.current_workspace()
		 ORDER BY c.created_at, c.approval_id;
END
$$;
COMMENT ON FUNCTION agent.pending_approvals() IS
	'the current workspace''s cards waiting for a decision, oldest first';

-- ---- the approvals channel -------------------------------------------------

-- Each workspace has a NOTIFY channel on which request_execution()
-- announces every new card at commit (payload: the card's id, a hint to
-- look, never the card).  Like an invocation's output channel it is named
-- after a random token that only the workspace's tenant can learn
-- (agent.approvals_channel()); other workspaces of the same org cannot (the
-- tokens are in a table no tenant role reads).
CREATE TABLE agent.workspace_channels (
	workspace_id	uuid PRIMARY KEY REFERENCES agent.workspaces (id),
	token			uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid()
);
COMMENT ON TABLE agent.workspace_channels IS
	'the random token each workspace''s approvals channel is named after';
ALTER TABLE agent.workspace_channels ENABLE ROW LEVEL SECURITY;
CREATE POLICY auditor_read ON agent.workspace_channels FOR SELECT TO agent_auditor USING (true);

CREATE FUNCTION agent._workspaces_make_channel() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	INSERT INTO agent.workspace_channels (workspace_id) VALUES (NEW.id)
		ON CONFLICT (workspace_id) DO NOTHING;
	RETURN NULL;
END
$$;
CREATE TRIGGER workspaces_make_channel
	AFTER INSERT ON agent.workspaces
	FOR EACH ROW EXECUTE FUNCTION agent._workspaces_make_channel();

-- The channel of the current workspace.
CREATE FUNCTION agent.approvals_channel() RETURNS text
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_token uuid;
BEGIN
	PERFORM agent._require_tenant(true);
	SELECT c.token INTO v_token
	  FROM agent.workspace_channels c
	  JOIN agent.workspaces w ON w.id = c.workspace_id
	 WHERE c.workspace_id = agent.current_workspace() AND w.org_id = agent.current_org();
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', agent.current_workspace()
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the tenant set with agent.set_tenant().';
	END IF;
	RETURN 'sandbox_approvals_' || pg_catalog.replace(v_token::text, '-', '');
END
$$;
COMMENT ON FUNCTION agent.approvals_channel() IS
	'the LISTEN channel on which new approval cards of the current workspace are announced (its tenant only)';

-- For the supervisor, just before it runs an invocation: true only when
-- its approval is approved and bound to the hash of the code as it is now.
CREATE FUNCTION agent.approved_code_matches(invocation uuid) RETURNS boolean
	LANGUAGE sql STABLE
	RETURN EXISTS (
		SELECT 1 FROM agent.invocations i
		  JOIN agent.approval_requests a ON a.id = i.approval_id AND a.invocation_id = i.id
		 WHERE i.id = invocation
		   AND a.status = 'approved'
		   AND a.approved_code_sha256 = agent.code_sha256(i.code)
		   AND i.code_sha256 = a.approved_code_sha256);
