/*-------------------------------------------------------------------------
 *
 * seccomp.c
 *	  The system-call filter: built with libseccomp and exported as raw
 *	  BPF, and installed by the child as the very last step before execve
 *	  (so no setup step of ours runs under it, and no libseccomp
 *	  allocation happens after fork).  The build compiles it once
 *	  (gen_filter.c -> filter_bpf.h, used by filter.c); a run compiles it
 *	  afresh only when the architecture differs from the build's.
 *
 * Policy: default allow, with a deny list of the calls that widen the
 * kernel attack surface or reach outside the sandbox.  An allow list
 * would be tighter but Python, Node and the shell together touch a very
 * large and version-dependent set; the deny list is what bubblewrap-style
 * tools and Docker's default profile rest on, made stricter here.  Denied
 * calls fail with EPERM so programs degrade instead of crashing; the
 * few that can only ever be an attack (loading kernel code) kill the
 * process.  See docs/security.md for the threat behind each entry.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/seccomp.h>

#include "bpf_export.h"
#include "jail.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/*
 * Calls that fail with EPERM: the mount table and root changes.  Apart
 * from the rest because a served sandbox's init (sandbox.c) loads its
 * filter before the request and mounts the workspace after it, under a
 * program without these; it then drops every capability, which no
 * syscall left to it can win back, before any payload code runs.
 */
static const char *const deny_mount[] = {
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr",
	NULL
};

/* And the rest that fail with EPERM. */
static const char *const deny_eperm[] = {
	/* namespaces */
	"unshare", "setns",
	/* looking into or steering other processes */
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"kcmp",
	/* large, historically buggy kernel surfaces */
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"fanotify_init", "lookup_dcookie", "quotactl", "quotactl_fd",
	"open_by_handle_at", "name_to_handle_at",
	/* host-wide state */
	"swapon", "swapoff", "acct", "settimeofday", "clock_settime",
	"clock_adjtime", "adjtimex", "syslog", "sethostname", "setdomainname",
	"vhangup", "iopl", "ioperm", "uselib", "ustat", "sysfs", "_sysctl",
	"nfsservctl", "reboot",
	NULL
};

/* Calls that kill the process: there is no benign use inside a sandbox. */
static const char *const deny_kill[] = {
	"kexec_load", "kexec_file_load", "init_module", "finit_module",
	"delete_module", "create_module", "get_kernel_syms", "query_module",
	NULL
};

/* Namespace-creating clone flags (new user namespaces in particular). */
static const unsigned long ns_flags[] = {
	CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
	CLONE_NEWUTS, CLONE_NEWCGROUP
};

static int
add_by_name(scmp_filter_ctx ctx, uint32_t action, const char *name,
			char *err)
{
	int			nr = seccomp_syscall_resolve_name(name);
	int			rc;

	/* A name this architecture lacks needs no rule. */
	if (nr == __NR_SCMP_ERROR)
		return 0;
	rc = seccomp_rule_add(ctx, action, nr, 0);
	if (rc < 0)
	{
		jail_seterr(err, "seccomp rule for %s: %s", name, strerror(-rc));
		return -1;
	}
	return 0;
}

static int
build_rules(scmp_filter_ctx ctx, JailFilterKind kind, char *err)
{
	uint32_t	eperm = SCMP_ACT_ERRNO(EPERM);
	int			rc = 0;

	for (int i = 0; kind == FILTER_PAYLOAD && deny_mount[i]; i++)
		if (add_by_name(ctx, eperm, deny_mount[i], err) < 0)
			return -1;
	for (int i = 0; deny_eperm[i]; i++)
		if ((kind == FILTER_PAYLOAD || strcmp(deny_eperm[i], "setns") != 0) &&
			add_by_name(ctx, eperm, deny_eperm[i], err) < 0)
			return -1;

	/*
	 * A served init joins the mount namespace its warm interpreter's
	 * process made for itself (rootfs.c, enter_payload_ns) on kernels
	 * where it cannot enter the root ahead: setns with CLONE_NEWNS only,
	 * which needs CAP_SYS_ADMIN, gone for good once init has mounted the
	 * request (jail_drop_held in sandbox.c).
	 */
	if (kind == FILTER_INIT)
	{
		rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(setns), 1,
							  SCMP_A1(SCMP_CMP_NE, CLONE_NEWNS));
		if (rc < 0)
			goto fail;
	}
	for (int i = 0; deny_kill[i]; i++)
		if (add_by_name(ctx, SCMP_ACT_KILL_PROCESS, deny_kill[i], err) < 0)
			return -1;

	/*
	 * clone: refuse any namespace flag (one rule per flag, since libseccomp
	 * cannot express "mask != 0" in one comparison).  clone3 passes its
	 * flags in memory, where BPF cannot look, so it is refused outright
	 * with ENOSYS: glibc and libuv then fall back to clone(2).
	 */
	for (size_t i = 0; i < sizeof(ns_flags) / sizeof(ns_flags[0]); i++)
	{
		rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1,
							  SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
		if (rc < 0)
			goto fail;
	}
	rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (rc < 0)
		goto fail;

	/*
	 * socket/socketpair: only AF_UNIX, AF_INET and AF_INET6.  The
	 * comparisons are on all 64 bits: garbage in the upper half makes the
	 * value larger than AF_INET6, which the GT rule refuses.
	 */
	{
		static const int sys[] = {SCMP_SYS(socket), SCMP_SYS(socketpair)};

		for (int s = 0; s < 2; s++)
		{
			for (int fam = 0; fam < AF_INET6; fam++)
			{
				if (fam == AF_UNIX || fam == AF_INET)
					continue;
				rc = seccomp_rule_add(ctx, eperm, sys[s], 1,
									  SCMP_A0(SCMP_CMP_EQ, fam));
				if (rc < 0)
					goto fail;
			}
			rc = seccomp_rule_add(ctx, eperm, sys[s], 1,
								  SCMP_A0(SCMP_CMP_GT, AF_INET6));
			if (rc < 0)
				goto fail;
		}
	}

	/* Faking terminal input into a controlling tty (none here anyway). */
	rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
						  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCSTI));
	if (rc < 0)
		goto fail;
	rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(ioctl), 1,
						  SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, TIOCLINUX));
	if (rc < 0)
		goto fail;

	/*
	 * personality: refuse the personas that weaken exploit mitigations
	 * (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, legacy
	 * layout).  The query personality(0xffffffff) must still work, and it
	 * has every bit set; bit 31 is never part of a real persona, so each
	 * rule matches "flag set and bit 31 clear".
	 */
	{
		static const unsigned long bad[] = {0x0400000, 0x0040000, 0x0100000, 0x0200000};

		for (int i = 0; i < 4; i++)
		{
			rc = seccomp_rule_add(ctx, eperm, SCMP_SYS(personality), 1,
								  SCMP_A0(SCMP_CMP_MASKED_EQ, bad[i] | 0x80000000UL, bad[i]));
			if (rc < 0)
				goto fail;
		}
	}
	return 0;

