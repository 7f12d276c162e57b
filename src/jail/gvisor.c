/*-------------------------------------------------------------------------
 *
 * gvisor.c
 *	  The gvisor isolation class (--isolation gvisor; docs/jail.md, "The
 *	  gvisor class"): the payload runs on gVisor's kernel (runsc, ptrace
 *	  platform) instead of the host's, with the contract of a namespaced
 *	  run: the same root layout, /workspace, limits, verdict and
 *	  environment.
 *
 * Who does what.  The host side of the run is lifecycle.c's, unchanged
 * but for three steps: the run always has a cgroup of its own (never a
 * launcher's slot), made with room for runsc itself
 * (JAIL_GVISOR_MEMORY_OVERHEAD, JAIL_GVISOR_PIDS_OVERHEAD: the limits
 * cover runsc, its sentry and gofer and the payload together); no id
 * maps; the clone (jail_gvisor_spawn) makes no user namespace.  The
 * cloned child, jail_gvisor_child_main, plays the namespaced sandbox's
 * init: root of the host (runsc needs it), in new pid, mount, network,
 * ipc and uts namespaces, in the run's cgroup, dying with the jail.  It
 * waits for the go bytes, builds the OCI bundle on a private tmpfs,
 * starts `runsc run` on it, and reports the payload's wait status on the
 * status pipe as init does (JailInitReport).  Killing it (the wall clock,
 * a cancel, the jail's death) ends its pid namespace: runsc and every
 * process of gVisor with it.
 *
 * Inside gVisor, sandbox-gvisor-init (gvisor_init.c) is the first process:
 * it forks the payload as the run's uid without capabilities and writes
 * its wait status to a file only it can write (runsc's own exit code
 * cannot tell exit 137 from SIGKILL).
 *
 * The bundle (GVISOR_DIR, a tmpfs of this mount namespace only):
 *	  config.json	the spec (gvisor_write_spec)
 *	  rootfs/		the sandbox's root, read-only: mount points, the
 *					generated /etc (rootfs.c's bytes), the installer stub
 *	  sandbox/		/sandbox: the code, the egress files (read-only)
 *	  status/		/run/sandbox-status: root's only (the init's status)
 *	  ws			the workspace, bound from the descriptor opened with
 *					O_NOFOLLOW (a path swapped afterwards is not followed)
 *	  src/N			the system paths, each bound from its descriptor
 *					(resolved inside the image, as rootfs.c does)
 *	  state/		runsc's --root;  runsc.log  runsc's own messages
 *
 * Network: none at all (runsc --network=none) without egress.  With
 * egress the child's network namespace holds only loopback and the
 * proxy's listening socket (jail_egress_listen, as a namespaced init
 * makes it); runsc --network=host then gives the payload that namespace
 * through gVisor's own socket layer, so the payload reaches the proxy at
 * 127.0.0.1:3128 exactly as a namespaced payload does, and nothing else.
 *
 *-------------------------------------------------------------------------
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/sched.h>

#include "jail.h"

#define GVISOR_DIR		"/run/sandbox-jail-gvisor"
#define GVISOR_INIT		"sandbox-gvisor-init"	/* beside our binary */
#define GVISOR_STATUS	"/run/sandbox-status"	/* inside: status/ */
#define GVISOR_INIT_SETUP_FAILED 120	/* gvisor_init.c's exit */
#define GVISOR_LOG_TAIL 400		/* bytes of runsc's log in a setup error */

/* The spec, as it is written: a growing buffer (gvisor_write_spec). */
typedef struct Spec
{
	char	   *buf;
	size_t		len;
	size_t		cap;
	bool		oom;
} Spec;

static void
spec_raw(Spec *s, const char *text, size_t n)
{
	if (s->oom)
		return;
	if (s->len + n + 1 > s->cap)
	{
		size_t		cap = (s->len + n + 1) * 2;
		char	   *b = realloc(s->buf, cap);

		if (!b)
		{
			s->oom = true;
			return;
		}
		s->buf = b;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, text, n);
	s->len += n;
	s->buf[s->len] = '\0';
}

