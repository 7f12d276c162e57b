/*-------------------------------------------------------------------------
 *
 * steps_result.c
 *		What a run leaves in the database, as the runner takes those steps
 *		(the others are steps.c's, whose header lists them all): its output
 *		while it runs, and at its end, in one transaction, the output that
 *		waited, the files it produced, its egress log and the finish.
 *
 *	output			agent.runner_append_output(runner, token, id, stream, data)
 *	result			agent.runner_store_produced_file(runner, token, id, ...) per
 *					saved file, agent.runner_store_skipped_files(runner, token,
 *					id, names, statuses, reasons) for the rest at once,
 *					agent.runner_record_egress(runner, token, id, log, verdict)
 *					for a run with egress (47_egress.sql),
 *					agent.runner_finish(runner, token, id, verdict, ...)
 *
 * Each is one parameterised call of one named SQL function, pipelined
 * (db.c): one round trip, one transaction.  What happens to a run whose
 * step failed is run.c's decision.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

static const char SQL_OUTPUT[] = "SELECT agent.runner_append_output($1, $2, $3, $4, $5)";
static const char SQL_STORE_FILE[] =
"SELECT agent.runner_store_produced_file($1, $2, $3, $4, $5, $6, $7)";
static const char SQL_STORE_SKIPPED[] =
"SELECT agent.runner_store_skipped_files($1, $2, $3, $4, $5, $6)";
static const char SQL_RECORD_EGRESS[] =
"SELECT agent.runner_record_egress($1, $2, $3, $4, $5)";
static const char SQL_FINISH[] =
"SELECT agent.runner_finish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

static const char *const stream_names[NSTREAMS] = {"stdout", "stderr"};

/* ---- output ---- */

static void
add_output(DbBatch *b, Run *run, const bool ready[NSTREAMS], DbParam p[NSTREAMS][5])
{
	for (int st = 0; st < NSTREAMS; st++)
	{
		if (!ready[st])
			continue;
		step_lease_params(p[st], run);
		p[st][3] = step_param(stream_names[st]);
		p[st][4] = step_param(run->out.pending[st].data);
		db_batch_add(b, SQL_OUTPUT, 5, p[st]);
	}
}

/*
 * Store the ready output of every run (ready[slot][stream]): stored[slot]
 * says whose was.  All of it in one transaction; when that fails, each
 * run's in a transaction of its own (one round trip still), so that the
 * output of a run that cannot be stored now does not hold up the others',
 * and a run whose lease is gone is fenced.  False when the connection
 * broke (nothing stored).
 */
bool
step_store_output(const bool ready[][NSTREAMS], bool *stored)
{
	static DbParam p[RUNNER_MAX_SLOTS][NSTREAMS][5];
	DbBatch		b;
	DbOutcome	o;

	memset(stored, 0, sizeof(bool) * nruns);
	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
		if (ready[i][0] || ready[i][1])
			add_output(&b, &runs[i], ready[i], p[i]);
	o = db_batch_run(&b);
	db_batch_free(&b);
	if (o == DB_LOST)
		return false;
	if (o == DB_OK)
	{
		for (int i = 0; i < nruns; i++)
			stored[i] = ready[i][0] || ready[i][1];
		return true;
	}

	/* one transaction per run */
	db_batch_init(&b);
	for (int i = 0; i < nruns; i++)
		if (ready[i][0] || ready[i][1])
		{
			add_output(&b, &runs[i], ready[i], p[i]);
			db_batch_sync(&b);
		}
	o = db_batch_run(&b);
	if (o != DB_LOST)
	{
		int			k = 0;

		for (int i = 0; i < nruns; i++)
		{
			const DbResult *bad = NULL;

			if (!ready[i][0] && !ready[i][1])
				continue;
			for (; k < b.n && b.items[k].sql; k++)
				if (b.items[k].r.outcome != DB_OK && bad == NULL)
					bad = &b.items[k].r;
			k++;				/* the sync point */
			stored[i] = bad == NULL;
			if (bad && step_fenced(bad))
				run_fence(&runs[i], bad->message);
			else if (bad)
				runner_log(RLOG_LOG, "could not store the output of invocation %s yet: %s",
						   runs[i].id, bad->message);
		}
	}
	db_batch_free(&b);
	return o != DB_LOST;
}

