-- Invocations and everything hanging off one: the approval request (the
-- card a person decides on), the tool call and the analytics row.  Owns the
-- state machine of an invocation and the binding of an approval to the
-- exact code it showed.

-- The hash an approval is bound to:
--   encode(sha256(convert_to(code, 'UTF8')), 'hex')
-- in C (src/digest.c: SQL's sha256() looks OpenSSL's implementation up
-- again on every call).
CREATE FUNCTION agent.code_sha256(code text) RETURNS text
	AS 'MODULE_PATHNAME', 'sandbox_code_sha256'
	LANGUAGE C STABLE STRICT PARALLEL SAFE;

-- Egress (47_egress.sql): what the card shows of a policy: "api.github.com:443, *.example.com:80,443", or
-- 'nothing (no network)'; then the secrets its proxy puts in, if any
-- (48_secrets.sql): "; secret GITHUB_TOKEN → api.github.com:443".  A
-- policy of another shape is 22023, saying which part is wrong (the
-- policies the request path copies always have this one).
CREATE FUNCTION agent.egress_may_reach(policy jsonb) RETURNS text
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_bad	text;
BEGIN
	IF policy IS NOT NULL AND jsonb_typeof(policy) <> 'object' THEN
		v_bad := 'a policy is a JSON object';
	ELSIF jsonb_typeof(policy->'rules') NOT IN ('array', 'null') THEN
		v_bad := '"rules" is an array';
	ELSE
		SELECT CASE
				 WHEN jsonb_typeof(e) <> 'object' THEN format('rule %s is an object', o)
				 WHEN jsonb_typeof(coalesce(e->'host', e->'cidr')) IS DISTINCT FROM 'string'
					THEN format('rule %s has a "host" or "cidr" string', o)
				 WHEN jsonb_typeof(e->'ports') IS DISTINCT FROM 'array'
					  OR EXISTS (SELECT 1 FROM jsonb_array_elements(e->'ports') p
								  WHERE jsonb_typeof(p) <> 'number' OR p::text !~ '^[0-9]{1,5}$')
					THEN format('rule %s has "ports", an array of port numbers', o)
				 WHEN jsonb_typeof(e->'secrets') NOT IN ('array', 'null')
					  OR EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(e->'secrets') = 'array'
																		  THEN e->'secrets' ELSE '[]' END) x
								  WHERE jsonb_typeof(x->'name') IS DISTINCT FROM 'string')
					THEN format('rule %s has "secrets", an array of objects with a "name" string', o) END
		  INTO v_bad
		  FROM jsonb_array_elements(coalesce(policy->'rules', '[]')) WITH ORDINALITY AS x(e, o)
		 WHERE jsonb_typeof(e) <> 'object'
			OR jsonb_typeof(coalesce(e->'host', e->'cidr')) IS DISTINCT FROM 'string'
			OR jsonb_typeof(e->'ports') IS DISTINCT FROM 'array'
			OR EXISTS (SELECT 1 FROM jsonb_array_elements(e->'ports') p
						WHERE jsonb_typeof(p) <> 'number' OR p::text !~ '^[0-9]{1,5}$')
			OR jsonb_typeof(e->'secrets') NOT IN ('array', 'null')
			OR EXISTS (SELECT 1 FROM jsonb_array_elements(CASE WHEN jsonb_typeof(e->'secrets') = 'array'
															   THEN e->'secrets' ELSE '[]' END) x
						WHERE jsonb_typeof(x->'name') IS DISTINCT FROM 'string')
		 ORDER BY o LIMIT 1;
	END IF;
	IF v_bad IS NOT NULL THEN
		RAISE EXCEPTION 'invalid egress policy'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = format('Expected: %s.', v_bad),
				  HINT = 'A policy is {"rules": [{"host": "api.example.com", "ports": [443]}, ...]}, as agent.invocations.egress_policy holds.';
	END IF;
	RETURN (SELECT coalesce(string_agg(coalesce(e->>'host', e->>'cidr') || ':' ||
									   (SELECT string_agg(p, ',' ORDER BY p::integer)
										  FROM jsonb_array_elements_text(e->'ports') p), ', '
									   ORDER BY o), 'nothing (no network)')
			  FROM jsonb_array_elements(coalesce(policy->'rules', '[]')) WITH ORDINALITY AS x(e, o))
		|| coalesce('; ' || (SELECT string_agg('secret ' || (s->>'name') || ' → ' || (e->>'host') || ':' ||
											  (SELECT string_agg(p, ',' ORDER BY p::integer)
												 FROM jsonb_array_elements_text(e->'ports') p), ', '
											  ORDER BY o, so)
							   FROM jsonb_array_elements(coalesce(policy->'rules', '[]')) WITH ORDINALITY AS x(e, o),
									jsonb_array_elements(CASE WHEN jsonb_typeof(e->'secrets') = 'array'
															  THEN e->'secrets' ELSE '[]' END) WITH ORDINALITY AS y(s, so)), '');
