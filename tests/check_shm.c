/* check_shm.c — the process group: segment lifecycle, launcher supervision, abort propagation,
 * barrier timeouts, signals, NUMA lookup and the GPU ranks' NUMA binding (against a fake sysfs
 * tree; on real GPUs too where there are some). Each test forks real ranks. */
#include "config.h"

#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/device.h"
#include "collectives/launch.h"
#include "shm/blake2s.h"
#include "shm/env.h"
#include "shm/shmfile.h"
#include "shm/numa.h"
#include "shm/segment.h"
#include "shm/timeutil.h"
#include "tests/testutil.h"
#include "tests/suite_main.h"

/* What each rank reports back to the test through shared memory. */
typedef struct {
  int ran[SHMDDP_MAX_RANKS];
  int status[SHMDDP_MAX_RANKS]; /* NOT_REPORTED until the rank writes it */
  double t_done[SHMDDP_MAX_RANKS];
  char msg[SHMDDP_MAX_RANKS][512];
  double t_kill;                /* when the victim killed itself */
  _Atomic int done;             /* ranks that have reported */
  _Atomic int passed;           /* ranks past the first barrier */
} report_t;

enum { NOT_REPORTED = -1 };

static report_t *rep;

static void setup(void)
{
  rep = test_shared_alloc(sizeof *rep);
  for (int r = 0; r < SHMDDP_MAX_RANKS; r++) rep->status[r] = NOT_REPORTED;
}

/* Polls cond every millisecond until it holds or `limit` seconds pass (a bound on a hang, never
 * a synchronisation: every caller waits for an event). Returns whether cond held, as seen by the
 * last poll: it is not evaluated again, since a transient state (a rank asleep between two of its
 * 50 ms futex sleeps) could have passed by then. */
#define WAIT_UNTIL(cond, limit)                                                               \
  ({                                                                                          \
    double t0_ = shm_now();                                                                   \
    int ok_;                                                                                  \
    while (!(ok_ = (cond)) && shm_now() - t0_ < (limit)) shm_sleep(0.001);                    \
    ok_;                                                                                      \
  })

/* Ranks of comm's group asleep in a wait of the segment (inside a collective or a barrier). */
static int ranks_waiting(shmddp_comm_t *comm)
{
  return (int)atomic_load(&comm->seg->hdr->waiters);
}
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
  /* beyond the largest slot: refused as such, before any size arithmetic */
  ck_assert_int_eq(shm_segment_create(&seg, 8, (size_t)1 << 44, 5, err, sizeof err),
                   SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err, "too large: use at most 65536 MiB"));
  ck_assert_int_eq(shm_segment_create(&seg, 2, SIZE_MAX - 4095, 5, err, sizeof err),
                   SHMDDP_ERR_INVALID);
  /* far more than any /dev/shm holds: refused up front, with the container advice */
  ck_assert_int_eq(shm_segment_create(&seg, 8, SHM_MAX_SLOT_BYTES, 5, err, sizeof err),
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

/* Rank 1 is SIGKILLed (by itself) while the other three are asleep inside an all-reduce that
 * cannot complete without it: it waits until all three have passed the barrier and the segment
 * counts three ranks asleep in a wait (which is then the all-reduce). Each must return
 * SHMDDP_ERR_ABORTED on its own, naming rank 1 and the signal.
 *
 * Before, the peers looped on all-reduces and rank 1 died right after the first barrier: under
 * load a peer could still be inside that barrier when the abort was recorded, and a wait that
 * finds the group aborted returns SHMDDP_ERR_ABORTED even if the barrier had completed, so the
 * peer returned early without writing its status, which read as 0 (SHMDDP_OK). Statuses now
 * start as NOT_REPORTED and every return path writes one. */
static int rank_killed(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  shmddp_status_t st = shmddp_barrier(comm);
  if (st != SHMDDP_OK) {
    rep->status[r] = st;
    snprintf(rep->msg[r], sizeof rep->msg[r], "barrier: %s", shmddp_comm_last_error(comm));
    return 1;
  }
  if (r == 1) {
    /* 0: the peers were never seen waiting inside the all-reduce */
    rep->ran[1] = WAIT_UNTIL(atomic_load(&rep->passed) == n - 1 && ranks_waiting(comm) >= n - 1, 60);
    rep->t_kill = shm_now();
    kill(getpid(), SIGKILL);
  }
  atomic_fetch_add(&rep->passed, 1);
  float x[1024] = {1};
  st = shmddp_all_reduce(comm, x, x, 1024, SHMDDP_F32, SHMDDP_MAX, SHMDDP_HOST);
  rep->t_done[r] = shm_now();
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  rep->status[r] = st;
  return 1;
}

/* The bound, measured from the kill: the launcher sleeps in sigtimedwait, which SIGCHLD ends at
 * once; it records the abort and wakes the futex the peers sleep on (each sleep also ends by
 * itself within 50 ms), and every peer sees the abort word and returns. That is a few wake-ups
 * of sleeping processes, each delayed on a loaded machine by a scheduling latency of
 * milliseconds to tens of milliseconds: it takes about 1-100 ms, and 2 s is the launcher's own
 * grace after which it kills the ranks that are left. A peer that did not leave by itself within
 * 2 s would be killed and leave no status. */
START_TEST(killed_rank_ends_the_run_within_2s)
{
  shmddp_launch_result_t res = test_launch(4, 60, 0, rank_killed, NULL);
  double end = shm_now();
  ck_assert_msg(rep->ran[1], "the peers were never seen asleep inside the all-reduce");
  ck_assert_int_eq(res.failed_rank, 1);
  ck_assert_int_eq(res.exit_code, 128 + SIGKILL);
  ck_assert_ptr_nonnull(strstr(res.message, "signal 9"));
  for (int r = 0; r < 4; r++) {
    if (r == 1) continue;
    ck_assert_msg(rep->status[r] == SHMDDP_ERR_ABORTED, "rank %d: status %d (%s), not %d (aborted)",
                  r, rep->status[r], rep->status[r] == NOT_REPORTED ? "never reported" : rep->msg[r],
                  SHMDDP_ERR_ABORTED);
    ck_assert_msg(strstr(rep->msg[r], "rank 1") && strstr(rep->msg[r], "signal 9"), "rank %d: %s",
                  r, rep->msg[r]);
    ck_assert_msg(rep->t_done[r] - rep->t_kill < 2.0, "rank %d left its all-reduce %.2f s after the "
                  "kill", r, rep->t_done[r] - rep->t_kill);
  }
  ck_assert_msg(end - rep->t_kill < 2.0, "the run took %.2f s to end after the kill",
                end - rep->t_kill);
  ck_assert_int_eq(test_count_segments(getpid()), 0);
}
END_TEST

/* A rank that never returns is killed once the grace period after a failure has passed. */
static int rank_hangs(shmddp_comm_t *comm, void *arg)
{
  if (shmddp_comm_rank(comm) == 0) {
    rep->t_kill = shm_now(); /* the failure */
    return 5;
  }
  for (;;) pause();
}

/* Measured from rank 0's failure: the launcher reaps rank 0 after that, then gives the others
 * the 2 s grace, so the run cannot end sooner than 2 s after it (the grace is honoured). The
 * upper bound only tells the grace from the 30 s stop grace or no kill at all (the test would
 * then hit its timeout); load only delays the launcher's wake-up at the deadline. */
START_TEST(unresponsive_rank_is_killed_after_grace)
{
  shmddp_launch_result_t res = test_launch(3, 60, 0, rank_hangs, NULL);
  double took = shm_now() - rep->t_kill;
  ck_assert_int_eq(res.exit_code, 5);
  ck_assert_int_eq(res.failed_rank, 0);
  ck_assert_msg(took >= 2.0 && took < 12.0, "the hung ranks were killed %.2f s after the failure "
                "(grace 2 s)", took);
}
END_TEST

/* Rank 1 never arrives: the barrier of ranks 0 and 2 times out and names it. Rank 1 stays alive
 * (were it to exit, they would see that instead) until both have reported. */
static int rank_late(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 1) {
    WAIT_UNTIL(atomic_load(&rep->done) == 2, 120); /* the 120 s bound a hang only */
    return 0;
  }
  shmddp_status_t st = shmddp_barrier(comm);
  snprintf(rep->msg[r], sizeof rep->msg[r], "%s", shmddp_comm_last_error(comm));
  rep->status[r] = st;
  atomic_fetch_add(&rep->done, 1);
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
                  "rank %d: status %d: %s", r, (int)rep->status[r], rep->msg[r]);
    timeouts += rep->status[r] == SHMDDP_ERR_TIMEOUT;
    ck_assert_msg(strstr(rep->msg[r], "rank(s) 1") != NULL, "rank %d: %s", r, rep->msg[r]);
  }
  ck_assert_int_ge(timeouts, 1);
}
END_TEST

