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
