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
DROP FUNCTION agent.worker_status();
DROP FUNCTION agent.runner_heartbeat(uuid, uuid, integer, uuid[]);

-- (agent.set_tenant keeps its signature and becomes PL/pgSQL: CREATE OR
-- REPLACE changes the language; the C symbol sandbox_set_tenant stays, now
-- as agent._set_tenant_gucs.  agent._invocation_state likewise becomes
-- PL/pgSQL.)

