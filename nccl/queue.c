/* queue.c — ncclGroupStart/End. Outside a group a call runs at once. Inside, calls are queued
 * per thread (their descriptors hold everything they need, so an op destroyed or a slot reused
 * before ncclGroupEnd changes nothing) and handed to the executor at the outermost
 * ncclGroupEnd. */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>

#include "nccl/internal.h"

_Static_assert(sizeof(ncclSimInfo_t) == 24, "ncclSimInfo_t layout (x86-64, 2.22)");

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

/* The client's ncclSimInfo_t: magic, and a size and version of a release that has it (2.22);
 * "" or why not. */
static const char *sim_info_problem(const ncclSimInfo_t *si)
{
  if (!si) return "argument simInfo is NULL";
  if (si->magic != SHMDDP_NCCL_SIM_INFO_MAGIC) return "ncclSimInfo_t has the wrong magic";
  if (si->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof si->estimatedTime)
    return "ncclSimInfo_t is smaller than any release's";
  if (si->version < SHMDDP_NCCL_SIM_INFO_SINCE) return "ncclSimInfo_t's version predates it";
  return "";
}

/* Ends the group without running its calls (they are dropped, as NCCL drops them) and reports
 * their estimated time. A refused simInfo leaves the group open: call ncclGroupEnd, or this
 * again with a valid one. Inside a nested group only the depth drops; the calls stay queued. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
  const char *fn = "ncclGroupSimulateEnd";
  if (depth == 0) return nccl_fail(NULL, ncclInvalidUsage, "%s without ncclGroupStart", fn);
  const char *problem = sim_info_problem(simInfo);
  if (problem[0])
    return nccl_fail(NULL, ncclInvalidArgument, "%s: %s: initialise it with "
                     "NCCL_SIM_INFO_INITIALIZER (the group is still open)", fn, problem);
  simInfo->estimatedTime = nccl_sim_estimate(queue, nqueue);
  if (--depth > 0) return ncclSuccess;
  nqueue = 0;
  free(queue);
  queue = NULL;
  capqueue = 0;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupSimulateEnd)
