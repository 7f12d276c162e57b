/*-------------------------------------------------------------------------
 *
 * tls.c
 *	  The server name (SNI) of a TLS ClientHello, read from the first bytes
 *	  a client sends through a CONNECT tunnel, so the proxy can require it
 *	  to be the host the tunnel was asked for (no domain fronting by SNI).
 *	  The ClientHello must sit in the first record (as every common client
 *	  sends it); anything else is refused, never guessed at.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <string.h>

#include "egress.h"

#define NEED(n) do { if (off + (n) > end) return EGRESS_SNI_NOT_TLS; } while (0)

int
egress_tls_sni(const uint8_t *b, size_t len, char *sni, size_t snilen)
{
	size_t		rec,
				hs,
				off,
				end,
				l;

	if (len >= 1 && b[0] != 0x16)
		return EGRESS_SNI_NOT_TLS;
	if (len < 5)
		return EGRESS_SNI_SHORT;
	if (b[1] != 3)
		return EGRESS_SNI_NOT_TLS;
	rec = (b[3] << 8) | b[4];
	if (rec < 4 || rec > 16384)
		return EGRESS_SNI_NOT_TLS;
	if (len < 5 + rec)
		return EGRESS_SNI_SHORT;
	if (b[5] != 1)				/* ClientHello */
		return EGRESS_SNI_NOT_TLS;
	hs = (b[6] << 16) | (b[7] << 8) | b[8];
	if (hs + 4 > rec)
		return EGRESS_SNI_NOT_TLS;	/* split over records: refused */
	off = 9;
	end = 9 + hs;
	NEED(2 + 32);
	off += 2 + 32;				/* version, random */
	NEED(1);
	l = b[off];
	off += 1;
	NEED(l);
	off += l;					/* session id */
	NEED(2);
	l = (b[off] << 8) | b[off + 1];
	off += 2;
	NEED(l);
	off += l;					/* cipher suites */
	NEED(1);
	l = b[off];
	off += 1;
	NEED(l);
	off += l;					/* compression */
	if (off == end)
		return EGRESS_SNI_NONE;
	NEED(2);
	l = (b[off] << 8) | b[off + 1];
	off += 2;
	NEED(l);
	end = off + l;
	while (off + 4 <= end)
	{
		unsigned	type = (b[off] << 8) | b[off + 1];
		size_t		elen = (b[off + 2] << 8) | b[off + 3];

		off += 4;
		NEED(elen);
		if (type == 0)
		{
			size_t		e = off + elen;
			size_t		nlen;

			/* server_name_list: one host_name entry is all we accept */
			if (elen < 5 || (size_t) ((b[off] << 8) | b[off + 1]) != elen - 2 ||
				b[off + 2] != 0)
				return EGRESS_SNI_NOT_TLS;
			nlen = (b[off + 3] << 8) | b[off + 4];
			if (off + 5 + nlen != e || nlen == 0 || nlen >= snilen)
				return EGRESS_SNI_NOT_TLS;
			for (size_t i = 0; i < nlen; i++)
			{
				unsigned char c = b[off + 5 + i];

				if (c < 0x21 || c > 0x7e)
					return EGRESS_SNI_NOT_TLS;
				sni[i] = tolower(c);
			}
			sni[nlen] = '\0';
			return EGRESS_SNI_FOUND;
		}
		off += elen;
	}
	return EGRESS_SNI_NONE;
}
