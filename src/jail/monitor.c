/*-------------------------------------------------------------------------
 *
 * monitor.c
 *	  The host side of a run while it runs: one poll loop that copies the
 *	  payload's output to the caller, watches the wall clock, the CPU clock
 *	  and the workspace, takes termination signals and the launcher
 *	  client's cancel, reads init's report and reaps init.  It returns once
 *	  init is reaped (or reported itself alone) and the pipes are dry.
 *
 * It only records what it sees in the JailRun (reaped, report, setup error
 * text, limits hit) and kills the sandbox through jail_run_kill
 * (lifecycle.c); what the run's status is, verdict.c decides afterwards.
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
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

#define STREAM_BUF			65536
#define CPU_POLL_MS			100
#define WORKSPACE_POLL_MS	500
#define FLUSH_GRACE_MS		2000
#define KILLED_POLL_MS		1000	/* kill sent: wait for the reap */

typedef struct Stream
{
	int			in;				/* read end of the payload's pipe */
	int			out;			/* our stdout or stderr */
	size_t		off;
	size_t		len;
	uint64_t	produced;		/* everything the payload wrote */
	uint64_t	forwarded;		/* accepted for delivery (<= cap) */
	bool		eof;
	bool		drain;			/* its writers are all exiting: read what
								 * the pipe holds, then it is dry */
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

/* What each entry of the poll set stands for. */
typedef enum MonitorSlot
{
	SLOT_INIT,					/* the pidfd: init exited, reap it */
	SLOT_SETUP_ERROR,			/* the sandbox's setup error text */
	SLOT_SIGNALS,				/* the signalfd: SIGTERM & co. to us */
	SLOT_CANCEL,				/* the launcher's client hung up or spoke */
	SLOT_REPORT,				/* init's JailInitReport */
	SLOT_WRITE_STDOUT,			/* our stdout buffer to the caller */
	SLOT_WRITE_STDERR,
	SLOT_READ_STDOUT,			/* the payload's stdout pipe to our buffer */
	SLOT_READ_STDERR,
	MONITOR_NSLOTS
} MonitorSlot;

/* The loop's own state; what it learns goes into the run. */
typedef struct Monitor
{
	JailRun    *run;
	Stream	   *streams;		/* [0] stdout, [1] stderr */
	int			cancel_fd;		/* the launcher's client; -1 once it spoke */
	int			report_fd;		/* init's report; -1 once read or gone */
	bool		watch_cpu;		/* a cgroup counts the CPU time */
	uint64_t	deadline;		/* the wall clock's limit */
	uint64_t	next_cpu;		/* next look at the CPU time */
	uint64_t	next_ws;		/* next look at the workspace */
	uint64_t	flush_deadline; /* after the reap, 0 until then */
} Monitor;

static void
monitor_init(Monitor *m, JailRun *run)
{
	const JailOptions *opts = run->opts;

	memset(m, 0, sizeof(*m));
	m->run = run;
	m->streams = stream_store;
	for (int i = 0; i < 2; i++)
		memset(&m->streams[i], 0, offsetof(Stream, buf));
	m->streams[0].in = run->pipes.out[0];
	m->streams[0].out = run->env->stdout_fd;
	m->streams[1].in = run->pipes.errout[0];
	m->streams[1].out = run->env->stderr_fd;
	m->cancel_fd = run->env->cancel_fd;
	m->report_fd = run->defer_reap ? run->pipes.stat[0] : -1;
	m->watch_cpu = jail_cgroup_cpu_ms(&run->cg) != 0 ||
		run->cg.mode == CGROUP_V2 || run->cg.cpu_dir[0];
	m->deadline = run->start + opts->wall_ms;
	m->next_cpu = run->start + CPU_POLL_MS;
	m->next_ws = run->start + WORKSPACE_POLL_MS;
}

/* ---------------------------------------------------------------- output */

static void
stream_read(Stream *s, uint64_t cap, JailResult *res)
{
	char		discard[STREAM_BUF];
	ssize_t		n;

	/* only when the buffer is empty: that is our backpressure */
	n = read(s->in, s->len == 0 ? s->buf : discard, STREAM_BUF);
	if (n < 0)
	{
		if (errno == EINTR || (errno == EAGAIN && !s->drain))
			return;
		n = 0;					/* drained: nothing more can come */
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

/* What the payload wrote, and whether the caller got all of it. */
static void
account_output(const Monitor *m)
{
	JailResult *res = m->run->res;

	res->stdout_bytes = m->streams[0].produced;
	res->stderr_bytes = m->streams[1].produced;
	if (m->streams[0].len > 0 || m->streams[1].len > 0)
		res->output_truncated = true;	/* caller never read the rest */
}

/* ---------------------------------------------------------------- limits */

static void
check_cpu(JailRun *run)
{
	uint64_t	used = jail_cgroup_cpu_ms(&run->cg);

	if (used >= run->opts->cpu_ms && !run->reaped)
	{
		run->res->timed_out = true;
		jail_run_kill(run);
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
		jail_run_kill(run);
	}
}

/* The wall clock, then (when due) the CPU time and the workspace. */
static void
check_limits(Monitor *m, uint64_t now)
{
	JailRun    *run = m->run;

	if (run->reaped)
		return;
	if (now >= m->deadline && !run->kill_sent)
	{
		run->res->timed_out = true;
		jail_run_kill(run);
	}
	if (m->watch_cpu && now >= m->next_cpu)
	{
		check_cpu(run);
		m->next_cpu = now + CPU_POLL_MS;
	}
	if (now >= m->next_ws)
	{
		check_workspace(run);
		m->next_ws = now + WORKSPACE_POLL_MS;
	}
}

/*
 * Init is reaped: are we done?  Yes once both streams and the error pipe
 * are dry, or FLUSH_GRACE_MS after the reap (a caller that never reads).
 */
static bool
finished(Monitor *m, uint64_t now)
{
	bool		done = m->run->pipes.err[0] < 0;

	for (int i = 0; i < 2; i++)
		if (!m->streams[i].eof || m->streams[i].len > 0)
			done = false;
	if (done)
		return true;
	if (m->flush_deadline == 0)
		m->flush_deadline = now + FLUSH_GRACE_MS;
	else if (now >= m->flush_deadline)
		return true;			/* a caller that never reads: give up */
	return false;
}

/* ------------------------------------------------------------ the events */

static void
on_init_exit(JailRun *run)
{
	if (waitpid(run->pid, &run->wstatus, WNOHANG) == run->pid)
	{
		/* wait4 semantics via getrusage of children */
		getrusage(RUSAGE_CHILDREN, &run->ru);
		JAIL_TRACE("init reaped");
		run->reaped = true;
		run->reaped_at = jail_now_ms();
	}
}

static void
on_setup_error(JailRun *run)
{
	int		   *fd = &run->pipes.err[0];
	ssize_t		r = read(*fd, run->child_err + run->child_err_len,
						 JAIL_ERRLEN - 1 - run->child_err_len);

	if (r > 0)
		run->child_err_len += r;
	else if (r == 0 || (errno != EINTR && errno != EAGAIN))
		jail_close(fd);
	if (run->child_err_len >= JAIL_ERRLEN - 1)
		jail_close(fd);
}

static void
on_signal(JailRun *run)
{
	struct signalfd_siginfo si;

	if (read(run->sigfd, &si, sizeof(si)) == sizeof(si))
	{
		run->res->killed = true;
		jail_run_kill(run);
	}
}

/*
 * The launcher's client hung up or asked to stop (nothing else is ever
 * sent mid-run): like SIGTERM to a one-shot jail.
 */
static void
on_cancel(Monitor *m)
{
	m->run->res->killed = true;
	jail_run_kill(m->run);
	m->cancel_fd = -1;
}

/*
 * Can the run end on a report sent while its payload was still exiting?
 * Its rusage is not there yet, so the cgroup must count the run's CPU
 * and peak memory (a launcher's slot, v2 or v1 with cpuacct and memory).
 */
static bool
counts_without_rusage(const JailRun *run)
{
	return run->cg.mode == CGROUP_V2 ||
		(run->cg.mode == CGROUP_V1 && run->cg.mem_dir[0] && run->cg.cpu_dir[0]);
}

/*
 * The payload's tasks are all exiting (JailInitReport.exiting): none can
 * write again, and the pipes' last writers close them only once the
 * kernel has freed their memory.  What the pipes hold is all there will
 * be: read it without waiting, then they are dry.
 */
static void
drain_streams(Monitor *m)
{
	for (int i = 0; i < 2; i++)
	{
		Stream	   *s = &m->streams[i];

		if (s->eof)
			continue;
		fcntl(s->in, F_SETFL, fcntl(s->in, F_GETFL) | O_NONBLOCK);
		s->drain = true;
	}
}

/*
 * Init reaped the payload (or saw all of it exiting: rep.exiting).  If it
 * found itself alone, nothing of the run is left to outlive the verdict:
 * the run ends now, and init (which waits for it, or is exiting) is
 * killed and reaped after the verdict.
 */
static void
on_report(Monitor *m)
{
	JailRun    *run = m->run;
	ssize_t		r = read(m->report_fd, &run->rep, sizeof(run->rep));

	if (r == sizeof(run->rep))
	{
		run->have_report = true;
		JAIL_TRACE("init report read");
		if (run->rep.alone && run->defer_reap &&
			(!run->rep.exiting || counts_without_rusage(run)))
		{
			run->reaped = true;
			run->init_pending = true;
			run->reaped_at = jail_now_ms();
			if (run->rep.exiting)
				drain_streams(m);
		}
		else if (run->rep.lingering)
			jail_run_kill(run); /* we wait for its exit */
	}
	else if (r >= 0 || (errno != EINTR && errno != EAGAIN))
		m->report_fd = -1;		/* init is gone: wait for the reap */
}

static void
dispatch(Monitor *m, MonitorSlot slot)
{
	JailRun    *run = m->run;

	switch (slot)
	{
		case SLOT_INIT:
			on_init_exit(run);
			break;
		case SLOT_SETUP_ERROR:
			on_setup_error(run);
			break;
		case SLOT_SIGNALS:
			on_signal(run);
			break;
		case SLOT_CANCEL:
			on_cancel(m);
			break;
		case SLOT_REPORT:
			on_report(m);
			break;
		case SLOT_WRITE_STDOUT:
		case SLOT_WRITE_STDERR:
			stream_write(&m->streams[slot - SLOT_WRITE_STDOUT]);
			break;
		case SLOT_READ_STDOUT:
		case SLOT_READ_STDERR:
			stream_read(&m->streams[slot - SLOT_READ_STDOUT], run->opts->output_limit,
						run->res);
			break;
		case MONITOR_NSLOTS:
			break;
	}
}

/* ------------------------------------------------------------- the loop */

static void
add_slot(struct pollfd *pfd, MonitorSlot *slots, int *n, int fd, short events,
		 MonitorSlot slot)
{
	pfd[*n].fd = fd;
	pfd[*n].events = events;
	pfd[*n].revents = 0;
	slots[(*n)++] = slot;
}

/* The poll set for this turn: what we wait for depends on the state. */
static int
fill_poll(const Monitor *m, struct pollfd *pfd, MonitorSlot *slots)
{
	const JailRun *run = m->run;
	int			n = 0;

	if (!run->reaped)
		add_slot(pfd, slots, &n, run->pidfd, POLLIN, SLOT_INIT);
	for (int i = 0; i < 2; i++)
	{
		const Stream *s = &m->streams[i];

		if (s->len > 0)
			add_slot(pfd, slots, &n, s->out, POLLOUT, SLOT_WRITE_STDOUT + i);
		else if (!s->eof && !s->drain)
			add_slot(pfd, slots, &n, s->in, POLLIN, SLOT_READ_STDOUT + i);
	}
	if (run->pipes.err[0] >= 0)
		add_slot(pfd, slots, &n, run->pipes.err[0], POLLIN, SLOT_SETUP_ERROR);
	add_slot(pfd, slots, &n, run->sigfd, POLLIN, SLOT_SIGNALS);
	if (m->cancel_fd >= 0 && !run->reaped)
		add_slot(pfd, slots, &n, m->cancel_fd, POLLIN | POLLRDHUP, SLOT_CANCEL);
	if (m->report_fd >= 0 && !run->have_report && !run->reaped)
		add_slot(pfd, slots, &n, m->report_fd, POLLIN, SLOT_REPORT);
	return n;
}

/* Until the next clock to look at (or the flush's end), in ms. */
static int
poll_timeout(const Monitor *m, uint64_t now)
{
	const JailRun *run = m->run;
	uint64_t	wake = run->reaped ? m->flush_deadline : m->deadline;

	if (!run->reaped && m->watch_cpu && m->next_cpu < wake)
		wake = m->next_cpu;
	if (!run->reaped && run->opts->workspace_size && m->next_ws < wake)
		wake = m->next_ws;
	if (run->kill_sent && !run->reaped)
		wake = now + KILLED_POLL_MS;
	return wake > now ? (int) (wake - now) : 0;
}

/*
 * Copy output and watch the clocks until init is reaped and the pipes are
 * dry.  On return the error pipe is closed and the output counted in the
 * result; init is reaped unless poll itself failed (then it was killed).
 */
void
jail_monitor(JailRun *run)
{
	Monitor		m;

	monitor_init(&m, run);
	for (;;)
	{
		struct pollfd pfd[MONITOR_NSLOTS];
		MonitorSlot slots[MONITOR_NSLOTS];
		uint64_t	now = jail_now_ms();
		int			n;

		check_limits(&m, now);
		for (int i = 0; i < 2; i++)
			if (m.streams[i].drain && !m.streams[i].eof && m.streams[i].len == 0)
				stream_read(&m.streams[i], run->opts->output_limit, run->res);
		if (run->reaped && finished(&m, now))
			break;
		n = fill_poll(&m, pfd, slots);
		if (poll(pfd, n, poll_timeout(&m, now)) < 0)
		{
			if (errno == EINTR)
				continue;
			jail_warn("poll: %s", strerror(errno));
			jail_run_kill(run);
			break;
		}
		for (int i = 0; i < n; i++)
			if (pfd[i].revents)
				dispatch(&m, slots[i]);
	}
	jail_close(&run->pipes.err[0]);
	account_output(&m);
}
