/* check_coloc_cuda.c — ranks that share a GPU, on the GPU: every collective (all-to-all, gather
 * and scatter too: one co-located call each, like the reductions) through the co-located path
 * against f64 host references (2, 3 and 4 ranks on GPU 0 as processes; 2 and 4 as threads of
 * one process; 4 ranks on 2 GPUs, and the path forced across 2 GPUs, where there are 2), bitwise
 * equal on every rank; buffers overwritten right after each call while a peer is held back (the
 * DONE events must keep the inputs alive, the READY events must hold the reader); and CUDA-graph
 * capture, which takes the in-kernel algorithms, and refuses a forced coloc; buffers from
 * cudaMallocAsync's pool, which no other process can map: the calls meet through the path and
 * are then staged, with the same results.
 *
 * The whole suite is skipped (exit 77) without a GPU; CUDA is initialised only inside the ranks
 * (forked by shmddp_launch) or a test's own CK_FORK child. */
#include "config.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shmddp.h"
#include "shmddp_cuda.h"
#include "collectives/coloc/coloc.h"
#include "tests/failures.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"
#include "tools/coll_check.h"

#define FAIL(f, ...) (cf_fail((f), __VA_ARGS__), 1)
#define FCUDA(f, x)                                                                           \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) return FAIL(f, "%s: %s", #x, cudaGetErrorString(e_));              \
  } while (0)
