#!/usr/bin/env bash
# The export step of `make demo`: show agent.tool_invocations rows arriving
# in ClickHouse, or say why not.  Called by scripts/demo.sh against the
# running demo cluster (SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT, SANDBOX_DB,
# PG_CONFIG as for scripts/cluster.sh).
#
#   scripts/export-demo.sh [INVOCATION_ID]
#
# Starts a throwaway ClickHouse (scripts/clickhouse.sh), turns the exporter
# on, waits until the rows are there, prints them from the deduplicated
# view, then turns the exporter off, drops the slot and stops ClickHouse.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_cluster}
PORT=${SANDBOX_PGPORT:-55432}
DB=${SANDBOX_DB:-sandbox_test}
export CLICKHOUSE_DIR=${CLICKHOUSE_DIR:-/tmp/sandbox_ch_demo}
CH="$top/scripts/clickhouse.sh"
id=${1:-}

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
sql() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -d "$DB" -c "$1"; }

if ! command -v clickhouse-server >/dev/null 2>&1; then
	echo "export: clickhouse-server is not installed; skipping the ClickHouse step (scripts/deps.sh installs it)"
	exit 0
fi
if [ "$(sql "SELECT to_regclass('agent.tool_invocations') IS NOT NULL")" != t ]; then
	echo "export: agent.tool_invocations does not exist; skipping the ClickHouse step"
	exit 0
fi
if ! "$CH" start >/dev/null 2>&1; then
	echo "export: could not start a ClickHouse server; skipping the ClickHouse step"
	exit 0
fi
eval "$("$CH" env)"
cleanup() {
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null 2>&1
	sql "SELECT pg_reload_conf()" >/dev/null 2>&1
	sleep 0.5
	sql "SELECT agent.export_drop()" >/dev/null 2>&1
	"$CH" stop >/dev/null 2>&1
}
trap cleanup EXIT

echo "export: ClickHouse at $CLICKHOUSE_URL; turning the exporter on"
sql "ALTER SYSTEM SET sandbox.clickhouse_url = '$CLICKHOUSE_URL'" >/dev/null
sql "SELECT pg_reload_conf()" >/dev/null
want=$(sql "SELECT count(*) FROM agent.tool_invocations")
for _ in $(seq 1 150); do
	have=$("$CH" query "SELECT count() FROM tool_invocations FINAL WHERE _deleted = 0" 2>/dev/null || echo 0)
	[ "$have" -ge "$want" ] && break
	sleep 0.2
done
sql "SELECT state, rows_exported, lag_bytes, lag_seconds FROM agent.export_status()" |
	awk -F'|' '{printf "export: state %s, %s rows exported, lag %s bytes / %ss\n", $1, $2, $3, $4}'
filter="_deleted = 0"
[ -n "$id" ] && filter="$filter AND invocation_id = toUUID('$id')"
echo "export: rows in ClickHouse (SELECT ... FROM tool_invocations FINAL):"
"$CH" query "SELECT invocation_id, language, status, exit_code, duration_ms, credits_charged,
	created_at, _version FROM tool_invocations FINAL WHERE $filter
	ORDER BY created_at_ms DESC LIMIT 5 FORMAT PrettyCompactNoEscapes"