/* shmddp_abort from one rank reaches the waiting peers with its reason: rank 0 aborts once both
 * peers are asleep in their barrier. */
static int rank_aborts(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  if (r == 0) {
    rep->ran[0] = WAIT_UNTIL(ranks_waiting(comm) >= 2, 60);
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
  ck_assert_msg(rep->ran[0], "the peers were never seen waiting in the barrier");
  for (int r = 1; r < 3; r++) {
    ck_assert_int_eq(rep->status[r], SHMDDP_ERR_ABORTED);
    ck_assert_ptr_nonnull(strstr(rep->msg[r], "dataset missing"));
    ck_assert_int_eq(rep->ran[r], SHMDDP_ERR_ABORTED);
  }
}
END_TEST

/* A signal to the launcher: ranks see the stop request and finish. arg: the signals rank 0 sends
 * the launcher, in order, 0-terminated. A rank that finds SIGINT ignored sends itself one, which
 * must change nothing. */
static int rank_stops(shmddp_comm_t *comm, void *arg)
{
  const int *sigs = arg;
  int r = shmddp_comm_rank(comm);
  struct sigaction sa;
  sigaction(SIGINT, NULL, &sa);
  rep->ran[r] = sa.sa_handler == SIG_IGN ? 2 : 1; /* 2: SIGINT ignored in the rank */
  if (sa.sa_handler == SIG_IGN) raise(SIGINT);   /* must change nothing */
  if (r == 0)
    for (int i = 0; sigs[i]; i++) kill(getppid(), sigs[i]);
  WAIT_UNTIL(shmddp_stop_requested(comm), 60); /* the 60 s bound a hang only */
  rep->status[r] = shmddp_stop_requested(comm);
  return shmddp_barrier(comm) == SHMDDP_OK ? 0 : 1;
}

/* Three ranks of rank_stops sending sigs: the run must end stopped by `by` (128 + by, no rank
 * failed), every rank having seen the stop request as `by`. */
static void check_stopped_by(const int *sigs, int by)
{
  shmddp_launch_result_t res = test_launch(3, 30, 0, rank_stops, (void *)sigs);
  ck_assert_int_eq(res.interrupted, by);
  ck_assert_int_eq(res.exit_code, 128 + by);
  ck_assert_int_eq(res.failed_rank, -1);
  for (int r = 0; r < 3; r++) ck_assert_int_eq(rep->status[r], by);
}

START_TEST(sigterm_asks_ranks_to_stop)
{
  static const int sigs[] = {SIGTERM, 0};
  check_stopped_by(sigs, SIGTERM);
}
END_TEST

START_TEST(sigint_asks_ranks_to_stop)
{
  static const int sigs[] = {SIGINT, 0};
  signal(SIGINT, SIG_DFL); /* as from a terminal (Check runs this test in a child of its own) */
  check_stopped_by(sigs, SIGINT);
}
END_TEST

/* The launcher inherits SIGINT ignored, as a script's background job does: SIGINT stays
 * ignored, by the launcher and by the ranks (a rank's own raise(SIGINT) changes nothing); SIGTERM
 * still stops the run. Rank 0 sends SIGINT before SIGTERM, so a launcher that took SIGINT would
 * report it (pending signals are taken lowest number first). */
START_TEST(inherited_ignored_sigint_stays_ignored)
{
  static const int sigs[] = {SIGINT, SIGTERM, 0};
  signal(SIGINT, SIG_IGN);
  check_stopped_by(sigs, SIGTERM);
  for (int r = 0; r < 3; r++) ck_assert_msg(rep->ran[r] == 2, "rank %d does not ignore SIGINT", r);
}
END_TEST

/* Whether sig is pending for process pid (its shared pending set, /proc/PID/status ShdPnd). */
static int signal_pending(pid_t pid, int sig)
{
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  unsigned long long mask = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "ShdPnd: %llx", &mask) == 1) break;
  if (f) fclose(f);
  return (int)(mask >> (sig - 1) & 1);
}

