#!/usr/bin/env bash
# The client libraries and the approver's page (docs/clients.md) against the
# real cluster (supervisor, jail, interpreters), each as a user installs it:
#   t_python_package  clients/python: mypy --strict clean; pip installs it
#                     into a venv (Debian's psycopg, no index)
#   t_python          test/clients/python_client.py with that venv: request,
#                     cards, approve, stream, wait, timeouts, cancel, files,
#                     errors, another tenant
#   t_node_package    clients/node: tsc --checkJs clean, index.d.ts as its
#                     JSDoc makes it, npm installs its packed tarball
#   t_node            test/clients/node_client.js with that install: the same
#                     surface, async iteration, two streams at once
#   t_approver        clients/node/approver in headless Chromium
#                     (test/clients/approver.js, playwright-core): a card
#                     appears, approve, output streams, the tool call shows
# The programs print "ok - ..." lines; each counts here as a check.  They
# connect as a login of their own granted agent_backend, for tenants the
# operator made through the setup API.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"

PY=/usr/bin/python3
work=$(mktemp -d /tmp/sandbox_clients.XXXXXX)
chmod 0755 "$work"
approver_pid=
cleanup() {
	[ -z "$approver_pid" ] || kill "$approver_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

wait_for 30 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]' ||
	nok "the supervisor runs"

q -c "DO \$\$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'clients_backend') THEN
		CREATE ROLE clients_backend LOGIN IN ROLE agent_backend;
	END IF; END \$\$" >/dev/null

client_tenant() {		# name → "org ws model"
	local org ws model
	org=$(q -c "SELECT agent.create_org('$1', 'pro')")
	q -c "SELECT agent.grant_credits('$org', 60, 'clients')" >/dev/null
	model=$(q -c "SELECT agent.create_model('$1-' || gen_random_uuid(), 'example', true)")
	ws=$(q -c "SET ROLE agent_admin" -c "SELECT agent.create_workspace('main', 'admin@example.com') FROM agent.tenant('$org')")
	echo "$org $ws $model"
}

# Run a test program for tenants A and B, as the backend would (in a
# subshell: it execs the program).
as_backend() {			# tenantA tenantB cmd...
	local org ws model orgb wsb rest
	read -r org ws model <<<"$1"
	read -r orgb wsb rest <<<"$2"
	shift 2
	# exec: started with &, $! is the program itself (t_approver stops it by it)
	exec env PGHOST="$CLUSTER_DIR" PGPORT="$PORT" PGDATABASE="$DB" PGUSER=clients_backend \
		DATABASE_URL="postgresql://clients_backend@$(sed 's|/|%2F|g' <<<"$CLUSTER_DIR"):$PORT/$DB" \
		SANDBOX_ORG="$org" SANDBOX_WORKSPACE="$ws" SANDBOX_MODEL="$model" \
		SANDBOX_ORG_B="$orgb" SANDBOX_WORKSPACE_B="$wsb" "$@"
}

# Each "ok - X" / "not ok - X" line of a program is one check; anything
# else it prints is shown as a comment.  Then: it ended well, and printed
# at least MIN checks (a program that stops early fails here).
relay() {			# what min cmd...
	local what=$1 min=$2 line n=0 rc=none
	shift 2
	while IFS= read -r line; do
		case $line in
		"ok - "*) ok "$what: ${line#ok - }"; n=$((n + 1)) ;;
		"not ok - "*) nok "$what: ${line#not ok - }"; n=$((n + 1)) ;;
		"relay-exit-status="*) rc=${line#relay-exit-status=} ;;
		*) echo "#   $line" ;;
		esac
	done < <(("$@") 2>&1; echo "relay-exit-status=$?")
	check "$what: the program ended well, after at least $min checks" "0 1" "$rc $([ "$n" -ge "$min" ] && echo 1)"
}

