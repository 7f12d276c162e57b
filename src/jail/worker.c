/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  A resident launcher's worker (serve.c forks one per run, in advance):
 *	  what it prepares before any request, and the one request it serves.
 *
 * Before any request it moves itself into its cgroup slot (the slow
 * cgroup v1 write, now off the critical path), unshares a fresh network
 * namespace with loopback up (unprivileged: inside a user namespace of its
 * own that maps only its own ids) and clones the sandbox ahead
 * (jail_prespawn).  Then it accepts ONE connection, validates the request
 * (the wire format: wire_protocol.h, docs/jail.md), runs it with
 * jail_run() exactly as a one-shot jail would (but in the slot and the
 * worker's netns), sends the verdict and ends; its netns and slot die
 * with it.  It reads the launcher's state (JailLauncher) and never writes
 * it; it ends only by returning to the fork in serve.c, which _exits.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "jail.h"

#define MAX_REQ_ARGS		JAIL_WIRE_MAX_ARGS
#define REQUEST_TIMEOUT_S	10	/* each wait for the client: its request,
									 * after a refusal its close */

/* The options a request may carry; the others are the client's own. */
static const char *const run_options[] = {
	"--language", "--exec", "--workspace", "--ro-bind", "--wall-time", "--cpu-time",
	"--memory", "--pids", "--output-limit", "--file-size",
	"--workspace-size", "--workspace-entries", "--tmp-size", "--cgroup-parent", "--require-cgroup",
	"--egress-policy", "--egress-log", "--egress-resolver", "--egress-ca", "--egress-proxy",
	"--image", "--isolation", "--runsc",
	JAIL_WIRE_SECRETS_OPTION,
	NULL
};

/* The launcher this worker was forked by (jail_worker_main). */
static const JailLauncher *lc;

/* A warm worker's interpreter (NULL: a cold worker) and its page entry. */
static const JailWarm *warm;
static int	warm_index = -1;

/* One request, received and checked: what the run is made of. */
typedef struct Request
{
	JailOptions opts;
	int			fds[JAIL_WIRE_NFDS_MAX];	/* code, stdout, stderr[, secrets] */
	int			nfds;
	char	   *code;
	size_t		code_len;
	const char *raw;			/* the options as they came (for a sandbox */
	uint32_t	raw_len;		/* cloned ahead, which parses them again) */
} Request;

static void
send_answer(int conn, int rc, const char *verdict, const char *msg)
{
	char		buf[JAIL_VERDICT_MAX + JAIL_ERRLEN + 64];
	int			n = jail_wire_format_answer(buf, sizeof(buf), rc, verdict, msg);

	if (n > 0)
		(void) jail_wire_send(conn, buf, n, NULL, 0);
}

/*
 * Answer a refused request (JAIL_WIRE_RC_REFUSED); the worker then ends.
 * A refusal can come before the request was read (check_peer), and a
 * close with a message still unread resets the connection: the client
 * would get ECONNRESET (or EPIPE, sending late) instead of the answer.
 * So the connection stays until the client hangs up: its request, if it
 * was not read, is read now and dropped (jail_wire_recv closes descriptors
 * it does not return), then we wait for its EOF.  Each wait is bounded by
 * REQUEST_TIMEOUT_S (SO_RCVTIMEO, handle_request), and a client sends one
 * message: one that sends more is cut off after the second.
 */
static void
refuse(int conn, const char *msg)
{
	static char drop[JAIL_WIRE_MAX];
	int			nfds;
	bool		truncated;

	jail_warn("refused a request: %s", msg);
	send_answer(conn, JAIL_WIRE_RC_REFUSED, "", msg);
	shutdown(conn, SHUT_WR);
	for (int i = 0; i < 2; i++)
		if (jail_wire_recv(conn, drop, sizeof(drop), NULL, 0, &nfds, &truncated) <= 0)
			break;
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
		cred.uid != lc->uid)
	{
		jail_seterr(msg, "peer uid %d is not the launcher's owner", (int) cred.uid);
		return -1;
	}
	return 0;
}

/*
 * The request's one message, into buf: its length; 0 when the caller
 * connected and left; -1 with msg when it cannot be taken.
 */
