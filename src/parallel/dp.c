/* dp.c — DataParallel's data flow (see dp.h). Cross-device order comes from events: a replica's
 * stream waits for device 0's "input and weights ready" before it pulls them, device 0 waits
 * for every replica's "forward done" before the gather and "backward done" before the
 * reduction, and each replica waits for "loss done" before it pulls its logit gradients. The
 * copies are pulls on the receiving device's stream and gathers on device 0's, so each
 * device's stream holds its own share of the communication, and the timing events bracket
 * only the copies (a bracket starts after the wait, so waiting counts as idle). */
#include "config.h"

#include "src/parallel/dp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/arena.h"
#include "src/device/device.h"

enum { /* events per device, each marking a point of the step on that device's stream */
  EV_UP0, EV_UP1, EV_REP0, EV_REP1, EV_FWD0, EV_FWD1, EV_GA0, EV_GA1, EV_LOSS1, EV_DL0, EV_DL1,
  EV_BWD0, EV_BWD1, EV_RED0, EV_RED1, EV_OPT0, EV_OPT1, EV_COUNT
};

struct dp {
  int n;
  int dev[DP_MAX_DEVICES];   /* DEV_HOST or the CUDA ordinal */
  model_t *m[DP_MAX_DEVICES];
  void *stream[DP_MAX_DEVICES];
  dev_event_t *ev[DP_MAX_DEVICES][EV_COUNT];
  int direct;
  size_t nflat, nbuf, px, classes, elem; /* nflat: elements of the flat buffers */
  int per;                    /* images per device (max_batch) */
  /* device 0 only (ARENA_DP_GATHER) */
  float *x0;
  int32_t *y0;
  unsigned char *glog, *gdlog;
  float *stage[DP_MAX_DEVICES];
  /* every device (device 0's input is x0's first chunk) */
  float *x[DP_MAX_DEVICES];
  int32_t *y[DP_MAX_DEVICES], *pred[DP_MAX_DEVICES];
  /* the step in flight */
  int cnt[DP_MAX_DEVICES];
  int pending, opt_pending;
  double compute_ms[DP_MAX_DEVICES], comm_ms[DP_MAX_DEVICES];
  double exposed_ms;
};

static void *take(dp_t *d, int i, size_t bytes, arena_category_t cat, const char *name,
                  char *err, size_t errlen)
{
  arena_t *a = model_arena(d->m[i]);
  void *p = arena_alloc(a, bytes ? bytes : 1, cat, name);
  if (!p) check_fail(err, errlen, "DataParallel buffers: %s", arena_last_error(a));
  return p;
}

