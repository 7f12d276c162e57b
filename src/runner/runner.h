/*-------------------------------------------------------------------------
 *
 * runner.h
 *		What the files of sandbox-runner share: its configuration, a run in
 *		a slot and its phases, and the few entry points of each file.
 *
 *	main.c		the command line: --config, --local, --check; signals;
 *				start-up and shutdown
 *	loop.c		the loop: one poll() over every descriptor, deadlines,
 *				wake-ups, reconnects, filling slots, sweeps
 *	config.c	the configuration file (conninfo, name, slots, work dir,
 *				limits), read at start and on SIGHUP
 *	db.c		the connection: reconnect with backoff, LISTEN, a step as
 *				one parameterised call with a deadline, pipelines
 *	steps.c		a run's steps in the database, each one call of one named
 *				SQL function: registration, leases, claim, prepare, the
 *				start report, cancels, the sweep's lists
 *	steps_result.c	the steps that store what a run leaves: its output
 *				and, at its end, its files, egress log and finish
 *	run.c		the slot table and a run's phases, one function per
 *				transition, and finishing a run
 *	launch.c	the jail: the resident launcher's socket, the one-shot
 *				jail, verdicts, reaping, signals, the launcher process
 *	output.c	a run's stdout and stderr: UTF-8, coalescing, storing
 *	workdir.c	the work directory: a run's directory, workspaces, skills
 *				on disk, what is swept away
 *	files.c		host-side file work in sandbox-writable directories
 *	fence.c		the fence's thread: kills the sandbox of a run whose
 *				lease could not be renewed in time, wherever the main
 *				thread is
 *	secrets.c	a run's secrets: opened with the host's key, checked
 *				against what the run was approved with, handed to its
 *				egress proxy only (secret_box.c: the sealed box itself)
 *	local.c		the link with the supervisor that started us (--local)
 *	check.c		--check: what the host lacks
 *	util.c		clock, logging, per-run memory, string lists
 *
 * One process, two threads: the main thread does everything but the
 * fence's kills, which are the fence's thread's (fence.c), so that they
 * happen on time even while the main thread waits in a step, a connection
 * or a finish.  No transaction is open while a jail runs but the prepare
 * step's, which spans placing the conversation's files (so that the
 * database records exactly what was placed).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_RUNNER_H
#define SANDBOX_RUNNER_H

#include "postgres_fe.h"

#include <signal.h>
#include <sys/types.h>

#include "lib/stringinfo.h"

#define RUNNER_VERSION		"0.1.0"

/* Most runs at once (the supervisor's shared memory has as many slots). */
#define RUNNER_MAX_SLOTS	64
/* Most skills mounted into one sandbox (agent._prepare_invocation agrees). */
#define RUNNER_MAX_SKILLS	16
/* Images a runner holds at most (agent.runner_report_images: 64). */
#define RUNNER_MAX_IMAGES	64
/* "NAME@DIGEST": a name of at most 63 characters, 64 hex digits */
#define RUNNER_IMAGE_REF_LEN	(64 + 1 + 64 + 1)
/* Most secrets of one run (agent._secrets_to_place agrees). */
#define RUNNER_MAX_SECRETS	16
/* Largest chunk stored as one output row (and read from a pipe at once). */
#define OUTPUT_READ_SIZE	65536
/* How long to wait for a run's pipes to drain after its jail has exited. */
#define DRAIN_GRACE_MS		2000
/*
 * START_REPORT: a started run is reported running
 * (agent.runner_mark_running) start_report_delay ms after its start, or
 * sooner when its output cannot wait; a run that ends first is reported
 * once, by its finish, which records the start (and the output that
 * waited) in the same transaction (steps_result.c).
 */
#define UUID_STR_LEN		37	/* 36 and the NUL */
/* A run's egress files in its own directory (never the workspace). */
#define EGRESS_POLICY_FILE	"egress-policy"
#define EGRESS_LOG_FILE		"egress.log"

/* ---- util.c ---- */

typedef int64 msec;				/* CLOCK_MONOTONIC, milliseconds */

extern msec runner_now_ms(void);

typedef enum RunnerLogLevel
{
	RLOG_DEBUG,
	RLOG_LOG,
	RLOG_WARNING,
	RLOG_ERROR,
	RLOG_FATAL
} RunnerLogLevel;

extern bool runner_log_debug;
extern void runner_log(RunnerLogLevel level, const char *fmt,...) pg_attribute_printf(2, 3);

