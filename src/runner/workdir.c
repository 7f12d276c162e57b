/*-------------------------------------------------------------------------
 *
 * workdir.c
 *		The runner's work directory: whether it may be used, a run's
 *		directory and workspace, session workspaces, skills materialised on
 *		disk, and sweeping away what the database no longer needs.
 *
 *	<work dir>/<invocation>/code				the code of a run
 *	<work dir>/<invocation>/workspace			a run without a conversation
 *	<work dir>/<invocation>/egress-policy		its egress policy (docs/egress.md)
 *	<work dir>/<invocation>/egress.log			its proxy's connection log
 *	<work dir>/sessions/<session>/workspace		a conversation's session
 *	<work dir>/skills/<skill id>/				one skill version, read-only
 *
 * A workspace was writable by untrusted code: everything done inside one
 * goes through files.c, which never follows a link.  This file touches no
 * table; steps.c reads what the database says and calls it.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../egress/egress.h"

/* How often the work directory is checked while it is unusable. */
#define WORK_DIR_CHECK_MS	10000

/* Why nothing is claimed (the work directory is unusable), or NULL. */
static char *problem = NULL;
static msec checked_at = 0;
static bool checked = false;

/* ----------------------------------------------------------------
 * The work root
 * ----------------------------------------------------------------
 */

const char *
workdir_root(void)
{
	return runner_conf.work_dir;
}

const char *
workdir_problem(void)
{
	return problem;
}

/* Is the directory st on the filesystem of `other` (followed)? */
static bool
same_filesystem(const struct stat *st, const char *other)
{
	struct stat ost;

	return stat(other, &ost) == 0 && ost.st_dev == st->st_dev;
}

/*
 * Why the work root cannot be used, or NULL when it can (creating it, not
 * its parents, if needed).  A work root on the filesystem of a protected
 * path (the local runner's: the data directory and the WAL) is refused: a
 * run that fills its workspace must never fill the disk the database
 * writes to.  The answer is malloc'd.
 */
static char *
work_dir_problem(void)
{
	const char *root = workdir_root();
	char		parent[MAXPGPATH];
	char	   *slash;
	struct stat st;

	strlcpy(parent, root, sizeof(parent));
	slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	if (stat(parent, &st) != 0)
		return psprintf("the parent directory of %s \"%s\" does not exist; run "
						"scripts/jail-host-setup.sh as root (it mounts a filesystem there), or set %s",
						runner_setting_name("work_dir"), root, runner_setting_name("work_dir"));
	if (mkdir(root, S_IRWXU) != 0 && errno != EEXIST)
		return psprintf("could not create %s \"%s\": %m", runner_setting_name("work_dir"), root);
	if (lstat(root, &st) != 0)
		return psprintf("could not stat %s \"%s\": %m", runner_setting_name("work_dir"), root);
	if (!S_ISDIR(st.st_mode))
		return psprintf("%s \"%s\" is not a directory", runner_setting_name("work_dir"), root);
	if (access(root, W_OK | X_OK) != 0)
		return psprintf("%s \"%s\" is not writable: %m", runner_setting_name("work_dir"), root);
	for (int i = 0; i < runner_conf.protect.n; i++)
	{
		if (!same_filesystem(&st, runner_conf.protect.v[i]))
			continue;
		if (runner_local)
			return psprintf("sandbox.work_dir \"%s\" is on the filesystem of the data directory "
							"or the WAL; put it on a filesystem of its own (scripts/jail-host-setup.sh "
							"mounts one), or set sandbox.work_dir_on_data_fs = on", root);
		return psprintf("work_dir \"%s\" is on the filesystem of \"%s\" (protect); put it on a "
						"filesystem of its own", root, runner_conf.protect.v[i]);
	}
	return NULL;
}

/*
 * Check the work root (now with force, else only when it was unusable and
 * the last check is old), report the answer (agent.worker_status() shows
 * it) and log a change.  True when usable.
 */
