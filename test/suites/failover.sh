#!/usr/bin/env bash
# failover: a streaming standby promoted while a run is in flight
# (docs/operations.md, "Failover").
#
# Cluster 1 (lib.sh) is the primary, with the ClickHouse export on (a real
# clickhouse-server on the primary's port + 2000/3000); cluster 2 a
# streaming standby made with pg_basebackup -R.  A run is left running, the
# standby has replayed it, the primary is stopped in immediate mode (a
# crash), the standby is promoted.  Then: the supervisor comes up there and
# resolves the run by the billing rule (a failure of ours: refunded); the
# export (PostgreSQL 15 has no failover slots: the slot is gone) is in
# error until agent.export_resync(), after which ClickHouse holds every row
# once; the audit chains verify against their anchors; a new run works.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

P=1
S=2
export CLICKHOUSE_HTTP_PORT=$(($(cluster_port $P) + 2000))
export CLICKHOUSE_TCP_PORT=$(($(cluster_port $P) + 3000))
export CLICKHOUSE_DIR=/tmp/sandbox_ch_test.$(cluster_port $P)
CH="$top/scripts/clickhouse.sh"
chq() { "$CH" query "$1" 2>&1; }
state() { q -c "SELECT state FROM agent.export_status()"; }
pg_count() { q -c "SELECT count(*) FROM agent.tool_invocations"; }
ch_final_count() { chq "SELECT count() FROM tool_invocations FINAL WHERE _deleted = 0"; }
caught_up() {
	[ "$(state)" = idle ] && [ "$(q -c "SELECT lag_seconds = 0 FROM agent.export_status()")" = t ] &&
		[ "$(ch_final_count)" = "$(pg_count)" ]
}
standby_work=
A=
INV=

t_primary() {
	if ! command -v clickhouse-server >/dev/null || ! "$CH" start >/dev/null; then
		nok "clickhouse server starts"
		finish_suite
	fi
	if ! start_cluster $P; then
		nok "the primary starts"
		finish_suite
	fi
	use_cluster $P
	q -c "ALTER SYSTEM SET sandbox.clickhouse_url = 'http://127.0.0.1:$CLICKHOUSE_HTTP_PORT'" \
		-c "ALTER SYSTEM SET sandbox.export_poll_interval = '1s'" -c "ALTER SYSTEM SET sandbox.anchor_interval = '1s'" \
		-c "SELECT pg_reload_conf()" >/dev/null
	A=$(new_tenant 100)
	run "$A" shell 'echo one' none >/dev/null
	run "$A" python 'print("two")' none >/dev/null
	run "$A" shell 'exit 4' none >/dev/null
	if wait_for 60 caught_up; then ok "the primary exports its runs"; else
		nok "the primary exports its runs" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"; fi
}

t_standby() {
	local d rc
	d=$(cluster_dir $S)
	rm -rf "$d"
	install -d -o postgres -g postgres -m 0700 "$d"
	as_pg "$PGBIN/pg_basebackup" -h "$(cluster_dir $P)" -p "$(cluster_port $P)" -U postgres \
		-D "$d/data" -X stream -R -c fast >/dev/null 2>&1
	rc=$?
	check "pg_basebackup -R makes a standby" 0 "$rc"
	# Its own socket, port and (the host being shared with the primary here)
	# work directory; everything else as the primary.
	standby_work=${SANDBOX_WORK_BASE:-/var/lib/sandbox_ext}/failover-standby-$(cluster_port $S)
	cat >>"$d/data/postgresql.conf" <<CONF
port = $(cluster_port $S)
unix_socket_directories = '$d'
cron.host = '$d'
sandbox.work_dir = '$standby_work'
CONF
	as_pg "$PGBIN/pg_ctl" -D "$d/data" -l "$d/server.log" -w -t 60 start >/dev/null
	use_cluster $S
	check "the standby is in recovery" t "$(q -c "SELECT pg_is_in_recovery()")"
	check "no sandbox_ext worker runs on the standby" 0 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'sandbox_ext%'")"
	use_cluster $P
}

