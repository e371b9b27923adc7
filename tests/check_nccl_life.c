/* check_nccl_life.c — the NCCL front end's communicator life beyond init and split, on host-only
 * communicators: ncclCommShrink (3 -> 2 and 5 -> 3 ranks with the conformance harness run on the
 * shrunk communicator, a second shrink of the same set, after a rank was SIGKILLed with
 * NCCL_SHRINK_ABORT, bad arguments refused by the call), windows (registered, reduced on in
 * place, released; handles checked), ncclGroupSimulateEnd (estimates, runs nothing, checks its
 * struct), suspend/resume and memory statistics, grow (2 -> 3 and 3 -> 5 ranks, the conformance
 * harness on the grown communicator; bad arguments). Ranks are threads, or processes where a rank must die.
 * The host cases empty CUDA_VISIBLE_DEVICES first, so their communicators are host-only on a GPU
 * machine too; the GPU case (windows on device memory, ranks as processes sharing GPU 0) runs
 * where a GPU is visible and is left out, saying so, elsewhere. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "nccl/internal.h"
#include "shm/timeutil.h"
#include "tests/failures.h"
#include "tests/nccl_conf.h"
#include "tests/suite_main.h"
#include "tests/testutil.h"

#define WAIT_BOUND_S 120.0 /* bounds a hang; every wait below is for an event */

/* ---- ranks as threads ---- */

typedef struct life_rank life_rank_t;
typedef void (*life_fn)(life_rank_t *t, ncclComm_t comm);

struct life_rank {
  ncclUniqueId id;
  int n, rank;
  life_fn fn;
  const void *arg;
  conf_result_t res; /* the conformance harness's result on a derived communicator */
  char fails[768];
};

static void lfail(life_rank_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lfail(life_rank_t *t, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fail_list_vadd(t->fails, sizeof t->fails, 80, fmt, ap);
  va_end(ap);
}

static void *life_main(void *arg)
{
  life_rank_t *t = arg;
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.commName = "parent";
  ncclComm_t comm = NULL;
  if (ncclCommInitRankConfig(&comm, t->n, t->id, t->rank, &cfg) != ncclSuccess) {
    lfail(t, "init: %s", ncclGetLastError(NULL));
    return NULL;
  }
  t->fn(t, comm);
  ncclCommDestroy(comm);
  return NULL;
}

/* Run fn on n ranks (threads) of one communicator; fails the test with every rank's failures. */
static void run_ranks(int n, life_fn fn, const void *arg)
{
  life_rank_t t[8];
  pthread_t th[8];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r] = (life_rank_t){.id = id, .n = n, .rank = r, .fn = fn, .arg = arg};
    ck_assert_int_eq(pthread_create(&th[r], NULL, life_main, &t[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) {
    ck_assert_msg(t[r].fails[0] == 0, "%d ranks, rank %d: %s", n, r, t[r].fails);
    ck_assert_msg(t[r].res.failures == 0, "rank %d: %ld of %ld conformance checks failed: %s", r,
                  t[r].res.failures, t[r].res.checks, t[r].res.fails);
  }
}

#ifdef HAVE_CUDA
/* The same with ranks as processes (forked before any CUDA call): for device buffers, which
 * are shared between processes through the transport's registration. */
static void run_processes(int n, life_fn fn, const void *arg)
{
  life_rank_t *t = test_shared_alloc((size_t)n * sizeof *t);
  pid_t pids[8];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    t[r] = (life_rank_t){.id = id, .n = n, .rank = r, .fn = fn, .arg = arg};
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0) {
      life_main(&t[r]);
      _exit(0);
    }
  }
  for (int r = 0; r < n; r++) {
    int ws = 0;
    double deadline = shm_now() + WAIT_BOUND_S;
    while (waitpid(pids[r], &ws, WNOHANG) == 0 && shm_now() < deadline) shm_sleep(0.005);
    if (shm_now() >= deadline) kill(pids[r], SIGKILL), waitpid(pids[r], &ws, 0);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "rank %d's process ended abnormally: %s",
                  r, t[r].fails);
    ck_assert_msg(t[r].fails[0] == 0, "%d ranks, rank %d: %s", n, r, t[r].fails);
  }
}
#endif

/* Host-only communicators: no GPU visible to this test's ranks (set before any CUDA call). */
static void host_only(void) { setenv("CUDA_VISIBLE_DEVICES", "", 1); }

/* A sum over the ranks of comm, to show a communicator works (and which ranks are in it). */
static long long rank_sum(life_rank_t *t, ncclComm_t comm, long long mine, const char *what)
{
  long long sum = -1;
  ncclResult_t r = ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL);
  if (r != ncclSuccess) lfail(t, "%s: all-reduce: %s", what, ncclGetLastError(comm));
  return sum;
}

