-- The maintenance jobs (pg_cron): scheduling them, where their tasks
-- connect, and whether they run.  docs/sessions.md ("Scheduling with
-- pg_cron") lists the jobs; docs/operations.md ("Maintenance jobs") says
-- where they connect and what agent.worker_status() reports of them.
--
-- Unless cron.use_background_workers is on, pg_cron runs a job through a
-- libpq connection to the host and port it stored with the job (cron.job
-- nodename and nodeport: cron.host, default "localhost", and the port of
-- the server that scheduled it).  A server that listens only on a Unix
-- socket (listen_addresses = '') refuses that connection, and a job that
-- cannot connect fails every minute without a word anywhere but
-- cron.job_run_details.  So the jobs are pointed at this server the way it
-- can be reached from its own host (agent._maintenance_host), when they
-- are scheduled, after a restore (agent.after_restore), by the upgrade to
-- 0.3.0 and at each start of the supervisor (agent._supervisor_recover,
-- 43_finish.sql); and agent.worker_status() reports a job whose last
-- run failed or that has stopped running (agent._maintenance_problem),
-- whatever the cause (pg_hba.conf, a password, a port changed since).  With
-- cron.use_background_workers on (the README's configuration) a job
-- connects to nothing.
--
-- cron.* exists only where pg_cron is installed: every statement that
-- names it is dynamic.

-- Where a maintenance job's task connects: cron.host when the operator set
-- it (anything but its default); else "localhost", pg_cron's own default,
-- when this server listens there (a wildcard or a loopback address in
-- listen_addresses: what worked before keeps working); else this server's
-- first Unix socket directory (it is always reachable there from its own
-- host; a socket takes the pg_hba.conf "local" lines, peer for the
-- server's OS user on Debian); else the first address it listens on.
CREATE FUNCTION agent._maintenance_host() RETURNS text
	LANGUAGE sql STABLE
	SET search_path = pg_catalog, pg_temp
AS $$
SELECT coalesce(
	(SELECT pg_catalog.current_setting('cron.host') FROM pg_catalog.pg_settings s
	  WHERE s.name = 'cron.host' AND s.source <> 'default'),
	(SELECT 'localhost'
	  WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest(pg_catalog.string_to_array(
											pg_catalog.current_setting('listen_addresses'), ',')) a
					 WHERE pg_catalog.btrim(a) IN ('*', '0.0.0.0', '::', 'localhost', '::1')
						OR pg_catalog.btrim(a) LIKE '127.%')),
	-- (entries are separated by commas and may be double-quoted)
	NULLIF(pg_catalog.btrim(pg_catalog.split_part(
		pg_catalog.current_setting('unix_socket_directories'), ',', 1), ' "'), ''),
	NULLIF(pg_catalog.btrim(pg_catalog.split_part(pg_catalog.current_setting('listen_addresses'), ',', 1)), ''),
	'localhost')
$$;

-- Point the maintenance jobs (sandbox_ext_*) at this server: the host of
-- agent._maintenance_host(), this server's port and this database.  Their
-- schedule, command, user and active flag (an operator's choices) are
-- kept.  pg_cron's cache trigger on cron.job is a statement trigger: the
-- UPDATE makes its launcher read the jobs again even when no row changes
-- (agent._supervisor_recover counts on it).  moved: how many changed;
-- jobs: how many there are (NULL: pg_cron is not installed here).
CREATE FUNCTION agent._point_maintenance_jobs(OUT moved integer, OUT jobs integer,
											  OUT host text, OUT port integer)
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
BEGIN
	host := agent._maintenance_host();
	port := pg_catalog.current_setting('port')::integer;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension x WHERE x.extname = 'pg_cron') THEN
		RETURN;
	END IF;
	EXECUTE $sql$WITH u AS (
					 UPDATE cron.job j SET nodename = $1, nodeport = $2, database = $3
					  WHERE j.jobname LIKE 'sandbox\_ext\_%'
						AND (j.nodename, j.nodeport, j.database) IS DISTINCT FROM ($1, $2, $3)
					 RETURNING 1)
				 SELECT (SELECT count(*)::integer FROM u),
						(SELECT count(*)::integer FROM cron.job j WHERE j.jobname LIKE 'sandbox\_ext\_%')$sql$
		INTO moved, jobs
		USING host, port, pg_catalog.current_database()::text;
END
$$;

-- The longest a cron schedule may leave between two runs, or NULL when it
-- is not one this function can bound (days of the month or week, months,
-- @reboot).  An upper bound, not the exact period: "17 * * * *" and
-- "0,30 * * * *" both give an hour.  Also pg_cron 1.5's "N seconds".
CREATE FUNCTION agent._cron_period(schedule text) RETURNS interval
	LANGUAGE plpgsql IMMUTABLE
	SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	f	text[] := pg_catalog.regexp_split_to_array(pg_catalog.btrim(coalesce(schedule, '')), '\s+');
BEGIN
	IF schedule ~ '^\s*[0-9]{1,2}\s+seconds?\s*$' THEN
		RETURN pg_catalog.make_interval(secs => pg_catalog.substring(schedule, '[0-9]+')::integer);
	END IF;
	CASE f[1]
		WHEN '@hourly' THEN RETURN interval '1 hour';
		WHEN '@daily', '@midnight' THEN RETURN interval '1 day';
		WHEN '@weekly' THEN RETURN interval '7 days';
		WHEN '@monthly' THEN RETURN interval '31 days';
		WHEN '@yearly', '@annually' THEN RETURN interval '366 days';
		ELSE NULL;
	END CASE;
	IF pg_catalog.array_length(f, 1) <> 5 OR f[3] <> '*' OR f[4] <> '*' OR f[5] <> '*' THEN
		RETURN NULL;
	END IF;
	IF f[2] = '*' THEN
		IF f[1] = '*' THEN
			RETURN interval '1 minute';
		ELSIF f[1] ~ '^\*/[0-9]{1,2}$' THEN
			RETURN pg_catalog.make_interval(mins => pg_catalog.substr(f[1], 3)::integer);
		END IF;
		RETURN interval '1 hour';
	ELSIF f[2] ~ '^\*/[0-9]{1,2}$' THEN
		RETURN pg_catalog.make_interval(hours => pg_catalog.substr(f[2], 3)::integer);
	END IF;
	RETURN interval '1 day';
END
$$;

-- What is wrong with the maintenance jobs, for agent.worker_status()
-- (NULL: nothing seen; also without pg_cron in this database):
--   * pg_cron's launcher is not running: no job runs at all;
--   * the last finished run of an active job failed (its message; for a
--     connection that failed, where pg_cron connects and as whom): a run
--     pg_cron marked "server restarted" says nothing of the job and is
--     passed over;
--   * an active job that has run before has not started for two of its
--     periods (agent._cron_period), counted from the later of its last
--     start and this server's start;
--   * no active job has a run on record two of the shortest period after
--     the latest of this server's start, pg_cron's launcher's and the
--     supervisor's (a job's row has no time of its own: right after a
--     CREATE EXTENSION on a server up for longer, this may show until the
--     first minute's runs).
-- cron.job_run_details is read from its newest rows (its primary key,
-- runid, grows with each run), so a long log costs little.  With
-- cron.log_run off pg_cron records no run: then only the launcher is
-- checked.  as_of is for tests.
CREATE FUNCTION agent._maintenance_problem(as_of timestamptz DEFAULT now()) RETURNS text
	LANGUAGE plpgsql STABLE
	SET search_path = pg_catalog, agent, pg_temp
AS $$
DECLARE
	v_launcher	timestamptz;
	v_problem	text;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension x WHERE x.extname = 'pg_cron') THEN
		RETURN NULL;
	END IF;
	SELECT min(a.backend_start) INTO v_launcher
	  FROM pg_catalog.pg_stat_activity a WHERE a.backend_type = 'pg_cron launcher';
	IF v_launcher IS NULL THEN
		RETURN 'pg_cron''s launcher is not running: no maintenance job runs (pg_cron must be in shared_preload_libraries)';
	END IF;
	IF coalesce(pg_catalog.current_setting('cron.log_run', true), 'on') <> 'on' THEN
		RETURN NULL;
	END IF;
	EXECUTE $sql$
		WITH j AS (
			SELECT j.jobname, j.schedule, agent._cron_period(j.schedule) AS period, l.status,
				   coalesce(l.return_message, '(no message)') AS message,
				   CASE WHEN l.return_message = 'connection failed' AND NOT $2
						THEN pg_catalog.format(' (pg_cron connects to host %s port %s as %s; cron.use_background_workers = on needs no connection)',
											   j.nodename, j.nodeport, j.username)
						ELSE '' END AS how,
				   (SELECT d.start_time FROM cron.job_run_details d
					 WHERE d.jobid = j.jobid AND d.start_time IS NOT NULL
					 ORDER BY d.runid DESC LIMIT 1) AS started,
				   EXISTS (SELECT 1 FROM cron.job_run_details d WHERE d.jobid = j.jobid) AS ran
			  FROM cron.job j
			  LEFT JOIN LATERAL (SELECT d.status, d.return_message FROM cron.job_run_details d
								  WHERE d.jobid = j.jobid AND d.status IN ('succeeded', 'failed')
									AND d.return_message IS DISTINCT FROM 'server restarted'
								  ORDER BY d.runid DESC LIMIT 1) l ON true
			 WHERE j.jobname LIKE 'sandbox\_ext\_%' AND j.active
			   AND j.database = pg_catalog.current_database()),
		p (problem) AS (
			SELECT pg_catalog.format('%s %s failed: %s%s',
									 CASE WHEN count(*) = 1 THEN 'maintenance job' ELSE 'maintenance jobs' END,
									 pg_catalog.string_agg(j.jobname, ', ' ORDER BY j.jobname), j.message, j.how)
			  FROM j WHERE j.status = 'failed'
			 GROUP BY j.message, j.how
			UNION ALL
			SELECT pg_catalog.format('maintenance job %s has not run since %s (schedule %s)',
									 j.jobname, j.started, j.schedule)
			  FROM j
			 WHERE j.status IS DISTINCT FROM 'failed' AND j.started IS NOT NULL AND j.period IS NOT NULL
			   AND greatest(j.started, pg_catalog.pg_postmaster_start_time()) < $1 - 2 * j.period
			UNION ALL
			SELECT pg_catalog.format('no maintenance job has run since %s: SELECT agent.schedule_maintenance() makes pg_cron read them again', $3)
			 WHERE NOT EXISTS (SELECT 1 FROM j WHERE j.ran)
			   AND $3 < $1 - 2 * (SELECT min(j.period) FROM j))
		SELECT pg_catalog.string_agg(p.problem, '; ' ORDER BY p.problem) FROM p$sql$
		INTO v_problem
		USING as_of, coalesce(pg_catalog.current_setting('cron.use_background_workers', true), 'off') = 'on',
			  greatest(pg_catalog.pg_postmaster_start_time(), v_launcher, (agent._supervisor_status()).started_at);
	RETURN v_problem;
END
$$;

-- Schedule the maintenance jobs with pg_cron when it is installed here,
-- and point them at this server (agent._point_maintenance_jobs).
CREATE FUNCTION agent.schedule_maintenance(schedule text DEFAULT '* * * * *')
	RETURNS text
	LANGUAGE plpgsql VOLATILE
	SET search_path = pg_catalog, agent
AS $$
DECLARE
	p	record;
BEGIN
	IF schedule IS NULL THEN
		RAISE EXCEPTION 'schedule must not be null'
			USING ERRCODE = 'null_value_not_allowed',
				  HINT = 'Pass a cron schedule such as ''* * * * *'', or call agent.schedule_maintenance() for the default.';
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron') THEN
		RETURN 'pg_cron is not installed in this database; see docs/sessions.md to schedule '
			   'agent.expire_idle_sessions(), agent.expire_pending_approvals() and '
			   'agent.reap_expired_leases() from elsewhere';
	END IF;
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_expire_idle_sessions', schedule,
				   'SELECT agent.expire_idle_sessions()');
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_expire_pending_approvals', schedule,
				   'SELECT agent.expire_pending_approvals()');
	-- A backstop: the supervisor reaps every few seconds (docs/runners.md).
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_reap_expired_leases', schedule,
				   'SELECT agent.reap_expired_leases()');
	-- Hourly, whatever the schedule above (70_retention.sql).
	EXECUTE format('SELECT cron.schedule(%L, %L, %L)', 'sandbox_ext_prune_retention', '17 * * * *',
				   'CALL agent.prune_retention()');
	-- (cron.schedule keeps the host and port a job had: a job scheduled
	-- before, or restored, is pointed here too)
	SELECT * INTO p FROM agent._point_maintenance_jobs();
	RETURN 'scheduled sandbox_ext_expire_idle_sessions, sandbox_ext_expire_pending_approvals and '
		   'sandbox_ext_reap_expired_leases (' || schedule || '), sandbox_ext_prune_retention (hourly)'
		   || CASE WHEN coalesce(current_setting('cron.use_background_workers', true), 'off') = 'on'
				   THEN ', run in background workers'
				   ELSE format(', connecting to host %s port %s', p.host, p.port) END;
END
$$;
COMMENT ON FUNCTION agent.schedule_maintenance(text) IS
	'schedule agent.expire_idle_sessions(), agent.expire_pending_approvals(), agent.reap_expired_leases() and agent.prune_retention() with pg_cron, connecting to this server (idempotent)';

REVOKE ALL ON FUNCTION agent._maintenance_host(), agent._point_maintenance_jobs(),
	agent._cron_period(text), agent._maintenance_problem(timestamptz) FROM PUBLIC;

-- Not while a dump is restored (session_replication_role = replica): the
-- dump of cron.job brings the jobs back (98_backup.sql).
SELECT agent.schedule_maintenance() WHERE pg_catalog.current_setting('session_replication_role') <> 'replica';
