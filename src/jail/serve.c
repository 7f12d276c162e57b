/*-------------------------------------------------------------------------
 *
 * serve.c
 *	  The resident launcher: `sandbox-jail --serve SOCKET`.  A long-lived
 *	  process that takes run requests over a Unix socket and answers each
 *	  with a verdict, so that a run no longer pays for exec'ing the jail,
 *	  compiling the filter, creating a network namespace or moving a
 *	  process into a cgroup: all of that is done ahead of time.
 *
 * Rooms and who may touch what:
 *	  launcher (this file)
 *			owns the listening socket and a pool of workers; never reads a
 *			request, never touches a payload.  For each worker it creates
 *			a fresh cgroup slot "srv-<launcher pid>-<serial>" under the
 *			cgroup parent, forks the worker, and when the worker exits
 *			removes the slot and forks a replacement (the refill happens
 *			after a run, off the next request's path).  It also starts the
 *			egress proxy of a worker's run, in the host's network
 *			namespace and its own cgroup, when the worker asks
 *			(egress.c, jail_egress_spawn): the one thing it reads from a
 *			worker, checked as if it came from anyone.
 *	  worker (worker.c: one per run, forked in advance)
 *			before any request: moves itself into its slot, unshares a
 *			fresh network namespace and clones the sandbox ahead.  Then it
 *			accepts ONE connection, validates the request and runs it with
 *			jail_run(), exactly as a one-shot jail would, except that the
 *			sandbox is born in the slot and in the worker's netns instead
 *			of creating its own.  It sends the verdict and exits; its
 *			netns and slot die with it.  It reads the launcher's state
 *			(JailLauncher, a copy by fork) and never writes it.
 *	  sandbox
 *			as in the one-shot mode (sandbox.c): its own user, pid, mount,
 *			ipc, uts and cgroup namespaces, every run.
 * So nothing is shared between two runs but the launcher itself: not a
 * namespace, not a cgroup, not a process (docs/security.md).
 *
 * Lifetime: the launcher dies with its parent (PR_SET_PDEATHSIG) unless
 * --keep-running; each worker dies with the launcher, each sandbox with
 * its worker, so killing the launcher kills every run.  SIGTERM, SIGINT,
 * SIGHUP or SIGQUIT to the launcher: SIGKILL to every worker, slots
 * removed, socket unlinked, exit 0.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

#define MAX_POOL		64

typedef struct ServeConfig
{
	const char *path;
	int			pool;
	const char *cgroup_parent;
	const char *image;			/* --image: every sandbox's root (image.c) */
	bool		require_cgroup;
	bool		keep_running;
	bool		quiet;
	int			warm[JAIL_WARM_NLANG];	/* --warm-python, --warm-node */
	const char *warm_modules;	/* --warm-modules */
	uint64_t	warm_memory;	/* --warm-memory: all warm slots together */
} ServeConfig;

typedef struct Worker
{
	pid_t		pid;			/* 0: empty place in the pool */
	bool		has_slot;
	JailCgroup	slot;
	int			warm;			/* JailWarmLang of a warm place, or -1 */
	int			page_index;		/* its entry in the warm page's held[] */
} Worker;

/* Pauses before a warm place is tried again after its interpreter failed. */
#define WARM_RETRY_FIRST_MS		1000
#define WARM_RETRY_MAX_MS		60000

/* Launcher state; a worker gets a copy by fork (launcher read-only). */
static ServeConfig cfg;
static JailLauncher launcher = {.netns_pool = true};
static Worker workers[MAX_POOL + JAIL_WARM_MAX];
static int	nworkers;			/* cfg.pool cold places, then the warm ones */
static JailOptions slot_defaults;
static JailOptions warm_slot_defaults;	/* a warm slot's limits while it waits */
static JailWarm warm_interp[JAIL_WARM_NLANG];
static int	warm_lfd[JAIL_WARM_NLANG] = {-1, -1};
static uint64_t warm_retry_at[JAIL_WARM_NLANG];	/* ms: not before */
static uint64_t warm_retry_ms[JAIL_WARM_NLANG];
static bool slots_enabled;
static unsigned long serial;
static int	spawner_fd = -1;		/* our end of launcher.egress_spawner's pair */

