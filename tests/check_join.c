/* check_join.c — communicators joined by a unique id, without shmddp_launch: ranks as separate
 * processes that this harness starts itself (fork + exec of this program in worker mode, the id
 * in the environment, as torchrun or mpirun would pass it) and as threads of one process. All
 * collectives of every dtype and op against the f64 reference; two groups at once; a SIGKILLed
 * rank; a rank that never comes; abort from another thread; bad arguments on every rank;
 * /dev/shm clean after each.
 *
 * Waits are for events (a file a worker writes, a process's exit, a flag); deadlines only bound
 * a hang. The one time bound asserted, "a dead peer is reported within 2 s", is what the library
 * promises: the watcher sleeps in poll() on the peer's pidfd and is woken by the death itself. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
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
#include "tests/suite_main.h"
#include "tools/coll_check.h"

/* ---------------------------------------------------------------------------------------------
 * The collectives matrix one rank runs; every failing case is listed in fails. */

static void run_matrix(shmddp_comm_t *comm, tally_t *t)
{
  int rank = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  static const size_t counts[] = {1, 1000, 70000}; /* 70000 f64: many rounds, ring in auto */
  size_t cap = 70000 * (size_t)n * 8;
  char *send = malloc(cap), *recv = malloc(cap);
  int iter = 0;
  for (int dt = 0; dt < SHMDDP_NUM_DTYPES; dt++) {
    size_t ds = shmddp_dtype_size(dt);
    const char *dn = shmddp_dtype_name(dt);
    for (int op = 0; op < SHMDDP_NUM_OPS; op++)
      for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t count = counts[c];
        const char *on = shmddp_op_name(op);
        iter++;
        coll_fill(send, count, 0, rank, iter, dt, op);
        shmddp_status_t st = shmddp_all_reduce(comm, send, recv, count, dt, op, SHMDDP_HOST);
        size_t at = 0, bad = st == SHMDDP_OK ? coll_count_errors(recv, count, 0, n, iter, dt, op, &at) : count;
        record(t, st != SHMDDP_OK || bad, "all_reduce %s/%s/%zu: %s, %zu wrong", dn, on, count,
               shmddp_strerror(st), bad);
        coll_fill(send, count * (size_t)n, 0, rank, iter, dt, op);
        st = shmddp_reduce_scatter(comm, send, recv, count, dt, op, SHMDDP_HOST);
        bad = st == SHMDDP_OK ? coll_count_errors(recv, count, (size_t)rank * count, n, iter, dt, op, &at) : count;
        record(t, st != SHMDDP_OK || bad, "reduce_scatter %s/%s/%zu: %s, %zu wrong", dn, on,
               count, shmddp_strerror(st), bad);
        int root = (int)(c % (size_t)n);
        coll_fill(send, count, 0, rank, iter, dt, op);
        st = shmddp_reduce(comm, send, rank == root ? recv : NULL, count, dt, op, root, SHMDDP_HOST);
        bad = st == SHMDDP_OK && rank == root ? coll_count_errors(recv, count, 0, n, iter, dt, op, &at) : 0;
        record(t, st != SHMDDP_OK || bad, "reduce %s/%s/%zu root %d: %s, %zu wrong", dn, on,
               count, root, shmddp_strerror(st), bad);
      }
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      size_t count = counts[c];
      iter++;
      coll_fill(send, count, 0, rank, iter, dt, SHMDDP_SUM);
      shmddp_status_t st = shmddp_all_gather(comm, send, recv, count, dt, SHMDDP_HOST);
      long bad = 0;
      for (int r = 0; r < n && st == SHMDDP_OK; r++)
        for (size_t k = 0; k < count; k++)
          bad += coll_load(recv + ((size_t)r * count + k) * ds, 0, dt) !=
                 coll_round(coll_pattern(r, k, iter, dt, SHMDDP_SUM), dt);
      record(t, st != SHMDDP_OK || bad, "all_gather %s/%zu: %s, %ld wrong", dn, count,
             shmddp_strerror(st), bad);
      int root = n - 1 - (int)(c % (size_t)n);
      memset(recv, 0x5a, count * ds);
      st = shmddp_broadcast(comm, send, recv, count, dt, root, SHMDDP_HOST);
      bad = 0;
      for (size_t k = 0; k < count && st == SHMDDP_OK; k++)
        bad += coll_load(recv, k, dt) != coll_round(coll_pattern(root, k, iter, dt, SHMDDP_SUM), dt);
      record(t, st != SHMDDP_OK || bad, "broadcast %s/%zu root %d: %s, %ld wrong", dn, count,
             root, shmddp_strerror(st), bad);
    }
  }
  record(t, shmddp_barrier(comm) != SHMDDP_OK, "barrier: %s", shmddp_comm_last_error(comm));
  free(send);
  free(recv);
}

