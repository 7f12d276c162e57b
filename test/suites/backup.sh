#!/usr/bin/env bash
# backup: a logical backup (pg_dump -Fc) of a cluster filled with runs of
# every kind, restored into a new cluster the documented way
# (docs/operations.md, "Backup and restore"), compared row for row.
#
# Cluster 1 (lib.sh) is the source, cluster 2 the target, started without
# its database: the database is created empty and restored in one
# transaction in session_replication_role = replica.  The roles the
# database depends on (a runner host's login, a backend's, a monitoring
# role granted a view) are globals: taken with pg_dumpall --globals-only,
# the restore without them fails, after them they log in again (issue 27,
# item 9).
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

A=
SRC_DIGEST=
SRC_DIGEST_SQL=
SRC_ROWS=
DUMP=
LIVE=
T_REPOINT=
GLOBALS=
RUNNER_ID=

seq_values() { q -c "SELECT string_agg(c.relname || '=' || coalesce(s.last_value::text, 'null'), ',' ORDER BY c.relname) FROM pg_class c JOIN pg_sequences s ON s.schemaname = 'agent' AND s.sequencename = c.relname WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind = 'S'"; }
max_ids() { q -c "SELECT (SELECT max(id) FROM agent.audit_events) || '|' || (SELECT max(id) FROM agent.credit_ledger)"; }
# psql on the cluster in use as another login (the clusters trust local
# connections, but for the roles a pg_hba.conf line of a test names).
login_q() {			# role [psql options]
	local role=$1
	shift
	as_pg "$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$CLUSTER_DIR" -p "$PORT" -U "$role" -d "$DB" "$@"
}

t_fill_source() {
	if ! start_cluster 1; then
		nok "the source cluster starts"
		finish_suite
	fi
	use_cluster 1
	A=$(fill_every_kind)
	# An operator's values in the rows the install script writes.
	setting approval_timeout '20 minutes'
	q -c "UPDATE agent.plans SET credits_per_invocation = 3 WHERE plan = 'growth'" >/dev/null
	# The source host's probed interpreter version, which this host does
	# not have (agent.after_restore probes the target's).
	q -c "UPDATE agent.runtimes SET version = '1.0' WHERE language = 'node'" >/dev/null
	# The globals an operator makes (docs/runners.md, README): a runner
	# host's login with a password, registered as its runner (0 slots: it
	# claims nothing); a backend's login; a monitoring role granted a view.
	q -c "CREATE ROLE bkp_runner LOGIN PASSWORD 'bkp-runner-secret'" -c "GRANT agent_runner TO bkp_runner" \
	  -c "CREATE ROLE bkp_backend LOGIN" -c "GRANT agent_backend TO bkp_backend" \
	  -c "CREATE ROLE bkp_monitor LOGIN" -c "GRANT USAGE ON SCHEMA agent TO bkp_monitor" \
	  -c "GRANT SELECT ON agent.runner_status TO bkp_monitor" >/dev/null
	RUNNER_ID=$(login_q bkp_runner -c "SELECT runner_id FROM agent.runner_register('bkp-host', 'bkp', '1', 0)")
	check "the source's runner host registered with its own login" 1 \
		"$(q -c "SELECT count(*) FROM agent.runners WHERE id = '$RUNNER_ID' AND login_role = 'bkp_runner'")"
	check "the source ran every kind of run" \
		"cancelled:1,denied:1,expired:1,failed:1,insufficient_credits:1,provision_failed:1,succeeded:2,timed_out:1" \
		"$(fill_states)"
	check "every table and sequence of the extension is marked for pg_dump" 0 \
		"$(q -c "SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'agent'::regnamespace AND c.relkind IN ('r', 'p', 'S')
				   AND c.oid <> ALL ((SELECT extconfig FROM pg_extension WHERE extname = 'sandbox_ext')::oid[])")"
}

