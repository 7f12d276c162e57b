#!/usr/bin/env bash
# Benchmark of the ClickHouse export (issue 6).  Measures, never asserts.
#
#   1. throughput: 100k rows of agent.tool_invocations committed while the
#      export is off, then the time for the exporter to deliver the backlog
#      (a) when they were one transaction, (b) when they were 100k
#      single-row transactions (what the supervisor does);
#   2. baseline in the same run: the same 100k rows through
#      psql COPY ... TO STDOUT | clickhouse-client INSERT (no slot, no
#      exactly-once), and the ratio;
#   3. lag while rows are committed at ~1,000 rows/s (pgbench -R) for
#      LAG_SECONDS: agent.export_status().lag_seconds sampled at 10 Hz,
#      plus an end-to-end probe (a marked row every second, timed until
#      ClickHouse returns it).
#
# Runs its own throwaway PostgreSQL cluster and ClickHouse server on
# separate ports (BENCH_PGPORT, CLICKHOUSE_HTTP_PORT/TCP_PORT).  Needs the
# extension built and installed for PG_CONFIG (make && make install).
#   ROWS=100000 RATE=1000 LAG_SECONDS=20 bench/export/run.sh
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PGBIN=$(dirname "$PG_CONFIG")
ROWS=${ROWS:-100000}
RATE=${RATE:-1000}
LAG_SECONDS=${LAG_SECONDS:-20}
export SANDBOX_CLUSTER_DIR=${BENCH_CLUSTER_DIR:-/tmp/sandbox_ch_bench_pg}
export SANDBOX_PGPORT=${BENCH_PGPORT:-56211}
export SANDBOX_DB=bench
export CLICKHOUSE_HTTP_PORT=${CLICKHOUSE_HTTP_PORT:-$((SANDBOX_PGPORT + 2000))}
export CLICKHOUSE_TCP_PORT=${CLICKHOUSE_TCP_PORT:-$((SANDBOX_PGPORT + 3000))}
export CLICKHOUSE_DIR=${CLICKHOUSE_DIR:-/tmp/sandbox_ch_bench_ch}
CH="$top/scripts/clickhouse.sh"
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need_extension
bench_need clickhouse-server clickhouse-client curl
[ -x "$PGBIN/pgbench" ] || bench_die "no pgbench in $PGBIN (postgresql-15 ships it)"
work=$(mktemp -d /tmp/sandbox_export_bench.XXXXXX)
chmod 0777 "$work"
sql() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" -c "$1"; }
# HTTP, not clickhouse-client: its start-up would dominate the probe.
chq() { curl -sS --data-binary "$1" "http://127.0.0.1:$CLICKHOUSE_HTTP_PORT/"; }
now_ms() { date +%s%3N; }

