-- Requester and approver (issue 11, item 5), from the attacker's side:
-- mallory requests code and tries to approve it herself, under any
-- spelling of her name; anyone tries to act under a name the product uses
-- for itself.  Four eyes are org policy (agents.orgs.require_distinct_approver,
-- on by default), the admin's to change.
BEGIN;

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('5e000000-0000-4000-8000-000000000001', 'tap-four-eyes', true);
INSERT INTO agent.orgs (id, name, plan) VALUES ('5a000000-0000-4000-8000-000000000001', 'Four eyes', 'pro');
INSERT INTO agent.workspaces (id, org_id, name)
	VALUES ('5b000000-0000-4000-8000-000000000001', '5a000000-0000-4000-8000-000000000001', 'ws');
-- Credits, or requests are refused (insufficient_credits).
SELECT count(agent.grant_credits(id, 100, 'tap')) AS funded FROM agent.orgs WHERE id IN ('5a000000-0000-4000-8000-000000000001');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled, file_upload_enabled)
	VALUES ('5c000000-0000-4000-8000-000000000001', '5a000000-0000-4000-8000-000000000001',
			'5b000000-0000-4000-8000-000000000001', 'agent', 'specialist',
			'5e000000-0000-4000-8000-000000000001', true, true);
INSERT INTO agent.conversations (id, org_id, workspace_id, agent_id, code_execution_enabled)
	VALUES ('5d000000-0000-4000-8000-000000000001', '5a000000-0000-4000-8000-000000000001',
			'5b000000-0000-4000-8000-000000000001', '5c000000-0000-4000-8000-000000000001', true);

CREATE TEMP TABLE req (k int PRIMARY KEY, invocation_id uuid, approval_id uuid);
CREATE FUNCTION pg_temp.request(k int, who text) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
	r agent.execution_request;
BEGIN
	r := agent.request_execution('5b000000-0000-4000-8000-000000000001', '5c000000-0000-4000-8000-000000000001',
								 NULL, 'python', format('print(%s)', k), who);
	INSERT INTO pg_temp.req VALUES (k, r.invocation_id, r.approval_id);
	RETURN r.approval_id;
END
$$;
CREATE FUNCTION pg_temp.hint_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	h text;
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
	RETURN h;
END
$$;
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE;
END
$$;
-- Invisible and format code points of every kind the Unicode Character
-- Database marks (Default_Ignorable_Code_Point, General_Category Cf), from
-- many blocks: the five of issue 27 first.
CREATE TEMP TABLE invisible (cp int PRIMARY KEY, what text);
INSERT INTO invisible VALUES
	(x'180E'::int, 'Mongolian vowel separator'), (x'2060'::int, 'word joiner'),
	(x'200C'::int, 'zero width non-joiner'), (x'200D'::int, 'zero width joiner'),
	(x'00AD'::int, 'soft hyphen'), (x'034F'::int, 'combining grapheme joiner'),
	(x'061C'::int, 'Arabic letter mark'), (x'115F'::int, 'Hangul choseong filler'),
	(x'17B4'::int, 'Khmer vowel inherent aq'), (x'200B'::int, 'zero width space'),
	(x'200E'::int, 'left-to-right mark'), (x'202E'::int, 'right-to-left override'),
	(x'2066'::int, 'left-to-right isolate'), (x'2064'::int, 'invisible plus'),
	(x'3164'::int, 'Hangul filler'), (x'FE0F'::int, 'variation selector-16'),
	(x'FEFF'::int, 'zero width no-break space'), (x'FFA0'::int, 'halfwidth Hangul filler'),
	(x'FFF9'::int, 'interlinear annotation anchor'), (x'0600'::int, 'Arabic number sign'),
	(x'110BD'::int, 'Kaithi number sign'), (x'1BCA0'::int, 'shorthand format letter overlap'),
	(x'1D173'::int, 'musical symbol begin beam'), (x'E0001'::int, 'language tag'),
	(x'E0041'::int, 'tag Latin capital letter A'), (x'E0100'::int, 'variation selector-17'),
	(x'E0FFF'::int, 'unassigned default ignorable');
CREATE TEMP TABLE owner AS
	SELECT r.rolname::text AS name FROM pg_extension e JOIN pg_roles r ON r.oid = e.extowner
	 WHERE e.extname = 'sandbox_ext';
