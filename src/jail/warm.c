/*-------------------------------------------------------------------------
 *
 * warm.c
 *	  A warm interpreter: Python or Node started by a prespawned sandbox's
 *	  payload process before its request (docs/jail.md, "Warm
 *	  interpreters"), and what is special about its sandbox.
 *
 * The interpreter is exec'd exactly as a cold run execs it (the same
 * argv, /usr/bin/python3 -I -u /sandbox/main.py or /usr/bin/node
 * /sandbox/main.js, the same environment), after the same confinement
 * (jail_payload_confine in sandbox.c: uid, namespaces, cgroup, fixed
 * rlimits, capabilities, no_new_privs, then seccomp, before the exec and
 * so before any import).  What differs is only how it waits:
 *	  Python  the sandbox's /etc/python3.11/sitecustomize.py (which the
 *			  interpreter imports at start, before it opens its script)
 *			  is, until the request, the host's one followed by our
 *			  bootstrap: it imports the configured modules, says "ready"
 *			  and waits; at the go it moves the run's stdout and stderr
 *			  onto 1 and 2 (/dev/null until then: nothing printed before
 *			  the request reaches the run), closes its descriptors and
 *			  chdirs to /workspace.  The interpreter then opens
 *			  /sandbox/main.py, written by init after the request, and
 *			  runs it as it runs any script: __main__, __file__, argv,
 *			  tracebacks, sys.exit, signals are a cold run's.  Init
 *			  removes the bind after the request.
 *	  Node	  no such hook exists, so /sandbox/main.js is, until the
 *			  request, the bootstrap: it says "ready", waits, closes its
 *			  descriptors, chdirs, and loads the new /sandbox/main.js as
 *			  the main module (Module.runMain, its own cache entry
 *			  dropped first).
 * The descriptors it waits on are at fixed numbers (JAIL_WARM_FD_*, jail.h)
 * above any the interpreter opens itself, so that once they are closed
 * its descriptor table is a cold run's.  The request's rlimits, which a
 * cold payload sets before its exec, are set by init (jail_warm_rlimits),
 * counting the CPU the start used.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/mount.h>

#include "jail.h"

/* Where Python looks for sitecustomize (Debian: /usr/lib/python3.11's links here) */
#define WARM_PY_HOOK		"/etc/python3.11/sitecustomize.py"
#define WARM_PY_BOOT		"/.warm-sitecustomize.py"	/* root tmpfs, gone at the request */
#define WARM_JS_MAIN		"/sandbox/main.js"

/*
 * The bootstrap appended to the host's sitecustomize.  It runs inside the
 * import of sitecustomize, so it leaves nothing in the module but what
 * the host's own code defines.  Module names were checked by
 * jail_warm_check_modules (identifiers and dots only).
 */