cleanup() {
	"$top/scripts/cluster.sh" stop >/dev/null 2>&1
	"$CH" stop >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

wait_until() {		# timeout-seconds condition
	local deadline=$((SECONDS + $1))
	while [ $SECONDS -lt $deadline ]; do
		if eval "$2" >/dev/null 2>&1; then return 0; fi
		sleep 0.05
	done
	echo "bench: timed out waiting for: $2" >&2
	return 1
}

export_on() {
	sql "ALTER SYSTEM SET sandbox.clickhouse_url = 'http://127.0.0.1:$CLICKHOUSE_HTTP_PORT'" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
}
export_off() {
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	wait_until 10 '[ "$(sql "SELECT state FROM agent.export_status()")" = disabled ]'
}
ch_rows() { chq "SELECT count() FROM tool_invocations WHERE status = '$1'"; }

echo "== setup"
bench_start_cluster
"$CH" start >/dev/null || bench_die "could not start clickhouse-server (scripts/clickhouse.sh start)"
[ "$(sql "SELECT to_regclass('agent.tool_invocations') IS NOT NULL")" = t ] ||
	bench_die "agent.tool_invocations does not exist: the installed sandbox_ext is not this one (make install)"
# The slot, publication and copy are set up once, on an empty table.
export_on
wait_until 30 '[ "$(sql "SELECT state = '"'idle'"' AND NOT copy_pending FROM agent.export_status()")" = t ]' ||
	bench_die "the exporter did not reach idle: $(sql "SELECT state || ': ' || coalesce(last_error, '') FROM agent.export_status()")"
export_off
echo "exporter: batch of $(sql "SHOW sandbox.export_batch_rows") messages"

ROW_SQL="INSERT INTO agent.tool_invocations
	(invocation_id, org_id, workspace_id, agent_id, conversation_id, language, status, exit_code,
	 duration_ms, cpu_ms, peak_memory_bytes, credits_charged, started_at, finished_at)"
row_values() {		# status
	echo "gen_random_uuid(), '11111111-1111-1111-1111-111111111111',
	'22222222-2222-2222-2222-222222222222', gen_random_uuid(), gen_random_uuid(), 'python',
	'$1', 0, 1234, 1000, 52428800, 2, now() - interval '1 s', now()"
}

# ---- 1a: one transaction ----
echo "== throughput: $ROWS rows in one transaction"
sql "$ROW_SQL SELECT $(row_values bulk) FROM generate_series(1, $ROWS)"
t0=$(now_ms)
export_on
wait_until 600 "[ \"\$(ch_rows bulk)\" -ge $ROWS ]" || bench_die "the exporter did not deliver the $ROWS rows"
t1=$(now_ms)
bulk_ms=$((t1 - t0))
bulk_rate=$((ROWS * 1000 / (bulk_ms > 0 ? bulk_ms : 1)))
echo "exporter, one transaction:      $ROWS rows in $bulk_ms ms = $bulk_rate rows/s"
export_off

# ---- 1b: single-row transactions ----
echo "== throughput: $ROWS single-row transactions"
cat >"$work/one.sql" <<EOF
$ROW_SQL VALUES ($(row_values single));
EOF
as_pg "$PGBIN/pgbench" -n -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -c 4 -j 2 \
	-t $((ROWS / 4)) -f "$work/one.sql" "$SANDBOX_DB" >"$work/pgbench1.log" 2>&1 ||
	{ cat "$work/pgbench1.log"; exit 1; }
single=$(sql "SELECT count(*) FROM agent.tool_invocations WHERE status = 'single'")
t0=$(now_ms)
export_on
wait_until 900 "[ \"\$(ch_rows single)\" -ge $single ]" || bench_die "the exporter did not deliver the $single rows"
t1=$(now_ms)
single_ms=$((t1 - t0))
single_rate=$((single * 1000 / (single_ms > 0 ? single_ms : 1)))
echo "exporter, 1-row transactions:   $single rows in $single_ms ms = $single_rate rows/s"

# ---- 2: naive baseline ----
echo "== baseline: COPY | clickhouse-client of the same $ROWS bulk rows"
chq "CREATE TABLE baseline AS tool_invocations" >/dev/null
t0=$(now_ms)
as_pg "$PGBIN/psql" -X -q -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" -c "COPY (
	SELECT org_id, workspace_id, invocation_id, agent_id, conversation_id, tool_name, language, status,
	       exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes, credits_charged,
	       timed_out::int, oom_killed::int, output_truncated::int,
	       extract(epoch FROM started_at)::bigint, (extract(epoch FROM started_at) * 1000)::bigint,
	       extract(epoch FROM finished_at)::bigint, (extract(epoch FROM finished_at) * 1000)::bigint,
	       extract(epoch FROM created_at)::bigint, (extract(epoch FROM created_at) * 1000)::bigint,
	       0, 1
	  FROM agent.tool_invocations WHERE status = 'bulk') TO STDOUT" |
	clickhouse-client --host 127.0.0.1 --port "$CLICKHOUSE_TCP_PORT" --query \
		"INSERT INTO baseline (org_id, workspace_id, invocation_id, agent_id, conversation_id, tool_name, language, status, exit_code, signal, duration_ms, cpu_ms, peak_memory_bytes, credits_charged, timed_out, oom_killed, output_truncated, started_at, started_at_ms, finished_at, finished_at_ms, created_at, created_at_ms, _deleted, _version) FORMAT TabSeparated"
t1=$(now_ms)
base_ms=$((t1 - t0))
base_rows=$(chq "SELECT count() FROM baseline")
base_rate=$((base_rows * 1000 / (base_ms > 0 ? base_ms : 1)))
echo "baseline COPY | clickhouse-client: $base_rows rows in $base_ms ms = $base_rate rows/s"

# ---- 3: lag at ~RATE rows/s ----
echo "== lag: $RATE rows/s for ${LAG_SECONDS}s (pgbench -R)"
wait_until 60 '[ "$(sql "SELECT state FROM agent.export_status()")" = idle ]'
batches0=$(sql "SELECT batches FROM agent.export_status()")
cat >"$work/lag.sql" <<EOF
$ROW_SQL VALUES ($(row_values steady));
EOF
as_pg "$PGBIN/pgbench" -n -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -c 4 -j 2 \
	-R "$RATE" -T "$LAG_SECONDS" -f "$work/lag.sql" "$SANDBOX_DB" >"$work/pgbench2.log" 2>&1 &
bench_pid=$!
# Status sampler: lag_seconds at 10 Hz.
(
	end=$((SECONDS + LAG_SECONDS))
	while [ $SECONDS -lt $end ]; do
		sql "SELECT lag_seconds FROM agent.export_status()"
		sleep 0.1
	done
) >"$work/lag_samples" &
sampler=$!
# End-to-end probe: a row every second, timed until ClickHouse has it.
: >"$work/probe_ms"
end=$((SECONDS + LAG_SECONDS - 1))
i=0
while [ $SECONDS -lt $end ]; do
	i=$((i + 1))
	t0=$(now_ms)
	sql "$ROW_SQL VALUES ($(row_values probe_$i))"
	until [ "$(ch_rows "probe_$i")" -ge 1 ]; do sleep 0.01; done
	echo $(($(now_ms) - t0)) >>"$work/probe_ms"
	sleep 0.5
done
wait "$bench_pid"
wait "$sampler"
steady=$(sql "SELECT count(*) FROM agent.tool_invocations WHERE status = 'steady'")
t0=$(now_ms)
wait_until 120 "[ \"\$(ch_rows steady)\" -ge $steady ]" || bench_die "the exporter did not drain the backlog"
drain_ms=$(($(now_ms) - t0))
batches1=$(sql "SELECT batches FROM agent.export_status()")
achieved=$(grep -E '^tps' "$work/pgbench2.log" | head -1 | awk '{printf "%d", $3}')
read -r lag_max lag_p95 lag_avg < <(sort -g "$work/lag_samples" | awk '{a[NR]=$1; s+=$1} END {
	if (NR == 0) {print "n/a n/a n/a"; exit}
	p=int(NR*0.95); if (p < 1) p=1; printf "%.3f %.3f %.3f\n", a[NR], a[p], s/NR}')
read -r probe_max probe_p50 probe_avg < <(sort -n "$work/probe_ms" | awk '{a[NR]=$1; s+=$1} END {
	if (NR == 0) {print "n/a n/a n/a"; exit}
	printf "%d %d %d\n", a[NR], a[int((NR+1)/2)], s/NR}')
echo "committed at ${achieved:-?} rows/s (target $RATE)"
echo "lag_seconds (status, 10 Hz): max ${lag_max}s p95 ${lag_p95}s mean ${lag_avg}s"
echo "end-to-end probe (commit -> visible in ClickHouse): max ${probe_max} ms p50 ${probe_p50} ms mean ${probe_avg} ms ($(wc -l <"$work/probe_ms") probes)"
echo "backlog left when the load stopped drained in ${drain_ms} ms"
echo "row batches sent to ClickHouse during the load: $((batches1 - batches0)) ($(( (batches1 - batches0) / LAG_SECONDS ))/s, each plus one watermark insert)"

dups=$(chq "SELECT count() - uniqExact(invocation_id) FROM tool_invocations FINAL")
echo "duplicates in the deduplicated view: $dups"

echo "== ratios"
awk -v b="$bulk_rate" -v s="$single_rate" -v n="$base_rate" 'BEGIN {
	printf "exporter (one txn) / baseline:     %.2f\n", b / n
	printf "exporter (1-row txns) / baseline:  %.2f\n", s / n
}'
