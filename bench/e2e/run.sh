#!/usr/bin/env bash
# End-to-end benchmark: approve → finished, side by side with the floor
# (the same programs run bare and under sandbox-jail directly), and the
# throughput of request+approve+run with 8 clients next to the jail run
# directly in a loop.  Prints ratios; asserts nothing (this machine is
# shared and noisy).
#
#   bench/e2e/run.sh            (after make install; starts its own cluster)
#   N=100 SECONDS_=20 bench/e2e/run.sh
#
# Against a baseline install (bench/baseline.sh REV NAME prints its
# pg_config), run side by side in the same run: a second throwaway cluster
# of that install (BASE_CLUSTER_DIR, BASE_PGPORT) with the same tenant; every
# latency row takes N runs on each cluster in ROUNDS blocks that alternate
# between the two, and the throughput is measured in four parts of
# SECONDS_/2, baseline, this, this, baseline.  Prints, after the usual
# table, each row's p50/p99 on both and the ratio base/this.
#
#   BASE_PG_CONFIG=$(bench/baseline.sh 3777718 base9) bench/e2e/run.sh
#
# Approval policies (docs/control-plane.md, "Approval policies"): when
# this install has them, a second agent of the org whose runs the org's
# policy (automatic) approves, the first narrowed to every_run; rows for
# shell `true` and the pandas program (warm): request -> finished approved
# by the policy, against today's approve -> finished and request ->
# finished with an immediate approval of the same code (N runs each, in
# ROUNDS alternating blocks, one connection), and against the served jail
# alone (a launcher of its own, sandbox-jail --serve, and
# bench/jail/served-client.c); then the throughput of automatic runs
# against the approve path (CLIENTS clients, four parts of SECONDS_/2:
# approve, automatic, automatic, approve).  PART=policies runs only these.
#
# Sandbox images (docs/images.md): when the local runner's image store
# (sandbox.image_store) holds the image IMAGE (default data; IMAGE= skips
# it), one more row: the pandas program, warm, through an agent on that
# image against the same org's agent on the host's root, N runs each in
# ROUNDS alternating blocks, with the ratio image/host.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
JAIL=${JAIL:-$PGBIN/sandbox-jail}
N=${N:-50}
DURATION=${SECONDS_:-10}
CLIENTS=${CLIENTS:-8}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55434}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
export SANDBOX_EXTRA_CONF=${SANDBOX_EXTRA_CONF:-"sandbox.max_concurrent_runs = $CLIENTS"}
BASE_PG_CONFIG=${BASE_PG_CONFIG:-}
BASE_CLUSTER_DIR=${BASE_CLUSTER_DIR:-/tmp/sandbox_ext_bench_base}
BASE_PGPORT=${BASE_PGPORT:-55435}
ROUNDS=${ROUNDS:-4}
IMAGE=${IMAGE-data}
PART=${PART:-all}
case $PART in all | policies) ;; *) echo "bench: PART is all or policies" >&2; exit 1 ;; esac

# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
q() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -U postgres -d "$SANDBOX_DB" "$@"; }
# on_base CMD...: CMD (q, bench_*, cluster.sh) against the baseline's
# install and cluster instead of this one's (locals: restored on return)
on_base() {
	local PGBIN PG_CONFIG=$BASE_PG_CONFIG SANDBOX_CLUSTER_DIR=$BASE_CLUSTER_DIR SANDBOX_PGPORT=$BASE_PGPORT
	PGBIN=$(dirname "$BASE_PG_CONFIG")
	export PGBIN PG_CONFIG SANDBOX_CLUSTER_DIR SANDBOX_PGPORT
	"$@"
}

# What is timed must be there: the installed extension, the jail, the bare
# interpreters, and a compiler for the client.
bench_need cc
bench_need_extension
bench_need_jail "$JAIL"
for b in /usr/bin/python3 /usr/bin/node; do
	[ -x "$b" ] || bench_die "$b is not installed (scripts/deps.sh installs it)"
