/*-------------------------------------------------------------------------
 *
 * local.c
 *		The local runner's link with the supervisor that started it
 *		(--local): what the slots run, for agent.worker_status(), and that
 *		a result is staged behind a lock; its EOF when the supervisor is
 *		gone.  The format is local_link.h's.  A remote runner has no link: every call here is
 *		then a no-op.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <sys/socket.h>

#include "local_link.h"

int			link_fd = -1;

/* Send one message; false when the link is full (the message is dropped). */
static bool
link_write(const char *msg, size_t len)
{
	ssize_t		r;

	if (link_fd < 0)
		return true;
	do
		r = send(link_fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

void
link_send(const char *kind)
{
	(void) link_write(kind, strlen(kind) + 1);
}

/* Append a NUL-terminated field (truncated to fit). */
static void
add_field(StringInfo s, const char *f)
{
	appendBinaryStringInfo(s, f, Min(strlen(f), 1024));
	appendStringInfoChar(s, '\0');
}

/* Why we claim nothing, or NULL (agent.worker_status().problem). */
static const char *
status_problem(void)
{
	static char buf[512];

	if (workdir_problem())
		return workdir_problem();
	if (!me.registered && me.refused[0])
		return me.refused;
	if (strncmp(db_status(), "not connected:", 14) == 0 || strncmp(db_status(), "invalid", 7) == 0)
		return db_status();
	if (me.registered && strcmp(me.state, "active") != 0)
	{
		snprintf(buf, sizeof(buf), "the runner is %s: it claims nothing (agent.drain_runner)",
				 me.state);
		return buf;
	}
	return NULL;
}

/* What the slots run now, if it changed since the last report. */
void
link_send_status(void)
{
	StringInfoData s;
	char		num[32];

	if (link_fd < 0 || !status_dirty)
		return;
	status_dirty = false;
	initStringInfo(&s);
	add_field(&s, LINK_STATUS);
	snprintf(num, sizeof(num), "%d", runner_conf.slots);
	add_field(&s, num);
	snprintf(num, sizeof(num), "%d", nactive);
	add_field(&s, num);
	add_field(&s, workdir_root());
	add_field(&s, status_problem() ? status_problem() : "");
	for (int i = 0; i < nruns; i++)
	{
		if (runs[i].phase != RUN_FREE)
			add_field(&s, runs[i].id);
	}
	/* a full link: the state is sent again after the next turn */
	if (s.len <= LINK_MAX && !link_write(s.data, s.len))
		status_dirty = true;
	free(s.data);
}

/* Read the link: the supervisor sends nothing, so this is its end (EOF). */
void
link_read(bool *eof)
{
	char		buf[LINK_MAX];

	for (;;)
	{
		ssize_t		r = recv(link_fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (r <= 0)
		{
			*eof = true;
			return;
		}
	}
}
