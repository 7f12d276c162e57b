/*-------------------------------------------------------------------------
 *
 * client.c
 *	  `sandbox-jail --client SOCKET <run options>`: the one-shot command
 *	  line, served by a resident launcher (serve.c) instead of building
 *	  the sandbox itself.  Same options, same output, same verdict, same
 *	  exit codes; so tests, benchmarks and operators can use the served
 *	  path exactly like the one-shot one.
 *
 * What stays here: option parsing (the same parser), the verdict
 * destination, reading the code.  The request carries the code in a
 * memfd and our own stdout and stderr; the launcher's worker copies the
 * payload's output straight into them (with the caps) and sends back the
 * verdict, which we write where the caller asked.  SIGTERM & co. to us
 * half-close the connection, which the worker takes as "stop the run";
 * it still answers, with a "killed" verdict.  If we die, the connection
 * closes and the run is killed the same way.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "jail.h"

static volatile int client_sock = -1;

/* Async-signal-safe: shutdown(2) is on the list. */
static void
on_stop(int sig)
{
	if (client_sock >= 0)
		shutdown(client_sock, SHUT_WR);
}

/* Add one formatted string to the request (wire.c); false if it is full. */
static bool
put(JailWireRequest *r, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static bool
put(JailWireRequest *r, const char *fmt,...)
{
	static char value[JAIL_WIRE_MAX];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(value, sizeof(value), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t) n >= sizeof(value))
		return false;
	return jail_wire_request_add(r, value);
}

#define SEC(ms) (unsigned long long) ((ms) / 1000), (unsigned long long) ((ms) % 1000)
#define ULL(v) (unsigned long long) (v)

/* The request's options in canonical form (after the magic). */
static bool
build_request(const JailOptions *o, const char *workspace, JailWireRequest *r)
{
	static const char *const langs[] = {"python", "node", "shell"};
	bool		ok;

	ok = (o->language == LANG_EXEC ?
		  put(r, "--exec") && put(r, "%s", o->exec_path) :
		  put(r, "--language") && put(r, "%s", langs[o->language])) &&
		put(r, "--workspace") && put(r, "%s", workspace) &&
		put(r, "--wall-time") && put(r, "%llu.%03llu", SEC(o->wall_ms)) &&
		put(r, "--cpu-time") && put(r, "%llu.%03llu", SEC(o->cpu_ms)) &&
		put(r, "--memory") && put(r, "%llu", ULL(o->memory_bytes)) &&
		put(r, "--pids") && put(r, "%llu", ULL(o->pids)) &&
		put(r, "--output-limit") && put(r, "%llu", ULL(o->output_limit)) &&
		put(r, "--file-size") && put(r, "%llu", ULL(o->file_size)) &&
		put(r, "--workspace-size") && put(r, "%llu", ULL(o->workspace_size)) &&
		put(r, "--workspace-entries") && put(r, "%llu", ULL(o->workspace_entries)) &&
		put(r, "--tmp-size") && put(r, "%llu", ULL(o->tmp_size));
	for (int i = 0; ok && i < o->nbinds; i++)
		ok = put(r, "--ro-bind") &&
			put(r, "%s:%s", o->binds[i].src, o->binds[i].dst);
	if (ok && o->cgroup_parent)
		ok = put(r, "--cgroup-parent") && put(r, "%s", o->cgroup_parent);
	if (ok && o->require_cgroup)
		ok = put(r, "--require-cgroup");
	/* egress: paths as given (the launcher opens them; give them absolute) */
	if (ok && o->egress_policy)
		ok = put(r, "--egress-policy") && put(r, "%s", o->egress_policy);
	if (ok && o->egress_log)
		ok = put(r, "--egress-log") && put(r, "%s", o->egress_log);
	if (ok && o->egress_resolver)
		ok = put(r, "--egress-resolver") && put(r, "%s", o->egress_resolver);
	if (ok && o->egress_ca)
		ok = put(r, "--egress-ca") && put(r, "%s", o->egress_ca);
	if (ok && o->egress_proxy)
		ok = put(r, "--egress-proxy") && put(r, "%s", o->egress_proxy);
	if (ok && o->image)
		ok = put(r, "--image") && put(r, "%s", o->image);
	if (ok && o->isolation == JAIL_ISOLATION_GVISOR)
		ok = put(r, "--isolation") && put(r, "gvisor");
	if (ok && o->runsc)
		ok = put(r, "--runsc") && put(r, "%s", o->runsc);
	/* the secrets travel as the request's fourth descriptor */
	if (ok && o->egress_secrets_fd >= 0)
		ok = put(r, JAIL_WIRE_SECRETS_OPTION) && put(r, JAIL_WIRE_SECRETS_INDEX);
	return ok;
}

