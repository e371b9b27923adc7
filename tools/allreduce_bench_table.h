/* allreduce_bench_table.h — allreduce_bench's options, table rows and table
 * (allreduce_bench_table.c), shared by the host driver (allreduce_bench.c), the device driver
 * (the CUDA build's allreduce_bench_cuda.c) and NCCL loaded for comparison (nccl_dl.c). */
#ifndef TOOLS_ALLREDUCE_BENCH_TABLE_H
#define TOOLS_ALLREDUCE_BENCH_TABLE_H

#include <stdio.h>

#include "shmddp.h"

typedef enum {
  BENCH_ALL_REDUCE = 0, BENCH_REDUCE_SCATTER, BENCH_ALL_GATHER, BENCH_BROADCAST,
  BENCH_ALL_TO_ALL, BENCH_GATHER, BENCH_SCATTER, /* gather and scatter: root 0 */
  BENCH_NUM_COLLS
} bench_coll_t;

typedef struct {
  int device_cuda;       /* --device cuda */
  int join;              /* --join: ranks join by id instead of shmddp_launch */
  int nproc;
  size_t min_bytes, max_bytes;
  double factor;         /* -f: multiply (>1) */
  size_t step_bytes;     /* -i: add instead of multiply, when non-zero */
  long iters, warmup;
  int check;
  shmddp_dtype_t dtype;
  shmddp_op_t op;
  shmddp_algo_t algo;
  bench_coll_t coll;
  int inplace;
  int compare_nccl;      /* --compare nccl (device only) */
  int graph;             /* --graph: time CUDA-graph replays (device only) */
  const char *tsv_path;  /* --tsv FILE: rows for bench/results */
  int copy_bw;           /* --copy-bw: also time a device-to-device copy of -e bytes (device) */
  int blocking;          /* -z 1: wait for the stream after every call (device) */
} bench_opts_t;

/* One measured size. NCCL fields are negative when not measured. */
typedef struct {
  size_t bytes, count;
  shmddp_algo_t algo;
  double time_us, algbw, busbw;
  long errors;
  double nccl_time_us, nccl_algbw, nccl_busbw;
  long nccl_errors;
} bench_row_t;

/* The table (allreduce_bench_table.c). */
const char *bench_coll_name(bench_coll_t c);
/* The collective named s, or -1. */
int bench_coll_parse(const char *s);
/* 1 for the collectives whose send buffer (in) or recv buffer (out) holds a block per rank. */
int bench_blocks_in(bench_coll_t c);
int bench_blocks_out(bench_coll_t c);
/* busbw / algbw for this collective over n ranks (nccl-tests' convention). */
double bench_bus_factor(bench_coll_t c, int n);
/* Elements per rank's send buffer and recv buffer for `bytes` (the size nccl-tests reports). */
void bench_counts(bench_coll_t c, size_t bytes, size_t dsize, int n, size_t *sendcount,
                  size_t *recvcount, size_t *count);

/* Errors in this rank's result of one checked call (test pattern iteration `iter`, in host
 * memory): reductions against the f64 reference, copies against the pattern they copy. */
long bench_count_errors(const bench_opts_t *o, int rank, int n, const void *recv, size_t count,
                        int iter);

/* Printing (rank 0 only): the table header and one row, to stdout and to tsv if open. */
void bench_print_header(const bench_opts_t *o, int nranks, FILE *tsv);
void bench_print_row(const bench_opts_t *o, const bench_row_t *row, FILE *tsv);

#endif
