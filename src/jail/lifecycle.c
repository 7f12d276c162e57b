/*-------------------------------------------------------------------------
 *
 * lifecycle.c
 *	  One run, host side (jail_run), as a short list of steps (after
 *	  isolate), each moving the run to its next phase (JailRunPhase):
 *	    prepare   open the workspace, pick the outer ids, the filter and
 *	              the cgroup, and whether the sandbox cloned ahead fits
 *	    start     clone the sandbox (spawn.c), or take over the one
 *	              cloned ahead
 *	    go        id maps, cgroup, workspace measured: the go bytes
 *	    monitor   output, clocks, signals until init is reaped (monitor.c)
 *	    end       make sure init is reaped, read its report
 *	    collect   the facts of the run into the result
 *	    finish    the status (jail_verdict_decide), then release what the
 *	              run held
 *
 * Two kinds of failure are kept apart (the billing rule depends on it):
 * the sandbox could not be built (setup_error: any text on the child's
 * err pipe, or a failed host step) versus the program failed (a verdict
 * with an exit code or signal).  A step that fails puts its reason in
 * run->err and returns -1; the run then goes straight to finish.  Only
 * main.c turns a result into an exit code.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

/* A one-shot run (jail_run without an env): our stdout and stderr. */
static const JailRunEnv oneshot = {
	.stdout_fd = STDOUT_FILENO,.stderr_fd = STDERR_FILENO,.cancel_fd = -1,
	.egress_spawner = -1,
};

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
 * A go step failed: kill and reap the sandbox.  If a go byte could not be
 * sent because the sandbox already gave up, its own reason (on the error
 * pipe, whose write ends are all closed once it is reaped, so the read
 * cannot block) says more than our EPIPE: take_child_error.
 */
static void
run_abort(JailRun *run, bool take_child_error)
{
	jail_run_kill(run);
	waitpid(run->pid, &run->wstatus, 0);
	run->reaped = true;
	if (take_child_error)
	{
		char		buf[JAIL_ERRLEN];
		ssize_t		n = read(run->pipes.err[0], buf, sizeof(buf) - 1);

		if (n > 0)
		{
			buf[n] = '\0';
			snprintf(run->err, JAIL_ERRLEN, "%s", buf);
		}
	}
}

/*
 * Does the launcher's slot (which this process sits in) serve as the run's
 * cgroup?  Yes unless there is none or the request names another parent.
 */
static bool
slot_serves(const JailOptions *opts, const JailRunEnv *env)
{
	/* a gvisor run's cgroup holds runsc too: always one of its own */
	return opts->isolation != JAIL_ISOLATION_GVISOR &&
		env->slot && env->slot->mode != CGROUP_NONE &&
		(!opts->cgroup_parent || !env->slot_parent ||
		 strcmp(opts->cgroup_parent, env->slot_parent) == 0);
}

static void
run_init(JailRun *run, const JailOptions *opts, const char *code,
		 size_t code_len, const JailRunEnv *env, JailResult *res)
{
	memset(run, 0, sizeof(*run));
	run->phase = JAIL_RUN_PREPARING;
	run->opts = opts;
	run->code = code;
	run->code_len = code_len;
	run->env = env ? env : &oneshot;
	run->served = env != NULL;
	run->res = res;
	run->pre = run->env->pre;
	run->wsfd = -1;
	run->cg.v2_dirfd = -1;
	jail_pipes_init(&run->pipes);
	run->sigfd = -1;
	run->pid = -1;
	run->pidfd = -1;
	jail_egress_init(&run->egress);
	run->image_lock = -1;
	run->start = jail_now_ms();
}

/* The prespawned sandbox cannot serve this run: a fresh one is cloned. */
static void
run_drop_prespawn(JailRun *run)
{
	if (run->pre->warm)
		run->warm_dropped = true;
	jail_prespawn_discard(run->pre);
	run->pre = NULL;
}

/*
 * The workspace must be a real directory, not a symlink.  Its owner gives
 * the outer ids when root runs us (jail_outer_ids).  A sandbox cloned
 * ahead was mapped to the outer ids guessed then (root's launcher): if the
 * workspace's owner differs, it cannot serve this run.  Either way the
 * next guess is this run's owner.
 */
