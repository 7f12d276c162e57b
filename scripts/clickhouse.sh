#!/usr/bin/env bash
# A throwaway ClickHouse server for the export tests, the bench and the demo.
#
#   scripts/clickhouse.sh start       write a config into a temp directory,
#                                     start clickhouse-server on 127.0.0.1 and
#                                     create the tables of sql/clickhouse/
#   scripts/clickhouse.sh stop        stop it (SIGTERM, then SIGKILL) and remove
#                                     its directory
#   scripts/clickhouse.sh kill        stop it abruptly but keep its data
#   scripts/clickhouse.sh restart     start it again on the kept data
#   scripts/clickhouse.sh env         print CLICKHOUSE_URL etc. (eval-able)
#   scripts/clickhouse.sh query SQL   run SQL with clickhouse-client (as the
#                                     default user; CLICKHOUSE_USER and
#                                     CLICKHOUSE_PASSWORD pick another: the
#                                     server also has sandbox_exporter and
#                                     sandbox_auditor, see write_config)
#   scripts/clickhouse.sh status      exit 0 when the server answers
#
# Ports: CLICKHOUSE_HTTP_PORT (default 58123) and CLICKHOUSE_TCP_PORT
# (default 59000); directory CLICKHOUSE_DIR (default /tmp/sandbox_ch_server).
# start refuses ports already in use rather than share another server.
# The server runs as the clickhouse user (or postgres, or the caller when not
# root), never as root, and never touches the system's /var/lib/clickhouse.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
HTTP_PORT=${CLICKHOUSE_HTTP_PORT:-58123}
TCP_PORT=${CLICKHOUSE_TCP_PORT:-59000}
DIR=${CLICKHOUSE_DIR:-/tmp/sandbox_ch_server}
DB=${CLICKHOUSE_DATABASE:-default}

if [ "$(id -u)" -eq 0 ]; then
	if id clickhouse >/dev/null 2>&1; then RUN_AS=clickhouse; else RUN_AS=postgres; fi
else
	RUN_AS=$(id -un)
fi

as_ch() {
	if [ "$(id -un)" = "$RUN_AS" ]; then "$@"; else runuser -u "$RUN_AS" -- "$@"; fi
}

client() {
	clickhouse-client --host 127.0.0.1 --port "$TCP_PORT" \
		${CLICKHOUSE_USER:+--user "$CLICKHOUSE_USER"} \
		${CLICKHOUSE_PASSWORD:+--password "$CLICKHOUSE_PASSWORD"} "$@"
}

alive() {
	curl -fsS --max-time 2 "http://127.0.0.1:$HTTP_PORT/ping" >/dev/null 2>&1
}

write_config() {
	mkdir -p "$DIR/data" "$DIR/tmp" "$DIR/user_files" "$DIR/format_schemas" "$DIR/log"
	cat >"$DIR/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <logger>
        <level>warning</level>
        <log>$DIR/log/server.log</log>
        <errorlog>$DIR/log/server.err.log</errorlog>
        <size>100M</size>
        <count>2</count>
    </logger>
    <http_port>$HTTP_PORT</http_port>
    <tcp_port>$TCP_PORT</tcp_port>
    <listen_host>127.0.0.1</listen_host>
    <max_connections>256</max_connections>
    <keep_alive_timeout>30</keep_alive_timeout>
    <max_concurrent_queries>100</max_concurrent_queries>
    <uncompressed_cache_size>268435456</uncompressed_cache_size>
    <mark_cache_size>268435456</mark_cache_size>
    <path>$DIR/data/</path>
    <tmp_path>$DIR/tmp/</tmp_path>
    <user_files_path>$DIR/user_files/</user_files_path>
    <format_schema_path>$DIR/format_schemas/</format_schema_path>
    <users_config>$DIR/users.xml</users_config>
    <default_profile>default</default_profile>
    <default_database>default</default_database>
    <timezone>UTC</timezone>
    <mlock_executable>false</mlock_executable>
    <builtin_dictionaries_reload_interval>3600</builtin_dictionaries_reload_interval>
    <max_session_timeout>3600</max_session_timeout>
    <default_session_timeout>60</default_session_timeout>
</yandex>
XML
	cat >"$DIR/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
    <profiles>
        <default>
            <max_memory_usage>4000000000</max_memory_usage>
            <load_balancing>random</load_balancing>
        </default>
        <readonly>
            <readonly>1</readonly>
        </readonly>
    </profiles>
    <users>
        <default>
            <password></password>
            <networks><ip>127.0.0.1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
        </default>
        <!-- The two users of the hardened audit anchors
             (sql/clickhouse/hardened/, test/suites/audit.sh): the exporter
             may use the export database only; the auditor may only read
             the anchors' own database. -->
        <sandbox_exporter>
            <password>exporter</password>
            <networks><ip>127.0.0.1</ip></networks>
            <profile>default</profile>
            <quota>default</quota>
            <allow_databases><database>$DB</database></allow_databases>
        </sandbox_exporter>
        <sandbox_auditor>
            <password>auditor</password>
            <networks><ip>127.0.0.1</ip></networks>
            <profile>readonly</profile>
            <quota>default</quota>
            <allow_databases><database>sandbox_audit</database></allow_databases>
        </sandbox_auditor>
    </users>
    <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors><result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
	if [ "$(id -u)" -eq 0 ]; then chown -R "$RUN_AS": "$DIR"; fi
}

launch() {
	as_ch clickhouse-server --config-file="$DIR/config.xml" \
		--pid-file="$DIR/server.pid" --daemon >/dev/null 2>&1 || true
	for _ in $(seq 1 150); do
		if alive; then return 0; fi
		sleep 0.2
	done
	echo "clickhouse: server did not start on port $HTTP_PORT; log:" >&2
	tail -n 30 "$DIR/log/server.err.log" >&2 2>/dev/null || true
	return 1
}

terminate() {		# signal
	local pid
	[ -f "$DIR/server.pid" ] || return 0
	pid=$(cat "$DIR/server.pid" 2>/dev/null || true)
	[ -n "$pid" ] || return 0
	kill "-$1" "$pid" 2>/dev/null || return 0
	for _ in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || { rm -f "$DIR/server.pid"; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	sleep 0.2
	rm -f "$DIR/server.pid"
}

create_tables() {
	local f
	for f in "$top"/sql/clickhouse/*.sql; do
		client --database "$DB" --multiquery <"$f"
	done
}

port_busy() {		# port
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

case "${1:-}" in
start)
	terminate TERM
	# Never talk to somebody else's server on our ports.
	for p in "$HTTP_PORT" "$TCP_PORT"; do
		if port_busy "$p"; then
			echo "clickhouse: port $p on 127.0.0.1 is in use by another process" >&2
			exit 1
		fi
	done
	rm -rf "$DIR"
	write_config
	launch
	create_tables
	echo "clickhouse: running on http://127.0.0.1:$HTTP_PORT (tcp $TCP_PORT), data in $DIR"
	;;
restart)
	terminate TERM
	launch
	;;
kill)
	terminate KILL
	;;
stop)
	terminate TERM
	rm -rf "$DIR"
	;;
env)
	echo "export CLICKHOUSE_URL=http://127.0.0.1:$HTTP_PORT CLICKHOUSE_HTTP_PORT=$HTTP_PORT CLICKHOUSE_TCP_PORT=$TCP_PORT CLICKHOUSE_DIR=$DIR"
	;;
query)
	shift
	client --database "$DB" --query "$*"
	;;
status)
	alive
	;;
*)
	echo "usage: $0 start|stop|kill|restart|env|query SQL|status" >&2
	exit 2
	;;
esac
