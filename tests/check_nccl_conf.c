/* check_nccl_conf.c — NCCL conformance (tests/nccl_conf.h) and the contract's edge cases.
 *
 * The matrix: every collective x every dtype (both 8-bit floats) x every op (sum, prod, max,
 * min, avg, pre-multiplied sums with host and device scalars that differ by rank) x in place and
 * out of place x counts 0, 1, 7, 1023 x 2, 3, 5 and 8 ranks (threads, host buffers). The count
 * 1 Mi + 3 is sampled: the 16-bit and 8-bit float types and u8, every 7th combination in the
 * matrix order (about 30 calls per rank count), which keeps the suite within about a minute on
 * a 2-core CI machine. On a GPU the same harness runs with device buffers on one GPU shared by
 * every rank, ranks as threads and as processes (registered only where a GPU is visible).
 *
 * The edge cases: an op destroyed and its slot reused before ncclGroupEnd; a device-residence
 * scalar read when the call runs; arguments refused by the call itself, named in
 * ncclGetLastError; a failure inside a group aborting the peers within 2 s; a dead peer named
 * within 2 s although there is no timeout; the opt-in timeout; revoke; 8-bit overflow; commName
 * in errors and debug lines. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "nccl/internal.h"
#include "shm/timeutil.h"
#include "tests/nccl_conf.h"
#include "tests/suite_main.h"

/* Host-only communicators even on a GPU machine: no GPU visible to the test's ranks. */
static void host_only(void) { setenv("CUDA_VISIBLE_DEVICES", "", 1); }

static void assert_results(const conf_plan_t *plan, const conf_result_t *res)
{
  long calls = 0;
  for (int r = 0; r < plan->nranks; r++) {
    ck_assert_msg(!res[r].init_failed, "rank %d: %s", r, res[r].fails);
    ck_assert_msg(res[r].failures == 0, "%d ranks, rank %d: %ld of %ld checks failed: %s",
                  plan->nranks, r, res[r].failures, res[r].checks, res[r].fails);
    calls += res[r].calls;
  }
  ck_assert_msg(calls > 0, "no call was made");
  printf("%d ranks: %ld calls, all correct\n", plan->nranks, calls / plan->nranks);
}

static const size_t small_counts[] = {0, 1, 7, 1023};
static const size_t big_counts[] = {(1u << 20) + 3};
#define BIG_TYPES                                                                             \
  (1u << ncclUint8 | 1u << ncclFloat16 | 1u << ncclBfloat16 | 1u << ncclFloat8e4m3 |          \
   1u << ncclFloat8e5m2)

static void matrix(int n, int device, int processes, int big)
{
  conf_plan_t plan = {.nranks = n, .device = device, .counts = big ? big_counts : small_counts,
                      .ncounts = big ? 1 : 4, .colls = CONF_ALL_COLLS,
                      .types = big ? BIG_TYPES : CONF_ALL_TYPES, .ops = CONF_ALL_OPS,
                      .sample = big ? 19 : 0, .inplace = 2};
  conf_result_t res[8];
  int rc = processes ? conf_run_processes(&plan, res) : conf_run_threads(&plan, res);
  ck_assert_msg(rc == 0, "could not start %d ranks", n);
  assert_results(&plan, res);
}

START_TEST(matrix_host_threads)
{
  static const int ranks[] = {2, 3, 5, 8};
  host_only();
  matrix(ranks[_i], -1, 0, 0);
}
END_TEST

START_TEST(big_counts_host_threads)
{
  static const int ranks[] = {2, 3, 5, 8};
  host_only();
  matrix(ranks[_i], -1, 0, 1);
}
END_TEST

START_TEST(matrix_gpu_threads)
{
  static const int ranks[] = {2, 3};
  matrix(ranks[_i], 0, 0, 0);
  matrix(ranks[_i], 0, 0, 1);
}
END_TEST

START_TEST(matrix_gpu_processes)
{
  static const int ranks[] = {2, 3};
  matrix(ranks[_i], 0, 1, 0);
  matrix(ranks[_i], 0, 1, 1);
}
END_TEST

/* ---- ranks as threads running a function of their own ---- */

typedef struct rk rk_t;
struct rk {
  ncclUniqueId id;
  int n, rank;
  ncclComm_t comm;
  ncclResult_t r, r2;
  double t_done;
  _Atomic int flag;
  rk_t *all;
  void *arg;
  char msg[512];
};

