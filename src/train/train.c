/* train.c — the training loop every rank runs: model, DDP engine, optimizer and loaders; per
 * optimizer step K micro-batches of forward+backward (gradients all-reduced on the last), the
 * loss-scaler check, the optimizer update on the learning-rate schedule; validation after each
 * epoch. Every decision that must be the same on all ranks (skip a step, stop early, the loss
 * that is logged) comes out of one small all-reduce per step, so ranks never diverge. */
#include "config.h"

#include "src/train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/check.h"
#include "src/model/amp.h"
#include "src/device/arena.h"
#include "src/parallel/ddp.h"
#include "src/data/loader.h"
#include "src/train/metrics.h"
#include "src/model/optim.h"
#include "src/obs/progress.h"
#include "src/obs/report_log.h"
#include "src/obs/run_summary.h"
#include "src/data/sampler.h"
#include "src/parallel/step_graph.h"
#include "src/obs/timeline.h"
#include "src/train/train_ckpt.h"
#include "src/train/train_device.h"

typedef struct {
  const train_job_t *job;
  const train_config_t *cfg;
  shmddp_comm_t *comm;
  int rank, world;
  model_t *model;
  train_dev_t *dev; /* batches to the GPU (NULL on the CPU) */
  ddp_t *ddp;
  step_graph_t *graph; /* the training step, eagerly or as a replayed CUDA graph */
  optim_t *opt;
  optim_config_t oc;
  amp_scaler_t scaler;
  loader_t *train_loader, *val_loader;
  sampler_config_t train_sampler, val_sampler;
  size_t *indices;
  uint8_t *is_pad;
  int32_t *pred;
  metrics_t conf;
  progress_t progress;
  report_log_t *log;
  run_summary_t *obs; /* every rank's memory and GPU use per step; the end-of-run table */
  char memory_json[2048];
} run_t;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int setup(run_t *r, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  model_config_t mc;
  train_config_model(c, r->comm ? shmddp_comm_device(r->comm) : 0, &mc);
  if (model_create(&r->model, &mc, err, errlen) != 0) return -1;
  if (train_dev_create(&r->dev, r->model, c->batch_size, (size_t)c->image_size * c->image_size,
                       err, errlen) != 0)
    return -1;
  ddp_config_t dc = {c->bucket_mb, c->sync_bn, model_stream(r->model)};
  if (ddp_create(&r->ddp, r->comm, r->model, &dc, err, errlen) != 0) return -1;
  if (ddp_sync_initial(r->ddp, err, errlen) != 0) return -1;

  /* CUDA graphs bake in the loss scale and the batch: fp16's dynamic scale is captured again
   * whenever it changes (rarely: it grows every few thousand steps); not with gradient
   * accumulation, or a timeline (which times each op). */
  step_graph_config_t gc = {r->model, r->ddp,
                            c->cuda_graph && c->accum_steps == 1 && c->timeline_steps == 0,
                            c->batch_size};
  if (step_graph_create(&r->graph, &gc, err, errlen) != 0) return -1;

  train_config_optim(c, &r->oc);
  if (optim_config_validate(&r->oc, err, errlen) != 0) return -1;
  amp_scaler_init(&r->scaler, c->precision);

  r->train_sampler = (sampler_config_t){r->job->train->size, r->world, r->rank, 1, c->drop_last,
                                        c->seed};
  r->val_sampler = (sampler_config_t){r->job->val->size, r->world, r->rank, 0, 0, c->seed};
  if (sampler_validate(&r->train_sampler, err, errlen) != 0 ||
      sampler_validate(&r->val_sampler, err, errlen) != 0)
    return -1;
  size_t most = sampler_per_rank(&r->train_sampler);
  if (sampler_per_rank(&r->val_sampler) > most) most = sampler_per_rank(&r->val_sampler);
  r->indices = malloc(most * sizeof *r->indices);
  r->is_pad = malloc(most);
  r->pred = malloc((size_t)c->batch_size * c->image_size * c->image_size * sizeof *r->pred);
  if (!r->indices || !r->is_pad || !r->pred || metrics_init(&r->conf, c->classes) != 0) {
    return check_fail(err, errlen, "out of memory for the sample lists and predictions");
  }
  loader_config_t lc = {r->job->train, {c->image_size, 1, c->seed, c->classes, c->ignore_index},
                        c->batch_size, c->workers, 0, NULL, NULL, NULL};
  if (r->dev) {
    lc.alloc = train_dev_host_alloc;
    lc.free = train_dev_host_free;
  }
  if (loader_create(&r->train_loader, &lc, err, errlen) != 0) return -1;
  lc.data = r->job->val;
  lc.augment.random = 0;
  lc.workers = c->workers > 0 ? 1 : 0; /* validation is short; one thread keeps it fed */
  return loader_create(&r->val_loader, &lc, err, errlen);
}

