/*-------------------------------------------------------------------------
 *
 * run.c
 *		The runner's slot table and a run's life in it: its phases
 *		(runner.h, RunPhase) and one function per transition, and finishing
 *		a run.
 *
 *	claim	FREE -> CLAIMED			the claim committed: the run is charged
 *	start	CLAIMED -> STARTED		its directory, files and skills are in
 *			CLAIMED -> UNSTARTED	place and the jail started, or it failed
 *	exited	STARTED -> EXITED		the jail is gone (pidfd, EOF of the
 *									launcher's connection, our SIGKILL)
 *	finish	EXITED/UNSTARTED/RECORD_RETRY -> FREE, or -> RECORD_RETRY
 *	fence	any -> FREE				the database says the lease is not ours
 *									(or we could not renew it in time): the
 *									jail is killed and the result dropped
 *
 * Finishing: read what the run left (its files; for a session, what the
 * workspace holds), give back its disk, then record the result in one
 * transaction (the finish step stages it and applies it by the billing
 * rule).  The slot is free as soon as the result is durable, even when
 * applying it has to wait for a lock a backend holds: the staged result is
 * applied by the supervisor.  A result that cannot be recorded at all
 * still ends the row, as a failure of ours with the reason; only when even
 * that cannot commit (the database is unavailable) does the run keep its
 * slot and try again.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <signal.h>

#include "local_link.h"

/* Delay before retrying a result whose transaction failed. */
#define RECORD_RETRY_MS		5000

Run		   *runs;
int			nruns;
int			nactive;
bool		status_dirty = true;

/* Empty a slot: every descriptor closed before, the run's memory freed. */
static void
run_reset(Run *run)
{
	RunJail    *j = &run->jail;
	RunOutput  *o = &run->out;
	RunDisk    *d = &run->disk;

	run->phase = RUN_FREE;
	run->marked = false;
	run->mark_skips = 0;
	run->mark_retry_at = 0;
	run->report_at = 0;
	run->start_error = NULL;
	run->retry_at = 0;
	run->id[0] = run->lease[0] = run->language[0] = '\0';

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
	o->full[0] = o->full[1] = false;
	o->limit = (int64) runner_conf.output_limit_kb * 1024;

	d->dir[0] = d->workspace[0] = d->session[0] = '\0';
	d->has_session = false;
	d->nbinds = 0;
	files_manifest_free(d->before);
	d->before = NULL;
	files_produced_free(&d->produced);
	d->collected = d->measured = false;
	d->ws_bytes = 0;
	d->ws_entries = 0;
	d->ws_reset = NULL;
	d->egress = d->egress_collected = false;
	d->egress_log = NULL;
	secrets_wipe(run);
	arena_reset(&run->arena);
	fence_reset(run);
	status_dirty = true;
}

void
runs_init(void)
{
	nruns = RUNNER_MAX_SLOTS;
	runs = pg_malloc0(sizeof(Run) * nruns);
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		initStringInfo(&run->jail.verdict);
		for (int st = 0; st < NSTREAMS; st++)
			initStringInfo(&run->out.pending[st]);
		run->slot = i;
		run_reset(run);
	}
}

/* Slots free for new runs (slots may be lowered on reload). */
int
run_free_slots(void)
{
	return Max(Min(runner_conf.slots, nruns) - nactive, 0);
}

/* claim: FREE -> CLAIMED (the caller claimed no more than run_free_slots()). */
Run *
run_claim(const ClaimedRun *c)
{
	Run		   *run = NULL;

	for (int i = 0; i < nruns && run == NULL; i++)
		if (runs[i].phase == RUN_FREE)
			run = &runs[i];
	if (run == NULL)
	{
		/* cannot be; the claim is charged, so the database must resolve it */
		runner_log(RLOG_ERROR, "no free slot for claimed invocation %s", c->id);
		return NULL;
	}
	run_reset(run);
	run->phase = RUN_CLAIMED;
	strlcpy(run->id, c->id, sizeof(run->id));
	strlcpy(run->lease, c->lease, sizeof(run->lease));
	run->leased_at = c->leased_at;
	strlcpy(run->language, c->language, sizeof(run->language));
	strlcpy(run->image, c->image, sizeof(run->image));
	run->gvisor = c->gvisor;
	run->disk.caps = c->caps;
	if (c->output_limit > 0)
		run->out.limit = Min(run->out.limit, c->output_limit);
	nactive++;
	return run;
}

/*
 * start: CLAIMED -> STARTED, or UNSTARTED (run->start_error says why; the
 * run is then finished as a failure of ours, refunded).
 */
