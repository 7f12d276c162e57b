/*-------------------------------------------------------------------------
 *
 * supervisor.c
 *		The supervisor: the background worker that runs approved
 *		invocations in sandbox-jail.  This file owns the worker's life and
 *		its loop: start-up and recovery, the wait set, deadlines, reload and
 *		shutdown.  What a run is (run.c), how its jail starts and ends
 *		(launch.c), its output (output.c), its disk (workdir.c) and its
 *		steps in the database (steps.c) live in their own files;
 *		supervisor.h lists them.
 *
 * One worker, registered from _PG_init when the library is preloaded,
 * connected to sandbox.database.  Each turn of the loop:
 *
 *	1. fill free slots: claim approved invocations (charged, in one short
 *	   transaction that commits before any jail starts) and start them;
 *	2. wait on one WaitEventSet holding the latch, postmaster death, every
 *	   pipe and every pidfd; the timeout is the nearest deadline;
 *	3. read what arrived; SIGKILL a jail past its backstop;
 *	4. store the output of the turn (one transaction), act on cancels;
 *	5. finish every run whose jail is gone, apply results that were staged
 *	   behind a lock, and sweep what the database no longer needs on disk.
 *
 * No transaction is open while code runs.  Every state change is fenced on
 * the expected previous state in SQL, so when this process dies at any
 * point the next incarnation's recovery (agent._supervisor_recover)
 * resolves what was left in flight, by the same billing rule.  On SIGTERM
 * we kill our jails and exit with status 1 so the postmaster restarts us
 * (unless it is itself shutting down).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "sandbox_ext.h"
#include "supervisor.h"

PGDLLEXPORT void sandbox_supervisor_main(Datum main_arg);

/* Slow poll: a backstop for a lost wake-up, not the way work is found. */
#define IDLE_POLL_MS		10000
/* How often results staged behind a held lock are tried again. */
#define PENDING_RETRY_MS	1000
/* Sweeps are at most this often, and wanted after anything that may have
 * ended a session or detached a skill: a wake-up, a claim, a finish. */
#define SWEEP_INTERVAL_MS	1000
/* A one-shot jail without a pidfd is polled with waitpid() this often. */
#define REAP_POLL_MS		100
/*
 * Backstop for every lock the supervisor's transactions take: the SQL steps
 * skip or refuse (NOWAIT) the locks a backend can hold, so a wait this long
 * means a lock nobody foresaw, and the step is retried rather than stall
 * every tenant behind it.
 */
#define SUPERVISOR_LOCK_TIMEOUT "500ms"

static TimestampTz pending_retry_at = 0;
static TimestampTz last_sweep = 0;
static bool sweep_wanted = true;

/* ----------------------------------------------------------------
 * Start-up and shutdown
 * ----------------------------------------------------------------
 */

/* Publish whether an approval should wake us (shmem.c). */
static void
set_wants_work(void)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_wants_work = sandbox_free_slots() > 0;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
supervisor_shmem_exit(int code, Datum arg)
{
	sandbox_runs_kill_all();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = 0;
	sandbox_shared->supervisor_latch = NULL;
	sandbox_shared->slots_in_use = 0;
	for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
		sandbox_shared->slots[i].in_use = false;
	SpinLockRelease(&sandbox_shared->mutex);
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

static void
handle_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
	if (ShutdownRequestPending)
	{
		elog(LOG, "supervisor shutting down; %d run(s) killed", sandbox_nactive);
		proc_exit(1);
	}
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		if (!sandbox_jail_launcher)
			sandbox_launcher_stop();
		(void) sandbox_work_dir_usable(true);
	}
}

static bool
extension_installed(void)
{
	bool		found = false;

	sandbox_xact_begin("checking for the extension");
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'sandbox_ext'",
					true, 1) == SPI_OK_SELECT)
		found = SPI_processed > 0;
	sandbox_xact_commit();
	return found;
}

