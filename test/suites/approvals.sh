#!/usr/bin/env bash
# Approval policies (issue 28, docs/control-plane.md "Approval policies")
# end to end, through the real supervisor and jail on the cluster
# test/run.sh started: an agent that works step by step (ten automatic runs
# in one conversation, each reading the file the previous one produced),
# once_per_conversation with a person's "allow further runs here" and a
# run whose reach is wider than that person saw, a revocation in the
# middle of a loop (later runs wait for a person, pending cards stay
# pending), and a hostile backend's and a superuser's attempts.  Each test
# has a tenant of its own.  T=REGEX runs only the matching tests
# (test/lib.sh).  Ends with "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"

wait_for 10 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'

# areq TENANT LANG CODE [CONV|none] → "inv approval status person_reason"
# (the request as the backend makes it; an automatic approval is its status)
areq() {
	local org ws agent conv c
	read -r org ws agent conv <<<"$1"
	c=${4:-$conv}
	if [ "$c" = none ]; then c=NULL; else c="'$c'"; fi
	tq "$org" "$ws" "SELECT invocation_id AS inv, approval_id AS appr, status AS st
	                   FROM agent.request_execution('$ws', '$agent', $c, '$2', :'code', 'requester') \\gset
	                 SELECT :'inv', :'appr', :'st', coalesce(person_reason, '-') FROM agent.approval_requests WHERE id = :'appr';" \
		-F ' ' -v code="$3" | tail -n 1
}
# card APPROVAL → "status|decided_by|policy?|allowance?"
card() {
	q -c "SELECT concat_ws('|', status, coalesce(decided_by, '-'), (approval_policy_id IS NOT NULL)::text, (allowance_id IS NOT NULL)::text) FROM agent.approval_requests WHERE id = '$1'"
}
policy() {		# TENANT SQL-args of set_approval_policy after mode → policy id
	local org rest
	read -r org rest <<<"$1"
	aq "$org" "SELECT agent.set_approval_policy($2);" | tail -n 1
}

