/* dp_train.c — the training loop of `train --mode dp` (see dp_train.h): one loader makes the
 * global batch, the DataParallel engine (dp.c) runs it over the devices, the optimizer and the
 * loss scaler live on device 0 only. Progress, log.jsonl, summary.json and the result line are
 * those of the DDP loop, so the two modes compare field by field; dp_devices.json adds what
 * only this mode can say: every device's ledger and its step split. */
#include "config.h"

#include "src/train/dp_train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/check.h"
#include "src/model/amp.h"
#include "src/device/arena.h"
#include "src/parallel/dp.h"
#include "src/data/loader.h"
#include "src/train/metrics.h"
#include "src/model/optim.h"
#include "src/obs/progress.h"
#include "src/obs/report_log.h"
#include "src/data/sampler.h"
#include "src/train/train_device.h"

typedef struct {
  const train_job_t *job;
  const train_config_t *cfg;
  int ndev;
  dp_t *dp;
  optim_t *opt;
  optim_config_t oc;
  amp_scaler_t scaler;
  loader_t *train_loader, *val_loader;
  sampler_config_t sampler[DP_MAX_DEVICES];
  size_t per_rank;
  size_t *rank_idx, *global_idx, *val_idx;
  int32_t *pred;
  metrics_t conf;
  progress_t progress;
  report_log_t *log;
  /* sums over the timed steps, per device (ms) */
  double compute_ms[DP_MAX_DEVICES], comm_ms[DP_MAX_DEVICES], step_ms;
  long timed_steps;
} dprun_t;

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int setup(dprun_t *r, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  dp_config_t dc;
  train_config_model(c, 0, &dc.model);
  dc.ndev = r->ndev;
  if (dp_create(&r->dp, &dc, err, errlen) != 0) return -1;

  train_config_optim(c, &r->oc);
  r->oc.total_steps = r->job->total_steps;
  if (optim_config_validate(&r->oc, err, errlen) != 0) return -1;
  model_t *m0 = dp_model(r->dp, 0);
  /* The optimizer state exists once, on device 0 (ARENA_OPTIM of its ledger). */
  if (optim_create(&r->opt, &r->oc, model_num_params(m0), model_arena(m0), err, errlen) != 0)
    return -1;
  amp_scaler_init(&r->scaler, c->precision);

  /* DDP rank r's sampler, for every r: DP's batch t is their batches t side by side. */
  for (int i = 0; i < r->ndev; i++) {
    r->sampler[i] = (sampler_config_t){r->job->train->size, r->ndev, i, 1, c->drop_last, c->seed};
    if (sampler_validate(&r->sampler[i], err, errlen) != 0) return -1;
  }
  r->per_rank = sampler_per_rank(&r->sampler[0]);
  size_t nval = r->job->val->size;
  r->rank_idx = malloc(r->per_rank * sizeof *r->rank_idx);
  r->global_idx = malloc(r->per_rank * r->ndev * sizeof *r->global_idx);
  r->val_idx = malloc((nval ? nval : 1) * sizeof *r->val_idx);
  size_t px = (size_t)c->image_size * c->image_size;
  r->pred = malloc((size_t)r->ndev * c->batch_size * px * sizeof *r->pred);
  if (!r->rank_idx || !r->global_idx || !r->val_idx || !r->pred ||
      metrics_init(&r->conf, c->classes) != 0)
    return check_fail(err, errlen, "out of memory for the sample lists and predictions");
  for (size_t i = 0; i < nval; i++) r->val_idx[i] = i;

  loader_config_t lc = {r->job->train, {c->image_size, 1, c->seed, c->classes, c->ignore_index},
                        r->ndev * c->batch_size, c->workers, 0, NULL, NULL, NULL};
  /* One loader feeds every device: it gets the threads DDP's ranks would have together. */
  lc.workers = c->workers * r->ndev > 64 ? 64 : c->workers * r->ndev;
  if (c->device == MODEL_DEVICE_CUDA) { /* pinned: the copy to device 0 is asynchronous */
    lc.alloc = train_dev_host_alloc;
    lc.free = train_dev_host_free;
  }
  if (loader_create(&r->train_loader, &lc, err, errlen) != 0) return -1;
  lc.data = r->job->val;
  lc.augment.random = 0;
  lc.workers = c->workers > 0 ? 1 : 0;
  return loader_create(&r->val_loader, &lc, err, errlen);
}

