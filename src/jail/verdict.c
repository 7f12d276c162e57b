/*-------------------------------------------------------------------------
 *
 * verdict.c
 *	  What happened to a run: its status, decided once from the facts the
 *	  run collected (jail_verdict_decide), and the one line of flat JSON
 *	  that tells the caller (the extension's background worker, or a
 *	  launcher's client).
 *
 * The shape is a contract with the background worker (docs/jail.md): keep
 * it flat, keep every key present, and write it with a single write(2) so
 * a reader never sees half a verdict.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jail.h"

/* A setup error: the sandbox could not be built (or run to its end). */
void
jail_verdict_setup_error(JailResult *res, const char *msg)
{
	res->status = STATUS_SETUP_ERROR;
	snprintf(res->setup_error, sizeof(res->setup_error), "%s", msg);
}

/*
 * The status of a run that ran to its end, from the facts already in res
 * (killed, timed_out, oom_killed, cpu_ms) and how it ended.  The first
 * that holds wins: killed by a stop request (whatever else happened); a
 * setup error the sandbox reported; the wall clock ran out before the
 * payload ended; the payload's own exit or signal (a SIGXCPU, or SIGKILL
 * at the CPU limit, is a timeout; SIGXFSZ a file too large); a limit that
 * killed init itself.  Anything else is a setup error too: init ended
 * without reporting.  0 ran, -1 setup error.
 */
int
jail_verdict_decide(JailResult *res, const JailEnd *end)
{
	int			st = end->payload_status;

	if (res->killed)
		res->status = STATUS_KILLED;
	else if (end->setup_error[0])
	{
		jail_verdict_setup_error(res, end->setup_error);
		return -1;
	}
	else if (res->timed_out && !end->have_status)
		res->status = STATUS_TIMED_OUT;
	else if (end->have_status && WIFEXITED(st))
	{
		res->status = STATUS_EXITED;
		res->have_exit_code = true;
		res->exit_code = WEXITSTATUS(st);
	}
	else if (end->have_status && WIFSIGNALED(st))
	{
		res->status = STATUS_SIGNALED;
		res->have_signal = true;
		res->signal = WTERMSIG(st);
		if (res->signal == SIGXCPU ||
			(res->signal == SIGKILL && res->cpu_ms >= end->cpu_limit_ms))
			res->timed_out = true;
		if (res->signal == SIGXFSZ)
			res->file_too_large = true;
	}
	else if (res->oom_killed || end->over_workspace || end->runtime_at_limit)
	{
		/* a limit killed the sandbox's init itself (or gVisor's kernel) */
		res->status = STATUS_SIGNALED;
		res->have_signal = true;
		res->signal = SIGKILL;
	}
	else
	{
		char		msg[JAIL_ERRLEN];

		jail_seterr(msg, "sandbox init ended without reporting (status 0x%x)",
					(unsigned) end->init_status);
		jail_verdict_setup_error(res, msg);
		return -1;
	}
	return 0;
}

static const char *
status_name(JailStatus s)
{
	switch (s)
	{
		case STATUS_EXITED:
			return "exited";
		case STATUS_SIGNALED:
			return "signaled";
		case STATUS_TIMED_OUT:
			return "timed_out";
		case STATUS_SETUP_ERROR:
			return "setup_error";
		case STATUS_KILLED:
			return "killed";
	}
	return "setup_error";
}

static const char *
cgroup_name(CgroupMode m)
{
	return m == CGROUP_V1 ? "v1" : m == CGROUP_V2 ? "v2" : "none";
}

/* JSON-escape src into dst (bounded); control bytes become \u00XX. */
static void
json_escape(char *dst, size_t dstlen, const char *src)
{
	size_t		o = 0;

	for (; *src && o + 7 < dstlen; src++)
	{
		unsigned char c = (unsigned char) *src;

		if (c == '"' || c == '\\')
		{
			dst[o++] = '\\';
			dst[o++] = c;
		}
		else if (c == '\n')
		{
			dst[o++] = '\\';
			dst[o++] = 'n';
		}
		else if (c < 0x20 || c == 0x7f)
			o += snprintf(dst + o, dstlen - o, "\\u%04x", c);
		else
			dst[o++] = c;
	}
	dst[o] = '\0';
}

#define B(x) ((x) ? "true" : "false")

