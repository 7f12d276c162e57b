/*-------------------------------------------------------------------------
 *
 * sandbox-secret.c
 *		The tool of secrets (docs/secrets.md), for the two people who hold
 *		their keys: the operator makes the runner hosts' key pair, and an
 *		org's admin seals a value to its public key on their own machine,
 *		so that the database only ever receives the sealed box.
 *
 *	sandbox-secret keygen KEY_FILE
 *		a new key pair: the private key into KEY_FILE (created, mode 0600;
 *		never over an existing file), the public key on stdout (for
 *		agent.add_secret_key)
 *	sandbox-secret public-key KEY_FILE
 *		each key of a key file: "KEY_ID PUBLIC_KEY"
 *	sandbox-secret seal --key PUBLIC_KEY --org ORG --name NAME --host HOST --header HEADER
 *		the value from stdin (one trailing newline dropped), sealed for
 *		that org, name, host pattern and header: "sealed:1:KEY_ID:BASE64"
 *		on stdout, for agent.set_secret
 *
 * No PostgreSQL here (secret_box.c is plain C and libsodium).
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "secret_box.h"

static void usage(void) __attribute__((noreturn));
static void
usage(void)
{
	fprintf(stderr,
			"usage: sandbox-secret keygen KEY_FILE\n"
			"       sandbox-secret public-key KEY_FILE\n"
			"       sandbox-secret seal --key PUBLIC_KEY --org ORG --name NAME --host HOST --header HEADER < value\n");
	exit(2);
}

static void die(const char *fmt,...) __attribute__((noreturn, format(printf, 1, 2)));
static void
die(const char *fmt,...)
{
	va_list		ap;

	fputs("sandbox-secret: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static bool
is_uuid(const char *s)
{
	if (strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++)
	{
		bool		dash = i == 8 || i == 13 || i == 18 || i == 23;

		if (dash ? s[i] != '-' : !(isdigit((unsigned char) s[i]) || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

static bool
is_name(const char *s)
{
	size_t		n = strlen(s);

	if (n == 0 || n > SECRET_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!((s[i] >= 'A' && s[i] <= 'Z') || isdigit((unsigned char) s[i]) || s[i] == '_'))
			return false;
	return true;
}

static int
cmd_keygen(int argc, char **argv)
{
	char		pk[sodium_base64_ENCODED_LEN(SECRET_KEY_BYTES, sodium_base64_VARIANT_ORIGINAL)];
	char		err[SECRET_ERRLEN];

	if (argc != 2)
		usage();
	if (secret_keygen(argv[1], pk, sizeof(pk), err) < 0)
		die("%s", err);
	printf("%s\n", pk);
	return 0;
}

static int
cmd_public_key(int argc, char **argv)
{
	SecretKey	keys[SECRET_MAX_KEYS];
	int			n;
	char		err[SECRET_ERRLEN];

	if (argc != 2)
		usage();
	if (secret_keys_load(argv[1], keys, &n, err) < 0)
		die("%s", err);
	for (int i = 0; i < n; i++)
	{
		char	   *b64 = secret_b64(keys[i].pk, SECRET_KEY_BYTES);

		printf("%s %s\n", keys[i].id, b64 ? b64 : "?");
		free(b64);
	}
	secret_keys_wipe(keys, n);
	return 0;
}

static int
cmd_seal(int argc, char **argv)
{
	static const struct option opts[] = {
		{"key", required_argument, NULL, 'k'},
		{"org", required_argument, NULL, 'o'},
		{"name", required_argument, NULL, 'n'},
		{"host", required_argument, NULL, 'h'},
		{"header", required_argument, NULL, 'H'},
		{NULL, 0, NULL, 0}
	};
	const char *key = NULL;
	SecretBinding b = {0};
	uint8_t		pk[SECRET_KEY_BYTES];
	uint8_t		value[SECRET_VALUE_MAX + 3];
	size_t		len = 0,
				got;
	char		err[SECRET_ERRLEN];
	char	   *sealed;
	int			c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1)
	{
		switch (c)
		{
			case 'k':
				key = optarg;
				break;
			case 'o':
				b.org = optarg;
				break;
			case 'n':
				b.name = optarg;
				break;
			case 'h':
				b.host = optarg;
				break;
			case 'H':
				b.header = optarg;
				break;
			default:
				usage();
		}
	}
	if (optind != argc || !key || !b.org || !b.name || !b.host || !b.header)
		usage();
	if (sodium_base642bin(pk, sizeof(pk), key, strlen(key), NULL, &got, NULL,
						  sodium_base64_VARIANT_ORIGINAL) != 0 || got != sizeof(pk))
		die("--key is not a public key (base64 of %d bytes, as agent.secrets_public_key() returns it)",
			SECRET_KEY_BYTES);
	if (!is_uuid(b.org))
		die("--org is not an org id (a lower-case uuid, as agent.secrets_public_key() returns it)");
	if (!is_name(b.name))
		die("--name is not a secret's name (an upper-case letter, then upper-case letters, digits and _)");
	if (b.host[0] == '\0' || strlen(b.host) > 253)
		die("--host is not a host pattern (the secret's egress rule's host)");
	if (strlen(b.header) > SECRET_HEADER_MAX || !strstr(b.header, "{}"))
		die("--header is not a header template (\"Name: ...{}...\", at most %d bytes)",
			SECRET_HEADER_MAX);
	while (len < sizeof(value) && (got = fread(value + len, 1, sizeof(value) - len, stdin)) > 0)
		len += got;
	/* what echo and a terminal add */
	if (len > 0 && value[len - 1] == '\n')
		len--;
	if (len > 0 && value[len - 1] == '\r')
		len--;
	sealed = secret_seal(pk, &b, value, len, err);
	secret_wipe(value, sizeof(value));
	if (!sealed)
		die("%s", err);
	printf("%s\n", sealed);
	free(sealed);
	return 0;
}

int
main(int argc, char **argv)
{
	char		err[SECRET_ERRLEN];

	if (argc < 2)
		usage();
	if (secret_box_init(err) < 0)
		die("%s", err);
	if (strcmp(argv[1], "keygen") == 0)
		return cmd_keygen(argc - 1, argv + 1);
	if (strcmp(argv[1], "public-key") == 0)
		return cmd_public_key(argc - 1, argv + 1);
	if (strcmp(argv[1], "seal") == 0)
		return cmd_seal(argc - 1, argv + 1);
	usage();
}
