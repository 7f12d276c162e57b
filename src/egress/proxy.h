/*-------------------------------------------------------------------------
 *
 * proxy.h
 *	  sandbox-egress's own rooms (the proxy program's, not the policy or
 *	  resolver modules' of egress.h): one connection (Conn), the run's state
 *	  that every thread shares (ProxyRun, under its lock), and the steps of
 *	  serving a connection.  The files:
 *	    proxy.c		main: options, set-up, the seccomp step, the selftest
 *	    pool.c		the worker threads, the main thread's loop, stopping
 *	    log.c		a connection's log line, the run's summary line
 *	    request.c	reading the request head, refusing, dispatch
 *	    head.c		what a request head may be: the strict parser, fed
 *					as the bytes arrive, and the authority syntax
 *	    vet.c		the decision for a host:port and dialling the vetted
 *					address
 *	    tunnel.c	the byte caps, the relay, the CONNECT tunnel (TLS only)
 *	    http.c		absolute-form HTTP, forwarded once in origin form
 *	    secrets.c	the run's secrets (docs/secrets.md): their placeholders,
 *					which apply to a host, finding a placeholder
 *	    ca.c		the run's CA (its key in this process only), the
 *					certificates it issues, the TLS contexts both ways
 *	    intercept.c	a CONNECT to a host with a secret: TLS on both sides,
 *					the request head checked and the secret put in, the
 *					relay that blocks placeholders and scrubs values
 *	    scrub.c		the response side of it: the head, chunked bodies
 *					unframed, values scrubbed
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EGRESS_PROXY_H
#define SANDBOX_EGRESS_PROXY_H

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>

#include "egress.h"

#define EGRESS_CONCURRENT		32	/* connections of a run at once, at most */
#define EGRESS_WORKERS_START	2	/* workers made before "ready" */
#define EGRESS_HEAD_MAX			16384	/* bytes of a request head, at most */
#define EGRESS_HEAD_FIELDS_MAX	100		/* its header fields, at most */
#define EGRESS_LENGTH_DIGITS_MAX 18		/* a Content-Length's digits: no overflow */
#define EGRESS_HEAD_TIMEOUT_MS	10000
#define EGRESS_CONNECT_TIMEOUT_MS 10000
#define EGRESS_BUF				65536

typedef enum ConnMode
{
	MODE_CONNECT,
	MODE_HTTP
} ConnMode;

/*
 * Secrets (secrets.c): at most EGRESS_MAX_SECRETS per run, each with a
 * placeholder of EGRESS_PLACEHOLDER_LEN characters ("sbxph_" and 32 hex
 * digits) that stands for it in the sandbox.
 */
#define EGRESS_MAX_SECRETS		16
#define EGRESS_PLACEHOLDER_PREFIX "sbxph_"
#define EGRESS_PLACEHOLDER_LEN	38
#define EGRESS_SECRET_NAME_MAX	64
#define EGRESS_SECRET_HEADER_MAX 256

typedef struct EgressSecret
{
	char		name[EGRESS_SECRET_NAME_MAX + 1];
	const EgressRule *rule;		/* its rule in the policy (a host rule) */
	char		header[EGRESS_SECRET_NAME_MAX + 1];	/* the field's name */
	char		prefix[EGRESS_SECRET_HEADER_MAX + 1];	/* its value: prefix, */
	char		suffix[EGRESS_SECRET_HEADER_MAX + 1];	/* the secret, suffix */
	const uint8_t *value;		/* in the run's locked, undumpable page */
	size_t		value_len;
	char		placeholder[EGRESS_PLACEHOLDER_LEN + 1];
} EgressSecret;

/*
 * Where the head parser (head.c) is: one state per part of the grammar;
 * each byte moves it on or refuses the head.
 */
