/*-------------------------------------------------------------------------
 *
 * run.c
 *	  The host side of one run: build the filter and cgroup, create the
 *	  namespaced child, map its ids, then pump its output, watch the
 *	  clocks and signals (monitor), and collect the facts for the verdict.
 *
 * Two kinds of failure are kept apart (the billing rule depends on it):
 * the sandbox could not be built (setup_error: any text on the child's
 * err pipe, or a failed host step) versus the program failed (a verdict
 * with an exit code or signal).  Only main.c turns these into exit codes.
 *
 * The loop never blocks on anything the payload or the caller controls:
 * output is read only when our buffer for that stream is empty (so a
 * caller that stops reading stalls the payload, not the clocks) and
 * written in chunks of at most PIPE_BUF after POLLOUT, which cannot block.
 * Beyond the output cap, data is still read (the payload is told nothing
 * and never stalls on a full pipe) but discarded.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/sched.h>

#include "jail.h"

#define STREAM_BUF			65536
#define CPU_POLL_MS			100
#define WORKSPACE_POLL_MS	500
#define FLUSH_GRACE_MS		2000

typedef struct Stream
{
	int			in;				/* read end of the payload's pipe */
	int			out;			/* our stdout or stderr */
	size_t		off;
	size_t		len;
	uint64_t	produced;		/* everything the payload wrote */
	uint64_t	forwarded;		/* accepted for delivery (<= cap) */
	bool		eof;
	bool		out_dead;		/* our reader went away: discard */
	char		buf[STREAM_BUF];	/* last: not cleared per run */
} Stream;

/*
 * The two streams of the (one) run of this process.  Static, and only the
 * fields before buf are cleared: a calloc of 128 KiB costs a memset and
 * ~30 page faults (~60 us) before every run, for output that a short run
 * never has.
 */
static Stream stream_store[2];

typedef struct JailRun
{
	const JailOptions *opts;
	JailResult *res;
	JailCgroup	cg;
	pid_t		pid;			/* the sandbox's init, seen from here */
	int			pidfd;
	bool		reaped;
	uint64_t	reaped_at;		/* ms, for wall_ms (not the flush) */
	int			wstatus;		/* of init */
	struct rusage ru;
	bool		kill_sent;
	int			wsfd;			/* workspace, O_PATH, for size checks */
	bool		over_workspace;
	bool		cg_borrowed;	/* the launcher's slot: not ours to remove */
	int			cancel_fd;		/* the launcher's client: EOF = stop */
	int			statfd;			/* init's report (JailInitReport), or -1 */
	bool		have_report;
	JailInitReport rep;
	bool		defer_reap;		/* the run may end on init's report alone */
	bool		init_pending;	/* ended so: init to be reaped after the
								 * verdict (jail_run_reap) */
} JailRun;

/* An init that reported itself alone, reaped by jail_run_reap(). */
static pid_t pending_init = -1;

static void
kill_sandbox(JailRun *run)
{
	/*
	 * SIGKILL to the pid namespace's init makes the kernel kill every
	 * process in the namespace (also ones that ignore SIGTERM, double
	 * forked or called setsid); on v2 cgroup.kill does the same for the
	 * cgroup, but never for a launcher's slot, which holds this worker
	 * too.  Sent through the pidfd so a recycled pid is never hit.
	 */
	if (!run->reaped && !run->kill_sent)
	{
		if (syscall(SYS_pidfd_send_signal, run->pidfd, SIGKILL, NULL, 0) < 0)
			kill(run->pid, SIGKILL);
		if (!run->cg_borrowed)
			jail_cgroup_kill(&run->cg);
		run->kill_sent = true;
	}
}

