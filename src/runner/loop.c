/*-------------------------------------------------------------------------
 *
 * loop.c
 *		The runner's loop: one poll() over every descriptor it waits for,
 *		with the nearest deadline as its timeout.  Each turn:
 *
 *	1. fill free slots when there may be work (a wake-up, a free slot, the
 *	   slow poll): claim approved invocations (charged, in one short
 *	   transaction that commits before any jail starts) and start them;
 *	2. wait on the signal pipe, the supervisor's link (--local: its EOF), the
 *	   database socket (notifications, or connecting), every pipe and
 *	   every pidfd of a run;
 *	3. read what arrived; SIGKILL a jail past its backstop;
 *	4. store the output of the turn, act on cancels;
 *	5. finish every run whose jail is gone, and sweep what the database no
 *	   longer needs on disk.
 *
 * Wake-ups are hints: LISTEN sandbox_ext_work / sandbox_ext_cancel
 * (channels.h), with a slow poll as the backstop for a lost one.  While
 * the database cannot be reached the loop goes on: jails run, their
 * output waits, finished runs wait to be recorded, and the connection is
 * made again with backoff.
 *
 * Leases (steps.c): the runner registers when it first connects, renews
 * every lease it holds with one heartbeat every heartbeat_seconds, and
 * fences itself, killing every sandbox, when it could not renew for a
 * lease's length.  The kill does not wait for this loop: the fence's
 * thread (fence.c) does it at the deadline wherever the loop is (a step
 * on a dead link, a connection, a finish); the loop drops those runs'
 * results and frees their slots when it next looks, at the top of every
 * turn and after every wait.  A connection made again does not register
 * again (that would end our own runs): it heartbeats, and the database
 * says which leases we lost meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "local_link.h"

/* Slow poll: a backstop for a lost wake-up, not the way work is found. */
#define IDLE_POLL_MS		10000
/* Sweeps are at most this often, and wanted after anything that may have
 * ended a session or detached a skill: a wake-up, a claim, a finish. */
#define SWEEP_INTERVAL_MS	1000
/* A one-shot jail without a pidfd is polled with waitpid() this often. */
#define REAP_POLL_MS		100

volatile sig_atomic_t shutdown_requested = 0;
volatile sig_atomic_t reload_requested = 0;
int			signal_pipe[2] = {-1, -1};

static bool claim_wanted = true;
/*
 * Approved work may be waiting that the last claim did not take: it was
 * full, or a wake-up came while every slot was busy.  Only then does a
 * finished run's free slot claim at once; otherwise the next wake-up does
 * (an approval, and a finish that frees an org's slot while that org has
 * work waiting, agent._apply_result), or the slow poll.
 */
static bool backlog_possible = true;
static bool cancel_wanted = false;
static bool sweep_wanted = true;
static msec last_sweep = 0;
static msec next_poll = 0;
static msec cancel_retry_at = 0;	/* a failed look for cancels: not before */

/* ---- configuration ---- */

extern const char *runner_config_path;

void
runner_reload(void)
{
	RunnerConfig c;
	char	   *err = NULL;

	reload_requested = 0;
	if (!runner_config_load(runner_config_path, &c, &err))
	{
		runner_log(RLOG_WARNING, "%s; the configuration is unchanged", err);
		free(err);
		return;
	}
	if (strcmp(c.conninfo, runner_conf.conninfo) != 0)
		runner_log(RLOG_LOG, "the connection string changed: it applies from the next connection");
	/* the database's count of our slots follows at once: the claim heeds it */
	if (c.slots != runner_conf.slots)
		me.next_heartbeat = 0;
	runner_config_free(&runner_conf);
	runner_conf = c;
	if (!runner_conf.jail_launcher)
		launcher_stop();
	(void) workdir_usable(true);
	isolation_reprobe();		/* runsc installed since, or runsc_path changed */
	status_dirty = true;
	claim_wanted = true;		/* more slots, or a usable work directory */
}

/* ---- one turn ---- */

/*
 * Claim and start runs for the free slots.  A full claim means more may be
 * waiting.
 */
