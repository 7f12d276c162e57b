/*-------------------------------------------------------------------------
 *
 * files.c
 *		Host-side file work in directories a sandbox could write to:
 *		placing a conversation's files into a workspace before a run,
 *		finding the files a run produced afterwards, and removing trees.
 *
 * A workspace was writable by untrusted code, which may have planted
 * symlinks (to /etc/shadow, to the runner's configuration), hard links,
 * fifos or devices.  Every path is therefore resolved with openat2() and
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 * RESOLVE_NO_XDEV from a descriptor of the workspace root: the kernel
 * refuses any resolution that leaves the workspace or crosses a link, so
 * there is no window between a check and a use.  The payload is not
 * running while we do this (its pid namespace is gone), which removes the
 * remaining races.
 *
 * (This is the extension's src/files.c of before the runner, ported to
 * frontend C: malloc instead of memory contexts, so a manifest and a list
 * of produced files are freed explicitly.)
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mb/pg_wchar.h"

#define RESOLVE_SAFE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | \
					  RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

static int
safe_openat(int rootfd, const char *path, int flags, mode_t mode)
{
	struct open_how how;

	memset(&how, 0, sizeof(how));
	how.flags = flags | O_CLOEXEC | O_NOFOLLOW;
	how.mode = (flags & O_CREAT) ? mode : 0;
	how.resolve = RESOLVE_SAFE;
	return (int) syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
}

/* ----------------------------------------------------------------
 * Removal
 *
 * Every step is relative to an O_NOFOLLOW directory fd, symlinks are
 * unlinked as names, and directories the payload made unreadable are
 * chmod'ed first.
 * ----------------------------------------------------------------
 */

