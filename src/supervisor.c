/*-------------------------------------------------------------------------
 *
 * supervisor.c
 *		The supervisor: the background worker that keeps the database's
 *		side of running sandboxes.  It runs no sandbox itself: every run is
 *		run by a sandbox-runner (src/runner/, docs/runners.md), and this
 *		worker starts and watches the one on the database host.
 *
 *	the local runner	started as our child (`sandbox-runner --local`),
 *						restarted with backoff when it dies, stopped on
 *						SIGTERM; its settings are the sandbox.* GUCs,
 *						written as its configuration file and re-read on
 *						SIGHUP (all of it local_runner.c's)
 *	staged results		results a runner staged behind a lock a backend
 *						holds are applied here (agent._finish_pending)
 *	refusals			the audit events of refused requests whose caller
 *						rolled back, handed over in shared memory, are
 *						appended (refusals.c)
 *	leases				every few seconds, the invocations whose runner
 *						stopped renewing its lease are ended by the billing
 *						rule (agent.reap_expired_leases; pg_cron does it
 *						too, as a backstop)
 *	worker_status()		what the local runner's slots run, its work
 *						directory and why it claims nothing, in shared
 *						memory (local_runner.c publishes it)
 *
 * The local runner registers like any other (agent.runner_register, as
 * role sandbox_runner_local): its registration ends what its previous
 * process still held.  Wake-ups reach every runner as NOTIFY at commit;
 * when we apply a staged result or reap a lease, which may make a run
 * claimable (the next of a conversation, a freed org slot), we notify them
 * in the same transaction.
 *
 * One worker, registered from _PG_init when the library is preloaded,
 * connected to sandbox.database.  The untrusted workspaces (their scans,
 * copies and deletes) and the jail's lifecycle live in the runner's
 * address space, not the server's: a crash there restarts one runner, not
 * the cluster.  The runner's link is src/runner/local_link.h.
 *
 * On SIGTERM we stop the runner (it kills its jails) and exit with status
 * 1 so the postmaster restarts us (unless it is itself shutting down); our
 * next start resolves what was in flight.  If we die any other way the
 * runner sees EOF on its link and its parent-death signal, and stops.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <unistd.h>

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "sandbox_ext.h"

PGDLLEXPORT void sandbox_supervisor_main(Datum main_arg);

/* Slow poll: a backstop for a lost wake-up, not the way work is found. */
#define IDLE_POLL_MS		10000
/* How often results staged behind a held lock are tried again. */
#define PENDING_RETRY_MS	1000
/* How often expired leases are reaped (and staged results looked for). */
#define REAP_INTERVAL_MS	5000
/*
 * Backstop for every lock the supervisor's transactions take: the SQL steps
 * skip or refuse (NOWAIT) the locks a backend can hold, so a wait this long
 * means a lock nobody foresaw, and the step is retried rather than stall
 * every tenant behind it.
 */
#define SUPERVISOR_LOCK_TIMEOUT "500ms"

static bool results_pending = true;
static TimestampTz pending_retry_at = 0;
static TimestampTz next_reap = 0;

/* ----------------------------------------------------------------
 * The supervisor's own steps
 * ----------------------------------------------------------------
 */

/*
 * Resolve what an in-database supervisor of an older version left in
 * flight (rows without a runner; a runner's rows end with its lease or its
 * next registration).  On failure the worker exits and is restarted.
 */