/* ---------------------------------------------------------------------------------------------
 * Worker mode: this program started by the harness as one rank (SHMDDP_TEST_WORKER=scenario). */

static int worker_main(const char *scenario)
{
  worker_env_t w;
  int bad_id = worker_env(&w);
  const char *dir = w.dir;
  int rank = w.rank, nranks = w.nranks;
  shmddp_unique_id_t id = w.id;
  if (bad_id) {
    write_file(dir, rank, "result", shmddp_last_error());
    return 90;
  }
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = SHMDDP_DEVICE_NONE;
  cfg.slot_bytes = 64 << 10; /* small slots: large calls take many rounds */
  shmddp_comm_t *comm = NULL;
  char text[2048];
  shmddp_status_t st = shmddp_comm_init_rank_config(&comm, nranks, id, rank, &cfg);
  if (st != SHMDDP_OK) {
    snprintf(text, sizeof text, "init %d %s", (int)st, shmddp_last_error());
    write_file(dir, rank, "result", text);
    return 10 + (int)st;
  }
  write_file(dir, rank, "joined", "");
  if (strcmp(scenario, "matrix") == 0) {
    tally_t t = {0};
    run_matrix(comm, &t);
    snprintf(text, sizeof text, "matrix %ld %ld %s", t.checks, t.failures, t.fails);
    write_file(dir, rank, "result", text);
    shmddp_comm_destroy(comm);
    return t.failures ? 1 : 0;
  }
  if (strcmp(scenario, "victim") == 0) {
    for (;;) pause(); /* until SIGKILL */
  }
  if (strcmp(scenario, "survivor") == 0) {
    float x = 1;
    write_file(dir, rank, "calling", "");
    st = shmddp_all_reduce(comm, &x, &x, 1, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
    double t_ret = shm_now();
    shmddp_status_t later = shmddp_barrier(comm);
    snprintf(text, sizeof text, "survivor %d %d %.6f %s", (int)st, (int)later, t_ret,
             shmddp_comm_last_error(comm));
    write_file(dir, rank, "result", text);
    shmddp_comm_destroy(comm);
    return 0;
  }
  return 91;
}

/* ---------------------------------------------------------------------------------------------
 * Harness side. */

static void check_process_matrix(int n)
{
  group_t g;
  group_new(&g);
  pid_t pids[SHMDDP_MAX_RANKS];
  for (int r = n - 1; r >= 0; r--) pids[r] = spawn_rank(&g, "matrix", n, r, "60");
  for (int r = 0; r < n; r++) {
    int ws = wait_exit(pids[r]);
    const char *res = wait_file(&g, r, "result");
    long checks = 0, failures = -1;
    sscanf(res, "matrix %ld %ld", &checks, &failures);
    ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && failures == 0,
                  "world %d rank %d: %s", n, r, res);
    ck_assert_int_gt(checks, 100);
  }
  group_done(&g);
}

/* Process groups of 2 and 3 ranks (loop test). */
START_TEST(processes_run_every_collective) { check_process_matrix(2 + _i); }
END_TEST

