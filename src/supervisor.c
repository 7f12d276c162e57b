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
#include "access/xlog.h"
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
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
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
/* How often results staged behind a held lock are tried again. */
#define PENDING_RETRY_MS	1000
/* Delay before storing the output of a run again after a failed try. */
#define OUTPUT_RETRY_MS		1000
/*
 * Backstop for every lock the supervisor's transactions take: the SQL steps
 * skip or refuse (NOWAIT) the locks a backend can hold, so a wait this long
 * means a lock nobody foresaw, and the step is retried rather than stall
 * every tenant behind it.
 */
#define SUPERVISOR_LOCK_TIMEOUT "500ms"
/* How often the work directory is checked while it is unusable. */
#define WORK_DIR_CHECK_MS	10000
/* Most skills mounted into one sandbox. */
#define SANDBOX_MAX_SKILLS	16
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
	bool		marked;		/* _mark_running tried, caps read */
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
	TimestampTz output_retry_at;	/* storing failed: not before this */
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
	/* the session workspace after the run (collected with the files) */
	bool		measured;
	int64		ws_bytes;
	int			ws_entries;
	char	   *ws_reset;		/* why it must be rebuilt, or NULL */
} Run;

static Run *runs;				/* sandbox.max_concurrent_runs entries */
static int	nruns_alloc;
static int	nactive;

/* Prepared plans, kept across transactions. */
static SPIPlanPtr plan_output = NULL;

/* Results staged behind a lock held elsewhere (agent._finish_pending). */
static bool results_pending = false;
static TimestampTz pending_retry_at = 0;

/* Why nothing is claimed (the work directory is unusable), or NULL. */
static char *work_problem = NULL;
static TimestampTz work_checked_at = 0;

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
	sandbox_shared->slots_in_use = nactive;
	SpinLockRelease(&sandbox_shared->mutex);
}

/*
 * The work root as an absolute path: the jail resolves the paths we give
 * it after changing directory.  Empty sandbox.work_dir (the default) is
 * SANDBOX_DEFAULT_WORK_BASE/<system identifier>, so that several clusters
 * of one host share the mount without sharing directories; a relative one
 * is relative to the data directory.
 */
