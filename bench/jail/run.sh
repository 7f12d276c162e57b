#!/usr/bin/env bash
# bench/jail/run.sh [N] [BINARY]
#
# Refuses (a message, exit 1) when BINARY (default src/jail/sandbox-jail)
# or bwrap is missing: a benchmark of nothing prints nothing.
#
# Start-up cost of sandbox-jail against bare exec and bubblewrap, measured
# in one run on this machine (a benchmark: it prints figures, it asserts
# nothing).  For each trivial program it runs N times:
#   bare         the program itself
#   bwrap        bubblewrap with comparable namespaces and mounts
#                (all namespaces, ro /usr, proc, dev, tmpfs /tmp, the
#                workspace, cleared env, caps dropped; no seccomp, no cgroup)
#   jail         sandbox-jail with its defaults (cgroup limits if the host
#                has delegated cgroups, seccomp, rlimits)
#   jail-nocg    sandbox-jail with no cgroup (rlimits only)
#   client       sandbox-jail --client against a resident launcher
#                (sandbox-jail --serve, started once for the benchmark):
#                the same command line, served; includes the client's exec
#   resident     a resident caller (bench/jail/served-client.c, one process
#                for all samples) talking to the same launcher: request to
#                verdict as the PostgreSQL worker would see it; the time is
#                the caller's own clock from connect to verdict
#   bare-c       the program bare, fork+exec+wait from that same small
#                resident caller (the "bare" column is timed from bash,
#                whose own fork is part of it)
# and prints the median ms per run of each, plus ratios and, for the
# resident caller, the ms over bare.
#
# Rows: "true" runs /bin/true itself everywhere (the jail with its raw
# mode, --exec /bin/true); "sh-true" runs a bash script "exec /bin/true"
# everywhere (the jail with --language shell), i.e. a shell payload;
# python3 and node run "-c pass" / "-e 0" bare and under bwrap, and the
# same one-line program as a --language python/node payload in the jail.
# The last lines print the issue's two targets for /bin/true: resident
# minus bare (ms, target <= 1) and bwrap / resident (x, target >= 3).
#
# Uses per-run timestamps from bash's EPOCHREALTIME (no extra fork per
# sample), contenders interleaved round-robin; hyperfine is not required,
# but when installed it adds a cross-check of the true row.
# JAIL_BENCH_ROWS="true sh-true" runs only the rows named (default: all).
set -u

# A clean environment for every contender (some variables make node alone
# several times slower); re-exec once under env -i.
if [ -z "${JAIL_BENCH_CLEAN:-}" ]; then
	exec env -i JAIL_BENCH_CLEAN=1 JAIL_BENCH_SETTLE="${JAIL_BENCH_SETTLE:-1}" \
		JAIL_BENCH_ROWS="${JAIL_BENCH_ROWS:-true sh-true python3 node}" \
		JAIL_BENCH_NO_HYPERFINE="${JAIL_BENCH_NO_HYPERFINE:-}" \
		PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 bash "$0" "$@"
fi

N=${1:-50}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}

# What it times must be there: without it every row would be ratios of
# nothing ("-nanx"), which reads like a result.
if [ ! -x "$BIN" ]; then
	echo "bench/jail/run.sh: no jail binary at $BIN (build it first: make -C src/jail)" >&2
	exit 1
fi
if ! command -v bwrap >/dev/null; then
	echo "bench/jail/run.sh: bwrap is not installed (scripts/deps.sh installs it): it is the baseline of every ratio" >&2
	exit 1
fi
case $N in
'' | *[!0-9]* | 0)
	echo "bench/jail/run.sh: N must be a positive number of runs, got \"$N\"" >&2
	exit 1
	;;
esac
WORK=$(mktemp -d /tmp/jailbench.XXXXXX)
LAUNCHER=
trap '[ -n "$LAUNCHER" ] && kill "$LAUNCHER" && wait "$LAUNCHER"; rm -rf "$WORK"' EXIT
mkdir "$WORK/ws"
[ "$(id -u)" = 0 ] && chown 65534:65534 "$WORK/ws"
chmod 755 "$WORK"

printf 'exec /bin/true\n' > "$WORK/true.sh"
printf 'pass\n' > "$WORK/pass.py"
printf '0\n' > "$WORK/zero.js"

BWRAP=(bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL
	--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/sbin /sbin
	--symlink usr/lib /lib --symlink usr/lib64 /lib64
	--ro-bind /etc/ld.so.cache /etc/ld.so.cache --ro-bind /etc/alternatives /etc/alternatives
	--proc /proc --dev /dev --tmpfs /tmp --bind "$WORK/ws" /workspace
	--ro-bind "$WORK" /sandbox --chdir /workspace --clearenv
	--setenv PATH /usr/bin:/bin --setenv HOME /tmp --uid 1000 --gid 1000)
