/*-------------------------------------------------------------------------
 *
 * sandbox_ext.c
 *		Module entry point: GUCs and background worker registration.
 *
 * This file owns the `sandbox.*` configuration parameters and decides, at
 * load time, which background workers the postmaster starts.  It runs no
 * untrusted code and holds no state of its own: the supervisor (which
 * starts the local sandbox-runner, a separate program that runs the
 * sandboxes; the run settings below are passed to it) and the exporter
 * live in their own files.
 *
 * Workers and the database.  The supervisor and the exporter connect to
 * sandbox.database, and a connection to a database that does not exist is
 * a FATAL error: at a cluster's first start (initdb, start, then CREATE
 * DATABASE) or a restore into a new cluster, a worker registered at load
 * time would fail and be restarted every second until the database is
 * there.  So the postmaster starts one static worker, the starter
 * (sandbox_starter_main), which connects to no database (it reads only the
 * shared catalog pg_database), says once that it is waiting when the
 * database is missing, and when it exists registers the real workers as
 * dynamic background workers and exits.  The dynamic workers are
 * restarted by the postmaster on failure like static ones (and kept across
 * a crash restart); they start only when recovery has finished, so on a
 * standby nothing starts before a promotion.
 *
 * Tenant context.  The backend names the tenant it acts for with
 * `SET LOCAL sandbox.org_id = '<uuid>'` and `sandbox.workspace_id` at the
 * start of each transaction (or agent.set_tenant()).  The row-level
 * security policies of schema agent read these settings; they are defined
 * here only so that a malformed value is refused when it is set rather than
 * when a policy casts it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/wait_event.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"
#include "jail/wire_protocol.h"

PG_MODULE_MAGIC;

/* GUC variables */
char	   *sandbox_database = NULL;
char	   *sandbox_jail_path = NULL;
char	   *sandbox_work_dir = NULL;
int			sandbox_max_concurrent_runs = 4;
int			sandbox_default_wall_time_s = 30;
int			sandbox_max_wall_time_s = 300;
int			sandbox_default_memory_mb = 512;
int			sandbox_max_memory_mb = 2048;
int			sandbox_default_pids = 64;
int			sandbox_output_limit_kb = 1024;
int			sandbox_start_report_delay_ms = 20;
int			sandbox_preview_bytes = 4096;
int			sandbox_workspace_size_mb = 256;
int			sandbox_workspace_entries = 10000;
bool		sandbox_jail_launcher = true;
int			sandbox_warm_python = 2;
int			sandbox_warm_node = 1;
char	   *sandbox_warm_modules = NULL;
int			sandbox_warm_memory_mb = 1024;
bool		sandbox_work_dir_on_data_fs = false;
bool		sandbox_require_cgroup = true;
bool		sandbox_local_runner = true;
char	   *sandbox_local_runner_conninfo = NULL;
char	   *sandbox_egress_resolver = NULL;
char	   *sandbox_egress_ca_file = NULL;
char	   *sandbox_image_store = NULL;
char	   *sandbox_secrets_key_file = NULL;
static char *sandbox_org_id = NULL;
static char *sandbox_workspace_id = NULL;

/*
 * sandbox.jail_path's default: the sandbox-jail beside this server's own
 * postgres executable (make install puts it in the bindir the build was
 * configured for, and sandbox-runner beside it: local_runner.c).  Not a
 * path fixed at compile time: a relocated copy of the PostgreSQL tree
 * (scripts/private-pg.sh) would then run another build's jail without a
 * word.  A GUC keeps a pointer to its boot value: static storage.
 */
static char sandbox_default_jail_path[MAXPGPATH];

/* True when loaded through shared_preload_libraries. */
bool		sandbox_preloaded = false;

void		_PG_init(void);

/*
 * Accept an empty string (no tenant) or a well-formed uuid.  Parsing here
 * keeps a typo from surfacing later as a confusing cast error inside a
 * policy.
 */
/* sandbox.warm_modules: module names only (the launcher checks the same) */
static bool
sandbox_check_warm_modules(char **newval, void **extra, GucSource source)
{
	char		err[256];

	if (*newval == NULL || jail_wire_check_modules(*newval, err, sizeof(err)))
		return true;
	GUC_check_errcode(ERRCODE_INVALID_PARAMETER_VALUE);
	GUC_check_errmsg("invalid sandbox.warm_modules: %s", err);
	GUC_check_errhint("List Python module names separated by commas, for example \"numpy,pandas\".");
	return false;
}