t_dump() {
	local sql before after rc ntables
	DUMP=$work_dir/sandbox.dump
	sql=$(table_digest_sql)
	before=$(q -c "$sql")
	as_pg "$PGBIN/pg_dump" -h "$CLUSTER_DIR" -p "$PORT" -U postgres -Fc -f "$DUMP" "$DB"
	rc=$?
	after=$(q -c "$sql")
	check "pg_dump -Fc succeeds" 0 "$rc"
	# Tables that changed while the dump ran (heartbeats): compared by row count only.
	LIVE=$(diff <(echo "$before") <(echo "$after") | sed -n 's/^> \([^|]*\)|.*/\1/p' | tr '\n' ' ')
	# agent.runners and agent.runner_isolation hold the runners' live
	# state: the restored cluster's own local runner registers (a new
	# incarnation, heartbeat) and reports its isolation classes again
	# (reported_at) before the comparison, so their rows are compared by
	# count too.
	for t in runners runner_isolation; do
		case " $LIVE " in *" $t "*) ;; *) LIVE="${LIVE}$t " ;; esac
	done
	SRC_DIGEST=$after
	SRC_DIGEST_SQL=$sql
	SRC_ROWS=$(q -c "SELECT (SELECT count(*) FROM agent.settings) || '|' || (SELECT count(*) FROM agent.plans) || '|' || (SELECT count(*) FROM agent.runtimes)")
	ntables=$(q -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'agent'::regnamespace AND relkind IN ('r', 'p')")
	check "the dump holds the data of every table of schema agent" "$ntables" \
		"$(as_pg "$PGBIN/pg_restore" -l "$DUMP" | grep -c ' TABLE DATA agent ')"
	check "and the sequences' values" "$(q -c "SELECT count(*) FROM pg_class WHERE relnamespace = 'agent'::regnamespace AND relkind = 'S'")" \
		"$(as_pg "$PGBIN/pg_restore" -l "$DUMP" | grep -c ' SEQUENCE SET agent ')"
	SRC_SEQ=$(seq_values)
	SRC_MAX=$(max_ids)
	GLOBALS=$work_dir/globals.sql
	as_pg "$PGBIN/pg_dumpall" -h "$CLUSTER_DIR" -p "$PORT" -U postgres --globals-only -f "$GLOBALS"
	check "pg_dumpall --globals-only has the logins, their memberships and the runner's password" "3|3|1" \
		"$(grep -cE '^CREATE ROLE bkp_(runner|backend|monitor);' "$GLOBALS")|$(grep -cE '^GRANT agent_(runner|backend) TO bkp_|^GRANT agent_runner TO sandbox_runner_local' "$GLOBALS")|$(grep -c "^ALTER ROLE bkp_runner .*PASSWORD 'SCRAM-SHA-256" "$GLOBALS")"
}

