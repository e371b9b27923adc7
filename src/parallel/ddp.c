/* ddp.c — the data-parallel engine. Gradients are cut into buckets (contiguous ranges of the
 * flat gradient buffer, which the model lays out in reverse layer order, so buckets complete in
 * order during backward); a bucket is all-reduced (averaged) as soon as its last gradient is
 * reported final. On the host path the all-reduce runs at that moment, between the backward of
 * two layers; the device path (CUDA build) queues it on a communication stream instead.
 * The first bucket is small so communication starts early. */
#include "config.h"

#include "src/parallel/ddp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/check.h"
#include "src/obs/timeline.h"

#ifdef HAVE_CUDA
#include "src/parallel/ddp_cuda.h"
#endif

#define DDP_MAX_BUCKETS 1024
#define DDP_FIRST_BUCKET_BYTES ((size_t)1 << 20)

struct ddp {
  shmddp_comm_t *comm;
  model_t *model;
  ddp_config_t cfg;
  int rank, world;
  size_t nparams;
  size_t nbuckets;
  size_t bucket_end[DDP_MAX_BUCKETS]; /* exclusive end offset of each bucket */
  size_t next_bucket;                 /* first bucket not yet reduced this step */
  int communicate, sync_bn;
  int failed;
  char err[512];
  double exposed_s, syncbn_s;
  model_hooks_t hooks;
#ifdef HAVE_CUDA
  ddp_cuda_t *cuda; /* device path: buckets on a communication stream */
#endif
};

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int reduce_bucket(ddp_t *d, size_t b)
{
  size_t begin = b == 0 ? 0 : d->bucket_end[b - 1];
  float *g = model_grads(d->model) + begin;
#ifdef HAVE_CUDA
  if (d->cuda) {
    if (ddp_cuda_bucket_ready(d->cuda, b, g, d->bucket_end[b] - begin, d->err, sizeof d->err)) {
      d->failed = 1;
      return -1;
    }
    return 0;
  }
#endif
  int tl = timeline_begin(TIMELINE_ALLREDUCE, NULL);
  timeline_args(tl, (double)b, (double)((d->bucket_end[b] - begin) * sizeof(float)));
  shmddp_status_t st = shmddp_all_reduce(d->comm, g, g, d->bucket_end[b] - begin, SHMDDP_F32,
                                         SHMDDP_AVG, SHMDDP_HOST);
  timeline_end(tl, NULL);
  if (st != SHMDDP_OK) {
    snprintf(d->err, sizeof d->err, "gradient all-reduce failed: %s",
             shmddp_comm_last_error(d->comm));
    d->failed = 1;
    return -1;
  }
  return 0;
}

static int hook_grads_ready(void *ctx, size_t offset, size_t count, void *stream)
{
  ddp_t *d = ctx;
  (void)stream;
  if (d->failed) return -1;
  size_t end = offset + count;
  while (d->next_bucket < d->nbuckets && d->bucket_end[d->next_bucket] <= end) {
    if (reduce_bucket(d, d->next_bucket) != 0) return -1;
    d->next_bucket++;
  }
  return 0;
}

static int sync_stats(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  ddp_t *d = ctx;
#ifdef HAVE_CUDA
  if (d->cuda) {
    if (ddp_cuda_sync_stats(d->cuda, buf, count, dtype, stream, d->err, sizeof d->err)) {
      d->failed = 1;
      return -1;
    }
    return 0;
  }
#endif
  double t0 = now_s();
  shmddp_status_t st = shmddp_all_reduce(d->comm, buf, buf, count, dtype, SHMDDP_SUM,
                                         SHMDDP_HOST);
  d->syncbn_s += now_s() - t0;
  if (st != SHMDDP_OK) {
    snprintf(d->err, sizeof d->err, "SyncBN statistics all-reduce failed: %s",
             shmddp_comm_last_error(d->comm));
    d->failed = 1;
    return -1;
  }
  return 0;
}

