#!/usr/bin/env bash
# Execution through the real supervisor worker and the real jail, on the
# cluster test/run.sh started: languages, exit codes, timeout, provisioning
# failure, insufficient credits, hash mismatch, cancel, streaming, the
# concurrency cap, recovery after the worker is killed and after an
# immediate-mode restart, and the credit/audit invariants after all of it.
# T=REGEX runs only the matching tests (test/lib.sh).  Ends with
# "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"

pg_ctl() { as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" "$@"; }

tmp=$(mktemp -d /tmp/sandbox_sup.XXXXXX)
chmod 0755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
if ! cc -O2 -Wall -Werror -o "$tmp/listen" "$top/test/tools/listen.c" \
	-I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq; then
	nok "build the listen tool"
	finish_suite
fi

wait_for 10 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
SINCE=$(q -c "SELECT now()")
WORK=$(q -c "SELECT work_dir FROM agent.worker_status()")
# The suite's tenant; its runs have no conversation (each gets a fresh
# workspace and none waits for another of a conversation).
A="$(cut -d' ' -f1-3 <<<"$(new_tenant 1000)") none"
read -r ORG WS AGENT _ <<<"$A"

balance() { q -c "SELECT balance FROM agent.credit_balances WHERE org_id = '${1:-$ORG}'"; }
launcher_up() {
	pgrep -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_runner/jail.sock" >/dev/null &&
		echo t || echo f
}

t_worker() {
	check "supervisor is running" t "$(q -c 'SELECT running FROM agent.worker_status()')"
	check "the work directory is on a filesystem of its own" "t|" \
		"$([ "$(stat -c %d "$WORK")" != "$(stat -c %d "$CLUSTER_DIR/data")" ] && echo t || echo f)|$(q -c "SELECT problem FROM agent.worker_status()")"
	check "supervisor in pg_stat_activity" 1 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sandbox_ext supervisor'")"
	# Every sandbox is run by sandbox-runner: the supervisor starts the
	# local one, which connects back as a client.
	wait_for 10 "[ \"\$(q -c \"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sandbox-runner local' AND backend_type = 'client backend'\")\" = 1 ]"
	check "the local runner is connected (pg_stat_activity, application_name sandbox-runner local)" 1 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sandbox-runner local' AND backend_type = 'client backend'")"
	check "... and is the supervisor's child, outside the server's processes" \
		"$(q -c 'SELECT pid FROM agent.worker_status()')|sandbox-runner" \
		"$(ps -o ppid= -p "$(local_runner_pid)" | tr -d ' ')|$(ps -o comm= -p "$(local_runner_pid)")"
}

# The local sandbox-runner (the supervisor's child).
local_runner_pid() { pgrep -o -u postgres -f -- "sandbox-runner --local --config $CLUSTER_DIR/data/sandbox_runner/runner.conf"; }

t_languages() {
	local inv
	inv=$(run "$A" python 'import sys, pandas, numpy; print("py", sys.version_info[0], numpy.arange(3).sum())')
	check "python succeeds" succeeded "$(field "$inv" state)"
	check "python output" "py 3 3" "$(output "$inv")"
	check "python charged 2 credits" 2 "$(field "$inv" credits_charged)"
	check "tool call row" "1|succeeded|0" "$(q -c "SELECT count(*), min(status), min(exit_code) FROM agent.agent_tool_calls WHERE invocation_id = '$inv'")"
	check "tool call input hash is the code's sha256" t \
		"$(q -c "SELECT t.input_hash = agent.code_sha256(i.code) FROM agent.agent_tool_calls t JOIN agent.invocations i ON i.id = t.invocation_id WHERE i.id = '$inv'")"
	check "analytics row" "python|succeeded|2" \
		"$(q -c "SELECT language, status, credits_charged FROM agent.tool_invocations WHERE invocation_id = '$inv'")"

	inv=$(run "$A" node 'console.log("node", 6 * 7)')
	check "node succeeds" "succeeded|node 42" "$(field "$inv" state)|$(output "$inv")"
	inv=$(run "$A" shell 'echo "sh $((6 * 7))"; echo oops >&2')
	check "shell succeeds, stderr separate" "succeeded|sh 42|oops" "$(field "$inv" state)|$(output "$inv")|$(output "$inv" stderr)"
}

# The resident launcher and the one-shot jail.
t_launcher() {
	local inv
	run "$A" shell 'true' >/dev/null	# the launcher starts with the first run
	check "runs go through the resident launcher (sandbox.jail_launcher = on)" t "$(launcher_up)"
	check "... a child of the local runner, not of a PostgreSQL process" "$(local_runner_pid)" \
		"$(ps -o ppid= -p "$(pgrep -o -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_runner/jail.sock")" | tr -d ' ')"
	setconf sandbox.jail_launcher off
	inv=$(run "$A" python 'print("one-shot")')
	check "with the launcher off, one-shot jails run the code" "succeeded|one-shot" "$(field "$inv" state)|$(output "$inv")"
	check "and the launcher is stopped" f "$(launcher_up)"
	inv=$(run "$A" shell 'sleep 30' none 1)
	check "one-shot timeout is timed_out" timed_out "$(field "$inv" state)"
	resetconf sandbox.jail_launcher
}

t_outcomes() {
	local inv stored
	inv=$(run "$A" shell 'exit 3')
	check "exit code 3 fails, charged" "failed|3|2" "$(field "$inv" "state || '|' || exit_code || '|' || credits_charged")"

	inv=$(run "$A" python 'import time; time.sleep(30)' none 1)
	check "timeout is timed_out and charged" "timed_out|1|2" "$(field "$inv" "state || '|' || timed_out::int || '|' || credits_charged")"

	inv=$(run "$A" shell 'head -c 3000000 /dev/zero | tr "\0" x')
	check "output over the limit is truncated" "succeeded|1" "$(field "$inv" "state || '|' || output_truncated::int")"
	stored=$(q -c "SELECT coalesce(sum(octet_length(data)), 0) FROM agent.invocation_output WHERE invocation_id = '$inv'")
	if [ "$stored" -le $((1024 * 1024)) ] && [ "$stored" -gt 0 ]; then
		ok "stored output within sandbox.output_limit ($stored bytes)"
	else
		nok "stored output within limit" "$stored"
	fi
}

# The start report (sandbox.start_report_delay, docs/execution.md step 2).
# With a delay longer than the run, it is never reported running while it
# runs and its finish records everything in one transaction: the output
# that waited, the start (from the verdict's wall time) and its audit
# event, the end.  With no delay it is reported at its start and its output
# streams.  The durations here are the runs' own sleeps, not timings of
# ours: the checks hold however slow the machine is.
report_delay() {		# VALUE|reset AS-WRITTEN: the runner has it once its file does
	if [ "$1" = reset ]; then resetconf sandbox.start_report_delay; else setconf sandbox.start_report_delay "$1"; fi
	wait_for 10 "grep -qx 'start_report_delay = $2' '$CLUSTER_DIR/data/sandbox_runner/runner.conf'" ||
		nok "the runner's file has start_report_delay = $2"
	sleep 0.5			# (read by the runner at its next turn)
}
t_start_report() {
	local inv seen
	report_delay 60s 60000ms
	inv=$(start "$A" shell 'sleep 4; echo done')
	wait_state "$inv" provisioning 100
	seen=$(for _ in $(seq 1 5); do field "$inv" state; sleep 0.1; done | sort -u | tr '\n' ' ')
	await "$A" "$inv" >/dev/null
	check "a run shorter than the delay is not reported running while it runs" "provisioning " "$seen"
	check "... and ends succeeded, its output stored" "succeeded|done" "$(field "$inv" state)|$(output "$inv")"
	# (finished_at is its transaction's start, an output row's created_at
	# the clock at its insert: one stored by an earlier transaction is older)
	check "... its output, start and end in one transaction (its finish)" 1 \
		"$(q -c "SELECT count(*) FROM agent.invocation_output o JOIN agent.invocations i ON i.id = o.invocation_id WHERE i.id = '$inv' AND o.created_at >= i.finished_at")"
	check "... started when its verdict says: the run's own 4 s before its end, after its claim" t \
		"$(field "$inv" "started_at >= provisioned_at AND finished_at - started_at >= interval '3.9 s' AND started_at <= finished_at")"
	check "... audited in order, the start reported with the finish" \
		"invocation.provisioned,invocation.started:true,invocation.finished" \
		"$(q -c "SELECT string_agg(event_type || coalesce(':' || (details ->> 'reported_with_finish'), ''), ',' ORDER BY id) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type LIKE 'invocation.%'")"
	check "... its analytics row has the run's duration" t \
		"$(q -c "SELECT duration_ms >= 3900 FROM agent.tool_invocations WHERE invocation_id = '$inv'")"

	report_delay 0 0ms
	inv=$(start "$A" shell 'echo early; sleep 3; echo late')
	if wait_state "$inv" running 100; then
		ok "with no delay, a run is reported running while it runs"
	else
		nok "with no delay, a run is reported running while it runs" "$(field "$inv" state)"
	fi
	await "$A" "$inv" >/dev/null
	check "... its first line stored before its end (streamed)" t \
		"$(q -c "SELECT min(o.created_at) < i.finished_at FROM agent.invocation_output o JOIN agent.invocations i ON i.id = o.invocation_id WHERE i.id = '$inv' GROUP BY i.finished_at")"
	check "... its start audited once, by the report" "invocation.provisioned,invocation.started,invocation.finished" \
		"$(q -c "SELECT string_agg(event_type || coalesce(':' || (details ->> 'reported_with_finish'), ''), ',' ORDER BY id) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type LIKE 'invocation.%'")"
	report_delay reset 20ms
}

# sandbox.require_cgroup on and no cgroup the jail may use: every run ends
# provision_failed, refunded, with the jail's reason; off, it runs with
# rlimits only and the verdict says so.  This host's jails do get cgroups
# (v1, jail-host-setup.sh), and its delegation is shared with everything
# else here: fault injection instead, the real jail (one-shot) started
# through a wrapper that adds --cgroup-parent naming a directory that is no
# cgroup, which it refuses as it refuses an undelegated one (the cgroup-v2
# suite runs the undelegated case itself).
t_require_cgroup() {
	local before inv
	mkdir -p "$tmp/nocg/plain"
	printf '#!/bin/sh\nexec %s "$@" --cgroup-parent %s\n' "$PGBIN/sandbox-jail" "$tmp/nocg/plain" > "$tmp/nocg/jail"
	chmod 0755 "$tmp/nocg/jail"
	check "sandbox.require_cgroup is on by default" on "$(q -c 'SHOW sandbox.require_cgroup')"
	setconf sandbox.jail_launcher off
	setconf sandbox.jail_path "$tmp/nocg/jail"
	before=$(balance)
	inv=$(run "$A" shell 'echo never')
	check "require_cgroup on, no usable cgroup: provision_failed, refunded, the jail's reason" \
		"provision_failed|0|$before|charge:-2,refund:2|t|" \
		"$(field "$inv" state)|$(field "$inv" credits_charged)|$(balance)|$(ledger "$inv")|$(field "$inv" "state_reason LIKE '%$tmp/nocg/plain is not a cgroup directory%'")|$(output "$inv")"
	check "... audited as invocation.provision_failed with the jail's verdict" "1|setup_error" \
		"$(q -c "SELECT count(*) || '|' || max(details -> 'verdict' ->> 'status') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.provision_failed'")"
	setconf sandbox.require_cgroup off
	inv=$(run "$A" shell 'echo rlimits only')
	resetconf sandbox.require_cgroup
	check "require_cgroup off: the same run goes on with rlimits only, charged, the verdict's cgroup none" \
		"succeeded|rlimits only|2|none" \
		"$(field "$inv" state)|$(output "$inv")|$(field "$inv" credits_charged)|$(q -c "SELECT details -> 'verdict' ->> 'cgroup' FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.finished'")"
	resetconf sandbox.jail_path
	resetconf sandbox.jail_launcher
	inv=$(run "$A" shell 'echo back')
	check "... and back to the installed jail: runs get their cgroup again" "succeeded|back|t" \
		"$(field "$inv" state)|$(output "$inv")|$(q -c "SELECT details -> 'verdict' ->> 'cgroup' IN ('v1', 'v2') FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.finished'")"
}

# Provisioning failure: the jail cannot be executed → refunded.
t_missing_jail() {
	local before inv
	before=$(balance)
	setconf sandbox.jail_path /nonexistent/sandbox-jail
	inv=$(run "$A" shell 'echo never')
	resetconf sandbox.jail_path
	check "missing jail is provision_failed" provision_failed "$(field "$inv" state)"
	check "provision_failed is refunded (net 0)" "0|$before" "$(field "$inv" credits_charged)|$(balance)"
	check "ledger has charge and refund" "charge:-2,refund:2" "$(ledger "$inv")"
	inv=$(run "$A" shell 'echo back')
	check "supervisor keeps serving after a bad invocation" "succeeded|back" "$(field "$inv" state)|$(output "$inv")"
}

# An unusable work directory: nothing is claimed (the run waits, uncharged)
# and worker_status() says why; once it is usable again the run runs.
t_unusable_work_dir() {
	local before inv st
	before=$(balance)
	setconf sandbox.work_dir /proc/sandbox_not_here
	inv=$(start "$A" shell 'echo waited')
	st=$(await "$A" "$inv" 3)
	check "unusable work directory: the run waits, uncharged" "approved|0|$before" \
		"$st|$(field "$inv" credits_charged)|$(balance)"
	check "worker_status() names the directory and why" t \
		"$(q -c "SELECT problem LIKE '%/proc/sandbox_not_here%' FROM agent.worker_status()")"
	resetconf sandbox.work_dir
	check "once usable again, the waiting run runs" "succeeded|waited" "$(await "$A" "$inv")|$(output "$inv")"
	check "... and worker_status() has no problem" "" "$(q -c "SELECT problem FROM agent.worker_status()")"
}

# Insufficient credits: nothing charged, nothing run.  A request the balance
# cannot cover is refused at once (a returned status, audited); a balance
# that falls after the request ends the approved run at the claim.
t_insufficient_credits() {
	local poor org ws agent inv appr
	poor=$(new_tenant 1)
	read -r org ws agent _ <<<"$poor"
	check "a request the balance cannot cover is refused at once" "denied|insufficient_credits|53000|" \
		"$(tq "$org" "$ws" "SELECT status || '|' || reason || '|' || sqlstate || '|' || coalesce(invocation_id::text, '') FROM agent.request_execution('$ws', '$agent', NULL, 'shell', 'echo should-not-run', 'requester');" | tail -n 1)"
	q -c "SELECT agent.grant_credits('$org', 1, 'test')" >/dev/null		# 2: enough to ask
	read -r inv appr < <(req "$poor" shell 'echo should-not-run' none)
	# The balance falls below the price before the approval.
	q -c "INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES ('$org', 'adjust', -1, 'test')" >/dev/null
	approve "$poor" "$appr"
	await "$poor" "$inv" >/dev/null
	check "insufficient credits at the claim" "insufficient_credits|0|1" \
		"$(field "$inv" state)|$(q -c "SELECT count(*) FROM agent.credit_ledger WHERE invocation_id = '$inv'")|$(balance "$org")"
	check "insufficient credits ran nothing" 0 "$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"
}

# Code swapped after approval (by someone able to bypass the freeze
# trigger): the supervisor refuses to run it.
t_hash_mismatch() {
	local inv appr st
	read -r inv appr < <(req "$A" shell 'echo approved-code')
	q <<SQL >/dev/null
BEGIN;
SELECT agent.set_tenant('$ORG', '$WS');
SELECT agent.approve('$appr', 'approver');
SET LOCAL session_replication_role = replica;
UPDATE agent.invocations SET code = 'echo EVIL' WHERE id = '$inv';
COMMIT;
SQL
	st=$(await "$A" "$inv")
	check "hash mismatch refused, uncharged" "provision_failed|0" "$st|$(field "$inv" credits_charged)"
	check "hash mismatch ran nothing" 0 "$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"
	check "hash mismatch audited" 1 "$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.hash_mismatch'")"
}

