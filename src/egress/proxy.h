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
 *	    request.c	the request head: reading, parsing, refusing, dispatch
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
#define EGRESS_HEAD_MAX			16384
#define EGRESS_HEAD_TIMEOUT_MS	10000
#define EGRESS_CONNECT_TIMEOUT_MS 10000
#define EGRESS_BUF				65536

typedef enum ConnMode
{
	MODE_CONNECT,
	MODE_HTTP
} ConnMode;

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
extern int	proxy_split_authority(Conn *c, const char *a, size_t len, uint16_t defport,
								  char *rawhost, size_t rawlen);
extern const char *proxy_find_header(const Conn *c, const char *name, size_t *vlen,
									 int *count);
extern void proxy_serve(Conn *c);

/* vet.c */
extern bool proxy_vet(Conn *c, const char *rawhost, EgressAddr *dst);
extern bool proxy_dial_vetted(Conn *c, const EgressAddr *dst);

/* tunnel.c */
extern int	proxy_send_counted(Conn *c, int fd, const uint8_t *buf, size_t n, bool up);
extern void proxy_relay(Conn *c, uint64_t up_left);
extern void proxy_serve_connect(Conn *c, const char *target, size_t tlen);

/* http.c */
extern void proxy_serve_http(Conn *c, const char *method, size_t mlen,
							 const char *target, size_t tlen, const char *version);

#endif							/* SANDBOX_EGRESS_PROXY_H */
