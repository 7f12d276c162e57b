/*-------------------------------------------------------------------------
 *
 * served-client.c
 *	  A resident caller of `sandbox-jail --serve`, for bench/jail/run.sh:
 *	  measures request -> verdict the way the PostgreSQL worker would see
 *	  it (no exec of a client per run).  Speaks the wire format of
 *	  docs/jail.md ("Resident launcher") by hand, so it needs nothing of
 *	  src/jail.
 *
 *	  served-client SOCKET LANGUAGE CODEFILE WORKSPACE [run options...]
 *	  served-client SOCKET /PATH - WORKSPACE [run options...]
 *
 * A LANGUAGE that starts with "/" is a raw exec (`--exec /PATH`): no code,
 * the code descriptor is an empty memfd.
 *
 * For every line read on stdin it runs the code once (payload output to
 * /dev/null) and prints the microseconds from connect to the verdict and
 * the verdict's status; EOF on stdin ends it.  One run per line lets the
 * benchmark interleave it with the other contenders.
 *
 * With SERVED_WARM=1 in the environment (a launcher started with
 * --warm-python/--warm-node), each run first waits, untimed, until the
 * launcher's page (SOCKET.warm, wire_protocol.h) counts a waiting
 * interpreter of LANGUAGE, takes it as a caller does
 * (jail_wire_warm_claim's compare-and-swap) and connects to
 * SOCKET.python or SOCKET.node: the time is then that of a warm run; a
 * verdict without "warm":true is reported as status "not-warm".  With
 * SERVED_SETTLE_POOL=1 (any LANGUAGE), each run first waits, untimed,
 * until every warm place of the launcher has its interpreter waiting
 * again and then SETTLE_US more (the cold pool's refill): the run before
 * it, whatever it was, is then on nobody's clock.  SERVED_SETTLE_ONLY=1
 * (with SERVED_SETTLE_POOL=1) only waits so, runs nothing and prints
 * "0 settled" per line.
 *
 * With "-- PROGRAM ARGS..." after the run options, each line also runs
 * that program bare (fork, execve, waitpid; output to /dev/null) from
 * this same small process and prints its microseconds as a third field:
 * bare exec as a resident caller would pay it, without the fork of a
 * big shell that the benchmark's own "bare" column includes.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SETTLE_US	40000		/* see the bare run below */

/* The page's layout, from the one definition of it (standalone header). */
#include "../../src/jail/wire_protocol.h"

/*
 * SERVED_WARM: wait (untimed, at most 120 s) for a waiting interpreter of
 * lang on the page, and take it.  false: none came.
 */