static const char py_boot[] =
	"\n# sandbox-jail: a warm interpreter's start (docs/jail.md, \"Warm interpreters\")\n"
	"def _sandbox_warm(modules, companions):\n"
	"    import os, sys\n"
	"    for name in modules:\n"
	"        try:\n"
	"            __import__(name)\n"
	"        except BaseException as e:\n"
	"            msg = 'E' + 'import %s: %s: %s' % (name, type(e).__name__, e)\n"
	"            os.write(1000, msg[:400].encode('utf-8', 'replace'))\n"
	"            os._exit(70)\n"
	"    for name in companions:\n"
	"        try:\n"
	"            __import__(name)\n"
	"        except Exception:\n"
	"            pass  # another version of its package: not ours to insist\n"
	"    keep = None\n"
	"    if modules:\n"
	"        # what the imports made is never garbage: out of every collection,\n"
	"        # the last ones at exit too (~100 ms of CPU with pandas)\n"
	"        import gc\n"
	"        keep = [None]\n"
	"        keep[0] = keep  # a frozen cycle: never freed\n"
	"        gc.collect()\n"
	"        gc.freeze()\n"
	"    w = sys.modules.get('warnings')\n"
	"    if w is not None:\n"
	"        w._filters_mutated()  # what the start warned of, the run is warned of again\n"
	"    os.write(1000, b'R')  # kept open while it waits: EOF says it is gone\n"
	"    if os.read(1001, 1) != b'c' or os.read(1002, 1) != b'c':\n"
	"        os._exit(1)\n"
	"    os.close(1000)\n"
	"    os.close(1001)\n"
	"    os.close(1002)\n"
	"    os.dup2(1003, 1)\n"
	"    os.dup2(1004, 2)\n"
	"    os.close(1003)\n"
	"    os.close(1004)\n"
	"    os.chdir('/workspace')\n"
	"    if keep is not None:\n"
	"        # at exit, after the run's own atexit functions, the modules that\n"
	"        # were there before the run leave sys.modules for keep: the\n"
	"        # interpreter's teardown then skips them (~20 ms with pandas);\n"
	"        # the run's own modules and __main__ are torn down as always\n"
	"        import atexit\n"
	"        had = dict(sys.modules)\n"
	"        for name in ('__main__', 'sys', 'builtins'):\n"
	"            had.pop(name, None)\n"
	"        def _sandbox_keep(had=had, keep=keep, modules=sys.modules):\n"
	"            for name, mod in had.items():\n"
	"                if modules.get(name) is mod:\n"
	"                    keep.append(mod)\n"
	"                    del modules[name]\n"
	"        atexit.register(_sandbox_keep)\n"
	"_sandbox_warm((@MODULES@), (@COMPANIONS@))\n"
	"del _sandbox_warm\n";

static const char js_boot[] =
	"'use strict';\n"
	"// sandbox-jail: a warm interpreter's start (docs/jail.md, \"Warm interpreters\")\n"
	"{\n"
	"  const fs = require('fs');\n"
	"  const b = Buffer.alloc(1);\n"
	"  fs.writeSync(1000, 'R');\n"
	"  if (fs.readSync(1001, b, 0, 1, null) !== 1 || fs.readSync(1002, b, 0, 1, null) !== 1)\n"
	"    process.reallyExit(1);\n"
	"  fs.closeSync(1000);\n"
	"  fs.closeSync(1001);\n"
	"  fs.closeSync(1002);\n"
	"  process.chdir('/workspace');\n"
	"  const Module = require('module');\n"
	"  delete Module._cache[__filename];\n"
	"  Module.runMain();\n"
	"}\n";

/*
 * Submodules that everyday operations of a preloaded package import on
 * their first use, found by running such operations after the package's
 * import and listing what sys.modules gained (docs/jail.md lists them):
 * imported with it (if there: another version may lack one), so that a
 * run's first DataFrame repr does not pay for an import.  Imports only:
 * nothing of any operation runs before the request.
 */
static const char *const companions[][2] = {
	{"pandas", "pandas.io.formats.string"},	/* repr of a DataFrame or Series, to_string */
	{"pandas", "pandas.io.formats.csvs"},	/* to_csv */
	{"pandas", "pandas.io.formats.html"},	/* to_html, notebooks' repr */
	{"pandas", "pandas.core.reshape.reshape"},	/* stack, unstack, pivot_table */
	{"pandas", "pandas.core.resample"},	/* resample */
	{"requests", "netrc"},		/* the first request reads ~/.netrc */
};

/* Is name one of the entries of the comma-separated list? */
static bool
listed(const char *list, const char *name)
{
	size_t		n = strlen(name);

	for (const char *p = list; *p;)
	{
		size_t		w = strcspn(p, ",");

		if (w == n && strncmp(p, name, n) == 0)
			return true;
		p += w;
		if (*p == ',')
			p++;
	}
	return false;
}

/* The companions of the listed modules, as "a,b.c" */
static void
companions_of(const char *list, char *out, size_t len)
{
	size_t		n = 0;

	out[0] = '\0';
	for (size_t i = 0; i < sizeof(companions) / sizeof(companions[0]); i++)
		if (listed(list, companions[i][0]) && n + strlen(companions[i][1]) + 2 < len)
			n += snprintf(out + n, len - n, "%s%s", n ? "," : "", companions[i][1]);
}

