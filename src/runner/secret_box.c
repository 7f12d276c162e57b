/*-------------------------------------------------------------------------
 *
 * secret_box.c
 *		A secret's sealed box, the runner hosts' key file and key ids
 *		(secret_box.h says what each is).  Every cryptographic step is
 *		libsodium's: crypto_box_keypair, crypto_box_seal,
 *		crypto_box_seal_open, crypto_scalarmult_base, crypto_hash_sha256;
 *		this file only frames the message and checks what came out.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "secret_box.h"

#define KEY_FILE_MAX	65536

static int
fail(char *err, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static int
fail(char *err, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(err, SECRET_ERRLEN, fmt, ap);
	va_end(ap);
	return -1;
}

void
secret_wipe(void *p, size_t len)
{
	if (p)
		sodium_memzero(p, len);
}

int
secret_box_init(char *err)
{
	if (sodium_init() < 0)
		return fail(err, "libsodium could not be initialised");
	return 0;
}

void
secret_key_id(const uint8_t pk[SECRET_KEY_BYTES], char id[SECRET_KEY_ID_LEN + 1])
{
	uint8_t		h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, pk, SECRET_KEY_BYTES);
	sodium_bin2hex(id, SECRET_KEY_ID_LEN + 1, h, SECRET_KEY_ID_LEN / 2);
}

char *
secret_b64(const uint8_t *bin, size_t len)
{
	size_t		n = sodium_base64_encoded_len(len, sodium_base64_VARIANT_ORIGINAL);
	char	   *out = malloc(n);

	if (out)
		sodium_bin2base64(out, n, bin, len, sodium_base64_VARIANT_ORIGINAL);
	return out;
}

/*
 * A value goes into a request header as it is: visible ASCII only (no
 * blank, no CR or LF that could end the header), and long enough that the
 * proxy's scrubbing of responses cannot take common bytes for it.
 */
bool
secret_value_ok(const uint8_t *v, size_t len, char *err)
{
	if (len < SECRET_VALUE_MIN || len > SECRET_VALUE_MAX)
	{
		fail(err, "a secret's value is %d to %d bytes (this one is %zu)",
			 SECRET_VALUE_MIN, SECRET_VALUE_MAX, len);
		return false;
	}
	for (size_t i = 0; i < len; i++)
		if (v[i] < 0x21 || v[i] > 0x7e)
		{
			fail(err, "a secret's value is visible ASCII only (byte %zu is 0x%02x)", i, v[i]);
			return false;
		}
	return true;
}

/* Append "tag <n>:<bytes>\n" to buf (which has room: see message_len). */
static size_t
put_field(char *buf, const char *tag, const void *v, size_t len)
{
	int			n = sprintf(buf, "%s %zu:", tag, len);

	memcpy(buf + n, v, len);
	buf[n + len] = '\n';
	return n + len + 1;
}

static size_t
field_len(const char *tag, size_t len)
{
	return strlen(tag) + 1 + 20 + 1 + len + 1;
}

/* The sealed message of b and value (secret_box.h); malloc'd, *len set. */
static uint8_t *
message(const SecretBinding *b, const uint8_t *value, size_t vlen, size_t *len)
{
	size_t		cap = strlen(SECRET_BOX_MAGIC) + 1 + field_len("org", strlen(b->org)) +
		field_len("name", strlen(b->name)) + field_len("host", strlen(b->host)) +
		field_len("header", strlen(b->header)) + field_len("value", vlen) + 1;
	char	   *m = malloc(cap);
	size_t		n;

	if (!m)
		return NULL;
	n = sprintf(m, "%s\n", SECRET_BOX_MAGIC);
	n += put_field(m + n, "org", b->org, strlen(b->org));
	n += put_field(m + n, "name", b->name, strlen(b->name));
	n += put_field(m + n, "host", b->host, strlen(b->host));
	n += put_field(m + n, "header", b->header, strlen(b->header));
	n += put_field(m + n, "value", value, vlen);
	*len = n;
	return (uint8_t *) m;
}

