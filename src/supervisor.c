/*-------------------------------------------------------------------------
 *
 * supervisor.c
 *		The supervisor background worker: runs approved invocations in
 *		sandbox-jail and records what happened.
 *
 * One worker, registered from _PG_init when the library is preloaded,
 * connected to sandbox.database.  Its loop:
 *
 *	1. Claim approved invocations (agent._claim_invocations, FOR UPDATE SKIP
 *	   LOCKED) up to the free slots.  That short transaction charges the
 *	   credits and moves each row to `provisioning`; it commits before any
 *	   jail starts.
 *	2. Spawn one sandbox-jail per claimed row (posix_spawn, so the large
 *	   address space of a PostgreSQL process is never copied), with its
 *	   stdout, stderr and verdict on pipes and a pidfd for its exit.  The
 *	   jail is a separate executable; it dies with us (it sets
 *	   PR_SET_PDEATHSIG), so a crashed supervisor leaves no payload behind.
 *	3. Wait on one WaitEventSet holding the latch, postmaster death, every
 *	   pipe and every pidfd; the timeout is the nearest backstop deadline.
 *	4. Append the output that arrived to agent.invocation_output and NOTIFY
 *	   per invocation, in one short transaction per loop turn.
 *	5. When a jail has exited and its pipes are drained, finish the
 *	   invocation in one transaction (agent._finish_invocation): state from
 *	   the verdict, tool call, analytics row, audit events, refund on a
 *	   setup error.  Then broadcast to backends sleeping in agent.wait().
 *
 * No transaction is ever open while code runs: the loop only opens one to
 * claim, to mark rows running, to store output, or to finish.
 *
 * Every state change is fenced on the expected previous state in SQL, so
 * when this process dies at any point the next incarnation's recovery
 * (agent._supervisor_recover) resolves what was left in flight.  On SIGTERM
 * we kill our jails and exit with status 1 so the postmaster restarts us
 * (unless it is itself shutting down); the restart goes through the same
 * recovery path as a crash.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"
#include "sandbox_files.h"

PGDLLEXPORT void sandbox_supervisor_main(Datum main_arg);

/* Largest chunk stored as one output row (and read from a pipe at once). */
#define OUTPUT_READ_SIZE	65536
/* Extra time past the wall limit before we SIGKILL a jail ourselves. */
#define BACKSTOP_GRACE_MS	10000
/* How long to wait for pipes to drain after the jail has exited. */
#define DRAIN_GRACE_MS		2000
/* Output that does not end a line waits this long for the rest of it. */
#define OUTPUT_COALESCE_MS	20
#define OUTPUT_COALESCE_BYTES	16384
/* Delay before retrying a finish whose transaction failed. */
#define FINISH_RETRY_MS		5000
/* Most skills mounted into one sandbox. */
#define SANDBOX_MAX_SKILLS	16
/* Most workspace entries examined for produced files. */
#define MAX_SCAN_ENTRIES	10000
/* Slow poll: a backstop for a lost wake-up, not the way work is found. */
#define IDLE_POLL_MS		10000

enum
{
	STREAM_STDOUT = 0,
	STREAM_STDERR = 1,
	NSTREAMS = 2
};

static const char *const stream_names[NSTREAMS] = {"stdout", "stderr"};

typedef struct Run
{
	bool		active;
	int			slot;
	pg_uuid_t	id;
	char		idstr[UUID_LEN * 2 + 5];
	char		language[16];
	pid_t		pid;
	int			pidfd;
	int			fd[NSTREAMS];	/* -1 once at EOF */
	int			verdict_fd;		/* -1 once at EOF */
	bool		exited;
	int			wait_status;
	TimestampTz exited_at;
	TimestampTz backstop;		/* SIGKILL the jail after this */
	bool		killed_by_us;
	bool		cancel_sent;
	bool		spawned;
	bool		served;			/* through the resident launcher's socket */
	int			served_rc;		/* its answer's rc, -1 before the answer */
	char	   *served_msg;
	TimestampTz finish_retry_at;	/* a failed finish is retried after this */
	char	   *spawn_error;	/* infrastructure failure before/at spawn */
	StringInfoData verdict;
	StringInfoData pending[NSTREAMS];	/* valid UTF-8 waiting to be stored */
	char		partial[NSTREAMS][4];	/* incomplete UTF-8 tail of a read */
	int			partial_len[NSTREAMS];
	TimestampTz pending_at[NSTREAMS];	/* when pending[] became non-empty */
	int64		bytes[NSTREAMS];	/* read from the jail */
	int64		kept[NSTREAMS];		/* accepted for storage */
	bool		truncated;		/* we dropped output over the limit */
	char		dir[MAXPGPATH];	/* per-run directory (code file; workspace unless a session) */
	char		workspace[MAXPGPATH];
	bool		has_session;
	char		session[UUID_LEN * 2 + 5];
	int			nbinds;
	char	   *binds[SANDBOX_MAX_SKILLS];	/* --ro-bind SRC:DST */
	MemoryContext cxt;			/* per-run allocations */
	Manifest   *before;			/* workspace before the run */
	List	   *produced;		/* ProducedFile *, collected after the run */
	bool		collected;
	ProducedCaps caps;
} Run;

static Run *runs;				/* sandbox.max_concurrent_runs entries */
static int	nruns_alloc;
static int	nactive;

/* Prepared plans, kept across transactions. */
static SPIPlanPtr plan_output = NULL;

/* ----------------------------------------------------------------
 * Transactions
 * ----------------------------------------------------------------
 */

static void
xact_begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	SPI_connect();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

static void
xact_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Abort after an error caught with PG_TRY: log it, clean up, and go on.
 * The loop must survive a bad invocation; only the invocation fails.
 */
static void
xact_abort_after_error(MemoryContext oldcxt)
{
	MemoryContextSwitchTo(oldcxt);
	EmitErrorReport();
	FlushErrorState();
	AbortCurrentTransaction();
	SPI_finish();				/* harmless if already cleaned up */
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* ----------------------------------------------------------------
 * Shared memory bookkeeping for agent.worker_status()
 * ----------------------------------------------------------------
 */

static void
slot_publish(Run *run)
{
	SandboxSlot *s = &sandbox_shared->slots[run->slot];

	SpinLockAcquire(&sandbox_shared->mutex);
	s->in_use = run->active;
	s->invocation_id = run->id;
	s->jail_pid = run->spawned ? run->pid : 0;
	s->started_at = GetCurrentTimestamp();
	s->output_bytes = run->bytes[0] + run->bytes[1];
	sandbox_shared->slots_in_use = nactive;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
slot_update_bytes(Run *run)
{
	SandboxSlot *s = &sandbox_shared->slots[run->slot];

	SpinLockAcquire(&sandbox_shared->mutex);
	s->output_bytes = run->bytes[0] + run->bytes[1];
	SpinLockRelease(&sandbox_shared->mutex);
}

/*
 * The work root as an absolute path (sandbox.work_dir is relative to the
 * data directory unless absolute): the jail resolves the paths we give it
 * after changing directory.
 */
static const char *
work_root(void)
{
	static char path[MAXPGPATH];

	if (is_absolute_path(sandbox_work_dir))
		strlcpy(path, sandbox_work_dir, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s/%s", DataDir, sandbox_work_dir);
	return path;
}

/* ----------------------------------------------------------------
 * Work directories
 *
 * A workspace was writable by the payload, so removal never follows a
 * link: every step is relative to an O_NOFOLLOW directory fd, symlinks are
 * unlinked as names, and directories the payload made unreadable are
 * chmod'ed through their fd first.
 * ----------------------------------------------------------------
 */

/*
 * Remove every entry of the work directory except the ones in keep (the
 * directories of runs this incarnation owns).  Called at start, after
 * recovery, when no run of ours exists yet.
 */
static void
clean_work_root(void)
{
	DIR		   *d;
	struct dirent *de;
	char		path[MAXPGPATH];

	if (mkdir(work_root(), S_IRWXU) != 0 && errno != EEXIST)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not create sandbox work directory \"%s\": %m",
						work_root())));
	d = opendir(work_root());
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* Sessions (kept across runs) live under "sessions". */
		if (strcmp(de->d_name, "sessions") == 0 || strcmp(de->d_name, "skills") == 0 ||
			strcmp(de->d_name, "launcher") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", work_root(), de->d_name);
		elog(LOG, "sandbox_ext supervisor: removing leftover work directory \"%s\"", path);
		remove_work_dir(path);
	}
	closedir(d);
}

