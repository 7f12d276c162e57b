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

int
main(int argc, char **argv)
{
	char	   *end;
	unsigned long uid,
				gid;
	int			statusfd;
	pid_t		pid;
	int			st = 0;
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

	pid = fork();
	if (pid < 0)
		fail("fork");
	if (pid == 0)
		payload((uid_t) uid, (gid_t) gid, argv + 4);

	/* reap everything until the payload itself ends */
	for (;;)
	{
		int			s;
		pid_t		w = wait(&s);

		if (w == pid)
		{
			st = s;
			break;
		}
		if (w < 0 && errno != EINTR)
			fail("wait");
	}
	n = snprintf(line, sizeof(line), "%d\n", st);
	if (write(statusfd, line, n) != n || fsync(statusfd) < 0)
		fail("write the status");
	return 0;
}
