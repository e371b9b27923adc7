/* unet.c — the U-Net behind model.h: levels of two conv3x3-norm-ReLU blocks, max-pool down,
 * transposed-conv up with skip concat, a 1x1 head and softmax cross-entropy; its buffers and
 * the forward/backward schedule (construction is in unet_build.c).
 *
 * Backward reuses two scratch gradient buffers (ping-pong) plus one buffer per skip level,
 * which holds the skip's gradient from the decoder until the encoder adds the pool's to it. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/device.h"
#include "src/model/unet_impl.h"
#include "src/obs/timeline.h"

/* ---- allocation ---- */

typedef struct {
  model_t *m;
  char *err;
  size_t errlen;
  int failed;
  float *hbuf; /* on a GPU: host staging of the normalisation buffers (running stats) */
} alloc_ctx_t;

static void *take(alloc_ctx_t *a, size_t bytes, arena_category_t cat, const char *name)
{
  if (a->failed) return NULL;
  void *p = arena_calloc(a->m->arena, bytes, cat, name);
  if (!p) {
    snprintf(a->err, a->errlen, "%s", arena_last_error(a->m->arena));
    a->failed = 1;
  } else if (a->m->dev != DEV_HOST && a->m->ops.fill_zero(&a->m->ops, p, bytes) != 0) {
    snprintf(a->err, a->errlen, "clearing %s: %s", name, a->m->ops.last_error(&a->m->ops));
    a->failed = 1; /* device arenas do not clear their blocks */
  }
  return p;
}

static void alloc_block(alloc_ctx_t *a, block_t *b, size_t P, float **running, size_t *ws)
{
  model_t *m = a->m;
  size_t e = m->ops.elem, C = (size_t)b->norm.C;
  b->a = take(a, P * C * e, ARENA_ACTIVATIONS, "conv output");
  b->r = take(a, P * C * e, ARENA_ACTIVATIONS, "norm output");
  b->norm.stats = take(a, (2 * C + 1) * sizeof(double), ARENA_WORKSPACE, "norm statistics");
  size_t saved = m->cfg.norm == MODEL_NORM_GROUP ? 2 * (size_t)m->cfg.max_batch * b->norm.G
                                                 : 2 * C + 1;
  b->norm.saved = take(a, saved * sizeof(double), ARENA_WORKSPACE, "norm statistics");
  if (m->cfg.norm == MODEL_NORM_BATCH) {
    float *host = *running; /* m->buffers, or its host staging on a GPU */
    b->norm.running = a->hbuf ? m->buffers + (host - a->hbuf) : host;
    for (size_t c = 0; c < C; c++) host[C + c] = 1.0f; /* running var */
    *running += 2 * C;
  }
  size_t need = 0;
  if (!a->failed && m->ops.conv_plan(&m->ops, &b->conv.desc, &need) != 0) {
    snprintf(a->err, a->errlen, "planning %s: %s", m->params[b->conv.w_id].name,
             m->ops.last_error(&m->ops));
    a->failed = 1;
  }
  if (need > *ws) *ws = need;
}

static void plan_conv(alloc_ctx_t *a, layer_conv_t *l, size_t *ws)
{
  model_t *m = a->m;
  size_t need = 0;
  if (!a->failed && m->ops.conv_plan(&m->ops, &l->desc, &need) != 0) {
    snprintf(a->err, a->errlen, "planning %s: %s", m->params[l->w_id].name,
             m->ops.last_error(&m->ops));
    a->failed = 1;
  }
  if (need > *ws) *ws = need;
}