static int
run_open_workspace(JailRun *run)
{
	const JailOptions *opts = run->opts;
	const JailRunEnv *env = run->env;

	run->wsfd = open(opts->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (run->wsfd < 0)
	{
		jail_seterr(run->err, "workspace %s: %s", opts->workspace, strerror(errno));
		return -1;
	}
	jail_outer_ids(run->wsfd, &run->ouid, &run->ogid);
	JAIL_TRACE("workspace opened");

	if (env->owner_hint)
	{
		env->owner_hint[0] = run->ouid;
		env->owner_hint[1] = run->ogid;
	}
	if (run->pre && (run->pre->ouid != run->ouid || run->pre->ogid != run->ogid))
		run_drop_prespawn(run);
	return 0;
}

/*
 * A launcher slot (we already sit in it, so the sandbox is born there: no
 * slow move) serves runs under the launcher's parent; a request for
 * another parent gets its own cgroup as a one-shot would.  Without one,
 * the run has rlimits only, unless --require-cgroup.
 */
static int
run_choose_cgroup(JailRun *run)
{
	const JailOptions *opts = run->opts;

	if (slot_serves(opts, run->env))
	{
		/*
		 * A warm interpreter thrown away (run_prepare) left the slot with
		 * its start in the counters (its memory in the peak: the worker
		 * reset them while it waited) and with a memory limit that had
		 * room for it (worker.c): both are this run's again, as in a
		 * cold worker's slot.
		 */
		if (run->warm_dropped)
		{
			jail_cgroup_counters_from_now(run->env->slot);
			if (jail_cgroup_set_limits(run->env->slot, opts, 1, run->err) < 0)
				return -1;
		}
		run->cg = *run->env->slot;	/* counters reset by the worker (worker.c) */
		run->cg_borrowed = true;
	}
	else if (opts->isolation == JAIL_ISOLATION_GVISOR)
	{
		/*
		 * runsc, its sentry and gofer live in the run's cgroup with the
		 * payload: its limits get their room on top of the payload's
		 * (docs/jail.md, "The gvisor class").  No cgroup, no run: rlimits
		 * cannot hold runsc.
		 */
		JailOptions with_runsc = *opts;

		with_runsc.memory_bytes += JAIL_GVISOR_MEMORY_OVERHEAD;
		with_runsc.pids += JAIL_GVISOR_PIDS_OVERHEAD;
		if (jail_cgroup_create(&with_runsc, &run->cg, run->err) < 0)
		{
			char		why[JAIL_ERRLEN];

			jail_cgroup_destroy(&run->cg);
			snprintf(why, sizeof(why), "%s", run->err);
			jail_seterr(run->err, "the gvisor class needs a cgroup: %s", why);
			return -1;
		}
	}
	else if (jail_cgroup_create(opts, &run->cg, run->err) < 0)
	{
		jail_cgroup_destroy(&run->cg);
		if (opts->require_cgroup)
			return -1;
		/* rlimits only; the verdict says "cgroup":"none" */
		jail_warn("no cgroup, rlimits only: %s", run->err);
		run->err[0] = '\0';
	}

	/*
	 * A sandbox cloned ahead has its payload's process already, in the
	 * slot: moving init into a cgroup of its own would leave that one
	 * behind.  Such a run (a request for another cgroup parent) gets a
	 * fresh sandbox.
	 */
	if (run->pre && !run->cg_borrowed && run->cg.mode != CGROUP_NONE)
		run_drop_prespawn(run);
	return 0;
}

/*
 * Prepare: everything the sandbox needs before it starts, and the choice
 * of sandbox.  A sandbox built ahead whose view of the host's mounts is
 * out of date (jail_prespawn_stale) is discarded first.  One that will
 * serve this run (it sits in our slot, which is the run's cgroup) gets
 * its JAIL_GO_REQUEST at once, and completes its root while we open and
 * measure the workspace.  Should the workspace's owner prove it the wrong
 * sandbox (root's launcher guesses), it is discarded like any other:
 * nothing of the request runs before JAIL_GO_RUN.  A failed write is
 * retried, and handled, where the go is sent otherwise (run_first_go).
 */
static int
run_prepare(JailRun *run)
{
	const JailRunEnv *env = run->env;

	if (run->pre && jail_prespawn_stale(run->pre) &&
		!(run->pre->warm && jail_prespawn_covers(run->pre, run->opts)))
	{
		if (run->pre->warm)
			jail_warn("warm interpreter not used: a file system was mounted since it started");
		run_drop_prespawn(run);
	}
	/*
	 * Egress needs init to make the proxy's socket in the sandbox's own
	 * network namespace: a sandbox cloned ahead (warm or not) is not told,
	 * so such a run gets a fresh clone (egress.c), decided before a
	 * prepared sandbox could be told to go.
	 */
	if (run->opts->egress_policy && run->pre)
		run_drop_prespawn(run);
	/* a gvisor run is runsc's, never a namespaced sandbox's (gvisor.c) */
	if (run->opts->isolation == JAIL_ISOLATION_GVISOR && run->pre)
		run_drop_prespawn(run);
	/* a warm interpreter runs only code of its own language */
	if (run->pre && run->pre->warm && run->pre->warm_language != run->opts->language)
		run_drop_prespawn(run);
	/* the image may not be removed while the run runs on it (image.c) */
	if (jail_image_hold(&run->image_lock, run->err) < 0)
		return -1;
	if (run->pre && slot_serves(run->opts, env))
		run->early_go = jail_send_go(run->pre->pipes.go[1], JAIL_GO_REQUEST);
	if (run_open_workspace(run) < 0)
		return -1;

	run->egress.spawner = env->egress_spawner;
	if (jail_egress_prepare(&run->egress, run->opts, run->err) < 0)
		return -1;
	if (env->filter)
		run->filter = *env->filter; /* borrowed: not freed */
	else if (jail_filter_get(&run->filter, FILTER_PAYLOAD, run->err) < 0)
		return -1;
	return run_choose_cgroup(run);
}

/* Start, prespawned: take over its process and our ends of its pipes. */
static void
run_take_prespawn(JailRun *run)
{
	JailPrespawn *pre = run->pre;

	run->res->warm = pre->warm;
	run->pid = pre->pid;
	run->pidfd = pre->pidfd;
	run->pipes = pre->pipes;
	run->sigfd = pre->sigfd;
	pre->pid = -1;
	pre->pidfd = -1;
	jail_pipes_init(&pre->pipes);
	pre->sigfd = -1;
	run->start = jail_now_ms();
}

/* Start, one-shot (or a request the prespawned sandbox does not fit). */
static int
run_clone(JailRun *run)
{
	JailChildArgs args;

	if (jail_pipes_open(&run->pipes, run->err) < 0)
		return -1;
	run->sigfd = jail_stop_signals(0, run->err);
	if (run->sigfd < 0)
		return -1;

	memset(&args, 0, sizeof(args));
	args.opts = run->opts;
	args.code = run->code;
	args.code_len = run->code_len;
	args.filter = &run->filter;
	jail_pipes_child_ends(&run->pipes, &args);
	args.req_fd = -1;
	args.tree_sock = -1;
	args.watch_sock = -1;
	args.paygo_fd = -1;
	args.ready_fd = -1;
	args.cgroup_none = run->cg.mode == CGROUP_NONE;
	args.netns_ready = run->env->netns_ready;
	args.served = run->served;
	args.egress = run->egress.on;
	args.egress_fd = run->egress.sock[1];
	args.egress_ca_pem = run->egress.ca;
	args.egress_ca_len = run->egress.ca_len;
	args.egress_intercept = run->egress.intercept;

	run->start = jail_now_ms();
	run->pid = (run->opts->isolation == JAIL_ISOLATION_GVISOR ? jail_gvisor_spawn : jail_spawn)
		(&args, &run->pidfd, run->cg.mode == CGROUP_V2 ? run->cg.v2_dirfd : -1,
		 &run->born_in_cg);
	if (run->pid < 0)
	{
		jail_seterr(run->err, "clone: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int
run_start(JailRun *run)
{
	if (run->pre)
		run_take_prespawn(run);
	else if (run_clone(run) < 0)
		return -1;
	jail_pipes_close_child_ends(&run->pipes);
	run->phase = JAIL_RUN_STARTED;
	return 0;
}

/*
 * The first go byte: to a sandbox cloned on the spot after its id maps
 * (it can then build its root); to one cloned ahead (mapped already) that
 * the request waits in reqfd, unless run_prepare sent that already.  Then
 * the cgroup move, which on v1 is slow: it overlaps with the child's
 * mount work.
 */
static int
run_first_go(JailRun *run)
{
	bool		nocg = run->cg.mode == CGROUP_NONE;

	if (run->pre)
	{
		if (!run->early_go &&
			!jail_send_go(run->pipes.go[1], nocg ? JAIL_GO_NOCGROUP : JAIL_GO_REQUEST))
			return -1;
	}
	else if ((run->opts->isolation != JAIL_ISOLATION_GVISOR &&	/* no user ns */
			  jail_write_id_maps(run->pid, run->ouid, run->ogid, run->err) < 0) ||
			 !jail_send_go(run->pipes.go[1], nocg ? JAIL_GO_NOCGROUP : JAIL_GO_MAPPED))
		return -1;
	if (!run->cg_borrowed && !run->born_in_cg &&
		jail_cgroup_attach(&run->cg, run->pid, run->err) < 0)
		return -1;
	return 0;
}

/*
 * What the workspace holds before the run: over the total limit already
 * is the caller's problem (a setup error, not the payload's fault), and a
 * file already at the size limit must not be blamed on the payload
 * afterwards.  Done while the sandbox builds its root, before it may fork
 * the payload.
 */
static int
run_measure_workspace(JailRun *run)
{
	const JailOptions *opts = run->opts;
	uint64_t	total = 0;

	if (jail_workspace_usage(run->wsfd, opts->file_size, opts->workspace_entries,
							 &total, &run->big_before) < 0)
	{
		jail_seterr(run->err, "workspace %s could not be measured (deeper than 64 or more than %llu entries, --workspace-entries)",
					opts->workspace, (unsigned long long) opts->workspace_entries);
		return -1;
	}
	if (opts->workspace_size && total > opts->workspace_size)
	{
		jail_seterr(run->err, "workspace %s already holds %llu bytes, more than --workspace-size %llu",
					opts->workspace, (unsigned long long) total,
					(unsigned long long) opts->workspace_size);
		return -1;
	}
	return 0;
}

/*
 * Go: the first go byte and the cgroup, the workspace measured, then the
 * last go byte, JAIL_GO_RUN: to a sandbox built ahead, straight to its
 * payload's process (its init has completed the root and dropped its last
 * capabilities by itself meanwhile); otherwise to init.  The payload is
 * forked (or exec'd) only after it.
 */
static int
run_go(JailRun *run)
{
	if (run_first_go(run) < 0)
	{
		if (!run->err[0])
			jail_seterr(run->err, "signal the sandbox: %s", strerror(errno));
		run_abort(run, true);
		return -1;
	}
	if (run_measure_workspace(run) < 0)
	{
		run_abort(run, false);
		return -1;
	}
	JAIL_TRACE("workspace measured");
	if (jail_egress_start(&run->egress, run->opts, run->err) < 0)
	{
		run_abort(run, true);
		return -1;
	}
	if (!jail_send_go(run->pre ? run->pre->paygo[1] : run->pipes.go[1], JAIL_GO_RUN))
	{
		jail_seterr(run->err, "signal the sandbox: %s", strerror(errno));
		run_abort(run, true);
		return -1;
	}
	jail_close(&run->pipes.go[1]);
	JAIL_TRACE("go sent");

	/*
	 * Ending on init's report leaves init to be reaped after the verdict:
	 * only where nothing waits on its exit before that, i.e. not a cgroup
	 * of our own, which is removed at the end of the run.
	 */
	run->defer_reap = run->env->defer_reap &&
		(run->cg_borrowed || run->cg.mode == CGROUP_NONE);
	run->phase = JAIL_RUN_RUNNING;
	return 0;
}

/* After the monitor: init reaped for sure, and its report read if sent. */
static void
run_end(JailRun *run)
{
	if (!run->reaped)
	{
		/* only after a poll failure: make sure, then wait */
		jail_run_kill(run);
		waitpid(run->pid, &run->wstatus, 0);
		getrusage(RUSAGE_CHILDREN, &run->ru);
		run->reaped = true;
		run->reaped_at = jail_now_ms();
	}
	if (!run->have_report &&
		read(run->pipes.stat[0], &run->rep, sizeof(run->rep)) == sizeof(run->rep))
		run->have_report = true;
	/* the run's processes, not init's (an exiting report has none) */
	if (run->have_report && run->rep.alone && !run->rep.exiting)
		run->ru = run->rep.ru;
	run->phase = JAIL_RUN_ENDED;
}

/* Post-run workspace check: big files and the total. */
static void
run_rescan_workspace(JailRun *run)
{
	const JailOptions *opts = run->opts;
	uint64_t	total = 0;
	bool		big = false;

	if (run->wsfd >= 0 &&
		(jail_workspace_usage(run->wsfd, opts->file_size, opts->workspace_entries,
							  &total, &big) < 0 ||
		 (big && !run->big_before) ||
		 (opts->workspace_size && total > opts->workspace_size)))
		run->res->file_too_large = true;
	if (run->over_workspace)
		run->res->file_too_large = true;
}

/* Collect: the facts of the run into the result (the output's are in). */
static void
run_collect(JailRun *run)
{
	JailResult *res = run->res;
	const struct rusage *ru = &run->ru;

	res->wall_ms = run->reaped_at - run->start;
	res->cpu_ms = (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000ULL +
		(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000;

	/*
	 * A warm interpreter's start is not the run's: its CPU is reported
	 * apart (the cgroup's counter starts at the request, cpu_base_ms),
	 * its memory is in the run's (it is in the cgroup, as the same
	 * imports would be in a cold run) and reported apart as well.
	 */
	if (res->warm)
	{
		res->warm_cpu_ms = run->have_report ? run->rep.warm_cpu_ms : 0;
		res->cpu_ms = res->cpu_ms > res->warm_cpu_ms ? res->cpu_ms - res->warm_cpu_ms : 0;
		res->warm_memory_bytes = run->env->warm_memory;
	}
	res->peak_memory_bytes = (uint64_t) ru->ru_maxrss * 1024;
	jail_cgroup_collect(&run->cg, res);
	JAIL_TRACE("cgroup collected");
	jail_egress_stop(&run->egress, res);
	run_rescan_workspace(run);
	JAIL_TRACE("workspace rescanned");
	/*
	 * A gvisor run whose sentry the memory limit killed, or that could not
	 * fork at the pids limit (a fork bomb: gVisor's tasks are host
	 * processes under ptrace), ends without the payload's status, and its
	 * child says why runsc failed: that is the payload's doing, not a
	 * setup error (jail_verdict_decide: signaled, SIGKILL).
	 */
	if (run->opts->isolation == JAIL_ISOLATION_GVISOR && !run->have_report &&
		(res->oom_killed || res->pids_limit_hit))
		run->child_err_len = 0;
	if (run->child_err_len > 0)
	{
		run->child_err[run->child_err_len] = '\0';
		snprintf(run->err, sizeof(run->err), "%s", run->child_err);
	}
	run->phase = JAIL_RUN_COLLECTED;
}

/*
 * Finish: the status, then everything the run held released.  A sandbox
 * still alive (a step failed after the start) is killed and reaped here;
 * one cloned ahead that was never taken over is discarded; an init that
 * reported itself alone is left for jail_run_reap.
 */
static int
run_finish(JailRun *run)
{
	JailResult *res = run->res;
	int			rc = -1;

	if (run->phase == JAIL_RUN_COLLECTED)
	{
		JailEnd		end = {
			.setup_error = run->err,
			.have_status = run->have_report,
			.payload_status = run->rep.status,
			.init_status = run->wstatus,
			.over_workspace = run->over_workspace,
			.runtime_at_limit = run->opts->isolation == JAIL_ISOLATION_GVISOR &&
				!run->have_report && res->pids_limit_hit,
			.cpu_limit_ms = run->opts->cpu_ms,
		};

		rc = jail_verdict_decide(res, &end);
	}
	else
		jail_verdict_setup_error(res, run->err);

	if (run->pre && run->phase == JAIL_RUN_PREPARING)
		run_drop_prespawn(run);
	jail_egress_stop(&run->egress, res);	/* if a step failed before collect */
	if (run->init_pending)
		pending_init = run->pid;
	else if (run->pid > 0 && !run->reaped)
	{
		jail_run_kill(run);
		waitpid(run->pid, &run->wstatus, 0);
	}
	if (res->cgroup == CGROUP_NONE)
		res->cgroup = run->cg.mode;
	if (!run->cg_borrowed)
		jail_cgroup_destroy(&run->cg);
	jail_pipes_close(&run->pipes);
	jail_close(&run->sigfd);
	jail_close(&run->pidfd);
	jail_close(&run->wsfd);
	jail_close(&run->image_lock);
	if (!run->env->filter)
		free(run->filter.insns);
	return rc;
}

/*
 * Run the payload once.  Returns 0 when it ran (whatever it did) and -1 on
 * a setup error, with res->setup_error set.  res is always filled in.
 * env NULL: a one-shot run (our stdout, stderr, signals).
 */
int
jail_run(const JailOptions *opts, const char *code, size_t code_len,
		 const JailRunEnv *env, JailResult *res)
{
	JailRun		run;

	run_init(&run, opts, code, code_len, env, res);
	if (run_prepare(&run) == 0 && run_start(&run) == 0 && run_go(&run) == 0)
	{
		jail_monitor(&run);
		JAIL_TRACE("monitor done");
		run_end(&run);
		run_collect(&run);
	}
	return run_finish(&run);
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
