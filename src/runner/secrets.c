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
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <sys/mman.h>
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
