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
#include <sys/types.h>

#define JAIL_WIRE_MAGIC		"sandbox-jail/1"
#define JAIL_WIRE_MAX		65536	/* one request or answer message */
#define JAIL_WIRE_MAX_ARGS	256		/* strings in one request */

/* The descriptors a request carries, in this order. */
typedef enum JailWireFd
{
	JAIL_WIRE_FD_CODE = 0,		/* the code: a regular file or memfd */
	JAIL_WIRE_FD_STDOUT = 1,	/* the payload's stdout */
	JAIL_WIRE_FD_STDERR = 2,	/* the payload's stderr */
	JAIL_WIRE_NFDS = 3
} JailWireFd;

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
extern ssize_t jail_wire_send(int sock, const void *buf, size_t len,
							  const int *fds, int nfds);
extern ssize_t jail_wire_recv(int sock, void *buf, size_t len, int *fds,
							  int maxfds, int *nfds, bool *truncated);

/* wire.c: an answer, written and read in one place each. */
extern int	jail_wire_format_answer(char *buf, size_t len, int rc,
									const char *verdict, const char *msg);
extern bool jail_wire_split_answer(const char *buf, size_t len,
								   const char *field[JAIL_WIRE_ANSWER_NFIELDS]);

#endif							/* SANDBOX_JAIL_WIRE_PROTOCOL_H */