static void
stream_read(Stream *s, uint64_t cap, JailResult *res)
{
	char		discard[STREAM_BUF];
	ssize_t		n;

	/* only when the buffer is empty: that is our backpressure */
	n = read(s->in, s->len == 0 ? s->buf : discard, STREAM_BUF);
	if (n < 0)
	{
		if (errno == EINTR || errno == EAGAIN)
			return;
		n = 0;
	}
	if (n == 0)
	{
		s->eof = true;
		return;
	}
	s->produced += n;
	if (s->forwarded < cap && !s->out_dead && s->len == 0)
	{
		size_t		keep = (uint64_t) n < cap - s->forwarded ? (size_t) n : cap - s->forwarded;

		if (keep < (size_t) n)
			res->output_truncated = true;
		s->forwarded += keep;
		s->off = 0;
		s->len = keep;
	}
	else
		res->output_truncated = true;	/* over the cap, or nobody reads */
}

static void
stream_write(Stream *s)
{
	size_t		chunk = s->len - s->off;
	ssize_t		n;

	if (chunk > PIPE_BUF)
		chunk = PIPE_BUF;
	n = write(s->out, s->buf + s->off, chunk);
	if (n < 0)
	{
		if (errno == EINTR || errno == EAGAIN)
			return;
		/* EPIPE and friends: nobody is listening; keep draining */
		s->out_dead = true;
		s->off = s->len = 0;
		return;
	}
	s->off += n;
	if (s->off == s->len)
		s->off = s->len = 0;
}

static void
check_cpu(JailRun *run)
{
	uint64_t	used = jail_cgroup_cpu_ms(&run->cg);

	if (used >= run->opts->cpu_ms && !run->reaped)
	{
		run->res->timed_out = true;
		kill_sandbox(run);
	}
}

static void
check_workspace(JailRun *run)
{
	uint64_t	total = 0;
	bool		big = false;

	if (run->wsfd < 0 || run->opts->workspace_size == 0)
		return;
	if (jail_workspace_usage(run->wsfd, 0, run->opts->workspace_entries, &total, &big) < 0 ||
		total > run->opts->workspace_size)
	{
		run->over_workspace = true;
		kill_sandbox(run);
	}
}