/* The verdict line (with its newline) into line; its length, or -1. */
int
jail_format_verdict(char *line, size_t len, const JailResult *r)
{
	char		code[32];
	char		sig[32];
	char		err[JAIL_ERRLEN * 6 + 4];
	int			n;

	if (r->have_exit_code)
		snprintf(code, sizeof(code), "%d", r->exit_code);
	else
		strcpy(code, "null");
	if (r->have_signal)
		snprintf(sig, sizeof(sig), "%d", r->signal);
	else
		strcpy(sig, "null");
	if (r->setup_error[0])
	{
		err[0] = '"';
		json_escape(err + 1, sizeof(err) - 2, r->setup_error);
		strcat(err, "\"");
	}
	else
		strcpy(err, "null");

	n = snprintf(line, len,
				 "{\"version\":1,\"status\":\"%s\",\"exit_code\":%s,"
				 "\"signal\":%s,\"wall_ms\":%llu,\"cpu_ms\":%llu,"
				 "\"peak_memory_bytes\":%llu,\"timed_out\":%s,"
				 "\"oom_killed\":%s,\"output_truncated\":%s,"
				 "\"file_too_large\":%s,\"pids_limit_hit\":%s,\"killed\":%s,"
				 "\"stdout_bytes\":%llu,\"stderr_bytes\":%llu,"
				 "\"cgroup\":\"%s\",\"warm\":%s,\"warm_cpu_ms\":%llu,"
				 "\"warm_memory_bytes\":%llu,\"setup_error\":%s}\n",
				 status_name(r->status), code, sig,
				 (unsigned long long) r->wall_ms,
				 (unsigned long long) r->cpu_ms,
				 (unsigned long long) r->peak_memory_bytes,
				 B(r->timed_out), B(r->oom_killed), B(r->output_truncated),
				 B(r->file_too_large), B(r->pids_limit_hit), B(r->killed),
				 (unsigned long long) r->stdout_bytes,
				 (unsigned long long) r->stderr_bytes,
				 cgroup_name(r->cgroup), B(r->warm),
				 (unsigned long long) r->warm_cpu_ms,
				 (unsigned long long) r->warm_memory_bytes, err);
	if (n < 0 || (size_t) n >= len)
		return -1;
	if (r->egress)
	{
		/* only runs with egress carry these, after the fixed fields */
		int			m = snprintf(line + n - 2, len - n + 2,
								 ",\"egress_attempts\":%llu,\"egress_allowed\":%llu,"
								 "\"egress_denied\":%llu,\"egress_bytes_up\":%llu,"
								 "\"egress_bytes_down\":%llu,\"egress_limit_hit\":%s}\n",
								 (unsigned long long) r->egress_attempts,
								 (unsigned long long) r->egress_allowed,
								 (unsigned long long) r->egress_denied,
								 (unsigned long long) r->egress_bytes_up,
								 (unsigned long long) r->egress_bytes_down,
								 B(r->egress_limit_hit));

		if (m < 0 || (size_t) m >= len - n + 2)
			return -1;
		n += m - 2;
	}
	return n;
}

int
jail_write_verdict(int fd, const JailResult *r)
{
	char		line[JAIL_VERDICT_MAX];
	int			n = jail_format_verdict(line, sizeof(line), r);

	if (n < 0)
		return -1;
	return jail_write_all(fd, line, n);
}

/*
 * Where the verdict goes, for the command line (one-shot and --client):
 * --verdict-file (created 0600, never through a symlink), --verdict-fd
 * (must be open; close-on-exec from here on: the sandbox never sees it
 * either way), else stderr.  -1 with *rc the exit code on failure.
 */
int
jail_open_verdict(const JailOptions *opts, int *rc)
{
	int			fd;

	if (opts->verdict_file)
	{
		fd = open(opts->verdict_file,
				  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
		{
			fprintf(stderr, "sandbox-jail: cannot open verdict file %s: %s\n",
					opts->verdict_file, strerror(errno));
			*rc = JAIL_EXIT_SETUP;
		}
		return fd;
	}
	if (opts->verdict_fd >= 0)
	{
		if (fcntl(opts->verdict_fd, F_GETFD) < 0)
		{
			fprintf(stderr, "sandbox-jail: verdict fd %d is not open\n", opts->verdict_fd);
			*rc = JAIL_EXIT_USAGE;
			return -1;
		}
		fcntl(opts->verdict_fd, F_SETFD, FD_CLOEXEC);
		return opts->verdict_fd;
	}
	return STDERR_FILENO;
}
