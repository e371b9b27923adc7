/* loop.c — the training loop (see loop.h), for DDP and DataParallel alike: per optimizer step up to
 * accum_steps micro-batches of forward and backward (gradients reduced on the last), the loss
 * scaler's check, the optimizer update on the learning-rate schedule; validation after each
 * epoch; checkpoints, the log and the progress. Every decision that must be the same on all ranks
 * (skip a step, stop, the loss that is logged) comes out of one small agreement per step
 * (step_agreement_t), so ranks never diverge. */
#include "config.h"

#include "src/train/loop.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/clock.h"
#include "src/device/arena.h"
#include "src/obs/run_summary.h"
#include "src/model/amp.h"
#include "src/model/optim.h"
#include "src/obs/progress.h"
#include "src/obs/report_log.h"
#include "src/obs/run_end.h"
#include "src/obs/timeline.h"
#include "src/train/batch_io.h"
#include "src/train/ckpt_state.h"

/* The step's agreement: what every process contributes, summed over the processes in one call
 * (with the engine's per-process numbers behind it). */
typedef struct {
  double loss;      /* each process's mean loss over its micro-batches (summed: / processes) */
  double nonfinite; /* processes that found an inf or NaN gradient */
  double stop;      /* processes asked to stop (SIGINT, SIGTERM) */
  double images;    /* images trained on in the step */
} step_agreement_t;

enum { AGREE_LOSS, AGREE_NONFINITE, AGREE_STOP, AGREE_IMAGES, AGREE_FIELDS };

/* One optimizer step, as taken and measured. */
typedef struct {
  double loss;     /* agreed: the mean over processes */
  double lr, loss_scale;
  double seconds, wait_s, comm_s, syncbn_s;
  double images;   /* over every process */
  int skipped;     /* fp16: non-finite gradients, the update was skipped */
  int stop;        /* a stop request or --stop-after: the run stops after this step */
} step_t;

typedef struct {
  engine_t *e;
  const train_job_t *job;
  const train_config_t *cfg;
  optim_t *opt;
  optim_config_t oc;
  amp_scaler_t scaler;
  metrics_t conf;
  progress_t progress;
  report_log_t *log;
  long step; /* optimizer steps taken (from the start of training, a resumed run's included) */
  const loader_batch_t *prefetched; /* the next batch, already uploaded (pipelined engines) */
  const float *px;
  const int32_t *py;
  double *agree; /* AGREE_FIELDS, then the engine's slots */
  size_t nagree;
  char memory_json[2048];
  FILE *out;               /* rank 0's progress and result line */
  train_result_t *res;
  train_progress_t start;  /* where training starts: the beginning, or a checkpoint's place */
  long timing_from;        /* steps up to this one are left out of images/s */
  double train_time;       /* seconds of the timed steps */
  long images_timed;       /* images of the timed steps */
  double epoch_loss;       /* the epoch in progress: the sum of its steps' losses */
  long epoch_steps;
  double val_loss, last_val_s; /* the last validation's loss and seconds */
  int stop;                /* a stop request or --stop-after ended the run */
  int validated_ever;
  long saved_step;         /* the step of the last checkpoint this run wrote; -1: none */
  double saved_at;         /* when (clock_s) */
  train_progress_t pos;    /* where the last step left the run (a checkpoint's place) */
} run_t;

/* --stop-after N: the run stops (with a checkpoint, as if interrupted) once step N (counted from
 * the start of training, like every step number in the log) is done. The one place that says so;
 * every rank computes the same answer from the same numbers. */
static int stop_after_reached(const train_config_t *c, long step)
{
  return c->stop_after > 0 && step >= c->stop_after;
}

/* Whether step `step` is the last one by plan (the run's steps, or --stop-after): after it no
 * batch is needed. */
static int last_by_plan(const run_t *r, long step)
{
  return step >= r->job->total_steps || stop_after_reached(r->cfg, step);
}

/* The next training batch from the loader, uploaded to the engine's device (queued). */
static int next_batch(run_t *r, const loader_batch_t **b, const float **x, const int32_t **y,
                      double *wait, char *err, size_t errlen)
{
  engine_t *e = r->e;
  int tl = timeline_begin(TIMELINE_DATA_WAIT, NULL);
  int got = loader_next(e->loader, b, err, errlen);
  timeline_end(tl, NULL);
  *wait += loader_last_wait_s(e->loader);
  if (got != 1) {
    if (got == 0) check_fail(err, errlen, "the loader ended the epoch early");
    return -1;
  }
  if (e->ops->upload(e, *b, x, y, err, errlen) != 0) {
    loader_release(e->loader, *b);
    return -1;
  }
  return 0;
}

