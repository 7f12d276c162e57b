/*
 * probe.c: syscall probe run inside the sandbox by test/jail/run.sh.
 *
 * Calls each system call the jail's seccomp filter must deny, with bad
 * arguments, and prints "name ERRNO".  EPERM/ENOSYS means blocked (by the
 * filter or, for calls that check a capability first, by the missing
 * capability: either way the payload cannot use it); EFAULT, EBADF,
 * EINVAL and friends mean the call reached the kernel proper, i.e. the
 * filter let it through.  After the technique of bubblewrap's
 * tests/try-syscall.c.
 *
 *	 probe             run the table
 *	 probe kexec       call kexec_load (the filter kills the process)
 *	 probe euid        print the effective uid (setuid test)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define BAD ((void *) 1)

static void
report(const char *name, long rc)
{
	int			e = errno;

	if (rc >= 0)
		printf("%s OK\n", name);
	else
		printf("%s %s\n", name, strerrorname_np(e) ? strerrorname_np(e) : "?");
}

int
main(int argc, char **argv)
{
	long		rc;

	if (argc > 1 && strcmp(argv[1], "kexec") == 0)
	{
		rc = syscall(SYS_kexec_load, 0, 0, NULL, 0);
		report("kexec_load", rc);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "euid") == 0)
	{
		printf("euid=%d uid=%d\n", (int) geteuid(), (int) getuid());
		return 0;
	}

#define TRY(name, call) do { errno = 0; rc = (call); report(name, rc); } while (0)
	TRY("mount", syscall(SYS_mount, BAD, BAD, BAD, 0, BAD));
	TRY("umount2", syscall(SYS_umount2, BAD, 0));
	TRY("pivot_root", syscall(SYS_pivot_root, BAD, BAD));
	TRY("chroot", syscall(SYS_chroot, BAD));
	TRY("unshare", syscall(SYS_unshare, CLONE_NEWUSER));
	TRY("setns", syscall(SYS_setns, -1, 0));
	TRY("setns_mnt", syscall(SYS_setns, -1, CLONE_NEWNS));
	TRY("ptrace", syscall(SYS_ptrace, -1L, 0, BAD, BAD));
	TRY("process_vm_readv", syscall(SYS_process_vm_readv, 0, BAD, 1, BAD, 1, 0));
	TRY("process_vm_writev", syscall(SYS_process_vm_writev, 0, BAD, 1, BAD, 1, 0));
	TRY("bpf", syscall(SYS_bpf, -1, BAD, 0));
	TRY("perf_event_open", syscall(SYS_perf_event_open, BAD, 0, -1, -1, 0));
	TRY("keyctl", syscall(SYS_keyctl, -1, 0, 0, 0, 0));
	TRY("add_key", syscall(SYS_add_key, BAD, BAD, BAD, 0, 0));
	TRY("request_key", syscall(SYS_request_key, BAD, BAD, BAD, 0));
	TRY("userfaultfd", syscall(SYS_userfaultfd, -1));
	TRY("io_uring_setup", syscall(SYS_io_uring_setup, 0, BAD));
	TRY("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	TRY("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
	TRY("open_by_handle_at", syscall(SYS_open_by_handle_at, -1, BAD, 0));
	TRY("name_to_handle_at", syscall(SYS_name_to_handle_at, -1, BAD, BAD, BAD, 0));
	TRY("swapon", syscall(SYS_swapon, BAD, 0));
	TRY("swapoff", syscall(SYS_swapoff, BAD));
	TRY("acct", syscall(SYS_acct, BAD));
	TRY("settimeofday", syscall(SYS_settimeofday, BAD, BAD));
	TRY("clock_settime", syscall(SYS_clock_settime, -1, BAD));
	TRY("adjtimex", syscall(SYS_adjtimex, BAD));
	TRY("syslog", syscall(SYS_syslog, -1, BAD, 0));
	TRY("fsopen", syscall(SYS_fsopen, BAD, 0));
	TRY("open_tree", syscall(SYS_open_tree, -1, BAD, 0));
	TRY("move_mount", syscall(SYS_move_mount, -1, BAD, -1, BAD, 0));
	TRY("personality_noaslr", syscall(SYS_personality, 0x0040000));
	TRY("clone3", syscall(SYS_clone3, BAD, 0));
	TRY("socket_netlink", syscall(SYS_socket, AF_NETLINK, SOCK_RAW, 0));
	TRY("socket_packet", syscall(SYS_socket, AF_PACKET, SOCK_RAW, 0));
	TRY("socket_vsock", syscall(SYS_socket, 40, SOCK_STREAM, 0));
	TRY("socket_unspec", syscall(SYS_socket, AF_UNSPEC, SOCK_STREAM, 0));

	/* clone with a namespace flag: if allowed, the child just exits */
	errno = 0;
	rc = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, 0);
	if (rc == 0)
		_exit(0);
	if (rc > 0)
		waitpid(rc, NULL, 0);
	report("clone_newuser", rc);
	errno = 0;
	rc = syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, NULL, NULL, NULL, 0);
	if (rc == 0)
		_exit(0);
	if (rc > 0)
		waitpid(rc, NULL, 0);
	report("clone_newnet", rc);

	/* controls: these must be allowed, or the probe proves nothing */
	TRY("control_read_badfd", syscall(SYS_read, -1, BAD, 1));
	TRY("control_socket_inet", syscall(SYS_socket, AF_INET, SOCK_STREAM, 0));
	TRY("control_socket_unix", syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0));
	TRY("control_personality_query", syscall(SYS_personality, 0xffffffffUL));
	errno = 0;
	rc = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, 0);
	if (rc == 0)
		_exit(0);
	if (rc > 0)
		waitpid(rc, NULL, 0);
	report("control_clone_plain", rc);
	return 0;
}