static void run_ranks(rk_t *t, int n, void *(*fn)(void *), void *arg)
{
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  pthread_t th[8];
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r] = (rk_t){.id = id, .n = n, .rank = r, .all = t, .arg = arg};
  }
  for (int r = 0; r < n; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, fn, &t[r]), 0);
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}

/* Every rank of run_ranks ended with ncclSuccess, nothing noted. */
static void assert_ranks_ok(const rk_t *t, int n)
{
  for (int r = 0; r < n; r++)
    ck_assert_msg(t[r].r == ncclSuccess && !t[r].msg[0], "rank %d: %s %s %s", r,
                  ncclGetErrorString(t[r].r), t[r].msg, ncclGetLastError(NULL));
}

/* In one group: an all-reduce with a pre-multiplied sum A (this rank's scalar r + 1), A
 * destroyed, B made (scalar 100: it takes A's slot), a second all-reduce with B, B destroyed,
 * and a third with a device-residence scalar changed after the call was queued. */
static void *rank_ops_in_group(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  enum { N = 100 };
  float x[N], y1[N], y2[N], y3[N], sa = (float)(t->rank + 1), sb = 100, dev = 7;
  for (int i = 0; i < N; i++) x[i] = (float)(i % 9) - 4;
  ncclRedOp_t a, b, c;
  ncclResult_t r = ncclGroupStart();
  if (r == ncclSuccess) r = ncclRedOpCreatePreMulSum(&a, &sa, ncclFloat32, ncclScalarHostImmediate, t->comm);
  if (r == ncclSuccess) r = ncclAllReduce(x, y1, N, ncclFloat32, a, t->comm, NULL);
  if (r == ncclSuccess) r = ncclRedOpDestroy(a, t->comm);
  if (r == ncclSuccess) r = ncclRedOpCreatePreMulSum(&b, &sb, ncclFloat32, ncclScalarHostImmediate, t->comm);
  if (r == ncclSuccess && b != a) snprintf(t->msg, sizeof t->msg, "the slot was not reused");
  if (r == ncclSuccess) r = ncclAllReduce(x, y2, N, ncclFloat32, b, t->comm, NULL);
  if (r == ncclSuccess) r = ncclRedOpDestroy(b, t->comm);
  if (r == ncclSuccess) r = ncclRedOpCreatePreMulSum(&c, &dev, ncclFloat32, ncclScalarDevice, t->comm);
  if (r == ncclSuccess) r = ncclAllReduce(x, y3, N, ncclFloat32, c, t->comm, NULL);
  dev = 0.5f; /* read when the call runs: at ncclGroupEnd */
  ncclResult_t e = ncclGroupEnd();
  t->r = r != ncclSuccess ? r : e;
  ncclRedOpDestroy(c, t->comm);
  float s_all = 0;
  for (int q = 0; q < t->n; q++) s_all += (float)(q + 1);
  for (int i = 0; i < N && t->r == ncclSuccess && !t->msg[0]; i++) {
    if (y1[i] != s_all * x[i] || y2[i] != 100.0f * t->n * x[i] || y3[i] != 0.5f * t->n * x[i])
      snprintf(t->msg, sizeof t->msg, "element %d: %g %g %g, want %g %g %g", i, y1[i], y2[i],
               y3[i], s_all * x[i], 100.0f * t->n * x[i], 0.5f * t->n * x[i]);
  }
  ncclCommDestroy(t->comm);
  return NULL;
}

START_TEST(op_destroyed_and_slot_reused_before_group_end)
{
  host_only();
  rk_t t[3];
  run_ranks(t, 3, rank_ops_in_group, NULL);
  assert_ranks_ok(t, 3);
}
END_TEST

/* Inside a group, every refused argument is returned by the call that received it and named;
 * what was accepted still runs at ncclGroupEnd. */
