/*-------------------------------------------------------------------------
 *
 * workdir.c
 *		The supervisor's work directory: where it is and whether it may be
 *		used, a run's directory and workspace, session workspaces, skills
 *		materialised on disk, and sweeping away what the database no longer
 *		needs.
 *
 *	<work root>/<invocation>/code			the code of a run
 *	<work root>/<invocation>/workspace		a run without a conversation
 *	<work root>/sessions/<session>/workspace	a conversation's session
 *	<work root>/skills/<skill id>/			one skill version, read-only
 *
 * A workspace was writable by untrusted code: everything done inside one
 * goes through files.c, which never follows a link.  This file touches no
 * table; steps.c reads what the database says and calls it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/spin.h"
#include "utils/memutils.h"

#include "sandbox_ext.h"
#include "sandbox_files.h"
#include "supervisor.h"

/* How often the work directory is checked while it is unusable. */
#define WORK_DIR_CHECK_MS	10000

/* Why nothing is claimed (the work directory is unusable), or NULL. */
static char *work_problem = NULL;
static TimestampTz work_checked_at = 0;

/* ----------------------------------------------------------------
 * The work root
 * ----------------------------------------------------------------
 */

/*
 * The work root as an absolute path: the jail resolves the paths we give
 * it after changing directory.  Empty sandbox.work_dir (the default) is
 * SANDBOX_DEFAULT_WORK_BASE/<system identifier>, so that several clusters
 * of one host share the mount without sharing directories; a relative one
 * is relative to the data directory.
 */
const char *
sandbox_work_root(void)
{
	static char path[MAXPGPATH];

	if (sandbox_work_dir[0] == '\0')
		snprintf(path, sizeof(path), "%s/" UINT64_FORMAT, SANDBOX_DEFAULT_WORK_BASE,
				 GetSystemIdentifier());
	else if (is_absolute_path(sandbox_work_dir))
		strlcpy(path, sandbox_work_dir, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s/%s", DataDir, sandbox_work_dir);
	return path;
}

/* Is the directory st on the filesystem of `other` (followed)? */
static bool
same_filesystem(const struct stat *st, const char *other)
{
	struct stat ost;

	return stat(other, &ost) == 0 && ost.st_dev == st->st_dev;
}

/*
 * Why the work root cannot be used, or NULL when it can (creating it if
 * needed).  A work root on the filesystem of the data directory or the WAL
 * is refused unless sandbox.work_dir_on_data_fs says otherwise: a run that
 * fills its workspace must never fill the disk the database writes to.
 */
static char *
work_dir_problem(void)
{
	const char *root = sandbox_work_root();
	char		wal[MAXPGPATH];
	struct stat st;

	if (sandbox_work_dir[0] == '\0' && stat(SANDBOX_DEFAULT_WORK_BASE, &st) != 0)
		return psprintf("the default work directory \"%s\" does not exist; run "
						"scripts/jail-host-setup.sh as root, or set sandbox.work_dir",
						SANDBOX_DEFAULT_WORK_BASE);
	if (mkdir(root, S_IRWXU) != 0 && errno != EEXIST)
		return psprintf("could not create sandbox.work_dir \"%s\": %m", root);
	if (lstat(root, &st) != 0)
		return psprintf("could not stat sandbox.work_dir \"%s\": %m", root);
	if (!S_ISDIR(st.st_mode))
		return psprintf("sandbox.work_dir \"%s\" is not a directory", root);
	if (access(root, W_OK | X_OK) != 0)
		return psprintf("sandbox.work_dir \"%s\" is not writable: %m", root);
	if (!sandbox_work_dir_on_data_fs)
	{
		snprintf(wal, sizeof(wal), "%s/pg_wal", DataDir);
		if (same_filesystem(&st, DataDir) || same_filesystem(&st, wal))
			return psprintf("sandbox.work_dir \"%s\" is on the filesystem of the data directory "
							"or the WAL; put it on a filesystem of its own (scripts/jail-host-setup.sh "
							"mounts one), or set sandbox.work_dir_on_data_fs = on", root);
	}
	return NULL;
}

/*
 * Check the work root (now with force, else only when it was unusable and
 * the last check is old), publish the answer for agent.worker_status() and
 * log a change.  True when usable.
 */
bool
sandbox_work_dir_usable(bool force)
{
	char	   *problem;
	bool		changed;

	if (!force && work_problem == NULL)
		return true;
	if (!force && !TimestampDifferenceExceeds(work_checked_at, GetCurrentTimestamp(),
											  WORK_DIR_CHECK_MS))
		return false;
	work_checked_at = GetCurrentTimestamp();
	problem = work_dir_problem();
	changed = (problem == NULL) != (work_problem == NULL) ||
		(problem && strcmp(problem, work_problem) != 0);
	if (work_problem)
		pfree(work_problem);
	work_problem = problem ? MemoryContextStrdup(TopMemoryContext, problem) : NULL;
	if (changed && problem)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("the sandbox supervisor claims no work: %s", problem)));
	else if (changed)
		ereport(LOG, (errmsg("the sandbox work directory \"%s\" is usable", sandbox_work_root())));
	SpinLockAcquire(&sandbox_shared->mutex);
	strlcpy(sandbox_shared->work_dir, sandbox_work_root(), sizeof(sandbox_shared->work_dir));
	strlcpy(sandbox_shared->problem, problem ? problem : "", sizeof(sandbox_shared->problem));
	SpinLockRelease(&sandbox_shared->mutex);
	return problem == NULL;
}