/* ---- shrink ---- */

static const size_t shrink_counts[] = {0, 1, 7, 1023};

typedef struct {
  int nexcl, excl[4];
  int with_config; /* pass a config (commName "child", non-blocking) instead of NULL */
} shrink_case_t;

static int is_excluded(const shrink_case_t *sc, int rank)
{
  for (int i = 0; i < sc->nexcl; i++)
    if (sc->excl[i] == rank) return 1;
  return 0;
}

/* The survivors shrink, run the conformance harness on the new communicator, shrink again with
 * the same set (a group of its own); then every rank, the excluded too, uses the parent. */
static void shrink_rank(life_rank_t *t, ncclComm_t comm)
{
  const shrink_case_t *sc = t->arg;
  int m = t->n - sc->nexcl, expect_rank = 0;
  long long members = 0; /* sum of the survivors' old ranks */
  for (int r = 0; r < t->n; r++)
    if (!is_excluded(sc, r)) {
      members += r;
      expect_rank += r < t->rank;
    }
  if (!is_excluded(sc, t->rank)) {
    ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
    cfg.commName = "child";
    cfg.blocking = 0;
    ncclComm_t nc = NULL, nc2 = NULL;
    if (ncclCommShrink(comm, (int *)sc->excl, sc->nexcl, &nc, sc->with_config ? &cfg : NULL,
                       SHMDDP_NCCL_SHRINK_DEFAULT) != ncclSuccess) {
      lfail(t, "shrink: %s", ncclGetLastError(comm));
      return;
    }
    int count = 0, rank = -1;
    ncclCommCount(nc, &count);
    ncclCommUserRank(nc, &rank);
    if (count != m || rank != expect_rank)
      lfail(t, "shrunk: %d ranks, rank %d (want %d, %d)", count, rank, m, expect_rank);
    if (strcmp(nc->name, sc->with_config ? "child" : "parent") != 0 ||
        nc->blocking != (sc->with_config ? 0 : 1))
      lfail(t, "shrunk config: name '%s' blocking %d", nc->name, nc->blocking);
    conf_plan_t plan = {.nranks = m, .device = -1, .counts = shrink_counts, .ncounts = 4,
                        .colls = CONF_ALL_COLLS,
                        .types = 1u << ncclInt32 | 1u << ncclFloat32 | 1u << ncclBfloat16,
                        .ops = CONF_ALL_OPS, .sample = 3, .inplace = 2};
    conf_run_rank(nc, rank, &plan, &t->res);
    if (t->res.calls == 0) lfail(t, "no conformance call ran");
    if (ncclCommShrink(comm, (int *)sc->excl, sc->nexcl, &nc2, NULL, 0) != ncclSuccess)
      lfail(t, "second shrink: %s", ncclGetLastError(comm));
    else if (rank_sum(t, nc2, t->rank, "second shrink") != members)
      lfail(t, "the second shrunk communicator's sum is not the survivors'");
    if (rank_sum(t, nc, t->rank, "first shrink, again") != members)
      lfail(t, "the first shrunk communicator's sum is not the survivors'");
    ncclCommDestroy(nc2);
    ncclCommDestroy(nc);
  }
  /* NCCL_SHRINK_DEFAULT leaves the parent as it was: every rank still uses it. */
  if (rank_sum(t, comm, t->rank, "parent") != (long long)t->n * (t->n - 1) / 2)
    lfail(t, "the parent's sum is wrong after the shrink");
}

START_TEST(shrink_3_to_2)
{
  host_only();
  shrink_case_t sc = {.nexcl = 1, .excl = {1}};
  run_ranks(3, shrink_rank, &sc);
}
END_TEST

START_TEST(shrink_5_to_3_with_config)
{
  host_only();
  shrink_case_t sc = {.nexcl = 2, .excl = {3, 1}, .with_config = 1};
  run_ranks(5, shrink_rank, &sc);
}
END_TEST

/* Each refused call returns ncclInvalidArgument and ncclGetLastError names the argument. */
static void refused(ncclComm_t comm, int *list, int count, ncclComm_t *out, ncclConfig_t *cfg,
                    int flags, const char *named)
{
  ncclResult_t r = ncclCommShrink(comm, list, count, out, cfg, flags);
  ck_assert_msg(r == ncclInvalidArgument, "%s: got %d", named, (int)r);
  ck_assert_msg(strstr(ncclGetLastError(comm), named), "'%s' not in '%s'", named,
                ncclGetLastError(comm));
  ck_assert_ptr_null(out ? *out : NULL);
}

