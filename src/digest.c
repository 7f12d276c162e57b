/*-------------------------------------------------------------------------
 *
 * digest.c
 *	  The two hashes of the control plane, in C:
 *	    agent.code_sha256(code)			what an approval is bound to
 *	    agent._audit_hash(prev, id, ...)	one link of an org's audit chain
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

/* concat_ws: a NULL item is left out together with its separator */
static void
append_item(StringInfo buf, bool *first, const char *s)
{
	if (s == NULL)
		return;
	if (!*first)
		appendStringInfoChar(buf, '\x1f');
	appendStringInfoString(buf, s);
	*first = false;
}

static const char *
uuid_or_empty(FunctionCallInfo fcinfo, int arg)
{
	if (PG_ARGISNULL(arg))
		return "";
	return DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(arg)));
}

static const char *
text_or(FunctionCallInfo fcinfo, int arg, const char *if_null)
{
	if (PG_ARGISNULL(arg))
		return if_null;
	return TextDatumGetCString(PG_GETARG_DATUM(arg));
}

/*
 * agent._audit_hash(prev_hash, id, org_id, workspace_id, event_type,
 *					 invocation_id, actor, details, created_at) =
 *	 encode(sha256(convert_to(concat_ws(E'\x1f',
 *		 coalesce(prev_hash, ''), id::text, org_id::text,
 *		 coalesce(workspace_id::text, ''), event_type,
 *		 coalesce(invocation_id::text, ''), coalesce(actor, ''),
 *		 details::text,
 *		 (extract(epoch FROM created_at) * 1000000)::bigint::text),
 *	 'UTF8')), 'hex')
 * Nothing in it depends on a session setting: uuids, bigints and jsonb
 * have one text form, and the timestamp is rendered as epoch microseconds.
 */
PG_FUNCTION_INFO_V1(sandbox_audit_hash);
Datum
sandbox_audit_hash(PG_FUNCTION_ARGS)
{
	StringInfoData buf;
	bool		first = true;

	initStringInfo(&buf);
	append_item(&buf, &first, text_or(fcinfo, 0, ""));
	append_item(&buf, &first, PG_ARGISNULL(1) ? NULL :
				DatumGetCString(DirectFunctionCall1(int8out, PG_GETARG_DATUM(1))));
	append_item(&buf, &first, PG_ARGISNULL(2) ? NULL :
				DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(2))));
	append_item(&buf, &first, uuid_or_empty(fcinfo, 3));
	append_item(&buf, &first, text_or(fcinfo, 4, NULL));
	append_item(&buf, &first, uuid_or_empty(fcinfo, 5));
	append_item(&buf, &first, text_or(fcinfo, 6, ""));
	append_item(&buf, &first, PG_ARGISNULL(7) ? NULL :
				DatumGetCString(DirectFunctionCall1(jsonb_out, PG_GETARG_DATUM(7))));
	if (!PG_ARGISNULL(8))
	{
		TimestampTz at = PG_GETARG_TIMESTAMPTZ(8);

		if (TIMESTAMP_NOT_FINITE(at))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("cannot convert infinity to bigint")));
		append_item(&buf, &first,
					psprintf(INT64_FORMAT,
							 at + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY));
	}
	PG_RETURN_TEXT_P(sandbox_sha256_utf8(buf.data, buf.len));
}