static void teardown(dprun_t *r)
{
  loader_destroy(r->train_loader);
  loader_destroy(r->val_loader);
  if (r->opt) optim_destroy(r->opt);
  dp_destroy(r->dp);
  metrics_free(&r->conf);
  free(r->rank_idx);
  free(r->global_idx);
  free(r->val_idx);
  free(r->pred);
  report_log_close(r->log);
}

/* The epoch's global sample list: batch t = rank 0's batch t, then rank 1's, ... */
static void epoch_order(dprun_t *r, long epoch)
{
  size_t per = r->per_rank, b = (size_t)r->cfg->batch_size;
  for (int k = 0; k < r->ndev; k++) {
    sampler_epoch(&r->sampler[k], epoch, r->rank_idx, NULL);
    for (size_t j = 0; j < per; j++) {
      size_t t = j / b, first = t * b, len = per - first < b ? per - first : b;
      r->global_idx[first * r->ndev + (size_t)k * len + (j - first)] = r->rank_idx[j];
    }
  }
}

/* The whole validation set in order, scattered over the replicas like a training batch. */
static int validate(dprun_t *r, double *loss, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  if (dp_replicate(r->dp, err, errlen) != 0) return -1;
  size_t n = r->job->val->size;
  if (loader_start(r->val_loader, 0, r->val_idx, NULL, n, 0, err, errlen) != 0) return -1;
  metrics_reset(&r->conf);
  double loss_sum = 0, pixels = 0;
  const size_t px = (size_t)c->image_size * c->image_size;
  const loader_batch_t *b;
  int got;
  while ((got = loader_next(r->val_loader, &b, err, errlen)) == 1) {
    int rc = dp_eval(r->dp, b->x, b->y, b->n, r->pred, &loss_sum, err, errlen);
    if (rc == 0) {
      for (size_t i = 0; i < (size_t)b->n * px; i++)
        pixels += b->y[i] >= 0 && b->y[i] < c->classes;
      metrics_add(&r->conf, b->y, r->pred, (size_t)b->n * px);
    }
    loader_release(r->val_loader, b);
    if (rc != 0) return -1;
  }
  if (got < 0) return -1;
  *loss = pixels > 0 ? loss_sum / pixels : NAN;
  return 0;
}

/* Peak MiB per category and device, and what device 0 holds beyond the largest other device. */
static void print_ledgers(dprun_t *r, FILE *f)
{
  fprintf(f, "memory per device (peak MiB; DataParallel):\n  %-14s", "category");
  for (int i = 0; i < r->ndev; i++) fprintf(f, " %9s%d", "device", i);
  fprintf(f, " %12s\n", "dev0 extra");
  for (int k = 0; k <= ARENA_NUM_CATEGORIES; k++) {
    double v[DP_MAX_DEVICES], most = 0;
    for (int i = 0; i < r->ndev; i++) {
      const arena_t *a = model_arena(dp_model(r->dp, i));
      v[i] = (k == ARENA_NUM_CATEGORIES ? arena_total_peak(a)
                                        : arena_peak(a, (arena_category_t)k)) / 1048576.0;
      if (i > 0 && v[i] > most) most = v[i];
    }
    fprintf(f, "  %-14s", k == ARENA_NUM_CATEGORIES ? "total" : arena_category_name(k));
    for (int i = 0; i < r->ndev; i++) fprintf(f, " %10.1f", v[i]);
    fprintf(f, " %12.1f\n", v[0] - most);
  }
}

static int write_devices_json(dprun_t *r, char *err, size_t errlen)
{
  char path[TRAIN_PATH_MAX + 32], tmp[TRAIN_PATH_MAX + 40];
  snprintf(path, sizeof path, "%s/dp_devices.json", r->cfg->out_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    return check_fail(err, errlen, "%s: cannot create", tmp);
  }
  double n = r->timed_steps > 0 ? (double)r->timed_steps : 1, step = r->step_ms / n;
  fprintf(f, "{\n  \"mode\": \"dp\",\n  \"devices\": %d,\n  \"direct_p2p\": %d,\n"
          "  \"timed_steps\": %ld,\n  \"step_ms\": %.4f,\n  \"per_device\": [", r->ndev,
          dp_direct_peers(r->dp), r->timed_steps, step);
  for (int i = 0; i < r->ndev; i++) {
    char ledger[2048];
    arena_format_json(model_arena(dp_model(r->dp, i)), ledger, sizeof ledger);
    double comp = r->compute_ms[i] / n, comm = r->comm_ms[i] / n;
    double idle = step - comp - comm;
    fprintf(f, "%s\n    {\"device\": %d, \"compute_ms\": %.4f, \"comm_ms\": %.4f, "
            "\"idle_ms\": %.4f, \"ledger\": %s}", i ? "," : "", i, comp, comm,
            idle > 0 ? idle : 0, ledger);
  }
  fputs("\n  ]\n}\n", f);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: cannot write", path);
    remove(tmp);
    return -1;
  }
  return 0;
}

