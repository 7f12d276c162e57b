/*-------------------------------------------------------------------------
 *
 * intercept.c
 *	  sandbox-egress: a CONNECT to a host a secret goes to (docs/secrets.md).
 *	  The tunnel was vetted and dialled as any other, and the sandbox's
 *	  ClientHello names the CONNECT's host (tunnel.c).  Then, instead of
 *	  relaying TLS:
 *
 *	  1. TLS with the real server, verified by name against the CA bundle
 *	     (the system's, or the one configured), offering HTTP/1.1 only;
 *	  2. TLS with the sandbox, with a certificate of the run's CA (ca.c),
 *	     HTTP/1.1 only (a client that offers h2 alone is refused by ALPN);
 *	  3. one request head, parsed by head.c in origin form: its Host must
 *	     name the CONNECT's host and port (so CONNECT = SNI = Host);
 *	  4. a placeholder in the head is allowed in one place only: the header
 *	     its secret is bound to, exactly as the header's template, to a host
 *	     the secret goes to; there it is replaced by the value.  Anywhere
 *	     else (the target, another header, another host's secret) the
 *	     request is refused and recorded;
 *	  5. the request goes up written anew (as http.c does), hop-by-hop
 *	     fields dropped, Accept-Encoding: identity, Connection: close;
 *	  6. the relay: the sandbox's further bytes (a body) looked at for a
 *	     placeholder (the request is cut where one is), the server's bytes
 *	     scrubbed of every value (scrub.c).
 *
 *	  One request per connection (Connection: close both ways).  Every
 *	  socket is non-blocking here; each wait is a poll with the head
 *	  timeout, or (the relay) until the run ends.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "proxy.h"

#define UPSTREAM_HEAD_MAX	(EGRESS_HEAD_MAX + EGRESS_HEAD_FIELDS_MAX * 4 + \
							 EGRESS_MAX_SECRETS * 4096 + 128)

/*
 * The sandbox's side of TLS reads the ClientHello that tunnel.c already
 * read (its prefix) before the socket: a BIO of our own, only I/O.
 */
typedef struct PrefixFd
{
	int			fd;
	uint8_t    *pre;
	size_t		prelen;
	size_t		preoff;
} PrefixFd;

static BIO_METHOD *prefix_method;
static pthread_once_t prefix_once = PTHREAD_ONCE_INIT;

static int
prefix_read(BIO *b, char *out, int n)
{
	PrefixFd   *p = BIO_get_data(b);
	ssize_t		r;

	BIO_clear_retry_flags(b);
	if (p->preoff < p->prelen)
	{
		size_t		k = p->prelen - p->preoff < (size_t) n ? p->prelen - p->preoff : (size_t) n;

		memcpy(out, p->pre + p->preoff, k);
		p->preoff += k;
		return (int) k;
	}
	r = read(p->fd, out, n);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		BIO_set_retry_read(b);
	return (int) r;
}

static int
prefix_write(BIO *b, const char *in, int n)
{
	PrefixFd   *p = BIO_get_data(b);
	ssize_t		r = write(p->fd, in, n);

	BIO_clear_retry_flags(b);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		BIO_set_retry_write(b);
	return (int) r;
}

static long
prefix_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static void
prefix_method_make(void)
{
	prefix_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "egress prefix");
	if (prefix_method)
	{
		BIO_meth_set_read(prefix_method, prefix_read);
		BIO_meth_set_write(prefix_method, prefix_write);
		BIO_meth_set_ctrl(prefix_method, prefix_ctrl);
	}
}

/* One intercepted connection: both TLS sessions and the relay's buffers. */
typedef struct Intercept
{
	Conn	   *c;
	SSL		   *cs;				/* the sandbox's */
	SSL		   *us;				/* the server's */
	PrefixFd	pre;
	Scrubber   *scrub;
	uint8_t    *ubuf;			/* up: held-back tail, then what was read */
	size_t		uhold;
	size_t		usend;			/* of ubuf, this much is being written up */
	size_t		uoff;
	uint8_t    *dpend;			/* down: scrubbed, being written (the scrubber's) */
	size_t		dlen;
	size_t		doff;
	bool		cdone;
	bool		udone;
} Intercept;

/*
 * After an SSL call returned rc <= 0: wait as it wants (until deadline)
 * and say to try again (true), or that the call failed (false).
 */
