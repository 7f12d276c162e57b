#!/usr/bin/env bash
# The floor under the primary's cost per run: what the rows a run must
# write cost on this PostgreSQL when they are written by the fewest plain
# statements the contract allows, next to the real path, in the same run.
#
# The real path: N sequential shell `true` runs through the local runner
# (request, approve, then LISTEN for the end, as bench/e2e's client does).
# The floor: the same rows written by pgbench (-M prepared, one client, N
# times) into copies of the tables (CREATE TABLE ... (LIKE agent.x INCLUDING
# ALL): the same columns, defaults, CHECKs and indexes; no triggers, no
# foreign keys, no row-level security), with no logic at all, in the four
# transactions no implementation can merge (the request and the approval
# are two people's calls; the claim commits before the jail starts and the
# finish after it ends; docs/control-plane.md):
#
#   request   the invocation, its card, one audit event
#   approve   the card's decision, the invocation approved, one audit event
#   claim     the invocation leased, the charge (ledger row + balance), two
#             audit events (credits.charged, invocation.provisioned)
#   finish    the invocation's end, the tool call, the analytics row, two
#             audit events (invocation.started, invocation.finished), the
#             end's NOTIFY
#
# Each audit event is the real append's statement shape (the org's head
# row moved, the event inserted with its hash, src/audit.c) on the copies.
# A second floor, "floor-4", records one audit event per transaction
# instead of six per run: what merging events would save.
#
# Prints, per round, server CPU µs and WAL bytes per run of each, and the
# ratios real/floor; then the rows written per run by table, real and
# floor (pg_stat_user_tables).  Asserts nothing.  The server CPU is every
# server process's (as bench/runners/run.sh counts it).
#
#   bench/runners/floor.sh          (as root, after make install; its own cluster)
#   N=400 ROUNDS=3 bench/runners/floor.sh
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
PGBIN=${PGBIN:-$(dirname "${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}")}
N=${N:-200}
ROUNDS=${ROUNDS:-2}
export SANDBOX_CLUSTER_DIR=${SANDBOX_CLUSTER_DIR:-/tmp/sandbox_ext_bench_floor}
export SANDBOX_PGPORT=${SANDBOX_PGPORT:-55437}
export SANDBOX_DB=${SANDBOX_DB:-sandbox_bench}
# No autovacuum: a worker that happens to run inside one measurement's
# window (an ANALYZE of the tables just written) would add its CPU to that
# side only.  Each measurement is followed by a VACUUM of what it left
# (dead row versions, new index entries), timed apart: its cost per run
# is printed as its own column, so the per-run cost is steps + vacuum.
export SANDBOX_EXTRA_CONF="autovacuum = off
${SANDBOX_EXTRA_CONF:-}"
# shellcheck source=../lib.sh
. "$top/bench/lib.sh"
bench_need cc
bench_need "$PGBIN/pgbench"
bench_need_extension
bench_need_jail "$PGBIN/sandbox-jail"
# shellcheck source=../../test/lib.sh
. "$top/test/lib.sh"

tmp=$(mktemp -d /tmp/sandbox_bench_floor.XXXXXX)
chmod 0755 "$tmp"
trap '"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
cc -O2 -Wall -o "$tmp/client" "$top/bench/e2e/client.c" -I"$("$PGBIN/pg_config" --includedir)" -I/usr/include/postgresql -lpq ||
	bench_die "could not build bench/e2e/client.c (libpq-dev)"
"$top/scripts/cluster.sh" stop >/dev/null 2>&1 || true
bench_start_cluster
read -r ORG WS AGENT < <(bench_tenant)
conninfo="host=$SANDBOX_CLUSTER_DIR port=$SANDBOX_PGPORT user=postgres dbname=$SANDBOX_DB"
"$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true 5 >/dev/null ||
	bench_die "the warm-up runs failed"