/* Pump output and watch clocks until init is reaped and pipes are dry. */
static void
monitor(JailRun *run, Stream *streams, int errfd, int sigfd,
		  uint64_t start, char *setup_err, size_t *setup_err_len)
{
	const JailOptions *opts = run->opts;
	JailResult *res = run->res;
	uint64_t	deadline = start + opts->wall_ms;
	uint64_t	next_cpu = start + CPU_POLL_MS;
	uint64_t	next_ws = start + WORKSPACE_POLL_MS;
	uint64_t	flush_deadline = 0;
	bool		watch_cpu = jail_cgroup_cpu_ms(&run->cg) != 0 ||
		run->cg.mode == CGROUP_V2 || run->cg.cpu_dir[0];

	for (;;)
	{
		struct pollfd pfd[8];
		int			idx[8];
		int			n = 0;
		uint64_t	now = jail_now_ms();
		int			timeout;
		uint64_t	wake;

		if (!run->reaped && now >= deadline && !run->kill_sent)
		{
			res->timed_out = true;
			kill_sandbox(run);
		}
		if (!run->reaped && watch_cpu && now >= next_cpu)
		{
			check_cpu(run);
			next_cpu = now + CPU_POLL_MS;
		}
		if (!run->reaped && now >= next_ws)
		{
			check_workspace(run);
			next_ws = now + WORKSPACE_POLL_MS;
		}

		if (run->reaped)
		{
			bool		done = errfd < 0;

			for (int i = 0; i < 2; i++)
				if (!streams[i].eof || streams[i].len > 0)
					done = false;
			if (done)
				break;
			if (flush_deadline == 0)
				flush_deadline = now + FLUSH_GRACE_MS;
			else if (now >= flush_deadline)
				break;			/* a caller that never reads: give up */
		}

		if (!run->reaped)
		{
			pfd[n].fd = run->pidfd;
			pfd[n].events = POLLIN;
			idx[n++] = 0;
		}
		for (int i = 0; i < 2; i++)
		{
			Stream	   *s = &streams[i];

			if (s->len > 0)
			{
				pfd[n].fd = s->out;
				pfd[n].events = POLLOUT;
				idx[n++] = 10 + i;
			}
			else if (!s->eof)
			{
				pfd[n].fd = s->in;
				pfd[n].events = POLLIN;
				idx[n++] = 20 + i;
			}
		}
		if (errfd >= 0)
		{
			pfd[n].fd = errfd;
			pfd[n].events = POLLIN;
			idx[n++] = 1;
		}
		pfd[n].fd = sigfd;
		pfd[n].events = POLLIN;
		idx[n++] = 2;
		if (run->cancel_fd >= 0 && !run->reaped)
		{
			pfd[n].fd = run->cancel_fd;
			pfd[n].events = POLLIN | POLLRDHUP;
			idx[n++] = 3;
		}
		if (run->defer_reap && run->statfd >= 0 && !run->have_report && !run->reaped)
		{
			pfd[n].fd = run->statfd;
			pfd[n].events = POLLIN;
			idx[n++] = 4;
		}

		wake = run->reaped ? flush_deadline : deadline;
		if (!run->reaped && watch_cpu && next_cpu < wake)
			wake = next_cpu;
		if (!run->reaped && opts->workspace_size && next_ws < wake)
			wake = next_ws;
		if (run->kill_sent && !run->reaped)
			wake = now + 1000;	/* kill sent: just wait for the reap */
		timeout = wake > now ? (int) (wake - now) : 0;

		if (poll(pfd, n, timeout) < 0)
		{
			if (errno == EINTR)
				continue;
			jail_warn("poll: %s", strerror(errno));
			kill_sandbox(run);
			break;
		}
		for (int i = 0; i < n; i++)
		{
			if (!pfd[i].revents)
				continue;
			switch (idx[i])
			{
				case 0:
					if (waitpid(run->pid, &run->wstatus, WNOHANG) == run->pid)
					{
						/* wait4 semantics via getrusage of children */
						getrusage(RUSAGE_CHILDREN, &run->ru);
						JAIL_TRACE("init reaped");
						run->reaped = true;
						run->reaped_at = jail_now_ms();
					}
					break;
				case 1:
					{
						ssize_t		r = read(errfd, setup_err + *setup_err_len,
											 JAIL_ERRLEN - 1 - *setup_err_len);

						if (r > 0)
							*setup_err_len += r;
						else if (r == 0 || (errno != EINTR && errno != EAGAIN))
							jail_close(&errfd);
						if (*setup_err_len >= JAIL_ERRLEN - 1)
							jail_close(&errfd);
						break;
					}
				case 2:
					{
						struct signalfd_siginfo si;

						if (read(sigfd, &si, sizeof(si)) == sizeof(si))
						{
							res->killed = true;
							kill_sandbox(run);
						}
						break;
					}
				case 3:
					/*
					 * The launcher's client hung up or asked to stop
					 * (nothing else is ever sent mid-run): like SIGTERM
					 * to a one-shot jail.
					 */
					res->killed = true;
					kill_sandbox(run);
					run->cancel_fd = -1;
					break;
				case 4:
					{
						/*
						 * Init reaped the payload.  If it found itself
						 * alone, nothing of the run is left to outlive
						 * the verdict: the run ends now, and init (which
						 * waits for it, or is exiting) is killed and
						 * reaped after the verdict.
						 */
						ssize_t		r = read(run->statfd, &run->rep, sizeof(run->rep));

						if (r == sizeof(run->rep))
						{
							run->have_report = true;
							JAIL_TRACE("init report read");
							if (run->rep.alone && run->defer_reap)
							{
								run->reaped = true;
								run->init_pending = true;
								run->reaped_at = jail_now_ms();
							}
							else if (run->rep.lingering)
								kill_sandbox(run);	/* we wait for its exit */
						}
						else if (r >= 0 || (errno != EINTR && errno != EAGAIN))
							run->statfd = -1;	/* init is gone: wait for the reap */
						break;
					}
				case 10:
				case 11:
					stream_write(&streams[idx[i] - 10]);
					break;
				case 20:
				case 21:
					stream_read(&streams[idx[i] - 20], opts->output_limit, res);
					break;
			}
		}
	}
	jail_close(&errfd);
}