/* ----------------------------------------------------------------
 * Output: UTF-8 sanitising and storage
 * ----------------------------------------------------------------
 */

/*
 * Append raw bytes to the pending text of a stream as valid UTF-8.
 * Invalid sequences and NULs become U+FFFD; an incomplete sequence at the
 * end is held back for the next read unless this is the last one.
 */
static void
append_utf8(Run *run, int stream, const char *buf, int len, bool eof)
{
	StringInfo	dst = &run->pending[stream];
	char		tmp[OUTPUT_READ_SIZE + 4];
	const unsigned char *s;
	int			n = 0;
	int			i = 0;

	if (run->partial_len[stream] > 0)
	{
		memcpy(tmp, run->partial[stream], run->partial_len[stream]);
		n = run->partial_len[stream];
		run->partial_len[stream] = 0;
	}
	memcpy(tmp + n, buf, len);
	n += len;
	s = (const unsigned char *) tmp;

	while (i < n)
	{
		int			l;

		if (s[i] == 0)
		{
			appendBinaryStringInfo(dst, "\xEF\xBF\xBD", 3);
			i++;
			continue;
		}
		if (s[i] < 0x80)
		{
			int			j = i;

			while (j < n && s[j] != 0 && s[j] < 0x80)
				j++;
			appendBinaryStringInfo(dst, (const char *) s + i, j - i);
			i = j;
			continue;
		}
		l = pg_utf_mblen(s + i);
		if (i + l > n)
		{
			if (!eof && n - i < 4)
			{
				memcpy(run->partial[stream], s + i, n - i);
				run->partial_len[stream] = n - i;
				return;
			}
			appendBinaryStringInfo(dst, "\xEF\xBF\xBD", 3);
			i++;
			continue;
		}
		if (l > 1 && pg_utf8_islegal(s + i, l))
		{
			appendBinaryStringInfo(dst, (const char *) s + i, l);
			i += l;
		}
		else
		{
			appendBinaryStringInfo(dst, "\xEF\xBF\xBD", 3);
			i++;
		}
	}
}

/*
 * Is a stream's pending output ready to be stored?  Output is stored a line
 * at a time where it can be: a chunk that does not end a line waits up to
 * OUTPUT_COALESCE_MS for the rest (an unbuffered interpreter writes "a" and
 * "\n" separately), unless the stream ended or the chunk is large.
 */
static bool
stream_ready(Run *run, int st, TimestampTz now)
{
	StringInfo	p = &run->pending[st];

	if (p->len == 0)
		return false;
	return run->fd[st] < 0 || run->exited ||
		p->data[p->len - 1] == '\n' ||
		p->len >= OUTPUT_COALESCE_BYTES ||
		TimestampDifferenceExceeds(run->pending_at[st], now, OUTPUT_COALESCE_MS);
}


/*
 * Store the pending output of every run in one transaction: one row per
 * stream per run (seq assigned in SQL), and a NOTIFY per invocation naming
 * the new rows.  The notification carries no output: a listener reads it
 * through agent.read_output(), under row-level security, so knowing an
 * invocation id is not enough to see another tenant's output.
 */
static void
flush_output(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	bool		any = false;
	TimestampTz now = GetCurrentTimestamp();
	bool		ready[SANDBOX_MAX_SLOTS][NSTREAMS];

	for (int i = 0; i < nruns_alloc; i++)
		for (int st = 0; st < NSTREAMS; st++)
		{
			ready[i][st] = runs[i].active && stream_ready(&runs[i], st, now);
			any |= ready[i][st];
		}
	if (!any)
		return;

	PG_TRY();
	{
		xact_begin("storing sandbox output");
		if (plan_output == NULL)
		{
			Oid			types[3] = {UUIDOID, TEXTOID, TEXTOID};

			plan_output = SPI_prepare("SELECT agent._append_output($1, $2, $3)", 3, types);
			if (plan_output == NULL)
				elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
			SPI_keepplan(plan_output);
		}
		for (int i = 0; i < nruns_alloc; i++)
		{
			Run		   *run = &runs[i];

			if (!run->active)
				continue;
			for (int st = 0; st < NSTREAMS; st++)
			{
				Datum		values[3];
				int			rc;

				if (!ready[i][st])
					continue;
				values[0] = UUIDPGetDatum(&run->id);
				values[1] = CStringGetTextDatum(stream_names[st]);
				values[2] = PointerGetDatum(cstring_to_text_with_len(run->pending[st].data,
																	 run->pending[st].len));
				rc = SPI_execute_plan(plan_output, values, NULL, false, 0);
				if (rc != SPI_OK_SELECT)
					elog(ERROR, "storing output failed: %s", SPI_result_code_string(rc));
			}
		}
		xact_commit();
		for (int i = 0; i < nruns_alloc; i++)
			for (int st = 0; st < NSTREAMS; st++)
				if (ready[i][st])
					resetStringInfo(&runs[i].pending[st]);
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		/* Drop what could not be stored rather than retrying forever. */
		for (int i = 0; i < nruns_alloc; i++)
		{
			if (!runs[i].active)
				continue;
			resetStringInfo(&runs[i].pending[0]);
			resetStringInfo(&runs[i].pending[1]);
		}
	}
	PG_END_TRY();
}

/* ----------------------------------------------------------------
 * Spawning the jail
 * ----------------------------------------------------------------
 */

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static bool
write_file(const char *path, const char *data, size_t len, char **err)
{
	int			fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	size_t		off = 0;

	if (fd < 0)
	{
		*err = psprintf("could not create \"%s\": %m", path);
		return false;
	}
	while (off < len)
	{
		ssize_t		w = write(fd, data + off, len - off);

		if (w < 0)
		{
			if (errno == EINTR)
				continue;
			*err = psprintf("could not write \"%s\": %m", path);
			close(fd);
			return false;
		}
		off += w;
	}
	if (close(fd) != 0)
	{
		*err = psprintf("could not write \"%s\": %m", path);
		return false;
	}
	return true;
}

/* ----------------------------------------------------------------
 * The resident launcher (sandbox.jail_launcher = on)
 *
 * `sandbox-jail --serve` keeps sandboxes half-built ahead of requests (see
 * docs/jail.md, "Resident launcher"); a run is then one SOCK_SEQPACKET
 * request carrying the options and [code, stdout, stderr] descriptors, and
 * one answer (rc, verdict, message) followed by EOF.  It dies with us
 * (PR_SET_PDEATHSIG), and so do its sandboxes.  If it cannot be reached a
 * run falls back to the one-shot jail.
 * ----------------------------------------------------------------
 */

#define LAUNCHER_MAGIC "sandbox-jail/1"

static pid_t launcher_pid = 0;
static char launcher_sock[MAXPGPATH];
static char launcher_path[MAXPGPATH];	/* the jail_path it was started from */

static void
launcher_stop(void)
{
	if (launcher_pid > 0)
	{
		(void) kill(launcher_pid, SIGTERM);
		(void) waitpid(launcher_pid, NULL, 0);
	}
	launcher_pid = 0;
}

/* Is the launcher alive?  Reaps it if it exited. */
static bool
launcher_alive(void)
{
	if (launcher_pid <= 0)
		return false;
	if (waitpid(launcher_pid, NULL, WNOHANG) == launcher_pid)
	{
		elog(LOG, "sandbox_ext supervisor: the resident jail launcher (pid %d) exited; it will be restarted",
			 (int) launcher_pid);
		launcher_pid = 0;
		return false;
	}
	return true;
}