/* A stop as supervisors send it: SIGTERM to the launcher, and again, and again (GNU timeout
 * signals the launcher and then its process group; systemd and Slurm repeat), each one taken by
 * the launcher before the next; and twice to every rank itself. The ranks finish their "step"
 * (a barrier) and end with the stop's status: no rank is killed. */
static int rank_stops_slowly(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  pid_t launcher = getppid();
  if (r == 0) {
    for (int i = 0; i < 3; i++) {
      kill(launcher, SIGTERM);
      WAIT_UNTIL(!signal_pending(launcher, SIGTERM), 60);
    }
  }
  WAIT_UNTIL(shmddp_stop_requested(comm), 60);
  raise(SIGTERM);
  raise(SIGTERM);
  rep->status[r] = shmddp_stop_requested(comm);
  return shmddp_barrier(comm) == SHMDDP_OK ? 0 : 1;
}

START_TEST(repeated_sigterm_is_absorbed)
{
  shmddp_launch_result_t res = test_launch(3, 30, 0, rank_stops_slowly, NULL);
  ck_assert_msg(res.failed_rank == -1, "rank %d failed: %s", res.failed_rank, res.message);
  ck_assert_int_eq(res.interrupted, SIGTERM);
  ck_assert_int_eq(res.exit_code, 128 + SIGTERM);
  for (int r = 0; r < 3; r++) ck_assert_int_eq(rep->status[r], SIGTERM);
}
END_TEST

/* ---- shared-memory files for peers (the CUDA transport's host staging) ---- */

START_TEST(staging_file_is_reserved_private_and_checked)
{
  const size_t bytes = (size_t)3 << 20;
  int fd = -1;
  char path[SHM_FILE_PATH_MAX], err[512];
  ck_assert_msg(shm_file_create(bytes, &fd, path, sizeof path, err, sizeof err) == SHMDDP_OK,
                "%s", err);
  struct stat sb;
  ck_assert_int_eq(fstat(fd, &sb), 0);
  ck_assert_uint_eq(sb.st_mode & 0777, 0600);
  /* Reserved, not sparse: a full /dev/shm fails here, not later with SIGBUS. */
  ck_assert_msg((size_t)sb.st_blocks * 512 >= bytes, "%lld of %zu bytes reserved",
                (long long)sb.st_blocks * 512, bytes);
  /* Unnamed where /dev/shm offers O_TMPFILE: nothing a crash could leave behind. */
  if (strncmp(path, "/proc/", 6) == 0) ck_assert_int_eq(test_count_prefix("shmddp-staged-"), 0);
  /* A peer process maps it by the path and sees what the maker wrote. */
  void *mine = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(mine, MAP_FAILED);
  strcpy((char *)mine + bytes - 16, "from the maker");
  pid_t pid = fork();
  if (pid == 0) {
    void *peer = NULL;
    if (shm_file_map(path, bytes, &peer, err, sizeof err) != SHMDDP_OK) _exit(1);
    _exit(strcmp((char *)peer + bytes - 16, "from the maker") == 0 ? 0 : 2);
  }
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_int_eq(WEXITSTATUS(ws), 0);
  /* What the maker did not announce is not mapped: another size, a mode granting others. */
  void *peer = NULL;
  ck_assert_int_eq(shm_file_map(path, bytes + 4096, &peer, err, sizeof err), SHMDDP_ERR_INVALID);
  ck_assert_msg(strstr(err, "not what its maker announced"), "%s", err);
  ck_assert_int_eq(fchmod(fd, 0644), 0);
  ck_assert_int_eq(shm_file_map(path, bytes, &peer, err, sizeof err), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(err, "mode 0644"));
  munmap(mine, bytes);
  shm_file_forget(fd, path);
  ck_assert_int_ne(shm_file_map(path, bytes, &peer, err, sizeof err), SHMDDP_OK);
  ck_assert_int_eq(test_count_prefix("shmddp-staged-"), 0);
}
END_TEST

/* ---- the environment table and its reader ---- */