/* The optimizer update, on the timeline. */
static int update(run_t *r, double lr, double grad_scale, char *err, size_t errlen)
{
  void *stream = model_stream(r->e->model);
  int tl = timeline_begin(TIMELINE_OPTIMIZER, stream);
  int rc = r->e->ops->update(r->e, r->opt, lr, grad_scale, err, errlen);
  timeline_end(tl, stream);
  return rc;
}

/* What the micro-batches of one step add up to on this process. */
typedef struct {
  int micro, images;
  double wait_s, loss_sum, comm_s, syncbn_s;
  int applied; /* the update was queued right behind the last micro-batch (early) */
} micro_sum_t;

/* Up to accum_steps micro-batches of the epoch's nbatches (*taken so far), each queued and then
 * waited for; early: the update at lr is queued right behind the last one, and the next batch's
 * upload behind it, before the host waits for the loss. */
static int micro_batches(run_t *r, size_t nbatches, size_t *taken, int sync_bn, double lr,
                         int early, micro_sum_t *ms, char *err, size_t errlen)
{
  engine_t *e = r->e;
  const int K = r->cfg->accum_steps;
  while (ms->micro < K && *taken < nbatches) {
    const loader_batch_t *b = r->prefetched;
    const float *x = r->px;
    const int32_t *y = r->py;
    r->prefetched = NULL;
    if (!b) CHECK(next_batch(r, &b, &x, &y, &ms->wait_s, err, errlen));
    (*taken)++;
    int last = ms->micro + 1 == K || *taken == nbatches;
    engine_micro_t mb = {0};
    int rc = e->ops->queue(e, x, y, b->n, (float)amp_scaler_scale(&r->scaler), ms->micro > 0,
                           last, sync_bn, err, errlen);
    if (rc == 0 && early && last) {
      rc = update(r, lr, 1.0, err, errlen);
      ms->applied = 1;
      if (rc == 0 && *taken < nbatches && !last_by_plan(r, r->step + 1))
        rc = next_batch(r, &r->prefetched, &r->px, &r->py, &ms->wait_s, err, errlen);
    }
    if (rc == 0) rc = e->ops->finish(e, last, &mb, err, errlen);
    ms->images += b->n;
    /* b's upload came before its step, which is done once its loss is read: its buffer can go
     * back to the loader (a prefetched upload behind it is not waited for). */
    loader_release(e->loader, b);
    if (rc != 0) return -1;
    ms->syncbn_s += mb.syncbn_s;
    ms->comm_s += mb.comm_s;
    ms->loss_sum += mb.loss;
    ms->micro++;
  }
  return 0;
}

/* The step's agreement: this process's contribution (and the engine's per-process numbers)
 * summed over the processes in one call; *a gets the sums. */
static int agree_step(run_t *r, const micro_sum_t *ms, int nonfinite, step_agreement_t *a,
                 char *err, size_t errlen)
{
  engine_t *e = r->e;
  r->agree[AGREE_LOSS] = ms->loss_sum / ms->micro;
  r->agree[AGREE_NONFINITE] = nonfinite;
  r->agree[AGREE_STOP] = e->ops->stop_requested(e);
  r->agree[AGREE_IMAGES] = ms->images;
  if (e->ops->extra_fill) e->ops->extra_fill(e, r->agree + AGREE_FIELDS);
  int tl = timeline_begin(TIMELINE_AGREE, NULL);
  int rc = e->ops->sum(e, r->agree, r->nagree, err, errlen);
  timeline_end(tl, NULL);
  if (rc != 0) return -1;
  *a = (step_agreement_t){.loss = r->agree[AGREE_LOSS],
                          .nonfinite = r->agree[AGREE_NONFINITE],
                          .stop = r->agree[AGREE_STOP],
                          .images = r->agree[AGREE_IMAGES]};
  return 0;
}

/* One optimizer step: the micro-batches (forward, backward, gradients reduced on the last), the
 * loss scaler's check, the agreement, and the update. */
