/*-------------------------------------------------------------------------
 *
 * spawn.c
 *	  The birth of a sandbox, seen from the host side: the pipes to it
 *	  (JailPipes), the clone into its namespaces, its id maps and the go
 *	  bytes; and a sandbox cloned ahead of its request (jail_prespawn, for
 *	  a launcher's worker).
 *
 * Nothing here decides about a run: lifecycle.c calls these steps in its
 * own order and owns what they return.  The clone's child never returns here:
 * it runs jail_child_main (sandbox.c) and ends with its exit status.
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
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/sched.h>

#include "jail.h"

/* The namespaces a prespawned sandbox's worker holds (JailPrespawn.heldns). */
static const char *const held_ns[3] = {"mnt", "ipc", "uts"};

/* Nothing open: every descriptor -1. */
void
jail_pipes_init(JailPipes *p)
{
	int		   *pairs[] = {p->out, p->errout, p->go, p->err, p->stat, p->life};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
		pairs[i][0] = pairs[i][1] = -1;
}

/* All six, close-on-exec; on failure the ones made are left to jail_pipes_close. */
int
jail_pipes_open(JailPipes *p, char *err)
{
	int		   *pairs[] = {p->out, p->errout, p->go, p->err, p->stat, p->life};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
	{
		if (pipe2(pairs[i], O_CLOEXEC) < 0)
		{
			jail_seterr(err, "pipe: %s", strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The sandbox's ends, into the arguments of its clone. */
void
jail_pipes_child_ends(const JailPipes *p, JailChildArgs *args)
{
	args->out_fd = p->out[1];
	args->errout_fd = p->errout[1];
	args->go_fd = p->go[0];
	args->err_fd = p->err[1];
	args->status_fd = p->stat[1];
	args->lifeline_fd = p->life[0];
}

/*
 * After the clone: close the ends of the pipes that belong to the sandbox
 * (it holds its own copies), so that EOF on ours means it is gone.
 */
void
jail_pipes_close_child_ends(JailPipes *p)
{
	jail_close(&p->out[1]);
	jail_close(&p->errout[1]);
	jail_close(&p->go[0]);
	jail_close(&p->err[1]);
	jail_close(&p->stat[1]);
	jail_close(&p->life[0]);
}

void
jail_pipes_close(JailPipes *p)
{
	int		   *pairs[] = {p->out, p->errout, p->go, p->err, p->stat, p->life};

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
	{
		jail_close(&pairs[i][0]);
		jail_close(&pairs[i][1]);
	}
}

/*
 * Termination requests (SIGTERM, SIGINT, SIGHUP, SIGQUIT) arrive through
 * a signalfd, so that the run's loop handles them like everything else;
 * blocked before the clone so none is lost in between (the payload
 * unblocks them before execve).  also: one more signal for the same
 * signalfd (the launcher's SIGCHLD), or 0.  The signalfd, or -1 with err.
 */
int
jail_stop_signals(int also, char *err)
{
	sigset_t	mask;
	int			fd;

	sigemptyset(&mask);
	if (also)
		sigaddset(&mask, also);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGQUIT);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (fd < 0)
		jail_seterr(err, "signalfd: %s", strerror(errno));
	return fd;
}

/* Outer uid/gid the sandbox's uid 1000 stands for; wsfd: the workspace. */
void
jail_outer_ids(int wsfd, uid_t *uid, gid_t *gid)
{
	struct stat st;

	if (geteuid() != 0)
	{
		/* unprivileged user namespaces allow exactly our own ids */
		*uid = geteuid();
		*gid = getegid();
		return;
	}

	/*
	 * Started by root: never run the payload as uid 0.  Use the
	 * workspace's owner so the payload can write there and files keep an
	 * owner that makes sense; a root-owned workspace gets nobody.
	 */
	if (fstat(wsfd, &st) == 0 && st.st_uid != 0)
	{
		*uid = st.st_uid;
		*gid = st.st_gid != 0 ? st.st_gid : 65534;
	}
	else
	{
		*uid = 65534;
		*gid = 65534;
	}
}

int
jail_write_id_maps(pid_t pid, uid_t uid, gid_t gid, char *err)
{
	char		path[64];
	char		map[64];

	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int) pid);
	snprintf(map, sizeof(map), "%d %u 1\n", JAIL_INNER_UID, (unsigned) uid);
	if (jail_write_file(path, map) < 0)
	{
		jail_seterr(err, "write uid_map: %s", strerror(errno));
		return -1;
	}

	/*
	 * setgroups is denied for good: the payload can then never drop a
	 * supplementary group to get around a "group may not read" rule.
	 */
	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int) pid);
	if (jail_write_file(path, "deny") < 0)
	{
		jail_seterr(err, "write setgroups: %s", strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int) pid);
	snprintf(map, sizeof(map), "%d %u 1\n", JAIL_INNER_GID, (unsigned) gid);
	if (jail_write_file(path, map) < 0)
	{
		jail_seterr(err, "write gid_map: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* One go byte (JAIL_GO_*); false if the sandbox is gone. */
bool
jail_send_go(int fd, char go)
{
	return write(fd, &go, 1) == 1;
}

/*
 * clone3 where available (pidfd); plain clone for valgrind and old kernels.
 * cgroup_fd, a v2 run cgroup or -1: the child is born in it
 * (CLONE_INTO_CGROUP, Linux 5.7+), so there is no move into it to pay for
 * (on v1 the move waits for an RCU grace period, up to ~10 ms); *born_in
 * says whether that happened.  If it did not (an older kernel, clone3
 * refused), the caller moves the child as on v1, and that move reports
 * the reason if there is one.  The child ends in _exit, never returns.
 */
pid_t
jail_spawn(JailChildArgs *args, int *pidfd, int cgroup_fd, bool *born_in)
{
	uint64_t	flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS |
		CLONE_NEWIPC | CLONE_NEWUTS | CLONE_PIDFD;
	struct clone_args ca;
	pid_t		pid = -1;

	/* A launcher's worker hands over a fresh netns it made for this run. */
	if (!args->netns_ready)
		flags |= CLONE_NEWNET;
	*born_in = false;
	memset(&ca, 0, sizeof(ca));
	ca.pidfd = (uint64_t) (uintptr_t) pidfd;
	ca.exit_signal = SIGCHLD;
	if (cgroup_fd >= 0)
	{
		ca.flags = flags | CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t) cgroup_fd;
		pid = syscall(SYS_clone3, &ca, sizeof(ca));
		if (pid == 0)
			_exit(jail_child_main(args));
		if (pid > 0)
		{
			*born_in = true;
			return pid;
		}
		ca.cgroup = 0;
	}
	ca.flags = flags;
	pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0 && errno == ENOSYS)
		pid = syscall(SYS_clone, flags | SIGCHLD, NULL, pidfd, NULL, 0);
	if (pid == 0)
		_exit(jail_child_main(args));
	return pid;
}

