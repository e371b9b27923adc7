/* stubs.c — entry points NCCL's clients import but shmddp does not serve (device communicators,
 * windows, shrink/grow, suspend/resume, memory statistics, one-sided signals, some only in
 * releases after 2.28). They exist so that a client loads (a missing symbol makes `import
 * torch` fail); each returns ncclInvalidUsage and
 * says once on stderr which call it was. Their arguments are not used, so they are declared
 * without them (the C calling convention leaves the caller's arguments alone). */
#include "config.h"

#include "nccl/internal.h"

#define UNSERVED(name)                                                                        \
  ncclResult_t name(void);                                                                    \
  ncclResult_t name(void) { return nccl_unsupported(#name); }                                 \
  NCCL_ALIAS(name)

UNSERVED(ncclDevCommCreate)
UNSERVED(ncclDevCommDestroy)
UNSERVED(ncclPutSignal)
UNSERVED(ncclWaitSignal)