static int
launcher_connect(void)
{
	struct sockaddr_un addr;
	int			sock;

	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, launcher_sock, sizeof(addr.sun_path));
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -1;
	if (connect(sock, (struct sockaddr *) &addr, sizeof(addr)) != 0)
	{
		close(sock);
		return -1;
	}
	return sock;
}

/* Start the launcher if it is wanted and not running; true when usable. */
static bool
launcher_ensure(void)
{
	char		dir[MAXPGPATH];
	char		pool[16];
	char	   *argv[10];
	char	   *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t	all,
				none;
	int			rc;

	if (!sandbox_jail_launcher)
	{
		launcher_stop();
		return false;
	}
	/* sandbox.jail_path changed on reload: the launcher must follow. */
	if (launcher_pid > 0 && strcmp(launcher_path, sandbox_jail_path) != 0)
		launcher_stop();
	if (launcher_alive())
		return true;
	strlcpy(launcher_path, sandbox_jail_path, sizeof(launcher_path));

	snprintf(dir, sizeof(dir), "%s/launcher", work_root());
	(void) mkdir(work_root(), S_IRWXU);
	(void) mkdir(dir, S_IRWXU);
	snprintf(launcher_sock, sizeof(launcher_sock), "%s/jail.sock", dir);
	(void) unlink(launcher_sock);	/* a stale socket of a dead launcher */
	snprintf(pool, sizeof(pool), "%d", Max(sandbox_max_concurrent_runs, 1));

	argv[0] = sandbox_jail_path;
	argv[1] = "--serve";
	argv[2] = launcher_sock;
	argv[3] = "--pool";
	argv[4] = pool;
	argv[5] = "--quiet";
	argv[6] = NULL;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&attr);
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
	rc = posix_spawn(&launcher_pid, sandbox_jail_path, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0)
	{
		errno = rc;
		elog(WARNING, "sandbox_ext supervisor: could not start the resident jail launcher \"%s\": %m; using one-shot jails",
			 sandbox_jail_path);
		launcher_pid = 0;
		return false;
	}

	/* Wait (briefly) until it accepts connections. */
	for (int i = 0; i < 200; i++)
	{
		int			sock = launcher_connect();

		if (sock >= 0)
		{
			close(sock);	/* an empty connection is refused and forgotten */
			elog(LOG, "sandbox_ext supervisor: resident jail launcher started (pid %d, socket \"%s\")",
				 (int) launcher_pid, launcher_sock);
			return true;
		}
		if (!launcher_alive())
			break;
		pg_usleep(10000L);
	}
	elog(WARNING, "sandbox_ext supervisor: the resident jail launcher did not come up; using one-shot jails");
	launcher_stop();
	return false;
}

/*
 * Send one run to the launcher.  On success the run's stdout/stderr read
 * ends and the connection (as verdict_fd) are set up and true is returned;
 * false means "use the one-shot jail" (nothing was started).
 */
static bool
spawn_served(Run *run, const char *code_path, const char *ws_path,
			 const char *wall, const char *mem, const char *npids, const char *outlim)
{
	StringInfoData msg;
	int			outp[NSTREAMS][2] = {{-1, -1}, {-1, -1}};
	int			codefd = -1;
	int			sock = -1;
	struct msghdr mh;
	struct iovec iov;
	char		cbuf[CMSG_SPACE(3 * sizeof(int))];
	struct cmsghdr *cm;
	int			fds[3];
	const char *opts[][2] = {
		{"--language", run->language}, {"--workspace", ws_path}, {"--wall-time", wall},
		{"--memory", mem}, {"--pids", npids}, {"--output-limit", outlim}};

	if (!launcher_ensure())
		return false;
	sock = launcher_connect();
	if (sock < 0)
		return false;
	codefd = open(code_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (codefd < 0 || pipe2(outp[0], O_CLOEXEC) != 0 || pipe2(outp[1], O_CLOEXEC) != 0)
		goto fail;

	initStringInfo(&msg);
	appendBinaryStringInfo(&msg, LAUNCHER_MAGIC, sizeof(LAUNCHER_MAGIC));
	for (int i = 0; i < lengthof(opts); i++)
	{
		appendBinaryStringInfo(&msg, opts[i][0], strlen(opts[i][0]) + 1);
		appendBinaryStringInfo(&msg, opts[i][1], strlen(opts[i][1]) + 1);
	}
	for (int i = 0; i < run->nbinds; i++)
	{
		appendBinaryStringInfo(&msg, "--ro-bind", sizeof("--ro-bind"));
		appendBinaryStringInfo(&msg, run->binds[i], strlen(run->binds[i]) + 1);
	}

	memset(&mh, 0, sizeof(mh));
	iov.iov_base = msg.data;
	iov.iov_len = msg.len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(3 * sizeof(int));
	fds[0] = codefd;
	fds[1] = outp[0][1];
	fds[2] = outp[1][1];
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) != msg.len)
	{
		pfree(msg.data);
		goto fail;
	}
	pfree(msg.data);

	close(codefd);
	close_fd(&outp[0][1]);
	close_fd(&outp[1][1]);
	run->fd[STREAM_STDOUT] = outp[0][0];
	run->fd[STREAM_STDERR] = outp[1][0];
	run->verdict_fd = sock;
	for (int st = 0; st < NSTREAMS; st++)
		(void) fcntl(run->fd[st], F_SETFL, O_NONBLOCK);
	(void) fcntl(sock, F_SETFL, O_NONBLOCK);
	run->served = true;
	run->spawned = true;
	run->pid = 0;
	run->pidfd = -1;
	return true;

fail:
	if (codefd >= 0)
		close(codefd);
	if (sock >= 0)
		close(sock);
	for (int st = 0; st < NSTREAMS; st++)
	{
		close_fd(&outp[st][0]);
		close_fd(&outp[st][1]);
	}
	return false;
}

/*
 * Parse the launcher's answer: "sandbox-jail/1\0" rc "\0" verdict "\0"
 * message "\0".
 */
static void
parse_served_answer(Run *run, const char *buf, int len)
{
	const char *p = buf;
	const char *end = buf + len;
	const char *field[4];

	for (int i = 0; i < 4; i++)
	{
		const char *nul = memchr(p, '\0', end - p);

		if (p >= end || nul == NULL)
			return;				/* malformed: treated as no answer */
		field[i] = p;
		p = nul + 1;
	}
	if (strcmp(field[0], LAUNCHER_MAGIC) != 0)
		return;
	run->served_rc = atoi(field[1]);
	resetStringInfo(&run->verdict);
	appendStringInfoString(&run->verdict, field[2]);
	run->served_msg = MemoryContextStrdup(run->cxt, field[3]);
}

/*
 * Prepare the work directory and start the jail for a claimed run.  On
 * failure run->spawn_error says why; the run is then finished as
 * provision_failed (refunded) like any other infrastructure error.
 */