static int build(dp_t *d, const dp_config_t *cfg, char *err, size_t errlen)
{
  d->n = cfg->ndev;
  const model_config_t *mc0 = &cfg->model;
  int cuda = mc0->device == MODEL_DEVICE_CUDA;
  for (int i = 0; i < d->n; i++) d->dev[i] = cuda ? i : DEV_HOST;
  d->per = mc0->max_batch;
  d->px = (size_t)mc0->height * mc0->width;
  d->classes = (size_t)mc0->classes;
  d->elem = mc0->precision == MODEL_FP32 ? 4 : 2; /* checked against the model's at forward */
  for (int i = 0; i < d->n; i++) {
    model_config_t mc = *mc0;
    mc.cuda_device = cuda ? i : -1;
    CHECK(dev_select(d->dev[i], err, errlen));
    CHECK(model_create(&d->m[i], &mc, err, errlen));
    d->stream[i] = model_stream(d->m[i]);
    for (int e = 0; e < EV_COUNT; e++)
      CHECK(dev_event_create(&d->ev[i][e], d->dev[i], DEV_EVENT_TIMING, err, errlen));
  }
  d->nflat = model_flat_size(d->m[0]);
  d->nbuf = model_num_buffers(d->m[0]);
  CHECK(dev_enable_peers(d->dev, d->n, &d->direct, err, errlen));
  size_t N = (size_t)d->n * d->per, P = (size_t)d->per * d->px;
  for (int i = d->n - 1; i >= 0; i--) { /* device 0 last: it stays current */
    CHECK(dev_select(d->dev[i], err, errlen));
    if (i > 0) {
      d->x[i] = take(d, i, P * 3 * sizeof(float), ARENA_ACTIVATIONS, "input batch", err, errlen);
      if (!d->x[i]) return -1;
    }
    d->y[i] = take(d, i, P * sizeof(int32_t), ARENA_ACTIVATIONS, "validation labels", err, errlen);
    d->pred[i] = take(d, i, P * sizeof(int32_t), ARENA_ACTIVATIONS, "predictions", err, errlen);
    if (!d->y[i] || !d->pred[i]) return -1;
  }
  /* What only device 0 holds. */
  d->x0 = take(d, 0, N * d->px * 3 * sizeof(float), ARENA_DP_GATHER, "whole input batch", err,
               errlen);
  d->y0 = take(d, 0, N * d->px * sizeof(int32_t), ARENA_DP_GATHER, "whole batch's labels", err,
               errlen);
  d->glog = take(d, 0, N * d->px * d->classes * d->elem, ARENA_DP_GATHER, "gathered logits", err,
                 errlen);
  d->gdlog = take(d, 0, N * d->px * d->classes * d->elem, ARENA_DP_GATHER,
                  "gathered logit gradients", err, errlen);
  if (!d->x0 || !d->y0 || !d->glog || !d->gdlog) return -1;
  for (int i = 1; i < d->n; i++) {
    d->stage[i] = take(d, 0, d->nflat * sizeof(float), ARENA_DP_GATHER, "gradient staging",
                       err, errlen);
    if (!d->stage[i]) return -1;
  }
  d->x[0] = d->x0;
  return 0;
}

int dp_create(dp_t **out, const dp_config_t *cfg, char *err, size_t errlen)
{
  *out = NULL;
  if (cfg->ndev < 1 || cfg->ndev > DP_MAX_DEVICES) {
    return check_fail(err, errlen, "DataParallel over %d devices: 1 to %d are supported", cfg->ndev,
                      DP_MAX_DEVICES);
  }
  dp_t *d = calloc(1, sizeof *d);
  if (!d) return check_fail(err, errlen, "out of memory creating DataParallel");
  if (build(d, cfg, err, errlen) != 0) {
    dp_destroy(d);
    return -1;
  }
  *out = d;
  return 0;
}

void dp_destroy(dp_t *d)
{
  if (!d) return;
  char err[256];
  for (int i = 0; i < d->n; i++) {
    if (!d->m[i]) continue;
    if (dev_select(d->dev[i], err, sizeof err) != 0) continue;
    dev_stream_sync(d->stream[i], err, sizeof err);
    for (int e = 0; e < EV_COUNT; e++) dev_event_destroy(d->ev[i][e]);
    model_destroy(d->m[i]); /* its arena frees the buffers charged to it */
  }
  free(d);
}

model_t *dp_model(dp_t *d, int i) { return i >= 0 && i < d->n ? d->m[i] : NULL; }
int dp_direct_peers(const dp_t *d) { return d->direct; }

#define REC(i, e) CHECK(dev_event_record(d->ev[i][e], d->stream[i], err, errlen))

/* Device 0's weights and BatchNorm buffers into replica i, on replica i's stream. */
static int pull_weights(dp_t *d, int i, char *err, size_t errlen)
{
  CHECK(dev_copy(model_params(d->m[i]), d->dev[i], model_params(d->m[0]), d->dev[0],
                    d->nflat * sizeof(float), d->stream[i], err, errlen));
  return dev_copy(model_buffers(d->m[i]), d->dev[i], model_buffers(d->m[0]), d->dev[0],
                     d->nbuf * sizeof(float), d->stream[i], err, errlen);
}

/* torch.nn.parallel.scatter's chunks: ceil(n / ndev) images each, the last ones short or empty. */
static void split(dp_t *d, int n)
{
  int c = (n + d->n - 1) / d->n;
  for (int i = 0; i < d->n; i++) {
    int left = n - i * c;
    d->cnt[i] = left < 0 ? 0 : left < c ? left : c;
  }
}

