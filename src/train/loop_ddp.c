/* loop_ddp.c — the loop's DDP engine (see loop.h, loop_ddp.h): one rank per device, this rank's
 * model, its batches (uploaded on a copy stream on a GPU), the step as src/parallel/ddp.c runs
 * it (forward, backward with the gradient buckets, the wait, the update; eagerly or as a
 * replayed CUDA graph); validation sharded over the ranks; every rank's ledger and GPU use
 * riding on the step's agreement. Also train_run and train_rank, the rank's entry points. */
#include "config.h"

#include "src/train/loop_ddp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/data/sampler.h"
#include "src/device/arena.h"
#include "src/obs/run_summary.h"
#include "src/obs/timeline.h"
#include "src/parallel/ddp.h"
#include "src/train/batch_io.h"

typedef struct {
  const train_config_t *cfg;
  world_t *world;
  batch_io_t *dev; /* batches to the GPU (NULL on the CPU) */
  ddp_t *ddp; /* the step: forward, backward with its buckets, the wait, the update */
  loader_t *val_loader;
  sampler_config_t train_sampler, val_sampler;
  size_t *indices;
  uint8_t *is_pad;
  int32_t *pred;
  run_summary_t *obs; /* every rank's memory and GPU use per step; the end-of-run table */
} ddp_engine_t;

static ddp_engine_t *impl(engine_t *e) { return e->impl; }

static void describe(engine_t *e, const train_job_t *job, char *buf, size_t len)
{
  snprintf(buf, len, "%d rank%s%s%s", e->world, e->world == 1 ? "" : "s",
           job->world_desc ? ": " : "", job->world_desc ? job->world_desc : "");
}

static int epoch_start(engine_t *e, long epoch, size_t skip, char *err, size_t errlen)
{
  ddp_engine_t *d = impl(e);
  size_t n = sampler_per_rank(&d->train_sampler);
  sampler_epoch(&d->train_sampler, epoch, d->indices, d->is_pad);
  /* A resumed epoch restarts at its next batch: batches are runs of the rank's sample list. */
  skip *= (size_t)d->cfg->batch_size;
  if (skip > n) skip = n;
  return loader_start(e->loader, epoch, d->indices + skip, d->is_pad + skip, n - skip,
                      d->cfg->drop_last, err, errlen);
}

static int upload(engine_t *e, const loader_batch_t *b, const float **x, const int32_t **y,
                  char *err, size_t errlen)
{
  ddp_engine_t *d = impl(e);
  void *stream = model_stream(e->model);
  const int S = d->cfg->image_size;
  int tl = d->dev ? timeline_begin(TIMELINE_UPLOAD, stream) : -1;
  timeline_args(tl, (double)b->n * S * S * 16, 0); /* x f32, y i32 */
  int rc = batch_io_upload(d->dev, b, x, y, err, errlen);
  timeline_end(tl, stream);
  return rc;
}

static int fence(engine_t *e, char *err, size_t errlen)
{
  return batch_io_fence(impl(e)->dev, err, errlen);
}

static int queue(engine_t *e, const float *x, const int32_t *y, int n, float loss_scale,
                 int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  ddp_batch_t b = {.x = x, .y = y, .n = n, .loss_scale = loss_scale, .accumulate = accumulate,
                   .last = last, .sync_bn = sync_bn};
  return ddp_step(impl(e)->ddp, &b, err, errlen);
}

static int update(engine_t *e, optim_t *o, double lr, double grad_scale, char *err,
                  size_t errlen)
{
  return ddp_update(impl(e)->ddp, o, lr, grad_scale, err, errlen);
}

static int finish(engine_t *e, int last, engine_micro_t *out, char *err, size_t errlen)
{
  ddp_engine_t *d = impl(e);
  float l = 0;
  CHECK(model_step_loss(e->model, &l, err, errlen));
  out->loss = l;
  out->syncbn_s = ddp_last_syncbn_s(d->ddp);
  out->comm_s = last ? ddp_last_exposed_comm_s(d->ddp) : 0;
  return 0;
}

static int sum(engine_t *e, double *vals, size_t n, char *err, size_t errlen)
{
  return ddp_sum_host(impl(e)->ddp, vals, n, err, errlen);
}

static int stop_requested(engine_t *e)
{
  return world_stop_requested(impl(e)->world);
}

/* Sharded validation: each rank evaluates its share (padding left out), then the loss sums, pixel
 * counts and confusion counts are summed over ranks in one call. */
