/* check_join_cuda.c — communicators joined by id with device buffers: ranks as processes this
 * suite starts (one GPU each, rank % visible GPUs) and as threads of one process (peers in one
 * process use each other's pointers: CUDA IPC cannot open a handle of its own process). Every
 * collective, dtype and op against the f64 reference at sizes that take each device algorithm;
 * a SIGKILLed rank and an abort from another thread end a kernel that waits for a peer. SKIP
 * (77) without a GPU.
 *
 * CUDA is never initialised in the suite's main process: the GPU count is asked in a child, and
 * each test (forked by Check) or worker (exec'd) initialises its own. */
#include "config.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/timeutil.h"
#include "tests/join_harness.h"
#include "shmddp.h"
#include "shmddp_cuda.h"
#include "tests/suite_main.h"
#include "tools/coll_check.h"

static int ngpus;

/* A pageable cudaMemcpy to the device may return before the data has landed, and nothing
 * orders it before a kernel on a non-blocking stream: copy on the collective's stream. */
static void upload(void *dst, const void *src, size_t bytes, cudaStream_t st)
{
  cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st);
  cudaStreamSynchronize(st);
}

/* Device buffers and their host copies; every call is checked after a sync. */
static void run_matrix(shmddp_comm_t *comm, tally_t *t, int big)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  /* 1 and 1000: one-shot; 300000 f32 (1.2 MB): two-shot through scratch; 3M (12 MB): two-shot
   * on the users' buffers (a host rendezvous per call) */
  size_t counts[] = {1, 1000, 300000, 3000000};
  int ncounts = big ? 4 : 3;
  size_t cap = 3000000 * (size_t)n * 8;
  char *hs = malloc(cap), *hr = malloc(cap);
  void *ds = NULL, *dr = NULL;
  cudaStream_t st;
  if (cudaMalloc(&ds, cap) != cudaSuccess || cudaMalloc(&dr, cap) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
    record(t, 1, "cannot allocate device buffers");
    return;
  }
  shmddp_stream_t s = (shmddp_stream_t)st;
  int iter = 0;
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    size_t dsz = shmddp_dtype_size(dt);
    const char *dn = shmddp_dtype_name(dt);
    for (int op = 0; op < SHMDDP_NUM_OPS; op++)
      for (int c = 0; c < ncounts; c++) {
        size_t count = counts[c];
        if (count > 1000 && op != SHMDDP_SUM && op != SHMDDP_MAX) continue; /* time */
        iter++;
        coll_fill(hs, count * (size_t)n, 0, rank, iter, dt, op);
        upload(ds, hs, count * (size_t)n * dsz, st);
        shmddp_status_t e = shmddp_all_reduce(comm, ds, dr, count, dt, op, s);
        if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
        cudaMemcpy(hr, dr, count * dsz, cudaMemcpyDeviceToHost);
        size_t at = 0, bad = e ? count : coll_count_errors(hr, count, 0, n, iter, dt, op, &at);
        record(t, e || bad, "all_reduce %s/%s/%zu: %s %zu wrong (first %zu)", dn,
               shmddp_op_name(op), count, e ? shmddp_comm_last_error(comm) : "", bad, at);
        e = shmddp_reduce_scatter(comm, ds, dr, count, dt, op, s);
        if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
        cudaMemcpy(hr, dr, count * dsz, cudaMemcpyDeviceToHost);
        bad = e ? count : coll_count_errors(hr, count, (size_t)rank * count, n, iter, dt, op, &at);
        record(t, e || bad, "reduce_scatter %s/%s/%zu: %s %zu wrong", dn, shmddp_op_name(op),
               count, e ? shmddp_comm_last_error(comm) : "", bad);
        int root = c % n;
        e = shmddp_reduce(comm, ds, rank == root ? dr : NULL, count, dt, op, root, s);
        if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
        if (rank == root) cudaMemcpy(hr, dr, count * dsz, cudaMemcpyDeviceToHost);
        bad = e ? count : rank == root ? coll_count_errors(hr, count, 0, n, iter, dt, op, &at) : 0;
        record(t, e || bad, "reduce %s/%s/%zu root %d: %zu wrong", dn, shmddp_op_name(op), count,
               root, bad);
      }
    for (int c = 0; c < ncounts; c++) {
      size_t count = counts[c];
      iter++;
      coll_fill(hs, count, 0, rank, iter, dt, SHMDDP_SUM);
      upload(ds, hs, count * dsz, st);
      shmddp_status_t e = shmddp_all_gather(comm, ds, dr, count, dt, s);
      if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
      cudaMemcpy(hr, dr, count * (size_t)n * dsz, cudaMemcpyDeviceToHost);
      long bad = 0;
      for (int q = 0; q < n && !e; q++)
        for (size_t k = 0; k < count; k++)
          bad += coll_load(hr + ((size_t)q * count + k) * dsz, 0, dt) !=
                 coll_round(coll_pattern(q, k, iter, dt, SHMDDP_SUM), dt);
      record(t, e || bad, "all_gather %s/%zu: %ld wrong", dn, count, bad);
      int root = n - 1 - c % n;
      e = shmddp_broadcast(comm, ds, dr, count, dt, root, s);
      if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
      cudaMemcpy(hr, dr, count * dsz, cudaMemcpyDeviceToHost);
      bad = 0;
      for (size_t k = 0; k < count && !e; k++)
        bad += coll_load(hr, k, dt) != coll_round(coll_pattern(root, k, iter, dt, SHMDDP_SUM), dt);
      record(t, e || bad, "broadcast %s/%zu root %d: %ld wrong", dn, count, root, bad);
    }
  }
  /* Buffers at odd byte addresses (a tensor one element into its allocation): 1-byte types. */
  static const shmddp_dtype_t bytes_types[] = {SHMDDP_I8, SHMDDP_U8};
  for (int b = 0; b < 2; b++)
    for (size_t count = 7; count <= 1001; count += 994) {
      shmddp_dtype_t dt = bytes_types[b];
      iter++;
      coll_fill(hs, count, 0, rank, iter, dt, SHMDDP_SUM);
      upload((char *)ds + 1, hs, count, st);
      shmddp_status_t e = shmddp_all_reduce(comm, (char *)ds + 1, (char *)dr + 1, count, dt, SHMDDP_SUM, s);
      if (e == SHMDDP_OK) e = shmddp_cuda_sync(comm, s);
      cudaMemcpy(hr, (char *)dr + 1, count, cudaMemcpyDeviceToHost);
      size_t bad = e ? count : coll_count_errors(hr, count, 0, n, iter, dt, SHMDDP_SUM, NULL);
      record(t, e || bad, "all_reduce %s/%zu at an odd address: %s %zu wrong",
             shmddp_dtype_name(dt), count, e ? shmddp_comm_last_error(comm) : "", bad);
    }
  cudaStreamDestroy(st);
  cudaFree(ds);
  cudaFree(dr);
  free(hs);
  free(hr);
}