static int allocate(model_t *m, char *err, size_t errlen)
{
  const model_config_t *c = &m->cfg;
  alloc_ctx_t a = {.m = m, .err = err, .errlen = errlen};
  size_t e = m->ops.elem, N = (size_t)c->max_batch;
  int L = c->levels;
  m->pf32 = take(&a, m->nparams * sizeof(float), ARENA_PARAMS, "parameters");
  m->gf32 = take(&a, m->nparams * sizeof(float), ARENA_GRADS, "gradients");
  m->separate = m->ops.dtype != OPS_F32;
  if (m->separate) {
    m->wparams = take(&a, m->nparams * e, ARENA_PARAMS, "working parameters");
    m->wgrads = take(&a, m->nparams * e, ARENA_GRADS, "working gradients");
    m->x_work = take(&a, N * c->height * c->width * c->in_channels * e, ARENA_ACTIVATIONS,
                     "input");
  } else {
    m->wparams = m->pf32;
    m->wgrads = m->gf32;
  }
  m->buffers = take(&a, (m->nbuffers ? m->nbuffers : 1) * sizeof(float), ARENA_PARAMS,
                    "normalisation buffers");
  if (a.failed) return -1;
  if (m->dev != DEV_HOST) {
    a.hbuf = calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    if (!a.hbuf) return check_fail(err, errlen, "out of memory staging normalisation buffers");
  }
  float *running = a.hbuf ? a.hbuf : m->buffers;
  size_t ws = 0, scratch = 0;
  for (int i = 0; i < L; i++) {
    size_t P = N * (size_t)(c->height >> i) * (size_t)(c->width >> i);
    size_t wi = (size_t)c->widths[i];
    if (i > 0) {
      size_t wp = (size_t)c->widths[i - 1];
      m->enc[i].pooled = take(&a, P * wp * e, ARENA_ACTIVATIONS, "pooled");
      m->enc[i].arg = take(&a, P * wp, ARENA_ACTIVATIONS, "pool indices");
      if (P * wp > scratch) scratch = P * wp;
    }
    alloc_block(&a, &m->enc[i].b1, P, &running, &ws);
    alloc_block(&a, &m->enc[i].b2, P, &running, &ws);
    if (i < L - 1) m->enc[i].dskip = take(&a, P * wi * e, ARENA_ACTIVATIONS, "skip gradient");
    if (P * wi > scratch) scratch = P * wi;
  }
  for (int i = L - 2; i >= 0; i--) {
    size_t P = N * (size_t)(c->height >> i) * (size_t)(c->width >> i);
    size_t wi = (size_t)c->widths[i];
    plan_conv(&a, &m->dec[i].up, &ws);
    m->dec[i].cat = take(&a, P * 2 * wi * e, ARENA_ACTIVATIONS, "concat");
    alloc_block(&a, &m->dec[i].b1, P, &running, &ws);
    alloc_block(&a, &m->dec[i].b2, P, &running, &ws);
    if (P * 2 * wi > scratch) scratch = P * 2 * wi;
  }
  size_t P0 = N * (size_t)c->height * c->width;
  plan_conv(&a, &m->head, &ws);
  m->logits = take(&a, P0 * c->classes * e, ARENA_ACTIVATIONS, "logits");
  /* The step's loss: (sum, count) where the device writes it, then copied within the step into
   * host memory (sum, count, bad-label word) that model_step_loss reads after an event. On the
   * host both are one buffer. */
  if (m->dev != DEV_HOST) m->loss_dev = take(&a, 2 * sizeof(double), ARENA_WORKSPACE, "loss");
  m->loss_host = dev_host_alloc(m->dev != DEV_HOST, 3 * sizeof(double));
  if (!m->loss_host) return check_fail(err, errlen, "out of (pinned) host memory for the loss");
  if (m->dev == DEV_HOST) m->loss_dev = m->loss_host;
  CHECK(dev_event_create(&m->loss_ready, m->dev, DEV_EVENT_ORDER, err, errlen));
  if (P0 * c->classes > scratch) scratch = P0 * c->classes;
  m->g[0] = take(&a, scratch * e, ARENA_ACTIVATIONS, "gradient scratch");
  m->g[1] = take(&a, scratch * e, ARENA_ACTIVATIONS, "gradient scratch");
  m->ws = take(&a, ws ? ws : 1, ARENA_WORKSPACE, "convolution workspace");
  if (!a.failed && a.hbuf &&
      dev_copy_now(m->buffers, m->dev, a.hbuf, DEV_HOST, m->nbuffers * sizeof(float), err,
                   errlen) != 0)
    a.failed = 1;
  free(a.hbuf);
  return a.failed ? -1 : 0;
}

