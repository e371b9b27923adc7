/* ddp.c — the data-parallel engine, one path for host and device buffers over the world's
 * collectives (src/world/: one machine's shmddp group, or shmddp inside nodes and MPI between
 * them). Gradients are cut into buckets (contiguous ranges of the flat gradient buffer, which the
 * model lays out in reverse layer order, so buckets complete in order during backward); a bucket
 * is all-reduced (averaged) as soon as its last gradient is reported final. The first bucket is
 * small so communication starts early.
 *
 * On a GPU a bucket's all-reduce starts once an event recorded on the compute stream says its
 * gradients are written, and backward goes on while the world moves the bucket (one machine: on
 * a communication stream over NVLink; several: a progress thread through the nodes). The
 * optimizer waits only for the join of the buckets, so only the communication that outlasts
 * backward is exposed; it is measured from "backward done" to "last bucket done". SyncBN
 * statistics travel on the compute stream over a duplicate world: its calls are ordered
 * independently of the buckets', so a BN exchange never queues behind a gradient bucket. On the
 * host the streams are NULL: every collective runs when it is called (a bucket between the
 * backward of two layers), events are host times, and the same code measures the same things. */
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

struct ddp {
  world_t *world;        /* buckets */
  world_t *own_world;    /* made by ddp_create from a communicator */
  world_t *bn;           /* SyncBN statistics, on the compute stream (a duplicate on a GPU) */
  model_t *model;
  ddp_config_t cfg;
  int rank, world_size, dev;
  void *compute;                /* NULL on the host */
  size_t nflat; /* elements of the flat gradient buffer (model_flat_size) */
  size_t nbuckets;
  size_t bucket_end[DDP_MAX_BUCKETS]; /* exclusive end offset of each bucket */
  size_t next_bucket;                 /* first bucket not yet reduced this step */
  int communicate, sync_bn;
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
  int graph_bn_used, graph_measured; /* what the captured step records, for its replays */
  int failed;    /* a hook failed: err says why, ddp_finish_step returns it */
  char err[512];
  model_hooks_t hooks;
};

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

/* SyncBN: sum buf over ranks, in place, in order on the given (compute) stream. */
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
  d->rank = world_rank(world);
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
  return d->world_size > 1 ? setup_comm(d, err, errlen) : 0;
}

void ddp_destroy(ddp_t *d)
{
  if (!d) return;
  for (size_t b = 0; b < d->nbuckets; b++) dev_event_destroy(d->ready[b]);
  for (int i = 0; i < 2 * DDP_MAX_BN; i++) dev_event_destroy(d->bn_ev[i]);
  dev_event_destroy(d->bwd_done);
  dev_event_destroy(d->comm_done);
  if (d->wire) arena_free(model_arena(d->model), d->wire);
  if (d->bn && d->bn != d->world) world_destroy(d->bn);
  world_destroy(d->own_world);
  free(d);
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

const model_hooks_t *ddp_step_hooks(ddp_t *d, int communicate, int sync_bn)
{
  d->communicate = communicate;
  d->sync_bn = sync_bn;
  d->next_bucket = 0;
  d->failed = 0;
  d->queued = 0;
  d->bn_used = 0;
  d->hooks.ctx = d;
  d->hooks.grads_ready = (d->world_size > 1 && communicate) ? hook_grads_ready : NULL;
  d->hooks.sync_stats = (d->world_size > 1 && sync_bn) ? hook_sync_stats : NULL;
  return &d->hooks;
}

int ddp_hook_failure(const ddp_t *d, char *err, size_t errlen)
{
  if (!d->failed) return -1;
  char what[512];
  snprintf(what, sizeof what, "%s", err ? err : "");
  return check_fail(err, errlen, "%s (%s)", d->err, what);
}

int ddp_finish_step(ddp_t *d, char *err, size_t errlen)
{
  if (d->failed) return check_fail(err, errlen, "%s", d->err);
  if (d->world_size == 1 || !d->communicate) return 0;
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

void ddp_set_capture(ddp_t *d, int on)
{
  if (d->capturing && !on) { /* the capture ended: its replays record what it recorded */
    d->graph_bn_used = d->bn_used;
    d->graph_measured = d->measured;
  }
  d->capturing = on != 0;
}

void ddp_replayed(ddp_t *d)
{
  d->bn_used = d->graph_bn_used;
  d->measured = d->graph_measured;
}

int ddp_sum_host(ddp_t *d, double *vals, size_t n, char *err, size_t errlen)
{
  if (d->world_size == 1 || n == 0) return 0;
  if (world_all_reduce(d->world, vals, n, SHMDDP_F64, SHMDDP_SUM, NULL, err, errlen) != 0)
    return check_prefix(err, errlen, "summing over ranks");
  return 0;
}
