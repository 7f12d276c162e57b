/*-------------------------------------------------------------------------
 *
 * tunnel.c
 *	  sandbox-egress: moving bytes, and the CONNECT tunnel.  The run's byte
 *	  caps (each direction counted as it passes), the relay both ways
 *	  (splice, in the kernel), and CONNECT: vetted, dialled, 200, then the
 *	  first bytes must be a TLS ClientHello whose server name is the host.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proxy.h"


/*
 * Count n bytes in one direction against the run's cap.  Returns how many
 * may pass (all, or what is left of the cap); a cap reached flags the run.
 */
size_t
proxy_take_bytes(bool up, size_t n)
{
	size_t		ok;
	uint64_t   *used = up ? &proxy.bytes_up : &proxy.bytes_down;
	uint64_t	cap = up ? proxy.policy.max_bytes_up : proxy.policy.max_bytes_down;

	pthread_mutex_lock(&proxy.lock);
	ok = *used >= cap ? 0 : (cap - *used < n ? cap - *used : n);
	*used += ok;
	if (ok < n)
		proxy.limit_hit = true;
	pthread_mutex_unlock(&proxy.lock);
	return ok;
}

int
proxy_send_counted(Conn *c, int fd, const uint8_t *buf, size_t n, bool up)
{
	size_t		ok = proxy_take_bytes(up, n);

	if (ok && proxy_write_all(fd, buf, ok) < 0)
		return -1;
	if (up)
		c->up += ok;
	else
		c->down += ok;
	if (ok < n)
	{
		snprintf(c->reason, sizeof(c->reason), "the run's byte limit (%s) was reached",
				 up ? "up" : "down");
		return -1;
	}
	return 0;
}

/*
 * Move what src has (at most max bytes) to dst through the pipe p, in the
 * kernel (splice: no copy through this process), counted against the
 * run's cap in that direction.  Returns the bytes taken from src, 0 at
 * EOF, -1 on an error or when the cap cut it (then c->reason says so).
 */
static ssize_t
move_bytes(Conn *c, int src, int dst, int p[2], size_t max, bool up)
{
	ssize_t		n = splice(src, NULL, p[1], NULL, max, SPLICE_F_MOVE);
	size_t		ok,
				left;

	if (n <= 0)
		return n;
	ok = proxy_take_bytes(up, n);
	for (left = ok; left > 0;)
	{
		ssize_t		m = splice(p[0], NULL, dst, NULL, left, SPLICE_F_MOVE);

		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		left -= m;
	}
	if (up)
		c->up += ok;
	else
		c->down += ok;
	if (ok < (size_t) n)
	{
		/* the rest stays in the pipe, which is closed with the connection */
		snprintf(c->reason, sizeof(c->reason), "the run's byte limit (%s) was reached",
				 up ? "up" : "down");
		return -1;
	}
	return n;
}

/*
 * Relay both ways until both sides are done.  up_left: how many more
 * bytes the sandbox may send (HTTP: the declared body), or UINT64_MAX.
 */
void
proxy_relay(Conn *c, uint64_t up_left)
{
	int			pu[2] = {-1, -1},
				pd[2] = {-1, -1};
	bool		cdone = up_left == 0,
				udone = false;

	if (pipe2(pu, O_CLOEXEC) < 0 || pipe2(pd, O_CLOEXEC) < 0)
		goto out;
	(void) fcntl(pd[1], F_SETPIPE_SZ, EGRESS_BUF * 4);
	if (cdone)
		shutdown(c->ufd, SHUT_WR);
	while (!udone && !atomic_load(&proxy.stopping))
	{
		struct pollfd p[2] = {{.fd = cdone ? -1 : c->cfd,.events = POLLIN},
		{.fd = c->ufd,.events = POLLIN}};
		int			rc = poll(p, 2, 200);

		if (rc < 0 && errno != EINTR)
			break;
		if (rc <= 0)
			continue;
		if (p[0].revents)
		{
			size_t		want = up_left < EGRESS_BUF ? up_left : EGRESS_BUF;
			ssize_t		n = move_bytes(c, c->cfd, c->ufd, pu, want, true);

			if (n < 0 && c->reason[0])
				break;
			if (n <= 0)
			{
				cdone = true;
				shutdown(c->ufd, SHUT_WR);
			}
			else
			{
				if (up_left != UINT64_MAX)
					up_left -= n;
				if (up_left == 0)
				{
					/* the whole request sent: nothing more goes up */
					cdone = true;
					shutdown(c->ufd, SHUT_WR);
				}
			}
		}
		if (p[1].revents)
		{
			ssize_t		n = move_bytes(c, c->ufd, c->cfd, pd, EGRESS_BUF * 4, false);

			if (n < 0)
				break;
			if (n == 0)
				udone = true;
		}
	}
out:
	for (int i = 0; i < 2; i++)
	{
		if (pu[i] >= 0)
			close(pu[i]);
		if (pd[i] >= 0)
			close(pd[i]);
	}
}

