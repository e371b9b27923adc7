/* allreduce_bench_cuda.c — the device side of allreduce_bench (CUDA build): device buffers, the
 * CUDA transport, CUDA-event timing after warm-up (optionally of one CUDA-graph replay of all the
 * timed calls), every result checked against the f64 reference with -c 1, and with --compare nccl
 * the same measurement of NCCL (loaded at run time) in the same run, printed beside ours.
 *
 * Per size: fill the inputs with the test pattern (never zeros), warm up, then 5 times: host
 * barrier, `iters` calls between two events on the rank's stream; each rank takes the median of
 * the 5 and the row reports the slowest rank. The
 * checked call runs afterwards on fresh inputs, so the timed in-place updates do not matter. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shmddp_cuda.h"
#include "src/obs/outfile.h"
#include "tools/allreduce_bench_cuda.h"
#include "tools/coll_check.h"
#include "tools/nccl_dl.h"

typedef struct {
  shmddp_comm_t *comm;
  const bench_opts_t *o;
  int rank, n;
  cudaStream_t stream;
  cudaEvent_t e0, e1;
  char *send, *recv;    /* device */
  char *hbuf;           /* host staging for fills and checks */
  size_t hbytes;
  nccl_dl_t *nc;
  void *ncomm;
  shmddp_algo_t algo;   /* what our warm-up calls ran (barriers since then reset last_algo) */
  char err[512];
} bctx_t;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      snprintf(b->err, sizeof b->err, "%s: %s", #x, cudaGetErrorString(e_));                  \
      return -1;                                                                              \
    }                                                                                         \
  } while (0)

static int run_ours(bctx_t *b, const void *s, void *r, size_t count)
{
  const bench_opts_t *o = b->o;
  shmddp_stream_t st = (shmddp_stream_t)b->stream;
  shmddp_status_t rc;
  switch (o->coll) {
  case BENCH_ALL_REDUCE: rc = shmddp_all_reduce(b->comm, s, r, count, o->dtype, o->op, st); break;
  case BENCH_REDUCE_SCATTER: rc = shmddp_reduce_scatter(b->comm, s, r, count, o->dtype, o->op, st); break;
  case BENCH_ALL_GATHER: rc = shmddp_all_gather(b->comm, s, r, count, o->dtype, st); break;
  case BENCH_ALL_TO_ALL: rc = shmddp_all_to_all(b->comm, s, r, count, o->dtype, st); break;
  case BENCH_GATHER: rc = shmddp_gather(b->comm, s, r, count, o->dtype, 0, st); break;
  case BENCH_SCATTER: rc = shmddp_scatter(b->comm, s, r, count, o->dtype, 0, st); break;
  default: rc = shmddp_broadcast(b->comm, s, r, count, o->dtype, 0, st); break;
  }
  if (rc != SHMDDP_OK) {
    snprintf(b->err, sizeof b->err, "%s", shmddp_comm_last_error(b->comm));
    return -1;
  }
  return 0;
}

static int sync_all(bctx_t *b, int nccl);

/* One call; with -z 1 followed by the wait for the stream. */
static int run_one(bctx_t *b, int nccl, const void *s, void *r, size_t count)
{
  int rc = nccl ? (nccl_dl_run(b->nc, b->ncomm, b->o->coll, s, r, count, b->o->dtype, b->o->op,
                               b->stream, b->err, sizeof b->err) ? -1 : 0)
                : run_ours(b, s, r, count);
  if (rc || !b->o->blocking) return rc;
  return sync_all(b, nccl);
}

/* Ours through shmddp_cuda_sync, which gives up when the group fails (a stream may wait for a
 * dead peer's event that never comes). */
static int sync_all(bctx_t *b, int nccl)
{
  if (nccl) {
    CK(cudaStreamSynchronize(b->stream));
    return 0;
  }
  if (shmddp_cuda_sync(b->comm, (shmddp_stream_t)b->stream) != SHMDDP_OK) {
    snprintf(b->err, sizeof b->err, "%s", shmddp_comm_last_error(b->comm));
    return -1;
  }
  return 0;
}

/* Fill this rank's inputs with pattern iteration `iter`. */
static int fill(bctx_t *b, void *sbuf, size_t sendcount, size_t count, int iter)
{
  const bench_opts_t *o = b->o;
  size_t ds = shmddp_dtype_size(o->dtype);
  size_t n = o->coll == BENCH_ALL_GATHER ? count : sendcount;
  coll_fill(b->hbuf, n, 0, b->rank, iter, o->dtype, o->op);
  CK(cudaMemcpy(sbuf, b->hbuf, n * ds, cudaMemcpyHostToDevice));
  return 0;
}

