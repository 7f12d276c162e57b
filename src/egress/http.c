/*-------------------------------------------------------------------------
 *
 * http.c
 *	  sandbox-egress: the HTTP path.  An absolute-form request
 *	  ("GET http://host/..."), its head parsed and judged by head.c (one
 *	  Host naming the target, a body only by one Content-Length): vetted
 *	  and dialled like CONNECT, then sent once in origin form with
 *	  Connection: close, written anew from the parsed parts, never copied:
 *	  no byte of the client's head that head.c did not parse goes upstream.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proxy.h"

/*
 * The head written upstream is at most the client's: the request line is
 * shorter (the path instead of the target), each field line longer by at
 * most the SP after its colon, and "Connection: close" comes in.
 */
#define HTTP_OUT_MAX	(EGRESS_HEAD_MAX + EGRESS_HEAD_FIELDS_MAX + 64)

/* The request upstream, being written; a write past cap is flagged, not done. */
typedef struct HttpOut
{
	char	   *buf;
	size_t		len;
	size_t		cap;
	bool		overflow;
} HttpOut;

static void
out_add(HttpOut *o, const void *p, size_t n)
{
	if (o->overflow || n > o->cap - o->len)
	{
		o->overflow = true;
		return;
	}
	memcpy(o->buf + o->len, p, n);
	o->len += n;
}

static void
out_str(HttpOut *o, const char *s)
{
	out_add(o, s, strlen(s));
}

static void
out_span(HttpOut *o, const Conn *c, HeadSpan s)
{
	out_add(o, c->head + s.off, s.len);
}

typedef struct NameArg
{
	const char *name;
	size_t		len;
} NameArg;

static bool
token_is_name(const uint8_t *tok, size_t n, void *arg)
{
	const NameArg *a = arg;

	return n == a->len && strncasecmp((const char *) tok, a->name, n) == 0;
}

/*
 * Fields for this hop only (RFC 9110, 7.6.1), not forwarded: the proxy
 * speaks for itself upstream (Connection: close), and so are the fields a
 * Connection header names (head.c refused one that names Host,
 * Content-Length or Transfer-Encoding); Transfer-Encoding never got this
 * far (head.c refuses it).
 */
bool
proxy_hop_by_hop(const Conn *c, HeadSpan name)
{
	static const char *const names[] = {"Connection", "Keep-Alive", "TE", "Trailer", "Upgrade"};
	const char *n = (const char *) c->head + name.off;
	NameArg		arg = {n, name.len};

	if (name.len >= 6 && strncasecmp(n, "Proxy-", 6) == 0)
		return true;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == name.len && strncasecmp(n, names[i], name.len) == 0)
			return true;
	for (int i = 0; i < c->req.nfields; i++)
	{
		const HeadField *f = &c->req.fields[i];

		if (f->name.len == 10 && strncasecmp((const char *) c->head + f->name.off, "Connection", 10) == 0 &&
			proxy_head_tokens(c->head + f->value.off, f->value.len, token_is_name, &arg))
			return true;
	}
	return false;
}

/*
 * The request in origin form, from the parsed head: "METHOD path
 * VERSION", each field as "Name: value" (its OWS gone) but the hop-by-hop
 * ones, then Connection: close.
 */
static void
http_origin_head(const Conn *c, HttpOut *o)
{
	const RequestHead *r = &c->req;

	out_span(o, c, r->method);
	out_str(o, " ");
	if (r->path.len)
		out_span(o, c, r->path);
	else
		out_str(o, "/");
	out_str(o, " ");
	out_span(o, c, r->version);
	out_str(o, "\r\n");
	for (int i = 0; i < r->nfields; i++)
	{
		const HeadField *f = &r->fields[i];

		if (proxy_hop_by_hop(c, f->name))
			continue;
		out_span(o, c, f->name);
		out_str(o, ":");
		if (f->value.len)
		{
			out_str(o, " ");
			out_span(o, c, f->value);
		}
		out_str(o, "\r\n");
	}
	out_str(o, "Connection: close\r\n\r\n");
}

/*
 * A run with secrets: the body goes up through here, not the kernel, so
 * that a placeholder in it is seen (and the request refused, recorded)
 * before its last bytes leave: the tail that could start one is held
 * back until the next read.  Then the answer is relayed.  False when the
 * request was cut.
 */
static bool
send_body_scanned(Conn *c, uint64_t left, size_t extra)
{
	uint8_t    *buf = malloc(EGRESS_BUF + EGRESS_PLACEHOLDER_LEN);
	size_t		len = extra;
	bool		ok = buf != NULL;

	if (ok)
		memcpy(buf, c->head + c->headend, extra);
	while (ok)
	{
		size_t		keep;
		ssize_t		n = 0;

		if (proxy_block_placeholder(c, buf, len, "in a request body"))
		{
			ok = false;
			break;
		}
		keep = left == 0 ? 0 : (len < EGRESS_PLACEHOLDER_LEN - 1 ? len : EGRESS_PLACEHOLDER_LEN - 1);
		if (len - keep > 0 && proxy_send_counted(c, c->ufd, buf, len - keep, true) < 0)
			ok = false;
		memmove(buf, buf + len - keep, keep);
		len = keep;
		if (!ok || left == 0)
			break;
		if (!proxy_wait_readable(c->cfd, proxy_now_ms() + EGRESS_HEAD_TIMEOUT_MS) ||
			(n = read(c->cfd, buf + len, left < EGRESS_BUF ? left : EGRESS_BUF)) <= 0)
		{
			snprintf(c->reason, sizeof(c->reason), "the request body ended early");
			ok = false;
			break;
		}
		len += n;
		left -= n;
	}
	free(buf);
	return ok;
}

/*
 * "METHOD http://host[:port]/path HTTP/1.x", its head parsed: the request
 * goes out in origin form with Connection: close and its body (the
 * Content-Length's bytes), nothing after it (a pipelined second request
 * is dropped).
 */
void
proxy_serve_http(Conn *c)
{
	uint64_t	body = c->req.length;
	EgressAddr	dst;
	HttpOut		o = {.cap = HTTP_OUT_MAX};
	size_t		extra;

	if (!proxy_vet(c, c->req.rawhost, &dst))
		return;
	o.buf = malloc(o.cap);
	if (!o.buf)
	{
		proxy_refuse(c, 502, "out of memory");
		return;
	}
	http_origin_head(c, &o);
	if (o.overflow)
	{
		/* cannot happen (HTTP_OUT_MAX); checked all the same */
		proxy_refuse(c, 403, "the request head is larger than %d bytes", EGRESS_HEAD_MAX);
		free(o.buf);
		return;
	}
	if (!proxy_dial_vetted(c, &dst))
	{
		free(o.buf);
		return;
	}
	c->allowed = true;
	extra = c->headlen - c->headend;
	if (extra > body)
		extra = body;			/* a pipelined second request is dropped */
	if (proxy.nsecrets > 0)
	{
		if (proxy_send_counted(c, c->ufd, (uint8_t *) o.buf, o.len, true) == 0 &&
			send_body_scanned(c, body - extra, extra))
			proxy_relay(c, 0);
	}
	else if (proxy_send_counted(c, c->ufd, (uint8_t *) o.buf, o.len, true) == 0 &&
			 (extra == 0 ||
			  proxy_send_counted(c, c->ufd, c->head + c->headend, extra, true) == 0))
		proxy_relay(c, body - extra);
	free(o.buf);
}
