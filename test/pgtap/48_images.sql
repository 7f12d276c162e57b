-- Sandbox images (issue 30, docs/images.md), through the functions each
-- role calls: runners report what they hold (and cannot report what is
-- not an image), the operator enables images per plan or org, the backend
-- picks one per agent or per request (refused when its org may not use
-- it), the card shows the image, its short digest and the interpreter of
-- its manifest, the approval binds the digest, and the claim gives a run
-- only to a runner holding that digest: two runners with different
-- digests never take each other's runs, a run nobody holds waits with its
-- reason in queue_status, a digest rewritten past the approval fails.
-- The supervisor is paused while this runs (test/run.sh); everything here
-- is rolled back.
BEGIN;
UPDATE agent.invocations SET state = 'cancelled', state_reason = 'set aside by 48_images'
 WHERE state = 'approved';

INSERT INTO agent.models (id, name, supports_code_execution)
	VALUES ('f6000000-0000-4000-8000-000000000001', 'tap-images', true);
INSERT INTO agent.plans (plan, code_execution) VALUES ('tap-images', true);
INSERT INTO agent.orgs (id, name, plan) VALUES
	('f1000000-0000-4000-8000-00000000000a', 'Image org A', 'pro'),
	('f1000000-0000-4000-8000-00000000000b', 'Image org B', 'tap-images');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('f2000000-0000-4000-8000-00000000000a', 'f1000000-0000-4000-8000-00000000000a', 'A'),
	('f2000000-0000-4000-8000-00000000000b', 'f1000000-0000-4000-8000-00000000000b', 'B');
INSERT INTO agent.agents (id, org_id, workspace_id, name, kind, model_id, code_execution_enabled) VALUES
	('f4000000-0000-4000-8000-00000000000a', 'f1000000-0000-4000-8000-00000000000a',
	 'f2000000-0000-4000-8000-00000000000a', 'A agent', 'specialist', 'f6000000-0000-4000-8000-000000000001', true),
	('f4000000-0000-4000-8000-00000000000b', 'f1000000-0000-4000-8000-00000000000b',
	 'f2000000-0000-4000-8000-00000000000b', 'B agent', 'specialist', 'f6000000-0000-4000-8000-000000000001', true);
SELECT agent.grant_credits('f1000000-0000-4000-8000-00000000000a', 100, 'tap');
UPDATE agent.orgs SET max_concurrent_runs = 10 WHERE id = 'f1000000-0000-4000-8000-00000000000a';
CREATE ROLE tap_img_a LOGIN;
CREATE ROLE tap_img_b LOGIN;
GRANT agent_runner TO tap_img_a, tap_img_b;

-- Two builds of the data image (different pandas), and a manifest for
-- each as sandbox-image writes it.
CREATE TEMP TABLE m (k text PRIMARY KEY, manifest text, digest text);
INSERT INTO m (k, manifest) VALUES
	('d1', E'image\tname\tdata\nimage\tsuite\tbookworm\nimage\tarch\tamd64\ninterpreter\tbash\t5.2.15\ninterpreter\tnode\t18.20.4\ninterpreter\tpython\t3.11.2\ndebian\tpython3-pandas\t1.5.3+dfsg-2\npython\tpandas\t1.5.3\n'),
	('d2', E'image\tname\tdata\nimage\tsuite\tbookworm\nimage\tarch\tamd64\ninterpreter\tbash\t5.2.15\ninterpreter\tpython\t3.11.9\ndebian\tpython3-pandas\t1.5.4\npython\tpandas\t1.5.4\n'),
	('d3', E'image\tname\tdata\nimage\tsuite\tbookworm\ninterpreter\tpython\t3.11.3\n');
