/*-------------------------------------------------------------------------
 *
 * digest.c
 *	  The two hashes of the control plane, in C:
 *	    agent.code_sha256(code)			what an approval is bound to
 *	    agent._audit_hash(version, prev, id, ...)	one link of an org's audit chain
 *	  and sandbox_sha256_utf8(), which the code-hash trigger (guards.c) uses.
 *
 * Why not SQL's sha256(): every call of it (PostgreSQL's cryptohash over
 * OpenSSL 3) fetches the SHA-256 implementation from OpenSSL's provider
 * store again, about 4 us, and a request+approve pair hashes four times.
 * Here the implementation is fetched once per backend and one digest
 * context is reused.  The results are byte for byte those of the SQL
 * definitions they replaced, which stay documented next to each function
 * (docs/control-plane.md has the audit formula; an external auditor
 * recomputes it from the rows), and pgTAP compares the two.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <openssl/evp.h>

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "sandbox_ext.h"

#define SHA256_LEN 32

static EVP_MD *sha256_md;
static EVP_MD_CTX *sha256_ctx;

/*
 * hex := lower-case hex of sha256(data); hex has room for 65 bytes.  The
 * data are hashed as given: callers convert text to UTF-8 first.
 */
static void
sha256_hex(const char *data, size_t len, char *hex)
{
	static const char digits[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (sha256_md == NULL)
	{
		sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
		if (sha256_md == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_SYSTEM_ERROR),
					 errmsg("could not load OpenSSL's SHA-256")));
	}
	if (sha256_ctx == NULL)
	{
		sha256_ctx = EVP_MD_CTX_new();
		if (sha256_ctx == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
	}
	if (EVP_DigestInit_ex2(sha256_ctx, sha256_md, NULL) != 1 ||
		EVP_DigestUpdate(sha256_ctx, data, len) != 1 ||
		EVP_DigestFinal_ex(sha256_ctx, md, &mdlen) != 1 ||
		mdlen != SHA256_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("could not compute a SHA-256 digest")));
	for (int i = 0; i < SHA256_LEN; i++)
	{
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0x0f];
	}
	hex[2 * SHA256_LEN] = '\0';
}

/*
 * sha256 of a server-encoded string, as convert_to(s, 'UTF8') would give
 * it, in hex (also the code-hash trigger's, guards.c)
 */
text *
sandbox_sha256_utf8(const char *s, int len)
{
	const char *utf8 = pg_server_to_any(s, len, PG_UTF8);
	size_t		n = (utf8 == s) ? (size_t) len : strlen(utf8);
	char		hex[2 * SHA256_LEN + 1];

	sha256_hex(utf8, n, hex);
	return cstring_to_text(hex);
}

/*
 * agent.code_sha256(code) =
 *	 encode(sha256(convert_to(code, 'UTF8')), 'hex')
 */
PG_FUNCTION_INFO_V1(sandbox_code_sha256);
Datum
sandbox_code_sha256(PG_FUNCTION_ARGS)
{
	text	   *code = PG_GETARG_TEXT_PP(0);

	PG_RETURN_TEXT_P(sandbox_sha256_utf8(VARDATA_ANY(code), VARSIZE_ANY_EXHDR(code)));
}

/*
 * The audit hash's versions.  Version 1 (events appended before 0.3.0)
 * joined the fields with \x1f and dropped a NULL field together with its
 * separator, so one byte string could be split into fields in more than one
 * way; verify_audit_chain() accepts a version 1 event only when it has one
 * reading (no field contains \x1f, none of the dropped ones is NULL).
 * Version 2 frames every field, NULL apart from empty:
 *
 *	 "sandbox_ext audit v2" field*  where field = "-" (NULL)
 *								   | <byte length in decimal> ":" <UTF-8 bytes>
 *
 * The tag starts with a byte that no version 1 input can start with (a
 * version 1 input starts with a hex prev_hash or \x1f), so an event cannot
 * be given the other version's reading of the same bytes either.
 */
#define AUDIT_HASH_V2_TAG	"sandbox_ext audit v2"

/* version 1: concat_ws, a NULL item is left out with its separator */
static void
append_item_v1(StringInfo buf, bool *first, const char *s)
{
	if (s == NULL)
		return;
	if (!*first)
		appendStringInfoChar(buf, '\x1f');
	appendStringInfoString(buf, s);
	*first = false;
}

/* version 2: "-" for NULL, else the UTF-8 bytes framed by their length */
static void
append_item_v2(StringInfo buf, const char *s)
{
	const char *utf8;
	size_t		n;

	if (s == NULL)
	{
		appendStringInfoChar(buf, '-');
		return;
	}
	utf8 = pg_server_to_any(s, strlen(s), PG_UTF8);
	n = strlen(utf8);
	appendStringInfo(buf, "%zu:", n);
	appendBinaryStringInfo(buf, utf8, n);
}

static const char *
uuid_or(FunctionCallInfo fcinfo, int arg, const char *if_null)
{
	if (PG_ARGISNULL(arg))
		return if_null;
	return DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(arg)));
}

