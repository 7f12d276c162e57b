/*-------------------------------------------------------------------------
 *
 * main.c
 *	  sandbox-jail: run one piece of untrusted Python, Node.js or shell
 *	  code in a throw-away sandbox and report a verdict.
 *
 * This file owns the top level only: parse, read the code, make sure we
 * die with our parent, run, write the verdict, pick the exit code
 * (0 ran, 1 setup error, 2 usage error).  See docs/jail.md for the
 * interface and docs/security.md for the threat model.
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jail.h"

/* Make sure 0, 1, 2 are open, so no pipe of ours lands on them. */
static void
ensure_stdio(void)
{
	for (int fd = 0; fd <= 2; fd++)
	{
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
		{
			int			nfd = open("/dev/null", O_RDWR);

			if (nfd >= 0 && nfd != fd)
			{
				dup2(nfd, fd);
				close(nfd);
			}
		}
	}
}

int
main(int argc, char **argv)
{
	JailOptions opts;
	JailResult	res;
	char		err[JAIL_ERRLEN] = "";
	char	   *code = NULL;
	size_t		code_len = 0;
	int			verdict_fd = STDERR_FILENO;
	int			rc;

	ensure_stdio();
	if (argc >= 2 && strcmp(argv[1], "--serve") == 0)
		return jail_serve_main(argc, argv);
	if (argc >= 2 && strcmp(argv[1], "--client") == 0)
		return jail_client_main(argc, argv);
	if ((rc = jail_parse_command_line(argc, argv, &opts)) >= 0)
		return rc;
	jail_quiet = opts.quiet;
	memset(&res, 0, sizeof(res));

	/*
	 * Die with our caller (the extension's supervisor): if it crashes, we
	 * get SIGKILL, and our sandbox's init gets SIGKILL from its own death
	 * signal, which takes the whole pid namespace with it.
	 */
	if (jail_die_with_parent() < 0)
		return JAIL_EXIT_SETUP;

	/* A payload that closes its stdout must not kill us with SIGPIPE. */
	signal(SIGPIPE, SIG_IGN);

	/* Root's supplementary groups (gid 0...) must not reach the sandbox. */
	if (geteuid() == 0 && setgroups(0, NULL) < 0)
		jail_seterr(err, "setgroups: %s", strerror(errno));

	verdict_fd = jail_open_verdict(&opts, &rc);
	if (verdict_fd < 0)
		return rc;

	/* the image the root is built from: checked before anything runs */
	if (!err[0] && opts.image)
		(void) jail_image_set(opts.image, err);

	/* --exec runs a program of the sandbox: there is no code to read */
	if (!err[0])
		code = jail_load_code(&opts, &code_len, err);

	if (err[0])
	{
		jail_verdict_setup_error(&res, err);
		rc = -1;
	}
	else
		rc = jail_run(&opts, code, code_len, NULL, &res);

	if (rc < 0)
		jail_warn("setup error: %s", res.setup_error);
	if (jail_write_verdict(verdict_fd, &res) < 0)
	{
		fprintf(stderr, "sandbox-jail: could not write the verdict: %s\n", strerror(errno));
		rc = -1;
	}
	free(code);
	return rc < 0 ? JAIL_EXIT_SETUP : JAIL_EXIT_OK;
}
