#!/usr/bin/env bash
# The code an integrator copies, run as written against the real cluster
# (supervisor, jail, interpreters):
#   t_readme   the README's SQL block ("A run, in SQL"), through psql
#   t_python   examples/python/run_once.py (psycopg 3, Debian's python3-psycopg)
#   t_node     examples/node/run_once.js (node-postgres, installed by scripts/deps.sh)
#   t_python_client, t_node_client  examples/*/with_client.*: the same flow
#              through the client libraries (clients/, docs/clients.md)
#   t_cluster_env  scripts/cluster.sh env reaches the cluster
#   t_runtimes the versions cards show are those of the interpreters the jail runs
# The examples connect as a login role of their own granted agent_backend,
# for a tenant the operator made through the setup API.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"

wait_for 30 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]' ||
	nok "the supervisor runs"

# A login for the examples (trust on the cluster's socket), member of agent_backend.
q -c "DO \$\$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'example_backend') THEN
		CREATE ROLE example_backend LOGIN IN ROLE agent_backend;
	END IF; END \$\$" >/dev/null

# A tenant made by the operator and the org's admin through the setup API.
example_tenant() {		# name → "org ws model"
	local org ws model
	org=$(q -c "SELECT agent.create_org('$1', 'pro')")
	q -c "SELECT agent.grant_credits('$org', 20, 'examples')" >/dev/null
	model=$(q -c "SELECT agent.create_model('$1-' || gen_random_uuid(), 'example', true)")
	ws=$(q -c "SET ROLE agent_admin" -c "SELECT agent.create_workspace('main', 'admin@example.com') FROM agent.tenant('$org')")
	echo "$org $ws $model"
}

# Run an example as the backend would: its own login, the tenant in the environment.
run_example() {		# tenant cmd...
	local org ws model
	read -r org ws model <<<"$1"
	shift
	env PGHOST="$CLUSTER_DIR" PGPORT="$PORT" PGDATABASE="$DB" PGUSER=example_backend \
		SANDBOX_ORG="$org" SANDBOX_WORKSPACE="$ws" SANDBOX_MODEL="$model" "$@"
}

t_readme() {
	local sql out rc
	sql=$(mktemp /tmp/sandbox_readme.XXXXXX.sql)
	awk '/^## A run, in SQL/ { f = 1 } f && /^```sql/ { g = 1; next } g && /^```/ { exit } g' \
		"$top/README.md" >"$sql"
	chmod 0644 "$sql"
	out=$(as_pg "$PGBIN/psql" -X -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d "$DB" \
		-f "$sql" 2>&1)
	rc=$?
	rm -f "$sql"
	check "the README's SQL block runs as written" 0 "$rc"
	[ "$rc" -eq 0 ] || echo "$out" | tail -n 20 | sed 's/^/#   /'
	check "... its card is in the inbox with the runtime, the cost and the balance" 1 \
		"$(grep -cE 'wants to run python code \| python3 3\.[0-9.]+ +\| +2 \| +100$' <<<"$out")"
	check "... and its run succeeds with the CSV's total" 1 \
		"$(grep -cE '^ succeeded \| t +\| +0 \| 200 ' <<<"$out")"
	check "... and the audit chain is intact" 1 "$(grep -cE '^ t +\| +[0-9]+$' <<<"$out")"
	check "... and its automatic run (the approval policy) succeeds, approved by the policy" "1|1" \
		"$(grep -cE '^ succeeded \| 2 rows' <<<"$out")|$(grep -cE '^ policy +\| policy [0-9a-f-]{36} \(automatic\), set by root@example.com at ' <<<"$out")"
}

