/* cuda_coloc.h — the kernel of the co-located path (coloc_kernel.cu) and its arguments: a leader's
 * work in one launch, as up to CUDA_MAXR jobs (blockIdx.y), each reducing (or copying) n
 * elements from its sources into its destinations. Plain C types: C and CUDA include it. */
#ifndef COLL_CUDA_COLOC_H
#define COLL_CUDA_COLOC_H

#include <stddef.h>

#include "collectives/cuda_internal.h"

typedef struct {
  const void *src[CUDA_MAXR]; /* REDUCE: reduced in this order (rank order); COPY: src[0] */
  void *dst[CUDA_MAXR];       /* every destination gets the same values */
  int nsrc, ndst;
  int vec; /* every pointer 16-byte aligned */
} cuda_coloc_job_t;

typedef struct {
  int mode; /* CUDA_DIRECT_REDUCE or CUDA_DIRECT_COPY */
  int dtype, op, avg_div, njobs;
  size_t n; /* per job: elements (REDUCE) or bytes (COPY) */
  cuda_coloc_job_t job[CUDA_MAXR];
} cuda_coloc_args_t;

#ifdef __cplusplus
extern "C" {
#endif
/* Launch the jobs on stream, on a GPU of sms multiprocessors (one wave of blocks: every one
 * resident at once); 0 or the cudaError_t of the launch. */
int cuda_launch_coloc(const cuda_coloc_args_t *a, int sms, void *stream);
#ifdef __cplusplus
}
#endif

#endif
