/*-------------------------------------------------------------------------
 *
 * installers.c
 *	  Which host paths are package installers (pip, npm, corepack, the
 *	  wheels ensurepip would install) that a sandbox's root covers
 *	  (rootfs.c, hide_installers): the patterns, globbed on the host, and a
 *	  resident launcher's cache of what they match.
 *
 * Why a cache.  Globbing the patterns reads /usr/bin (over a thousand
 * entries here) twice, /usr/local/bin, /usr/lib and more: ~1 ms of CPU per
 * sandbox on a VM with shadow page tables, the largest single step of a
 * sandbox's preparation, for a list that changes when a package is
 * installed on the host, i.e. almost never.  So a launcher globs once
 * (jail_installers_refresh, before it forks each worker) and its workers'
 * sandboxes inherit the list with the rest of their memory (fork and clone
 * copy it); a one-shot jail, which has no launcher, globs every time.
 *
 * When the cache is right.  It also records every directory that a
 * pattern's glob reads or goes through (each existing directory that a
 * proper prefix of a pattern matches), with its device, inode and mtime.
 * An entry created, removed or renamed anywhere along a pattern's path
 * changes the mtime of one of those directories (or replaces one of
 * them), so while none has changed the patterns match what they matched.
 * The kernel stamps mtimes at a clock tick's resolution: a change made in
 * the same tick as the listing, after it, could leave the mtime as it
 * was.  So a listing that saw a directory changed less than
 * RACY_MARGIN_S before it is never trusted again: the next refresh globs
 * anew, until a listing sees every directory quiet ("racy git" in git).
 *
 * What a stale list would cost is bounded anyway: a sandbox's root binds
 * the host's /usr, so a pip installed on the host after its sandbox was
 * prepared (ahead of its request, possibly long ago) is visible to it
 * with or without this cache; the list is as of the worker's fork, not
 * of the run.  The hiding is defence in depth: pip's index and npm's
 * registry are reachable only where an org's egress allowlist names them.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "jail.h"

/*
 * Patterns are globbed on the host (python3.11, pip3.11); what a host
 * lacks is skipped.  Python's and Node's own libraries (requests, numpy,
 * http) are not touched: downloading a file from an allowed host stays
 * possible, as data.
 */
static const char *const installer_patterns[] = {
	"/usr/bin/pip", "/usr/bin/pip[0-9]*", "/usr/local/bin/pip", "/usr/local/bin/pip[0-9]*",
	"/usr/lib/python3/dist-packages/pip", "/usr/lib/python3*/ensurepip",
	"/usr/lib/python3*/site-packages/pip", "/usr/local/lib/python3*/dist-packages/pip",
	"/usr/share/python-wheels",
	"/usr/bin/npm", "/usr/bin/npx", "/usr/bin/corepack",
	"/usr/lib/node_modules/npm", "/usr/lib/node_modules/corepack",
	"/usr/local/lib/node_modules/npm", "/usr/local/lib/node_modules/corepack",
	"/usr/share/nodejs/npm", "/usr/share/nodejs/corepack",
	NULL
};

#define MAX_CACHED		256		/* paths, and directories watched */
#define RACY_MARGIN_S	2

typedef struct WatchedDir
{
	char	   *path;
	dev_t		dev;
	ino_t		ino;
	struct timespec mtime;
} WatchedDir;

/* The launcher's cache (copied into its workers and sandboxes by fork). */
static struct
{
	bool		valid;
	bool		racy;			/* a directory changed just before the listing */
	int			npaths;
	char	   *paths[MAX_CACHED];
	int			ndirs;
	WatchedDir	dirs[MAX_CACHED];
} cache;

static void
cache_clear(void)
{
	for (int i = 0; i < cache.npaths; i++)
		free(cache.paths[i]);
	for (int i = 0; i < cache.ndirs; i++)
		free(cache.dirs[i].path);
	memset(&cache, 0, sizeof(cache));
}

/* The directory at path, watched (once); false when the cache is full. */
static bool
watch_dir(const char *path, time_t listed_at)
{
	struct stat st;
	WatchedDir *d;

	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return true;			/* not a directory: its parent is watched */
	for (int i = 0; i < cache.ndirs; i++)
		if (cache.dirs[i].dev == st.st_dev && cache.dirs[i].ino == st.st_ino)
			return true;
	if (cache.ndirs >= MAX_CACHED)
		return false;
	d = &cache.dirs[cache.ndirs];
	if ((d->path = strdup(path)) == NULL)
		return false;
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	d->mtime = st.st_mtim;
	if (st.st_mtim.tv_sec >= listed_at - RACY_MARGIN_S)
		cache.racy = true;
	cache.ndirs++;
	return true;
}

/*
 * Every existing directory a proper prefix of pattern matches ("/usr",
 * "/usr/lib", "/usr/lib/python3*"...), watched.  Read before the pattern
 * itself is globbed: a change in between then shows as a changed mtime.
 */
