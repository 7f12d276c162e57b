/*-------------------------------------------------------------------------
 *
 * channels.h
 *		The NOTIFY channels of the wake-ups across processes, written once
 *		for the extension (src/shmem.c sends them at commit) and for
 *		sandbox-runner (src/runner/, which LISTENs).  Frontend-safe: no
 *		postgres.h here.
 *
 * Notifications carry no payload: a runner treats one as a reason to look
 * (claim, or look for cancel requests), never as data, since any role may
 * NOTIFY any channel.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SANDBOX_CHANNELS_H
#define SANDBOX_CHANNELS_H

/* approved work, a freed org slot, ended sessions (agent._wake_supervisor) */
#define SANDBOX_CHANNEL_WORK	"sandbox_ext_work"
/* a cancel request of a run in flight (agent._wake_supervisor_cancel) */
#define SANDBOX_CHANNEL_CANCEL	"sandbox_ext_cancel"

#endif							/* SANDBOX_CHANNELS_H */
