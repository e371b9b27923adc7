/* check_collectives.c — the host collectives against f64 references: every collective × dtype ×
 * op × size × algorithm × world size {1,2,3,4,8}; bitwise-identical results on every rank and
 * across runs; mismatched calls and bad arguments produce errors, never hangs. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/timeutil.h"
#include "tests/failures.h"
#include "tests/testutil.h"
#include "collectives/reduce/half.h"
#include "tools/coll_check.h"
#include "tests/suite_main.h"

typedef struct {
  case_failures_t fails[SHMDDP_MAX_RANKS]; /* every failed check of every rank, by name */
  int status[SHMDDP_MAX_RANKS];
  char msg[SHMDDP_MAX_RANKS][512];
} report_t;

static report_t *rep;
static void setup(void) { rep = test_shared_alloc(sizeof *rep); }
static void teardown(void) { munmap(rep, sizeof *rep); }

/* A check inside a rank: counted, and named in the test's failure when it fails. */
#define FAIL_IF(cond, ...) CF_CHECK(&rep->fails[rank], !(cond), __VA_ARGS__)

/* Fails the test once, listing every failed check of ranks 0..n-1. */
static void assert_no_failures(int n, const char *what)
{
  case_failures_t all;
  cf_merge_ranks(&all, rep->fails, n, "rank");
  CF_ASSERT_NONE(&all, what);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
  const unsigned char *b = p;
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* Every rank must hold the same bits: gather the hashes and compare. */
static int same_everywhere(shmddp_comm_t *comm, const void *buf, size_t bytes)
{
  uint64_t h = hash_bytes(buf, bytes), all[SHMDDP_MAX_RANKS];
  if (shmddp_all_gather(comm, &h, all, 1, SHMDDP_I64, SHMDDP_HOST) != SHMDDP_OK) return 0;
  for (int r = 1; r < shmddp_comm_size(comm); r++)
    if (all[r] != all[0]) return 0;
  return 1;
}

static const char *cname(int dt, int op, size_t count, shmddp_algo_t algo, char *buf, size_t len)
{
  snprintf(buf, len, "%s/%s/count %zu/%s", shmddp_dtype_name(dt), shmddp_op_name(op), count,
           shmddp_algo_name(algo));
  return buf;
}

static void check_reductions(shmddp_comm_t *comm, shmddp_algo_t algo, int dt, int op, size_t count,
                             char *send, char *recv, int iter)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t ds = shmddp_dtype_size(dt);
  char name[96];
  cname(dt, op, count, algo, name, sizeof name);
  size_t bad_at = 0;
  shmddp_status_t st;

  /* all_reduce, out of place */
  coll_fill(send, count, 0, rank, iter, dt, op);
  memset(recv, 0x5a, count * ds);
  st = shmddp_all_reduce(comm, send, recv, count, dt, op, SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK, "all_reduce %s: %s", name, shmddp_comm_last_error(comm));
  size_t bad = coll_count_errors(recv, count, 0, n, iter, dt, op, &bad_at);
  FAIL_IF(bad, "all_reduce %s: %zu wrong, first at %zu: %g, want %g", name, bad, bad_at,
          coll_load(recv, bad ? bad_at : 0, dt), coll_expected(n, bad_at, iter, dt, op));
  FAIL_IF(!same_everywhere(comm, recv, count * ds), "all_reduce %s: ranks differ", name);
  FAIL_IF(n > 1 && shmddp_comm_last_algo(comm) != SHMDDP_ALGO_DIRECT &&
          shmddp_comm_last_algo(comm) != SHMDDP_ALGO_RING, "all_reduce %s: algorithm %s", name,
          shmddp_algo_name(shmddp_comm_last_algo(comm)));

  /* all_reduce, in place: same bits as out of place */
  uint64_t h = hash_bytes(recv, count * ds);
  coll_fill(send, count, 0, rank, iter, dt, op);
  st = shmddp_all_reduce(comm, send, send, count, dt, op, SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK || hash_bytes(send, count * ds) != h,
          "in-place all_reduce %s differs from out-of-place", name);

  /* reduce_scatter: block r of every rank's send, reduced, lands on rank r */
  coll_fill(send, count * (size_t)n, 0, rank, iter, dt, op);
  st = shmddp_reduce_scatter(comm, send, recv, count, dt, op, SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK, "reduce_scatter %s: %s", name, shmddp_comm_last_error(comm));
  bad = coll_count_errors(recv, count, (size_t)rank * count, n, iter, dt, op, &bad_at);
  FAIL_IF(bad, "reduce_scatter %s: %zu wrong, first at %zu", name, bad, bad_at);

  /* reduce_scatter in place (recv is this rank's block of send) */
  coll_fill(send, count * (size_t)n, 0, rank, iter, dt, op);
  char *mine = send + (size_t)rank * count * ds;
  st = shmddp_reduce_scatter(comm, send, mine, count, dt, op, SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK || memcmp(mine, recv, count * ds) != 0,
          "in-place reduce_scatter %s differs", name);
}

