-- Issue 18 from the attacker's (and the careless integrator's) side: the
-- setup API's roles, set_tenant's checks, the text limits and the errors
-- that never echo a huge input, one "not found" code, the settings'
-- validation, the approver's side (channel, inbox, cost, refusal for want
-- of credits), wait() in the approving transaction, cancel's reason, and
-- the operator views' tenant scoping.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('70e00000-0000-4000-8000-000000000001', 'tap-integration', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('70a00000-0000-4000-8000-00000000000a', 'Integrator A', 'pro'),
	('70a00000-0000-4000-8000-00000000000b', 'Neighbour B', 'pro'),
	('70a00000-0000-4000-8000-00000000000c', 'Broke C', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('70b00000-0000-4000-8000-00000000000a', '70a00000-0000-4000-8000-00000000000a', 'A'),
	('70b00000-0000-4000-8000-0000000000a2', '70a00000-0000-4000-8000-00000000000a', 'A2'),
	('70b00000-0000-4000-8000-00000000000b', '70a00000-0000-4000-8000-00000000000b', 'B'),
	('70b00000-0000-4000-8000-00000000000c', '70a00000-0000-4000-8000-00000000000c', 'C');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled, file_upload_enabled)
	SELECT ('70c00000-0000-4000-8000-0000000000' || x)::uuid, ('70a00000-0000-4000-8000-00000000000' || left(x, 1))::uuid,
		   ('70b00000-0000-4000-8000-0000000000' || CASE WHEN x = 'a2' THEN 'a2' ELSE '0' || left(x, 1) END)::uuid,
		   x, 'specialist', '70e00000-0000-4000-8000-000000000001', true, true
	  FROM unnest(ARRAY['a2']) x;
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled, file_upload_enabled) VALUES
	('70c00000-0000-4000-8000-00000000000a', '70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a',
	 'A agent', 'specialist', '70e00000-0000-4000-8000-000000000001', true, true),
	('70c00000-0000-4000-8000-00000000000b', '70a00000-0000-4000-8000-00000000000b', '70b00000-0000-4000-8000-00000000000b',
	 'B agent', 'specialist', '70e00000-0000-4000-8000-000000000001', true, true),
	('70c00000-0000-4000-8000-00000000000c', '70a00000-0000-4000-8000-00000000000c', '70b00000-0000-4000-8000-00000000000c',
	 'C agent', 'specialist', '70e00000-0000-4000-8000-000000000001', true, true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled) VALUES
	('70d00000-0000-4000-8000-00000000000a', '70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a',
	 '70c00000-0000-4000-8000-00000000000a', true);
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs
 WHERE id IN ('70a00000-0000-4000-8000-00000000000a', '70a00000-0000-4000-8000-00000000000b');
SELECT agent.grant_credits('70a00000-0000-4000-8000-00000000000c', 1, 'tap');	-- less than a run