START_TEST(shrink_bad_arguments_are_refused)
{
  host_only();
  enum { N = 3 };
  ncclUniqueId id;
  ncclComm_t comms[N], out = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], N, id, r), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ncclComm_t c = comms[0];
  int out_of_range[] = {1, 3}, negative[] = {-1}, dup[] = {2, 2}, self[] = {2, 0}, all[] = {0, 1, 2};
  refused(c, out_of_range, 2, &out, NULL, 0, "excludeRanksList[1] is 3, not a rank");
  refused(c, negative, 1, &out, NULL, 0, "excludeRanksList[0] is -1");
  refused(c, dup, 2, &out, NULL, 0, "excludeRanksList[1] repeats rank 2");
  refused(c, self, 2, &out, NULL, 0, "excludeRanksList[1] is the calling rank 0");
  refused(c, all, 3, &out, NULL, 0, "excludeRanksCount is 3");
  refused(c, all, -1, &out, NULL, 0, "excludeRanksCount is -1");
  refused(c, NULL, 1, &out, NULL, 0, "excludeRanksList is NULL");
  refused(c, dup, 1, NULL, NULL, 0, "newcomm is NULL");
  refused(c, dup, 1, &out, NULL, 2, "shrinkFlags is 0x2");
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.magic = 7;
  refused(c, dup, 1, &out, &cfg, 0, "config");
  ck_assert_int_eq(ncclCommShrink(NULL, dup, 1, &out, NULL, 0), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "argument comm is NULL"));
  /* Nothing was started: the communicator still works on every rank. */
  long long x[N], sum[N];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++) {
    x[r] = r + 1;
    ncclAllReduce(&x[r], &sum[r], 1, ncclInt64, ncclSum, comms[r], NULL);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < N; r++) ck_assert_int_eq(sum[r], 6);
  for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* ---- windows ---- */

/* Expect ncclInvalidArgument from a window call, with ncclGetLastError naming the argument. */
#define REFUSED(t, comm, call, named)                                                         \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclInvalidArgument || !strstr(ncclGetLastError(comm), named))                  \
      lfail(t, "%s: got %d, '%s'", #call, (int)r_, ncclGetLastError(comm));                   \
  } while (0)

/* Register a window, reduce in place on it, release it; every misuse refused by the call. */
static void window_rank(life_rank_t *t, ncclComm_t comm)
{
  enum { COUNT = 4096 };
  static _Thread_local float buf[COUNT], other[64];
  ncclWindow_t win = NULL, kept = NULL;
  void *handle = NULL;
  if (ncclCommWindowRegister(comm, buf, sizeof buf, &win, SHMDDP_NCCL_WIN_COLL_SYMMETRIC) !=
          ncclSuccess || !win) {
    lfail(t, "register: %s", ncclGetLastError(comm));
    return;
  }
  for (int i = 0; i < COUNT; i++) buf[i] = (float)(i % 97) * (float)(t->rank + 1);
  if (ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess)
    lfail(t, "all-reduce on the window: %s", ncclGetLastError(comm));
  float factor = (float)(t->n * (t->n + 1) / 2);
  for (int i = 0; i < COUNT; i++)
    if (buf[i] != (float)(i % 97) * factor) {
      lfail(t, "window element %d is %g, want %g", i, buf[i], (float)(i % 97) * factor);
      break;
    }
  REFUSED(t, comm, ncclCommWindowRegister(comm, other, sizeof other, &kept, 0x100), "winFlags is 0x100");
  REFUSED(t, comm, ncclCommWindowRegister(comm, other, 0, &kept, 0), "argument size is 0");
  REFUSED(t, comm, ncclCommWindowRegister(comm, other, sizeof other, NULL, 0), "argument win is NULL");
  REFUSED(t, comm, ncclCommWindowRegister(comm, NULL, sizeof other, &kept, 0), "argument buff is NULL");
  /* A buffer of ncclCommRegister is not a window, and the reverse. */
  if (ncclCommRegister(comm, other, sizeof other, &handle) != ncclSuccess || !handle)
    lfail(t, "ncclCommRegister: %s", ncclGetLastError(comm));
  REFUSED(t, comm, ncclCommWindowDeregister(comm, (ncclWindow_t)handle), "not a window registered");
  REFUSED(t, comm, ncclCommDeregister(comm, win), "not a buffer registered");
  if (ncclCommDeregister(comm, handle) != ncclSuccess)
    lfail(t, "ncclCommDeregister: %s", ncclGetLastError(comm));
  if (ncclCommWindowDeregister(comm, win) != ncclSuccess)
    lfail(t, "deregister: %s", ncclGetLastError(comm));
  REFUSED(t, comm, ncclCommWindowDeregister(comm, win), "or already deregistered");
  REFUSED(t, comm, ncclCommWindowDeregister(comm, (ncclWindow_t)other), "not a window registered");
  REFUSED(t, comm, ncclCommWindowDeregister(comm, NULL), "argument win is NULL");
  /* One left registered: released with the communicator (a leak checker sees it otherwise). */
  if (ncclCommWindowRegister(comm, other, sizeof other, &kept, 0) != ncclSuccess)
    lfail(t, "second register: %s", ncclGetLastError(comm));
}

