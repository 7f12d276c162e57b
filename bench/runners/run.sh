#!/usr/bin/env bash
# Runner hosts: throughput of shell `true` through 1, 2 and 3 remote
# sandbox-runner daemons next to the local runner (the baseline) in the
# same run; for each, the primary's CPU and WAL per completed invocation
# and the runs/s one primary core could coordinate at that cost; and
# approve → done p50/p99 through one remote runner next to the local one.
# Prints figures and ratios; asserts nothing (this machine is shared and
# noisy, and every runner host shares its cores with the primary).
#
#   bench/runners/run.sh      (as root, after make install; starts its own cluster)
#   SECONDS_=20 CLIENTS=8 SLOTS=4 N=100 bench/runners/run.sh
#
# Runner hosts are network namespaces with veth pairs, TLS and a role each,
# exactly as in the runners suite (test/runner_hosts.sh).
#
# The primary's CPU is that of every server process (the postmaster's
# children: the clients' backends, the runners' backends, the supervisor,
# the background writers), from /proc/<pid>/stat: the postmaster's own and
# reaped children's times plus those of its live children, before and
# after.  The local runner and its jails are not server processes (the
# supervisor's child runs on the same host but outside the server; its CPU
# is not counted), nor are the remote runners'.  Of it, the part of the
# runners' backends (their steps) and of the supervisor are shown; the rest
# is the clients' API calls and the server's own work.  WAL is the
# pg_current_wal_lsn() difference.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
DURATION=${SECONDS_:-10}
CLIENTS=${CLIENTS:-8}
SLOTS=${SLOTS:-4}
N=${N:-50}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_runners}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55438}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
# pg_stat_statements, where installed, says which statements the cost is
# (printed per phase: calls and server time per completed run).
PGSS=false
if [ -f "$("$PGBIN/pg_config" --pkglibdir)/pg_stat_statements.so" ]; then
	PGSS=true
	export SANDBOX_EXTRA_CONF="shared_preload_libraries = 'pg_cron,sandbox_ext,pg_stat_statements'
pg_stat_statements.track = top
${SANDBOX_EXTRA_CONF:-}"
fi

# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
[ "$(id -u)" = 0 ] || bench_die "runner hosts are network namespaces: run as root"
bench_need cc openssl ip nsenter setpriv
bench_need_extension
bench_need_jail "$PGBIN/sandbox-jail"
[ -x "$PGBIN/sandbox-runner" ] || bench_die "$PGBIN/sandbox-runner is not installed (make install)"

# q, wait_for, ... and the runner hosts, as the runners suite has them
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"
# shellcheck source=../../test/runner_hosts.sh
. "$top/test/runner_hosts.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_runners.XXXXXX)
chmod 0755 "$tmp"
cleanup() {
	rh_cleanup >/dev/null 2>&1 || true
	"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -Wall -o "$tmp/client" "$top/bench/e2e/client.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq ||
	bench_die "could not build bench/e2e/client.c (libpq-dev)"

"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
bench_start_cluster
if $PGSS; then q -c "CREATE EXTENSION pg_stat_statements" >/dev/null; fi
rh_setup 3 >"$tmp/setup.log" 2>&1 || bench_die "could not set up the runner hosts: $(tail -n 5 "$tmp/setup.log")"

read -r ORG WS AGENT < <(bench_tenant)
# One org drives every client: its limit is the operator's to raise.
q -c "SELECT agent.set_org_limits('$ORG', $((CLIENTS > 3 * SLOTS ? CLIENTS : 3 * SLOTS)), NULL)" >/dev/null
conninfo="host=$SANDBOX_CLUSTER_DIR port=$SANDBOX_PGPORT user=postgres dbname=$SANDBOX_DB"

local_slots() {
	# (the local runner is signalled on reload and claims at most that many;
	# as test/run.sh does, give it a moment)
	q -c "ALTER SYSTEM SET sandbox.max_concurrent_runs = $1" -c "SELECT pg_reload_conf()" >/dev/null
	sleep 1
}
drain() { q -c "SELECT agent.drain_runner('$(rh_name "$1")')" >/dev/null; }
resume() { q -c "SELECT agent.drain_runner('$(rh_name "$1")', true)" >/dev/null; }
start_runner() {
	rh_start "$1" "$SLOTS"
	wait_for 30 '[ "$(q -c "SELECT live FROM agent.runner_status WHERE name = '"'$(rh_name "$1")'"'")" = t ]' ||
		bench_die "runner host $1 did not register: $(tail -n 3 "$RH_DIR/h$1/runner.log")"
}

# One run must succeed where it is measured: timing failures measures nothing.
one_run() {			# where
	local inv appr st
	read -r inv appr < <(q -F ' ' <<SQL | sed '/^$/d' | tail -n 1
BEGIN;
SELECT agent.set_tenant('$ORG', '$WS');
SELECT invocation_id, approval_id FROM agent.request_execution('$WS', '$AGENT', NULL, 'shell', 'true', 'bench-requester');
COMMIT;
SQL
)
	q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.approve('$appr', 'bench-approver'); COMMIT;" >/dev/null
	st=$(q <<<"BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.wait('$inv', '60 s'); COMMIT;" | sed '/^$/d' | tail -n 1)
	[ "$st" = succeeded ] ||
		bench_die "a run through $1 ended ${st:-in no state} ($(q -c "SELECT state_reason FROM agent.invocations WHERE id = '$inv'")): nothing to time"
}

# CPU ticks of every server process so far (see the header): "all
# runners' supervisor's", the latter two those of the runners' backends
# (application_name sandbox-runner*, local or remote) and of the supervisor.
primary_ticks() {
	local pm runners sup
	pm=$(head -n 1 "$SANDBOX_CLUSTER_DIR/data/postmaster.pid")
	runners=" $(q -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name LIKE 'sandbox-runner%'") "
	sup=$(q -c "SELECT pid FROM agent.worker_status()")
	{
		echo "all $(sed 's/^.*) //' "/proc/$pm/stat")"
		for c in $(cat "/proc/$pm/task/$pm/children" 2>/dev/null); do
			if [[ $runners == *" $c "* ]]; then k=runner; elif [ "$c" = "$sup" ]; then k=sup; else k=all; fi
			echo "$k $(sed 's/^.*) //' "/proc/$c/stat" 2>/dev/null)"
		done
	} | awk '{ t = $13 + $14 + $15 + $16; all += t; if ($1 == "runner") r += t; if ($1 == "sup") s += t }
			END { printf "%d %d %d\n", all, r, s }'
}
wal_lsn() { q -c "SELECT pg_current_wal_lsn()"; }
HZ=$(getconf CLK_TCK)