static ssize_t
receive_request(int conn, char *buf, int *fds, int *nfdsp, char *msg)
{
	bool		truncated;
	int			nfds = 0;
	ssize_t		n;

	n = jail_wire_recv(conn, buf, JAIL_WIRE_MAX, fds, JAIL_WIRE_NFDS_MAX, &nfds, &truncated);
	*nfdsp = nfds;
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
	else if (nfds != JAIL_WIRE_NFDS && nfds != JAIL_WIRE_NFDS_MAX)
		jail_seterr(msg, "request must carry %d descriptors (code, stdout, stderr), or %d with the run's secrets, got %d",
					JAIL_WIRE_NFDS, JAIL_WIRE_NFDS_MAX, nfds);
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

	/*
	 * Its sandboxes are built ahead on the launcher's image (--serve
	 * --image): a request names the same one, or none when it has none,
	 * so that a caller that means another image is never served this one.
	 */
	if (jail_image_dir() == NULL ? rq->opts.image != NULL :
		(rq->opts.image == NULL || strcmp(rq->opts.image, jail_image_dir()) != 0))
	{
		jail_seterr(msg, "this launcher serves %s%s, not %s%s",
					jail_image_dir() ? "the image " : "the host's root",
					jail_image_dir() ? jail_image_dir() : "",
					rq->opts.image ? "the image " : "the host's root",
					rq->opts.image ? rq->opts.image : "");
		return -1;
	}
	rq->opts.quiet = lc->quiet;
	/* the secrets' descriptor: the request's fourth, named by its index */
	if ((rq->opts.egress_secrets_fd >= 0) != (rq->nfds == JAIL_WIRE_NFDS_MAX) ||
		(rq->opts.egress_secrets_fd >= 0 &&
		 rq->opts.egress_secrets_fd != atoi(JAIL_WIRE_SECRETS_INDEX)))
	{
		jail_seterr(msg, "a fourth descriptor comes with %s %s, and only then",
					JAIL_WIRE_SECRETS_OPTION, JAIL_WIRE_SECRETS_INDEX);
		return -1;
	}
	if (rq->opts.egress_secrets_fd >= 0)
		rq->opts.egress_secrets_fd = rq->fds[JAIL_WIRE_FD_SECRETS];
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
 * A warm worker's slot, its interpreter ready: what the slot counted so
 * far (the interpreter's start) is not the run's.  Peak memory and CPU
 * start from here (v2's CPU counter cannot be reset: its value now is the
 * base), before the worker waits for a request as a cold worker's do: the
 * interpreter, blocked on its descriptors, counts nothing meanwhile.
 */
static void
slot_counters_from_now(JailCgroup *slot)
{
	if (slot)
		jail_cgroup_counters_from_now(slot);
}

/*
 * A request reaches a warm worker's waiting interpreter.  The memory the
 * interpreter holds stays in the slot (and is in the run's peak: read
 * after the peak's reset, it is never above it); the slot's limit is the
 * request's plus that (run_request), so the run's own code has the
 * memory it asked for, as in a cold sandbox.  Should jail_run throw the
 * interpreter away (another language, egress, run_prepare), the limit is
 * the request's again (run_choose_cgroup).
 */
static void
warm_take(JailCgroup *slot, JailRunEnv *env)
{
	env->warm_memory = slot ? jail_cgroup_memory_now(slot) : 0;
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
	JailOptions limits;			/* the slot's: a warm run's has room for
								 * what its interpreter holds */
	char		err[JAIL_ERRLEN] = "";
	char		line[JAIL_VERDICT_MAX];
	int			rc;

	memset(&res, 0, sizeof(res));
	memset(&env, 0, sizeof(env));
	env.stdout_fd = rq->fds[JAIL_WIRE_FD_STDOUT];
	env.stderr_fd = rq->fds[JAIL_WIRE_FD_STDERR];
	env.cancel_fd = conn;
	env.netns_ready = netns_ready;
	env.filter = &lc->filter;
	env.slot_parent = lc->cgroup_parent;
	env.owner_hint = lc->owner_hint;
	env.defer_reap = true;
	env.egress_spawner = lc->egress_spawner;	/* the proxy: egress.c */

	limits = rq->opts;
	if (pre && pre->warm)
	{
		warm_take(slot, &env);
		limits.memory_bytes += env.warm_memory;
	}
	if (slot && jail_cgroup_set_limits(slot, &limits, 1, err) < 0)
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
	send_answer(conn, rc < 0 ? JAIL_EXIT_SETUP : JAIL_EXIT_OK, line,
				rc < 0 ? res.setup_error : "");
	JAIL_TRACE("verdict sent");

	/*
	 * The answer, then EOF, at once: a caller waits for the EOF (and for
	 * its output pipes' EOF), and what is left of ours is not its to wait
	 * for (init's kill and reap, which waits for the payload's memory to
	 * be freed after an early end; this process's exit, which tears down
	 * its network, mount and ipc namespaces and the slot).  Nothing of
	 * the run is alive by now (lifecycle.c), and nobody else holds these
	 * descriptors: the sandboxes were cloned before they came, or closed
	 * them (sandbox.c, close_inherited).
	 */
	close(conn);
	close(rq->fds[JAIL_WIRE_FD_STDOUT]);
	close(rq->fds[JAIL_WIRE_FD_STDERR]);
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
	struct timeval tv = {.tv_sec = REQUEST_TIMEOUT_S};
	Request		rq;
	char		msg[JAIL_ERRLEN] = "";
	ssize_t		n;

	/*
	 * A caller that connects and never sends would hold this worker (one
	 * place in the pool) forever: every read of the connection but the
	 * run's is bounded; the run itself watches the connection with poll.
	 */
	setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&rq, 0, sizeof(rq));
	if (check_peer(conn, msg) < 0)
	{
		refuse(conn, msg);
		return;
	}
	n = receive_request(conn, buf, rq.fds, &rq.nfds, msg);
	if (n == 0)
		return;					/* connected and left: nothing to do */
	if (n < 0 ||
		parse_request(buf, n, &rq, msg) < 0 ||
		check_output_fd(rq.fds[JAIL_WIRE_FD_STDOUT], "stdout", msg) < 0 ||
		check_output_fd(rq.fds[JAIL_WIRE_FD_STDERR], "stderr", msg) < 0 ||
		read_request_code(rq.fds[JAIL_WIRE_FD_CODE], &rq, msg) < 0)
	{
		refuse(conn, msg);
		return;
	}
	close(rq.fds[JAIL_WIRE_FD_CODE]);
	JAIL_TRACE("request checked");
	run_request(conn, &rq, slot, netns_ready, pre);
}

/*
 * A fresh network namespace for the coming run, loopback up.  Root can
 * unshare one directly.  Anyone else needs a user namespace to own it;
 * that one maps only our own uid and gid onto themselves, so the ids the
 * run's own user namespace maps to stay what a one-shot run maps to.
 * *ready false when none could be made (the sandbox then makes its own).
 * 0, or the exit status the worker ends with: JAIL_WORKER_PREP_FAILED for a
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
			return JAIL_WORKER_PREP_FAILED;
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned) gid, (unsigned) gid);
		if (jail_write_file("/proc/self/gid_map", map) < 0)
			return JAIL_WORKER_PREP_FAILED;
		/* a credential change clears the death signal */
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
		if (getppid() != lc->pid)
			return 1;
	}
	if (jail_loopback_up(err) < 0)
	{
		jail_warn("worker: %s", err);
		return JAIL_WORKER_PREP_FAILED;
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
	penv.warm = warm;
	penv.filter = &lc->filter;
	penv.init_filter = &lc->init_filter;
	penv.defer_reap = true;		/* as run_request's runs */
	penv.netns_ready = netns_ready;
	penv.owner_hint = lc->owner_hint;
	if (jail_prespawn(pre, &penv, err) == 0)
		return true;
	jail_warn("worker: could not clone a sandbox ahead: %s", err);
	return false;
}

