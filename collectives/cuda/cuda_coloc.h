/* cuda_coloc.h — the kernel of the co-located path (coloc_kernel.cu) and its arguments: a leader's
 * work in one launch, as up to CUDA_MAXR jobs (blockIdx.y), each reducing (or copying) n
 * elements from its sources into its destinations, or (CONCAT) putting its sources one after
 * the other into them. Plain C types: C and CUDA include it; coloc_jobs.h builds the jobs of a
 * call and runs them on the host (the kernel's reference). */
#ifndef COLL_CUDA_COLOC_H
#define COLL_CUDA_COLOC_H

#include <stddef.h>

#include "collectives/cuda/cuda_internal.h"

/* CONCAT: source s of a job goes to bytes [s * n, (s + 1) * n) of each destination (a NULL
 * source: that range is left as it is); all-to-all, gather and scatter. */
enum { CUDA_COLOC_CONCAT = 2 };

typedef struct {
  const void *src[CUDA_MAXR]; /* REDUCE: reduced in this order (rank order); COPY: src[0];
                                 CONCAT: in this order */
  void *dst[CUDA_MAXR];       /* every destination gets the same values */
  int nsrc, ndst;
  int vec; /* every pointer (and CONCAT's n) a multiple of 16 bytes */
} cuda_coloc_job_t;

typedef struct {
  int mode; /* CUDA_DIRECT_REDUCE, CUDA_DIRECT_COPY or CUDA_COLOC_CONCAT */
  int dtype, op, avg_div, njobs;
  size_t n; /* per job: elements (REDUCE) or bytes (COPY; CONCAT: per source) */
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