START_TEST(env_reader_refuses_junk_range_and_overflow)
{
  static const struct {
    const char *name, *value, *needle; /* needle: in the message; NULL: accepted */
  } cases[] = {
    {"SHMDDP_SLOT_MB", "8", NULL},
    {"SHMDDP_SLOT_MB", "0.5", NULL},
    {"SHMDDP_SLOT_MB", "1e30", "SHMDDP_SLOT_MB=1e30 is not a decimal number: only digits and one decimal point between them are taken (no sign, spaces, exponent or 0x): it takes a number from 0.0625 to 65536 (MiB)"},
    {"SHMDDP_SLOT_MB", "1e400", "SHMDDP_SLOT_MB=1e400 is not a decimal number"},
    {"SHMDDP_SLOT_MB", "17592186044416", "is out of range"}, /* the old (size_t)(mb * 2^20) wrapped */
    {"SHMDDP_SLOT_MB", "0.01", "is out of range"},
    {"SHMDDP_SLOT_MB", "-4", "SHMDDP_SLOT_MB=-4 is not a decimal number"},
    {"SHMDDP_SLOT_MB", "nan", "is not a decimal number"},
    {"SHMDDP_SLOT_MB", "inf", "is not a decimal number"},
    {"SHMDDP_SLOT_MB", "4MB", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "abc", "SHMDDP_TIMEOUT=abc is not a decimal number: only digits and one decimal point between them are taken (no sign, spaces, exponent or 0x): it takes a number from 0.001 to 31536000 (seconds)"},
    /* forms strtod/strtoull take, and so did this reader */
    {"SHMDDP_TIMEOUT", "0x10", "SHMDDP_TIMEOUT=0x10 is not a decimal number"},
    {"SHMDDP_TIMEOUT", " 30", "SHMDDP_TIMEOUT= 30 is not a decimal number"},
    {"SHMDDP_TIMEOUT", "\t30", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "+30", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "30 ", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "3e1", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", ".5", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "5.", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "1.2.3", "is not a decimal number"},
    {"SHMDDP_TIMEOUT", "0.5", NULL},
    {"SHMDDP_TIMEOUT", "0030", NULL},
    {"SHMDDP_TIMEOUT", "9007199254740993.5", "SHMDDP_TIMEOUT=9007199254740993.5 is more than 2^53 (9007199254740992), above which a whole number is not held exactly"},
    {"SHMDDP_CUDA_TS_BLOCKS", "16", NULL},
    {"SHMDDP_CUDA_TS_BLOCKS", "2.5", "SHMDDP_CUDA_TS_BLOCKS=2.5 is not a whole number: only decimal digits are taken"},
    {"SHMDDP_CUDA_TS_BLOCKS", "129", "from 1 to 128"},
    {"SHMDDP_CUDA_TS_BLOCKS", "0x10", "SHMDDP_CUDA_TS_BLOCKS=0x10 is not a whole number"},
    {"SHMDDP_CUDA_TS_BLOCKS", " 16", "is not a whole number"},
    {"SHMDDP_CUDA_TS_BLOCKS", "-0", "is not a whole number"},
    {"SHMDDP_CUDA_TS_BLOCKS", "\xef\xbc\x91\xef\xbc\x96", "is not a whole number"}, /* fullwidth 16 */
    {"SHMDDP_CUDA_TS_BLOCKS", "99999999999999999999999", "is more than 2^53"},
    {"SHMDDP_CUDA_DIRECT_MAX", "64k", NULL},
    {"SHMDDP_CUDA_DIRECT_MAX", "0x10", "SHMDDP_CUDA_DIRECT_MAX=0x10 is not a byte count: only decimal digits and one k, m or g after them are taken"},
    {"SHMDDP_CUDA_DIRECT_MAX", " 64k", "is not a byte count"},
    {"SHMDDP_CUDA_DIRECT_MAX", "64kk", "is not a byte count"},
    {"SHMDDP_CUDA_DIRECT_MAX", "1.5m", "is not a byte count"},
    {"SHMDDP_CUDA_DIRECT_MAX", "99999999999999999999", "is more than 2^53"},
    {"SHMDDP_CUDA_DIRECT_MAX", "17179869184g", "is more than 2^53"}, /* 2^34 GiB */
    /* exact up to 2^53, refused above it rather than rounded */
    {"SHMDDP_CUDA_CE_MIN", "9007199254740992", NULL},
    {"SHMDDP_CUDA_CE_MIN", "8388608g", NULL},
    {"SHMDDP_CUDA_CE_MIN", "9007199254740993", "SHMDDP_CUDA_CE_MIN=9007199254740993 is more than 2^53"},
    {"SHMDDP_CUDA_CE_MIN", "8388609g", "is more than 2^53"},
    {"SHMDDP_CUDA_CE_MIN", "4611686018427387903", "is more than 2^53"}, /* rounded to the old max */
    {"SHMDDP_CUDA_DIRECT_MAX", "2g", "bytes from 0 to 1g"},
    {"SHMDDP_CUDA_DIRECT_MAX", "12q", "is not a byte count"},
    {"SHMDDP_CUDA_P2P", "yes", "is not 0 or 1"},
    {"SHMDDP_ALGO", "fastest", "is not one of the choices: it takes auto|direct|ring"},
    {"SHMDDP_ALGO", "coloc", NULL},
    {"SHMDDP_CUDA_EXPORTS", "16", NULL},
    {"SHMDDP_CUDA_EXPORTS", "15", "SHMDDP_CUDA_EXPORTS=15 is out of range: it takes a whole number from 16 to 1048576 (exports)"},
    {"SHMDDP_CUDA_EXPORTS", "64k", "is not a whole number"},
    {"SHMDDP_RECOMPUTE", "3", NULL},
  };
  char err[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const shm_env_param_t *p = shm_env_find(cases[i].name);
    ck_assert_ptr_nonnull(p);
    err[0] = 0;
    int rc = shm_env_check(p, cases[i].value, err, sizeof err);
    if (!cases[i].needle)
      ck_assert_msg(rc == 0, "%s=%s refused: %s", cases[i].name, cases[i].value, err);
    else
      ck_assert_msg(rc == -1 && strstr(err, cases[i].needle), "%s=%s: %d '%s'", cases[i].name,
                    cases[i].value, rc, err);
  }
  /* The typed readers: unset, set, refused. */
  double d = -1;
  uint64_t b = 0;
  unsetenv("SHMDDP_SLOT_MB");
  ck_assert_int_eq(shm_env_number("SHMDDP_SLOT_MB", &d, err, sizeof err), 0);
  setenv("SHMDDP_SLOT_MB", "", 1); /* empty: the default */
  ck_assert_int_eq(shm_env_number("SHMDDP_SLOT_MB", &d, err, sizeof err), 0);
  setenv("SHMDDP_SLOT_MB", "0.25", 1);
  ck_assert_int_eq(shm_env_number("SHMDDP_SLOT_MB", &d, err, sizeof err), 1);
  ck_assert(d == 0.25);
  setenv("SHMDDP_CUDA_CE_CHUNK", "3m", 1);
  ck_assert_int_eq(shm_env_bytes("SHMDDP_CUDA_CE_CHUNK", &b, err, sizeof err), 1);
  ck_assert_uint_eq(b, 3 << 20);
  unsetenv("SHMDDP_CUDA_CE_CHUNK");
  ck_assert_int_eq(shm_env_number("SHMDDP_NO_SUCH", &d, err, sizeof err), -1);
  /* The whole environment, as shmddp-train checks it: a bad value refused, a typo warned of. */
  char *env[] = {"PATH=/bin", "SHMDDP_SLOTMB=4", "SHMDDP_TIMEOUT=30",
                 "SHMDDP_NCCL_LIB=/opt/shmddp/lib/libshmddp-nccl.so.0", NULL};
  FILE *warn = tmpfile();
  ck_assert_int_eq(shm_env_check_environ(env, "test", warn, err, sizeof err), 0);
  char text[512] = "";
  rewind(warn);
  ck_assert_uint_gt(fread(text, 1, sizeof text - 1, warn), 0);
  fclose(warn);
  ck_assert_ptr_nonnull(strstr(text, "SHMDDP_SLOTMB is not a shmddp setting"));
  /* The project's own variables, exported as a user of shmddp-nccl-run has them: no warning. */
  ck_assert_msg(strstr(text, "SHMDDP_NCCL_LIB") == NULL, "%s", text);
  env[2] = "SHMDDP_TIMEOUT=-1";
  ck_assert_int_eq(shm_env_check_environ(env, "test", NULL, err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "SHMDDP_TIMEOUT=-1 is not a decimal number"));
}
END_TEST

/* The library's own readers refuse before anything is made: a launch, a joined group. */
START_TEST(bad_environment_is_refused_at_launch_and_join)
{
  shmddp_launch_config_t cfg = {.nproc = 2};
  shmddp_launch_result_t res;
  setenv("SHMDDP_SLOT_MB", "17592186044416", 1); /* 2^44 MiB: wrapped to a 0-byte slot before */
  ck_assert_int_eq(shmddp_launch(&cfg, rank_ok, NULL, &res), SHMDDP_ERR_INVALID);
  ck_assert_msg(strstr(res.message, "SHMDDP_SLOT_MB=17592186044416 is out of range"), "%s",
                res.message);
  setenv("SHMDDP_SLOT_MB", "0.5x", 1);
  shmddp_unique_id_t id;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  shmddp_comm_t *comm = NULL;
  ck_assert_int_eq(shmddp_comm_init_rank(&comm, 1, id, 0), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(shmddp_last_error(), "SHMDDP_SLOT_MB=0.5x is not a decimal number"));
  unsetenv("SHMDDP_SLOT_MB");
  setenv("SHMDDP_STOP_GRACE", "0", 1);
  ck_assert_int_eq(shmddp_launch(&cfg, rank_ok, NULL, &res), SHMDDP_ERR_INVALID);
  ck_assert_ptr_nonnull(strstr(res.message, "SHMDDP_STOP_GRACE=0 is out of range"));
  unsetenv("SHMDDP_STOP_GRACE");
  ck_assert_int_eq(test_count_segments(getpid()), 0);
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

/* A fake sysfs: <root>/bus/pci/devices/<dev>/numa_node holding `node` (any text). */
static void fake_pci_node(const char *root, const char *dev, const char *node)
{
  char path[512];
  snprintf(path, sizeof path, "mkdir -p '%s/bus/pci/devices/%s'", root, dev);
  ck_assert_int_eq(system(path), 0);
  snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", root, dev);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "%s\n", node);
  fclose(f);
}

START_TEST(numa_node_from_sysfs)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  ck_assert_int_eq(shm_numa_node_of_pci(root, "0000:1B:00.0"), 1);
  ck_assert_int_eq(shm_numa_node_of_pci(root, "00000000:1B:00.0"), 1); /* CUDA's 8-digit domain */
  ck_assert_int_eq(shm_numa_node_of_pci(root, "0000:1c:00.0"), -1);
  ck_assert_int_eq(shm_numa_node_of_pci(root, ""), -1);
  /* A name that walks out of the devices folder (back into the same file) is no bus id. */
  ck_assert_int_eq(shm_numa_node_of_pci(root, "0000:1b:00.0/../0000:1b:00.0"), -1);
  test_rm_rf(root);
  /* A device this machine does not have is never bound to, whatever its node count. */
  ck_assert_int_eq(shm_numa_pick_node("/sys", "0000:ff:1f.7", shm_numa_nodes()), -1);
}
END_TEST

/* The decision, from the GPU's bus id and the machine's node count alone. */
START_TEST(numa_pick_node_binds_only_where_it_helps)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  fake_pci_node(root, "0000:3c:00.0", "0");
  fake_pci_node(root, "0000:5d:00.0", "-1"); /* what a one-node machine's sysfs says */
  fake_pci_node(root, "0000:7e:00.0", "3");
  fake_pci_node(root, "0000:9f:00.0", "none");
  /* Two nodes: each GPU's own, whichever form of the id. */
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:1B:00.0", 2), 1);
  ck_assert_int_eq(shm_numa_pick_node(root, "0000:1b:00.0", 2), 1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:3C:00.0", 2), 0);
  /* One node (or a count not known): nothing to bind, whatever sysfs says (some one-node
   * machines say 0 for every device, others -1). */
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:3C:00.0", 1), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:1B:00.0", 1), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:1B:00.0", 0), -1);
  /* No node for the device, a node the machine does not have, junk, no such device. */
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:5D:00.0", 2), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:7E:00.0", 2), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:7E:00.0", 4), 3);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:9F:00.0", 2), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, "00000000:B0:00.0", 2), -1);
  ck_assert_int_eq(shm_numa_pick_node(root, NULL, 2), -1);
  test_rm_rf(root);
}
END_TEST