bool
workdir_usable(bool force)
{
	char	   *p;
	bool		changed;

	if (!force && checked && problem == NULL)
		return true;
	if (!force && checked && runner_now_ms() - checked_at < WORK_DIR_CHECK_MS)
		return false;
	checked = true;
	checked_at = runner_now_ms();
	p = work_dir_problem();
	changed = (p == NULL) != (problem == NULL) || (p && strcmp(p, problem) != 0);
	free(problem);
	problem = p;
	if (changed && p)
		runner_log(RLOG_WARNING, "the sandbox runner claims no work: %s", p);
	else if (changed)
		runner_log(RLOG_LOG, "the sandbox work directory \"%s\" is usable", workdir_root());
	status_dirty = true;
	return p == NULL;
}

/*
 * Remove every entry of the work root but the sessions and the skills.
 * Called at start, when no run of ours exists yet.
 */
void
workdir_clean_root(void)
{
	DIR		   *d;
	struct dirent *de;
	char		path[MAXPGPATH];

	d = opendir(workdir_root());
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			strcmp(de->d_name, "sessions") == 0 || strcmp(de->d_name, "skills") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", workdir_root(), de->d_name);
		runner_log(RLOG_LOG, "removing leftover work directory \"%s\"", path);
		files_remove_dir(path);
	}
	closedir(d);
}

/* ----------------------------------------------------------------
 * A run's directories
 * ----------------------------------------------------------------
 */

static bool
mkdir_p(Run *run, const char *path)
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
			run->start_error = arena_printf(&run->arena, "could not create directory \"%s\": %m", buf);
			return false;
		}
		*p = '/';
	}
	if (mkdir(buf, S_IRWXU) != 0 && errno != EEXIST)
	{
		run->start_error = arena_printf(&run->arena, "could not create directory \"%s\": %m", buf);
		return false;
	}
	return true;
}

/*
 * Is a session workspace within the limits a run may start in?  A payload
 * can leave it past them (it is killed, but what it wrote stays); the jail
 * would then refuse to start the next run.  Such a workspace is rebuilt
 * instead: emptied, and the conversation's files put back.  The scan is
 * bounded by the workspace_entries limit.
 */
