/*-------------------------------------------------------------------------
 *
 * spawn_process.h
 *	  How the extension and sandbox-runner start a helper process (the
 *	  supervisor its local runner, src/local_runner.c; the runner its jails
 *	  and its launcher, src/runner/launch.c), written once for both.
 *	  Standalone: only the C library, so that the extension and the runner
 *	  (which never includes postgres.h) can both include it.
 *
 * posix_spawn, never fork: the address space of a PostgreSQL process is
 * never copied.  The child gets stdin /dev/null, fds[i] (where >= 0) as
 * its descriptor i + 1 and nothing else (descriptors not given keep what
 * the caller has at 1 and 2: its log), default signal dispositions,
 * nothing blocked, and a process group of its own: a signal meant for the
 * caller's group (pg_terminate_backend() and pg_cancel_backend() signal a
 * backend's whole group, a terminal's ^C the runner's) must not reach the
 * child, which ends with its parent through its own means
 * (PR_SET_PDEATHSIG, EOF on a link).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_SPAWN_PROCESS_H
#define SANDBOX_SPAWN_PROCESS_H

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <sys/types.h>

/* Returns 0 or an errno; *pid is the child's. */
static inline int
sandbox_spawn_process(pid_t *pid, const char *path, char *const argv[], char *const envp[],
					  const int *fds, int nfds, bool vfork)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t	all,
				none;
	int			rc;
	int			top = 3;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	for (int i = 0; fds && i < nfds; i++)
		if (fds[i] >= 0)
		{
			posix_spawn_file_actions_adddup2(&fa, fds[i], i + 1);
			if (i + 2 > top)
				top = i + 2;
		}
	posix_spawn_file_actions_addclosefrom_np(&fa, top);
	posix_spawnattr_init(&attr);
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
							 POSIX_SPAWN_SETPGROUP | (vfork ? POSIX_SPAWN_USEVFORK : 0));
	rc = posix_spawn(pid, path, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return rc;
}

#endif							/* SANDBOX_SPAWN_PROCESS_H */
