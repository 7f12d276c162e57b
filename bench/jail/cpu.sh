#!/usr/bin/env bash
# bench/jail/cpu.sh [RUNS] [BINARY]
#
# CPU per served run: everything a resident launcher spends on one run of
# shell `true` (docs/jail.md, "Resident launcher"): the worker and sandbox
# prepared ahead, the run itself, the worker's teardown after the verdict
# and the refill of its place.  On a host where a fork or a page fault is
# dear (a VM with shadow page tables) this, not the run's own wall time,
# is what bounds throughput and what one run takes from the next one's
# CPUs.
#
# The launcher runs as postgres (the product's user), with its cgroup
# slots under a parent of the benchmark's own, and is itself put in that
# parent (v1) or in a leaf of it (v2, where a cgroup with children holds
# no process): the parent's CPU counter (v1 cpuacct.usage, v2 cpu.stat's
# usage_usec) is then the whole process tree (launcher, workers, egress
# proxies, sandboxes, payloads) and nothing else.  What the kernel does in its own threads for a run (the
# network namespace's clean-up, RCU callbacks) is not in it; the busy time
# of the whole machine over the same window (/proc/stat) is printed beside
# it, noisier.
#
# Each round starts a launcher (--pool 4), waits until its CPU counter is
# still (the pool is full: "fill", per worker, includes the launcher's own
# start), runs RUNS requests back to back through the resident caller
# (bench/jail/served-client.c) and waits until the counter is still again
# (every refill done): "per run" is that difference / RUNS.  p50 is the
# request -> verdict time of those runs, back to back (each run beside the
# refill of the one before it).
#
# BASE=/path/to/another/sandbox-jail runs the same rounds with that binary,
# alternating with this one (ROUNDS each, default 3), and prints the
# ratios base / this: a before/after in one run.  Medians over the rounds.
#
# Needs root (the cgroup directories) and scripts/jail-host-setup.sh's
# sandbox_ext parent: on cgroup v2 when the v2 hierarchy has the memory
# and pids controllers (as the jail decides), else v1 with the memory,
# pids and cpuacct hierarchies.  In the cgroup-v2 guest:
#   test/cgroup-v2/guest.sh /bin/bash -c \
#     "scripts/jail-host-setup.sh >/dev/null 2>&1; bench/jail/cpu.sh 20"
# Asserts nothing: a benchmark measures.
set -euo pipefail

RUNS=${1:-100}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-$ROOT/src/jail/sandbox-jail}
BASE=${BASE:-}
ROUNDS=${ROUNDS:-3}
POOL=${POOL:-4}
USER_=${RUN_AS:-postgres}

die() {
	echo "bench/jail/cpu.sh: $*" >&2
	exit 1
}
case $RUNS in '' | *[!0-9]* | 0) die "RUNS must be a positive number, got \"$RUNS\"" ;; esac
case $ROUNDS in '' | *[!0-9]* | 0) die "ROUNDS must be a positive number, got \"$ROUNDS\"" ;; esac
[ "$(id -u)" = 0 ] || die "run as root (it makes cgroup directories for the launcher)"
id "$USER_" >/dev/null 2>&1 || die "no user $USER_ (RUN_AS names the launcher's user)"
for b in "$BIN" ${BASE:+"$BASE"}; do
	[ -x "$b" ] || die "no jail binary at $b (build it first: make -C src/jail)"
done

# v2 where its hierarchy has memory and pids (the jail's own choice), else
# the v1 hierarchies (mount points from mountinfo); the delegated parent.
hier() { awk -v c="$1" '$9 == "cgroup" && ("," $NF ",") ~ ("," c ",") { print $5; exit }' /proc/self/mountinfo; }
V2=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
MODE=v1
if [ -n "$V2" ] && grep -qw memory "$V2/cgroup.controllers" 2>/dev/null &&
	grep -qw pids "$V2/cgroup.controllers"; then
	MODE=v2
	[ -d "$V2/sandbox_ext" ] || die "no $V2/sandbox_ext: run scripts/jail-host-setup.sh first"
	grep -qw cpu "$V2/sandbox_ext/cgroup.subtree_control" ||
		die "the cpu controller is not enabled in $V2/sandbox_ext (its cgroup.subtree_control): no CPU counter"
