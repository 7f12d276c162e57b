-- The audit trail: append-only for every role (the owner included), a
-- linear hash chain per org, and verify_audit_chain() finding tampering.
BEGIN;
SELECT plan(37);
GRANT ALL ON ALL TABLES IN SCHEMA pg_temp TO PUBLIC;
GRANT ALL ON ALL SEQUENCES IN SCHEMA pg_temp TO PUBLIC;

INSERT INTO agent.orgs (id, name, plan) VALUES ('ae000000-0000-4000-8000-000000000001', 'Tap audit', 'pro');
CREATE TEMP TABLE ev AS
SELECT n, agent._audit('ae000000-0000-4000-8000-000000000001', NULL, 'tap.event', NULL, 'tap',
					   jsonb_build_object('n', n)) AS id
  FROM generate_series(1, 5) n;
GRANT ALL ON ev TO PUBLIC;
CREATE TEMP TABLE granted AS SELECT agent.grant_credits('ae000000-0000-4000-8000-000000000001', 5, 'tap') AS balance;

SELECT is((SELECT count(*) FROM agent.audit_events
			WHERE org_id = 'ae000000-0000-4000-8000-000000000001'), 6::bigint, 'five events appended (and one for the grant)');
SELECT is((SELECT count(*) FROM (
			SELECT prev_hash = lag(hash) OVER (ORDER BY id) AS linked
			  FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-000000000001') s
			WHERE linked), 5::bigint, 'each event links to its predecessor');
SELECT results_eq($$SELECT ok, events_checked FROM agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	$$VALUES (true, 6::bigint)$$, 'the chain verifies');

-- The owner is refused too.
SELECT throws_ok($$UPDATE agent.audit_events SET actor = 'x' WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'the owner cannot update an audit event');
SELECT throws_ok($$DELETE FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'the owner cannot delete an audit event');
SELECT throws_ok($$TRUNCATE agent.audit_events$$, '42501', NULL, 'the owner cannot truncate audit events');
SELECT throws_ok($$UPDATE agent.credit_ledger SET amount = amount WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$, '42501', NULL,
	'the owner cannot update the ledger');

-- Roles.
SET ROLE agent_backend;
SELECT agent.set_tenant('ae000000-0000-4000-8000-000000000001', NULL);
SELECT throws_ok($$UPDATE agent.audit_events SET actor = 'x'$$, '42501', NULL, 'the backend cannot update an audit event');
SELECT throws_ok($$SELECT agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	'42501', NULL, 'chain verification is for auditors');
RESET ROLE;
SET ROLE agent_auditor;
SELECT throws_ok($$DELETE FROM agent.audit_events$$, '42501', NULL, 'the auditor cannot delete an audit event');
SELECT results_eq($$SELECT ok FROM agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	$$VALUES (true)$$, 'the auditor verifies the chain');
RESET ROLE;

-- Replica mode does not open the append-only tables: their triggers are
-- ENABLE ALWAYS, and agent.audit_heads moves only with an append.
SAVEPOINT replica;
SET LOCAL session_replication_role = replica;
SELECT throws_ok($$UPDATE agent.audit_events SET actor = 'x' WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'replica mode: an audit event cannot be updated');
SELECT throws_ok($$DELETE FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'replica mode: an audit event cannot be deleted');
SELECT throws_ok($$UPDATE agent.audit_heads SET last_hash = 'x' WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'replica mode: an audit head cannot be updated');
SELECT throws_ok($$DELETE FROM agent.audit_heads WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'replica mode: an audit head cannot be deleted');
SELECT throws_ok($$INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events) VALUES (gen_random_uuid(), 3, 'forged', 3)$$,
	'42501', NULL, 'replica mode: a forged audit head cannot be inserted');
SELECT throws_ok($$INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events, prev_hash)
	SELECT org_id, last_id, last_hash, events, prev_hash FROM agent.audit_heads WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'23505', NULL, 'replica mode: an existing tip cannot be inserted again');
-- What a restore does (98_backup.sql): the events first, then the tip they
-- imply, which is admitted.
INSERT INTO agent.orgs (id, name, plan) VALUES ('ae000000-0000-4000-8000-0000000000aa', 'Tap restored', 'pro');
INSERT INTO agent.audit_events (id, org_id, event_type, prev_hash, hash) VALUES
	(900000001, 'ae000000-0000-4000-8000-0000000000aa', 'tap.restored', NULL, 'h1'),
	(900000002, 'ae000000-0000-4000-8000-0000000000aa', 'tap.restored', 'h1', 'h2');
SELECT lives_ok($$INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events, prev_hash)
	VALUES ('ae000000-0000-4000-8000-0000000000aa', 900000002, 'h2', 2, 'h1')$$,
	'replica mode: the tip a restore brings with its events is admitted');