int
files_remove_tree_at(int parentfd, const char *name, int depth)
{
	int			fd;
	DIR		   *d;
	struct dirent *de;
	int			rc = 0;

	if (unlinkat(parentfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -1;
	if (depth > 256)
	{
		errno = ELOOP;
		return -1;
	}
	fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		/* A directory without read or search permission: open it by path
		 * only to fix its mode. */
		int			pfd = openat(parentfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (pfd < 0)
			return -1;
		if (fchmodat(parentfd, name, S_IRWXU, 0) != 0)
			(void) 0;		/* the open below reports the failure */
		close(pfd);
		fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return -1;
	}
	(void) fchmod(fd, S_IRWXU);
	d = fdopendir(fd);
	if (d == NULL)
	{
		close(fd);
		return -1;
	}
	while ((de = readdir(d)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (files_remove_tree_at(dirfd(d), de->d_name, depth + 1) != 0)
			rc = -1;
	}
	closedir(d);
	if (unlinkat(parentfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = -1;
	return rc;
}

/* Remove a directory tree under the work directory; logs and goes on. */
void
files_remove_dir(const char *path)
{
	char		parent[MAXPGPATH];
	const char *slash = strrchr(path, '/');
	int			pfd;

	if (slash == NULL)
	{
		strlcpy(parent, ".", sizeof(parent));
		slash = path - 1;
	}
	else
		strlcpy(parent, path, Min(sizeof(parent), (size_t) (slash - path) + 1));
	pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0)
		return;
	if (files_remove_tree_at(pfd, slash + 1, 0) != 0)
		runner_log(RLOG_WARNING, "could not remove sandbox work directory \"%s\": %m", path);
	close(pfd);
}

/* ----------------------------------------------------------------
 * Manifest: what a workspace holds
 * ----------------------------------------------------------------
 */

static void
manifest_add(Manifest *m, const char *path, const struct stat *st)
{
	ManifestEntry *e;

	if (m->n == m->cap)
	{
		m->cap = m->cap ? m->cap * 2 : 64;
		m->entries = m->entries ? pg_realloc(m->entries, sizeof(ManifestEntry) * m->cap)
			: pg_malloc(sizeof(ManifestEntry) * m->cap);
	}
	e = &m->entries[m->n++];
	e->path = pg_strdup(path);
	e->mode = st->st_mode;
	e->ino = st->st_ino;
	e->size = st->st_size;
	e->nlink = st->st_nlink;
	e->mtime_ns = (int64) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
	e->ctime_ns = (int64) st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
	m->disk_bytes += (int64) st->st_blocks * 512;
}

static void
scan_dir(Manifest *m, int dfd, const char *prefix, int depth)
{
	DIR		   *d;
	struct dirent *de;

	if (depth > 64)
	{
		m->incomplete = true;
		close(dfd);
		return;
	}
	d = fdopendir(dfd);
	if (d == NULL)
	{
		close(dfd);
		m->incomplete = true;
		return;
	}
	while ((de = readdir(d)) != NULL)
	{
		struct stat st;
		char		path[MAXPGPATH];

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (m->n >= m->max_entries)
		{
			m->incomplete = true;
			break;
		}
		if (snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "",
					 de->d_name) >= (int) sizeof(path))
		{
			m->incomplete = true;
			continue;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		manifest_add(m, path, &st);
		if (S_ISDIR(st.st_mode))
		{
			int			sub = openat(dirfd(d), de->d_name,
									 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0)
				scan_dir(m, sub, path, depth + 1);
			else
				m->incomplete = true;
		}
	}
	closedir(d);
}

static int
entry_cmp(const void *a, const void *b)
{
	return strcmp(((const ManifestEntry *) a)->path, ((const ManifestEntry *) b)->path);
}

Manifest *
files_manifest_scan(const char *root, int max_entries)
{
	Manifest   *m = pg_malloc0(sizeof(Manifest));
	int			fd;

	m->max_entries = max_entries;
	fd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
	{
		m->incomplete = true;
		return m;
	}
	scan_dir(m, fd, "", 0);
	if (m->n > 1)
		qsort(m->entries, m->n, sizeof(ManifestEntry), entry_cmp);
	return m;
}

void
files_manifest_free(Manifest *m)
{
	if (m == NULL)
		return;
	for (int i = 0; i < m->n; i++)
		free(m->entries[i].path);
	free(m->entries);
	free(m);
}

static const ManifestEntry *
manifest_find(const Manifest *m, const char *path)
{
	ManifestEntry key;

	if (m == NULL || m->n == 0)
		return NULL;
	key.path = (char *) path;
	return bsearch(&key, m->entries, m->n, sizeof(ManifestEntry), entry_cmp);
}

/* ----------------------------------------------------------------
 * Produced files
 * ----------------------------------------------------------------
 */

static void
produced_add(ProducedList *out, const char *name, const char *status, const char *reason,
			 char *data, int64 len)
{
	ProducedFile *p;

	if (out->n == out->cap)
	{
		out->cap = out->cap ? out->cap * 2 : 16;
		out->v = pg_realloc(out->v, sizeof(ProducedFile) * out->cap);
	}
	p = &out->v[out->n++];
	memset(p, 0, sizeof(*p));
	p->name = pg_strdup(name);
	strlcpy(p->status, status, sizeof(p->status));
	p->reason = reason ? pg_strdup(reason) : NULL;
	p->data = data;
	p->len = len;
}

void
files_produced_free(ProducedList *l)
{
	for (int i = 0; i < l->n; i++)
	{
		free(l->v[i].name);
		free(l->v[i].reason);
		free(l->v[i].data);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static const char *
kind_of(mode_t mode)
{
	if (S_ISLNK(mode))
		return "a symbolic link (not followed)";
	if (S_ISFIFO(mode))
		return "a fifo";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode) || S_ISBLK(mode))
		return "a device";
	return "not a regular file";
}

/*
 * Why a changed entry of the workspace is not returned, in reason, or
 * NULL when it may be: not a regular file, a hard link, past a cap.
 */
static const char *
refusal(const ManifestEntry *e, const ProducedCaps *caps, int nsaved, int64 total,
		char *reason, size_t len)
{
	if (!S_ISREG(e->mode))
		snprintf(reason, len, "%s", kind_of(e->mode));
	else if (e->nlink > 1)
		snprintf(reason, len, "a hard link (not copied)");
	else if (e->size > caps->max_file_bytes)
		snprintf(reason, len, "larger than the limit of %lld bytes (%lld bytes)",
				 (long long) caps->max_file_bytes, (long long) e->size);
	else if (nsaved >= caps->max_files)
		snprintf(reason, len, "more than %d files were produced", caps->max_files);
	else if (total + e->size > caps->max_total_bytes)
		snprintf(reason, len, "the files of this run exceed %lld bytes",
				 (long long) caps->max_total_bytes);
	else
		return NULL;
	return reason;
}

/*
 * Read a regular file found by the scan, still the same single-link file
 * (never following a link); its content in *data, or the reason it could
 * not be read.
 */
static const char *
read_entry(int rootfd, const ManifestEntry *e, char **data, char *reason, size_t len)
{
	int			fd = safe_openat(rootfd, e->path, O_RDONLY | O_NONBLOCK, 0);
	struct stat st;
	int64		got = 0;

	if (fd < 0)
	{
		snprintf(reason, len, "could not open: %s", strerror(errno));
		return reason;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != e->ino || st.st_nlink > 1)
	{
		close(fd);
		return "the file changed while it was being read";
	}
	*data = pg_malloc(Max(e->size, 1));
	while (got < e->size)
	{
		ssize_t		r = read(fd, *data + got, e->size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += r;
	}
	close(fd);
	if (got != e->size)
	{
		free(*data);
		*data = NULL;
		return "the file could not be read completely";
	}
	return NULL;
}

/* Unchanged since before the run: not produced by it. */
static bool
unchanged(const Manifest *before, const ManifestEntry *e)
{
	const ManifestEntry *b = manifest_find(before, e->path);

	return b && b->ino == e->ino && b->size == e->size && b->mtime_ns == e->mtime_ns &&
		b->ctime_ns == e->ctime_ns && b->mode == e->mode;
}

/*
 * Compare the workspace after a run with the manifest taken before it and
 * return the files the run created or changed, read safely, with caps.
 * Entries that are not regular files, or that cannot be read, come back
 * with status "skipped" or "failed" and a reason; nothing is dropped
 * silently.  *after_out gets the scan of the workspace after the run (the
 * caller frees it), or it is freed here when after_out is NULL.
 */
void
files_collect_produced(const char *root, const Manifest *before, const ProducedCaps *caps,
					   ProducedList *out, Manifest **after_out)
{
	Manifest   *after = files_manifest_scan(root, caps->max_scan_entries);
	int			rootfd;
	int			nsaved = 0;
	int64		total = 0;

	if (after_out)
		*after_out = after;
	rootfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rootfd < 0)
	{
		produced_add(out, "/workspace", "failed", "the workspace could not be opened", NULL, 0);
		if (!after_out)
			files_manifest_free(after);
		return;
	}
	for (int i = 0; i < after->n; i++)
	{
		const ManifestEntry *e = &after->entries[i];
		char		reason[256];
		const char *why;
		char	   *data = NULL;

		if (S_ISDIR(e->mode) || unchanged(before, e))
			continue;
		if (pg_encoding_verifymbstr(PG_UTF8, e->path, strlen(e->path)) != (int) strlen(e->path))
			produced_add(out, "?", "skipped", "the file name is not valid UTF-8", NULL, 0);
		else if ((why = refusal(e, caps, nsaved, total, reason, sizeof(reason))) != NULL)
			produced_add(out, e->path, "skipped", why, NULL, 0);
		else if ((why = read_entry(rootfd, e, &data, reason, sizeof(reason))) != NULL)
			produced_add(out, e->path, "failed", why, NULL, 0);
		else
		{
			produced_add(out, e->path, "saved", NULL, data, e->size);
			nsaved++;
			total += e->size;
		}
	}
	if (after->incomplete)
		produced_add(out, ".", "skipped",
					 "the workspace holds too many entries or too deep a tree; not all of it was examined",
					 NULL, 0);
	close(rootfd);
	if (!after_out)
		files_manifest_free(after);
}

/* ----------------------------------------------------------------
 * Placing files
 * ----------------------------------------------------------------
 */

/* Remove whatever is at name in dfd (file, link, fifo or tree). */
static void
remove_entry(int dfd, const char *name)
{
	if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
		return;
	if (errno == EISDIR || errno == EPERM)
		(void) files_remove_tree_at(dfd, name, 0);
}

/*
 * Write data at relpath under root, creating directories as needed, never
 * following a link and replacing whatever the sandbox left at that name.
 * On failure *err (malloc'd, the caller frees it) says why.
 */
bool
files_place(const char *root, const char *relpath, const char *data, size_t len,
			mode_t mode, char **err)
{
	char	   *path = pg_strdup(relpath);
	char	   *slash;
	char	   *base;
	int			dfd;
	int			fd;
	size_t		off = 0;

	dfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
	{
		*err = psprintf("could not open workspace \"%s\": %m", root);
		free(path);
		return false;
	}
	/* Walk (and create) the parent directories one component at a time. */
	base = path;
	while ((slash = strchr(base, '/')) != NULL)
	{
		int			next;
		struct stat st;

		*slash = '\0';
		if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
			remove_entry(dfd, base);
		if (mkdirat(dfd, base, 0755) != 0 && errno != EEXIST)
		{
			*err = psprintf("could not create directory for \"%s\": %m", relpath);
			close(dfd);
			free(path);
			return false;
		}
		next = safe_openat(dfd, base, O_RDONLY | O_DIRECTORY, 0);
		close(dfd);
		if (next < 0)
		{
			*err = psprintf("could not open directory for \"%s\": %m", relpath);
			free(path);
			return false;
		}
		dfd = next;
		base = slash + 1;
	}
	remove_entry(dfd, base);
	fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	close(dfd);
	free(path);
	if (fd < 0)
	{
		*err = psprintf("could not create \"%s\": %m", relpath);
		return false;
	}
	while (off < len)
	{
		ssize_t		w = write(fd, data + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
		{
			*err = psprintf("could not write \"%s\": %m", relpath);
			close(fd);
			return false;
		}
		off += w;
	}
	if (close(fd) != 0)
	{
		*err = psprintf("could not write \"%s\": %m", relpath);
		return false;
	}
	return true;
}
