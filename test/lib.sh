# test/lib.sh: what the shell suites share (sourced, not run).
#
#   ok NAME | nok NAME [DETAIL] | check NAME EXPECTED ACTUAL
#                        count one check and print it
#   as_pg CMD...         run a command as the postgres OS user
#   q [psql options]     psql on the suite's cluster as the owner (-At, ON_ERROR_STOP)
#   tq ORG WS SQL        SQL as agent_backend for one tenant, in one transaction
#   new_tenant CREDITS   a pro org with a workspace, an agent (code execution and
#                        uploads on) and a conversation: prints "org ws agent conv"
#   run_tests FN...      run test functions in order; with T=PATTERN set (an
#                        extended regex), only those whose name matches
#   finish_suite         print "N passed, N failed" and exit non-zero on a failure
#
# Environment (set by test/run.sh): SANDBOX_CLUSTER_DIR, SANDBOX_PGPORT,
# SANDBOX_DB, PG_CONFIG.

PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:?SANDBOX_CLUSTER_DIR must be set (test/run.sh does)}
PORT=${SANDBOX_PGPORT:?}
DB=${SANDBOX_DB:?}

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok $pass - $1"; }
nok() {
	fail=$((fail + 1))
	echo "not ok - $1"
	if [ $# -gt 1 ]; then echo "#   $2"; fi
}
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
tq() {				# org ws sql [psql options before it]
	local org=$1 ws=$2 sql=$3
	shift 3
	printf "BEGIN;\nSET LOCAL ROLE agent_backend;\nSELECT agent.set_tenant('%s', '%s');\n%s\nCOMMIT;\n" \
		"$org" "$ws" "$sql" | q "$@" -f - | sed '/^$/d'
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

run_tests() {
	local t
	for t in "$@"; do
		if [ -n "${T:-}" ] && ! [[ $t =~ $T ]]; then
			continue
		fi
		echo "# $t"
		"$t"
	done
}

finish_suite() {
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
	exit $?
}