# The copies, one org's head and balance in them; the floor's statements
# shared with instructions.sh.
# shellcheck source=floor_rows.sh
. "$top/bench/runners/floor_rows.sh"
floor_tables "$ORG" | q >/dev/null
floor_script 6 >"$tmp/floor6.sql"
floor_script 4 >"$tmp/floor4.sql"
chmod 0644 "$tmp"/*.sql
for f in floor6 floor4; do	# each script must run before it is timed
	as_pg "$PGBIN/pgbench" -n -M prepared -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -t 1 \
		-D org="$ORG" -D ws="$WS" -D agent="$AGENT" -f "$tmp/$f.sql" "$SANDBOX_DB" >"$tmp/check.log" 2>&1 ||
		bench_die "the $f script does not run: $(grep -m 3 -i error "$tmp/check.log")"
done

ticks() { bench_server_ticks; }
HZ=$(getconf CLK_TCK)
writes() {			# schema: "table ins upd del" of every table with writes, cumulative
	q -F ' ' -c "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables WHERE schemaname = '$1' ORDER BY relname"
}
declare -A cpu wal fpi vac
# Full-page images in the WAL between two LSNs, bytes (pg_waldump --stats):
# the first change of each page after a checkpoint logs the whole page,
# so this part depends on the checkpoint distance and the tables' sizes.
fpi_bytes() {
	as_pg "$PGBIN/pg_waldump" --stats -p "$SANDBOX_CLUSTER_DIR/data/pg_wal" -s "$1" -e "$2" 2>/dev/null |
		awk '$1 == "Total" { print $5; found = 1 } END { if (!found) print 0 }'
}
measure() {			# what round: sets cpu[what.round] and wal[what.round]
	local what=$1 r=$2 t0 t1 w0 w1 schema=floor
	[ "$what" = real ] && schema=agent
	[ "$r" = 1 ] && { sleep 1.5; writes $schema >"$tmp/$what.w0"; }
	q -c "CHECKPOINT" >/dev/null		# no full-page images of one side in the other's WAL
	w0=$(q -c "SELECT pg_current_wal_lsn()")
	t0=$(ticks)
	case $what in
	real) "$tmp/client" latency "$conninfo" "$ORG" "$WS" "$AGENT" shell true "$N" >/dev/null ||
		bench_die "the latency client failed" ;;
	*) as_pg "$PGBIN/pgbench" -n -M prepared -h "$SANDBOX_CLUSTER_DIR" -p "$SANDBOX_PGPORT" -t "$N" \
		-D org="$ORG" -D ws="$WS" -D agent="$AGENT" -f "$tmp/$what.sql" "$SANDBOX_DB" >"$tmp/pgbench.log" 2>&1 ||
		bench_die "pgbench failed: $(tail -n 3 "$tmp/pgbench.log")" ;;
	esac
	t1=$(ticks)
	w1=$(q -c "SELECT pg_current_wal_lsn()")
	cpu[$what.$r]=$(awk -v a="$t0" -v b="$t1" -v n="$N" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }')
	q -c "VACUUM" >/dev/null
	vac[$what.$r]=$(awk -v a="$t1" -v b="$(ticks)" -v n="$N" -v hz="$HZ" 'BEGIN { printf "%.0f", (b - a) * 1e6 / hz / n }')
	wal[$what.$r]=$(q -c "SELECT round(pg_wal_lsn_diff('$w1', '$w0') / $N)")
	fpi[$what.$r]=$(awk -v b="$(fpi_bytes "$w0" "$w1")" -v n="$N" 'BEGIN { printf "%.0f", b / n }')
	# (statistics reach the shared counters within a second of a transaction)
	[ "$r" = 1 ] && { sleep 1.5; writes $schema >"$tmp/$what.w1"; }
	return 0
}

echo "shell true, $N sequential runs per measurement, $ROUNDS rounds interleaved; server CPU µs and WAL bytes per run"
printf '%-6s %12s %12s %12s %14s %14s %14s %11s %11s\n' round real_us+vac floor6_us+vac floor4_us+vac real_wal/fpi floor6_wal/fpi floor4_wal/fpi cpu_ratio6 wal_ratio6
for r in $(seq "$ROUNDS"); do
	measure real "$r"
	measure floor6 "$r"
	measure floor4 "$r"
	printf '%-6s %12s %12s %12s %14s %14s %14s %11s %11s\n' "$r" "${cpu[real.$r]}+${vac[real.$r]}" \
		"${cpu[floor6.$r]}+${vac[floor6.$r]}" "${cpu[floor4.$r]}+${vac[floor4.$r]}" \
		"${wal[real.$r]}/${fpi[real.$r]}" "${wal[floor6.$r]}/${fpi[floor6.$r]}" "${wal[floor4.$r]}/${fpi[floor4.$r]}" \
		"$(awk -v a="$((${cpu[real.$r]} + ${vac[real.$r]}))" -v b="$((${cpu[floor6.$r]} + ${vac[floor6.$r]}))" 'BEGIN { printf "%.1fx", a / b }')" \
		"$(awk -v a="${wal[real.$r]}" -v b="${wal[floor6.$r]}" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "(µs+vac: server CPU per run during the runs (every server process) + the VACUUM after them, per run;"
echo " real: the local runner's path; floor6/floor4: the same rows as plain prepared"
echo " statements in four transactions, with six audit events per run (today's) or one per transaction;"
echo " wal/fpi: WAL bytes per run and, of them, full-page images after the CHECKPOINT before each measurement)"
echo
echo "rows written per run in round 1 (table: inserted updated deleted):"
for what in real floor6 floor4; do
	echo "  $what:"
	join "$tmp/$what.w0" "$tmp/$what.w1" | awk -v n="$N" '
		{ i = ($5 - $2) / n; u = ($6 - $3) / n; d = ($7 - $4) / n
		  if (i + u + d > 0) printf "    %-22s %6.2f %6.2f %6.2f\n", $1, i, u, d }'
done
