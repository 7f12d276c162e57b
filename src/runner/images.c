/*-------------------------------------------------------------------------
 *
 * images.c
 *		The sandbox images this runner holds (docs/images.md): its image
 *		store read (image_store: the NAME@DIGEST directories sandbox-image
 *		builds), reported to the database when we register and whenever the
 *		store changed (agent.runner_report_images), and looked up when a run
 *		on an image starts (launch.c: that image's launcher, --image DIR).
 *
 * What "holds" means.  A directory NAME@DIGEST of the store with a
 * manifest whose sha256 is DIGEST and a root/ directory.  Anything else in
 * the store (a build in progress, .debs, a removal in progress) is not an
 * image.  The store is read again at every heartbeat; the directory's
 * mtime changes whenever an image is added, renamed or removed, so the
 * report is sent only when it did (or when the last one failed).
 *
 * A run claimed for an image it no longer holds (removed between the
 * claim and its start) fails to start, a failure of ours (refunded); the
 * next report stops the claims.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <dirent.h>
#include <sys/stat.h>

#include "common/cryptohash.h"
#include "common/sha2.h"

/* A manifest larger than this is not read (the database refuses it too). */
#define MANIFEST_MAX	(1024 * 1024)

static RunnerImage held[RUNNER_MAX_IMAGES];
static int	nheld = 0;
static struct timespec store_mtime;	/* of the store when it was read */
static char store_read[MAXPGPATH];	/* which store that was */
static bool report_due = true;		/* the database has not the current list */

static const char SQL_REPORT[] =
"SELECT agent.runner_report_images($1, $2, $3)";

/* NAME@DIGEST: the name sandbox-image allows, 64 hex digits. */
static bool
parse_entry(const char *entry, RunnerImage *im)
{
	const char *at = strchr(entry, '@');
	size_t		n;

	if (!at)
		return false;
	n = at - entry;
	if (n == 0 || n >= sizeof(im->name) || strlen(at + 1) != 64)
		return false;
	for (size_t i = 0; i < n; i++)
	{
		char		c = entry[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  (i > 0 && (c == '.' || c == '_' || c == '-'))))
			return false;
	}
	for (const char *p = at + 1; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	memcpy(im->name, entry, n);
	im->name[n] = '\0';
	if (strcmp(im->name, "host") == 0)
		return false;
	strlcpy(im->digest, at + 1, sizeof(im->digest));
	return true;
}