/*
 * A warm worker, its sandbox cloned: wait until its interpreter says it is
 * ready (its modules imported), at most JAIL_WARM_READY_TIMEOUT_MS.  If it
 * fails, its reason is what the bootstrap wrote, or else the sandbox's
 * setup error.  0, or -1 with err.
 */
static int
warm_wait_ready(JailPrespawn *pre, char *err)
{
	struct pollfd pfd = {.fd = pre->ready[0],.events = POLLIN};
	char		buf[512];
	ssize_t		n;
	int			rc;

	do
		rc = poll(&pfd, 1, JAIL_WARM_READY_TIMEOUT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 0)
	{
		jail_seterr(err, "the warm interpreter was not ready within %d s",
					JAIL_WARM_READY_TIMEOUT_MS / 1000);
		return -1;
	}
	n = read(pre->ready[0], buf, sizeof(buf) - 1);
	if (n == 1 && buf[0] == 'R')
		return 0;
	if (n > 1 && buf[0] == 'E')
	{
		buf[n] = '\0';
		jail_seterr(err, "the warm interpreter could not start: %s", buf + 1);
		return -1;
	}
	/* gone without a word: the sandbox's own reason, if it gave one */
	jail_prespawn_discard_reason(pre, buf, sizeof(buf));
	jail_seterr(err, "the warm interpreter exited before it was ready%s%s",
				buf[0] ? ": " : "", buf);
	return -1;
}

/* The page: this worker's interpreter waits (bytes held), or no longer. */
static void
warm_publish(JailCgroup *slot, bool waiting)
{
	JailWarmHeld *h;

	if (!lc->warm_page || warm_index < 0)
		return;
	h = &lc->warm_page->held[warm_index];
	if (waiting)
	{
		__atomic_store_n(&h->lang, (int32_t) warm->lang, __ATOMIC_RELAXED);
		__atomic_store_n(&h->bytes, slot ? jail_cgroup_memory_now(slot) : 0, __ATOMIC_RELAXED);
		__atomic_store_n(&h->pid, (int32_t) getpid(), __ATOMIC_RELEASE);
		jail_wire_warm_post(lc->warm_page, warm->lang, 1);
	}
	else
		__atomic_store_n(&h->pid, 0, __ATOMIC_RELEASE);
}

