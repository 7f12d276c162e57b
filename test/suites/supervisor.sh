#!/usr/bin/env bash
# Execution through the real supervisor worker and the real jail, on the
# cluster test/run.sh started: languages, exit codes, timeout, provisioning
# failure, insufficient credits, hash mismatch, cancel, streaming, the
# concurrency cap, recovery after the worker is killed and after an
# immediate-mode restart, and the credit/audit invariants after all of it.
# Ends with "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:?}
PORT=${SANDBOX_PGPORT:?}
DB=${SANDBOX_DB:?}

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $1"; }
nok() { fail=$((fail + 1)); echo "not ok - $1"; [ $# -gt 1 ] && echo "#   $2"; }
check() {			# name expected actual
	if [ "$2" = "$3" ]; then ok "$1"; else nok "$1" "expected [$2], got [$3]"; fi
}

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
q() {
	as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d "$DB" "$@"
}
pg_ctl() { as_pg "$PGBIN/pg_ctl" -D "$CLUSTER_DIR/data" "$@"; }

tmp=$(mktemp -d /tmp/sandbox_sup.XXXXXX)
chmod 0755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
cc -O2 -Wall -Werror -o "$tmp/listen" "$top/test/tools/listen.c" \
	-I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq || { nok "build listen tool"; echo "$pass passed, $((fail)) failed"; exit 1; }

# ---- fixtures -------------------------------------------------------------

# new_tenant CREDITS → "org ws agent conv"
new_tenant() {
	q -F ' ' <<SQL | tail -n 1
WITH o AS (INSERT INTO agent.orgs (name, plan) VALUES ('t-' || gen_random_uuid(), 'pro') RETURNING id),
	 w AS (INSERT INTO agent.workspaces (org_id, name) SELECT id, 'w' FROM o RETURNING id, org_id),
	 m AS (INSERT INTO agent.models (name, supports_code_execution)
		   VALUES ('m-' || gen_random_uuid(), true) RETURNING id),
	 a AS (INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id, code_execution_enabled)
		   SELECT w.org_id, w.id, 'a', 'specialist', m.id, true FROM w, m RETURNING id, org_id, workspace_id),
	 c AS (INSERT INTO agent.conversations (org_id, workspace_id, agent_id, code_execution_enabled)
		   SELECT org_id, workspace_id, id, true FROM a RETURNING id, org_id, workspace_id, agent_id)
SELECT org_id, workspace_id, agent_id, id FROM c;
SQL
	[ "$1" -gt 0 ] && q -c "SELECT agent.grant_credits((SELECT org_id FROM agent.workspaces ORDER BY created_at DESC LIMIT 1), $1, 'test')" >/dev/null
}

read -r ORG WS AGENT CONV < <(new_tenant 1000)

# request LANG CODE [extra SQL run after the request, before approval] → "inv approval"
request() {
	q -F ' ' -v code="$2" <<SQL | tail -n 1
BEGIN;
SELECT agent.set_tenant('$ORG', '$WS');
SELECT invocation_id, approval_id FROM agent.request_execution('$WS', '$AGENT', NULL, '$1', :'code', 'tester');
COMMIT;
SQL
}
approve() {
	q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.approve('$1', 'approver'); COMMIT;" >/dev/null
}
await() {			# inv [timeout] → final state
	q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.wait('$1', '${2:-60} s'); COMMIT;" | tail -n 1
}
run() {				# LANG CODE [wall_s] → inv (approved and waited for)
	local inv appr
	read -r inv appr < <(request "$1" "$2")
	if [ -n "${3:-}" ]; then q -c "UPDATE agent.invocations SET wall_time_s = $3 WHERE id = '$inv'"; fi
	approve "$appr"
	await "$inv" >/dev/null
	echo "$inv"
}
# One statement in the tenant's session, as the backend would run it.
tval() { q -c "SET sandbox.org_id = '$ORG'" -c "SET sandbox.workspace_id = '$WS'" -c "$1"; }
field() { q -c "SELECT $2 FROM agent.invocations WHERE id = '$1'"; }
output() { q -c "SELECT string_agg(data, '' ORDER BY seq) FROM agent.invocation_output WHERE invocation_id = '$1' AND stream = '${2:-stdout}'"; }
balance() { q -c "SELECT balance FROM agent.credit_balances WHERE org_id = '${1:-$ORG}'"; }

# The supervisor is up.
for _ in $(seq 1 50); do
	[ "$(q -c 'SELECT running FROM agent.worker_status()')" = t ] && break
	sleep 0.2
done
check "supervisor is running" t "$(q -c 'SELECT running FROM agent.worker_status()')"
WORK=$(q -c "SELECT work_dir FROM agent.worker_status()")
check "the work directory is on a filesystem of its own" "t|" \
	"$([ "$(stat -c %d "$WORK")" != "$(stat -c %d "$CLUSTER_DIR/data")" ] && echo t || echo f)|$(q -c "SELECT problem FROM agent.worker_status()")"
check "supervisor in pg_stat_activity" 1 \
	"$(q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'sandbox_ext supervisor'")"

