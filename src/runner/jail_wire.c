/*-------------------------------------------------------------------------
 *
 * jail_wire.c
 *		The jail's src/jail/wire.c, compiled into the runner: requests go
 *		to the resident launcher with the same code the jail's own client
 *		uses (src/jail/wire_protocol.h).  That file includes only the C
 *		library.
 *
 *-------------------------------------------------------------------------
 */
#include "../jail/wire.c"
