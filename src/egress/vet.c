/*-------------------------------------------------------------------------
 *
 * vet.c
 *	  sandbox-egress: the decision for one host:port and the dial.  The
 *	  order: syntax, IP literal or name, the rule, the run's caps, the
 *	  lookup, every looked-up address vetted; then the vetted address is
 *	  dialled (never the name again), with the backstop for an address of
 *	  the host's own.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "proxy.h"

/* dial()'s answer for a connection that reached the host itself */
#define DIAL_SELF	(-100000)

/*
 * The backstop for the host's own addresses: proxy_vet() refuses those the host
 * had when the proxy started (egress_forbidden), but one it gained since
 * is not in that list.  A connection to one of the host's own addresses
 * has that address as its source too (the kernel's local route names it
 * as the preferred source, and we never bind), so a connected socket whose
 * local address is its peer's reached the host.  The host's service has
 * then seen a connection opened, and closed before any byte.
 */
static bool
dialled_self(int fd)
{
	struct sockaddr_storage l,
				p;
	socklen_t	ll = sizeof(l),
				pl = sizeof(p);
	EgressAddr	la,
				pa;

	if (getsockname(fd, (struct sockaddr *) &l, &ll) < 0 ||
		getpeername(fd, (struct sockaddr *) &p, &pl) < 0)
		return true;			/* cannot tell: refuse */
	if (l.ss_family != p.ss_family)
		return false;
	memset(&la, 0, sizeof(la));
	memset(&pa, 0, sizeof(pa));
	la.family = pa.family = l.ss_family;
	if (l.ss_family == AF_INET)
	{
		memcpy(la.bytes, &((struct sockaddr_in *) &l)->sin_addr, 4);
		memcpy(pa.bytes, &((struct sockaddr_in *) &p)->sin_addr, 4);
	}
	else
	{
		memcpy(la.bytes, &((struct sockaddr_in6 *) &l)->sin6_addr, 16);
		memcpy(pa.bytes, &((struct sockaddr_in6 *) &p)->sin6_addr, 16);
	}
	return egress_addr_equal(&la, &pa);
}

