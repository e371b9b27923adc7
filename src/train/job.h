/* job.h — a training job: what the training loop is given (the settings, the datasets, the
 * batch arithmetic, the output folder, the run's record), as job_open.c prepares it before the
 * ranks are forked. */
#ifndef SRC_TRAIN_JOB_H
#define SRC_TRAIN_JOB_H

#include <stdio.h>

#include "src/data/data.h"
#include "src/obs/summary.h"
#include "src/train/ckpt_run.h"
#include "src/train/train_config.h"

#define TRAIN_MAX_RESTARTS 100

typedef struct {
  train_config_t cfg;     /* cfg.out_dir: the run's folder, as train_job_open chose it */
  data_set_t *train, *val;
  long steps_per_epoch, total_steps;
  FILE *out;  /* rank 0's progress and result line; NULL: stdout */
  int quiet;  /* no progress lines (the result line and files are still written) */
  const char *world_desc; /* how the ranks are spread (MPI: nodes), for the first line; or NULL */
  const char *program;    /* argv[0], to name shmddp-predict beside it; or NULL */
  char run_id[CKPT_RUN_ID_HEX + 1]; /* this run's (a resumed run's is its checkpoint's) */
  long resume_step;       /* --resume: the checkpoint's step */
  /* --resume: the log.jsonl of this run that the new log continues ("": none was found, a new
   * log starts), found by the run's id (run_dir.h) */
  char log_from[TRAIN_PATH_MAX + 16];
  int out_fresh;          /* cfg.out_dir is a new folder under runs/, made by train_job_claim */
  int out_replace;        /* --overwrite: the other run's files in cfg.out_dir go at the claim */
  char other_run[CKPT_RUN_ID_HEX + 1]; /* the run --overwrite replaces, when it is known */
  summary_restart_t restarts[TRAIN_MAX_RESTARTS]; /* --max-restarts: those made so far */
  int nrestarts;
  size_t swept; /* temporary files a killed run left in --out, removed when the job opened */
} train_job_t;

#endif
