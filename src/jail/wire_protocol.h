/*-------------------------------------------------------------------------
 *
 * wire_protocol.h
 *	  The resident launcher's protocol, written once for both of its ends:
 *	  the jail (worker.c answers, client.c asks) and sandbox-runner
 *	  (src/runner/launch.c asks).  Standalone: only the C library, so
 *	  that the runner can include it without the rest of the jail.
 *
 * One SOCK_SEQPACKET connection per run (docs/jail.md, "Resident
 * launcher"):
 *
 *	request		JAIL_WIRE_MAGIC "\0" then run options as NUL-terminated
 *				strings ("--name" "\0" "value" "\0", a flag without its
 *				value), at most JAIL_WIRE_MAX bytes and JAIL_WIRE_MAX_ARGS
 *				strings, with exactly JAIL_WIRE_NFDS descriptors in the
 *				order of JailWireFd;
 *	answer		JAIL_WIRE_MAGIC "\0" rc "\0" verdict "\0" message "\0",
 *				then EOF.  rc is the exit code a one-shot jail would have
 *				had (JAIL_WIRE_RC_REFUSED: the request was refused).
 *
 * Shutting down the writing side of the connection asks the launcher to
 * stop the run; closing it kills the run at once.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_JAIL_WIRE_PROTOCOL_H
#define SANDBOX_JAIL_WIRE_PROTOCOL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define JAIL_WIRE_MAGIC		"sandbox-jail/1"
#define JAIL_WIRE_MAX		65536	/* one request or answer message */
#define JAIL_WIRE_MAX_ARGS	256		/* strings in one request */

/*
 * The descriptors a request carries, in this order: always the first
 * JAIL_WIRE_NFDS; a run with secrets (docs/secrets.md) one more, named by
 * its option "--egress-secrets-fd" "3" (its index here).
 */
typedef enum JailWireFd
{
	JAIL_WIRE_FD_CODE = 0,		/* the code: a regular file or memfd */
	JAIL_WIRE_FD_STDOUT = 1,	/* the payload's stdout */
	JAIL_WIRE_FD_STDERR = 2,	/* the payload's stderr */
	JAIL_WIRE_NFDS = 3,
	JAIL_WIRE_FD_SECRETS = 3,	/* the run's secrets, for its proxy only */
	JAIL_WIRE_NFDS_MAX = 4
} JailWireFd;

/* The option that names the secrets' descriptor, and its value on the wire. */
#define JAIL_WIRE_SECRETS_OPTION	"--egress-secrets-fd"
#define JAIL_WIRE_SECRETS_INDEX		"3"

/* The fields of an answer, in this order. */
typedef enum JailWireAnswerField
{
	JAIL_WIRE_ANSWER_MAGIC = 0,
	JAIL_WIRE_ANSWER_RC = 1,
	JAIL_WIRE_ANSWER_VERDICT = 2,
	JAIL_WIRE_ANSWER_MESSAGE = 3,
	JAIL_WIRE_ANSWER_NFIELDS = 4
} JailWireAnswerField;

/* The rc of a refused request (the same as a one-shot jail's usage error). */
#define JAIL_WIRE_RC_REFUSED 2

/*
 * wire.c: one message with descriptors, both ways (compiled into the jail
 * and, as src/jail_wire.c, into the extension).
 */
#define JAIL_WIRE_FDS_MAX 16		/* descriptors one message may carry */
extern ssize_t jail_wire_send(int sock, const void *buf, size_t len,
							  const int *fds, int nfds);
extern ssize_t jail_wire_send_flags(int sock, const void *buf, size_t len,
									const int *fds, int nfds, int flags);
extern ssize_t jail_wire_recv(int sock, void *buf, size_t len, int *fds,
							  int maxfds, int *nfds, bool *truncated);

