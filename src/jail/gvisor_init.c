/*-------------------------------------------------------------------------
 *
 * gvisor_init.c
 *	  sandbox-gvisor-init: the first process of a gvisor run, inside the
 *	  gVisor sandbox (docs/jail.md, "The gvisor class").  Linked
 *	  statically: it runs from the host's file on any root, an image's
 *	  included, whatever libraries that root has.
 *
 *	  sandbox-gvisor-init UID GID STATUS PROGRAM [ARG...]
 *
 * It runs as the sandbox kernel's root (gVisor's, never the host's) with
 * CAP_SETUID, CAP_SETGID and CAP_SETPCAP only.  It opens STATUS (a file
 * in a directory only root may write, on the host: the jail's bundle),
 * forks the payload, which drops every capability, becomes UID:GID and
 * execs PROGRAM with this process's environment (the jail's scrubbed
 * one).  It then reaps every process of the sandbox until the payload
 * ends, writes the payload's wait status to STATUS and exits, which ends
 * the sandbox and everything the payload left behind (as the namespaced
 * sandbox's init does).
 *
 * It also relays the payload's stdout and stderr from pipes of gVisor's
 * own to the run's (see main).
 *
 * Why a process of our own: `runsc run` exits with the container's exit
 * code, or 128+N for a signal N, and cannot tell exit 137 from SIGKILL;
 * the verdict must.  The payload cannot forge STATUS: it runs under
 * another uid, without capabilities, and cannot signal this process
 * (gVisor's pid 1, another uid).
 *
 * Exits: 0 the status was written; 120 usage or setup error (nothing of
 * the payload ran; the reason on stderr, which the jail keeps apart from
 * the payload's only by this code: it reads no STATUS then).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>

#define GVISOR_INIT_SETUP_FAILED 120

extern char **environ;

static void
fail(const char *what)
{
	fprintf(stderr, "sandbox-gvisor-init: %s: %s\n", what, strerror(errno));
	_exit(GVISOR_INIT_SETUP_FAILED);
}

/* The payload's process: no capability left, the run's ids, then exec. */
static void
payload(uid_t uid, gid_t gid, char **argv)
{
	sigset_t	none;

	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int cap = 0; cap <= CAP_LAST_CAP; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			fail("drop the bounding set");
	if (setgroups(0, NULL) < 0)
		fail("setgroups");
	if (setresgid(gid, gid, gid) < 0)
		fail("setresgid");
	/* from root to another uid: the kernel clears every capability set */
	if (setresuid(uid, uid, uid) < 0)
		fail("setresuid");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("no_new_privs");
	execve(argv[0], argv, environ);
	fprintf(stderr, "execve %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* All of buf to fd (a host descriptor: gVisor may write it in parts). */
static void
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0)
	{
		ssize_t		n = write(fd, buf, len);

		if (n > 0)
		{
			buf += n;
			len -= n;
		}
		else if (n < 0 && errno == EAGAIN)
		{
			struct pollfd p = {.fd = fd,.events = POLLOUT};

			(void) poll(&p, 1, 1000);
		}
		else if (n < 0 && errno == EINTR)
			continue;
		else
			return;				/* the jail is gone: nothing to keep */
	}
}

/* What is in the pipe now (all of it when drain), on to fd; false at EOF. */
static bool
relay(int from, int to, bool drain)
{
	static char buf[65536];

	for (;;)
	{
		ssize_t		n = read(from, buf, sizeof(buf));

		if (n > 0)
		{
			write_all(to, buf, n);
			if (!drain)
				return true;
		}
		else if (n < 0 && errno == EINTR)
			continue;
		else
			return n < 0 && errno == EAGAIN;
	}
}

int
main(int argc, char **argv)
{
	char	   *end;
	unsigned long uid,
				gid;
	int			statusfd;
	int			outp[2],
				errp[2];
	bool		open_out = true,
				open_err = true;
	pid_t		pid;
	int			st = 0;
	bool		done = false;
	char		line[32];
	int			n;

	if (argc < 5)
	{
		fprintf(stderr, "usage: sandbox-gvisor-init UID GID STATUS PROGRAM [ARG...]\n");
		return GVISOR_INIT_SETUP_FAILED;
	}
	errno = 0;
	uid = strtoul(argv[1], &end, 10);
	if (errno || *end || uid == 0 || uid > 0x7fffffff)
	{
		fprintf(stderr, "sandbox-gvisor-init: bad uid \"%s\"\n", argv[1]);
		return GVISOR_INIT_SETUP_FAILED;
	}
	gid = strtoul(argv[2], &end, 10);
	if (errno || *end || gid == 0 || gid > 0x7fffffff)
	{
		fprintf(stderr, "sandbox-gvisor-init: bad gid \"%s\"\n", argv[2]);
		return GVISOR_INIT_SETUP_FAILED;
	}
	statusfd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (statusfd < 0)
		fail(argv[3]);

	/*
	 * The payload writes into pipes of gVisor's own, which this process
	 * relays to the run's (the host's): a write to a host pipe inside
	 * gVisor may return after part of it, and a program that does not
	 * retry (Python -u) would lose the rest; a pipe of gVisor's blocks
	 * until all of it is written, as on the host.
	 */
	if (pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)
		fail("pipe");
	pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid == 0)
	{
		if (dup2(outp[1], 1) < 0 || dup2(errp[1], 2) < 0)
			fail("dup2");
		payload((uid_t) uid, (gid_t) gid, argv + 4);
	}
	close(outp[1]);
	close(errp[1]);
	fcntl(outp[0], F_SETFL, O_NONBLOCK);
	fcntl(errp[0], F_SETFL, O_NONBLOCK);

	/*
	 * Relay and reap everything until the payload itself ends; then what
	 * its pipes still hold (whatever it left behind may hold them open:
	 * the run ends with the payload, as a namespaced one does).
	 */
	while (!done)
	{
		struct pollfd p[2] = {{.fd = open_out ? outp[0] : -1,.events = POLLIN},
		{.fd = open_err ? errp[0] : -1,.events = POLLIN}};
		int			s;
		pid_t		w;

		(void) poll(p, 2, 50);
		if (open_out && (p[0].revents & (POLLIN | POLLHUP)))
			open_out = relay(outp[0], 1, false);
		if (open_err && (p[1].revents & (POLLIN | POLLHUP)))
			open_err = relay(errp[0], 2, false);
		while ((w = waitpid(-1, &s, WNOHANG)) > 0)
			if (w == pid)
			{
				st = s;
				done = true;
			}
		if (w < 0 && errno == ECHILD && !done)
			fail("wait");
	}
	if (open_out)
		(void) relay(outp[0], 1, true);
	if (open_err)
		(void) relay(errp[0], 2, true);

	n = snprintf(line, sizeof(line), "%d\n", st);
	if (write(statusfd, line, n) != n || fsync(statusfd) < 0)
		fail("write the status");
	return 0;
}
