/* loop_dp.c — the loop's DataParallel engine (see loop.h, loop_dp.h): one process, one loader
 * making the global batch, the DataParallel replicas (src/parallel/dp.c) running it over the
 * devices, the optimizer and the loss scaler on device 0 only. What only this mode can say goes
 * to dp_devices.json: every device's ledger and its step split. */
#include "config.h"

#include "src/train/loop_dp.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/data/sampler.h"
#include "src/device/arena.h"
#include "src/obs/run_summary.h"
#include "src/obs/outfile.h"
#include "src/parallel/dp.h"

typedef struct {
  const train_config_t *cfg;
  int ndev;
  dp_t *dp;
  loader_t *val_loader;
  sampler_config_t sampler[DP_MAX_DEVICES];
  size_t per_rank;
  size_t *rank_idx, *global_idx, *val_idx;
  int32_t *pred;
  /* per device (ms): this step's so far, and the sums over the timed steps */
  double step_compute[DP_MAX_DEVICES], step_comm[DP_MAX_DEVICES];
  double compute_ms[DP_MAX_DEVICES], comm_ms[DP_MAX_DEVICES], step_ms;
  long timed_steps;
} dp_engine_t;

static dp_engine_t *impl(engine_t *e) { return e->impl; }

static void describe(engine_t *e, const train_job_t *job, char *buf, size_t len)
{
  snprintf(buf, len, "DataParallel over %d %s device%s (one process)", e->world,
           train_device_name(job->cfg.device), e->world == 1 ? "" : "s");
}

/* The epoch's global sample list: batch t = DDP rank 0's batch t, then rank 1's, ... so a DP run
 * and a DDP run without SyncBN see the same images in the same chunks. */
static int epoch_start(engine_t *e, long epoch, size_t skip, char *err, size_t errlen)
{
  dp_engine_t *d = impl(e);
  size_t per = d->per_rank, b = (size_t)d->cfg->batch_size, n = per * d->ndev;
  for (int k = 0; k < d->ndev; k++) {
    sampler_epoch(&d->sampler[k], epoch, d->rank_idx, NULL);
    for (size_t j = 0; j < per; j++) {
      size_t t = j / b, first = t * b, len = per - first < b ? per - first : b;
      d->global_idx[first * d->ndev + (size_t)k * len + (j - first)] = d->rank_idx[j];
    }
  }
  skip *= b * d->ndev; /* a resumed epoch restarts at its next (global) batch */
  if (skip > n) skip = n;
  return loader_start(e->loader, epoch, d->global_idx + skip, NULL, n - skip, d->cfg->drop_last,
                      err, errlen);
}

/* The engine copies the batch from host memory itself (to device 0, then scattered). */
static int upload(engine_t *e, const loader_batch_t *b, const float **x, const int32_t **y,
                  char *err, size_t errlen)
{
  *x = b->x;
  *y = b->y;
  return 0;
}

static int no_op(engine_t *e, char *err, size_t errlen) { return 0; }

static int queue(engine_t *e, const float *x, const int32_t *y, int n, float loss_scale,
                 int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  return dp_train_step(impl(e)->dp, x, y, n, loss_scale, accumulate, err, errlen);
}

static int finish(engine_t *e, int last, engine_micro_t *out, char *err, size_t errlen)
{
  dp_engine_t *d = impl(e);
  double l = 0;
  CHECK(dp_finish_step(d->dp, &l, err, errlen));
  for (int i = 0; i < d->ndev; i++) {
    double a, m;
    dp_last_times(d->dp, i, &a, &m);
    d->step_compute[i] += a;
    d->step_comm[i] += m;
  }
  out->loss = l;
  out->comm_s = dp_last_exposed_ms(d->dp) * 1e-3;
  out->syncbn_s = 0;
  return 0;
}

/* One process: nothing to agree with. */
static int sum(engine_t *e, double *vals, size_t n, char *err, size_t errlen) { return 0; }
static int stop_requested(engine_t *e) { return 0; }

static int update(engine_t *e, optim_t *o, double lr, double grad_scale, char *err,
                  size_t errlen)
{
  return dp_update(impl(e)->dp, o, lr, grad_scale, err, errlen);
}