# ---- each language ----------------------------------------------------------
inv=$(run python 'import sys, pandas, numpy; print("py", sys.version_info[0], numpy.arange(3).sum())')
check "python succeeds" succeeded "$(field "$inv" state)"
check "python output" "py 3 3" "$(output "$inv")"
check "python charged 2 credits" 2 "$(field "$inv" credits_charged)"
check "tool call row" "1|succeeded|0" "$(q -c "SELECT count(*), min(status), min(exit_code) FROM agent.agent_tool_calls WHERE invocation_id = '$inv'")"
check "tool call input hash is the code's sha256" t \
	"$(q -c "SELECT t.input_hash = agent.code_sha256(i.code) FROM agent.agent_tool_calls t JOIN agent.invocations i ON i.id = t.invocation_id WHERE i.id = '$inv'")"
check "analytics row" "python|succeeded|2" \
	"$(q -c "SELECT language, status, credits_charged FROM agent.tool_invocations WHERE invocation_id = '$inv'")"

inv=$(run node 'console.log("node", 6 * 7)')
check "node succeeds" "succeeded|node 42" "$(field "$inv" state)|$(output "$inv")"
inv=$(run shell 'echo "sh $((6 * 7))"; echo oops >&2')
check "shell succeeds, stderr separate" "succeeded|sh 42|oops" "$(field "$inv" state)|$(output "$inv")|$(output "$inv" stderr)"

# ---- the resident launcher and the one-shot jail ------------------------------
check "runs go through the resident launcher (sandbox.jail_launcher = on)" t \
	"$(pgrep -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_launcher/jail.sock" >/dev/null && echo t || echo f)"
q -c "ALTER SYSTEM SET sandbox.jail_launcher = off" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
inv=$(run python 'print("one-shot")')
check "with the launcher off, one-shot jails run the code" "succeeded|one-shot" "$(field "$inv" state)|$(output "$inv")"
check "and the launcher is stopped" f \
	"$(pgrep -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_launcher/jail.sock" >/dev/null && echo t || echo f)"
inv=$(run shell 'sleep 30' 1)
check "one-shot timeout is timed_out" timed_out "$(field "$inv" state)"
q -c "ALTER SYSTEM RESET sandbox.jail_launcher" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5

# ---- outcomes ---------------------------------------------------------------
inv=$(run shell 'exit 3')
check "exit code 3 fails, charged" "failed|3|2" "$(field "$inv" "state || '|' || exit_code || '|' || credits_charged")"

inv=$(run python 'import time; time.sleep(30)' 1)
check "timeout is timed_out and charged" "timed_out|1|2" "$(field "$inv" "state || '|' || timed_out::int || '|' || credits_charged")"

inv=$(run shell 'head -c 3000000 /dev/zero | tr "\0" x')
check "output over the limit is truncated" "succeeded|1" "$(field "$inv" "state || '|' || output_truncated::int")"
stored=$(q -c "SELECT sum(octet_length(data)) FROM agent.invocation_output WHERE invocation_id = '$inv'")
if [ "$stored" -le $((1024 * 1024)) ] && [ "$stored" -gt 0 ]; then ok "stored output within sandbox.output_limit ($stored bytes)"; else nok "stored output within limit" "$stored"; fi

