/*-------------------------------------------------------------------------
 *
 * chclient.c
 *		Every request the extension makes to ClickHouse: the HTTP client
 *		(libcurl) and the queries of the exporter and the anchor reader.
 *
 * The query texts live here, one function per request, so that the
 * callers (export_stream.c, anchor.c) deal in rows and positions.  Names
 * in them come from settings checked to be identifiers ([A-Za-z0-9_.]),
 * the slot name from one checked to be [a-z0-9_], an org as a uuid's
 * output form: nothing needs quoting.
 *
 * One CURL easy handle lives for the life of the exporter worker, so the
 * TCP connection is kept alive between batches.  A request never runs
 * inside a PostgreSQL transaction.  It gives up early when the worker is
 * told to die or the postmaster goes away (the progress callback), so
 * SIGTERM is honoured within a fraction of a second even while ClickHouse
 * hangs.
 *
 * Classification.  Whether a failure is worth retrying decides between
 * backoff and the error state, so it lives here in one place:
 *   - no connection, timeout, HTTP 408/429/5xx: transient;
 *   - other HTTP 4xx: permanent;
 *   - HTTP 500 whose body names a ClickHouse error that retrying cannot fix
 *     (unknown table or column, parse errors, type mismatch, auth):
 *     permanent.  ClickHouse 18.16 reports most exceptions as 500 and only
 *     puts the code in the body ("Code: 16, e.displayText() = ...").
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <curl/curl.h>

#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"

#include "exporter.h"

static CURL *ch_handle = NULL;
static bool ch_global_done = false;

/* ClickHouse error codes that retrying will not fix. */
static const int ch_permanent_codes[] = {
	6,							/* CANNOT_PARSE_TEXT */
	8,							/* THERE_IS_NO_COLUMN */
	10,							/* NOT_FOUND_COLUMN_IN_BLOCK */
	16,							/* NO_SUCH_COLUMN_IN_TABLE */
	20,							/* NUMBER_OF_COLUMNS_DOESNT_MATCH */
	26,							/* CANNOT_PARSE_QUOTED_STRING */
	27,							/* CANNOT_PARSE_INPUT_ASSERTION_FAILED */
	33,							/* CANNOT_READ_ALL_DATA */
	38,							/* CANNOT_PARSE_DATE */
	41,							/* CANNOT_PARSE_DATETIME */
	44,							/* ILLEGAL_COLUMN */
	47,							/* UNKNOWN_IDENTIFIER */
	53,							/* TYPE_MISMATCH */
	60,							/* UNKNOWN_TABLE */
	62,							/* SYNTAX_ERROR */
	69,							/* ARGUMENT_OUT_OF_BOUND */
	70,							/* CANNOT_CONVERT_TYPE */
	72,							/* CANNOT_PARSE_NUMBER */
	81,							/* UNKNOWN_DATABASE */
	117,						/* INCORRECT_DATA */
	164,						/* READONLY */
	192,						/* UNKNOWN_USER */
	193,						/* WRONG_PASSWORD */
	194,						/* REQUIRED_PASSWORD */
	195,						/* IP_ADDRESS_NOT_ALLOWED */
	349,						/* CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN */
	376,						/* CANNOT_PARSE_UUID */
	497,						/* ACCESS_DENIED (newer servers) */
	516,						/* AUTHENTICATION_FAILED (newer servers) */
};

/* Where a response goes, and how much of it is kept. */
typedef struct ChResponse
{
	StringInfo	buf;
	size_t		max;
	bool		truncated;
} ChResponse;

static size_t
ch_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	ChResponse *r = (ChResponse *) userdata;
	size_t		n = size * nmemb;
	size_t		room = r->max > (size_t) r->buf->len ? r->max - r->buf->len : 0;

	if (n > room)
		r->truncated = true;
	appendBinaryStringInfo(r->buf, ptr, Min(n, room));
	return n;
}