static int train_step(run_t *r, size_t nbatches, size_t *taken, int sync_bn, step_t *s,
                      char *err, size_t errlen)
{
  engine_t *e = r->e;
  const train_config_t *c = r->cfg;
  model_t *m = e->model;
  double t0 = clock_s();
  CHECK(timeline_step(r->step + 1, err, errlen));
  int tl_step = timeline_begin(TIMELINE_STEP, NULL);
  /* A pipelined engine (a GPU) without loss scaling or accumulation does not wait for the
   * agreement: the optimizer is queued right behind the step, then the next batch's upload behind
   * it, and only then does the host wait, for the step's loss alone. The GPU is never idle while
   * the host agrees with the other ranks and launches the next step. */
  const int early = e->pipelined && !r->scaler.enabled && c->accum_steps == 1;
  const double lr = optim_lr_at(&r->oc, r->step);
  micro_sum_t ms = {0};
  CHECK(micro_batches(r, nbatches, taken, sync_bn, lr, early, &ms, err, errlen));
  int nonfinite = 0;
  if (r->scaler.enabled)
    CHECK(amp_check_nonfinite(model_grads(m), model_flat_size(m), arena_device(model_arena(m)),
                              model_stream(m), &nonfinite, err, errlen));
  step_agreement_t a;
  CHECK(agree_step(r, &ms, nonfinite, &a, err, errlen));
  double loss = a.loss / e->ranks;
  if (!isfinite(loss) && !r->scaler.enabled)
    return check_fail(err, errlen,
                      "the loss became %g at step %ld: training diverged; lower --lr (now %g) or "
                      "raise --warmup-steps",
                      loss, r->step + 1, c->lr);
  double scale = amp_scaler_scale(&r->scaler);
  int apply = amp_scaler_update(&r->scaler, a.nonfinite > 0);
  if (apply && !ms.applied) CHECK(update(r, lr, 1.0 / (scale * ms.micro), err, errlen));
  timeline_end(tl_step, NULL);
  r->step++;
  *s = (step_t){.loss = loss,
                .lr = lr,
                .loss_scale = scale,
                .seconds = clock_s() - t0,
                .wait_s = ms.wait_s,
                .comm_s = ms.comm_s,
                .syncbn_s = ms.syncbn_s,
                .images = a.images,
                .skipped = !apply,
                .stop = a.stop > 0 || stop_after_reached(c, r->step)};
  return 0;
}

/* Rank 0 writes the checkpoint; the others go on (the next step's agreement orders them). */
static int save_checkpoint(run_t *r, const train_progress_t *p, char *err, size_t errlen)
{
  r->saved_step = p->step;
  r->saved_at = clock_s();
  if (r->e->rank != 0) return 0;
  const train_config_t *c = r->cfg;
  char path[TRAIN_PATH_MAX + 32], desc[1024], key[1024];
  snprintf(path, sizeof path, "%s/checkpoint.ckpt", c->out_dir);
  train_config_describe(c, desc, sizeof desc);
  ckpt_state_run_key(desc, key, sizeof key);
  ckpt_run_t run = {.classes = c->classes};
  snprintf(run.id, sizeof run.id, "%s", r->job->run_id);
  memcpy(run.class_value, c->class_value, sizeof run.class_value);
  return ckpt_state_save(path, key, &run, r->e->model, r->opt, &r->scaler, p, err, errlen);
}

/* Whether a checkpoint is written after step `step` of the epoch (end: its last batch): every
 * --save-every steps; at the run's end and at a stop (final); with --max-restarts and no
 * --save-every at every epoch's end and once TRAIN_SAVE_AUTO_S have passed since the last one
 * (rank 0 alone writes, so its clock alone decides). */
static int save_due(const run_t *r, long step, int final, int end)
{
  const train_config_t *c = r->cfg;
  if (final || (c->save_every > 0 && step % c->save_every == 0)) return 1;
  return c->save_auto && (end || clock_s() - r->saved_at >= TRAIN_SAVE_AUTO_S);
}

static int setup(run_t *r, char *err, size_t errlen)
{
  engine_t *e = r->e;
  const train_config_t *c = r->cfg;
  train_config_optim(c, &r->oc);
  r->oc.total_steps = r->job->total_steps;
  CHECK(optim_config_validate(&r->oc, err, errlen));
  amp_scaler_init(&r->scaler, c->precision);
  if (metrics_init(&r->conf, c->classes) != 0)
    return check_fail(err, errlen, "out of memory for the confusion counts");
  r->nagree = AGREE_FIELDS + (e->ops->extra_slots ? e->ops->extra_slots(e) : 0);
  r->agree = calloc(r->nagree, sizeof *r->agree);
  if (!r->agree) return check_fail(err, errlen, "out of memory for the step's agreement");
  model_t *m = e->model;
  /* The optimizer state exists once per process, with the master weights (DataParallel: on
   * device 0, ARENA_OPTIM of its ledger). */
  return optim_create(&r->opt, &r->oc, model_flat_size(m), model_arena(m), err, errlen);
}