static void *rank_refusals(void *arg)
{
  rk_t *t = arg;
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.commName = "conf-refusals";
  t->r = ncclCommInitRankConfig(&t->comm, t->n, t->id, t->rank, &cfg);
  if (t->r != ncclSuccess) return NULL;
  ncclComm_t comm = t->comm;
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  double d = 2;
  ncclRedOp_t pm;
  ncclRedOpCreatePreMulSum(&pm, &d, ncclFloat64, ncclScalarHostImmediate, comm);
  ncclResult_t got[9];
  ncclGroupStart();
  got[0] = ncclAllReduce(x, y, 4, (ncclDataType_t)42, ncclSum, comm, NULL);
  got[1] = ncclBroadcast(x, y, 4, ncclFloat32, t->n, comm, NULL);
  got[2] = ncclAllGather(NULL, y, 4, ncclFloat32, comm, NULL);
  got[3] = ncclReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)99, 0, comm, NULL);
  got[4] = ncclAllReduce(x, y, 4, ncclFloat32, pm, comm, NULL); /* made for f64 */
  got[5] = ncclSend(x, 4, ncclFloat32, -1, comm, NULL);
  got[6] = ncclScatter(x, NULL, 4, ncclFloat32, 0, comm, NULL);
  got[7] = ncclAllReduce(x, y, SIZE_MAX / 2, ncclFloat32, ncclSum, comm, NULL);
  got[8] = ncclAllGather(x, y, SIZE_MAX / 8, ncclFloat32, comm, NULL); /* x nranks overflows */
  for (int i = 0; i < 9 && !t->msg[0]; i++)
    if (got[i] != ncclInvalidArgument)
      snprintf(t->msg, sizeof t->msg, "refusal %d returned %d", i, (int)got[i]);
  if (!strstr(ncclGetLastError(comm), "communicator conf-refusals: ncclAllGather: argument sendcount"))
    snprintf(t->msg, sizeof t->msg, "last error: %s", ncclGetLastError(comm));
  t->r = ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL); /* accepted: runs at the end */
  ncclResult_t e = ncclGroupEnd();
  if (t->r == ncclSuccess) t->r = e;
  if (t->r == ncclSuccess && y[3] != 4.0f * t->n) snprintf(t->msg, sizeof t->msg, "y[3] = %g", y[3]);
  ncclRedOpDestroy(pm, comm);
  ncclCommDestroy(comm);
  return NULL;
}

START_TEST(refusals_are_returned_by_the_call)
{
  host_only();
  rk_t t[2];
  run_ranks(t, 2, rank_refusals, NULL);
  assert_ranks_ok(t, 2);
}
END_TEST

/* A communicator handed to another thread while its init waits in this thread's group: a call
 * the other thread makes in a group of its own is accepted (the init may run in that group),
 * and refused when that group ends, before the init has run; the init then runs at this
 * thread's ncclGroupEnd, and the communicator works. */
typedef struct {
  ncclComm_t comm;
  ncclResult_t queued, ended;
  char msg[512];
} early_call_t;

static void *call_before_init(void *arg)
{
  early_call_t *e = arg;
  float x = 1, y = 0;
  ncclGroupStart();
  e->queued = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, e->comm, NULL);
  e->ended = ncclGroupEnd();
  snprintf(e->msg, sizeof e->msg, "%s", ncclGetLastError(e->comm));
  return NULL;
}

START_TEST(call_before_its_groups_init_is_refused)
{
  host_only();
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  early_call_t e = {0};
  ncclGroupStart();
  ck_assert_int_eq(ncclCommInitRank(&e.comm, 1, id, 0), ncclSuccess);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_before_init, &e), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(e.queued, ncclSuccess);
  ck_assert_int_eq(e.ended, ncclInvalidUsage);
  ck_assert_msg(strstr(e.msg, "ncclAllReduce: the communicator's init has not run"), "%s", e.msg);
  float x = 2, y = 0;
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, e.comm, NULL), ncclSuccess);
  ck_assert(y == 2);
  ck_assert_int_eq(ncclCommDestroy(e.comm), ncclSuccess);
}
END_TEST