static bool
tls_wait(SSL *ssl, int fd, int rc, uint64_t deadline)
{
	int			e = SSL_get_error(ssl, rc);
	struct pollfd p = {.fd = fd};
	uint64_t	now = proxy_now_ms();

	if (e == SSL_ERROR_WANT_READ)
		p.events = POLLIN;
	else if (e == SSL_ERROR_WANT_WRITE)
		p.events = POLLOUT;
	else
		return false;
	if (now >= deadline || atomic_load(&proxy.stopping))
		return false;
	return poll(&p, 1, (int) (deadline - now < 200 ? deadline - now : 200)) >= 0 || errno == EINTR;
}

static bool
tls_handshake(SSL *ssl, int fd, uint64_t deadline)
{
	int			rc;

	while ((rc = SSL_do_handshake(ssl)) != 1)
		if (!tls_wait(ssl, fd, rc, deadline))
			return false;
	return true;
}

static int
tls_write_all(SSL *ssl, int fd, const void *buf, size_t len, uint64_t deadline)
{
	const uint8_t *p = buf;

	while (len > 0)
	{
		int			n = SSL_write(ssl, p, (int) (len > 1 << 20 ? 1 << 20 : len));

		if (n > 0)
		{
			p += n;
			len -= n;
		}
		else if (!tls_wait(ssl, fd, n, deadline))
			return -1;
	}
	return 0;
}

/* A refusal's (or anything's) bytes to the sandbox through its TLS. */
int
proxy_tls_send(Conn *c, const void *buf, size_t len)
{
	return tls_write_all(c->tls, c->cfd, buf, len, proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS);
}

/* The request head through the sandbox's TLS; false when there is none. */
static bool
read_inner_head(Intercept *in)
{
	Conn	   *c = in->c;
	uint64_t	deadline = proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS;

	memset(&c->req, 0, sizeof(c->req));
	c->req.origin = true;
	c->headlen = c->headend = 0;
	for (;;)
	{
		int			n;
		HeadResult	r;

		if (c->headlen >= EGRESS_HEAD_MAX)
		{
			proxy_refuse(c, 403, "the request head is larger than %d bytes", EGRESS_HEAD_MAX);
			return false;
		}
		n = SSL_read(in->cs, c->head + c->headlen, (int) (EGRESS_HEAD_MAX - c->headlen));
		if (n > 0)
		{
			c->headlen += n;
			r = proxy_head_parse(c);
			if (r != HEAD_MORE)
				return r == HEAD_COMPLETE;
			continue;
		}
		if (SSL_get_error(in->cs, n) == SSL_ERROR_WANT_READ ||
			SSL_get_error(in->cs, n) == SSL_ERROR_WANT_WRITE)
		{
			if (tls_wait(in->cs, c->cfd, n, deadline))
				continue;
			snprintf(c->reason, sizeof(c->reason), "no request within %d s through the tunnel",
					 EGRESS_HEAD_TIMEOUT_MS / 1000);
			return false;
		}
		snprintf(c->reason, sizeof(c->reason), c->headlen == 0 ?
				 "the tunnel ended without a request" :
				 "the connection ended before the request head did");
		return false;
	}
}

/*
 * A placeholder where it may not be: the request refused and recorded,
 * saying where it was and where it may go.
 */
static void
block(Conn *c, const EgressSecret *s, const char *where)
{
	snprintf(c->secret, sizeof(c->secret), "%s", s->name);
	proxy_refuse(c, 403, "the placeholder of secret %s was sent %s to %s:%u; it goes only in the %s header of requests to %s%s",
				 s->name, where, c->host, c->port, s->header,
				 s->rule->kind == RULE_WILDCARD ? "*." : "", s->rule->host);
}

static void
out_add(uint8_t *buf, size_t *len, const void *p, size_t n)
{
	memcpy(buf + *len, p, n);
	*len += n;
}

/*
 * The request head as it goes up, from the parsed parts, each placeholder
 * judged (step 4 above); into out (UPSTREAM_HEAD_MAX bytes).  False after
 * a refusal.
 */