static void teardown(run_t *r)
{
  char err[256];
  timeline_close(err, sizeof err); /* while its streams exist; a failed run keeps its trace */
  if (r->opt) optim_destroy(r->opt);
  metrics_free(&r->conf);
  free(r->agree);
  report_log_close(r->log);
}

/* Validation after `epoch` (rank 0 reports it). */
static int validate(run_t *r, long epoch, double *val_loss, double *seconds, char *err,
                    size_t errlen)
{
  double tv = clock_s();
  CHECK(r->e->ops->validate(r->e, r->job, &r->conf, val_loss, err, errlen));
  *seconds = clock_s() - tv;
  if (r->e->rank != 0) return 0;
  run_summary_ledger_json(model_arena(r->e->model), r->memory_json, sizeof r->memory_json);
  return 0;
}

/* The datasets' label counts (scanned datasets only) into res. */
static void count_labels(const train_job_t *job, train_result_t *res)
{
  const data_set_t *sets[2] = {job->train, job->val};
  const train_config_t *c = &job->cfg;
  res->classes = c->classes;
  res->labels_counted = sets[0]->counted && sets[1]->counted;
  for (int s = 0; s < 2 && res->labels_counted; s++) {
    for (int k = 0; k < c->classes && k < SUMMARY_MAX_CLASSES; k++)
      res->label_pixels[s][k] = sets[s]->label_pixels[k];
    res->ignored_pixels[s] = sets[s]->label_pixels[c->ignore_index & 255];
  }
}

static progress_mode_t progress_mode(int option)
{
  switch (option) {
  case TRAIN_PROGRESS_BAR: return PROGRESS_BAR;
  case TRAIN_PROGRESS_LINES: return PROGRESS_LINES;
  case TRAIN_PROGRESS_OFF: return PROGRESS_OFF;
  default: return PROGRESS_AUTO;
  }
}

/* Rank 0: the progress, the log and the run's first lines. */
static int open_outputs(run_t *r, char *err, size_t errlen)
{
  engine_t *e = r->e;
  const train_job_t *job = r->job;
  long spe = job->steps_per_epoch, total = job->total_steps;
  if (e->rank != 0) return 0;
  progress_init(&r->progress, r->out, total, (int)((total + spe - 1) / spe), r->cfg->log_every,
                progress_mode(r->cfg->progress));
  /* A resumed (or restarted) run continues its own run's log, found by the run's id
   * (run_dir.h); the records past its checkpoint go, to be written again. */
  int continued = job->log_from[0] != 0;
  if (continued)
    CHECK(report_log_continue(&r->log, r->cfg->out_dir, job->log_from, r->start.step,
                              job->run_id, err, errlen));
  else
    CHECK(report_log_open(&r->log, r->cfg->out_dir, job->run_id, err, errlen));
  if (job->quiet) return 0;
  char who[256], desc[1024], plan[256];
  e->ops->describe(e, job, who, sizeof who);
  train_config_describe(r->cfg, desc, sizeof desc);
  model_plan_describe(e->model, plan, sizeof plan);
  progress_print(&r->progress, "train: %s, %zu parameters, %zu training / %zu validation "
                 "samples, %ld steps\n  %s\n  %s", who, model_num_params(e->model),
                 job->train->size, job->val->size, total, desc, plan);
  summary_print_labels(r->out, r->res);
  if (r->cfg->resume[0])
    progress_print(&r->progress, "train: resumed from %s at step %ld (epoch %ld, batch %ld)%s",
                   r->cfg->resume, r->start.step, r->start.epoch + 1, r->start.batches_taken,
                   r->start.step < total ? "" : "; nothing left to train");
  if (r->cfg->resume[0] && !continued && r->start.step > 0)
    progress_print(&r->progress, "train: no log of this run was found (in %s or beside the "
                   "checkpoint): log.jsonl starts at step %ld", r->cfg->out_dir,
                   r->start.step + 1);
  return 0;
}