/* Each refusal names its argument in ncclGetLastError, and the config's commName prefixes it. */
START_TEST(refusals_name_the_argument)
{
  host_only();
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.commName = "conf-one";
  ncclComm_t comm;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  float x[4] = {0}, y[4];
  double d = 2;
  ncclRedOp_t pm;
  ck_assert_int_eq(ncclRedOpCreatePreMulSum(&pm, &d, ncclFloat64, ncclScalarHostImmediate, comm), ncclSuccess);
  struct { ncclResult_t r; const char *arg; } cases[] = {
    {ncclAllReduce(x, y, 4, (ncclDataType_t)42, ncclSum, comm, NULL), "argument datatype is 42"},
    {ncclBroadcast(x, y, 4, ncclFloat32, 1, comm, NULL), "argument root is 1"},
    {ncclAllGather(NULL, y, 4, ncclFloat32, comm, NULL), "argument sendbuff is NULL"},
    {ncclReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)99, 0, comm, NULL), "argument op is 99"},
    {ncclAllReduce(x, y, 4, ncclFloat32, pm, comm, NULL), "made for f64 data"},
    {ncclRecv(y, 4, ncclFloat32, 3, comm, NULL), "argument peer is 3"},
    {ncclGather(x, NULL, 4, ncclFloat32, 0, comm, NULL), "argument recvbuff is NULL"},
    {ncclReduceScatter(x, y, SIZE_MAX / 4, ncclFloat32, ncclSum, comm, NULL), "argument recvcount is"},
    {ncclCommRevoke(comm, 5), "argument revokeFlags"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ck_assert_msg(cases[i].r == ncclInvalidArgument, "case %zu: %d", i, (int)cases[i].r);
  }
  /* The last message is the last refusal's; each one's text was checked as it happened below. */
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "communicator conf-one: ncclCommRevoke"));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ncclResult_t r = ncclSuccess;
    switch (i) {
    case 0: r = ncclAllReduce(x, y, 4, (ncclDataType_t)42, ncclSum, comm, NULL); break;
    case 1: r = ncclBroadcast(x, y, 4, ncclFloat32, 1, comm, NULL); break;
    case 2: r = ncclAllGather(NULL, y, 4, ncclFloat32, comm, NULL); break;
    case 3: r = ncclReduce(x, y, 4, ncclFloat32, (ncclRedOp_t)99, 0, comm, NULL); break;
    case 4: r = ncclAllReduce(x, y, 4, ncclFloat32, pm, comm, NULL); break;
    case 5: r = ncclRecv(y, 4, ncclFloat32, 3, comm, NULL); break;
    case 6: r = ncclGather(x, NULL, 4, ncclFloat32, 0, comm, NULL); break;
    case 7: r = ncclReduceScatter(x, y, SIZE_MAX / 4, ncclFloat32, ncclSum, comm, NULL); break;
    default: r = ncclCommRevoke(comm, 5); break;
    }
    ck_assert_int_eq(r, ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(comm), cases[i].arg) != NULL, "case %zu: \"%s\" lacks \"%s\"",
                  i, ncclGetLastError(comm), cases[i].arg);
  }
  /* A refused argument leaves the communicator as it was (the revoke's flags were refused too). */
  ck_assert_int_eq(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ncclRedOpDestroy(pm, comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Ranks 0 and 1 fail inside a group (a send of 5 elements meets a receive of 6); rank 2 waits
 * for rank 0 in an all-reduce (variant 0) or in a receive whose pair rank 0 never joins (variant
 * 1: rank 0's group would have sent to it after the failed pair). The failure aborts the group:
 * rank 2's call ends with ncclRemoteError within 2 s (there is no timeout: without the abort it
 * would wait forever). */
static void *rank_group_failure(void *arg)
{
  rk_t *t = arg;
  int variant = *(int *)t->arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  float x[8] = {1}, y[8];
  if (t->rank == 2) {
    t->r = variant == 0 ? ncclAllReduce(x, y, 8, ncclFloat32, ncclSum, t->comm, NULL)
                        : ncclRecv(y, 8, ncclFloat32, 0, t->comm, NULL);
  } else {
    ncclGroupStart();
    if (t->rank == 0) {
      ncclSend(x, 5, ncclFloat32, 1, t->comm, NULL);
      if (variant == 1) ncclSend(x, 8, ncclFloat32, 2, t->comm, NULL);
    } else {
      ncclRecv(y, 6, ncclFloat32, 0, t->comm, NULL);
    }
    t->r = ncclGroupEnd();
  }
  t->t_done = shm_now();
  snprintf(t->msg, sizeof t->msg, "%s", ncclGetLastError(t->comm));
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(t->comm, &async);
  t->r2 = async;
  return NULL;
}

START_TEST(failure_in_a_group_aborts_the_peers)
{
  host_only();
  unsetenv("SHMDDP_TIMEOUT");
  rk_t t[3];
  int variant = _i;
  run_ranks(t, 3, rank_group_failure, &variant);
  ck_assert_msg(t[0].r != ncclSuccess && t[1].r != ncclSuccess, "the mismatched pair succeeded");
  ck_assert_msg(t[2].r == ncclRemoteError, "rank 2: %d (%s)", (int)t[2].r, t[2].msg);
  double first = t[0].t_done < t[1].t_done ? t[0].t_done : t[1].t_done;
  ck_assert_msg(t[2].t_done - first < 2.0, "rank 2 ended %.2f s after the failure",
                t[2].t_done - first);
  ck_assert_msg(strstr(t[2].msg, "failed in ncclSend") || strstr(t[2].msg, "failed in ncclRecv"),
                "rank 2 was not told why: %s", t[2].msg);
  ck_assert_int_eq(t[2].r2, ncclRemoteError);
  for (int r = 0; r < 3; r++) ncclCommDestroy(t[r].comm);
}
END_TEST

/* No timeout of our own: the communicators wait without limit unless SHMDDP_TIMEOUT is set;
 * with it set, a peer that does not come is reported after that many seconds. */
static void *rank_late(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  float x = 1, y = 0;
  if (t->rank == 0) {
    double t0 = shm_now();
    t->r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, t->comm, NULL);
    t->t_done = shm_now() - t0;
    snprintf(t->msg, sizeof t->msg, "%s", ncclGetLastError(t->comm));
    atomic_store(&t->flag, 1);
  } else {
    /* Rank 1 arrives only after rank 0 has given up (bounded: 30 s). */
    double until = shm_now() + 30;
    while (!atomic_load(&t->all[0].flag) && shm_now() < until) sched_yield();
    t->r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, t->comm, NULL);
  }
  return NULL;
}

