/* allreduce_bench_table.c — allreduce_bench's table, shared by its host and device drivers and
 * the NCCL comparison: each collective's name, byte counts and bus-bandwidth factor
 * (nccl-tests' conventions), the check of a result (-c 1), and the printed columns (stdout, and
 * --tsv for bench/results). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/allreduce_bench_table.h"
#include "tools/coll_check.h"

static const char *const coll_names[BENCH_NUM_COLLS] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "gather", "scatter"};

const char *bench_coll_name(bench_coll_t c) { return coll_names[c]; }

int bench_coll_parse(const char *s)
{
  for (int i = 0; i < BENCH_NUM_COLLS; i++)
    if (strcmp(s, coll_names[i]) == 0) return i;
  return -1;
}

int bench_blocks_in(bench_coll_t c)
{
  return c == BENCH_REDUCE_SCATTER || c == BENCH_ALL_TO_ALL || c == BENCH_SCATTER;
}

int bench_blocks_out(bench_coll_t c)
{
  return c == BENCH_ALL_GATHER || c == BENCH_ALL_TO_ALL || c == BENCH_GATHER;
}

double bench_bus_factor(bench_coll_t c, int n)
{
  switch (c) {
  case BENCH_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case BENCH_REDUCE_SCATTER: case BENCH_ALL_GATHER: case BENCH_ALL_TO_ALL: case BENCH_GATHER:
  case BENCH_SCATTER: return (double)(n - 1) / n;
  default: return 1.0;
  }
}

void bench_counts(bench_coll_t c, size_t bytes, size_t dsize, int n, size_t *sendcount,
                  size_t *recvcount, size_t *count)
{
  size_t total = bytes / dsize;
  if (!bench_blocks_in(c) && !bench_blocks_out(c)) {
    *sendcount = *recvcount = *count = total;
    return;
  }
  *count = total / (size_t)n; /* a block: the rest is the whole, as nccl-tests reports it */
  *sendcount = bench_blocks_in(c) ? *count * (size_t)n : *count;
  *recvcount = bench_blocks_out(c) ? *count * (size_t)n : *count;
}

/* Elements of `blocks` blocks of `count` in recv that differ from what the collective copied
 * there: block q holds rank q's pattern from element `first` on. */
static long copy_errors(const bench_opts_t *o, const void *recv, int blocks, size_t first,
                        size_t count, int iter)
{
  long bad = 0;
  for (int q = 0; q < blocks; q++)
    for (size_t k = 0; k < count; k++)
      if (coll_load(recv, (size_t)q * count + k, o->dtype) !=
          coll_round(coll_pattern(q, first + k, iter, o->dtype, o->op), o->dtype))
        bad++;
  return bad;
}

long bench_count_errors(const bench_opts_t *o, int rank, int n, const void *recv, size_t count,
                        int iter)
{
  switch (o->coll) {
  case BENCH_ALL_REDUCE:
    return (long)coll_count_errors(recv, count, 0, n, iter, o->dtype, o->op, NULL);
  case BENCH_REDUCE_SCATTER:
    return (long)coll_count_errors(recv, count, (size_t)rank * count, n, iter, o->dtype, o->op,
                                   NULL);
  case BENCH_ALL_TO_ALL: /* block q: rank q's block `rank` */
    return copy_errors(o, recv, n, (size_t)rank * count, count, iter);
  case BENCH_SCATTER: /* the root's block `rank` */
    return copy_errors(o, recv, 1, (size_t)rank * count, count, iter);
  case BENCH_GATHER:
    if (rank != 0) return 0;
    /* fall through */
  case BENCH_ALL_GATHER: return copy_errors(o, recv, n, 0, count, iter);
  default: return copy_errors(o, recv, 1, 0, count, iter); /* broadcast: the root's buffer */
  }
}

void bench_print_header(const bench_opts_t *o, int nranks, FILE *tsv)
{
  printf("# %s, %d ranks, %s, dtype %s, op %s, %s, %ld iterations after %ld warm-up%s\n",
         bench_coll_name(o->coll), nranks, o->device_cuda ? "device buffers" : "host buffers",
         shmddp_dtype_name(o->dtype), shmddp_op_name(o->op),
         o->inplace ? "in-place" : "out-of-place", o->iters, o->warmup,
         o->check ? ", results checked" : "");
  printf("%12s %12s %6s %6s %8s %10s %8s %8s %7s", "size(B)", "count", "type", "redop", "algo",
         "time(us)", "algbw", "busbw", "#wrong");
  if (o->compare_nccl)
    printf(" %10s %8s %8s %7s %7s", "nccl(us)", "algbw", "busbw", "#wrong", "ratio");
  printf("\n");
  if (tsv) {
    fprintf(tsv, "bytes\tcount\tdtype\top\talgo\ttime_us\talgbw_GBs\tbusbw_GBs\terrors\t"
                 "nccl_time_us\tnccl_busbw_GBs\tnccl_errors\tratio_busbw\n");
  }
}

void bench_print_row(const bench_opts_t *o, const bench_row_t *r, FILE *tsv)
{
  printf("%12zu %12zu %6s %6s %8s %10.2f %8.2f %8.2f %7ld", r->bytes, r->count,
         shmddp_dtype_name(o->dtype), shmddp_op_name(o->op), shmddp_algo_name(r->algo),
         r->time_us, r->algbw, r->busbw, r->errors);
  double ratio = r->nccl_busbw > 0 ? r->busbw / r->nccl_busbw : NAN;
  if (o->compare_nccl)
    printf(" %10.2f %8.2f %8.2f %7ld %7.2f", r->nccl_time_us, r->nccl_algbw, r->nccl_busbw,
           r->nccl_errors, ratio);
  printf("\n");
  fflush(stdout);
  if (tsv) {
    fprintf(tsv, "%zu\t%zu\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%ld\t", r->bytes, r->count,
            shmddp_dtype_name(o->dtype), shmddp_op_name(o->op), shmddp_algo_name(r->algo),
            r->time_us, r->algbw, r->busbw, r->errors);
    if (r->nccl_time_us >= 0)
      fprintf(tsv, "%.3f\t%.3f\t%ld\t%.3f\n", r->nccl_time_us, r->nccl_busbw, r->nccl_errors,
              ratio);
    else
      fprintf(tsv, "-\t-\t-\t-\n");
    fflush(tsv);
  }
}