else
	MEM=$(hier memory)
	PIDS=$(hier pids)
	CPU=$(hier cpuacct)
	[ -n "$MEM" ] && [ -n "$PIDS" ] && [ -n "$CPU" ] ||
		die "needs cgroup v2 with memory and pids, or the v1 memory, pids and cpuacct hierarchies"
	for h in "$MEM" "$PIDS" "$CPU"; do
		[ -d "$h/sandbox_ext" ] || die "no $h/sandbox_ext: run scripts/jail-host-setup.sh first"
	done
fi

WORK=$(mktemp -d /tmp/cpubench.XXXXXX)
chmod 755 "$WORK"
LAUNCHER=
PARENT=
cleanup() {
	if [ -n "$LAUNCHER" ]; then kill "$LAUNCHER" 2>/dev/null || true; wait "$LAUNCHER" 2>/dev/null || true; fi
	remove_parent
	rm -rf "$WORK"
}
trap cleanup EXIT
mkdir "$WORK/ws" "$WORK/sock"
chown "$USER_": "$WORK/ws" "$WORK/sock"
printf 'true\n' >"$WORK/true.sh"
chmod 644 "$WORK/true.sh"
gcc -O2 -o "$WORK/served-client" "$ROOT/bench/jail/served-client.c" || die "could not build served-client"

# A fresh parent per round, owned by the user: in the three v1
# hierarchies; on v2 one directory with the controllers on for its
# children and a leaf for the launcher.  PDIR: what --cgroup-parent names,
# LDIR: where the launcher goes.
make_parent() {
	PARENT=sandbox_ext/cpubench.$$.$1
	if [ $MODE = v2 ]; then
		mkdir "$V2/$PARENT" "$V2/$PARENT/launcher"
		echo "+memory +pids +cpu" >"$V2/$PARENT/cgroup.subtree_control"
		chown -R "$USER_": "$V2/$PARENT"
		PDIR=$V2/$PARENT
		LDIR=$V2/$PARENT/launcher
		return
	fi
	for h in "$MEM" "$PIDS" "$CPU"; do
		mkdir "$h/$PARENT"
		chown -R "$USER_": "$h/$PARENT"
	done
	PDIR=$CPU/$PARENT
	LDIR=$CPU/$PARENT
}
remove_parent() {
	local h
	[ -n "$PARENT" ] || return 0
	for h in ${V2:+"$V2"} ${MEM:+"$MEM" "$PIDS" "$CPU"}; do
		[ -d "$h/$PARENT" ] || continue
		# slots a killed launcher left behind, then the parent
		find "$h/$PARENT" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
		rmdir "$h/$PARENT" 2>/dev/null || true
	done
	PARENT=
}
usage_ns() {
	if [ $MODE = v2 ]; then
		awk '$1 == "usage_usec" { printf "%.0f\n", $2 * 1000 }' "$V2/$PARENT/cpu.stat"
	else
		cat "$CPU/$PARENT/cpuacct.usage"
	fi
}
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
# Wait until the parent's counter moves less than 1 ms in 300 ms (at most 60 s).
settle() {
	local a b
	a=$(usage_ns)
	for _ in $(seq 200); do
		sleep 0.3
		b=$(usage_ns)
		[ $((b - a)) -lt 1000000 ] && return 0
		a=$b
	done
	die "the launcher never went idle"
}

