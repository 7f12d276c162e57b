/*-------------------------------------------------------------------------
 *
 * launch.c
 *		Starting a run's jail and watching it end: one request, built once,
 *		sent either to the resident launcher (`sandbox-jail --serve`, the
 *		default) or given as the command line of a one-shot `sandbox-jail`;
 *		the verdict; reaping; signals; the launcher process itself.
 *
 * The launcher keeps sandboxes half-built ahead of requests (docs/jail.md,
 * "Resident launcher"): a run is one SOCK_SEQPACKET request carrying the
 * options and [code, stdout, stderr] descriptors, and one answer, then EOF
 * (src/jail/wire_protocol.h).  It is a child of this process and dies with
 * it (PR_SET_PDEATHSIG), and so do its sandboxes.  If it cannot be reached
 * a run falls back to the one-shot jail, started with posix_spawn
 * (spawn_process.h, shared with the supervisor), with
 * its stdout, stderr and verdict on pipes and a pidfd for its exit.
 *
 * Nothing here touches the database or the disk beyond the socket's
 * directory (run_dir); run.c decides what a run is, this file only starts
 * and stops jails.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn_process.h"

/* Extra time past the wall limit before we SIGKILL a jail ourselves. */
#define BACKSTOP_GRACE_MS	10000
/* The launcher accepts connections within this many 10 ms tries. */
#define LAUNCHER_START_TRIES	200
/* The environment of every jail process. */
static char *const jail_envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};

/*
 * A resident launcher: the host's root (launchers[0]), or one image's
 * (docs/images.md), each with its own socket, pool and warm interpreters.
 * An image's is started at its first run, and stopped once the image is
 * gone from the store and none of its runs is in flight (launchers_prune).
 */
typedef struct Launcher
{
	bool		used;
	char		image[RUNNER_IMAGE_REF_LEN];	/* NAME@DIGEST, or "": the host's */
	pid_t		pid;
	char		sock[MAXPGPATH];
	char		path[MAXPGPATH];	/* the jail_path it was started from */
	char		root[MAXPGPATH];	/* the work root when it was started */
	char		warm[JAIL_WARM_MODULES_LEN + 64];	/* its warm settings */
	JailWarmPage *warm_page;	/* its warm page (wire_protocol.h), or NULL */
} Launcher;

static Launcher launchers[1 + RUNNER_MAX_IMAGES];

/*
 * A run's options, the same for both ways of starting it: (name, value)
 * pairs, value NULL for a flag.  The code travels as a descriptor to the
 * launcher and as --code-file on a command line.
 */
#define MAX_JAIL_OPTIONS	(24 + RUNNER_MAX_SKILLS)

typedef struct JailRequest
{
	int			n;
	const char *name[MAX_JAIL_OPTIONS];
	const char *value[MAX_JAIL_OPTIONS];
	char		buf[8][32];		/* the numbers, printed */
} JailRequest;

static void
request_add(JailRequest *req, const char *name, const char *value)
{
	if (req->n >= MAX_JAIL_OPTIONS)
		return;					/* cannot be: nbinds <= RUNNER_MAX_SKILLS */
	req->name[req->n] = name;
	req->value[req->n] = value;
	req->n++;
}

