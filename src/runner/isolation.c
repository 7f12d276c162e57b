/*-------------------------------------------------------------------------
 *
 * isolation.c
 *		The isolation classes this runner host can run (docs/runners.md,
 *		"Isolation classes"; docs/jail.md, "The gvisor class"):
 *		namespaces always, gvisor when a probe ran a program through the
 *		jail's gvisor class here (runsc present and working).  The probe
 *		runs at the first report and again after each SIGHUP (runsc
 *		installed or runsc_path changed since: no restart needed,
 *		isolation_reprobe); the classes are told to the
 *		database after each registration (agent.runner_report_isolation),
 *		with the reason gvisor is missing, which queue_status shows.  The
 *		claim then gives this runner a gvisor run only if it said gvisor;
 *		the launch passes the run's class to the jail (launch.c).
 *		sandbox-runner --check prints the same probe (check.c).
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char SQL_REPORT[] =
"SELECT pg_catalog.array_to_string(agent.runner_report_isolation($1, $2, $3, $4), ',')";

static bool probed = false;
static bool gvisor_ok = false;
static char gvisor_problem[512];
static bool report_due = true;

/* The runsc the jail is told to use: runsc_path, or the jail's default. */
const char *
isolation_runsc(void)
{
	return runner_conf.runsc_path[0] ? runner_conf.runsc_path : "/usr/bin/runsc";
}

/*
 * Run /bin/true through the jail's gvisor class in a scratch directory of
 * the work dir (removed afterwards); false with the reason in problem.
 */
static bool
probe_gvisor(char *problem, size_t len)
{
	char		dir[MAXPGPATH],
				ws[MAXPGPATH],
				vfile[MAXPGPATH],
				verdict[4096] = "";
	char	   *argv[] = {runner_conf.jail_path, "--isolation", "gvisor", "--runsc",
		(char *) isolation_runsc(), "--exec", "/bin/true", "--workspace", ws,
		"--wall-time", "60", "--verdict-file", vfile, "--quiet", NULL};
	posix_spawn_file_actions_t fa;
	pid_t		pid;
	int			status;
	int			fd;
	ssize_t		n;
	bool		ok;

	if (access(isolation_runsc(), X_OK) != 0)
	{
		snprintf(problem, len, "gvisor: runsc not found at %s (%s)", isolation_runsc(),
				 strerror(errno));
		return false;
	}
	if (geteuid() != 0)
	{
		snprintf(problem, len, "gvisor: runsc needs the runner to run as root");
		return false;
	}
	snprintf(dir, sizeof(dir), "%s/.isolation.%d", workdir_root(), (int) getpid());
	snprintf(ws, sizeof(ws), "%s/ws", dir);
	snprintf(vfile, sizeof(vfile), "%s/verdict", dir);
	if (mkdir(dir, S_IRWXU) != 0 || mkdir(ws, S_IRWXU) != 0)
	{
		snprintf(problem, len, "gvisor: could not prepare the probe in %s: %s", dir, strerror(errno));
		rmdir(ws);
		rmdir(dir);
		return false;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	status = posix_spawn(&pid, argv[0], &fa, NULL, argv, (char *[]) {"PATH=/usr/bin:/bin", NULL});
	posix_spawn_file_actions_destroy(&fa);
	if (status == 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	if ((fd = open(vfile, O_RDONLY | O_CLOEXEC)) >= 0)
	{
		n = read(fd, verdict, sizeof(verdict) - 1);
		verdict[Max(n, 0)] = '\0';
		verdict[strcspn(verdict, "\n")] = '\0';
		close(fd);
	}
	unlink(vfile);
	rmdir(ws);
	rmdir(dir);
	ok = strstr(verdict, "\"status\":\"exited\",\"exit_code\":0,") != NULL;
	if (!ok)
	{
		const char *e = strstr(verdict, "\"setup_error\":\"");

		/* its setup error (to its closing quote), else the whole verdict */
		if (e)
		{
			snprintf(problem, len, "gvisor: a probe through the jail did not run: %.300s", e + 15);
			problem[strcspn(problem + 8, "\"") + 8] = '\0';
		}
		else
			snprintf(problem, len, "gvisor: a probe through the jail did not run: %.300s",
					 verdict[0] ? verdict : "no verdict");
	}
	return ok;
}

/* The probe, once; true when gvisor runs here.  *problem: why not. */
bool
isolation_gvisor(const char **problem)
{
	if (!probed)
	{
		gvisor_ok = probe_gvisor(gvisor_problem, sizeof(gvisor_problem));
		probed = true;
	}
	*problem = gvisor_ok ? NULL : gvisor_problem;
	return gvisor_ok;
}

/*
 * The configuration was reloaded (SIGHUP): probe again at the next report,
 * and report, so that runsc installed (or runsc_path changed) since the
 * start takes effect without a restart.
 */
void
isolation_reprobe(void)
{
	probed = false;
	report_due = true;
}

/* A new registration: the database must hear our classes again. */
void
isolation_registered(void)
{
	report_due = true;
}

/*
 * Tell the database the classes we run, if it does not know yet.  Called
 * with the connection up and registered, before the first claim.  A
 * catalog from before the classes (no runner_report_isolation) knows only
 * namespaces: nothing to say.
 */
void
isolation_report(void)
{
	DbParam		p[4];
	DbResult	r;
	const char *problem;
	bool		gvisor;

	if (!report_due || !me.registered)
		return;
	gvisor = isolation_gvisor(&problem);
	p[0] = step_param(me.id);
	p[1] = step_param(me.incarnation);
	p[2] = step_param(gvisor ? "{namespaces,gvisor}" : "{namespaces}");
	p[3] = step_param(problem);
	r = db_call(SQL_REPORT, 4, p);
	if (r.outcome == DB_OK)
	{
		report_due = false;
		runner_log(RLOG_LOG, "runner \"%s\" runs the isolation classes %s%s%s", runner_conf.name,
				   gvisor ? "namespaces, gvisor" : "namespaces",
				   problem ? "; " : "", problem ? problem : "");
	}
	else if (r.outcome == DB_FAILED)
	{
		if (strcmp(r.sqlstate, "42883") == 0)
			report_due = false; /* an older catalog: namespaces only */
		else
			runner_log(RLOG_WARNING, "could not report the isolation classes: %s",
					   r.message ? r.message : "");
	}
	db_result_free(&r);
}