t_restore() {
	local out rc
	if ! start_cluster 2 nodb; then
		nok "the target cluster starts"
		finish_suite
	fi
	use_cluster 2
	# The procedure of docs/operations.md takes the globals with the dump
	# and applies them before the restore (what follows runs it).
	check "docs/operations.md: pg_dumpall --globals-only with the dump, psql -f globals.sql before pg_restore" "1|1" \
		"$(awk '/^### Roles are not in the dump/ { on = 1 } on && /^```/ { if (b) exit; b = 1; next } b { print }' "$top/docs/operations.md" |
		   grep -c '^pg_dumpall --globals-only -f globals.sql')|$(awk '/^### Restore/ { on = 1 } on && /^```/ { if (b) exit; b = 1; next } b { print }' "$top/docs/operations.md" |
		   grep -oE '^(psql -X -d postgres -f globals.sql|createdb|PGOPTIONS=.* pg_restore)' | sed 's/ .*//' | paste -sd' ' | grep -c '^psql createdb PGOPTIONS=')"
	# Without the source's globals (in cluster 3, a new one like this, with
	# the database pg_cron wants): the dump grants a view to a role the
	# cluster does not have; the restore fails as a whole, and the runner
	# host's login does not exist.
	if start_cluster 3 nodb; then
		use_cluster 3
		q -d postgres -c "CREATE DATABASE $DB" >/dev/null
		out=$(as_pg env PGOPTIONS='-c session_replication_role=replica' \
			"$PGBIN/pg_restore" -h "$CLUSTER_DIR" -p "$PORT" -U postgres -1 --exit-on-error -d "$DB" "$DUMP" 2>&1)
		rc=$?
		check "without the globals the restore fails, on the role a grant names" "1|1" \
			"$([ "$rc" -ne 0 ] && echo 1 || echo 0)|$(grep -c 'role "bkp_monitor" does not exist' <<<"$out")"
		[ "$rc" -ne 0 ] && grep -m 1 'ERROR' <<<"$out" | sed 's/^/#   /'
		check "... and leaves nothing behind, no role either" "0|0" \
			"$(q -c "SELECT count(*) FROM pg_extension WHERE extname = 'sandbox_ext'")|$(q -c "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'agent\_%' OR rolname LIKE 'bkp\_%'")"
		check "... and the runner host's login is refused" 1 \
			"$(login_q bkp_runner -c 'SELECT 1' 2>&1 | grep -c 'role "bkp_runner" does not exist')"
		# With the globals, a plain restore (triggers on) must still fail
		# as a whole, not half-apply, and for the reason docs/operations.md
		# gives: the rows CREATE EXTENSION wrote meet the dumped ones
		# (which replica mode replaces).  Into the database the extension
		# may be created in (sandbox.database; any other refuses CREATE
		# EXTENSION first, which would prove nothing), here, in a cluster
		# of its own (dropping it from cluster 2 would stop pg_cron there).
		as_pg "$PGBIN/psql" -X -q -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d postgres -f "$GLOBALS" >/dev/null 2>&1
		out=$(as_pg "$PGBIN/pg_restore" -h "$CLUSTER_DIR" -p "$PORT" -U postgres -1 --exit-on-error -d "$DB" "$DUMP" 2>&1)
		rc=$?
		check "a restore without replica mode fails, on the extension's own rows" "1|1" \
			"$([ "$rc" -ne 0 ] && echo 1 || echo 0)|$(grep -m 1 'ERROR' <<<"$out" | grep -c 'duplicate key value violates unique constraint "plans_pkey"')"
		[ "$rc" -ne 0 ] && grep -m 1 'ERROR' <<<"$out" | sed 's/^/#   /'
		check "and leaves nothing behind (one transaction)" 0 \
			"$(q -c "SELECT count(*) FROM pg_extension WHERE extname = 'sandbox_ext'")"
		stop_cluster 3
		use_cluster 2
	else
		nok "a cluster without the globals starts"
	fi
	# The globals first, as docs/operations.md says: the only errors are
	# for roles the cluster has (its bootstrap superuser).
	out=$(as_pg "$PGBIN/psql" -X -q -h "$CLUSTER_DIR" -p "$PORT" -U postgres -d postgres -f "$GLOBALS" 2>&1)
	check "psql -f globals.sql: no error but \"role postgres already exists\"" "" \
		"$(grep 'ERROR' <<<"$out" | grep -v 'role "postgres" already exists')"
	q -d postgres -c "CREATE DATABASE $DB" >/dev/null
	out=$(PGOPTIONS='-c session_replication_role=replica' as_pg env PGOPTIONS='-c session_replication_role=replica' \
		"$PGBIN/pg_restore" -h "$CLUSTER_DIR" -p "$PORT" -U postgres -1 --exit-on-error -d "$DB" "$DUMP" 2>&1)
	rc=$?
	check "pg_restore -1 in replica mode succeeds" 0 "$rc"
	[ "$rc" -eq 0 ] || echo "$out" | head -n 5 | sed 's/^/#   /'
}