START_TEST(windows_register_use_release)
{
  host_only();
  run_ranks(2, window_rank, NULL);
  run_ranks(3, window_rank, NULL);
}
END_TEST

#ifdef HAVE_CUDA
/* Windows on device memory of one GPU that the ranks share: ncclMemAlloc's (cuMem) and
 * cudaMalloc's, above the small-message sizes, reduced in place through the window. */
static void device_window_rank(life_rank_t *t, ncclComm_t comm)
{
  enum { COUNT = (4 << 20) + 5 }; /* 16 MiB of floats and a bit */
  int dev = -1;
  if (ncclCommCuDevice(comm, &dev) != ncclSuccess || dev < 0) {
    lfail(t, "not a device communicator (device %d)", dev);
    return;
  }
  float *h = malloc(COUNT * sizeof *h);
  cudaStream_t stream = NULL;
  if (!h || cudaStreamCreate(&stream) != cudaSuccess) {
    lfail(t, "host buffer or stream");
    free(h);
    return;
  }
  for (int kind = 0; kind < 2; kind++) {
    const char *what = kind ? "cudaMalloc" : "ncclMemAlloc";
    void *d = NULL;
    ncclWindow_t win = NULL;
    if ((kind ? cudaMalloc(&d, COUNT * sizeof *h) != cudaSuccess
              : ncclMemAlloc(&d, COUNT * sizeof *h) != ncclSuccess)) {
      lfail(t, "%s failed", what);
      continue;
    }
    for (size_t i = 0; i < COUNT; i++) h[i] = (float)(i % 97) * (float)(t->rank + 1);
    cudaMemcpy(d, h, COUNT * sizeof *h, cudaMemcpyHostToDevice);
    uint64_t kept = 0;
    if (ncclCommWindowRegister(comm, d, COUNT * sizeof *h, &win, 0) != ncclSuccess)
      lfail(t, "%s: register: %s", what, ncclGetLastError(comm));
    else if (ncclCommMemStats(comm, ncclStatGpuMemPersist, &kept) != ncclSuccess ||
             kept != COUNT * sizeof *h)
      lfail(t, "%s: %llu bytes kept registered, want %zu", what, (unsigned long long)kept,
            COUNT * sizeof *h);
    else if (ncclAllReduce(d, d, COUNT, ncclFloat32, ncclSum, comm, (shmddp_nccl_stream_t)stream) !=
             ncclSuccess)
      lfail(t, "%s: all-reduce: %s", what, ncclGetLastError(comm));
    cudaStreamSynchronize(stream);
    cudaMemcpy(h, d, COUNT * sizeof *h, cudaMemcpyDeviceToHost);
    float factor = (float)(t->n * (t->n + 1) / 2);
    for (size_t i = 0; i < COUNT; i++)
      if (h[i] != (float)(i % 97) * factor) {
        lfail(t, "%s: element %zu is %g, want %g", what, i, h[i], (float)(i % 97) * factor);
        break;
      }
    if (win && ncclCommWindowDeregister(comm, win) != ncclSuccess)
      lfail(t, "%s: deregister: %s", what, ncclGetLastError(comm));
    if (kind) cudaFree(d);
    else ncclMemFree(d);
  }
  cudaStreamDestroy(stream);
  free(h);
}

START_TEST(device_windows_processes_sharing_a_gpu)
{
  run_processes(2, device_window_rank, NULL);
  run_processes(3, device_window_rank, NULL);
}
END_TEST
#endif

/* ---- ncclGroupSimulateEnd ---- */

enum { SIM_N = 2, SIM_COUNT = 1 << 18 };

/* Queue one all-reduce of count floats on each of comms[0..ncomms) (k times each). */
static void queue_sums(ncclComm_t *comms, int ncomms, int k, float (*send)[SIM_COUNT],
                       float (*recv)[SIM_COUNT], size_t count)
{
  for (int rep = 0; rep < k; rep++)
    for (int r = 0; r < ncomms; r++)
      ck_assert_int_eq(ncclAllReduce(send[r], recv[r], count, ncclFloat32, ncclSum, comms[r], NULL),
                       ncclSuccess);
}