char *
secret_seal(const uint8_t pk[SECRET_KEY_BYTES], const SecretBinding *b,
			const uint8_t *value, size_t vlen, char *err)
{
	size_t		mlen;
	uint8_t    *m,
			   *box;
	char	   *b64,
			   *out;
	char		id[SECRET_KEY_ID_LEN + 1];

	if (!secret_value_ok(value, vlen, err))
		return NULL;
	if ((m = message(b, value, vlen, &mlen)) == NULL ||
		(box = malloc(mlen + crypto_box_SEALBYTES)) == NULL)
	{
		free(m);
		fail(err, "out of memory");
		return NULL;
	}
	crypto_box_seal(box, m, mlen, pk);
	secret_wipe(m, mlen);
	free(m);
	b64 = secret_b64(box, mlen + crypto_box_SEALBYTES);
	free(box);
	secret_key_id(pk, id);
	out = b64 ? malloc(strlen(SECRET_SEALED_PREFIX) + SECRET_KEY_ID_LEN + 1 + strlen(b64) + 1) : NULL;
	if (!out)
	{
		free(b64);
		fail(err, "out of memory");
		return NULL;
	}
	sprintf(out, "%s%s:%s", SECRET_SEALED_PREFIX, id, b64);
	free(b64);
	return out;
}

/*
 * One field of an opened message at *p: "tag <n>:<bytes>\n", the bytes
 * into *v (pointing into the message), *p past it.
 */
static bool
take_field(const uint8_t **p, const uint8_t *end, const char *tag, const uint8_t **v,
		   size_t *len)
{
	size_t		tl = strlen(tag);
	size_t		n = 0;
	const uint8_t *q = *p;

	if ((size_t) (end - q) < tl + 2 || memcmp(q, tag, tl) != 0 || q[tl] != ' ')
		return false;
	q += tl + 1;
	if (q >= end || *q < '0' || *q > '9')
		return false;
	while (q < end && *q >= '0' && *q <= '9' && n <= SECRET_VALUE_MAX * 4)
		n = n * 10 + (*q++ - '0');
	if (q >= end || *q != ':' || (size_t) (end - q - 1) < n + 1 || q[1 + n] != '\n')
		return false;
	*v = q + 1;
	*len = n;
	*p = q + 1 + n + 1;
	return true;
}

static bool
field_is(const uint8_t *v, size_t len, const char *want)
{
	return len == strlen(want) && memcmp(v, want, len) == 0;
}

/*
 * Open a sealed box (its base64) with key and require its binding to be
 * b: the value (malloc'd, the caller wipes it) into *value.  The errors
 * name the field that differs, never a value.
 */
int
secret_open(const SecretKey *key, const char *box_b64, const SecretBinding *b,
			uint8_t **value, size_t *vlen, char *err)
{
	size_t		b64len = strlen(box_b64);
	size_t		boxlen;
	uint8_t    *box = malloc(b64len + 1);
	uint8_t    *m = NULL;
	const uint8_t *p,
			   *end,
			   *v;
	size_t		len,
				mlen;
	int			rc = -1;
	static const char *const tags[] = {"org", "name", "host", "header"};
	const char *want[4] = {b->org, b->name, b->host, b->header};

	*value = NULL;
	if (!box)
		return fail(err, "out of memory");
	if (sodium_base642bin(box, b64len + 1, box_b64, b64len, NULL, &boxlen, NULL,
						  sodium_base64_VARIANT_ORIGINAL) != 0 ||
		boxlen <= crypto_box_SEALBYTES)
	{
		fail(err, "the sealed box is not base64 of a sealed box");
		goto out;
	}
	mlen = boxlen - crypto_box_SEALBYTES;
	if ((m = malloc(mlen)) == NULL)
	{
		fail(err, "out of memory");
		goto out;
	}
	if (crypto_box_seal_open(m, box, boxlen, key->pk, key->sk) != 0)
	{
		fail(err, "the sealed box does not open with key %s (it was sealed to another key, or changed)",
			 key->id);
		goto out;
	}
	p = m;
	end = m + mlen;
	len = strlen(SECRET_BOX_MAGIC);
	if (mlen < len + 1 || memcmp(p, SECRET_BOX_MAGIC, len) != 0 || p[len] != '\n')
	{
		fail(err, "the sealed box holds no %s message", SECRET_BOX_MAGIC);
		goto out;
	}
	p += len + 1;
	for (int i = 0; i < 4; i++)
	{
		if (!take_field(&p, end, tags[i], &v, &len))
		{
			fail(err, "the sealed message's %s field is malformed", tags[i]);
			goto out;
		}
		if (!field_is(v, len, want[i]))
		{
			fail(err, "the value was sealed for another %s than this secret's", tags[i]);
			goto out;
		}
	}
	if (!take_field(&p, end, "value", &v, &len) || p != end)
	{
		fail(err, "the sealed message's value field is malformed");
		goto out;
	}
	if (!secret_value_ok(v, len, err))
		goto out;
	if ((*value = malloc(len + 1)) == NULL)
	{
		fail(err, "out of memory");
		goto out;
	}
	memcpy(*value, v, len);
	(*value)[len] = '\0';
	*vlen = len;
	rc = 0;
out:
	if (m)
	{
		secret_wipe(m, mlen);
		free(m);
	}
	free(box);
	return rc;
}