static const char *
text_or(FunctionCallInfo fcinfo, int arg, const char *if_null)
{
	if (PG_ARGISNULL(arg))
		return if_null;
	return TextDatumGetCString(PG_GETARG_DATUM(arg));
}

/* created_at as epoch microseconds, or NULL */
static const char *
epoch_usec_or_null(FunctionCallInfo fcinfo, int arg)
{
	TimestampTz at;

	if (PG_ARGISNULL(arg))
		return NULL;
	at = PG_GETARG_TIMESTAMPTZ(arg);
	if (TIMESTAMP_NOT_FINITE(at))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("cannot convert infinity to bigint")));
	return psprintf(INT64_FORMAT,
					at + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY);
}

/*
 * agent._audit_hash(hash_version, prev_hash, id, org_id, workspace_id,
 *					 event_type, invocation_id, actor, details, created_at)
 *
 * version 1 =
 *	 encode(sha256(convert_to(concat_ws(E'\x1f',
 *		 coalesce(prev_hash, ''), id::text, org_id::text,
 *		 coalesce(workspace_id::text, ''), event_type,
 *		 coalesce(invocation_id::text, ''), coalesce(actor, ''),
 *		 details::text,
 *		 (extract(epoch FROM created_at) * 1000000)::bigint::text),
 *	 'UTF8')), 'hex')
 * version 2 =
 *	 encode(sha256(convert_to('sandbox_ext audit v2', 'UTF8') || f(prev_hash) ||
 *		 f(id::text) || f(org_id::text) || f(workspace_id::text) ||
 *		 f(event_type) || f(invocation_id::text) || f(actor) ||
 *		 f(details::text) ||
 *		 f((extract(epoch FROM created_at) * 1000000)::bigint::text)), 'hex')
 *	 where f(t) = CASE WHEN t IS NULL THEN '\x2d'::bytea
 *				  ELSE convert_to(octet_length(convert_to(t, 'UTF8')) || ':', 'UTF8')
 *					   || convert_to(t, 'UTF8') END
 * Nothing in either depends on a session setting: uuids, bigints and jsonb
 * have one text form, and the timestamp is rendered as epoch microseconds.
 */
PG_FUNCTION_INFO_V1(sandbox_audit_hash);
Datum
sandbox_audit_hash(PG_FUNCTION_ARGS)
{
	StringInfoData buf;
	const char *fields[9];
	int32		version;
	int			a;				/* the argument index of prev_hash */

	/*
	 * The catalog of 0.2.0 (which this library runs until ALTER EXTENSION
	 * UPDATE, docs/operations.md) declares the function without the
	 * version: nine arguments, version 1.
	 */
	if (PG_NARGS() == 9)
	{
		version = 1;
		a = 0;
	}
	else
	{
		if (PG_ARGISNULL(0))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("audit hash version must not be null")));
		version = PG_GETARG_INT32(0);
		a = 1;
	}
	StaticAssertStmt(SANDBOX_AUDIT_HASH_VERSION == 2, "the newest audit hash version is 2");
	if (version != 1 && version != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown audit hash version %d", version),
				 errhint("Versions 1 and 2 exist.")));

	fields[0] = text_or(fcinfo, a, NULL);
	fields[1] = PG_ARGISNULL(a + 1) ? NULL :
		DatumGetCString(DirectFunctionCall1(int8out, PG_GETARG_DATUM(a + 1)));
	fields[2] = uuid_or(fcinfo, a + 2, NULL);
	fields[3] = uuid_or(fcinfo, a + 3, NULL);
	fields[4] = text_or(fcinfo, a + 4, NULL);
	fields[5] = uuid_or(fcinfo, a + 5, NULL);
	fields[6] = text_or(fcinfo, a + 6, NULL);
	fields[7] = PG_ARGISNULL(a + 7) ? NULL :
		DatumGetCString(DirectFunctionCall1(jsonb_out, PG_GETARG_DATUM(a + 7)));
	fields[8] = epoch_usec_or_null(fcinfo, a + 8);

	initStringInfo(&buf);
	if (version == 1)
	{
		/* coalesce(..., '') where the formula has it; the rest drop out */
		bool		first = true;

		append_item_v1(&buf, &first, fields[0] ? fields[0] : "");
		append_item_v1(&buf, &first, fields[1]);
		append_item_v1(&buf, &first, fields[2]);
		append_item_v1(&buf, &first, fields[3] ? fields[3] : "");
		append_item_v1(&buf, &first, fields[4]);
		append_item_v1(&buf, &first, fields[5] ? fields[5] : "");
		append_item_v1(&buf, &first, fields[6] ? fields[6] : "");
		append_item_v1(&buf, &first, fields[7]);
		append_item_v1(&buf, &first, fields[8]);
		PG_RETURN_TEXT_P(sandbox_sha256_utf8(buf.data, buf.len));
	}
	else
	{
		char		hex[2 * SHA256_LEN + 1];

		/* already UTF-8, field by field: hashed as built */
		appendStringInfoString(&buf, AUDIT_HASH_V2_TAG);
		for (int i = 0; i < 9; i++)
			append_item_v2(&buf, fields[i]);
		sha256_hex(buf.data, buf.len, hex);
		PG_RETURN_TEXT_P(cstring_to_text(hex));
	}
}