/*
 * Per-run memory: everything a run allocates that lives as long as the run
 * (error texts, bind options, manifests), freed at once when its slot is
 * reset.  The frontend counterpart of the memory context of a run.
 */
typedef struct Arena
{
	struct ArenaBlock *blocks;
} Arena;

extern void *arena_alloc(Arena *a, size_t size);
extern char *arena_strdup(Arena *a, const char *s);
extern char *arena_printf(Arena *a, const char *fmt,...) pg_attribute_printf(2, 3);
extern void arena_reset(Arena *a);

/* A growable list of strings (malloc'd). */
typedef struct StrList
{
	char	  **v;
	int			n;
	int			cap;
} StrList;

extern void strlist_add(StrList *l, const char *s);
extern bool strlist_contains(const StrList *l, const char *s);
extern void strlist_free(StrList *l);

/* ---- config.c ---- */

typedef struct RunnerConfig
{
	char	   *conninfo;		/* libpq connection string */
	char	   *name;			/* agent.runners.name */
	int			slots;			/* runs at once (0: claim nothing) */
	char	   *work_dir;		/* absolute */
	char	   *run_dir;		/* the launcher's socket */
	char	   *jail_path;
	bool		jail_launcher;
	bool		require_cgroup;
	char	   *egress_resolver;	/* the proxy's resolver, or NULL: the host's */
	char	   *egress_ca_file;	/* a PEM the sandbox's clients trust too, or NULL */
	char	   *secrets_key_file;	/* the private key(s) secrets are sealed to */
	int			workspace_size_mb;
	int			workspace_entries;
	int			output_limit_kb;
	int			default_wall_time_s;
	int			max_wall_time_s;
	int			default_memory_mb;
	int			max_memory_mb;
	int			default_pids;
	int			start_report_delay_ms;	/* START_REPORT above */
	StrList		protect;		/* the work dir must not share their filesystem */
	int			warm_python;	/* the launcher's warm interpreters (jail.md) */
	int			warm_node;
	char	   *warm_modules;
	int			warm_memory_mb;
	char	   *image_store;	/* the images it holds (images.c) */
	char	   *runsc_path;		/* the gvisor class's runsc, or "": the
								 * jail's default (isolation.c) */
} RunnerConfig;

extern RunnerConfig runner_conf;
extern bool runner_local;		/* --local: started by the supervisor */

extern bool runner_config_load(const char *path, RunnerConfig *out, char **err);
extern void runner_config_free(RunnerConfig *c);
extern void runner_config_defaults(RunnerConfig *c);
/* A setting's name as the operator sets it: sandbox.X (local) or X. */
extern const char *runner_setting_name(const char *key);

/* ---- files.c ---- */

typedef struct ManifestEntry
{
	char	   *path;			/* relative to the workspace root */
	mode_t		mode;
	ino_t		ino;
	int64		size;
	nlink_t		nlink;
	int64		mtime_ns;
	int64		ctime_ns;
} ManifestEntry;

typedef struct Manifest
{
	ManifestEntry *entries;		/* sorted by path */
	int			n;
	int			cap;
	int			max_entries;
	bool		incomplete;		/* too many entries / too deep */
	int64		disk_bytes;		/* allocated blocks of every entry, in bytes */
} Manifest;

typedef struct ProducedCaps
{
	int			max_files;
	int64		max_total_bytes;
	int64		max_file_bytes;
	int			max_scan_entries;
} ProducedCaps;

typedef struct ProducedFile
{
	char	   *name;
	char		status[8];		/* saved | skipped | failed */
	char	   *reason;
	char	   *data;
	int64		len;
} ProducedFile;

typedef struct ProducedList
{
	ProducedFile *v;
	int			n;
	int			cap;
} ProducedList;

extern Manifest *files_manifest_scan(const char *root, int max_entries);
extern void files_manifest_free(Manifest *m);
extern void files_collect_produced(const char *root, const Manifest *before, const ProducedCaps *caps,
								   ProducedList *out, Manifest **after_out);
extern void files_produced_free(ProducedList *l);
extern bool files_place(const char *root, const char *relpath, const char *data, size_t len,
						mode_t mode, char **err);
extern int	files_remove_tree_at(int parentfd, const char *name, int depth);
extern void files_remove_dir(const char *path);

/* ---- run.c: a run and its phases ---- */

