/*-------------------------------------------------------------------------
 *
 * sandbox.c
 *	  Everything that runs inside the new namespaces: the sandbox's init
 *	  (pid 1) and the payload it starts (pid 2).
 *
 * Lifecycle, as a short list of steps (after isolate):
 *	  init:    wait for the parent (uid/gid maps) -> become the mapped
 *			   uid -> die-with-parent -> hostname -> loopback up -> root
 *			   filesystem -> wait for the parent (cgroup) -> cgroup ns ->
 *			   fork payload -> drop
 *			   everything -> reap until the payload exits -> report its
 *			   status -> exit (the kernel then kills every process left
 *			   in the pid namespace: daemons do not survive)
 *	  payload: session -> stdio -> fds closed -> rlimits -> signals reset ->
 *			   capabilities dropped (all sets, bounding, ambient) ->
 *			   no_new_privs -> seccomp (last) -> execve
 * A served sandbox (prebuild: cloned by a launcher's worker before its
 * request) orders this differently, so that the least is left for after
 * the request: init builds the fixed part of the root and forks the
 * payload's process, which at once enters its cgroup namespace and does
 * the payload's steps above up to seccomp; then it waits.  On the
 * request, init completes the root, hands the payload its rlimits and
 * program (which it sets and execs), and confines itself.  Those steps
 * are served.c's; what both kinds share (the capability drops, rlimits,
 * the payload's confinement and exec, the reap) is here.
 * Any failure before execve is a setup error: its text goes to the parent
 * over err_fd, which is close-on-exec, so EOF there means execve worked.
 *
 * The payload is not pid 1 on purpose: pid 1 ignores signals it has no
 * handler for, which would change how ordinary programs behave.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/securebits.h>

#include "jail.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Report a setup failure to the parent and stop; never returns. */
void
jail_child_fail(const JailChildArgs *a, const char *msg)
{
	(void) jail_write_all(a->err_fd, msg, strlen(msg));
	_exit(127);
}