/* ---- worker mode ---- */

static int worker_main(const char *scenario)
{
  worker_env_t w;
  if (worker_env(&w) != 0) return 90;
  const char *dir = w.dir;
  int rank = w.rank, nranks = w.nranks;
  shmddp_unique_id_t id = w.id;
  int count = 0;
  cudaGetDeviceCount(&count);
  cudaSetDevice(rank % (count > 0 ? count : 1));
  shmddp_comm_t *comm = NULL;
  char text[2048];
  shmddp_status_t st = shmddp_comm_init_rank(&comm, nranks, id, rank); /* the current GPU */
  if (st != SHMDDP_OK) {
    snprintf(text, sizeof text, "init %d %s", (int)st, shmddp_last_error());
    write_file(dir, rank, "result", text);
    return 10;
  }
  write_file(dir, rank, "joined", "");
  if (strcmp(scenario, "matrix") == 0) {
    tally_t t = {0};
    run_matrix(comm, &t, 1);
    snprintf(text, sizeof text, "matrix %ld %ld p2p=%d %s", t.checks, t.failures,
             shmddp_cuda_p2p(comm), t.fails);
    write_file(dir, rank, "result", text);
    shmddp_comm_destroy(comm);
    return t.failures ? 1 : 0;
  }
  if (strcmp(scenario, "victim") == 0)
    for (;;) pause();
  if (strcmp(scenario, "survivor") == 0) {
    float *d = NULL;
    cudaMalloc((void **)&d, 4 << 20);
    cudaMemset(d, 0, 4 << 20);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    write_file(dir, rank, "calling", "");
    /* 16 KiB: one-shot, no host rendezvous: the kernel itself waits for the dead peer. */
    st = shmddp_all_reduce(comm, d, d, 4096, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)s);
    if (st == SHMDDP_OK) st = shmddp_cuda_sync(comm, (shmddp_stream_t)s);
    double t_ret = shm_now();
    snprintf(text, sizeof text, "survivor %d %.6f %s", (int)st, t_ret, shmddp_comm_last_error(comm));
    write_file(dir, rank, "result", text);
    shmddp_comm_destroy(comm);
    return 0;
  }
  return 91;
}

