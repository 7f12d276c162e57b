# test/lib.sh: what the shell suites share (sourced, not run).
#
#   ok NAME | nok NAME [DETAIL] | check NAME EXPECTED ACTUAL
#                        count one check and print it (test/tap.sh)
#   as_pg CMD...         run a command as the postgres OS user
#   q [psql options]     psql on the suite's cluster as the owner (-At, ON_ERROR_STOP)
#   tq ORG WS SQL        SQL as agent_backend for one tenant, in one transaction
#   tq_error ORG WS SQL  the same, printing "SQLSTATE message" of the error it
#                        raises ("no error" if none): checks name the error
#   aq ORG SQL           SQL as agent_admin of the org (its policy: egress
#                        rules, limits), in one transaction
#   new_tenant CREDITS   a pro org with a workspace, an agent (code execution and
#                        uploads on) and a conversation: prints "org ws agent conv"
#   wait_for SECS COND   poll the shell condition COND (eval'd) every 0.2 s until
#                        it holds (status 0) or SECS pass (status 1)
#
# Runs, for a tenant "org ws agent conv" (conv: the default conversation of
# its runs, or none for runs without one), through the API as agent_backend:
#   req TENANT LANG CODE [CONV|none] [WALL_S]   request → "inv approval"
#   approve TENANT APPROVAL | await TENANT INV [TIMEOUT_S] → final state
#   start TENANT LANG CODE [CONV|none] [WALL_S] request and approve → inv
#   run   TENANT LANG CODE [CONV|none] [WALL_S] the same, waited for → inv
# and as the owner:
#   field INV EXPR | output INV [STREAM] | ledger INV | wait_state INV STATE [TENTHS]
#   setting KEY VALUE    agent.settings
#   setconf NAME VALUE | resetconf NAME    ALTER SYSTEM and reload
#   check_invariants     the credit and audit invariants over every org
#
#   run_tests FN...      run test functions in order; with T=PATTERN set (an
#                        extended regex), only those whose name matches; after
#                        each, the suite's after_test function if it has one
#   finish_suite         print "N passed, N failed" and exit non-zero on a failure
#
# A suite is a list of test functions (t_NAME) given to run_tests, so that one
# can run alone: T=t_cancel SUITES=supervisor test/run.sh.  A test makes
# what it needs (new_tenant is cheap) rather than reading another's leftovers.
#
# Environment (set by test/run.sh): SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT,
# SANDBOX_DB, PG_CONFIG; T.

PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:?SANDBOX_CLUSTER_DIR must be set (test/run.sh does)}
PORT=${SANDBOX_PGPORT:?}
DB=${SANDBOX_DB:?}

# ok, nok, check and the counts (test/tap.sh, numbered lines)
TAP_STYLE=numbered
. "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}
q() {
	as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d "$DB" "$@"
}
tq() {				# org ws sql [psql options before it]
	local org=$1 ws=$2 sql=$3
	shift 3
	printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\n%s\nCOMMIT;\n" \
		"$org" "$ws" "$sql" | q "$@" -f - | sed '/^$/d'
}

aq() {				# org sql [psql options before it]
	local org=$1 sql=$2
	shift 2
	printf "BEGIN;\nSET LOCAL ROLE agent_admin;\nSELECT agent.set_tenant('%s', NULL);\n%s\nCOMMIT;\n" \
		"$org" "$sql" | q "$@" -f - | sed '/^$/d'
}

tq_error() {			# org ws sql → "SQLSTATE message" of the error it raises, or "no error"
	local err
	err=$(tq "$1" "$2" "\\set VERBOSITY verbose
$3" 2>&1 >/dev/null | sed -n 's/^.*ERROR:  \([0-9A-Z]\{5\}\): \(.*\)$/\1 \2/p' | head -n 1)
	echo "${err:-no error}"
}

new_tenant() {		# credits → "org ws agent conv"
	q -F ' ' <<SQL | tail -n 1
WITH o AS (INSERT INTO agent.orgs (name, plan) VALUES ('t-' || gen_random_uuid(), 'pro') RETURNING id),
	 w AS (INSERT INTO agent.workspaces (org_id, name) SELECT id, 'w' FROM o RETURNING id, org_id),
	 m AS (INSERT INTO agent.models (name, supports_code_execution)
		   VALUES ('m-' || gen_random_uuid(), true) RETURNING id),
	 a AS (INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id,
									 code_execution_enabled, file_upload_enabled)
		   SELECT w.org_id, w.id, 'a', 'specialist', m.id, true, true FROM w, m
		   RETURNING id, org_id, workspace_id),
	 c AS (INSERT INTO agent.conversations (org_id, workspace_id, agent_id, code_execution_enabled)
		   SELECT org_id, workspace_id, id, true FROM a RETURNING id, org_id, workspace_id, agent_id),
	 g AS (SELECT CASE WHEN $1 > 0 THEN agent.grant_credits(c.org_id, $1, 'test') END FROM c)
SELECT c.org_id, c.workspace_id, c.agent_id, c.id FROM c, g;
SQL
}

