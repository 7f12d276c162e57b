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
#define MAX_REQ_ARGS	JAIL_WIRE_MAX_ARGS
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

/* One request, received and checked: what the run is made of. */
typedef struct Request
{
	JailOptions opts;
	int			fds[JAIL_WIRE_NFDS];	/* code, stdout, stderr */
	char	   *code;
	size_t		code_len;
	const char *raw;			/* the options as they came (for a sandbox */
	uint32_t	raw_len;		/* cloned ahead, which parses them again) */
} Request;

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

/* Answer a refused request (exit code 2); the worker then ends. */
static void
refuse(int conn, const char *msg)
{
	jail_warn("refused a request: %s", msg);
	send_response(conn, JAIL_EXIT_USAGE, "", msg);
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
 * The launcher's socket is reachable only by its owner (mode 0600), and
 * the peer's uid is checked here too.
 */
static int
check_peer(int conn, char *msg)
{
	struct ucred cred;
	socklen_t	credlen = sizeof(cred);

	if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) < 0 ||
		cred.uid != launcher_uid)
	{
		jail_seterr(msg, "peer uid %d is not the launcher's owner", (int) cred.uid);
		return -1;
	}
	return 0;
}

/*
 * The request's one message, into buf: its length; 0 when the caller
 * connected and left; -1 with msg when it cannot be taken.  A caller that
 * connects and never sends would hold this worker (one place in the pool)
 * forever: only the request read is bounded, the run itself watches the
 * connection with poll.
 */
static ssize_t
receive_request(int conn, char *buf, int *fds, char *msg)
{
	struct timeval tv = {.tv_sec = REQUEST_TIMEOUT_S};
	bool		truncated;
	int			nfds = 0;
	ssize_t		n;

	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = jail_wire_recv(conn, buf, JAIL_WIRE_MAX, fds, JAIL_WIRE_NFDS, &nfds, &truncated);
	JAIL_TRACE("request received");
	if (n == 0)
		return 0;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		jail_seterr(msg, "no request within %d s of connecting", REQUEST_TIMEOUT_S);
	else if (n < 0)
		jail_seterr(msg, "could not receive the request: %s", strerror(errno));
	else if (truncated)
		jail_seterr(msg, "request larger than %d bytes, or with unexpected control data",
					JAIL_WIRE_MAX);
	else if (nfds != JAIL_WIRE_NFDS)
		jail_seterr(msg, "request must carry exactly %d descriptors (code, stdout, stderr), got %d",
					JAIL_WIRE_NFDS, nfds);
	else if (buf[n - 1] != '\0')
		jail_seterr(msg, "request is not a list of NUL-terminated strings");
	else
		return n;
	return -1;
}

/*
 * "sandbox-jail/1\0" then the run options, one string each, into
 * rq->opts.  Parsing writes into the strings (SRC:DST), so a copy of the
 * options as they came is kept first (raw).
 */
static int
parse_request(char *buf, ssize_t n, Request *rq, char *msg)
{
	static char raw[JAIL_WIRE_MAX + 1];
	char	   *args[MAX_REQ_ARGS + 2];
	int			nargs = 0;

	rq->raw_len = n - strnlen(buf, n) - 1;
	memcpy(raw, buf + (n - rq->raw_len), rq->raw_len);
	rq->raw = raw;

	args[nargs++] = "sandbox-jail";
	for (char *p = buf; p < buf + n; p += strlen(p) + 1)
	{
		if (p == buf)
		{
			if (strcmp(p, JAIL_WIRE_MAGIC) != 0)
			{
				jail_seterr(msg, "unknown protocol (want %s)", JAIL_WIRE_MAGIC);
				return -1;
			}
			continue;
		}
		if (nargs > MAX_REQ_ARGS)
		{
			jail_seterr(msg, "too many request arguments (at most %d)", MAX_REQ_ARGS);
			return -1;
		}
		/* exact long names only: getopt would take abbreviations */
		if (p[0] == '-' && !is_run_option(p))
		{
			jail_seterr(msg, "option not allowed in a request: %s", p);
			return -1;
		}
		args[nargs++] = p;
	}
	args[nargs] = NULL;
	if (jail_parse_options(nargs, args, &rq->opts, false) < 0)
	{
		jail_seterr(msg, "%s", jail_option_error);
		return -1;
	}
	if (rq->opts.workspace[0] != '/')
	{
		jail_seterr(msg, "the workspace path must be absolute");
		return -1;
	}
	rq->opts.quiet = cfg.quiet;
	return 0;
}

static int
check_output_fd(int fd, const char *name, char *msg)
{
	int			fl = fcntl(fd, F_GETFL);

	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY)
	{
		jail_seterr(msg, "the %s descriptor is not writable", name);
		return -1;
	}
	return 0;
}

/*
 * Read the code from the request's descriptor.  Only a regular file
 * (a memfd, normally) is accepted: a pipe or socket could keep this
 * worker waiting forever on a client that never writes.
 */
