/* check_cuda_collectives.c — the CUDA transport against f64 host references: every algorithm x
 * dtype x op x size (1 element, odd sizes, unaligned buffers, up to 256 MiB), the other
 * collectives, CUDA-graph capture with 100 replays on changing inputs, a duplicated communicator
 * with its own transport (not yet run on a GPU), a killed rank and an absent
 * one (the survivor errors out instead of hanging), the forced P2P-failure fallback to host
 * staging, and the GPU reduce kernel against the CPU reference bit for bit.
 *
 * Without a GPU the whole suite is skipped (exit 77) with a message (SUITE_MAIN). CUDA is never
 * initialised in main(): the GPU probe runs in a forked child, and every test initialises CUDA
 * only inside its own ranks (forked by shmddp_launch) or its own CK_FORK child. */
#include "config.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/reduce/reduce_cpu.h"
#include "collectives/reduce/reduce_cuda.h"
#include "shmddp.h"
#include "shmddp_cuda.h"
#include "tools/coll_check.h"
#include "tests/failures.h"
#include "tests/suite_main.h"

#define RFAIL(...)                                                                            \
  do {                                                                                        \
    fprintf(stderr, "rank %d: ", shmddp_comm_rank(comm));                                     \
    fprintf(stderr, __VA_ARGS__);                                                             \
    fprintf(stderr, "\n");                                                                    \
    return 1;                                                                                 \
  } while (0)

#define RCUDA(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) RFAIL("%s: %s", #x, cudaGetErrorString(e_));                       \
  } while (0)