-- The SQLSTATE and message of a statement, ids taken out.
CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
-- The SQLSTATE and the length of everything the error says (message,
-- detail, hint): an error must not echo a huge input.
CREATE FUNCTION pg_temp.error_size(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	m text; d text; h text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
	RETURN SQLSTATE || CASE WHEN length(m) + length(coalesce(d, '')) + length(coalesce(h, '')) < 400
							THEN ' short' ELSE ' LONG' END;
END
$$;
CREATE TEMP TABLE inv (k text PRIMARY KEY, id uuid, approval uuid);

SELECT plan(120);
\ir fixture/runner.psql
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;

-- ---- set_tenant and the one-statement form --------------------------------
SET ROLE agent_backend;
SELECT is(pg_temp.error_of($$SELECT agent.set_tenant('70a00000-0000-4000-8000-0000000000ff', NULL)$$),
	'P0002: org <id> does not exist', 'set_tenant refuses an org that does not exist');
SELECT is(pg_temp.error_of($$SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000b')$$),
	'P0002: workspace <id> does not exist in org <id>', '... and a workspace of another org');
SELECT is(pg_temp.error_of($$SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-0000000000ff')$$),
	'P0002: workspace <id> does not exist in org <id>', '... and a workspace that does not exist (the same error)');
SELECT is(pg_temp.error_of($$SELECT agent.set_tenant(NULL, '70b00000-0000-4000-8000-00000000000a')$$),
	'22004: org must not be null when a workspace is given', '... and a workspace without an org');
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT pg_temp.error_of($$SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000b')$$);
SELECT is(agent.current_workspace(), '70b00000-0000-4000-8000-00000000000a'::uuid,
	'a refused pair leaves the previous tenant in place');
SELECT agent.set_tenant(NULL, NULL);
SELECT is((SELECT agent.create_conversation('70c00000-0000-4000-8000-00000000000a', 'alice', 'one statement')
			 FROM agent.tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a')) IS NOT NULL,
	true, 'agent.tenant() names the tenant for a call in the same statement');
SELECT is((SELECT r.status FROM agent.tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a') t,
				  LATERAL agent.request_execution(t.workspace_id, '70c00000-0000-4000-8000-00000000000a', NULL,
												  'shell', 'echo lateral', 'alice') r),
	'pending_approval', '... and for a LATERAL call that uses its columns');
SELECT is(pg_temp.error_of($$SELECT 1 FROM agent.tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000b')$$),
	'P0002: workspace <id> does not exist in org <id>', 'agent.tenant() checks like set_tenant');

-- ---- the setup API's roles --------------------------------------------------
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is(pg_temp.error_of($$SELECT agent.create_org('Mine now', 'pro')$$),
	'42501: permission denied for function create_org', 'the backend cannot create an org');
SELECT is(pg_temp.error_of($$SELECT agent.set_org_plan('70a00000-0000-4000-8000-00000000000a', 'pro')$$),
	'42501: permission denied for function set_org_plan', '... nor change a plan');
SELECT is(pg_temp.error_of($$SELECT agent.create_model('mine', NULL, true)$$),
	'42501: permission denied for function create_model', '... nor add a model');
SELECT is(pg_temp.error_of($$SELECT agent.set_model_code_execution('70e00000-0000-4000-8000-000000000001', false)$$),
	'42501: permission denied for function set_model_code_execution', '... nor change one');
SELECT is(pg_temp.error_of($$SELECT agent.create_workspace('mine', 'alice')$$),
	'42501: permission denied for function create_workspace', '... nor create a workspace (the admin''s)');
SELECT is(agent.set_agent_name('70c00000-0000-4000-8000-00000000000a', 'Renamed', 'alice'), true,
	'the backend renames its agent');
SELECT is(pg_temp.error_of($$SELECT agent.set_agent_name('70c00000-0000-4000-8000-00000000000b', 'Stolen', 'alice')$$),
	pg_temp.error_of($$SELECT agent.set_agent_name('70c00000-0000-4000-8000-0000000000ff', 'Stolen', 'alice')$$),
	'... another tenant''s agent looks exactly like an unknown one');
SELECT is(pg_temp.error_of($$SELECT agent.set_agent_model('70c00000-0000-4000-8000-00000000000a', '70e00000-0000-4000-8000-0000000000ff', 'alice')$$),
	'P0002: model <id> does not exist', 'an unknown model is P0002');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', NULL);
SELECT isnt(agent.create_workspace('Created by the admin', 'root-admin@a.test'), NULL,
	'the admin creates a workspace in its org');
SELECT is(pg_temp.error_of($$SELECT agent.set_workspace_name('70b00000-0000-4000-8000-00000000000b', 'Mine', 'root-admin@a.test')$$),
	'P0002: workspace <id> does not exist', '... and cannot rename another org''s');
SELECT is(pg_temp.error_of($$SELECT agent.create_agent('x', 'shared', NULL, 'admin')$$),
	'42501: permission denied for function create_agent', 'the admin does not make agents (the backend''s)');
RESET ROLE;
SELECT is((SELECT count(*) FROM agent.audit_events WHERE org_id = '70a00000-0000-4000-8000-00000000000a'
			 AND event_type IN ('workspace.created', 'agent.changed', 'conversation.created')), 3::bigint,
	'each creation and change is audited in the org''s chain');

-- ---- text limits, header fields, no huge echo -----------------------------
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is(pg_temp.error_size($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
		NULL, 'shell', 'echo', repeat('r', 1048576))$$), '22001 short', 'a 1 MB requested_by is 22001, and the error is short');
SELECT is(pg_temp.error_size($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
		NULL, 'shell', 'echo', 'alice', repeat('d', 2097152))$$), '22001 short', 'a 2 MB description is 22001');
SELECT is(pg_temp.error_size($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
		NULL, 'shell', 'echo', 'alice', NULL, repeat('k', 1048576))$$), '22001 short', 'a 1 MB idempotency key is 22001, not a btree error');
SELECT is(pg_temp.error_size($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
		NULL, repeat('p', 100000), 'echo', 'alice')$$), '22001 short', 'a 100 KB language is 22001');
SELECT is(pg_temp.error_of($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
		NULL, 'shell', 'echo', 'alice', NULL, E'key\r\nX-Injected: 1')$$),
	'22023: idempotency_key must not contain control characters', 'an idempotency key with CR/LF is refused');
SELECT is(pg_temp.error_of($$SELECT agent.upload_file('70d00000-0000-4000-8000-00000000000a', 'a.txt', 'x'::bytea, 'alice', E'text/plain\r\nX-Evil: 1')$$),
	'22023: content_type must not contain control characters', 'a content type with CR/LF is refused');
SELECT is(pg_temp.error_size($$SELECT agent.upload_file('70d00000-0000-4000-8000-00000000000a', repeat('n', 100000), 'x'::bytea, 'alice')$$),
	'22023 short', 'a 100 KB file name is refused without being echoed');
SELECT is(pg_temp.error_size($$SELECT agent.deny((SELECT approval FROM pg_temp.inv LIMIT 1), 'bob', repeat('why', 1000000))$$),
	'22001 short', 'a 3 MB denial reason is 22001');
SELECT is(pg_temp.error_size($$SELECT agent.cancel('70d00000-0000-4000-8000-00000000000a', 'bob', repeat('why', 1000000))$$),
	'22001 short', 'a 3 MB cancel reason is 22001');
SELECT is(pg_temp.error_size($$SELECT agent.create_agent(repeat('n', 100000), 'shared', NULL, 'alice')$$),
	'22001 short', 'a 100 KB agent name is 22001');
SELECT is(pg_temp.error_size($$SELECT agent.create_agent('x', repeat('k', 100000), NULL, 'alice')$$),
	'22023 short', 'a 100 KB agent kind is refused without being echoed');
SELECT is(pg_temp.error_size($$SELECT agent.create_skill(repeat('s', 100000), '{}'::jsonb)$$),
	'22023 short', 'a 100 KB skill name is refused without being echoed');
SELECT is(pg_temp.error_size($$SELECT set_config('sandbox.org_id', repeat('x', 100000), true)$$),
	'22P02 short', 'a 100 KB tenant id is refused without being echoed');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', NULL);
SELECT is(pg_temp.error_size($$SELECT agent.add_egress_rule(repeat('h', 1048576), '{443}', 'admin')$$),
	'22001 short', 'a 1 MB egress host pattern is 22001, and the error is short');
SELECT is(pg_temp.error_of($$SELECT agent.add_egress_rule(repeat('!', 250), '{443}', 'admin')$$),
	'22023: invalid host pattern "' || repeat('!', 61) || '..."',
	'an invalid host pattern within the limit is 22023, shown cut to 64 characters');
-- 253 bytes is a name's limit without the root's trailing dot (63+1+63+1+63+1+61)
CREATE TEMP TABLE full_name AS
	SELECT pg_temp.error_of($$SELECT agent.add_egress_rule(repeat('a', 63) || '.' || repeat('b', 63) || '.' ||
		repeat('c', 63) || '.' || repeat('d', 61) || '.', '{443}', 'admin')$$) AS e;
SELECT is((SELECT e FROM full_name) || ' ' || (SELECT length(r.host) FROM agent.egress_rules r WHERE r.host LIKE 'aaa%'),
	'no error 253', 'a full-length (253-byte) name with its trailing dot is taken, stored without the dot');
SELECT is(pg_temp.error_of($$SELECT agent.add_egress_rule(repeat('a', 63) || '.' || repeat('b', 63) || '.' ||
		repeat('c', 63) || '.' || repeat('d', 62), '{443}', 'admin')$$),
	'22001: host is too long', 'a 254-byte name is 22001');
-- (issue 27: a two-dimensional port array was 0A000 from array_position)
SELECT is(pg_temp.error_of($$SELECT agent.add_egress_rule('api.example.com', '{{443},{80}}', 'admin')$$),
	'22023: invalid ports for an egress rule', 'a two-dimensional port array is 22023');
-- (issue 27: a value that is not a policy was jsonb's own error)
SELECT is(pg_temp.error_of($$SELECT agent.egress_may_reach('{"rules": 5}')$$),
	'22023: invalid egress policy', 'egress_may_reach of rules that are no array: 22023');
SELECT is(pg_temp.error_of($$SELECT agent.egress_may_reach('{"rules": [{"host": "a.test", "ports": [443]}, {"host": "b.test", "ports": ["x"]}]}')$$),
	'22023: invalid egress policy', '... of a rule with a port that is no number: 22023');
SELECT is(pg_temp.error_of($$SELECT agent.egress_may_reach('[1]')$$),
	'22023: invalid egress policy', '... of a value that is no object: 22023');
SELECT is(agent.egress_may_reach('{"rules": [{"host": "a.test", "ports": [443, 80]}, {"cidr": "10.0.0.0/8", "ports": [22]}]}'),
	'a.test:80,443, 10.0.0.0/8:22', '(control) a policy is shown as before');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');

-- ---- one "not found" code ---------------------------------------------------
SELECT is(ARRAY[left(pg_temp.error_of($$SELECT agent.approve('70f00000-0000-4000-8000-000000000000', 'bob')$$), 5),
				left(pg_temp.error_of($$SELECT agent.deny('70f00000-0000-4000-8000-000000000000', 'bob')$$), 5),
				left(pg_temp.error_of($$SELECT agent.approval_card('70f00000-0000-4000-8000-000000000000')$$), 5),
				left(pg_temp.error_of($$SELECT agent.cancel('70f00000-0000-4000-8000-000000000000', 'bob')$$), 5),
				left(pg_temp.error_of($$SELECT * FROM agent.read_output('70f00000-0000-4000-8000-000000000000')$$), 5),
				left(pg_temp.error_of($$SELECT agent.output_channel('70f00000-0000-4000-8000-000000000000')$$), 5),
				left(pg_temp.error_of($$SELECT agent.wait('70f00000-0000-4000-8000-000000000000', '0 s')$$), 5),
				left(pg_temp.error_of($$SELECT agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70f00000-0000-4000-8000-000000000000', NULL, 'shell', 'echo', 'alice')$$), 5),
				left(pg_temp.error_of($$SELECT * FROM agent.download_file('70f00000-0000-4000-8000-000000000000')$$), 5),
				left(pg_temp.error_of($$SELECT agent.set_agent_skill('70c00000-0000-4000-8000-00000000000a', '70f00000-0000-4000-8000-000000000000')$$), 5)],
	ARRAY['P0002', 'P0002', 'P0002', 'P0002', 'P0002', 'P0002', 'P0002', 'P0002', 'P0002', 'P0002'],
	'approve, deny, approval_card, cancel, read_output, output_channel, wait, request_execution, download_file, set_agent_skill: P0002 each');
SELECT is(pg_temp.error_of($$SELECT agent.set_agent_skill('70c00000-0000-4000-8000-00000000000a', NULL)$$),
	'22004: agent, skill and attached must not be null', 'a null skill is 22004, not "does not exist"');
RESET ROLE;

-- ---- settings -----------------------------------------------------------
SELECT is(pg_temp.error_of($$UPDATE agent.settings SET value = 'banana' WHERE key = 'approval_timeout'$$),
	'22023: invalid value for setting "approval_timeout": "banana"', 'approval_timeout = banana is refused');
SELECT is(pg_temp.error_of($$UPDATE agent.settings SET value = '-5' WHERE key = 'max_code_bytes'$$),
	'22023: invalid value for setting "max_code_bytes": "-5"', 'a negative size is refused');
SELECT is(pg_temp.error_of($$UPDATE agent.settings SET value = '99999999999999999999' WHERE key = 'max_runs_per_org'$$),
	'22023: invalid value for setting "max_runs_per_org": "99999999999999999999"', 'an out-of-range count is refused');
SELECT is(pg_temp.error_of($$INSERT INTO agent.settings VALUES ('approval_timeuot', '1 hour', 'typo')$$),
	'22023: unknown setting "approval_timeuot"', 'an unknown key is refused');
SELECT is(pg_temp.error_of($$DELETE FROM agent.settings WHERE key = 'max_code_bytes'$$),
	'55000: cannot remove setting "max_code_bytes"', 'a setting cannot be removed');
SELECT is(pg_temp.error_of($$UPDATE agent.settings SET value = '2 hours' WHERE key = 'approval_timeout'$$),
	'no error', 'a valid value is accepted');
SELECT is((SELECT count(*) FROM pg_settings WHERE name = 'sandbox.export_fault'), 0::bigint,
	'the exporter''s test knob is not a setting users see');

-- ---- the operator's free text: limited, never echoed in full ---------------
SELECT isnt(agent.create_model('tap-duplicate', NULL, false), NULL, 'the operator adds a model');
SELECT is(pg_temp.error_of($$SELECT agent.create_model('tap-duplicate', 'again', true)$$),
	'42710: model "tap-duplicate" already exists', '... and a second of the same name is 42710 (a race: test/isolation create-model-race)');
SELECT is(pg_temp.error_size($$SELECT agent.grant_credits('70a00000-0000-4000-8000-00000000000b', 1, repeat('r', 1048576))$$),
	'22001 short', 'a 1 MB grant reason is 22001 (it would be stored in the ledger and the audit trail)');
SELECT is(pg_temp.error_of($$SELECT agent.grant_credits('70a00000-0000-4000-8000-00000000000b', 1, repeat('r', 2000)) > 0$$),
	'no error', '... a reason of the limit''s size is accepted');
SELECT is(pg_temp.error_size($$SELECT agent.refund_invocation('70f00000-0000-4000-8000-000000000000', repeat('r', 1048576))$$),
	'22001 short', 'a 1 MB refund reason is 22001');
SELECT is(pg_temp.error_size($$SELECT agent.set_org_retention('70a00000-0000-4000-8000-00000000000a', previews => repeat('1 day ', 100000))$$),
	'22001 short', 'a 600 KB retention value is 22001');
SELECT is(pg_temp.error_of($$SELECT agent.set_org_retention('70a00000-0000-4000-8000-00000000000a', uploaded_files => repeat('y', 90))$$),
	'22023: retention must be an interval or forever: "' || repeat('y', 61) || '..."',
	'a malformed retention value within the limit is 22023, shown cut to 64 characters');
SELECT is(pg_temp.error_size($$SELECT agent.retention_of('70a00000-0000-4000-8000-00000000000a', repeat('k', 100000))$$),
	'22023 short', 'a 100 KB retention kind is refused without being echoed');
SELECT is(pg_temp.error_size($$SELECT agent.drain_runner(repeat('n', 100000))$$),
	'22001 short', 'a 100 KB runner name is 22001 for drain_runner');
SELECT is(pg_temp.error_size($$SELECT agent.remove_runner(repeat('n', 100000))$$),
	'22001 short', '... and for remove_runner');
SELECT is(pg_temp.error_of($$SELECT agent.drain_runner(repeat('n', 64))$$),
	'P0002: runner "' || repeat('n', 64) || '" does not exist', '... an unknown name of the limit''s length is P0002');

-- ---- the approver's side ----------------------------------------------------
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
INSERT INTO pg_temp.inv
	SELECT 'a' || n, r.invocation_id, r.approval_id
	  FROM generate_series(1, 2) n,
		   LATERAL agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
										   NULL, 'shell', 'echo ' || n, 'alice') r;
CREATE TEMP TABLE chan AS SELECT agent.approvals_channel() AS a;
SELECT ok((SELECT a ~ '^sandbox_approvals_[0-9a-f]{32}$' FROM chan), 'the tenant learns its approvals channel');
SELECT is((SELECT count(*) FROM agent.pending_approvals() p JOIN pg_temp.inv i ON i.approval = p.approval_id), 2::bigint,
	'pending_approvals lists the workspace''s new cards');
SELECT is((SELECT array_agg(DISTINCT credits_cost::text || '/' || org_balance::text) FROM agent.pending_approvals()),
	ARRAY['2/100'], 'each card shows the cost of the run and the org''s balance');
SELECT is((SELECT runtime FROM agent.pending_approvals() LIMIT 1),
	(SELECT interpreter || ' ' || version FROM agent.runtimes WHERE language = 'shell'),
	'the card''s runtime is the one read from the interpreter');
SELECT is(pg_temp.error_of('SELECT * FROM agent.workspace_channels'), '42501: permission denied for table workspace_channels',
	'the backend cannot read the channel tokens');
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-0000000000a2');
SELECT isnt(agent.approvals_channel(), (SELECT a FROM chan), 'another workspace of the same org has another channel');
SELECT is((SELECT count(*) FROM agent.pending_approvals() p JOIN pg_temp.inv i ON i.approval = p.approval_id), 0::bigint,
	'... and does not see the cards');
SELECT agent.set_tenant(NULL, NULL);
SELECT is(pg_temp.error_of('SELECT * FROM agent.pending_approvals()'), '42501: no tenant is set for this transaction',
	'pending_approvals without a tenant is an error, not an empty inbox');

-- A balance that cannot cover the run: refused at request time, audited.
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000c', '70b00000-0000-4000-8000-00000000000c');
SELECT is((SELECT row(status, reason, sqlstate, invocation_id IS NULL)::text
			 FROM agent.request_execution('70b00000-0000-4000-8000-00000000000c', '70c00000-0000-4000-8000-00000000000c',
										  NULL, 'shell', 'echo', 'carol')),
	'(denied,insufficient_credits,53000,t)', 'a request the balance cannot cover is a returned refusal (53000)');
RESET ROLE;
SELECT is((SELECT details ->> 'balance' || '/' || (details ->> 'price') FROM agent.audit_events
			WHERE org_id = '70a00000-0000-4000-8000-00000000000c' AND event_type = 'capability.invoke_denied'),
	'1/2', '... audited with the balance and the price');
SELECT is((SELECT count(*) FROM agent.invocations WHERE org_id = '70a00000-0000-4000-8000-00000000000c'), 0::bigint,
	'... and nothing is created');

-- ---- wait in the approving transaction, cancel's reason ---------------------
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT agent.approve((SELECT approval FROM pg_temp.inv WHERE k = 'a1'), 'bob');
SELECT is(pg_temp.error_of($$SELECT agent.wait((SELECT id FROM pg_temp.inv WHERE k = 'a1'), '1 hour')$$),
	'55000: cannot wait for invocation <id> in the transaction that changed it',
	'wait() in the transaction that approved is refused at once, not after the timeout');
SELECT is(pg_temp.error_of($$SELECT agent.wait_result((SELECT id FROM pg_temp.inv WHERE k = 'a1'), '1 hour')$$),
	'55000: cannot wait for invocation <id> in the transaction that changed it', '... and so is wait_result()');
SELECT is(agent.cancel((SELECT id FROM pg_temp.inv WHERE k = 'a2'), 'dora', 'wrong data set'), 'cancelled',
	'a pending invocation is cancelled');
SELECT is((SELECT row(status, decided_by, decision_reason)::text FROM agent.approval_card((SELECT approval FROM pg_temp.inv WHERE k = 'a2'))),
	'(cancelled,dora,"wrong data set")', '... its card says cancelled, by whom and why');
SELECT is((SELECT state_reason FROM agent.invocations WHERE id = (SELECT id FROM pg_temp.inv WHERE k = 'a2')),
	'cancelled by dora: wrong data set', '... and the reason reaches state_reason');
RESET ROLE;
-- The approved one, claimed (the test plays a runner), then cancelled
-- while running: the reason reaches state_reason when the run ends.
SELECT ok((SELECT id FROM pg_temp.inv WHERE k = 'a1') IN (SELECT pg_temp.fx_claim(64)),
	'the approved run is claimed');
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is(agent.cancel((SELECT id FROM pg_temp.inv WHERE k = 'a1'), 'erin', 'took too long'), 'cancelling',
	'a cancel of a run in flight is asked for');
SELECT is((SELECT count(*) FROM agent.run_slots WHERE invocation_id = (SELECT id FROM pg_temp.inv WHERE k = 'a1') AND cancelling),
	1::bigint, 'run_slots shows the run, cancelling');
RESET ROLE;
SELECT is(pg_temp.fx_finish((SELECT id FROM pg_temp.inv WHERE k = 'a1'),
		'{"status":"signaled","signal":9,"killed":true}'), 'cancelled', 'the run ends cancelled');
SELECT is((SELECT state_reason FROM agent.invocations WHERE id = (SELECT id FROM pg_temp.inv WHERE k = 'a1')),
	'cancelled by erin: took too long', '... with the cancel''s reason in state_reason');

-- A failure of ours whose reason is longer than an operator's may be (a
-- runner's setup error): still refunded (the limit is refund_invocation's,
-- not the runner's).
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
INSERT INTO pg_temp.inv
	SELECT 'a3', r.invocation_id, r.approval_id
	  FROM agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
								   NULL, 'shell', 'echo 3', 'alice') r;
SELECT agent.approve((SELECT approval FROM pg_temp.inv WHERE k = 'a3'), 'bob');
RESET ROLE;
SELECT ok((SELECT id FROM pg_temp.inv WHERE k = 'a3') IN (SELECT pg_temp.fx_claim(64)),
	'another approved run is claimed');
SELECT is(pg_temp.fx_finish((SELECT id FROM pg_temp.inv WHERE k = 'a3'), NULL, repeat('e', 3000)),
	'provision_failed', 'it fails as ours with a 3000-byte error');
SELECT is((SELECT sum(amount) FROM agent.credit_ledger WHERE invocation_id = (SELECT id FROM pg_temp.inv WHERE k = 'a3')),
	0::numeric, '... and is refunded all the same');

-- ---- spend per org and day ------------------------------------------------
-- Org A so far: granted 100; a1 charged 2 (cancelled after its claim: the
-- payload's, charged); a3 charged 2 and refunded 2 (ours).  Org B: granted
-- 100 + 1 (the reason of the limit's size above).
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT row(runs_charged, charged, refunded, net_spent, granted)::text FROM agent.spend_per_org_day
			WHERE org_id = '70a00000-0000-4000-8000-00000000000a' AND day = (now() AT TIME ZONE 'UTC')::date),
	'(2,4,2,2,100)', 'spend_per_org_day: runs charged, charged, refunded, net spent and granted of the backend''s org today');
RESET ROLE;
SET ROLE agent_auditor;
SELECT is((SELECT array_agg(row(org_id, runs_charged, charged, refunded, net_spent, granted)::text ORDER BY org_id)
			 FROM agent.spend_per_org_day WHERE org_id::text LIKE '70a00000-%' AND day = (now() AT TIME ZONE 'UTC')::date),
	ARRAY['(70a00000-0000-4000-8000-00000000000a,2,4,2,2,100)', '(70a00000-0000-4000-8000-00000000000b,0,0,0,0,101)',
		  '(70a00000-0000-4000-8000-00000000000c,0,0,0,0,1)'],
	'... and every org''s for the auditor');
RESET ROLE;

-- ---- why an approved run waits (queue_status) -------------------------------
-- The suite's local runner has no slot (sandbox.max_concurrent_runs = 0,
-- test/run.sh); made certain for this transaction (its heartbeat waits for
-- the row until the rollback).  Live and active, it has no slot: every
-- approved run waits for that, not for a free slot.
UPDATE agent.runners SET slots = 0;
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
INSERT INTO pg_temp.inv
	SELECT 'q' || n, r.invocation_id, r.approval_id
	  FROM generate_series(1, 3) n,
		   LATERAL agent.request_execution('70b00000-0000-4000-8000-00000000000a', '70c00000-0000-4000-8000-00000000000a',
										   CASE WHEN n < 3 THEN '70d00000-0000-4000-8000-00000000000a'::uuid END,
										   'shell', 'echo q' || n, 'alice') r;
SELECT agent.approve(approval, 'bob') FROM pg_temp.inv WHERE k IN ('q1', 'q2', 'q3') ORDER BY k;
CREATE TEMP VIEW queued AS
	SELECT i.k, q.waiting_for, q.detail FROM agent.queue_status() q JOIN pg_temp.inv i ON i.id = q.invocation_id;
GRANT SELECT ON queued TO PUBLIC;
SELECT is((SELECT array_agg(k || ':' || waiting_for ORDER BY k) FROM queued),
	ARRAY['q1:supervisor_paused', 'q2:supervisor_paused', 'q3:supervisor_paused'],
	'queue_status: no runner with a slot (the local runner''s are 0) is supervisor_paused');
SELECT is((SELECT detail FROM queued WHERE k = 'q1'),
	'sandbox.max_concurrent_runs is 0, and no runner host with slots is active', '... saying why the local runner has none');
RESET ROLE;
-- The same with the local runner drained, or silent, while it has slots
-- (issue 27, item 12): the detail says what holds it, not that
-- sandbox.max_concurrent_runs is 0.
UPDATE agent.runners SET slots = 2 WHERE login_role = 'sandbox_runner_local';
SELECT agent.drain_runner('local');
SELECT is((SELECT array_agg(k || ':' || waiting_for || ':' || detail ORDER BY k) FROM queued WHERE k = 'q1'),
	ARRAY['q1:supervisor_paused:the local runner is draining (agent.drain_runner), and no runner host with slots is active'],
	'queue_status: the local runner drained, with slots: supervisor_paused, because it is draining');
SELECT agent.drain_runner('local', resume => true);
UPDATE agent.runners SET last_heartbeat = now() - 2 * agent._runner_lease() WHERE login_role = 'sandbox_runner_local';
SELECT is((SELECT detail FROM queued WHERE k = 'q1'),
	'the local runner is not running, and no runner host with slots is active',
	'... and silent for longer than a lease: not running');
UPDATE agent.runners SET slots = 0, last_heartbeat = now() WHERE login_role = 'sandbox_runner_local';
-- A runner host with free slots: the reasons of the queue itself.
CREATE ROLE tap_queue_runner LOGIN IN ROLE agent_runner;
SET SESSION AUTHORIZATION tap_queue_runner;
CREATE TEMP TABLE qrunner AS SELECT r.runner_id, r.incarnation FROM agent.runner_register('tap-queue', 'h', '1', 2) r;
RESET SESSION AUTHORIZATION;
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT array_agg(k || ':' || waiting_for ORDER BY k) FROM queued), ARRAY['q1:next', 'q2:conversation_busy', 'q3:next'],
	'two approved runs of one conversation: the first is next, the second conversation_busy');