static int
read_request_code(int fd, Request *rq, char *msg)
{
	struct stat st;
	size_t		off = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		jail_seterr(msg, "the code descriptor must be a regular file or memfd");
	else if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY)
		jail_seterr(msg, "the code descriptor is not readable");
	else if (st.st_size > JAIL_MAX_CODE)
		jail_seterr(msg, "code is larger than %d bytes", JAIL_MAX_CODE);
	else if (!(rq->code = malloc(st.st_size + 1)))
		jail_seterr(msg, "out of memory");
	else
	{
		while (off < (size_t) st.st_size)
		{
			ssize_t		r = pread(fd, rq->code + off, st.st_size - off, off);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;			/* shrunk under us: run what is there */
			off += r;
		}
		rq->code_len = off;
		return 0;
	}
	return -1;
}

/* The request for a prespawned sandbox: u32 length, options, code. */
static int
fill_request(JailPrespawn *pre, const Request *rq, char *msg)
{
	uint32_t	alen = rq->raw_len;

	if (pwrite(pre->reqfd, &alen, sizeof(alen), 0) != sizeof(alen) ||
		pwrite(pre->reqfd, rq->raw, alen, sizeof(alen)) != (ssize_t) alen ||
		(rq->code_len > 0 &&
		 pwrite(pre->reqfd, rq->code, rq->code_len, sizeof(alen) + alen) != (ssize_t) rq->code_len))
	{
		jail_seterr(msg, "could not pass the request to the sandbox: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Run a checked request with jail_run and answer with its verdict.  The
 * slot gets this run's limits even when the run uses a cgroup of its own
 * (a request naming another parent): the sandbox is born in the slot
 * either way.  One more pid for this worker.
 */
static void
run_request(int conn, Request *rq, JailCgroup *slot, bool netns_ready,
			JailPrespawn *pre)
{
	JailResult	res;
	JailRunEnv	env;
	char		err[JAIL_ERRLEN] = "";
	char		line[JAIL_VERDICT_MAX];
	int			rc;

	memset(&res, 0, sizeof(res));
	memset(&env, 0, sizeof(env));
	env.stdout_fd = rq->fds[1];
	env.stderr_fd = rq->fds[2];
	env.cancel_fd = conn;
	env.netns_ready = netns_ready;
	env.filter = &filter;
	env.slot_parent = cfg.cgroup_parent;
	env.owner_hint = owner_hint;
	env.defer_reap = true;

	if (slot && jail_cgroup_set_limits(slot, &rq->opts, 1, err) < 0)
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
			if (fill_request(pre, rq, err) < 0)
			{
				refuse(conn, err);
				return;
			}
			env.pre = pre;
		}
		rc = jail_run(&rq->opts, rq->code, rq->code_len, &env, &res);
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
}

/*
 * One request, start to end: received, checked, run, answered (or
 * refused).  Nothing here crosses a privilege boundary (check_peer); the
 * request is validated as if it did, since a confused caller is still a
 * caller.  The worker ends after it.
 */
static void
handle_request(int conn, JailCgroup *slot, bool netns_ready, JailPrespawn *pre)
{
	static char buf[JAIL_WIRE_MAX + 1];
	Request		rq;
	char		msg[JAIL_ERRLEN] = "";
	ssize_t		n;

	memset(&rq, 0, sizeof(rq));
	if (check_peer(conn, msg) < 0)
	{
		refuse(conn, msg);
		return;
	}
	n = receive_request(conn, buf, rq.fds, msg);
	if (n == 0)
		return;					/* connected and left: nothing to do */
	if (n < 0 ||
		parse_request(buf, n, &rq, msg) < 0 ||
		check_output_fd(rq.fds[1], "stdout", msg) < 0 ||
		check_output_fd(rq.fds[2], "stderr", msg) < 0 ||
		read_request_code(rq.fds[0], &rq, msg) < 0)
	{
		refuse(conn, msg);
		return;
	}
	close(rq.fds[0]);
	JAIL_TRACE("request checked");
	run_request(conn, &rq, slot, netns_ready, pre);
}

/*
 * A fresh network namespace for the coming run, loopback up.  Root can
 * unshare one directly.  Anyone else needs a user namespace to own it;
 * that one maps only our own uid and gid onto themselves, so the ids the
 * run's own user namespace maps to stay what a one-shot run maps to.
 * *ready false when none could be made (the sandbox then makes its own).
 * 0, or the exit status the worker ends with: WORKER_PREP_FAILED for a
 * half-made one, 1 if the launcher went away meanwhile.
 */
static int
prepare_netns(bool *ready)
{
	char		err[JAIL_ERRLEN] = "";

	*ready = false;
	if (geteuid() == 0)
	{
		if (unshare(CLONE_NEWNET) < 0)
			return 0;
	}
	else
	{
		uid_t		uid = geteuid();
		gid_t		gid = getegid();
		char		map[64];

		if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0)
			return 0;
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) uid, (unsigned) uid);
		if (jail_write_file("/proc/self/setgroups", "deny") < 0 ||
			jail_write_file("/proc/self/uid_map", map) < 0)
			return WORKER_PREP_FAILED;
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) gid, (unsigned) gid);
		if (jail_write_file("/proc/self/gid_map", map) < 0)
			return WORKER_PREP_FAILED;
		/* a credential change clears the death signal */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != launcher_pid)
			return 1;
	}
	if (jail_loopback_up(err) < 0)
	{
		jail_warn("worker: %s", err);
		return WORKER_PREP_FAILED;
	}
	*ready = true;
	return 0;
}