static bool
upstream_head(Intercept *in, uint8_t *out, size_t *len)
{
	Conn	   *c = in->c;
	const RequestHead *r = &c->req;
	const EgressSecret *s;
	size_t		at;
	int			used = 0;

	*len = 0;
	if ((s = proxy_find_placeholder(c->head + r->target.off, r->target.len, &at)) != NULL)
	{
		block(c, s, "in the request target");
		return false;
	}
	out_add(out, len, c->head + r->method.off, r->method.len);
	out_add(out, len, " ", 1);
	out_add(out, len, c->head + r->path.off, r->path.len);
	out_add(out, len, " ", 1);
	out_add(out, len, c->head + r->version.off, r->version.len);
	out_add(out, len, "\r\n", 2);
	for (int i = 0; i < r->nfields; i++)
	{
		const HeadField *f = &r->fields[i];
		const uint8_t *v = c->head + f->value.off;
		bool		put = false;

		if ((s = proxy_find_placeholder(c->head + f->name.off, f->name.len, &at)) != NULL)
		{
			block(c, s, "in a header's name");
			return false;
		}
		if ((s = proxy_find_placeholder(v, f->value.len, &at)) != NULL)
		{
			size_t		pl = strlen(s->prefix),
						sl = strlen(s->suffix);
			char		where[EGRESS_SECRET_NAME_MAX + 2 * EGRESS_SECRET_HEADER_MAX + 64];

			if (!proxy_secret_applies(s, c->host, c->port))
			{
				block(c, s, "in a request");
				return false;
			}
			snprintf(where, sizeof(where), "in the %.*s header", (int) (f->name.len < 64 ? f->name.len : 64),
					 c->head + f->name.off);
			if (f->name.len != strlen(s->header) ||
				strncasecmp((const char *) c->head + f->name.off, s->header, f->name.len) != 0)
			{
				block(c, s, where);
				return false;
			}
			if (f->value.len != pl + EGRESS_PLACEHOLDER_LEN + sl ||
				memcmp(v, s->prefix, pl) != 0 ||
				memcmp(v + pl, s->placeholder, EGRESS_PLACEHOLDER_LEN) != 0 ||
				memcmp(v + pl + EGRESS_PLACEHOLDER_LEN, s->suffix, sl) != 0)
			{
				snprintf(where, sizeof(where), "in the %s header, not as its template %s{}%s",
						 s->header, s->prefix, s->suffix);
				block(c, s, where);
				return false;
			}
			/* the one place a value is written */
			out_add(out, len, c->head + f->name.off, f->name.len);
			out_add(out, len, ": ", 2);
			out_add(out, len, s->prefix, pl);
			out_add(out, len, s->value, s->value_len);
			out_add(out, len, s->suffix, sl);
			out_add(out, len, "\r\n", 2);
			if (!strstr(c->secret, s->name))
				snprintf(c->secret + strlen(c->secret), sizeof(c->secret) - strlen(c->secret),
						 "%s%s", used++ ? "," : "", s->name);
			put = true;
		}
		if (put || proxy_hop_by_hop(c, f->name) ||
			(f->name.len == 15 &&
			 strncasecmp((const char *) c->head + f->name.off, "Accept-Encoding", 15) == 0))
			continue;
		out_add(out, len, c->head + f->name.off, f->name.len);
		out_add(out, len, ":", 1);
		if (f->value.len)
		{
			out_add(out, len, " ", 1);
			out_add(out, len, v, f->value.len);
		}
		out_add(out, len, "\r\n", 2);
	}
	/* a body the proxy can scan (scrub.c), and one request */
	out_add(out, len, "Accept-Encoding: identity\r\nConnection: close\r\n\r\n", 48);
	return true;
}

/*
 * The sandbox's bytes after the head (ubuf[uhold, uhold + n) new): a
 * placeholder among them cuts the request; what cannot start one goes up.
 * False when it was cut.
 */
static bool
up_take(Intercept *in, size_t n)
{
	Conn	   *c = in->c;
	size_t		total = in->uhold + n,
				keep;
	size_t		at;
	const EgressSecret *s = proxy_find_placeholder(in->ubuf, total, &at);

	if (s)
	{
		block(c, s, "in a request body");
		return false;
	}
	keep = in->cdone ? 0 : (total < EGRESS_PLACEHOLDER_LEN - 1 ? total : EGRESS_PLACEHOLDER_LEN - 1);
	in->usend = total - keep;
	in->uoff = 0;
	in->uhold = keep;
	return true;
}

/* A direction's bytes counted against the run's cap; false when it cut them. */
static bool
counted(Conn *c, size_t n, bool up)
{
	if (proxy_take_bytes(up, n) < n)
	{
		snprintf(c->reason, sizeof(c->reason), "the run's byte limit (%s) was reached",
				 up ? "up" : "down");
		return false;
	}
	return true;
}

/*
 * The relay's state of each side's reads: a read that found nothing
 * (WANT_READ) is not tried again until poll says the socket is readable,
 * so a download does not cost a failed read of the sandbox's side per
 * record (and the other way round).
 */
typedef struct RelayWait
{
	bool		c_idle;			/* the sandbox's side had nothing to read */
	bool		u_idle;			/* the server's side had nothing to read */
} RelayWait;

