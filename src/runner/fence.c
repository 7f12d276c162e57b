/*-------------------------------------------------------------------------
 *
 * fence.c
 *		The fence's thread: it kills the sandbox of every run whose lease
 *		the runner could not renew in time, at that run's fence deadline,
 *		whatever the main thread is doing then.
 *
 * The main thread does everything else, and it can be held up for longer
 * than a lease has left: a step on a dead link waits for its deadline
 * (db.c: ten seconds, and a second more per megabyte a finish sends), a
 * new connection resolves its host name synchronously (DNS), a finish
 * scans and reads a workspace.  Self-fencing (docs/runners.md) must not
 * wait for it: the database treats a lease as gone at its deadline whether
 * or not the reaper has run, and from then on whatever the sandbox does is
 * no invocation's.  So this thread keeps one entry per slot whose jail is
 * running, with the run's fence deadline (steps.c, step_lease_deadline:
 * from when the claim or the last renewing heartbeat was sent, plus the
 * lease, less SELF_FENCE_MARGIN_MS) and what kills that jail:
 *
 *	one-shot jail	SIGKILL through its pidfd (its pid when it has none); the
 *					sandbox's init dies with the jail (PR_SET_PDEATHSIG), and
 *					with init every process of the sandbox's pid namespace
 *	served run		shutdown(2) of our connection to the launcher, whose
 *					worker kills the sandbox at once when its client hangs
 *					up (src/jail/monitor.c, on_cancel)
 *
 * It sleeps until the nearest deadline or a change, kills what is due,
 * marks it fired and logs.  It closes, frees and reaps nothing, never reads
 * the slot table or the database, and calls no libpq function: the rest
 * of a fence (the result dropped, the disk and the slot given back,
 * run_fence) is the main thread's, when it next looks (step_self_fence,
 * and before it records a result, run_finish).  A fired mark stays until
 * the slot is reset, so the main thread sees it even after the jail's end
 * was read (a killed jail's verdict is never recorded).
 *
 * Locking: one mutex over the table.  The main thread holds it only to
 * change or read an entry (no call that can block, no logging), and
 * disarms an entry before the descriptor or pid it names is closed or
 * reaped (launch.c), so that a kill never reaches a reused descriptor
 * number or pid.  The thread holds it while it kills (two non-blocking
 * system calls per run) and not while it logs.  Every signal is blocked
 * in the thread: the main thread's poll() is the one they wake.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <pthread.h>
#include <sys/pidfd.h>
#include <sys/socket.h>

typedef struct FenceEntry
{
	bool		armed;			/* a running jail, with the handles below */
	bool		fired;			/* killed by this thread; until the slot is reset */
	msec		deadline;		/* kill at or after this (runner_now_ms) */
	int			pidfd;			/* one-shot: the jail's pidfd, or -1 */
	pid_t		pid;			/* one-shot without a pidfd: the jail, else 0 */
	int			sock;			/* served: the launcher connection, or -1 */
	char		id[UUID_STR_LEN];	/* for the log */
} FenceEntry;

static FenceEntry fence_table[RUNNER_MAX_SLOTS];
static pthread_mutex_t fence_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fence_wake;	/* CLOCK_MONOTONIC, as runner_now_ms() */
static bool fence_started = false;

/* Kill what entry e names (under the lock). */
static void
fence_kill(const FenceEntry *e)
{
	if (e->sock >= 0)
		(void) shutdown(e->sock, SHUT_RDWR);
	else if (e->pidfd >= 0)
		(void) pidfd_send_signal(e->pidfd, SIGKILL, NULL, 0);
	else if (e->pid > 0)
		(void) kill(e->pid, SIGKILL);	/* not reaped yet: still our child's */
}

/*
 * The thread: kill every armed entry whose deadline passed, then sleep until
 * the nearest one that has not, or until the main thread changes the table.
 */
