/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Shared state between backends and the supervisor worker, and the
 *		commit-time wake-up.
 *
 * The one commit-time wake-up of the extension: a trigger or function
 * only marks the transaction (sandbox_wake_at_commit), and a transaction
 * callback acts once the commit is durable, so that no process wakes to
 * look for a row it cannot see yet (the pattern pg_net uses).  A
 * rolled-back transaction wakes nobody.  The exporter's triggers are
 * handed to sandbox_export_wake_now() (export_state.c).
 *
 * Backends waiting in agent.wait() sleep on a condition variable that is
 * broadcast when a transaction that ended an invocation commits, whichever
 * process committed it (the supervisor, a runner host's backend, a backend
 * that cancelled or denied): the state trigger marks the transaction
 * (SANDBOX_WAKE_FINISHED, src/guards.c) and the callback broadcasts.
 *
 * Runs are found by the runners (the local one too), never by the
 * supervisor: approvals and cancels reach them as NOTIFY on the channels
 * of channels.h (agent._wake_supervisor() and
 * agent._wake_supervisor_cancel()), delivered by PostgreSQL at commit
 * (never for a rolled-back transaction), whether or not the library is
 * preloaded.  The supervisor's latch is not set for them: its loop has
 * nothing to do with either.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "commands/async.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

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
	RequestAddinShmemSpace(sandbox_refusals_shmem_size());
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
	sandbox_refusals_shmem_startup();
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

static void
sandbox_xact_callback(XactEvent event, void *arg)
{
	int			what = wake_pending;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			wake_pending = 0;
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
 * agent._wake_supervisor(): wake the runners, the local one too, when this
 * transaction commits (NOTIFY on SANDBOX_CHANNEL_WORK, delivered at
 * commit; PostgreSQL folds repeats within a transaction into one).  Cheap
 * and idempotent; returns false when the library is not preloaded (there
 * is no supervisor, hence no local runner; remote runners are notified
 * all the same).
 */
Datum
sandbox_wake_supervisor(PG_FUNCTION_ARGS)
{
	Async_Notify(SANDBOX_CHANNEL_WORK, NULL);
	PG_RETURN_BOOL(sandbox_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_wake_runners);

/*
 * agent._wake_runners(invocation): as agent._wake_supervisor(), naming the
 * invocation that became claimable (the payload: its id), which a runner
 * tries first (agent.runner_claim's notified).  A hint only: any role may
 * NOTIFY any channel, and the claim never lets a name jump the queue.
 */
Datum
sandbox_wake_runners(PG_FUNCTION_ARGS)
{
	char	   *id = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(0)));

	Async_Notify(SANDBOX_CHANNEL_WORK, id);
	PG_RETURN_BOOL(sandbox_shared != NULL);
}

PG_FUNCTION_INFO_V1(sandbox_wake_supervisor_cancel);

/*
 * agent._wake_supervisor_cancel(): tell the runners that a cancel request
 * committed (NOTIFY on SANDBOX_CHANNEL_CANCEL), so that they look for
 * cancelled runs only then, not on every approval's wake-up.  Returns as
 * agent._wake_supervisor() does.
 */
Datum
sandbox_wake_supervisor_cancel(PG_FUNCTION_ARGS)
{
	Async_Notify(SANDBOX_CHANNEL_CANCEL, NULL);
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