/* --resume: the weights, optimizer, scaler and place in the data from the checkpoint. */
static int resume(run_t *r, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  char desc[1024], key[1024];
  train_config_describe(c, desc, sizeof desc);
  ckpt_state_run_key(desc, key, sizeof key);
  CHECK(ckpt_state_load(c->resume, key, r->e->model, r->opt, &r->scaler, &r->start, err,
                        errlen));
  if (c->stop_after > 0 && c->stop_after <= r->start.step)
    return check_fail(err, errlen,
                      "--stop-after %ld: %s resumes after step %ld, past it; --stop-after counts "
                      "steps from the start of training (the log's step numbers): give a step "
                      "after %ld",
                      c->stop_after, c->resume, r->start.step, r->start.step);
  return 0;
}

static int open_timeline(run_t *r, char *err, size_t errlen)
{
  engine_t *e = r->e;
  if (!e->timeline) return 0;
  arena_t *a = model_arena(e->model);
  timeline_config_t tc = {.dir = r->cfg->out_dir,
                          .rank = e->rank,
                          .world = e->world,
                          .device_label = arena_label(a),
                          .cuda_device = arena_device(a),
                          .stream = model_stream(e->model),
                          .first_step = r->timing_from + 1,
                          .steps = r->cfg->timeline_steps};
  return timeline_open(&tc, err, errlen);
}

/* Rank 0 after step s: the progress line and the log's record. */
static int report_step(run_t *r, const step_t *s, long epoch, int timed, char *err,
                       size_t errlen)
{
  engine_t *e = r->e;
  long step = r->step, total = r->job->total_steps, spe = r->job->steps_per_epoch;
  double ips = r->train_time > 0 ? r->images_timed / r->train_time : s->images / s->seconds;
  double per_step =
      r->train_time > 0 ? r->train_time / (double)(step - r->timing_from) : s->seconds;
  double eta = (double)(total - step) * per_step +
               r->last_val_s * (double)((total - step + spe - 1) / spe);
  if (!r->job->quiet) progress_step(&r->progress, step, epoch, s->loss, s->lr, ips, eta);
  if (e->ops->extra_step)
    e->ops->extra_step(e, timed, r->agree + AGREE_FIELDS, s->seconds * 1e3, s->wait_s * 1e3,
                       s->comm_s * 1e3, s->syncbn_s * 1e3);
  report_step_t rec = {.step = step,
                       .epoch = epoch,
                       .loss = s->loss,
                       .lr = s->lr,
                       .loss_scale = s->loss_scale,
                       .images_per_s = s->images / s->seconds,
                       .step_ms = s->seconds * 1e3,
                       .data_wait_ms = s->wait_s * 1e3,
                       .exposed_comm_ms = s->comm_s * 1e3,
                       .syncbn_ms = s->syncbn_s * 1e3,
                       .skipped = s->skipped,
                       .extra = e->ops->extra_json ? e->ops->extra_json(e) : NULL};
  if (report_log_step(r->log, &rec) != 0)
    return check_fail(err, errlen, "%s/log.jsonl: write failed (disk full?)", r->cfg->out_dir);
  return 0;
}

/* Epoch `epoch`'s steps (a resumed epoch from its next batch), until its end, the run's end or
 * a stop. */
static int run_epoch(run_t *r, int epoch, char *err, size_t errlen)
{
  engine_t *e = r->e;
  const train_config_t *c = r->cfg;
  long total = r->job->total_steps;
  /* A resumed epoch restarts at its next batch: batches are runs of the epoch's sample list. */
  size_t taken_before = epoch == r->start.epoch ? (size_t)r->start.batches_taken : 0;
  int rc = e->ops->epoch_start(e, epoch, taken_before, err, errlen);
  size_t nbatches = loader_num_batches(e->loader), taken = 0;
  int sync_bn = c->sync_bn && epoch >= c->sync_bn_from_epoch;
  if (epoch != r->start.epoch) {
    r->epoch_loss = 0;
    r->epoch_steps = 0;
  }
  while (rc == 0 && taken < nbatches && r->step < total && !r->stop) {
    step_t s = {0};
    rc = train_step(r, nbatches, &taken, sync_bn, &s, err, errlen);
    if (rc != 0) break;
    r->stop = s.stop;
    long step = r->step;
    int timed = step > r->timing_from; /* early steps pay for first touches of memory */
    if (timed) {
      r->train_time += s.seconds;
      r->images_timed += (long)s.images;
    }
    if (step == 1) r->res->initial_loss = s.loss;
    r->epoch_loss += s.loss;
    r->epoch_steps++;
    int final = r->stop || step >= total || (taken == nbatches && epoch + 1 >= c->epochs);
    r->pos = (train_progress_t){.step = step,
                                .epoch = epoch,
                                .batches_taken = (long)(taken_before + taken),
                                .epoch_loss = r->epoch_loss,
                                .epoch_steps = r->epoch_steps,
                                .initial_loss = r->res->initial_loss};
    if (save_due(r, step, final, taken == nbatches)) {
      rc = save_checkpoint(r, &r->pos, err, errlen);
      if (rc != 0) break;
    }
    if (e->ops->step_done) e->ops->step_done(e, timed, s.seconds);
    if (e->rank == 0) rc = report_step(r, &s, epoch, timed, err, errlen);
  }
  if (r->prefetched) { /* stopped with the next batch uploaded: it was not trained on */
    if (e->ops->fence(e, err, errlen) != 0 && rc == 0) rc = -1; /* its copy is done */
    loader_release(e->loader, r->prefetched);
    r->prefetched = NULL;
  }
  return rc;
}

