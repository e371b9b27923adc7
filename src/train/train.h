/* train.h — a training run: what the launcher prepares before forking (the datasets, opened and
 * checked; the output folder), and the loop every rank runs. */
#ifndef SRC_TRAIN_TRAIN_H
#define SRC_TRAIN_TRAIN_H

#include <stdio.h>

#include "shmddp.h"
#include "src/data/data.h"
#include "src/obs/summary.h"
#include "src/train/train_config.h"
#include "src/world/world.h"

typedef struct {
  train_config_t cfg;
  data_set_t *train, *val;
  long steps_per_epoch, total_steps;
  FILE *out;  /* rank 0's progress and result line; NULL: stdout */
  int quiet;  /* no progress lines (the result line and files are still written) */
  const char *world_desc; /* how the ranks are spread (MPI: nodes), for the first line; or NULL */
} train_job_t;

/* In the launcher, before any rank exists: open and check the datasets, work out the steps
 * (and the default warm-up), check that every rank gets at least one batch, and create --out.
 * The message names the file or flag at fault. */
int train_job_open(train_job_t *job, const train_config_t *cfg, char *err, size_t errlen);
void train_job_close(train_job_t *job);

/* The whole run on one DDP rank (comm NULL: a single process, no group), by the training loop
 * (src/train/loop.c). Rank 0 prints progress and the result line and writes summary.json and
 * log.jsonl into --out. *result gets the same numbers on every rank. Returns 0, or -1 with a
 * message. */
int train_run(shmddp_comm_t *comm, const train_job_t *job, train_result_t *result, char *err,
              size_t errlen);

/* The same over any world (src/world/: several machines over MPI). */
int train_run_world(world_t *world, const train_job_t *job, train_result_t *result, char *err,
                    size_t errlen);

/* shmddp_rank_fn for shmddp_launch (arg: a train_job_t): train_run, and on failure the rank's
 * message on stderr and the group aborted, so the other ranks stop at once. */
int train_rank(shmddp_comm_t *comm, void *job);

#endif