static float simulated(ncclComm_t *comms, int ncomms, int k, float (*send)[SIM_COUNT],
                       float (*recv)[SIM_COUNT], size_t count)
{
  ncclSimInfo_t si = SHMDDP_NCCL_SIM_INFO_INIT;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  queue_sums(comms, ncomms, k, send, recv, count);
  ck_assert_int_eq(ncclGroupSimulateEnd(&si), ncclSuccess);
  return si.estimatedTime;
}

START_TEST(simulated_groups_estimate_and_run_nothing)
{
  host_only();
  static float send[SIM_N][SIM_COUNT], recv[SIM_N][SIM_COUNT];
  ncclUniqueId id;
  ncclComm_t comms[SIM_N];
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < SIM_N; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], SIM_N, id, r), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < SIM_N; r++)
    for (int i = 0; i < SIM_COUNT; i++) send[r][i] = (float)(r + 1), recv[r][i] = -7;
  /* Nothing runs (one thread drives both ranks: a call that ran alone would wait for ever). */
  float one = simulated(comms, SIM_N, 1, send, recv, SIM_COUNT);
  ck_assert_msg(one > 0, "estimate %g", one);
  for (int r = 0; r < SIM_N; r++) ck_assert(recv[r][0] == -7 && recv[r][SIM_COUNT - 1] == -7);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage); /* the group was ended */
  /* The model: more bytes cost more; a communicator's calls add up; communicators overlap. */
  float half = simulated(comms, SIM_N, 1, send, recv, SIM_COUNT / 2);
  float twice = simulated(comms, SIM_N, 2, send, recv, SIM_COUNT);
  float alone = simulated(comms, 1, 1, send, recv, SIM_COUNT);
  ck_assert_msg(half < one && twice > 1.99f * one && twice < 2.01f * one && alone == one,
                "half %g, one %g, twice %g, one communicator %g", half, one, twice, alone);
  ncclSimInfo_t si = SHMDDP_NCCL_SIM_INFO_INIT;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclGroupSimulateEnd(&si), ncclSuccess);
  ck_assert(si.estimatedTime == 0); /* an empty group */
  /* A refused struct leaves the group open; ncclGroupEnd then runs its calls. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  queue_sums(comms, SIM_N, 1, send, recv, SIM_COUNT);
  static const struct { size_t size; unsigned magic, version; const char *named; } bad[] = {
    {24, 0x1234, 22809, "wrong magic"}, {8, SHMDDP_NCCL_SIM_INFO_MAGIC, 22809, "smaller"},
    {24, SHMDDP_NCCL_SIM_INFO_MAGIC, 21900, "predates"}};
  for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
    ncclSimInfo_t x = {bad[b].size, bad[b].magic, bad[b].version, -1.0f};
    ck_assert_int_eq(ncclGroupSimulateEnd(&x), ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(NULL), bad[b].named), "%s", ncclGetLastError(NULL));
    ck_assert(x.estimatedTime == -1.0f);
  }
  ck_assert_int_eq(ncclGroupSimulateEnd(NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "argument simInfo is NULL"));
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < SIM_N; r++) ck_assert(recv[r][0] == 3 && recv[r][SIM_COUNT - 1] == 3);
  ck_assert_int_eq(ncclGroupSimulateEnd(&si), ncclInvalidUsage); /* no group */
  for (int r = 0; r < SIM_N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* ---- suspend, resume, memory statistics ---- */

static uint64_t stat_of(ncclComm_t comm, ncclCommMemStat_t which)
{
  uint64_t v = 12345;
  ck_assert_int_eq(ncclCommMemStats(comm, which, &v), ncclSuccess);
  return v;
}

/* One rank: statistics follow registrations and scratch; suspended calls are refused. */
START_TEST(suspend_resume_and_memory_statistics)
{
  host_only();
  ncclUniqueId id;
  ncclComm_t comm;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  /* A host-only communicator holds no GPU memory, registered or not. */
  static float buf[1024];
  ncclWindow_t win;
  ck_assert_int_eq(ncclCommWindowRegister(comm, buf, sizeof buf, &win, 0), ncclSuccess);
  for (int s = ncclStatGpuMemSuspend; s <= ncclStatGpuMemTotal; s++)
    ck_assert_uint_eq(stat_of(comm, (ncclCommMemStat_t)s), 0);
  uint64_t v;
  ck_assert_int_eq(ncclCommMemStats(comm, (ncclCommMemStat_t)4, &v), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "argument stat is 4"));
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL), ncclInvalidArgument);
  /* A pre-multiplied sum makes scratch; NCCL_SUSPEND_MEM gives it back. */
  float s2 = 2, x = 3, y = 0;
  ncclRedOp_t op;
  ck_assert_int_eq(ncclRedOpCreatePreMulSum(&op, &s2, ncclFloat32, ncclScalarHostImmediate, comm),
                   ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL), ncclSuccess);
  ck_assert(y == 6);
  ck_assert_uint_gt(nccl_scratch_bytes(comm), 0);
  ck_assert_int_eq(ncclCommSuspend(comm, 0x10), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "argument flags is 0x10"));
  ck_assert_int_eq(ncclCommResume(comm), ncclInvalidUsage); /* not suspended */
  ck_assert_int_eq(ncclCommSuspend(comm, SHMDDP_NCCL_SUSPEND_MEM), ncclSuccess);
  ck_assert_uint_eq(nccl_scratch_bytes(comm), 0);
  ck_assert_uint_eq(stat_of(comm, ncclStatGpuMemSuspended), 1);
  ck_assert_int_eq(ncclCommSuspend(comm, 0), ncclInvalidUsage);
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "suspended (ncclCommSuspend): call ncclCommResume"));
  ck_assert_int_eq(ncclCommResume(comm), ncclSuccess);
  ck_assert_uint_eq(stat_of(comm, ncclStatGpuMemSuspended), 0);
  y = 0;
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat32, op, comm, NULL), ncclSuccess);
  ck_assert(y == 6); /* scratch made again */
  ck_assert_int_eq(ncclCommSuspend(comm, 0), ncclSuccess); /* destroyed while suspended */
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Suspending is local: a peer's call in flight is not disturbed and completes after the resume. */
static void suspend_rank(life_rank_t *t, ncclComm_t comm)
{
  long long x = t->rank + 1, sum = 0;
  if (t->rank == 0) {
    /* Rank 0's all-reduce is in flight until rank 1 joins it, after its own suspension. */
    if (ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, comm, NULL) != ncclSuccess || sum != 3)
      lfail(t, "all-reduce before the peer's suspension: %lld", sum);
    return;
  }
  if (ncclCommSuspend(comm, 0) != ncclSuccess) lfail(t, "suspend: %s", ncclGetLastError(comm));
  if (ncclCommResume(comm) != ncclSuccess) lfail(t, "resume: %s", ncclGetLastError(comm));
  if (ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, comm, NULL) != ncclSuccess || sum != 3)
    lfail(t, "all-reduce after resume: %lld", sum);
}

