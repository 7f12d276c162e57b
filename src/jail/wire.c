/*-------------------------------------------------------------------------
 *
 * wire.c
 *	  One message with descriptors over the launcher's SOCK_SEQPACKET
 *	  socket, both ways, and the answer's fields.  The format of what is
 *	  inside is in wire_protocol.h and docs/jail.md ("Resident launcher");
 *	  this file moves bytes and descriptors, and reports a message or a
 *	  descriptor list that did not fit as truncated, so that the caller
 *	  refuses it rather than acting on half of it.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wire_protocol.h"

/* room for the descriptors of one message, aligned for a cmsghdr */
typedef union WireControl
{
	char		buf[CMSG_SPACE(sizeof(int) * JAIL_WIRE_FDS_MAX)];
	struct cmsghdr align;
} WireControl;

/* msg with one buffer, no control data yet */
static void
wire_msg_init(struct msghdr *msg, struct iovec *iov, void *buf, size_t len)
{
	memset(msg, 0, sizeof(*msg));
	iov->iov_base = buf;
	iov->iov_len = len;
	msg->msg_iov = iov;
	msg->msg_iovlen = 1;
}

/*
 * Send one message with nfds descriptors (SCM_RIGHTS); sendmsg's flags
 * (MSG_NOSIGNAL always).  The bytes sent, or -1 with errno.
 */