/* Connect, publish ourselves, wait for the extension, recover, get ready. */
static void
supervisor_start(void)
{
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/*
	 * A cancel means nothing to the worker (its steps are short and bounded
	 * by lock_timeout); handled as a query cancel it would end the worker,
	 * and with it every run in flight.
	 */
	pqsignal(SIGINT, SIG_IGN);
	BackgroundWorkerUnblockSignals();
	if (sandbox_shared == NULL)
		elog(FATAL, "sandbox_ext shared memory is not initialised");

	BackgroundWorkerInitializeConnection(sandbox_database, NULL, 0);
	pgstat_report_appname("sandbox_ext supervisor");
	/* No step of ours may wait long for a lock a tenant holds. */
	SetConfigOption("lock_timeout", SUPERVISOR_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = MyProcPid;
	sandbox_shared->supervisor_latch = &MyProc->procLatch;
	sandbox_shared->supervisor_wants_work = true;
	sandbox_shared->supervisor_started_at = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_shared->mutex);
	before_shmem_exit(supervisor_shmem_exit, (Datum) 0);

	/* The extension may be created after the server starts: wait for it. */
	while (!extension_installed())
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 IDLE_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		handle_interrupts();
	}

	(void) sandbox_work_dir_usable(true);
	sandbox_step_recover();
	sandbox_clean_work_root();
	sandbox_runs_init();
	(void) sandbox_launcher_ensure();
	elog(LOG, "supervisor started (database \"%s\", %d slots, jail \"%s\", work directory \"%s\")",
		 sandbox_database, sandbox_max_concurrent_runs, sandbox_jail_path, sandbox_work_root());
}

/* ----------------------------------------------------------------
 * One turn of the loop
 * ----------------------------------------------------------------
 */

/*
 * Claim and start runs for the free slots.  A full claim means more may be
 * waiting.  Whether a slot is free is published first (approvals wake us
 * only then; see sandbox_wake_supervisor_now) and again once filled.
 */
static void
fill_slots(void)
{
	ClaimedRun	claimed[SANDBOX_MAX_SLOTS];

	set_wants_work();
	for (;;)
	{
		int			want = sandbox_free_slots();
		int			got;
		bool		started = false;

		if (want <= 0 || !sandbox_work_dir_usable(false))
			break;
		got = sandbox_step_claim(want, claimed);
		for (int i = 0; i < got; i++)
		{
			SandboxRun *run = sandbox_run_claim(&claimed[i]);

			sandbox_run_start(run, &claimed[i]);
			started |= (run->phase == RUN_STARTED);
			if (claimed[i].code)
				pfree(claimed[i].code);
		}
		if (started)
			sandbox_step_mark_started();
		if (got > 0)
			sweep_wanted = true;
		if (got < want)
			break;
	}
	set_wants_work();
}

/* Milliseconds to wait: the nearest deadline of any run, or the poll. */
static long
wait_timeout(TimestampTz next_poll)
{
	TimestampTz now = GetCurrentTimestamp();
	long		timeout = Max(TimestampDifferenceMilliseconds(now, next_poll), 0);

	for (int i = 0; i < sandbox_nruns; i++)
	{
		SandboxRun *run = &sandbox_runs[i];
		long		ms = sandbox_output_due_ms(run, now);
		TimestampTz at;

		if (run->phase == RUN_FREE)
			continue;
		if (ms >= 0)
			timeout = Min(timeout, ms);
		if (run->phase == RUN_STARTED && !run->jail.served && run->jail.pidfd < 0)
			timeout = Min(timeout, REAP_POLL_MS);
		switch (run->phase)
		{
			case RUN_STARTED:
				at = run->jail.backstop;
				break;
			case RUN_EXITED:
				at = TimestampTzPlusMilliseconds(run->jail.exited_at, DRAIN_GRACE_MS);
				break;
			case RUN_RECORD_RETRY:
				at = run->retry_at;
				break;
			default:
				at = now;
				break;
		}
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, at), 0));
	}
	if (sandbox_results_pending)
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, pending_retry_at), 0));
	if (sweep_wanted)
		timeout = Min(timeout,
					  Max(TimestampDifferenceMilliseconds(now,
														  TimestampTzPlusMilliseconds(last_sweep,
																					  SWEEP_INTERVAL_MS)), 0));
	return timeout;
}

/*
 * Wait for the latch, postmaster death, a run's pipes or pidfd, or the
 * timeout, and read what arrived.  Returns whether the latch was set;
 * *nevents gets how many events came.
 */