#define RST(x)                                                                                \
  do {                                                                                        \
    if ((x) != SHMDDP_OK) RFAIL("%s: %s", #x, shmddp_comm_last_error(comm));                  \
  } while (0)

static void launch(int nproc, shmddp_rank_fn fn, void *arg, double grace_s,
                   shmddp_launch_result_t *res)
{
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = nproc;
  cfg.use_gpus = 1;
  cfg.grace_s = grace_s;
  cfg.timeout_s = 120;
  cfg.label = "check_cuda";
  cfg.quiet = grace_s > 10; /* the failure tests expect a rank to die */
  shmddp_status_t st = shmddp_launch(&cfg, fn, arg, res);
  ck_assert_msg(st == SHMDDP_OK, "launch failed: %s", res->message);
}

static int init_cuda(shmddp_comm_t *comm)
{
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.timeout_s = 60;
  RST(shmddp_comm_init_cuda(comm, &cc));
  return 0;
}

/* ---------------- all_reduce matrix ---------------- */

typedef struct {
  const shmddp_algo_t *algos;
  int nalgos;
  const shmddp_dtype_t *dtypes;
  int ndtypes;
  const shmddp_op_t *ops;
  int nops;
  const size_t *counts;
  int ncounts;
} matrix_t;

/* Each rank's wrong results, in memory shared with the test (mapped before the launch). */
static case_failures_t *g_fails;

/* Launches nproc ranks running fn; fails once, listing every wrong result of every rank. */
static void run_matrix(int nproc, shmddp_rank_fn fn, void *arg, const char *what)
{
  g_fails = mmap(NULL, SHMDDP_MAX_RANKS * sizeof *g_fails, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(g_fails != MAP_FAILED);
  for (int r = 0; r < SHMDDP_MAX_RANKS; r++) cf_init(&g_fails[r]);
  shmddp_launch_result_t res;
  launch(nproc, fn, arg, 2, &res);
  case_failures_t all;
  cf_merge_ranks(&all, g_fails, nproc, "rank");
  munmap(g_fails, SHMDDP_MAX_RANKS * sizeof *g_fails);
  CF_ASSERT_NONE(&all, what);
  ck_assert_msg(res.exit_code == 0, "a rank failed: %s (see stderr)", res.message);
}

static int matrix_rank(shmddp_comm_t *comm, void *arg)
{
  const matrix_t *m = arg;
  if (init_cuda(comm)) return 1;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t maxc = 0;
  for (int i = 0; i < m->ncounts; i++) maxc = m->counts[i] > maxc ? m->counts[i] : maxc;
  size_t maxb = maxc * 8 + 64;
  char *send, *recv, *h = malloc(maxb);
  cudaStream_t s;
  RCUDA(cudaMalloc((void **)&send, maxb));
  RCUDA(cudaMalloc((void **)&recv, maxb));
  RCUDA(cudaStreamCreate(&s));
  if (!h) RFAIL("out of memory");
  int cs = 0;
  for (int a = 0; a < m->nalgos; a++) {
    RST(shmddp_comm_set_algo(comm, m->algos[a]));
    for (int d = 0; d < m->ndtypes; d++)
      for (int o = 0; o < m->nops; o++)
        for (int c = 0; c < m->ncounts; c++, cs++) {
          shmddp_dtype_t dt = m->dtypes[d];
          shmddp_op_t op = m->ops[o];
          size_t ds = shmddp_dtype_size(dt), count = m->counts[c];
          /* every third case in place, every other one off 16-byte alignment */
          size_t off = (cs & 1) ? ds : 0;
          int inplace = cs % 3 == 0;
          char *sb = send + off, *rb = inplace ? sb : recv + off;
          coll_fill(h, count, 0, rank, cs, dt, op);
          RCUDA(cudaMemcpy(sb, h, count * ds, cudaMemcpyHostToDevice));
          if (!inplace) RCUDA(cudaMemset(rb, 0xff, count * ds)); /* NaN poison */
          RST(shmddp_all_reduce(comm, sb, rb, count, dt, op, (shmddp_stream_t)s));
          shmddp_algo_t used = shmddp_comm_last_algo(comm);
          RST(shmddp_cuda_sync(comm, (shmddp_stream_t)s));
          RCUDA(cudaMemcpy(h, rb, count * ds, cudaMemcpyDeviceToHost));
          /* Wrong results are listed (every case runs); a failed call ends the rank. */
          case_failures_t *f = &g_fails[rank];
          size_t first = 0, bad = coll_count_errors(h, count, 0, n, cs, dt, op, &first);
          CF_CHECK(f, bad == 0, "all_reduce %s %s %s count %zu%s: %zu wrong, first at %zu: got %g "
                   "want %g", shmddp_algo_name(used), shmddp_dtype_name(dt), shmddp_op_name(op),
                   count, inplace ? " in place" : "", bad, first, coll_load(h, first, dt),
                   coll_expected(n, first, cs, dt, op));
          CF_CHECK(f, coll_same_on_all_ranks(comm, h, count * ds), "all_reduce %s %s %s count %zu: "
                   "ranks hold different bits", shmddp_algo_name(used), shmddp_dtype_name(dt),
                   shmddp_op_name(op), count);
          shmddp_algo_t want = shmddp_cuda_p2p(comm) ? m->algos[a] : SHMDDP_ALGO_STAGED;
          CF_CHECK(f, want == SHMDDP_ALGO_AUTO || used == want, "%s %s count %zu: forced %s but "
                   "%s ran", shmddp_dtype_name(dt), shmddp_op_name(op), count,
                   shmddp_algo_name(want), shmddp_algo_name(used));
        }
  }
  cudaFree(send);
  cudaFree(recv);
  free(h);
  return 0;
}

static const shmddp_algo_t all_algos[] = {SHMDDP_ALGO_DIRECT, SHMDDP_ALGO_TWOSHOT,
                                          SHMDDP_ALGO_CE_RING, SHMDDP_ALGO_STAGED,
                                          SHMDDP_ALGO_COLOC};
#define NALGOS ((int)(sizeof all_algos / sizeof all_algos[0]))
static const shmddp_dtype_t float_types[] = {SHMDDP_F32, SHMDDP_F64, SHMDDP_F16, SHMDDP_BF16};
static const shmddp_op_t main_ops[] = {SHMDDP_SUM, SHMDDP_AVG, SHMDDP_MIN, SHMDDP_MAX};

START_TEST(test_allreduce_matrix)
{
  static const size_t counts[] = {1, 7, 1000, 65537, (1 << 20) + 3};
  matrix_t m = {.algos = all_algos, .nalgos = NALGOS, .dtypes = float_types, .ndtypes = 4,
                .ops = main_ops, .nops = 4, .counts = counts, .ncounts = 5};
  run_matrix(2, matrix_rank, &m, "all_reduce matrix");
}
END_TEST

static int auto_rank(shmddp_comm_t *comm, void *arg)
{
  /* Integers (the pattern's PROD inputs include 0.5, so no PROD for them) and float PROD. */
  static const shmddp_algo_t algos[] = {SHMDDP_ALGO_AUTO};
  static const shmddp_dtype_t itypes[] = {SHMDDP_I32, SHMDDP_I64};
  static const shmddp_dtype_t ftypes[] = {SHMDDP_F32, SHMDDP_F64};
  static const shmddp_op_t iops[] = {SHMDDP_SUM, SHMDDP_AVG, SHMDDP_MIN, SHMDDP_MAX};
  static const shmddp_op_t fops[] = {SHMDDP_PROD};
  static const size_t counts[] = {3, 4096, 300001, (size_t)5 << 20};
  matrix_t a = {.algos = algos, .nalgos = 1, .dtypes = itypes, .ndtypes = 2, .ops = iops,
                .nops = 4, .counts = counts, .ncounts = 4};
  matrix_t b = {.algos = algos, .nalgos = 1, .dtypes = ftypes, .ndtypes = 2, .ops = fops,
                .nops = 1, .counts = counts, .ncounts = 4};
  (void)arg;
  if (matrix_rank(comm, &a)) return 1;
  shmddp_comm_free_cuda(comm);
  return matrix_rank(comm, &b);
}

START_TEST(test_allreduce_auto_and_ints)
{
  run_matrix(2, auto_rank, NULL, "all_reduce auto, integers, prod");
}
END_TEST

START_TEST(test_allreduce_256mib)
{
  static const shmddp_dtype_t types[] = {SHMDDP_F32};
  static const shmddp_op_t ops[] = {SHMDDP_SUM};
  static const size_t counts[] = {(size_t)64 << 20}; /* 256 MiB of f32 */
  matrix_t m = {.algos = all_algos, .nalgos = NALGOS, .dtypes = types, .ndtypes = 1, .ops = ops,
                .nops = 1, .counts = counts, .ncounts = 1};
  run_matrix(2, matrix_rank, &m, "all_reduce 256 MiB");
}
END_TEST

START_TEST(test_allreduce_three_ranks)
{
  static const shmddp_dtype_t types[] = {SHMDDP_F32, SHMDDP_BF16};
  static const shmddp_op_t ops[] = {SHMDDP_SUM, SHMDDP_MAX};
  static const size_t counts[] = {1, 1000, 65537, (1 << 20) + 3};
  matrix_t m = {.algos = all_algos, .nalgos = NALGOS, .dtypes = types, .ndtypes = 2, .ops = ops,
                .nops = 2, .counts = counts, .ncounts = 4};
  run_matrix(3, matrix_rank, &m, "all_reduce on 3 ranks");
}
END_TEST

/* ---------------- reduce_scatter, all_gather, broadcast, reduce ---------------- */

static int others_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  if (init_cuda(comm)) return 1;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  static const size_t counts[] = {1, 999, (1 << 20) + 5};
  static const shmddp_algo_t algos[] = {SHMDDP_ALGO_AUTO, SHMDDP_ALGO_STAGED};
  size_t maxb = ((size_t)(1 << 20) + 5) * 8 * (size_t)n + 64;
  char *send, *recv, *h = malloc(maxb);
  cudaStream_t s;
  RCUDA(cudaMalloc((void **)&send, maxb));
  RCUDA(cudaMalloc((void **)&recv, maxb));
  RCUDA(cudaStreamCreate(&s));
  shmddp_stream_t st = (shmddp_stream_t)s;
  int it = 100;
  for (int a = 0; a < 2; a++) {
    RST(shmddp_comm_set_algo(comm, algos[a]));
    for (int d = 0; d < 4; d++)
      for (int c = 0; c < 3; c++, it++) {
        shmddp_dtype_t dt = float_types[d];
        size_t ds = shmddp_dtype_size(dt), cnt = counts[c];
        /* reduce_scatter: rank r gets block r of the sum */
        coll_fill(h, cnt * (size_t)n, 0, rank, it, dt, SHMDDP_SUM);
        RCUDA(cudaMemcpy(send, h, cnt * (size_t)n * ds, cudaMemcpyHostToDevice));
        RCUDA(cudaMemset(recv, 0xff, cnt * ds));
        RST(shmddp_reduce_scatter(comm, send, recv, cnt, dt, SHMDDP_SUM, st));
        RST(shmddp_cuda_sync(comm, st));
        RCUDA(cudaMemcpy(h, recv, cnt * ds, cudaMemcpyDeviceToHost));
        size_t bad = coll_count_errors(h, cnt, (size_t)rank * cnt, n, it, dt, SHMDDP_SUM, NULL);
        if (bad) RFAIL("reduce_scatter %s count %zu (%s): %zu wrong", shmddp_dtype_name(dt), cnt,
                       shmddp_algo_name(algos[a]), bad);
        /* all_gather: block r holds rank r's input */
        coll_fill(h, cnt, 0, rank, it, dt, SHMDDP_SUM);
        RCUDA(cudaMemcpy(send, h, cnt * ds, cudaMemcpyHostToDevice));
        RCUDA(cudaMemset(recv, 0xff, cnt * ds * (size_t)n));
        RST(shmddp_all_gather(comm, send, recv, cnt, dt, st));
        RST(shmddp_cuda_sync(comm, st));
        RCUDA(cudaMemcpy(h, recv, cnt * ds * (size_t)n, cudaMemcpyDeviceToHost));
        for (int r = 0; r < n; r++)
          for (size_t k = 0; k < cnt; k++)
            if (coll_load(h, (size_t)r * cnt + k, dt) != coll_round(coll_pattern(r, k, it, dt, SHMDDP_SUM), dt))
              RFAIL("all_gather %s count %zu (%s): block %d element %zu wrong", shmddp_dtype_name(dt),
                    cnt, shmddp_algo_name(algos[a]), r, k);
        /* broadcast from the last rank (in place on the root), reduce (max) to rank 0 */
        int root = n - 1;
        coll_fill(h, cnt, 0, rank, it, dt, SHMDDP_SUM);
        RCUDA(cudaMemcpy(send, h, cnt * ds, cudaMemcpyHostToDevice));
        RCUDA(cudaMemset(recv, 0xff, cnt * ds));
        char *bdst = rank == root ? send : recv;
        RST(shmddp_broadcast(comm, send, bdst, cnt, dt, root, st));
        RST(shmddp_cuda_sync(comm, st));
        RCUDA(cudaMemcpy(h, bdst, cnt * ds, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < cnt; k++)
          if (coll_load(h, k, dt) != coll_round(coll_pattern(root, k, it, dt, SHMDDP_SUM), dt))
            RFAIL("broadcast %s count %zu (%s): element %zu wrong", shmddp_dtype_name(dt), cnt,
                  shmddp_algo_name(algos[a]), k);
        coll_fill(h, cnt, 0, rank, it, dt, SHMDDP_MAX);
        RCUDA(cudaMemcpy(send, h, cnt * ds, cudaMemcpyHostToDevice));
        RCUDA(cudaMemset(recv, 0xff, cnt * ds));
        RST(shmddp_reduce(comm, send, rank == 0 ? recv : NULL, cnt, dt, SHMDDP_MAX, 0, st));
        RST(shmddp_cuda_sync(comm, st));
        if (rank == 0) {
          RCUDA(cudaMemcpy(h, recv, cnt * ds, cudaMemcpyDeviceToHost));
          bad = coll_count_errors(h, cnt, 0, n, it, dt, SHMDDP_MAX, NULL);
          if (bad) RFAIL("reduce %s count %zu (%s): %zu wrong", shmddp_dtype_name(dt), cnt,
                         shmddp_algo_name(algos[a]), bad);
        }
      }
  }
  return 0;
}

START_TEST(test_other_collectives)
{
  shmddp_launch_result_t res;
  launch(_i, others_rank, NULL, 2, &res);
  ck_assert_msg(res.exit_code == 0, "a rank failed: %s (see stderr)", res.message);
}
END_TEST

/* ---------------- CUDA graphs ---------------- */

static int graph_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  if (init_cuda(comm)) return 1;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  /* two-shot twice: through the scratch areas (small) and on the users' buffers (large) */
  const shmddp_algo_t algos[] = {SHMDDP_ALGO_DIRECT, SHMDDP_ALGO_TWOSHOT, SHMDDP_ALGO_TWOSHOT,
                                 SHMDDP_ALGO_CE_RING, SHMDDP_ALGO_STAGED};
  const size_t counts[] = {1000, 1000, ((size_t)2 << 20) + 1, (size_t)3 << 20, 77777};
  size_t maxb = ((size_t)3 << 20) * 4;
  char *send, *recv, *h = malloc(maxb);
  cudaStream_t s;
  RCUDA(cudaMalloc((void **)&send, maxb));
  RCUDA(cudaMalloc((void **)&recv, maxb));
  RCUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  shmddp_stream_t st = (shmddp_stream_t)s;
  for (int a = 0; a < 5; a++) {
    size_t count = counts[a], bytes = count * 4;
    RST(shmddp_comm_set_algo(comm, algos[a]));
    /* one call outside the capture registers the buffers with the peers */
    RST(shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st));
    RST(shmddp_cuda_sync(comm, st));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    RCUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    RST(shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st));
    RCUDA(cudaStreamEndCapture(s, &g));
    RCUDA(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 100; i++) {
      coll_fill(h, count, 0, rank, 1000 + i, SHMDDP_F32, SHMDDP_SUM);
      RCUDA(cudaMemcpyAsync(send, h, bytes, cudaMemcpyHostToDevice, s));
      RCUDA(cudaGraphLaunch(ge, s));
      RCUDA(cudaMemcpyAsync(h, recv, bytes, cudaMemcpyDeviceToHost, s));
      RST(shmddp_cuda_sync(comm, st));
      size_t bad = coll_count_errors(h, count, 0, n, 1000 + i, SHMDDP_F32, SHMDDP_SUM, NULL);
      if (bad) RFAIL("graph replay %d of %s (count %zu): %zu wrong", i,
                     shmddp_algo_name(algos[a]), count, bad);
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    /* and the communicator still works outside the graph (the input written on s: s does not
     * wait for the legacy stream, and a cudaMemcpy from pageable memory may return before its
     * last bytes have landed) */
    coll_fill(h, count, 0, rank, 7, SHMDDP_F32, SHMDDP_SUM);
    RCUDA(cudaMemcpyAsync(send, h, bytes, cudaMemcpyHostToDevice, s));
    RST(shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st));
    RST(shmddp_cuda_sync(comm, st));
    RCUDA(cudaMemcpy(h, recv, bytes, cudaMemcpyDeviceToHost));
    if (coll_count_errors(h, count, 0, n, 7, SHMDDP_F32, SHMDDP_SUM, NULL))
      RFAIL("%s after graph replays: wrong", shmddp_algo_name(algos[a]));
  }
  return 0;
}

