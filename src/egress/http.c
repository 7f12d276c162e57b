/*-------------------------------------------------------------------------
 *
 * http.c
 *	  sandbox-egress: the HTTP path.  An absolute-form request
 *	  ("GET http://host/..."): Host must name the same host and port, a body
 *	  only by one Content-Length; vetted and dialled like CONNECT, then the
 *	  head goes out once in origin form with Connection: close.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy.h"

/*
 * The request target "http://host[:port]/path": raw gets the host as
 * written, c->port the port (80 if none), *path the path or NULL; false
 * after a refusal was sent.
 */
static bool
http_target(Conn *c, const char *target, size_t tlen, char *raw, size_t rawlen,
			const char **path)
{
	const char *auth = target + 7;
	size_t		alen;

	if (tlen < 8 || strncasecmp(target, "http://", 7) != 0)
	{
		proxy_refuse(c, 403, "only CONNECT and absolute http:// requests go through the proxy");
		return false;
	}
	*path = memchr(auth, '/', target + tlen - auth);
	alen = *path ? (size_t) (*path - auth) : (size_t) (target + tlen - auth);
	if (memchr(auth, '@', alen) || memchr(auth, '?', alen) || memchr(auth, '#', alen) ||
		proxy_split_authority(c, auth, alen, 80, raw, rawlen) < 0)
	{
		proxy_refuse(c, 403, "invalid request target");
		return false;
	}
	return true;
}

/* Exactly one Host header, naming raw and c->port; false after a refusal. */
static bool
http_host_matches(Conn *c, const char *raw)
{
	const char *hv;
	size_t		hvlen;
	int			count;
	Conn		tmp;
	char		hraw[EGRESS_HOST_MAX + 8],
				a[EGRESS_HOST_MAX + 1],
				b[EGRESS_HOST_MAX + 1],
				err[EGRESS_ERRLEN];

	hv = proxy_find_header(c, "Host", &hvlen, &count);
	if (count != 1)
	{
		snprintf(c->host, sizeof(c->host), "%.253s", raw);
		proxy_refuse(c, 403, "the request needs exactly one Host header");
		return false;
	}
	memset(&tmp, 0, sizeof(tmp.port));
	if (proxy_split_authority(&tmp, hv, hvlen, 80, hraw, sizeof(hraw)) < 0 ||
		egress_normalize_host(hraw, strlen(hraw), a, err) < 0 ||
		egress_normalize_host(raw, strlen(raw), b, err) < 0 ||
		strcmp(a, b) != 0 || tmp.port != c->port)
	{
		snprintf(c->host, sizeof(c->host), "%.253s", raw);
		proxy_refuse(c, 403, "the Host header does not name the request's host");
		return false;
	}
	return true;
}

/*
 * The body's length: one Content-Length, or none (0); no Transfer-Encoding.
 * False after a refusal was sent.
 */
static bool
http_body_length(Conn *c, uint64_t *body)
{
	const char *clv;
	size_t		hvlen,
				cllen = 0;
	int			clcount,
				tecount;
	char		nb[24];
	char	   *end;

	*body = 0;
	proxy_find_header(c, "Transfer-Encoding", &hvlen, &tecount);
	clv = proxy_find_header(c, "Content-Length", &cllen, &clcount);
	if (tecount || clcount > 1)
	{
		proxy_refuse(c, 403, "request bodies need one Content-Length (no chunked uploads through the proxy)");
		return false;
	}
	if (!clcount)
		return true;
	if (cllen == 0 || cllen >= sizeof(nb))
	{
		proxy_refuse(c, 403, "invalid Content-Length");
		return false;
	}
	memcpy(nb, clv, cllen);
	nb[cllen] = '\0';
	*body = strtoull(nb, &end, 10);
	if (*end || nb[0] == '-')
	{
		proxy_refuse(c, 403, "invalid Content-Length");
		return false;
	}
	return true;
}

/*
 * The head in origin form into out (EGRESS_HEAD_MAX + 256 bytes), hop-by-hop
 * and proxy headers dropped, Connection: close added; returns its length.
 */
static size_t
http_origin_head(const Conn *c, const char *method, size_t mlen, const char *target,
				 size_t tlen, const char *path, const char *version, char *out)
{
	size_t		olen;
	const char *p;

	olen = snprintf(out, EGRESS_HEAD_MAX, "%.*s %s %s\r\n", (int) mlen, method,
					path ? "" : "/", version);
	if (path)
	{
		/* the path, up to the version (after the method and target) */
		size_t		pl = target + tlen - path;

		olen = snprintf(out, EGRESS_HEAD_MAX, "%.*s %.*s %s\r\n", (int) mlen, method,
						(int) pl, path, version);
	}
	p = strstr((const char *) c->head, "\r\n") + 2;
	while ((const uint8_t *) p < c->head + c->headend - 2)
	{
		const char *eol = strstr(p, "\r\n");
		size_t		l = eol - p;

		if (!(strncasecmp(p, "Proxy-", 6) == 0 || strncasecmp(p, "Connection:", 11) == 0 ||
			  strncasecmp(p, "Keep-Alive:", 11) == 0))
		{
			memcpy(out + olen, p, l + 2);
			olen += l + 2;
		}
		p = eol + 2;
	}
	memcpy(out + olen, "Connection: close\r\n\r\n", 21);
	olen += 21;
	return olen;
}

/*
 * "METHOD http://host[:port]/path HTTP/1.x": Host must name the same
 * host and port; the request goes out in origin form with Connection:
 * close and its body (Content-Length only), nothing after it.
 */
void
proxy_serve_http(Conn *c, const char *method, size_t mlen, const char *target, size_t tlen,
				 const char *version)
{
	char		raw[EGRESS_HOST_MAX + 8];
	const char *path;
	uint64_t	body;
	EgressAddr	dst;
	char	   *out;
	size_t		olen;

	c->mode = MODE_HTTP;
	if (!http_target(c, target, tlen, raw, sizeof(raw), &path) ||
		!http_host_matches(c, raw) ||
		!http_body_length(c, &body))
		return;
	if (!proxy_vet(c, raw, &dst))
		return;
	if (!proxy_dial_vetted(c, &dst))
		return;

	out = malloc(EGRESS_HEAD_MAX + 256);
	if (!out)
		return;
	olen = http_origin_head(c, method, mlen, target, tlen, path, version, out);
	c->allowed = true;
	if (proxy_send_counted(c, c->ufd, (uint8_t *) out, olen, true) == 0)
	{
		size_t		extra = c->headlen - c->headend;

		if (extra > body)
			extra = body;		/* a pipelined second request is dropped */
		if (extra == 0 ||
			proxy_send_counted(c, c->ufd, c->head + c->headend, extra, true) == 0)
			proxy_relay(c, body - extra);
	}
	free(out);
}
