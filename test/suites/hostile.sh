#!/usr/bin/env bash
# Hostile tenants and faults (issue 11, items 1-3), attacked through the
# real supervisor and the real jail on the cluster test/run.sh started:
#
#   - every way a run can end returns its slot: the resident launcher or a
#     one-shot jail killed mid-run, sandbox.work_dir moved mid-run, a
#     workspace left with 200,000 entries (and four such conversations:
#     another org still runs);
#   - the queue cannot be starved: an org that cannot pay floods it, an org
#     that can pay fills it, a backend holds its org's locks;
#   - the database's disk is safe: the work directory refused on the data
#     directory's filesystem, per-org storage quotas and session disk, skill
#     caps, unused skills collected, and a run filling its workspace on a
#     small cluster whose data directory is a small tmpfs;
#   - what a tenant makes the database keep counts against its quota
#     (issue 27, item 2): requests (code stored once), the audit events of
#     its changes, and a cap on requests waiting for a decision.
#
# Each check fails on the code before its issue and passes after.  T=REGEX
# runs only the matching tests.  Ends with "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_hostile.XXXXXX)
chmod 0755 "$tmp"
cleanup() {
	q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'hostile-%'" \
		>/dev/null 2>&1
	for c in sandbox.jail_launcher sandbox.work_dir sandbox.work_dir_on_data_fs \
		sandbox.max_concurrent_runs sandbox.workspace_entries; do
		q -c "ALTER SYSTEM RESET $c" >/dev/null 2>&1
	done
	q -c "SELECT pg_reload_conf()" >/dev/null 2>&1
	q -c "UPDATE agent.settings SET value = '1073741824' WHERE key = 'max_session_disk_per_org'" >/dev/null 2>&1
	q -c "UPDATE agent.settings SET value = '10485760' WHERE key = 'max_skill_bytes'" >/dev/null 2>&1
	q -c "UPDATE agent.settings SET value = '100' WHERE key = 'max_pending_requests_per_org'" >/dev/null 2>&1
	small_cluster_stop
	if mountpoint -q "$tmp/alt" 2>/dev/null; then umount "$tmp/alt"; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# ---- helpers (runs, fields, settings: test/lib.sh) ------------------------------
slots() { q -c "SELECT slots_in_use FROM agent.worker_status()"; }
wait_slots() {		# n: until that many slots are in use (10 s at most)
	for _ in $(seq 1 100); do
		[ "$(slots)" = "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

for _ in $(seq 1 50); do
	[ "$(q -c 'SELECT running FROM agent.worker_status()')" = t ] && break
	sleep 0.2
done
WORK=$(q -c "SELECT work_dir FROM agent.worker_status()")
A=$(new_tenant 1000)
B=$(new_tenant 1000)

# ---- 1. every way a run can end gives its slot back ------------------------------

t_launcher_killed() {
	local inv launcher
	inv=$(start "$A" shell 'echo started; sleep 30' none)
	wait_state "$inv" running
	launcher=$(pgrep -o -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_runner/jail.sock")
	kill -9 "$launcher"
	check "launcher killed mid-run: the run ends, a failure of ours, refunded" \
		"provision_failed|charge:-2,refund:2" "$(await "$A" "$inv" 30)|$(ledger "$inv")"
	wait_slots 0
	check "... and its slot comes back" 0 "$(slots)"
	inv=$(run "$A" shell 'echo again' none)
	check "... and the next run succeeds (the launcher is restarted)" "succeeded|again" \
		"$(field "$inv" state)|$(output "$inv")"
}

t_oneshot_killed() {
	local inv pid
	setconf sandbox.jail_launcher off
	inv=$(start "$A" shell 'echo started; sleep 30' none)
	wait_state "$inv" running
	for _ in $(seq 1 50); do
		pid=$(field "$inv" "coalesce(jail_pid, 0)")
		[ "$pid" != 0 ] && break
		sleep 0.1
	done
	# (pid 0 would be this suite's own process group)
	if [ "$pid" = 0 ]; then
		nok "the one-shot jail's pid is known while it runs"
		resetconf sandbox.jail_launcher
		return
	fi
	kill -9 "$pid"
	check "one-shot jail killed mid-run: a failure of ours, refunded" \
		"provision_failed|charge:-2,refund:2" "$(await "$A" "$inv" 30)|$(ledger "$inv")"
	wait_slots 0
	check "... and its slot comes back" 0 "$(slots)"
	resetconf sandbox.jail_launcher
}

# pg_cancel_backend() and pg_terminate_backend() signal the supervisor's
# whole process group: its jails must not be in it (a DBA's cancel of the
# supervisor's query must not kill every tenant's sandbox).
t_cancel_backend() {
	local inv pid
	inv=$(start "$A" shell 'sleep 2; echo fine' none)
	wait_state "$inv" running
	pid=$(q -c "SELECT pid FROM agent.worker_status()")
	q -c "SELECT pg_cancel_backend($pid)" >/dev/null
	check "pg_cancel_backend() of the supervisor does not reach the running sandboxes" "succeeded|fine" \
		"$(await "$A" "$inv" 30)|$(output "$inv")"
	check "... nor the supervisor's own life" "$pid" "$(q -c "SELECT pid FROM agent.worker_status()")"
}

t_work_dir_moved() {
	local inv alt
	mkdir -p "$tmp/alt"
	mount -t tmpfs -o size=64m,mode=0700 sandbox_test_alt "$tmp/alt"
	chown postgres: "$tmp/alt"
	inv=$(start "$A" shell 'sleep 2; echo moved' none)
	wait_state "$inv" running
	setconf sandbox.work_dir "$tmp/alt/work"
	check "sandbox.work_dir moved to a new mount mid-run: the run still ends as its payload did" \
		"succeeded|moved" "$(await "$A" "$inv" 30)|$(output "$inv")"
	wait_slots 0
	check "... its slot comes back" 0 "$(slots)"
	inv=$(run "$A" shell 'pwd; echo new' none)
	alt=$(q -c "SELECT work_dir FROM agent.worker_status()")
	check "... and the next run works in the new directory" "succeeded|$tmp/alt/work" \
		"$(field "$inv" state)|$alt"
	resetconf sandbox.work_dir
	umount "$tmp/alt" 2>/dev/null || true
}

# A run that leaves its session workspace with far too many entries.
flood_entries='import os
os.makedirs("many", exist_ok=True)
for i in range(200000):
    open("many/f%d" % i, "w").close()
print("wrote them all")'

t_many_entries() {
	local inv gen1 gen2 convs=() c i
	inv=$(run "$A" python "$flood_entries")
	check "a run filling its workspace with entries is stopped at the entry limit (charged)" \
		"failed|2" "$(field "$inv" state)|$(field "$inv" credits_charged)"
	gen1=$(field "$inv" session_generation)
	# The rebuilt workspace holds the conversation's files again: those the
	# flood returned (max_produced_files of them), not the rest.
	inv=$(run "$A" shell 'find . -type f | wc -l')
	gen2=$(field "$inv" session_generation)
	check "the next run of that conversation starts (its workspace was rebuilt, not a setup error)" \
		"succeeded|100|$((gen1 + 1))" "$(field "$inv" state)|$(output "$inv")|$gen2"
	check "... the rebuild is audited (session.ended, workspace_over_limit)" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE event_type = 'session.ended' AND details ->> 'reason' = 'workspace_over_limit' AND details ->> 'conversation_id' = '$(field "$inv" conversation_id)'")"

	# Four conversations like that, each with its next run queued behind
	# the flood (before the fix each of these became a setup error that
	# never finished and held its slot: with four, nothing else ran).
	local again=()
	for i in 1 2 3 4; do
		c=$(q -c "INSERT INTO agent.conversations (org_id, workspace_id, agent_id, code_execution_enabled) SELECT org_id, workspace_id, id, true FROM agent.agents WHERE id = '$(cut -d' ' -f3 <<<"$A")' RETURNING id")
		convs+=("$c")
		start "$A" python "$flood_entries" "$c" >/dev/null
		again+=("$(start "$A" shell 'find . -type f | wc -l' "$c")")
	done
	for inv in "${again[@]}"; do
		check "... each such conversation runs again after its flood" "succeeded|100" \
			"$(await "$A" "$inv" 60)|$(output "$inv")"
	done
	inv=$(run "$B" python 'print(1)' none)
	check "four such conversations do not stop another org's run" "succeeded|1" \
		"$(field "$inv" state)|$(output "$inv")"
	wait_slots 0
	check "... every slot came back" 0 "$(slots)"
}

# ---- 2. the queue cannot be starved ----------------------------------------------

t_unfunded_flood() {
	local Z zorg zws zagent inv
	Z=$(new_tenant 2)
	read -r zorg zws zagent _ <<<"$Z"
	# 200 approved runs of an org that could pay when it asked (a request
	# the balance cannot cover is refused at once) and has no credits left
	# when they are claimed: in one transaction, the balance taken away
	# (as the owner) before it commits.
	tq "$zorg" "$zws" "SELECT count(agent.approve((agent.request_execution('$zws', '$zagent', NULL, 'shell', 'echo ' || n, 'requester')).approval_id, 'approver')) FROM generate_series(1, 200) n;
RESET ROLE;
INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) VALUES ('$zorg', 'adjust', -2, 'test');" >/dev/null
	inv=$(start "$B" python 'print(1)' none)
	check "an unfunded org's 200 approved runs do not delay another org's run" succeeded \
		"$(await "$B" "$inv" 30)"
	for _ in $(seq 1 100); do
		[ "$(q -c "SELECT count(*) FROM agent.invocations WHERE org_id = '$zorg' AND state = 'approved'")" = 0 ] && break
		sleep 0.1
	done
	check "... they are all refused, uncharged" "200|0" \
		"$(q -c "SELECT count(*) FILTER (WHERE state = 'insufficient_credits') || '|' || count(*) FILTER (WHERE credits_charged <> 0) FROM agent.invocations WHERE org_id = '$zorg'")"
}

t_paying_flood() {
	local org ws ids=() inv i
	read -r org ws _ <<<"$A"
	for i in 1 2 3 4 5 6; do
		ids+=("$(start "$A" shell "sleep 20; echo $i" none 30)")
	done
	for _ in $(seq 1 100); do
		[ "$(q -c "SELECT count(*) FROM agent.invocations WHERE org_id = '$org' AND state = 'running'")" = 2 ] && break
		sleep 0.1
	done
	inv=$(start "$B" python 'print(1)' none)
	check "an org filling the queue with long runs: another org's run goes first" succeeded \
		"$(await "$B" "$inv" 15)"
	check "... while the backlog still waits (it is held at its org's limit of 2)" "2|4" \
		"$(q -c "SELECT count(*) FILTER (WHERE state = 'running') || '|' || count(*) FILTER (WHERE state = 'approved') FROM agent.invocations WHERE id IN ($(printf "'%s'," "${ids[@]}" | sed 's/,$//'))")"
	tq "$org" "$ws" "SELECT count(agent.cancel(id, 'requester')) FROM agent.invocations WHERE id IN ($(printf "'%s'," "${ids[@]}" | sed 's/,$//')) AND state IN ('approved', 'provisioning', 'running');" >/dev/null
	wait_slots 0
}

t_lock_holder() {
	local org ws agent inv victim
	read -r org ws agent _ <<<"$A"
	inv=$(start "$A" shell 'sleep 2; echo held' none)
	wait_state "$inv" running
	# The hostile backend: an audited call, then its transaction stays open
	# (holding its org's audit head) until this test ends it.
	tq "$org" "$ws" "SET application_name = 'hostile-holder'; SELECT status FROM agent.request_execution('$ws', '$agent', NULL, 'shell', 'true', 'requester'); SELECT pg_sleep(60);" \
		>/dev/null 2>&1 &
	for _ in $(seq 1 50); do
		[ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hostile-holder' AND state = 'active'")" = 1 ] && break
		sleep 0.1
	done
	for _ in $(seq 1 100); do
		[ "$(q -c "SELECT count(*) FROM agent.run_results WHERE invocation_id = '$inv'")" = 1 ] && break
		sleep 0.1
	done
	check "a backend holding its org's locks: that org's finished run waits, staged" \
		"running|1" "$(field "$inv" state)|$(q -c "SELECT count(*) FROM agent.run_results WHERE invocation_id = '$inv'")"
	wait_slots 0
	check "... without holding a slot" 0 "$(slots)"
	victim=$(start "$B" python 'print(1)' none)
	check "... and another org's run goes on" succeeded "$(await "$B" "$victim" 20)"
	check "... the holder is still there (nothing waited for it)" 1 \
		"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'hostile-holder'")"
	q -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'hostile-holder'" >/dev/null
	wait
	check "once the lock is gone, the staged result is applied" "succeeded|held|2" \
		"$(await "$A" "$inv" 20)|$(output "$inv")|$(field "$inv" credits_charged)"
}

# ---- 3. the database's disk ------------------------------------------------------

# ---- a refusal whose caller rolls back (issue 27, item 13) -----------------------
# The event of a refused request is in the caller's transaction; if that (or
# the request's subtransaction) rolls back, the supervisor writes it anyway,
# marked rolled_back.  A flood of rolled-back refusals is bounded per org:
# what the queue does not hold is written as a count, and another org's
# refusals are written one by one all the same.  (On eacd621 a rolled-back
# refusal left no event.)
t_rolled_back_refusal() {
	local R S rorg rws ragent sorg sws sagent deny
	R=$(new_tenant 0)
	S=$(new_tenant 0)
	read -r rorg rws ragent _ <<<"$R"
	read -r sorg sws sagent _ <<<"$S"
	# (no credits: every request is refused, insufficient_credits)
	deny() {		# org ws agent key
		echo "SELECT (agent.request_execution('$2', '$3', NULL, 'shell', 'echo', 'prober', NULL, '$4')).status;"
	}
	# rejected_events ORG KEY-PREFIX: "plain|rolled_back" counts of its invoke_denied events
	rejected_events() {
		q -c "SELECT count(*) FILTER (WHERE NOT coalesce((details->>'rolled_back')::boolean, false)) || '|' ||
		             count(*) FILTER (WHERE (details->>'rolled_back')::boolean)
		        FROM agent.audit_events WHERE org_id = '$1' AND event_type = 'capability.invoke_denied'
		         AND details->>'idempotency_key' LIKE '$2%'"
	}
	check "a refused request, committed: its event, once" "denied|1|0" \
		"$(tq "$rorg" "$rws" "$(deny "$rorg" "$rws" "$ragent" c-1)" | tail -n 1)|$(rejected_events "$rorg" c-)"
	printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\n%s\nROLLBACK;\n" \
		"$rorg" "$rws" "$(deny "$rorg" "$rws" "$ragent" rb-1)" | q -f - >/dev/null
	wait_for 30 "[ \"\$(rejected_events '$rorg' rb-1)\" = '0|1' ]"
	check "a refused request rolled back by its caller: the supervisor writes its event, marked rolled_back" "0|1" \
		"$(rejected_events "$rorg" rb-1)"
	check "... with the refusal's reason, code hash, requester and time" "insufficient_credits|true|prober|true" \
		"$(q -c "SELECT details->>'reason' || '|' || (details->>'code_sha256' = agent.code_sha256('echo')) || '|' || actor || '|' ||
		               ((details->>'refused_at')::timestamptz <= created_at)
		          FROM agent.audit_events WHERE org_id = '$rorg' AND details->>'idempotency_key' = 'rb-1'")"
	printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\nSAVEPOINT s;\n%s\nROLLBACK TO SAVEPOINT s;\nSAVEPOINT t;\n%s\nRELEASE SAVEPOINT t;\nCOMMIT;\n" \
		"$rorg" "$rws" "$(deny "$rorg" "$rws" "$ragent" sp-rolled)" "$(deny "$rorg" "$rws" "$ragent" sp-kept)" | q -f - >/dev/null
	wait_for 30 "[ \"\$(rejected_events '$rorg' sp-rolled)\" = '0|1' ]"
	check "a savepoint rolled back around a refusal, the transaction committed: written once, rolled_back; a released one is in the transaction" \
		"0|1 1|0" "$(rejected_events "$rorg" sp-rolled) $(rejected_events "$rorg" sp-kept)"
	# The flood: 100 refusals rolled back in one transaction; another org's
	# 5 rolled back meanwhile.
	{ printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\n" "$rorg" "$rws"
	  for i in $(seq 1 100); do deny "$rorg" "$rws" "$ragent" "fl-$i"; done
	  printf "ROLLBACK;\n"; } | q -f - >/dev/null
	{ printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\n" "$sorg" "$sws"
	  for i in $(seq 1 5); do deny "$sorg" "$sws" "$sagent" "other-$i"; done
	  printf "ROLLBACK;\n"; } | q -f - >/dev/null
	# (how many are written one by one depends on how fast the supervisor
	# frees slots while the flood is queued: at least the bound, and the
	# rest counted)
	flood() {
		q -c "SELECT (SELECT count(*) FROM agent.audit_events WHERE org_id = '$rorg' AND event_type = 'capability.invoke_denied'
		                AND details->>'idempotency_key' LIKE 'fl-%' AND (details->>'rolled_back')::boolean)
		           + (SELECT coalesce(sum((details->>'count')::int), 0) FROM agent.audit_events
		               WHERE org_id = '$rorg' AND event_type = 'capability.invoke_denied_counted')"
	}
	wait_for 60 "[ \"\$(flood)\" = 100 ]"
	check "a flood of 100 rolled back: none lost (written one by one, or counted)" 100 "$(flood)"
	check "... at least the per-org bound (32) one by one, and the rest as counts" "true|true" \
		"$(q -c "SELECT (count(*) FILTER (WHERE event_type = 'capability.invoke_denied') >= 32) || '|' ||
		               (count(*) FILTER (WHERE event_type = 'capability.invoke_denied_counted') >= 1)
		          FROM agent.audit_events WHERE org_id = '$rorg'
		           AND (event_type = 'capability.invoke_denied_counted' OR details->>'idempotency_key' LIKE 'fl-%')")"
	wait_for 30 "[ \"\$(rejected_events '$sorg' other-)\" = '0|5' ]"
	check "... another org's refusals rolled back meanwhile are each written" "0|5" "$(rejected_events "$sorg" other-)"
	check "both chains verify" "true|true" \
		"$(q -c "SELECT (SELECT ok FROM agent.verify_audit_chain('$rorg')) || '|' || (SELECT ok FROM agent.verify_audit_chain('$sorg'))")"
}

t_work_dir_on_data_fs() {
	local inv
	setconf sandbox.work_dir sandbox_work
	check "a work directory on the data directory's filesystem is refused" t \
		"$(q -c "SELECT problem LIKE '%filesystem of the data directory%' FROM agent.worker_status()")"
	inv=$(start "$A" shell 'echo on-data' none)
	check "... nothing is claimed while it is (the run waits, uncharged)" "approved|0" \
		"$(await "$A" "$inv" 3)|$(field "$inv" credits_charged)"
	setconf sandbox.work_dir_on_data_fs on
	check "... unless the operator says so" "succeeded|on-data" "$(await "$A" "$inv" 30)|$(output "$inv")"
	resetconf sandbox.work_dir_on_data_fs
	resetconf sandbox.work_dir
	inv=$(run "$A" shell 'echo back' none)
	check "... and back on its own filesystem" "succeeded|" \
		"$(field "$inv" state)|$(q -c "SELECT problem FROM agent.worker_status()")"
}

t_storage_quota() {
	local org ws agent conv inv err skill
	read -r org ws agent conv <<<"$A"
	q -c "SELECT agent.set_org_limits('$org', NULL, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org') + 100000)" >/dev/null
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'first.bin', decode(repeat('ab', 60000), 'hex'), 'requester');" >/dev/null
	check "an upload within the org's storage quota is stored" 1 \
		"$(q -c "SELECT count(*) FROM agent.files WHERE org_id = '$org' AND name = 'first.bin'")"
	err=$(tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'second.bin', decode(repeat('ab', 60000), 'hex'), 'requester');" 2>&1 |
		grep -o 'storage quota is exhausted' | head -n 1)
	check "... one past it is refused, with a clear error" "storage quota is exhausted" "$err"
	err=$(tq "$org" "$ws" "\\set VERBOSITY verbose
SELECT agent.upload_file('$conv', 'second.bin', decode(repeat('ab', 60000), 'hex'), 'requester');" 2>&1 |
		grep -o '53400' | head -n 1)
	check "... SQLSTATE 53400 (configuration_limit_exceeded)" 53400 "$err"
	inv=$(run "$A" python 'open("out.bin", "wb").write(b"x" * 60000); print("wrote")' none)
	check "a produced file past the quota is recorded as skipped, with the reason" "succeeded|skipped|true" \
		"$(field "$inv" state)|$(q -c "SELECT status || '|' || (reason LIKE '%storage quota%') FROM agent.files WHERE invocation_id = '$inv' AND name = 'out.bin'")"
	setting max_skill_bytes 1000
	err=$(tq "$org" "$ws" "SELECT agent.create_skill('big', jsonb_build_object('a.txt', encode(decode(repeat('ab', 2000), 'hex'), 'base64')));" 2>&1 |
		grep -o 'is too large' | head -n 1)
	check "a skill over max_skill_bytes is refused" "is too large" "$err"
	setting max_skill_bytes 10485760
	skill=$(q -c "SELECT count(*) FROM agent.skills WHERE org_id = '$org' AND name = 'big'")
	check "... and nothing of it is left" 0 "$skill"
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL)" >/dev/null
}

