-- Logical backup: what pg_dump carries and how pg_restore loads it back
-- (docs/operations.md, "Backup and restore").
--
-- Every table and sequence of the extension holds product data, so every
-- one is marked with pg_extension_config_dump(), whole ('' : no filter).
-- This file runs after every file that creates tables, and marks what it
-- finds, so a table added later is in the dump without a line here; the
-- block is replayed on upgrade (scripts/sql-replay.pl, DO $replay$).
--
-- A restore runs in session_replication_role = replica (one command:
--   PGOPTIONS='-c session_replication_role=replica' pg_restore -1 -d DB FILE).
-- That switches off the ordinary triggers and the foreign-key checks while
-- the dumped rows are loaded, so nothing is applied twice: the ledger's
-- trigger does not fold the ledger into balances restored as they were,
-- a restored org does not get a second usage row nor a restored audit
-- event a second count in it (21_audit_usage.sql), the state machine's and
-- the request freeze's guards do not judge restored rows.  The append-only
-- guards of the ledger and the audit trail stay on (ENABLE ALWAYS) and
-- refuse UPDATE, DELETE and TRUNCATE there too; a restore only inserts.
-- Two things need a rule of their own in replica mode:
--   * audit_heads: its guard (src/audit.c) leaves an INSERT in replica
--     mode to the trigger below, which admits a tip only when it is the
--     one the org's (already restored) audit events imply; UPDATE and
--     DELETE stay refused, and a tip that exists is a primary-key conflict;
--   * the rows the install script writes (settings, plans, runtimes) are
--     dumped too, so an operator's values survive; in replica mode the
--     dumped row replaces the one CREATE EXTENSION just wrote (the triggers
--     below), instead of failing on its key.
-- And the install script schedules no pg_cron job in replica mode: the
-- dump of cron.job (pg_cron's own config table) brings them back.

-- In replica mode only (ENABLE REPLICA): a restored tip must be the tip of
-- the org's restored events (pg_dump writes agent.audit_events before
-- agent.audit_heads), and the org must have some.  prev_hash is the hash
-- before the last ('' for fewer than two events), as agent._audit leaves
-- it.
CREATE FUNCTION agent._audit_heads_restore_check() RETURNS trigger
	LANGUAGE plpgsql
AS $$
DECLARE
	v_events	bigint;
	v_last_id	bigint;
	v_last_hash	text;
	v_prev_hash	text;
BEGIN
	SELECT count(*), coalesce(max(e.id), 0) INTO v_events, v_last_id
	  FROM agent.audit_events e WHERE e.org_id = NEW.org_id;
	SELECT coalesce((SELECT e.hash FROM agent.audit_events e WHERE e.org_id = NEW.org_id
					  ORDER BY e.id DESC LIMIT 1), ''),
		   coalesce((SELECT e.hash FROM agent.audit_events e WHERE e.org_id = NEW.org_id
					  ORDER BY e.id DESC OFFSET 1 LIMIT 1), '')
	  INTO v_last_hash, v_prev_hash;
	-- A committed tip always has events (the first append creates the tip
	-- in its own transaction), so a tip of an org without events is forged.
	IF v_events = 0 OR (NEW.events, NEW.last_id, NEW.last_hash, NEW.prev_hash)
		IS DISTINCT FROM (v_events, v_last_id, v_last_hash, v_prev_hash) THEN
		RAISE EXCEPTION 'cannot insert into agent.audit_heads: the tip does not match the org''s audit events'
			USING ERRCODE = 'insufficient_privilege',
				  DETAIL = format('Org %s has %s events ending at event %s.', NEW.org_id, v_events, v_last_id),
				  HINT = 'A restore loads agent.audit_events before agent.audit_heads; a tip moves otherwise only with an append.';
	END IF;
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION agent._audit_heads_restore_check() IS
	'restore (session_replication_role = replica): admit an audit tip only when it is the tip of the org''s events';
CREATE TRIGGER audit_heads_restore_check
	BEFORE INSERT ON agent.audit_heads
	FOR EACH ROW EXECUTE FUNCTION agent._audit_heads_restore_check();
ALTER TABLE agent.audit_heads ENABLE REPLICA TRIGGER audit_heads_restore_check;

-- In replica mode only (ENABLE REPLICA): a row inserted with the key of an
-- existing row replaces it.  TG_ARGV[0] names the key column.
CREATE FUNCTION agent._restore_replaces_row() RETURNS trigger
	LANGUAGE plpgsql
