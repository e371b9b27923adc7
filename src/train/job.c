/* job.c — everything a run needs that can be checked before the ranks are forked: the
 * datasets (a broken PNG stops the run here, not in epoch 3), the batch arithmetic, and the
 * output folder. */
#include "config.h"

#include "src/train/job.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "src/check.h"
#include "src/data/sampler.h"

/* mkdir -p */
static int make_dirs(const char *path, char *err, size_t errlen)
{
  char buf[TRAIN_PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != 0) continue;
    char c = *p;
    *p = 0;
    struct stat st;
    if (stat(buf, &st) != 0 && mkdir(buf, 0777) != 0 && errno != EEXIST) {
      return check_fail(err, errlen, "--out: cannot create %s: %s", buf, strerror(errno));
    }
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
    return check_fail(err, errlen, "--out: %s is not a directory", path);
  }
  return 0;
}

int train_job_open(train_job_t *job, const train_config_t *cfg, char *err, size_t errlen)
{
  memset(job, 0, sizeof *job);
  job->cfg = *cfg;
  int rc;
  if (cfg->synthetic) {
    /* The shapes have at most DATA_SYNTH_MAX_CLASSES labels; a wider head (many classes, the
     * DataParallel imbalance case) trains on those and never sees the rest. */
    int labels = cfg->classes < DATA_SYNTH_MAX_CLASSES ? cfg->classes : DATA_SYNTH_MAX_CLASSES;
    data_synth_config_t sc = {
        .seed = cfg->seed,
        .size = (size_t)cfg->train_size,
        .classes = labels,
        /* a margin around the crop, so random crops move the shapes */
        .image_size = cfg->image_size + cfg->image_size / 8,
        .split = DATA_SPLIT_TRAIN};
    rc = data_open_synthetic(&job->train, &sc, err, errlen);
    sc.size = (size_t)cfg->val_size;
    sc.split = DATA_SPLIT_VAL;
    if (rc == 0) rc = data_open_synthetic(&job->val, &sc, err, errlen);
  } else {
    data_png_opts_t po = {.classes = cfg->classes,
                          .min_size = cfg->image_size,
                          .val_size = cfg->val_size,
                          .ignore_label = cfg->ignore_index,
                          .map = cfg->mask_mapped ? cfg->mask_map : NULL};
    rc = data_open_png_dir_opts(&job->train, &job->val, cfg->data_dir, &po, err, errlen);
  }
  if (rc == 0) {
    sampler_config_t sc = {.dataset_size = job->train->size,
                           .world = cfg->nproc,
                           .rank = 0,
                           .shuffle = 1,
                           .drop_last = cfg->drop_last,
                           .seed = cfg->seed};
    rc = sampler_validate(&sc, err, errlen);
    size_t per = rc == 0 ? sampler_per_rank(&sc) : 0;
    if (rc == 0 && cfg->drop_last && per < (size_t)cfg->batch_size) {
      rc = check_fail(err, errlen,
                      "--batch-size: %d is more than the %zu training samples each of %d "
                      "ranks gets per epoch, and --drop-last drops incomplete batches; lower "
                      "--batch-size, use fewer ranks or more data",
                      cfg->batch_size, per, cfg->nproc);
    }
    /* Batches are cut from each rank's share; accum_steps micro-batches make a step (the last
     * step of an epoch may have fewer). */
    size_t B = (size_t)cfg->batch_size, K = (size_t)cfg->accum_steps;
    size_t batches = cfg->drop_last ? per / B : (per + B - 1) / B;
    job->steps_per_epoch = (long)((batches + K - 1) / K);
    job->total_steps = job->steps_per_epoch * cfg->epochs;
    if (cfg->steps > 0 && cfg->steps < job->total_steps) job->total_steps = cfg->steps;
    if (rc == 0 && cfg->warmup_auto && job->cfg.warmup_steps > job->total_steps / 5)
      job->cfg.warmup_steps = job->total_steps / 5;
    if (rc == 0 && job->cfg.warmup_steps > job->total_steps) {
      rc = check_fail(err, errlen,
                      "--warmup-steps: %ld is more than the %ld steps this run takes; "
                      "give at most %ld (or more --epochs)",
                      cfg->warmup_steps, job->total_steps, job->total_steps);
    }
  }
  if (rc == 0) rc = make_dirs(cfg->out_dir, err, errlen);
  if (rc != 0) train_job_close(job);
  return rc;
}

void train_job_close(train_job_t *job)
{
  data_destroy(job->train);
  data_destroy(job->val);
  job->train = job->val = NULL;
}
