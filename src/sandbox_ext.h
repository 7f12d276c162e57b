/*-------------------------------------------------------------------------
 *
 * sandbox_ext.h
 *		Declarations shared by the files of the sandbox_ext module.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_EXT_H
#define SANDBOX_EXT_H

#ifndef SANDBOX_DEFAULT_JAIL_PATH
#define SANDBOX_DEFAULT_JAIL_PATH "/usr/lib/postgresql/15/bin/sandbox-jail"
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
extern int	sandbox_preview_bytes;
extern bool sandbox_preloaded;

#endif							/* SANDBOX_EXT_H */