# throughput LABEL RUNNERS: one line of the table
declare -A rate_of
throughput() {
	local label=$1 nr=$2 t0 r0 s0 t1 r1 s1 w0 w1 out completed rate cpu_us wal
	if $PGSS; then q -c "SELECT pg_stat_statements_reset()" >/dev/null; fi
	read -r t0 r0 s0 < <(primary_ticks)
	w0=$(wal_lsn)
	out=$("$tmp/client" throughput "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$CLIENTS" "$DURATION") ||
		bench_die "the throughput client failed ($label)"
	# (the runners' backends and the supervisor outlive the run: their
	# ticks are read by pid; the clients' backends have exited into the
	# postmaster's children's times)
	read -r t1 r1 s1 < <(primary_ticks)
	w1=$(wal_lsn)
	read -r completed rate <<<"$out"
	[ "${completed:-0}" -gt 0 ] || bench_die "no run succeeded ($label): nothing to time"
	us() { awk -v a="$1" -v b="$2" -v n="$completed" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }'; }
	cpu_us=$(us "$t0" "$t1")
	wal=$(q -c "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $completed)")
	rate_of[$label]=$rate
	if $PGSS; then
		q -F '|' -c "SELECT round(calls::numeric / $completed, 2), round((total_exec_time * 1000 / $completed)::numeric), left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY total_exec_time DESC LIMIT 6" \
			>"$tmp/pgss.$label"
	fi
	printf '%-10s %7s %6s %9s %8s %14s %10s %10s %12s %12s %9s\n' "$label" "$nr" "$SLOTS" "$rate" "$completed" "$cpu_us" \
		"$(us "$r0" "$r1")" "$(us "$s0" "$s1")" "$wal" \
		"$(awk -v u="$cpu_us" 'BEGIN { if (u > 0) printf "%.0f", 1e6 / u; else print "-" }')" \
		"$(awk -v a="$rate" -v b="${rate_of[local]:-$rate}" 'BEGIN { printf "%.2fx", a / b }')"
}

echo "shell true, $CLIENTS clients, ${DURATION}s each, $SLOTS slots per runner; $(nproc) cores shared by the primary, the runners and their jails"
printf '%-10s %7s %6s %9s %8s %14s %10s %10s %12s %12s %9s\n' where runners slots runs/s runs primary_cpu_us runner_be_us super_us wal_bytes runs/s/core vs_local

# Baseline: the local runner alone.
local_slots "$SLOTS"
one_run "the local runner"
throughput local 0

# Remote runners only (the local runner claims nothing), 1, 2 and 3.
local_slots 0
for k in 1 2 3; do
	start_runner "$k"
	[ "$k" = 1 ] && one_run "a remote runner"
	throughput "remote-$k" "$k"
done

if $PGSS; then
	echo
	echo "top statements by server time (pg_stat_statements): calls per run | exec µs per run | statement"
	for l in local remote-1 remote-3; do
		echo "  $l:"
		sed 's/^/    /' "$tmp/pgss.$l"
	done
fi

# approve → done: one remote runner, then the local one, in the same run.
drain 2
drain 3
lat_remote=$("$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$N") ||
	bench_die "the latency client failed (remote)"
drain 1
local_slots "$SLOTS"
lat_local=$("$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$N") ||
	bench_die "the latency client failed (local)"
read -r rp50 rp99 _ <<<"$lat_remote"
read -r lp50 lp99 _ <<<"$lat_local"
echo
printf 'approve -> done, shell true, %s runs each (ms)\n' "$N"
printf '%-10s %8s %8s\n' where p50 p99
printf '%-10s %8s %8s\n' local "$lp50" "$lp99"
printf '%-10s %8s %8s\n' remote "$rp50" "$rp99"
printf 'remote - local: p50 %s ms (%s), p99 %s ms (%s)\n' \
	"$(awk -v a="$rp50" -v b="$lp50" 'BEGIN { printf "%+.2f", a - b }')" \
	"$(awk -v a="$rp50" -v b="$lp50" 'BEGIN { printf "%.2fx", a / b }')" \
	"$(awk -v a="$rp99" -v b="$lp99" 'BEGIN { printf "%+.2f", a - b }')" \
	"$(awk -v a="$rp99" -v b="$lp99" 'BEGIN { printf "%.2fx", a / b }')"
echo
echo "issue 13's targets: <= 300 primary_cpu_us and <= 8192 wal_bytes per invocation (>= 3000 runs/s/core); remote p50 <= local p50 + 1 ms"