t_cancel() {
	local inv appr st final
	read -r inv appr < <(req "$A" shell 'echo never')
	st=$(tq "$ORG" "$WS" "SELECT agent.cancel('$inv', 'requester', 'changed my mind');")
	check "cancel before approval" "cancelled|cancelled|0" "$st|$(field "$inv" state)|$(field "$inv" credits_charged)"

	inv=$(start "$A" shell 'echo started; sleep 60')
	wait_state "$inv" running 100
	st=$(tq "$ORG" "$WS" "SELECT agent.cancel('$inv', 'requester');")
	final=$(await "$A" "$inv" 20)
	check "cancel while running" "cancelling|cancelled|2" "$st|$final|$(field "$inv" credits_charged)"
	check "cancel of a finished invocation is an error" "55000 invocation $inv has already finished" \
		"$(tq_error "$ORG" "$WS" "SELECT agent.cancel('$inv', 'requester');")"
}

# A wait that ends before the run does: wait() returns the state so far,
# wait_result() says not finished with that state; once the run has ended,
# finished.  (issue 27: the column was timed_out, which everywhere else means
# the run timed out.)  (No timing asserted: the run sleeps a minute and is
# cancelled; the waits are a fraction of a second.)
t_wait_timeout() {
	local inv
	inv=$(start "$A" shell 'echo started; sleep 60')
	wait_state "$inv" running 100
	wait_for 30 '[ "$(output "$inv")" = started ]'
	check "wait() past its timeout returns the state so far" running \
		"$(tq "$ORG" "$WS" "SELECT agent.wait('$inv', '200 ms');" | tail -n 1)"
	check "wait_result() past its timeout: not finished, the state and output so far" "running|false|started" \
		"$(tq "$ORG" "$WS" "SELECT r.state || '|' || r.finished || '|' || rtrim(r.stdout, E'\\n') FROM agent.wait_result('$inv', '200 ms') r;" |
			tail -n 1)"
	tq "$ORG" "$WS" "SELECT agent.cancel('$inv', 'requester', 'waited enough');" >/dev/null
	check "... and once the run has ended, finished" "cancelled|true" \
		"$(tq "$ORG" "$WS" "SELECT r.state || '|' || r.finished FROM agent.wait_result('$inv', '30 s') r;" | tail -n 1)"
	inv=$(start "$A" shell 'sleep 30' '' 1)
	check "a run that hit its wall time: state timed_out, and finished (one meaning for timed_out); no output is '', not NULL" \
		"timed_out|true|[]|[]" \
		"$(tq "$ORG" "$WS" "SELECT r.state || '|' || r.finished || '|[' || coalesce(r.stdout, 'NULL') || ']|[' || coalesce(r.stderr, 'NULL') || ']' FROM agent.wait_result('$inv', '60 s') r;" | tail -n 1)"
	check "run_result has no timed_out column any more" 0 \
		"$(q -c "SELECT count(*) FROM pg_attribute WHERE attrelid = 'agent.run_result'::regclass AND attname = 'timed_out'")"
}