/*
 * Remove every entry of the work root but the sessions and the skills.
 * Called at start, after recovery, when no run of ours exists yet.
 */
void
sandbox_clean_work_root(void)
{
	DIR		   *d;
	struct dirent *de;
	char		path[MAXPGPATH];

	d = opendir(sandbox_work_root());
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			strcmp(de->d_name, "sessions") == 0 || strcmp(de->d_name, "skills") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", sandbox_work_root(), de->d_name);
		elog(LOG, "removing leftover work directory \"%s\"", path);
		sandbox_remove_work_dir(path);
	}
	closedir(d);
}

/* ----------------------------------------------------------------
 * A run's directories
 * ----------------------------------------------------------------
 */

static bool
mkdir_p(const char *path, char **err)
{
	char		buf[MAXPGPATH];

	strlcpy(buf, path, sizeof(buf));
	for (char *p = buf + 1; *p; p++)
	{
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, S_IRWXU) != 0 && errno != EEXIST)
		{
			*err = psprintf("could not create directory \"%s\": %m", buf);
			return false;
		}
		*p = '/';
	}
	if (mkdir(buf, S_IRWXU) != 0 && errno != EEXIST)
	{
		*err = psprintf("could not create directory \"%s\": %m", buf);
		return false;
	}
	return true;
}

/*
 * Is a session workspace within the limits a run may start in?  A payload
 * can leave it past them (it is killed, but what it wrote stays); the jail
 * would then refuse to start the next run.  Such a workspace is rebuilt
 * instead: emptied, and the conversation's files put back.  The scan is
 * bounded by sandbox.workspace_entries.
 */
static const char *
workspace_over_limits(const char *path)
{
	Manifest   *m = sandbox_manifest_scan(path, sandbox_workspace_entries + 1);
	const char *why = NULL;

	if (m->incomplete)
		why = "more entries than sandbox.workspace_entries, or too deep a tree";
	else if (m->disk_bytes > (int64) sandbox_workspace_size_mb * 1024 * 1024)
		why = "more bytes than sandbox.workspace_size";
	if (m->entries)
		pfree(m->entries);
	pfree(m);
	return why;
}

/*
 * Make a claimed run's directory and workspace: the conversation's session
 * workspace (emptied when the session is new or the workspace is past its
 * limits), or a fresh one.  *workspace_is_new says whether every file of
 * the conversation must be put back.  False with run->start_error set on
 * failure.
 */
