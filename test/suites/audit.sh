#!/usr/bin/env bash
# The audit chain against a superuser covering tracks (issue 11, item 4),
# with a real ClickHouse server holding the anchors.
#
# Starts a throwaway clickhouse-server (scripts/clickhouse.sh) with the
# hardened anchor layout (sql/clickhouse/hardened/: the exporter's user may
# insert anchors and change none), points the running test cluster's
# exporter at it as that user, and then attacks as a superuser would:
# with session_replication_role = replica, and then with the triggers
# disabled: a rewritten event with every later hash recomputed and the
# head moved to match, all of an org's events and its head deleted, a
# back-dated event inserted with a correct hash, a rewritten approval.
# Each must be found by agent.verify_audit_chain() once an anchor exists
# (each fails on the code before the anchors: verify said ok).  Also checks
# what is documented as not found (a rewrite after the last anchor; any
# rewrite without an export), that an uncommitted head is never anchored,
# and that verify refuses to vouch without ClickHouse.
# T=REGEX runs only the matching tests.  Ends with "N passed, N failed".
#
# Env (from test/run.sh): SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT, SANDBOX_DB,
# PG_CONFIG; CLICKHOUSE_HTTP_PORT / CLICKHOUSE_TCP_PORT pick the ports.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
# The same ports as test/suites/export.sh (suites run one after the other).
export CLICKHOUSE_HTTP_PORT=${CLICKHOUSE_HTTP_PORT:-$((PORT + 2000))}
export CLICKHOUSE_TCP_PORT=${CLICKHOUSE_TCP_PORT:-$((PORT + 3000))}
export CLICKHOUSE_DIR=${CLICKHOUSE_DIR:-/tmp/sandbox_ch_test.$PORT}
CH="$top/scripts/clickhouse.sh"
CHURL="http://127.0.0.1:$CLICKHOUSE_HTTP_PORT"

sql() { q -c "$1"; }
# The SQLSTATE a statement fails with ("ok" when it does not).
sqlstate() {
	sql "DO \$do\$ BEGIN EXECUTE \$s\$$1\$s\$; RAISE NOTICE 'ok'; EXCEPTION WHEN OTHERS THEN RAISE NOTICE '%', SQLSTATE; END \$do\$" 2>&1 |
		sed -n 's/^NOTICE:  //p'
}
chq() { "$CH" query "$1" 2>&1; }
# ch_as USER PASSWORD DATABASE QUERY: "HTTP-status body" over HTTP.
ch_as() {
	curl -s -o "$work/ch_body" -w '%{http_code}' -u "$1:$2" \
		"$CHURL/?database=$3" --data-binary "$4"
	printf ' '
	head -c 300 "$work/ch_body" | tr '\n' ' '
}
# What an external auditor sees: the anchors' own database, read-only.
auditor() { ch_as sandbox_auditor auditor sandbox_audit "$1" | sed 's/^200 //; s/ *$//'; }

check_like() {		# name pattern actual
	# shellcheck disable=SC2053
	if [[ "$3" == $2 ]]; then ok "$1"; else nok "$1" "expected [$2], got [$3]"; fi
}
work=$(mktemp -d /tmp/sandbox_audit_test.XXXXXX)
chmod 0755 "$work"
touch "$work/orgs"
holder_pid=

