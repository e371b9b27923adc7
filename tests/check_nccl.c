/* check_nccl.c — the NCCL front end without a GPU: its translations (config struct of every
 * known size, dtypes, ops, results), and the calls served on host-only communicators, with ranks
 * as threads: init (rank, config, grouped on one thread), every collective and dtype against the
 * f64 reference, pre-multiplied sums, send/recv in groups (an exchange and a ring), split, abort
 * from another thread and the peers' async error, unserved calls. CUDA_VISIBLE_DEVICES is
 * emptied first so the communicators are host-only on a GPU machine too (the GPU paths are
 * exercised there by PyTorch and CuPy: bench/nccl/clients_gpu.sh). */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"
#include "shm/timeutil.h"
#include "tests/suite_main.h"
#include "tools/coll_check.h"

/* ---- translations ---- */

START_TEST(config_structs_of_every_size)
{
  static const size_t sizes[] = {24, 40, 48, 72, 80, 96};
  char err[256];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char buf[128];
    memset(buf, 0x7f, sizeof buf); /* past the client's size: must not be read as fields */
    ncclConfig_t c = SHMDDP_NCCL_CONFIG_INIT;
    c.size = sizes[i];
    c.blocking = 0;
    memcpy(buf, &c, sizes[i] < sizeof c ? sizes[i] : sizeof c);
    nccl_config_t got;
    ck_assert_int_eq(nccl_parse_config((ncclConfig_t *)buf, &got, err, sizeof err), ncclSuccess);
    ck_assert_int_eq(got.blocking, 0);
    ck_assert_str_eq(got.name, ""); /* commName lies past 48 bytes or is NULL */
  }
  ncclConfig_t c = SHMDDP_NCCL_CONFIG_INIT;
  nccl_config_t got;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclSuccess);
  ck_assert_int_eq(got.blocking, 1); /* unset means blocking */
  c.magic = 0x1234;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(err, "magic"));
  c = (ncclConfig_t)SHMDDP_NCCL_CONFIG_INIT;
  c.size = 16;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclInvalidArgument);
  c = (ncclConfig_t)SHMDDP_NCCL_CONFIG_INIT;
  c.blocking = 7;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclInvalidArgument);
  ck_assert_int_eq(nccl_parse_config(NULL, &got, err, sizeof err), ncclSuccess);
  /* commName, splitShare and CTA bounds of a 2.28 config. */
  c = (ncclConfig_t)SHMDDP_NCCL_CONFIG_INIT;
  c.commName = "trainer-dp";
  c.splitShare = 1;
  c.minCTAs = 2;
  c.maxCTAs = 16;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclSuccess);
  ck_assert_str_eq(got.name, "trainer-dp");
  ck_assert_int_eq(got.split_share, 1);
  c.minCTAs = 32;
  ck_assert_int_eq(nccl_parse_config(&c, &got, err, sizeof err), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(err, "minCTAs"));
  /* The ABI offsets. */
  ck_assert_uint_eq(offsetof(ncclConfig_t, blocking), 16);
  ck_assert_uint_eq(offsetof(ncclConfig_t, netName), 32);
  ck_assert_uint_eq(offsetof(ncclConfig_t, commName), 48);
  ck_assert_uint_eq(offsetof(ncclConfig_t, nvlinkCentricSched), 76);
}
END_TEST