static void
request_build(JailRequest *req, Run *run, const RunnerImage *image, int wall_s, int memory_mb,
			  int pids)
{
	int			b = 0;

	req->n = 0;
	request_add(req, "--language", run->language);
	request_add(req, "--workspace", run->disk.workspace);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%d", wall_s);
	request_add(req, "--wall-time", req->buf[b++]);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%dM", memory_mb);
	request_add(req, "--memory", req->buf[b++]);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%d", pids);
	request_add(req, "--pids", req->buf[b++]);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%ld", (long) runner_conf.output_limit_kb * 1024L);
	request_add(req, "--output-limit", req->buf[b++]);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%dM", runner_conf.workspace_size_mb);
	request_add(req, "--workspace-size", req->buf[b++]);
	snprintf(req->buf[b], sizeof(req->buf[b]), "%d", runner_conf.workspace_entries);
	request_add(req, "--workspace-entries", req->buf[b++]);
	for (int i = 0; i < run->disk.nbinds; i++)
		request_add(req, "--ro-bind", run->disk.binds[i]);
	if (runner_conf.require_cgroup)
		request_add(req, "--require-cgroup", NULL);
	if (image)
		request_add(req, "--image", image->dir);
	if (run->gvisor)
	{
		request_add(req, "--isolation", "gvisor");
		request_add(req, "--runsc", isolation_runsc());
	}
	if (run->disk.egress)
	{
		/* the policy the prepare step placed (egress_place_policy) */
		request_add(req, "--egress-policy",
					arena_printf(&run->arena, "%s/" EGRESS_POLICY_FILE, run->disk.dir));
		request_add(req, "--egress-log",
					arena_printf(&run->arena, "%s/" EGRESS_LOG_FILE, run->disk.dir));
		if (runner_conf.egress_resolver[0])
			request_add(req, "--egress-resolver", runner_conf.egress_resolver);
		if (runner_conf.egress_ca_file[0])
			request_add(req, "--egress-ca", runner_conf.egress_ca_file);
	}
}

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* A jail process (spawn_process.h): fds[i], if >= 0, as its fd i + 1. */
static int
spawn_jail_process(pid_t *pid, char **argv, const int fds[4], bool vfork)
{
	return sandbox_spawn_process(pid, argv[0], argv, jail_envp, fds, 4, vfork);
}

/* ----------------------------------------------------------------
 * The resident launchers
 * ----------------------------------------------------------------
 */

static void
launcher_stop_one(Launcher *l)
{
	if (l->warm_page)
		munmap(l->warm_page, sizeof(JailWarmPage));
	l->warm_page = NULL;
	if (l->pid > 0)
	{
		(void) kill(l->pid, SIGTERM);
		(void) waitpid(l->pid, NULL, 0);
	}
	l->pid = 0;
}

void
launcher_stop(void)
{
	for (int i = 0; i < (int) lengthof(launchers); i++)
		if (launchers[i].used)
			launcher_stop_one(&launchers[i]);
}

/* Is the launcher alive?  Reaps it if it exited. */
static bool
launcher_alive(Launcher *l)
{
	if (l->pid <= 0)
		return false;
	if (waitpid(l->pid, NULL, WNOHANG) == l->pid)
	{
		runner_log(RLOG_LOG, "the resident jail launcher%s%s (pid %d) exited; it will be restarted",
				   l->image[0] ? " of image " : "", l->image, (int) l->pid);
		l->pid = 0;
		return false;
	}
	return true;
}

static int
launcher_connect(Launcher *l, const char *language)
{
	struct sockaddr_un addr;
	int			sock;
	int			lang = -1;

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, l->sock, sizeof(addr.sun_path));

	/*
	 * A run of a language the launcher keeps warm interpreters for goes to
	 * one if one waits (taken from the page: its socket is then sure to
	 * answer); otherwise, as every other run, to a cold sandbox.
	 */
	if (language && strcmp(language, "python") == 0 && runner_conf.warm_python > 0)
		lang = JAIL_WARM_PYTHON;
	else if (language && strcmp(language, "node") == 0 && runner_conf.warm_node > 0)
		lang = JAIL_WARM_NODE;
	if (lang >= 0 && !l->warm_page && (runner_conf.warm_python > 0 || runner_conf.warm_node > 0))
		l->warm_page = jail_wire_warm_map(l->sock, true);
	if (lang >= 0 && jail_wire_warm_claim(l->warm_page, lang))
		snprintf(addr.sun_path, sizeof(addr.sun_path), "%s%s", l->sock,
				 JAIL_WARM_SOCK_SUFFIX[lang]);
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -1;
	if (connect(sock, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		close(sock);
		return -1;
	}
	return sock;
}

/* Wait (briefly) until a just-started launcher accepts connections. */
static bool
launcher_wait_ready(Launcher *l)
{
	for (int i = 0; i < LAUNCHER_START_TRIES; i++)
	{
		int			sock = launcher_connect(l, NULL);

		if (sock >= 0)
		{
			close(sock);		/* an empty connection is refused and forgotten */
			return true;
		}
		if (!launcher_alive(l))
			return false;
		usleep(10000);
	}
	return false;
}