/* Errors in this rank's result: copied to the host and checked there. */
static long check(bctx_t *b, const void *rbuf, size_t count, int iter)
{
  const bench_opts_t *o = b->o;
  size_t ds = shmddp_dtype_size(o->dtype), n = (size_t)b->n;
  size_t elems = bench_blocks_out(o->coll) ? count * n : count;
  if (cudaMemcpy(b->hbuf, rbuf, elems * ds, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  return bench_count_errors(o, b->rank, b->n, b->hbuf, count, iter);
}

static int cmp_double(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

#define BENCH_REPS 5

/* Time `iters` calls (or one graph of them) BENCH_REPS times, each after a host barrier;
 * returns the median in microseconds per call, < 0 on error. */
static double timed(bctx_t *b, int nccl, const void *s, void *r, size_t count)
{
  const bench_opts_t *o = b->o;
  for (long i = 0; i < o->warmup; i++)
    if (run_one(b, nccl, s, r, count)) return -1;
  if (!nccl && o->warmup > 0) b->algo = shmddp_comm_last_algo(b->comm);
  if (sync_all(b, nccl)) return -1;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  if (o->graph) {
    if (cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    int bad = 0;
    for (long i = 0; i < o->iters && !bad; i++) bad = run_one(b, nccl, s, r, count);
    if (cudaStreamEndCapture(b->stream, &g) != cudaSuccess || bad) {
      if (!bad) snprintf(b->err, sizeof b->err, "graph capture failed");
      return -1;
    }
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
      snprintf(b->err, sizeof b->err, "cudaGraphInstantiate failed");
      return -1;
    }
    if (cudaGraphLaunch(ge, b->stream) != cudaSuccess || sync_all(b, nccl)) return -1;
  }
  double t[BENCH_REPS];
  for (int rep = 0; rep < BENCH_REPS; rep++) {
    if (shmddp_barrier(b->comm) != SHMDDP_OK) return -1;
    cudaEventRecord(b->e0, b->stream);
    if (o->graph) {
      cudaGraphLaunch(ge, b->stream);
    } else {
      for (long i = 0; i < o->iters; i++)
        if (run_one(b, nccl, s, r, count)) return -1;
    }
    cudaEventRecord(b->e1, b->stream);
    if (sync_all(b, nccl)) return -1;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, b->e0, b->e1) != cudaSuccess) return -1;
    t[rep] = (double)ms * 1e3 / (double)o->iters;
  }
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  qsort(t, BENCH_REPS, sizeof t[0], cmp_double);
  return t[BENCH_REPS / 2];
}

static int setup_nccl(bctx_t *b)
{
  int ngpu = 0;
  cudaGetDeviceCount(&ngpu);
  int32_t ok = b->n <= ngpu;
  char why[256] = "";
  if (!ok) snprintf(why, sizeof why, "NCCL needs one GPU per rank (%d ranks, %d GPUs)", b->n, ngpu);
  if (ok && !(b->nc = nccl_dl_open(why, sizeof why))) ok = 0;
  if (shmddp_all_reduce(b->comm, &ok, &ok, 1, SHMDDP_I32, SHMDDP_MIN, SHMDDP_HOST) != SHMDDP_OK)
    return -1;
  if (!ok) {
    if (b->rank == 0 || why[0])
      fprintf(stderr, "allreduce_bench: rank %d: no NCCL comparison: %s\n", b->rank,
              why[0] ? why : "a peer could not load NCCL");
    return 0;
  }
  nccl_dl_uid_t uid;
  memset(&uid, 0, sizeof uid);
  int32_t good = 1;
  if (b->rank == 0 && nccl_dl_unique_id(b->nc, &uid, b->err, sizeof b->err)) good = 0;
  if (shmddp_broadcast(b->comm, &uid, &uid, sizeof uid / 4, SHMDDP_I32, 0, SHMDDP_HOST) != SHMDDP_OK)
    return -1;
  if (good && nccl_dl_comm_init(b->nc, &b->ncomm, b->n, &uid, b->rank, b->err, sizeof b->err)) good = 0;
  if (shmddp_all_reduce(b->comm, &good, &good, 1, SHMDDP_I32, SHMDDP_MIN, SHMDDP_HOST) != SHMDDP_OK)
    return -1;
  if (!good) {
    fprintf(stderr, "allreduce_bench: rank %d: no NCCL comparison: %s\n", b->rank, b->err);
    nccl_dl_comm_destroy(b->nc, b->ncomm);
    b->ncomm = NULL;
  }
  return 0;
}

/* One size: ours, then NCCL, each timed and checked. */
static int one_size(bctx_t *b, size_t bytes, FILE *tsv, long *errors)
{
  const bench_opts_t *o = b->o;
  size_t ds = shmddp_dtype_size(o->dtype);
  size_t sendcount, recvcount, count;
  bench_counts(o->coll, bytes, ds, b->n, &sendcount, &recvcount, &count);
  char *sbuf = b->send, *rbuf = b->recv, *fillbuf = b->send;
  if (o->inplace) {
    if (o->coll == BENCH_ALL_GATHER) { rbuf = b->send; sbuf = b->send + (size_t)b->rank * count * ds; fillbuf = sbuf; }
    else if (o->coll == BENCH_REDUCE_SCATTER) rbuf = b->send + (size_t)b->rank * count * ds;
    else rbuf = b->send;
  }
  bench_row_t row;
  memset(&row, 0, sizeof row);
  row.bytes = count * ds * (o->coll == BENCH_ALL_REDUCE || o->coll == BENCH_BROADCAST ? 1 : (size_t)b->n);
  row.count = count;
  row.nccl_time_us = row.nccl_algbw = row.nccl_busbw = -1;
  double t[2] = {-1, -1};
  long errs[2] = {0, 0};
  for (int nccl = 0; nccl < 2; nccl++) {
    if (nccl && !b->ncomm) break;
    if (fill(b, fillbuf, sendcount, count, 0)) return -1;
    t[nccl] = timed(b, nccl, sbuf, rbuf, count);
    if (t[nccl] < 0) return -1;
    if (!nccl) row.algo = o->warmup > 0 ? b->algo : shmddp_comm_last_algo(b->comm);
    if (o->check) {
      if (fill(b, fillbuf, sendcount, count, 1) || run_one(b, nccl, sbuf, rbuf, count) ||
          sync_all(b, nccl))
        return -1;
      errs[nccl] = check(b, rbuf, count, 1);
      if (errs[nccl] < 0) { snprintf(b->err, sizeof b->err, "cannot copy the result back"); return -1; }
    }
  }
  double e2[2] = {(double)errs[0], (double)errs[1]};
  if (shmddp_all_reduce(b->comm, t, t, 2, SHMDDP_F64, SHMDDP_MAX, SHMDDP_HOST) != SHMDDP_OK ||
      shmddp_all_reduce(b->comm, e2, e2, 2, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST) != SHMDDP_OK) {
    snprintf(b->err, sizeof b->err, "%s", shmddp_comm_last_error(b->comm));
    return -1;
  }
  double f = bench_bus_factor(o->coll, b->n);
  row.time_us = t[0];
  row.algbw = row.time_us > 0 ? (double)row.bytes / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * f;
  row.errors = (long)e2[0];
  if (b->ncomm) {
    row.nccl_time_us = t[1];
    row.nccl_algbw = t[1] > 0 ? (double)row.bytes / (t[1] * 1e3) : 0;
    row.nccl_busbw = row.nccl_algbw * f;
    row.nccl_errors = (long)e2[1];
  }
  if (b->rank == 0) bench_print_row(o, &row, tsv);
  *errors = row.errors + (b->ncomm ? row.nccl_errors : 0);
  return 0;
}

/* --copy-bw: a device-to-device copy of max_bytes on rank 0's GPU while the others wait, timed
 * like a collective (median of BENCH_REPS runs of iters copies); one row, algo "memcpy". */
static int copy_bandwidth(bctx_t *b, FILE *tsv)
{
  const bench_opts_t *o = b->o;
  size_t bytes = o->max_bytes;
  double t[BENCH_REPS];
  if (shmddp_barrier(b->comm) != SHMDDP_OK) return -1;
  if (b->rank == 0) {
    char *dst = NULL;
    CK(cudaMalloc((void **)&dst, bytes));
    for (long i = 0; i < o->warmup + 1; i++)
      CK(cudaMemcpyAsync(dst, b->send, bytes, cudaMemcpyDeviceToDevice, b->stream));
    for (int rep = 0; rep < BENCH_REPS; rep++) {
      CK(cudaEventRecord(b->e0, b->stream));
      for (long i = 0; i < o->iters; i++)
        CK(cudaMemcpyAsync(dst, b->send, bytes, cudaMemcpyDeviceToDevice, b->stream));
      CK(cudaEventRecord(b->e1, b->stream));
      CK(cudaEventSynchronize(b->e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, b->e0, b->e1));
      t[rep] = (double)ms * 1e3 / (double)o->iters;
    }
    CK(cudaFree(dst));
    qsort(t, BENCH_REPS, sizeof t[0], cmp_double);
    double us = t[BENCH_REPS / 2], gbs = (double)bytes / (us * 1e3);
    printf("# device-to-device copy of %zu bytes (cudaMemcpyAsync, rank 0's GPU): %.2f us, "
           "%.2f GB/s\n", bytes, us, gbs);
    if (tsv)
      fprintf(tsv, "%zu\t%zu\tu8\tnone\tmemcpy\t%.3f\t%.3f\t%.3f\t0\t\t\t\t\n", bytes, bytes,
              us, gbs, gbs);
  }
  return shmddp_barrier(b->comm) == SHMDDP_OK ? 0 : -1;
}

int bench_cuda_device_of(int rank)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return 0;
  return rank % n;
}