static int
parse_serve_args(int argc, char **argv)
{
	memset(&cfg, 0, sizeof(cfg));
	cfg.pool = 4;
	cfg.warm_modules = "numpy,pandas,requests";
	cfg.warm_memory = 1024ULL * 1024 * 1024;
	if (argc < 3 || argv[2][0] == '\0' || argv[2][0] == '-')
	{
		fprintf(stderr, "sandbox-jail: --serve needs a socket path\n");
		return -1;
	}
	cfg.path = argv[2];
	for (int i = 3; i < argc; i++)
	{
		const char *a = argv[i];

		if (strcmp(a, "--pool") == 0 && i + 1 < argc)
		{
			char	   *end;
			long		v = strtol(argv[++i], &end, 10);

			if (*end || v < 1 || v > MAX_POOL)
			{
				fprintf(stderr, "sandbox-jail: bad --pool \"%s\" (1..%d)\n", argv[i], MAX_POOL);
				return -1;
			}
			cfg.pool = (int) v;
		}
		else if ((strcmp(a, "--warm-python") == 0 || strcmp(a, "--warm-node") == 0) &&
				 i + 1 < argc)
		{
			char	   *end;
			long		v = strtol(argv[++i], &end, 10);

			if (*end || argv[i][0] == '\0' || v < 0 || v > JAIL_WARM_MAX)
			{
				fprintf(stderr, "sandbox-jail: bad %s \"%s\" (0..%d)\n", a, argv[i], JAIL_WARM_MAX);
				return -1;
			}
			cfg.warm[strcmp(a, "--warm-python") == 0 ? JAIL_WARM_PYTHON : JAIL_WARM_NODE] = (int) v;
		}
		else if (strcmp(a, "--warm-modules") == 0 && i + 1 < argc)
		{
			char		err[JAIL_ERRLEN];

			cfg.warm_modules = argv[++i];
			if (!jail_wire_check_modules(cfg.warm_modules, err, sizeof(err)))
			{
				fprintf(stderr, "sandbox-jail: --warm-modules: %s\n", err);
				return -1;
			}
		}
		else if (strcmp(a, "--warm-memory") == 0 && i + 1 < argc)
		{
			if (jail_parse_size(argv[++i], &cfg.warm_memory) < 0 ||
				cfg.warm_memory < 16ULL * 1024 * 1024)
			{
				fprintf(stderr, "sandbox-jail: bad --warm-memory \"%s\" (at least 16M)\n", argv[i]);
				return -1;
			}
		}
		else if (strcmp(a, "--cgroup-parent") == 0 && i + 1 < argc)
			cfg.cgroup_parent = argv[++i];
		else if (strcmp(a, "--image") == 0 && i + 1 < argc)
			cfg.image = argv[++i];
		else if (strcmp(a, "--require-cgroup") == 0)
			cfg.require_cgroup = true;
		else if (strcmp(a, "--keep-running") == 0)
			cfg.keep_running = true;
		else if (strcmp(a, "--quiet") == 0)
			cfg.quiet = true;
		else
		{
			fprintf(stderr, "sandbox-jail: unknown --serve option: %s\n", a);
			return -1;
		}
	}
	if (cfg.warm[JAIL_WARM_PYTHON] + cfg.warm[JAIL_WARM_NODE] > JAIL_WARM_MAX)
	{
		fprintf(stderr, "sandbox-jail: at most %d warm interpreters in all\n", JAIL_WARM_MAX);
		return -1;
	}
	if (strlen(cfg.path) >= sizeof(((struct sockaddr_un *) 0)->sun_path) - 16)
	{
		fprintf(stderr, "sandbox-jail: socket path too long: %s\n", cfg.path);
		return -1;
	}
	return 0;
}

/* -------------------------------------------------------------- launcher */

static void warm_reaped(Worker *w, int status);

/*
 * A warm place could not start (its interpreter, or its slot): it waits
 * before the next try, doubling up to WARM_RETRY_MAX_MS, so a bad setting
 * never becomes a fork loop.
 */