/* Runs of ours that this launcher has in flight. */
static int
served_runs(const Launcher *l)
{
	int			n = 0;

	for (int i = 0; i < nruns; i++)
		if (runs[i].jail.served && strcmp(runs[i].image, l->image) == 0 &&
			(runs[i].phase == RUN_STARTED || runs[i].phase == RUN_EXITED))
			n++;
	return n;
}

/* The launcher of an image ("": the host's), made if there is room. */
static Launcher *
launcher_for(const char *image)
{
	Launcher   *room = NULL;

	for (int i = 0; i < (int) lengthof(launchers); i++)
	{
		if (launchers[i].used && strcmp(launchers[i].image, image) == 0)
			return &launchers[i];
		if (!launchers[i].used && !room && (i == 0) == (image[0] == '\0'))
			room = &launchers[i];
	}
	if (room)
	{
		memset(room, 0, sizeof(*room));
		room->used = true;
		strlcpy(room->image, image, sizeof(room->image));
	}
	return room;
}

/*
 * Stop the launchers of images the store no longer has, once none of
 * their runs is in flight (images.c, after it read the store again).
 */
void
launchers_prune(void)
{
	for (int i = 1; i < (int) lengthof(launchers); i++)
	{
		Launcher   *l = &launchers[i];
		char		name[RUNNER_IMAGE_REF_LEN];
		char	   *at;

		if (!l->used)
			continue;
		strlcpy(name, l->image, sizeof(name));
		at = strchr(name, '@');
		if (at)
			*at = '\0';
		if ((at && images_find(name, at + 1)) || served_runs(l) > 0)
			continue;
		launcher_stop_one(l);
		l->used = false;
	}
}

/*
 * Start a launcher if it is wanted and not running; true when usable.
 * Its socket lives in run_dir (the local runner's: in the data directory),
 * not in the work directory: moving the work directory must not stop the
 * runs it has in flight.  But its prepared sandboxes were cloned with the mounts of their
 * time, and a new work directory may be a new mount they cannot see: after
 * a move, runs use the one-shot jail until the launcher's runs are over,
 * and the launcher is then restarted.  An image's launcher builds every
 * sandbox on it (--image) and its warm Python interpreters import the
 * modules the image names (its warm-modules), else warm_modules.
 */
