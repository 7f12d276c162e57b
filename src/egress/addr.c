/*-------------------------------------------------------------------------
 *
 * addr.c
 *	  Host names and addresses as the proxy judges them: a requested host
 *	  normalised (lower case, one trailing dot dropped, DNS syntax), IP
 *	  literals told apart from names (inet_aton's decimal, octal and hex
 *	  forms included, which a resolver or libc would turn into an address),
 *	  the ranges no connection may ever reach, whatever a rule says, and
 *	  the sandbox's host's own addresses (read once, when the proxy starts,
 *	  before it confines itself: getifaddrs needs netlink, which the
 *	  confined proxy cannot open; vet.c's dial() is the backstop for an
 *	  address the host gains later).
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <string.h>

#include "egress.h"

/*
 * A host as it came in (CONNECT target, URL, Host header) into its
 * canonical form, or -1 with err.  An IPv6 literal keeps its brackets off
 * (the caller stripped them) and is returned lower-cased as is.
 */
int
egress_normalize_host(const char *in, size_t len, char *out, char *err)
{
	size_t		label = 0;

	if (len > 0 && in[len - 1] == '.')
		len--;
	if (len == 0 || len > EGRESS_HOST_MAX)
	{
		snprintf(err, EGRESS_ERRLEN, "invalid host name");
		return -1;
	}
	if (memchr(in, ':', len))
	{
		/* an IPv6 literal: hex digits, colons, dots (embedded IPv4) */
		for (size_t i = 0; i < len; i++)
		{
			if (!isxdigit((unsigned char) in[i]) && in[i] != ':' && in[i] != '.')
			{
				snprintf(err, EGRESS_ERRLEN, "invalid host name");
				return -1;
			}
			out[i] = tolower((unsigned char) in[i]);
		}
		out[len] = '\0';
		return 0;
	}
	for (size_t i = 0; i < len; i++)
	{
		unsigned char c = in[i];

		if (c == '.')
		{
			if (label == 0)
				goto bad;
			label = 0;
		}
		else if (isalnum(c) || c == '-' || c == '_')
		{
			if (++label > 63)
				goto bad;
		}
		else
			goto bad;
		out[i] = tolower(c);
	}
	out[len] = '\0';
	return 0;
bad:
	snprintf(err, EGRESS_ERRLEN, "invalid host name");
	return -1;
}

/*
 * Numeric: the last label is all digits, or a hex number (0x...), or the
 * host contains a colon (IPv6).  Such a host is an address however it is
 * spelled ("2130706433", "0177.0.0.1", "0x7f.1"), never a name to look up:
 * no top-level domain is numeric.
 */
bool
egress_is_numeric_host(const char *host)
{
	const char *last = strrchr(host, '.');
	bool		digits = true;

	if (strchr(host, ':'))
		return true;
	last = last ? last + 1 : host;
	if ((last[0] == '0') && (last[1] == 'x' || last[1] == 'X'))
		return true;
	for (const char *c = last; *c; c++)
		if (!isdigit((unsigned char) *c))
			digits = false;
	return digits && *last != '\0';
}

/*
 * An IP literal into an address: IPv6 (inet_pton), or IPv4 in any form
 * inet_aton takes.  canonical: the strict dotted quad of four decimal
 * numbers without leading zeros (inet_pton's form), the only spelling a
 * CIDR rule may admit.
 */
bool
egress_parse_literal(const char *host, EgressAddr *a, bool *canonical)
{
	struct in_addr in4;

	memset(a, 0, sizeof(*a));
	*canonical = false;
	if (strchr(host, ':'))
	{
		if (inet_pton(AF_INET6, host, a->bytes) != 1)
			return false;
		a->family = AF_INET6;
		*canonical = true;
		return true;
	}
	if (inet_pton(AF_INET, host, &in4) == 1)
		*canonical = true;
	else if (inet_aton(host, &in4) == 0)
		return false;
	a->family = AF_INET;
	memcpy(a->bytes, &in4, 4);
	return true;
}

bool
egress_cidr_contains(int family, const uint8_t *net, int prefix, const EgressAddr *a)
{
	int			full = prefix / 8;
	int			rest = prefix % 8;

	if (family != a->family)
		return false;
	if (memcmp(net, a->bytes, full) != 0)
		return false;
	if (rest)
	{
		uint8_t		mask = (uint8_t) (0xff << (8 - rest));

		if ((net[full] & mask) != (a->bytes[full] & mask))
			return false;
	}
	return true;
}

/*
 * The always-refused ranges (IANA special-purpose registries, RFC 6890 and
 * successors).  A rule cannot open them: a CIDR rule covering 10.0.0.0/8
 * still reaches nothing there.
 */
typedef struct Range
{
	int			family;
	uint8_t		net[16];
	int			prefix;
	const char *what;
} Range;