static void
fill_slots(void)
{
	ClaimedRun	claimed[RUNNER_MAX_SLOTS];

	claim_wanted = false;
	for (;;)
	{
		int			want = run_free_slots();
		int			got;

		if (want <= 0)
			backlog_possible = true;	/* woken while full */
		if (want <= 0 || !db_connected() || !workdir_usable(false))
			break;
		got = step_claim(want, claimed);
		/* (a failed claim: what waits is still there) */
		backlog_possible = (got < 0 || got >= want);
		got = Max(got, 0);
		for (int i = 0; i < got; i++)
		{
			Run		   *run = run_claim(&claimed[i]);

			if (run)
				run_start(run, &claimed[i]);	/* reported running later */
			free(claimed[i].code);
		}
		if (got > 0)
			sweep_wanted = true;
		if (got < want)
			break;
	}
}

/* Milliseconds to wait: the nearest deadline of any run, or the poll. */
static int
wait_timeout(void)
{
	msec		now = runner_now_ms();
	msec		timeout = Max(next_poll - now, 0);

	if (!db_connected())
		timeout = Min(timeout, Max(db_next_attempt() - now, 0));
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];
		long		ms = output_due_ms(run, now);
		msec		at;

		if (run->phase == RUN_FREE)
			continue;
		if (ms >= 0)
			timeout = Min(timeout, ms);
		if (me.lease_ms > 0)
			timeout = Min(timeout, Max(step_lease_deadline(run) - now, 0));
		if (run->phase == RUN_STARTED && !run->jail.served && run->jail.pidfd < 0)
			timeout = Min(timeout, REAP_POLL_MS);
		switch (run->phase)
		{
			case RUN_STARTED:
				at = run->jail.backstop;
				break;
			case RUN_EXITED:
				at = run->jail.exited_at + DRAIN_GRACE_MS;
				break;
			case RUN_RECORD_RETRY:
				at = run->retry_at;
				break;
			default:
				at = now;
				break;
		}
		timeout = Min(timeout, Max(at - now, 0));
	}
	if (sweep_wanted)
		timeout = Min(timeout, Max(last_sweep + SWEEP_INTERVAL_MS - now, 0));
	if (step_mark_due() >= 0 && db_connected())
		timeout = Min(timeout, Max(step_mark_due() - now, 0));
	if (me.registered && db_connected())
		timeout = Min(timeout, Max(me.next_heartbeat - now, 0));
	if (db_connected() && claim_wanted && run_free_slots() > 0)
		timeout = 0;
	if (db_connected() && cancel_wanted)
		timeout = Min(timeout, Max(cancel_retry_at - now, 0));
	return (int) Min(timeout, IDLE_POLL_MS);
}

typedef enum FdKind
{
	FD_SIGNAL,
	FD_LINK,
	FD_DB,
	FD_STDOUT,
	FD_STDERR,
	FD_VERDICT,
	FD_PIDFD
} FdKind;

/* What one poll() waits on: each descriptor's kind and run. */
#define WAIT_MAX_FDS	(RUNNER_MAX_SLOTS * 4 + 3)

typedef struct WaitSet
{
	struct pollfd pfd[WAIT_MAX_FDS];
	FdKind		kind[WAIT_MAX_FDS];
	Run		   *owner[WAIT_MAX_FDS];
	int			n;
} WaitSet;

static void
wait_add(WaitSet *ws, int fd, short events, FdKind kind, Run *run)
{
	ws->pfd[ws->n].fd = fd;
	ws->pfd[ws->n].events = events;
	ws->pfd[ws->n].revents = 0;
	ws->kind[ws->n] = kind;
	ws->owner[ws->n] = run;
	ws->n++;
}

