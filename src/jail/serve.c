/*-------------------------------------------------------------------------
 *
 * serve.c
 *	  The resident launcher: `sandbox-jail --serve SOCKET`.  A long-lived
 *	  process that takes run requests over a Unix socket and answers each
 *	  with a verdict, so that a run no longer pays for exec'ing the jail,
 *	  compiling the filter, creating a network namespace or moving a
 *	  process into a cgroup: all of that is done ahead of time.
 *
 * Rooms and who may touch what:
 *	  launcher (this file's main loop)
 *			owns the listening socket and a pool of workers; never reads a
 *			request, never touches a payload.  For each worker it creates
 *			a fresh cgroup slot "srv-<launcher pid>-<serial>" under the
 *			cgroup parent, forks the worker, and when the worker exits
 *			removes the slot and forks a replacement (the refill happens
 *			after a run, off the next request's path).
 *	  worker (one per run, forked in advance)
 *			before any request: moves itself into its slot (the slow
 *			cgroup v1 write, now off the critical path) and unshares a
 *			fresh network namespace with loopback up (unprivileged: inside
 *			a user namespace of its own that maps only its own ids).  Then
 *			it accepts ONE connection, validates the request (wire format
 *			in docs/jail.md), and runs it with jail_run(), exactly as a
 *			one-shot jail would, except that the sandbox is born in the
 *			slot and in the worker's netns instead of creating its own.
 *			It sends the verdict and exits; its netns and slot die with it.
 *	  sandbox
 *			as in the one-shot mode (sandbox.c): its own user, pid, mount,
 *			ipc, uts and cgroup namespaces, every run.
 * So nothing is shared between two runs but the launcher itself: not a
 * namespace, not a cgroup, not a process (docs/security.md).
 *
 * Lifetime: the launcher dies with its parent (PR_SET_PDEATHSIG) unless
 * --keep-running; each worker dies with the launcher, each sandbox with
 * its worker, so killing the launcher kills every run.  SIGTERM, SIGINT,
 * SIGHUP or SIGQUIT to the launcher: SIGKILL to every worker, slots
 * removed, socket unlinked, exit 0.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

#define MAX_POOL		64
#define MAX_REQ_ARGS	256
#define WORKER_PREP_FAILED	3	/* exit code: the netns could not be made */
#define REQUEST_TIMEOUT_S	10	/* from accept to the whole request */

typedef struct ServeConfig
{
	const char *path;
	int			pool;
	const char *cgroup_parent;
	bool		require_cgroup;
	bool		keep_running;
	bool		quiet;
} ServeConfig;

typedef struct Worker
{
	pid_t		pid;			/* 0: empty place in the pool */
	bool		has_slot;
	JailCgroup	slot;
} Worker;

/* Launcher state; a worker gets a copy by fork and uses it read-only. */
static ServeConfig cfg;
static Worker workers[MAX_POOL];
static JailFilter filter;
static JailFilter init_filter;
static JailOptions slot_defaults;
static bool slots_enabled;
static bool netns_pool = true;
static pid_t launcher_pid;
static uid_t launcher_uid;
static unsigned long serial;

/*
 * {uid, gid} of the last run's outer ids, in a page shared by the launcher
 * and its workers: root's workers map their prespawned sandbox to these
 * (see jail_prespawn), the run that follows checks and writes them.  Only
 * ever a guess: a wrong one costs a fresh clone, never a wrong mapping.
 */
static uint32_t *owner_hint;

/* Options that only the client side or the launcher itself may use. */
static const char *const run_options[] = {
	"--language", "--exec", "--workspace", "--ro-bind", "--wall-time", "--cpu-time",
	"--memory", "--pids", "--output-limit", "--file-size",
	"--workspace-size", "--workspace-entries", "--tmp-size", "--cgroup-parent", "--require-cgroup",
	NULL
};

