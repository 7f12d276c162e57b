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
# Before the crash the primary's export is turned off (its slot stays) and
# runs are made: a backlog the old primary never sent, which only the
# resync's copy can bring to ClickHouse.
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
BACKLOG=
AFTER_RESYNC=
PROMOTED_MS=
ids_sql() { printf "'%s'," "$@" | sed 's/,$//'; }	# uuid literals for IN (...)
ch_ids() { printf "toUUID('%s')," "$@" | sed 's/,$//'; }

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
	local lsn b
	# The backlog: the export off on the primary (the standby keeps its
	# copy of the setting, taken by pg_basebackup), runs it never sends.
	q -c "ALTER SYSTEM RESET sandbox.clickhouse_url" -c "SELECT pg_reload_conf()" >/dev/null
	if wait_for 30 '[ "$(state)" = disabled ]'; then ok "the primary's export is off"; else
		nok "the primary's export is off" "state=$(state)"; fi
	for b in 1 2; do BACKLOG="$BACKLOG $(run "$A" shell "echo backlog $b" none)"; done
	# shellcheck disable=SC2086
	check "a backlog of 2 finished runs the old primary never exported" "2|0" \
		"$(q -c "SELECT count(*) FROM agent.tool_invocations WHERE invocation_id IN ($(ids_sql $BACKLOG))")|$(chq "SELECT count() FROM tool_invocations WHERE invocation_id IN ($(ch_ids $BACKLOG))")"
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
	PROMOTED_MS=$(q -c "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
}

# The promoted standby's cron.job is the old primary's: its jobs name the
# old primary's socket and port, until the new primary's supervisor points
# them at it when it starts; agent.after_restore() leaves them there.
t_after_promotion_step() {
	local out
	if wait_for 30 "[ \"\$(q -c \"SELECT count(*) || '|' || max(nodeport) FROM cron.job WHERE jobname LIKE 'sandbox_ext_%' AND nodename = '$(cluster_dir $S)'\")\" = '4|$(cluster_port $S)' ]"; then
		ok "the new primary's supervisor points the replicated maintenance jobs at it"
	else
		nok "the new primary's supervisor points the replicated maintenance jobs at it" \
			"$(q -c "SELECT string_agg(nodename || ':' || nodeport, ' ') FROM cron.job WHERE jobname LIKE 'sandbox_ext_%'")"
	fi
	out=$(q -F ' ' -c "SELECT step, detail FROM agent.after_restore()")
	check "after agent.after_restore() they name the new primary" "4|$(cluster_dir $S)|$(cluster_port $S)" \
		"$(q -c "SELECT count(*) || '|' || min(nodename) || '|' || max(nodeport) FROM cron.job WHERE jobname LIKE 'sandbox_ext_%' AND nodename = '$(cluster_dir $S)'")"
	check "and says the export needs a resync" 1 \
		"$(grep -c '^export the export slot does not exist on this server' <<<"$out")"
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
	check_exactly_once
	check "the resolved run's row says it was refunded" "provision_failed|0" \
		"$(chq "SELECT status, credits_charged FROM tool_invocations FINAL WHERE invocation_id = toUUID('$(q -c "SELECT id FROM agent.invocations WHERE state = 'provision_failed'")') FORMAT CSV" | tr -d '"' | tr ',' '|')"
	# Streaming resumes on the new slot: a run made now reaches ClickHouse
	# once, with a version above the copy's.
	AFTER_RESYNC=$(run "$A" python 'print("after the resync")' none)
	if wait_for 60 "caught_up && [ \"\$(chq \"SELECT count() FROM tool_invocations WHERE invocation_id = toUUID('$AFTER_RESYNC')\")\" = 1 ]"; then
		ok "a run after the resync is exported by the new slot"
	else
		nok "a run after the resync is exported by the new slot" "state=$(state) rows=$(chq "SELECT count() FROM tool_invocations WHERE invocation_id = toUUID('$AFTER_RESYNC')")"
	fi
	check "once, above the copy's version, as succeeded" "1|1|succeeded" \
		"$(chq "SELECT count(), min(_version) > $COPY_VERSION, any(status) FROM tool_invocations WHERE invocation_id = toUUID('$AFTER_RESYNC') FORMAT CSV" | tr -d '"' | tr ',' '|')"
	check_exactly_once
	# Anchors: those of the old primary and the new ones agree with the chain.
	wait_for 20 "[ \"\$(q -c \"SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE v.anchors_checked = 0\")\" = 0 ]"
	check "every chain verifies against its anchors" "0|0" \
		"$(q -c "SELECT count(*) FILTER (WHERE NOT v.ok) || '|' || count(*) FILTER (WHERE v.anchors_checked = 0) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v")"
	# The new primary publishes anchors of its own: one that covers the
	# last event of the run made after the resync (written after the
	# promotion, so the old primary never saw it), with that chain's hash.
	local org last got
	org=${A%% *}
	last=$(q -c "SELECT max(id) FROM agent.audit_events WHERE org_id = '$org' AND invocation_id = '$AFTER_RESYNC'")
	if wait_for 30 "[ \"\$(chq \"SELECT count() FROM audit_anchors WHERE org_id = toUUID('$org') AND last_id >= $last\")\" -gt 0 ]"; then
		ok "the new primary publishes an anchor past an event written after the promotion"
	else
		nok "the new primary publishes an anchor past an event written after the promotion" "event $last"
	fi
	got=$(chq "SELECT last_id, last_hash, read_at_ms > $PROMOTED_MS FROM audit_anchors WHERE org_id = toUUID('$org') ORDER BY last_id DESC LIMIT 1 FORMAT CSV" | tr -d '"' | tr ',' '|')
	check "it names that chain's event and hash, read after the promotion" \
		"$(q -c "SELECT id || '|' || hash FROM agent.audit_events WHERE id = (SELECT max(id) FROM agent.audit_events WHERE org_id = '$org')")|1" "$got"
	check "the chain verifies against it" t \
		"$(q -c "SELECT v.ok AND v.anchors_checked > 0 FROM agent.verify_audit_chain('$org') v")"
}