static void spec_fmt(Spec *s, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
spec_fmt(Spec *s, const char *fmt,...)
{
	char		tmp[1024];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(tmp))
		s->oom = true;
	else
		spec_raw(s, tmp, n);
}

/* A JSON string: quoted, escaped (control bytes as \u00XX). */
static void
spec_str(Spec *s, const char *v)
{
	spec_raw(s, "\"", 1);
	for (; *v; v++)
	{
		unsigned char c = (unsigned char) *v;

		if (c == '"' || c == '\\')
		{
			char		e[2] = {'\\', (char) c};

			spec_raw(s, e, 2);
		}
		else if (c < 0x20 || c == 0x7f)
			spec_fmt(s, "\\u%04x", c);
		else
			spec_raw(s, (const char *) &c, 1);
	}
	spec_raw(s, "\"", 1);
}

/* One entry of "mounts"; options a comma-separated list, no quotes. */
static void
spec_mount(Spec *s, const char *dst, const char *type, const char *src, const char *options)
{
	const char *o = options;

	spec_raw(s, s->buf[s->len - 1] == '[' ? "\n  {" : ",\n  {", s->buf[s->len - 1] == '[' ? 4 : 5);
	spec_raw(s, "\"destination\": ", 15);
	spec_str(s, dst);
	spec_fmt(s, ", \"type\": \"%s\", \"source\": ", type);
	spec_str(s, src);
	spec_raw(s, ", \"options\": [", 14);
	while (*o)
	{
		const char *comma = strchr(o, ',');
		size_t		n = comma ? (size_t) (comma - o) : strlen(o);

		spec_fmt(s, "%s\"%.*s\"", o == options ? "" : ", ", (int) n, o);
		o += n + (comma ? 1 : 0);
	}
	spec_raw(s, "]}", 2);
}