t_streaming() {
	local inv appr channel lpid first_ms done_ms
	read -r inv appr < <(req "$A" python 'import time
print("first", flush=True)
time.sleep(2)
print("second", flush=True)')
	channel=$(tq "$ORG" "$WS" "SELECT agent.output_channel('$inv');")
	as_pg "$tmp/listen" "host=$CLUSTER_DIR port=$PORT user=postgres dbname=$DB" "$channel" 60 >"$tmp/notes" 2>"$tmp/listen.err" &
	lpid=$!
	for _ in $(seq 1 50); do grep -q ready "$tmp/listen.err" 2>/dev/null && break; sleep 0.1; done
	approve "$A" "$appr"
	await "$A" "$inv" >/dev/null
	# The end's hint is sent when the finish commits, as wait() returns: give
	# it a moment to arrive (bounded), then stop the listener.
	for _ in $(seq 1 50); do grep -q ' done$' "$tmp/notes" && break; sleep 0.1; done
	kill "$lpid" 2>/dev/null
	wait "$lpid" 2>/dev/null
	first_ms=$(grep -m1 ' output$' "$tmp/notes" | cut -d' ' -f1)
	done_ms=$(grep -m1 ' done$' "$tmp/notes" | cut -d' ' -f1)
	if [ -n "$first_ms" ] && [ -n "$done_ms" ] && [ $((done_ms - first_ms)) -ge 1500 ]; then
		ok "first line notified $((done_ms - first_ms)) ms before the end (streamed, not at the end)"
	else
		nok "output streamed before the end" "first=$first_ms done=$done_ms: $(cat "$tmp/notes")"
	fi
	check "streamed chunks complete and ordered" "first
second" "$(tq "$ORG" "$WS" "SELECT string_agg(data, '' ORDER BY seq) FROM agent.read_output('$inv', 0);")"
	check "notifications carry no output" 0 "$(grep -c 'first\|second' "$tmp/notes")"
	check "a notification carries a hint only (output or done: no seq, stream, size or state)" "0|1" \
		"$(grep -cvE '^[0-9]+ (output|done)$' "$tmp/notes")|$(grep -c ' done$' "$tmp/notes")"
	check "the channel is not named after the invocation" f \
		"$([[ -z "$channel" || "$channel" == *"$inv"* || "$channel" == *"${inv//-/}"* ]] && echo t || echo f)"
}

# The approvers of a workspace learn of each new card at commit, on the
# workspace's approvals channel: the card's id as the payload, nothing for a
# request that rolls back (request_execution() sends it itself).
t_card_notify() {
	local channel lpid appr
	channel=$(tq "$ORG" "$WS" "SELECT agent.approvals_channel();")
	as_pg "$tmp/listen" "host=$CLUSTER_DIR port=$PORT user=postgres dbname=$DB" "$channel" 60 >"$tmp/cards" 2>"$tmp/cards.err" &
	lpid=$!
	for _ in $(seq 1 50); do grep -q ready "$tmp/cards.err" 2>/dev/null && break; sleep 0.1; done
	printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\nSELECT agent.request_execution('%s', '%s', NULL, 'shell', 'echo rolled-back', 'requester');\nROLLBACK;\n" \
		"$ORG" "$WS" "$WS" "$AGENT" | q -f - >/dev/null
	read -r _ appr < <(req "$A" shell 'echo carded')
	for _ in $(seq 1 50); do grep -q " $appr\$" "$tmp/cards" && break; sleep 0.1; done
	kill "$lpid" 2>/dev/null
	wait "$lpid" 2>/dev/null
	check "a new card is announced once on its workspace's approvals channel, with its id" "1|1" \
		"$(grep -c " $appr\$" "$tmp/cards")|$(wc -l <"$tmp/cards")"
	tq "$ORG" "$WS" "SELECT agent.deny('$appr', 'approver', 'notify test');" >/dev/null
}

# A notification is only a hint: forged ones do not end a client.
# scripts/follow.sh is the demo's (and the docs') client.  Once the run has
# printed its first line, NOTIFY a forged end on the old, guessable channel
# (sandbox_output_<id>) and, as someone who learned it, on the real one.
# The client must keep following (it reads the state, still running) and
# end with the real final state.
t_forged_notify() {
	local inv appr fpid channel rc
	read -r inv appr < <(req "$A" python 'import time
print("first", flush=True)
time.sleep(25)
print("second", flush=True)')
	"$top/scripts/follow.sh" "$tmp/listen" "$ORG" "$WS" "$inv" 60 >"$tmp/follow.out" 2>"$tmp/follow.err" &
	fpid=$!
	for _ in $(seq 1 100); do grep -q '^ready$' "$tmp/follow.err" 2>/dev/null && break; sleep 0.1; done
	approve "$A" "$appr"
	for _ in $(seq 1 200); do grep -q $'^stdout\tfirst$' "$tmp/follow.out" && break; sleep 0.1; done
	channel=$(tq "$ORG" "$WS" "SELECT agent.output_channel('$inv');")
	q -c "NOTIFY \"sandbox_output_$inv\", '{\"done\":true,\"state\":\"succeeded\"}'" >/dev/null
	q -c "SELECT pg_notify('$channel', 'done'), pg_notify('$channel', '{\"done\":true,\"state\":\"succeeded\"}')" >/dev/null
	# What the client did after the second forged end: it looked at the state.
	after_forged() { awk '/^hint .*done/ { n++; next } n >= 2 && /^look / { print $2; exit }' "$tmp/follow.err"; }
	for _ in $(seq 1 100); do [ -n "$(after_forged)" ] && break; sleep 0.1; done
	check "the forged ends reached the client" 2 "$(grep -c '^hint .*done' "$tmp/follow.err")"
	check "after them it read the state (running) and kept following" "running|running|alive" \
		"$(after_forged)|$(field "$inv" state)|$(kill -0 "$fpid" 2>/dev/null && echo alive || echo gone)"
	tq "$ORG" "$WS" "SELECT agent.cancel('$inv', 'requester');" >/dev/null
	wait "$fpid"
	rc=$?
	check "the client ends with the real final state" "0|cancelled" \
		"$rc|$(grep $'^state\t' "$tmp/follow.out" | cut -f2)"
	check "and printed the real output only" "stdout	first" "$(grep -v $'^state\t' "$tmp/follow.out")"
}

# The execution API from another tenant's side.
t_tenancy() {
	local inv other o3 w3
	inv=$(run "$A" shell 'echo mine')
	other=$(new_tenant 0)
	read -r o3 w3 _ <<<"$other"
	check "(the run has output rows to hide)" "succeeded|mine" "$(field "$inv" state)|$(output "$inv")"
	check "another tenant cannot read the output" "P0002 invocation $inv does not exist" \
		"$(tq_error "$o3" "$w3" "SELECT * FROM agent.read_output('$inv', 0);")"
	check "another tenant cannot cancel" "P0002 invocation $inv does not exist" \
		"$(tq_error "$o3" "$w3" "SELECT agent.cancel('$inv', 'x');")"
	check "another tenant cannot wait on it" "P0002 invocation $inv does not exist" \
		"$(tq_error "$o3" "$w3" "SELECT agent.wait('$inv', '1 s');")"
	check "another tenant sees no output rows (RLS)" 0 \
		"$(tq "$o3" "$w3" "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv';")"
	check "wait on a null invocation is an error" "22004 invocation and timeout must not be null" \
		"$(tq_error "$ORG" "$WS" "SELECT agent.wait(NULL);")"
}

# The slot cap, observed rather than timed: four long runs of two orgs
# (each under its own org limit of 2), with sandbox.max_concurrent_runs 2:
# two run and two wait, however slow the machine; then cancelled.  (It ran
# four one-second runs and measured their overlap, which a loaded machine
# could make 1.)
t_concurrency_cap() {
	local B ids=() i list maxslots=0 s org ws
	B="$(cut -d' ' -f1-3 <<<"$(new_tenant 100)") none"
	setconf sandbox.max_concurrent_runs 2
	for i in 1 2; do
		ids+=("$(start "$A" shell 'sleep 120')" "$(start "$B" shell 'sleep 120')")
	done
	list=$(printf "'%s'," "${ids[@]}" | sed 's/,$//')
	running() { q -c "SELECT count(*) FROM agent.invocations WHERE id IN ($list) AND state = 'running'"; }
	wait_for 120 '[ "$(running)" -ge 2 ]'
	for _ in $(seq 1 20); do		# and it stays so a while
		s=$(q -c "SELECT slots_in_use FROM agent.worker_status()")
		[ "$s" -gt "$maxslots" ] && maxslots=$s
		sleep 0.1
	done
	check "concurrency cap 2 honoured: two runs of four run, two wait (two orgs, each under its own limit)" "2|2|2" \
		"$(running)|$(q -c "SELECT count(*) FROM agent.invocations WHERE id IN ($list) AND state = 'approved'")|$maxslots"
	read -r org ws _ <<<"$A"
	tq "$org" "$ws" "SELECT count(agent.cancel(id, 'requester')) FROM agent.invocations WHERE id IN ($list) AND org_id = '$org' AND NOT agent._state_is_terminal(state);" >/dev/null
	read -r org ws _ <<<"$B"
	tq "$org" "$ws" "SELECT count(agent.cancel(id, 'requester')) FROM agent.invocations WHERE id IN ($list) AND org_id = '$org' AND NOT agent._state_is_terminal(state);" >/dev/null
	wait_for 60 '[ "$(q -c "SELECT count(*) FROM agent.invocations WHERE id IN ($list) AND NOT agent._state_is_terminal(state)")" -eq 0 ]'
	resetconf sandbox.max_concurrent_runs
}

t_recovery_worker_killed() {
	local marker inv oldpid newpid st
	marker="sbx-recovery-$$"
	inv=$(start "$A" shell "exec -a $marker sleep 120")
	wait_state "$inv" running 100
	check "(its payload runs)" 1 "$(pgrep -fc "$marker")"
	oldpid=$(q -c "SELECT pid FROM agent.worker_status()")
	q -c "SELECT pg_terminate_backend($oldpid)" >/dev/null
	for _ in $(seq 1 100); do
		newpid=$(q -c "SELECT coalesce(pid, 0) FROM agent.worker_status()")
		[ "$newpid" != 0 ] && [ "$newpid" != "$oldpid" ] && break
		sleep 0.1
	done
	st=$(await "$A" "$inv" 20)
	check "worker killed mid-run: a failure of ours, refunded (charged once, refunded once)" \
		"provision_failed|the runner \"local\" restarted|0|charge:-2,refund:2" \
		"$st|$(field "$inv" state_reason)|$(field "$inv" credits_charged)|$(ledger "$inv")"
	# The payload dies with its jail (PR_SET_PDEATHSIG); give a loaded machine time.
	for _ in $(seq 1 50); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
	check "no orphan payload after the worker died" 0 "$(pgrep -fc "$marker" || true)"
	check "worker restarted with a new pid" t "$([ "$newpid" != "$oldpid" ] && [ "$newpid" != 0 ] && echo t || echo f)"
}

t_recovery_immediate_restart() {
	local marker inv st
	marker="sbx-recovery-$$-2"
	inv=$(start "$A" shell "exec -a $marker sleep 120")
	wait_state "$inv" running 100
	check "(its payload runs)" 1 "$(pgrep -fc "$marker")"
	pg_ctl -m immediate -w stop >/dev/null 2>&1
	for _ in $(seq 1 50); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
	check "no orphan payload after an immediate shutdown" 0 "$(pgrep -fc "$marker" || true)"
	pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
	for _ in $(seq 1 100); do
		st=$(field "$inv" state 2>/dev/null)
		[ "$st" = provision_failed ] && break
		sleep 0.2
	done
	check "after crash restart the row is resolved, refunded" "provision_failed|0" "$st|$(field "$inv" credits_charged)"
	inv=$(run "$A" shell 'echo alive')
	check "runs again after the restart" "succeeded|alive" "$(field "$inv" state)|$(output "$inv")"
	check "no leftover work directories" "t|0" \
		"$([ -d "$WORK" ] && echo t)|$(find "$WORK" -mindepth 1 -maxdepth 1 ! -name sessions ! -name skills ! -name launcher | wc -l)"
}

# The local runner is a runner like any other: frozen (SIGSTOP) past its
# lease, the bgworker's reaper ends its run by the billing rule (ours
# failed: refunded); thawed, it kills that sandbox itself (self-fencing),
# its late writes are refused, nothing is charged twice, and it goes on.
t_lease_lost() {
	local marker inv rpid st n t0
	marker="sbx-lease-$$"
	setting runner_lease_seconds 6
	t0=$(q -c "SELECT clock_timestamp()")
	# the lease reaches the runner with its next heartbeat (every 10 s at 30 s)
	wait_for 15 "[ \"\$(q -c \"SELECT count(*) FROM agent.runners WHERE name = 'local' AND last_heartbeat > '$t0'\")\" = 1 ]"
	inv=$(start "$A" shell "exec -a $marker sleep 120")
	wait_state "$inv" running 100
	check "(its payload runs)" 1 "$(pgrep -fc "$marker")"
	rpid=$(local_runner_pid)
	kill -STOP "$rpid"
	for _ in $(seq 1 100); do
		st=$(field "$inv" state)
		[ "$st" = provision_failed ] && break
		sleep 0.2
	done
	check "a frozen runner's run ends when its lease expires: ours failed, refunded" \
		"provision_failed|the runner \"local\" stopped renewing its lease|0|charge:-2,refund:2" \
		"$st|$(field "$inv" state_reason)|$(field "$inv" credits_charged)|$(ledger "$inv")"
	check "... by the bgworker's reaper, audited" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.provision_failed' AND details::text LIKE '%stopped renewing its lease%'")"
	check "(the sandbox still runs while its runner is frozen)" 1 "$(pgrep -fc "$marker")"
	n=$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")
	kill -CONT "$rpid"
	for _ in $(seq 1 50); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
	check "thawed, the runner kills the orphaned sandbox itself" 0 "$(pgrep -fc "$marker" || true)"
	check "... the same process (not restarted)" "$rpid" "$(local_runner_pid)"
	check "... its late writes are refused: state, charge and output unchanged" \
		"provision_failed|0|charge:-2,refund:2|$n" \
		"$(field "$inv" state)|$(field "$inv" credits_charged)|$(ledger "$inv")|$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"
	check "... one outcome event" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type IN ('invocation.finished', 'invocation.provision_failed')")"
	setting runner_lease_seconds 30
	inv=$(run "$A" shell 'echo after-the-lease')
	check "... and it runs the next one" "succeeded|after-the-lease" "$(field "$inv" state)|$(output "$inv")"
	check "the runner is live, holding no lease" "t|0" \
		"$(q -c "SELECT live || '|' || leases FROM agent.runner_status WHERE name = 'local'" | sed 's/true/t/')"
}

# A drained runner claims nothing, finishes what it runs and says so;
# resumed, it claims again.  The local runner is drained like any other.
t_drain() {
	local inv st
	q -c "SELECT agent.drain_runner('local')" >/dev/null
	# its next heartbeat (every 10 s) tells it; worker_status() says so then
	wait_for 20 '[ "$(q -c "SELECT problem LIKE '"'"'%draining%'"'"' FROM agent.worker_status()")" = t ]'
	check "drained: worker_status() says the local runner claims nothing" \
		"the runner is draining: it claims nothing (agent.drain_runner)" "$(q -c "SELECT problem FROM agent.worker_status()")"
	inv=$(start "$A" shell 'echo after-the-drain')
	sleep 3
	check "... an approved run waits, uncharged" "approved|0" "$(field "$inv" state)|$(field "$inv" credits_charged)"
	check "... and the runner said it is drained" 1 \
		"$(grep -c 'runner "local" is drained: it runs nothing and claims nothing' "$CLUSTER_DIR/server.log" | tr -d ' ' | sed 's/^[1-9][0-9]*$/1/')"
	q -c "SELECT agent.drain_runner('local', resume => true)" >/dev/null
	st=$(await "$A" "$inv" 30)
	check "resumed, it runs the waiting one" "succeeded|after-the-drain|" \
		"$st|$(output "$inv")|$(q -c "SELECT problem FROM agent.worker_status()")"
}

# sandbox-runner --check against this cluster: with a runner's role
# everything is there; with a role that is not a runner it says so and
# exits 1.
t_check() {
	local conf out rc role
	role=sbx_check_runner_$$
	q -c "CREATE ROLE $role LOGIN" -c "GRANT agent_runner TO $role" >/dev/null
	conf="$tmp/check.conf"
	cat >"$conf" <<CONF
conninfo = 'host=$CLUSTER_DIR port=$PORT dbname=$DB user=$role'
name = 'check-probe'
slots = 1
work_dir = '$tmp/check-work'
run_dir = '$tmp/check-run'
jail_path = '$PGBIN/sandbox-jail'
CONF
	chmod 0644 "$conf"
	mkdir -p "$tmp/check-run" "$tmp/check-work"
	chown postgres: "$tmp/check-run" "$tmp/check-work"
	out=$(as_pg "$PGBIN/sandbox-runner" --config "$conf" --check 2>&1); rc=$?
	check "--check with a runner's role: the connection, the role's steps and the name are there" "ok|ok|ok" \
		"$(grep -c '^ok  *the connection' <<<"$out" | sed 's/^1$/ok/')|$(grep -c "^ok  *the runner's steps" <<<"$out" | sed 's/^1$/ok/')|$(grep -c '^ok  *the name' <<<"$out" | sed 's/^1$/ok/')"
	q -c "REVOKE agent_runner FROM $role" >/dev/null
	out=$(as_pg "$PGBIN/sandbox-runner" --config "$conf" --check 2>&1); rc=$?
	check "--check with a role that is not a runner: FAIL, exit 1" "1|1" \
		"$(grep -c "^FAIL  *the runner's steps: $role may not execute" <<<"$out")|$rc"
	sed -i "s/^name = .*/name = 'Bad Name'/" "$conf"
	out=$(as_pg "$PGBIN/sandbox-runner" --config "$conf" --check 2>&1)
	check "--check with a name agent.runners refuses: FAIL" 1 "$(grep -c '^FAIL  *the name' <<<"$out")"
	q -c "DROP ROLE $role" >/dev/null
}

# An operator removes the local runner mid-run: the run ends at once,
# refunded; the runner's next heartbeat says so and it kills the sandbox;
# it claims nothing until admitted again.
t_remove() {
	local marker inv inv2 st
	marker="sbx-remove-$$"
	inv=$(start "$A" shell "exec -a $marker sleep 120")
	wait_state "$inv" running 100
	wait_for 20 "pgrep -f $marker"
	check "(its payload runs)" 1 "$(pgrep -fc "$marker")"
	check "removing the runner ends what it holds" 1 "$(q -c "SELECT agent.remove_runner('local')")"
	check "... as a failure of ours, refunded" \
		"provision_failed|the runner \"local\" was removed|0|charge:-2,refund:2" \
		"$(field "$inv" state)|$(field "$inv" state_reason)|$(field "$inv" credits_charged)|$(ledger "$inv")"
	# its next heartbeat (every 10 s) tells it
	for _ in $(seq 1 150); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
	check "... and the runner kills the sandbox" 0 "$(pgrep -fc "$marker" || true)"
	wait_for 20 '[ "$(q -c "SELECT problem LIKE '"'"'%removed%'"'"' FROM agent.worker_status()")" = t ]'
	check "worker_status() says the local runner is removed" \
		"the runner is removed: it claims nothing (agent.drain_runner)" "$(q -c "SELECT problem FROM agent.worker_status()")"
	inv2=$(start "$A" shell 'echo admitted-again')
	sleep 3
	check "... an approved run waits, uncharged" "approved|0" "$(field "$inv2" state)|$(field "$inv2" credits_charged)"
	q -c "SELECT agent.drain_runner('local', resume => true)" >/dev/null
	st=$(await "$A" "$inv2" 30)
	check "admitted again, it runs the waiting one" "succeeded|admitted-again" "$st|$(output "$inv2")"
}

t_not_preloaded() {
	local notice
	q -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_cron'" >/dev/null
	pg_ctl -m fast -w stop >/dev/null 2>&1
	pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
	notice=$(tq "$ORG" "$WS" "SELECT status FROM agent.request_execution('$WS', '$AGENT', NULL, 'shell', 'echo queued', 'requester');" 2>&1)
	check "without preloading, requests still work" 1 "$(grep -c '^pending_approval$' <<<"$notice")"
	check "... and say with a hint that nothing will run" 1 "$(grep -c 'HINT:.*shared_preload_libraries' <<<"$notice")"
	check "worker_status says not preloaded" "f|f" "$(q -c "SELECT preloaded || '|' || running FROM agent.worker_status()" | sed 's/true/t/g; s/false/f/g')"
	q -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
	pg_ctl -m fast -w stop >/dev/null 2>&1
	pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
	wait_for 10 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
	check "preloaded again, the supervisor is back" t "$(q -c 'SELECT running FROM agent.worker_status()')"
}

# The verdict the run's finish recorded (its audit event), one field.
verdict_of() {
	q -c "SELECT details->'verdict'->>'$2' FROM agent.audit_events WHERE invocation_id = '$1' AND event_type = 'invocation.finished'"
}

# The warm pool as SQL shows it: a run's warm fields on its invocation,
# the pool in worker_status(), and a module list the jail would refuse is
# refused by the setting itself.
t_warm_sql() {
	local inv
	run "$A" shell 'true' >/dev/null	# a launcher turned off and on starts at a run
	wait_for 120 '[ "$(q -c "SELECT coalesce(warm_ready, 0) > 0 FROM agent.worker_status()")" = t ]'
	check "worker_status(): interpreters wait, holding memory within the pool's bound" "t|t|t" \
		"$(q -c "SELECT warm_ready > 0, warm_memory_bytes > 0, warm_memory_bytes <= warm_memory_limit FROM agent.worker_status()" | tr -d ' ')"
	wait_for 120 '[ "$(warm_page_ready 0)" -gt 0 ]'
	inv=$(run "$A" python 'import pandas; print("warm", pandas.__name__)')
	check "a python run with the pool on is warm on its invocation (warm, warm_cpu_ms > 0, warm_memory_bytes > 0)" \
		"succeeded|t|t|t" "$(field "$inv" "state || '|' || warm || '|' || (warm_cpu_ms > 0) || '|' || (warm_memory_bytes > 0)" | sed 's/true/t/g; s/false/f/g')"
	check "... as its verdict says" "$(verdict_of "$inv" warm_cpu_ms)|$(verdict_of "$inv" warm_memory_bytes)" \
		"$(field "$inv" "warm_cpu_ms || '|' || warm_memory_bytes")"
	inv=$(run "$A" shell 'echo cold')
	check "a shell run is not warm on its invocation" "f|0|0" \
		"$(field "$inv" "warm::text || '|' || warm_cpu_ms || '|' || warm_memory_bytes" | sed 's/false/f/')"
	check "an invalid sandbox.warm_modules is refused (22023)" 22023 \
		"$(q -v VERBOSITY=verbose -c "ALTER SYSTEM SET sandbox.warm_modules = 'os;import x'" 2>&1 | sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p')"
	check "... and nothing of it was written" "" \
		"$(grep -s warm_modules "$CLUSTER_DIR/data/postgresql.auto.conf")"
}

# The launcher's count of waiting interpreters of one language (its page).
warm_page_ready() {
	python3 -c '
import struct, sys
try:
    print(struct.unpack_from("i", open(sys.argv[1], "rb").read(), 16 + 4 * int(sys.argv[2]))[0])
except Exception:
    print(0)' "$CLUSTER_DIR/data/sandbox_runner/jail.sock.warm" "$1"
}

# sandbox.warm_python and sandbox.warm_node are each at most 16, the
# launcher takes at most 16 in all: more is clamped (Node gets what is
# left, with a warning), never a launcher that refuses to start.
t_warm_bound() {
	local inv
	setconf sandbox.warm_python 1
	setconf sandbox.warm_node 16
	run "$A" shell 'true' >/dev/null	# the launcher follows the settings at a run
	wait_for 60 '[ "$(warm_page_ready 0)" -gt 0 ]'
	inv=$(run "$A" python 'print("warm")')
	check "warm_python 1 + warm_node 16: the launcher serves, with warm Python" "succeeded|0|true" \
		"$(field "$inv" state)|$(field "$inv" "coalesce(jail_pid, 0)")|$(verdict_of "$inv" warm)"
	check "... and the runner said what it took" 1 \
		"$(grep -c 'sandbox.warm_python = 1 and sandbox.warm_node = 16: at most 16 warm interpreters in all; sandbox.warm_node is taken as 15' "$CLUSTER_DIR/server.log" | sed 's/^[1-9][0-9]*$/1/')"
	resetconf sandbox.warm_python
	resetconf sandbox.warm_node
	run "$A" shell 'true' >/dev/null
}

# Turning the warm pool off takes effect at once, also on a busy runner:
# while a run holds the launcher (which restarts only once its runs end),
# the next Python run claims no warm interpreter of the old pool.
t_warm_off() {
	local long inv
	wait_for 120 '[ "$(warm_page_ready 0)" -gt 0 ]'
	inv=$(run "$A" python 'print("warm")')
	check "with the pool on, a python run is warm" "succeeded|true" "$(field "$inv" state)|$(verdict_of "$inv" warm)"
	wait_for 120 '[ "$(warm_page_ready 0)" -gt 0 ]'
	long=$(start "$A" shell 'echo started; sleep 60')
	wait_state "$long" running 100
	setconf sandbox.warm_python 0
	inv=$(run "$A" python 'print("after")')
	check "sandbox.warm_python = 0 while a run holds the launcher: the next python run is cold" \
		"succeeded|after|false" "$(field "$inv" state)|$(output "$inv")|$(verdict_of "$inv" warm)"
	tq "$ORG" "$WS" "SELECT agent.cancel('$long', 'requester');" >/dev/null
	await "$A" "$long" 20 >/dev/null
	inv=$(run "$A" python 'print("restarted")')
	check "once its runs ended, runs are served again (jail_pid 0), by a launcher without warm Python" "succeeded|0|false" \
		"$(field "$inv" state)|$(field "$inv" "coalesce(jail_pid, 0)")|$(verdict_of "$inv" warm)"
	resetconf sandbox.warm_python
}

run_tests t_worker t_languages t_launcher t_warm_sql t_warm_bound t_warm_off t_outcomes t_start_report t_require_cgroup t_missing_jail t_unusable_work_dir \
	t_insufficient_credits t_hash_mismatch t_cancel t_wait_timeout t_streaming t_card_notify t_forged_notify t_tenancy \
	t_concurrency_cap t_lease_lost t_drain t_remove t_check t_recovery_worker_killed t_recovery_immediate_restart t_not_preloaded

# ---- invariants, over what this suite ran -------------------------------------
check_invariants
check "every finished run has exactly one outcome audit event" 0 "$(q <<SQL
SELECT count(*) FROM agent.invocations i
 WHERE i.created_at >= '$SINCE'
   AND i.state IN ('succeeded', 'failed', 'timed_out', 'killed', 'provision_failed')
   AND (SELECT count(*) FROM agent.audit_events e
		 WHERE e.invocation_id = i.id
		   AND e.event_type IN ('invocation.finished', 'invocation.provision_failed', 'invocation.hash_mismatch')) <> 1;
SQL
)"
check "every run that started has one start event, after its claim and before its end" 0 "$(q <<SQL
SELECT count(*) FROM agent.invocations i
 WHERE i.created_at >= '$SINCE' AND i.started_at IS NOT NULL
   AND agent._state_is_terminal(i.state)
   AND ((SELECT count(*) FROM agent.audit_events e
		  WHERE e.invocation_id = i.id AND e.event_type = 'invocation.started') <> 1
		OR NOT i.started_at BETWEEN i.provisioned_at AND i.finished_at);
SQL
)"
check "every run has its tool call and analytics row" 0 "$(q <<SQL
SELECT count(*) FROM agent.invocations i
 WHERE i.created_at >= '$SINCE'
   AND i.state IN ('succeeded', 'failed', 'timed_out', 'killed', 'cancelled', 'provision_failed')
   AND i.started_at IS NOT NULL
   AND (NOT EXISTS (SELECT 1 FROM agent.agent_tool_calls t WHERE t.invocation_id = i.id)
		OR NOT EXISTS (SELECT 1 FROM agent.tool_invocations t WHERE t.invocation_id = i.id));
SQL
)"
finish_suite
