/*-------------------------------------------------------------------------
 *
 * served.c
 *	  A served sandbox from the inside: the init and the payload's process
 *	  of a sandbox that a launcher's worker cloned ahead of its request
 *	  (prebuild, worker.c), from the fixed part of its root to the exec.
 *
 * Init forks the payload's process at once; that process does every step
 * of a payload's set-up that does not depend on the request and waits,
 * confined and filtered (a warm one in its interpreter's bootstrap,
 * warm.c).  Init confines itself (all but its last capabilities) and
 * waits too.  On the request init reads it (load_request), completes the
 * root, drops the last capabilities and hands the payload what is left
 * (its rlimits and program); then it reaps like any init (jail_init_reap,
 * sandbox.c).  What both kinds of sandbox do (the capability drops, the
 * rlimits, the payload's confinement and exec, the reaping) is sandbox.c's.
 *
 * Every path ends in _exit: jail_child_fail() for a setup error, or
 * jail_init_reap().
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jail.h"

/* How long init waits for its payload's process to send the listener. */
#define WATCH_WAIT_MS		10000

/*
 * A sandbox cloned ahead of its request (worker.c) reads it here: a u32
 * length, the run options as NUL-terminated strings (already validated by
 * the worker, parsed again the same way), then the code to the end.
 */
