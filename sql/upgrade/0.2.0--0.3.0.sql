-- sandbox_ext upgrade 0.2.0 -> 0.3.0, hand-written head.
--
-- The Makefile appends to this file every definition of sql/src replayed
-- by scripts/sql-replay.pl (functions, views, triggers, policies, grants,
-- comments, extension config dumps) and installs the whole as
-- sql/sandbox_ext--0.2.0--0.3.0.sql.  What belongs here is state, which
-- cannot be replayed: new tables, columns (appended at the end of their
-- CREATE TABLE in sql/src, so the column order matches a fresh install),
-- indexes, constraints, types, sequences, rows of agent.settings (and other
-- rows the install script writes), new roles, and a DROP of every function
-- whose signature or result type changed (the replay then re-creates it)
-- or that 0.3.0 no longer has.  test/suites/upgrade.sh compares the catalog
-- this leaves with a fresh 0.3.0 install's: a missing step fails there.
--
-- Each change says which part of sql/src it follows, in sql/src order.

\echo Use "ALTER EXTENSION sandbox_ext UPDATE TO '0.3.0'" to load this file. \quit

-- Branch finishcost (the finish's cost, issue 13): no state.  The functions
-- it changes (agent.runner_finish, agent._apply_run_result,
-- agent._record_tool_call, agent._produced_caps) and adds
-- (agent._write_tool_call, agent._output_preview) keep or add signatures
-- and are replayed below like every definition of sql/src.

-- Branch clients (issue 33), 80_clients.sql: agent.is_terminal() and
-- agent.latency() are new functions, replayed below; no state.

-- branch reqcost (issue 13, the request path's cost), 28_approvals.sql:
-- request_execution() sends the new card's notification itself; the helper
-- that did is gone.
DROP FUNCTION agent._notify_new_card(uuid, uuid);

-- Branch lead (issue 27, the audit hash), 20_audit.sql: events carry the
-- version of their hash; every event appended before this upgrade has
-- version 1, every later one version 2 (the column's default from now on,
-- and what agent._audit writes).  A constant default adds the column
-- without rewriting the table (and fires no trigger: the events stay as
-- they were).  agent._audit_hash takes the version first.
ALTER TABLE agent.audit_events
	ADD COLUMN hash_version smallint NOT NULL DEFAULT 1 CHECK (hash_version IN (1, 2));
ALTER TABLE agent.audit_events ALTER COLUMN hash_version SET DEFAULT 2;
DROP FUNCTION agent._audit_hash(text, bigint, uuid, uuid, text, uuid, text, jsonb, timestamptz);

-- Branch lead (issue 27, item 7), 40_supervisor.sql: agent.run_result's
-- third column says whether the run finished before the wait ended
-- (finished, true) instead of whether the wait timed out (timed_out, which
-- everywhere else means the run hit its wall time).  The same position,
-- the opposite sense; agent.wait_result is replayed with the new column.
ALTER TYPE agent.run_result RENAME ATTRIBUTE timed_out TO finished;

-- Branch quota (issue 27: what a tenant makes the database keep counts
-- against its storage quota; pending requests are capped; the code is
-- stored once; finished requests are pruned by retention).
--
-- 12_catalog.sql / 14_limits.sql: the per-org cap on pending requests (its
-- default, max_pending_requests_per_org, is a settings row: the tail adds
-- it, once the settings' rules know it).  set_org_limits gains it.
ALTER TABLE agent.orgs ADD COLUMN max_pending_requests integer CHECK (max_pending_requests >= 0);
DROP FUNCTION agent.set_org_limits(uuid, integer, bigint);

-- 15_invocations.sql: the code and description are stored once, with the
-- invocation; the card shows them from there (agent.approval_cards, which
-- read the card's copies, is dropped here and replayed).  The card's
-- copies always equalled the invocation's (request_execution() wrote both
-- from the same arguments and the card guard froze them; test/suites/
-- upgrade.sh checks it on real rows before the update), so nothing is
-- lost.  Retention may empty an invocation's code and description once it
-- is finished (pruned_at; the constraint says only pruning does).
DROP VIEW agent.approval_cards;
ALTER TABLE agent.approval_requests DROP COLUMN code, DROP COLUMN description;
ALTER TABLE agent.invocations
	ALTER COLUMN code DROP NOT NULL,
	ADD COLUMN pruned_at timestamptz,
	ADD CONSTRAINT invocations_code_kept CHECK (code IS NOT NULL OR pruned_at IS NOT NULL);
CREATE INDEX approval_requests_org_pending_idx ON agent.approval_requests (org_id, expires_at)
	WHERE status = 'pending';

-- 70_retention.sql: the fifth kind, requests (its setting is added by the
-- tail, as above); set_org_retention gains it.
ALTER TABLE agent.org_retention ADD COLUMN requests text;
CREATE INDEX invocations_retention_idx ON agent.invocations (org_id, created_at)
	WHERE pruned_at IS NULL;
DROP FUNCTION agent.set_org_retention(uuid, text, text, text, text);

-- Branch images (issue 30, sandbox images; docs/images.md).
-- 15_invocations.sql: an invocation's image and its digest (NULL: the
-- host's root), and the digest its approval covers.
ALTER TABLE agent.invocations
	ADD COLUMN image_name text,
	ADD COLUMN image_digest text,
	ADD CONSTRAINT invocations_image_check CHECK ((image_name IS NULL) = (image_digest IS NULL));
ALTER TABLE agent.approval_requests ADD COLUMN approved_image_digest text;
-- 25_request.sql: request_execution takes the image (a new last argument).
DROP FUNCTION agent.request_execution(uuid, uuid, uuid, text, text, text, text, text, integer, integer);
-- 28_approvals.sql: the card shows the image and the digest it binds.
ALTER TYPE agent.approval_card ADD ATTRIBUTE image text, ADD ATTRIBUTE image_digest text;
-- 40_supervisor.sql, 45_runners.sql: the claim returns each run's image.
DROP FUNCTION agent.runner_claim(uuid, uuid, integer);
DROP FUNCTION agent._claim_invocations(integer, uuid);
-- 46_images.sql: the images the runners hold, the grants, agents' defaults.
CREATE TABLE agent.images (
	name			text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,62}$' AND name <> 'host'),
	digest			text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
	manifest		text NOT NULL,
	python_version	text,
	node_version	text,
	bash_version	text,
	first_reported_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (name, digest)
);
CREATE TABLE agent.runner_images (
	runner_id		uuid NOT NULL REFERENCES agent.runners (id),
	name			text NOT NULL,
	digest			text NOT NULL,
	reported_at		timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (runner_id, name, digest),
	FOREIGN KEY (name, digest) REFERENCES agent.images (name, digest)
);
CREATE INDEX runner_images_digest_idx ON agent.runner_images (digest);
CREATE TABLE agent.image_grants (
	plan			text REFERENCES agent.plans (plan),
	org_id			uuid REFERENCES agent.orgs (id),
	image_name		text NOT NULL CHECK (image_name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'
										 AND image_name <> 'host'),
	granted_by		text NOT NULL,
	granted_at		timestamptz NOT NULL DEFAULT now(),
	CHECK ((plan IS NULL) <> (org_id IS NULL)),
	UNIQUE NULLS NOT DISTINCT (plan, org_id, image_name)
);
CREATE TABLE agent.agent_images (
	agent_id		uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	image_name		text NOT NULL CHECK (image_name ~ '^[a-z0-9][a-z0-9._-]{0,62}$'
										 AND image_name <> 'host'),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
);
ALTER TABLE agent.images ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.runner_images ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.image_grants ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_images ENABLE ROW LEVEL SECURITY;

-- Branch policies (issue 28, approval policies; docs/control-plane.md,
-- "Approval policies").
-- 15_invocations.sql: a card an approval policy approved names the policy
-- and the conversation's allowance it used; a card a person decides says
-- why (the cards of 0.2.0 keep NULL: the card shows no reason for them).
ALTER TABLE agent.approval_requests
	ADD COLUMN approval_policy_id uuid,
	ADD COLUMN allowance_id uuid,
	ADD COLUMN person_reason text,
	ADD CONSTRAINT approval_requests_policy_check
		CHECK (approval_policy_id IS NULL OR (status = 'approved' AND person_reason IS NULL));
-- 26_policies.sql: the policies and the allowances.
CREATE TABLE agent.approval_policies (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	workspace_id	uuid,
	agent_id		uuid,
	mode			text NOT NULL CHECK (mode IN ('every_run', 'once_per_conversation', 'automatic')),
	languages		text[] CHECK (languages <@ ARRAY['python', 'node', 'shell']
								  AND cardinality(languages) BETWEEN 1 AND 3),
	no_network		boolean NOT NULL DEFAULT false,
	max_wall_time_s integer CHECK (max_wall_time_s > 0),
	max_memory_mb	integer CHECK (max_memory_mb > 0),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	ended_at		timestamptz,
	ended_by		text,
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	CHECK ((agent_id IS NULL) = (workspace_id IS NULL)),
	CHECK ((ended_at IS NULL) = (ended_by IS NULL))
);
CREATE UNIQUE INDEX approval_policies_current_idx ON agent.approval_policies (org_id, agent_id)
	NULLS NOT DISTINCT WHERE ended_at IS NULL;
CREATE TABLE agent.conversation_allowances (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid NOT NULL,
	approval_id		uuid NOT NULL UNIQUE REFERENCES agent.approval_requests (id),
	policy_id		uuid NOT NULL REFERENCES agent.approval_policies (id),
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
CREATE INDEX conversation_allowances_live_idx ON agent.conversation_allowances (conversation_id)
	WHERE revoked_at IS NULL;
ALTER TABLE agent.approval_requests
	ADD CONSTRAINT approval_requests_policy_fkey FOREIGN KEY (approval_policy_id)
		REFERENCES agent.approval_policies (id),
	ADD CONSTRAINT approval_requests_allowance_fkey FOREIGN KEY (allowance_id)
		REFERENCES agent.conversation_allowances (id);
ALTER TABLE agent.approval_policies ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.conversation_allowances ENABLE ROW LEVEL SECURITY;
-- 28_approvals.sql: approve takes allow_further_runs; the card says which
-- policy approved a run or why a person is needed (the view, replayed,
-- gains the columns at its end).
DROP FUNCTION agent.approve(uuid, text, text);
ALTER TYPE agent.approval_card
	ADD ATTRIBUTE approval_policy_id uuid, ADD ATTRIBUTE allowance_id uuid,
	ADD ATTRIBUTE approved_by_policy text, ADD ATTRIBUTE person_needed text;
-- Branch gvisor (issue 32, isolation classes; docs/security.md, "The two
-- isolation classes").  15_invocations.sql: an invocation's class (every
-- run before this upgrade ran namespaced: the default) and the class its
-- approval covers (NULL for an approval from before: the claim reads it as
-- namespaces, 49_isolation.sql).
ALTER TABLE agent.invocations
	ADD COLUMN isolation text NOT NULL DEFAULT 'namespaces' CHECK (isolation IN ('namespaces', 'gvisor'));
ALTER TABLE agent.approval_requests ADD COLUMN approved_isolation text;
-- 28_approvals.sql: the card shows the class the approval binds.
ALTER TYPE agent.approval_card ADD ATTRIBUTE isolation text;
-- 45_runners.sql: the claim returns each run's class (its new result
-- type: the images branch's DROP above already makes way for it).
-- 49_isolation.sql: the plans' and orgs' classes, agents' narrowing, what
-- the runners run.
CREATE TABLE agent.isolation_settings (
	plan			text REFERENCES agent.plans (plan),
	org_id			uuid REFERENCES agent.orgs (id),
	isolation		text NOT NULL CHECK (isolation IN ('namespaces', 'gvisor')),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	CHECK ((plan IS NULL) <> (org_id IS NULL)),
	UNIQUE NULLS NOT DISTINCT (plan, org_id)
);
CREATE TABLE agent.agent_isolation (
	agent_id		uuid PRIMARY KEY,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	isolation		text NOT NULL CHECK (isolation IN ('namespaces', 'gvisor')),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id)
);
CREATE TABLE agent.runner_isolation (
	runner_id		uuid PRIMARY KEY REFERENCES agent.runners (id),
	classes			text[] NOT NULL CHECK (classes <@ ARRAY['namespaces', 'gvisor']
										   AND 'namespaces' = ANY (classes)),
	problems		text,
	reported_at		timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE agent.isolation_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.agent_isolation ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent.runner_isolation ENABLE ROW LEVEL SECURITY;

-- Branch secrets (issue 31), 47_egress.sql: a connection row names the
-- secret the proxy put in, or whose placeholder it blocked.
ALTER TABLE agent.egress_connections ADD COLUMN secret text;

-- Branch secrets (issue 31), 48_secrets.sql: the runner hosts' keys and an
-- org's sealed secrets.
CREATE TABLE agent.secret_keys (
	key_id			text PRIMARY KEY CHECK (key_id ~ '^[0-9a-f]{16}$'),
	public_key		bytea NOT NULL UNIQUE CHECK (octet_length(public_key) = 32),
	added_by		text NOT NULL,
	added_at		timestamptz NOT NULL DEFAULT now(),
	retired_at		timestamptz,
	CHECK (key_id = left(encode(sha256(public_key), 'hex'), 16))
);
CREATE TABLE agent.secrets (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	name			text NOT NULL CHECK (name ~ '^[A-Z][A-Z0-9_]{0,63}$'),
	rule_id			uuid NOT NULL REFERENCES agent.egress_rules (id),
	header			text NOT NULL,
	agent_ids		uuid[],
	key_id			text NOT NULL REFERENCES agent.secret_keys (key_id),
	sealed			bytea NOT NULL CHECK (octet_length(sealed) BETWEEN 49 AND 16384),
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT secrets_org_name UNIQUE (org_id, name)
);
CREATE INDEX secrets_rule_idx ON agent.secrets (rule_id);
-- Which runner holds which secrets key (its reports: the claim routes runs
-- with secrets by them).
CREATE TABLE agent.runner_secret_keys (
	runner_id		uuid NOT NULL REFERENCES agent.runners (id),
	key_id			text NOT NULL CHECK (key_id ~ '^[0-9a-f]{16}$'),
	reported_at		timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (runner_id, key_id)
);
CREATE INDEX runner_secret_keys_key_idx ON agent.runner_secret_keys (key_id);
ALTER TABLE agent.runner_secret_keys ENABLE ROW LEVEL SECURITY;

-- Branch heart (issue 29), 40_supervisor.sql: the finish's locks after the
-- invocation's own row, which its caller locks (one locking order).
DROP FUNCTION agent._lock_for_finish(uuid);
-- 42_claim.sql: the claim's refusals are agent._claim_refuse's.
DROP FUNCTION agent._refuse_unfunded(agent.invocations);
-- 40_supervisor.sql, 50_sessions.sql: runs are claimed and finished by
-- runners only (agent.runner_claim, agent.runner_finish); what only the
-- in-database supervisor used is gone.
DROP FUNCTION agent._finish_invocation(uuid, text, integer, text, boolean, boolean, bigint, integer, text);
DROP FUNCTION agent._cancel_requested(uuid[]);
DROP FUNCTION agent._live_session_ids();
DROP FUNCTION agent._skill_ids_in_use();