set_conf() {		# setting value ...: ALTER SYSTEM SET each pair, then reload
	while [ $# -ge 2 ]; do
		sql "ALTER SYSTEM SET $1 = '$2'" >/dev/null
		shift 2
	done
	sql "SELECT pg_reload_conf()" >/dev/null
	sleep 0.3
}

# Every org made here (a file: new_org runs in command substitutions).
mine() { echo "$1" >>"$work/orgs"; }
new_org() {			# name → org id; five events in its chain
	local id
	id=$(sql "INSERT INTO agent.orgs (name, plan) VALUES ('audit-$1-' || gen_random_uuid(), 'pro') RETURNING id")
	mine "$id"
	sql "SELECT count(agent._audit('$id', NULL, 'test.event', NULL, 'tester', jsonb_build_object('n', n)))
	       FROM generate_series(1, 5) n" >/dev/null
	echo "$id"
}
head_of() { sql "SELECT last_id FROM agent.audit_heads WHERE org_id = '$1'"; }
event_id() { sql "SELECT id FROM agent.audit_events WHERE org_id = '$1' ORDER BY id OFFSET $(($2 - 1)) LIMIT 1"; }
# (anchors_checked through jsonb: a build without it shows what it reports)
verify() {
	sql "SELECT v.ok, v.events_checked, v.broken_event_id, v.problem, to_jsonb(v)->>'anchors_checked'
	       FROM agent.verify_audit_chain('$1') v"
}
verify3() {
	sql "SELECT v.ok, v.events_checked, to_jsonb(v)->>'anchors_checked' FROM agent.verify_audit_chain('$1') v"
}
verify_ok() { sql "SELECT ok FROM agent.verify_audit_chain('$1')"; }
# ClickHouse holds an anchor of the org's current head.
head_anchored() {
	[ "$(auditor "SELECT count() FROM audit_anchors WHERE org_id = toUUID('$1') AND last_id = $(head_of "$1")")" -ge 1 ]
}

# The attacker's tools, as a superuser session would define them.
# pg_temp.rehash(org): recompute every prev_hash and hash of the org's
# chain from its (possibly changed) content, and move its head to match.
# pg_temp.triggers_off() / triggers_on(): disable every trigger of the
# audit tables and restore each as it was (ENABLE, ALWAYS or REPLICA).
TOOLS=$(cat <<'SQL'
CREATE FUNCTION pg_temp.rehash(o uuid) RETURNS void LANGUAGE plpgsql AS $$
DECLARE e record; p text := NULL; lp text := ''; n bigint := 0; l bigint;
BEGIN
	FOR e IN SELECT * FROM agent.audit_events WHERE org_id = o ORDER BY id LOOP
		lp := coalesce(p, '');
		UPDATE agent.audit_events a
		   SET prev_hash = p,
		       hash = agent._audit_hash(a.hash_version, p, a.id, a.org_id, a.workspace_id, a.event_type,
		                                a.invocation_id, a.actor, a.details, a.created_at)
		 WHERE a.id = e.id RETURNING a.hash INTO p;
		n := n + 1; l := e.id;
	END LOOP;
	UPDATE agent.audit_heads SET last_id = l, last_hash = p, prev_hash = lp, events = n WHERE org_id = o;
END $$;
CREATE TEMP TABLE saved_triggers AS
	SELECT tgrelid::regclass AS rel, tgname, tgenabled FROM pg_trigger
	 WHERE tgrelid IN ('agent.audit_events'::regclass, 'agent.audit_heads'::regclass,
	                   'agent.credit_ledger'::regclass, 'agent.credit_balances'::regclass)
	   AND NOT tgisinternal;
CREATE FUNCTION pg_temp.triggers_off() RETURNS void LANGUAGE plpgsql AS $$
DECLARE t record;
BEGIN
	FOR t IN SELECT * FROM saved_triggers LOOP
		EXECUTE format('ALTER TABLE %s DISABLE TRIGGER %I', t.rel, t.tgname);
	END LOOP;
END $$;
CREATE FUNCTION pg_temp.triggers_on() RETURNS void LANGUAGE plpgsql AS $$
DECLARE t record;
BEGIN
	FOR t IN SELECT * FROM saved_triggers LOOP
		EXECUTE format('ALTER TABLE %s ENABLE %s TRIGGER %I', t.rel,
		               CASE t.tgenabled WHEN 'A' THEN 'ALWAYS' WHEN 'R' THEN 'REPLICA' ELSE '' END, t.tgname);
	END LOOP;
END $$;
SQL
)
# attack SQL: run SQL as a superuser with the triggers off, then put them
# back (covering tracks), in one transaction.
attack() {
	q <<SQL
$TOOLS
BEGIN;
SET LOCAL session_replication_role = replica;
SELECT pg_temp.triggers_off();
$1
SELECT pg_temp.triggers_on();
COMMIT;
SQL
}
# The chain is consistent in itself (what a walk without anchors sees).
self_consistent() {
	sql "SELECT count(*) = 0 FROM (
	       SELECT a.hash <> agent._audit_hash(a.hash_version, a.prev_hash, a.id, a.org_id, a.workspace_id, a.event_type,
	                                          a.invocation_id, a.actor, a.details, a.created_at)
	              OR a.prev_hash IS DISTINCT FROM lag(a.hash) OVER (ORDER BY a.id) AS bad
	         FROM agent.audit_events a WHERE a.org_id = '$1') s WHERE bad"
}

