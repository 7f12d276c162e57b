/*-------------------------------------------------------------------------
 *
 * jail.h
 *	  Shared types of sandbox-jail: the options a run is built from, the
 *	  facts collected about it, and the entry points of each module.
 *
 * One module per concern (after nsjail), each exporting a few functions,
 * every one with the jail_ prefix:
 *	  main.c		the one-shot command line: parse, read the code, run,
 *					write the verdict, the exit code
 *	  options.c		the command line into a JailOptions (no side effects)
 *	  gvisor.c		the gvisor class: the bundle, runsc, the report (and
 *					gvisor_init.c, sandbox-gvisor-init, inside gVisor)
 *	  lifecycle.c	one run, host side (jail_run): prepare, start, go,
 *					monitor, end, collect, finish (JailRun, JailRunPhase)
 *	  spawn.c		a sandbox's birth: its pipes (JailPipes), the clone, the
 *					id maps, the go bytes; one cloned ahead (jail_prespawn)
 *	  monitor.c		the loop while a run runs: output, clocks, signals,
 *					cancel, init's report, the reap
 *	  verdict.c		the run's status (jail_verdict_decide) and its JSON line
 *	  cgroup.c		the per-run cgroup, v1 or v2
 *	  rootfs.c		the mount namespace (the sandbox's root)
 *	  image.c		the --image a root is built from, its lookups, its lock
 *	  installers.c	which host paths are package installers (the root
 *					covers them), and a launcher's cache of them
 *	  seccomp.c		the filter's policy (gen_filter.c compiles it at build
 *					time, filter.c embeds the result)
 *	  sandbox.c		everything that runs inside the namespaces: init, payload,
 *					their confinement, the reap (a one-shot sandbox's init)
 *	  served.c		inside a sandbox cloned ahead of its request (prebuild):
 *					its init and its payload's process, to the exec
 *	  warm.c		a warm interpreter: its bootstrap, its rlimits, its fds
 *	  exiting.c		an exiting payload's status, before its reap (init)
 *	  workspace.c	the host-side walk of the workspace (size, entries)
 *	  serve.c		the resident launcher (--serve): pool, slots, socket
 *	  worker.c		a launcher's worker and its one request
 *	  client.c		the launcher's command-line client (--client)
 *	  egress.c		egress: the proxy's socket made in the sandbox's netns, the
 *					proxy process (sandbox-egress), started for a served run
 *					by its launcher
 *	  wire.c		one message with descriptors over a socket, and the
 *					launcher's messages (wire_protocol.h)
 *	  bpf_export.c	a libseccomp program as BPF (bpf_export.h; compiled into
 *					the egress proxy too)
 *	  util.c		diagnostics, small file I/O, the clock, the code's read
 *
 * Who exits.  Only main.c decides the jail's exit code: every helper
 * returns an error code and puts the reason in a JAIL_ERRLEN buffer, and
 * jail_serve_main and jail_client_main return theirs to main.  A process
 * the jail forks or clones never returns into its parent's code; it ends
 * in _exit, in these places only:
 *	  spawn.c		jail_spawn's child: _exit(jail_child_main(...))
 *	  sandbox.c,	the sandbox's init and payload (jail_child_main and
 *	  served.c		what it calls): jail_child_fail() for a setup error,
 *					_exit when the parent is gone or when init is done
 *	  serve.c		a worker: _exit(jail_worker_main(...)) where it is forked
 *	  egress.c		the proxy's process before its execve: _exit(127) on a
 *					failure (forked by the jail, or by a served run's
 *					launcher)
 * The launcher itself returns from jail_serve_main like any command.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_JAIL_H
#define SANDBOX_JAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <linux/filter.h>

/* Exit codes of the jail itself (not of the payload). */
#define JAIL_EXIT_OK		0	/* payload ran, verdict written */
#define JAIL_EXIT_SETUP		1	/* sandbox could not be built */
#define JAIL_EXIT_USAGE		2	/* bad command line */

/* Identity of the payload inside the user namespace. */
#define JAIL_INNER_UID		1000
#define JAIL_INNER_GID		1000

#define JAIL_ERRLEN			512
#define JAIL_MAX_BINDS		32
#define JAIL_MAX_CODE		(16 * 1024 * 1024)
#define JAIL_VERDICT_MAX	4400	/* a formatted verdict line fits */
#define JAIL_DEFAULT_TMP_SIZE	(64 * 1024 * 1024)	/* --tmp-size */

typedef enum JailLanguage
{
	LANG_PYTHON,
	LANG_NODE,
	LANG_SHELL,
	LANG_EXEC					/* --exec: a program of the sandbox, no code */
} JailLanguage;

