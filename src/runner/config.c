/*-------------------------------------------------------------------------
 *
 * config.c
 *		The runner's configuration file: read at start and again on SIGHUP
 *		(a file that does not parse keeps the configuration as it was).
 *
 * One setting a line, `name = value`, `#` to the end of a line is a
 * comment, a value may be 'quoted' ('' is a quote inside), as in
 * postgresql.conf.  A size takes kB, MB or GB, a time s, min or h; a bare
 * number is in the setting's own unit.  docs/runners.md lists the
 * settings; sandbox-runner.conf.sample has each with its default.
 *
 * The local runner's file is written by the supervisor from the sandbox.*
 * settings (src/supervisor.c) and its names are those of this file, so a
 * message names a setting as the operator sets it (runner_setting_name()).
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <ctype.h>
#include <unistd.h>

RunnerConfig runner_conf;
bool		runner_local = false;

typedef enum ConfUnit
{
	UNIT_NONE,
	UNIT_MB,					/* the value is in MB */
	UNIT_KB,					/* in kB */
	UNIT_S,						/* in seconds */
	UNIT_MS						/* in milliseconds */
} ConfUnit;

typedef enum ConfKind
{
	CONF_STRING,
	CONF_INT,
	CONF_BOOL,
	CONF_LIST					/* paths separated by ':' (as PATH) */
} ConfKind;

typedef struct ConfVar
{
	const char *name;
	const char *local_name;		/* the sandbox.* setting it comes from */
	ConfKind	kind;
	ConfUnit	unit;
	int			min;
	int			max;
	size_t		offset;
} ConfVar;

#define OFF(f) offsetof(RunnerConfig, f)

static const ConfVar conf_vars[] = {
	{"conninfo", "sandbox.local_runner_conninfo", CONF_STRING, UNIT_NONE, 0, 0, OFF(conninfo)},
	{"name", NULL, CONF_STRING, UNIT_NONE, 0, 0, OFF(name)},
	{"slots", "sandbox.max_concurrent_runs", CONF_INT, UNIT_NONE, 0, RUNNER_MAX_SLOTS, OFF(slots)},
	{"work_dir", "sandbox.work_dir", CONF_STRING, UNIT_NONE, 0, 0, OFF(work_dir)},
	{"run_dir", NULL, CONF_STRING, UNIT_NONE, 0, 0, OFF(run_dir)},
	{"jail_path", "sandbox.jail_path", CONF_STRING, UNIT_NONE, 0, 0, OFF(jail_path)},
	{"jail_launcher", "sandbox.jail_launcher", CONF_BOOL, UNIT_NONE, 0, 0, OFF(jail_launcher)},
	{"require_cgroup", "sandbox.require_cgroup", CONF_BOOL, UNIT_NONE, 0, 0, OFF(require_cgroup)},
	{"workspace_size", "sandbox.workspace_size", CONF_INT, UNIT_MB, 1, 1024 * 1024, OFF(workspace_size_mb)},
	{"workspace_entries", "sandbox.workspace_entries", CONF_INT, UNIT_NONE, 1, 1000000, OFF(workspace_entries)},
	{"output_limit", "sandbox.output_limit", CONF_INT, UNIT_KB, 1, 1024 * 1024, OFF(output_limit_kb)},
	{"default_wall_time", "sandbox.default_wall_time", CONF_INT, UNIT_S, 1, 86400, OFF(default_wall_time_s)},
	{"max_wall_time", "sandbox.max_wall_time", CONF_INT, UNIT_S, 1, 86400, OFF(max_wall_time_s)},
	{"default_memory", "sandbox.default_memory", CONF_INT, UNIT_MB, 16, 1024 * 1024, OFF(default_memory_mb)},
	{"max_memory", "sandbox.max_memory", CONF_INT, UNIT_MB, 16, 1024 * 1024, OFF(max_memory_mb)},
	{"default_pids", "sandbox.default_pids", CONF_INT, UNIT_NONE, 4, 4096, OFF(default_pids)},
	{"start_report_delay", "sandbox.start_report_delay", CONF_INT, UNIT_MS, 0, 60000, OFF(start_report_delay_ms)},
	{"protect", "sandbox.work_dir_on_data_fs", CONF_LIST, UNIT_NONE, 0, 0, OFF(protect)},
	{"warm_python", "sandbox.warm_python", CONF_INT, UNIT_NONE, 0, JAIL_WARM_MAX, OFF(warm_python)},
	{"warm_node", "sandbox.warm_node", CONF_INT, UNIT_NONE, 0, JAIL_WARM_MAX, OFF(warm_node)},
	{"warm_modules", "sandbox.warm_modules", CONF_STRING, UNIT_NONE, 0, 0, OFF(warm_modules)},
	{"warm_memory", "sandbox.warm_memory", CONF_INT, UNIT_MB, 16, 1024 * 1024, OFF(warm_memory_mb)},
	{"egress_resolver", "sandbox.egress_resolver", CONF_STRING, UNIT_NONE, 0, 0, OFF(egress_resolver)},
	{"egress_ca_file", "sandbox.egress_ca_file", CONF_STRING, UNIT_NONE, 0, 0, OFF(egress_ca_file)},
	{"image_store", "sandbox.image_store", CONF_STRING, UNIT_NONE, 0, 0, OFF(image_store)},
	{"runsc_path", "sandbox.runsc_path", CONF_STRING, UNIT_NONE, 0, 0, OFF(runsc_path)},
	{"secrets_key_file", "sandbox.secrets_key_file", CONF_STRING, UNIT_NONE, 0, 0, OFF(secrets_key_file)},
};

