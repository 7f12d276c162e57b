/*-------------------------------------------------------------------------
 *
 * check.c
 *		sandbox-runner --check: tell an operator what this host lacks before
 *		the runner claims anything.  Each check prints one line, "ok",
 *		"warn" or "FAIL", what it looked at and, when it is not ok, what to
 *		do; the exit status is 1 when any check failed.
 *
 *	the jail			jail_path is an executable that runs a payload
 *	interpreters		the ones the jail runs: python3, node, bash
 *	cgroups				a payload gets a cgroup of its own (delegation), as
 *						require_cgroup demands
 *	isolation			the gvisor class: runsc runs /bin/true through the jail
 *						(isolation.c; a warn when not: namespaced runs only)
 *	images				each image of image_store (images.c): its
 *						interpreters, and a payload run on it
 *	the work dir		usable (exists, writable, not on a protected
 *						filesystem), its filesystem and free space
 *	run_dir				where the launcher's socket goes is writable
 *	the name			one agent.runners accepts
 *	the connection		the conninfo reaches a read-write server, as which
 *						role, over TLS with a password (warn otherwise, but
 *						on a unix socket), with sandbox_ext installed and
 *						the runner's steps executable
 *
 * The probes run a real sandbox (one-shot, in a scratch directory of the
 * work dir, removed afterwards): a check that only looked for files would
 * pass on a host where the jail cannot work.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "libpq-fe.h"

#define TMPFS_MAGIC_	0x01021994

/*
 * What to do when a probe got no cgroup.  On cgroup v2 a jail gets one only
 * when the runner's own processes run inside the delegated subtree, so a
 * --check started from a login shell fails there even on a host set up
 * right: it must run where the unit runs the runner.
 */
#define CGROUP_HINT \
	"Delegate a cgroup to this account. systemd: the unit as shipped (Delegate=yes, User=, " \
	"ExecStart through sandbox-jail-host-setup --enter-cgroup), and --check run the same way " \
	"(docs/runners.md, \"systemd\"). Without systemd: scripts/jail-host-setup.sh USER as root, " \
	"then on cgroup v2 start the runner inside the sandbox_ext/service cgroup it names " \
	"(docs/jail.md, \"Delegation on v2\")."

static int	nfailed = 0;

static void
report(const char *level, const char *what, const char *detail, const char *hint)
{
	printf("%-4s  %s%s%s\n", level, what, detail ? ": " : "", detail ? detail : "");
	if (hint)
		printf("      %s\n", hint);
	if (strcmp(level, "FAIL") == 0)
		nfailed++;
}

/* A "key": value of the jail's one-line JSON verdict (a copy in buf), or NULL. */
static const char *
verdict_field(const char *verdict, const char *key, char *buf, size_t len)
{
	char		pat[64];
	const char *p;
	size_t		n = 0;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(verdict, pat);
	if (p == NULL)
		return NULL;
	p += strlen(pat);
	if (*p == '"')
	{
		p++;
		while (*p && *p != '"' && n + 1 < len)
			buf[n++] = *p++;
	}
	else
		while (*p && *p != ',' && *p != '}' && n + 1 < len)
			buf[n++] = *p++;
	buf[n] = '\0';
	return buf;
}

/*
 * Run one payload through a one-shot jail in dir; its verdict in verdict,
 * its stdout in out.  False when the jail could not be executed.
 */