START_TEST(no_timeout_unless_asked)
{
  host_only();
  unsetenv("SHMDDP_TIMEOUT");
  ncclUniqueId id;
  ncclComm_t comm;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_msg(comm->c->timeout_s >= 1e8, "a default timeout of %.0f s", comm->c->timeout_s);
  ncclCommDestroy(comm);
  setenv("SHMDDP_TIMEOUT", "2", 1); /* 2 s: the two ranks' init must meet within it */
  rk_t t[2];
  run_ranks(t, 2, rank_late, NULL);
  ck_assert_int_eq(t[0].r, ncclRemoteError);
  ck_assert_msg(strstr(t[0].msg, "timed out"), "%s", t[0].msg);
  ck_assert_msg(t[0].t_done >= 1.9 && t[0].t_done < 10, "gave up after %.2f s", t[0].t_done);
  for (int r = 0; r < 2; r++) ncclCommDestroy(t[r].comm);
}
END_TEST

/* A peer process that dies is named within 2 s, without any timeout. */
START_TEST(dead_peer_is_reported_without_a_timeout)
{
  host_only();
  unsetenv("SHMDDP_TIMEOUT");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  int go[2];
  ck_assert_int_eq(pipe(go), 0);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) { /* rank 1: joins, then dies when told */
    ncclComm_t c;
    if (ncclCommInitRank(&c, 2, id, 1) != ncclSuccess) _exit(3);
    char b;
    if (read(go[0], &b, 1) != 1) _exit(4);
    _exit(9);
  }
  ncclComm_t comm;
  ck_assert_int_eq(ncclCommInitRank(&comm, 2, id, 0), ncclSuccess);
  ck_assert_int_eq(write(go[1], "x", 1), 1);
  double t0 = shm_now();
  float x = 1, y;
  ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
  double waited = shm_now() - t0;
  int status;
  waitpid(pid, &status, 0);
  ck_assert_int_eq(r, ncclRemoteError);
  ck_assert_msg(waited < 2.0, "the dead peer was reported after %.2f s", waited);
  ck_assert_msg(strstr(ncclGetLastError(comm), "rank 1"), "%s", ncclGetLastError(comm));
  ncclResult_t async;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  ncclCommDestroy(comm);
}
END_TEST

/* Revoke ends a call blocked on the peer and refuses later ones; destroy still works. */
static void *rank_revoke(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  float x = 1, y;
  if (t->rank == 1) {
    atomic_store(&t->flag, 1);
    t->r = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, t->comm, NULL);
  } else {
    double until = shm_now() + 30;
    while (!atomic_load(&t->all[1].flag) && shm_now() < until) sched_yield();
    t->r = ncclCommRevoke(t->comm, 0);
    t->r2 = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, t->comm, NULL);
    snprintf(t->msg, sizeof t->msg, "%s", ncclGetLastError(t->comm));
  }
  return NULL;
}