/* One optimizer step: accum_steps micro-batches, then the update on device 0. */
static int train_step(dprun_t *r, size_t nbatches, size_t *taken, double *loss_out,
                      double *wait_out, int *images_out, int *applied, double *lr_out,
                      double *scale_out, long step, char *err, size_t errlen)
{
  const train_config_t *c = r->cfg;
  double loss_sum = 0, wait = 0, comp[DP_MAX_DEVICES] = {0}, comm[DP_MAX_DEVICES] = {0};
  int micro = 0, images = 0;
  while (micro < c->accum_steps && *taken < nbatches) {
    const loader_batch_t *b;
    int got = loader_next(r->train_loader, &b, err, errlen);
    wait += loader_last_wait_s(r->train_loader);
    if (got != 1) {
      if (got == 0) check_fail(err, errlen, "the loader ended the epoch early");
      return -1;
    }
    (*taken)++;
    double l = 0;
    int rc = dp_train_step(r->dp, b->x, b->y, b->n, (float)amp_scaler_scale(&r->scaler),
                           micro > 0, err, errlen);
    if (rc == 0) rc = dp_finish_step(r->dp, &l, err, errlen); /* then the buffer may go */
    loader_release(r->train_loader, b);
    if (rc != 0) return -1;
    for (int i = 0; i < r->ndev; i++) {
      double a, m;
      dp_last_times(r->dp, i, &a, &m);
      comp[i] += a;
      comm[i] += m;
    }
    images += b->n;
    loss_sum += l;
    micro++;
  }
  model_t *m0 = dp_model(r->dp, 0);
  int nonfinite = 0;
  if (r->scaler.enabled &&
      amp_check_nonfinite(model_grads(m0), model_num_params(m0), arena_device(model_arena(m0)),
                          model_stream(m0), &nonfinite, err, errlen) != 0)
    return -1;
  *loss_out = loss_sum / micro;
  if (!isfinite(*loss_out) && !r->scaler.enabled) {
    return check_fail(err, errlen,
                      "the loss became %g at step %ld: training diverged; lower --lr "
                      "(now %g) or raise --warmup-steps",
                      *loss_out, step + 1, c->lr);
  }
  *scale_out = amp_scaler_scale(&r->scaler);
  *lr_out = optim_lr_at(&r->oc, step);
  *applied = amp_scaler_update(&r->scaler, nonfinite);
  if (*applied &&
      (dp_optim_begin(r->dp, err, errlen) != 0 ||
       optim_step(r->opt, model_params(m0), model_grads(m0), *lr_out, 1.0 / (*scale_out * micro),
                  model_stream(m0), err, errlen) != 0 ||
       dp_optim_end(r->dp, err, errlen) != 0))
    return -1;
  if (step + 1 > c->timing_warmup) {
    for (int i = 0; i < r->ndev; i++) {
      r->compute_ms[i] += comp[i];
      r->comm_ms[i] += comm[i];
    }
  }
  *wait_out = wait;
  *images_out = images;
  return 0;
}