static int
parse_serve_args(int argc, char **argv)
{
	memset(&cfg, 0, sizeof(cfg));
	cfg.pool = 4;
	if (argc < 3 || argv[2][0] == '\0' || argv[2][0] == '-')
	{
		fprintf(stderr, "sandbox-jail: --serve needs a socket path\n");
		return -1;
	}
	cfg.path = argv[2];
	for (int i = 3; i < argc; i++)
	{
		const char *a = argv[i];

		if (strcmp(a, "--pool") == 0 && i + 1 < argc)
		{
			char	   *end;
			long		v = strtol(argv[++i], &end, 10);

			if (*end || v < 1 || v > MAX_POOL)
			{
				fprintf(stderr, "sandbox-jail: bad --pool \"%s\" (1..%d)\n", argv[i], MAX_POOL);
				return -1;
			}
			cfg.pool = (int) v;
		}
		else if (strcmp(a, "--cgroup-parent") == 0 && i + 1 < argc)
			cfg.cgroup_parent = argv[++i];
		else if (strcmp(a, "--require-cgroup") == 0)
			cfg.require_cgroup = true;
		else if (strcmp(a, "--keep-running") == 0)
			cfg.keep_running = true;
		else if (strcmp(a, "--quiet") == 0)
			cfg.quiet = true;
		else
		{
			fprintf(stderr, "sandbox-jail: unknown --serve option: %s\n", a);
			return -1;
		}
	}
	if (strlen(cfg.path) >= sizeof(((struct sockaddr_un *) 0)->sun_path) - 16)
	{
		fprintf(stderr, "sandbox-jail: socket path too long: %s\n", cfg.path);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- worker */

/* Answer a refused request (exit code 2) and end the worker. */
static void refuse(int conn, const char *fmt,...) __attribute__((noreturn, format(printf, 2, 3)));

static void
send_response(int conn, int rc, const char *verdict, const char *msg)
{
	char		buf[JAIL_VERDICT_MAX + JAIL_ERRLEN + 64];
	int			n;

	n = snprintf(buf, sizeof(buf), "%s%c%d%c%s%c%s%c", JAIL_WIRE_MAGIC, 0,
				 rc, 0, verdict, 0, msg, 0);
	if (n > 0 && (size_t) n < sizeof(buf))
		(void) jail_wire_send(conn, buf, n, NULL, 0);
}

static void
refuse(int conn, const char *fmt,...)
{
	char		msg[JAIL_ERRLEN];
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jail_warn("refused a request: %s", msg);
	send_response(conn, JAIL_EXIT_USAGE, "", msg);
	_exit(0);
}

static bool
is_run_option(const char *arg)
{
	size_t		n = strcspn(arg, "=");

	for (int i = 0; run_options[i]; i++)
		if (strlen(run_options[i]) == n && strncmp(arg, run_options[i], n) == 0)
			return true;
	return false;
}

/*
 * Read the code from the request's descriptor.  Only a regular file
 * (a memfd, normally) is accepted: a pipe or socket could keep this
 * worker waiting forever on a client that never writes.
 */
static char *
read_request_code(int conn, int fd, size_t *len)
{
	struct stat st;
	char	   *buf;
	size_t		off = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		refuse(conn, "the code descriptor must be a regular file or memfd");
	if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY)
		refuse(conn, "the code descriptor is not readable");
	if (st.st_size > JAIL_MAX_CODE)
		refuse(conn, "code is larger than %d bytes", JAIL_MAX_CODE);
	buf = malloc(st.st_size + 1);
	if (!buf)
		refuse(conn, "out of memory");
	while (off < (size_t) st.st_size)
	{
		ssize_t		r = pread(fd, buf + off, st.st_size - off, off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;				/* shrunk under us: run what is there */
		off += r;
	}
	*len = off;
	return buf;
}

static void
check_output_fd(int conn, int fd, const char *name)
{
	int			fl = fcntl(fd, F_GETFL);

	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
		refuse(conn, "the %s descriptor is not writable", name);
}

/*
 * One request, start to end.  The launcher's socket is reachable only by
 * its owner (mode 0600, and the peer's uid is checked below), so nothing
 * here crosses a privilege boundary; it is validated as if it did, since
 * a confused caller is still a caller.
 */
static void handle_request(int conn, JailCgroup *slot, bool netns_ready,
						   JailPrespawn *pre) __attribute__((noreturn));

/* The request for a prespawned sandbox: u32 length, options, code. */
static void
fill_request(int conn, JailPrespawn *pre, const char *args, uint32_t alen,
			 const char *code, size_t code_len)
{
	if (pwrite(pre->reqfd, &alen, sizeof(alen), 0) != sizeof(alen) ||
		pwrite(pre->reqfd, args, alen, sizeof(alen)) != (ssize_t) alen ||
		(code_len > 0 &&
		 pwrite(pre->reqfd, code, code_len, sizeof(alen) + alen) != (ssize_t) code_len))
		refuse(conn, "could not pass the request to the sandbox: %s", strerror(errno));
}

static void
handle_request(int conn, JailCgroup *slot, bool netns_ready, JailPrespawn *pre)
{
	static char buf[JAIL_WIRE_MAX + 1];
	static char raw[JAIL_WIRE_MAX + 1];	/* the options, before parsing */
	uint32_t	raw_len = 0;
	char	   *args[MAX_REQ_ARGS + 2];
	int			fds[JAIL_WIRE_NFDS];
	int			nfds = 0;
	int			nargs = 0;
	bool		truncated;
	ssize_t		n;
	struct ucred cred;
	socklen_t	credlen = sizeof(cred);
	JailOptions opts;
	JailResult	res;
	JailRunEnv	env;
	char		err[JAIL_ERRLEN] = "";
	char		line[JAIL_VERDICT_MAX];
	char	   *code;
	size_t		code_len = 0;
	int			rc;

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) < 0 ||
		cred.uid != launcher_uid)
		refuse(conn, "peer uid %d is not the launcher's owner", (int) cred.uid);

	/*
	 * A caller that connects and never sends would hold this worker (one
	 * place in the pool) forever.  Only the request read is bounded; the
	 * run itself watches the connection with poll.
	 */
	{
		struct timeval tv = {.tv_sec = REQUEST_TIMEOUT_S};

		setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	n = jail_wire_recv(conn, buf, JAIL_WIRE_MAX, fds, JAIL_WIRE_NFDS, &nfds, &truncated);
	JAIL_TRACE("request received");
	if (n == 0)
		_exit(0);				/* connected and left: nothing to do */
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		refuse(conn, "no request within %d s of connecting", REQUEST_TIMEOUT_S);
	if (n < 0)
		refuse(conn, "could not receive the request: %s", strerror(errno));
	if (truncated)
		refuse(conn, "request larger than %d bytes, or with unexpected control data", JAIL_WIRE_MAX);
	if (nfds != JAIL_WIRE_NFDS)
		refuse(conn, "request must carry exactly %d descriptors (code, stdout, stderr), got %d",
			   JAIL_WIRE_NFDS, nfds);
	if (buf[n - 1] != '\0')
		refuse(conn, "request is not a list of NUL-terminated strings");
	/* parsing writes into the strings (SRC:DST); keep them as they came */
	raw_len = n - strnlen(buf, n) - 1;
	memcpy(raw, buf + (n - raw_len), raw_len);

	/* "sandbox-jail/1\0" then the run options, one string each */
	args[nargs++] = "sandbox-jail";
	for (char *p = buf; p < buf + n; p += strlen(p) + 1)
	{
		if (p == buf)
		{
			if (strcmp(p, JAIL_WIRE_MAGIC) != 0)
				refuse(conn, "unknown protocol (want %s)", JAIL_WIRE_MAGIC);
			continue;
		}
		if (nargs > MAX_REQ_ARGS)
			refuse(conn, "too many request arguments (at most %d)", MAX_REQ_ARGS);
		/* exact long names only: getopt would take abbreviations */
		if (p[0] == '-' && !is_run_option(p))
			refuse(conn, "option not allowed in a request: %s", p);
		args[nargs++] = p;
	}
	args[nargs] = NULL;
	if (jail_parse_options(nargs, args, &opts, false) < 0)
		refuse(conn, "%s", jail_option_error);
	if (opts.workspace[0] != '/')
		refuse(conn, "the workspace path must be absolute");
	opts.quiet = cfg.quiet;

	check_output_fd(conn, fds[1], "stdout");
	check_output_fd(conn, fds[2], "stderr");
	code = read_request_code(conn, fds[0], &code_len);
	close(fds[0]);
	JAIL_TRACE("request checked");

	memset(&res, 0, sizeof(res));
	memset(&env, 0, sizeof(env));
	env.stdout_fd = fds[1];
	env.stderr_fd = fds[2];
	env.cancel_fd = conn;
	env.netns_ready = netns_ready;
	env.filter = &filter;
	env.slot_parent = cfg.cgroup_parent;
	env.owner_hint = owner_hint;
	env.defer_reap = true;

	/*
	 * The slot gets this run's limits even when the run uses a cgroup of
	 * its own (a request naming another parent): the sandbox is born in
	 * the slot either way.  One more pid for this worker.
	 */
	if (slot && jail_cgroup_set_limits(slot, &opts, 1, err) < 0)
	{
		jail_verdict_setup_error(&res, err);
		res.cgroup = slot->mode;
		rc = -1;
	}
	else
	{
		env.slot = slot;
		if (pre)
		{
			fill_request(conn, pre, raw, raw_len, code, code_len);
			env.pre = pre;
		}
		rc = jail_run(&opts, code, code_len, &env, &res);
	}
	if (rc < 0)
		jail_warn("setup error: %s", res.setup_error);
	JAIL_TRACE("run returned");
	if (jail_format_verdict(line, sizeof(line), &res) < 0)
		line[0] = '\0';
	send_response(conn, rc < 0 ? JAIL_EXIT_SETUP : JAIL_EXIT_OK, line,
				  rc < 0 ? res.setup_error : "");
	JAIL_TRACE("verdict sent");
	jail_run_reap();
	_exit(0);
}

/*
 * A fresh network namespace for the coming run, loopback up.  Root can
 * unshare one directly.  Anyone else needs a user namespace to own it;
 * that one maps only our own uid and gid onto themselves, so the ids the
 * run's own user namespace maps to stay what a one-shot run maps to.
 * Returns false when none could be made (the sandbox then makes its own);
 * a half-made one ends the worker.
 */
static bool
prepare_netns(void)
{
	char		err[JAIL_ERRLEN] = "";

	if (geteuid() == 0)
	{
		if (unshare(CLONE_NEWNET) < 0)
			return false;
	}
	else
	{
		uid_t		uid = geteuid();
		gid_t		gid = getegid();
		char		map[64];

		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
			return false;
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) uid, (unsigned) uid);
		if (jail_write_file("/proc/self/setgroups", "deny") < 0 ||
			jail_write_file("/proc/self/uid_map", map) < 0)
			_exit(WORKER_PREP_FAILED);
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) gid, (unsigned) gid);
		if (jail_write_file("/proc/self/gid_map", map) < 0)
			_exit(WORKER_PREP_FAILED);
		/* a credential change clears the death signal */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != launcher_pid)
			_exit(1);
	}
	if (jail_loopback_up(err) < 0)
	{
		jail_warn("worker: %s", err);
		_exit(WORKER_PREP_FAILED);
	}
	return true;
}