/* The signal pipe, the link, the database, every run's pipes and pidfd. */
static void
wait_build(WaitSet *ws)
{
	ws->n = 0;
	wait_add(ws, signal_pipe[0], POLLIN, FD_SIGNAL, NULL);
	if (link_fd >= 0)
		wait_add(ws, link_fd, POLLIN, FD_LINK, NULL);
	if (db_socket() >= 0)
		wait_add(ws, db_socket(), db_poll_events(), FD_DB, NULL);
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (run->out.fd[STREAM_STDOUT] >= 0)
			wait_add(ws, run->out.fd[STREAM_STDOUT], POLLIN, FD_STDOUT, run);
		if (run->out.fd[STREAM_STDERR] >= 0)
			wait_add(ws, run->out.fd[STREAM_STDERR], POLLIN, FD_STDERR, run);
		if (run->jail.verdict_fd >= 0)
			wait_add(ws, run->jail.verdict_fd, POLLIN, FD_VERDICT, run);
		if (run->jail.pidfd >= 0)
			wait_add(ws, run->jail.pidfd, POLLIN, FD_PIDFD, run);
	}
}

/*
 * Read what descriptor e of the set has.  A run's descriptor is read only
 * if it is still the run's (an earlier event of this turn may have closed
 * it).
 */
static void
wait_read(const WaitSet *ws, int e, bool *connected_now)
{
	Run		   *run = ws->owner[e];
	int			fd = ws->pfd[e].fd;
	bool		eof = false;

	switch (ws->kind[e])
	{
		case FD_SIGNAL:
			{
				char		buf[64];

				while (read(signal_pipe[0], buf, sizeof(buf)) > 0)
					;
			}
			break;
		case FD_LINK:
			link_read(&eof);
			if (eof)
			{
				runner_log(RLOG_LOG, "the supervisor is gone; shutting down");
				shutdown_requested = 1;
			}
			break;
		case FD_DB:
			db_progress(ws->pfd[e].revents, connected_now, &claim_wanted, &cancel_wanted);
			break;
		case FD_STDOUT:
			if (run->out.fd[STREAM_STDOUT] == fd)
				output_read(run, STREAM_STDOUT);
			break;
		case FD_STDERR:
			if (run->out.fd[STREAM_STDERR] == fd)
				output_read(run, STREAM_STDERR);
			break;
		case FD_VERDICT:
			if (run->jail.verdict_fd == fd)
				jail_read_verdict(run);
			break;
		case FD_PIDFD:
			if (run->jail.pidfd == fd)
				jail_reap(run);
			break;
	}
}

/*
 * The heartbeat (steps.c), and then which images and secrets keys we hold
 * if that changed since we last said (images.c, secrets.c: one stat each).
 * A key newly held may make a waiting run with secrets ours: claim.
 */
static void
heartbeat(void)
{
	(void) step_heartbeat();
	if (me.registered && db_connected())
	{
		images_report();
		if (secrets_report())
			claim_wanted = true;
	}
}

/*
 * A connection was just made: LISTEN, then heartbeat (or register, the
 * first time).  False when one of them failed: the next attempt follows.
 */
static bool
connection_made(void)
{
	if (!db_listen())
		return false;			/* it broke again */
	if (me.registered && !step_heartbeat() && db_connected() && me.registered)
		return false;			/* not renewed: it is tried again shortly */
	if (!me.registered && !step_register())
	{
		if (db_connected())
			db_disconnect("the runner could not register");
		return false;
	}
	db_accepted();
	runner_log(RLOG_LOG, "%s", db_status());
	images_report();			/* what it holds, before it claims */
	(void) secrets_report();
	isolation_report();			/* what it runs, too */
	claim_wanted = cancel_wanted = sweep_wanted = true;
	status_dirty = true;
	return true;
}

/*
 * Wait for a signal, the link, the database, a run's pipes or pidfd, or
 * the timeout, and read what arrived.  Returns whether anything woke us
 * that may mean work (a wake-up, a connection); *nevents gets how many
 * descriptors were ready.
 */