static const char *
work_root(void)
{
	static char path[MAXPGPATH];

	if (sandbox_work_dir[0] == '\0')
		snprintf(path, sizeof(path), "%s/" UINT64_FORMAT, SANDBOX_DEFAULT_WORK_BASE,
				 GetSystemIdentifier());
	else if (is_absolute_path(sandbox_work_dir))
		strlcpy(path, sandbox_work_dir, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s/%s", DataDir, sandbox_work_dir);
	return path;
}

/* Is path on the filesystem of the directory `other` (followed)? */
static bool
same_filesystem(const struct stat *st, const char *other)
{
	struct stat ost;

	return stat(other, &ost) == 0 && ost.st_dev == st->st_dev;
}

/*
 * Why the work root cannot be used, or NULL when it can (creating it if
 * needed).  A work root on the filesystem of the data directory or the WAL
 * is refused unless sandbox.work_dir_on_data_fs says otherwise: a run that
 * fills its workspace must never fill the disk the database writes to.
 */
static char *
work_dir_problem(void)
{
	const char *root = work_root();
	char		wal[MAXPGPATH];
	struct stat st;

	if (sandbox_work_dir[0] == '\0' && stat(SANDBOX_DEFAULT_WORK_BASE, &st) != 0)
		return psprintf("the default work directory \"%s\" does not exist; run "
						"scripts/jail-host-setup.sh as root, or set sandbox.work_dir",
						SANDBOX_DEFAULT_WORK_BASE);
	if (mkdir(root, S_IRWXU) != 0 && errno != EEXIST)
		return psprintf("could not create sandbox.work_dir \"%s\": %m", root);
	if (lstat(root, &st) != 0)
		return psprintf("could not stat sandbox.work_dir \"%s\": %m", root);
	if (!S_ISDIR(st.st_mode))
		return psprintf("sandbox.work_dir \"%s\" is not a directory", root);
	if (access(root, W_OK | X_OK) != 0)
		return psprintf("sandbox.work_dir \"%s\" is not writable: %m", root);
	if (!sandbox_work_dir_on_data_fs)
	{
		snprintf(wal, sizeof(wal), "%s/pg_wal", DataDir);
		if (same_filesystem(&st, DataDir) || same_filesystem(&st, wal))
			return psprintf("sandbox.work_dir \"%s\" is on the filesystem of the data directory "
							"or the WAL; put it on a filesystem of its own (scripts/jail-host-setup.sh "
							"mounts one), or set sandbox.work_dir_on_data_fs = on", root);
	}
	return NULL;
}

/*
 * Check the work root (now, or when the last check is old), publish the
 * answer for agent.worker_status() and log a change.  True when usable.
 */
static bool
work_dir_usable(bool force)
{
	char	   *problem;
	bool		changed;

	if (!force && work_problem == NULL)
		return true;
	if (!force && !TimestampDifferenceExceeds(work_checked_at, GetCurrentTimestamp(),
											  WORK_DIR_CHECK_MS))
		return false;
	work_checked_at = GetCurrentTimestamp();
	problem = work_dir_problem();
	changed = (problem == NULL) != (work_problem == NULL) ||
		(problem && strcmp(problem, work_problem) != 0);
	if (work_problem)
		pfree(work_problem);
	work_problem = problem ? MemoryContextStrdup(TopMemoryContext, problem) : NULL;
	if (changed && problem)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("the sandbox supervisor claims no work: %s", problem)));
	else if (changed)
		ereport(LOG, (errmsg("the sandbox work directory \"%s\" is usable", work_root())));
	SpinLockAcquire(&sandbox_shared->mutex);
	strlcpy(sandbox_shared->work_dir, work_root(), sizeof(sandbox_shared->work_dir));
	strlcpy(sandbox_shared->problem, problem ? problem : "", sizeof(sandbox_shared->problem));
	SpinLockRelease(&sandbox_shared->mutex);
	return problem == NULL;
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
		if (strcmp(de->d_name, "sessions") == 0 || strcmp(de->d_name, "skills") == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", work_root(), de->d_name);
		elog(LOG, "removing leftover work directory \"%s\"", path);
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
 * Store the ready output of one run, in a subtransaction of the caller's:
 * one row per stream (seq assigned in SQL) and a NOTIFY.  A run whose
 * output cannot be stored now (its row locked elsewhere, say) keeps it and
 * is tried again after OUTPUT_RETRY_MS; the other runs' output commits.
 */
static bool
store_run_output(Run *run, const bool ready[NSTREAMS])
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		for (int st = 0; st < NSTREAMS; st++)
		{
			Datum		values[3];
			int			rc;

			if (!ready[st])
				continue;
			values[0] = UUIDPGetDatum(&run->id);
			values[1] = CStringGetTextDatum(stream_names[st]);
			values[2] = PointerGetDatum(cstring_to_text_with_len(run->pending[st].data,
																 run->pending[st].len));
			rc = SPI_execute_plan(plan_output, values, NULL, false, 0);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "agent._append_output failed: %s", SPI_result_code_string(rc));
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		ereport(LOG,
				(errmsg("could not store the output of invocation %s yet: %s",
						run->idstr, edata->message)));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/*
 * Store the pending output of every run in one transaction.  The
 * notification carries no output: a listener reads it through
 * agent.read_output(), under row-level security.
 */
static void
flush_output(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	bool		any = false;
	TimestampTz now = GetCurrentTimestamp();
	bool		ready[SANDBOX_MAX_SLOTS][NSTREAMS];
	bool		stored[SANDBOX_MAX_SLOTS];

	for (int i = 0; i < nruns_alloc; i++)
		for (int st = 0; st < NSTREAMS; st++)
		{
			ready[i][st] = runs[i].active && now >= runs[i].output_retry_at &&
				stream_ready(&runs[i], st, now);
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
			stored[i] = false;
			if (runs[i].active && (ready[i][0] || ready[i][1]))
				stored[i] = store_run_output(&runs[i], ready[i]);
		}
		xact_commit();
		for (int i = 0; i < nruns_alloc; i++)
		{
			if (!runs[i].active || !(ready[i][0] || ready[i][1]))
				continue;
			if (!stored[i])
			{
				runs[i].output_retry_at = TimestampTzPlusMilliseconds(now, OUTPUT_RETRY_MS);
				continue;
			}
			for (int st = 0; st < NSTREAMS; st++)
				if (ready[i][st])
					resetStringInfo(&runs[i].pending[st]);
		}
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		/* The commit failed: drop what could not be stored. */
		for (int i = 0; i < nruns_alloc; i++)
		{
			if (!runs[i].active)
				continue;
			for (int st = 0; st < NSTREAMS; st++)
				if (ready[i][st])
				{
					resetStringInfo(&runs[i].pending[st]);
					runs[i].truncated = true;
				}
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
		elog(LOG, "the resident jail launcher (pid %d) exited; it will be restarted",
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

	/*
	 * The socket lives in the data directory (it takes no space), not in
	 * the work directory: moving sandbox.work_dir must not stop the runs the
	 * launcher has in flight.
	 */
	snprintf(dir, sizeof(dir), "%s/sandbox_launcher", DataDir);
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
		elog(WARNING, "could not start the resident jail launcher \"%s\": %m; using one-shot jails",
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
			elog(LOG, "resident jail launcher started (pid %d, socket \"%s\")",
				 (int) launcher_pid, launcher_sock);
			return true;
		}
		if (!launcher_alive())
			break;
		pg_usleep(10000L);
	}
	elog(WARNING, "the resident jail launcher did not come up; using one-shot jails");
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
			 const char *wall, const char *mem, const char *npids, const char *outlim,
			 const char *wsize, const char *wentries)
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
		{"--memory", mem}, {"--pids", npids}, {"--output-limit", outlim},
		{"--workspace-size", wsize}, {"--workspace-entries", wentries}};

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
	if (sandbox_require_cgroup)
		appendBinaryStringInfo(&msg, "--require-cgroup", sizeof("--require-cgroup"));

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
				outlim[32],
				wsize[32],
				wentries[32];
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

		run->before = manifest_scan(ws_path, sandbox_workspace_entries + 1);
		MemoryContextSwitchTo(old);
	}

	snprintf(wall, sizeof(wall), "%d", wall_s);
	snprintf(mem, sizeof(mem), "%dM", memory_mb);
	snprintf(npids, sizeof(npids), "%d", pids);
	snprintf(outlim, sizeof(outlim), "%ld", (long) sandbox_output_limit_kb * 1024L);
	snprintf(wsize, sizeof(wsize), "%dM", sandbox_workspace_size_mb);
	snprintf(wentries, sizeof(wentries), "%d", sandbox_workspace_entries);

	if (sandbox_jail_launcher &&
		spawn_served(run, code_path, ws_path, wall, mem, npids, outlim, wsize, wentries))
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
	argv[argc++] = "--workspace-size";
	argv[argc++] = wsize;
	argv[argc++] = "--workspace-entries";
	argv[argc++] = wentries;
	for (int i = 0; i < run->nbinds; i++)
	{
		argv[argc++] = "--ro-bind";
		argv[argc++] = run->binds[i];
	}
	if (sandbox_require_cgroup)
		argv[argc++] = "--require-cgroup";
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
	run->marked = false;
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
	run->caps.max_scan_entries = sandbox_workspace_entries + 1;
	run->output_retry_at = 0;
	run->measured = false;
	run->ws_bytes = 0;
	run->ws_entries = 0;
	run->ws_reset = NULL;
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
	rc = SPI_execute_with_args("SELECT path, content, executable FROM agent._skill_files($1)",
							   1, &argtype, &arg, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "agent._skill_files failed: %s", SPI_result_code_string(rc));
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
 * Is a session workspace within the limits a run may start in?  A payload
 * can leave it past them (it is killed, but what it wrote stays); the
 * jail would then refuse to start the next run.  Such a workspace is
 * rebuilt instead: emptied, and the conversation's files put back.  The
 * scan is bounded by sandbox.workspace_entries.
 */