done
if [ -n "$BASE_PG_CONFIG" ]; then
	[ -x "$BASE_PG_CONFIG" ] || bench_die "BASE_PG_CONFIG=$BASE_PG_CONFIG is not a pg_config (bench/baseline.sh REV NAME makes one)"
	if [ "$BASE_PGPORT" = "$SANDBOX_PGPORT" ] || [ "$BASE_CLUSTER_DIR" = "$SANDBOX_CLUSTER_DIR" ]; then
		bench_die "the baseline's cluster needs its own BASE_PGPORT and BASE_CLUSTER_DIR"
	fi
	if [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt "$N" ]; then bench_die "ROUNDS must be between 1 and N"; fi
	on_base bench_need_extension
	on_base bench_need_jail "$(dirname "$BASE_PG_CONFIG")/sandbox-jail"
fi

tmp=$(mktemp -d /tmp/sandbox_bench.XXXXXX)
chmod 0755 "$tmp"
# (named in full: an exit inside on_base runs this with the base's locals)
this_cluster=("PGBIN=$PGBIN" "SANDBOX_CLUSTER_DIR=$SANDBOX_CLUSTER_DIR" "SANDBOX_PGPORT=$SANDBOX_PGPORT")
cleanup() {
	env "${this_cluster[@]}" "$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
	if [ -n "$BASE_PG_CONFIG" ]; then on_base "$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
cc -O2 -Wall -Wextra -o "$tmp/client" "$top/bench/e2e/client.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq ||
	bench_die "could not build bench/e2e/client.c (libpq-dev)"

# ORG WS AGENT: the tenant's ids on the cluster of q (this one's, or the
# baseline's under on_base).  One org drives every client: its limit is the
# operator's to raise (the default, max_runs_per_org = 2, would measure the
# limit, not the path); an install without per-org limits has none to raise.
setup_cluster() {
	local org ws agent
	"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
	bench_start_cluster
	read -r org ws agent < <(bench_tenant)
	[ -n "${agent:-}" ] || exit 1
	if [ "$(q -c "SELECT EXISTS (SELECT FROM pg_proc WHERE pronamespace = 'agent'::regnamespace AND proname = 'set_org_limits')")" = t ]; then
		q -c "SELECT agent.set_org_limits('$org', $CLIENTS, NULL)" >/dev/null
	fi
	echo "$org $ws $agent"
}
read -r ORG WS AGENT < <(setup_cluster)
[ -n "${AGENT:-}" ] || bench_die "could not set up the cluster in $SANDBOX_CLUSTER_DIR (above)"
conninfo="host=$SANDBOX_CLUSTER_DIR port=$SANDBOX_PGPORT user=postgres dbname=$SANDBOX_DB"
base=()
if [ -n "$BASE_PG_CONFIG" ]; then
	read -r BORG BWS BAGENT < <(on_base setup_cluster)
	[ -n "${BAGENT:-}" ] || bench_die "could not set up the baseline's cluster in $BASE_CLUSTER_DIR (above)"
	# the client's optional arguments: the baseline's cluster and tenant
	base=("$ROUNDS" "host=$BASE_CLUSTER_DIR port=$BASE_PGPORT user=postgres dbname=$SANDBOX_DB" "$BORG" "$BWS" "$BAGENT")
fi

# One run of each language through the supervisor must succeed: timing runs
# that fail (no launcher, no cgroups, a broken install) measures nothing.
tenant_sql() {			# ORG WS SQL [CODE]
	q -F ' ' -v code="${4:-}" <<SQL | sed '/^$/d' | tail -n 1
BEGIN;
SELECT agent.set_tenant('$1', '$2');
$3
COMMIT;
SQL
}
check_runs() {			# ORG WS AGENT WHICH
	local spec lang code inv appr st
	for spec in shell:true python:pass node:0; do
		IFS=: read -r lang code <<<"$spec"
		read -r inv appr < <(tenant_sql "$1" "$2" "SELECT invocation_id, approval_id FROM agent.request_execution('$2', '$3', NULL, '$lang', :'code', 'bench-requester');" "$code")
		[ -n "${appr:-}" ] || bench_die "a $lang request was not accepted ($4)"
		tenant_sql "$1" "$2" "SELECT agent.approve('$appr', 'bench-approver');" >/dev/null
		st=$(tenant_sql "$1" "$2" "SELECT agent.wait('$inv', '60 s');")
		[ "$st" = succeeded ] ||
			bench_die "a $lang run through the supervisor ended ${st:-in no state} ($(q -c "SELECT state_reason FROM agent.invocations WHERE id = '$inv'")) ($4): nothing to time"
	done
}
check_runs "$ORG" "$WS" "$AGENT" "this install"
if [ -n "$BASE_PG_CONFIG" ]; then
	on_base check_runs "$BORG" "$BWS" "$BAGENT" "the baseline"
	this_version=$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'sandbox_ext'")
	base_version=$(on_base q -c "SELECT extversion FROM pg_extension WHERE extname = 'sandbox_ext'")
fi

# Mean ms of N sequential runs of a command (bash loop, as postgres).
# (the script's $ are the inner shell's)
# shellcheck disable=SC2016
loop_ms() {
	as_pg bash -c '
		cd /tmp
		n=$1; shift
		s=$(date +%s%N)
		for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 </dev/null; done
		e=$(date +%s%N)
		awk -v a="$s" -v b="$e" -v n="$n" "BEGIN { printf \"%.2f\", (b - a) / n / 1e6 }"' _ "$N" "$@"
}
ws="$tmp/ws"
mkdir -p "$ws" && chown postgres: "$ws"
jail_run() {			# language code-file
	echo "$JAIL --language $1 --workspace $ws --code-file $2 --quiet --verdict-file /dev/null"
}
printf 'true\n' >"$tmp/true.sh"
printf 'pass\n' >"$tmp/pass.py"
printf '0\n' >"$tmp/zero.js"
chmod 0644 "$tmp"/*.sh "$tmp"/*.py "$tmp"/*.js

# The issue's pandas script (a spreadsheet's everyday work) and a bare
# `import numpy`, each a file for bare python and the one-shot jail and
# the code of the approved request.
cat >"$tmp/pandas.py" <<'EOF'
import pandas as pd
df = pd.DataFrame({"k": ["a", "b", "a", "b"], "v": [1, 2, 3, 4]})
print(df.groupby("k").sum())
EOF
printf 'import numpy\n' >"$tmp/numpy.py"
chmod 0644 "$tmp"/*.py

# Warm interpreters (docs/jail.md, "Warm interpreters"): python and node
# runs wait, untimed, until every warm place of the launcher has its
# interpreter waiting (the client reads its page), so every timed run is
# warm and the pool's refill (the interpreter's start, ~0.5 s of CPU with
# pandas) is on nobody's clock.
page=$(q -c "SELECT current_setting('data_directory')")/sandbox_runner/jail.sock.warm
warm=$(q -c "SELECT coalesce(warm_ready, -1) FROM agent.worker_status()")
[ "$warm" -ge 0 ] || echo "note: no warm pool (sandbox.warm_python = 0?): python/node rows are cold"

# Before each row (untimed, at most 120 s): every warm place of the
# launcher waits again, so that no row starts while the refills the one
# before it caused (a pandas interpreter's start, ~0.5 s of CPU) still run
# on these CPUs; without a page (the pool off), nothing to wait for.
pool_full() {
	[ "$warm" -ge 0 ] || return 0
	python3 - "$page" <<'PY'
import struct, sys, time
for _ in range(1200):
    try:
        d = open(sys.argv[1], "rb").read()
        ready = struct.unpack_from("ii", d, 16)
        conf = struct.unpack_from("ii", d, 24)
        if all(r >= c for r, c in zip(ready, conf)):
            break
    except OSError:
        break
    time.sleep(0.1)
PY
}

# e2e ROW: "p50 p99 mean" approve -> finished of N runs of ROW's program,
# then with a baseline "base_p50 base_p99 base_mean" of as many there,
# interleaved (the client alternates ROUNDS blocks)
e2e() {
	local lang=$1 code=$2 wl=$3
	if [ -n "$wl" ] && [ "$warm" -ge 0 ]; then
		WARM_PAGE=$page WARM_LANG=$wl "$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" "$lang" "$code" "$N" "${base[@]}"
	else
		"$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" "$lang" "$code" "$N" "${base[@]}"
	fi
}
rows=("shell:true:/bin/true:$tmp/true.sh"
	"python:pass:/usr/bin/python3 -I -c pass:$tmp/pass.py"
	"node:0:/usr/bin/node -e 0:$tmp/zero.js"
	"python:@numpy:/usr/bin/python3 -I $tmp/numpy.py:$tmp/numpy.py"
	"python:@pandas:/usr/bin/python3 -I $tmp/pandas.py:$tmp/pandas.py")
declare -A res
# the same rows with the pool (the default) and without it (warm off: what
# every run was before), in this one run
modes="warm cold"
[ "$PART" = all ] || modes=
for mode in $modes; do
	if [ $mode = cold ]; then
		q -c "ALTER SYSTEM SET sandbox.warm_python = 0" -c "ALTER SYSTEM SET sandbox.warm_node = 0" \
			-c "SELECT pg_reload_conf()" >/dev/null
		sleep 1
		warm=-1
	fi
	for spec in "${rows[@]}"; do
		IFS=: read -r lang code bare file <<<"$spec"
		name=$lang
		case $code in @*) name=${code#@}; code=$(cat "$file") ;; esac
		wl=
		case $lang in python) wl=0 ;; node) wl=1 ;; esac
		pool_full
		res[$mode.$name]=$(e2e "$lang" "$code" "$wl") || bench_die "the $name latency client failed (above)"
	done
done
q -c "ALTER SYSTEM RESET sandbox.warm_python" -c "ALTER SYSTEM RESET sandbox.warm_node" -c "SELECT pg_reload_conf()" >/dev/null

# The image row: a second agent of the org on IMAGE (enabled for the org),
# one untimed run to start the image's launcher, then the pandas program,
# warm, on both agents in alternating blocks; both launchers' pools full
# before each run (WARM_PAGE, WARM_PAGE2).
image_row=
if [ -n "$IMAGE" ] && [ "$PART" = all ]; then
	warm=$(q -c "SELECT coalesce(warm_ready, -1) FROM agent.worker_status()")
	wait_for_images() {
		for _ in $(seq 1 150); do
			[ "$(q -c "SELECT count(*) FROM agent.runner_images WHERE name = '$IMAGE'")" -gt 0 ] && return 0
			sleep 0.2
		done
		return 1
	}
	if ! wait_for_images; then
		echo "note: no runner holds the image $IMAGE (sandbox-image build images/$IMAGE.recipe): no image row"
	else
		IAGENT=$(q -c "INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id, code_execution_enabled)
						SELECT org_id, workspace_id, 'bench-$IMAGE', kind, model_id, true FROM agent.agents
						 WHERE id = '$AGENT' RETURNING id" | head -n 1)
		q -c "SELECT agent.enable_image('$IMAGE', org => '$ORG')" >/dev/null
		tenant_sql "$ORG" "$WS" "SELECT agent.set_agent_image('$IAGENT', '$IMAGE', 'bench');" >/dev/null
		check_runs "$ORG" "$WS" "$IAGENT" "the image $IMAGE"
		idigest=$(q -c "SELECT image_digest FROM agent.invocations WHERE agent_id = '$IAGENT' AND image_digest IS NOT NULL LIMIT 1")
		ipage=$(dirname "$page")/jail-${idigest:0:12}.sock.warm
		pandas=$(cat "$tmp/pandas.py")
		pool_full
		if [ "$warm" -ge 0 ]; then
			image_row=$(WARM_PAGE=$page WARM_PAGE2=$ipage WARM_LANG=0 "$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" \
				python "$pandas" "$N" "$ROUNDS" "$conninfo" "$ORG" "$WS" "$IAGENT") ||
				bench_die "the image row's latency client failed (above)"
		else
			image_row=$("$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" \
				python "$pandas" "$N" "$ROUNDS" "$conninfo" "$ORG" "$WS" "$IAGENT") ||
				bench_die "the image row's latency client failed (above)"
		fi
	fi
fi

[ "$PART" = all ] &&
printf '%-8s %9s %9s %10s %10s %10s %10s %10s %10s\n' program bare_ms jail_ms warm_p50 warm_p99 cold_p50 cold_p99 bare/warm cold/warm
[ "$PART" = all ] &&
for spec in "${rows[@]}"; do
	IFS=: read -r lang code bare file <<<"$spec"
	name=$lang
	case $code in @*) name=${code#@} ;; esac
	# shellcheck disable=SC2086
	bare_ms=$(loop_ms $bare)
	# shellcheck disable=SC2046
	jail_ms=$(loop_ms $(jail_run "$lang" "$file"))
	read -r wp50 wp99 _ <<<"${res[warm.$name]}"
	read -r cp50 cp99 _ <<<"${res[cold.$name]}"
	printf '%-8s %9s %9s %10s %10s %10s %10s %10s %10s\n' "$name" "$bare_ms" "$jail_ms" "$wp50" "$wp99" "$cp50" "$cp99" \
		"$(awk -v a="$bare_ms" -v b="$wp50" 'BEGIN { printf "%.2fx", a / b }')" \
		"$(awk -v a="$cp50" -v b="$wp50" 'BEGIN { printf "%.2fx", a / b }')"
done
[ "$PART" = all ] &&
echo "(warm_*: approve -> finished with the warm pool (sandbox.warm_python/warm_node; shell is never warm), cold_*: the pool off, both in this run; jail_ms: the one-shot jail; bare_ms: the interpreter alone)"

if [ -n "$image_row" ]; then
	read -r hp50 hp99 _ ip50 ip99 _ <<<"$image_row"
	echo
	printf '%-16s %10s %10s %10s %10s %11s
' program host_p50 host_p99 image_p50 image_p99 image/host
	printf '%-16s %10s %10s %10s %10s %11s
' "pandas@$IMAGE" "$hp50" "$hp99" "$ip50" "$ip99" \
		"$(awk -v a="$ip50" -v b="$hp50" 'BEGIN { printf "%.2fx", a / b }')"
	echo "(ms, approve -> finished, warm: $N runs through an agent on the image $IMAGE@${idigest:0:12} and $N through one on the host's root, one org, in $ROUNDS alternating blocks; image/host <= 1.1x is the issue's bound)"
fi

if [ -n "$BASE_PG_CONFIG" ]; then
	echo
	echo "against the baseline: $N runs on each cluster per row, in $ROUNDS interleaved blocks"
	printf '%-8s %-5s %10s %10s %10s %10s %10s\n' program mode this_p50 this_p99 base_p50 base_p99 base/this
	for spec in "${rows[@]}"; do
		IFS=: read -r lang code _ _ <<<"$spec"
		name=$lang
		case $code in @*) name=${code#@} ;; esac
		for mode in warm cold; do
			read -r p50 p99 _ bp50 bp99 _ <<<"${res[$mode.$name]}"
			printf '%-8s %-5s %10s %10s %10s %10s %10s\n' "$name" "$mode" "$p50" "$p99" "$bp50" "$bp99" \
				"$(awk -v a="$bp50" -v b="$p50" 'BEGIN { printf "%.2fx", a / b }')"
		done
	done
	echo "(ms, approve -> finished, the same interval and client on both; this: sandbox_ext $this_version of $PGBIN, mode warm with its warm pool, cold with the pool off; base: sandbox_ext $base_version of $(dirname "$BASE_PG_CONFIG") as it is configured by default in both modes: a baseline without a warm pool runs cold there, so a warm row's ratio is what the pool and everything since bought, a cold row's what everything but the pool did; base/this > 1: this install is faster)"
fi

# ---- approval policies ----------------------------------------------------------
# AAGENT: a second agent of the org, approved by the org's policy
# (automatic); AGENT narrowed to every_run, so that every row above and
# the approve path below are today's (their requests also read the policy).
AAGENT=
if [ "$(q -c "SELECT EXISTS (SELECT FROM pg_proc WHERE pronamespace = 'agent'::regnamespace AND proname = 'set_approval_policy')")" = t ]; then
	AAGENT=$(q -c "INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id, code_execution_enabled)
					SELECT org_id, workspace_id, 'bench-automatic', kind, model_id, true FROM agent.agents
					 WHERE id = '$AGENT' RETURNING id" | head -n 1)
	q <<SQL >/dev/null
BEGIN;
SET LOCAL ROLE agent_admin;
SELECT agent.set_tenant('$ORG', NULL);
SELECT agent.set_approval_policy('automatic', 'bench-admin');
SELECT agent.set_approval_policy('every_run', 'bench-admin', '$AGENT');
COMMIT;
SQL
	[ "$(tenant_sql "$ORG" "$WS" "SELECT status FROM agent.request_execution('$WS', '$AAGENT', NULL, 'shell', 'true', 'bench-requester');")" = approved ] ||
		bench_die "the org's approval policy did not approve a request of the automatic agent"
elif [ "$PART" = policies ]; then
	bench_die "this install has no approval policies (agent.set_approval_policy)"
fi
declare -A pol served
if [ -n "$AAGENT" ]; then
	# The served jail alone: a launcher of this benchmark's own (one
	# interpreter of python warm, as the supervisor's pool keeps them), a
	# resident caller, N runs each; the pandas runs take a warm interpreter.
	sdir="$tmp/served"
	mkdir -p "$sdir" && chown postgres: "$sdir"
	cc -O2 -Wall -Wextra -o "$tmp/served-client" "$top/bench/jail/served-client.c" ||
		bench_die "could not build bench/jail/served-client.c"
	# (its pid, the launcher's own, for the kill below: not runuser's)
	# shellcheck disable=SC2016
	as_pg bash -c 'echo $$ >"$1/launcher.pid"; exec "$2" --serve "$1/jail.sock" --pool 2 --warm-python 1 --quiet' _ "$sdir" "$JAIL" &
	for _ in $(seq 100); do [ -S "$sdir/jail.sock" ] && break; sleep 0.05; done
	for spec in "shell:$tmp/true.sh:0" "pandas:$tmp/pandas.py:1"; do
		IFS=: read -r name file w <<<"$spec"
		lang=$name
		[ "$name" = pandas ] && lang=python
		served[$name]=$(seq 1 "$((N + 3))" | sed 's/.*//' |
			as_pg env SERVED_WARM="$w" "$tmp/served-client" "$sdir/jail.sock" "$lang" "$file" "$ws" 2>/dev/null |
			tail -n "$N" | awk '$2 == "exited" { print $1 / 1000 }' | sort -n |
			awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; printf "%.2f", v[int((NR + 1) / 2)] }') ||
			served[$name]=n/a
	done
	[ -s "$sdir/launcher.pid" ] && kill "$(cat "$sdir/launcher.pid")" 2>/dev/null
	wait 2>/dev/null || true
	pol_since=$(q -c "SELECT clock_timestamp()")
	for spec in "shell:true:" "pandas:@:0"; do
		IFS=: read -r name code wl <<<"$spec"
		lang=$name
		[ "$name" = pandas ] && lang=python code=$(cat "$tmp/pandas.py")
		pool_full
		if [ -n "$wl" ] && [ "$warm" -ge 0 ]; then
			pol[$name]=$(WARM_PAGE=$page WARM_LANG=$wl "$tmp/client" policy "$conninfo" "$ORG" "$WS" "$AGENT" "$AAGENT" "$lang" "$code" "$N" "$ROUNDS")
		else
			pol[$name]=$("$tmp/client" policy "$conninfo" "$ORG" "$WS" "$AGENT" "$AAGENT" "$lang" "$code" "$N" "$ROUNDS")
		fi || bench_die "the $name approval-policy client failed (above)"
	done
	echo
	printf '%-8s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n' program served_ms appr_p50 appr_p99 call_p50 reqappr_p50 auto_p50 auto_p99 auto/appr auto/call auto/reqap auto/served
	for name in shell pandas; do
		read -r ap50 ap99 rp50 _ up50 up99 cp50 _ <<<"${pol[$name]}"
		printf '%-8s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n' "$name" "${served[$name]}" "$ap50" "$ap99" "$cp50" "$rp50" "$up50" "$up99" \
			"$(awk -v a="$up50" -v b="$ap50" 'BEGIN { printf "%.2fx", a / b }')" \
			"$(awk -v a="$up50" -v b="$cp50" 'BEGIN { printf "%.2fx", a / b }')" \
			"$(awk -v a="$up50" -v b="$rp50" 'BEGIN { printf "%.2fx", a / b }')" \
			"$(awk -v a="$up50" -v b="${served[$name]}" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "n/a" }')"
	done
	echo "(ms; appr: approve -> finished (today's rows' interval: from approve's return), call: the same from before the approve call (its transaction on the clock, as the request's is on auto), reqappr: request -> finished with the approval right after the request, auto: request -> finished approved by the org's policy in the request's transaction, its end awaited with agent.wait() (its channel is known only after the request: a LISTEN would be one more round trip), N=$N each in $ROUNDS alternating blocks on one connection; served: the served jail alone, a launcher and a resident caller of the benchmark's own, median of $N; pandas warm everywhere; the target is auto_p50 <= appr_p50: auto/appr and auto/call bound it from both sides)"
	# Where the time goes, from the server's own clocks (each the start of
	# the transaction that set it): the approval (approved_at) to the
	# claim's commit (provisioned_at), to the start, to the finish; the
	# medians of this part's succeeded runs, by path.
	echo
	q -F ' ' <<SQL | awk 'BEGIN { printf "%-8s %-8s %6s %14s %14s %14s\n", "program", "path", "runs", "appr->claim", "claim->start", "start->finish" } { printf "%-8s %-8s %6s %14.2f %14.2f %14.2f\n", $1, $2, $3, $4, $5, $6 }'