t_python_package() {
	local out
	out=$(cd "$top/clients/python" && "$PY" -m mypy --strict --cache-dir "$work/mypy" sandbox_ext_client 2>&1)
	check "clients/python is mypy --strict clean" "Success: no issues found in 4 source files" "$out"
	# pip builds in the source tree: build a copy.
	cp -r "$top/clients/python" "$work/pysrc"
	"$PY" -m venv --system-site-packages "$work/venv" &&
		"$work/venv/bin/pip" install -q --no-build-isolation --no-index "$work/pysrc" >"$work/pip.log" 2>&1
	check "pip installs clients/python into a venv" 0 "$?"
	sed 's/^/#   /' "$work/pip.log"
	check "... and the venv imports it from there, not from the tree" 1 \
		"$(cd / && "$work/venv/bin/python" -c 'import sandbox_ext_client as m; print(m.__file__)' | grep -c "^$work/venv/lib/")"
}

t_python() {
	if [ ! -x "$work/venv/bin/python" ]; then
		"$PY" -m venv --system-site-packages "$work/venv" && cp -r "$top/clients/python" "$work/pysrc" &&
			"$work/venv/bin/pip" install -q --no-build-isolation --no-index "$work/pysrc" >/dev/null 2>&1
	fi
	relay python 50 as_backend "$(client_tenant py-a)" "$(client_tenant py-b)" \
		"$work/venv/bin/python" "$top/test/clients/python_client.py"
}

t_node_package() {
	local out
	if [ ! -d "$top/clients/node/node_modules/typescript" ]; then
		nok "clients/node's packages are installed (scripts/deps.sh runs npm ci in clients/node)"
		return
	fi
	out=$(cd "$top/clients/node" && node node_modules/typescript/bin/tsc -p jsconfig.json 2>&1)
	check "clients/node passes tsc --checkJs (strict), and its types serve TypeScript code" "0|" "$?|$out"
	(cd "$top/clients/node" && node node_modules/typescript/bin/tsc index.js --declaration --allowJs \
		--emitDeclarationOnly --strict --target es2022 --module commonjs --types node --outDir "$work/dts")
	check "index.d.ts is what the JSDoc of index.js makes (npm run types)" "" \
		"$(diff "$top/clients/node/index.d.ts" "$work/dts/index.d.ts" | head -n 5)"
	mkdir -p "$work/npm"
	(cd "$top/clients/node" && npm pack --pack-destination "$work/npm" --silent >/dev/null) &&
		(cd "$work/npm" && echo '{"name":"t","version":"1.0.0","private":true}' >package.json &&
			npm install --offline --no-audit --no-fund --loglevel=error ./sandbox-ext-client-*.tgz >/dev/null 2>&1)
	check "npm installs the packed clients/node (from the cache npm ci filled)" 0 "$?"
}

t_node() {
	local lib=$work/npm/node_modules/sandbox-ext-client
	[ -f "$lib/index.js" ] || lib=$top/clients/node
	relay node 28 as_backend "$(client_tenant node-a)" "$(client_tenant node-b)" \
		env NODE_CLIENT="$lib" node "$top/test/clients/node_client.js"
}

t_approver() {
	local a url
	if [ ! -x /usr/bin/chromium ] || [ ! -d "$top/clients/node/node_modules/playwright-core" ]; then
		nok "Debian's chromium and playwright-core are installed (scripts/deps.sh)"
		return
	fi
	a=$(client_tenant page)
	as_backend "$a" "$a" env PORT=0 POLL_MS=1000 node "$top/clients/node/approver/server.js" >"$work/approver.log" 2>&1 &
	approver_pid=$!
	wait_for 20 'grep -q "^sandbox-approver: http://" "$work/approver.log"' || nok "the approver's server starts" "$(cat "$work/approver.log")"
	url=$(sed -n 's|^sandbox-approver: \(http://[^ ]*/\) .*|\1|p' "$work/approver.log")
	relay approver 24 as_backend "$a" "$a" env APPROVER_URL="$url" node "$top/test/clients/approver.js"
	kill "$approver_pid"
	wait "$approver_pid" 2>/dev/null
	check "the approver's server stops on SIGTERM" "" "$(ps -o pid= -p "$approver_pid")"
	approver_pid=
	sed -n '/sandbox-approver: [^h]/p' "$work/approver.log" | sed 's/^/#   /'
}

run_tests t_python_package t_python t_node_package t_node t_approver
check_invariants
finish_suite
