#!/usr/bin/env bash
# Runs every test suite of the project and ends with one line
# "N passed, N failed" summing them; exits non-zero on any failure.
#
# Suites, in order:
#   jail        test/jail/run.sh (standalone jail, no PostgreSQL)
#   cgroup-v2   test/cgroup-v2/run.sh (the jail's cgroup code in a
#               cgroup-v2-only qemu guest, the runner's unit layout, and
#               one PostgreSQL cluster whose runs get v2 cgroups); beside
#               the other suites, in the background, unless it runs alone
#               or CG2_SERIAL=1
#   regress     pg_regress over test/regress/sql/*.sql with test/regress/expected/*.out
#   isolation   pg_isolation_regress over test/isolation/specs/*.spec
#   pgtap       pg_prove over test/pgtap/*.sql
#   scripts     test/suites/*.sh (supervisor, sessions, approvals, hostile, export, upgrade, egress,
#               clients, gvisor, ...),
#               each ending with its own "N passed, N failed"
#
# The PostgreSQL suites run against one throwaway cluster (scripts/cluster.sh)
# as the postgres user, from a copy of the inputs that postgres can read.
#
# Choosing what runs:
#   SUITES="regress pgtap"   only those suites (default: all of them); a script
#                            suite can be named alone: SUITES="supervisor hostile"
#   T=REGEX                  only the tests whose name matches (an extended
#                            regex): regress, isolation and pgTAP files by name
#                            (T=50_run_lifecycle), script suites by test function
#                            (T=t_cancel SUITES=supervisor); the suites list their
#                            test functions in their run_tests line
#   KEEP_WORK=1              keep the run's work directory (/tmp/sandbox_ext_test.*:
#                            pg_regress and isolation results and diffs)
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
PGXSDIR=$(cd "$(dirname "$($PGBIN/pg_config --pgxs)")/../.." && pwd)
SUITES=${SUITES:-"jail warm cgroup-v2 regress isolation pgtap scripts"}
export T=${T:-}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_cluster}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55432}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_test}

total_pass=0
total_fail=0
summary=()

