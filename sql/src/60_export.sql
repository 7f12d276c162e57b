-- sandbox_ext install script, part 60: export of agent.tool_invocations and
-- agent.egress_connections to ClickHouse through logical replication
-- (docs/export.md).
--
-- Nothing here depends on the exported tables existing yet: the
-- publication, replica identity and wake-up triggers are created by
-- agent.export_setup(), which the exporter worker calls when
-- sandbox.clickhouse_url is set; the worker then creates the slot (in a
-- transaction of its own, as PostgreSQL requires) and copies the tables.
-- The publication keeps 0.1.0's name, sandbox_ext_tool_invocations, for
-- the slots that already decode with it.

-- One row per export slot: when the slot was created and the state of the
-- tables' copy that follows a slot creation (initial export or resync) or
-- the addition of a table to the publication: the copy goes through the
-- tables in order (tool_invocations, then egress_connections), with a
-- keyset cursor in each.
CREATE TABLE agent.export_state (
	slot_name        name PRIMARY KEY,
	slot_created_at  timestamptz,
	copy_lsn         pg_lsn,             -- not null while a copy is pending
	copy_after       uuid,               -- keyset cursor of the copy: invocation_id
	copied_rows      bigint NOT NULL DEFAULT 0,
	resync_requested boolean NOT NULL DEFAULT false,
	copy_relation    text CHECK (copy_relation IN ('tool_invocations', 'egress_connections')),
	                                     -- the table the copy is at (NULL: tool_invocations)
	copy_after_seq   integer             -- and seq, in egress_connections
);
COMMENT ON TABLE agent.export_state IS
	'ClickHouse export: slot creation and table copy progress, per slot (maintained by the exporter)';
SELECT pg_catalog.pg_extension_config_dump('agent.export_state', '');

CREATE FUNCTION agent._export_wake_trigger() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_export_wake_trigger'
	LANGUAGE C;

CREATE FUNCTION agent._export_wake(reset boolean DEFAULT false) RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_export_wake'
	LANGUAGE C VOLATILE STRICT;

CREATE FUNCTION agent._export_worker_state(
	OUT state text, OUT pid integer, OUT rows_exported bigint, OUT batches bigint,
	OUT exported_lsn pg_lsn, OUT last_success timestamptz, OUT last_error text,
	OUT last_error_at timestamptz, OUT oldest_pending timestamptz,
	OUT retry_at timestamptz, OUT txns_skipped bigint, OUT anchors_published bigint,
	OUT last_anchor_at timestamptz)
	AS 'MODULE_PATHNAME', 'sandbox_export_worker_state'
	LANGUAGE C VOLATILE STRICT;

-- Create what the export needs in PostgreSQL, idempotently: the
-- publication of both tables (insert, update, delete; TRUNCATE is not
-- mirrored), REPLICA IDENTITY FULL (so a delete carries org and workspace,
-- the ClickHouse key), the commit-time wake-up triggers, and the
-- export_state row.  The slot itself is created by the exporter right
-- after, and the copy that follows its creation covers both tables.
--
-- A table added to the publication of a running export (an upgrade from
-- 0.1.0 adds agent.egress_connections) is locked against writers while it
-- is added: every transaction that wrote it before has committed, and is
-- in the snapshot of a copy read after this commits; every later one is
-- decoded with the table published.  A copy from the added table on is
-- recorded with the current WAL position as its version (above everything
-- streamed before, below everything streamed after this commit); a copy
-- still pending at an earlier table keeps its place.
CREATE FUNCTION agent.export_setup() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
	v_done text[] := '{}'::text[];
	v_tables text[] := ARRAY['tool_invocations', 'egress_connections'];
	v_added text;
	t text;