UPDATE m SET digest = encode(sha256(convert_to(manifest, 'UTF8')), 'hex');
CREATE FUNCTION pg_temp.d(k text) RETURNS text LANGUAGE sql AS $$ SELECT digest FROM m WHERE k = $1 $$;
CREATE FUNCTION pg_temp.img(k text) RETURNS jsonb LANGUAGE sql AS $$
	SELECT jsonb_build_object('name', 'data', 'digest', digest, 'manifest', manifest) FROM m WHERE m.k = $1 $$;

CREATE FUNCTION pg_temp.error_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;
CREATE TEMP TABLE reg (name text PRIMARY KEY, runner uuid, incarnation uuid);
CREATE FUNCTION pg_temp.rid(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT runner FROM reg WHERE name = n $$;
CREATE FUNCTION pg_temp.inc(n text) RETURNS uuid LANGUAGE sql AS $$ SELECT incarnation FROM reg WHERE name = n $$;
-- request as org a (its agent; image NULL: the agent's) and return the result
CREATE FUNCTION pg_temp.request(tag text, image text DEFAULT NULL, org text DEFAULT 'a')
	RETURNS agent.execution_request LANGUAGE plpgsql AS $$
DECLARE
	r	agent.execution_request;
	w	uuid := ('f2000000-0000-4000-8000-00000000000' || org)::uuid;
BEGIN
	PERFORM agent.set_tenant(('f1000000-0000-4000-8000-00000000000' || org)::uuid, w);
	r := agent.request_execution(w, ('f4000000-0000-4000-8000-00000000000' || org)::uuid, NULL,
								 'python', 'print(1) # ' || tag, 'requester', NULL, tag, image => image);
	PERFORM agent.set_tenant(NULL, NULL);
	RETURN r;
END
$$;
CREATE FUNCTION pg_temp.approve(tag text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	PERFORM agent.set_tenant('f1000000-0000-4000-8000-00000000000a', 'f2000000-0000-4000-8000-00000000000a');
	PERFORM agent.approve((SELECT approval_id FROM agent.invocations WHERE idempotency_key = tag
							  AND org_id = 'f1000000-0000-4000-8000-00000000000a'), 'approver');
	PERFORM agent.set_tenant(NULL, NULL);
END
$$;
CREATE FUNCTION pg_temp.inv(k text) RETURNS agent.invocations LANGUAGE sql
	AS $$ SELECT * FROM agent.invocations WHERE idempotency_key = k AND org_id::text LIKE 'f1000000-%' $$;
-- what a runner's claim of n gave it: "tag=name@digest12" (host: "tag=host")
CREATE FUNCTION pg_temp.claim(name text, n integer) RETURNS text LANGUAGE sql AS $$
	SELECT coalesce(string_agg(substring(c.code from '# (\S+)$') || '=' ||
							   coalesce(c.image_name || '@' || left(c.image_digest, 12), 'host'),
							   ',' ORDER BY c.code), '')
	  FROM agent.runner_claim(pg_temp.rid(name), pg_temp.inc(name), n) c
$$;

SELECT plan(38);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;

-- ---- runners report what they hold ------------------------------------------
SET SESSION AUTHORIZATION tap_img_a;
INSERT INTO reg SELECT 'a', r.runner_id, r.incarnation FROM agent.runner_register('tap-img-a', 'host-a', '1.0', 2) r;
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION tap_img_b;
INSERT INTO reg SELECT 'b', r.runner_id, r.incarnation FROM agent.runner_register('tap-img-b', 'host-b', '1.0', 2) r;
SELECT results_eq($$SELECT s, pg_temp.error_of(s) FROM unnest(ARRAY[
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || jsonb_build_object('digest', pg_temp.d('d2')))),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || '{"name": "other"}')),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || '{"name": "host"}')),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   '{"name": "data"}'),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('a'), pg_temp.inc('a'),
			   jsonb_build_array(pg_temp.img('d2')))]) s$$,
	$$SELECT s, e FROM unnest(ARRAY[
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || jsonb_build_object('digest', pg_temp.d('d2')))),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || '{"name": "other"}')),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   jsonb_build_array(pg_temp.img('d1') || '{"name": "host"}')),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('b'), pg_temp.inc('b'),
			   '{"name": "data"}'),
		format('SELECT agent.runner_report_images(%L, %L, %L)', pg_temp.rid('a'), pg_temp.inc('a'),
			   jsonb_build_array(pg_temp.img('d2')))],
		ARRAY['XX001: the digest of image "data" is not the sha256 of its manifest',
			  'XX001: the manifest of image "other" names another image',
			  '22023: invalid image name "host"',
			  '22023: images must be a JSON array',
			  '42501: permission denied for runner <id>']) AS x(s, e)$$,
	'a report is refused when a digest is not its manifest''s sha256, a manifest names another image, the name is host, it is no array, or the runner is another''s');
