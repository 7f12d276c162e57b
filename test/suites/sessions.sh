#!/usr/bin/env bash
# Conversations: sessions reused across messages, files in and out, skills,
# expiry and rebuild (also through the real pg_cron), hostile outputs,
# caps, tenancy, and serial execution within a conversation.  Runs through
# the real supervisor and jail on the cluster test/run.sh started; each test
# has a tenant (and conversation) of its own.  T=REGEX runs only the
# matching tests (test/lib.sh).  Ends with "N passed, N failed".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_sessions.XXXXXX)
chmod 0755 "$tmp"
cleanup() {
	setting max_produced_files 100
	setting max_produced_file_bytes 20971520
	setting session_idle_timeout '30 minutes'
	rm -rf "$tmp"
}
trap cleanup EXIT

wait_for 10 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'
WORK=$(q -c "SELECT work_dir FROM agent.worker_status()")

csv='region,rep,amount
north,ana,120
south,bo,80
north,cy,200
east,di,50'
# upload TENANT NAME TEXT → file id, into the tenant's conversation
upload() {
	local org ws agent conv
	read -r org ws agent conv <<<"$1"
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', '$2', convert_to(:'c', 'UTF8'), 'alice', 'text/plain');" -v c="$3"
}
# A file row's "name:status:reason" for each file a run produced, in name order.
produced() {
	q -c "SELECT string_agg(name || ':' || status || ':' || coalesce(reason, ''), '|' ORDER BY name) FROM agent.files WHERE invocation_id = '$1'"
}
# Expire the session now (the idle timeout set to a second, and waited for).
expire_now() {
	setting session_idle_timeout '1 second'
	sleep 1.5
	# (other suites' sessions on this cluster may expire too: checks look at ours)
	q -c "SELECT agent.expire_idle_sessions(NULL)" >/dev/null
	setting session_idle_timeout '30 minutes'
}

