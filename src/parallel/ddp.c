/* ddp.c — one DDP step, from a micro-batch to the updated weights, over the world's collectives
 * (src/world/: one machine's shmddp group, or shmddp inside nodes and MPI between them). The
 * step, in the order it runs:
 *   1. forward on the compute stream; with SyncBN each norm's statistics are summed over the
 *      ranks in place (sync_stats), on a duplicate world, so an exchange never queues behind a
 *      gradient bucket;
 *   2. backward; the flat gradient buffer, which the model lays out in reverse layer order, is
 *      cut into buckets that complete in order (the first one small, so communication starts
 *      early). As soon as a bucket's last gradient is final (grads_ready, told on the stream
 *      that wrote it: the compute stream, or the model's side stream for weight gradients) an
 *      event recorded there starts the bucket's all-reduce (an average) on the world's
 *      communication stream, and backward goes on meanwhile;
 *   3. wait (the step's last micro-batch): the compute stream joins every bucket. Only the
 *      communication that outlasts backward is exposed; it is measured from "backward done" to
 *      "last bucket done";
 *   4. update: the optimizer reads the averaged gradients (ddp_update).
 * Steps 1 to 3 run eagerly, or are captured once in a CUDA graph and replayed (the section on
 * graphs below). On the host the streams are NULL: every collective runs when it is called (a
 * bucket between the backward of two layers), events are host times, and the same code
 * measures the same things. */
#include "config.h"

#include "src/parallel/ddp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/arena.h"
#include "src/device/device.h"
#include "src/obs/timeline.h"
#include "src/world/world.h"

#define DDP_MAX_BUCKETS 1024
#define DDP_FIRST_BUCKET_BYTES ((size_t)1 << 20)
/* Buckets run beside backward: 16 blocks move a 25 MB bucket in about the time backward takes to
 * produce the next one, and leave the other SMs to the convolutions (faster than all 128 blocks:
 * see bench/results/ddp_2xh200.tsv, fc54bc1 and d8cda2f). */
#define DDP_BUCKET_BLOCKS 16
#define DDP_MAX_BN 256 /* timed SyncBN exchanges per step (U-Net: 2 per BN layer) */

/* The step as a CUDA graph: the first step that matches (see ddp_config_t) runs eagerly, so the
 * backend's lazy allocations (cuBLAS workspace, algorithm choices for the batch) happen outside
 * any capture; the next one is captured, from the cast of the input to the join of the buckets,
 * instantiated and launched; every later matching step is one launch. */
typedef struct {
  int enabled;
  int batch;          /* the batch size it is captured for */
  int seen;           /* matching steps so far (the first runs eagerly) */
  int sync_bn;        /* the captured step's SyncBN setting */
  float loss_scale;   /* and its loss scale */
  int bn_used, measured; /* what the captured step records, for its replays */
  long replays;
  dev_graph_t *exec;  /* the captured step, instantiated */
} ddp_graph_t;

struct ddp {
  world_t *world;        /* buckets */
  world_t *own_world;    /* made by ddp_create from a communicator */
  world_t *bn;           /* SyncBN statistics, on the compute stream (a duplicate on a GPU) */
  model_t *model;
  ddp_config_t cfg;
  int world_size, dev;
  void *compute;                /* NULL on the host */
  size_t nflat; /* elements of the flat gradient buffer (model_flat_size) */
  size_t nbuckets;
  size_t bucket_end[DDP_MAX_BUCKETS]; /* exclusive end offset of each bucket */
  size_t next_bucket;                 /* first bucket not yet reduced this step */
  dev_event_t *ready[DDP_MAX_BUCKETS]; /* per bucket, on compute */
  dev_event_t *bwd_done, *comm_done;   /* around the exposed communication */
  void *grads;                         /* the model's gradients (model_grad_buffer) */
  shmddp_dtype_t gdtype;               /* their type: f32, or the model's working bf16 */
  uint16_t *wire;                      /* grad_comm bf16 from f32 gradients: as they travel */
  dev_event_t *bn_ev[2 * DDP_MAX_BN];  /* start/end pairs around each SyncBN exchange */
  int bn_used;
  int queued;    /* buckets queued this step */
  int measured;  /* events of a finished step exist */
  int capturing; /* the compute stream is being captured into a CUDA graph */
  int failed;    /* a hook failed: err says why */
  char err[512];
  model_hooks_t hooks; /* how the model reaches the buckets and SyncBN during the step */
  ddp_graph_t graph;
};