# Leave the shared cluster as later suites expect it: exporter off, no
# slot, the supervisor running, and none of our orgs (their chains were
# tampered with on purpose): every agent table's rows of them, in replica
# mode (no foreign-key order) with the audit triggers off.
cleanup() {
	[ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null
	for s in sandbox.clickhouse_url sandbox.clickhouse_anchor_insert_table sandbox.anchor_interval \
		sandbox.export_poll_interval sandbox.max_concurrent_runs; do
		sql "ALTER SYSTEM RESET $s" >/dev/null 2>&1
	done
	sql "SELECT pg_reload_conf()" >/dev/null 2>&1
	sleep 0.5
	sql "SELECT agent.export_drop()" >/dev/null 2>&1
	sql "ALTER TABLE agent.tool_invocations REPLICA IDENTITY DEFAULT" >/dev/null 2>&1
	if [ -s "$work/orgs" ]; then
		local list
		list=$(sed "s/.*/'&'/" "$work/orgs" | paste -sd, -)
		q >/dev/null <<SQL
$TOOLS
BEGIN;
SET LOCAL session_replication_role = replica;
SELECT pg_temp.triggers_off();
CREATE TEMP TABLE doomed AS SELECT unnest(ARRAY[$list]::uuid[]) AS id;
DO \$\$
DECLARE t regclass;
BEGIN
	FOR t IN SELECT a.attrelid::regclass FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	          WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'r'
	            AND a.attname = 'org_id' AND NOT a.attisdropped LOOP
		EXECUTE format('DELETE FROM %s WHERE org_id IN (SELECT id FROM doomed)', t);
	END LOOP;
	DELETE FROM agent.orgs WHERE id IN (SELECT id FROM doomed);
END \$\$;
SELECT pg_temp.triggers_on();
COMMIT;
SQL
	fi
	"$CH" stop >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
# anchor_now ORG: let the exporter anchor the org's current head (a round
# with a 1 s interval), then wait for it.
anchor_now() {
	set_conf sandbox.anchor_interval 1s
	wait_for 30 "head_anchored $1"
}
# hold_anchors: a long interval, and a moment for a round under way to end:
# from now on only an export batch publishes anchors.
hold_anchors() {
	set_conf sandbox.anchor_interval 1h
	sleep 1.5
}
# anchored_ids ORG: how many anchored events ClickHouse holds for the org.
anchored_ids() { auditor "SELECT uniqExact(last_id) FROM audit_anchors WHERE org_id = toUUID('$1')"; }

# ---- the exporter's ClickHouse user: insert only ----
t_insert_only_user() {
	local probe=ffffffff-ffff-4fff-8fff-ffffffffffff stmt
	check_like "the exporter's user may insert an anchor" "200*" \
		"$(ch_as sandbox_exporter exporter default "INSERT INTO audit_anchors_in (org_id, last_id, last_hash, events, read_at_ms, source) VALUES ('$probe', 1, 'probe', 1, 0, 'probe')")"
	check "an inserted anchor lands in the anchors' database, stamped by ClickHouse" "1|1" \
		"$(auditor "SELECT count(), max(anchored_at) > now() - 600 FROM audit_anchors WHERE org_id = toUUID('$probe') FORMAT TabSeparated" | tr '\t' '|')"
	check_like "the exporter's user cannot supply anchored_at" "[45]0[0-9] *anchored_at*" \
		"$(ch_as sandbox_exporter exporter default "INSERT INTO audit_anchors_in (org_id, last_id, last_hash, events, read_at_ms, source, anchored_at) VALUES ('$probe', 2, 'x', 2, 0, 'x', '2001-01-01 00:00:00')")"
	for stmt in "ALTER TABLE sandbox_audit.audit_anchors DELETE WHERE 1" \
		"TRUNCATE TABLE sandbox_audit.audit_anchors" \
		"DROP TABLE sandbox_audit.audit_anchors" \
		"DETACH TABLE sandbox_audit.audit_anchors" \
		"RENAME TABLE sandbox_audit.audit_anchors TO default.gone" \
		"ALTER TABLE audit_anchors DELETE WHERE 1" \
		"INSERT INTO sandbox_audit.audit_anchors VALUES ('$probe', 3, 'x', 3, 0, 'x', now())"; do
		check_like "the exporter's user is refused: ${stmt%% WHERE*}" "[45]0[0-9] *" \
			"$(ch_as sandbox_exporter exporter default "$stmt")"
	done
	check "the anchors survive all of that" 1 "$(auditor "SELECT count() FROM audit_anchors WHERE org_id = toUUID('$probe')")"
	check_like "the auditor's user reads the anchors" "200 1*" \
		"$(ch_as sandbox_auditor auditor sandbox_audit "SELECT count() FROM audit_anchors WHERE org_id = toUUID('$probe')")"
	check_like "the auditor's user cannot write" "[45]0[0-9] *" \
		"$(ch_as sandbox_auditor auditor sandbox_audit "INSERT INTO audit_anchors VALUES ('$probe', 4, 'x', 4, 0, 'x', now())")"
}

# ---- the exporter publishes anchors; verify reads them ----
t_publish() {
	local a
	a=$(new_org publish)
	if anchor_now "$a"; then
		ok "the exporter anchors an org's head in ClickHouse"
	else
		nok "the exporter anchors an org's head in ClickHouse" \
			"$(sql "SELECT state, last_error, anchors_published FROM agent.export_status()")"
	fi
	check "the anchor is the head: id, hash, events, source" \
		"$(sql "SELECT last_id || '|' || last_hash || '|' || events FROM agent.audit_heads WHERE org_id = '$a'")|sandbox_ext_export" \
		"$(auditor "SELECT last_id, last_hash, events, source FROM audit_anchors WHERE org_id = toUUID('$a') ORDER BY last_id DESC LIMIT 1 FORMAT TabSeparated" | tr '\t' '|')"
	check "verify compares with the anchor" "t|5|1|$(head_of "$a")" \
		"$(sql "SELECT ok, events_checked, anchors_checked, anchor_last_id FROM agent.verify_audit_chain('$a')")"
	check "export_status counts the anchors" t \
		"$(sql "SELECT anchors_published > 0 AND last_anchor_at IS NOT NULL FROM agent.export_status()")"
	check "verify is for auditors: the anchor reader too" "42501|ok" \
		"$(sqlstate "SET ROLE agent_backend; SELECT agent._audit_anchors('$a')")|$(sqlstate "SET ROLE agent_auditor; SELECT agent.verify_audit_chain('$a'); SELECT agent._audit_anchors('$a')")"
	check_like "verify refuses a repeatable read transaction while anchoring" \
		"*cannot verify an audit chain against its anchors in a repeatable read transaction*" \
		"$(q -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT agent.verify_audit_chain('$a')" 2>&1)"
}

# An uncommitted head is never anchored: hold an append open, then commit
# one to another org after it and wait until that one is anchored (the
# round that anchored it read the heads after the held append).
t_uncommitted() {
	local u v
	u=$(new_org uncommitted)
	v=$(new_org witness)
	anchor_now "$u" && wait_for 30 "head_anchored $v"
	q -c "BEGIN" -c "SELECT agent._audit('$u', NULL, 'test.uncommitted', NULL, 'tester', '{}')" \
		-c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
	holder_pid=$!
	wait_for 10 "[ \"\$(sql \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND state = 'active'\")\" = 1 ]"
	sql "SELECT agent._audit('$v', NULL, 'test.event', NULL, 'tester', '{}')" >/dev/null
	wait_for 30 "head_anchored $v"
	check "a head that has not committed is not anchored: the anchors name the committed head" \
		"1|$(head_of "$u")|5" \
		"$(auditor "SELECT uniqExact(last_id, events), max(last_id), max(events) FROM audit_anchors WHERE org_id = toUUID('$u') FORMAT TabSeparated" | tr '\t' '|')"
	sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()" >/dev/null
	wait "$holder_pid" 2>/dev/null
	holder_pid=
	check "the rolled-back append leaves the chain and its anchors in agreement" "t|t" "$(verify_ok "$u")|$(verify_ok "$v")"
}

# Anchors follow every export batch, not only the interval.
t_batch() {
	local b
	hold_anchors
	b=$(new_org batch)
	sleep 1.5
	check "with a long interval, a new head waits" 0 "$(anchored_ids "$b")"
	sql "INSERT INTO agent.tool_invocations (invocation_id, org_id, workspace_id, language, status)
	     VALUES (gen_random_uuid(), '$b', gen_random_uuid(), 'python', 'audit_batch')" >/dev/null
	if wait_for 30 "head_anchored $b"; then
		ok "an export batch publishes the heads with it"
	else
		nok "an export batch publishes the heads with it" "$(sql "SELECT state, last_error FROM agent.export_status()")"
	fi
}

# ---- attack 1: rewrite an event, re-hash every later one, move the head ----
t_rewrite() {
	local a a3 anchored forged
	a=$(new_org rewrite)
	anchor_now "$a"
	hold_anchors		# nothing re-anchored until we ask
	a3=$(event_id "$a" 3)
	anchored=$(head_of "$a")
	check "replica mode: rewriting an event is refused" 42501 \
		"$(sqlstate "SET session_replication_role = replica; UPDATE agent.audit_events SET details = '{\"n\": 300}' WHERE id = $a3")"
	check "replica mode: moving the head is refused" 42501 \
		"$(sqlstate "SET session_replication_role = replica; UPDATE agent.audit_heads SET last_hash = 'x' WHERE org_id = '$a'")"
	attack "UPDATE agent.audit_events SET details = '{\"n\": 300}' WHERE id = $a3; SELECT pg_temp.rehash('$a');" >/dev/null
	check "attack 1 (control): the forged chain is consistent in itself, its head too" "t|300" \
		"$(self_consistent "$a")|$(sql "SELECT details->>'n' FROM agent.audit_events WHERE id = $a3")"
	check_like "attack 1: a rewritten, re-hashed chain is found at its anchor" \
		"f|5|$anchored|the chain up to event $anchored does not match its anchor of *: an event at or before it was changed, added or removed|1" \
		"$(verify "$a")"
	# The exporter then anchors the forged head too: the first anchor still tells.
	forged=$(sql "SELECT last_hash FROM agent.audit_heads WHERE org_id = '$a'")
	set_conf sandbox.anchor_interval 1s
	wait_for 30 "[ \"\$(auditor \"SELECT count() FROM audit_anchors WHERE org_id = toUUID('$a') AND last_hash = '$forged'\")\" -ge 1 ]"
	check_like "attack 1: anchoring the forged head afterwards does not hide it" \
		"f|5|$anchored|ClickHouse holds 2 different anchors of event $anchored*|1" "$(verify "$a")"
	echo "$a" >"$work/rehashed"
}

# ---- attack 2: delete all of an org's events and its head ----
t_erase() {
	local c anchored
	c=$(new_org erase)
	anchor_now "$c"
	hold_anchors		# nothing re-anchored until verify (the forged head would be)
	check "replica mode: deleting the events is refused" 42501 \
		"$(sqlstate "SET session_replication_role = replica; DELETE FROM agent.audit_events WHERE org_id = '$c'")"
	check "replica mode: deleting the head is refused" 42501 \
		"$(sqlstate "SET session_replication_role = replica; DELETE FROM agent.audit_heads WHERE org_id = '$c'")"
	anchored=$(head_of "$c")
	attack "DELETE FROM agent.audit_events WHERE org_id = '$c'; DELETE FROM agent.audit_heads WHERE org_id = '$c';" >/dev/null
	check "attack 2 (control): no event and no head left" "0|0" \
		"$(sql "SELECT count(*) FROM agent.audit_events WHERE org_id = '$c'")|$(sql "SELECT count(*) FROM agent.audit_heads WHERE org_id = '$c'")"
	check_like "attack 2: an erased chain is found" \
		"f|0|$anchored|the org has no audit events, but ClickHouse holds an anchor of 5 events up to event $anchored *: they were removed|1" \
		"$(verify "$c")"
	echo "$c" >"$work/erased"
}

# ---- attack 3: a back-dated event with a correct hash, before the anchor ----
# A rolled-back append leaves a free id between the org's 2nd and 3rd event.
t_backdate() {
	local d gap anchored
	d=$(sql "INSERT INTO agent.orgs (name, plan) VALUES ('audit-backdate-' || gen_random_uuid(), 'pro') RETURNING id")
	mine "$d"
	sql "SELECT agent._audit('$d', NULL, 'test.event', NULL, 'tester', jsonb_build_object('n', n)) FROM generate_series(1, 2) n" >/dev/null
	gap=$(sql "BEGIN; SELECT agent._audit('$d', NULL, 'test.event', NULL, 'tester', '{}'); ROLLBACK;" | tail -n 1)
	sql "SELECT agent._audit('$d', NULL, 'test.event', NULL, 'tester', jsonb_build_object('n', n)) FROM generate_series(3, 5) n" >/dev/null
	anchor_now "$d"
	hold_anchors		# nothing re-anchored until verify (the forged head would be)
	check "replica mode: inserting a head by hand is refused" 42501 \
		"$(sqlstate "SET session_replication_role = replica; INSERT INTO agent.audit_heads (org_id, last_id, last_hash, events) VALUES (gen_random_uuid(), 0, '', 0)")"
	anchored=$(head_of "$d")
	attack "INSERT INTO agent.audit_events (id, org_id, event_type, actor, details, created_at, prev_hash, hash)
	        SELECT $gap, org_id, 'credits.granted', 'forger', '{\"amount\": 1000000}', created_at + interval '1 ms', NULL, ''
	          FROM agent.audit_events WHERE org_id = '$d' ORDER BY id OFFSET 1 LIMIT 1;
	        SELECT pg_temp.rehash('$d');" >/dev/null
	check "attack 3 (control): the inserted event has a correct hash in a consistent chain" "t|6" \
		"$(self_consistent "$d")|$(sql "SELECT count(*) FROM agent.audit_events WHERE org_id = '$d'")"
	check_like "attack 3: a back-dated insert before the anchor is found" \
		"f|6|$anchored|the chain up to event $anchored does not match its anchor of * (5 events, hash *; the chain has 6 events, hash *)*|$(anchored_ids "$d")" \
		"$(verify "$d")"
}

# ---- attack 4: the approval of a run, rewritten to cover other code ----
t_approval() {
	local e ws agent conv inv card anchored
	read -r e ws agent conv <<<"$(new_tenant 10)"
	mine "$e"
	read -r inv card <<<"$(tq "$e" "$ws" "SELECT invocation_id, approval_id FROM agent.request_execution('$ws', '$agent', '$conv', 'python', 'print(1)', 'requester');" -F ' ')"
	tq "$e" "$ws" "SELECT agent.approve('$card', 'approver');" >/dev/null
	check "the approval event carries the approved code's hash" "$(sql "SELECT agent.code_sha256('print(1)')")" \
		"$(sql "SELECT details->>'code_sha256' FROM agent.audit_events WHERE invocation_id = '$inv' AND event_type = 'approval.approved'")"
	anchor_now "$e"
	hold_anchors		# nothing re-anchored until verify (the forged head would be)
	anchored=$(head_of "$e")
	attack "UPDATE agent.invocations SET code = 'print(2)', code_sha256 = agent.code_sha256('print(2)') WHERE id = '$inv';
	        UPDATE agent.approval_requests SET code_sha256 = agent.code_sha256('print(2)'),
	               approved_code_sha256 = agent.code_sha256('print(2)') WHERE id = '$card';
	        UPDATE agent.audit_events SET details = jsonb_set(details, '{code_sha256}', to_jsonb(agent.code_sha256('print(2)')))
	         WHERE invocation_id = '$inv' AND event_type = 'approval.approved';
	        SELECT pg_temp.rehash('$e');" >/dev/null
	check "attack 4 (control): card, invocation and approval event all name the new code" "t|t" \
		"$(sql "SELECT agent.approved_code_matches('$inv')")|$(self_consistent "$e")"
	check_like "attack 4: a rewritten approval event is found at its anchor" \
		"f|*|$anchored|the chain up to event $anchored does not match its anchor*|$(anchored_ids "$e")" \
		"$(verify "$e")"
}

# ---- attack 5: re-split an anchored event without changing its hash ----
# (issue 27) The version 1 hash joined fields with \x1f and left a NULL
# out with its separator: the details moved into the actor behind a \x1f,
# details made NULL, hashed alike, and verify said ok, anchors and all.
t_resplit() {
	local r r3 anchored
	r=$(new_org resplit)
	anchor_now "$r"
	hold_anchors
	r3=$(event_id "$r" 3)
	anchored=$(head_of "$r")
	check "attack 5: the re-split event is found at itself, before any anchor comparison" \
		"f|3|$r3|the event's content does not match its hash|0|{\"n\": 3}" \
		"$(q <<SQL | tail -n 1
$TOOLS
BEGIN;
SELECT pg_temp.triggers_off();
ALTER TABLE agent.audit_events ALTER COLUMN details DROP NOT NULL;
UPDATE agent.audit_events SET actor = actor || E'\\x1f' || details::text, details = NULL WHERE id = $r3;
SELECT v.ok, v.events_checked, v.broken_event_id, v.problem, v.anchors_checked,
       (SELECT split_part(actor, E'\\x1f', 2) FROM agent.audit_events WHERE id = $r3)
  FROM agent.verify_audit_chain('$r') v;
ROLLBACK;
SQL
)"
	check "attack 5 (control): rolled back, the chain verifies against its anchor" "t|5|1" "$(verify3 "$r")"
}