# An org at its storage quota starts no new run: a run's output is kept
# past the quota (bounded by sandbox.output_limit), so runs that kept
# starting would grow its storage without bound.
t_output_quota() {
	local org ws agent conv t i1 a1 i2 a2 r
	t=$(new_tenant 1000)
	read -r org ws agent conv <<<"$t"
	q -c "SELECT agent.set_org_limits('$org', NULL, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org') + 50000)" >/dev/null
	# two runs of one conversation, both approved in one transaction while
	# the org is within its quota (no sleep in the first to win a race with
	# the second's approval): the first writes 100 kB, the second waits
	# behind it (runs of a conversation are serial, in request order)
	read -r i1 a1 < <(req "$t" python 'print("x" * 100000)')
	read -r i2 a2 < <(req "$t" shell 'echo second')
	tq "$org" "$ws" "SELECT agent.approve('$a1', 'approver'); SELECT agent.approve('$a2', 'approver');" >/dev/null
	await "$t" "$i1" >/dev/null
	await "$t" "$i2" >/dev/null
	check "a run's output is kept past its org's storage quota" "succeeded|100001" \
		"$(field "$i1" state)|$(q -c "SELECT sum(octet_length(data)) FROM agent.invocation_output WHERE invocation_id = '$i1' AND stream = 'stdout'")"
	check "... the run queued behind it is refused at its claim: nothing ran, nothing charged" \
		"provision_failed|t|||" \
		"$(field "$i2" state)|$(field "$i2" "state_reason LIKE 'the organization''s storage quota is exhausted%'")|$(ledger "$i2")|$(output "$i2")|$(field "$i2" started_at)"
	check "... audited with the reason" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$i2' AND event_type = 'invocation.provision_failed' AND details ->> 'reason' = 'storage_quota_exhausted'")"
	r=$(tq "$org" "$ws" "SELECT status || '|' || reason || '|' || sqlstate || '|' || (invocation_id IS NULL) FROM agent.request_execution('$ws', '$agent', NULL, 'shell', 'true', 'requester');" | tail -n 1)
	check "a new request of the org is refused: storage_quota_exhausted, 53400, no invocation" \
		"denied|storage_quota_exhausted|53400|true" "$r"
	check "... audited as capability.invoke_denied with the figures" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'capability.invoke_denied' AND details ->> 'reason' = 'storage_quota_exhausted' AND (details ->> 'stored_bytes')::bigint >= (details ->> 'max_stored_bytes')::bigint")"
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL)" >/dev/null
	r=$(run "$t" shell 'echo again' none)
	check "... and with the quota raised it runs again" "succeeded|again" "$(field "$r" state)|$(output "$r")"
}

