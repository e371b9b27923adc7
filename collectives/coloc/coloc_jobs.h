/* coloc_jobs.h — a co-located call's work as the kernel's jobs (coloc_kernel.h), built by a
 * leader from every rank's buffers as it sees them; and those jobs run on the host, the
 * reference of coloc_kernel.cu that the CPU tests run through the protocol (tests/check_coloc).
 * Every collective is one set of jobs, so every collective costs one hand-over. No CUDA here. */
#ifndef COLL_COLOC_JOBS_H
#define COLL_COLOC_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/comm.h"
#include "collectives/coloc/coloc_kernel.h"

/* One call as a leader sees it. */
typedef struct {
  coll_kind_t kind;   /* any collective but the barrier */
  size_t count;       /* as the API call's count (per rank's block where there are blocks) */
  shmddp_dtype_t dtype;
  shmddp_op_t op;
  int root;
  int nranks;
  uint32_t group;     /* bit r for each rank whose outputs this leader writes */
  int slice, nslices; /* this leader's index among the nslices leaders (0 of 1: alone) */
  const void *send[SHMDDP_MAX_RANKS]; /* rank r's input, mapped here; NULL where r passes none */
  void *recv[SHMDDP_MAX_RANKS];       /* rank r's output, mapped here; NULL where r passes none */
} coloc_work_t;

/* The bytes of its send and recv buffers a rank passes to the call (every rank the same; where
 * a rank passes no buffer, e.g. a gather's non-root recv, nothing is read or written). */
void coloc_jobs_lengths(coll_kind_t kind, size_t count, shmddp_dtype_t dtype, int nranks,
                        size_t len[2]);

/* The jobs of this leader (a->njobs 0: nothing to do): every rank of w->group its output; for
 * an all-reduce among several leaders, slice w->slice of the result for every rank instead (so
 * no leader reads an input that another overwrites: in place, a rank's input is its output).
 * 0, or -1 when a buffer the work needs is NULL. */
int coloc_jobs_build(const coloc_work_t *w, coloc_args_t *a);

/* Run the jobs on host memory, as the kernel does on the GPU (the same order of reduction). */
void coloc_jobs_run_host(const coloc_args_t *a);

#endif
