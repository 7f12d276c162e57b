/*-------------------------------------------------------------------------
 *
 * image.c
 *	  The image a sandbox's root is built from (--image DIR, docs/images.md):
 *	  which directory it is, how its paths are looked up, and the lock a
 *	  run holds on it.  Without --image the sandbox's system directories
 *	  are the host's, as they always were ("host").
 *
 * An image is a directory of the image store (scripts/sandbox-image),
 * NAME@DIGEST/, with root/ (the file system its sandboxes see as /usr,
 * /bin, ... and a few /etc files) and lock.  Both directories must belong
 * to root and be writable by nobody else: whoever could write the image
 * could change what every sandbox on it runs (and the jail runs as the
 * runner's account, which must not be able to).
 *
 * Lookups.  rootfs.c binds the image's directories in place of the host's.
 * A path of the image is resolved inside it (openat2 RESOLVE_IN_ROOT on a
 * descriptor of root/), so a symlink in the image, absolute or with "..",
 * resolves in the image as it will in the sandbox, never on the host.
 *
 * The lock.  A run holds a shared flock on NAME@DIGEST/lock from its
 * preparation to its end (jail_image_hold, host side: one-shot jail or a
 * launcher's worker); `sandbox-image remove` takes it exclusively and
 * holds it until the image is deleted.  A run asks without waiting: an
 * image being removed is refused at once (a setup error: the runner's
 * failure, refunded), and so is an image whose lock file is already gone
 * (removed between our open and our lock).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "jail.h"

static int	image_dir_fd = -1;	/* NAME@DIGEST, O_PATH; -1: host */
static int	image_root_fd = -1; /* NAME@DIGEST/root, O_PATH */
static char image_dir[PATH_MAX];
static char image_root[PATH_MAX];
static dev_t root_dev;			/* root/ as checked by jail_image_set */
static ino_t root_ino;

/* Owned by root, a directory, writable by its owner alone; its stat in st. */
static int
check_owned(int fd, const char *what, const char *path, struct stat *stp, char *err)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
	{
		jail_seterr(err, "image %s %s: %s", what, path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
	{
		jail_seterr(err, "image %s %s: not a directory", what, path);
		return -1;
	}
	if (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
	{
		jail_seterr(err, "image %s %s: must belong to root and be writable by root alone",
					what, path);
		return -1;
	}
	if (stp)
		*stp = st;
	return 0;
}

/*
 * --image DIR: open and check it, once per process (the one-shot jail,
 * or a launcher, whose workers and sandboxes inherit it).
 */
int
jail_image_set(const char *dir, char *err)
{
	struct stat st;
	int			n;

	if (dir[0] != '/')
	{
		jail_seterr(err, "--image must be an absolute path: \"%s\"", dir);
		return -1;
	}
	n = snprintf(image_root, sizeof(image_root), "%s/root", dir);
	if (n < 0 || (size_t) n >= sizeof(image_root) - 64)
	{
		jail_seterr(err, "--image path too long");
		return -1;
	}
	snprintf(image_dir, sizeof(image_dir), "%s", dir);
	image_dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (image_dir_fd < 0)
	{
		jail_seterr(err, "image %s: %s", dir, strerror(errno));
		return -1;
	}
	if (check_owned(image_dir_fd, "directory", dir, NULL, err) < 0)
		return -1;
	image_root_fd = openat(image_dir_fd, "root", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (image_root_fd < 0)
	{
		jail_seterr(err, "image root %s: %s", image_root, strerror(errno));
		return -1;
	}
	if (check_owned(image_root_fd, "root", image_root, &st, err) < 0)
		return -1;
	root_dev = st.st_dev;
	root_ino = st.st_ino;
	return 0;
}

/*
 * In the sandbox's new mount namespace, before its root is built: a bind
 * mount's source must be a mount of the caller's namespace, and the
 * descriptor jail_image_set opened belongs to the host's.  So root/ is
 * opened again by its path here, and must be the directory that was
 * checked (the same device and inode).  0, or -1 with err.
 */
int
jail_image_enter(char *err)
{
	struct stat st;
	int			fd;

	if (image_root_fd < 0)
		return 0;
	fd = open(image_root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
	{
		jail_seterr(err, "image root %s: %s", image_root, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (st.st_dev != root_dev || st.st_ino != root_ino)
	{
		jail_seterr(err, "image root %s was replaced", image_root);
		close(fd);
		return -1;
	}
	close(image_root_fd);
	image_root_fd = fd;
	return 0;
}

/* The image's directory, or NULL for the host's own root. */
const char *
jail_image_dir(void)
{
	return image_dir_fd >= 0 ? image_dir : NULL;
}

/* The prefix of a system path: the image's root/ on the host, or "". */
const char *
jail_image_prefix(void)
{
	return image_dir_fd >= 0 ? image_root : "";
}

/*
 * A system path of the sandbox (/usr, /etc/ssl/certs) as an O_PATH
 * descriptor of what the sandbox will see there: the host's, or the
 * image's, resolved inside the image.  flags: O_NOFOLLOW (a symlink
 * itself) or O_DIRECTORY.
 */
int
jail_image_open(const char *path, int flags)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC | flags,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};

	if (image_root_fd < 0)
		return open(path, O_PATH | O_CLOEXEC | flags);
	return syscall(SYS_openat2, image_root_fd, path, &how, sizeof(how));
}

/* Its descriptors (the directory's, or root/'s), for close_inherited; -1. */
int
jail_image_fd(bool root)
{
	return root ? image_root_fd : image_dir_fd;
}

/*
 * The sandbox's root is built: it needs no descriptor of the image any
 * more (the host side's lock is the host side's).
 */
void
jail_image_forget(void)
{
	jail_close(&image_root_fd);
	jail_close(&image_dir_fd);
}

/*
 * The run's shared lock on the image (see the file's head), into *fd; -1
 * when there is no image.  0, or -1 with err.
 */
int
jail_image_hold(int *fd, char *err)
{
	struct stat st;

	*fd = -1;
	if (image_dir_fd < 0)
		return 0;
	*fd = openat(image_dir_fd, "lock", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (*fd < 0)
	{
		jail_seterr(err, "image %s: its lock: %s", image_dir, strerror(errno));
		return -1;
	}
	if (flock(*fd, LOCK_SH | LOCK_NB) < 0)
	{
		jail_seterr(err, "image %s is being removed", image_dir);
		jail_close(fd);
		return -1;
	}
	if (fstat(*fd, &st) < 0 || st.st_nlink == 0)
	{
		jail_seterr(err, "image %s was removed", image_dir);
		jail_close(fd);
		return -1;
	}
	return 0;
}
