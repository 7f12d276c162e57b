#!/usr/bin/env bash
# retention: run content past its retention is emptied in batches, leaving
# its hash and size; the audit chain, the exported analytics rows and the
# storage count stay right (docs/operations.md, "Retention").
#
# On an extra cluster of its own (lib.sh: cluster 1): pruning "as of" a
# later date would empty the other suites' rows on the shared one.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

A=
ORG=

t_prune() {
	local org ws agent conv want before_out before_prev before_files before_ti before_events used_before pruned_bytes n
	local before_req pend_inv pend_appr out
	if ! start_cluster 1; then
		nok "a cluster starts"
		finish_suite
	fi
	use_cluster 1
	A=$(fill_every_kind)
	read -r org ws agent conv <<<"$A"
	ORG=$org
	before_out=$(q -c "SELECT string_agg(invocation_id || '/' || seq || ':' || octet_length(data) || ':' || encode(sha256(convert_to(data, 'UTF8')), 'hex'), ',' ORDER BY invocation_id, seq) FROM agent.invocation_output WHERE org_id = '$org'")
	before_prev=$(q -c "SELECT string_agg(id || ':' || octet_length(output_preview) || ':' || encode(sha256(convert_to(output_preview, 'UTF8')), 'hex'), ',' ORDER BY id) FROM agent.agent_tool_calls WHERE org_id = '$org' AND output_preview IS NOT NULL")
	before_files=$(q -c "SELECT string_agg(name || ':' || origin || ':' || size || ':' || sha256, ',' ORDER BY name) FROM agent.files WHERE org_id = '$org' AND status = 'saved'")
	before_ti=$(q -c "SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM agent.tool_invocations t")
	# A request still waiting for its decision: older than its retention
	# at the pruning below, but not finished, so kept.
	read -r pend_inv pend_appr < <(req "$A" shell 'echo approved after the pruning' none)
	before_req=$(q -c "SELECT string_agg(id || ':' || code_sha256 || ':' || state, ',' ORDER BY id) FROM agent.invocations WHERE org_id = '$org'")
	pruned_bytes=$(q -c "SELECT (SELECT sum(octet_length(data)) FROM agent.invocation_output WHERE org_id = '$org') + (SELECT sum(size) FROM agent.files WHERE org_id = '$org' AND origin = 'produced' AND status = 'saved')
						   + (SELECT sum(octet_length(code) + coalesce(octet_length(description), 0)) FROM agent.invocations WHERE org_id = '$org' AND id <> '$pend_inv')")
	check "the run left output, previews and both kinds of file" "1|1|in.txt:uploaded,out.txt:produced" \
		"$([ -n "$before_out" ] && echo 1)|$([ -n "$before_prev" ] && echo 1)|$(q -c "SELECT string_agg(name || ':' || origin, ',' ORDER BY name) FROM agent.files WHERE org_id = '$org' AND status = 'saved'")"

	check "a retention that is not an interval is refused" "22023" \
		"$(q -c "SELECT agent.set_org_retention('$org', output => 'soon')" 2>&1 | grep -c 'must be an interval or forever' | sed 's/^1$/22023/')"
	q -c "SELECT agent.set_org_retention('$org', output => '1 day', previews => '1 day', produced_files => '1 day', requests => '1 day')" >/dev/null
	check "the change of retention is audited" 1 \
		"$(q -c "SELECT count(*) FROM agent.audit_events WHERE org_id = '$org' AND event_type = 'org.retention_changed'")"
	# (after that change, whose audit event counts against the org's storage)
	used_before=$(q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org'")
	before_events=$(q -c "SELECT count(*) FROM agent.audit_events")
	setting retention_batch 2
	check "nothing is pruned before its time" 0 "$(q -c "CALL agent.prune_retention()")"
	want=$(q -c "SELECT (SELECT count(*) FROM agent.invocation_output WHERE org_id = '$org') + (SELECT count(*) FROM agent.agent_tool_calls WHERE org_id = '$org' AND output_preview IS NOT NULL) + 1
				  + (SELECT count(*) FROM agent.invocations WHERE org_id = '$org' AND id <> '$pend_inv')")
	n=$(q -c "CALL agent.prune_retention(NULL, now() + interval '2 days')")
	check "pruning two days later empties the org's output chunks, previews, produced file and finished requests ($want rows)" "$want" "$n"
	check "a second round finds nothing" 0 "$(q -c "CALL agent.prune_retention(NULL, now() + interval '2 days')")"
	# (issue 27: inside BEGIN ... COMMIT it was 2D000, invalid transaction
	# termination, at its first batch)
	out=$(printf "BEGIN;\nCALL agent.prune_retention(NULL, now() + interval '2 days');\nCOMMIT;\n" | q 2>&1)
	check "in a client's transaction block it runs, in that transaction" "0|0" "$out|$?"
	# In batches of retention_batch (2) rows, each its own transaction:
	# the transaction that pruned a row is its xmin now.
	check "in batches: at most 2 chunks per transaction, and n chunks in at least ceil(n/2) transactions" "1|2|1" \
		"$(q -c "SELECT (count(*) > 2)::int || '|' || max(per_xact) || '|' || (count(DISTINCT x) >= ceil(count(*) / 2.0))::int
				   FROM (SELECT o.xmin::text AS x, count(*) OVER (PARTITION BY o.xmin::text) AS per_xact
						   FROM agent.invocation_output o WHERE o.org_id = '$org') c")"
	check "and previews too (at most 2 per transaction)" 2 \
		"$(q -c "SELECT max(n) FROM (SELECT count(*) n FROM agent.agent_tool_calls WHERE org_id = '$org' AND preview_pruned_at IS NOT NULL GROUP BY xmin::text) c")"

	check "each output chunk keeps its size and sha256, and reads as empty" "$before_out|0" \
		"$(q -c "SELECT string_agg(invocation_id || '/' || seq || ':' || data_bytes || ':' || data_sha256, ',' ORDER BY invocation_id, seq) FROM agent.invocation_output WHERE org_id = '$org'")|$(q -c "SELECT count(*) FROM agent.invocation_output WHERE org_id = '$org' AND (data <> '' OR pruned_at IS NULL)")"
	check "each preview keeps its size and sha256" "$before_prev" \
		"$(q -c "SELECT string_agg(id || ':' || preview_bytes || ':' || preview_sha256, ',' ORDER BY id) FROM agent.agent_tool_calls WHERE org_id = '$org' AND preview_pruned_at IS NOT NULL")"
	check "the produced file is pruned with its size and sha256; the upload (forever) is kept" \
		"$before_files" \
		"$(q -c "SELECT string_agg(name || ':' || origin || ':' || size || ':' || sha256, ',' ORDER BY name) FROM agent.files WHERE org_id = '$org' AND (status = 'saved' OR (status = 'pruned' AND content IS NULL))")"
	check "each finished request loses its code and description, keeping its hash and state; the waiting one keeps all" \
		"$before_req|t|t" \
		"$(q -c "SELECT string_agg(id || ':' || code_sha256 || ':' || state, ',' ORDER BY id) FROM agent.invocations WHERE org_id = '$org'")|$(q -c "SELECT bool_and(CASE WHEN id = '$pend_inv' THEN code IS NOT NULL AND pruned_at IS NULL ELSE code IS NULL AND description IS NULL AND pruned_at IS NOT NULL END) FROM agent.invocations WHERE org_id = '$org'")|$(q -c "SELECT bool_and(code IS NULL AND code_sha256 IS NOT NULL) FROM agent.approval_cards WHERE org_id = '$org' AND invocation_id <> '$pend_inv'")"
	check "the storage count gives back exactly the bytes pruned" "$((used_before - pruned_bytes))" \
		"$(q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org'")"
	check "the org's audit chain still verifies after the pruning" t \
		"$(q -c "SELECT ok FROM agent.verify_audit_chain('$org')")"
	check "another org (default retention: 30 days) keeps its output" 0 \
		"$(q -c "SELECT count(*) FROM agent.invocation_output WHERE org_id <> '$org' AND pruned_at IS NOT NULL")"
	check "the exported analytics rows are untouched (the export stays exactly once)" "$before_ti" \
		"$(q -c "SELECT md5(string_agg(t::text, ',' ORDER BY t::text)) FROM agent.tool_invocations t")"
	check "no audit event is removed or added by pruning" "$before_events" "$(q -c "SELECT count(*) FROM agent.audit_events")"
	approve "$A" "$pend_appr"
	check "the waiting request, approved after the pruning, runs its code" "succeeded|approved after the pruning" \
		"$(await "$A" "$pend_inv")|$(output "$pend_inv")"
	check_invariants
	check "a pruned file cannot be downloaded, and says why" "55000 file \"out.txt\" was not saved" \
		"$(tq_error "$org" "$ws" "SELECT * FROM agent.download_file((SELECT id FROM agent.files WHERE name = 'out.txt' AND org_id = '$org'));")"
	# A live session keeps its workspace copy until it ends; the next one
	# gets only what the database still holds.
	q -c "SELECT agent.expire_idle_sessions(now() + interval '1 day')" >/dev/null
	check "the conversation's next session runs without the pruned file" "succeeded|in" \
		"$(inv=$(run "$A" shell 'ls in.txt out.txt 2>/dev/null | sed s/.txt//'); echo "$(field "$inv" state)|$(output "$inv" | tr -d '\n')")"
	check "pg_cron prunes hourly" "1|17 * * * *" \
		"$(q -c "SELECT count(*) || '|' || min(schedule) FROM cron.job WHERE jobname = 'sandbox_ext_prune_retention'")"
}

# Uploaded (conversation) files, pruned by the pg_cron job's own command
# (as pg_cron runs it, without as_of): the file is older than its org's
# retention of a day.
t_uploaded_files_by_the_job() {
	local B org ws agent conv cmd fid before used
	B=$(new_tenant 10)
	read -r org ws agent conv <<<"$B"
	fid=$(tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'notes.txt', convert_to('uploaded a while ago', 'UTF8'), 'bob', 'text/plain');")
	q -c "SELECT agent.set_org_retention('$org', uploaded_files => '1 day')" >/dev/null
	check "the org keeps uploads for a day" "1 day" "$(q -c "SELECT agent.retention_of('$org', 'uploaded_files')")"
	before=$(q -c "SELECT size || ':' || sha256 FROM agent.files WHERE id = '$fid'")
	used=$(q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org'")
	cmd=$(q -c "SELECT command FROM cron.job WHERE jobname = 'sandbox_ext_prune_retention'")
	check "the job's command" "CALL agent.prune_retention()" "$cmd"
	q -c "$cmd" >/dev/null
	check "a fresh upload is kept" saved "$(q -c "SELECT status FROM agent.files WHERE id = '$fid'")"
	q -c "UPDATE agent.files SET created_at = now() - interval '25 hours' WHERE id = '$fid'" >/dev/null
	q -c "$cmd" >/dev/null
	check "an upload older than a day is pruned by it, keeping its size and sha256" "pruned|true|$before" \
		"$(q -c "SELECT status || '|' || (content IS NULL) || '|' || size || ':' || sha256 FROM agent.files WHERE id = '$fid'")"
	check "its bytes are given back to the org's storage count" "$((used - 20))" \
		"$(q -c "SELECT stored_bytes FROM agent.org_usage WHERE org_id = '$org'")"
	check "the first org's upload (forever) is still saved" saved \
		"$(q -c "SELECT status FROM agent.files WHERE org_id = '$ORG' AND origin = 'uploaded'")"
	check_invariants
}

# What the audit trail costs per invocation (kept, not pruned): printed,
# not checked (sizes depend on the content of the events).
t_audit_cost() {
	q -c "SELECT '# audit trail per invocation: ' || round(avg(n), 1) || ' events, ' || round(avg(b)) || ' bytes of heap rows'
			FROM (SELECT count(*) n, sum(pg_column_size(e.*)) b FROM agent.audit_events e
				   WHERE e.invocation_id IS NOT NULL GROUP BY e.invocation_id) x"
	q -c "SELECT '# a pruned output chunk row: ' || round(avg(pg_column_size(o.*))) || ' bytes (' || count(*) || ' rows)'
			FROM agent.invocation_output o WHERE o.pruned_at IS NOT NULL"
	# The index entries per event: a fill this small is a page or two per
	# index, so the growth of each index over 10,000 events appended the
	# way runs append them (agent._audit; 5 per random invocation id, an
	# org of their own) is divided by 10,000.
	local B before
	B=$(new_tenant 0)
	before=$(q -c "SELECT string_agg(c.relname || '=' || pg_relation_size(c.oid), ',' ORDER BY c.relname) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid WHERE x.indrelid = 'agent.audit_events'::regclass")
	q -c "SELECT count(agent._audit('${B%% *}', NULL, 'test.cost', u.inv, 'cost', '{}'))
			FROM (SELECT gen_random_uuid() AS inv FROM generate_series(1, 2000)) u, generate_series(1, 5) k" >/dev/null
	q -c "SELECT '# audit index bytes per event (pg_relation_size growth over 10000 events): '
				 || string_agg(c.relname || ' ' || round((pg_relation_size(c.oid) - b.size) / 10000.0, 1), ', ' ORDER BY c.relname)
				 || '; together ' || round(sum(pg_relation_size(c.oid) - b.size) / 10000.0, 1)
			FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
			JOIN (SELECT split_part(e, '=', 1) AS relname, split_part(e, '=', 2)::bigint AS size
					FROM unnest(string_to_array('$before', ',')) e) b ON b.relname = c.relname
		   WHERE x.indrelid = 'agent.audit_events'::regclass"
	check "the 10000 events measured are appended to their org's chain, which verifies" "10000|true" \
		"$(q -c "SELECT count(*) || '|' || (SELECT bool_and(v.ok) FROM agent.verify_audit_chain('${B%% *}') v) FROM agent.audit_events WHERE org_id = '${B%% *}' AND event_type = 'test.cost'")"
}

trap 'stop_cluster 1' EXIT
run_tests t_prune t_uploaded_files_by_the_job t_audit_cost
finish_suite