/* "a,b.c" as the Python tuple body "'a','b.c'," */
static void
modules_tuple(const char *list, char *out, size_t len)
{
	size_t		n = 0;

	out[0] = '\0';
	for (const char *p = list; *p && n + 8 < len;)
	{
		size_t		w = strcspn(p, ",");

		if (w > 0 && n + w + 4 < len)
			n += snprintf(out + n, len - n, "'%.*s',", (int) w, p);
		p += w;
		if (*p == ',')
			p++;
	}
}

/* The bootstrap file at path: head, then body (read-only, new). */
static int
write_file(const char *path, const char *head, size_t head_len, const char *body,
		   char *err)
{
	const struct iovec parts[] = {
		{.iov_base = (void *) head,.iov_len = head_len},
		{.iov_base = (void *) body,.iov_len = strlen(body)},
	};

	return jail_write_new_parts(path, parts, 2, 0444, err);
}

/*
 * In the sandbox, its root entered ahead and still writable (jail_served_init,
 * before the payload's process is forked): the bootstrap in place.
 */
int
jail_warm_root(const JailWarm *w, char *err)
{
	if (w->language == LANG_NODE)
		return write_file(WARM_JS_MAIN, "", 0, js_boot, err);

	{
		static char host[64 * 1024];
		static char boot[sizeof(py_boot) + JAIL_WARM_MODULES_MAX * 2 + 1024];
		char		tuple[JAIL_WARM_MODULES_MAX * 2];
		char		comp[512];
		char		comp_tuple[1024];
		struct mount_attr attr = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
		ssize_t		n;
		int			fd;

		/* the host's own hook runs first, as in a cold run */
		fd = open(WARM_PY_HOOK, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
		{
			jail_seterr(err, "warm python needs %s in the sandbox: %s", WARM_PY_HOOK, strerror(errno));
			return -1;
		}
		n = read(fd, host, sizeof(host) - 1);
		close(fd);
		if (n < 0 || n == (ssize_t) sizeof(host) - 1)
		{
			jail_seterr(err, "read %s: %s", WARM_PY_HOOK, n < 0 ? strerror(errno) : "too large");
			return -1;
		}
		modules_tuple(w->modules, tuple, sizeof(tuple));
		companions_of(w->modules, comp, sizeof(comp));
		modules_tuple(comp, comp_tuple, sizeof(comp_tuple));
		{
			const char *at = strstr(py_boot, "@MODULES@");
			const char *at2 = strstr(py_boot, "@COMPANIONS@");

			snprintf(boot, sizeof(boot), "%.*s%s%.*s%s%s", (int) (at - py_boot), py_boot,
					 tuple, (int) (at2 - at - strlen("@MODULES@")), at + strlen("@MODULES@"),
					 comp_tuple, at2 + strlen("@COMPANIONS@"));
		}
		if (write_file(WARM_PY_BOOT, host, n, boot, err) < 0)
			return -1;
		if (mount(WARM_PY_BOOT, WARM_PY_HOOK, NULL, MS_BIND, NULL) < 0 ||
			syscall(SYS_mount_setattr, AT_FDCWD, WARM_PY_HOOK, 0, &attr, sizeof(attr)) < 0)
		{
			jail_seterr(err, "bind %s: %s", WARM_PY_HOOK, strerror(errno));
			return -1;
		}
		return 0;
	}
}

/*
 * In init, after the request and before the root is completed: nothing of
 * the bootstrap is left where the run can see it (the interpreter read
 * it long ago).  Node's main.js makes room for the run's.
 */
int
jail_warm_unroot(const JailWarm *w, char *err)
{
	if (w->language == LANG_NODE)
	{
		if (unlink(WARM_JS_MAIN) < 0)
		{
			jail_seterr(err, "unlink %s: %s", WARM_JS_MAIN, strerror(errno));
			return -1;
		}
		return 0;
	}
	if (umount2(WARM_PY_HOOK, MNT_DETACH) < 0 || unlink(WARM_PY_BOOT) < 0)
	{
		jail_seterr(err, "remove the warm bootstrap: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * In the payload's process, confined (jail_payload_confine: every
 * descriptor above 2 is close-on-exec), just before the exec: the
 * descriptors the bootstrap waits on at their fixed numbers (dup2 clears
 * close-on-exec on them only).  Python's 1 and 2 point at /dev/null until
 * the go.
 */
void
jail_warm_payload_fds(int ready_fd, int init_fd, int go_fd, int out_fd,
					  int err_fd, bool python, char *err)
{
	int			devnull;

	if (dup2(ready_fd, JAIL_WARM_FD_READY) < 0 ||
		dup2(init_fd, JAIL_WARM_FD_INIT) < 0 ||
		dup2(go_fd, JAIL_WARM_FD_GO) < 0)
	{
		jail_seterr(err, "warm descriptors: %s", strerror(errno));
		return;
	}
	if (!python)
		return;
	devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (devnull < 0 ||
		dup2(out_fd, JAIL_WARM_FD_STDOUT) < 0 ||
		dup2(err_fd, JAIL_WARM_FD_STDERR) < 0 ||
		dup2(devnull, STDOUT_FILENO) < 0 ||
		dup2(devnull, STDERR_FILENO) < 0)
		jail_seterr(err, "warm descriptors: %s", strerror(errno));
}

/* The CPU a process of our pid namespace has used so far, in ms. */
static uint64_t
process_cpu_ms(pid_t pid)
{
	char		path[64];
	char		buf[1024];
	char	   *p;
	unsigned long long utime = 0,
				stime = 0;
	long		hz = sysconf(_SC_CLK_TCK);
	int			fd;
	ssize_t		n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* after "(comm)": state is field 3, utime 14, stime 15 */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
					 &utime, &stime) != 2 || hz <= 0)
		return 0;
	return (utime + stime) * 1000ULL / (unsigned long long) hz;
}

/*
 * In init, after the request: the rlimits a cold payload sets on itself
 * before its exec (set_rlimits in sandbox.c, RLIMITS_REQUEST), set on the
 * warm interpreter with prlimit (same uid, same user namespace).  Its
 * RLIMIT_CPU counts all the CPU the process ever used, so the start's
 * share (*pre_cpu_ms) is added: the run gets the CPU it asked for.  As in
 * jail_set_rlimits, a hard limit the jail itself inherited lower stays.
 */
int
jail_warm_rlimits(pid_t payload, const JailOptions *o, bool cgroup_none,
				  uint64_t *pre_cpu_ms, char *err)
{
	JailRlimit	lim[3];
	int			n = 0;
	rlim_t		cpu_s;

	*pre_cpu_ms = process_cpu_ms(payload);
	cpu_s = jail_rlimit_cpu_s(*pre_cpu_ms + o->cpu_ms, cgroup_none);
	lim[n++] = (JailRlimit) {RLIMIT_CPU, cpu_s, cpu_s + 1, "CPU"};
	if (o->file_size > 0)
		lim[n++] = (JailRlimit) {RLIMIT_FSIZE, o->file_size, o->file_size, "FSIZE"};
	if (cgroup_none)
		lim[n++] = (JailRlimit) {RLIMIT_NPROC, o->pids, o->pids, "NPROC"};

	for (int i = 0; i < n; i++)
	{
		struct rlimit rl = {lim[i].soft, lim[i].hard};
		struct rlimit cur;

		if (prlimit(payload, lim[i].res, &rl, NULL) == 0)
			continue;
		if (errno == EPERM && prlimit(payload, lim[i].res, NULL, &cur) == 0 &&
			cur.rlim_max != RLIM_INFINITY && rl.rlim_max > cur.rlim_max)
		{
			rl.rlim_max = cur.rlim_max;
			if (rl.rlim_cur > rl.rlim_max)
				rl.rlim_cur = rl.rlim_max;
			if (prlimit(payload, lim[i].res, &rl, NULL) == 0)
				continue;
		}
		jail_seterr(err, "setrlimit %s of the warm interpreter: %s", lim[i].name, strerror(errno));
		return -1;
	}
	return 0;
}