t_compare() {
	local got d t
	got=$(q -c "$SRC_DIGEST_SQL")
	d=$(diff <(echo "$SRC_DIGEST") <(echo "$got") | grep '^[<>]')
	for t in $LIVE; do d=$(grep -v "^[<>] $t|" <<<"$d"); done
	check "every table is restored row for row${LIVE:+ (by row count only, changed during the dump: $LIVE)}" "" "$d"
	for t in $LIVE; do
		check "$t: as many rows" "$(grep "^$t|" <<<"$SRC_DIGEST" | cut -d'|' -f2)" "$(grep "^$t|" <<<"$got" | cut -d'|' -f2)"
	done
	check "tables compared" 1 "$([ "$(echo "$got" | wc -l)" -ge 20 ] && echo 1 || echo 0)"
	check "the sequences continue where they were" "$SRC_SEQ" "$(seq_values)"
	check "an operator's setting and plan price survive" "20 minutes|3" \
		"$(q -c "SELECT (SELECT value FROM agent.settings WHERE key = 'approval_timeout') || '|' || (SELECT credits_per_invocation FROM agent.plans WHERE plan = 'growth')")"
	check "the settings, plans and runtimes are there once each" "$SRC_ROWS" \
		"$(q -c "SELECT (SELECT count(*) FROM agent.settings) || '|' || (SELECT count(*) FROM agent.plans) || '|' || (SELECT count(*) FROM agent.runtimes)")"
	check "the maintenance jobs are there once each" 4 \
		"$(q -c "SELECT count(*) FROM cron.job WHERE jobname LIKE 'sandbox_ext_%'")"
	# pg_cron's rows name the server that scheduled them, as dumped; the
	# restored server's supervisor points them at it when it starts (it
	# waits for the extension, which the restore's commit brings).
	check "as dumped, they name the source server" 4 \
		"$(as_pg "$PGBIN/pg_restore" -a -t job -f - "$DUMP" | grep -cF "$(printf '\t%s\t%s\t' "$(cluster_dir 1)" "$(cluster_port 1)")")"
	if wait_for 30 "[ \"\$(q -c \"SELECT count(*) FROM cron.job WHERE jobname LIKE 'sandbox_ext_%' AND nodename = '$(cluster_dir 2)' AND nodeport = $(cluster_port 2)\")\" = 4 ]"; then
		ok "the restored server's supervisor points them at it when it starts"
	else
		nok "the restored server's supervisor points them at it when it starts" \
			"$(q -c "SELECT string_agg(nodename || ':' || nodeport, ' ') FROM cron.job WHERE jobname LIKE 'sandbox_ext_%'")"
	fi
	# (pg_cron's launcher has the same race, not ours: only our workers count)
	check "no worker of ours tried the database before it existed" 0 \
		"$(grep 'sandbox_ext' "$CLUSTER_DIR/server.log" | grep -c 'database "'"$DB"'" does not exist')"
	check "the starter said it was waiting for the database" 1 \
		"$(grep -c 'sandbox_ext is waiting for database "'"$DB"'" to be created' "$CLUSTER_DIR/server.log")"
}

# The post-restore step (docs/operations.md, "Restore"): the maintenance
# jobs run on this server, the runtimes are this host's.  The source is
# stopped first: a job still pointed at it fails to connect.  The jobs are
# put back as dumped (where a server whose supervisor is not running would
# have them), for the step to point them here.
t_after_restore() {
	local out node
	stop_cluster 1
	q -c "UPDATE cron.job SET nodename = '$(cluster_dir 1)', nodeport = $(cluster_port 1) WHERE jobname LIKE 'sandbox\_ext\_%'" >/dev/null
	T_REPOINT=$(q -c "SELECT clock_timestamp()")
	out=$(q -F ' ' -c "SELECT step, detail FROM agent.after_restore()" 2>&1)
	echo "$out" | sed 's/^/#   /'
	check "agent.after_restore() re-points the four jobs" 1 "$(grep -c '^cron_jobs 4 of 4 maintenance jobs re-pointed' <<<"$out")"
	check "every maintenance job now targets this server and database (schedule kept)" "4|$(cluster_dir 2)|$(cluster_port 2)|$DB|17 * * * *" \
		"$(q -c "SELECT count(*) || '|' || min(nodename) || '|' || max(nodeport) || '|' || min(database) || '|' || (SELECT schedule FROM cron.job WHERE jobname = 'sandbox_ext_prune_retention') FROM cron.job WHERE jobname LIKE 'sandbox_ext_%' AND nodename = '$(cluster_dir 2)' AND nodeport = $(cluster_port 2)")"
	check "run again, it has nothing to re-point" "0 of 4" \
		"$(q -c "SELECT substr(detail, 1, 6) FROM agent.after_restore() WHERE step = 'cron_jobs'")"
	node=$(/usr/bin/node -e "process.stdout.write(process.versions.node)")
	check "the runtimes are probed on this host (not the source's)" "$node" \
		"$(q -c "SELECT version FROM agent.runtimes WHERE language = 'node'")"
	check "it says whether the export needs a resync" 1 \
		"$(grep -cE '^export (not set up|the export slot)' <<<"$out")"
}