static int
ch_progress_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow,
			   curl_off_t ultotal, curl_off_t ulnow)
{
	/*
	 * Abort the transfer; the caller's CHECK_FOR_INTERRUPTS() exits (the
	 * worker) or cancels the query (a backend reading anchors).
	 */
	if (ProcDiePending || QueryCancelPending || !PostmasterIsAlive())
		return 1;
	return 0;
}

static CURL *
ch_get_handle(void)
{
	if (!ch_global_done)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not initialise libcurl")));
		ch_global_done = true;
	}
	if (ch_handle == NULL)
	{
		ch_handle = curl_easy_init();
		if (ch_handle == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("could not create a libcurl handle")));
	}
	return ch_handle;
}

void
sandbox_ch_close(void)
{
	if (ch_handle != NULL)
		curl_easy_cleanup(ch_handle);
	ch_handle = NULL;
}

static int
ch_error_code(const char *body)
{
	const char *p = strstr(body, "Code: ");

	if (p == NULL)
		return -1;
	return atoi(p + 6);
}

static bool
ch_code_is_permanent(int code)
{
	int			i;

	for (i = 0; i < lengthof(ch_permanent_codes); i++)
		if (ch_permanent_codes[i] == code)
			return true;
	return false;
}

/* The URL for messages: without user:password@, which it may carry. */
static void
ch_url_for_message(const char *url, char *out, size_t outlen)
{
	const char *scheme_end = strstr(url, "://");
	const char *at = scheme_end ? strchr(scheme_end + 3, '@') : NULL;
	const char *slash = scheme_end ? strchr(scheme_end + 3, '/') : NULL;

	if (at != NULL && (slash == NULL || at < slash))
		snprintf(out, outlen, "%.*s%s", (int) (scheme_end + 3 - url), url, at + 1);
	else
		strlcpy(out, url, outlen);
}

/*
 * POST body (may be empty) to t->url with the query in the URL.  On CH_OK
 * the response body is in *response (at most max_response bytes: a longer
 * one is CH_PERMANENT); otherwise err holds a one-line description for
 * agent.export_status().
 */
ChResult
sandbox_ch_post(const ChTarget *t, const char *query, const char *body, size_t len,
				StringInfo response, size_t max_response, char *err, size_t errlen)
{
	const char *base_url = t->url;
	int			timeout_s = t->timeout_s;
	ChResponse	sink = {response, max_response, false};
	CURL	   *h = ch_get_handle();
	char	   *qesc;
	StringInfoData url;
	CURLcode	rc;
	long		status = 0;
	char		curlerr[CURL_ERROR_SIZE];
	int			code;
	char	   *nl;

	qesc = curl_easy_escape(h, query, 0);
	initStringInfo(&url);
	appendStringInfo(&url, "%s%s?query=%s", base_url,
					 base_url[strlen(base_url) - 1] == '/' ? "" : "/", qesc);
	curl_free(qesc);

	resetStringInfo(response);
	curlerr[0] = '\0';
	curl_easy_reset(h);			/* keeps the connection cache */
	curl_easy_setopt(h, CURLOPT_URL, url.data);
	curl_easy_setopt(h, CURLOPT_POST, 1L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ch_write_cb);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, ch_progress_cb);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curlerr);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long) timeout_s);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	/* ClickHouse answers 100-continue, but it costs a round trip. */
	{
		struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");

		hdrs = curl_slist_append(hdrs, "Content-Type: text/tab-separated-values");
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		rc = curl_easy_perform(h);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
		curl_slist_free_all(hdrs);
	}
	pfree(url.data);
	CHECK_FOR_INTERRUPTS();

	if (rc != CURLE_OK)
	{
		char		shown[256];

		ch_url_for_message(base_url, shown, sizeof(shown));
		snprintf(err, errlen, "could not reach ClickHouse at %s: %s",
				 shown, curlerr[0] ? curlerr : curl_easy_strerror(rc));
		/* A broken connection must not be reused. */
		sandbox_ch_close();
		return CH_TRANSIENT;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200 && !sink.truncated)
		return CH_OK;
	if (status == 200)
	{
		snprintf(err, errlen, "ClickHouse answered with more than %zu bytes", max_response);
		return CH_PERMANENT;
	}

	/* One line of ClickHouse's message is enough for the status view. */
	nl = strchr(response->data, '\n');
	if (nl)
		*nl = '\0';
	snprintf(err, errlen, "ClickHouse answered HTTP %ld: %s", status, response->data);
	if (status == 408 || status == 429 || status >= 500)
	{
		code = ch_error_code(response->data);
		if (status == 500 && ch_code_is_permanent(code))
			return CH_PERMANENT;
		return CH_TRANSIENT;
	}
	return CH_PERMANENT;
}

