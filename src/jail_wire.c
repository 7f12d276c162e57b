/*-------------------------------------------------------------------------
 *
 * jail_wire.c
 *		The jail's src/jail/wire.c, compiled into the extension for the
 *		warm pool's page (agent.worker_status() reads what the local
 *		launcher's warm interpreters hold) and the check of
 *		sandbox.warm_modules: one definition of each, shared with the jail
 *		and the runner (src/jail/wire_protocol.h).  That file includes only
 *		the C library, never postgres.h.
 *
 *-------------------------------------------------------------------------
 */
#include "jail/wire.c"
