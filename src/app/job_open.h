/* job_open.h — a training job prepared in the launcher, before any rank is forked: the
 * datasets opened and checked, the batch arithmetic, the checkpoint to resume from, the run's
 * folder chosen and claimed (run_dir.h). */
#ifndef SRC_APP_JOB_OPEN_H
#define SRC_APP_JOB_OPEN_H

#include <stddef.h>
#include <stdio.h>

#include "src/train/job.h"

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