/* CONNECT host:port, its head parsed (head.c): vet, dial, 200, the tunnel. */
void
proxy_serve_connect(Conn *c)
{
	EgressAddr	dst;
	char		sni[EGRESS_HOST_MAX + 2];
	int			r;
	uint64_t	deadline;
	const EgressSecret *s;
	size_t		at;
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";

	if (!proxy_vet(c, c->req.rawhost, &dst))
		return;
	if (!proxy_dial_vetted(c, &dst))
		return;
	if (proxy_write_all(c->cfd, ok, sizeof(ok) - 1) < 0)
		return;

	/* the client's first bytes: a ClientHello naming exactly our host */
	memmove(c->head, c->head + c->headend, c->headlen - c->headend);
	c->headlen -= c->headend;
	deadline = proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
	while ((r = egress_tls_sni(c->head, c->headlen, sni, sizeof(sni))) == EGRESS_SNI_SHORT)
	{
		ssize_t		n;

		if (c->headlen >= EGRESS_HEAD_MAX || !proxy_wait_readable(c->cfd, deadline) ||
			(n = read(c->cfd, c->head + c->headlen, EGRESS_HEAD_MAX - c->headlen)) <= 0)
		{
			snprintf(c->reason, sizeof(c->reason), "no TLS ClientHello through the tunnel");
			return;
		}
		c->headlen += n;
	}
	if (r == EGRESS_SNI_NOT_TLS)
	{
		snprintf(c->reason, sizeof(c->reason),
				 "the tunnel to %s:%u did not start with a TLS ClientHello (only TLS is relayed)",
				 c->host, c->port);
		return;
	}
	if (r == EGRESS_SNI_NONE && egress_is_numeric_host(c->host))
	{
		/* an IP literal (admitted by a CIDR rule) has no server name */
		c->allowed = true;
		if (proxy_send_counted(c, c->ufd, c->head, c->headlen, true) == 0)
			proxy_relay(c, UINT64_MAX);
		return;
	}
	if (r == EGRESS_SNI_NONE)
	{
		snprintf(c->reason, sizeof(c->reason), "the TLS ClientHello names no server (SNI)");
		return;
	}
	if (sni[0] && sni[strlen(sni) - 1] == '.')
		sni[strlen(sni) - 1] = '\0';
	if (strcmp(sni, c->host) != 0)
	{
		char		shown[EGRESS_HOST_MAX + 2];

		proxy_json_str(shown, sizeof(shown), sni);
		snprintf(c->reason, sizeof(c->reason),
				 "the TLS server name %.100s is not the tunnel's host %s", shown, c->host);
		return;
	}
	/* a host a secret goes to: TLS ends here, on both sides (intercept.c) */
	if (proxy_intercepts(c->host, c->port))
	{
		proxy_serve_intercept(c);
		return;
	}
	/* the ClientHello is the tunnel's one clear part: no placeholder in it */
	if (proxy.nsecrets > 0 && (s = proxy_find_placeholder(c->head, c->headlen, &at)) != NULL)
	{
		snprintf(c->secret, sizeof(c->secret), "%s", s->name);
		snprintf(c->reason, sizeof(c->reason),
				 "the placeholder of secret %s was sent in a TLS ClientHello to %s:%u; it goes only in the %s header of requests to %s%s",
				 s->name, c->host, c->port, s->header,
				 s->rule->kind == RULE_WILDCARD ? "*." : "", s->rule->host);
		return;
	}
	c->allowed = true;
	if (proxy_send_counted(c, c->ufd, c->head, c->headlen, true) == 0)
		proxy_relay(c, UINT64_MAX);
}