SELECT is(agent.runner_report_images(pg_temp.rid('b'), pg_temp.inc('b'), jsonb_build_array(pg_temp.img('d2'))),
		  1, 'runner b reports data@d2');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s %s %s', python_version, coalesce(node_version, '-'), bash_version) FROM agent.images
			WHERE name = 'data' AND digest = pg_temp.d('d2')),
		  '3.11.9 - 5.2.15', 'the catalog keeps the interpreters of the manifest (node: none)');
SELECT ok(has_table_privilege('agent_auditor', 'agent.images', 'SELECT')
		  AND NOT has_table_privilege('agent_backend', 'agent.images', 'SELECT')
		  AND NOT has_table_privilege('agent_backend', 'agent.runner_images', 'SELECT'),
		  'the auditor reads the images; the backend does not read the tables');

-- ---- the operator enables, the backend chooses ------------------------------
SELECT results_eq($$SELECT pg_temp.error_of(s) FROM unnest(ARRAY[
		'SELECT agent.enable_image(''host'', plan => ''pro'')',
		'SELECT agent.enable_image(''Data'', plan => ''pro'')',
		'SELECT agent.enable_image(''data'')',
		'SELECT agent.enable_image(''data'', ''pro'', ''f1000000-0000-4000-8000-00000000000a'')',
		'SELECT agent.enable_image(''data'', plan => ''platinum'')',
		'SELECT agent.enable_image(''data'', org => ''f1000000-0000-4000-8000-0000000000ff'')']) s$$,
	ARRAY['22023: the host image needs no grant', '22023: invalid image name "Data"',
		  '22023: exactly one of plan and org must be given', '22023: exactly one of plan and org must be given',
		  'P0002: plan "platinum" does not exist', 'P0002: org <id> does not exist'],
	'enable_image refuses host, a name no image has, not exactly one of plan and org, an unknown plan or org');
SELECT ok(NOT has_function_privilege('agent_backend', 'agent.enable_image(text, text, uuid)', 'EXECUTE')
		  AND NOT has_function_privilege('agent_admin', 'agent.enable_image(text, text, uuid)', 'EXECUTE')
		  AND has_function_privilege('agent_backend', 'agent.set_agent_image(uuid, text, text)', 'EXECUTE'),
		  'only the operator enables images; the backend sets an agent''s');

SET ROLE agent_backend;
SELECT agent.set_tenant('f1000000-0000-4000-8000-00000000000a', 'f2000000-0000-4000-8000-00000000000a');
SELECT is(pg_temp.error_of('SELECT agent.set_agent_image(''f4000000-0000-4000-8000-00000000000a'', ''data'', ''alice'')'),
		  '42501: image "data" is not enabled for this organization', 'an agent cannot take an image its org may not use');
SELECT is((SELECT format('%s %s', status, reason) FROM pg_temp.request('r-off', 'data')),
		  'denied image_not_enabled', 'a request for an image the org may not use is refused');
SELECT is((SELECT sqlstate FROM pg_temp.request('r-off', 'data')), '42501', '... with 42501');
SELECT is(pg_temp.error_of('SELECT pg_temp.request(''r-bad'', ''../etc'')'),
		  '22023: invalid image name "../etc"', 'a name no image can have is an error');
