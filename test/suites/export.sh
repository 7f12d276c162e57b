#!/usr/bin/env bash
# ClickHouse export (issue 6) against a real ClickHouse server.
#
# Starts a throwaway clickhouse-server (scripts/clickhouse.sh), points the
# running test cluster's exporter at it (ALTER SYSTEM + reload), and checks
# what a user of the ClickHouse table would notice: values, exactly-once
# after ClickHouse outages, exporter kills and PostgreSQL crashes, the
# error state on a permanent failure, and the resync after a lost slot.
# The egress rows of real runs (t_egress_*) need runs that reach a server:
# those tests start the egress suite's fake internet (test/egress/net.sh),
# a cluster and a ClickHouse server of their own inside its host namespace.
# The set-up (the export switched on, the existing rows copied) always runs;
# T=REGEX runs only the matching tests after it (test/lib.sh).  Prints one
# line per test and ends with "N passed, N failed".
#
# Env (from test/run.sh): SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT, SANDBOX_DB,
# PG_CONFIG; CLICKHOUSE_HTTP_PORT / CLICKHOUSE_TCP_PORT pick the ports.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
# ClickHouse ports follow the cluster's port (+2000 http, +3000 tcp), so
# parallel runs on distinct clusters do not share a server.
export CLICKHOUSE_HTTP_PORT=${CLICKHOUSE_HTTP_PORT:-$((PORT + 2000))}
export CLICKHOUSE_TCP_PORT=${CLICKHOUSE_TCP_PORT:-$((PORT + 3000))}
export CLICKHOUSE_DIR=${CLICKHOUSE_DIR:-/tmp/sandbox_ch_test.$PORT}
CH="$top/scripts/clickhouse.sh"

sql() { q -c "$1"; }
# The ClickHouse server of the tests running now: the suite's, or (t_egress_*)
# the one in the fake internet's host namespace.
CH_IN_HOST=
ch() { if [ -n "$CH_IN_HOST" ]; then egr_in_host "$CH" "$@"; else "$CH" "$@"; fi; }
chq() { ch query "$1" 2>&1; }

state() { sql "SELECT state FROM agent.export_status()"; }
pg_count() { sql "SELECT count(*) FROM agent.tool_invocations"; }
# Deduplicated rows, as a reader sees them.
ch_final_count() { chq "SELECT count() FROM tool_invocations FINAL WHERE _deleted = 0"; }
# Caught up: nothing committed is waiting, and ClickHouse has every row.
caught_up() {
	[ "$(state)" = idle ] &&
		[ "$(sql "SELECT lag_seconds = 0 FROM agent.export_status()")" = t ] &&
		[ "$(ch_final_count)" = "$(pg_count)" ]
}

