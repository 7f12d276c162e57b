#!/usr/bin/env bash
# Runner hosts (issue 13) through real sandbox-runner daemons, on the
# cluster test/run.sh started: three runner hosts (network namespaces on
# this machine joined to the primary by veth pairs, TLS with a CA made
# here, one SCRAM role each; test/runner_hosts.sh) and a fourth host with
# no daemon, for the attacker.  The in-database supervisor's own runner is
# paused (sandbox.max_concurrent_runs = 0), so every run goes to a runner
# host.
#
#   - the hosts: each runner logged in over TLS as its own role from its
#     own address only; plain text, another's role, no password and a
#     server certificate of another CA are refused; nothing routes from a
#     host but to the primary's address on its link;
#   - runs spread over the three;
#   - kill -9 of a runner mid-run: the run ends after its lease, a failure
#     of ours (refunded), and nothing of it is left on its host once the
#     runner is back;
#   - a runner's link cut mid-run until its lease expires: its sandbox
#     killed before the database's deadline for the lease while the runner
#     still waits in a step on the dead link, refunded, nothing it sends
#     once the link is back is recorded; the same at the default lease with
#     the runner held in a large finish on a link slowed to a crawl, then
#     cut (test/tools/fence_order.c observes which came first);
#   - an immediate restart of PostgreSQL: the runners reconnect, their runs
#     in flight end as their payloads did, new runs go everywhere;
#   - session affinity, and the rebuild on another runner once the
#     session's runner is gone;
#   - a runner role from the attacker's side: every table, view, sequence
#     and function of schema agent (from the catalog), then the steps with
#     a wrong token, another runner's id, another runner's run and an
#     expired lease.
#
# After every test: balance = ledger sum for every org, no double charge,
# nothing in flight, every audit chain verifies (check_invariants).  Every
# wait is a bounded poll for a condition; nothing is timed.  T=REGEX runs
# only the matching tests.  Ends with "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
# shellcheck source=../runner_hosts.sh
. "$top/test/runner_hosts.sh"

# A lease short enough that the tests that wait for one stay short; the
# runners heartbeat every third of it.
LEASE=9