static void step_done(engine_t *e, int timed, double seconds)
{
  dp_engine_t *d = impl(e);
  for (int i = 0; i < d->ndev && timed; i++) {
    d->compute_ms[i] += d->step_compute[i];
    d->comm_ms[i] += d->step_comm[i];
  }
  if (timed) {
    d->step_ms += seconds * 1e3;
    d->timed_steps++;
  }
  memset(d->step_compute, 0, sizeof d->step_compute);
  memset(d->step_comm, 0, sizeof d->step_comm);
}

/* The whole validation set in order, scattered over the replicas like a training batch. */
static int validate(engine_t *e, const train_job_t *job, metrics_t *conf, double *loss,
                    char *err, size_t errlen)
{
  dp_engine_t *d = impl(e);
  const train_config_t *c = d->cfg;
  CHECK(dp_replicate(d->dp, err, errlen));
  size_t n = job->val->size;
  CHECK(loader_start(d->val_loader, 0, d->val_idx, NULL, n, 0, err, errlen));
  metrics_reset(conf);
  double loss_sum = 0, pixels = 0;
  const size_t px = (size_t)c->image_size * c->image_size;
  const loader_batch_t *b;
  int got;
  while ((got = loader_next(d->val_loader, &b, err, errlen)) == 1) {
    int rc = dp_eval(d->dp, b->x, b->y, b->n, d->pred, &loss_sum, err, errlen);
    if (rc == 0) {
      for (size_t i = 0; i < (size_t)b->n * px; i++)
        pixels += b->y[i] >= 0 && b->y[i] < c->classes;
      metrics_add(conf, b->y, d->pred, (size_t)b->n * px);
    }
    loader_release(d->val_loader, b);
    if (rc != 0) return -1;
  }
  if (got < 0) return -1;
  *loss = pixels > 0 ? loss_sum / pixels : NAN;
  return 0;
}

static int peaks(engine_t *e, double *peak_mib, char *err, size_t errlen)
{
  dp_engine_t *d = impl(e);
  for (int i = 0; i < d->ndev && i < SHMDDP_MAX_RANKS; i++)
    peak_mib[i] = arena_total_peak(model_arena(dp_model(d->dp, i))) / ARENA_MIB;
  return 0;
}

/* Peak MiB per category and device, and what device 0 holds beyond the largest other device. */
static void print_ledgers(dp_engine_t *d, FILE *f)
{
  fprintf(f, "memory per device (peak MiB; DataParallel):\n  %-14s", "category");
  for (int i = 0; i < d->ndev; i++) fprintf(f, " %9s%d", "device", i);
  fprintf(f, " %12s\n", "dev0 extra");
  for (int k = 0; k <= ARENA_NUM_CATEGORIES; k++) {
    double v[DP_MAX_DEVICES], most = 0;
    for (int i = 0; i < d->ndev; i++) {
      const arena_t *a = model_arena(dp_model(d->dp, i));
      v[i] = (k == ARENA_NUM_CATEGORIES ? arena_total_peak(a)
                                        : arena_peak(a, (arena_category_t)k)) / ARENA_MIB;
      if (i > 0 && v[i] > most) most = v[i];
    }
    fprintf(f, "  %-14s", k == ARENA_NUM_CATEGORIES ? "total" : arena_category_name(k));
    for (int i = 0; i < d->ndev; i++) fprintf(f, " %10.1f", v[i]);
    fprintf(f, " %12.1f\n", v[0] - most);
  }
}

