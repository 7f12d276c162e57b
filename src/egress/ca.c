/*-------------------------------------------------------------------------
 *
 * ca.c
 *	  sandbox-egress: the run's CA, for the hosts it intercepts because a
 *	  secret goes to them (docs/secrets.md).  Made at start: a P-256 key and
 *	  a self-signed certificate whose name constraints permit the secrets'
 *	  hosts only; the key exists in this process's memory and nowhere else
 *	  (the certificate goes to the sandbox's CA bundle through the jail).
 *	  Per host it issues a certificate (one key for all of them, kept per
 *	  host in a small cache).  The two TLS contexts: the one the sandbox
 *	  speaks to (HTTP/1.1 only, by ALPN) and the one towards the real
 *	  server (verified against the CA bundle the jail hands over, fd 8, by
 *	  name, HTTP/1.1 only).  Every cryptographic step is OpenSSL's.
 *
 *	  Everything that may load or open something (OpenSSL's configuration,
 *	  its algorithms, the first handshake's lazy set-up) happens in
 *	  proxy_ca_init, before the proxy confines itself (confine.c): it ends
 *	  with a whole handshake between the two kinds of context in memory.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "proxy.h"

#define CA_TRUST_MAX	(4 * 1024 * 1024)	/* the CA bundle, fd 8 */
#define CA_LEAVES		64		/* hosts whose certificate is kept */
#define CA_VALID_S		(7 * 24 * 3600)	/* longer than any run */

static EVP_PKEY *ca_key;
static EVP_PKEY *leaf_key;
static X509 *ca_cert;
static char *ca_pem;
static size_t ca_pem_len;
static SSL_CTX *server_ctx;		/* towards the sandbox */
static SSL_CTX *upstream_ctx;	/* towards the real server */

static pthread_mutex_t leaf_lock = PTHREAD_MUTEX_INITIALIZER;
static struct
{
	char		host[EGRESS_HOST_MAX + 1];
	X509	   *cert;
	uint64_t	used;
}			leaves[CA_LEAVES];
static uint64_t leaf_clock;

/* The last OpenSSL error of this thread, as text; the queue cleared. */
void
proxy_tls_error(char *buf, size_t len)
{
	unsigned long e,
				last = 0;

	while ((e = ERR_get_error()) != 0)
		last = e;
	if (last)
		ERR_error_string_n(last, buf, len);
	else
		snprintf(buf, len, "%s", errno ? strerror(errno) : "the connection ended");
}

static int
ca_fail(char *err, const char *what)
{
	char		why[200];

	proxy_tls_error(why, sizeof(why));
	snprintf(err, EGRESS_ERRLEN, "the run's CA: %s: %s", what, why);
	return -1;
}

static int
add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ex;

	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
	ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (!ex)
		return -1;
	if (!X509_add_ext(cert, ex, -1))
	{
		X509_EXTENSION_free(ex);
		return -1;
	}
	X509_EXTENSION_free(ex);
	return 0;
}

/* A certificate for key pub, named cn, issued by issuer (NULL: itself). */
static X509 *
new_cert(const char *cn, X509 *issuer, EVP_PKEY *pub)
{
	X509	   *x = X509_new();
	BIGNUM	   *bn = BN_new();
	X509_NAME  *name;

	if (!x || !bn || !X509_set_version(x, 2) ||
		!BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
		!BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
		!X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
		!X509_gmtime_adj(X509_getm_notAfter(x), CA_VALID_S) ||
		(name = X509_get_subject_name(x)) == NULL ||
		!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0) ||
		!X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name) ||
		!X509_set_pubkey(x, pub))
	{
		X509_free(x);
		x = NULL;
	}
	BN_free(bn);
	return x;
}

/* The name constraints: every secret's host (a wildcard's suffix). */
static int
constraints(char *buf, size_t len)
{
	size_t		n = snprintf(buf, len, "critical");

	for (int i = 0; i < proxy.nsecrets; i++)
	{
		const EgressRule *r = proxy.secrets[i].rule;

		n += snprintf(buf + n, n < len ? len - n : 0, ",permitted;DNS:%s", r->host);
		if (n >= len)
			return -1;
	}
	return 0;
}