#define FST(f, comm, x)                                                                       \
  do {                                                                                        \
    if ((x) != SHMDDP_OK) return FAIL(f, "%s: %s", #x, shmddp_comm_last_error(comm));         \
  } while (0)

/* ---------------- every collective ---------------- */

typedef struct {
  shmddp_dtype_t dtype;
  shmddp_op_t op;
} type_op_t;

static const type_op_t type_ops[] = {
  {SHMDDP_F32, SHMDDP_SUM}, {SHMDDP_F32, SHMDDP_AVG}, {SHMDDP_F32, SHMDDP_PROD},
  {SHMDDP_BF16, SHMDDP_SUM}, {SHMDDP_F16, SHMDDP_MAX}, {SHMDDP_F64, SHMDDP_MIN},
  {SHMDDP_I32, SHMDDP_SUM}, {SHMDDP_I64, SHMDDP_MAX},
};
static const size_t counts[] = {1, 7, 1000, 16385, ((size_t)1 << 20) + 3};
#define MAXCOUNT (((size_t)1 << 20) + 3)

enum { K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST, K_REDUCE, K_ALL_TO_ALL, K_GATHER,
       K_SCATTER, K_KINDS };
static const char *const kind_names[K_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "reduce", "all_to_all", "gather",
                                                "scatter"};
/* Kinds whose input (send) or output (recv) holds a block per rank. */
static int blocks_in(int kind)
{
  return kind == K_REDUCE_SCATTER || kind == K_ALL_TO_ALL || kind == K_SCATTER;
}
static int blocks_out(int kind)
{
  return kind == K_ALL_GATHER || kind == K_ALL_TO_ALL || kind == K_GATHER;
}

typedef struct {
  shmddp_comm_t *comm;
  case_failures_t *f;
  cudaStream_t s;
  char *send, *recv, *h;
  shmddp_algo_t want_algo;
} rig_t;

/* Elements of the result that differ from the reference; rank's view of case (kind, iter). */
static size_t check_result(const rig_t *g, int kind, size_t count, int iter, shmddp_dtype_t dt,
                           shmddp_op_t op, int root, size_t *first)
{
  int rank = shmddp_comm_rank(g->comm), n = shmddp_comm_size(g->comm);
  size_t bad = 0;
  switch (kind) {
  case K_ALL_REDUCE: return coll_count_errors(g->h, count, 0, n, iter, dt, op, first);
  case K_REDUCE_SCATTER:
    return coll_count_errors(g->h, count, (size_t)rank * count, n, iter, dt, op, first);
  case K_REDUCE: return rank == root ? coll_count_errors(g->h, count, 0, n, iter, dt, op, first) : 0;
  case K_GATHER:
    if (rank != root) return 0; /* the root's output is an all-gather's */
    /* fall through */
  default: /* copies: rank `from`'s pattern at the global index of its input */
    for (size_t j = 0; j < (blocks_out(kind) ? count * (size_t)n : count); j++) {
      int from = blocks_out(kind) ? (int)(j / count) : root;
      size_t idx = kind == K_ALL_TO_ALL ? (size_t)rank * count + j % count /* block `rank` */
                   : kind == K_SCATTER  ? (size_t)rank * count + j
                                        : j;
      double want = coll_round(coll_pattern(from, idx, iter, dt, SHMDDP_SUM), dt);
      if (coll_load(g->h, j, dt) != want && !bad++) *first = j;
    }
    return bad;
  }
}

/* One call of one collective: fill, call, check. 0, or 1 when the rank cannot go on. */
static int one_case(rig_t *g, int kind, size_t count, int iter, const type_op_t *t, int variant)
{
  shmddp_comm_t *comm = g->comm;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  shmddp_dtype_t dt = t->dtype;
  int moves = kind == K_ALL_GATHER || kind == K_BROADCAST || kind >= K_ALL_TO_ALL;
  shmddp_op_t op = moves ? SHMDDP_SUM : t->op;
  size_t ds = shmddp_dtype_size(dt), N = (size_t)n;
  /* all-to-all is never in place on device buffers (refused: a peer could overwrite a block
   * before it is sent) */
  int inplace = variant % 3 == 0 && kind != K_ALL_TO_ALL, root = iter % n;
  size_t off = variant & 1 ? ds : 0; /* every other case off 16-byte alignment */
  char *recv = g->recv + off, *send = g->send + off;
  size_t in_elems = blocks_in(kind) ? count * N : count;
  size_t out_elems = blocks_out(kind) ? count * N : count;
  if (inplace) { /* NCCL's in-place layouts */
    if (kind == K_REDUCE_SCATTER || kind == K_SCATTER) {
      send = recv;
      recv = send + (size_t)rank * count * ds;
    } else if (kind == K_ALL_GATHER || kind == K_GATHER) {
      send = recv + (size_t)rank * count * ds;
    } else {
      send = recv;
    }
  }
  /* the input: global element indices (the blocks, or the slot a gather puts it in) */
  size_t first_idx = kind == K_ALL_GATHER || kind == K_GATHER ? (size_t)rank * count : 0;
  coll_fill(g->h, in_elems, first_idx, rank, iter, dt, op);
  /* Written in the call's stream order: g->s does not wait for the legacy stream, and a
   * cudaMemcpy from pageable memory may return before its last bytes have landed (CUDA's API
   * synchronization behavior), so a collective on g->s after it could read part of the old
   * input. */
  FCUDA(g->f, cudaMemsetAsync(g->recv, 0xff, out_elems * ds + 16, g->s)); /* NaN poison */
  FCUDA(g->f, cudaMemcpyAsync(send, g->h, in_elems * ds, cudaMemcpyHostToDevice, g->s));
  shmddp_stream_t st = (shmddp_stream_t)g->s;
  shmddp_status_t rc;
  switch (kind) {
  case K_ALL_REDUCE: rc = shmddp_all_reduce(comm, send, recv, count, dt, op, st); break;
  case K_REDUCE_SCATTER: rc = shmddp_reduce_scatter(comm, send, recv, count, dt, op, st); break;
  case K_ALL_GATHER: rc = shmddp_all_gather(comm, send, recv, count, dt, st); break;
  case K_BROADCAST: rc = shmddp_broadcast(comm, send, recv, count, dt, root, st); break;
  case K_REDUCE: rc = shmddp_reduce(comm, send, recv, count, dt, op, root, st); break;
  case K_ALL_TO_ALL: rc = shmddp_all_to_all(comm, send, recv, count, dt, st); break;
  case K_GATHER: rc = shmddp_gather(comm, send, recv, count, dt, root, st); break;
  default: rc = shmddp_scatter(comm, send, recv, count, dt, root, st); break;
  }
  const char *what = kind_names[kind];
  if (rc != SHMDDP_OK) return FAIL(g->f, "%s: %s", what, shmddp_comm_last_error(comm));
  shmddp_algo_t used = shmddp_comm_last_algo(comm);
  FST(g->f, comm, shmddp_cuda_sync(comm, st));
  FCUDA(g->f, cudaMemcpy(g->h, recv, out_elems * ds, cudaMemcpyDeviceToHost));
  size_t first = 0, bad = check_result(g, kind, count, iter, dt, op, root, &first);
  CF_CHECK(g->f, bad == 0, "%s %s %s count %zu%s%s: %zu wrong, first at %zu (%g)", what,
           shmddp_dtype_name(dt), shmddp_op_name(op), count, inplace ? " in place" : "",
           off ? " unaligned" : "", bad, first, bad ? coll_load(g->h, first, dt) : 0.0);
  CF_CHECK(g->f, used == g->want_algo, "%s count %zu: the %s algorithm ran, not %s", what, count,
           shmddp_algo_name(used), shmddp_algo_name(g->want_algo));
  if (kind == K_ALL_REDUCE)
    CF_CHECK(g->f, coll_same_on_all_ranks(comm, g->h, count * ds), "%s %s count %zu: ranks hold "
             "different bits", what, shmddp_dtype_name(dt), count);
  return 0;
}

/* The whole matrix on an initialised communicator; pool: the buffers from cudaMallocAsync's
 * pool (no other process can map them: every call is staged after the co-located rendezvous). */
static int collectives_body(shmddp_comm_t *comm, case_failures_t *f, shmddp_algo_t want,
                            int pool)
{
  int n = shmddp_comm_size(comm);
  size_t bytes = MAXCOUNT * 8 * (size_t)n + 64;
  rig_t g = {.comm = comm, .f = f, .want_algo = want, .h = malloc(bytes)};
  if (!g.h) return FAIL(f, "out of host memory");
  FCUDA(f, cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  if (pool) {
    FCUDA(f, cudaMallocAsync((void **)&g.send, bytes, g.s));
    FCUDA(f, cudaMallocAsync((void **)&g.recv, bytes, g.s));
    FCUDA(f, cudaStreamSynchronize(g.s));
  } else {
    FCUDA(f, cudaMalloc((void **)&g.send, bytes));
    FCUDA(f, cudaMalloc((void **)&g.recv, bytes));
  }
  int variant = 0, stop = 0;
  for (int k = 0; k < K_KINDS && !stop; k++)
    for (size_t t = 0; t < sizeof type_ops / sizeof type_ops[0] && !stop; t++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0] && !stop; c++, variant++)
        stop = one_case(&g, k, counts[c], variant, &type_ops[t], variant);
  if (pool) {
    size_t exports = 1;
    FST(f, comm, shmddp_cuda_mem_stats(comm, &exports, NULL));
    CF_CHECK(f, exports == 0, "pool memory was exported (%zu exports): no call was staged",
             exports);
    cudaFreeAsync(g.send, g.s);
    cudaFreeAsync(g.recv, g.s);
    cudaStreamSynchronize(g.s);
  } else {
    cudaFree(g.send);
    cudaFree(g.recv);
  }
  cudaStreamDestroy(g.s);
  free(g.h);
  return stop;
}

/* Failures of each rank, in memory shared with the forked ranks (or the threads). */
static case_failures_t *g_fails;

typedef struct {
  int device_mod; /* rank r drives GPU r % device_mod (1: all on GPU 0) */
  shmddp_algo_t force, want;
  int pool;       /* buffers from cudaMallocAsync's pool */
} proc_case_t;

static int proc_rank(shmddp_comm_t *comm, void *arg)
{
  const proc_case_t *pc = arg;
  int rank = shmddp_comm_rank(comm);
  case_failures_t *f = &g_fails[rank];
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.device = rank % pc->device_mod;
  cc.timeout_s = 60;
  FST(f, comm, shmddp_comm_init_cuda(comm, &cc));
  int sharing = shmddp_cuda_colocated(comm);
  int want_sharing = (shmddp_comm_size(comm) - 1 - rank % pc->device_mod) / pc->device_mod + 1;
  CF_CHECK(f, sharing == want_sharing, "placement: %d ranks on this GPU, want %d", sharing,
           want_sharing);
  FST(f, comm, shmddp_comm_set_algo(comm, pc->force));
  return collectives_body(comm, f, pc->want, pc->pool);
}

static void setup(void)
{
  g_fails = test_shared_alloc(SHMDDP_MAX_RANKS * sizeof *g_fails);
  for (int r = 0; r < SHMDDP_MAX_RANKS; r++) cf_init(&g_fails[r]);
}
static void teardown(void) { munmap(g_fails, SHMDDP_MAX_RANKS * sizeof *g_fails); }

static void launch(int nproc, shmddp_rank_fn fn, void *arg, const char *what)
{
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = nproc;
  cfg.use_gpus = 1;
  cfg.timeout_s = 120;
  cfg.label = "check_coloc_cuda";
  shmddp_launch_result_t res;
  shmddp_status_t st = shmddp_launch(&cfg, fn, arg, &res);
  ck_assert_msg(st == SHMDDP_OK, "launch failed: %s", res.message);
  case_failures_t all;
  cf_merge_ranks(&all, g_fails, nproc, "rank");
  ck_assert_msg(all.checks > 0 || res.exit_code != 0, "%s: nothing was checked", what);
  CF_ASSERT_NONE(&all, what);
  ck_assert_msg(res.exit_code == 0, "%s: a rank failed: %s", what, res.message);
}

START_TEST(every_collective_on_one_gpu)
{
  int n = _i;
  proc_case_t pc = {.device_mod = 1, .force = SHMDDP_ALGO_AUTO, .want = SHMDDP_ALGO_COLOC};
  char what[64];
  snprintf(what, sizeof what, "%d processes on GPU 0", n);
  launch(n, proc_rank, &pc, what);
}
END_TEST

/* Memory no other process can map: the exchange of the co-located call says so on every rank,
 * and the call is staged (the algorithm reported is still coloc). */
START_TEST(unshareable_buffers_are_staged)
{
  proc_case_t pc = {.device_mod = 1, .force = SHMDDP_ALGO_AUTO, .want = SHMDDP_ALGO_COLOC,
                    .pool = 1};
  launch(2, proc_rank, &pc, "2 processes on GPU 0, cudaMallocAsync buffers");
}
END_TEST

START_TEST(mixed_placement_four_ranks_on_two_gpus)
{
  proc_case_t pc = {.device_mod = 2, .force = SHMDDP_ALGO_AUTO, .want = SHMDDP_ALGO_COLOC};
  launch(4, proc_rank, &pc, "4 processes on 2 GPUs");
}
END_TEST

START_TEST(forced_across_two_gpus)
{
  proc_case_t pc = {.device_mod = 2, .force = SHMDDP_ALGO_COLOC, .want = SHMDDP_ALGO_COLOC};
  launch(2, proc_rank, &pc, "coloc forced, 2 processes on 2 GPUs");
}
END_TEST

/* Threads of one process as ranks (joined by id): events used as they are, no IPC. */
typedef struct {
  shmddp_unique_id_t id;
  int rank, nranks;
} thread_arg_t;

static void *thread_rank(void *p)
{
  thread_arg_t *a = p;
  case_failures_t *f = &g_fails[a->rank];
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = 0;
  cfg.timeout_s = 60;
  shmddp_comm_t *comm = NULL;
  if (cudaSetDevice(0) != cudaSuccess ||
      shmddp_comm_init_rank_config(&comm, a->nranks, a->id, a->rank, &cfg) != SHMDDP_OK) {
    cf_fail(f, "join: %s", shmddp_last_error());
    return NULL;
  }
  CF_CHECK(f, shmddp_cuda_colocated(comm) == a->nranks, "placement: %d ranks on GPU 0",
           shmddp_cuda_colocated(comm));
  collectives_body(comm, f, SHMDDP_ALGO_COLOC, 0);
  shmddp_comm_destroy(comm);
  return NULL;
}

START_TEST(every_collective_threads_on_one_gpu)
{
  int n = _i;
  thread_arg_t a[SHMDDP_MAX_RANKS];
  pthread_t th[SHMDDP_MAX_RANKS];
  shmddp_unique_id_t id;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  for (int r = 0; r < n; r++) {
    a[r] = (thread_arg_t){.id = id, .rank = r, .nranks = n};
    ck_assert_int_eq(pthread_create(&th[r], NULL, thread_rank, &a[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  case_failures_t all;
  cf_merge_ranks(&all, g_fails, n, "thread rank");
  ck_assert_msg(all.checks > 0, "nothing was checked");
  CF_ASSERT_NONE(&all, "threads on GPU 0");
}
END_TEST

/* ---------------- buffers reused at once, a peer held back ---------------- */

#define REUSE_ITERS 300
#define REUSE_COUNT 4099

static void CUDART_CB hold_back(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

/* Each iteration: the input is overwritten on the stream right before the call and again right
 * after it; rank 1 holds its stream back (a host function that sleeps) every few iterations, so
 * the leader's kernel must wait for its READY and everyone's stream for the kernel's DONE. */
/* The CUDA transport of a rank that shares GPU 0 with the others: 0, or FAIL's 1. */
static int init_on_gpu0(shmddp_comm_t *comm, case_failures_t *f)
{
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.device = 0;
  FST(f, comm, shmddp_comm_init_cuda(comm, &cc));
  return 0;
}

static int reuse_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  case_failures_t *f = &g_fails[rank];
  if (init_on_gpu0(comm, f)) return 1;
  size_t bytes = REUSE_COUNT * sizeof(float);
  float *inputs, *send, *recv, *h_in, *h_out;
  cudaStream_t s;
  FCUDA(f, cudaMalloc((void **)&inputs, bytes * 4));
  FCUDA(f, cudaMalloc((void **)&send, bytes));
  FCUDA(f, cudaMalloc((void **)&recv, bytes));
  FCUDA(f, cudaMallocHost((void **)&h_in, bytes * 4));
  FCUDA(f, cudaMallocHost((void **)&h_out, bytes * REUSE_ITERS));
  FCUDA(f, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* input v of this rank: element i = 1000 * rank + 10 * v + i % 7 (exact in f32) */
  for (int v = 0; v < 4; v++)
    for (int i = 0; i < REUSE_COUNT; i++) h_in[v * REUSE_COUNT + i] = 1000.0f * rank + 10.0f * v + i % 7;
  FCUDA(f, cudaMemcpy(inputs, h_in, bytes * 4, cudaMemcpyHostToDevice));
  shmddp_stream_t st = (shmddp_stream_t)s;
  for (int it = 0; it < REUSE_ITERS; it++) {
    if (rank == 1 && it % 5 == 0)
      FCUDA(f, cudaLaunchHostFunc(s, hold_back, (void *)(uintptr_t)(it % 10 == 0 ? 3000 : 300)));
    FCUDA(f, cudaMemcpyAsync(send, inputs + (it % 4) * REUSE_COUNT, bytes,
                             cudaMemcpyDeviceToDevice, s));
    FST(f, comm, shmddp_all_reduce(comm, send, recv, REUSE_COUNT, SHMDDP_F32, SHMDDP_SUM, st));
    FCUDA(f, cudaMemcpyAsync(h_out + (size_t)it * REUSE_COUNT, recv, bytes,
                             cudaMemcpyDeviceToHost, s));
    FCUDA(f, cudaMemsetAsync(send, 0xff, bytes, s)); /* the input dies right after the call */
  }
  FST(f, comm, shmddp_cuda_sync(comm, st));
  long wrong = 0;
  int first = -1;
  for (int it = 0; it < REUSE_ITERS; it++)
    for (int i = 0; i < REUSE_COUNT; i++) {
      float want = 1000.0f * (float)(n * (n - 1) / 2) + (float)n * (10.0f * (it % 4) + i % 7);
      if (h_out[(size_t)it * REUSE_COUNT + i] != want && wrong++ == 0) first = it;
    }
  CF_CHECK(f, wrong == 0, "%ld wrong sums, the first in iteration %d", wrong, first);
  CF_CHECK(f, shmddp_comm_last_algo(comm) == SHMDDP_ALGO_COLOC,
           "the %s algorithm ran", shmddp_algo_name(shmddp_comm_last_algo(comm)));
  cudaFreeHost(h_in);
  cudaFreeHost(h_out);
  return 0;
}

START_TEST(inputs_reused_right_after_the_call)
{
  launch(_i, reuse_rank, NULL, "buffers reused at once");
}
END_TEST

/* ---------------- CUDA-graph capture ---------------- */

#define GRAPH_REPLAYS 20
#define GRAPH_ITER 500 /* replay i's inputs: coll_fill's iteration GRAPH_ITER + i */

/* An f32 SUM all-reduce of coll_fill's inputs of iteration iter, checked: "" when right, else
 * (in out) how many elements are wrong, where, and which story the wrong ones fit: the sum with
 * rank r's input still from iteration old (an input written out of the call's stream order),
 * the whole sum of iteration old (the output never written), one rank's input alone (the
 * others' missing), NaN, or none of these. old < 0: no earlier iteration. */
static int explain_sum(char *out, size_t len, const float *got, size_t count, int n, int iter,
                       int old)
{
  enum { OLD_SUM = SHMDDP_MAX_RANKS, ONE_INPUT, NOT_A_NUMBER, OTHER, STORIES };
  size_t story[STORIES] = {0}, bad = 0, first = 0, last = 0;
  for (size_t i = 0; i < count; i++) {
    double want = 0, now[SHMDDP_MAX_RANKS], was[SHMDDP_MAX_RANKS];
    for (int r = 0; r < n; r++) {
      now[r] = coll_pattern(r, i, iter, SHMDDP_F32, SHMDDP_SUM);
      was[r] = old >= 0 ? coll_pattern(r, i, old, SHMDDP_F32, SHMDDP_SUM) : NAN;
      want += now[r];
    }
    double g = got[i];
    if (g == (float)want) continue; /* inputs are multiples of 1/8: every sum is exact */
    if (!bad++) first = i;
    last = i;
    int k = isnan(g) ? NOT_A_NUMBER : OTHER;
    double old_sum = 0;
    for (int r = 0; r < n; r++) old_sum += was[r];
    for (int r = 0; r < n && k == OTHER; r++)
      if (g == (float)(want - now[r] + was[r])) k = r;
    if (k == OTHER && g == (float)old_sum) k = OLD_SUM;
    for (int r = 0; r < n && k == OTHER; r++)
      if (g == (float)now[r]) k = ONE_INPUT;
    story[k]++;
  }
  if (!bad) {
    out[0] = '\0';
    return 0;
  }
  int at = snprintf(out, len, "%zu of %zu wrong, from %zu to %zu (first: got %g, want %g):", bad,
                    count, first, last, (double)got[first],
                    coll_expected(n, first, iter, SHMDDP_F32, SHMDDP_SUM));
  for (int r = 0; r < n; r++)
    if (story[r] && at > 0 && (size_t)at < len)
      at += snprintf(out + at, len - (size_t)at, " %zu with rank %d's input of iteration %d,",
                     story[r], r, old);
  static const char *const names[] = {"the sum of the earlier iteration", "one rank's input alone",
                                      "NaN", "none of these"};
  for (int k = OLD_SUM; k < STORIES; k++)
    if (story[k] && at > 0 && (size_t)at < len)
      at += snprintf(out + at, len - (size_t)at, " %zu %s,", story[k], names[k - OLD_SUM]);
  if (at > 0 && (size_t)at <= len) out[at - 1] = '\0';
  return 1;
}

static int graph_rank(shmddp_comm_t *comm, void *arg)
{
  (void)arg;
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  case_failures_t *f = &g_fails[rank];
  if (init_on_gpu0(comm, f)) return 1;
  const size_t sizes[] = {1000, ((size_t)3 << 20) + 1}; /* one-shot, two-shot on user buffers */
  size_t maxb = sizes[1] * 4;
  float *send, *recv, *h = malloc(maxb);
  char why[400];
  cudaStream_t s;
  FCUDA(f, cudaMalloc((void **)&send, maxb));
  FCUDA(f, cudaMalloc((void **)&recv, maxb));
  FCUDA(f, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  shmddp_stream_t st = (shmddp_stream_t)s;
  for (int c = 0; c < 2; c++) {
    size_t count = sizes[c], bytes = count * 4;
    /* one call outside the capture registers the buffers with the peers */
    FST(f, comm, shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st));
    CF_CHECK(f, shmddp_comm_last_algo(comm) == SHMDDP_ALGO_COLOC,
             "eager call: %s ran", shmddp_algo_name(shmddp_comm_last_algo(comm)));
    FST(f, comm, shmddp_cuda_sync(comm, st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    FCUDA(f, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    shmddp_status_t rc = shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st);
    shmddp_algo_t captured = shmddp_comm_last_algo(comm);
    FCUDA(f, cudaStreamEndCapture(s, &graph));
    if (rc != SHMDDP_OK) return FAIL(f, "captured call: %s", shmddp_comm_last_error(comm));
    CF_CHECK(f, captured != SHMDDP_ALGO_COLOC, "the co-located algorithm was captured");
    FCUDA(f, cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < GRAPH_REPLAYS; i++) {
      coll_fill(h, count, 0, rank, GRAPH_ITER + i, SHMDDP_F32, SHMDDP_SUM);
      FCUDA(f, cudaMemcpyAsync(send, h, bytes, cudaMemcpyHostToDevice, s));
      FCUDA(f, cudaGraphLaunch(exec, s));
      FCUDA(f, cudaMemcpyAsync(h, recv, bytes, cudaMemcpyDeviceToHost, s));
      FST(f, comm, shmddp_cuda_sync(comm, st));
      CF_CHECK(f, !explain_sum(why, sizeof why, h, count, n, GRAPH_ITER + i,
                               i ? GRAPH_ITER + i - 1 : -1),
               "replay %d of the captured %s (count %zu): %s", i, shmddp_algo_name(captured),
               count, why);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    /* eager again: off the graph (co-located, or in-kernel under MPS for small calls), correct
     * (the input written on s, as in one_case: not with cudaMemcpy, whose last bytes may land
     * after the call has read them) */
    coll_fill(h, count, 0, rank, 9, SHMDDP_F32, SHMDDP_SUM);
    FCUDA(f, cudaMemcpyAsync(send, h, bytes, cudaMemcpyHostToDevice, s));
    FST(f, comm, shmddp_all_reduce(comm, send, recv, count, SHMDDP_F32, SHMDDP_SUM, st));
    CF_CHECK(f, shmddp_comm_last_algo(comm) == SHMDDP_ALGO_COLOC,
             "after the graph: %s ran", shmddp_algo_name(shmddp_comm_last_algo(comm)));
    FST(f, comm, shmddp_cuda_sync(comm, st));
    FCUDA(f, cudaMemcpy(h, recv, bytes, cudaMemcpyDeviceToHost));
    CF_CHECK(f, !explain_sum(why, sizeof why, h, count, n, 9, GRAPH_ITER + GRAPH_REPLAYS - 1),
             "eager call after the graph (count %zu): %s", count, why);
  }
  /* Forced coloc cannot be captured: a clear error on every rank, and nothing hangs. */
  FST(f, comm, shmddp_comm_set_algo(comm, SHMDDP_ALGO_COLOC));
  cudaGraph_t graph;
  FCUDA(f, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  shmddp_status_t rc = shmddp_all_reduce(comm, send, recv, 1000, SHMDDP_F32, SHMDDP_SUM, st);
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  if (e == cudaSuccess) cudaGraphDestroy(graph);
  CF_CHECK(f, rc == SHMDDP_ERR_UNSUPPORTED && strstr(shmddp_comm_last_error(comm), "graph"),
           "forced coloc under capture: %s (%s)", shmddp_strerror(rc), shmddp_comm_last_error(comm));
  FST(f, comm, shmddp_all_reduce(comm, send, recv, 1000, SHMDDP_F32, SHMDDP_SUM, st));
  FST(f, comm, shmddp_cuda_sync(comm, st));
  free(h);
  return 0;
}

START_TEST(graph_capture_takes_the_in_kernel_algorithms)
{
  launch(2, graph_rank, NULL, "graph capture with ranks sharing a GPU");
}
END_TEST

static Suite *make_coloc_cuda_suite(const suite_env_t *env)
{
  Suite *s = suite_create("coloc_cuda");
  TCase *tc = tcase_create("one_gpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc, every_collective_on_one_gpu, 2, 5); /* 2, 3, 4 processes */
  tcase_add_loop_test(tc, every_collective_threads_on_one_gpu, 2, 5);
  tcase_add_loop_test(tc, inputs_reused_right_after_the_call, 2, 5);
  tcase_add_test(tc, graph_capture_takes_the_in_kernel_algorithms);
  tcase_add_test(tc, unshareable_buffers_are_staged);
  suite_add_tcase(s, tc);
  if (suite_gpu_cases(env, 2, 1, "mixed placements (4 ranks on 2 GPUs, coloc across GPUs)")) {
    tc = SUITE_CASE(s, "two_gpus", mixed_placement_four_ranks_on_two_gpus, forced_across_two_gpus);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
  }
  return s;
}

SUITE_MAIN("check_coloc_cuda", make_coloc_cuda_suite, 1)