bool
sandbox_prepare_dirs(SandboxRun *run, const ClaimedRun *c, bool *workspace_is_new)
{
	RunDisk    *d = &run->disk;
	struct stat st;
	const char *why;

	*workspace_is_new = true;
	snprintf(d->dir, sizeof(d->dir), "%s/%s", sandbox_work_root(), run->idstr);
	if (!mkdir_p(sandbox_work_root(), &run->start_error))
		return false;
	if (mkdir(d->dir, S_IRWXU) != 0)
	{
		run->start_error = psprintf("could not create work directory \"%s\": %m", d->dir);
		return false;
	}
	if (!c->has_session)
	{
		snprintf(d->workspace, sizeof(d->workspace), "%s/workspace", d->dir);
		return mkdir_p(d->workspace, &run->start_error);
	}
	d->has_session = true;
	strlcpy(d->session, c->session, sizeof(d->session));
	snprintf(d->workspace, sizeof(d->workspace), "%s/sessions/%s/workspace",
			 sandbox_work_root(), c->session);
	*workspace_is_new = (stat(d->workspace, &st) != 0);
	if (!*workspace_is_new && c->fresh_session)
	{
		sandbox_remove_work_dir(d->workspace);
		*workspace_is_new = true;
	}
	else if (!*workspace_is_new && (why = workspace_over_limits(d->workspace)) != NULL)
	{
		ereport(LOG,
				(errmsg("rebuilding the workspace of session %s before invocation %s: it holds %s",
						c->session, run->idstr, why)));
		sandbox_remove_work_dir(d->workspace);
		*workspace_is_new = true;
	}
	return mkdir_p(d->workspace, &run->start_error);
}

/*
 * Write the code of a run into its directory (*path gets where), and take
 * the manifest of the workspace: what differs after the run was produced.
 */
bool
sandbox_write_code(SandboxRun *run, const char *code, char *path, size_t pathlen)
{
	MemoryContext old;

	snprintf(path, pathlen, "%s/code", run->disk.dir);
	if (!sandbox_place_file(run->disk.dir, "code", code, strlen(code), 0600, &run->start_error))
		return false;
	old = MemoryContextSwitchTo(run->cxt);
	run->disk.before = sandbox_manifest_scan(run->disk.workspace, sandbox_workspace_entries + 1);
	MemoryContextSwitchTo(old);
	return true;
}

/* Put one of the conversation's files into the run's workspace (or raise). */
void
sandbox_workspace_place(SandboxRun *run, const char *name, const char *data, size_t len)
{
	char	   *err = NULL;

	if (!sandbox_place_file(run->disk.workspace, name, data, len, 0644, &err))
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not place file \"%s\" in the workspace: %s", name, err)));
}

/* ----------------------------------------------------------------
 * Skills on disk
 *
 * A skill version is immutable, so a directory that exists is complete: it
 * is renamed into place only after every file is written.
 * ----------------------------------------------------------------
 */

/* The directory of a skill version; *installed says whether it exists. */
char *
sandbox_skill_dir(const char *skill_id, bool *installed)
{
	char	   *path = psprintf("%s/skills/%s", sandbox_work_root(), skill_id);
	struct stat st;

	*installed = (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
	return path;
}

/* Start materialising a skill version: the temporary directory to fill. */
char *
sandbox_skill_begin(const char *skill_id)
{
	char	   *tmp = psprintf("%s/skills/.%s.%d", sandbox_work_root(), skill_id, MyProcPid);
	char	   *err = NULL;

	sandbox_remove_work_dir(tmp);
	if (!mkdir_p(tmp, &err))
		ereport(ERROR, (errcode(ERRCODE_IO_ERROR), errmsg("%s", err)));
	return tmp;
}

void
sandbox_skill_add(const char *tmp, const char *path, const char *data, size_t len,
				  bool executable)
{
	char	   *err = NULL;

	if (!sandbox_place_file(tmp, path, data, len, executable ? 0755 : 0644, &err))
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not materialise skill file \"%s\": %s", path, err)));
}

void
sandbox_skill_install(const char *tmp, const char *final)
{
	if (rename(tmp, final) != 0 && errno != EEXIST && errno != ENOTEMPTY)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not install skill directory \"%s\": %m", final)));
	sandbox_remove_work_dir(tmp);
}