static void worker_main(int lfd, Worker *w) __attribute__((noreturn));

static void
worker_main(int lfd, Worker *w)
{
	JailCgroup *slot = NULL;
	char		err[JAIL_ERRLEN] = "";
	bool		netns_ready = false;
	sigset_t	none;
	JailPrespawn pre;
	JailRunEnv	penv;
	bool		have_pre;
	int			conn;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != launcher_pid)
		_exit(1);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGCHLD, SIG_DFL);

	/*
	 * Into the slot first (on cgroup v1 the write can wait ~10 ms for an
	 * RCU grace period; nobody is waiting on us yet).  Every process the
	 * sandbox ever has is born in it.
	 */
	if (w->has_slot)
	{
		if (jail_cgroup_attach(&w->slot, getpid(), err) == 0)
			slot = &w->slot;
		else
			jail_warn("worker: %s", err);
	}
	if (netns_pool)
		netns_ready = prepare_netns();

	/*
	 * And the sandbox itself, as far as it does not depend on the request:
	 * cloned into its namespaces (in the slot, in our netns), waiting.
	 */
	memset(&penv, 0, sizeof(penv));
	penv.filter = &filter;
	penv.init_filter = &init_filter;
	penv.defer_reap = true;		/* as handle_request's runs */
	penv.netns_ready = netns_ready;
	penv.owner_hint = owner_hint;
	have_pre = jail_prespawn(&pre, &penv, err) == 0;
	if (!have_pre)
		jail_warn("worker: could not clone a sandbox ahead: %s", err);

	/*
	 * What the slot counted so far (our own set-up, the sandbox's fixed
	 * root) is not the run's: start its peak memory and CPU from zero.
	 * The slot was made with the default limits (and one pid for us),
	 * which a request asking for the same then keeps without a write.
	 */
	if (slot)
	{
		jail_cgroup_reset_counters(slot);
		jail_cgroup_open_stats(slot);
	}

	do
		conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	while (conn < 0 && (errno == EINTR || errno == ECONNABORTED));
	if (conn < 0)
		_exit(1);
	JAIL_TRACE("accepted");
	close(lfd);
	handle_request(conn, slot, netns_ready, have_pre ? &pre : NULL);
}

