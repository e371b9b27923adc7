/* relaunch.c — launching the ranks, and restarting them after a rank died (see relaunch.h). */
#include "config.h"

#include "src/app/relaunch.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "src/app/job_open.h"
#include "src/obs/report_log.h"
#include "src/train/loop_ddp.h"

/* The run's own log.jsonl (written by the ranks so far), to be continued by the next launch. */
static void own_log(train_job_t *job)
{
  char path[sizeof job->log_from], id[CKPT_RUN_ID_HEX + 1];
  snprintf(path, sizeof path, "%s/log.jsonl", job->cfg.out_dir);
  if (report_log_run_id(path, id, sizeof id) == 1 && strcmp(id, job->run_id) == 0)
    snprintf(job->log_from, sizeof job->log_from, "%s", path);
}

/* After a failed launch: set the job up to start again from the run's last checkpoint (the
 * one it was resumed from, or its start, while it has written none), and record the restart.
 * 0, or -1 with a message saying why the run cannot go on. */
static int prepare_restart(train_job_t *job, const char *reason, char *err, size_t errlen)
{
  char ckpt[TRAIN_PATH_MAX + 32];
  snprintf(ckpt, sizeof ckpt, "%s/checkpoint.ckpt", job->cfg.out_dir);
  struct stat st;
  long step = 0;
  if (stat(ckpt, &st) == 0) {
    if (train_job_resume_from(job, ckpt, err, errlen) != 0) return -1;
    step = job->resume_step;
  } else if (job->cfg.resume[0]) {
    step = job->resume_step;
  }
  summary_restart_t *r = &job->restarts[job->nrestarts++];
  r->step = step;
  snprintf(r->reason, sizeof r->reason, "%s", reason);
  if (report_log_restart(job->cfg.out_dir, job->run_id, step, job->nrestarts, reason, err,
                         errlen) != 0)
    return -1;
  own_log(job); /* after the record: a log is made for it when the ranks had made none */
  return 0;
}

void train_launch_config(const train_config_t *c, shmddp_launch_config_t *lc)
{
  memset(lc, 0, sizeof *lc);
  lc->nproc = c->nproc;
  lc->timeout_s = c->timeout_s;
  lc->use_gpus = c->device == MODEL_DEVICE_CUDA;
  lc->bind_numa = lc->use_gpus && c->numa_bind;
  lc->label = "train";
}

shmddp_status_t train_relaunch(train_job_t *job, const shmddp_launch_config_t *lc,
                               shmddp_launch_result_t *res)
{
  const int max = job->cfg.max_restarts;
  for (;;) {
    fflush(NULL); /* the ranks inherit stdio buffers: nothing may be pending at fork */
    shmddp_status_t st = shmddp_launch(lc, train_rank, job, res);
    if (st != SHMDDP_OK || res->exit_code == 0 || res->interrupted || max == 0) return st;
    char err[1024];
    if (job->nrestarts >= max || job->nrestarts >= TRAIN_MAX_RESTARTS) {
      fprintf(stderr, "train: no restart left: the run failed after %d restart%s "
              "(--max-restarts %d); the last: %s\n", job->nrestarts,
              job->nrestarts == 1 ? "" : "s", max, res->message);
      return st;
    }
    if (prepare_restart(job, res->message, err, sizeof err) != 0) {
      fprintf(stderr, "train: cannot restart the ranks: %s\n", err);
      return st;
    }
    const summary_restart_t *r = &job->restarts[job->nrestarts - 1];
    if (r->step > 0)
      fprintf(stderr, "train: restarting every rank from the checkpoint at step %ld (restart %d "
              "of %d)\n", r->step, job->nrestarts, max);
    else
      fprintf(stderr, "train: restarting every rank from the start, no checkpoint was written "
              "yet (restart %d of %d)\n", job->nrestarts, max);
  }
}