START_TEST(dtypes_ops_and_results_map)
{
  static const struct { ncclDataType_t n; shmddp_dtype_t s; } dts[] = {
    {ncclInt8, SHMDDP_I8}, {ncclUint8, SHMDDP_U8}, {ncclInt32, SHMDDP_I32},
    {ncclUint32, SHMDDP_U32}, {ncclInt64, SHMDDP_I64}, {ncclUint64, SHMDDP_U64},
    {ncclFloat16, SHMDDP_F16}, {ncclFloat32, SHMDDP_F32}, {ncclFloat64, SHMDDP_F64},
    {ncclBfloat16, SHMDDP_BF16}, {ncclFloat8e4m3, SHMDDP_F8E4M3}, {ncclFloat8e5m2, SHMDDP_F8E5M2}};
  char fails[512] = "";
  for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
    shmddp_dtype_t got = SHMDDP_NUM_DTYPES;
    if (nccl_dtype(NULL, "t", dts[i].n, &got) != 0 || got != dts[i].s) {
      size_t off = strlen(fails);
      snprintf(fails + off, sizeof fails - off, "[nccl dtype %d -> %d] ", (int)dts[i].n, (int)got);
    }
  }
  ck_assert_msg(fails[0] == 0, "%s", fails);
  shmddp_dtype_t d;
  ck_assert_int_ne(nccl_dtype(NULL, "ncclAllReduce", (ncclDataType_t)99, &d), 0);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclAllReduce: argument datatype is 99"));
  static const struct { ncclRedOp_t n; shmddp_op_t s; } ops[] = {
    {ncclSum, SHMDDP_SUM}, {ncclProd, SHMDDP_PROD}, {ncclMax, SHMDDP_MAX}, {ncclMin, SHMDDP_MIN},
    {ncclAvg, SHMDDP_AVG}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    shmddp_op_t o;
    nccl_scalar_t p;
    ck_assert_int_eq(nccl_op(NULL, "t", ops[i].n, SHMDDP_F32, &o, &p), 0);
    ck_assert_int_eq(o, ops[i].s);
    ck_assert_int_eq(p.set, 0);
  }
  shmddp_op_t o;
  nccl_scalar_t p;
  ck_assert_int_ne(nccl_op(NULL, "t", (ncclRedOp_t)7, SHMDDP_F32, &o, &p), 0);
  ck_assert_int_eq(nccl_result(SHMDDP_OK), ncclSuccess);
  ck_assert_int_eq(nccl_result(SHMDDP_ERR_ABORTED), ncclRemoteError);
  ck_assert_int_eq(nccl_result(SHMDDP_ERR_TIMEOUT), ncclRemoteError);
  ck_assert_int_eq(nccl_result(SHMDDP_ERR_INVALID), ncclInvalidArgument);
  ck_assert_int_eq(nccl_result(SHMDDP_ERR_CUDA), ncclUnhandledCudaError);
  for (int r = 0; r < ncclNumResults; r++) ck_assert_ptr_nonnull(ncclGetErrorString((ncclResult_t)r));
  int v = 0;
  ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
  ck_assert_int_eq(v, 22809);
}
END_TEST

START_TEST(unserved_calls_say_so)
{
  ncclResult_t ncclPutSignal(void);
  ncclResult_t ncclDevCommCreate(void);
  ck_assert_int_eq(ncclPutSignal(), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclPutSignal is not supported"));
  ck_assert_int_eq(ncclDevCommCreate(), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "device-side library"));
}
END_TEST

/* ---- ranks as threads ---- */

typedef struct {
  ncclUniqueId id;
  int n, rank;
  ncclComm_t comm;
  ncclResult_t r;
  long checks, failures;
  char fails[1024];
} rk_t;

static void note(rk_t *t, int bad, const char *what)
{
  t->checks++;
  if (!bad) return;
  t->failures++;
  size_t off = strlen(t->fails);
  if (off + 64 < sizeof t->fails) snprintf(t->fails + off, sizeof t->fails - off, "%s; ", what);
}

