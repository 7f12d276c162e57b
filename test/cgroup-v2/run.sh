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

top=$(cd "$here/../.." && pwd)
log=$(mktemp /tmp/cgroup-v2.XXXXXX)
tpl=
cleanup() {
	rm -f "$log"
	[ -n "$tpl" ] && rm -rf "$tpl"
}
trap cleanup EXIT
start=$SECONDS
# what the checks take from this host's environment: the PostgreSQL whose
# sandbox_ext the "postgres" part runs (as test/run.sh has it), and the
# test knobs CG2_PARTS and CG2_ONLY
pass_env=(PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")
[ -n "${CG2_PARTS:-}" ] && pass_env+=(CG2_PARTS="$CG2_PARTS")
[ -n "${CG2_ONLY:-}" ] && pass_env+=(CG2_ONLY="$CG2_ONLY")
# The "postgres" part's cluster, made here where initdb and CREATE
# EXTENSION run natively (emulated, they took ~150 s of the guest's time),
# stopped cleanly, under the checkout (which the guest sees) in a directory
# of this run's own; the guest copies it to its own /tmp and starts it
# there in the delegated cgroup (postgres.sh).  Made with the supervisor
# paused and without the local runner: nothing runs here.
if [ -z "${CG2_PARTS:-}" ] || [[ " $CG2_PARTS " == *" postgres "* ]]; then
	mkdir -p "$top/build"
	tpl=$(mktemp -d "$top/build/cgroup-v2-pg.XXXXXX")
	chmod 0755 "$tpl"
	if SANDBOX_CLUSTER_DIR=$tpl/cluster SANDBOX_PGPORT=55499 SANDBOX_DB=sandbox_test SANDBOX_DB_EXTENSIONS= \
		SANDBOX_EXTRA_CONF="sandbox.max_concurrent_runs = 0
sandbox.local_runner = off" "$top/scripts/cluster.sh" start > "$tpl/make.log" 2>&1 &&
		KEEP_CLUSTER=1 SANDBOX_CLUSTER_DIR=$tpl/cluster SANDBOX_PGPORT=55499 "$top/scripts/cluster.sh" stop >> "$tpl/make.log" 2>&1; then
		pass_env+=(CG2_PG_TEMPLATE="$tpl/cluster")
	else
		echo "# cgroup-v2: no cluster template (the guest makes its own): $(tail -n 3 "$tpl/make.log" | tr '\n' ' ')"
	fi
fi
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
