/*-------------------------------------------------------------------------
 *
 * output.c
 *		A run's stdout and stderr on their way to agent.invocation_output:
 *		read from the jail's pipes, cut at the output limit, assembled into
 *		valid UTF-8, coalesced into lines, and stored (through
 *		steps_result.c) in one transaction per loop turn.
 *
 * The jail caps its output too; the cap here holds even if it did not, so
 * the table never grows past the output limit per stream (the smaller of
 * the runner's output_limit and the server's sandbox.output_limit, which
 * the server's step enforces too), counted as stored text.  Invalid UTF-8 and
 * NUL bytes become U+FFFD; a sequence cut by a read waits for the rest.
 * Output that does not end a line waits OUTPUT_COALESCE_MS for the rest of
 * it (an unbuffered interpreter writes "a" and "\n" separately), unless
 * the stream ended or the chunk is large.  While the database cannot be
 * reached, output waits in memory (at most output_limit per stream) and is
 * stored once it can be.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <unistd.h>

#include "mb/pg_wchar.h"

#define OUTPUT_COALESCE_MS		20
#define OUTPUT_COALESCE_BYTES	16384
/* Delay before storing the output of a run again after a failed try. */
#define OUTPUT_RETRY_MS			1000

static const char REPLACEMENT[] = "\xEF\xBF\xBD";	/* U+FFFD */

/*
 * Append raw bytes to the pending text of a stream as valid UTF-8.  An
 * incomplete sequence at the end is held back for the next read unless
 * this is the last one.
 */
static void
append_utf8(RunOutput *out, int stream, const char *buf, int len, bool eof)
{
	StringInfo	dst = &out->pending[stream];
	static char tmp[OUTPUT_READ_SIZE + 4];
	const unsigned char *s = (const unsigned char *) tmp;
	int			n = 0;
	int			i = 0;

	if (out->partial_len[stream] > 0)
	{
		memcpy(tmp, out->partial[stream], out->partial_len[stream]);
		n = out->partial_len[stream];
		out->partial_len[stream] = 0;
	}
	memcpy(tmp + n, buf, len);
	n += len;

	while (i < n)
	{
		int			l;

		if (s[i] != 0 && s[i] < 0x80)
		{
			int			j = i;

			while (j < n && s[j] != 0 && s[j] < 0x80)
				j++;
			appendBinaryStringInfo(dst, (const char *) s + i, j - i);
			i = j;
			continue;
		}
		l = (s[i] == 0) ? 1 : pg_utf_mblen(s + i);
		if (s[i] != 0 && i + l > n && !eof && n - i < 4)
		{
			memcpy(out->partial[stream], s + i, n - i);
			out->partial_len[stream] = n - i;
			return;
		}
		if (s[i] != 0 && l > 1 && i + l <= n && pg_utf8_islegal(s + i, l))
		{
			appendBinaryStringInfo(dst, (const char *) s + i, l);
			i += l;
		}
		else
		{
			appendBinaryStringInfo(dst, REPLACEMENT, sizeof(REPLACEMENT) - 1);
			i++;
		}
	}
}

/*
 * Keep what is stored of a stream within its limit, counted as the text
 * that is stored (an invalid byte becomes three): cut what was just added
 * (from `before`) at a character boundary, and drop the rest of the stream.
 */
static void
fit_limit(RunOutput *out, int st, int before)
{
	StringInfo	p = &out->pending[st];
	int64		added = p->len - before;
	int			len;

	if (out->kept[st] + added <= out->limit)
	{
		out->kept[st] += added;
		return;
	}
	len = before + (int) Max(out->limit - out->kept[st], 0);
	while (len > before && (p->data[len] & 0xC0) == 0x80)
		len--;					/* not in the middle of a character */
	p->len = len;
	p->data[len] = '\0';
	out->kept[st] += len - before;
	out->partial_len[st] = 0;
	out->full[st] = true;
	out->truncated = true;
}