typedef enum RunStream
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
 *	fence	any but FREE -> FREE (the lease is lost: killed, result dropped)
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
	msec		exited_at;
	msec		backstop;		/* SIGKILL the jail after this */
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
	msec		pending_at[NSTREAMS];	/* when pending[] became non-empty */
	msec		retry_at;		/* storing failed: not before this */
	int64		bytes[NSTREAMS];	/* read from the jail */
	int64		kept[NSTREAMS];		/* text accepted for storage (stored and pending) */
	bool		full[NSTREAMS];		/* kept reached limit: the rest is dropped */
	int64		limit;			/* bytes of text kept per stream */
	bool		truncated;		/* some was dropped (limit, or not stored) */
} RunOutput;

/* What a run has on disk. */
typedef struct RunDisk
{
	char		dir[MAXPGPATH];	/* per-run directory (code; workspace unless a session) */
	char		workspace[MAXPGPATH];
	bool		has_session;
	char		session[UUID_STR_LEN];
	int			nbinds;
	char	   *binds[RUNNER_MAX_SKILLS];	/* --ro-bind SRC:DST */
	Manifest   *before;			/* the workspace before the run */
	ProducedList produced;		/* collected after the run */
	bool		collected;
	ProducedCaps caps;
	/* the session workspace after the run */
	bool		measured;
	int64		ws_bytes;
	int			ws_entries;
	char	   *ws_reset;		/* why it must be rebuilt, or NULL */
	/* egress (docs/egress.md): the prepare step gave a policy file */
	bool		egress;
	bool		egress_collected;
	char	   *egress_log;		/* the proxy's connection log (arena), read
								 * after the run, before the directory goes */
} RunDisk;

/*
 * A run's secret, opened (secrets.c): from the prepare step to the jail's
 * start only; the value (malloc'd) is wiped then, or with the slot.
 */
typedef struct RunSecret
{
	char		name[65];
	char		rule[UUID_STR_LEN];
	char	   *host;			/* the rule's pattern (arena) */
	char	   *header;			/* the header template (arena) */
	uint8	   *value;
	size_t		len;
} RunSecret;

typedef struct Run
{
	RunPhase	phase;
	int			slot;			/* index in the slot table */
	char		id[UUID_STR_LEN];
	char		lease[UUID_STR_LEN];	/* the lease token */
	msec		leased_at;		/* when the claim that leased it was sent */
	char		language[16];
	char		image[RUNNER_IMAGE_REF_LEN];	/* NAME@DIGEST, or "": the host's */
	bool		gvisor;			/* runs in the gvisor class (the jail's --isolation) */
	bool		marked;			/* the mark-running step was tried */
	int			mark_skips;		/* ... and skipped (locks held elsewhere) */
	msec		mark_retry_at;	/* the mark is due then (a skipped one:
								 * tried again then) */
	msec		report_at;		/* start_report_delay after the start */
	char	   *start_error;	/* a failure of ours before or at the start */
	msec		retry_at;		/* RUN_RECORD_RETRY: try again after this */
	RunJail		jail;
	RunOutput	out;
	RunDisk		disk;
	RunSecret	secrets[RUNNER_MAX_SECRETS];
	int			nsecrets;
	Arena		arena;			/* per-run allocations, freed with the slot */
} Run;

/* What the claim returned for one run. */
typedef struct ClaimedRun
{
	char		id[UUID_STR_LEN];
	char		lease[UUID_STR_LEN];
	msec		leased_at;		/* when the claim was sent: its lease lasts from then */
	char		language[16];
	char	   *code;			/* malloc'd */
	int			wall_s;
	int			memory_mb;
	bool		has_session;
	char		session[UUID_STR_LEN];
	bool		fresh_session;
	bool		has_skills;
	bool		has_egress;		/* the prepare step gives its policy file */
	char		image[RUNNER_IMAGE_REF_LEN];	/* NAME@DIGEST, or "": the host's */
	bool		gvisor;			/* its isolation class is gvisor (isolation.c) */
	ProducedCaps caps;			/* what it may return (agent._produced_caps) */
	int64		output_limit;	/* the server's per stream, or 0 */
} ClaimedRun;

extern Run *runs;
extern int	nruns;				/* entries of runs */
extern int	nactive;			/* of them, not RUN_FREE */
extern bool status_dirty;		/* what the slots run changed (local.c reports it) */
extern void runs_init(void);
extern int	run_free_slots(void);
extern Run *run_claim(const ClaimedRun *c);
extern void run_start(Run *run, const ClaimedRun *c);
extern void run_exited(Run *run);
extern bool run_complete(Run *run);
extern bool run_finish(Run *run);
extern void run_fence(Run *run, const char *why);
extern void runs_kill_all(void);

