# bench/runners/floor_rows.sh: the floor's rows (sourced, not run), shared by
# floor.sh (server CPU and WAL, pgbench) and instructions.sh (instructions,
# callgrind): copies of the tables a run writes, and the statements that
# write a run's rows into them with no logic at all (floor.sh's header).
#
#   floor_tables ORG          the copies, ORG's audit head, usage row and balance in them
#   floor_script 6|4          the four transactions of one run, pgbench's syntax
#                             (:org, :ws, :agent, :inv, :appr), with six audit
#                             events per run or one per transaction

floor_tables() {
	local ORG=$1
	cat <<SQL
CREATE SCHEMA floor;
CREATE TABLE floor.invocations (LIKE agent.invocations INCLUDING ALL);
CREATE TABLE floor.approval_requests (LIKE agent.approval_requests INCLUDING ALL);
CREATE TABLE floor.audit_events (LIKE agent.audit_events INCLUDING ALL);
CREATE SEQUENCE floor.audit_events_id_seq;
ALTER TABLE floor.audit_events ALTER COLUMN id SET DEFAULT nextval('floor.audit_events_id_seq');
CREATE TABLE floor.audit_heads (LIKE agent.audit_heads INCLUDING ALL);
CREATE TABLE floor.credit_ledger (LIKE agent.credit_ledger INCLUDING ALL);
CREATE SEQUENCE floor.credit_ledger_id_seq;
ALTER TABLE floor.credit_ledger ALTER COLUMN id SET DEFAULT nextval('floor.credit_ledger_id_seq');
CREATE TABLE floor.credit_balances (LIKE agent.credit_balances INCLUDING ALL);
CREATE TABLE floor.agent_tool_calls (LIKE agent.agent_tool_calls INCLUDING ALL);
CREATE TABLE floor.tool_invocations (LIKE agent.tool_invocations INCLUDING ALL);
CREATE TABLE floor.org_usage (LIKE agent.org_usage INCLUDING ALL);
INSERT INTO floor.audit_heads (org_id, last_id, last_hash, events) VALUES ('$ORG', 0, '', 0);
INSERT INTO floor.org_usage (org_id) VALUES ('$ORG');
INSERT INTO floor.credit_balances (org_id, balance) VALUES ('$ORG', 100000000);
SQL
}


# One audit append, the shape of src/audit.c's statement, and the count of
# its bytes against the org's storage (sql/src/21_audit_usage.sql's
# trigger).  $1: event type.
audit() {
	cat <<SQL
WITH head AS (
  UPDATE floor.audit_heads h
     SET prev_hash = h.last_hash,
         (last_id, last_hash) =
          (SELECT n.id, agent._audit_hash(2, nullif(h.last_hash, ''), n.id, :org, :ws, '$1', :inv,
                                          'floor', '{"floor": true}', now())
             FROM (SELECT nextval('floor.audit_events_id_seq') AS id) n),
         events = h.events + 1
   WHERE h.org_id = :org
  RETURNING h.last_id, h.last_hash, h.prev_hash)
INSERT INTO floor.audit_events (id, org_id, workspace_id, event_type, invocation_id, actor, details,
                                created_at, prev_hash, hash)
  SELECT head.last_id, :org, :ws, '$1', :inv, 'floor', '{"floor": true}', now(),
         nullif(head.prev_hash, ''), head.last_hash FROM head;
UPDATE floor.org_usage u SET stored_bytes = u.stored_bytes + 20, updated_at = now() WHERE u.org_id = :org;
SQL
}
# the floor script; $1 = 6 (the events a run records today) or 4 (one per transaction)
floor_script() {
	local events=$1
	cat <<SQL
SELECT gen_random_uuid() AS inv, gen_random_uuid() AS appr \\gset
BEGIN;
INSERT INTO floor.invocations (id, org_id, workspace_id, agent_id, requested_by, language, code,
                               code_sha256, approval_id, wall_time_s, memory_mb)
  VALUES (:inv, :org, :ws, :agent, 'bench-requester', 'shell', 'true', agent.code_sha256('true'),
          :appr, 60, 512);
INSERT INTO floor.approval_requests (id, invocation_id, org_id, workspace_id, code_sha256,
                                     language, runtime, requested_by, expires_at)
  VALUES (:appr, :inv, :org, :ws, agent.code_sha256('true'), 'shell', 'bash',
          'bench-requester', now() + interval '1 hour');
$(audit capability.invoke_allowed)
COMMIT;
BEGIN;
UPDATE floor.approval_requests SET status = 'approved', decided_by = 'bench-approver',
       decided_at = now(), approved_code_sha256 = code_sha256 WHERE id = :appr;
UPDATE floor.invocations SET state = 'approved', approved_at = now() WHERE id = :inv;
$(audit approval.approved)
COMMIT;
BEGIN;
UPDATE floor.invocations SET state = 'provisioning', provisioned_at = now(), credits_charged = 2,
       runner_id = :agent, lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '30 s' WHERE id = :inv;
INSERT INTO floor.credit_ledger (org_id, workspace_id, invocation_id, kind, amount)
  VALUES (:org, :ws, :inv, 'charge', -2);
UPDATE floor.credit_balances SET balance = balance - 2, updated_at = now() WHERE org_id = :org;
$(audit credits.charged)
$([ "$events" = 6 ] && audit invocation.provisioned)
COMMIT;
BEGIN;
UPDATE floor.invocations SET state = 'succeeded', started_at = now(), finished_at = now(),
       exit_code = 0, signal = NULL, timed_out = false, oom_killed = false,
       output_truncated = false, cpu_ms = 1, peak_memory_bytes = 1000000, stdout_bytes = 0,
       stderr_bytes = 0, warm = false WHERE id = :inv;
INSERT INTO floor.agent_tool_calls (invocation_id, org_id, workspace_id, agent_id, input_hash,
                                    status, exit_code, output_preview)
  VALUES (:inv, :org, :ws, :agent, agent.code_sha256('true'), 'succeeded', 0, '');
INSERT INTO floor.tool_invocations (invocation_id, org_id, workspace_id, agent_id, language,
                                    status, exit_code, duration_ms, cpu_ms, peak_memory_bytes,
                                    credits_charged, started_at, finished_at)
  VALUES (:inv, :org, :ws, :agent, 'shell', 'succeeded', 0, 3, 1, 1000000, 2, now(), now());
$([ "$events" = 6 ] && audit invocation.started)
$(audit invocation.finished)
SELECT pg_notify('floor_' || replace(:inv::text, '-', ''), '{"done": true}');
COMMIT;
SQL
}