static void
warm_backoff(int lang)
{
	warm_retry_at[lang] = jail_now_ms() + warm_retry_ms[lang];
	warm_retry_ms[lang] = warm_retry_ms[lang] * 2 > WARM_RETRY_MAX_MS ?
		WARM_RETRY_MAX_MS : warm_retry_ms[lang] * 2;
}

/* A warm place without a cgroup slot: why, on the page, and wait. */
static void
warm_no_slot(int lang, const char *why)
{
	char		msg[JAIL_ERRLEN + 80];

	snprintf(msg, sizeof(msg), "not started without a cgroup slot (its memory would be unbounded): %s",
			 why[0] ? why : "no slots");
	if (launcher.warm_page)
	{
		char	   *dst = launcher.warm_page->problem[lang];
		size_t		n = strnlen(msg, sizeof(launcher.warm_page->problem[0]) - 1);

		memcpy(dst, msg, n);
		dst[n] = '\0';
	}
	warm_backoff(lang);
}

static void
spawn_worker(int lfd, int sigfd, Worker *w)
{
	char		name[64];
	char		err[JAIL_ERRLEN] = "";
	int			kind = w->warm;
	int			page_index = w->page_index;
	const JailOptions *defaults = kind >= 0 ? &warm_slot_defaults : &slot_defaults;

	memset(w, 0, sizeof(*w));
	w->warm = kind;
	w->page_index = page_index;
	w->slot.v2_dirfd = -1;
	if (kind >= 0)
		lfd = warm_lfd[kind];

	/*
	 * Tried even when the launcher started without slots: the delegated
	 * subtree may appear later (on a systemd host it is made by the
	 * service's ExecStartPost, which may run after the launcher started;
	 * jail-host-setup.sh).  Off the run's path: this is the refill.
	 */
	snprintf(name, sizeof(name), "srv-%d-%lu", (int) launcher.pid, serial++);
	if (jail_cgroup_create_named(defaults, name, &w->slot, err) == 0)
	{
		w->has_slot = true;
		if (!slots_enabled)
			jail_warn("cgroup slots are available now (%s)", w->slot.mode == CGROUP_V2 ?
					  w->slot.v2_dir : w->slot.mem_dir);
		slots_enabled = true;
	}
	else
	{
		if (slots_enabled)
			jail_warn("could not create a cgroup slot: %s", err);
		jail_cgroup_destroy(&w->slot);
	}

	/*
	 * A warm interpreter holds its memory before any request: without a
	 * slot nothing would bound it (nor count it on the page), so a warm
	 * place without one is not started; it is tried again later, as a
	 * start that failed, and runs are served cold meanwhile.
	 */
	if (kind >= 0 && !w->has_slot)
	{
		warm_no_slot(kind, err);
		return;
	}
	/* what its sandboxes' roots hide, as of now (globbed only on a change) */
	jail_installers_refresh();
	w->pid = fork();
	if (w->pid == 0)
	{
		/* the worker: never back into the launcher's loop */
		close(sigfd);
		close(spawner_fd);		/* the launcher's to read, not a worker's */
		_exit(jail_worker_main(&launcher, lfd, w->has_slot ? &w->slot : NULL,
							   kind >= 0 ? &warm_interp[kind] : NULL, page_index));
	}
	if (w->pid < 0)
	{
		jail_warn("fork worker: %s", strerror(errno));
		w->pid = 0;
		if (w->has_slot)
			jail_cgroup_destroy(&w->slot);
		w->has_slot = false;
	}
}

static void
reap_workers(void)
{
	int			status;
	pid_t		pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		for (int i = 0; i < nworkers; i++)
		{
			if (workers[i].pid != pid)
				continue;
			if (workers[i].warm >= 0)
				warm_reaped(&workers[i], status);
			workers[i].pid = 0;
			if (workers[i].has_slot)
				jail_cgroup_destroy(&workers[i].slot);
			workers[i].has_slot = false;
			if (WIFEXITED(status) && WEXITSTATUS(status) == JAIL_WORKER_PREP_FAILED &&
				launcher.netns_pool)
			{
				jail_warn("network namespace pool disabled: a worker could not prepare one");
				launcher.netns_pool = false;
			}
		}
	}
}

