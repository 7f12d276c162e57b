/*-------------------------------------------------------------------------
 *
 * dns.c
 *	  The proxy's own name resolution: a small DNS client over UDP that
 *	  asks one configured resolver for A (then AAAA) records.  Nothing of
 *	  the host's libc resolver is used (no /etc/hosts, no nsswitch): the
 *	  answer is exactly what the resolver said, and the caller vets every
 *	  address it got and dials only one of those (no second lookup).
 *
 * The sandbox itself has no DNS at all: it has no resolver address and
 * no route; only the proxy resolves, and only names a rule allows.
 *
 * Answers are kept for their TTL (the smallest TTL of the records used,
 * CNAMEs included), at most EGRESS_DNS_CACHE_MAX_TTL seconds, in a cache
 * of EGRESS_DNS_CACHE_SIZE names that lives as long as the proxy, i.e. one
 * run: nothing is shared between runs or tenants.  A TTL of 0 (what a
 * rebinding name answers) is never kept; failures are never kept.  A kept
 * answer is what a lookup would have given: the caller vets every address
 * of it on every use and dials one of them, so the cache changes how often
 * the resolver is asked, never what is dialed without being vetted.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "egress.h"

#define DNS_TIMEOUT_MS	2000
#define DNS_TRIES		2
#define DNS_MAX_CHAIN	8		/* CNAMEs followed within one answer */

/* One kept answer; expires == 0: a free entry. */
typedef struct DnsCacheEntry
{
	char		host[EGRESS_HOST_MAX + 1];
	EgressAddr	addrs[EGRESS_DNS_MAX_ADDRS];
	int			n;
	uint64_t	expires;		/* CLOCK_MONOTONIC ms */
} DnsCacheEntry;

static DnsCacheEntry dns_cache[EGRESS_DNS_CACHE_SIZE];
static pthread_mutex_t dns_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
egress_resolver_parse(const char *spec, EgressResolver *r, char *err)
{
	char		host[64];
	const char *colon = strrchr(spec, ':');
	long		port = 53;
	struct sockaddr_in *s4 = (struct sockaddr_in *) &r->ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &r->ss;

	memset(r, 0, sizeof(*r));
	if (spec[0] == '[')
	{
		const char *close = strchr(spec, ']');

		if (!close || close - spec - 1 >= (long) sizeof(host))
			goto bad;
		memcpy(host, spec + 1, close - spec - 1);
		host[close - spec - 1] = '\0';
		if (close[1] == ':')
			port = strtol(close + 2, NULL, 10);
	}
	else if (colon && strchr(spec, ':') == colon)
	{
		if (colon - spec >= (long) sizeof(host))
			goto bad;
		memcpy(host, spec, colon - spec);
		host[colon - spec] = '\0';
		port = strtol(colon + 1, NULL, 10);
	}
	else
		snprintf(host, sizeof(host), "%s", spec);
	if (port < 1 || port > 65535)
		goto bad;
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1)
	{
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		r->len = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1)
	{
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		r->len = sizeof(*s6);
		return 0;
	}
bad:
	snprintf(err, EGRESS_ERRLEN, "invalid resolver \"%s\" (ADDRESS or ADDRESS:PORT)", spec);
	return -1;
}

/* The first nameserver of the host's /etc/resolv.conf. */
int
egress_resolver_default(EgressResolver *r, char *err)
{
	FILE	   *f = fopen("/etc/resolv.conf", "re");
	char		line[256];

	if (f)
	{
		while (fgets(line, sizeof(line), f))
		{
			char		addr[64];

			if (sscanf(line, "nameserver %63s", addr) == 1 &&
				egress_resolver_parse(addr, r, err) == 0)
			{
				fclose(f);
				return 0;
			}
		}
		fclose(f);
	}
	snprintf(err, EGRESS_ERRLEN, "no resolver: none given and none in /etc/resolv.conf");
	return -1;
}

static int
build_query(const char *host, uint16_t id, uint16_t qtype, uint8_t *q)
{
	int			n = 12;
	const char *p = host;

	memset(q, 0, 12);
	q[0] = id >> 8;
	q[1] = id & 0xff;
	q[2] = 0x01;				/* RD */
	q[5] = 1;					/* QDCOUNT */
	while (*p)
	{
		const char *dot = strchr(p, '.');
		size_t		l = dot ? (size_t) (dot - p) : strlen(p);

		q[n++] = (uint8_t) l;
		memcpy(q + n, p, l);
		n += l;
		p += l;
		if (*p == '.')
			p++;
	}
	q[n++] = 0;
	q[n++] = qtype >> 8;
	q[n++] = qtype & 0xff;
	q[n++] = 0;
	q[n++] = 1;					/* IN */
	return n;
}