# A tenant can free its storage: delete a conversation's file (gone from the
# database's content and from the sandbox session) or an unused skill.
t_delete_files() {
	local org ws agent conv t stored0 inv freed err skill borg bws rest s1 last
	t=$(new_tenant 1000)
	read -r org ws agent conv <<<"$t"
	read -r borg bws rest <<<"$B"
	stored() { q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org'"; }
	# the bytes the org's events of these types after event $1 count
	events_since() {
		local after=$1
		shift
		q -c "SELECT coalesce(sum(octet_length(details::text) + octet_length(actor)), 0) FROM agent.audit_events
			   WHERE org_id = '$org' AND id > $after AND event_type IN ($(printf "'%s'," "$@" | sed 's/,$//'))"
	}
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'gone.txt', convert_to('secret', 'UTF8'), 'requester');" >/dev/null
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'gone.txt', convert_to('secret2', 'UTF8'), 'requester');" >/dev/null
	inv=$(run "$t" shell 'cat gone.txt' "$conv")
	s1=$(field "$inv" session_id)
	stored0=$(($(stored) - 13))
	check "a conversation's file is in its session's workspace" "succeeded|secret2" "$(field "$inv" state)|$(output "$inv")"
	# (so that "deleted" below is about a workspace that was there)
	check "... which is on disk" present "$([ -d "$WORK/sessions/$s1" ] && echo present || echo gone)"
	last=$(q -c "SELECT max(id) FROM agent.audit_events WHERE org_id = '$org'")
	freed=$(tq "$org" "$ws" "SELECT agent.delete_file('$conv', 'gone.txt', 'requester');" | tail -n 1)
	# (less the audit events of the deletion, which count: issue 27)
	check "delete_file frees what every version of the name held" "13|$stored0" \
		"$freed|$(($(stored) - $(events_since "$last" file.deleted session.ended)))"
	check "... its rows keep size and sha256, not the content" "pruned|pruned|true" \
		"$(q -c "SELECT string_agg(status, '|' ORDER BY created_at) || '|' || bool_and(content IS NULL AND size > 0 AND sha256 ~ '^[0-9a-f]{64}$' AND reason LIKE 'deleted by requester%') FROM agent.files WHERE conversation_id = '$conv' AND name = 'gone.txt'")"
	check "... audited (file.deleted, with the bytes)" 13 \
		"$(q -c "SELECT details ->> 'bytes' FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'file.deleted'")"
	check "... the session that held it ends" "ended|file_deleted" \
		"$(q -c "SELECT state || '|' || end_reason FROM agent.sessions WHERE id = '$s1'")"
	for _ in $(seq 1 50); do [ -d "$WORK/sessions/$s1" ] || break; sleep 0.1; done
	check "... its workspace is deleted" gone "$([ -d "$WORK/sessions/$s1" ] && echo present || echo gone)"
	inv=$(run "$t" shell 'cat gone.txt 2>/dev/null || echo absent' "$conv")
	check "... and the next run no longer finds it in /workspace" "succeeded|absent" "$(field "$inv" state)|$(output "$inv")"
	err=$(tq_error "$org" "$ws" "SELECT agent.delete_file('$conv', 'gone.txt', 'requester');")
	check "deleting it again: P0002" "P0002 file \"gone.txt\" does not exist in conversation $conv" "$err"
	err=$(tq_error "$borg" "$bws" "SELECT agent.delete_file('$conv', 'gone.txt', 'requester');")
	check "another tenant cannot delete it (the conversation does not exist for it)" \
		"P0002 conversation $conv does not exist" "$err"
	err=$(tq_error "$org" "$ws" "SELECT agent.delete_file('$conv', 'x', 'supervisor');")
	check "... nor under a reserved actor name" 42939 "${err%% *}"
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'keep.txt', convert_to('k', 'UTF8'), 'requester');" >/dev/null
	inv=$(start "$t" shell 'sleep 3' "$conv")
	wait_state "$inv" running
	err=$(tq_error "$org" "$ws" "SELECT agent.delete_file('$conv', 'keep.txt', 'requester');")
	check "a file is not deleted while a run of its conversation is in flight (55006)" \
		"55006 a run of conversation $conv is in flight" "$err"
	await "$t" "$inv" >/dev/null

	stored0=$(stored)
	last=$(q -c "SELECT max(id) FROM agent.audit_events WHERE org_id = '$org'")
	skill=$(tq "$org" "$ws" "SELECT agent.create_skill('del-me', jsonb_build_object('a.sh', encode(convert_to('echo 12345', 'UTF8'), 'base64')));" | tail -n 1)
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill');" >/dev/null
	err=$(tq_error "$org" "$ws" "SELECT agent.delete_skill('$skill', 'requester');")
	check "an attached skill is not deleted (55006)" "55006 skill \"del-me\" version 1 is attached to 1 agent(s)" "$err"
	err=$(tq_error "$borg" "$bws" "SELECT agent.delete_skill('$skill', 'requester');")
	check "another tenant cannot delete it" "P0002 skill $skill does not exist" "$err"
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill', false);" >/dev/null
	freed=$(tq "$org" "$ws" "SELECT agent.delete_skill('$skill', 'requester');" | tail -n 1)
	# (its content, 10 bytes, and its text: name del-me and path a.sh)
	check "a detached skill is deleted, its bytes freed and audited" "20|$stored0|0|1" \
		"$freed|$(($(stored) - $(events_since "$last" skill.attached skill.detached skill.deleted)))|$(q -c "SELECT count(*) FROM agent.skill_files WHERE skill_id = '$skill'")|$(q -c "SELECT count(*) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'skill.deleted' AND details ->> 'skill_id' = '$skill'")"
}