SELECT CASE WHEN i.language = 'shell' THEN 'shell' ELSE 'pandas' END,
	   CASE WHEN i.agent_id = '$AAGENT' THEN 'auto' ELSE 'approve' END, count(*),
	   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM i.provisioned_at - i.approved_at) * 1000),
	   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM i.started_at - i.provisioned_at) * 1000),
	   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM i.finished_at - i.started_at) * 1000)
  FROM agent.invocations i
 WHERE i.created_at >= '$pol_since' AND i.state = 'succeeded' AND i.agent_id IN ('$AGENT', '$AAGENT')
 GROUP BY 1, 2 ORDER BY 1 DESC, 2;
SQL
	echo "(ms, server clocks: each column the difference of two transactions' start times)"
fi

# Throughput: CLIENTS clients through the whole control plane, next to the
# jail run directly by 2 parallel loops (one per core) for the same time.
# With a baseline, four parts of DURATION/2 each, baseline, this, this,
# baseline (a drift of the machine's load in time falls on both alike); a
# side's rate is its completed runs over its parts' time.
# throughput CONNINFO ORG WS AGENT SECONDS: sets n (completed) and s (seconds)
throughput() {
	n=0 s=0
	read -r n _ s < <("$tmp/client" throughput "$1" "$2" "$3" "$4" shell true "$CLIENTS" "$5")
	[ "${n:-0}" -gt 0 ] || bench_die "no run succeeded in the throughput test: nothing to time"
}
if [ -n "$AAGENT" ]; then
	# approve path and automatic runs, in four parts of DURATION/2
	half=$(awk -v d="$DURATION" 'BEGIN { print d / 2 }')
	adone=0 asecs=0 udone=0 usecs=0
	for side in approve auto auto approve; do
		if [ $side = approve ]; then
			throughput "$conninfo" "$ORG" "$WS" "$AGENT" "$half"
			adone=$((adone + n)) asecs=$(awk -v a="$asecs" -v b="$s" 'BEGIN { print a + b }')
		else
			throughput "$conninfo" "$ORG" "$WS" "$AAGENT" "$half"
			udone=$((udone + n)) usecs=$(awk -v a="$usecs" -v b="$s" 'BEGIN { print a + b }')
		fi
	done
	arate=$(awk -v n="$adone" -v s="$asecs" 'BEGIN { printf "%.1f", n / s }')
	urate=$(awk -v n="$udone" -v s="$usecs" 'BEGIN { printf "%.1f", n / s }')
	echo
	printf 'throughput, shell true, %s clients: automatic %s/s (%s runs), approve path %s/s (%s runs), in halves of %ss alternated; automatic/approve %s\n' \
		"$CLIENTS" "$urate" "$udone" "$arate" "$adone" "$half" \
		"$(awk -v a="$urate" -v b="$arate" 'BEGIN { printf "%.2f", a / b }')"