/* ---- launch.c ---- */
extern bool jail_launch(Run *run, const char *code_path, int wall_s, int memory_mb, int pids);
extern bool launcher_ensure(void);
extern void launcher_stop(void);
extern void launchers_prune(void);


extern void jail_read_verdict(Run *run);
extern void jail_reap(Run *run);
extern void jail_signal(Run *run, int sig);
extern void jail_kill_wait(Run *run);
extern char *jail_failure(Run *run, int *jail_status);
extern void jail_close(Run *run);

/* ---- secrets.c ---- */
extern bool secrets_add(Run *run, const char *name, const char *content, size_t len, char **err);
extern int	secrets_memfd(Run *run, char **err);
extern void secrets_wipe(Run *run);
extern void secrets_registered(void);
extern bool secrets_report(void);
extern const char *secrets_check(int *nkeys);

/* ---- output.c ---- */
extern void output_read(Run *run, int stream);
extern void output_flush(void);
extern long output_due_ms(Run *run, msec now);

/* ---- workdir.c ---- */
extern const char *workdir_root(void);
extern const char *workdir_problem(void);
extern bool workdir_usable(bool force);
extern void workdir_clean_root(void);
extern bool workdir_prepare(Run *run, const ClaimedRun *c, bool *workspace_is_new);
extern bool workdir_write_code(Run *run, const char *code, char *path, size_t pathlen);
extern bool workspace_place(Run *run, const char *name, const char *data, size_t len, char **err);
extern char *skill_dir(const char *skill_id, bool *installed);
extern char *skill_begin(const char *skill_id, char **err);
extern bool skill_add(const char *tmp, const char *path, const char *data, size_t len,
					  bool executable, char **err);
extern bool skill_install(const char *tmp, const char *final, char **err);
extern void workdir_collect(Run *run, bool failed);
extern bool egress_place_policy(Run *run, const char *data, size_t len, char **err);
extern void egress_collect(Run *run);
extern void workdir_release(Run *run);
extern void workdir_sweep(const StrList *live_sessions, const StrList *skills_in_use);

/* ---- db.c ---- */

/* One parameter of a step: text (len -1) or binary (bytea). */
typedef struct DbParam
{
	const char *value;			/* NULL: SQL NULL */
	int			len;			/* -1: NUL-terminated text */
} DbParam;

/* The outcome of a step. */
typedef enum DbOutcome
{
	DB_OK = 0,					/* it ran (rows in the result) */
	DB_FAILED,					/* the server refused it (sqlstate, message) */
	DB_FENCED,					/* refused: the lease is not ours (55000) */
	DB_LOST						/* no connection, or it broke: try later */
} DbOutcome;

typedef struct DbResult
{
	DbOutcome	outcome;
	struct pg_result *res;		/* DB_OK: the rows (db_result_free) */
	char		sqlstate[6];
	char	   *message;		/* DB_FAILED / DB_LOST: why (malloc'd) */
} DbResult;

struct _PQconninfoOption;
extern bool db_conn_params(const char **kw, const char **val, struct _PQconninfoOption **opts,
						   char **err);
extern bool db_connected(void);
extern void db_start_connect(void);
extern int	db_socket(void);
extern short db_poll_events(void);
extern void db_progress(short revents, bool *connected_now, bool *work, bool *cancel);
extern void db_take_wakeups(bool *work, bool *cancel);
extern const char *db_take_notified(char *buf);
extern void db_accepted(void);
extern msec db_next_attempt(void);
extern void db_disconnect(const char *why);
extern bool db_listen(void);
extern const char *db_status(void);
extern DbResult db_call(const char *sql, int nparams, const DbParam *params);
extern void db_result_free(DbResult *r);

/* A pipeline: several calls in one round trip, one implicit transaction. */
typedef struct DbBatchItem
{
	const char *sql;			/* NULL: a sync point (ends a transaction) */
	int			nparams;
	const DbParam *params;		/* the caller's, until db_batch_run returns */
	DbResult	r;
} DbBatchItem;

typedef struct DbBatch
{
	DbBatchItem *items;
	int			n;
	int			cap;
	size_t		bytes;			/* parameters' size, for the deadline */
} DbBatch;