/* ---- the step ---- */

/* Below, in the order of the step: */
static void step_begin(ddp_t *d, int last, int sync_bn);
static int step_failed(const ddp_t *d, char *err, size_t errlen);
static int hook_grads_ready(void *ctx, size_t offset, size_t count, void *stream);
static int wait_buckets(ddp_t *d, char *err, size_t errlen);
static int hook_sync_stats(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype,
                           void *stream);
static int graph_matches(ddp_t *d, const ddp_batch_t *b);
static int graph_step(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen);

/* Forward, backward with the buckets all-reduced as it finishes them, and the wait. */
static int step_eager(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen)
{
  step_begin(d, b->last, b->sync_bn);
  /* 1, 2: forward and backward; the model calls sync_stats in every norm's forward and
   * backward, and grads_ready whenever a layer's gradients are final (the last micro-batch
   * only: the others add to the gradients without communicating) */
  if (model_train_step_queue(d->model, b->x, b->y, b->n, b->loss_scale, b->accumulate,
                             &d->hooks, err, errlen) != 0)
    return step_failed(d, err, errlen);
  /* 3: the compute stream waits for every bucket */
  return b->last ? wait_buckets(d, err, errlen) : 0;
}

int ddp_step(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen)
{
  /* The weights' working copy is made current outside the step (a no-op behind ddp_update),
   * so a captured step holds no cast of them and a replay never reads a stale copy. */
  CHECK(model_refresh_working(d->model, err, errlen));
  if (graph_matches(d, b)) CHECK(graph_step(d, b, err, errlen));
  else CHECK(step_eager(d, b, err, errlen));
  return model_step_queued(d->model, err, errlen);
}

/* 4: the optimizer on the averaged gradients; it also writes the weights' working copy. */
int ddp_update(ddp_t *d, struct optim *o, double lr, double grad_scale, char *err,
               size_t errlen)
{
  return model_update(d->model, o, lr, grad_scale, err, errlen);
}

/* A step starts: what it communicates, and nothing of the last one's counts. */
static void step_begin(ddp_t *d, int last, int sync_bn)
{
  d->next_bucket = 0;
  d->failed = 0;
  d->queued = 0;
  d->bn_used = 0;
  d->hooks.ctx = d;
  d->hooks.grads_ready = d->world_size > 1 && last ? hook_grads_ready : NULL;
  d->hooks.sync_stats = d->world_size > 1 && sync_bn ? hook_sync_stats : NULL;
}

/* The model's step failed: when one of this step's hooks did, why goes in front of err (the
 * model only knows that the hook failed). Returns -1. */
static int step_failed(const ddp_t *d, char *err, size_t errlen)
{
  if (!d->failed) return -1;
  char what[512];
  snprintf(what, sizeof what, "%s", err ? err : "");
  return check_fail(err, errlen, "%s (%s)", d->err, what);
}

/* ---- 2, 3: the gradient buckets ---- */

/* A timing event: in a graph capture the record must become a node of the graph, so every
 * replay records it and the step stays measurable. */
static int record_timing(ddp_t *d, dev_event_t *e, void *stream, char *err, size_t errlen)
{
  return dev_event_record_timing(e, stream, d->capturing, err, errlen);
}

/* Bucket b is final on `stream` (the compute stream, or the model's side stream when its last
 * weight gradients were computed there, which started after the compute stream's earlier work):
 * average it across ranks, after that stream's work so far. */