# Provisioning failure: the jail cannot be executed → refunded.
before=$(balance)
q -c "ALTER SYSTEM SET sandbox.jail_path = '/nonexistent/sandbox-jail'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
inv=$(run shell 'echo never')
q -c "ALTER SYSTEM RESET sandbox.jail_path" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
check "missing jail is provision_failed" provision_failed "$(field "$inv" state)"
check "provision_failed is refunded (net 0)" "0|$before" "$(field "$inv" credits_charged)|$(balance)"
check "ledger has charge and refund" "charge:-2,refund:2" \
	"$(q -c "SELECT string_agg(kind || ':' || amount, ',' ORDER BY id) FROM agent.credit_ledger WHERE invocation_id = '$inv'")"
# An unusable work directory: nothing is claimed (the run waits, uncharged)
# and worker_status() says why; once it is usable again the run runs.
before=$(balance)
q -c "ALTER SYSTEM SET sandbox.work_dir = '/proc/sandbox_not_here'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
read -r inv appr < <(request shell 'echo waited')
approve "$appr"
st=$(await "$inv" 3)
check "unusable work directory: the run waits, uncharged" "approved|0|$before" \
	"$st|$(field "$inv" credits_charged)|$(balance)"
check "worker_status() names the directory and why" t \
	"$(q -c "SELECT problem LIKE '%/proc/sandbox_not_here%' FROM agent.worker_status()")"
q -c "ALTER SYSTEM RESET sandbox.work_dir" -c "SELECT pg_reload_conf()" >/dev/null
check "once usable again, the waiting run runs" "succeeded|waited" "$(await "$inv")|$(output "$inv")"
check "... and worker_status() has no problem" "" "$(q -c "SELECT problem FROM agent.worker_status()")"
inv=$(run shell 'echo back')
check "supervisor keeps serving after a bad invocation" "succeeded|back" "$(field "$inv" state)|$(output "$inv")"

# Insufficient credits: nothing charged, nothing run.
read -r O2 W2 A2 C2 < <(new_tenant 1)
read -r inv appr < <(ORG=$O2 WS=$W2 AGENT=$A2 request shell 'echo should-not-run')
ORG=$O2 WS=$W2 approve "$appr"
st=$(ORG=$O2 WS=$W2 await "$inv")
check "insufficient credits" "insufficient_credits|0|1" "$st|$(q -c "SELECT count(*) FROM agent.credit_ledger WHERE invocation_id = '$inv'")|$(balance "$O2")"
check "insufficient credits ran nothing" 0 "$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"

# Code swapped after approval (by someone able to bypass the freeze
# trigger): the supervisor refuses to run it.
read -r inv appr < <(request shell 'echo approved-code')
q <<SQL >/dev/null
BEGIN;
SELECT agent.set_tenant('$ORG', '$WS');
SELECT agent.approve('$appr', 'approver');
SET LOCAL session_replication_role = replica;
UPDATE agent.invocations SET code = 'echo EVIL' WHERE id = '$inv';
COMMIT;
SQL
st=$(await "$inv")
check "hash mismatch refused, uncharged" "provision_failed|0" "$st|$(field "$inv" credits_charged)"
check "hash mismatch ran nothing" 0 "$(q -c "SELECT count(*) FROM agent.invocation_output WHERE invocation_id = '$inv'")"
check "hash mismatch audited" 1 "$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'invocation.hash_mismatch'")"

