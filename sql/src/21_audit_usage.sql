-- The audit trail counts against its org's storage quota (14_limits.sql):
-- every event, whoever appends it (a tenant's call, the operator, the
-- supervisor, pg_cron), adds its details and actor
-- (agent._audit_event_bytes) to agent.org_usage in the transaction that
-- appends it.  The trail is never pruned, so neither are these bytes.
--
-- A trigger, not a count in each caller: no append can be forgotten, and
-- the appends stay where they are (20_audit.sql is the chain's alone).
-- It never refuses: an event records something that happened, and a
-- tenant's call that must stay within the quota checks it after its
-- appends (agent._check_storage(org, what), 14_limits.sql), so that its
-- events are rolled back with it.  The events the system must keep (a denial, an
-- expiry, a run's end) are kept past the quota, counted all the same;
-- each is bounded by the limits of the arguments and verdicts it records.
--
-- Lock order: the append holds the org's audit head, and this update then
-- takes the usage row (14_limits.sql, "Lock order").  The supervisor's
-- steps, which never wait for a lock a backend may hold, try the usage row
-- with the head (agent._try_audit_head, agent._lock_for_finish).
--
-- Not fired by a restore (session_replication_role = replica,
-- 98_backup.sql): the dump carries org_usage as it was.

-- In C (src/guards.c), as the other per-row triggers: a PL/pgSQL trigger
-- expands the whole event into a record and builds its expressions once
-- per transaction, six times a run.  It adds agent._audit_event_bytes(
-- details, actor) to the org's usage row, or makes the row (an old org
-- may lack it), in statements whose names and operators are all
-- schema-qualified.
CREATE FUNCTION agent._audit_events_count() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_audit_events_count'
	LANGUAGE C;
CREATE TRIGGER audit_events_count
	AFTER INSERT ON agent.audit_events
	FOR EACH ROW EXECUTE FUNCTION agent._audit_events_count();