START_TEST(revoke_ends_calls_in_flight)
{
  host_only();
  unsetenv("SHMDDP_TIMEOUT");
  rk_t t[2];
  run_ranks(t, 2, rank_revoke, NULL);
  ck_assert_int_eq(t[0].r, ncclSuccess);
  ck_assert_int_eq(t[1].r, ncclRemoteError);
  ck_assert_int_eq(t[0].r2, ncclInvalidUsage);
  ck_assert_msg(strstr(t[0].msg, "revoked"), "%s", t[0].msg);
  for (int r = 0; r < 2; r++) ck_assert_int_eq(ncclCommDestroy(t[r].comm), ncclSuccess);
}
END_TEST

/* 8-bit float sums that leave the range: e4m3 has no infinity, so it overflows to NaN; e5m2
 * overflows to infinity; ties at the largest value round to even (down). */
static void *rank_fp8_overflow(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  static const double e4[2][3] = {{240, 448, 256}, {240, 16, -16}}; /* 480, 464, 240 */
  static const double e5[2][3] = {{57344, 57344, -40960}, {8192, 2048, -40960}};
  unsigned char a[3], b[3], ya[3], yb[3];
  for (int i = 0; i < 3; i++) {
    conf_encode(a, (size_t)i, e4[t->rank][i], ncclFloat8e4m3);
    conf_encode(b, (size_t)i, e5[t->rank][i], ncclFloat8e5m2);
  }
  t->r = ncclAllReduce(a, ya, 3, ncclFloat8e4m3, ncclSum, t->comm, NULL);
  if (t->r == ncclSuccess) t->r = ncclAllReduce(b, yb, 3, ncclFloat8e5m2, ncclSum, t->comm, NULL);
  if (t->r == ncclSuccess) {
    double g[6] = {conf_decode(ya, 0, ncclFloat8e4m3), conf_decode(ya, 1, ncclFloat8e4m3),
                   conf_decode(ya, 2, ncclFloat8e4m3), conf_decode(yb, 0, ncclFloat8e5m2),
                   conf_decode(yb, 1, ncclFloat8e5m2), conf_decode(yb, 2, ncclFloat8e5m2)};
    if (!isnan(g[0]) || g[1] != 448 || g[2] != 240 || !isinf(g[3]) || g[3] < 0 || g[4] != 57344 ||
        !isinf(g[5]) || g[5] > 0)
      snprintf(t->msg, sizeof t->msg, "got %g %g %g / %g %g %g (bits %02x %02x / %02x)", g[0],
               g[1], g[2], g[3], g[4], g[5], ya[0], ya[1], yb[0]);
  }
  ncclCommDestroy(t->comm);
  return NULL;
}

START_TEST(fp8_overflow)
{
  host_only();
  rk_t t[2];
  run_ranks(t, 2, rank_fp8_overflow, NULL);
  assert_ranks_ok(t, 2);
}
END_TEST

/* The reference encoders against known bit patterns (the harness's own model is checked too). */
START_TEST(reference_encoders)
{
  static const struct { ncclDataType_t t; double v; unsigned bits; } cases[] = {
    {ncclFloat8e4m3, 1.0, 0x38}, {ncclFloat8e4m3, 448, 0x7e}, {ncclFloat8e4m3, -2.0, 0xc0},
    {ncclFloat8e4m3, 0.001953125, 0x01}, {ncclFloat8e4m3, 1.0625, 0x38} /* tie: to even */,
    {ncclFloat8e4m3, 1.1875, 0x3a}, {ncclFloat8e5m2, 1.0, 0x3c}, {ncclFloat8e5m2, 57344, 0x7b},
    {ncclFloat8e5m2, 1e6, 0x7c}, {ncclFloat8e5m2, -1.5, 0xbe}, {ncclFloat16, 1.0, 0x3c00},
    {ncclFloat16, 65520, 0x7c00}, {ncclBfloat16, 1.0, 0x3f80}, {ncclBfloat16, -3.0, 0xc040}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char b[2] = {0, 0};
    conf_encode(b, 0, cases[i].v, cases[i].t);
    unsigned got = conf_type_size(cases[i].t) == 1 ? b[0] : (unsigned)(b[0] | b[1] << 8);
    ck_assert_msg(got == cases[i].bits, "%s %g: %#x, want %#x", conf_type_name(cases[i].t),
                  cases[i].v, got, cases[i].bits);
    if (!isinf(conf_decode(b, 0, cases[i].t)))
      ck_assert_msg(conf_decode(b, 0, cases[i].t) == (cases[i].v == 1.0625 ? 1.0 : cases[i].v == 1.1875 ? 1.25 : cases[i].v),
                    "%s %g decodes to %g", conf_type_name(cases[i].t), cases[i].v, conf_decode(b, 0, cases[i].t));
  }
  unsigned char nan = 0;
  conf_encode(&nan, 0, 480, ncclFloat8e4m3);
  ck_assert_uint_eq(nan, 0x7f);
}
END_TEST