static int reduce_bucket(ddp_t *d, size_t b, void *stream, char *err, size_t errlen)
{
  size_t begin = b == 0 ? 0 : d->bucket_end[b - 1], count = d->bucket_end[b] - begin;
  void *buf = (char *)d->grads + begin * shmddp_dtype_size(d->gdtype);
  shmddp_dtype_t t = d->gdtype;
  if (d->wire) { /* narrowed on that stream, right behind the gradients it reads */
    CHECK(dev_convert(d->wire + begin, SHMDDP_BF16, buf, SHMDDP_F32, count, d->dev, stream,
                      err, errlen));
    buf = d->wire + begin;
    t = SHMDDP_BF16;
  }
  CHECK(dev_event_record(d->ready[b], stream, err, errlen));
  CHECK(world_bucket_start(d->world, b, buf, count, t, d->ready[b], err, errlen));
  d->queued++;
  return 0;
}

/* Backward: gradients [offset, offset + count) are final; every bucket they complete goes. */
static int hook_grads_ready(void *ctx, size_t offset, size_t count, void *stream)
{
  ddp_t *d = ctx;
  if (d->failed) return -1;
  size_t end = offset + count;
  while (d->next_bucket < d->nbuckets && d->bucket_end[d->next_bucket] <= end) {
    if (reduce_bucket(d, d->next_bucket, stream, d->err, sizeof d->err) != 0) {
      d->failed = 1;
      return -1;
    }
    d->next_bucket++;
  }
  return 0;
}

/* After backward: the compute stream joins every bucket; the gradients are then the average. */
static int wait_buckets(ddp_t *d, char *err, size_t errlen)
{
  if (d->failed) return check_fail(err, errlen, "%s", d->err);
  if (d->world_size == 1) return 0;
  int tl = timeline_begin(TIMELINE_GRAD_WAIT, d->compute);
  /* Buckets whose gradients were never reported (a model that skips the hook) go now. */
  while (d->next_bucket < d->nbuckets) {
    CHECK(reduce_bucket(d, d->next_bucket, d->compute, err, errlen));
    d->next_bucket++;
  }
  CHECK(record_timing(d, d->bwd_done, d->compute, err, errlen));
  int rc = world_bucket_join(d->world, d->compute, d->comm_done, d->capturing, err, errlen);
  d->measured = rc == 0 && d->queued > 0;
  /* the averaged bf16 gradients back into the f32 buffer the optimizer reads (after the join:
   * on the compute stream, behind every bucket) */
  if (rc == 0 && d->wire)
    rc = dev_convert(d->grads, SHMDDP_F32, d->wire, SHMDDP_BF16, d->nflat, d->dev, d->compute,
                     err, errlen);
  timeline_end(tl, d->compute);
  return rc;
}

/* ---- 1: SyncBN ---- */

/* Sum buf over ranks, in place, in order on the given (compute) stream. */
static int sync_stats(ddp_t *d, void *buf, size_t count, shmddp_dtype_t dtype, void *stream,
                      char *err, size_t errlen)
{
  int timed = d->bn_used < DDP_MAX_BN;
  if (timed) CHECK(record_timing(d, d->bn_ev[2 * d->bn_used], stream, err, errlen));
  if (world_all_reduce(d->bn, buf, count, dtype, SHMDDP_SUM, stream, err, errlen) != 0)
    return check_prefix(err, errlen, "SyncBN statistics all-reduce");
  if (timed) CHECK(record_timing(d, d->bn_ev[2 * d->bn_used++ + 1], stream, err, errlen));
  return 0;
}

static int hook_sync_stats(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  ddp_t *d = ctx;
  int tl = timeline_begin(TIMELINE_SYNCBN, stream);
  timeline_args(tl, (double)count, 0);
  int rc = sync_stats(d, buf, count, dtype, stream, d->err, sizeof d->err);
  timeline_end(tl, stream);
  if (rc != 0) d->failed = 1;
  return rc;
}

/* ---- the step as a CUDA graph ----
 * Why: the U-Net's step is some 250 kernels, many of them a few microseconds long; launched one
 * by one the GPU waits on the CPU between them (and on the other rank's CPU, through SyncBN). A
 * replayed graph is one launch per step. Collectives replay safely: their flags and sequence
 * numbers live in device memory and advance inside the graph, and every rank captures and
 * replays the same steps. A capture that fails stops training with a message (a silent
 * fallback could leave the ranks' collectives out of step). */