# round BINARY TAG: prints "fill_us per_run_us p50_us busy_us"
round() {
	local bin=$1 tag=$2 sock t0 t1 b0 b1 fill p50
	make_parent "$tag"
	sock=$WORK/sock/$tag.sock
	rm -f "$sock"
	t0=$(usage_ns)
	# (setpriv execs: $! is the launcher itself, not a session around it;
	# root puts it in its cgroup first, which v2 lets only root do here)
	sh -c 'echo $$ > "$1/cgroup.procs" && exec setpriv --reuid="$2" --regid="$2" --init-groups \
			"$3" --serve "$4" --pool "$5" --cgroup-parent "$6" --quiet' \
		_ "$LDIR" "$USER_" "$bin" "$sock" "$POOL" "$PDIR" &
	LAUNCHER=$!
	for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
	[ -S "$sock" ] || die "the launcher $bin did not start"
	settle
	t1=$(usage_ns)
	fill=$(((t1 - t0) / POOL / 1000))
	b0=$(busy_ticks)
	t0=$(usage_ns)
	p50=$(for _ in $(seq "$RUNS"); do echo; done |
		setpriv --reuid="$USER_" --regid="$USER_" --init-groups "$WORK/served-client" "$sock" shell "$WORK/true.sh" "$WORK/ws" |
		awk '$2 != "exited" { bad++ } { print $1 } END { if (bad) exit 1 }' | sort -n |
		awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') || die "a run of $bin did not end as exited"
	settle
	t1=$(usage_ns)
	b1=$(busy_ticks)
	kill "$LAUNCHER"
	wait "$LAUNCHER" 2>/dev/null || true
	LAUNCHER=
	remove_parent
	echo "$fill $(((t1 - t0) / RUNS / 1000)) $p50 $(((b1 - b0) * 1000000 / $(getconf CLK_TCK) / RUNS))"
}

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
declare -a this_r base_r
for r in $(seq "$ROUNDS"); do
	this_r+=("$(round "$BIN" "this$r")")
	[ -n "$BASE" ] && base_r+=("$(round "$BASE" "base$r")")
done

col() { printf '%s\n' "$@" | awk -v c="$COL" '{ print $c }' | median; }
echo "# CPU per served run of shell true (launcher's whole process tree, cgroup $MODE): $RUNS runs back to back per round, $ROUNDS round(s), --pool $POOL, as $USER_; kernel $(uname -r), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %14s %14s %12s %16s\n' "" fill_ms/worker cpu_ms/run p50_ms busy_ms/run
line() {
	local name=$1
	shift
	local f c p b
	f=$(COL=1 col "$@")
	c=$(COL=2 col "$@")
	p=$(COL=3 col "$@")
	b=$(COL=4 col "$@")
	printf '%-6s %14.2f %14.2f %12.2f %16.2f\n' "$name" "$(awk -v x="$f" 'BEGIN{print x/1000}')" \
		"$(awk -v x="$c" 'BEGIN{print x/1000}')" "$(awk -v x="$p" 'BEGIN{print x/1000}')" \
		"$(awk -v x="$b" 'BEGIN{print x/1000}')"
	echo "$f $c $p $b" >"$WORK/$name.med"
}
line this "${this_r[@]}"
if [ -n "$BASE" ]; then
	line base "${base_r[@]}"
	read -r tf tc tp tb <"$WORK/this.med"
	read -r bf bc bp bb <"$WORK/base.med"
	printf '%-6s %13.2fx %13.2fx %11.2fx %15.2fx\n' base/this "$(awk -v a="$bf" -v b="$tf" 'BEGIN{print a/b}')" \
		"$(awk -v a="$bc" -v b="$tc" 'BEGIN{print a/b}')" "$(awk -v a="$bp" -v b="$tp" 'BEGIN{print a/b}')" \
		"$(awk -v a="$bb" -v b="$tb" 'BEGIN{print a/b}')"
fi
echo "# fill: CPU to prepare one worker (with the launcher's own start); cpu: per run, with its worker's teardown and refill; busy: the whole machine per run (/proc/stat, kernel threads included)"
