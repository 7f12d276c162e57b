/*-------------------------------------------------------------------------
 *
 * confine.c
 *	  The proxy's own seccomp filter: an allowlist of the system calls it
 *	  makes once it serves, loaded into every thread (TSYNC) after its
 *	  setup and before it says "ready"; anything else kills the whole
 *	  process (SECCOMP_RET_KILL_PROCESS).
 *
 * The proxy parses what a hostile payload sends.  Should that ever give
 * the payload control of it, the filter leaves it what it had: its own
 * descriptors, TCP and UDP sockets (AF_INET, AF_INET6; no AF_UNIX, no
 * netlink, no packet sockets), memory without PROT_EXEC, threads of its
 * own (under the same filter).  It cannot open a file, exec, fork a
 * process, ptrace, signal another process, change ids, namespaces or
 * mounts.
 *
 * What is allowed, by who needs it after setup:
 *	  the workers' loop		epoll_wait, accept4, poll, read, write, close
 *	  a new worker			clone with CLONE_THREAD only (clone3, whose flags
 *							a filter cannot see, fails with ENOSYS: glibc
 *							then uses clone), epoll_create1, epoll_ctl
 *	  a connection			socket (inet only), connect, setsockopt,
 *							getsockopt, getsockname, getpeername (the
 *							host's own address check after a connect),
 *							shutdown, fcntl, pipe2, splice
 *	  the resolver client	socket, connect, sendto, recvfrom, getrandom
 *	  threads, malloc		futex, mmap/mprotect (never PROT_EXEC), munmap,
 *							brk, madvise, mremap, rt_sigprocmask, rseq,
 *							set_robust_list (what glibc does in a thread
 *							it starts)
 *	  the end				exit, exit_group, rt_sigreturn, restart_syscall
 *	  TLS (secrets' hosts)	getpid (OpenSSL's per-thread random generator
 *							mixes it in when a worker first uses it); the
 *							rest is read, write and memory
 * The sanitizer build (SANITIZE=1, the egress suite's proxy) also lets
 * the ASan/UBSan runtime write its report (openat, readlink, getpid, ...)
 * and LeakSanitizer run its check at exit (clone, ptrace, wait4, ...):
 * the list below; the release build has none of them.  The suite checks
 * that both reports still get out (t_proxy_seccomp).
 *
 * Like the jail's filter (src/jail/filter.c), the program is compiled at
 * build time by gen_filter.c and embedded (egress_filter_bpf.h); a machine
 * of another architecture compiles it with libseccomp at start.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../jail/bpf_export.h"
#include "egress.h"

static const char *const allowed[] = {
	"read", "write", "close", "poll", "ppoll", "epoll_wait", "epoll_pwait",
	"accept4", "connect", "setsockopt", "getsockopt", "getsockname", "getpeername",
	"shutdown", "fcntl",
	"pipe2", "splice", "sendto", "recvfrom", "getrandom", "futex",
	"clock_gettime", "gettimeofday", "munmap", "brk", "madvise", "mremap",
	"rt_sigprocmask", "rt_sigreturn", "restart_syscall", "exit", "exit_group",
	"rseq", "set_robust_list", "epoll_create1", "epoll_ctl",
	/* OpenSSL's random generator of a new thread takes the pid as a nonce */
	"getpid",
};

#ifdef EGRESS_SANITIZE
/* What the sanitizer runtime needs to report (log_path) and check for leaks. */
static const char *const sanitizer_allowed[] = {
	"openat", "open", "readlink", "readlinkat", "fstat", "newfstatat",
	"getpid", "gettid", "tgkill",
	"rt_sigaction", "sigaltstack", "sched_yield", "prctl", "lseek", "pread64",
	"getrusage", "uname", "ioctl", "sched_getaffinity", "nanosleep",
	"clock_nanosleep",
	/* LeakSanitizer's check at exit stops the threads from a clone of its own */
	"clone", "ptrace", "wait4", "waitid", "getdents", "getdents64", "getppid", "kill",
	"rt_sigtimedwait",
};
#endif

static int
allow(scmp_filter_ctx ctx, const char *name, char *err)
{
	int			nr = seccomp_syscall_resolve_name(name);
	int			rc;

	if (nr == __NR_SCMP_ERROR)
		return 0;				/* not a call of this architecture */
	rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
	if (rc < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "seccomp rule for %s: %s", name, strerror(-rc));
		return -1;
	}
	return 0;
}

static int
build_rules(scmp_filter_ctx ctx, char *err)
{
	int			rc = 0;

	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		if (allow(ctx, allowed[i], err) < 0)
			return -1;
#ifdef EGRESS_SANITIZE
	for (size_t i = 0; i < sizeof(sanitizer_allowed) / sizeof(sanitizer_allowed[0]); i++)
		if (allow(ctx, sanitizer_allowed[i], err) < 0)
			return -1;
#endif
	/* sockets of the internet only: no AF_UNIX, netlink, packet, ... */
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
						   SCMP_A0(SCMP_CMP_EQ, AF_INET));
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
						   SCMP_A0(SCMP_CMP_EQ, AF_INET6));
	/* threads only: a clone without CLONE_THREAD (a process) is refused */
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
						   SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, CLONE_THREAD));
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	/* memory, never executable */
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
						   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	rc |= seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
						   SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc < 0)
	{
		snprintf(err, EGRESS_ERRLEN, "seccomp argument rules failed");
		return -1;
	}
	return 0;
}

/* Compile the allowlist with libseccomp (gen_filter.c, or another arch). */
int
egress_filter_build(EgressFilter *f, char *err)
{
	scmp_filter_ctx ctx;

	if (seccomp_api_get() < 3)
		seccomp_api_set(3);		/* KILL_PROCESS: every kernel since 4.14 */
	ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	if (!ctx)
	{
		snprintf(err, EGRESS_ERRLEN, "seccomp_init failed");
		return -1;
	}
	seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);	/* set by egress_confine */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (build_rules(ctx, err) < 0)
	{
		seccomp_release(ctx);
		return -1;
	}
	/* and releases ctx */
	return jail_bpf_export(ctx, "egress-seccomp", &f->insns, &f->len, err,
						   EGRESS_ERRLEN);
}