/* A setup error found on our side: a verdict saying so, exit 1. */
static int
local_setup_error(int verdict_fd, const char *msg)
{
	JailResult	res;

	memset(&res, 0, sizeof(res));
	jail_verdict_setup_error(&res, msg);
	jail_warn("setup error: %s", msg);
	if (jail_write_verdict(verdict_fd, &res) < 0)
		fprintf(stderr, "sandbox-jail: could not write the verdict: %s\n", strerror(errno));
	return JAIL_EXIT_SETUP;
}

/*
 * `--client SOCKET <run options>`: the socket path and the run options,
 * parsed as if they were the whole command line.  -1 to go on, or the
 * exit code to end with (usage error, --help).
 */
static int
client_options(int argc, char **argv, const char **path, JailOptions *opts)
{
	char	  **rargv;
	int			rc;

	if (argc < 3 || argv[2][0] == '\0' || argv[2][0] == '-')
	{
		fprintf(stderr, "sandbox-jail: --client needs a socket path\n");
		jail_usage(stderr);
		return JAIL_EXIT_USAGE;
	}
	*path = argv[2];
	if (strlen(*path) >= sizeof(((struct sockaddr_un *) 0)->sun_path))
	{
		fprintf(stderr, "sandbox-jail: socket path too long: %s\n", *path);
		jail_usage(stderr);
		return JAIL_EXIT_USAGE;
	}
	rargv = calloc(argc, sizeof(char *));
	if (!rargv)
		return JAIL_EXIT_SETUP;
	rargv[0] = argv[0];
	for (int i = 3; i < argc; i++)
		rargv[i - 2] = argv[i];
	rc = jail_parse_command_line(argc - 2, rargv, opts);
	free(rargv);				/* opts points into argv's strings, not here */
	return rc;
}

/*
 * The launcher has its own working directory: send an absolute workspace
 * path, but never resolve it (its last component must still be checked
 * for being a symlink, on the other side).
 */
static const char *
absolute_workspace(const char *workspace, char *buf, size_t len)
{
	char		cwd[2048];

	if (workspace[0] == '/')
		return workspace;
	if (!getcwd(cwd, sizeof(cwd)) ||
		(size_t) snprintf(buf, len, "%s/%s", cwd, workspace) >= len)
		return NULL;
	return buf;
}

/* The code (none for --exec), in a memfd for the request; -1 with err. */
static int
code_memfd(const JailOptions *opts, char *err)
{
	size_t		code_len = 0;
	char	   *code = jail_load_code(opts, &code_len, err);
	int			memfd;

	if (err[0])
		return -1;
	memfd = memfd_create("sandbox-code", MFD_CLOEXEC);
	if (memfd < 0 || jail_write_all(memfd, code, code_len) < 0)
	{
		jail_seterr(err, "memfd for the code: %s", strerror(errno));
		free(code);
		if (memfd >= 0)
			close(memfd);
		return -1;
	}
	free(code);
	return memfd;
}

/*
 * Where to send the run: to a waiting interpreter of its language if the
 * launcher keeps warm ones and one is free (wire_protocol.h: taken from
 * the page, so the warm socket is sure to answer), else to SOCKET.  An
 * egress run never takes one: its sandbox is cloned for it (the proxy's
 * socket is made by its init), so a claimed interpreter would only be
 * thrown away.
 */
static const char *
warm_socket(const char *path, const JailOptions *o)
{
	static char buf[sizeof(((struct sockaddr_un *) 0)->sun_path)];
	JailWarmLang lang = o->language == LANG_PYTHON ? JAIL_WARM_PYTHON : JAIL_WARM_NODE;
	JailWarmPage *page;
	bool		claimed;

	if ((o->language != LANG_PYTHON && o->language != LANG_NODE) || o->egress_policy)
		return path;
	page = jail_wire_warm_map(path, true);
	claimed = jail_wire_warm_claim(page, lang);
	if (page)
		munmap(page, sizeof(*page));
	if (!claimed ||
		snprintf(buf, sizeof(buf), "%s%s", path, JAIL_WARM_SOCK_SUFFIX[lang]) >= (int) sizeof(buf))
		return path;
	return buf;
}

/*
 * Connect, then let SIGTERM & co. half-close the connection (on_stop),
 * which the worker takes as "stop the run".  The socket, or -1 with err.
 */