START_TEST(two_groups_at_once_do_not_interfere)
{
  group_t a, b;
  group_new(&a);
  group_new(&b);
  pid_t pa[2], pb[2];
  /* Interleaved starts: both groups rendezvous and run at the same time. */
  for (int r = 0; r < 2; r++) {
    pa[r] = spawn_rank(&a, "matrix", 2, r, "60");
    pb[r] = spawn_rank(&b, "matrix", 2, 1 - r, "60");
  }
  for (int r = 0; r < 2; r++) {
    int wa = wait_exit(pa[r]), wb = wait_exit(pb[r]);
    ck_assert_msg(WIFEXITED(wa) && WEXITSTATUS(wa) == 0, "group a: %s", wait_file(&a, r, "result"));
    ck_assert_msg(WIFEXITED(wb) && WEXITSTATUS(wb) == 0, "group b: %s",
                  wait_file(&b, 1 - r, "result"));
  }
  group_done(&a);
  group_done(&b);
}
END_TEST

START_TEST(sigkilled_rank_is_named_within_2s)
{
  group_t g;
  group_new(&g);
  pid_t s0 = spawn_rank(&g, "survivor", 3, 0, "60");
  pid_t victim = spawn_rank(&g, "victim", 3, 2, "60");
  pid_t s1 = spawn_rank(&g, "survivor", 3, 1, "60");
  /* Kill once the survivors are about to wait for it (or already do: either way their call
   * cannot complete without rank 2, so it must end in ABORTED). */
  wait_file(&g, 2, "joined");
  wait_file(&g, 0, "calling");
  wait_file(&g, 1, "calling");
  double t_kill = shm_now();
  ck_assert_int_eq(kill(victim, SIGKILL), 0);
  wait_exit(victim);
  pid_t surv[2] = {s0, s1};
  for (int r = 0; r < 2; r++) {
    int ws = wait_exit(surv[r]);
    ck_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    const char *res = wait_file(&g, r, "result");
    int st = -1, later = -1;
    double t_ret = 0;
    sscanf(res, "survivor %d %d %lf", &st, &later, &t_ret);
    ck_assert_msg(st == SHMDDP_ERR_ABORTED && later == SHMDDP_ERR_ABORTED, "rank %d: %s", r, res);
    ck_assert_msg(strstr(res, "rank 2") != NULL, "rank %d's error does not name rank 2: %s", r, res);
    ck_assert_msg(t_ret - t_kill < 2.0, "rank %d returned %.2f s after the kill", r, t_ret - t_kill);
  }
  group_done(&g);
}
END_TEST

START_TEST(missing_rank_times_out_named)
{
  group_t g;
  group_new(&g);
  pid_t p0 = spawn_rank(&g, "matrix", 3, 0, "1");
  pid_t p1 = spawn_rank(&g, "matrix", 3, 1, "1");
  pid_t pids[2] = {p0, p1};
  for (int r = 0; r < 2; r++) {
    wait_exit(pids[r]);
    const char *res = wait_file(&g, r, "result");
    int st = -1;
    sscanf(res, "init %d", &st);
    ck_assert_msg(st == SHMDDP_ERR_TIMEOUT, "rank %d: %s", r, res);
    ck_assert_msg(strstr(res, "rank(s) 2") != NULL, "rank %d does not name rank 2: %s", r, res);
  }
  group_done(&g);
}
END_TEST

/* ---------------------------------------------------------------------------------------------
 * Threads as ranks. */

typedef struct {
  shmddp_unique_id_t id;
  int nranks, rank;
  shmddp_comm_config_t cfg;
  shmddp_status_t init_st;
  char init_err[512];
  shmddp_comm_t *comm;
  tally_t tally;
  int run_matrix;
} trank_t;