/* -------------------------------------------------------------- launcher */

static void
spawn_worker(int lfd, int sigfd, Worker *w)
{
	char		name[64];
	char		err[JAIL_ERRLEN] = "";

	memset(w, 0, sizeof(*w));
	w->slot.v2_dirfd = -1;

	/*
	 * Tried even when the launcher started without slots: the delegated
	 * subtree may appear later (on a systemd host it is made by the
	 * service's ExecStartPost, which may run after the launcher started;
	 * jail-host-setup.sh).  Off the run's path: this is the refill.
	 */
	snprintf(name, sizeof(name), "srv-%d-%lu", (int) launcher_pid, serial++);
	if (jail_cgroup_create_named(&slot_defaults, name, &w->slot, err) == 0)
	{
		w->has_slot = true;
		if (!slots_enabled)
			jail_warn("cgroup slots are available now (%s)", w->slot.mode == CGROUP_V2 ?
					  w->slot.v2_dir : w->slot.mem_dir);
		slots_enabled = true;
	}
	else
	{
		if (slots_enabled)
			jail_warn("could not create a cgroup slot: %s", err);
		jail_cgroup_destroy(&w->slot);
	}
	w->pid = fork();
	if (w->pid == 0)
	{
		close(sigfd);
		worker_main(lfd, w);
	}
	if (w->pid < 0)
	{
		jail_warn("fork worker: %s", strerror(errno));
		w->pid = 0;
		if (w->has_slot)
			jail_cgroup_destroy(&w->slot);
		w->has_slot = false;
	}
}

