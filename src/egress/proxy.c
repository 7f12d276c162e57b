/*-------------------------------------------------------------------------
 *
 * proxy.c
 *	  sandbox-egress: one run's enforcing proxy.  The jail starts it on the
 *	  host side with a listening socket that lives in the sandbox's network
 *	  namespace (127.0.0.1:3128 there), so the sandbox's only way out is
 *	  this process, which runs where the host's network is.
 *
 *	  sandbox-egress (--policy FILE | --policy-fd N) (--listen-fd N | --listen ADDR:PORT)
 *	                 [--resolver ADDR[:PORT]] [--log-fd N] [--summary-fd N]
 *	                 [--selftest-syscall NAME]
 *
 * Once set up (policy read, socket, the first workers made) it confines
 * itself with its seccomp allowlist (confine.c), in every thread, and only
 * then says "ready".  --selftest-syscall (tests only: the jail never passes it)
 * makes a worker try one call the allowlist refuses after that, so a test
 * can see the filter kill the process.
 *
 * Worker threads each accept and serve one connection at a time (the
 * kernel hands a new connection to one idle worker: one wake-up, no thread
 * made per connection).  EGRESS_WORKERS_START are made at start; while
 * every worker is busy the main thread adds one for a new connection, up
 * to EGRESS_CONCURRENT, and beyond that accepts and refuses at once.  A
 * worker reads one request head within EGRESS_HEAD_TIMEOUT_MS, then:
 *	  CONNECT host:port		vet, resolve, vet the addresses, dial the vetted
 *							address, answer 200, then require the first
 *							bytes to be a TLS ClientHello whose SNI is host
 *	  GET http://host/...	(absolute form) the same vetting, Host must be
 *							host, forwarded once with Connection: close
 * A refusal is answered at once with a status line that says why
 * ("403 egress denied: example.org:443 is not in the allowlist").  Every
 * attempt is one JSON line on the log fd.  On the summary fd it writes
 * "ready" once it serves, and on SIGTERM (the run is over) it closes
 * every connection and writes one summary line there.  The run's caps (connections, bytes each way) are counted
 * here; reaching one closes the connection and flags the summary.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

static EgressPolicy policy;
static const char *selftest_syscall;	/* --selftest-syscall, or NULL */
static atomic_bool confined;	/* the filter is loaded (selftest waits for it) */
static EgressResolver resolver;
static int	log_fd = -1;
static int	summary_fd = -1;

/*
 * The workers (nworkers of them so far): each waits in its own epoll set,
 * which holds the listening socket (EPOLLEXCLUSIVE: a connection wakes one
 * waiter, not all) and the stop event.  conns[i] is worker i's connection,
 * reused.
 */
typedef struct Worker
{
	int			epfd;
	pthread_t	thread;
} Worker;

static Worker workers[EGRESS_CONCURRENT];
static Conn conns[EGRESS_CONCURRENT];
static Conn overflow_conn;		/* the main thread's, for refusals */
static int	listen_fd = -1;		/* O_NONBLOCK: a wake-up may find it taken */
static int	stop_efd = -1;		/* readable once stopping: every worker wakes */
static int	busy_efd = -1;		/* a worker tells the main thread nidle left or reached 0 */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static Conn *active[EGRESS_CONCURRENT];	/* under lock: the connections being served */
static int	nactive;
static int	nworkers;			/* made so far (only the main thread makes them) */
static int	nidle;				/* workers waiting for a connection, under lock */
static atomic_bool stopping;

/* counters of the run, under lock */
static uint64_t n_attempts,
			n_admitted,			/* passed the rules and the caps (the cap) */
			n_allowed,
			n_denied,
			n_log_rows,
			n_log_dropped;
static uint64_t bytes_up,
			bytes_down;
static bool limit_hit;