END
$$;

-- The states of an invocation.  A function rather than an IN list in the
-- CHECK: the executor re-reads a table's CHECK expressions for every
-- statement, and a thirteen-element list is the costliest part of that on
-- the request path.  In C (src/guards.c) with the state machine's table.
CREATE FUNCTION agent.is_invocation_state(state text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_invocation_state'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE TABLE agent.invocations (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	requested_by	text NOT NULL,
	language		text NOT NULL CHECK (language IN ('python', 'node', 'shell')),
	-- the one copy of the code (the card shows it from here) and of the
	-- description; NULL only once retention pruned them (pruned_at)
	code			text,
	code_sha256		text NOT NULL,
	description		text,
	idempotency_key text,
	state			text NOT NULL DEFAULT 'pending_approval'
						CHECK (agent.is_invocation_state(state)),
	state_reason	text,
	approval_id		uuid,
	credits_charged integer NOT NULL DEFAULT 0 CHECK (credits_charged >= 0),
	wall_time_s		integer CHECK (wall_time_s > 0),
	memory_mb		integer CHECK (memory_mb > 0),
	exit_code		integer,
	signal			integer,
	timed_out		boolean,
	oom_killed		boolean,
	output_truncated boolean,
	created_at		timestamptz NOT NULL DEFAULT now(),
	approved_at		timestamptz,
	provisioned_at	timestamptz,
	started_at		timestamptz,
	finished_at		timestamptz,
	-- the conversation's sandbox session it ran in (50_sessions.sql adds the
	-- foreign key, once agent.sessions exists) and that session's generation
	session_id		uuid,
	session_generation integer,
	-- a cancel request while it is provisioning or running (40_supervisor.sql)
	cancel_requested_at timestamptz,
	cancel_requested_by text,
	-- The runner host that holds it while it is provisioning or running,
	-- and its lease (45_runners.sql): every write of that runner for this
	-- invocation names the token, and is refused once the lease is gone.
	-- NULL for runs of the in-database supervisor.  (45_runners.sql adds
	-- the foreign key, once agent.runners exists.)
	runner_id		uuid,
	lease_token		uuid,
	lease_expires_at timestamptz,
	-- the verdict's measurements
	jail_pid		integer,
	cpu_ms			bigint,
	peak_memory_bytes bigint,
	stdout_bytes	bigint,
	stderr_bytes	bigint,
	-- Request order: breaks ties between invocations approved at the same
	-- instant (one transaction), so a conversation's runs keep their order.
	request_seq		bigint GENERATED ALWAYS AS IDENTITY,
	-- The NOTIFY channel is named after this random token, not the id, so
	-- that only the invocation's tenant can learn it (40_supervisor.sql).
	channel_token	uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	-- the reason of a cancel asked for while it is in flight (it reaches
	-- state_reason when the run ends); last, as columns added later are
	cancel_reason	text,
	-- the effective egress policy when it was requested, and its hash
	-- (47_egress.sql: copied by a trigger, frozen, bound to the approval)
	egress_policy	jsonb,
	egress_sha256	text,
	-- the verdict's warm interpreter (docs/jail.md, "Warm interpreters"):
	-- whether the run took one, the CPU its start used (not in cpu_ms) and
	-- what it held at the request (in peak_memory_bytes); NULL until the
	-- run's finish
	warm			boolean,
	warm_cpu_ms		bigint,
	warm_memory_bytes bigint,
	-- when retention emptied code and description (70_retention.sql): the
	-- row, its hashes, states and billing stay
	pruned_at		timestamptz,

	-- the image its sandbox's root is built from and its digest; NULL: the
	-- host's own root (46_images.sql: set when it is requested, frozen,
	-- bound to the approval, claimed only by a runner holding the digest)
	image_name		text,
	image_digest	text,
	-- its isolation class (49_isolation.sql: set when it is requested,
	-- frozen, bound to the approval, claimed only by a runner that runs it)
	isolation		text NOT NULL DEFAULT 'namespaces' CHECK (isolation IN ('namespaces', 'gvisor')),
	CONSTRAINT invocations_image_check CHECK ((image_name IS NULL) = (image_digest IS NULL)),
	FOREIGN KEY (org_id, workspace_id, agent_id)
		REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE (org_id, idempotency_key),
	-- a lease is a runner, a token and a deadline, or nothing
	CHECK ((runner_id IS NULL) = (lease_token IS NULL)
		   AND (runner_id IS NULL) = (lease_expires_at IS NULL)),
	-- the code is there until it is pruned
	CONSTRAINT invocations_code_kept CHECK (code IS NOT NULL OR pruned_at IS NOT NULL)
);
COMMENT ON TABLE agent.invocations IS 'one requested code execution and its life (see docs/control-plane.md)';

