/* allreduce_bench_cuda.c — the device side of allreduce_bench (CUDA build). Device collectives
 * are not wired yet: report that instead of measuring. */
#include "config.h"

#include <stdio.h>

#include "tools/allreduce_bench.h"

int bench_cuda_rank(shmddp_comm_t *comm, const bench_opts_t *o)
{
  (void)o;
  if (shmddp_comm_rank(comm) == 0)
    fprintf(stderr, "allreduce_bench: device collectives are not available yet; use --device cpu\n");
  return 2;
}