/*
 * A go byte could not be sent because the sandbox already gave up: its
 * own reason (on the error pipe, whose write ends are all closed once it
 * is reaped, so this cannot block) says more than our EPIPE.
 */
static void
take_child_error(int fd, char *err)
{
	char		buf[JAIL_ERRLEN];
	ssize_t		n = read(fd, buf, sizeof(buf) - 1);

	if (n > 0)
	{
		buf[n] = '\0';
		snprintf(err, JAIL_ERRLEN, "%s", buf);
	}
}

/*
 * What the workspace holds before the run: over the total limit already
 * is the caller's problem (a setup error, not the payload's fault), and a
 * file already at the size limit must not be blamed on the payload
 * afterwards.  Done while the sandbox builds its root, before it may fork
 * the payload.
 */
static int
measure_workspace(const JailRun *run, bool *big_before, char *err)
{
	const JailOptions *opts = run->opts;
	uint64_t	total = 0;

	if (jail_workspace_usage(run->wsfd, opts->file_size, opts->workspace_entries, &total, big_before) < 0)
	{
		jail_seterr(err, "workspace %s could not be measured (deeper than 64 or more than %llu entries, --workspace-entries)",
					opts->workspace, (unsigned long long) opts->workspace_entries);
		return -1;
	}
	if (opts->workspace_size && total > opts->workspace_size)
	{
		jail_seterr(err, "workspace %s already holds %llu bytes, more than --workspace-size %llu",
					opts->workspace, (unsigned long long) total,
					(unsigned long long) opts->workspace_size);
		return -1;
	}
	return 0;
}

/*
 * Does the launcher's slot (which this process sits in) serve as the run's
 * cgroup?  Yes unless there is none or the request names another parent.
 */
static bool
slot_serves(const JailOptions *opts, const JailRunEnv *env)
{
	return env->slot && env->slot->mode != CGROUP_NONE &&
		(!opts->cgroup_parent || !env->slot_parent ||
		 strcmp(opts->cgroup_parent, env->slot_parent) == 0);
}

/*
 * Run the payload once.  Returns 0 when it ran (whatever it did) and -1 on
 * a setup error, with res->setup_error set.  res is always filled in.
 */
