/* testutil.h — what the Check suites share: memory that survives into forked ranks,
 * scratch directories removed, and a launch wrapper that fails the test with the launcher's
 * message. */
#ifndef TESTS_TESTUTIL_H
#define TESTS_TESTUTIL_H

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shmddp.h"

/* Zeroed memory shared with ranks forked later (MAP_SHARED | MAP_ANONYMOUS). */
static inline void *test_shared_alloc(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(p, MAP_FAILED);
  return p;
}

/* Removes a test's scratch directory and everything in it; says so when it cannot. */
static inline void test_rm_rf(const char *dir)
{
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* Entries of /dev/shm whose name starts with prefix. */
static inline int test_count_prefix(const char *prefix)
{
  DIR *d = opendir("/dev/shm");
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

/* Number of entries in /dev/shm created by a launcher with this pid. */
static inline int test_count_segments(pid_t pid)
{
  char prefix[64];
  snprintf(prefix, sizeof prefix, "shmddp-%d-", (int)pid);
  return test_count_prefix(prefix);
}

static inline shmddp_launch_result_t test_launch(int nproc, double timeout_s, size_t slot_bytes,
                                                 shmddp_rank_fn fn, void *arg)
{
  shmddp_launch_config_t cfg = {0};
  cfg.nproc = nproc;
  cfg.timeout_s = timeout_s;
  cfg.slot_bytes = slot_bytes;
  cfg.label = "test";
  cfg.quiet = 1;
  shmddp_launch_result_t res;
  shmddp_status_t st = shmddp_launch(&cfg, fn, arg, &res);
  ck_assert_msg(st == SHMDDP_OK, "launch failed: %s", res.message);
  return res;
}

#endif