static int validate(engine_t *e, const train_job_t *job, metrics_t *conf, double *loss,
                    char *err, size_t errlen)
{
  ddp_engine_t *d = impl(e);
  const train_config_t *c = d->cfg;
  /* Without SyncBN each rank's running statistics drifted apart: evaluate rank 0's, as PyTorch
   * DDP does by broadcasting buffers. */
  CHECK(ddp_broadcast_buffers(d->ddp, err, errlen));
  size_t n = sampler_per_rank(&d->val_sampler);
  if (sampler_epoch(&d->val_sampler, 0, d->indices, d->is_pad) != 0 ||
      loader_start(d->val_loader, 0, d->indices, d->is_pad, n, 0, err, errlen) != 0)
    return check_fail(err, errlen, "out of memory starting validation");
  metrics_reset(conf);
  double loss_sum = 0, pixels = 0;
  const loader_batch_t *b;
  int got;
  const size_t px = (size_t)c->image_size * c->image_size;
  while ((got = loader_next(d->val_loader, &b, err, errlen)) == 1) {
    /* Padding is a suffix of the rank's list, so the real samples lead every batch. */
    if (b->valid > 0) {
      float l;
      const float *x;
      const int32_t *y;
      if (batch_io_upload(d->dev, b, &x, &y, err, errlen) != 0 ||
          model_eval(e->model, x, y, b->valid, batch_io_pred(d->dev, d->pred), &l, err,
                     errlen) != 0 ||
          batch_io_fetch_pred(d->dev, d->pred, (size_t)b->valid * px, err, errlen) != 0) {
        loader_release(d->val_loader, b);
        return -1;
      }
      double counted = 0;
      for (size_t i = 0; i < (size_t)b->valid * px; i++)
        counted += b->y[i] >= 0 && b->y[i] < c->classes;
      if (counted > 0) {
        loss_sum += (double)l * counted;
        pixels += counted;
      }
      metrics_add(conf, b->y, d->pred, (size_t)b->valid * px);
    }
    loader_release(d->val_loader, b);
  }
  if (got < 0) return -1;
  size_t k2 = metrics_count_len(conf);
  double *vals = malloc((k2 + 2) * sizeof *vals);
  if (!vals) return check_fail(err, errlen, "out of memory for validation counts");
  vals[0] = loss_sum;
  vals[1] = pixels;
  memcpy(vals + 2, conf->counts, k2 * sizeof *vals);
  int rc = ddp_sum_host(d->ddp, vals, k2 + 2, err, errlen);
  if (rc == 0) {
    memcpy(conf->counts, vals + 2, k2 * sizeof *vals);
    *loss = vals[1] > 0 ? vals[0] / vals[1] : NAN;
  }
  free(vals);
  return rc;
}

static size_t extra_slots(engine_t *e) { return run_summary_slots(impl(e)->obs); }
static void extra_fill(engine_t *e, double *slots) { run_summary_fill(impl(e)->obs, slots); }
static void extra_step(engine_t *e, int timed, const double *slots, double step_ms,
                       double wait_ms, double comm_ms, double syncbn_ms)
{
  run_summary_step(impl(e)->obs, timed, slots, step_ms, wait_ms, comm_ms, syncbn_ms);
}
static const char *extra_json(engine_t *e) { return run_summary_step_json(impl(e)->obs); }

/* Every rank's ledger peak, for the balance check (DDP ranks should be within 1 %). */
static int peaks(engine_t *e, double *peak_mib, char *err, size_t errlen)
{
  double all[SHMDDP_MAX_RANKS] = {0};
  if (e->rank < SHMDDP_MAX_RANKS)
    all[e->rank] = (double)arena_total_peak(model_arena(e->model)) / ARENA_MIB;
  CHECK(ddp_sum_host(impl(e)->ddp, all, SHMDDP_MAX_RANKS, err, errlen));
  memcpy(peak_mib, all, sizeof all);
  return 0;
}

static int report(engine_t *e, const train_job_t *job, FILE *out, const train_result_t *res,
                  long run_steps, char *err, size_t errlen)
{
  ddp_engine_t *d = impl(e);
  if (job->quiet) return 0;
  if (ddp_graph_nodes(d->ddp) > 0)
    fprintf(out, "train: CUDA graph of the step: %zu nodes, replayed for %ld of %ld steps\n",
            ddp_graph_nodes(d->ddp), ddp_graph_replays(d->ddp), run_steps);
  run_summary_print(d->obs, out, res, d->cfg->out_dir, timeline_path());
  return 0;
}

static void destroy(engine_t *e)
{
  if (!e) return;
  ddp_engine_t *d = impl(e);
  if (d) {
    loader_destroy(d->val_loader);
    if (d->ddp) ddp_destroy(d->ddp);
    batch_io_destroy(d->dev);
    free(d->indices);
    free(d->is_pad);
    free(d->pred);
    run_summary_destroy(d->obs);
    free(d);
  }
  loader_destroy(e->loader);
  if (e->model) model_destroy(e->model);
  free(e);
}

static const engine_ops_t ddp_ops = {
    .describe = describe,
    .epoch_start = epoch_start,
    .upload = upload,
    .fence = fence,
    .queue = queue,
    .finish = finish,
    .sum = sum,
    .stop_requested = stop_requested,
    .update = update,
    .validate = validate,
    .extra_slots = extra_slots,
    .extra_fill = extra_fill,
    .extra_step = extra_step,
    .extra_json = extra_json,
    .peaks = peaks,
    .report = report,
    .destroy = destroy,
};

