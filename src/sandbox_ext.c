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

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"

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
int			sandbox_preview_bytes = 4096;
int			sandbox_workspace_size_mb = 256;
int			sandbox_workspace_entries = 10000;
bool		sandbox_jail_launcher = true;
bool		sandbox_work_dir_on_data_fs = false;
bool		sandbox_require_cgroup = true;
bool		sandbox_local_runner = true;
char	   *sandbox_local_runner_conninfo = NULL;
char	   *sandbox_egress_resolver = NULL;
char	   *sandbox_egress_ca_file = NULL;
static char *sandbox_org_id = NULL;
static char *sandbox_workspace_id = NULL;

/* True when loaded through shared_preload_libraries. */
bool		sandbox_preloaded = false;

void		_PG_init(void);

/*
 * Accept an empty string (no tenant) or a well-formed uuid.  Parsing here
 * keeps a typo from surfacing later as a confusing cast error inside a
 * policy.
 */
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
	DefineCustomStringVariable("sandbox.jail_path",
							   "Path of the sandbox-jail executable.",
							   NULL,
							   &sandbox_jail_path, SANDBOX_DEFAULT_JAIL_PATH,
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
 * Register one of the module's background workers: connected to
 * sandbox.database, restarted one second after it exits with a failure
 * (an exit with status 1, a crash) so that recovery runs.
 */
void
sandbox_register_worker(const char *function, const char *name)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "sandbox_ext");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s", name);
	worker.bgw_main_arg = (Datum) 0;
	RegisterBackgroundWorker(&worker);
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
}
