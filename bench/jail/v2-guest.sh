#!/usr/bin/env bash
# bench/jail/v2-guest.sh [N]
#
# bench/jail/run.sh twice, as root: on this host (whatever cgroups it has:
# v1 here) and in the cgroup-v2-only guest (test/cgroup-v2/guest.sh,
# emulated unless KVM works), then the ratios between contenders of each
# side by side.  Under emulation every figure is many times the host's, so
# only ratios within one side mean anything; the column to read first is
# jail/nocg, what a one-shot run's cgroup costs (v1: the move into it; v2:
# the clone into it, CLONE_INTO_CGROUP).  A benchmark: it prints, it
# asserts nothing.  N defaults to 20; JAIL_BENCH_ROWS as in run.sh
# (default here: "true sh-true python3").
set -u

N=${1:-20}
ROWS=${JAIL_BENCH_ROWS:-true sh-true python3}
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/jailbench-v2.XXXXXX)
trap 'rm -rf "$work"' EXIT

[ "$(id -u)" = 0 ] || { echo "v2-guest.sh: run as root (the guest needs it)" >&2; exit 1; }
[ -x "$top/src/jail/sandbox-jail" ] ||
	{ echo "v2-guest.sh: no jail binary at $top/src/jail/sandbox-jail (build it first: make -C src/jail)" >&2; exit 1; }

echo "# host: bench/jail/run.sh $N"
JAIL_BENCH_ROWS=$ROWS JAIL_BENCH_NO_HYPERFINE=1 "$here/run.sh" "$N" | tee "$work/host"
echo "# guest: bench/jail/run.sh $N"
"$top/test/cgroup-v2/guest.sh" /bin/bash -c \
	"'$top/scripts/jail-host-setup.sh' root >/dev/null 2>&1; JAIL_BENCH_ROWS='$ROWS' JAIL_BENCH_NO_HYPERFINE=1 '$here/run.sh' $N" |
	tee "$work/guest"

# rows: program bare bwrap jail jail-nocg client resident bare-c | ...
ratios() {
	awk -v side="$2" '
		/^# jail cgroup mode:/ { mode = $NF }
		$1 ~ /^(true|sh-true|python3|node)$/ && $9 == "|" {
			printf "%-5s %-9s %-4s %9.2fx %9.2fx %10.2fx %11.2fx %12.2fx\n", side, $1, mode,
				$4 / $5, $4 / $2, $6 / $4, $7 / $2, $3 / $7
		}' "$1"
}
echo
echo "# ratios of medians, each side against itself (jail/nocg: one-shot with its cgroup / without)"
printf '%-5s %-9s %-4s %10s %10s %11s %12s %13s\n' side program cg jail/nocg jail/bare client/jail resident/bare bwrap/resident
ratios "$work/host" host
ratios "$work/guest" guest
