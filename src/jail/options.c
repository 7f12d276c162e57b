/*-------------------------------------------------------------------------
 *
 * options.c
 *	  Command line of sandbox-jail.  Parses into a JailOptions and nothing
 *	  else: no file is opened here, so a usage error never has side effects.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jail.h"

#define MiB (1024ULL * 1024)

/* In groups, in this order: jail_parse_options dispatches by range. */
enum
{
	/* what runs: parse_program */
	OPT_LANGUAGE = 256,
	OPT_EXEC,
	OPT_CODE_FILE,
	OPT_WORKSPACE,
	OPT_RO_BIND,
	/* the limits: parse_limit */
	OPT_WALL,
	OPT_CPU,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_OUTPUT,
	OPT_FSIZE,
	OPT_WSIZE,
	OPT_WENTRIES,
	OPT_TMPSIZE,
	/* the host side: parse_host */
	OPT_VERDICT_FD,
	OPT_VERDICT_FILE,
	OPT_CGROUP_PARENT,
	OPT_REQUIRE_CGROUP,
	OPT_EGRESS_POLICY,
	OPT_EGRESS_LOG,
	OPT_EGRESS_RESOLVER,
	OPT_EGRESS_CA,
	OPT_EGRESS_PROXY,
	OPT_IMAGE,
	OPT_EGRESS_SECRETS_FD,
	OPT_ISOLATION,
	OPT_RUNSC,
	OPT_QUIET,
	OPT_HELP
};

static const struct option long_opts[] = {
	{"language", required_argument, NULL, OPT_LANGUAGE},
	{"exec", required_argument, NULL, OPT_EXEC},
	{"code-file", required_argument, NULL, OPT_CODE_FILE},
	{"workspace", required_argument, NULL, OPT_WORKSPACE},
	{"ro-bind", required_argument, NULL, OPT_RO_BIND},
	{"wall-time", required_argument, NULL, OPT_WALL},
	{"cpu-time", required_argument, NULL, OPT_CPU},
	{"memory", required_argument, NULL, OPT_MEMORY},
	{"pids", required_argument, NULL, OPT_PIDS},
	{"output-limit", required_argument, NULL, OPT_OUTPUT},
	{"file-size", required_argument, NULL, OPT_FSIZE},
	{"workspace-size", required_argument, NULL, OPT_WSIZE},
	{"workspace-entries", required_argument, NULL, OPT_WENTRIES},
	{"tmp-size", required_argument, NULL, OPT_TMPSIZE},
	{"verdict-fd", required_argument, NULL, OPT_VERDICT_FD},
	{"verdict-file", required_argument, NULL, OPT_VERDICT_FILE},
	{"cgroup-parent", required_argument, NULL, OPT_CGROUP_PARENT},
	{"require-cgroup", no_argument, NULL, OPT_REQUIRE_CGROUP},
	{"egress-policy", required_argument, NULL, OPT_EGRESS_POLICY},
	{"egress-log", required_argument, NULL, OPT_EGRESS_LOG},
	{"egress-resolver", required_argument, NULL, OPT_EGRESS_RESOLVER},
	{"egress-ca", required_argument, NULL, OPT_EGRESS_CA},
	{"egress-proxy", required_argument, NULL, OPT_EGRESS_PROXY},
	{"image", required_argument, NULL, OPT_IMAGE},
	{"egress-secrets-fd", required_argument, NULL, OPT_EGRESS_SECRETS_FD},
	{"isolation", required_argument, NULL, OPT_ISOLATION},
	{"runsc", required_argument, NULL, OPT_RUNSC},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"help", no_argument, NULL, OPT_HELP},
	{NULL, 0, NULL, 0}
};