/* The real binding: a node the machine does not have is an error that names it, never an
 * exit; node 0 (every machine with NUMA support has it) binds, in a child, and makes node 0
 * the preferred one. */
START_TEST(numa_bind_node_reports_failures)
{
  ck_assert_int_ge(shm_numa_nodes(), 1);
  char err[256] = "";
  shmddp_status_t st = shm_numa_bind_node(100000, err, sizeof err);
  ck_assert_int_ne(st, SHMDDP_OK);
  ck_assert_msg(strstr(err, "NUMA node 100000") != NULL, "%s", err);
#ifndef HAVE_NUMA
  ck_assert_int_eq(st, SHMDDP_ERR_UNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(err, "without libnuma"));
#endif
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    char e[256] = "";
    shmddp_status_t s0 = shm_numa_bind_node(0, e, sizeof e);
    if (s0 == SHMDDP_ERR_UNSUPPORTED) _exit(0); /* no libnuma, or no NUMA in the kernel */
    if (s0 != SHMDDP_OK) {
      fprintf(stderr, "binding to node 0: %s\n", e);
      _exit(1);
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    _exit(sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0 ? 0 : 2);
  }
  ck_assert_int_gt(pid, 0);
  int ws = 0;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the child: wait status 0x%x", ws);
}
END_TEST

/* What the ranks of a launch asked the binder, in memory they share with this process. Each
 * fake finds its rank in SHMDDP_RANK, which the launcher sets before the rank's code runs. */
typedef struct {
  int fail;                          /* 1: bind fails, and GPU 2's bus id cannot be had */
  int bus_calls[SHMDDP_MAX_RANKS];   /* bus_id calls, by rank */
  int bus_device[SHMDDP_MAX_RANKS];  /* the device it asked about */
  int bind_calls[SHMDDP_MAX_RANKS];
  int bind_node[SHMDDP_MAX_RANKS];
  int nodes_calls;
  int ran[SHMDDP_MAX_RANKS];
  int bound_before[SHMDDP_MAX_RANKS]; /* bind_calls when the rank's function started */
} numa_rec_t;

static numa_rec_t *nrec;

static int fake_rank(void)
{
  const char *r = getenv("SHMDDP_RANK");
  int v = r ? atoi(r) : 0;
  return v >= 0 && v < SHMDDP_MAX_RANKS ? v : 0;
}