START_TEST(test_graph_replay)
{
  shmddp_launch_result_t res;
  launch(2, graph_rank, NULL, 2, &res);
  ck_assert_msg(res.exit_code == 0, "a rank failed: %s (see stderr)", res.message);
}
END_TEST

/* ---------------- failures: a killed rank, an absent rank, no P2P ---------------- */

typedef struct {
  shmddp_algo_t algo;
  int mode;               /* 0: rank 1 is killed; 1: rank 1 never calls (timeout) */
  volatile int *outcome;  /* shared: rank 0's final status, -1 while running */
} fail_t;

static int fail_rank(shmddp_comm_t *comm, void *arg)
{
  fail_t *f = arg;
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.timeout_s = f->mode ? 2 : 60;
  RST(shmddp_comm_init_cuda(comm, &cc));
  RST(shmddp_comm_set_algo(comm, f->algo));
  int rank = shmddp_comm_rank(comm);
  float *buf;
  cudaStream_t s;
  RCUDA(cudaMalloc((void **)&buf, 4 << 20));
  RCUDA(cudaMemset(buf, 0, 4 << 20));
  RCUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  shmddp_stream_t st = (shmddp_stream_t)s;
  for (int i = 0; i < 3; i++) {
    RST(shmddp_all_reduce(comm, buf, buf, 1 << 18, SHMDDP_F32, SHMDDP_SUM, st));
    RST(shmddp_cuda_sync(comm, st));
  }
  if (rank == 1) {
    if (f->mode == 0) raise(SIGKILL);
    /* Absent: rank 0 must give up on its own (timeout 2 s). Rank 1 stays alive, never calling,
     * until rank 0 has reported its outcome (were it to exit, rank 0 would see that instead of
     * timing out); the 300 s only bound a hang of rank 0, which the test then reports. */
    for (int i = 0; i < 30000 && *f->outcome == -1; i++) usleep(10000);
    return 0;
  }
  shmddp_status_t last = SHMDDP_OK;
  for (int i = 0; i < 1000 && last == SHMDDP_OK; i++) {
    last = shmddp_all_reduce(comm, buf, buf, 1 << 18, SHMDDP_F32, SHMDDP_SUM, st);
    if (last == SHMDDP_OK) last = shmddp_cuda_sync(comm, st);
  }
  fprintf(stderr, "rank 0 (%s): %s: %s\n", shmddp_algo_name(f->algo), shmddp_strerror(last),
          shmddp_comm_last_error(comm));
  *f->outcome = (int)last;
  return 0;
}