RESET ROLE;
SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', 0, NULL);
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT array_agg(k || ':' || waiting_for || ':' || detail ORDER BY k) FROM queued),
	ARRAY['q1:org_at_limit:0 of 0 runs in flight', 'q2:conversation_busy:runs of a conversation are serial',
		  'q3:org_at_limit:0 of 0 runs in flight'],
	'an org whose limit is 0: org_at_limit, with its load and limit');
RESET ROLE;
SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', NULL, NULL);
UPDATE agent.workspaces SET max_concurrent_runs = 0 WHERE id = '70b00000-0000-4000-8000-00000000000a';
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT waiting_for FROM queued WHERE k = 'q3'), 'workspace_at_limit', 'a workspace whose limit is 0: workspace_at_limit');
RESET ROLE;
UPDATE agent.workspaces SET max_concurrent_runs = NULL WHERE id = '70b00000-0000-4000-8000-00000000000a';
-- The runner host down to one slot, which it fills: no free slot.
SET SESSION AUTHORIZATION tap_queue_runner;
SELECT agent.runner_heartbeat(runner_id, incarnation, 0, NULL, 1) FROM qrunner;
SELECT is((SELECT array_agg(c.id) FROM qrunner, LATERAL agent.runner_claim(runner_id, incarnation, 5) c),
	ARRAY[(SELECT id FROM pg_temp.inv WHERE k = 'q1')], 'the runner host claims the first in line, into its one slot');
