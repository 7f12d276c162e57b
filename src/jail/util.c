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
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/uio.h>
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
 * A new file (never an existing one, never through a symlink) holding the
 * nparts parts one after the other: 0, or -1 with the reason in err.
 */
int
jail_write_new_parts(const char *path, const struct iovec *parts, int nparts, mode_t mode,
					 char *err)
{
	int			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	int			i = 0;

	while (fd >= 0 && i < nparts &&
		   jail_write_all(fd, parts[i].iov_base, parts[i].iov_len) == 0)
		i++;
	if (fd < 0 || i < nparts)
	{
		jail_seterr(err, "write %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The same with one part. */
int
jail_write_new(const char *path, const void *data, size_t len, mode_t mode, char *err)
{
	const struct iovec part = {.iov_base = (void *) data,.iov_len = len};

	return jail_write_new_parts(path, &part, 1, mode, err);
}

/*
 * Die with our parent: SIGKILL when it exits (PR_SET_PDEATHSIG).  -1 if it
 * is gone already, before the prctl could take effect.
 */
int
jail_die_with_parent(void)
{
	pid_t		ppid = getppid();

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	return getppid() != ppid ? -1 : 0;
}

/* Close *fd if it is open, and mark it closed (-1). */
void
jail_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
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

/*
 * Send one descriptor over a Unix socket (SCM_RIGHTS), never blocking:
 * 0, or -1 with errno.
 */
int
jail_send_fd(int sock, int fd)
{
	return jail_wire_send_flags(sock, "f", 1, &fd, 1, MSG_DONTWAIT) < 0 ? -1 : 0;
}

/*
 * Receive one descriptor (sent by jail_send_fd) within wait_ms (-1: no
 * bound), close-on-exec; -1 if none came, or the peer closed its end.
 */
int
jail_recv_fd(int sock, int wait_ms)
{
	union
	{
		char		buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	}			ctl;
	char		byte;
	struct iovec iov = {.iov_base = &byte,.iov_len = 1};
	struct msghdr msg = {.msg_iov = &iov,.msg_iovlen = 1,
	.msg_control = ctl.buf,.msg_controllen = sizeof(ctl.buf)};
	struct pollfd p = {.fd = sock,.events = POLLIN};
	struct cmsghdr *c;
	int			fd;
	int			rc;

	do
		rc = poll(&p, 1, wait_ms);
	while (rc < 0 && errno == EINTR);
	if (rc != 1 || recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

uint64_t
jail_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#ifdef JAIL_TIMING
/*
 * Trace stamps go to a page shared by every process forked or cloned
 * after jail_trace_init() (the launcher, its workers, their sandboxes,
 * the payload up to its exec): no syscall per stamp, nothing written to
 * a payload's stdio.  jail_trace_dump() prints them; without an init
 * (one-shot runs) a stamp is written to stderr at once.
 */
typedef struct TraceEntry
{
	uint64_t	us;
	int			pid;
	const char *step;
} TraceEntry;

#define TRACE_MAX 65536
static TraceEntry *trace_buf;
static uint32_t *trace_next;

void
jail_trace_init(void)
{
	void	   *p = mmap(NULL, sizeof(uint32_t) * 16 + TRACE_MAX * sizeof(TraceEntry),
						 PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	trace_next = p;
	trace_buf = (TraceEntry *) ((uint32_t *) p + 16);
}

void
jail_trace_dump(void)
{
	uint32_t	n;

	if (!trace_buf)
		return;
	n = __atomic_load_n(trace_next, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n && i < TRACE_MAX; i++)
		fprintf(stderr, "jail-trace %d %llu %s\n", trace_buf[i].pid,
				(unsigned long long) trace_buf[i].us, trace_buf[i].step);
	fflush(stderr);
}

void
jail_trace(const char *step)
{
	struct timespec ts;
	char		buf[160];
	int			n;
	uint64_t	us;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	us = (uint64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	if (trace_buf)
	{
		uint32_t	i = __atomic_fetch_add(trace_next, 1, __ATOMIC_ACQ_REL);

		if (i < TRACE_MAX)
		{
			trace_buf[i].us = us;
			trace_buf[i].pid = (int) syscall(SYS_getpid);
			trace_buf[i].step = step;
		}
		return;
	}
	n = snprintf(buf, sizeof(buf), "jail-trace %d %llu %s\n", (int) getpid(),
				 (unsigned long long) us, step);
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

/*
 * The code of a run, where the command line says: --code-file, else
 * stdin; none for --exec.  Malloc'd (NULL for --exec, *len 0), or NULL
 * with err set.
 */
char *
jail_load_code(const JailOptions *opts, size_t *len, char *err)
{
	char	   *code;
	int			fd;

	*len = 0;
	if (opts->language == LANG_EXEC)
		return NULL;
	if (!opts->code_file)
		return jail_read_code(STDIN_FILENO, len, err);
	fd = open(opts->code_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
	{
		jail_seterr(err, "code file %s: %s", opts->code_file, strerror(errno));
		return NULL;
	}
	code = jail_read_code(fd, len, err);
	close(fd);
	return code;
}