static bool
launcher_ensure_for(Launcher *l, const RunnerImage *image)
{
	char		dir[MAXPGPATH];
	char		pool[16];
	char		warm_py[16];
	char		warm_js[16];
	char		warm_mem[32];
	char		warm[sizeof(l->warm)];
	const char *modules = image && image->warm_modules[0] ? image->warm_modules :
		runner_conf.warm_modules ? runner_conf.warm_modules : "";
	char	   *argv[] = {runner_conf.jail_path, "--serve", l->sock, "--pool", pool,
		"--warm-python", warm_py, "--warm-node", warm_js,
		"--warm-modules", (char *) modules,
		"--warm-memory", warm_mem, "--quiet",
		image ? "--image" : NULL, image ? (char *) image->dir : NULL, NULL};
	int			rc;

	snprintf(warm_py, sizeof(warm_py), "%d", runner_conf.warm_python);
	snprintf(warm_js, sizeof(warm_js), "%d", runner_conf.warm_node);
	snprintf(warm_mem, sizeof(warm_mem), "%dM", runner_conf.warm_memory_mb);
	snprintf(warm, sizeof(warm), "%s %s %s %s", warm_py, warm_js, warm_mem, modules);

	if (!runner_conf.jail_launcher)
	{
		launcher_stop_one(l);
		return false;
	}
	/* jail_path changed on reload: the launcher must follow. */
	if (l->pid > 0 && strcmp(l->path, runner_conf.jail_path) != 0)
		launcher_stop_one(l);
	if (l->pid > 0 && strcmp(l->root, workdir_root()) != 0)
	{
		if (served_runs(l) > 0)
			return false;
		launcher_stop_one(l);
	}
	/*
	 * The warm settings changed on reload: none of its interpreters is
	 * claimed from now on (they were started with the old settings, or
	 * the pool is off now), and its runs drain while new ones use the
	 * one-shot jail; then it is restarted with the new pool.  (Using its
	 * cold socket meanwhile would keep it busy for ever on a busy runner.)
	 */
	if (l->pid > 0 && strcmp(l->warm, warm) != 0)
	{
		if (l->warm_page)
			munmap(l->warm_page, sizeof(JailWarmPage));
		l->warm_page = NULL;
		if (served_runs(l) > 0)
			return false;
		launcher_stop_one(l);
	}
	if (launcher_alive(l))
		return true;
	strlcpy(l->path, runner_conf.jail_path, sizeof(l->path));
	strlcpy(l->root, workdir_root(), sizeof(l->root));
	strlcpy(l->warm, warm, sizeof(l->warm));

	strlcpy(dir, runner_conf.run_dir, sizeof(dir));
	/* an image's: named after its digest's first 12 digits (a socket path is short) */
	if (image)
		snprintf(l->sock, sizeof(l->sock), "%s/jail-%.12s.sock", dir, image->digest);
	else
		snprintf(l->sock, sizeof(l->sock), "%s/jail.sock", dir);
	(void) mkdir(dir, S_IRWXU);
	(void) unlink(l->sock);		/* a stale socket of a dead launcher */
	snprintf(pool, sizeof(pool), "%d", Max(runner_conf.slots, 1));

	rc = spawn_jail_process(&l->pid, argv, NULL, false);
	if (rc != 0)
	{
		errno = rc;
		runner_log(RLOG_WARNING, "could not start the resident jail launcher \"%s\": %m; using one-shot jails",
			 runner_conf.jail_path);
		l->pid = 0;
		return false;
	}
	if (!launcher_wait_ready(l))
	{
		runner_log(RLOG_WARNING, "the resident jail launcher%s%s did not come up; using one-shot jails",
				   image ? " of image " : "", l->image);
		launcher_stop_one(l);
		return false;
	}
	runner_log(RLOG_LOG, "resident jail launcher%s%s started (pid %d, socket \"%s\")",
			   image ? " of image " : "", l->image, (int) l->pid, l->sock);
	if (runner_conf.warm_python > 0 || runner_conf.warm_node > 0)
		l->warm_page = jail_wire_warm_map(l->sock, true);
	return true;
}

/* The host's launcher (at start, and before each run on the host's root). */
bool
launcher_ensure(void)
{
	Launcher   *l = launcher_for("");

	return l && launcher_ensure_for(l, NULL);
}

/* ----------------------------------------------------------------
 * Starting a run
 * ----------------------------------------------------------------
 */

/* The request as one launcher message (wire.c); false if it does not fit. */
static bool
request_message(const JailRequest *req, JailWireRequest *msg)
{
	for (int i = 0; i < req->n; i++)
		if (!jail_wire_request_add(msg, req->name[i]) ||
			(req->value[i] && !jail_wire_request_add(msg, req->value[i])))
			return false;
	return true;
}

/* The request's --language, or NULL */
static const char *
request_language(const JailRequest *req)
{
	for (int i = 0; i < req->n; i++)
		if (strcmp(req->name[i], "--language") == 0)
			return req->value[i];
	return NULL;
}

/*
 * Send one run to the launcher.  On success the run's stdout/stderr read
 * ends and the connection (as verdict_fd) are set up and true is returned;
 * false means "use the one-shot jail" (nothing was started).
 */