wait_for() {
	local deadline=$((SECONDS + $1))
	while [ $SECONDS -lt "$deadline" ]; do
		if eval "$2" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	return 1
}

# ---- runs ----------------------------------------------------------------------
req() {
	local org ws agent conv c
	read -r org ws agent conv <<<"$1"
	c=${4:-$conv}
	if [ "$c" = none ]; then c=NULL; else c="'$c'"; fi
	tq "$org" "$ws" "SELECT invocation_id, approval_id FROM agent.request_execution('$ws', '$agent', $c, '$2', :'code', 'requester', NULL, NULL, ${5:-NULL});" \
		-F ' ' -v code="$3" | tail -n 1
}
approve() {
	local org ws rest
	read -r org ws rest <<<"$1"
	tq "$org" "$ws" "SELECT agent.approve('$2', 'approver');" >/dev/null
}
await() {
	local org ws rest
	read -r org ws rest <<<"$1"
	tq "$org" "$ws" "SELECT agent.wait('$2', '${3:-60} s');" | tail -n 1
}
start() {
	local inv appr
	read -r inv appr < <(req "$@")
	approve "$1" "$appr"
	echo "$inv"
}
run() {
	local inv
	inv=$(start "$@")
	await "$1" "$inv" >/dev/null
	echo "$inv"
}
field() { q -c "SELECT $2 FROM agent.invocations WHERE id = '$1'"; }
output() { q -c "SELECT string_agg(data, '' ORDER BY seq) FROM agent.invocation_output WHERE invocation_id = '$1' AND stream = '${2:-stdout}'"; }
ledger() { q -c "SELECT coalesce(string_agg(kind || ':' || amount, ',' ORDER BY id), '') FROM agent.credit_ledger WHERE invocation_id = '$1'"; }
wait_state() {
	for _ in $(seq 1 "${3:-300}"); do
		[ "$(field "$1" state)" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
setting() { q -c "UPDATE agent.settings SET value = '$2' WHERE key = '$1'" >/dev/null; }
reload() { q -c "SELECT pg_reload_conf()" >/dev/null; sleep 0.5; }
setconf() { q -c "ALTER SYSTEM SET $1 = '$2'" >/dev/null; reload; }
resetconf() { q -c "ALTER SYSTEM RESET $1" >/dev/null; reload; }

check_invariants() {
	check "balance equals the ledger sum for every org" 0 \
		"$(q -c "SELECT count(*) FROM agent.credit_balances b WHERE b.balance <> (SELECT coalesce(sum(amount), 0) FROM agent.credit_ledger l WHERE l.org_id = b.org_id)")"
	check "no invocation charged twice" 0 \
		"$(q -c "SELECT count(*) FROM (SELECT invocation_id FROM agent.credit_ledger WHERE kind = 'charge' GROUP BY 1 HAVING count(*) > 1) x")"
	check "nothing is left in flight or staged" "0|0" \
		"$(q -c "SELECT count(*) FROM agent.invocations WHERE state IN ('provisioning', 'running')")|$(q -c "SELECT count(*) FROM agent.run_results")"
	check "audit chain valid for every org" 0 \
		"$(q -c "SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE NOT v.ok")"
}

# ---- the suite -------------------------------------------------------------------
run_tests() {
	local t n=0
	for t in "$@"; do
		if [ -n "${T:-}" ] && ! [[ $t =~ $T ]]; then
			continue
		fi
		n=$((n + 1))
		echo "# $t"
		"$t"
		if declare -F after_test >/dev/null; then after_test; fi
	done
	if [ -n "${T:-}" ] && [ "$n" -eq 0 ]; then
		echo "# T=$T matches none of: $*"
	fi
}

finish_suite() {
	tap_summary
	[ "$FAIL" -eq 0 ]
	exit $?
}

# ---- more clusters (the upgrade, backup and failover suites) -------------------
#   cluster_dir N | cluster_port N   the suite's N-th extra cluster:
#                        ${SANDBOX_CLUSTER_DIR}_N on port SANDBOX_PGPORT + N (0: its own)
#   start_cluster N [VERSION|nodb]   a fresh one (scripts/cluster.sh), with
#                        sandbox_ext at VERSION (default: the default version),
#                        or (nodb) without the database: a restore target
#   stop_cluster N                   stop it and remove it
#   use_cluster N                    point q, tq and everything above at it
HOME_CLUSTER_DIR=$CLUSTER_DIR
HOME_PORT=$PORT
cluster_dir() { if [ "$1" -eq 0 ]; then echo "$HOME_CLUSTER_DIR"; else echo "${HOME_CLUSTER_DIR}_$1"; fi; }
cluster_port() { echo $((HOME_PORT + $1)); }
cluster_sh() {			# N cluster.sh-arguments...
	local n=$1
	shift
	SANDBOX_CLUSTER_DIR=$(cluster_dir "$n") SANDBOX_PGPORT=$(cluster_port "$n") SANDBOX_DB=$DB \
		"$(dirname "${BASH_SOURCE[0]}")/../scripts/cluster.sh" "$@"
}
start_cluster() {
	if [ "${2:-}" = nodb ]; then SANDBOX_NO_DB=1 cluster_sh "$1" start >/dev/null
	else SANDBOX_EXT_VERSION=${2:-} cluster_sh "$1" start >/dev/null; fi
}
stop_cluster() { cluster_sh "$1" stop >/dev/null 2>&1 || true; }
use_cluster() { CLUSTER_DIR=$(cluster_dir "$1"); PORT=$(cluster_port "$1"); }

# ---- a cluster filled with runs of every kind ----------------------------------
# fill_every_kind: one new tenant with an uploaded file and a skill, and
# through the API: a run that succeeds (in the conversation's session,
# reading the upload and producing a file), one that fails, one that times
# out, one refunded (provision_failed: no jail), one denied by a person, one
# expired, one cancelled before it ran, one refused by policy (code too
# large: no invocation), one whose org cannot pay at the claim.  Prints the
# tenant.
fill_every_kind() {
	local A org ws agent conv inv appr skill poor
	A=$(new_tenant 100)
	read -r org ws agent conv <<<"$A"
	tq "$org" "$ws" "SELECT agent.upload_file('$conv', 'in.txt', convert_to('hello', 'UTF8'), 'alice', 'text/plain');" >/dev/null
	skill=$(tq "$org" "$ws" "SELECT agent.create_skill('kit', jsonb_build_object('a.txt', encode('skill file'::bytea, 'base64')));")
	tq "$org" "$ws" "SELECT agent.set_agent_skill('$agent', '$skill');" >/dev/null
	run "$A" python 'print(open("in.txt").read(), open("/skills/kit/a.txt").read()); open("out.txt", "w").write("made")' >/dev/null
	run "$A" shell 'echo second run in the session; cat out.txt' >/dev/null
	run "$A" shell 'echo failing >&2; exit 3' none >/dev/null
	run "$A" shell 'sleep 30' none 1 >/dev/null
	setconf sandbox.jail_path /nonexistent/sandbox-jail
	run "$A" shell 'echo never' none >/dev/null
	resetconf sandbox.jail_path
	read -r inv appr < <(req "$A" shell 'echo denied' none)
	tq "$org" "$ws" "SELECT agent.deny('$appr', 'approver', 'no');" >/dev/null
	req "$A" shell 'echo expires' none >/dev/null
	q -c "SELECT agent.expire_pending_approvals(now() + interval '1 day')" >/dev/null
	read -r inv appr < <(req "$A" shell 'echo cancelled' none)
	tq "$org" "$ws" "SELECT agent.cancel('$inv', 'requester');" >/dev/null
	req "$A" shell "$(head -c 70000 /dev/zero | tr '\0' '#')" none >/dev/null
	# (a request the balance cannot cover is refused at request time since
	# 0.2.0: the balance falls after the request, so the claim refuses it)
	poor=$(new_tenant 2)
	read -r inv appr < <(req "$poor" shell 'echo no credits' none)
	q -c "INSERT INTO agent.credit_ledger (org_id, kind, amount, reason) SELECT org_id, 'adjust', -2, 'test: the balance falls' FROM agent.invocations WHERE id = '$inv'" >/dev/null
	approve "$poor" "$appr"
	await "$poor" "$inv" >/dev/null
	echo "$A"
}

# The states fill_every_kind leaves, "state:count" sorted (for checks).
fill_states() {
	q -c "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, count(*) n FROM agent.invocations GROUP BY 1) s"
}

# table_digest_sql [EXCLUDED...]: one SQL statement giving "table|rows|md5"
# for every table of schema agent but the excluded ones (TABLE, or
# TABLE.COLUMN for one column of it), over the columns each has now (run
# it again later, or elsewhere, to digest the same columns).  The md5 is
# over the rows' text in sorted order.
table_digest_sql() {
	local ex="''"
	[ $# -gt 0 ] && ex=$(printf "'%s'," "$@") && ex=${ex%,}
	q -c "SELECT string_agg(format('SELECT %L || ''|'' || count(*) || ''|'' || md5(coalesce(string_agg(r::text, chr(10) ORDER BY r::text), '''')) FROM (SELECT %s FROM agent.%I) r',
								   c.relname,
								   (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
									 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
									   AND c.relname || '.' || a.attname NOT IN ($ex)),
								   c.relname), ' UNION ALL ' ORDER BY c.relname)
		  FROM pg_class c WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p')
		   AND c.relname NOT IN ($ex)"
}
