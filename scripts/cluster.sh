#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for the demo and the tests.
#
#   scripts/cluster.sh start   initdb (if needed) and start; create the test
#                              database with pgtap, pg_cron and sandbox_ext
#                              (SANDBOX_DB_EXTENSIONS="" : sandbox_ext alone)
#                              (at SANDBOX_EXT_VERSION when set, else the
#                              default version; with SANDBOX_NO_DB=1 the
#                              database is not created: a restore target)
#                              SANDBOX_CRON_HOST, SANDBOX_JAIL_PATH: the
#                              server's cron.host and sandbox.jail_path
#                              (default: its socket directory and this
#                              build's jail; set empty, no line: the
#                              server's own default)
#   scripts/cluster.sh stop    stop it and remove its directory
#   scripts/cluster.sh env     print the environment to reach it (eval-able),
#                              and the ids the demo made there; without
#                              SANDBOX_CLUSTER_DIR, the running cluster of the
#                              tests' or the demo's default directory
#   scripts/cluster.sh work-dir print the supervisor's work directory
#
# The server runs as the postgres user (PostgreSQL refuses root), listens
# only on a Unix socket inside its own directory, and never touches
# Debian's default cluster or /var/run/postgresql.
set -euo pipefail

PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_cluster}
PORT=${SANDBOX_PGPORT:-55432}
DB=${SANDBOX_DB:-sandbox_test}
PGUSER_OS=postgres

as_pg() {
	if [ "$(id -un)" = "$PGUSER_OS" ]; then
		"$@"
	elif [ "$(id -u)" -eq 0 ]; then
		runuser -u "$PGUSER_OS" -- "$@"
	else
		sudo -u "$PGUSER_OS" -- "$@"
	fi
}

psql_db() {
	as_pg "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" "$@"
}

start() {
	if [ -f "$CLUSTER_DIR/data/postmaster.pid" ]; then
		stop
	fi
	if [ "$(id -u)" -eq 0 ]; then
		rm -rf "$CLUSTER_DIR"
		install -d -o "$PGUSER_OS" -g "$PGUSER_OS" -m 0700 "$CLUSTER_DIR"
	else
		sudo rm -rf "$CLUSTER_DIR"
		sudo install -d -o "$PGUSER_OS" -g "$PGUSER_OS" -m 0700 "$CLUSTER_DIR"
	fi
	as_pg "$PGBIN/initdb" -D "$CLUSTER_DIR/data" -U postgres -A trust \
		--no-sync -E UTF8 --locale=C.UTF-8 >"$CLUSTER_DIR/initdb.log"
	local cron_host=${SANDBOX_CRON_HOST-$CLUSTER_DIR} jail_path=${SANDBOX_JAIL_PATH-$PGBIN/sandbox-jail}
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$CLUSTER_DIR'
port = $PORT
fsync = off
max_connections = 100
shared_preload_libraries = 'pg_cron,sandbox_ext'
cron.database_name = '$DB'
wal_level = logical
max_replication_slots = 8
max_wal_senders = 8
sandbox.database = '$DB'
log_min_messages = warning
log_line_prefix = '%m [%p] %b '
CONF
	# (pg_cron's jobs connect through libpq; this cluster has only a Unix
	# socket, where sandbox_ext points them when cron.host is not set)
	[ -z "$cron_host" ] || echo "cron.host = '$cron_host'" >>"$CLUSTER_DIR/data/postgresql.conf"
	[ -z "$jail_path" ] || echo "sandbox.jail_path = '$jail_path'" >>"$CLUSTER_DIR/data/postgresql.conf"
	if [ -n "${SANDBOX_EXTRA_CONF:-}" ]; then
		printf '%s\n' "$SANDBOX_EXTRA_CONF" >>"$CLUSTER_DIR/data/postgresql.conf"
	fi
	# A previous cluster on the same port may still be releasing it.
	if ! as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null; then
		tail -n 5 "$CLUSTER_DIR/server.log" >&2
		sleep 2
		as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
	fi
	if [ "${SANDBOX_NO_DB:-}" = 1 ]; then
		echo "cluster: running on socket $CLUSTER_DIR port $PORT, no database $DB yet"
		return
	fi
	psql_db -d postgres -c "CREATE DATABASE $DB"
	# SANDBOX_DB_EXTENSIONS: what the database gets before sandbox_ext
	# (default pg_cron pgtap; the cgroup-v2 guest, where every statement
	# runs emulated, takes none)
	local e
	for e in ${SANDBOX_DB_EXTENSIONS-pg_cron pgtap}; do
		psql_db -d "$DB" -c "CREATE EXTENSION $e"
	done
	psql_db -d "$DB" -c "CREATE EXTENSION sandbox_ext${SANDBOX_EXT_VERSION:+ VERSION '$SANDBOX_EXT_VERSION'}"
	echo "export PGHOST=$CLUSTER_DIR PGPORT=$PORT PGDATABASE=$DB PGUSER=postgres" |
		as_pg tee "$CLUSTER_DIR/cluster.env" >/dev/null
	echo "cluster: running on socket $CLUSTER_DIR port $PORT, database $DB"
}

# The environment of a running cluster: where it listens and, when the
# demo made them, its tenant's ids.
print_env() {
	local dir
	if [ -n "${SANDBOX_CLUSTER_DIR:-}" ]; then
		set -- "$CLUSTER_DIR"
	else
		set -- /tmp/sandbox_ext_cluster /tmp/sandbox_ext_demo
	fi
	for dir in "$@"; do
		if as_pg test -f "$dir/data/postmaster.pid" && as_pg test -f "$dir/cluster.env"; then
			as_pg cat "$dir/cluster.env"
			if as_pg test -f "$dir/demo.env"; then as_pg cat "$dir/demo.env"; fi
			return 0
		fi
	done
	echo "cluster.sh: no running cluster in $*" >&2
	echo "(KEEP_CLUSTER=1 make demo leaves the demo's running; SANDBOX_CLUSTER_DIR names another)" >&2
	return 1
}

# The supervisor's default work directory for this cluster (the server's
# sandbox.work_dir is left at its default: /var/lib/sandbox_ext/<system id>).
work_dir() {
	local id
	id=$(as_pg "$PGBIN/pg_controldata" "$CLUSTER_DIR/data" 2>/dev/null |
		sed -n 's/^Database system identifier: *\([0-9][0-9]*\)$/\1/p')
	[ -n "$id" ] && echo "${SANDBOX_WORK_BASE:-/var/lib/sandbox_ext}/$id"
}

stop() {
	local wd
	if [ -f "$CLUSTER_DIR/data/postmaster.pid" ]; then
		as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w -t 60 stop >/dev/null || \
			as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" -m immediate -w stop >/dev/null || true
	fi
	if [ "${KEEP_CLUSTER:-}" != 1 ]; then
		wd=$(work_dir || true)
		if [ "$(id -u)" -eq 0 ]; then rm -rf "$CLUSTER_DIR" ${wd:+"$wd"}; else sudo rm -rf "$CLUSTER_DIR" ${wd:+"$wd"}; fi
	fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) print_env ;;
work-dir) work_dir ;;
*)
	echo "usage: $0 start|stop|env|work-dir" >&2
	exit 2
	;;
esac