static void run_failure(int mode, int algo_index)
{
  volatile int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(shared != MAP_FAILED);
  *shared = -1;
  fail_t f = {.algo = all_algos[algo_index], .mode = mode, .outcome = shared};
  shmddp_launch_result_t res;
  launch(2, fail_rank, &f, 30, &res);
  int outcome = *shared;
  munmap((void *)shared, 4096);
  ck_assert_msg(outcome != -1, "rank 0 did not finish (hung or crashed): %s", res.message);
  ck_assert_msg(outcome != SHMDDP_OK, "rank 0 kept succeeding without its peer");
  if (mode == 0) {
    ck_assert_int_eq(res.failed_rank, 1);
    ck_assert_msg(outcome == SHMDDP_ERR_ABORTED || outcome == SHMDDP_ERR_TIMEOUT ||
                      outcome == SHMDDP_ERR_CUDA,
                  "unexpected status %d", outcome);
  } else {
    ck_assert_msg(outcome == SHMDDP_ERR_TIMEOUT, "expected a timeout, got %s",
                  shmddp_strerror((shmddp_status_t)outcome));
  }
}

START_TEST(test_killed_rank) { run_failure(0, _i); }
END_TEST

START_TEST(test_absent_rank_times_out) { run_failure(1, _i == 0 ? 0 : 3); }
END_TEST