cleanup() {
	rh_cleanup
	q -c "ALTER SYSTEM RESET sandbox.max_concurrent_runs" -c "SELECT pg_reload_conf()" >/dev/null 2>&1
	q -c "UPDATE agent.settings SET value = '30' WHERE key = 'runner_lease_seconds'" >/dev/null 2>&1
	q -c "UPDATE agent.settings SET value = '60' WHERE key = 'runner_grace_seconds'" >/dev/null 2>&1
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
	nok "the runners suite makes network namespaces: it runs as root"
	finish_suite
fi
wait_for 30 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
# (what earlier suites left running ends first: the invariants count every run)
wait_for 180 '[ "$(q -c "SELECT count(*) FROM agent.invocations WHERE state IN ('"'provisioning', 'running'"')")" = 0 ]' ||
	echo "# (runs of earlier suites still in flight: $(q -c "SELECT count(*) FROM agent.invocations WHERE state IN ('provisioning', 'running')"))"
if ! rh_setup 4 >"$RH_DIR.setup.log" 2>&1; then
	nok "set up the runner hosts (namespaces, veths, TLS, roles)" "$(tail -n 5 "$RH_DIR.setup.log")"
	rm -f "$RH_DIR.setup.log"
	finish_suite
fi
rm -f "$RH_DIR.setup.log"
if ! cc -O2 -Wall -Werror -o "$RH_DIR/fence_order" "$top/test/tools/fence_order.c" \
	-I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq; then
	nok "build the fence_order tool"
	finish_suite
fi
q -c "ALTER SYSTEM SET sandbox.max_concurrent_runs = 0" -c "SELECT pg_reload_conf()" >/dev/null
setting runner_lease_seconds "$LEASE"
for h in 1 2 3; do rh_start "$h"; done
wait_for 30 '[ "$(q -c "SELECT count(*) FROM agent.runner_status WHERE live AND name LIKE '"'h$PORT-%'"'")" = 3 ]'

# ---- helpers ---------------------------------------------------------------------
# The host (1..4) whose runner holds or held an invocation.
host_of() {
	q -c "SELECT substring(r.login_role from '_([0-9]+)\$') FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id WHERE i.id = '$1'"
}
live() { q -c "SELECT live FROM agent.runner_status WHERE name = '$(rh_name "$1")'"; }
incarnation() { q -c "SELECT incarnation FROM agent.runners WHERE name = '$(rh_name "$1")'"; }
drain() { q -c "SELECT agent.drain_runner('$(rh_name "$1")')" >/dev/null; }
resume() { q -c "SELECT agent.drain_runner('$(rh_name "$1")', true)" >/dev/null; }
events() { q -c "SELECT coalesce(string_agg(event_type, ',' ORDER BY id), '') FROM agent.audit_events WHERE invocation_id = '$1' AND event_type IN ('credits.charged', 'credits.refunded', 'invocation.provision_failed')"; }
# A payload that can be found on the host: "sleep <this number>" (from the
# port, like every name here: a runners suite on another port never has
# the same).
mark=$((PORT * 1000 + $$ % 100 * 10))
next_mark() { mark=$((mark + 1)); }
sandbox_alive() { pgrep -f "^sleep $1\$" >/dev/null; }
# "SQLSTATE message" of the error a statement raises as host H's runner role
# ("no error" if none).
rh_error() {
	local err
	err=$(printf '\\set VERBOSITY verbose\n%s\n' "$2" | rh_psql "$1" -f - 2>&1 >/dev/null |
		sed -n 's/^.*ERROR:  \([0-9A-Z]\{5\}\): \(.*\)$/\1 \2/p' | head -n 1)
	echo "${err:-no error}"
}
# A connection attempt from host H with CONNINFO: "ok", or libpq's error.
rh_try() {
	local out
	if out=$(rh_in "$1" "$PGBIN/psql" -X -At -d "$2" -c "SELECT 'ok'" 2>&1); then echo "$out"; else
		sed -n 's/^psql: error: //p' <<<"$out" | head -n 1
	fi
}
# Which came first, the end of the sandbox "sleep MARK" or the database's
# deadline for INV's lease, observed from outside (test/tools/fence_order.c:
# a pidfd of the sandbox's process and one connection, no clock compared
# but the database's): "killed before the deadline", "alive after the
# deadline", or "killed, seen after the deadline" (neither order seen).
fence_order() {		# inv mark seconds
	local pid
	pid=$(pgrep -o -f "^sleep $2\$")
	if [ -z "$pid" ]; then
		echo "no sandbox to watch"
		return
	fi
	as_pg "$RH_DIR/fence_order" "host=$CLUSTER_DIR port=$PORT user=postgres dbname=$DB" "$1" "$pid" "$3"
}
# Host H's runner log from line N on: what it says first of INV's end.  The
# fence's thread logs its kill ("the lease of invocation INV could not be
# renewed in time"); the run loop logs the run dropped ("invocation INV is
# not ours any more") once it gets control back from the call it waited in.
fence_log() {		# host line inv
	tail -n +"$2" "$RH_DIR/h$1/runner.log" |
		grep -oE "lease of invocation $3 could not be renewed in time|invocation $3 is not ours any more" |
		head -n 2 | sed "s/$3/INV/" | tr '\n' '|'
}
log_lines() { wc -l <"$RH_DIR/h$1/runner.log"; }
last_heartbeat() { q -c "SELECT last_heartbeat FROM agent.runners WHERE name = '$(rh_name "$1")'"; }
# Wait for host H's next heartbeat to be recorded.
next_heartbeat() {
	local before
	before=$(last_heartbeat "$1")
	wait_for 40 '[ "$(last_heartbeat '"$1"')" != "'"$before"'" ]'
}

# A tenant that may run eight at once (the default per-org limit is two).
wide_tenant() {
	local t
	t=$(new_tenant 1000)
	q -c "SELECT agent.set_org_limits('${t%% *}', 8, NULL)" >/dev/null
	echo "$t"
}

# Six runs of TENANT that never end on their own (wall time 300 s, past the 300 s the check waits), approved
# in one transaction: with two slots a runner, all six run at once only when
# each of the three runners holds two.  Prints their ids.
hold_all_slots() {
	local org ws agent
	read -r org ws agent _ <<<"$1"
	tq "$org" "$ws" "SELECT string_agg(r.invocation_id::text, ' ' ORDER BY n) FROM generate_series(1, 6) n, LATERAL agent.request_execution('$ws', '$agent', NULL, 'shell', 'echo held ' || n || '; sleep 290', 'requester', NULL, NULL, 300) r, LATERAL agent.approve(r.approval_id, 'approver') a;" | tail -n 1
}
# Check that the held runs are two on each runner, then cancel them.
check_held_spread() {		# tenant label ids...
	local t=$1 label=$2 org ws inv n=0 list
	shift 2
	read -r org ws _ <<<"$t"
	list=$(IFS=,; echo "$*")
	wait_for 300 '[ "$(q -c "SELECT count(*) FROM agent.invocations WHERE id = ANY ('"'{$list}'"') AND state = '"'running'"'")" = 6 ]'
	check "$label: six runs at once, two on each of the three runners" "2|2|2" \
		"$(q -c "SELECT string_agg(c::text, '|' ORDER BY c) FROM (SELECT count(*) c FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id WHERE i.id = ANY ('{$list}') AND i.state = 'running' AND r.name LIKE 'h$PORT-%' GROUP BY r.id) x")"
	for inv in "$@"; do tq "$org" "$ws" "SELECT agent.cancel('$inv', 'requester');" >/dev/null; done
	for inv in "$@"; do [ "$(await "$t" "$inv" 60)" = cancelled ] && n=$((n + 1)); done
	check "... cancelled, each charged (the payload's doing)" "6|12" \
		"$n|$(q -c "SELECT sum(credits_charged) FROM agent.invocations WHERE id = ANY ('{$list}')")"
}

# ---- the hosts -------------------------------------------------------------------
t_hosts() {
	local h got
	for h in 1 2 3; do
		check "runner $h logged in as its own role, from its own address, over TLS" \
			"$(rh_role "$h")|$(rh_host_addr "$h")|true" \
			"$(q -c "SELECT a.usename || '|' || host(a.client_addr) || '|' || s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'sandbox-runner-$(rh_name "$h")'")"
	done
	check "three runner hosts live in agent.runner_status, and the local runner" "3|1" \
		"$(q -c "SELECT count(*) FILTER (WHERE name LIKE 'h$PORT-%' AND live) || '|' || count(*) FILTER (WHERE name = 'local') FROM agent.runner_status")"

	got=$(rh_try 1 "host=$(rh_addr 1) port=$PORT dbname=$DB user=$(rh_role 1) sslmode=disable passfile=$RH_DIR/h1/pgpass")
	check "a plain-text connection of a runner's own role is refused" t \
		"$([[ $got == *"pg_hba.conf rejects connection"*"no encryption"* ]] && echo t || echo "$got")"
	cp "$RH_DIR/h2/pgpass" "$RH_DIR/h1/pgpass2" && sed -i "s/^$(rh_addr 2):/$(rh_addr 1):/" "$RH_DIR/h1/pgpass2"
	chown postgres: "$RH_DIR/h1/pgpass2"
	got=$(rh_try 1 "host=$(rh_addr 1) port=$PORT dbname=$DB user=$(rh_role 2) sslmode=verify-full sslrootcert=$RH_DIR/ca.crt passfile=$RH_DIR/h1/pgpass2")
	check "another host's role, with its password, from this host's address is refused" t \
		"$([[ $got == *"pg_hba.conf rejects connection"* ]] && echo t || echo "$got")"
	rm -f "$RH_DIR/h1/pgpass2"
	got=$(rh_try 1 "host=$(rh_addr 1) port=$PORT dbname=$DB user=$(rh_role 1) sslmode=verify-full sslrootcert=$RH_DIR/ca.crt passfile=/dev/null")
	check "the runner's role without its password is refused (SCRAM)" t \
		"$([[ $got == *"no password supplied"* || $got == *"password authentication failed"* ]] && echo t || echo "$got")"
	(cd "$RH_DIR" && openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout other.key -out other.crt -days 1 -subj "/CN=another CA" >/dev/null 2>&1)
	chmod 0644 "$RH_DIR/other.crt"
	got=$(rh_try 1 "host=$(rh_addr 1) port=$PORT dbname=$DB user=$(rh_role 1) sslmode=verify-full sslrootcert=$RH_DIR/other.crt passfile=$RH_DIR/h1/pgpass")
	check "verify-full: a server certificate not of the runner's CA is refused" t \
		"$([[ $got == *"certificate verify failed"* ]] && echo t || echo "$got")"

	check "a host routes only its link's /30" "10.$RH_A.$RH_B.4/30" \
		"$(ip -n "$(rh_ns 1)" -4 route show | awk '{print $1}' | tr '\n' ' ' | sed 's/ $//')"
	got=$(rh_try 1 "host=$(rh_addr 2) port=$PORT dbname=$DB user=$(rh_role 1) sslmode=verify-full sslrootcert=$RH_DIR/ca.crt passfile=$RH_DIR/h1/pgpass connect_timeout=3")
	check "... it cannot reach the primary's address on another host's link" t \
		"$([[ $got == *"Network is unreachable"* ]] && echo t || echo "$got")"
	got=$(ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | grep -v "^10\.$RH_A\.$RH_B\." | head -n 1)
	check "... nor the machine's own address ($got)" t \
		"$(o=$(rh_in 1 bash -c "exec 3<>/dev/tcp/${got:-192.0.2.1}/22" 2>&1); [[ $o == *"Network is unreachable"* ]] && echo t || echo "$o")"
}

# ---- runs spread -----------------------------------------------------------------
t_spread() {
	local A org inv ids=() i
	A=$(wide_tenant)
	org=${A%% *}
	# shellcheck disable=SC2046
	check_held_spread "$A" "runs spread" $(hold_all_slots "$A")
	for i in $(seq 1 9); do ids+=("$(start "$A" shell "echo run $i" none)"); done
	for inv in "${ids[@]}"; do await "$A" "$inv" 60 >/dev/null; done
	check "nine short runs after them: all succeeded and charged, each output its own" "9|18|run 1|run 9" \
		"$(q -c "SELECT count(*) FILTER (WHERE state = 'succeeded') || '|' || sum(credits_charged) FROM agent.invocations WHERE id = ANY ('{$(IFS=,; echo "${ids[*]}")}')")|$(output "${ids[0]}")|$(output "${ids[8]}")"
	check "... every run by a runner host (none by the local runner)" 15 \
		"$(q -c "SELECT count(*) FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id WHERE i.org_id = '$org' AND r.name LIKE 'h$PORT-%'")"
}

# ---- kill -9 of a runner mid-run -------------------------------------------------
t_kill9() {
	local A inv h inc before
	A=$(wide_tenant)
	next_mark
	inv=$(start "$A" shell "echo started; sleep $mark" none 120)
	wait_state "$inv" running 300
	wait_for 30 '[ "$(output '"$inv"')" = started ]'
	h=$(host_of "$inv")
	if [ -z "$h" ]; then
		nok "the run is on a runner host" "runner_id $(field "$inv" runner_id)"
		return
	fi
	inc=$(incarnation "$h")
	check "the run's sandbox and work directory are on its runner's host" "alive|there" \
		"$(sandbox_alive "$mark" && echo alive || echo gone)|$([ -d "$RH_DIR/h$h/work/w/$inv" ] && echo there || echo missing)"
	rh_kill "$h"
	before=$(sandbox_alive "$mark" && echo "outlived" || echo "did not outlive")
	check "runner killed -9 mid-run: after its lease the run ends, a failure of ours, refunded" \
		"provision_failed|charge:-2,refund:2" "$(await "$A" "$inv" 90)|$(ledger "$inv")"
	check "... the reason names the runner and its lease" \
		"the runner \"$(rh_name "$h")\" stopped renewing its lease" "$(field "$inv" state_reason)"
	check "... audited: charged, refunded, provision_failed" \
		"credits.charged,credits.refunded,invocation.provision_failed" "$(events "$inv")"
	echo "# (its sandbox $before the runner)"
	rh_start "$h"
	wait_for 30 '[ "$(incarnation '"$h"')" != "'"$inc"'" ] && [ "$(live '"$h"')" = t ]'
	check "the runner is back (registered again: a new incarnation)" t \
		"$([ "$(incarnation "$h")" != "$inc" ] && [ "$(live "$h")" = t ] && echo t || echo f)"
	wait_for 30 '! sandbox_alive '"$mark"' && [ ! -e "$RH_DIR/h'"$h"'/work/w/'"$inv"'" ]'
	check "... and nothing of the run is left on its host (no sandbox, no work directory)" "gone|gone" \
		"$(sandbox_alive "$mark" && echo alive || echo gone)|$([ -e "$RH_DIR/h$h/work/w/$inv" ] && echo left || echo gone)"
	check "... the refund is not repeated by the registration" "charge:-2,refund:2" "$(ledger "$inv")"
}

# ---- a runner's link cut mid-run -------------------------------------------------
t_cut() {
	local A inv h snap others o rid tok from
	A=$(wide_tenant)
	next_mark
	inv=$(start "$A" shell "sleep $mark & for i in \$(seq 1 40); do echo tick \$i; sleep 0.5; done; wait" none 120)
	wait_state "$inv" running 300
	wait_for 30 '[ -n "$(output '"$inv"')" ]'
	h=$(host_of "$inv")
	if [ -z "$h" ]; then
		nok "the run is on a runner host" "runner_id $(field "$inv" runner_id)"
		return
	fi
	check "the run's sandbox is on its runner's host" alive "$(sandbox_alive "$mark" && echo alive || echo gone)"
	from=$(log_lines "$h")
	# (the runner's next step waits on the dead link for 10 s, longer than
	# the lease has left: the kill must not wait for it)
	rh_cut "$h"
	# What the primary has of the run once nothing can reach it from the host.
	sleep 0.5
	snap=$(output "$inv")
	check "link cut mid-run: its sandbox is killed on its host before the database's deadline for its lease (self-fencing)" \
		"killed before the deadline" "$(fence_order "$inv" "$mark" 60)"
	check "link cut mid-run: after its lease the run ends, a failure of ours, refunded" \
		"provision_failed|charge:-2,refund:2" "$(await "$A" "$inv" 90)|$(ledger "$inv")"
	check "... the reason names the runner and its lease" \
		"the runner \"$(rh_name "$h")\" stopped renewing its lease" "$(field "$inv" state_reason)"
	rh_mend "$h"
	wait_for 60 '[ "$(live '"$h"')" = t ]'
	check "link restored: the runner is live again" t "$(live "$h")"
	check "... its log: the fence's thread killed the sandbox, the run loop dropped the run once its call on the dead link gave up" \
		"lease of invocation INV could not be renewed in time|invocation INV is not ours any more|" "$(fence_log "$h" "$from" "$inv")"
	# Whatever it still had to say about the run (output, its finish) came
	# after its lease: none of it is recorded.
	wait_for 10 '[ "$(q -c "SELECT in_use FROM agent.runner_status WHERE name = '"'$(rh_name "$h")'"'")" = 0 ]'
	check "... nothing it sent after the cut is recorded (output as it was at the cut)" "$snap" "$(output "$inv")"
	check "... the run stays as the reaper ended it, refunded once" "provision_failed|charge:-2,refund:2|credits.charged,credits.refunded,invocation.provision_failed" \
		"$(field "$inv" state)|$(ledger "$inv")|$(events "$inv")"
	echo "# (the primary refused $(grep -c "lease of invocation $inv is not held by this runner" "$CLUSTER_DIR/server.log") late write(s) of the run)"
	# The old host's writes with the old lease, over the mended link, as its role.
	rid=$(field "$inv" runner_id)
	tok=$(field "$inv" lease_token)
	check "... its writes with the old lease over the mended link are refused (output, finish)" \
		"55000 lease of invocation $inv is not held by this runner|55000 lease of invocation $inv is not held by this runner" \
		"$(rh_error "$h" "SELECT agent.runner_append_output('$rid', '$tok', '$inv', 'stdout', 'late')")|$(rh_error "$h" "SELECT agent.runner_finish('$rid', '$tok', '$inv', '{\"status\":\"exited\",\"exit_code\":0}', 0, NULL, true)")"
	check "... and wrote nothing" "$snap|provision_failed|charge:-2,refund:2" "$(output "$inv")|$(field "$inv" state)|$(ledger "$inv")"
	# It runs again: the other two drained, a run goes to it.
	others=""
	for o in 1 2 3; do [ "$o" = "$h" ] || others+=" $o"; done
	for o in $others; do drain "$o"; done
	inv=$(run "$A" shell 'echo after the cut' none)
	for o in $others; do resume "$o"; done
	check "... and runs again" "succeeded|after the cut|$h" "$(field "$inv" state)|$(output "$inv")|$(host_of "$inv")"
}

# ---- at the default lease, the link cut while the runner waits in a large finish -
# The runner's loop is held in a database call for longer than a lease has
# left: a run's finish sends 40 MB of files over a link that has slowed to a
# crawl (a token bucket of 1 Mbit/s on the host's side of its link, tc:
# fault injection), so no heartbeat can go out; once the database has heard
# nothing from the runner for two heartbeats' time, the link is cut.  The
# runner's other run must be killed before the database's deadline for its
# lease (30 s from the last heartbeat the database recorded); the call the
# runner waits in ends only later (its deadline, 10 s and a second per MB
# it sends; the connection's TCP user timeout, 20 s after the cut; or, once
# the link is mended, the database's refusal of the finish).
t_cut_in_finish() {
	local A inv big h=1 ns dev from
	ns=$(rh_ns "$h")
	dev="sr${PORT}n$h"
	A=$(wide_tenant)
	next_mark
	drain 2
	drain 3
	inv=$(start "$A" shell "echo started; sleep $mark" none 120)
	big=$(start "$A" shell 'head -c 20000000 /dev/urandom >a.bin && head -c 20000000 /dev/urandom >b.bin && echo ready; while [ ! -e go ]; do sleep 0.1; done' none 120)
	wait_state "$inv" running 300
	wait_state "$big" running 300
	wait_for 60 '[ "$(output '"$inv"')" = started ] && [ "$(output '"$big"')" = ready ]'
	check "two runs on host $h: one sleeps, one made 40 MB of files and waits" "$h|$h|started|ready|alive" \
		"$(host_of "$inv")|$(host_of "$big")|$(output "$inv")|$(output "$big")|$(sandbox_alive "$mark" && echo alive || echo gone)"
	# The default lease; the runner follows from a heartbeat's answer, and the
	# second heartbeat recorded after the change was sent after an answer
	# that carried it.
	setting runner_lease_seconds 30
	next_heartbeat "$h" && next_heartbeat "$h"
	from=$(log_lines "$h")
	ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate 1mbit burst 16kb latency 1s
	: >"$RH_DIR/h$h/work/w/$big/workspace/go"
	wait_for 30 '[ -n "$(q -c "SELECT 1 FROM pg_stat_activity WHERE application_name = '"'sandbox-runner-$(rh_name "$h")'"' AND query LIKE '"'%runner_store_produced_file%'"' AND state = '"'active'"' AND wait_event = '"'ClientRead'"'")" ]'
	check "the runner is in its finish's database call (its backend waits for the rest of the files)" 1 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sandbox-runner-$(rh_name "$h")' AND query LIKE '%runner_store_produced_file%' AND state = 'active' AND wait_event = 'ClientRead'")"
	wait_for 60 '[ "$(q -c "SELECT pg_catalog.clock_timestamp() > last_heartbeat + interval '"'20 s'"' FROM agent.runners WHERE name = '"'$(rh_name "$h")'"'")" = t ]'
	rh_cut "$h"
	check "link cut while the runner waits in a database call, at the default lease: the other run's sandbox is killed before the database's deadline for its lease" \
		"killed before the deadline" "$(fence_order "$inv" "$mark" 60)"
	check "... both runs end after the lease, failures of ours, refunded" \
		"provision_failed|charge:-2,refund:2|provision_failed|charge:-2,refund:2" \
		"$(await "$A" "$inv" 90)|$(ledger "$inv")|$(await "$A" "$big" 90)|$(ledger "$big")"
	ip netns exec "$ns" tc qdisc del dev "$dev" root
	rh_mend "$h"
	wait_for 60 '[ "$(live '"$h"')" = t ] && [ "$(q -c "SELECT in_use FROM agent.runner_status WHERE name = '"'$(rh_name "$h")'"'")" = 0 ]'
	check "link restored: the runner is live again, holding nothing" "t|0" \
		"$(live "$h")|$(q -c "SELECT in_use FROM agent.runner_status WHERE name = '$(rh_name "$h")'")"
	check "... its log: the fence's thread killed the sandbox, the run loop dropped the run once its finish's call ended" \
		"lease of invocation INV could not be renewed in time|invocation INV is not ours any more|" "$(fence_log "$h" "$from" "$inv")"
	check "... the finish it was sending is not recorded, refunded once" \
		"provision_failed|the runner \"$(rh_name "$h")\" stopped renewing its lease|charge:-2,refund:2|credits.charged,credits.refunded,invocation.provision_failed" \
		"$(field "$big" state)|$(field "$big" state_reason)|$(ledger "$big")|$(events "$big")"
	setting runner_lease_seconds "$LEASE"
	resume 2
	resume 3
}

# ---- an immediate restart of PostgreSQL -------------------------------------------
t_pg_restart() {
	local A org ids=() inv i n
	A=$(wide_tenant)
	org=${A%% *}
	for i in 1 2 3; do ids+=("$(start "$A" shell "echo a$i; sleep 4; echo survived" none 60)"); done
	for inv in "${ids[@]}"; do wait_state "$inv" running 300; done
	rh_restart_primary immediate
	check "the primary is back after an immediate restart" t "$(q -c "SELECT running FROM agent.worker_status()")"
	wait_for 60 '[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '"'sandbox-runner-h$PORT-%'"'")" = 3 ]'
	check "the three runners reconnected" 3 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'sandbox-runner-h$PORT-%'")"
	i=0
	for inv in "${ids[@]}"; do
		i=$((i + 1))
		check "a run in flight across the restart ends as its payload did (run $i)" "succeeded|a$i
survived|2" "$(await "$A" "$inv" 60)|$(output "$inv")|$(field "$inv" credits_charged)"
	done
	# shellcheck disable=SC2046
	check_held_spread "$A" "new runs after the restart" $(hold_all_slots "$A")
}

# ---- session affinity and the rebuild elsewhere ------------------------------------
t_affinity() {
	local A org ws agent conv inv h h2 i rid ok_n=0
	A=$(wide_tenant)
	read -r org ws agent conv <<<"$A"
	inv=$(run "$A" shell 'echo hello > note.txt; echo one')
	h=$(host_of "$inv")
	check "a conversation's first run" "succeeded|one" "$(field "$inv" state)|$(output "$inv")"
	rid=$(rh_registered "$h")
	check "... its session is on the runner that ran it" "$rid" \
		"$(q -c "SELECT runner_id FROM agent.sessions WHERE conversation_id = '$conv' AND state = 'active'")"
	for i in 1 2 3 4; do
		inv=$(run "$A" shell 'cat note.txt')
		[ "$(field "$inv" state)|$(output "$inv")|$(host_of "$inv")" = "succeeded|hello|$h" ] && ok_n=$((ok_n + 1))
	done
	check "the conversation's next four runs go to the same runner, in the same workspace" 4 "$ok_n"
	rh_stop "$h"
	wait_for $((LEASE + 30)) '[ "$(live '"$h"')" = f ]'
	check "its runner stopped: no longer live" f "$(live "$h")"
	inv=$(run "$A" shell 'cat note.txt; echo rebuilt')
	h2=$(host_of "$inv")
	check "the next run goes to another runner, the conversation's files put back" "succeeded|hello
rebuilt|t" "$(field "$inv" state)|$(output "$inv")|$([ -n "$h2" ] && [ "$h2" != "$h" ] && echo t || echo "f ($h2)")"
	check "... the rebuild is audited (session.rebuilt, runner_gone, from the old runner to the new)" \
		"1|$rid|$(rh_registered "$h2")" \
		"$(q -c "SELECT count(*) || '|' || min(details ->> 'previous_runner_id') || '|' || min(details ->> 'runner_id') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'session.rebuilt' AND details ->> 'reason' = 'runner_gone'")"
	check "... the session moved with it" "$(rh_registered "$h2")" \
		"$(q -c "SELECT runner_id FROM agent.sessions WHERE conversation_id = '$conv' AND state = 'active'")"
	rh_start "$h"
	wait_for 30 '[ "$(live '"$h"')" = t ]'
	check "the stopped runner is back" t "$(live "$h")"
	inv=$(run "$A" shell 'cat note.txt')
	check "... and the conversation stays on its new runner" "succeeded|hello|$h2" \
		"$(field "$inv" state)|$(output "$inv")|$(host_of "$inv")"
}

# ---- a runner role from the attacker's side ----------------------------------------
# Host 4 runs no daemon: psql over its link, as its role, is the attacker.
t_attacker_catalog() {
	local res want
	res=$(rh_psql 4 -F '|' <<'SQL'
CREATE TEMP TABLE tried (kind text, obj text, op text, sqlstate text, message text, name text);
DO $$
DECLARE
	o record;
	op text;
	stmt text;
	col text;
BEGIN
	-- every table, view, materialized view, foreign table and sequence
	FOR o IN SELECT c.oid, c.oid::regclass::text AS name, c.relkind
			   FROM pg_catalog.pg_class c
			  WHERE c.relnamespace = 'agent'::regnamespace
				AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
	LOOP
		SELECT a.attname INTO col FROM pg_catalog.pg_attribute a
		 WHERE a.attrelid = o.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum LIMIT 1;
		FOREACH op IN ARRAY CASE WHEN o.relkind = 'S' THEN ARRAY['select', 'nextval', 'setval']
								 WHEN o.relkind IN ('v', 'm') THEN ARRAY['select']
								 ELSE ARRAY['select', 'insert', 'update', 'delete', 'truncate', 'lock'] END
		LOOP
			stmt := CASE op
				WHEN 'select' THEN format('SELECT 1 FROM %s LIMIT 1', o.name)
				WHEN 'nextval' THEN format('SELECT pg_catalog.nextval(%L)', o.name)
				WHEN 'setval' THEN format('SELECT pg_catalog.setval(%L, 1)', o.name)
				WHEN 'insert' THEN format('INSERT INTO %s DEFAULT VALUES', o.name)
				WHEN 'update' THEN format('UPDATE %s SET %I = %I', o.name, col, col)
				WHEN 'delete' THEN format('DELETE FROM %s', o.name)
				WHEN 'truncate' THEN format('TRUNCATE %s', o.name)
				WHEN 'lock' THEN format('LOCK TABLE %s IN ACCESS SHARE MODE NOWAIT', o.name) END;
			BEGIN
				EXECUTE stmt;
				INSERT INTO tried VALUES ('relation', o.name, op, '00000', 'allowed');
			EXCEPTION WHEN OTHERS THEN
				INSERT INTO tried VALUES ('relation', o.name, op, SQLSTATE, SQLERRM);
			END;
		END LOOP;
	END LOOP;
	-- every function, called with arguments that are not constants (a
	-- strict function called with constant NULLs is folded away before its
	-- privilege is checked)
	FOR o IN SELECT p.oid::regprocedure::text AS sig, p.oid::regproc::text AS name, p.prokind, p.proname,
					(SELECT pg_catalog.string_agg('(SELECT NULL::' || pg_catalog.format_type(t, NULL) || ')', ', ' ORDER BY i)
					   FROM unnest(p.proargtypes) WITH ORDINALITY a(t, i)) AS args
			   FROM pg_catalog.pg_proc p
			  WHERE p.pronamespace = 'agent'::regnamespace
	LOOP
		BEGIN
			IF o.prokind = 'p' THEN
				-- (no subquery in a CALL's arguments, 0A000: plain NULLs, and a
				-- CALL checks EXECUTE whatever its arguments are)
				EXECUTE format('CALL %s(%s)', o.name,
							   coalesce(replace(replace(o.args, '(SELECT NULL::', 'NULL::'), ')', ''), ''));
			ELSE
				EXECUTE format('SELECT %s(%s)', o.name, coalesce(o.args, ''));
			END IF;
			INSERT INTO tried VALUES ('function', o.sig, 'execute', '00000', 'allowed', o.proname);
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO tried VALUES ('function', o.sig, 'execute', SQLSTATE, SQLERRM, o.proname);
		END;
	END LOOP;
END
$$;
SELECT 'relations', count(DISTINCT obj), count(*) FROM tried WHERE kind = 'relation';
SELECT 'relations allowed', count(*) FROM tried
 WHERE kind = 'relation' AND NOT (sqlstate = '42501' AND message LIKE 'permission denied for %');
-- (views: a write is refused as "cannot delete from view" before its
-- privilege is looked at; no privilege at all is what counts)
SELECT 'privileges', count(*) FROM pg_catalog.pg_class c
 WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
   AND (CASE WHEN c.relkind = 'S' THEN pg_catalog.has_sequence_privilege(c.oid, 'USAGE, SELECT, UPDATE')
			 ELSE pg_catalog.has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER')
				  OR pg_catalog.has_any_column_privilege(c.oid, 'SELECT, INSERT, UPDATE, REFERENCES') END);
-- A call is refused when the error names the function called (a function
-- it may execute that calls one it may not fails naming the inner one).
SELECT 'functions', count(*) FROM tried WHERE kind = 'function';
CREATE TEMP VIEW callable AS SELECT obj FROM tried
 WHERE kind = 'function' AND NOT (sqlstate = '42501' AND
								  message IN ('permission denied for function ' || name,
											  'permission denied for procedure ' || name));
SELECT 'steps', coalesce(string_agg(obj, ';' ORDER BY obj), '') FROM callable WHERE obj LIKE 'agent.runner\_%';
SELECT 'others', coalesce(string_agg(obj, ';' ORDER BY obj), '') FROM callable WHERE obj NOT LIKE 'agent.runner\_%';
SELECT 'denied steps', coalesce(string_agg(obj, ';' ORDER BY obj), '') FROM tried
 WHERE kind = 'function' AND obj LIKE 'agent.runner\_%' AND obj NOT IN (SELECT obj FROM callable);
-- the catalog's answer, which must be the same
SELECT 'privileged', coalesce(string_agg(p.oid::regprocedure::text, ';' ORDER BY p.oid::regprocedure::text), '')
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = 'agent'::regnamespace AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE');
SQL
)
	check "the attacker tried every table, view and sequence of schema agent (from the owner's catalog)" \
		"$(q -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'agent'::regnamespace AND relkind IN ('r', 'p', 'v', 'm', 'f', 'S')")" \
		"$(sed -n 's/^relations|\([0-9]*\)|.*/\1/p' <<<"$res")"
	check "... every read, write, truncate and lock of them is refused (42501)" 0 \
		"$(sed -n 's/^relations allowed|//p' <<<"$res")"
	check "... and it holds no privilege on any of them (table, column or sequence)" 0 \
		"$(sed -n 's/^privileges|//p' <<<"$res")"
	check "... and it tried every function of schema agent" \
		"$(q -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'agent'::regnamespace")" \
		"$(sed -n 's/^functions|//p' <<<"$res")"
	want=$(q -c "SELECT string_agg(p.oid::regprocedure::text, ';' ORDER BY p.oid::regprocedure::text) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'agent' AND p.proname LIKE 'runner\_%'")
	check "... it may execute every runner_* step ($(tr ';' '\n' <<<"$want" | grep -c .) of them)" "$want" \
		"$(sed -n 's/^steps|//p' <<<"$res")"
	check "... every other function it may execute is PUBLIC's, with the caller's rights (not SECURITY DEFINER)" \
		"$(q -c "SELECT coalesce(string_agg(p.oid::regprocedure::text, ';' ORDER BY p.oid::regprocedure::text), '') FROM pg_proc p WHERE p.pronamespace = 'agent'::regnamespace AND p.proname NOT LIKE 'runner\_%' AND has_function_privilege('public', p.oid, 'EXECUTE') AND NOT p.prosecdef")" \
		"$(sed -n 's/^others|//p' <<<"$res")"
	echo "# (PUBLIC's functions it can call: $(sed -n 's/^others|//p' <<<"$res"))"
	check "... the catalog agrees with what it could call" \
		"$(sed -n 's/^privileged|//p' <<<"$res" | tr ';' '\n' | LC_ALL=C sort)" \
		"$(sed -n 's/^\(steps\|others\)|//p' <<<"$res" | tr ';' '\n' | grep . | LC_ALL=C sort)"
	check "... no step refused it EXECUTE" "" "$(sed -n 's/^denied steps|//p' <<<"$res")"

	check "it cannot become agent_backend" "42501 permission denied to set role \"agent_backend\"" \
		"$(rh_error 4 "SET ROLE agent_backend")"
	check "... nor another runner" "42501 permission denied to set role \"$(rh_role 1)\"" \
		"$(rh_error 4 "SET ROLE $(rh_role 1)")"
	check "... nor grant its role" t \
		"$([[ $(rh_error 4 "GRANT agent_runner TO $(rh_role 1)") == "42501 "* ]] && echo t || echo f)"
	check "... nor create a role" "42501 permission denied to create role" "$(rh_error 4 "CREATE ROLE sbxr_evil")"
	check "... nor create in schema agent" "42501 permission denied for schema agent" \
		"$(rh_error 4 "CREATE FUNCTION agent.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'")"

	# A second identity: its role is a member of agent_runner, so it may SET
	# ROLE to it; the shared role must not become a runner of its own.
	check "SET ROLE agent_runner, it cannot register a runner of the shared role" \
		"42501 permission denied to act as runner role \"agent_runner\"" \
		"$(rh_error 4 "SET ROLE agent_runner; SELECT agent.runner_register('h$PORT-shared', 'attacker', 'x', 2)")"
	check "... none was made" 0 "$(q -c "SELECT count(*) FROM agent.runners WHERE login_role = 'agent_runner'")"
	res=$(rh_psql 4 -F '|' <<'SQL'
CREATE TEMP TABLE stepped (obj text, sqlstate text, message text);
GRANT ALL ON stepped TO agent_runner;
SET ROLE agent_runner;
DO $$
DECLARE
	o record;
BEGIN
	FOR o IN SELECT p.oid::regprocedure::text AS sig, p.oid::regproc::text AS name,
					(SELECT pg_catalog.string_agg('(SELECT NULL::' || pg_catalog.format_type(t, NULL) || ')', ', ' ORDER BY i)
					   FROM unnest(p.proargtypes) WITH ORDINALITY a(t, i)) AS args
			   FROM pg_catalog.pg_proc p
			  WHERE p.pronamespace = 'agent'::regnamespace AND p.proname LIKE 'runner\_%'
	LOOP
		BEGIN
			EXECUTE format('SELECT %s(%s)', o.name, coalesce(o.args, ''));
			INSERT INTO stepped VALUES (o.sig, '00000', 'allowed');
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO stepped VALUES (o.sig, SQLSTATE, SQLERRM);
		END;
	END LOOP;
END
$$;
SELECT 'stepped', count(*), count(*) FILTER (WHERE sqlstate = '42501'
											AND message = 'permission denied to act as runner role "agent_runner"')
  FROM stepped;
SQL
)
	check "... and every runner step under SET ROLE agent_runner is refused (42501, the role named)" \
		"$(q -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'agent'::regnamespace AND proname LIKE 'runner\_%'")|$(q -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'agent'::regnamespace AND proname LIKE 'runner\_%'")" \
		"$(sed -n 's/^stepped|//p' <<<"$res")"
}

