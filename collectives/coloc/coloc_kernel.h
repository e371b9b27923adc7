/* coloc_kernel.h — the kernel of the co-located path (coloc_kernel.cu) and its arguments: a
 * leader's work in one launch, as up to SHMDDP_MAX_RANKS jobs (blockIdx.y), each reducing (or
 * copying) n elements from its sources into its destinations, or (CONCAT) putting its sources one
 * after the other into them. Plain C types: C and CUDA include it; coloc_jobs.h builds the jobs
 * of a call and runs them on the host (the kernel's reference). */
#ifndef COLL_COLOC_KERNEL_H
#define COLL_COLOC_KERNEL_H

#include <stddef.h>

#include "shmddp.h"

/* What every job of a launch does. REDUCE: its sources, reduced in their order, into every
 * destination; COPY: its one source into every destination; CONCAT: source s goes to bytes
 * [s * n, (s + 1) * n) of each destination (a NULL source: that range is left as it is), for
 * all-to-all, gather and scatter. */
enum { COLOC_REDUCE = 0, COLOC_COPY = 1, COLOC_CONCAT = 2 };

typedef struct {
  const void *src[SHMDDP_MAX_RANKS]; /* REDUCE: reduced in this order (rank order); COPY: src[0];
                                        CONCAT: in this order */
  void *dst[SHMDDP_MAX_RANKS];       /* every destination gets the same values */
  int nsrc, ndst;
  int vec; /* every pointer (and CONCAT's n) a multiple of 16 bytes */
} coloc_job_t;

typedef struct {
  int mode; /* COLOC_REDUCE, COLOC_COPY or COLOC_CONCAT */
  int dtype, op, avg_div, njobs;
  size_t n; /* per job: elements (REDUCE) or bytes (COPY; CONCAT: per source) */
  coloc_job_t job[SHMDDP_MAX_RANKS];
} coloc_args_t;

#ifdef __cplusplus
extern "C" {
#endif
/* Launch the jobs on stream, on a GPU of sms multiprocessors (one wave of blocks: every one
 * resident at once); 0 or the cudaError_t of the launch. */
int coloc_kernel_launch(const coloc_args_t *a, int sms, void *stream);
#ifdef __cplusplus
}
#endif

#endif