START_TEST(suspend_is_local_and_resumes)
{
  host_only();
  run_ranks(2, suspend_rank, NULL);
}
END_TEST

/* ---- grow ---- */

typedef struct {
  _Atomic int ready;
  ncclUniqueId id;
  int old_n, new_n;
  life_rank_t t[8];
} grow_case_t;

static void grown_checks(life_rank_t *t, ncclComm_t nc, int n, int rank)
{
  int count = 0, me = -1;
  ncclCommCount(nc, &count);
  ncclCommUserRank(nc, &me);
  if (count != n || me != rank) lfail(t, "grown: %d ranks, rank %d (want %d, %d)", count, me, n, rank);
  conf_plan_t plan = {.nranks = n, .device = -1, .counts = shrink_counts, .ncounts = 4,
                      .colls = CONF_ALL_COLLS, .types = 1u << ncclInt64 | 1u << ncclFloat16,
                      .ops = CONF_ALL_OPS, .sample = 3, .inplace = 2};
  conf_run_rank(nc, rank, &plan, &t->res);
  if (t->res.calls == 0) lfail(t, "no conformance call ran");
}

static void *grow_old_rank(void *arg)
{
  life_rank_t *t = arg;
  grow_case_t *g = (grow_case_t *)t->arg;
  ncclComm_t comm = NULL, nc = NULL;
  if (ncclCommInitRank(&comm, g->old_n, t->id, t->rank) != ncclSuccess) {
    lfail(t, "init: %s", ncclGetLastError(NULL));
    return NULL;
  }
  ncclUniqueId id, again;
  if (t->rank == 0) {
    if (ncclCommGetUniqueId(comm, &id) != ncclSuccess) lfail(t, "id: %s", ncclGetLastError(comm));
    if (ncclCommGetUniqueId(comm, &again) != ncclInvalidUsage) lfail(t, "a second id while one is unused");
    g->id = id;
    atomic_store(&g->ready, 1);
  }
  if (ncclCommGrow(comm, g->new_n, t->rank == 0 ? &id : NULL, -1, &nc, NULL) != ncclSuccess) {
    lfail(t, "grow: %s", ncclGetLastError(comm));
  } else {
    grown_checks(t, nc, g->new_n, t->rank);
    ncclCommDestroy(nc);
  }
  if (t->rank == 0 && ncclCommGetUniqueId(comm, &again) != ncclSuccess)
    lfail(t, "no new id after the first was used: %s", ncclGetLastError(comm));
  ncclCommDestroy(comm);
  return NULL;
}