/*
 * Read a (possibly compressed) name at *off into out (dotted, lower case);
 * advances *off past it in the message.  -1 on anything malformed.
 */
static int
read_name(const uint8_t *m, size_t len, size_t *off, char *out, size_t outlen)
{
	size_t		pos = *off;
	size_t		o = 0;
	bool		jumped = false;
	int			hops = 0;

	for (;;)
	{
		uint8_t		l;

		if (pos >= len)
			return -1;
		l = m[pos];
		if ((l & 0xc0) == 0xc0)
		{
			if (pos + 1 >= len || ++hops > 32)
				return -1;
			if (!jumped)
				*off = pos + 2;
			jumped = true;
			pos = ((l & 0x3f) << 8) | m[pos + 1];
			continue;
		}
		if (l & 0xc0)
			return -1;
		pos++;
		if (l == 0)
			break;
		if (pos + l > len || o + l + 2 > outlen)
			return -1;
		if (o)
			out[o++] = '.';
		for (int i = 0; i < l; i++)
			out[o++] = tolower(m[pos + i]);
		pos += l;
	}
	out[o] = '\0';
	if (!jumped)
		*off = pos;
	return 0;
}

/* Parse an answer to our query (id, one question); addresses of qtype. */
static int
parse_answer(const uint8_t *m, size_t len, uint16_t id, const char *host,
			 uint16_t qtype, EgressAddr *out, int max, uint32_t *ttl, char *err)
{
	size_t		off = 12;
	int			an,
				found = 0,
				nchain = 1;
	char		chain[DNS_MAX_CHAIN][EGRESS_HOST_MAX + 2];
	char		name[EGRESS_HOST_MAX + 2];

	if (len < 12 || ((m[0] << 8) | m[1]) != id || !(m[2] & 0x80))
		return -2;				/* not ours: keep waiting */
	if ((m[3] & 0x0f) == 3)
	{
		snprintf(err, EGRESS_ERRLEN, "no such host");
		return -1;
	}
	if ((m[3] & 0x0f) != 0)
	{
		snprintf(err, EGRESS_ERRLEN, "the resolver answered with error %d", m[3] & 0x0f);
		return -1;
	}
	if (((m[4] << 8) | m[5]) != 1 || read_name(m, len, &off, name, sizeof(name)) < 0 ||
		strcasecmp(name, host) != 0 || off + 4 > len)
		return -2;
	off += 4;
	an = (m[6] << 8) | m[7];
	snprintf(chain[0], sizeof(chain[0]), "%s", host);
	*ttl = UINT32_MAX;
	for (int i = 0; i < an; i++)
	{
		uint16_t	type,
					rdlen;
		uint32_t	rttl;
		bool		owner_ok = false;

		if (read_name(m, len, &off, name, sizeof(name)) < 0 || off + 10 > len)
			goto malformed;
		type = (m[off] << 8) | m[off + 1];
		rttl = ((uint32_t) m[off + 4] << 24) | ((uint32_t) m[off + 5] << 16) |
			((uint32_t) m[off + 6] << 8) | m[off + 7];
		rdlen = (m[off + 8] << 8) | m[off + 9];
		off += 10;
		if (off + rdlen > len)
			goto malformed;
		for (int c = 0; c < nchain; c++)
			if (strcmp(chain[c], name) == 0)
				owner_ok = true;
		if (owner_ok && type == 5 && nchain < DNS_MAX_CHAIN)
		{
			size_t		roff = off;

			if (read_name(m, len, &roff, chain[nchain], sizeof(chain[0])) < 0)
				goto malformed;
			nchain++;
			if (rttl < *ttl)
				*ttl = rttl;
		}
		else if (owner_ok && type == qtype && found < max &&
				 rdlen == (qtype == 1 ? 4 : 16))
		{
			out[found].family = qtype == 1 ? AF_INET : AF_INET6;
			memset(out[found].bytes, 0, 16);
			memcpy(out[found].bytes, m + off, rdlen);
			found++;
			if (rttl < *ttl)
				*ttl = rttl;
		}
		off += rdlen;
	}
	return found;
malformed:
	snprintf(err, EGRESS_ERRLEN, "malformed answer from the resolver");
	return -1;
}