/*
 * wire.c: a request, built in one place (the jail's --client and
 * sandbox-runner): the magic, then each string added, into the caller's
 * buffer of JAIL_WIRE_MAX bytes.  A string that does not fit, or one more
 * than JAIL_WIRE_MAX_ARGS, makes the request full: it must not be sent.
 */
typedef struct JailWireRequest
{
	char	   *buf;
	size_t		len;			/* bytes of buf used */
	int			nstrings;		/* strings after the magic */
	bool		full;
} JailWireRequest;

extern void jail_wire_request_init(JailWireRequest *r, char *buf);
extern bool jail_wire_request_add(JailWireRequest *r, const char *s);

/* wire.c: an answer, written and read in one place each. */
extern int	jail_wire_format_answer(char *buf, size_t len, int rc,
									const char *verdict, const char *msg);
extern bool jail_wire_split_answer(const char *buf, size_t len,
								   const char *field[JAIL_WIRE_ANSWER_NFIELDS]);

/*
 * Warm interpreters (docs/jail.md, "Warm interpreters").  A launcher
 * started with --warm-python/--warm-node also listens on SOCKET
 * JAIL_WARM_SOCK_SUFFIX[lang] (same protocol), where only workers whose
 * interpreter is started and waiting accept, and keeps the page
 * SOCKET JAIL_WARM_PAGE_SUFFIX (a file, mode 0600, mapped shared): each
 * such worker adds one to ready[lang] when it starts waiting; a caller
 * that takes one (jail_wire_warm_claim) connects to that language's warm
 * socket, where a waiting interpreter is then sure to answer; a caller
 * that finds none uses SOCKET as before (a cold run).  held[] is what
 * the waiting interpreters hold (their slots' memory), for the caller to
 * show (agent.worker_status()).
 */
#define JAIL_WARM_PAGE_MAGIC	"sandbox-warm/1"
#define JAIL_WARM_PAGE_SUFFIX	".warm"
#define JAIL_WARM_MAX			16	/* warm workers per launcher, all languages */

typedef enum JailWarmLang
{
	JAIL_WARM_PYTHON = 0,
	JAIL_WARM_NODE = 1,
	JAIL_WARM_NLANG = 2
} JailWarmLang;

static const char *const JAIL_WARM_SOCK_SUFFIX[JAIL_WARM_NLANG] = {".python", ".node"};

typedef struct JailWarmHeld
{
	int32_t		pid;			/* the waiting worker; 0: free entry */
	int32_t		lang;			/* JailWarmLang */
	uint64_t	bytes;			/* its slot's memory while it waits */
} JailWarmHeld;

typedef struct JailWarmPage
{
	char		magic[16];		/* JAIL_WARM_PAGE_MAGIC */
	int32_t		ready[JAIL_WARM_NLANG];	/* waiting and not yet claimed */
	int32_t		configured[JAIL_WARM_NLANG];	/* --warm-python, --warm-node */
	uint64_t	limit_bytes;	/* --warm-memory: all warm slots together */
	JailWarmHeld held[JAIL_WARM_MAX];
	char		problem[JAIL_WARM_NLANG][200];	/* why the last interpreter of
												 * lang did not start; "" once
												 * one did */
} JailWarmPage;

/* wire.c: the page, both ends (atomic: the launcher's workers and callers) */
extern bool jail_wire_warm_claim(JailWarmPage *page, JailWarmLang lang);
extern void jail_wire_warm_post(JailWarmPage *page, JailWarmLang lang, int delta);
extern uint64_t jail_wire_warm_held(const JailWarmPage *page, int *count);
extern JailWarmPage *jail_wire_warm_map(const char *sock_path, bool writable);

/* wire.c: what --warm-modules may hold (also sandbox.warm_modules) */
#define JAIL_WARM_MODULES_LEN	500
extern bool jail_wire_check_modules(const char *list, char *err, size_t errlen);

#endif							/* SANDBOX_JAIL_WIRE_PROTOCOL_H */
