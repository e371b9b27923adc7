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
#include "src/obs/outfile.h"
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

static void fill_send(const bench_opts_t *o, int rank, void *send, size_t sendcount, size_t count,
                      int iter)
{
  coll_fill(send, o->coll == BENCH_ALL_GATHER ? count : sendcount, 0, rank, iter, o->dtype, o->op);
}

/* A rank's host buffers, sized for the largest row. */
typedef struct {
  shmddp_comm_t *comm;
  const bench_opts_t *o;
  int rank, n;
  size_t ds;
  char *send, *recv;
} host_ctx_t;

/* One row of the table: o->iters timed calls after o->warmup (every 64th asks whether the run
 * was stopped), then, with -c 1, one call on fresh inputs checked, so that the timed loop's
 * in-place updates do not matter. The time is the slowest rank's, the errors all ranks'. */
static shmddp_status_t host_row(const host_ctx_t *h, size_t bytes, bench_row_t *row)
{
  const bench_opts_t *o = h->o;
  size_t sendcount, recvcount, count;
  bench_counts(o->coll, bytes, h->ds, h->n, &sendcount, &recvcount, &count);
  /* In-place layouts: all_gather sends from its own block of recv, reduce_scatter receives
   * into its own block of send; all_reduce and broadcast use one buffer. */
  void *sbuf = h->send, *rbuf = h->recv;
  if (o->inplace) {
    if (o->coll == BENCH_ALL_GATHER) { rbuf = h->send; sbuf = h->send + (size_t)h->rank * count * h->ds; }
    else if (o->coll == BENCH_REDUCE_SCATTER) rbuf = h->send + (size_t)h->rank * count * h->ds;
    else rbuf = h->send;
  }
  void *fillbuf = o->inplace && o->coll == BENCH_ALL_GATHER ? sbuf : h->send;
  int whole = o->coll == BENCH_ALL_REDUCE || o->coll == BENCH_BROADCAST;
  *row = (bench_row_t){.bytes = count * h->ds * (whole ? 1 : (size_t)h->n), .count = count,
                       .algo = o->algo, .nccl_time_us = -1, .nccl_algbw = -1, .nccl_busbw = -1};
  fill_send(o, h->rank, fillbuf, sendcount, count, 0);
  shmddp_status_t st = SHMDDP_OK;
  for (long i = 0; i < o->warmup && st == SHMDDP_OK; i++) st = run_once(h->comm, o, sbuf, rbuf, count);
  if (st == SHMDDP_OK) st = shmddp_barrier(h->comm);
  double t0 = now_s();
  long done = 0;
  for (; done < o->iters && st == SHMDDP_OK; done++) {
    st = run_once(h->comm, o, sbuf, rbuf, count);
    if (done == 0) row->algo = shmddp_comm_last_algo(h->comm);
    if ((done & 63) == 63 && shmddp_stop_requested(h->comm)) { done++; break; }
  }
  double per_call = done ? (now_s() - t0) / (double)done : 0;
  if (st == SHMDDP_OK && o->check) {
    fill_send(o, h->rank, fillbuf, sendcount, count, 1);
    st = run_once(h->comm, o, sbuf, rbuf, count);
    if (st == SHMDDP_OK) row->errors = bench_count_errors(o, h->rank, h->n, rbuf, count, 1);
  }
  double errs = (double)row->errors;
  /* the slowest rank's time, every rank's errors */
  if (st == SHMDDP_OK) st = shmddp_all_reduce(h->comm, &per_call, &per_call, 1, SHMDDP_F64, SHMDDP_MAX, SHMDDP_HOST);
  if (st == SHMDDP_OK) st = shmddp_all_reduce(h->comm, &errs, &errs, 1, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST);
  if (st != SHMDDP_OK) return st;
  row->time_us = per_call * 1e6;
  row->errors = (long)errs;
  row->algbw = row->time_us > 0 ? (double)row->bytes / (row->time_us * 1e3) : 0;
  row->busbw = row->algbw * bench_bus_factor(o->coll, h->n);
  return SHMDDP_OK;
}

/* The rows from -b to -e, each -f times (or -i more than) the last, printed by rank 0; stops at
 * the first row with a wrong result (status 1) or when the run is asked to stop. */
static int host_sweep(const host_ctx_t *h, FILE *tsv)
{
  const bench_opts_t *o = h->o;
  if (h->rank == 0) bench_print_header(o, h->n, tsv);
  for (size_t bytes = o->min_bytes; bytes <= o->max_bytes;) {
    bench_row_t row;
    if (host_row(h, bytes, &row) != SHMDDP_OK) {
      fprintf(stderr, "allreduce_bench: %s\n", shmddp_comm_last_error(h->comm));
      return 1;
    }
    if (h->rank == 0) bench_print_row(o, &row, tsv);
    if (row.errors) return 1;
    if (shmddp_stop_requested(h->comm)) break;
    size_t next = o->step_bytes ? bytes + o->step_bytes : (size_t)((double)bytes * o->factor);
    if (next <= bytes) break;
    bytes = next;
  }
  return 0;
}