t_skill_gc() {
	local org ws agent conv skill inv
	read -r org ws agent conv <<<"$A"
	skill=$(tq "$org" "$ws" "SELECT agent.create_skill('gc-me', jsonb_build_object('hello.sh', encode(convert_to('echo hi', 'UTF8'), 'base64')));" | tail -n 1)
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill');" >/dev/null
	inv=$(run "$A" shell 'cat /skills/gc-me/hello.sh' none)
	check "a skill is materialised for the run" "succeeded|echo hi|t" \
		"$(field "$inv" state)|$(output "$inv")|$([ -d "$WORK/skills/$skill" ] && echo t || echo f)"
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill', false);" >/dev/null
	run "$A" shell 'true' none >/dev/null
	for _ in $(seq 1 50); do [ -d "$WORK/skills/$skill" ] || break; sleep 0.1; done
	check "... and its copy on disk is removed once no agent has it" gone \
		"$([ -d "$WORK/skills/$skill" ] && echo present || echo gone)"
}

t_session_disk_budget() {
	local org ws agent conv c2 inv s1
	read -r org ws agent conv <<<"$A"
	c2=$(q -c "INSERT INTO agent.conversations (org_id, workspace_id, agent_id, code_execution_enabled) VALUES ('$org', '$ws', '$agent', true) RETURNING id")
	setting max_session_disk_per_org 200000
	inv=$(run "$A" python 'open("big.bin", "wb").write(b"y" * 300000); print("kept")' "$conv")
	s1=$(field "$inv" session_id)
	check "a session workspace records what it holds" t \
		"$(q -c "SELECT disk_bytes >= 300000 FROM agent.sessions WHERE id = '$s1'")"
	check "... and its workspace is on disk" present "$([ -d "$WORK/sessions/$s1" ] && echo present || echo gone)"
	run "$A" shell 'echo other' "$c2" >/dev/null
	check "past the org's session disk budget, the least recently used session ends" "ended|disk_budget" \
		"$(q -c "SELECT state || '|' || end_reason FROM agent.sessions WHERE id = '$s1'")"
	for _ in $(seq 1 50); do [ -d "$WORK/sessions/$s1" ] || break; sleep 0.1; done
	check "... its workspace is deleted" gone "$([ -d "$WORK/sessions/$s1" ] && echo present || echo gone)"
	inv=$(run "$A" shell 'wc -c < big.bin' "$conv")
	check "... and its files come back from the database when it runs again" "succeeded|300000" \
		"$(field "$inv" state)|$(output "$inv")"
	setting max_session_disk_per_org 1073741824
}