static void *thread_rank(void *arg)
{
  trank_t *t = arg;
  t->init_st = shmddp_comm_init_rank_config(&t->comm, t->nranks, t->id, t->rank, &t->cfg);
  snprintf(t->init_err, sizeof t->init_err, "%s", shmddp_last_error());
  if (t->init_st == SHMDDP_OK && t->run_matrix) {
    run_matrix(t->comm, &t->tally);
    shmddp_comm_destroy(t->comm);
    t->comm = NULL;
  }
  return NULL;
}

static void thread_group(trank_t *t, int n, const shmddp_unique_id_t *id, double timeout_s,
                         int matrix)
{
  for (int r = 0; r < n; r++) {
    memset(&t[r], 0, sizeof t[r]);
    t[r].id = *id;
    t[r].nranks = n;
    t[r].rank = r;
    t[r].cfg = (shmddp_comm_config_t)SHMDDP_COMM_CONFIG_INIT;
    t[r].cfg.device = SHMDDP_DEVICE_NONE;
    t[r].cfg.timeout_s = timeout_s;
    t[r].cfg.slot_bytes = 64 << 10;
    t[r].run_matrix = matrix;
  }
}

static void run_threads(trank_t *t, int n)
{
  pthread_t th[SHMDDP_MAX_RANKS];
  for (int r = 0; r < n; r++) ck_assert_int_eq(pthread_create(&th[r], NULL, thread_rank, &t[r]), 0);
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}

static void id_segment_gone(const shmddp_unique_id_t *id)
{
  char name[96], path[128];
  coll_id_segment_name(id, name, sizeof name);
  snprintf(path, sizeof path, "/dev/shm%s", name);
  struct stat sb;
  ck_assert_msg(stat(path, &sb) != 0 && errno == ENOENT, "%s was left behind", path);
}

/* n thread ranks that join a fresh id (each running the matrix when asked), the wait for each
 * bounded at 60 s: every one must have joined. */
static void join_threads(trank_t *t, int n, shmddp_unique_id_t *id, int matrix)
{
  ck_assert_int_eq(shmddp_get_unique_id(id), SHMDDP_OK);
  thread_group(t, n, id, 60, matrix);
  run_threads(t, n);
  for (int r = 0; r < n; r++)
    ck_assert_msg(t[r].init_st == SHMDDP_OK, "rank %d: %s", r, t[r].init_err);
}

static void check_thread_matrix(int n)
{
  shmddp_unique_id_t id;
  trank_t t[SHMDDP_MAX_RANKS];
  join_threads(t, n, &id, 1);
  for (int r = 0; r < n; r++) {
    ck_assert_msg(t[r].tally.failures == 0, "threads %d, rank %d: %ld of %ld failed: %s", n, r,
                  t[r].tally.failures, t[r].tally.checks, t[r].tally.fails);
    ck_assert_int_gt(t[r].tally.checks, 100);
  }
  id_segment_gone(&id);
}

/* Thread groups of 1, 2 and 4 ranks (loop test). */
START_TEST(threads_run_every_collective) { check_thread_matrix(1 << _i); }
END_TEST

typedef struct {
  shmddp_comm_t *comm;
  volatile int calling;
  shmddp_status_t st;
  double t_ret;
} blocked_t;