static int nop2p_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.fail_p2p_check = 1;
  cc.quiet = shmddp_comm_rank(comm) != 0; /* rank 0's warning shows in the log */
  RST(shmddp_comm_init_cuda(comm, &cc));
  if (shmddp_cuda_p2p(comm) != 0) RFAIL("P2P still on after a failed check");
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t count = (1 << 20) + 3;
  char *send, *recv, *h = malloc(count * 4);
  RCUDA(cudaMalloc((void **)&send, count * 4));
  RCUDA(cudaMalloc((void **)&recv, count * 4));
  coll_fill(h, count, 0, rank, 5, SHMDDP_F32, SHMDDP_SUM);
  RCUDA(cudaMemcpy(send, h, count * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  RCUDA(cudaStreamCreate(&s));
  RST(shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)s));
  if (shmddp_comm_last_algo(comm) != SHMDDP_ALGO_STAGED)
    RFAIL("expected the host-staged algorithm, got %s", shmddp_algo_name(shmddp_comm_last_algo(comm)));
  RST(shmddp_cuda_sync(comm, (shmddp_stream_t)s));
  RCUDA(cudaMemcpy(h, recv, count * 4, cudaMemcpyDeviceToHost));
  if (coll_count_errors(h, count, 0, n, 5, SHMDDP_F32, SHMDDP_SUM, NULL)) RFAIL("staged result wrong");
  return 0;
}