# ---- 4. what a tenant makes the database keep counts (issue 27) -------------------
usage() { q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$1'"; }

# "With max_stored_bytes 20 MB, 300 pending requests (64 KB code + 8 KB
# description) were accepted: +47 MB, org_usage.stored_bytes unchanged."
# Now a request counts its code (once: the card shows the invocation's
# copy), its description and its audit event; the one that would pass the
# quota is refused like every refusal of request_execution (a returned
# denial, audited).
t_quota_requests() {
	local t org ws agent conv max i r accepted=0 denial="" before_denial want
	t=$(new_tenant 1000)
	read -r org ws agent conv <<<"$t"
	q -c "SELECT agent.set_org_limits('$org', NULL, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org') + 400000)" >/dev/null
	max=$(q -c "SELECT max_stored_bytes FROM agent.orgs WHERE id = '$org'")
	for i in $(seq 1 12); do
		before_denial=$(usage "$org")
		r=$(tq "$org" "$ws" "SELECT status || '|' || coalesce(reason, '') || '|' || coalesce(sqlstate, '') || '|' || (invocation_id IS NULL) FROM agent.request_execution('$ws', '$agent', NULL, 'python', '#$i' || repeat('x', 65530), 'mallory', repeat('d', 8192));" | tail -n 1)
		if [ "${r%%|*}" = pending_approval ]; then
			accepted=$((accepted + 1))
		else
			denial=$r
			break
		fi
	done
	check "requests of 64 kB of code and 8 kB of description are taken while they fit (5 in 400 kB), then refused: storage_quota_exhausted, 53400, no invocation" \
		"5|denied|storage_quota_exhausted|53400|true" "$accepted|$denial"
	want=$(q -c "SELECT $max - 400000 + (SELECT sum(octet_length(code) + octet_length(description)) FROM agent.invocations WHERE org_id = '$org')
				  + (SELECT sum(octet_length(details::text) + octet_length(actor)) FROM agent.audit_events WHERE org_id = '$org' AND event_type IN ('org.limits_changed', 'capability.invoke_allowed'))")
	check "... each counted in org_usage: its code and description once, and its audit event" "$want" "$before_denial"
	check "... so the org stayed within its quota" t "$([ "$before_denial" -le "$max" ] && echo t || echo f)"
	check "... the cards show their invocation's code and description, and hold no copy of their own" "t|0" \
		"$(q -c "SELECT bool_and(c.code = i.code AND c.description = i.description) FROM agent.approval_cards c JOIN agent.invocations i ON i.id = c.invocation_id WHERE i.org_id = '$org'")|$(q -c "SELECT count(*) FROM pg_attribute WHERE attrelid = 'agent.approval_requests'::regclass AND attname IN ('code', 'description') AND NOT attisdropped")"
	check "... the refusal is audited with what the request needed, and counted past the quota (a decision kept)" "1|t" \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'capability.invoke_denied' AND details ->> 'reason' = 'storage_quota_exhausted' AND (details ->> 'request_bytes')::bigint > (details ->> 'max_stored_bytes')::bigint - (details ->> 'stored_bytes')::bigint")|$([ "$(usage "$org")" -gt "$before_denial" ] && echo t || echo f)"
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL)" >/dev/null
}

# "2,000 set_agent_name calls were accepted: audit +1.7 MB, org_usage
# unchanged."  Now each change's audit event counts (the names it records
# with it); the rename that would pass the quota is refused and leaves
# nothing.  An org past its quota can still take things away (turn code
# execution off, delete a file), not add them.
t_quota_setters() {
	local t org ws agent conv base i err n=0 name
	t=$(new_tenant 10)
	read -r org ws agent conv <<<"$t"
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'keep.txt', convert_to(repeat('k', 1000), 'UTF8'), 'mallory');" >/dev/null
	q -c "SELECT agent.set_org_limits('$org', NULL, (SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org') + 20000)" >/dev/null
	base=$(usage "$org")
	err="no error"
	for i in $(seq 1 100); do
		name=$(printf '%03d' "$i")$(head -c 197 /dev/zero | tr '\0' 'n')
		err=$(tq_error "$org" "$ws" "SELECT agent.set_agent_name('$agent', '$name', 'mallory');")
		[ "$err" = "no error" ] || break
		n=$i
	done
	check "renames with 200-byte names are refused once their audit events would pass the quota: 53400" \
		"53400 the organization's storage quota is exhausted" "$err"
	check "... after 10 or more were taken" t "$([ "$n" -ge 10 ] && echo t || echo f)"
	check "... the refused one left nothing: the last accepted name, one event per accepted rename" \
		"$(printf '%03d' "$n")|$n" \
		"$(q -c "SELECT left(name, 3) FROM agent.agents WHERE id = '$agent'")|$(q -c "SELECT count(*) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'agent.changed'")"
	check "... each accepted rename is counted: its event's details and actor" \
		"$(q -c "SELECT $base + sum(octet_length(details::text) + octet_length(actor)) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'agent.changed'")" \
		"$(usage "$org")"
	check "... within the quota" t \
		"$(q -c "SELECT stored_bytes <= (SELECT max_stored_bytes FROM agent.orgs WHERE id = '$org') FROM agent.org_usage WHERE org_id = '$org'")"
	q -c "SELECT agent.set_org_limits('$org', NULL, 1)" >/dev/null
	check "an org past its quota can still turn code execution off (it narrows)" t \
		"$(tq "$org" "$ws" "SELECT agent.set_agent_code_execution('$agent', false, 'mallory');" | tail -n 1)"
	check "... not back on (53400)" 53400 \
		"$(tq_error "$org" "$ws" "SELECT agent.set_agent_code_execution('$agent', true, 'mallory');" | cut -d ' ' -f 1)"
	check "... nor start a conversation (53400)" 53400 \
		"$(tq_error "$org" "$ws" "SELECT agent.create_conversation('$agent', 'mallory', 'more');" | cut -d ' ' -f 1)"
	check "... nor create a skill of empty files with an 8 kB description (53400: its text counts)" 53400 \
		"$(tq_error "$org" "$ws" "SELECT agent.create_skill('empty', '{\"a.txt\": \"\"}'::jsonb, repeat('d', 8192));" | cut -d ' ' -f 1)"
	check "... and it can free storage: delete_file gives back the file's bytes" 1000 \
		"$(tq "$org" "$ws" "SELECT agent.delete_file('$conv', 'keep.txt', 'mallory');" | tail -n 1)"
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL)" >/dev/null
}

