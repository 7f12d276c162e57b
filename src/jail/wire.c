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
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire_protocol.h"

ssize_t
jail_wire_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	struct msghdr msg;
	struct iovec iov;
	union
	{
		char		buf[CMSG_SPACE(sizeof(int) * JAIL_WIRE_NFDS)];
		struct cmsghdr align;
	}			ctl;
	ssize_t		n;

	if (nfds < 0 || nfds > JAIL_WIRE_NFDS)
	{
		errno = EINVAL;
		return -1;
	}
	memset(&msg, 0, sizeof(msg));
	iov.iov_base = (void *) buf;
	iov.iov_len = len;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
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
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
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
	union
	{
		char		buf[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr align;
	}			ctl;
	struct cmsghdr *c;
	ssize_t		n;

	*nfds = 0;
	*truncated = false;
	memset(&msg, 0, sizeof(msg));
	iov.iov_base = buf;
	iov.iov_len = len;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
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
		int			got[16];

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
		{
			*truncated = true;
			continue;
		}
		cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (cnt > 16)
			cnt = 16;
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
