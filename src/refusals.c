/*-------------------------------------------------------------------------
 *
 * refusals.c
 *	  Refusals that outlive the caller's rollback: the audit event of a
 *	  refused request (capability.invoke_denied) is written in the caller's
 *	  transaction, and kept here too until that transaction ends; if it
 *	  (or the subtransaction that made the request) rolls back, the event
 *	  is handed to the supervisor, which appends it in a transaction of its
 *	  own, marked rolled_back.
 *
 * Why: a refusal changes nothing, so nothing else records it, and a
 * backend that probes what it may do and rolls back would leave no trace.
 * Committed refusals cost nothing more than a copy in backend memory.
 *
 * The hand-over happens in the abort callbacks, where nothing may fail:
 * everything is copied into a fixed-size record at request time (no
 * allocation at abort), and the queue in shared memory is a fixed array
 * under a spinlock.  It is bounded twice: SANDBOX_REFUSAL_SLOTS in all,
 * and SANDBOX_REFUSAL_PER_ORG queued for one org, so that one tenant's
 * flood of rolled-back refusals cannot crowd out another's.  What does not
 * fit is counted per org (SANDBOX_REFUSAL_COUNTED orgs; beyond them in one
 * total) and the supervisor writes the count as one event
 * (capability.invoke_denied_counted, docs/security.md): a refusal is never
 * dropped without a trace in its org's chain, unless the server stops
 * before the supervisor writes it (shared memory does not survive a
 * restart) or more orgs overflow at once than are counted (the total is
 * logged).
 *
 * Locking: refusal_queue->mutex (a spinlock) guards the whole queue; it is
 * held only to copy a record in or out, never across a transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"

#define SANDBOX_REFUSAL_SLOTS		256
#define SANDBOX_REFUSAL_PER_ORG		32
#define SANDBOX_REFUSAL_COUNTED		64
#define REFUSAL_ACTOR_MAX			257		/* a person's name: 256 bytes */
#define REFUSAL_DETAILS_MAX			4096	/* request_execution's details */
/* A record the supervisor could not write this often is counted instead. */
#define REFUSAL_MAX_ATTEMPTS		3

typedef enum RefusalState
{
	REFUSAL_FREE = 0,
	REFUSAL_QUEUED,				/* rolled back: to be written */
	REFUSAL_WRITING				/* the supervisor writes it now */
} RefusalState;

typedef struct RefusalRecord
{
	pg_uuid_t	org;
	pg_uuid_t	workspace;
	bool		has_workspace;
	TimestampTz refused_at;
	char		actor[REFUSAL_ACTOR_MAX];
	char		details[REFUSAL_DETAILS_MAX];	/* jsonb, as text */
} RefusalRecord;

typedef struct RefusalSlot
{
	RefusalState state;
	int			attempts;
	RefusalRecord rec;
} RefusalSlot;

typedef struct RefusalCount
{
	pg_uuid_t	org;
	int64		count;			/* 0: the entry is free */
} RefusalCount;

typedef struct RefusalQueue
{
	slock_t		mutex;
	Latch	   *supervisor_latch;	/* set when something is queued */
	bool		work;			/* queued or counted since the last look */
	int64		uncounted;		/* refusals of orgs beyond the counted ones */
	RefusalCount counted[SANDBOX_REFUSAL_COUNTED];
	RefusalSlot slots[SANDBOX_REFUSAL_SLOTS];
} RefusalQueue;

static RefusalQueue *refusal_queue = NULL;

/* This backend's refusals of the open transaction, by subtransaction. */
typedef struct PendingRefusal
{
	SubTransactionId subid;
	RefusalRecord rec;
	struct PendingRefusal *next;
} PendingRefusal;

static PendingRefusal *pending = NULL;
static bool callbacks_registered = false;

Size
sandbox_refusals_shmem_size(void)
{
	return MAXALIGN(sizeof(RefusalQueue));
}

