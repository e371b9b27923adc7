/* job_open.c — everything a run needs that can be checked before the ranks are forked: the GPU
 * backend's libraries (loaded here, shared by the forked ranks), the datasets (a broken PNG
 * stops the run here, not in epoch 3), the batch arithmetic, the checkpoint to resume from, and
 * the output folder (run_dir.c). */
#include "config.h"

#include "src/app/job_open.h"

#include <stdlib.h>
#include <string.h>

#include "src/app/run_dir.h"
#include "src/check.h"
#include "src/data/sampler.h"
#include "src/device/device.h"
#include "src/obs/outfile.h"
#include "src/train/ckpt_state.h"

/* The temporary files of the files a run writes into --out (outfile.h) that a killed run left:
 * removed, unless a live writer holds them (another run in the same folder). */
static int sweep_out(train_job_t *job, char *err, size_t errlen)
{
  static const char *const written[] = {"checkpoint.ckpt", "summary.json", "log.jsonl",
                                        "dp_devices.json", "timeline-rank*.json"};
  return outfile_sweep(job->cfg.out_dir, written, sizeof written / sizeof written[0],
                       &job->swept, err, errlen);
}

/* --resume, before anything starts or is written: the checkpoint reads, its settings are this
 * run's (the length aside), and this run reaches past its step. An automatic warm-up is the
 * checkpoint's, so a longer run keeps the warm-up it had. */
static int check_resume(train_job_t *job, ckpt_run_t *run, char *err, size_t errlen)
{
  train_config_t *c = &job->cfg;
  char desc[1024], key[1024], stored[2048] = "";
  long step = 0;
  train_config_describe(c, desc, sizeof desc);
  ckpt_state_run_key(desc, key, sizeof key);
  int rc = ckpt_state_check(c->resume, key, &step, stored, sizeof stored, run, err, errlen);
  const char *w = strstr(stored, " warmup_steps=");
  if (rc != 0 && c->warmup_auto && w && atol(w + 14) != c->warmup_steps) {
    c->warmup_steps = atol(w + 14);
    train_config_describe(c, desc, sizeof desc);
    ckpt_state_run_key(desc, key, sizeof key);
    rc = ckpt_state_check(c->resume, key, &step, stored, sizeof stored, run, err, errlen);
  }
  if (rc != 0) return -1;
  job->resume_step = step;
  if (step > job->total_steps)
    return check_fail(err, errlen,
                      "--resume %s: the checkpoint is at step %ld, past the %ld steps of this "
                      "run; give more --epochs or --steps (a resumed run may be longer, not "
                      "shorter)",
                      c->resume, step, job->total_steps);
  if (c->stop_after > 0 && c->stop_after <= step)
    return check_fail(err, errlen,
                      "--stop-after %ld: %s resumes after step %ld, past it; --stop-after counts "
                      "steps from the start of training (the log's step numbers): give a step "
                      "after %ld",
                      c->stop_after, c->resume, step, step);
  return 0;
}

int train_job_open(train_job_t *job, const train_config_t *cfg, char *err, size_t errlen)
{
  memset(job, 0, sizeof *job);
  job->cfg = *cfg;
  if (cfg->device == MODEL_DEVICE_CUDA && dev_gpu_backend_load(NULL, 0, err, errlen) != 0)
    return -1;
  ckpt_run_t resumed = {.id = ""};
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
                          .max_pixels = (size_t)cfg->max_image_pixels,
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
    if (rc == 0 && cfg->resume[0]) rc = check_resume(job, &resumed, err, errlen);
    if (rc == 0 && job->cfg.warmup_steps > job->total_steps) {
      rc = check_fail(err, errlen,
                      "--warmup-steps: %ld is more than the %ld steps this run takes; "
                      "give at most %ld (or more --epochs)",
                      job->cfg.warmup_steps, job->total_steps, job->total_steps);
    }
  }
  /* The run's id: a resumed run keeps its checkpoint's (one written before runs had ids gets a
   * new one). */
  if (rc == 0 && resumed.id[0]) snprintf(job->run_id, sizeof job->run_id, "%s", resumed.id);
  else if (rc == 0) rc = ckpt_run_new_id(job->run_id, err, errlen);
  if (rc == 0) rc = run_dir_choose(job, cfg->resume[0] ? &resumed : NULL, err, errlen);
  /* A folder that exists may hold what a killed run left (a new one under runs/ holds nothing). */
  if (rc == 0 && !job->out_fresh) rc = sweep_out(job, err, errlen);
  /* A directory's validation split, as it was made (for the settings line). */
  if (rc == 0 && !cfg->synthetic) job->cfg.val_size = (long)job->val->size;
  if (rc != 0) train_job_close(job);
  return rc;
}

int train_job_claim(train_job_t *job, FILE *say, char *err, size_t errlen)
{
  return run_dir_claim(job, say, err, errlen);
}

int train_job_resume_from(train_job_t *job, const char *path, char *err, size_t errlen)
{
  ckpt_run_t resumed;
  snprintf(job->cfg.resume, sizeof job->cfg.resume, "%s", path);
  CHECK(check_resume(job, &resumed, err, errlen));
  if (strcmp(resumed.id, job->run_id) != 0)
    return check_fail(err, errlen, "%s belongs to another run (%.8s, this run is %.8s)", path,
                      resumed.id, job->run_id);
  run_dir_find_log(job, &resumed);
  return 0;
}

void train_job_close(train_job_t *job)
{
  data_destroy(job->train);
  data_destroy(job->val);
  job->train = job->val = NULL;
}
