/*-------------------------------------------------------------------------
 *
 * supervisor.c
 *		The supervisor: the background worker that keeps the database's
 *		side of running sandboxes.  It runs no sandbox itself: every run is
 *		run by a sandbox-runner (src/runner/, docs/runners.md), and this
 *		worker starts and watches the one on the database host.
 *
 *	the local runner	started as our child (`sandbox-runner --local`,
 *						posix_spawn, a process group of its own), restarted
 *						with backoff when it dies, stopped on SIGTERM; its
 *						settings are the sandbox.* GUCs, written as its
 *						configuration file and re-read on SIGHUP
 *	staged results		results a runner staged behind a lock a backend
 *						holds are applied here (agent._finish_pending)
 *	leases				every few seconds, the invocations whose runner
 *						stopped renewing its lease are ended by the billing
 *						rule (agent.reap_expired_leases; pg_cron does it
 *						too, as a backstop)
 *	worker_status()		what the local runner's slots run, its work
 *						directory and why it claims nothing, in shared
 *						memory
 *
 * The local runner registers like any other (agent.runner_register, as
 * role sandbox_runner_local): its registration ends what its previous
 * process still held.  Wake-ups reach every runner as NOTIFY at commit;
 * when we apply a staged result or reap a lease, which may make a run
 * claimable (the next of a conversation, a freed org slot), we notify them
 * in the same transaction.
 *
 * One worker, registered from _PG_init when the library is preloaded,
 * connected to sandbox.database.  The untrusted workspaces (their scans,
 * copies and deletes) and the jail's lifecycle live in the runner's
 * address space, not the server's: a crash there restarts one runner, not
 * the cluster.  The runner's link is src/runner/local_link.h.
 *
 * On SIGTERM we stop the runner (it kills its jails) and exit with status
 * 1 so the postmaster restarts us (unless it is itself shutting down); our
 * next start resolves what was in flight.  If we die any other way the
 * runner sees EOF on its link and its parent-death signal, and stops.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

#include "runner/local_link.h"
#include "sandbox_ext.h"

PGDLLEXPORT void sandbox_supervisor_main(Datum main_arg);

/* Slow poll: a backstop for a lost wake-up, not the way work is found. */
#define IDLE_POLL_MS		10000
/* How often results staged behind a held lock are tried again. */
#define PENDING_RETRY_MS	1000
/* How often expired leases are reaped (and staged results looked for). */
#define REAP_INTERVAL_MS	5000
/* A runner that dies is started again after this, doubled up to the max. */
#define RESTART_MIN_MS		1000
#define RESTART_MAX_MS		30000
/* A runner that lived this long was healthy: its next restart is quick. */
#define RESTART_HEALTHY_MS	60000
/* How long a runner asked to stop may take before it is killed. */
#define STOP_GRACE_MS		5000
/*
 * Backstop for every lock the supervisor's transactions take: the SQL steps
 * skip or refuse (NOWAIT) the locks a backend can hold, so a wait this long
 * means a lock nobody foresaw, and the step is retried rather than stall
 * every tenant behind it.
 */
#define SUPERVISOR_LOCK_TIMEOUT "500ms"

/* The local runner. */
static pid_t runner_pid = 0;
static int	runner_pidfd = -1;
static int	link_sock = -1;			/* our end of its link */
static TimestampTz runner_started_at = 0;
static TimestampTz restart_at = 0;
static int	restart_backoff_ms = RESTART_MIN_MS;
static char runner_dir[MAXPGPATH];	/* <data>/sandbox_runner: its config, the launcher's socket */
static char runner_conf_path[MAXPGPATH];
static char runner_problem[256];	/* why the local runner is not running, or "" */

static bool results_pending = true;
static TimestampTz pending_retry_at = 0;
static TimestampTz next_reap = 0;

/* ----------------------------------------------------------------
 * Shared memory: what worker_status() shows
 * ----------------------------------------------------------------
 */

