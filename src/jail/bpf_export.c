/*-------------------------------------------------------------------------
 *
 * bpf_export.c
 *	  A libseccomp program as plain BPF: exported into memory (the jail's
 *	  and the egress proxy's filter builders, seccomp.c and
 *	  ../egress/confine.c) and printed as a C array (their build-time
 *	  generators, gen_filter.c in each directory).  Compiled into both
 *	  programs: it uses the C library and libseccomp only, no jail.h.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bpf_export.h"

/*
 * The program of ctx into *insns (malloc'd) and *len, and ctx released
 * either way.  0, or -1 with the reason in err (errlen bytes).
 */
int
jail_bpf_export(scmp_filter_ctx ctx, const char *memfd_name,
				struct sock_filter **insns, unsigned short *len,
				char *err, size_t errlen)
{
	int			memfd;
	int			rc;
	off_t		size;

	*insns = NULL;
	/* libseccomp 2.5 exports only to an fd; a memfd keeps it in memory. */
	memfd = memfd_create(memfd_name, MFD_CLOEXEC);
	if (memfd < 0)
	{
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		seccomp_release(ctx);
		return -1;
	}
	rc = seccomp_export_bpf(ctx, memfd);
	if (rc < 0)
	{
		snprintf(err, errlen, "seccomp_export_bpf: %s", strerror(-rc));
		goto fail;
	}
	size = lseek(memfd, 0, SEEK_END);
	if (size <= 0 || size % sizeof(struct sock_filter) != 0 ||
		size / sizeof(struct sock_filter) > BPF_MAXINSNS)
	{
		snprintf(err, errlen, "seccomp program has a bad size (%ld)", (long) size);
		goto fail;
	}
	*insns = malloc(size);
	if (!*insns || pread(memfd, *insns, size, 0) != size)
	{
		snprintf(err, errlen, "could not read back the seccomp program");
		goto fail;
	}
	*len = size / sizeof(struct sock_filter);
	close(memfd);
	seccomp_release(ctx);
	return 0;

fail:
	free(*insns);
	*insns = NULL;
	close(memfd);
	seccomp_release(ctx);
	return -1;
}

/* The program as "static const struct sock_filter name[len] = {...};". */
void
jail_bpf_print(const char *name, const struct sock_filter *insns, unsigned short len)
{
	printf("static const struct sock_filter %s[%u] = {\n", name, len);
	for (unsigned i = 0; i < len; i++)
		printf("\t{0x%04x, %u, %u, 0x%08x},\n", insns[i].code,
			   insns[i].jt, insns[i].jf, insns[i].k);
	printf("};\n");
}
