/*-------------------------------------------------------------------------
 *
 * supervisor.h
 *		What the files of the supervisor (the background worker that runs
 *		approved invocations) share: a run in a slot and its phases, and the
 *		few entry points of each file.
 *
 *	supervisor.c	the worker: start-up, recovery, the loop (the wait set,
 *					deadlines, reload, shutdown)
 *	run.c			the slot table and a run's phases, one function per
 *					transition, and finishing a run
 *	launch.c		the jail: one request for both ways of starting it (the
 *					resident launcher's socket, a one-shot process), its
 *					verdict, reaping, signals, the launcher process itself
 *	output.c		a run's stdout and stderr: UTF-8, coalescing, storing
 *	workdir.c		the work directory: a run's directory, workspaces,
 *					skills on disk, what is swept away
 *	steps.c			a run's steps in the database, each one call of one named
 *					SQL function (sql/src/40_supervisor.sql)
 *
 * Everything here runs in the supervisor process only, one thread; nothing
 * is shared with backends but what run.c publishes in shared memory
 * (SandboxShared, for agent.worker_status()).  No transaction is open while
 * a jail runs: steps.c opens one per step.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_SUPERVISOR_H
#define SANDBOX_SUPERVISOR_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sandbox_files.h"

/* Most skills mounted into one sandbox (agent._prepare_invocation agrees). */
#define SANDBOX_MAX_SKILLS	16
/* Largest chunk stored as one output row (and read from a pipe at once). */
#define OUTPUT_READ_SIZE	65536
/* How long to wait for a run's pipes to drain after its jail has exited. */
#define DRAIN_GRACE_MS		2000

typedef enum
{
	STREAM_STDOUT = 0,
	STREAM_STDERR = 1,
	NSTREAMS = 2
} RunStream;

/*
 * A run's phases; the transitions are run.c's, one function each:
 *
 *	claim	FREE -> CLAIMED
 *	start	CLAIMED -> STARTED | UNSTARTED
 *	exited	STARTED -> EXITED
 *	finish	EXITED | UNSTARTED | RECORD_RETRY -> FREE | RECORD_RETRY
 *
 * CLAIMED is the moment between the claim's commit and the start: the run
 * is charged and must be finished, whatever happens next.
 */
typedef enum RunPhase
{
	RUN_FREE = 0,				/* the slot is unused */
	RUN_CLAIMED,				/* claimed and charged; nothing started yet */
	RUN_STARTED,				/* the jail runs (or the launcher has it) */
	RUN_EXITED,					/* the jail is gone; its pipes drain */
	RUN_UNSTARTED,				/* it could not be started (start_error) */
	RUN_RECORD_RETRY			/* recording its result failed: retry_at */
} RunPhase;

/* The jail process of a run, or its connection to the launcher. */
typedef struct RunJail
{
	bool		served;			/* through the resident launcher's socket */
	pid_t		pid;			/* one-shot: the jail; served: 0 */
	int			pidfd;			/* one-shot, -1 otherwise or once reaped */
	int			verdict_fd;		/* verdict pipe, or the launcher connection */
	int			wait_status;	/* one-shot: from waitpid() */
	int			served_rc;		/* served: the answer's rc, -1 before it */
	char	   *served_msg;		/* served: the answer's message */
	StringInfoData verdict;		/* the verdict (JSON), as read */
	TimestampTz exited_at;
	TimestampTz backstop;		/* SIGKILL the jail after this */
	bool		killed_by_us;	/* by the backstop */
	bool		cancel_sent;
} RunJail;

/* A run's output on its way to agent.invocation_output. */
typedef struct RunOutput
{
	int			fd[NSTREAMS];	/* -1 once at EOF */
	StringInfoData pending[NSTREAMS];	/* valid UTF-8 waiting to be stored */
	char		partial[NSTREAMS][4];	/* incomplete UTF-8 tail of a read */
	int			partial_len[NSTREAMS];
	TimestampTz pending_at[NSTREAMS];	/* when pending[] became non-empty */
	TimestampTz retry_at;		/* storing failed: not before this */
	int64		bytes[NSTREAMS];	/* read from the jail */
	int64		kept[NSTREAMS];		/* accepted for storage */
	bool		truncated;		/* some was dropped (limit, or not stored) */
} RunOutput;

/* What a run has on disk. */
typedef struct RunDisk
{
	char		dir[MAXPGPATH];	/* per-run directory (code; workspace unless a session) */
	char		workspace[MAXPGPATH];
	bool		has_session;
	char		session[UUID_LEN * 2 + 5];
	int			nbinds;
	char	   *binds[SANDBOX_MAX_SKILLS];	/* --ro-bind SRC:DST */
	Manifest   *before;			/* the workspace before the run */
	List	   *produced;		/* ProducedFile *, collected after the run */
	bool		collected;
	ProducedCaps caps;
	/* the session workspace after the run */
	bool		measured;
	int64		ws_bytes;
	int			ws_entries;
	char	   *ws_reset;		/* why it must be rebuilt, or NULL */
	/* egress (docs/egress.md): the prepare step gave a policy file */
	bool		egress;
	char	   *egress_log;		/* the proxy's connection log, read after
								 * the run (before the directory goes) */
} RunDisk;

