#!/usr/bin/env bash
# newserver: servers set up the way a new operator sets one up (issue 27):
# the README's postgresql.conf block as it is written, on a server that
# listens only on a Unix socket (listen_addresses = '', as
# scripts/cluster.sh starts them), with neither cron.host nor
# sandbox.jail_path in its configuration (cluster 1).
#
# It runs the jail of its own bindir, not one fixed at compile time
# (checked against this build's bindir: with the system's PostgreSQL the
# two are the same place, and only a relocated copy, as
# scripts/private-pg.sh makes, tells them apart).  The warm pools are off
# (they cost memory and change nothing here).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

# The README's postgresql.conf block, for this suite's database.
readme_conf() {
	awk '/^`postgresql.conf`:/ { on = 1; next } on && /^```/ { if (b) exit; b = 1; next } b { print }' \
		"$top/README.md" | sed "s/'app_db'/'$DB'/g"
}

# cluster.sh without its cron.host and sandbox.jail_path lines, the
# README's block after its own settings (the later line wins).
start_new_server() {		# N conf
	SANDBOX_CRON_HOST='' SANDBOX_JAIL_PATH='' SANDBOX_EXTRA_CONF="$2
sandbox.warm_python = 0
sandbox.warm_node = 0" cluster_sh "$1" start >/dev/null
}

t_start() {
	local conf
	conf=$(readme_conf)
	check "the README has a postgresql.conf block" 1 "$(grep -c '^shared_preload_libraries = ' <<<"$conf")"
	if ! start_new_server 1 "$conf"; then
		nok "the server starts"
		finish_suite
	fi
	use_cluster 1
	check "server 1: no sandbox.jail_path in its configuration, no TCP" "|" \
		"$(grep -s '^sandbox.jail_path' "$CLUSTER_DIR/data/postgresql.conf")|$(q -c "SELECT current_setting('listen_addresses')")"
}

# Item 10: sandbox.jail_path defaults to the jail beside the server's own
# postgres, and the local runner's launcher runs that file.
t_jail_path() {
	local A inv pid
	use_cluster 1
	check "SHOW sandbox.jail_path: this build's bindir" "$PGBIN/sandbox-jail" "$(q -c "SHOW sandbox.jail_path")"
	A=$(new_tenant 10)
	inv=$(run "$A" shell 'echo jailed' none)
	check "a run succeeds" "succeeded|jailed" "$(field "$inv" state)|$(output "$inv")"
	pid=$(pgrep -o -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_runner/jail.sock")
	check "... through a launcher that is the bindir's sandbox-jail" "$(readlink -f "$PGBIN/sandbox-jail")" \
		"$([ -n "$pid" ] && readlink "/proc/$pid/exe")"
}

trap 'stop_cluster 1' EXIT
run_tests t_start t_jail_path
finish_suite