/* What stands between the payload and the host's kernel (docs/jail.md). */
typedef enum JailIsolation
{
	JAIL_ISOLATION_NAMESPACES,	/* namespaces, seccomp, capabilities (default) */
	JAIL_ISOLATION_GVISOR		/* the same limits around runsc (gvisor.c) */
} JailIsolation;

typedef struct JailBind
{
	const char *src;			/* host path, opened in the child */
	const char *dst;			/* absolute path inside the sandbox */
} JailBind;

typedef struct JailOptions
{
	JailLanguage language;
	const char *exec_path;		/* LANG_EXEC: absolute path inside */
	const char *code_file;		/* NULL: stdin */
	const char *workspace;
	JailBind	binds[JAIL_MAX_BINDS];
	int			nbinds;
	uint64_t	wall_ms;
	uint64_t	cpu_ms;
	uint64_t	memory_bytes;
	uint64_t	pids;
	uint64_t	output_limit;	/* per stream */
	uint64_t	file_size;		/* RLIMIT_FSIZE, 0 = unlimited */
	uint64_t	workspace_size; /* 0 = unlimited */
	uint64_t	workspace_entries;	/* files, directories, links: at most */
	uint64_t	tmp_size;
	int			verdict_fd;		/* -1: not given */
	const char *verdict_file;
	const char *cgroup_parent;
	bool		require_cgroup;
	bool		quiet;
	/* egress (egress.c, docs/egress.md): all NULL = no network at all */
	const char *egress_policy;	/* the run's policy file, for the proxy */
	const char *egress_log;		/* where the proxy's connection log goes */
	const char *egress_resolver;	/* ADDR[:PORT]; NULL: the host's */
	const char *egress_ca;		/* a PEM the payload's clients trust too */
	const char *egress_proxy;	/* sandbox-egress; NULL: beside the jail */
	const char *image;			/* --image DIR (image.c); NULL: the host's */
	int			egress_secrets_fd;	/* the run's secrets for the proxy, passed
									 * on unread (docs/secrets.md); -1: none */
	JailIsolation isolation;	/* --isolation */
	const char *runsc;			/* --runsc; NULL: JAIL_RUNSC_DEFAULT */
} JailOptions;

typedef enum JailStatus
{
	STATUS_EXITED,
	STATUS_SIGNALED,
	STATUS_TIMED_OUT,
	STATUS_SETUP_ERROR,
	STATUS_KILLED
} JailStatus;

typedef enum CgroupMode
{
	CGROUP_NONE,
	CGROUP_V1,
	CGROUP_V2
} CgroupMode;

/* Everything the verdict reports; filled in by jail_run (lifecycle.c). */
typedef struct JailResult
{
	JailStatus	status;
	bool		have_exit_code;
	int			exit_code;
	bool		have_signal;
	int			signal;
	uint64_t	wall_ms;
	uint64_t	cpu_ms;
	uint64_t	peak_memory_bytes;
	bool		timed_out;
	bool		oom_killed;
	bool		output_truncated;
	bool		file_too_large;
	bool		pids_limit_hit; /* a fork or clone was refused at pids.max */
	bool		killed;
	uint64_t	stdout_bytes;
	uint64_t	stderr_bytes;
	CgroupMode	cgroup;
	bool		warm;			/* the interpreter was started ahead */
	uint64_t	warm_cpu_ms;	/* ... and used this much CPU before the
								 * request (not in cpu_ms) */
	uint64_t	warm_memory_bytes;	/* ... and held this much memory at the
									 * request (in peak_memory_bytes) */
	char		setup_error[JAIL_ERRLEN];	/* empty: none */
	/* egress: the proxy's summary (egress.c); reported only with egress */
	bool		egress;
	uint64_t	egress_attempts;
	uint64_t	egress_allowed;
	uint64_t	egress_denied;
	uint64_t	egress_bytes_up;
	uint64_t	egress_bytes_down;
	bool		egress_limit_hit;
} JailResult;

/*
 * How a run that ran to its end ended, as its host side saw it: what the
 * status decision (jail_verdict_decide) needs besides the result's facts.
 */
typedef struct JailEnd
{
	const char *setup_error;	/* the sandbox's own text; "": none */
	bool		have_status;	/* init reported the payload's wait status */
	int			payload_status;
	int			init_status;	/* init's own wait status, for the message */
	bool		over_workspace; /* killed for the workspace's total size */
	bool		runtime_at_limit;	/* gvisor: runsc died at the run's pids
									 * limit (its sentry cannot fork) */
	uint64_t	cpu_limit_ms;
} JailEnd;