/* Parameters from the seed; on a GPU computed on the host and copied over. */
static int init_params(model_t *m, char *err, size_t errlen)
{
  if (m->dev == DEV_HOST) {
    unet_init_params(m);
    return 0;
  }
  float *dev = m->pf32, *host = malloc((m->nparams ? m->nparams : 1) * sizeof(float));
  if (!host) return check_fail(err, errlen, "out of memory initialising parameters");
  m->pf32 = host;
  unet_init_params(m);
  m->pf32 = dev;
  int rc = dev_copy_now(dev, m->dev, host, DEV_HOST, m->nparams * sizeof(float), err, errlen);
  free(host);
  return rc;
}

int unet_create(model_t **out, const model_config_t *cfg, ops_dtype_t compute, char *err,
                size_t errlen)
{
  *out = NULL;
  if (model_config_validate(cfg, err, errlen) != 0) return -1;
  model_t *m = calloc(1, sizeof *m);
  if (!m) return check_fail(err, errlen, "out of memory creating the model");
  m->cfg = *cfg;
  for (int i = cfg->levels; i < MODEL_MAX_LEVELS; i++) m->cfg.widths[i] = 0;
  m->dev = cfg->device == MODEL_DEVICE_CUDA ? cfg->cuda_device : DEV_HOST;
  if (dev_ops_init(&m->ops, compute, m->dev, !cfg->conv_benchmark, err, errlen) != 0) goto fail;
  m->ops_ready = 1;
  if (m->dev == DEV_HOST) {
    if (arena_create(&m->arena, NULL, "cpu", err, errlen) != 0) goto fail;
  } else {
    arena_allocator_t alloc = {.alloc = dev_alloc, .free = dev_free, .device = m->dev};
    char label[32];
    snprintf(label, sizeof label, "cuda:%d", m->dev);
    if (arena_create(&m->arena, &alloc, label, err, errlen) != 0) goto fail;
    /* the backend's own scratch (reduction partials, cuBLAS workspace) */
    arena_charge(m->arena, ARENA_WORKSPACE, dev_ops_scratch_bytes(&m->ops));
  }
  if (unet_register_params(m) != 0) {
    check_fail(err, errlen, "out of memory registering parameters");
    goto fail;
  }
  if (allocate(m, err, errlen) != 0) goto fail;
  if (init_params(m, err, errlen) != 0) goto fail;
  if (unet_build_signature(m) != 0) {
    check_fail(err, errlen, "out of memory building the model signature");
    goto fail;
  }
  *out = m;
  return 0;
fail:
  model_destroy(m);
  return -1;
}

int model_create(model_t **out, const model_config_t *cfg, char *err, size_t errlen)
{
  ops_dtype_t dt = cfg->precision == MODEL_BF16 ? OPS_BF16
                   : cfg->precision == MODEL_FP16 ? OPS_F16 : OPS_F32;
  return unet_create(out, cfg, dt, err, errlen);
}

static void free_plans(model_t *m)
{
  if (!m->ops_ready || !m->params) return;
  for (int i = 0; i < m->cfg.levels; i++) {
    m->ops.conv_plan_free(&m->ops, &m->enc[i].b1.conv.desc);
    m->ops.conv_plan_free(&m->ops, &m->enc[i].b2.conv.desc);
    m->ops.conv_plan_free(&m->ops, &m->dec[i].up.desc);
    m->ops.conv_plan_free(&m->ops, &m->dec[i].b1.conv.desc);
    m->ops.conv_plan_free(&m->ops, &m->dec[i].b2.conv.desc);
  }
  m->ops.conv_plan_free(&m->ops, &m->head.desc);
}