/* ---- result ---- */

/* Append a text[] element, quoted as array_in reads it (NULL unquoted). */
static void
append_array_elem(StringInfo buf, const char *v)
{
	if (buf->len > 1)
		appendStringInfoChar(buf, ',');
	if (v == NULL)
	{
		appendStringInfoString(buf, "NULL");
		return;
	}
	appendStringInfoChar(buf, '"');
	for (; *v; v++)
	{
		if (*v == '"' || *v == '\\')
			appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, *v);
	}
	appendStringInfoChar(buf, '"');
}

/*
 * The parameters of a result's calls, which must live until its batch has
 * run: the files, the skipped files' arrays, the egress log, the output
 * that waited and the finish.
 */
typedef struct ResultCalls
{
	DbParam    *files;			/* 7 per saved file (malloc'd) */
	DbParam		skipped[6];
	DbParam		egress[5];
	DbParam		output[NSTREAMS][5];
	DbParam		finish[11];
	StringInfoData names;		/* the skipped files, as text[] literals */
	StringInfoData statuses;
	StringInfoData reasons;
	char		status[16];
	char		bytes[32];
	char		entries[16];
} ResultCalls;

/* Saved files one call each (at most max_files); the rest in one call. */
static void
add_files(DbBatch *b, Run *run, ResultCalls *c, int nfiles)
{
	RunDisk    *d = &run->disk;
	int			nskipped = 0;

	appendStringInfoChar(&c->names, '{');
	appendStringInfoChar(&c->statuses, '{');
	appendStringInfoChar(&c->reasons, '{');
	for (int i = 0; i < nfiles; i++)
	{
		ProducedFile *pf = &d->produced.v[i];
		DbParam    *q = &c->files[i * 7];

		if (strcmp(pf->status, "saved") != 0)
		{
			append_array_elem(&c->names, pf->name);
			append_array_elem(&c->statuses, pf->status);
			append_array_elem(&c->reasons, pf->reason);
			nskipped++;
			continue;
		}
		step_lease_params(q, run);
		q[3] = step_param(pf->name);
		q[4] = step_param(pf->status);
		q[5] = step_param(pf->reason);
		q[6].value = pf->data;
		q[6].len = pf->data ? (int) pf->len : -1;
		db_batch_add(b, SQL_STORE_FILE, 7, q);
	}
	appendStringInfoChar(&c->names, '}');
	appendStringInfoChar(&c->statuses, '}');
	appendStringInfoChar(&c->reasons, '}');
	if (nskipped > 0)
	{
		step_lease_params(c->skipped, run);
		c->skipped[3] = step_param(c->names.data);
		c->skipped[4] = step_param(c->statuses.data);
		c->skipped[5] = step_param(c->reasons.data);
		db_batch_add(b, SQL_STORE_SKIPPED, 6, c->skipped);
	}
}

/*
 * The connection log and the verdict's egress summary, before the finish:
 * the tool call it writes carries the summary and the run's egress audit
 * event.
 */
static void
add_egress(DbBatch *b, Run *run, ResultCalls *c)
{
	RunDisk    *d = &run->disk;

	step_lease_params(c->egress, run);
	c->egress[3] = step_param(d->egress_log ? d->egress_log : "");
	c->egress[4] = step_param(run->jail.verdict.len > 0 ? run->jail.verdict.data : NULL);
	db_batch_add(b, SQL_RECORD_EGRESS, 5, c->egress);
}