static void check_data_movement(shmddp_comm_t *comm, int dt, size_t count, char *send, char *recv,
                                int iter)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t ds = shmddp_dtype_size(dt);
  shmddp_status_t st;
  /* all_gather, out of place and in place */
  for (int inplace = 0; inplace < 2; inplace++) {
    char *src = inplace ? recv + (size_t)rank * count * ds : send;
    memset(recv, 0x33, count * (size_t)n * ds);
    coll_fill(src, count, 0, rank, iter, dt, SHMDDP_SUM);
    st = shmddp_all_gather(comm, src, recv, count, dt, SHMDDP_HOST);
    FAIL_IF(st != SHMDDP_OK, "all_gather %s count %zu: %s", shmddp_dtype_name(dt), count,
            shmddp_comm_last_error(comm));
    long bad = 0;
    for (int r = 0; r < n; r++)
      for (size_t k = 0; k < count; k++)
        bad += coll_load(recv + ((size_t)r * count + k) * ds, 0, dt) !=
               coll_round(coll_pattern(r, k, iter, dt, SHMDDP_SUM), dt);
    FAIL_IF(bad, "all_gather %s count %zu inplace %d: %ld wrong", shmddp_dtype_name(dt), count,
            inplace, bad);
  }
  /* broadcast from every root */
  for (int root = 0; root < n; root++) {
    coll_fill(send, count, 0, rank, iter, dt, SHMDDP_SUM);
    memset(recv, 0x11, count * ds);
    st = shmddp_broadcast(comm, send, recv, count, dt, root, SHMDDP_HOST);
    long bad = 0;
    for (size_t k = 0; k < count; k++)
      bad += coll_load(recv, k, dt) != coll_round(coll_pattern(root, k, iter, dt, SHMDDP_SUM), dt);
    FAIL_IF(st != SHMDDP_OK || bad, "broadcast %s count %zu root %d: %ld wrong (%s)",
            shmddp_dtype_name(dt), count, root, bad, shmddp_comm_last_error(comm));
  }
  /* reduce to the last rank: only it receives */
  int root = n - 1;
  coll_fill(send, count, 0, rank, iter, dt, SHMDDP_MAX);
  st = shmddp_reduce(comm, send, rank == root ? recv : NULL, count, dt, SHMDDP_MAX, root,
                     SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK, "reduce: %s", shmddp_comm_last_error(comm));
  if (rank == root) {
    size_t bad = coll_count_errors(recv, count, 0, n, iter, dt, SHMDDP_MAX, NULL);
    FAIL_IF(bad, "reduce %s count %zu: %zu wrong", shmddp_dtype_name(dt), count, bad);
  }
}

/* v (a small integer) stored as one element of dtype dt. */
static void store_value(void *p, double v, int dt)
{
  switch (dt) {
  case SHMDDP_F32: memcpy(p, &(float){(float)v}, 4); break;
  case SHMDDP_F64: memcpy(p, &v, 8); break;
  case SHMDDP_F16: memcpy(p, &(uint16_t){f32_to_f16((float)v)}, 2); break;
  case SHMDDP_BF16: memcpy(p, &(uint16_t){f32_to_bf16((float)v)}, 2); break;
  case SHMDDP_F8E4M3: *(uint8_t *)p = f32_to_f8e4m3((float)v); break;
  case SHMDDP_F8E5M2: *(uint8_t *)p = f32_to_f8e5m2((float)v); break;
  case SHMDDP_I32: case SHMDDP_U32: memcpy(p, &(int32_t){(int32_t)v}, 4); break;
  case SHMDDP_I64: case SHMDDP_U64: memcpy(p, &(int64_t){(int64_t)v}, 8); break;
  default: *(int8_t *)p = (int8_t)v; break;
  }
}

