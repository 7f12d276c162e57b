-- sandbox_ext upgrade 0.1.0 -> 0.2.0, hand-written head.
--
-- The Makefile appends to this file every definition of sql/src replayed
-- by scripts/sql-replay.pl (functions, views, triggers, policies, grants,
-- comments, extension config dumps) and installs the whole as
-- sql/sandbox_ext--0.1.0--0.2.0.sql.  What belongs here is state, which
-- cannot be replayed: new tables, columns (appended at the end of their
-- CREATE TABLE in sql/src, so the column order matches a fresh install),
-- indexes, constraints, types, sequences, rows of agent.settings (and other
-- rows the install script writes), new roles, and a DROP of every function
-- whose signature or result type changed (the replay then re-creates it)
-- or that 0.2.0 no longer has.  test/suites/upgrade.sh compares the catalog
-- this leaves with a fresh 0.2.0 install's: a missing step fails there.
--
-- Each change says which part of sql/src it follows, in sql/src order.

\echo Use "ALTER EXTENSION sandbox_ext UPDATE TO '0.2.0'" to load this file. \quit

-- 50_sessions.sql: a file's content can be pruned by retention.
ALTER TABLE agent.files DROP CONSTRAINT files_status_check,
	ADD CONSTRAINT files_status_check CHECK (status IN ('saved', 'skipped', 'failed', 'pruned'));

-- 70_retention.sql: settings, per-org retention, what pruning leaves.
INSERT INTO agent.settings (key, value, description) VALUES
	('retention_output', '30 days',
	 'how long the output chunks of a run are kept before agent.prune_retention() empties them (an interval, or forever)'),
	('retention_previews', '90 days',
	 'how long the output preview of a tool call is kept (an interval, or forever)'),
	('retention_produced_files', '90 days',
	 'how long the content of a file a run produced is kept (an interval, or forever)'),
	('retention_uploaded_files', 'forever',
	 'how long the content of an uploaded conversation file is kept (an interval, or forever)'),
	('retention_batch', '1000',
	 'rows agent.prune_retention() prunes per transaction');

CREATE TABLE agent.org_retention (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	output			text,
	previews		text,
	produced_files	text,
	uploaded_files	text,
	updated_at		timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE agent.invocation_output
	ADD COLUMN pruned_at timestamptz,
	ADD COLUMN data_bytes integer,
	ADD COLUMN data_sha256 text;
CREATE INDEX invocation_output_retention_idx ON agent.invocation_output (org_id, created_at)
	WHERE pruned_at IS NULL;

-- (egress, issue 14: the run's egress summary is the table's last column
-- in its CREATE TABLE, before the retention columns 70_retention.sql adds)
ALTER TABLE agent.agent_tool_calls ADD COLUMN egress jsonb;

ALTER TABLE agent.agent_tool_calls
	ADD COLUMN preview_pruned_at timestamptz,
	ADD COLUMN preview_bytes integer,
	ADD COLUMN preview_sha256 text;
CREATE INDEX agent_tool_calls_retention_idx ON agent.agent_tool_calls (org_id, created_at)
	WHERE output_preview IS NOT NULL;

CREATE INDEX files_retention_idx ON agent.files (org_id, origin, created_at)
	WHERE status = 'saved';

-- ---- from the integration branch (issue 18) ----

-- agent.invocations: the reason of a cancel asked for in flight (the last
-- column of the table in 15_invocations.sql).
ALTER TABLE agent.invocations ADD COLUMN cancel_reason text;

-- The card's cost and the org's balance (28_approvals.sql).
ALTER TYPE agent.approval_card
	ADD ATTRIBUTE credits_cost integer,
	ADD ATTRIBUTE org_balance bigint;

-- agent.wait_result()'s row (40_supervisor.sql).
CREATE TYPE agent.run_result AS (
	invocation_id	uuid,
	state			text,
	timed_out		boolean,
	state_reason	text,
	exit_code		integer,
	stdout			text,
	stderr			text,
	output_truncated boolean,
	credits_charged integer,
	tool_call_id	uuid,
	output_preview	text,
	files			jsonb
);

-- The approvals channel of each workspace (28_approvals.sql), with a token
-- for every workspace that exists already.
CREATE TABLE agent.workspace_channels (
	workspace_id	uuid PRIMARY KEY REFERENCES agent.workspaces (id),
	token			uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid()
);
INSERT INTO agent.workspace_channels (workspace_id) SELECT w.id FROM agent.workspaces w;

-- agent.refresh_runtimes()'s scratch rows (12_catalog.sql).
CREATE TABLE agent._runtime_probe (
	language	text NOT NULL,
	version		text
);

-- _change_agent gained name and model arguments (34_setup.sql).
DROP FUNCTION agent._change_agent(uuid, text, boolean, boolean);

-- The runner daemon (45_runners.sql): worker_status() gained the runners
-- column (the C row is now agent._supervisor_status()), and a heartbeat
-- carries the runner's slots and answers the intervals in force.
-- ---- from the egress branch (issue 14) ----

-- The effective policy copied onto the invocation, and the approval's
-- binding (15_invocations.sql: the columns after cancel_reason).
ALTER TABLE agent.invocations
	ADD COLUMN egress_policy jsonb,
	ADD COLUMN egress_sha256 text;
ALTER TABLE agent.approval_requests ADD COLUMN approved_egress_sha256 text;

-- ---- from the warm-gaps branch (issue 15) ----
-- The verdict's warm fields (15_invocations.sql: the columns after
-- egress_sha256).
ALTER TABLE agent.invocations
	ADD COLUMN warm boolean,
	ADD COLUMN warm_cpu_ms bigint,
	ADD COLUMN warm_memory_bytes bigint;

