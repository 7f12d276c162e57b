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

/* An init that reported itself alone, reaped by jail_run_reap(). */
static pid_t pending_init = -1;

void
jail_run_kill(JailRun *run)
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
	char		err[JAIL_ERRLEN] = "";
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
	run.start = jail_now_ms();
	run.sigfd = -1;
	run.pid = -1;
	run.pidfd = -1;
	run.wsfd = -1;
	run.cg.v2_dirfd = -1;
	if (!env)
		env = &oneshot;
	run.env = env;
	jail_pipes_init(&run.pipes);
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
		run.pipes = pre->pipes;
		jail_pipes_init(&pre->pipes);
		run.sigfd = pre->sigfd;
		pre->sigfd = -1;
		run.start = jail_now_ms();
	}
	else
	{
		if (jail_pipes_open(&run.pipes, err) < 0)
			goto out;

		run.sigfd = jail_stop_signals(err);
		if (run.sigfd < 0)
			goto out;

		memset(&args, 0, sizeof(args));
		args.opts = opts;
		args.code = code;
		args.code_len = code_len;
		args.filter = &filter;
		jail_pipes_child_ends(&run.pipes, &args);
		args.req_fd = -1;
		args.tree_sock = -1;
		args.paygo_fd = -1;
		args.cgroup_none = run.cg.mode == CGROUP_NONE;
		args.netns_ready = env->netns_ready;
		args.served = env != &oneshot;

		run.start = jail_now_ms();
		run.pid = jail_spawn(&args, &run.pidfd,
							 run.cg.mode == CGROUP_V2 ? run.cg.v2_dirfd : -1,
							 &born_in_cg);
		if (run.pid < 0)
		{
			jail_seterr(err, "clone: %s", strerror(errno));
			goto out;
		}
	}
	jail_pipes_close_child_ends(&run.pipes);

	/*
	 * Two go bytes: the first after the id maps (the child can then build
	 * its root), the second after the cgroup move, which on v1 is slow,
	 * and the workspace check: both overlap with the child's mount work.
	 * The payload is forked only after the second.
	 */
	if ((pre ?
		 !early_go && !jail_send_go(run.pipes.go[1], run.cg.mode == CGROUP_NONE ? JAIL_GO_NOCGROUP : JAIL_GO_REQUEST) :
		 (jail_write_id_maps(run.pid, ouid, ogid, err) < 0 ||
		  !jail_send_go(run.pipes.go[1], run.cg.mode == CGROUP_NONE ? JAIL_GO_NOCGROUP : JAIL_GO_MAPPED))) ||
		(!run.cg_borrowed && !born_in_cg && jail_cgroup_attach(&run.cg, run.pid, err) < 0))
	{
		if (!err[0])
			jail_seterr(err, "signal the sandbox: %s", strerror(errno));
		jail_run_kill(&run);
		waitpid(run.pid, &run.wstatus, 0);
		run.reaped = true;
		take_child_error(run.pipes.err[0], err);
		goto out;
	}
	if (measure_workspace(&run, &big_before, err) < 0)
	{
		jail_run_kill(&run);
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
	if (!jail_send_go(pre ? pre->paygo[1] : run.pipes.go[1], JAIL_GO_RUN))
	{
		jail_seterr(err, "signal the sandbox: %s", strerror(errno));
		jail_run_kill(&run);
		waitpid(run.pid, &run.wstatus, 0);
		run.reaped = true;
		take_child_error(run.pipes.err[0], err);
		goto out;
	}
	jail_close(&run.pipes.go[1]);
	JAIL_TRACE("go sent");

	/*
	 * Ending on init's report leaves init to be reaped after the verdict:
	 * only where nothing waits on its exit before that, i.e. not a cgroup
	 * of our own, which is removed below.
	 */
	run.defer_reap = env->defer_reap && (run.cg_borrowed || run.cg.mode == CGROUP_NONE);
	jail_monitor(&run);
	JAIL_TRACE("monitor done");

	if (!run.reaped)
	{
		/* only after a poll failure: make sure, then wait */
		jail_run_kill(&run);
		waitpid(run.pid, &run.wstatus, 0);
		getrusage(RUSAGE_CHILDREN, &run.ru);
		run.reaped = true;
		run.reaped_at = jail_now_ms();
	}
	if (!run.have_report &&
		read(run.pipes.stat[0], &run.rep, sizeof(run.rep)) == sizeof(run.rep))
		run.have_report = true;
	if (run.have_report)
	{
		have_status = true;
		payload_status = run.rep.status;
		if (run.rep.alone)
			run.ru = run.rep.ru;	/* the run's processes, not init's */
	}

	res->wall_ms = run.reaped_at - run.start;
	res->cpu_ms = (run.ru.ru_utime.tv_sec + run.ru.ru_stime.tv_sec) * 1000ULL +
		(run.ru.ru_utime.tv_usec + run.ru.ru_stime.tv_usec) / 1000;
	res->peak_memory_bytes = (uint64_t) run.ru.ru_maxrss * 1024;

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

	if (run.child_err_len > 0)
	{
		run.child_err[run.child_err_len] = '\0';
		snprintf(err, sizeof(err), "%s", run.child_err);
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
		jail_run_kill(&run);
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
	jail_pipes_close(&run.pipes);
	jail_close(&run.sigfd);
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