/* The local runner has no run (it stopped, or it is not started yet). */
static void
publish_no_runs(void)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->slots_in_use = 0;
	for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
		sandbox_shared->slots[i].in_use = false;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
publish_problem(const char *problem)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	strlcpy(sandbox_shared->problem, problem ? problem : "", sizeof(sandbox_shared->problem));
	SpinLockRelease(&sandbox_shared->mutex);
}

/* A status message of the runner (local_link.h): fields after its kind. */
static void
publish_status(const char *const *field, int nfields)
{
	pg_uuid_t	ids[SANDBOX_MAX_SLOTS];
	int			n = 0;

	if (nfields < LINK_STATUS_FIRST_RUN)
		return;
	for (int f = LINK_STATUS_FIRST_RUN; f < nfields && n < SANDBOX_MAX_SLOTS; f++)
	{
		const char *id = field[f];
		int			b = 0;

		if (strlen(id) != 36)
			continue;			/* not ours to complain about: skipped */
		for (int k = 0; k < 36 && b < UUID_LEN; k++)
		{
			char		pair[3] = {id[k], id[k + 1], '\0'};
			char	   *end;
			long		v;

			if (id[k] == '-')
				continue;
			v = strtol(pair, &end, 16);
			if (*end != '\0')
				break;
			ids[n].data[b++] = (unsigned char) v;
			k++;
		}
		if (b != UUID_LEN)
			continue;
		n++;
	}
	SpinLockAcquire(&sandbox_shared->mutex);
	for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
	{
		sandbox_shared->slots[i].in_use = i < n;
		if (i < n)
			sandbox_shared->slots[i].invocation_id = ids[i];
	}
	sandbox_shared->slots_in_use = atoi(field[LINK_STATUS_IN_USE]);
	strlcpy(sandbox_shared->work_dir, field[LINK_STATUS_WORK_DIR], sizeof(sandbox_shared->work_dir));
	strlcpy(sandbox_shared->problem, field[LINK_STATUS_PROBLEM][0] ? field[LINK_STATUS_PROBLEM]
			: runner_problem, sizeof(sandbox_shared->problem));
	SpinLockRelease(&sandbox_shared->mutex);
}

/* ----------------------------------------------------------------
 * The local runner's configuration
 * ----------------------------------------------------------------
 */

/*
 * The work directory as an absolute path: the jail resolves the paths it
 * is given after changing directory.  Empty sandbox.work_dir (the default)
 * is SANDBOX_DEFAULT_WORK_BASE/<system identifier>, so that several
 * clusters of one host share the mount without sharing directories; a
 * relative one is relative to the data directory.
 */
static const char *
work_root(void)
{
	static char path[MAXPGPATH];

	if (sandbox_work_dir[0] == '\0')
		snprintf(path, sizeof(path), "%s/" UINT64_FORMAT, SANDBOX_DEFAULT_WORK_BASE,
				 GetSystemIdentifier());
	else if (is_absolute_path(sandbox_work_dir))
		strlcpy(path, sandbox_work_dir, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s/%s", DataDir, sandbox_work_dir);
	return path;
}

/* A value quoted for the runner's configuration file ('' for a quote). */
static void
append_quoted(StringInfo buf, const char *s)
{
	appendStringInfoChar(buf, '\'');
	for (; *s; s++)
	{
		if (*s == '\'')
			appendStringInfoChar(buf, '\'');
		if (*s != '\n' && *s != '\r')
			appendStringInfoChar(buf, *s);
	}
	appendStringInfoChar(buf, '\'');
}

/* A conninfo value quoted for libpq ('...' with \ and ' escaped). */
static void
append_conninfo_value(StringInfo buf, const char *s)
{
	appendStringInfoChar(buf, '\'');
	for (; *s; s++)
	{
		if (*s == '\'' || *s == '\\')
			appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, *s);
	}
	appendStringInfoChar(buf, '\'');
}