as_pg() {
	if [ "$(id -un)" = postgres ]; then "$@"
	elif [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"
	else sudo -u postgres -- "$@"; fi
}

# Seconds since the previous record (each suite's own time, for CI budgets).
mark=$SECONDS
record() {			# suite passed failed
	total_pass=$((total_pass + $2))
	total_fail=$((total_fail + $3))
	summary+=("$(printf '%-10s %4d passed, %d failed  (%ds)' "$1" "$2" "$3" $((SECONDS - mark)))")
	mark=$SECONDS
}

# Count a pg_regress-style log: "... ok" / "... FAILED" per test.
record_regress() {		# suite log rc
	local p f
	p=$(grep -cE '\.\.\. ok' "$2")
	f=$(grep -cE '\.\.\. FAILED' "$2")
	if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	record "$1" "$p" "$f"
}

# A script suite's own closing "N passed, N failed" line.
record_script() {		# suite log rc
	local line p f
	line=$(grep -E '^([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
	p=$(sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/' <<<"$line")
	f=$(sed -E 's/^.* ([0-9]+) failed.*/\1/' <<<"$line")
	p=${p:-0}
	f=${f:-0}
	if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	record "$1" "$p" "$f"
}

want() { [[ " $SUITES " == *" $1 "* ]]; }
# A script suite runs for SUITES=scripts or when named itself.
want_script() { want scripts || want "$1"; }
want_any_script() {
	local s
	for s in "$top"/test/suites/*.sh; do want_script "$(basename "$s" .sh)" && return 0; done
	return 1
}
# Names (one a line) that T selects.
selected() { if [ -n "$T" ]; then grep -E -- "$T" || true; else cat; fi; }

work=$(mktemp -d /tmp/sandbox_ext_test.XXXXXX)
chmod 0755 "$work"
started_cluster=false
# A process and all of its descendants (the background cgroup-v2 suite).
kill_tree() {
	local c
	for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
	kill "$1" 2>/dev/null
}
cleanup() {
	# An interrupted run does not leave its guest behind.
	[ -n "${cg2_pid:-}" ] && kill -0 "$cg2_pid" 2>/dev/null && kill_tree "$cg2_pid"
	# Only a cluster this run started (SUITES=jail must not stop another).
	if $started_cluster; then
		"$top/scripts/cluster.sh" stop >/dev/null 2>&1
	fi
	[ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

# ---- jail (no PostgreSQL) ----
if want jail && [ -x "$top/test/jail/run.sh" ]; then
	echo "== jail"
	"$top/test/jail/run.sh" "$top/src/jail/sandbox-jail" 2>&1 | tee "$work/jail.log"
	record_script jail "$work/jail.log" "${PIPESTATUS[0]}"
fi

# ---- warm interpreters (no PostgreSQL) ----
if want warm && [ -x "$top/test/warm/run.sh" ]; then
	echo "== warm"
	"$top/test/warm/run.sh" "$top/src/jail/sandbox-jail" 2>&1 | tee "$work/warm.log"
	record_script warm "$work/warm.log" "${PIPESTATUS[0]}"
fi

# ---- cgroup v2 (a guest of its own, no PostgreSQL) ----
# The emulated guest keeps one core busy for minutes and shares nothing
# with the other suites (its own guest, its own template cluster on port
# 55499): when other suites run too, it runs beside them, in the
# background, and its lines and count follow the last of them
# (CG2_SERIAL=1: in its turn, as the only suite).
cg2_pid=
cg2_start=
run_cgroup_v2() {
	"$top/test/cgroup-v2/run.sh" "$top/src/jail/sandbox-jail" >"$work/cgroup-v2.log" 2>&1
	echo $? >"$work/cgroup-v2.rc"
}
if want cgroup-v2 && [ -x "$top/test/cgroup-v2/run.sh" ]; then
	if [ "$SUITES" != cgroup-v2 ] && [ -z "${CG2_SERIAL:-}" ]; then
		echo "== cgroup-v2 (started in the background; its result follows the other suites)"
		cg2_start=$SECONDS
		run_cgroup_v2 &
		cg2_pid=$!
	else
		echo "== cgroup-v2"
		run_cgroup_v2
		cat "$work/cgroup-v2.log"
		record_script cgroup-v2 "$work/cgroup-v2.log" "$(cat "$work/cgroup-v2.rc")"
	fi
fi

# ---- PostgreSQL suites ----
if want regress || want isolation || want pgtap || want_any_script; then
	echo "== cluster"
	started_cluster=true
	if ! "$top/scripts/cluster.sh" start; then
		record cluster 0 1
		want regress && record regress 0 1
	else
		cp -r "$top/test" "$work/"
		chown -R postgres: "$work" 2>/dev/null || sudo chown -R postgres: "$work"
		conn=(--host="$SANDBOX_CLUSTER_DIR" --port="$SANDBOX_PGPORT")

		# The SQL-level suites (regress, isolation, pgTAP) test the control
		# plane's own rules (races
		# between approvers, charges, ...): pause the supervisor so it does
		# not claim what they approve (0 = claim nothing; see docs).
		pause_supervisor() {
			as_pg "$PGBIN/psql" -X -q -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" \
				-c "ALTER SYSTEM SET sandbox.max_concurrent_runs = $1" -c "SELECT pg_reload_conf()" >/dev/null
			sleep 1
		}
		pause_supervisor 0

		# pg_regress or pg_isolation_regress over the inputs in a directory.
		run_regress() {		# suite driver inputdir tests...
			local suite=$1 driver=$2 dir=$3 rc
			shift 3
			[ $# -gt 0 ] || return 0
			echo "== $suite"
			(cd "$dir" && as_pg "$driver" \
				--inputdir=. --outputdir="$work/$suite" --bindir="$PGBIN" \
				"${conn[@]}" --use-existing --dbname="$SANDBOX_DB" \
				"$@") 2>&1 | tee "$work/$suite.log"
			rc=${PIPESTATUS[0]}
			if [ "$rc" -ne 0 ] && [ -f "$work/$suite/regression.diffs" ]; then
				head -c 20000 "$work/$suite/regression.diffs"
				# Keep the outputs so a developer can review and accept them.
				mkdir -p "$top/build" && rm -rf "$top/build/$suite" && cp -r "$work/$suite" "$top/build/$suite"
			fi
			record_regress "$suite" "$work/$suite.log" "$rc"
		}
		if want regress; then
			# shellcheck disable=SC2046
			run_regress regress "$PGXSDIR/src/test/regress/pg_regress" "$work/test/regress" \
				$(cd "$top/test/regress/sql" && ls *.sql 2>/dev/null | sed 's/\.sql$//' | sort | selected)
		fi
		# The regress suite leaves approved invocations behind (it commits
		# its own); they were never meant to run: set them aside, so that
		# the isolation specs' claims (which commit) and later the
		# supervisor do not take them, and the shell suites find every
		# slot free and nothing of theirs in flight.
		set_aside_approved() {
			as_pg "$PGBIN/psql" -X -q -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" \
				-c "UPDATE agent.invocations SET state = 'cancelled', state_reason = 'left by the SQL suites', finished_at = now() WHERE state = 'approved'" >/dev/null
		}
		set_aside_approved
		if want isolation; then
			# shellcheck disable=SC2046
			run_regress isolation "$PGXSDIR/src/test/isolation/pg_isolation_regress" "$work/test/isolation" \
				$(cd "$top/test/isolation/specs" 2>/dev/null && ls *.spec 2>/dev/null | sed 's/\.spec$//' | sort | selected)
		fi

		if want pgtap; then
			echo "== pgtap"
			files=$(cd "$work/test/pgtap" 2>/dev/null && ls *.sql 2>/dev/null | sort | selected)
			if [ -n "$files" ]; then
				(cd "$work/test/pgtap" && as_pg pg_prove --verbose \
					-h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" -U postgres \
					$files) >"$work/pgtap.log" 2>&1
				rc=$?
				grep -E '^(not ok|ok|#|Files=|Result:|[a-z0-9_]+\.sql)' "$work/pgtap.log" | grep -vE '^ok ' | tail -n 200
				p=$(grep -cE '^ok [0-9]+' "$work/pgtap.log")
				f=$(grep -cE '^not ok [0-9]+' "$work/pgtap.log")
				if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
				record pgtap "$p" "$f"
			fi
		fi

		set_aside_approved
		as_pg "$PGBIN/psql" -X -q -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -d "$SANDBOX_DB" \
			-c "ALTER SYSTEM RESET sandbox.max_concurrent_runs" -c "SELECT pg_reload_conf()" >/dev/null
		sleep 1

		if want_any_script; then
			for s in "$top"/test/suites/*.sh; do
				[ -x "$s" ] || continue
				name=$(basename "$s" .sh)
				want_script "$name" || continue
				echo "== $name"
				"$s" 2>&1 | tee "$work/$name.log"
				record_script "$name" "$work/$name.log" "${PIPESTATUS[0]}"
			done
		fi
	fi
fi

if [ -n "$cg2_pid" ]; then
	echo "== cgroup-v2 (background)"
	wait "$cg2_pid"
	cat "$work/cgroup-v2.log"
	# its own time, from its start: the suites before it ran meanwhile
	mark=$cg2_start
	record_script cgroup-v2 "$work/cgroup-v2.log" "$(cat "$work/cgroup-v2.rc" 2>/dev/null || echo 1)"
fi

echo
echo "== summary"
for line in "${summary[@]}"; do echo "$line"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ] && [ "$total_pass" -gt 0 ]