static uint64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
die(const char *fmt,...) __attribute__((noreturn, format(printf, 1, 2)));
static void
die(const char *fmt,...)
{
	va_list		ap;

	fputs("sandbox-egress: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int
write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0)
	{
		ssize_t		n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

/* JSON string body: our texts and normalised hosts; escape anyway. */
static void
json_str(char *out, size_t len, const char *s)
{
	size_t		o = 0;

	for (; *s && o + 7 < len; s++)
	{
		unsigned char c = *s;

		if (c == '"' || c == '\\')
		{
			out[o++] = '\\';
			out[o++] = c;
		}
		else if (c < 0x20 || c > 0x7e)
			o += snprintf(out + o, len - o, "\\u%04x", c);
		else
			out[o++] = c;
	}
	out[o] = '\0';
}

/* The connection's log line, and the run's counters. */
static void
conn_log(Conn *c)
{
	char		line[4096],
				host[1600],
				reason[1600];
	int			n;

	json_str(host, sizeof(host), c->host);
	json_str(reason, sizeof(reason), c->reason);
	pthread_mutex_lock(&lock);
	n_attempts++;
	if (c->allowed)
		n_allowed++;
	else
		n_denied++;
	if (n_log_rows >= EGRESS_LOG_MAX_ROWS)
	{
		n_log_dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	n_log_rows++;
	n = snprintf(line, sizeof(line),
				 "{\"seq\":%llu,\"kind\":\"%s\",\"host\":\"%s\",\"port\":%u,"
				 "\"address\":%s%s%s,\"decision\":\"%s\",\"rule\":%s%s%s,"
				 "\"reason\":%s%s%s,\"bytes_up\":%llu,\"bytes_down\":%llu,\"ms\":%llu}\n",
				 (unsigned long long) n_log_rows,
				 c->mode == MODE_CONNECT ? "connect" : "http", host, c->port,
				 c->address[0] ? "\"" : "", c->address[0] ? c->address : "null",
				 c->address[0] ? "\"" : "",
				 c->allowed ? "allowed" : "denied",
				 c->rule ? "\"" : "", c->rule ? c->rule : "null", c->rule ? "\"" : "",
				 c->reason[0] ? "\"" : "", c->reason[0] ? reason : "null",
				 c->reason[0] ? "\"" : "",
				 (unsigned long long) c->up, (unsigned long long) c->down,
				 (unsigned long long) (now_ms() - c->started));
	if (log_fd >= 0 && n > 0 && (size_t) n < sizeof(line))
		(void) write_all(log_fd, line, n);
	pthread_mutex_unlock(&lock);
}

/* Refuse: the reason in the status line and the body, then close. */
static void
refuse(Conn *c, int status, const char *fmt,...) __attribute__((format(printf, 3, 4)));
static void
refuse(Conn *c, int status, const char *fmt,...)
{
	va_list		ap;
	char		msg[2400];
	const char *what = status == 403 ? "egress denied" : "egress failed";

	va_start(ap, fmt);
	vsnprintf(c->reason, sizeof(c->reason), fmt, ap);
	va_end(ap);
	c->allowed = false;
	snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s: %s\r\nContent-Type: text/plain\r\n"
			 "X-Sandbox-Egress: %s\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n"
			 "%s: %s\n",
			 status, what, c->reason, status == 403 ? "denied" : "failed",
			 strlen(what) + strlen(c->reason) + 3, what, c->reason);
	(void) write_all(c->cfd, msg, strlen(msg));
}

/* Wait for fd to be readable until deadline (ms); false on timeout/stop. */
static bool
wait_readable(int fd, uint64_t deadline)
{
	for (;;)
	{
		struct pollfd p = {.fd = fd,.events = POLLIN};
		uint64_t	now = now_ms();
		int			rc;

		if (now >= deadline || atomic_load(&stopping))
			return false;
		rc = poll(&p, 1, (int) (deadline - now < 200 ? deadline - now : 200));
		if (rc > 0)
			return true;
		if (rc < 0 && errno != EINTR)
			return false;
	}
}

/* Read the request head (up to CRLFCRLF) within the head timeout. */
static int
read_head(Conn *c)
{
	uint64_t	deadline = c->started + EGRESS_HEAD_TIMEOUT_MS;

	while (c->headlen < EGRESS_HEAD_MAX)
	{
		ssize_t		n;
		char	   *e;

		if (!wait_readable(c->cfd, deadline))
			return -1;
		n = read(c->cfd, c->head + c->headlen, EGRESS_HEAD_MAX - c->headlen);
		if (n <= 0)
			return -1;
		c->headlen += n;
		c->head[c->headlen] = '\0';
		if (memchr(c->head, '\0', c->headlen))
			return -2;
		e = strstr((char *) c->head, "\r\n\r\n");
		if (e)
		{
			c->headend = (uint8_t *) e + 4 - c->head;
			return 0;
		}
	}
	return -2;
}

/* "host:port" or "[v6]:port" (port required) into c->host and c->port. */
static int
split_authority(Conn *c, const char *a, size_t len, uint16_t defport, char *rawhost,
				size_t rawlen)
{
	const char *hs = a,
			   *he,
			   *colon = NULL;
	char		hb[EGRESS_HOST_MAX + 8];
	long		port = defport;

	if (len && a[0] == '[')
	{
		he = memchr(a, ']', len);
		if (!he)
			return -1;
		hs = a + 1;
		if (he + 1 < a + len)
		{
			if (he[1] != ':')
				return -1;
			colon = he + 1;
		}
	}
	else
	{
		colon = memrchr(a, ':', len);
		he = colon ? colon : a + len;
	}
	if (colon)
	{
		char		pb[8];
		size_t		pl = a + len - colon - 1;
		char	   *end;

		if (pl == 0 || pl >= sizeof(pb))
			return -1;
		memcpy(pb, colon + 1, pl);
		pb[pl] = '\0';
		port = strtol(pb, &end, 10);
		if (*end || port < 1 || port > 65535)
			return -1;
	}
	else if (defport == 0)
		return -1;
	if (he - hs <= 0 || (size_t) (he - hs) >= sizeof(hb) || (size_t) (he - hs) >= rawlen)
		return -1;
	memcpy(hb, hs, he - hs);
	hb[he - hs] = '\0';
	memcpy(rawhost, hb, he - hs + 1);
	c->port = (uint16_t) port;
	return 0;
}

/* A header's value in the head (first occurrence), or NULL. */
static const char *
find_header(const Conn *c, const char *name, size_t *vlen, int *count)
{
	const char *p = strstr((const char *) c->head, "\r\n");
	const char *found = NULL;
	size_t		nl = strlen(name);

	*count = 0;
	while (p && (const uint8_t *) p + 2 < c->head + c->headend - 2)
	{
		const char *line = p + 2;
		const char *eol = strstr(line, "\r\n");

		if (!eol)
			break;
		if ((size_t) (eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':')
		{
			const char *v = line + nl + 1;

			while (*v == ' ' || *v == '\t')
				v++;
			if (!found)
			{
				found = v;
				*vlen = eol - v;
				while (*vlen && (v[*vlen - 1] == ' ' || v[*vlen - 1] == '\t'))
					(*vlen)--;
			}
			(*count)++;
		}
		p = eol;
	}
	return found;
}

/* dial()'s answer for a connection that reached the host itself */
#define DIAL_SELF	(-100000)

/*
 * The backstop for the host's own addresses: vet() refuses those the host
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
 * The decision for c->host:c->port, and the address to dial (vetted);
 * false after a refusal was sent.  The order: syntax, IP literal or name,
 * the rule, the caps, the lookup, every looked-up address vetted.
 */
static bool
vet(Conn *c, const char *rawhost, EgressAddr *dst)
{
	char		err[EGRESS_ERRLEN];
	char		host[EGRESS_HOST_MAX + 1];
	const EgressRule *rule;
	bool		known;
	EgressAddr	addrs[EGRESS_DNS_MAX_ADDRS];
	int			n;
	bool		over_conns,
				over_bytes;

	if (egress_normalize_host(rawhost, strlen(rawhost), host, err) < 0)
	{
		snprintf(c->host, sizeof(c->host), "(invalid)");
		refuse(c, 403, "invalid host name");
		return false;
	}
	snprintf(c->host, sizeof(c->host), "%s", host);

	if (egress_is_numeric_host(host))
	{
		bool		canonical;
		const char *why;

		if (!egress_parse_literal(host, dst, &canonical) || !canonical)
		{
			refuse(c, 403, "%s is a numeric host name, not an address or a name", host);
			return false;
		}
		egress_addr_str(dst, c->address, sizeof(c->address));
		rule = egress_match_addr(&policy, dst, c->port, &known);
		if (!rule)
		{
			if (known)
				refuse(c, 403, "port %u is not allowed for %s", c->port, host);
			else
				refuse(c, 403, "IP address %s is not in the allowlist (only names are, unless a CIDR rule covers the address)", host);
			return false;
		}
		c->rule = rule->id;
		if ((why = egress_forbidden(dst)))
		{
			refuse(c, 403, "%s is %s", host, why);
			return false;
		}
	}
	else
	{
		rule = egress_match_host(&policy, host, c->port, &known);
		if (!rule)
		{
			if (known)
				refuse(c, 403, "port %u is not allowed for %s", c->port, host);
			else
				refuse(c, 403, "%s:%u is not in the allowlist", host, c->port);
			return false;
		}
		c->rule = rule->id;
	}

	/*
	 * The connection cap counts admissions, here, under the lock: counting
	 * connections as they end would let many in flight at once pass it.
	 */
	pthread_mutex_lock(&lock);
	over_conns = n_admitted >= policy.max_connections;
	over_bytes = bytes_up >= policy.max_bytes_up || bytes_down >= policy.max_bytes_down;
	if (over_conns)
		limit_hit = true;
	else if (!over_bytes)
		n_admitted++;
	pthread_mutex_unlock(&lock);
	if (over_conns)
	{
		refuse(c, 403, "the run's connection limit (%llu) is used up",
			   (unsigned long long) policy.max_connections);
		return false;
	}
	if (over_bytes)
	{
		refuse(c, 403, "the run's byte limit is used up");
		return false;
	}

	if (c->address[0])
		return true;			/* a literal, vetted above */

	n = egress_resolve(&resolver, host, addrs, EGRESS_DNS_MAX_ADDRS, err);
	if (n <= 0)
	{
		refuse(c, 502, "could not resolve %s: %s", host, err);
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
			refuse(c, 403, "%s resolves to %s, %s", host, c->address, why);
			return false;
		}
	}
	*dst = addrs[0];
	egress_addr_str(dst, c->address, sizeof(c->address));
	return true;
}

/* Dial the vetted address into c->ufd; false after a refusal was sent. */
static bool
dial_vetted(Conn *c, const EgressAddr *dst)
{
	int			fd = dial(c, dst);

	if (fd == DIAL_SELF)
	{
		refuse(c, 403, "%s:%u (%s) reached %s", c->host, c->port, c->address,
			   EGRESS_OWN_ADDR_WHAT);
		return false;
	}
	if (fd < 0)
	{
		refuse(c, 502, "could not connect to %s:%u (%s): %s", c->host, c->port,
			   c->address, strerror(-fd));
		return false;
	}
	c->ufd = fd;
	return true;
}

/*
 * Count n bytes in one direction against the run's cap.  Returns how many
 * may pass (all, or what is left of the cap); a cap reached flags the run.
 */
static size_t
take_bytes(bool up, size_t n)
{
	size_t		ok;
	uint64_t   *used = up ? &bytes_up : &bytes_down;
	uint64_t	cap = up ? policy.max_bytes_up : policy.max_bytes_down;

	pthread_mutex_lock(&lock);
	ok = *used >= cap ? 0 : (cap - *used < n ? cap - *used : n);
	*used += ok;
	if (ok < n)
		limit_hit = true;
	pthread_mutex_unlock(&lock);
	return ok;
}

static int
send_counted(Conn *c, int fd, const uint8_t *buf, size_t n, bool up)
{
	size_t		ok = take_bytes(up, n);

	if (ok && write_all(fd, buf, ok) < 0)
		return -1;
	if (up)
		c->up += ok;
	else
		c->down += ok;
	if (ok < n)
	{
		snprintf(c->reason, sizeof(c->reason), "the run's byte limit (%s) was reached",
				 up ? "up" : "down");
		return -1;
	}
	return 0;
}

/*
 * Move what src has (at most max bytes) to dst through the pipe p, in the
 * kernel (splice: no copy through this process), counted against the
 * run's cap in that direction.  Returns the bytes taken from src, 0 at
 * EOF, -1 on an error or when the cap cut it (then c->reason says so).
 */
static ssize_t
move_bytes(Conn *c, int src, int dst, int p[2], size_t max, bool up)
{
	ssize_t		n = splice(src, NULL, p[1], NULL, max, SPLICE_F_MOVE);
	size_t		ok,
				left;

	if (n <= 0)
		return n;
	ok = take_bytes(up, n);
	for (left = ok; left > 0;)
	{
		ssize_t		m = splice(p[0], NULL, dst, NULL, left, SPLICE_F_MOVE);

		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		left -= m;
	}
	if (up)
		c->up += ok;
	else
		c->down += ok;
	if (ok < (size_t) n)
	{
		/* the rest stays in the pipe, which is closed with the connection */
		snprintf(c->reason, sizeof(c->reason), "the run's byte limit (%s) was reached",
				 up ? "up" : "down");
		return -1;
	}
	return n;
}

/*
 * Relay both ways until both sides are done.  up_left: how many more
 * bytes the sandbox may send (HTTP: the declared body), or UINT64_MAX.
 */
static void
relay(Conn *c, uint64_t up_left)
{
	int			pu[2] = {-1, -1},
				pd[2] = {-1, -1};
	bool		cdone = up_left == 0,
				udone = false;

	if (pipe2(pu, O_CLOEXEC) < 0 || pipe2(pd, O_CLOEXEC) < 0)
		goto out;
	(void) fcntl(pd[1], F_SETPIPE_SZ, EGRESS_BUF * 4);
	if (cdone)
		shutdown(c->ufd, SHUT_WR);
	while (!udone && !atomic_load(&stopping))
	{
		struct pollfd p[2] = {{.fd = cdone ? -1 : c->cfd,.events = POLLIN},
		{.fd = c->ufd,.events = POLLIN}};
		int			rc = poll(p, 2, 200);

		if (rc < 0 && errno != EINTR)
			break;
		if (rc <= 0)
			continue;
		if (p[0].revents)
		{
			size_t		want = up_left < EGRESS_BUF ? up_left : EGRESS_BUF;
			ssize_t		n = move_bytes(c, c->cfd, c->ufd, pu, want, true);

			if (n < 0 && c->reason[0])
				break;
			if (n <= 0)
			{
				cdone = true;
				shutdown(c->ufd, SHUT_WR);
			}
			else
			{
				if (up_left != UINT64_MAX)
					up_left -= n;
				if (up_left == 0)
				{
					/* the whole request sent: nothing more goes up */
					cdone = true;
					shutdown(c->ufd, SHUT_WR);
				}
			}
		}
		if (p[1].revents)
		{
			ssize_t		n = move_bytes(c, c->ufd, c->cfd, pd, EGRESS_BUF * 4, false);

			if (n < 0)
				break;
			if (n == 0)
				udone = true;
		}
	}
out:
	for (int i = 0; i < 2; i++)
	{
		if (pu[i] >= 0)
			close(pu[i]);
		if (pd[i] >= 0)
			close(pd[i]);
	}
}

static void
serve_connect(Conn *c, const char *target, size_t tlen)
{
	char		raw[EGRESS_HOST_MAX + 8];
	EgressAddr	dst;
	char		sni[EGRESS_HOST_MAX + 2];
	int			r;
	uint64_t	deadline;
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";

	c->mode = MODE_CONNECT;
	if (split_authority(c, target, tlen, 0, raw, sizeof(raw)) < 0)
	{
		refuse(c, 403, "CONNECT needs host:port");
		return;
	}
	if (!vet(c, raw, &dst))
		return;
	if (!dial_vetted(c, &dst))
		return;
	if (write_all(c->cfd, ok, sizeof(ok) - 1) < 0)
		return;

	/* the client's first bytes: a ClientHello naming exactly our host */
	memmove(c->head, c->head + c->headend, c->headlen - c->headend);
	c->headlen -= c->headend;
	deadline = now_ms() + EGRESS_HEAD_TIMEOUT_MS;
	while ((r = egress_tls_sni(c->head, c->headlen, sni, sizeof(sni))) == EGRESS_SNI_SHORT)
	{
		ssize_t		n;

		if (c->headlen >= EGRESS_HEAD_MAX || !wait_readable(c->cfd, deadline) ||
			(n = read(c->cfd, c->head + c->headlen, EGRESS_HEAD_MAX - c->headlen)) <= 0)
		{
			snprintf(c->reason, sizeof(c->reason), "no TLS ClientHello through the tunnel");
			return;
		}
		c->headlen += n;
	}
	if (r == EGRESS_SNI_NOT_TLS)
	{
		snprintf(c->reason, sizeof(c->reason),
				 "the tunnel to %s:%u did not start with a TLS ClientHello (only TLS is relayed)",
				 c->host, c->port);
		return;
	}
	if (r == EGRESS_SNI_NONE && egress_is_numeric_host(c->host))
	{
		/* an IP literal (admitted by a CIDR rule) has no server name */
		c->allowed = true;
		if (send_counted(c, c->ufd, c->head, c->headlen, true) == 0)
			relay(c, UINT64_MAX);
		return;
	}
	if (r == EGRESS_SNI_NONE)
	{
		snprintf(c->reason, sizeof(c->reason), "the TLS ClientHello names no server (SNI)");
		return;
	}
	if (sni[0] && sni[strlen(sni) - 1] == '.')
		sni[strlen(sni) - 1] = '\0';
	if (strcmp(sni, c->host) != 0)
	{
		char		s[EGRESS_HOST_MAX + 2];

		json_str(s, sizeof(s), sni);
		snprintf(c->reason, sizeof(c->reason),
				 "the TLS server name %.100s is not the tunnel's host %s", s, c->host);
		return;
	}
	c->allowed = true;
	if (send_counted(c, c->ufd, c->head, c->headlen, true) == 0)
		relay(c, UINT64_MAX);
}

/*
 * "METHOD http://host[:port]/path HTTP/1.x": Host must name the same
 * host and port; the request goes out in origin form with Connection:
 * close and its body (Content-Length only), nothing after it.
 */
static void
serve_http(Conn *c, const char *method, size_t mlen, const char *target, size_t tlen,
		   const char *version)
{
	char		raw[EGRESS_HOST_MAX + 8];
	const char *auth = target + 7,
			   *path;
	size_t		alen;
	const char *hv,
			   *clv;
	size_t		hvlen,
				cllen = 0;
	int			count,
				clcount,
				tecount;
	uint64_t	body = 0;
	EgressAddr	dst;
	char	   *out;
	size_t		olen = 0;
	const char *p;

	c->mode = MODE_HTTP;
	if (tlen < 8 || strncasecmp(target, "http://", 7) != 0)
	{
		refuse(c, 403, "only CONNECT and absolute http:// requests go through the proxy");
		return;
	}
	path = memchr(auth, '/', target + tlen - auth);
	alen = path ? (size_t) (path - auth) : (size_t) (target + tlen - auth);
	if (memchr(auth, '@', alen) || memchr(auth, '?', alen) || memchr(auth, '#', alen) ||
		split_authority(c, auth, alen, 80, raw, sizeof(raw)) < 0)
	{
		refuse(c, 403, "invalid request target");
		return;
	}
	hv = find_header(c, "Host", &hvlen, &count);
	if (count != 1)
	{
		snprintf(c->host, sizeof(c->host), "%.253s", raw);
		refuse(c, 403, "the request needs exactly one Host header");
		return;
	}
	{
		Conn		tmp;
		char		hraw[EGRESS_HOST_MAX + 8],
					a[EGRESS_HOST_MAX + 1],
					b[EGRESS_HOST_MAX + 1],
					err[EGRESS_ERRLEN];

		memset(&tmp, 0, sizeof(tmp.port));
		if (split_authority(&tmp, hv, hvlen, 80, hraw, sizeof(hraw)) < 0 ||
			egress_normalize_host(hraw, strlen(hraw), a, err) < 0 ||
			egress_normalize_host(raw, strlen(raw), b, err) < 0 ||
			strcmp(a, b) != 0 || tmp.port != c->port)
		{
			snprintf(c->host, sizeof(c->host), "%.253s", raw);
			refuse(c, 403, "the Host header does not name the request's host");
			return;
		}
	}
	find_header(c, "Transfer-Encoding", &hvlen, &tecount);
	clv = find_header(c, "Content-Length", &cllen, &clcount);
	if (tecount || clcount > 1)
	{
		refuse(c, 403, "request bodies need one Content-Length (no chunked uploads through the proxy)");
		return;
	}
	if (clcount)
	{
		char		nb[24];
		char	   *end;

		if (cllen == 0 || cllen >= sizeof(nb))
		{
			refuse(c, 403, "invalid Content-Length");
			return;
		}
		memcpy(nb, clv, cllen);
		nb[cllen] = '\0';
		body = strtoull(nb, &end, 10);
		if (*end || nb[0] == '-')
		{
			refuse(c, 403, "invalid Content-Length");
			return;
		}
	}
	if (!vet(c, raw, &dst))
		return;
	if (!dial_vetted(c, &dst))
		return;

	/* the head in origin form, hop-by-hop and proxy headers dropped */
	out = malloc(EGRESS_HEAD_MAX + 256);
	if (!out)
		return;
	olen = snprintf(out, EGRESS_HEAD_MAX, "%.*s %s %s\r\n", (int) mlen, method,
					path ? "" : "/", version);
	if (path)
	{
		/* the path, up to the version (after the method and target) */
		size_t		pl = target + tlen - path;

		olen = snprintf(out, EGRESS_HEAD_MAX, "%.*s %.*s %s\r\n", (int) mlen, method,
						(int) pl, path, version);
	}
	p = strstr((const char *) c->head, "\r\n") + 2;
	while ((const uint8_t *) p < c->head + c->headend - 2)
	{
		const char *eol = strstr(p, "\r\n");
		size_t		l = eol - p;

		if (!(strncasecmp(p, "Proxy-", 6) == 0 || strncasecmp(p, "Connection:", 11) == 0 ||
			  strncasecmp(p, "Keep-Alive:", 11) == 0))
		{
			memcpy(out + olen, p, l + 2);
			olen += l + 2;
		}
		p = eol + 2;
	}
	memcpy(out + olen, "Connection: close\r\n\r\n", 21);
	olen += 21;
	c->allowed = true;
	if (send_counted(c, c->ufd, (uint8_t *) out, olen, true) == 0)
	{
		size_t		extra = c->headlen - c->headend;

		if (extra > body)
			extra = body;		/* a pipelined second request is dropped */
		if (extra == 0 ||
			send_counted(c, c->ufd, c->head + c->headend, extra, true) == 0)
			relay(c, body - extra);
	}
	free(out);
}

static void
serve(Conn *c)
{
	char	   *sp1,
			   *sp2,
			   *eol;
	char	   *line = (char *) c->head;
	int			rc = read_head(c);

	if (rc == -1)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		snprintf(c->reason, sizeof(c->reason), "no request within %d s",
				 EGRESS_HEAD_TIMEOUT_MS / 1000);
		return;
	}
	if (rc == -2)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		refuse(c, 403, "the request head is malformed or larger than %d bytes",
			   EGRESS_HEAD_MAX);
		return;
	}
	eol = strstr(line, "\r\n");
	sp1 = memchr(line, ' ', eol - line);
	sp2 = sp1 ? memchr(sp1 + 1, ' ', eol - sp1 - 1) : NULL;
	if (!sp1 || !sp2 || (strncmp(sp2 + 1, "HTTP/1.1", 8) != 0 &&
						 strncmp(sp2 + 1, "HTTP/1.0", 8) != 0) || sp2 + 9 != eol)
	{
		snprintf(c->host, sizeof(c->host), "(none)");
		refuse(c, 403, "not an HTTP/1 proxy request");
		return;
	}
	if (sp1 - line == 7 && strncmp(line, "CONNECT", 7) == 0)
		serve_connect(c, sp1 + 1, sp2 - sp1 - 1);
	else
	{
		char		version[9];

		memcpy(version, sp2 + 1, 8);
		version[8] = '\0';
		serve_http(c, line, sp1 - line, sp1 + 1, sp2 - sp1 - 1, version);
	}
}