work=$(mktemp -d /tmp/sandbox_export_test.XXXXXX)
chmod 0755 "$work"
# Leave the shared cluster as later suites expect it: exporter off, no
# slot holding WAL, none of our rows.
cleanup() {
	egress_down
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null 2>&1
	sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null 2>&1
	sql "ALTER SYSTEM RESET sandbox.export_poll_interval" >/dev/null 2>&1
	sql "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null 2>&1
	sql "SELECT pg_reload_conf()" >/dev/null 2>&1
	sleep 0.5
	sql "SELECT agent.export_drop()" >/dev/null 2>&1
	sql "ALTER TABLE agent.tool_invocations RENAME COLUMN cpu_ms_renamed TO cpu_ms" >/dev/null 2>&1
	sql "DELETE FROM agent.tool_invocations WHERE org_id = '11111111-1111-1111-1111-111111111111'" >/dev/null 2>&1
	sql "ALTER TABLE agent.tool_invocations REPLICA IDENTITY DEFAULT" >/dev/null 2>&1
	sql "ALTER TABLE agent.egress_connections REPLICA IDENTITY DEFAULT" >/dev/null 2>&1
	"$CH" stop >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

insert_rows() {		# N [status]
	sql "INSERT INTO agent.tool_invocations
	        (invocation_id, org_id, workspace_id, language, status, exit_code, duration_ms,
	         credits_charged, started_at, finished_at)
	     SELECT gen_random_uuid(), '11111111-1111-1111-1111-111111111111',
	            '22222222-2222-2222-2222-222222222222', 'python', '${2:-succeeded}', 0,
	            g, 2, now() - interval '1 s', now()
	       FROM generate_series(1, $1) g"
}

# ---- set-up (always runs) ----
if ! command -v clickhouse-server >/dev/null; then
	nok "clickhouse-server is installed (scripts/deps.sh installs it)"
	finish_suite
fi
if ! "$CH" start >/dev/null; then
	nok "clickhouse server starts"
	finish_suite
fi
check "clickhouse server starts with the tables of sql/clickhouse/" \
	"$(sed -n 's/^CREATE TABLE IF NOT EXISTS \([a-z_]*\).*/\1/p' "$top"/sql/clickhouse/*.sql | sort | tr '\n' ' ')" \
	"$(chq "SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name" | tr '\n' ' ')"
if [ "$(sql "SELECT to_regclass('agent.tool_invocations') IS NOT NULL")" != t ]; then
	nok "agent.tool_invocations exists (CREATE EXTENSION sandbox_ext makes it)"
	finish_suite
fi

check "exporter is disabled without sandbox.clickhouse_url" disabled "$(state)"

# Rows that exist before the export is switched on arrive by the table copy.
insert_rows 5 before_export
sql "ALTER SYSTEM SET sandbox.clickhouse_url = 'http://127.0.0.1:$CLICKHOUSE_HTTP_PORT'" >/dev/null
sql "ALTER SYSTEM SET sandbox.export_poll_interval = '1s'" >/dev/null
sql "SELECT pg_reload_conf()" >/dev/null
if wait_for 30 caught_up; then
	ok "setting the URL creates the slot and copies existing rows"
else
	nok "setting the URL creates the slot and copies existing rows" \
		"state=$(state) pg=$(pg_count) ch=$(ch_final_count) err=$(sql "SELECT last_error FROM agent.export_status()")"
fi
check "publication, replica identity and triggers are in place for both tables" "egress_connections,tool_invocations|0|2" \
	"$(sql "SELECT (SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_publication_tables
	                 WHERE pubname = 'sandbox_ext_tool_invocations' AND schemaname = 'agent'),
	              (SELECT count(*) FROM pg_class WHERE oid IN ('agent.tool_invocations'::regclass,
	                 'agent.egress_connections'::regclass) AND relreplident <> 'f'),
	              (SELECT count(*) FROM pg_trigger WHERE tgname IN ('tool_invocations_export_wake',
	                 'egress_connections_export_wake'))")"
check "slot uses pgoutput" "pgoutput|logical" \
	"$(sql "SELECT plugin, slot_type FROM pg_replication_slots WHERE slot_name = 'sandbox_ext_export'")"

# Values.
t_values() {
	sql "INSERT INTO agent.tool_invocations
		(invocation_id, org_id, workspace_id, agent_id, conversation_id, tool_name, language, status,
		 exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes, credits_charged, timed_out,
		 oom_killed, output_truncated, started_at, finished_at, created_at)
		VALUES ('aaaaaaaa-0000-4000-8000-000000000001', '11111111-1111-1111-1111-111111111111',
		        '33333333-3333-3333-3333-333333333333', '44444444-4444-4444-4444-444444444444',
		        NULL, 'code_execution', 'node', E'we\\\\ird\\tstatus\\n', 137, 9, 30000, 29876,
		        536870912, 2, true, true, false,
		        '2026-01-02 03:04:05.678+00', '2026-01-02 03:04:35.679+00',
		        '2026-01-02 03:04:36.001+00')"
	wait_for 20 "[ \"\$(chq \"SELECT count() FROM tool_invocations WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000001')\")\" = 1 ]"
	got=$(chq "SELECT org_id, workspace_id, agent_id, conversation_id, tool_name, language, status,
		exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes, credits_charged, timed_out, oom_killed,
		output_truncated, started_at, started_at_ms, finished_at_ms, created_at, created_at_ms, _deleted
		FROM tool_invocations FINAL WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000001')
		FORMAT TabSeparated")
	want=$(printf '%s\t' 11111111-1111-1111-1111-111111111111 33333333-3333-3333-3333-333333333333 \
		44444444-4444-4444-4444-444444444444 '\N' code_execution node 'we\\ird\tstatus\n' 137 9 30000 29876 \
		536870912 2 1 1 0 '2026-01-02 03:04:05' 1767323045678 1767323075679 '2026-01-02 03:04:36' 1767323076001)
	want="${want}0"
	check "an inserted row arrives with the right values" "$want" "$got"
	version=$(chq "SELECT _version FROM tool_invocations WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000001')")
	check "the version is the commit LSN" t "$(sql "SELECT '$version'::numeric > 0 AND '$version'::numeric <= pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")"
}

# Update and delete.
t_update_delete() {
	sql "INSERT INTO agent.tool_invocations (invocation_id, org_id, workspace_id, language, status)
		VALUES ('aaaaaaaa-0000-4000-8000-000000000002', '11111111-1111-1111-1111-111111111111',
		        '22222222-2222-2222-2222-222222222222', 'python', 'succeeded')"
	sql "UPDATE agent.tool_invocations SET status = 'killed' WHERE invocation_id = 'aaaaaaaa-0000-4000-8000-000000000002'"
	wait_for 20 "[ \"\$(chq \"SELECT status FROM tool_invocations FINAL WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000002')\")\" = killed ]"
	check "an update becomes the row's new version" "killed|1" \
		"$(chq "SELECT status, count() FROM tool_invocations FINAL WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000002') GROUP BY status FORMAT TabSeparated" | tr '\t' '|')"
	sql "DELETE FROM agent.tool_invocations WHERE invocation_id = 'aaaaaaaa-0000-4000-8000-000000000002'"
	wait_for 20 "[ \"\$(chq \"SELECT _deleted FROM tool_invocations FINAL WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000002')\")\" = 1 ]"
	check "a delete leaves a row marked _deleted" 1 \
		"$(chq "SELECT _deleted FROM tool_invocations FINAL WHERE invocation_id = toUUID('aaaaaaaa-0000-4000-8000-000000000002')")"
}

# ClickHouse down.
t_clickhouse_down() {
	"$CH" kill >/dev/null
	insert_rows 300 during_outage
	if wait_for 20 '[ "$(state)" = backoff ]'; then
		ok "ClickHouse down: exporter backs off"
	else
		nok "ClickHouse down: exporter backs off" "state=$(state)"
	fi
	insert_rows 200 during_outage
	check "ClickHouse down: the slot keeps the WAL" t \
		"$(sql "SELECT lag_bytes > 0 AND lag_seconds > 0 AND last_error LIKE '%could not reach ClickHouse%' FROM agent.export_status()")"
	"$CH" restart >/dev/null
	if wait_for 90 caught_up; then
		ok "ClickHouse back: export resumes by itself"
	else
		nok "ClickHouse back: export resumes by itself" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
	check "ClickHouse outage: every row exactly once" "500|500" \
		"$(chq "SELECT count(), uniqExact(invocation_id) FROM tool_invocations WHERE status = 'during_outage' FORMAT TabSeparated" | tr '\t' '|')"
}

# Exporter killed between the ClickHouse insert and the slot advance.
t_exporter_killed() {
	kill_at() {		# fault status
		local pid
		sql "ALTER SYSTEM SET sandbox.export_fault = '$1'" >/dev/null
		sql "SELECT pg_reload_conf()" >/dev/null
		sleep 0.5
		insert_rows 100 "$2"
		if ! wait_for 20 '[ "$(state)" = paused ]'; then
			nok "fault $1 reached" "state=$(state)"
			return
		fi
		pid=$(sql "SELECT exporter_pid FROM agent.export_status()")
		sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null
		sql "SELECT pg_reload_conf()" >/dev/null
		sql "SELECT pg_terminate_backend($pid)" >/dev/null
		if wait_for 30 "caught_up && [ \"\$(sql 'SELECT exporter_pid FROM agent.export_status()')\" != $pid ]"; then
			ok "killed at $1: a new exporter catches up"
		else
			nok "killed at $1: a new exporter catches up" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
		fi
	}
	kill_at pause_after_rows killed_after_rows
	check "killed after the rows, before the watermark: no duplicates in the deduplicated view" "100|100" \
		"$(chq "SELECT count(), uniqExact(invocation_id) FROM tool_invocations FINAL WHERE status = 'killed_after_rows' FORMAT TabSeparated" | tr '\t' '|')"
	kill_at pause_after_watermark killed_after_watermark
	check "killed after the watermark, before the advance: not even re-inserted" "100|100" \
		"$(chq "SELECT count(), uniqExact(invocation_id) FROM tool_invocations WHERE status = 'killed_after_watermark' FORMAT TabSeparated" | tr '\t' '|')"
}

# Immediate-mode PostgreSQL crash.
t_pg_crash() {
	pg_crash() {
		as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate -w stop >/dev/null
		as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
	}
	# (a) Crash once caught up.  Slot advances reach disk at the next
	# checkpoint (or when restart_lsn moves), so the slot may replay what
	# ClickHouse already has; only the new rows may be sent.
	insert_rows 150 before_crash
	wait_for 30 caught_up
	pg_crash
	insert_rows 50 after_crash
	if wait_for 60 caught_up; then
		ok "after an immediate PostgreSQL crash the export resumes"
	else
		nok "after an immediate PostgreSQL crash the export resumes" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
	# Raw rows, not FINAL: a re-sent row shows until a merge collapses it.
	check "PostgreSQL crash: delivered rows are not sent again" "150|50" \
		"$(chq "SELECT countIf(status = 'before_crash'), countIf(status = 'after_crash') FROM tool_invocations FORMAT TabSeparated" | tr '\t' '|')"
	# (b) Crash between the ClickHouse insert and the slot advance: the slot
	# replays the delivered transactions for sure; the watermark skips them.
	sql "ALTER SYSTEM SET sandbox.export_fault = 'pause_after_watermark'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
	insert_rows 100 crash_before_advance
	if wait_for 20 '[ "$(state)" = paused ]'; then
		sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null
		pg_crash
		insert_rows 50 after_crash
		wait_for 60 caught_up
		check "PostgreSQL crash before the advance: the slot replayed and the watermark skipped it" "t|100" \
			"$(sql "SELECT txns_skipped > 0 FROM agent.export_status()")|$(chq "SELECT count() FROM tool_invocations WHERE status = 'crash_before_advance'")"
	else
		nok "fault pause_after_watermark reached before the crash" "state=$(state)"
		sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null
		sql "SELECT pg_reload_conf()" >/dev/null
	fi
	check "PostgreSQL crashes: every row exactly once" "150|150|100|100|100|100" \
		"$(chq "SELECT countIf(status = 'before_crash'), uniqExactIf(invocation_id, status = 'before_crash'),
		            countIf(status = 'crash_before_advance'), uniqExactIf(invocation_id, status = 'crash_before_advance'),
		            countIf(status = 'after_crash'), uniqExactIf(invocation_id, status = 'after_crash')
		       FROM tool_invocations FINAL FORMAT TabSeparated" | tr '\t' '|')"
}

# Permanent error.
t_permanent_error() {
	chq "ALTER TABLE tool_invocations DROP COLUMN cpu_ms" >/dev/null
	insert_rows 10 schema_mismatch
	if wait_for 20 '[ "$(state)" = error ]'; then
		ok "schema mismatch in ClickHouse: exporter stops in state error"
	else
		nok "schema mismatch in ClickHouse: exporter stops in state error" "state=$(state)"
	fi
	check "the error names the problem" t \
		"$(sql "SELECT last_error LIKE '%cpu_ms%' FROM agent.export_status()")"
	if grep -q 'ERROR:  ClickHouse export stopped' "$CLUSTER_DIR/server.log"; then
		ok "the error is logged at ERROR level"
	else
		nok "the error is logged at ERROR level"
	fi
	sleep 2
	check "no retries while in error" error "$(state)"
	chq "ALTER TABLE tool_invocations ADD COLUMN cpu_ms Nullable(Int64) AFTER duration_ms" >/dev/null
	sql "SELECT agent.export_reset()" >/dev/null
	if wait_for 30 caught_up; then
		ok "after the fix, agent.export_reset() resumes the export"
	else
		nok "after the fix, agent.export_reset() resumes the export" "state=$(state)"
	fi
}

# Lost slot and resync.
t_lost_slot_resync() {
	wait_for 10 '[ "$(state)" = idle ]'
	sql "SELECT pg_drop_replication_slot('sandbox_ext_export')" >/dev/null
	insert_rows 20 while_slot_gone
	if wait_for 20 '[ "$(state)" = error ]'; then
		ok "a missing slot puts the exporter in state error"
	else
		nok "a missing slot puts the exporter in state error" "state=$(state)"
	fi
	sql "SELECT agent.export_resync()" >/dev/null
	if wait_for 30 caught_up; then
		ok "agent.export_resync() recreates the slot and re-copies the table"
	else
		nok "agent.export_resync() recreates the slot and re-copies the table" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
	check "after resync: rows changed while the slot was gone are there" 20 \
		"$(chq "SELECT count() FROM tool_invocations FINAL WHERE status = 'while_slot_gone'")"
	check "after resync: deduplicated view matches PostgreSQL" "$(pg_count)" \
		"$(chq "SELECT uniqExact(invocation_id) FROM tool_invocations FINAL WHERE _deleted = 0")"
	insert_rows 5 after_resync
	if wait_for 20 caught_up; then ok "after resync new rows stream again"; else nok "after resync new rows stream again"; fi
}

# Repeated exporter kills under load.
t_kills_under_load() {
	printf '%s\n' \
		"INSERT INTO agent.tool_invocations (invocation_id, org_id, workspace_id, language, status)" \
		"SELECT gen_random_uuid(), '11111111-1111-1111-1111-111111111111'," \
		"       '22222222-2222-2222-2222-222222222222', 'python', 'chaos'" \
		"  FROM generate_series(1, (random() * 4)::int + 1);" >"$work/chaos.sql"
	chmod 0644 "$work/chaos.sql"
	as_pg "$PGBIN/pgbench" -n -h "$CLUSTER_DIR" -p "$PORT" -c 2 -j 2 -R 200 -T 8 \
		-f "$work/chaos.sql" "$DB" >"$work/chaos.log" 2>&1 &
	chaos_pid=$!
	for _ in 1 2 3 4 5 6 7; do
		sleep 1
		pid=$(sql "SELECT exporter_pid FROM agent.export_status()")
		[ -n "$pid" ] && sql "SELECT pg_terminate_backend($pid)" >/dev/null
	done
	wait "$chaos_pid"
	if wait_for 60 caught_up; then
		ok "seven exporter kills under load: export catches up"
	else
		nok "seven exporter kills under load: export catches up" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
	chaos_pg=$(sql "SELECT count(*) FROM agent.tool_invocations WHERE status = 'chaos'")
	[ "$chaos_pg" -gt 0 ] || nok "(pgbench committed rows during the kills)" "$(tail -n 5 "$work/chaos.log")"
	check "seven exporter kills under load: every row exactly once" "$chaos_pg|$chaos_pg" \
		"$(chq "SELECT count(), uniqExact(invocation_id) FROM tool_invocations FINAL WHERE status = 'chaos' FORMAT TabSeparated" | tr '\t' '|')"
}

# Schema mismatch on the PostgreSQL side.
t_pg_schema_change() {
	sql "ALTER TABLE agent.tool_invocations RENAME COLUMN cpu_ms TO cpu_ms_renamed"
	insert_rows 3 pg_schema_change
	if wait_for 20 '[ "$(state)" = error ]'; then
		ok "a published table without an exported column puts the exporter in state error"
	else
		nok "a published table without an exported column puts the exporter in state error" "state=$(state)"
	fi
	check "the error names the missing column" t \
		"$(sql "SELECT last_error LIKE '%has no column \"cpu_ms\"%' FROM agent.export_status()")"
	sql "ALTER TABLE agent.tool_invocations RENAME COLUMN cpu_ms_renamed TO cpu_ms"
	# The changes decoded with the old shape are still in the slot: resync.
	sql "SELECT agent.export_resync()" >/dev/null
	if wait_for 30 caught_up; then
		ok "after the rename back, a resync brings every row"
	else
		nok "after the rename back, a resync brings every row" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
}

# Slot invalidated by max_slot_wal_keep_size.
t_slot_invalidated() {
	"$CH" kill >/dev/null
	sql "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	insert_rows 30 while_slot_lost
	for _ in 1 2 3 4; do
		sql "CREATE TEMP TABLE w AS SELECT g FROM generate_series(1, 1000) g; SELECT pg_switch_wal()" >/dev/null
	done
	sql "CHECKPOINT" >/dev/null
	check "an outage longer than max_slot_wal_keep_size loses the slot" lost \
		"$(sql "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'sandbox_ext_export'")"
	sql "ALTER SYSTEM RESET max_slot_wal_keep_size" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	"$CH" restart >/dev/null
	if wait_for 60 '[ "$(state)" = error ]'; then
		ok "a lost slot puts the exporter in state error"
	else
		nok "a lost slot puts the exporter in state error" "state=$(state)"
	fi
	check "the error says to resync" t \
		"$(sql "SELECT last_error LIKE '%invalidated%export_resync()%' FROM agent.export_status()")"
	sql "SELECT agent.export_resync()" >/dev/null
	if wait_for 30 caught_up; then
		ok "after a lost slot, agent.export_resync() brings every row"
	else
		nok "after a lost slot, agent.export_resync() brings every row" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"
	fi
}

# Turning it off.
t_turn_off() {
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	if wait_for 10 '[ "$(state)" = disabled ]'; then ok "an empty URL turns the exporter off"; else nok "an empty URL turns the exporter off" "state=$(state)"; fi
	sql "SELECT agent.export_drop()" >/dev/null
	check "agent.export_drop() removes the slot and the publication" "0|0" \
		"$(sql "SELECT (SELECT count(*) FROM pg_replication_slots), (SELECT count(*) FROM pg_publication)")"
}

# ---- the egress rows of real runs (issue 14) -------------------------------------
# A cluster of its own inside the egress suite's fake internet, so that its
# runs reach the fake servers through the proxy, exporting to a ClickHouse
# server in the same network namespace (same ports: another namespace).
# Started by the first t_egress_ test; the tests before it keep the suite's
# cluster and server.
EGR_PREFIX=exp${SANDBOX_PGPORT}
EGR_DIR=/tmp/sbx_export_egress_$SANDBOX_PGPORT
# shellcheck source=../egress/net.sh
. "$top/test/egress/net.sh"
EX_DIR=$EGR_DIR/pg
EX_PORT=$((SANDBOX_PGPORT + 8))
EX_UP=
EX_FAILED=
HOME_CLICKHOUSE_DIR=$CLICKHOUSE_DIR
EGRESS_CODE='
import requests
for u in ["https://allowed.test/one", "https://www.allowed.test/two", "https://denied.test/three"]:
    try:
        print(u, requests.post(u, data=b"x" * 3000, timeout=20).text.strip())
    except Exception as e:
        print(u, "ERR", str(e))'

egress_up() {
	[ -n "$EX_FAILED" ] && return 1
	[ -n "$EX_UP" ] && return 0
	EX_FAILED=1
	if ! egr_up; then
		nok "the fake internet is up"
		return 1
	fi
	EX_UP=1
	if ! PGBIN=$PGBIN egr_cluster start "$EX_DIR" "$EX_PORT" "sandbox.export_poll_interval = '1s'" \
		>"$EGR_DIR/cluster.log" 2>&1; then
		nok "a cluster starts in the fake internet's host namespace" "$(tail -n 5 "$EGR_DIR/cluster.log")"
		return 1
	fi
	CLUSTER_DIR=$EX_DIR
	PORT=$EX_PORT
	CH_IN_HOST=1
	export CLICKHOUSE_DIR=$EGR_DIR/ch
	if ! ch start >/dev/null; then
		nok "a ClickHouse server starts in the fake internet's host namespace"
		return 1
	fi
	sql "ALTER SYSTEM SET sandbox.clickhouse_url = 'http://127.0.0.1:$CLICKHOUSE_HTTP_PORT'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	if ! wait_for 60 egress_caught_up; then
		nok "the export of the fake internet's cluster starts" "state=$(state) err=$(sql "SELECT last_error FROM agent.export_status()")"
		return 1
	fi
	EX_FAILED=
}

egress_down() {
	[ -n "$EX_UP" ] || return 0
	ch stop >/dev/null 2>&1
	PGBIN=$PGBIN egr_cluster stop "$EX_DIR" "$EX_PORT" >/dev/null 2>&1
	egr_down
	EX_UP=
	CLUSTER_DIR=$HOME_CLUSTER_DIR
	PORT=$HOME_PORT
	CH_IN_HOST=
	CLICKHOUSE_DIR=$HOME_CLICKHOUSE_DIR
}

# Caught up with both tables: nothing committed waits, and ClickHouse's
# deduplicated rows number the database's.
egress_caught_up() {
	caught_up &&
		[ "$(chq "SELECT count() FROM egress_connections FINAL WHERE _deleted = 0")" = \
			"$(sql "SELECT count(*) FROM agent.egress_connections")" ]
}

# An org's connection rows, one line each in key order, as the database
# holds them and as a reader of ClickHouse's deduplicated table sees them.
pg_egress_rows() {
	sql "SELECT string_agg(concat_ws('|', org_id, workspace_id, invocation_id, seq, kind, host, port,
	            coalesce(host(address), 'NULL'), allowed::int, coalesce(rule_id::text, 'NULL'),
	            coalesce(reason, 'NULL'), bytes_up, bytes_down, duration_ms,
	            floor(extract(epoch FROM created_at) * 1000)::bigint), E'\n' ORDER BY invocation_id::text, seq)
	       FROM agent.egress_connections WHERE org_id = '$1'"
}
ch_egress_rows() {
	chq "SELECT org_id, workspace_id, invocation_id, seq, kind, host, port, ifNull(address, 'NULL'), allowed,
	            ifNull(toString(rule_id), 'NULL'), ifNull(reason, 'NULL'), bytes_up, bytes_down, duration_ms,
	            created_at_ms
	       FROM egress_connections FINAL WHERE _deleted = 0 AND org_id = toUUID('$1')
	      ORDER BY toString(invocation_id), seq FORMAT TabSeparated" | tr '\t' '|'
}
# "rows|distinct keys" of an org's connection rows in ClickHouse, raw or FINAL.
ch_egress_once() {
	chq "SELECT count(), uniqExact(invocation_id, seq) FROM egress_connections ${2:-} WHERE org_id = toUUID('$1') FORMAT TabSeparated" | tr '\t' '|'
}
egress_tenant() {	# → "org ws agent conv" with allowed.test and *.allowed.test on 443
	local T org
	T=$(new_tenant 100)
	read -r org _ <<<"$T"
	aq "$org" "SELECT agent.add_egress_rule('allowed.test', '{443}', 'admin');
SELECT agent.add_egress_rule('*.allowed.test', '{443}', 'admin');" >/dev/null
	echo "$T"
}

