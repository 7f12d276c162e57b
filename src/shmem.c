/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Shared state between backends and the supervisor worker, and the
 *		commit-time wake-up.
 *
 * The supervisor publishes its latch here.  A backend that approves or
 * cancels an invocation calls agent._wake_supervisor(), which only marks
 * the transaction; the latch is set from a transaction callback once the
 * commit is durable, so the worker never wakes to look for a row it cannot
 * see yet (the pattern pg_net uses).  A rolled-back approval wakes nobody.
 * The one commit-time wake-up of the extension: the exporter's triggers
 * mark the transaction the same way (sandbox_wake_at_commit), and the
 * callback hands them to sandbox_export_wake_now() (export_state.c).
 *
 * Backends waiting in agent.wait() sleep on a condition variable that is
 * broadcast when a transaction that ended an invocation commits, whichever
 * process committed it (the supervisor, a runner host's backend, a backend
 * that cancelled or denied): the state trigger marks the transaction
 * (SANDBOX_WAKE_FINISHED, src/guards.c) and the callback broadcasts.
 *
 * Runner hosts are other processes, on other machines: the same wake-ups
 * reach them as NOTIFY on the channels of channels.h, queued by the same
 * SQL-callable functions and delivered by PostgreSQL at commit (never for
 * a rolled-back transaction), whether or not the library is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"

#include "channels.h"
#include "sandbox_ext.h"

SandboxShared *sandbox_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static int	wake_pending = 0;	/* SANDBOX_WAKE_* of this transaction */
static bool xact_callback_registered = false;

static void
sandbox_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(SandboxShared)));
	RequestAddinShmemSpace(sandbox_export_shmem_size());
}

static void
sandbox_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	sandbox_shared = ShmemInitStruct("sandbox_ext", sizeof(SandboxShared), &found);
	if (!found)
	{
		memset(sandbox_shared, 0, sizeof(SandboxShared));
		SpinLockInit(&sandbox_shared->mutex);
		ConditionVariableInit(&sandbox_shared->finished_cv);
	}
	sandbox_export_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}

void
sandbox_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sandbox_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sandbox_shmem_startup;
}

/*
 * Set the supervisor's latch now, if a supervisor is running.  With
 * only_if_free, only when it has a free run slot: an approval is of no use
 * to a supervisor whose slots are all taken (or that is paused by
 * sandbox.max_concurrent_runs = 0), and it looks at the queue again
 * anyway when a slot frees.  That is race-free because the flag is read
 * after this transaction's commit is visible, and the supervisor raises
 * it before the snapshot of its next look at the queue, both under the
 * spinlock: if we read "no free slot", its next look sees our commit.
 */
void
sandbox_wake_supervisor_now(bool only_if_free)
{
	Latch	   *latch = NULL;

	if (sandbox_shared == NULL)
		return;
	SpinLockAcquire(&sandbox_shared->mutex);
	if (!only_if_free || sandbox_shared->supervisor_wants_work)
		latch = sandbox_shared->supervisor_latch;
	SpinLockRelease(&sandbox_shared->mutex);
	if (latch)
		SetLatch(latch);
}

static void
sandbox_xact_callback(XactEvent event, void *arg)
{
	int			what = wake_pending;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			wake_pending = 0;
			if ((what & SANDBOX_WAKE_CANCEL) && sandbox_shared != NULL)
			{
				SpinLockAcquire(&sandbox_shared->mutex);
				sandbox_shared->cancel_generation++;
				SpinLockRelease(&sandbox_shared->mutex);
			}
			/* a cancel must reach the supervisor even when it is full */
			if (what & (SANDBOX_WAKE_SUPERVISOR | SANDBOX_WAKE_CANCEL))
				sandbox_wake_supervisor_now(!(what & SANDBOX_WAKE_CANCEL));
			if (what & (SANDBOX_WAKE_EXPORTER | SANDBOX_WAKE_EXPORT_RESET))
				sandbox_export_wake_now((what & SANDBOX_WAKE_EXPORT_RESET) != 0);
			/* backends in agent.wait() look again */
			if ((what & SANDBOX_WAKE_FINISHED) && sandbox_shared != NULL)
				ConditionVariableBroadcast(&sandbox_shared->finished_cv);
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_pending = 0;
			break;
		default:
			break;
	}
}

/*
 * Wake `what` (SANDBOX_WAKE_*) when this transaction commits; nothing if
 * it rolls back.  A no-op when the library is not preloaded (no workers).
 */
void
sandbox_wake_at_commit(int what)
{
	if (sandbox_shared == NULL)
		return;
	if (!xact_callback_registered)
	{
		RegisterXactCallback(sandbox_xact_callback, NULL);
		xact_callback_registered = true;
	}
	wake_pending |= what;
}

PG_FUNCTION_INFO_V1(sandbox_wake_supervisor);

/*
 * agent._wake_supervisor(): wake the supervisor when this transaction
 * commits, and the runner hosts (NOTIFY on SANDBOX_CHANNEL_WORK, delivered
 * at commit; PostgreSQL folds repeats within a transaction into one).
 * Cheap and idempotent; returns false when the library is not preloaded
 * (there is no supervisor to wake; runners are notified all the same).
 */
Datum
sandbox_wake_supervisor(PG_FUNCTION_ARGS)
{
	Async_Notify(SANDBOX_CHANNEL_WORK, NULL);
	sandbox_wake_at_commit(SANDBOX_WAKE_SUPERVISOR);
	PG_RETURN_BOOL(sandbox_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_wake_supervisor_cancel);

/*
 * agent._wake_supervisor_cancel(): like agent._wake_supervisor(), and tell
 * the supervisor that a cancel request committed, so that it looks for
 * cancelled runs only then (not on every approval's wake-up); runner hosts
 * get SANDBOX_CHANNEL_CANCEL for the same reason.
 */
Datum
sandbox_wake_supervisor_cancel(PG_FUNCTION_ARGS)
{
	Async_Notify(SANDBOX_CHANNEL_CANCEL, NULL);
	sandbox_wake_at_commit(SANDBOX_WAKE_CANCEL);
	PG_RETURN_BOOL(sandbox_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_is_preloaded);

/*
 * agent.supervisor_available(): true when shared memory exists, i.e. the
 * library was loaded through shared_preload_libraries and a supervisor can
 * run approved invocations.
 */
Datum
sandbox_is_preloaded(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(sandbox_shared != NULL);
}
