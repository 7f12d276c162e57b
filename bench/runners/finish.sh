#!/usr/bin/env bash
# A runner's finish alone (agent.runner_finish), against a baseline install
# in the same run.  For each install in turn (ROUNDS times, interleaved): a
# fresh cluster with the supervisor paused (sandbox.max_concurrent_runs = 0)
# and a runner role of its own; K shell `true` runs, each requested and
# approved by the owner, claimed by that runner and finished with a
# verdict of exit 0 (no output, no files, no session, no egress: the
# common case), in one psql session.  The finish's statement time is
# psql's \timing (autocommit: its commit, with the end's log line, is
# included; synchronous_commit off, so no WAL flush wait).  Prints per
# round and install the median, p25 and mean ms of a finish and the ratio
# of the medians, install / baseline.  Wall time on a shared machine: the
# median resists other work's bursts, the ratio within one round is what
# to read.  Asserts nothing (every finish must succeed, or it stops).
#
#   PG_CONFIG=/opt/pg-new/.../pg_config BASELINE_PG_CONFIG=/opt/pg-old/.../pg_config \
#     K=300 ROUNDS=2 bench/runners/finish.sh          (as root, its own cluster)
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
K=${K:-300}
ROUNDS=${ROUNDS:-2}
SUBJECT=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
BASELINE=${BASELINE_PG_CONFIG:-}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_finish}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55441}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
PGBIN=$(dirname "$SUBJECT")
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need_extension
if [ -n "$BASELINE" ]; then
	PGBIN=$(dirname "$BASELINE") bench_need_extension
fi
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_finish.XXXXXX)
chmod 0755 "$tmp"
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

# One measurement with the install at $1: prints "median p25 mean" (ms).
measure() {
	local pgc=$1 org ws agent n
	export PG_CONFIG=$pgc
	PGBIN=$(dirname "$pgc")
	"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
	bench_start_cluster
	q -c "ALTER SYSTEM SET sandbox.max_concurrent_runs = 0" -c "SELECT pg_reload_conf()" >/dev/null
	sleep 1
	read -r org ws agent < <(bench_tenant)
	q -c "CREATE ROLE bench_finish_runner LOGIN" -c "GRANT agent_runner TO bench_finish_runner" >/dev/null
	{
		echo "SET synchronous_commit = off;"
		echo "SET SESSION AUTHORIZATION bench_finish_runner;"
		echo "SELECT runner_id AS rid, incarnation AS inc FROM agent.runner_register('bench-finish', 'h', 'v', 4) \\gset"
		echo "RESET SESSION AUTHORIZATION;"
		echo "SELECT set_config('sandbox.org_id', '$org', false), set_config('sandbox.workspace_id', '$ws', false) \\g /dev/null"
		for _ in $(seq "$K"); do
			cat <<SQL
SELECT approval_id AS a FROM agent.request_execution('$ws'::uuid, '$agent'::uuid, NULL, 'shell', 'true', 'bench-user') \\gset
SELECT agent.approve(:'a'::uuid, 'bench-approver') \\g /dev/null
SET SESSION AUTHORIZATION bench_finish_runner;
SELECT id, lease_token AS tok FROM agent.runner_claim(:'rid', :'inc', 1) \\gset
\\echo FINISH
\\timing on
SELECT agent.runner_finish(:'rid', :'tok', :'id', '{"status":"exited","exit_code":0,"wall_ms":2,"cpu_ms":1,"peak_memory_bytes":1000000}', 0, NULL, true) \\g /dev/null
\\timing off
RESET SESSION AUTHORIZATION;
SQL
		done
	} >"$tmp/script.sql"
	chmod 0644 "$tmp/script.sql"
	as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" \
		-d "$SANDBOX_DB" -f "$tmp/script.sql" >"$tmp/out.txt" ||
		bench_die "the finish script failed: $(tail -n 3 "$tmp/out.txt")"
	n=$(q -c "SELECT count(*) FROM agent.invocations WHERE state = 'succeeded'")
	[ "$n" = "$K" ] || bench_die "$n of $K runs succeeded"
	grep -A1 '^FINISH' "$tmp/out.txt" | sed -n 's/^Time: \([0-9.]*\) ms$/\1/p' | sort -n >"$tmp/t.txt"
	n=$(wc -l <"$tmp/t.txt")
	[ "$n" = "$K" ] || bench_die "$n timings for $K finishes"
	echo "$(sed -n "$(((n + 1) / 2))p" "$tmp/t.txt") $(sed -n "$((n / 4 > 0 ? n / 4 : 1))p" "$tmp/t.txt") $(awk '{ s += $1 } END { printf "%.3f", s / NR }' "$tmp/t.txt")"
	"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
}

echo "agent.runner_finish of a shell \`true\` run, $K per measurement, $ROUNDS rounds interleaved (ms per finish)"
printf '%-6s %-9s %8s %8s %8s %8s\n' round install median p25 mean ratio
for r in $(seq "$ROUNDS"); do
	base_median=
	if [ -n "$BASELINE" ]; then
		read -r m p a < <(measure "$BASELINE")
		base_median=$m
		printf '%-6s %-9s %8s %8s %8s %8s\n' "$r" baseline "$m" "$p" "$a" ""
	fi
	read -r m p a < <(measure "$SUBJECT")
	printf '%-6s %-9s %8s %8s %8s %8s\n' "$r" install "$m" "$p" "$a" \
		"$([ -n "$base_median" ] && awk -v a="$m" -v b="$base_median" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "(install: PG_CONFIG=$SUBJECT; baseline: ${BASELINE:-none})"
