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

enum
{
	OPT_LANGUAGE = 256,
	OPT_EXEC,
	OPT_CODE_FILE,
	OPT_WORKSPACE,
	OPT_RO_BIND,
	OPT_WALL,
	OPT_CPU,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_OUTPUT,
	OPT_FSIZE,
	OPT_WSIZE,
	OPT_WENTRIES,
	OPT_TMPSIZE,
	OPT_VERDICT_FD,
	OPT_VERDICT_FILE,
	OPT_CGROUP_PARENT,
	OPT_REQUIRE_CGROUP,
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
			"       sandbox-jail --serve SOCKET [--pool N] [--cgroup-parent DIR]\n"
			"         [--require-cgroup] [--keep-running] [--quiet]\n"
			"       sandbox-jail --client SOCKET <run options as above>\n"
			"exit: 0 payload ran (see verdict), 1 setup error, 2 usage error\n");
}

/* "123", "64K", "512M", "2G"; rejects negatives, junk and overflow. */
static int
parse_size(const char *s, uint64_t *out)
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

int
jail_parse_options(int argc, char **argv, JailOptions *o, bool allow_help)
{
	int			c;
	bool		have_lang = false;
	bool		have_cpu = false;

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

	jail_option_error[0] = '\0';
	opterr = 0;
	optind = 0;					/* full rescan: the launcher parses many times */
	while ((c = getopt_long(argc, argv, "", long_opts, NULL)) != -1)
	{
		switch (c)
		{
			case OPT_LANGUAGE:
				if (strcmp(optarg, "python") == 0)
					o->language = LANG_PYTHON;
				else if (strcmp(optarg, "node") == 0)
					o->language = LANG_NODE;
				else if (strcmp(optarg, "shell") == 0)
					o->language = LANG_SHELL;
				else
					BAD("unknown language \"%s\" (python, node or shell)", optarg);
				if (have_lang)
					BAD("--language or --exec, once");
				have_lang = true;
				break;
			case OPT_EXEC:

				/*
				 * A program that exists inside the sandbox, run with no
				 * arguments (nothing of the caller's command line reaches
				 * its argv).  Resolved only at execve, inside.
				 */
				if (!valid_inner_path(optarg))
					BAD("--exec wants an absolute sandbox path without . or .., got \"%s\"", optarg);
				if (have_lang)
					BAD("--language or --exec, once");
				o->language = LANG_EXEC;
				o->exec_path = optarg;
				have_lang = true;
				break;
			case OPT_CODE_FILE:
				o->code_file = optarg;
				break;
			case OPT_WORKSPACE:
				o->workspace = optarg;
				break;
			case OPT_RO_BIND:
				{
					char	   *colon = strchr(optarg, ':');

					if (o->nbinds >= JAIL_MAX_BINDS)
						BAD("too many --ro-bind (at most %d)", JAIL_MAX_BINDS);
					if (!colon || colon == optarg)
						BAD("--ro-bind wants SRC:DST, got \"%s\"", optarg);
					*colon = '\0';
					if (optarg[0] != '/')
						BAD("--ro-bind source must be absolute: \"%s\"", optarg);
					if (!valid_inner_path(colon + 1) ||
						reserved_inner_path(colon + 1))
						BAD("--ro-bind destination \"%s\" is not a usable sandbox path", colon + 1);
					o->binds[o->nbinds].src = optarg;
					o->binds[o->nbinds].dst = colon + 1;
					o->nbinds++;
					break;
				}
			case OPT_WALL:
				if (parse_seconds(optarg, &o->wall_ms) < 0)
					BAD("bad --wall-time \"%s\"", optarg);
				break;
			case OPT_CPU:
				if (parse_seconds(optarg, &o->cpu_ms) < 0)
					BAD("bad --cpu-time \"%s\"", optarg);
				have_cpu = true;
				break;
			case OPT_MEMORY:
				if (parse_size(optarg, &o->memory_bytes) < 0 ||
					o->memory_bytes < 4 * MiB)
					BAD("bad --memory \"%s\" (at least 4M)", optarg);
				break;
			case OPT_PIDS:
				if (parse_count(optarg, &o->pids) < 0 || o->pids < 2 ||
					o->pids > 65536)
					BAD("bad --pids \"%s\" (2..65536)", optarg);
				break;
			case OPT_OUTPUT:
				if (parse_size(optarg, &o->output_limit) < 0)
					BAD("bad --output-limit \"%s\"", optarg);
				break;
			case OPT_FSIZE:
				if (parse_size(optarg, &o->file_size) < 0)
					BAD("bad --file-size \"%s\"", optarg);
				break;
			case OPT_WSIZE:
				if (parse_size(optarg, &o->workspace_size) < 0)
					BAD("bad --workspace-size \"%s\"", optarg);
				break;
			case OPT_WENTRIES:
				if (parse_count(optarg, &o->workspace_entries) < 0 || o->workspace_entries < 1 ||
					o->workspace_entries > JAIL_MAX_WORKSPACE_ENTRIES)
					BAD("bad --workspace-entries \"%s\" (1 to %d)", optarg,
						JAIL_MAX_WORKSPACE_ENTRIES);
				break;
			case OPT_TMPSIZE:
				if (parse_size(optarg, &o->tmp_size) < 0 ||
					o->tmp_size < 64 * 1024)
					BAD("bad --tmp-size \"%s\" (at least 64K)", optarg);
				break;
			case OPT_VERDICT_FD:
				{
					uint64_t	fd;

					if (parse_count(optarg, &fd) < 0 || fd > 1 << 20)
						BAD("bad --verdict-fd \"%s\"", optarg);
					o->verdict_fd = (int) fd;
					break;
				}
			case OPT_VERDICT_FILE:
				o->verdict_file = optarg;
				break;
			case OPT_CGROUP_PARENT:
				o->cgroup_parent = optarg;
				break;
			case OPT_REQUIRE_CGROUP:
				o->require_cgroup = true;
				break;
			case OPT_QUIET:
				o->quiet = true;
				break;
			case OPT_HELP:
				if (!allow_help)
					BAD("--help is not a run option");
				jail_usage(stdout);
				exit(0);
			default:
				if (optopt)
					BAD("option needs an argument or is unknown: %s", argv[optind - 1]);
				BAD("unknown option: %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		BAD("unexpected argument \"%s\" (code goes in --code-file or stdin)", argv[optind]);
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
	if (!have_cpu)
		o->cpu_ms = o->wall_ms;
	return 0;
}
