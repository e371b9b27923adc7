/* devmem_cuda.h — the CUDA driver behind devmem.h's table, and memory that every peer can map
 * without a copy (what ncclMemAlloc hands out). CUDA build only. */
#ifndef COLL_DEVMEM_CUDA_H
#define COLL_DEVMEM_CUDA_H

#include <stddef.h>

#include "collectives/devmem/devmem.h"

typedef struct {
  int device; /* the rank's GPU: mappings of peers' memory are made accessible to it */
} devmem_cuda_ctx_t;

/* Fill drv (ctx points at ctx, which must outlive it) from the CUDA driver; 0 or -1 with err. */
int devmem_cuda_driver(devmem_driver_t *drv, devmem_cuda_ctx_t *ctx, char *err, size_t errlen);

/* bytes of device memory on the current GPU that peers map zero-copy: cuMem memory with a POSIX
 * file descriptor handle, rounded up to the allocation granularity and accessible from every GPU
 * that can reach it; cudaMalloc memory where the GPU has no cuMem. 0 or -1 with err. */
int devmem_cuda_alloc(void **ptr, size_t bytes, char *err, size_t errlen);
/* Free what devmem_cuda_alloc returned (NULL is fine). */
int devmem_cuda_free(void *ptr, char *err, size_t errlen);

#endif
