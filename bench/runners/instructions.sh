#!/usr/bin/env bash
# Backend instructions per run (callgrind): the real path's SQL next to the
# floor's (bench/runners/floor.sh: the same rows as plain prepared
# statements in four transactions), in the same backend, interleaved.
# Instructions do not depend on the machine's load: this is the figure to
# compare before and after a change of the SQL; floor.sh's server CPU and
# WAL are the whole server's.
#
# The real path is the calls a run makes, in the order they are made, each
# in its own transaction as the client and the runner make them:
#
#   client   agent.request_execution, agent.output_channel, agent.approve
#   runner   agent.runner_claim, agent.runner_finish (shell `true`'s verdict,
#            as sandbox-runner reports it; a run that ends within the
#            runner's start report delay, as shell `true` does, is marked
#            running by its finish: no agent.runner_mark_running)
#   client   agent.wait(invocation, '0 s') (the state, once the end is notified)
#
# The floor is floor_rows.sh's script (six audit events per run; floor4:
# one per transaction), each statement PREPAREd once and EXECUTEd per run.
#
# How: a cluster is set up (the bench's tenant, a runner role registered,
# the floor's tables), stopped, and its database is then driven by one
# single-user backend (postgres --single) under valgrind's callgrind: no
# background worker runs, nothing but the script's statements.  W warm-up
# runs of each kind first (plans cached, as in a long-lived backend), then
# ROUNDS rounds of N runs of each; counting is restarted and dumped around
# each measurement (a `SELECT pg_sleep(0)` marker: --dump-before=pg_sleep),
# so a measurement is exactly its N runs.  Prints instructions per run and
# the ratios.  Asserts nothing but that every run succeeded.
#
#   bench/runners/instructions.sh          (as root, after make install; its own cluster)
#   N=50 ROUNDS=2 bench/runners/instructions.sh
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
N=${N:-50}
W=${W:-5}
ROUNDS=${ROUNDS:-2}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_instructions}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55443}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need valgrind
bench_need_extension
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"
# shellcheck source=floor_rows.sh
. "$top/bench/runners/floor_rows.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_instructions.XXXXXX)
chmod 0777 "$tmp"
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
bench_start_cluster
# (no supervisor claims: the bench's runner is the only claimer)
q -c "ALTER SYSTEM SET sandbox.max_concurrent_runs = 0" >/dev/null
read -r ORG WS AGENT < <(bench_tenant)
floor_tables "$ORG" | q >/dev/null
q -c "CREATE ROLE bench_runner LOGIN" -c "GRANT agent_runner TO bench_runner" >/dev/null
read -r RID INC < <(q -F ' ' -c "SET SESSION AUTHORIZATION bench_runner" \
	-c "SELECT runner_id, incarnation FROM agent.runner_register('bench-instructions', 'h', 'v', 4)" | tail -n 1)
[ -n "$INC" ] || bench_die "could not register the bench's runner"
# The runner's lease must outlive the single-user run (no heartbeat there):
# a lease runs from its claim, an hour.
q -c "UPDATE agent.settings SET value = '3600' WHERE key = 'runner_lease_seconds'" >/dev/null
data=$SANDBOX_CLUSTER_DIR/data
as_pg "$PGBIN/pg_ctl" -D "$data" -w -m fast stop >/dev/null