const char *
runner_setting_name(const char *key)
{
	for (size_t i = 0; i < lengthof(conf_vars); i++)
		if (strcmp(conf_vars[i].name, key) == 0)
			return runner_local && conf_vars[i].local_name ? conf_vars[i].local_name
				: conf_vars[i].name;
	return key;
}

/* The sandbox-jail next to this executable (make install puts both in bindir). */
static char *
default_jail_path(void)
{
	char		self[MAXPGPATH];
	ssize_t		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char	   *slash;

	if (n <= 0)
		return pg_strdup("/usr/lib/postgresql/15/bin/sandbox-jail");
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	return psprintf("%s/sandbox-jail", self);
}

void
runner_config_defaults(RunnerConfig *c)
{
	char		host[256] = "runner";

	memset(c, 0, sizeof(*c));
	(void) gethostname(host, sizeof(host) - 1);
	c->conninfo = pg_strdup("");
	c->name = pg_strdup(host);
	c->slots = 4;
	c->work_dir = pg_strdup("/var/lib/sandbox-runner/work");
	c->run_dir = pg_strdup("/run/sandbox-runner");
	c->jail_path = default_jail_path();
	c->jail_launcher = true;
	c->require_cgroup = true;
	c->workspace_size_mb = 256;
	c->workspace_entries = 10000;
	c->output_limit_kb = 1024;
	c->default_wall_time_s = 30;
	c->max_wall_time_s = 300;
	c->default_memory_mb = 512;
	c->max_memory_mb = 2048;
	c->default_pids = 64;
	c->start_report_delay_ms = 20;
	c->warm_python = 2;
	c->warm_node = 1;
	c->warm_modules = pg_strdup("numpy,pandas,requests");
	c->warm_memory_mb = 1024;
	c->egress_resolver = pg_strdup("");
	c->egress_ca_file = pg_strdup("");
	c->image_store = pg_strdup("/var/lib/sandbox-images");
	c->runsc_path = pg_strdup("");
	c->secrets_key_file = pg_strdup("");
}

void
runner_config_free(RunnerConfig *c)
{
	free(c->conninfo);
	free(c->name);
	free(c->work_dir);
	free(c->run_dir);
	free(c->jail_path);
	free(c->egress_resolver);
	free(c->egress_ca_file);
	free(c->image_store);
	free(c->runsc_path);
	free(c->secrets_key_file);
	strlist_free(&c->protect);
	free(c->warm_modules);
	memset(c, 0, sizeof(*c));
}