static void *grow_new_rank(void *arg)
{
  life_rank_t *t = arg;
  grow_case_t *g = (grow_case_t *)t->arg;
  double deadline = shm_now() + WAIT_BOUND_S;
  while (!atomic_load(&g->ready) && shm_now() < deadline) shm_sleep(0.001);
  ncclComm_t nc = NULL;
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.commName = "grown";
  if (ncclCommGrow(NULL, g->new_n, &g->id, t->rank, &nc, &cfg) != ncclSuccess) {
    lfail(t, "grow (new rank): %s", ncclGetLastError(NULL));
    return NULL;
  }
  if (strcmp(nc->name, "grown") != 0) lfail(t, "the new rank's config was not used");
  grown_checks(t, nc, g->new_n, t->rank);
  ncclCommDestroy(nc);
  return NULL;
}

static void grow(int old_n, int new_n)
{
  static grow_case_t g;
  memset(&g, 0, sizeof g);
  g.old_n = old_n;
  g.new_n = new_n;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  pthread_t th[8];
  for (int r = 0; r < new_n; r++) {
    g.t[r] = (life_rank_t){.id = id, .n = new_n, .rank = r, .arg = &g};
    ck_assert_int_eq(pthread_create(&th[r], NULL, r < old_n ? grow_old_rank : grow_new_rank, &g.t[r]), 0);
  }
  for (int r = 0; r < new_n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < new_n; r++) {
    ck_assert_msg(g.t[r].fails[0] == 0, "rank %d: %s", r, g.t[r].fails);
    ck_assert_msg(g.t[r].res.failures == 0, "rank %d: %s", r, g.t[r].res.fails);
  }
}

START_TEST(grow_2_to_3_and_3_to_5)
{
  host_only();
  grow(2, 3);
  grow(3, 5);
}
END_TEST