t_egress_runs() {
	egress_up || return
	local T org ws agent conv invs=() i states
	T=$(egress_tenant)
	read -r org ws agent conv <<<"$T"
	for i in 1 2 3; do invs+=("$(run "$T" python "$EGRESS_CODE")"); done
	states=$(for i in "${invs[@]}"; do field "$i" state; done | tr '\n' ' ')
	check "three runs with egress succeeded" "succeeded succeeded succeeded " "$states"
	check "each logged three attempts, two allowed, with bytes both ways" "9|6|6" \
		"$(sql "SELECT count(*) || '|' || count(*) FILTER (WHERE allowed) || '|' || count(*) FILTER (WHERE bytes_up >= 3000 AND bytes_down > 0) FROM agent.egress_connections WHERE org_id = '$org'")"
	if wait_for 30 egress_caught_up; then
		ok "the runs' connection rows reach ClickHouse"
	else
		nok "the runs' connection rows reach ClickHouse" "state=$(state) err=$(sql "SELECT last_error FROM agent.export_status()")"
	fi
	check "with the database's content (host, address, rule, reason, bytes, times)" \
		"$(pg_egress_rows "$org")" "$(ch_egress_rows "$org")"
	check "exactly once, even in the raw table" "9|9" "$(ch_egress_once "$org")"
	# One transaction (the run's finish) wrote the invocation row and its
	# connection rows: one commit LSN, one version, beside each other.
	check "beside each run's invocation row, with its version" \
		"$(chq "SELECT toString(invocation_id), _version FROM tool_invocations WHERE org_id = toUUID('$org') FORMAT TabSeparated" | sort)" \
		"$(chq "SELECT DISTINCT toString(invocation_id), _version FROM egress_connections WHERE org_id = toUUID('$org') FORMAT TabSeparated" | sort)"
}