static bool
parse_bool(const char *v, bool *out)
{
	if (pg_strcasecmp(v, "on") == 0 || pg_strcasecmp(v, "true") == 0 ||
		pg_strcasecmp(v, "yes") == 0 || strcmp(v, "1") == 0)
		*out = true;
	else if (pg_strcasecmp(v, "off") == 0 || pg_strcasecmp(v, "false") == 0 ||
			 pg_strcasecmp(v, "no") == 0 || strcmp(v, "0") == 0)
		*out = false;
	else
		return false;
	return true;
}

/* An integer with an optional unit, in the setting's unit; false if malformed. */
static bool
parse_int(const char *v, ConfUnit unit, int64 *out)
{
	char	   *end;
	int64		n;
	int64		mult = 1,
				div = 1;

	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno || end == v)
		return false;
	while (*end == ' ')
		end++;
	if (*end == '\0')
	{
		*out = n;
		return true;
	}
	if (unit == UNIT_MB || unit == UNIT_KB)
	{
		int64		kb;

		if (strcmp(end, "kB") == 0)
			kb = 1;
		else if (strcmp(end, "MB") == 0)
			kb = 1024;
		else if (strcmp(end, "GB") == 0)
			kb = 1024 * 1024;
		else
			return false;
		if (unit == UNIT_MB)
		{
			mult = kb;
			div = 1024;
		}
		else
			mult = kb;
	}
	else if (unit == UNIT_MS)
	{
		if (strcmp(end, "ms") == 0)
			mult = 1;
		else if (strcmp(end, "s") == 0)
			mult = 1000;
		else
			return false;
	}
	else if (unit == UNIT_S)
	{
		if (strcmp(end, "s") == 0)
			mult = 1;
		else if (strcmp(end, "min") == 0)
			mult = 60;
		else if (strcmp(end, "h") == 0)
			mult = 3600;
		else
			return false;
	}
	else
		return false;
	*out = n * mult / div;
	return true;
}

static bool
set_var(RunnerConfig *c, const ConfVar *var, const char *v, char **err, int line)
{
	char	   *field = (char *) c + var->offset;
	int64		n;

	switch (var->kind)
	{
		case CONF_STRING:
			if (strcmp(var->name, "warm_modules") == 0)
			{
				char		why[256];

				if (!jail_wire_check_modules(v, why, sizeof(why)))
				{
					*err = psprintf("line %d: \"%s\": %s", line, var->name, why);
					return false;
				}
			}
			free(*(char **) field);
			*(char **) field = pg_strdup(v);
			return true;
		case CONF_BOOL:
			if (parse_bool(v, (bool *) field))
				return true;
			*err = psprintf("line %d: \"%s\" wants a boolean (on or off), not \"%s\"", line,
							var->name, v);
			return false;
		case CONF_INT:
			if (!parse_int(v, var->unit, &n) || n < var->min || n > var->max)
			{
				*err = psprintf("line %d: \"%s\" wants an integer from %d to %d%s, not \"%s\"",
								line, var->name, var->min, var->max,
								var->unit == UNIT_MB ? " MB" : var->unit == UNIT_KB ? " kB" :
								var->unit == UNIT_S ? " s" : var->unit == UNIT_MS ? " ms" : "", v);
				return false;
			}
			*(int *) field = (int) n;
			return true;
		case CONF_LIST:
			{
				StrList    *l = (StrList *) field;
				char	   *copy = pg_strdup(v);
				char	   *save = NULL;

				strlist_free(l);
				for (char *t = strtok_r(copy, ":", &save); t; t = strtok_r(NULL, ":", &save))
					strlist_add(l, t);
				free(copy);
				return true;
			}
	}
	return false;
}

