/* allreduce_bench.c — collective benchmark in the style of nccl-tests: a size sweep (-b -e -f),
 * iterations and warm-up (-n -w), result checking (-c 1), one table row per size with time,
 * algbw and busbw. Host buffers with --device cpu; --device cuda hands each rank to the device
 * driver (CUDA build). Ranks are forked by shmddp_launch, as in training. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build_version.h"
#include "tools/allreduce_bench_table.h"
#ifdef HAVE_CUDA
#include "tools/allreduce_bench_cuda.h"
#endif
#include "tools/coll_check.h"

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static shmddp_status_t run_once(shmddp_comm_t *comm, const bench_opts_t *o, const void *send,
                                void *recv, size_t count)
{
  switch (o->coll) {
  case BENCH_ALL_REDUCE:
    return shmddp_all_reduce(comm, send, recv, count, o->dtype, o->op, SHMDDP_HOST);
  case BENCH_REDUCE_SCATTER:
    return shmddp_reduce_scatter(comm, send, recv, count, o->dtype, o->op, SHMDDP_HOST);
  case BENCH_ALL_GATHER:
    return shmddp_all_gather(comm, send, recv, count, o->dtype, SHMDDP_HOST);
  case BENCH_ALL_TO_ALL:
    return shmddp_all_to_all(comm, send, recv, count, o->dtype, SHMDDP_HOST);
  case BENCH_GATHER: return shmddp_gather(comm, send, recv, count, o->dtype, 0, SHMDDP_HOST);
  case BENCH_SCATTER: return shmddp_scatter(comm, send, recv, count, o->dtype, 0, SHMDDP_HOST);
  default:
    return shmddp_broadcast(comm, send, recv, count, o->dtype, 0, SHMDDP_HOST);
  }
}

/* Errors in this rank's result of one checked call (iteration tag `iter`). */
static long check_result(const bench_opts_t *o, int rank, int n, const void *recv, size_t count,
                         int iter)
{
  size_t ds = shmddp_dtype_size(o->dtype);
  switch (o->coll) {
  case BENCH_ALL_REDUCE:
    return (long)coll_count_errors(recv, count, 0, n, iter, o->dtype, o->op, NULL);
  case BENCH_REDUCE_SCATTER:
    return (long)coll_count_errors(recv, count, (size_t)rank * count, n, iter, o->dtype, o->op,
                                   NULL);
  case BENCH_ALL_TO_ALL:
  case BENCH_SCATTER: { /* block q: rank q's (scatter: the root's) block `rank` */
    long bad = 0;
    int blocks = o->coll == BENCH_ALL_TO_ALL ? n : 1;
    for (int q = 0; q < blocks; q++)
      for (size_t k = 0; k < count; k++)
        if (coll_load((const char *)recv + ((size_t)q * count + k) * ds, 0, o->dtype) !=
            coll_round(coll_pattern(o->coll == BENCH_SCATTER ? 0 : q, (size_t)rank * count + k,
                                    iter, o->dtype, o->op), o->dtype))
          bad++;
    return bad;
  }
  case BENCH_GATHER:
    if (rank != 0) return 0;
    /* fall through */
  case BENCH_ALL_GATHER: {
    long bad = 0;
    for (int r = 0; r < n; r++)
      for (size_t k = 0; k < count; k++)
        if (coll_load((const char *)recv + ((size_t)r * count + k) * ds, 0, o->dtype) !=
            coll_round(coll_pattern(r, k, iter, o->dtype, o->op), o->dtype))
          bad++;
    return bad;
  }
  default: {
    long bad = 0;
    for (size_t k = 0; k < count; k++)
      if (coll_load(recv, k, o->dtype) != coll_round(coll_pattern(0, k, iter, o->dtype, o->op), o->dtype))
        bad++;
    return bad;
  }
  }
}

static void fill_send(const bench_opts_t *o, int rank, void *send, size_t sendcount, size_t count,
                      int iter)
{
  size_t ds = shmddp_dtype_size(o->dtype);
  if (o->coll == BENCH_REDUCE_SCATTER) {
    coll_fill(send, sendcount, 0, rank, iter, o->dtype, o->op);
  } else if (o->coll == BENCH_ALL_GATHER) {
    coll_fill(send, count, 0, rank, iter, o->dtype, o->op);
  } else {
    coll_fill(send, sendcount, 0, rank, iter, o->dtype, o->op);
  }
  (void)ds;
}

