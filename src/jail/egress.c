/*-------------------------------------------------------------------------
 *
 * egress.c
 *	  A run's way out, when it has an egress policy (--egress-policy;
 *	  docs/egress.md).  The sandbox keeps its own empty network namespace
 *	  (only lo, no route, no resolver); its init makes one listening TCP
 *	  socket there, 127.0.0.1:3128, and sends it to the jail over a socket
 *	  pair.  The jail, in the host's network namespace, execs the proxy
 *	  (sandbox-egress) with that socket: every connection the payload makes
 *	  to 127.0.0.1:3128 is accepted by a process outside the sandbox, which
 *	  vets it, resolves and dials.  Nothing else of the sandbox can reach
 *	  the network: no veth, no NAT, no route, no DNS.
 *
 * Host side (the jail): jail_egress_prepare before the clone, _start once
 * the sandbox exists, _stop after it ended (the proxy's summary into the
 * verdict).  Sandbox side (init): jail_egress_listen, and the files and
 * environment the payload's clients need (jail_egress_write_files,
 * jail_egress_env_add).
 *
 * Secrets (--egress-secrets-fd, docs/secrets.md): the descriptor goes to
 * the proxy unread (fd 7), with the CA bundle the proxy checks upstream
 * servers against (fd 8, a memfd of the same bundle the payload trusts).
 * The proxy makes a CA of the run's own and a placeholder per secret; it
 * says both before "ready" on its summary pipe, and the jail hands them to
 * init over the socket pair the listening socket came on: the CA's
 * certificate goes into the payload's CA bundle, the placeholders into
 * its environment.  The CA's key and the values never leave the proxy.
 *
 *-------------------------------------------------------------------------
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <grp.h>
#include <unistd.h>

#include "jail.h"

#define EGRESS_CA_MAX		(256 * 1024)	/* the --egress-ca file */
#define EGRESS_SYSTEM_CA_MAX (1024 * 1024)	/* the system's bundle */

/*
 * The system's CA bundle (Debian's first, then the other usual places):
 * what the payload's clients trust without --egress-ca, and still trust
 * with it (the extra CA is added to it, not put in its place).
 */
static const char *const system_ca_bundles[] = {
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
	NULL
};
#define EGRESS_WAIT_MS		5000	/* init's socket, the proxy's summary */
#define EGRESS_READY_MAX	16384	/* the proxy's lines up to "ready" */
#define EGRESS_ENV_MAX		16		/* placeholders (secrets) per run */

/*
 * Node's https and fetch do not read proxy variables (Node 20): this file
 * is preloaded (NODE_OPTIONS=--require) and sends them through the proxy.
 * http/https: global agents whose connections are CONNECT tunnels (TLS
 * with the right server name on top); fetch: on top of https.request.
 */