void
jail_usage(FILE *out)
{
	fprintf(out,
			"usage: sandbox-jail --language python|node|shell --workspace DIR\n"
			"         [--code-file F (default: stdin)] [--ro-bind SRC:DST ...]\n"
			"         (--exec /PATH instead of --language: run that program of\n"
			"         the sandbox, without arguments; no code is read)\n"
			"         [--wall-time SEC] [--cpu-time SEC] [--memory BYTES|NNNK|NNNM|NNNG]\n"
			"         [--pids N] [--output-limit BYTES] [--file-size BYTES]\n"
			"         [--workspace-size BYTES] [--workspace-entries N] [--tmp-size BYTES]\n"
			"         [--verdict-fd N | --verdict-file PATH]\n"
			"         [--cgroup-parent DIR] [--require-cgroup] [--quiet]\n"
			"         [--egress-policy FILE [--egress-log FILE] [--egress-resolver ADDR[:PORT]]\n"
			"          [--egress-ca PEM] [--egress-proxy PATH] [--egress-secrets-fd N]]\n"
			"         (docs/egress.md, docs/secrets.md)\n"
			"         [--image DIR]  (an image's NAME@DIGEST directory: docs/images.md)\n"
			"         [--isolation namespaces|gvisor [--runsc PATH]]  (docs/jail.md)\n"
			"       sandbox-jail --serve SOCKET [--pool N] [--cgroup-parent DIR]\n"
			"         [--image DIR]\n"
			"         [--require-cgroup] [--keep-running] [--quiet]\n"
			"       sandbox-jail --client SOCKET <run options as above>\n"
			"exit: 0 payload ran (see verdict), 1 setup error, 2 usage error\n");
}

/* "123", "64K", "512M", "2G"; rejects negatives, junk and overflow. */
int
jail_parse_size(const char *s, uint64_t *out)
{
	char	   *end;
	unsigned long long v;
	uint64_t	mult = 1;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	if (*end)
	{
		switch (*end)
		{
			case 'k':
			case 'K':
				mult = 1024;
				break;
			case 'm':
			case 'M':
				mult = MiB;
				break;
			case 'g':
			case 'G':
				mult = 1024 * MiB;
				break;
			default:
				return -1;
		}
		end++;
		if (*end == 'B' || *end == 'b')
			end++;
		if (*end)
			return -1;
	}
	if (v > UINT64_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

/* Seconds, possibly fractional ("0.5"); result in milliseconds. */
static int
parse_seconds(const char *s, uint64_t *ms)
{
	char	   *end;
	double		v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || v <= 0 || v > 86400.0 * 7)
		return -1;
	*ms = (uint64_t) (v * 1000.0 + 0.5);
	return *ms > 0 ? 0 : -1;
}

static int
parse_count(const char *s, uint64_t *out)
{
	char	   *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	*out = strtoull(s, &end, 10);
	return (errno || *end) ? -1 : 0;
}

/* A sandbox path: absolute, no "..", no "//", not the root itself. */
static bool
valid_inner_path(const char *p)
{
	const char *c;

	if (p[0] != '/' || p[1] == '\0' || strlen(p) > 255)
		return false;
	if (strstr(p, "//") || strstr(p, "/./") || strstr(p, "/../"))
		return false;
	c = strrchr(p, '/');
	if (strcmp(c, "/.") == 0 || strcmp(c, "/..") == 0 || c[1] == '\0')
		return false;
	return true;
}

static bool
reserved_inner_path(const char *p)
{
	static const char *const reserved[] = {
		"/proc", "/dev", "/tmp", "/workspace", "/usr", "/etc", "/bin",
		"/sbin", "/lib", "/lib64", "/sandbox", NULL
	};

	for (int i = 0; reserved[i]; i++)
	{
		size_t		n = strlen(reserved[i]);

		if (strncmp(p, reserved[i], n) == 0 && (p[n] == '\0' || p[n] == '/'))
			return true;
	}
	return false;
}

/*
 * The reason of the last refusal; the caller decides where it goes (the
 * command line prints it, the launcher sends it back to its client).
 */
char		jail_option_error[JAIL_ERRLEN];

#define BAD(...) do { snprintf(jail_option_error, sizeof(jail_option_error), \
		__VA_ARGS__); return -1; } while (0)