t_python() {
	local out rc
	out=$(run_example "$(example_tenant python-example)" /usr/bin/python3 "$top/examples/python/run_once.py" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/#   /'
	check "the Python example ends well" 0 "$rc"
	check "... every step of it" 0 "$(grep -c '^not ok' <<<"$out")"
	check "... and it streamed the output" 3 "$(grep -c '^  | region ' <<<"$out")"
}

t_node() {
	local out rc
	if [ ! -d "$top/examples/node/node_modules/pg" ]; then
		nok "node-postgres is installed (scripts/deps.sh runs npm ci in examples/node)"
		return
	fi
	out=$(run_example "$(example_tenant node-example)" node "$top/examples/node/run_once.js" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/#   /'
	check "the Node example ends well" 0 "$rc"
	check "... every step of it" 0 "$(grep -c '^not ok' <<<"$out")"
	check "... and it streamed the output" 3 "$(grep -c '^  | region ' <<<"$out")"
}

t_python_client() {
	local out rc
	out=$(run_example "$(example_tenant python-client-example)" /usr/bin/python3 "$top/examples/python/with_client.py" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/#   /'
	check "the Python client example ends well" 0 "$rc"
	check "... every step of it (3)" "3 0" "$(grep -c '^ok' <<<"$out") $(grep -c '^not ok' <<<"$out")"
	check "... and it streamed the output" 3 "$(grep -c '^  | region ' <<<"$out")"
}

t_node_client() {
	local out rc
	if [ ! -d "$top/clients/node/node_modules/pg" ]; then
		nok "clients/node's packages are installed (scripts/deps.sh runs npm ci in clients/node)"
		return
	fi
	out=$(run_example "$(example_tenant node-client-example)" node "$top/examples/node/with_client.js" 2>&1)
	rc=$?
	echo "$out" | sed 's/^/#   /'
	check "the Node client example ends well" 0 "$rc"
	check "... every step of it (3)" "3 0" "$(grep -c '^ok' <<<"$out") $(grep -c '^not ok' <<<"$out")"
	check "... and it streamed the output" 3 "$(grep -c '^  | region ' <<<"$out")"
}

# scripts/cluster.sh env: how to reach this cluster, eval-able.
t_cluster_env() {
	local envs
	envs=$("$top/scripts/cluster.sh" env)
	check "cluster.sh env names this cluster's socket, port and database" \
		"$CLUSTER_DIR $PORT $DB" "$(eval "$envs"; echo "$PGHOST $PGPORT $PGDATABASE")"
	check "... and psql reaches the database with it" "$DB" \
		"$(eval "$envs"; as_pg env PGHOST="$PGHOST" PGPORT="$PGPORT" PGDATABASE="$PGDATABASE" "$PGBIN/psql" -X -At -c 'SELECT current_database()')"
}

# The runtimes a card shows (agent.runtimes) are the versions of the very
# binaries the jail runs, as they report themselves (`--version`, another
# way than refresh_runtimes() asks them): what the install stored, and what
# refresh_runtimes() stores again over wrong values (rolled back).
t_runtimes() {
	local real py node sh out
	py=$(/usr/bin/python3 --version 2>&1 | sed -n 's/^Python \([0-9.]*\)$/\1/p')
	node=$(/usr/bin/node --version | sed -n 's/^v\([0-9.]*\)$/\1/p')
	sh=$(/bin/bash --version | sed -n '1s/^GNU bash, version \([0-9.]*\)(.*$/\1/p')
	real="node=$node python=$py shell=$sh"
	check "the real interpreters report a version each" 3 \
		"$(tr ' ' '\n' <<<"$real" | grep -cE '^[a-z]+=[0-9]+\.[0-9]+\.[0-9]+$')"
	check "agent.runtimes holds the versions of the installed interpreters" "$real" \
		"$(q -c "SELECT string_agg(language || '=' || version, ' ' ORDER BY language) FROM agent.runtimes
				  WHERE language IN ('python', 'node', 'shell')")"
	out=$(q -c "BEGIN" -c "UPDATE agent.runtimes SET version = '0.0.0'" \
		-c "SELECT string_agg(language || '=' || version || ':' || probed, ' ' ORDER BY language)
			  FROM agent.refresh_runtimes() WHERE language IN ('python', 'node', 'shell')" -c "ROLLBACK")
	check "refresh_runtimes() stores them again, each probed" \
		"node=$node:true python=$py:true shell=$sh:true" "$out"
}

run_tests t_readme t_python t_node t_python_client t_node_client t_cluster_env t_runtimes
check_invariants
finish_suite