START_TEST(test_p2p_failure_falls_back)
{
  shmddp_launch_result_t res;
  launch(2, nop2p_rank, NULL, 2, &res);
  ck_assert_msg(res.exit_code == 0, "a rank failed: %s (see stderr)", res.message);
}
END_TEST

/* ---------------- two transports on one group (shmddp_comm_dup), as DDP uses them ---------------- */

static int dup_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  if (init_cuda(comm)) return 1;
  shmddp_comm_t *d = NULL;
  RST(shmddp_comm_dup(comm, &d));
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.timeout_s = 60;
  if (shmddp_comm_init_cuda(d, &cc) != SHMDDP_OK) RFAIL("duplicate: %s", shmddp_comm_last_error(d));
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  const size_t counts[] = {1000, (size_t)3 << 20};
  char *send, *recv, *h = malloc(((size_t)3 << 20) * 4);
  cudaStream_t s;
  RCUDA(cudaMalloc((void **)&send, ((size_t)3 << 20) * 4));
  RCUDA(cudaMalloc((void **)&recv, ((size_t)3 << 20) * 4));
  RCUDA(cudaStreamCreate(&s));
  for (int i = 0; i < 8; i++) {
    shmddp_comm_t *c = i & 1 ? d : comm;
    size_t count = counts[(i >> 1) & 1];
    coll_fill(h, count, 0, rank, 200 + i, SHMDDP_F32, SHMDDP_SUM);
    RCUDA(cudaMemcpy(send, h, count * 4, cudaMemcpyHostToDevice));
    if (shmddp_all_reduce(c, send, recv, count, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)s) != SHMDDP_OK ||
        shmddp_cuda_sync(c, (shmddp_stream_t)s) != SHMDDP_OK)
      RFAIL("%s: %s", i & 1 ? "duplicate" : "base", shmddp_comm_last_error(c));
    RCUDA(cudaMemcpy(h, recv, count * 4, cudaMemcpyDeviceToHost));
    if (coll_count_errors(h, count, 0, n, 200 + i, SHMDDP_F32, SHMDDP_SUM, NULL))
      RFAIL("%s communicator, count %zu: wrong result", i & 1 ? "duplicate" : "base", count);
  }
  shmddp_comm_free(d);
  return 0;
}

START_TEST(test_duplicate_communicator)
{
  shmddp_launch_result_t res;
  launch(2, dup_rank, NULL, 2, &res);
  ck_assert_msg(res.exit_code == 0, "a rank failed: %s (see stderr)", res.message);
}
END_TEST

/* ---------------- GPU reduce kernel == CPU reference, bit for bit ---------------- */

