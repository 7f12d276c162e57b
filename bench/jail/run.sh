#!/usr/bin/env bash
# bench/jail/run.sh [N] [BINARY]
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
# and prints mean and median ms per run plus jail/bare and jail/bwrap.
#
# sandbox-jail has no raw-exec mode: its "true" row runs a shell payload
# "exec /bin/true", so it includes a bash start-up; bwrap's "true" row runs
# the same bash script, and the bare "sh-true" row shows that bash cost.
#
# Uses per-run timestamps from bash's EPOCHREALTIME (no extra fork per
# sample), contenders interleaved round-robin; hyperfine is not required,
# but when installed it adds a cross-check of the sh-true row.
set -u

# A clean environment for every contender (some variables make node alone
# several times slower); re-exec once under env -i.
if [ -z "${JAIL_BENCH_CLEAN:-}" ]; then
	exec env -i JAIL_BENCH_CLEAN=1 PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 bash "$0" "$@"
fi

N=${1:-50}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
WORK=$(mktemp -d /tmp/jailbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
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

# measure: runs the four contenders round-robin N times (so a change in
# machine load hits all of them alike) and prints "mean median" in ms for
# each, in order: bare bwrap jail jail-nocg.
measure() {
	local i k t0 t1
	local -a s0=() s1=() s2=() s3=()
	for k in 0 1 2 3; do run_k $k >/dev/null 2>&1 </dev/null; done	# warm-up
	for ((i = 0; i < N; i++)); do
		for k in 0 1 2 3; do
			t0=$EPOCHREALTIME
			run_k $k >/dev/null 2>&1 </dev/null
			t1=$EPOCHREALTIME
			eval "s$k+=(\$(( \${t1/./} - \${t0/./} )))"
		done
	done
	for k in 0 1 2 3; do
		eval 'printf "%s\n" "${s'$k'[@]}"' | sort -n | awk '
			{ v[NR] = $1; s += $1 }
			END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
			      printf "%.2f %.2f ", s / NR / 1000, m / 1000 }'
	done
	echo
}
run_k() {
	case $1 in
	0) "${BARE[@]}" ;;
	1) "${BWRAP[@]}" "${BWCMD[@]}" ;;
	2) $JAILFN ;;
	3) $JAILNCFN ;;
	esac
}

# jail payloads come on stdin, so wrap them
jail_true() { "${JAIL[@]}" --language shell < "$WORK/true.sh"; }
jail_py() { "${JAIL[@]}" --language python < "$WORK/pass.py"; }
jail_js() { "${JAIL[@]}" --language node < "$WORK/zero.js"; }
jailnc_true() { "${JAIL[@]}" --cgroup-parent /nonexistent --language shell < "$WORK/true.sh"; }
jailnc_py() { "${JAIL[@]}" --cgroup-parent /nonexistent --language python < "$WORK/pass.py"; }
jailnc_js() { "${JAIL[@]}" --cgroup-parent /nonexistent --language node < "$WORK/zero.js"; }

echo "# sandbox-jail start-up benchmark: N=$N, user $(id -un), kernel $(uname -r), $(nproc) cpus"
echo "# $("$BIN" --language shell --workspace "$WORK/ws" --verdict-fd 3 3>&1 >/dev/null 2>&1 </dev/null | sed -n 's/.*"cgroup":"\([a-z0-9]*\)".*/jail cgroup mode: \1/p')"
printf '%-10s %17s %17s %17s %17s %10s %11s\n' program "bare mean/med" "bwrap mean/med" \
	"jail mean/med" "jail-nocg mean/med" "jail/bare" "jail/bwrap"

row() {
	local name=$1
	read -r bare_mean bare_med bw_mean bw_med jl_mean jl_med jn_mean jn_med < <(measure)
	printf '%-10s %8s/%-8s %8s/%-8s %8s/%-8s %8s/%-8s %10s %11s\n' "$name" \
		"$bare_mean" "$bare_med" "$bw_mean" "$bw_med" "$jl_mean" "$jl_med" "$jn_mean" "$jn_med" \
		"$(awk -v a="$jl_med" -v b="$bare_med" 'BEGIN { printf "%.1fx", a / b }')" \
		"$(awk -v a="$jl_med" -v b="$bw_med" 'BEGIN { printf "%.2fx", a / b }')"
}

BARE=(/bin/true)
BWCMD=(/bin/bash --noprofile --norc /sandbox/true.sh)
JAILFN=jail_true JAILNCFN=jailnc_true row true
BARE=(/bin/bash --noprofile --norc "$WORK/true.sh")
JAILFN=jail_true JAILNCFN=jailnc_true row sh-true
BARE=(/usr/bin/python3 -I -c pass)
BWCMD=(/usr/bin/python3 -I -c pass)
JAILFN=jail_py JAILNCFN=jailnc_py row python3
if [ -x /usr/bin/node ]; then
	BARE=(/usr/bin/node -e 0)
	BWCMD=(/usr/bin/node -e 0)
	JAILFN=jail_js JAILNCFN=jailnc_js row node
fi
echo "# ratios use medians; jail/bare for 'true' includes the bash start-up (see sh-true)"

# Cross-check with hyperfine when it is installed (not required): the same
# bash-script payload, each contender measured in its own batch.
if command -v hyperfine >/dev/null; then
	echo "# hyperfine cross-check (sh-true), N=$N"
	hyperfine -N -w 3 -r "$N" --style basic \
		-n bare "/bin/bash --noprofile --norc $WORK/true.sh" \
		-n bwrap "${BWRAP[*]} /bin/bash --noprofile --norc /sandbox/true.sh" \
		-n jail "${JAIL[*]} --language shell --code-file $WORK/true.sh" \
		-n jail-nocg "${JAIL[*]} --cgroup-parent /nonexistent --language shell --code-file $WORK/true.sh" 2>&1 |
		grep -E "^(Benchmark|  Time|Summary|.* ran$|    [0-9.]+ ± )"
fi