static const char *
workspace_over_limits(const char *path)
{
	Manifest   *m = manifest_scan(path, sandbox_workspace_entries + 1);
	const char *why = NULL;

	if (m->incomplete)
		why = "more entries than sandbox.workspace_entries, or too deep a tree";
	else if (m->disk_bytes > (int64) sandbox_workspace_size_mb * 1024 * 1024)
		why = "more bytes than sandbox.workspace_size";
	if (m->entries)
		pfree(m->entries);
	pfree(m);
	return why;
}

/* Put the files and skills agent._prepare_invocation() returned in place. */
static void
place_prepared(Run *run)
{
	SPITupleTable *tt = SPI_tuptable;
	uint64		n = SPI_processed;

	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tt->vals[i];
		bool		isnull;
		char	   *kind = SPI_getvalue(tup, tt->tupdesc, 1);
		char	   *name = SPI_getvalue(tup, tt->tupdesc, 2);
		char	   *err = NULL;

		if (strcmp(kind, "file") == 0)
		{
			bytea	   *content = DatumGetByteaPP(SPI_getbinval(tup, tt->tupdesc, 3, &isnull));

			if (!place_file(run->workspace, name, VARDATA_ANY(content),
							VARSIZE_ANY_EXHDR(content), 0644, &err))
				elog(ERROR, "could not place file \"%s\" in the workspace: %s", name, err);
		}
		else
		{
			char	   *sid = SPI_getvalue(tup, tt->tupdesc, 4);
			char	   *path;

			if (run->nbinds >= SANDBOX_MAX_SKILLS)
				elog(ERROR, "at most %d skills can be mounted", SANDBOX_MAX_SKILLS);
			materialize_skill(sid, &path);
			run->binds[run->nbinds++] = MemoryContextStrdup(run->cxt,
															psprintf("%s:/skills/%s", path, name));
			/* materialize_skill ran SPI: the outer result set is still ours */
			SPI_tuptable = tt;
		}
	}
}

