/*-------------------------------------------------------------------------
 *
 * sandbox_files.h
 *		Host-side file work in sandbox-writable directories (files.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_FILES_H
#define SANDBOX_FILES_H

#include <sys/types.h>

#include "nodes/pg_list.h"

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

extern Manifest *sandbox_manifest_scan(const char *root, int max_entries);
extern List *sandbox_collect_produced(const char *root, const Manifest *before,
							  const ProducedCaps *caps, Manifest **after_out);
extern bool sandbox_place_file(const char *root, const char *relpath, const char *data,
					   size_t len, mode_t mode, char **err);
extern int	sandbox_remove_tree_at(int parentfd, const char *name, int depth);
extern void sandbox_remove_work_dir(const char *path);

#endif							/* SANDBOX_FILES_H */