static int write_devices_json(dp_engine_t *d, char *err, size_t errlen)
{
  char path[TRAIN_PATH_MAX + 32], tmp[TRAIN_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/dp_devices.json", d->cfg->out_dir);
  FILE *f = outfile_fopen_temp(path, tmp, sizeof tmp); /* random name, O_EXCL, 0600 */
  if (!f) return check_fail(err, errlen, "%s: cannot create a temporary file beside it: %s", path,
                            strerror(errno));
  double n = d->timed_steps > 0 ? (double)d->timed_steps : 1, step = d->step_ms / n;
  fprintf(f, "{\n  \"mode\": \"dp\",\n  \"devices\": %d,\n  \"direct_p2p\": %d,\n"
          "  \"timed_steps\": %ld,\n  \"step_ms\": %.4f,\n  \"per_device\": [", d->ndev,
          dp_direct_peers(d->dp), d->timed_steps, step);
  for (int i = 0; i < d->ndev; i++) {
    char ledger[2048];
    run_summary_ledger_json(model_arena(dp_model(d->dp, i)), ledger, sizeof ledger);
    double comp = d->compute_ms[i] / n, comm = d->comm_ms[i] / n;
    double idle = step - comp - comm;
    fprintf(f, "%s\n    {\"device\": %d, \"compute_ms\": %.4f, \"comm_ms\": %.4f, "
            "\"idle_ms\": %.4f, \"ledger\": %s}", i ? "," : "", i, comp, comm,
            idle > 0 ? idle : 0, ledger);
  }
  fputs("\n  ]\n}\n", f);
  if (outfile_commit(f, tmp, path, 1) != 0)
    return check_fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  return 0;
}

static int report(engine_t *e, const train_job_t *job, FILE *out, const train_result_t *res,
                  long run_steps, char *err, size_t errlen)
{
  dp_engine_t *d = impl(e);
  if (!job->quiet) print_ledgers(d, out);
  return write_devices_json(d, err, errlen);
}

static void destroy(engine_t *e)
{
  if (!e) return;
  dp_engine_t *d = impl(e);
  loader_destroy(e->loader);
  if (d) {
    loader_destroy(d->val_loader);
    dp_destroy(d->dp); /* its replicas: e->model is replica 0 */
    free(d->rank_idx);
    free(d->global_idx);
    free(d->val_idx);
    free(d->pred);
    free(d);
  }
  free(e);
}

static const engine_ops_t dp_ops = {
    .describe = describe,
    .epoch_start = epoch_start,
    .upload = upload,
    .fence = no_op,
    .queue = queue,
    .finish = finish,
    .sum = sum,
    .stop_requested = stop_requested,
    .update = update,
    .step_done = step_done,
    .validate = validate,
    .peaks = peaks,
    .report = report,
    .destroy = destroy,
};

static int setup(engine_t *e, dp_engine_t *d, const train_job_t *job, char *err, size_t errlen)
{
  const train_config_t *c = d->cfg;
  dp_config_t dc = {.ndev = d->ndev};
  train_config_model(c, 0, &dc.model);
  CHECK(dp_create(&d->dp, &dc, err, errlen));
  e->model = dp_model(d->dp, 0);
  /* DDP rank r's sampler, for every r: DP's batch t is their batches t side by side. */
  for (int i = 0; i < d->ndev; i++) {
    d->sampler[i] = (sampler_config_t){.dataset_size = job->train->size,
                                       .world = d->ndev,
                                       .rank = i,
                                       .shuffle = 1,
                                       .drop_last = c->drop_last,
                                       .seed = c->seed};
    CHECK(sampler_validate(&d->sampler[i], err, errlen));
  }
  d->per_rank = sampler_per_rank(&d->sampler[0]);
  size_t nval = job->val->size;
  d->rank_idx = malloc(d->per_rank * sizeof *d->rank_idx);
  d->global_idx = malloc(d->per_rank * d->ndev * sizeof *d->global_idx);
  d->val_idx = malloc((nval ? nval : 1) * sizeof *d->val_idx);
  size_t px = (size_t)c->image_size * c->image_size;
  d->pred = malloc((size_t)d->ndev * c->batch_size * px * sizeof *d->pred);
  if (!d->rank_idx || !d->global_idx || !d->val_idx || !d->pred)
    return check_fail(err, errlen, "out of memory for the sample lists and predictions");
  for (size_t i = 0; i < nval; i++) d->val_idx[i] = i;
  /* One loader feeds every device: it gets the threads DDP's ranks would have together; pinned
   * on GPUs: the copy to device 0 is asynchronous. */
  int workers = c->workers * d->ndev > 64 ? 64 : c->workers * d->ndev;
  return engine_loaders(e, job, d->ndev * c->batch_size, workers,
                        c->device == MODEL_DEVICE_CUDA, &d->val_loader, err, errlen);
}

int engine_dp_create(engine_t **out, const train_job_t *job, char *err, size_t errlen)
{
  CHECK(engine_new(out, &dp_ops, sizeof(dp_engine_t), err, errlen));
  engine_t *e = *out;
  dp_engine_t *d = impl(e);
  d->cfg = &job->cfg;
  d->ndev = job->cfg.nproc;
  e->rank = 0;
  e->ranks = 1;
  e->world = d->ndev;
  return setup(e, d, job, err, errlen);
}

int dp_train_run(const train_job_t *job, train_result_t *res, char *err, size_t errlen)
{
  engine_t *e = NULL;
  int rc = engine_dp_create(&e, job, err, errlen);
  return engine_train(e, rc, job, res, err, errlen);
}