void
secret_keys_wipe(SecretKey *keys, int nkeys)
{
	secret_wipe(keys, sizeof(SecretKey) * nkeys);
}

/*
 * The key file at path: its private keys, their public keys and ids.  The
 * file must be a regular file of ours that nobody else may read.
 */
int
secret_keys_load(const char *path, SecretKey *keys, int *nkeys, char *err)
{
	struct stat st;
	char	   *buf;
	ssize_t		n;
	size_t		len = 0;
	int			fd;
	int			rc = 0;
	char	   *save = NULL;

	*nkeys = 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return fail(err, "could not open the secrets key file \"%s\": %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
	{
		close(fd);
		return fail(err, "the secrets key file \"%s\" is not a regular file", path);
	}
	if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
	{
		close(fd);
		return fail(err, "the secrets key file \"%s\" must belong to this user and be readable by it alone (mode 0600 or less)",
					path);
	}
	if (st.st_size > KEY_FILE_MAX || (buf = malloc(KEY_FILE_MAX + 1)) == NULL)
	{
		close(fd);
		return fail(err, "the secrets key file \"%s\" is larger than %d bytes", path, KEY_FILE_MAX);
	}
	while (len < KEY_FILE_MAX && (n = read(fd, buf + len, KEY_FILE_MAX - len)) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	for (char *line = strtok_r(buf, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save))
	{
		size_t		l = strlen(line),
					got = 0;
		SecretKey  *k = &keys[*nkeys];

		while (l > 0 && (line[l - 1] == ' ' || line[l - 1] == '\t' || line[l - 1] == '\r'))
			line[--l] = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		if (*line == '\0' || *line == '#')
			continue;
		if (*nkeys == SECRET_MAX_KEYS)
			rc = fail(err, "the secrets key file \"%s\" holds more than %d keys", path, SECRET_MAX_KEYS);
		else if (sodium_base642bin(k->sk, sizeof(k->sk), line, strlen(line), NULL, &got, NULL,
								   sodium_base64_VARIANT_ORIGINAL) != 0 || got != SECRET_KEY_BYTES)
			rc = fail(err, "the secrets key file \"%s\" has a line that is no key (base64 of %d bytes)",
					  path, SECRET_KEY_BYTES);
		else if (crypto_scalarmult_base(k->pk, k->sk) != 0)
			rc = fail(err, "the secrets key file \"%s\" holds an unusable key", path);
		else
		{
			secret_key_id(k->pk, k->id);
			(*nkeys)++;
		}
	}
	secret_wipe(buf, KEY_FILE_MAX + 1);
	free(buf);
	if (rc == 0 && *nkeys == 0)
		rc = fail(err, "the secrets key file \"%s\" holds no key", path);
	if (rc < 0)
		secret_keys_wipe(keys, SECRET_MAX_KEYS);
	return rc;
}

/*
 * A new key pair: the private key into a new file at path (0600, never
 * over an existing one), the public key's base64 into pk_b64.
 */
int
secret_keygen(const char *path, char *pk_b64, size_t pk_len, char *err)
{
	uint8_t		pk[SECRET_KEY_BYTES],
				sk[SECRET_KEY_BYTES];
	char	   *sk_b64;
	char		line[256];
	int			fd,
				n,
				rc = 0;

	crypto_box_keypair(pk, sk);
	sk_b64 = secret_b64(sk, sizeof(sk));
	secret_wipe(sk, sizeof(sk));
	if (!sk_b64)
		return fail(err, "out of memory");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		rc = fail(err, "could not create \"%s\": %s", path, strerror(errno));
	else
	{
		n = snprintf(line, sizeof(line),
					 "# sandbox-secret private key (docs/secrets.md): readable by the runner's user alone\n%s\n",
					 sk_b64);
		if (write(fd, line, n) != n || fsync(fd) < 0)
			rc = fail(err, "could not write \"%s\": %s", path, strerror(errno));
		secret_wipe(line, sizeof(line));
		if (close(fd) < 0 && rc == 0)
			rc = fail(err, "could not write \"%s\": %s", path, strerror(errno));
	}
	secret_wipe(sk_b64, strlen(sk_b64));
	free(sk_b64);
	if (rc == 0)
		sodium_bin2base64(pk_b64, pk_len, pk, sizeof(pk), sodium_base64_VARIANT_ORIGINAL);
	return rc;
}
