/* join_harness.h — what the suites of communicators joined by id share: a tally that lists every
 * failing case, and the harness that starts ranks as separate processes through the environment
 * (fork + exec of the suite itself in worker mode, as torchrun or mpirun would start them) and
 * waits for the files they write. Waits are for events; HANG_BOUND_S only bounds a hang. */
#ifndef TESTS_JOIN_HARNESS_H
#define TESTS_JOIN_HARNESS_H

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/timeutil.h"
#include "collectives/comm.h"
#include "shmddp.h"
#include "tests/failures.h"

#define HANG_BOUND_S 180.0

/* ---- a tally of checks that names every failing case ---- */

typedef struct {
  long checks, failures;
  char fails[1536];
} tally_t;

static void record(tally_t *t, int bad, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), unused));
static void record(tally_t *t, int bad, const char *fmt, ...)
{
  t->checks++;
  if (!bad) return;
  t->failures++;
  va_list ap;
  va_start(ap, fmt);
  fail_list_vadd(t->fails, sizeof t->fails, 2, fmt, ap);
  va_end(ap);
}

/* ---- worker side ---- */

typedef struct {
  const char *dir;
  int rank, nranks;
  shmddp_unique_id_t id;
} worker_env_t;

/* What the harness passed; 0, or -1 when the id does not parse. */
static int worker_env(worker_env_t *w)
{
  w->dir = getenv("SHMDDP_TEST_DIR");
  w->rank = atoi(getenv("SHMDDP_TEST_RANK"));
  w->nranks = atoi(getenv("SHMDDP_TEST_NRANKS"));
  return shmddp_unique_id_from_string(getenv("SHMDDP_TEST_ID"), &w->id) == SHMDDP_OK ? 0 : -1;
}

/* Write DIR/rankR.SUFFIX whole (renamed into place: the harness never reads half a file). */
static void write_file(const char *dir, int rank, const char *suffix, const char *text)
{
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/rank%d.%s", dir, rank, suffix);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
  rename(tmp, path);
}

/* ---- harness side ---- */

typedef struct {
  char dir[256];
  char id[SHMDDP_UNIQUE_ID_STRLEN];
  char seg_name[128]; /* /dev/shm/<the id's segment name> */
} group_t;

static void group_new(group_t *g)
{
  snprintf(g->dir, sizeof g->dir, "/tmp/shmddp-join-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g->dir));
  shmddp_unique_id_t id;
  ck_assert_int_eq(shmddp_get_unique_id(&id), SHMDDP_OK);
  ck_assert_int_eq(shmddp_unique_id_to_string(&id, g->id, sizeof g->id), SHMDDP_OK);
  char name[96];
  coll_id_segment_name(&id, name, sizeof name);
  snprintf(g->seg_name, sizeof g->seg_name, "/dev/shm%s", name);
}

/* Start rank of nranks as this program in worker mode; timeout: SHMDDP_TIMEOUT, or NULL. */
static pid_t spawn_rank(const group_t *g, const char *scenario, int nranks, int rank,
                        const char *timeout)
{
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    char buf[32];
    setenv("SHMDDP_TEST_WORKER", scenario, 1);
    setenv("SHMDDP_TEST_DIR", g->dir, 1);
    setenv("SHMDDP_TEST_ID", g->id, 1);
    snprintf(buf, sizeof buf, "%d", rank);
    setenv("SHMDDP_TEST_RANK", buf, 1);
    snprintf(buf, sizeof buf, "%d", nranks);
    setenv("SHMDDP_TEST_NRANKS", buf, 1);
    if (timeout) setenv("SHMDDP_TIMEOUT", timeout, 1);
    char *argv[] = {"shmddp-test-worker", NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  return pid;
}

/* Wait for a worker's file; returns its text (static buffer) or fails the test. */
static const char *wait_file(const group_t *g, int rank, const char *suffix)
{
  static char text[2048];
  char path[512];
  snprintf(path, sizeof path, "%s/rank%d.%s", g->dir, rank, suffix);
  double deadline = shm_now() + HANG_BOUND_S;
  for (;;) {
    FILE *f = fopen(path, "r");
    if (f) {
      size_t n = fread(text, 1, sizeof text - 1, f);
      text[n] = 0;
      fclose(f);
      return text;
    }
    ck_assert_msg(shm_now() < deadline, "rank %d never wrote %s", rank, suffix);
    shm_sleep(0.002);
  }
}

static int wait_exit(pid_t pid)
{
  int ws = 0;
  double deadline = shm_now() + HANG_BOUND_S;
  for (;;) {
    pid_t r = waitpid(pid, &ws, WNOHANG);
    if (r == pid) return ws;
    if (shm_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &ws, 0);
      ck_abort_msg("worker %d did not exit", (int)pid);
    }
    shm_sleep(0.002);
  }
}

/* The group's segment is gone from /dev/shm; its files are removed. */
static void group_done(const group_t *g)
{
  struct stat sb;
  ck_assert_msg(stat(g->seg_name, &sb) != 0 && errno == ENOENT, "%s was left behind",
                g->seg_name);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g->dir);
  ck_assert_int_eq(system(cmd), 0);
}

#endif