-- What the card shows of the policy (28_approvals.sql).
ALTER TYPE agent.approval_card
	ADD ATTRIBUTE egress_may_reach text,
	ADD ATTRIBUTE egress_sha256 text;

-- The policy and the record of each run (47_egress.sql).
CREATE TABLE agent.egress_rules (
	id				uuid PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid(),
	org_id			uuid NOT NULL REFERENCES agent.orgs (id),
	host			text,
	cidr			cidr,
	ports			integer[] NOT NULL,
	created_by		text NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	CHECK ((host IS NULL) <> (cidr IS NULL)),
	CHECK (host IS NULL OR host ~ '^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$'
		   AND length(host) <= 253 AND host !~ '(^|\.)[0-9]+$' AND host !~ '(^|\.)0x'),
	CHECK (cardinality(ports) BETWEEN 1 AND 16 AND 1 <= ALL (ports) AND 65535 >= ALL (ports)),
	UNIQUE NULLS NOT DISTINCT (org_id, host, cidr)
);

CREATE TABLE agent.egress_limits (
	org_id			uuid PRIMARY KEY REFERENCES agent.orgs (id),
	max_connections integer NOT NULL DEFAULT 64 CHECK (max_connections BETWEEN 1 AND 10000),
	max_bytes_up	bigint NOT NULL DEFAULT 10485760 CHECK (max_bytes_up > 0),
	max_bytes_down	bigint NOT NULL DEFAULT 104857600 CHECK (max_bytes_down > 0)
);

CREATE TABLE agent.egress_narrowing (
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	agent_id		uuid NOT NULL,
	conversation_id uuid,
	rule_ids		uuid[] NOT NULL,
	set_by			text NOT NULL,
	set_at			timestamptz NOT NULL DEFAULT now(),
	FOREIGN KEY (org_id, workspace_id, agent_id) REFERENCES agent.agents (org_id, workspace_id, id),
	FOREIGN KEY (org_id, workspace_id, conversation_id)
		REFERENCES agent.conversations (org_id, workspace_id, id),
	UNIQUE NULLS NOT DISTINCT (agent_id, conversation_id)
);

CREATE TABLE agent.egress_runs (
	invocation_id	uuid PRIMARY KEY REFERENCES agent.invocations (id),
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	attempts		bigint NOT NULL,
	allowed			bigint NOT NULL,
	denied			bigint NOT NULL,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	limit_hit		boolean NOT NULL,
	log_rows		integer NOT NULL,
	log_sha256		text NOT NULL,
	recorded_at		timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent.egress_connections (
	invocation_id	uuid NOT NULL REFERENCES agent.invocations (id),
	seq				integer NOT NULL,
	org_id			uuid NOT NULL,
	workspace_id	uuid NOT NULL,
	kind			text NOT NULL,		-- connect | http
	host			text NOT NULL,
	port			integer NOT NULL,
	address			inet,
	allowed			boolean NOT NULL,
	rule_id			uuid,
	reason			text,
	bytes_up		bigint NOT NULL,
	bytes_down		bigint NOT NULL,
	duration_ms		bigint NOT NULL,
	created_at		timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (invocation_id, seq)
);
CREATE INDEX egress_connections_tenant_idx ON agent.egress_connections (org_id, workspace_id);

-- The claims answer has_egress (40_supervisor.sql, 45_runners.sql).
DROP FUNCTION agent.runner_claim(uuid, uuid, integer);
DROP FUNCTION agent._claim_invocations(integer, uuid);

DROP FUNCTION agent.worker_status();
DROP FUNCTION agent.runner_heartbeat(uuid, uuid, integer, uuid[]);

-- (agent.set_tenant keeps its signature and becomes PL/pgSQL: CREATE OR
-- REPLACE changes the language; the C symbol sandbox_set_tenant stays, now
-- as agent._set_tenant_gucs.  agent._invocation_state likewise becomes
-- PL/pgSQL.)


-- ---- from the egress3 branch (issue 14: the egress rows in the export) ----

-- 60_export.sql: the copy goes through both exported tables (the table it
-- is at, and the second half of egress_connections' keyset cursor; the
-- last columns of agent.export_state).
ALTER TABLE agent.export_state
	ADD COLUMN copy_relation text CHECK (copy_relation IN ('tool_invocations', 'egress_connections')),
	ADD COLUMN copy_after_seq integer;

-- _export_objects() answers the table the copy is at; the copy step names
-- the table it copied.
DROP FUNCTION agent._export_objects(name, name);
DROP FUNCTION agent._export_copy_progress(name, uuid, boolean, bigint);

-- ---- from the runner-gaps branch (issue 13: a runner's reach) ----

-- 45_runners.sql: a lease never outlasts the run's wall time or a cancel
-- (plus runner_grace_seconds), and an operator caps a runner's slots (the
-- last column of agent.runners; runner_max_slots when NULL).
INSERT INTO agent.settings (key, value, description) VALUES
	('runner_grace_seconds', '60',
	 'seconds a runner host may hold a run beyond its wall time (from the claim) or beyond a cancel of it, to start it and return its result; then its lease ends, however it heartbeats'),
	('runner_max_slots', '8',
	 'runs a runner host may hold at once unless an operator set its own cap (agent.set_runner_slots); what it declares counts only up to this (not for the local runner, whose slots are sandbox.max_concurrent_runs)');
ALTER TABLE agent.runners ADD COLUMN max_slots integer CHECK (max_slots BETWEEN 0 AND 1024);
-- _lease_deadline takes the run's wall time, cancel and the grace, and
-- answers what ends the lease.
DROP FUNCTION agent._lease_deadline(timestamptz, timestamptz, interval);