static int
query(const EgressResolver *r, const char *host, uint16_t qtype,
	  EgressAddr *out, int max, uint32_t *ttl, char *err)
{
	uint8_t		q[512],
				a[4096];
	uint16_t	id;
	int			qlen;
	int			fd = socket(r->ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "resolver socket: %s", strerror(errno));
		return -1;
	}
	/* connect(): the kernel drops datagrams from any other source */
	if (connect(fd, (const struct sockaddr *) &r->ss, r->len) < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "could not reach the resolver: %s", strerror(errno));
		close(fd);
		return -1;
	}
	for (int t = 0; t < DNS_TRIES; t++)
	{
		struct pollfd pfd = {.fd = fd,.events = POLLIN};
		int			waited = 0;

		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			id = (uint16_t) rand();
		qlen = build_query(host, id, qtype, q);
		if (send(fd, q, qlen, 0) != qlen)
		{
			snprintf(err, EGRESS_ERRLEN, "could not reach the resolver: %s", strerror(errno));
			close(fd);
			return -1;
		}
		while (waited < DNS_TIMEOUT_MS)
		{
			ssize_t		n;
			int			rc;

			if (poll(&pfd, 1, 100) <= 0)
			{
				waited += 100;
				continue;
			}
			n = recv(fd, a, sizeof(a), 0);
			if (n < 0)
			{
				snprintf(err, EGRESS_ERRLEN, "could not reach the resolver: %s", strerror(errno));
				close(fd);
				return -1;
			}
			rc = parse_answer(a, n, id, host, qtype, out, max, ttl, err);
			if (rc != -2)
			{
				close(fd);
				return rc;
			}
		}
	}
	close(fd);
	snprintf(err, EGRESS_ERRLEN, "the resolver did not answer");
	return -1;
}

/* A kept answer for host, copied out (0: none, or expired). */
static int
cache_get(const char *host, EgressAddr *out, int max)
{
	uint64_t	now = mono_ms();
	int			n = 0;

	pthread_mutex_lock(&dns_cache_lock);
	for (int i = 0; i < EGRESS_DNS_CACHE_SIZE; i++)
	{
		DnsCacheEntry *e = &dns_cache[i];

		if (e->expires == 0 || strcmp(e->host, host) != 0)
			continue;
		if (e->expires <= now)
		{
			e->expires = 0;		/* expired: ask again */
			break;
		}
		n = e->n < max ? e->n : max;
		memcpy(out, e->addrs, n * sizeof(EgressAddr));
		break;
	}
	pthread_mutex_unlock(&dns_cache_lock);
	return n;
}

/*
 * Keep an answer for ttl seconds (at most EGRESS_DNS_CACHE_MAX_TTL), in
 * the entry of the same name, a free or expired one, or else the one that
 * expires first.
 */
static void
cache_put(const char *host, const EgressAddr *addrs, int n, uint32_t ttl)
{
	uint64_t	now = mono_ms();
	DnsCacheEntry *victim = NULL;

	if (ttl == 0 || n <= 0)
		return;
	if (ttl > EGRESS_DNS_CACHE_MAX_TTL)
		ttl = EGRESS_DNS_CACHE_MAX_TTL;
	if (n > EGRESS_DNS_MAX_ADDRS)
		n = EGRESS_DNS_MAX_ADDRS;
	pthread_mutex_lock(&dns_cache_lock);
	for (int i = 0; i < EGRESS_DNS_CACHE_SIZE; i++)
	{
		DnsCacheEntry *e = &dns_cache[i];

		if (e->expires != 0 && strcmp(e->host, host) == 0)
		{
			victim = e;
			break;
		}
		if (e->expires <= now)
		{
			if (!victim || victim->expires > now)
				victim = e;
		}
		else if (!victim || (victim->expires > now && e->expires < victim->expires))
			victim = e;
	}
	snprintf(victim->host, sizeof(victim->host), "%s", host);
	memcpy(victim->addrs, addrs, n * sizeof(EgressAddr));
	victim->n = n;
	victim->expires = now + (uint64_t) ttl * 1000;
	pthread_mutex_unlock(&dns_cache_lock);
}

/*
 * The addresses of host: its A records, or its AAAA records if it has no
 * A record; from the cache while an earlier answer's TTL lasts.  0 = none
 * (err says why), -1 = failure.
 */
int
egress_resolve(const EgressResolver *r, const char *host, EgressAddr *out, int max, char *err)
{
	uint32_t	ttl = 0;
	int			n = cache_get(host, out, max);

	if (n > 0)
		return n;
	n = query(r, host, 1, out, max, &ttl, err);
	if (n == 0)
		n = query(r, host, 28, out, max, &ttl, err);
	if (n == 0)
		snprintf(err, EGRESS_ERRLEN, "no address");
	if (n > 0)
		cache_put(host, out, n, ttl);
	return n;
}