static int host_rank(shmddp_comm_t *comm, const bench_opts_t *o)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t ds = shmddp_dtype_size(o->dtype);
  size_t maxs, maxr, maxc;
  bench_counts(o->coll, o->max_bytes, ds, n, &maxs, &maxr, &maxc);
  char *send = malloc(maxs * ds + 64), *recv = malloc(maxr * ds + 64);
  FILE *tsv = NULL;
  if (!send || !recv) {
    fprintf(stderr, "allreduce_bench: rank %d: out of memory for %zu bytes\n", rank, o->max_bytes);
    return 1;
  }
  if (rank == 0 && o->tsv_path) {
    tsv = fopen(o->tsv_path, "w");
    if (!tsv) {
      fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->tsv_path, strerror(errno));
      shmddp_abort(comm, "rank 0 cannot write the table");
      return 1;
    }
  }
  if (rank == 0) bench_print_header(o, n, tsv);
  int rc = 0;
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && rc == 0;) {
    size_t sendcount, recvcount, count;
    bench_counts(o->coll, bytes, ds, n, &sendcount, &recvcount, &count);
    /* In-place layouts: all_gather sends from its own block of recv, reduce_scatter receives
     * into its own block of send; all_reduce and broadcast use one buffer. */
    void *sbuf = send, *rbuf = recv;
    if (o->inplace) {
      if (o->coll == BENCH_ALL_GATHER) { rbuf = send; sbuf = send + (size_t)rank * count * ds; }
      else if (o->coll == BENCH_REDUCE_SCATTER) rbuf = send + (size_t)rank * count * ds;
      else rbuf = send;
    }
    bench_row_t row = {0};
    row.bytes = count * ds * (o->coll == BENCH_ALL_REDUCE || o->coll == BENCH_BROADCAST ? 1 : (size_t)n);
    row.count = count;
    row.nccl_time_us = row.nccl_algbw = row.nccl_busbw = -1;
    row.algo = o->algo;
    fill_send(o, rank, o->inplace && o->coll == BENCH_ALL_GATHER ? sbuf : send, sendcount, count, 0);
    shmddp_status_t st = SHMDDP_OK;
    for (long i = 0; i < o->warmup && st == SHMDDP_OK; i++) st = run_once(comm, o, sbuf, rbuf, count);
    if (st == SHMDDP_OK) st = shmddp_barrier(comm);
    double t0 = now_s();
    long done = 0;
    for (; done < o->iters && st == SHMDDP_OK; done++) {
      st = run_once(comm, o, sbuf, rbuf, count);
      if (done == 0) row.algo = shmddp_comm_last_algo(comm);
      if ((done & 63) == 63 && shmddp_stop_requested(comm)) { done++; break; }
    }
    double per_iter = done ? (now_s() - t0) / (double)done : 0;
    if (st == SHMDDP_OK && o->check) {
      /* A separate call on fresh inputs, so the timed loop's in-place updates do not matter. */
      fill_send(o, rank, o->inplace && o->coll == BENCH_ALL_GATHER ? sbuf : send, sendcount, count, 1);
      st = run_once(comm, o, sbuf, rbuf, count);
      if (st == SHMDDP_OK) row.errors = check_result(o, rank, n, rbuf, count, 1);
    }
    double stats[2] = {per_iter, (double)row.errors};
    if (st == SHMDDP_OK) st = shmddp_all_reduce(comm, stats, stats, 1, SHMDDP_F64, SHMDDP_MAX, SHMDDP_HOST);
    double errs = (double)row.errors;
    if (st == SHMDDP_OK) st = shmddp_all_reduce(comm, &errs, &errs, 1, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST);
    if (st != SHMDDP_OK) {
      fprintf(stderr, "allreduce_bench: %s\n", shmddp_comm_last_error(comm));
      rc = 1;
      break;
    }
    row.time_us = stats[0] * 1e6;
    row.errors = (long)errs;
    row.algbw = row.time_us > 0 ? (double)row.bytes / (row.time_us * 1e3) : 0;
    row.busbw = row.algbw * bench_bus_factor(o->coll, n);
    if (rank == 0) bench_print_row(o, &row, tsv);
    if (row.errors) rc = 1;
    if (shmddp_stop_requested(comm)) break;
    size_t next = o->step_bytes ? bytes + o->step_bytes : (size_t)((double)bytes * o->factor);
    if (next <= bytes) break;
    bytes = next;
  }
  if (tsv) fclose(tsv);
  free(send);
  free(recv);
  return rc;
}

