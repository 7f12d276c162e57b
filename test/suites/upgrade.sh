#!/usr/bin/env bash
# upgrade: each release's kept install script, filled with real runs,
# brought to the current version by ALTER EXTENSION sandbox_ext UPDATE: from
# the last release (one script) and from every earlier one (the chain of
# released upgrade scripts, which ALTER EXTENSION walks by itself).
#
# Runs on an extra cluster of its own (lib.sh: cluster 1), started anew for
# each release with sandbox_ext at that version (sql/sandbox_ext--V.sql,
# installed with the current library: the library must drive the previous
# catalogs until the update, docs/operations.md).  The update must keep every row,
# leave a catalog identical to a fresh install's (test/tools/catalog.sql,
# compared with diff: a schema change without its upgrade step fails here),
# keep the invariants, and run a new invocation.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

# the releases, oldest first (their install scripts are kept in sql/)
RELEASES="0.1.0 0.2.0"
OLD=
NEW=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$top/sandbox_ext.control")
FRESH=sandbox_fresh
A=

t_install_old() {
	if ! start_cluster 1 "$OLD"; then
		nok "a cluster with sandbox_ext $OLD starts"
		finish_suite
	fi
	use_cluster 1
	check "sandbox_ext is installed at $OLD from its kept script" "$OLD" \
		"$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'sandbox_ext'")"
	local path="" v
	for v in $RELEASES; do
		[ -n "$path" ] || [ "$v" = "$OLD" ] && path="${path:+$path--}$v"
	done
	check "the update path $OLD -> $NEW is the released scripts' chain" "$path--$NEW" \
		"$(q -c "SELECT path FROM pg_extension_update_paths('sandbox_ext') WHERE source = '$OLD' AND target = '$NEW'")"
}

