/*-------------------------------------------------------------------------
 *
 * jail_wire.c
 *		The jail's src/jail/wire.c, compiled into the extension: the
 *		supervisor sends its requests to the resident launcher with the same
 *		code the jail's own client uses (src/jail/wire_protocol.h).  That
 *		file includes only the C library, never postgres.h.
 *
 *-------------------------------------------------------------------------
 */
#include "jail/wire.c"