# ---- cancel -----------------------------------------------------------------
read -r inv appr < <(request shell 'echo never')
st=$(q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.cancel('$inv', 'tester', 'changed my mind'); COMMIT;" | tail -n 1)
check "cancel before approval" "cancelled|cancelled|0" "$st|$(field "$inv" state)|$(field "$inv" credits_charged)"

read -r inv appr < <(request shell 'echo started; sleep 60')
approve "$appr"
for _ in $(seq 1 100); do [ "$(field "$inv" state)" = running ] && break; sleep 0.1; done
st=$(q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.cancel('$inv', 'tester'); COMMIT;" | tail -n 1)
final=$(await "$inv" 20)
check "cancel while running" "cancelling|cancelled|2" "$st|$final|$(field "$inv" credits_charged)"
err=$(q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT agent.cancel('$inv', 'tester'); COMMIT;" 2>&1 | grep -o 'already finished' | head -n 1)
check "cancel of a finished invocation is an error" "already finished" "$err"

# ---- streaming --------------------------------------------------------------
read -r inv appr < <(request python 'import time
print("first", flush=True)
time.sleep(2)
print("second", flush=True)')
channel=$(tval "SELECT agent.output_channel('$inv')")
as_pg "$tmp/listen" "host=$CLUSTER_DIR port=$PORT user=postgres dbname=$DB" "$channel" 60 >"$tmp/notes" 2>"$tmp/listen.err" &
lpid=$!
for _ in $(seq 1 50); do grep -q ready "$tmp/listen.err" 2>/dev/null && break; sleep 0.1; done
approve "$appr"
await "$inv" >/dev/null
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
second" "$(q -c "BEGIN; SELECT agent.set_tenant('$ORG', '$WS'); SELECT string_agg(data, '' ORDER BY seq) FROM agent.read_output('$inv', 0); COMMIT;" | sed '/^$/d')"
check "notifications carry no output" 0 "$(grep -c 'first\|second' "$tmp/notes")"
check "a notification carries a hint only (output or done: no seq, stream, size or state)" "0|1" \
	"$(grep -cvE '^[0-9]+ (output|done)$' "$tmp/notes")|$(grep -c ' done$' "$tmp/notes")"
check "the channel is not named after the invocation" f \
	"$([[ "$channel" == *"$inv"* || "$channel" == *"${inv//-/}"* ]] && echo t || echo f)"

# ---- a notification is only a hint: forged ones do not end a client ----------
# scripts/follow.sh is the demo's (and the docs') client.  Once the run has
# printed its first line, NOTIFY a forged end on the old, guessable channel
# (sandbox_output_<id>) and, as someone who learned it, on the real one.
# The client must keep following (it reads the state, still running) and
# end with the real final state.
read -r inv appr < <(request python 'import time
print("first", flush=True)
time.sleep(25)
print("second", flush=True)')
"$top/scripts/follow.sh" "$tmp/listen" "$ORG" "$WS" "$inv" 60 >"$tmp/follow.out" 2>"$tmp/follow.err" &
fpid=$!
for _ in $(seq 1 100); do grep -q '^ready$' "$tmp/follow.err" 2>/dev/null && break; sleep 0.1; done
approve "$appr"
for _ in $(seq 1 200); do grep -q $'^stdout\tfirst$' "$tmp/follow.out" && break; sleep 0.1; done
channel=$(tval "SELECT agent.output_channel('$inv')")
q -c "NOTIFY \"sandbox_output_$inv\", '{\"done\":true,\"state\":\"succeeded\"}'" >/dev/null
q -c "SELECT pg_notify('$channel', 'done'), pg_notify('$channel', '{\"done\":true,\"state\":\"succeeded\"}')" >/dev/null
# What the client did after the second forged end: it looked at the state.
after_forged() { awk '/^hint .*done/ { n++; next } n >= 2 && /^look / { print $2; exit }' "$tmp/follow.err"; }
for _ in $(seq 1 100); do [ -n "$(after_forged)" ] && break; sleep 0.1; done
check "the forged ends reached the client" 2 "$(grep -c '^hint .*done' "$tmp/follow.err")"
check "after them it read the state (running) and kept following" "running|running|alive" \
	"$(after_forged)|$(field "$inv" state)|$(kill -0 "$fpid" 2>/dev/null && echo alive || echo gone)"
tval "SELECT agent.cancel('$inv', 'tester')" >/dev/null
wait "$fpid"
rc=$?
check "the client ends with the real final state" "0|$(field "$inv" state)" \
	"$rc|$(grep $'^state\t' "$tmp/follow.out" | cut -f2)"
check "and printed the real output only" "stdout	first" "$(grep -v $'^state\t' "$tmp/follow.out")"

# ---- tenancy of the execution API ------------------------------------------
read -r O3 W3 A3 C3 < <(new_tenant 0)
err=$(q -c "BEGIN; SELECT agent.set_tenant('$O3', '$W3'); SELECT * FROM agent.read_output('$inv', 0); COMMIT;" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot read the output" "does not exist" "$err"
err=$(q -c "BEGIN; SELECT agent.set_tenant('$O3', '$W3'); SELECT agent.cancel('$inv', 'x'); COMMIT;" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot cancel" "does not exist" "$err"
err=$(q -c "BEGIN; SELECT agent.set_tenant('$O3', '$W3'); SELECT agent.wait('$inv', '1 s'); COMMIT;" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot wait on it" "does not exist" "$err"
err=$(q -c "SELECT agent.wait(NULL)" 2>&1 | grep -o 'must not be null' | head -n 1)
check "wait on a null invocation is an error" "must not be null" "$err"
cnt=$(q -c "BEGIN; SELECT agent.set_tenant('$O3', '$W3'); SET LOCAL ROLE agent_backend; SELECT count(*) FROM agent.invocation_output; COMMIT;" | tail -n 1)
check "another tenant sees no output rows (RLS)" 0 "$cnt"

# ---- concurrency cap --------------------------------------------------------
q -c "ALTER SYSTEM SET sandbox.max_concurrent_runs = 2" -c "SELECT pg_reload_conf()" >/dev/null
sleep 0.5
ids=()
for i in 1 2 3 4 5; do
	read -r inv appr < <(request shell 'sleep 1')
	ids+=("$inv")
	approve "$appr"
done
maxslots=0
for _ in $(seq 1 60); do
	s=$(q -c "SELECT slots_in_use FROM agent.worker_status()")
	[ "$s" -gt "$maxslots" ] && maxslots=$s
	left=$(q -c "SELECT count(*) FROM agent.invocations WHERE id IN ($(printf "'%s'," "${ids[@]}" | sed 's/,$//')) AND NOT agent._state_is_terminal(state)")
	[ "$left" -eq 0 ] && break
	sleep 0.1
done
overlap=$(q <<SQL
WITH r AS (SELECT started_at s, finished_at f FROM agent.invocations
			WHERE id IN ($(printf "'%s'," "${ids[@]}" | sed 's/,$//')))
SELECT max((SELECT count(*) FROM r r2 WHERE r2.s <= r1.s AND r2.f > r1.s)) FROM r r1;
SQL
)
check "concurrency cap 2 honoured (max overlap, max slots)" "2|2" "$overlap|$maxslots"
q -c "ALTER SYSTEM RESET sandbox.max_concurrent_runs" -c "SELECT pg_reload_conf()" >/dev/null

# ---- recovery ---------------------------------------------------------------
marker="sbx-recovery-$$"
read -r inv appr < <(request shell "exec -a $marker sleep 120")
approve "$appr"
for _ in $(seq 1 100); do [ "$(field "$inv" state)" = running ] && break; sleep 0.1; done
oldpid=$(q -c "SELECT pid FROM agent.worker_status()")
q -c "SELECT pg_terminate_backend($oldpid)" >/dev/null
for _ in $(seq 1 100); do
	newpid=$(q -c "SELECT coalesce(pid, 0) FROM agent.worker_status()")
	[ "$newpid" != 0 ] && [ "$newpid" != "$oldpid" ] && break
	sleep 0.1
done
st=$(await "$inv" 20)
check "worker killed mid-run: a failure of ours, refunded (charged once, refunded once)" \
	"provision_failed|the supervisor restarted while the run was in progress|0|charge:-2,refund:2" \
	"$st|$(field "$inv" state_reason)|$(field "$inv" credits_charged)|$(q -c "SELECT string_agg(kind || ':' || amount, ',' ORDER BY id) FROM agent.credit_ledger WHERE invocation_id = '$inv'")"
# The payload dies with its jail (PR_SET_PDEATHSIG); give a loaded machine time.
for _ in $(seq 1 50); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
check "no orphan payload after the worker died" 0 "$(pgrep -fc "$marker" || true)"
check "worker restarted with a new pid" t "$([ "$newpid" != "$oldpid" ] && [ "$newpid" != 0 ] && echo t || echo f)"

read -r inv appr < <(request shell "exec -a $marker-2 sleep 120")
approve "$appr"
for _ in $(seq 1 100); do [ "$(field "$inv" state)" = running ] && break; sleep 0.1; done
pg_ctl -m immediate -w stop >/dev/null 2>&1
for _ in $(seq 1 50); do pgrep -f "$marker-2" >/dev/null || break; sleep 0.1; done
check "no orphan payload after an immediate shutdown" 0 "$(pgrep -fc "$marker-2" || true)"
pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
for _ in $(seq 1 100); do
	st=$(field "$inv" state 2>/dev/null)
	[ "$st" = provision_failed ] && break
	sleep 0.2
done
check "after crash restart the row is resolved, refunded" "provision_failed|0" "$st|$(field "$inv" credits_charged)"
inv=$(run shell 'echo alive')
check "runs again after the restart" "succeeded|alive" "$(field "$inv" state)|$(output "$inv")"
check "no leftover work directories" 0 "$(find "$WORK" -mindepth 1 -maxdepth 1 ! -name sessions ! -name skills ! -name launcher 2>/dev/null | wc -l)"

# ---- not preloaded -----------------------------------------------------------
q -c "ALTER SYSTEM SET shared_preload_libraries = 'pg_cron'" >/dev/null
pg_ctl -m fast -w stop >/dev/null 2>&1
pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
notice=$(q <<SQL 2>&1
BEGIN;
SELECT agent.set_tenant('$ORG', '$WS');
SELECT status FROM agent.request_execution('$WS', '$AGENT', NULL, 'shell', 'echo queued', 'tester');
COMMIT;
SQL
)
check "without preloading, requests still work" 1 "$(grep -c '^pending_approval$' <<<"$notice")"
check "... and say with a hint that nothing will run" 1 "$(grep -c 'HINT:.*shared_preload_libraries' <<<"$notice")"
check "worker_status says not preloaded" "f|f" "$(q -c "SELECT preloaded || '|' || running FROM agent.worker_status()" | sed 's/true/t/g; s/false/f/g')"
q -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
pg_ctl -m fast -w stop >/dev/null 2>&1
pg_ctl -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null
for _ in $(seq 1 50); do [ "$(q -c 'SELECT running FROM agent.worker_status()')" = t ] && break; sleep 0.2; done
check "preloaded again, the supervisor is back" t "$(q -c 'SELECT running FROM agent.worker_status()')"

# ---- invariants -------------------------------------------------------------
check "balance equals the ledger sum for every org" 0 "$(q <<'SQL'
SELECT count(*) FROM agent.credit_balances b
 WHERE b.balance <> (SELECT coalesce(sum(amount), 0) FROM agent.credit_ledger l WHERE l.org_id = b.org_id);
SQL
)"
check "no invocation charged twice" 0 "$(q -c "SELECT count(*) FROM (SELECT invocation_id FROM agent.credit_ledger WHERE kind = 'charge' GROUP BY 1 HAVING count(*) > 1) x")"
check "every finished run has exactly one outcome audit event" 0 "$(q <<SQL
SELECT count(*) FROM agent.invocations i
 WHERE i.org_id IN ('$ORG', '$O2', '$O3')
   AND i.state IN ('succeeded', 'failed', 'timed_out', 'killed', 'provision_failed')
   AND (SELECT count(*) FROM agent.audit_events e
		 WHERE e.invocation_id = i.id
		   AND e.event_type IN ('invocation.finished', 'invocation.provision_failed', 'invocation.hash_mismatch')) <> 1;
SQL
)"
check "every run has its tool call and analytics row" 0 "$(q <<SQL
SELECT count(*) FROM agent.invocations i
 WHERE i.org_id IN ('$ORG', '$O2', '$O3')
   AND i.state IN ('succeeded', 'failed', 'timed_out', 'killed', 'cancelled', 'provision_failed')
   AND i.started_at IS NOT NULL
   AND (NOT EXISTS (SELECT 1 FROM agent.agent_tool_calls t WHERE t.invocation_id = i.id)
		OR NOT EXISTS (SELECT 1 FROM agent.tool_invocations t WHERE t.invocation_id = i.id));
SQL
)"
broken=$(q -c "SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE NOT v.ok")
check "audit chain valid for every org" 0 "$broken"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
