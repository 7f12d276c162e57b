/*-------------------------------------------------------------------------
 *
 * policy.c
 *	  One run's egress policy: the file the jail hands the proxy (written
 *	  from the invocation's copy of the policy, agent.egress_policy_file)
 *	  and the matching of a request against its rules.
 *
 * The file, one item per line, nothing else accepted:
 *	  sandbox-egress/1
 *	  limit connections N | limit bytes_up N | limit bytes_down N
 *	  rule ID host NAME PORT[,PORT...]
 *	  rule ID host *.SUFFIX PORT[,...]		subdomains of SUFFIX, not SUFFIX
 *	  rule ID cidr ADDR/PREFIX PORT[,...]	IP-literal hosts in the range
 * A rule matches a host and a port; no rule, no connection (default deny).
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "egress.h"

#define POLICY_MAX_BYTES (256 * 1024)

static int
parse_ports(char *list, EgressRule *r, char *err)
{
	char	   *save = NULL;

	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
	{
		char	   *end;
		long		v = strtol(t, &end, 10);

		if (*end || v < 1 || v > 65535 || r->nports == EGRESS_MAX_PORTS)
		{
			snprintf(err, EGRESS_ERRLEN, "rule %s: invalid port \"%s\"", r->id, t);
			return -1;
		}
		r->ports[r->nports++] = (uint16_t) v;
	}
	if (r->nports == 0)
	{
		snprintf(err, EGRESS_ERRLEN, "rule %s: no ports", r->id);
		return -1;
	}
	return 0;
}

static int
parse_rule(char *id, char *kind, char *what, char *ports, EgressPolicy *p, char *err)
{
	EgressRule *r;

	if (p->nrules == EGRESS_MAX_RULES)
	{
		snprintf(err, EGRESS_ERRLEN, "more than %d rules", EGRESS_MAX_RULES);
		return -1;
	}
	r = &p->rules[p->nrules];
	memset(r, 0, sizeof(*r));
	if (strlen(id) > EGRESS_RULE_ID_MAX)
	{
		snprintf(err, EGRESS_ERRLEN, "rule id too long");
		return -1;
	}
	strcpy(r->id, id);
	if (strcmp(kind, "host") == 0)
	{
		bool		wild = strncmp(what, "*.", 2) == 0;
		const char *name = wild ? what + 2 : what;

		if (egress_normalize_host(name, strlen(name), r->host, err) < 0 ||
			egress_is_numeric_host(r->host) || strchr(r->host, '*'))
		{
			snprintf(err, EGRESS_ERRLEN, "rule %s: invalid host pattern \"%s\"", id, what);
			return -1;
		}
		r->kind = wild ? RULE_WILDCARD : RULE_HOST;
	}
	else if (strcmp(kind, "cidr") == 0)
	{
		char	   *slash = strchr(what, '/');
		char	   *end;
		long		pre;

		if (!slash)
			goto badcidr;
		*slash = '\0';
		r->family = strchr(what, ':') ? AF_INET6 : AF_INET;
		if (inet_pton(r->family, what, r->net) != 1)
			goto badcidr;
		pre = strtol(slash + 1, &end, 10);
		if (*end || pre < 0 || pre > (r->family == AF_INET ? 32 : 128))
			goto badcidr;
		r->prefix = (int) pre;
		r->kind = RULE_CIDR;
	}
	else
	{
		snprintf(err, EGRESS_ERRLEN, "rule %s: unknown kind \"%s\"", id, kind);
		return -1;
	}
	if (parse_ports(ports, r, err) < 0)
		return -1;
	p->nrules++;
	return 0;
badcidr:
	snprintf(err, EGRESS_ERRLEN, "rule %s: invalid address range", id);
	return -1;
}

static int
parse_limit(char *name, char *value, EgressPolicy *p, char *err)
{
	char	   *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(value, &end, 10);
	if (errno || *end || *value == '-' || *value == '\0')
	{
		snprintf(err, EGRESS_ERRLEN, "invalid limit %s", name);
		return -1;
	}
	if (strcmp(name, "connections") == 0)
		p->max_connections = v;
	else if (strcmp(name, "bytes_up") == 0)
		p->max_bytes_up = v;
	else if (strcmp(name, "bytes_down") == 0)
		p->max_bytes_down = v;
	else
	{
		snprintf(err, EGRESS_ERRLEN, "unknown limit \"%s\"", name);
		return -1;
	}
	return 0;
}

int
egress_policy_parse(const char *text, EgressPolicy *p, char *err)
{
	char	   *copy = strdup(text);
	char	   *save = NULL;
	int			lineno = 0;
	int			rc = 0;

	if (!copy)
	{
		snprintf(err, EGRESS_ERRLEN, "out of memory");
		return -1;
	}
	memset(p, 0, sizeof(*p));
	p->max_connections = 64;
	p->max_bytes_up = 10 * 1024 * 1024;
	p->max_bytes_down = 100 * 1024 * 1024;
	for (char *line = strtok_r(copy, "\n", &save); line && rc == 0;
		 line = strtok_r(NULL, "\n", &save))
	{
		char	   *f[6];
		int			n = 0;
		char	   *fs = NULL;

		lineno++;
		for (char *t = strtok_r(line, " \t", &fs); t && n < 6; t = strtok_r(NULL, " \t", &fs))
			f[n++] = t;
		if (lineno == 1)
		{
			if (n != 1 || strcmp(f[0], EGRESS_POLICY_MAGIC) != 0)
			{
				snprintf(err, EGRESS_ERRLEN, "not an egress policy (first line must be \"%s\")",
						 EGRESS_POLICY_MAGIC);
				rc = -1;
			}
		}
		else if (n == 3 && strcmp(f[0], "limit") == 0)
			rc = parse_limit(f[1], f[2], p, err);
		else if (n == 5 && strcmp(f[0], "rule") == 0)
			rc = parse_rule(f[1], f[2], f[3], f[4], p, err);
		else
		{
			snprintf(err, EGRESS_ERRLEN, "line %d: not understood", lineno);
			rc = -1;
		}
	}
	if (rc == 0 && lineno == 0)
	{
		snprintf(err, EGRESS_ERRLEN, "empty policy");
		rc = -1;
	}
	free(copy);
	return rc;
}

/* The policy from path, or (path NULL) from the descriptor fd. */
int
egress_policy_load(const char *path, int fd, EgressPolicy *p, char *err)
{
	char	   *buf;
	ssize_t		n;
	size_t		len = 0;
	int			rc;

	if (path)
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "could not open policy %s: %s", path ? path : "(fd)",
				 strerror(errno));
		return -1;
	}
	buf = malloc(POLICY_MAX_BYTES + 1);
	if (!buf)
	{
		close(fd);
		snprintf(err, EGRESS_ERRLEN, "out of memory");
		return -1;
	}
	while (len < POLICY_MAX_BYTES &&
		   (n = read(fd, buf + len, POLICY_MAX_BYTES - len)) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	if (memchr(buf, '\0', len))
	{
		free(buf);
		snprintf(err, EGRESS_ERRLEN, "policy contains a NUL byte");
		return -1;
	}
	rc = egress_policy_parse(buf, p, err);
	free(buf);
	return rc;
}

