/*-------------------------------------------------------------------------
 *
 * head.c
 *	  sandbox-egress: what a request head may be.  A strict HTTP/1.x parser
 *	  (RFC 9110, RFC 9112) for the two forms the proxy serves, CONNECT
 *	  host:port and an absolute-form http:// request:
 *
 *	    head         = request-line *field-line CRLF
 *	    request-line = method SP request-target SP HTTP-version CRLF
 *	    field-line   = field-name ":" OWS field-value OWS CRLF
 *
 *	  Lines end in CRLF only: a bare LF or CR, a NUL or any other control
 *	  byte, and obs-fold (a line that starts with SP or HTAB) refuse the
 *	  head.  A field name is a token right up to its colon; the version is
 *	  HTTP/1.0 or HTTP/1.1; one Host, naming the target's host and port;
 *	  a Content-Length of 1 to EGRESS_LENGTH_DIGITS_MAX digits and nothing
 *	  else (two equal ones are taken as one, two different ones refused);
 *	  no Transfer-Encoding (bodies are relayed by Content-Length only, so
 *	  never both); a Connection header that names none of Host,
 *	  Content-Length and Transfer-Encoding (the fields it names are for this
 *	  hop and are not forwarded, http.c; those three frame or route the
 *	  request and cannot be dropped); at most EGRESS_HEAD_FIELDS_MAX
 *	  fields.  Every refusal
 *	  here is a 403 whose reason says what was wrong (docs/egress.md).
 *
 *	  Inside a tunnel the proxy intercepts (a host with a secret,
 *	  intercept.c) the same grammar parses the request the sandbox sends
 *	  through TLS (RequestHead.origin): its target is a path (origin form),
 *	  Host names the tunnel's host and port (443 when it names none), and a
 *	  body may be chunked (Transfer-Encoding: chunked, never with a
 *	  Content-Length).
 *
 *	  The parser is fed the bytes as request.c reads them, and looks at
 *	  each byte once: the byte that makes a head malformed refuses it then
 *	  and there, so a client that sent a malformed part and waits gets its
 *	  answer at once, not after the head timeout.  The request target is
 *	  judged when its line ends, each field when its line ends.  What it
 *	  accepts is kept as offsets into Conn.head (RequestHead), and http.c
 *	  writes the request upstream from those parts only: a byte this file
 *	  did not parse never reaches the upstream.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "proxy.h"

/* tchar (RFC 9110, 5.6.2): what a method and a field name are made of */
static bool
is_tchar(uint8_t b)
{
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
		(b != '\0' && strchr("!#$%&'*+-.^_`|~", b) != NULL);
}

/* a control byte: none may be in a head but a line's CRLF and OWS's HTAB */
static bool
is_ctl(uint8_t b)
{
	return (b < 0x20 && b != '\r' && b != '\n' && b != '\t') || b == 0x7f;
}

static HeadSpan
span(size_t from, size_t to)
{
	return (HeadSpan) {.off = (uint16_t) from,.len = (uint16_t) (to - from)};
}

/* A field name compared as names are: without regard to case. */
static bool
name_is(const Conn *c, HeadSpan s, const char *name)
{
	size_t		n = strlen(name);

	return s.len == n && strncasecmp((const char *) c->head + s.off, name, n) == 0;
}

/*
 * Refuse the head (403); the log row names the host as far as it is known
 * (the target's, once its line was read).
 */
static HeadResult
refuse(Conn *c, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static HeadResult
refuse(Conn *c, const char *fmt,...)
{
	va_list		ap;
	char		why[512];

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (!c->host[0])
		snprintf(c->host, sizeof(c->host), "(none)");
	proxy_refuse(c, 403, "%s", why);
	return HEAD_REFUSED;
}

static HeadResult
malformed(Conn *c, const char *what)
{
	return refuse(c, "the request head is malformed: %s", what);
}

static HeadResult
not_http1(Conn *c)
{
	return refuse(c, "not an HTTP/1 proxy request");
}

/*
 * "host:port" or "[v6]:port" into rawhost (as written, NUL-terminated)
 * and *port; without a port, defport (0: a port is required).  The port
 * is 1 to 5 digits and nothing else (no sign, no blank), 1 to 65535.
 */
int
proxy_split_authority(const char *a, size_t len, uint16_t defport, char *rawhost,
					  size_t rawlen, uint16_t *port)
{
	const char *hs = a,
			   *he,
			   *colon = NULL;
	unsigned long p = defport;

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
		size_t		pl = a + len - colon - 1;

		if (pl == 0 || pl > 5)
			return -1;
		p = 0;
		for (size_t i = 1; i <= pl; i++)
		{
			if (!isdigit((unsigned char) colon[i]))
				return -1;
			p = p * 10 + (colon[i] - '0');
		}
		if (p < 1 || p > 65535)
			return -1;
	}
	else if (defport == 0)
		return -1;
	if (he <= hs || (size_t) (he - hs) >= rawlen)
		return -1;
	memcpy(rawhost, hs, he - hs);
	rawhost[he - hs] = '\0';
	*port = (uint16_t) p;
	return 0;
}