static void
step_recover(void)
{
	PG_TRY();
	{
		int			rc;

		sandbox_xact_begin("recovering invocations left by a previous supervisor");
		rc = SPI_execute("SELECT agent._supervisor_recover()", false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._supervisor_recover failed: %s", SPI_result_code_string(rc));
		sandbox_xact_commit();
		/* what stayed staged behind a lock is applied from the loop */
		results_pending = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "recovering invocations");
		proc_exit(1);
	}
	PG_END_TRY();
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

/*
 * Apply results staged behind a lock held elsewhere, at most 32 (so that a
 * tenant holding many locks cannot make one turn of the loop long).  When
 * any was applied, the local runner is told: the next run of that
 * conversation may be claimable now.
 */
static void
step_finish_pending(void)
{
	int			before = -1;
	int			left = -1;

	PG_TRY();
	{
		bool		isnull;
		Datum		d;

		sandbox_xact_begin("applying staged results");
		/* (0: apply none, only count them) */
		if (SPI_execute("SELECT agent._finish_pending(0)", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent._finish_pending failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		before = isnull ? 0 : DatumGetInt32(d);
		left = before;
		if (before > 0)
		{
			if (SPI_execute("SELECT agent._finish_pending(32)", false, 1) != SPI_OK_SELECT ||
				SPI_processed != 1)
				elog(ERROR, "agent._finish_pending failed");
			d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
			left = isnull ? 0 : DatumGetInt32(d);
		}
		/* what ended may make a run claimable: runners look at commit */
		if (left < before && SPI_execute("SELECT agent._wake_supervisor()", false, 1) != SPI_OK_SELECT)
			elog(ERROR, "agent._wake_supervisor failed");
		sandbox_xact_commit();
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "applying staged results");
		before = left = -1;
	}
	PG_END_TRY();
	if (left >= 0)
		results_pending = left > 0;
}

/*
 * End the invocations whose runner stopped renewing its lease (the runner
 * died, its host is gone, its network is cut): agent.reap_expired_leases,
 * by the billing rule, audited.  Runners are told at commit when any
 * ended (their org's slots are free again).
 */
static void
step_reap_leases(void)
{
	PG_TRY();
	{
		bool		isnull;
		Datum		d;
		int			n;

		sandbox_xact_begin("reaping expired runner leases");
		if (SPI_execute("SELECT agent.reap_expired_leases()", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent.reap_expired_leases failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		n = isnull ? 0 : DatumGetInt32(d);
		if (n > 0 && SPI_execute("SELECT agent._wake_supervisor()", false, 1) != SPI_OK_SELECT)
			elog(ERROR, "agent._wake_supervisor failed");
		sandbox_xact_commit();
		if (n > 0)
			results_pending = true;	/* some may be staged behind a lock */
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "reaping expired runner leases");
	}
	PG_END_TRY();
}

/* ----------------------------------------------------------------
 * Start-up and shutdown
 * ----------------------------------------------------------------
 */

static void
supervisor_shmem_exit(int code, Datum arg)
{
	sandbox_refusals_detach();
	sandbox_local_runner_stop();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = 0;
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
		elog(LOG, "supervisor shutting down; stopping the local runner");
		proc_exit(1);
	}
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
		sandbox_local_runner_reload();
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

/* Connect, publish ourselves, wait for the extension, recover. */
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
	sandbox_local_runner_init();

	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = MyProcPid;
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
	step_recover();
	sandbox_refusals_attach(MyLatch);
	(void) sandbox_local_runner_configure();
	elog(LOG, "supervisor started (database \"%s\", local runner %s)", sandbox_database,
		 sandbox_local_runner ? "on" : "off");
}

/* ----------------------------------------------------------------
 * The loop
 * ----------------------------------------------------------------
 */

static long
wait_timeout(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		timeout = IDLE_POLL_MS;

	if (results_pending)
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, pending_retry_at), 0));
	timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, next_reap), 0));
	return sandbox_local_runner_timeout(timeout);
}

void
sandbox_supervisor_main(Datum main_arg)
{
	supervisor_start();
	for (;;)
	{
		WaitEventSet *wes;
		WaitEvent	events[4];
		int			n;
		bool		staged = false;

		handle_interrupts();
		sandbox_local_runner_ensure();
		wes = CreateWaitEventSet(CurrentMemoryContext, 4);
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		sandbox_local_runner_wait_on(wes);
		n = WaitEventSetWait(wes, wait_timeout(), events, lengthof(events), PG_WAIT_EXTENSION);
		FreeWaitEventSet(wes);
		for (int e = 0; e < n; e++)
		{
			if (events[e].events & WL_LATCH_SET)
				ResetLatch(MyLatch);
			else
				sandbox_local_runner_event(events[e].fd, &staged);
		}
		sandbox_local_runner_poll();
		if (sandbox_refusals_write())
			SetLatch(MyLatch);	/* more queued than one turn writes */
		if (staged)
		{
			results_pending = true;
			pending_retry_at = 0;
		}
		if (GetCurrentTimestamp() >= next_reap)
		{
			next_reap = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REAP_INTERVAL_MS);
			step_reap_leases();
			results_pending = true;	/* a remote runner's staged result: looked for as often */
		}
		if (results_pending && GetCurrentTimestamp() >= pending_retry_at)
		{
			pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_RETRY_MS);
			step_finish_pending();
		}
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