typedef struct SandboxRun
{
	RunPhase	phase;
	int			slot;			/* index in the slot table and shared memory */
	pg_uuid_t	id;
	char		idstr[UUID_LEN * 2 + 5];
	char		language[16];
	bool		marked;			/* agent._mark_running was tried */
	char	   *start_error;	/* a failure of ours before or at the start */
	TimestampTz retry_at;		/* RUN_RECORD_RETRY: try again after this */
	RunJail		jail;
	RunOutput	out;
	RunDisk		disk;
	MemoryContext cxt;			/* per-run allocations, reset when freed */
} SandboxRun;

/* What agent._claim_invocations() returned for one run. */
typedef struct ClaimedRun
{
	pg_uuid_t	id;
	char		language[16];
	char	   *code;
	int			wall_s;
	int			memory_mb;
	bool		has_session;
	char		session[UUID_LEN * 2 + 5];
	bool		fresh_session;
	bool		has_skills;
	ProducedCaps caps;			/* what it may return (agent._produced_caps) */
} ClaimedRun;

/* run.c: the slot table */
extern SandboxRun *sandbox_runs;
extern int	sandbox_nruns;		/* entries of sandbox_runs */
extern int	sandbox_nactive;	/* of them, not RUN_FREE */
extern void sandbox_runs_init(void);
extern int	sandbox_free_slots(void);
extern SandboxRun *sandbox_run_claim(const ClaimedRun *c);
extern void sandbox_run_start(SandboxRun *run, const ClaimedRun *c);
extern void sandbox_run_exited(SandboxRun *run);
extern bool sandbox_run_complete(SandboxRun *run);
extern bool sandbox_run_finish(SandboxRun *run);
extern void sandbox_runs_kill_all(void);

/* launch.c */
extern bool sandbox_launch(SandboxRun *run, const char *code_path, int wall_s,
						   int memory_mb, int pids);
extern bool sandbox_launcher_ensure(void);
extern void sandbox_launcher_stop(void);
extern void sandbox_jail_read_verdict(SandboxRun *run);
extern void sandbox_jail_reap(SandboxRun *run);
extern void sandbox_jail_signal(SandboxRun *run, int sig);
extern void sandbox_jail_kill_wait(SandboxRun *run);
extern char *sandbox_jail_failure(SandboxRun *run, int *jail_status);
extern void sandbox_jail_close(SandboxRun *run);

/* output.c */
extern void sandbox_output_read(SandboxRun *run, int stream);
extern void sandbox_output_flush(void);
extern long sandbox_output_due_ms(SandboxRun *run, TimestampTz now);

/* workdir.c */
extern const char *sandbox_work_root(void);
extern bool sandbox_work_dir_usable(bool force);
extern void sandbox_clean_work_root(void);
extern bool sandbox_prepare_dirs(SandboxRun *run, const ClaimedRun *c, bool *workspace_is_new);
extern bool sandbox_write_code(SandboxRun *run, const char *code, char *path, size_t pathlen);
extern void sandbox_workspace_place(SandboxRun *run, const char *name, const char *data,
									size_t len);
extern char *sandbox_skill_dir(const char *skill_id, bool *installed);
extern char *sandbox_skill_begin(const char *skill_id);
extern void sandbox_skill_add(const char *tmp, const char *path, const char *data, size_t len,
							  bool executable);
extern void sandbox_skill_install(const char *tmp, const char *final);
extern void sandbox_collect_run(SandboxRun *run, bool failed);
extern void sandbox_release_disk(SandboxRun *run);
extern void sandbox_egress_place_policy(SandboxRun *run, const char *data, size_t len);
extern void sandbox_egress_collect(SandboxRun *run);
extern void sandbox_sweep(List *live_sessions, List *skills_in_use);

/* steps.c */
extern bool sandbox_results_pending;	/* results staged behind a held lock */
extern int	sandbox_step_claim(int want, ClaimedRun *out);
extern bool sandbox_step_prepare(SandboxRun *run, bool workspace_is_new);
extern void sandbox_step_mark_started(void);
extern bool sandbox_step_store_output(const bool ready[][NSTREAMS], bool *stored);
extern bool sandbox_step_record_result(SandboxRun *run, const char *error, int jail_status,
									   bool with_files, bool *applied, char **err);
extern bool sandbox_step_finish_pending(void);
extern void sandbox_step_recover(void);
extern void sandbox_step_check_cancellations(void);
extern bool sandbox_step_sweep_lists(List **live_sessions, List **skills_in_use);

#endif							/* SANDBOX_SUPERVISOR_H */
