/*-------------------------------------------------------------------------
 *
 * rootfs.c
 *	  The sandbox's mount namespace: a minimal root on a tmpfs, entered
 *	  with pivot_root.  Runs in the child, inside the new user and mount
 *	  namespaces, before any capability is dropped.
 *
 * Layout (docs/jail.md):
 *	  /usr, /bin, /sbin, /lib, /lib64 ...	host (or the --image's: image.c),
 *				read-only, nosuid, nodev
 *	  (pip, npm, ...)	the package installers masked: their directories
 *				under empty read-only tmpfs, their commands under a script
 *				that refuses (hide_installers)
 *	  /etc		a tmpfs-backed directory with generated passwd/group/hosts/
 *				nsswitch/pip.conf and a few host (or image) files bound
 *				read-only (loader cache, certificates, time zone, python
 *				config);
 *				never the whole host /etc (pg config, ssl private keys)
 *	  /proc		fresh procfs of the new pid namespace (subset=pid)
 *	  /dev		tmpfs with null zero full random urandom, fd symlinks,
 *				/dev/shm; no tty, no pts
 *	  /tmp		tmpfs, size-limited
 *	  /workspace	the caller's directory, read-write, nosuid, nodev
 *	  /sandbox	the payload's code (root tmpfs, read-only)
 *	  --ro-bind destinations, read-only
 * Everything else of the host is absent: the old root is detached.
 *
 * Sources are opened with O_PATH before anything is mounted over them and
 * bound through /proc/self/fd, so a path is resolved exactly once.
 *
 * A served run's root is built ahead of its request (jail_rootfs_prepare,
 * then jail_rootfs_complete).  Leaving the host's tree is the costly step
 * there: detaching its ~20 mounts waits for an RCU grace period, 0.1 to
 * several ms on a busy VM.  So, where the kernel allows it, prepare takes
 * a detached copy of the host tree first (open_tree OPEN_TREE_CLONE |
 * AT_RECURSIVE: an anonymous mount namespace held by one descriptor of
 * this process), then pivots and detaches the host tree, all before the
 * request.  The request's workspace and --ro-bind sources are then looked
 * up in that copy (openat2 RESOLVE_IN_ROOT: resolved as the host resolves
 * them, symlinks cannot leave it) and cloned from it into place
 * (open_tree + move_mount).  The copy is handed to the launcher's worker
 * before the payload exists, whose exit, after the verdict, releases it
 * (another grace period, off the run's path).
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "jail.h"

/*
 * The new root is built on a tmpfs mounted here (in our private ns).  Not
 * /tmp: a sandbox built ahead of its request (worker.c) must still reach
 * the workspace by its host path afterwards, and workspaces live in
 * places like /tmp or /var, never in /sys, which the sandbox does not
 * get anyway.
 */
#define NEWROOT "/sys"

#define SYSTEM_FLAGS (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)

/* The detached copy of the host tree of a prepared root, or -1. */
static int host_tree = -1;

static void release_host_tree(const JailChildArgs *args);

/*
 * Old-API fallback for kernels before 5.12 (and valgrind, which does not
 * know mount_setattr): a bind remount of the top mount only, repeating
 * the flags the kernel locked, since a remount may not clear them.
 */