JAIL=("$BIN" --workspace "$WORK/ws" --verdict-file /dev/null --quiet)
CLIENT=("$BIN" --client "$WORK/jail.sock" --workspace "$WORK/ws" --verdict-file /dev/null --quiet)

# The resident launcher (default cgroup parent, like the jail column) and
# the resident caller.
"$BIN" --serve "$WORK/jail.sock" --pool 4 --quiet &
LAUNCHER=$!
gcc -O2 -o "$WORK/served-client" "$ROOT/bench/jail/served-client.c" || exit 1
for _ in $(seq 100); do [ -S "$WORK/jail.sock" ] && break; sleep 0.05; done

# measure: runs the seven contenders round-robin N times (so a change in
# machine load hits all of them alike) and prints "mean median" in ms for
# each, in order: bare bwrap jail jail-nocg client resident bare-c.  The
# resident caller (a coprocess started per row: RESIDENT=(LANG CODEFILE),
# LANG "/path" for --exec) runs one request and one bare run of BARE per
# line it reads and reports its own times.
measure() {
	local i k t0 t1 us st bus
	local -a s0=() s1=() s2=() s3=() s4=() s5=() s6=()
	coproc RC { exec "$WORK/served-client" "$WORK/jail.sock" "${RESIDENT[0]}" "${RESIDENT[1]}" "$WORK/ws" -- "${BARE[@]}"; }
	for k in 0 1 2 3 4; do run_k $k >/dev/null 2>&1 </dev/null; done	# warm-up
	echo >&"${RC[1]}"
	read -r us st bus <&"${RC[0]}"
	for ((i = 0; i < N; i++)); do
		for k in 0 1 2 3 4; do
			t0=$EPOCHREALTIME
			run_k $k >/dev/null 2>&1 </dev/null
			t1=$EPOCHREALTIME
			eval "s$k+=(\$(( \${t1/./} - \${t0/./} )))"
		done
		settle
		echo >&"${RC[1]}"
		read -r us st bus <&"${RC[0]}"
		[ "$st" = exited ] || echo "# resident caller: verdict status $st" >&2
		s5+=("$us")
		s6+=("$bus")
		settle
	done
	eval "exec ${RC[1]}>&-"
	wait "$RC_PID" 2>/dev/null
	for k in 0 1 2 3 4 5 6; do
		eval 'printf "%s\n" "${s'$k'[@]}"' | sort -n | awk '
			{ v[NR] = $1; s += $1 }
			END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
			      printf "%.2f %.2f ", s / NR / 1000, m / 1000 }'
	done
	echo
}
# After a run through the launcher (client, resident) the launcher
# refills its pool: a new worker, cgroup slot, netns and sandbox, ~2-5 ms
# of CPU on this 2-CPU machine that is on nobody's clock.  Let it finish
# before the next contender runs (served-client waits the same before its
# bare-c run), then wake the CPUs from idle with an untimed exec, as the
# contenders that follow a contender do.
# JAIL_BENCH_SETTLE=0 runs the contenders back to back instead (the
# refill then overlaps bare and bwrap, and no CPU ever idles).
settle() {
	[ "${JAIL_BENCH_SETTLE:-1}" = 0 ] && return
	sleep 0.04
	/bin/true
}
run_k() {
	case $1 in
	0) "${BARE[@]}" ;;
	1) "${BWRAP[@]}" "${BWCMD[@]}" ;;
	2) $JAILFN ;;
	3) $JAILNCFN ;;
	4) $CLIENTFN ;;
	esac
}

# jail payloads come on stdin, so wrap them
jail_exec() { "${JAIL[@]}" --exec /bin/true; }
jailnc_exec() { "${JAIL[@]}" --cgroup-parent /nonexistent --exec /bin/true; }
client_exec() { "${CLIENT[@]}" --exec /bin/true; }
jail_true() { "${JAIL[@]}" --language shell < "$WORK/true.sh"; }
jail_py() { "${JAIL[@]}" --language python < "$WORK/pass.py"; }
jail_js() { "${JAIL[@]}" --language node < "$WORK/zero.js"; }
jailnc_true() { "${JAIL[@]}" --cgroup-parent /nonexistent --language shell < "$WORK/true.sh"; }
jailnc_py() { "${JAIL[@]}" --cgroup-parent /nonexistent --language python < "$WORK/pass.py"; }
jailnc_js() { "${JAIL[@]}" --cgroup-parent /nonexistent --language node < "$WORK/zero.js"; }
client_true() { "${CLIENT[@]}" --language shell < "$WORK/true.sh"; }
client_py() { "${CLIENT[@]}" --language python < "$WORK/pass.py"; }
client_js() { "${CLIENT[@]}" --language node < "$WORK/zero.js"; }