static bool
watch_prefixes(const char *pattern, time_t listed_at)
{
	char		prefix[PATH_MAX];
	size_t		len = strlen(pattern);

	if (len >= sizeof(prefix))
		return false;
	for (size_t i = 1; i <= len; i++)
	{
		glob_t		g;
		int			rc;
		bool		ok = true;

		if (pattern[i] != '/' && pattern[i] != '\0')
			continue;
		if (pattern[i] == '\0')
			break;				/* the pattern itself: not a prefix */
		memcpy(prefix, pattern, i);
		prefix[i] = '\0';
		rc = glob(prefix, GLOB_NOSORT | GLOB_ONLYDIR, NULL, &g);
		if (rc == GLOB_NOMATCH)
			break;				/* nothing deeper exists; its parent is watched */
		if (rc != 0)
			return false;
		for (size_t j = 0; ok && j < g.gl_pathc; j++)
			ok = watch_dir(g.gl_pathv[j], listed_at);
		globfree(&g);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * Pattern i where the sandbox's system directories come from: the host's
 * own, or under the --image's root (image.c); false if it does not fit.
 */
static bool
pattern_at(int i, char *buf, size_t len)
{
	int			n = snprintf(buf, len, "%s%s", jail_image_prefix(), installer_patterns[i]);

	return n >= 0 && (size_t) n < len;
}

/*
 * Glob every pattern (on the host, or in the image) and call fn for each
 * path it matches, as the sandbox sees it.  0, or -1 with err (fn's, or
 * the glob's).
 */
static int
glob_patterns(int (*fn) (const char *path, char *err), char *err)
{
	size_t		skip = strlen(jail_image_prefix());

	for (int i = 0; installer_patterns[i]; i++)
	{
		char		pattern[PATH_MAX];
		glob_t		g;
		int			rc;

		if (!pattern_at(i, pattern, sizeof(pattern)))
		{
			jail_seterr(err, "installer pattern too long");
			return -1;
		}
		rc = glob(pattern, GLOB_NOSORT, NULL, &g);
		if (rc == GLOB_NOMATCH)
			continue;
		if (rc != 0)
		{
			jail_seterr(err, "glob %s failed", pattern);
			return -1;
		}
		for (size_t j = 0; j < g.gl_pathc; j++)
			if (fn(g.gl_pathv[j] + skip, err) < 0)
			{
				globfree(&g);
				return -1;
			}
		globfree(&g);
	}
	return 0;
}

/* glob_patterns' callback for the cache: one path kept. */
static int
cache_add(const char *path, char *err)
{
	if (cache.npaths >= MAX_CACHED || (cache.paths[cache.npaths] = strdup(path)) == NULL)
	{
		jail_seterr(err, "more than %d installer paths", MAX_CACHED);
		return -1;
	}
	cache.npaths++;
	return 0;
}

/*
 * The directories watched first (a change after their listing then shows
 * as a changed mtime), then every pattern globbed into the cache.  False
 * (cache cleared) on a failure.
 */
static bool
cache_fill(void)
{
	time_t		listed_at = time(NULL);
	char		err[JAIL_ERRLEN] = "";

	cache_clear();
	for (int i = 0; installer_patterns[i]; i++)
	{
		char		pattern[PATH_MAX];

		if (!pattern_at(i, pattern, sizeof(pattern)) ||
			!watch_prefixes(pattern, listed_at))
		{
			cache_clear();
			return false;
		}
	}
	if (glob_patterns(cache_add, err) < 0)
	{
		cache_clear();
		return false;
	}
	cache.valid = true;
	return true;
}

/* Is every watched directory as it was when the cache was filled? */
static bool
cache_current(void)
{
	if (!cache.valid || cache.racy)
		return false;
	for (int i = 0; i < cache.ndirs; i++)
	{
		struct stat st;
		const WatchedDir *d = &cache.dirs[i];

		if (lstat(d->path, &st) < 0 || st.st_dev != d->dev || st.st_ino != d->ino ||
			st.st_mtim.tv_sec != d->mtime.tv_sec || st.st_mtim.tv_nsec != d->mtime.tv_nsec)
			return false;
	}
	return true;
}

/*
 * A launcher, before it forks a worker: the cache, up to date (a stat of
 * each watched directory when nothing changed).  A failure leaves no
 * cache: the worker's sandboxes then glob for themselves.
 */
void
jail_installers_refresh(void)
{
	if (!cache_current())
		(void) cache_fill();
}

/*
 * Call fn for every installer path the host has: the inherited cache's,
 * or (no launcher, or its refresh failed) globbed now.  0, or -1 with err
 * (fn's, or the glob's).
 */
int
jail_installers_each(int (*fn) (const char *path, char *err), char *err)
{
	if (!cache.valid)
		return glob_patterns(fn, err);
	for (int i = 0; i < cache.npaths; i++)
		if (fn(cache.paths[i], err) < 0)
			return -1;
	return 0;
}