void model_destroy(model_t *m)
{
  if (!m) return;
  free_plans(m);
  arena_destroy(m->arena); /* every tensor came from it */
  dev_event_destroy(m->loss_ready);
  dev_host_free(m->dev != DEV_HOST, m->loss_host);
  if (m->ops_ready) m->ops.destroy(&m->ops);
  free(m->params);
  free(m->signature);
  free(m);
}

size_t model_num_params(const model_t *m) { return m->nparams; }
float *model_params(model_t *m) { return m->pf32; }
float *model_grads(model_t *m) { return m->gf32; }
size_t model_num_buffers(const model_t *m) { return m->nbuffers; }
float *model_buffers(model_t *m) { return m->buffers; }
const char *model_signature(const model_t *m) { return m->signature; }
struct arena *model_arena(model_t *m) { return m->arena; }

void *model_stream(const model_t *m) { return dev_ops_stream(&m->ops); }
double model_last_loss(const model_t *m) { return m->last_loss; }
int model_step_queued(model_t *m, char *err, size_t errlen)
{
  CHECK(dev_event_record(m->loss_ready, model_stream(m), err, errlen));
  m->loss_pending = 1;
  return 0;
}
int unet_num_tensors(const model_t *m) { return m->ntensors; }
const layer_param_t *unet_tensor(const model_t *m, int i) { return &m->params[i]; }

/* ---- forward and backward ---- */

static int block_fwd(const layer_ctx_t *c, block_t *b, int n, size_t hw, const void *in)
{
  CHECK(layer_conv_fwd(c, &b->conv, n, in, b->a));
  return layer_norm_fwd(c, &b->norm, n, hw, b->a, b->r);
}

/* d holds the gradient w.r.t. b->r and is overwritten; the input gradient goes to dx. */
static int block_bwd(const layer_ctx_t *c, block_t *b, int n, size_t hw, const void *in,
                     void *d, void *dx)
{
  CHECK(layer_norm_bwd(c, &b->norm, n, hw, d, b->a, b->r));
  return layer_conv_bwd(c, &b->conv, n, in, d, dx);
}

/* Forward through the network; *head_in gets the head's input (backward starts from it). */
static int forward(model_t *m, const layer_ctx_t *c, const void *x, int n, const void **head_in)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const model_config_t *cf = &m->cfg;
  int L = cf->levels;
  const void *in = x;
  for (int i = 0; i < L; i++) {
    size_t hw = (size_t)(cf->height >> i) * (size_t)(cf->width >> i);
    if (i > 0) {
      CHECK_OPS(&m->ops,
                m->ops.maxpool_fwd(&m->ops, m->enc[i - 1].b2.r, n, cf->height >> (i - 1),
                                   cf->width >> (i - 1), cf->widths[i - 1], m->enc[i].pooled,
                                   m->enc[i].arg),
                "max-pool");
      in = m->enc[i].pooled;
    }
    CHECK(block_fwd(c, &m->enc[i].b1, n, hw, in));
    CHECK(block_fwd(c, &m->enc[i].b2, n, hw, m->enc[i].b1.r));
    in = m->enc[i].b2.r;
  }
  for (int i = L - 2; i >= 0; i--) {
    size_t hw = (size_t)(cf->height >> i) * (size_t)(cf->width >> i);
    CHECK(layer_conv_fwd(c, &m->dec[i].up, n, in, m->g[0]));
    CHECK_OPS(&m->ops,
              m->ops.concat_fwd(&m->ops, m->enc[i].b2.r, cf->widths[i], m->g[0], cf->widths[i],
                                (size_t)n * hw, m->dec[i].cat),
              "concat");
    CHECK(block_fwd(c, &m->dec[i].b1, n, hw, m->dec[i].cat));
    CHECK(block_fwd(c, &m->dec[i].b2, n, hw, m->dec[i].b1.r));
    in = m->dec[i].b2.r;
  }
  CHECK(layer_conv_fwd(c, &m->head, n, in, m->logits));
  *head_in = in;
  return 0;
}