/* The defaults of every run option (docs/jail.md). */
static void
set_defaults(JailOptions *o)
{
	memset(o, 0, sizeof(*o));
	o->wall_ms = 30 * 1000;
	o->memory_bytes = 512 * MiB;
	o->pids = 64;
	o->output_limit = 1 * MiB;
	o->file_size = 256 * MiB;
	o->workspace_size = 1024 * MiB;
	o->workspace_entries = JAIL_DEFAULT_WORKSPACE_ENTRIES;
	o->tmp_size = JAIL_DEFAULT_TMP_SIZE;
	o->verdict_fd = -1;
	o->egress_secrets_fd = -1;
}

/* --ro-bind SRC:DST; writes into arg (the colon). */
static int
parse_bind(char *arg, JailOptions *o)
{
	char	   *colon = strchr(arg, ':');

	if (o->nbinds >= JAIL_MAX_BINDS)
		BAD("too many --ro-bind (at most %d)", JAIL_MAX_BINDS);
	if (!colon || colon == arg)
		BAD("--ro-bind wants SRC:DST, got \"%s\"", arg);
	*colon = '\0';
	if (arg[0] != '/')
		BAD("--ro-bind source must be absolute: \"%s\"", arg);
	if (!valid_inner_path(colon + 1) ||
		reserved_inner_path(colon + 1))
		BAD("--ro-bind destination \"%s\" is not a usable sandbox path", colon + 1);
	o->binds[o->nbinds].src = arg;
	o->binds[o->nbinds].dst = colon + 1;
	o->nbinds++;
	return 0;
}

/* What runs, and on what: --language, --exec, --code-file, --workspace, --ro-bind. */
static int
parse_program(int c, char *arg, JailOptions *o, bool *have_lang)
{
	switch (c)
	{
		case OPT_LANGUAGE:
			if (strcmp(arg, "python") == 0)
				o->language = LANG_PYTHON;
			else if (strcmp(arg, "node") == 0)
				o->language = LANG_NODE;
			else if (strcmp(arg, "shell") == 0)
				o->language = LANG_SHELL;
			else
				BAD("unknown language \"%s\" (python, node or shell)", arg);
			if (*have_lang)
				BAD("--language or --exec, once");
			*have_lang = true;
			return 0;
		case OPT_EXEC:

			/*
			 * A program that exists inside the sandbox, run with no
			 * arguments (nothing of the caller's command line reaches its
			 * argv).  Resolved only at execve, inside.
			 */
			if (!valid_inner_path(arg))
				BAD("--exec wants an absolute sandbox path without . or .., got \"%s\"", arg);
			if (*have_lang)
				BAD("--language or --exec, once");
			o->language = LANG_EXEC;
			o->exec_path = arg;
			*have_lang = true;
			return 0;
		case OPT_CODE_FILE:
			o->code_file = arg;
			return 0;
		case OPT_WORKSPACE:
			o->workspace = arg;
			return 0;
		case OPT_RO_BIND:
			return parse_bind(arg, o);
	}
	BAD("unknown option");
}

