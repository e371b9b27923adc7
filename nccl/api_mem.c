/* api_mem.c — NCCL's memory calls: ncclMemAlloc/Free (device memory that every peer maps
 * without a copy), buffer and window registration on a communicator's device transport
 * (window.c keeps them; the memory itself is shared by collectives/devmem/ and
 * collectives/cuda/cuda_reg.c). */
#include "config.h"

#include "nccl/internal.h"

ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
  if (!ptr) return nccl_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: argument ptr is NULL");
  return nccl_dev_mem_alloc(ptr, size);
}
NCCL_ALIAS(ncclMemAlloc)

ncclResult_t ncclMemFree(void *ptr) { return nccl_dev_mem_free(ptr); }
NCCL_ALIAS(ncclMemFree)

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
  const char *fn = "ncclCommRegister";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (!handle || !buff)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn,
                     handle ? "buff" : "handle");
  return nccl_reg_add(comm, fn, buff, size, 0, 0, (ncclWindow_t *)handle);
}
NCCL_ALIAS(ncclCommRegister)

/* Releasing needs no peer: it is served on a revoked or failed communicator too. */
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
  const char *fn = "ncclCommDeregister";
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  return nccl_reg_remove(comm, fn, "handle", handle, 0);
}
NCCL_ALIAS(ncclCommDeregister)

#define WIN_FLAGS_KNOWN                                                                       \
  (SHMDDP_NCCL_WIN_COLL_SYMMETRIC | SHMDDP_NCCL_WIN_STRICT_ORDERING | SHMDDP_NCCL_WIN_GIN_ONLY)

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags)
{
  const char *fn = "ncclCommWindowRegister";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (!win || !buff)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn,
                     win ? "buff" : "win");
  *win = NULL;
  if (size == 0) return nccl_fail(comm, ncclInvalidArgument, "%s: argument size is 0", fn);
  if (winFlags & ~WIN_FLAGS_KNOWN)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument winFlags is %#x: use a set of "
                     "NCCL_WIN_COLL_SYMMETRIC, NCCL_WIN_STRICT_ORDERING, NCCL_WIN_GIN_ONLY (%#x), "
                     "or NCCL_WIN_DEFAULT (0)", fn, (unsigned)winFlags, WIN_FLAGS_KNOWN);
  return nccl_reg_add(comm, fn, buff, size, 1, winFlags, win);
}
NCCL_ALIAS(ncclCommWindowRegister)

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
  const char *fn = "ncclCommWindowDeregister";
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  return nccl_reg_remove(comm, fn, "win", win, 1);
}
NCCL_ALIAS(ncclCommWindowDeregister)
