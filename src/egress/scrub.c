/*-------------------------------------------------------------------------
 *
 * scrub.c
 *	  sandbox-egress: the response to an intercepted request, on its way
 *	  to the sandbox (docs/secrets.md, "Responses").  No value of the run's
 *	  secrets reaches the sandbox in the bytes it reads: each one found is
 *	  overwritten with as many '*' (so lengths and framing stay right).
 *	  For that the bytes scanned must be the bytes the client reads:
 *
 *	  * the response head is read whole (at most SCRUB_HEAD_MAX bytes);
 *	    a Content-Encoding other than identity is refused (the request
 *	    asked for identity: a compressed body could not be scanned);
 *	  * a chunked body is unframed here and sent without its framing, the
 *	    connection's end ending it ("Connection: close", which the request
 *	    asked for anyway): chunk boundaries cannot split a value unseen;
 *	  * the last bytes that could start a value are held back until the
 *	    next read (or the end).
 *
 *	  A value transformed by the server (hashed, encoded) is not found: see
 *	  docs/secrets.md, "What does not hold".
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "proxy.h"

#define SCRUB_HEAD_MAX	65536
#define SCRUB_LINE_MAX	1024	/* a chunk's size line, a trailer line */

typedef enum ScrubState
{
	SC_HEAD,					/* a response head, up to its blank line */
	SC_BODY,					/* a body as it is, to the connection's end */
	SC_CHUNK_SIZE,				/* a chunk's size line */
	SC_CHUNK_DATA,				/* its bytes */
	SC_CHUNK_END,				/* the CRLF after them */
	SC_TRAILERS,				/* the trailer lines after the last chunk */
	SC_DONE						/* the body is whole: the rest is dropped */
} ScrubState;

struct Scrubber
{
	ScrubState	state;
	uint8_t    *head;			/* SC_HEAD: read so far */
	size_t		headlen;
	char		line[SCRUB_LINE_MAX];	/* a size or trailer line */
	size_t		linelen;
	uint64_t	chunk_left;
	size_t		maxval;			/* the longest value */
	uint8_t    *hold;			/* what could start a value */
	size_t		holdlen;
	uint8_t    *out;			/* what this call gives the sandbox */
	size_t		outlen;
	size_t		outcap;
};

Scrubber *
proxy_scrubber_new(void)
{
	Scrubber   *s = calloc(1, sizeof(Scrubber));

	if (!s)
		return NULL;
	for (int i = 0; i < proxy.nsecrets; i++)
		if (proxy.secrets[i].value_len > s->maxval)
			s->maxval = proxy.secrets[i].value_len;
	s->head = malloc(SCRUB_HEAD_MAX);
	s->hold = malloc(s->maxval + 1);
	if (!s->head || !s->hold)
	{
		proxy_scrubber_free(s);
		return NULL;
	}
	return s;
}

void
proxy_scrubber_free(Scrubber *s)
{
	if (!s)
		return;
	free(s->head);
	free(s->hold);
	free(s->out);
	free(s);
}

static bool
out_room(Scrubber *s, size_t n)
{
	if (s->outlen + n <= s->outcap)
		return true;
	s->outcap = (s->outlen + n) * 2;
	s->out = realloc(s->out, s->outcap);
	return s->out != NULL;
}

/*
 * Bytes the sandbox will read, in order: every value overwritten, the tail
 * that could start one held back (all of it out at the end).
 */
static bool
emit(Scrubber *s, const uint8_t *p, size_t n, bool eof)
{
	size_t		len = s->holdlen + n,
				keep;
	uint8_t    *w;

	if (!out_room(s, len))
		return false;
	w = s->out + s->outlen;
	if (s->holdlen)
		memcpy(w, s->hold, s->holdlen);
	if (n)
		memcpy(w + s->holdlen, p, n);
	for (int i = 0; i < proxy.nsecrets; i++)
	{
		const EgressSecret *sec = &proxy.secrets[i];
		uint8_t    *q = w;

		while ((size_t) (w + len - q) >= sec->value_len &&
			   (q = memmem(q, w + len - q, sec->value, sec->value_len)) != NULL)
		{
			memset(q, '*', sec->value_len);
			q += sec->value_len;
		}
	}
	keep = eof ? 0 : (len < s->maxval - 1 ? len : s->maxval - 1);
	if (keep)
		memcpy(s->hold, w + len - keep, keep);
	s->holdlen = keep;
	s->outlen += len - keep;
	return true;
}