void
sandbox_refusals_shmem_startup(void)
{
	bool		found;

	refusal_queue = ShmemInitStruct("sandbox_ext refusals", sizeof(RefusalQueue), &found);
	if (!found)
	{
		memset(refusal_queue, 0, sizeof(RefusalQueue));
		SpinLockInit(&refusal_queue->mutex);
	}
}

/*
 * The supervisor, at its start: be woken when a refusal is queued, and
 * take back what a previous supervisor was writing when it stopped (its
 * transaction did not commit, or it would have freed the slot).
 */
void
sandbox_refusals_attach(Latch *latch)
{
	SpinLockAcquire(&refusal_queue->mutex);
	refusal_queue->supervisor_latch = latch;
	for (int i = 0; i < SANDBOX_REFUSAL_SLOTS; i++)
		if (refusal_queue->slots[i].state == REFUSAL_WRITING)
			refusal_queue->slots[i].state = REFUSAL_QUEUED;
	refusal_queue->work = true;
	SpinLockRelease(&refusal_queue->mutex);
}

/* The supervisor, at its exit: nobody to wake. */
void
sandbox_refusals_detach(void)
{
	SpinLockAcquire(&refusal_queue->mutex);
	refusal_queue->supervisor_latch = NULL;
	SpinLockRelease(&refusal_queue->mutex);
}

/* Count one refusal of org that did not fit (mutex held). */
static void
count_unqueued(const pg_uuid_t *org)
{
	RefusalCount *free_entry = NULL;

	for (int i = 0; i < SANDBOX_REFUSAL_COUNTED; i++)
	{
		RefusalCount *c = &refusal_queue->counted[i];

		if (c->count > 0 && memcmp(&c->org, org, sizeof(pg_uuid_t)) == 0)
		{
			c->count++;
			return;
		}
		if (c->count == 0 && free_entry == NULL)
			free_entry = c;
	}
	if (free_entry != NULL)
	{
		free_entry->org = *org;
		free_entry->count = 1;
	}
	else
		refusal_queue->uncounted++;
	refusal_queue->work = true;
}

/*
 * Queue one rolled-back refusal for the supervisor.  Called from abort
 * callbacks: copies and a spinlock only, nothing that can fail.
 */
static void
queue_refusal(const RefusalRecord *rec)
{
	RefusalSlot *free_slot = NULL;
	int			of_org = 0;
	Latch	   *latch;

	SpinLockAcquire(&refusal_queue->mutex);
	for (int i = 0; i < SANDBOX_REFUSAL_SLOTS; i++)
	{
		RefusalSlot *s = &refusal_queue->slots[i];

		if (s->state == REFUSAL_FREE)
		{
			if (free_slot == NULL)
				free_slot = s;
		}
		else if (memcmp(&s->rec.org, &rec->org, sizeof(pg_uuid_t)) == 0)
			of_org++;
	}
	if (free_slot == NULL || of_org >= SANDBOX_REFUSAL_PER_ORG)
		count_unqueued(&rec->org);
	else
	{
		memcpy(&free_slot->rec, rec, sizeof(RefusalRecord));
		free_slot->attempts = 0;
		free_slot->state = REFUSAL_QUEUED;
		refusal_queue->work = true;
	}
	latch = refusal_queue->supervisor_latch;
	SpinLockRelease(&refusal_queue->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

static void
forget_pending(void)
{
	while (pending != NULL)
	{
		PendingRefusal *next = pending->next;

		pfree(pending);
		pending = next;
	}
}

/* Queue and forget the refusals made in subtransaction subid (all: 0). */
static void
queue_pending(SubTransactionId subid)
{
	PendingRefusal **p = &pending;

	while (*p != NULL)
	{
		PendingRefusal *r = *p;

		if (subid == InvalidSubTransactionId || r->subid == subid)
		{
			queue_refusal(&r->rec);
			*p = r->next;
			pfree(r);
		}
		else
			p = &r->next;
	}
}

static void
refusals_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PREPARE:
			/* the events are in the committed (or prepared) transaction */
			forget_pending();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			queue_pending(InvalidSubTransactionId);
			break;
		default:
			break;
	}
}