/* The limits: --wall-time ... --tmp-size. */
static int
parse_limit(int c, const char *arg, JailOptions *o, bool *have_cpu)
{
	switch (c)
	{
		case OPT_WALL:
			if (parse_seconds(arg, &o->wall_ms) < 0)
				BAD("bad --wall-time \"%s\"", arg);
			return 0;
		case OPT_CPU:
			if (parse_seconds(arg, &o->cpu_ms) < 0)
				BAD("bad --cpu-time \"%s\"", arg);
			*have_cpu = true;
			return 0;
		case OPT_MEMORY:
			if (jail_parse_size(arg, &o->memory_bytes) < 0 || o->memory_bytes < 4 * MiB)
				BAD("bad --memory \"%s\" (at least 4M)", arg);
			return 0;
		case OPT_PIDS:
			if (parse_count(arg, &o->pids) < 0 || o->pids < 2 || o->pids > 65536)
				BAD("bad --pids \"%s\" (2..65536)", arg);
			return 0;
		case OPT_OUTPUT:
			if (jail_parse_size(arg, &o->output_limit) < 0)
				BAD("bad --output-limit \"%s\"", arg);
			return 0;
		case OPT_FSIZE:
			if (jail_parse_size(arg, &o->file_size) < 0)
				BAD("bad --file-size \"%s\"", arg);
			return 0;
		case OPT_WSIZE:
			if (jail_parse_size(arg, &o->workspace_size) < 0)
				BAD("bad --workspace-size \"%s\"", arg);
			return 0;
		case OPT_WENTRIES:
			if (parse_count(arg, &o->workspace_entries) < 0 || o->workspace_entries < 1 ||
				o->workspace_entries > JAIL_MAX_WORKSPACE_ENTRIES)
				BAD("bad --workspace-entries \"%s\" (1 to %d)", arg,
					JAIL_MAX_WORKSPACE_ENTRIES);
			return 0;
		case OPT_TMPSIZE:
			if (jail_parse_size(arg, &o->tmp_size) < 0 || o->tmp_size < 64 * 1024)
				BAD("bad --tmp-size \"%s\" (at least 64K)", arg);
			return 0;
	}
	BAD("unknown option");
}

/* Where the verdict goes, the cgroup, the diagnostics. */
static int
parse_host(int c, char *arg, JailOptions *o)
{
	uint64_t	fd;

	switch (c)
	{
		case OPT_VERDICT_FD:
			if (parse_count(arg, &fd) < 0 || fd > 1 << 20)
				BAD("bad --verdict-fd \"%s\"", arg);
			o->verdict_fd = (int) fd;
			return 0;
		case OPT_VERDICT_FILE:
			o->verdict_file = arg;
			return 0;
		case OPT_CGROUP_PARENT:
			o->cgroup_parent = arg;
			return 0;
		case OPT_REQUIRE_CGROUP:
			o->require_cgroup = true;
			return 0;
		case OPT_EGRESS_POLICY:
			o->egress_policy = arg;
			return 0;
		case OPT_EGRESS_LOG:
			o->egress_log = arg;
			return 0;
		case OPT_EGRESS_RESOLVER:
			o->egress_resolver = arg;
			return 0;
		case OPT_EGRESS_CA:
			o->egress_ca = arg;
			return 0;
		case OPT_IMAGE:
			if (arg[0] != '/')
				BAD("--image must be an absolute path");
			o->image = arg;
			return 0;
		case OPT_EGRESS_PROXY:
			if (arg[0] != '/')
				BAD("--egress-proxy must be an absolute path");
			o->egress_proxy = arg;
			return 0;
		case OPT_EGRESS_SECRETS_FD:
			if (parse_count(arg, &fd) < 0 || fd < 3 || fd > 1 << 20)
				BAD("bad --egress-secrets-fd \"%s\"", arg);
			o->egress_secrets_fd = (int) fd;
			return 0;
		case OPT_ISOLATION:
			if (strcmp(arg, "namespaces") == 0)
				o->isolation = JAIL_ISOLATION_NAMESPACES;
			else if (strcmp(arg, "gvisor") == 0)
				o->isolation = JAIL_ISOLATION_GVISOR;
			else
				BAD("--isolation is namespaces or gvisor, got \"%s\"", arg);
			return 0;
		case OPT_RUNSC:
			if (arg[0] != '/')
				BAD("--runsc must be an absolute path");
			o->runsc = arg;
			return 0;
		case OPT_QUIET:
			o->quiet = true;
			return 0;
	}
	BAD("unknown option");
}

