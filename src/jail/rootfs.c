/*-------------------------------------------------------------------------
 *
 * rootfs.c
 *	  The sandbox's mount namespace: a minimal root on a tmpfs, entered
 *	  with pivot_root.  Runs in the child, inside the new user and mount
 *	  namespaces, before any capability is dropped.
 *
 * Layout (docs/jail.md):
 *	  /usr, /bin, /sbin, /lib, /lib64 ...	host, read-only, nosuid, nodev
 *	  /etc		a tmpfs-backed directory with generated passwd/group/hosts/
 *				nsswitch/pip.conf and a few host files bound read-only
 *				(loader cache, certificates, time zone, python config);
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
 * Bind a host path read-only at the same place in the new root.  Symlinks
 * (merged /usr: /bin -> usr/bin) are recreated as symlinks so they resolve
 * inside the sandbox.  A missing host path is skipped: not every host has
 * /lib64 or /etc/python3.
 */
static int
bind_host(const char *host, bool required, char *err)
{
	char		dst[512];
	char		link[512];
	struct stat st;
	ssize_t		n;
	int			fd;
	int			rc;

	snprintf(dst, sizeof(dst), NEWROOT "%s", host);
	if (lstat(host, &st) < 0)
	{
		if (!required && errno == ENOENT)
			return 0;
		jail_seterr(err, "%s: %s", host, strerror(errno));
		return -1;
	}
	if (make_parents(dst, err) < 0)
		return -1;
	if (S_ISLNK(st.st_mode))
	{
		n = readlink(host, link, sizeof(link) - 1);
		if (n < 0)
		{
			jail_seterr(err, "readlink %s: %s", host, strerror(errno));
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
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
		return 0;
	fd = open(host, O_PATH | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
	{
		jail_seterr(err, "open %s: %s", host, strerror(errno));
		return -1;
	}
	rc = make_mountpoint(dst, S_ISDIR(st.st_mode), err);
	if (rc == 0)
		rc = bind_fd(fd, dst, SYSTEM_FLAGS, err);
	close(fd);
	return rc;
}

/* A new file (never an existing one, never through a symlink) with data. */
static int
write_new_len(const char *path, const char *data, size_t len, mode_t mode, char *err)
{
	int			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);

	if (fd < 0 || jail_write_all(fd, data, len) < 0)
	{
		jail_seterr(err, "write %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int
write_new(const char *path, const char *data, mode_t mode, char *err)
{
	return write_new_len(path, data, strlen(data), mode, err);
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
 * Host /etc entries a Python/Node/bash program needs at run time, and no
 * more (each is a mount to make and to tear down, and a thing to read):
 * loader cache, CA certificates, the alternatives symlink farm that
 * /usr/bin points into, time zone, Python's site config, the protocol and
 * service tables, os-release (platform module) and mime.types.
 */
static const char *const etc_files[] = {
	"/etc/ld.so.cache", "/etc/ssl/certs", "/etc/ssl/openssl.cnf",
	"/etc/alternatives", "/etc/localtime", "/etc/timezone",
	"/etc/python3", "/etc/python3.11", "/etc/protocols", "/etc/services",
	"/etc/os-release", "/etc/mime.types",
	NULL
};

static int
setup_etc(char *err)
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

	if (mkdir(NEWROOT "/etc", 0755) < 0)
	{
		jail_seterr(err, "mkdir /etc: %s", strerror(errno));
		return -1;
	}
	if (write_new(NEWROOT "/etc/passwd", passwd, 0644, err) < 0 ||
		write_new(NEWROOT "/etc/group", group, 0644, err) < 0 ||
		write_new(NEWROOT "/etc/hosts", hosts, 0644, err) < 0 ||
		write_new(NEWROOT "/etc/hostname", "sandbox\n", 0644, err) < 0 ||
		write_new(NEWROOT "/etc/nsswitch.conf", nsswitch, 0644, err) < 0 ||
		write_new(NEWROOT "/etc/resolv.conf", "", 0644, err) < 0 ||
		write_new(NEWROOT "/etc/pip.conf", pipconf, 0644, err) < 0)
		return -1;
	for (int i = 0; etc_files[i]; i++)
		if (bind_host(etc_files[i], false, err) < 0)
			return -1;
	return 0;
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
	if (write_new_len(path, args->code, args->code_len, 0444, err) < 0)
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
	static const char *const sysdirs[] = {
		"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", NULL
	};
	char		buf[128];

	snprintf(buf, sizeof(buf), "mode=0755,size=%llu,nr_inodes=4096",
			 (unsigned long long) root_size);
	if (tmpfs_at(NEWROOT, buf, MS_NOSUID | MS_NODEV, err) < 0)
		return -1;
	for (int i = 0; sysdirs[i]; i++)
		if (bind_host(sysdirs[i], strcmp(sysdirs[i], "/usr") == 0, err) < 0)
			return -1;
	if (setup_etc(err) < 0 || setup_dev(NULL, err) < 0 || setup_proc(err) < 0)
		return -1;
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
		rootfs_common(args->code_len + 1024 * 1024, err) < 0 ||
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

	/*
	 * Enter the new root and let go of the host's tree, now; /tmp and
	 * /dev/shm get their (fresh, empty) tmpfs with the default size,
	 * resized if the request asks for another.
	 */
	{
		JailOptions defaults = {.tmp_size = JAIL_DEFAULT_TMP_SIZE};

		if (make_mountpoint(NEWROOT "/tmp", true, err) < 0 ||
			make_mountpoint(NEWROOT "/workspace", true, err) < 0 ||
			make_mountpoint(NEWROOT "/sandbox", true, err) < 0 ||
			mount_tmp(JAIL_DEFAULT_TMP_SIZE, NEWROOT, err) < 0 ||
			mount_dev_shm(&defaults, NEWROOT, err) < 0)
			return -1;
	}
	return enter_newroot("/", err);
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
 * Mount a clone of what srcfd (in the copy of the host tree) points at on
 * dst, with attrs on it and everything below it, the way bind_fd does in
 * a tree that is still attached.
 */
static int
attach_clone(int srcfd, const char *dst, unsigned int attrs, char *err)
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
	if (mount_setattr(m, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0 ||
		move_mount(m, "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH) < 0)
	{
		jail_seterr(err, "mount onto %s: %s", dst, strerror(errno));
		close(m);
		return -1;
	}
	close(m);
	return 0;
}

/*
 * The run's own part of a root entered ahead (see the file's head): the
 * same mounts as rootfs_finish, at their final paths.  The sources are
 * checked as open_sources does.
 */
static int
complete_pivoted(const JailChildArgs *args, char *err)
{
	const JailOptions *opts = args->opts;
	int			fd;

	if (strncmp(opts->workspace, "/sys", 4) == 0 &&
		(opts->workspace[4] == '/' || opts->workspace[4] == '\0'))
	{
		jail_seterr(err, "workspace %s: not under /sys", opts->workspace);
		return -1;
	}
	fd = open_in_host_tree(opts->workspace, O_DIRECTORY | O_NOFOLLOW);
	if (fd < 0)
	{
		jail_seterr(err, "workspace %s: %s", opts->workspace, strerror(errno));
		return -1;
	}
	if (attach_clone(fd, "/workspace", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, err) < 0)
	{
		close(fd);
		return -1;
	}
	close(fd);

	if (opts->tmp_size != JAIL_DEFAULT_TMP_SIZE &&
		(resize_tmpfs("/tmp", opts->tmp_size, MS_NOSUID | MS_NODEV, err) < 0 ||
		 resize_tmpfs("/dev/shm", opts->tmp_size, MS_NOSUID | MS_NODEV | MS_NOEXEC, err) < 0))
		return -1;

	for (int i = 0; i < opts->nbinds; i++)
	{
		const char *src = opts->binds[i].src;
		const char *dst = opts->binds[i].dst;
		struct stat st;

		if (strncmp(src, "/sys", 4) == 0 && (src[4] == '/' || src[4] == '\0'))
		{
			jail_seterr(err, "--ro-bind source %s: not under /sys", src);
			return -1;
		}
		fd = open_in_host_tree(src, 0);
		if (fd < 0)
		{
			jail_seterr(err, "--ro-bind source %s: %s", src, strerror(errno));
			return -1;
		}
		if (fstat(fd, &st) < 0 ||
			make_parents_at("", dst, err) < 0 ||
			make_mountpoint(dst, S_ISDIR(st.st_mode), err) < 0 ||
			attach_clone(fd, dst, SYSTEM_FLAGS, err) < 0)
		{
			if (!err[0])
				jail_seterr(err, "--ro-bind %s: %s", src, strerror(errno));
			close(fd);
			return -1;
		}
		close(fd);
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

/* After jail_rootfs_prepare, once the request is known. */
int
jail_rootfs_complete(const JailChildArgs *args, char *err)
{
	int			wsfd;
	int			bindfds[JAIL_MAX_BINDS];

	if (host_tree >= 0)
	{
		int			rc = complete_pivoted(args, err);

		release_host_tree(args);
		return rc;
	}
	if (open_sources(args->opts, true, &wsfd, bindfds, err) < 0 ||
		mount_dev_shm(args->opts, NEWROOT, err) < 0)
		return -1;
	return rootfs_finish(args, wsfd, bindfds, err);
}