static const char node_shim[] =
	"'use strict';\n"
	"// sandbox-jail: Node's clients through the egress proxy (docs/egress.md)\n"
	"const net = require('net'), tls = require('tls'), http = require('http'), https = require('https');\n"
	"const PROXY = { host: '127.0.0.1', port: 3128 };\n"
	"function tunnel(host, port, cb) {\n"
	"  const s = net.connect(PROXY);\n"
	"  let buf = Buffer.alloc(0), done = false;\n"
	"  const fail = (e) => { if (!done) { done = true; s.destroy(); cb(e); } };\n"
	"  s.once('error', fail);\n"
	"  s.on('data', function ondata(d) {\n"
	"    buf = Buffer.concat([buf, d]);\n"
	"    const end = buf.indexOf('\\r\\n\\r\\n');\n"
	"    if (end < 0) return;\n"
	"    s.removeListener('data', ondata);\n"
	"    const line = buf.slice(0, buf.indexOf('\\r\\n')).toString();\n"
	"    const m = /^HTTP\\/1\\.[01] (\\d{3}) ?(.*)$/.exec(line);\n"
	"    if (!m || m[1] !== '200') {\n"
	"      const e = new Error(m ? m[2] : 'egress proxy: bad answer');\n"
	"      e.code = 'EGRESS_DENIED'; return fail(e);\n"
	"    }\n"
	"    done = true; s.removeListener('error', fail);\n"
	"    if (buf.length > end + 4) s.unshift(buf.slice(end + 4));\n"
	"    cb(null, s);\n"
	"  });\n"
	"  s.write('CONNECT ' + host + ':' + port + ' HTTP/1.1\\r\\nHost: ' + host + ':' + port + '\\r\\n\\r\\n');\n"
	"}\n"
	"class TunnelAgent extends https.Agent {\n"
	"  createConnection(o, cb) {\n"
	"    const host = o.host || o.hostname || 'localhost', port = o.port || 443;\n"
	"    tunnel(host, port, (e, s) => {\n"
	"      if (e) return cb(e);\n"
	"      const t = tls.connect(Object.assign({}, o, { socket: s, servername: o.servername || host }));\n"
	"      cb(null, t);\n"
	"    });\n"
	"  }\n"
	"}\n"
	"const agent = new TunnelAgent({ keepAlive: false });\n"
	"https.globalAgent = agent;\n"
	"const origHttpsRequest = https.request, origHttpsGet = https.get;\n"
	"function withAgent(args) {\n"
	"  const a = Array.from(args);\n"
	"  const i = (typeof a[0] === 'string' || a[0] instanceof URL) ? 1 : 0;\n"
	"  if (typeof a[i] !== 'object' || a[i] === null || typeof a[i] === 'function') a.splice(i, 0, {});\n"
	"  if (a[i].agent === undefined) a[i] = Object.assign({}, a[i], { agent });\n"
	"  return a;\n"
	"}\n"
	"https.request = function () { return origHttpsRequest.apply(https, withAgent(arguments)); };\n"
	"https.get = function () { return origHttpsGet.apply(https, withAgent(arguments)); };\n"
	"// plain http: absolute-form requests to the proxy\n"
	"const origHttpRequest = http.request;\n"
	"http.request = function (url, opts, cb) {\n"
	"  if (typeof url === 'string' || url instanceof URL) { url = new URL(url); if (typeof opts === 'function') { cb = opts; opts = {}; } }\n"
	"  else { cb = opts; opts = url; url = null; }\n"
	"  opts = Object.assign({}, opts || {});\n"
	"  const host = url ? url.hostname : (opts.hostname || opts.host || 'localhost');\n"
	"  const port = url ? (url.port || 80) : (opts.port || 80);\n"
	"  const path = url ? url.pathname + url.search : (opts.path || '/');\n"
	"  opts.headers = Object.assign({ Host: host + (String(port) === '80' ? '' : ':' + port) }, opts.headers || {});\n"
	"  opts.path = 'http://' + host + ':' + port + path;\n"
	"  opts.host = PROXY.host; opts.hostname = PROXY.host; opts.port = PROXY.port; delete opts.agent;\n"
	"  opts.method = (url && opts.method) || opts.method || 'GET';\n"
	"  return origHttpRequest.call(http, opts, cb);\n"
	"};\n"
	"http.get = function () { const r = http.request.apply(http, arguments); r.end(); return r; };\n"
	"if (typeof globalThis.fetch === 'function') {\n"
	"  globalThis.fetch = function fetch(input, init) {\n"
	"    init = init || {};\n"
	"    const req = (typeof Request !== 'undefined' && input instanceof Request) ? input : null;\n"
	"    const url = new URL(req ? req.url : String(input));\n"
	"    const method = (init.method || (req && req.method) || 'GET').toUpperCase();\n"
	"    const headers = Object.fromEntries(new Headers(init.headers || (req && req.headers) || {}).entries());\n"
	"    return Promise.resolve(init.body === undefined || init.body === null ? null : new Response(init.body).arrayBuffer()).then((body) => new Promise((resolve, reject) => {\n"
	"      const mod = url.protocol === 'https:' ? https : http;\n"
	"      if (body) headers['content-length'] = String(body.byteLength);\n"
	"      const r = mod.request(url, { method, headers }, (res) => {\n"
	"        const chunks = [];\n"
	"        res.on('data', (c) => chunks.push(c));\n"
	"        res.on('error', reject);\n"
	"        res.on('end', () => {\n"
	"          const h = new Headers();\n"
	"          for (let k = 0; k < res.rawHeaders.length; k += 2) h.append(res.rawHeaders[k], res.rawHeaders[k + 1]);\n"
	"          const nobody = [101, 204, 205, 304].includes(res.statusCode) || method === 'HEAD';\n"
	"          resolve(new Response(nobody ? null : Buffer.concat(chunks), { status: res.statusCode, statusText: res.statusMessage, headers: h }));\n"
	"        });\n"
	"      });\n"
	"      // undici's message is 'fetch failed' (the why in e.cause); a refusal's reason goes in the message too\n"
	"      r.on('error', (e) => { const t = new TypeError(e && e.code === 'EGRESS_DENIED' ? 'fetch failed: ' + e.message : 'fetch failed'); t.cause = e; reject(t); });\n"
	"      if (init.signal) init.signal.addEventListener('abort', () => r.destroy(new Error('aborted')));\n"
	"      r.end(body ? Buffer.from(body) : undefined);\n"
	"    }));\n"
	"  };\n"
	"}\n";

/*
 * What a run with egress adds to the payload's environment (sandbox.c,
 * payload_env, has the rest): the proxy for every client.
 */
static char *const egress_env[] = {
	"http_proxy=" JAIL_EGRESS_URL,
	"https_proxy=" JAIL_EGRESS_URL,
	"HTTP_PROXY=" JAIL_EGRESS_URL,
	"HTTPS_PROXY=" JAIL_EGRESS_URL,
	"NODE_OPTIONS=--require=" JAIL_EGRESS_NODE_SHIM,
	NULL
};

static char *const ca_env[] = {
	"SSL_CERT_FILE=" JAIL_EGRESS_CA_PATH,
	"REQUESTS_CA_BUNDLE=" JAIL_EGRESS_CA_PATH,
	"CURL_CA_BUNDLE=" JAIL_EGRESS_CA_PATH,
	"NODE_EXTRA_CA_CERTS=" JAIL_EGRESS_CA_PATH,
	NULL
};

