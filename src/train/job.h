/* job.h — a training job: what the launcher prepares before forking (the datasets, opened and
 * checked; the batch arithmetic; the output folder). */
#ifndef SRC_TRAIN_JOB_H
#define SRC_TRAIN_JOB_H

#include <stdio.h>

#include "src/data/data.h"
#include "src/obs/summary.h"
#include "src/train/ckpt_run.h"
#include "src/train/options.h"

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

/* In the launcher, before any rank exists: open and check the datasets, work out the steps
 * (and the default warm-up), check that every rank gets at least one batch, check --resume's
 * checkpoint, and choose and check the run's folder (run_dir.h), creating a given --out and
 * removing the temporary files a killed run left there (only ours, only where no writer lives).
 * The message names the file or flag at fault. */
int train_job_open(train_job_t *job, const train_config_t *cfg, char *err, size_t errlen);
/* The process that writes --out, once every check has passed, just before the ranks start: a
 * new folder is made (and runs/latest pointed at it), or the files of the run --overwrite
 * replaces are removed; what was done is said on `say` (NULL: nothing). */
int train_job_claim(train_job_t *job, FILE *say, char *err, size_t errlen);
/* Continue from the checkpoint at path (a restart): check it as --resume is checked, and find
 * the log to continue. */
int train_job_resume_from(train_job_t *job, const char *path, char *err, size_t errlen);
void train_job_close(train_job_t *job);

#endif