static void teardown(run_t *r)
{
  char err[256];
  timeline_close(err, sizeof err); /* while its streams exist; a failed run keeps its trace */
  loader_destroy(r->train_loader);
  loader_destroy(r->val_loader);
  if (r->opt) optim_destroy(r->opt);
  step_graph_destroy(r->graph);
  if (r->ddp) ddp_destroy(r->ddp);
  train_dev_destroy(r->dev);
  if (r->model) model_destroy(r->model);
  metrics_free(&r->conf);
  free(r->indices);
  free(r->is_pad);
  free(r->pred);
  report_log_close(r->log);
  run_summary_destroy(r->obs);
}

/* The next training batch from the loader, uploaded to the model's device (queued). */
static int next_batch(run_t *r, const loader_batch_t **b, const float **x, const int32_t **y,
                      double *wait, char *err, size_t errlen)
{
  int tl = timeline_begin(TIMELINE_DATA_WAIT, NULL);
  int got = loader_next(r->train_loader, b, err, errlen);
  timeline_end(tl, NULL);
  *wait += loader_last_wait_s(r->train_loader);
  if (got != 1) {
    if (got == 0) check_fail(err, errlen, "the loader ended the epoch early");
    return -1;
  }
  const int S = r->cfg->image_size;
  tl = r->dev ? timeline_begin(TIMELINE_UPLOAD, model_stream(r->model)) : -1;
  timeline_args(tl, (double)(*b)->n * S * S * 16, 0); /* x f32, y i32 */
  int rc = train_dev_upload(r->dev, *b, x, y, err, errlen);
  timeline_end(tl, model_stream(r->model));
  if (rc != 0) loader_release(r->train_loader, *b);
  return rc;
}

/* Sharded validation: each rank evaluates its share (padding left out), then the loss sums,
 * pixel counts and confusion counts are summed over ranks in one call. */
static int validate(run_t *r, double *loss, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  /* Without SyncBN each rank's running statistics drifted apart: evaluate rank 0's, as PyTorch
   * DDP does by broadcasting buffers. */
  if (ddp_broadcast_buffers(r->ddp, err, errlen) != 0) return -1;
  size_t n = sampler_per_rank(&r->val_sampler);
  if (sampler_epoch(&r->val_sampler, 0, r->indices, r->is_pad) != 0 ||
      loader_start(r->val_loader, 0, r->indices, r->is_pad, n, 0, err, errlen) != 0) {
    return check_fail(err, errlen, "out of memory starting validation");
  }
  metrics_reset(&r->conf);
  double loss_sum = 0, pixels = 0;
  const loader_batch_t *b;
  int got;
  const size_t px = (size_t)c->image_size * c->image_size;
  while ((got = loader_next(r->val_loader, &b, err, errlen)) == 1) {
    /* Padding is a suffix of the rank's list, so the real samples lead every batch. */
    if (b->valid > 0) {
      float l;
      const float *x;
      const int32_t *y;
      if (train_dev_upload(r->dev, b, &x, &y, err, errlen) != 0 ||
          model_eval(r->model, x, y, b->valid, train_dev_pred(r->dev, r->pred), &l, err,
                     errlen) != 0 ||
          train_dev_fetch_pred(r->dev, r->pred, (size_t)b->valid * px, err, errlen) != 0) {
        loader_release(r->val_loader, b);
        return -1;
      }
      double counted = 0;
      for (size_t i = 0; i < (size_t)b->valid * px; i++) counted += b->y[i] >= 0 && b->y[i] < c->classes;
      if (counted > 0) {
        loss_sum += (double)l * counted;
        pixels += counted;
      }
      metrics_add(&r->conf, b->y, r->pred, (size_t)b->valid * px);
    }
    loader_release(r->val_loader, b);
  }
  if (got < 0) return -1;
  size_t k2 = metrics_count_len(&r->conf);
  double *vals = malloc((k2 + 2) * sizeof *vals);
  if (!vals) {
    return check_fail(err, errlen, "out of memory for validation counts");
  }
  vals[0] = loss_sum;
  vals[1] = pixels;
  memcpy(vals + 2, r->conf.counts, k2 * sizeof *vals);
  int rc = ddp_sum_host(r->ddp, vals, k2 + 2, err, errlen);
  if (rc == 0) {
    memcpy(r->conf.counts, vals + 2, k2 * sizeof *vals);
    *loss = vals[1] > 0 ? vals[0] / vals[1] : NAN;
  }
  free(vals);
  return rc;
}