/* What no single option can say wrong: requirements and exclusions. */
static int
check_options(JailOptions *o, bool have_lang, bool have_cpu)
{
	if (!have_lang)
		BAD("--language (or --exec) is required");
	if (o->language == LANG_EXEC && o->code_file)
		BAD("--exec runs no code: --code-file is not allowed with it");
	if (!o->workspace)
		BAD("--workspace is required");
	if (o->verdict_fd >= 0 && o->verdict_file)
		BAD("--verdict-fd and --verdict-file are exclusive");
	if (o->verdict_fd >= 0 && o->verdict_fd <= 1)
		BAD("--verdict-fd must not be stdin or stdout");
	if (!o->egress_policy && (o->egress_log || o->egress_resolver || o->egress_ca ||
							  o->egress_proxy || o->egress_secrets_fd >= 0))
		BAD("--egress-log, --egress-resolver, --egress-ca, --egress-proxy and --egress-secrets-fd need --egress-policy");
	if (o->egress_secrets_fd >= 0 && o->egress_secrets_fd == o->verdict_fd)
		BAD("--egress-secrets-fd and --verdict-fd must differ");
	if (o->runsc && o->isolation != JAIL_ISOLATION_GVISOR)
		BAD("--runsc needs --isolation gvisor");
	if (o->isolation == JAIL_ISOLATION_GVISOR && o->egress_secrets_fd >= 0)
		BAD("--egress-secrets-fd is not available with --isolation gvisor (docs/jail.md, \"The gvisor class\")");
	if (!have_cpu)
		o->cpu_ms = o->wall_ms;
	return 0;
}

/*
 * Parse a command line (argv[0] is skipped) into o.  0 on success; -1 on
 * a usage error, its reason in jail_option_error; JAIL_OPTIONS_HELP for
 * --help when allow_help (the caller prints the usage: no side effects
 * here).  Strings in o point into argv.
 */
int
jail_parse_options(int argc, char **argv, JailOptions *o, bool allow_help)
{
	int			c;
	bool		have_lang = false;
	bool		have_cpu = false;

	set_defaults(o);
	jail_option_error[0] = '\0';
	opterr = 0;
	optind = 0;					/* full rescan: the launcher parses many times */
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1)
	{
		int			rc;

		switch (c)
		{
			case OPT_LANGUAGE ... OPT_RO_BIND:
				rc = parse_program(c, optarg, o, &have_lang);
				break;
			case OPT_WALL ... OPT_TMPSIZE:
				rc = parse_limit(c, optarg, o, &have_cpu);
				break;
			case OPT_VERDICT_FD ... OPT_QUIET:
				rc = parse_host(c, optarg, o);
				break;
			case OPT_HELP:
				if (!allow_help)
					BAD("--help is not a run option");
				return JAIL_OPTIONS_HELP;
			default:
				if (optopt)
					BAD("option needs an argument or is unknown: %s", argv[optind - 1]);
				BAD("unknown option: %s", argv[optind - 1]);
		}
		if (rc < 0)
			return -1;
	}
	if (optind < argc)
		BAD("unexpected argument \"%s\" (code goes in --code-file or stdin)", argv[optind]);
	return check_options(o, have_lang, have_cpu);
}

/*
 * jail_parse_options for a command line (one-shot, --client): on --help
 * the usage goes to stdout; on a usage error the reason and the usage to
 * stderr.  -1 to go on, or the exit code to end with.
 */
int
jail_parse_command_line(int argc, char **argv, JailOptions *opts)
{
	int			rc = jail_parse_options(argc, argv, opts, true);

	if (rc == JAIL_OPTIONS_HELP)
	{
		jail_usage(stdout);
		return JAIL_EXIT_OK;
	}
	if (rc < 0)
	{
		fprintf(stderr, "sandbox-jail: %s\n", jail_option_error);
		jail_usage(stderr);
		return JAIL_EXIT_USAGE;
	}
	return -1;
}
