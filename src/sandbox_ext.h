/*-------------------------------------------------------------------------
 *
 * sandbox_ext.h
 *		Declarations shared by the files of the sandbox_ext module.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EXT_H
#define SANDBOX_EXT_H

/*
 * Where work directories live when sandbox.work_dir is empty (the default):
 * <base>/<the cluster's system identifier>.  scripts/jail-host-setup.sh
 * mounts a size-limited filesystem there; a work directory on the data
 * directory's filesystem is refused (docs/execution.md).
 */
#ifndef SANDBOX_DEFAULT_WORK_BASE
#define SANDBOX_DEFAULT_WORK_BASE "/var/lib/sandbox_ext"
#endif

/* Hard ceiling for sandbox.max_concurrent_runs (sizes shared memory). */
#define SANDBOX_MAX_SLOTS 64

extern char *sandbox_database;
extern char *sandbox_jail_path;
extern char *sandbox_work_dir;
extern int	sandbox_max_concurrent_runs;
extern int	sandbox_default_wall_time_s;
extern int	sandbox_max_wall_time_s;
extern int	sandbox_default_memory_mb;
extern int	sandbox_max_memory_mb;
extern int	sandbox_default_pids;
extern int	sandbox_output_limit_kb;
extern int	sandbox_start_report_delay_ms;
extern int	sandbox_preview_bytes;
extern int	sandbox_workspace_size_mb;
extern int	sandbox_workspace_entries;
extern bool sandbox_jail_launcher;
/* the local runner's launcher's socket, relative to the data directory (its page: + JAIL_WARM_PAGE_SUFFIX) */
#define SANDBOX_LAUNCHER_SOCKET LINK_RUN_DIR "/jail.sock"
extern int	sandbox_warm_python;
extern int	sandbox_warm_node;
extern char *sandbox_warm_modules;
extern int	sandbox_warm_memory_mb;
extern bool sandbox_work_dir_on_data_fs;
extern bool sandbox_require_cgroup;
extern bool sandbox_local_runner;
extern char *sandbox_local_runner_conninfo;
extern char *sandbox_egress_resolver;
extern char *sandbox_egress_ca_file;
extern char *sandbox_image_store;
extern char *sandbox_secrets_key_file;
extern bool sandbox_preloaded;

/*
 * Shared memory: the supervisor and what its local runner's slots run (for
 * agent.worker_status()), and the condition variable that backends in
 * agent.wait() sleep on.
 */
#include "storage/condition_variable.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

typedef struct SandboxSlot
{
	bool		in_use;
	pg_uuid_t	invocation_id;
} SandboxSlot;

typedef struct SandboxShared
{
	slock_t		mutex;
	int			supervisor_pid;
	TimestampTz supervisor_started_at;
	int			slots_in_use;
	char		work_dir[1024];		/* the supervisor's work directory */
	char		problem[256];	/* why it claims nothing, or "" */
	SandboxSlot slots[SANDBOX_MAX_SLOTS];
	ConditionVariable finished_cv;
} SandboxShared;

extern SandboxShared *sandbox_shared;

extern void sandbox_shmem_init(void);
extern void sandbox_supervisor_register(void);

/* local_runner.c: the supervisor's local sandbox-runner (supervisor.c only) */
struct WaitEventSet;
extern void sandbox_local_runner_init(void);
extern bool sandbox_local_runner_configure(void);
extern void sandbox_local_runner_ensure(void);
extern void sandbox_local_runner_reload(void);
extern void sandbox_local_runner_stop(void);
extern void sandbox_local_runner_wait_on(struct WaitEventSet *wes);
extern void sandbox_local_runner_event(pgsocket fd, bool *staged);
extern long sandbox_local_runner_timeout(long timeout);
extern void sandbox_local_runner_poll(void);
extern void sandbox_register_worker(const char *function, const char *name);

/* xact.c: a short transaction around SPI, for the workers */
extern void sandbox_xact_begin(const char *activity);
extern void sandbox_xact_commit(void);
extern ErrorData *sandbox_xact_abort(void);
extern void sandbox_xact_abort_log(int elevel, const char *doing);
/* xact.c: a plan prepared once per backend and kept (SPI connected) */
extern struct _SPI_plan *sandbox_keep_plan(struct _SPI_plan **slot, const char *sql,
										   int nargs, Oid *types);

/*
 * The one commit-time wake-up (shmem.c): what a committing transaction
 * wakes.  FINISHED broadcasts the condition variable of agent.wait().
 */
#define SANDBOX_WAKE_EXPORTER		0x04
#define SANDBOX_WAKE_EXPORT_RESET	0x08	/* and leave its error state */
#define SANDBOX_WAKE_FINISHED		0x10	/* an invocation ended: agent.wait() */
extern void sandbox_wake_at_commit(int what);

/* The ClickHouse exporter's entry points (exporter.h has the rest). */
extern void sandbox_export_define_gucs(void);
extern void sandbox_export_register(void);
extern void sandbox_export_wake_now(bool reset);
extern Size sandbox_export_shmem_size(void);
extern void sandbox_export_shmem_startup(void);

/* digest.c */
extern text *sandbox_sha256_utf8(const char *s, int len);

/* refusals.c: refusals that outlive their caller's rollback */
struct Latch;
extern Size sandbox_refusals_shmem_size(void);
extern void sandbox_refusals_shmem_startup(void);
extern void sandbox_refusals_attach(struct Latch *latch);
extern void sandbox_refusals_detach(void);
extern bool sandbox_refusals_write(void);

/* The audit hash version new events are appended with (digest.c, audit.c). */
#define SANDBOX_AUDIT_HASH_VERSION 2

#endif							/* SANDBOX_EXT_H */
