/*-------------------------------------------------------------------------
 *
 * local_runner.c
 *		The supervisor's local runner: the sandbox-runner process it starts
 *		on the database host (`sandbox-runner --local`), its configuration
 *		file and its link (src/runner/local_link.h), and what it reports
 *		into shared memory for agent.worker_status().
 *
 *	configuration	the sandbox.* settings written as the runner's
 *					configuration file, the same file and names a remote
 *					runner's operator writes; rewritten on reload, followed
 *					by SIGHUP
 *	process			started with posix_spawn (a process group of its own),
 *					restarted with backoff when it dies, stopped with
 *					SIGTERM and then SIGKILL
 *	link			its status (slots, work directory, problem, the runs)
 *					published in shared memory; "staged" told to the caller
 *
 * Only the supervisor's process calls these (supervisor.c, its loop and
 * its exit); the state below is that process's own.  Nothing here touches
 * the database: the runner is a client like any other.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

#include "runner/local_link.h"
#include "runner/spawn_process.h"
#include "sandbox_ext.h"

/* A runner that dies is started again after this, doubled up to the max. */
#define RESTART_MIN_MS		1000
#define RESTART_MAX_MS		30000
/* A runner that lived this long was healthy: its next restart is quick. */
#define RESTART_HEALTHY_MS	60000
/* How long a runner asked to stop may take before it is killed. */
#define STOP_GRACE_MS		5000

/* The local runner: this process's own state. */
static pid_t runner_pid = 0;
static int	runner_pidfd = -1;
static int	link_sock = -1;			/* our end of its link */
static TimestampTz runner_started_at = 0;
static TimestampTz restart_at = 0;
static int	restart_backoff_ms = RESTART_MIN_MS;
static char runner_dir[MAXPGPATH];	/* <data>/sandbox_runner: its config, the launcher's socket */
static char runner_conf_path[MAXPGPATH];
static char runner_problem[256];	/* why the local runner is not running, or "" */


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
bool
sandbox_local_runner_configure(void)
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
	appendStringInfoString(&buf, "\nimage_store = ");
	append_quoted(&buf, sandbox_image_store && sandbox_image_store[0] ? sandbox_image_store
				  : "/var/lib/sandbox-images");
	appendStringInfoString(&buf, "\nsecrets_key_file = ");
	append_quoted(&buf, sandbox_secrets_key_file ? sandbox_secrets_key_file : "");
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
 * Start the local runner (spawn_process.h): stdin /dev/null, our stdout
 * and stderr (the server's log), its end of the link as LINK_RUNNER_FD and
 * nothing else, default signal dispositions, and a process group of its
 * own, so that a cancel of the supervisor does not reach it.
 */
static void
runner_start(void)
{
	char		path[MAXPGPATH];
	char		parent[32];
	char	   *argv[] = {path, "--local", "--config", runner_conf_path, NULL};
	char	   *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", parent, NULL};
	int			fds[LINK_RUNNER_FD];
	int			sv[2];
	int			rc;

	strlcpy(path, my_exec_path, sizeof(path));
	get_parent_directory(path);
	strlcat(path, "/sandbox-runner", sizeof(path));
	snprintf(parent, sizeof(parent), "SANDBOX_RUNNER_PARENT=%d", (int) MyProcPid);

	if (!sandbox_local_runner_configure())
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
	/* its end of the link as LINK_RUNNER_FD, our stdout and stderr */
	for (int i = 0; i < LINK_RUNNER_FD; i++)
		fds[i] = -1;
	fds[LINK_RUNNER_FD - 1] = sv[1];
	rc = sandbox_spawn_process(&runner_pid, path, argv, envp, fds, LINK_RUNNER_FD, true);
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
void
sandbox_local_runner_stop(void)
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

/* Read what the runner reported (local_link.h); *staged: a result waits. */
static void
link_read(bool *staged)
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
			*staged = true;
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
 * What the supervisor calls
 * ----------------------------------------------------------------
 */

/* Where the runner's files go (<data>/sandbox_runner); first thing at start. */
void
sandbox_local_runner_init(void)
{
	snprintf(runner_dir, sizeof(runner_dir), "%s/%s", DataDir, LINK_RUN_DIR);
	snprintf(runner_conf_path, sizeof(runner_conf_path), "%s/%s", runner_dir, LINK_CONFIG_FILE);
}

/* Start the runner when it is wanted, not running, and its restart is due. */
void
sandbox_local_runner_ensure(void)
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

/* After the configuration was reloaded: stop, reconfigure or retry it. */
void
sandbox_local_runner_reload(void)
{
	if (!sandbox_local_runner)
	{
		if (runner_pid > 0)
			elog(LOG, "sandbox.local_runner is off: stopping the local runner");
		sandbox_local_runner_stop();
		snprintf(runner_problem, sizeof(runner_problem),
				 "sandbox.local_runner is off: no sandbox runs on this host");
		publish_problem(runner_problem);
	}
	else if (runner_pid > 0 && sandbox_local_runner_configure())
		(void) kill(runner_pid, SIGHUP);
	else if (runner_pid <= 0)
		restart_at = 0;			/* a setting may have fixed what kept it from starting */
}

/* What the loop waits on for the runner: its link and its pidfd. */
void
sandbox_local_runner_wait_on(WaitEventSet *wes)
{
	if (link_sock >= 0)
		AddWaitEventToSet(wes, WL_SOCKET_READABLE, link_sock, NULL, NULL);
	if (runner_pidfd >= 0)
		AddWaitEventToSet(wes, WL_SOCKET_READABLE, runner_pidfd, NULL, NULL);
}

/* One of those is ready: read the link (*staged: a result waits) or reap. */
void
sandbox_local_runner_event(pgsocket fd, bool *staged)
{
	if (fd == link_sock && link_sock >= 0)
		link_read(staged);
	else if (fd == runner_pidfd && runner_pidfd >= 0)
		runner_check_exit();
}

/* The loop's timeout, no later than the runner's restart or exit check. */
long
sandbox_local_runner_timeout(long timeout)
{
	TimestampTz now = GetCurrentTimestamp();

	if (runner_pid <= 0 && sandbox_local_runner)
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, restart_at), 0));
	if (runner_pid > 0 && runner_pidfd < 0)
		timeout = Min(timeout, 100);	/* no pidfd: poll waitpid() */
	return timeout;
}

/* Without a pidfd the runner's exit is polled, every turn. */
void
sandbox_local_runner_poll(void)
{
	if (runner_pid > 0 && runner_pidfd < 0)
		runner_check_exit();
}