# Killed with SIGKILL in the middle of a batch: the invocation rows are in
# ClickHouse, the connection rows of the same transactions are not, no
# watermark; the whole cluster restarts (a backend killed by a signal is a
# crash to the postmaster) and the slot replays the batch.
t_egress_kill9_mid_batch() {
	egress_up || return
	local T org ws agent conv inv pid
	T=$(egress_tenant)
	read -r org ws agent conv <<<"$T"
	sql "ALTER SYSTEM SET sandbox.export_fault = 'pause_between_tables'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
	inv=$(run "$T" python "$EGRESS_CODE")
	check "the run succeeded" succeeded "$(field "$inv" state)"
	if ! wait_for 30 '[ "$(state)" = paused ]'; then
		nok "fault pause_between_tables reached" "state=$(state)"
		sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null
		sql "SELECT pg_reload_conf()" >/dev/null
		return
	fi
	check "paused between the tables: the invocation row is in ClickHouse, its connection rows not yet" "1|0" \
		"$(chq "SELECT count() FROM tool_invocations WHERE invocation_id = toUUID('$inv')")|$(chq "SELECT count() FROM egress_connections WHERE invocation_id = toUUID('$inv')")"
	pid=$(sql "SELECT exporter_pid FROM agent.export_status()")
	# (a reload does not end the pause; the restarted exporter must not pause)
	sql "ALTER SYSTEM RESET sandbox.export_fault" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
	kill -KILL "$pid"
	if wait_for 90 "egress_caught_up && [ \"\$(sql 'SELECT exporter_pid FROM agent.export_status()')\" != $pid ]"; then
		ok "after kill -9 of the exporter, a new one catches up"
	else
		nok "after kill -9 of the exporter, a new one catches up" "state=$(state) err=$(sql "SELECT last_error FROM agent.export_status()")"
	fi
	if grep -q "(PID $pid) was terminated by signal 9" "$EX_DIR/server.log"; then
		ok "the postmaster saw the exporter killed and restarted the cluster"
	else
		nok "the postmaster saw the exporter killed and restarted the cluster"
	fi
	check "the run's connection rows arrived, with the database's content" \
		"$(pg_egress_rows "$org")" "$(ch_egress_rows "$org")"
	check "exactly once in the deduplicated table" "3|3" "$(ch_egress_once "$org" FINAL)"
	check "and so is its invocation row" 1 \
		"$(chq "SELECT count() FROM tool_invocations FINAL WHERE invocation_id = toUUID('$inv')")"
}

