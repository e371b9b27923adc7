/* check_shm.c — the process group: segment lifecycle, launcher supervision, abort propagation,
 * barrier timeouts, signals, NUMA lookup. Each test forks real ranks. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm/barrier.h"
#include "shm/numa.h"
#include "shm/segment.h"
#include "shm/timeutil.h"
#include "tests/testutil.h"

/* What each rank reports back to the test through shared memory. */
typedef struct {
  int ran[SHMDDP_MAX_RANKS];
  int status[SHMDDP_MAX_RANKS];
  double t_done[SHMDDP_MAX_RANKS];
  char msg[SHMDDP_MAX_RANKS][512];
  volatile int ready;
} report_t;

static report_t *rep;

static void setup(void) { rep = test_shared_alloc(sizeof *rep); }
static void teardown(void) { munmap(rep, sizeof *rep); }

/* ---- segment ---- */

START_TEST(segment_is_unlinked_and_laid_out)
{
  shm_segment_t seg;
  char err[256];
  ck_assert_int_eq(shm_segment_create(&seg, 3, 1 << 20, 5, err, sizeof err), SHMDDP_OK);
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", seg.name);
  struct stat sb;
  ck_assert_msg(stat(path, &sb) != 0 && errno == ENOENT, "%s still exists", path);
  ck_assert_int_eq(test_count_segments(getpid()), 0);
  ck_assert_uint_eq(seg.hdr->magic, SHM_MAGIC);
  ck_assert_int_eq(seg.hdr->nranks, 3);
  /* Every part is aligned, lies inside the mapping, and no two overlap. */
  struct { char *p; size_t n; } part[64];
  int np = 0;
  for (int ch = 0; ch < SHM_CHANNELS; ch++)
    for (int r = 0; r < 3; r++) {
      part[np].p = shm_rank_ctrl(&seg, ch, r);
      part[np++].n = SHM_CTRL_BYTES;
      part[np].p = shm_rank_slot(&seg, ch, r);
      part[np++].n = shm_slot_bytes(&seg, ch);
      ck_assert_uint_eq((uintptr_t)shm_rank_ctrl(&seg, ch, r) % SHM_LINE, 0);
      ck_assert_uint_eq((uintptr_t)shm_rank_slot(&seg, ch, r) % 4096, 0);
    }
  for (int r = 0; r < 3; r++) {
    part[np].p = shm_rank_xchg(&seg, r);
    part[np++].n = SHM_XCHG_BYTES;
  }
  ck_assert_uint_eq(shm_slot_bytes(&seg, 0), 1 << 20);
  ck_assert_uint_eq(shm_slot_bytes(&seg, 1), SHM_AUX_SLOT_BYTES);
  for (int i = 0; i < np; i++) {
    ck_assert(part[i].p >= (char *)seg.base + sizeof(shm_header_t));
    ck_assert(part[i].p + part[i].n <= (char *)seg.base + seg.bytes);
    for (int j = 0; j < i; j++)
      ck_assert_msg(part[i].p + part[i].n <= part[j].p || part[j].p + part[j].n <= part[i].p,
                    "parts %d and %d overlap", i, j);
  }
  /* every byte is usable (space was reserved) */
  for (int i = 0; i < np; i++) memset(part[i].p, 0xab, part[i].n);
  shm_segment_destroy(&seg);
}
END_TEST

START_TEST(segment_refuses_bad_sizes_with_advice)
{
  shm_segment_t seg;
  char err[512];
  ck_assert_int_eq(shm_segment_create(&seg, 0, 1 << 20, 5, err, sizeof err), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err, "1 to 8"));
  ck_assert_int_eq(shm_segment_create(&seg, 9, 1 << 20, 5, err, sizeof err), SHMDDP_ERR_INVALID);
  ck_assert_int_eq(shm_segment_create(&seg, 2, 100, 5, err, sizeof err), SHMDDP_ERR_INVALID);
  /* far more than any /dev/shm holds: refused up front, with the container advice */
  ck_assert_int_eq(shm_segment_create(&seg, 8, (size_t)1 << 44, 5, err, sizeof err),
                   SHMDDP_ERR_NOSPACE);
  ck_assert_ptr_nonnull(strstr(err, "--shm-size"));
  ck_assert_int_eq(test_count_segments(getpid()), 0);
}
END_TEST

