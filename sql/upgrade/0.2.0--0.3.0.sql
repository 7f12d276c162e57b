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