void
run_start(Run *run, const ClaimedRun *c)
{
	bool		workspace_is_new;
	char		code_path[MAXPGPATH];

	if (workdir_prepare(run, c, &workspace_is_new) &&
		((!c->has_session && !c->has_skills && !c->has_egress) ||
		 step_prepare(run, workspace_is_new)) &&
		workdir_write_code(run, c->code ? c->code : "", code_path, sizeof(code_path)) &&
		jail_launch(run, code_path,
					Min(Max(c->wall_s, 1), runner_conf.max_wall_time_s),
					Min(Max(c->memory_mb, 16), runner_conf.max_memory_mb),
					runner_conf.default_pids))
	{
		run->phase = RUN_STARTED;
		run->report_at = run->mark_retry_at = runner_now_ms() + runner_conf.start_report_delay_ms;
		/* (a deadline that passed while it was prepared: killed at once) */
		fence_arm(run, me.lease_ms > 0 ? step_lease_deadline(run) : FENCE_NEVER);
	}
	else if (run->phase == RUN_CLAIMED)
		run->phase = RUN_UNSTARTED;
	status_dirty = true;
}

/* exited: STARTED -> EXITED (its pipes may still hold output). */
void
run_exited(Run *run)
{
	if (run->phase != RUN_STARTED)
		return;
	run->phase = RUN_EXITED;
	run->jail.exited_at = runner_now_ms();
}

/* Is the run ready to be finished (now)? */
bool
run_complete(Run *run)
{
	switch (run->phase)
	{
		case RUN_UNSTARTED:
			return true;
		case RUN_RECORD_RETRY:
			return runner_now_ms() >= run->retry_at;
		case RUN_EXITED:
			if (run->out.fd[0] < 0 && run->out.fd[1] < 0 && run->jail.verdict_fd < 0)
				return true;
			/* A grandchild holding a pipe open must not keep the run alive. */
			return runner_now_ms() - run->jail.exited_at >= DRAIN_GRACE_MS;
		default:
			return false;
	}
}

/* The run is over for this process: FREE. */
static void
run_release(Run *run)
{
	jail_close(run);
	nactive--;
	run_reset(run);
}

/*
 * finish: EXITED, UNSTARTED or RECORD_RETRY -> FREE (true: the result is
 * durable, or the lease is gone and it was dropped) or RECORD_RETRY.
 */
bool
run_finish(Run *run)
{
	int			jail_status;
	char	   *error;
	char	   *err = NULL;
	bool		applied = false;
	DbOutcome	o;

	if (run->phase == RUN_RECORD_RETRY)
		run->phase = run->start_error ? RUN_UNSTARTED : RUN_EXITED;
	error = jail_failure(run, &jail_status);
	workdir_collect(run, error != NULL);
	egress_collect(run);
	workdir_release(run);

	/*
	 * Not a result of ours to record when its jail was killed by the fence
	 * (its verdict says killed, but not by its payload), nor once its lease
	 * ran out by our clock: reading the workspace may have taken a while.
	 */
	if (step_fence_due(run))
	{
		run_fence(run, fence_fired(run) ?
				  "its lease could not be renewed in time; the fence killed its sandbox at the deadline" :
				  "its lease could not be renewed");
		return true;
	}

	/* (with the output that waited for the start report) */
	o = step_record_result(run, error, jail_status, true, &applied, &err);
	if (o == DB_FAILED)
	{
		char	   *why = arena_printf(&run->arena, "could not record the result: %s", err);

		free(err);
		err = NULL;
		/* Output that could not be stored is missing from the record. */
		if (run->out.pending[0].len > 0 || run->out.pending[1].len > 0)
			run->out.truncated = true;
		o = step_record_result(run, why, jail_status, false, &applied, &err);
	}
	free(err);
	if (o == DB_FENCED)
	{
		run_fence(run, "the database refused its result");
		return true;
	}
	if (o != DB_OK)
	{
		/* Nothing commits: keep the slot and try again (the reaper would too). */
		run->phase = RUN_RECORD_RETRY;
		run->retry_at = runner_now_ms() + RECORD_RETRY_MS;
		return false;
	}
	/* the supervisor applies a staged result (the local one, now) */
	if (!applied)
		link_send(LINK_STAGED);
	run_release(run);
	return true;
}

/*
 * fence: the lease of this run is not ours (the database refused a step
 * for it, or we could not renew it for a lease's length): whatever our
 * sandbox does now is not the invocation's any more.  Kill it, drop what
 * it produced, give back its disk and its slot.  The database ends the
 * invocation (the reaper, by the billing rule).
 */
void
run_fence(Run *run, const char *why)
{
	if (run->phase == RUN_FREE)
		return;
	runner_log(RLOG_WARNING, "invocation %s is not ours any more (%s): its sandbox is killed and its result dropped",
			   run->id, why);
	jail_kill_wait(run);
	workdir_release(run);
	run_release(run);
}

/* Kill every jail we own and the launcher (shutdown). */
void
runs_kill_all(void)
{
	for (int i = 0; runs && i < nruns; i++)
		jail_kill_wait(&runs[i]);
	launcher_stop();
}