int
jail_run(const JailOptions *opts, const char *code, size_t code_len,
		 const JailRunEnv *env, JailResult *res)
{
	static const JailRunEnv oneshot = {
		.stdout_fd = STDOUT_FILENO, .stderr_fd = STDERR_FILENO, .cancel_fd = -1,
	};
	JailRun		run;
	JailFilter	filter = {0};
	JailChildArgs args;
	Stream	   *streams;
	JailPipes	pipes;
	int			sigfd = -1;
	char		err[JAIL_ERRLEN] = "";
	char		child_err[JAIL_ERRLEN] = "";
	size_t		child_err_len = 0;
	uint64_t	start = jail_now_ms();
	uid_t		ouid;
	gid_t		ogid;
	int			payload_status = 0;
	bool		have_status = false;
	bool		big_before = false;
	JailPrespawn *pre;
	bool		early_go = false;
	bool		born_in_cg = false; /* cloned into run.cg (v2) */
	int			rc = -1;

	memset(&run, 0, sizeof(run));
	run.opts = opts;
	run.res = res;
	run.pid = -1;
	run.pidfd = -1;
	run.wsfd = -1;
	run.cg.v2_dirfd = -1;
	if (!env)
		env = &oneshot;
	run.cancel_fd = env->cancel_fd;
	run.statfd = -1;
	jail_pipes_init(&pipes);
	pre = env->pre;
	if (pre)
	{
		run.pid = pre->pid;		/* killed and reaped at "out" on failure */
		run.pidfd = pre->pidfd;
	}

	/*
	 * A sandbox built ahead that will serve this run (it sits in our slot,
	 * which is the run's cgroup) gets its first go at once, and completes
	 * its root while we open and measure the workspace.  Should the
	 * workspace's owner prove it the wrong sandbox (root's launcher
	 * guesses), it is discarded below like any other: nothing of the
	 * request runs before the second go.  A failed write is retried, and
	 * handled, where the go is sent otherwise.
	 */
	if (pre && slot_serves(opts, env))
		early_go = jail_send_go(pre->pipes.go[1], JAIL_GO_REQUEST);

	streams = stream_store;
	for (int i = 0; i < 2; i++)
		memset(&streams[i], 0, offsetof(Stream, buf));

	/* The workspace must be a real directory, not a symlink. */
	run.wsfd = open(opts->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run.wsfd < 0)
	{
		jail_seterr(err, "workspace %s: %s", opts->workspace, strerror(errno));
		goto out;
	}
	jail_outer_ids(run.wsfd, &ouid, &ogid);
	JAIL_TRACE("workspace opened");

	/*
	 * A sandbox cloned ahead was mapped to the outer ids guessed then
	 * (root's launcher): if the workspace's owner differs, it cannot
	 * serve this run; a fresh one is cloned below, as without a
	 * launcher.  Either way the next guess is this run's owner.
	 */
	if (env->owner_hint)
	{
		env->owner_hint[0] = ouid;
		env->owner_hint[1] = ogid;
	}
	if (pre && (pre->ouid != ouid || pre->ogid != ogid))
	{
		jail_prespawn_discard(pre);
		pre = NULL;
		run.pid = -1;
		run.pidfd = -1;
	}

	if (env->filter)
		filter = *env->filter;	/* borrowed: not freed below */
	else if (jail_filter_get(&filter, FILTER_PAYLOAD, err) < 0)
		goto out;

	/*
	 * A launcher slot (we already sit in it, so the sandbox is born
	 * there: no slow move) serves runs under the launcher's parent; a
	 * request for another parent gets its own cgroup as a one-shot would.
	 */
	if (slot_serves(opts, env))
	{
		run.cg = *env->slot;	/* counters reset by the worker (serve.c) */
		run.cg_borrowed = true;
	}
	else if (jail_cgroup_create(opts, &run.cg, err) < 0)
	{
		jail_cgroup_destroy(&run.cg);
		if (opts->require_cgroup)
			goto out;
		/* rlimits only; the verdict says "cgroup":"none" */
		jail_warn("no cgroup, rlimits only: %s", err);
		err[0] = '\0';
	}

	/*
	 * A sandbox cloned ahead has its payload's process already, in the
	 * slot: moving init into a cgroup of its own would leave that one
	 * behind.  Such a run (a request for another cgroup parent) gets a
	 * fresh sandbox.
	 */
	if (pre && !run.cg_borrowed && run.cg.mode != CGROUP_NONE)
	{
		jail_prespawn_discard(pre);
		pre = NULL;
		run.pid = -1;
		run.pidfd = -1;
	}

	if (pre)
	{
		/* cloned before the request came: take over its descriptors */
		pipes = pre->pipes;
		jail_pipes_init(&pre->pipes);
		sigfd = pre->sigfd;
		pre->sigfd = -1;
		start = jail_now_ms();
	}
	else
	{
		if (jail_pipes_open(&pipes, err) < 0)
			goto out;

		sigfd = jail_stop_signals(err);
		if (sigfd < 0)
			goto out;

		memset(&args, 0, sizeof(args));
		args.opts = opts;
		args.code = code;
		args.code_len = code_len;
		args.filter = &filter;
		jail_pipes_child_ends(&pipes, &args);
		args.req_fd = -1;
		args.tree_sock = -1;
		args.paygo_fd = -1;
		args.cgroup_none = run.cg.mode == CGROUP_NONE;
		args.netns_ready = env->netns_ready;
		args.served = env != &oneshot;

		start = jail_now_ms();
		run.pid = jail_spawn(&args, &run.pidfd,
							  run.cg.mode == CGROUP_V2 ? run.cg.v2_dirfd : -1,
							  &born_in_cg);
		if (run.pid < 0)
		{
			jail_seterr(err, "clone: %s", strerror(errno));
			goto out;
		}
	}
	jail_pipes_close_child_ends(&pipes);

	/*
	 * Two go bytes: the first after the id maps (the child can then build
	 * its root), the second after the cgroup move, which on v1 is slow,
	 * and the workspace check: both overlap with the child's mount work.
	 * The payload is forked only after the second.
	 */
	if ((pre ?
		 !early_go && !jail_send_go(pipes.go[1], run.cg.mode == CGROUP_NONE ? JAIL_GO_NOCGROUP : JAIL_GO_REQUEST) :
		 (jail_write_id_maps(run.pid, ouid, ogid, err) < 0 ||
		  !jail_send_go(pipes.go[1], run.cg.mode == CGROUP_NONE ? JAIL_GO_NOCGROUP : JAIL_GO_MAPPED))) ||
		(!run.cg_borrowed && !born_in_cg && jail_cgroup_attach(&run.cg, run.pid, err) < 0))
	{
		if (!err[0])
			jail_seterr(err, "signal the sandbox: %s", strerror(errno));
		kill_sandbox(&run);
		waitpid(run.pid, &run.wstatus, 0);
		run.reaped = true;
		take_child_error(pipes.err[0], err);
		goto out;
	}
	if (measure_workspace(&run, &big_before, err) < 0)
	{
		kill_sandbox(&run);
		waitpid(run.pid, &run.wstatus, 0);
		run.reaped = true;
		goto out;
	}
	JAIL_TRACE("workspace measured");

	/*
	 * The last go: to a sandbox built ahead, straight to its payload's
	 * process (its init has completed the root and dropped its last
	 * capabilities by itself meanwhile); otherwise to init.
	 */
	if (!jail_send_go(pre ? pre->paygo[1] : pipes.go[1], JAIL_GO_RUN))
	{
		jail_seterr(err, "signal the sandbox: %s", strerror(errno));
		kill_sandbox(&run);
		waitpid(run.pid, &run.wstatus, 0);
		run.reaped = true;
		take_child_error(pipes.err[0], err);
		goto out;
	}
	jail_close(&pipes.go[1]);
	JAIL_TRACE("go sent");

	/*
	 * Ending on init's report leaves init to be reaped after the verdict:
	 * only where nothing waits on its exit before that, i.e. not a cgroup
	 * of our own, which is removed below.
	 */
	run.defer_reap = env->defer_reap && (run.cg_borrowed || run.cg.mode == CGROUP_NONE);
	run.statfd = pipes.stat[0];
	streams[0].in = pipes.out[0];
	streams[0].out = env->stdout_fd;
	streams[1].in = pipes.errout[0];
	streams[1].out = env->stderr_fd;
	monitor(&run, streams, pipes.err[0], sigfd, start, child_err, &child_err_len);
	pipes.err[0] = -1;			/* closed by monitor */
	JAIL_TRACE("monitor done");

	if (!run.reaped)
	{
		/* only after a poll failure: make sure, then wait */
		kill_sandbox(&run);
		waitpid(run.pid, &run.wstatus, 0);
		getrusage(RUSAGE_CHILDREN, &run.ru);
		run.reaped = true;
		run.reaped_at = jail_now_ms();
	}
	if (!run.have_report &&
		read(pipes.stat[0], &run.rep, sizeof(run.rep)) == sizeof(run.rep))
		run.have_report = true;
	if (run.have_report)
	{
		have_status = true;
		payload_status = run.rep.status;
		if (run.rep.alone)
			run.ru = run.rep.ru;	/* the run's processes, not init's */
	}

	res->wall_ms = run.reaped_at - start;
	res->cpu_ms = (run.ru.ru_utime.tv_sec + run.ru.ru_stime.tv_sec) * 1000ULL +
		(run.ru.ru_utime.tv_usec + run.ru.ru_stime.tv_usec) / 1000;
	res->peak_memory_bytes = (uint64_t) run.ru.ru_maxrss * 1024;
	res->stdout_bytes = streams[0].produced;
	res->stderr_bytes = streams[1].produced;
	if (streams[0].len > 0 || streams[1].len > 0)
		res->output_truncated = true;	/* caller never read the rest */

	jail_cgroup_collect(&run.cg, res);
	JAIL_TRACE("cgroup collected");

	/* Post-run workspace check: big files and the total. */
	if (run.wsfd >= 0)
	{
		uint64_t	total = 0;
		bool		big = false;

		if (jail_workspace_usage(run.wsfd, opts->file_size, opts->workspace_entries,
								 &total, &big) < 0 ||
			(big && !big_before) ||
			(opts->workspace_size && total > opts->workspace_size))
			res->file_too_large = true;
	}
	if (run.over_workspace)
		res->file_too_large = true;
	JAIL_TRACE("workspace rescanned");

	if (child_err_len > 0)
	{
		child_err[child_err_len] = '\0';
		snprintf(err, sizeof(err), "%s", child_err);
	}

	if (res->killed)
		res->status = STATUS_KILLED;
	else if (err[0])
		;						/* setup error, below */
	else if (res->timed_out && !have_status)
		res->status = STATUS_TIMED_OUT;
	else if (have_status && WIFEXITED(payload_status))
	{
		res->status = STATUS_EXITED;
		res->have_exit_code = true;
		res->exit_code = WEXITSTATUS(payload_status);
	}
	else if (have_status && WIFSIGNALED(payload_status))
	{
		res->status = STATUS_SIGNALED;
		res->have_signal = true;
		res->signal = WTERMSIG(payload_status);
		if (res->signal == SIGXCPU ||
			(res->signal == SIGKILL && res->cpu_ms >= opts->cpu_ms))
			res->timed_out = true;
		if (res->signal == SIGXFSZ)
			res->file_too_large = true;
	}
	else if (res->oom_killed || run.over_workspace)
	{
		/* a limit killed the sandbox's init itself */
		res->status = STATUS_SIGNALED;
		res->have_signal = true;
		res->signal = SIGKILL;
	}
	else
		jail_seterr(err, "sandbox init ended without reporting (status 0x%x)",
					(unsigned) run.wstatus);
	rc = 0;

out:
	if (run.init_pending)
		pending_init = run.pid;
	else if (run.pid > 0 && !run.reaped)
	{
		kill_sandbox(&run);
		waitpid(run.pid, &run.wstatus, 0);
	}
	if (err[0] && !res->killed)
	{
		res->status = STATUS_SETUP_ERROR;
		snprintf(res->setup_error, sizeof(res->setup_error), "%s", err);
		rc = -1;
	}
	if (res->cgroup == CGROUP_NONE)
		res->cgroup = run.cg.mode;
	if (!run.cg_borrowed)
		jail_cgroup_destroy(&run.cg);
	jail_pipes_close(&pipes);
	jail_close(&sigfd);
	jail_close(&run.pidfd);
	jail_close(&run.wsfd);
	if (!env->filter)
		free(filter.insns);
	return rc;
}

/*
 * Kill and reap the init of the last run if it ended on init's report
 * (JailRunEnv.defer_reap): called by the caller once the verdict is out.
 * Init, alone in its pid namespace, waits for this kill (or is exiting).
 */
void
jail_run_reap(void)
{
	if (pending_init <= 0)
		return;
	kill(pending_init, SIGKILL);
	while (waitpid(pending_init, NULL, 0) < 0 && errno == EINTR)
		;
	pending_init = -1;
}