static void *
fence_main(void *arg)
{
	(void) arg;
	pthread_mutex_lock(&fence_lock);
	for (;;)
	{
		char		killed[RUNNER_MAX_SLOTS][UUID_STR_LEN];
		int			nkilled = 0;
		msec		now = runner_now_ms();
		msec		next = -1;

		for (int i = 0; i < RUNNER_MAX_SLOTS; i++)
		{
			FenceEntry *e = &fence_table[i];

			if (!e->armed || e->fired || e->deadline == FENCE_NEVER)
				continue;
			if (now >= e->deadline)
			{
				fence_kill(e);
				e->fired = true;
				strlcpy(killed[nkilled++], e->id, UUID_STR_LEN);
			}
			else if (next < 0 || e->deadline < next)
				next = e->deadline;
		}
		if (nkilled > 0)
		{
			/* (logging may block on a full stderr: not under the lock) */
			pthread_mutex_unlock(&fence_lock);
			for (int k = 0; k < nkilled; k++)
				runner_log(RLOG_WARNING, "the lease of invocation %s could not be renewed in time: its sandbox is killed",
						   killed[k]);
			pthread_mutex_lock(&fence_lock);
			continue;
		}
		if (next < 0)
			pthread_cond_wait(&fence_wake, &fence_lock);
		else
		{
			struct timespec ts;

			ts.tv_sec = next / 1000;
			ts.tv_nsec = (next % 1000) * 1000000L;
			(void) pthread_cond_timedwait(&fence_wake, &fence_lock, &ts);
		}
	}
	return NULL;
}

/*
 * Start the thread; false (logged) when it could not be: the runner then
 * cannot keep its promise and must not run sandboxes.
 */
bool
fence_start(void)
{
	pthread_condattr_t ca;
	pthread_t	tid;
	sigset_t	all,
				old;
	int			rc;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fence_wake, &ca);
	pthread_condattr_destroy(&ca);
	/* the thread starts with every signal blocked (it inherits the mask) */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&tid, NULL, fence_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
	{
		errno = rc;
		runner_log(RLOG_FATAL, "could not start the fence's thread: %m");
		return false;
	}
	pthread_detach(tid);
	pthread_mutex_lock(&fence_lock);
	fence_started = true;
	pthread_mutex_unlock(&fence_lock);
	return true;
}

/* Wake the thread to look at the table again (under the lock). */
static void
fence_changed(void)
{
	if (fence_started)
		pthread_cond_signal(&fence_wake);
}

/*
 * A run's jail started: kill it at deadline unless the deadline moves
 * (fence_set_deadline) or the entry is disarmed first.
 */
void
fence_arm(const Run *run, msec deadline)
{
	FenceEntry *e = &fence_table[run->slot];

	pthread_mutex_lock(&fence_lock);
	e->armed = true;
	e->fired = false;
	e->deadline = deadline;
	e->sock = run->jail.served ? run->jail.verdict_fd : -1;
	e->pidfd = run->jail.served ? -1 : run->jail.pidfd;
	e->pid = run->jail.served ? 0 : run->jail.pid;
	strlcpy(e->id, run->id, sizeof(e->id));
	fence_changed();
	pthread_mutex_unlock(&fence_lock);
}

/* The run's lease was renewed, or the lease changed: its new deadline. */
void
fence_set_deadline(const Run *run, msec deadline)
{
	FenceEntry *e = &fence_table[run->slot];

	pthread_mutex_lock(&fence_lock);
	if (e->armed && !e->fired && e->deadline != deadline)
	{
		e->deadline = deadline;
		fence_changed();
	}
	pthread_mutex_unlock(&fence_lock);
}

/*
 * The handles of the run's jail are about to be closed or reaped: the
 * thread must not use them any more.  A fired mark stays.
 */
void
fence_disarm(const Run *run)
{
	FenceEntry *e = &fence_table[run->slot];

	pthread_mutex_lock(&fence_lock);
	e->armed = false;
	e->sock = e->pidfd = -1;
	e->pid = 0;
	pthread_mutex_unlock(&fence_lock);
}

/* The slot is empty (run.c, run_reset): no entry and no mark. */
void
fence_reset(const Run *run)
{
	FenceEntry *e = &fence_table[run->slot];

	pthread_mutex_lock(&fence_lock);
	memset(e, 0, sizeof(*e));
	e->sock = e->pidfd = -1;
	pthread_mutex_unlock(&fence_lock);
}

/* Did the thread kill this run's jail? */
bool
fence_fired(const Run *run)
{
	bool		fired;

	pthread_mutex_lock(&fence_lock);
	fired = fence_table[run->slot].fired;
	pthread_mutex_unlock(&fence_lock);
	return fired;
}