# "Exactly once" for a ReplacingMergeTree copy, on the raw table (FINAL
# would hide what this looks for).  Each PostgreSQL row is inserted once
# (at the run's finish), so it is streamed at most once, with its commit
# LSN as version; the resync copies every row once more with one version
# C - 1, below all the new slot streams.  Background merges may fold a
# key's older version into the copy, never the copy away.  So, per key:
# no version twice; exactly one row with the copy's version, for every row
# PostgreSQL had at the resync; the backlog (never streamed) only that
# one; a later row once, above it; and the highest version of each key is
# PostgreSQL's row.
COPY_VERSION=
check_exactly_once() {
	local pg ch copied
	# shellcheck disable=SC2086
	COPY_VERSION=$(chq "SELECT if(uniqExact(_version) = 1 AND count() = $(wc -w <<<"$BACKLOG"), any(_version), 0) FROM tool_invocations WHERE invocation_id IN ($(ch_ids $BACKLOG))")
	check "the backlog arrived once each, all with one (the copy's) version" 1 \
		"$([ "${COPY_VERSION:-0}" -gt 0 ] 2>/dev/null && echo 1 || echo "0 ($COPY_VERSION)")"
	copied=$(q -c "SELECT count(*) FROM agent.tool_invocations WHERE invocation_id <> '${AFTER_RESYNC:-00000000-0000-0000-0000-000000000000}'")
	check "the copy carried every row PostgreSQL had, once" "$copied|$copied" \
		"$(chq "SELECT count(), uniqExact(invocation_id) FROM tool_invocations WHERE _version = $COPY_VERSION FORMAT CSV" | tr ',' '|')"
	check "no row arrived twice with one version (raw table)" 0 \
		"$(chq "SELECT count() FROM (SELECT invocation_id, _version FROM tool_invocations GROUP BY invocation_id, _version HAVING count() > 1)")"
	check "no key has more than its stream and its copy (raw table)" 0 \
		"$(chq "SELECT count() FROM (SELECT invocation_id FROM tool_invocations GROUP BY invocation_id HAVING count() > 2 OR (count() = 2 AND countIf(_version = $COPY_VERSION) = 0))")"
	pg=$(q -c "SELECT string_agg(invocation_id || ':' || status || ':' || credits_charged, ',' ORDER BY invocation_id::text) FROM agent.tool_invocations")
	ch=$(chq "SELECT arrayStringConcat(groupArray(r), ',') FROM (SELECT concat(toString(invocation_id), ':', argMax(status, _version), ':', toString(argMax(credits_charged, _version))) AS r FROM tool_invocations WHERE _deleted = 0 GROUP BY invocation_id ORDER BY toString(invocation_id))")
	check "each key's highest version is PostgreSQL's row (raw table, argMax)" "$pg" "$ch"
}

cleanup() {
	stop_cluster $P
	stop_cluster $S
	[ -n "$standby_work" ] && rm -rf "$standby_work"
	"$CH" stop >/dev/null 2>&1
}
trap cleanup EXIT
run_tests t_primary t_standby t_promote_with_a_run_in_flight t_after_promotion_step t_new_primary_resolves t_export_resync
finish_suite