/* mkdir -p below the bundle's root (parents 0755). */
static int
mkdirs(const char *path, char *err)
{
	char		p[PATH_MAX];

	if (snprintf(p, sizeof(p), "%s", path) >= (int) sizeof(p))
	{
		jail_seterr(err, "path too long: %s", path);
		return -1;
	}
	for (char *c = p + 1; *c; c++)
	{
		if (*c != '/')
			continue;
		*c = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
		{
			jail_seterr(err, "mkdir %s: %s", p, strerror(errno));
			return -1;
		}
		*c = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
	{
		jail_seterr(err, "mkdir %s: %s", p, strerror(errno));
		return -1;
	}
	return 0;
}

/* An empty file as a mount point for a file (parents made). */
static int
touch(const char *path, char *err)
{
	char		dir[PATH_MAX];
	char	   *slash;
	int			fd;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir)
	{
		*slash = '\0';
		if (mkdirs(dir, err) < 0)
			return -1;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
	if (fd < 0)
	{
		jail_seterr(err, "create %s: %s", path, strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

/*
 * A system path of the sandbox's root (the host's, or the image's),
 * resolved as rootfs.c resolves it (jail_image_open: inside the image, a
 * symlink in it never leads out of it): a symlink is copied as a symlink
 * into rootfs (merged /usr: /bin -> usr/bin), a directory or a file is
 * bound from its descriptor onto a staging path of the bundle (src/N),
 * which the spec binds read-only: runsc never resolves the path itself.
 * Absent: nothing.
 */
static int
gvisor_system_path(Spec *s, const char *path, char *err)
{
	static int	nstaged = 0;
	char		staged[PATH_MAX];
	char		dst[PATH_MAX];
	char		target[PATH_MAX];
	char		self[64];
	struct stat st;
	ssize_t		n;
	int			fd = jail_image_open(path, O_NOFOLLOW);

	if (fd < 0)
		return 0;
	snprintf(dst, sizeof(dst), GVISOR_DIR "/rootfs%s", path);
	if (fstat(fd, &st) < 0)
	{
		close(fd);
		return 0;
	}
	if (S_ISLNK(st.st_mode))
	{
		n = readlinkat(fd, "", target, sizeof(target) - 1);
		close(fd);
		if (n < 0)
			return 0;
		target[n] = '\0';
		if (touch(dst, err) < 0 || unlink(dst) < 0 || symlink(target, dst) < 0)
		{
			if (!err[0])
				jail_seterr(err, "symlink %s: %s", dst, strerror(errno));
			return -1;
		}
		return 0;
	}
	snprintf(staged, sizeof(staged), GVISOR_DIR "/src/%d", nstaged++);
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	if ((S_ISDIR(st.st_mode) ? mkdirs(dst, err) < 0 || mkdirs(staged, err) < 0 :
		 touch(dst, err) < 0 || touch(staged, err) < 0))
	{
		close(fd);
		return -1;
	}
	if (mount(self, staged, NULL, MS_BIND | MS_REC, NULL) < 0)
	{
		jail_seterr(err, "bind %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	spec_mount(s, path, "bind", staged, "rbind,ro,nosuid,nodev");
	return 0;
}

/* The spec being written, for gvisor_hide_installer (a callback). */
static Spec *installer_spec;

/* As rootfs.c's hide_one_installer: a directory empty, a command the stub. */
static int
gvisor_hide_installer(const char *path, char *err)
{
	struct stat st;
	int			fd = jail_image_open(path, O_NOFOLLOW);
	int			rc = fd < 0 ? -1 : fstat(fd, &st);

	if (fd >= 0)
		close(fd);
	if (rc < 0 || S_ISLNK(st.st_mode))
		return 0;
	if (S_ISDIR(st.st_mode))
		spec_mount(installer_spec, path, "tmpfs", "tmpfs", "ro,nosuid,nodev,noexec,size=4k,mode=0555");
	else if (S_ISREG(st.st_mode))
		spec_mount(installer_spec, path, "bind", GVISOR_DIR "/rootfs" JAIL_INSTALLER_STUB,
				   "bind,ro,nosuid,nodev");
	return 0;
}

static const char *
code_name(JailLanguage lang)
{
	return lang == LANG_PYTHON ? "main.py" : lang == LANG_NODE ? "main.js" : "main.sh";
}

/* Our own binary's directory: sandbox-gvisor-init lives beside it. */
static int
init_path(char *path, size_t len, char *err)
{
	char		self[PATH_MAX];
	ssize_t		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char	   *slash;

	if (n < 0)
	{
		jail_seterr(err, "readlink /proc/self/exe: %s", strerror(errno));
		return -1;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	if (snprintf(path, len, "%s/" GVISOR_INIT, self) >= (int) len)
	{
		jail_seterr(err, "the path of " GVISOR_INIT " is too long");
		return -1;
	}
	if (access(path, X_OK) < 0)
	{
		jail_seterr(err, "%s: %s (installed beside sandbox-jail)", path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The process: sandbox-gvisor-init as gVisor's root with the three
 * capabilities it needs to become the run's uid (and none after), the
 * payload's command line and environment, the rlimits a namespaced
 * payload gets (RLIMIT_NPROC as well: gVisor's tasks are not host
 * processes, the host's pids cgroup counts runsc's threads).
 */
static void
gvisor_spec_process(Spec *s, const JailChildArgs *a, uid_t uid, gid_t gid)
{
	const JailOptions *o = a->opts;
	char *const *argv = jail_payload_argv(o);
	char *const *env = jail_payload_env(a);
	uint64_t	cpu_s = jail_rlimit_cpu_s(o->cpu_ms, false);
	static const char caps[] = "[\"CAP_SETUID\", \"CAP_SETGID\", \"CAP_SETPCAP\"]";

	spec_fmt(s, "{\n \"ociVersion\": \"1.0.0\",\n \"process\": {\n  \"user\": {\"uid\": 0, \"gid\": 0},\n"
			 "  \"args\": [\"/sandbox/.init\", \"%u\", \"%u\", \"" GVISOR_STATUS "/status\"",
			 (unsigned) uid, (unsigned) gid);
	for (int i = 0; argv[i]; i++)
	{
		spec_raw(s, ", ", 2);
		spec_str(s, argv[i]);
	}
	spec_raw(s, "],\n  \"env\": [", 13);
	for (int i = 0; env && env[i]; i++)
	{
		if (i)
			spec_raw(s, ", ", 2);
		spec_str(s, env[i]);
	}
	spec_fmt(s, "],\n  \"cwd\": \"/workspace\",\n  \"noNewPrivileges\": true,\n"
			 "  \"capabilities\": {\"bounding\": %s, \"effective\": %s, \"permitted\": %s},\n",
			 caps, caps, caps);
	spec_fmt(s, "  \"rlimits\": [{\"type\": \"RLIMIT_CORE\", \"hard\": 0, \"soft\": 0},"
			 " {\"type\": \"RLIMIT_NOFILE\", \"hard\": 1024, \"soft\": 1024},"
			 " {\"type\": \"RLIMIT_MSGQUEUE\", \"hard\": 0, \"soft\": 0},"
			 " {\"type\": \"RLIMIT_CPU\", \"hard\": %llu, \"soft\": %llu},"
			 " {\"type\": \"RLIMIT_NPROC\", \"hard\": %llu, \"soft\": %llu}",
			 (unsigned long long) cpu_s + 1, (unsigned long long) cpu_s,
			 (unsigned long long) o->pids, (unsigned long long) o->pids);
	if (o->file_size > 0)
		spec_fmt(s, ", {\"type\": \"RLIMIT_FSIZE\", \"hard\": %llu, \"soft\": %llu}",
				 (unsigned long long) o->file_size, (unsigned long long) o->file_size);
	spec_raw(s, "]\n },\n", 6);
}

/*
 * The mounts: the namespaced root's layout (rootfs.c) as spec entries.
 * gVisor brings its own /proc, /dev (null, zero, full, random, urandom,
 * shm, pts) and /sys.
 */
static int
gvisor_spec_mounts(Spec *s, const JailOptions *o, const char *init, char *err)
{
	char		opts[128];
	char		dst[PATH_MAX];

	spec_raw(s, " \"mounts\": [", 12);
	spec_mount(s, "/proc", "proc", "proc", "nosuid,nodev,noexec");
	for (int i = 0; jail_rootfs_sysdirs[i]; i++)
		if (gvisor_system_path(s, jail_rootfs_sysdirs[i], err) < 0)
			return -1;
	for (int i = 0; jail_rootfs_etc_files[i]; i++)
		if (gvisor_system_path(s, jail_rootfs_etc_files[i], err) < 0)
			return -1;
	installer_spec = s;
	if (jail_installers_each(gvisor_hide_installer, err) < 0)
		return -1;
	snprintf(opts, sizeof(opts), "nosuid,nodev,mode=1777,size=%llu",
			 (unsigned long long) o->tmp_size);
	spec_mount(s, "/tmp", "tmpfs", "tmpfs", opts);
	spec_mount(s, "/workspace", "bind", GVISOR_DIR "/ws", "rbind,rw,nosuid,nodev");
	spec_mount(s, "/sandbox", "bind", GVISOR_DIR "/sandbox", "rbind,ro,nosuid,nodev");
	spec_mount(s, "/sandbox/.init", "bind", init, "bind,ro,nosuid,nodev");
	spec_mount(s, GVISOR_STATUS, "bind", GVISOR_DIR "/status", "rbind,rw,nosuid,nodev,noexec");
	for (int i = 0; i < o->nbinds; i++)
	{
		struct stat st;

		snprintf(dst, sizeof(dst), GVISOR_DIR "/rootfs%s", o->binds[i].dst);
		if (stat(o->binds[i].src, &st) < 0)
		{
			jail_seterr(err, "--ro-bind %s: %s", o->binds[i].src, strerror(errno));
			return -1;
		}
		if (S_ISDIR(st.st_mode) ? mkdirs(dst, err) < 0 : touch(dst, err) < 0)
			return -1;
		spec_mount(s, o->binds[i].dst, "bind", o->binds[i].src, "rbind,ro,nosuid,nodev");
	}
	spec_raw(s, "\n ],\n", 5);
	return 0;
}

/* config.json: process, root, mounts, namespaces; no resources (our cgroup). */
static int
gvisor_write_spec(const JailChildArgs *a, uid_t uid, gid_t gid, const char *init, char *err)
{
	Spec		s = {0};
	int			rc;

	spec_raw(&s, "", 0);
	gvisor_spec_process(&s, a, uid, gid);
	spec_raw(&s, " \"root\": {\"path\": \"" GVISOR_DIR "/rootfs\", \"readonly\": true},\n"
			 " \"hostname\": \"sandbox\",\n",
			 strlen(" \"root\": {\"path\": \"" GVISOR_DIR "/rootfs\", \"readonly\": true},\n"
					" \"hostname\": \"sandbox\",\n"));
	if (gvisor_spec_mounts(&s, a->opts, init, err) < 0)
	{
		free(s.buf);
		return -1;
	}
	/*
	 * With egress, gVisor's sockets are our network namespace's (loopback
	 * and the proxy's socket only): no network namespace of its own.
	 */
	spec_fmt(&s, " \"linux\": {\"namespaces\": [{\"type\": \"pid\"},%s"
			 " {\"type\": \"ipc\"}, {\"type\": \"uts\"}, {\"type\": \"mount\"}]}\n}\n",
			 a->egress ? "" : " {\"type\": \"network\"},");
	if (s.oom)
	{
		free(s.buf);
		jail_seterr(err, "the OCI spec does not fit in memory");
		return -1;
	}
	rc = jail_write_new(GVISOR_DIR "/config.json", s.buf, s.len, 0600, err);
	free(s.buf);
	return rc;
}

/*
 * The bundle's directories, the code, the generated /etc, the installer
 * stub, the egress files, and the workspace bound from a descriptor.
 */
static int
gvisor_bundle(const JailChildArgs *a, char *err)
{
	const JailOptions *o = a->opts;
	char		path[PATH_MAX];
	char		buf[64];
	int			wsfd;

	snprintf(buf, sizeof(buf), "mode=0700,size=%llu",
			 (unsigned long long) (a->code_len + 16 * 1024 * 1024));
	/* our pid namespace's /proc (runsc re-executes /proc/self/exe) */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
		(mkdir(GVISOR_DIR, 0700) < 0 && errno != EEXIST) ||
		mount("tmpfs", GVISOR_DIR, "tmpfs", MS_NOSUID | MS_NODEV, buf) < 0)
	{
		jail_seterr(err, "the bundle's tmpfs on " GVISOR_DIR ": %s", strerror(errno));
		return -1;
	}
	if (mkdir(GVISOR_DIR "/rootfs", 0755) < 0 || mkdir(GVISOR_DIR "/sandbox", 0755) < 0 ||
		mkdir(GVISOR_DIR "/status", 0700) < 0 || mkdir(GVISOR_DIR "/state", 0700) < 0 ||
		mkdir(GVISOR_DIR "/ws", 0755) < 0 || mkdir(GVISOR_DIR "/src", 0700) < 0 ||
		mkdir(GVISOR_DIR "/rootfs/workspace", 0755) < 0 ||
		mkdir(GVISOR_DIR "/rootfs/tmp", 01777) < 0 || mkdir(GVISOR_DIR "/rootfs/sandbox", 0755) < 0 ||
		mkdir(GVISOR_DIR "/rootfs/run", 0755) < 0 || mkdir(GVISOR_DIR "/rootfs" GVISOR_STATUS, 0700) < 0 ||
		mkdir(GVISOR_DIR "/rootfs/proc", 0555) < 0)
	{
		jail_seterr(err, "the bundle's directories: %s", strerror(errno));
		return -1;
	}
	if (jail_rootfs_write_etc(GVISOR_DIR "/rootfs/etc", err) < 0 ||
		jail_write_new(GVISOR_DIR "/rootfs" JAIL_INSTALLER_STUB, jail_rootfs_installer_stub,
					   strlen(jail_rootfs_installer_stub), 0555, err) < 0 ||
		touch(GVISOR_DIR "/sandbox/.init", err) < 0)
		return -1;
	if (o->language != LANG_EXEC)
	{
		snprintf(path, sizeof(path), GVISOR_DIR "/sandbox/%s", code_name(o->language));
		if (jail_write_new(path, a->code, a->code_len, 0444, err) < 0)
			return -1;
	}
	if (jail_egress_write_files(a, GVISOR_DIR, err) < 0)
		return -1;

	/* the workspace: the directory itself, never a symlink in its place */
	wsfd = open(o->workspace, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (wsfd < 0)
	{
		jail_seterr(err, "workspace %s: %s", o->workspace, strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", wsfd);
	if (mount(path, GVISOR_DIR "/ws", NULL, MS_BIND, NULL) < 0)
	{
		jail_seterr(err, "bind the workspace: %s", strerror(errno));
		close(wsfd);
		return -1;
	}
	close(wsfd);
	return 0;
}

/*
 * runsc's process: stdin /dev/null, the run's stdout and stderr; the
 * capabilities a root process has that runsc never uses dropped from its
 * bounding set first (it keeps what it needs to build its own sandbox:
 * namespaces, chroot, ptrace, setuid, mounts).
 */
static void
gvisor_exec_runsc(const JailChildArgs *a, const char *runsc)
{
	static const int drop[] = {
		CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_BOOT, CAP_SYS_TIME, CAP_SYS_PACCT,
		CAP_SYS_TTY_CONFIG, CAP_MKNOD, CAP_LEASE, CAP_AUDIT_WRITE, CAP_AUDIT_CONTROL,
		CAP_MAC_OVERRIDE, CAP_MAC_ADMIN, CAP_SYSLOG, CAP_WAKE_ALARM, CAP_BLOCK_SUSPEND,
		CAP_AUDIT_READ, CAP_LINUX_IMMUTABLE, CAP_NET_BROADCAST, CAP_NET_RAW,
	};
	char	   *argv[16];
	int			n = 0;
	int			null = open("/dev/null", O_RDONLY);

	if (null < 0 || dup2(null, 0) < 0 || dup2(a->out_fd, 1) < 0 || dup2(a->errout_fd, 2) < 0)
		_exit(GVISOR_INIT_SETUP_FAILED + 1);
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
		(void) prctl(PR_CAPBSET_DROP, drop[i], 0, 0, 0);
	argv[n++] = (char *) runsc;
	argv[n++] = "--root=" GVISOR_DIR "/state";
	argv[n++] = "--platform=ptrace";
	argv[n++] = a->egress ? "--network=host" : "--network=none";
	argv[n++] = "--log=" GVISOR_DIR "/runsc.log";
	argv[n++] = "--ignore-cgroups";	/* it stays in the run's, ours */
	argv[n++] = "run";
	argv[n++] = "--bundle";
	argv[n++] = GVISOR_DIR;
	argv[n++] = "sandbox";
	argv[n] = NULL;
	execve(runsc, argv, (char *[]) {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL});
	_exit(GVISOR_INIT_SETUP_FAILED + 2);
}

/* The last bytes of runsc's log (its reason when it failed), or "". */
static void
gvisor_log_tail(char *out, size_t len)
{
	char		buf[GVISOR_LOG_TAIL + 1];
	int			fd = open(GVISOR_DIR "/runsc.log", O_RDONLY | O_CLOEXEC);
	off_t		size;
	ssize_t		n = 0;

	out[0] = '\0';
	if (fd < 0)
		return;
	size = lseek(fd, 0, SEEK_END);
	if (size > GVISOR_LOG_TAIL)
		lseek(fd, size - GVISOR_LOG_TAIL, SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, GVISOR_LOG_TAIL);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	snprintf(out, len, "%s", buf);
}

/* The payload's wait status as sandbox-gvisor-init wrote it, or false. */
static bool
gvisor_read_status(int *status)
{
	char		buf[32];
	char	   *end;
	long		v;
	int			fd = open(GVISOR_DIR "/status/status", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t		n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	errno = 0;
	v = strtol(buf, &end, 10);
	if (errno || end == buf || *end != '\n' || v < 0 || v > 0xffff)
		return false;
	*status = (int) v;
	return true;
}

static void gvisor_fail(const JailChildArgs *a, const char *msg) __attribute__((noreturn));

static void
gvisor_fail(const JailChildArgs *a, const char *msg)
{
	jail_child_fail(a, msg);
}

/* Only the descriptors of the run: the pipes, the egress socket. */
static void
gvisor_close_inherited(const JailChildArgs *a)
{
	int			keep[] = {a->go_fd, a->err_fd, a->status_fd, a->out_fd,
		a->errout_fd, a->lifeline_fd, a->egress_fd, jail_image_fd(false), jail_image_fd(true)};
	int			max = (int) sysconf(_SC_OPEN_MAX);

	if (max < 0 || max > 65536)
		max = 65536;
	for (int fd = 3; fd < max; fd++)
	{
		bool		kept = false;

		for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
			kept |= keep[i] == fd;
		if (!kept)
			close(fd);
	}
}

/*
 * A workspace root owns (a runner host that runs as root, as the gvisor
 * class needs) is given to the payload's uid (nobody, as jail_outer_ids
 * decides for a namespaced run): gVisor checks permissions against the
 * host's owners, and the payload must write its workspace.  Everything
 * root owns in it is chowned, walked by descriptors (O_NOFOLLOW: a symlink
 * is chowned itself, never followed; no run is in the workspace now).
 * Bounded by depth and by the entry cap.
 */
static int
gvisor_give_tree(int dirfd, uid_t uid, gid_t gid, int depth, uint64_t *left, char *err)
{
	DIR		   *dir;
	struct dirent *e;
	int			rc = 0;

	if (depth > 64)
	{
		jail_seterr(err, "the workspace is deeper than 64 directories");
		return -1;
	}
	dir = fdopendir(dirfd);
	if (!dir)
	{
		close(dirfd);
		jail_seterr(err, "read the workspace: %s", strerror(errno));
		return -1;
	}
	while (rc == 0 && (e = readdir(dir)) != NULL)
	{
		struct stat st;
		int			sub;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (*left == 0)
		{
			jail_seterr(err, "the workspace has too many entries to give to the payload");
			rc = -1;
			break;
		}
		(*left)--;
		if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (st.st_uid == 0 &&
			fchownat(dirfd, e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		{
			jail_seterr(err, "chown %s in the workspace: %s", e->d_name, strerror(errno));
			rc = -1;
			break;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		sub = openat(dirfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0)
			rc = gvisor_give_tree(sub, uid, gid, depth + 1, left, err);
	}
	closedir(dir);
	return rc;
}

static int
gvisor_give_workspace(const JailOptions *o, uid_t uid, gid_t gid, char *err)
{
	int			fd = open(o->workspace, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	uint64_t	left = o->workspace_entries;

	if (fd < 0)
	{
		jail_seterr(err, "workspace %s: %s", o->workspace, strerror(errno));
		return -1;
	}
	if (fchown(fd, uid, gid) < 0)
	{
		jail_seterr(err, "chown the workspace: %s", strerror(errno));
		close(fd);
		return -1;
	}
	return gvisor_give_tree(fd, uid, gid, 0, &left, err);
}

/*
 * The cloned child (see the header): go bytes, bundle, runsc, report.
 * Returns only into _exit.
 */
static int
jail_gvisor_child_main(void *arg)
{
	JailChildArgs *a = arg;
	char		err[JAIL_ERRLEN] = "";
	char		init[PATH_MAX];
	char		go;
	const char *runsc = a->opts->runsc ? a->opts->runsc : JAIL_RUNSC_DEFAULT;
	struct stat st;
	uid_t		uid = 65534;
	gid_t		gid = 65534;
	pid_t		pid;
	int			wstatus = 0;
	JailInitReport rep;

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	gvisor_close_inherited(a);
	/* the bundle's modes are its own, whatever the caller's umask (077: a runner's) */
	umask(022);
	/* should the memory limit strike, the kernel picks us or runsc: never the jail */
	(void) jail_write_file("/proc/self/oom_score_adj", "1000");

	if (read(a->go_fd, &go, 1) != 1)
		_exit(1);
	if (go == JAIL_GO_NOCGROUP)
		gvisor_fail(a, "the gvisor class needs a cgroup (runsc runs inside the run's; docs/jail.md)");

	/* the workspace's owner is the payload's uid, as jail_outer_ids decides */
	if (lstat(a->opts->workspace, &st) == 0 && st.st_uid != 0)
	{
		uid = st.st_uid;
		gid = st.st_gid != 0 ? st.st_gid : 65534;
	}
	else if (gvisor_give_workspace(a->opts, uid, gid, err) < 0)
		gvisor_fail(a, err);
	if (jail_loopback_up(err) < 0)
		gvisor_fail(a, err);
	if (a->egress_fd >= 0)
	{
		if (jail_egress_listen(a->egress_fd, err) < 0)
			gvisor_fail(a, err);
		close(a->egress_fd);
		a->egress_fd = -1;
	}
	/* the image's root opened again in our mount namespace (bind sources) */
	if (init_path(init, sizeof(init), err) < 0 || jail_image_enter(err) < 0 ||
		gvisor_bundle(a, err) < 0 ||
		gvisor_write_spec(a, uid, gid, init, err) < 0)
		gvisor_fail(a, err);

	/* JAIL_GO_RUN: in the cgroup, the workspace measured */
	if (read(a->go_fd, &go, 1) != 1 || go != JAIL_GO_RUN)
		_exit(1);
	pid = fork();
	if (pid < 0)
	{
		jail_seterr(err, "fork runsc: %s", strerror(errno));
		gvisor_fail(a, err);
	}
	if (pid == 0)
		gvisor_exec_runsc(a, runsc);
	close(a->out_fd);
	close(a->errout_fd);

	/* we are the pid namespace's init: reap everything until runsc ends */
	for (;;)
	{
		int			s;
		pid_t		w = wait(&s);

		if (w == pid)
		{
			wstatus = s;
			break;
		}
		if (w < 0 && errno != EINTR)
			break;
	}

	memset(&rep, 0, sizeof(rep));
	if (gvisor_read_status(&rep.status))
	{
		rep.alone = 1;
		getrusage(RUSAGE_CHILDREN, &rep.ru);
		if (write(a->status_fd, &rep, sizeof(rep)) != sizeof(rep))
			_exit(1);
		_exit(0);
	}

	/*
	 * No status: runsc failed, or was killed (the cgroup's OOM killer
	 * took the sentry: the host side sees the OOM and ignores this text).
	 */
	{
		char		tail[GVISOR_LOG_TAIL + 1];

		gvisor_log_tail(tail, sizeof(tail));
		if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == GVISOR_INIT_SETUP_FAILED + 2)
			jail_seterr(err, "runsc: cannot execute %s", runsc);
		else
			jail_seterr(err, "runsc ended without the payload's status (%s %d)%s%s",
						WIFSIGNALED(wstatus) ? "signal" : "exit",
						WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus),
						tail[0] ? ": " : "", tail);
		gvisor_fail(a, err);
	}
}

/*
 * Clone the gvisor run's child: new pid, mount, network, ipc and uts
 * namespaces, no user namespace (runsc needs the host's root), born in
 * the run's cgroup where v2 allows it (cgroup_fd), else moved there by
 * the caller before the last go byte.
 */
pid_t
jail_gvisor_spawn(JailChildArgs *args, int *pidfd, int cgroup_fd, bool *born_in)
{
	uint64_t	flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC |
		CLONE_NEWUTS | CLONE_PIDFD;
	struct clone_args ca;
	pid_t		pid;

	*born_in = false;
	memset(&ca, 0, sizeof(ca));
	ca.pidfd = (uint64_t) (uintptr_t) pidfd;
	ca.exit_signal = SIGCHLD;
	ca.flags = flags;
	if (cgroup_fd >= 0)
	{
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t) cgroup_fd;
	}
	pid = syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0 && cgroup_fd >= 0)
	{
		ca.flags = flags;
		ca.cgroup = 0;
		pid = syscall(SYS_clone3, &ca, sizeof(ca));
	}
	else if (pid > 0 && cgroup_fd >= 0)
		*born_in = true;
	if (pid == 0)
		_exit(jail_gvisor_child_main(args));
	return pid;
}
