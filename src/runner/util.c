/*-------------------------------------------------------------------------
 *
 * util.c
 *		What every file of sandbox-runner uses: the clock, logging, a run's
 *		memory (an arena freed with its slot) and lists of strings.
 *
 * Logging goes to stderr, one line a message, with a timestamp, the pid
 * and the level.  A local runner's stderr is the server's log (the
 * supervisor's own), so its lines sit beside the supervisor's; a remote
 * runner's is the journal (systemd).
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <stdarg.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

bool		runner_log_debug = false;

msec
runner_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (msec) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
runner_log(RunnerLogLevel level, const char *fmt,...)
{
	static const char *const names[] = {"DEBUG", "LOG", "WARNING", "ERROR", "FATAL"};
	char		msg[2048];
	char		stamp[64];
	struct timeval tv;
	struct tm	tm;
	va_list		ap;
	int			saved_errno = errno;

	if (level == RLOG_DEBUG && !runner_log_debug)
		return;
	va_start(ap, fmt);
	errno = saved_errno;		/* for %m */
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	/* one write, so that lines of several processes do not interleave */
	fprintf(stderr, "%s.%03d [%d] sandbox-runner %s:  %s\n", stamp, (int) (tv.tv_usec / 1000),
			(int) getpid(), names[level], msg);
	fflush(stderr);
	errno = saved_errno;
}

/* ---- arenas ---- */

typedef struct ArenaBlock
{
	struct ArenaBlock *next;
	/* the allocation follows, maximally aligned */
} ArenaBlock;

#define ARENA_HDR	MAXALIGN(sizeof(ArenaBlock))

void *
arena_alloc(Arena *a, size_t size)
{
	ArenaBlock *b = pg_malloc0(ARENA_HDR + size);

	b->next = a->blocks;
	a->blocks = b;
	return (char *) b + ARENA_HDR;
}

char *
arena_strdup(Arena *a, const char *s)
{
	size_t		len = strlen(s);
	char	   *p = arena_alloc(a, len + 1);

	memcpy(p, s, len + 1);
	return p;
}

char *
arena_printf(Arena *a, const char *fmt,...)
{
	char		buf[2048];
	va_list		ap;
	int			saved_errno = errno;

	va_start(ap, fmt);
	errno = saved_errno;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return arena_strdup(a, buf);
}

void
arena_reset(Arena *a)
{
	while (a->blocks)
	{
		ArenaBlock *next = a->blocks->next;

		free(a->blocks);
		a->blocks = next;
	}
}

/* ---- string lists ---- */

void
strlist_add(StrList *l, const char *s)
{
	if (l->n == l->cap)
	{
		l->cap = l->cap ? l->cap * 2 : 16;
		l->v = pg_realloc(l->v, sizeof(char *) * l->cap);
	}
	l->v[l->n++] = pg_strdup(s);
}

bool
strlist_contains(const StrList *l, const char *s)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return true;
	return false;
}

void
strlist_free(StrList *l)
{
	for (int i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}