# The real path's statements, by step (STEPS=1 prints instructions per
# step, each statement measured alone).
steps="request output_channel approve set_runner runner_claim runner_finish set_client wait"
# One run of the real path (single-user syntax, -j: a statement ends with
# ";" and an empty line; RESET SESSION AUTHORIZATION does not return to
# a single-user backend's user, so it is named).
real_run() {
	cat <<SQL
SELECT set_config('bench.inv', invocation_id::text, false), set_config('bench.appr', approval_id::text, false) FROM agent.request_execution('$WS'::uuid, '$AGENT'::uuid, NULL, 'shell', 'true', 'bench-requester');

SELECT agent.output_channel(current_setting('bench.inv')::uuid);

SELECT agent.approve(current_setting('bench.appr')::uuid, 'bench-approver');

SET SESSION AUTHORIZATION bench_runner;

SELECT set_config('bench.tok', c.lease_token::text, false) FROM agent.runner_claim('$RID', '$INC', 1, current_setting('bench.inv')::uuid) c;

SELECT agent.runner_finish('$RID', current_setting('bench.tok')::uuid, current_setting('bench.inv')::uuid, '{"status":"exited","exit_code":0,"signal":null,"timed_out":false,"oom_killed":false,"wall_ms":3,"cpu_ms":1,"peak_memory_bytes":1000000,"stdout_bytes":0,"stderr_bytes":0}', 0, NULL, true, false, NULL, NULL, NULL);

SET SESSION AUTHORIZATION postgres;

SELECT agent.wait(current_setting('bench.inv')::uuid, '0 s');

SQL
}

# The floor's script as PREPAREd statements ($1..$5: inv, appr, org, ws,
# agent) and one run of it (EXECUTEs between BEGIN and COMMIT).
floor_prepare() {		# events name
	floor_script "$1" | awk -v name="$2" '
		/\\gset/ { next }
		{ stmt = stmt (stmt == "" ? "" : "\n") $0 }
		/;[[:space:]]*$/ {
			sub(/;[[:space:]]*$/, "", stmt)
			if (stmt ~ /^[[:space:]]*$/) { stmt = ""; next }
			if (stmt ~ /^(BEGIN|COMMIT)$/) { order[++n] = stmt; stmt = ""; next }
			gsub(/:inv/, "$1", stmt); gsub(/:appr/, "$2", stmt); gsub(/:org/, "$3", stmt)
			gsub(/:ws/, "$4", stmt); gsub(/:agent/, "$5", stmt)
			k++
			printf "PREPARE %s_%d (uuid, uuid, uuid, uuid, uuid) AS %s;\n\n", name, k, stmt
			order[++n] = "EXECUTE " name "_" k
			stmt = ""
		}
		END { for (i = 1; i <= n; i++) print order[i] > (ENVIRON["tmp"] "/" name ".order") }'
}
export tmp
floor_run() {			# name
	local inv appr line
	inv=$(cat /proc/sys/kernel/random/uuid)
	appr=$(cat /proc/sys/kernel/random/uuid)
	while read -r line; do
		case $line in
		EXECUTE*) printf "%s ('%s', '%s', '%s', '%s', '%s');\n\n" "$line" "$inv" "$appr" "$ORG" "$WS" "$AGENT" ;;
		*) printf '%s;\n\n' "$line" ;;
		esac
	done <"$tmp/$1.order"
}
runs() {			# kind count
	local i
	for i in $(seq "$2"); do
		case $1 in
		real) real_run ;;
		*) floor_run "$1" ;;
		esac
	done
}
mark() { printf 'SELECT pg_sleep(0);\n\n'; }

kinds="real floor6 floor4"
{
	printf "SELECT set_config('sandbox.org_id', '%s', false), set_config('sandbox.workspace_id', '%s', false);\n\n" "$ORG" "$WS"
	floor_prepare 6 floor6
	floor_prepare 4 floor4
	for k in $kinds; do runs "$k" "$W"; done
	# dump 1: the start and the warm-up; then each measurement, one dump each
	mark
	for r in $(seq "$ROUNDS"); do
		for k in $kinds; do
			runs "$k" "$N"
			mark
		done
	done
	# then, with STEPS=1, N real runs with a mark after each statement,
	# and N of floor6 with a mark after each transaction
	if [ "${STEPS:-0}" = 1 ]; then
		runs real "$N" | awk '{ print } /;$/ { getline; print; print "SELECT pg_sleep(0);"; print "" }'
		runs floor6 "$N" | awk '{ print } /^COMMIT;$/ { getline; print; print "SELECT pg_sleep(0);"; print "" }'
	fi
} >"$tmp/script.sql"
chmod 0644 "$tmp/script.sql"