/* GPU 0 is on node 1, GPU 1 on node 0, GPU 2's node is unknown (-1) and GPU 3 has no bus. */
static int fake_bus_id(int device, char *buf, size_t len, char *err, size_t errlen)
{
  static const char *const ids[] = {"00000000:1B:00.0", "00000000:3C:00.0", "00000000:5D:00.0"};
  int r = fake_rank();
  nrec->bus_calls[r]++;
  nrec->bus_device[r] = device;
  if (device == 2 && nrec->fail) {
    snprintf(err, errlen, "the driver said no");
    return -1;
  }
  if (device < 0 || device > 2) return 1;
  snprintf(buf, len, "%s", ids[device]);
  return 0;
}

static int fake_nodes(void)
{
  __atomic_add_fetch(&nrec->nodes_calls, 1, __ATOMIC_RELAXED);
  return 2;
}

static shmddp_status_t fake_bind(int node, char *err, size_t errlen)
{
  int r = fake_rank();
  nrec->bind_calls[r]++;
  nrec->bind_node[r] = node;
  if (nrec->fail) {
    snprintf(err, errlen, "the kernel refused node %d", node);
    return SHMDDP_ERR_SYSTEM;
  }
  return SHMDDP_OK;
}

static int numa_rank(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  nrec->ran[r] = 1;
  nrec->bound_before[r] = nrec->bind_calls[r];
  return 0;
}

/* A launch under `binder` (NULL: the real one) with the stderr of the launcher and the ranks
 * going to errbuf (len bytes); fails the test unless the launch itself succeeds. */
static shmddp_launch_result_t launch_capturing_stderr(const shmddp_launch_config_t *cfg,
                                                      shmddp_rank_fn fn,
                                                      const coll_numa_binder_t *binder,
                                                      char *errbuf, size_t len)
{
  char path[] = "/tmp/shmddp-numa-err-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  fflush(NULL);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  dup2(fd, 2);
  shmddp_launch_result_t res;
  shmddp_status_t st = coll_launch(cfg, fn, NULL, binder, &res);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  ssize_t got = pread(fd, errbuf, len - 1, 0);
  errbuf[got > 0 ? got : 0] = '\0';
  close(fd);
  ck_assert_msg(st == SHMDDP_OK, "launch failed: %s", res.message);
  return res;
}

/* A launch of n ranks with the fake binder; stderr of the launcher and the ranks goes to
 * errbuf (len bytes). */
static shmddp_launch_result_t numa_launch(int n, int use_gpus, int bind_numa, int quiet,
                                          const char *sysfs_root, char *errbuf, size_t len)
{
  coll_numa_binder_t b = {.bus_id = fake_bus_id, .sysfs_root = sysfs_root, .nodes = fake_nodes,
                          .bind = fake_bind};
  shmddp_launch_config_t cfg = {.nproc = n, .timeout_s = 30, .label = "test", .quiet = quiet,
                                .use_gpus = use_gpus, .bind_numa = bind_numa};
  return launch_capturing_stderr(&cfg, numa_rank, &b, errbuf, len);
}

static void numa_setup(void) { nrec = test_shared_alloc(sizeof *nrec); }
static void numa_teardown(void) { munmap(nrec, sizeof *nrec); }

/* bind_numa with GPUs: every rank asks for its own GPU's bus id and binds to that GPU's node
 * before its function runs; a GPU without a node is left alone. */
START_TEST(numa_launch_binds_each_gpu_rank_to_its_node)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  fake_pci_node(root, "0000:3c:00.0", "0");
  fake_pci_node(root, "0000:5d:00.0", "-1");
  char err[4096];
  shmddp_launch_result_t res = numa_launch(3, 1, 1, 0, root, err, sizeof err);
  ck_assert_int_eq(res.exit_code, 0);
  ck_assert_msg(strstr(err, "NUMA") == NULL, "stderr: %s", err);
  for (int r = 0; r < 3; r++) {
    ck_assert_int_eq(nrec->ran[r], 1);
    ck_assert_int_eq(nrec->bus_calls[r], 1);
    ck_assert_int_eq(nrec->bus_device[r], r);
  }
  ck_assert_int_eq(nrec->bind_calls[0], 1);
  ck_assert_int_eq(nrec->bind_node[0], 1);
  ck_assert_int_eq(nrec->bind_calls[1], 1);
  ck_assert_int_eq(nrec->bind_node[1], 0);
  ck_assert_int_eq(nrec->bind_calls[2], 0); /* sysfs gives GPU 2 no node */
  ck_assert_int_eq(nrec->bound_before[0], 1);
  ck_assert_int_eq(nrec->bound_before[1], 1);
  test_rm_rf(root);
}
END_TEST

/* bind_numa 0, or no GPUs: the binder is never asked anything. */
START_TEST(numa_launch_without_binding_calls_nothing)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  char err[4096];
  const int cases[][2] = {{1, 0}, {0, 1}, {0, 0}}; /* {use_gpus, bind_numa} */
  for (int c = 0; c < 3; c++) {
    memset(nrec, 0, sizeof *nrec);
    shmddp_launch_result_t res = numa_launch(2, cases[c][0], cases[c][1], 0, root, err,
                                             sizeof err);
    ck_assert_int_eq(res.exit_code, 0);
    for (int r = 0; r < 2; r++) {
      ck_assert_int_eq(nrec->ran[r], 1);
      ck_assert_msg(nrec->bus_calls[r] == 0 && nrec->bind_calls[r] == 0,
                    "use_gpus %d bind_numa %d: rank %d asked the binder", cases[c][0],
                    cases[c][1], r);
    }
    ck_assert_int_eq(nrec->nodes_calls, 0);
  }
  test_rm_rf(root);
}
END_TEST

/* A binding that fails is a warning naming the rank, the GPU, its node and why, and the rank
 * runs anyway; quiet silences it. */
