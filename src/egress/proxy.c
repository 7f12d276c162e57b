/*-------------------------------------------------------------------------
 *
 * proxy.c
 *	  sandbox-egress: one run's enforcing proxy; this file is main and its
 *	  configuration.  The jail starts it on the host side with a listening
 *	  socket that lives in the sandbox's network namespace (127.0.0.1:3128
 *	  there), so the sandbox's only way out is this process, which runs where
 *	  the host's network is.
 *
 *	  sandbox-egress (--policy FILE | --policy-fd N) (--listen-fd N | --listen ADDR:PORT)
 *	                 [--resolver ADDR[:PORT]] [--log-fd N] [--summary-fd N]
 *	                 [--secrets-fd N --trust-fd N] [--selftest-syscall NAME]
 *
 * With --secrets-fd (docs/secrets.md) it reads the run's secrets, makes
 * the run's CA (ca.c) and a placeholder per secret, says them on the
 * summary fd before "ready" (secrets.c), and intercepts the TLS of the
 * hosts a secret goes to (intercept.c), checking those servers against
 * the CA bundle of --trust-fd.  The process is then not dumpable: its
 * memory holds the values and the CA's key.
 *
 * Once set up (policy read, socket, the first workers made) it confines
 * itself with its seccomp allowlist (confine.c), in every thread, and only
 * then says "ready".  --selftest-syscall (tests only: the jail never passes it)
 * makes a worker try one call the allowlist refuses after that, so a test
 * can see the filter kill the process.
 *
 * The workers (pool.c) each serve one connection at a time.  A worker
 * reads one request head within EGRESS_HEAD_TIMEOUT_MS (request.c), parsed
 * strictly as it arrives (head.c: a malformed head is refused at the byte
 * that makes it so), then:
 *	  CONNECT host:port		vet, resolve, vet the addresses, dial the vetted
 *							address (vet.c), answer 200, then require the
 *							first bytes to be a TLS ClientHello whose SNI is
 *							host (tunnel.c)
 *	  GET http://host/...	(absolute form) the same vetting, Host must be
 *							host, forwarded once with Connection: close,
 *							written anew from the parsed head (http.c)
 * A refusal is answered at once with a status line that says why
 * ("403 egress denied: example.org:443 is not in the allowlist").  Every
 * attempt is one JSON line on the log fd (log.c).  On the summary fd it
 * writes "ready" once it serves, and on SIGTERM (the run is over) it closes
 * every connection and writes one summary line there; when the summary's
 * reader is gone (the jail or worker that ran the sandbox ended: a served
 * run's proxy is its launcher's child, so no death signal tells it) it
 * stops the same way.  The run's caps
 * (connections in vet.c, bytes each way in tunnel.c) are counted in the
 * shared ProxyRun; reaching one closes the connection and flags the summary.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "proxy.h"

ProxyRun	proxy = {
	.log_fd = -1,
	.summary_fd = -1,
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The command line: what main reads before it sets anything up. */
typedef struct ProxyOptions
{
	const char *policy_path;
	int			policy_fd;
	const char *resolver_spec;
	const char *listen_spec;
	int			listen_fd;
	int			secrets_fd;
	int			trust_fd;
} ProxyOptions;