static void
spawn_jail(Run *run, const char *code, int wall_s, int memory_mb, int pids)
{
	char		code_path[MAXPGPATH];
	char		ws_path[MAXPGPATH];
	char		wall[32],
				mem[32],
				npids[32],
				outlim[32];
	int			outp[NSTREAMS][2] = {{-1, -1}, {-1, -1}};
	int			vp[2] = {-1, -1};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t	all,
				none;
	char	   *argv[32 + 2 * SANDBOX_MAX_SKILLS];
	int			argc = 0;
	char	   *envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
	int			rc;

	snprintf(code_path, sizeof(code_path), "%s/code", run->dir);
	strlcpy(ws_path, run->workspace, sizeof(ws_path));
	if (!write_file(code_path, code, strlen(code), &run->spawn_error))
		return;
	/* What the workspace holds now; what differs afterwards was produced. */
	{
		MemoryContext old = MemoryContextSwitchTo(run->cxt);

		run->before = manifest_scan(ws_path, MAX_SCAN_ENTRIES);
		MemoryContextSwitchTo(old);
	}

	snprintf(wall, sizeof(wall), "%d", wall_s);
	snprintf(mem, sizeof(mem), "%dM", memory_mb);
	snprintf(npids, sizeof(npids), "%d", pids);
	snprintf(outlim, sizeof(outlim), "%ld", (long) sandbox_output_limit_kb * 1024L);

	if (sandbox_jail_launcher &&
		spawn_served(run, code_path, ws_path, wall, mem, npids, outlim))
	{
		run->backstop = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													(int64) wall_s * 1000 + BACKSTOP_GRACE_MS);
		return;
	}

	if (pipe2(outp[0], O_CLOEXEC) != 0 || pipe2(outp[1], O_CLOEXEC) != 0 ||
		pipe2(vp, O_CLOEXEC) != 0)
	{
		run->spawn_error = psprintf("could not create pipes for the jail: %m");
		goto fail;
	}

	argv[argc++] = sandbox_jail_path;
	argv[argc++] = "--language";
	argv[argc++] = run->language;
	argv[argc++] = "--code-file";
	argv[argc++] = code_path;
	argv[argc++] = "--workspace";
	argv[argc++] = ws_path;
	argv[argc++] = "--wall-time";
	argv[argc++] = wall;
	argv[argc++] = "--memory";
	argv[argc++] = mem;
	argv[argc++] = "--pids";
	argv[argc++] = npids;
	argv[argc++] = "--output-limit";
	argv[argc++] = outlim;
	for (int i = 0; i < run->nbinds; i++)
	{
		argv[argc++] = "--ro-bind";
		argv[argc++] = run->binds[i];
	}
	argv[argc++] = "--verdict-fd";
	argv[argc++] = "3";
	argv[argc++] = "--quiet";
	argv[argc] = NULL;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, outp[0][1], 1);
	posix_spawn_file_actions_adddup2(&fa, outp[1][1], 2);
	posix_spawn_file_actions_adddup2(&fa, vp[1], 3);
	posix_spawn_file_actions_addclosefrom_np(&fa, 4);

	/* The jail starts with default dispositions and nothing blocked. */
	posix_spawnattr_init(&attr);
	sigfillset(&all);
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK |
							 POSIX_SPAWN_USEVFORK);

	rc = posix_spawn(&run->pid, sandbox_jail_path, &fa, &attr, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (rc != 0)
	{
		errno = rc;
		run->spawn_error = psprintf("could not execute sandbox.jail_path \"%s\": %m",
									sandbox_jail_path);
		goto fail;
	}
	run->spawned = true;

	run->pidfd = pidfd_open(run->pid, 0);
	if (run->pidfd < 0)
		elog(WARNING, "pidfd_open(%d) failed: %m; falling back to polling", (int) run->pid);

	close_fd(&outp[0][1]);
	close_fd(&outp[1][1]);
	close_fd(&vp[1]);
	run->fd[STREAM_STDOUT] = outp[0][0];
	run->fd[STREAM_STDERR] = outp[1][0];
	run->verdict_fd = vp[0];
	for (int st = 0; st < NSTREAMS; st++)
		(void) fcntl(run->fd[st], F_SETFL, O_NONBLOCK);
	(void) fcntl(run->verdict_fd, F_SETFL, O_NONBLOCK);
	run->backstop = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												(int64) wall_s * 1000 + BACKSTOP_GRACE_MS);
	return;

fail:
	for (int st = 0; st < NSTREAMS; st++)
	{
		close_fd(&outp[st][0]);
		close_fd(&outp[st][1]);
	}
	close_fd(&vp[0]);
	close_fd(&vp[1]);
}

static void
run_reset(Run *run)
{
	run->active = false;
	run->pid = 0;
	run->pidfd = -1;
	run->fd[0] = run->fd[1] = -1;
	run->verdict_fd = -1;
	run->exited = false;
	run->wait_status = 0;
	run->killed_by_us = false;
	run->cancel_sent = false;
	run->spawned = false;
	run->served = false;
	run->served_rc = -1;
	run->served_msg = NULL;
	run->finish_retry_at = 0;
	run->spawn_error = NULL;
	run->partial_len[0] = run->partial_len[1] = 0;
	run->bytes[0] = run->bytes[1] = 0;
	run->kept[0] = run->kept[1] = 0;
	run->truncated = false;
	run->dir[0] = '\0';
	run->workspace[0] = '\0';
	run->has_session = false;
	run->session[0] = '\0';
	run->nbinds = 0;
	run->before = NULL;
	run->produced = NIL;
	run->collected = false;
	run->caps.max_files = 100;
	run->caps.max_total_bytes = 50 * 1024 * 1024;
	run->caps.max_file_bytes = 20 * 1024 * 1024;
	run->caps.max_scan_entries = MAX_SCAN_ENTRIES;
	if (run->cxt)
		MemoryContextReset(run->cxt);
	resetStringInfo(&run->verdict);
	resetStringInfo(&run->pending[0]);
	resetStringInfo(&run->pending[1]);
}

static Run *
free_run(void)
{
	for (int i = 0; i < nruns_alloc; i++)
		if (!runs[i].active)
			return &runs[i];
	return NULL;
}

/* ----------------------------------------------------------------
 * Claim and start
 * ----------------------------------------------------------------
 */

typedef struct Claimed
{
	pg_uuid_t	id;
	char		language[16];
	char	   *code;
	int			wall_s;
	int			memory_mb;
	bool		has_session;
	char		session[UUID_LEN * 2 + 5];
	bool		fresh_session;
	bool		has_skills;
} Claimed;

static char *
uuid_text(Datum d)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, d));
}

static bool
mkdir_p(const char *path, char **err)
{
	char		buf[MAXPGPATH];

	strlcpy(buf, path, sizeof(buf));
	for (char *p = buf + 1; *p; p++)
	{
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, S_IRWXU) != 0 && errno != EEXIST)
		{
			*err = psprintf("could not create directory \"%s\": %m", buf);
			return false;
		}
		*p = '/';
	}
	if (mkdir(buf, S_IRWXU) != 0 && errno != EEXIST)
	{
		*err = psprintf("could not create directory \"%s\": %m", buf);
		return false;
	}
	return true;
}

/*
 * Materialise one skill version under work_root/skills/<id> (immutable, so
 * a directory that exists is complete: it is renamed into place only after
 * every file is written).  Runs inside the prepare transaction.
 */
static void
materialize_skill(const char *skill_id, char **path_out)
{
	char		final[MAXPGPATH];
	char		tmp[MAXPGPATH];
	struct stat st;
	Oid			argtype = UUIDOID;
	Datum		arg;
	char	   *err = NULL;
	int			rc;

	snprintf(final, sizeof(final), "%s/skills/%s", work_root(), skill_id);
	*path_out = pstrdup(final);
	if (stat(final, &st) == 0 && S_ISDIR(st.st_mode))
		return;

	snprintf(tmp, sizeof(tmp), "%s/skills/.%s.%d", work_root(), skill_id, MyProcPid);
	remove_work_dir(tmp);
	if (!mkdir_p(tmp, &err))
		elog(ERROR, "%s", err);
	arg = DirectFunctionCall1(uuid_in, CStringGetDatum(skill_id));
	rc = SPI_execute_with_args("SELECT path, content, executable FROM agent.skill_files "
							   "WHERE skill_id = $1 ORDER BY path",
							   1, &argtype, &arg, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading skill files failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *path = SPI_getvalue(tup, desc, 1);
		bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, desc, 2, &isnull));
		bool		exec = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));

		if (!place_file(tmp, path, VARDATA_ANY(content), VARSIZE_ANY_EXHDR(content),
						exec ? 0755 : 0644, &err))
			elog(ERROR, "could not materialise skill %s: %s", skill_id, err);
	}
	if (rename(tmp, final) != 0 && errno != EEXIST && errno != ENOTEMPTY)
		elog(ERROR, "could not install skill directory \"%s\": %m", final);
	remove_work_dir(tmp);
}

/*
 * Build what a claimed run needs on disk before its jail starts: its work
 * directory, its workspace (the conversation's session workspace, or a
 * fresh one), the conversation's files not yet in that workspace, and its
 * skills.  The file placement is recorded (agent.session_files) in the same
 * transaction as it is written, so a failure leaves neither.  A failure
 * sets run->spawn_error: the run ends provision_failed and is refunded.
 */