static const Range forbidden[] = {
	{AF_INET, {0}, 8, "a \"this network\" address"},
	{AF_INET, {10}, 8, "a private address"},
	{AF_INET, {100, 64}, 10, "a shared (CGNAT) address"},
	{AF_INET, {127}, 8, "a loopback address"},
	{AF_INET, {169, 254, 169, 254}, 32, "the cloud metadata address"},
	{AF_INET, {169, 254}, 16, "a link-local address"},
	{AF_INET, {172, 16}, 12, "a private address"},
	{AF_INET, {192, 0, 0}, 24, "a reserved address"},
	{AF_INET, {192, 0, 2}, 24, "a reserved (documentation) address"},
	{AF_INET, {192, 88, 99}, 24, "a reserved (6to4 relay) address"},
	{AF_INET, {192, 168}, 16, "a private address"},
	{AF_INET, {198, 18}, 15, "a reserved (benchmarking) address"},
	{AF_INET, {198, 51, 100}, 24, "a reserved (documentation) address"},
	{AF_INET, {203, 0, 113}, 24, "a reserved (documentation) address"},
	{AF_INET, {224}, 4, "a multicast address"},
	{AF_INET, {240}, 4, "a reserved address"},
	{AF_INET6, {0}, 128, "the unspecified address"},
	{AF_INET6, {[15] = 1}, 128, "a loopback address"},
	{AF_INET6, {[10] = 0xff,[11] = 0xff}, 96, "an IPv4-mapped address"},
	{AF_INET6, {0}, 96, "an IPv4-compatible address"},
	{AF_INET6, {0, 0x64, 0xff, 0x9b}, 96, "a NAT64 address"},
	{AF_INET6, {0, 0x64, 0xff, 0x9b, 0, 1}, 48, "a NAT64 address"},
	{AF_INET6, {1}, 64, "a discard-only address"},
	{AF_INET6, {0x20, 0x01}, 23, "a reserved (IETF protocol) address"},
	{AF_INET6, {0x20, 0x01, 0x0d, 0xb8}, 32, "a reserved (documentation) address"},
	{AF_INET6, {0x20, 0x02}, 16, "a 6to4 address"},
	{AF_INET6, {0xfc}, 7, "a unique local (ULA) address"},
	{AF_INET6, {0xfe, 0x80}, 10, "a link-local address"},
	{AF_INET6, {0xfe, 0xc0}, 10, "a site-local address"},
	{AF_INET6, {0xff}, 8, "a multicast address"},
};

/*
 * The host's own addresses.  The proxy runs in the host's network
 * namespace, so an address of the host that is not in a special-purpose
 * range (a public address on an interface) would reach every service
 * listening on 0.0.0.0 or [::] there: a CIDR rule covering it, or an
 * allowed name whose DNS answers with it, must not open that.  Written
 * once, by egress_own_addrs_load before any worker thread exists; only
 * read afterwards.
 */
#define EGRESS_OWN_MAX	1024
static EgressAddr own_addrs[EGRESS_OWN_MAX];
static int	n_own_addrs;

/*
 * Read every address of every interface of the host's (our) network
 * namespace.  -1 with err when they cannot all be read: the proxy then does
 * not start (a partial list would let the rest through).
 */
int
egress_own_addrs_load(char *err)
{
	struct ifaddrs *ifa;

	if (getifaddrs(&ifa) < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "could not read the host's addresses: %s",
				 strerror(errno));
		return -1;
	}
	n_own_addrs = 0;
	for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
	{
		EgressAddr *a;

		if (!i->ifa_addr ||
			(i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
			continue;
		if (n_own_addrs == EGRESS_OWN_MAX)
		{
			freeifaddrs(ifa);
			snprintf(err, EGRESS_ERRLEN, "the host has more than %d addresses",
					 EGRESS_OWN_MAX);
			return -1;
		}
		a = &own_addrs[n_own_addrs++];
		memset(a, 0, sizeof(*a));
		a->family = i->ifa_addr->sa_family;
		if (a->family == AF_INET)
			memcpy(a->bytes, &((struct sockaddr_in *) i->ifa_addr)->sin_addr, 4);
		else
			memcpy(a->bytes, &((struct sockaddr_in6 *) i->ifa_addr)->sin6_addr, 16);
	}
	freeifaddrs(ifa);
	return 0;
}

bool
egress_addr_equal(const EgressAddr *a, const EgressAddr *b)
{
	return a->family == b->family &&
		memcmp(a->bytes, b->bytes, a->family == AF_INET ? 4 : 16) == 0;
}

/* Why the address may never be reached, or NULL if it may. */
const char *
egress_forbidden(const EgressAddr *a)
{
	for (size_t i = 0; i < sizeof(forbidden) / sizeof(forbidden[0]); i++)
		if (egress_cidr_contains(forbidden[i].family, forbidden[i].net,
								 forbidden[i].prefix, a))
			return forbidden[i].what;
	/* IPv6: only global unicast (2000::/3) is ever dialled */
	if (a->family == AF_INET6 && (a->bytes[0] & 0xe0) != 0x20)
		return "a reserved address";
	for (int i = 0; i < n_own_addrs; i++)
		if (egress_addr_equal(&own_addrs[i], a))
			return EGRESS_OWN_ADDR_WHAT;
	return NULL;
}

void
egress_addr_str(const EgressAddr *a, char *buf, size_t len)
{
	if (!inet_ntop(a->family, a->bytes, buf, len))
		snprintf(buf, len, "?");
}