static size_t first_image(const dp_t *d, int i)
{
  size_t off = 0;
  for (int k = 0; k < i; k++) off += (size_t)d->cnt[k];
  return off;
}

/* The whole batch to device 0 (ordered after the previous step's optimizer update); then each
 * replica pulls the weights, the buffers and its chunk. */
static int scatter(dp_t *d, const float *x, const int32_t *y, int n, char *err, size_t errlen)
{
  size_t px = d->px;
  int h = DEV_HOST;
  CHECK(dev_select(d->dev[0], err, errlen));
  REC(0, EV_UP0);
  CHECK(dev_copy(d->x0, d->dev[0], x, h, (size_t)n * px * 3 * sizeof(float), d->stream[0], err,
                    errlen));
  CHECK(dev_copy(d->y0, d->dev[0], y, h, (size_t)n * px * sizeof(int32_t), d->stream[0], err,
                    errlen));
  REC(0, EV_UP1);
  for (int i = 1; i < d->n && d->cnt[i]; i++) {
    CHECK(dev_select(d->dev[i], err, errlen));
    CHECK(dev_event_wait(d->stream[i], d->ev[0][EV_UP1], err, errlen));
    REC(i, EV_REP0);
    CHECK(pull_weights(d, i, err, errlen));
    CHECK(dev_copy(d->x[i], d->dev[i], d->x0 + first_image(d, i) * px * 3, d->dev[0],
                      (size_t)d->cnt[i] * px * 3 * sizeof(float), d->stream[i], err, errlen));
    REC(i, EV_REP1);
  }
  return 0;
}

/* Forward on every replica: its logits and the buffer its backward starts from. */
static int forward_all(dp_t *d, void **logits, void **dlogits, char *err, size_t errlen)
{
  for (int i = 0; i < d->n && d->cnt[i]; i++) {
    size_t elem = 0;
    CHECK(dev_select(d->dev[i], err, errlen));
    REC(i, EV_FWD0);
    CHECK(model_forward_train(d->m[i], d->x[i], d->cnt[i], NULL, &logits[i], &dlogits[i], &elem,
                              err, errlen));
    REC(i, EV_FWD1);
    if (elem != d->elem) {
      return check_fail(err, errlen,
                        "DataParallel sized its buffers for %zu-byte logits; the model has "
                        "%zu",
                        d->elem, elem);
    }
  }
  return 0;
}

/* The logits gathered on device 0, the loss of the whole batch there, and the logit gradients
 * back to the replicas. */
static int loss_on_first(dp_t *d, void *const *logits, void *const *dlogits, int n,
                         float loss_scale, char *err, size_t errlen)
{
  size_t px = d->px, lbytes = px * d->classes * d->elem;
  CHECK(dev_select(d->dev[0], err, errlen));
  for (int i = 1; i < d->n && d->cnt[i]; i++)
    CHECK(dev_event_wait(d->stream[0], d->ev[i][EV_FWD1], err, errlen));
  REC(0, EV_GA0);
  for (int i = 0; i < d->n && d->cnt[i]; i++)
    CHECK(dev_copy(d->glog + first_image(d, i) * lbytes, d->dev[0], logits[i], d->dev[i],
                      (size_t)d->cnt[i] * lbytes, d->stream[0], err, errlen));
  REC(0, EV_GA1);
  CHECK(model_loss(d->m[0], d->glog, d->y0, (size_t)n * px, loss_scale, d->gdlog, err, errlen));
  REC(0, EV_LOSS1);
  REC(0, EV_DL0);
  CHECK(dev_copy(dlogits[0], d->dev[0], d->gdlog, d->dev[0], (size_t)d->cnt[0] * lbytes,
                    d->stream[0], err, errlen));
  REC(0, EV_DL1);
  for (int i = 1; i < d->n && d->cnt[i]; i++) {
    CHECK(dev_select(d->dev[i], err, errlen));
    CHECK(dev_event_wait(d->stream[i], d->ev[0][EV_LOSS1], err, errlen));
    REC(i, EV_DL0);
    CHECK(dev_copy(dlogits[i], d->dev[i], d->gdlog + first_image(d, i) * lbytes, d->dev[0],
                      (size_t)d->cnt[i] * lbytes, d->stream[i], err, errlen));
    REC(i, EV_DL1);
  }
  return 0;
}

