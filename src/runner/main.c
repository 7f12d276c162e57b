/*-------------------------------------------------------------------------
 *
 * main.c
 *		sandbox-runner: run approved invocations of sandbox_ext in
 *		sandbox-jail, on the database host or on a host of its own
 *		(docs/runners.md).
 *
 *	sandbox-runner --config FILE			a runner (systemd starts it)
 *	sandbox-runner --config FILE --check	what this host lacks, then exit
 *	sandbox-runner --local --config FILE	started by the supervisor
 *
 * This file owns the top level only: the command line, signals, start-up
 * and shutdown; the loop is loop.c's.  The runner is a frontend program
 * (libpq, libpgcommon): nothing of the server runs here, and nothing of
 * the runner runs in the server.
 *
 * --local: the supervisor background worker started us, as the server's
 * OS user, with our end of its link as fd 3 (local_link.h).  We die with
 * it (PR_SET_PDEATHSIG, and EOF on the link), in a process group of our
 * own so that a signal to its group does not reach us.
 *
 * Shutdown (SIGTERM, SIGINT, the supervisor gone): every jail is killed
 * and we exit 0.  Their invocations are resolved by the database (the
 * supervisor's recovery, or the lease reaper), by the billing rule.
 *
 *-------------------------------------------------------------------------
 */
#include "runner.h"

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "local_link.h"

const char *runner_config_path = NULL;

static void
usage(FILE *f)
{
	fprintf(f,
			"sandbox-runner runs approved invocations of sandbox_ext in sandbox-jail.\n\n"
			"Usage:\n"
			"  sandbox-runner --config FILE [--check] [--debug]\n"
			"  sandbox-runner --local --config FILE   (started by the supervisor)\n\n"
			"Options:\n"
			"  -c, --config FILE   the configuration file (docs/runners.md)\n"
			"      --check         say what this host lacks (jail, interpreters, cgroups,\n"
			"                      work directory, connection, role) and exit: 0 when\n"
			"                      nothing, 1 otherwise\n"
			"      --local         the supervisor's own runner on the database host\n"
			"      --debug         log more\n"
			"  -V, --version       print the version and exit\n"
			"  -?, --help          show this help and exit\n");
}

static void
handle_signal(int sig)
{
	int			saved_errno = errno;

	if (sig == SIGHUP)
		reload_requested = 1;
	else
		shutdown_requested = 1;
	if (signal_pipe[1] >= 0 && write(signal_pipe[1], "x", 1) < 0)
		(void) 0;				/* the pipe is full: a wake-up is pending anyway */
	errno = saved_errno;
}

static void
setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		runner_log(RLOG_FATAL, "could not create the signal pipe: %m");
		exit(1);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handle_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * The local runner dies with the supervisor that started us, and must not
 * outlive it even for a moment: its recovery resolves our runs once we
 * are gone.
 */
static void
setup_local(void)
{
	struct stat st;
	const char *parent = getenv("SANDBOX_RUNNER_PARENT");

	if (fstat(LINK_RUNNER_FD, &st) != 0 || !S_ISSOCK(st.st_mode))
	{
		runner_log(RLOG_FATAL, "--local wants the supervisor's link as fd %d", LINK_RUNNER_FD);
		exit(2);
	}
	(void) fcntl(LINK_RUNNER_FD, F_SETFD, FD_CLOEXEC);
	link_fd = LINK_RUNNER_FD;
	(void) prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
	if (parent && atoi(parent) != (int) getppid())
	{
		runner_log(RLOG_FATAL, "the supervisor that started us is gone");
		exit(1);
	}
}

int
main(int argc, char **argv)
{
	static const struct option long_options[] = {
		{"config", required_argument, NULL, 'c'},
		{"check", no_argument, NULL, 'k'},
		{"local", no_argument, NULL, 'l'},
		{"debug", no_argument, NULL, 'd'},
		{"version", no_argument, NULL, 'V'},
		{"help", no_argument, NULL, '?'},
		{NULL, 0, NULL, 0}
	};
	bool		check = false;
	char	   *err = NULL;
	int			c;

	while ((c = getopt_long(argc, argv, "c:V?", long_options, NULL)) != -1)
	{
		switch (c)
		{
			case 'c':
				runner_config_path = optarg;
				break;
			case 'k':
				check = true;
				break;
			case 'l':
				runner_local = true;
				break;
			case 'd':
				runner_log_debug = true;
				break;
			case 'V':
				printf("sandbox-runner %s\n", RUNNER_VERSION);
				return 0;
			case '?':
				if (optopt == 0 && strcmp(argv[optind - 1], "-?") != 0 &&
					strcmp(argv[optind - 1], "--help") != 0)
				{
					usage(stderr);
					return 2;
				}
				usage(stdout);
				return 0;
			default:
				usage(stderr);
				return 2;
		}
	}
	if (optind < argc || runner_config_path == NULL)
	{
		fprintf(stderr, "sandbox-runner: %s\n",
				optind < argc ? "unexpected argument" : "--config is required");
		usage(stderr);
		return 2;
	}
	if (!runner_config_load(runner_config_path, &runner_conf, &err))
	{
		fprintf(stderr, "sandbox-runner: %s\n", err);
		return 2;
	}
	if (check)
		return runner_check();

	setup_signals();
	if (runner_local)
		setup_local();
	(void) umask(0077);

	(void) workdir_usable(true);
	workdir_clean_root();
	runs_init();
	if (!fence_start())
		exit(1);
	(void) launcher_ensure();
	runner_log(RLOG_LOG, "runner \"%s\" started (%d slots, jail \"%s\", work directory \"%s\")",
			   runner_conf.name, runner_conf.slots, runner_conf.jail_path, workdir_root());

	runner_loop();

	runner_log(RLOG_LOG, "runner shutting down; %d run(s) killed", nactive);
	runs_kill_all();
	return 0;
}