uint64_t
proxy_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
proxy_die(const char *fmt,...)
{
	va_list		ap;

	fputs("sandbox-egress: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

int
proxy_write_all(int fd, const void *buf, size_t len)
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

/*
 * --selftest-syscall: what a proxy taken over by the payload would try
 * first.  Each must kill the process (SIGSYS); if one returns, say so and
 * exit 3, which a test reports as a hole in the filter.
 */
void
proxy_selftest(const char *name)
{
	long		rc;
	char		buf[64];

	while (!atomic_load(&proxy.confined))
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

static int
listen_on(const char *spec)
{
	EgressResolver a;
	char		err[EGRESS_ERRLEN];
	int			fd,
				one = 1;

	if (egress_resolver_parse(spec, &a, err) < 0)
		proxy_die("invalid --listen %s", spec);
	fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		bind(fd, (struct sockaddr *) &a.ss, a.len) < 0 || listen(fd, 128) < 0)
		proxy_die("listen %s: %s", spec, strerror(errno));
	return fd;
}

static void
usage(void)
{
	fprintf(stderr,
			"usage: sandbox-egress (--policy FILE | --policy-fd N) (--listen-fd N | --listen ADDR:PORT)\n"
			"                      [--resolver ADDR[:PORT]] [--log-fd N] [--summary-fd N]\n"
			"                      [--secrets-fd N --trust-fd N] [--selftest-syscall NAME]\n");
	exit(2);
}

/* The options into o (and proxy's log and summary fds); usage() on bad ones. */
static void
parse_options(int argc, char **argv, ProxyOptions *o)
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
		{"secrets-fd", required_argument, NULL, 'S'},
		{"trust-fd", required_argument, NULL, 'C'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	*o = (ProxyOptions) {.policy_fd = -1,.listen_fd = -1,.secrets_fd = -1,.trust_fd = -1};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
	{
		switch (c)
		{
			case 'p':
				o->policy_path = optarg;
				break;
			case 'P':
				o->policy_fd = atoi(optarg);
				break;
			case 'l':
				o->listen_fd = atoi(optarg);
				break;
			case 'L':
				o->listen_spec = optarg;
				break;
			case 'r':
				o->resolver_spec = optarg;
				break;
			case 'g':
				proxy.log_fd = atoi(optarg);
				break;
			case 's':
				proxy.summary_fd = atoi(optarg);
				break;
			case 'T':
				proxy.selftest_syscall = optarg;
				break;
			case 'S':
				o->secrets_fd = atoi(optarg);
				break;
			case 'C':
				o->trust_fd = atoi(optarg);
				break;
			default:
				usage();
		}
	}
	if (optind != argc || (!o->policy_path) == (o->policy_fd < 0) ||
		(o->listen_fd < 0) == (o->listen_spec == NULL) ||
		(o->secrets_fd < 0) != (o->trust_fd < 0))
		usage();
}

/*
 * Everything read while the process may still open files and sockets: the
 * policy, the resolver, the host's own addresses, the listening socket
 * (returned, non-blocking).
 */
static int
set_up(const ProxyOptions *o)
{
	char		err[EGRESS_ERRLEN];
	int			lfd = o->listen_fd;

	if (egress_policy_load(o->policy_path, o->policy_fd, &proxy.policy, err) < 0)
		proxy_die("%s", err);
	if (o->policy_fd >= 0)
		close(o->policy_fd);
	if (o->secrets_fd >= 0)
	{
#ifndef EGRESS_SANITIZE
		/*
		 * Its memory holds the values and the CA's key: no core dump, no
		 * ptrace or /proc/PID/mem by another process of its user (the
		 * sanitizer build's leak check needs ptrace of itself).
		 */
		if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
			proxy_die("not dumpable: %s", strerror(errno));
#endif
		if (proxy_secrets_load(o->secrets_fd, err) < 0 || proxy_ca_init(o->trust_fd, err) < 0)
			proxy_die("%s", err);
	}
	if (o->resolver_spec ? egress_resolver_parse(o->resolver_spec, &proxy.resolver, err) < 0
		: egress_resolver_default(&proxy.resolver, err) < 0)
		proxy_die("%s", err);
	/* before the filter: getifaddrs needs a netlink socket */
	if (egress_own_addrs_load(err) < 0)
		proxy_die("%s", err);
	if (o->listen_spec)
		lfd = listen_on(o->listen_spec);
	if (fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK) < 0)
		proxy_die("listening socket: %s", strerror(errno));
	return lfd;
}

/* The signals that end the run, blocked in every thread, as a signalfd. */
static int
signals_to_fd(void)
{
	sigset_t	mask;
	int			sfd;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &mask, NULL);	/* threads inherit it */
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (sfd < 0)
		proxy_die("signalfd: %s", strerror(errno));
	return sfd;
}

int
main(int argc, char **argv)
{
	ProxyOptions o;
	char		err[EGRESS_ERRLEN];
	int			lfd,
				sfd;

	parse_options(argc, argv, &o);
	lfd = set_up(&o);
	sfd = signals_to_fd();
	proxy_pool_start(lfd);
	if (egress_confine(err) < 0)
		proxy_die("%s", err);
	atomic_store(&proxy.confined, true);

	/* with secrets, the placeholders and the CA's certificate first */
	if (proxy.nsecrets > 0 && proxy.summary_fd >= 0)
		proxy_secrets_announce(proxy.summary_fd);
	/* up: the jail waits for this line before the payload may start */
	if (proxy.summary_fd >= 0 && proxy_write_all(proxy.summary_fd, "ready\n", 6) < 0)
		proxy_die("summary fd: %s", strerror(errno));

	proxy_pool_serve(sfd);
	proxy_pool_stop();
	close(lfd);
	return 0;
}