static int graph_matches(ddp_t *d, const ddp_batch_t *b)
{
  return d->graph.enabled && b->n == d->graph.batch && !b->accumulate && b->last;
}

static void graph_drop(ddp_graph_t *g)
{
  dev_graph_destroy(g->exec);
  g->exec = NULL;
}

/* A failed graph call: what failed, and how to train without graphs. */
static int graph_fail(char *err, size_t errlen, const char *what)
{
  check_prefix(err, errlen, what);
  size_t len = strlen(err);
  snprintf(err + len, errlen - len, " (train with --cuda-graph off to run without graphs)");
  return -1;
}

/* Captures one step (queued, not run) and instantiates it. */
static int graph_capture(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen)
{
  ddp_graph_t *g = &d->graph;
  graph_drop(g);
  if (dev_graph_begin(d->compute, err, errlen) != 0)
    return graph_fail(err, errlen, "starting the graph capture");
  d->capturing = 1;
  int rc = step_eager(d, b, err, errlen);
  d->capturing = 0;
  /* its replays record what it recorded */
  g->bn_used = d->bn_used;
  g->measured = d->measured;
  if (dev_graph_end(d->compute, rc == 0, &g->exec, err, errlen) != 0)
    return graph_fail(err, errlen, "capturing the training step in a CUDA graph failed");
  g->sync_bn = b->sync_bn;
  g->loss_scale = b->loss_scale;
  return 0;
}

static int graph_replay(ddp_t *d, char *err, size_t errlen)
{
  ddp_graph_t *g = &d->graph;
  if (dev_graph_launch(g->exec, d->compute, err, errlen) != 0)
    return graph_fail(err, errlen, "launching the step's CUDA graph");
  /* the step's measurements come from the replay */
  d->bn_used = g->bn_used;
  d->measured = g->measured;
  g->replays++;
  return 0;
}

/* A step that matches the graph: eagerly the first time, captured the second, replayed after. */
static int graph_step(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen)
{
  ddp_graph_t *g = &d->graph;
  if (g->exec && (g->sync_bn != b->sync_bn || g->loss_scale != b->loss_scale)) {
    graph_drop(g); /* SyncBN switched on (--sync-bn-from-epoch) or fp16's loss scale moved: one
                      eager step (new exchanges set up their buffers), then capture again */
    g->seen = 0;
  }
  if (g->exec) return graph_replay(d, err, errlen);
  if (g->seen++ == 0) return step_eager(d, b, err, errlen);
  CHECK(graph_capture(d, b, err, errlen));
  return graph_replay(d, err, errlen);
}

long ddp_graph_replays(const ddp_t *d) { return d ? d->graph.replays : 0; }
size_t ddp_graph_nodes(const ddp_t *d) { return d ? dev_graph_nodes(d->graph.exec) : 0; }

/* ---- set-up ---- */

/* The communication set-up of a group of more than one rank (collective). */
static int setup_comm(ddp_t *d, char *err, size_t errlen)
{
  d->bn = d->world;
  CHECK(world_attach(d->world, d->dev, DDP_BUCKET_BLOCKS, err, errlen));
  if (d->dev != DEV_HOST) {
    CHECK(world_dup(d->world, &d->bn, err, errlen));
    /* SyncBN's exchanges are small and on the critical path: every block they can use */
    CHECK(world_attach(d->bn, d->dev, 0, err, errlen));
  }
  for (size_t b = 0; b < d->nbuckets; b++)
    CHECK(dev_event_create(&d->ready[b], d->dev, DEV_EVENT_ORDER, err, errlen));
  /* bf16 on the wire from f32 gradients needs a narrowed copy; the model's own bf16 working
   * gradients are all-reduced where they are (the same bits: widening them is exact) */
  if (d->cfg.grad_comm == SHMDDP_BF16 && d->gdtype == SHMDDP_F32) {
    d->wire = arena_alloc(model_arena(d->model), d->nflat * sizeof *d->wire, ARENA_COMM,
                          "gradients in bf16 (--grad-comm bf16)");
    if (!d->wire)
      return check_fail(err, errlen, "gradients in bf16 for the all-reduce: %s",
                        arena_last_error(model_arena(d->model)));
  }
  for (int i = 0; i < 2 * DDP_MAX_BN; i++)
    CHECK(dev_event_create(&d->bn_ev[i], d->dev, DEV_EVENT_TIMING, err, errlen));
  CHECK(dev_event_create(&d->bwd_done, d->dev, DEV_EVENT_TIMING, err, errlen));
  return dev_event_create(&d->comm_done, d->dev, DEV_EVENT_TIMING, err, errlen);
}