static int host_rank(shmddp_comm_t *comm, const bench_opts_t *o)
{
  host_ctx_t h = {.comm = comm, .o = o, .rank = shmddp_comm_rank(comm),
                  .n = shmddp_comm_size(comm), .ds = shmddp_dtype_size(o->dtype)};
  size_t maxs, maxr, maxc;
  bench_counts(o->coll, o->max_bytes, h.ds, h.n, &maxs, &maxr, &maxc);
  /* in place, all_gather receives every rank's block into the send buffer */
  if (o->inplace && o->coll == BENCH_ALL_GATHER && maxr > maxs) maxs = maxr;
  h.send = malloc(maxs * h.ds + 64);
  h.recv = malloc(maxr * h.ds + 64);
  FILE *tsv = NULL;
  char tsv_tmp[4096];
  int rc = 0;
  if (!h.send || !h.recv) {
    fprintf(stderr, "allreduce_bench: rank %d: out of memory for %zu bytes\n", h.rank, o->max_bytes);
    rc = 1;
  } else if (h.rank == 0 && o->tsv_path && /* private, renamed into place (outfile.h) */
             !(tsv = outfile_fopen_temp(o->tsv_path, tsv_tmp, sizeof tsv_tmp))) {
    fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->tsv_path, strerror(errno));
    shmddp_abort(comm, "rank 0 cannot write the table");
    rc = 1;
  }
  if (rc == 0) rc = host_sweep(&h, tsv);
  if (tsv && outfile_commit(tsv, tsv_tmp, o->tsv_path, 1) != 0) {
    fprintf(stderr, "allreduce_bench: cannot write %s: %s\n", o->tsv_path, strerror(errno));
    rc = 1;
  }
  free(h.send);
  free(h.recv);
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

/* The options that take a name from a list: the library's parser, and the list for the error. */
static const struct {
  int opt;
  int (*parse)(const char *name);
  const char *what, *names;
} name_opts[] = {
    {'d', shmddp_dtype_parse, "datatype", "f32 f64 f16 bf16 i32 i64"},
    {'o', shmddp_op_parse, "op", "sum avg min max prod"},
    {'C', bench_coll_parse, "collective",
     "all_reduce reduce_scatter all_gather broadcast all_to_all gather scatter"},
    {'a', shmddp_algo_parse, "algorithm", "auto direct ring twoshot cering staged coloc"},
};

/* -d, -o, -C or -a: the value of the name, or -1 after saying which names there are. */
static int parse_name(int opt, const char *arg)
{
  for (size_t i = 0; i < sizeof name_opts / sizeof name_opts[0]; i++) {
    if (name_opts[i].opt != opt) continue;
    int v = name_opts[i].parse(arg);
    if (v < 0)
      fprintf(stderr, "allreduce_bench: unknown %s '%s' (%s)\n", name_opts[i].what, arg,
              name_opts[i].names);
    return v;
  }
  return -1;
}

/* One option of the command line into o: 0, or 2 after saying what is wrong with it. */
static int parse_option(int c, const char *arg, bench_opts_t *o)
{
  char *end;
  switch (c) {
  case 'D':
    if (strcmp(arg, "cpu") == 0) o->device_cuda = 0;
    else if (strcmp(arg, "cuda") == 0) o->device_cuda = 1;
    else { fprintf(stderr, "allreduce_bench: --device must be cpu or cuda, not '%s'\n", arg); return 2; }
    return 0;
  case 'p':
    o->nproc = (int)strtol(arg, &end, 10);
    if (*end || o->nproc < 1 || o->nproc > SHMDDP_MAX_RANKS) {
      fprintf(stderr, "allreduce_bench: --nproc must be 1 to %d, not '%s'\n", SHMDDP_MAX_RANKS, arg);
      return 2;
    }
    return 0;
  case 'b': case 'e': case 'i': {
    size_t v;
    if (parse_size(arg, &v) != 0 || (c != 'i' && v == 0)) {
      fprintf(stderr, "allreduce_bench: -%c wants a size like 8, 4K, 1M or 1G, not '%s'\n", c, arg);
      return 2;
    }
    if (c == 'b') o->min_bytes = v; else if (c == 'e') o->max_bytes = v; else o->step_bytes = v;
    return 0;
  }
  case 'f':
    o->factor = strtod(arg, &end);
    if (*end || !(o->factor > 1)) { fprintf(stderr, "allreduce_bench: -f wants a factor > 1, not '%s'\n", arg); return 2; }
    return 0;
  case 'n': case 'w': {
    long v = strtol(arg, &end, 10);
    if (*end || v < (c == 'n' ? 1 : 0)) {
      fprintf(stderr, "allreduce_bench: -%c wants a count%s, not '%s'\n", c, c == 'n' ? " >= 1" : " >= 0", arg);
      return 2;
    }
    if (c == 'n') o->iters = v; else o->warmup = v;
    return 0;
  }
  case 'c':
    if (strcmp(arg, "0") && strcmp(arg, "1")) { fprintf(stderr, "allreduce_bench: -c wants 0 or 1\n"); return 2; }
    o->check = arg[0] == '1';
    return 0;
  case 'z':
    if (strcmp(arg, "0") && strcmp(arg, "1")) { fprintf(stderr, "allreduce_bench: -z takes 0 or 1, not '%s'\n", arg); return 2; }
    o->blocking = arg[0] == '1';
    return 0;
  case 'd': case 'o': case 'C': case 'a': {
    int v = parse_name(c, arg);
    if (v < 0) return 2;
    if (c == 'd') o->dtype = (shmddp_dtype_t)v;
    else if (c == 'o') o->op = (shmddp_op_t)v;
    else if (c == 'C') o->coll = (bench_coll_t)v;
    else o->algo = (shmddp_algo_t)v;
    return 0;
  }
  case 'N':
    if (strcmp(arg, "nccl")) { fprintf(stderr, "allreduce_bench: --compare knows only 'nccl'\n"); return 2; }
    o->compare_nccl = 1;
    return 0;
  case 'T': o->tsv_path = arg; return 0;
  case 'I': o->inplace = 1; return 0;
  case 'G': o->graph = 1; return 0;
  case 'J': o->join = 1; return 0;
  case 'B': o->copy_bw = 1; return 0;
  default: usage(stderr); return 2;
  }
}