/* ----------------------------------------------------------------
 * After the run
 * ----------------------------------------------------------------
 */

/*
 * Read what the run left behind, once: the files it produced (not after a
 * failure of ours, which returns none) and, for a session, what its
 * workspace holds now and whether it must be rebuilt before the next run.
 */
void
sandbox_collect_run(SandboxRun *run, bool failed)
{
	RunDisk    *d = &run->disk;
	MemoryContext old;
	Manifest   *after = NULL;

	if (d->collected || run->phase == RUN_UNSTARTED)
		return;
	d->collected = true;
	old = MemoryContextSwitchTo(run->cxt);
	if (!failed)
		d->produced = sandbox_collect_produced(d->workspace, d->before, &d->caps, &after);
	else if (d->has_session)
		after = sandbox_manifest_scan(d->workspace, sandbox_workspace_entries + 1);
	if (d->has_session && after)
	{
		d->measured = true;
		d->ws_bytes = after->disk_bytes;
		d->ws_entries = after->n;
		if (after->incomplete)
			d->ws_reset = psprintf("more than %d entries (sandbox.workspace_entries) or a tree deeper than 64",
								   sandbox_workspace_entries);
		else if (after->disk_bytes > (int64) sandbox_workspace_size_mb * 1024 * 1024)
			d->ws_reset = psprintf("%lld bytes, more than sandbox.workspace_size",
								   (long long) after->disk_bytes);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Give back the disk a run used before its result is recorded: its work
 * directory (the code, and the workspace of a run without a session) and a
 * session workspace that must be rebuilt.  What the database needs is in
 * memory by now, and a finish that cannot commit must not keep the space.
 */
void
sandbox_release_disk(SandboxRun *run)
{
	RunDisk    *d = &run->disk;

	if (d->dir[0])
	{
		sandbox_remove_work_dir(d->dir);
		d->dir[0] = '\0';
	}
	if (d->has_session && d->ws_reset)
	{
		char		path[MAXPGPATH];

		snprintf(path, sizeof(path), "%s/sessions/%s", sandbox_work_root(), d->session);
		sandbox_remove_work_dir(path);
	}
}

/* ----------------------------------------------------------------
 * Sweeping
 * ----------------------------------------------------------------
 */

static bool
name_in(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), name) == 0)
			return true;
	return false;
}

/* Is work_root/<sub>/<name> used by a run of ours? */
static bool
used_by_a_run(const char *sub, const char *name)
{
	char		path[MAXPGPATH];
	size_t		len;

	snprintf(path, sizeof(path), "%s/%s/%s", sandbox_work_root(), sub, name);
	len = strlen(path);
	for (int i = 0; i < sandbox_nruns; i++)
	{
		SandboxRun *run = &sandbox_runs[i];

		if (run->phase == RUN_FREE)
			continue;
		if (strcmp(sub, "sessions") == 0 && run->disk.has_session &&
			strcmp(run->disk.session, name) == 0)
			return true;
		for (int b = 0; b < run->disk.nbinds; b++)
			if (strncmp(run->disk.binds[b], path, len) == 0 && run->disk.binds[b][len] == ':')
				return true;
	}
	return false;
}

/*
 * Remove every entry of work_root/<sub> that is neither kept nor in use.  A
 * skill's temporary copy (.ID.PID) exists only while this process
 * materialises it, never during a sweep.
 */
static void
sweep_dir(const char *sub, List *keep)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/%s", sandbox_work_root(), sub);
	d = opendir(dir);
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		char		path[MAXPGPATH];

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (name_in(keep, de->d_name) || used_by_a_run(sub, de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		elog(LOG, "removing %s \"%s\", no longer used",
			 strcmp(sub, "sessions") == 0 ? "the workspace of ended session" : "materialised skill",
			 path);
		sandbox_remove_work_dir(path);
	}
	closedir(d);
}

/* Delete session workspaces not live and skill copies not in use. */
void
sandbox_sweep(List *live_sessions, List *skills_in_use)
{
	sweep_dir("sessions", live_sessions);
	sweep_dir("skills", skills_in_use);
}