RESET SESSION AUTHORIZATION;
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT array_agg(k || ':' || waiting_for || ':' || detail ORDER BY k) FROM queued),
	ARRAY['q2:conversation_busy:runs of a conversation are serial', 'q3:no_free_slot:every run slot is in use'],
	'every slot taken: no_free_slot, without the platform''s numbers for a tenant');
RESET ROLE;
SELECT agent.set_tenant(NULL, NULL);
SELECT is((SELECT waiting_for || ':' || detail FROM queued WHERE k = 'q3'),
	'no_free_slot:1 of 1 run slots in use on 1 active runners', '... and with them for the owner');
RESET ROLE;
-- q1 ends on the runner host, whose conversation's session stays there;
-- the host then has no slot, another host has free ones: q2 is that
-- session's host's to run (affinity), so it waits for that host, not for
-- "next" (the free slots are another host's).
CREATE TEMP TABLE q1lease AS
	SELECT i.id, i.lease_token FROM agent.invocations i WHERE i.id = (SELECT id FROM pg_temp.inv WHERE k = 'q1');
GRANT SELECT ON q1lease TO PUBLIC;
SET SESSION AUTHORIZATION tap_queue_runner;
SELECT agent.runner_finish(q.runner_id, l.lease_token, l.id,
		'{"status":"exited","exit_code":0,"wall_ms":1,"cpu_ms":1,"peak_memory_bytes":1000000}', 0, NULL, true)
  FROM qrunner q, q1lease l;
SELECT agent.runner_heartbeat(runner_id, incarnation, 0, NULL, 0) FROM qrunner;
RESET SESSION AUTHORIZATION;
CREATE ROLE tap_queue_runner2 LOGIN IN ROLE agent_runner;
SET SESSION AUTHORIZATION tap_queue_runner2;
SELECT agent.runner_register('tap-queue-2', 'h2', '1', 2);
RESET SESSION AUTHORIZATION;
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000a', '70b00000-0000-4000-8000-00000000000a');
SELECT is((SELECT array_agg(k || ':' || waiting_for || ':' || coalesce(detail, '') ORDER BY k) FROM queued),
	ARRAY['q2:session_elsewhere:its session''s runner host has no free slot', 'q3:next:'],
	'a conversation whose session''s host has no free slot waits for that host (session_elsewhere), though another host has free slots');
RESET ROLE;
-- The two helpers behind it (and the claim's affinity) run without a SET
-- clause (45_runners.sql): a caller's search_path with a hostile `=` and
-- `<>` for uuid and text ahead of pg_catalog's changes neither answer.
CREATE SCHEMA tap_evil70;
CREATE FUNCTION tap_evil70.never(text, text) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
CREATE FUNCTION tap_evil70.never(uuid, uuid) RETURNS boolean LANGUAGE sql IMMUTABLE AS 'SELECT false';
CREATE OPERATOR tap_evil70.= (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_evil70.never);
CREATE OPERATOR tap_evil70.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = tap_evil70.never);
CREATE OPERATOR tap_evil70.<> (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = tap_evil70.never);
SET LOCAL search_path = tap_evil70, pg_catalog, public;
CREATE TEMP TABLE affinity_under_evil AS
SELECT agent._session_runner('70d00000-0000-4000-8000-00000000000a') AS holder,
	   agent._session_elsewhere('70d00000-0000-4000-8000-00000000000a', NULL) AS elsewhere,
	   agent._session_elsewhere('70d00000-0000-4000-8000-00000000000a', q.runner_id) AS elsewhere_for_holder
  FROM qrunner q;
RESET search_path;
SELECT is((SELECT row(a.holder = q.runner_id, a.elsewhere, a.elsewhere_for_holder)::text
			 FROM affinity_under_evil a, qrunner q),
	'(t,t,f)', 'a hostile search_path: the session''s runner is still found, elsewhere for others, not for itself');

-- ---- operator views are scoped to the tenant -------------------------------
SET ROLE agent_backend;
SELECT agent.set_tenant('70a00000-0000-4000-8000-00000000000b', '70b00000-0000-4000-8000-00000000000b');
SELECT is((SELECT count(*) FROM agent.spend_per_org_day WHERE org_id <> '70a00000-0000-4000-8000-00000000000b'), 0::bigint,
	'spend_per_org_day shows the backend only its org');
SELECT is((SELECT count(*) FROM agent.run_slots WHERE org_id <> '70a00000-0000-4000-8000-00000000000b'), 0::bigint,
	'run_slots shows the backend only its workspace');
SELECT is((SELECT count(*) FROM agent.queue_status() WHERE workspace_id <> '70b00000-0000-4000-8000-00000000000b'), 0::bigint,
	'queue_status shows the backend only its workspace');
SELECT agent.set_tenant(NULL, NULL);
SELECT is(pg_temp.error_of('SELECT * FROM agent.queue_status()'), '42501: no tenant is set for this transaction',
	'queue_status without a tenant is refused to the backend');
RESET ROLE;
SET ROLE agent_auditor;
SELECT is(pg_temp.error_of('SELECT * FROM agent.export_status()'), 'no error', 'the auditor reads export_status()');
RESET ROLE;

-- ---- the maintenance jobs, as worker_status() reports them ------------------
-- (issue 27, item 6: jobs that failed every minute showed nowhere.)  Runs
-- are recorded as pg_cron records them, in cron.job_run_details, with
-- runids above any it gave, so that a run the real launcher records while
-- this runs comes before them.
CREATE TEMP SEQUENCE cronrun;
SELECT setval('cronrun', (SELECT coalesce(max(runid), 0) + 1000000 FROM cron.job_run_details));
CREATE FUNCTION pg_temp.cron_run(job text, status text, message text, started timestamptz) RETURNS void
	LANGUAGE sql AS $$
INSERT INTO cron.job_run_details (jobid, runid, database, username, command, status, return_message, start_time, end_time)
SELECT j.jobid, nextval('pg_temp.cronrun'), j.database, j.username, j.command, status, message, started,
	   CASE WHEN started IS NOT NULL THEN started + interval '10 ms' END
  FROM cron.job j WHERE j.jobname = job;
$$;
SELECT is((SELECT string_agg(jobname || ' ' || schedule, ', ' ORDER BY jobname) FROM cron.job
			WHERE jobname LIKE 'sandbox\_ext\_%' AND active),
	'sandbox_ext_expire_idle_sessions * * * * *, sandbox_ext_expire_pending_approvals * * * * *, '
	'sandbox_ext_prune_retention 17 * * * *, sandbox_ext_reap_expired_leases * * * * *',
	'the install scheduled the four maintenance jobs');
SELECT pg_temp.cron_run(jobname, 'succeeded', '1 row', now()) FROM cron.job WHERE jobname LIKE 'sandbox\_ext\_%';
SELECT is(agent._maintenance_problem(), NULL, 'every job''s last run succeeded: no problem');
SELECT pg_temp.cron_run(j, 'failed', 'connection failed', NULL)
  FROM unnest(ARRAY['sandbox_ext_reap_expired_leases', 'sandbox_ext_expire_idle_sessions']) j;
SELECT is(agent._maintenance_problem(),
	(SELECT format('maintenance jobs sandbox_ext_expire_idle_sessions, sandbox_ext_reap_expired_leases failed: '
				   'connection failed (pg_cron connects to host %s port %s as %s; '
				   'cron.use_background_workers = on needs no connection)', nodename, nodeport, username)
	   FROM cron.job WHERE jobname = 'sandbox_ext_reap_expired_leases'),
	'jobs whose last run could not connect: named, with where pg_cron connects and as whom');
SET ROLE agent_auditor;
SELECT ok((SELECT problem FROM agent.worker_status())
			LIKE '%maintenance jobs sandbox_ext_expire_idle_sessions, sandbox_ext_reap_expired_leases failed: connection failed (%',
	'... in agent.worker_status()''s problem, for the auditor');
RESET ROLE;
SELECT pg_temp.cron_run('sandbox_ext_expire_idle_sessions', 'succeeded', '1 row', now());
SELECT pg_temp.cron_run('sandbox_ext_expire_idle_sessions', 'failed', 'server restarted', NULL);
SELECT pg_temp.cron_run('sandbox_ext_reap_expired_leases', 'failed',
	'ERROR:  permission denied for function reap_expired_leases', now());
SELECT is(agent._maintenance_problem(),
	'maintenance job sandbox_ext_reap_expired_leases failed: ERROR:  permission denied for function reap_expired_leases',
	'a job that ran again is off the list (a run pg_cron marked "server restarted" says nothing of it); an error is quoted');
SELECT pg_temp.cron_run('sandbox_ext_reap_expired_leases', 'succeeded', '1 row', now());
SELECT is((SELECT array_agg(m[1] ORDER BY m[1]) FROM regexp_matches(agent._maintenance_problem(now() + interval '1 hour'),
																	   'maintenance job ([a-z_]+) has not run since', 'g') m),
	ARRAY['sandbox_ext_expire_idle_sessions', 'sandbox_ext_expire_pending_approvals', 'sandbox_ext_reap_expired_leases'],
	'an hour without a start: the minutely jobs have not run (the hourly one is not late yet)');
SELECT is((SELECT count(*)::integer FROM regexp_matches(agent._maintenance_problem(now() + interval '3 hours'),
														 'has not run since', 'g')),
	4, '... and three hours: the hourly one too');
SELECT is((SELECT array_agg(coalesce(agent._cron_period(x)::text, '-') ORDER BY n)
			 FROM unnest(ARRAY['* * * * *', '*/5 * * * *', '17 * * * *', '0 */6 * * *', '30 2 * * *',
							   '0 3 * * 1', '@hourly', '30 seconds', '@reboot']) WITH ORDINALITY u(x, n)),
	ARRAY['00:01:00', '00:05:00', '01:00:00', '06:00:00', '1 day', '-', '01:00:00', '00:00:30', '-'],
	'the longest gap a schedule leaves (none for days of the week, @reboot)');
-- (issue 27: a NULL schedule was XX000 from deep inside pg_cron)
SELECT is(pg_temp.error_of($$SELECT agent.schedule_maintenance(NULL)$$),
	'22004: schedule must not be null', 'schedule_maintenance(NULL) is 22004');
SELECT is(left(pg_temp.error_of($$SELECT agent.schedule_maintenance('nonsense')$$), 5),
	'22023', '... and a schedule pg_cron does not read is 22023');

-- ---- set_org_limits: a bad value is the argument's error (issue 27) -------
-- 22023 naming the argument and its value, never the table's raw 23514
-- with the constraint's name and the org's whole row in its detail.
CREATE FUNCTION pg_temp.error_with_detail(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	d text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
	RETURN SQLSTATE || ': ' || SQLERRM || ' / ' || coalesce(d, '');
END
$$;
SELECT is(pg_temp.error_with_detail($$SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', -5, -1)$$),
	'22023: max_concurrent_runs must not be negative / It is -5.',
	'set_org_limits: a negative run limit is 22023, named, with its value and nothing else');
SELECT is(pg_temp.error_with_detail($$SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', NULL, -1)$$),
	'22023: max_stored_bytes must not be negative / It is -1.', '... a negative storage quota');
SELECT is(pg_temp.error_with_detail($$SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', NULL, NULL, -1)$$),
	'22023: max_pending_requests must not be negative / It is -1.', '... a negative cap on pending requests');
SELECT is((SELECT row(max_concurrent_runs, max_stored_bytes, max_pending_requests)::text FROM agent.orgs
			WHERE id = '70a00000-0000-4000-8000-00000000000a'),
	'(,,)', '... and nothing is changed');
SELECT is(pg_temp.error_of($$SELECT agent.set_org_limits('70a00000-0000-4000-8000-00000000000a', 0, 0, 0)$$),
	'no error', 'zero is a limit (nothing runs, nothing is stored, nothing waits)');

SELECT * FROM finish();
ROLLBACK;