/* Backward on every replica; only device 0 accumulates (the others' gradients are summed in). */
static int backward_all(dp_t *d, int accumulate, char *err, size_t errlen)
{
  for (int i = 0; i < d->n && d->cnt[i]; i++) {
    CHECK(dev_select(d->dev[i], err, errlen));
    REC(i, EV_BWD0);
    CHECK(model_backward(d->m[i], i == 0 ? accumulate : 0, NULL, err, errlen));
    REC(i, EV_BWD1);
  }
  return 0;
}

/* Every replica's gradients staged on device 0, then one sum in device order. */
static int reduce_on_first(dp_t *d, char *err, size_t errlen)
{
  CHECK(dev_select(d->dev[0], err, errlen));
  for (int i = 1; i < d->n && d->cnt[i]; i++)
    CHECK(dev_event_wait(d->stream[0], d->ev[i][EV_BWD1], err, errlen));
  REC(0, EV_RED0);
  const void *srcs[DP_MAX_DEVICES];
  float *g0 = model_grads(d->m[0]);
  int k = 0;
  srcs[k++] = g0;
  for (int i = 1; i < d->n && d->cnt[i]; i++) {
    CHECK(dev_copy(d->stage[i], d->dev[0], model_grads(d->m[i]), d->dev[i],
                      d->nflat * sizeof(float), d->stream[0], err, errlen));
    srcs[k++] = d->stage[i];
  }
  if (k > 1)
    CHECK(dev_reduce(g0, srcs, k, d->nflat, SHMDDP_F32, SHMDDP_SUM, 1, d->dev[0], d->stream[0],
                     err, errlen));
  REC(0, EV_RED1);
  return 0;
}

int dp_train_step(dp_t *d, const float *x, const int32_t *y, int n, float loss_scale,
                  int accumulate, char *err, size_t errlen)
{
  if (d->pending)
    return check_fail(err, errlen, "dp_train_step: the previous step is not finished");
  if (n < 1 || n > d->n * d->per) {
    return check_fail(err, errlen, "a DataParallel batch of %d images: the replicas take 1 to %d",
                      n, d->n * d->per);
  }
  split(d, n);
  void *logits[DP_MAX_DEVICES], *dlogits[DP_MAX_DEVICES];
  CHECK(scatter(d, x, y, n, err, errlen));
  CHECK(forward_all(d, logits, dlogits, err, errlen));
  CHECK(loss_on_first(d, logits, dlogits, n, loss_scale, err, errlen));
  CHECK(backward_all(d, accumulate, err, errlen));
  CHECK(reduce_on_first(d, err, errlen));
  d->pending = 1;
  return 0;
}

int dp_finish_step(dp_t *d, double *loss, char *err, size_t errlen)
{
  if (!d->pending) return check_fail(err, errlen, "dp_finish_step without a step");
  d->pending = 0;
  double l = 0;
  CHECK(dev_select(d->dev[0], err, errlen));
  CHECK(model_loss_value(d->m[0], &l, err, errlen));
  /* Device 0's stream waited for every replica's backward, so every event has completed. */
  CHECK(dev_stream_sync(d->stream[0], err, errlen));
  if (loss) *loss = l;
  for (int i = 0; i < d->n; i++) {
    dev_event_t **e = d->ev[i];
    double comp = 0, comm = 0;
    if (d->cnt[i]) {
      comp = dev_event_ms(e[EV_FWD0], e[EV_FWD1]) + dev_event_ms(e[EV_BWD0], e[EV_BWD1]);
      comm = dev_event_ms(e[EV_DL0], e[EV_DL1]);
      if (i == 0) {
        comp += dev_event_ms(e[EV_GA1], e[EV_LOSS1]);
        comm += dev_event_ms(e[EV_GA0], e[EV_GA1]) + dev_event_ms(e[EV_RED0], e[EV_RED1]);
      } else {
        comm += dev_event_ms(e[EV_REP0], e[EV_REP1]);
      }
    }
    if (i == 0 && d->opt_pending) comp += dev_event_ms(e[EV_OPT0], e[EV_OPT1]);
    d->compute_ms[i] = comp;
    d->comm_ms[i] = comm;
  }
  d->opt_pending = 0;
  d->exposed_ms = d->cnt[0] ? dev_event_ms(d->ev[0][EV_BWD1], d->ev[0][EV_RED1]) : 0;
  return 0;
}