/*
 * The request line is whole: its target must be the method's form,
 * CONNECT's host:port or "http://host[:port][/path]", with a valid host.
 * Sets req.rawhost, c->host (normalised), c->port and, for http, req.path.
 */
static HeadResult
target_done(Conn *c)
{
	RequestHead *r = &c->req;
	const char *t = (const char *) c->head + r->target.off;
	const char *end = t + r->target.len;
	char		err[EGRESS_ERRLEN];

	if (r->origin)
	{
		/* the tunnel's host is the one; the target is a path */
		if (t[0] != '/')
			return refuse(c, "a request through the tunnel has a path as its target (origin form)");
		r->path = r->target;
		return HEAD_MORE;
	}
	if (c->mode == MODE_CONNECT)
	{
		if (proxy_split_authority(t, r->target.len, 0, r->rawhost, sizeof(r->rawhost),
								  &c->port) < 0)
			return refuse(c, "CONNECT needs host:port");
	}
	else
	{
		const char *auth = t + 7;
		const char *slash;
		size_t		alen;

		if (r->target.len < 8 || strncasecmp(t, "http://", 7) != 0)
			return refuse(c, "only CONNECT and absolute http:// requests go through the proxy");
		slash = memchr(auth, '/', end - auth);
		alen = slash ? (size_t) (slash - auth) : (size_t) (end - auth);
		if (memchr(auth, '@', alen) || memchr(auth, '?', alen) || memchr(auth, '#', alen) ||
			proxy_split_authority(auth, alen, 80, r->rawhost, sizeof(r->rawhost), &c->port) < 0)
			return refuse(c, "invalid request target");
		if (slash)
			r->path = span((const uint8_t *) slash - c->head, r->target.off + r->target.len);
	}
	if (egress_normalize_host(r->rawhost, strlen(r->rawhost), c->host, err) < 0)
	{
		snprintf(c->host, sizeof(c->host), "(invalid)");
		return refuse(c, "invalid host name");
	}
	return HEAD_MORE;
}

/*
 * Host: the only one, naming the target's host and port (a CONNECT's
 * Host may leave its port out, as in RFC 9110's own example; an http
 * request's port is then 80).
 */
static HeadResult
host_field(Conn *c, const HeadField *f)
{
	RequestHead *r = &c->req;
	char		raw[EGRESS_HOST_MAX + 8],
				host[EGRESS_HOST_MAX + 1],
				err[EGRESS_ERRLEN];
	uint16_t	port;

	if (r->has_host)
		return refuse(c, "the request needs exactly one Host header");
	r->has_host = true;
	if (proxy_split_authority((const char *) c->head + f->value.off, f->value.len,
							  r->origin ? 443 : c->mode == MODE_CONNECT ? c->port : 80,
							  raw, sizeof(raw), &port) < 0 ||
		egress_normalize_host(raw, strlen(raw), host, err) < 0 ||
		strcmp(host, c->host) != 0 || port != c->port)
		return refuse(c, "the Host header does not name the request's host");
	return HEAD_MORE;
}

/*
 * Content-Length: digits only, few enough that the sum cannot overflow.
 * *dup: an equal one came before (it is not kept twice).
 */
static HeadResult
length_field(Conn *c, const HeadField *f, bool *dup)
{
	RequestHead *r = &c->req;
	const uint8_t *v = c->head + f->value.off;
	uint64_t	n = 0;

	*dup = false;
	if (f->value.len == 0 || f->value.len > EGRESS_LENGTH_DIGITS_MAX)
		return refuse(c, "invalid Content-Length: digits only, at most %d",
					  EGRESS_LENGTH_DIGITS_MAX);
	for (size_t i = 0; i < f->value.len; i++)
	{
		if (v[i] < '0' || v[i] > '9')
			return refuse(c, "invalid Content-Length: digits only, at most %d",
						  EGRESS_LENGTH_DIGITS_MAX);
		n = n * 10 + (v[i] - '0');
	}
	if (r->chunked)
		return refuse(c, "request bodies have one Content-Length or are chunked, not both");
	if (r->has_length && n != r->length)
		return refuse(c, "request bodies need one Content-Length (two different ones were sent)");
	*dup = r->has_length;
	r->has_length = true;
	r->length = n;
	return HEAD_MORE;
}

