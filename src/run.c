/*-------------------------------------------------------------------------
 *
 * run.c
 *		The supervisor's slot table and a run's life in it: its phases
 *		(supervisor.h, RunPhase) and one function per transition, and
 *		finishing a run.
 *
 *	claim	FREE -> CLAIMED			the claim committed: the run is charged
 *	start	CLAIMED -> STARTED		its directory, files and skills are in
 *			CLAIMED -> UNSTARTED	place and the jail started, or it failed
 *	exited	STARTED -> EXITED		the jail is gone (pidfd, EOF of the
 *									launcher's connection, our SIGKILL)
 *	finish	EXITED/UNSTARTED/RECORD_RETRY -> FREE, or -> RECORD_RETRY
 *
 * Finishing: read what the run left (its files; for a session, what the
 * workspace holds), give back its disk, then record the result in one
 * transaction (agent._finish_invocation stages it and applies it by the
 * billing rule).  The slot is free as soon as the result is durable, even
 * when applying it has to wait for a lock a backend holds: the staged
 * result is applied on a later turn.  A result that cannot be recorded at
 * all still ends the row, as a failure of ours with the reason; only when
 * even that cannot commit (the database is unavailable) does the run keep
 * its slot and try again.
 *
 * What a slot runs is published in shared memory for agent.worker_status().
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "storage/condition_variable.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "sandbox_ext.h"
#include "supervisor.h"

/* Delay before retrying a result whose transaction failed. */
#define RECORD_RETRY_MS		5000

SandboxRun *sandbox_runs;
int			sandbox_nruns;
int			sandbox_nactive;

/* What slot `run` runs, for agent.worker_status(). */
static void
slot_publish(SandboxRun *run)
{
	SandboxSlot *s = &sandbox_shared->slots[run->slot];

	SpinLockAcquire(&sandbox_shared->mutex);
	s->in_use = run->phase != RUN_FREE;
	s->invocation_id = run->id;
	s->jail_pid = run->jail.pid;
	sandbox_shared->slots_in_use = sandbox_nactive;
	SpinLockRelease(&sandbox_shared->mutex);
}

/* Empty a slot: every descriptor closed before, the run's context reset. */
static void
run_reset(SandboxRun *run)
{
	RunJail    *j = &run->jail;
	RunOutput  *o = &run->out;
	RunDisk    *d = &run->disk;

	run->phase = RUN_FREE;
	run->marked = false;
	run->start_error = NULL;
	run->retry_at = 0;
	memset(&run->id, 0, sizeof(run->id));
	run->idstr[0] = run->language[0] = '\0';

	j->served = false;
	j->pid = 0;
	j->pidfd = j->verdict_fd = -1;
	j->wait_status = 0;
	j->served_rc = -1;
	j->served_msg = NULL;
	resetStringInfo(&j->verdict);
	j->exited_at = j->backstop = 0;
	j->killed_by_us = j->cancel_sent = false;

	for (int st = 0; st < NSTREAMS; st++)
	{
		o->fd[st] = -1;
		resetStringInfo(&o->pending[st]);
		o->partial_len[st] = 0;
		o->pending_at[st] = 0;
		o->bytes[st] = o->kept[st] = 0;
	}
	o->retry_at = 0;
	o->truncated = false;

	d->dir[0] = d->workspace[0] = d->session[0] = '\0';
	d->has_session = false;
	d->nbinds = 0;
	d->before = NULL;
	d->produced = NIL;
	d->collected = d->measured = false;
	d->ws_bytes = 0;
	d->ws_entries = 0;
	d->ws_reset = NULL;
	MemoryContextReset(run->cxt);
}

void
sandbox_runs_init(void)
{
	sandbox_nruns = SANDBOX_MAX_SLOTS;
	sandbox_runs = MemoryContextAllocZero(TopMemoryContext, sizeof(SandboxRun) * sandbox_nruns);
	for (int i = 0; i < sandbox_nruns; i++)
	{
		SandboxRun *run = &sandbox_runs[i];
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&run->jail.verdict);
		for (int st = 0; st < NSTREAMS; st++)
			initStringInfo(&run->out.pending[st]);
		MemoryContextSwitchTo(old);
		run->cxt = AllocSetContextCreate(TopMemoryContext, "sandbox run", ALLOCSET_DEFAULT_SIZES);
		run->slot = i;
		run_reset(run);
	}
}

/* Slots free for new runs (sandbox.max_concurrent_runs may be lowered). */
int
sandbox_free_slots(void)
{
	return Max(Min(sandbox_max_concurrent_runs, sandbox_nruns) - sandbox_nactive, 0);
}