static const ncclDataType_t all_types[] = {ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64,
                                           ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
                                           ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

static void *rank_collectives(void *arg)
{
  rk_t *t = arg;
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  t->r = ncclCommInitRankConfig(&t->comm, t->n, t->id, t->rank, &cfg);
  if (t->r != ncclSuccess) return NULL;
  ncclComm_t comm = t->comm;
  int n = t->n, rank = t->rank, iter = 0;
  enum { COUNT = 3000 };
  char *send = malloc(COUNT * 8 * 8), *recv = malloc(COUNT * 8 * 8);
  char what[128];
  static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  static const shmddp_op_t sops[] = {SHMDDP_SUM, SHMDDP_PROD, SHMDDP_MAX, SHMDDP_MIN, SHMDDP_AVG};
  for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
    shmddp_dtype_t dt;
    nccl_dtype(NULL, "t", all_types[ti], &dt);
    size_t ds = shmddp_dtype_size(dt);
    for (int o = 0; o < 5; o++) {
      iter++;
      coll_fill(send, COUNT, 0, rank, iter, dt, sops[o]);
      ncclResult_t r = ncclAllReduce(send, recv, COUNT, all_types[ti], ops[o], comm, NULL);
      snprintf(what, sizeof what, "allreduce %s/%s", shmddp_dtype_name(dt), shmddp_op_name(sops[o]));
      note(t, r != ncclSuccess || coll_count_errors(recv, COUNT, 0, n, iter, dt, sops[o], NULL), what);
      coll_fill(send, COUNT * (size_t)n, 0, rank, iter, dt, sops[o]);
      r = ncclReduceScatter(send, recv, COUNT, all_types[ti], ops[o], comm, NULL);
      snprintf(what, sizeof what, "reducescatter %s/%s", shmddp_dtype_name(dt), shmddp_op_name(sops[o]));
      note(t, r != ncclSuccess ||
                  coll_count_errors(recv, COUNT, (size_t)rank * COUNT, n, iter, dt, sops[o], NULL), what);
      int root = o % n;
      coll_fill(send, COUNT, 0, rank, iter, dt, sops[o]);
      r = ncclReduce(send, recv, COUNT, all_types[ti], ops[o], root, comm, NULL);
      snprintf(what, sizeof what, "reduce %s/%s", shmddp_dtype_name(dt), shmddp_op_name(sops[o]));
      note(t, r != ncclSuccess ||
                  (rank == root && coll_count_errors(recv, COUNT, 0, n, iter, dt, sops[o], NULL)), what);
    }
    iter++;
    coll_fill(send, COUNT, 0, rank, iter, dt, SHMDDP_SUM);
    ncclResult_t r = ncclAllGather(send, recv, COUNT, all_types[ti], comm, NULL);
    long bad = 0;
    for (int q = 0; q < n; q++)
      for (size_t k = 0; k < COUNT; k++)
        bad += coll_load(recv + ((size_t)q * COUNT + k) * ds, 0, dt) !=
               coll_round(coll_pattern(q, k, iter, dt, SHMDDP_SUM), dt);
    snprintf(what, sizeof what, "allgather %s", shmddp_dtype_name(dt));
    note(t, r != ncclSuccess || bad, what);
    int root = n - 1;
    memcpy(recv, send, COUNT * ds);
    r = ncclBcast(recv, COUNT, all_types[ti], root, comm, NULL);
    bad = 0;
    for (size_t k = 0; k < COUNT; k++)
      bad += coll_load(recv, k, dt) != coll_round(coll_pattern(root, k, iter, dt, SHMDDP_SUM), dt);
    snprintf(what, sizeof what, "bcast %s", shmddp_dtype_name(dt));
    note(t, r != ncclSuccess || bad, what);
  }
  /* Pre-multiplied sum, host scalar: sum * s. */
  float s = 0.25f;
  ncclRedOp_t pm;
  ncclResult_t r = ncclRedOpCreatePreMulSum(&pm, &s, ncclFloat32, ncclScalarHostImmediate, comm);
  note(t, r != ncclSuccess, "create premulsum");
  iter++;
  coll_fill(send, COUNT, 0, rank, iter, SHMDDP_F32, SHMDDP_SUM);
  r = ncclAllReduce(send, recv, COUNT, ncclFloat32, pm, comm, NULL);
  long bad = 0;
  for (size_t k = 0; k < COUNT; k++)
    bad += ((float *)recv)[k] != (float)(coll_expected(n, k, iter, SHMDDP_F32, SHMDDP_SUM) * 0.25);
  note(t, r != ncclSuccess || bad, "premulsum f32");
  note(t, ncclAllReduce(send, recv, COUNT, ncclFloat64, pm, comm, NULL) != ncclInvalidArgument,
       "premulsum of the wrong dtype is refused");
  note(t, ncclRedOpDestroy(pm, comm) != ncclSuccess, "destroy premulsum");
  note(t, ncclAllReduce(send, recv, COUNT, ncclFloat32, pm, comm, NULL) != ncclInvalidArgument,
       "a destroyed op is refused");
  free(send);
  free(recv);
  return NULL;
}