BEGIN
	FOREACH t IN ARRAY v_tables LOOP
		IF to_regclass('agent.' || t) IS NULL THEN
			RAISE EXCEPTION 'relation "agent.%" does not exist', t
				USING ERRCODE = 'undefined_table',
				      HINT = 'The export starts once the table exists.';
		END IF;
	END LOOP;
	IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'sandbox_ext_tool_invocations') THEN
		CREATE PUBLICATION sandbox_ext_tool_invocations
			FOR TABLE agent.tool_invocations, agent.egress_connections
			WITH (publish = 'insert, update, delete');
		v_done := v_done || 'publication'::text;
	ELSE
		FOREACH t IN ARRAY v_tables LOOP
			IF NOT EXISTS (SELECT 1 FROM pg_publication_tables p
			                WHERE p.pubname = 'sandbox_ext_tool_invocations'
			                  AND p.schemaname = 'agent' AND p.tablename = t) THEN
				EXECUTE format('LOCK TABLE agent.%I IN SHARE MODE', t);
				EXECUTE format('ALTER PUBLICATION sandbox_ext_tool_invocations ADD TABLE agent.%I', t);
				v_done := v_done || ('publication table ' || t);
				v_added := coalesce(v_added, t);
			END IF;
		END LOOP;
	END IF;
	FOREACH t IN ARRAY v_tables LOOP
		IF (SELECT relreplident FROM pg_class WHERE oid = to_regclass('agent.' || t)) <> 'f' THEN
			EXECUTE format('ALTER TABLE agent.%I REPLICA IDENTITY FULL', t);
			v_done := v_done || ('replica identity full on ' || t);
		END IF;
		IF NOT EXISTS (SELECT 1 FROM pg_trigger
		                WHERE tgrelid = to_regclass('agent.' || t)
		                  AND tgname = t || '_export_wake') THEN
			EXECUTE format('CREATE TRIGGER %I AFTER INSERT OR UPDATE OR DELETE ON agent.%I
			                FOR EACH STATEMENT EXECUTE FUNCTION agent._export_wake_trigger()',
			               t || '_export_wake', t);
			v_done := v_done || ('trigger on ' || t);
		END IF;
	END LOOP;
	INSERT INTO agent.export_state (slot_name) VALUES (v_slot)
		ON CONFLICT (slot_name) DO NOTHING;
	IF v_added IS NOT NULL THEN
		-- A slot that exists already: the added table's rows so far are
		-- copied, with versions above everything streamed before this and
		-- below everything after.  A copy still at an earlier table keeps
		-- its place; one at or past the added table starts it again.
		UPDATE agent.export_state e
		   SET copy_lsn = pg_current_wal_insert_lsn(),
		       copy_relation = CASE WHEN k.keep_place THEN 'tool_invocations' ELSE v_added END,
		       copy_after = CASE WHEN k.keep_place THEN e.copy_after END,
		       copy_after_seq = CASE WHEN k.keep_place THEN e.copy_after_seq END
		  FROM (SELECT x.copy_lsn IS NOT NULL AND v_added = 'egress_connections'
		               AND coalesce(x.copy_relation, 'tool_invocations') = 'tool_invocations' AS keep_place
		          FROM agent.export_state x WHERE x.slot_name = v_slot) k
		 WHERE e.slot_name = v_slot AND e.slot_created_at IS NOT NULL;
		IF FOUND THEN
			v_done := v_done || ('copy from ' || v_added);
		END IF;
	END IF;
	PERFORM agent._export_wake();
	RETURN CASE WHEN cardinality(v_done) = 0 THEN 'export objects already in place'
	            ELSE 'created: ' || array_to_string(v_done, ', ') END;
END
$$;
COMMENT ON FUNCTION agent.export_setup() IS
	'create the publication, replica identity and wake-up triggers of the ClickHouse export (idempotent)';

-- Recreate the slot and copy the whole tables to ClickHouse again: the way
-- back after the slot was lost (wal_status = lost) or dropped.  The
-- exporter does the work; the call returns at once.
CREATE FUNCTION agent.export_resync() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
BEGIN
	INSERT INTO agent.export_state AS e (slot_name, resync_requested) VALUES (v_slot, true)
		ON CONFLICT (slot_name) DO UPDATE SET resync_requested = true;
	-- At commit: wake the exporter and clear the error state that sent the
	-- caller here (a lost or missing slot), once the request is visible.
	PERFORM agent._export_wake(true);
	RETURN format('resync of slot %s requested: the exporter recreates it and copies agent.tool_invocations and agent.egress_connections', v_slot);
END
$$;
COMMENT ON FUNCTION agent.export_resync() IS
	'recreate the export slot and re-copy the exported tables to ClickHouse';

-- Remove the export's PostgreSQL objects: the slot (which otherwise keeps
-- WAL forever), the publication, the triggers and the state row.  Turn the
-- exporter off first, or it would create them again.
CREATE FUNCTION agent.export_drop() RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
	v_slot name := current_setting('sandbox.export_slot')::name;
BEGIN
	IF current_setting('sandbox.clickhouse_url') <> '' THEN
		RAISE EXCEPTION 'cannot drop the export objects while the exporter is on'
			USING ERRCODE = 'object_in_use',
			      HINT = 'ALTER SYSTEM RESET sandbox.clickhouse_url; SELECT pg_reload_conf(); then call this again.';
	END IF;
	PERFORM pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = v_slot;
	DROP PUBLICATION IF EXISTS sandbox_ext_tool_invocations;
	IF to_regclass('agent.tool_invocations') IS NOT NULL THEN
		DROP TRIGGER IF EXISTS tool_invocations_export_wake ON agent.tool_invocations;
	END IF;
	IF to_regclass('agent.egress_connections') IS NOT NULL THEN
		DROP TRIGGER IF EXISTS egress_connections_export_wake ON agent.egress_connections;
	END IF;
	DELETE FROM agent.export_state WHERE slot_name = v_slot;
	RETURN format('dropped slot %s, publication sandbox_ext_tool_invocations and the wake-up triggers', v_slot);
