/*-------------------------------------------------------------------------
 *
 * secrets.c
 *	  sandbox-egress: the run's secrets (docs/secrets.md).  What the runner
 *	  handed over through the jail (--secrets-fd; the format is in
 *	  src/runner/secret_box.h), each checked against the policy (its rule is
 *	  a host rule of the same pattern), a random placeholder made for each,
 *	  and the values kept in one page of their own that is locked (never
 *	  swapped out) and left out of core dumps; the process is not dumpable
 *	  either (proxy.c).  Then: which secrets apply to a host and port, and
 *	  where a placeholder is in some bytes.
 *
 *	  Before "ready" the proxy says, on its summary pipe, each secret's
 *	  "env NAME=PLACEHOLDER" and its CA's certificate (ca.c): the jail puts
 *	  them into the sandbox (src/jail/egress.c).  The values are never
 *	  written anywhere but into the bound header of a request to the bound
 *	  host (intercept.c).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "proxy.h"

#define SECRETS_FILE_MAX	(256 * 1024)
#define SECRETS_MAGIC		"sandbox-egress-secrets/1"
#define SECRET_VALUE_MIN	8
#define SECRET_VALUE_MAX	4096

static uint8_t *value_page;		/* every value, one after another */
static size_t value_page_len;
static size_t value_used;

static int
bad(char *err, int line, const char *what)
{
	snprintf(err, EGRESS_ERRLEN, "secrets line %d: %s", line, what);
	return -1;
}

static bool
name_ok(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > EGRESS_SECRET_NAME_MAX || s[0] < 'A' || s[0] > 'Z')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
			return false;
	return true;
}

