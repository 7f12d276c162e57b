#!/usr/bin/env bash
# test/cgroup-v2/postgres.sh BINARY SERVICE_CGROUP
#
# The supervisor under PostgreSQL on a cgroup-v2-only host (checks.sh runs
# it in the guest, part "postgres", after jail-host-setup.sh delegated
# <mount>/sandbox_ext to postgres): a throwaway cluster (scripts/cluster.sh,
# the server's binaries and sandbox_ext as installed for PG_CONFIG: the
# guest shares the host's root) whose postmaster is started in
# SERVICE_CGROUP (<mount>/sandbox_ext/service, where jail-host-setup.sh
# says postgres's service must run), then real invocations through the API:
# one that runs out of its memory limit, one that succeeds, both with
# sandbox.require_cgroup on (the default).  Ends with "N passed, N failed".
#
# For an emulated guest: no warm interpreters (a pandas import takes
# minutes there), one slot; the work directory a tmpfs of its own (the
# supervisor refuses one on the data directory's filesystem).
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${1:?usage: postgres.sh BINARY SERVICE_CGROUP}
SVC=${2:?usage: postgres.sh BINARY SERVICE_CGROUP}
export SANDBOX_CLUSTER_DIR=/tmp/sbx-cg2-cluster SANDBOX_PGPORT=55499 SANDBOX_DB=sandbox_test T=
WD=/run/sbx-cg2-work
# shellcheck source=../lib.sh
. "$ROOT/test/lib.sh"

mkdir -p "$WD"
mountpoint -q "$WD" || mount -t tmpfs -o size=512m,mode=0700 sbx-cg2-work "$WD"
chown postgres: "$WD"
# sandbox_ext alone in the database: no pgtap, no pg_cron's jobs (nothing
# here needs them; every statement of their install scripts runs emulated)
export SANDBOX_DB_EXTENSIONS=
# what this guest's server runs with (after the template's settings, so
# these hold): no warm interpreters, one slot, the guest's own paths
GUEST_CONF="sandbox.jail_path = '$BIN'
sandbox.work_dir = '$WD'
sandbox.warm_python = 0
sandbox.warm_node = 0
sandbox.max_concurrent_runs = 1
sandbox.local_runner = on
unix_socket_directories = '$SANDBOX_CLUSTER_DIR'
cron.host = '$SANDBOX_CLUSTER_DIR'"

stop() {
	"$ROOT/scripts/cluster.sh" stop >/dev/null 2>&1
	umount "$WD" 2>/dev/null
}
trap stop EXIT

# the postmaster (and all it starts: the supervisor, the local runner, its
# launcher) in SVC, as a service in the delegated subtree would be.
# CG2_PG_TEMPLATE (test/cgroup-v2/run.sh makes it on the host: initdb and
# CREATE EXTENSION natively, stopped cleanly) is copied and started here;
# without one, scripts/cluster.sh makes the cluster here (minutes when
# emulated).
in_svc() { sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$SVC" "$@"; }
started=no
if [ -n "${CG2_PG_TEMPLATE:-}" ]; then
	rm -rf "$SANDBOX_CLUSTER_DIR"
	cp -a "$CG2_PG_TEMPLATE" "$SANDBOX_CLUSTER_DIR" &&
		printf '%s\n' "$GUEST_CONF" >> "$SANDBOX_CLUSTER_DIR/data/postgresql.conf" &&
		in_svc runuser -u postgres -- "$PGBIN/pg_ctl" -D "$SANDBOX_CLUSTER_DIR/data" \
			-l "$SANDBOX_CLUSTER_DIR/server.log" -w -t 600 start > /tmp/sbx-cg2-cluster.log 2>&1 &&
		started=yes
	cat "$SANDBOX_CLUSTER_DIR/server.log" >> /tmp/sbx-cg2-cluster.log 2>/dev/null
else
	SANDBOX_EXTRA_CONF=$GUEST_CONF in_svc "$ROOT/scripts/cluster.sh" start > /tmp/sbx-cg2-cluster.log 2>&1 &&
		started=yes
fi
if [ $started != yes ]; then
	nok "cluster: started in $SVC with sandbox_ext${CG2_PG_TEMPLATE:+ (from $CG2_PG_TEMPLATE)}" \
		"$(tail -n 5 /tmp/sbx-cg2-cluster.log | tr '\n' '|')"
	finish_suite
fi
echo "# cluster started in $SECONDS s"
pm=$(head -n 1 "$SANDBOX_CLUSTER_DIR/data/postmaster.pid")
check "cluster: the postmaster runs in the delegated service cgroup" "0::${SVC#/sys/fs/cgroup}" \
	"$(cat "/proc/$pm/cgroup")"
check "cluster: sandbox.require_cgroup is on" on "$(q -c 'SHOW sandbox.require_cgroup')"

A=$(new_tenant 10)
# the verdict the finish recorded, from its audit event
verdict() { q -c "SELECT details -> 'verdict' ->> '$2' FROM agent.audit_events WHERE invocation_id = '$1' AND event_type = 'invocation.finished'"; }

# request (with a memory limit: lib.sh's req has none) and approve → inv
start_mem() {
	local org ws agent conv inv appr
	read -r org ws agent conv <<<"$1"
	read -r inv appr < <(tq "$org" "$ws" "SELECT invocation_id, approval_id FROM agent.request_execution('$ws', '$agent', NULL, '$2', :'code', 'requester', NULL, NULL, 120, $4);" \
		-F ' ' -v code="$3" | tail -n 1)
	approve "$1" "$appr"
	echo "$inv"
}

inv=$(start_mem "$A" python 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096]); print("survived")' 64)
await "$A" "$inv" 600 >/dev/null
check "out of memory: failed, oom_killed, charged, the verdict's cgroup v2 with its 64 MiB limit" \
	"failed|true|2|64|v2|true" \
	"$(field "$inv" "state || '|' || oom_killed || '|' || credits_charged || '|' || memory_mb")|$(verdict "$inv" cgroup)|$(verdict "$inv" oom_killed)"
check "... its peak at most the limit" t "$(field "$inv" "peak_memory_bytes BETWEEN 1 AND 64 * 1024 * 1024")"

inv=$(start_mem "$A" shell 'echo hello from v2; cat /proc/self/cgroup' 128)
await "$A" "$inv" 600 >/dev/null
check "a run that succeeds: succeeded, its output, a cgroup namespace of its own, the verdict's cgroup v2" \
	"succeeded|hello from v2
0::/|v2|false" \
	"$(field "$inv" state)|$(output "$inv")|$(verdict "$inv" cgroup)|$(verdict "$inv" oom_killed)"
check_invariants
echo "# runs done at $SECONDS s"
finish_suite