/* claim: FREE -> CLAIMED. */
SandboxRun *
sandbox_run_claim(const ClaimedRun *c)
{
	SandboxRun *run = NULL;

	for (int i = 0; i < sandbox_nruns && run == NULL; i++)
		if (sandbox_runs[i].phase == RUN_FREE)
			run = &sandbox_runs[i];
	Assert(run != NULL);		/* claims never exceed the free slots */
	run_reset(run);
	run->phase = RUN_CLAIMED;
	memcpy(&run->id, &c->id, sizeof(pg_uuid_t));
	strlcpy(run->idstr, DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&run->id))),
			sizeof(run->idstr));
	strlcpy(run->language, c->language, sizeof(run->language));
	run->disk.caps = c->caps;
	sandbox_nactive++;
	slot_publish(run);
	return run;
}

/*
 * start: CLAIMED -> STARTED, or UNSTARTED (run->start_error says why; the
 * run is then finished as a failure of ours, refunded).
 */
void
sandbox_run_start(SandboxRun *run, const ClaimedRun *c)
{
	bool		workspace_is_new;
	char		code_path[MAXPGPATH];

	Assert(run->phase == RUN_CLAIMED);
	if (sandbox_prepare_dirs(run, c, &workspace_is_new) &&
		((!c->has_session && !c->has_skills) || sandbox_step_prepare(run, workspace_is_new)) &&
		sandbox_write_code(run, c->code ? c->code : "", code_path, sizeof(code_path)) &&
		sandbox_launch(run, code_path,
					   Min(Max(c->wall_s, 1), sandbox_max_wall_time_s),
					   Min(Max(c->memory_mb, 16), sandbox_max_memory_mb),
					   sandbox_default_pids))
		run->phase = RUN_STARTED;
	else
		run->phase = RUN_UNSTARTED;
	slot_publish(run);
}

/* exited: STARTED -> EXITED (its pipes may still hold output). */
void
sandbox_run_exited(SandboxRun *run)
{
	if (run->phase != RUN_STARTED)
		return;
	run->phase = RUN_EXITED;
	run->jail.exited_at = GetCurrentTimestamp();
}

/* Is the run ready to be finished (now)? */
bool
sandbox_run_complete(SandboxRun *run)
{
	switch (run->phase)
	{
		case RUN_UNSTARTED:
			return true;
		case RUN_RECORD_RETRY:
			return GetCurrentTimestamp() >= run->retry_at;
		case RUN_EXITED:
			if (run->out.fd[0] < 0 && run->out.fd[1] < 0 && run->jail.verdict_fd < 0)
				return true;
			/* A grandchild holding a pipe open must not keep the run alive. */
			return TimestampDifferenceExceeds(run->jail.exited_at, GetCurrentTimestamp(),
											  DRAIN_GRACE_MS);
		default:
			return false;
	}
}

/* The run is over for this process: FREE. */
static void
run_release(SandboxRun *run)
{
	sandbox_jail_close(run);
	sandbox_nactive--;
	run_reset(run);
	slot_publish(run);
}

/*
 * finish: EXITED, UNSTARTED or RECORD_RETRY -> FREE (true: the result is
 * durable) or RECORD_RETRY.
 */
bool
sandbox_run_finish(SandboxRun *run)
{
	int			jail_status;
	char	   *error;
	char	   *err = NULL;
	bool		applied = false;

	if (run->phase == RUN_RECORD_RETRY)
		run->phase = run->start_error ? RUN_UNSTARTED : RUN_EXITED;
	error = sandbox_jail_failure(run, &jail_status);
	sandbox_collect_run(run, error != NULL);
	sandbox_egress_collect(run);
	sandbox_release_disk(run);
	/* Output that could not be stored is missing from the record. */
	if (run->out.pending[0].len > 0 || run->out.pending[1].len > 0)
		run->out.truncated = true;

	if (!sandbox_step_record_result(run, error, jail_status, true, &applied, &err) &&
		!sandbox_step_record_result(run, psprintf("could not record the result: %s", err),
									jail_status, false, &applied, &err))
	{
		/* Nothing commits: keep the slot and try again (recovery would too). */
		run->phase = RUN_RECORD_RETRY;
		run->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), RECORD_RETRY_MS);
		return false;
	}
	if (!applied)
		sandbox_results_pending = true;
	run_release(run);
	/* Wake backends sleeping in agent.wait(). */
	if (applied)
		ConditionVariableBroadcast(&sandbox_shared->finished_cv);
	return true;
}

/* Kill every jail we own and the launcher (shutdown). */
void
sandbox_runs_kill_all(void)
{
	for (int i = 0; sandbox_runs && i < sandbox_nruns; i++)
		sandbox_jail_kill_wait(&sandbox_runs[i]);
	sandbox_launcher_stop();
}