extern void db_batch_init(DbBatch *b);
extern void db_batch_add(DbBatch *b, const char *sql, int nparams, const DbParam *params);
extern void db_batch_sync(DbBatch *b);
extern DbOutcome db_batch_run(DbBatch *b);
extern void db_batch_free(DbBatch *b);
extern const char *db_value(const DbResult *r, int row, int col);
extern int	db_ntuples(const DbResult *r);
extern bool db_in_transaction(void);

/* ---- steps.c ---- */

/* Who we are in agent.runners, from the registration. */
typedef struct RunnerIdentity
{
	bool		registered;
	char		id[UUID_STR_LEN];
	char		incarnation[UUID_STR_LEN];
	char		state[16];		/* active | draining | removed */
	msec		lease_ms;
	msec		heartbeat_ms;
	msec		renewed_at;		/* when the last heartbeat that renewed was sent */
	msec		next_heartbeat;
	bool		drained_said;	/* "drained" was logged for this drain */
	char		refused[512];	/* why the last registration was refused, or "" */
} RunnerIdentity;

/*
 * Fence ourselves this long before a lease we could not renew runs out by
 * our count (which starts when the claim or the heartbeat was sent, never
 * later than the database's): what the kill may take to land (the fence's
 * thread waking, the launcher's worker reading the hang-up, the kernel
 * ending the sandbox's pid namespace) and the drift between our monotonic
 * clock and the database's over one lease.
 */
#define SELF_FENCE_MARGIN_MS	1000

extern RunnerIdentity me;
/* what steps.c and steps_result.c share */
extern DbParam step_param(const char *s);
extern bool step_fenced(const DbResult *r);
extern void step_lease_params(DbParam *p, const Run *run);

extern bool step_register(void);
extern bool step_heartbeat(void);
extern msec step_lease_deadline(const Run *run);
extern bool step_fence_due(const Run *run);
extern void step_fence_update(void);
extern void step_self_fence(void);
extern int	step_claim(int want, ClaimedRun *out);
extern msec step_mark_due(void);
extern bool step_prepare(Run *run, bool workspace_is_new);
extern void step_mark_started(void);
extern bool step_check_cancellations(void);
extern bool step_sweep_lists(StrList *live_sessions, StrList *skills_in_use);
/* steps_result.c */
extern bool step_store_output(const bool ready[][NSTREAMS], bool *stored);
extern DbOutcome step_record_result(Run *run, const char *error, int jail_status,
									bool with_files, bool *applied, char **err);

/* ---- fence.c ---- */
#define FENCE_NEVER		PG_INT64_MAX	/* a deadline that never comes */
extern bool fence_start(void);
extern void fence_arm(const Run *run, msec deadline);
extern void fence_set_deadline(const Run *run, msec deadline);
extern void fence_disarm(const Run *run);
extern void fence_reset(const Run *run);
extern bool fence_fired(const Run *run);

/* ---- local.c ---- */
extern int	link_fd;			/* -1 unless --local */
extern void link_send_status(void);
extern void link_send(const char *kind);
extern void link_read(bool *eof);

/* ---- loop.c ---- */
extern volatile sig_atomic_t shutdown_requested;
extern volatile sig_atomic_t reload_requested;
extern int	signal_pipe[2];
extern void runner_loop(void);
extern void runner_reload(void);

/* ---- check.c ---- */
extern int	runner_check(void);

/* ---- jail_wire.c (src/jail/wire.c) ---- */
#include "../jail/wire_protocol.h"

/* ---- images.c ---- */

/* An image of the store (docs/images.md): NAME@DIGEST/{root,manifest}. */
typedef struct RunnerImage
{
	char		name[64];
	char		digest[65];
	char		dir[MAXPGPATH];	/* the NAME@DIGEST directory (--image) */
	char	   *manifest;		/* its text (palloc'd) */
	char		warm_modules[JAIL_WARM_MODULES_LEN];	/* "": the setting's */
} RunnerImage;

extern bool images_rescan(void);
extern const RunnerImage *images_find(const char *name, const char *digest);
extern int	images_count(void);
extern const RunnerImage *images_get(int i);
extern void images_registered(void);
extern void images_report(void);

/* isolation.c */
extern const char *isolation_runsc(void);
extern bool isolation_gvisor(const char **problem);
extern void isolation_registered(void);
extern void isolation_reprobe(void);
extern void isolation_report(void);

#endif							/* SANDBOX_RUNNER_H */