/* Count a worker busy or idle; tell the main thread when none is idle. */
static void
worker_busy(bool busy)
{
	bool		tell;
	uint64_t	one = 1;

	pthread_mutex_lock(&lock);
	nidle += busy ? -1 : 1;
	tell = busy ? nidle == 0 : nidle == 1;
	pthread_mutex_unlock(&lock);
	if (tell)
		(void) eventfd_write(busy_efd, one);
}

/* A new connection, before anything is read from it. */
static void
conn_start(Conn *c, int cfd)
{
	int			one = 1;

	/* everything but the head's buffer, which is read into before use */
	memset(c, 0, offsetof(Conn, head));
	c->head[0] = '\0';
	c->headlen = 0;
	c->headend = 0;
	/*
	 * The relay forwards each TLS flight as it comes: no Nagle delay
	 * behind it (the upstream socket has the same, dial()).
	 */
	(void) setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->cfd = cfd;
	c->ufd = -1;
	c->started = now_ms();
}

/* Serve worker i's connection cfd to its end, log it, close it. */
static void
conn_run(int i, int cfd)
{
	Conn	   *c = &conns[i];

	conn_start(c, cfd);
	pthread_mutex_lock(&lock);
	active[i] = c;
	nactive++;
	pthread_mutex_unlock(&lock);
	serve(c);
	conn_log(c);
	pthread_mutex_lock(&lock);
	active[i] = NULL;
	nactive--;
	close(c->cfd);
	if (c->ufd >= 0)
		close(c->ufd);
	pthread_cond_broadcast(&idle);
	pthread_mutex_unlock(&lock);
}

