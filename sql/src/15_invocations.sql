-- Invocations and everything hanging off one: the approval request (the
-- card a person decides on), the tool call and the analytics row.  Owns the
-- state machine of an invocation and the binding of an approval to the
-- exact code it showed.

-- The hash an approval is bound to.  Stable like convert_to(), which lets
-- the planner inline it.
CREATE FUNCTION agent.code_sha256(code text) RETURNS text
	LANGUAGE sql STABLE STRICT PARALLEL SAFE
	RETURN pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(code, 'UTF8')), 'hex');

-- The states of an invocation.  A function rather than an IN list in the
-- CHECK: the executor re-reads a table's CHECK expressions for every
-- statement, and a thirteen-element list is the costliest part of that on
-- the request path.
CREATE FUNCTION agent.is_invocation_state(state text) RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
	RETURN state IN ('pending_approval', 'approved', 'provisioning', 'running',
					 'succeeded', 'failed', 'timed_out', 'killed', 'denied',
					 'expired', 'cancelled', 'provision_failed', 'insufficient_credits');
END
$$;

CREATE TABLE agent.invocations (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	requested_by	text NOT NULL,
	language		text NOT NULL CHECK (language IN ('python', 'node', 'shell')),
	code			text NOT NULL,
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
	session_generation integer,
	FOREIGN KEY (org_id, workspace_id, agent_id)
		REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE (org_id, idempotency_key)
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
	LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
	RETURN from_state = to_state OR CASE from_state
		WHEN 'pending_approval' THEN to_state IN ('approved', 'denied', 'expired', 'cancelled')
		WHEN 'approved' THEN to_state IN ('provisioning', 'cancelled', 'insufficient_credits', 'provision_failed')
		WHEN 'provisioning' THEN to_state IN ('running', 'provision_failed', 'failed', 'killed', 'cancelled')
		WHEN 'running' THEN to_state IN ('succeeded', 'failed', 'timed_out', 'killed', 'cancelled')
		ELSE false
	END;

CREATE FUNCTION agent._invocations_check_transition() RETURNS trigger
	LANGUAGE plpgsql
AS $$
DECLARE
	allowed boolean;
BEGIN
	-- The same table as agent.invocation_transition_allowed(), spelled out
	-- here because this runs on every state change.
	allowed := CASE OLD.state
		WHEN 'pending_approval' THEN NEW.state IN ('approved', 'denied', 'expired', 'cancelled')
		WHEN 'approved' THEN NEW.state IN ('provisioning', 'cancelled', 'insufficient_credits', 'provision_failed')
		WHEN 'provisioning' THEN NEW.state IN ('running', 'provision_failed', 'failed', 'killed', 'cancelled')
		WHEN 'running' THEN NEW.state IN ('succeeded', 'failed', 'timed_out', 'killed', 'cancelled')
		ELSE false
	END;
	IF NOT allowed THEN
		RAISE EXCEPTION 'invalid state transition from "%" to "%"', OLD.state, NEW.state
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('Invocation %s is %s.', OLD.id, OLD.state);
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_state_transition
	BEFORE UPDATE OF state ON agent.invocations
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
	EXECUTE FUNCTION agent._invocations_check_transition();

-- The hash is derived, never supplied: whoever inserts an invocation (the
-- API or a test) cannot make it disagree with the code.
CREATE FUNCTION agent._invocations_hash_code() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	NEW.code_sha256 := agent.code_sha256(NEW.code);
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_hash_code
	BEFORE INSERT ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_hash_code();

-- What was requested (and shown on the card) never changes afterwards, so
-- an approval can only ever cover the code it was given.
CREATE FUNCTION agent._invocations_freeze_request() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	IF (NEW.code, NEW.code_sha256, NEW.language, NEW.org_id, NEW.workspace_id,
		NEW.agent_id, NEW.conversation_id, NEW.requested_by, NEW.idempotency_key)
		IS DISTINCT FROM
	   (OLD.code, OLD.code_sha256, OLD.language, OLD.org_id, OLD.workspace_id,
		OLD.agent_id, OLD.conversation_id, OLD.requested_by, OLD.idempotency_key) THEN
		RAISE EXCEPTION 'cannot change the request of invocation %', OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = 'The code, language, tenant, agent, conversation and requester of an invocation are fixed when it is requested.',
				  HINT = 'Request a new execution instead.';
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER invocations_freeze_request
	BEFORE UPDATE OF code, code_sha256, language, org_id, workspace_id, agent_id,
		conversation_id, requested_by, idempotency_key ON agent.invocations
	FOR EACH ROW EXECUTE FUNCTION agent._invocations_freeze_request();

-- Like is_invocation_state(): cheaper for the executor than an IN list.
CREATE FUNCTION agent.is_approval_status(status text) RETURNS boolean
	LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
	RETURN status IN ('pending', 'approved', 'denied', 'expired');
END
$$;

-- The approval card.  approved_code_sha256 is what the approver approved;
-- the CHECK makes an approval of any other code impossible to record.
CREATE TABLE agent.approval_requests (
	id				uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	invocation_id	uuid NOT NULL UNIQUE,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	status			text NOT NULL DEFAULT 'pending'
						CHECK (agent.is_approval_status(status)),
	code			text NOT NULL,
	code_sha256		text NOT NULL,
	language		text NOT NULL,
	runtime			text NOT NULL,
	risk_level		text NOT NULL DEFAULT 'high' CHECK (risk_level IN ('low', 'medium', 'high')),
	description		text,
	requested_by	text NOT NULL,
	decided_by		text,
	decided_at		timestamptz,
	decision_reason text,
	approved_code_sha256 text,
	expires_at		timestamptz NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (invocation_id) REFERENCES agent.invocations (id),
	CHECK ((status = 'approved') = (approved_code_sha256 IS NOT NULL)),
	CHECK (approved_code_sha256 IS NULL OR approved_code_sha256 = code_sha256),
	CHECK ((status = 'pending') = (decided_at IS NULL))
);
COMMENT ON TABLE agent.approval_requests IS 'the approval card of an invocation and its decision';
CREATE INDEX approval_requests_pending_idx ON agent.approval_requests (expires_at)
	WHERE status = 'pending';

-- invocations.approval_id is a convenience pointer back at the card; the
-- authoritative link is approval_requests.invocation_id (unique, a foreign
-- key).  Both are written by request_execution() in one statement pair.

-- A card's content never changes and a decision is final.
CREATE FUNCTION agent._approval_requests_guard() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	IF (NEW.code, NEW.code_sha256, NEW.language, NEW.runtime, NEW.invocation_id,
		NEW.org_id, NEW.workspace_id, NEW.requested_by, NEW.created_at)
		IS DISTINCT FROM
	   (OLD.code, OLD.code_sha256, OLD.language, OLD.runtime, OLD.invocation_id,
		OLD.org_id, OLD.workspace_id, OLD.requested_by, OLD.created_at) THEN
		RAISE EXCEPTION 'cannot change the card of approval request %', OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	IF OLD.status <> 'pending' AND ROW(NEW.*) IS DISTINCT FROM ROW(OLD.*) THEN
		RAISE EXCEPTION 'approval request % has already been decided', OLD.id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  DETAIL = format('It was %s.', OLD.status);
	END IF;
	RETURN NEW;
END
$$;
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
	created_at		timestamptz NOT NULL DEFAULT now()
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
