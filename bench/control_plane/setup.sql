-- Fixtures for the control-plane benchmark: one pro org per client (the
-- platform is multi-tenant; each org's audit chain serialises that org's
-- requests), each with a workspace, a code-capable agent and plenty of
-- credits; plus a queue of approved invocations for the charge benchmark.
-- Ids are derived from the client number so the pgbench scripts can name
-- them without a lookup.
\set ON_ERROR_STOP on
CREATE SCHEMA IF NOT EXISTS bench;
CREATE OR REPLACE FUNCTION bench.id(kind text, n int) RETURNS uuid
	LANGUAGE sql IMMUTABLE
	RETURN (CASE kind WHEN 'org' THEN 'ae' WHEN 'ws' THEN 'be' ELSE 'ce' END
			|| '000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('1e000000-0000-4000-8000-000000000001', 'bench-coder', true) ON CONFLICT DO NOTHING;
INSERT INTO agent.orgs (id, name, plan)
	SELECT bench.id('org', n), 'bench ' || n, 'pro' FROM generate_series(0, :orgs - 1) n;
INSERT INTO agent.workspaces (id, org_id, name)
	SELECT bench.id('ws', n), bench.id('org', n), 'bench' FROM generate_series(0, :orgs - 1) n;
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled)
	SELECT bench.id('agent', n), bench.id('org', n), bench.id('ws', n), 'bench', 'specialist',
		   '1e000000-0000-4000-8000-000000000001', true
	  FROM generate_series(0, :orgs - 1) n;
SELECT count(agent.grant_credits(bench.id('org', n), 100000000, 'bench')) AS orgs
  FROM generate_series(0, :orgs - 1) n;

-- Approved invocations to charge, numbered; each client takes the next.
CREATE TABLE bench.charge_queue (n bigint PRIMARY KEY, invocation_id uuid NOT NULL);
CREATE SEQUENCE bench.charge_seq;
DO $$
DECLARE
	i int;
	org int;
	r agent.execution_request;
BEGIN
	FOR i IN 1 .. current_setting('bench.charges')::int LOOP
		org := i % current_setting('bench.orgs')::int;
		PERFORM agent.set_tenant(bench.id('org', org), bench.id('ws', org));
		r := agent.request_execution(bench.id('ws', org), bench.id('agent', org), NULL,
									 'python', 'print(' || i || ')', 'bench-user');
		PERFORM agent.approve(r.approval_id, 'bench-approver');
		INSERT INTO bench.charge_queue VALUES (i, r.invocation_id);
		-- Short transactions, like the real traffic: one long one would
		-- pile up versions of each org's audit head row.
		IF i % 200 = 0 THEN
			COMMIT;
		END IF;
	END LOOP;
END
$$;
ANALYZE;

-- The naive baseline (naive.sql): the same two transactions and round trips
-- with none of the control plane in them: a request is a plain INSERT into
-- an unindexed-but-for-its-key table, an approval a plain UPDATE.  What a
-- hand-rolled queue table would cost on the same cluster.
SET client_min_messages = warning;
DROP TABLE IF EXISTS bench.naive_requests;
RESET client_min_messages;
CREATE TABLE bench.naive_requests (
	id			uuid PRIMARY KEY DEFAULT gen_random_uuid(),
	org_id		uuid NOT NULL,
	code		text NOT NULL,
	requested_by text NOT NULL,
	state		text NOT NULL DEFAULT 'pending',
	approved_by text,
	created_at	timestamptz NOT NULL DEFAULT now()
);