static void
prepare_run(Run *run, Claimed *c)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool existed = true;
	struct stat st;

	snprintf(run->dir, sizeof(run->dir), "%s/%s", work_root(), run->idstr);
	if (!mkdir_p(work_root(), &run->spawn_error))
		return;
	if (mkdir(run->dir, S_IRWXU) != 0)
	{
		run->spawn_error = psprintf("could not create work directory \"%s\": %m", run->dir);
		return;
	}
	if (c->has_session)
	{
		run->has_session = true;
		strlcpy(run->session, c->session, sizeof(run->session));
		snprintf(run->workspace, sizeof(run->workspace), "%s/sessions/%s/workspace",
				 work_root(), c->session);
		existed = (stat(run->workspace, &st) == 0);
		if (existed && c->fresh_session)
		{
			remove_work_dir(run->workspace);
			existed = false;
		}
	}
	else
		snprintf(run->workspace, sizeof(run->workspace), "%s/workspace", run->dir);
	if (!mkdir_p(run->workspace, &run->spawn_error))
		return;

	if (!c->has_session && !c->has_skills)
		return;

	PG_TRY();
	{
		Oid			argtype = UUIDOID;
		Datum		arg = UUIDPGetDatum(&run->id);
		int			rc;
		uint64		n;
		SPITupleTable *tt;

		xact_begin("preparing a sandbox workspace");
		if (c->has_session)
		{
			/* A session whose directory vanished gets all its files again. */
			if (!existed)
				SPI_execute_with_args("DELETE FROM agent.session_files sf USING agent.invocations i "
									  "WHERE i.id = $1 AND sf.session_id = i.session_id",
									  1, &argtype, &arg, NULL, false, 0);
			rc = SPI_execute_with_args("SELECT name, content FROM agent._files_to_place($1)",
									   1, &argtype, &arg, NULL, false, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "reading the conversation's files failed: %s", SPI_result_code_string(rc));
			for (uint64 i = 0; i < SPI_processed; i++)
			{
				HeapTuple	tup = SPI_tuptable->vals[i];
				TupleDesc	desc = SPI_tuptable->tupdesc;
				bool		isnull;
				char	   *name = SPI_getvalue(tup, desc, 1);
				bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, desc, 2, &isnull));
				char	   *err = NULL;

				if (!place_file(run->workspace, name, VARDATA_ANY(content),
								VARSIZE_ANY_EXHDR(content), 0644, &err))
					elog(ERROR, "could not place file \"%s\" in the workspace: %s", name, err);
			}
		}
		if (c->has_skills)
		{
			rc = SPI_execute_with_args("SELECT s.id, s.name FROM agent.invocations i "
									   "JOIN agent.agent_skills a ON a.agent_id = i.agent_id "
									   "JOIN agent.skills s ON s.id = a.skill_id "
									   "WHERE i.id = $1 ORDER BY s.name",
									   1, &argtype, &arg, NULL, true, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "reading the agent's skills failed: %s", SPI_result_code_string(rc));
			tt = SPI_tuptable;
			n = SPI_processed;
			if (n > SANDBOX_MAX_SKILLS)
				elog(ERROR, "the agent has %d skills; at most %d can be mounted",
					 (int) n, SANDBOX_MAX_SKILLS);
			for (uint64 i = 0; i < n; i++)
			{
				char	   *sid = SPI_getvalue(tt->vals[i], tt->tupdesc, 1);
				char	   *sname = SPI_getvalue(tt->vals[i], tt->tupdesc, 2);
				char	   *path;

				materialize_skill(sid, &path);
				run->binds[run->nbinds++] = MemoryContextStrdup(run->cxt,
																psprintf("%s:/skills/%s", path, sname));
			}
		}
		xact_commit();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		SPI_finish();
		pgstat_report_activity(STATE_IDLE, NULL);
		run->spawn_error = MemoryContextStrdup(run->cxt, edata->message);
		FreeErrorData(edata);
		ereport(LOG,
				(errmsg("sandbox_ext supervisor could not prepare invocation %s: %s",
						run->idstr, run->spawn_error)));
	}
	PG_END_TRY();
}

/*
 * Claim up to `want` approved invocations and start their jails.  Returns
 * the number claimed (0 when the queue is empty).
 */
static int
claim_and_start(int want)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	Claimed    *claimed = palloc0(sizeof(Claimed) * want);
	int			n = 0;
	bool		any_started = false;

	PG_TRY();
	{
		Datum		arg = Int32GetDatum(want);
		Oid			argtype = INT4OID;
		int			rc;

		xact_begin("claiming approved invocations");
		rc = SPI_execute_with_args("SELECT c.id, c.language, c.code, c.wall_time_s, c.memory_mb, "
								   "c.session_id, c.fresh_session, "
								   "EXISTS (SELECT 1 FROM agent.invocations i "
								   "JOIN agent.agent_skills a ON a.agent_id = i.agent_id "
								   "WHERE i.id = c.id) "
								   "FROM agent._claim_invocations($1) c",
								   1, &argtype, &arg, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "claiming failed: %s", SPI_result_code_string(rc));
		for (uint64 i = 0; i < SPI_processed && n < want; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;
			Datum		d;
			MemoryContext spicxt;
			char	   *lang;

			d = SPI_getbinval(tup, desc, 1, &isnull);
			memcpy(&claimed[n].id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
			spicxt = MemoryContextSwitchTo(oldcxt);
			lang = SPI_getvalue(tup, desc, 2);
			strlcpy(claimed[n].language, lang ? lang : "", sizeof(claimed[n].language));
			claimed[n].code = SPI_getvalue(tup, desc, 3);
			MemoryContextSwitchTo(spicxt);
			d = SPI_getbinval(tup, desc, 4, &isnull);
			claimed[n].wall_s = isnull ? sandbox_default_wall_time_s : DatumGetInt32(d);
			d = SPI_getbinval(tup, desc, 5, &isnull);
			claimed[n].memory_mb = isnull ? sandbox_default_memory_mb : DatumGetInt32(d);
			d = SPI_getbinval(tup, desc, 6, &isnull);
			claimed[n].has_session = !isnull;
			if (!isnull)
				strlcpy(claimed[n].session, uuid_text(d), sizeof(claimed[n].session));
			d = SPI_getbinval(tup, desc, 7, &isnull);
			claimed[n].fresh_session = !isnull && DatumGetBool(d);
			d = SPI_getbinval(tup, desc, 8, &isnull);
			claimed[n].has_skills = !isnull && DatumGetBool(d);
			n++;
		}
		xact_commit();
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		n = 0;
	}
	PG_END_TRY();

	/* The claim is committed: from here on every run must be finished. */
	for (int i = 0; i < n; i++)
	{
		Run		   *run = free_run();

		Assert(run != NULL);
		run_reset(run);
		run->active = true;
		memcpy(&run->id, &claimed[i].id, sizeof(pg_uuid_t));
		strlcpy(run->idstr, DatumGetCString(DirectFunctionCall1(uuid_out,
																UUIDPGetDatum(&run->id))),
				sizeof(run->idstr));
		strlcpy(run->language, claimed[i].language, sizeof(run->language));
		nactive++;
		prepare_run(run, &claimed[i]);
		if (run->spawn_error == NULL)
			spawn_jail(run,
					   claimed[i].code ? claimed[i].code : "",
					   Min(Max(claimed[i].wall_s, 1), sandbox_max_wall_time_s),
					   Min(Max(claimed[i].memory_mb, 16), sandbox_max_memory_mb),
					   sandbox_default_pids);
		slot_publish(run);
		if (run->spawned)
			any_started = true;
		if (claimed[i].code)
			pfree(claimed[i].code);
	}

	/* One short transaction marks every started jail as running. */
	if (any_started)
	{
		PG_TRY();
		{
			ProducedCaps caps = {100, 50 * 1024 * 1024, 20 * 1024 * 1024, MAX_SCAN_ENTRIES};

			xact_begin("marking invocations running");
			if (SPI_execute("SELECT agent.setting('max_produced_files')::integer, "
							"agent.setting('max_produced_bytes')::bigint, "
							"agent.setting('max_produced_file_bytes')::bigint",
							true, 1) == SPI_OK_SELECT && SPI_processed == 1)
			{
				bool		isnull;

				caps.max_files = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc, 1, &isnull));
				caps.max_total_bytes = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																   SPI_tuptable->tupdesc, 2, &isnull));
				caps.max_file_bytes = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																  SPI_tuptable->tupdesc, 3, &isnull));
			}
			for (int i = 0; i < nruns_alloc; i++)
				if (runs[i].active && runs[i].spawned)
					runs[i].caps = caps;
			for (int i = 0; i < nruns_alloc; i++)
			{
				Run		   *run = &runs[i];
				Oid			types[2] = {UUIDOID, INT4OID};
				Datum		values[2];

				if (!run->active || !run->spawned || run->exited || run->slot < 0)
					continue;
				values[0] = UUIDPGetDatum(&run->id);
				values[1] = Int32GetDatum(run->pid);
				SPI_execute_with_args("SELECT agent._mark_running($1, $2)",
									  2, types, values, NULL, false, 0);
			}
			xact_commit();
		}
		PG_CATCH();
		{
			xact_abort_after_error(oldcxt);
		}
		PG_END_TRY();
	}
	pfree(claimed);
	return n;
}

