/* stubs.c — entry points NCCL's clients import but shmddp does not serve. They exist so that a
 * client loads (a missing symbol makes `import torch` fail); each returns ncclInvalidUsage and
 * says once on stderr which call it was and why it is not served. Their arguments are not used,
 * so they are declared without them (the C calling convention leaves the caller's arguments
 * alone).
 *
 * The device API (ncclDevCommCreate/Destroy, NCCL 2.28): a device communicator is used from
 * the client's own kernels through NCCL's device-side library, compiled into them; shmddp has
 * no such library, so a device communicator would be of no use to those kernels.
 * One-sided put and signal (ncclPutSignal/ncclWaitSignal, NCCL 2.29): they write into a peer's
 * window without the peer taking part; our windows are registrations for two-sided
 * collectives, and the transport has no one-sided path or signal slots to serve them with. */
#include "config.h"

#include "nccl/internal.h"

#define UNSERVED(name, why)                                                                   \
  ncclResult_t name(void);                                                                    \
  ncclResult_t name(void) { return nccl_unsupported(#name, why); }                            \
  NCCL_ALIAS(name)

#define DEVICE_API                                                                            \
  "NCCL's device API needs NCCL's device-side library in the client's kernels, which shmddp "  \
  "does not have: use the host calls (collectives, send/recv) instead"
#define ONE_SIDED                                                                             \
  "shmddp has no one-sided transport: use ncclSend/ncclRecv (in a group) instead"

UNSERVED(ncclDevCommCreate, DEVICE_API)
UNSERVED(ncclDevCommDestroy, DEVICE_API)
UNSERVED(ncclPutSignal, ONE_SIDED)
UNSERVED(ncclWaitSignal, ONE_SIDED)