static const char *
workspace_over_limits(const char *path)
{
	Manifest   *m = files_manifest_scan(path, runner_conf.workspace_entries + 1);
	const char *why = NULL;

	if (m->incomplete)
		why = "more entries than the workspace_entries limit, or too deep a tree";
	else if (m->disk_bytes > (int64) runner_conf.workspace_size_mb * 1024 * 1024)
		why = "more bytes than the workspace_size limit";
	files_manifest_free(m);
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
workdir_prepare(Run *run, const ClaimedRun *c, bool *workspace_is_new)
{
	RunDisk    *d = &run->disk;
	struct stat st;
	const char *why;

	*workspace_is_new = true;
	snprintf(d->dir, sizeof(d->dir), "%s/%s", workdir_root(), run->id);
	if (!mkdir_p(run, workdir_root()))
		return false;
	if (mkdir(d->dir, S_IRWXU) != 0)
	{
		run->start_error = arena_printf(&run->arena, "could not create work directory \"%s\": %m",
										d->dir);
		return false;
	}
	if (!c->has_session)
	{
		snprintf(d->workspace, sizeof(d->workspace), "%s/workspace", d->dir);
		return mkdir_p(run, d->workspace);
	}
	d->has_session = true;
	strlcpy(d->session, c->session, sizeof(d->session));
	snprintf(d->workspace, sizeof(d->workspace), "%s/sessions/%s/workspace", workdir_root(),
			 c->session);
	*workspace_is_new = (stat(d->workspace, &st) != 0);
	if (!*workspace_is_new && c->fresh_session)
	{
		files_remove_dir(d->workspace);
		*workspace_is_new = true;
	}
	else if (!*workspace_is_new && (why = workspace_over_limits(d->workspace)) != NULL)
	{
		runner_log(RLOG_LOG, "rebuilding the workspace of session %s before invocation %s: it holds %s",
				   c->session, run->id, why);
		files_remove_dir(d->workspace);
		*workspace_is_new = true;
	}
	return mkdir_p(run, d->workspace);
}

/*
 * Write the code of a run into its directory (*path gets where), and take
 * the manifest of the workspace: what differs after the run was produced.
 */
bool
workdir_write_code(Run *run, const char *code, char *path, size_t pathlen)
{
	char	   *err = NULL;

	snprintf(path, pathlen, "%s/code", run->disk.dir);
	if (!files_place(run->disk.dir, "code", code, strlen(code), 0600, &err))
	{
		run->start_error = arena_strdup(&run->arena, err);
		free(err);
		return false;
	}
	run->disk.before = files_manifest_scan(run->disk.workspace, runner_conf.workspace_entries + 1);
	return true;
}

/* Put one of the conversation's files into the run's workspace. */
bool
workspace_place(Run *run, const char *name, const char *data, size_t len, char **err)
{
	char	   *why = NULL;

	if (files_place(run->disk.workspace, name, data, len, 0644, &why))
		return true;
	*err = psprintf("could not place file \"%s\" in the workspace: %s", name, why);
	free(why);
	return false;
}

/* ----------------------------------------------------------------
 * Skills on disk
 *
 * A skill version is immutable, so a directory that exists is complete: it
 * is renamed into place only after every file is written.
 * ----------------------------------------------------------------
 */

/* The directory of a skill version (malloc'd); *installed says whether it exists. */
char *
skill_dir(const char *skill_id, bool *installed)
{
	char	   *path = psprintf("%s/skills/%s", workdir_root(), skill_id);
	struct stat st;

	*installed = (stat(path, &st) == 0 && S_ISDIR(st.st_mode));
	return path;
}

/* Start materialising a skill version: the temporary directory to fill (malloc'd). */
char *
skill_begin(const char *skill_id, char **err)
{
	char	   *tmp = psprintf("%s/skills/.%s.%d", workdir_root(), skill_id, (int) getpid());
	char	   *skills = psprintf("%s/skills", workdir_root());

	files_remove_dir(tmp);
	if ((mkdir(skills, S_IRWXU) != 0 && errno != EEXIST) ||
		mkdir(tmp, S_IRWXU) != 0)
	{
		*err = psprintf("could not create directory \"%s\": %m", tmp);
		free(tmp);
		tmp = NULL;
	}
	free(skills);
	return tmp;
}

bool
skill_add(const char *tmp, const char *path, const char *data, size_t len, bool executable,
		  char **err)
{
	char	   *why = NULL;

	if (files_place(tmp, path, data, len, executable ? 0755 : 0644, &why))
		return true;
	*err = psprintf("could not materialise skill file \"%s\": %s", path, why);
	free(why);
	return false;
}

bool
skill_install(const char *tmp, const char *final, char **err)
{
	bool		ok = true;

	if (rename(tmp, final) != 0 && errno != EEXIST && errno != ENOTEMPTY)
	{
		*err = psprintf("could not install skill directory \"%s\": %m", final);
		ok = false;
	}
	files_remove_dir(tmp);
	return ok;
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
workdir_collect(Run *run, bool failed)
{
	RunDisk    *d = &run->disk;
	Manifest   *after = NULL;

	if (d->collected || run->phase == RUN_UNSTARTED)
		return;
	d->collected = true;
	if (!failed)
		files_collect_produced(d->workspace, d->before, &d->caps, &d->produced, &after);
	else if (d->has_session)
		after = files_manifest_scan(d->workspace, runner_conf.workspace_entries + 1);
	if (d->has_session && after)
	{
		d->measured = true;
		d->ws_bytes = after->disk_bytes;
		d->ws_entries = after->n;
		if (after->incomplete)
			d->ws_reset = arena_printf(&run->arena,
									   "more than %d entries (%s) or a tree deeper than 64",
									   runner_conf.workspace_entries,
									   runner_setting_name("workspace_entries"));
		else if (after->disk_bytes > (int64) runner_conf.workspace_size_mb * 1024 * 1024)
			d->ws_reset = arena_printf(&run->arena, "%lld bytes, more than %s",
									   (long long) after->disk_bytes,
									   runner_setting_name("workspace_size"));
	}
	files_manifest_free(after);
}

/*
 * Give back the disk a run used before its result is recorded: its work
 * directory (the code, and the workspace of a run without a session) and a
 * session workspace that must be rebuilt.  What the database needs is in
 * memory by now, and a finish that cannot commit must not keep the space.
 */
void
workdir_release(Run *run)
{
	RunDisk    *d = &run->disk;

	if (d->dir[0])
	{
		files_remove_dir(d->dir);
		d->dir[0] = '\0';
	}
	if (d->has_session && d->ws_reset)
	{
		char		path[MAXPGPATH];

		snprintf(path, sizeof(path), "%s/sessions/%s", workdir_root(), d->session);
		files_remove_dir(path);
	}
}

/* ----------------------------------------------------------------
 * Egress (docs/egress.md)
 *
 * The policy file goes in the run's own directory, beside the workspace:
 * the sandbox can neither see nor change it.  The jail creates the log
 * there (O_EXCL) for its proxy; it is read back after the run, before the
 * directory is removed.
 * ----------------------------------------------------------------
 */

/* Place the run's egress policy (the prepare step's row of kind egress). */
bool
egress_place_policy(Run *run, const char *data, size_t len, char **err)
{
	char	   *why = NULL;

	if (!files_place(run->disk.dir, EGRESS_POLICY_FILE, data, len, 0600, &why))
	{
		*err = psprintf("could not place the egress policy: %s", why);
		free(why);
		return false;
	}
	run->disk.egress = true;
	return true;
}

/*
 * Read the proxy's connection log, once.  Missing (the jail never got that
 * far) or unreadable: an empty log, which the record shows as 0 rows.
 * Text with a NUL byte cannot be a text parameter: also empty.
 */
void
egress_collect(Run *run)
{
	RunDisk    *d = &run->disk;
	char		path[MAXPGPATH];
	StringInfoData buf;
	int			fd;

	if (!d->egress || d->egress_collected || !d->dir[0])
		return;
	d->egress_collected = true;
	snprintf(path, sizeof(path), "%s/" EGRESS_LOG_FILE, d->dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	initStringInfo(&buf);
	while (buf.len < EGRESS_LOG_MAX_BYTES)
	{
		int			want = Min(65536, EGRESS_LOG_MAX_BYTES - buf.len);
		ssize_t		n;

		enlargeStringInfo(&buf, want);
		n = read(fd, buf.data + buf.len, want);
		if (n <= 0)
			break;
		buf.len += n;
		buf.data[buf.len] = '\0';
	}
	close(fd);
	if (memchr(buf.data, '\0', buf.len) == NULL)
		d->egress_log = arena_strdup(&run->arena, buf.data);
	free(buf.data);
}

/* ----------------------------------------------------------------
 * Sweeping
 * ----------------------------------------------------------------
 */

/* Is workdir_root()/<sub>/<name> used by a run of ours? */
static bool
used_by_a_run(const char *sub, const char *name)
{
	char		path[MAXPGPATH];
	size_t		len;

	snprintf(path, sizeof(path), "%s/%s/%s", workdir_root(), sub, name);
	len = strlen(path);
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

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
 * Remove every entry of workdir_root()/<sub> that is neither kept nor in use.  A
 * skill's temporary copy (.ID.PID) exists only while this process
 * materialises it, never during a sweep.
 */
static void
sweep_dir(const char *sub, const StrList *keep)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/%s", workdir_root(), sub);
	d = opendir(dir);
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		char		path[MAXPGPATH];

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (strlist_contains(keep, de->d_name) || used_by_a_run(sub, de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		runner_log(RLOG_LOG, "removing %s \"%s\", no longer used",
				   strcmp(sub, "sessions") == 0 ? "the workspace of ended session" : "materialised skill",
				   path);
		files_remove_dir(path);
	}
	closedir(d);
}

/* Delete session workspaces not live and skill copies not in use. */
void
workdir_sweep(const StrList *live_sessions, const StrList *skills_in_use)
{
	sweep_dir("sessions", live_sessions);
	sweep_dir("skills", skills_in_use);
}
