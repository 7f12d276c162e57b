#!/usr/bin/env bash
# The floor under the primary's cost per run: what the rows a run must
# write cost on this PostgreSQL when they are written by the fewest plain
# statements the contract allows, next to the real path, in the same run.
#
# The real path: N sequential shell `true` runs through the local runner
# (request, approve, then LISTEN for the end, as bench/e2e's client does).
# The floor: the same rows written by pgbench (-M prepared, one client, N
# times) into copies of the tables (CREATE TABLE ... (LIKE agent.x INCLUDING
# ALL): the same columns, defaults, CHECKs and indexes; no triggers, no
# foreign keys, no row-level security), with no logic at all, in the four
# transactions no implementation can merge (the request and the approval
# are two people's calls; the claim commits before the jail starts and the
# finish after it ends; docs/control-plane.md):
#
#   request   the invocation, its card, one audit event
#   approve   the card's decision, the invocation approved, one audit event
#   claim     the invocation leased, the charge (ledger row + balance), two
#             audit events (credits.charged, invocation.provisioned)
#   finish    the invocation's end, the tool call, the analytics row, two
#             audit events (invocation.started, invocation.finished), the
#             end's NOTIFY
#
# Each audit event is the real append's statement shape (the org's head
# row moved, the event inserted with its hash, src/audit.c) on the copies.
# A second floor, "floor-4", records one audit event per transaction
# instead of six per run: what merging events would save.
#
# Prints, per round, server CPU µs and WAL bytes per run of each, and the
# ratios real/floor; then the rows written per run by table, real and
# floor (pg_stat_user_tables).  Asserts nothing.  The server CPU is every
# server process's (as bench/runners/run.sh counts it).
#
#   bench/runners/floor.sh          (as root, after make install; its own cluster)
#   N=400 ROUNDS=3 bench/runners/floor.sh
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
N=${N:-200}
ROUNDS=${ROUNDS:-2}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_floor}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55437}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
# No autovacuum: a worker that happens to run inside one measurement's
# window (an ANALYZE of the tables just written) would add its CPU to that
# side only.  Each measurement is followed by a VACUUM of what it left
# (dead row versions, new index entries), timed apart: its cost per run
# is printed as its own column, so the per-run cost is steps + vacuum.
export SANDBOX_EXTRA_CONF="autovacuum = off
${SANDBOX_EXTRA_CONF:-}"
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need cc
bench_need "$PGBIN/pgbench"
bench_need_extension
bench_need_jail "$PGBIN/sandbox-jail"
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_floor.XXXXXX)
chmod 0755 "$tmp"
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
cc -O2 -Wall -o "$tmp/client" "$top/bench/e2e/client.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq ||
	bench_die "could not build bench/e2e/client.c (libpq-dev)"
"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
bench_start_cluster
read -r ORG WS AGENT < <(bench_tenant)
conninfo="host=$SANDBOX_CLUSTER_DIR port=$SANDBOX_PGPORT user=postgres dbname=$SANDBOX_DB"
"$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true 5 >/dev/null ||
	bench_die "the warm-up runs failed"