/* Element k of block b as rank r sends it: the pattern at index b * count + k. */
static long count_block_errors(const char *buf, int n, size_t count, int dt, int iter,
                               int (*sender)(int b, int rank), size_t (*index)(int b, int rank, size_t count),
                               int rank)
{
  size_t ds = shmddp_dtype_size(dt);
  long bad = 0;
  for (int b = 0; b < n; b++)
    for (size_t k = 0; k < count; k++)
      bad += coll_load(buf + ((size_t)b * count + k) * ds, 0, dt) !=
             coll_round(coll_pattern(sender(b, rank), index(b, rank, count) + k, iter, dt, SHMDDP_SUM), dt);
  return bad;
}

static int from_block(int b, int rank) { (void)rank; return b; }
static size_t my_block(int b, int rank, size_t count) { (void)b; return (size_t)rank * count; }
static size_t first_block(int b, int rank, size_t count) { (void)b; (void)rank; (void)count; return 0; }

/* all_to_all (out of place and in place), gather and scatter from every root (in place on the
 * root too), and the local scaling of pre-multiplied sums, against the patterns. */
static void check_blocks(shmddp_comm_t *comm, int dt, size_t count, char *send, char *recv, int iter)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  size_t ds = shmddp_dtype_size(dt), all = (size_t)n * count;
  const char *name = shmddp_dtype_name(dt);
  for (int inplace = 0; inplace < 2; inplace++) {
    char *dst = inplace ? send : recv;
    coll_fill(send, all, 0, rank, iter, dt, SHMDDP_SUM);
    if (!inplace) memset(recv, 0x5a, all * ds);
    shmddp_status_t st = shmddp_all_to_all(comm, send, dst, count, dt, SHMDDP_HOST);
    long bad = count_block_errors(dst, n, count, dt, iter, from_block, my_block, rank);
    FAIL_IF(st != SHMDDP_OK || bad, "all_to_all %s count %zu inplace %d: %ld wrong (%s)", name,
            count, inplace, bad, shmddp_comm_last_error(comm));
  }
  for (int root = 0; root < n; root++) {
    int inplace = root % 2 == 1; /* odd roots: in place on the root */
    memset(recv, 0x5a, all * ds);
    char *src = inplace && rank == root ? recv + (size_t)root * count * ds : send;
    coll_fill(src, count, 0, rank, iter, dt, SHMDDP_SUM);
    shmddp_status_t st = shmddp_gather(comm, src, rank == root ? recv : NULL, count, dt, root, SHMDDP_HOST);
    long bad = rank == root ? count_block_errors(recv, n, count, dt, iter, from_block, first_block, rank) : 0;
    FAIL_IF(st != SHMDDP_OK || bad, "gather %s count %zu root %d: %ld wrong (%s)", name, count,
            root, bad, shmddp_comm_last_error(comm));
    coll_fill(send, all, 0, rank, iter, dt, SHMDDP_SUM);
    memset(recv, 0x5a, count * ds);
    char *dst = inplace && rank == root ? send + (size_t)root * count * ds : recv;
    st = shmddp_scatter(comm, send, dst, count, dt, root, SHMDDP_HOST);
    bad = 0;
    for (size_t k = 0; k < count; k++)
      bad += coll_load(dst, k, dt) != coll_round(coll_pattern(root, (size_t)rank * count + k, iter, dt, SHMDDP_SUM), dt);
    FAIL_IF(st != SHMDDP_OK || bad, "scatter %s count %zu root %d: %ld wrong (%s)", name, count,
            root, bad, shmddp_comm_last_error(comm));
  }
  /* scale by 3 (exact in every dtype), out of place and in place: each element is x * 3 in the
   * accumulator, rounded once to the dtype */
  unsigned char three[8];
  store_value(three, 3, dt);
  for (int inplace = 0; inplace < 2; inplace++) {
    coll_fill(send, count, 0, rank, iter, dt, SHMDDP_SUM);
    char *dst = inplace ? send : recv;
    shmddp_status_t st = shmddp_scale(comm, send, dst, count, dt, three, 0, SHMDDP_HOST);
    long bad = 0;
    for (size_t k = 0; k < count; k++)
      bad += coll_load(dst, k, dt) != coll_round(coll_round(coll_pattern(rank, k, iter, dt, SHMDDP_SUM), dt) * 3, dt);
    FAIL_IF(st != SHMDDP_OK || bad, "scale %s count %zu inplace %d: %ld wrong (%s)", name, count,
            inplace, bad, shmddp_comm_last_error(comm));
  }
}