typedef enum HeadState
{
	HEAD_METHOD,				/* the method, up to its SP */
	HEAD_TARGET,				/* the request target, up to its SP */
	HEAD_VERSION,				/* "HTTP/1.0" or "HTTP/1.1", then CR */
	HEAD_LINE_LF,				/* the request line's LF */
	HEAD_FIELD_START,			/* a line's first byte: a name, or the blank line's CR */
	HEAD_FIELD_NAME,			/* a field name, up to its colon */
	HEAD_FIELD_VALUE,			/* after the colon: OWS, the value, OWS, then CR */
	HEAD_FIELD_LF,				/* a field line's LF */
	HEAD_END_LF,				/* the blank line's LF */
	HEAD_DONE
} HeadState;

/* What feeding the parser the bytes read so far came to. */
typedef enum HeadResult
{
	HEAD_MORE,					/* well formed so far: read on */
	HEAD_COMPLETE,				/* the head is whole (Conn.headend) */
	HEAD_REFUSED				/* malformed: the refusal was sent */
} HeadResult;

/* A part of Conn.head: offset and length. */
typedef struct HeadSpan
{
	uint16_t	off;
	uint16_t	len;
} HeadSpan;

/* One header field as parsed: its name, and its value without OWS. */
typedef struct HeadField
{
	HeadSpan	name;
	HeadSpan	value;
} HeadField;

/*
 * A request head as parsed (head.c), pointing into Conn.head.  Nothing of
 * the head goes upstream but these parts (http.c writes the request anew
 * from them).
 */
typedef struct RequestHead
{
	HeadState	state;
	size_t		pos;			/* the next byte of Conn.head to look at */
	size_t		start;			/* where the current part began */
	HeadField	cur;			/* the field line being read */
	bool		cur_value;		/* a byte of its value (not OWS) seen */
	int			nlines;			/* field lines so far */
	HeadSpan	method;
	HeadSpan	target;
	HeadSpan	version;
	HeadSpan	path;			/* absolute form: the path and query; len 0: "/" */
	char		rawhost[EGRESS_HOST_MAX + 8];	/* the target's host as written */
	bool		has_host;
	bool		has_length;
	uint64_t	length;			/* the Content-Length, 0 without one */
	bool		origin;			/* inside an intercepted tunnel: origin form
								 * ("GET /path"), Host the tunnel's */
	bool		chunked;		/* origin form: Transfer-Encoding: chunked */
	HeadField	fields[EGRESS_HEAD_FIELDS_MAX];
	int			nfields;		/* those forwarded (one of equal Content-Lengths) */
} RequestHead;

/* One connection from the sandbox, owned by the thread serving it. */
typedef struct Conn
{
	int			cfd;			/* the sandbox's side */
	int			ufd;			/* upstream, once dialled */
	uint64_t	started;
	ConnMode	mode;
	char		host[EGRESS_HOST_MAX + 1];
	uint16_t	port;
	char		address[INET6_ADDRSTRLEN];
	const char *rule;			/* the matching rule's id, or NULL */
	bool		allowed;
	char		reason[1024];	/* "" while none */
	uint64_t	up;
	uint64_t	down;
	RequestHead req;			/* the head as parsed */
	struct ssl_st *tls;			/* intercepted: the sandbox's TLS, which a
								 * refusal is written through (intercept.c) */
	char		secret[256];	/* the secrets put in ("A,B"), or the one
								 * whose placeholder was blocked; "" none */
	uint8_t		head[EGRESS_HEAD_MAX + 1];
	size_t		headlen;		/* bytes read, the head and what followed */
	size_t		headend;		/* end of the head (after CRLFCRLF) */
} Conn;

/*
 * The run, shared by every thread.  The configuration is written by main
 * before the first worker starts and only read after; the counters are
 * under lock.
 */