/* ---- launcher ---- */

static int rank_ok(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  rep->ran[r] = 1;
  const char *env = getenv("SHMDDP_RANK");
  rep->status[r] = env && atoi(env) == r && shmddp_comm_size(comm) == *(int *)arg;
  return 0;
}

START_TEST(launch_runs_every_rank)
{
  for (int n = 1; n <= SHMDDP_MAX_RANKS; n++) {
    memset(rep, 0, sizeof *rep);
    shmddp_launch_result_t res = test_launch(n, 5, 0, rank_ok, &n);
    ck_assert_int_eq(res.exit_code, 0);
    ck_assert_int_eq(res.failed_rank, -1);
    for (int r = 0; r < n; r++) ck_assert(rep->ran[r] && rep->status[r]);
    ck_assert_int_eq(rep->ran[n < SHMDDP_MAX_RANKS ? n : 0], n < SHMDDP_MAX_RANKS ? 0 : 1);
  }
  ck_assert_int_eq(test_count_segments(getpid()), 0);
}
END_TEST

START_TEST(launch_rejects_bad_world_sizes)
{
  shmddp_launch_config_t cfg = {0};
  shmddp_launch_result_t res;
  cfg.nproc = 0;
  ck_assert_int_eq(shmddp_launch(&cfg, rank_ok, NULL, &res), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(res.message, "1 to 8"));
  cfg.nproc = 9;
  ck_assert_int_eq(shmddp_launch(&cfg, rank_ok, NULL, &res), SHMDDP_ERR_INVALID);
  cfg.nproc = 2;
  cfg.timeout_s = -1;
  ck_assert_int_eq(shmddp_launch(&cfg, rank_ok, NULL, &res), SHMDDP_ERR_INVALID);
}
END_TEST

/* Rank 2 fails with status 3 while the others wait in a barrier. */
static int rank_fails(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 2) return 3;
  shmddp_status_t st = shmddp_barrier(comm);
  rep->status[r] = st;
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  return st == SHMDDP_OK ? 0 : 1;
}

START_TEST(failed_rank_stops_the_others)
{
  shmddp_launch_result_t res = test_launch(4, 30, 0, rank_fails, NULL);
  ck_assert_int_eq(res.exit_code, 3);
  ck_assert_int_eq(res.failed_rank, 2);
  ck_assert_ptr_nonnull(strstr(res.message, "rank 2"));
  for (int r = 0; r < 4; r++) {
    if (r == 2) continue;
    ck_assert_int_eq(rep->status[r], SHMDDP_ERR_ABORTED);
    ck_assert_msg(strstr(rep->msg[r], "rank 2") != NULL, "rank %d: %s", r, rep->msg[r]);
  }
}
END_TEST

/* Rank 1 is SIGKILLed (by itself, mid-run); the others must leave their waits promptly. */
static int rank_killed(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (shmddp_barrier(comm) != SHMDDP_OK) return 1;
  if (r == 1) {
    rep->t_done[1] = shm_now();
    kill(getpid(), SIGKILL);
  }
  float x[1024] = {1};
  shmddp_status_t st = SHMDDP_OK;
  for (int i = 0; i < 1000000 && st == SHMDDP_OK; i++)
    st = shmddp_all_reduce(comm, x, x, 1024, SHMDDP_F32, SHMDDP_MAX, SHMDDP_HOST);
  rep->status[r] = st;
  rep->t_done[r] = shm_now();
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  return 1;
}