static int rank_matrix(shmddp_comm_t *comm, void *arg)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  enum { BIG = 40000 };
  size_t cap = (size_t)BIG * (size_t)n * 8;
  char *send = malloc(cap), *recv = malloc(cap);
  static const size_t small_counts[] = {1, 7, 1000};
  int iter = 0;
  for (int a = 0; a < 2; a++) {
    shmddp_algo_t algo = a ? SHMDDP_ALGO_RING : SHMDDP_ALGO_DIRECT;
    shmddp_comm_set_algo(comm, algo);
    for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++)
      for (int op = 0; op < SHMDDP_NUM_OPS; op++)
        for (size_t c = 0; c < 3; c++)
          check_reductions(comm, algo, dt, op, small_counts[c], send, recv, ++iter);
    /* large: many rounds through the (small) staging buffers */
    check_reductions(comm, algo, SHMDDP_F32, SHMDDP_SUM, BIG, send, recv, ++iter);
    check_reductions(comm, algo, SHMDDP_BF16, SHMDDP_AVG, BIG + 3, send, recv, ++iter);
    check_reductions(comm, algo, SHMDDP_I64, SHMDDP_MAX, BIG - 1, send, recv, ++iter);
  }
  shmddp_comm_set_algo(comm, SHMDDP_ALGO_AUTO);
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    check_data_movement(comm, dt, 1, send, recv, ++iter);
    check_data_movement(comm, dt, 777, send, recv, ++iter);
  }
  check_data_movement(comm, SHMDDP_F32, BIG, send, recv, ++iter);
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    check_blocks(comm, dt, 1, send, recv, ++iter);
    check_blocks(comm, dt, 333, send, recv, ++iter);
  }
  check_blocks(comm, SHMDDP_F32, BIG, send, recv, ++iter); /* many rounds of 64 KiB */
  check_blocks(comm, SHMDDP_F8E5M2, BIG + 5, send, recv, ++iter);
  /* count 0 is a valid no-op on every rank */
  FAIL_IF(shmddp_all_reduce(comm, send, recv, 0, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST) != SHMDDP_OK,
          "count 0: %s", shmddp_comm_last_error(comm));
  FAIL_IF(shmddp_barrier(comm) != SHMDDP_OK, "barrier: %s", shmddp_comm_last_error(comm));
  free(send);
  free(recv);
  return rep->fails[rank].failed ? 1 : 0;
}

static void run_matrix(int n)
{
  /* 64 KiB slots: the large cases take many rounds through every buffer. */
  shmddp_launch_result_t res = test_launch(n, 60, 64 << 10, rank_matrix, NULL);
  char what[32];
  snprintf(what, sizeof what, "world %d", n);
  assert_no_failures(n, what);
  for (int r = 0; r < n; r++) ck_assert_int_gt(rep->fails[r].checks, 400);
  ck_assert_msg(res.exit_code == 0, "world %d: %s", n, res.message);
}

/* The matrix on each of these world sizes: one iteration of the loop test each. */
static const int matrix_worlds[] = {1, 2, 3, 4, 8};
START_TEST(matrix_world) { run_matrix(matrix_worlds[_i]); }
END_TEST