# An agent that works step by step: ten runs in one conversation, python
# and shell in turn, each reading what the previous one wrote, none
# waiting for a person.
t_agent_loop() {
	local A org ws agent conv i inv appr st why states="" ok_auto=0 last
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	policy "$A" "'automatic', 'admin@org'" >/dev/null
	check "approval_policy_of: a run of the agent would be approved by the org's policy" "automatic|true" \
		"$(tq "$org" "$ws" "SELECT mode || '|' || automatic FROM agent.approval_policy_of('$agent', '$conv');" | tail -n 1)"
	for i in $(seq 1 10); do
		if [ $((i % 2)) = 1 ]; then
			read -r inv appr st why < <(areq "$A" python "import os
prev = int(open('step$((i - 1)).txt').read()) if os.path.exists('step$((i - 1)).txt') else 0
open('step$i.txt', 'w').write(str(prev + $i))
print(prev + $i)")
		else
			read -r inv appr st why < <(areq "$A" shell "n=\$(cat step$((i - 1)).txt); echo \$((n + $i)) > step$i.txt; cat step$i.txt")
		fi
		[ "$st|$why" = "approved|-" ] && ok_auto=$((ok_auto + 1))
		states+="$(await "$A" "$inv")"$'\n'
		last=$inv
	done
	check "10 requests approved by the policy in their own transaction" 10 "$ok_auto"
	check "10 runs succeeded, none waited for a person" "10 succeeded|0" \
		"$(sort <<<"$states" | sed '/^$/d' | uniq -c | sed 's/^ *//')|$(q -c "SELECT count(*) FROM agent.approval_requests WHERE org_id = '$org' AND status = 'pending'")"
	check "the tenth run read the ninth's file: 1 + 2 + ... + 10" 55 "$(output "$last")"
	check "the conversation holds step1.txt .. step10.txt" 10 \
		"$(tq "$org" "$ws" "SELECT count(*) FROM agent.list_files('$conv') WHERE current AND name ~ '^step[0-9]+\\.txt$';" | tail -n 1)"
	check "every card approved by 'policy', every run with one approval.auto event binding its code's hash" "10|10" \
		"$(q -c "SELECT count(*) FILTER (WHERE a.decided_by = 'policy' AND a.approval_policy_id IS NOT NULL) FROM agent.approval_requests a WHERE a.org_id = '$org'")|$(q -c "SELECT count(*) FROM agent.audit_events e JOIN agent.invocations i ON i.id = e.invocation_id WHERE e.org_id = '$org' AND e.event_type = 'approval.auto' AND e.details ->> 'code_sha256' = i.code_sha256")"
	check "each run charged once: 20 credits" 980 "$(q -c "SELECT balance FROM agent.credit_balances WHERE org_id = '$org'")"
}

# Once per conversation: the first run needs a person, who allows further
# runs; the next runs are approved by that decision until one may reach
# more than the person saw, which waits for a person again; a revocation
# in the middle of the loop stops it at once.
t_once_per_conversation() {
	local A org ws agent conv inv appr st why inv2 rule
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	policy "$A" "'once_per_conversation', 'admin@org'" >/dev/null
	read -r inv appr st why < <(areq "$A" shell 'echo first > first.txt; cat first.txt')
	check "the conversation's first run waits for a person, and the card says why" \
		"pending_approval|first_run|once per conversation: nobody has allowed further runs in this conversation" \
		"$st|$why|$(tq "$org" "$ws" "SELECT person_needed FROM agent.pending_approvals() WHERE approval_id = '$appr';" | tail -n 1)"
	tq "$org" "$ws" "SELECT agent.approve('$appr', 'bob', NULL, true);" >/dev/null
	check "bob approves it and allows further runs here" succeeded "$(await "$A" "$inv")"
	read -r inv2 appr st why < <(areq "$A" shell 'cat first.txt; echo second')
	check "the next run is approved by bob's allowance and runs" "approved|approved|policy|true|true|succeeded|first
second" "$st|$(card "$appr")|$(await "$A" "$inv2")|$(output "$inv2")"
	read -r inv appr st why < <(areq "$A" python 'print(1)')
	check "a run in another language waits for a person" "pending_approval|allowance_language" "$st|$why"
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'bob', 'not python');" >/dev/null
	# The admin widens the org's reach: more than bob saw.
	rule=$(aq "$org" "SELECT agent.add_egress_rule('api.example.com', '{443}', 'admin@org');" | tail -n 1)
	read -r inv appr st why < <(areq "$A" shell 'echo wider')
	check "a run that may reach more than bob saw falls back to a person" \
		"pending_approval|allowance_reach|the run may reach more than the person who allowed further runs here saw|api.example.com:443" \
		"$st|$why|$(tq "$org" "$ws" "SELECT person_needed || '|' || egress_may_reach FROM agent.approval_card('$appr');" | tail -n 1)"
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'bob', 'no network');" >/dev/null
	aq "$org" "SELECT agent.remove_egress_rule('$rule', 'admin@org');" >/dev/null
	read -r inv appr st why < <(areq "$A" shell 'echo third')
	check "within what bob saw again: approved" "approved|succeeded" "$st|$(await "$A" "$inv")"
	# The backend revokes the allowance mid-loop.
	check "the backend revokes the conversation's allowance" 1 \
		"$(tq "$org" "$ws" "SELECT agent.revoke_conversation_allowance('$conv', 'carol');" | tail -n 1)"
	read -r inv appr st why < <(areq "$A" shell 'echo after-revoke')
	check "the next run waits for a person at once" "pending_approval|first_run|pending_approval" \
		"$st|$why|$(field "$inv" state)"
	check "the revocation is audited" "approval.allowance_revoked|carol" \
		"$(q -c "SELECT event_type || '|' || actor FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'approval.allowance_revoked'")"
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'bob', 'done');" >/dev/null
}