/* One step of the relay's up direction; progress in *moved. */
static bool
relay_up(Intercept *in, RelayWait *w, short *cev, short *uev, bool *moved)
{
	Conn	   *c = in->c;
	int			n;

	while (in->uoff < in->usend)
	{
		n = SSL_write(in->us, in->ubuf + in->uoff, (int) (in->usend - in->uoff));
		if (n <= 0)
		{
			int			e = SSL_get_error(in->us, n);

			if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
				return false;
			*uev |= e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
			return true;
		}
		in->uoff += n;
		c->up += n;
		*moved = true;
		if (in->uoff == in->usend)
		{
			memmove(in->ubuf, in->ubuf + in->usend, in->uhold);
			in->usend = in->uoff = 0;
		}
	}
	if (in->cdone)
		return true;
	if (w->c_idle)
	{
		*cev |= POLLIN;
		return true;
	}
	n = SSL_read(in->cs, in->ubuf + in->uhold, EGRESS_BUF);
	if (n > 0)
	{
		*moved = true;
		return counted(c, n, true) && up_take(in, n);
	}
	switch (SSL_get_error(in->cs, n))
	{
		case SSL_ERROR_WANT_READ:
			w->c_idle = true;
			*cev |= POLLIN;
			return true;
		case SSL_ERROR_WANT_WRITE:
			*cev |= POLLOUT;
			return true;
		default:
			/* the sandbox is done sending: what was held back goes too */
			in->cdone = true;
			*moved = true;
			return up_take(in, 0);
	}
}

/*
 * One step of the relay's down direction: what is pending written, else
 * as many of the server's records as are there (up to the buffer), then
 * scrubbed at once; progress in *moved.
 */
static bool
relay_down(Intercept *in, RelayWait *w, uint8_t *rbuf, size_t rcap, short *cev, short *uev,
		   bool *moved)
{
	Conn	   *c = in->c;
	char		why[300];
	size_t		got = 0;
	int			n;

	while (in->doff < in->dlen)
	{
		n = SSL_write(in->cs, in->dpend + in->doff, (int) (in->dlen - in->doff));
		if (n <= 0)
		{
			int			e = SSL_get_error(in->cs, n);

			if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ)
				return false;
			*cev |= e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
			return true;
		}
		in->doff += n;
		c->down += n;
		*moved = true;
	}
	if (in->udone)
		return true;
	if (w->u_idle)
	{
		*uev |= POLLIN;
		return true;
	}
	while (got < rcap - 16384)
	{
		n = SSL_read(in->us, rbuf + got, (int) (rcap - got));
		if (n > 0)
		{
			got += n;
			continue;
		}
		switch (SSL_get_error(in->us, n))
		{
			case SSL_ERROR_WANT_READ:
				w->u_idle = true;
				*uev |= POLLIN;
				break;
			case SSL_ERROR_WANT_WRITE:
				*uev |= POLLOUT;
				break;
			default:
				in->udone = true;
		}
		break;
	}
	if (got == 0 && !in->udone)
		return true;
	*moved = true;
	if (proxy_scrub(in->scrub, rbuf, got, in->udone, &in->dpend, &in->dlen, why, sizeof(why)) < 0)
	{
		/* nothing of the answer went yet: the sandbox is told why */
		if (c->down == 0)
		{
			/* (the request did go: the row stays allowed, with the reason) */
			proxy_refuse(c, 502, "%s", why);
			c->allowed = true;
		}
		else
			snprintf(c->reason, sizeof(c->reason), "%s", why);
		return false;
	}
	in->doff = 0;
	return counted(c, in->dlen, false);
}

