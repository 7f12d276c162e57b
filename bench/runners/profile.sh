#!/usr/bin/env bash
# Where the primary's time goes per run: N sequential shell `true` runs
# through the local runner (request, approve, then LISTEN for the end as
# bench/e2e's client does), with pg_stat_statements tracking nested
# statements and track_functions on.  Prints the server's CPU per run (every
# server process, from /proc, as bench/runners/run.sh), WAL bytes per run,
# the top statements (top-level and nested) and the functions by their own
# time, each per run.  A diagnostic, not a benchmark: it asserts nothing
# and prints no ratio; bench/runners/run.sh is the benchmark.
#
#   bench/runners/profile.sh        (as root, after make install; its own cluster)
#   N=500 TOP=30 bench/runners/profile.sh
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
N=${N:-200}
TOPN=${TOP:-25}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_profile}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55439}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
[ -f "$("$PGBIN/pg_config" --pkglibdir)/pg_stat_statements.so" ] ||
	bench_die "pg_stat_statements is not installed (postgresql-contrib)"
export SANDBOX_EXTRA_CONF="shared_preload_libraries = 'pg_cron,sandbox_ext,pg_stat_statements'
pg_stat_statements.track = all
track_functions = all
${SANDBOX_EXTRA_CONF:-}"
bench_need cc
bench_need_extension
bench_need_jail "$PGBIN/sandbox-jail"
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_profile.XXXXXX)
chmod 0755 "$tmp"
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
cc -O2 -Wall -o "$tmp/client" "$top/bench/e2e/client.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq ||
	bench_die "could not build bench/e2e/client.c (libpq-dev)"
"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
bench_start_cluster
q -c "CREATE EXTENSION pg_stat_statements" >/dev/null
read -r ORG WS AGENT < <(bench_tenant)
conninfo="host=$SANDBOX_CLUSTER_DIR port=$SANDBOX_PGPORT user=postgres dbname=$SANDBOX_DB"
"$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true 5 >/dev/null ||
	bench_die "the warm-up runs failed"

ticks() { bench_server_ticks; }
q -c "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset()" >/dev/null
w0=$(q -c "SELECT pg_current_wal_lsn()")
t0=$(ticks)
read -r p50 p99 _ < <("$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$N") ||
	bench_die "the latency client failed"
t1=$(ticks)
w1=$(q -c "SELECT pg_current_wal_lsn()")
echo "shell true, $N sequential runs through the local runner: approve -> done p50 $p50 ms, p99 $p99 ms"
echo "server CPU per run: $(awk -v a="$t0" -v b="$t1" -v n="$N" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }') µs; WAL per run: $(q -c "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $N)") bytes"
echo "statements per run: $(q -c "SELECT round(sum(calls)::numeric / $N, 1) || ' (top-level ' || round((sum(calls) FILTER (WHERE toplevel))::numeric / $N, 1) || ')' FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%'")"
echo
echo "statements by server time (µs per run | calls per run | top-level | statement):"
q -F ' | ' -c "SELECT lpad(round((total_exec_time * 1000 / $N)::numeric)::text, 6), lpad(round(calls::numeric / $N, 2)::text, 5), CASE WHEN toplevel THEN 'top' ELSE '   ' END, left(regexp_replace(query, '\s+', ' ', 'g'), 100) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT $TOPN"
echo
echo "functions by their own time (self µs per run | total µs per run | calls per run | function):"
q -F ' | ' -c "SELECT lpad(round(self_time * 1000 / $N)::text, 6), lpad(round(total_time * 1000 / $N)::text, 6), lpad(round(calls::numeric / $N, 2)::text, 5), schemaname || '.' || funcname FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT $TOPN"