fi
[ "$PART" = all ] || exit 0
if [ -z "$BASE_PG_CONFIG" ]; then
	throughput "$conninfo" "$ORG" "$WS" "$AGENT" "$DURATION"
	completed=$n secs=$s
else
	half=$(awk -v d="$DURATION" 'BEGIN { print d / 2 }')
	completed=0 secs=0 bdone=0 bsecs=0
	for side in base this this base; do
		if [ $side = base ]; then
			throughput "${base[1]}" "$BORG" "$BWS" "$BAGENT" "$half"
			bdone=$((bdone + n)) bsecs=$(awk -v a="$bsecs" -v b="$s" 'BEGIN { print a + b }')
		else
			throughput "$conninfo" "$ORG" "$WS" "$AGENT" "$half"
			completed=$((completed + n)) secs=$(awk -v a="$secs" -v b="$s" 'BEGIN { print a + b }')
		fi
	done
	brate=$(awk -v n="$bdone" -v s="$bsecs" 'BEGIN { printf "%.1f", n / s }')
fi
rate=$(awk -v n="$completed" -v s="$secs" 'BEGIN { printf "%.1f", n / s }')
# (the script's $ are the inner shell's; jail_run's words are the command's)
# shellcheck disable=SC2016,SC2046
direct=$(as_pg bash -c '
	end=$(( $(date +%s) + $1 )); shift
	count() { c=0; while [ "$(date +%s)" -lt "$end" ]; do "$@" >/dev/null 2>&1 </dev/null; c=$((c + 1)); done; echo $c; }
	count "$@" > /tmp/.sbx_bench_a.$$ & count "$@" > /tmp/.sbx_bench_b.$$; wait
	echo $(( $(cat /tmp/.sbx_bench_a.$$) + $(cat /tmp/.sbx_bench_b.$$) )); rm -f /tmp/.sbx_bench_[ab].$$' _ "$DURATION" $(jail_run shell "$tmp/true.sh"))
direct_rate=$(awk -v c="$direct" -v s="$DURATION" 'BEGIN { printf "%.1f", c / s }')
echo
printf 'throughput, shell true: %s clients %s/s (%s runs in %ss); jail direct loop x2 %s/s; ratio %s\n' \
	"$CLIENTS" "$rate" "$completed" "$DURATION" "$direct_rate" \
	"$(awk -v a="$rate" -v b="$direct_rate" 'BEGIN { printf "%.2f", a / b }')"
if [ -n "$BASE_PG_CONFIG" ]; then
	printf 'throughput, baseline: %s clients %s/s (%s runs in %ss, alternated with the above in halves); this/base %s (> 1: this install is faster)\n' \
		"$CLIENTS" "$brate" "$bdone" "$DURATION" \
		"$(awk -v a="$rate" -v b="$brate" 'BEGIN { printf "%.2f", a / b }')"
fi
