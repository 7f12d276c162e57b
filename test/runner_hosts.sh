# shellcheck shell=bash
# test/runner_hosts.sh: runner hosts on this machine for the runners suite
# and bench/runners (sourced, not run; after test/lib.sh or bench/lib.sh,
# with PGBIN, CLUSTER_DIR, PORT, DB, as_pg and q set).
#
# A runner host is a network namespace of its own, sbxr-<port>-<n>, joined
# to the root namespace (where PostgreSQL runs) by one veth pair:
#
#   root side  sr<port>h<n>  10.<port/256>.<port%256>.<4n+1>/30  PostgreSQL listens here
#   host side  sr<port>n<n>  10.<port/256>.<port%256>.<4n+2>/30  (in the namespace)
#
# The namespace has lo and that veth, and no route but the /30: it reaches
# the primary's one address and nothing else (ip_forward stays as it is;
# nothing is routed).  Names and addresses come from SANDBOX_PGPORT, so two
# runs on different ports never collide.
#
# The primary speaks TLS only to them: a CA and a server certificate (IP
# SANs of the root-side addresses) made here with openssl; pg_hba lets each
# host's role (sbxr_<port>_<n>, LOGIN, SCRAM, member of agent_runner) in
# from its own address only, over hostssl; everything else from those
# addresses is rejected.  Each runner's conninfo has sslmode=verify-full.
#
# A runner is sandbox-runner --config <its file>, entered into its
# namespace with nsenter --net (so it keeps the host's mounts, /sys/fs/cgroup
# among them), as the postgres OS user (the owner of the jail's delegated
# cgroups here; on a real host, the sandbox-runner user), with a work
# directory on a tmpfs of its own and a run dir of its own.
#
#   rh_setup N             make hosts 1..N and restart the primary listening on them
#   rh_cleanup             undo all of it (runners, namespaces, mounts, pg_hba,
#                          the settings, the roles); safe to call twice, and after
#                          a setup that failed half-way
#   rh_start H [SLOTS]     start the runner of host H (its own config, log, work dir;
#                          as root for the hosts RH_ROOT_HOSTS lists, else postgres;
#                          RH_JAIL_LAUNCHER=off: one-shot jails instead of the launcher)

#                          RH_CONF_EXTRA: more lines for its configuration)
#   rh_stop H | rh_kill H  SIGTERM (waited for, bounded) | SIGKILL
#   rh_pid H               the runner's pid (empty when none)
#   rh_cut H | rh_mend H   the host's link down | up (on the root side)
#   rh_psql H [psql args]  psql as host H's role over its link (TLS, verify-full)
#   rh_name H | rh_role H | rh_addr H | rh_ns H
#   rh_registered H        the runner's id once it registered (agent.runners)

RH_A=$((PORT / 256))
RH_B=$((PORT % 256))
RH_DIR=${RH_DIR:-/tmp/sbxr_$PORT}
RH_N=0
# The daemon (fault injection may point this at another build of it, the
# ASan one too: rh_pid finds it by its file name).
RH_RUNNER=${RH_RUNNER:-$PGBIN/sandbox-runner}

rh_ns() { echo "sbxr-$PORT-$1"; }
rh_role() { echo "sbxr_${PORT}_$1"; }
rh_name() { echo "h$PORT-$1"; }
rh_addr() { echo "10.$RH_A.$RH_B.$((4 * $1 + 1))"; }	# the primary's, on host H's link
rh_host_addr() { echo "10.$RH_A.$RH_B.$((4 * $1 + 2))"; }
rh_veth() { echo "sr${PORT}h$1"; }

