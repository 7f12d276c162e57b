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
extern int	proxy_send_counted(Conn *c, int fd, const uint8_t *buf, size_t n, bool up);
extern void proxy_relay(Conn *c, uint64_t up_left);
extern void proxy_serve_connect(Conn *c);

/* http.c */
extern void proxy_serve_http(Conn *c);

#endif							/* SANDBOX_EGRESS_PROXY_H */