/* ----------------------------------------------------------------
 * Finishing
 * ----------------------------------------------------------------
 */

static bool
run_complete(Run *run)
{
	if (run->finish_retry_at != 0)
		return GetCurrentTimestamp() >= run->finish_retry_at;
	if (!run->spawned)
		return true;
	if (!run->exited)
		return false;
	if (run->fd[0] < 0 && run->fd[1] < 0 && run->verdict_fd < 0)
		return true;
	/* A grandchild holding a pipe open must not keep the run alive. */
	return TimestampDifferenceExceeds(run->exited_at, GetCurrentTimestamp(), DRAIN_GRACE_MS);
}

static void
finish_run(Run *run)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	char	   *error = NULL;
	volatile int jail_status = -1;

	if (run->spawn_error)
		error = run->spawn_error;
	else if (run->served)
	{
		if (run->killed_by_us)
			error = psprintf("the sandbox was killed by the supervisor after its deadline");
		else if (run->served_rc < 0)
			error = psprintf("the resident jail launcher closed the connection without a verdict");
		else if (run->served_rc == 2)
			error = psprintf("the resident jail launcher refused the request: %s",
							 run->served_msg ? run->served_msg : "");
		else
			jail_status = run->served_rc;
	}
	else if (run->exited)
	{
		if (WIFEXITED(run->wait_status))
			jail_status = WEXITSTATUS(run->wait_status);
		else if (WIFSIGNALED(run->wait_status))
		{
			jail_status = 128 + WTERMSIG(run->wait_status);
			if (run->killed_by_us)
				error = psprintf("sandbox-jail killed by the supervisor after its deadline");
			else
				error = psprintf("sandbox-jail died of signal %d", WTERMSIG(run->wait_status));
		}
	}

	/* The files the run left in its workspace, read once. */
	if (run->spawned && !run->collected && error == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(run->cxt);

		run->produced = collect_produced(run->workspace, run->before, &run->caps);
		run->collected = true;
		MemoryContextSwitchTo(old);
	}

	run->finish_retry_at = 0;
	PG_TRY();
	{
		Oid			types[6] = {UUIDOID, TEXTOID, INT4OID, TEXTOID, BOOLOID, BOOLOID};
		Datum		values[6];
		char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
		int			rc;

		xact_begin("finishing an invocation");
		{
			ListCell   *lc;
			Oid			ftypes[5] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, BYTEAOID};

			foreach(lc, run->produced)
			{
				ProducedFile *pf = (ProducedFile *) lfirst(lc);
				Datum		fv[5];
				char		fn[5] = {' ', ' ', ' ', ' ', ' '};

				fv[0] = UUIDPGetDatum(&run->id);
				fv[1] = CStringGetTextDatum(pf->name);
				fv[2] = CStringGetTextDatum(pf->status);
				if (pf->reason)
					fv[3] = CStringGetTextDatum(pf->reason);
				else
					fn[3] = 'n';
				if (pf->data)
				{
					bytea	   *b = palloc(VARHDRSZ + pf->len);

					SET_VARSIZE(b, VARHDRSZ + pf->len);
					memcpy(VARDATA(b), pf->data, pf->len);
					fv[4] = PointerGetDatum(b);
				}
				else
					fn[4] = 'n';
				if (SPI_execute_with_args("SELECT agent._store_produced_file($1, $2, $3, $4, $5)",
										  5, ftypes, fv, fn, false, 0) != SPI_OK_SELECT)
					elog(ERROR, "storing a produced file failed");
			}
		}
		values[0] = UUIDPGetDatum(&run->id);
		if (run->verdict.len > 0)
			values[1] = CStringGetTextDatum(run->verdict.data);
		else
			nulls[1] = 'n';
		values[2] = Int32GetDatum(jail_status);
		if (error)
			values[3] = CStringGetTextDatum(error);
		else
			nulls[3] = 'n';
		values[4] = BoolGetDatum(run->spawned);
		values[5] = BoolGetDatum(run->truncated);
		rc = SPI_execute_with_args("SELECT agent._finish_invocation($1, $2, $3, $4, $5, $6)",
								   6, types, values, nulls, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "finishing failed: %s", SPI_result_code_string(rc));
		xact_commit();
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);

		/*
		 * The finish itself failed (a bug, or the database is out of
		 * space).  Keep the slot and retry a little later: the finish is
		 * fenced on the row's state, so a retry can never charge or audit
		 * twice, and recovery resolves the row if we die meanwhile.
		 */
		ereport(WARNING,
				(errmsg("sandbox_ext supervisor could not finish invocation %s; retrying in %d s",
						run->idstr, FINISH_RETRY_MS / 1000)));
		run->finish_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), FINISH_RETRY_MS);
	}
	PG_END_TRY();
	if (run->finish_retry_at != 0)
		return;

	close_fd(&run->fd[0]);
	close_fd(&run->fd[1]);
	close_fd(&run->verdict_fd);
	close_fd(&run->pidfd);
	if (run->dir[0])
		remove_work_dir(run->dir);
	run->active = false;
	nactive--;
	slot_publish(run);
	run->produced = NIL;
	run->before = NULL;
	MemoryContextReset(run->cxt);

	/* Wake backends sleeping in agent.wait(). */
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->finished_count++;
	SpinLockRelease(&sandbox_shared->mutex);
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

/* ----------------------------------------------------------------
 * Event handling
 * ----------------------------------------------------------------
 */