/*
 * Init's copy of what the proxy said (jail_egress_write_files): the
 * placeholders' NAME=VALUE strings, for the payload's environment.
 */
static char intercept_buf[EGRESS_READY_MAX];
static char *intercept_env[EGRESS_ENV_MAX + 1];

void
jail_egress_init(JailEgress *e)
{
	memset(e, 0, sizeof(*e));
	e->sock[0] = e->sock[1] = -1;
	e->logfd = -1;
	e->policyfd = -1;
	e->secretsfd = -1;
	e->trustfd = -1;
	e->summary = -1;
	e->pid = -1;
	e->spawner = -1;
	e->pidfd = -1;
	e->parent = getpid();
}

/*
 * The bundle the sandbox's clients get with --egress-ca or secrets
 * (e->ca): the system's bundle, then the extra CA (extra_path, or none).
 * SSL_CERT_FILE and the others name one file and replace the default, so
 * the extra CA alone would make every other certificate untrusted.  A
 * host without a system bundle gets the extra CA alone.  (With secrets
 * the proxy's CA of the run is added by init, jail_egress_write_files.)
 */
static int
read_ca_bundle(JailEgress *e, const char *extra_path, char *err)
{
	char	   *sys = NULL,
			   *extra = NULL,
			   *all;
	size_t		sys_len = 0,
				extra_len = 0;
	int			fd;

	if (extra_path)
	{
		fd = open(extra_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
		{
			jail_seterr(err, "egress CA %s: %s", extra_path, strerror(errno));
			return -1;
		}
		extra = jail_read_code(fd, &extra_len, err);
		close(fd);
		if (!extra)
			return -1;
		if (extra_len > EGRESS_CA_MAX)
		{
			jail_seterr(err, "egress CA %s is larger than %d bytes", extra_path, EGRESS_CA_MAX);
			free(extra);
			return -1;
		}
	}
	for (int i = 0; system_ca_bundles[i]; i++)
	{
		fd = open(system_ca_bundles[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		sys = jail_read_code(fd, &sys_len, err);
		close(fd);
		if (!sys || sys_len > EGRESS_SYSTEM_CA_MAX)
		{
			jail_seterr(err, "the system's CA bundle %s is unreadable or larger than %d bytes",
						system_ca_bundles[i], EGRESS_SYSTEM_CA_MAX);
			free(sys);
			free(extra);
			return -1;
		}
		break;
	}
	all = malloc(sys_len + 1 + extra_len + 1);
	if (!all)
	{
		jail_seterr(err, "out of memory");
		free(sys);
		free(extra);
		return -1;
	}
	if (sys_len)
		memcpy(all, sys, sys_len);
	e->ca_len = sys_len;
	if (sys_len && all[sys_len - 1] != '\n')
		all[e->ca_len++] = '\n';
	if (extra_len)
		memcpy(all + e->ca_len, extra, extra_len);
	e->ca_len += extra_len;
	all[e->ca_len] = '\0';
	e->ca = all;
	free(sys);
	free(extra);
	return 0;
}

/*
 * Secrets: take the descriptor (a regular file or memfd, which is all the
 * runner sends: a pipe could hold the proxy's start), and make the CA
 * bundle for both the payload and the proxy's upstream checks, the latter
 * as a sealed memfd: the proxy opens no file.
 */
static int
prepare_secrets(JailEgress *e, const JailOptions *opts, char *err)
{
	struct stat st;
	int			fd;

	if (fstat(opts->egress_secrets_fd, &st) < 0 || !S_ISREG(st.st_mode) ||
		(fcntl(opts->egress_secrets_fd, F_GETFL) & O_ACCMODE) == O_WRONLY)
	{
		jail_seterr(err, "--egress-secrets-fd %d is not a readable file or memfd",
					opts->egress_secrets_fd);
		return -1;
	}
	e->secretsfd = opts->egress_secrets_fd;
	e->intercept = true;
	if (read_ca_bundle(e, opts->egress_ca, err) < 0)
		return -1;
	fd = memfd_create("sandbox-egress-trust", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || jail_write_all(fd, e->ca, e->ca_len) < 0 ||
		fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0 ||
		lseek(fd, 0, SEEK_SET) < 0)
	{
		jail_seterr(err, "egress: the CA bundle for the proxy: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	e->trustfd = fd;
	return 0;
}

/*
 * Before the clone: the socket pair, the log (created, never followed:
 * O_NOFOLLOW | O_EXCL), the CA's text, the secrets' descriptor.  The
 * policy itself is the proxy's to read and judge; it must at least be a
 * regular file we can open.
 */
int
jail_egress_prepare(JailEgress *e, const JailOptions *opts, char *err)
{
	struct stat st;
	int			fd;

	if (!opts->egress_policy)
		return 0;
	e->on = true;
	fd = open(opts->egress_policy, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
	{
		jail_seterr(err, "egress policy %s: %s", opts->egress_policy,
					fd < 0 ? strerror(errno) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	e->policyfd = fd;			/* the proxy reads it: it may not be able to open it */
	if (opts->egress_log)
	{
		e->logfd = open(opts->egress_log, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
						0600);
		if (e->logfd < 0)
		{
			jail_seterr(err, "egress log %s: %s", opts->egress_log, strerror(errno));
			return -1;
		}
	}
	if (opts->egress_secrets_fd >= 0 && prepare_secrets(e, opts, err) < 0)
		return -1;
	if (opts->egress_ca && !e->ca && read_ca_bundle(e, opts->egress_ca, err) < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, e->sock) < 0)
	{
		jail_seterr(err, "socketpair: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* The proxy's path: --egress-proxy, or sandbox-egress beside our binary. */
static int
proxy_path(const JailOptions *opts, char *path, size_t len)
{
	char		self[PATH_MAX];
	ssize_t		n;
	char	   *slash;

	if (opts->egress_proxy)
		return snprintf(path, len, "%s", opts->egress_proxy) < (int) len ? 0 : -1;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return -1;
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	return snprintf(path, len, "%s/sandbox-egress", self) < (int) len ? 0 : -1;
}

/* A name the sandbox sets itself: no placeholder may take it. */
static bool
reserved_env_name(const char *name, size_t len)
{
	static const char *const names[] = {
		"PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "MPLCONFIGDIR",
		"HTTP_PROXY", "HTTPS_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
		NULL
	};
	static const char *const prefixes[] = {"LD_", "PYTHON", "PIP_", "NODE_", "LC_", NULL};

	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
			return true;
	for (int i = 0; prefixes[i]; i++)
		if (len >= strlen(prefixes[i]) && memcmp(prefixes[i], name, strlen(prefixes[i])) == 0)
			return true;
	return false;
}

/* "NAME=VALUE" of a placeholder: a secret's name, a token's characters. */
static bool
valid_env(const char *s, size_t len)
{
	const char *eq = memchr(s, '=', len);
	size_t		nl = eq ? (size_t) (eq - s) : 0;

	if (!eq || nl == 0 || nl > 64 || !(s[0] >= 'A' && s[0] <= 'Z') ||
		len - nl - 1 == 0 || len - nl - 1 > 128 || reserved_env_name(s, nl))
		return false;
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];
		bool		ok = (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
			(i > nl && c >= 'a' && c <= 'z');

		if (i != nl && !ok)
			return false;
	}
	return true;
}

/*
 * What the proxy said before "ready" (secrets only): its CA's certificate
 * ("ca N\n" and N bytes of PEM) and a placeholder per secret ("env
 * NAME=VALUE\n"), parsed from buf; sent on to init as one message: the
 * PEM, then each NAME=VALUE, each NUL-terminated.  -1 on anything else.
 */
static int
send_intercept(JailEgress *e, const char *buf, size_t len, char *err)
{
	char		msg[EGRESS_READY_MAX + 64];
	size_t		m = 0,
				pos = 0;
	const char *pem = NULL;
	size_t		pemlen = 0;
	int			nenv = 0;
	char		envs[EGRESS_READY_MAX];
	size_t		elen = 0;

	while (pos < len)
	{
		const char *nl = memchr(buf + pos, '\n', len - pos);
		size_t		ll = nl ? (size_t) (nl - buf - pos) : 0;

		if (!nl)
			break;
		if (ll > 4 && memcmp(buf + pos, "env ", 4) == 0 && nenv < EGRESS_ENV_MAX &&
			valid_env(buf + pos + 4, ll - 4))
		{
			memcpy(envs + elen, buf + pos + 4, ll - 4);
			elen += ll - 4;
			envs[elen++] = '\0';
			nenv++;
			pos += ll + 1;
		}
		else if (ll > 3 && memcmp(buf + pos, "ca ", 3) == 0 && !pem)
		{
			pemlen = strtoul(buf + pos + 3, NULL, 10);
			pem = buf + pos + ll + 1;
			if (pemlen == 0 || pemlen > len - pos - ll - 1 || memchr(pem, '\0', pemlen))
				break;
			pos += ll + 1 + pemlen;
		}
		else
			break;
	}
	if (pos != len || !pem || m + pemlen + 1 + elen > sizeof(msg))
	{
		jail_seterr(err, "egress proxy: what it said before \"ready\" is not a CA and placeholders");
		return -1;
	}
	memcpy(msg, pem, pemlen);
	m = pemlen;
	msg[m++] = '\0';
	memcpy(msg + m, envs, elen);
	m += elen;
	if (send(e->sock[0], msg, m, MSG_NOSIGNAL) != (ssize_t) m)
	{
		jail_seterr(err, "egress: could not hand the proxy's CA to the sandbox: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * The proxy says "ready\n" once it has read its policy and serves; a
 * proxy that cannot start (a bad policy, no resolver) is a setup error,
 * never a run without its proxy.  With secrets it says its CA and the
 * placeholders first (send_intercept).
 */
static int
wait_ready(JailEgress *e, char *err)
{
	static char buf[EGRESS_READY_MAX];
	size_t		len = 0;
	uint64_t	deadline = jail_now_ms() + EGRESS_WAIT_MS;

	for (;;)
	{
		struct pollfd p = {.fd = e->summary,.events = POLLIN};
		uint64_t	now = jail_now_ms();
		ssize_t		n;

		/* "ready\n" ends what it says (and a PEM never holds that line) */
		if (len >= 6 && memcmp(buf + len - 6, "ready\n", 6) == 0 &&
			(len == 6 || buf[len - 7] == '\n'))
			break;
		/* without secrets "ready\n" is all there is: never read past it */
		if (len >= sizeof(buf) || now >= deadline ||
			poll(&p, 1, (int) (deadline - now)) != 1 ||
			(n = read(e->summary, buf + len, e->intercept ? sizeof(buf) - len : 6 - len)) <= 0)
		{
			jail_seterr(err, "egress proxy did not start (see its message on stderr)");
			return -1;
		}
		len += n;
	}
	if (!e->intercept)
		return len == 6 ? 0 : (jail_seterr(err, "egress proxy did not start (see its message on stderr)"), -1);
	return send_intercept(e, buf, len - 6, err);
}

/* The descriptors of the proxy (exec_proxy), -1 where none. */
typedef struct ProxyFds
{
	int			listen;			/* as its fd 3 */
	int			log;			/* 4 */
	int			summary;		/* 5 */
	int			policy;			/* 6 */
	int			secrets;		/* 7 */
	int			trust;			/* 8 */
} ProxyFds;

/*
 * The proxy's process, from here to its execve: fds 3 (listen), 4 (log,
 * or closed), 5 (summary), 6 (policy), with secrets 7 (the secrets) and 8
 * (the CA bundle it checks servers against), nothing else; nobody when
 * root; no_new_privs; it dies with parent (its parent: the jail, or a
 * served run's launcher).  Never returns.
 */
static void exec_proxy(pid_t parent, const char *path, const char *resolver,
					   const ProxyFds *f) __attribute__((noreturn));
static void
exec_proxy(pid_t parent, const char *path, const char *resolver, const ProxyFds *f)
{
	char	   *argv[20];
	int			a = 0;
	char	   *const envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL};
	sigset_t	none;
	int			src[6] = {f->listen, f->log, f->summary, f->policy, f->secrets, f->trust};
	int			hi[6];

	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (getppid() != parent)
		_exit(127);				/* it died before the line above */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* out of the way first, so no target overwrites a source */
	for (int i = 0; i < 6; i++)
		if ((hi[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD, 10) : -1) < 0 && src[i] >= 0)
			_exit(127);
	for (int i = 0; i < 6; i++)
		if (hi[i] >= 0 ? dup2(hi[i], 3 + i) < 0 : (close(3 + i) < 0 && errno != EBADF))
			_exit(127);
	if (f->listen < 0 || f->summary < 0 || f->policy < 0)
		_exit(127);
	syscall(SYS_close_range, 9, ~0U, 0);

	/*
	 * The proxy parses what the payload sends: it never runs as root.
	 * Started by root, it becomes nobody (it needs no file: every
	 * descriptor is open already, and outbound sockets need no
	 * privilege); always no_new_privs.
	 */
	if (geteuid() == 0 &&
		(setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		 setresuid(65534, 65534, 65534) < 0))
		_exit(127);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		_exit(127);
	argv[a++] = "sandbox-egress";
	argv[a++] = "--policy-fd";
	argv[a++] = "6";
	argv[a++] = "--listen-fd";
	argv[a++] = "3";
	argv[a++] = "--summary-fd";
	argv[a++] = "5";
	if (f->log >= 0)
	{
		argv[a++] = "--log-fd";
		argv[a++] = "4";
	}
	if (f->secrets >= 0)
	{
		argv[a++] = "--secrets-fd";
		argv[a++] = "7";
	}
	if (f->trust >= 0)
	{
		argv[a++] = "--trust-fd";
		argv[a++] = "8";
	}
	if (resolver && resolver[0])
	{
		argv[a++] = "--resolver";
		argv[a++] = (char *) resolver;
	}
	argv[a] = NULL;
	execve(path, argv, envp);
	_exit(127);
}

/*
 * Served runs.  A launcher's worker sits in a network namespace of its
 * own (worker.c), from which no process of the host's can be started; the
 * launcher, in the host's namespace and its own cgroup, starts the proxy
 * for it.  The worker sends the proxy's path and descriptors on the
 * launcher's spawner socket (JailLauncher.egress_spawner: one
 * SOCK_SEQPACKET pair every worker shares, a message is atomic), with one
 * end of a pair of its own for the answer; the launcher forks the proxy
 * and answers with a pidfd of it (jail_egress_spawn).  So the proxy is in
 * the host's namespace and the launcher's cgroup, never in the run's
 * slot, as a one-shot run's is in the jail's; it is the launcher's child,
 * dies with the launcher (PDEATHSIG) and is reaped by it, and dies with
 * the worker too: once the worker's end of the summary pipe is gone, the
 * proxy stops (src/egress/pool.c).  A worker no longer forks a process of
 * its own ahead for this: a fork is most of a worker's preparation on a
 * host where forks are dear, and only a run with egress needs one.
 *
 * The message: "path\0resolver\0" and two bytes, 'l' when a log is
 * passed and 's' when secrets are (else '-'); descriptors [listen,
 * summary, policy, log (or listen again), answer, secrets (or listen),
 * the CA bundle (or listen)].  The answer: "ok PID" with [pidfd], or a
 * reason.
 */
enum
{
	SPAWN_LISTEN,
	SPAWN_SUMMARY,
	SPAWN_POLICY,
	SPAWN_LOG,
	SPAWN_ANSWER,
	SPAWN_SECRETS,
	SPAWN_TRUST,
	SPAWN_NFDS
};

/* A worker: the launcher starts the proxy; its pid, e->pidfd set, or -1. */
static pid_t
spawn_by_launcher(JailEgress *e, const char *path, const char *resolver, int lfd,
				  int sumfd, char *err)
{
	char		msg[PATH_MAX + 256];
	char		ans[JAIL_ERRLEN];
	int			ap[2];
	int			fds[SPAWN_NFDS];
	int			got[1];
	int			ngot = 0;
	bool		truncated = false;
	ssize_t		n = -1;
	struct pollfd p;
	int			rc;
	int			len = snprintf(msg, sizeof(msg), "%s%c%s%c%c%c", path, 0, resolver ? resolver : "", 0,
							   e->logfd >= 0 ? 'l' : '-', e->secretsfd >= 0 ? 's' : '-');

	if (len < 0 || (size_t) len >= sizeof(msg))
	{
		jail_seterr(err, "egress: the proxy's path and resolver are too long");
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ap) < 0)
	{
		jail_seterr(err, "socketpair: %s", strerror(errno));
		return -1;
	}
	fds[SPAWN_LISTEN] = lfd;
	fds[SPAWN_SUMMARY] = sumfd;
	fds[SPAWN_POLICY] = e->policyfd;
	fds[SPAWN_LOG] = e->logfd >= 0 ? e->logfd : lfd;
	fds[SPAWN_ANSWER] = ap[1];
	fds[SPAWN_SECRETS] = e->secretsfd >= 0 ? e->secretsfd : lfd;
	fds[SPAWN_TRUST] = e->secretsfd >= 0 ? e->trustfd : lfd;
	if (jail_wire_send(e->spawner, msg, len, fds, SPAWN_NFDS) != len)
	{
		jail_seterr(err, "egress: could not ask the launcher for the proxy: %s", strerror(errno));
		close(ap[0]);
		close(ap[1]);
		return -1;
	}
	close(ap[1]);
	p.fd = ap[0];
	p.events = POLLIN;
	do
		rc = poll(&p, 1, EGRESS_WAIT_MS);
	while (rc < 0 && errno == EINTR);
	if (rc == 1)
		n = jail_wire_recv(ap[0], ans, sizeof(ans) - 1, got, 1, &ngot, &truncated);
	close(ap[0]);
	if (n > 3 && !truncated && ngot == 1 && strncmp(ans, "ok ", 3) == 0)
	{
		ans[n] = '\0';
		e->pidfd = got[0];
		return (pid_t) atoi(ans + 3);
	}
	for (int i = 0; i < ngot; i++)
		close(got[i]);
	if (n > 0)
	{
		ans[n] = '\0';
		jail_seterr(err, "egress: the launcher could not start the proxy: %s", ans);
	}
	else
		jail_seterr(err, "egress: the launcher did not answer for the proxy");
	return -1;
}

/*
 * The launcher (serve.c), its spawner socket readable: one worker's
 * request, answered at once (the proxy's fork; nothing here waits for
 * the proxy).  Every descriptor that came is closed before this returns.
 */
void
jail_egress_spawn(int sock)
{
	char		msg[PATH_MAX + 256];
	char		ans[64 + JAIL_ERRLEN];
	int			fds[SPAWN_NFDS];
	int			nfds;
	bool		truncated;
	ssize_t		n;
	size_t		plen,
				rlen;
	pid_t		pid = -1;
	pid_t		self = getpid();
	int			pidfd = -1;
	int			alen;

	n = jail_wire_recv(sock, msg, sizeof(msg) - 1, fds, SPAWN_NFDS, &nfds, &truncated);
	if (n <= 0 || truncated || nfds != SPAWN_NFDS)
	{
		/* not ours to answer: the worker sees its answer socket close */
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return;
	}
	msg[n] = '\0';
	plen = strnlen(msg, n);
	rlen = plen < (size_t) n ? strnlen(msg + plen + 1, n - plen - 1) : 0;
	if (plen == 0 || plen + 1 + rlen + 3 != (size_t) n ||
		(msg[n - 2] != 'l' && msg[n - 2] != '-') || (msg[n - 1] != 's' && msg[n - 1] != '-'))
		alen = snprintf(ans, sizeof(ans), "a malformed request");
	else if ((pid = fork()) == 0)
	{
		ProxyFds	f = {
			.listen = fds[SPAWN_LISTEN],
			.log = msg[n - 2] == 'l' ? fds[SPAWN_LOG] : -1,
			.summary = fds[SPAWN_SUMMARY],
			.policy = fds[SPAWN_POLICY],
			.secrets = msg[n - 1] == 's' ? fds[SPAWN_SECRETS] : -1,
			.trust = msg[n - 1] == 's' ? fds[SPAWN_TRUST] : -1,
		};

		exec_proxy(self, msg, msg + plen + 1, &f);
	}
	else if (pid < 0)
		alen = snprintf(ans, sizeof(ans), "fork: %s", strerror(errno));
	else if ((pidfd = (int) syscall(SYS_pidfd_open, pid, 0)) < 0)
	{
		alen = snprintf(ans, sizeof(ans), "pidfd_open: %s", strerror(errno));
		kill(pid, SIGKILL);		/* reaped with the workers (serve.c) */
	}
	else
		alen = snprintf(ans, sizeof(ans), "ok %d", (int) pid);
	/* the worker waits on its own pair: never block the launcher on it */
	(void) jail_wire_send_flags(fds[SPAWN_ANSWER], ans, alen, &pidfd, pidfd >= 0 ? 1 : 0,
								MSG_DONTWAIT);
	if (pidfd >= 0)
		close(pidfd);
	for (int i = 0; i < SPAWN_NFDS; i++)
		close(fds[i]);
}

/*
 * Once the sandbox exists (after its first go): take the listening socket
 * its init made, and exec the proxy on it, here in the host's network
 * namespace.  The socket is the sandbox's end of every connection; the
 * proxy dies with us (PDEATHSIG) and holds nothing else of ours: fds 3
 * (listen), 4 (log), 5 (summary), 6 (policy), 7 and 8 (secrets, the CA
 * bundle); as nobody when we are root.
 */
int
jail_egress_start(JailEgress *e, const JailOptions *opts, char *err)
{
	char		path[PATH_MAX];
	int			lfd,
				sp[2];
	pid_t		pid;

	if (!e->on)
		return 0;
	jail_close(&e->sock[1]);
	lfd = jail_recv_fd(e->sock[0], EGRESS_WAIT_MS);
	if (lfd < 0)
	{
		jail_seterr(err, "egress: the sandbox sent no listening socket");
		return -1;
	}
	if (proxy_path(opts, path, sizeof(path)) < 0 || access(path, X_OK) < 0)
	{
		jail_seterr(err, "egress proxy %s: %s", path, strerror(errno));
		close(lfd);
		return -1;
	}
	if (pipe2(sp, O_CLOEXEC) < 0)
	{
		jail_seterr(err, "pipe: %s", strerror(errno));
		close(lfd);
		return -1;
	}
	if (e->spawner >= 0)
		pid = spawn_by_launcher(e, path, opts->egress_resolver, lfd, sp[1], err);
	else if ((pid = fork()) == 0)
	{
		ProxyFds	f = {lfd, e->logfd, sp[1], e->policyfd, e->secretsfd, e->trustfd};

		exec_proxy(e->parent, path, opts->egress_resolver, &f);
	}
	else if (pid < 0)
		jail_seterr(err, "fork: %s", strerror(errno));
	if (pid < 0)
	{
		close(lfd);
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	close(lfd);
	close(sp[1]);
	e->summary = sp[0];
	e->pid = pid;
	jail_close(&e->logfd);		/* the proxy has it */
	jail_close(&e->policyfd);
	jail_close(&e->secretsfd);
	jail_close(&e->trustfd);
	return wait_ready(e, err);
}

static uint64_t
summary_field(const char *line, const char *key)
{
	char		k[64];
	const char *p;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(line, k);
	return p ? strtoull(p + strlen(k), NULL, 10) : 0;
}

/* The proxy: our child, or (served) the launcher's, known by its pidfd. */
static void
proxy_signal(JailEgress *e, int sig)
{
	if (e->pidfd >= 0)
		(void) syscall(SYS_pidfd_send_signal, e->pidfd, sig, NULL, 0);
	else
		kill(e->pid, sig);
}

/* After SIGKILL: its end (a pidfd reads as readable once it exited). */
static void
proxy_wait(JailEgress *e)
{
	if (e->pidfd >= 0)
	{
		struct pollfd p = {.fd = e->pidfd,.events = POLLIN};

		while (poll(&p, 1, -1) < 0 && errno == EINTR)
			;
		jail_close(&e->pidfd);
		return;
	}
	while (waitpid(e->pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/*
 * After the sandbox ended: stop the proxy (SIGTERM: it closes every
 * connection and writes its summary), and put the summary in the result.
 * Safe to call when nothing was started.
 */
void
jail_egress_stop(JailEgress *e, JailResult *res)
{
	char		line[512];
	size_t		len = 0;

	if (e->on)
		res->egress = true;
	if (e->pid > 0)
	{
		uint64_t	deadline = jail_now_ms() + EGRESS_WAIT_MS;

		proxy_signal(e, SIGTERM);
		while (len < sizeof(line) - 1)
		{
			struct pollfd p = {.fd = e->summary,.events = POLLIN};
			uint64_t	now = jail_now_ms();
			ssize_t		n;

			if (now >= deadline || poll(&p, 1, (int) (deadline - now)) != 1)
				break;
			n = read(e->summary, line + len, sizeof(line) - 1 - len);
			if (n <= 0)
				break;
			len += n;
		}
		line[len] = '\0';
		proxy_signal(e, SIGKILL);	/* gone already, unless it hung */
		proxy_wait(e);
		e->pid = -1;
		res->egress_attempts = summary_field(line, "attempts");
		res->egress_allowed = summary_field(line, "allowed");
		res->egress_denied = summary_field(line, "denied");
		res->egress_bytes_up = summary_field(line, "bytes_up");
		res->egress_bytes_down = summary_field(line, "bytes_down");
		res->egress_limit_hit = strstr(line, "\"limit_hit\":true") != NULL;
	}
	jail_close(&e->pidfd);
	jail_close(&e->summary);
	jail_close(&e->sock[0]);
	jail_close(&e->sock[1]);
	jail_close(&e->logfd);
	jail_close(&e->policyfd);
	jail_close(&e->secretsfd);
	jail_close(&e->trustfd);
	free(e->ca);
	e->ca = NULL;
}

/*
 * Init, in the sandbox's network namespace (lo up): the proxy's listening
 * socket, sent to the jail; we keep no copy, so the payload can connect
 * to it but never accept on it.
 */
int
jail_egress_listen(int sock, char *err)
{
	struct sockaddr_in a = {.sin_family = AF_INET,.sin_port = htons(JAIL_EGRESS_PORT)};
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 128) < 0)
	{
		jail_seterr(err, "egress listening socket: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (jail_send_fd(sock, fd) < 0)
	{
		jail_seterr(err, "egress: send the listening socket: %s", strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/*
 * Init, with secrets: what the proxy said through the jail (send_intercept),
 * its CA's certificate (into *pem, pointing into intercept_buf) and the
 * placeholders (into intercept_env, for jail_egress_env_add).  The socket
 * is closed after: the payload inherits nothing of it.
 */
static int
take_intercept(int sock, const char **pem, size_t *pemlen, char *err)
{
	struct pollfd p = {.fd = sock,.events = POLLIN};
	ssize_t		n = -1;
	size_t		off;
	int			k = 0;

	if (poll(&p, 1, EGRESS_WAIT_MS) == 1)
		n = recv(sock, intercept_buf, sizeof(intercept_buf) - 1, 0);
	close(sock);
	if (n <= 0)
	{
		jail_seterr(err, "egress: the proxy's CA did not come");
		return -1;
	}
	intercept_buf[n] = '\0';
	*pem = intercept_buf;
	*pemlen = strlen(intercept_buf);
	for (off = *pemlen + 1; off < (size_t) n && k < EGRESS_ENV_MAX; off += strlen(intercept_buf + off) + 1)
		intercept_env[k++] = intercept_buf + off;
	intercept_env[k] = NULL;
	return 0;
}

/*
 * Init, building the root: the Node shim, and the CA bundle if there is
 * one (with secrets: the proxy's CA of the run added to it).
 */
int
jail_egress_write_files(const JailChildArgs *args, const char *root, char *err)
{
	char		path[256];
	const char *pem = NULL;
	size_t		pemlen = 0;
	struct iovec parts[3];

	if (!args->egress)
		return 0;
	snprintf(path, sizeof(path), "%s%s", root, JAIL_EGRESS_NODE_SHIM);
	if (jail_write_new(path, node_shim, sizeof(node_shim) - 1, 0444, err) < 0)
		return -1;
	if (args->egress_intercept && take_intercept(args->egress_fd, &pem, &pemlen, err) < 0)
		return -1;
	if (!args->egress_ca_pem)
		return 0;
	snprintf(path, sizeof(path), "%s%s", root, JAIL_EGRESS_CA_PATH);
	parts[0] = (struct iovec) {.iov_base = (void *) args->egress_ca_pem,.iov_len = args->egress_ca_len};
	parts[1] = (struct iovec) {.iov_base = "\n",.iov_len = pem ? 1 : 0};
	parts[2] = (struct iovec) {.iov_base = (void *) pem,.iov_len = pemlen};
	return jail_write_new_parts(path, parts, 3, 0444, err);
}

/*
 * Append the egress variables (and with_ca the CA variables) to env, which
 * holds n entries and has room for room; returns the new count, or -1 when
 * they do not fit.  Called in the payload's process just before execve.
 */
int
jail_egress_env_add(char **env, int n, int room, bool with_ca)
{
	for (size_t i = 0; egress_env[i]; i++)
	{
		if (n >= room)
			return -1;
		env[n++] = egress_env[i];
	}
	for (size_t i = 0; with_ca && ca_env[i]; i++)
	{
		if (n >= room)
			return -1;
		env[n++] = ca_env[i];
	}
	/* secrets: each one's placeholder (the value stays in the proxy) */
	for (size_t i = 0; intercept_env[i]; i++)
	{
		if (n >= room)
			return -1;
		env[n++] = intercept_env[i];
	}
	return n;
}