# Runs finishing while the exporter is killed (SIGKILL) again and again.
t_egress_kill9_under_load() {
	egress_up || return
	local T org ws agent conv invs=() i pid n
	T=$(egress_tenant)
	read -r org ws agent conv <<<"$T"
	for i in 1 2 3 4 5 6; do invs+=("$(start "$T" python "$EGRESS_CODE")"); done
	for i in 1 2 3; do
		sleep 2
		pid=$(sql "SELECT exporter_pid FROM agent.export_status()" 2>/dev/null)
		[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
		wait_for 30 '[ -n "$(sql "SELECT exporter_pid FROM agent.export_status()" 2>/dev/null)" ]'
	done
	for i in "${invs[@]}"; do await "$T" "$i" 120 >/dev/null 2>&1; done
	wait_for 120 "[ \"\$(sql \"SELECT count(*) FROM agent.invocations WHERE org_id = '$org' AND state IN ('approved', 'provisioning', 'running')\")\" = 0 ]"
	n=$(sql "SELECT count(*) FROM agent.egress_connections WHERE org_id = '$org'")
	[ "${n:-0}" -gt 0 ] || nok "(runs wrote connection rows during the kills)" "states: $(sql "SELECT string_agg(state, ',') FROM agent.invocations WHERE org_id = '$org'")"
	if wait_for 90 egress_caught_up; then
		ok "three kill -9 of the exporter while runs finish: export catches up"
	else
		nok "three kill -9 of the exporter while runs finish: export catches up" "state=$(state) err=$(sql "SELECT last_error FROM agent.export_status()")"
	fi
	check "every connection row of the runs, with the database's content" \
		"$(pg_egress_rows "$org")" "$(ch_egress_rows "$org")"
	check "exactly once in the deduplicated table" "$n|$n" "$(ch_egress_once "$org" FINAL)"
}

# A running export whose publication lacks agent.egress_connections (an
# upgrade from 0.1.0): the setup adds the table and copies what it holds.
t_egress_table_added() {
	egress_up || return
	local T org ws agent conv inv inv2 copied streamed
	T=$(egress_tenant)
	read -r org ws agent conv <<<"$T"
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	wait_for 10 '[ "$(state)" = disabled ]'
	sql "ALTER PUBLICATION sandbox_ext_tool_invocations DROP TABLE agent.egress_connections" >/dev/null
	inv=$(run "$T" python "$EGRESS_CODE")
	check "a run while the table is not published" "succeeded|3" \
		"$(field "$inv" state)|$(sql "SELECT count(*) FROM agent.egress_connections WHERE invocation_id = '$inv'")"
	sql "ALTER SYSTEM SET sandbox.clickhouse_url = 'http://127.0.0.1:$CLICKHOUSE_HTTP_PORT'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	if wait_for 60 egress_caught_up; then
		ok "the exporter puts the table back and catches up"
	else
		nok "the exporter puts the table back and catches up" "state=$(state) err=$(sql "SELECT last_error FROM agent.export_status()")"
	fi
	check "the table is published again" 1 \
		"$(sql "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'sandbox_ext_tool_invocations' AND tablename = 'egress_connections'")"
	check "the rows written while it was not published were copied" \
		"$(pg_egress_rows "$org")" "$(ch_egress_rows "$org")"
	check "once each" "3|3" "$(ch_egress_once "$org" FINAL)"
	check "the copy is over" f "$(sql "SELECT copy_pending FROM agent.export_status()")"
	inv2=$(run "$T" python "$EGRESS_CODE")
	wait_for 30 egress_caught_up
	check "and a later run's rows stream again" "6|6" "$(ch_egress_once "$org" FINAL)"
	check "with the database's content" "$(pg_egress_rows "$org")" "$(ch_egress_rows "$org")"
	copied=$(chq "SELECT max(_version) FROM egress_connections FINAL WHERE invocation_id = toUUID('$inv')")
	streamed=$(chq "SELECT min(_version) FROM egress_connections FINAL WHERE invocation_id = toUUID('$inv2')")
	check "the later run's rows carry its commit's version, above the copy's" t \
		"$([ "${copied:-0}" -gt 0 ] 2>/dev/null && [ "${streamed:-0}" -gt "$copied" ] && echo t || echo "copied $copied, streamed $streamed")"
}

run_tests t_values t_update_delete t_clickhouse_down t_exporter_killed t_pg_crash t_permanent_error t_lost_slot_resync t_kills_under_load t_pg_schema_change t_slot_invalidated t_turn_off \
	t_egress_runs t_egress_kill9_mid_batch t_egress_kill9_under_load t_egress_table_added
finish_suite