int dp_train_run(const train_job_t *job, train_result_t *res, char *err, size_t errlen)
{
  double t_start = now_s();
  dprun_t r;
  memset(&r, 0, sizeof r);
  memset(res, 0, sizeof *res);
  r.job = job;
  r.cfg = &job->cfg;
  r.ndev = job->cfg.nproc;
  const train_config_t *c = r.cfg;
  FILE *out = job->out ? job->out : stdout;
  int rc = setup(&r, err, errlen);
  long spe = job->steps_per_epoch, total = job->total_steps;
  if (rc == 0) {
    progress_init(&r.progress, out, total, (int)((total + spe - 1) / spe), c->log_every);
    rc = report_log_open(&r.log, c->out_dir, err, errlen);
  }
  if (rc == 0 && !job->quiet) {
    char desc[1024];
    train_config_describe(c, desc, sizeof desc);
    progress_print(&r.progress, "train: DataParallel over %d %s device%s (one process), %zu "
                   "parameters, %zu training / %zu validation samples, %ld steps\n  %s",
                   r.ndev, train_device_name(c->device), r.ndev == 1 ? "" : "s",
                   model_num_params(dp_model(r.dp, 0)), job->train->size, job->val->size, total,
                   desc);
  }
  res->world = r.ndev;
  res->initial_loss = res->train_loss = res->val_loss = NAN;
  double val_loss = NAN, last_val_s = 0, train_time = 0, epoch_loss = 0;
  long step = 0, epoch_steps = 0, images_timed = 0;
  int epoch, validated = 0, epochs_started = 0;
  for (epoch = 0; rc == 0 && epoch < c->epochs && step < total; epoch++) {
    epoch_order(&r, epoch);
    rc = loader_start(r.train_loader, epoch, r.global_idx, NULL, r.per_rank * r.ndev,
                      c->drop_last, err, errlen);
    size_t nbatches = loader_num_batches(r.train_loader), taken = 0;
    epochs_started = epoch + 1;
    epoch_loss = 0;
    epoch_steps = 0;
    validated = 0;
    while (rc == 0 && taken < nbatches && step < total) {
      double t0 = now_s(), loss = 0, wait = 0, lr = 0, scale = 1;
      int images = 0, applied = 0;
      rc = train_step(&r, nbatches, &taken, &loss, &wait, &images, &applied, &lr, &scale, step,
                      err, errlen);
      if (rc != 0) break;
      step++;
      double dt = now_s() - t0;
      if (step > c->timing_warmup) {
        train_time += dt;
        images_timed += images;
        r.step_ms += dt * 1e3;
        r.timed_steps++;
      }
      if (step == 1) res->initial_loss = loss;
      epoch_loss += loss;
      epoch_steps++;
      double ips = train_time > 0 ? images_timed / train_time : images / dt;
      double per_step = train_time > 0 ? train_time / (double)(step - c->timing_warmup) : dt;
      double eta = (double)(total - step) * per_step +
                   last_val_s * (double)((total - step + spe - 1) / spe);
      if (!job->quiet) progress_step(&r.progress, step, epoch, loss, lr, ips, eta);
      double comp0, comm0;
      dp_last_times(r.dp, 0, &comp0, &comm0);
      report_step_t s = {step, epoch, loss, lr, scale, images / dt, dt * 1e3, wait * 1e3, comm0,
                         0, !applied};
      if (report_log_step(r.log, &s) != 0) {
        rc = check_fail(err, errlen, "%s/log.jsonl: write failed (disk full?)", c->out_dir);
      }
    }
    if (rc != 0) break;
    double tv = now_s();
    rc = validate(&r, &val_loss, err, errlen);
    last_val_s = now_s() - tv;
    validated = 1;
    if (rc == 0) {
      char mem[2048];
      arena_format_json(model_arena(dp_model(r.dp, 0)), mem, sizeof mem);
      if (!job->quiet)
        progress_val(&r.progress, epoch, step, val_loss, metrics_miou(&r.conf),
                     metrics_pixel_accuracy(&r.conf), last_val_s);
      report_val_t v = {step, epoch, val_loss, metrics_miou(&r.conf),
                        metrics_pixel_accuracy(&r.conf), last_val_s};
      report_log_val(r.log, &v, mem);
    }
  }
  if (rc == 0 && !validated && step > 0) rc = validate(&r, &val_loss, err, errlen);
  if (rc == 0) {
    res->steps = step;
    res->epochs = epochs_started;
    res->images_per_s = train_time > 0 ? images_timed / train_time : 0;
    res->train_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : NAN;
    res->val_loss = val_loss;
    res->val_miou = metrics_miou(&r.conf);
    res->val_acc = metrics_pixel_accuracy(&r.conf);
    res->classes = c->classes;
    for (int k = 0; k < c->classes && k < SUMMARY_MAX_CLASSES; k++)
      res->class_iou[k] = metrics_iou(&r.conf, k);
    res->skipped_steps = r.scaler.skipped_steps;
    for (int i = 0; i < r.ndev && i < 8; i++)
      res->peak_mib[i] = arena_total_peak(model_arena(dp_model(r.dp, i))) / 1048576.0;
    res->wall_s = now_s() - t_start;
    if (!job->quiet) {
      progress_end(&r.progress);
      print_ledgers(&r, out);
    }
    summary_print_result(out, res);
    char desc[1024], mem[2048];
    train_config_describe(c, desc, sizeof desc);
    arena_format_json(model_arena(dp_model(r.dp, 0)), mem, sizeof mem);
    rc = summary_write_json(c->out_dir, res, desc, mem, err, errlen);
    if (rc == 0) rc = write_devices_json(&r, err, errlen);
  }
  teardown(&r);
  return rc;
}