static bool
sandbox_check_uuid(char **newval, void **extra, GucSource source)
{
	const char *s = *newval;
	int			len;
	int			i;
	int			hex = 0;

	if (s == NULL || s[0] == '\0')
		return true;
	len = strlen(s);
	if (len != 36)
		goto bad;
	for (i = 0; i < len; i++)
	{
		if (i == 8 || i == 13 || i == 18 || i == 23)
		{
			if (s[i] != '-')
				goto bad;
		}
		else if (isxdigit((unsigned char) s[i]))
			hex++;
		else
			goto bad;
	}
	if (hex == 32)
		return true;
bad:
	GUC_check_errcode(ERRCODE_INVALID_TEXT_REPRESENTATION);
	/* at most 64 bytes of it: an error never echoes a huge input */
	GUC_check_errmsg("invalid tenant id \"%.64s%s\"", s, strlen(s) > 64 ? "..." : "");
	GUC_check_errhint("Tenant ids are uuids, for example \"6f1c2a0e-3c4b-4d5e-8f90-123456789abc\".");
	return false;
}

static void
sandbox_define_gucs(void)
{
	DefineCustomStringVariable("sandbox.org_id",
							   "Organisation the current transaction acts for.",
							   "Row-level security of schema agent shows only this organisation's rows.",
							   &sandbox_org_id, "",
							   PGC_USERSET, 0,
							   sandbox_check_uuid, NULL, NULL);
	DefineCustomStringVariable("sandbox.workspace_id",
							   "Workspace the current transaction acts for.",
							   NULL,
							   &sandbox_workspace_id, "",
							   PGC_USERSET, 0,
							   sandbox_check_uuid, NULL, NULL);

	/*
	 * A PGC_POSTMASTER setting may only be defined while the postmaster
	 * preloads us (a backend loading the library later would die with a
	 * FATAL); it only matters to the workers, which exist only then.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("sandbox.database",
								   "Database the sandbox supervisor connects to.",
								   NULL,
								   &sandbox_database, "postgres",
								   PGC_POSTMASTER, 0,
								   NULL, NULL, NULL);
	/*
	 * my_exec_path is the postgres executable the postmaster found at its
	 * start (symbolic links resolved); every process of the server inherits
	 * it.
	 */
	strlcpy(sandbox_default_jail_path, my_exec_path, sizeof(sandbox_default_jail_path));
	get_parent_directory(sandbox_default_jail_path);
	join_path_components(sandbox_default_jail_path, sandbox_default_jail_path, "sandbox-jail");
	DefineCustomStringVariable("sandbox.jail_path",
							   "Path of the sandbox-jail executable.",
							   "Default: sandbox-jail in the directory of this server's postgres executable.",
							   &sandbox_jail_path, sandbox_default_jail_path,
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.egress_resolver",
							   "DNS resolver of the egress proxy (ADDRESS or ADDRESS:PORT).",
							   "Empty: the first nameserver of the host's /etc/resolv.conf. Only the proxy resolves; sandboxes have no DNS (docs/egress.md).",
							   &sandbox_egress_resolver, "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.egress_ca_file",
							   "A PEM file of CA certificates the sandbox's clients trust in addition to the system's, for runs with egress.",
							   "For a test CA or a corporate one; empty: the system's only (docs/egress.md).",
							   &sandbox_egress_ca_file, "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.image_store",
							   "Directory of the sandbox images the local runner holds (sandbox-image builds them there).",
							   "Each NAME@DIGEST directory in it is an image the local runner reports and runs on (docs/images.md). Without any, every run is on the host's own root.",
							   &sandbox_image_store, "/var/lib/sandbox-images",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.secrets_key_file",
							   "The private key file with which the local runner opens runs' secrets.",
							   "Empty: runs with secrets fail to start on this host. A key readable by the server's OS user is readable by a database superuser too (docs/secrets.md, \"Where the key lives\").",
							   &sandbox_secrets_key_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.work_dir",
							   "Directory under which per-run workspaces are created.",
							   "Empty: " SANDBOX_DEFAULT_WORK_BASE "/<system identifier>. "
							   "Relative paths are relative to the data directory. It must not be "
							   "on the data directory's filesystem (see sandbox.work_dir_on_data_fs).",
							   &sandbox_work_dir, "",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);
	DefineCustomBoolVariable("sandbox.work_dir_on_data_fs",
							 "Allow sandbox.work_dir on the filesystem of the data directory or the WAL.",
							 "Off: the supervisor claims nothing while it is, so that no run can fill "
							 "the disk the database lives on.",
							 &sandbox_work_dir_on_data_fs, false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomBoolVariable("sandbox.require_cgroup",
							 "Refuse to run a sandbox without its own cgroup.",
							 "On: a host where the jail cannot get a delegated cgroup ends each run as "
							 "provision_failed with the jail's reason; off: such runs go on with rlimits "
							 "only (no memory cap), which the verdict's \"cgroup\":\"none\" shows.",
							 &sandbox_require_cgroup, true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.workspace_size",
							"Most bytes a run's workspace may hold.",
							"A run past it is killed (file_too_large); a session workspace left past "
							"it is rebuilt before its next run.",
							&sandbox_workspace_size_mb, 256, 1, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.workspace_entries",
							"Most files, directories and links a run's workspace may hold.",
							"Like sandbox.workspace_size, for entries (inodes).",
							&sandbox_workspace_entries, 10000, 1, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("sandbox.jail_launcher",
							 "Run sandboxes through a resident sandbox-jail launcher.",
							 "The launcher (sandbox-jail --serve, started by the supervisor) "
							 "builds sandboxes ahead of requests; off starts one jail process per run.",
							 &sandbox_jail_launcher, true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("sandbox.warm_python",
							"Python interpreters the launcher keeps started ahead of requests.",
							"Each is one sandbox, confined as a cold run, with sandbox.warm_modules "
							"imported, used by one run only; 0 turns warm Python off.",
							&sandbox_warm_python, 2, 0, JAIL_WARM_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.warm_node",
							"Node interpreters the launcher keeps started ahead of requests.",
							"0 turns warm Node off.",
							&sandbox_warm_node, 1, 0, JAIL_WARM_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.warm_modules",
							   "Python modules a warm interpreter imports before its request.",
							   "Module names separated by commas; empty: none.",
							   &sandbox_warm_modules, "numpy,pandas,requests",
							   PGC_SIGHUP, 0,
							   sandbox_check_warm_modules, NULL, NULL);
	DefineCustomIntVariable("sandbox.warm_memory",
							"Memory all warm interpreters together may hold while they wait.",
							"Each waits in a cgroup limited to its share; what it holds then counts "
							"against its run's memory limit.",
							&sandbox_warm_memory_mb, 1024, 16, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("sandbox.local_runner",
							 "Run sandboxes on this host, in a sandbox-runner the supervisor starts.",
							 "Off: the supervisor starts no runner; only runners on other hosts "
							 "(docs/runners.md) run sandboxes.",
							 &sandbox_local_runner, true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);
	DefineCustomStringVariable("sandbox.local_runner_conninfo",
							   "How the local sandbox-runner connects to this server.",
							   "Empty: the first unix_socket_directories entry, the server's port and "
							   "sandbox.database, as the server's OS user (peer or trust "
							   "authentication). Set it when connecting so needs a password.",
							   &sandbox_local_runner_conninfo, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("sandbox.max_concurrent_runs",
							"Maximum number of jails running at once.",
							"0 pauses the supervisor: runs in progress finish, nothing new is claimed.",
							&sandbox_max_concurrent_runs, 4, 0, SANDBOX_MAX_SLOTS,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.default_wall_time",
							"Wall-clock limit of a run when the request gives none.",
							NULL,
							&sandbox_default_wall_time_s, 30, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.max_wall_time",
							"Largest wall-clock limit a request may ask for.",
							NULL,
							&sandbox_max_wall_time_s, 300, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.default_memory",
							"Memory limit of a run when the request gives none.",
							NULL,
							&sandbox_default_memory_mb, 512, 16, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.max_memory",
							"Largest memory limit a request may ask for.",
							NULL,
							&sandbox_max_memory_mb, 2048, 16, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.default_pids",
							"Process limit of a run.",
							NULL,
							&sandbox_default_pids, 64, 4, 4096,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.output_limit",
							"Output kept per stream and run.",
							"Output beyond it is discarded and the run is flagged output_truncated.",
							&sandbox_output_limit_kb, 1024, 1, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.start_report_delay",
							"How long after its start a run is reported running.",
							"A run that ends sooner is recorded once, by its finish; 0 reports every run at its start.",
							&sandbox_start_report_delay_ms, 20, 0, 60000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);
	DefineCustomIntVariable("sandbox.preview_size",
							"Bytes of output kept as the tool call's preview.",
							NULL,
							&sandbox_preview_bytes, 4096, 0, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	sandbox_export_define_gucs();

	MarkGUCPrefixReserved("sandbox");
}

/*
 * The workers the starter registers (filled by sandbox_register_worker() in
 * _PG_init, in the postmaster; the starter is forked from it).
 */
#define SANDBOX_MAX_WORKERS 4
typedef struct SandboxWorkerSpec
{
	char		function[BGW_MAXLEN];
	char		name[BGW_MAXLEN];
} SandboxWorkerSpec;
static SandboxWorkerSpec sandbox_workers[SANDBOX_MAX_WORKERS];
static int	sandbox_nworkers = 0;

/* How often the starter looks for the database while it is missing. */
#define STARTER_POLL_MS 1000

/*
 * Name one of the module's background workers: connected to
 * sandbox.database, restarted one second after it exits with a failure
 * (an exit with status 1, a crash) so that recovery runs.  The starter
 * registers it once the database exists.
 */
void
sandbox_register_worker(const char *function, const char *name)
{
	if (sandbox_nworkers >= SANDBOX_MAX_WORKERS)
		elog(ERROR, "too many sandbox_ext background workers");
	strlcpy(sandbox_workers[sandbox_nworkers].function, function, BGW_MAXLEN);
	strlcpy(sandbox_workers[sandbox_nworkers].name, name, BGW_MAXLEN);
	sandbox_nworkers++;
}

static void
fill_worker(BackgroundWorker *worker, const char *function, const char *name, int flags)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = flags;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = 1;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "sandbox_ext");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", name);
	worker->bgw_main_arg = (Datum) 0;
}

/*
 * Whether sandbox.database exists.  pg_database is a shared catalog, read
 * with a heap scan as the autovacuum launcher does: without a database,
 * no index or syscache lookup is possible.
 */
static bool
starter_database_exists(void)
{
	bool		found = false;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (!found && (tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
		found = strcmp(NameStr(((Form_pg_database) GETSTRUCT(tup))->datname), sandbox_database) == 0;
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return found;
}

/*
 * The starter: wait for sandbox.database, register the workers, exit 0
 * (which unregisters the starter itself).  A failure to register (no free
 * slot in max_worker_processes) is retried every second, with one warning.
 */
PGDLLEXPORT void sandbox_starter_main(Datum arg);

/* The starter's one wait: a poll interval, a signal, or a shutdown (exit). */
static void
starter_wait(void)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 STARTER_POLL_MS, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
	if (ShutdownRequestPending)
		proc_exit(0);
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
}

void
sandbox_starter_main(Datum arg)
{
	bool		registered[SANDBOX_MAX_WORKERS] = {false};
	bool		said_waiting = false;
	bool		warned = false;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("sandbox_ext starter");

	while (!starter_database_exists())
	{
		if (!said_waiting)
		{
			ereport(LOG,
					(errmsg("sandbox_ext is waiting for database \"%s\" to be created",
							sandbox_database),
					 errdetail("The supervisor and the exporter start when it exists."),
					 errhint("Create the database, or set sandbox.database to the database where sandbox_ext is installed.")));
			said_waiting = true;
		}
		starter_wait();
	}
	if (said_waiting)
		ereport(LOG,
				(errmsg("sandbox_ext found database \"%s\"; starting its workers", sandbox_database)));

	for (;;)
	{
		bool		missing = false;

		for (int i = 0; i < sandbox_nworkers; i++)
		{
			BackgroundWorker worker;

			if (registered[i])
				continue;
			fill_worker(&worker, sandbox_workers[i].function, sandbox_workers[i].name,
						BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION);
			registered[i] = RegisterDynamicBackgroundWorker(&worker, NULL);
			if (!registered[i])
			{
				if (!warned)
					ereport(WARNING,
							(errmsg("could not start background worker \"%s\"", sandbox_workers[i].name),
							 errdetail("No background worker slot is free; trying again every second."),
							 errhint("Raise max_worker_processes.")));
				warned = true;
				missing = true;
			}
		}
		if (!missing)
			proc_exit(0);
		starter_wait();
	}
}

void
_PG_init(void)
{
	sandbox_define_gucs();

	/* Workers exist only when the postmaster itself loaded us. */
	if (!process_shared_preload_libraries_in_progress)
		return;
	sandbox_preloaded = true;
	sandbox_shmem_init();
	sandbox_supervisor_register();
	sandbox_export_register();
	{
		BackgroundWorker starter;

		fill_worker(&starter, "sandbox_starter_main", "sandbox_ext starter",
					BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION);
		RegisterBackgroundWorker(&starter);
	}
}