START_TEST(numa_launch_failure_warns_and_runs)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  fake_pci_node(root, "0000:3c:00.0", "0");
  char err[4096];
  nrec->fail = 1;
  shmddp_launch_result_t res = numa_launch(3, 1, 1, 0, root, err, sizeof err);
  ck_assert_int_eq(res.exit_code, 0);
  for (int r = 0; r < 3; r++) ck_assert_int_eq(nrec->ran[r], 1);
  ck_assert_int_eq(nrec->bind_calls[0], 1);
  ck_assert_int_eq(nrec->bind_calls[2], 0); /* no bus id, nothing to bind */
  ck_assert_msg(strstr(err, "test: warning: rank 0: GPU 00000000:1B:00.0 is on NUMA node 1, but "
                            "the kernel refused node 1; the rank runs without NUMA binding"),
                "stderr: %s", err);
  ck_assert_msg(strstr(err, "rank 1: GPU 00000000:3C:00.0 is on NUMA node 0, but the kernel "
                            "refused node 0"), "stderr: %s", err);
  ck_assert_msg(strstr(err, "rank 2: cannot bind to the NUMA node of GPU 2: its PCI bus id is "
                            "unknown (the driver said no)"), "stderr: %s", err);
  memset(nrec, 0, sizeof *nrec);
  nrec->fail = 1;
  res = numa_launch(2, 1, 1, 1, root, err, sizeof err);
  ck_assert_int_eq(res.exit_code, 0);
  ck_assert_int_eq(nrec->bind_calls[0], 1);
  ck_assert_msg(err[0] == '\0', "quiet, yet stderr: %s", err);
  test_rm_rf(root);
}
END_TEST

/* The binder itself, called directly: its answer and message. */
START_TEST(numa_bind_gpu_answers)
{
  char root[] = "/tmp/shmddp-sysfs-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  fake_pci_node(root, "0000:1b:00.0", "1");
  coll_numa_binder_t b = {.bus_id = fake_bus_id, .sysfs_root = root, .nodes = fake_nodes,
                          .bind = fake_bind};
  char msg[512];
  int node = 5;
  ck_assert_int_eq(coll_numa_bind_gpu(&b, 0, &node, msg, sizeof msg), SHMDDP_OK);
  ck_assert_int_eq(node, 1);
  ck_assert_int_eq(coll_numa_bind_gpu(&b, 1, &node, msg, sizeof msg), SHMDDP_OK); /* no file */
  ck_assert_int_eq(node, -1);
  ck_assert_int_eq(coll_numa_bind_gpu(&b, 3, &node, msg, sizeof msg), SHMDDP_OK); /* no GPU */
  ck_assert_int_eq(node, -1);
  nrec->fail = 1;
  ck_assert_int_eq(coll_numa_bind_gpu(&b, 0, &node, msg, sizeof msg), SHMDDP_ERR_SYSTEM);
  ck_assert_int_eq(node, -1);
  ck_assert_str_eq(msg, "GPU 00000000:1B:00.0 is on NUMA node 1, but the kernel refused node 1");
  ck_assert_int_eq(coll_numa_bind_gpu(&b, 2, &node, msg, sizeof msg), SHMDDP_ERR_CUDA);
  ck_assert_ptr_nonnull(strstr(msg, "the driver said no"));
  /* The real binder is the library's own functions, reading the real sysfs. */
  const coll_numa_binder_t *real = coll_numa_binder();
  ck_assert_ptr_eq(real->nodes, shm_numa_nodes);
  ck_assert_ptr_eq(real->bind, shm_numa_bind_node);
  ck_assert_str_eq(real->sysfs_root, "/sys");
  test_rm_rf(root);
}
END_TEST

/* The real binder in a launch on this machine (CI: no GPU, or one node): nothing to do, and
 * nothing said. */
START_TEST(numa_launch_real_binder_is_quiet_here)
{
  shmddp_launch_config_t cfg = {.nproc = 2, .timeout_s = 30, .label = "test", .use_gpus = 1,
                                .bind_numa = 1};
  char err[4096];
  shmddp_launch_result_t res = launch_capturing_stderr(&cfg, numa_rank, NULL, err, sizeof err);
  ck_assert_int_eq(res.exit_code, 0);
  ck_assert(nrec->ran[0] && nrec->ran[1]);
  ck_assert_msg(strstr(err, "NUMA") == NULL, "stderr: %s", err);
}
END_TEST

/* GPUs visible (counted in a child by suite_main), for the GPU case. */
static int visible_gpus;

/* What each GPU rank of the real binder's launch saw: its GPU's bus id from CUDA, and the CPUs
 * it runs on after the launch bound it. */
typedef struct {
  int rc[SHMDDP_MAX_RANKS];
  char busid[SHMDDP_MAX_RANKS][64];
  cpu_set_t cpus[SHMDDP_MAX_RANKS];
} gpu_numa_t;

static gpu_numa_t *gnuma;

static int gpu_numa_rank(shmddp_comm_t *comm, void *arg)
{
  int r = shmddp_comm_rank(comm);
  char err[256];
  gnuma->rc[r] = coll_device_pci_bus_id(r, gnuma->busid[r], sizeof gnuma->busid[r], err,
                                        sizeof err);
  CPU_ZERO(&gnuma->cpus[r]);
  if (sched_getaffinity(0, sizeof gnuma->cpus[r], &gnuma->cpus[r]) != 0) gnuma->rc[r] = -2;
  return 0;
}

/* On real GPUs: the bus id CUDA gives each rank names a device in this machine's sysfs (CUDA's
 * 8-digit domain turned into sysfs's 4), one GPU per rank, and a rank whose GPU has a node on a
 * machine of several runs on that node's CPUs only (unless it warned that it could not). */
