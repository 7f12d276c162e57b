# bench/lib.sh: what the benchmarks share (sourced, not run).  A benchmark
# whose subject is missing refuses with a message and a non-zero exit
# instead of timing nothing:
#
#   bench_die MSG...          "bench: MSG" on stderr, exit 1
#   as_pg CMD...              run a command as the postgres OS user
#   bench_need CMD...         each command is on PATH (or an executable path)
#   bench_need_extension      sandbox_ext is installed for $PGBIN's PostgreSQL
#                             (make && make install with that PG_CONFIG)
#   bench_need_jail PATH      PATH is an executable sandbox-jail that runs
#                             a trivial payload
#   bench_start_cluster       scripts/cluster.sh start, or refuse with the end
#                             of its output
#   bench_server_ticks        CPU clock ticks (getconf CLK_TCK) of every server
#                             process of $SANDBOX_CLUSTER_DIR's cluster so far: the
#                             postmaster's own and its reaped children's, plus
#                             those of its live children
#   bench_tenant              a pro org with a workspace, a model and an
#                             agent that may run code, and 100,000,000
#                             credits; prints "ORG WS AGENT" (test/lib.sh's q)
#
# Uses PGBIN (the PostgreSQL binaries) and top (the repository).

bench_die() {
	echo "bench: $*" >&2
	exit 1
}

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}

bench_need() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || bench_die "$c is not installed (scripts/deps.sh installs what the benchmarks need)"
	done
}

bench_need_extension() {
	local share lib
	[ -x "$PGBIN/pg_config" ] || bench_die "no PostgreSQL at $PGBIN (set PG_CONFIG)"
	share=$("$PGBIN/pg_config" --sharedir)
	lib=$("$PGBIN/pg_config" --pkglibdir)
	[ -f "$share/extension/sandbox_ext.control" ] && [ -f "$lib/sandbox_ext.so" ] ||
		bench_die "sandbox_ext is not installed for $PGBIN/pg_config: run make && make install with PG_CONFIG=$PGBIN/pg_config"
}

bench_need_jail() {
	local out got rc err
	[ -x "$1" ] || bench_die "$1 is not an executable sandbox-jail: build and install it (make && make install)"
	out=$(mktemp -d /tmp/sandbox_bench_jail.XXXXXX)
	chmod 0755 "$out"
	chown postgres: "$out" 2>/dev/null || true
	printf 'echo jail-ok\n' >"$out/probe.sh"
	chmod 0644 "$out/probe.sh"
	# (callers may run under set -e: the status is read, not fatal)
	rc=0
	got=$(as_pg "$1" --language shell --workspace "$out" --code-file "$out/probe.sh" --quiet \
		--verdict-file /dev/null 2>"$out/err") || rc=$?
	err=$(head -c 300 "$out/err")
	rm -rf "$out"
	[ "$got" = jail-ok ] ||
		bench_die "$1 does not run a payload (exit status $rc, printed [$got]${err:+, said: $err})"
}

bench_start_cluster() {
	local log
	log=$(mktemp /tmp/sandbox_bench_cluster.XXXXXX)
	if ! "$top/scripts/cluster.sh" start >"$log" 2>&1; then
		local why
		why=$(tail -n 5 "$log")
		rm -f "$log"
		bench_die "could not start the cluster in $SANDBOX_CLUSTER_DIR: $why"
	fi
	rm -f "$log"
}

bench_tenant() {
	local org ws agent
	read -r org ws agent < <(q -F ' ' <<'SQL' | tail -n 1
WITH o AS (INSERT INTO agent.orgs (name, plan) VALUES ('bench', 'pro') RETURNING id),
	 w AS (INSERT INTO agent.workspaces (org_id, name) SELECT id, 'bench' FROM o RETURNING id, org_id),
	 m AS (INSERT INTO agent.models (name, supports_code_execution) VALUES ('bench-model', true) RETURNING id),
	 a AS (INSERT INTO agent.agents (org_id, workspace_id, name, kind, model_id, code_execution_enabled)
		   SELECT w.org_id, w.id, 'bench', 'specialist', m.id, true FROM w, m RETURNING id, org_id, workspace_id)
SELECT org_id, workspace_id, id FROM a;
SQL
)
	[ -n "$agent" ] || bench_die "could not create the benchmark's tenant"
	q -c "SELECT agent.grant_credits('$org', 100000000, 'bench')" >/dev/null
	echo "$org $ws $agent"
}

bench_server_ticks() {
	local pm s c
	pm=$(head -n 1 "$SANDBOX_CLUSTER_DIR/data/postmaster.pid")
	s=$(sed 's/^.*) //' "/proc/$pm/stat" | awk '{ print $12 + $13 + $14 + $15 }')
	for c in $(cat "/proc/$pm/task/$pm/children" 2>/dev/null); do
		s=$((s + $(sed 's/^.*) //' "/proc/$c/stat" 2>/dev/null | awk '{ print $12 + $13 + $14 + $15 }' || echo 0)))
	done
	echo "$s"
}