static void
read_stream(Run *run, int st)
{
	char		buf[OUTPUT_READ_SIZE];

	for (;;)
	{
		ssize_t		r = read(run->fd[st], buf, sizeof(buf));

		if (r > 0)
		{
			int64		limit = (int64) sandbox_output_limit_kb * 1024;
			int			keep = (int) Min((int64) r, Max(limit - run->kept[st], 0));

			/*
			 * The jail caps its output too; this cap holds even if it did
			 * not, so the table never grows past the setting.
			 */
			run->bytes[st] += r;
			if (keep < r)
				run->truncated = true;
			if (keep == 0)
				continue;
			run->kept[st] += keep;
			if (run->pending[st].len == 0)
				run->pending_at[st] = GetCurrentTimestamp();
			append_utf8(run, st, buf, keep, false);
			if (run->pending[st].len >= OUTPUT_READ_SIZE)
				break;			/* store it before reading more */
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		/* EOF or error */
		append_utf8(run, st, "", 0, true);
		close_fd(&run->fd[st]);
		break;
	}
	slot_update_bytes(run);
}

static void
read_verdict(Run *run)
{
	static char buf[65536];		/* a whole SOCK_SEQPACKET answer */

	if (run->served)
	{
		for (;;)
		{
			ssize_t		r = recv(run->verdict_fd, buf, sizeof(buf), 0);

			if (r > 0)
			{
				if (run->served_rc < 0)
					parse_served_answer(run, buf, (int) r);
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0 && errno == EAGAIN)
				break;
			/* EOF (or an error): the run is over, answered or not. */
			close_fd(&run->verdict_fd);
			run->exited = true;
			run->exited_at = GetCurrentTimestamp();
			break;
		}
		goto trim;
	}

	for (;;)
	{
		ssize_t		r = read(run->verdict_fd, buf, sizeof(buf));

		if (r > 0)
		{
			/* A verdict is one short line; refuse to buffer without bound. */
			if (run->verdict.len < 65536)
				appendBinaryStringInfo(&run->verdict, buf, r);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		close_fd(&run->verdict_fd);
		break;
	}
trim:
	/* Trim the trailing newline so the text casts cleanly to jsonb. */
	while (run->verdict.len > 0 &&
		   (run->verdict.data[run->verdict.len - 1] == '\n' ||
			run->verdict.data[run->verdict.len - 1] == '\r'))
		run->verdict.data[--run->verdict.len] = '\0';
}

static void
reap(Run *run)
{
	int			status;
	pid_t		r;

	if (!run->spawned || run->exited || run->served)
		return;
	r = waitpid(run->pid, &status, WNOHANG);
	if (r == run->pid)
	{
		run->exited = true;
		run->wait_status = status;
		run->exited_at = GetCurrentTimestamp();
		close_fd(&run->pidfd);
	}
	else if (r < 0 && errno == ECHILD)
	{
		run->exited = true;
		run->wait_status = 0;
		run->exited_at = GetCurrentTimestamp();
		close_fd(&run->pidfd);
	}
}

static void
signal_run(Run *run, int sig)
{
	if (!run->spawned || run->exited)
		return;
	if (run->served)
	{
		/*
		 * Shutting down our side asks the launcher to kill the run (it
		 * still answers with a "killed" verdict); to kill at once, drop
		 * the connection.
		 */
		if (sig == SIGKILL)
		{
			close_fd(&run->verdict_fd);
			run->exited = true;
			run->exited_at = GetCurrentTimestamp();
		}
		else if (run->verdict_fd >= 0)
			(void) shutdown(run->verdict_fd, SHUT_WR);
		return;
	}
	if (run->pidfd >= 0)
		(void) pidfd_send_signal(run->pidfd, sig, NULL, 0);
	else
		(void) kill(run->pid, sig);
}

/*
 * Ask SQL which of our running invocations have a cancel request, and
 * SIGTERM their jails (the jail kills its sandbox and still reports a
 * verdict, which _finish_invocation maps to `cancelled`).
 */
static uint64 cancel_generation_seen = 0;

static void
check_cancellations(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	Datum	   *ids;
	int			n = 0;
	uint64		gen;

	/* Only when a cancel request committed since the last look. */
	SpinLockAcquire(&sandbox_shared->mutex);
	gen = sandbox_shared->cancel_generation;
	SpinLockRelease(&sandbox_shared->mutex);
	if (gen == cancel_generation_seen)
		return;
	if (nactive == 0)
	{
		cancel_generation_seen = gen;
		return;
	}
	ids = palloc(sizeof(Datum) * nruns_alloc);
	for (int i = 0; i < nruns_alloc; i++)
		if (runs[i].active && runs[i].spawned && !runs[i].cancel_sent)
			ids[n++] = UUIDPGetDatum(&runs[i].id);
	if (n == 0)
	{
		pfree(ids);
		return;
	}

	PG_TRY();
	{
		ArrayType  *arr;
		Oid			argtype = UUIDARRAYOID;
		Datum		arg;
		int			rc;

		xact_begin("checking cancellations");
		arr = construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR);
		arg = PointerGetDatum(arr);
		rc = SPI_execute_with_args("SELECT id FROM agent.invocations "
								   "WHERE id = ANY($1) AND cancel_requested_at IS NOT NULL",
								   1, &argtype, &arg, NULL, true, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "checking cancellations failed: %s", SPI_result_code_string(rc));
		for (uint64 j = 0; j < SPI_processed; j++)
		{
			bool		isnull;
			pg_uuid_t  *id = DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[j],
														 SPI_tuptable->tupdesc, 1, &isnull));

			for (int i = 0; i < nruns_alloc; i++)
			{
				if (runs[i].active && memcmp(&runs[i].id, id, sizeof(pg_uuid_t)) == 0)
				{
					elog(LOG, "sandbox_ext supervisor: cancelling invocation %s", runs[i].idstr);
					signal_run(&runs[i], SIGTERM);
					runs[i].cancel_sent = true;
				}
			}
		}
		xact_commit();
		cancel_generation_seen = gen;
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
	}
	PG_END_TRY();
	pfree(ids);
}

/* Kill every jail we own; used on shutdown. */
static void
kill_all_runs(void)
{
	for (int i = 0; i < nruns_alloc; i++)
		if (runs[i].active)
			signal_run(&runs[i], SIGKILL);
	for (int i = 0; i < nruns_alloc; i++)
		if (runs[i].active && runs[i].spawned && !runs[i].exited && !runs[i].served)
			(void) waitpid(runs[i].pid, NULL, 0);
	launcher_stop();
}

/* ----------------------------------------------------------------
 * Sessions: delete the workspaces of sessions that ended
 * ----------------------------------------------------------------
 */

static TimestampTz last_session_sweep = 0;

static void
sweep_sessions(bool force)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;
	List	   *volatile live = NIL;

	if (!force && !TimestampDifferenceExceeds(last_session_sweep, GetCurrentTimestamp(), 1000))
		return;
	last_session_sweep = GetCurrentTimestamp();
	snprintf(dir, sizeof(dir), "%s/sessions", work_root());
	d = opendir(dir);
	if (d == NULL)
		return;

	PG_TRY();
	{
		xact_begin("sweeping ended sessions");
		if (SPI_execute("SELECT agent._live_session_ids()::text", true, 0) != SPI_OK_SELECT)
			elog(ERROR, "listing live sessions failed");
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			char	   *id = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
			MemoryContext spicxt = MemoryContextSwitchTo(oldcxt);

			/* The list must outlive the SPI context. */
			live = lappend(live, pstrdup(id));
			MemoryContextSwitchTo(spicxt);
		}
		xact_commit();
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		closedir(d);
		return;
	}
	PG_END_TRY();

	while ((de = readdir(d)) != NULL)
	{
		ListCell   *lc;
		bool		keep = false;
		char		path[MAXPGPATH];

		if (de->d_name[0] == '.')
			continue;
		foreach(lc, live)
			if (strcmp((char *) lfirst(lc), de->d_name) == 0)
				keep = true;
		for (int i = 0; i < nruns_alloc && runs; i++)
			if (runs[i].active && runs[i].has_session && strcmp(runs[i].session, de->d_name) == 0)
				keep = true;
		if (keep)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		elog(LOG, "sandbox_ext supervisor: removing the workspace of ended session %s", de->d_name);
		remove_work_dir(path);
	}
	closedir(d);
	list_free_deep(live);
}

/* ----------------------------------------------------------------
 * Recovery
 * ----------------------------------------------------------------
 */

static void
recover(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	PG_TRY();
	{
		int			rc;

		xact_begin("recovering invocations left by a previous supervisor");
		rc = SPI_execute("SELECT agent._supervisor_recover()", false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "recovery failed: %s", SPI_result_code_string(rc));
		xact_commit();
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		/* Without recovery, claiming could run on stale state: retry later. */
		proc_exit(1);
	}
	PG_END_TRY();
	clean_work_root();
}

/* ----------------------------------------------------------------
 * Main loop
 * ----------------------------------------------------------------
 */

/* Publish whether an approval should wake us (shmem.c). */
static void
set_wants_work(bool wants)
{
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_wants_work = wants;
	SpinLockRelease(&sandbox_shared->mutex);
}