static int bench_rank(shmddp_comm_t *comm, void *arg)
{
  const bench_opts_t *o = arg;
  if (o->algo != SHMDDP_ALGO_AUTO) shmddp_comm_set_algo(comm, o->algo);
#ifdef HAVE_CUDA
  if (o->device_cuda) return bench_cuda_rank(comm, o);
#endif
  return host_rank(comm, o);
}

/* --join: fork the ranks here (before any CUDA call) and let each join by id, as ranks started
 * by torchrun or mpirun would; the table is the same as with shmddp_launch. */
static int run_joined(const bench_opts_t *o)
{
  shmddp_unique_id_t id;
  if (shmddp_get_unique_id(&id) != SHMDDP_OK) {
    fprintf(stderr, "allreduce_bench: %s\n", shmddp_last_error());
    return 2;
  }
  fflush(NULL);
  pid_t pids[SHMDDP_MAX_RANKS];
  for (int r = 0; r < o->nproc; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("allreduce_bench: fork");
      return 2;
    }
    if (pids[r] > 0) continue;
    shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
    cfg.device = o->device_cuda ? r : SHMDDP_DEVICE_NONE;
#ifdef HAVE_CUDA
    if (o->device_cuda) cfg.device = bench_cuda_device_of(r);
#endif
    shmddp_comm_t *comm = NULL;
    if (shmddp_comm_init_rank_config(&comm, o->nproc, id, r, &cfg) != SHMDDP_OK) {
      fprintf(stderr, "allreduce_bench: rank %d: %s\n", r, shmddp_last_error());
      _exit(1);
    }
    int rc = bench_rank(comm, (void *)o);
    shmddp_comm_destroy(comm);
    fflush(NULL);
    _exit(rc);
  }
  int rc = 0;
  for (int r = 0; r < o->nproc; r++) {
    int ws = 0;
    waitpid(pids[r], &ws, 0);
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) rc = 1;
  }
  return rc;
}