/* Nothing made yet: every descriptor -1, so a discard closes only what is. */
static void
prespawn_init(JailPrespawn *p)
{
	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->pidfd = -1;
	p->sigfd = -1;
	p->reqfd = -1;
	p->mountsfd = -1;
	for (int i = 0; i < 3; i++)
		p->heldns[i] = -1;
	jail_pipes_init(&p->pipes);
	for (int i = 0; i < 2; i++)
		p->treesock[i] = p->paygo[i] = p->ready[i] = -1;
	p->warm = false;
	p->mountinfo = NULL;
}

/* All of our /proc/self/mountinfo (malloc'd), or NULL. */
static char *
read_mountinfo(void)
{
	size_t		cap = 64 * 1024,
				len = 0;
	char	   *buf = malloc(cap);
	int			fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	ssize_t		n;

	if (!buf || fd < 0)
	{
		free(buf);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	while ((n = read(fd, buf + len, cap - len - 1)) > 0)
	{
		len += n;
		if (len + 1 == cap)
		{
			char	   *more = cap < 16 * 1024 * 1024 ? realloc(buf, cap * 2) : NULL;

			if (!more)
			{
				free(buf);
				close(fd);
				return NULL;
			}
			buf = more;
			cap *= 2;
		}
	}
	close(fd);
	buf[len] = '\0';
	return n < 0 ? (free(buf), NULL) : buf;
}

/*
 * The line of mount id in a mountinfo text, up to the optional fields
 * (id, parent, major:minor, root, mount point): into out; false if none.
 */
static bool
mount_line(const char *info, uint64_t id, char *out, size_t len)
{
	char		key[32];
	const char *p = info;
	int			klen = snprintf(key, sizeof(key), "%llu ", (unsigned long long) id);

	for (; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
	{
		if (strncmp(p, key, klen) == 0)
		{
			const char *end = p;

			for (int f = 0; f < 5 && end; f++)
				end = strchr(end + (f > 0), ' ');
			if (!end || (size_t) (end - p) >= len)
				return false;
			memcpy(out, p, end - p);
			out[end - p] = '\0';
			return true;
		}
	}
	return false;
}

/* The mount a host path is on was already there, as it is, at the clone. */
static bool
covered(const char *snapshot, const char *now, const char *path)
{
	struct statx stx;
	char		was[4096];
	char		is[4096];

	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) < 0 ||
		!(stx.stx_mask & STATX_MNT_ID))
		return false;
	return mount_line(snapshot, stx.stx_mnt_id, was, sizeof(was)) &&
		mount_line(now, stx.stx_mnt_id, is, sizeof(is)) && strcmp(was, is) == 0;
}

