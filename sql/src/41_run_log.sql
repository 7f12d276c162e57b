-- One server log line per invocation that ends, whoever ended it (the
-- supervisor, a runner host's step, recovery, the lease reaper, a decision,
-- an expiry, a cancel): written when the ending transaction commits.
--
--   LOG:  sandbox_ext invocation 6f1c… ended: org 2b7e…, state succeeded, 412 ms, 2 credits charged
--
-- "ms" is the run's wall time (started to finished; 0 for one that never
-- started), "credits charged" the net charge (0 after a refund).  A
-- deferred constraint trigger runs at commit, after every statement of the
-- transaction, so it reads the row as committed (a refund in the same
-- transaction included).  An ending that rolls back logs nothing.
--
-- A constraint trigger cannot be CREATE OR REPLACE'd (so it is not
-- replayed): the upgrade's hand-written tail
-- (sql/upgrade/0.1.0--0.2.0.post.sql) creates it for an upgraded database.

--
-- The trigger runs at commit as the session's role (agent_runner on a runner
-- host, which may not read the table): a security definer.  Nothing in it
-- may fail the commit of the run's end, so an error becomes a warning.
-- In C (src/guards.c), as the other per-row triggers: once a run, and a
-- PL/pgSQL trigger expands the whole row (its code included) into a
-- record first.
CREATE FUNCTION agent._log_invocation_end() RETURNS trigger
	AS 'MODULE_PATHNAME', 'sandbox_log_invocation_end'
	LANGUAGE C SECURITY DEFINER
	SET search_path = pg_catalog, agent, pg_temp;
COMMENT ON FUNCTION agent._log_invocation_end() IS
	'log one line when an invocation reaches a terminal state (deferred to commit)';

CREATE CONSTRAINT TRIGGER invocations_log_end
	AFTER UPDATE OF state ON agent.invocations
	DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state AND agent._state_is_terminal(NEW.state))
	EXECUTE FUNCTION agent._log_invocation_end();