static bool
wait_and_read(TimestampTz next_poll, int *nevents)
{
	WaitEvent	events[SANDBOX_MAX_SLOTS * 4 + 2];
	WaitEventSet *wes;
	bool		latch_set = false;
	MemoryContext cxt = CurrentMemoryContext;

	wes = CreateWaitEventSet(CurrentMemoryContext, sandbox_nruns * 4 + 2);
	AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < sandbox_nruns; i++)
	{
		SandboxRun *run = &sandbox_runs[i];

		for (int st = 0; st < NSTREAMS; st++)
			if (run->out.fd[st] >= 0)
				AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->out.fd[st], NULL, run);
		if (run->jail.verdict_fd >= 0)
			AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->jail.verdict_fd, NULL, run);
		if (run->jail.pidfd >= 0)
			AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->jail.pidfd, NULL, run);
	}
	*nevents = WaitEventSetWait(wes, wait_timeout(next_poll), events, lengthof(events),
								PG_WAIT_EXTENSION);
	for (int e = 0; e < *nevents; e++)
	{
		WaitEvent  *ev = &events[e];
		SandboxRun *run = (SandboxRun *) ev->user_data;

		if (ev->events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			latch_set = true;
		}
		else if (run == NULL)
			continue;
		else if (ev->fd == run->out.fd[STREAM_STDOUT])
			sandbox_output_read(run, STREAM_STDOUT);
		else if (ev->fd == run->out.fd[STREAM_STDERR])
			sandbox_output_read(run, STREAM_STDERR);
		else if (ev->fd == run->jail.verdict_fd)
			sandbox_jail_read_verdict(run);
		else if (ev->fd == run->jail.pidfd)
			sandbox_jail_reap(run);
	}
	FreeWaitEventSet(wes);
	MemoryContextSwitchTo(cxt);
	return latch_set;
}

/* Backstops, jails without a pidfd, and draining what exited jails left. */
static void
check_runs(void)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < sandbox_nruns; i++)
	{
		SandboxRun *run = &sandbox_runs[i];

		if (run->phase == RUN_STARTED && !run->jail.served && run->jail.pidfd < 0)
			sandbox_jail_reap(run);
		if (run->phase == RUN_STARTED && now >= run->jail.backstop && !run->jail.killed_by_us)
		{
			elog(WARNING, "jail of invocation %s passed its deadline; killing it", run->idstr);
			run->jail.killed_by_us = true;
			sandbox_jail_signal(run, SIGKILL);
		}
		if (run->phase == RUN_EXITED)
		{
			for (int st = 0; st < NSTREAMS; st++)
				if (run->out.fd[st] >= 0)
					sandbox_output_read(run, st);
			if (run->jail.verdict_fd >= 0)
				sandbox_jail_read_verdict(run);
		}
	}
}

/* Finish what is complete, apply staged results when due, sweep when wanted. */
static void
finish_and_sweep(bool woken)
{
	List	   *live = NIL;
	List	   *skills = NIL;

	for (int i = 0; i < sandbox_nruns; i++)
		if (sandbox_run_complete(&sandbox_runs[i]) && sandbox_run_finish(&sandbox_runs[i]))
			sweep_wanted = true;
	if (sandbox_results_pending && GetCurrentTimestamp() >= pending_retry_at)
	{
		pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_RETRY_MS);
		(void) sandbox_step_finish_pending();
		ConditionVariableBroadcast(&sandbox_shared->finished_cv);
	}
	if (woken)
		sweep_wanted = true;
	if (!sweep_wanted ||
		!TimestampDifferenceExceeds(last_sweep, GetCurrentTimestamp(), SWEEP_INTERVAL_MS))
		return;
	last_sweep = GetCurrentTimestamp();
	sweep_wanted = false;
	if (sandbox_step_sweep_lists(&live, &skills))
		sandbox_sweep(live, skills);
	list_free_deep(live);
	list_free_deep(skills);
}

void
sandbox_supervisor_main(Datum main_arg)
{
	supervisor_start();
	for (;;)
	{
		TimestampTz next_poll;
		bool		woken;
		int			nevents;

		handle_interrupts();
		fill_slots();
		next_poll = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), IDLE_POLL_MS);
		/* what failed to start is finished at once */
		finish_and_sweep(false);
		woken = wait_and_read(next_poll, &nevents);
		check_runs();
		sandbox_output_flush();
		sandbox_step_check_cancellations();
		finish_and_sweep(woken || nevents == 0);
	}
}

/*
 * Register the supervisor.  Called from _PG_init while the postmaster
 * loads shared_preload_libraries.
 */
void
sandbox_supervisor_register(void)
{
	sandbox_register_worker("sandbox_supervisor_main", "sandbox_ext supervisor");
}