/*
 * A warm sandbox that jail_prespawn_stale calls stale may still serve:
 * its copy of the host tree holds every mount there was at the clone, so
 * if the request's workspace and --ro-bind sources are each on a mount
 * that was there then, unchanged (id, parent, device, root and mount
 * point the same), they are found in the copy as on the host.  A mount
 * over a directory on their way since has another id: not covered.  So
 * a busy host's mounts elsewhere do not cost a warm interpreter.
 */
bool
jail_prespawn_covers(const JailPrespawn *p, const JailOptions *o)
{
	char	   *now;
	bool		ok;

	if (!p->mountinfo || !(now = read_mountinfo()))
		return false;
	ok = covered(p->mountinfo, now, o->workspace);
	for (int i = 0; ok && i < o->nbinds; i++)
		ok = covered(p->mountinfo, now, o->binds[i].src);
	free(now);
	return ok;
}

/*
 * The pipes, the payload's own go pipe, the tree socket, the request
 * memfd; and our mount table, opened before the clone, so that a mount
 * made after it shows (jail_prespawn_stale).
 */
static int
prespawn_open(JailPrespawn *p, bool warm, char *err)
{
	p->mountsfd = open("/proc/self/mounts", O_RDONLY | O_CLOEXEC);
	if (p->mountsfd < 0)
	{
		jail_seterr(err, "open /proc/self/mounts: %s", strerror(errno));
		return -1;
	}
	if (warm)
		p->mountinfo = read_mountinfo();
	if (jail_pipes_open(&p->pipes, err) < 0)
		return -1;
	if (pipe2(p->paygo, O_CLOEXEC) < 0 ||
		socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, p->treesock) < 0 ||
		(p->reqfd = memfd_create("sandbox-request", MFD_CLOEXEC)) < 0 ||
		(warm && pipe2(p->ready, O_CLOEXEC) < 0))
	{
		jail_seterr(err, "pipe: %s", strerror(errno));
		return -1;
	}
	p->sigfd = jail_stop_signals(0, err);
	return p->sigfd < 0 ? -1 : 0;
}

/*
 * The id maps are written at once, so that the child can build the fixed
 * part of its root ahead too.  Unprivileged, they are always our own ids.
 * Started by root, the outer ids are the workspace's owner's, which only
 * the request tells: we guess the ids of the last run (nobody's before
 * the first), and jail_run throws this sandbox away and clones a fresh
 * one if the request proves the guess wrong.  A map is never rewritten,
 * and a sandbox never serves another uid.
 */
static void
prespawn_guess_owner(JailPrespawn *p, const JailRunEnv *env)
{
	if (geteuid() != 0)
	{
		p->ouid = geteuid();
		p->ogid = getegid();
	}
	else if (env->owner_hint && env->owner_hint[0] != 0)
	{
		p->ouid = env->owner_hint[0];
		p->ogid = env->owner_hint[1];
	}
	else
	{
		p->ouid = 65534;
		p->ogid = 65534;
	}
}

/*
 * Tearing down a mount namespace waits for an RCU grace period, paid by
 * whoever drops the last reference: without this, the sandbox's init,
 * before it can be reaped, i.e. before the verdict.  An ipc namespace's
 * is queued to a kworker, which then competes with the end of the run.
 * The worker keeps a reference to each (and the uts namespace's, for the
 * same reason on a smaller scale) and drops them when it exits, after the
 * verdict is sent.
 */
static void
prespawn_hold_namespaces(JailPrespawn *p)
{
	char		path[64];

	for (int i = 0; i < 3; i++)
	{
		snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int) p->pid, held_ns[i]);
		p->heldns[i] = open(path, O_RDONLY | O_CLOEXEC);
	}
}

/*
 * Clone a sandbox before its request exists (worker.c): the
 * clone of six namespaces is the largest fixed cost of a run, and none of
 * it depends on the request.  The child builds the fixed part of its
 * root, waits for JAIL_GO_REQUEST and then reads the request from reqfd;
 * jail_run (env->pre) does the rest exactly as for a sandbox cloned on
 * the spot.  On failure nothing is left: no process, no descriptor.
 */
