/* dev.c — the few CUDA runtime calls the NCCL front end makes itself (which GPU, streams,
 * scratch memory, copies). A CPU-only build has no GPU: every communicator is host-only, its
 * buffers are host memory and its calls complete before they return. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

#if HAVE_CUDA
#include <cuda_runtime_api.h>

#include "collectives/devmem/devmem_cuda.h"
#include "shmddp_cuda.h"

static ncclResult_t cuda_fail(ncclComm_t comm, cudaError_t e, const char *what)
{
  (void)cudaGetLastError();
  return nccl_fail(comm, ncclUnhandledCudaError, "%s: %s", what, cudaGetErrorString(e));
}

int nccl_dev_current(void)
{
  int n = 0, d = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

int nccl_dev_select(int device)
{
  if (device < 0) return 0;
  if (cudaSetDevice(device) == cudaSuccess) return 0;
  (void)cudaGetLastError();
  return -1;
}

shmddp_stream_t nccl_dev_stream(ncclComm_t comm, void *stream)
{
  if (comm->device < 0) return SHMDDP_HOST;
  return (shmddp_stream_t)(stream ? (cudaStream_t)stream : cudaStreamLegacy);
}

ncclResult_t nccl_dev_alloc(ncclComm_t comm, void **p, size_t bytes, int on_device)
{
  if (!on_device) {
    *p = malloc(bytes ? bytes : 1);
    return *p ? ncclSuccess : nccl_fail(comm, ncclSystemError, "out of host memory (%zu bytes)",
                                        bytes);
  }
  cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
  return e == cudaSuccess ? ncclSuccess : cuda_fail(comm, e, "cudaMalloc of scratch memory");
}

void nccl_dev_free(void *p, int on_device)
{
  if (!on_device) {
    free(p);
  } else if (p && cudaFree(p) != cudaSuccess) {
    (void)cudaGetLastError();
  }
}

ncclResult_t nccl_dev_copy(ncclComm_t comm, void *dst, const void *src, size_t bytes, void *stream)
{
  if (bytes == 0 || dst == src) return ncclSuccess;
  if (comm->device < 0) {
    memmove(dst, src, bytes);
    return ncclSuccess;
  }
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                  (cudaStream_t)nccl_dev_stream(comm, stream));
  return e == cudaSuccess ? ncclSuccess : cuda_fail(comm, e, "copying to oneself");
}

ncclResult_t nccl_dev_sync(ncclComm_t comm, void *stream)
{
  if (comm->device < 0) return ncclSuccess;
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)nccl_dev_stream(comm, stream));
  return e == cudaSuccess ? ncclSuccess : cuda_fail(comm, e, "waiting for a stream");
}

shmddp_status_t nccl_dev_check(shmddp_comm_t *c) { return shmddp_cuda_check(c); }

/* Memory the peers map without a copy: collectives/devmem/devmem_cuda.c. */
ncclResult_t nccl_dev_mem_alloc(void **ptr, size_t bytes)
{
  char err[256];
  if (devmem_cuda_alloc(ptr, bytes, err, sizeof err) != 0)
    return nccl_fail(NULL, ncclUnhandledCudaError, "ncclMemAlloc(%zu): %s", bytes, err);
  return ncclSuccess;
}

ncclResult_t nccl_dev_mem_free(void *ptr)
{
  char err[256];
  if (devmem_cuda_free(ptr, err, sizeof err) != 0)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclMemFree: %s", err);
  return ncclSuccess;
}

/* Registered on the main communicator; the pairs of send/recv share buffers on first use. */
ncclResult_t nccl_dev_register(ncclComm_t comm, void *buff, size_t bytes, void **handle)
{
  *handle = NULL;
  if (comm->device < 0) return ncclSuccess; /* host-only communicator: nothing to share */
  shmddp_status_t st = shmddp_cuda_register(comm->c, buff, bytes, handle);
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, comm->c, "ncclCommRegister");
}

ncclResult_t nccl_dev_deregister(ncclComm_t comm, void *handle)
{
  if (comm->device < 0 || !handle) return ncclSuccess;
  shmddp_status_t st = shmddp_cuda_deregister(comm->c, handle);
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, comm->c, "ncclCommDeregister");
}

const char *nccl_dev_transport(shmddp_comm_t *c)
{
  int p = shmddp_cuda_p2p(c);
  return p > 0 ? "P2P on" : p == 0 ? "host-staged (no P2P)" : "host only";
}

#else /* no CUDA in this build */

int nccl_dev_current(void) { return -1; }
int nccl_dev_select(int device) { return device < 0 ? 0 : -1; }
shmddp_stream_t nccl_dev_stream(ncclComm_t comm, void *stream)
{
  (void)comm;
  (void)stream;
  return SHMDDP_HOST;
}

ncclResult_t nccl_dev_alloc(ncclComm_t comm, void **p, size_t bytes, int on_device)
{
  if (on_device) return nccl_fail(comm, ncclInvalidUsage, "this build of shmddp has no CUDA");
  *p = malloc(bytes ? bytes : 1);
  return *p ? ncclSuccess : nccl_fail(comm, ncclSystemError, "out of host memory (%zu bytes)",
                                      bytes);
}

void nccl_dev_free(void *p, int on_device)
{
  (void)on_device;
  free(p);
}

ncclResult_t nccl_dev_copy(ncclComm_t comm, void *dst, const void *src, size_t bytes, void *stream)
{
  (void)comm;
  (void)stream;
  if (bytes && dst != src) memmove(dst, src, bytes);
  return ncclSuccess;
}

ncclResult_t nccl_dev_sync(ncclComm_t comm, void *stream)
{
  (void)comm;
  (void)stream;
  return ncclSuccess;
}

shmddp_status_t nccl_dev_check(shmddp_comm_t *c)
{
  (void)c;
  return SHMDDP_OK;
}

ncclResult_t nccl_dev_mem_alloc(void **ptr, size_t bytes)
{
  *ptr = NULL;
  return nccl_fail(NULL, ncclInvalidUsage, "ncclMemAlloc(%zu): this build of shmddp has no CUDA",
                   bytes);
}

ncclResult_t nccl_dev_mem_free(void *ptr)
{
  if (!ptr) return ncclSuccess;
  return nccl_fail(NULL, ncclInvalidArgument, "ncclMemFree: %p was not made by ncclMemAlloc", ptr);
}

ncclResult_t nccl_dev_register(ncclComm_t comm, void *buff, size_t bytes, void **handle)
{
  (void)comm;
  (void)buff;
  (void)bytes;
  *handle = NULL; /* host-only communicators: nothing to share */
  return ncclSuccess;
}

ncclResult_t nccl_dev_deregister(ncclComm_t comm, void *handle)
{
  (void)comm;
  (void)handle;
  return ncclSuccess;
}

const char *nccl_dev_transport(shmddp_comm_t *c)
{
  (void)c;
  return "host only";
}
#endif
