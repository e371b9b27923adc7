/* check.c — the argument checks the entry points share. A refused argument is named in the
 * message (ncclGetLastError) and returned by the call that received it, before anything is
 * queued or any peer waits. */
#include "config.h"

#include "nccl/internal.h"

ncclResult_t nccl_check_comm(ncclComm_t comm, const char *fn)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  if (atomic_load(&comm->aborted))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", fn);
  if (atomic_load(&comm->revoked))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was revoked "
                     "(ncclCommRevoke, or ncclCommShrink with NCCL_SHRINK_ABORT): destroy it",
                     fn);
  if (atomic_load(&comm->suspended))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator is suspended "
                     "(ncclCommSuspend): call ncclCommResume first", fn);
  if (comm->init_result == ncclInProgress && !nccl_in_group())
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init has not run (call "
                     "ncclGroupEnd first)", fn);
  if (comm->init_result != ncclSuccess && comm->init_result != ncclInProgress)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init failed", fn);
  return ncclSuccess;
}

ncclResult_t nccl_check_buf(ncclComm_t comm, const char *fn, const char *arg, const void *p,
                            size_t count)
{
  if (count > 0 && !p)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL (count %zu)", fn, arg,
                     count);
  return ncclSuccess;
}

ncclResult_t nccl_check_rank(ncclComm_t comm, const char *fn, const char *arg, int r)
{
  if (r < 0 || r >= comm->nranks)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is %d, not a rank of this "
                     "communicator (0..%d)", fn, arg, r, comm->nranks - 1);
  return ncclSuccess;
}