/* The command line into o: -1 to run, else the exit status (0 after --help or --version). */
static int parse_args(int argc, char **argv, bench_opts_t *o)
{
  *o = (bench_opts_t){.min_bytes = 8, .max_bytes = (size_t)64 << 20, .factor = 2, .iters = 20,
                      .warmup = 5, .check = 1, .dtype = SHMDDP_F32, .op = SHMDDP_SUM};
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
  while ((c = getopt_long(argc, argv, "p:b:e:f:i:n:w:c:d:o:C:a:Iz:h", longopts, NULL)) != -1) {
    if (c == 'h') { usage(stdout); return 0; }
    if (c == 'V') { printf("shmddp-allreduce-bench %s\n", SHMDDP_BUILD_VERSION); return 0; }
    if (parse_option(c, optarg, o) != 0) return 2;
  }
  if (optind < argc) { fprintf(stderr, "allreduce_bench: unexpected argument '%s'\n", argv[optind]); return 2; }
  return -1;
}

/* The options together: 0, or 2 after saying which of them do not go together. */
static int check_opts(const bench_opts_t *o)
{
  if (o->min_bytes > o->max_bytes) { fprintf(stderr, "allreduce_bench: -b %zu is larger than -e %zu\n", o->min_bytes, o->max_bytes); return 2; }
  if (o->graph && o->blocking) {
    fprintf(stderr, "allreduce_bench: -z 1 waits after every call, --graph replays them all at once: give one of them\n");
    return 2;
  }
  if (o->coll >= BENCH_ALL_TO_ALL && (o->inplace || o->compare_nccl)) {
    fprintf(stderr, "allreduce_bench: -C %s: out of place only, and without --compare nccl\n",
            bench_coll_name(o->coll));
    return 2;
  }
  if (!o->device_cuda && (o->compare_nccl || o->graph || o->copy_bw || o->blocking)) {
    fprintf(stderr, "allreduce_bench: --compare nccl, --graph, --copy-bw and -z 1 need --device cuda\n");
    return 2;
  }
  if (!o->device_cuda && o->algo > SHMDDP_ALGO_RING) {
    fprintf(stderr, "allreduce_bench: algorithm '%s' is a device algorithm; host buffers use auto, direct or ring\n", shmddp_algo_name(o->algo));
    return 2;
  }
#ifndef HAVE_CUDA
  if (o->device_cuda) {
    fprintf(stderr, "allreduce_bench: this build has no CUDA (configure found no toolkit); use --device cpu\n");
    return 2;
  }
#endif
  return 0;
}

/* The ranks forked by shmddp_launch, as in training. */
static int run_launched(const bench_opts_t *o)
{
  shmddp_launch_config_t cfg = {.nproc = o->nproc, .label = "allreduce_bench",
                                .use_gpus = o->device_cuda};
  shmddp_launch_result_t res;
  if (shmddp_launch(&cfg, bench_rank, (void *)o, &res) != SHMDDP_OK) {
    fprintf(stderr, "allreduce_bench: %s\n", res.message);
    return 2;
  }
  return res.exit_code;
}

int main(int argc, char **argv)
{
  bench_opts_t o;
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0) return rc;
  if (check_opts(&o) != 0) return 2;
  if (o.nproc == 0) o.nproc = 2;
  return o.join ? run_joined(&o) : run_launched(&o);
}
