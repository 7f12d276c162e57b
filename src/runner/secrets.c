/*-------------------------------------------------------------------------
 *
 * secrets.c
 *		A run's secrets on the runner host (docs/secrets.md).  The prepare
 *		step gives one row of kind "secret" per secret of the run's approved
 *		policy: its name and what agent._secrets_to_place writes (the key id,
 *		org, rule, host pattern, header and the sealed box).  Each is opened
 *		here with the private key of that id from secrets_key_file (read for
 *		the run, wiped after: a rotation needs no restart), and its sealed
 *		binding must be exactly that org, name, host and header
 *		(secret_box.c): whatever the database says, a value goes only where
 *		it was sealed for.
 *
 *		The values then wait in this process's memory until the jail
 *		starts: secrets_memfd writes them for the run's egress proxy into a
 *		sealed memfd (secret_box.h, "The proxy's secrets"), which the jail
 *		passes on unread, and wipes them.  No value is written to a file,
 *		a log line or the database; an error names the secret, never its
 *		value.
 *
 *		Which runner gets a run with secrets: the ids of the keys in
 *		secrets_key_file are reported (agent.runner_report_secret_keys) at
 *		registration and whenever the file changed (one stat a heartbeat),
 *		and the claim gives such a run only to a runner that reported every
 *		key its secrets are sealed to.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secret_box.h"

/* The value of "tag" in the row's text (one "tag value" a line), or NULL. */
static char *
row_field(Run *run, const char *text, const char *tag)
{
	size_t		tl = strlen(tag);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
	{
		const char *nl = strchr(l, '\n');
		size_t		len = nl ? (size_t) (nl - l) : strlen(l);

		if (len > tl && strncmp(l, tag, tl) == 0 && l[tl] == ' ')
		{
			char	   *v = arena_alloc(&run->arena, len - tl);

			memcpy(v, l + tl + 1, len - tl - 1);
			v[len - tl - 1] = '\0';
			return v;
		}
	}
	return NULL;
}

/*
 * One row of kind "secret": opened, checked, kept for the proxy.  False
 * with *err: the run does not start (a failure of ours, refunded).
 */
bool
secrets_add(Run *run, const char *name, const char *content, size_t len, char **err)
{
	char	   *text = arena_alloc(&run->arena, len + 1);
	char	   *key_id,
			   *org,
			   *rule,
			   *host,
			   *header,
			   *sealed;
	SecretKey	keys[SECRET_MAX_KEYS];
	int			nkeys = 0;
	char		why[SECRET_ERRLEN];
	RunSecret  *s;
	SecretBinding b;
	int			k;

	memcpy(text, content, len);
	text[len] = '\0';
	key_id = row_field(run, text, "key");
	org = row_field(run, text, "org");
	rule = row_field(run, text, "rule");
	host = row_field(run, text, "host");
	header = row_field(run, text, "header");
	sealed = row_field(run, text, "sealed");
	if (!key_id || !org || !rule || !host || !header || !sealed ||
		strlen(name) == 0 || strlen(name) >= sizeof(s->name) || strlen(rule) >= UUID_STR_LEN)
	{
		*err = psprintf("the prepare step gave secret \"%s\" in a form this runner does not read", name);
		return false;
	}
	if (run->nsecrets >= RUNNER_MAX_SECRETS)
	{
		*err = psprintf("at most %d secrets can be brokered for a run", RUNNER_MAX_SECRETS);
		return false;
	}
	if (runner_conf.secrets_key_file[0] == '\0')
	{
		*err = psprintf("secret %s cannot be opened: this runner holds no key for secrets (%s is not set)",
						name, runner_setting_name("secrets_key_file"));
		return false;
	}
	if (secret_box_init(why) < 0 ||
		secret_keys_load(runner_conf.secrets_key_file, keys, &nkeys, why) < 0)
	{
		*err = psprintf("secret %s cannot be opened: %s", name, why);
		return false;
	}
	for (k = 0; k < nkeys && strcmp(keys[k].id, key_id) != 0; k++)
		;
	s = &run->secrets[run->nsecrets];
	b = (SecretBinding) {.org = org,.name = name,.host = host,.header = header};
	if (k == nkeys)
		snprintf(why, sizeof(why), "it is sealed to key %s, which %s does not hold",
				 key_id, runner_setting_name("secrets_key_file"));
	if (k == nkeys || secret_open(&keys[k], sealed, &b, &s->value, &s->len, why) < 0)
	{
		secret_keys_wipe(keys, nkeys);
		*err = psprintf("secret %s cannot be opened: %s", name, why);
		return false;
	}
	secret_keys_wipe(keys, nkeys);
	strlcpy(s->name, name, sizeof(s->name));
	strlcpy(s->rule, rule, sizeof(s->rule));
	s->host = host;
	s->header = header;
	run->nsecrets++;
	return true;
}

/*
 * The run's secrets for its proxy, in a memfd sealed against change, at
 * offset 0; the values in this process are wiped.  -1 with *err.
 */