t_attacker_steps() {
	local A org inv id tok got rid inc rid1 h1tok
	read -r rid inc < <(rh_psql 4 -F ' ' -c "SELECT runner_id, incarnation FROM agent.runner_register('$(rh_name 4)', 'attacker', 'x', 2)")
	check "the attacker host registers a runner of its own role" "$(rh_role 4)" \
		"$(q -c "SELECT login_role FROM agent.runners WHERE id = '${rid:-00000000-0000-0000-0000-000000000000}'")"
	rid1=$(rh_registered 1)
	for h in 1 2 3; do drain "$h"; done
	A=$(wide_tenant)
	org=${A%% *}
	inv=$(start "$A" shell 'echo the-code-it-was-given' none)
	got=$(rh_psql 4 -F '|' -c "SELECT id, lease_token, code FROM agent.runner_claim('$rid', '$inc', 5)")
	id=$(cut -d'|' -f1 <<<"$got")
	tok=$(cut -d'|' -f2 <<<"$got")
	check "it claims the approved run: its id and code (what a runner is given)" "1|$inv|echo the-code-it-was-given" \
		"$(grep -c . <<<"$got")|$id|$(cut -d'|' -f3 <<<"$got")"
	check "... its token is the run's lease" "$tok|$rid" "$(field "$inv" lease_token)|$(field "$inv" runner_id)"
	check "with its token: prepare and start" "no error|t" \
		"$(rh_error 4 "SELECT count(*) FROM agent.runner_prepare('$rid', '$tok', '$inv', true)")|$(rh_psql 4 -c "SELECT agent.runner_mark_running('$rid', '$tok', '$inv', 4242)")"
	rh_psql 4 -c "SELECT agent.runner_append_output('$rid', '$tok', '$inv', 'stdout', 'legit
')" >/dev/null
	local bad="55000 lease of invocation $inv is not held by this runner"
	local wrong=00000000-0000-4000-8000-000000000001
	check "a wrong token: prepare refused" "$bad" "$(rh_error 4 "SELECT * FROM agent.runner_prepare('$rid', '$wrong', '$inv', true)")"
	check "a wrong token: output refused" "$bad" "$(rh_error 4 "SELECT agent.runner_append_output('$rid', '$wrong', '$inv', 'stdout', 'forged')")"
	check "a wrong token: finish refused" "$bad" "$(rh_error 4 "SELECT agent.runner_finish('$rid', '$wrong', '$inv', 'ok', 0, NULL, true)")"
	check "the right token in another runner's name: refused" "42501 permission denied for runner $rid1" \
		"$(rh_error 4 "SELECT agent.runner_append_output('$rid1', '$tok', '$inv', 'stdout', 'forged')")"
	check "another runner's role with the run's token, in its own name: refused" "$bad" \
		"$(rh_error 1 "SELECT agent.runner_append_output('$rid1', '$tok', '$inv', 'stdout', 'forged')")"
	check "... and it cannot finish it either" "$bad" \
		"$(rh_error 1 "SELECT agent.runner_finish('$rid1', '$tok', '$inv', 'ok', 0, NULL, true)")"
	check "... nor list the attacker runner's sessions or skills" "42501 permission denied for runner $rid|42501 permission denied for runner $rid" \
		"$(rh_error 1 "SELECT agent.runner_live_sessions('$rid')")|$(rh_error 1 "SELECT agent.runner_skills_in_use('$rid')")"
	tq "$org" "$(cut -d' ' -f2 <<<"$A")" "SELECT agent.cancel('$inv', 'requester');" >/dev/null
	check "its run is cancelled: the holder is told" "$inv" \
		"$(rh_psql 4 -c "SELECT * FROM agent.runner_cancel_requested('$rid', ARRAY['$inv']::uuid[])")"
	check "... another runner does not learn that it is being cancelled" "" \
		"$(rh_psql 1 -c "SELECT * FROM agent.runner_cancel_requested('$rid1', ARRAY['$inv']::uuid[])")"
	check "nothing forged was recorded" "legit" "$(output "$inv")"

	# No heartbeat: the lease runs out.  Then even the right token is refused.
	wait_for $((LEASE * 2 + 10)) '[ "$(q -c "SELECT now() > greatest(i.lease_expires_at, r.last_heartbeat + make_interval(secs => '"$LEASE"')) FROM agent.invocations i JOIN agent.runners r ON r.id = i.runner_id WHERE i.id = '"'$inv'"'")" = t ]'
	check "an expired lease: output refused, with the right token" "$bad" \
		"$(rh_error 4 "SELECT agent.runner_append_output('$rid', '$tok', '$inv', 'stdout', 'late')")"
	check "an expired lease: finish refused" "$bad" \
		"$(rh_error 4 "SELECT agent.runner_finish('$rid', '$tok', '$inv', 'ok', 0, NULL, true)")"
	check "an expired lease: a heartbeat does not bring it back" "0|{$inv}" \
		"$(rh_psql 4 -F '|' -c "SELECT renewed, lost FROM agent.runner_heartbeat('$rid', '$inc', 1, ARRAY['$inv']::uuid[])")"
	check "the run ends, a failure of ours, refunded; the late output not recorded" \
		"provision_failed|charge:-2,refund:2|legit" "$(await "$A" "$inv" 60)|$(ledger "$inv")|$(output "$inv")"

	# Another runner's run, with its token (as if stolen): refused.
	resume 1
	inv=$(start "$A" shell 'echo mine; sleep 30' none 60)
	wait_state "$inv" running 300
	h1tok=$(field "$inv" lease_token)
	check "a run of runner 1" 1 "$(host_of "$inv")"
	check "the attacker with runner 1's token for it: prepare refused" \
		"55000 lease of invocation $inv is not held by this runner" \
		"$(rh_error 4 "SELECT * FROM agent.runner_prepare('$rid', '$h1tok', '$inv', true)")"
	check "... output refused" "55000 lease of invocation $inv is not held by this runner" \
		"$(rh_error 4 "SELECT agent.runner_append_output('$rid', '$h1tok', '$inv', 'stdout', 'forged')")"
	check "... finish refused" "55000 lease of invocation $inv is not held by this runner" \
		"$(rh_error 4 "SELECT agent.runner_finish('$rid', '$h1tok', '$inv', 'ok', 0, NULL, true)")"
	check "... its skills refused" t \
		"$([[ $(rh_error 4 "SELECT * FROM agent.runner_skill_files('$rid', '$h1tok', '$inv', gen_random_uuid())") == 55000* || $(rh_error 4 "SELECT * FROM agent.runner_skill_files('$rid', '$h1tok', '$inv', gen_random_uuid())") == 42501* ]] && echo t || echo f)"
	# Runner 1's daemon stopped (SIGSTOP) so that the cancel waits for it:
	# its role is told, the attacker is not.
	kill -STOP "$(rh_pid 1)"
	tq "$org" "$(cut -d' ' -f2 <<<"$A")" "SELECT agent.cancel('$inv', 'requester');" >/dev/null
	check "... nor is it told of a cancel of it" "|$inv" \
		"$(rh_psql 4 -c "SELECT * FROM agent.runner_cancel_requested('$rid', ARRAY['$inv']::uuid[])")|$(rh_psql 1 -c "SELECT * FROM agent.runner_cancel_requested('$rid1', ARRAY['$inv']::uuid[])")"
	kill -CONT "$(rh_pid 1)"
	check "runner 1's run is untouched by all that (cancelled by its requester)" "cancelled|mine" \
		"$(await "$A" "$inv" 30)|$(output "$inv")"
	for h in 2 3; do resume "$h"; done

	# Runners claim in turn (agent._claim_turn): one that keeps its claim's
	# transaction open keeps the turn, and the others wait for it only a
	# bounded time per claim, never until it lets go.
	local holder
	rh_psql 4 -c "BEGIN" -c "SELECT count(*) FROM agent.runner_claim('$rid', '$inc', 1)" \
		-c "SELECT pg_sleep(300)" -c "COMMIT" >/dev/null 2>&1 &
	holder=$!
	wait_for 30 '[ "$(q -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = '"'advisory'"' AND l.granted AND a.usename = '"'$(rh_role 4)'"'")" = 1 ]'
	check "a runner holding the claim's turn in an open transaction" 1 \
		"$(q -c "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted AND a.usename = '$(rh_role 4)'")"
	inv=$(start "$A" shell 'echo past-the-holder' none)
	check "... does not stop the others: a run approved meanwhile runs on a runner host" \
		"succeeded|past-the-holder|t" \
		"$(await "$A" "$inv" 60)|$(output "$inv")|$([ -n "$(host_of "$inv")" ] && echo t || echo f)"
	kill "$holder" 2>/dev/null || true
	wait "$holder" 2>/dev/null || true
	q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$(rh_role 4)'" >/dev/null
	q -c "SELECT agent.remove_runner('$(rh_name 4)')" >/dev/null
}