/* Read what a pipe has, up to one chunk's worth of pending text. */
void
output_read(Run *run, int st)
{
	RunOutput  *out = &run->out;
	static char buf[OUTPUT_READ_SIZE];

	for (;;)
	{
		ssize_t		r = read(out->fd[st], buf, sizeof(buf));
		int			before = out->pending[st].len;

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		if (r <= 0)				/* EOF or error */
		{
			if (!out->full[st])
			{
				append_utf8(out, st, "", 0, true);
				fit_limit(out, st, before);
			}
			close(out->fd[st]);
			out->fd[st] = -1;
			break;
		}
		out->bytes[st] += r;
		if (out->full[st])
		{
			out->truncated = true;
			continue;
		}
		if (out->pending[st].len == 0)
			out->pending_at[st] = runner_now_ms();
		append_utf8(out, st, buf, (int) r, false);
		fit_limit(out, st, before);
		if (out->pending[st].len >= OUTPUT_READ_SIZE)
			break;				/* store it before reading more */
	}
}

/*
 * Does a run's output wait for its start report?  Until the run is due to
 * be reported running (start_report_delay after its start) its output waits
 * (unless it is large), so that the output of a run that ends before that
 * goes with its finish (steps_result.c) and a short run is recorded in one
 * transaction.
 */
static bool
waits_for_report(Run *run, int st, msec now)
{
	return !run->marked && run->out.pending[st].len < OUTPUT_COALESCE_BYTES &&
		(run->phase == RUN_STARTED || run->phase == RUN_EXITED) && now < run->report_at;
}

/* Is a stream's pending output ready to be stored? */
static bool
stream_ready(Run *run, int st, msec now)
{
	StringInfo	p = &run->out.pending[st];

	if (p->len == 0 || now < run->out.retry_at || waits_for_report(run, st, now))
		return false;
	return run->out.fd[st] < 0 || run->phase != RUN_STARTED ||
		p->data[p->len - 1] == '\n' ||
		p->len >= OUTPUT_COALESCE_BYTES ||
		now - run->out.pending_at[st] >= OUTPUT_COALESCE_MS;
}

/* Milliseconds until some pending output of a run is due, or -1. */
long
output_due_ms(Run *run, msec now)
{
	long		due = -1;

	for (int st = 0; st < NSTREAMS; st++)
	{
		msec		at;
		long		ms;

		if (run->out.pending[st].len == 0)
			continue;
		if (waits_for_report(run, st, now))
			at = run->report_at;
		else
			at = Max(run->out.pending_at[st] + OUTPUT_COALESCE_MS, run->out.retry_at);
		ms = (long) Max(at - now, 0);
		due = (due < 0) ? ms : Min(due, ms);
	}
	return due;
}

/*
 * Store the ready output of every run (steps_result.c: in one
 * transaction; when that fails, each run's in its own, so that one whose
 * output cannot be stored now keeps it and is tried again later while the
 * others' commits).
 * When the database cannot be reached, nothing is stored and the output
 * waits.
 */
void
output_flush(void)
{
	msec		now = runner_now_ms();
	bool		ready[RUNNER_MAX_SLOTS][NSTREAMS];
	bool		stored[RUNNER_MAX_SLOTS];
	bool		any = false;
	bool		unreported = false;

	for (int i = 0; i < nruns; i++)
	{
		for (int st = 0; st < NSTREAMS; st++)
		{
			ready[i][st] = runs[i].phase != RUN_FREE && stream_ready(&runs[i], st, now);
			any |= ready[i][st];
		}
		/* output that cannot wait for the report: the report first */
		if ((ready[i][0] || ready[i][1]) && !runs[i].marked && runs[i].phase == RUN_STARTED)
		{
			runs[i].mark_retry_at = Min(runs[i].mark_retry_at, now);
			unreported = true;
		}
	}
	if (!any || !db_connected())
		return;
	if (unreported)
		step_mark_started();

	if (!step_store_output(ready, stored))
		return;					/* the connection broke: it all waits */
	for (int i = 0; i < nruns; i++)
	{
		Run		   *run = &runs[i];

		if (!ready[i][0] && !ready[i][1])
			continue;
		if (!stored[i])
		{
			run->out.retry_at = now + OUTPUT_RETRY_MS;
			continue;
		}
		for (int st = 0; st < NSTREAMS; st++)
			if (ready[i][st])
				resetStringInfo(&run->out.pending[st]);
	}
}