RESET ROLE;
SELECT ok(EXISTS (SELECT 1 FROM agent.audit_events WHERE org_id = 'f1000000-0000-4000-8000-00000000000a'
					AND event_type = 'capability.invoke_denied' AND details ->> 'reason' = 'image_not_enabled'
					AND details ->> 'image' = 'data'),
		  'the refusal is audited with the image');

SELECT ok(agent.enable_image('data', plan => 'pro'), 'the operator enables data for the pro plan');
SELECT ok(NOT agent.enable_image('data', plan => 'pro'), '... once');
SELECT ok(agent.enable_image('scratch', org => 'f1000000-0000-4000-8000-00000000000a'), 'and scratch for org A alone');
SELECT ok(EXISTS (SELECT 1 FROM agent.audit_events WHERE org_id = 'f1000000-0000-4000-8000-00000000000a'
					AND event_type = 'org.image_enabled' AND details ->> 'image' = 'scratch'),
		  'an org''s grant is an event of its chain');

SET ROLE agent_backend;
SELECT is((SELECT format('%s %s', status, reason) FROM pg_temp.request('r-b', 'data', 'b')),
		  'denied image_not_enabled', 'org B, on another plan, still may not use data');
SELECT is((SELECT format('%s %s %s', status, reason, sqlstate) FROM pg_temp.request('r-scratch', 'scratch')),
		  'denied image_unavailable 55000', 'an enabled image no runner ever reported is refused (55000)');
SELECT agent.set_tenant('f1000000-0000-4000-8000-00000000000a', 'f2000000-0000-4000-8000-00000000000a');
SELECT ok(agent.set_agent_image('f4000000-0000-4000-8000-00000000000a', 'data', 'alice'),
		  'the backend makes data agent A''s default image');
SELECT is((SELECT string_agg(format('%s %s %s', image, coalesce(left(digest, 12), '-'), coalesce(python_version, '-')), ', ' ORDER BY image)
			 FROM agent.available_images() WHERE image IN ('host', 'data')),
		  format('data %s 3.11.9, host - -', left(pg_temp.d('d2'), 12)),
		  'available_images: host, and data at the digest a live runner holds');
SELECT agent.set_tenant(NULL, NULL);
RESET ROLE;
-- the agent's default: runner b holds d2, so the run is bound to d2
SELECT is((SELECT status FROM pg_temp.request('r1')), 'pending_approval', 'the agent''s image: the request is allowed');
SELECT is((SELECT format('%s@%s', image_name, image_digest) FROM pg_temp.inv('r1')),
		  'data@' || pg_temp.d('d2'), 'the invocation is bound to the digest a live runner holds');
SELECT agent.set_tenant('f1000000-0000-4000-8000-00000000000a', 'f2000000-0000-4000-8000-00000000000a');
SELECT is((SELECT format('%s | %s | %s', c.image, c.image_digest, c.runtime) FROM agent.pending_approvals() c
			WHERE c.invocation_id = (pg_temp.inv('r1')).id),
		  format('data@%s | %s | python 3.11.9', left(pg_temp.d('d2'), 12), pg_temp.d('d2')),
		  'the card: image name and short digest, the digest, the interpreter of the manifest');
SELECT agent.set_tenant(NULL, NULL);
SELECT is((SELECT status FROM pg_temp.request('r-host', 'host')), 'pending_approval',
		  'a request may name host against its agent''s image');
SELECT is((SELECT coalesce(image_name, 'host') || ' ' || coalesce(image_digest, '-') FROM pg_temp.inv('r-host')),
		  'host -', '... and runs on the host''s root');

-- ---- the approval binds the digest ------------------------------------------
SELECT pg_temp.approve('r1');
SELECT is((SELECT approved_image_digest FROM agent.approval_requests WHERE invocation_id = (pg_temp.inv('r1')).id),
		  pg_temp.d('d2'), 'the approval records the digest it covers');