static void *call_and_block(void *arg)
{
  blocked_t *b = arg;
  float x = 1;
  b->calling = 1;
  b->st = shmddp_all_reduce(b->comm, &x, &x, 1, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
  b->t_ret = shm_now();
  return NULL;
}

START_TEST(abort_from_another_thread_unblocks_a_call)
{
  shmddp_unique_id_t id;
  trank_t t[2];
  join_threads(t, 2, &id, 0);
  /* Rank 0 calls an all_reduce rank 1 never joins: it can only end by the abort. */
  blocked_t b = {.comm = t[0].comm};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, call_and_block, &b), 0);
  while (!b.calling) sched_yield();
  double t_abort = shm_now();
  ck_assert_int_eq(shmddp_comm_abort(t[0].comm), SHMDDP_OK);
  pthread_join(th, NULL);
  ck_assert_int_eq(b.st, SHMDDP_ERR_ABORTED);
  ck_assert_msg(b.t_ret - t_abort < 2.0, "the call returned %.2f s after the abort",
                b.t_ret - t_abort);
  ck_assert_ptr_nonnull(strstr(shmddp_comm_last_error(t[0].comm), "aborted"));
  /* The peer sees it too, on its next call. */
  ck_assert_int_eq(shmddp_barrier(t[1].comm), SHMDDP_ERR_ABORTED);
  ck_assert_ptr_nonnull(strstr(shmddp_comm_last_error(t[1].comm), "rank 0 aborted"));
  shmddp_comm_destroy(t[0].comm);
  shmddp_comm_destroy(t[1].comm);
  id_segment_gone(&id);
}
END_TEST

/* Bad arguments: each case is a set of thread-ranks; every one must get INVALID with a message
 * saying what was wrong. (A rank out of range is refused before it meets anyone:
 * check_join_trust.c.) */
typedef struct {
  const char *name;
  int n;               /* threads */
  int nranks[3];       /* what each passes */
  int rank[3];
  const char *needle;  /* in every rank's message */
} bad_case_t;

static const bad_case_t bad_cases[] = {
  {.name = "nranks differ", .n = 2, .nranks = {2, 3}, .rank = {0, 1}, .needle = "same nranks"},
  {.name = "rank claimed twice", .n = 2, .nranks = {2, 2}, .rank = {0, 0}, .needle = "claimed twice"},
};

START_TEST(bad_arguments_are_refused_on_every_rank)
{
  char fails[2048] = "";
  for (size_t c = 0; c < sizeof bad_cases / sizeof bad_cases[0]; c++) {
    const bad_case_t *bc = &bad_cases[c];
    shmddp_unique_id_t id;
    ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
    trank_t t[3];
    thread_group(t, bc->n, &id, 3, 0);
    for (int i = 0; i < bc->n; i++) {
      t[i].nranks = bc->nranks[i];
      t[i].rank = bc->rank[i];
    }
    run_threads(t, bc->n);
    for (int i = 0; i < bc->n; i++) {
      if (t[i].init_st == SHMDDP_OK) shmddp_comm_destroy(t[i].comm);
      if (t[i].init_st != SHMDDP_ERR_INVALID || !strstr(t[i].init_err, bc->needle)) {
        size_t off = strlen(fails);
        snprintf(fails + off, sizeof fails - off, "[%s: thread %d got %s: %s] ", bc->name, i,
                 shmddp_strerror(t[i].init_st), t[i].init_err);
      }
    }
    id_segment_gone(&id);
  }
  ck_assert_msg(fails[0] == 0, "%s", fails);
}
END_TEST

