/*-------------------------------------------------------------------------
 *
 * bpf_export.h
 *	  A libseccomp program as plain BPF, for the jail and the egress proxy
 *	  (bpf_export.c is compiled into both; C library and libseccomp only).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_BPF_EXPORT_H
#define SANDBOX_BPF_EXPORT_H

#include <stddef.h>
#include <linux/filter.h>
#include <seccomp.h>

extern int	jail_bpf_export(scmp_filter_ctx ctx, const char *memfd_name,
							struct sock_filter **insns, unsigned short *len,
							char *err, size_t errlen);
extern void jail_bpf_print(const char *name, const struct sock_filter *insns,
						   unsigned short len);

#endif							/* SANDBOX_BPF_EXPORT_H */
