-- agent.request_execution(): the IAM decision and, when it allows the
-- request, the pending invocation with its approval card.
--
-- Two kinds of "no" are kept apart.  A caller bug (a null argument, an id
-- that does not exist in the caller's tenant, limits out of range) raises
-- an error with a specific SQLSTATE and leaves no row behind.  A policy
-- refusal (plan, admin switch, toggles, model, language, code size,
-- credits, pending requests, image, storage quota) is a
-- returned status: the capability.invoke_denied audit event must survive,
-- so raising (and rolling it back) is not an option; and should the
-- caller roll back, the supervisor writes the event anyway
-- (agent._keep_refusal).  The returned row
-- still carries the SQLSTATE the refusal corresponds to, for callers that
-- map statuses to errors.
--
-- The last two checks count what the org holds now, so they are made under
-- the org's storage locks (agent._lock_storage: its audit head, which the
-- request's event takes anyway, then its usage row): two requests of one
-- org cannot both take the last pending slot or the last bytes of the
-- quota.  What an allowed request stores (its code, description and
-- idempotency key, and its audit event) is counted in agent.org_usage; a
-- refusal's event is counted too, and kept past the quota (it records a
-- decision; it is bounded by the argument limits).

CREATE TYPE agent.execution_request AS (
	invocation_id	uuid,		-- NULL when denied
	approval_id		uuid,		-- NULL when denied
	status			text,		-- 'pending_approval', 'approved' (by the org's approval policy), 'denied', or on a replay the invocation's state
	reason			text,		-- refusal reason code, NULL when allowed
	sqlstate		text,		-- the SQLSTATE matching the refusal, NULL when allowed
	replayed		boolean		-- true when an earlier request with the same idempotency key was returned
);
COMMENT ON TYPE agent.execution_request IS 'result of agent.request_execution()';

CREATE FUNCTION agent.request_execution(
	workspace		uuid,
	agent			uuid,
	conversation	uuid,
	language		text,
	code			text,
	requested_by	text,
	description		text DEFAULT NULL,
	idempotency_key text DEFAULT NULL,
	wall_time_s		integer DEFAULT NULL,
	memory_mb		integer DEFAULT NULL,
	image			text DEFAULT NULL)
	RETURNS agent.execution_request
	LANGUAGE plpgsql
	SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp
AS $$
#variable_conflict use_column
DECLARE
	v_org		uuid := agent.current_org();
	v_null		text;
	v_max		integer;
	v_ctx		record;
	v_conv_ok	boolean;
	v_prior		agent.invocations;
	v_reason	text;
	v_sqlstate	text;
	v_message	text;
	v_runtime	text;
	v_sha		text;
	v_bytes		integer;
	v_inv		uuid;
	v_appr		uuid;
	v_details	jsonb;
	v_need		bigint;
	v_stored	bigint;
	v_max_stored bigint;
	v_pending	integer;
	v_image_name text;		-- agent._image_choose's answer (all NULL: host)
	v_image_digest text;
	v_image_reason text;
	v_image_sqlstate text;
	v_image_message text;
	v_policy	boolean := false;	-- the org has an approval policy beyond every_run
	-- its decision (26_policies.sql): why a person decides (NULL:
	-- the policy approves), the policy, the allowance, the egress hash it
	-- judged and the approval.auto event's details
	v_person	text := 'every_run';
	v_auto_policy uuid;
	v_auto_allowance uuid;
	v_auto_egress text;
	v_auto_event jsonb;
	v_auto		boolean;	-- the card was written approved by the policy
	v_status	text := 'pending_approval';
	v_isolation text;			-- the run's isolation class (49_isolation.sql)
	r			agent.execution_request;
BEGIN
	---- Arguments: errors, nothing written ----
	v_null := CASE
		WHEN workspace IS NULL THEN 'workspace'
		WHEN agent IS NULL THEN 'agent'
		WHEN language IS NULL THEN 'language'
		WHEN code IS NULL THEN 'code'
		WHEN requested_by IS NULL THEN 'requested_by' END;
	IF v_null IS NOT NULL THEN
		RAISE EXCEPTION '% must not be null', v_null USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM agent._require_person(requested_by, 'requested_by');
	-- One query for the three (each raises on a bad value, in this order).
	-- Not with the STABLE check above: a plan may fold these IMMUTABLE
	-- calls before it runs, which would change which error comes first.
	PERFORM agent._check_text(language, 'language', 'language'),
			agent._check_text(description, 'description', 'description'),
			agent._check_text(idempotency_key, 'idempotency_key', 'idempotency_key', true);
	IF idempotency_key !~ '\S' THEN
		-- an empty key would be one key for every caller who sends ''
		RAISE EXCEPTION 'idempotency_key must not be empty'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass NULL for a request without an idempotency key.';
	END IF;
	IF v_org IS NULL OR agent.current_workspace() IS NULL THEN
		PERFORM agent._require_tenant(true);	-- raises
	END IF;
	-- The shell language runs bash: "bash" is its other name (recorded as
	-- shell, so an idempotent replay matches either spelling).
	IF language = 'bash' THEN
		language := 'shell';
	END IF;
	IF workspace <> agent.current_workspace() THEN
		RAISE EXCEPTION 'workspace % is not the current workspace', workspace
			USING ERRCODE = 'insufficient_privilege',
				  HINT = 'Requests are made in the workspace named by agent.set_tenant().';
	END IF;
	IF wall_time_s IS NOT NULL THEN
		SELECT l.max_wall_time_s INTO v_max FROM agent._request_limits() l;
		IF wall_time_s < 1 OR wall_time_s > coalesce(v_max, 300) THEN
			RAISE EXCEPTION 'wall time limit % s is out of range', wall_time_s
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('It must be between 1 and %s seconds (sandbox.max_wall_time).', coalesce(v_max, 300));
		END IF;
	END IF;
	IF memory_mb IS NOT NULL THEN
		SELECT l.max_memory_mb INTO v_max FROM agent._request_limits() l;
		IF memory_mb < 1 OR memory_mb > coalesce(v_max, 2048) THEN
			RAISE EXCEPTION 'memory limit % MB is out of range', memory_mb
				USING ERRCODE = 'invalid_parameter_value',
					  DETAIL = format('It must be between 1 and %s MB (sandbox.max_memory).', coalesce(v_max, 2048));
		END IF;
	END IF;

	-- Everything the decision reads, in one lookup.  Ids are resolved only
	-- inside the caller's tenant: another tenant's ids are unknown here.
	SELECT o.plan, p.code_execution AS plan_ok,
		   o.personal_agents_code_execution AS personal_ok,
		   a.id AS agent_id, a.kind, a.code_execution_enabled AS agent_ok,
		   coalesce(m.supports_code_execution, false) AS model_ok,
		   rt.interpreter || ' ' || rt.version AS runtime,
		   p.credits_per_invocation AS price,
		   coalesce((SELECT b.balance FROM agent.credit_balances b WHERE b.org_id = w.org_id), 0) AS balance,
		   coalesce(o.max_pending_requests,
					(SELECT s.value::integer FROM agent.settings s
					  WHERE s.key = 'max_pending_requests_per_org')) AS max_pending,
		   coalesce(o.max_stored_bytes,
					(SELECT s.value::bigint FROM agent.settings s
					  WHERE s.key = 'max_stored_bytes_per_org')) AS max_stored,
		   (SELECT s.value::integer FROM agent.settings s WHERE s.key = 'max_code_bytes') AS max_code_bytes,
		   (SELECT s.value::interval FROM agent.settings s WHERE s.key = 'approval_timeout') AS approval_timeout,
		   (SELECT ai.image_name FROM agent.agent_images ai WHERE ai.agent_id = a.id) AS agent_image
	  INTO v_ctx
	  FROM agent.workspaces w
	  JOIN agent.orgs o ON o.id = w.org_id
	  JOIN agent.plans p ON p.plan = o.plan
	  LEFT JOIN agent.agents a ON a.id = request_execution.agent
							  AND a.org_id = w.org_id AND a.workspace_id = w.id
	  LEFT JOIN agent.models m ON m.id = a.model_id
	  LEFT JOIN agent.runtimes rt ON rt.language = request_execution.language
	 WHERE w.id = request_execution.workspace AND w.org_id = v_org;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'workspace % does not exist', workspace USING ERRCODE = 'no_data_found';
	END IF;
	IF v_ctx.agent_id IS NULL THEN
		RAISE EXCEPTION 'agent % does not exist in workspace %', agent, workspace
			USING ERRCODE = 'no_data_found';
	END IF;
	IF conversation IS NOT NULL THEN
		SELECT c.code_execution_enabled INTO v_conv_ok
		  FROM agent.conversations c
		 WHERE c.id = request_execution.conversation AND c.org_id = v_org
		   AND c.workspace_id = request_execution.workspace
		   AND c.agent_id = request_execution.agent;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'conversation % does not exist for agent %', conversation, agent
				USING ERRCODE = 'no_data_found';
		END IF;
	END IF;
	-- The image (46_images.sql): the request's, else the agent's, else
	-- host (NULLs); a refusal is decided below, in the IAM order.  A host
	-- run (no image asked for, none the agent's) needs no more.
	IF coalesce(image, v_ctx.agent_image, 'host') <> 'host' THEN
		SELECT c.name, c.digest, c.reason, c.sqlstate, c.message
		  INTO v_image_name, v_image_digest, v_image_reason, v_image_sqlstate, v_image_message
		  FROM agent._image_choose(v_org, agent, image) c;
	END IF;
	-- The isolation class: the strictest of the plan's, the org's and the
	-- agent's (49_isolation.sql).
	v_isolation := agent._isolation_choose(v_org, agent);

	---- Idempotency: the same key returns the same invocation ----
	IF idempotency_key IS NOT NULL THEN
		-- Serialise requests carrying this key; the loser of a race waits
		-- here and then finds the winner's committed invocation.
		PERFORM pg_advisory_xact_lock(hashtextextended(v_org::text || '/' || idempotency_key, 7));
		SELECT * INTO v_prior FROM agent.invocations i
		 WHERE i.org_id = v_org AND i.idempotency_key = request_execution.idempotency_key;
		IF FOUND THEN
			IF (v_prior.workspace_id, v_prior.agent_id, v_prior.conversation_id,
				v_prior.language, v_prior.code_sha256, v_prior.image_name)
			   IS DISTINCT FROM
			   (workspace, agent, conversation, language, agent.code_sha256(code), v_image_name) THEN
				RAISE EXCEPTION 'idempotency key "%" was already used for a different request', agent._shown(idempotency_key)
					USING ERRCODE = 'unique_violation',
						  DETAIL = format('It belongs to invocation %s.', v_prior.id);
			END IF;
			r := ROW(v_prior.id, v_prior.approval_id, v_prior.state, v_prior.state_reason,
					 NULL, true);
			RETURN r;
		END IF;
	END IF;

	---- IAM, in order; the first failure decides ----
	v_bytes := octet_length(code);
	IF NOT v_ctx.plan_ok THEN
		v_reason := 'plan_excludes_code_execution'; v_sqlstate := '42501';
		v_message := format('The %s plan does not include code execution.', v_ctx.plan);
	ELSIF v_ctx.kind = 'personal' AND NOT v_ctx.personal_ok THEN
		v_reason := 'personal_agents_disabled'; v_sqlstate := '42501';
		v_message := 'The organisation''s administrator has turned off code execution for personal agents.';
	ELSIF NOT v_ctx.agent_ok THEN
		v_reason := 'agent_code_execution_disabled'; v_sqlstate := '42501';
		v_message := 'Code execution is turned off for this agent.';
	ELSIF conversation IS NOT NULL AND NOT v_conv_ok THEN
		v_reason := 'conversation_code_execution_disabled'; v_sqlstate := '42501';
		v_message := 'Code execution is turned off for this conversation.';
	ELSIF NOT v_ctx.model_ok THEN
		v_reason := 'model_lacks_code_execution'; v_sqlstate := '0A000';
		v_message := 'The agent''s model does not support code execution.';
	ELSE
		v_runtime := v_ctx.runtime;
		IF v_runtime IS NULL THEN
			v_reason := 'language_not_supported'; v_sqlstate := '22023';
			v_message := format('Language "%s" is not supported; the languages are python, node and shell (or bash).',
								agent._shown(language));
		ELSIF code !~ '\S' THEN
			v_reason := 'code_empty'; v_sqlstate := '22023';
			v_message := 'The code is empty.';
		ELSIF v_bytes > v_ctx.max_code_bytes THEN
			v_reason := 'code_too_large'; v_sqlstate := '54000';
			v_message := format('The code is %s bytes; the limit is %s.', v_bytes, v_ctx.max_code_bytes);
		ELSIF v_image_reason IS NOT NULL THEN
			v_reason := v_image_reason; v_sqlstate := v_image_sqlstate;
			v_message := v_image_message;
		ELSIF v_ctx.balance < v_ctx.price THEN
			-- Checked again, under the balance's lock, when the run is
			-- provisioned (a balance may fall between now and then).
			v_reason := 'insufficient_credits'; v_sqlstate := '53000';
			v_message := format('The organization has %s credits; a run costs %s.', v_ctx.balance, v_ctx.price);
		END IF;
	END IF;
	v_sha := agent.code_sha256(code);

	IF v_reason IS NULL THEN
		-- What the request would store, its event included (the event's
		-- details are complete here: the ids are drawn now).
		v_inv := gen_random_uuid();
		v_appr := gen_random_uuid();
		v_details := jsonb_build_object('agent_id', agent, 'conversation_id', conversation,
										'language', language, 'code_sha256', v_sha,
										'code_bytes', v_bytes, 'plan', v_ctx.plan,
										'approval_id', v_appr)
			|| CASE WHEN v_image_name IS NOT NULL
					THEN jsonb_build_object('image', v_image_name, 'image_digest', v_image_digest)
					ELSE '{}'::jsonb END
			|| CASE WHEN v_isolation <> 'namespaces'
					THEN jsonb_build_object('isolation', v_isolation) ELSE '{}'::jsonb END;
		v_need := agent._request_bytes(code, description, idempotency_key)
				  + agent._audit_event_bytes(v_details, requested_by);
		-- The two counts, exact under the org's storage locks (header),
		-- taken here as agent._lock_storage() takes them: the head first
		-- (a statement of its own: the next one's snapshot then sees what
		-- the org's previous holder committed), then the usage row, read
		-- with the org's pending cards.  (Inline: the request path's
		-- cost, docs/control-plane.md "Performance notes".)
		-- The same statement reads whether the org has an approval policy
		-- beyond every_run: read under the head, which every change of a
		-- policy or an allowance takes first, so a revocation committed
		-- before is seen and one after waits for this request's commit.
		PERFORM 1 FROM agent.audit_heads h WHERE h.org_id = v_org FOR UPDATE;
		SELECT u.stored_bytes,
			   (SELECT count(*)::integer FROM agent.approval_requests a
				 WHERE a.org_id = v_org AND a.status = 'pending' AND a.expires_at > now()),
			   EXISTS (SELECT 1 FROM agent.approval_policies p
						WHERE p.org_id = v_org AND p.ended_at IS NULL AND p.mode <> 'every_run')
		  INTO v_stored, v_pending, v_policy
		  FROM agent.org_usage u WHERE u.org_id = v_org
		   FOR NO KEY UPDATE OF u;
		IF NOT FOUND THEN		-- an old org without its usage row
			SELECT l.stored_bytes INTO v_stored FROM agent._lock_storage(v_org) l;
			SELECT count(*)::integer,
				   EXISTS (SELECT 1 FROM agent.approval_policies p
							WHERE p.org_id = v_org AND p.ended_at IS NULL AND p.mode <> 'every_run')
			  INTO v_pending, v_policy
			  FROM agent.approval_requests a
			 WHERE a.org_id = v_org AND a.status = 'pending' AND a.expires_at > now();
		END IF;
		-- The approval policy's decision (26_policies.sql): a
		-- request it approves stores its approval.auto event too.
		IF v_policy THEN
			SELECT d.person_reason, d.policy_id, d.allowance_id, d.egress_sha256, d.event
			  INTO v_person, v_auto_policy, v_auto_allowance, v_auto_egress, v_auto_event
			  FROM agent._approval_decision(v_org, agent, conversation, language, v_image_name,
											v_image_digest, wall_time_s, memory_mb, v_appr, v_sha) d;
			IF v_person IS NULL THEN
				v_need := v_need + agent._audit_event_bytes(v_auto_event, 'policy');
			END IF;
		END IF;
		v_max_stored := v_ctx.max_stored;
		IF v_pending >= v_ctx.max_pending THEN
			-- A decision or an expiry frees a slot (an expired card counts no
			-- more from its expires_at, before pg_cron marks it).
			v_reason := 'too_many_pending_requests'; v_sqlstate := '53400';
			v_message := format('The organization has %s requests waiting for a decision; its limit is %s. Approve, deny or cancel some first.',
								v_pending, v_ctx.max_pending);
		ELSIF v_stored + v_need > v_max_stored THEN
			-- (the claim checks the quota again: agent._claim_invocations)
			v_reason := 'storage_quota_exhausted'; v_sqlstate := '53400';
			v_message := format('The organization stores %s of its %s bytes; this request needs %s more. Delete files or skills it no longer needs.',
								v_stored, v_max_stored, v_need);
		END IF;
	END IF;

	IF v_reason IS NOT NULL THEN
		v_details := jsonb_build_object('reason', v_reason, 'message', v_message,
							   'agent_id', agent, 'conversation_id', conversation,
							   'language', language, 'code_sha256', v_sha,
							   'code_bytes', v_bytes, 'plan', v_ctx.plan,
							   'idempotency_key', idempotency_key)
			|| CASE WHEN v_image_name IS NOT NULL
					THEN jsonb_build_object('image', v_image_name) ELSE '{}'::jsonb END
			|| CASE WHEN v_reason = 'insufficient_credits'
					THEN jsonb_build_object('balance', v_ctx.balance, 'price', v_ctx.price)
					WHEN v_reason = 'too_many_pending_requests'
					THEN jsonb_build_object('pending_requests', v_pending,
											'max_pending_requests', v_ctx.max_pending)
					WHEN v_reason = 'storage_quota_exhausted'
					THEN jsonb_build_object('stored_bytes', v_stored,
											'max_stored_bytes', v_max_stored,
											'request_bytes', v_need)
					ELSE '{}'::jsonb END;
		-- The event is in this transaction; kept too, it is written again
		-- by the supervisor if the caller rolls back (20_audit.sql).
		PERFORM agent._audit(v_org, workspace, 'capability.invoke_denied', NULL, requested_by, v_details),
				agent._keep_refusal(v_org, workspace, requested_by, v_details);
		r := ROW(NULL::uuid, NULL::uuid, 'denied', v_reason, v_sqlstate, false);
		RETURN r;
	END IF;

	---- Allowed: the invocation, its card, and the decision's event ----
	-- On an image, the card names the interpreter its manifest lists.
	IF v_image_digest IS NOT NULL THEN
		v_runtime := coalesce(agent._image_runtime(v_image_name, v_image_digest, language), v_runtime);
	END IF;
	-- The invocation and its card in one statement (the card's foreign key
	-- is checked at its end).  The code and description are stored once,
	-- with the invocation; the card holds the hash the trigger derived.
	-- When the approval policy approves the request (v_person NULL), the
	-- card is written approved by it, exactly as approve() leaves a card
	-- (the code's hash, the invocation's egress hash, image digest and
	-- isolation class bound), and the invocation is written approved in
	-- the same insert (no second write of its row: the request path's
	-- cost).  Both are fenced on the egress hash the decision judged: a
	-- run whose frozen egress policy is another one cannot be while the
	-- request holds the org's audit head; should it be, the request fails
	-- with 40001 below and leaves nothing behind.
	-- agent._approve_by_policy then records the approval.auto event and
	-- wakes the runners (26_policies.sql).
	WITH inv AS (
		INSERT INTO agent.invocations (id, org_id, workspace_id, agent_id, conversation_id,
									   requested_by, language, code, code_sha256, description,
									   idempotency_key, state, approval_id, wall_time_s, memory_mb,
									   image_name, image_digest, isolation, approved_at)
			VALUES (v_inv, v_org, workspace, agent, conversation, requested_by, language, code,
					NULL, description, idempotency_key,
					CASE WHEN v_person IS NULL THEN 'approved' ELSE 'pending_approval' END, v_appr,
					wall_time_s, memory_mb, v_image_name, v_image_digest, v_isolation,
					CASE WHEN v_person IS NULL THEN now() END)
			RETURNING invocations.code_sha256, invocations.egress_sha256,	-- set by the triggers
					  invocations.image_digest, invocations.isolation,
					  v_person IS NULL AND invocations.egress_sha256 IS NOT DISTINCT FROM v_auto_egress AS auto)
	INSERT INTO agent.approval_requests (id, invocation_id, org_id, workspace_id, status,
										 code_sha256, language, runtime, risk_level,
										 requested_by, expires_at, person_reason, decided_by,
										 decided_at, approved_code_sha256, approved_egress_sha256,
										 approved_image_digest, approved_isolation, approval_policy_id,
										 allowance_id)
		SELECT v_appr, v_inv, v_org, workspace, CASE WHEN inv.auto THEN 'approved' ELSE 'pending' END,
			   inv.code_sha256, language, v_runtime, 'high', requested_by,
			   now() + v_ctx.approval_timeout,
			   CASE WHEN inv.auto THEN NULL ELSE coalesce(v_person, 'egress_changed') END,
			   CASE WHEN inv.auto THEN 'policy' END, CASE WHEN inv.auto THEN now() END,
			   CASE WHEN inv.auto THEN inv.code_sha256 END, CASE WHEN inv.auto THEN inv.egress_sha256 END,
			   CASE WHEN inv.auto THEN inv.image_digest END, CASE WHEN inv.auto THEN inv.isolation END,
			   CASE WHEN inv.auto THEN v_auto_policy END,
			   CASE WHEN inv.auto THEN v_auto_allowance END
		  FROM inv
		RETURNING approval_requests.code_sha256, approval_requests.status = 'approved'
		  INTO v_sha, v_auto;
	IF v_person IS NULL AND NOT v_auto THEN
		RAISE EXCEPTION 'the network reach of agent % changed while its run was requested', agent
			USING ERRCODE = 'serialization_failure',
				  HINT = 'Request the run again: the approval policy decides on the reach it will run with.';
	END IF;
	-- Its bytes (the event's are counted by the append itself), then the
	-- event with the hash the card holds (the one computed above: the
	-- trigger derives the same) and, in the same query, the approvers of
	-- the workspace learn of the card at commit (on the workspace's
	-- channel, 28_approvals.sql; the payload is the card's id), unless
	-- the approval policy approved it: then the invocation is approved
	-- here (its event after this one, and the runners' wake-up at commit).
	UPDATE agent.org_usage u
	   SET stored_bytes = u.stored_bytes + agent._request_bytes(code, description, idempotency_key),
		   updated_at = now()
	 WHERE u.org_id = v_org;
	PERFORM agent._audit(v_org, workspace, 'capability.invoke_allowed', v_inv, requested_by,
		jsonb_set(v_details, '{code_sha256}', to_jsonb(v_sha))),
		(SELECT pg_catalog.pg_notify('sandbox_approvals_' || pg_catalog.replace(c.token::text, '-', ''),
									 v_appr::text)
		   FROM agent.workspace_channels c
		  WHERE c.workspace_id = request_execution.workspace
			AND NOT v_auto);
	IF v_auto THEN
		PERFORM agent._approve_by_policy(v_inv, v_appr, v_auto_event);
		v_status := 'approved';
	END IF;
	IF NOT agent.supervisor_available() THEN
		RAISE NOTICE 'no supervisor is running in this cluster'
			USING HINT = 'Nothing will run until sandbox_ext is in shared_preload_libraries.';
	END IF;
	r := ROW(v_inv, v_appr, v_status, NULL, NULL, false);
	RETURN r;
END
$$;
COMMENT ON FUNCTION agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer, text) IS
	'decide whether code may run; on yes, create the pending invocation and its approval card';