int
jail_prespawn(JailPrespawn *p, const JailRunEnv *env, char *err)
{
	JailChildArgs args;
	bool		born_in;

	prespawn_init(p);
	if (prespawn_open(p, env->warm != NULL, err) < 0)
		goto fail;

	memset(&args, 0, sizeof(args));
	args.filter = env->filter;
	args.init_filter = env->init_filter;
	jail_pipes_child_ends(&p->pipes, &args);
	args.req_fd = p->reqfd;
	args.tree_sock = p->treesock[1];
	args.watch_sock = -1;		/* made by init for its payload (sandbox.c) */
	args.paygo_fd = p->paygo[0];
	args.linger = env->defer_reap;
	args.netns_ready = env->netns_ready;
	args.served = true;
	args.egress_fd = -1;		/* egress runs get a fresh clone (lifecycle.c) */
	args.prebuild = true;
	args.warm = env->warm;
	args.ready_fd = p->ready[1];
	if (env->warm)
	{
		p->warm = true;
		p->warm_language = env->warm->language;
	}
	prespawn_guess_owner(p, env);

	p->pid = jail_spawn(&args, &p->pidfd, -1, &born_in);
	if (p->pid < 0)
	{
		jail_seterr(err, "clone: %s", strerror(errno));
		goto fail;
	}
	jail_pipes_close_child_ends(&p->pipes);
	jail_close(&p->treesock[1]);
	jail_close(&p->paygo[0]);
	jail_close(&p->ready[1]);
	prespawn_hold_namespaces(p);

	if (jail_write_id_maps(p->pid, p->ouid, p->ogid, err) < 0 ||
		!jail_send_go(p->pipes.go[1], JAIL_GO_MAPPED))
	{
		if (!err[0])
			jail_seterr(err, "signal the sandbox: %s", strerror(errno));
		goto fail;
	}
	return 0;

fail:
	jail_prespawn_discard(p);
	return -1;
}

/*
 * Has a file system been mounted or unmounted (in our mount namespace)
 * since the sandbox was cloned?  Its mount namespace is a private copy of
 * ours as it was then, and so is the copy of the host tree that it takes
 * for the request's workspace and --ro-bind sources: a workspace on a
 * file system mounted since (the work directory moved to a new mount) is
 * not in it.  Such a sandbox cannot serve; a fresh one is cloned.  The
 * kernel marks /proc/self/mounts with POLLPRI once the table changes
 * after the open (proc(5)); it is never read, so any change counts: on a
 * busy host a run may pay for a fresh clone it did not need, never for a
 * stale view.
 */
bool
jail_prespawn_stale(const JailPrespawn *p)
{
	struct pollfd pfd = {.fd = p->mountsfd,.events = POLLPRI};

	return p->mountsfd < 0 || poll(&pfd, 1, 0) != 0;
}

/*
 * A prespawned sandbox that does not fit the request (or could not be
 * made whole): kill and reap it, close all.  The kill goes through the
 * pidfd (kill(2) only if that fails), so that a recycled pid is never hit.
 */
void
jail_prespawn_discard(JailPrespawn *p)
{
	if (p->pid > 0)
	{
		if (syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0)
			kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
	}
	jail_pipes_close(&p->pipes);
	jail_close(&p->sigfd);
	jail_close(&p->pidfd);
	jail_close(&p->reqfd);
	jail_close(&p->mountsfd);
	for (int i = 0; i < 3; i++)
		jail_close(&p->heldns[i]);
	jail_close(&p->treesock[0]);
	jail_close(&p->treesock[1]);
	jail_close(&p->paygo[0]);
	jail_close(&p->paygo[1]);
	jail_close(&p->ready[0]);
	jail_close(&p->ready[1]);
	free(p->mountinfo);
	p->mountinfo = NULL;
	p->pid = -1;
	p->warm = false;
}

/*
 * Discard a prespawned sandbox that gave up on its own (a warm
 * interpreter that did not start) and keep its setup error, if it wrote
 * one: after the reap every write end of the error pipe is closed, so the
 * read cannot block.  buf gets "" when there is none.
 */
void
jail_prespawn_discard_reason(JailPrespawn *p, char *buf, size_t len)
{
	ssize_t		n = -1;

	buf[0] = '\0';
	if (p->pid > 0)
	{
		if (syscall(SYS_pidfd_send_signal, p->pidfd, SIGKILL, NULL, 0) < 0)
			kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = -1;
	}
	if (p->pipes.err[0] >= 0)
		n = read(p->pipes.err[0], buf, len - 1);
	if (n > 0)
		buf[n] = '\0';
	jail_prespawn_discard(p);
}