/*
 * And the sandbox itself, as far as it does not depend on the request:
 * cloned into its namespaces (in the slot, in our netns), waiting.
 */
static bool
prespawn_sandbox(JailPrespawn *pre, bool netns_ready)
{
	char		err[JAIL_ERRLEN] = "";
	JailRunEnv	penv;

	memset(&penv, 0, sizeof(penv));
	penv.filter = &filter;
	penv.init_filter = &init_filter;
	penv.defer_reap = true;		/* as run_request's runs */
	penv.netns_ready = netns_ready;
	penv.owner_hint = owner_hint;
	if (jail_prespawn(pre, &penv, err) == 0)
		return true;
	jail_warn("worker: could not clone a sandbox ahead: %s", err);
	return false;
}

/*
 * A worker's life, forked by spawn_worker: everything a run needs that
 * does not depend on the request, then one connection.  Returns the exit
 * status the worker ends with (spawn_worker's _exit).
 */
static int
worker_main(int lfd, Worker *w)
{
	JailCgroup *slot = NULL;
	char		err[JAIL_ERRLEN] = "";
	bool		netns_ready = false;
	sigset_t	none;
	JailPrespawn pre;
	bool		have_pre;
	int			conn;
	int			rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != launcher_pid)
		return 1;
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
	if (netns_pool && (rc = prepare_netns(&netns_ready)) != 0)
		return rc;
	have_pre = prespawn_sandbox(&pre, netns_ready);

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
		return 1;
	JAIL_TRACE("accepted");
	close(lfd);
	handle_request(conn, slot, netns_ready, have_pre ? &pre : NULL);
	return 0;
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
		/* the worker: never back into the launcher's loop */
		close(sigfd);
		_exit(worker_main(lfd, w));
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

/*
 * What every worker is forked with: the slot defaults, both compiled
 * filters, the shared owner hint; and one trial slot, which decides
 * whether runs get cgroups at all.  -1 with err: the launcher cannot run.
 */
static int
launcher_setup(char *err)
{
	char	   *dargv[] = {"sandbox-jail", "--language", "shell", "--workspace", "/", NULL};
	JailCgroup	probe;
	char		name[64];

	if (geteuid() == 0 && setgroups(0, NULL) < 0)
	{
		jail_seterr(err, "setgroups: %s", strerror(errno));
		return -1;
	}

	/* The defaults a slot is created with; each run sets its own. */
	if (jail_parse_options(5, dargv, &slot_defaults, false) < 0)
	{
		jail_seterr(err, "slot defaults: %s", jail_option_error);
		return -1;
	}
	slot_defaults.cgroup_parent = cfg.cgroup_parent;
	slot_defaults.pids += 1;	/* the worker that sits in the slot */

	if (jail_filter_get(&filter, FILTER_PAYLOAD, err) < 0 ||
		jail_filter_get(&init_filter, FILTER_INIT, err) < 0)
		return -1;
	owner_hint = mmap(NULL, 2 * sizeof(uint32_t), PROT_READ | PROT_WRITE,
					  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (owner_hint == MAP_FAILED)
		owner_hint = NULL;		/* root's runs then always guess nobody */

	snprintf(name, sizeof(name), "srv-%d-probe", (int) launcher_pid);
	slots_enabled = jail_cgroup_create_named(&slot_defaults, name, &probe, err) == 0;
	jail_cgroup_destroy(&probe);
	if (!slots_enabled)
	{
		if (cfg.require_cgroup)
			return -1;
		jail_warn("no cgroup slots (%s): runs use their own cgroup or rlimits", err);
		err[0] = '\0';
	}
	return 0;
}

/*
 * Keep the pool full until asked to stop: refill each place a worker
 * left, reap workers, and on a stop signal kill them all.  The exit code.
 */
static int
launcher_loop(int lfd, int sigfd)
{
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

/* `sandbox-jail --serve SOCKET ...`: the exit code, for main. */
int
jail_serve_main(int argc, char **argv)
{
	char		err[JAIL_ERRLEN] = "";
	int			sigfd;
	int			lfd;

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
	if (!cfg.keep_running && jail_die_with_parent() < 0)
		return JAIL_EXIT_SETUP;
	signal(SIGPIPE, SIG_IGN);
	if (launcher_setup(err) < 0 ||
		(sigfd = jail_stop_signals(SIGCHLD, err)) < 0 ||
		(lfd = open_socket(err)) < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", err);
		return JAIL_EXIT_SETUP;
	}
	return launcher_loop(lfd, sigfd);
}
