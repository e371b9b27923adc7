/* api_suspend.c — NCCL 2.29's ncclCommSuspend / ncclCommResume and ncclCommMemStats.
 *
 * Suspending completes the communicator's work (the calls in flight on other threads return,
 * the streams its calls went to drain) and then refuses its calls, each with an error that says
 * to resume, until ncclCommResume; with NCCL_SUSPEND_MEM it also gives back the scratch memory
 * (the pre-multiplied inputs, the copies of in-place all-to-all), which is made again on use.
 * Both are local to the calling rank. Calls queued in a group before the suspension still run
 * at its ncclGroupEnd: their peers are committed to them.
 *
 * The statistics are what this front end holds on the GPU: scratch (given back by suspending
 * with NCCL_SUSPEND_MEM) and the buffers and windows registered on the communicator (kept).
 * The transport's own small device state and the host segment are not counted. */
#include "config.h"

#include <sched.h>

#include "nccl/internal.h"

ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags)
{
  const char *fn = "ncclCommSuspend";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (flags & ~SHMDDP_NCCL_SUSPEND_MEM)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument flags is %#x: use 0 or "
                     "NCCL_SUSPEND_MEM (%#x)", fn, (unsigned)flags, SHMDDP_NCCL_SUSPEND_MEM);
  int expected = 0;
  if (!atomic_compare_exchange_strong(&comm->suspended, &expected, 1))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator is suspended already", fn);
  while (atomic_load(&comm->inflight) > 0) sched_yield();
  r = nccl_comm_drain(comm, fn);
  if (r != ncclSuccess) return r; /* stays suspended: resume, or destroy it */
  if (flags & SHMDDP_NCCL_SUSPEND_MEM) {
    nccl_scratch_release(comm);
    atomic_store(&comm->suspended, 2);
  }
  nccl_log(comm, 2, "suspended%s", flags ? ", scratch memory given back" : "");
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommSuspend)

ncclResult_t ncclCommResume(ncclComm_t comm)
{
  const char *fn = "ncclCommResume";
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  if (atomic_exchange(&comm->suspended, 0) == 0)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator is not suspended", fn);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommResume)

ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value)
{
  const char *fn = "ncclCommMemStats";
  if (!comm || !value)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn,
                     comm ? "value" : "comm");
  uint64_t scratch = comm->device >= 0 ? nccl_scratch_bytes(comm) : 0;
  uint64_t kept = nccl_reg_bytes(comm);
  switch (stat) {
  case ncclStatGpuMemSuspend: *value = scratch; break;
  case ncclStatGpuMemSuspended: *value = atomic_load(&comm->suspended) == 2; break;
  case ncclStatGpuMemPersist: *value = kept; break;
  case ncclStatGpuMemTotal: *value = scratch + kept; break;
  default:
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument stat is %d, not an "
                     "ncclCommMemStat_t (0..3)", fn, (int)stat);
  }
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommMemStats)