static void
refusals_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						  SubTransactionId parentSubid, void *arg)
{
	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			/* the parent carries them now */
			for (PendingRefusal *r = pending; r != NULL; r = r->next)
				if (r->subid == mySubid)
					r->subid = parentSubid;
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			/* rolled back, whatever the top transaction does next */
			queue_pending(mySubid);
			break;
		default:
			break;
	}
}

PG_FUNCTION_INFO_V1(sandbox_keep_refusal);

/*
 * agent._keep_refusal(org, workspace, actor, details): keep the refusal
 * whose event the caller has just appended, so that it is written again
 * if the caller's transaction rolls back.  A no-op without shared memory
 * (the library not preloaded: no supervisor would write it).
 */
Datum
sandbox_keep_refusal(PG_FUNCTION_ARGS)
{
	PendingRefusal *r;
	char	   *actor;
	char	   *details;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a refusal needs an org and details")));
	if (refusal_queue == NULL)
		PG_RETURN_VOID();
	actor = PG_ARGISNULL(2) ? "" : TextDatumGetCString(PG_GETARG_DATUM(2));
	details = DatumGetCString(DirectFunctionCall1(jsonb_out, PG_GETARG_DATUM(3)));
	/* request_execution's arguments are bounded well below these */
	if (strlen(actor) >= REFUSAL_ACTOR_MAX || strlen(details) >= REFUSAL_DETAILS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a refusal's audit event is too large to keep")));

	if (!callbacks_registered)
	{
		RegisterXactCallback(refusals_xact_callback, NULL);
		RegisterSubXactCallback(refusals_subxact_callback, NULL);
		callbacks_registered = true;
	}
	r = MemoryContextAllocZero(TopMemoryContext, sizeof(PendingRefusal));
	r->subid = GetCurrentSubTransactionId();
	r->rec.org = *PG_GETARG_UUID_P(0);
	r->rec.has_workspace = !PG_ARGISNULL(1);
	if (r->rec.has_workspace)
		r->rec.workspace = *PG_GETARG_UUID_P(1);
	r->rec.refused_at = GetCurrentTimestamp();
	strlcpy(r->rec.actor, actor, sizeof(r->rec.actor));
	strlcpy(r->rec.details, details, sizeof(r->rec.details));
	r->next = pending;
	pending = r;
	PG_RETURN_VOID();
}

/* ----------------------------------------------------------------
 * The supervisor's side
 * ----------------------------------------------------------------
 */

/* Append one event with agent._audit (SPI connected, in a transaction). */
static void
append_event(const pg_uuid_t *org, const pg_uuid_t *workspace, const char *event_type,
			 const char *actor, const char *details)
{
	Oid			types[5] = {UUIDOID, UUIDOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};

	values[0] = UUIDPGetDatum(org);
	if (workspace != NULL)
		values[1] = UUIDPGetDatum(workspace);
	else
		nulls[1] = 'n';
	values[2] = CStringGetTextDatum(event_type);
	values[3] = CStringGetTextDatum(actor);
	values[4] = CStringGetTextDatum(details);
	if (SPI_execute_with_args("SELECT agent._audit($1, $2, $3, NULL, $4, $5::jsonb)",
							  5, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "agent._audit failed");
}

/* One queued refusal, written in a transaction of its own. */
static void
write_refusal(RefusalSlot *slot)
{
	RefusalRecord rec;
	volatile bool done = false;

	memcpy(&rec, &slot->rec, sizeof(rec));	/* WRITING: ours alone */
	PG_TRY();
	{
		Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
		Datum		values[2];
		char	   *details;

		sandbox_xact_begin("recording refusals a caller rolled back");
		/* the caller's details, plus when and that it was rolled back */
		values[0] = CStringGetTextDatum(rec.details);
		values[1] = TimestampTzGetDatum(rec.refused_at);
		if (SPI_execute_with_args("SELECT ($1::jsonb OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object("
								  "'rolled_back', true, 'refused_at', $2))::text",
								  2, types, values, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			elog(ERROR, "could not build the refusal's details");
		details = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		append_event(&rec.org, rec.has_workspace ? &rec.workspace : NULL,
					 "capability.invoke_denied", rec.actor, details);
		sandbox_xact_commit();
		done = true;
	}
	PG_CATCH();
	{
		sandbox_xact_abort_log(WARNING, "recording a refusal its caller rolled back");
	}
	PG_END_TRY();

	SpinLockAcquire(&refusal_queue->mutex);
	if (done)
		slot->state = REFUSAL_FREE;
	else if (++slot->attempts >= REFUSAL_MAX_ATTEMPTS)
	{
		/* it will not be written: counted, so its org's chain says so */
		count_unqueued(&slot->rec.org);
		slot->state = REFUSAL_FREE;
	}
	else
	{
		slot->state = REFUSAL_QUEUED;
		refusal_queue->work = true;
	}
	SpinLockRelease(&refusal_queue->mutex);
}

/* The counts of refusals that did not fit, one event per org. */
static void
write_counts(void)
{
	RefusalCount counts[SANDBOX_REFUSAL_COUNTED];
	int64		uncounted;

	SpinLockAcquire(&refusal_queue->mutex);
	memcpy(counts, refusal_queue->counted, sizeof(counts));
	memset(refusal_queue->counted, 0, sizeof(refusal_queue->counted));
	uncounted = refusal_queue->uncounted;
	refusal_queue->uncounted = 0;
	SpinLockRelease(&refusal_queue->mutex);

	if (uncounted > 0)
		ereport(WARNING,
				(errmsg("%lld refusals rolled back by their callers were not recorded",
						(long long) uncounted),
				 errdetail("More organizations overflowed the refusal queue at once than it counts.")));
	for (int i = 0; i < SANDBOX_REFUSAL_COUNTED; i++)
	{
		if (counts[i].count == 0)
			continue;
		PG_TRY();
		{
			sandbox_xact_begin("recording refusals a caller rolled back");
			append_event(&counts[i].org, NULL, "capability.invoke_denied_counted", "supervisor",
						 psprintf("{\"rolled_back\": true, \"count\": " INT64_FORMAT "}",
								  counts[i].count));
			sandbox_xact_commit();
		}
		PG_CATCH();
		{
			sandbox_xact_abort_log(WARNING, "recording a count of refusals");
		}
		PG_END_TRY();
	}
}

/*
 * The supervisor's step: write what rolled-back callers left queued, at
 * most a batch per call (a flood cannot make one turn of its loop long).
 * Returns whether more is queued.
 */
bool
sandbox_refusals_write(void)
{
	int			written = 0;
	bool		more = false;
	bool		work;

	SpinLockAcquire(&refusal_queue->mutex);
	work = refusal_queue->work;
	refusal_queue->work = false;
	SpinLockRelease(&refusal_queue->mutex);
	if (!work)
		return false;
	for (int i = 0; i < SANDBOX_REFUSAL_SLOTS; i++)
	{
		RefusalSlot *s = &refusal_queue->slots[i];
		bool		mine = false;

		SpinLockAcquire(&refusal_queue->mutex);
		if (s->state == REFUSAL_QUEUED)
		{
			if (written < 64)
			{
				s->state = REFUSAL_WRITING;
				mine = true;
			}
			else
				more = true;
		}
		SpinLockRelease(&refusal_queue->mutex);
		if (mine)
		{
			write_refusal(s);
			written++;
		}
	}
	write_counts();
	if (more)
	{
		SpinLockAcquire(&refusal_queue->mutex);
		refusal_queue->work = true;
		SpinLockRelease(&refusal_queue->mutex);
	}
	return more;
}