# The globals came with globals.sql: the runner host's login, with its
# password (a pg_hba.conf line makes this cluster ask for it), registers
# again as its restored runner; the backend's login reads its tenant's
# rows; the monitoring role reads its view.
t_globals_restored() {
	local org ws rest
	read -r org ws rest <<<"$A"
	as_pg sed -i "1i local all bkp_runner scram-sha-256" "$CLUSTER_DIR/data/pg_hba.conf"
	q -c "SELECT pg_reload_conf()" >/dev/null
	check "the runner host's login with a wrong password is refused" 1 \
		"$(PGPASSWORD=wrong login_q bkp_runner -c 'SELECT 1' 2>&1 | grep -c 'password authentication failed for user "bkp_runner"')"
	check "with its password it registers again, as its restored runner" "$RUNNER_ID|active" \
		"$(PGPASSWORD=bkp-runner-secret login_q bkp_runner -F '|' -c "SELECT runner_id, state FROM agent.runner_register('bkp-host', 'bkp', '1', 0)" 2>&1)"
	check "the backend's login reads its tenant's runs" \
		"$(q -c "SELECT count(*) FROM agent.invocations WHERE org_id = '$org' AND workspace_id = '$ws'")" \
		"$(login_q bkp_backend -c "BEGIN" -c "SELECT agent.set_tenant('$org', '$ws')" \
			-c "SELECT count(*) FROM agent.invocations" -c "COMMIT" 2>&1 | tail -n 1)"
	check "the monitoring role reads agent.runner_status" "$(q -c "SELECT count(*) FROM agent.runners")" \
		"$(login_q bkp_monitor -c "SELECT count(*) FROM agent.runner_status" 2>&1)"
	as_pg sed -i '1d' "$CLUSTER_DIR/data/pg_hba.conf"
	q -c "SELECT pg_reload_conf()" >/dev/null
}

t_restored_works() {
	local inv ev led
	check_invariants
	inv=$(run "$A" python 'print("after the restore")')
	check "a new run on the restored cluster succeeds and is charged" "succeeded|after the restore|2" \
		"$(field "$inv" state)|$(output "$inv")|$(field "$inv" credits_charged)"
	IFS='|' read -r ev led <<<"$SRC_MAX"
	check "its audit events and ledger rows follow the restored ones" 1 \
		"$(q -c "SELECT (min(e.id) > $ev AND (SELECT min(l.id) FROM agent.credit_ledger l WHERE l.invocation_id = '$inv') > $led)::int FROM agent.audit_events e WHERE e.invocation_id = '$inv'")"
	check "every chain still verifies" 0 \
		"$(q -c "SELECT count(*) FROM agent.orgs o, LATERAL agent.verify_audit_chain(o.id) v WHERE NOT v.ok")"
	check "balance equals the ledger sum after the new run" 0 \
		"$(q -c "SELECT count(*) FROM agent.credit_balances b WHERE b.balance <> (SELECT coalesce(sum(amount), 0) FROM agent.credit_ledger l WHERE l.org_id = b.org_id)")"
}