/*
 * How the local runner connects back: sandbox.local_runner_conninfo, or
 * the server's first unix socket directory, its port and sandbox.database,
 * as libpq's default user (the server's OS user: peer or trust).
 */
static char *
local_conninfo(void)
{
	StringInfoData buf;
	char	   *dirs;
	List	   *list = NIL;

	if (sandbox_local_runner_conninfo && sandbox_local_runner_conninfo[0])
		return pstrdup(sandbox_local_runner_conninfo);
	initStringInfo(&buf);
	dirs = pstrdup(Unix_socket_directories ? Unix_socket_directories : "");
	appendStringInfoString(&buf, "host=");
	if (SplitDirectoriesString(dirs, ',', &list) && list != NIL &&
		((char *) linitial(list))[0] == '/')
		append_conninfo_value(&buf, (char *) linitial(list));
	else
		appendStringInfoString(&buf, "localhost");
	appendStringInfo(&buf, " port=%d dbname=", PostPortNumber);
	append_conninfo_value(&buf, sandbox_database);
	return buf.data;
}

/*
 * Write the local runner's configuration from the sandbox.* settings:
 * the same file, and the same names, as a remote runner's (written to a
 * temporary file and renamed, so the runner never reads half of it).
 */
static bool
write_runner_config(void)
{
	StringInfoData buf;
	char		tmp[MAXPGPATH];
	int			fd;
	bool		ok;

	initStringInfo(&buf);
	appendStringInfoString(&buf,
						   "# Written by the sandbox_ext supervisor from the sandbox.* settings\n"
						   "# (rewritten on every reload): do not edit.\n");
	appendStringInfoString(&buf, "conninfo = ");
	append_quoted(&buf, local_conninfo());
	appendStringInfo(&buf, "\nname = '%s'\nslots = %d\nwork_dir = ", LINK_RUNNER_NAME,
					 sandbox_max_concurrent_runs);
	append_quoted(&buf, work_root());
	appendStringInfoString(&buf, "\nrun_dir = ");
	append_quoted(&buf, runner_dir);
	appendStringInfoString(&buf, "\njail_path = ");
	append_quoted(&buf, sandbox_jail_path);
	appendStringInfo(&buf, "\njail_launcher = %s\nrequire_cgroup = %s\n",
					 sandbox_jail_launcher ? "on" : "off", sandbox_require_cgroup ? "on" : "off");
	appendStringInfo(&buf,
					 "workspace_size = %dMB\nworkspace_entries = %d\noutput_limit = %dkB\n"
					 "default_wall_time = %ds\nmax_wall_time = %ds\ndefault_memory = %dMB\n"
					 "max_memory = %dMB\ndefault_pids = %d\nstart_report_delay = %dms\n",
					 sandbox_workspace_size_mb, sandbox_workspace_entries, sandbox_output_limit_kb,
					 sandbox_default_wall_time_s, sandbox_max_wall_time_s,
					 sandbox_default_memory_mb, sandbox_max_memory_mb, sandbox_default_pids,
					 sandbox_start_report_delay_ms);
	appendStringInfo(&buf, "warm_python = %d\nwarm_node = %d\nwarm_memory = %dMB\nwarm_modules = ",
					 sandbox_warm_python, sandbox_warm_node, sandbox_warm_memory_mb);
	append_quoted(&buf, sandbox_warm_modules ? sandbox_warm_modules : "");
	appendStringInfoString(&buf, "\n");
	appendStringInfoString(&buf, "egress_resolver = ");
	append_quoted(&buf, sandbox_egress_resolver ? sandbox_egress_resolver : "");
	appendStringInfoString(&buf, "\negress_ca_file = ");
	append_quoted(&buf, sandbox_egress_ca_file ? sandbox_egress_ca_file : "");
	appendStringInfoChar(&buf, '\n');
	/* no run may fill the disk the database writes to */
	if (!sandbox_work_dir_on_data_fs)
	{
		StringInfoData paths;

		initStringInfo(&paths);
		appendStringInfo(&paths, "%s:%s/pg_wal", DataDir, DataDir);
		appendStringInfoString(&buf, "protect = ");
		append_quoted(&buf, paths.data);
		appendStringInfoChar(&buf, '\n');
	}

	(void) mkdir(runner_dir, S_IRWXU);
	snprintf(tmp, sizeof(tmp), "%s.tmp", runner_conf_path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);
	ok = fd >= 0 && write(fd, buf.data, buf.len) == buf.len;
	if (fd >= 0 && close(fd) != 0)
		ok = false;
	if (ok && rename(tmp, runner_conf_path) != 0)
		ok = false;
	if (!ok)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not write the local runner's configuration \"%s\": %m",
						runner_conf_path)));
	pfree(buf.data);
	/* what worker_status() shows until the runner reports */
	SpinLockAcquire(&sandbox_shared->mutex);
	strlcpy(sandbox_shared->work_dir, work_root(), sizeof(sandbox_shared->work_dir));
	SpinLockRelease(&sandbox_shared->mutex);
	return ok;
}