ssize_t
jail_wire_send_flags(int sock, const void *buf, size_t len, const int *fds, int nfds,
					 int flags)
{
	struct msghdr msg;
	struct iovec iov;
	WireControl ctl;
	ssize_t		n;

	if (nfds < 0 || nfds > JAIL_WIRE_FDS_MAX)
	{
		errno = EINVAL;
		return -1;
	}
	wire_msg_init(&msg, &iov, (void *) buf, len);
	if (nfds > 0)
	{
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(sock, &msg, flags | MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

/* The launcher's messages: blocking. */
ssize_t
jail_wire_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	return jail_wire_send_flags(sock, buf, len, fds, nfds, 0);
}

/*
 * Receive one message.  Every descriptor that arrives is returned in fds
 * (close-on-exec), up to maxfds; any beyond that, or any control message
 * that is not SCM_RIGHTS, sets *truncated, and those descriptors are
 * closed here so none leaks into the process.
 */
ssize_t
jail_wire_recv(int sock, void *buf, size_t len, int *fds, int maxfds,
			   int *nfds, bool *truncated)
{
	struct msghdr msg;
	struct iovec iov;
	WireControl ctl;
	struct cmsghdr *c;
	ssize_t		n;

	*nfds = 0;
	*truncated = false;
	wire_msg_init(&msg, &iov, buf, len);
	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof(ctl.buf);
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		*truncated = true;
	for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
	{
		int			cnt;
		int			got[JAIL_WIRE_FDS_MAX];

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		{
			*truncated = true;
			continue;
		}
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (cnt > JAIL_WIRE_FDS_MAX)
			cnt = JAIL_WIRE_FDS_MAX;
		memcpy(got, CMSG_DATA(c), sizeof(int) * cnt);
		for (int i = 0; i < cnt; i++)
		{
			if (*nfds < maxfds)
				fds[(*nfds)++] = got[i];
			else
			{
				close(got[i]);
				*truncated = true;
			}
		}
	}
	return n;
}

/* A request: its magic, NUL-terminated, first. */
void
jail_wire_request_init(JailWireRequest *r, char *buf)
{
	r->buf = buf;
	r->len = sizeof(JAIL_WIRE_MAGIC);
	r->nstrings = 0;
	r->full = false;
	memcpy(buf, JAIL_WIRE_MAGIC, sizeof(JAIL_WIRE_MAGIC));
}

/* One more string of the request, with its NUL; false once it is full. */
bool
jail_wire_request_add(JailWireRequest *r, const char *s)
{
	size_t		n = strlen(s) + 1;

	if (r->full || n > JAIL_WIRE_MAX - r->len || r->nstrings >= JAIL_WIRE_MAX_ARGS)
	{
		r->full = true;
		return false;
	}
	memcpy(r->buf + r->len, s, n);
	r->len += n;
	r->nstrings++;
	return true;
}

/*
 * An answer: magic, rc, verdict (the JSON line, or ""), message (a setup
 * error or a refusal's reason, or ""), each NUL-terminated.  Its length,
 * or -1 if it does not fit in buf.
 */
int
jail_wire_format_answer(char *buf, size_t len, int rc, const char *verdict,
						const char *msg)
{
	int			n = snprintf(buf, len, "%s%c%d%c%s%c%s%c", JAIL_WIRE_MAGIC, 0,
							 rc, 0, verdict, 0, msg, 0);

	return n > 0 && (size_t) n < len ? n : -1;
}

/*
 * An answer's fields, pointers into buf (JailWireAnswerField order); false
 * if a field is missing or not NUL-terminated within len, or the magic is
 * not ours.
 */
bool
jail_wire_split_answer(const char *buf, size_t len,
					   const char *field[JAIL_WIRE_ANSWER_NFIELDS])
{
	const char *p = buf;
	const char *end = buf + len;

	for (int i = 0; i < JAIL_WIRE_ANSWER_NFIELDS; i++)
	{
		const char *nul = p < end ? memchr(p, '\0', end - p) : NULL;

		if (!nul)
			return false;
		field[i] = p;
		p = nul + 1;
	}
	return strcmp(field[JAIL_WIRE_ANSWER_MAGIC], JAIL_WIRE_MAGIC) == 0;
}

/*
 * Take one waiting interpreter of lang, if there is one: then a
 * connection to the warm socket of lang is answered by it.  Never takes
 * one that is not there (the count never goes below zero).
 */
bool
jail_wire_warm_claim(JailWarmPage *page, JailWarmLang lang)
{
	int32_t		n;

	if (!page || lang < 0 || lang >= JAIL_WARM_NLANG)
		return false;
	n = __atomic_load_n(&page->ready[lang], __ATOMIC_ACQUIRE);
	while (n > 0)
	{
		if (__atomic_compare_exchange_n(&page->ready[lang], &n, n - 1, false,
										__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return true;
	}
	return false;
}

/* A worker: +1 when its interpreter waits, -1 (if any) when it no longer does. */
void
jail_wire_warm_post(JailWarmPage *page, JailWarmLang lang, int delta)
{
	if (!page || lang < 0 || lang >= JAIL_WARM_NLANG)
		return;
	if (delta > 0)
		__atomic_add_fetch(&page->ready[lang], delta, __ATOMIC_RELEASE);
	else
		(void) jail_wire_warm_claim(page, lang);
}

/* What the waiting interpreters hold, and how many there are. */
uint64_t
jail_wire_warm_held(const JailWarmPage *page, int *count)
{
	uint64_t	sum = 0;
	int			n = 0;

	for (int i = 0; page && i < JAIL_WARM_MAX; i++)
	{
		if (__atomic_load_n(&page->held[i].pid, __ATOMIC_ACQUIRE) > 0)
		{
			sum += __atomic_load_n(&page->held[i].bytes, __ATOMIC_RELAXED);
			n++;
		}
	}
	if (count)
		*count = n;
	return sum;
}

/*
 * A caller's view of a launcher's page: SOCKET JAIL_WARM_PAGE_SUFFIX
 * mapped shared, or NULL (no warm pool, or not a page of ours: a
 * symlink, the wrong size or magic).
 */
JailWarmPage *
jail_wire_warm_map(const char *sock_path, bool writable)
{
	char		path[4096];
	struct stat st;
	JailWarmPage *page;
	int			fd;

	if (snprintf(path, sizeof(path), "%s%s", sock_path, JAIL_WARM_PAGE_SUFFIX) >= (int) sizeof(path))
		return NULL;
	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
		(size_t) st.st_size != sizeof(JailWarmPage))
	{
		close(fd);
		return NULL;
	}
	page = mmap(NULL, sizeof(JailWarmPage), PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED)
		return NULL;
	if (memcmp(page->magic, JAIL_WARM_PAGE_MAGIC, sizeof(JAIL_WARM_PAGE_MAGIC)) != 0)
	{
		munmap(page, sizeof(JailWarmPage));
		return NULL;
	}
	return page;
}

/*
 * --warm-modules (and sandbox.warm_modules): module names separated by
 * commas, each a dotted Python identifier in ASCII; "" is none.  Nothing
 * else ever reaches a warm interpreter's bootstrap (warm.c).  false with
 * a message in err (errlen bytes) if the list is not that.
 */
bool
jail_wire_check_modules(const char *list, char *err, size_t errlen)
{
	const char *p = list;

	if (strlen(list) > JAIL_WARM_MODULES_LEN)
	{
		snprintf(err, errlen, "the list of warm modules is longer than %d characters",
				 JAIL_WARM_MODULES_LEN);
		return false;
	}
	while (*p)
	{
		bool		start = true;

		for (; *p && *p != ','; p++)
		{
			unsigned char c = (unsigned char) *p;
			bool		ok = c < 0x80 && (start ? (isalpha(c) || c == '_') :
										  (isalnum(c) || c == '_' || c == '.'));

			if (!ok)
			{
				snprintf(err, errlen, "\"%s\" is not a list of module names", list);
				return false;
			}
			start = c == '.';
		}
		if (start)
		{
			snprintf(err, errlen, "\"%s\" is not a list of module names", list);
			return false;
		}
		if (*p == ',')
			p++;
	}
	return true;
}