static void
add_finish(DbBatch *b, Run *run, ResultCalls *c, const char *error, int jail_status)
{
	RunDisk    *d = &run->disk;
	DbParam    *p = c->finish;

	snprintf(c->status, sizeof(c->status), "%d", jail_status);
	snprintf(c->bytes, sizeof(c->bytes), "%lld", (long long) d->ws_bytes);
	snprintf(c->entries, sizeof(c->entries), "%d", d->ws_entries);
	step_lease_params(p, run);
	p[3] = step_param(run->jail.verdict.len > 0 && error == NULL ? run->jail.verdict.data : NULL);
	p[4] = step_param(c->status);
	p[5] = step_param(error);
	p[6] = step_param(run->phase != RUN_UNSTARTED ? "true" : "false");
	p[7] = step_param(run->out.truncated ? "true" : "false");
	p[8] = step_param(d->measured ? c->bytes : NULL);
	p[9] = step_param(d->measured ? c->entries : NULL);
	p[10] = step_param(d->ws_reset);
	db_batch_add(b, SQL_FINISH, 11, p);
}

/*
 * The result's batch did not commit: which call failed (those after it
 * were not run: no SQLSTATE), DB_FENCED when it said the lease is not
 * ours, and why in *err (malloc'd).
 */
static DbOutcome
result_failed(const DbBatch *b, const DbResult *fin, DbOutcome o, const Run *run, char **err)
{
	const DbResult *bad = NULL;

	for (int i = 0; i < b->n && bad == NULL; i++)
		if (b->items[i].r.outcome != DB_OK && b->items[i].r.sqlstate[0])
			bad = &b->items[i].r;
	if (bad == NULL)
		bad = fin;
	if (step_fenced(bad))
		o = DB_FENCED;
	*err = pg_strdup(bad->message ? bad->message : "unknown error");
	if (o != DB_FENCED)
		runner_log(RLOG_WARNING, "could not record the result of invocation %s: %s",
				   run->id, *err);
	return o;
}

/*
 * Record the run's result in one transaction: with files, the output that
 * waited (a run that ended before its start report, output.c), the files
 * it produced and its egress log; then the finish step.  Without files
 * (the fallback) only the finish: a log or a file the database refuses
 * must never keep the slot.  DB_OK when it committed; *applied then says
 * whether the result was also applied (false: it is staged).  DB_FENCED
 * when the lease is not ours.  On failure *err (malloc'd) says why.
 */
DbOutcome
step_record_result(Run *run, const char *error, int jail_status, bool with_files,
				   bool *applied, char **err)
{
	int			nfiles = with_files ? run->disk.produced.n : 0;
	ResultCalls c;
	DbBatch		b;
	DbOutcome	o;
	const DbResult *fin;
	int			nfin;

	memset(&c, 0, sizeof(c));
	c.files = pg_malloc0(sizeof(DbParam) * 7 * Max(nfiles, 1));
	initStringInfo(&c.names);
	initStringInfo(&c.statuses);
	initStringInfo(&c.reasons);
	db_batch_init(&b);
	if (with_files)
	{
		bool		ready[NSTREAMS];

		for (int st = 0; st < NSTREAMS; st++)
			ready[st] = run->out.pending[st].len > 0;
		add_output(&b, run, ready, c.output);
	}
	add_files(&b, run, &c, nfiles);
	if (with_files && run->disk.egress)
		add_egress(&b, run, &c);
	add_finish(&b, run, &c, error, jail_status);
	nfin = b.n - 1;				/* (db_batch_run appends a sync point after it) */

	o = db_batch_run(&b);
	fin = &b.items[nfin].r;
	if (o == DB_OK)
		*applied = db_value(fin, 0, 0) != NULL;
	else
		o = result_failed(&b, fin, o, run, err);
	db_batch_free(&b);
	free(c.files);
	free(c.names.data);
	free(c.statuses.data);
	free(c.reasons.data);
	return o;
}