int
secrets_memfd(Run *run, char **err)
{
	StringInfoData buf;
	int			fd;
	bool		ok;

	initStringInfo(&buf);
	appendStringInfoString(&buf, SECRET_PROXY_MAGIC "\n");
	for (int i = 0; i < run->nsecrets; i++)
	{
		RunSecret  *s = &run->secrets[i];
		char	   *b64 = secret_b64(s->value, s->len);

		if (!b64)
		{
			*err = psprintf("out of memory");
			secret_wipe(buf.data, buf.maxlen);
			pfree(buf.data);
			return -1;
		}
		appendStringInfo(&buf, "secret %s %s %s %s %s\n", s->name, s->rule, s->host, b64, s->header);
		secret_wipe(b64, strlen(b64));
		free(b64);
	}
	fd = memfd_create("sandbox-egress-secrets", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ok = fd >= 0 && write(fd, buf.data, buf.len) == buf.len &&
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0 &&
		lseek(fd, 0, SEEK_SET) == 0;
	secret_wipe(buf.data, buf.maxlen);
	pfree(buf.data);
	secrets_wipe(run);
	if (!ok)
	{
		*err = psprintf("could not hand the run's secrets to its egress proxy: %m");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* The values wiped and freed (the rest of each secret is the arena's). */
void
secrets_wipe(Run *run)
{
	for (int i = 0; i < run->nsecrets; i++)
	{
		secret_wipe(run->secrets[i].value, run->secrets[i].len);
		free(run->secrets[i].value);
		run->secrets[i].value = NULL;
	}
	run->nsecrets = 0;
}

/* ---- which keys we hold, as reported ---- */

static const char SQL_REPORT_KEYS[] =
"SELECT agent.runner_report_secret_keys($1, $2, $3)";

static bool keys_report_due = true;	/* a registration hears them anew */
static struct stat keys_seen;	/* the key file when last read, or zeros */
static bool keys_seen_valid = false;

/* A new registration: report the keys we hold before claiming. */
void
secrets_registered(void)
{
	keys_report_due = true;
}

/* Did the key file change (or appear, or vanish) since we last read it? */
static bool
keys_file_changed(void)
{
	struct stat st;
	bool		exists = runner_conf.secrets_key_file[0] != '\0' &&
		stat(runner_conf.secrets_key_file, &st) == 0;

	if (exists != keys_seen_valid ||
		(exists && (st.st_ino != keys_seen.st_ino || st.st_dev != keys_seen.st_dev ||
					st.st_size != keys_seen.st_size ||
					st.st_mtim.tv_sec != keys_seen.st_mtim.tv_sec ||
					st.st_mtim.tv_nsec != keys_seen.st_mtim.tv_nsec ||
					st.st_ctim.tv_sec != keys_seen.st_ctim.tv_sec ||
					st.st_ctim.tv_nsec != keys_seen.st_ctim.tv_nsec)))
	{
		keys_seen_valid = exists;
		if (exists)
			keys_seen = st;
		return true;
	}
	return false;
}

/*
 * The ids of the keys in secrets_key_file as a text[] literal ("{}": none,
 * or the file unset).  NULL with *why when the file is set but unusable.
 */
static char *
keys_literal(int *nkeys, char *why)
{
	SecretKey	keys[SECRET_MAX_KEYS];
	StringInfoData buf;

	*nkeys = 0;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	if (runner_conf.secrets_key_file[0] != '\0')
	{
		if (secret_box_init(why) < 0 ||
			secret_keys_load(runner_conf.secrets_key_file, keys, nkeys, why) < 0)
		{
			pfree(buf.data);
			return NULL;
		}
		for (int i = 0; i < *nkeys; i++)
			appendStringInfo(&buf, "%s%s", i ? "," : "", keys[i].id);
		secret_keys_wipe(keys, *nkeys);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * Tell the database which keys we hold when we registered or the key file
 * changed.  True when a report was accepted just now (runs that waited
 * for a key we now hold may be claimable: the caller claims).
 */
bool
secrets_report(void)
{
	DbParam		p[3];
	DbResult	r;
	char		why[SECRET_ERRLEN];
	char	   *ids;
	int			n;
	bool		ok;

	if (keys_file_changed())
		keys_report_due = true;
	if (!keys_report_due || !me.registered)
		return false;
	ids = keys_literal(&n, why);
	if (ids == NULL)
	{
		/*
		 * An unreadable key file holds no key we can use: say so (runs sealed
		 * to it go to other runners) and warn, once per change.
		 */
		runner_log(RLOG_WARNING, "could not read the secrets keys in \"%s\": %s",
				   runner_conf.secrets_key_file, why);
		ids = pstrdup("{}");
		n = 0;
	}
	p[0] = step_param(me.id);
	p[1] = step_param(me.incarnation);
	p[2] = step_param(ids);
	r = db_call(SQL_REPORT_KEYS, 3, p);
	ok = r.outcome == DB_OK;
	if (ok)
	{
		keys_report_due = false;
		runner_log(RLOG_LOG, "runner \"%s\" holds %d secrets key(s)", runner_conf.name, n);
	}
	else if (r.outcome == DB_FAILED)
		runner_log(RLOG_WARNING, "could not report the secrets keys: %s", r.message ? r.message : "");
	db_result_free(&r);
	pfree(ids);
	return ok;
}

/*
 * For --check: the key file, when one is set, is readable and holds keys.
 * NULL when it is fine (*nkeys says how many), else why not.
 */
const char *
secrets_check(int *nkeys)
{
	char		why[SECRET_ERRLEN];
	char	   *ids = keys_literal(nkeys, why);

	if (ids == NULL)
		return pstrdup(why);
	pfree(ids);
	return NULL;
}