CREATE FUNCTION pg_temp.card(k int) RETURNS uuid LANGUAGE sql AS $$ SELECT approval_id FROM pg_temp.req WHERE req.k = card.k $$;
CREATE FUNCTION pg_temp.inv(k int) RETURNS uuid LANGUAGE sql AS $$ SELECT invocation_id FROM pg_temp.req WHERE req.k = inv.k $$;

SELECT plan(36);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

SELECT col_default_is('agent', 'orgs', 'require_distinct_approver', 'true',
	'four eyes are on by default for new orgs');
SELECT is((SELECT require_distinct_approver FROM agent.orgs WHERE id = '5a000000-0000-4000-8000-000000000001'),
	true, 'and on for this org');

SET ROLE agent_backend;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', '5b000000-0000-4000-8000-000000000001');
SELECT pg_temp.request(k, 'mallory@a') FROM generate_series(1, 3) k;

-- Mallory approves her own request: refused, however she writes her name.
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), 'mallory@a'),
	'42501', 'cannot approve an execution request made by the same person',
	'the requester cannot approve her own request');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), E'  Mallory@A\t'),
	'42501', NULL, '... nor with another case and white space around the name');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), E'\u00a0MALLORY@a\u200b'),
	'42501', NULL, '... nor with non-breaking or zero-width spaces around it');
-- ... nor with an invisible or format character after, inside or before
-- it: every one of them, anywhere in the name, is dropped from the key.
SELECT is((SELECT string_agg(format('U+%s %s: %s', to_hex(i.cp), i.what, st), '; ')
			 FROM invisible i, (VALUES ('%s%s%s'), ('%2$s%1$s%3$s'), ('%2$s%3$s%1$s')) f(fmt),
				  LATERAL (SELECT pg_temp.sqlstate_of(format('SELECT agent.approve(%L, %L)', pg_temp.card(1),
								  format(f.fmt, chr(i.cp), 'mallory', '@a'))) AS st) x
			WHERE st <> '42501'),
		  NULL, '... nor with any invisible or format character (27 of them, from many blocks) in her name');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), E'\uFF2D\uFF41\uFF4C\uFF4C\uFF4F\uFF52\uFF59\uFF20\uFF41'),
	'42501', NULL, '... nor in full-width letters');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), E'MALLORY@A\u3000'),
	'42501', NULL, '... nor with an ideographic space after it');
SELECT throws_ok(format('SELECT agent.approve(%L, %L, %L)', pg_temp.card(1), 'mallory@a',
						agent.code_sha256('print(1)')),
	'42501', NULL, '... nor with the right code hash');
SELECT is((SELECT status FROM agent.approval_requests WHERE id = pg_temp.card(1)), 'pending',
	'the card is still pending');

-- The refusal says why and what to do.
SELECT is(pg_temp.hint_of(format('SELECT agent.approve(%L, %L)', pg_temp.card(1), 'mallory@a')),
	'Ask another person to approve it; an administrator can change the policy with agent.set_require_distinct_approver().',
	'the refusal has a hint');

-- Someone else approves; the requester may still withdraw her own request.
SELECT is(agent.approve(pg_temp.card(1), 'bob@a'), pg_temp.inv(1), 'another person approves');
SELECT is(agent.deny(pg_temp.card(2), 'mallory@a', 'changed my mind'), pg_temp.inv(2),
	'the requester may deny (withdraw) her own request');

-- Names the product uses for itself are nobody's.
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'system'),
	'42939', 'approver "system" is a reserved name', 'nobody approves as "system"');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), ' Supervisor '),
	'42939', NULL, 'nobody approves as " Supervisor "');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'runner'),
	'42939', NULL, 'nobody approves as "runner"');
SELECT throws_ok(format('SELECT agent.deny(%L, %L)', pg_temp.card(3), 'system'),
	'42939', NULL, 'nobody denies as "system"');
SELECT throws_ok(format('SELECT agent.approve(%L, NULL)', pg_temp.card(3)),
	'22004', NULL, 'a null approver is refused');
SELECT throws_ok($$SELECT agent.request_execution('5b000000-0000-4000-8000-000000000001',
	'5c000000-0000-4000-8000-000000000001', NULL, 'python', 'print(9)', 'SYSTEM')$$,
	'42939', 'requested_by "system" is a reserved name', 'nobody requests as "SYSTEM"');