static int backward(model_t *m, const layer_ctx_t *c, const void *x, const void *head_in, int n)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const model_config_t *cf = &m->cfg;
  int L = cf->levels;
  /* g[0] holds dlogits; cur indexes the scratch buffer holding the running gradient. */
  int cur = 1;
  CHECK(layer_conv_bwd(c, &m->head, n, head_in, m->g[0], m->g[1]));
  for (int i = 0; i <= L - 2; i++) {
    size_t hw = (size_t)(cf->height >> i) * (size_t)(cf->width >> i);
    dec_t *d = &m->dec[i];
    CHECK(block_bwd(c, &d->b2, n, hw, d->b1.r, m->g[cur], m->g[!cur]));
    cur = !cur;
    CHECK(block_bwd(c, &d->b1, n, hw, d->cat, m->g[cur], m->g[!cur]));
    cur = !cur;
    CHECK_OPS(&m->ops,
              m->ops.concat_bwd(&m->ops, m->g[cur], cf->widths[i], cf->widths[i], (size_t)n * hw,
                                m->enc[i].dskip, 0, m->g[!cur]),
              "concat backward");
    cur = !cur;
    const void *below = i == L - 2 ? m->enc[L - 1].b2.r : m->dec[i + 1].b2.r;
    CHECK(layer_conv_bwd(c, &d->up, n, below, m->g[cur], m->g[!cur]));
    cur = !cur;
  }
  for (int i = L - 1; i >= 0; i--) {
    size_t hw = (size_t)(cf->height >> i) * (size_t)(cf->width >> i);
    enc_t *e = &m->enc[i];
    void *d = m->g[cur];
    if (i < L - 1) {
      /* g[cur] is the gradient of the pooled input of level i+1: add it to the skip's. */
      CHECK_OPS(&m->ops,
                m->ops.maxpool_bwd(&m->ops, m->g[cur], m->enc[i + 1].arg, n, cf->height >> i,
                                   cf->width >> i, cf->widths[i], e->dskip, 1),
                "max-pool backward");
      d = e->dskip;
    }
    void *free_buf = d == m->g[0] ? m->g[1] : m->g[0];
    CHECK(block_bwd(c, &e->b2, n, hw, e->b1.r, d, free_buf));
    const void *in = i == 0 ? x : e->pooled;
    void *dx = i == 0 ? NULL : (free_buf == m->g[0] ? m->g[1] : m->g[0]);
    CHECK(block_bwd(c, &e->b1, n, hw, in, free_buf, dx));
    if (dx) cur = dx == m->g[0] ? 0 : 1;
  }
  return 0;
}

static int check_batch(const model_t *m, const float *x, int batch, char *err, size_t errlen)
{
  if (batch < 0 || batch > m->cfg.max_batch)
    return check_fail(err, errlen, "batch of %d images: the model was built for 0 to %d", batch,
                      m->cfg.max_batch);
  if (batch > 0 && !x) return check_fail(err, errlen, "no input images for a batch of %d", batch);
  return 0;
}

static void ctx_init(model_t *m, layer_ctx_t *c, int train, int accumulate,
                     const model_hooks_t *hooks, char *err, size_t errlen)
{
  *c = (layer_ctx_t){.ops = &m->ops, .params = m->params, .wparams = m->wparams,
                     .wgrads = m->wgrads, .grads = m->gf32, .separate = m->separate,
                     .accumulate = accumulate, .train = train, .hooks = hooks, .ws = m->ws,
                     .err = err, .errlen = errlen};
}

