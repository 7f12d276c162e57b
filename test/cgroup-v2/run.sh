#!/usr/bin/env bash
# test/cgroup-v2/run.sh [BINARY]
#
# The cgroup-v2 suite of `make test`: boots the cgroup-v2-only guest
# (test/cgroup-v2/guest.sh) and runs test/cgroup-v2/checks.sh there
# against the jail built on this host.  Prints the guest's lines and ends
# with its "N passed, N failed"; a guest that cannot be booted (no qemu, no
# kernel, no static busybox: scripts/deps.sh installs them) is one failure
# with the reason, never a skip.
set -u

here=$(cd "$(dirname "$0")" && pwd)
BIN=${1:-$(cd "$here/../.." && pwd)/src/jail/sandbox-jail}
case $BIN in /*) ;; *) BIN=$(pwd)/$BIN ;; esac

log=$(mktemp /tmp/cgroup-v2.XXXXXX)
trap 'rm -f "$log"' EXIT
start=$SECONDS
# what the checks take from this host's environment: the PostgreSQL whose
# sandbox_ext the "postgres" part runs (as test/run.sh has it), and the
# test knobs CG2_PARTS and CG2_ONLY
pass_env=(PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")
[ -n "${CG2_PARTS:-}" ] && pass_env+=(CG2_PARTS="$CG2_PARTS")
[ -n "${CG2_ONLY:-}" ] && pass_env+=(CG2_ONLY="$CG2_ONLY")
"$here/guest.sh" env "${pass_env[@]}" "$here/checks.sh" "$BIN" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo "# cgroup-v2: the guest took $((SECONDS - start)) s"
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
if [ -z "$line" ]; then
	echo "cgroup-v2: the guest reported no result (exit $rc): see above" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
echo "$line"
[ "$rc" = 0 ]