# "300 pending requests were accepted."  Each org has a cap on requests
# waiting for a decision (setting max_pending_requests_per_org, 100;
# agent.orgs.max_pending_requests, the operator's); past it
# request_execution refuses like its other limits.  A decision or an
# expiry frees a place.
t_pending_cap() {
	local t org ws agent conv a1 a2 r
	t=$(new_tenant 100)
	read -r org ws agent conv <<<"$t"
	try_req() {
		tq "$org" "$ws" "SELECT status || coalesce('|' || reason || '|' || sqlstate, '') || '|' || (invocation_id IS NULL) FROM agent.request_execution('$ws', '$agent', NULL, 'shell', '$1', 'mallory');" | tail -n 1
	}
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL, 3)" >/dev/null
	read -r _ a1 < <(req "$t" shell 'echo 1' none)
	read -r _ a2 < <(req "$t" shell 'echo 2' none)
	req "$t" shell 'echo 3' none >/dev/null
	check "with 3 requests waiting (its cap), the next is refused: too_many_pending_requests, 53400, no invocation" \
		"denied|too_many_pending_requests|53400|true" "$(try_req 'echo 4')"
	check "... audited with the figures" "3|3" \
		"$(q -c "SELECT (details ->> 'pending_requests') || '|' || (details ->> 'max_pending_requests') FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'capability.invoke_denied' ORDER BY id DESC LIMIT 1")"
	tq "$org" "$ws" "SELECT agent.deny('$a1', 'approver', 'no');" >/dev/null
	check "a denial frees a place, which the next request takes" "pending_approval|false;denied|too_many_pending_requests|53400|true" \
		"$(try_req 'echo 5');$(try_req 'echo 6')"
	approve "$t" "$a2"
	check "an approval frees one too" "pending_approval|false" "$(try_req 'echo 7')"
	# A card past its expires_at no longer counts, before pg_cron marks it.
	q -c "UPDATE agent.approval_requests SET expires_at = now() - interval '1 second' WHERE org_id = '$org' AND status = 'pending'" >/dev/null
	check "cards past their expiry no longer count" "pending_approval|false" "$(try_req 'echo 8')"
	q -c "SELECT agent.expire_pending_approvals()" >/dev/null
	check "... and once expired, the cap holds again with the new ones" "pending_approval|false;pending_approval|false;denied|too_many_pending_requests|53400|true" \
		"$(try_req 'echo 9');$(try_req 'echo 10');$(try_req 'echo 11')"
	q -c "SELECT agent.set_org_limits('$org', NULL, NULL)" >/dev/null
	check "without its own cap, the org has the setting's (100)" "pending_approval|false" "$(try_req 'echo 12')"
	setting max_pending_requests_per_org 4
	check "... which the operator sets for every org" "denied|too_many_pending_requests|53400|true" "$(try_req 'echo 13')"
	setting max_pending_requests_per_org 100
}

