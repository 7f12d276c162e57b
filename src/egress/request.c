/*-------------------------------------------------------------------------
 *
 * request.c
 *	  sandbox-egress: one connection's request head.  Reading it within
 *	  EGRESS_HEAD_TIMEOUT_MS, the request line and the headers, the
 *	  authority (host and port), the refusal a connection is answered with,
 *	  and the dispatch to the CONNECT tunnel (tunnel.c) or the HTTP path
 *	  (http.c).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

/* Read the request head (up to CRLFCRLF) within the head timeout. */
static int
read_head(Conn *c)
{
	uint64_t	deadline = c->started + EGRESS_HEAD_TIMEOUT_MS;

	while (c->headlen < EGRESS_HEAD_MAX)
	{
		ssize_t		n;
		char	   *e;

		if (!proxy_wait_readable(c->cfd, deadline))
			return -1;
		n = read(c->cfd, c->head + c->headlen, EGRESS_HEAD_MAX - c->headlen);
		if (n <= 0)
			return -1;
		c->headlen += n;
		c->head[c->headlen] = '\0';
		if (memchr(c->head, '\0', c->headlen))
			return -2;
		e = strstr((char *) c->head, "\r\n\r\n");
		if (e)
		{
			c->headend = (uint8_t *) e + 4 - c->head;
			return 0;
		}
	}
	return -2;
}

/* "host:port" or "[v6]:port" (port required) into c->host and c->port. */
int
proxy_split_authority(Conn *c, const char *a, size_t len, uint16_t defport, char *rawhost,
				size_t rawlen)
{
	const char *hs = a,
			   *he,
			   *colon = NULL;
	char		hb[EGRESS_HOST_MAX + 8];
	long		port = defport;

	if (len && a[0] == '[')
	{
		he = memchr(a, ']', len);
		if (!he)
			return -1;
		hs = a + 1;
		if (he + 1 < a + len)
		{
			if (he[1] != ':')
				return -1;
			colon = he + 1;
		}
	}
	else
	{
		colon = memrchr(a, ':', len);
		he = colon ? colon : a + len;
	}
	if (colon)
	{
		char		pb[8];
		size_t		pl = a + len - colon - 1;
		char	   *end;

		if (pl == 0 || pl >= sizeof(pb))
			return -1;
		memcpy(pb, colon + 1, pl);
		pb[pl] = '\0';
		port = strtol(pb, &end, 10);
		if (*end || port < 1 || port > 65535)
			return -1;
	}
	else if (defport == 0)
		return -1;
	if (he - hs <= 0 || (size_t) (he - hs) >= sizeof(hb) || (size_t) (he - hs) >= rawlen)
		return -1;
	memcpy(hb, hs, he - hs);
	hb[he - hs] = '\0';
	memcpy(rawhost, hb, he - hs + 1);
	c->port = (uint16_t) port;
	return 0;
}

/* A header's value in the head (first occurrence), or NULL. */
const char *
proxy_find_header(const Conn *c, const char *name, size_t *vlen, int *count)
{
	const char *p = strstr((const char *) c->head, "\r\n");
	const char *found = NULL;
	size_t		nl = strlen(name);

	*count = 0;
	while (p && (const uint8_t *) p + 2 < c->head + c->headend - 2)
	{
		const char *line = p + 2;
		const char *eol = strstr(line, "\r\n");

		if (!eol)
			break;
		if ((size_t) (eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':')
		{
			const char *v = line + nl + 1;

			while (*v == ' ' || *v == '\t')
				v++;
			if (!found)
			{
				found = v;
				*vlen = eol - v;
				while (*vlen && (v[*vlen - 1] == ' ' || v[*vlen - 1] == '\t'))
					(*vlen)--;
			}
			(*count)++;
		}
		p = eol;
	}
	return found;
}

void
proxy_serve(Conn *c)
{
	char	   *sp1,
			   *sp2,
			   *eol;
	char	   *line = (char *) c->head;
	int			rc = read_head(c);

	if (rc == -1)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		snprintf(c->reason, sizeof(c->reason), "no request within %d s",
				 EGRESS_HEAD_TIMEOUT_MS / 1000);
		return;
	}
	if (rc == -2)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		proxy_refuse(c, 403, "the request head is malformed or larger than %d bytes",
			   EGRESS_HEAD_MAX);
		return;
	}
	eol = strstr(line, "\r\n");
	sp1 = memchr(line, ' ', eol - line);
	sp2 = sp1 ? memchr(sp1 + 1, ' ', eol - sp1 - 1) : NULL;
	if (!sp1 || !sp2 || (strncmp(sp2 + 1, "HTTP/1.1", 8) != 0 &&
						 strncmp(sp2 + 1, "HTTP/1.0", 8) != 0) || sp2 + 9 != eol)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		proxy_refuse(c, 403, "not an HTTP/1 proxy request");
		return;
	}
	if (sp1 - line == 7 && strncmp(line, "CONNECT", 7) == 0)
		proxy_serve_connect(c, sp1 + 1, sp2 - sp1 - 1);
	else
	{
		char		version[9];

		memcpy(version, sp2 + 1, 8);
		version[8] = '\0';
		proxy_serve_http(c, line, sp1 - line, sp1 + 1, sp2 - sp1 - 1, version);
	}
}
