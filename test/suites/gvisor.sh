#!/usr/bin/env bash
# The gvisor isolation class (issue 32; docs/security.md, "The two
# isolation classes") end to end, through SQL and real runners: two runner
# hosts (test/runner_hosts.sh), one without runsc (runsc_path points at
# nothing, as on a host without the package) and one with it, run as root
# as the class needs.  An org set to gvisor requests a run; while only the
# runner without runsc is live the run waits, approved and uncharged, with
# queue_status's reason (that runner's own), although that runner does take
# a namespaced run meanwhile; the root runner, started before runsc_path
# is right, reports gvisor after a SIGHUP (no restart) and runs the gvisor
# run on gVisor's kernel, its file comes back.  --check of both.
# T=REGEX runs only the matching tests (test/lib.sh).  Ends with
# "N passed, N failed".  Skipped (said) where runsc is not installed.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
# shellcheck source=../runner_hosts.sh
. "$top/test/runner_hosts.sh"

cleanup() {
	rh_cleanup
	q -c "UPDATE agent.settings SET value = '30' WHERE key = 'runner_lease_seconds'" >/dev/null 2>&1
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
	nok "the gvisor suite makes runner hosts and runs runsc: it runs as root"
	finish_suite
fi
if ! [ -x /usr/bin/runsc ]; then
	echo "# skipped: /usr/bin/runsc is not installed (Debian's runsc package)"
	finish_suite
fi
wait_for 30 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
setting runner_lease_seconds 9

if ! rh_setup 2 >"$RH_DIR.setup.log" 2>&1; then
	nok "set up the runner hosts (namespace, veth, TLS, role)" "$(tail -n 5 "$RH_DIR.setup.log")"
	rm -f "$RH_DIR.setup.log"
	finish_suite
fi
rm -f "$RH_DIR.setup.log"
RH_ROOT_HOSTS=" 1 "		# host 1 runs as root; host 2 as postgres, without runsc

host_up() {			# H [config lines]: start, wait for its classes, resume it
	local h=$1 id
	RH_CONF_EXTRA=${2:-} rh_start "$h"
	wait_for 60 '[ -n "$(rh_registered '"$h"')" ]'
	id=$(rh_registered "$h")
	wait_for 120 '[ -n "$(q -c "SELECT 1 FROM agent.runner_isolation WHERE runner_id = '"'$id'"'")" ]'
	q -c "SELECT agent.drain_runner('$(rh_name "$h")', resume => true)" >/dev/null
	echo "$id"
}
classes() { q -c "SELECT array_to_string(classes, ',') || '|' || coalesce(problems, '') FROM agent.runner_isolation WHERE runner_id = '$1'"; }

GV_TENANT=
GV_INV=
NOGV=

# A runner without runsc reports namespaces only, with its reason; a gvisor
# run waits for a runner that runs the class (queue_status says which and
# why), and the runner without it never takes it, though it takes other work.
t_waits_without_runsc() {
	local org ws agent conv appr B binv
	NOGV=$(host_up 2 "runsc_path = '/nonexistent/runsc'")
	check "the runner without runsc reports namespaces, and why not gvisor" \
		"namespaces|gvisor: runsc not found at /nonexistent/runsc (No such file or directory)" "$(classes "$NOGV")"
	GV_TENANT=$(new_tenant 100)
	read -r org ws agent conv <<<"$GV_TENANT"
	q -c "SELECT agent.set_isolation('gvisor', org => '$org')" >/dev/null
	read -r GV_INV appr < <(req "$GV_TENANT" python 'import os, platform
print("kernel", open("/proc/version").read().split()[2])
open("/workspace/report.txt", "w").write("made in gvisor\n")
print("uid", os.getuid() != 0)')
	check "the org's class is the run's" gvisor "$(field "$GV_INV" isolation)"
	check "the card shows it" gvisor "$(tq "$org" "$ws" "SELECT isolation FROM agent.approval_card('$appr')" | tail -n 1)"
	approve "$GV_TENANT" "$appr"
	wait_for 30 '[ "$(q -c "SELECT waiting_for FROM agent.queue_status() WHERE invocation_id = '"'$GV_INV'"'")" = isolation_unavailable ]'
	# (the local runner, run by postgres here, says why it does not either)
	check "approved, it waits: no live runner runs gvisor, with the runners' reasons" \
		"approved|isolation_unavailable|no live runner can run the gvisor isolation class ($(rh_name 2): gvisor: runsc not found at /nonexistent/runsc (No such file or directory); local: gvisor: runsc needs the runner to run as root)" \
		"$(field "$GV_INV" state)|$(q -c "SELECT waiting_for || '|' || detail FROM agent.queue_status() WHERE invocation_id = '$GV_INV'")"
	# meanwhile the runner without runsc takes namespaced work (it is live and claiming)
	B=$(new_tenant 100)
	q -c "SELECT agent.drain_runner('local')" >/dev/null
	binv=$(run "$B" python 'print("namespaced")')
	q -c "SELECT agent.drain_runner('local', resume => true)" >/dev/null
	check "... while it runs a namespaced run" "succeeded|namespaced|$NOGV" \
		"$(field "$binv" state)|$(output "$binv")|$(field "$binv" runner_id)"
	check "the gvisor run is still approved, uncharged, on no runner" "approved|0|" \
		"$(field "$GV_INV" "state || '|' || credits_charged || '|' || coalesce(runner_id::text, '')")"
}

# The runner with runsc (root) reports gvisor and runs the waiting run on
# gVisor's kernel; the result, its output and its file come back as any run's.
# It starts with runsc_path at nothing (runsc not installed yet): a SIGHUP
# after the fix probes again, no restart.
t_runs_on_gvisor() {
	local GV res out pid
	[ -n "$GV_INV" ] || { nok "needs t_waits_without_runsc"; return; }
	GV=$(host_up 1 "runsc_path = '/nonexistent/runsc'")
	check "the root runner, its runsc_path at nothing: namespaces only" \
		"namespaces|gvisor: runsc not found at /nonexistent/runsc (No such file or directory)" "$(classes "$GV")"
	check "... and it does not take the gvisor run" "approved|" \
		"$(field "$GV_INV" "state || '|' || coalesce(runner_id::text, '')")"
	pid=$(rh_pid 1)
	rh_conf 1 2
	kill -HUP "$pid"
	wait_for 60 '[ "$(classes "$GV")" = "namespaces,gvisor|" ]'
	check "runsc_path fixed, a SIGHUP: the same runner (no restart) reports both classes" \
		"namespaces,gvisor||$pid" "$(classes "$GV")|$(rh_pid 1)"
	res=$(await "$GV_TENANT" "$GV_INV" 180)
	check "the gvisor run succeeds, on that runner, charged (served by its launcher)" "succeeded|$GV|2|" \
		"$res|$(field "$GV_INV" runner_id)|$(field "$GV_INV" credits_charged)|$(field "$GV_INV" "coalesce(state_reason, '')")"
	out=$(output "$GV_INV")
	check "it ran on gVisor's kernel, not the host's, and not as root" "other kernel|uid True" \
		"$([ "$(sed -n 1p <<<"$out")" != "kernel $(uname -r)" ] && grep -q '^kernel ' <<<"$out" && echo other kernel)|$(sed -n 2p <<<"$out")"
	check "its produced file is stored" "report.txt" \
		"$(q -c "SELECT string_agg(name, ',') FROM agent.files WHERE invocation_id = '$GV_INV' AND origin = 'produced'")"
	check "the runner without runsc never held it" "" \
		"$(q -c "SELECT string_agg(DISTINCT runner_id::text, ',') FROM agent.invocations WHERE id = '$GV_INV' AND runner_id = '$NOGV'")"
}

# What --check says on each host.
t_check() {
	local out
	out=$(rh_in 2 "$RH_RUNNER" --config "$RH_DIR/h2/runner.conf" --check 2>&1)
	check "--check without runsc: a warn naming the reason" 1 \
		"$(grep -c '^warn  the gvisor isolation class: gvisor: runsc not found at /nonexistent/runsc' <<<"$out")"
	out=$(rh_in 1 "$RH_RUNNER" --config "$RH_DIR/h1/runner.conf" --check 2>&1)
	check "--check with runsc (root): ok" 1 "$(grep -c '^ok    the gvisor isolation class: /usr/bin/runsc runs a program' <<<"$out")"
}

run_tests t_waits_without_runsc t_runs_on_gvisor t_check
finish_suite