/* Per-run cgroup; paths are empty for controllers not in use. */
typedef struct JailCgroup
{
	CgroupMode	mode;
	char		v2_dir[512];
	int			v2_dirfd;
	char		mem_dir[512];	/* v1 */
	char		pids_dir[512];	/* v1 */
	char		cpu_dir[512];	/* v1 cpuacct */
	uint64_t	memory_set;		/* limits last written (0: none yet), so */
	uint64_t	pids_set;		/* a launcher slot skips unchanged ones */
	bool		stats_open;		/* statfd holds the counter files, opened */
	int			statfd[5];		/* ahead (jail_cgroup_open_stats); -1: none */
	uint64_t	pids_max_base;	/* pids.events "max" when they were opened */
	uint64_t	cpu_base_ms;	/* CPU counted before the run (a warm
								 * interpreter's start on v2, where the
								 * counter cannot be reset) */
} JailCgroup;

/*
 * Which seccomp program: the payload's (everything of seccomp.c's policy),
 * or a served sandbox's init's, loaded before its request: the same
 * without the mount calls it still needs for the request's mounts.
 */
typedef enum JailFilterKind
{
	FILTER_PAYLOAD,
	FILTER_INIT
} JailFilterKind;

/* The compiled seccomp program, built once in the parent. */
typedef struct JailFilter
{
	struct sock_filter *insns;
	unsigned short len;
} JailFilter;

/*
 * The six pipes between the host side of a run and its sandbox, each
 * [0] the read end and [1] the write end.  After the clone the host side
 * keeps one end of each and closes the other (jail_pipes_close_child_ends),
 * so that EOF or HUP on its ends means the sandbox is gone; the sandbox
 * keeps the other ends (JailChildArgs, jail_pipes_child_ends).
 */
typedef struct JailPipes
{
	int			out[2];			/* the payload's stdout; ours: [0] */
	int			errout[2];		/* the payload's stderr; ours: [0] */
	int			go[2];			/* the go bytes; ours: [1] */
	int			err[2];			/* setup error text (CLOEXEC); ours: [0] */
	int			stat[2];		/* init's JailInitReport; ours: [0] */
	int			life[2];		/* lifeline: HUP when we are gone; ours: [1] */
} JailPipes;

/*
 * The go bytes: what the host side tells the sandbox, one byte each, on
 * JailPipes.go (the last one of a prespawned sandbox goes to its payload's
 * process directly, JailPrespawn.paygo).  Nothing of the payload runs
 * before JAIL_GO_RUN.
 *	  one-shot:   MAPPED or NOCGROUP (jail_run), then RUN
 *	  prespawned: MAPPED (jail_prespawn), REQUEST or NOCGROUP (jail_run),
 *				  then RUN (on paygo)
 */
#define JAIL_GO_MAPPED		'g'	/* the id maps are written: build the root */
#define JAIL_GO_REQUEST		'r'	/* prespawned: the request waits in reqfd */
#define JAIL_GO_NOCGROUP	'n'	/* MAPPED or REQUEST, for a run with no
								 * cgroup (RLIMIT_NPROC stands in) */
#define JAIL_GO_RUN			'c'	/* in the cgroup, workspace checked: start */

/*
 * A sandbox cloned ahead of its request by a launcher's worker (worker.c):
 * its namespaces exist, its ids are mapped (mapped to a guess when root
 * runs the launcher: ouid, ogid), it has built the fixed part of its root
 * and waits for JAIL_GO_REQUEST; the request (options and code) is put in
 * reqfd before that byte is sent.
 */
typedef struct JailPrespawn
{
	pid_t		pid;
	int			pidfd;
	JailPipes	pipes;			/* the child's ends already closed */
	int			sigfd;
	int			reqfd;			/* memfd: u32 length, options, then code */
	int			treesock[2];	/* [0] ours: receives the sandbox's copy of
								 * the host tree, released when we exit */
	int			paygo[2];		/* [1] ours: the payload's own last go */
	uid_t		ouid;			/* the outer ids its maps were written with */
	gid_t		ogid;
	int			heldns[3];		/* the sandbox's mount, ipc and uts
								 * namespaces, held (spawn.c) */
	int			mountsfd;		/* our /proc/self/mounts, opened before the
								 * clone: jail_prespawn_stale */
	bool		warm;			/* its payload's process started the
								 * interpreter ahead (warm.c) */
	JailLanguage warm_language;
	int			ready[2];		/* warm: [0] ours, the interpreter's "ready" */
	char	   *mountinfo;		/* warm: our /proc/self/mountinfo at the clone
								 * (jail_prespawn_covers), or NULL */
} JailPrespawn;

/*
 * What a sandbox's init reports on status_fd once it has reaped the
 * payload: its wait status, whether init was then alone in the pid
 * namespace (no process of the run left: nothing can outlive the
 * verdict, so the caller need not wait for init's own exit before
 * giving it), and the rusage of everything init reaped (RUSAGE_CHILDREN:
 * the payload and whatever it left behind).  One write, < PIPE_BUF.
 * An init told to linger (JailChildArgs.linger) that is alone does not
 * exit then but waits, doing nothing, to be killed: its exit (the pid
 * namespace's teardown) then runs after the verdict, not in its way.
 */