/*
 * Calls each comma-separated token of a field's value (OWS around it
 * trimmed; empty list elements skipped, RFC 9110 5.6.1) until fn says
 * stop; returns whether it did.
 */
bool
proxy_head_tokens(const uint8_t *v, size_t len,
				   bool (*fn) (const uint8_t *tok, size_t n, void *arg), void *arg)
{
	size_t		i = 0;

	while (i < len)
	{
		size_t		start,
					end;

		while (i < len && (v[i] == ' ' || v[i] == '\t'))
			i++;
		start = i;
		while (i < len && v[i] != ',')
			i++;
		end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (end > start && fn(v + start, end - start, arg))
			return true;
		i++;					/* past the comma */
	}
	return false;
}

static bool
names_framing_field(const uint8_t *tok, size_t n, void *arg)
{
	static const char *const framing[] = {"Host", "Content-Length", "Transfer-Encoding"};

	for (size_t i = 0; i < sizeof(framing) / sizeof(framing[0]); i++)
		if (strlen(framing[i]) == n && strncasecmp((const char *) tok, framing[i], n) == 0)
			return true;
	return false;
}

/* A field line is whole: judge the fields that frame or route the request. */
static HeadResult
field_done(Conn *c)
{
	RequestHead *r = &c->req;
	HeadField  *f = &r->cur;
	bool		dup = false;

	if (name_is(c, f->name, "Host"))
	{
		if (host_field(c, f) == HEAD_REFUSED)
			return HEAD_REFUSED;
	}
	else if (name_is(c, f->name, "Content-Length"))
	{
		if (length_field(c, f, &dup) == HEAD_REFUSED)
			return HEAD_REFUSED;
	}
	else if (name_is(c, f->name, "Transfer-Encoding") && r->origin)
	{
		/* through an intercepted tunnel: chunked alone, once, no length */
		if (r->chunked || r->has_length || f->value.len != 7 ||
			strncasecmp((const char *) c->head + f->value.off, "chunked", 7) != 0)
			return refuse(c, "request bodies have one Content-Length or are chunked, not both");
		r->chunked = true;
	}
	else if (name_is(c, f->name, "Transfer-Encoding"))
		return refuse(c, "request bodies need one Content-Length (no chunked uploads through the proxy)");
	else if (name_is(c, f->name, "Connection") &&
			 proxy_head_tokens(c->head + f->value.off, f->value.len, names_framing_field, NULL))
		return refuse(c, "the Connection header names a field that frames or routes the request");
	if (!dup)
		r->fields[r->nfields++] = *f;
	r->state = HEAD_FIELD_START;
	return HEAD_MORE;
}

/* The blank line: the head is whole. */
static HeadResult
head_done(Conn *c, size_t i)
{
	RequestHead *r = &c->req;

	if ((c->mode == MODE_HTTP || r->origin) && !r->has_host)
		return refuse(c, "the request needs exactly one Host header");
	r->state = HEAD_DONE;
	c->headend = i + 1;
	return HEAD_COMPLETE;
}

/* ---- one transition per state ---------------------------------------------------- */

static HeadResult
on_method(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;

	if (is_tchar(b))
		return HEAD_MORE;
	if (b != ' ' || i == r->start)
		return not_http1(c);
	r->method = span(r->start, i);
	/* methods are case-sensitive: "connect" is no CONNECT */
	if (r->origin && r->method.len == 7 && memcmp(c->head + r->start, "CONNECT", 7) == 0)
		return refuse(c, "a request through the tunnel has a path as its target (origin form)");
	if (!r->origin)
		c->mode = r->method.len == 7 && memcmp(c->head + r->start, "CONNECT", 7) == 0 ?
			MODE_CONNECT : MODE_HTTP;
	r->start = i + 1;
	r->state = HEAD_TARGET;
	return HEAD_MORE;
}

static HeadResult
on_target(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;

	if (b > 0x20 && b < 0x7f)
		return HEAD_MORE;
	if (b != ' ' || i == r->start)
		return not_http1(c);
	r->target = span(r->start, i);
	r->start = i + 1;
	r->state = HEAD_VERSION;
	return HEAD_MORE;
}