SELECT throws_ok(format('SELECT agent.cancel(%L, %L)', pg_temp.inv(3), 'supervisor'),
	'42939', NULL, 'nobody cancels as "supervisor"');
SELECT throws_ok($$SELECT agent.upload_file('5d000000-0000-4000-8000-000000000001', 'a.txt', 'x'::bytea, 'supervisor')$$,
	'42939', NULL, 'nobody uploads as "supervisor"');
SELECT throws_ok($$SELECT agent.upload_file('5d000000-0000-4000-8000-000000000001', 'a.txt', 'x'::bytea, '  ')$$,
	'22023', 'uploaded_by must not be empty', 'nobody uploads as nobody');
SELECT throws_ok($$SELECT agent.create_conversation('5c000000-0000-4000-8000-000000000001', 'agent_backend')$$,
	'42939', NULL, 'nobody creates a thread as a role of the product');
SELECT throws_ok($$SELECT agent.set_agent_file_upload('5c000000-0000-4000-8000-000000000001', false, 'exporter')$$,
	'42939', NULL, 'nobody changes a toggle as "exporter"');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), (SELECT name FROM owner)),
	'42939', NULL, 'nobody approves under the extension owner''s role name (what owner-run functions record)');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'sandbox_runner_local'),
	'42939', 'approver "sandbox_runner_local" is a reserved name', 'nobody approves as the local runner''s role');
RESET ROLE;
CREATE ROLE tap_runner_host_7 LOGIN IN ROLE agent_runner;
CREATE ROLE tap_backend_login LOGIN IN ROLE agent_backend;
SET ROLE agent_backend;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', '5b000000-0000-4000-8000-000000000001');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'TAP_Runner_Host_7'),
	'42939', NULL, 'nobody approves as a runner host''s login role');
SELECT throws_ok(format('SELECT agent.approve(%L, %L)', pg_temp.card(3), 'tap_backend_login'),
	'42939', NULL, 'nobody approves as the backend''s login role');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', NULL);
SELECT throws_ok($$SELECT agent.set_require_distinct_approver(false, 'system')$$,
	'42939', NULL, 'the admin cannot act as "system" either');

-- The backend cannot lift the policy; the admin can.
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', '5b000000-0000-4000-8000-000000000001');
SELECT throws_ok($$SELECT agent.set_require_distinct_approver(false, 'mallory@a')$$,
	'42501', NULL, 'the backend cannot lift the four-eyes policy');
RESET ROLE;
SET ROLE agent_admin;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', NULL);
SELECT is(agent.set_require_distinct_approver(false, 'root@a'), true, 'the admin lifts it');
RESET ROLE;
SET ROLE agent_backend;
SELECT agent.set_tenant('5a000000-0000-4000-8000-000000000001', '5b000000-0000-4000-8000-000000000001');
SELECT is(agent.approve(pg_temp.card(3), 'mallory@a'), pg_temp.inv(3),
	'with the policy off, a requester may approve her own request');
RESET ROLE;

SELECT results_eq($$SELECT event_type, actor FROM agent.audit_events
					 WHERE org_id = '5a000000-0000-4000-8000-000000000001'
					   AND event_type IN ('approval.approved', 'approval.denied', 'org.policy_changed')
					 ORDER BY id$$,
	$$VALUES ('approval.approved'::text, 'bob@a'::text), ('approval.denied', 'mallory@a'),
			 ('org.policy_changed', 'root@a'), ('approval.approved', 'mallory@a')$$,
	'the audit trail shows who decided, and who changed the policy');
SELECT is((SELECT count(*) FROM agent.audit_events WHERE org_id = '5a000000-0000-4000-8000-000000000001'
			 AND agent._person_key(actor) IN ('system', 'supervisor', 'runner', 'exporter', 'agent_backend')),
	0::bigint, 'no event of the org carries a product name as its actor');

-- The key itself (the owner's function).
SELECT is(agent._person_key(E'Zo\u00EB STRASSE'), agent._person_key(E'zoe\u0308 stra\u00DFe'),
	'composed and decomposed letters, and full case folding (sharp s), give one key');
SELECT isnt(agent._person_key('mallory@a'), agent._person_key(E'mallory\u0430@a'),
	'(control) a letter of another script is another name (confusables are not folded)');

SELECT * FROM finish();
ROLLBACK;
