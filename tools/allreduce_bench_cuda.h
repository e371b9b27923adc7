/* allreduce_bench_cuda.h — the device driver of allreduce_bench (CUDA build only). */
#ifndef TOOLS_ALLREDUCE_BENCH_CUDA_H
#define TOOLS_ALLREDUCE_BENCH_CUDA_H

#include "tools/allreduce_bench_table.h"

/* The GPU rank r drives: r modulo the visible GPUs (queried in the calling process). */
int bench_cuda_device_of(int rank);
/* The device benchmark, run by every rank. Returns the rank's exit status. */
int bench_cuda_rank(shmddp_comm_t *comm, const bench_opts_t *o);

#endif