/* ----------------------------------------------------------------
 * The local runner's process
 * ----------------------------------------------------------------
 */

static void
close_link(void)
{
	if (link_sock >= 0)
		close(link_sock);
	link_sock = -1;
}

/*
 * Start the local runner: posix_spawn (the address space of a PostgreSQL
 * process is never copied), stdin /dev/null, our stdout and stderr (the
 * server's log), its end of the link as LINK_RUNNER_FD and nothing else,
 * default signal dispositions, and a process group of its own:
 * pg_terminate_backend() and pg_cancel_backend() signal a backend's whole
 * group, and a cancel of the supervisor must not reach the runner.
 */
static void
runner_start(void)
{
	char		path[MAXPGPATH];
	char		parent[32];
	char	   *argv[] = {path, "--local", "--config", runner_conf_path, NULL};
	char	   *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", parent, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t	all,
				none;
	int			sv[2];
	int			rc;

	strlcpy(path, my_exec_path, sizeof(path));
	get_parent_directory(path);
	strlcat(path, "/sandbox-runner", sizeof(path));
	snprintf(parent, sizeof(parent), "SANDBOX_RUNNER_PARENT=%d", (int) MyProcPid);

	if (!write_runner_config())
	{
		snprintf(runner_problem, sizeof(runner_problem),
				 "could not write the local runner's configuration \"%s\"", runner_conf_path);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
	{
		snprintf(runner_problem, sizeof(runner_problem), "could not create the runner's link: %m");
		return;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, sv[1], LINK_RUNNER_FD);
	posix_spawn_file_actions_addclosefrom_np(&fa, LINK_RUNNER_FD + 1);
	posix_spawnattr_init(&attr);
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
							 POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_USEVFORK);
	rc = posix_spawn(&runner_pid, path, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	close(sv[1]);
	if (rc != 0)
	{
		errno = rc;
		snprintf(runner_problem, sizeof(runner_problem),
				 "could not start the local runner \"%s\": %m", path);
		ereport(WARNING, (errmsg("%s", runner_problem),
						  errhint("make install puts sandbox-runner next to postgres.")));
		close(sv[0]);
		runner_pid = 0;
		return;
	}
	link_sock = sv[0];
	(void) fcntl(link_sock, F_SETFL, O_NONBLOCK);
	runner_pidfd = pidfd_open(runner_pid, 0);
	runner_started_at = GetCurrentTimestamp();
	runner_problem[0] = '\0';
	publish_problem(NULL);
	elog(LOG, "local sandbox runner started (pid %d, configuration \"%s\")",
		 (int) runner_pid, runner_conf_path);
}

/* The runner exited (or is being stopped): reap it, schedule a restart. */
static void
runner_reaped(int status)
{
	bool		healthy = TimestampDifferenceExceeds(runner_started_at, GetCurrentTimestamp(),
													 RESTART_HEALTHY_MS);

	if (WIFSIGNALED(status))
		elog(LOG, "local sandbox runner (pid %d) was killed by signal %d",
			 (int) runner_pid, WTERMSIG(status));
	else
		elog(LOG, "local sandbox runner (pid %d) exited with status %d",
			 (int) runner_pid, WEXITSTATUS(status));
	runner_pid = 0;
	if (runner_pidfd >= 0)
		close(runner_pidfd);
	runner_pidfd = -1;
	close_link();
	publish_no_runs();
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
	if (healthy)
		restart_backoff_ms = RESTART_MIN_MS;
	restart_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), restart_backoff_ms);
	restart_backoff_ms = Min(restart_backoff_ms * 2, RESTART_MAX_MS);
}

