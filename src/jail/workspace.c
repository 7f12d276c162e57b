/*-------------------------------------------------------------------------
 *
 * workspace.c
 *	  Host-side size accounting of the workspace, the one directory the
 *	  payload can write that outlives the run.
 *
 * The payload controls the tree, so the walk trusts nothing in it: every
 * step is openat() relative to an already-open directory with O_NOFOLLOW,
 * entries are lstat'ed (AT_SYMLINK_NOFOLLOW), symlinks are counted as the
 * link itself and never followed, and depth and entry count are bounded so
 * a deep or huge tree cannot stall the run.  Exceeding a bound
 * counts as exceeding the limit.
 *
 * Size is allocated blocks (st_blocks), i.e. what the host disk pays; a
 * sparse file costs what it really uses (its apparent size is capped by
 * RLIMIT_FSIZE anyway).
 *
 *-------------------------------------------------------------------------
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jail.h"

#define MAX_DEPTH	64

typedef struct Walk
{
	uint64_t	file_limit;
	uint64_t	max_entries;
	uint64_t	total;
	uint64_t	entries;
	bool		big_file;
} Walk;

static int
walk_dir(int dirfd, int depth, Walk *w)
{
	DIR		   *d;
	struct dirent *de;
	int			rc = 0;

	if (depth > MAX_DEPTH)
		return -1;
	d = fdopendir(dirfd);
	if (!d)
	{
		close(dirfd);
		return -1;
	}
	while ((de = readdir(d)) != NULL)
	{
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (++w->entries > w->max_entries)
		{
			rc = -1;
			break;
		}
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		{
			if (errno == ENOENT)
				continue;		/* deleted while we looked */
			rc = -1;
			break;
		}
		w->total += (uint64_t) st.st_blocks * 512;
		if (S_ISREG(st.st_mode) && w->file_limit &&
			(uint64_t) st.st_size >= w->file_limit)
			w->big_file = true;
		if (S_ISDIR(st.st_mode))
		{
			int			sub = openat(dirfd, de->d_name,
									 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub < 0)
			{
				if (errno == ENOENT)
					continue;
				rc = -1;
				break;
			}
			if (walk_dir(sub, depth + 1, w) < 0)
			{
				rc = -1;
				break;
			}
		}
	}
	closedir(d);
	return rc;
}

/*
 * Sum the workspace below dirfd.  big_file is set when a regular file has
 * reached file_limit (0: no check): RLIMIT_FSIZE stopped a write there,
 * even if the program (Python ignores SIGXFSZ) only saw EFBIG.
 * Returns -1 when the tree could not be walked within the bounds (more
 * than max_entries entries, deeper than MAX_DEPTH), which the callers
 * count as over the limit: the walk's cost is bounded by max_entries.
 */
int
jail_workspace_usage(int dirfd, uint64_t file_limit, uint64_t max_entries,
					 uint64_t *total, bool *big_file)
{
	Walk		w = {.file_limit = file_limit, .max_entries = max_entries};
	int			fd;
	int			rc;

	fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = walk_dir(fd, 0, &w);
	*total = w.total;
	*big_file = w.big_file;
	return rc;
}