# ---- a runner that heartbeats past its run's wall time ---------------------------
# Host 4 (psql, no daemon) claims a run and heartbeats on, never finishing
# it: its lease ends at the run's wall time plus runner_grace_seconds all
# the same (a failure of ours, refunded), and the org's limit of one run in
# flight, which that run held on every host, comes back: the org's next run
# goes to an honest runner.
t_attacker_lease_cap() {
	local A org inv inv2 rid inc got tok i beats=0 st
	q -c "SELECT agent.drain_runner('$(rh_name 4)', true)" >/dev/null 2>&1 # (t_attacker_steps removed it)
	read -r rid inc < <(rh_psql 4 -F ' ' -c "SELECT runner_id, incarnation FROM agent.runner_register('$(rh_name 4)', 'attacker', 'x', 2)")
	setting runner_grace_seconds 2
	A=$(new_tenant 1000)
	org=${A%% *}
	q -c "SELECT agent.set_org_limits('$org', 1, NULL)" >/dev/null
	for h in 1 2 3; do drain "$h"; done
	inv=$(start "$A" shell 'echo never-run' none 1)
	got=$(rh_psql 4 -F '|' -c "SELECT id, lease_token FROM agent.runner_claim('$rid', '$inc', 5)")
	tok=${got#*|}
	check "the attacker claims the org's run (wall time 1 s)" "$inv" "${got%%|*}"
	rh_psql 4 -c "SELECT agent.runner_mark_running('$rid', '$tok', '$inv', 4242)" >/dev/null
	for h in 1 2 3; do resume "$h"; done
	inv2=$(start "$A" shell 'echo the-next-run' none)
	# It heartbeats every second (its lease is $LEASE s), naming the run, for
	# at most 60 heartbeats.
	for i in $(seq 1 60); do
		st=$(field "$inv" state)
		[ "$st" = running ] || [ "$st" = provisioning ] || break
		rh_psql 4 -c "SELECT renewed FROM agent.runner_heartbeat('$rid', '$inc', 1, ARRAY['$inv']::uuid[])" >/dev/null && beats=$((beats + 1))
		sleep 1
	done
	echo "# (it heartbeated $beats times)"
	check "heartbeating past the wall time: the run ends while the runner still heartbeats, a failure of ours, refunded" \
		"provision_failed|charge:-2,refund:2" "$st|$(ledger "$inv")"
	check "... the reason names the runner and the wall time" \
		"the runner \"$(rh_name 4)\" held it past its wall time" "$(field "$inv" state_reason)"
	check "... audited: charged, refunded, provision_failed" \
		"credits.charged,credits.refunded,invocation.provision_failed" "$(events "$inv")"
	check "... its heartbeat lists it lost, its finish is refused" \
		"0|{$inv}|55000 lease of invocation $inv is not held by this runner" \
		"$(rh_psql 4 -F '|' -c "SELECT renewed, lost FROM agent.runner_heartbeat('$rid', '$inc', 1, ARRAY['$inv']::uuid[])")|$(rh_error 4 "SELECT agent.runner_finish('$rid', '$tok', '$inv', '{\"status\":\"exited\",\"exit_code\":0}', 0, NULL, true)")"
	check "the org's limit came back: its next run ran on an honest runner, claimed only after the held one ended" \
		"succeeded|the-next-run|t|t" \
		"$(await "$A" "$inv2" 60)|$(output "$inv2")|$(case "$(host_of "$inv2")" in 1 | 2 | 3) echo t ;; *) echo f ;; esac)|$(q -c "SELECT a.provisioned_at >= b.finished_at FROM agent.invocations a, agent.invocations b WHERE a.id = '$inv2' AND b.id = '$inv'")"
	setting runner_grace_seconds 60
	q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '$(rh_role 4)'" >/dev/null
	q -c "SELECT agent.remove_runner('$(rh_name 4)')" >/dev/null
}

after_test() { check_invariants; }
run_tests t_hosts t_spread t_kill9 t_cut t_cut_in_finish t_pg_restart t_affinity t_attacker_catalog t_attacker_steps t_attacker_lease_cap
finish_suite