-- The supervisor's queue: approved work, oldest approval first.
-- (Tenant-scoped reads use the (org_id, idempotency_key) index: org_id leads.)
CREATE INDEX invocations_approved_idx ON agent.invocations (state, approved_at)
	WHERE state = 'approved';
CREATE INDEX invocations_conversation_idx ON agent.invocations (conversation_id)
	WHERE conversation_id IS NOT NULL;

-- The state machine.  A transition not listed here is a bug in the caller,
-- and terminal states never change.
CREATE FUNCTION agent.invocation_transition_allowed(from_state text, to_state text)
	RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_invocation_transition_allowed'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION agent.invocation_transition_allowed(text, text) IS
	'whether an invocation may go from one state to another (the same table the state trigger enforces)';

-- Refuses any other transition (SQLSTATE 55000), from the same table as
-- agent.invocation_transition_allowed(); in C (src/guards.c), as it runs on
-- every state change.
CREATE FUNCTION agent._invocations_check_transition() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_invocations_check_transition'
	LANGUAGE C;
CREATE TRIGGER invocations_state_transition
	BEFORE UPDATE OF state ON agent.invocations
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION agent._invocations_check_transition();

-- The hash is derived, never supplied: whoever inserts an invocation (the
-- API or a test) cannot make it disagree with the code.
-- code_sha256 := agent.code_sha256(code), in C (src/guards.c).
CREATE FUNCTION agent._invocations_hash_code() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_invocations_hash_code'
	LANGUAGE C;
CREATE TRIGGER invocations_hash_code
	BEFORE INSERT ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_hash_code();

-- What was requested (and shown on the card: the card has no copy of its
-- own) never changes afterwards, so an approval can only ever cover the
-- code it was given.  One change only: retention (70_retention.sql) empties
-- the code and description of an invocation in a terminal state, once,
-- stamping pruned_at; its code_sha256 stays.  (The owner's pruning is the
-- only writer; no role may update invocations.)
CREATE FUNCTION agent._invocations_freeze_request() RETURNS trigger
	LANGUAGE plpgsql
AS $$
DECLARE
	v_pruning boolean := OLD.pruned_at IS NULL AND NEW.pruned_at IS NOT NULL
						 AND agent._state_is_terminal(OLD.state);
BEGIN
	IF (NEW.code_sha256, NEW.language, NEW.org_id, NEW.workspace_id,
		NEW.agent_id, NEW.conversation_id, NEW.requested_by, NEW.idempotency_key)
		IS DISTINCT FROM
	   (OLD.code_sha256, OLD.language, OLD.org_id, OLD.workspace_id,
		OLD.agent_id, OLD.conversation_id, OLD.requested_by, OLD.idempotency_key)
	   OR (NEW.code IS DISTINCT FROM OLD.code AND NOT (v_pruning AND NEW.code IS NULL))
	   OR (NEW.description IS DISTINCT FROM OLD.description
		   AND NOT (v_pruning AND NEW.description IS NULL))
	   OR (NEW.pruned_at IS DISTINCT FROM OLD.pruned_at
		   AND NOT (v_pruning AND NEW.code IS NULL AND NEW.description IS NULL)) THEN
		RAISE EXCEPTION 'cannot change the request of invocation %', OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'The code, description, language, tenant, agent, conversation and requester of an invocation are fixed when it is requested; retention may only empty the code and description of a finished one.',
				  HINT = 'Request a new execution instead.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_freeze_request
	BEFORE UPDATE OF code, code_sha256, description, language, org_id, workspace_id, agent_id,
		conversation_id, requested_by, idempotency_key, pruned_at ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_freeze_request();

-- Like is_invocation_state().
CREATE FUNCTION agent.is_approval_status(status text) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_is_approval_status'
	LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The approval card.  It shows its invocation's code and description