pg_ctl() { as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" "$@"; }

rh_conninfo() {
	echo "host=$(rh_addr "$1") port=$PORT dbname=$DB user=$(rh_role "$1") sslmode=verify-full sslrootcert=$RH_DIR/ca.crt passfile=$RH_DIR/h$1/pgpass"
}

# The OS user host H's runner runs as: postgres, or root for the hosts
# RH_ROOT_HOSTS lists (" 1 2 "): the gvisor class needs a root runner.
rh_user() { if [[ " ${RH_ROOT_HOSTS:-} " == *" $1 "* ]]; then echo root; else echo postgres; fi; }

rh_in() {			# host cmd...: run in host H's namespace as rh_user H
	local h=$1 u
	shift
	u=$(rh_user "$h")
	nsenter --net="/run/netns/$(rh_ns "$h")" -- setpriv --reuid="$u" --regid="$u" --init-groups -- \
		env HOME="$RH_DIR/h$h" "$@"
}

rh_psql() {
	local h=$1
	shift
	rh_in "$h" "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$(rh_conninfo "$h") application_name=sbxr-psql" "$@"
}

# Wait for the primary (after a restart) and its supervisor.
rh_wait_primary() {
	wait_for 60 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
}

rh_restart_primary() {			# mode
	pg_ctl -m "${1:-fast}" -w -t 60 -l "$CLUSTER_DIR/server.log" restart >/dev/null && rh_wait_primary
}

rh_setup() {
	local n=$1 h ns veth pw listen="" sans=""
	RH_N=$n
	for h in $(seq 1 "$n"); do
		if mountpoint -q "$RH_DIR/h$h/work" 2>/dev/null; then umount -l "$RH_DIR/h$h/work"; fi
	done
	rm -rf "$RH_DIR"
	mkdir -p "$RH_DIR" && chmod 0755 "$RH_DIR"
	for h in $(seq 1 "$n"); do
		ns=$(rh_ns "$h")
		veth=$(rh_veth "$h")
		ip netns del "$ns" 2>/dev/null
		ip link del "$veth" 2>/dev/null
		ip netns add "$ns" || return 1
		ip link add "$veth" type veth peer name "sr${PORT}n$h" || return 1
		ip link set "sr${PORT}n$h" netns "$ns" || return 1
		ip addr add "$(rh_addr "$h")/30" dev "$veth" || return 1
		ip link set "$veth" up || return 1
		ip -n "$ns" addr add "$(rh_host_addr "$h")/30" dev "sr${PORT}n$h" || return 1
		ip -n "$ns" link set lo up || return 1
		ip -n "$ns" link set "sr${PORT}n$h" up || return 1
		listen+="${listen:+,}$(rh_addr "$h")"
		sans+="${sans:+,}IP:$(rh_addr "$h")"
	done

	# The test CA and the primary's certificate.
	(
		cd "$RH_DIR" || exit 1
		openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
			-keyout ca.key -out ca.crt -days 2 -subj "/CN=sandbox_ext runners test CA $PORT" &&
			openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
				-keyout server.key -out server.csr -subj "/CN=sandbox_ext primary $PORT" &&
			printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
				"$sans" >server.ext &&
			openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
				-out server.crt -days 2 -extfile server.ext
	) >"$RH_DIR/openssl.log" 2>&1 || { cat "$RH_DIR/openssl.log"; return 1; }
	chown postgres: "$RH_DIR/server.key" "$RH_DIR/server.crt" "$RH_DIR/ca.crt"
	chmod 0600 "$RH_DIR/server.key" "$RH_DIR/ca.key"

	# A role and a password per host; pg_hba: that role, from that address,
	# over TLS, with SCRAM; nothing else from any of those addresses.
	cp "$CLUSTER_DIR/data/pg_hba.conf" "$RH_DIR/pg_hba.conf.orig"
	{
		echo "# runner hosts of the runners suite (test/runner_hosts.sh)"
		for h in $(seq 1 "$n"); do
			echo "hostssl $DB $(rh_role "$h") $(rh_host_addr "$h")/32 scram-sha-256"
		done
		echo "host all all 10.$RH_A.$RH_B.0/24 reject"
		cat "$RH_DIR/pg_hba.conf.orig"
	} >"$RH_DIR/pg_hba.conf"
	install -o postgres -g postgres -m 0600 "$RH_DIR/pg_hba.conf" "$CLUSTER_DIR/data/pg_hba.conf"
	for h in $(seq 1 "$n"); do
		mkdir -p "$RH_DIR/h$h/work" "$RH_DIR/h$h/run"
		mount -t tmpfs -o size=256m,mode=0700 "sbxr_${PORT}_$h" "$RH_DIR/h$h/work" || return 1
		pw=$(openssl rand -hex 24)
		q -c "SET client_min_messages = warning" -c "DROP ROLE IF EXISTS $(rh_role "$h")" -c "CREATE ROLE $(rh_role "$h") LOGIN PASSWORD '$pw'" \
			-c "GRANT agent_runner TO $(rh_role "$h")" >/dev/null || return 1
		# (a previous run on this cluster removed its runner at the end: admit it again)
		q -c "SELECT agent.drain_runner(name, true) FROM agent.runners WHERE login_role = '$(rh_role "$h")' AND state = 'removed'" \
			>/dev/null || return 1
		echo "$(rh_addr "$h"):$PORT:$DB:$(rh_role "$h"):$pw" >"$RH_DIR/h$h/pgpass"
		chmod 0600 "$RH_DIR/h$h/pgpass"
		chown -R postgres: "$RH_DIR/h$h"
		chmod 0700 "$RH_DIR/h$h/run"
	done
	q -c "ALTER SYSTEM SET listen_addresses = '$listen'" \
		-c "ALTER SYSTEM SET ssl = on" \
		-c "ALTER SYSTEM SET ssl_cert_file = '$RH_DIR/server.crt'" \
		-c "ALTER SYSTEM SET ssl_key_file = '$RH_DIR/server.key'" \
		-c "ALTER SYSTEM SET password_encryption = 'scram-sha-256'" >/dev/null || return 1
	rh_restart_primary fast
}

rh_conf() {			# host slots: the runner's configuration file
	local h=$1
	cat >"$RH_DIR/h$h/runner.conf" <<CONF
# runner host $h of the runners suite (test/runner_hosts.sh)
conninfo = '$(rh_conninfo "$h") application_name=sandbox-runner-$(rh_name "$h")'
name = '$(rh_name "$h")'
slots = ${2:-2}
work_dir = '$RH_DIR/h$h/work/w'
run_dir = '$RH_DIR/h$h/run'
protect = '$CLUSTER_DIR/data'
jail_path = '$PGBIN/sandbox-jail'
jail_launcher = ${RH_JAIL_LAUNCHER:-on}

${RH_CONF_EXTRA:-}
CONF
	chown postgres: "$RH_DIR/h$h/runner.conf"
	chmod 0600 "$RH_DIR/h$h/runner.conf"
}

rh_pid() { pgrep -o -u "$(rh_user "$1")" -f -- "$(basename "$RH_RUNNER") --config $RH_DIR/h$1/runner.conf\$"; }

rh_start() {			# host [slots]
	local h=$1
	[ -n "$(rh_pid "$h")" ] && return 0
	rh_conf "$h" "${2:-2}"
	rh_in "$h" "$RH_RUNNER" --config "$RH_DIR/h$h/runner.conf" \
		>>"$RH_DIR/h$h/runner.log" 2>&1 </dev/null &
	disown
	wait_for 10 '[ -n "$(rh_pid '"$h"')" ]'
}

rh_registered() {
	q -c "SELECT id FROM agent.runners WHERE login_role = '$(rh_role "$1")' AND state <> 'removed'"
}

rh_stop() {
	local pid
	pid=$(rh_pid "$1")
	[ -n "$pid" ] || return 0
	kill -TERM "$pid"
	wait_for 30 '! kill -0 '"$pid"
}

rh_kill() {
	local pid
	pid=$(rh_pid "$1")
	[ -n "$pid" ] && kill -KILL "$pid"
	[ -z "$pid" ] || wait_for 10 '! kill -0 '"$pid"
}

rh_cut() { ip link set "$(rh_veth "$1")" down; }
rh_mend() { ip link set "$(rh_veth "$1")" up; }

rh_cleanup() {
	local h ns changed=false
	for h in $(seq 1 "$RH_N"); do
		[ -n "$(rh_pid "$h")" ] && rh_stop "$h"
		[ -n "$(rh_pid "$h")" ] && rh_kill "$h"
	done
	# Launchers that outlived their runner (one killed with -9), by pid.
	for pid in $(pgrep -f -- "--serve $RH_DIR/"); do kill -KILL "$pid" 2>/dev/null; done
	for h in $(seq 1 "$RH_N"); do
		q -c "SELECT agent.remove_runner(name) FROM agent.runners WHERE login_role = '$(rh_role "$h")' AND state <> 'removed'" \
			>/dev/null 2>&1
	done
	if [ -f "$RH_DIR/pg_hba.conf.orig" ]; then
		install -o postgres -g postgres -m 0600 "$RH_DIR/pg_hba.conf.orig" "$CLUSTER_DIR/data/pg_hba.conf"
		changed=true
	fi
	if [ -n "$(q -c "SELECT 1 FROM pg_file_settings WHERE name IN ('listen_addresses', 'ssl') AND sourcefile LIKE '%postgresql.auto.conf'" 2>/dev/null)" ]; then
		q -c "ALTER SYSTEM RESET listen_addresses" -c "ALTER SYSTEM RESET ssl" \
			-c "ALTER SYSTEM RESET ssl_cert_file" -c "ALTER SYSTEM RESET ssl_key_file" \
			-c "ALTER SYSTEM RESET password_encryption" >/dev/null 2>&1
		changed=true
	fi
	# (the primary stops listening on the addresses before they go)
	if $changed; then rh_restart_primary fast; fi
	for h in $(seq 1 "$RH_N"); do
		q -c "DROP ROLE IF EXISTS $(rh_role "$h")" >/dev/null 2>&1
		ip link del "$(rh_veth "$h")" 2>/dev/null
		ip netns del "$(rh_ns "$h")" 2>/dev/null
		if mountpoint -q "$RH_DIR/h$h/work" 2>/dev/null; then umount -l "$RH_DIR/h$h/work"; fi
	done
	rm -rf "$RH_DIR"
	RH_N=0
}