typedef struct JailInitReport
{
	int			status;
	int			alone;
	int			lingering;		/* alone, and waiting to be killed (linger) */
	int			exiting;		/* sent before the reap: every task of the
								 * payload had entered its exit (its seccomp
								 * program unused), status read from /proc;
								 * ru is empty (sandbox.c, jail_init_reap) */
	uint64_t	warm_cpu_ms;	/* a warm interpreter's CPU before its
								 * request, included in ru (0: not warm) */
	struct rusage ru;
} JailInitReport;

/*
 * What the caller of jail_run may have prepared ahead of the run (a
 * resident launcher's worker, worker.c); NULL means a one-shot run that
 * prepares everything itself and copies output to our stdout/stderr.
 */
typedef struct JailRunEnv
{
	int			stdout_fd;		/* where the payload's stdout goes */
	int			stderr_fd;
	int			cancel_fd;		/* -1, or readable/EOF: stop the run (killed) */
	JailCgroup *slot;			/* this process already sits in it, or NULL */
	const char *slot_parent;	/* the launcher's --cgroup-parent, or NULL */
	bool		netns_ready;	/* we sit in a fresh netns, lo up: join it */
	int			egress_spawner; /* the launcher's socket that starts the run's
								 * proxy in the host's netns (egress.c), or
								 * -1: fork it ourselves */
	const JailFilter *filter;	/* compiled once by the launcher, or NULL */
	const JailFilter *init_filter;	/* FILTER_INIT, for jail_prespawn */
	JailPrespawn *pre;			/* a sandbox already cloned, or NULL */
	uint32_t   *owner_hint;		/* root's launcher: {uid, gid} of the last
								 * run's outer ids (shared with the launcher),
								 * the guess for the next prespawn; or NULL */
	bool		defer_reap;		/* the caller calls jail_run_reap() after the
								 * verdict: a sandbox whose init reported
								 * itself alone may be reaped then */
	const struct JailWarm *warm;	/* jail_prespawn: start this interpreter
									 * ahead, or NULL */
	uint64_t	warm_memory;	/* the slot's usage at the request (warm) */
} JailRunEnv;

/*
 * A run's egress proxy, host side (egress.c): the socket pair on which
 * the sandbox's init sends the listening socket it made in its network
 * namespace, and the proxy process serving it from ours.
 */
typedef struct JailEgress
{
	bool		on;
	int			sock[2];		/* [0] ours, [1] the sandbox's */
	int			logfd;			/* the connection log, for the proxy */
	int			policyfd;		/* the policy, opened by us, read by the proxy */
	int			summary;		/* read end: the proxy's summary line */
	pid_t		pid;			/* the proxy, or -1 */
	int			pidfd;			/* the proxy's pidfd when it is not our child
								 * (a served run's: the launcher's), or -1 */
	int			spawner;		/* JailRunEnv.egress_spawner, or -1 */
	pid_t		parent;			/* who forks the proxy otherwise: us */
	char	   *ca;				/* the bundle the payload's clients trust (the
								 * system's and --egress-ca's), or NULL */
	size_t		ca_len;
	/* secrets (docs/secrets.md): the proxy intercepts their hosts' TLS */
	bool		intercept;
	int			secretsfd;		/* --egress-secrets-fd: passed on, never read */
	int			trustfd;		/* ca, for the proxy's upstream checks */
} JailEgress;

/* The address the sandbox's clients reach the proxy at (its own netns). */
#define JAIL_EGRESS_PORT	3128
#define JAIL_EGRESS_URL		"http://127.0.0.1:3128"
#define JAIL_EGRESS_NODE_SHIM	"/sandbox/.egress-node.js"
#define JAIL_EGRESS_CA_PATH		"/sandbox/.egress-ca.pem"

/*
 * The phases of one run (lifecycle.c), in order.  Each step of jail_run
 * moves the run to the next one or fails with a setup error; the clean-up
 * and the status decision read how far it got.
 */
typedef enum JailRunPhase
{
	JAIL_RUN_PREPARING,			/* workspace, ids, filter, cgroup; no sandbox
								 * of ours yet (a prespawned one may wait) */
	JAIL_RUN_STARTED,			/* the sandbox exists, waits for its go bytes */
	JAIL_RUN_RUNNING,			/* JAIL_GO_RUN sent: the monitor watches it */
	JAIL_RUN_ENDED,				/* init reaped (or reported itself alone) */
	JAIL_RUN_COLLECTED			/* the facts are in the result: decide */
} JailRunPhase;