t_fill_and_update() {
	local sql before after rc usage_want
	A=$(fill_every_kind)
	check "the old version ran every kind of run" \
		"cancelled:1,denied:1,expired:1,failed:1,insufficient_credits:1,provision_failed:1,succeeded:2,timed_out:1" \
		"$(fill_states)"
	# (runners and export_state are live; settings gains the new version's
	# rows and runtimes its probed versions: both are compared with a fresh
	# install's by the catalog test.  0.3.0 stores a card's code and
	# description once, with its invocation, and counts requests and audit
	# events in org_usage: checked below.)
	sql=$(table_digest_sql runners export_state settings runtimes \
		approval_requests.code approval_requests.description org_usage.stored_bytes org_usage.updated_at)
	before=$(q -c "$sql")
	check "the cards' copies of the code and description are their invocation's (dropping them loses nothing)" "t|0" \
		"$(q -c "SELECT count(*) > 0 FROM agent.approval_requests")|$(q -c "SELECT count(*) FROM agent.approval_requests a JOIN agent.invocations i ON i.id = a.invocation_id WHERE (a.code, a.description) IS DISTINCT FROM (i.code, i.description)")"
	# What each org stores after the update: what it stored, and its
	# requests' code, description and key, its audit events' details and
	# actor, and its skills' names, descriptions and paths (14_limits.sql),
	# reckoned here from the old catalog.
	usage_want=$(q -c "SELECT string_agg(o.id || ':' || (coalesce(u.stored_bytes, 0) + coalesce(r.b, 0) + coalesce(e.b, 0) + coalesce(k.b, 0)), ',' ORDER BY o.id)
						 FROM agent.orgs o LEFT JOIN agent.org_usage u ON u.org_id = o.id
						 LEFT JOIN (SELECT org_id, sum(octet_length(code) + coalesce(octet_length(description), 0) + coalesce(octet_length(idempotency_key), 0)) b
									  FROM agent.invocations GROUP BY 1) r ON r.org_id = o.id
						 LEFT JOIN (SELECT org_id, sum(octet_length(details::text) + coalesce(octet_length(actor), 0)) b
									  FROM agent.audit_events GROUP BY 1) e ON e.org_id = o.id
						 LEFT JOIN (SELECT s.org_id, sum(octet_length(s.name) + coalesce(octet_length(s.description), 0)
														 + coalesce((SELECT sum(octet_length(f.path)) FROM agent.skill_files f WHERE f.skill_id = s.id), 0)) b
									  FROM agent.skills s GROUP BY 1) k ON k.org_id = o.id")
	# An operator's value in agent.settings (a row the install script
	# writes, left out of the digest above): the update must keep it.
	setting approval_timeout '20 minutes'
	q -c "ALTER EXTENSION sandbox_ext UPDATE" 2>&1
	rc=$?
	check "ALTER EXTENSION sandbox_ext UPDATE succeeds" 0 "$rc"
	check "the extension is at $NEW" "$NEW" "$(q -c "SELECT extversion FROM pg_extension WHERE extname = 'sandbox_ext'")"
	after=$(q -c "$sql")
	check "every row of every table is kept (rows and content of the old columns)" "" \
		"$(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -n 10)"
	check "each org's storage now counts its requests and audit events" "$usage_want" \
		"$(q -c "SELECT string_agg(o.id || ':' || coalesce(u.stored_bytes, 0), ',' ORDER BY o.id) FROM agent.orgs o LEFT JOIN agent.org_usage u ON u.org_id = o.id")"
	check "... and the cards show their invocation's code and description" "0" \
		"$(q -c "SELECT count(*) FROM agent.approval_cards c JOIN agent.invocations i ON i.id = c.invocation_id WHERE (c.code, c.description) IS DISTINCT FROM (i.code, i.description)")"
	check "an operator's setting survives the update" "20 minutes" \
		"$(q -c "SELECT value FROM agent.settings WHERE key = 'approval_timeout'")"
	# (back to the default: the catalog comparison below holds the install
	# rows to a fresh install's)
	setting approval_timeout '15 minutes'
	check "tables digested" 1 "$([ "$(echo "$before" | wc -l)" -ge 20 ] && echo 1 || echo 0)"
}

t_catalog_matches_fresh_install() {
	local d
	q -d postgres -c "DROP DATABASE IF EXISTS $FRESH" -c "CREATE DATABASE $FRESH" >/dev/null
	q -d "$FRESH" -c "CREATE EXTENSION sandbox_ext" >/dev/null
	q -d "$FRESH" -f - <"$top/test/tools/catalog.sql" >"$work_dir/fresh.txt"
	q -f - <"$top/test/tools/catalog.sql" >"$work_dir/upgraded.txt"
	d=$(diff "$work_dir/fresh.txt" "$work_dir/upgraded.txt")
	if [ "$(wc -l <"$work_dir/fresh.txt")" -lt 500 ] || [ "$(wc -l <"$work_dir/upgraded.txt")" -lt 500 ]; then
		nok "the catalog is described in both databases" \
			"$(wc -l <"$work_dir/fresh.txt") and $(wc -l <"$work_dir/upgraded.txt") facts"
	elif [ -z "$d" ]; then
		ok "the upgraded catalog equals a fresh $NEW install's ($(wc -l <"$work_dir/fresh.txt") facts)"
	else
		nok "the upgraded catalog equals a fresh $NEW install's" \
			"differences (< fresh, > upgraded; sql/upgrade/${RELEASES##* }--$NEW.sql is missing a step):"
		echo "$d" | grep '^[<>]' | cut -c 1-300 | head -n 40 | sed 's/^/#   /'
	fi
}

t_after_update() {
	local inv
	check_invariants
	inv=$(run "$A" python 'print("after the upgrade")')
	check "a new run on the upgraded extension succeeds and is charged" "succeeded|after the upgrade|2" \
		"$(field "$inv" state)|$(output "$inv")|$(field "$inv" credits_charged)"
	check "the chain still verifies after the new run" 0 \
		"$(q -c "SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE NOT v.ok")"
	# (issue 27) Events appended before the update keep their version 1
	# hash; every later one is version 2; a version 1 event re-split at
	# its separator (same hash) is found, as a superuser would do it.
	local org=${A%% *}
	check "events of $OLD keep hash version 1, the new run's are version 2" "1:true|2:true" \
		"$(q -c "SELECT string_agg(v || ':' || ok, '|' ORDER BY v) FROM (
		           SELECT e.hash_version AS v, bool_and((e.invocation_id = '$inv') = (e.hash_version = 2)) AS ok
		             FROM agent.audit_events e WHERE e.org_id = '$org' GROUP BY e.hash_version) s")"
	check "a re-split event of $OLD (its version 1 hash unchanged) is found" \
		"t|f|the event's version 1 hash input has more than one reading (a field holds the separator, or a field was made NULL): its content was changed" \
		"$(q <<SQL | tail -n 1
BEGIN;
ALTER TABLE agent.audit_events DISABLE TRIGGER audit_events_append_only;
ALTER TABLE agent.audit_events ALTER COLUMN details DROP NOT NULL;
CREATE TEMP TABLE victim AS
	SELECT id FROM agent.audit_events WHERE org_id = '$org' AND hash_version = 1 AND details <> '{}' ORDER BY id LIMIT 1;
UPDATE agent.audit_events SET actor = coalesce(actor, '') || E'\\x1f' || details::text, details = NULL
 WHERE id = (SELECT id FROM victim);
SELECT e.hash = agent._audit_hash(1, e.prev_hash, e.id, e.org_id, e.workspace_id, e.event_type,
                                  e.invocation_id, e.actor, e.details, e.created_at),
       v.ok, v.problem
  FROM agent.audit_events e, agent.verify_audit_chain('$org') v WHERE e.id = (SELECT id FROM victim);
ROLLBACK;
SQL
)"
	check "one log line for the new run (state, ms, charge)" 1 \
		"$(grep -cE "sandbox_ext invocation $inv ended: org [0-9a-f-]+, state succeeded, [0-9]+ ms, 2 credits charged" "$(cluster_dir 1)/server.log")"
	setconf sandbox.jail_path /nonexistent/sandbox-jail
	inv=$(run "$A" shell 'echo never' none)
	resetconf sandbox.jail_path
	check "a refunded run's line says 0 credits charged" "provision_failed|1" \
		"$(field "$inv" state)|$(grep -cE "sandbox_ext invocation $inv ended: .*state provision_failed, [0-9]+ ms, 0 credits charged" "$(cluster_dir 1)/server.log")"
	check "the maintenance jobs are scheduled once each" "4" \
		"$(q -c "SELECT count(*) FROM cron.job WHERE jobname LIKE 'sandbox_ext_%'")"
}

work_dir=$(mktemp -d /tmp/sandbox_upgrade.XXXXXX)
trap 'stop_cluster 1; rm -rf "$work_dir"' EXIT
for OLD in $RELEASES; do
	echo "# from $OLD"
	run_tests t_install_old t_fill_and_update t_catalog_matches_fresh_install t_after_update
	stop_cluster 1
done
finish_suite