fail:
	jail_seterr(err, "seccomp rule: %s", strerror(-rc));
	return -1;
}

int
jail_filter_build(JailFilter *filter, JailFilterKind kind, char *err)
{
	scmp_filter_ctx ctx;

	/*
	 * libseccomp learns which actions the kernel supports by calling
	 * seccomp(2); under valgrind that call is unknown and it concludes
	 * that KILL_PROCESS is unsupported.  The kernel's own list is the
	 * better witness; we load the program ourselves anyway.
	 */
	{
		char		avail[256];

		if (seccomp_api_get() < 3 &&
			jail_read_fileat(AT_FDCWD, "/proc/sys/kernel/seccomp/actions_avail",
							 avail, sizeof(avail)) > 0 &&
			strstr(avail, "kill_process"))
			seccomp_api_set(3);
	}

	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
	{
		jail_seterr(err, "seccomp_init failed");
		return -1;
	}
	/* Syscalls of a foreign ABI (i386 via int 0x80, x32) are refused. */
	seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	/* We set no_new_privs ourselves, after dropping capabilities. */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);

	/*
	 * The same rules, laid out as a binary tree of syscall numbers
	 * rather than a list: attaching a filter makes the kernel run it once
	 * per syscall number to build its allow cache, which for the list
	 * cost ~0.1 ms on every run's path; and each call the payload makes
	 * walks a few comparisons instead of up to a hundred.  (libseccomp
	 * 2.5+; older ones keep the list.)
	 */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);

	if (build_rules(ctx, kind, err) < 0)
	{
		seccomp_release(ctx);
		return -1;
	}
	/* and releases ctx */
	return jail_bpf_export(ctx, "seccomp-bpf", &filter->insns, &filter->len, err,
						   JAIL_ERRLEN);
}

/*
 * Install the exported program; requires no_new_privs already set.
 *
 * With keep_sock >= 0 (a served sandbox's socket to its worker), the
 * program is installed with a listener (SECCOMP_FILTER_FLAG_NEW_LISTENER;
 * no rule ever notifies it, so it is inert) and the listener is sent,
 * unread, to the worker.  It holds a reference to the program: when the
 * process exits, the program is not freed then (a JIT image freed through
 * a kworker, on the way between the payload's exit and the verdict) but
 * when the worker exits, after the verdict.  Kernels without listeners,
 * or a send that fails, simply free it at exit as before.
 *
 * With watch_sock >= 0 as well (a served payload's socket to its init),
 * the listener goes there too: it reports POLLHUP once no task uses the
 * program any more, which on Linux 6.3 and later is when the last of the
 * payload's tasks has entered its exit (sandbox.c, jail_init_reap).
 */
int
jail_filter_load(const JailFilter *filter, int keep_sock, int watch_sock)
{
	struct sock_fprog prog = {
		.len = filter->len,
		.filter = filter->insns,
	};
	int			lfd;

	if (keep_sock < 0)
		return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	lfd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
				  SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	if (lfd < 0)
		return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	(void) jail_send_fd(keep_sock, lfd);
	if (watch_sock >= 0)
		(void) jail_send_fd(watch_sock, lfd);
	close(lfd);
	return 0;
}