static bool
warm_claim(JailWarmPage *page, int lang)
{
	for (int i = 0; i < 120000; i++)
	{
		int32_t		n = __atomic_load_n(&page->ready[lang], __ATOMIC_ACQUIRE);

		while (n > 0)
			if (__atomic_compare_exchange_n(&page->ready[lang], &n, n - 1, false,
											__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return true;
		usleep(1000);
	}
	return false;
}

/* SERVED_SETTLE_POOL: the launcher idle again (at most 120 s), untimed. */
static void
warm_settle(JailWarmPage *page)
{
	for (int i = 0; i < 120000; i++)
	{
		bool		full = true;

		for (int l = 0; l < JAIL_WARM_NLANG; l++)
			if (__atomic_load_n(&page->ready[l], __ATOMIC_ACQUIRE) < page->configured[l])
				full = false;
		if (full)
			break;
		usleep(1000);
	}
	usleep(SETTLE_US);
}

static JailWarmPage *
warm_map(const char *sock)
{
	char		path[4096];
	int			fd;
	JailWarmPage *page;

	snprintf(path, sizeof(path), "%s%s", sock, JAIL_WARM_PAGE_SUFFIX);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
	{
		perror("served-client: the warm page");
		exit(2);
	}
	page = mmap(NULL, sizeof(JailWarmPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED)
	{
		perror("served-client: mmap the warm page");
		exit(2);
	}
	return page;
}

static size_t
put(char *buf, size_t off, const char *s)
{
	size_t		n = strlen(s) + 1;

	if (off + n > 65536)
	{
		fprintf(stderr, "served-client: request too large\n");
		exit(2);
	}
	memcpy(buf + off, s, n);
	return off + n;
}

int
main(int argc, char **argv)
{
	static char req[65536];
	static char resp[65537];
	struct sockaddr_un sa;
	char		line[64];
	char		data[65536];
	size_t		len = 0;
	ssize_t		n;
	int			codefd, memfd, devnull;
	bool		raw;
	char	  **bare = NULL;
	JailWarmPage *page = NULL;
	JailWarmPage *settle = NULL;
	int			warm_lang = -1;
	struct sockaddr_un warm_sa;

	if (argc < 5)
	{
		fprintf(stderr, "usage: served-client SOCKET LANGUAGE CODEFILE WORKSPACE [opts]\n");
		return 2;
	}
	raw = argv[2][0] == '/';
	codefd = raw ? open("/dev/null", O_RDONLY) : open(argv[3], O_RDONLY);
	memfd = memfd_create("code", MFD_CLOEXEC);
	devnull = open("/dev/null", O_RDWR);
	if (codefd < 0 || memfd < 0 || devnull < 0)
	{
		perror("served-client");
		return 2;
	}
	while ((n = read(codefd, data, sizeof(data))) > 0)
		if (write(memfd, data, n) != n)
			return 2;
	len = put(req, len, "sandbox-jail/1");
	len = put(req, len, raw ? "--exec" : "--language");
	len = put(req, len, argv[2]);
	len = put(req, len, "--workspace");
	len = put(req, len, argv[4]);
	for (int i = 5; i < argc; i++)
	{
		if (strcmp(argv[i], "--") == 0)
		{
			bare = argv + i + 1;
			break;
		}
		len = put(req, len, argv[i]);
	}

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
	if (getenv("SERVED_WARM") && strcmp(getenv("SERVED_WARM"), "1") == 0)
	{
		warm_lang = strcmp(argv[2], "python") == 0 ? JAIL_WARM_PYTHON :
			strcmp(argv[2], "node") == 0 ? JAIL_WARM_NODE : -1;
		if (warm_lang < 0)
		{
			fprintf(stderr, "served-client: SERVED_WARM needs python or node\n");
			return 2;
		}
		page = settle = warm_map(argv[1]);
		warm_sa = sa;
		snprintf(warm_sa.sun_path, sizeof(warm_sa.sun_path), "%s%s", argv[1],
				 JAIL_WARM_SOCK_SUFFIX[warm_lang]);
	}
	if (getenv("SERVED_SETTLE_POOL") && strcmp(getenv("SERVED_SETTLE_POOL"), "1") == 0 && !settle)
		settle = warm_map(argv[1]);

	while (fgets(line, sizeof(line), stdin))
	{
		struct timespec t0, t1;
		struct msghdr msg;
		struct iovec iov;
		union
		{
			char		buf[CMSG_SPACE(3 * sizeof(int))];
			struct cmsghdr align;
		}			ctl;
		struct cmsghdr *c;
		int			fds[3] = {memfd, devnull, devnull};
		int			s;
		const char *status = "?";
		long		cpu_ms;
		const struct sockaddr_un *to = &sa;

		if (settle)
			warm_settle(settle);
		if (settle && getenv("SERVED_SETTLE_ONLY") && strcmp(getenv("SERVED_SETTLE_ONLY"), "1") == 0)
		{
			printf("0 settled\n");
			fflush(stdout);
			continue;
		}
		if (page)
		{
			if (!warm_claim(page, warm_lang))
			{
				fprintf(stderr, "served-client: no warm interpreter within 120 s\n");
				return 1;
			}
			to = &warm_sa;
		}
		clock_gettime(CLOCK_MONOTONIC, &t0);
		s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (s < 0 || connect(s, (const struct sockaddr *) to, sizeof(*to)) < 0)
		{
			perror("served-client: connect");
			return 1;
		}
		memset(&msg, 0, sizeof(msg));
		iov.iov_base = req;
		iov.iov_len = len;
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(3 * sizeof(int));
		memcpy(CMSG_DATA(c), fds, sizeof(fds));
		if (sendmsg(s, &msg, 0) < 0)
		{
			perror("served-client: sendmsg");
			return 1;
		}
		n = recv(s, resp, sizeof(resp) - 1, 0);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		close(s);
		cpu_ms = -1;
		if (n > 0)
		{
			char	   *p;

			resp[n] = '\0';
			p = strstr(resp + strlen(resp) + 3, "\"cpu_ms\":");
			if (p)
				cpu_ms = atol(p + 9);
			/* a warm run that was not warm is not a sample of one */
			if (page && !strstr(resp + strlen(resp) + 3, "\"warm\":true"))
				p = NULL, status = "not-warm";
			else
				p = strstr(resp + strlen(resp) + 3, "\"status\":\"");
			if (p)
				status = p + 10;
			else if (strcmp(status, "not-warm") != 0)
				status = "no-verdict";
			if (p && strchr(status, '"'))
				*strchr((char *) status, '"') = '\0';
		}
		printf("%ld %s", (long) ((t1.tv_sec - t0.tv_sec) * 1000000 +
								 (t1.tv_nsec - t0.tv_nsec) / 1000), status);
		/* SERVED_PRINT_CPU=1: then the run's CPU time, ms (the verdict's) */
		if (getenv("SERVED_PRINT_CPU") && strcmp(getenv("SERVED_PRINT_CPU"), "1") == 0)
			printf(" %ld", cpu_ms);
		if (bare && bare[0])
		{
			static char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", NULL};
			pid_t		pid;

			/*
			 * The launcher replaces the worker that ran (a new worker,
			 * cgroup slot, network namespace and sandbox) right after
			 * the verdict; let that finish first, so that the bare run
			 * does not pay for it, then wake the CPUs from their idle
			 * sleep with an untimed run (run.sh does the same).
			 */
			if (!getenv("JAIL_BENCH_SETTLE") || strcmp(getenv("JAIL_BENCH_SETTLE"), "0") != 0)
				usleep(SETTLE_US);
			for (int warm = 0; warm < 2; warm++)
			{
				if (warm == 1)
					clock_gettime(CLOCK_MONOTONIC, &t0);
				pid = fork();
				if (pid == 0)
				{
					dup2(devnull, 0);
					dup2(devnull, 1);
					dup2(devnull, 2);
					execve(bare[0], bare, env);
					_exit(127);
				}
				waitpid(pid, NULL, 0);
			}
			clock_gettime(CLOCK_MONOTONIC, &t1);
			printf(" %ld", (long) ((t1.tv_sec - t0.tv_sec) * 1000000 +
								   (t1.tv_nsec - t0.tv_nsec) / 1000));
		}
		printf("\n");
		fflush(stdout);
	}
	return 0;
}