static int prepare(model_t *m, layer_ctx_t *c, const float *x, int batch, int train,
                   int accumulate, const model_hooks_t *hooks, const void **xin, char *err,
                   size_t errlen)
{
  ctx_init(m, c, train, accumulate, hooks, err, errlen);
  m->fwd_head_in = NULL; /* this forward replaces what a split step saved */
  *xin = x;
  if (m->separate) {
    CHECK_OPS(&m->ops, m->ops.from_f32(&m->ops, m->pf32, m->nparams, m->wparams),
              "casting parameters");
    size_t nx = (size_t)batch * m->cfg.height * m->cfg.width * m->cfg.in_channels;
    if (nx) CHECK_OPS(&m->ops, m->ops.from_f32(&m->ops, x, nx, m->x_work), "casting the input");
    *xin = m->x_work;
  }
  return 0;
}

int model_train_step_queue(model_t *m, const float *x, const int32_t *y, int batch,
                           float loss_scale, int accumulate, const model_hooks_t *hooks,
                           char *err, size_t errlen)
{
  if (check_batch(m, x, batch, err, errlen) != 0) return -1;
  if (batch > 0 && !y)
    return check_fail(err, errlen, "no labels for a training batch of %d", batch);
  if (!(loss_scale > 0) || !isfinite(loss_scale))
    return check_fail(err, errlen, "loss scale %g: must be a positive finite number", loss_scale);
  layer_ctx_t c;
  const void *xin;
  CHECK(prepare(m, &c, x, batch, 1, accumulate, hooks, &xin, err, errlen));
  int tl = timeline_begin(TIMELINE_FORWARD, model_stream(m)); /* the loss counts as forward */
  const void *head_in;
  CHECK(forward(m, &c, xin, batch, &head_in));
  size_t P = (size_t)batch * m->cfg.height * m->cfg.width;
  /* The loss stays where the device wrote it (model_step_loss reads it): nothing here waits, so
   * the host never drains the GPU between forward and backward, and the whole step can be
   * captured in a CUDA graph. */
  CHECK_OPS(&m->ops,
            m->ops.softmax_ce_async(&m->ops, m->logits, y, P, m->cfg.classes, m->cfg.ignore_index,
                                    loss_scale, 0, m->g[0], NULL, m->loss_dev),
            "the loss");
  tl = timeline_next(tl, TIMELINE_BACKWARD, model_stream(m));
  CHECK(backward(m, &c, xin, head_in, batch));
  timeline_end(tl, model_stream(m));
  /* The loss and the label check travel to host memory in the step itself (inside its CUDA
   * graph too): model_step_loss then waits on an event, not on the stream, so work queued after
   * the step (optimizer, next upload) keeps the GPU busy meanwhile. */
  if (m->loss_dev != m->loss_host)
    CHECK(dev_copy(m->loss_host, DEV_HOST, m->loss_dev, m->dev, 2 * sizeof(double),
                   model_stream(m), err, errlen));
  CHECK_OPS(&m->ops, m->ops.labels_check_async(&m->ops, (unsigned long long *)(m->loss_host + 2)),
            "the label check");
  return 0;
}

int model_step_loss(model_t *m, float *loss_out, char *err, size_t errlen)
{
  if (m->loss_pending) {
    if (dev_event_sync(m->loss_ready, err, errlen) != 0)
      return check_prefix(err, errlen, "the training step failed on the GPU");
    m->loss_pending = 0;
    unsigned long long bad;
    memcpy(&bad, m->loss_host + 2, sizeof bad);
    CHECK_OPS(&m->ops, m->ops.labels_result(&m->ops, bad), "the loss");
    double *h = m->loss_host;
    m->last_loss = h[1] > 0 ? h[0] / h[1] : 0;
  }
  if (loss_out) *loss_out = (float)m->last_loss;
  return 0;
}