AS $$
BEGIN
	EXECUTE format('DELETE FROM %I.%I WHERE %I::text = $1', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0])
		USING pg_catalog.to_jsonb(NEW) ->> TG_ARGV[0];
	RETURN NEW;
END
$$;
COMMENT ON FUNCTION agent._restore_replaces_row() IS
	'restore (session_replication_role = replica): a dumped row replaces the install script''s row with its key';

CREATE TRIGGER settings_restore_replaces_row
	BEFORE INSERT ON agent.settings
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('key');
CREATE TRIGGER plans_restore_replaces_row
	BEFORE INSERT ON agent.plans
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('plan');
CREATE TRIGGER runtimes_restore_replaces_row
	BEFORE INSERT ON agent.runtimes
	FOR EACH ROW EXECUTE FUNCTION agent._restore_replaces_row('language');
ALTER TABLE agent.settings ENABLE REPLICA TRIGGER settings_restore_replaces_row;
ALTER TABLE agent.plans ENABLE REPLICA TRIGGER plans_restore_replaces_row;
ALTER TABLE agent.runtimes ENABLE REPLICA TRIGGER runtimes_restore_replaces_row;

-- After a restore (or a promotion, docs/operations.md): what the dump
-- carries over from the source server but describes the source, not this
-- one.
--   * cron.job: pg_cron stores per job the server its task connects to
--     (nodename, nodeport: cron.host and the port of the server that
--     scheduled it) and the database.  The restored rows keep the source's,
--     so the maintenance jobs would prune, expire and reap on the source
--     server, or fail to connect.  They are pointed at this server
--     (agent._point_maintenance_jobs, 44_maintenance.sql: the host it is
--     reached at from its own host, its port, this database); the
--     schedule, command, user and active flag (an operator's choices) are
--     kept.
--   * agent.runtimes: the versions the source host probed; probed again
--     here (agent.refresh_runtimes(): superuser, COPY FROM PROGRAM).
-- The export's slot cannot be carried over: the last step only says
-- whether agent.export_resync() is due.  Idempotent; the owner's.
CREATE FUNCTION agent.after_restore()
	RETURNS TABLE (step text, detail text)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	p	record;
BEGIN
	IF pg_catalog.current_setting('session_replication_role') = 'replica' THEN
		RAISE EXCEPTION 'cannot run agent.after_restore() in session_replication_role = replica'
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Run it in a new session after pg_restore has committed.';
	END IF;

	step := 'cron_jobs';
	SELECT * INTO p FROM agent._point_maintenance_jobs();
	detail := CASE WHEN p.jobs IS NULL THEN 'pg_cron is not installed in this database'
				   ELSE pg_catalog.format('%s of %s maintenance jobs re-pointed to host %s port %s database %s',
										  p.moved, p.jobs, p.host, p.port, pg_catalog.current_database()) END;
	RETURN NEXT;

	step := 'runtimes';
	SELECT pg_catalog.string_agg(r.language || ' ' || r.version
								 || CASE WHEN r.probed THEN '' ELSE ' (not probed: kept)' END,
								 ', ' ORDER BY r.language)
	  INTO detail FROM agent.refresh_runtimes() r;
	RETURN NEXT;

	step := 'export';
	detail := CASE
		WHEN NOT EXISTS (SELECT 1 FROM agent.export_state e) THEN 'not set up'
		WHEN EXISTS (SELECT 1 FROM agent.export_state e
					  WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s
										 WHERE s.slot_name = e.slot_name))
			THEN 'the export slot does not exist on this server: run SELECT agent.export_resync()'
		ELSE 'the export slot exists' END;
	RETURN NEXT;
END
$$;
COMMENT ON FUNCTION agent.after_restore() IS
	'after a restore or a promotion: re-point the maintenance jobs to this server, probe the runtimes, say whether the export needs a resync';
REVOKE ALL ON FUNCTION agent.after_restore() FROM PUBLIC;

-- Mark every table and sequence of the extension for pg_dump.
DO $replay$
DECLARE
	r record;
BEGIN
	FOR r IN
		SELECT c.oid::pg_catalog.regclass AS rel
		  FROM pg_catalog.pg_class c
		  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
		   AND d.objid = c.oid AND d.deptype = 'e'
		  JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid AND x.extname = 'sandbox_ext'
		 WHERE c.relnamespace = 'agent'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p', 'S')
		 ORDER BY c.relname
	LOOP
		PERFORM pg_catalog.pg_extension_config_dump(r.rel, '');
	END LOOP;
END
$replay$;