static void
load_request(JailChildArgs *a)
{
	static JailOptions opts;
	static char *argv[300];
	char		err[JAIL_ERRLEN] = "";
	uint32_t	alen;
	struct stat st;
	char	   *buf;
	int			argc = 0;

	if (pread(a->req_fd, &alen, sizeof(alen), 0) != sizeof(alen) ||
		fstat(a->req_fd, &st) < 0 || (uint64_t) st.st_size < sizeof(alen) + (uint64_t) alen ||
		!(buf = malloc(st.st_size + 1)) ||
		pread(a->req_fd, buf, st.st_size, 0) != st.st_size)
		jail_child_fail(a, "could not read the request");
	buf[st.st_size] = '\0';
	argv[argc++] = "sandbox-jail";
	for (char *p = buf + sizeof(alen); p < buf + sizeof(alen) + alen && argc < 298;
		 p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	if (jail_parse_options(argc, argv, &opts, false) < 0)
	{
		jail_seterr(err, "request: %s", jail_option_error);
		jail_child_fail(a, err);
	}
	a->opts = &opts;
	a->code = buf + sizeof(alen) + alen;
	a->code_len = st.st_size - sizeof(alen) - alen;
	close(a->req_fd);
	a->req_fd = -1;
}

/* What the payload's process of a served sandbox learns of its request. */
typedef struct PayloadRequest
{
	JailLanguage language;
	bool		cgroup_none;
	uint64_t	cpu_ms;
	uint64_t	file_size;
	uint64_t	pids;
	char		exec_path[256];
} PayloadRequest;

/*
 * A served sandbox's payload process, forked by init before the request
 * (served_fork).  Everything of a payload's set-up that does not
 * depend on the request is done now: its cgroup namespace (it was born in
 * the worker's slot; a run that needs another cgroup never gets here:
 * jail_run clones a fresh sandbox for it), session, stdio, descriptors,
 * the fixed rlimits, capabilities, no_new_privs and the seccomp filter
 * (whose attach alone costs ~0.1 ms).  Then it waits, unprivileged and
 * filtered, for init to finish the root and send what is left: the
 * request's rlimits (CPU, file size, processes) and the program.
 */
static void served_payload(JailChildArgs *a, int reqpipe) __attribute__((noreturn));
static void warm_payload(JailChildArgs *a, int reqpipe) __attribute__((noreturn));

/*
 * A warm sandbox's payload process (served_payload, confined): the
 * interpreter is exec'd now, before the request, exactly as a cold run
 * execs it; it waits in its bootstrap (warm.c) on the descriptors placed
 * here: the ready pipe to the worker, init's part (reqpipe: one byte once
 * the root is complete and its rlimits are set) and the worker's go.
 */
static void
warm_payload(JailChildArgs *a, int reqpipe)
{
	static JailOptions opts;
	char		err[JAIL_ERRLEN] = "";

	jail_warm_payload_fds(a->ready_fd, reqpipe, a->paygo_fd, STDOUT_FILENO,
						  STDERR_FILENO, a->warm->language == LANG_PYTHON, err);
	if (err[0])
		jail_child_fail(a, err);
	opts.language = a->warm->language;
	a->opts = &opts;
	JAIL_TRACE("payload: warm exec");
	jail_payload_execve(a);
}

static void
served_payload(JailChildArgs *a, int reqpipe)
{
	static JailOptions opts;
	char		err[JAIL_ERRLEN] = "";
	PayloadRequest pr;
	char		go;

	close(a->go_fd);
	close(a->req_fd);
	if (unshare(CLONE_NEWCGROUP) < 0)
	{
		jail_seterr(err, "cgroup namespace: %s", strerror(errno));
		jail_child_fail(a, err);
	}

	/*
	 * A warm interpreter starts in its final root: entered ahead by init,
	 * or else (no copy of the host tree) by us, in a mount namespace of
	 * our own (rootfs.c).  Then its bootstrap (warm.c) goes in place.
	 */
	if (a->warm &&
		((!jail_rootfs_entered() && jail_rootfs_enter_own(err) < 0) ||
		 jail_warm_root(a->warm, err) < 0))
		jail_child_fail(a, err);
	jail_payload_confine(a, false);	/* its filter's listener goes over tree_sock */
	if (a->tree_sock >= 0)
		close(a->tree_sock);
	if (a->warm)
		warm_payload(a, reqpipe);

	/* init's part (the root complete), then the worker's JAIL_GO_RUN */
	if (read(reqpipe, &pr, sizeof(pr)) != sizeof(pr))
		_exit(1);				/* init gave up: its reason is on err_fd */
	if (read(a->paygo_fd, &go, 1) != 1)
		_exit(1);				/* the worker gave up (and kills us) */
	close(a->paygo_fd);
	JAIL_TRACE("payload: go");
	opts.language = pr.language;
	opts.cpu_ms = pr.cpu_ms;
	opts.file_size = pr.file_size;
	opts.pids = pr.pids;
	pr.exec_path[sizeof(pr.exec_path) - 1] = '\0';
	opts.exec_path = pr.exec_path;
	a->opts = &opts;
	a->cgroup_none = pr.cgroup_none;
	if (jail_set_rlimits(a, JAIL_RLIMITS_REQUEST, err) < 0)
		jail_child_fail(a, err);

	/*
	 * A root not entered ahead (the host's tree stayed attached until the
	 * request): our stdin was opened as the host's /dev/null, before init
	 * pivoted; the run gets the sandbox's, as everywhere else.
	 */
	if (!jail_rootfs_entered())
	{
		int			devnull = open("/dev/null", O_RDONLY);

		if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0)
		{
			jail_seterr(err, "set up stdin: %s", strerror(errno));
			jail_child_fail(a, err);
		}
		close(devnull);
	}
	if (chdir("/workspace") < 0)
	{
		jail_seterr(err, "chdir /workspace: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	JAIL_TRACE("payload: exec");
	jail_payload_execve(a);
}

/*
 * Init of a served sandbox, after the fixed part of the root: fork the
 * payload's process (served_payload), confine ourselves (all but the last
 * capabilities, see jail_confine_init), wait for the request, complete
 * the root, drop the last capabilities, hand the payload its part, and
 * reap.  One function per step below; each ends the sandbox on a failure
 * (the payload's process killed first).
 */

static void served_fail(const JailChildArgs *a, pid_t payload, const char *msg) __attribute__((noreturn));

static void
served_fail(const JailChildArgs *a, pid_t payload, const char *msg)
{
	kill(payload, SIGKILL);
	jail_child_fail(a, msg);
}

/*
 * Fork the payload's process.  Init keeps the write end of the pipe its
 * part of the request goes down (*reqpipe) and, for the early end
 * (jail_init_reap), its end of the socket the payload's seccomp listener
 * comes over (*watch; optional, -1 without).
 */
static pid_t
served_fork(JailChildArgs *a, int *reqpipe, int *watch)
{
	char		err[JAIL_ERRLEN] = "";
	int			pp[2];
	int			ws[2];
	pid_t		payload;

	if (pipe2(pp, O_CLOEXEC) < 0)
	{
		jail_seterr(err, "pipe: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	if (!a->linger || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, ws) < 0)
		ws[0] = ws[1] = -1;
	payload = fork();
	if (payload < 0)
	{
		jail_seterr(err, "fork payload: %s", strerror(errno));
		jail_child_fail(a, err);
	}
	if (payload == 0)
	{
		close(pp[1]);
		if (ws[0] >= 0)
			close(ws[0]);
		a->watch_sock = ws[1];
		served_payload(a, pp[0]);
	}
	close(pp[0]);
	if (ws[1] >= 0)
		close(ws[1]);
	*reqpipe = pp[1];
	*watch = ws[0];
	return payload;
}

/*
 * Before the request: let go of the payload's descriptors, confine
 * ourselves with the init filter, and take the payload's listener, which
 * it sends as soon as its filter is on (EOF if it could not).
 */
static void
served_confine(JailChildArgs *a, pid_t payload, int watch, JailInitState *st)
{
	char		err[JAIL_ERRLEN] = "";

	close(a->paygo_fd);			/* the payload's, not ours */
	if (a->ready_fd >= 0)
		close(a->ready_fd);		/* EOF there: the interpreter is gone */
	if (a->init_filter && jail_confine_init(a->init_filter, a->tree_sock, err) < 0)
		served_fail(a, payload, err);
	if (watch >= 0)
	{
		st->exit_watch = jail_recv_fd(watch, WATCH_WAIT_MS);
		close(watch);
	}
}

/*
 * The request (JAIL_GO_REQUEST, or _NOCGROUP; it is in req_fd): read it,
 * complete the root, drop the last capabilities.
 */
static void
served_take_request(JailChildArgs *a, pid_t payload)
{
	char		err[JAIL_ERRLEN] = "";
	char		go;

	if (read(a->go_fd, &go, 1) != 1)
		_exit(1);
	if (go == JAIL_GO_NOCGROUP)
		a->cgroup_none = true;
	JAIL_TRACE("init: request go");
	load_request(a);
	if (a->warm && a->opts->language != a->warm->language)
		served_fail(a, payload, "the request is not for the warm interpreter's language");
	if (jail_rootfs_complete(a, payload, err) < 0)
		served_fail(a, payload, err);
	if (a->init_filter && jail_drop_held(err) < 0)
		served_fail(a, payload, err);
	JAIL_TRACE("init: root complete");
}

/* Off the payload's path: our end of the (spent) tree socket, then reap. */
static void served_reap(JailChildArgs *a, pid_t payload, const JailInitState *st) __attribute__((noreturn));

static void
served_reap(JailChildArgs *a, pid_t payload, const JailInitState *st)
{
	if (a->tree_sock >= 0)
		close(a->tree_sock);
	a->tree_sock = -1;
	jail_init_reap(a, payload, a->init_filter != NULL, st);
}

/*
 * A warm interpreter waits in its bootstrap: the request's rlimits are set
 * on it from here (a cold payload sets them on itself before its exec),
 * then one byte on reqpipe says the root is complete.
 */
static void served_go_warm(JailChildArgs *a, pid_t payload, int reqpipe, JailInitState *st) __attribute__((noreturn));

static void
served_go_warm(JailChildArgs *a, pid_t payload, int reqpipe, JailInitState *st)
{
	char		err[JAIL_ERRLEN] = "";

	if (jail_warm_rlimits(payload, a->opts, a->cgroup_none, &st->warm_cpu_ms, err) < 0)
		served_fail(a, payload, err);
	close(a->go_fd);
	(void) jail_write_all(reqpipe, "c", 1);
	close(reqpipe);
	served_reap(a, payload, st);
}

/*
 * The root is complete and we hold nothing: the payload's process gets
 * its part.  It still waits for the worker's own go (the workspace
 * checked), which goes to it directly: whichever of the two of us is last
 * wakes it.
 */
static void served_go_cold(JailChildArgs *a, pid_t payload, int reqpipe, const JailInitState *st) __attribute__((noreturn));

static void
served_go_cold(JailChildArgs *a, pid_t payload, int reqpipe, const JailInitState *st)
{
	PayloadRequest pr;

	close(a->go_fd);
	memset(&pr, 0, sizeof(pr));
	pr.language = a->opts->language;
	pr.cgroup_none = a->cgroup_none;
	pr.cpu_ms = a->opts->cpu_ms;
	pr.file_size = a->opts->file_size;
	pr.pids = a->opts->pids;
	if (a->opts->exec_path)
		snprintf(pr.exec_path, sizeof(pr.exec_path), "%s", a->opts->exec_path);
	/* a payload that is gone already is reported by jail_init_reap */
	(void) jail_write_all(reqpipe, &pr, sizeof(pr));
	close(reqpipe);
	served_reap(a, payload, st);
}

void
jail_served_init(JailChildArgs *a)
{
	JailInitState st = {.exit_watch = -1,.warm_cpu_ms = 0};
	int			reqpipe;
	int			watch;
	pid_t		payload;
	char		err[JAIL_ERRLEN] = "";

	/* before the fork: the payload inherits it (sandbox.c, jail_drop_bounding) */
	if (jail_drop_bounding(err) < 0)
		jail_child_fail(a, err);
	payload = served_fork(a, &reqpipe, &watch);
	served_confine(a, payload, watch, &st);
	served_take_request(a, payload);
	if (a->warm)
		served_go_warm(a, payload, reqpipe, &st);
	served_go_cold(a, payload, reqpipe, &st);
}