echo "instructions per run (callgrind, one single-user backend): $N runs per measurement, $ROUNDS rounds interleaved, after $W warm-up runs of each"
as_pg valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" --dump-before=pg_sleep \
	--dump-instr=no --compress-strings=no \
	"$PGBIN/postgres" --single -j -D "$data" -c sandbox.max_concurrent_runs=0 "$SANDBOX_DB" \
	<"$tmp/script.sql" >"$tmp/single.log" 2>"$tmp/valgrind.log" ||
	bench_die "the single-user run failed: $(tail -n 5 "$tmp/single.log" "$tmp/valgrind.log")"
if grep -q 'ERROR:' "$tmp/single.log"; then
	bench_die "a statement failed: $(grep -m 3 -A2 'ERROR:' "$tmp/single.log")"
fi
ok=$(grep -c 'wait = "succeeded"' "$tmp/single.log" || true)
want=$((W + N * ROUNDS + (${STEPS:-0} == 1 ? N : 0)))
[ "$ok" = "$want" ] || bench_die "$ok of $want real runs ended succeeded"

# The dumps, in order: cg.out.1 (start, warm-up), then one per measurement.
ir() { awk '/^summary:|^totals:/ { print $2; exit }' "$1"; }
printf '%-6s %14s %14s %14s %11s %11s\n' round real floor6 floor4 real/floor6 real/floor4
d=1
for r in $(seq "$ROUNDS"); do
	declare -A per=()
	for k in $kinds; do
		d=$((d + 1))
		f=$tmp/cg.out.$d
		[ -f "$f" ] || bench_die "no callgrind dump $f"
		per[$k]=$(awk -v t="$(ir "$f")" -v n="$N" 'BEGIN { printf "%.0f", t / n }')
	done
	printf '%-6s %14s %14s %14s %11s %11s\n' "$r" "${per[real]}" "${per[floor6]}" "${per[floor4]}" \
		"$(awk -v a="${per[real]}" -v b="${per[floor6]}" 'BEGIN { printf "%.2fx", a / b }')" \
		"$(awk -v a="${per[real]}" -v b="${per[floor4]}" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "(real: request, output_channel, approve, runner_claim, runner_finish, wait;"
echo " floor6/floor4: the same rows as prepared statements in four transactions, six audit events per run or four)"
if [ "${STEPS:-0}" = 1 ]; then
	# (each statement's dump holds the marker statement before it, a few
	# thousand instructions)
	echo
	echo "the real path by step, instructions per run:"
	for _ in $(seq "$N"); do
		for st in $steps; do
			d=$((d + 1))
			echo "$st $(ir "$tmp/cg.out.$d")"
		done
	done | awk -v n="$N" '{ t[$1] += $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 }; all += $2 }
		END { for (i = 1; i <= k; i++) printf "  %-22s %12.0f %6.1f%%\n", order[i], t[order[i]] / n, 100 * t[order[i]] / all
			  printf "  %-22s %12.0f\n", "total", all / n }'
	echo "floor6 by transaction, instructions per run:"
	# (the loop above ran in a pipe's subshell: skip its dumps here)
	set -- $steps
	d=$((d + N * $#))
	for _ in $(seq "$N"); do
		for st in request approve claim finish; do
			d=$((d + 1))
			echo "$st $(ir "$tmp/cg.out.$d")"
		done
	done | awk -v n="$N" '{ t[$1] += $2; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 }; all += $2 }
		END { for (i = 1; i <= k; i++) printf "  %-22s %12.0f %6.1f%%\n", order[i], t[order[i]] / n, 100 * t[order[i]] / all
			  printf "  %-22s %12.0f\n", "total", all / n }'
fi
