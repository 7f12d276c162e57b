#!/usr/bin/env bash
# newserver: servers set up the way a new operator sets one up (issue 27,
# items 6 and 10): the README's postgresql.conf block as it is written, on
# servers that listen only on a Unix socket (listen_addresses = '', as
# scripts/cluster.sh starts them), with neither cron.host nor
# sandbox.jail_path in their configuration.
#
#   cluster 1  the block as written: pg_cron runs the maintenance jobs in
#              background workers
#   cluster 2  the block without cron.use_background_workers: pg_cron
#              connects through libpq, to where sandbox_ext points its jobs
#
# On both the jobs run and succeed and agent.worker_status() has no
# problem; on cluster 2 a job that cannot connect is reported (where it
# connects, as whom) until agent.schedule_maintenance() points it back.
# Cluster 1 runs the jail of its own bindir, not one fixed at compile
# time (checked against this build's bindir: with the system's PostgreSQL
# the two are the same place, and only a relocated copy, as
# scripts/private-pg.sh makes, tells them apart).  The warm pools are off
# (they cost memory and change nothing here).  pg_cron 1.4 runs jobs by
# the minute: the suite waits for minute boundaries, up to three.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
source "$top/test/lib.sh"

# The README's postgresql.conf block, for this suite's database.
readme_conf() {
	awk '/^`postgresql.conf`:/ { on = 1; next } on && /^```/ { if (b) exit; b = 1; next } b { print }' \
		"$top/README.md" | sed "s/'app_db'/'$DB'/g"
}

# cluster.sh without its cron.host and sandbox.jail_path lines, the
# README's block after its own settings (the later line wins).
start_new_server() {		# N conf
	SANDBOX_CRON_HOST='' SANDBOX_JAIL_PATH='' SANDBOX_EXTRA_CONF="$2
sandbox.warm_python = 0
sandbox.warm_node = 0" cluster_sh "$1" start >/dev/null
}

# "jobname:status" of each minutely job's newest finished run since $2
# (a timestamp), on the cluster in use.
job_runs_since() {
	q -c "SELECT string_agg(j.jobname || ':' || coalesce(d.status, 'none'), ',' ORDER BY j.jobname)
			FROM cron.job j
			LEFT JOIN LATERAL (SELECT d.status FROM cron.job_run_details d
								WHERE d.jobid = j.jobid AND d.status IN ('succeeded', 'failed')
								  AND coalesce(d.end_time, d.start_time, now()) > '$1'
								ORDER BY d.runid DESC LIMIT 1) d ON true
		   WHERE j.jobname LIKE 'sandbox\_ext\_%' AND j.schedule = '* * * * *'"
}
ALL_SUCCEEDED="sandbox_ext_expire_idle_sessions:succeeded,sandbox_ext_expire_pending_approvals:succeeded,sandbox_ext_reap_expired_leases:succeeded"

T0=

t_start() {
	local conf
	conf=$(readme_conf)
	check "the README has a postgresql.conf block with cron.use_background_workers" 1 \
		"$(grep -c '^cron.use_background_workers = on' <<<"$conf")"
	if ! start_new_server 1 "$conf" || ! start_new_server 2 "$(grep -v '^cron.use_background_workers' <<<"$conf")"; then
		nok "both servers start"
		finish_suite
	fi
	use_cluster 1
	T0=$(q -c "SELECT now()")
	check "server 1: no cron.host, background workers, no TCP" "localhost|on|" \
		"$(q -c "SELECT current_setting('cron.host') || '|' || current_setting('cron.use_background_workers') || '|' || current_setting('listen_addresses')")"
	use_cluster 2
	check "server 2: no cron.host, libpq, no TCP" "localhost|off|" \
		"$(q -c "SELECT current_setting('cron.host') || '|' || current_setting('cron.use_background_workers') || '|' || current_setting('listen_addresses')")"
	check "server 2's jobs connect to its socket" "4|$(cluster_dir 2)|$(cluster_port 2)" \
		"$(q -c "SELECT count(*) || '|' || min(nodename) || '|' || max(nodeport) FROM cron.job WHERE jobname LIKE 'sandbox\_ext\_%'")"
}