static bool
probe(const char *dir, const char *language, const char *code, const char *image,
	  char *verdict, size_t vlen, char *out, size_t olen)
{
	char		ws[MAXPGPATH],
				codef[MAXPGPATH],
				vfile[MAXPGPATH],
				ofile[MAXPGPATH];
	char		mem[32];
	char	   *argv[24];
	int			argc = 0;
	posix_spawn_file_actions_t fa;
	pid_t		pid;
	int			status;
	char	   *err = NULL;
	int			fd;
	ssize_t		n;

	/* (a probe on an image: named after its directory) */
	const char *tag = image ? strrchr(image, '/') + 1 : language;

	snprintf(ws, sizeof(ws), "%s/ws-%s", dir, tag);
	snprintf(codef, sizeof(codef), "%s/code-%s", dir, tag);
	snprintf(vfile, sizeof(vfile), "%s/verdict-%s", dir, tag);
	snprintf(ofile, sizeof(ofile), "%s/out-%s", dir, tag);
	verdict[0] = out[0] = '\0';
	if (mkdir(ws, S_IRWXU) != 0 || !files_place(dir, strrchr(codef, '/') + 1, code, strlen(code),
												0600, &err))
	{
		snprintf(verdict, vlen, "could not prepare the probe: %s", err ? err : strerror(errno));
		free(err);
		return false;
	}
	snprintf(mem, sizeof(mem), "%dM", Min(runner_conf.default_memory_mb, 256));
	argv[argc++] = runner_conf.jail_path;
	argv[argc++] = "--language";
	argv[argc++] = (char *) language;
	argv[argc++] = "--workspace";
	argv[argc++] = ws;
	argv[argc++] = "--code-file";
	argv[argc++] = codef;
	argv[argc++] = "--wall-time";
	argv[argc++] = "20";
	argv[argc++] = "--memory";
	argv[argc++] = mem;
	argv[argc++] = "--verdict-file";
	argv[argc++] = vfile;
	argv[argc++] = "--quiet";
	if (runner_conf.require_cgroup)
		argv[argc++] = "--require-cgroup";
	if (image)
	{
		argv[argc++] = "--image";
		argv[argc++] = (char *) image;
	}
	argv[argc] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, ofile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	status = posix_spawn(&pid, argv[0], &fa, NULL, argv, (char *[]) {"PATH=/usr/bin:/bin", NULL});
	posix_spawn_file_actions_destroy(&fa);
	if (status != 0)
	{
		snprintf(verdict, vlen, "could not execute \"%s\": %s", argv[0], strerror(status));
		return false;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if ((fd = open(vfile, O_RDONLY | O_CLOEXEC)) >= 0)
	{
		n = read(fd, verdict, vlen - 1);
		verdict[Max(n, 0)] = '\0';
		verdict[strcspn(verdict, "\n")] = '\0';
		close(fd);
	}
	if ((fd = open(ofile, O_RDONLY | O_CLOEXEC)) >= 0)
	{
		n = read(fd, out, olen - 1);
		out[Max(n, 0)] = '\0';
		out[strcspn(out, "\n")] = '\0';
		close(fd);
	}
	if (verdict[0] == '\0')
		snprintf(verdict, vlen, "no verdict (exit status %d)",
				 WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return true;
}

static void
check_jail_and_cgroups(void)
{
	static const struct
	{
		const char *language;
		const char *interpreter;
		const char *code;
	}			langs[] = {
		{"shell", "/bin/bash", "echo probe-ok"},
		{"python", "/usr/bin/python3", "print('probe-ok')"},
		{"node", "/usr/bin/node", "console.log('probe-ok')"},
	};
	char		dir[MAXPGPATH];
	bool		cgroup_reported = false;

	if (access(runner_conf.jail_path, X_OK) != 0)
	{
		report("FAIL", "the jail", psprintf("\"%s\": %m", runner_conf.jail_path),
			   "Install sandbox-jail (make install puts it next to sandbox-runner), or set jail_path.");
		return;
	}
	report("ok", "the jail", runner_conf.jail_path, NULL);
	for (size_t i = 0; i < lengthof(langs); i++)
		if (access(langs[i].interpreter, X_OK) != 0)
			report("FAIL", psprintf("interpreter for %s", langs[i].language),
				   psprintf("\"%s\": %m", langs[i].interpreter),
				   "Install it (scripts/deps.sh lists the packages): the jail runs it from the host's root.");
		else
			report("ok", psprintf("interpreter for %s", langs[i].language), langs[i].interpreter, NULL);

	if (workdir_problem() != NULL)
	{
		report("warn", "sandbox probes", "skipped: the work directory is unusable", NULL);
		return;
	}
	snprintf(dir, sizeof(dir), "%s/.check.%d", workdir_root(), (int) getpid());
	if (mkdir(dir, S_IRWXU) != 0)
	{
		report("FAIL", "sandbox probes", psprintf("could not create \"%s\": %m", dir), NULL);
		return;
	}
	for (size_t i = 0; i < lengthof(langs); i++)
	{
		char		verdict[4096],
					out[256],
					f1[256],
					f2[256],
					f3[64];
		const char *what = psprintf("a %s payload in a sandbox", langs[i].language);

		if (!probe(dir, langs[i].language, langs[i].code, NULL, verdict, sizeof(verdict), out,
				   sizeof(out)))
		{
			report("FAIL", what, verdict, NULL);
			continue;
		}
		if (verdict_field(verdict, "setup_error", f1, sizeof(f1)) && strcmp(f1, "null") != 0)
		{
			bool		cg = strstr(f1, "cgroup") != NULL;

			report("FAIL", what, psprintf("setup error: %s", f1),
				   cg ? CGROUP_HINT : NULL);
			cgroup_reported |= cg;
			continue;
		}
		if (strcmp(out, "probe-ok") != 0)
		{
			report("FAIL", what, psprintf("it printed \"%s\" (verdict %s)", out, verdict), NULL);
			continue;
		}
		report("ok", what, psprintf("cgroup %s, %s ms",
									verdict_field(verdict, "cgroup", f2, sizeof(f2)) ? f2 : "?",
									verdict_field(verdict, "wall_ms", f3, sizeof(f3)) ? f3 : "?"),
			   NULL);
		if (!cgroup_reported && verdict_field(verdict, "cgroup", f2, sizeof(f2)) &&
			strcmp(f2, "none") == 0)
		{
			report(runner_conf.require_cgroup ? "FAIL" : "warn", "cgroups",
				   "the sandbox ran without a cgroup of its own (no memory cap)",
				   CGROUP_HINT);
			cgroup_reported = true;
		}
	}
	files_remove_dir(dir);
}

/*
 * The images of image_store (images.c, docs/images.md): each one's
 * interpreters from its manifest, and a payload run on it (Python where
 * it has one, else bash), as the runner would report and run them.
 */
/*
 * The gvisor class (isolation.c's probe, the one the runner reports): a
 * warn, not a failure, when it cannot run here; the runner then runs
 * namespaced runs only and the claim never gives it a gvisor run.
 */
static void
check_isolation(void)
{
	const char *problem;

	if (workdir_problem() != NULL)
	{
		report("warn", "the gvisor isolation class", "skipped: the work directory is unusable", NULL);
		return;
	}
	if (isolation_gvisor(&problem))
		report("ok", "the gvisor isolation class", psprintf("%s runs a program", isolation_runsc()),
			   NULL);
	else
		report("warn", "the gvisor isolation class", problem,
			   "Runs of orgs, plans or agents set to gvisor go only to runners that run it "
			   "(install Debian's runsc package, run the runner as root; docs/runners.md, "
			   "\"Isolation classes\"). This runner runs namespaced runs.");
}

static void
check_images(void)
{
	char		dir[MAXPGPATH];

	(void) images_rescan();
	if (images_count() == 0)
	{
		report("ok", "images", psprintf("none in \"%s\": every run is on the host's root",
										runner_conf.image_store), NULL);
		return;
	}
	if (workdir_problem() != NULL || access(runner_conf.jail_path, X_OK) != 0)
	{
		report("warn", "image probes", "skipped: the work directory or the jail is unusable", NULL);
		return;
	}
	snprintf(dir, sizeof(dir), "%s/.check-images.%d", workdir_root(), (int) getpid());
	if (mkdir(dir, S_IRWXU) != 0)
	{
		report("FAIL", "image probes", psprintf("could not create \"%s\": %m", dir), NULL);
		return;
	}
	for (int i = 0; i < images_count(); i++)
	{
		const RunnerImage *im = images_get(i);
		bool		py = strstr(im->manifest, "interpreter\tpython\t") != NULL;
		const char *what = psprintf("image %s@%.12s", im->name, im->digest);
		char		verdict[4096],
					out[256],
					f1[256],
					f3[64];
		const char *versions = "";

		/* "bash 5.2.15, python 3.11.2": the manifest's interpreter lines */
		for (const char *l = im->manifest; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (strncmp(l, "interpreter\t", 12) == 0)
			{
				char	   *v = psprintf("%.*s", (int) strcspn(l + 12, "\n"), l + 12);

				v[strcspn(v, "\t")] = ' ';
				versions = psprintf("%s%s%s", versions, versions[0] ? ", " : "", v);
			}
		if (!probe(dir, py ? "python" : "shell", py ? "print('probe-ok')" : "echo probe-ok", im->dir,
				   verdict, sizeof(verdict), out, sizeof(out)))
			report("FAIL", what, verdict, NULL);
		else if (verdict_field(verdict, "setup_error", f1, sizeof(f1)) && strcmp(f1, "null") != 0)
			report("FAIL", what, psprintf("setup error: %s", f1), NULL);
		else if (strcmp(out, "probe-ok") != 0)
			report("FAIL", what, psprintf("it printed \"%s\" (verdict %s)", out, verdict), NULL);
		else
			report("ok", what, psprintf("%s; a %s payload ran on it in %s ms", versions,
										py ? "python" : "shell",
										verdict_field(verdict, "wall_ms", f3, sizeof(f3)) ? f3 : "?"),
				   NULL);
	}
	files_remove_dir(dir);
}

/*
 * The secrets key file, when one is set: readable by us and holding keys
 * (docs/secrets.md).  Unset is fine: runs with secrets go to other runners.
 */
static void
check_secrets(void)
{
	const char *why;
	int			n;

	if (runner_conf.secrets_key_file[0] == '\0')
	{
		report("ok", "secrets keys", psprintf("none (%s is not set): runs with secrets go to other runners",
											   runner_setting_name("secrets_key_file")), NULL);
		return;
	}
	why = secrets_check(&n);
	if (why != NULL)
		report("FAIL", "secrets keys", psprintf("\"%s\": %s", runner_conf.secrets_key_file, why),
			   "Create one with sandbox-secret keygen, readable only by the runner's user (docs/secrets.md).");
	else
		report("ok", "secrets keys", psprintf("%d in \"%s\"", n, runner_conf.secrets_key_file), NULL);
}

static void
check_work_dir(void)
{
	struct statfs sfs;
	struct statvfs svfs;
	struct stat st,
				rootst;

	if (workdir_problem())
	{
		report("FAIL", "the work directory", workdir_problem(), NULL);
		return;
	}
	if (statfs(workdir_root(), &sfs) != 0 || statvfs(workdir_root(), &svfs) != 0)
	{
		report("FAIL", "the work directory", psprintf("could not stat \"%s\": %m", workdir_root()), NULL);
		return;
	}
	report("ok", "the work directory",
		   psprintf("%s (%s, %llu MB free)", workdir_root(),
					(long) sfs.f_type == (long) TMPFS_MAGIC_ ? "tmpfs" : "a disk filesystem",
					(unsigned long long) svfs.f_bavail * svfs.f_frsize / (1024 * 1024)),
		   NULL);
	if (stat(workdir_root(), &st) == 0 && stat("/", &rootst) == 0 && st.st_dev == rootst.st_dev)
		report("warn", "the work directory's filesystem", "it is the root filesystem",
			   "A run that fills its workspace then fills the host's root: mount a filesystem of its own there.");
	if ((int64) (svfs.f_bavail * svfs.f_frsize) <
		(int64) runner_conf.slots * runner_conf.workspace_size_mb * 1024 * 1024)
		report("warn", "the work directory's free space",
			   psprintf("less than slots x workspace_size (%d x %d MB)", runner_conf.slots,
						runner_conf.workspace_size_mb), NULL);
}

static void
check_run_dir(void)
{
	if (mkdir(runner_conf.run_dir, S_IRWXU) != 0 && errno != EEXIST)
		report("FAIL", "run_dir", psprintf("could not create \"%s\": %m", runner_conf.run_dir),
			   "The launcher's socket goes there (systemd: RuntimeDirectory=sandbox-runner).");
	else if (access(runner_conf.run_dir, W_OK | X_OK) != 0)
		report("FAIL", "run_dir", psprintf("\"%s\" is not writable: %m", runner_conf.run_dir), NULL);
	else
		report("ok", "run_dir", runner_conf.run_dir, NULL);
}

/*
 * Connect as the runner does, and ask the server who we are and whether we
 * may run the steps.  Catalog functions only: nothing is written.
 */
/* The name agent.runner_register accepts: ^[a-z0-9][a-z0-9_.-]{0,63}$. */
static void
check_name(void)
{
	const char *n = runner_conf.name;
	size_t		len = strlen(n);
	bool		ok = len >= 1 && len <= 64 && ((n[0] >= 'a' && n[0] <= 'z') || (n[0] >= '0' && n[0] <= '9'));

	for (size_t i = 1; ok && i < len; i++)
		ok = (n[i] >= 'a' && n[i] <= 'z') || (n[i] >= '0' && n[i] <= '9') || strchr("_.-", n[i]) != NULL;
	if (ok)
		report("ok", "the name", psprintf("\"%s\"", n), NULL);
	else
		report("FAIL", "the name", psprintf("\"%s\" is not a runner name", n),
			   "Set name: 1 to 64 characters, lower-case letters, digits, \"_\", \".\" and \"-\", starting with a letter or digit.");
}

/* TLS and a password on a network connection (a unix socket is the host's own). */
static void
check_transport(PGconn *c)
{
	const char *host = PQhost(c);

	if (host && host[0] == '/')
		report("ok", "the transport", "a unix socket", NULL);
	else if (!PQsslInUse(c))
		report("warn", "the transport", "the connection is not encrypted",
			   "Use sslmode=verify-full with sslrootcert in conninfo, and hostssl in the server's pg_hba.conf.");
	else
		report("ok", "the transport", psprintf("TLS (%s, %s)", PQsslAttribute(c, "protocol"),
											  PQsslAttribute(c, "cipher")), NULL);
	if (host && host[0] != '/' && !PQconnectionUsedPassword(c))
		report("warn", "the authentication", "the server asked no password",
			   "Give the runner's role a SCRAM password (scram-sha-256 in pg_hba.conf).");
}

/*
 * The one query of the runner that is not a step function: it asks the
 * catalog whether the extension and the steps are there at all, so it
 * cannot live in the extension's schema (a constant, pg_catalog only).
 */
static void
check_connection(void)
{
	static const char sql[] =
		"SELECT current_user, session_user, pg_catalog.pg_is_in_recovery(), "
		"(SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'sandbox_ext'), "
		"CASE WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = 'agent') THEN NULL "
		"WHEN NOT pg_catalog.has_schema_privilege('agent', 'USAGE') THEN false "
		"WHEN pg_catalog.to_regprocedure($1) IS NOT NULL "
		"THEN pg_catalog.has_function_privilege(pg_catalog.to_regprocedure($1), 'EXECUTE') END, "
		"pg_catalog.current_setting('server_version')";
	PQconninfoOption *opts;
	char	   *err = NULL;
	const char *kw[64];
	const char *val[64];
	const char *params[1] = {"agent.runner_claim(uuid,uuid,integer,uuid)"};
	PGconn	   *c;
	PGresult   *res;

	if (!db_conn_params(kw, val, &opts, &err))
	{
		report("FAIL", "the connection", psprintf("invalid conninfo: %s", err ? err : "?"), NULL);
		PQfreemem(err);
		return;
	}
	c = PQconnectdbParams(kw, val, 0);
	PQconninfoFree(opts);
	if (PQstatus(c) != CONNECTION_OK)
	{
		char	   *msg = pg_strdup(PQerrorMessage(c));

		msg[strcspn(msg, "\n")] = '\0';
		report("FAIL", "the connection", msg,
			   "Check conninfo (host, port, dbname, user; sslmode and the server's pg_hba.conf for TLS and SCRAM).");
		PQfinish(c);
		return;
	}
	res = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
	{
		char	   *msg = pg_strdup(PQerrorMessage(c));

		msg[strcspn(msg, "\n")] = '\0';
		report("FAIL", "the connection", msg, NULL);
	}
	else
	{
		report("ok", "the connection",
			   psprintf("%s:%s, PostgreSQL %s, as %s%s%s", PQhost(c), PQport(c),
						PQgetvalue(res, 0, 5), PQgetvalue(res, 0, 1),
						strcmp(PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1)) != 0 ? " (role " : "",
						strcmp(PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1)) != 0 ?
						psprintf("%s)", PQgetvalue(res, 0, 0)) : ""),
			   NULL);
		check_transport(c);
		if (PQgetvalue(res, 0, 2)[0] == 't')
			report("FAIL", "the server", "it is a standby (read-only)",
				   "List the primary in conninfo; with several hosts, target_session_attrs=read-write finds it.");
		if (PQgetisnull(res, 0, 3))
			report("FAIL", "sandbox_ext", "not installed in this database",
				   "Point dbname at the database where CREATE EXTENSION sandbox_ext ran.");
		else
			report("ok", "sandbox_ext", psprintf("version %s", PQgetvalue(res, 0, 3)), NULL);
		if (!PQgetisnull(res, 0, 3) && (PQgetisnull(res, 0, 4) || PQgetvalue(res, 0, 4)[0] != 't'))
			report("FAIL", "the runner's steps", psprintf("%s may not execute %s", PQgetvalue(res, 0, 0),
														  params[0]),
				   "Log in as the runner's own role, a member of agent_runner (docs/runners.md, \"Roles\").");
		else if (!PQgetisnull(res, 0, 3))
			report("ok", "the runner's steps", "executable", NULL);
	}
	PQclear(res);
	PQfinish(c);
}

int
runner_check(void)
{
	printf("sandbox-runner %s, runner \"%s\", %d slots, configuration from this file\n\n",
		   RUNNER_VERSION, runner_conf.name, runner_conf.slots);
	(void) workdir_usable(true);
	check_jail_and_cgroups();
	check_isolation();
	check_images();
	check_secrets();
	check_work_dir();
	check_run_dir();
	check_name();
	check_connection();
	printf("\n%s\n", nfailed ? "some checks failed" : "nothing is missing");
	return nfailed ? 1 : 0;
}