/* Validation after `epoch`, reported by rank 0. */
static int validate_epoch(run_t *r, int epoch, char *err, size_t errlen)
{
  CHECK(validate(r, epoch, &r->val_loss, &r->last_val_s, err, errlen));
  r->validated_ever = 1;
  if (r->e->rank != 0) return 0;
  if (!r->job->quiet)
    progress_val(&r->progress, epoch, r->step, r->val_loss, metrics_miou(&r->conf),
                 metrics_present_count(&r->conf), r->conf.classes,
                 metrics_pixel_accuracy(&r->conf), r->last_val_s);
  report_val_t v = {.step = r->step,
                    .epoch = epoch,
                    .loss = r->val_loss,
                    .miou = metrics_miou(&r->conf),
                    .acc = metrics_pixel_accuracy(&r->conf),
                    .seconds = r->last_val_s};
  report_log_val(r->log, &v, r->memory_json);
  return 0;
}

/* The run's numbers into *res; rank 0 reports them and writes summary.json. */
static int finish(run_t *r, int epochs_started, double t_start, char *err, size_t errlen)
{
  engine_t *e = r->e;
  const train_config_t *c = r->cfg;
  train_result_t *res = r->res;
  res->steps = r->step;
  res->epochs = epochs_started;
  res->images_per_s = r->train_time > 0 ? r->images_timed / r->train_time : 0;
  res->train_loss = r->epoch_steps > 0 ? r->epoch_loss / r->epoch_steps : NAN;
  res->val_loss = r->val_loss;
  if (r->validated_ever) {
    res->val_miou = metrics_miou(&r->conf);
    res->val_acc = metrics_pixel_accuracy(&r->conf);
  }
  res->classes = c->classes;
  for (int k = 0; k < c->classes && k < SUMMARY_MAX_CLASSES; k++)
    res->class_iou[k] = r->validated_ever ? metrics_iou(&r->conf, k) : NAN;
  res->miou_classes = r->validated_ever ? metrics_present_count(&r->conf) : 0;
  res->skipped_steps = r->scaler.skipped_steps;
  res->wall_s = clock_s() - t_start;
  res->run_id = r->job->run_id;
  res->restarts = r->job->restarts;
  res->nrestarts = r->job->nrestarts;
  if (e->rank != 0) return 0;
  if (!r->job->quiet) progress_end(&r->progress);
  if (r->stop)
    fprintf(r->out, "train: stopped after step %ld; checkpoint %s/checkpoint.ckpt (continue with "
            "--resume)\n", r->step, c->out_dir);
  int rc = e->ops->report(e, r->job, r->out, res, r->step - r->start.step, err, errlen);
  summary_print_classes(r->out, res);
  summary_print_result(r->out, res);
  run_end_print(r->out, c->out_dir, r->saved_step, r->job->program, r->job->restarts,
                r->job->nrestarts, c->max_restarts);
  char desc[1024];
  train_config_describe(c, desc, sizeof desc);
  if (rc == 0)
    rc = summary_write_json(c->out_dir, res, desc, r->memory_json[0] ? r->memory_json : NULL,
                            err, errlen);
  return rc;
}

