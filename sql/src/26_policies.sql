-- Approval policies (issue 28; docs/control-plane.md, "Approval
-- policies"): when a run waits for a person and when the org's own rule
-- approves it.  Owns the policy as data (an org's mode and conditions, and
-- the admin's narrowing of one agent), a conversation's allowance (the
-- approver's "allow further runs here"), the one decision a request gets
-- (agent._approval_decision), the approval a policy makes in the
-- request's own transaction (agent._approve_by_policy) and what the card
-- says about either.  request_execution (25_request.sql) calls the two,
-- approve (28_approvals.sql) calls agent._allow_further_runs; nothing else
-- of the run's path knows about policies: an automatic approval leaves the
-- card and the invocation exactly as a person's does, and the claim checks
-- it the same way (its event is approval.auto instead of approval.approved).
--
-- Semantics (stated once, here and in docs/control-plane.md):
--   * modes, from narrow to wide: every_run (a person decides every run:
--     the default, an org without a policy), once_per_conversation (a
--     person decides the first run of a conversation and may allow
--     further runs there), automatic (the policy approves);
--   * an org's policy is the admin's (agent_admin), and so is an agent's
--     narrowing: its mode is the org's or narrower (a wider one is refused)
--     and the narrower of the two applies if the org narrows later; the
--     conditions of both apply (languages, no network, maximum wall time
--     and memory); the backend only reads them;
--   * a policy never widens what a run may do: it decides only a request
--     that every rule of the org already allowed (plan, toggles, model,
--     language, code size, image, credits, pending cap, storage quota);
--   * an allowance holds for runs of its conversation in the language of
--     the run a person approved with it, on the same image, whose network
--     reach is within what that person saw, while the policy under which
--     it was given is the agent's current one; revoked, it is gone;
--   * a policy changes, and an allowance is revoked, only under the org's
--     audit head (agent._lock_storage first), and a request reads them
--     only once it holds that head: a request and such a change are
--     ordered, and the audit chain shows the order (docs/control-plane.md:
--     a request that commits first is approved by the policy, one that
--     comes after a revocation waits for a person).  An allowance is
--     given under approve's own locks (the card, then the head, as every
--     decision): a request that cannot see it yet only waits for a person.
--
-- Policies and allowances are history: a change ends the current row
-- (ended_at, revoked_at) and never rewrites it, so an approval names the
-- exact version that made it.

CREATE TABLE agent.approval_policies (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	-- NULL: the org's own; else the admin's narrowing of one agent
	workspace_id	uuid,
	agent_id		uuid,
	mode			text NOT NULL CHECK (mode IN ('every_run', 'once_per_conversation', 'automatic')),
	-- conditions of an approval without a person; NULL: none
	languages		text[] CHECK (languages <@ ARRAY['python', 'node', 'shell']
								  AND cardinality(languages) BETWEEN 1 AND 3),
	no_network		boolean NOT NULL DEFAULT false,
	max_wall_time_s integer CHECK (max_wall_time_s > 0),
	max_memory_mb	integer CHECK (max_memory_mb > 0),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	-- when it stopped applying (replaced or removed), and by whom
	ended_at		timestamptz,
	ended_by		text,
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	CHECK ((agent_id IS NULL) = (workspace_id IS NULL)),
	CHECK ((ended_at IS NULL) = (ended_by IS NULL))
);
COMMENT ON TABLE agent.approval_policies IS
	'approval modes and conditions an org''s admin set, for the org or narrowed for one agent (docs/control-plane.md)';
-- The current policy of the org and of each agent.
CREATE UNIQUE INDEX approval_policies_current_idx ON agent.approval_policies (org_id, agent_id)
	NULLS NOT DISTINCT WHERE ended_at IS NULL;

-- "Allow further runs here": given by a person with the approval of a run
-- of the conversation, under the policy current then (once_per_conversation).
CREATE TABLE agent.conversation_allowances (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid NOT NULL,
	approval_id		uuid NOT NULL UNIQUE REFERENCES agent.approval_requests (id),
	policy_id		uuid NOT NULL REFERENCES agent.approval_policies (id),
	-- what the person saw: the run's language, image and egress policy
	language		text NOT NULL,
	image_digest	text,
	egress_policy	jsonb,
	egress_sha256	text,
	granted_by		text NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT now(),
	revoked_at		timestamptz,
	revoked_by		text,
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	CHECK ((revoked_at IS NULL) = (revoked_by IS NULL))
);
COMMENT ON TABLE agent.conversation_allowances IS
	'further runs of a conversation a person allowed with an approval (once_per_conversation)';
CREATE INDEX conversation_allowances_live_idx ON agent.conversation_allowances (conversation_id)
	WHERE revoked_at IS NULL;

-- The card's links (columns in 15_invocations.sql).
ALTER TABLE agent.approval_requests
	ADD CONSTRAINT approval_requests_policy_fkey FOREIGN KEY (approval_policy_id)
		REFERENCES agent.approval_policies (id),
	ADD CONSTRAINT approval_requests_allowance_fkey FOREIGN KEY (allowance_id)
		REFERENCES agent.conversation_allowances (id);

-- History is never rewritten: a policy may only be ended, an allowance
-- only revoked, once.
CREATE FUNCTION agent._approval_history_guard() RETURNS trigger
	LANGUAGE plpgsql
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_old	jsonb := to_jsonb(OLD);
	v_new	jsonb := to_jsonb(NEW);
	v_end	text[] := CASE TG_TABLE_NAME WHEN 'approval_policies' THEN ARRAY['ended_at', 'ended_by']
									 ELSE ARRAY['revoked_at', 'revoked_by'] END;
BEGIN
	IF (v_old - v_end) IS DISTINCT FROM (v_new - v_end)
	   OR v_old ->> v_end[1] IS NOT NULL OR v_new ->> v_end[1] IS NULL THEN
		RAISE EXCEPTION 'cannot change % %', replace(TG_TABLE_NAME, '_', ' '), OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'Approval policies and allowances are history: a change ends the current one and makes a new one.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER approval_policies_guard
	BEFORE UPDATE ON agent.approval_policies
	FOR EACH ROW EXECUTE FUNCTION agent._approval_history_guard();
CREATE TRIGGER conversation_allowances_guard
	BEFORE UPDATE ON agent.conversation_allowances
	FOR EACH ROW EXECUTE FUNCTION agent._approval_history_guard();

-- ---- the rule ----------------------------------------------------------------

-- How wide a mode is: 0 every_run, 1 once_per_conversation, 2 automatic.
CREATE FUNCTION agent._approval_mode_rank(mode text) RETURNS integer
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN CASE mode WHEN 'every_run' THEN 0 WHEN 'once_per_conversation' THEN 1
					 WHEN 'automatic' THEN 2 END;

-- The policy that applies to an agent now: the narrower mode of its org's
-- and its own (no row: every_run for the org, the org's for the agent),
-- the row that sets that mode (the agent's when both do), and the
-- conditions of both together (NULL: no condition).
CREATE FUNCTION agent._approval_policy(org uuid, agent_id uuid,
	OUT mode text, OUT policy_id uuid, OUT set_by text, OUT set_at timestamptz,
	OUT org_policy_id uuid, OUT agent_policy_id uuid, OUT languages text[],
	OUT no_network boolean, OUT max_wall_time_s integer, OUT max_memory_mb integer)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	o	agent.approval_policies;
	a	agent.approval_policies;
BEGIN
	SELECT * INTO o FROM agent.approval_policies p
	 WHERE p.org_id = org AND p.agent_id IS NULL AND p.ended_at IS NULL;
	SELECT * INTO a FROM agent.approval_policies p
	 WHERE p.org_id = org AND p.agent_id = _approval_policy.agent_id AND p.ended_at IS NULL;
	org_policy_id := o.id;
	agent_policy_id := a.id;
	mode := coalesce(o.mode, 'every_run');
	policy_id := o.id;
	set_by := o.set_by;
	set_at := o.set_at;
	IF a.id IS NOT NULL AND agent._approval_mode_rank(a.mode) <= agent._approval_mode_rank(mode) THEN
		mode := a.mode;
		policy_id := a.id;
		set_by := a.set_by;
		set_at := a.set_at;
	END IF;
	languages := CASE WHEN o.languages IS NULL THEN a.languages
					  WHEN a.languages IS NULL THEN o.languages
					  ELSE ARRAY(SELECT x FROM unnest(o.languages) x
								  WHERE x = ANY (a.languages) ORDER BY x) END;
	no_network := coalesce(o.no_network, false) OR coalesce(a.no_network, false);
	max_wall_time_s := least(o.max_wall_time_s, a.max_wall_time_s);
	max_memory_mb := least(o.max_memory_mb, a.max_memory_mb);
END
$$;

-- Whether every destination the egress policy `inner_policy` admits is
-- admitted by `outer_policy`: each rule of the inner has a rule of the
-- outer with the same host pattern (or CIDR) whose ports include its
-- ports and whose secrets (48_secrets.sql: id, name, header) include its
-- secrets (a secret put into a host's requests is reach too: what the
-- run can do there), and none of its per-run limits is higher.  No network (NULL) is
-- within every policy; nothing else is within no network.  Patterns are
-- compared as written ("*.example.com" does not cover "api.example.com"
-- here): a reach that is not plainly the same or less is wider.
CREATE FUNCTION agent._egress_within(inner_policy jsonb, outer_policy jsonb) RETURNS boolean
	LANGUAGE sql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT CASE
		WHEN inner_policy IS NULL THEN true
		WHEN outer_policy IS NULL THEN false
		ELSE NOT EXISTS (
				SELECT 1 FROM jsonb_array_elements(coalesce(inner_policy -> 'rules', '[]')) i
				 WHERE NOT EXISTS (
						SELECT 1 FROM jsonb_array_elements(coalesce(outer_policy -> 'rules', '[]')) o
						 WHERE (o -> 'host') IS NOT DISTINCT FROM (i -> 'host')
						   AND (o -> 'cidr') IS NOT DISTINCT FROM (i -> 'cidr')
						   AND (o -> 'ports') @> (i -> 'ports')
						   AND coalesce(o -> 'secrets', '[]') @> coalesce(i -> 'secrets', '[]')))
			 AND NOT EXISTS (
				SELECT 1 FROM (VALUES ('connections'), ('bytes_up'), ('bytes_down')) k(limit_name)
				 WHERE coalesce((inner_policy -> 'limits' ->> k.limit_name)::numeric, 0)
					   > coalesce((outer_policy -> 'limits' ->> k.limit_name)::numeric, 0))
		END
$$;

-- The one decision a request gets: approved by the policy (person_reason
-- NULL) or decided by a person, and why (a code: agent._person_reason_text).
-- For the request of `language` (NULL: any, for approval_policy_of) on the
-- image digest `image_digest` with these limits (NULL: the server's
-- defaults), in `conversation_id` (NULL: none) of the agent.  Reads the
-- run's effective egress policy (agent._effective_egress, what the
-- invocation's trigger copies) only when the policy could approve, and
-- returns its hash: the approval is fenced on it (agent._approve_by_policy).
-- `event` is the approval.auto event's details (approval_id and
-- code_sha256 are the request's, NULL for a question).  The caller holds
-- the org's audit head (request_execution), or only asks (approval_policy_of).
CREATE FUNCTION agent._approval_decision(org uuid, agent_id uuid, conversation_id uuid,
	language text, image_name text, image_digest text, wall_time_s integer, memory_mb integer,
	approval_id uuid, code_sha256 text,
	OUT mode text, OUT policy_id uuid, OUT allowance_id uuid, OUT egress_sha256 text,
	OUT person_reason text, OUT event jsonb)
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	p		record;
	al		agent.conversation_allowances;
	v_egress jsonb;
	v_near	integer := 0;		-- how close the nearest allowance came
	v_best	agent.conversation_allowances;
BEGIN
	SELECT * INTO p FROM agent._approval_policy(org, agent_id) x;
	mode := p.mode;
	policy_id := p.policy_id;
	IF p.mode = 'every_run' THEN
		person_reason := CASE WHEN p.policy_id IS NOT NULL AND p.policy_id = p.agent_policy_id
							  THEN 'agent_every_run' ELSE 'every_run' END;
		RETURN;
	END IF;
	IF language IS NOT NULL AND p.languages IS NOT NULL AND NOT language = ANY (p.languages) THEN
		person_reason := 'language';
		RETURN;
	END IF;
	IF p.max_wall_time_s < coalesce(wall_time_s, (agent._run_limits()).default_wall_time_s) THEN
		person_reason := 'wall_time';
		RETURN;
	END IF;
	IF p.max_memory_mb < coalesce(memory_mb, (agent._run_limits()).default_memory_mb) THEN
		person_reason := 'memory';
		RETURN;
	END IF;
	IF p.mode = 'once_per_conversation' AND conversation_id IS NULL THEN
		person_reason := 'no_conversation';
		RETURN;
	END IF;
	v_egress := agent._effective_egress(org, agent_id, conversation_id);
	egress_sha256 := agent._egress_sha256(v_egress);
	IF p.no_network AND v_egress IS NOT NULL THEN
		person_reason := 'network';
		RETURN;
	END IF;
	IF p.mode = 'once_per_conversation' THEN
		-- The newest live allowance of this conversation, given under the
		-- policy that applies now, that covers the run; else the reason of
		-- the one that came nearest.
		FOR al IN SELECT * FROM agent.conversation_allowances c
				   WHERE c.conversation_id = _approval_decision.conversation_id
					 AND c.org_id = org AND c.agent_id = _approval_decision.agent_id
					 AND c.revoked_at IS NULL AND c.policy_id = p.policy_id
				   ORDER BY c.granted_at DESC, c.id LOOP
			IF language IS NOT NULL AND al.language <> language THEN
				CONTINUE;
			ELSIF v_near < 1 THEN
				v_near := 1;
			END IF;
			IF al.image_digest IS DISTINCT FROM image_digest THEN
				CONTINUE;
			ELSIF v_near < 2 THEN
				v_near := 2;
			END IF;
			IF NOT agent._egress_within(v_egress, al.egress_policy) THEN
				CONTINUE;
			END IF;
			v_best := al;
			EXIT;
		END LOOP;
		IF v_best.id IS NULL THEN
			person_reason := CASE v_near WHEN 0 THEN
									CASE WHEN EXISTS (SELECT 1 FROM agent.conversation_allowances c
													   WHERE c.conversation_id = _approval_decision.conversation_id
														 AND c.revoked_at IS NULL AND c.policy_id = p.policy_id)
										 THEN 'allowance_language' ELSE 'first_run' END
								WHEN 1 THEN 'allowance_image' ELSE 'allowance_reach' END;
			RETURN;
		END IF;
		allowance_id := v_best.id;
	END IF;
	event := jsonb_strip_nulls(jsonb_build_object(
		'approval_id', approval_id, 'code_sha256', code_sha256, 'egress_sha256', egress_sha256,
		'image', image_name, 'image_digest', image_digest,
		'mode', p.mode, 'policy_id', p.policy_id, 'policy_set_by', p.set_by,
		'policy_set_at', p.set_at, 'org_policy_id', p.org_policy_id,
		'agent_policy_id', p.agent_policy_id, 'allowance_id', v_best.id,
		'allowance_approval_id', v_best.approval_id, 'allowance_granted_by', v_best.granted_by));
END
$$;

-- What a reason code says, as the card shows it (the one list of codes).
CREATE FUNCTION agent._person_reason_text(code text) RETURNS text
	LANGUAGE sql IMMUTABLE PARALLEL SAFE
	RETURN CASE code
		WHEN 'every_run' THEN 'the organization''s approval policy asks a person for every run'
		WHEN 'agent_every_run' THEN 'the agent''s approval policy asks a person for every run'
		WHEN 'language' THEN 'the approval policy does not cover runs in this language'
		WHEN 'wall_time' THEN 'the run''s wall time is over the approval policy''s limit'
		WHEN 'memory' THEN 'the run''s memory is over the approval policy''s limit'
		WHEN 'network' THEN 'the approval policy covers only runs without network reach'
		WHEN 'no_conversation' THEN 'once per conversation: a run outside a conversation needs a person'
		WHEN 'first_run' THEN 'once per conversation: nobody has allowed further runs in this conversation'
		WHEN 'allowance_language' THEN 'the runs allowed in this conversation are in another language'
		WHEN 'allowance_image' THEN 'the runs allowed in this conversation use another image'
		WHEN 'allowance_reach' THEN 'the run may reach more than the person who allowed further runs here saw'
		WHEN 'egress_changed' THEN 'the network reach changed while the run was requested'
	END;

-- The approval a policy makes, in request_execution's transaction: the
-- card and its invocation are already written approved by the policy, in
-- one insert (25_request.sql: the code's hash, the invocation's egress
-- hash, image digest and isolation class bound, decided_by 'policy', a
-- reserved name no person can be called, the policy and allowance that
-- made it, approved_at, fenced on the egress hash the decision judged).
-- This reads them back, refusing a pair that is not exactly that (a bug
-- of ours), then writes the event, approval.auto (actor 'policy', `event`
-- as the decision made it), and the runners' wake-up at commit.
CREATE FUNCTION agent._approve_by_policy(invocation uuid, approval uuid, event jsonb)
	RETURNS void
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v	record;
BEGIN
	SELECT i.org_id, i.workspace_id, i.isolation INTO v
	  FROM agent.invocations i
	  JOIN agent.approval_requests a ON a.id = i.approval_id AND a.invocation_id = i.id
	 WHERE i.id = invocation AND i.approval_id = approval AND i.state = 'approved'
	   AND i.approved_at IS NOT NULL
	   AND a.status = 'approved' AND a.decided_by = 'policy'
	   AND a.approved_code_sha256 = i.code_sha256
	   AND a.approved_egress_sha256 IS NOT DISTINCT FROM i.egress_sha256
	   AND a.approved_isolation = i.isolation;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'invocation % has no card its approval policy approved', invocation;	-- a bug of ours
	END IF;
	-- (the class, as approval.approved has it: only when not the default)
	PERFORM agent._audit(v.org_id, v.workspace_id, 'approval.auto', invocation, 'policy',
						 CASE WHEN v.isolation <> 'namespaces'
							  THEN event || jsonb_build_object('isolation', v.isolation) ELSE event END),
			agent._wake_runners(invocation);
END
$$;

-- approve(..., allow_further_runs => true): the allowance the approver
-- gives with the approval of a run (the caller, agent.approve, has
-- approved it and checked four eyes): further runs of its conversation in
-- its language, on its image, within the egress policy the approver saw,
-- under the policy that applies now, which must be once_per_conversation
-- (42501 otherwise: the approver cannot give what the org's policy does
-- not).  Returns its id.
CREATE FUNCTION agent._allow_further_runs(invocation uuid, approval uuid, approver text)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	r		agent.invocations;
	p		record;
	v_id	uuid;
BEGIN
	SELECT * INTO STRICT r FROM agent.invocations i WHERE i.id = invocation;
	IF r.conversation_id IS NULL THEN
		RAISE EXCEPTION 'a run outside a conversation cannot allow further runs'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'allow_further_runs applies to the conversation of the run approved; approve without it.';
	END IF;
	SELECT * INTO p FROM agent._approval_policy(r.org_id, r.agent_id) x;
	IF p.mode <> 'once_per_conversation' THEN
		RAISE EXCEPTION 'the approval policy of this agent does not let an approver allow further runs'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = format('Its mode is %s; further runs can be allowed only under once_per_conversation.', p.mode),
				  HINT = 'Approve without allow_further_runs; an administrator sets the mode with agent.set_approval_policy().';
	END IF;
	INSERT INTO agent.conversation_allowances AS c
		(org_id, workspace_id, agent_id, conversation_id, approval_id, policy_id, language,
		 image_digest, egress_policy, egress_sha256, granted_by)
	VALUES (r.org_id, r.workspace_id, r.agent_id, r.conversation_id, approval, p.policy_id,
			r.language, r.image_digest, r.egress_policy, r.egress_sha256, approver)
	RETURNING c.id INTO v_id;
	RETURN v_id;
END
$$;

-- ---- the admin's API ------------------------------------------------------------

-- The agent an admin (or a backend: its workspace only) names, or P0002.
CREATE FUNCTION agent._policy_agent(agent uuid, admin boolean) RETURNS agent.agents
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	g	agent.agents;
BEGIN
	IF agent IS NULL THEN
		RAISE EXCEPTION 'agent must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO g FROM agent.agents a
	 WHERE a.id = agent AND a.org_id = agent.current_org()
	   AND (a.workspace_id = agent.current_workspace()
			OR (admin AND agent.current_workspace() IS NULL));
	IF NOT FOUND THEN
		RAISE EXCEPTION 'agent % does not exist', agent
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	RETURN g;
END
$$;

-- Set the approval policy of the current org (agent NULL) or narrow one
-- of its agents (agent_admin).  Replaces the current one (which ends);
-- the same policy again changes nothing.  Returns the id of the policy in
-- force.  An agent's mode may be its org's or narrower (42501 otherwise).
CREATE FUNCTION agent.set_approval_policy(mode text, actor text, agent uuid DEFAULT NULL,
										  languages text[] DEFAULT NULL,
										  no_network boolean DEFAULT false,
										  max_wall_time_s integer DEFAULT NULL,
										  max_memory_mb integer DEFAULT NULL)
	RETURNS uuid
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	g		agent.agents;
	v_langs text[];
	v_lim	record;
	cur		agent.approval_policies;
	v_org_mode text;
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	IF mode IS NULL OR no_network IS NULL THEN
		RAISE EXCEPTION 'mode and no_network must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF agent._approval_mode_rank(mode) IS NULL THEN
		RAISE EXCEPTION 'invalid approval mode "%"', agent._shown(mode)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use every_run, once_per_conversation or automatic.';
	END IF;
	IF languages IS NOT NULL THEN
		IF array_ndims(languages) IS DISTINCT FROM 1 OR array_position(languages, NULL) IS NOT NULL THEN
			RAISE EXCEPTION 'invalid languages for an approval policy'
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = 'A policy lists one or more of python, node and shell (or bash), or NULL for any.';
		END IF;
		v_langs := ARRAY(SELECT DISTINCT CASE WHEN x = 'bash' THEN 'shell' ELSE x END
						   FROM unnest(languages) x ORDER BY 1);
		IF NOT v_langs <@ ARRAY['python', 'node', 'shell'] THEN
			RAISE EXCEPTION 'invalid languages for an approval policy'
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = 'A policy lists one or more of python, node and shell (or bash), or NULL for any.';
		END IF;
	END IF;
	SELECT * INTO v_lim FROM agent._request_limits() l;
	IF max_wall_time_s NOT BETWEEN 1 AND v_lim.max_wall_time_s THEN
		RAISE EXCEPTION 'wall time limit % s is out of range', max_wall_time_s
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('It must be between 1 and %s seconds (sandbox.max_wall_time).', v_lim.max_wall_time_s);
	END IF;
	IF max_memory_mb NOT BETWEEN 1 AND v_lim.max_memory_mb THEN
		RAISE EXCEPTION 'memory limit % MB is out of range', max_memory_mb
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('It must be between 1 and %s MB (sandbox.max_memory).', v_lim.max_memory_mb);
	END IF;
	IF agent IS NOT NULL THEN
		g := agent._policy_agent(agent, true);
	END IF;
	-- The org's audit head first: a request reads policies only once it
	-- holds it, so the two are ordered (the header).
	PERFORM agent._lock_storage(v_org);
	SELECT * INTO cur FROM agent.approval_policies p
	 WHERE p.org_id = v_org AND p.agent_id IS NOT DISTINCT FROM g.id AND p.ended_at IS NULL;
	IF g.id IS NOT NULL THEN
		v_org_mode := coalesce((SELECT p.mode FROM agent.approval_policies p
								 WHERE p.org_id = v_org AND p.agent_id IS NULL AND p.ended_at IS NULL),
							   'every_run');
		IF agent._approval_mode_rank(mode) > agent._approval_mode_rank(v_org_mode) THEN
			RAISE EXCEPTION 'an agent''s approval policy cannot be wider than its organization''s'
				USING ERRCODE = 'insufficient_privilege',
					  DETAIL = format('The organization''s mode is %s; an agent''s may be that or narrower (every_run, once_per_conversation, automatic, from narrow to wide).', v_org_mode),
					  HINT = 'Set the organization''s policy first: agent.set_approval_policy(mode, actor).';
		END IF;
	END IF;
	IF cur.id IS NOT NULL
	   AND (cur.mode, cur.languages, cur.no_network, cur.max_wall_time_s, cur.max_memory_mb)
		   IS NOT DISTINCT FROM (mode, v_langs, no_network, max_wall_time_s, max_memory_mb) THEN
		RETURN cur.id;
	END IF;
	UPDATE agent.approval_policies p SET ended_at = now(), ended_by = actor WHERE p.id = cur.id;
	INSERT INTO agent.approval_policies AS p
		(org_id, workspace_id, agent_id, mode, languages, no_network, max_wall_time_s,
		 max_memory_mb, set_by)
	VALUES (v_org, g.workspace_id, g.id, mode, v_langs, no_network, max_wall_time_s,
			max_memory_mb, actor)
	RETURNING p.id INTO v_id;
	PERFORM agent._audit(v_org, g.workspace_id, 'approval_policy.set', NULL, actor,
		jsonb_strip_nulls(jsonb_build_object('policy_id', v_id, 'replaces', cur.id,
			'agent_id', g.id, 'mode', mode, 'languages', v_langs, 'no_network', no_network,
			'max_wall_time_s', max_wall_time_s, 'max_memory_mb', max_memory_mb)));
	-- (every_run only takes away: never refused for the storage quota)
	IF mode <> 'every_run' THEN
		PERFORM agent._check_storage(v_org, 'the approval policy''s audit event');
	END IF;
	RETURN v_id;
END
$$;
COMMENT ON FUNCTION agent.set_approval_policy(text, text, uuid, text[], boolean, integer, integer) IS
	'org policy: the approval mode and conditions of the current org, or an agent''s narrowing (agent_admin); returns the policy''s id';

-- End the current org's policy (agent NULL: back to every_run) or an
-- agent's narrowing (the agent follows its org's again), agent_admin.
-- True when there was one.  Auto-approval under it stops at once; cards
-- pending stay pending and runs it approved stay approved.
CREATE FUNCTION agent.remove_approval_policy(actor text, agent uuid DEFAULT NULL)
	RETURNS boolean
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_org	uuid := agent.current_org();
	g		agent.agents;
	v_id	uuid;
BEGIN
	PERFORM agent._require_tenant(false);
	PERFORM agent._require_person(actor, 'actor');
	IF agent IS NOT NULL THEN
		g := agent._policy_agent(agent, true);
	END IF;
	PERFORM agent._lock_storage(v_org);		-- (as set_approval_policy)
	UPDATE agent.approval_policies p SET ended_at = now(), ended_by = actor
	 WHERE p.org_id = v_org AND p.agent_id IS NOT DISTINCT FROM g.id AND p.ended_at IS NULL
	RETURNING p.id INTO v_id;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM agent._audit(v_org, g.workspace_id, 'approval_policy.removed', NULL, actor,
						 jsonb_strip_nulls(jsonb_build_object('policy_id', v_id, 'agent_id', g.id)));
	-- (removing an agent's narrowing may widen what its runs get)
	IF g.id IS NOT NULL THEN
		PERFORM agent._check_storage(v_org, 'the approval policy''s audit event');
	END IF;
	RETURN true;
END
$$;
COMMENT ON FUNCTION agent.remove_approval_policy(text, uuid) IS
	'org policy: end the current org''s approval policy (every_run again) or an agent''s narrowing (agent_admin)';

-- Revoke every live allowance of a conversation (the backend, for its
-- workspace; the admin, for its org): its further runs need a person
-- again, at once.  Returns how many were revoked.
CREATE FUNCTION agent.revoke_conversation_allowance(conversation uuid, actor text)
	RETURNS integer
	LANGUAGE plpgsql VOLATILE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_caller name := agent._outer_role();	-- the role outside this function
	v_admin	boolean;
	c		agent.conversations;
	v_ids	uuid[];
BEGIN
	v_admin := pg_catalog.pg_has_role(v_caller, 'agent_admin', 'USAGE')
		OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller);
	PERFORM agent._require_tenant(NOT v_admin);
	PERFORM agent._require_person(actor, 'actor');
	IF conversation IS NULL THEN
		RAISE EXCEPTION 'conversation must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT * INTO c FROM agent.conversations x
	 WHERE x.id = conversation AND x.org_id = agent.current_org()
	   AND (x.workspace_id = agent.current_workspace()
			OR (v_admin AND agent.current_workspace() IS NULL));
	IF NOT FOUND THEN
		RAISE EXCEPTION 'conversation % does not exist', conversation
			USING ERRCODE = 'no_data_found',
				  HINT = 'Check the id and that the tenant set with agent.set_tenant() owns it.';
	END IF;
	PERFORM agent._lock_storage(c.org_id);		-- (as set_approval_policy)
	WITH revoked AS (
		UPDATE agent.conversation_allowances x SET revoked_at = now(), revoked_by = actor
		 WHERE x.conversation_id = c.id AND x.revoked_at IS NULL
		RETURNING x.id)
	SELECT array_agg(r.id ORDER BY r.id) INTO v_ids FROM revoked r;
	IF v_ids IS NULL THEN
		RETURN 0;
	END IF;
	-- (it only takes away: never refused for the storage quota)
	PERFORM agent._audit(c.org_id, c.workspace_id, 'approval.allowance_revoked', NULL, actor,
						 jsonb_build_object('conversation_id', c.id, 'agent_id', c.agent_id,
											'allowance_ids', to_jsonb(v_ids)));
	RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION agent.revoke_conversation_allowance(uuid, text) IS
	'revoke the further runs a person allowed in a conversation; returns how many allowances ended';

-- What a request of this agent (in this conversation, in this language:
-- NULL, any) would get now: the policy that applies and its conditions,
-- the conversation's allowance, and whether it would be approved
-- automatically or why a person is needed (the request's own decision,
-- agent._approval_decision, with the server's default limits and the
-- agent's image).  The backend for its workspace, the admin for its org.
CREATE FUNCTION agent.approval_policy_of(agent uuid, conversation uuid DEFAULT NULL,
										 language text DEFAULT NULL)
	RETURNS TABLE (mode text, policy_id uuid, policy_set_by text, policy_set_at timestamptz,
				   org_policy_id uuid, agent_policy_id uuid, languages text[], no_network boolean,
				   max_wall_time_s integer, max_memory_mb integer, allowance_id uuid,
				   allowance_granted_by text, allowance_language text, allowance_may_reach text,
				   may_reach text, automatic boolean, person_needed text)
	LANGUAGE plpgsql STABLE
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
	v_caller name := agent._outer_role();
	v_admin	boolean;
	g		agent.agents;
	p		record;
	d		record;
	v_img	record;		-- the agent's image (a refused one: NULL, as host)
	v_lang	text := CASE WHEN language = 'bash' THEN 'shell' ELSE language END;
	al		agent.conversation_allowances;
BEGIN
	v_admin := pg_catalog.pg_has_role(v_caller, 'agent_admin', 'USAGE')
		OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = v_caller);
	PERFORM agent._require_tenant(NOT v_admin);
	PERFORM agent._check_text(language, 'language', 'language');
	g := agent._policy_agent(agent, v_admin);
	IF conversation IS NOT NULL AND NOT EXISTS (
		SELECT 1 FROM agent.conversations c WHERE c.id = conversation AND c.agent_id = g.id
		   AND c.org_id = g.org_id AND c.workspace_id = g.workspace_id) THEN
		RAISE EXCEPTION 'conversation % does not exist for agent %', conversation, g.id
			USING ERRCODE = 'no_data_found';
	END IF;
	IF v_lang NOT IN ('python', 'node', 'shell') THEN
		RAISE EXCEPTION 'language "%" is not supported', agent._shown(language)
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'The languages are python, node and shell (or bash); NULL asks for any.';
	END IF;
	SELECT * INTO p FROM agent._approval_policy(g.org_id, g.id) x;
	SELECT * INTO v_img FROM agent._image_choose(g.org_id, g.id, NULL) x;
	SELECT * INTO d FROM agent._approval_decision(g.org_id, g.id, conversation, v_lang, v_img.name,
												  v_img.digest, NULL, NULL, NULL, NULL) x;
	IF d.allowance_id IS NOT NULL THEN
		SELECT * INTO al FROM agent.conversation_allowances c WHERE c.id = d.allowance_id;
	ELSIF conversation IS NOT NULL THEN
		SELECT * INTO al FROM agent.conversation_allowances c
		 WHERE c.conversation_id = conversation AND c.revoked_at IS NULL AND c.policy_id = p.policy_id
		 ORDER BY c.granted_at DESC, c.id LIMIT 1;
	END IF;
	mode := p.mode;
	policy_id := p.policy_id;
	policy_set_by := p.set_by;
	policy_set_at := p.set_at;
	org_policy_id := p.org_policy_id;
	agent_policy_id := p.agent_policy_id;
	languages := p.languages;
	no_network := p.no_network;
	max_wall_time_s := p.max_wall_time_s;
	max_memory_mb := p.max_memory_mb;
	allowance_id := al.id;
	allowance_granted_by := al.granted_by;
	allowance_language := al.language;
	allowance_may_reach := CASE WHEN al.id IS NOT NULL THEN agent.egress_may_reach(al.egress_policy) END;
	may_reach := agent.egress_may_reach(agent._effective_egress(g.org_id, g.id, conversation));
	automatic := d.person_reason IS NULL;
	person_needed := agent._person_reason_text(d.person_reason);
	RETURN NEXT;
END
$$;
COMMENT ON FUNCTION agent.approval_policy_of(uuid, uuid, text) IS
	'the approval policy a request of this agent (conversation, language) would get now, and whether a person is needed';

-- Product data: in a pg_dump of the database (98_backup.sql marks every
-- table).

-- ---- privileges and row-level security -----------------------------------------
ALTER TABLE agent.approval_policies ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.conversation_allowances ENABLE ROW LEVEL SECURITY;
-- The backend reads its org's policy and its workspace's agents'
-- narrowings and allowances; the admin its org's; the auditor all.
CREATE POLICY backend_org ON agent.approval_policies FOR SELECT TO agent_backend
	USING (org_id = agent.current_org()
		   AND (workspace_id IS NULL OR workspace_id = agent.current_workspace()));
CREATE POLICY admin_org ON agent.approval_policies FOR SELECT TO agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY backend_workspace ON agent.conversation_allowances FOR SELECT TO agent_backend
	USING (org_id = agent.current_org() AND workspace_id = agent.current_workspace());
CREATE POLICY admin_org ON agent.conversation_allowances FOR SELECT TO agent_admin
	USING (org_id = agent.current_org());
CREATE POLICY auditor_read ON agent.approval_policies FOR SELECT TO agent_auditor USING (true);
CREATE POLICY auditor_read ON agent.conversation_allowances FOR SELECT TO agent_auditor USING (true);
GRANT SELECT ON agent.approval_policies, agent.conversation_allowances
	TO agent_backend, agent_admin, agent_auditor;
GRANT EXECUTE ON FUNCTION
	agent.set_approval_policy(text, text, uuid, text[], boolean, integer, integer),
	agent.remove_approval_policy(text, uuid)
	TO agent_admin;
GRANT EXECUTE ON FUNCTION
	agent.revoke_conversation_allowance(uuid, text),
	agent.approval_policy_of(uuid, uuid, text)
	TO agent_backend, agent_admin;
-- (the card's view calls it as its reader)
GRANT EXECUTE ON FUNCTION agent._person_reason_text(text) TO agent_backend, agent_auditor;