int bench_cuda_rank(shmddp_comm_t *comm, const bench_opts_t *o)
{
  bctx_t bc, *b = &bc;
  memset(b, 0, sizeof *b);
  b->comm = comm;
  b->o = o;
  b->rank = shmddp_comm_rank(comm);
  b->n = shmddp_comm_size(comm);
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  /* A communicator that joined by id with a GPU has its device transport already. */
  if (shmddp_cuda_p2p(comm) < 0 && shmddp_comm_init_cuda(comm, &cc) != SHMDDP_OK) {
    fprintf(stderr, "allreduce_bench: rank %d: %s\n", b->rank, shmddp_comm_last_error(comm));
    return 1;
  }
  int rc = 1;
  FILE *tsv = NULL;
  char tsv_tmp[4096];
  size_t ds = shmddp_dtype_size(o->dtype), maxs, maxr, maxc;
  bench_counts(o->coll, o->max_bytes, ds, b->n, &maxs, &maxr, &maxc);
  size_t sbytes = maxs * ds + 256, rbytes = maxr * ds + 256;
  if (o->inplace && o->coll == BENCH_ALL_GATHER && rbytes > sbytes) sbytes = rbytes;
  b->hbytes = (sbytes > rbytes ? sbytes : rbytes);
  if (cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreate(&b->e0) != cudaSuccess || cudaEventCreate(&b->e1) != cudaSuccess ||
      cudaMalloc((void **)&b->send, sbytes) != cudaSuccess ||
      cudaMalloc((void **)&b->recv, rbytes) != cudaSuccess ||
      cudaMallocHost((void **)&b->hbuf, b->hbytes) != cudaSuccess) {
    fprintf(stderr, "allreduce_bench: rank %d: cannot allocate %zu bytes of buffers: %s\n", b->rank,
            sbytes + rbytes, cudaGetErrorString(cudaGetLastError()));
    goto out;
  }
  if (o->compare_nccl && setup_nccl(b)) goto fail;
  if (b->rank == 0 && o->tsv_path) {
    /* a fresh private file renamed into place at the end, rows of a failed run too */
    tsv = outfile_fopen_temp(o->tsv_path, tsv_tmp, sizeof tsv_tmp);
    if (!tsv) {
      fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->tsv_path, strerror(errno));
      shmddp_abort(comm, "rank 0 cannot write the table");
      goto out;
    }
  }
  if (b->rank == 0) {
    bench_print_header(o, b->n, tsv);
    printf("# transport: %s%s; %d rank(s) on rank 0's GPU%s\n",
           shmddp_cuda_p2p(comm) ? "CUDA IPC / P2P" : "host-staged (no P2P)",
           o->graph ? "; timed: one CUDA-graph replay of all iterations" : "",
           shmddp_cuda_colocated(comm),
           shmddp_cuda_colocated_mps(comm) == 1 ? ", every sharing rank under MPS" : "");
    fflush(stdout); /* the start of the run, for whoever watches the output (tests) */
  }
  long total_errors = 0;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes;) {
    long e = 0;
    if (one_size(b, bytes, tsv, &e)) goto fail;
    total_errors += e;
    if (shmddp_stop_requested(comm)) break;
    size_t next = o->step_bytes ? bytes + o->step_bytes : (size_t)((double)bytes * o->factor);
    if (next <= bytes) break;
    bytes = next;
  }
  if (o->copy_bw && copy_bandwidth(b, tsv)) goto fail;
  rc = total_errors ? 1 : 0;
  goto out;
fail:
  fprintf(stderr, "allreduce_bench: rank %d: %s\n", b->rank, b->err[0] ? b->err : shmddp_comm_last_error(comm));
  rc = 1;
out:
  if (tsv && outfile_commit(tsv, tsv_tmp, o->tsv_path, 1) != 0) {
    fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->tsv_path, strerror(errno));
    rc = 1;
  }
  /* After a failure of the group the stream may never drain (it may wait for a dead peer's
   * event), and freeing would wait with it: the process's exit frees the buffers. */
  if (b->stream && shmddp_cuda_sync(comm, (shmddp_stream_t)b->stream) != SHMDDP_OK) return rc ? rc : 1;
  if (b->ncomm) nccl_dl_comm_destroy(b->nc, b->ncomm);
  nccl_dl_close(b->nc);
  cudaFree(b->send);
  cudaFree(b->recv);
  cudaFreeHost(b->hbuf);
  return rc;
}