/*
 * A warm worker ended.  If it was still waiting (killed: it never cleared
 * its page entry), its entry and its count on ready[] go.  If its
 * interpreter did not start, the place waits before the next try,
 * doubling up to WARM_RETRY_MAX_MS: a module that fails to import must
 * not become a fork loop.
 */
static void
warm_reaped(Worker *w, int status)
{
	int			lang = w->warm;

	if (launcher.warm_page && w->page_index >= 0 &&
		__atomic_load_n(&launcher.warm_page->held[w->page_index].pid, __ATOMIC_ACQUIRE) == w->pid)
	{
		/* it died waiting (killed): its count goes with it */
		__atomic_store_n(&launcher.warm_page->held[w->page_index].pid, 0, __ATOMIC_RELEASE);
		jail_wire_warm_post(launcher.warm_page, (JailWarmLang) lang, -1);
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == JAIL_WORKER_WARM_FAILED)
		warm_backoff(lang);
	else
		warm_retry_ms[lang] = WARM_RETRY_FIRST_MS;
}

/* Bind under a temporary name, then rename: the path appears listening. */
static int
open_socket(const char *path, char *err)
{
	struct sockaddr_un sa;
	struct stat st;
	mode_t		old;
	int			fd;

	if (lstat(path, &st) == 0)
	{
		jail_seterr(err, "%s already exists (remove a stale socket first)", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
	{
		jail_seterr(err, "socket: %s", strerror(errno));
		return -1;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.%d", path, (int) getpid());
	unlink(sa.sun_path);
	old = umask(0077);
	if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
	{
		jail_seterr(err, "bind %s: %s", sa.sun_path, strerror(errno));
		umask(old);
		close(fd);
		return -1;
	}
	umask(old);
	if (chmod(sa.sun_path, 0600) < 0 || listen(fd, 128) < 0 ||
		rename(sa.sun_path, path) < 0)
	{
		jail_seterr(err, "listen on %s: %s", path, strerror(errno));
		unlink(sa.sun_path);
		close(fd);
		return -1;
	}
	return fd;
}

/* SOCKET plus a suffix (the warm sockets, the page); fits: see parse_serve_args */
static const char *
path_with(const char *suffix)
{
	static char buf[4][sizeof(((struct sockaddr_un *) 0)->sun_path)];
	static int	next;
	char	   *p = buf[next++ % 4];

	snprintf(p, sizeof(buf[0]), "%s%s", cfg.path, suffix);
	return p;
}

static void
unlink_paths(void)
{
	unlink(cfg.path);
	for (int l = 0; l < JAIL_WARM_NLANG; l++)
		if (warm_lfd[l] >= 0)
			unlink(path_with(JAIL_WARM_SOCK_SUFFIX[l]));
	if (launcher.warm_page)
		unlink(path_with(JAIL_WARM_PAGE_SUFFIX));
}

/*
 * The warm pool (--warm-python, --warm-node): its interpreters, a
 * socket per language, the page callers read (wire_protocol.h), and the
 * limits of a warm slot: together they hold at most --warm-memory.
 */
static int
warm_setup(char *err)
{
	int			total = cfg.warm[JAIL_WARM_PYTHON] + cfg.warm[JAIL_WARM_NODE];
	struct stat st;
	int			fd;

	/* another launcher's (open_socket says the same): touch nothing of it */
	if (lstat(cfg.path, &st) == 0)
	{
		jail_seterr(err, "%s already exists (remove a stale socket first)", cfg.path);
		return -1;
	}

	nworkers = cfg.pool;
	for (int i = 0; i < cfg.pool; i++)
		workers[i].warm = workers[i].page_index = -1;
	if (total == 0)
		return 0;

	for (int l = 0; l < JAIL_WARM_NLANG; l++)
	{
		warm_interp[l].language = l == JAIL_WARM_PYTHON ? LANG_PYTHON : LANG_NODE;
		warm_interp[l].lang = (JailWarmLang) l;
		snprintf(warm_interp[l].modules, sizeof(warm_interp[l].modules), "%s",
				 l == JAIL_WARM_PYTHON ? cfg.warm_modules : "");
		warm_interp[l].memory = cfg.warm_memory / total;
		warm_retry_ms[l] = WARM_RETRY_FIRST_MS;
		for (int i = 0; i < cfg.warm[l]; i++)
		{
			workers[nworkers].warm = l;
			workers[nworkers].page_index = nworkers - cfg.pool;
			nworkers++;
		}
	}
	warm_slot_defaults = slot_defaults;
	warm_slot_defaults.memory_bytes = cfg.warm_memory / total;

	/* a launcher SIGKILLed on this path left these: ours to replace */
	unlink(path_with(JAIL_WARM_PAGE_SUFFIX));
	fd = open(path_with(JAIL_WARM_PAGE_SUFFIX), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, sizeof(JailWarmPage)) < 0)
	{
		jail_seterr(err, "create %s: %s", path_with(JAIL_WARM_PAGE_SUFFIX), strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	launcher.warm_page = mmap(NULL, sizeof(JailWarmPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (launcher.warm_page == MAP_FAILED)
	{
		launcher.warm_page = NULL;
		jail_seterr(err, "map the warm page: %s", strerror(errno));
		return -1;
	}
	for (int l = 0; l < JAIL_WARM_NLANG; l++)
		launcher.warm_page->configured[l] = cfg.warm[l];
	launcher.warm_page->limit_bytes = cfg.warm_memory;

	for (int l = 0; l < JAIL_WARM_NLANG; l++)
	{
		if (cfg.warm[l] == 0)
			continue;
		unlink(path_with(JAIL_WARM_SOCK_SUFFIX[l]));
		warm_lfd[l] = open_socket(path_with(JAIL_WARM_SOCK_SUFFIX[l]), err);
		if (warm_lfd[l] < 0)
			return -1;
	}
	/* last: a caller that sees the magic may use the page */
	memcpy(launcher.warm_page->magic, JAIL_WARM_PAGE_MAGIC, sizeof(JAIL_WARM_PAGE_MAGIC));
	return 0;
}

static void
shutdown_pool(void)
{
	for (int i = 0; i < nworkers; i++)
		if (workers[i].pid > 0)
			kill(workers[i].pid, SIGKILL);
	for (int i = 0; i < nworkers; i++)
	{
		if (workers[i].pid > 0)
			waitpid(workers[i].pid, NULL, 0);
		workers[i].pid = 0;
		if (workers[i].has_slot)
			jail_cgroup_destroy(&workers[i].slot);
		workers[i].has_slot = false;
	}
}

/*
 * What every worker is forked with: the slot defaults, both compiled
 * filters, the shared owner hint; and one trial slot, which decides
 * whether runs get cgroups at all.  -1 with err: the launcher cannot run.
 */
static int
launcher_setup(char *err)
{
	char	   *dargv[] = {"sandbox-jail", "--language", "shell", "--workspace", "/", NULL};
	JailCgroup	probe;
	char		name[64];

	if (geteuid() == 0 && setgroups(0, NULL) < 0)
	{
		jail_seterr(err, "setgroups: %s", strerror(errno));
		return -1;
	}
	/* the image every sandbox of ours is built on, checked once */
	if (cfg.image && jail_image_set(cfg.image, err) < 0)
		return -1;

	/* The defaults a slot is created with; each run sets its own. */
	if (jail_parse_options(5, dargv, &slot_defaults, false) < 0)
	{
		jail_seterr(err, "slot defaults: %s", jail_option_error);
		return -1;
	}
	slot_defaults.cgroup_parent = cfg.cgroup_parent;
	slot_defaults.pids += 1;	/* the worker that sits in the slot */

	if (jail_filter_get(&launcher.filter, FILTER_PAYLOAD, err) < 0 ||
		jail_filter_get(&launcher.init_filter, FILTER_INIT, err) < 0)
		return -1;

	/* the pair on which workers ask us for their runs' egress proxies */
	{
		int			sv[2];

		if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		{
			jail_seterr(err, "socketpair: %s", strerror(errno));
			return -1;
		}
		spawner_fd = sv[0];
		launcher.egress_spawner = sv[1];
	}

	/*
	 * {uid, gid} of the last run's outer ids, in a page shared by the
	 * launcher and its workers: root's workers map their prespawned sandbox
	 * to these (see jail_prespawn), the run that follows checks and writes
	 * them.  Only ever a guess: a wrong one costs a fresh clone, never a
	 * wrong mapping.
	 */
	launcher.owner_hint = mmap(NULL, 2 * sizeof(uint32_t), PROT_READ | PROT_WRITE,
							   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (launcher.owner_hint == MAP_FAILED)
		launcher.owner_hint = NULL; /* root's runs then always guess nobody */

	snprintf(name, sizeof(name), "srv-%d-probe", (int) launcher.pid);
	slots_enabled = jail_cgroup_create_named(&slot_defaults, name, &probe, err) == 0;
	jail_cgroup_destroy(&probe);
	if (!slots_enabled)
	{
		if (cfg.require_cgroup)
			return -1;
		jail_warn("no cgroup slots (%s): runs use their own cgroup or rlimits", err);
		err[0] = '\0';
	}
	return 0;
}

/*
 * Keep the pool full until asked to stop: refill each place a worker
 * left, reap workers, and on a stop signal kill them all.  The exit code.
 */
static int
launcher_loop(int lfd, int sigfd)
{
	for (;;)
	{
		struct pollfd pfd[2] = {{.fd = sigfd,.events = POLLIN},
		{.fd = spawner_fd,.events = POLLIN}};
		struct signalfd_siginfo si;
		int			timeout = -1;
		uint64_t	now = jail_now_ms();

		/*
		 * refill: a worker that ran has exited, its place is empty (the
		 * cold places first: they are the ones a run may wait for)
		 */
		for (int i = 0; i < nworkers; i++)
			if (workers[i].pid == 0 &&
				(workers[i].warm < 0 || now >= warm_retry_at[workers[i].warm]))
				spawn_worker(lfd, sigfd, &workers[i]);
		for (int i = 0; i < nworkers; i++)
		{
			int			t = 200;

			if (workers[i].pid != 0)
				continue;
			if (workers[i].warm >= 0 && warm_retry_at[workers[i].warm] > now)
				t = (int) (warm_retry_at[workers[i].warm] - now);
			if (timeout < 0 || t < timeout)
				timeout = t;
		}

		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			break;
		/* a worker's egress proxy (egress.c): answered at once */
		if (pfd[1].revents & POLLIN)
			jail_egress_spawn(spawner_fd);
		while (read(sigfd, &si, sizeof(si)) == sizeof(si))
		{
			if (si.ssi_signo != SIGCHLD)
			{
				/* asked to stop: finish the clean-up even if our parent
				 * goes away meanwhile (its death signal would cut it) */
				prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
				shutdown_pool();
				unlink_paths();
#ifdef JAIL_TIMING
				jail_trace_dump();
#endif
				return JAIL_EXIT_OK;
			}
		}
		reap_workers();
	}
	shutdown_pool();
	unlink_paths();
	return JAIL_EXIT_SETUP;
}

/* `sandbox-jail --serve SOCKET ...`: the exit code, for main. */
int
jail_serve_main(int argc, char **argv)
{
	char		err[JAIL_ERRLEN] = "";
	int			sigfd;
	int			lfd;

	if (parse_serve_args(argc, argv) < 0)
	{
		jail_usage(stderr);
		return JAIL_EXIT_USAGE;
	}
	jail_quiet = cfg.quiet;
	launcher.pid = getpid();
#ifdef JAIL_TIMING
	jail_trace_init();
#endif
	launcher.uid = geteuid();
	launcher.cgroup_parent = cfg.cgroup_parent;
	launcher.quiet = cfg.quiet;
	if (!cfg.keep_running && jail_die_with_parent() < 0)
		return JAIL_EXIT_SETUP;
	signal(SIGPIPE, SIG_IGN);
	if (launcher_setup(err) < 0 ||
		(sigfd = jail_stop_signals(SIGCHLD, err)) < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", err);
		return JAIL_EXIT_SETUP;
	}
	/* the warm page and sockets first: once SOCKET listens, they are there */
	if (warm_setup(err) < 0 || (lfd = open_socket(cfg.path, err)) < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", err);
		if (strstr(err, "already exists") == NULL)
			unlink_paths();
		return JAIL_EXIT_SETUP;
	}
	return launcher_loop(lfd, sigfd);
}