/*
 * Build what a claimed run needs on disk before its jail starts: its work
 * directory, its workspace (the conversation's session workspace, or a
 * fresh one), the conversation's files not yet in that workspace, and its
 * skills (agent._prepare_invocation).  The file placement is recorded
 * (agent.session_files) in the same transaction as it is written, so a
 * failure leaves neither.  A failure sets run->spawn_error: the run ends
 * provision_failed and is refunded.
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
		const char *why;

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
		else if (existed && (why = workspace_over_limits(run->workspace)) != NULL)
		{
			ereport(LOG,
					(errmsg("rebuilding the workspace of session %s before invocation %s: it holds %s",
							c->session, run->idstr, why)));
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
		Oid			types[2] = {UUIDOID, BOOLOID};
		Datum		values[2];
		int			rc;

		xact_begin("preparing a sandbox workspace");
		values[0] = UUIDPGetDatum(&run->id);
		values[1] = BoolGetDatum(!existed);
		rc = SPI_execute_with_args("SELECT kind, name, content, skill_id "
								   "FROM agent._prepare_invocation($1, $2)",
								   2, types, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._prepare_invocation failed: %s", SPI_result_code_string(rc));
		place_prepared(run);
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
				(errmsg("could not prepare invocation %s: %s",
						run->idstr, run->spawn_error)));
	}
	PG_END_TRY();
}

/* Read one row of agent._claim_invocations() into c (copies in cxt). */
static void
read_claimed(HeapTuple tup, TupleDesc desc, Claimed *c, MemoryContext cxt)
{
	bool		isnull;
	Datum		d;
	MemoryContext old;
	char	   *lang;

	d = SPI_getbinval(tup, desc, 1, &isnull);
	memcpy(&c->id, DatumGetUUIDP(d), sizeof(pg_uuid_t));
	old = MemoryContextSwitchTo(cxt);
	lang = SPI_getvalue(tup, desc, 2);
	strlcpy(c->language, lang ? lang : "", sizeof(c->language));
	c->code = SPI_getvalue(tup, desc, 3);
	MemoryContextSwitchTo(old);
	d = SPI_getbinval(tup, desc, 4, &isnull);
	c->wall_s = isnull ? sandbox_default_wall_time_s : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	c->memory_mb = isnull ? sandbox_default_memory_mb : DatumGetInt32(d);
	d = SPI_getbinval(tup, desc, 6, &isnull);
	c->has_session = !isnull;
	if (!isnull)
		strlcpy(c->session, uuid_text(d), sizeof(c->session));
	d = SPI_getbinval(tup, desc, 7, &isnull);
	c->fresh_session = !isnull && DatumGetBool(d);
	d = SPI_getbinval(tup, desc, 8, &isnull);
	c->has_skills = !isnull && DatumGetBool(d);
}