# "Group that by region": two messages, one workspace.
t_two_messages() {
	local A org ws agent conv fid inv1 inv2 region_id
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	fid=$(upload "$A" sales.csv "$csv")
	check "upload returns a file id" 36 "${#fid}"

	inv1=$(run "$A" python 'import pandas as pd
df = pd.read_csv("sales.csv")
by_rep = df.groupby("rep")["amount"].sum()
by_rep.to_csv("by_rep.csv")
open("notes.txt", "w").write("scratch from message 1\n")
print(by_rep.sum())')
	check "message 1 reads the uploaded file" "succeeded|450" "$(field "$inv1" state)|$(output "$inv1")"

	inv2=$(run "$A" python 'import pandas as pd, os
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
	region_id=$(tq "$org" "$ws" "SELECT id FROM agent.list_files('$conv') WHERE name = 'by_region.csv' AND current;")
	check "download returns the produced file" "region,amount
east,50
north,320
south,80" "$(tq "$org" "$ws" "SELECT rtrim(convert_from(content, 'UTF8'), E'\\n') FROM agent.download_file('$region_id');")"
	check "list_files: uploads and produced files with origin" \
		"by_region.csv:produced,by_rep.csv:produced,notes.txt:produced,sales.csv:uploaded" \
		"$(tq "$org" "$ws" "SELECT string_agg(name || ':' || origin, ',' ORDER BY name) FROM agent.list_files('$conv') WHERE current;")"
	# (issue 27: produced files had no content type)
	check "content types: the uploader's, else the name's (produced files, an upload without one)" \
		"by_region.csv:text/csv,by_rep.csv:text/csv,notes.txt:text/plain,sales.csv:text/plain" \
		"$(tq "$org" "$ws" "SELECT string_agg(name || ':' || content_type, ',' ORDER BY name) FROM agent.list_files('$conv') WHERE current;")"
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'Chart.PNG', '\\x89504e47'::bytea, 'alice'),
	                        agent.upload_file('$conv', 'blob.xyz', '\\x00'::bytea, 'alice');" >/dev/null
	check "an upload without a content type gets its name's" "Chart.PNG:image/png,blob.xyz:application/octet-stream" \
		"$(tq "$org" "$ws" "SELECT string_agg(name || ':' || content_type, ',' ORDER BY name) FROM agent.list_files('$conv')
		                    WHERE name IN ('Chart.PNG', 'blob.xyz');")"
	check "sha256 stored matches the content (6 files)" "6|true" \
		"$(q -c "SELECT count(*) || '|' || bool_and(sha256 = encode(sha256(content), 'hex') AND size = octet_length(content)) FROM agent.files WHERE conversation_id = '$conv' AND status = 'saved'")"
}

# Conversation-less runs get a fresh workspace.
t_conversationless() {
	local A inv first
	A=$(new_tenant 1000)
	first=$(run "$A" shell 'echo secret > left_behind.txt; ls' none)
	check "conversation-less run succeeds" "succeeded|left_behind.txt" "$(field "$first" state)|$(output "$first")"
	inv=$(run "$A" shell 'ls -A | wc -l' none)
	check "next conversation-less run starts empty" "succeeded|0" "$(field "$inv" state)|$(output "$inv")"
	check "its file was still returned, with no conversation" "left_behind.txt|saved|" \
		"$(q -c "SELECT name || '|' || status || '|' || coalesce(conversation_id::text, '') FROM agent.files WHERE invocation_id = '$first'")"
	check "no per-run work directories left" "t|0" \
		"$([ -d "$WORK" ] && echo t)|$(find "$WORK" -mindepth 1 -maxdepth 1 ! -name sessions ! -name skills ! -name launcher | wc -l)"
}

# Hostile outputs: links to host files (one the server may read and write)
# and a host directory, a hard link, a fifo.  Nothing of the host is copied,
# followed or changed, neither when the files are collected nor when the
# session's workspace is deleted.
t_hostile_outputs() {
	local A conv inv sess victim before_v before_s
	A=$(new_tenant 1000)
	conv=$(cut -d' ' -f4 <<<"$A")
	upload "$A" sales.csv "$csv" >/dev/null
	victim=$tmp/victim
	mkdir -p "$victim"
	echo "host secret" >"$victim/secret.txt"
	chown -R postgres: "$victim"
	chmod 0700 "$victim"
	chmod 0600 "$victim/secret.txt"
	before_v=$(stat -c '%U:%a:%s:%Y' "$victim" "$victim/secret.txt"; sha256sum <"$victim/secret.txt")
	before_s=$(stat -c '%U:%a:%s:%Y' /etc/shadow; sha256sum </etc/shadow)
	inv=$(run "$A" shell "ln -s /etc/shadow shadow_link
ln -s $victim/secret.txt secret_link
ln -s $victim victim_dir
ln sales.csv hard_copy
mkfifo pipe
echo fine > plain.txt")
	check "hostile outputs: run succeeds" succeeded "$(field "$inv" state)"
	check "symlinks, hard links and fifos are skipped with a reason" \
		"hard_copy:skipped:a hard link (not copied)|pipe:skipped:a fifo|plain.txt:saved:|sales.csv:skipped:a hard link (not copied)|secret_link:skipped:a symbolic link (not followed)|shadow_link:skipped:a symbolic link (not followed)|victim_dir:skipped:a symbolic link (not followed)" \
		"$(produced "$inv")"
	check "nothing of the host was copied" "0|0" \
		"$(q -c "SELECT count(*) FROM agent.files WHERE invocation_id = '$inv' AND content IS NOT NULL AND name <> 'plain.txt'")|$(q -c "SELECT count(*) FROM agent.files WHERE position('host secret'::bytea IN content) > 0")"
	sess=$(field "$inv" session_id)
	check "(the session has a workspace)" t "$([ -d "$WORK/sessions/$sess/workspace" ] && echo t)"
	expire_now
	for _ in $(seq 1 50); do [ -e "$WORK/sessions/$sess" ] || break; sleep 0.1; done
	check "(the session ended, its workspace deleted)" "ended|gone" \
		"$(q -c "SELECT state FROM agent.sessions WHERE id = '$sess'")|$([ -e "$WORK/sessions/$sess" ] && echo present || echo gone)"
	check "host files untouched (a file the server can write, its directory, /etc/shadow)" \
		"$before_v|$before_s" \
		"$(stat -c '%U:%a:%s:%Y' "$victim" "$victim/secret.txt"; sha256sum <"$victim/secret.txt")|$(stat -c '%U:%a:%s:%Y' /etc/shadow; sha256sum </etc/shadow)"
}

# A link planted where an uploaded file will be written must not redirect
# the host's write.
t_planted_symlink() {
	local A inv victim planted
	A=$(new_tenant 1000)
	upload "$A" incoming.txt hello >/dev/null
	victim=$(mktemp "$tmp/victim.XXXXXX")
	echo original >"$victim"
	chmod 666 "$victim"
	inv=$(run "$A" shell "cat incoming.txt")
	check "upload placed before the next run" "succeeded|hello" "$(field "$inv" state)|$(output "$inv")"
	upload "$A" incoming.txt second >/dev/null
	planted=$(ln -sf "$victim" "$WORK/sessions/$(field "$inv" session_id)/workspace/incoming.txt" && echo planted)
	inv=$(run "$A" shell "cat incoming.txt")
	check "a planted symlink is replaced, not followed" "planted|succeeded|second|original" \
		"$planted|$(field "$inv" state)|$(output "$inv")|$(cat "$victim")"
}

t_caps() {
	local A org ws agent conv inv
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	setting max_produced_files 2
	setting max_produced_file_bytes 1000
	inv=$(run "$A" shell 'for i in 1 2 3 4; do echo $i > f$i.txt; done; head -c 5000 /dev/zero > big.bin')
	setting max_produced_files 100
	setting max_produced_file_bytes 20971520
	check "caps: two saved, the rest skipped with reasons" \
		"big.bin:skipped:larger than the limit of 1000 bytes (5000 bytes)|f1.txt:saved:|f2.txt:saved:|f3.txt:skipped:more than 2 files were produced|f4.txt:skipped:more than 2 files were produced" \
		"$(produced "$inv")"
	check "upload over max_upload_bytes refused" "54000 file \"x.bin\" is too large (11000000 bytes)" \
		"$(tq_error "$org" "$ws" "SELECT agent.upload_file('$conv', 'x.bin', decode(repeat('00', 11000000), 'hex'), 'alice');")"
	check "upload with .. in the name refused" "22023 invalid file name \"../escape.txt\"" \
		"$(tq_error "$org" "$ws" "SELECT agent.upload_file('$conv', '../escape.txt', 'x'::bytea, 'alice');")"
	check "list_files(NULL) is a null-argument error, not an empty list" "22004 conversation must not be null" \
		"$(tq_error "$org" "$ws" "SELECT * FROM agent.list_files(NULL);")"
	check "download_file(NULL) is a null-argument error" "22004 file id must not be null" \
		"$(tq_error "$org" "$ws" "SELECT * FROM agent.download_file(NULL);")"
}

# Expiry and rebuild: what was returned comes back, what was not is gone.
t_expiry_rebuild() {
	local A inv sess
	A=$(new_tenant 1000)
	upload "$A" sales.csv "$csv" >/dev/null
	setting max_produced_file_bytes 1000
	inv=$(run "$A" shell 'echo "scratch from message 1" > notes.txt; head -c 5000 /dev/zero > big.bin; ls')
	setting max_produced_file_bytes 20971520
	check "(a session with a returned file and one too large to return)" "succeeded|notes.txt:saved:" \
		"$(field "$inv" state)|$(q -c "SELECT name || ':' || status || ':' FROM agent.files WHERE invocation_id = '$inv' AND status = 'saved'")"
	sess=$(field "$inv" session_id)
	check "(the session has a workspace)" t "$([ -d "$WORK/sessions/$sess/workspace" ] && echo t)"
	expire_now
	check "expire_idle_sessions(NULL) (as of now) ends the idle session" "ended|expired" \
		"$(q -c "SELECT state || '|' || end_reason FROM agent.sessions WHERE id = '$sess'")"
	for _ in $(seq 1 50); do [ -d "$WORK/sessions/$sess" ] || break; sleep 0.1; done
	check "its workspace is deleted" gone "$([ -d "$WORK/sessions/$sess" ] && echo present || echo gone)"
	inv=$(run "$A" shell 'ls big.bin 2>/dev/null; cat sales.csv | wc -l; cat notes.txt')
	check "rebuilt session: files put back, unreturned ones gone" "succeeded|4
scratch from message 1" "$(field "$inv" state)|$(output "$inv")"
	check "rebuild is visible: generation 2 and an audit event" "2|1" \
		"$(field "$inv" session_generation)|$(q -c "SELECT count(*) FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'session.rebuilt'")"
	check "expiry audited" 1 "$(q -c "SELECT count(*) FROM agent.audit_events WHERE event_type = 'session.expired' AND details->>'session_id' = '$sess'")"
}

t_skills() {
	local A org ws agent conv skill inv
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	inv=$(run "$A" shell 'ls /skills 2>/dev/null | wc -l')
	check "(a session without skills)" "succeeded|0|1" "$(field "$inv" state)|$(output "$inv")|$(field "$inv" session_generation)"
	skill=$(tq "$org" "$ws" "SELECT agent.create_skill('report-kit', jsonb_build_object('template.txt', encode('Dear {name},'::bytea, 'base64'), 'bin/hello.sh', encode(E'#!/bin/bash\\necho hello from skill'::bytea, 'base64')));")
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill');" >/dev/null
	check "a bad skill name is refused" "22023 invalid skill name \"../Bad Name\"" \
		"$(tq_error "$org" "$ws" "SELECT agent.create_skill('../Bad Name', '{}'::jsonb);")"
	check "skill content that is not base64 is refused" "22023 the content of skill file \"a.txt\" is not valid base64" \
		"$(tq_error "$org" "$ws" "SELECT agent.create_skill('kit2', '{\"a.txt\": \"!!notbase64\"}'::jsonb);")"
	inv=$(run "$A" shell 'cat /skills/report-kit/template.txt; echo; /skills/report-kit/bin/hello.sh; echo x > /skills/report-kit/new 2>/dev/null || echo read-only')
	check "skill files readable and runnable, read-only" "succeeded|Dear {name},
hello from skill
read-only" "$(field "$inv" state)|$(output "$inv")"
	check "skill change rebuilt the session (generation 2, skills_changed)" "2|skills_changed" \
		"$(field "$inv" session_generation)|$(q -c "SELECT end_reason FROM agent.sessions WHERE conversation_id = '$conv' AND generation = 1")"
	inv=$(run "$A" shell 'ls /skills')
	check "same skills: session reused" "2|report-kit" "$(field "$inv" session_generation)|$(output "$inv")"
}

t_tenancy() {
	local A B org ws agent conv o2 w2 a2 c2 fid
	A=$(new_tenant 1000)
	read -r org ws agent conv <<<"$A"
	B=$(new_tenant 1000)
	read -r o2 w2 a2 c2 <<<"$B"
	q -c "UPDATE agent.agents SET file_upload_enabled = false WHERE id = '$a2'" >/dev/null
	fid=$(upload "$A" mine.txt "only mine")
	check "(the owner sees the file)" "mine.txt" "$(tq "$org" "$ws" "SELECT name FROM agent.download_file('$fid');")"
	check "another tenant cannot list the files" "P0002 conversation $conv does not exist" \
		"$(tq_error "$o2" "$w2" "SELECT * FROM agent.list_files('$conv');")"
	check "another tenant cannot download a file" "P0002 file $fid does not exist" \
		"$(tq_error "$o2" "$w2" "SELECT name FROM agent.download_file('$fid');")"
	check "another tenant sees no file rows (RLS)" 0 "$(tq "$o2" "$w2" "SELECT count(*) FROM agent.files WHERE id = '$fid';")"
	check "agent without the file-upload capability cannot upload" "42501 agent \"a\" does not accept file uploads" \
		"$(tq_error "$o2" "$w2" "SELECT agent.upload_file('$c2', 'a.txt', 'x'::bytea, 'bob');")"
	check "another tenant cannot upload into your conversation" "P0002 conversation $conv does not exist" \
		"$(tq_error "$o2" "$w2" "SELECT agent.upload_file('$conv', 'a.txt', 'x'::bytea, 'bob');")"
}

# Serial execution within a conversation.
t_serial() {
	local A ids=() apprs=() i inv appr a overlaps
	A=$(new_tenant 1000)
	for i in 1 2 3; do
		read -r inv appr < <(req "$A" shell "echo $i >> order.txt; sleep 0.5; cat order.txt | tr '\n' ' '")
		ids+=("$inv"); apprs+=("$appr")
	done
	# Approve concurrently (three backends at once).
	for a in "${apprs[@]}"; do approve "$A" "$a" & done
	wait
	for inv in "${ids[@]}"; do await "$A" "$inv" >/dev/null; done
	overlaps=$(q <<SQL
WITH r AS (SELECT id, started_at s, finished_at f FROM agent.invocations
			WHERE id IN ('${ids[0]}', '${ids[1]}', '${ids[2]}') AND state = 'succeeded')
SELECT count(*) || '|' || count(*) FILTER (WHERE EXISTS (SELECT 1 FROM r b WHERE a.id < b.id AND a.s < b.f AND b.s < a.f)) FROM r a;
SQL
)
	check "runs of one conversation never overlap (3 runs)" "3|0" "$overlaps"
	# Approved one after the other, in reverse request order: they run in
	# approval order, not request order.
	ids=()
	apprs=()
	for i in 1 2 3; do
		read -r inv appr < <(req "$A" shell "echo $i >> order2.txt; sleep 0.3")
		ids+=("$inv"); apprs+=("$appr")
	done
	for i in 2 1 0; do approve "$A" "${apprs[$i]}"; done
	for inv in "${ids[@]}"; do await "$A" "$inv" >/dev/null; done
	check "they ran in approval order" "3,2,1" "$(q <<SQL
SELECT string_agg(split_part(code, ' ', 2), ',' ORDER BY started_at)
  FROM agent.invocations WHERE id IN ('${ids[0]}', '${ids[1]}', '${ids[2]}');
SQL
)"
}

# pg_cron fires the expiry.
t_pg_cron() {
	local A inv sess ended=""
	check "install scheduled the jobs with pg_cron" 2 \
		"$(q -c "SELECT count(*) FROM cron.job WHERE jobname IN ('sandbox_ext_expire_idle_sessions', 'sandbox_ext_expire_pending_approvals')")"
	A=$(new_tenant 1000)
	inv=$(run "$A" shell 'true')
	sess=$(field "$inv" session_id)
	check "(an active session)" active "$(q -c "SELECT state FROM agent.sessions WHERE id = '$sess'")"
	setting session_idle_timeout '1 second'
	for _ in $(seq 1 90); do		# pg_cron 1.4 has minute granularity
		ended=$(q -c "SELECT state FROM agent.sessions WHERE id = '$sess'")
		[ "$ended" = ended ] && break
		sleep 1
	done
	setting session_idle_timeout '30 minutes'
	check "the pg_cron job expired the idle session" "ended|1" \
		"$ended|$(q -c "SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname = 'sandbox_ext_expire_idle_sessions' AND d.status = 'succeeded'" | awk '{ print ($1 > 0) ? 1 : 0 }')"
}

run_tests t_two_messages t_conversationless t_hostile_outputs t_planted_symlink t_caps \
	t_expiry_rebuild t_skills t_tenancy t_serial t_pg_cron
check_invariants
finish_suite