/* NCCL_DEBUG=INFO prints one line per communicator made, naming it (commName); =WARN only
 * failures; ncclResetDebugInit makes a changed setting count. */
START_TEST(debug_lines_name_the_communicator)
{
  host_only();
  char path[] = "/tmp/shmddp-nccl-debug-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_eq(dup2(fd, 2), 2);
  unsetenv("SHMDDP_NCCL_DEBUG");
  setenv("NCCL_DEBUG", "INFO", 1);
  ncclResetDebugInit();
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.commName = "conf-debug";
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 1, id, 0, &cfg);
  setenv("NCCL_DEBUG", "WARN", 1);
  ncclResetDebugInit();
  int info_after = nccl_debug_level();
  float x = 0;
  ncclAllReduce(&x, &x, 1, (ncclDataType_t)77, ncclSum, comm, NULL);
  unsetenv("NCCL_DEBUG");
  ncclResetDebugInit();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char buf[4096] = "";
  ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  ck_assert_int_eq(r, ncclSuccess);
  ck_assert_int_gt(got, 0);
  ck_assert_int_eq(info_after, 1);
  ck_assert_msg(strstr(buf, "[conf-debug rank 0/1] NCCL INFO communicator made"), "%s", buf);
  ck_assert_msg(strstr(buf, "NCCL WARN ncclAllReduce: argument datatype is 77"), "%s", buf);
  ncclCommDestroy(comm);
}
END_TEST

/* Two programs (tests/local.mk): the host matrix and the contract; the GPU matrix
 * (check_nccl_conf_gpu, SUITE_PART "gpu"), which takes as long as the rest together. */
static Suite *conf_suite(const suite_env_t *env)
{
  Suite *s = suite_create("nccl_conf");
  TCase *tc;
  if (strcmp(env->part, "gpu") == 0) {
#ifdef HAVE_CUDA
    int built = 1;
#else
    int built = 0;
#endif
    if (suite_gpu_cases(env, 1, built, "matrix_gpu_threads, matrix_gpu_processes")) {
      tc = tcase_create("gpu");
      tcase_set_timeout(tc, 900);
      tcase_add_loop_test(tc, matrix_gpu_threads, 0, 2);
      tcase_add_loop_test(tc, matrix_gpu_processes, 0, 2);
      suite_add_tcase(s, tc);
    }
    return s;
  }
  tc = tcase_create("matrix");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, matrix_host_threads, 0, 4);
  suite_add_tcase(s, tc);
  tc = tcase_create("big");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, big_counts_host_threads, 0, 4);
  suite_add_tcase(s, tc);
  tc = tcase_create("contract");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, reference_encoders);
  tcase_add_test(tc, op_destroyed_and_slot_reused_before_group_end);
  tcase_add_test(tc, refusals_are_returned_by_the_call);
  tcase_add_test(tc, refusals_name_the_argument);
  tcase_add_test(tc, call_before_its_groups_init_is_refused);
  tcase_add_loop_test(tc, failure_in_a_group_aborts_the_peers, 0, 2);
  tcase_add_test(tc, no_timeout_unless_asked);
  tcase_add_test(tc, dead_peer_is_reported_without_a_timeout);
  tcase_add_test(tc, revoke_ends_calls_in_flight);
  tcase_add_test(tc, fp8_overflow);
  tcase_add_test(tc, debug_lines_name_the_communicator);
  suite_add_tcase(s, tc);
  return s;
}

SUITE_MAIN("check_nccl_conf", conf_suite, SUITE_SOME_GPU)