# Item 10: sandbox.jail_path defaults to the jail beside the server's own
# postgres, and the local runner's launcher runs that file.
t_jail_path() {
	local A inv pid
	use_cluster 1
	check "SHOW sandbox.jail_path: this build's bindir" "$PGBIN/sandbox-jail" "$(q -c "SHOW sandbox.jail_path")"
	A=$(new_tenant 10)
	inv=$(run "$A" shell 'echo jailed' none)
	check "a run succeeds" "succeeded|jailed" "$(field "$inv" state)|$(output "$inv")"
	pid=$(pgrep -o -u postgres -f -- "sandbox-jail --serve $CLUSTER_DIR/data/sandbox_runner/jail.sock")
	check "... through a launcher that is the bindir's sandbox-jail" "$(readlink -f "$PGBIN/sandbox-jail")" \
		"$([ -n "$pid" ] && readlink "/proc/$pid/exe")"
}

# Item 6: the minutely jobs run and succeed on both servers, and nothing is
# reported.
t_jobs_run() {
	local n
	for n in 1 2; do
		use_cluster "$n"
		if wait_for 150 '[ "$(job_runs_since "$T0")" = "$ALL_SUCCEEDED" ]'; then
			ok "server $n: every minutely maintenance job ran and succeeded"
		else
			nok "server $n: every minutely maintenance job ran and succeeded" \
				"$(job_runs_since "$T0"); problem: $(q -c "SELECT problem FROM agent.worker_status()")"
		fi
		check "server $n: worker_status() has no problem" "" "$(q -c "SELECT problem FROM agent.worker_status()")"
	done
}

# A job that cannot connect (pointed at a port nothing listens on, as
# after the server's port changed) is named in worker_status(), with where
# it connects; agent.schedule_maintenance() points it back and its next
# run succeeds.
t_failure_reported() {
	local since dead
	use_cluster 2
	dead=$(cluster_port 3)
	q -c "UPDATE cron.job SET nodeport = $dead WHERE jobname = 'sandbox_ext_reap_expired_leases'" >/dev/null
	since=$(q -c "SELECT now()")
	wait_for 90 '[ "$(job_runs_since "$since" | grep -o "reap_expired_leases:[a-z]*")" = reap_expired_leases:failed ]'
	check "worker_status() names the job that cannot connect, where and as whom" \
		"maintenance job sandbox_ext_reap_expired_leases failed: connection failed (pg_cron connects to host $CLUSTER_DIR port $dead as postgres; cron.use_background_workers = on needs no connection)" \
		"$(q -c "SELECT problem FROM agent.worker_status()")"
	check "agent.schedule_maintenance() points it at this server" \
		"scheduled sandbox_ext_expire_idle_sessions, sandbox_ext_expire_pending_approvals and sandbox_ext_reap_expired_leases (* * * * *), sandbox_ext_prune_retention (hourly), connecting to host $CLUSTER_DIR port $PORT" \
		"$(q -c "SELECT agent.schedule_maintenance()")"
	since=$(q -c "SELECT now()")
	wait_for 90 '[ "$(job_runs_since "$since" | grep -o "reap_expired_leases:[a-z]*")" = reap_expired_leases:succeeded ]'
	check "... its next run succeeds, and worker_status() has no problem again" "reap_expired_leases:succeeded|" \
		"$(job_runs_since "$since" | grep -o "reap_expired_leases:[a-z]*")|$(q -c "SELECT problem FROM agent.worker_status()")"
}

trap 'stop_cluster 1; stop_cluster 2' EXIT
run_tests t_start t_jail_path t_jobs_run t_failure_reported
finish_suite