-- (stored once, there: agent.approval_cards) and holds the hash of that
-- code; approved_code_sha256 is what the approver approved; the CHECK
-- makes an approval of any other code impossible to record.
CREATE TABLE agent.approval_requests (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	invocation_id	uuid NOT NULL UNIQUE,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	status			text NOT NULL DEFAULT 'pending'
						CHECK (agent.is_approval_status(status)),
	code_sha256		text NOT NULL,
	language		text NOT NULL,
	runtime			text NOT NULL,
	risk_level		text NOT NULL DEFAULT 'high' CHECK (risk_level IN ('low', 'medium', 'high')),
	requested_by	text NOT NULL,
	decided_by		text,
	decided_at		timestamptz,
	decision_reason text,
	approved_code_sha256 text,
	expires_at		timestamptz NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	approved_egress_sha256 text,	-- the egress policy approved (47_egress.sql)
	approved_image_digest text,		-- the image approved (46_images.sql)
	-- An approval no person made (26_policies.sql): the policy
	-- that made it and the conversation's allowance it used (the foreign
	-- keys are added there); else why a person decides (a reason code).
	approval_policy_id uuid,
	allowance_id	uuid,
	person_reason	text,
	approved_isolation text,		-- the isolation class approved (49_isolation.sql)
	FOREIGN KEY (invocation_id) REFERENCES agent.invocations (id),
	CHECK ((status = 'approved') = (approved_code_sha256 IS NOT NULL)),
	CHECK (approved_code_sha256 IS NULL OR approved_code_sha256 = code_sha256),
	CHECK ((status = 'pending') = (decided_at IS NULL)),
	CONSTRAINT approval_requests_policy_check
		CHECK (approval_policy_id IS NULL OR (status = 'approved' AND person_reason IS NULL))
);
COMMENT ON TABLE agent.approval_requests IS 'the approval card of an invocation and its decision';
CREATE INDEX approval_requests_pending_idx ON agent.approval_requests (expires_at)
	WHERE status = 'pending';
-- An org's pending cards, counted against its max_pending_requests by
-- agent.request_execution().
CREATE INDEX approval_requests_org_pending_idx ON agent.approval_requests (org_id, expires_at)
	WHERE status = 'pending';

-- invocations.approval_id is a convenience pointer back at the card; the
-- authoritative link is approval_requests.invocation_id (unique, a foreign
-- key).  Both are written by request_execution() in one statement pair.

-- A card's content never changes and a decision is final.
-- Refuses (SQLSTATE 55000) a change of code_sha256, language, runtime,
-- invocation_id, org_id, workspace_id, requested_by or created_at, and any
-- change at all once the status is no longer pending (the code and
-- description it shows are its invocation's, frozen there).  In C
-- (src/guards.c): it runs on every decision.
CREATE FUNCTION agent._approval_requests_guard() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_approval_requests_guard'
	LANGUAGE C;
CREATE TRIGGER approval_requests_guard
	BEFORE UPDATE ON agent.approval_requests
	FOR EACH ROW EXECUTE FUNCTION agent._approval_requests_guard();

-- The tool call a finished invocation leaves in its conversation (written
-- by the supervisor).
CREATE TABLE agent.agent_tool_calls (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	invocation_id	uuid NOT NULL UNIQUE REFERENCES agent.invocations (id),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid,
	conversation_id uuid,
	tool_name		text NOT NULL DEFAULT 'code_execution',
	input_hash		text,
	status			text,
	exit_code		integer,
	output_preview	text,
	files			jsonb NOT NULL DEFAULT '[]',	-- what the run returned (sessions.md)
	created_at		timestamptz NOT NULL DEFAULT now(),
	egress			jsonb		-- the run's egress summary (47_egress.sql)
);
CREATE INDEX agent_tool_calls_tenant_idx ON agent.agent_tool_calls (org_id, workspace_id);

-- The analytics row exported to ClickHouse (written by the supervisor).
CREATE TABLE agent.tool_invocations (
	invocation_id	uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid,
	conversation_id uuid,
	tool_name		text NOT NULL DEFAULT 'code_execution',
	language		text NOT NULL,
	status			text NOT NULL,
	exit_code		integer,
	signal			integer,
	duration_ms		bigint,
	cpu_ms			bigint,
	peak_memory_bytes bigint,
	credits_charged integer NOT NULL DEFAULT 0,
	timed_out		boolean NOT NULL DEFAULT false,
	oom_killed		boolean NOT NULL DEFAULT false,
	output_truncated boolean NOT NULL DEFAULT false,
	started_at		timestamptz,
	finished_at		timestamptz,
	created_at		timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tool_invocations_tenant_idx ON agent.tool_invocations (org_id, workspace_id);