static bool
port_ok(const EgressRule *r, uint16_t port)
{
	for (int i = 0; i < r->nports; i++)
		if (r->ports[i] == port)
			return true;
	return false;
}

/*
 * The first host rule matching host and port.  host_known: some rule
 * matches the host on another port (so the refusal can say "port").
 * A wildcard "*.example.com" matches "a.example.com" and
 * "a.b.example.com", never "example.com" itself (list the apex on its own).
 */
const EgressRule *
egress_match_host(const EgressPolicy *p, const char *host, uint16_t port, bool *host_known)
{
	size_t		hl = strlen(host);

	*host_known = false;
	for (int i = 0; i < p->nrules; i++)
	{
		const EgressRule *r = &p->rules[i];
		bool		match = false;

		if (r->kind == RULE_HOST)
			match = strcmp(r->host, host) == 0;
		else if (r->kind == RULE_WILDCARD)
		{
			size_t		sl = strlen(r->host);

			match = hl > sl + 1 && host[hl - sl - 1] == '.' &&
				strcmp(host + hl - sl, r->host) == 0;
		}
		if (!match)
			continue;
		*host_known = true;
		if (port_ok(r, port))
			return r;
	}
	return NULL;
}

/* The first CIDR rule containing the address, on the port. */
const EgressRule *
egress_match_addr(const EgressPolicy *p, const EgressAddr *a, uint16_t port, bool *addr_known)
{
	*addr_known = false;
	for (int i = 0; i < p->nrules; i++)
	{
		const EgressRule *r = &p->rules[i];

		if (r->kind != RULE_CIDR || !egress_cidr_contains(r->family, r->net, r->prefix, a))
			continue;
		*addr_known = true;
		if (port_ok(r, port))
			return r;
	}
	return NULL;
}