# A second cluster whose data directory is a small tmpfs, with the default
# work directory: one run writes 40 x 10 MB into its workspace.  Before
# issue 11 the work directory was inside the data directory, the run filled
# it and the server could not write (nor checkpoint, nor restart).  Now the
# work directory is on a filesystem of its own (/var/lib/sandbox_ext), the
# run is stopped at its workspace limit, the database keeps running beside
# it and the space comes back.
SMALL=$tmp/small
SPORT=$((PORT + 7))
small_q() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SMALL" -p "$SPORT" -U postgres -d postgres "$@"; }
small_cluster_stop() {
	local wd
	if [ -f "$SMALL/data/postmaster.pid" ]; then
		wd=$(small_q -c "SELECT work_dir FROM agent.worker_status()" 2>/dev/null)
		as_pg "$PGBIN/pg_ctl" -D "$SMALL/data" -m immediate -w stop >/dev/null 2>&1
		case "$wd" in /var/lib/sandbox_ext/[0-9]*) rm -rf "$wd" ;; esac
	fi
	if mountpoint -q "$SMALL" 2>/dev/null; then umount "$SMALL" 2>/dev/null || umount -l "$SMALL"; fi
}

t_disk_full() {
	local T1 T2 inv1 inv2 wd used
	if [ "$(id -u)" != 0 ]; then
		nok "the small-disk cluster needs root (to mount its tmpfs)"
		return
	fi
	mkdir -p "$SMALL"
	mount -t tmpfs -o size=300m sandbox_test_small "$SMALL"
	chown postgres: "$SMALL"
	as_pg "$PGBIN/initdb" -D "$SMALL/data" -U postgres -A trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null
	cat >>"$SMALL/data/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$SMALL'
port = $SPORT
shared_preload_libraries = 'sandbox_ext'
sandbox.database = 'postgres'
sandbox.jail_path = '$PGBIN/sandbox-jail'
sandbox.workspace_size = 64MB
max_wal_size = 64MB
min_wal_size = 32MB
CONF
	as_pg "$PGBIN/pg_ctl" -D "$SMALL/data" -l "$SMALL/server.log" -w -t 60 start >/dev/null
	small_q -c "CREATE EXTENSION sandbox_ext" >/dev/null
	# running, and its work directory known (the supervisor publishes it once
	# the extension it waited for is there)
	for _ in $(seq 1 150); do
		[ "$(small_q -c 'SELECT running AND work_dir IS NOT NULL FROM agent.worker_status()')" = t ] && break
		sleep 0.2
	done
	wd=$(small_q -c "SELECT work_dir FROM agent.worker_status()")
	check "small disk: the work directory is not on the data directory's filesystem" t \
		"$([ -n "$wd" ] && [ "$(stat -c %d "$wd")" != "$(stat -c %d "$SMALL/data")" ] && echo t || echo f)"
	T1=$(CLUSTER_DIR=$SMALL PORT=$SPORT DB=postgres new_tenant 100)
	T2=$(CLUSTER_DIR=$SMALL PORT=$SPORT DB=postgres new_tenant 100)
	# The hog and another tenant's run writing files at the same time.
	inv1=$(CLUSTER_DIR=$SMALL PORT=$SPORT DB=postgres start "$T1" shell \
		'for i in $(seq 1 40); do head -c 10000000 /dev/zero > f$i || break; done; echo wrote $i' none)
	inv2=$(CLUSTER_DIR=$SMALL PORT=$SPORT DB=postgres run "$T2" shell 'for i in 1 2 3; do echo $i > g$i; sleep 0.3; done; cat g1 g2 g3' none)
	check "... a run writing 40 x 10 MB ends at its workspace limit (charged: the payload did it)" \
		"failed|t" \
		"$(CLUSTER_DIR=$SMALL PORT=$SPORT DB=postgres await "$T1" "$inv1" 60)|$(small_q -c "SELECT state_reason ~ 'limit' FROM agent.invocations WHERE id = '$inv1'")"
	check "... the server stays up and can checkpoint" "1|ok" \
		"$(small_q -c 'SELECT 1')|$(small_q -c 'CHECKPOINT' >/dev/null 2>&1 && echo ok)"
	check "... another tenant's run, writing files at the same time, succeeded" "succeeded" \
		"$(small_q -c "SELECT state FROM agent.invocations WHERE id = '$inv2'")"
	used=$(du -sk "$wd" 2>/dev/null | cut -f1)
	if [ -n "$used" ] && [ "$used" -lt 1024 ]; then
		ok "... and the space came back ($used kB left in its work directory)"
	else
		nok "the space came back" "${used:-?} kB in $wd"
	fi
	check "... the data directory's filesystem was never filled" t \
		"$([ "$(df --output=avail -k "$SMALL" | tail -n 1 | tr -d ' ')" -gt 100000 ] && echo t || echo f)"
	small_cluster_stop
}

run_tests t_launcher_killed t_oneshot_killed t_cancel_backend t_work_dir_moved t_many_entries \
	t_unfunded_flood t_paying_flood t_lock_holder t_rolled_back_refusal \
	t_work_dir_on_data_fs t_storage_quota t_output_quota t_delete_files t_skill_gc t_session_disk_budget \
	t_quota_requests t_quota_setters t_pending_cap t_disk_full

check_invariants
finish_suite