/* ---- harness ---- */

START_TEST(processes_with_device_buffers)
{
  group_t g;
  group_new(&g);
  pid_t p[2] = {spawn_rank(&g, "matrix", 2, 0, "120"), spawn_rank(&g, "matrix", 2, 1, "120")};
  for (int r = 0; r < 2; r++) {
    int ws = wait_exit(p[r]);
    const char *res = wait_file(&g, r, "result");
    long checks = 0, failures = -1;
    sscanf(res, "matrix %ld %ld", &checks, &failures);
    printf("processes, rank %d: %s\n", r, res);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && failures == 0, "rank %d: %s", r, res);
  }
  group_done(&g);
}
END_TEST

START_TEST(sigkilled_rank_ends_a_waiting_kernel)
{
  group_t g;
  group_new(&g);
  pid_t s0 = spawn_rank(&g, "survivor", 2, 0, "120");
  pid_t v = spawn_rank(&g, "victim", 2, 1, "120");
  wait_file(&g, 1, "joined");
  wait_file(&g, 0, "calling");
  double t_kill = shm_now();
  kill(v, SIGKILL);
  wait_exit(v);
  wait_exit(s0);
  const char *res = wait_file(&g, 0, "result");
  int st = -1;
  double t_ret = 0;
  sscanf(res, "survivor %d %lf", &st, &t_ret);
  printf("survivor: %s (%.3f s after the kill)\n", res, t_ret - t_kill);
  ck_assert_msg(st == SHMDDP_ERR_ABORTED && strstr(res, "rank 1"), "%s", res);
  ck_assert_msg(t_ret - t_kill < 2.0, "returned %.2f s after the kill", t_ret - t_kill);
  group_done(&g);
}
END_TEST

typedef struct {
  shmddp_unique_id_t id;
  int n, rank, device;
  shmddp_comm_t *comm;
  shmddp_status_t st;
  char err[512];
  tally_t t;
  int matrix;
} trank_t;

static void *thread_rank(void *arg)
{
  trank_t *t = arg;
  cudaSetDevice(t->device);
  t->st = shmddp_comm_init_rank(&t->comm, t->n, t->id, t->rank);
  snprintf(t->err, sizeof t->err, "%s", shmddp_last_error());
  if (t->st == SHMDDP_OK && t->matrix) run_matrix(t->comm, &t->t, 0);
  return NULL;
}