/* Buckets over the flat gradient buffer: a small first one, then bucket_mb each. */
static void cut_buckets(ddp_t *d)
{
  size_t bucket = (size_t)(d->cfg.bucket_mb * 1024 * 1024) / sizeof(float);
  size_t first = DDP_FIRST_BUCKET_BYTES / sizeof(float);
  if (bucket < 1) bucket = 1;
  if (first > bucket) first = bucket;
  size_t off = 0;
  while (off < d->nflat) {
    size_t len = d->nbuckets == 0 ? first : bucket;
    if (d->nbuckets == DDP_MAX_BUCKETS - 1 || off + len > d->nflat) len = d->nflat - off;
    off += len;
    d->bucket_end[d->nbuckets++] = off;
  }
}

int ddp_create(ddp_t **out, shmddp_comm_t *comm, model_t *model, const ddp_config_t *cfg,
               char *err, size_t errlen)
{
  *out = NULL;
  world_t *w = NULL;
  CHECK(world_from_comm(&w, comm, err, errlen));
  int rc = ddp_create_world(out, w, model, cfg, err, errlen);
  if (*out) (*out)->own_world = w;
  else world_destroy(w);
  return rc;
}

int ddp_create_world(ddp_t **out, world_t *world, model_t *model, const ddp_config_t *cfg,
                     char *err, size_t errlen)
{
  *out = NULL;
  ddp_t *d = calloc(1, sizeof *d);
  if (!d) return check_fail(err, errlen, "out of memory creating the DDP engine");
  *out = d;
  d->world = world;
  d->model = model;
  d->cfg = *cfg;
  if (d->cfg.bucket_mb <= 0) d->cfg.bucket_mb = 25;
  if (d->cfg.grad_comm != SHMDDP_F32 && d->cfg.grad_comm != SHMDDP_BF16)
    return check_fail(err, errlen, "gradients travel as f32 or bf16, not %s",
                      shmddp_dtype_name(d->cfg.grad_comm));
  d->world_size = world_size(world);
  d->dev = cfg->cuda_stream ? arena_device(model_arena(model)) : DEV_HOST;
  d->compute = cfg->cuda_stream;
  d->nflat = model_flat_size(model);
  d->grads = model_grad_buffer(model, &d->gdtype);
  if (d->world_size > 1 && d->gdtype != SHMDDP_F32 && d->gdtype != d->cfg.grad_comm)
    return check_fail(err, errlen, "the model keeps its gradients in %s (working_grads): they "
                      "are all-reduced as they are, so the gradients must travel as %s "
                      "(--grad-comm %s), or build the model with f32 gradients",
                      shmddp_dtype_name(d->gdtype), shmddp_dtype_name(d->gdtype),
                      shmddp_dtype_name(d->gdtype));
  cut_buckets(d);
  /* CPU ranks: nothing to capture */
  d->graph = (ddp_graph_t){.enabled = cfg->cuda_graph && model_stream(model) != NULL,
                            .batch = cfg->graph_batch};
  return d->world_size > 1 ? setup_comm(d, err, errlen) : 0;
}