/* Connect to the vetted address, with a deadline. */
static int
dial(Conn *c, const EgressAddr *a)
{
	struct sockaddr_storage ss;
	socklen_t	sl;
	int			fd,
				soerr = 0;
	socklen_t	el = sizeof(soerr);
	struct pollfd p;
	int			one = 1;

	memset(&ss, 0, sizeof(ss));
	if (a->family == AF_INET)
	{
		struct sockaddr_in *s = (struct sockaddr_in *) &ss;

		s->sin_family = AF_INET;
		s->sin_port = htons(c->port);
		memcpy(&s->sin_addr, a->bytes, 4);
		sl = sizeof(*s);
	}
	else
	{
		struct sockaddr_in6 *s = (struct sockaddr_in6 *) &ss;

		s->sin6_family = AF_INET6;
		s->sin6_port = htons(c->port);
		memcpy(&s->sin6_addr, a->bytes, 16);
		sl = sizeof(*s);
	}
	fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *) &ss, sl) < 0 && errno != EINPROGRESS)
	{
		int			e = errno;

		close(fd);
		return -e;
	}
	p.fd = fd;
	p.events = POLLOUT;
	if (poll(&p, 1, EGRESS_CONNECT_TIMEOUT_MS) <= 0)
	{
		close(fd);
		return -ETIMEDOUT;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &el) < 0 || soerr)
	{
		close(fd);
		return -(soerr ? soerr : EIO);
	}
	if (dialled_self(fd))
	{
		close(fd);
		return DIAL_SELF;
	}
	/* blocking from here: the relay polls */
	fcntl(fd, F_SETFL, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/*
 * An IP-literal host: canonical, covered by a CIDR rule (which sets
 * c->rule), and outside the always-refused ranges.  dst is the address;
 * false after a refusal was sent.
 */
static bool
vet_literal(Conn *c, const char *host, EgressAddr *dst)
{
	const EgressRule *rule;
	bool		known;
	bool		canonical;
	const char *why;

	if (!egress_parse_literal(host, dst, &canonical) || !canonical)
	{
		proxy_refuse(c, 403, "%s is a numeric host name, not an address or a name", host);
		return false;
	}
	egress_addr_str(dst, c->address, sizeof(c->address));
	rule = egress_match_addr(&proxy.policy, dst, c->port, &known);
	if (!rule)
	{
		if (known)
			proxy_refuse(c, 403, "port %u is not allowed for %s", c->port, host);
		else
			proxy_refuse(c, 403, "IP address %s is not in the allowlist (only names are, unless a CIDR rule covers the address)", host);
		return false;
	}
	c->rule = rule->id;
	if ((why = egress_forbidden(dst)))
	{
		proxy_refuse(c, 403, "%s is %s", host, why);
		return false;
	}
	return true;
}

/* A host name: a rule for it and the port (sets c->rule), or a refusal. */
static bool
vet_name(Conn *c, const char *host)
{
	const EgressRule *rule;
	bool		known;

	rule = egress_match_host(&proxy.policy, host, c->port, &known);
	if (!rule)
	{
		if (known)
			proxy_refuse(c, 403, "port %u is not allowed for %s", c->port, host);
		else
			proxy_refuse(c, 403, "%s:%u is not in the allowlist", host, c->port);
		return false;
	}
	c->rule = rule->id;
	return true;
}

/*
 * The run's caps: admit one more connection, or refuse.  The connection
 * cap counts admissions, here, under the lock: counting connections as
 * they end would let many in flight at once pass it.
 */
static bool
admit(Conn *c)
{
	bool		over_conns,
				over_bytes;

	pthread_mutex_lock(&proxy.lock);
	over_conns = proxy.n_admitted >= proxy.policy.max_connections;
	over_bytes = proxy.bytes_up >= proxy.policy.max_bytes_up ||
		proxy.bytes_down >= proxy.policy.max_bytes_down;
	if (over_conns)
		proxy.limit_hit = true;
	else if (!over_bytes)
		proxy.n_admitted++;
	pthread_mutex_unlock(&proxy.lock);
	if (over_conns)
	{
		proxy_refuse(c, 403, "the run's connection limit (%llu) is used up",
					 (unsigned long long) proxy.policy.max_connections);
		return false;
	}
	if (over_bytes)
	{
		proxy_refuse(c, 403, "the run's byte limit is used up");
		return false;
	}
	return true;
}

/* Look the name up; dst is the first answer once every answer is vetted. */
static bool
vet_lookup(Conn *c, const char *host, EgressAddr *dst)
{
	char		err[EGRESS_ERRLEN];
	EgressAddr	addrs[EGRESS_DNS_MAX_ADDRS];
	int			n;

	n = egress_resolve(&proxy.resolver, host, addrs, EGRESS_DNS_MAX_ADDRS, err);
	if (n <= 0)
	{
		proxy_refuse(c, 502, "could not resolve %s: %s", host, err);
		return false;
	}

	/*
	 * Every answer is vetted, not just the one we would dial: a name that
	 * resolves into a forbidden range at all is refused (a rebinding name
	 * gives one answer per lookup, and there is no second lookup).
	 */
	for (int i = 0; i < n; i++)
	{
		const char *why = egress_forbidden(&addrs[i]);

		if (why)
		{
			egress_addr_str(&addrs[i], c->address, sizeof(c->address));
			proxy_refuse(c, 403, "%s resolves to %s, %s", host, c->address, why);
			return false;
		}
	}
	*dst = addrs[0];
	egress_addr_str(dst, c->address, sizeof(c->address));
	return true;
}

/*
 * The decision for c->host:c->port, and the address to dial (vetted);
 * false after a refusal was sent.  The order: syntax, IP literal or name,
 * the rule, the caps, the lookup, every looked-up address vetted.
 */
bool
proxy_vet(Conn *c, const char *rawhost, EgressAddr *dst)
{
	char		err[EGRESS_ERRLEN];
	char		host[EGRESS_HOST_MAX + 1];
	bool		literal;

	if (egress_normalize_host(rawhost, strlen(rawhost), host, err) < 0)
	{
		snprintf(c->host, sizeof(c->host), "(invalid)");
		proxy_refuse(c, 403, "invalid host name");
		return false;
	}
	snprintf(c->host, sizeof(c->host), "%s", host);

	literal = egress_is_numeric_host(host);
	if (literal ? !vet_literal(c, host, dst) : !vet_name(c, host))
		return false;
	if (!admit(c))
		return false;
	if (literal)
		return true;			/* the address was vetted above */
	return vet_lookup(c, host, dst);
}

/* Dial the vetted address into c->ufd; false after a refusal was sent. */
bool
proxy_dial_vetted(Conn *c, const EgressAddr *dst)
{
	int			fd = dial(c, dst);

	if (fd == DIAL_SELF)
	{
		proxy_refuse(c, 403, "%s:%u (%s) reached %s", c->host, c->port, c->address,
			   EGRESS_OWN_ADDR_WHAT);
		return false;
	}
	if (fd < 0)
	{
		proxy_refuse(c, 502, "could not connect to %s:%u (%s): %s", c->host, c->port,
			   c->address, strerror(-fd));
		return false;
	}
	c->ufd = fd;
	return true;
}