int
jail_loopback_up(char *err)
{
	struct ifreq ifr;
	int			fd;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		jail_seterr(err, "socket for loopback: %s", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		goto fail;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		goto fail;
	close(fd);
	return 0;
fail:
	jail_seterr(err, "bring up loopback: %s", strerror(errno));
	close(fd);
	return -1;
}

/*
 * Drop every capability from every set, in two steps.  The first,
 * jail_drop_bounding(): securebits (no later uid change can regain
 * anything), the bounding set (needs CAP_SETPCAP, which we still hold) and
 * the ambient set; what we hold now stays usable, but no execve can ever
 * add to it.  The second, jail_drop_held(): effective, permitted and
 * inheritable sets, then a check of all of them, because a silently failed
 * drop is the worst kind of bug here.  A payload does both at once; a
 * served init the first before its request and the second after its
 * mounts.
 *
 * Init takes the first step before it forks the payload's process, which
 * inherits the result (securebits, bounding and ambient sets are copied by
 * fork), so the payload's own first step finds nothing left to drop: each
 * drop is a credential change (a new struct cred, committed), ~25 us on a
 * VM with shadow page tables, for each of ~41 capabilities.  The payload
 * still takes the step and checks every set itself: it relies on nothing
 * init did.
 */
int
jail_drop_bounding(char *err)
{
	int			last = cap_max_bits();
	unsigned	secbits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
		SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
		SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
		SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

	if (cap_get_secbits() != secbits && cap_set_secbits(secbits) < 0)
	{
		jail_seterr(err, "set securebits: %s", strerror(errno));
		return -1;
	}
	for (int c = 0; c < last; c++)
	{
		/* (a read is no credential change: only what is there is dropped) */
		if (cap_get_bound(c) != 0 && cap_drop_bound(c) < 0 && errno != EINVAL)
		{
			jail_seterr(err, "drop bounding capability %d: %s", c, strerror(errno));
			return -1;
		}
	}
	if (cap_reset_ambient() < 0 && errno != EINVAL)
	{
		jail_seterr(err, "clear ambient capabilities: %s", strerror(errno));
		return -1;
	}
	/* check: neither set can ever be raised again (securebits above) */
	for (int c = 0; c < last; c++)
	{
		if (cap_get_bound(c) > 0 || cap_get_ambient(c) > 0)
		{
			jail_seterr(err, "capability %d still in the bounding or ambient set", c);
			return -1;
		}
	}
	return 0;
}

int
jail_drop_held(char *err)
{
	/* capset(2) itself: libcap's cap_set_proc would malloc on the way */
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	memset(data, 0, sizeof(data));
	if (syscall(SYS_capset, &hdr, data) < 0)
	{
		jail_seterr(err, "clear capabilities: %s", strerror(errno));
		return -1;
	}

	/* check anyway */
	memset(data, 0xff, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0)
	{
		jail_seterr(err, "read capabilities back: %s", strerror(errno));
		return -1;
	}
	for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
	{
		if (data[i].effective || data[i].permitted || data[i].inheritable)
		{
			jail_seterr(err, "capabilities still present after drop");
			return -1;
		}
	}
	return 0;
}

static int
drop_capabilities(char *err)
{
	return jail_drop_bounding(err) < 0 ? -1 : jail_drop_held(err);
}

/* The rlimits of `which` (JAIL_RLIMITS_*, jail.h). */
int
jail_set_rlimits(const JailChildArgs *a, int which, char *err)
{
	const JailOptions *o = a->opts;
	JailRlimit	lim[6];
	int			n = 0;

	if (which & JAIL_RLIMITS_FIXED)
	{
		lim[n++] = (JailRlimit) {RLIMIT_CORE, 0, 0, "CORE"};
		lim[n++] = (JailRlimit) {RLIMIT_NOFILE, 1024, 1024, "NOFILE"};
		lim[n++] = (JailRlimit) {RLIMIT_MSGQUEUE, 0, 0, "MSGQUEUE"};
	}
	if (which & JAIL_RLIMITS_REQUEST)
	{
		rlim_t		cpu_s = jail_rlimit_cpu_s(o->cpu_ms, a->cgroup_none);

		/*
		 * RLIMIT_CPU is per process (the cgroup watch in the parent
		 * covers the sum); the hard limit one second later turns SIGXCPU
		 * into SIGKILL for programs that ignore it.  No RLIMIT_AS: V8
		 * reserves far more address space than it uses.
		 */
		lim[n++] = (JailRlimit) {RLIMIT_CPU, cpu_s, cpu_s + 1, "CPU"};
		if (o->file_size > 0)
			lim[n++] = (JailRlimit) {RLIMIT_FSIZE, o->file_size, o->file_size, "FSIZE"};
		/* Without a pids cgroup this is the only fork-bomb brake. */
		if (a->cgroup_none)
			lim[n++] = (JailRlimit) {RLIMIT_NPROC, o->pids, o->pids, "NPROC"};
	}

	for (int i = 0; i < n; i++)
	{
		struct rlimit rl = {lim[i].soft, lim[i].hard};
		struct rlimit cur;

		if (setrlimit(lim[i].res, &rl) == 0)
			continue;

		/*
		 * Without privilege a hard limit can only go down: if the caller
		 * already runs with a tighter one, keep that (it is stricter).
		 */
		if (errno == EPERM && getrlimit(lim[i].res, &cur) == 0 &&
			cur.rlim_max != RLIM_INFINITY && rl.rlim_max > cur.rlim_max)
		{
			rl.rlim_max = cur.rlim_max;
			if (rl.rlim_cur > rl.rlim_max)
				rl.rlim_cur = rl.rlim_max;
			if (setrlimit(lim[i].res, &rl) == 0)
				continue;
		}
		jail_seterr(err, "setrlimit %s: %s", lim[i].name, strerror(errno));
		return -1;
	}
	return 0;
}

static void
reset_signals(void)
{
	sigset_t	none;

	/* Ignored dispositions and the mask survive execve; undo ours. */
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * Everything between the fork of the payload's process and its execve:
 * session, stdio, descriptors, rlimits (of those that depend on the
 * request, only the fixed ones when it is not known yet: served_payload
 * in served.c sets the rest later), capabilities, no_new_privs and, last,
 * the seccomp filter.
 */
void
jail_payload_confine(const JailChildArgs *a, bool rlimits)
{
	char		err[JAIL_ERRLEN] = "";
	int			devnull;

	/* A new session: no controlling terminal to inject input into. */
	setsid();
	reset_signals();

	devnull = open("/dev/null", O_RDONLY);
	if (devnull < 0 ||
		dup2(devnull, STDIN_FILENO) < 0 ||
		dup2(a->out_fd, STDOUT_FILENO) < 0 ||
		dup2(a->errout_fd, STDERR_FILENO) < 0)
	{
		jail_seterr(err, "set up stdio: %s", strerror(errno));
		jail_child_fail(a, err);
	}

	/*
	 * Every other descriptor goes at execve.  CLOEXEC rather than close so
	 * err_fd stays usable until the exec succeeds.
	 */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
	{
		jail_seterr(err, "close_range: %s", strerror(errno));
		jail_child_fail(a, err);
	}

	if (jail_set_rlimits(a, rlimits ? JAIL_RLIMITS_FIXED | JAIL_RLIMITS_REQUEST : JAIL_RLIMITS_FIXED,
						 err) < 0 ||
		drop_capabilities(err) < 0)
		jail_child_fail(a, err);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
	{
		jail_seterr(err, "no_new_privs: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	/* Last step before execve: from here on only the exec is ours. */
	if (jail_filter_load(a->filter, a->served ? a->tree_sock : -1, a->watch_sock) < 0)
	{
		jail_seterr(err, "load seccomp filter: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	/* init waits for the listener or for this EOF (served.c, served_confine) */
	if (a->watch_sock >= 0)
		close(a->watch_sock);
}

/*
 * The payload's whole environment: nothing of the jail's is inherited.
 * A run with egress adds the proxy's variables (egress.c).
 */
static char *const payload_env_fixed[] = {
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/tmp",
	"TMPDIR=/tmp",
	"USER=sandbox",
	"LOGNAME=sandbox",
	"SHELL=/bin/bash",
	"TERM=dumb",
	"LANG=C.UTF-8",
	"PYTHONDONTWRITEBYTECODE=1",
	"PYTHONUNBUFFERED=1",
	"PIP_NO_INDEX=1",
	"PIP_DISABLE_PIP_VERSION_CHECK=1",
	"PIP_NO_CACHE_DIR=1",
	"npm_config_offline=true",
	"npm_config_audit=false",
	"npm_config_fund=false",
	"npm_config_update_notifier=false",
	"npm_config_cache=/tmp/.npm",
	"MPLCONFIGDIR=/tmp",
	NULL
};

#define PAYLOAD_ENV_MAX 64

/*
 * The environment payload_execve passes (built in the payload's process,
 * its own copy of this memory, just before execve).  NULL when it does not
 * fit.
 */
char *const *
jail_payload_env(const JailChildArgs *a)
{
	static char *env[PAYLOAD_ENV_MAX];
	int			n = 0;

	for (size_t i = 0; payload_env_fixed[i]; i++)
	{
		if (n >= PAYLOAD_ENV_MAX - 1)
			return NULL;
		env[n++] = payload_env_fixed[i];
	}
	if (a->egress)
		n = jail_egress_env_add(env, n, PAYLOAD_ENV_MAX - 1, a->egress_ca_pem != NULL);
	if (n < 0)
		return NULL;
	env[n] = NULL;
	return env;
}

/*
 * The payload's command line (a process's own copy: --exec's is built in
 * static memory): the interpreter and the code's file under /sandbox.
 * --exec: the program alone; its argv[0] is its path, nothing more.
 */
char *const *
jail_payload_argv(const JailOptions *o)
{
	static char *const argv_py[] = {"/usr/bin/python3", "-I", "-u", "/sandbox/main.py", NULL};
	static char *const argv_js[] = {"/usr/bin/node", "/sandbox/main.js", NULL};
	static char *const argv_sh[] = {"/bin/bash", "--noprofile", "--norc", "/sandbox/main.sh", NULL};
	static char *argv_exec[2];

	argv_exec[0] = (char *) o->exec_path;
	argv_exec[1] = NULL;
	return o->language == LANG_PYTHON ? argv_py :
		o->language == LANG_NODE ? argv_js :
		o->language == LANG_EXEC ? argv_exec : argv_sh;
}

void
jail_payload_execve(const JailChildArgs *a)
{
	char *const *argv = jail_payload_argv(a->opts);
	char *const *env = jail_payload_env(a);
	char		err[JAIL_ERRLEN] = "";

	if (!env)
	{
		jail_seterr(err, "the payload's environment has more than %d entries",
					PAYLOAD_ENV_MAX - 1);
		jail_child_fail(a, err);
	}
	execve(argv[0], argv, env);
	jail_seterr(err, "execve %s: %s", argv[0], strerror(errno));
	jail_child_fail(a, err);
}

static void payload_exec(const JailChildArgs *a) __attribute__((noreturn));

static void
payload_exec(const JailChildArgs *a)
{
	jail_payload_confine(a, true);
	jail_payload_execve(a);
}

/*
 * Init has no business holding privilege while untrusted code runs next
 * to it, and must not be a ptrace/proc-mem target for it: no capability
 * in any set, not dumpable, no_new_privs and a seccomp filter.  A
 * one-shot init does all of it once the payload is forked
 * (jail_init_reap), with the payload's own filter.  A served init does all
 * but the last capability drop before its request, with the init filter
 * (the mount calls left in, see seccomp.c); then, after its mounts,
 * jail_drop_held().
 */
int
jail_confine_init(const JailFilter *filter, int keep_sock, char *err)
{
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (jail_drop_bounding(err) < 0)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		jail_filter_load(filter, keep_sock, -1) < 0)
	{
		jail_seterr(err, "confine init: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The payload (pid payload) is reaped, with status: everything else of
 * the namespace too (every process of it is a descendant of ours, since
 * orphans are reparented to us, so no child left, not even a zombie,
 * means none at all), then the report.  Never returns.
 */
static void report_reaped(const JailChildArgs *a, int status, const JailInitState *st) __attribute__((noreturn));

static void
report_reaped(const JailChildArgs *a, int status, const JailInitState *st)
{
	JailInitReport rep;
	pid_t		other;

	JAIL_TRACE("init: payload reaped");
	memset(&rep, 0, sizeof(rep));
	rep.status = status;
	while ((other = waitpid(-1, NULL, WNOHANG)) > 0)
		;
	rep.alone = other < 0 && errno == ECHILD;
	rep.lingering = rep.alone && a->linger;
	rep.warm_cpu_ms = st->warm_cpu_ms;
	getrusage(RUSAGE_CHILDREN, &rep.ru);
	(void) jail_write_all(a->status_fd, &rep, sizeof(rep));
	while (rep.lingering)
		pause();				/* until the worker's SIGKILL */
	/* our exit tears down the pid namespace: nothing survives */
	_exit(0);
}

/*
 * The early end (a served, lingering init with a cgroup that counts the
 * run's CPU and memory, and the payload's listener): wait for SIGCHLD or
 * the listener's POLLHUP, whichever comes first.  On POLLHUP with the
 * status known, report at once ("exiting", no rusage: the caller takes
 * the cgroup's counters) and wait to be killed; the caller sends the
 * verdict while the kernel still tears the payload down.  Otherwise, as
 * jail_init_reap: reap, and report once the payload is reaped.  Never
 * returns.
 */
static void init_wait_exiting(const JailChildArgs *a, pid_t payload, int sigfd,
							  const JailInitState *st) __attribute__((noreturn));

static void
init_wait_exiting(const JailChildArgs *a, pid_t payload, int sigfd, const JailInitState *st)
{
	struct pollfd pfd[2] = {{.fd = sigfd,.events = POLLIN}, {.fd = st->exit_watch,.events = POLLIN}};
	char		path[64];
	int			taskfd;

	snprintf(path, sizeof(path), "/proc/%d/task", (int) payload);
	taskfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (;;)
	{
		struct signalfd_siginfo si;
		int			status;
		pid_t		pid;

		/* first, since a SIGCHLD before the signalfd existed is lost */
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			if (pid == payload)
				report_reaped(a, status, st);
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents)
		{
			pfd[1].fd = -1;		/* once (and never a POLLNVAL loop) */
			if ((pfd[1].revents & (POLLHUP | POLLERR)) && jail_exiting_status(taskfd, &status))
			{
				JailInitReport rep;

				JAIL_TRACE("init: payload exiting");
				memset(&rep, 0, sizeof(rep));
				rep.status = status;
				rep.alone = 1;
				rep.lingering = 1;
				rep.exiting = 1;
				rep.warm_cpu_ms = st->warm_cpu_ms;
				(void) jail_write_all(a->status_fd, &rep, sizeof(rep));
				for (;;)
					pause();	/* until the worker's SIGKILL */
			}
		}
		if (pfd[0].revents)
			while (read(sigfd, &si, sizeof(si)) == sizeof(si))
				;
	}
}

/*
 * Init after the payload started: reap everything, report the payload.
 * Unless already confined (a served init), confine ourselves first.
 */
void
jail_init_reap(const JailChildArgs *a, pid_t payload, bool confined, const JailInitState *st)
{
	char		err[JAIL_ERRLEN] = "";
	int			status;
	pid_t		pid;

	close(a->out_fd);
	close(a->errout_fd);

	if (!confined && (jail_confine_init(a->filter, -1, err) < 0 || jail_drop_held(err) < 0))
	{
		kill(payload, SIGKILL);
		jail_child_fail(a, err);
	}
	close(a->err_fd);
	JAIL_TRACE("init: confined");

	if (st->exit_watch >= 0 && a->linger && !a->cgroup_none)
	{
		sigset_t	chld;
		int			sigfd;

		sigemptyset(&chld);
		sigaddset(&chld, SIGCHLD);
		sigprocmask(SIG_BLOCK, &chld, NULL);
		sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
		if (sigfd >= 0)
			init_wait_exiting(a, payload, sigfd, st);
		sigprocmask(SIG_UNBLOCK, &chld, NULL);
	}
	for (;;)
	{
		pid = waitpid(-1, &status, 0);
		if (pid < 0)
		{
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (pid == payload)
			report_reaped(a, status, st);
	}
}

static int
cmp_int(const void *x, const void *y)
{
	return *(const int *) x - *(const int *) y;
}

/*
 * Close every descriptor but stdio and our own pipe ends.  This matters
 * beyond hygiene: the parent's ends of the go and lifeline pipes must not
 * stay open here, or a dead parent would never look dead (no EOF, no
 * HUP); and init must not sit on descriptors the caller gave the jail.
 * The image's (image.c) are kept until the root is built, which closes
 * them.
 */
static void
close_inherited(const JailChildArgs *a)
{
	int			keep[] = {a->go_fd, a->err_fd, a->status_fd, a->out_fd,
		a->errout_fd, a->lifeline_fd, a->req_fd, a->tree_sock, a->paygo_fd,
		a->ready_fd, a->egress_fd, jail_image_fd(false), jail_image_fd(true),
	INT_MAX};
	int			n = sizeof(keep) / sizeof(keep[0]);
	int			from = 3;

	qsort(keep, n - 1, sizeof(int), cmp_int);
	for (int i = 0; i < n; i++)
	{
		if (keep[i] > from)
			syscall(SYS_close_range, (unsigned) from, (unsigned) keep[i] - 1, 0U);
		if (keep[i] >= from && keep[i] != INT_MAX)
			from = keep[i] + 1;
	}
}

/*
 * Become the mapped unprivileged identity.  When the jail runs as root
 * our kernel uid is still 0 (unmapped here); this makes it the outer
 * sandbox uid.  Capabilities in our own user namespace survive because
 * inner uid 0 does not exist, so there is no "root" to leave.  A
 * credential change clears the death signal: set it again, and check on
 * the lifeline that the parent did not die in between.
 */
static void
become_sandbox_user(const JailChildArgs *a)
{
	char		err[JAIL_ERRLEN] = "";
	struct pollfd pfd;

	if (setresgid(JAIL_INNER_GID, JAIL_INNER_GID, JAIL_INNER_GID) < 0 ||
		setresuid(JAIL_INNER_UID, JAIL_INNER_UID, JAIL_INNER_UID) < 0)
	{
		jail_seterr(err, "switch to sandbox uid: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	pfd.fd = a->lifeline_fd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, 0) != 0)
		_exit(1);
	close(a->lifeline_fd);
}

/*
 * Init of a sandbox cloned on the spot, its root built.  Meanwhile the
 * parent has been moving us into the run's cgroup (on cgroup v1 that
 * write can take ~10 ms, which is why it overlaps with the mount work; on
 * v2 we were normally cloned into it).  Nothing untrusted runs before
 * JAIL_GO_RUN; the cgroup namespace is created only then, so that its
 * root is the run's cgroup.  Then the payload, and jail_init_reap.
 */
static void oneshot_init(const JailChildArgs *a) __attribute__((noreturn));

static void
oneshot_init(const JailChildArgs *a)
{
	static const JailInitState st = {.exit_watch = -1,.warm_cpu_ms = 0};
	char		err[JAIL_ERRLEN] = "";
	char		go;
	pid_t		payload;

	if (read(a->go_fd, &go, 1) != 1)
		_exit(1);
	JAIL_TRACE("child: cgroup go");
	close(a->go_fd);
	if (unshare(CLONE_NEWCGROUP) < 0)
	{
		jail_seterr(err, "cgroup namespace: %s", strerror(errno));
		jail_child_fail(a, err);
	}

	JAIL_TRACE("child: cgroup ns");
	/* before the fork: the payload inherits it (jail_drop_bounding) */
	if (jail_drop_bounding(err) < 0)
		jail_child_fail(a, err);
	payload = fork();
	if (payload < 0)
	{
		jail_seterr(err, "fork payload: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	if (payload == 0)
		payload_exec(a);
	jail_init_reap(a, payload, false, &st);
}

/*
 * The clone's child (jail_spawn), pid 1 of the new namespaces: the steps
 * of the header comment.  Never returns: every path ends in _exit.
 */
int
jail_child_main(void *arg)
{
	JailChildArgs *a = arg;		/* our own copy (clone without CLONE_VM) */
	char		err[JAIL_ERRLEN] = "";
	char		go;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	close_inherited(a);

	/*
	 * A served run shares its cgroup with the worker that watches over it;
	 * should the memory limit strike, the kernel must pick the sandbox,
	 * never the worker (which would lose the verdict).  Raising the score
	 * needs no privilege; the payload inherits it.
	 */
	if (a->served)
		(void) jail_write_file("/proc/self/oom_score_adj", "1000");

	/* The parent writes our uid/gid maps, then says JAIL_GO_MAPPED. */
	if (read(a->go_fd, &go, 1) != 1)
		_exit(1);
	if (go == JAIL_GO_NOCGROUP)
		a->cgroup_none = true;	/* decided after a prespawned clone */
	JAIL_TRACE("child: first go");
	become_sandbox_user(a);

	if (sethostname("sandbox", 7) < 0)
	{
		jail_seterr(err, "sethostname: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	/* a launcher's worker already made our (fresh, unshared) netns */
	if (!a->netns_ready && jail_loopback_up(err) < 0)
		jail_child_fail(a, err);
	/* egress: the proxy's socket, made here, served from the host side */
	if (a->egress_fd >= 0)
	{
		if (jail_egress_listen(a->egress_fd, err) < 0)
			jail_child_fail(a, err);
		/* with secrets, the proxy's CA comes on it too (rootfs.c) */
		if (!a->egress_intercept)
		{
			close(a->egress_fd);
			a->egress_fd = -1;
		}
	}
	if (a->prebuild)
	{
		/*
		 * Built ahead of the request (worker.c): the fixed part of the
		 * root now, then the payload's process, confined before the
		 * request (served.c).
		 */
		if (jail_rootfs_prepare(err) < 0)
			jail_child_fail(a, err);
		jail_served_init(a);
	}
	if (jail_rootfs_setup(a, err) < 0)
		jail_child_fail(a, err);
	JAIL_TRACE("child: root built");
	oneshot_init(a);
}