/* The same inputs give the same bits run after run (and whatever the slot size). */
static int rank_fingerprint(shmddp_comm_t *comm, void *arg)
{
  int rank = shmddp_comm_rank(comm);
  enum { COUNT = 100003 };
  float *x = malloc(COUNT * sizeof *x);
  uint64_t *out = arg;
  for (int a = 0; a < 2; a++) {
    shmddp_comm_set_algo(comm, a ? SHMDDP_ALGO_RING : SHMDDP_ALGO_DIRECT);
    for (size_t i = 0; i < COUNT; i++) x[i] = (float)(coll_pattern(rank, i, 3, SHMDDP_F32, SHMDDP_SUM) * 1.37);
    if (shmddp_all_reduce(comm, x, x, COUNT, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST) != SHMDDP_OK) return 1;
    if (rank == 0) out[a] = hash_bytes(x, COUNT * sizeof *x);
  }
  free(x);
  return 0;
}

START_TEST(results_repeat_bit_for_bit)
{
  uint64_t *h = test_shared_alloc(4 * sizeof *h);
  test_launch(4, 60, 64 << 10, rank_fingerprint, h);
  test_launch(4, 60, 1 << 20, rank_fingerprint, h + 2);
  ck_assert_uint_eq(h[0], h[2]); /* direct */
  ck_assert_uint_eq(h[1], h[3]); /* ring: independent of the slot size */
}
END_TEST

/* ---- duplicated communicators: independent call streams (here: one thread each) ---- */

typedef struct {
  shmddp_comm_t *comm;
  int tag, ok;
} stream_job_t;

static void *stream_thread(void *arg)
{
  stream_job_t *j = arg;
  int rank = shmddp_comm_rank(j->comm), n = shmddp_comm_size(j->comm);
  j->ok = 1;
  for (int i = 0; i < 200 && j->ok; i++) {
    double x[3] = {rank + j->tag, i, 1};
    if (shmddp_all_reduce(j->comm, x, x, 3, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST) != SHMDDP_OK) j->ok = 0;
    else j->ok = x[0] == n * (n - 1) / 2.0 + n * j->tag && x[1] == (double)i * n && x[2] == n;
  }
  return NULL;
}

static int rank_dup(shmddp_comm_t *comm, void *arg)
{
  int rank = shmddp_comm_rank(comm);
  shmddp_comm_t *d[3], *extra;
  for (int i = 0; i < 3; i++)
    FAIL_IF(shmddp_comm_dup(comm, &d[i]) != SHMDDP_OK, "dup %d: %s", i, shmddp_comm_last_error(comm));
  FAIL_IF(shmddp_comm_dup(comm, &extra) != SHMDDP_ERR_UNSUPPORTED, "a 4th dup was allowed");
  shmddp_comm_free(d[2]);
  FAIL_IF(shmddp_comm_dup(comm, &d[2]) != SHMDDP_OK, "dup after free: %s", shmddp_comm_last_error(comm));
  /* Two threads, two communicators, no ordering between them. */
  stream_job_t a = {.comm = comm, .tag = 0, .ok = 0}, b = {.comm = d[0], .tag = 100, .ok = 0};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, stream_thread, &a);
  pthread_create(&tb, NULL, stream_thread, &b);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  FAIL_IF(!a.ok || !b.ok, "concurrent communicators gave wrong sums (%d %d)", a.ok, b.ok);
  return rep->fails[rank].failed ? 1 : 0;
}

START_TEST(duplicated_communicators_are_independent)
{
  shmddp_launch_result_t res = test_launch(3, 30, 0, rank_dup, NULL);
  assert_no_failures(3, "duplicated communicators");
  ck_assert_int_eq(res.exit_code, 0);
}
END_TEST

/* ---- mismatched calls ---- */

typedef enum { MM_KIND, MM_COUNT, MM_DTYPE, MM_SIZE_CLASS, MM_ALGO, MM_ZERO, MM_ROOT } mm_case_t;