END
$$;
COMMENT ON FUNCTION agent.export_drop() IS
	'drop the ClickHouse export slot, publication and triggers (exporter must be off)';

CREATE FUNCTION agent.export_reset() RETURNS boolean
	AS 'MODULE_PATHNAME', 'sandbox_export_reset'
	LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION agent.export_reset() IS
	'leave the error or backoff state of the ClickHouse exporter and retry now';

-- The export as an operator sees it.  lag_bytes is WAL the slot still
-- holds; lag_seconds is the age of the oldest committed change to an
-- exported table not yet in ClickHouse (0 when caught up);
-- anchors_published and last_anchor_at tell the audit anchors' progress.
CREATE FUNCTION agent.export_status(
	OUT slot_name name, OUT state text, OUT exporter_pid integer,
	OUT confirmed_flush_lsn pg_lsn, OUT exported_lsn pg_lsn,
	OUT lag_bytes numeric, OUT lag_seconds double precision,
	OUT last_success timestamptz, OUT last_error text, OUT last_error_at timestamptz,
	OUT rows_exported bigint, OUT batches bigint, OUT txns_skipped bigint, OUT retry_at timestamptz,
	OUT wal_status text, OUT copy_pending boolean, OUT copied_rows bigint,
	OUT anchors_published bigint, OUT last_anchor_at timestamptz)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
	SELECT n.slot, w.state, w.pid,
	       s.confirmed_flush_lsn, w.exported_lsn,
	       pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn),
	       coalesce(extract(epoch FROM clock_timestamp() - w.oldest_pending)::float8, 0),
	       w.last_success, w.last_error, w.last_error_at,
	       w.rows_exported, w.batches, w.txns_skipped, w.retry_at,
	       s.wal_status, coalesce(e.copy_lsn IS NOT NULL, false), e.copied_rows,
	       w.anchors_published, w.last_anchor_at
	  FROM (SELECT current_setting('sandbox.export_slot')::name AS slot) AS n
	  CROSS JOIN agent._export_worker_state() AS w
	  LEFT JOIN pg_replication_slots AS s ON s.slot_name = n.slot
	  LEFT JOIN agent.export_state AS e ON e.slot_name = n.slot
$$;
COMMENT ON FUNCTION agent.export_status() IS
	'state, position and lag of the ClickHouse export';

REVOKE ALL ON FUNCTION agent.export_setup(), agent.export_resync(), agent.export_reset(), agent.export_drop(),
	agent.export_status(), agent._export_wake(boolean), agent._export_worker_state() FROM PUBLIC;

-- ----------------------------------------------------------------------
-- The exporter's steps (owner only).  The exporter (src/export_stream.c)
-- runs no SQL but these calls; each is one short transaction of its own.
-- ----------------------------------------------------------------------

-- What exists of the export, in one look: the tables, the publication's
-- tables (both in it), the slot (lost or not, its confirmed and restart
-- positions) and the export_state row (slot recorded, resync asked, copy
-- pending, the table it is at and its cursor).
CREATE FUNCTION agent._export_objects(slot name, publication name,
	OUT table_exists boolean, OUT publication_ok boolean, OUT slot_exists boolean,
	OUT slot_lost boolean, OUT confirmed_flush_lsn pg_lsn, OUT state_row boolean,
	OUT slot_recorded boolean, OUT resync_requested boolean, OUT copy_lsn pg_lsn,
	OUT copy_after text, OUT restart_lsn pg_lsn, OUT copy_relation text,
	OUT copy_after_seq integer)
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.to_regclass('agent.tool_invocations') IS NOT NULL
		   AND pg_catalog.to_regclass('agent.egress_connections') IS NOT NULL,
		   (SELECT count(*) = 2 FROM pg_catalog.pg_publication_tables t
			 WHERE t.pubname = publication AND t.schemaname = 'agent'
			   AND t.tablename IN ('tool_invocations', 'egress_connections')),
		   s.slot_name IS NOT NULL, coalesce(s.wal_status = 'lost', false),
		   s.confirmed_flush_lsn,
		   e.slot_name IS NOT NULL, coalesce(e.slot_created_at IS NOT NULL, false),
		   coalesce(e.resync_requested, false), e.copy_lsn, e.copy_after::text,
		   s.restart_lsn, e.copy_relation, e.copy_after_seq
	  FROM (SELECT 1) AS one
	  LEFT JOIN pg_catalog.pg_replication_slots s ON s.slot_name = slot
	  LEFT JOIN agent.export_state e ON e.slot_name = slot