/*
 * --selftest-syscall: what a proxy taken over by the payload would try
 * first.  Each must kill the process (SIGSYS); if one returns, say so and
 * exit 3, which a test reports as a hole in the filter.
 */
static void
selftest(const char *name)
{
	long		rc;
	char		buf[64];

	while (!atomic_load(&confined))
		(void) poll(NULL, 0, 1);
	if (strcmp(name, "openat") == 0)
		rc = openat(AT_FDCWD, "/etc/passwd", O_RDONLY);
	else if (strcmp(name, "execve") == 0)
	{
		char	   *const argv[] = {"/bin/sh", "-c", "true", NULL};

		rc = execve("/bin/sh", argv, argv + 3);
	}
	else if (strcmp(name, "fork") == 0)
		rc = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);	/* a process: no CLONE_THREAD */
	else if (strcmp(name, "socket_unix") == 0)
		rc = socket(AF_UNIX, SOCK_STREAM, 0);
	else if (strcmp(name, "socket_netlink") == 0)
		rc = socket(AF_NETLINK, SOCK_RAW, 0);
	else if (strcmp(name, "socket_packet") == 0)
		rc = socket(AF_PACKET, SOCK_RAW, 0);
	else if (strcmp(name, "mprotect_exec") == 0)
		rc = mprotect((void *) ((uintptr_t) buf & ~(uintptr_t) 4095), 4096,
					  PROT_READ | PROT_WRITE | PROT_EXEC);
	else if (strcmp(name, "mmap_exec") == 0)
		rc = (long) mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	else if (strcmp(name, "ptrace") == 0)
		rc = syscall(SYS_ptrace, -1L, 0, 0, 0);	/* the number is what is refused */
	else if (strcmp(name, "kill") == 0)
		rc = kill(1, 0);
	else if (strcmp(name, "setuid") == 0)
		rc = syscall(SYS_setuid, 0);	/* glibc's setuid() would signal every thread first */
	else if (strcmp(name, "unshare") == 0)
		rc = unshare(CLONE_NEWNET);