static int rank_mismatch(shmddp_comm_t *comm, void *arg)
{
  int rank = shmddp_comm_rank(comm);
  mm_case_t c = *(mm_case_t *)arg;
  static float buf[1 << 20];
  shmddp_status_t st;
  int odd = rank == 1;
  switch (c) {
  case MM_KIND:
    st = odd ? shmddp_broadcast(comm, buf, buf, 10, SHMDDP_F32, 0, SHMDDP_HOST)
             : shmddp_all_reduce(comm, buf, buf, 10, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    break;
  case MM_COUNT:
    st = shmddp_all_reduce(comm, buf, buf, odd ? 11 : 10, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    break;
  case MM_DTYPE:
    st = shmddp_all_reduce(comm, buf, buf, 10, odd ? SHMDDP_I32 : SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    break;
  case MM_SIZE_CLASS: /* direct on one rank, ring on the other: different counters */
    st = shmddp_all_reduce(comm, buf, buf, odd ? (1 << 20) : 10, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    break;
  case MM_ALGO:
    shmddp_comm_set_algo(comm, odd ? SHMDDP_ALGO_RING : SHMDDP_ALGO_DIRECT);
    st = shmddp_all_reduce(comm, buf, buf, 1000, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    break;
  case MM_ZERO:
    st = shmddp_all_reduce(comm, buf, buf, odd ? 0 : 10, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    if (st == SHMDDP_OK) st = shmddp_barrier(comm);
    break;
  default:
    st = shmddp_broadcast(comm, buf, buf, 10, SHMDDP_F32, odd ? 1 : 0, SHMDDP_HOST);
    break;
  }
  rep->status[rank] = st;
  snprintf(rep->msg[rank], sizeof rep->msg[rank], "%s", shmddp_comm_last_error(comm));
  return st == SHMDDP_OK ? 0 : 1;
}

/* Every world size of the case is run and every failing rank named before the test fails. No
 * timing is asserted: a mismatch that were only caught by the 30 s timeout would leave the
 * status SHMDDP_ERR_TIMEOUT ("timed out ..."), which the status check rejects. */
START_TEST(mismatched_calls_fail_on_every_rank)
{
  mm_case_t c = (mm_case_t)_i;
  case_failures_t fails;
  cf_init(&fails);
  for (int n = 2; n <= 3; n++) {
    memset(rep, 0, sizeof *rep);
    for (int r = 0; r < n; r++) rep->status[r] = -1; /* not reported */
    shmddp_launch_result_t res = test_launch(n, 30, 0, rank_mismatch, &c);
    CF_CHECK(&fails, res.exit_code != 0, "case %d world %d: the run succeeded", c, n);
    for (int r = 0; r < n; r++) {
      CF_CHECK(&fails, rep->status[r] == SHMDDP_ERR_MISMATCH || rep->status[r] == SHMDDP_ERR_ABORTED,
               "case %d world %d rank %d: status %d: %s", c, n, r, rep->status[r], rep->msg[r]);
      CF_CHECK(&fails, strstr(rep->msg[r], "rank") != NULL && !strstr(rep->msg[r], "timed out"),
               "case %d world %d rank %d: %s", c, n, r, rep->msg[r]);
    }
    /* at least one rank names the mismatch itself */
    int named = 0;
    for (int r = 0; r < n; r++) named += strstr(rep->msg[r], "mismatch") != NULL ||
                                         strstr(rep->msg[r], "algorithm") != NULL;
    CF_CHECK(&fails, named > 0, "case %d world %d: no rank explains the mismatch: %s", c, n,
             rep->msg[0]);
  }
  CF_ASSERT_NONE(&fails, "mismatched calls");
}
END_TEST

/* ---- bad arguments: local errors with messages; the rank can go on afterwards ---- */

static int rank_bad_args(shmddp_comm_t *comm, void *arg)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  float x[4] = {1, 2, 3, 4}, y[16];
  struct { shmddp_status_t st, want; const char *needle; } cases[16];
  int k = 0;
#define CASE(call, w, s) do { cases[k].st = (call); cases[k].want = (w); cases[k].needle = (s); \
    FAIL_IF(cases[k].st != cases[k].want || !strstr(shmddp_comm_last_error(comm), cases[k].needle), \
            "case %d: status %d (want %d), message '%s' lacks '%s'", k, cases[k].st, cases[k].want, \
            shmddp_comm_last_error(comm), cases[k].needle); k++; } while (0)
  CASE(shmddp_all_reduce(comm, NULL, y, 4, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST), SHMDDP_ERR_INVALID, "send buffer is NULL");
  CASE(shmddp_all_reduce(comm, x, NULL, 4, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST), SHMDDP_ERR_INVALID, "recv buffer is NULL");
  CASE(shmddp_all_reduce(comm, x, y, 4, (shmddp_dtype_t)99, SHMDDP_SUM, SHMDDP_HOST), SHMDDP_ERR_INVALID, "unknown dtype 99");
  CASE(shmddp_all_reduce(comm, x, y, 4, SHMDDP_F32, (shmddp_op_t)-3, SHMDDP_HOST), SHMDDP_ERR_INVALID, "unknown op -3");
  CASE(shmddp_all_reduce(comm, x, y, SIZE_MAX / 2, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST), SHMDDP_ERR_INVALID, "overflows");
  CASE(shmddp_all_gather(comm, x, y, SIZE_MAX / 16, SHMDDP_F64, SHMDDP_HOST), SHMDDP_ERR_INVALID, "overflows");
  CASE(shmddp_broadcast(comm, x, y, 4, SHMDDP_F32, n, SHMDDP_HOST), SHMDDP_ERR_INVALID, "root");
  CASE(shmddp_reduce(comm, x, y, 4, SHMDDP_F32, SHMDDP_SUM, -1, SHMDDP_HOST), SHMDDP_ERR_INVALID, "root -1");
  CASE(shmddp_all_reduce(comm, x, y, 4, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)0x1), SHMDDP_ERR_UNSUPPORTED, "stream");
  CASE(shmddp_comm_set_algo(comm, (shmddp_algo_t)42), SHMDDP_ERR_INVALID, "algorithm");
  FAIL_IF(shmddp_all_reduce(NULL, x, y, 4, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST) != SHMDDP_ERR_INVALID, "NULL comm accepted");
  /* the bad calls consumed nothing: a good call still lines up across ranks */
  shmddp_status_t st = shmddp_all_reduce(comm, x, y, 4, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
  FAIL_IF(st != SHMDDP_OK || y[3] != 4.0f * n, "good call after bad ones: %s", shmddp_comm_last_error(comm));
  FAIL_IF(strcmp(shmddp_strerror(SHMDDP_ERR_TIMEOUT), "timed out waiting for a peer rank") != 0 ||
          strcmp(shmddp_strerror((shmddp_status_t)1000), "unknown status") != 0, "strerror");
  return rep->fails[rank].failed ? 1 : 0;
#undef CASE
}

START_TEST(bad_arguments_are_reported)
{
  test_launch(2, 30, 0, rank_bad_args, NULL);
  assert_no_failures(2, "bad arguments");
}
END_TEST

START_TEST(names_round_trip)
{
  for (int d = 0; d < SHMDDP_NUM_DTYPES; d++) ck_assert_int_eq(shmddp_dtype_parse(shmddp_dtype_name(d)), d);
  for (int o = 0; o < SHMDDP_NUM_OPS; o++) ck_assert_int_eq(shmddp_op_parse(shmddp_op_name(o)), o);
  for (int a = 0; a < SHMDDP_NUM_ALGOS; a++) ck_assert_int_eq(shmddp_algo_parse(shmddp_algo_name(a)), a);
  ck_assert_int_eq(shmddp_dtype_parse("f128"), -1);
  ck_assert_int_eq(shmddp_dtype_size((shmddp_dtype_t)77), 0);
}
END_TEST

static Suite *collectives_suite(const suite_env_t *env)
{
  Suite *s = suite_create("collectives");
  TCase *tc = SUITE_CASE(s, "matrix", results_repeat_bit_for_bit,
                         duplicated_communicators_are_independent);
  tcase_add_loop_test(tc, matrix_world, 0, (int)(sizeof matrix_worlds / sizeof *matrix_worlds));
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 240);
  tc = tcase_create("errors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_loop_test(tc, mismatched_calls_fail_on_every_rank, MM_KIND, MM_ROOT + 1);
  tcase_add_test(tc, bad_arguments_are_reported);
  tcase_add_test(tc, names_round_trip);
  suite_add_tcase(s, tc);
  return s;
}

SUITE_MAIN("check_collectives", collectives_suite, SUITE_CPU_ONLY)