static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static uint64_t rng(void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Random values with the edge cases every few elements: NaN, +-inf, -0, subnormals, huge. */
static void random_fill(void *buf, size_t n, shmddp_dtype_t dt)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rng();
    int edge = (r & 31) == 0;
    double v = ((double)(int64_t)(r >> 11) / 9007199254740992.0) * 64.0;
    switch (dt) {
    case SHMDDP_F32: {
      float f = (float)v;
      if (edge) { uint32_t u = (uint32_t)(r >> 32); memcpy(&f, &u, 4); } /* any bit pattern */
      ((float *)buf)[i] = f;
      break;
    }
    case SHMDDP_F64: {
      double d = v;
      if (edge) { uint64_t u = r * 0x9E3779B97F4A7C15ULL; memcpy(&d, &u, 8); }
      ((double *)buf)[i] = d;
      break;
    }
    case SHMDDP_F16: case SHMDDP_BF16: ((uint16_t *)buf)[i] = (uint16_t)(r >> 20); break;
    case SHMDDP_I32: case SHMDDP_U32: ((uint32_t *)buf)[i] = (uint32_t)(r >> 17); break;
    case SHMDDP_I8: case SHMDDP_U8: case SHMDDP_F8E4M3: case SHMDDP_F8E5M2:
      ((uint8_t *)buf)[i] = (uint8_t)(r >> 40); /* any bit pattern, NaNs included */
      break;
    case SHMDDP_I64: case SHMDDP_U64: ((uint64_t *)buf)[i] = r * 3; break;
    default: ck_abort_msg("random_fill: no generator for %s", shmddp_dtype_name(dt));
    }
  }
}