static void start_threads(rk_t *t, int n, void *(*fn)(void *))
{
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  pthread_t th[8];
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = id;
    t[r].n = n;
    t[r].rank = r;
    ck_assert_int_eq(pthread_create(&th[r], NULL, fn, &t[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}

static void check_collectives(int n)
{
  rk_t t[8];
  start_threads(t, n, rank_collectives);
  for (int r = 0; r < n; r++) {
    ck_assert_msg(t[r].r == ncclSuccess, "rank %d init: %s", r, ncclGetLastError(NULL));
    ck_assert_msg(t[r].failures == 0, "%d ranks, rank %d: %ld of %ld failed: %s", n, r,
                  t[r].failures, t[r].checks, t[r].fails);
    int c = 0, u = -1, d = 7;
    ck_assert_int_eq(ncclCommCount(t[r].comm, &c), ncclSuccess);
    ck_assert_int_eq(ncclCommUserRank(t[r].comm, &u), ncclSuccess);
    ck_assert_int_eq(ncclCommCuDevice(t[r].comm, &d), ncclSuccess);
    ck_assert_int_eq(c, n);
    ck_assert_int_eq(u, r);
    ck_assert_int_eq(d, -1);
  }
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(ncclCommFinalize(t[r].comm), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(t[r].comm), ncclSuccess);
  }
}

START_TEST(collectives_every_dtype_2) { check_collectives(2); }
END_TEST
START_TEST(collectives_every_dtype_3) { check_collectives(3); }
END_TEST

/* One thread drives all ranks inside a group: init, then collectives, then send/recv. */
START_TEST(one_thread_drives_every_rank_in_groups)
{
  enum { N = 3, COUNT = 1000 };
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[N];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], N, id, r), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  float send[N][COUNT], recv[N][COUNT];
  for (int r = 0; r < N; r++) coll_fill(send[r], COUNT, 0, r, 1, SHMDDP_F32, SHMDDP_SUM);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++)
    ck_assert_int_eq(ncclAllReduce(send[r], recv[r], COUNT, ncclFloat32, ncclSum, comms[r], NULL),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < N; r++)
    ck_assert_uint_eq(coll_count_errors(recv[r], COUNT, 0, N, 1, SHMDDP_F32, SHMDDP_SUM, NULL), 0);
  /* A ring, every rank sending to the next and receiving from the previous, in one group; the
   * calls are made recv-first on odd ranks to show the order inside a group does not matter. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++) {
    int next = (r + 1) % N, prev = (r + N - 1) % N;
    if (r % 2) {
      ncclRecv(recv[r], COUNT, ncclFloat32, prev, comms[r], NULL);
      ncclSend(send[r], COUNT, ncclFloat32, next, comms[r], NULL);
    } else {
      ncclSend(send[r], COUNT, ncclFloat32, next, comms[r], NULL);
      ncclRecv(recv[r], COUNT, ncclFloat32, prev, comms[r], NULL);
    }
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < N; r++)
    ck_assert_msg(memcmp(recv[r], send[(r + N - 1) % N], sizeof recv[r]) == 0,
                  "rank %d did not receive rank %d's data", r, (r + N - 1) % N);
  for (int r = 0; r < N; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* Split into even and odd ranks (keys reverse the order), one rank opting out. */
static void *rank_split(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  if (t->r != ncclSuccess) return NULL;
  int color = t->rank == 4 ? SHMDDP_NCCL_SPLIT_NOCOLOR : t->rank % 2;
  ncclComm_t sub = NULL;
  t->r = ncclCommSplit(t->comm, color, -t->rank, &sub, NULL);
  if (t->r != ncclSuccess) return NULL;
  if (color == SHMDDP_NCCL_SPLIT_NOCOLOR) {
    note(t, sub != NULL, "NOCOLOR gives no communicator");
  } else {
    int c = 0, u = -1;
    ncclCommCount(sub, &c);
    ncclCommUserRank(sub, &u);
    note(t, c != 2, "split size"); /* ranks 0, 2 (4 opted out) / 1, 3 */
    note(t, u != (t->rank < 2 ? 1 : 0), "split rank follows the keys");
    int64_t x = t->rank, sum = 0;
    note(t, ncclAllReduce(&x, &sum, 1, ncclInt64, ncclSum, sub, NULL) != ncclSuccess, "split allreduce");
    note(t, sum != (t->rank % 2 ? 1 + 3 : 0 + 2), "split sum");
    ncclCommDestroy(sub);
  }
  ncclCommDestroy(t->comm);
  return NULL;
}

