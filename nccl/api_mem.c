/* api_mem.c — NCCL's memory calls: ncclMemAlloc/Free (device memory that peers can map) and
 * buffer registration. shmddp registers each allocation at its first use in a collective, so a
 * registration is accepted and its handle is the buffer. */
#include "config.h"

#include "nccl/internal.h"

ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
  if (!ptr) return nccl_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: argument ptr is NULL");
  ncclComm_t none = NULL;
  return nccl_dev_alloc(none, ptr, size, 1);
}
NCCL_ALIAS(ncclMemAlloc)

ncclResult_t ncclMemFree(void *ptr)
{
  nccl_dev_free(ptr, 1);
  return ncclSuccess;
}
NCCL_ALIAS(ncclMemFree)

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
  const char *fn = "ncclCommRegister";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (!handle) return nccl_fail(comm, ncclInvalidArgument, "%s: argument handle is NULL", fn);
  r = nccl_check_buf(comm, fn, "buff", buff, size);
  if (r != ncclSuccess) return r;
  *handle = buff;
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommRegister)

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommDeregister: argument comm is NULL");
  (void)handle;
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommDeregister)
