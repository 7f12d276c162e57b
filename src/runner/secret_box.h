/*-------------------------------------------------------------------------
 *
 * secret_box.h
 *		A secret's sealed box (docs/secrets.md): what is sealed, written
 *		once for the admin's tool (sandbox-secret seal) and the runner host
 *		that opens it (secrets.c); the runner hosts' key file; the text the
 *		runner hands a run's egress proxy.  Plain C and libsodium (no
 *		PostgreSQL header), so that the tool builds without libpq.
 *
 * The sealed message (crypto_box_seal to the runner hosts' X25519 key):
 *
 *		sandbox-secret/1\n
 *		org <n>:<org id>\n
 *		name <n>:<name>\n
 *		host <n>:<host pattern>\n
 *		header <n>:<header template>\n
 *		value <n>:<value>\n
 *
 * each field framed by its byte length, so no value can pass for another
 * field.  The box opens only with the private key; the runner host then
 * requires the binding (org, name, host, header) to be exactly what the
 * run's approved policy names for that secret: a box the database moved
 * to another secret, org, host or header is refused, so a value can only
 * ever be put into the header and host it was sealed for.
 * agent._secret_binding (48_secrets.sql) writes the same binding (its
 * length is all the database checks).
 *
 * The key file (secrets_key_file): one base64 X25519 private key a line,
 * '#' comments; several during a rotation.  Owned by the runner's user
 * and readable by it alone (mode 0600 or less), or refused.  A key is
 * named by its id: the first 16 hex digits of the sha256 of its public
 * key.
 *
 * The proxy's secrets (a memfd the jail hands sandbox-egress as fd 7):
 *
 *		sandbox-egress-secrets/1\n
 *		secret <name> <rule id> <host pattern> <value, base64> <header template>\n
 *
 * one line per secret (the header last: it holds spaces).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_SECRET_BOX_H
#define SANDBOX_SECRET_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRET_BOX_MAGIC		"sandbox-secret/1"
#define SECRET_SEALED_PREFIX	"sealed:1:"	/* then KEY_ID ":" BASE64 */
#define SECRET_KEY_ID_LEN		16
#define SECRET_KEY_BYTES		32
#define SECRET_VALUE_MIN		8		/* agent._secret_value_bounds agrees */
#define SECRET_VALUE_MAX		4096
#define SECRET_NAME_MAX			64
#define SECRET_HEADER_MAX		256
#define SECRET_MAX_KEYS			8		/* lines of a key file */
#define SECRET_ERRLEN			256
#define SECRET_PROXY_MAGIC		"sandbox-egress-secrets/1"

/* What a value is bound to. */
typedef struct SecretBinding
{
	const char *org;
	const char *name;
	const char *host;
	const char *header;
} SecretBinding;

/* One private key of the key file, with its public key and id. */
typedef struct SecretKey
{
	uint8_t		sk[SECRET_KEY_BYTES];
	uint8_t		pk[SECRET_KEY_BYTES];
	char		id[SECRET_KEY_ID_LEN + 1];
} SecretKey;

extern int	secret_box_init(char *err);
extern void secret_key_id(const uint8_t pk[SECRET_KEY_BYTES], char id[SECRET_KEY_ID_LEN + 1]);
extern bool secret_value_ok(const uint8_t *v, size_t len, char *err);
extern char *secret_seal(const uint8_t pk[SECRET_KEY_BYTES], const SecretBinding *b,
						 const uint8_t *value, size_t len, char *err);
extern int	secret_open(const SecretKey *key, const char *box_b64, const SecretBinding *b,
						uint8_t **value, size_t *len, char *err);
extern int	secret_keys_load(const char *path, SecretKey *keys, int *nkeys, char *err);
extern void secret_keys_wipe(SecretKey *keys, int nkeys);
extern int	secret_keygen(const char *path, char *pk_b64, size_t pk_len, char *err);
extern char *secret_b64(const uint8_t *bin, size_t len);
extern void secret_wipe(void *p, size_t len);

#endif							/* SANDBOX_SECRET_BOX_H */