static bool
wait_and_read(int *nevents)
{
	WaitSet		ws;
	int			rc;
	bool		connected_now = false;
	bool		db_seen = false;

	/* what a step read meanwhile: claim (or cancel) now, do not wait */
	db_take_wakeups(&claim_wanted, &cancel_wanted);

	wait_build(&ws);
	rc = poll(ws.pfd, ws.n, wait_timeout());
	*nevents = Max(rc, 0);
	for (int e = 0; rc > 0 && e < ws.n; e++)
	{
		if (ws.pfd[e].revents == 0)
			continue;
		wait_read(&ws, e, &connected_now);
		db_seen |= ws.kind[e] == FD_DB;
	}
	/* connect attempts and their timeouts are driven without an event too */
	if (!db_seen && !db_connected())
		db_progress(0, &connected_now, &claim_wanted, &cancel_wanted);
	if (connected_now)
		connected_now = connection_made();
	return connected_now || claim_wanted;
}

/* Backstops, jails without a pidfd, and draining what exited jails left. */
static void
check_runs(void)
{
	msec		now = runner_now_ms();

	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (run->phase == RUN_STARTED && !run->jail.served && run->jail.pidfd < 0)
			jail_reap(run);
		if (run->phase == RUN_STARTED && now >= run->jail.backstop && !run->jail.killed_by_us)
		{
			runner_log(RLOG_WARNING, "jail of invocation %s passed its deadline; killing it", run->id);
			run->jail.killed_by_us = true;
			jail_signal(run, SIGKILL);
		}
		if (run->phase == RUN_EXITED)
		{
			for (int st = 0; st < NSTREAMS; st++)
				if (run->out.fd[st] >= 0)
					output_read(run, st);
			if (run->jail.verdict_fd >= 0)
				jail_read_verdict(run);
		}
	}
}

/* Finish what is complete, sweep when wanted. */
static void
finish_and_sweep(bool woken)
{
	StrList		live = {0};
	StrList		skills = {0};

	for (int i = 0; i < nruns; i++)
	{
		/* a finish may take seconds (a flood of files): renew between them */
		if (me.registered && db_connected() && runner_now_ms() >= me.next_heartbeat)
			heartbeat();
		if (run_complete(&runs[i]) && run_finish(&runs[i]))
		{
			sweep_wanted = true;
			if (backlog_possible)
				claim_wanted = true;	/* a slot is free for what waits */
		}
	}
	if (woken)
		sweep_wanted = true;
	if (!sweep_wanted || runner_now_ms() - last_sweep < SWEEP_INTERVAL_MS || !db_connected())
		return;
	last_sweep = runner_now_ms();
	sweep_wanted = false;
	if (step_sweep_lists(&live, &skills))
		workdir_sweep(&live, &skills);
	strlist_free(&live);
	strlist_free(&skills);
}

void
runner_loop(void)
{
	db_start_connect();
	next_poll = runner_now_ms() + IDLE_POLL_MS;
	while (!shutdown_requested)
	{
		bool		woken;
		int			nevents;

		if (reload_requested)
		{
			runner_reload();
			if (db_connected())
				isolation_report();	/* the new probe's classes (else at the next connect) */
		}
		/* renew our leases; kill our sandboxes if we could not for too long */
		if (me.registered && db_connected() && runner_now_ms() >= me.next_heartbeat)
			heartbeat();
		step_self_fence();
		if (!me.registered && db_connected() && !step_register())
			db_disconnect("the runner could not register");
		if (runner_now_ms() >= next_poll)
		{
			next_poll = runner_now_ms() + IDLE_POLL_MS;
			claim_wanted = cancel_wanted = true;
		}
		if (claim_wanted)
			fill_slots();
		/* what failed to start is finished at once */
		finish_and_sweep(false);
		link_send_status();
		woken = wait_and_read(&nevents);
		if (shutdown_requested)
			break;
		/* (a connection made in the wait heartbeats, and may have waited) */
		step_self_fence();
		check_runs();
		if (step_mark_due() >= 0 && step_mark_due() <= runner_now_ms() && db_connected())
			step_mark_started();
		output_flush();
		if (cancel_wanted && db_connected() && runner_now_ms() >= cancel_retry_at)
		{
			if (step_check_cancellations())
				cancel_wanted = false;
			else
				cancel_retry_at = runner_now_ms() + 1000;
		}
		finish_and_sweep(woken || nevents == 0);
		link_send_status();
	}
}