typedef struct ProxyRun
{
	EgressPolicy policy;
	EgressResolver resolver;
	int			log_fd;
	int			summary_fd;
	const char *selftest_syscall;	/* --selftest-syscall, or NULL */
	EgressSecret secrets[EGRESS_MAX_SECRETS];	/* secrets.c */
	int			nsecrets;
	atomic_bool confined;		/* the filter is loaded (selftest waits for it) */
	atomic_bool stopping;

	pthread_mutex_t lock;
	uint64_t	n_attempts,
				n_admitted,		/* passed the rules and the caps (the cap) */
				n_allowed,
				n_denied,
				n_log_rows,
				n_log_dropped;
	uint64_t	bytes_up,
				bytes_down;
	bool		limit_hit;
} ProxyRun;

extern ProxyRun proxy;

/* proxy.c */
extern void proxy_die(const char *fmt,...) __attribute__((noreturn, format(printf, 1, 2)));
extern uint64_t proxy_now_ms(void);
extern int	proxy_write_all(int fd, const void *buf, size_t len);
extern void proxy_selftest(const char *name) __attribute__((noreturn));

/* pool.c */
extern void proxy_pool_start(int listen_fd);
extern void proxy_pool_serve(int signal_fd);
extern void proxy_pool_stop(void);

/* log.c */
extern void proxy_json_str(char *out, size_t len, const char *s);
extern void proxy_conn_log(Conn *c);
extern void proxy_write_summary(void);

/* request.c */
extern void proxy_refuse(Conn *c, int status, const char *fmt,...)
			__attribute__((format(printf, 3, 4)));
extern bool proxy_wait_readable(int fd, uint64_t deadline);
extern void proxy_serve(Conn *c);

/* head.c */
extern HeadResult proxy_head_parse(Conn *c);
extern bool proxy_head_tokens(const uint8_t *v, size_t len,
							  bool (*fn) (const uint8_t *tok, size_t n, void *arg), void *arg);
extern int	proxy_split_authority(const char *a, size_t len, uint16_t defport,
								  char *rawhost, size_t rawlen, uint16_t *port);

/* vet.c */
extern bool proxy_vet(Conn *c, const char *rawhost, EgressAddr *dst);
extern bool proxy_dial_vetted(Conn *c, const EgressAddr *dst);

/* tunnel.c */
extern size_t proxy_take_bytes(bool up, size_t n);
extern int	proxy_send_counted(Conn *c, int fd, const uint8_t *buf, size_t n, bool up);
extern void proxy_relay(Conn *c, uint64_t up_left);
extern void proxy_serve_connect(Conn *c);

/* http.c */
extern void proxy_serve_http(Conn *c);
extern bool proxy_hop_by_hop(const Conn *c, HeadSpan name);

/* secrets.c */
extern int	proxy_secrets_load(int fd, char *err);
extern void proxy_secrets_announce(int fd);
extern bool proxy_secret_applies(const EgressSecret *s, const char *host, uint16_t port);
extern bool proxy_intercepts(const char *host, uint16_t port);
extern const EgressSecret *proxy_find_placeholder(const uint8_t *buf, size_t len, size_t *at);
extern bool proxy_block_placeholder(Conn *c, const uint8_t *buf, size_t len, const char *where);

/* ca.c */
struct ssl_ctx_st;
extern int	proxy_ca_init(int trust_fd, char *err);
extern const char *proxy_ca_pem(size_t *len);
extern struct ssl_st *proxy_ca_server_ssl(const char *host, char *err, size_t errlen);
extern struct ssl_st *proxy_ca_upstream_ssl(const char *host, char *err, size_t errlen);
extern void proxy_tls_error(char *buf, size_t len);

/* intercept.c */
extern void proxy_serve_intercept(Conn *c);
extern int	proxy_tls_send(Conn *c, const void *buf, size_t len);

/* scrub.c: the response side of an intercepted request */
typedef struct Scrubber Scrubber;
extern Scrubber *proxy_scrubber_new(void);
extern void proxy_scrubber_free(Scrubber *s);
extern int	proxy_scrub(Scrubber *s, const uint8_t *in, size_t n, bool eof,
						uint8_t **out, size_t *outlen, char *why, size_t whylen);

#endif							/* SANDBOX_EGRESS_PROXY_H */