double dp_last_exposed_ms(const dp_t *d) { return d->exposed_ms; }

int dp_update(dp_t *d, struct optim *o, double lr, double grad_scale, char *err,
              size_t errlen)
{
  CHECK(dev_select(d->dev[0], err, errlen));
  REC(0, EV_OPT0);
  CHECK(model_update(d->m[0], o, lr, grad_scale, err, errlen));
  REC(0, EV_OPT1);
  d->opt_pending = 1;
  return 0;
}

void dp_last_times(const dp_t *d, int i, double *compute_ms, double *comm_ms)
{
  *compute_ms = i >= 0 && i < d->n ? d->compute_ms[i] : 0;
  *comm_ms = i >= 0 && i < d->n ? d->comm_ms[i] : 0;
}

int dp_replicate(dp_t *d, char *err, size_t errlen)
{
  CHECK(dev_select(d->dev[0], err, errlen));
  CHECK(dev_event_record(d->ev[0][EV_UP1], d->stream[0], err, errlen));
  for (int i = 1; i < d->n; i++) {
    CHECK(dev_select(d->dev[i], err, errlen));
    CHECK(dev_event_wait(d->stream[i], d->ev[0][EV_UP1], err, errlen));
    CHECK(pull_weights(d, i, err, errlen));
    CHECK(dev_stream_sync(d->stream[i], err, errlen));
  }
  return dev_select(d->dev[0], err, errlen);
}

int dp_eval(dp_t *d, const float *x, const int32_t *y, int n, int32_t *pred, double *loss_sum,
            char *err, size_t errlen)
{
  if (n < 1 || n > d->n * d->per) {
    return check_fail(err, errlen, "a DataParallel evaluation batch of %d images: 1 to %d", n,
                      d->n * d->per);
  }
  split(d, n);
  size_t px = d->px;
  int h = DEV_HOST;
  /* Evaluation is not timed: each chunk goes straight to its device. */
  for (int i = 0; i < d->n && d->cnt[i]; i++) {
    size_t first = first_image(d, i), cnt = (size_t)d->cnt[i];
    float l = 0;
    CHECK(dev_select(d->dev[i], err, errlen));
    CHECK(dev_copy(d->x[i], d->dev[i], x + first * px * 3, h, cnt * px * 3 * sizeof(float),
                      d->stream[i], err, errlen));
    CHECK(dev_copy(d->y[i], d->dev[i], y + first * px, h, cnt * px * sizeof(int32_t),
                      d->stream[i], err, errlen));
    CHECK(model_eval(d->m[i], d->x[i], d->y[i], d->cnt[i], d->pred[i], &l, err, errlen));
    CHECK(dev_copy(pred + first * px, h, d->pred[i], d->dev[i], cnt * px * sizeof(int32_t),
                      d->stream[i], err, errlen));
    CHECK(dev_stream_sync(d->stream[i], err, errlen));
    double counted = 0;
    for (size_t p = first * px; p < (first + cnt) * px; p++)
      counted += y[p] >= 0 && (size_t)y[p] < d->classes;
    *loss_sum += (double)l * counted;
  }
  return dev_select(d->dev[0], err, errlen);
}