static const char *
field_value(const char *line, size_t len, const char *name, size_t *vlen)
{
	size_t		nl = strlen(name);
	const char *v;

	if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':')
		return NULL;
	v = line + nl + 1;
	while (v < line + len && (*v == ' ' || *v == '\t'))
		v++;
	*vlen = line + len - v;
	while (*vlen > 0 && (v[*vlen - 1] == ' ' || v[*vlen - 1] == '\t'))
		(*vlen)--;
	return v;
}

/*
 * A whole response head (s->head, headlen bytes, ending in the blank
 * line): judged, and given to emit as the sandbox gets it.  A 1xx head
 * goes as it is and another head follows; a final one's body is chunked
 * (unframed here: Transfer-Encoding and Content-Length dropped) or not,
 * and always ends with the connection.
 */
static int
head_done(Scrubber *s, char *why, size_t whylen)
{
	char	   *h = (char *) s->head;
	char	   *end = h + s->headlen;
	char	   *eol = memchr(h, '\n', s->headlen);
	bool		chunked = false;
	int			status;
	uint8_t    *rebuilt = NULL;
	size_t		rl = 0;

	if (s->headlen < 12 || strncmp(h, "HTTP/1.", 7) != 0 || !eol ||
		sscanf(h + 9, "%3d", &status) != 1)
	{
		snprintf(why, whylen, "the server's answer is not an HTTP/1 response");
		return -1;
	}
	if (status == 101)
	{
		snprintf(why, whylen, "the server switched protocols (only HTTP/1.1 passes to a host with a secret)");
		return -1;
	}
	if (status >= 100 && status < 200)
	{
		s->headlen = 0;
		return emit(s, (uint8_t *) h, end - h, false) ? 0 : -1;
	}
	/* first the framing and the encoding, then the head as it goes on */
	for (int pass = 0; pass < 2; pass++)
	{
		if (pass == 1)
		{
			if ((rebuilt = malloc(s->headlen + 32)) == NULL)
				return -1;
			memcpy(rebuilt, h, eol + 1 - h);
			rl = eol + 1 - h;
		}
		for (char *l = eol + 1; l < end;)
		{
			char	   *nl = memchr(l, '\n', end - l);
			size_t		len = (nl ? nl : end) - l;
			size_t		full = (nl ? nl + 1 : end) - l;
			size_t		vlen;
			const char *v;

			if (len > 0 && l[len - 1] == '\r')
				len--;
			if (len == 0)
				break;			/* the blank line */
			if (pass == 0 && (v = field_value(l, len, "Content-Encoding", &vlen)) != NULL &&
				!(vlen == 8 && strncasecmp(v, "identity", 8) == 0))
			{
				snprintf(why, whylen, "the server's response is encoded (Content-Encoding: %.*s), so it could not be scrubbed of secrets",
						 (int) (vlen < 40 ? vlen : 40), v);
				return -1;
			}
			if (pass == 0 && (v = field_value(l, len, "Transfer-Encoding", &vlen)) != NULL)
			{
				if (!(vlen == 7 && strncasecmp(v, "chunked", 7) == 0))
				{
					snprintf(why, whylen, "the server's response has a Transfer-Encoding other than chunked");
					return -1;
				}
				chunked = true;
			}
			/* unframed here, ended by the connection's end: no framing fields */
			if (pass == 1 && !field_value(l, len, "Transfer-Encoding", &vlen) &&
				!field_value(l, len, "Connection", &vlen) &&
				!field_value(l, len, "Keep-Alive", &vlen) &&
				!(chunked && field_value(l, len, "Content-Length", &vlen)))
			{
				memcpy(rebuilt + rl, l, full);
				rl += full;
			}
			l += full;
		}
	}
	memcpy(rebuilt + rl, "Connection: close\r\n\r\n", 21);
	rl += 21;
	s->headlen = 0;
	s->state = chunked ? SC_CHUNK_SIZE : SC_BODY;
	if (!emit(s, rebuilt, rl, false))
	{
		free(rebuilt);
		return -1;
	}
	free(rebuilt);
	return 0;
}