int train_loop(engine_t *e, const train_job_t *job, train_result_t *res, char *err,
               size_t errlen)
{
  double t_start = clock_s();
  run_t r = {.e = e,
             .job = job,
             .cfg = &job->cfg,
             .out = job->out ? job->out : stdout,
             .res = res,
             .start = {.initial_loss = NAN},
             .val_loss = NAN,
             .saved_step = -1,
             .saved_at = t_start};
  memset(res, 0, sizeof *res);
  const train_config_t *c = r.cfg;
  count_labels(job, res);
  int rc = setup(&r, err, errlen);
  /* the checkpoint first: a refused one leaves --out as it was */
  if (rc == 0 && c->resume[0]) rc = resume(&r, err, errlen);
  if (rc == 0) rc = open_outputs(&r, err, errlen);
  res->world = e->world;
  res->initial_loss = res->train_loss = res->val_loss = NAN;
  res->val_miou = res->val_acc = NAN; /* "none" until a validation says otherwise */
  r.epoch_loss = r.start.epoch_loss;
  r.epoch_steps = r.start.epoch_steps;
  r.step = r.start.step;
  r.timing_from = r.step + c->timing_warmup;
  r.pos = r.start;
  if (rc == 0) rc = open_timeline(&r, err, errlen);
  res->initial_loss = r.start.initial_loss;
  int epoch = 0, validated = 0, epochs_started = (int)r.start.epoch;
  for (epoch = (int)r.start.epoch; rc == 0 && epoch < c->epochs && r.step < job->total_steps &&
                                   !r.stop; epoch++) {
    epochs_started = epoch + 1;
    validated = 0;
    rc = run_epoch(&r, epoch, err, errlen);
    if (rc != 0 || r.stop) break;
    rc = validate_epoch(&r, epoch, err, errlen);
    validated = 1;
  }
  /* The model of every run that ended well, at its last step (here: a resumed run with
   * nothing left to train, into a folder of its own). */
  if (rc == 0 && r.saved_step != r.step) rc = save_checkpoint(&r, &r.pos, err, errlen);
  if (rc == 0 && !validated && !r.stop && r.step > 0) {
    double seconds;
    rc = validate(&r, epoch, &r.val_loss, &seconds, err, errlen);
    r.validated_ever = 1;
  }
  if (rc == 0) rc = e->ops->peaks(e, res->peak_mib, err, errlen);
  if (rc == 0) rc = timeline_close(err, errlen); /* a run shorter than the window writes now */
  if (rc == 0) rc = finish(&r, epochs_started, t_start, err, errlen);
  teardown(&r);
  return rc;
}

int engine_new(engine_t **out, const engine_ops_t *ops, size_t impl_bytes, char *err,
               size_t errlen)
{
  *out = NULL;
  engine_t *e = calloc(1, sizeof *e);
  void *impl = calloc(1, impl_bytes);
  if (!e || !impl) {
    free(e);
    free(impl);
    return check_fail(err, errlen, "out of memory creating the engine");
  }
  e->ops = ops;
  e->impl = impl;
  *out = e;
  return 0;
}

int engine_loaders(engine_t *e, const train_job_t *job, int batch, int workers, int pinned,
                   loader_t **val, char *err, size_t errlen)
{
  const train_config_t *c = &job->cfg;
  loader_config_t lc = {.data = job->train,
                        .augment = {.crop = c->image_size,
                                    .random = 1,
                                    .seed = c->seed,
                                    .classes = c->classes,
                                    .ignore_label = c->ignore_index},
                        .batch_size = batch,
                        .workers = workers,
                        /* a GPU engine takes the next batch before it releases the one in its
                         * step (the upload is queued behind the step): two slots at least */
                        .depth = pinned && workers < 1 ? 2 : 0,
                        .alloc = pinned ? batch_io_host_alloc : NULL,
                        .free = pinned ? batch_io_host_free : NULL};
  CHECK(loader_create(&e->loader, &lc, err, errlen));
  lc.data = job->val;
  lc.augment.random = 0;
  lc.workers = c->workers > 0 ? 1 : 0; /* validation is short; one thread keeps it fed */
  return loader_create(val, &lc, err, errlen);
}

int engine_train(engine_t *e, int created_rc, const train_job_t *job, train_result_t *res,
                 char *err, size_t errlen)
{
  int rc = created_rc;
  if (rc == 0) rc = train_loop(e, job, res, err, errlen);
  else memset(res, 0, sizeof *res);
  if (e) e->ops->destroy(e);
  return rc;
}