/* Both ways until the server's answer has all gone to the sandbox. */
static void
relay(Intercept *in)
{
	Conn	   *c = in->c;
	size_t		rcap = EGRESS_BUF * 4;
	uint8_t    *rbuf = malloc(rcap);
	RelayWait	w = {0};

	if (!rbuf)
		return;
	while (!atomic_load(&proxy.stopping))
	{
		short		cev = 0,
					uev = 0;
		bool		moved = false;
		struct pollfd p[2];

		if (!relay_up(in, &w, &cev, &uev, &moved) ||
			!relay_down(in, &w, rbuf, rcap, &cev, &uev, &moved))
			break;
		if (in->udone && in->doff >= in->dlen)
		{
			(void) SSL_shutdown(in->cs);
			break;
		}
		if (moved)
			continue;
		p[0] = (struct pollfd) {.fd = c->cfd,.events = cev};
		p[1] = (struct pollfd) {.fd = c->ufd,.events = uev};
		if (poll(p, 2, 200) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			w.c_idle = false;
		if (p[1].revents)
			w.u_idle = false;
	}
	free(rbuf);
}

/* TLS with the server, then with the sandbox; false when either failed. */
static bool
handshakes(Intercept *in)
{
	Conn	   *c = in->c;
	char		e[256],
				up_err[700] = "";
	uint64_t	deadline = proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
	BIO		   *bio;

	if ((in->us = proxy_ca_upstream_ssl(c->host, e, sizeof(e))) == NULL ||
		!SSL_set_fd(in->us, c->ufd))
		snprintf(up_err, sizeof(up_err), "TLS with %s:%u could not start: %.200s", c->host, c->port, e);
	else if (SSL_set_connect_state(in->us), !tls_handshake(in->us, c->ufd, deadline))
	{
		long		v = SSL_get_verify_result(in->us);

		if (v != X509_V_OK)
			snprintf(up_err, sizeof(up_err), "the certificate of %s:%u could not be verified: %s",
					 c->host, c->port, X509_verify_cert_error_string(v));
		else
		{
			proxy_tls_error(e, sizeof(e));
			snprintf(up_err, sizeof(up_err), "TLS with %s:%u failed: %.200s", c->host, c->port, e);
		}
	}
	pthread_once(&prefix_once, prefix_method_make);
	if ((in->cs = proxy_ca_server_ssl(c->host, e, sizeof(e))) == NULL || !prefix_method ||
		(bio = BIO_new(prefix_method)) == NULL)
	{
		snprintf(c->reason, sizeof(c->reason), "TLS with the sandbox could not start: %s", e);
		return false;
	}
	BIO_set_data(bio, &in->pre);
	BIO_set_init(bio, 1);
	SSL_set_bio(in->cs, bio, bio);
	SSL_set_accept_state(in->cs);
	if (!tls_handshake(in->cs, c->cfd, deadline))
	{
		unsigned long last = ERR_peek_last_error();

		proxy_tls_error(e, sizeof(e));
		if (ERR_GET_REASON(last) == SSL_R_NO_APPLICATION_PROTOCOL)
			snprintf(c->reason, sizeof(c->reason),
					 "the sandbox's TLS offered no HTTP/1.1 (ALPN): a host with a secret speaks HTTP/1.1 only");
		else
			snprintf(c->reason, sizeof(c->reason), "TLS with the sandbox failed: %s", e);
		return false;
	}
	c->tls = in->cs;
	if (up_err[0])
	{
		proxy_refuse(c, 502, "%s", up_err);
		return false;
	}
	return true;
}

void
proxy_serve_intercept(Conn *c)
{
	Intercept	in = {.c = c};
	uint8_t    *head = NULL;
	size_t		hlen = 0;

	/* the ClientHello read so far is the TLS session's first bytes */
	in.pre.fd = c->cfd;
	in.pre.prelen = c->headlen;
	in.pre.pre = malloc(c->headlen ? c->headlen : 1);
	in.ubuf = malloc(EGRESS_BUF + EGRESS_PLACEHOLDER_LEN);
	head = malloc(UPSTREAM_HEAD_MAX);
	in.scrub = proxy_scrubber_new();
	if (!in.pre.pre || !in.ubuf || !head || !in.scrub)
	{
		snprintf(c->reason, sizeof(c->reason), "out of memory");
		goto out;
	}
	memcpy(in.pre.pre, c->head, c->headlen);
	(void) fcntl(c->cfd, F_SETFL, fcntl(c->cfd, F_GETFL) | O_NONBLOCK);
	(void) fcntl(c->ufd, F_SETFL, fcntl(c->ufd, F_GETFL) | O_NONBLOCK);
	if (!handshakes(&in) || !read_inner_head(&in) || !upstream_head(&in, head, &hlen))
		goto out;
	c->allowed = true;
	if (!counted(c, hlen, true) ||
		tls_write_all(in.us, c->ufd, head, hlen, proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS) < 0)
	{
		if (!c->reason[0])
			snprintf(c->reason, sizeof(c->reason), "the request could not be sent to %s:%u",
					 c->host, c->port);
		goto out;
	}
	c->up += hlen;
	/* the body's first bytes came with the head */
	memcpy(in.ubuf, c->head + c->headend, c->headlen - c->headend);
	if (!up_take(&in, c->headlen - c->headend))
		goto out;
	relay(&in);
out:
	if (head)
	{
		explicit_bzero(head, UPSTREAM_HEAD_MAX);	/* it held a value */
		free(head);
	}
	c->tls = NULL;
	SSL_free(in.cs);
	SSL_free(in.us);
	free(in.pre.pre);
	free(in.ubuf);
	proxy_scrubber_free(in.scrub);
}