/* A line of the chunked framing, in s->line: the size, or a trailer. */
static int
line_done(Scrubber *s, char *why, size_t whylen)
{
	uint64_t	n = 0;
	size_t		i = 0;

	if (s->state == SC_TRAILERS)
	{
		if (s->linelen <= 1)	/* "\r": the blank line */
			s->state = SC_DONE;
		return 0;
	}
	for (; i < s->linelen && isxdigit((unsigned char) s->line[i]) && i < 15; i++)
		n = n * 16 + (isdigit((unsigned char) s->line[i]) ? s->line[i] - '0'
					  : (tolower((unsigned char) s->line[i]) - 'a' + 10));
	if (i == 0 || (i < s->linelen && s->line[i] != ';' && s->line[i] != '\r' &&
				   s->line[i] != ' '))
	{
		snprintf(why, whylen, "the server's chunked response is malformed");
		return -1;
	}
	s->chunk_left = n;
	s->state = n == 0 ? SC_TRAILERS : SC_CHUNK_DATA;
	return 0;
}

/*
 * Feed the scrubber n bytes from the server (eof: it has ended).  *out is
 * what to send the sandbox now (the scrubber's until the next call).
 * -1 with why: the response cannot pass (the connection is then closed).
 */
int
proxy_scrub(Scrubber *s, const uint8_t *in, size_t n, bool eof, uint8_t **out,
			size_t *outlen, char *why, size_t whylen)
{
	size_t		i = 0;

	s->outlen = 0;
	while (i < n)
	{
		switch (s->state)
		{
			case SC_HEAD:
				{
					if (s->headlen == SCRUB_HEAD_MAX)
					{
						snprintf(why, whylen, "the server's response head is larger than %d bytes",
								 SCRUB_HEAD_MAX);
						return -1;
					}
					s->head[s->headlen++] = in[i++];
					if (s->headlen >= 4 && memcmp(s->head + s->headlen - 4, "\r\n\r\n", 4) == 0 &&
						head_done(s, why, whylen) < 0)
						return -1;
					break;
				}
			case SC_BODY:
				if (!emit(s, in + i, n - i, false))
					return -1;
				i = n;
				break;
			case SC_CHUNK_SIZE:
			case SC_TRAILERS:
				if (in[i] == '\n')
				{
					i++;
					if (line_done(s, why, whylen) < 0)
						return -1;
					s->linelen = 0;
				}
				else if (s->linelen == SCRUB_LINE_MAX)
				{
					snprintf(why, whylen, "the server's chunked response is malformed");
					return -1;
				}
				else
					s->line[s->linelen++] = in[i++];
				break;
			case SC_CHUNK_DATA:
				{
					size_t		k = n - i < s->chunk_left ? n - i : (size_t) s->chunk_left;

					if (!emit(s, in + i, k, false))
						return -1;
					i += k;
					s->chunk_left -= k;
					if (s->chunk_left == 0)
						s->state = SC_CHUNK_END;
					break;
				}
			case SC_CHUNK_END:
				/* "\r\n" after a chunk's bytes: the LF ends it */
				if (in[i] == '\n')
					s->state = SC_CHUNK_SIZE;
				else if (in[i] != '\r')
				{
					snprintf(why, whylen, "the server's chunked response is malformed");
					return -1;
				}
				i++;
				break;
			case SC_DONE:
				i = n;
				break;
		}
	}
	if (eof)
	{
		/* an unfinished head goes as it came (scrubbed), then the tail */
		if (s->state == SC_HEAD && s->headlen && !emit(s, s->head, s->headlen, false))
			return -1;
		if (!emit(s, NULL, 0, true))
			return -1;
	}
	*out = s->out;
	*outlen = s->outlen;
	return 0;
}