/* Rank 0 writes the checkpoint; the others go on (the next step's agreement orders them). */
static int save_checkpoint(run_t *r, const train_progress_t *p, char *err, size_t errlen)
{
  if (r->rank != 0) return 0;
  char path[TRAIN_PATH_MAX + 32], desc[1024], key[1024];
  snprintf(path, sizeof path, "%s/checkpoint.ckpt", r->cfg->out_dir);
  train_config_describe(r->cfg, desc, sizeof desc);
  train_ckpt_run_key(desc, key, sizeof key);
  return train_ckpt_save(path, key, r->model, r->opt, &r->scaler, p, err, errlen);
}

static void finish_result(run_t *r, train_result_t *res, double val_loss, double t_start)
{
  res->val_loss = val_loss;
  res->val_miou = metrics_miou(&r->conf);
  res->val_acc = metrics_pixel_accuracy(&r->conf);
  res->classes = r->cfg->classes;
  for (int k = 0; k < r->cfg->classes && k < SUMMARY_MAX_CLASSES; k++)
    res->class_iou[k] = metrics_iou(&r->conf, k);
  res->skipped_steps = r->scaler.skipped_steps;
  res->wall_s = now_s() - t_start;
}

int train_run(shmddp_comm_t *comm, const train_job_t *job, train_result_t *res, char *err,
              size_t errlen)
{
  double t_start = now_s();
  run_t r;
  memset(&r, 0, sizeof r);
  memset(res, 0, sizeof *res);
  r.job = job;
  r.cfg = &job->cfg;
  r.comm = comm;
  r.rank = comm ? shmddp_comm_rank(comm) : 0;
  r.world = comm ? shmddp_comm_size(comm) : 1;
  const train_config_t *c = r.cfg;
  FILE *out = job->out ? job->out : stdout;
  if (r.world != c->nproc) {
    return check_fail(err, errlen, "the job was planned for %d ranks but runs on %d", c->nproc,
                      r.world);
  }
  int rc = setup(&r, err, errlen);

  long spe = job->steps_per_epoch, total = job->total_steps;
  r.oc.total_steps = total;
  if (rc == 0) rc = optim_create(&r.opt, &r.oc, model_num_params(r.model),
                                 model_arena(r.model), err, errlen);
  if (rc == 0 && r.rank == 0) {
    progress_init(&r.progress, out, total, (int)((total + spe - 1) / spe), c->log_every);
    rc = report_log_open(&r.log, c->out_dir, err, errlen);
    if (rc == 0 && !job->quiet) {
      char desc[1024];
      train_config_describe(c, desc, sizeof desc);
      progress_print(&r.progress, "train: %d rank%s, %zu parameters, %zu training / %zu "
                     "validation samples, %ld steps\n  %s", r.world, r.world == 1 ? "" : "s",
                     model_num_params(r.model), job->train->size, job->val->size, total, desc);
    }
  }
  res->world = r.world;
  res->initial_loss = res->train_loss = res->val_loss = NAN;
  /* Where training starts: the beginning, or where a checkpoint left off. */
  train_progress_t start = {0, 0, 0, 0, 0, NAN};
  if (rc == 0 && c->resume[0]) {
    char desc[1024], key[1024];
    train_config_describe(c, desc, sizeof desc);
    train_ckpt_run_key(desc, key, sizeof key);
    rc = train_ckpt_load(c->resume, key, r.model, r.opt, &r.scaler, &start, err, errlen);
    if (rc == 0 && r.rank == 0 && !job->quiet)
      progress_print(&r.progress, "train: resumed from %s at step %ld (epoch %ld, batch %ld)",
                     c->resume, start.step, start.epoch + 1, start.batches_taken);
  }
  double val_loss = NAN, last_val_s = 0, train_time = 0, epoch_loss = start.epoch_loss;
  long step = start.step, epoch_steps = start.epoch_steps, images_timed = 0;
  long timing_from = step + c->timing_warmup;
  if (rc == 0)
    rc = run_summary_create(&r.obs, r.rank, r.world, model_arena(r.model), err, errlen);
  if (rc == 0) {
    timeline_config_t tc = {c->out_dir, r.rank, r.world, arena_label(model_arena(r.model)),
                            arena_device(model_arena(r.model)), model_stream(r.model),
                            timing_from + 1, c->timeline_steps};
    rc = timeline_open(&tc, err, errlen);
  }
  res->initial_loss = start.initial_loss;
  int stop = 0, epoch = 0, validated = 0, epochs_started = (int)start.epoch;
  const loader_batch_t *prefetched = NULL; /* the next batch, already uploaded (GPU) */
  const float *px = NULL;
  const int32_t *py = NULL;
  for (epoch = (int)start.epoch; rc == 0 && epoch < c->epochs && step < total && !stop; epoch++) {
    size_t n = sampler_per_rank(&r.train_sampler);
    sampler_epoch(&r.train_sampler, epoch, r.indices, r.is_pad);
    /* A resumed epoch restarts at its next batch: batches are runs of the rank's sample list. */
    size_t skip = epoch == start.epoch ? (size_t)start.batches_taken * (size_t)c->batch_size : 0;
    if (skip > n) skip = n;
    rc = loader_start(r.train_loader, epoch, r.indices + skip, r.is_pad + skip, n - skip,
                      c->drop_last, err, errlen);
    size_t nbatches = loader_num_batches(r.train_loader), taken = 0;
    size_t taken_before = epoch == start.epoch ? (size_t)start.batches_taken : 0;
    int sync_bn = c->sync_bn && epoch >= c->sync_bn_from_epoch;
    epochs_started = epoch + 1;
    if (epoch != start.epoch) {
      epoch_loss = 0;
      epoch_steps = 0;
    }
    validated = 0;
    while (rc == 0 && taken < nbatches && step < total && !stop) {
      /* One optimizer step: up to accum_steps micro-batches, all-reduce on the last. */
      double t0 = now_s(), wait = 0, loss_sum = 0, comm_s = 0, syncbn_s = 0;
      int micro = 0, images = 0;
      if (timeline_step(step + 1, err, errlen) != 0) {
        rc = -1;
        break;
      }
      int tl_step = timeline_begin(TIMELINE_STEP, NULL), tl;
      /* On a GPU without loss scaling or accumulation the optimizer does not wait for the
       * agreement: it is queued right behind the step, then the next batch's upload behind it,
       * and only then does the host wait, for the step's loss alone. The GPU is never idle while
       * the host agrees with the other ranks and launches the next step. */
      const int early = r.dev && !r.scaler.enabled && c->accum_steps == 1;
      const double lr = optim_lr_at(&r.oc, step);
      int applied = 0;
      while (rc == 0 && micro < c->accum_steps && taken < nbatches) {
        const loader_batch_t *b = prefetched;
        const float *x = px;
        const int32_t *y = py;
        prefetched = NULL;
        if (!b) {
          rc = next_batch(&r, &b, &x, &y, &wait, err, errlen);
          if (rc != 0) break;
        }
        taken++;
        int last = micro + 1 == c->accum_steps || taken == nbatches;
        float l = 0;
        rc = step_graph_queue(r.graph, x, y, b->n, (float)amp_scaler_scale(&r.scaler), micro > 0,
                              last, sync_bn, err, errlen);
        if (rc == 0 && early && last) {
          tl = timeline_begin(TIMELINE_OPTIMIZER, model_stream(r.model));
          rc = optim_step(r.opt, model_params(r.model), model_grads(r.model), lr, 1.0,
                          model_stream(r.model), err, errlen);
          timeline_end(tl, model_stream(r.model));
          applied = 1;
          /* The same decision on every rank: it depends on positions and settings only. */
          if (rc == 0 && taken < nbatches && step + 1 < total &&
              !(c->stop_after > 0 && step + 1 >= c->stop_after))
            rc = next_batch(&r, &prefetched, &px, &py, &wait, err, errlen);
        }
        if (rc == 0) rc = model_step_loss(r.model, &l, err, errlen);
        images += b->n;
        /* b's upload came before its step, which is done once its loss is read: its buffer can
         * go back to the loader (a prefetched upload behind it is not waited for). */
        loader_release(r.train_loader, b);
        syncbn_s += ddp_last_syncbn_s(r.ddp);
        if (last) comm_s = ddp_last_exposed_comm_s(r.ddp);
        loss_sum += l;
        micro++;
      }
      if (rc != 0) break;
      int nonfinite = 0;
      if (r.scaler.enabled)
        rc = amp_check_nonfinite(model_grads(r.model), model_num_params(r.model),
                                 arena_device(model_arena(r.model)), model_stream(r.model),
                                 &nonfinite, err, errlen);
      /* The step's agreement: mean loss, any non-finite gradient, any stop request; and every
       * rank's memory and GPU use for the log (run_summary). */
      double agree[4 + RUN_SUMMARY_PER_RANK * SHMDDP_MAX_RANKS] = {
          loss_sum / micro, nonfinite, comm && shmddp_stop_requested(comm), images};
      run_summary_fill(r.obs, agree + 4);
      tl = timeline_begin(TIMELINE_AGREE, NULL);
      if (rc == 0) rc = ddp_sum_host(r.ddp, agree, 4 + run_summary_slots(r.obs), err, errlen);
      timeline_end(tl, NULL);
      if (rc != 0) break;
      double loss = agree[0] / r.world;
      if (!isfinite(loss) && !r.scaler.enabled) {
        rc = check_fail(err, errlen,
                        "the loss became %g at step %ld: training diverged; lower --lr "
                        "(now %g) or raise --warmup-steps",
                        loss, step + 1, c->lr);
        break;
      }
      double scale = amp_scaler_scale(&r.scaler);
      int apply = amp_scaler_update(&r.scaler, agree[1] > 0);
      tl = apply && !applied ? timeline_begin(TIMELINE_OPTIMIZER, model_stream(r.model)) : -1;
      if (apply && !applied)
        rc = optim_step(r.opt, model_params(r.model), model_grads(r.model), lr,
                        1.0 / (scale * micro), model_stream(r.model), err, errlen);
      timeline_end(tl, model_stream(r.model));
      timeline_end(tl_step, NULL);
      if (rc != 0) break;
      step++;
      stop = agree[2] > 0 || (c->stop_after > 0 && step >= c->stop_after);
      double dt = now_s() - t0;
      if (step > timing_from) { /* early steps pay for first touches of memory */
        train_time += dt;
        images_timed += (long)agree[3];
      }
      if (step == 1) res->initial_loss = loss;
      epoch_loss += loss;
      epoch_steps++;
      int final = stop || step >= total || (taken == nbatches && epoch + 1 >= c->epochs);
      if (rc == 0 && ((c->save_every > 0 && (step % c->save_every == 0 || final)) || stop)) {
        train_progress_t here = {step, epoch, (long)(taken_before + taken), epoch_loss,
                                 epoch_steps, res->initial_loss};
        rc = save_checkpoint(&r, &here, err, errlen);
        if (rc != 0) break;
      }
      if (r.rank == 0) {
        double ips = train_time > 0 ? images_timed / train_time : agree[3] / dt;
        double per_step = train_time > 0 ? train_time / (double)(step - timing_from) : dt;
        double eta = (double)(total - step) * per_step +
                     last_val_s * (double)((total - step + spe - 1) / spe);
        if (!job->quiet) progress_step(&r.progress, step, epoch, loss, lr, ips, eta);
        run_summary_step(r.obs, step > timing_from, agree + 4, dt * 1e3, wait * 1e3,
                         comm_s * 1e3, syncbn_s * 1e3);
        report_step_t s = {step, epoch, loss, lr, scale, agree[3] / dt, dt * 1e3, wait * 1e3,
                           comm_s * 1e3, syncbn_s * 1e3, !apply, run_summary_step_json(r.obs)};
        if (report_log_step(r.log, &s) != 0) {
          rc = check_fail(err, errlen, "%s/log.jsonl: write failed (disk full?)", c->out_dir);
        }
      }
    }
    if (prefetched) { /* stopped with the next batch uploaded: it was not trained on */
      if (train_dev_fence(r.dev, err, errlen) != 0 && rc == 0) rc = -1; /* its copy is done */
      loader_release(r.train_loader, prefetched);
      prefetched = NULL;
    }
    if (rc != 0 || stop) break;
    double tv = now_s();
    rc = validate(&r, &val_loss, err, errlen);
    last_val_s = now_s() - tv;
    validated = 1;
    if (rc == 0 && r.rank == 0) {
      arena_format_json(model_arena(r.model), r.memory_json, sizeof r.memory_json);
      if (!job->quiet)
        progress_val(&r.progress, epoch, step, val_loss, metrics_miou(&r.conf),
                     metrics_pixel_accuracy(&r.conf), last_val_s);
      report_val_t v = {step, epoch, val_loss, metrics_miou(&r.conf),
                        metrics_pixel_accuracy(&r.conf), last_val_s};
      report_log_val(r.log, &v, r.memory_json);
    }
  }
  if (rc == 0 && !validated && !stop && step > 0) {
    rc = validate(&r, &val_loss, err, errlen);
    if (rc == 0 && r.rank == 0) arena_format_json(model_arena(r.model), r.memory_json,
                                                  sizeof r.memory_json);
  }
  if (rc == 0) {
    /* Every rank's ledger peak, for the balance check (DDP ranks should be within 1 %). */
    double peaks[8] = {0};
    if (r.rank < 8) peaks[r.rank] = (double)arena_total_peak(model_arena(r.model)) / 1048576.0;
    rc = ddp_sum_host(r.ddp, peaks, 8, err, errlen);
    memcpy(res->peak_mib, peaks, sizeof peaks);
  }
  if (rc == 0) rc = timeline_close(err, errlen); /* a run shorter than the window writes now */
  if (rc == 0) {
    res->steps = step;
    res->epochs = epochs_started;
    res->images_per_s = train_time > 0 ? images_timed / train_time : 0;
    res->train_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : NAN;
    finish_result(&r, res, val_loss, t_start);
    if (r.rank == 0) {
      if (!job->quiet) progress_end(&r.progress);
      if (stop)
        fprintf(out, "train: stopped after step %ld; checkpoint %s/checkpoint.ckpt (continue with "
                "--resume)\n", step, c->out_dir);
      if (!job->quiet && step_graph_nodes(r.graph) > 0)
        fprintf(out, "train: CUDA graph of the step: %zu nodes, replayed for %ld of %ld steps\n",
                step_graph_nodes(r.graph), step_graph_replays(r.graph), step - start.step);
      if (!job->quiet) run_summary_print(r.obs, out, res, c->out_dir, timeline_path());
      summary_print_result(out, res);
      char desc[1024];
      train_config_describe(c, desc, sizeof desc);
      rc = summary_write_json(c->out_dir, res, desc, r.memory_json[0] ? r.memory_json : NULL,
                              err, errlen);
    }
  }
  teardown(&r);
  return rc;
}

int train_rank(shmddp_comm_t *comm, void *arg)
{
  const train_job_t *job = arg;
  train_result_t res;
  char err[1024] = "";
  if (train_run(comm, job, &res, err, sizeof err) == 0) return 0;
  int rank = comm ? shmddp_comm_rank(comm) : 0;
  fprintf(stderr, "train: rank %d: %s\n", rank, err);
  if (comm) shmddp_abort(comm, err);
  return 1;
}