/* ---- the requests ---- */

/* INSERT rows (TabSeparated, one per line) into table (columns). */
ChResult
sandbox_ch_insert(const ChTarget *t, const char *table, const char *columns,
				  const StringInfo rows, char *err, size_t errlen)
{
	StringInfoData q;
	StringInfoData resp;
	ChResult	r;

	initStringInfo(&q);
	initStringInfo(&resp);
	appendStringInfo(&q, "INSERT INTO %s (%s) FORMAT TabSeparated", table, columns);
	r = sandbox_ch_post(t, q.data, rows->data, rows->len, &resp, CH_RESPONSE_MAX,
						err, errlen);
	pfree(q.data);
	pfree(resp.data);
	return r;
}

/* The export watermark of a slot: max(lsn) in the progress table (0: none). */
ChResult
sandbox_ch_read_watermark(const ChTarget *t, const char *table, const char *slot,
						  XLogRecPtr *lsn, char *err, size_t errlen)
{
	StringInfoData q;
	StringInfoData resp;
	ChResult	r;

	initStringInfo(&q);
	initStringInfo(&resp);
	appendStringInfo(&q, "SELECT max(lsn) FROM %s WHERE slot = '%s' FORMAT TabSeparated",
					 table, slot);
	r = sandbox_ch_post(t, q.data, NULL, 0, &resp, CH_RESPONSE_MAX, err, errlen);
	if (r == CH_OK)
		*lsn = (XLogRecPtr) strtoull(resp.data, NULL, 10);
	pfree(q.data);
	pfree(resp.data);
	return r;
}

/* Record that the slot's rows up to lsn (rows of them in this batch) are in. */
ChResult
sandbox_ch_write_watermark(const ChTarget *t, const char *table, const char *slot,
						   XLogRecPtr lsn, uint64 rows, char *err, size_t errlen)
{
	StringInfoData body;
	ChResult	r;

	initStringInfo(&body);
	appendStringInfo(&body, "%s\t" UINT64_FORMAT "\t" UINT64_FORMAT "\n",
					 slot, (uint64) lsn, rows);
	r = sandbox_ch_insert(t, table, "slot, lsn, rows", &body, err, errlen);
	pfree(body.data);
	return r;
}

/*
 * One page of an org's audit anchors, grouped by anchored event, in chain
 * order after the id `after`: last_id, one hash, one count, the number of
 * different (hash, events) pairs, and when ClickHouse first received it
 * (Unix seconds), TabSeparated.
 */
ChResult
sandbox_ch_read_anchors(const ChTarget *t, const char *table, const char *org,
						int64 after, int limit, StringInfo response,
						size_t max_response, char *err, size_t errlen)
{
	StringInfoData q;
	ChResult	r;

	initStringInfo(&q);
	appendStringInfo(&q,
					 "SELECT last_id, any(last_hash), any(events), uniqExact(last_hash, events),"
					 " toUnixTimestamp(min(anchored_at))"
					 " FROM %s WHERE org_id = toUUID('%s') AND last_id > " INT64_FORMAT
					 " GROUP BY last_id ORDER BY last_id LIMIT %d FORMAT TabSeparated",
					 table, org, after, limit);
	r = sandbox_ch_post(t, q.data, NULL, 0, response, max_response, err, errlen);
	pfree(q.data);
	return r;
}