/* "Name: prefix{}suffix" into the secret's header, prefix and suffix. */
static bool
header_ok(EgressSecret *s, const char *h)
{
	const char *colon = strchr(h, ':');
	const char *hole;
	size_t		nl;

	if (!colon || colon[1] != ' ' || (nl = colon - h) == 0 || nl > EGRESS_SECRET_NAME_MAX)
		return false;
	for (size_t i = 0; i < nl; i++)
		if (!((h[i] >= 'A' && h[i] <= 'Z') || (h[i] >= 'a' && h[i] <= 'z') ||
			  (h[i] >= '0' && h[i] <= '9') || strchr("!#$%&'*+-.^_`|~", h[i])))
			return false;
	h = colon + 2;
	hole = strstr(h, "{}");
	if (!hole || strstr(hole + 2, "{}") || strlen(h) > EGRESS_SECRET_HEADER_MAX)
		return false;
	for (const char *p = h; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			return false;
	memcpy(s->header, colon - nl, nl);
	s->header[nl] = '\0';
	memcpy(s->prefix, h, hole - h);
	s->prefix[hole - h] = '\0';
	strcpy(s->suffix, hole + 2);
	return true;
}

/* The rule the line names: a host rule of the policy with that pattern. */
static const EgressRule *
rule_of(const char *id, const char *pattern)
{
	bool		wild = strncmp(pattern, "*.", 2) == 0;

	for (int i = 0; i < proxy.policy.nrules; i++)
	{
		const EgressRule *r = &proxy.policy.rules[i];

		if (strcmp(r->id, id) != 0)
			continue;
		if (r->kind != (wild ? RULE_WILDCARD : RULE_HOST) ||
			strcmp(r->host, wild ? pattern + 2 : pattern) != 0)
			return NULL;
		return r;
	}
	return NULL;
}

/* The value (base64) into the value page; false when it is no value. */
static bool
value_ok(EgressSecret *s, const char *b64)
{
	size_t		len = strlen(b64);
	int			n;
	uint8_t    *dst = value_page + value_used;

	if (len == 0 || len % 4 != 0 || len / 4 * 3 > SECRET_VALUE_MAX + 2 ||
		value_used + len / 4 * 3 > value_page_len)
		return false;
	n = EVP_DecodeBlock(dst, (const unsigned char *) b64, (int) len);
	if (n < 0)
		return false;
	n -= (b64[len - 1] == '=') + (len > 1 && b64[len - 2] == '=');
	if (n < SECRET_VALUE_MIN || n > SECRET_VALUE_MAX)
		return false;
	for (int i = 0; i < n; i++)
		if (dst[i] < 0x21 || dst[i] > 0x7e)
			return false;
	s->value = dst;
	s->value_len = n;
	value_used += n;
	return true;
}

static bool
placeholder_make(EgressSecret *s)
{
	uint8_t		r[16];
	size_t		n = strlen(EGRESS_PLACEHOLDER_PREFIX);

	if (getrandom(r, sizeof(r), 0) != sizeof(r))
		return false;
	memcpy(s->placeholder, EGRESS_PLACEHOLDER_PREFIX, n);
	for (int i = 0; i < 16; i++)
		snprintf(s->placeholder + n + 2 * i, 3, "%02x", r[i]);
	return true;
}

/* One "secret NAME RULE HOST VALUE HEADER" line. */
static int
parse_line(char *line, int lineno, char *err)
{
	char	   *f[5];
	char	   *p = line;
	EgressSecret *s = &proxy.secrets[proxy.nsecrets];

	for (int i = 0; i < 5; i++)
	{
		f[i] = p;
		if (!(p = strchr(p, ' ')))
			return bad(err, lineno, "not \"secret NAME RULE HOST VALUE HEADER\"");
		*p++ = '\0';
	}
	if (strcmp(f[0], "secret") != 0)
		return bad(err, lineno, "not understood");
	if (proxy.nsecrets == EGRESS_MAX_SECRETS)
		return bad(err, lineno, "more secrets than a run may have");
	if (!name_ok(f[1]))
		return bad(err, lineno, "invalid name");
	for (int i = 0; i < proxy.nsecrets; i++)
		if (strcmp(proxy.secrets[i].name, f[1]) == 0)
			return bad(err, lineno, "a name given twice");
	strcpy(s->name, f[1]);
	if ((s->rule = rule_of(f[2], f[3])) == NULL)
		return bad(err, lineno, "its rule is not a host rule of the policy with its host");
	if (!header_ok(s, p))
		return bad(err, lineno, "invalid header template");
	if (!value_ok(s, f[4]))
		return bad(err, lineno, "invalid value");
	if (!placeholder_make(s))
		return bad(err, lineno, "no randomness for its placeholder");
	proxy.nsecrets++;
	return 0;
}

/*
 * The secrets from fd (closed after), before the filter.  Every byte read
 * is wiped once parsed; the values stay in value_page only.
 */
int
proxy_secrets_load(int fd, char *err)
{
	char	   *buf = malloc(SECRETS_FILE_MAX + 1);
	size_t		len = 0;
	ssize_t		n;
	int			lineno = 0,
				rc = 0;
	char	   *save = NULL;

	value_page_len = (size_t) EGRESS_MAX_SECRETS * SECRET_VALUE_MAX;
	value_page = mmap(NULL, value_page_len, PROT_READ | PROT_WRITE,
					  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!buf || value_page == MAP_FAILED)
	{
		free(buf);
		close(fd);
		snprintf(err, EGRESS_ERRLEN, "secrets: out of memory");
		return -1;
	}
	/* never in a core dump, never swapped out (where the limit allows) */
	(void) madvise(value_page, value_page_len, MADV_DONTDUMP);
	(void) mlock(value_page, value_page_len);
	while (len < SECRETS_FILE_MAX && (n = read(fd, buf + len, SECRETS_FILE_MAX - len)) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	if (memchr(buf, '\0', len))
		rc = bad(err, 0, "a NUL byte");
	for (char *line = strtok_r(buf, "\n", &save); rc == 0 && line;
		 line = strtok_r(NULL, "\n", &save))
	{
		if (++lineno == 1)
		{
			if (strcmp(line, SECRETS_MAGIC) != 0)
				rc = bad(err, 1, "not " SECRETS_MAGIC);
			continue;
		}
		rc = parse_line(line, lineno, err);
	}
	if (rc == 0 && proxy.nsecrets == 0)
		rc = bad(err, lineno, "no secret");
	explicit_bzero(buf, SECRETS_FILE_MAX + 1);
	free(buf);
	if (rc == 0)
		(void) mprotect(value_page, value_page_len, PROT_READ);
	return rc;
}

/* Before "ready": each placeholder, then the CA's certificate (the jail's). */
void
proxy_secrets_announce(int fd)
{
	char		line[EGRESS_SECRET_NAME_MAX + EGRESS_PLACEHOLDER_LEN + 16];
	size_t		pemlen;
	const char *pem = proxy_ca_pem(&pemlen);

	for (int i = 0; i < proxy.nsecrets; i++)
	{
		int			n = snprintf(line, sizeof(line), "env %s=%s\n", proxy.secrets[i].name,
								 proxy.secrets[i].placeholder);

		if (proxy_write_all(fd, line, n) < 0)
			proxy_die("summary fd: %s", strerror(errno));
	}
	snprintf(line, sizeof(line), "ca %zu\n", pemlen);
	if (proxy_write_all(fd, line, strlen(line)) < 0 || proxy_write_all(fd, pem, pemlen) < 0)
		proxy_die("summary fd: %s", strerror(errno));
}

/* Does the secret go to host:port?  Its rule's pattern, one of its ports. */
bool
proxy_secret_applies(const EgressSecret *s, const char *host, uint16_t port)
{
	const EgressRule *r = s->rule;
	bool		match;

	if (r->kind == RULE_HOST)
		match = strcmp(r->host, host) == 0;
	else
	{
		size_t		hl = strlen(host),
					sl = strlen(r->host);

		match = hl > sl + 1 && host[hl - sl - 1] == '.' && strcmp(host + hl - sl, r->host) == 0;
	}
	if (!match)
		return false;
	for (int i = 0; i < r->nports; i++)
		if (r->ports[i] == port)
			return true;
	return false;
}

/* Is a CONNECT to host:port intercepted (a secret goes there)? */
bool
proxy_intercepts(const char *host, uint16_t port)
{
	for (int i = 0; i < proxy.nsecrets; i++)
		if (proxy_secret_applies(&proxy.secrets[i], host, port))
			return true;
	return false;
}

/* The first placeholder in buf (its secret; *at its offset), or NULL. */
const EgressSecret *
proxy_find_placeholder(const uint8_t *buf, size_t len, size_t *at)
{
	const EgressSecret *found = NULL;
	const uint8_t *p = buf;
	size_t		pl = strlen(EGRESS_PLACEHOLDER_PREFIX);

	/* every placeholder starts with the prefix: look for that, then which */
	while (p && (size_t) (buf + len - p) >= EGRESS_PLACEHOLDER_LEN &&
		   (p = memmem(p, buf + len - p, EGRESS_PLACEHOLDER_PREFIX, pl)) != NULL)
	{
		if ((size_t) (buf + len - p) < EGRESS_PLACEHOLDER_LEN)
			break;
		for (int i = 0; i < proxy.nsecrets && !found; i++)
			if (memcmp(p, proxy.secrets[i].placeholder, EGRESS_PLACEHOLDER_LEN) == 0)
				found = &proxy.secrets[i];
		if (found)
		{
			*at = p - buf;
			return found;
		}
		p++;
	}
	return NULL;
}

/*
 * A placeholder in bytes that are not its header's (where: "in the request
 * head", ...): refused (403) and recorded with the secret's name.  True
 * when it was.
 */
bool
proxy_block_placeholder(Conn *c, const uint8_t *buf, size_t len, const char *where)
{
	size_t		at;
	const EgressSecret *s;

	if (proxy.nsecrets == 0 || (s = proxy_find_placeholder(buf, len, &at)) == NULL)
		return false;
	snprintf(c->secret, sizeof(c->secret), "%s", s->name);
	if (!c->host[0])
		snprintf(c->host, sizeof(c->host), "(none)");
	proxy_refuse(c, 403, "the placeholder of secret %s was sent %s; it goes only in the %s header of requests to %s%s",
				 s->name, where, s->header, s->rule->kind == RULE_WILDCARD ? "*." : "", s->rule->host);
	return true;
}
