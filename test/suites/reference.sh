#!/usr/bin/env bash
# docs/reference.md against the catalog of this install: every function and
# view of the API with its signature, roles and SQLSTATEs, the roles, the
# text limits and the settings' rules (test/tools/reference_check.py says
# what is compared).  A difference either way fails, so the page cannot
# drift from the code.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$here/../lib.sh"

work=$(mktemp -d /tmp/sandbox_reference.XXXXXX)
chmod 0755 "$work"
trap 'rm -rf "$work"' EXIT
cp "$top/test/tools/reference.sql" "$work/"
chmod 0644 "$work/reference.sql"

# What the catalog says, in the files reference_check.py reads.
read_catalog() {
	q -F '|' -f "$work/reference.sql" >"$work/catalog"
	q -F '|' -c "SELECT kind, max_bytes FROM agent.text_limits()" >"$work/limits"
	q -F '|' -c "SELECT key, type, min_value, max_value FROM agent.setting_rules()" >"$work/settings"
	q -c "SELECT rolname FROM pg_roles WHERE rolname IN ('agent_backend', 'agent_admin', 'agent_auditor', 'agent_runner', 'sandbox_runner_local') OR rolname LIKE 'agent\_%'" >"$work/roles"
}

t_reference() {
	local diff
	read_catalog
	check "the catalog lists the API" 1 "$([ "$(wc -l <"$work/catalog")" -gt 50 ] && echo 1 || echo 0)"
	diff=$(/usr/bin/python3 "$top/test/tools/reference_check.py" "$top/docs/reference.md" \
		"$work/catalog" "$work/limits" "$work/settings" "$work/roles")
	check "docs/reference.md agrees with the catalog" "" "$diff"
	[ -z "$diff" ] || echo "$diff" | head -n 40 | sed 's/^/#   /'
}

# The check itself: a page with an entry removed, a role changed and a
# SQLSTATE dropped must be caught (a check that cannot fail is no check).
t_reference_catches_drift() {
	local broken="$work/broken.md" out
	read_catalog
	/usr/bin/python3 - "$top/docs/reference.md" "$broken" <<'PY'
import re, sys
doc = open(sys.argv[1], encoding="utf-8").read()
doc = re.sub(r"^### `agent\.cancel\(.*?(?=^### )", "", doc, count=1, flags=re.M | re.S)
doc = doc.replace("Roles: agent_admin. SQLSTATEs:", "Roles: agent_backend. SQLSTATEs:", 1)
doc = re.sub(r"(### `agent\.approve\(.*`\n\nRoles: [^.]*\. SQLSTATEs: )([^.]*)", lambda m: m.group(1) + m.group(2).replace("55000, ", ""), doc, count=1)
open(sys.argv[2], "w", encoding="utf-8").write(doc)
PY
	out=$(/usr/bin/python3 "$top/test/tools/reference_check.py" "$broken" \
		"$work/catalog" "$work/limits" "$work/settings" "$work/roles")
	check "a function missing from the page is caught" 1 "$(grep -c '^missing from the page: agent.cancel(' <<<"$out")"
	check "... a wrong role" 1 "$(grep -c '^roles of ' <<<"$out")"
	check "... a SQLSTATE the page lacks" 1 "$(grep -c '^SQLSTATEs of agent.approve(.*lacks 55000' <<<"$out")"
}

run_tests t_reference t_reference_catches_drift
finish_suite
