/* train_run.h — a whole training on CPU ranks, as the train program runs it: the command line
 * parsed (for a machine without GPUs), the job opened, nproc forked ranks launched under label,
 * the job closed. The test fails with the message of the step that failed; the run's own output
 * goes to /dev/null. */
#ifndef TESTS_TRAIN_RUN_H
#define TESTS_TRAIN_RUN_H

#include <check.h>
#include <stdio.h>

#include "shmddp.h"
#include "src/app/job_open.h"
#include "src/train/loop_ddp.h"
#include "src/app/options.h"

/* argv: argc entries and a NULL after them, "train" first. */
static inline void test_train_run(const char *label, int nproc, int argc, char **argv)
{
  train_machine_t m = {.visible_gpus = 0, .cuda_built = 0, .online_cpus = 2};
  train_config_t cfg;
  char err[1024];
  int rc = train_config_parse(&cfg, argc, argv, &m, stderr, err, sizeof err);
  ck_assert_msg(rc == 0, "parse: %s", err);
  train_job_t job;
  ck_assert_msg(train_job_open(&job, &cfg, err, sizeof err) == 0, "job: %s", err);
  FILE *devnull = fopen("/dev/null", "w");
  job.out = devnull;
  job.quiet = 1;
  shmddp_launch_config_t lc = {0};
  lc.nproc = nproc;
  lc.timeout_s = 60;
  lc.label = label;
  lc.quiet = 1;
  shmddp_launch_result_t res;
  ck_assert_int_eq(shmddp_launch(&lc, train_rank, &job, &res), SHMDDP_OK);
  ck_assert_msg(res.exit_code == 0, "training failed: %s", res.message);
  fclose(devnull);
  train_job_close(&job);
}

#endif