/* Has the runner exited?  Reaps it if so. */
static void
runner_check_exit(void)
{
	int			status;

	if (runner_pid > 0 && waitpid(runner_pid, &status, WNOHANG) == runner_pid)
		runner_reaped(status);
}

/*
 * Stop the runner: SIGTERM (it kills its jails and exits), then SIGKILL if
 * it does not go within STOP_GRACE_MS.  Its jails die with it either way
 * (PR_SET_PDEATHSIG).
 */
static void
runner_stop(void)
{
	int			status = 0;

	if (runner_pid <= 0)
		return;
	(void) kill(runner_pid, SIGTERM);
	for (int i = 0; i < STOP_GRACE_MS / 10; i++)
	{
		if (waitpid(runner_pid, &status, WNOHANG) == runner_pid)
		{
			runner_reaped(status);
			return;
		}
		pg_usleep(10000L);
	}
	(void) kill(runner_pid, SIGKILL);
	(void) waitpid(runner_pid, &status, 0);
	runner_reaped(status);
}

/* Read what the runner reported (local_link.h). */
static void
link_read(void)
{
	static char buf[LINK_MAX + 1];

	for (;;)
	{
		ssize_t		r = recv(link_sock, buf, LINK_MAX, MSG_DONTWAIT);
		const char *field[LINK_STATUS_FIRST_RUN + SANDBOX_MAX_SLOTS + 1];
		int			nfields = 0;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
		{
			if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
				close_link();	/* it is exiting: its pidfd tells when */
			return;
		}
		buf[r] = '\0';
		if (strcmp(buf, LINK_STAGED) == 0)
		{
			results_pending = true;
			pending_retry_at = 0;
		}
		else if (strcmp(buf, LINK_STATUS) == 0)
		{
			for (const char *p = buf + strlen(buf) + 1; p < buf + r && nfields < lengthof(field);
				 p += strlen(p) + 1)
				field[nfields++] = p;
			publish_status(field, nfields);
		}
	}
}

/* ----------------------------------------------------------------
 * The supervisor's own steps
 * ----------------------------------------------------------------
 */

/*
 * Resolve what an in-database supervisor of an older version left in
 * flight (rows without a runner; a runner's rows end with its lease or its
 * next registration).  On failure the worker exits and is restarted.
 */