static void
reap_workers(void)
{
	int			status;
	pid_t		pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		for (int i = 0; i < cfg.pool; i++)
		{
			if (workers[i].pid != pid)
				continue;
			workers[i].pid = 0;
			if (workers[i].has_slot)
				jail_cgroup_destroy(&workers[i].slot);
			workers[i].has_slot = false;
			if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_PREP_FAILED &&
				netns_pool)
			{
				jail_warn("network namespace pool disabled: a worker could not prepare one");
				netns_pool = false;
			}
		}
	}
}

/* Bind under a temporary name, then rename: the path appears listening. */
static int
open_socket(char *err)
{
	struct sockaddr_un sa;
	struct stat st;
	mode_t		old;
	int			fd;

	if (lstat(cfg.path, &st) == 0)
	{
		jail_seterr(err, "%s already exists (remove a stale socket first)", cfg.path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		jail_seterr(err, "socket: %s", strerror(errno));
		return -1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.%d", cfg.path, (int) getpid());
	unlink(sa.sun_path);
	old = umask(0077);
	if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
	{
		jail_seterr(err, "bind %s: %s", sa.sun_path, strerror(errno));
		umask(old);
		close(fd);
		return -1;
	}
	umask(old);
	if (chmod(sa.sun_path, 0600) < 0 || listen(fd, 128) < 0 ||
		rename(sa.sun_path, cfg.path) < 0)
	{
		jail_seterr(err, "listen on %s: %s", cfg.path, strerror(errno));
		unlink(sa.sun_path);
		close(fd);
		return -1;
	}
	return fd;
}

static void
shutdown_pool(void)
{
	for (int i = 0; i < cfg.pool; i++)
		if (workers[i].pid > 0)
			kill(workers[i].pid, SIGKILL);
	for (int i = 0; i < cfg.pool; i++)
	{
		if (workers[i].pid > 0)
			waitpid(workers[i].pid, NULL, 0);
		workers[i].pid = 0;
		if (workers[i].has_slot)
			jail_cgroup_destroy(&workers[i].slot);
		workers[i].has_slot = false;
	}
}

int
jail_serve_main(int argc, char **argv)
{
	char	   *dargv[] = {"sandbox-jail", "--language", "shell", "--workspace", "/", NULL};
	char		err[JAIL_ERRLEN] = "";
	sigset_t	mask;
	int			sigfd;
	int			lfd;
	pid_t		ppid = getppid();

	if (parse_serve_args(argc, argv) < 0)
	{
		jail_usage(stderr);
		return JAIL_EXIT_USAGE;
	}
	jail_quiet = cfg.quiet;
	launcher_pid = getpid();
#ifdef JAIL_TIMING
	jail_trace_init();
#endif
	launcher_uid = geteuid();

	if (!cfg.keep_running)
	{
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != ppid)
			return JAIL_EXIT_SETUP;
	}
	signal(SIGPIPE, SIG_IGN);
	if (geteuid() == 0 && setgroups(0, NULL) < 0)
	{
		fprintf(stderr, "sandbox-jail: setgroups: %s\n", strerror(errno));
		return JAIL_EXIT_SETUP;
	}

	/* The defaults a slot is created with; each run sets its own. */
	if (jail_parse_options(5, dargv, &slot_defaults, false) < 0)
		return JAIL_EXIT_SETUP;
	slot_defaults.cgroup_parent = cfg.cgroup_parent;
	slot_defaults.pids += 1;	/* the worker that sits in the slot */

	if (jail_filter_get(&filter, FILTER_PAYLOAD, err) < 0 ||
		jail_filter_get(&init_filter, FILTER_INIT, err) < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", err);
		return JAIL_EXIT_SETUP;
	}
	owner_hint = mmap(NULL, 2 * sizeof(uint32_t), PROT_READ | PROT_WRITE,
					  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (owner_hint == MAP_FAILED)
		owner_hint = NULL;		/* root's runs then always guess nobody */

	/* One trial slot decides whether runs get cgroups at all. */
	{
		JailCgroup	probe;
		char		name[64];

		snprintf(name, sizeof(name), "srv-%d-probe", (int) launcher_pid);
		slots_enabled = jail_cgroup_create_named(&slot_defaults, name, &probe, err) == 0;
		jail_cgroup_destroy(&probe);
		if (!slots_enabled)
		{
			if (cfg.require_cgroup)
			{
				fprintf(stderr, "sandbox-jail: %s\n", err);
				return JAIL_EXIT_SETUP;
			}
			jail_warn("no cgroup slots (%s): runs use their own cgroup or rlimits", err);
		}
	}

	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sigfd < 0)
	{
		fprintf(stderr, "sandbox-jail: signalfd: %s\n", strerror(errno));
		return JAIL_EXIT_SETUP;
	}

	lfd = open_socket(err);
	if (lfd < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", err);
		return JAIL_EXIT_SETUP;
	}

	for (;;)
	{
		struct pollfd pfd = {.fd = sigfd,.events = POLLIN};
		struct signalfd_siginfo si;
		bool		missing = false;

		/* refill: a worker that ran has exited, its place is empty */
		for (int i = 0; i < cfg.pool; i++)
			if (workers[i].pid == 0)
				spawn_worker(lfd, sigfd, &workers[i]);
		for (int i = 0; i < cfg.pool; i++)
			if (workers[i].pid == 0)
				missing = true;

		if (poll(&pfd, 1, missing ? 200 : -1) < 0 && errno != EINTR)
			break;
		while (read(sigfd, &si, sizeof(si)) == sizeof(si))
		{
			if (si.ssi_signo != SIGCHLD)
			{
				/* asked to stop: finish the clean-up even if our parent
				 * goes away meanwhile (its death signal would cut it) */
				prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
				shutdown_pool();
				unlink(cfg.path);
#ifdef JAIL_TIMING
				jail_trace_dump();
#endif
				return JAIL_EXIT_OK;
			}
		}
		reap_workers();
	}
	shutdown_pool();
	unlink(cfg.path);
	return JAIL_EXIT_SETUP;
}