#ifdef EGRESS_SANITIZE
	else if (strcmp(name, "asan_report") == 0)
	{
		/* not a call: a heap overflow, whose report must get out */
		char	   *p = malloc(8);
		volatile size_t n = 9;

		memset(p, 0, n);
		rc = p[0];
	}
	else if (strcmp(name, "lsan_report") == 0)
	{
		/* a leak: LeakSanitizer's check at exit must run and report it */
		void	   *volatile p = malloc(100);

		p = NULL;
		exit(p == NULL ? 0 : 1);
	}
#endif
	else
	{
		fprintf(stderr, "sandbox-egress: selftest: unknown call %s\n", name);
		_exit(2);
	}
	fprintf(stderr, "sandbox-egress: selftest: %s returned %ld (%s): not filtered\n",
			name, rc, rc < 0 ? strerror(errno) : "no error");
	_exit(3);
}

static void *
worker_main(void *arg)
{
	int			i = (int) (intptr_t) arg;

	if (i == 0 && selftest_syscall)
		selftest(selftest_syscall);

	while (!atomic_load(&stopping))
	{
		struct epoll_event ev;
		int			cfd;

		if (epoll_wait(workers[i].epfd, &ev, 1, -1) < 0)
		{
			if (errno != EINTR)
				(void) poll(NULL, 0, 10);
			continue;
		}
		if (atomic_load(&stopping))
			break;
		cfd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (cfd < 0)
		{
			/* taken by another waiter (EAGAIN), or gone before we took it */
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
				errno != ECONNABORTED)
				(void) poll(NULL, 0, 10);	/* never a hot loop on an error */
			continue;
		}
		worker_busy(true);
		conn_run(i, cfd);
		worker_busy(false);
	}
	return NULL;
}