/*
 * One run, host side, from jail_run's start to its verdict: what
 * lifecycle.c prepared and started, and what the monitor (monitor.c)
 * learned while it ran.  Lives on jail_run's stack.
 */
typedef struct JailRun
{
	JailRunPhase phase;
	const JailOptions *opts;
	const char *code;
	size_t		code_len;
	const JailRunEnv *env;		/* the caller's, or the one-shot defaults */
	bool		served;			/* a launcher's run (env given) */
	JailResult *res;
	char		err[JAIL_ERRLEN];	/* the setup error, "" while there is none */

	/* prepare */
	int			wsfd;			/* the workspace (a directory), for size checks */
	uid_t		ouid;			/* the outer ids of the sandbox's uid/gid 1000 */
	gid_t		ogid;
	JailFilter	filter;			/* env's (borrowed) or ours (freed) */
	JailCgroup	cg;
	bool		cg_borrowed;	/* the launcher's slot: not ours to remove */
	JailPrespawn *pre;			/* the sandbox cloned ahead, while it may serve */
	bool		early_go;		/* pre got its JAIL_GO_REQUEST in prepare */
	bool		warm_dropped;	/* a warm interpreter was thrown away: the
								 * slot's counters and limits are the run's
								 * again (run_choose_cgroup) */

	/* start and go */
	JailPipes	pipes;			/* our ends, once the sandbox exists */
	int			sigfd;			/* the stop signals (jail_stop_signals) */
	pid_t		pid;			/* the sandbox's init, seen from here */
	int			pidfd;
	bool		born_in_cg;		/* cloned into cg (v2): no move */
	uint64_t	start;			/* ms: cloned, or taken over when prespawned */
	bool		big_before;		/* a file at the size limit before the run */
	bool		defer_reap;		/* the run may end on init's report alone */

	/* learned by the monitor */
	bool		kill_sent;
	bool		over_workspace; /* killed for the workspace's size */
	bool		reaped;			/* init reaped, or reported itself alone */
	uint64_t	reaped_at;		/* ms, for wall_ms (not the flush) */
	int			wstatus;		/* of init */
	struct rusage ru;			/* of init, or its report's */
	bool		have_report;
	JailInitReport rep;			/* init's report of the payload */
	bool		init_pending;	/* ended on the report: init to be reaped
								 * after the verdict (jail_run_reap) */
	char		child_err[JAIL_ERRLEN]; /* the sandbox's setup error text */
	size_t		child_err_len;

	/* egress (egress.c) */
	JailEgress	egress;

	int			image_lock;		/* the run's hold on its image, or -1 */
} JailRun;

/* What the child needs to build the sandbox; shared by fork. */
typedef struct JailChildArgs
{
	const JailOptions *opts;
	const char *code;
	size_t		code_len;
	const JailFilter *filter;
	const JailFilter *init_filter;	/* served init: loaded before the request,
									 * or NULL: init confines itself after */
	int			go_fd;			/* read: the go bytes (JAIL_GO_*) */
	int			err_fd;			/* write: setup error text, CLOEXEC */
	int			status_fd;		/* write: a JailInitReport */
	int			out_fd;			/* write end of stdout pipe */
	int			errout_fd;		/* write end of stderr pipe */
	int			lifeline_fd;	/* read: HUP when the parent is gone */
	int			req_fd;			/* prespawned: where the request waits, or -1 */
	int			tree_sock;		/* prespawned: to hand the worker the copy of
								 * the host tree (rootfs.c), or -1 */
	bool		linger;			/* init alone after the payload: report, then
								 * wait to be killed (JailInitReport) */
	int			watch_sock;		/* prespawned, the payload's process: where
								 * its seccomp listener goes to init, or -1 */
	int			paygo_fd;		/* prespawned: read by the payload's process,
								 * the worker's go once the workspace is
								 * checked; or -1 */
	bool		prebuild;		/* prespawned (req_fd): ids mapped at once,
								 * the fixed root built ahead (served.c) */
	bool		cgroup_none;	/* no cgroup: fall back to RLIMIT_NPROC */
	bool		netns_ready;	/* network namespace inherited, lo already up */
	bool		served;			/* run by a launcher's worker (worker.c) */
	const struct JailWarm *warm;	/* prespawned: start this interpreter
									 * before the request (warm.c), or NULL */
	int			ready_fd;		/* warm: write end of the ready pipe, or -1 */
	bool		egress;			/* the run has egress (the payload's env) */
	int			egress_fd;		/* egress: where init sends the proxy's
								 * listening socket (egress.c), or -1 */
	const char *egress_ca_pem;	/* egress: the CA bundle's text, or NULL */
	size_t		egress_ca_len;
	bool		egress_intercept;	/* secrets: init waits on egress_fd for the
									 * proxy's CA and placeholders (egress.c) */
} JailChildArgs;

