/* queue.c — ncclGroupStart/End. Outside a group a call runs at once. Inside, calls are queued
 * per thread (their descriptors hold everything they need, so an op destroyed or a slot reused
 * before ncclGroupEnd changes nothing) and handed to the executor at the outermost
 * ncclGroupEnd. */
#include "config.h"

#include <stdlib.h>

#include "nccl/internal.h"

static _Thread_local int depth;
static _Thread_local nccl_call_t *queue;
static _Thread_local size_t nqueue, capqueue;

int nccl_in_group(void) { return depth > 0; }

ncclResult_t nccl_enqueue(const nccl_call_t *k)
{
  if (depth == 0) return nccl_exec_one(k);
  if (nqueue == capqueue) {
    size_t cap = capqueue ? 2 * capqueue : 16;
    nccl_call_t *q = realloc(queue, cap * sizeof *q);
    if (!q) return nccl_fail(k->comm, ncclSystemError, "%s: out of host memory queueing a call",
                             k->fn);
    queue = q;
    capqueue = cap;
  }
  queue[nqueue++] = *k;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
  depth++;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart)

ncclResult_t ncclGroupEnd(void)
{
  if (depth == 0)
    return nccl_fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--depth > 0) return ncclSuccess;
  size_t n = nqueue;
  nqueue = 0;
  ncclResult_t r = nccl_exec_group(queue, n);
  /* Given back at once: a thread's queue must not outlive the thread (a rank per thread). */
  free(queue);
  queue = NULL;
  capqueue = 0;
  return r;
}
NCCL_ALIAS(ncclGroupEnd)

/* Checks a group without running it; shmddp has no cost model to report, so it says so. */
ncclResult_t ncclGroupSimulateEnd(void *simInfo)
{
  (void)simInfo;
  if (depth == 0)
    return nccl_fail(NULL, ncclInvalidUsage, "ncclGroupSimulateEnd without ncclGroupStart");
  if (--depth == 0) {
    nqueue = 0;
    free(queue);
    queue = NULL;
    capqueue = 0;
  }
  return nccl_unsupported("ncclGroupSimulateEnd");
}
NCCL_ALIAS(ncclGroupSimulateEnd)