static void
step_recover(void)
{
	PG_TRY();
	{
		int			rc;

		sandbox_xact_begin("recovering invocations left by a previous supervisor");
		rc = SPI_execute("SELECT agent._supervisor_recover()", false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._supervisor_recover failed: %s", SPI_result_code_string(rc));
		sandbox_xact_commit();
		/* what stayed staged behind a lock is applied from the loop */
		results_pending = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "recovering invocations");
		proc_exit(1);
	}
	PG_END_TRY();
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

/*
 * Apply results staged behind a lock held elsewhere, at most 32 (so that a
 * tenant holding many locks cannot make one turn of the loop long).  When
 * any was applied, the local runner is told: the next run of that
 * conversation may be claimable now.
 */
static void
step_finish_pending(void)
{
	int			before = -1;
	int			left = -1;

	PG_TRY();
	{
		bool		isnull;
		Datum		d;

		sandbox_xact_begin("applying staged results");
		/* (0: apply none, only count them) */
		if (SPI_execute("SELECT agent._finish_pending(0)", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent._finish_pending failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		before = isnull ? 0 : DatumGetInt32(d);
		left = before;
		if (before > 0)
		{
			if (SPI_execute("SELECT agent._finish_pending(32)", false, 1) != SPI_OK_SELECT ||
				SPI_processed != 1)
				elog(ERROR, "agent._finish_pending failed");
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
			left = isnull ? 0 : DatumGetInt32(d);
		}
		/* what ended may make a run claimable: runners look at commit */
		if (left < before && SPI_execute("SELECT agent._wake_supervisor()", false, 1) != SPI_OK_SELECT)
			elog(ERROR, "agent._wake_supervisor failed");
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "applying staged results");
		before = left = -1;
	}
	PG_END_TRY();
	if (left >= 0)
		results_pending = left > 0;
}

/*
 * End the invocations whose runner stopped renewing its lease (the runner
 * died, its host is gone, its network is cut): agent.reap_expired_leases,
 * by the billing rule, audited.  Runners are told at commit when any
 * ended (their org's slots are free again).
 */
static void
step_reap_leases(void)
{
	PG_TRY();
	{
		bool		isnull;
		Datum		d;
		int			n;

		sandbox_xact_begin("reaping expired runner leases");
		if (SPI_execute("SELECT agent.reap_expired_leases()", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent.reap_expired_leases failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		n = isnull ? 0 : DatumGetInt32(d);
		if (n > 0 && SPI_execute("SELECT agent._wake_supervisor()", false, 1) != SPI_OK_SELECT)
			elog(ERROR, "agent._wake_supervisor failed");
		sandbox_xact_commit();
		if (n > 0)
			results_pending = true;	/* some may be staged behind a lock */
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "reaping expired runner leases");
	}
	PG_END_TRY();
}

/* ----------------------------------------------------------------
 * Start-up and shutdown
 * ----------------------------------------------------------------
 */

static void
supervisor_shmem_exit(int code, Datum arg)
{
	runner_stop();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = 0;
	sandbox_shared->slots_in_use = 0;
	for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
		sandbox_shared->slots[i].in_use = false;
	SpinLockRelease(&sandbox_shared->mutex);
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

static void
handle_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
	if (ShutdownRequestPending)
	{
		elog(LOG, "supervisor shutting down; stopping the local runner");
		proc_exit(1);
	}
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		if (!sandbox_local_runner)
		{
			if (runner_pid > 0)
				elog(LOG, "sandbox.local_runner is off: stopping the local runner");
			runner_stop();
			snprintf(runner_problem, sizeof(runner_problem),
					 "sandbox.local_runner is off: no sandbox runs on this host");
			publish_problem(runner_problem);
		}
		else if (runner_pid > 0 && write_runner_config())
			(void) kill(runner_pid, SIGHUP);
		else if (runner_pid <= 0)
			restart_at = 0;		/* a setting may have fixed what kept it from starting */
	}
}

static bool
extension_installed(void)
{
	bool		found = false;

	sandbox_xact_begin("checking for the extension");
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'sandbox_ext'",
					true, 1) == SPI_OK_SELECT)
		found = SPI_processed > 0;
	sandbox_xact_commit();
	return found;
}