$$;

-- Create the slot; must be its transaction's first and only work.
CREATE FUNCTION agent._export_create_slot(slot name) RETURNS pg_lsn
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
	RETURN (SELECT s.lsn FROM pg_catalog.pg_create_logical_replication_slot(slot, 'pgoutput') s);

CREATE FUNCTION agent._export_drop_slot(slot name) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.pg_drop_replication_slot(s.slot_name)
	  FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = slot
$$;

-- The slot exists from consistent point `lsn` on: the tables must be
-- copied once, with a version below anything the slot streams.
CREATE FUNCTION agent._export_record_slot(slot name, lsn pg_lsn) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	INSERT INTO agent.export_state AS e (slot_name, slot_created_at, copy_lsn, copy_after,
										 copied_rows, resync_requested, copy_relation, copy_after_seq)
	VALUES (slot, now(), lsn, NULL, 0, false, 'tool_invocations', NULL)
	ON CONFLICT (slot_name) DO UPDATE SET slot_created_at = now(), copy_lsn = lsn,
		copy_after = NULL, copied_rows = 0, resync_requested = false,
		copy_relation = 'tool_invocations', copy_after_seq = NULL
$$;

-- A page of the table copy, keyed on invocation_id after `after`.
CREATE FUNCTION agent._export_copy_page(after uuid, max_rows integer)
	RETURNS SETOF agent.tool_invocations
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT * FROM agent.tool_invocations t
	 WHERE after IS NULL OR t.invocation_id > after
	 ORDER BY t.invocation_id LIMIT max_rows
$$;

-- A page of agent.egress_connections' copy, keyed on (invocation_id, seq)
-- after (after, after_seq).
CREATE FUNCTION agent._export_copy_egress_page(after uuid, after_seq integer, max_rows integer)
	RETURNS SETOF agent.egress_connections
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT * FROM agent.egress_connections c
	 WHERE after IS NULL OR (c.invocation_id, c.seq) > (after, after_seq)
	 ORDER BY c.invocation_id, c.seq LIMIT max_rows
$$;

-- A copied page of `relation`: move its cursor; after its last page the
-- copy moves on to the next table, and ends after egress_connections.
-- Fenced on the table the copy is at (NULL, from 0.1.0: tool_invocations).
CREATE FUNCTION agent._export_copy_progress(slot name, relation text, last uuid, last_seq integer,
											done boolean, rows bigint)
	RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	UPDATE agent.export_state e
	   SET copy_after = CASE WHEN done THEN NULL ELSE coalesce(last, e.copy_after) END,
		   copy_after_seq = CASE WHEN done THEN NULL ELSE coalesce(last_seq, e.copy_after_seq) END,
		   copied_rows = e.copied_rows + rows,
		   copy_relation = CASE WHEN NOT done THEN relation
								WHEN relation = 'tool_invocations' THEN 'egress_connections' END,
		   copy_lsn = CASE WHEN done AND relation = 'egress_connections' THEN NULL ELSE e.copy_lsn END
	 WHERE e.slot_name = slot AND e.copy_lsn IS NOT NULL
	   AND coalesce(e.copy_relation, 'tool_invocations') = relation
$$;

-- Move the slot forward to target (never backwards).
CREATE FUNCTION agent._export_advance_slot(slot name, target pg_lsn) RETURNS void
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT pg_catalog.pg_replication_slot_advance(s.slot_name, target)
	  FROM pg_catalog.pg_replication_slots s
	 WHERE s.slot_name = slot AND s.confirmed_flush_lsn < target
$$;

-- Up to max_changes changes of the slot, up to the WAL flushed now (which
-- is returned with each), without consuming them.
CREATE FUNCTION agent._export_peek(slot name, publication name, max_changes integer)
	RETURNS TABLE (upto pg_lsn, data bytea)
	LANGUAGE sql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
	SELECT f.lsn, c.data
	  FROM (SELECT pg_catalog.pg_current_wal_flush_lsn() AS lsn) f
	  LEFT JOIN LATERAL pg_catalog.pg_logical_slot_peek_binary_changes(slot, f.lsn, max_changes,
			'proto_version', '1', 'publication_names', publication::text) c ON true
$$;

REVOKE ALL ON FUNCTION agent._export_objects(name, name), agent._export_create_slot(name),
	agent._export_drop_slot(name), agent._export_record_slot(name, pg_lsn),
	agent._export_copy_page(uuid, integer), agent._export_copy_egress_page(uuid, integer, integer),
	agent._export_copy_progress(name, text, uuid, integer, boolean, bigint),
	agent._export_advance_slot(name, pg_lsn), agent._export_peek(name, name, integer) FROM PUBLIC;