START_TEST(split_by_color_and_key)
{
  rk_t t[5];
  start_threads(t, 5, rank_split);
  for (int r = 0; r < 5; r++)
    ck_assert_msg(t[r].r == ncclSuccess && t[r].failures == 0, "rank %d: %s %s", r, t[r].fails,
                  ncclGetLastError(NULL));
}
END_TEST

/* Rank 1 blocks in an all-reduce that rank 0 never joins; rank 0's watchdog-like thread aborts
 * rank 0's communicator; rank 1's call ends with ncclRemoteError and its async error says so. */
typedef struct {
  ncclComm_t comm;
  ncclResult_t r;
  volatile int calling;
} blocked_call_t;

static void *blocked_allreduce(void *arg)
{
  blocked_call_t *b = arg;
  float x = 1;
  b->calling = 1;
  b->r = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, b->comm, NULL);
  return NULL;
}

static void *rank_init_only(void *arg)
{
  rk_t *t = arg;
  t->r = ncclCommInitRank(&t->comm, t->n, t->id, t->rank);
  return NULL;
}

START_TEST(abort_reaches_the_peer_as_remote_error)
{
  rk_t t[2];
  start_threads(t, 2, rank_init_only);
  ck_assert(t[0].r == ncclSuccess && t[1].r == ncclSuccess);
  blocked_call_t b = {.comm = t[1].comm};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, blocked_allreduce, &b), 0);
  while (!b.calling) sched_yield();
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(t[1].comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  ck_assert_int_eq(ncclCommAbort(t[0].comm), ncclSuccess);
  pthread_join(th, NULL);
  ck_assert_int_eq(b.r, ncclRemoteError);
  ck_assert_int_eq(ncclCommGetAsyncError(t[1].comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(t[1].comm), "aborted"));
  ck_assert_int_eq(ncclCommDestroy(t[1].comm), ncclSuccess);
}
END_TEST

START_TEST(bad_calls_are_refused)
{
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 2, id, 5), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommInitRank(NULL, 2, id, 0), ncclInvalidArgument);
  ncclConfig_t cfg = SHMDDP_NCCL_CONFIG_INIT;
  cfg.magic = 1;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
  ck_assert_int_eq(ncclAllReduce(NULL, NULL, 1, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage);
  /* A one-rank communicator works, and rejects an unknown dtype and a bad peer. */
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  float x = 3, y = 0;
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert(y == 3);
  ck_assert_int_eq(ncclAllReduce(&x, &y, 1, (ncclDataType_t)ncclNumTypes, ncclSum, comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclSend(&x, 1, ncclFloat32, 1, comm, NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "argument peer is 1"));
  ck_assert_int_eq(ncclSend(&x, 1, ncclFloat32, 0, comm, NULL), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "peer 0 is the calling rank"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

static Suite *nccl_suite(const suite_env_t *env)
{
  Suite *s = suite_create("nccl");
  SUITE_CASE(s, "translations", config_structs_of_every_size, dtypes_ops_and_results_map,
             unserved_calls_say_so);
  TCase *tc = SUITE_CASE(s, "served", collectives_every_dtype_2, collectives_every_dtype_3,
                         one_thread_drives_every_rank_in_groups, split_by_color_and_key,
                         abort_reaches_the_peer_as_remote_error, bad_calls_are_refused);
  tcase_set_timeout(tc, 600);
  return s;
}

int main(void)
{
  setenv("CUDA_VISIBLE_DEVICES", "", 1); /* host-only communicators, before any CUDA call */
  setenv("SHMDDP_TIMEOUT", "60", 0);
  return suite_main("check_nccl", nccl_suite, SUITE_CPU_ONLY);
}