int model_train_step(model_t *m, const float *x, const int32_t *y, int batch, float loss_scale,
                     int accumulate, const model_hooks_t *hooks, float *loss_out, char *err,
                     size_t errlen)
{
  CHECK(model_train_step_queue(m, x, y, batch, loss_scale, accumulate, hooks, err, errlen));
  CHECK(model_step_queued(m, err, errlen));
  return model_step_loss(m, loss_out, err, errlen);
}

/* ---- the split step (DataParallel) ---- */

int model_forward_train(model_t *m, const float *x, int batch, const model_hooks_t *hooks,
                        void **logits, void **dlogits, size_t *elem, char *err, size_t errlen)
{
  m->fwd_head_in = NULL;
  if (check_batch(m, x, batch, err, errlen) != 0) return -1;
  layer_ctx_t c;
  const void *xin;
  CHECK(prepare(m, &c, x, batch, 1, 0, hooks, &xin, err, errlen));
  const void *head_in;
  CHECK(forward(m, &c, xin, batch, &head_in));
  m->fwd_x = xin;
  m->fwd_head_in = head_in;
  m->fwd_batch = batch;
  *logits = m->logits;
  *dlogits = m->g[0]; /* backward() starts from g[0] */
  *elem = m->ops.elem;
  return 0;
}

int model_loss(model_t *m, const void *logits, const int32_t *y, size_t pixels,
               float loss_scale, void *dlogits, char *err, size_t errlen)
{
  if (!(loss_scale > 0) || !isfinite(loss_scale))
    return check_fail(err, errlen, "loss scale %g: must be a positive finite number", loss_scale);
  CHECK_OPS(&m->ops,
            m->ops.softmax_ce_async(&m->ops, logits, y, pixels, m->cfg.classes,
                                    m->cfg.ignore_index, loss_scale, 0, dlogits, NULL, m->loss_dev),
            "the loss");
  return 0;
}

int model_loss_value(model_t *m, double *loss, char *err, size_t errlen)
{
  /* The stream first: a plain copy only orders against the current device's streams, and a
   * DataParallel driver may have another device current. */
  double h[2];
  CHECK(dev_stream_sync(model_stream(m), err, errlen));
  CHECK(dev_copy_now(h, DEV_HOST, m->loss_dev, m->dev, sizeof h, err, errlen));
  CHECK_OPS(&m->ops, m->ops.labels_check(&m->ops), "the loss");
  m->last_loss = h[1] > 0 ? h[0] / h[1] : 0;
  *loss = m->last_loss;
  return 0;
}

int model_backward(model_t *m, int accumulate, const model_hooks_t *hooks, char *err,
                   size_t errlen)
{
  if (!m->fwd_head_in)
    return check_fail(err, errlen, "model_backward without a successful model_forward_train");
  layer_ctx_t c;
  ctx_init(m, &c, 1, accumulate, hooks, err, errlen);
  int rc = backward(m, &c, m->fwd_x, m->fwd_head_in, m->fwd_batch);
  m->fwd_head_in = NULL; /* the saved activations belong to one backward */
  return rc;
}

int model_eval(model_t *m, const float *x, const int32_t *y, int batch, int32_t *pred,
               float *loss_out, char *err, size_t errlen)
{
  if (check_batch(m, x, batch, err, errlen) != 0) return -1;
  layer_ctx_t c;
  const void *xin;
  CHECK(prepare(m, &c, x, batch, 0, 0, NULL, &xin, err, errlen));
  const void *head_in;
  CHECK(forward(m, &c, xin, batch, &head_in));
  size_t P = (size_t)batch * m->cfg.height * m->cfg.width;
  double sum = 0;
  long count = 0;
  CHECK_OPS(&m->ops,
            m->ops.softmax_ce(&m->ops, m->logits, y, P, m->cfg.classes, m->cfg.ignore_index, 1, 0,
                              NULL, pred, &sum, &count),
            "the loss");
  m->last_loss = count ? sum / (double)count : 0;
  if (loss_out) *loss_out = (float)m->last_loss;
  return 0;
}