echo "# sandbox-jail start-up benchmark: N=$N, user $(id -un), kernel $(uname -r), $(nproc) cpus, settle=${JAIL_BENCH_SETTLE}"
echo "# $("$BIN" --language shell --workspace "$WORK/ws" --verdict-fd 3 3>&1 >/dev/null 2>&1 </dev/null | sed -n 's/.*"cgroup":"\([a-z0-9]*\)".*/jail cgroup mode: \1/p')"
printf '%-9s %7s %7s %7s %9s %7s %8s %7s | %10s %12s %11s %10s\n' program bare bwrap jail jail-nocg client resident bare-c \
	"bwrap/jail" "bwrap/client" "bwrap/resid" "resid-bare"

# ratio A B: "A / B" as "N.NNx"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
row() {
	local name=$1 bare_mean bare_med bw_mean bw_med jl_mean jl_med jn_mean jn_med cl_mean cl_med rs_mean rs_med bc_mean bc_med
	case " $JAIL_BENCH_ROWS " in *" $name "*) ;; *) return ;; esac
	read -r bare_mean bare_med bw_mean bw_med jl_mean jl_med jn_mean jn_med cl_mean cl_med rs_mean rs_med bc_mean bc_med < <(measure)
	printf '%-9s %7s %7s %7s %9s %7s %8s %7s | %10s %12s %11s %10s\n' "$name" \
		"$bare_med" "$bw_med" "$jl_med" "$jn_med" "$cl_med" "$rs_med" "$bc_med" \
		"$(ratio "$bw_med" "$jl_med")" "$(ratio "$bw_med" "$cl_med")" "$(ratio "$bw_med" "$rs_med")" \
		"$(awk -v a="$rs_med" -v b="$bare_med" 'BEGIN { printf "%+.2f", a - b }')"
	eval "MED_${name//[^a-z0-9]/_}=\"$bare_med $bw_med $rs_med $bc_med\""
}

BARE=(/bin/true)
BWCMD=(/bin/true)
RESIDENT=(/bin/true -)
JAILFN=jail_exec JAILNCFN=jailnc_exec CLIENTFN=client_exec row true
BARE=(/bin/bash --noprofile --norc "$WORK/true.sh")
BWCMD=(/bin/bash --noprofile --norc /sandbox/true.sh)
RESIDENT=(shell "$WORK/true.sh")
JAILFN=jail_true JAILNCFN=jailnc_true CLIENTFN=client_true row sh-true
BARE=(/usr/bin/python3 -I -c pass)
BWCMD=(/usr/bin/python3 -I -c pass)
RESIDENT=(python "$WORK/pass.py")
JAILFN=jail_py JAILNCFN=jailnc_py CLIENTFN=client_py row python3
if [ -x /usr/bin/node ]; then
	BARE=(/usr/bin/node -e 0)
	BWCMD=(/usr/bin/node -e 0)
	RESIDENT=(node "$WORK/zero.js")
	JAILFN=jail_js JAILNCFN=jailnc_js CLIENTFN=client_js row node
fi
echo "# medians in ms.  true: /bin/true in every contender (jail: --exec /bin/true);"
echo "# sh-true: a bash script 'exec /bin/true' in every contender (jail: --language shell)."
echo "# bare is timed from bash (its fork included), bare-c from the resident caller."
[ -n "${MED_true:-}" ] || exit 0
read -r b_bare b_bw b_rs b_bc <<<"$MED_true"
echo "# target 1 (/bin/true, resident - bare <= 1 ms): $(awk -v a="$b_rs" -v b="$b_bare" 'BEGIN { printf "%+.2f", a - b }') ms" \
	"(against bare-c: $(awk -v a="$b_rs" -v b="$b_bc" 'BEGIN { printf "%+.2f", a - b }') ms)"
echo "# target 2 (/bin/true, bwrap / resident >= 3x): $(ratio "$b_bw" "$b_rs")"

# Cross-check with hyperfine when it is installed (not required): the
# true row, each contender measured in its own batch.
if [ -n "${JAIL_BENCH_NO_HYPERFINE:-}" ]; then
	:
elif command -v hyperfine >/dev/null; then
	echo "# hyperfine cross-check (true), N=$N"
	hyperfine -N -w 3 -r "$N" --style basic \
		-n bare "/bin/true" \
		-n bwrap "${BWRAP[*]} /bin/true" \
		-n jail "${JAIL[*]} --exec /bin/true" \
		-n jail-nocg "${JAIL[*]} --cgroup-parent /nonexistent --exec /bin/true" 2>&1 |
		grep -E "^(Benchmark|  Time|Summary|.* ran$|    [0-9.]+ ± )"
fi