SELECT throws_ok($$UPDATE agent.credit_ledger SET amount = amount + 1 WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	'42501', NULL, 'replica mode: the ledger cannot be updated');
ROLLBACK TO SAVEPOINT replica;
SELECT is(ARRAY(SELECT tgrelid::regclass::text || '.' || tgname FROM pg_trigger
				 WHERE tgrelid IN ('agent.audit_events'::regclass, 'agent.audit_heads'::regclass,
								   'agent.credit_ledger'::regclass)
				   AND NOT tgisinternal AND tgenabled <> 'A'
				   AND tgname NOT IN ('credit_ledger_apply', 'audit_heads_restore_check',
									  'audit_events_count')),
		  '{}'::text[], 'every append-only trigger of the audit trail and the ledger is ENABLE ALWAYS');
-- (like the ledger's fold into balances: a restore loads org_usage as it
-- was, so the restored events must not be counted again)
SELECT is((SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'agent.audit_events'::regclass
			  AND tgname = 'audit_events_count'),
		  'O', 'the count of an event against its org''s storage does not fire in replica mode');
SELECT is((SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'agent.audit_heads'::regclass
			  AND tgname = 'audit_heads_restore_check'),
		  'R', 'the restore check of a tip fires in replica mode only (ENABLE REPLICA)');
SELECT is(agent._audit('ae000000-0000-4000-8000-000000000001', NULL, 'tap.event', NULL, 'tap', '{"n": 6}') > 0,
		  true, 'the append path still moves the head');

-- Tampering with the triggers off (superuser only) is found, at the right event.
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
UPDATE agent.audit_events SET details = '{"n": 300}' WHERE id = (SELECT id FROM ev WHERE n = 3);
SELECT results_eq($$SELECT ok, broken_event_id FROM agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	$$SELECT false, id FROM ev WHERE n = 3$$, 'a changed event breaks the chain at that event');
UPDATE agent.audit_events SET details = '{"n": 3}' WHERE id = (SELECT id FROM ev WHERE n = 3);
SELECT results_eq($$SELECT ok FROM agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	$$VALUES (true)$$, 'restoring the content restores the chain');
DELETE FROM agent.audit_events WHERE id = (SELECT id FROM ev WHERE n = 1);
SELECT results_eq($$SELECT ok, broken_event_id, problem FROM agent.verify_audit_chain('ae000000-0000-4000-8000-000000000001')$$,
	$$SELECT false, id, 'the first event of the chain has a predecessor hash' FROM ev WHERE n = 2$$,
	'a removed first event is found');
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_append_only;

-- The re-split of issue 27, as a superuser covering tracks would do it:
-- the details moved into the actor behind the version 1 separator, the
-- column's NOT NULL dropped and details made NULL.  A version 2 event's
-- hash frames every field, so the change is found at that event.
INSERT INTO agent.orgs (id, name, plan) VALUES ('ae000000-0000-4000-8000-0000000000b2', 'Tap v2', 'pro');
CREATE TEMP TABLE v2 AS
SELECT n, agent._audit('ae000000-0000-4000-8000-0000000000b2', NULL, 'tap.event', NULL, 'tap',
					   jsonb_build_object('n', n)) AS id
  FROM generate_series(1, 3) n;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
ALTER TABLE agent.audit_events ALTER COLUMN details DROP NOT NULL;
UPDATE agent.audit_events SET actor = actor || E'\x1f' || details::text, details = NULL
 WHERE id = (SELECT id FROM v2 WHERE n = 2);
SELECT results_eq($$SELECT ok, broken_event_id, problem FROM agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000b2')$$,
	$$SELECT false, id, 'the event''s content does not match its hash' FROM v2 WHERE n = 2$$,
	'a version 2 event whose details were re-split into its actor is found');
UPDATE agent.audit_events SET actor = 'tap', details = '{"n": 2}' WHERE id = (SELECT id FROM v2 WHERE n = 2);