static int
remount_flags(const char *path, unsigned int attrs, char *err)
{
	struct statvfs sv;
	unsigned long flags = MS_BIND | MS_REMOUNT;

	if (statvfs(path, &sv) < 0)
	{
		jail_seterr(err, "statvfs %s: %s", path, strerror(errno));
		return -1;
	}
	if (sv.f_flag & ST_RDONLY)
		flags |= MS_RDONLY;
	if (sv.f_flag & ST_NOSUID)
		flags |= MS_NOSUID;
	if (sv.f_flag & ST_NODEV)
		flags |= MS_NODEV;
	if (sv.f_flag & ST_NOEXEC)
		flags |= MS_NOEXEC;
	if (sv.f_flag & ST_NOATIME)
		flags |= MS_NOATIME;
	if (sv.f_flag & ST_NODIRATIME)
		flags |= MS_NODIRATIME;
	if (sv.f_flag & ST_RELATIME)
		flags |= MS_RELATIME;
	if (attrs & MOUNT_ATTR_RDONLY)
		flags |= MS_RDONLY;
	if (attrs & MOUNT_ATTR_NOSUID)
		flags |= MS_NOSUID;
	if (attrs & MOUNT_ATTR_NODEV)
		flags |= MS_NODEV;
	if (attrs & MOUNT_ATTR_NOEXEC)
		flags |= MS_NOEXEC;
	if (mount(NULL, path, NULL, flags, NULL) < 0)
	{
		jail_seterr(err, "remount %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static int
set_attr(const char *path, unsigned int attrs, bool recursive, char *err)
{
	struct mount_attr attr = {.attr_set = attrs};

	/*
	 * mount_setattr only adds flags: flags locked by the kernel when the
	 * host mounts were copied into our namespace (ro, nosuid, atime) stay
	 * as they are, which is what makes this work without privilege.
	 */
	if (mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0,
					  &attr, sizeof(attr)) < 0)
	{
		if (errno == ENOSYS)
			return remount_flags(path, attrs, err);
		jail_seterr(err, "mount_setattr %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Bind an already-opened source onto dst (which must exist). */
static int
bind_fd(int srcfd, const char *dst, unsigned int attrs, char *err)
{
	char		src[64];

	snprintf(src, sizeof(src), "/proc/self/fd/%d", srcfd);
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
	{
		jail_seterr(err, "bind mount onto %s: %s", dst, strerror(errno));
		return -1;
	}
	return set_attr(dst, attrs, true, err);
}

static int
make_mountpoint(const char *path, bool dir, char *err)
{
	if (dir)
	{
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
		{
			jail_seterr(err, "mkdir %s: %s", path, strerror(errno));
			return -1;
		}
	}
	else
	{
		int			fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);

		if (fd < 0)
		{
			jail_seterr(err, "create %s: %s", path, strerror(errno));
			return -1;
		}
		close(fd);
	}
	return 0;
}

/* mkdir -p for the parents of a path inside the new root (at prefix). */
static int
make_parents_at(const char *prefix, const char *path, char *err)
{
	char		buf[512];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + strlen(prefix) + 1; (p = strchr(p, '/')) != NULL; p++)
	{
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		{
			jail_seterr(err, "mkdir %s: %s", buf, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	return 0;
}

static int
make_parents(const char *path, char *err)
{
	return make_parents_at(NEWROOT, path, err);
}

/*
 * Bind a system path read-only at the same place in the new root: the
 * host's, or with --image the image's (image.c: resolved inside the
 * image).  Symlinks (merged /usr: /bin -> usr/bin) are recreated as
 * symlinks so they resolve inside the sandbox.  A missing path is
 * skipped: not every host has /lib64 or /etc/python3.
 */
static int
bind_system(const char *path, bool required, char *err)
{
	char		dst[512];
	char		link[512];
	struct stat st;
	ssize_t		n;
	int			fd;
	int			rc;

	snprintf(dst, sizeof(dst), NEWROOT "%s", path);
	fd = jail_image_open(path, O_NOFOLLOW);
	if (fd < 0)
	{
		if (!required && errno == ENOENT)
			return 0;
		jail_seterr(err, "%s%s: %s", jail_image_prefix(), path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0)
	{
		jail_seterr(err, "%s%s: %s", jail_image_prefix(), path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
	{
		close(fd);
		return 0;
	}
	if (make_parents(dst, err) < 0)
	{
		close(fd);
		return -1;
	}
	if (S_ISLNK(st.st_mode))
	{
		n = readlinkat(fd, "", link, sizeof(link) - 1);
		close(fd);
		if (n < 0)
		{
			jail_seterr(err, "readlink %s%s: %s", jail_image_prefix(), path, strerror(errno));
			return -1;
		}
		link[n] = '\0';
		if (symlink(link, dst) < 0)
		{
			jail_seterr(err, "symlink %s: %s", dst, strerror(errno));
			return -1;
		}
		return 0;
	}
	rc = make_mountpoint(dst, S_ISDIR(st.st_mode), err);
	if (rc == 0)
		rc = bind_fd(fd, dst, SYSTEM_FLAGS, err);
	close(fd);
	return rc;
}

static int
write_new(const char *path, const char *data, mode_t mode, char *err)
{
	return jail_write_new(path, data, strlen(data), mode, err);
}

static int
tmpfs_at(const char *path, const char *opts, unsigned long flags, char *err)
{
	if (mount("tmpfs", path, "tmpfs", flags, opts) < 0)
	{
		jail_seterr(err, "tmpfs on %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * /etc entries a Python/Node/bash program needs at run time, and no more
 * (each is a mount to make and to tear down, and a thing to read): loader
 * cache, CA certificates, the alternatives symlink farm that /usr/bin
 * points into, time zone, Python's site config, the protocol and service
 * tables, os-release (platform module), mime.types, and matplotlib's
 * settings (an image's says Agg: no display).  The host's, or the
 * image's with --image (never a mix: the loader cache describes the
 * libraries of its own /usr).
 */
/* The system directories, bound read-only (gvisor.c binds the same). */
const char *const jail_rootfs_sysdirs[] = {
	"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", NULL
};

const char *const jail_rootfs_etc_files[] = {
	"/etc/ld.so.cache", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
	"/etc/alternatives", "/etc/localtime", "/etc/timezone",
	"/etc/python3", "/etc/python3.11", "/etc/protocols", "/etc/services",
	"/etc/os-release", "/etc/mime.types", "/etc/matplotlibrc",
	NULL
};

/*
 * The generated files of the sandbox's /etc, written into the directory
 * etc (which must not exist yet): the namespaced root's, and a gvisor
 * run's (gvisor.c), the same bytes.
 */
int
jail_rootfs_write_etc(const char *etc, char *err)
{
	static const char passwd[] =
		"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
		"sandbox:x:1000:1000:sandbox:/tmp:/bin/bash\n"
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
	static const char group[] =
		"root:x:0:\n"
		"sandbox:x:1000:\n"
		"nogroup:x:65534:\n";
	static const char hosts[] =
		"127.0.0.1\tlocalhost sandbox\n"
		"::1\tlocalhost ip6-localhost ip6-loopback\n";
	static const char nsswitch[] =
		"passwd: files\ngroup: files\nshadow: files\n"
		"hosts: files dns\nnetworks: files\nprotocols: files\n"
		"services: files\n";

	/*
	 * pip reads /etc/pip.conf even in isolated mode; with no index it
	 * fails at once with "Could not find a version ... (from versions:
	 * none)" instead of trying the (absent) network.
	 */
	static const char pipconf[] =
		"# sandbox-jail: runtime package installs are disabled\n"
		"[global]\nno-index = true\ndisable-pip-version-check = true\n"
		"[install]\nno-index = true\n";
	static const struct
	{
		const char *name;
		const char *data;
	}			files[] = {
		{"passwd", passwd}, {"group", group}, {"hosts", hosts},
		{"hostname", "sandbox\n"}, {"nsswitch.conf", nsswitch},
		{"resolv.conf", ""}, {"pip.conf", pipconf},
	};
	char		path[512];

	if (mkdir(etc, 0755) < 0)
	{
		jail_seterr(err, "mkdir %s: %s", etc, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
	{
		snprintf(path, sizeof(path), "%s/%s", etc, files[i].name);
		if (write_new(path, files[i].data, 0644, err) < 0)
			return -1;
	}
	return 0;
}

static int
setup_etc(char *err)
{
	if (jail_rootfs_write_etc(NEWROOT "/etc", err) < 0)
		return -1;
	for (int i = 0; jail_rootfs_etc_files[i]; i++)
		if (bind_system(jail_rootfs_etc_files[i], false, err) < 0)
			return -1;
	return 0;
}

/*
 * Runtime installs are off (docs/egress.md, "Clients"): with an allowed
 * registry host, pip's and npm's own switches (PIP_NO_INDEX, pip.conf,
 * npm's offline mode) are the payload's to turn back on
 * (PIP_CONFIG_FILE=/dev/null, --index-url, --offline=false).  So the
 * installers are not in the sandbox at all: each directory below is
 * covered by an empty read-only tmpfs (python3 -m pip, -m ensurepip, the
 * wheels venv would install, npm's and corepack's code), and each command
 * that is a file of its own by INSTALLER_STUB, which says so and exits
 * 127.  A command that is a symlink into a covered directory (npm, npx,
 * corepack) is left dangling: "command not found".  Which paths those are
 * is installers.c's (the patterns, globbed on the host; a launcher's
 * sandboxes take its cached result).
 */

#define INSTALLER_STUB JAIL_INSTALLER_STUB

/* What a masked installer command runs instead (gvisor.c writes it too). */
const char jail_rootfs_installer_stub[] =
	"#!/bin/sh\n"
	"# sandbox-jail: runtime package installs are disabled\n"
	"echo \"${0##*/}: not available in the sandbox (runtime package installs are disabled)\" >&2\n"
	"exit 127\n";

static int
hide_one_installer(const char *path, char *err)
{
	char		dst[512];
	struct stat st;
	int			fd = jail_image_open(path, O_NOFOLLOW);
	int			rc = fd < 0 ? -1 : fstat(fd, &st);

	if (fd >= 0)
		close(fd);
	if (rc < 0 || S_ISLNK(st.st_mode))
		return 0;				/* gone, or a link into what is covered */
	snprintf(dst, sizeof(dst), NEWROOT "%s", path);
	if (S_ISDIR(st.st_mode))
	{
		if (tmpfs_at(dst, "size=4k,nr_inodes=1,mode=0555",
					 MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, err) < 0)
			return -1;
		return 0;
	}
	if (!S_ISREG(st.st_mode))
		return 0;
	if (mount(NEWROOT INSTALLER_STUB, dst, NULL, MS_BIND, NULL) < 0)
	{
		jail_seterr(err, "bind mount onto %s: %s", dst, strerror(errno));
		return -1;
	}
	return set_attr(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
					false, err);
}

static int
hide_installers(char *err)
{
	if (write_new(NEWROOT INSTALLER_STUB, jail_rootfs_installer_stub, 0555, err) < 0)
		return -1;
	return jail_installers_each(hide_one_installer, err);
}

/* /dev/shm: POSIX shm and semaphores (multiprocessing) want one. */
static int
mount_dev_shm(const JailOptions *opts, const char *root, char *err)
{
	char		shmopts[64];
	char		path[64];

	snprintf(shmopts, sizeof(shmopts), "mode=1777,size=%llu",
			 (unsigned long long) opts->tmp_size);
	snprintf(path, sizeof(path), "%s/dev/shm", root);
	return tmpfs_at(path, shmopts, MS_NOSUID | MS_NODEV | MS_NOEXEC, err);
}

/* /tmp: its own tmpfs of tmp_size bytes. */
static int
mount_tmp(uint64_t tmp_size, const char *root, char *err)
{
	char		opts[128];
	char		path[64];

	snprintf(opts, sizeof(opts), "mode=1777,size=%llu,nr_inodes=65536",
			 (unsigned long long) tmp_size);
	snprintf(path, sizeof(path), "%s/tmp", root);
	return tmpfs_at(path, opts, MS_NOSUID | MS_NODEV, err);
}

/* A tmpfs mounted ahead with the default size gets the request's. */
static int
resize_tmpfs(const char *path, uint64_t size, unsigned long flags, char *err)
{
	char		opts[64];

	snprintf(opts, sizeof(opts), "size=%llu", (unsigned long long) size);
	if (mount(NULL, path, NULL, MS_REMOUNT | flags, opts) < 0)
	{
		jail_seterr(err, "resize the tmpfs on %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* /dev; its shm tmpfs only with opts (otherwise the caller mounts it). */
static int
setup_dev(const JailOptions *opts, char *err)
{
	static const char *const nodes[] = {"null", "zero", "full", "random", "urandom", NULL};
	static const char *const links[][2] = {
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	};
	char		path[128];

	if (mkdir(NEWROOT "/dev", 0755) < 0 ||
		tmpfs_at(NEWROOT "/dev", "mode=0755,size=64k,nr_inodes=64",
				 MS_NOSUID | MS_NOEXEC, err) < 0)
	{
		if (!err[0])
			jail_seterr(err, "mkdir /dev: %s", strerror(errno));
		return -1;
	}
	for (int i = 0; nodes[i]; i++)
	{
		int			fd;
		int			rc;

		snprintf(path, sizeof(path), "/dev/%s", nodes[i]);
		/* O_PATH: a device node is not opened, just referenced */
		fd = open(path, O_PATH | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
		{
			jail_seterr(err, "open %s: %s", path, strerror(errno));
			return -1;
		}
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", nodes[i]);
		rc = make_mountpoint(path, false, err);
		if (rc == 0)
			rc = bind_fd(fd, path, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, err);
		close(fd);
		if (rc < 0)
			return -1;
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
	{
		snprintf(path, sizeof(path), NEWROOT "/dev/%s", links[i][1]);
		if (symlink(links[i][0], path) < 0)
		{
			jail_seterr(err, "symlink %s: %s", path, strerror(errno));
			return -1;
		}
	}
	if (make_mountpoint(NEWROOT "/dev/shm", true, err) < 0 ||
		(opts && mount_dev_shm(opts, NEWROOT, err) < 0))
		return -1;
	return set_attr(NEWROOT "/dev", MOUNT_ATTR_RDONLY, false, err);
}

static int
setup_proc(char *err)
{
	if (mkdir(NEWROOT "/proc", 0555) < 0 && errno != EEXIST)
	{
		jail_seterr(err, "mkdir /proc: %s", strerror(errno));
		return -1;
	}

	/*
	 * subset=pid shows only the process directories: no /proc/sys,
	 * /proc/kcore, /proc/sysrq-trigger, /proc/keys and friends.  Kernels
	 * before 5.8 lack it; there the full procfs of our pid namespace is
	 * the fallback.
	 */
	if (mount("proc", NEWROOT "/proc", "proc",
			  MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") < 0 &&
		mount("proc", NEWROOT "/proc", "proc",
			  MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
	{
		jail_seterr(err, "mount /proc: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int
setup_code(const JailChildArgs *args, const char *root, char *err)
{
	static const char *const names[] = {"main.py", "main.js", "main.sh"};
	char		path[128];

	/* a root entered ahead (root "") has /sandbox already, empty */
	snprintf(path, sizeof(path), "%s/sandbox", root);
	if (root[0] != '\0' && mkdir(path, 0755) < 0)
	{
		jail_seterr(err, "mkdir /sandbox: %s", strerror(errno));
		return -1;
	}
	if (args->opts->language == LANG_EXEC)
		return 0;				/* no code: /sandbox stays empty */
	snprintf(path, sizeof(path), "%s/sandbox/%s", root, names[args->opts->language]);
	if (jail_write_new(path, args->code, args->code_len, 0444, err) < 0)
		return -1;
	return jail_egress_write_files(args, root, err);
}

/*
 * The part of the root that no request changes: system directories, /etc,
 * /dev (without its shm), /proc.  root_size bounds the root tmpfs, which
 * also holds the code.
 */
static int
rootfs_common(uint64_t root_size, char *err)
{
	char		buf[128];

	snprintf(buf, sizeof(buf), "mode=0755,size=%llu,nr_inodes=4096",
			 (unsigned long long) root_size);
	if (jail_image_enter(err) < 0 ||
		tmpfs_at(NEWROOT, buf, MS_NOSUID | MS_NODEV, err) < 0)
		return -1;
	for (int i = 0; jail_rootfs_sysdirs[i]; i++)
		if (bind_system(jail_rootfs_sysdirs[i], strcmp(jail_rootfs_sysdirs[i], "/usr") == 0, err) < 0)
			return -1;
	if (setup_etc(err) < 0 || hide_installers(err) < 0 || setup_dev(NULL, err) < 0 ||
		setup_proc(err) < 0)
		return -1;
	/* the image's part is bound: nothing of it stays open in the sandbox */
	jail_image_forget();
	return 0;
}

/*
 * Make NEWROOT the root and leave the host's tree, then chdir to cwd.
 * pivot_root(".", ".") stacks the old root under the new one; the lazy
 * unmount then detaches the whole host tree from our namespace.
 */
static int
enter_newroot(const char *cwd, char *err)
{
	if (chdir(NEWROOT) < 0 ||
		syscall(SYS_pivot_root, ".", ".") < 0 ||
		umount2(".", MNT_DETACH) < 0 ||
		chdir(cwd) < 0)
	{
		jail_seterr(err, "pivot_root: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The run's own part, from the host-side sources opened by the caller:
 * /tmp, /workspace, the --ro-bind mounts, the code; then the root goes
 * read-only and we pivot into it.
 */
static int
rootfs_finish(const JailChildArgs *args, int wsfd, int *bindfds, char *err)
{
	const JailOptions *opts = args->opts;
	char		buf[512];
	int			i;

	if (make_mountpoint(NEWROOT "/tmp", true, err) < 0 ||
		mount_tmp(opts->tmp_size, NEWROOT, err) < 0)
		return -1;

	if (make_mountpoint(NEWROOT "/workspace", true, err) < 0 ||
		bind_fd(wsfd, NEWROOT "/workspace", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err) < 0)
		return -1;
	close(wsfd);

	for (i = 0; i < opts->nbinds; i++)
	{
		struct stat st;

		snprintf(buf, sizeof(buf), NEWROOT "%s", opts->binds[i].dst);
		if (fstat(bindfds[i], &st) < 0 ||
			make_parents(buf, err) < 0 ||
			make_mountpoint(buf, S_ISDIR(st.st_mode), err) < 0 ||
			bind_fd(bindfds[i], buf, SYSTEM_FLAGS, err) < 0)
		{
			if (!err[0])
				jail_seterr(err, "--ro-bind %s: %s", opts->binds[i].src, strerror(errno));
			return -1;
		}
		close(bindfds[i]);
	}

	if (setup_code(args, NEWROOT, err) < 0)
		return -1;

	/* The root itself: read-only from here on. */
	if (set_attr(NEWROOT, SYSTEM_FLAGS, false, err) < 0)
		return -1;

	return enter_newroot("/workspace", err);
}

/*
 * Open the workspace and the extra sources.  The workspace's last
 * component must not be a symlink: the caller created the directory, a
 * symlink there was planted.  A prepared root sits on /sys, so a source
 * there would resolve into the sandbox's own tree: refused.
 */
static int
open_sources(const JailOptions *opts, bool prepared, int *wsfd, int *bindfds,
			 char *err)
{
	if (prepared && strncmp(opts->workspace, "/sys", 4) == 0 &&
		(opts->workspace[4] == '/' || opts->workspace[4] == '\0'))
	{
		jail_seterr(err, "workspace %s: not under /sys", opts->workspace);
		return -1;
	}
	*wsfd = open(opts->workspace, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*wsfd < 0)
	{
		jail_seterr(err, "workspace %s: %s", opts->workspace, strerror(errno));
		return -1;
	}
	for (int i = 0; i < opts->nbinds; i++)
	{
		const char *src = opts->binds[i].src;

		if (prepared && strncmp(src, "/sys", 4) == 0 && (src[4] == '/' || src[4] == '\0'))
		{
			jail_seterr(err, "--ro-bind source %s: not under /sys", src);
			return -1;
		}
		bindfds[i] = open(src, O_PATH | O_CLOEXEC);
		if (bindfds[i] < 0)
		{
			jail_seterr(err, "--ro-bind source %s: %s", src, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static int
make_private(char *err)
{
	/* Nothing we mount may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
	{
		jail_seterr(err, "make / private: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* One-shot: everything, with the sources opened before anything is mounted. */
int
jail_rootfs_setup(const JailChildArgs *args, char *err)
{
	int			wsfd;
	int			bindfds[JAIL_MAX_BINDS];

	if (make_private(err) < 0 ||
		open_sources(args->opts, false, &wsfd, bindfds, err) < 0 ||
		rootfs_common(args->code_len + args->egress_ca_len + 1024 * 1024, err) < 0 ||
		mount_dev_shm(args->opts, NEWROOT, err) < 0)
		return -1;
	return rootfs_finish(args, wsfd, bindfds, err);
}

/*
 * Can mounts be cloned out of a detached copy of the host tree?  (Linux
 * allows open_tree(OPEN_TREE_CLONE) of a path in an anonymous mount
 * namespace only since 6.x.)  Tried on /usr, which every host has.
 */
static bool
host_tree_usable(int tree)
{
	struct open_how how = {
		.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	int			dir = syscall(SYS_openat2, tree, "/usr", &how, sizeof(how));
	int			probe = -1;

	if (dir >= 0)
		probe = open_tree(dir, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
						  AT_EMPTY_PATH | AT_RECURSIVE);
	if (dir >= 0)
		close(dir);
	if (probe < 0)
		return false;
	close(probe);
	return true;
}

/*
 * Enter the new root and let go of the host's tree, now; /tmp and
 * /dev/shm get their (fresh, empty) tmpfs with the default size,
 * resized if the request asks for another.
 */
static int
enter_prepared(char *err)
{
	JailOptions defaults = {.tmp_size = JAIL_DEFAULT_TMP_SIZE};

	if (make_mountpoint(NEWROOT "/tmp", true, err) < 0 ||
		make_mountpoint(NEWROOT "/workspace", true, err) < 0 ||
		make_mountpoint(NEWROOT "/sandbox", true, err) < 0 ||
		mount_tmp(JAIL_DEFAULT_TMP_SIZE, NEWROOT, err) < 0 ||
		mount_dev_shm(&defaults, NEWROOT, err) < 0)
		return -1;
	return enter_newroot("/", err);
}

/* Ahead of the request (worker.c): the part no request changes. */
int
jail_rootfs_prepare(char *err)
{
	if (make_private(err) < 0)
		return -1;

	/*
	 * The copy of the host tree comes first, so it holds the host's own
	 * /sys and nothing of ours.  Without it, the host tree stays attached
	 * until the request, as in a one-shot run.
	 */
	host_tree = open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	/* the test suite forces the fallback: this kernel has the new way */
	if (host_tree >= 0 && getenv("SANDBOX_JAIL_NO_HOST_TREE") != NULL)
	{
		close(host_tree);
		host_tree = -1;
	}
	if (host_tree >= 0 && !host_tree_usable(host_tree))
	{
		close(host_tree);
		host_tree = -1;
	}
	if (rootfs_common(JAIL_MAX_CODE + 1024 * 1024, err) < 0)
		return -1;
	if (host_tree < 0)
		return 0;
	return enter_prepared(err);
}

/*
 * A warm interpreter's process, forked by an init that could not enter
 * its root ahead (no copy of the host tree: kernels before 6.x, or
 * SANDBOX_JAIL_NO_HOST_TREE): a mount namespace of its own, a copy of
 * init's (the fixed root built, the host's tree still attached), in which
 * it enters the root at once, so that the interpreter starts in it as in
 * a root entered ahead.  Init joins this namespace after the request to
 * complete it (jail_rootfs_complete), with the request's sources cloned
 * from its own namespace first.
 */
int
jail_rootfs_enter_own(char *err)
{
	if (unshare(CLONE_NEWNS) < 0)
	{
		jail_seterr(err, "mount namespace of the warm interpreter: %s", strerror(errno));
		return -1;
	}
	return enter_prepared(err);
}

/* A host path, looked up in the copy of the host tree, as an O_PATH fd. */
static int
open_in_host_tree(const char *path, int flags)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC | flags,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};

	return syscall(SYS_openat2, host_tree, path, &how, sizeof(how));
}

/*
 * A detached clone of what srcfd points at (and everything below it),
 * with attrs set on all of it before it is attached anywhere: the way
 * bind_fd mounts a source in a tree that is still attached.  The mount's
 * descriptor, or -1.
 */
static int
clone_source(int srcfd, const char *dst, unsigned int attrs, char *err)
{
	struct mount_attr attr = {.attr_set = attrs};
	int			m;

	m = open_tree(srcfd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
				  AT_EMPTY_PATH | AT_RECURSIVE);
	if (m < 0)
	{
		jail_seterr(err, "clone the source of %s: %s", dst, strerror(errno));
		return -1;
	}
	if (mount_setattr(m, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
	{
		jail_seterr(err, "mount onto %s: %s", dst, strerror(errno));
		close(m);
		return -1;
	}
	return m;
}

/* Attach a detached clone (clone_source) on dst, in our mount namespace. */
static int
attach_at(int m, const char *dst, char *err)
{
	if (move_mount(m, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
	{
		jail_seterr(err, "mount onto %s: %s", dst, strerror(errno));
		return -1;
	}
	return 0;
}

/* A host path the prepared root (on /sys) would shadow: refused. */
static bool
under_sys(const char *path)
{
	return strncmp(path, "/sys", 4) == 0 && (path[4] == '/' || path[4] == '\0');
}

/*
 * A source of the request, as an O_PATH descriptor: looked up in the copy
 * of the host tree, or (no copy: the payload entered a root of its own,
 * jail_rootfs_enter_own) by its path in our mount namespace, which still
 * has the host's tree.
 */
static int
open_source(const char *path, int flags)
{
	if (host_tree >= 0)
		return open_in_host_tree(path, flags);
	return open(path, O_PATH | O_CLOEXEC | flags);
}

/* The request's sources, cloned, not yet attached (complete_entered). */
typedef struct Clones
{
	int			ws;
	int			bind[JAIL_MAX_BINDS];
	bool		bind_dir[JAIL_MAX_BINDS];
	int			n;
} Clones;

static void
close_clones(Clones *c)
{
	jail_close(&c->ws);
	for (int i = 0; i < c->n; i++)
		jail_close(&c->bind[i]);
}

/* Each source looked up (checked as open_sources does) and cloned. */
static int
clone_sources(const JailOptions *opts, Clones *c, char *err)
{
	int			fd;

	c->ws = -1;
	c->n = 0;
	if (under_sys(opts->workspace))
	{
		jail_seterr(err, "workspace %s: not under /sys", opts->workspace);
		return -1;
	}
	fd = open_source(opts->workspace, O_DIRECTORY | O_NOFOLLOW);
	if (fd < 0)
	{
		jail_seterr(err, "workspace %s: %s", opts->workspace, strerror(errno));
		return -1;
	}
	c->ws = clone_source(fd, "/workspace", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err);
	close(fd);
	if (c->ws < 0)
		return -1;

	for (int i = 0; i < opts->nbinds; i++)
	{
		const char *src = opts->binds[i].src;
		struct stat st;

		if (under_sys(src))
		{
			jail_seterr(err, "--ro-bind source %s: not under /sys", src);
			return -1;
		}
		fd = open_source(src, 0);
		if (fd < 0 || fstat(fd, &st) < 0)
		{
			jail_seterr(err, "--ro-bind source %s: %s", src, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		c->bind_dir[i] = S_ISDIR(st.st_mode);
		c->bind[i] = clone_source(fd, opts->binds[i].dst, SYSTEM_FLAGS, err);
		close(fd);
		if (c->bind[i] < 0)
			return -1;
		c->n = i + 1;
	}
	return 0;
}

/*
 * The run's own part of a root entered ahead (see the file's head): the
 * same mounts as rootfs_finish, at their final paths, from the clones.
 */
static int
attach_sources(const JailChildArgs *args, const Clones *c, char *err)
{
	const JailOptions *opts = args->opts;

	if (attach_at(c->ws, "/workspace", err) < 0)
		return -1;
	if (opts->tmp_size != JAIL_DEFAULT_TMP_SIZE &&
		(resize_tmpfs("/tmp", opts->tmp_size, MS_NOSUID | MS_NODEV, err) < 0 ||
		 resize_tmpfs("/dev/shm", opts->tmp_size, MS_NOSUID | MS_NODEV | MS_NOEXEC, err) < 0))
		return -1;
	for (int i = 0; i < c->n; i++)
	{
		const char *dst = opts->binds[i].dst;

		if (make_parents_at("", dst, err) < 0 ||
			make_mountpoint(dst, c->bind_dir[i], err) < 0 ||
			attach_at(c->bind[i], dst, err) < 0)
		{
			if (!err[0])
				jail_seterr(err, "--ro-bind %s: %s", opts->binds[i].src, strerror(errno));
			return -1;
		}
	}
	if (setup_code(args, "", err) < 0 ||
		set_attr("/", SYSTEM_FLAGS, false, err) < 0)
		return -1;
	if (chdir("/workspace") < 0)
	{
		jail_seterr(err, "chdir /workspace: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Join the mount namespace the payload's process made for itself
 * (jail_rootfs_enter_own), whose root it entered before its interpreter
 * started.  Its mounts are then ours to complete; our own namespace, with
 * the host's tree, is left to the worker, which holds it (spawn.c) and
 * releases it after the verdict.  Refused if the payload's process is
 * still in ours: it would be completing the host's tree.
 */
static int
enter_payload_ns(pid_t payload, char *err)
{
	char		path[64];
	struct stat own;
	struct stat its;
	int			fd;

	snprintf(path, sizeof(path), NEWROOT "/proc/%d/ns/mnt", (int) payload);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &its) < 0 || stat(NEWROOT "/proc/self/ns/mnt", &own) < 0)
	{
		jail_seterr(err, "the payload's mount namespace: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (its.st_ino == own.st_ino && its.st_dev == own.st_dev)
	{
		jail_seterr(err, "the payload's process has no mount namespace of its own");
		close(fd);
		return -1;
	}
	if (setns(fd, CLONE_NEWNS) < 0)
	{
		jail_seterr(err, "join the payload's mount namespace: %s", strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/*
 * The run's part of a root entered ahead, by us (host_tree) or by the
 * payload's process in a mount namespace of its own (a warm interpreter
 * on a kernel without the copy): the sources cloned where they are found,
 * the warm bootstrap removed, everything attached in the final root.
 */
static int
complete_entered(const JailChildArgs *args, pid_t payload, char *err)
{
	bool		own_ns = host_tree < 0;
	Clones		c;
	int			rc;

	rc = clone_sources(args->opts, &c, err);
	if (host_tree >= 0)
		release_host_tree(args);
	if (rc == 0 && own_ns)
		rc = enter_payload_ns(payload, err);
	if (rc == 0 && args->warm)
		rc = jail_warm_unroot(args->warm, err);
	if (rc == 0)
		rc = attach_sources(args, &c, err);
	close_clones(&c);
	return rc;
}

/*
 * Give the copy of the host tree away before any untrusted code exists:
 * to the worker (over tree_sock), whose exit releases it after the
 * verdict; closing it here would put its teardown on the run's path.
 * If it cannot be sent, it is closed all the same.
 */
static void
release_host_tree(const JailChildArgs *args)
{
	if (args->tree_sock >= 0)
		(void) jail_send_fd(args->tree_sock, host_tree);
	close(host_tree);
	host_tree = -1;
}

/* After jail_rootfs_prepare: did it enter the new root already? */
bool
jail_rootfs_entered(void)
{
	return host_tree >= 0;
}

/*
 * After jail_rootfs_prepare, once the request is known.  payload: the
 * payload's process (a warm interpreter's, which entered a root of its
 * own when we did not: jail_rootfs_enter_own).
 */
int
jail_rootfs_complete(const JailChildArgs *args, pid_t payload, char *err)
{
	int			wsfd;
	int			bindfds[JAIL_MAX_BINDS];

	if (host_tree >= 0 || args->warm)
		return complete_entered(args, payload, err);
	if (open_sources(args->opts, true, &wsfd, bindfds, err) < 0 ||
		mount_dev_shm(args->opts, NEWROOT, err) < 0)
		return -1;
	return rootfs_finish(args, wsfd, bindfds, err);
}