static bool
launch_served(Run *run, const RunnerImage *image, const JailRequest *req, const char *code_path,
			  int secrets_fd)
{
	static char buf[JAIL_WIRE_MAX];
	JailWireRequest msg;
	int			outp[NSTREAMS][2] = {{-1, -1}, {-1, -1}};
	int			fds[JAIL_WIRE_NFDS_MAX];
	int			codefd = -1;
	int			sock = -1;
	bool		sent = false;

	Launcher   *l = launcher_for(image ? run->image : "");

	/*
	 * An egress run is never warm (its sandbox is cloned for it, docs/jail.md
	 * "Warm interpreters"): claiming an interpreter for it would only drain
	 * the pool.
	 */
	if (!l || !launcher_ensure_for(l, image) ||
		(sock = launcher_connect(l, run->disk.egress ? NULL : request_language(req))) < 0)
		return false;
	codefd = open(code_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	jail_wire_request_init(&msg, buf);
	/* the secrets: the request's fourth descriptor (wire_protocol.h) */
	if (codefd >= 0 && request_message(req, &msg) &&
		(secrets_fd < 0 || (jail_wire_request_add(&msg, JAIL_WIRE_SECRETS_OPTION) &&
							jail_wire_request_add(&msg, JAIL_WIRE_SECRETS_INDEX))) &&
		pipe2(outp[0], O_CLOEXEC) == 0 && pipe2(outp[1], O_CLOEXEC) == 0)
	{
		fds[JAIL_WIRE_FD_CODE] = codefd;
		fds[JAIL_WIRE_FD_STDOUT] = outp[0][1];
		fds[JAIL_WIRE_FD_STDERR] = outp[1][1];
		fds[JAIL_WIRE_FD_SECRETS] = secrets_fd;
		sent = jail_wire_send(sock, msg.buf, msg.len, fds,
							  secrets_fd >= 0 ? JAIL_WIRE_NFDS_MAX : JAIL_WIRE_NFDS) == (ssize_t) msg.len;
	}
	close_fd(&codefd);
	close_fd(&outp[0][1]);
	close_fd(&outp[1][1]);
	if (!sent)
	{
		close_fd(&sock);
		close_fd(&outp[0][0]);
		close_fd(&outp[1][0]);
		return false;
	}
	run->out.fd[STREAM_STDOUT] = outp[0][0];
	run->out.fd[STREAM_STDERR] = outp[1][0];
	run->jail.verdict_fd = sock;
	run->jail.served = true;
	run->jail.pid = 0;
	run->jail.pidfd = -1;
	return true;
}

/* Start the one-shot jail; false with run->start_error set on failure. */
static bool
launch_oneshot(Run *run, const JailRequest *req, const char *code_path, int secrets_fd)
{
	char	   *argv[2 * MAX_JAIL_OPTIONS + 10];
	int			argc = 0;
	int			outp[NSTREAMS][2] = {{-1, -1}, {-1, -1}};
	int			vp[2] = {-1, -1};
	int			fds[4];
	int			rc;

	if (pipe2(outp[0], O_CLOEXEC) != 0 || pipe2(outp[1], O_CLOEXEC) != 0 ||
		pipe2(vp, O_CLOEXEC) != 0)
	{
		run->start_error = arena_printf(&run->arena, "could not create pipes for the jail: %m");
		rc = -1;
		goto out;
	}
	argv[argc++] = runner_conf.jail_path;
	for (int i = 0; i < req->n; i++)
	{
		argv[argc++] = (char *) req->name[i];
		if (req->value[i])
			argv[argc++] = (char *) req->value[i];
	}
	argv[argc++] = "--code-file";
	argv[argc++] = (char *) code_path;
	argv[argc++] = "--verdict-fd";
	argv[argc++] = "3";
	argv[argc++] = "--quiet";
	if (secrets_fd >= 0)
	{
		argv[argc++] = "--egress-secrets-fd";
		argv[argc++] = "4";
	}
	argv[argc] = NULL;

	fds[0] = outp[0][1];		/* stdout */
	fds[1] = outp[1][1];		/* stderr */
	fds[2] = vp[1];				/* the verdict, fd 3 */
	fds[3] = secrets_fd;		/* the secrets, fd 4 (or none) */
	rc = spawn_jail_process(&run->jail.pid, argv, fds, true);
	if (rc != 0)
	{
		errno = rc;
		run->start_error = arena_printf(&run->arena, "could not execute %s \"%s\": %m",
										runner_setting_name("jail_path"), runner_conf.jail_path);
		goto out;
	}
	run->jail.pidfd = pidfd_open(run->jail.pid, 0);
	if (run->jail.pidfd < 0)
		runner_log(RLOG_WARNING, "pidfd_open(%d) failed: %m; falling back to polling", (int) run->jail.pid);
	run->out.fd[STREAM_STDOUT] = outp[0][0];
	run->out.fd[STREAM_STDERR] = outp[1][0];
	run->jail.verdict_fd = vp[0];
	outp[0][0] = outp[1][0] = vp[0] = -1;	/* kept */
out:
	for (int st = 0; st < NSTREAMS; st++)
	{
		close_fd(&outp[st][0]);
		close_fd(&outp[st][1]);
	}
	close_fd(&vp[0]);
	close_fd(&vp[1]);
	return rc == 0;
}

/*
 * Start a prepared run's jail (through the launcher when it is on and
 * reachable); false with run->start_error set when it could not start.
 */
bool
jail_launch(Run *run, const char *code_path, int wall_s, int memory_mb, int pids)
{
	JailRequest req;
	const RunnerImage *image = NULL;
	int			secrets_fd = -1;
	char	   *err = NULL;
	bool		ok;

	/* a run on an image: the one of the store the claim named (images.c) */
	if (run->image[0])
	{
		char		name[RUNNER_IMAGE_REF_LEN];
		char	   *at;

		strlcpy(name, run->image, sizeof(name));
		at = strchr(name, '@');
		if (at)
			*at = '\0';
		(void) images_rescan();
		image = at ? images_find(name, at + 1) : NULL;
		if (!image)
		{
			run->start_error = arena_printf(&run->arena, "this runner does not hold the image %s",
											run->image);
			return false;
		}
	}
	request_build(&req, run, image, wall_s, memory_mb, pids);
	/* the values leave this process here, for the run's egress proxy */
	if (run->nsecrets > 0 && (secrets_fd = secrets_memfd(run, &err)) < 0)
	{
		run->start_error = arena_strdup(&run->arena, err);
		free(err);
		return false;
	}
	ok = (runner_conf.jail_launcher && launch_served(run, image, &req, code_path, secrets_fd)) ||
		launch_oneshot(run, &req, code_path, secrets_fd);
	close_fd(&secrets_fd);
	if (!ok)
		return false;
	for (int st = 0; st < NSTREAMS; st++)
		(void) fcntl(run->out.fd[st], F_SETFL, O_NONBLOCK);
	(void) fcntl(run->jail.verdict_fd, F_SETFL, O_NONBLOCK);
	run->jail.backstop = runner_now_ms() + (msec) wall_s * 1000 + BACKSTOP_GRACE_MS;
	return true;
}

/* ----------------------------------------------------------------
 * The end of a run
 * ----------------------------------------------------------------
 */

/* Take the launcher's answer (wire_protocol.h); a malformed one is none. */
static void
parse_served_answer(Run *run, const char *buf, int len)
{
	const char *field[JAIL_WIRE_ANSWER_NFIELDS];

	if (!jail_wire_split_answer(buf, len, field))
		return;
	run->jail.served_rc = atoi(field[JAIL_WIRE_ANSWER_RC]);
	resetStringInfo(&run->jail.verdict);
	appendStringInfoString(&run->jail.verdict, field[JAIL_WIRE_ANSWER_VERDICT]);
	run->jail.served_msg = arena_strdup(&run->arena, field[JAIL_WIRE_ANSWER_MESSAGE]);
}

/* Read what is there of the verdict; the launcher's EOF ends the run. */
void
jail_read_verdict(Run *run)
{
	static char buf[JAIL_WIRE_MAX];
	RunJail    *j = &run->jail;

	for (;;)
	{
		ssize_t		r = j->served ? recv(j->verdict_fd, buf, sizeof(buf), 0)
			: read(j->verdict_fd, buf, sizeof(buf));

		if (r > 0)
		{
			if (j->served && j->served_rc < 0)
				parse_served_answer(run, buf, (int) r);
			else if (!j->served && j->verdict.len < JAIL_WIRE_MAX)
				appendBinaryStringInfo(&j->verdict, buf, r);	/* one short line */
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		/* EOF (or an error); a served run's fence used this connection */
		if (j->served)
			fence_disarm(run);
		close_fd(&j->verdict_fd);
		if (j->served)
			run_exited(run);
		break;
	}
	/* Trim the trailing newline so the text casts cleanly to jsonb. */
	while (j->verdict.len > 0 &&
		   (j->verdict.data[j->verdict.len - 1] == '\n' ||
			j->verdict.data[j->verdict.len - 1] == '\r'))
		j->verdict.data[--j->verdict.len] = '\0';
}

/*
 * Reap a one-shot jail that exited.  It is looked at first without being
 * reaped: its fence is disarmed before its pid is freed and its pidfd
 * closed, never after (fence.c).
 */
void
jail_reap(Run *run)
{
	siginfo_t	si;
	int			status;
	pid_t		r;

	if (run->phase != RUN_STARTED || run->jail.served)
		return;
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, run->jail.pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0)
		return;					/* still running */
	fence_disarm(run);
	r = waitpid(run->jail.pid, &status, WNOHANG);
	if (r == run->jail.pid || (r < 0 && errno == ECHILD))
	{
		run->jail.wait_status = (r == run->jail.pid) ? status : 0;
		close_fd(&run->jail.pidfd);
		run_exited(run);
	}
}

/*
 * Signal a run's jail.  A served run: shutting our side asks the launcher
 * to stop it (it still answers, with a "killed" verdict); SIGKILL drops the
 * connection, which kills it at once.
 */
void
jail_signal(Run *run, int sig)
{
	RunJail    *j = &run->jail;

	if (run->phase != RUN_STARTED)
		return;
	if (j->served)
	{
		if (sig == SIGKILL)
		{
			fence_disarm(run);
			close_fd(&j->verdict_fd);
			run_exited(run);
		}
		else if (j->verdict_fd >= 0)
			(void) shutdown(j->verdict_fd, SHUT_WR);
		return;
	}
	/* never kill(0) or kill(-1): a pid we do not hold is nobody's to signal */
	if (j->pidfd >= 0)
		(void) pidfd_send_signal(j->pidfd, sig, NULL, 0);
	else if (j->pid > 0)
		(void) kill(j->pid, sig);
}

/* Kill a one-shot jail and wait for it (shutdown, a fence). */
void
jail_kill_wait(Run *run)
{
	bool		oneshot = run->phase == RUN_STARTED && !run->jail.served;

	jail_signal(run, SIGKILL);
	fence_disarm(run);			/* before the pid is reaped */
	if (oneshot && run->jail.pid > 0)
		(void) waitpid(run->jail.pid, NULL, 0);
}

/*
 * The failure of ours that ended the run, or NULL when the jail answered;
 * *jail_status gets the jail's exit status (or the launcher's rc).
 */
char *
jail_failure(Run *run, int *jail_status)
{
	RunJail    *j = &run->jail;

	*jail_status = -1;
	if (run->start_error)
		return run->start_error;
	if (j->served)
	{
		if (j->killed_by_us)
			return arena_printf(&run->arena, "the sandbox was killed by the runner after its deadline");
		if (j->served_rc < 0)
			return arena_printf(&run->arena, "the resident jail launcher closed the connection without a verdict");
		if (j->served_rc == JAIL_WIRE_RC_REFUSED)
			return arena_printf(&run->arena, "the resident jail launcher refused the request: %s",
							j->served_msg ? j->served_msg : "");
		*jail_status = j->served_rc;
		return NULL;
	}
	if (WIFEXITED(j->wait_status))
		*jail_status = WEXITSTATUS(j->wait_status);
	else if (WIFSIGNALED(j->wait_status))
	{
		*jail_status = 128 + WTERMSIG(j->wait_status);
		if (j->killed_by_us)
			return arena_printf(&run->arena, "sandbox-jail killed by the runner after its deadline");
		return arena_printf(&run->arena, "sandbox-jail died of signal %d", WTERMSIG(j->wait_status));
	}
	return NULL;
}

void
jail_close(Run *run)
{
	fence_disarm(run);
	close_fd(&run->out.fd[STREAM_STDOUT]);
	close_fd(&run->out.fd[STREAM_STDERR]);
	close_fd(&run->jail.verdict_fd);
	close_fd(&run->jail.pidfd);
}
