#!/usr/bin/env bash
# Control-plane benchmark: request+approve pairs per second and charges per
# second, with pgbench against a throwaway cluster (scripts/cluster.sh; note
# that cluster runs with fsync=off, so the figures measure CPU and locking,
# not the disk).  A naive baseline runs last in the same cluster and run:
# the same transactions and round trips against a bare table (naive.sql),
# and the ratio of the two is printed.
#
#   bench/control_plane/run.sh            8 clients, 20 s per script
#   CLIENTS=8 DURATION=20 ORGS=8 bench/control_plane/run.sh
#
# Uses PG_CONFIG, SANDBOX_CLUSTER_DIR and SANDBOX_PGPORT like test/run.sh;
# the extension must already be installed (make install).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55433}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_test}
# The control plane alone: the supervisor is paused (0 = claim nothing), so
# the approved pairs are not also run in jails while we measure.
export SANDBOX_EXTRA_CONF=${SANDBOX_EXTRA_CONF:-"sandbox.max_concurrent_runs = 0"}
CLIENTS=${CLIENTS:-8}
THREADS=${THREADS:-2}
DURATION=${DURATION:-20}
ORGS=${ORGS:-$CLIENTS}
CHARGES=${CHARGES:-100000}

# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need_extension
[ -x "$PGBIN/pgbench" ] || bench_die "no pgbench in $PGBIN (postgresql-15 ships it)"

work=$(mktemp -d /tmp/sandbox_bench.XXXXXX)
cp "$here"/*.sql "$work/"
chmod -R a+rX "$work"
cleanup() { "$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

bench_start_cluster
conn=(-h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -U postgres)
as_pg env PGOPTIONS="-c bench.orgs=$ORGS -c bench.charges=$CHARGES" \
	"$PGBIN/psql" -X -q "${conn[@]}" -d "$SANDBOX_DB" -v orgs="$ORGS" -f "$work/setup.sql"

run() {		# label script pgbench-length-options...
	local label=$1 script=$2 out
	shift 2
	# every run starts from a checkpoint (full-page writes alike for all)
	as_pg "$PGBIN/psql" -X -q "${conn[@]}" -d "$SANDBOX_DB" -c CHECKPOINT
	out=$(as_pg "$PGBIN/pgbench" -n -M prepared -c "$CLIENTS" -j "$THREADS" "$@" \
		-D orgs="$ORGS" -f "$work/$script" "${conn[@]}" "$SANDBOX_DB" 2>&1) || { echo "$out"; exit 1; }
	local lat
	tps=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' <<<"$out")
	lat=$(sed -nE 's/^latency average = ([0-9.]+) ms/\1/p' <<<"$out")
	[ -n "$tps" ] || { echo "$out"; bench_die "pgbench printed no tps for $script"; }
	printf '%-18s %10s per second  (latency %s ms, %s clients, %s orgs; load average %s)\n' \
		"$label" "$tps" "$lat" "$CLIENTS" "$ORGS" "$(cut -d' ' -f1 /proc/loadavg)"
}

echo "== control plane benchmark"
run "request+approve" request_approve.sql -T "$DURATION"
pair_tps=$tps
# Each charge takes the next queued invocation: run exactly the queue.
run "charge" charge.sql -t $((CHARGES / CLIENTS))
# The baseline last, so that its WAL (a checkpoint it may cause) lands on
# no other figure.
run "naive baseline" naive.sql -T "$DURATION"
awk -v a="$pair_tps" -v b="$tps" \
	'BEGIN { printf "request+approve / naive baseline: %.2f (the control plane keeps %.0f%% of a bare table'"'"'s pair rate)\n", a / b, 100 * a / b }'

# A load-independent figure: server CPU per pair (after a warm-up round).
for round in warmup measured; do
	line=$(as_pg env PGOPTIONS="-c bench.orgs=$ORGS" "$PGBIN/psql" -X -q -At "${conn[@]}" \
		-d "$SANDBOX_DB" -f "$work/cpu_per_pair.sql")
done
echo "$line"

# The invariants held under load.
as_pg "$PGBIN/psql" -X -q -At "${conn[@]}" -d "$SANDBOX_DB" -c "
	SELECT 'balances consistent: ' || bool_and(consistent) FROM agent.credit_overview;
	SELECT 'audit chains intact: ' || bool_and(v.ok) FROM agent.orgs o, agent.verify_audit_chain(o.id) v;
	SELECT 'queued invocations charged: ' || count(*) FILTER (WHERE i.credits_charged = 2) || ' of ' || count(*)
	  FROM bench.charge_queue q JOIN agent.invocations i ON i.id = q.invocation_id;"