void ddp_destroy(ddp_t *d)
{
  if (!d) return;
  char err[256];
  if (d->graph.exec) dev_stream_sync(model_stream(d->model), err, sizeof err);
  graph_drop(&d->graph);
  for (size_t b = 0; b < d->nbuckets; b++) dev_event_destroy(d->ready[b]);
  for (int i = 0; i < 2 * DDP_MAX_BN; i++) dev_event_destroy(d->bn_ev[i]);
  dev_event_destroy(d->bwd_done);
  dev_event_destroy(d->comm_done);
  if (d->wire) arena_free(model_arena(d->model), d->wire);
  if (d->bn && d->bn != d->world) world_destroy(d->bn);
  world_destroy(d->own_world);
  free(d);
}

/* Broadcast count f32 at p (on the model's device) from rank 0, finished when it returns. */
static int broadcast(ddp_t *d, float *p, size_t count, const char *what, char *err,
                     size_t errlen)
{
  if (world_broadcast(d->world, p, count, SHMDDP_F32, err, errlen) != 0)
    return check_prefix(err, errlen, what);
  return 0;
}

int ddp_sync_initial(ddp_t *d, char *err, size_t errlen)
{
  if (d->world_size == 1) return 0;
  /* Signatures: gather a fixed-size digest of every rank's and compare with rank 0's. */
  const char *sig = model_signature(d->model);
  size_t len = strlen(sig);
  unsigned long long mine[2] = {len, 1469598103934665603ULL};
  for (size_t i = 0; i < len; i++) mine[1] = (mine[1] ^ (unsigned char)sig[i]) * 1099511628211ULL;
  unsigned long long *all = malloc(2 * sizeof *all * (size_t)d->world_size);
  if (!all) return check_fail(err, errlen, "out of memory comparing the ranks' models");
  if (world_all_gather(d->world, mine, all, 2, SHMDDP_I64, err, errlen) != 0) {
    free(all);
    return check_prefix(err, errlen, "comparing the ranks' models");
  }
  for (int r = 1; r < d->world_size; r++) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
      free(all);
      return check_fail(
          err, errlen,
          "rank %d built a different model than rank 0 (layer shapes or dtypes "
          "differ): every rank must use the same --widths, --classes, --norm, --image-size "
          "and --precision",
          r);
    }
  }
  free(all);
  CHECK(broadcast(d, model_params(d->model), d->nflat, "broadcasting the initial parameters",
                  err, errlen));
  if (model_num_buffers(d->model) > 0)
    CHECK(broadcast(d, model_buffers(d->model), model_num_buffers(d->model),
                    "broadcasting the initial parameters", err, errlen));
  return 0;
}

int ddp_broadcast_buffers(ddp_t *d, char *err, size_t errlen)
{
  size_t n = model_num_buffers(d->model);
  if (d->world_size == 1 || n == 0) return 0;
  return broadcast(d, model_buffers(d->model), n, "broadcasting BatchNorm statistics", err,
                   errlen);
}

/* ---- sums and measurements ---- */

int ddp_sum_host(ddp_t *d, double *vals, size_t n, char *err, size_t errlen)
{
  if (d->world_size == 1 || n == 0) return 0;
  if (world_all_reduce(d->world, vals, n, SHMDDP_F64, SHMDDP_SUM, NULL, err, errlen) != 0)
    return check_prefix(err, errlen, "summing over ranks");
  return 0;
}

double ddp_last_exposed_comm_s(const ddp_t *d)
{
  char err[256];
  double ms = 0;
  if (!d->measured || dev_event_sync(d->comm_done, err, sizeof err) != 0 ||
      dev_event_elapsed(d->bwd_done, d->comm_done, &ms) != 0)
    return 0;
  return ms > 0 ? ms * 1e-3 : 0;
}

double ddp_last_syncbn_s(const ddp_t *d)
{
  char err[256];
  double total = 0;
  if (d->bn_used == 0 || dev_event_sync(d->bn_ev[2 * d->bn_used - 1], err, sizeof err) != 0)
    return 0;
  for (int i = 0; i < d->bn_used; i++) total += dev_event_ms(d->bn_ev[2 * i], d->bn_ev[2 * i + 1]);
  return total * 1e-3;
}
