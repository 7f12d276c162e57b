-- The state steps of the integration branch (issue 18), to be folded into
-- the hand-written head of the 0.1.0 -> 0.2.0 upgrade script
-- (sql/upgrade/0.1.0--0.2.0.sql, docs/operations.md "Releases and
-- upgrades") when the release work lands: everything else this branch
-- changed is a definition (functions, views, triggers, policies, grants,
-- comments) and is replayed from sql/src.  Not part of any build yet.

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

-- (agent.set_tenant keeps its signature and becomes PL/pgSQL: CREATE OR
-- REPLACE changes the language; the C symbol sandbox_set_tenant stays, now
-- as agent._set_tenant_gucs.  agent._invocation_state likewise becomes
-- PL/pgSQL.)

-- For the tail (sql/upgrade/0.1.0--0.2.0.post.sql), once the functions
-- exist: the versions of the interpreters the jail runs, for the cards.
--   SELECT count(*) FROM agent.refresh_runtimes();
-- And, if 98_backup.sql lists tables by name: agent.workspace_channels
-- (product data: the channel names backends LISTEN on) is registered
-- for pg_dump; agent._runtime_probe (scratch, always empty) is not.