-- Events appended before 0.3.0 carry version 1.  Made here by re-hashing
-- an org's first three events with version 1 (what an upgraded database
-- holds; test/suites/upgrade.sh has the real thing).
CREATE FUNCTION pg_temp.rehash(o uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE e record; p text := NULL; lp text := ''; n bigint := 0; l bigint;
BEGIN
	FOR e IN SELECT * FROM agent.audit_events WHERE org_id = o ORDER BY id LOOP
		lp := coalesce(p, '');
		UPDATE agent.audit_events a
		   SET prev_hash = p,
			   hash = agent._audit_hash(a.hash_version, p, a.id, a.org_id, a.workspace_id, a.event_type,
										a.invocation_id, a.actor, a.details, a.created_at)
		 WHERE a.id = e.id RETURNING a.hash INTO p;
		n := n + 1; l := e.id;
	END LOOP;
	UPDATE agent.audit_heads SET last_id = l, last_hash = p, prev_hash = lp, events = n WHERE org_id = o;
END $$;
INSERT INTO agent.orgs (id, name, plan) VALUES ('ae000000-0000-4000-8000-0000000000b1', 'Tap v1', 'pro');
CREATE TEMP TABLE v1 AS
SELECT n, agent._audit('ae000000-0000-4000-8000-0000000000b1', NULL, 'tap.event', NULL, 'tap',
					   jsonb_build_object('n', n)) AS id
  FROM generate_series(1, 3) n;
ALTER TABLE agent.audit_heads DISABLE TRIGGER audit_heads_guard;
UPDATE agent.audit_events SET hash_version = 1 WHERE org_id = 'ae000000-0000-4000-8000-0000000000b1';
SELECT pg_temp.rehash('ae000000-0000-4000-8000-0000000000b1');
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_guard;
SELECT is(agent._audit('ae000000-0000-4000-8000-0000000000b1', NULL, 'tap.event', NULL, 'tap', '{"n": 4}') > 0,
		  true, 'a version 2 event is appended after version 1 events');
SELECT results_eq($$SELECT ok, events_checked FROM agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000b1')$$,
	$$VALUES (true, 4::bigint)$$, 'a chain of version 1 events continued with version 2 verifies');
SELECT is(ARRAY(SELECT hash_version FROM agent.audit_events
				 WHERE org_id = 'ae000000-0000-4000-8000-0000000000b1' ORDER BY id),
		  '{1,1,1,2}'::smallint[], 'each event keeps the version it was hashed with');
-- The same re-split on a version 1 event keeps its hash: found because its
-- input now has more than one reading.
UPDATE agent.audit_events SET actor = actor || E'\x1f' || details::text, details = NULL
 WHERE id = (SELECT id FROM v1 WHERE n = 2);
SELECT is((SELECT hash = agent._audit_hash(1, prev_hash, id, org_id, workspace_id, event_type,
										   invocation_id, actor, details, created_at)
			 FROM agent.audit_events WHERE id = (SELECT id FROM v1 WHERE n = 2)),
		  true, '(control) the re-split version 1 event still matches its hash');
SELECT results_eq($$SELECT ok, broken_event_id, problem FROM agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000b1')$$,
	$$SELECT false, id, 'the event''s version 1 hash input has more than one reading (a field holds the separator, or a field was made NULL): its content was changed'
		FROM v1 WHERE n = 2$$,
	'a re-split version 1 event is found');
UPDATE agent.audit_events SET actor = 'tap', details = '{"n": 2}' WHERE id = (SELECT id FROM v1 WHERE n = 2);
ALTER TABLE agent.audit_events ALTER COLUMN details SET NOT NULL;
-- A version 2 event turned into version 1 (re-hashed, head moved) is found.
ALTER TABLE agent.audit_heads DISABLE TRIGGER audit_heads_guard;
UPDATE agent.audit_events SET hash_version = 1
 WHERE id = (SELECT max(id) FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-0000000000b1');
SELECT pg_temp.rehash('ae000000-0000-4000-8000-0000000000b1');
SELECT results_eq($$SELECT ok FROM agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000b1')$$,
	$$VALUES (true)$$, '(control) an all version 1 chain verifies');
SELECT agent._audit('ae000000-0000-4000-8000-0000000000b1', NULL, 'tap.event', NULL, 'tap', '{"n": 5}');
UPDATE agent.audit_events SET hash_version = 1
 WHERE id = (SELECT max(id) FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-0000000000b1');
UPDATE agent.audit_events SET hash_version = 2
 WHERE id = (SELECT id FROM v1 WHERE n = 3);
SELECT pg_temp.rehash('ae000000-0000-4000-8000-0000000000b1');
ALTER TABLE agent.audit_heads ENABLE ALWAYS TRIGGER audit_heads_guard;
SELECT results_eq($$SELECT ok, problem FROM agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000b1')$$,
	$$VALUES (false, 'the event has audit hash version 1 after an event of version 2')$$,
	'a version 1 event after a version 2 event is found');
ALTER TABLE agent.audit_events ENABLE ALWAYS TRIGGER audit_events_append_only;

-- An org nobody knows is not an empty chain that verifies (issue 27: it
-- said ok with 0 events).
SELECT throws_ok($$SELECT agent.verify_audit_chain('ae000000-0000-4000-8000-0000000000ff')$$,
	'P0002', 'org ae000000-0000-4000-8000-0000000000ff does not exist', 'an unknown org is P0002');

-- Concurrent-safe appends: the head row serialises them (see the isolation
-- test audit-chain); here, the head always names the last event.
SELECT results_eq($$SELECT last_id FROM agent.audit_heads WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$,
	$$SELECT max(id) FROM agent.audit_events WHERE org_id = 'ae000000-0000-4000-8000-000000000001'$$, 'the chain''s tip is its last event');
SELECT is((SELECT count(*) FROM agent.audit_events e JOIN agent.audit_events f
			ON f.org_id = e.org_id AND f.prev_hash = e.hash AND f.id <> e.id
		   GROUP BY e.id ORDER BY count(*) DESC LIMIT 1), 1::bigint,
	'no event has two successors (the chains never fork)');

SELECT * FROM finish();
ROLLBACK;