# ---- what is not found: a rewrite after the last anchor ----
t_after_anchor() {
	local f f7
	f=$(new_org after-anchor)
	anchor_now "$f"
	hold_anchors
	sql "SELECT agent._audit('$f', NULL, 'test.event', NULL, 'tester', '{\"n\": 6}')" >/dev/null
	f7=$(head_of "$f")
	attack "UPDATE agent.audit_events SET details = '{\"n\": 600}' WHERE id = $f7; SELECT pg_temp.rehash('$f');" >/dev/null
	check "not found (documented): a rewrite after the last anchor, before the next" "t|6|1" "$(verify3 "$f")"
	anchor_now "$f"
	check "not found (documented): once the next anchor covers it, for good" "t|6|2" "$(verify3 "$f")"
}

# ---- ClickHouse unreachable: verify does not vouch ----
t_clickhouse_down() {
	local a
	a=$(new_org down)
	anchor_now "$a"
	"$CH" kill >/dev/null
	check "ClickHouse down: verify refuses to vouch for an anchored chain" 08006 \
		"$(sqlstate "SELECT agent.verify_audit_chain('$a')")"
	check_like "ClickHouse down: the error says why" "*could not read the audit anchors from ClickHouse*" \
		"$(sql "SELECT agent.verify_audit_chain('$a')" 2>&1 | head -n 1)"
	"$CH" restart >/dev/null
}