/* Every worker busy: the main thread takes the connection and refuses it. */
static void
refuse_overflow(void)
{
	Conn	   *c = &overflow_conn;
	int			cfd = -1;

	pthread_mutex_lock(&lock);
	if (nidle == 0)
		cfd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	pthread_mutex_unlock(&lock);
	if (cfd < 0)
		return;					/* a worker is idle again: it takes it */
	conn_start(c, cfd);
	snprintf(c->host, sizeof(c->host), "(none)");
	refuse(c, 403, "too many connections at once (at most %d)", EGRESS_CONCURRENT);
	conn_log(c);
	close(cfd);
}

/*
 * One more worker, with its epoll set (the main thread's only: at start,
 * and while every worker is busy).  False when one cannot be made now; the
 * connection waiting for it is then refused like one beyond the limit.
 */
static bool
add_worker(void)
{
	int			i = nworkers;
	struct epoll_event lev = {.events = EPOLLIN | EPOLLEXCLUSIVE};
	struct epoll_event sev = {.events = EPOLLIN};
	pthread_attr_t attr;
	int			rc;

	if (i >= EGRESS_CONCURRENT)
		return false;
	if ((workers[i].epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return false;
	if (epoll_ctl(workers[i].epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0 ||
		epoll_ctl(workers[i].epfd, EPOLL_CTL_ADD, stop_efd, &sev) < 0)
	{
		close(workers[i].epfd);
		return false;
	}
	pthread_mutex_lock(&lock);
	nidle++;
	pthread_mutex_unlock(&lock);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rc = pthread_create(&workers[i].thread, &attr, worker_main, (void *) (intptr_t) i);
	pthread_attr_destroy(&attr);
	if (rc != 0)
	{
		pthread_mutex_lock(&lock);
		nidle--;
		pthread_mutex_unlock(&lock);
		close(workers[i].epfd);
		return false;
	}
	nworkers++;
	return true;
}

/* The first workers; dies when one cannot be made. */
static void
start_workers(void)
{
	if ((stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
		(busy_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		die("eventfd: %s", strerror(errno));
	/*
	 * Not waited for: a worker may start running under the filter (what
	 * glibc does in a new thread is allowed, as for the workers added
	 * later).
	 */
	for (int i = 0; i < EGRESS_WORKERS_START; i++)
		if (!add_worker())
			die("could not start a worker thread: %s", strerror(errno));
}

/* SIGTERM: every connection shut, the threads' log lines out, then the summary. */
static void
finish(void)
{
	char		line[512];
	struct timespec until;
	int			n;

	atomic_store(&stopping, true);
	(void) eventfd_write(stop_efd, 1);	/* the idle workers leave */
	pthread_mutex_lock(&lock);
	for (int i = 0; i < EGRESS_CONCURRENT; i++)
		if (active[i])
		{
			shutdown(active[i]->cfd, SHUT_RDWR);
			if (active[i]->ufd >= 0)
				shutdown(active[i]->ufd, SHUT_RDWR);
		}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	while (nactive > 0 &&
		   pthread_cond_timedwait(&idle, &lock, &until) == 0)
		;
	n = snprintf(line, sizeof(line),
				 "{\"attempts\":%llu,\"allowed\":%llu,\"denied\":%llu,\"bytes_up\":%llu,"
				 "\"bytes_down\":%llu,\"limit_hit\":%s,\"log_rows\":%llu,\"log_dropped\":%llu}\n",
				 (unsigned long long) n_attempts, (unsigned long long) n_allowed,
				 (unsigned long long) n_denied, (unsigned long long) bytes_up,
				 (unsigned long long) bytes_down, limit_hit ? "true" : "false",
				 (unsigned long long) n_log_rows, (unsigned long long) n_log_dropped);
	if (summary_fd >= 0)
		(void) write_all(summary_fd, line, n);
	pthread_mutex_unlock(&lock);
}

static int
listen_on(const char *spec)
{
	EgressResolver a;
	char		err[EGRESS_ERRLEN];
	int			fd,
				one = 1;

	if (egress_resolver_parse(spec, &a, err) < 0)
		die("invalid --listen %s", spec);
	fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		bind(fd, (struct sockaddr *) &a.ss, a.len) < 0 || listen(fd, 128) < 0)
		die("listen %s: %s", spec, strerror(errno));
	return fd;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: sandbox-egress (--policy FILE | --policy-fd N) (--listen-fd N | --listen ADDR:PORT)\n"
			"                      [--resolver ADDR[:PORT]] [--log-fd N] [--summary-fd N]\n"
			"                      [--selftest-syscall NAME]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"policy-fd", required_argument, NULL, 'P'},
		{"listen-fd", required_argument, NULL, 'l'},
		{"listen", required_argument, NULL, 'L'},
		{"resolver", required_argument, NULL, 'r'},
		{"log-fd", required_argument, NULL, 'g'},
		{"summary-fd", required_argument, NULL, 's'},
		{"selftest-syscall", required_argument, NULL, 'T'},
		{NULL, 0, NULL, 0}
	};
	int			policy_fd = -1;
	const char *policy_path = NULL,
			   *resolver_spec = NULL,
			   *listen_spec = NULL;
	int			lfd = -1,
				o,
				sfd;
	char		err[EGRESS_ERRLEN];
	sigset_t	mask;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1)
	{
		switch (o)
		{
			case 'p':
				policy_path = optarg;
				break;
			case 'P':
				policy_fd = atoi(optarg);
				break;
			case 'l':
				lfd = atoi(optarg);
				break;
			case 'L':
				listen_spec = optarg;
				break;
			case 'r':
				resolver_spec = optarg;
				break;
			case 'g':
				log_fd = atoi(optarg);
				break;
			case 's':
				summary_fd = atoi(optarg);
				break;
			case 'T':
				selftest_syscall = optarg;
				break;
			default:
				usage();
		}
	}
	if (optind != argc || (!policy_path) == (policy_fd < 0) || (lfd < 0) == (listen_spec == NULL))
		usage();
	if (egress_policy_load(policy_path, policy_fd, &policy, err) < 0)
		die("%s", err);
	if (policy_fd >= 0)
		close(policy_fd);
	if (resolver_spec ? egress_resolver_parse(resolver_spec, &resolver, err) < 0
		: egress_resolver_default(&resolver, err) < 0)
		die("%s", err);
	/* before the filter: getifaddrs needs a netlink socket */
	if (egress_own_addrs_load(err) < 0)
		die("%s", err);
	if (listen_spec)
		lfd = listen_on(listen_spec);
	listen_fd = lfd;
	if (fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK) < 0)
		die("listening socket: %s", strerror(errno));

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);	/* threads inherit it */
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0)
		die("signalfd: %s", strerror(errno));
	start_workers();
	if (egress_confine(err) < 0)
		die("%s", err);
	atomic_store(&confined, true);

	/* up: the jail waits for this line before the payload may start */
	if (summary_fd >= 0 && write_all(summary_fd, "ready\n", 6) < 0)
		die("summary fd: %s", strerror(errno));

	/*
	 * The main thread: the signals, and the listening socket only while
	 * every worker is busy (then a new connection gets a new worker, or,
	 * with EGRESS_CONCURRENT busy, a refusal at once).
	 */
	for (;;)
	{
		bool		all_busy;
		struct pollfd p[3];

		pthread_mutex_lock(&lock);
		all_busy = nidle == 0;
		pthread_mutex_unlock(&lock);
		p[0] = (struct pollfd) {.fd = sfd,.events = POLLIN};
		p[1] = (struct pollfd) {.fd = busy_efd,.events = POLLIN};
		p[2] = (struct pollfd) {.fd = all_busy ? lfd : -1,.events = POLLIN};
		if (poll(p, 3, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents)
			break;
		if (p[1].revents)
		{
			eventfd_t	v;

			(void) eventfd_read(busy_efd, &v);
		}
		if (p[2].revents & (POLLERR | POLLHUP | POLLNVAL))
			break;
		if ((p[2].revents & POLLIN) && !add_worker())
			refuse_overflow();
	}
	finish();
	close(lfd);
	return 0;
}