SELECT ok(EXISTS (SELECT 1 FROM agent.audit_events WHERE invocation_id = (pg_temp.inv('r1')).id
					AND event_type = 'approval.approved' AND details ->> 'image_digest' = pg_temp.d('d2')),
		  '... and so does its event');
SELECT is(pg_temp.error_of(format('UPDATE agent.invocations SET image_digest = %L WHERE id = %L',
								  pg_temp.d('d1'), (pg_temp.inv('r1')).id)),
		  '55000: cannot change the image of invocation <id>', 'the invocation''s image is frozen');

-- ---- the claim: only a runner holding the digest ------------------------------
SET SESSION AUTHORIZATION tap_img_a;
SELECT is(agent.runner_report_images(pg_temp.rid('a'), pg_temp.inc('a'), jsonb_build_array(pg_temp.img('d1'))),
		  1, 'runner a holds data@d1');
SELECT is(pg_temp.claim('a', 2), '', 'runner a (data@d1) does not take a run bound to data@d2');
RESET SESSION AUTHORIZATION;
-- a run while only a holds d1: bound to d1
SET SESSION AUTHORIZATION tap_img_b;
SELECT is(agent.runner_report_images(pg_temp.rid('b'), pg_temp.inc('b'), '[]'), 0, 'runner b holds nothing for now');
RESET SESSION AUTHORIZATION;
SELECT pg_temp.request('r2');
SELECT is((pg_temp.inv('r2')).image_digest, pg_temp.d('d1'), 'a new request is bound to the digest held now (d1)');
SELECT pg_temp.approve('r2');
SELECT is((SELECT string_agg(format('%s %s', waiting_for, detail), '; ')
			 FROM agent.queue_status() WHERE invocation_id = (pg_temp.inv('r1')).id),
		  format('image_not_held no live runner holds the image data@%s', left(pg_temp.d('d2'), 12)),
		  'queue_status: the run bound to d2 waits, no runner holds it');
SET SESSION AUTHORIZATION tap_img_b;
SELECT is(agent.runner_report_images(pg_temp.rid('b'), pg_temp.inc('b'), jsonb_build_array(pg_temp.img('d2'))),
		  1, 'runner b holds data@d2 again');
SELECT is(pg_temp.claim('b', 2), format('r1=data@%s', left(pg_temp.d('d2'), 12)),
		  'runner b takes the run bound to d2, not the one bound to d1');
RESET SESSION AUTHORIZATION;
SET SESSION AUTHORIZATION tap_img_a;
SELECT is(pg_temp.claim('a', 2), format('r2=data@%s', left(pg_temp.d('d1'), 12)),
		  'runner a takes the run bound to d1');
RESET SESSION AUTHORIZATION;

-- a digest rewritten past the freeze (an owner's doing) is not claimed: it fails, uncharged
SELECT pg_temp.request('r3');
SELECT pg_temp.approve('r3');
ALTER TABLE agent.invocations DISABLE TRIGGER invocations_freeze_image;
UPDATE agent.invocations SET image_digest = pg_temp.d('d3') WHERE id = (pg_temp.inv('r3')).id;
ALTER TABLE agent.invocations ENABLE TRIGGER invocations_freeze_image;
SET SESSION AUTHORIZATION tap_img_b;
SELECT is(pg_temp.claim('b', 2), '', 'a run whose digest is not the approved one is not claimed');
RESET SESSION AUTHORIZATION;
SELECT is((SELECT format('%s %s %s', state, credits_charged, state_reason) FROM pg_temp.inv('r3')),
		  format('provision_failed 0 could not provision: the image of invocation %s is not the one its approval covers',
				 (pg_temp.inv('r3')).id),
		  '... it fails, uncharged, with the reason');

SELECT is((SELECT count(*)::integer FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v
			WHERE o.id::text LIKE 'f1000000-%' AND NOT v.ok), 0, 'every chain verifies');

SELECT * FROM finish();
ROLLBACK;