static int
connect_launcher(const char *path, char *err)
{
	struct sockaddr_un sa;
	struct sigaction sact;
	int			sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, path);
	if (sock < 0 || connect(sock, (struct sockaddr *) &sa, sizeof(sa)) < 0)
	{
		jail_seterr(err, "cannot reach the launcher at %s: %s", path, strerror(errno));
		return -1;
	}
	client_sock = sock;
	memset(&sact, 0, sizeof(sact));
	sact.sa_handler = on_stop;	/* no SA_RESTART needed: recv retries */
	sigaction(SIGTERM, &sact, NULL);
	sigaction(SIGINT, &sact, NULL);
	sigaction(SIGHUP, &sact, NULL);
	sigaction(SIGQUIT, &sact, NULL);
	return sock;
}

/*
 * The launcher's answer (wire_protocol.h): the verdict goes where the
 * caller asked, its rc is our exit code.
 */
static int
take_answer(int sock, int verdict_fd)
{
	static char resp[JAIL_WIRE_MAX];
	char		err[JAIL_ERRLEN] = "";
	const char *field[JAIL_WIRE_ANSWER_NFIELDS];
	const char *rc;
	const char *verdict;
	const char *msg;
	int			nfds;
	bool		truncated;
	ssize_t		n = jail_wire_recv(sock, resp, sizeof(resp), NULL, 0, &nfds, &truncated);

	if (n <= 0)
	{
		jail_seterr(err, "the launcher closed the connection without a verdict%s%s",
					n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
		return local_setup_error(verdict_fd, err);
	}
	if (truncated || !jail_wire_split_answer(resp, n, field) ||
		strlen(rc = field[JAIL_WIRE_ANSWER_RC]) != 1 || rc[0] < '0' || rc[0] > '2')
		return local_setup_error(verdict_fd, "malformed answer from the launcher");
	verdict = field[JAIL_WIRE_ANSWER_VERDICT];
	msg = field[JAIL_WIRE_ANSWER_MESSAGE];
	if (rc[0] - '0' == JAIL_WIRE_RC_REFUSED)
	{
		fprintf(stderr, "sandbox-jail: the launcher refused the request: %s\n", msg);
		return JAIL_EXIT_USAGE;
	}
	if (rc[0] - '0' == JAIL_EXIT_SETUP && msg[0])
		jail_warn("setup error: %s", msg);
	if (jail_write_all(verdict_fd, verdict, strlen(verdict)) < 0)
	{
		fprintf(stderr, "sandbox-jail: could not write the verdict: %s\n", strerror(errno));
		return JAIL_EXIT_SETUP;
	}
	return rc[0] - '0';
}

/* `sandbox-jail --client SOCKET ...`: the exit code, for main. */
int
jail_client_main(int argc, char **argv)
{
	static char req[JAIL_WIRE_MAX];
	JailWireRequest r;
	const char *path;
	JailOptions opts;
	char		err[JAIL_ERRLEN] = "";
	char		wsbuf[4096];
	const char *workspace;
	int			verdict_fd;
	int			rc;
	int			fds[JAIL_WIRE_NFDS_MAX];

	if ((rc = client_options(argc, argv, &path, &opts)) >= 0)
		return rc;
	jail_quiet = opts.quiet;

	/* as the one-shot jail: die with our caller (and so end the run) */
	if (jail_die_with_parent() < 0)
		return JAIL_EXIT_SETUP;
	signal(SIGPIPE, SIG_IGN);
	verdict_fd = jail_open_verdict(&opts, &rc);
	if (verdict_fd < 0)
		return rc;

	workspace = absolute_workspace(opts.workspace, wsbuf, sizeof(wsbuf));
	if (!workspace)
		return local_setup_error(verdict_fd, "workspace path could not be made absolute");
	if ((fds[JAIL_WIRE_FD_CODE] = code_memfd(&opts, err)) < 0)
		return local_setup_error(verdict_fd, err);
	jail_wire_request_init(&r, req);
	if (!build_request(&opts, workspace, &r))
		return local_setup_error(verdict_fd, "request too large");
	if (connect_launcher(warm_socket(path, &opts), err) < 0)
		return local_setup_error(verdict_fd, err);
	fds[JAIL_WIRE_FD_STDOUT] = STDOUT_FILENO;
	fds[JAIL_WIRE_FD_STDERR] = STDERR_FILENO;
	fds[JAIL_WIRE_FD_SECRETS] = opts.egress_secrets_fd;
	if (jail_wire_send(client_sock, r.buf, r.len, fds,
					   opts.egress_secrets_fd >= 0 ? JAIL_WIRE_NFDS_MAX : JAIL_WIRE_NFDS) < 0)
	{
		jail_seterr(err, "could not send the request: %s", strerror(errno));
		return local_setup_error(verdict_fd, err);
	}
	close(fds[JAIL_WIRE_FD_CODE]);
	return take_answer(client_sock, verdict_fd);
}