/* Split one line into name and value; false for a blank or comment line. */
static bool
split_line(char *s, char **name, char **value, char **err, int line)
{
	char	   *p = s;
	char	   *out;

	while (isspace((unsigned char) *p))
		p++;
	if (*p == '\0' || *p == '#')
		return false;
	*name = p;
	while (*p && (isalnum((unsigned char) *p) || *p == '_'))
		p++;
	out = p;
	while (isspace((unsigned char) *p))
		p++;
	if (*p == '=')
		p++;
	*out = '\0';
	while (isspace((unsigned char) *p))
		p++;
	if (*p == '\'')
	{
		char	   *w = ++p;

		*value = w;
		for (;;)
		{
			if (*p == '\0')
			{
				*err = psprintf("line %d: unterminated quoted value", line);
				return true;
			}
			if (*p == '\'' && p[1] == '\'')
			{
				*w++ = '\'';
				p += 2;
				continue;
			}
			if (*p == '\'')
				break;
			*w++ = *p++;
		}
		*w = '\0';
		return true;
	}
	*value = p;
	while (*p && *p != '#')
		p++;
	while (p > *value && isspace((unsigned char) p[-1]))
		p--;
	*p = '\0';
	return true;
}

/*
 * Read a configuration file into *out (defaults first).  False with *err
 * (malloc'd) when it cannot be read or a line is wrong; *out is then
 * untouched.
 */
bool
runner_config_load(const char *path, RunnerConfig *out, char **err)
{
	FILE	   *f = fopen(path, "r");
	RunnerConfig c;
	char		buf[8192];
	int			line = 0;
	bool		ok = true;

	if (f == NULL)
	{
		*err = psprintf("could not open configuration file \"%s\": %m", path);
		return false;
	}
	runner_config_defaults(&c);
	while (ok && fgets(buf, sizeof(buf), f))
	{
		char	   *name,
				   *value;
		const ConfVar *var = NULL;

		line++;
		buf[strcspn(buf, "\n")] = '\0';
		*err = NULL;
		if (!split_line(buf, &name, &value, err, line))
			continue;
		if (*err)
		{
			ok = false;
			break;
		}
		for (size_t i = 0; i < lengthof(conf_vars) && !var; i++)
			if (strcmp(conf_vars[i].name, name) == 0)
				var = &conf_vars[i];
		if (var == NULL)
		{
			*err = psprintf("line %d: unrecognized setting \"%s\"", line, name);
			ok = false;
			break;
		}
		ok = set_var(&c, var, value, err, line);
	}
	fclose(f);
	if (ok && (c.work_dir[0] != '/' || c.run_dir[0] != '/'))
	{
		*err = psprintf("work_dir and run_dir must be absolute paths");
		ok = false;
	}
	if (ok && c.egress_ca_file[0] && c.egress_ca_file[0] != '/')
	{
		*err = psprintf("egress_ca_file must be an absolute path");
		ok = false;
	}
	if (ok && c.runsc_path[0] && c.runsc_path[0] != '/')
	{
		*err = psprintf("runsc_path must be an absolute path");
		ok = false;
	}
	if (ok && c.image_store[0] != '/')
	{
		*err = psprintf("image_store must be an absolute path");
		ok = false;
	}
	if (ok && c.secrets_key_file[0] && c.secrets_key_file[0] != '/')
	{
		*err = psprintf("secrets_key_file must be an absolute path");
		ok = false;
	}
	if (ok && c.name[0] == '\0')
	{
		*err = psprintf("name must not be empty");
		ok = false;
	}

	/*
	 * Each of warm_python and warm_node may be up to JAIL_WARM_MAX, the
	 * launcher takes at most that many in all (and refuses to start
	 * otherwise: every run would then be one-shot).  Python, the main
	 * workload, keeps its places; Node gets what is left.
	 */
	if (ok && c.warm_python + c.warm_node > JAIL_WARM_MAX)
	{
		int			node = JAIL_WARM_MAX - c.warm_python;

		runner_log(RLOG_WARNING, "%s = %d and %s = %d: at most %d warm interpreters in all; %s is taken as %d",
				   runner_setting_name("warm_python"), c.warm_python, runner_setting_name("warm_node"),
				   c.warm_node, JAIL_WARM_MAX, runner_setting_name("warm_node"), node);
		c.warm_node = node;
	}
	if (!ok)
	{
		char	   *e = psprintf("configuration file \"%s\": %s", path, *err);

		free(*err);
		*err = e;
		runner_config_free(&c);
		return false;
	}
	*out = c;
	return true;
}
