/* api_mem.c — NCCL's memory calls: ncclMemAlloc/Free (device memory that every peer maps
 * without a copy) and buffer registration on a communicator's device transport (the memory
 * itself is shared by collectives/devmem*.c and cuda_reg.c). */
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
  return nccl_dev_register(comm, buff, size, handle);
}
NCCL_ALIAS(ncclCommRegister)

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
  ncclResult_t r = nccl_check_comm(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  return nccl_dev_deregister(comm, handle);
}
NCCL_ALIAS(ncclCommDeregister)