static int parse_size(const char *s, size_t *out)
{
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  double mult = 1;
  switch (*end) {
  case 'k': case 'K': mult = 1024; end++; break;
  case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
  case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

static void usage(FILE *f)
{
  fprintf(f,
          "usage: shmddp-allreduce-bench [options]   (--version: the version)\n"
          "  --device cpu|cuda   buffers on the host (default) or on the GPUs (CUDA build)\n"
          "  -p, --nproc N       ranks to fork (default 2; with cuda: one per visible GPU)\n"
          "  -b, --minbytes S    smallest size (default 8; suffixes K, M, G)\n"
          "  -e, --maxbytes S    largest size (default 64M)\n"
          "  -f, --stepfactor F  multiply the size by F between rows (default 2)\n"
          "  -i, --stepbytes S   add S between rows instead\n"
          "  -n, --iters N       timed iterations per size (default 20)\n"
          "  -w, --warmup N      untimed iterations first (default 5)\n"
          "  -c, --check 0|1     check every result against an f64 reference (default 1)\n"
          "  -d, --datatype T    f32 f64 f16 bf16 i32 i64 (default f32)\n"
          "  -o, --op OP         sum avg min max prod (default sum)\n"
          "  -C, --collective C  all_reduce reduce_scatter all_gather broadcast all_to_all\n"
          "                      gather scatter (the last two rooted at rank 0; default all_reduce)\n"
          "  -a, --algo NAME     auto direct ring twoshot cering staged coloc (default auto)\n"
          "  -I, --inplace       in-place instead of out-of-place\n"
          "  --compare nccl      also time NCCL (libnccl.so.2 loaded at run time; cuda only)\n"
          "  --graph             time CUDA-graph replays of the collective (cuda only)\n"
          "  -z, --blocking 0|1  1: wait for the stream after every call (cuda only; the\n"
          "                      time is then that of a call and its wait; default 0)\n"
          "  --tsv FILE          also write the table as tab-separated values\n"
          "  --copy-bw           also time a device-to-device cudaMemcpyAsync of -e bytes on\n"
          "                      rank 0's GPU (the others idle), the yardstick for the sweep\n"
          "  --join              ranks join by a unique id (shmddp_comm_init_rank) instead of\n"
          "                      being forked by shmddp_launch: the path of other launchers\n"
          "  -h, --help\n");
}

int main(int argc, char **argv)
{
  bench_opts_t o = {0};
  o.nproc = 0;
  o.min_bytes = 8;
  o.max_bytes = (size_t)64 << 20;
  o.factor = 2;
  o.iters = 20;
  o.warmup = 5;
  o.check = 1;
  o.dtype = SHMDDP_F32;
  o.op = SHMDDP_SUM;
  static const struct option longopts[] = {
    {"device", required_argument, 0, 'D'}, {"nproc", required_argument, 0, 'p'},
    {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
    {"stepfactor", required_argument, 0, 'f'}, {"stepbytes", required_argument, 0, 'i'},
    {"iters", required_argument, 0, 'n'}, {"warmup", required_argument, 0, 'w'},
    {"check", required_argument, 0, 'c'}, {"datatype", required_argument, 0, 'd'},
    {"op", required_argument, 0, 'o'}, {"collective", required_argument, 0, 'C'},
    {"algo", required_argument, 0, 'a'}, {"inplace", no_argument, 0, 'I'},
    {"compare", required_argument, 0, 'N'}, {"graph", no_argument, 0, 'G'},
    {"tsv", required_argument, 0, 'T'}, {"join", no_argument, 0, 'J'},
    {"copy-bw", no_argument, 0, 'B'}, {"blocking", required_argument, 0, 'z'},
    {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0}};
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "p:b:e:f:i:n:w:c:d:o:C:a:Iz:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'D':
      if (strcmp(optarg, "cpu") == 0) o.device_cuda = 0;
      else if (strcmp(optarg, "cuda") == 0) o.device_cuda = 1;
      else { fprintf(stderr, "allreduce_bench: --device must be cpu or cuda, not '%s'\n", optarg); return 2; }
      break;
    case 'p':
      o.nproc = (int)strtol(optarg, &end, 10);
      if (*end || o.nproc < 1 || o.nproc > SHMDDP_MAX_RANKS) {
        fprintf(stderr, "allreduce_bench: --nproc must be 1 to %d, not '%s'\n", SHMDDP_MAX_RANKS, optarg);
        return 2;
      }
      break;
    case 'b': case 'e': case 'i': {
      size_t v;
      if (parse_size(optarg, &v) != 0 || (c != 'i' && v == 0)) {
        fprintf(stderr, "allreduce_bench: -%c wants a size like 8, 4K, 1M or 1G, not '%s'\n", c, optarg);
        return 2;
      }
      if (c == 'b') o.min_bytes = v; else if (c == 'e') o.max_bytes = v; else o.step_bytes = v;
      break;
    }
    case 'f':
      o.factor = strtod(optarg, &end);
      if (*end || !(o.factor > 1)) { fprintf(stderr, "allreduce_bench: -f wants a factor > 1, not '%s'\n", optarg); return 2; }
      break;
    case 'n': case 'w': {
      long v = strtol(optarg, &end, 10);
      if (*end || v < (c == 'n' ? 1 : 0)) {
        fprintf(stderr, "allreduce_bench: -%c wants a count%s, not '%s'\n", c, c == 'n' ? " >= 1" : " >= 0", optarg);
        return 2;
      }
      if (c == 'n') o.iters = v; else o.warmup = v;
      break;
    }
    case 'c':
      if (strcmp(optarg, "0") && strcmp(optarg, "1")) { fprintf(stderr, "allreduce_bench: -c wants 0 or 1\n"); return 2; }
      o.check = optarg[0] == '1';
      break;
    case 'd': {
      int d = shmddp_dtype_parse(optarg);
      if (d < 0) { fprintf(stderr, "allreduce_bench: unknown datatype '%s' (f32 f64 f16 bf16 i32 i64)\n", optarg); return 2; }
      o.dtype = (shmddp_dtype_t)d;
      break;
    }
    case 'o': {
      int v = shmddp_op_parse(optarg);
      if (v < 0) { fprintf(stderr, "allreduce_bench: unknown op '%s' (sum avg min max prod)\n", optarg); return 2; }
      o.op = (shmddp_op_t)v;
      break;
    }
    case 'C': {
      int k = bench_coll_parse(optarg);
      if (k < 0) { fprintf(stderr, "allreduce_bench: unknown collective '%s' (all_reduce reduce_scatter all_gather broadcast all_to_all gather scatter)\n", optarg); return 2; }
      o.coll = (bench_coll_t)k;
      break;
    }
    case 'a': {
      int a = shmddp_algo_parse(optarg);
      if (a < 0) { fprintf(stderr, "allreduce_bench: unknown algorithm '%s' (auto direct ring twoshot cering staged coloc)\n", optarg); return 2; }
      o.algo = (shmddp_algo_t)a;
      break;
    }
    case 'I': o.inplace = 1; break;
    case 'N':
      if (strcmp(optarg, "nccl")) { fprintf(stderr, "allreduce_bench: --compare knows only 'nccl'\n"); return 2; }
      o.compare_nccl = 1;
      break;
    case 'G': o.graph = 1; break;
    case 'T': o.tsv_path = optarg; break;
    case 'J': o.join = 1; break;
    case 'B': o.copy_bw = 1; break;
    case 'z':
      if (strcmp(optarg, "0") && strcmp(optarg, "1")) { fprintf(stderr, "allreduce_bench: -z takes 0 or 1, not '%s'\n", optarg); return 2; }
      o.blocking = optarg[0] == '1';
      break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("shmddp-allreduce-bench %s\n", SHMDDP_BUILD_VERSION); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) { fprintf(stderr, "allreduce_bench: unexpected argument '%s'\n", argv[optind]); return 2; }
  if (o.min_bytes > o.max_bytes) { fprintf(stderr, "allreduce_bench: -b %zu is larger than -e %zu\n", o.min_bytes, o.max_bytes); return 2; }
  if (o.graph && o.blocking) {
    fprintf(stderr, "allreduce_bench: -z 1 waits after every call, --graph replays them all at once: give one of them\n");
    return 2;
  }
  if (o.coll >= BENCH_ALL_TO_ALL && (o.inplace || o.compare_nccl)) {
    fprintf(stderr, "allreduce_bench: -C %s: out of place only, and without --compare nccl\n",
            bench_coll_name(o.coll));
    return 2;
  }
  if (!o.device_cuda && (o.compare_nccl || o.graph || o.copy_bw || o.blocking)) {
    fprintf(stderr, "allreduce_bench: --compare nccl, --graph, --copy-bw and -z 1 need --device cuda\n");
    return 2;
  }
  if (!o.device_cuda && o.algo > SHMDDP_ALGO_RING) {
    fprintf(stderr, "allreduce_bench: algorithm '%s' is a device algorithm; host buffers use auto, direct or ring\n", shmddp_algo_name(o.algo));
    return 2;
  }
#ifndef HAVE_CUDA
  if (o.device_cuda) {
    fprintf(stderr, "allreduce_bench: this build has no CUDA (configure found no toolkit); use --device cpu\n");
    return 2;
  }
#endif
  if (o.nproc == 0) o.nproc = 2;
  if (o.join) return run_joined(&o);
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = o.nproc;
  cfg.label = "allreduce_bench";
  cfg.use_gpus = o.device_cuda;
  size_t need = (size_t)16 << 20;
  if (o.max_bytes > need) need = o.max_bytes;
  (void)need;
  shmddp_launch_result_t res;
  shmddp_status_t st = shmddp_launch(&cfg, bench_rank, &o, &res);
  if (st != SHMDDP_OK) {
    fprintf(stderr, "allreduce_bench: %s\n", res.message);
    return 2;
  }
  return res.exit_code;
}