static void run_threads(trank_t *t, int n, int spread, int matrix)
{
  shmddp_unique_id_t id;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  pthread_t th[8];
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = id;
    t[r].n = n;
    t[r].rank = r;
    t[r].device = spread ? r % ngpus : 0;
    t[r].matrix = matrix;
    ck_assert_int_eq(pthread_create(&th[r], NULL, thread_rank, &t[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) ck_assert_msg(t[r].st == SHMDDP_OK, "rank %d: %s", r, t[r].err);
}

static void check_threads(int spread)
{
  trank_t t[2];
  run_threads(t, 2, spread, 1);
  for (int r = 0; r < 2; r++) {
    printf("threads (%s), rank %d: %ld checks, %ld failed, p2p=%d\n",
           spread ? "one GPU each" : "one GPU", r, t[r].t.checks, t[r].t.failures,
           shmddp_cuda_p2p(t[r].comm));
    ck_assert_msg(t[r].t.failures == 0, "rank %d: %s", r, t[r].t.fails);
  }
  for (int r = 0; r < 2; r++) shmddp_comm_destroy(t[r].comm);
}

START_TEST(threads_on_one_gpu) { check_threads(0); }
END_TEST
START_TEST(threads_one_gpu_each) { check_threads(1); }
END_TEST

typedef struct {
  shmddp_comm_t *comm;
  int device;
  volatile int launched;
  shmddp_status_t st;
} kwait_t;

static void *launch_and_sync(void *arg)
{
  kwait_t *k = arg;
  cudaSetDevice(k->device);
  float *d = NULL;
  cudaMalloc((void **)&d, 16384);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  /* Raised before the call: on ranks that share a GPU the call itself waits for the peers on
   * the host (the co-located path), so it may never return to raise it afterwards. */
  k->launched = 1;
  k->st = shmddp_all_reduce(k->comm, d, d, 4096, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)s);
  if (k->st == SHMDDP_OK) k->st = shmddp_cuda_sync(k->comm, (shmddp_stream_t)s);
  return NULL;
}

START_TEST(abort_from_a_thread_ends_a_waiting_kernel)
{
  trank_t t[2];
  run_threads(t, 2, 0, 0);
  /* Rank 0's collective waits for rank 1, which never calls: in a kernel (the in-kernel
   * algorithms) or on the host (ranks sharing a GPU meet there). Only the abort can end it; it may
   * also come before the call has started waiting, and the call must see it then too. */
  kwait_t k = {.comm = t[0].comm, .device = t[0].device};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, launch_and_sync, &k), 0);
  while (!k.launched) sched_yield();
  double t0 = shm_now();
  ck_assert_int_eq(shmddp_comm_abort(t[1].comm), SHMDDP_OK);
  pthread_join(th, NULL);
  printf("abort: the waiting kernel ended %.3f s after shmddp_comm_abort\n", shm_now() - t0);
  ck_assert_int_eq(k.st, SHMDDP_ERR_ABORTED);
  ck_assert(shm_now() - t0 < 2.0);
  shmddp_comm_destroy(t[0].comm);
  shmddp_comm_destroy(t[1].comm);
}
END_TEST

static Suite *join_cuda_suite(const suite_env_t *env)
{
  ngpus = env->gpus;
  Suite *s = suite_create("join_cuda");
  TCase *tc = tcase_create("gpu");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, processes_with_device_buffers);
  tcase_add_test(tc, sigkilled_rank_ends_a_waiting_kernel);
  tcase_add_test(tc, threads_on_one_gpu);
  if (suite_gpu_cases(env, 2, 1, "threads_one_gpu_each")) tcase_add_test(tc, threads_one_gpu_each);
  tcase_add_test(tc, abort_from_a_thread_ends_a_waiting_kernel);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  const char *scenario = getenv("SHMDDP_TEST_WORKER");
  if (scenario) return worker_main(scenario);
  return suite_main("check_join_cuda", join_cuda_suite, 1);
}