/*
 * Step timestamps for profiling a run (`make TIMING=1`): one line
 * "jail-trace <pid> <monotonic us> <step>" on stderr per step.  Compiled
 * out otherwise; never in a build that is shipped or tested.
 */
#ifdef JAIL_TIMING
extern void jail_trace(const char *step);
extern void jail_trace_init(void);
extern void jail_trace_dump(void);
#define JAIL_TRACE(step) jail_trace(step)
#else
#define JAIL_TRACE(step) ((void) 0)
#endif

/*
 * RLIMIT_CPU's soft value (seconds) for a payload process whose CPU limit
 * (counting what it used before its request, for a warm interpreter) is
 * cpu_ms.  With a cgroup the jail's CPU watch ends a run at its limit,
 * cold or warm alike (timed_out); the rlimit, one second later, is only
 * the backstop, so it never decides a verdict the other path would not.
 * Without a cgroup it is the limit.
 */
static inline uint64_t
jail_rlimit_cpu_s(uint64_t cpu_ms, bool cgroup_none)
{
	return (cpu_ms + 999) / 1000 + (cgroup_none ? 0 : 1);
}

/* util.c */
extern bool jail_quiet;
extern void jail_warn(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void jail_seterr(char *buf, const char *fmt,...) __attribute__((format(printf, 2, 3)));
extern int	jail_write_file(const char *path, const char *data);
extern int	jail_write_fileat(int dirfd, const char *name, const char *data);
extern int	jail_read_fileat(int dirfd, const char *name, char *buf, size_t len);
extern int	jail_write_all(int fd, const void *buf, size_t len);
struct iovec;
extern int	jail_write_new(const char *path, const void *data, size_t len, mode_t mode,
						   char *err);
extern int	jail_write_new_parts(const char *path, const struct iovec *parts, int nparts,
								 mode_t mode, char *err);
extern void jail_close(int *fd);
extern int	jail_die_with_parent(void);
extern int	jail_send_fd(int sock, int fd);
extern int	jail_recv_fd(int sock, int wait_ms);
extern uint64_t jail_now_ms(void);
extern char *jail_read_code(int fd, size_t *len, char *err);
extern char *jail_load_code(const JailOptions *opts, size_t *len, char *err);

/* options.c */
#define JAIL_OPTIONS_HELP	1	/* jail_parse_options saw --help */
extern char jail_option_error[JAIL_ERRLEN];
extern int	jail_parse_options(int argc, char **argv, JailOptions *opts, bool allow_help);
extern int	jail_parse_command_line(int argc, char **argv, JailOptions *opts);
extern void jail_usage(FILE *out);
extern int	jail_parse_size(const char *s, uint64_t *out);

/* verdict.c */
extern void jail_verdict_setup_error(JailResult *res, const char *msg);
extern int	jail_verdict_decide(JailResult *res, const JailEnd *end);
extern int	jail_format_verdict(char *line, size_t len, const JailResult *res);
extern int	jail_write_verdict(int fd, const JailResult *res);
extern int	jail_open_verdict(const JailOptions *opts, int *rc);

/* cgroup.c */
extern int	jail_cgroup_create(const JailOptions *opts, JailCgroup *cg, char *err);
extern int	jail_cgroup_create_named(const JailOptions *opts, const char *name,
									 JailCgroup *cg, char *err);
extern int	jail_cgroup_set_limits(JailCgroup *cg, const JailOptions *opts,
								   uint64_t extra_pids, char *err);
extern void jail_cgroup_reset_counters(const JailCgroup *cg);
extern void jail_cgroup_open_stats(JailCgroup *cg);
extern void jail_cgroup_counters_from_now(JailCgroup *cg);
extern int	jail_cgroup_attach(JailCgroup *cg, pid_t pid, char *err);
extern uint64_t jail_cgroup_cpu_ms(const JailCgroup *cg);
extern uint64_t jail_cgroup_memory_now(const JailCgroup *cg);
extern void jail_cgroup_collect(const JailCgroup *cg, JailResult *res);
extern void jail_cgroup_kill(const JailCgroup *cg);
extern void jail_cgroup_destroy(JailCgroup *cg);

/* seccomp.c */
extern int	jail_filter_build(JailFilter *filter, JailFilterKind kind, char *err);
extern int	jail_filter_get(JailFilter *filter, JailFilterKind kind, char *err);
extern int	jail_filter_load(const JailFilter *filter, int keep_sock, int watch_sock);

/* installers.c */
extern void jail_installers_refresh(void);
extern int	jail_installers_each(int (*fn) (const char *path, char *err), char *err);

/* image.c */
extern int	jail_image_set(const char *dir, char *err);
extern const char *jail_image_dir(void);
extern const char *jail_image_prefix(void);
extern int	jail_image_open(const char *path, int flags);
extern int	jail_image_fd(bool root);
extern int	jail_image_enter(char *err);
extern void jail_image_forget(void);
extern int	jail_image_hold(int *fd, char *err);

/* rootfs.c */
#define JAIL_INSTALLER_STUB "/etc/sandbox-no-install"
extern const char *const jail_rootfs_sysdirs[];
extern const char *const jail_rootfs_etc_files[];
extern const char jail_rootfs_installer_stub[];
extern int	jail_rootfs_write_etc(const char *etc, char *err);
extern int	jail_rootfs_setup(const JailChildArgs *args, char *err);
extern int	jail_rootfs_prepare(char *err);
extern int	jail_rootfs_complete(const JailChildArgs *args, pid_t payload, char *err);
extern int	jail_rootfs_enter_own(char *err);
extern bool jail_rootfs_entered(void);

/* sandbox.c */

/*
 * What an init knows for its end (jail_init_reap): a served init's
 * payload's seccomp listener (inert: no rule notifies it; it reports
 * POLLHUP once no task uses the payload's program any more), or -1; and a
 * warm interpreter's CPU before the request.
 */
typedef struct JailInitState
{
	int			exit_watch;
	uint64_t	warm_cpu_ms;
} JailInitState;

/* One rlimit to set (jail_set_rlimits, jail_warm_rlimits). */
typedef struct JailRlimit
{
	int			res;
	rlim_t		soft;
	rlim_t		hard;
	const char *name;
} JailRlimit;

/* Which rlimits jail_set_rlimits() sets: those no request changes, its own. */
#define JAIL_RLIMITS_FIXED		0x1
#define JAIL_RLIMITS_REQUEST	0x2

extern int	jail_child_main(void *arg);
extern void jail_child_fail(const JailChildArgs *a, const char *msg) __attribute__((noreturn));
extern int	jail_loopback_up(char *err);
extern int	jail_drop_bounding(char *err);
extern int	jail_drop_held(char *err);
extern int	jail_set_rlimits(const JailChildArgs *a, int which, char *err);
extern void jail_payload_confine(const JailChildArgs *a, bool rlimits);
extern void jail_payload_execve(const JailChildArgs *a) __attribute__((noreturn));
extern char *const *jail_payload_argv(const JailOptions *o);
extern char *const *jail_payload_env(const JailChildArgs *a);
extern int	jail_confine_init(const JailFilter *filter, int keep_sock, char *err);
extern void jail_init_reap(const JailChildArgs *a, pid_t payload, bool confined,
						   const JailInitState *st) __attribute__((noreturn));

/* served.c */
extern void jail_served_init(JailChildArgs *a) __attribute__((noreturn));

/* exiting.c */
extern bool jail_exiting_status(int taskfd, int *status);

/* spawn.c */
extern void jail_pipes_init(JailPipes *p);
extern int	jail_pipes_open(JailPipes *p, char *err);
extern void jail_pipes_child_ends(const JailPipes *p, JailChildArgs *args);
extern void jail_pipes_close_child_ends(JailPipes *p);
extern void jail_pipes_close(JailPipes *p);
extern int	jail_stop_signals(int also, char *err);
extern void jail_outer_ids(int wsfd, uid_t *uid, gid_t *gid);
extern int	jail_write_id_maps(pid_t pid, uid_t uid, gid_t gid, char *err);
extern bool jail_send_go(int fd, char go);
extern pid_t jail_spawn(JailChildArgs *args, int *pidfd, int cgroup_fd, bool *born_in);
extern int	jail_prespawn(JailPrespawn *p, const JailRunEnv *env, char *err);
extern bool jail_prespawn_stale(const JailPrespawn *p);
extern bool jail_prespawn_covers(const JailPrespawn *p, const JailOptions *o);
extern void jail_prespawn_discard(JailPrespawn *p);
extern void jail_prespawn_discard_reason(JailPrespawn *p, char *buf, size_t len);

/* gvisor.c: the gvisor class (docs/jail.md, "The gvisor class") */
#define JAIL_RUNSC_DEFAULT	"/usr/bin/runsc"
#define JAIL_GVISOR_MEMORY_OVERHEAD (64ULL * 1024 * 1024)	/* the cgroup's room
															 * for runsc itself */
#define JAIL_GVISOR_PIDS_OVERHEAD 192	/* runsc's, the sentry's and the
										 * gofer's threads */
extern pid_t jail_gvisor_spawn(JailChildArgs *args, int *pidfd, int cgroup_fd, bool *born_in);

/* lifecycle.c */
extern int	jail_run(const JailOptions *opts, const char *code, size_t code_len,
					 const JailRunEnv *env, JailResult *res);
extern void jail_run_kill(JailRun *run);
extern void jail_run_reap(void);

/* egress.c */
extern void jail_egress_init(JailEgress *e);
extern int	jail_egress_prepare(JailEgress *e, const JailOptions *opts, char *err);
extern int	jail_egress_start(JailEgress *e, const JailOptions *opts, char *err);
extern void jail_egress_stop(JailEgress *e, JailResult *res);
extern int	jail_egress_listen(int sock, char *err);
extern void jail_egress_spawn(int sock);
extern int	jail_egress_write_files(const JailChildArgs *args, const char *root, char *err);
extern int	jail_egress_env_add(char **env, int n, int room, bool with_ca);

/* monitor.c */
extern void jail_monitor(JailRun *run);

/* wire.c: the launcher's protocol (wire_protocol.h, shared with the
 * PostgreSQL supervisor; docs/jail.md, "Resident launcher") */
#include "wire_protocol.h"


/*
 * What a launcher's worker (worker.c) is given by its launcher (serve.c):
 * set up once before the first fork; the worker only reads it.
 */
typedef struct JailLauncher
{
	pid_t		pid;			/* the launcher: a worker dies with it */
	uid_t		uid;			/* its owner, the only peer it serves */
	const char *cgroup_parent;	/* --serve's --cgroup-parent, or NULL */
	bool		quiet;
	bool		netns_pool;		/* workers prepare a netns (until one cannot) */
	JailFilter	filter;			/* the payload's, compiled once */
	JailFilter	init_filter;	/* a served init's (FILTER_INIT) */
	uint32_t   *owner_hint;		/* a shared page: {uid, gid} of the last
								 * run's outer ids, or NULL (JailRunEnv) */
	JailWarmPage *warm_page;	/* --warm-*: the page callers read, or NULL */
	int			egress_spawner; /* workers' end of the pair on which the
								 * launcher starts egress proxies, or -1 */
} JailLauncher;

/*
 * A warm interpreter (warm.c): started by a prespawned sandbox's payload
 * process before its request, confined as a cold run, waiting for its
 * code.  Its descriptors while it waits, at fixed numbers above anything
 * an interpreter opens itself, all closed by it before the code runs:
 */
#define JAIL_WARM_FD_READY	1000	/* write: "R" ready, or "E" and why not */
#define JAIL_WARM_FD_INIT	1001	/* read: init's go (root complete, rlimits) */
#define JAIL_WARM_FD_GO		1002	/* read: the worker's go (workspace checked) */
#define JAIL_WARM_FD_STDOUT 1003	/* the run's stdout and stderr (Python: */
#define JAIL_WARM_FD_STDERR 1004	/* 1 and 2 are /dev/null until the go) */
#define JAIL_WARM_MODULES_MAX 1024
#define JAIL_WARM_READY_TIMEOUT_MS 120000	/* a start that takes longer fails */
typedef struct JailWarm
{
	JailLanguage language;		/* LANG_PYTHON or LANG_NODE */
	JailWarmLang lang;			/* the same, as the page counts it */
	char		modules[JAIL_WARM_MODULES_MAX];	/* Python: "a,b.c", checked */
	uint64_t	memory;			/* the slot's limit while it waits */
} JailWarm;

/* warm.c */
extern int	jail_warm_root(const JailWarm *w, char *err);
extern int	jail_warm_unroot(const JailWarm *w, char *err);
extern void jail_warm_payload_fds(int ready_fd, int init_fd, int go_fd,
								  int out_fd, int err_fd, bool python, char *err);
extern int	jail_warm_rlimits(pid_t payload, const JailOptions *o, bool cgroup_none,
							  uint64_t *pre_cpu_ms, char *err);

/* serve.c, worker.c, client.c */
#define JAIL_WORKER_PREP_FAILED 3	/* a worker's exit: no netns could be made */
#define JAIL_WORKER_WARM_FAILED 4	/* a worker's exit: its interpreter did not
									 * start (the launcher waits, then retries) */
extern int	jail_serve_main(int argc, char **argv);
extern int	jail_worker_main(const JailLauncher *launcher, int lfd, JailCgroup *slot,
							 const JailWarm *warm, int page_index);
extern int	jail_client_main(int argc, char **argv);

/* workspace.c */
#define JAIL_DEFAULT_WORKSPACE_ENTRIES 200000
#define JAIL_MAX_WORKSPACE_ENTRIES 1000000
extern int	jail_workspace_usage(int dirfd, uint64_t file_limit, uint64_t max_entries,
								 uint64_t *total, bool *big_file);

#endif							/* SANDBOX_JAIL_H */