# Automatic, with a condition (python only) so that a card can be pending
# before the revocation; the admin removes the policy in the middle of a
# loop: later runs wait for a person, pending cards stay pending, runs it
# approved run to the end.
t_revoke_mid_loop() {
	local A org ws agent conv i inv appr st why pend long done_before="" after=""
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	policy "$A" "'automatic', 'admin@org', languages => '{python}'" >/dev/null
	read -r pend appr st why < <(areq "$A" shell 'echo pending' none)
	check "(a shell run waits for a person: the policy lists python only)" "pending_approval|language" "$st|$why"
	PEND_APPR=$appr
	read -r long appr st why < <(areq "$A" python 'import time; time.sleep(2); print("long")')
	for i in 1 2; do
		read -r inv appr st why < <(areq "$A" python "print($i)")
		done_before+="$st,"
	done
	check "the loop's runs are approved by the policy" "approved,approved," "$done_before"
	check "the admin removes the policy mid-loop" t \
		"$(aq "$org" "SELECT agent.remove_approval_policy('admin@org');" | tail -n 1)"
	for i in 3 4; do
		read -r inv appr st why < <(areq "$A" python "print($i)")
		after+="$st:$why,"
	done
	check "later runs wait for a person" "pending_approval:every_run,pending_approval:every_run," "$after"
	check "the card pending before stays pending" pending "$(q -c "SELECT status FROM agent.approval_requests WHERE id = '$PEND_APPR'")"
	check "a run the policy approved before runs to its end" "succeeded|long" "$(await "$A" "$long")|$(output "$long")"
	tq "$org" "$ws" "SELECT agent.approve('$appr', 'bob');" >/dev/null
	check "a person approves a later one, and it runs" succeeded "$(await "$A" "$inv")"
	check "the removal is audited, after the approvals it did not undo" "approval.auto,approval.auto,approval.auto,approval_policy.removed" \
		"$(q -c "SELECT string_agg(event_type, ',' ORDER BY id) FROM agent.audit_events WHERE org_id = '$org' AND event_type IN ('approval.auto', 'approval_policy.removed')")"
}

# A hostile backend and a superuser covering tracks.
t_attacks() {
	local A org ws agent conv B inv appr st why evil
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	check "the backend cannot set its org's policy" "42501 permission denied for function set_approval_policy" \
		"$(tq_error "$org" "$ws" "SELECT agent.set_approval_policy('automatic', 'mallory');")"
	policy "$A" "'every_run', 'admin@org'" >/dev/null
	read -r inv appr st why < <(areq "$A" shell 'echo hi')
	check "the backend cannot approve by naming the policy" "42939" \
		"$(tq_error "$org" "$ws" "SELECT agent.approve('$appr', 'policy');" | cut -d' ' -f1)"
	check "... nor mark the card approved by a policy" "42501" \
		"$(tq_error "$org" "$ws" "UPDATE agent.approval_requests SET approval_policy_id = (SELECT id FROM agent.approval_policies LIMIT 1) WHERE id = '$appr';" | cut -d' ' -f1)"
	check "... nor allow further runs where the policy does not" "42501 the approval policy of this agent does not let an approver allow further runs" \
		"$(tq_error "$org" "$ws" "SELECT agent.approve('$appr', 'bob', NULL, true);")"
	check "the card is still pending, nothing ran" "pending|pending_approval" "$(card "$appr" | cut -d'|' -f1)|$(field "$inv" state)"
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'bob');" >/dev/null
	# Another org with an automatic policy cannot use it for this org's conversation.
	B=$(new_tenant 1000)
	policy "$B" "'automatic', 'admin@b'" >/dev/null
	read -r _ ws_b agent_b _ <<<"$B"
	check "another org's backend cannot run in this org's conversation" "P0002" \
		"$(tq_error "$(cut -d' ' -f1 <<<"$B")" "$ws_b" "SELECT agent.request_execution('$ws_b', '$agent_b', '$conv', 'shell', 'echo x', 'mallory');" | cut -d' ' -f1)"
	# A superuser swaps an automatically approved run's code, card and
	# hashes together before the claim: the approval.auto event (in the
	# chain) still names the code the policy approved, and the claim refuses.
	setconf sandbox.max_concurrent_runs 0
	policy "$A" "'automatic', 'admin@org'" >/dev/null
	read -r inv appr st why < <(areq "$A" shell 'echo approved-code')
	evil=$(q -c "SELECT agent.code_sha256('echo EVIL')")
	q <<SQL >/dev/null
BEGIN;
SET LOCAL session_replication_role = replica;
UPDATE agent.invocations SET code = 'echo EVIL', code_sha256 = '$evil' WHERE id = '$inv';
UPDATE agent.approval_requests SET code_sha256 = '$evil', approved_code_sha256 = '$evil' WHERE id = '$appr';
COMMIT;
SQL
	resetconf sandbox.max_concurrent_runs
	check "an auto-approved run whose code was swapped with its card is refused at the claim, uncharged" \
		"approved|provision_failed|0|0" \
		"$st|$(await "$A" "$inv")|$(field "$inv" credits_charged)|$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"
	check "... and audited" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.hash_mismatch'")"
}

run_tests t_agent_loop t_once_per_conversation t_revoke_mid_loop t_attacks
check_invariants
finish_suite
