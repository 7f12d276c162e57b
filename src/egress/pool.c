/*-------------------------------------------------------------------------
 *
 * pool.c
 *	  sandbox-egress: the worker threads.  Each accepts and serves one
 *	  connection at a time (the kernel hands a new connection to one idle
 *	  worker: one wake-up, no thread made per connection).
 *	  EGRESS_WORKERS_START are made at start; while every worker is busy the
 *	  main thread's loop (here too) adds one for a new connection, up to
 *	  EGRESS_CONCURRENT, and beyond that accepts and refuses at once.  On
 *	  SIGTERM every connection is shut and the summary written.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "proxy.h"

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

static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;
static Conn *active[EGRESS_CONCURRENT];	/* under proxy.lock: the connections being served */
static int	nactive;
static int	nworkers;			/* made so far (only the main thread makes them) */
static int	nidle;				/* workers waiting for a connection, under proxy.lock */

/* Count a worker busy or idle; tell the main thread when none is idle. */
static void
worker_busy(bool busy)
{
	bool		tell;
	uint64_t	one = 1;

	pthread_mutex_lock(&proxy.lock);
	nidle += busy ? -1 : 1;
	tell = busy ? nidle == 0 : nidle == 1;
	pthread_mutex_unlock(&proxy.lock);
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
	c->started = proxy_now_ms();
}

/* Serve worker i's connection cfd to its end, log it, close it. */
static void
conn_run(int i, int cfd)
{
	Conn	   *c = &conns[i];

	conn_start(c, cfd);
	pthread_mutex_lock(&proxy.lock);
	active[i] = c;
	nactive++;
	pthread_mutex_unlock(&proxy.lock);
	proxy_serve(c);
	proxy_conn_log(c);
	pthread_mutex_lock(&proxy.lock);
	active[i] = NULL;
	nactive--;
	close(c->cfd);
	if (c->ufd >= 0)
		close(c->ufd);
	pthread_cond_broadcast(&idle);
	pthread_mutex_unlock(&proxy.lock);
}

static void *
worker_main(void *arg)
{
	int			i = (int) (intptr_t) arg;

	if (i == 0 && proxy.selftest_syscall)
		proxy_selftest(proxy.selftest_syscall);

	while (!atomic_load(&proxy.stopping))
	{
		struct epoll_event ev;
		int			cfd;

		if (epoll_wait(workers[i].epfd, &ev, 1, -1) < 0)
		{
			if (errno != EINTR)
				(void) poll(NULL, 0, 10);
			continue;
		}
		if (atomic_load(&proxy.stopping))
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
	/* what OpenSSL keeps per thread (intercepted TLS): freed with it */
	OPENSSL_thread_stop();
	return NULL;
}

/* Every worker busy: the main thread takes the connection and refuses it. */
static void
refuse_overflow(void)
{
	Conn	   *c = &overflow_conn;
	int			cfd = -1;

	pthread_mutex_lock(&proxy.lock);
	if (nidle == 0)
		cfd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	pthread_mutex_unlock(&proxy.lock);
	if (cfd < 0)
		return;					/* a worker is idle again: it takes it */
	conn_start(c, cfd);
	snprintf(c->host, sizeof(c->host), "(none)");
	proxy_refuse(c, 403, "too many connections at once (at most %d)", EGRESS_CONCURRENT);
	proxy_conn_log(c);
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
	pthread_mutex_lock(&proxy.lock);
	nidle++;
	pthread_mutex_unlock(&proxy.lock);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	rc = pthread_create(&workers[i].thread, &attr, worker_main, (void *) (intptr_t) i);
	pthread_attr_destroy(&attr);
	if (rc != 0)
	{
		pthread_mutex_lock(&proxy.lock);
		nidle--;
		pthread_mutex_unlock(&proxy.lock);
		close(workers[i].epfd);
		return false;
	}
	nworkers++;
	return true;
}

/* The first workers, on the listening socket lfd; dies when one cannot be made. */
void
proxy_pool_start(int lfd)
{
	listen_fd = lfd;
	if ((stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
		(busy_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		proxy_die("eventfd: %s", strerror(errno));
	/*
	 * Not waited for: a worker may start running under the filter (what
	 * glibc does in a new thread is allowed, as for the workers added
	 * later).
	 */
	for (int i = 0; i < EGRESS_WORKERS_START; i++)
		if (!add_worker())
			proxy_die("could not start a worker thread: %s", strerror(errno));
}

/*
 * The main thread, until a signal on signal_fd or the end of the summary
 * pipe's reader: the listening socket only while every worker is busy
 * (then a new connection gets a new worker, or, with EGRESS_CONCURRENT
 * busy, a refusal at once).
 */
void
proxy_pool_serve(int signal_fd)
{
	for (;;)
	{
		bool		all_busy;
		struct pollfd p[4];

		pthread_mutex_lock(&proxy.lock);
		all_busy = nidle == 0;
		pthread_mutex_unlock(&proxy.lock);
		p[0] = (struct pollfd) {.fd = signal_fd,.events = POLLIN};
		p[1] = (struct pollfd) {.fd = busy_efd,.events = POLLIN};
		p[2] = (struct pollfd) {.fd = all_busy ? listen_fd : -1,.events = POLLIN};
		/*
		 * The summary pipe's reader is the run's jail (or a served run's
		 * worker, which is not our parent): once it is gone (POLLERR on
		 * our end) the run is over whatever happened to it, and so are we.
		 */
		p[3] = (struct pollfd) {.fd = proxy.summary_fd,.events = 0};
		if (poll(p, 4, -1) < 0)
		{
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[0].revents || (p[3].revents & (POLLERR | POLLHUP)))
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
}

/* SIGTERM: every connection shut, the threads' log lines out, then the summary. */
void
proxy_pool_stop(void)
{
	struct timespec until;

	atomic_store(&proxy.stopping, true);
	(void) eventfd_write(stop_efd, 1);	/* the idle workers leave */
	pthread_mutex_lock(&proxy.lock);
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
		   pthread_cond_timedwait(&idle, &proxy.lock, &until) == 0)
		;
	proxy_write_summary();
	pthread_mutex_unlock(&proxy.lock);
	/* the workers leave on the stop event: each frees its own state */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	for (int i = 0; i < nworkers; i++)
		(void) pthread_timedjoin_np(workers[i].thread, NULL, &until);
}