static void
supervisor_shmem_exit(int code, Datum arg)
{
	if (runs)
		kill_all_runs();
	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = 0;
	sandbox_shared->supervisor_latch = NULL;
	sandbox_shared->slots_in_use = 0;
	for (int i = 0; i < SANDBOX_MAX_SLOTS; i++)
		sandbox_shared->slots[i].in_use = false;
	SpinLockRelease(&sandbox_shared->mutex);
	ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

static bool
extension_installed(void)
{
	bool		found = false;

	xact_begin("checking for the extension");
	if (SPI_execute("SELECT 1 FROM pg_extension WHERE extname = 'sandbox_ext'", true, 1) == SPI_OK_SELECT)
		found = SPI_processed > 0;
	xact_commit();
	return found;
}

void
sandbox_supervisor_main(Datum main_arg)
{
	TimestampTz next_poll;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	if (sandbox_shared == NULL)
		elog(FATAL, "sandbox_ext shared memory is not initialised");

	BackgroundWorkerInitializeConnection(sandbox_database, NULL, 0);
	pgstat_report_appname("sandbox_ext supervisor");

	SpinLockAcquire(&sandbox_shared->mutex);
	sandbox_shared->supervisor_pid = MyProcPid;
	sandbox_shared->supervisor_latch = &MyProc->procLatch;
	sandbox_shared->supervisor_wants_work = true;
	sandbox_shared->supervisor_started_at = GetCurrentTimestamp();
	SpinLockRelease(&sandbox_shared->mutex);
	before_shmem_exit(supervisor_shmem_exit, (Datum) 0);

	/* The extension may be created after the server starts: wait for it. */
	while (!extension_installed())
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 IDLE_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			proc_exit(1);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}

	recover();

	nruns_alloc = SANDBOX_MAX_SLOTS;
	runs = MemoryContextAllocZero(TopMemoryContext, sizeof(Run) * nruns_alloc);
	for (int i = 0; i < nruns_alloc; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&runs[i].verdict);
		initStringInfo(&runs[i].pending[0]);
		initStringInfo(&runs[i].pending[1]);
		MemoryContextSwitchTo(old);
		runs[i].cxt = AllocSetContextCreate(TopMemoryContext, "sandbox run",
											ALLOCSET_DEFAULT_SIZES);
		run_reset(&runs[i]);
		runs[i].slot = i;
	}
	sweep_sessions(true);
	(void) launcher_ensure();
	elog(LOG, "sandbox_ext supervisor started (database \"%s\", %d slots, jail \"%s\")",
		 sandbox_database, sandbox_max_concurrent_runs, sandbox_jail_path);

	next_poll = 0;
	for (;;)
	{
		WaitEventSet *wes;
		WaitEvent	events[SANDBOX_MAX_SLOTS * 4 + 2];
		int			nevents;
		long		timeout;
		TimestampTz now;
		bool		latch_set = false;
		MemoryContext loopcxt = CurrentMemoryContext;

		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
		{
			elog(LOG, "sandbox_ext supervisor shutting down; %d run(s) killed", nactive);
			proc_exit(1);
		}
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (!sandbox_jail_launcher)
				launcher_stop();
		}

		/*
		 * Fill free slots.  A full claim means more may be waiting.  Whether
		 * a slot is free is published first (approvals wake us only then;
		 * see sandbox_wake_supervisor_now) and again once filled.
		 */
		now = GetCurrentTimestamp();
		set_wants_work(Min(sandbox_max_concurrent_runs, nruns_alloc) > nactive);
		for (;;)
		{
			int			limit = Min(sandbox_max_concurrent_runs, nruns_alloc);
			int			want = limit - nactive;
			int			got;

			if (want <= 0)
				break;
			got = claim_and_start(want);
			if (got < want)
				break;
		}
		set_wants_work(Min(sandbox_max_concurrent_runs, nruns_alloc) > nactive);
		next_poll = TimestampTzPlusMilliseconds(now, IDLE_POLL_MS);

		/* Finish what failed to start right away. */
		for (int i = 0; i < nruns_alloc; i++)
			if (runs[i].active && !runs[i].spawned && run_complete(&runs[i]))
				finish_run(&runs[i]);

		/* Build the wait set: latch, postmaster death, pipes, pidfds. */
		timeout = IDLE_POLL_MS;
		now = GetCurrentTimestamp();
		wes = CreateWaitEventSet(CurrentMemoryContext, nruns_alloc * 4 + 2);
		AddWaitEventToSet(wes, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(wes, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (int i = 0; i < nruns_alloc; i++)
		{
			Run		   *run = &runs[i];
			long		ms;

			if (!run->active)
				continue;
			for (int st = 0; st < NSTREAMS; st++)
				if (run->fd[st] >= 0)
					AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->fd[st], NULL, run);
			if (run->verdict_fd >= 0)
				AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->verdict_fd, NULL, run);
			if (run->pidfd >= 0)
				AddWaitEventToSet(wes, WL_SOCKET_READABLE, run->pidfd, NULL, run);
			for (int st = 0; st < NSTREAMS; st++)
				if (run->pending[st].len > 0)
					timeout = Min(timeout,
								  Max(TimestampDifferenceMilliseconds(now,
																	  TimestampTzPlusMilliseconds(run->pending_at[st],
																								  OUTPUT_COALESCE_MS)), 0));
			else if (!run->exited && !run->served)
				timeout = Min(timeout, 100);	/* no pidfd: poll waitpid */
			if (run->finish_retry_at != 0)
				ms = TimestampDifferenceMilliseconds(now, run->finish_retry_at);
			else if (run->exited)
				ms = TimestampDifferenceMilliseconds(now,
													 TimestampTzPlusMilliseconds(run->exited_at,
																				 DRAIN_GRACE_MS));
			else
				ms = TimestampDifferenceMilliseconds(now, run->backstop);
			timeout = Min(timeout, Max(ms, 0));
		}
		timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, next_poll), 0));

		nevents = WaitEventSetWait(wes, timeout, events, lengthof(events), PG_WAIT_EXTENSION);
		for (int e = 0; e < nevents; e++)
		{
			WaitEvent  *ev = &events[e];
			Run		   *run = (Run *) ev->user_data;

			if (ev->events & WL_LATCH_SET)
			{
				ResetLatch(MyLatch);
				latch_set = true;
				continue;
			}
			if (run == NULL)
				continue;
			if (ev->fd == run->fd[STREAM_STDOUT])
				read_stream(run, STREAM_STDOUT);
			else if (ev->fd == run->fd[STREAM_STDERR])
				read_stream(run, STREAM_STDERR);
			else if (ev->fd == run->verdict_fd)
				read_verdict(run);
			else if (ev->fd == run->pidfd)
				reap(run);
		}
		FreeWaitEventSet(wes);
		MemoryContextSwitchTo(loopcxt);

		/* Deadlines, and jails that exited without a pidfd wake-up. */
		now = GetCurrentTimestamp();
		for (int i = 0; i < nruns_alloc; i++)
		{
			Run		   *run = &runs[i];

			if (!run->active || !run->spawned)
				continue;
			if (!run->exited && run->pidfd < 0 && !run->served)
				reap(run);
			if (!run->exited && now >= run->backstop && !run->killed_by_us)
			{
				elog(WARNING, "sandbox_ext supervisor: jail of invocation %s passed its deadline; killing it",
					 run->idstr);
				signal_run(run, SIGKILL);
				run->killed_by_us = true;
			}
			/* Drain what is left once the jail is gone. */
			if (run->exited)
			{
				for (int st = 0; st < NSTREAMS; st++)
					if (run->fd[st] >= 0)
						read_stream(run, st);
				if (run->verdict_fd >= 0)
					read_verdict(run);
			}
		}

		flush_output();

		check_cancellations();
		if (latch_set || nevents == 0)
			sweep_sessions(false);

		for (int i = 0; i < nruns_alloc; i++)
			if (runs[i].active && run_complete(&runs[i]))
				finish_run(&runs[i]);
	}
}

/*
 * Register the supervisor.  Called from _PG_init while the postmaster
 * loads shared_preload_libraries.
 */
void
sandbox_supervisor_register(void)
{
	sandbox_register_worker("sandbox_supervisor_main", "sandbox_ext supervisor");
}