# ---- without an export, only the walk (last: it turns the export off) ----
t_no_export() {
	local g h
	g=$(new_org no-export-rehash)
	h=$(new_org no-export-erase)
	anchor_now "$g" && anchor_now "$h"
	attack "UPDATE agent.audit_events SET details = '{\"n\": 300}' WHERE id = $(event_id "$g" 3); SELECT pg_temp.rehash('$g');
	        DELETE FROM agent.audit_events WHERE org_id = '$h'; DELETE FROM agent.audit_heads WHERE org_id = '$h';" >/dev/null
	sql "ALTER SYSTEM RESET sandbox.clickhouse_url" >/dev/null
	sql "SELECT pg_reload_conf()" >/dev/null
	sleep 0.5
	check "without an export, verify walks the chain only (anchors_checked is NULL)" "t|5||" \
		"$(sql "SELECT v.ok, v.events_checked, to_jsonb(v)->>'anchors_checked', to_jsonb(v)->>'anchor_last_id' FROM agent.verify_audit_chain('$g') v")"
	check "not found (documented): without an export, a re-hashed chain verifies" "t|5|" "$(verify3 "$g")"
	check "not found (documented): without an export, an erased chain verifies" "t|0|" "$(verify3 "$h")"
}

# ---- setup ----
if ! command -v clickhouse-server >/dev/null; then
	echo "clickhouse-server is not installed (scripts/deps.sh installs it)"
	echo "0 passed, 1 failed"
	exit 1