START_TEST(killed_rank_ends_the_run_within_2s)
{
  shmddp_launch_result_t res = test_launch(4, 60, 0, rank_killed, NULL);
  double end = shm_now();
  ck_assert_int_eq(res.failed_rank, 1);
  ck_assert_int_eq(res.exit_code, 128 + SIGKILL);
  ck_assert_ptr_nonnull(strstr(res.message, "signal 9"));
  ck_assert_msg(end - rep->t_done[1] < 2.0, "the run took %.2f s to end", end - rep->t_done[1]);
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    ck_assert_int_eq(rep->status[r], SHMDDP_ERR_ABORTED);
    ck_assert_msg(strstr(rep->msg[r], "rank 1") && strstr(rep->msg[r], "signal 9"), "rank %d: %s",
                  r, rep->msg[r]);
  }
  ck_assert_int_eq(test_count_segments(getpid()), 0);
}
END_TEST

/* A rank that never returns is killed once the grace period after a failure has passed. */
static int rank_hangs(shmddp_comm_t *comm, void *arg)
{
  if (shmddp_comm_rank(comm) == 0) return 5;
  for (;;) pause();
}

START_TEST(unresponsive_rank_is_killed_after_grace)
{
  double t0 = shm_now();
  shmddp_launch_result_t res = test_launch(3, 60, 0, rank_hangs, NULL);
  double took = shm_now() - t0;
  ck_assert_int_eq(res.exit_code, 5);
  ck_assert_int_eq(res.failed_rank, 0);
  ck_assert_msg(took < 4.0, "took %.2f s", took); /* grace is 2 s */
}
END_TEST

/* Rank 1 arrives late: rank 0's barrier times out and names it. */
static int rank_late(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 1) {
    shm_sleep(3.0);
    return 0;
  }
  shmddp_status_t st = shmddp_barrier(comm);
  rep->status[r] = st;
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  return st == SHMDDP_OK ? 0 : 1;
}

START_TEST(barrier_timeout_names_the_absent_rank)
{
  shmddp_launch_result_t res = test_launch(3, 0.5, 0, rank_late, NULL);
  ck_assert_int_ne(res.exit_code, 0);
  /* Whichever of ranks 0 and 2 times out first aborts the group; the other may see that abort
   * (which carries the same reason) before its own deadline. Both must name rank 1. */
  int timeouts = 0;
  for (int r = 0; r < 3; r += 2) {
    ck_assert_msg(rep->status[r] == SHMDDP_ERR_TIMEOUT || rep->status[r] == SHMDDP_ERR_ABORTED,
                  "rank %d: status %d", r, (int)rep->status[r]);
    timeouts += rep->status[r] == SHMDDP_ERR_TIMEOUT;
    ck_assert_msg(strstr(rep->msg[r], "rank(s) 1") != NULL, "rank %d: %s", r, rep->msg[r]);
  }
  ck_assert_int_ge(timeouts, 1);
}
END_TEST

/* shmddp_abort from one rank reaches the waiting peers with its reason. */
static int rank_aborts(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 0) {
    shm_sleep(0.1);
    shmddp_abort(comm, "dataset missing");
    return 0;
  }
  shmddp_status_t st = shmddp_barrier(comm);
  rep->status[r] = st;
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  /* later calls fail at once with the same status */
  float x = 1;
  rep->ran[r] = shmddp_all_reduce(comm, &x, &x, 1, SHMDDP_F32, SHMDDP_SUM, SHMDDP_HOST);
  return 1;
}

START_TEST(abort_reaches_every_rank)
{
  shmddp_launch_result_t res = test_launch(3, 30, 0, rank_aborts, NULL);
  ck_assert_int_ne(res.exit_code, 0);
  for (int r = 1; r < 3; r++) {
    ck_assert_int_eq(rep->status[r], SHMDDP_ERR_ABORTED);
    ck_assert_ptr_nonnull(strstr(rep->msg[r], "dataset missing"));
    ck_assert_int_eq(rep->ran[r], SHMDDP_ERR_ABORTED);
  }
}
END_TEST