/*
 * One short transaction marks every started jail as running (skipped rows,
 * locked elsewhere, are moved through running by their finish), and reads
 * the caps on what a run may return.
 */
static void
mark_started(void)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	PG_TRY();
	{
		ProducedCaps caps = {100, 50 * 1024 * 1024, 20 * 1024 * 1024, 0};

		xact_begin("marking invocations running");
		if (SPI_execute("SELECT max_files, max_bytes, max_file_bytes FROM agent._produced_caps()",
						true, 1) == SPI_OK_SELECT && SPI_processed == 1)
		{
			bool		isnull;
			HeapTuple	tup = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;

			caps.max_files = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
			caps.max_total_bytes = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
			caps.max_file_bytes = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		}
		caps.max_scan_entries = sandbox_workspace_entries + 1;
		for (int i = 0; i < nruns_alloc; i++)
		{
			Run		   *run = &runs[i];
			Oid			types[2] = {UUIDOID, INT4OID};
			Datum		values[2];

			if (!run->active || !run->spawned || run->marked)
				continue;
			run->caps = caps;
			run->marked = true;
			if (run->exited)
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
		rc = SPI_execute_with_args("SELECT id, language, code, wall_time_s, memory_mb, "
								   "session_id, fresh_session, has_skills "
								   "FROM agent._claim_invocations($1)",
								   1, &argtype, &arg, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._claim_invocations failed: %s", SPI_result_code_string(rc));
		for (uint64 i = 0; i < SPI_processed && n < want; i++)
			read_claimed(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, &claimed[n++], oldcxt);
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
	if (any_started)
		mark_started();
	pfree(claimed);
	return n;
}

/* ----------------------------------------------------------------
 * Finishing
 *
 * When the jail is gone: read what the run left (its files; for a session,
 * what the workspace holds), give back its disk, then record the result in
 * one transaction (agent._finish_invocation, which stages it and applies it
 * by the billing rule).  The slot is free as soon as the result is durable,
 * even when applying it has to wait for a lock a backend holds: the staged
 * result is applied on a later turn (apply_pending_results).  A result that
 * cannot be recorded at all still ends the row, as a failure of ours with
 * the reason; only when even that cannot commit (the database is
 * unavailable) does the run keep its slot and try again.
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

/*
 * The failure of ours that ended the run, or NULL when the jail answered;
 * *jail_status gets the jail's exit status (or the launcher's rc).
 */
static char *
run_failure(Run *run, int *jail_status)
{
	*jail_status = -1;
	if (run->spawn_error)
		return run->spawn_error;
	if (run->served)
	{
		if (run->killed_by_us)
			return psprintf("the sandbox was killed by the supervisor after its deadline");
		if (run->served_rc < 0)
			return psprintf("the resident jail launcher closed the connection without a verdict");
		if (run->served_rc == 2)
			return psprintf("the resident jail launcher refused the request: %s",
							run->served_msg ? run->served_msg : "");
		*jail_status = run->served_rc;
		return NULL;
	}
	if (!run->exited)
		return psprintf("sandbox-jail did not exit");
	if (WIFEXITED(run->wait_status))
		*jail_status = WEXITSTATUS(run->wait_status);
	else if (WIFSIGNALED(run->wait_status))
	{
		*jail_status = 128 + WTERMSIG(run->wait_status);
		if (run->killed_by_us)
			return psprintf("sandbox-jail killed by the supervisor after its deadline");
		return psprintf("sandbox-jail died of signal %d", WTERMSIG(run->wait_status));
	}
	return NULL;
}

/*
 * Read what the run left behind, once: the files it produced (not after a
 * failure of ours, which returns none) and, for a session, what its
 * workspace holds now and whether it must be rebuilt before the next run.
 */
static void
collect_run(Run *run, bool failed)
{
	MemoryContext old;
	Manifest   *after = NULL;

	if (run->collected || !run->spawned)
		return;
	run->collected = true;
	old = MemoryContextSwitchTo(run->cxt);
	if (!failed)
		run->produced = collect_produced(run->workspace, run->before, &run->caps, &after);
	else if (run->has_session)
		after = manifest_scan(run->workspace, sandbox_workspace_entries + 1);
	if (run->has_session && after)
	{
		run->measured = true;
		run->ws_bytes = after->disk_bytes;
		run->ws_entries = after->n;
		if (after->incomplete)
			run->ws_reset = psprintf("more than %d entries (sandbox.workspace_entries) or a tree deeper than 64",
									 sandbox_workspace_entries);
		else if (after->disk_bytes > (int64) sandbox_workspace_size_mb * 1024 * 1024)
			run->ws_reset = psprintf("%lld bytes, more than sandbox.workspace_size",
									 (long long) after->disk_bytes);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Give back the disk a run used before its result is recorded: its work
 * directory (the code, and the workspace of a run without a session) and a
 * session workspace that must be rebuilt.  What the database needs is in
 * memory by now, and a finish that cannot commit must not keep the space.
 */
static void
release_disk(Run *run)
{
	if (run->dir[0])
	{
		remove_work_dir(run->dir);
		run->dir[0] = '\0';
	}
	if (run->has_session && run->ws_reset)
	{
		char		path[MAXPGPATH];

		snprintf(path, sizeof(path), "%s/sessions/%s", work_root(), run->session);
		remove_work_dir(path);
	}
}

/* Stage the files the run produced, inside record_result's transaction. */
static void
store_produced(Run *run)
{
	ListCell   *lc;
	Oid			types[5] = {UUIDOID, TEXTOID, TEXTOID, TEXTOID, BYTEAOID};

	foreach(lc, run->produced)
	{
		ProducedFile *pf = (ProducedFile *) lfirst(lc);
		Datum		values[5];
		char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

		values[0] = UUIDPGetDatum(&run->id);
		values[1] = CStringGetTextDatum(pf->name);
		values[2] = CStringGetTextDatum(pf->status);
		if (pf->reason)
			values[3] = CStringGetTextDatum(pf->reason);
		else
			nulls[3] = 'n';
		if (pf->data)
		{
			bytea	   *b = palloc(VARHDRSZ + pf->len);

			SET_VARSIZE(b, VARHDRSZ + pf->len);
			memcpy(VARDATA(b), pf->data, pf->len);
			values[4] = PointerGetDatum(b);
		}
		else
			nulls[4] = 'n';
		if (SPI_execute_with_args("SELECT agent._store_produced_file($1, $2, $3, $4, $5)",
								  5, types, values, nulls, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "agent._store_produced_file failed");
	}
}

/*
 * Record the run's result in one transaction: the files it produced (with
 * files) and agent._finish_invocation().  True when it committed; *applied
 * then says whether the result was also applied (false: it is staged).  On
 * failure *err says why.
 */
static bool
record_result(Run *run, const char *error, int jail_status, bool with_files,
			  bool *applied, char **err)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	volatile bool done = false;

	PG_TRY();
	{
		Oid			types[9] = {UUIDOID, TEXTOID, INT4OID, TEXTOID, BOOLOID, BOOLOID,
		INT8OID, INT4OID, TEXTOID};
		Datum		values[9];
		char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
		bool		isnull;
		int			rc;

		xact_begin("finishing an invocation");
		if (with_files)
			store_produced(run);
		values[0] = UUIDPGetDatum(&run->id);
		if (run->verdict.len > 0 && error == NULL)
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
		values[6] = Int64GetDatum(run->ws_bytes);
		values[7] = Int32GetDatum(run->ws_entries);
		if (!run->measured)
			nulls[6] = nulls[7] = 'n';
		if (run->ws_reset)
			values[8] = CStringGetTextDatum(run->ws_reset);
		else
			nulls[8] = 'n';
		rc = SPI_execute_with_args("SELECT agent._finish_invocation($1, $2, $3, $4, $5, $6, $7, $8, $9)",
								   9, types, values, nulls, false, 0);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "agent._finish_invocation failed: %s", SPI_result_code_string(rc));
		(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		*applied = !isnull;
		xact_commit();
		done = true;
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
		*err = MemoryContextStrdup(run->cxt, edata->message);
		ereport(WARNING,
				(errmsg("could not record the result of invocation %s: %s",
						run->idstr, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	return done;
}

/* The run is over for this process: its slot is free again. */
static void
release_slot(Run *run)
{
	close_fd(&run->fd[0]);
	close_fd(&run->fd[1]);
	close_fd(&run->verdict_fd);
	close_fd(&run->pidfd);
	run->active = false;
	nactive--;
	slot_publish(run);
	run->produced = NIL;
	run->before = NULL;
	MemoryContextReset(run->cxt);
}

static void
finish_run(Run *run)
{
	int			jail_status;
	char	   *error = run_failure(run, &jail_status);
	char	   *err = NULL;
	bool		applied = false;

	collect_run(run, error != NULL);
	release_disk(run);
	/* Output that could not be stored is missing from the record. */
	if (run->pending[0].len > 0 || run->pending[1].len > 0)
		run->truncated = true;

	run->finish_retry_at = 0;
	if (!record_result(run, error, jail_status, true, &applied, &err) &&
		!record_result(run, psprintf("could not record the result: %s", err),
					   jail_status, false, &applied, &err))
	{
		/* Nothing commits: keep the slot and try again (recovery would too). */
		run->finish_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), FINISH_RETRY_MS);
		return;
	}
	if (!applied)
	{
		results_pending = true;
		pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_RETRY_MS);
	}
	release_slot(run);
	/* Wake backends sleeping in agent.wait(). */
	if (applied)
		ConditionVariableBroadcast(&sandbox_shared->finished_cv);
}

/*
 * Apply results staged behind a lock held elsewhere, once their retry time
 * has come (or now, with force).  Bounded per call, so a tenant holding
 * many locks cannot make one turn of the loop long.
 */
static void
apply_pending_results(bool force)
{
	MemoryContext oldcxt = CurrentMemoryContext;

	if (!results_pending || (!force && GetCurrentTimestamp() < pending_retry_at))
		return;
	pending_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PENDING_RETRY_MS);
	PG_TRY();
	{
		bool		isnull;
		Datum		d;

		xact_begin("applying staged results");
		if (SPI_execute("SELECT agent._finish_pending(32)", false, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "agent._finish_pending failed");
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		results_pending = !isnull && DatumGetInt32(d) > 0;
		xact_commit();
		ConditionVariableBroadcast(&sandbox_shared->finished_cv);
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
	}
	PG_END_TRY();
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
		rc = SPI_execute_with_args("SELECT id FROM agent._cancel_requested($1) AS id",
								   1, &argtype, &arg, NULL, true, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "agent._cancel_requested failed: %s", SPI_result_code_string(rc));
		for (uint64 j = 0; j < SPI_processed; j++)
		{
			bool		isnull;
			pg_uuid_t  *id = DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[j],
														 SPI_tuptable->tupdesc, 1, &isnull));

			for (int i = 0; i < nruns_alloc; i++)
			{
				if (runs[i].active && memcmp(&runs[i].id, id, sizeof(pg_uuid_t)) == 0)
				{
					elog(LOG, "cancelling invocation %s", runs[i].idstr);
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

/* Sweeps are at most once a second, and wanted after anything that may
 * have ended a session or detached a skill: a wake-up, a claim, a finish. */
#define SWEEP_INTERVAL_MS	1000
static TimestampTz last_session_sweep = 0;
static bool sweep_wanted = true;

/* Run SQL returning one text column into a list (in the caller's context). */
static List *
query_names(const char *sql, MemoryContext cxt)
{
	List	   *out = NIL;

	if (SPI_execute(sql, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "\"%s\" failed", sql);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		out = lappend(out, pstrdup(v ? v : ""));
		MemoryContextSwitchTo(old);
	}
	return out;
}

static bool
name_in(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), name) == 0)
			return true;
	return false;
}

/* Is a directory of work_root/<sub>/<name> used by a run of ours? */
static bool
used_by_a_run(const char *sub, const char *name)
{
	char		path[MAXPGPATH];
	size_t		len;

	snprintf(path, sizeof(path), "%s/%s/%s", work_root(), sub, name);
	len = strlen(path);
	for (int i = 0; i < nruns_alloc && runs; i++)
	{
		if (!runs[i].active)
			continue;
		if (strcmp(sub, "sessions") == 0 && runs[i].has_session &&
			strcmp(runs[i].session, name) == 0)
			return true;
		for (int b = 0; b < runs[i].nbinds; b++)
			if (strncmp(runs[i].binds[b], path, len) == 0 && runs[i].binds[b][len] == ':')
				return true;
	}
	return false;
}

/* Remove every entry of work_root/<sub> that is neither kept nor in use. */
static void
sweep_dir(const char *sub, List *keep)
{
	char		dir[MAXPGPATH];
	DIR		   *d;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/%s", work_root(), sub);
	d = opendir(dir);
	if (d == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		char		path[MAXPGPATH];

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* a skill's temporary copy (.ID.PID) exists only while this process
		 * materialises it, never during a sweep */
		if (name_in(keep, de->d_name) || used_by_a_run(sub, de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		elog(LOG, "removing %s \"%s\", no longer used",
			 strcmp(sub, "sessions") == 0 ? "the workspace of ended session" : "materialised skill",
			 path);
		remove_work_dir(path);
	}
	closedir(d);
}

/*
 * Delete what the database no longer needs on disk: the workspaces of
 * sessions that ended, and materialised skills no agent has attached.
 */
static void
sweep_sessions(bool force)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	List	   *volatile live = NIL;
	List	   *volatile skills = NIL;

	if (!force && (!sweep_wanted ||
				   !TimestampDifferenceExceeds(last_session_sweep, GetCurrentTimestamp(),
											   SWEEP_INTERVAL_MS)))
		return;
	last_session_sweep = GetCurrentTimestamp();
	sweep_wanted = false;

	PG_TRY();
	{
		xact_begin("sweeping ended sessions and unused skills");
		live = query_names("SELECT id::text FROM agent._live_session_ids() AS id", oldcxt);
		skills = query_names("SELECT id::text FROM agent._skill_ids_in_use() AS id", oldcxt);
		xact_commit();
	}
	PG_CATCH();
	{
		xact_abort_after_error(oldcxt);
		return;
	}
	PG_END_TRY();
	sweep_dir("sessions", live);
	sweep_dir("skills", skills);
	list_free_deep(live);
	list_free_deep(skills);
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
			elog(ERROR, "agent._supervisor_recover failed: %s", SPI_result_code_string(rc));
		xact_commit();
		/* what stayed staged behind a lock is applied from the loop */
		results_pending = true;
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
	/* No step of ours may wait long for a lock a tenant holds (see 40_supervisor.sql). */
	SetConfigOption("lock_timeout", SUPERVISOR_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

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

	(void) work_dir_usable(true);
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
	elog(LOG, "supervisor started (database \"%s\", %d slots, jail \"%s\", work directory \"%s\")",
		 sandbox_database, sandbox_max_concurrent_runs, sandbox_jail_path, work_root());

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
			elog(LOG, "supervisor shutting down; %d run(s) killed", nactive);
			proc_exit(1);
		}
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (!sandbox_jail_launcher)
				launcher_stop();
			(void) work_dir_usable(true);
		}
		apply_pending_results(false);

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

			if (want <= 0 || !work_dir_usable(false))
				break;
			got = claim_and_start(want);
			if (got > 0)
				sweep_wanted = true;
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
			{
				TimestampTz due;

				if (run->pending[st].len == 0)
					continue;
				due = Max(TimestampTzPlusMilliseconds(run->pending_at[st], OUTPUT_COALESCE_MS),
						  run->output_retry_at);
				timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, due), 0));
			}
			if (run->spawned && run->pidfd < 0 && !run->exited && !run->served)
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
		if (results_pending)
			timeout = Min(timeout, Max(TimestampDifferenceMilliseconds(now, pending_retry_at), 0));
		if (sweep_wanted)
			timeout = Min(timeout,
						  Max(TimestampDifferenceMilliseconds(now,
															  TimestampTzPlusMilliseconds(last_session_sweep,
																						  SWEEP_INTERVAL_MS)), 0));

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
				elog(WARNING, "jail of invocation %s passed its deadline; killing it",
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

		for (int i = 0; i < nruns_alloc; i++)
			if (runs[i].active && run_complete(&runs[i]))
			{
				finish_run(&runs[i]);
				sweep_wanted = true;
			}
		if (latch_set || nevents == 0)
			sweep_wanted = true;
		sweep_sessions(false);
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