static HeadResult
on_version(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;
	size_t		k = i - r->start;
	static const char v[] = "HTTP/1.";
	bool		ok;

	if (k < sizeof(v) - 1)
		ok = b == v[k];
	else if (k == sizeof(v) - 1)
		ok = b == '0' || b == '1';
	else
		ok = b == '\r';
	if (!ok)
		return not_http1(c);
	if (b == '\r')
	{
		r->version = span(r->start, i);
		r->state = HEAD_LINE_LF;
	}
	return HEAD_MORE;
}

static HeadResult
on_line_lf(Conn *c)
{
	c->req.state = HEAD_FIELD_START;
	return target_done(c);
}

static HeadResult
on_field_start(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;

	if (b == '\r')
	{
		r->state = HEAD_END_LF;
		return HEAD_MORE;
	}
	if (b == ' ' || b == '\t')
		return malformed(c, "a folded header line (obs-fold)");
	if (!is_tchar(b))
		return malformed(c, "an invalid header field name");
	if (r->nlines >= EGRESS_HEAD_FIELDS_MAX)
		return refuse(c, "the request head has more than %d header fields",
					  EGRESS_HEAD_FIELDS_MAX);
	r->nlines++;
	r->start = i;
	r->state = HEAD_FIELD_NAME;
	return HEAD_MORE;
}

static HeadResult
on_field_name(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;

	if (is_tchar(b))
		return HEAD_MORE;
	if (b == ' ' || b == '\t')
		return malformed(c, "whitespace in a header field's name or before its colon");
	if (b == '\r')
		return malformed(c, "a header line without a colon");
	if (b != ':')
		return malformed(c, "an invalid header field name");
	r->cur.name = span(r->start, i);
	r->cur.value = span(i + 1, i + 1);
	r->cur_value = false;
	r->state = HEAD_FIELD_VALUE;
	return HEAD_MORE;
}

/* the value, without the OWS around it: visible bytes, SP, HTAB, obs-text */
static HeadResult
on_field_value(Conn *c, size_t i, uint8_t b)
{
	RequestHead *r = &c->req;

	if (b == '\r')
		r->state = HEAD_FIELD_LF;
	else if (b != ' ' && b != '\t')
	{
		if (!r->cur_value)
		{
			r->cur.value.off = (uint16_t) i;
			r->cur_value = true;
		}
		r->cur.value.len = (uint16_t) (i + 1 - r->cur.value.off);
	}
	return HEAD_MORE;
}

/* One byte of the head, at offset i. */
static HeadResult
head_byte(Conn *c, size_t i)
{
	RequestHead *r = &c->req;
	uint8_t		b = c->head[i];
	bool		want_lf = r->state == HEAD_LINE_LF || r->state == HEAD_FIELD_LF ||
		r->state == HEAD_END_LF;

	/* what is refused wherever it comes */
	if (is_ctl(b))
	{
		char		what[64];

		snprintf(what, sizeof(what), "a control character (0x%02x)", b);
		return malformed(c, what);
	}
	if (b == '\n' && !want_lf)
		return malformed(c, "a bare LF (lines end in CRLF)");
	if (want_lf && b != '\n')
		return malformed(c, "a bare CR (lines end in CRLF)");

	switch (r->state)
	{
		case HEAD_METHOD:
			return on_method(c, i, b);
		case HEAD_TARGET:
			return on_target(c, i, b);
		case HEAD_VERSION:
			return on_version(c, i, b);
		case HEAD_LINE_LF:
			return on_line_lf(c);
		case HEAD_FIELD_START:
			return on_field_start(c, i, b);
		case HEAD_FIELD_NAME:
			return on_field_name(c, i, b);
		case HEAD_FIELD_VALUE:
			return on_field_value(c, i, b);
		case HEAD_FIELD_LF:
			return field_done(c);
		case HEAD_END_LF:
			return head_done(c, i);
		case HEAD_DONE:
			break;
	}
	return HEAD_COMPLETE;
}

/*
 * Feed the parser the bytes of Conn.head it has not seen (read since the
 * last call).  HEAD_COMPLETE sets Conn.headend; bytes after it (a body,
 * a ClientHello) are not the head's and are not looked at here.
 */
HeadResult
proxy_head_parse(Conn *c)
{
	RequestHead *r = &c->req;

	while (r->pos < c->headlen)
	{
		HeadResult	res = head_byte(c, r->pos);

		r->pos++;
		if (res != HEAD_MORE)
			return res;
	}
	return HEAD_MORE;
}