/* SIGTERM to the launcher: ranks see the stop request and finish; exit status 143. */
static int rank_stops(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 0) kill(getppid(), SIGTERM);
  double t0 = shm_now();
  while (!shmddp_stop_requested(comm) && shm_now() - t0 < 10) shm_sleep(0.01);
  rep->status[r] = shmddp_stop_requested(comm);
  return shmddp_barrier(comm) == SHMDDP_OK ? 0 : 1;
}

START_TEST(sigterm_asks_ranks_to_stop)
{
  shmddp_launch_result_t res = test_launch(3, 30, 0, rank_stops, NULL);
  ck_assert_int_eq(res.interrupted, SIGTERM);
  ck_assert_int_eq(res.exit_code, 128 + SIGTERM);
  ck_assert_int_eq(res.failed_rank, -1);
  for (int r = 0; r < 3; r++) ck_assert_int_eq(rep->status[r], SIGTERM);
}
END_TEST

/* Many ranks on few cores: the waits must sleep, not spin, for this to finish quickly. */
static int rank_barriers(shmddp_comm_t *comm, void *arg)
{
  for (int i = 0; i < 300; i++)
    if (shmddp_barrier(comm) != SHMDDP_OK) return 1;
  return 0;
}

START_TEST(eight_ranks_oversubscribed)
{
  shmddp_launch_result_t res = test_launch(8, 30, 0, rank_barriers, NULL);
  ck_assert_int_eq(res.exit_code, 0);
}
END_TEST

/* ---- NUMA ---- */

START_TEST(numa_node_from_sysfs)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  char path[256];
  snprintf(path, sizeof path, "mkdir -p %s/bus/pci/devices/0000:1b:00.0 && echo 1 > "
           "%s/bus/pci/devices/0000:1b:00.0/numa_node", root, root);
  ck_assert_int_eq(system(path), 0);
  ck_assert_int_eq(shm_numa_node_of_pci(root, "0000:1B:00.0"), 1);
  ck_assert_int_eq(shm_numa_node_of_pci(root, "00000000:1B:00.0"), 1); /* CUDA's 8-digit domain */
  ck_assert_int_eq(shm_numa_node_of_pci(root, "0000:1c:00.0"), -1);
  ck_assert_int_eq(shm_numa_node_of_pci(root, ""), -1);
  snprintf(path, sizeof path, "rm -rf %s", root);
  ck_assert_int_eq(system(path), 0);
  int node = 7;
  char err[128];
  ck_assert_int_eq(shm_numa_bind_pci("0000:ff:1f.7", &node, err, sizeof err), SHMDDP_OK);
  ck_assert_int_eq(node, -1);
}
END_TEST

static Suite *shm_suite(void)
{
  Suite *s = suite_create("shm");
  TCase *tc = tcase_create("segment");
  tcase_add_test(tc, segment_is_unlinked_and_laid_out);
  tcase_add_test(tc, segment_refuses_bad_sizes_with_advice);
  suite_add_tcase(s, tc);
  tc = tcase_create("launcher");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, launch_runs_every_rank);
  tcase_add_test(tc, launch_rejects_bad_world_sizes);
  tcase_add_test(tc, failed_rank_stops_the_others);
  tcase_add_test(tc, killed_rank_ends_the_run_within_2s);
  tcase_add_test(tc, unresponsive_rank_is_killed_after_grace);
  tcase_add_test(tc, barrier_timeout_names_the_absent_rank);
  tcase_add_test(tc, abort_reaches_every_rank);
  tcase_add_test(tc, sigterm_asks_ranks_to_stop);
  tcase_add_test(tc, eight_ranks_oversubscribed);
  suite_add_tcase(s, tc);
  tc = tcase_create("numa");
  tcase_add_test(tc, numa_node_from_sysfs);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  SRunner *sr = srunner_create(shm_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
