/*-------------------------------------------------------------------------
 *
 * request.c
 *	  sandbox-egress: one connection's request head.  Reading it within
 *	  EGRESS_HEAD_TIMEOUT_MS, each read given to the parser (head.c) at
 *	  once, the refusal a connection is answered with, and the dispatch to
 *	  the CONNECT tunnel (tunnel.c) or the HTTP path (http.c).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

/* Refuse: the reason in the status line and the body, then close. */
void
proxy_refuse(Conn *c, int status, const char *fmt,...)
{
	va_list		ap;
	char		msg[2400];
	const char *what = status == 403 ? "egress denied" : "egress failed";

	va_start(ap, fmt);
	vsnprintf(c->reason, sizeof(c->reason), fmt, ap);
	va_end(ap);
	c->allowed = false;
	snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s: %s\r\nContent-Type: text/plain\r\n"
			 "X-Sandbox-Egress: %s\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n"
			 "%s: %s\n",
			 status, what, c->reason, status == 403 ? "denied" : "failed",
			 strlen(what) + strlen(c->reason) + 3, what, c->reason);
	/* inside an intercepted tunnel the sandbox reads it through TLS */
	if (c->tls)
		(void) proxy_tls_send(c, msg, strlen(msg));
	else
		(void) proxy_write_all(c->cfd, msg, strlen(msg));
}

/* Wait for fd to be readable until deadline (ms); false on timeout/stop. */
bool
proxy_wait_readable(int fd, uint64_t deadline)
{
	for (;;)
	{
		struct pollfd p = {.fd = fd,.events = POLLIN};
		uint64_t	now = proxy_now_ms();
		int			rc;

		if (now >= deadline || atomic_load(&proxy.stopping))
			return false;
		rc = poll(&p, 1, (int) (deadline - now < 200 ? deadline - now : 200));
		if (rc > 0)
			return true;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

/*
 * Read the request head within the head timeout, each read's bytes given
 * to the parser (head.c) as they come, so that a malformed head is refused
 * as soon as the byte that makes it so arrives.  False when there is no
 * head to serve: c->reason says why, and the client was answered where it
 * could still read.
 */
static bool
read_head(Conn *c)
{
	uint64_t	deadline = c->started + EGRESS_HEAD_TIMEOUT_MS;

	for (;;)
	{
		ssize_t		n;
		HeadResult	r;

		if (c->headlen >= EGRESS_HEAD_MAX)
		{
			if (!c->host[0])
				snprintf(c->host, sizeof(c->host), "(none)");
			proxy_refuse(c, 403, "the request head is larger than %d bytes", EGRESS_HEAD_MAX);
			return false;
		}
		if (!proxy_wait_readable(c->cfd, deadline))
			break;
		n = read(c->cfd, c->head + c->headlen, EGRESS_HEAD_MAX - c->headlen);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
		{
			if (!c->host[0])
				snprintf(c->host, sizeof(c->host), "(none)");
			snprintf(c->reason, sizeof(c->reason),
					 "the connection failed before the request head ended: %s", strerror(errno));
			return false;
		}
		if (n == 0)
		{
			if (!c->host[0])
				snprintf(c->host, sizeof(c->host), "(none)");
			if (c->headlen == 0)
				snprintf(c->reason, sizeof(c->reason), "the connection ended without a request");
			else				/* half-closed: it may still read why */
				proxy_refuse(c, 403, "the connection ended before the request head did");
			return false;
		}
		c->headlen += n;
		r = proxy_head_parse(c);
		if (r != HEAD_MORE)
			return r == HEAD_COMPLETE;
	}
	if (!c->host[0])
		snprintf(c->host, sizeof(c->host), "(none)");
	snprintf(c->reason, sizeof(c->reason), "no request within %d s",
			 EGRESS_HEAD_TIMEOUT_MS / 1000);
	return false;
}

/* One connection: its head, then CONNECT's tunnel or the HTTP request. */
void
proxy_serve(Conn *c)
{
	if (!read_head(c))
		return;
	/* a placeholder is for its header through TLS, never in a proxy's head */
	if (proxy_block_placeholder(c, c->head, c->headend, "in a request head to the proxy"))
		return;
	if (c->mode == MODE_CONNECT)
		proxy_serve_connect(c);
	else
		proxy_serve_http(c);
}
