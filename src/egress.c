/*-------------------------------------------------------------------------
 *
 * egress.c
 *		A run's egress on the supervisor's side (docs/egress.md): the policy
 *		file the prepare step returned, placed in the run's own directory
 *		(never the workspace: the sandbox cannot see or change it), and the
 *		proxy's connection log read back from there after the run, before
 *		the directory is removed.  The jail (src/jail/egress.c) and its proxy
 *		(src/egress/) do the rest; the SQL side is sql/src/47_egress.sql.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/stringinfo.h"
#include "utils/memutils.h"

#include "sandbox_ext.h"
#include "sandbox_files.h"
#include "supervisor.h"

/* The proxy logs at most 1000 attempts of at most ~4 kB each. */
#define EGRESS_LOG_MAX	(4 * 1024 * 1024)

/* Called by the prepare step (steps.c) inside its transaction: may raise. */
void
sandbox_egress_place_policy(SandboxRun *run, const char *data, size_t len)
{
	char	   *err = NULL;

	if (!sandbox_place_file(run->disk.dir, "egress-policy", data, len, 0600, &err))
		ereport(ERROR,
				(errcode(ERRCODE_IO_ERROR),
				 errmsg("could not place the egress policy of invocation %s: %s",
						run->idstr, err)));
	run->disk.egress = true;
}

/*
 * After the run: the connection log, as the proxy wrote it (the jail
 * created it O_EXCL in our directory).  Missing (the jail never got that
 * far) or unreadable: an empty log, which the record shows as 0 rows.
 */
void
sandbox_egress_collect(SandboxRun *run)
{
	char		path[MAXPGPATH];
	StringInfoData buf;
	int			fd;
	ssize_t		n;

	if (!run->disk.egress || !run->disk.dir[0])
		return;
	snprintf(path, sizeof(path), "%s/egress.log", run->disk.dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	initStringInfo(&buf);
	enlargeStringInfo(&buf, 65536);
	while (buf.len < EGRESS_LOG_MAX)
	{
		int			want = Min(65536, EGRESS_LOG_MAX - buf.len);

		enlargeStringInfo(&buf, want);
		n = read(fd, buf.data + buf.len, want);
		if (n <= 0)
			break;
		buf.len += n;
		buf.data[buf.len] = '\0';
	}
	close(fd);
	/* the text must be valid for a text datum: no NUL inside */
	if (memchr(buf.data, '\0', buf.len) == NULL)
		run->disk.egress_log = MemoryContextStrdup(run->cxt, buf.data);
	pfree(buf.data);
}