START_TEST(ids_and_their_text)
{
  shmddp_unique_id_t a, b;
  ck_assert_int_eq(shmddp_get_unique_id(&a), SHMDDP_OK);
  ck_assert_int_eq(shmddp_get_unique_id(&b), SHMDDP_OK);
  ck_assert(memcmp(&a, &b, sizeof a) != 0);
  char text[SHMDDP_UNIQUE_ID_STRLEN];
  ck_assert_int_eq(shmddp_unique_id_to_string(&a, text, sizeof text), SHMDDP_OK);
  ck_assert_uint_eq(strlen(text), SHMDDP_UNIQUE_ID_STRLEN - 1);
  ck_assert_int_eq(shmddp_unique_id_from_string(text, &b), SHMDDP_OK);
  ck_assert(memcmp(&a, &b, sizeof a) == 0);
  ck_assert_int_eq(shmddp_unique_id_to_string(&a, text, 100), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "SHMDDP_UNIQUE_ID_STRLEN"));
  ck_assert_int_eq(shmddp_unique_id_from_string("abc", &b), SHMDDP_ERR_INVALID);
  shmddp_unique_id_to_string(&a, text, sizeof text);
  text[7] = 'z';
  ck_assert_int_eq(shmddp_unique_id_from_string(text, &b), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "'z'"));
  /* Not an id at all, and an id from another machine: refused before any waiting. */
  shmddp_unique_id_t junk;
  memset(&junk, 0x11, sizeof junk);
  shmddp_comm_t *comm = (shmddp_comm_t *)&junk;
  ck_assert_int_eq(shmddp_comm_init_rank(&comm, 2, junk, 0), SHMDDP_ERR_INVALID);
  ck_assert_ptr_null(comm);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "not a shmddp unique id"));
  shmddp_unique_id_t other = a;
  other.internal[52] ^= 0x5a; /* inside the boot id (bytes 48..63) */
  ck_assert_int_eq(shmddp_comm_init_rank(&comm, 2, other, 0), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "another machine"));
  ck_assert_int_eq(shmddp_comm_init_rank(&comm, 0, a, 0), SHMDDP_ERR_INVALID);
  ck_assert_int_eq(shmddp_comm_init_rank(&comm, SHMDDP_MAX_RANKS + 1, a, 0), SHMDDP_ERR_INVALID);
}
END_TEST

typedef struct {
  shmddp_comm_t *comm;
  tally_t tally;
} matrix_job_t;

static void *matrix_thread(void *arg)
{
  matrix_job_t *j = arg;
  run_matrix(j->comm, &j->tally);
  return NULL;
}

START_TEST(duplicates_of_a_joined_communicator)
{
  shmddp_unique_id_t id;
  trank_t t[2];
  join_threads(t, 2, &id, 0);
  /* Each rank runs the matrix on its base communicator and, at the same time from a second
   * thread, on a duplicate: independent counters, no interference. */
  matrix_job_t jobs[4];
  pthread_t th[4];
  for (int r = 0; r < 2; r++) {
    memset(&jobs[2 * r], 0, 2 * sizeof jobs[0]);
    jobs[2 * r].comm = t[r].comm;
    ck_assert_int_eq(shmddp_comm_dup(t[r].comm, &jobs[2 * r + 1].comm), SHMDDP_OK);
  }
  for (int i = 0; i < 4; i++) ck_assert_int_eq(pthread_create(&th[i], NULL, matrix_thread, &jobs[i]), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(jobs[i].tally.failures == 0 && jobs[i].tally.checks > 100, "job %d: %s", i,
                  jobs[i].tally.fails);
  ck_assert_int_eq(shmddp_comm_destroy(jobs[1].comm), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "shmddp_comm_free"));
  for (int r = 0; r < 2; r++) shmddp_comm_destroy(t[r].comm); /* frees the duplicates too */
  id_segment_gone(&id);
}
END_TEST

static Suite *join_suite(const suite_env_t *env)
{
  Suite *s = suite_create("join");
  TCase *tc = SUITE_CASE(s, "processes", two_groups_at_once_do_not_interfere,
                         sigkilled_rank_is_named_within_2s, missing_rank_times_out_named);
  tcase_add_loop_test(tc, processes_run_every_collective, 0, 2);
  tcase_set_timeout(tc, 600);
  tc = SUITE_CASE(s, "threads", abort_from_another_thread_unblocks_a_call,
                  bad_arguments_are_refused_on_every_rank, ids_and_their_text,
                  duplicates_of_a_joined_communicator);
  tcase_add_loop_test(tc, threads_run_every_collective, 0, 3);
  tcase_set_timeout(tc, 600);
  return s;
}

int main(void)
{
  /* Worker mode: this program started by a test as one rank (see spawn_rank). */
  const char *scenario = getenv("SHMDDP_TEST_WORKER");
  if (scenario) return worker_main(scenario);
  return suite_main("check_join", join_suite, SUITE_CPU_ONLY);
}