/* Connect, publish ourselves, wait for the extension, recover. */
static void
supervisor_start(void)
{
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/*
	 * A cancel means nothing to the worker (its steps are short and bounded
	 * by lock_timeout); handled as a query cancel it would end the worker,
	 * and with it every run in flight.
	 */
	pqsignal(SIGINT, SIG_IGN);
	BackgroundWorkerUnblockSignals();
	if (sandbox_shared == NULL)
		elog(FATAL, "sandbox_ext shared memory is not initialised");

	BackgroundWorkerInitializeConnection(sandbox_database, NULL, 0);
	pgstat_report_appname("sandbox_ext supervisor");
	/* No step of ours may wait long for a lock a tenant holds. */
	SetConfigOption("lock_timeout", SUPERVISOR_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	snprintf(runner_dir, sizeof(runner_dir), "%s/%s", DataDir, LINK_RUN_DIR);
	snprintf(runner_conf_path, sizeof(runner_conf_path), "%s/%s", runner_dir, LINK_CONFIG_FILE);

	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = MyProcPid;
	sandbox_shared->supervisor_started_at = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_shared->mutex);
	before_shmem_exit(supervisor_shmem_exit, (Datum) 0);

	/* The extension may be created after the server starts: wait for it. */
	while (!extension_installed())
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 IDLE_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		handle_interrupts();
	}
	step_recover();
	(void) write_runner_config();
	elog(LOG, "supervisor started (database \"%s\", local runner %s)", sandbox_database,
		 sandbox_local_runner ? "on" : "off");
}

/* ----------------------------------------------------------------
 * The loop
 * ----------------------------------------------------------------
 */

/* Start the local runner when it is wanted, not running, and its restart is due. */
static void
ensure_runner(void)
{
	runner_check_exit();
	if (runner_pid > 0 || !sandbox_local_runner || GetCurrentTimestamp() < restart_at)
		return;
	runner_start();
	if (runner_pid <= 0)
	{
		publish_problem(runner_problem);
		restart_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), restart_backoff_ms);
		restart_backoff_ms = Min(restart_backoff_ms * 2, RESTART_MAX_MS);
	}
}

static long
wait_timeout(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		timeout = IDLE_POLL_MS;

	if (results_pending)
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, pending_retry_at), 0));
	timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, next_reap), 0));
	if (runner_pid <= 0 && sandbox_local_runner)
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, restart_at), 0));
	if (runner_pid > 0 && runner_pidfd < 0)
		timeout = Min(timeout, 100);	/* no pidfd: poll waitpid() */
	return timeout;
}

void
sandbox_supervisor_main(Datum main_arg)
{
	supervisor_start();
	for (;;)
	{
		WaitEventSet *wes;
		WaitEvent	events[4];
		int			n;

		handle_interrupts();
		ensure_runner();
		wes = CreateWaitEventSet(CurrentMemoryContext, 4);
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		if (link_sock >= 0)
			AddWaitEventToSet(wes, WL_SOCKET_READABLE, link_sock, NULL, NULL);
		if (runner_pidfd >= 0)
			AddWaitEventToSet(wes, WL_SOCKET_READABLE, runner_pidfd, NULL, NULL);
		n = WaitEventSetWait(wes, wait_timeout(), events, lengthof(events), PG_WAIT_EXTENSION);
		FreeWaitEventSet(wes);
		for (int e = 0; e < n; e++)
		{
			if (events[e].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else if (events[e].fd == link_sock && link_sock >= 0)
				link_read();
			else if (events[e].fd == runner_pidfd && runner_pidfd >= 0)
				runner_check_exit();
		}
		if (runner_pid > 0 && runner_pidfd < 0)
			runner_check_exit();
		if (GetCurrentTimestamp() >= next_reap)
		{
			next_reap = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REAP_INTERVAL_MS);
			step_reap_leases();
			results_pending = true;	/* a remote runner's staged result: looked for as often */
		}
		if (results_pending && GetCurrentTimestamp() >= pending_retry_at)
		{
			pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_RETRY_MS);
			step_finish_pending();
		}
	}
}

/*
 * Register the supervisor.  Called from _PG_init while the postmaster
 * loads shared_preload_libraries.
 */
void
sandbox_supervisor_register(void)
{
	sandbox_register_worker("sandbox_supervisor_main", "sandbox_ext supervisor");
}
