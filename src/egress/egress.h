/*-------------------------------------------------------------------------
 *
 * egress.h
 *	  sandbox-egress: the enforcing proxy that stands between a sandbox and
 *	  the network (docs/egress.md).  Standalone like the jail: no
 *	  PostgreSQL headers.  One module per concern:
 *	    policy.c	the policy file (one run's rules and limits) and matching
 *	    addr.c		host names and addresses: normalising, IP literals and
 *					numeric host names, the always-refused ranges, the
 *					host's own addresses
 *	    dns.c		the proxy's own resolver client (UDP, A/AAAA) and its
 *					answer cache (TTL and size bounded, one run's)
 *	    tls.c		the server name of a TLS ClientHello
 *	    confine.c	the proxy's seccomp allowlist (filter.c: the program
 *					compiled at build time by gen_filter.c)
 *	    proxy.c		the proxy program: main and its configuration; its
 *					own rooms (proxy.h) are pool.c (the workers), log.c,
 *					request.c, head.c (the request head's grammar), vet.c
 *					(the decision and the dial), tunnel.c (caps, relay,
 *					CONNECT) and http.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EGRESS_H
#define SANDBOX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

/* The policy file's first line; the jail and the SQL side write it. */
#define EGRESS_POLICY_MAGIC "sandbox-egress/1"
#define EGRESS_MAX_RULES	256
#define EGRESS_MAX_PORTS	16
#define EGRESS_HOST_MAX		253
#define EGRESS_RULE_ID_MAX	64
#define EGRESS_ERRLEN		256
/*
 * The connection log: at most this many rows per run (the proxy stops
 * logging there, agent._record_egress reads no more), each well under
 * 4 kB; a reader takes at most EGRESS_LOG_MAX_BYTES of it.
 */
#define EGRESS_LOG_MAX_ROWS		1000
#define EGRESS_LOG_MAX_BYTES	(4 * 1024 * 1024)

typedef enum EgressRuleKind
{
	RULE_HOST,					/* exact name */
	RULE_WILDCARD,				/* "*.example.com": subdomains, not the apex */
	RULE_CIDR					/* an address range, for IP-literal hosts */
} EgressRuleKind;

typedef struct EgressRule
{
	EgressRuleKind kind;
	char		id[EGRESS_RULE_ID_MAX + 1];
	char		host[EGRESS_HOST_MAX + 1];	/* RULE_HOST; RULE_WILDCARD: the
											 * suffix without "*." */
	int			family;			/* RULE_CIDR: AF_INET or AF_INET6 */
	uint8_t		net[16];
	int			prefix;
	uint16_t	ports[EGRESS_MAX_PORTS];
	int			nports;
} EgressRule;

typedef struct EgressPolicy
{
	EgressRule	rules[EGRESS_MAX_RULES];
	int			nrules;
	uint64_t	max_connections;	/* allowed connections per run */
	uint64_t	max_bytes_up;		/* sandbox -> network, whole run */
	uint64_t	max_bytes_down;		/* network -> sandbox, whole run */
} EgressPolicy;

/* An address the proxy may dial, or did refuse. */
typedef struct EgressAddr
{
	int			family;
	uint8_t		bytes[16];
} EgressAddr;

/* policy.c */
extern int	egress_policy_load(const char *path, int fd, EgressPolicy *p, char *err);
extern int	egress_policy_parse(const char *text, EgressPolicy *p, char *err);
extern const EgressRule *egress_match_host(const EgressPolicy *p, const char *host,
										   uint16_t port, bool *host_known);
extern const EgressRule *egress_match_addr(const EgressPolicy *p, const EgressAddr *a,
										   uint16_t port, bool *addr_known);

/* addr.c */
extern int	egress_normalize_host(const char *in, size_t len, char *out, char *err);
extern bool egress_is_numeric_host(const char *host);
extern bool egress_parse_literal(const char *host, EgressAddr *a, bool *canonical);
extern const char *egress_forbidden(const EgressAddr *a);
extern int	egress_own_addrs_load(char *err);
extern bool egress_addr_equal(const EgressAddr *a, const EgressAddr *b);

/* why an address of the sandbox's host is refused (a log row's reason) */
#define EGRESS_OWN_ADDR_WHAT "an address of the sandbox's host"

extern void egress_addr_str(const EgressAddr *a, char *buf, size_t len);
extern bool egress_cidr_contains(int family, const uint8_t *net, int prefix,
								 const EgressAddr *a);

/* dns.c */
#define EGRESS_DNS_MAX_ADDRS 16
#define EGRESS_DNS_CACHE_SIZE	64	/* names kept per proxy (one run) */
#define EGRESS_DNS_CACHE_MAX_TTL 300	/* seconds, whatever the answer says */
typedef struct EgressResolver
{
	struct sockaddr_storage ss;
	socklen_t	len;
} EgressResolver;
extern int	egress_resolver_parse(const char *spec, EgressResolver *r, char *err);
extern int	egress_resolver_default(EgressResolver *r, char *err);
extern int	egress_resolve(const EgressResolver *r, const char *host,
						   EgressAddr *out, int max, char *err);

/* confine.c, filter.c */
struct sock_filter;
typedef struct EgressFilter
{
	struct sock_filter *insns;
	unsigned short len;
} EgressFilter;
extern int	egress_filter_build(EgressFilter *f, char *err);
extern int	egress_filter_get(EgressFilter *f, char *err);
extern int	egress_confine(char *err);

/* tls.c */
#define EGRESS_SNI_NONE		0	/* a ClientHello without server_name */
#define EGRESS_SNI_FOUND	1
#define EGRESS_SNI_NOT_TLS	-1	/* not a TLS handshake record */
#define EGRESS_SNI_SHORT	-2	/* needs more bytes */
extern int	egress_tls_sni(const uint8_t *buf, size_t len, char *sni, size_t snilen);

#endif							/* SANDBOX_EGRESS_H */