static int hook_sync_stats(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  int tl = timeline_begin(TIMELINE_SYNCBN, stream);
  timeline_args(tl, (double)count, 0);
  int rc = sync_stats(ctx, buf, count, dtype, stream);
  timeline_end(tl, stream);
  return rc;
}

int ddp_create(ddp_t **out, shmddp_comm_t *comm, model_t *model, const ddp_config_t *cfg,
               char *err, size_t errlen)
{
  *out = NULL;
  ddp_t *d = calloc(1, sizeof *d);
  if (!d) {
    return check_fail(err, errlen, "out of memory creating the DDP engine");
  }
  d->comm = comm;
  d->model = model;
  d->cfg = *cfg;
  if (d->cfg.bucket_mb <= 0) d->cfg.bucket_mb = 25;
  d->rank = comm ? shmddp_comm_rank(comm) : 0;
  d->world = comm ? shmddp_comm_size(comm) : 1;
  d->nparams = model_num_params(model);
  size_t bucket = (size_t)(d->cfg.bucket_mb * 1024 * 1024) / sizeof(float);
  size_t first = DDP_FIRST_BUCKET_BYTES / sizeof(float);
  if (bucket < 1) bucket = 1;
  if (first > bucket) first = bucket;
  size_t off = 0;
  while (off < d->nparams) {
    size_t len = d->nbuckets == 0 ? first : bucket;
    if (d->nbuckets == DDP_MAX_BUCKETS - 1 || off + len > d->nparams) len = d->nparams - off;
    off += len;
    d->bucket_end[d->nbuckets++] = off;
  }
  *out = d;
  if (cfg->cuda_stream && d->world > 1) {
#ifdef HAVE_CUDA
    if (ddp_cuda_create(&d->cuda, comm, cfg->cuda_stream, d->nbuckets, err, errlen) != 0)
      return -1;
#else
    return check_fail(err, errlen, "the DDP engine was built without CUDA");
#endif
  }
  return 0;
}

void ddp_destroy(ddp_t *d)
{
  if (!d) return;
#ifdef HAVE_CUDA
  ddp_cuda_destroy(d->cuda);
#endif
  free(d);
}

int ddp_rank(const ddp_t *d) { return d->rank; }
int ddp_world(const ddp_t *d) { return d->world; }
double ddp_last_exposed_comm_s(const ddp_t *d)
{
#ifdef HAVE_CUDA
  if (d->cuda) return ddp_cuda_exposed_s(d->cuda);
#endif
  return d->exposed_s;
}
double ddp_last_syncbn_s(const ddp_t *d)
{
#ifdef HAVE_CUDA
  if (d->cuda) return ddp_cuda_syncbn_s(d->cuda);
#endif
  return d->syncbn_s;
}

int ddp_sync_initial(ddp_t *d, char *err, size_t errlen)
{
  if (d->world == 1) return 0;
  /* Signatures: gather a fixed-size digest of every rank's and compare with rank 0's. */
  const char *sig = model_signature(d->model);
  size_t len = strlen(sig);
  unsigned long long mine[2] = {len, 1469598103934665603ULL};
  for (size_t i = 0; i < len; i++) mine[1] = (mine[1] ^ (unsigned char)sig[i]) * 1099511628211ULL;
  unsigned long long all[2 * SHMDDP_MAX_RANKS];
  CHECK_COLL(d->comm, shmddp_all_gather(d->comm, mine, all, 2, SHMDDP_I64, SHMDDP_HOST),
             "comparing the ranks' models");
  for (int r = 1; r < d->world; r++) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
      return check_fail(
          err, errlen,
          "rank %d built a different model than rank 0 (layer shapes or dtypes "
          "differ): every rank must use the same --widths, --classes, --norm, --image-size "
          "and --precision",
          r);
    }
  }
#ifdef HAVE_CUDA
  if (d->cuda) {
    if (ddp_cuda_broadcast(d->cuda, model_params(d->model), d->nparams, err, errlen) != 0)
      return -1;
    if (model_num_buffers(d->model) > 0 &&
        ddp_cuda_broadcast(d->cuda, model_buffers(d->model), model_num_buffers(d->model), err,
                           errlen) != 0)
      return -1;
    return 0;
  }
