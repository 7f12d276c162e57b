/*-------------------------------------------------------------------------
 *
 * local_link.h
 *	  The link between the supervisor background worker and the local
 *	  sandbox-runner it starts (sandbox-runner --local), written once for
 *	  both ends: src/supervisor.c and src/runner/local.c.  Standalone: only
 *	  the C library, so that the extension and the runner (which never
 *	  includes postgres.h) can both include it.
 *
 * One SOCK_SEQPACKET socketpair, inherited by the runner as fd
 * LINK_RUNNER_FD.  A message is its kind and its fields, each
 * NUL-terminated, at most LINK_MAX bytes.  Everything on it is a hint or a
 * report: the database holds every decision, so a lost message costs at
 * most a poll interval, never a run.
 *
 *	runner -> supervisor
 *	  status	slots, in use, work dir, problem (or ""), then one
 *				invocation id field per run in a slot; sent when
 *				any of it changes (agent.worker_status() shows it)
 *	  staged	a result waits behind a lock (apply it now:
 *				agent._finish_pending)
 *
 * Nothing goes the other way: the local runner LISTENs for approvals and
 * cancels like any runner, and agent.wait() is woken by the commit that
 * ends an invocation, whoever commits it.
 *
 * The settings travel as the runner's configuration file, rewritten by
 * the supervisor on reload, followed by SIGHUP: the same file and signal
 * a remote runner gets from its operator.  When the supervisor dies the
 * runner sees EOF (and its parent-death signal) and stops.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_LOCAL_LINK_H
#define SANDBOX_LOCAL_LINK_H

#define LINK_RUNNER_FD		3		/* the runner's end of the socketpair */
#define LINK_MAX			16384	/* one message */

#define LINK_STATUS			"status"
#define LINK_STAGED			"staged"

/* The fields of a status message after its kind, in this order. */
typedef enum LinkStatusField
{
	LINK_STATUS_SLOTS = 0,
	LINK_STATUS_IN_USE = 1,
	LINK_STATUS_WORK_DIR = 2,
	LINK_STATUS_PROBLEM = 3,
	LINK_STATUS_FIRST_RUN = 4	/* then an invocation id per run */
} LinkStatusField;

/* The local runner's name (agent.runners) and its files in the data directory. */
#define LINK_RUNNER_NAME	"local"
#define LINK_RUN_DIR		"sandbox_runner"	/* under the data directory */
#define LINK_CONFIG_FILE	"runner.conf"		/* in LINK_RUN_DIR */

#endif							/* SANDBOX_LOCAL_LINK_H */
