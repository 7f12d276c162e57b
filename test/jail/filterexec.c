/*
 * filterexec.c: run a program under one of the jail's two prebuilt
 * seccomp programs (src/jail/obj/filter_bpf.h), for test/jail/run.sh.
 *
 *	 filterexec payload|init PROGRAM [ARGS...]
 *
 * The suite runs the syscall probe under each and compares: the init
 * program (a served sandbox's init loads it before its request) must
 * deny exactly what the payload's denies, except the mount calls.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "filter_bpf.h"

int
main(int argc, char **argv)
{
	struct sock_fprog prog;

	if (argc < 3 || (strcmp(argv[1], "payload") != 0 && strcmp(argv[1], "init") != 0))
	{
		fprintf(stderr, "usage: filterexec payload|init PROGRAM [ARGS...]\n");
		return 2;
	}
	if (strcmp(argv[1], "init") == 0)
	{
		prog.len = sizeof(jail_prebuilt_init_filter) / sizeof(jail_prebuilt_init_filter[0]);
		prog.filter = (struct sock_filter *) jail_prebuilt_init_filter;
	}
	else
	{
		prog.len = sizeof(jail_prebuilt_filter) / sizeof(jail_prebuilt_filter[0]);
		prog.filter = (struct sock_filter *) jail_prebuilt_filter;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
		prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
	{
		perror("filterexec: seccomp");
		return 1;
	}
	execv(argv[2], argv + 2);
	perror("filterexec: execv");
	return 127;
}