static int setup(engine_t *e, ddp_engine_t *d, const train_job_t *job, char *err, size_t errlen)
{
  const train_config_t *c = d->cfg;
  model_config_t mc;
  train_config_model(c, world_device(d->world) >= 0 ? world_device(d->world) : 0, &mc);
  /* bf16 without accumulation, alone or with the gradients all-reduced in bf16: nothing needs
   * f32 gradients (no loss scaling), so the all-reduce and the optimizer take the bf16 ones as
   * backward wrote them (model.h; the same bits as through an f32 copy) */
  mc.working_grads = c->accum_steps == 1 && c->precision == MODEL_BF16 &&
                     (e->world == 1 || c->grad_comm_bf16);
  CHECK(model_create(&e->model, &mc, err, errlen));
  CHECK(batch_io_create(&d->dev, e->model, c->batch_size, (size_t)c->image_size * c->image_size,
                         err, errlen));
  /* CUDA graphs bake in the loss scale and the batch: fp16's dynamic scale is captured again
   * whenever it changes (rarely: it grows every few thousand steps); not with gradient
   * accumulation, or a timeline (which times each op). */
  ddp_config_t dc = {
      .bucket_mb = c->bucket_mb, .grad_comm = c->grad_comm_bf16 ? SHMDDP_BF16 : SHMDDP_F32,
      .sync_bn = c->sync_bn, .cuda_stream = model_stream(e->model),
      .cuda_graph = c->cuda_graph && c->accum_steps == 1 && c->timeline_steps == 0 &&
                    world_capturable(d->world),
      .graph_batch = c->batch_size};
  CHECK(ddp_create_world(&d->ddp, d->world, e->model, &dc, err, errlen));
  CHECK(ddp_sync_initial(d->ddp, err, errlen));

  d->train_sampler = (sampler_config_t){.dataset_size = job->train->size,
                                        .world = e->world,
                                        .rank = e->rank,
                                        .shuffle = 1,
                                        .drop_last = c->drop_last,
                                        .seed = c->seed};
  d->val_sampler = (sampler_config_t){.dataset_size = job->val->size,
                                      .world = e->world,
                                      .rank = e->rank,
                                      .shuffle = 0,
                                      .drop_last = 0,
                                      .seed = c->seed};
  CHECK(sampler_validate(&d->train_sampler, err, errlen));
  CHECK(sampler_validate(&d->val_sampler, err, errlen));
  size_t most = sampler_per_rank(&d->train_sampler);
  if (sampler_per_rank(&d->val_sampler) > most) most = sampler_per_rank(&d->val_sampler);
  d->indices = malloc(most * sizeof *d->indices);
  d->is_pad = malloc(most);
  d->pred = malloc((size_t)c->batch_size * c->image_size * c->image_size * sizeof *d->pred);
  if (!d->indices || !d->is_pad || !d->pred)
    return check_fail(err, errlen, "out of memory for the sample lists and predictions");
  /* pinned on a GPU: the uploads are asynchronous */
  CHECK(engine_loaders(e, job, c->batch_size, c->workers, d->dev != NULL, &d->val_loader, err,
                       errlen));
  e->pipelined = d->dev != NULL;
  return run_summary_create(&d->obs, e->rank, e->world, model_arena(e->model), err, errlen);
}

int engine_ddp_create(engine_t **out, world_t *world, const train_job_t *job, char *err,
                      size_t errlen)
{
  CHECK(engine_new(out, &ddp_ops, sizeof(ddp_engine_t), err, errlen));
  engine_t *e = *out;
  ddp_engine_t *d = impl(e);
  d->cfg = &job->cfg;
  d->world = world;
  e->rank = world_rank(world);
  e->world = e->ranks = world_size(world);
  e->timeline = 1;
  if (e->world != job->cfg.nproc)
    return check_fail(err, errlen, "the job was planned for %d ranks but runs on %d",
                      job->cfg.nproc, e->world);
  return setup(e, d, job, err, errlen);
}

int train_run_world(world_t *world, const train_job_t *job, train_result_t *res, char *err,
                    size_t errlen)
{
  engine_t *e = NULL;
  int rc = engine_ddp_create(&e, world, job, err, errlen);
  return engine_train(e, rc, job, res, err, errlen);
}

int train_run(shmddp_comm_t *comm, const train_job_t *job, train_result_t *res, char *err,
              size_t errlen)
{
  world_t *w = NULL;
  if (world_from_comm(&w, comm, err, errlen) != 0) {
    memset(res, 0, sizeof *res);
    return -1;
  }
  world_share_gpus(w, job->cfg.gpus);
  int rc = train_run_world(w, job, res, err, errlen);
  world_destroy(w);
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
