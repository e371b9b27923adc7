/* job.h — a training job: what the launcher prepares before forking (the datasets, opened and
 * checked; the batch arithmetic; the output folder). */
#ifndef SRC_TRAIN_JOB_H
#define SRC_TRAIN_JOB_H

#include <stdio.h>

#include "src/data/data.h"
#include "src/train/options.h"

typedef struct {
  train_config_t cfg;
  data_set_t *train, *val;
  long steps_per_epoch, total_steps;
  FILE *out;  /* rank 0's progress and result line; NULL: stdout */
  int quiet;  /* no progress lines (the result line and files are still written) */
  const char *world_desc; /* how the ranks are spread (MPI: nodes), for the first line; or NULL */
  size_t swept; /* temporary files a killed run left in --out, removed when the job opened */
} train_job_t;

/* In the launcher, before any rank exists: open and check the datasets, work out the steps
 * (and the default warm-up), check that every rank gets at least one batch, create --out and
 * remove the temporary files a killed run left there (only ours, only where no writer lives).
 * The message names the file or flag at fault. */
int train_job_open(train_job_t *job, const train_config_t *cfg, char *err, size_t errlen);
void train_job_close(train_job_t *job);

#endif