# A maintenance job runs on the restored cluster after the post-restore
# step (pg_cron 1.4 schedules by the minute: up to a minute's wait) and
# none of its runs since failed.
t_cron_runs_here() {
	local cond="[ \"\$(q -c \"SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname LIKE 'sandbox_ext_%' AND d.start_time > '$T_REPOINT' AND d.status = 'succeeded'\")\" -gt 0 ]"
	if wait_for 90 "$cond"; then ok "a maintenance job ran on the restored cluster and succeeded"; else
		nok "a maintenance job ran on the restored cluster and succeeded" \
			"$(q -c "SELECT string_agg(j.jobname || ': ' || d.status || ' ' || coalesce(d.return_message, ''), '; ') FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE d.start_time > '$T_REPOINT'")"
	fi
	check "none of their runs since the step failed" 0 \
		"$(q -c "SELECT count(*) FROM cron.job_run_details d JOIN cron.job j USING (jobid) WHERE j.jobname LIKE 'sandbox_ext_%' AND d.start_time > '$T_REPOINT' AND d.status <> 'succeeded' AND d.end_time IS NOT NULL")"
}

# The monitoring queries of docs/operations.md run (on the restored
# cluster); the first two ("what is running", "what is stuck") with two
# runs in flight, the second made to look started ten minutes ago (past its
# wall time of 120 s): it is listed first, and is the stuck one.
t_monitoring_queries() {
	local n=0 bad=0 block blocks=() X Y x y
	while IFS= read -r -d '' block; do
		n=$((n + 1))
		blocks+=("$block")
		if ! q -f - <<<"$block" >/dev/null 2>"$work_dir/mon.err"; then
			bad=$((bad + 1))
			echo "# query $n failed: $(head -c 300 "$work_dir/mon.err")"
		fi
	done < <(awk '/^## Monitoring/ { on = 1 } on && /^```sql/ { b = 1; next } b && /^```/ { b = 0; printf "%c", 0; next } b { print }' \
		"$top/docs/operations.md")
	check "the $n monitoring queries of docs/operations.md run" "1|0" "$([ "$n" -ge 5 ] && echo 1)|$bad"

	X=$(new_tenant 10)
	Y=$(new_tenant 10)
	x=$(start "$X" shell 'sleep 60' none 120)
	wait_state "$x" running 300
	y=$(start "$Y" shell 'sleep 60' none 120)
	wait_state "$y" running 300
	q -c "UPDATE agent.invocations SET started_at = now() - interval '10 minutes' WHERE id = '$y'" >/dev/null
	check "what is running: both, the longest running first" "$y,$x" \
		"$(q -F '|' -f - <<<"${blocks[0]}" | cut -d'|' -f1 | grep -E "^($x|$y)$" | paste -sd,)"
	# (every run in flight here is the local runner's: a tie on the runner
	# column leaves the order to the plan, so the sort key is checked too)
	check "what is running sorts by how long it has run" 1 \
		"$(q -c "CREATE TEMP VIEW mon_running AS $(sed 's/;[[:space:]]*$//' <<<"${blocks[0]}")" \
			 -c "SELECT pg_get_viewdef('pg_temp.mon_running'::regclass)" | tr -s ' \n' ' ' |
		   grep -ciE 'ORDER BY \(now\(\) - COALESCE\(i\.started_at, i\.provisioned_at\)\) DESC')"
	check "what is stuck: the one past its wall time, and why" "$y|running past its wall time: the runner lost track of it" \
		"$(q -F '|' -f - <<<"${blocks[1]}" | grep -E "^($x|$y)\|" | cut -d'|' -f1,4)"
	tq "${X%% *}" "$(cut -d' ' -f2 <<<"$X")" "SELECT agent.cancel('$x', 'requester');" >/dev/null
	tq "${Y%% *}" "$(cut -d' ' -f2 <<<"$Y")" "SELECT agent.cancel('$y', 'requester');" >/dev/null
	check "both end when cancelled" "cancelled|cancelled" "$(await "$X" "$x")|$(await "$Y" "$y")"
}

work_dir=$(mktemp -d /tmp/sandbox_backup.XXXXXX)
chmod 0777 "$work_dir"
trap 'stop_cluster 1; stop_cluster 2; stop_cluster 3; rm -rf "$work_dir"' EXIT
run_tests t_fill_source t_dump t_restore t_compare t_after_restore t_globals_restored t_restored_works t_monitoring_queries t_cron_runs_here
finish_suite