static int
make_ca(char *err)
{
	char		cn[64],
				nc[EGRESS_MAX_SECRETS * (EGRESS_HOST_MAX + 20) + 16];
	unsigned char id[4];
	BIO		   *mem;
	char	   *p;
	long		n;

	if ((ca_key = EVP_EC_gen("P-256")) == NULL || (leaf_key = EVP_EC_gen("P-256")) == NULL)
		return ca_fail(err, "key");
	if (getrandom(id, sizeof(id), 0) != sizeof(id))
		return ca_fail(err, "random");
	snprintf(cn, sizeof(cn), "sandbox-egress run CA %02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
	if (constraints(nc, sizeof(nc)) < 0)
		return ca_fail(err, "name constraints");
	if ((ca_cert = new_cert(cn, NULL, ca_key)) == NULL ||
		add_ext(ca_cert, ca_cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
		add_ext(ca_cert, ca_cert, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
		add_ext(ca_cert, ca_cert, NID_subject_key_identifier, "hash") < 0 ||
		add_ext(ca_cert, ca_cert, NID_name_constraints, nc) < 0 ||
		!X509_sign(ca_cert, ca_key, EVP_sha256()))
		return ca_fail(err, "certificate");
	if ((mem = BIO_new(BIO_s_mem())) == NULL || !PEM_write_bio_X509(mem, ca_cert))
		return ca_fail(err, "PEM");
	n = BIO_get_mem_data(mem, &p);
	ca_pem = malloc(n + 1);
	if (!ca_pem)
	{
		BIO_free(mem);
		return ca_fail(err, "out of memory");
	}
	memcpy(ca_pem, p, n);
	ca_pem[n] = '\0';
	ca_pem_len = n;
	BIO_free(mem);
	return 0;
}

/* A certificate for host, issued by the run's CA (the caller holds leaf_lock). */
static X509 *
issue(const char *host)
{
	char		san[EGRESS_HOST_MAX + 8];
	X509	   *x = new_cert(host, ca_cert, leaf_key);

	snprintf(san, sizeof(san), "DNS:%s", host);
	if (!x ||
		add_ext(x, ca_cert, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
		add_ext(x, ca_cert, NID_key_usage, "critical,digitalSignature") < 0 ||
		add_ext(x, ca_cert, NID_ext_key_usage, "serverAuth") < 0 ||
		add_ext(x, ca_cert, NID_subject_alt_name, san) < 0 ||
		add_ext(x, ca_cert, NID_subject_key_identifier, "hash") < 0 ||
		add_ext(x, ca_cert, NID_authority_key_identifier, "keyid:always") < 0 ||
		!X509_sign(x, ca_key, EVP_sha256()))
	{
		X509_free(x);
		return NULL;
	}
	return x;
}

/* host's certificate (a reference the caller frees), from the cache or new. */
static X509 *
leaf_for(const char *host)
{
	int			slot = 0;
	X509	   *x = NULL;

	pthread_mutex_lock(&leaf_lock);
	for (int i = 0; i < CA_LEAVES; i++)
	{
		if (leaves[i].cert && strcmp(leaves[i].host, host) == 0)
		{
			x = leaves[i].cert;
			leaves[i].used = ++leaf_clock;
			break;
		}
		if (leaves[i].used < leaves[slot].used)
			slot = i;
	}
	if (!x && (x = issue(host)) != NULL)
	{
		X509_free(leaves[slot].cert);
		leaves[slot].cert = x;
		snprintf(leaves[slot].host, sizeof(leaves[slot].host), "%s", host);
		leaves[slot].used = ++leaf_clock;
	}
	if (x)
		X509_up_ref(x);
	pthread_mutex_unlock(&leaf_lock);
	return x;
}

/*
 * ALPN towards the sandbox: HTTP/1.1 or nothing.  A client that offers
 * protocols but not HTTP/1.1 (h2 alone) gets a fatal alert: what passes
 * here is what the proxy reads, HTTP/1.x.
 */
static int
alpn_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
			const unsigned char *in, unsigned int inlen, void *arg)
{
	for (unsigned int i = 0; i < inlen;)
	{
		unsigned int l = in[i];

		if (i + 1 + l > inlen)
			break;
		if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0)
		{
			*out = in + i + 1;
			*outlen = 8;
			return SSL_TLSEXT_ERR_OK;
		}
		i += 1 + l;
	}
	return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static const unsigned char alpn_protos[] = "\x08http/1.1";

static void
ctx_common(SSL_CTX *ctx)
{
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	/* a server that closes without close_notify (many do, with
	 * Connection: close) ends its response; its framing says if it is whole */
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
						SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	/* whole records and more per read: fewer system calls in the relay */
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, 64 * 1024);
}

/* The CA bundle (fd 8) as a store: certificates only, all in memory. */
static X509_STORE *
trust_store(int fd, char *err)
{
	X509_STORE *store = X509_STORE_new();
	char	   *buf = malloc(CA_TRUST_MAX);
	size_t		len = 0;
	ssize_t		n;
	BIO		   *mem;
	STACK_OF(X509_INFO) *infos;
	int			certs = 0;

	if (!store || !buf)
	{
		free(buf);
		X509_STORE_free(store);
		ca_fail(err, "out of memory");
		return NULL;
	}
	while (fd >= 0 && len < CA_TRUST_MAX && (n = read(fd, buf + len, CA_TRUST_MAX - len)) > 0)
		len += n;
	mem = BIO_new_mem_buf(buf, (int) len);
	infos = mem ? PEM_X509_INFO_read_bio(mem, NULL, NULL, NULL) : NULL;
	for (int i = 0; infos && i < sk_X509_INFO_num(infos); i++)
	{
		X509_INFO  *xi = sk_X509_INFO_value(infos, i);

		if (xi->x509 && X509_STORE_add_cert(store, xi->x509))
			certs++;
	}
	sk_X509_INFO_pop_free(infos, X509_INFO_free);
	BIO_free(mem);
	free(buf);
	ERR_clear_error();
	if (certs == 0)
	{
		X509_STORE_free(store);
		snprintf(err, EGRESS_ERRLEN, "the CA bundle for the servers with secrets (--trust-fd) holds no certificate");
		return NULL;
	}
	return store;
}

SSL *
proxy_ca_server_ssl(const char *host, char *err, size_t errlen)
{
	SSL		   *ssl = SSL_new(server_ctx);
	X509	   *x = leaf_for(host);

	if (!ssl || !x || !SSL_use_certificate(ssl, x) || !SSL_use_PrivateKey(ssl, leaf_key))
	{
		proxy_tls_error(err, errlen);
		SSL_free(ssl);
		ssl = NULL;
	}
	X509_free(x);
	return ssl;
}

SSL *
proxy_ca_upstream_ssl(const char *host, char *err, size_t errlen)
{
	SSL		   *ssl = SSL_new(upstream_ctx);

	if (!ssl || !SSL_set_tlsext_host_name(ssl, host) || !SSL_set1_host(ssl, host))
	{
		proxy_tls_error(err, errlen);
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return ssl;
}

/*
 * One whole handshake between a server of ours (the first secret's host)
 * and a client that trusts our CA alone and checks the name, through a
 * BIO pair, with a few bytes each way: whatever OpenSSL sets up lazily
 * on a first handshake happens now, before the filter.
 */
static int
warm_up(char *err)
{
	const EgressRule *r = proxy.secrets[0].rule;
	char		host[EGRESS_HOST_MAX + 16];
	SSL_CTX    *cctx = SSL_CTX_new(TLS_client_method());
	X509_STORE *st = X509_STORE_new();
	SSL		   *srv,
			   *cli = NULL;
	BIO		   *b1 = NULL,
			   *b2 = NULL;
	char		e[200],
				buf[8];
	int			rc = -1;

	snprintf(host, sizeof(host), "%s%s", r->kind == RULE_WILDCARD ? "warm-up." : "", r->host);
	srv = proxy_ca_server_ssl(host, e, sizeof(e));
	if (!cctx || !st || !srv || !X509_STORE_add_cert(st, ca_cert))
		goto out;
	ctx_common(cctx);
	SSL_CTX_set_cert_store(cctx, st);
	st = NULL;
	SSL_CTX_set_verify(cctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_alpn_protos(cctx, alpn_protos, sizeof(alpn_protos) - 1);
	if ((cli = SSL_new(cctx)) == NULL || !SSL_set_tlsext_host_name(cli, host) ||
		!SSL_set1_host(cli, host) || !BIO_new_bio_pair(&b1, 0, &b2, 0))
		goto out;
	SSL_set_bio(srv, b1, b1);
	SSL_set_bio(cli, b2, b2);
	SSL_set_accept_state(srv);
	SSL_set_connect_state(cli);
	for (int i = 0; i < 32 && (!SSL_is_init_finished(srv) || !SSL_is_init_finished(cli)); i++)
	{
		(void) SSL_do_handshake(cli);
		(void) SSL_do_handshake(srv);
	}
	if (!SSL_is_init_finished(srv) || !SSL_is_init_finished(cli) ||
		SSL_get_verify_result(cli) != X509_V_OK ||
		SSL_write(cli, "ping", 4) != 4 || SSL_read(srv, buf, sizeof(buf)) != 4 ||
		SSL_write(srv, "pong", 4) != 4 || SSL_read(cli, buf, sizeof(buf)) != 4)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		ca_fail(err, "the handshake with itself failed");
	SSL_free(cli);
	SSL_free(srv);
	SSL_CTX_free(cctx);
	X509_STORE_free(st);
	ERR_clear_error();
	return rc;
}

/*
 * At start (the run has secrets): the CA, the contexts, the trust store
 * from trust_fd (closed), the warm-up.  Before the filter.
 */
int
proxy_ca_init(int trust_fd, char *err)
{
	X509_STORE *store;

	if (!OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL))
		return ca_fail(err, "OpenSSL");
	if (make_ca(err) < 0)
		return -1;
	store = trust_store(trust_fd, err);
	if (trust_fd >= 0)
		close(trust_fd);
	if (!store)
		return -1;
	if ((server_ctx = SSL_CTX_new(TLS_server_method())) == NULL ||
		(upstream_ctx = SSL_CTX_new(TLS_client_method())) == NULL)
		return ca_fail(err, "context");
	ctx_common(server_ctx);
	SSL_CTX_set_alpn_select_cb(server_ctx, alpn_http11, NULL);
	ctx_common(upstream_ctx);
	SSL_CTX_set_cert_store(upstream_ctx, store);
	SSL_CTX_set_verify(upstream_ctx, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_set_alpn_protos(upstream_ctx, alpn_protos, sizeof(alpn_protos) - 1) != 0)
		return ca_fail(err, "ALPN");
	return warm_up(err);
}

const char *
proxy_ca_pem(size_t *len)
{
	*len = ca_pem_len;
	return ca_pem;
}
