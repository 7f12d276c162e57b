/*-------------------------------------------------------------------------
 *
 * cgroup.c
 *	  The per-run cgroup: memory (with swap), pids and CPU accounting on
 *	  cgroup v2 or, where that is what the host offers, cgroup v1.
 *
 * Each run gets its own child cgroup "run-<jail pid>" under a delegated
 * parent (created by scripts/jail-host-setup.sh and owned by the account
 * that runs the jail), so limits and counters belong to this run only and
 * the directory can be removed afterwards.  Every function returns early
 * when mode is CGROUP_NONE.  Files are opened with O_NOFOLLOW: the parent
 * is writable by the jail's account, never by the payload, but a symlink
 * there is still not something to write through.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>

#include "jail.h"

#define V2_DEFAULT_NAME "sandbox_ext"

/* Mount points of the hierarchies we use, from /proc/self/mountinfo. */
typedef struct CgroupMounts
{
	char		v2[256];
	char		memory[256];
	char		pids[256];
	char		cpuacct[256];
} CgroupMounts;

static bool
has_opt(const char *opts, const char *want)
{
	size_t		n = strlen(want);
	const char *p = opts;

	while ((p = strstr(p, want)) != NULL)
	{
		if ((p == opts || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
		p += n;
	}
	return false;
}

static void
find_mounts(CgroupMounts *m)
{
	FILE	   *f;
	char		line[1024];

	memset(m, 0, sizeof(*m));
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
	{
		char		mnt[256];
		char		fstype[64];
		char		superopts[256];
		char	   *dash = strstr(line, " - ");

		/* fields: id parent maj:min root mountpoint opts ... - fstype src superopts */
		if (!dash ||
			sscanf(line, "%*s %*s %*s %*s %255s", mnt) != 1 ||
			sscanf(dash + 3, "%63s %*s %255s", fstype, superopts) != 2)
			continue;
		if (strcmp(fstype, "cgroup2") == 0 && !m->v2[0])
			strcpy(m->v2, mnt);
		else if (strcmp(fstype, "cgroup") == 0)
		{
			if (has_opt(superopts, "memory") && !m->memory[0])
				strcpy(m->memory, mnt);
			if (has_opt(superopts, "pids") && !m->pids[0])
				strcpy(m->pids, mnt);
			if (has_opt(superopts, "cpuacct") && !m->cpuacct[0])
				strcpy(m->cpuacct, mnt);
		}
	}
	fclose(f);
}

static bool
writable_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
		access(path, W_OK | X_OK) == 0;
}

/*
 * Our own cgroup on the v2 hierarchy, relative to its mount ("/" for the
 * root), from the "0::PATH" line of /proc/self/cgroup; "" if there is none.
 */
static void
own_v2_cgroup(char *out, size_t len)
{
	FILE	   *f = fopen("/proc/self/cgroup", "re");
	char		line[600];

	out[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
	{
		if (strncmp(line, "0::/", 4) == 0)
		{
			size_t		n = strcspn(line + 3, "\n");

			if (n < len)		/* longer: unknown, never truncated */
			{
				memcpy(out, line + 3, n);
				out[n] = '\0';
			}
			break;
		}
	}
	fclose(f);
}

/*
 * May this process put a child of its own into a new cgroup under dir
 * (moved there, or cloned into it)?  On v2 that takes write access to
 * cgroup.procs of the nearest common ancestor of our cgroup and the
 * destination (the kernel's "delegation containment": see cgroup-v2.rst),
 * so for an unprivileged account the delegated subtree must contain the
 * account's own processes; owning the parent directory is not enough.
 * mnt is the v2 mount, own our cgroup relative to it.  Root always may.
 */
static bool
v2_may_move_into(const char *mnt, const char *dir, const char *own)
{
	size_t		mlen = strlen(mnt);
	const char *rel;
	char		path[640];
	size_t		common = 0;

	if (strncmp(dir, mnt, mlen) != 0 || (dir[mlen] != '/' && dir[mlen] != '\0') ||
		own[0] != '/')
		return geteuid() == 0;
	rel = dir + mlen;			/* "/a/b" or "" for the mount itself */

	/* the longest common prefix of rel and own that ends at a '/' */
	for (size_t i = 0;; i++)
	{
		bool		rend = rel[i] == '\0' || rel[i] == '/';
		bool		oend = own[i] == '\0' || own[i] == '/';

		if (rend && oend)
			common = i;
		if (rel[i] == '\0' || own[i] == '\0' || rel[i] != own[i])
			break;
	}
	snprintf(path, sizeof(path), "%s%.*s/cgroup.procs", mnt, (int) common, rel);
	return access(path, W_OK) == 0;
}

/* A v2 parent is usable if we may write it and it hands down memory+pids. */
static bool
v2_parent_usable(const char *dir)
{
	char		ctl[256];
	int			dfd;
	bool		ok;

	if (!writable_dir(dir))
		return false;
	dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return false;
	/* space separated, e.g. "cpu memory pids" */
	ok = jail_read_fileat(dfd, "cgroup.subtree_control", ctl, sizeof(ctl)) >= 0 &&
		strstr(ctl, "memory") != NULL && strstr(ctl, "pids") != NULL;
	close(dfd);
	return ok;
}

static int
make_run_dir(char *out, size_t outlen, const char *parent, const char *name,
			 char *err)
{
	int			n;

	n = snprintf(out, outlen, "%s/%s", parent, name);
	if (n < 0 || (size_t) n >= outlen)
	{
		jail_seterr(err, "cgroup path too long under %s", parent);
		return -1;
	}
	/* A leftover of a killed jail with our (reused) pid: it is empty. */
	if (mkdir(out, 0755) < 0 && (errno != EEXIST || rmdir(out) < 0 ||
								 mkdir(out, 0755) < 0))
	{
		jail_seterr(err, "could not create cgroup %s: %s", out, strerror(errno));
		out[0] = '\0';
		return -1;
	}
	return 0;
}

static int
set_knob(const char *dir, const char *knob, uint64_t value, bool optional,
		 char *err)
{
	char		path[640];
	char		buf[32];

	snprintf(path, sizeof(path), "%s/%s", dir, knob);
	snprintf(buf, sizeof(buf), "%" PRIu64, value);
	if (jail_write_file(path, buf) < 0)
	{
		if (optional && errno == ENOENT)
			return 0;
		jail_seterr(err, "could not set %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The run's limits.  extra_pids: processes of ours that share the cgroup
 * (a launcher worker that watches its run from inside its slot) and must not eat
 * into the payload's allowance.
 */
int
jail_cgroup_set_limits(JailCgroup *cg, const JailOptions *opts,
					   uint64_t extra_pids, char *err)
{
	uint64_t	pids = opts->pids + extra_pids;
	bool		mem_same = cg->memory_set == opts->memory_bytes;
	bool		pids_same = cg->pids_set == pids;

	/* each cgroupfs write costs ~50-100 us on v1: skip what is set */
	if (cg->mode == CGROUP_V2)
	{
		if ((!mem_same &&
			 (set_knob(cg->v2_dir, "memory.max", opts->memory_bytes, false, err) < 0 ||
			  set_knob(cg->v2_dir, "memory.swap.max", 0, true, err) < 0)) ||
			(!pids_same && set_knob(cg->v2_dir, "pids.max", pids, false, err) < 0))
			return -1;
	}
	else if (cg->mode == CGROUP_V1)
	{
		/*
		 * memsw (memory+swap) may never be below the memory limit, so
		 * when lowering, memory goes first, and when raising, memsw: try
		 * the memory limit, then memsw, then the memory limit again.
		 * memsw is absent when swap accounting is off, and then swap is
		 * simply not limited (documented).
		 */
		if (!mem_same)
		{
			char		dummy[JAIL_ERRLEN];
			bool		first = set_knob(cg->mem_dir, "memory.limit_in_bytes",
										 opts->memory_bytes, false, dummy) == 0;

			if (set_knob(cg->mem_dir, "memory.memsw.limit_in_bytes", opts->memory_bytes, true, err) < 0 ||
				(!first && set_knob(cg->mem_dir, "memory.limit_in_bytes", opts->memory_bytes, false, err) < 0))
				return -1;
		}
		if (!pids_same && set_knob(cg->pids_dir, "pids.max", pids, false, err) < 0)
			return -1;
	}
	else
		return 0;
	cg->memory_set = opts->memory_bytes;
	cg->pids_set = pids;
	return 0;
}

/*
 * A slot made before its run: forget what the worker did in it while
 * waiting (peak memory, CPU), so the verdict is the payload's.  v2 has no
 * reset for cpu.stat; there the worker's few milliseconds stay counted.
 * v2's memory.peak is reset per open file (Linux 6.12+: a write resets
 * what later reads through the same descriptor see), so that reset is
 * done where the descriptor is opened, jail_cgroup_open_stats().
 */
void
jail_cgroup_reset_counters(const JailCgroup *cg)
{
	char		path[640];

	if (cg->mode != CGROUP_V1)
		return;
	snprintf(path, sizeof(path), "%s/memory.max_usage_in_bytes", cg->mem_dir);
	(void) jail_write_file(path, "0");
	snprintf(path, sizeof(path), "%s/memory.failcnt", cg->mem_dir);
	(void) jail_write_file(path, "0");
	if (cg->cpu_dir[0])
	{
		snprintf(path, sizeof(path), "%s/cpuacct.usage", cg->cpu_dir);
		(void) jail_write_file(path, "0");
	}
}

/*
 * A slot whose waiting interpreter's start (or whose thrown-away one) is
 * not the coming run's: peak memory, failures and CPU count from here.
 * v2's CPU counter cannot be reset: its value now becomes the base.
 */
void
jail_cgroup_counters_from_now(JailCgroup *cg)
{
	jail_cgroup_reset_counters(cg);
	jail_cgroup_open_stats(cg);
	cg->cpu_base_ms = 0;
	cg->cpu_base_ms = jail_cgroup_cpu_ms(cg);
}

static int
setup_v2(const JailOptions *opts, JailCgroup *cg, const char *parent,
		 const char *name, char *err)
{
	if (make_run_dir(cg->v2_dir, sizeof(cg->v2_dir), parent, name, err) < 0)
		return -1;
	cg->mode = CGROUP_V2;
	if (jail_cgroup_set_limits(cg, opts, 0, err) < 0)
		return -1;
	cg->v2_dirfd = open(cg->v2_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return 0;
}

static int
setup_v1(const JailOptions *opts, JailCgroup *cg, const char *mem_parent,
		 const char *pids_parent, const char *cpu_parent, const char *name,
		 char *err)
{
	cg->mode = CGROUP_V1;
	if (make_run_dir(cg->mem_dir, sizeof(cg->mem_dir), mem_parent, name, err) < 0 ||
		make_run_dir(cg->pids_dir, sizeof(cg->pids_dir), pids_parent, name, err) < 0)
		return -1;
	/* cpuacct only measures; without it CPU time comes from rusage. */
	if (cpu_parent && writable_dir(cpu_parent))
	{
		char		dummy[JAIL_ERRLEN];

		(void) make_run_dir(cg->cpu_dir, sizeof(cg->cpu_dir), cpu_parent, name, dummy);
	}
	return jail_cgroup_set_limits(cg, opts, 0, err);
}

/* The one-shot run's cgroup, "run-<jail pid>". */
int
jail_cgroup_create(const JailOptions *opts, JailCgroup *cg, char *err)
{
	char		name[32];

	snprintf(name, sizeof(name), "run-%d", (int) getpid());
	return jail_cgroup_create_named(opts, name, cg, err);
}

/*
 * Under a v1 --cgroup-parent: it names one hierarchy; the same relative
 * path is used in the memory, pids and cpuacct hierarchies.
 */
static int
create_under_v1(const JailOptions *opts, const CgroupMounts *m, const char *name,
				JailCgroup *cg, char *err)
{
	const char *parent = opts->cgroup_parent;
	const char *mounts[] = {m->memory, m->pids, m->cpuacct};
	const char *rel = NULL;
	char		mem[512],
				pids[512],
				cpu[512];

	for (int i = 0; i < 3 && !rel; i++)
	{
		size_t		n = strlen(mounts[i]);

		if (n && strncmp(parent, mounts[i], n) == 0 &&
			(parent[n] == '/' || parent[n] == '\0'))
			rel = parent + n;
	}
	if (!rel || !m->memory[0] || !m->pids[0])
	{
		jail_seterr(err, "cgroup parent %s is not under the v1 memory/pids hierarchies", parent);
		return -1;
	}
	snprintf(mem, sizeof(mem), "%s%s", m->memory, rel);
	snprintf(pids, sizeof(pids), "%s%s", m->pids, rel);
	snprintf(cpu, sizeof(cpu), "%s%s", m->cpuacct, rel);
	return setup_v1(opts, cg, mem, pids, m->cpuacct[0] ? cpu : NULL, name, err);
}

/* Under the --cgroup-parent given: v2 (if delegated to us) or v1. */
static int
create_under_parent(const JailOptions *opts, const CgroupMounts *m,
					const char *name, JailCgroup *cg, char *err)
{
	const char *parent = opts->cgroup_parent;
	struct statfs sfs;

	if (statfs(parent, &sfs) < 0)
	{
		jail_seterr(err, "cgroup parent %s: %s", parent, strerror(errno));
		return -1;
	}
	if (sfs.f_type == CGROUP2_SUPER_MAGIC)
	{
		char		own[512];

		own_v2_cgroup(own, sizeof(own));
		if (m->v2[0] && !v2_may_move_into(m->v2, parent, own))
		{
			jail_seterr(err, "cgroup parent %s is not delegated to this process "
						"(its cgroup %s is outside the delegated subtree)",
						parent, own[0] ? own : "(unknown)");
			return -1;
		}
		return setup_v2(opts, cg, parent, name, err);
	}
	if (sfs.f_type == CGROUP_SUPER_MAGIC)
		return create_under_v1(opts, m, name, cg, err);
	jail_seterr(err, "%s is not a cgroup directory", parent);
	return -1;
}

/*
 * The delegated v2 parent: the nearest "sandbox_ext" beside our own cgroup
 * or one of its ancestors (<mount>/sandbox_ext for a jail started in the
 * root cgroup; <service>/sandbox_ext for a service whose processes were
 * moved into <service>/sandbox_ext/service, jail-host-setup.sh), that we
 * may use and move our children into: into out, true.  undelegated: the
 * first usable one we may not move children into ("" if none), for the
 * message.
 */
static bool
find_v2_parent(const CgroupMounts *m, char *out, size_t outlen,
			   char *undelegated, size_t undlen)
{
	char		own[512];
	char		anc[512];

	own_v2_cgroup(own, sizeof(own));
	snprintf(anc, sizeof(anc), "%s", own[0] ? own : "/");
	for (;;)
	{
		char	   *slash;
		int			n = snprintf(out, outlen, "%s%s/%s", m->v2,
								 strcmp(anc, "/") == 0 ? "" : anc, V2_DEFAULT_NAME);

		if (n > 0 && (size_t) n < outlen && v2_parent_usable(out))
		{
			if (v2_may_move_into(m->v2, out, own))
				return true;
			if (!undelegated[0])
				snprintf(undelegated, undlen, "%s", out);
		}
		slash = strrchr(anc, '/');
		if (!slash || slash == anc)
		{
			if (strcmp(anc, "/") == 0)
				return false;
			anc[1] = '\0';
		}
		else
			*slash = '\0';
	}
}

/* Auto-detect: a delegated v2 subtree first, then v1's sandbox_ext. */
static int
create_delegated(const JailOptions *opts, const CgroupMounts *m,
				 const char *name, JailCgroup *cg, char *err)
{
	char		p1[512],
				p2[512],
				p3[512];
	char		undelegated[512] = "";

	if (m->v2[0] && find_v2_parent(m, p1, sizeof(p1), undelegated, sizeof(undelegated)))
		return setup_v2(opts, cg, p1, name, err);
	if (m->memory[0] && m->pids[0])
	{
		snprintf(p1, sizeof(p1), "%s/%s", m->memory, V2_DEFAULT_NAME);
		snprintf(p2, sizeof(p2), "%s/%s", m->pids, V2_DEFAULT_NAME);
		snprintf(p3, sizeof(p3), "%s/%s", m->cpuacct, V2_DEFAULT_NAME);
		if (writable_dir(p1) && writable_dir(p2))
			return setup_v1(opts, cg, p1, p2, m->cpuacct[0] ? p3 : NULL, name, err);
	}
	if (undelegated[0])
		jail_seterr(err, "cgroup v2 parent %s is not delegated to this process: "
					"the account's own processes must run inside it (scripts/jail-host-setup.sh, "
					"docs/jail.md \"Delegation\")", undelegated);
	else
		jail_seterr(err, "no writable cgroup parent (run scripts/jail-host-setup.sh)");
	return -1;
}

/* The cgroup "name" under --cgroup-parent, or under the delegated parent. */
int
jail_cgroup_create_named(const JailOptions *opts, const char *name,
						 JailCgroup *cg, char *err)
{
	CgroupMounts m;

	memset(cg, 0, sizeof(*cg));
	cg->v2_dirfd = -1;
	find_mounts(&m);
	if (opts->cgroup_parent)
		return create_under_parent(opts, &m, name, cg, err);
	return create_delegated(opts, &m, name, cg, err);
}

static int
attach_one(const char *dir, pid_t pid, char *err)
{
	char		path[640];
	char		buf[32];

	if (!dir[0])
		return 0;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	snprintf(buf, sizeof(buf), "%d", (int) pid);
	if (jail_write_file(path, buf) < 0)
	{
		jail_seterr(err, "could not move the sandbox into %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

int
jail_cgroup_attach(JailCgroup *cg, pid_t pid, char *err)
{
	if (cg->mode == CGROUP_NONE)
		return 0;
	if (cg->mode == CGROUP_V2)
		return attach_one(cg->v2_dir, pid, err);
	if (attach_one(cg->mem_dir, pid, err) < 0 ||
		attach_one(cg->pids_dir, pid, err) < 0)
		return -1;
	/* accounting only: losing it is not worth failing the run */
	if (cg->cpu_dir[0])
	{
		char		dummy[JAIL_ERRLEN];

		if (attach_one(cg->cpu_dir, pid, dummy) < 0)
			cg->cpu_dir[0] = '\0';
	}
	return 0;
}

/* The counter files read after a run, by index into JailCgroup.statfd. */
#define STAT_PEAK		0		/* memory.peak / memory.max_usage_in_bytes */
#define STAT_OOM		1		/* memory.events / memory.oom_control */
#define STAT_CPU		2		/* cpu.stat / cpuacct.usage */
#define STAT_FAILCNT	3		/* v1 memory.failcnt */
#define STAT_PIDS		4		/* pids.events (both versions) */
#define NSTATS			5

static bool read_keyed(const JailCgroup *cg, int stat, const char *dir, const char *file,
					   const char *key, uint64_t *out);

/*
 * Read a counter file: through the descriptor opened ahead when there is
 * one (a read at offset 0 makes cgroupfs generate the file afresh), else
 * by its path.  Saves a path walk per file on the verdict's path.
 */
static int
read_stat(const JailCgroup *cg, int stat, const char *dir, const char *file,
		  char *buf, size_t len)
{
	char		path[640];

	if (cg->stats_open && cg->statfd[stat] >= 0)
	{
		ssize_t		n = pread(cg->statfd[stat], buf, len - 1, 0);

		if (n < 0)
			return -1;
		buf[n] = '\0';
		return (int) n;
	}
	if (!dir[0])
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return jail_read_fileat(AT_FDCWD, path, buf, len);
}

/*
 * A launcher's worker opens its slot's counter files before its request
 * (they stay open until the worker exits, with the slot).
 */
void
jail_cgroup_open_stats(JailCgroup *cg)
{
	static const char *const v2[NSTATS] = {"memory.peak", "memory.events", "cpu.stat", NULL,
	"pids.events"};
	static const char *const v1[NSTATS] = {"memory.max_usage_in_bytes", "memory.oom_control",
	"cpuacct.usage", "memory.failcnt", "pids.events"};
	char		path[640];

	for (int i = 0; i < NSTATS; i++)
	{
		const char *dir = NULL;
		const char *file = NULL;

		if (cg->mode == CGROUP_V2 && v2[i])
		{
			dir = cg->v2_dir;
			file = v2[i];
		}
		else if (cg->mode == CGROUP_V1)
		{
			dir = i == STAT_CPU ? cg->cpu_dir : i == STAT_PIDS ? cg->pids_dir : cg->mem_dir;
			file = v1[i];
		}
		/* opened again (a warm interpreter thrown away): not leaked */
		if (cg->stats_open && cg->statfd[i] >= 0)
			close(cg->statfd[i]);
		cg->statfd[i] = -1;
		if (dir && dir[0])
		{
			snprintf(path, sizeof(path), "%s/%s", dir, file);
			if (cg->mode == CGROUP_V2 && i == STAT_PEAK &&
				(cg->statfd[i] = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)) >= 0)
			{
				/* the reset (see jail_cgroup_reset_counters); older
				 * kernels refuse the write and keep the peak since the
				 * slot was made */
				ssize_t		w = write(cg->statfd[i], "reset\n", 6);

				(void) w;		/* refused: no per-open reset here */
				continue;
			}
			cg->statfd[i] = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		}
	}
	cg->stats_open = true;

	/*
	 * pids.events cannot be reset: what the slot's own set-up counted
	 * (nothing, normally) is the base the run's count starts from.
	 */
	cg->pids_max_base = 0;
	(void) read_keyed(cg, STAT_PIDS, "", "pids.events", "max", &cg->pids_max_base);
}

static bool
read_u64(const JailCgroup *cg, int stat, const char *dir, const char *file,
		 uint64_t *out)
{
	char		buf[64];

	if (read_stat(cg, stat, dir, file, buf, sizeof(buf)) <= 0)
		return false;
	*out = strtoull(buf, NULL, 10);
	return true;
}

/* "key value" lines (memory.events, cpu.stat, memory.oom_control). */
static bool
read_keyed(const JailCgroup *cg, int stat, const char *dir, const char *file,
		   const char *key, uint64_t *out)
{
	char		buf[4096];
	char	   *p;
	size_t		n = strlen(key);

	if (read_stat(cg, stat, dir, file, buf, sizeof(buf)) <= 0)
		return false;
	for (p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
	{
		if (strncmp(p, key, n) == 0 && p[n] == ' ')
		{
			*out = strtoull(p + n + 1, NULL, 10);
			return true;
		}
	}
	return false;
}

/* CPU time used so far by the whole sandbox, or 0 if not measurable. */
uint64_t
jail_cgroup_cpu_ms(const JailCgroup *cg)
{
	uint64_t	v = 0;

	if (cg->mode == CGROUP_V2 && read_keyed(cg, STAT_CPU, cg->v2_dir, "cpu.stat", "usage_usec", &v))
		v /= 1000;
	else if (cg->mode == CGROUP_V1 && read_u64(cg, STAT_CPU, cg->cpu_dir, "cpuacct.usage", &v))
		v /= 1000000;
	else
		return 0;
	return v > cg->cpu_base_ms ? v - cg->cpu_base_ms : 0;
}

/* The memory the cgroup holds now (v2 memory.current, v1 usage_in_bytes), or 0. */
uint64_t
jail_cgroup_memory_now(const JailCgroup *cg)
{
	char		path[640];
	char		buf[64];

	if (cg->mode == CGROUP_V2)
		snprintf(path, sizeof(path), "%s/memory.current", cg->v2_dir);
	else if (cg->mode == CGROUP_V1)
		snprintf(path, sizeof(path), "%s/memory.usage_in_bytes", cg->mem_dir);
	else
		return 0;
	if (jail_read_fileat(AT_FDCWD, path, buf, sizeof(buf)) <= 0)
		return 0;
	return strtoull(buf, NULL, 10);
}

void
jail_cgroup_collect(const JailCgroup *cg, JailResult *res)
{
	uint64_t	v;

	res->cgroup = cg->mode;
	if (cg->mode == CGROUP_V2)
	{
		if (read_u64(cg, STAT_PEAK, cg->v2_dir, "memory.peak", &v))
			res->peak_memory_bytes = v;
		if (read_keyed(cg, STAT_OOM, cg->v2_dir, "memory.events", "oom_kill", &v) && v > 0)
			res->oom_killed = true;
	}
	else if (cg->mode == CGROUP_V1)
	{
		if (read_u64(cg, STAT_PEAK, cg->mem_dir, "memory.max_usage_in_bytes", &v))
			res->peak_memory_bytes = v;
		if (read_keyed(cg, STAT_OOM, cg->mem_dir, "memory.oom_control", "oom_kill", &v))
		{
			if (v > 0)
				res->oom_killed = true;
		}
		else if (read_u64(cg, STAT_FAILCNT, cg->mem_dir, "memory.failcnt", &v) && v > 0)
		{
			/*
			 * Kernels before 4.13 have no oom_kill counter; the limit
			 * having been hit is the best evidence left.
			 */
			res->oom_killed = true;
		}
	}
	/* a fork or clone refused at pids.max since the run began */
	if ((cg->mode == CGROUP_V2 || (cg->mode == CGROUP_V1 && cg->pids_dir[0])) &&
		read_keyed(cg, STAT_PIDS, cg->mode == CGROUP_V2 ? cg->v2_dir : cg->pids_dir,
				   "pids.events", "max", &v) && v > cg->pids_max_base)
		res->pids_limit_hit = true;
	v = jail_cgroup_cpu_ms(cg);
	if (v > res->cpu_ms)
		res->cpu_ms = v;
}

/* v2 can kill a whole cgroup atomically; v1 relies on the pid namespace. */
void
jail_cgroup_kill(const JailCgroup *cg)
{
	char		path[640];

	if (cg->mode != CGROUP_V2)
		return;
	snprintf(path, sizeof(path), "%s/cgroup.kill", cg->v2_dir);
	(void) jail_write_file(path, "1");
}

static void
remove_dir(char *dir)
{
	struct timespec ts = {0, 2 * 1000 * 1000};

	if (!dir[0])
		return;

	/*
	 * All tasks are reaped by now, but the kernel takes the cgroup offline
	 * asynchronously, so rmdir may briefly see EBUSY.
	 */
	for (int i = 0; i < 250; i++)
	{
		if (rmdir(dir) == 0 || errno == ENOENT)
			break;
		if (errno != EBUSY)
		{
			jail_warn("could not remove cgroup %s: %s", dir, strerror(errno));
			break;
		}
		nanosleep(&ts, NULL);
	}
	dir[0] = '\0';
}

void
jail_cgroup_destroy(JailCgroup *cg)
{
	if (cg->v2_dirfd >= 0)
		close(cg->v2_dirfd);
	cg->v2_dirfd = -1;
	remove_dir(cg->v2_dir);
	remove_dir(cg->mem_dir);
	remove_dir(cg->pids_dir);
	remove_dir(cg->cpu_dir);
	cg->mode = CGROUP_NONE;
}