fi
if ! "$CH" start >/dev/null; then
	echo "not ok - clickhouse server starts"
	echo "0 passed, 1 failed"
	exit 1
fi
ok "clickhouse server starts with the tables of sql/clickhouse/"
# The hardened layout instead of the plain table of 03_audit_anchors.sql.
chq "DROP TABLE audit_anchors" >/dev/null
clickhouse-client --host 127.0.0.1 --port "$CLICKHOUSE_TCP_PORT" --database default --multiquery \
	<"$top/sql/clickhouse/hardened/audit_anchors.sql"
check "the hardened anchor layout is in place" "1|1|1" \
	"$(chq "SELECT countIf(database = 'sandbox_audit' AND name = 'audit_anchors'), countIf(database = 'default' AND name = 'audit_anchors_in'), countIf(database = 'default' AND name = 'audit_anchors' AND engine = 'MaterializedView') FROM system.tables FORMAT TabSeparated" | tr '\t' '|')"
# The supervisor claims nothing here: the chains are ours to write.  The
# exporter writes as the insert-only user.
set_conf sandbox.max_concurrent_runs 0 \
	sandbox.clickhouse_url "http://sandbox_exporter:exporter@127.0.0.1:$CLICKHOUSE_HTTP_PORT" \
	sandbox.clickhouse_anchor_insert_table audit_anchors_in \
	sandbox.anchor_interval 1s sandbox.export_poll_interval 1s

run_tests t_insert_only_user t_publish t_uncommitted t_batch t_resplit \
	t_rewrite t_erase t_backdate t_approval t_after_anchor t_clickhouse_down t_no_export
finish_suite