/* The whole of a small file (malloc'd, NUL-terminated), or NULL. */
static char *
read_small(const char *path, size_t max, size_t *len)
{
	FILE	   *f = fopen(path, "r");
	char	   *buf;
	size_t		n;

	if (!f)
		return NULL;
	buf = palloc(max + 1);
	n = fread(buf, 1, max + 1, f);
	fclose(f);
	if (n > max)
	{
		pfree(buf);
		return NULL;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* Is digest the sha256 of data? */
static bool
digest_matches(const char *data, size_t len, const char *digest)
{
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);
	uint8		sum[PG_SHA256_DIGEST_LENGTH];
	char		hex[2 * PG_SHA256_DIGEST_LENGTH + 1];
	bool		ok;

	ok = ctx && pg_cryptohash_init(ctx) == 0 &&
		pg_cryptohash_update(ctx, (const uint8 *) data, len) == 0 &&
		pg_cryptohash_final(ctx, sum, sizeof(sum)) == 0;
	pg_cryptohash_free(ctx);
	if (!ok)
		return false;
	for (int i = 0; i < PG_SHA256_DIGEST_LENGTH; i++)
		snprintf(hex + 2 * i, 3, "%02x", sum[i]);
	return strcmp(hex, digest) == 0;
}

/* One entry of the store into im (its manifest read and checked). */
static bool
read_image(const char *store, const char *entry, RunnerImage *im)
{
	char		path[MAXPGPATH];
	struct stat st;
	char	   *warm;
	size_t		len;

	memset(im, 0, sizeof(*im));
	if (!parse_entry(entry, im))
		return false;
	snprintf(im->dir, sizeof(im->dir), "%s/%s", store, entry);
	snprintf(path, sizeof(path), "%s/root", im->dir);
	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
		return false;
	snprintf(path, sizeof(path), "%s/manifest", im->dir);
	im->manifest = read_small(path, MANIFEST_MAX, &len);
	if (!im->manifest)
		return false;
	if (!digest_matches(im->manifest, len, im->digest))
	{
		runner_log(RLOG_WARNING, "image %s in \"%s\": its manifest's sha256 is not its digest; not used",
				   entry, store);
		pfree(im->manifest);
		im->manifest = NULL;
		return false;
	}
	/* the modules its warm Python interpreters import (one line) */
	snprintf(path, sizeof(path), "%s/warm-modules", im->dir);
	warm = read_small(path, sizeof(im->warm_modules) - 1, NULL);
	if (warm)
	{
		warm[strcspn(warm, "\n")] = '\0';
		strlcpy(im->warm_modules, warm, sizeof(im->warm_modules));
		pfree(warm);
	}
	return true;
}

static void
held_clear(void)
{
	for (int i = 0; i < nheld; i++)
		if (held[i].manifest)
			pfree(held[i].manifest);
	nheld = 0;
}

/*
 * Read the store again if it changed since it was read (or its setting
 * did).  True when the list of images changed: it must be reported.
 */
bool
images_rescan(void)
{
	const char *store = runner_conf.image_store;
	struct stat st;
	DIR		   *d;
	struct dirent *de;

	if (stat(store, &st) != 0)
		memset(&st, 0, sizeof(st));
	if (strcmp(store_read, store) == 0 &&
		st.st_mtim.tv_sec == store_mtime.tv_sec && st.st_mtim.tv_nsec == store_mtime.tv_nsec)
		return false;
	strlcpy(store_read, store, sizeof(store_read));
	store_mtime = st.st_mtim;
	held_clear();
	d = opendir(store);
	if (d)
	{
		while ((de = readdir(d)) != NULL && nheld < RUNNER_MAX_IMAGES)
			if (de->d_name[0] != '.' && read_image(store, de->d_name, &held[nheld]))
				nheld++;
		closedir(d);
	}
	report_due = true;
	launchers_prune();
	return true;
}

/* The image NAME@DIGEST this runner holds, or NULL. */
const RunnerImage *
images_find(const char *name, const char *digest)
{
	for (int i = 0; i < nheld; i++)
		if (strcmp(held[i].name, name) == 0 && strcmp(held[i].digest, digest) == 0)
			return &held[i];
	return NULL;
}

/* How many images this runner holds, and the i-th. */
int
images_count(void)
{
	return nheld;
}

const RunnerImage *
images_get(int i)
{
	return i >= 0 && i < nheld ? &held[i] : NULL;
}

/* s as a JSON string */
static void
append_json_string(StringInfo buf, const char *s)
{
	appendStringInfoChar(buf, '"');
	for (const unsigned char *p = (const unsigned char *) s; *p; p++)
	{
		if (*p == '"' || *p == '\\')
			appendStringInfo(buf, "\\%c", *p);
		else if (*p == '\n')
			appendStringInfoString(buf, "\\n");
		else if (*p == '\t')
			appendStringInfoString(buf, "\\t");
		else if (*p < 0x20)
			appendStringInfo(buf, "\\u%04x", *p);
		else
			appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
}

/* The list of images as agent.runner_report_images takes it. */
static char *
images_json(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (int i = 0; i < nheld; i++)
	{
		appendStringInfoString(&buf, i ? ",{\"name\":" : "{\"name\":");
		append_json_string(&buf, held[i].name);
		appendStringInfoString(&buf, ",\"digest\":");
		append_json_string(&buf, held[i].digest);
		appendStringInfoString(&buf, ",\"manifest\":");
		append_json_string(&buf, held[i].manifest);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, ']');
	return buf.data;
}

/* A new registration: the database must hear our images again. */
void
images_registered(void)
{
	report_due = true;
}

/*
 * Tell the database which images we hold, if it does not know yet (after
 * a registration, after the store changed, after a report that failed).
 * Called with the connection up and registered.
 */
void
images_report(void)
{
	DbParam		p[3];
	DbResult	r;
	char	   *json;

	(void) images_rescan();
	if (!report_due || !me.registered)
		return;
	json = images_json();
	p[0] = step_param(me.id);
	p[1] = step_param(me.incarnation);
	p[2] = step_param(json);
	r = db_call(SQL_REPORT, 3, p);
	if (r.outcome == DB_OK)
	{
		report_due = false;
		runner_log(RLOG_LOG, "runner \"%s\" holds %d image(s) in \"%s\"", runner_conf.name, nheld,
				   runner_conf.image_store);
	}
	else if (r.outcome == DB_FAILED)
		runner_log(RLOG_WARNING, "could not report the images: %s", r.message ? r.message : "");
	db_result_free(&r);
	pfree(json);
}