t_promote_with_a_run_in_flight() {
	local lsn
	INV=$(start "$A" shell 'sleep 60; echo never printed' none 120)
	if wait_state "$INV" running 300; then ok "a run is in flight on the primary (charged)"; else
		nok "a run is in flight on the primary" "state=$(field "$INV" state)"; fi
	check "it is charged" 2 "$(field "$INV" credits_charged)"
	lsn=$(q -c "SELECT pg_current_wal_lsn()")
	use_cluster $S
	if wait_for 30 "[ \"\$(q -c \"SELECT pg_last_wal_replay_lsn() >= '$lsn'\")\" = t ]"; then
		ok "the standby has replayed it"
	else
		nok "the standby has replayed it"
	fi
	# The primary dies (no shutdown checkpoint, nothing finished).
	as_pg "$PGBIN/pg_ctl" -D "$(cluster_dir $P)/data" -m immediate -w stop >/dev/null
	as_pg "$PGBIN/pg_ctl" -D "$(cluster_dir $S)/data" -w promote >/dev/null
	check "the standby is promoted" f "$(q -c "SELECT pg_is_in_recovery()")"
}

t_new_primary_resolves() {
	local st
	if wait_for 120 "[ \"\$(field '$INV' state)\" = provision_failed ]"; then
		ok "the new primary's supervisor resolves the run in flight"
	else
		nok "the new primary's supervisor resolves the run in flight" "state=$(field "$INV" state)"
	fi
	st=$(field "$INV" "state || '|' || credits_charged")
	check "by the billing rule: a failure of ours, refunded" "provision_failed|0|charge:-2,refund:2" "$st|$(ledger "$INV")"
	check_invariants
	INV=$(run "$A" python 'print("on the new primary")')
	check "a new run on the new primary succeeds and is charged" "succeeded|on the new primary|2" \
		"$(field "$INV" state)|$(output "$INV")|$(field "$INV" credits_charged)"
}

t_export_resync() {
	check "the export slot did not survive (no failover slots in PostgreSQL 15)" 0 \
		"$(q -c "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'sandbox_ext_export'")"
	if wait_for 30 '[ "$(state)" = error ]'; then ok "the exporter stops in error, saying so"; else
		nok "the exporter stops in error" "state=$(state)"; fi
	q -c "SELECT agent.export_resync()" >/dev/null
	if wait_for 60 caught_up; then ok "after agent.export_resync() ClickHouse has every row"; else
		nok "after agent.export_resync() ClickHouse has every row" "state=$(state) pg=$(pg_count) ch=$(ch_final_count)"; fi
	check "each exactly once (deduplicated), none extra" "$(pg_count)|0" \
		"$(chq "SELECT uniqExact(invocation_id) FROM tool_invocations FINAL WHERE _deleted = 0")|$(chq "SELECT count() FROM (SELECT invocation_id FROM tool_invocations FINAL WHERE _deleted = 0 GROUP BY invocation_id HAVING count() > 1)")"
	check "the resolved run's row says it was refunded" "provision_failed|0" \
		"$(chq "SELECT status, credits_charged FROM tool_invocations FINAL WHERE invocation_id = toUUID('$(q -c "SELECT id FROM agent.invocations WHERE state = 'provision_failed'")') FORMAT CSV" | tr -d '"' | tr ',' '|')"
	# Anchors: those of the old primary and the new ones agree with the chain.
	wait_for 20 "[ \"\$(q -c \"SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE v.anchors_checked = 0\")\" = 0 ]"
	check "every chain verifies against its anchors" "0|0" \
		"$(q -c "SELECT count(*) FILTER (WHERE NOT v.ok) || '|' || count(*) FILTER (WHERE v.anchors_checked = 0) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v")"
}

cleanup() {
	stop_cluster $P
	stop_cluster $S
	[ -n "$standby_work" ] && rm -rf "$standby_work"
	"$CH" stop >/dev/null 2>&1
}
trap cleanup EXIT
run_tests t_primary t_standby t_promote_with_a_run_in_flight t_new_primary_resolves t_export_resync
finish_suite