static int is_nan(shmddp_dtype_t dt, const void *p)
{
  uint16_t h;
  switch (dt) {
  case SHMDDP_F32: { float f; memcpy(&f, p, 4); return f != f; }
  case SHMDDP_F64: { double d; memcpy(&d, p, 8); return d != d; }
  case SHMDDP_F16: memcpy(&h, p, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
  case SHMDDP_BF16: memcpy(&h, p, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
  case SHMDDP_F8E4M3: return (*(const uint8_t *)p & 0x7f) == 0x7f;
  case SHMDDP_F8E5M2: return (*(const uint8_t *)p & 0x7c) == 0x7c && (*(const uint8_t *)p & 3);
  default: return 0;
  }
}

/* Equal bits; or both NaN: which NaN an addition returns is the hardware's choice (x86 keeps an
 * operand's payload, NVIDIA GPUs return the canonical NaN), not arithmetic. */
static int same_value(shmddp_dtype_t dt, const void *a, const void *b)
{
  if (memcmp(a, b, shmddp_dtype_size(dt)) == 0) return 1;
  return is_nan(dt, a) && is_nan(dt, b);
}

START_TEST(test_reduce_kernel_matches_cpu)
{
  const size_t n = 100003;
  int devs = 0;
  ck_assert(cudaGetDeviceCount(&devs) == cudaSuccess && devs > 0);
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++)
    for (int op = 0; op < SHMDDP_NUM_OPS; op++)
      for (int nsrc = 1; nsrc <= 4; nsrc += 3)
        for (int off = 0; off <= 1; off++) {
          size_t ds = shmddp_dtype_size((shmddp_dtype_t)dt), bytes = (n + 2) * ds;
          void *hs[4], *ds_[4];
          const void *srcs[4];
          for (int i = 0; i < nsrc; i++) {
            hs[i] = malloc(bytes);
            random_fill(hs[i], n + 2, (shmddp_dtype_t)dt);
            ck_assert(cudaMalloc(&ds_[i], bytes) == cudaSuccess);
            ck_assert(cudaMemcpy(ds_[i], hs[i], bytes, cudaMemcpyHostToDevice) == cudaSuccess);
            srcs[i] = (char *)ds_[i] + off * ds;
          }
          const void *hsrcs[4];
          for (int i = 0; i < nsrc; i++) hsrcs[i] = (char *)hs[i] + off * ds;
          void *want = malloc(bytes), *got = malloc(bytes), *dd;
          reduce_cpu_multi(want, hsrcs, nsrc, n, (shmddp_dtype_t)dt, (shmddp_op_t)op, 3);
          ck_assert(cudaMalloc(&dd, bytes) == cudaSuccess);
          ck_assert_int_eq(reduce_cuda_multi((char *)dd + off * ds, srcs, nsrc, n,
                                             (shmddp_dtype_t)dt, (shmddp_op_t)op, 3, NULL), 0);
          ck_assert(cudaMemcpy(got, (char *)dd + off * ds, n * ds, cudaMemcpyDeviceToHost) == cudaSuccess);
          size_t bad = 0, first = 0;
          for (size_t i = 0; i < n; i++)
            if (!same_value((shmddp_dtype_t)dt, (char *)got + i * ds, (char *)want + i * ds)) {
              if (!bad) first = i;
              bad++;
            }
          ck_assert_msg(bad == 0, "%s %s, %d sources, offset %d: %zu elements differ from the CPU "
                        "reference, first at %zu", shmddp_dtype_name((shmddp_dtype_t)dt),
                        shmddp_op_name((shmddp_op_t)op), nsrc, off, bad, first);
          for (int i = 0; i < nsrc; i++) { free(hs[i]); cudaFree(ds_[i]); }
          free(want);
          free(got);
          cudaFree(dd);
        }
}
END_TEST

/* f32 <-> bf16/f16 buffer conversions (DDP's --grad-comm bf16): the GPU's bits are the CPU's,
 * NaN, infinities, ties and overflow included, and unsupported pairs are refused. */
START_TEST(test_convert_kernel_matches_cpu)
{
  const size_t n = 100003;
  float *x = malloc(n * 4), *wantf = malloc(n * 4), *gotf = malloc(n * 4);
  uint16_t *want = malloc(n * 2), *got = malloc(n * 2);
  random_fill(x, n, SHMDDP_F32);
  x[0] = NAN, x[1] = -INFINITY, x[2] = 0x1.fffffep127f, x[3] = 1.0f + 0x1p-8f, x[4] = -0.0f;
  void *dx, *dh, *dw;
  ck_assert(cudaMalloc(&dx, n * 4) == cudaSuccess && cudaMalloc(&dh, n * 2) == cudaSuccess &&
            cudaMalloc(&dw, n * 4) == cudaSuccess);
  ck_assert(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice) == cudaSuccess);
  for (int k = 0; k < 2; k++) {
    shmddp_dtype_t t = k ? SHMDDP_F16 : SHMDDP_BF16;
    ck_assert_int_eq(reduce_cpu_convert(want, t, x, SHMDDP_F32, n), 0);
    ck_assert_int_eq(reduce_cpu_convert(wantf, SHMDDP_F32, want, t, n), 0);
    ck_assert_int_eq(reduce_cuda_convert(dh, t, dx, SHMDDP_F32, n, NULL), 0);
    ck_assert_int_eq(reduce_cuda_convert(dw, SHMDDP_F32, dh, t, n, NULL), 0);
    ck_assert(cudaMemcpy(got, dh, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
    ck_assert(cudaMemcpy(gotf, dw, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
      if (!same_value(t, &got[i], &want[i]) || !same_value(SHMDDP_F32, &gotf[i], &wantf[i]))
        if (!bad++) first = i;
    ck_assert_msg(bad == 0, "%s: %zu conversions differ from the CPU's, first at %zu (%a)",
                  shmddp_dtype_name(t), bad, first, bad ? x[first] : 0.0f);
  }
  ck_assert_int_ne(reduce_cuda_convert(dh, SHMDDP_F16, dh, SHMDDP_BF16, n, NULL), 0);
  cudaFree(dx), cudaFree(dh), cudaFree(dw);
  free(x), free(wantf), free(gotf), free(want), free(got);
}
END_TEST

static Suite *make_cuda_collectives_suite(const suite_env_t *env)
{
  if (env->gpus < 2)
    printf("check_cuda_collectives: %d GPU visible: ranks share it (correctness only)\n", env->gpus);
  Suite *s = suite_create("cuda_collectives");
  TCase *tc;
  /* Two programs (tests/local.mk), of about equal length: the kernels and all-reduce; the other
   * collectives, graphs and failures (check_cuda_collectives_other, SUITE_PART "other"). */
  if (strcmp(env->part, "other") != 0) {
    SUITE_CASE(s, "reduce_kernel", test_reduce_kernel_matches_cpu, test_convert_kernel_matches_cpu);
    tc = SUITE_CASE(s, "all_reduce", test_allreduce_matrix, test_allreduce_auto_and_ints,
                    test_allreduce_256mib, test_allreduce_three_ranks);
    tcase_set_timeout(tc, 600);
    return s;
  }
  tc = tcase_create("other_collectives");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, test_other_collectives, 2, 4); /* 2 and 3 ranks */
  suite_add_tcase(s, tc);
  tc = SUITE_CASE(s, "graphs", test_graph_replay, test_duplicate_communicator);
  tcase_set_timeout(tc, 300);
  tc = tcase_create("failures");
  tcase_add_loop_test(tc, test_killed_rank, 0, NALGOS); /* every algorithm */
  tcase_add_loop_test(tc, test_absent_rank_times_out, 0, 2);
  tcase_add_test(tc, test_p2p_failure_falls_back);
  suite_add_tcase(s, tc);
  return s;
}

SUITE_MAIN("check_cuda_collectives", make_cuda_collectives_suite, 1)