START_TEST(grow_bad_arguments_are_refused)
{
  host_only();
  ncclUniqueId id, made, other;
  ncclComm_t comm, nc = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGetUniqueId(&other), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_int_eq(ncclCommGetUniqueId(comm, &made), ncclSuccess);
  static const struct { int with_comm, n, rank, which_id; const char *named; } bad[] = {
    {1, 2, 0, 1, "argument rank is 0: ranks of comm pass -1"},
    {1, 1, -1, 1, "argument nRanks is 1"},
    {1, 9, -1, 1, "argument nRanks is 9"},
    {1, 2, -1, 2, "not the id this communicator's ncclCommGetUniqueId made"},
    {0, 2, 0, 0, "argument uniqueId is NULL"},
    {0, 2, 2, 1, "argument rank is 2, not in 0..1"},
    {0, 2, -1, 1, "argument rank is -1"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const ncclUniqueId *u = bad[i].which_id == 1 ? &made : bad[i].which_id == 2 ? &other : NULL;
    ncclComm_t c = bad[i].with_comm ? comm : NULL;
    ck_assert_int_eq(ncclCommGrow(c, bad[i].n, u, bad[i].rank, &nc, NULL), ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(c), bad[i].named), "%zu: %s", i, ncclGetLastError(c));
    ck_assert_ptr_null(nc);
  }
  ck_assert_int_eq(ncclCommGrow(comm, 2, &made, -1, NULL, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommGetUniqueId(comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* ---- shrink after a rank was killed (ranks as processes) ---- */

enum { KILL_N = 3, KILL_VICTIM = 2 };

typedef struct {
  _Atomic int first_done; /* survivors that finished the first all-reduce */
  int stage[KILL_N];      /* how far each rank got (for the failure message) */
  char msg[KILL_N][256];
} kill_shared_t;

static int kill_rank_main(kill_shared_t *sh, ncclUniqueId id, int rank)
{
  ncclComm_t comm = NULL, nc = NULL;
#define STEP(k, cond, ...)                                                                    \
  do {                                                                                        \
    sh->stage[rank] = k;                                                                      \
    if (!(cond)) {                                                                            \
      snprintf(sh->msg[rank], sizeof sh->msg[rank], __VA_ARGS__);                             \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)
  STEP(1, ncclCommInitRank(&comm, KILL_N, id, rank) == ncclSuccess, "init: %s",
       ncclGetLastError(NULL));
  long long x = rank, sum = -1;
  STEP(2, ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, comm, NULL) == ncclSuccess && sum == 3,
       "first all-reduce: %lld, %s", sum, ncclGetLastError(comm));
  if (rank == KILL_VICTIM) {
    double deadline = shm_now() + WAIT_BOUND_S; /* the survivors have read its contribution */
    while (atomic_load(&sh->first_done) < KILL_N - 1 && shm_now() < deadline) shm_sleep(0.001);
    raise(SIGKILL);
  }
  atomic_fetch_add(&sh->first_done, 1);
  ncclResult_t r = ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, comm, NULL);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  STEP(3, r == ncclRemoteError && async == ncclRemoteError, "the dead peer: call %d, async %d",
       (int)r, (int)async);
  int excl[] = {KILL_VICTIM};
  STEP(4, ncclCommShrink(comm, excl, 1, &nc, NULL, SHMDDP_NCCL_SHRINK_ABORT) == ncclSuccess,
       "shrink: %s", ncclGetLastError(comm));
  int count = 0, me = -1;
  ncclCommCount(nc, &count);
  ncclCommUserRank(nc, &me);
  STEP(5, count == 2 && me == rank, "shrunk: %d ranks, rank %d", count, me);
  float v[1000], got[1000];
  for (int i = 0; i < 1000; i++) v[i] = (float)(i * (rank + 1));
  STEP(6, ncclAllReduce(v, got, 1000, ncclFloat32, ncclSum, nc, NULL) == ncclSuccess,
       "all-reduce on the shrunk communicator: %s", ncclGetLastError(nc));
  for (int i = 0; i < 1000; i++) STEP(7, got[i] == (float)(3 * i), "element %d is %g", i, got[i]);
  STEP(8, ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, comm, NULL) == ncclInvalidUsage &&
              strstr(ncclGetLastError(comm), "revoked"),
       "the aborted parent still takes calls: %s", ncclGetLastError(comm));
  STEP(9, ncclCommDestroy(nc) == ncclSuccess && ncclCommDestroy(comm) == ncclSuccess, "destroy");
#undef STEP
  return 0;
}

START_TEST(shrink_with_abort_after_a_rank_was_killed)
{
  host_only();
  kill_shared_t *sh = test_shared_alloc(sizeof *sh);
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  pid_t pids[KILL_N];
  fflush(NULL);
  for (int r = 0; r < KILL_N; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0) _exit(kill_rank_main(sh, id, r));
  }
  for (int r = 0; r < KILL_N; r++) {
    int ws = 0;
    double deadline = shm_now() + WAIT_BOUND_S;
    while (waitpid(pids[r], &ws, WNOHANG) == 0 && shm_now() < deadline) shm_sleep(0.005);
    if (shm_now() >= deadline) kill(pids[r], SIGKILL), waitpid(pids[r], &ws, 0);
    if (r == KILL_VICTIM)
      ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "the victim was not killed");
    else
      ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "rank %d, step %d: %s", r,
                    sh->stage[r], sh->msg[r]);
  }
  /* Nothing left in /dev/shm: neither the parent's segment nor the shrunk group's. */
  shmddp_unique_id_t parent, child;
  memcpy(parent.internal, id.internal, sizeof parent.internal);
  ck_assert_int_eq(nccl_shrink_id(&parent, 1u << KILL_VICTIM, 0, &child), SHMDDP_OK);
  const shmddp_unique_id_t *ids[] = {&parent, &child};
  for (int i = 0; i < 2; i++) {
    char name[96], path[128];
    struct stat sb;
    coll_id_segment_name(ids[i], name, sizeof name);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    ck_assert_msg(stat(path, &sb) != 0 && errno == ENOENT, "%s was left behind", path);
  }
}
END_TEST

static Suite *life_suite(const suite_env_t *env)
{
  Suite *s = suite_create("nccl_life");
  TCase *tc = SUITE_CASE(s, "shrink", shrink_3_to_2, shrink_5_to_3_with_config,
                         shrink_bad_arguments_are_refused, shrink_with_abort_after_a_rank_was_killed);
  tcase_set_timeout(tc, 300);
  SUITE_CASE(s, "windows", windows_register_use_release);
  SUITE_CASE(s, "simulate", simulated_groups_estimate_and_run_nothing);
  SUITE_CASE(s, "suspend", suspend_resume_and_memory_statistics, suspend_is_local_and_resumes);
  tcase_set_timeout(SUITE_CASE(s, "grow", grow_2_to_3_and_3_to_5, grow_bad_arguments_are_refused), 300);
#ifdef HAVE_CUDA
  if (suite_gpu_cases(env, 1, 1, "device windows"))
    tcase_set_timeout(SUITE_CASE(s, "gpu", device_windows_processes_sharing_a_gpu), 300);
#else
  suite_gpu_cases(env, 1, 0, "device windows");
#endif
  return s;
}

int main(void)
{
  setenv("SHMDDP_TIMEOUT", "60", 0);
  return suite_main("check_nccl_life", life_suite, SUITE_SOME_GPU);
}
