#!/usr/bin/env bash
# Conversations: sessions reused across messages, files in and out, skills,
# expiry and rebuild (also through the real pg_cron), hostile outputs,
# caps, tenancy, and serial execution within a conversation.  Runs through
# the real supervisor and jail on the cluster test/run.sh started.
# Ends with "N passed, N failed".
set -uo pipefail

PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:?}
PORT=${SANDBOX_PGPORT:?}
DB=${SANDBOX_DB:?}

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $1"; }
nok() { fail=$((fail + 1)); echo "not ok - $1"; [ $# -gt 1 ] && echo "#   $2"; }
check() { if [ "$2" = "$3" ]; then ok "$1"; else nok "$1" "expected [$2], got [$3]"; fi; }

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
q() { as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d "$DB" "$@"; }
# In a tenant's context, as agent_backend would call the API.
# Usage: tq [psql options] SQL (SQL from stdin, so :'var' interpolation works).
tq() {
	local sql=${*: -1}
	printf "SET sandbox.org_id = '%s'; SET sandbox.workspace_id = '%s'; SET ROLE agent_backend;\n%s\n" \
		"$ORG" "$WS" "$sql" | q "${@:1:$#-1}" -f -
}

new_tenant() {		# upload_enabled → "org ws agent conv"
	q -F ' ' <<SQL | tail -n 1
WITH o AS (INSERT INTO agent.orgs (name, plan) VALUES ('s-' || gen_random_uuid(), 'pro') RETURNING id),
	 w AS (INSERT INTO agent.workspaces (org_id, name) SELECT id, 'w' FROM o RETURNING id, org_id),
	 m AS (INSERT INTO agent.models (name, supports_code_execution)
		   VALUES ('m-' || gen_random_uuid(), true) RETURNING id),
	 a AS (INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id,
									 code_execution_enabled, file_upload_enabled)
		   SELECT w.org_id, w.id, 'analyst', 'specialist', m.id, true, $1 FROM w, m
		   RETURNING id, org_id, workspace_id),
	 c AS (INSERT INTO agent.conversations (org_id, workspace_id, agent_id, code_execution_enabled)
		   SELECT org_id, workspace_id, id, true FROM a RETURNING id, org_id, workspace_id, agent_id),
	 g AS (SELECT agent.grant_credits(c.org_id, 1000, 'test') FROM c)
SELECT c.org_id, c.workspace_id, c.agent_id, c.id FROM c, g;
SQL
}
read -r ORG WS AGENT CONV < <(new_tenant true)
WORK=$(q -c "SELECT work_dir FROM agent.worker_status()")

request() {			# lang code [conversation|none] → "inv approval"
	local conv=${3:-$CONV}
	[ "$conv" = none ] && conv=NULL || conv="'$conv'"
	tq -F ' ' -v code="$2" "SELECT invocation_id, approval_id FROM agent.request_execution('$WS', '$AGENT', $conv, '$1', :'code', 'tester')" | tail -n 1
}
approve() { tq "SELECT agent.approve('$1', 'approver')" >/dev/null; }
await() { tq "SELECT agent.wait('$1', '60 s')" | tail -n 1; }
run() {				# lang code [conversation|none] → inv
	local inv appr
	read -r inv appr < <(request "$@")
	approve "$appr"
	await "$inv" >/dev/null
	echo "$inv"
}
field() { q -c "SELECT $2 FROM agent.invocations WHERE id = '$1'"; }
output() { q -c "SELECT string_agg(data, '' ORDER BY seq) FROM agent.invocation_output WHERE invocation_id = '$1' AND stream = '${2:-stdout}'"; }
setting() { q -c "UPDATE agent.settings SET value = '$2' WHERE key = '$1'" >/dev/null; }

# ---- "group that by region": two messages, one workspace --------------------
csv='region,rep,amount
north,ana,120
south,bo,80
north,cy,200
east,di,50'
fid=$(tq -v c="$csv" "SELECT agent.upload_file('$CONV', 'sales.csv', convert_to(:'c', 'UTF8'), 'alice', 'text/csv')" | tail -n 1)
check "upload returns a file id" 36 "${#fid}"

inv1=$(run python 'import pandas as pd
df = pd.read_csv("sales.csv")
by_rep = df.groupby("rep")["amount"].sum()
by_rep.to_csv("by_rep.csv")
open("notes.txt", "w").write("scratch from message 1\n")
print(by_rep.sum())')
check "message 1 reads the uploaded file" "succeeded|450" "$(field "$inv1" state)|$(output "$inv1")"

inv2=$(run python 'import pandas as pd, os
df = pd.read_csv("sales.csv")
df.groupby("region")["amount"].sum().to_csv("by_region.csv")
print(sorted(os.listdir(".")))
print(open("notes.txt").read().strip())')
check "message 2 sees message 1's files without re-upload" \
	"succeeded|['by_region.csv', 'by_rep.csv', 'notes.txt', 'sales.csv']
scratch from message 1" "$(field "$inv2" state)|$(output "$inv2")"
check "both messages ran in session generation 1, same session" "1|1|t" \
	"$(field "$inv1" session_generation)|$(field "$inv2" session_generation)|$(q -c "SELECT (SELECT session_id FROM agent.invocations WHERE id = '$inv1') = (SELECT session_id FROM agent.invocations WHERE id = '$inv2')")"
check "produced files listed on the tool call" "by_region.csv" \
	"$(q -c "SELECT string_agg(x->>'name', ',') FROM agent.agent_tool_calls, jsonb_array_elements(files) x WHERE invocation_id = '$inv2' AND x->>'status' = 'saved'")"
region_id=$(tq "SELECT id FROM agent.list_files('$CONV') WHERE name = 'by_region.csv' AND current" | tail -n 1)
check "download returns the produced file" "region,amount
east,50
north,320
south,80" "$(tq "SELECT rtrim(convert_from(content, 'UTF8'), E'\\n') FROM agent.download_file('$region_id')")"
check "list_files: uploads and produced files with origin" \
	"by_region.csv:produced,by_rep.csv:produced,notes.txt:produced,sales.csv:uploaded" \
	"$(tq "SELECT string_agg(name || ':' || origin, ',' ORDER BY name) FROM agent.list_files('$CONV') WHERE current" | tail -n 1)"
check "sha256 stored matches the content" t \
	"$(q -c "SELECT bool_and(sha256 = encode(sha256(content), 'hex') AND size = octet_length(content)) FROM agent.files WHERE conversation_id = '$CONV' AND status = 'saved'")"

# ---- conversation-less runs get a fresh workspace ---------------------------
inv=$(run shell 'echo secret > left_behind.txt; ls' none)
check "conversation-less run succeeds" "succeeded|left_behind.txt" "$(field "$inv" state)|$(output "$inv")"
inv=$(run shell 'ls -A | wc -l' none)
check "next conversation-less run starts empty" "succeeded|0" "$(field "$inv" state)|$(output "$inv")"
check "its file was still returned, with no conversation" "left_behind.txt|saved" \
	"$(q -c "SELECT name || '|' || status FROM agent.files WHERE conversation_id IS NULL AND invocation_id = (SELECT id FROM agent.invocations WHERE code LIKE 'echo secret%' AND workspace_id = '$WS')")"
check "no per-run work directories left" 0 "$(find "$WORK" -mindepth 1 -maxdepth 1 ! -name sessions ! -name skills ! -name launcher | wc -l)"

# ---- hostile outputs ---------------------------------------------------------
inv=$(run shell 'ln -s /etc/shadow shadow_link
ln -s /var/lib/postgresql pg_home
ln sales.csv hard_copy
mkfifo pipe
echo fine > plain.txt')
check "hostile outputs: run succeeds" succeeded "$(field "$inv" state)"
check "symlinks, hard links and fifos are skipped with a reason" \
	"hard_copy:skipped:a hard link (not copied)|pg_home:skipped:a symbolic link (not followed)|pipe:skipped:a fifo|plain.txt:saved:|sales.csv:skipped:a hard link (not copied)|shadow_link:skipped:a symbolic link (not followed)" \
	"$(q -c "SELECT string_agg(name || ':' || status || ':' || coalesce(reason, ''), '|' ORDER BY name) FROM agent.files WHERE invocation_id = '$inv'")"
check "nothing of the host was copied" 0 \
	"$(q -c "SELECT count(*) FROM agent.files WHERE invocation_id = '$inv' AND content IS NOT NULL AND name <> 'plain.txt'")"
check "host files untouched" "$(stat -c %U:%a /etc/shadow)" "$(stat -c %U:%a /etc/shadow)"

# A link planted where an uploaded file will be written must not redirect
# the host's write.
tq "SELECT agent.upload_file('$CONV', 'incoming.txt', 'hello'::bytea, 'alice')" >/dev/null
victim=$(mktemp /tmp/sbx_victim.XXXXXX); echo original > "$victim"; chmod 666 "$victim"
q -c "SELECT 1" >/dev/null
inv=$(run shell "cat incoming.txt")
check "upload placed before the next run" "succeeded|hello" "$(field "$inv" state)|$(output "$inv")"
tq "SELECT agent.upload_file('$CONV', 'incoming.txt', 'second'::bytea, 'alice')" >/dev/null
ln -sf "$victim" "$WORK/sessions/$(field "$inv" session_id)/workspace/incoming.txt"
inv=$(run shell "cat incoming.txt")
check "a planted symlink is replaced, not followed" "succeeded|second|original" \
	"$(field "$inv" state)|$(output "$inv")|$(cat "$victim")"
rm -f "$victim"

# ---- caps ---------------------------------------------------------------------
setting max_produced_files 2
setting max_produced_file_bytes 1000
inv=$(run shell 'for i in 1 2 3 4; do echo $i > f$i.txt; done; head -c 5000 /dev/zero > big.bin')
check "caps: two saved, the rest skipped with reasons" \
	"big.bin:skipped:larger than the limit of 1000 bytes (5000 bytes)|f1.txt:saved:|f2.txt:saved:|f3.txt:skipped:more than 2 files were produced|f4.txt:skipped:more than 2 files were produced" \
	"$(q -c "SELECT string_agg(name || ':' || status || ':' || coalesce(reason, ''), '|' ORDER BY name) FROM agent.files WHERE invocation_id = '$inv'")"
setting max_produced_files 100
setting max_produced_file_bytes 20971520
err=$(tq "SELECT agent.upload_file('$CONV', 'x.bin', decode(repeat('00', 11000000), 'hex'), 'alice')" 2>&1 | grep -o 'too large' | head -n 1)
check "upload over max_upload_bytes refused" "too large" "$err"
err=$(tq "SELECT agent.upload_file('$CONV', '../escape.txt', 'x'::bytea, 'alice')" 2>&1 | grep -o 'invalid file name' | head -n 1)
check "upload with .. in the name refused" "invalid file name" "$err"
err=$(tq "SELECT * FROM agent.list_files(NULL)" 2>&1 | grep -o 'conversation must not be null' | head -n 1)
check "list_files(NULL) is a null-argument error, not an empty list" "conversation must not be null" "$err"
err=$(tq "SELECT * FROM agent.download_file(NULL)" 2>&1 | grep -o 'file id must not be null' | head -n 1)
check "download_file(NULL) is a null-argument error" "file id must not be null" "$err"

# ---- expiry and rebuild ------------------------------------------------------
sess=$(field "$inv" session_id)
setting session_idle_timeout '1 second'
sleep 1.5
# (other suites' sessions on this cluster may expire too: count only ours)
q -c "SELECT agent.expire_idle_sessions(NULL)" >/dev/null
check "expire_idle_sessions(NULL) (as of now) ends the idle session" "ended|expired" \
	"$(q -c "SELECT state || '|' || end_reason FROM agent.sessions WHERE id = '$sess'")"
for _ in $(seq 1 50); do [ -d "$WORK/sessions/$sess" ] || break; sleep 0.1; done
check "its workspace is deleted" gone "$([ -d "$WORK/sessions/$sess" ] && echo present || echo gone)"
setting session_idle_timeout '30 minutes'
inv=$(run shell 'ls big.bin f3.txt 2>/dev/null; cat sales.csv | wc -l; cat by_region.csv | head -n 1; cat notes.txt')
check "rebuilt session: files put back, unreturned ones gone" "succeeded|4
region,amount
scratch from message 1" "$(field "$inv" state)|$(output "$inv")"
check "rebuild is visible: generation 2 and an audit event" "2|1" \
	"$(field "$inv" session_generation)|$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'session.rebuilt'")"
check "expiry audited" 1 "$(q -c "SELECT count(*) FROM agent.audit_events WHERE event_type = 'session.expired' AND details->>'session_id' = '$sess'")"

# ---- skills ------------------------------------------------------------------
skill=$(tq "SELECT agent.create_skill('report-kit', jsonb_build_object('template.txt', encode('Dear {name},'::bytea, 'base64'), 'bin/hello.sh', encode(E'#!/bin/bash\necho hello from skill'::bytea, 'base64')))" | tail -n 1)
tq "SELECT agent.set_agent_skill('$AGENT', '$skill')" >/dev/null
err=$(tq "SELECT agent.create_skill('../Bad Name', '{}'::jsonb)" 2>&1 | grep -o 'invalid skill name' | head -n 1)
check "a bad skill name is refused" "invalid skill name" "$err"
err=$(tq "SELECT agent.create_skill('kit2', '{\"a.txt\": \"!!notbase64\"}'::jsonb)" 2>&1 | grep -o 'is not valid base64' | head -n 1)
check "skill content that is not base64 is refused" "is not valid base64" "$err"
inv=$(run shell 'cat /skills/report-kit/template.txt; echo; /skills/report-kit/bin/hello.sh; echo x > /skills/report-kit/new 2>/dev/null || echo read-only')
check "skill files readable and runnable, read-only" "succeeded|Dear {name},
hello from skill
read-only" "$(field "$inv" state)|$(output "$inv")"
check "skill change rebuilt the session (generation 3, skills_changed)" "3|skills_changed" \
	"$(field "$inv" session_generation)|$(q -c "SELECT end_reason FROM agent.sessions WHERE conversation_id = '$CONV' AND generation = 2")"
inv=$(run shell 'ls /skills')
check "same skills: session reused" "3|report-kit" "$(field "$inv" session_generation)|$(output "$inv")"

# ---- tenancy -------------------------------------------------------------------
read -r O2 W2 A2 C2 < <(new_tenant false)
err=$(ORG=$O2 WS=$W2 tq "SELECT * FROM agent.list_files('$CONV')" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot list the files" "does not exist" "$err"
err=$(ORG=$O2 WS=$W2 tq "SELECT name FROM agent.download_file('$region_id')" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot download a file" "does not exist" "$err"
check "another tenant sees no file rows (RLS)" 0 "$(ORG=$O2 WS=$W2 tq "SELECT count(*) FROM agent.files" | tail -n 1)"
err=$(ORG=$O2 WS=$W2 tq "SELECT agent.upload_file('$C2', 'a.txt', 'x'::bytea, 'bob')" 2>&1 | grep -oE 'does not accept file uploads|42501' | head -n 1)
check "agent without the file-upload capability cannot upload" "does not accept file uploads" "$err"
err=$(ORG=$O2 WS=$W2 tq "SELECT agent.upload_file('$CONV', 'a.txt', 'x'::bytea, 'bob')" 2>&1 | grep -o 'does not exist' | head -n 1)
check "another tenant cannot upload into your conversation" "does not exist" "$err"

# ---- serial execution within a conversation --------------------------------------
ids=()
apprs=()
for i in 1 2 3; do
	read -r inv appr < <(request shell "echo $i >> order.txt; sleep 0.5; cat order.txt | tr '\n' ' '")
	ids+=("$inv"); apprs+=("$appr")
done
# Approve concurrently (three backends at once).
for a in "${apprs[@]}"; do approve "$a" & done
wait
for inv in "${ids[@]}"; do await "$inv" >/dev/null; done
overlaps=$(q <<SQL
WITH r AS (SELECT id, started_at s, finished_at f FROM agent.invocations
			WHERE id IN ('${ids[0]}', '${ids[1]}', '${ids[2]}'))
SELECT count(*) FROM r a JOIN r b ON a.id < b.id AND a.s < b.f AND b.s < a.f;
SQL
)
check "runs of one conversation never overlap" 0 "$overlaps"
# Approved one after the other, in reverse request order: they run in
# approval order, not request order.
ids=()
apprs=()
for i in 1 2 3; do
	read -r inv appr < <(request shell "echo $i >> order2.txt; sleep 0.3")
	ids+=("$inv"); apprs+=("$appr")
done
for k in 2 1 0; do approve "${apprs[$k]}"; done
for inv in "${ids[@]}"; do await "$inv" >/dev/null; done
check "they ran in approval order" "3,2,1" "$(q <<SQL
SELECT string_agg(split_part(code, ' ', 2), ',' ORDER BY started_at)
  FROM agent.invocations WHERE id IN ('${ids[0]}', '${ids[1]}', '${ids[2]}');
SQL
)"

# ---- pg_cron fires the expiry --------------------------------------------------------
check "install scheduled the jobs with pg_cron" 2 \
	"$(q -c "SELECT count(*) FROM cron.job WHERE jobname IN ('sandbox_ext_expire_idle_sessions', 'sandbox_ext_expire_pending_approvals')")"
sess=$(q -c "SELECT id FROM agent.sessions WHERE conversation_id = '$CONV' AND state = 'active'")
setting session_idle_timeout '1 second'
ended=""
for _ in $(seq 1 90); do		# pg_cron 1.4 has minute granularity
	[ -n "$sess" ] || break
	ended=$(q -c "SELECT state FROM agent.sessions WHERE id = '$sess'")
	[ "$ended" = ended ] && break
	sleep 1
done
setting session_idle_timeout '30 minutes'
check "the pg_cron job expired the idle session" "ended|1" \
	"$ended|$(q -c "SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname = 'sandbox_ext_expire_idle_sessions' AND d.status = 'succeeded'" | awk '{ print ($1 > 0) ? 1 : 0 }')"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
