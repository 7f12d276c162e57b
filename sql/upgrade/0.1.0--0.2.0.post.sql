-- sandbox_ext upgrade 0.1.0 -> 0.2.0, hand-written tail: state that needs
-- the definitions replayed before it (see the head, 0.1.0--0.2.0.sql).

-- 41_run_log.sql: the log line of an ending invocation (a constraint
-- trigger cannot be CREATE OR REPLACE'd, so it is not replayed).
CREATE CONSTRAINT TRIGGER invocations_log_end
	AFTER UPDATE OF state ON agent.invocations
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND agent._state_is_terminal(NEW.state))
	EXECUTE FUNCTION agent._log_invocation_end();

-- 50_sessions.sql / 70_retention.sql: the new pg_cron job (idempotent: the
-- jobs are named).
SELECT agent.schedule_maintenance();

-- 12_catalog.sql (integration, issue 18): the versions of the interpreters
-- the jail runs, for the cards, as the install script records them.
SELECT count(*) FROM agent.refresh_runtimes();