# The copies, one org's head and balance in them.
q <<SQL >/dev/null
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
floor_script 6 >"$tmp/floor6.sql"
floor_script 4 >"$tmp/floor4.sql"
chmod 0644 "$tmp"/*.sql
for f in floor6 floor4; do	# each script must run before it is timed
	as_pg "$PGBIN/pgbench" -n -M prepared -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -t 1 \
		-D org="$ORG" -D ws="$WS" -D agent="$AGENT" -f "$tmp/$f.sql" "$SANDBOX_DB" >"$tmp/check.log" 2>&1 ||
		bench_die "the $f script does not run: $(grep -m 3 -i error "$tmp/check.log")"
done

ticks() { bench_server_ticks; }
HZ=$(getconf CLK_TCK)
writes() {			# schema: "table ins upd del" of every table with writes, cumulative
	q -F ' ' -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = '$1' ORDER BY relname"
}
declare -A cpu wal fpi vac
# Full-page images in the WAL between two LSNs, bytes (pg_waldump --stats):
# the first change of each page after a checkpoint logs the whole page,
# so this part depends on the checkpoint distance and the tables' sizes.
fpi_bytes() {
	as_pg "$PGBIN/pg_waldump" --stats -p "$SANDBOX_CLUSTER_DIR/data/pg_wal" -s "$1" -e "$2" 2>/dev/null |
		awk '$1 == "Total" { print $5; found = 1 } END { if (!found) print 0 }'
}
measure() {			# what round: sets cpu[what.round] and wal[what.round]
	local what=$1 r=$2 t0 t1 w0 w1 schema=floor
	[ "$what" = real ] && schema=agent
	[ "$r" = 1 ] && { sleep 1.5; writes $schema >"$tmp/$what.w0"; }
	q -c "CHECKPOINT" >/dev/null		# no full-page images of one side in the other's WAL
	w0=$(q -c "SELECT pg_current_wal_lsn()")
	t0=$(ticks)
	case $what in
	real) "$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$N" >/dev/null ||
		bench_die "the latency client failed" ;;
	*) as_pg "$PGBIN/pgbench" -n -M prepared -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -t "$N" \
		-D org="$ORG" -D ws="$WS" -D agent="$AGENT" -f "$tmp/$what.sql" "$SANDBOX_DB" >"$tmp/pgbench.log" 2>&1 ||
		bench_die "pgbench failed: $(tail -n 3 "$tmp/pgbench.log")" ;;
	esac
	t1=$(ticks)
	w1=$(q -c "SELECT pg_current_wal_lsn()")
	cpu[$what.$r]=$(awk -v a="$t0" -v b="$t1" -v n="$N" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }')
	q -c "VACUUM" >/dev/null
	vac[$what.$r]=$(awk -v a="$t1" -v b="$(ticks)" -v n="$N" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }')
	wal[$what.$r]=$(q -c "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $N)")
	fpi[$what.$r]=$(awk -v b="$(fpi_bytes "$w0" "$w1")" -v n="$N" 'BEGIN { printf "%.0f", b / n }')
	# (statistics reach the shared counters within a second of a transaction)
	[ "$r" = 1 ] && { sleep 1.5; writes $schema >"$tmp/$what.w1"; }
	return 0
}

echo "shell true, $N sequential runs per measurement, $ROUNDS rounds interleaved; server CPU µs and WAL bytes per run"
printf '%-6s %12s %12s %12s %14s %14s %14s %11s %11s\n' round real_us+vac floor6_us+vac floor4_us+vac real_wal/fpi floor6_wal/fpi floor4_wal/fpi cpu_ratio6 wal_ratio6
for r in $(seq "$ROUNDS"); do
	measure real "$r"
	measure floor6 "$r"
	measure floor4 "$r"
	printf '%-6s %12s %12s %12s %14s %14s %14s %11s %11s\n' "$r" "${cpu[real.$r]}+${vac[real.$r]}" \
		"${cpu[floor6.$r]}+${vac[floor6.$r]}" "${cpu[floor4.$r]}+${vac[floor4.$r]}" \
		"${wal[real.$r]}/${fpi[real.$r]}" "${wal[floor6.$r]}/${fpi[floor6.$r]}" "${wal[floor4.$r]}/${fpi[floor4.$r]}" \
		"$(awk -v a="$((${cpu[real.$r]} + ${vac[real.$r]}))" -v b="$((${cpu[floor6.$r]} + ${vac[floor6.$r]}))" 'BEGIN { printf "%.1fx", a / b }')" \
		"$(awk -v a="${wal[real.$r]}" -v b="${wal[floor6.$r]}" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "(µs+vac: server CPU per run during the runs (every server process) + the VACUUM after them, per run;"
echo " real: the local runner's path; floor6/floor4: the same rows as plain prepared"
echo " statements in four transactions, with six audit events per run (today's) or one per transaction;"
echo " wal/fpi: WAL bytes per run and, of them, full-page images after the CHECKPOINT before each measurement)"
echo
echo "rows written per run in round 1 (table: inserted updated deleted):"
for what in real floor6 floor4; do
	echo "  $what:"
	join "$tmp/$what.w0" "$tmp/$what.w1" | awk -v n="$N" '
		{ i = ($5 - $2) / n; u = ($6 - $3) / n; d = ($7 - $4) / n
		  if (i + u + d > 0) printf "    %-22s %6.2f %6.2f %6.2f\n", $1, i, u, d }'
done
