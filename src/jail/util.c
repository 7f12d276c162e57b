/*-------------------------------------------------------------------------
 *
 * util.c
 *	  Small helpers shared by the host side and the child: diagnostics,
 *	  whole-file writes that never follow symlinks, and the clock.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jail.h"

bool		jail_quiet = false;

void
jail_warn(const char *fmt,...)
{
	va_list		ap;
	char		buf[1024] = "sandbox-jail: ";
	size_t		n = strlen(buf);

	if (jail_quiet)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	n = strlen(buf);
	buf[n++] = '\n';
	/* one write(2), so the line is not interleaved with payload output */
	(void) jail_write_all(STDERR_FILENO, buf, n);
}

/* Format an error message into a JAIL_ERRLEN buffer. */
void
jail_seterr(char *buf, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(buf, JAIL_ERRLEN, fmt, ap);
	va_end(ap);
}

int
jail_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0)
	{
		ssize_t		n = write(fd, p, len);

		if (n < 0)
		{
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= n;
	}
	return 0;
}

/*
 * Write a small control file (uid_map, cgroup knobs).  O_NOFOLLOW because
 * these paths are never meant to be symlinks; a symlink there means someone
 * is steering our write.
 */
int
jail_write_fileat(int dirfd, const char *name, const char *data)
{
	int			fd;
	int			rc;
	int			save;

	fd = openat(dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	rc = jail_write_all(fd, data, strlen(data));
	save = errno;
	close(fd);
	errno = save;
	return rc;
}

int
jail_write_file(const char *path, const char *data)
{
	return jail_write_fileat(AT_FDCWD, path, data);
}

/* Read up to len-1 bytes of a small file; returns bytes read or -1. */
int
jail_read_fileat(int dirfd, const char *name, char *buf, size_t len)
{
	int			fd;
	ssize_t		n;
	size_t		got = 0;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	while (got < len - 1)
	{
		n = read(fd, buf + got, len - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
	}
	close(fd);
	buf[got] = '\0';
	return (int) got;
}

uint64_t
jail_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#ifdef JAIL_TIMING
void
jail_trace(const char *step)
{
	struct timespec ts;
	char		buf[160];
	int			n;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	n = snprintf(buf, sizeof(buf), "jail-trace %d %llu %s\n", (int) getpid(),
				 (unsigned long long) ts.tv_sec * 1000000 + ts.tv_nsec / 1000, step);
	(void) jail_write_all(STDERR_FILENO, buf, n);
}
#endif

/* Read all of fd into a malloc'd buffer, at most JAIL_MAX_CODE bytes. */
char *
jail_read_code(int fd, size_t *len, char *err)
{
	size_t		cap = 65536;
	size_t		n = 0;
	char	   *buf = malloc(cap);

	if (!buf)
	{
		jail_seterr(err, "out of memory");
		return NULL;
	}
	for (;;)
	{
		ssize_t		r;

		if (n == cap)
		{
			char	   *nb;

			if (cap >= JAIL_MAX_CODE)
			{
				jail_seterr(err, "code is larger than %d bytes", JAIL_MAX_CODE);
				free(buf);
				return NULL;
			}
			cap *= 2;
			nb = realloc(buf, cap);
			if (!nb)
			{
				jail_seterr(err, "out of memory");
				free(buf);
				return NULL;
			}
			buf = nb;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
		{
			jail_seterr(err, "read code: %s", strerror(errno));
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		n += r;
	}
	*len = n;
	return buf;
}