#endif
  shmddp_status_t st = shmddp_broadcast(d->comm, model_params(d->model), model_params(d->model),
                                        d->nparams, SHMDDP_F32, 0, SHMDDP_HOST);
  if (st == SHMDDP_OK && model_num_buffers(d->model) > 0)
    st = shmddp_broadcast(d->comm, model_buffers(d->model), model_buffers(d->model),
                          model_num_buffers(d->model), SHMDDP_F32, 0, SHMDDP_HOST);
  if (st != SHMDDP_OK) {
    return check_fail(err, errlen, "broadcasting the initial parameters failed: %s",
                      shmddp_comm_last_error(d->comm));
  }
  return 0;
}

int ddp_broadcast_buffers(ddp_t *d, char *err, size_t errlen)
{
  size_t n = model_num_buffers(d->model);
  if (d->world == 1 || n == 0) return 0;
#ifdef HAVE_CUDA
  if (d->cuda) return ddp_cuda_broadcast(d->cuda, model_buffers(d->model), n, err, errlen);
#endif
  CHECK_COLL(d->comm,
             shmddp_broadcast(d->comm, model_buffers(d->model), model_buffers(d->model), n,
                              SHMDDP_F32, 0, SHMDDP_HOST),
             "broadcasting BatchNorm statistics");
  return 0;
}

const model_hooks_t *ddp_step_hooks(ddp_t *d, int communicate, int sync_bn)
{
  d->communicate = communicate;
  d->sync_bn = sync_bn;
  d->next_bucket = 0;
  d->failed = 0;
  d->exposed_s = 0;
  d->syncbn_s = 0;
#ifdef HAVE_CUDA
  if (d->cuda) ddp_cuda_begin_step(d->cuda);
#endif
  d->hooks.ctx = d;
  d->hooks.grads_ready = (d->world > 1 && communicate) ? hook_grads_ready : NULL;
  d->hooks.sync_stats = (d->world > 1 && sync_bn) ? hook_sync_stats : NULL;
  return &d->hooks;
}

int ddp_finish_step(ddp_t *d, char *err, size_t errlen)
{
  if (d->failed) {
    return check_fail(err, errlen, "%s", d->err);
  }
  if (d->world == 1 || !d->communicate) return 0;
  double t0 = now_s();
  int tl = timeline_begin(TIMELINE_GRAD_WAIT, d->cfg.cuda_stream);
  /* Buckets whose gradients were never reported (a model that skips the hook) go now. */
  while (d->next_bucket < d->nbuckets) {
    if (reduce_bucket(d, d->next_bucket) != 0) {
      return check_fail(err, errlen, "%s", d->err);
    }
    d->next_bucket++;
  }
#ifdef HAVE_CUDA
  if (d->cuda) {
    int rc = ddp_cuda_finish_step(d->cuda, err, errlen);
    timeline_end(tl, d->cfg.cuda_stream);
    return rc;
  }
#endif
  d->exposed_s += now_s() - t0;
  timeline_end(tl, NULL);
  return 0;
}

void ddp_set_capture(ddp_t *d, int on)
{
#ifdef HAVE_CUDA
  if (d->cuda) ddp_cuda_set_capture(d->cuda, on);
#endif
  (void)d;
  (void)on;
}

void ddp_replayed(ddp_t *d)
{
#ifdef HAVE_CUDA
  if (d->cuda) ddp_cuda_replayed(d->cuda);
#endif
  (void)d;
}

int ddp_sum_host(ddp_t *d, double *vals, size_t n, char *err, size_t errlen)
{
  if (d->world == 1 || n == 0) return 0;
  CHECK_COLL(d->comm,
             shmddp_all_reduce(d->comm, vals, vals, n, SHMDDP_F64, SHMDDP_SUM, SHMDDP_HOST),
             "summing over ranks");
  return 0;
}
