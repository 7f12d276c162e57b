-- The audit trail: append-only for everyone, one hash chain per org, and
-- agent.verify_audit_chain() naming the first broken link.
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	-- Ids are random: keep them out of the expected output.
	RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}', '<id>', 'g');
END
$$;

INSERT INTO agent.orgs (id, name, plan) VALUES
	('a4000000-0000-4000-8000-000000000001', 'Audited', 'pro'),
	('a4000000-0000-4000-8000-000000000002', 'Neighbour', 'pro');
INSERT INTO agent.workspaces (id, org_id, name) VALUES
	('b4000000-0000-4000-8000-000000000001', 'a4000000-0000-4000-8000-000000000001', 'ws');

-- Events interleaved across two orgs: each org gets its own linear chain.
SELECT agent._audit('a4000000-0000-4000-8000-000000000001', 'b4000000-0000-4000-8000-000000000001',
					'test.event', NULL, 'tester', jsonb_build_object('n', n)) > 0 AS appended
  FROM generate_series(1, 3) n;
SELECT agent._audit('a4000000-0000-4000-8000-000000000002', NULL, 'test.event', NULL, 'tester', '{"n": 1}') > 0 AS appended;
SELECT agent._audit('a4000000-0000-4000-8000-000000000001', NULL, 'test.event', NULL, 'tester', NULL) > 0 AS appended;
SELECT row_number() OVER (ORDER BY id) AS n, prev_hash IS NULL AS first,
	   prev_hash = lag(hash) OVER (ORDER BY id) AS linked, length(hash) AS hash_len, details
  FROM agent.audit_events WHERE org_id = 'a4000000-0000-4000-8000-000000000001' ORDER BY id;
SELECT * FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
SELECT * FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000002');
-- An org nobody knows (no row, no event, no tip, no anchor) is P0002, not an
-- empty chain that verifies.
SELECT pg_temp.sqlstate_of($$SELECT agent.verify_audit_chain('00000000-0000-4000-8000-000000000000')$$);
SELECT pg_temp.sqlstate_of($$SELECT agent.verify_audit_chain(NULL)$$);
SELECT pg_temp.sqlstate_of($$SELECT agent._audit(NULL, NULL, 'x', NULL, NULL, NULL)$$);

-- UPDATE, DELETE and TRUNCATE are refused, the owner included.
SELECT pg_temp.sqlstate_of($$UPDATE agent.audit_events SET actor = 'nobody' WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.audit_events WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$TRUNCATE agent.audit_events$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.audit_heads WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);

-- Replica mode, which switches ordinary triggers off, opens none of them:
-- the append-only triggers and the head's guard are ENABLE ALWAYS.
BEGIN;
SET LOCAL session_replication_role = replica;
SELECT pg_temp.sqlstate_of($$UPDATE agent.audit_events SET actor = 'nobody' WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.audit_events WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$TRUNCATE agent.audit_events$$);
SELECT pg_temp.sqlstate_of($$UPDATE agent.audit_heads SET events = events + 1 WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.audit_heads WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);
-- (a restore inserts tips in replica mode, 98_backup.sql: only the tip the
-- org's events imply; a forged one is refused)
SELECT pg_temp.sqlstate_of($$INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events) VALUES ('a4000000-0000-4000-8000-0000000000ff', 7, 'forged', 7)$$);
SELECT pg_temp.sqlstate_of($$UPDATE agent.credit_ledger SET amount = amount + 1$$);
SELECT pg_temp.sqlstate_of($$DELETE FROM agent.credit_ledger$$);
ROLLBACK;
-- The owner cannot move a tip by hand either, not even by one event.
SELECT pg_temp.sqlstate_of($$UPDATE agent.audit_heads SET events = events + 1, prev_hash = last_hash, last_id = last_id + 1 WHERE org_id = 'a4000000-0000-4000-8000-000000000001'$$);

-- Tampering past the triggers (a superuser switching them off) is caught:
-- changed content, a removed middle event, a removed last event, a forged
-- re-hash of one event.
CREATE TEMP TABLE ev AS
SELECT row_number() OVER (ORDER BY id) AS n, id FROM agent.audit_events
 WHERE org_id = 'a4000000-0000-4000-8000-000000000001';
BEGIN;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
UPDATE agent.audit_events SET details = '{"n": 42}' WHERE id = (SELECT id FROM ev WHERE n = 2);
SELECT ok, events_checked, broken_event_id = (SELECT id FROM ev WHERE n = 2) AS at_2, problem
  FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
ROLLBACK;
BEGIN;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
DELETE FROM agent.audit_events WHERE id = (SELECT id FROM ev WHERE n = 2);
SELECT ok, events_checked, broken_event_id = (SELECT id FROM ev WHERE n = 3) AS at_3, problem
  FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
ROLLBACK;
BEGIN;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
DELETE FROM agent.audit_events WHERE id = (SELECT id FROM ev WHERE n = 4);
SELECT ok, events_checked, broken_event_id = (SELECT id FROM ev WHERE n = 4) AS at_4, problem
  FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
ROLLBACK;
BEGIN;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
UPDATE agent.audit_events e
   SET actor = 'forger',
	   hash = agent._audit_hash(e.hash_version, e.prev_hash, e.id, e.org_id, e.workspace_id, e.event_type,
								e.invocation_id, 'forger', e.details, e.created_at)
 WHERE id = (SELECT id FROM ev WHERE n = 1);
SELECT ok, events_checked, broken_event_id = (SELECT id FROM ev WHERE n = 2) AS at_2, problem
  FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
ROLLBACK;
SELECT ok, events_checked FROM agent.verify_audit_chain('a4000000-0000-4000-8000-000000000001');
-- The chains of every org the earlier tests touched are intact.
SELECT o.name, v.ok, v.problem
  FROM agent.orgs o, agent.verify_audit_chain(o.id) v
 WHERE o.name IN ('Acme', 'Freebie', 'Approvers', 'Other', 'Payer') ORDER BY o.name;