START_TEST(numa_gpu_ranks_find_their_gpu_in_sysfs)
{
  int n = visible_gpus < SHMDDP_MAX_RANKS ? visible_gpus : SHMDDP_MAX_RANKS;
  gnuma = test_shared_alloc(sizeof *gnuma);
  shmddp_launch_config_t cfg = {.nproc = n, .timeout_s = 60, .label = "test", .use_gpus = 1,
                                .bind_numa = 1};
  char err[4096];
  shmddp_launch_result_t res = launch_capturing_stderr(&cfg, gpu_numa_rank, NULL, err,
                                                       sizeof err);
  ck_assert_msg(res.exit_code == 0, "%s", res.message);
  ck_assert_msg(strstr(err, "PCI bus id is unknown") == NULL, "stderr: %s", err);
  int nodes = shm_numa_nodes();
  for (int r = 0; r < n; r++) {
    ck_assert_msg(gnuma->rc[r] == 0, "rank %d: no bus id (%d)", r, gnuma->rc[r]);
    char id[64];
    size_t len = strlen(gnuma->busid[r]);
    ck_assert_uint_lt(len, sizeof id);
    for (size_t i = 0; i <= len; i++) id[i] = (char)tolower((unsigned char)gnuma->busid[r][i]);
    const char *dev = len == 16 && strncmp(id, "0000", 4) == 0 ? id + 4 : id;
    char sys[256];
    snprintf(sys, sizeof sys, "/sys/bus/pci/devices/%s/numa_node", dev);
    /* (A container without /sys/bus/pci has nothing to bind by: the launch said nothing.) */
    if (access("/sys/bus/pci/devices", F_OK) == 0)
      ck_assert_msg(access(sys, R_OK) == 0, "rank %d: CUDA's bus id %s: no %s", r,
                    gnuma->busid[r], sys);
    for (int q = 0; q < r; q++)
      ck_assert_msg(strcmp(gnuma->busid[q], gnuma->busid[r]) != 0, "ranks %d and %d: GPU %s",
                    q, r, gnuma->busid[r]);
    int node = shm_numa_pick_node("/sys", gnuma->busid[r], nodes);
    char warned[32];
    snprintf(warned, sizeof warned, "rank %d: ", r);
    if (node < 0 || strstr(err, warned)) continue;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
      if (!CPU_ISSET(cpu, &gnuma->cpus[r])) continue;
      snprintf(sys, sizeof sys, "/sys/devices/system/cpu/cpu%d/node%d", cpu, node);
      ck_assert_msg(access(sys, F_OK) == 0, "rank %d, bound to node %d, runs on CPU %d", r,
                    node, cpu);
    }
  }
  munmap(gnuma, sizeof *gnuma);
}
END_TEST

/* ---- the keyed hash behind join ids ---- */

static void hex_of(const uint8_t *b, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

/* RFC 7693 appendix B, and keyed vectors made with Python's hashlib.blake2s (an independent
 * implementation): key = bytes 0..31 (0..15 for the 16-byte case), message = bytes 0, 1, 2, ...
 * of the given length; the lengths cross the 64-byte block boundary both ways. */
START_TEST(blake2s_matches_reference_vectors)
{
  static const struct {
    size_t keylen, msglen, outlen;
    const char *hex;
  } v[] = {
    {32, 0, 32, "48a8997da407876b3d79c0d92325ad3b89cbb754d86ab71aee047ad345fd2c49"},
    {32, 1, 32, "40d15fee7c328830166ac3f918650f807e7e01e177258cdc0a39b11f598066f1"},
    {32, 63, 32, "c65382513f07460da39833cb666c5ed82e61b9e998f4b0c4287cee56c3cc9bcd"},
    {32, 64, 32, "8975b0577fd35566d750b362b0897a26c399136df07bababbde6203ff2954ed4"},
    {32, 65, 32, "21fe0ceb0052be7fb0f004187cacd7de67fa6eb0938d927677f2398c132317a8"},
    {32, 128, 32, "0c311f38c35a4fb90d651c289d486856cd1413df9b0677f53ece2cd9e477c60a"},
    {32, 255, 32, "3fb735061abc519dfe979e54c1ee5bfad0a9d858b3315bad34bde999efd724dd"},
    {16, 100, 16, "56301549e674c3b72a0e1dafb7a2c620"},
  };
  uint8_t key[32], msg[300], out[32];
  char hex[65];
  for (int i = 0; i < 32; i++) key[i] = (uint8_t)i;
  for (int i = 0; i < 300; i++) msg[i] = (uint8_t)i;
  ck_assert_int_eq(shm_blake2s(out, 32, NULL, 0, "abc", 3), 0);
  hex_of(out, 32, hex);
  ck_assert_str_eq(hex, "508c5e8c327c14e2e1a72ba34eeb452f37458b209ed63a294d999b4c86675982");
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    ck_assert_int_eq(shm_blake2s(out, v[i].outlen, key, v[i].keylen, msg, v[i].msglen), 0);
    hex_of(out, v[i].outlen, hex);
    ck_assert_msg(strcmp(hex, v[i].hex) == 0, "key %zu, message %zu: %s", v[i].keylen,
                  v[i].msglen, hex);
  }
  ck_assert_int_eq(shm_blake2s(out, 33, key, 32, msg, 1), -1);
  ck_assert_int_eq(shm_blake2s(out, 32, key, 33, msg, 1), -1);
  ck_assert_int_eq(shm_ct_differ(key, key, 32), 0);
  ck_assert_int_ne(shm_ct_differ(key, msg + 1, 32), 0);
}
END_TEST

static Suite *shm_suite(const suite_env_t *env)
{
  Suite *s = suite_create("shm");
  SUITE_CASE(s, "segment", segment_is_unlinked_and_laid_out, segment_refuses_bad_sizes_with_advice,
             blake2s_matches_reference_vectors, env_reader_refuses_junk_range_and_overflow,
             staging_file_is_reserved_private_and_checked);
  TCase *tc = SUITE_CASE(s, "launcher", launch_runs_every_rank, launch_rejects_bad_world_sizes,
                         failed_rank_stops_the_others, killed_rank_ends_the_run_within_2s,
                         unresponsive_rank_is_killed_after_grace,
                         barrier_timeout_names_the_absent_rank, abort_reaches_every_rank,
                         sigterm_asks_ranks_to_stop, sigint_asks_ranks_to_stop,
                         inherited_ignored_sigint_stays_ignored, repeated_sigterm_is_absorbed,
                         bad_environment_is_refused_at_launch_and_join, eight_ranks_oversubscribed);
  tcase_add_checked_fixture(tc, setup, teardown);
  SUITE_CASE(s, "numa", numa_node_from_sysfs, numa_pick_node_binds_only_where_it_helps,
             numa_bind_node_reports_failures);
  tc = SUITE_CASE(s, "numa_launch", numa_launch_binds_each_gpu_rank_to_its_node,
                  numa_launch_without_binding_calls_nothing, numa_launch_failure_warns_and_runs,
                  numa_bind_gpu_answers, numa_launch_real_binder_is_quiet_here);
  tcase_add_checked_fixture(tc, numa_setup, numa_teardown);
#ifdef HAVE_CUDA
  const int cuda_built = 1;
#else
  const int cuda_built = 0;
#endif
  visible_gpus = env->gpus;
  if (suite_gpu_cases(env, 1, cuda_built, "numa_gpu_ranks_find_their_gpu_in_sysfs"))
    SUITE_CASE(s, "numa_gpu", numa_gpu_ranks_find_their_gpu_in_sysfs);
  return s;
}

SUITE_MAIN("check_shm", shm_suite, SUITE_SOME_GPU)
