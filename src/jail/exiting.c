/*-------------------------------------------------------------------------
 *
 * exiting.c
 *	  The wait status of a payload that is exiting but not yet reaped, read
 *	  by a served sandbox's init from /proc (docs/jail.md, "The early
 *	  end"): what lets the verdict go out while the kernel still frees the
 *	  payload's address space.
 *
 * Init calls jail_exiting_status once its payload's seccomp listener has
 * reported POLLHUP (sandbox.c, init_wait_exiting), i.e. once every task
 * of the payload has entered its exit; whatever cannot be read for sure
 * here is left to the reap, which comes anyway.
 *
 *-------------------------------------------------------------------------
 */
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "jail.h"

/* Looks at the payload's threads before the reap is left to do it. */
#define EXITING_TRIES		200

/*
 * One read of a thread's /proc/PID/task/TID/stat: its state, address
 * space size and exit code (fields 3, 23, 52; proc(5)).  false if it
 * cannot be read (gone) or parsed.
 */
static bool
read_thread_stat(int dirfd, const char *tid, char *state,
				 unsigned long long *vsize, long long *exit_code)
{
	char		path[64];
	char		buf[2048];
	char	   *p;
	char	   *save = NULL;
	int			field = 3;
	ssize_t		n;
	int			fd;

	snprintf(path, sizeof(path), "%s/stat", tid);
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');		/* the name may hold anything but not end it */
	if (!p || p[1] != ' ')
		return false;
	*exit_code = -1;
	for (char *t = strtok_r(p + 2, " \n", &save); t; t = strtok_r(NULL, " \n", &save), field++)
	{
		if (field == 3)
			*state = t[0];
		else if (field == 23)
			*vsize = strtoull(t, NULL, 10);
		else if (field == 52)
			*exit_code = strtoll(t, NULL, 10);
	}
	return *exit_code >= 0;
}

typedef enum ExitingRead
{
	EXITING_KNOWN,				/* *status is the wait status */
	EXITING_NOT_YET,			/* a thread still has its address space */
	EXITING_UNKNOWN				/* not from here: wait for the reap */
} ExitingRead;

/*
 * One look at the payload's threads (taskfd: its /proc/PID/task) while
 * all of them are exiting.  A thread's exit code is set just before it
 * lets go of its address space, so once /proc shows none (vsize 0), its
 * code is final.  The process's wait status is its group exit code when
 * the process ended as a group (exit_group, a fatal signal: every thread
 * then exits with that code) and its first thread's own code otherwise;
 * the two can be told apart only when they differ, so the status is
 * taken only when every thread still there (at least one of them not a
 * zombie yet: a zombie first thread that is alone is reaped as soon)
 * agrees.
 */
static ExitingRead
exiting_read(int taskfd, int *status)
{
	char		buf[4096] __attribute__((aligned(8)));	/* linux_dirent64 */
	long long	agreed = -1;
	bool		live = false;
	long		n;

	if (lseek(taskfd, 0, SEEK_SET) < 0)
		return EXITING_UNKNOWN;
	while ((n = syscall(SYS_getdents64, taskfd, buf, sizeof(buf))) > 0)
	{
		for (long off = 0; off < n;)
		{
			struct
			{
				uint64_t	ino;
				int64_t		off;
				unsigned short reclen;
				unsigned char type;
				char		name[];
			}		   *d = (void *) (buf + off);
			char		state = '?';
			unsigned long long vsize = 1;
			long long	code;

			off += d->reclen;
			if (d->name[0] == '.')
				continue;
			if (!read_thread_stat(taskfd, d->name, &state, &vsize, &code))
				continue;		/* released since the listing */
			if (state != 'Z' && state != 'X' && state != 'x')
				live = true;
			if (vsize != 0)
				return EXITING_NOT_YET;
			if (agreed >= 0 && code != agreed)
				return EXITING_UNKNOWN;
			agreed = code;
		}
	}
	if (n < 0 || agreed < 0 || !live)
		return EXITING_UNKNOWN;
	*status = (int) agreed;
	return EXITING_KNOWN;
}

/*
 * The payload's wait status while it exits, before it can be reaped.  Its
 * listener's POLLHUP says that every task of the payload (it and all it
 * started, all under its seccomp program: Linux releases a task's
 * program at the start of its exit since 6.3) has entered its exit: none
 * will run code or complete a system call again, though the kernel has
 * still to free its memory (~8 ms for an interpreter holding pandas) and
 * close its files.  Read twice with the same answer: the first look may
 * have been taken while an address space was still going (a payload that
 * made itself undumpable hides its codes then; no longer once it is
 * gone, since init has the payload's own ids).  true with *status;
 * false: wait for the reap instead.
 */
bool
jail_exiting_status(int taskfd, int *status)
{
	int			known = 0;
	int			last = -1;

	for (int i = 0; taskfd >= 0 && i < EXITING_TRIES; i++)
	{
		int			st;

		switch (exiting_read(taskfd, &st))
		{
			case EXITING_KNOWN:
				if (known > 0 && st == last)
				{
					*status = st;
					return true;
				}
				known++;
				last = st;
				break;
			case EXITING_NOT_YET:
				known = 0;
				sched_yield();	/* a few microseconds: let it get there */
				break;
			case EXITING_UNKNOWN:
				return false;
		}
	}
	return false;
}