/*
 * A warm worker's accept: a connection, or the end of its interpreter
 * while it waits (then its place on the page is given back and the
 * worker ends; the launcher starts another after a pause).
 */
static int
warm_accept(int lfd, JailPrespawn *pre)
{
	struct pollfd pfd[2] = {{.fd = lfd,.events = POLLIN}, {.fd = pre->ready[0],.events = POLLIN}};

	for (;;)
	{
		int			conn;

		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			return -1;
		if (pfd[1].revents)
		{
			jail_wire_warm_post(lc->warm_page, warm->lang, -1);
			return -1;
		}
		if (!pfd[0].revents)
			continue;
		conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (conn >= 0)
		{
			fcntl(conn, F_SETFL, fcntl(conn, F_GETFL) & ~O_NONBLOCK);
			return conn;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return -1;
	}
}

/*
 * A worker's life, forked by the launcher (serve.c's spawn_worker):
 * everything a run needs that does not depend on the request, then one
 * connection.  slot: the worker's cgroup slot, or NULL.  Returns the exit
 * status the worker ends with (the launcher's _exit after the fork).
 */
/*
 * Why this worker's language has no warm interpreter, on the launcher's
 * page for agent.worker_status() ("" once one waits again).
 */
static void
warm_set_problem(const char *msg)
{
	char	   *dst;
	size_t		n;

	if (!lc->warm_page)
		return;
	dst = lc->warm_page->problem[warm->lang];
	n = strnlen(msg, sizeof(lc->warm_page->problem[0]) - 1);
	memcpy(dst, msg, n);
	dst[n] = '\0';
}

int
jail_worker_main(const JailLauncher *launcher, int lfd, JailCgroup *slot,
				 const JailWarm *warm_interp, int page_index)
{
	char		err[JAIL_ERRLEN] = "";
	bool		netns_ready = false;
	sigset_t	none;
	JailPrespawn pre;
	bool		have_pre;
	int			conn;
	int			rc;

	lc = launcher;
	warm = warm_interp;
	warm_index = page_index;
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != lc->pid)
		return 1;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGCHLD, SIG_DFL);

	/*
	 * Into the slot first (on cgroup v1 the write can wait ~10 ms for an
	 * RCU grace period; nobody is waiting on us yet).  Every process the
	 * sandbox ever has is born in it.
	 */
	if (slot && jail_cgroup_attach(slot, getpid(), err) < 0)
	{
		jail_warn("worker: %s", err);
		slot = NULL;
	}
	/* a warm interpreter outside a slot would hold unbounded memory (serve.c) */
	if (warm && !slot)
	{
		char		msg[JAIL_ERRLEN + 80];

		snprintf(msg, sizeof(msg), "not started without a cgroup slot (its memory would be unbounded)%s%s",
				 err[0] ? ": " : "", err);
		warm_set_problem(msg);
		return JAIL_WORKER_WARM_FAILED;
	}
	if (lc->netns_pool && (rc = prepare_netns(&netns_ready)) != 0)
		return rc;
	have_pre = prespawn_sandbox(&pre, netns_ready);
	if (warm)
	{
		/* a warm worker without its interpreter serves nobody */
		if (!have_pre)
			return JAIL_WORKER_WARM_FAILED;
		if (warm_wait_ready(&pre, err) < 0)
		{
			jail_warn("worker: %s", err);
			warm_set_problem(err);
			jail_prespawn_discard(&pre);
			return JAIL_WORKER_WARM_FAILED;
		}
		warm_set_problem("");
		slot_counters_from_now(slot);
		warm_publish(slot, true);
		conn = warm_accept(lfd, &pre);
		warm_publish(slot, false);
		if (conn < 0)
		{
			jail_warn("worker: the warm interpreter exited while it waited");
			jail_prespawn_discard(&pre);
			return JAIL_WORKER_WARM_FAILED;
		}
	}
	else
	{
		/*
		 * What the slot counted so far (our own set-up, the sandbox's
		 * fixed root) is not the run's: start its peak memory and CPU
		 * from zero.  The slot was made with the default limits (and one
		 * pid for us), which a request asking for the same then keeps
		 * without a write.
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
	}
	JAIL_TRACE("accepted");
	close(lfd);
	handle_request(conn, slot, netns_ready, have_pre ? &pre : NULL);
	return 0;
}
