/* unet.c — the U-Net behind model.h: levels of two conv3x3-norm-ReLU blocks, max-pool down,
 * transposed-conv up with skip concat, a 1x1 head and softmax cross-entropy; its buffers and
 * the forward/backward schedule (construction is in unet_build.c).
 *
 * Memory: forward keeps, for backward, only what cannot be recomputed cheaply: each block's
 * convolution output (the norm's input), the transposed convolutions' outputs, the pooled
 * inputs and pooling indices. Everything else — the norm+ReLU outputs (the next convolution's
 * input), the skips, the concats — is made again in backward from a kept tensor by one
 * elementwise pass, right before the convolution whose weight gradient needs it (the skips
 * live through forward instead: its peak is below backward's), at the levels SHMDDP_RECOMPUTE
 * says (recompute_policy: the deeper ones keep forward's tensors instead); the norms'
 * backward recompute the ReLU's mask from their input. Every activation and gradient is a
 * tensor of one memory plan (src/device/plan.h): a dry pass of this schedule records when each
 * is alive, and tensors that are never alive together share memory (a gradient takes the place
 * of the activation that died before it was born). The peak is what is alive at once, no more. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm/env.h"
#include "src/check.h"
#include "src/device/device.h"
#include "src/device/plan.h"
#include "src/model/conv_engine.h"
#include "src/model/optim.h"
#include "src/model/unet_impl.h"
#include "src/obs/timeline.h"

/* ---- allocation ---- */

typedef struct {
  model_t *m;
  char *err;
  size_t errlen;
  int failed;
  float *hbuf; /* on a GPU: host staging of the normalisation buffers (running stats) */
  int level;      /* the level of the layers being planned */
  size_t side_ws; /* the workspace their weight gradients need on the side stream */
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

/* Whether block b runs its conv fused: BatchNorm, and the engine's choice for the layer
 * (src/model/conv_engine.h). The second of a pair (prev: the first) takes prev's BatchNorm +
 * ReLU as its prologue; a first block (prev NULL) only its own statistics. *need grows to the
 * workspace the fused ops take. */
static void choose_fused(alloc_ctx_t *a, block_t *prev, block_t *b, size_t *need)
{
  model_t *m = a->m;
  const ops_t *o = &m->ops;
  if (a->failed || m->cfg.norm != MODEL_NORM_BATCH) return;
  size_t fws = 0;
  int fuses = model_conv_engine_fuses(&m->engine, o, &b->conv.desc,
                                      prev ? OPS_FUSE_PAIR : OPS_FUSE_STATS, &fws);
  if (fuses < 0) {
    snprintf(a->err, a->errlen, "planning %s fused: %s", m->params[b->conv.w_id].name,
             o->last_error(o));
    a->failed = 1;
    return;
  }
  if (!fuses) return;
  if (fws > *need) *need = fws;
  if (!prev) {
    b->stats_fused = 1;
    return;
  }
  b->fused = prev->feeds_fused = 1;
  prev->norm.coef = take(a, 2 * (size_t)prev->norm.C * sizeof(float), ARENA_WORKSPACE,
                         "norm coefficients");
}

/* Whether b's conv takes its plain input gradient on the fused kernels (OPS_FUSE_DGRAD, the
 * engine's choice): where its backward has no BatchNorm to fuse into it (b not a fused pair's
 * second). *need grows to their workspace. */
static void choose_dgrad(alloc_ctx_t *a, block_t *b, size_t *need)
{
  model_t *m = a->m;
  const ops_t *o = &m->ops;
  if (a->failed || b->fused) return;
  size_t dws = 0;
  int fuses = model_conv_engine_fuses(&m->engine, o, &b->conv.desc, OPS_FUSE_DGRAD, &dws);
  if (fuses < 0) {
    snprintf(a->err, a->errlen, "planning %s's input gradient: %s",
             m->params[b->conv.w_id].name, o->last_error(o));
    a->failed = 1;
    return;
  }
  if (!fuses) return;
  if (dws > *need) *need = dws;
  b->conv.dgrad_fused = 1;
}

static void alloc_block(alloc_ctx_t *a, block_t *b, block_t *prev, size_t *stage,
                        float **running, size_t *ws)
{
  model_t *m = a->m;
  size_t C = (size_t)b->norm.C;
  size_t st = layer_stage_elems(m->params, b->norm.gamma_id, b->norm.beta_id);
  if (st > *stage) *stage = st;
  st = layer_stage_elems(m->params, b->conv.w_id, b->conv.b_id);
  if (st > *stage) *stage = st;
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
  choose_fused(a, prev, b, &need);
  choose_dgrad(a, b, &need);
  if (need > *ws) *ws = need;
  if (a->level >= m->side_from && need > a->side_ws) a->side_ws = need;
}

static void plan_conv(alloc_ctx_t *a, layer_conv_t *l, size_t *stage, size_t *ws)
{
  model_t *m = a->m;
  size_t need = 0, st = layer_stage_elems(m->params, l->w_id, l->b_id);
  if (st > *stage) *stage = st;
  if (!a->failed && m->ops.conv_plan(&m->ops, &l->desc, &need) != 0) {
    snprintf(a->err, a->errlen, "planning %s: %s", m->params[l->w_id].name,
             m->ops.last_error(&m->ops));
    a->failed = 1;
  }
  if (need > *ws) *ws = need;
  if (a->level >= m->side_from && need > a->side_ws) a->side_ws = need;
}

/* Whether the up-convolution l (planned) takes its gradient gathered (conv_engine.h
 * model_upconv_gathered). The side table is the same backend's: it has the entries too. */
static void choose_gathered(alloc_ctx_t *a, layer_conv_t *l)
{
  l->dy_gathered = !a->failed && model_upconv_gathered(&a->m->ops, &l->desc, a->m->up_gathered);
}

static int allocate(model_t *m, char *err, size_t errlen)
{
  const model_config_t *c = &m->cfg;
  alloc_ctx_t a = {.m = m, .err = err, .errlen = errlen};
  size_t e = m->ops.elem, N = (size_t)c->max_batch;
  int L = c->levels;
  /* The flat buffers' alignment padding is never written by a layer: cleared here (take), the
   * gradients' stays zero and keeps that of the weights and the optimizer state zero. */
  m->pf32 = take(&a, m->nflat * sizeof(float), ARENA_PARAMS, "parameters");
  m->separate = m->ops.dtype != OPS_F32;
  /* working_grads: the weight-gradient ops write the whole working-precision buffer, which the
   * optimizer reads (model_update); otherwise f32 gradients, staged one layer at a time below */
  if (m->separate && c->working_grads)
    m->wgrads = take(&a, m->nflat * e, ARENA_GRADS, "working gradients");
  else
    m->gf32 = take(&a, m->nflat * sizeof(float), ARENA_GRADS, "gradients");
  m->wstale = m->separate;
  if (m->separate) {
    m->wparams = take(&a, m->nflat * e, ARENA_PARAMS, "working parameters");
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
  size_t ws = 0, stage = 0;
  for (int i = 0; i < L; i++) {
    a.level = i;
    alloc_block(&a, &m->enc[i].b1, NULL, &stage, &running, &ws);
    alloc_block(&a, &m->enc[i].b2, &m->enc[i].b1, &stage, &running, &ws);
  }
  for (int i = L - 2; i >= 0; i--) {
    a.level = i + 1; /* the up-convolution counts at its input level i+1 (conv_bwd) */
    plan_conv(&a, &m->dec[i].up, &stage, &ws);
    choose_gathered(&a, &m->dec[i].up);
    a.level = i;
    alloc_block(&a, &m->dec[i].b1, NULL, &stage, &running, &ws);
    alloc_block(&a, &m->dec[i].b2, &m->dec[i].b1, &stage, &running, &ws);
  }
  a.level = 0;
  plan_conv(&a, &m->head, &stage, &ws);
  m->head_fwd_fused = !a.failed && model_head_on_norm(&m->ops, &m->head.desc, m->head_fwd_fused);
  m->head_fused = !a.failed && model_head_dy_in_norm(&m->ops, &m->head.desc, m->head_fused);
  m->head_train =
      model_head_train_usable(&m->ops, m->head_fwd_fused, m->head_fused, m->head_train);
  /* With low-precision working copies, weight gradients are staged one layer at a time (the
   * largest layer's worth) and folded into the f32 gradients at once: no full-size copy. */
  if (m->separate && m->gf32)
    m->gstage = take(&a, stage * e, ARENA_GRADS, "gradient staging (one layer)");
  /* The step's loss: (sum, count) where the device writes it, then copied within the step into
   * host memory (sum, count, bad-label word) that model_step_loss reads after an event. On the
   * host both are one buffer. */
  if (m->dev != DEV_HOST) m->loss_dev = take(&a, 2 * sizeof(double), ARENA_WORKSPACE, "loss");
  m->loss_host = dev_host_alloc(m->dev != DEV_HOST, 3 * sizeof(double));
  if (!m->loss_host) {
    free(a.hbuf);
    return check_fail(err, errlen, "out of (pinned) host memory for the loss");
  }
  if (m->dev == DEV_HOST) m->loss_dev = m->loss_host;
  if (dev_event_create(&m->loss_ready, m->dev, DEV_EVENT_ORDER, err, errlen) != 0) {
    free(a.hbuf);
    return -1;
  }
  m->ws = take(&a, ws ? ws : 1, ARENA_WORKSPACE, "convolution workspace");
  /* the side stream's own (its layers' largest need); on the host the schedule runs in order */
  m->side_ws = m->side_ready ? take(&a, a.side_ws ? a.side_ws : 1, ARENA_WORKSPACE,
                                    "convolution workspace (weight gradients beside)")
                             : m->ws;
  if (!a.failed && a.hbuf &&
      dev_copy_now(m->buffers, m->dev, a.hbuf, DEV_HOST, m->nbuffers * sizeof(float), err,
                   errlen) != 0)
    a.failed = 1;
  free(a.hbuf);
  return a.failed ? -1 : 0;
}

static int plan_activations(model_t *m, char *err, size_t errlen);
static int side_policy(model_t *m, char *err, size_t errlen);

/* Parameters from the seed; on a GPU computed on the host and copied over. */
static int init_params(model_t *m, char *err, size_t errlen)
{
  if (m->dev == DEV_HOST) {
    unet_init_params(m);
    return 0;
  }
  float *dev = m->pf32, *host = malloc((m->nflat ? m->nflat : 1) * sizeof(float));
  if (!host) return check_fail(err, errlen, "out of memory initialising parameters");
  m->pf32 = host;
  unet_init_params(m);
  m->pf32 = dev;
  int rc = dev_copy_now(dev, m->dev, host, DEV_HOST, m->nflat * sizeof(float), err, errlen);
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
  m->fwd_head_in = -1;
  for (int i = cfg->levels; i < MODEL_MAX_LEVELS; i++) m->cfg.widths[i] = 0;
  m->dev = cfg->device == MODEL_DEVICE_CUDA ? cfg->cuda_device : DEV_HOST;
  if (dev_ops_init(&m->ops, compute, m->dev, !cfg->conv_benchmark, err, errlen) != 0) goto fail;
  m->ops_ready = 1;
  if (side_policy(m, err, errlen) != 0) goto fail;
  int fuse_fwd = 1, fuse_bwd = 1, fuse_train = 0;
  if (model_head_fused_read(&fuse_fwd, &fuse_bwd, &fuse_train, err, errlen) != 0) goto fail;
  m->head_train = fuse_train && cfg->norm == MODEL_NORM_BATCH; /* and the planned head */
  m->head_fused = fuse_bwd && cfg->norm == MODEL_NORM_BATCH; /* and the planned head (allocate) */
  m->head_fwd_fused = fuse_fwd && cfg->norm == MODEL_NORM_BATCH; /* and the planned head (allocate) */
  if (model_upconv_gathered_read(m->ops.dtype, &m->up_gathered, err, errlen) != 0) goto fail;
  if (model_conv_engine_read(&m->engine, err, errlen) != 0) goto fail;
  if (m->dev != DEV_HOST && m->side_from < m->cfg.levels) {
    if (dev_ops_init(&m->side_ops, compute, m->dev, !cfg->conv_benchmark, err, errlen) != 0)
      goto fail;
    m->side_ready = 1;
    if (dev_event_create(&m->side_fork, m->dev, DEV_EVENT_ORDER, err, errlen) != 0 ||
        dev_event_create(&m->side_join, m->dev, DEV_EVENT_ORDER, err, errlen) != 0)
      goto fail;
  }
  if (m->dev == DEV_HOST) {
    if (arena_create(&m->arena, NULL, "cpu", err, errlen) != 0) goto fail;
  } else {
    arena_allocator_t alloc = {.alloc = dev_alloc, .free = dev_free, .device = m->dev};
    char label[32];
    snprintf(label, sizeof label, "cuda:%d", m->dev);
    if (arena_create(&m->arena, &alloc, label, err, errlen) != 0) goto fail;
    /* the backend's own scratch (reduction partials, cuBLAS workspace) */
    arena_charge(m->arena, ARENA_WORKSPACE, dev_ops_scratch_bytes(&m->ops));
    if (m->side_ready) arena_charge(m->arena, ARENA_WORKSPACE, dev_ops_scratch_bytes(&m->side_ops));
  }
  if (unet_register_params(m) != 0) {
    check_fail(err, errlen, "out of memory registering parameters");
    goto fail;
  }
  if (allocate(m, err, errlen) != 0) goto fail;
  if (plan_activations(m, err, errlen) != 0) goto fail;
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
  plan_destroy(m->plan);
  dev_event_destroy(m->loss_ready);
  dev_event_destroy(m->side_fork);
  dev_event_destroy(m->side_join);
  if (m->side_ready) m->side_ops.destroy(&m->side_ops);
  dev_host_free(m->dev != DEV_HOST, m->loss_host);
  if (m->ops_ready) m->ops.destroy(&m->ops);
  free(m->params);
  free(m->signature);
  free(m);
}

size_t model_num_params(const model_t *m) { return m->nparams; }
float *model_params(model_t *m)
{
  m->wstale = m->separate; /* the caller may write them */
  return m->pf32;
}
float *model_grads(model_t *m) { return m->gf32; }

void *model_grad_buffer(model_t *m, shmddp_dtype_t *dtype)
{
  if (m->gf32) {
    *dtype = SHMDDP_F32;
    return m->gf32;
  }
  *dtype = m->ops.dtype == OPS_BF16 ? SHMDDP_BF16 : SHMDDP_F16;
  return m->wgrads;
}
size_t model_num_buffers(const model_t *m) { return m->nbuffers; }
float *model_buffers(model_t *m) { return m->buffers; }
const char *model_signature(const model_t *m) { return m->signature; }
struct arena *model_arena(model_t *m) { return m->arena; }

void model_plan_describe(const model_t *m, char *buf, size_t len)
{
  snprintf(buf, len,
           "activations: %zu tensors planned into %.1f MiB (%.1f MiB one buffer each; at most "
           "%.1f MiB alive at once)",
           plan_count(m->plan), plan_bytes(m->plan) / ARENA_MIB, plan_sum_bytes(m->plan) / ARENA_MIB,
           plan_live_peak(m->plan) / ARENA_MIB);
}

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

/* ---- the schedule: forward, loss and backward over the plan's tensors ----
 *
 * The same code makes the plan (m->planning: tensors declared and used, no op runs) and runs
 * the step. Its discipline, which keeps the recorded lifetimes true: tensors are handled by
 * plan id between operations; an operation's pointers are fetched (PT) in its own braces, just
 * before it runs (RUN), so no pointer outlives the tick it was recorded in; a tensor is
 * declared right before the operation that first writes it. */

#define PT(id) plan_ptr(m->plan, (id))
/* One operation of the schedule: run it (not while planning), then the plan's next tick. */
#define RUN(call)                                                                                  \
  do {                                                                                             \
    if (!m->planning) CHECK(call);                                                                 \
    plan_tick(m->plan);                                                                            \
  } while (0)
#define RUN_OPS(call, what)                                                                        \
  do {                                                                                             \
    if (!m->planning) CHECK_OPS(&m->ops, call, what);                                              \
    plan_tick(m->plan);                                                                            \
  } while (0)

/* Pixels of level i at the model's largest batch: tensors are planned for it. */
static size_t level_pixels(const model_t *m, int i)
{
  return (size_t)m->cfg.max_batch * (size_t)(m->cfg.height >> i) * (size_t)(m->cfg.width >> i);
}

static int declare(model_t *m, int *id, size_t elems, size_t elem_bytes, const char *name,
                   char *err, size_t errlen)
{
  *id = plan_tensor(m->plan, elems * elem_bytes, name, err, errlen);
  return *id < 0 ? -1 : 0;
}

static int block_norm_fwd(model_t *m, const layer_ctx_t *c, block_t *b, int n, int level,
                          int *out, enc_t *down, int *cat, int ready);

/* conv (input `in`, or x when in < 0) then norm+ReLU; the block keeps its conv output, *out
 * is the norm output (a new tensor). With `down` (the next level's encoder), the same pass also
 * max-pools the norm output into down's pooled input and indices (new tensors); with `cat` too,
 * the norm output goes straight into the first half of a new concat tensor *cat (BatchNorm: the
 * skip is written where the decoder reads it, no copy) and *out is -1. */
static int block_fwd(model_t *m, const layer_ctx_t *c, block_t *b, int n, int level, int in,
                     const void *x, int *out, enc_t *down, int *cat)
{
  char *err = c->err;
  size_t errlen = c->errlen, P = level_pixels(m, level), e = m->ops.elem;
  size_t hw = (size_t)(m->cfg.height >> level) * (size_t)(m->cfg.width >> level);
  CHECK(declare(m, &b->a, P * b->norm.C, e, "conv output", err, errlen));
  {
    const void *src = in < 0 ? x : PT(in);
    void *a = PT(b->a);
    if (b->stats_fused) /* the statistics come with the output */
      RUN(layer_conv_fwd_fused(c, &b->conv, n, src, NULL, a, c->train ? b->norm.stats : NULL));
    else
      RUN(layer_conv_fwd(c, &b->conv, n, src, a));
  }
  if (b->feeds_fused) { /* the next conv applies this norm as it loads: statistics only */
    const void *a = PT(b->a);
    RUN(layer_norm_stats(c, &b->norm, n, hw, a, b->stats_fused));
    RUN(layer_norm_coef(c, &b->norm));
    b->r = -1;
    if (out) *out = -1;
    return 0;
  }
  return block_norm_fwd(m, c, b, n, level, out, down, cat, b->stats_fused);
}

/* The second block of a pair whose conv runs fused: its input is prev's conv output with prev's
 * norm as the prologue, its statistics come with the conv (training); then as block_fwd. */
static int block_fwd_fused(model_t *m, const layer_ctx_t *c, block_t *prev, block_t *b, int n,
                           int level, int *out, enc_t *down, int *cat)
{
  char *err = c->err;
  size_t errlen = c->errlen, P = level_pixels(m, level), e = m->ops.elem;
  CHECK(declare(m, &b->a, P * b->norm.C, e, "conv output", err, errlen));
  {
    const void *src = PT(prev->a);
    void *a = PT(b->a);
    RUN(layer_conv_fwd_fused(c, &b->conv, n, src, &prev->norm, a, c->train ? b->norm.stats : NULL));
  }
  return block_norm_fwd(m, c, b, n, level, out, down, cat, 1);
}

/* block_fwd's norm+ReLU of the conv output b->a; ready: its statistics came with the conv. out
 * NULL: the statistics only, no norm output (the head reads b->a through the norm: the model's
 * head_fwd_fused). */
static int block_norm_fwd(model_t *m, const layer_ctx_t *c, block_t *b, int n, int level,
                          int *out, enc_t *down, int *cat, int ready)
{
  char *err = c->err;
  size_t errlen = c->errlen, P = level_pixels(m, level), e = m->ops.elem;
  size_t hw = (size_t)(m->cfg.height >> level) * (size_t)(m->cfg.width >> level);
  if (!out) {
    const void *a = PT(b->a);
    RUN(layer_norm_stats(c, &b->norm, n, hw, a, ready));
    b->r = -1;
    return 0;
  }
  if (ready) {
    const void *a = PT(b->a);
    RUN(layer_norm_stats(c, &b->norm, n, hw, a, 1));
  }
  if (cat) {
    CHECK(declare(m, cat, P * 2 * b->norm.C, e, "concat", err, errlen));
    *out = -1;
  } else {
    CHECK(declare(m, out, P * b->norm.C, e, "norm output", err, errlen));
  }
  b->r = *out;
  if (down) {
    const int h = m->cfg.height >> level, w = m->cfg.width >> level;
    size_t pooled = level_pixels(m, level + 1) * (size_t)b->norm.C;
    CHECK(declare(m, &down->pooled, pooled, e, "pooled", err, errlen));
    CHECK(declare(m, &down->arg, pooled, 1, "pool indices", err, errlen));
    const void *a = PT(b->a);
    void *r = PT(cat ? *cat : *out), *y = PT(down->pooled);
    uint8_t *arg = PT(down->arg);
    size_t ldy = (size_t)(cat ? 2 : 1) * (size_t)b->norm.C;
    RUN(ready ? layer_norm_apply_pool(c, &b->norm, n, h, w, a, r, ldy, y, arg)
              : layer_norm_fwd_pool(c, &b->norm, n, h, w, a, r, ldy, y, arg));
    return 0;
  }
  {
    const void *a = PT(b->a);
    void *r = PT(*out);
    RUN(ready ? layer_norm_recompute(c, &b->norm, n, hw, a, r)
              : layer_norm_fwd(c, &b->norm, n, hw, a, r));
  }
  return 0;
}

/* Backward uses forward's norm outputs and concat at this level (it does not recompute them). */
static int kept(const model_t *m, int level) { return level >= m->recompute_levels; }

/* The norm+ReLU output of block b (at `level`) again, from its kept conv output: *out. */
static int recompute(model_t *m, const layer_ctx_t *c, block_t *b, int n, int level, int *out,
                     const char *name)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  size_t hw = (size_t)(m->cfg.height >> level) * (size_t)(m->cfg.width >> level);
  if (kept(m, level)) { /* forward's output, alive until now */
    *out = b->r;
    return 0;
  }
  CHECK(declare(m, out, level_pixels(m, level) * b->norm.C, m->ops.elem, name, err, errlen));
  const void *a = PT(b->a);
  void *r = PT(*out);
  RUN(layer_norm_recompute(c, &b->norm, n, hw, a, r));
  return 0;
}

/* The concat of level i, [encoder output, up-conv output], into a new tensor *cat. skip: the
 * encoder output when it is still alive (forward), or -1 to recompute it (backward). */
static int concat(model_t *m, const layer_ctx_t *c, int i, int n, int skip, int *cat)
{
  char *err = c->err;
  size_t errlen = c->errlen, P = level_pixels(m, i);
  size_t hw = (size_t)(m->cfg.height >> i) * (size_t)(m->cfg.width >> i);
  int wi = m->cfg.widths[i];
  block_t *eb = &m->enc[i].b2;
  if (skip < 0 && !kept(m, i) && eb->norm.kind == MODEL_NORM_BATCH) {
    /* the skip recomputed straight into the concat's first half: no skip tensor, one pass
     * less over it (GroupNorm recomputes its statistics, so it keeps the two steps below) */
    CHECK(declare(m, cat, P * 2 * wi, m->ops.elem, "concat", err, errlen));
    {
      const void *a = PT(eb->a);
      void *y = PT(*cat);
      RUN(layer_norm_recompute_ld(c, &eb->norm, n, hw, a, y, 2 * (size_t)wi));
    }
    const void *up = PT(m->dec[i].up_out);
    void *y = PT(*cat);
    RUN_OPS(m->ops.concat_fwd(&m->ops, NULL, wi, up, wi, (size_t)n * hw, y), "concat");
    return 0;
  }
  if (skip < 0) CHECK(recompute(m, c, eb, n, i, &skip, "skip"));
  CHECK(declare(m, cat, P * 2 * wi, m->ops.elem, "concat", err, errlen));
  const void *sk = PT(skip), *up = PT(m->dec[i].up_out);
  void *y = PT(*cat);
  RUN_OPS(m->ops.concat_fwd(&m->ops, sk, wi, up, wi, (size_t)n * hw, y), "concat");
  return 0;
}

/* The block whose norm output the head reads. */
static block_t *last_block(model_t *m)
{
  return m->cfg.levels >= 2 ? &m->dec[0].b2 : &m->enc[0].b2;
}

/* Forward through the network; *head_in gets the head's input (backward starts from it): the
 * last block's conv output where the head reads it through that block's norm (head_fwd_fused).
 * The logits and their gradient are m->logits and m->dlogits. */
static int forward(model_t *m, const layer_ctx_t *c, const void *x, int n, int *head_in)
{
  char *err = c->err;
  size_t errlen = c->errlen, e = m->ops.elem;
  const model_config_t *cf = &m->cfg;
  int L = cf->levels;
  plan_begin(m->plan);
  int in = -1; /* the next layer's input: a tensor, or x */
  /* The encoder outputs stay alive until their concat: forward's peak is below backward's, so
   * keeping them costs no memory at the peak and saves recomputing them. With BatchNorm they are
   * written into their concat's first half at once (skip -1): the concat only adds the up-conv's
   * output. */
  int skip[MODEL_MAX_LEVELS];
  /* head_fwd_fused: the last block (the head's input) makes no norm output (NULL) */
  int r2 = -1, *last = m->head_fwd_fused ? NULL : &r2;
  for (int i = 0; i < L; i++) {
    enc_t *en = &m->enc[i];
    if (i > 0) in = en->pooled; /* the level above pooled its output into it */
    int r1, into_cat = i < L - 1 && en->b2.norm.kind == MODEL_NORM_BATCH;
    enc_t *down = i < L - 1 ? &m->enc[i + 1] : NULL;
    int *cat = into_cat ? &m->dec[i].cat : NULL, *out = L == 1 ? last : &r2;
    CHECK(block_fwd(m, c, &en->b1, n, i, in, x, &r1, NULL, NULL));
    if (en->b2.fused)
      CHECK(block_fwd_fused(m, c, &en->b1, &en->b2, n, i, out, down, cat));
    else
      CHECK(block_fwd(m, c, &en->b2, n, i, r1, x, out, down, cat));
    in = skip[i] = r2;
  }
  for (int i = L - 2; i >= 0; i--) {
    dec_t *d = &m->dec[i];
    CHECK(declare(m, &d->up_out, level_pixels(m, i) * cf->widths[i], e, "up-conv output", err,
                  errlen));
    {
      const void *src = PT(in);
      void *y = PT(d->up_out);
      RUN(layer_conv_fwd(c, &d->up, n, src, y));
    }
    int cat = d->cat, r1;
    if (skip[i] < 0) { /* the skip is in the concat already */
      const void *up = PT(d->up_out);
      void *y = PT(cat);
      RUN_OPS(m->ops.concat_fwd(&m->ops, NULL, cf->widths[i], up, cf->widths[i],
                                (size_t)n * (cf->height >> i) * (cf->width >> i), y),
              "concat");
    } else {
      CHECK(concat(m, c, i, n, skip[i], &cat));
      d->cat = cat;
    }
    int *out = i == 0 ? last : &r2;
    CHECK(block_fwd(m, c, &d->b1, n, i, cat, x, &r1, NULL, NULL));
    if (d->b2.fused)
      CHECK(block_fwd_fused(m, c, &d->b1, &d->b2, n, i, out, NULL, NULL));
    else
      CHECK(block_fwd(m, c, &d->b2, n, i, r1, x, out, NULL, NULL));
    in = r2;
  }
  size_t P0 = level_pixels(m, 0) * cf->classes;
  CHECK(declare(m, &m->logits, P0, e, "logits", err, errlen));
  if (m->head_fwd_fused) { /* the head on the last block's conv output through its norm */
    block_t *b = last_block(m);
    const void *a = PT(b->a);
    void *y = PT(m->logits);
    /* head_pass: the training pass makes the logits with the loss (loss_op); the schedule keeps
     * this operation's place, so the plan's ticks are the unfused step's */
    RUN(m->head_pass ? 0 : layer_norm_head_fwd(c, &b->norm, &m->head, n, a, y));
    in = b->a;
  } else {
    const void *src = PT(in);
    void *y = PT(m->logits);
    RUN(layer_conv_fwd(c, &m->head, n, src, y));
  }
  CHECK(declare(m, &m->dlogits, P0, e, "logits gradient", err, errlen));
  *head_in = in;
  return 0;
}

/* The norm's backward in place on the gradient d, from the block's kept conv output. */
static int norm_bwd(model_t *m, const layer_ctx_t *c, block_t *b, int n, int level, int d)
{
  size_t hw = (size_t)(m->cfg.height >> level) * (size_t)(m->cfg.width >> level);
  void *g = PT(d);
  const void *a = PT(b->a);
  RUN(layer_norm_bwd(c, &b->norm, n, hw, g, a, NULL));
  return 0;
}

/* The weight gradient queued beside (model_t.side_from): the side stream starts after what the
 * main stream has queued so far and runs the op on its own table and workspace; the grads_ready
 * hook is told on the side stream. On the host it simply runs. */
static int wgrad(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *src,
                 const layer_norm_t *pro, const void *g)
{
  if (pro && l->desc.kind == OPS_CONV1X1) /* the head on the norm's apply (head_fwd_fused) */
    return layer_conv1x1_bwd_filter_bn(c, l, n, src, pro, g);
  return pro ? layer_conv_bwd_filter_fused(c, l, n, src, pro, g)
             : layer_conv_bwd_filter(c, l, n, src, g);
}

/* pro: the convolution runs fused, with that norm's prologue on src. */
static int side_wgrad(model_t *m, const layer_ctx_t *c, const layer_conv_t *l, int n,
                      const void *src, const layer_norm_t *pro, const void *g)
{
  if (!m->side_ready) return wgrad(c, l, n, src, pro, g);
  char *err = c->err;
  size_t errlen = c->errlen;
  void *side = dev_ops_stream(&m->side_ops);
  CHECK(dev_event_record(m->side_fork, model_stream(m), err, errlen));
  CHECK(dev_event_wait(side, m->side_fork, err, errlen));
  layer_ctx_t s = *c;
  s.ops = &m->side_ops;
  s.ws = m->side_ws;
  CHECK(wgrad(&s, l, n, src, pro, g));
  return dev_event_record(m->side_join, side, err, errlen);
}

/* The main stream waits for the weight gradient queued beside, if any; its inputs are used
 * here once more, so the plan keeps them alive (unshared) until this tick. */
static int side_join(model_t *m, const layer_ctx_t *c)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (!m->side_pending) return 0;
  m->side_pending = 0;
  if (m->side_in >= 0) (void)PT(m->side_in);
  (void)PT(m->side_dy);
  RUN(m->side_ready ? dev_event_wait(model_stream(m), m->side_join, err, errlen) : 0);
  return 0;
}

/* A convolution's backward: weight gradients from its input `in` (x when in < 0; through the
 * norm pro where not NULL: a fused 3x3's prologue, or the head on its norm's apply) and dy, then
 * (dx not NULL) the input gradient of dx_elems into a new tensor *dx, which may take the place
 * of `in` (the data gradient does not read it) unless the weight gradient runs beside: at
 * levels >= side_from (level: the layer's, the up-convolution's input level) it is queued on
 * the side stream, waited for at the next convolution's backward. */
static int conv_bwd_pro(model_t *m, const layer_ctx_t *c, layer_conv_t *l,
                        const layer_norm_t *pro, int level, int n, int in, const void *x, int dy,
                        size_t dx_elems, int *dx)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  CHECK(side_join(m, c));
  const int beside = level >= m->side_from;
  {
    const void *src = in < 0 ? x : PT(in);
    const void *g = PT(dy);
    RUN(beside ? side_wgrad(m, c, l, n, src, pro, g) : wgrad(c, l, n, src, pro, g));
  }
  if (beside) m->side_pending = 1, m->side_in = in, m->side_dy = dy;
  if (!dx) return 0;
  CHECK(declare(m, dx, dx_elems, m->ops.elem, "gradient", err, errlen));
  const void *g = PT(dy);
  void *o = PT(*dx);
  RUN(layer_conv_bwd_data(c, l, n, g, o));
  return 0;
}

/* conv_bwd_pro of a convolution that reads `in` as it is (no norm on the way). */
static int conv_bwd(model_t *m, const layer_ctx_t *c, layer_conv_t *l, int level, int n, int in,
                    const void *x, int dy, size_t dx_elems, int *dx)
{
  return conv_bwd_pro(m, c, l, NULL, level, n, in, x, dy, dx_elems, dx);
}

/* conv_bwd of a fused block b (input: prev's conv output through prev's norm), then prev's
 * norm backward: weight gradients with the prologue recomputed, the input gradient masked by
 * prev's ReLU with prev's BatchNorm sums in the same pass, then the rest of that BatchNorm's
 * backward; *d: the gradient w.r.t. prev's conv output (a new tensor). */
static int fused_bwd(model_t *m, const layer_ctx_t *c, block_t *prev, block_t *b, int level,
                     int n, int dy, int *d)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  size_t hw = (size_t)(m->cfg.height >> level) * (size_t)(m->cfg.width >> level);
  CHECK(side_join(m, c));
  const int beside = level >= m->side_from;
  {
    const void *src = PT(prev->a);
    const void *g = PT(dy);
    RUN(beside ? side_wgrad(m, c, &b->conv, n, src, &prev->norm, g)
               : wgrad(c, &b->conv, n, src, &prev->norm, g));
  }
  if (beside) m->side_pending = 1, m->side_in = prev->a, m->side_dy = dy;
  CHECK(declare(m, d, level_pixels(m, level) * (size_t)prev->norm.C, m->ops.elem, "gradient", err,
                errlen));
  {
    const void *g = PT(dy), *a = PT(prev->a);
    void *o = PT(*d);
    RUN(layer_conv_bwd_data_fused(c, &b->conv, n, g, a, &prev->norm, o));
  }
  {
    const void *a = PT(prev->a);
    void *o = PT(*d);
    RUN(layer_norm_bwd_fused(c, &prev->norm, n, hw, o, a));
  }
  return 0;
}

/* The backward of a pair of blocks (b1, then b2 on b1's norm output) at `level` from d, the
 * gradient w.r.t. b2's conv output: b2's norm (skipped where normed: head_bwd did it), b2's conv
 * (fused or plain), b1's norm; *dx: the gradient w.r.t. b1's conv output (a new tensor). */
static int pair_bwd(model_t *m, const layer_ctx_t *c, block_t *b1, block_t *b2, int level, int n,
                    const void *x, int d, int normed, int *dx)
{
  if (!normed) CHECK(norm_bwd(m, c, b2, n, level, d));
  if (b2->fused) return fused_bwd(m, c, b1, b2, level, n, d, dx);
  int r;
  CHECK(recompute(m, c, b1, n, level, &r, "norm output"));
  CHECK(conv_bwd(m, c, &b2->conv, level, n, r, x, d, level_pixels(m, level) * (size_t)b1->norm.C,
                 dx));
  return norm_bwd(m, c, b1, n, level, *dx);
}

/* The head's backward: its weight and bias gradients, and *d. Fused (head_fused, where the block
 * before it has a BatchNorm and the backend the path): *d is the gradient w.r.t. that block's
 * conv output, its norm's backward done, and the head's input gradient never stored; *normed 1.
 * Else *d is the head's input gradient; *normed 0. */
static int head_bwd(model_t *m, const layer_ctx_t *c, const void *x, int head_in, int n, int *d,
                    int *normed)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const model_config_t *cf = &m->cfg;
  block_t *b = last_block(m);
  /* head_fwd_fused: head_in is b's conv output, read through b's norm */
  const layer_norm_t *pro = m->head_fwd_fused ? &b->norm : NULL;
  *normed = m->head_fused;
  if (!*normed)
    return conv_bwd_pro(m, c, &m->head, pro, 0, n, head_in, x, m->dlogits,
                        level_pixels(m, 0) * cf->widths[0], d);
  if (m->head_pass) { /* the weight gradient came with the loss (loss_op): its place kept */
    CHECK(side_join(m, c));
    RUN(0);
  } else {
    CHECK(conv_bwd_pro(m, c, &m->head, pro, 0, n, head_in, x, m->dlogits, 0, NULL));
  }
  CHECK(declare(m, d, level_pixels(m, 0) * (size_t)b->norm.C, m->ops.elem, "gradient", err,
                errlen));
  const void *g = PT(m->dlogits), *a = PT(b->a);
  void *o = PT(*d);
  const size_t hw = (size_t)cf->height * (size_t)cf->width;
  RUN(m->head_pass ? layer_norm_bwd_1x1_rest(c, &b->norm, n, hw, &m->head, g, a, o)
                   : layer_norm_bwd_1x1(c, &b->norm, n, hw, &m->head, g, a, o));
  return 0;
}

static int backward(model_t *m, const layer_ctx_t *c, const void *x, int head_in, int n)
{
  char *err = c->err;
  size_t errlen = c->errlen, e = m->ops.elem;
  const model_config_t *cf = &m->cfg;
  int L = cf->levels;
  int d; /* the gradient flowing down: w.r.t. the output of the block being undone */
  int dskip[MODEL_MAX_LEVELS];
  m->side_pending = 0;
  int normed; /* d has been through the first block's norm backward (head_bwd) */
  CHECK(head_bwd(m, c, x, head_in, n, &d, &normed));
  for (int i = 0; i <= L - 2; i++) {
    dec_t *dc = &m->dec[i];
    size_t P = level_pixels(m, i), wi = (size_t)cf->widths[i];
    size_t hw = (size_t)(cf->height >> i) * (size_t)(cf->width >> i);
    int dx, cat, dcat, dup, below;
    CHECK(pair_bwd(m, c, &dc->b1, &dc->b2, i, n, x, d, normed, &dx));
    normed = 0;
    if (kept(m, i))
      cat = dc->cat;
    else
      CHECK(concat(m, c, i, n, -1, &cat));
    CHECK(conv_bwd(m, c, &dc->b1.conv, i, n, cat, x, dx, P * 2 * wi, &dcat));
    /* the skip's gradient waits in dskip[i] for the encoder, which adds the pool's */
    CHECK(declare(m, &dskip[i], P * wi, e, "skip gradient", err, errlen));
    CHECK(declare(m, &dup, P * wi, e, "gradient", err, errlen));
    {
      /* the up-convolution's part in NHWC, or gathered where its backward reads that order */
      const void *g = PT(dcat);
      void *gs = PT(dskip[i]), *gu = PT(dup);
      if (dc->up.dy_gathered)
        RUN_OPS(m->ops.concat_bwd_gathered(&m->ops, g, (int)wi, (int)wi, n, cf->height >> i,
                                           cf->width >> i, gs, 0, gu),
                "concat backward");
      else
        RUN_OPS(m->ops.concat_bwd(&m->ops, g, (int)wi, (int)wi, (size_t)n * hw, gs, 0, gu),
                "concat backward");
    }
    block_t *src = i == L - 2 ? &m->enc[L - 1].b2 : &m->dec[i + 1].b2;
    CHECK(recompute(m, c, src, n, i + 1, &below, "norm output"));
    CHECK(conv_bwd(m, c, &dc->up, i + 1, n, below, x, dup,
                   level_pixels(m, i + 1) * cf->widths[i + 1], &d));
  }
  for (int i = L - 1; i >= 0; i--) {
    enc_t *en = &m->enc[i];
    size_t P = level_pixels(m, i), wi = (size_t)cf->widths[i];
    if (i < L - 1) {
      /* d is the gradient of level i+1's pooled input: add it to the skip's */
      {
        const void *g = PT(d);
        const uint8_t *arg = PT(m->enc[i + 1].arg);
        void *gs = PT(dskip[i]);
        RUN_OPS(m->ops.maxpool_bwd(&m->ops, g, arg, n, cf->height >> i, cf->width >> i,
                                   (int)wi, gs, 1),
                "max-pool backward");
      }
      d = dskip[i];
    }
    int dx;
    CHECK(pair_bwd(m, c, &en->b1, &en->b2, i, n, x, d, normed, &dx));
    normed = 0;
    if (i > 0)
      CHECK(conv_bwd(m, c, &en->b1.conv, i, n, en->pooled, x, dx, P * cf->widths[i - 1], &d));
    else
      CHECK(conv_bwd(m, c, &en->b1.conv, i, n, -1, x, dx, 0, NULL));
  }
  return side_join(m, c); /* the step's end: nothing left beside */
}

/* The loss over the logits into their gradient: one operation of the schedule. head_pass: the
 * head's training pass in its place (the logits, the loss, their gradient, the head's weight
 * gradient and its BatchNorm's backward sums). */
static int loss_op(model_t *m, const layer_ctx_t *c, const int32_t *y, int batch,
                   float loss_scale, char *err, size_t errlen)
{
  size_t P = (size_t)batch * m->cfg.height * m->cfg.width;
  const void *lg = PT(m->logits);
  void *dl = PT(m->dlogits);
  if (m->head_pass) {
    block_t *b = last_block(m);
    const void *a = PT(b->a);
    RUN(layer_head_train(c, &b->norm, &m->head, batch, a, y, m->cfg.ignore_index, loss_scale,
                         PT(m->logits), dl, m->loss_dev));
    return 0;
  }
  RUN_OPS(m->ops.softmax_ce_async(&m->ops, lg, y, P, m->cfg.classes, m->cfg.ignore_index,
                                  loss_scale, 0, dl, NULL, m->loss_dev),
          "the loss");
  return 0;
}

/* SHMDDP_RECOMPUTE (shm/env.c): at how many of the shallowest levels backward makes
 * the norm outputs, skips and concats again; deeper levels keep forward's. auto: the measured
 * choice for the reference U-Net (see bench/results/ab_recompute_levels_1xh200.txt): in fp32
 * keeping everything is faster and still below PyTorch's memory; in 16-bit the two shallowest
 * levels (most of the bytes) are recomputed and the rest kept, the fastest choice under
 * 0.8 x PyTorch's memory. */
#define RECOMPUTE_AUTO_16BIT 2
static int recompute_policy(model_t *m, char *err, size_t errlen)
{
  const int L = m->cfg.levels;
  const char *v = NULL;
  if (shm_env_choice("SHMDDP_RECOMPUTE", &v, err, errlen) < 0) return -1;
  if (!v || strcmp(v, "auto") == 0) {
    int wide = m->ops.dtype == OPS_F32 || m->ops.dtype == OPS_F64;
    m->recompute_levels = wide ? 0 : (RECOMPUTE_AUTO_16BIT < L ? RECOMPUTE_AUTO_16BIT : L);
    return 0;
  }
  if (strcmp(v, "all") == 0) return m->recompute_levels = L, 0;
  if (strcmp(v, "none") == 0) return m->recompute_levels = 0, 0;
  char *end;
  long n = strtol(v, &end, 10);
  if (end == v || *end || n < 0 || n > L)
    return check_fail(err, errlen, "SHMDDP_RECOMPUTE=%s: use auto, all, none, or how many of the "
                      "shallowest levels to recompute (0 to %d)", v, L);
  m->recompute_levels = (int)n;
  return 0;
}

/* SHMDDP_WGRAD_STREAM (conv_engine.h model_wgrad_stream_read): from which level down backward
 * queues the convolutions' weight gradients on a second stream, beside the input gradients
 * (model_t.side_from); never where weight gradients are staged one layer at a time (16-bit
 * compute with f32 gradients, f64). */
static int side_policy(model_t *m, char *err, size_t errlen)
{
  int staged = m->ops.dtype != OPS_F32 && !m->cfg.working_grads;
  return model_wgrad_stream_read(m->cfg.levels, m->dev != DEV_HOST, staged, &m->side_from, err,
                                 errlen);
}

/* The dry pass of a training step at the largest batch, the layout, and its block. */
static int plan_activations(model_t *m, char *err, size_t errlen)
{
  CHECK(plan_create(&m->plan, err, errlen));
  layer_ctx_t c = {.ops = &m->ops, .params = m->params, .err = err, .errlen = errlen};
  int head_in, n = m->cfg.max_batch;
  CHECK(recompute_policy(m, err, errlen));
  m->planning = 1;
  int rc = forward(m, &c, NULL, n, &head_in);
  if (rc == 0) rc = loss_op(m, &c, NULL, n, 1.0f, err, errlen);
  if (rc == 0) rc = backward(m, &c, NULL, head_in, n);
  m->planning = 0;
  CHECK(rc);
  /* SHMDDP_MEM_PLAN=separate (shm/env.c): no tensor shares memory with another */
  const char *mode = NULL;
  if (shm_env_choice("SHMDDP_MEM_PLAN", &mode, err, errlen) < 0) return -1;
  if (mode && strcmp(mode, "separate") == 0) plan_set_separate(m->plan, 1);
  size_t bytes;
  CHECK(plan_finish(m->plan, &bytes, err, errlen));
  m->act = arena_alloc(m->arena, bytes ? bytes : 1, ARENA_ACTIVATIONS, "activations (planned)");
  if (!m->act) return check_fail(err, errlen, "%s", arena_last_error(m->arena));
  plan_set_base(m->plan, m->act);
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
                     .wgrads = m->wgrads, .gstage = m->gstage, .grads = m->gf32,
                     .separate = m->separate,
                     .accumulate = accumulate, .train = train, .hooks = hooks, .ws = m->ws,
                     .err = err, .errlen = errlen};
}

static int cast_working(model_t *m, char *err, size_t errlen)
{
  CHECK_OPS(&m->ops, m->ops.from_f32(&m->ops, m->pf32, m->nflat, m->wparams),
            "casting parameters");
  return 0;
}

int model_refresh_working(model_t *m, char *err, size_t errlen)
{
  if (!m->wstale) return 0;
  CHECK(cast_working(m, err, errlen));
  m->wstale = 0;
  return 0;
}

int model_update(model_t *m, struct optim *o, double lr, double grad_scale, char *err,
                 size_t errlen)
{
  const void *g = m->gf32 ? (const void *)m->gf32 : m->wgrads;
  ops_dtype_t gt = m->gf32 ? OPS_F32 : m->ops.dtype;
  void *lowp = m->separate ? m->wparams : NULL;
  CHECK(optim_step_io(o, m->pf32, g, gt, lowp, m->ops.dtype, lr, grad_scale, model_stream(m), err,
                      errlen));
  m->wstale = 0;
  return 0;
}

/* Gradients without an f32 buffer (working_grads) cannot be added to: say so before any work. */
static int check_grads_use(const model_t *m, int accumulate, char *err, size_t errlen)
{
  if (m->gf32 || !accumulate) return 0;
  return check_fail(err, errlen, "gradient accumulation needs f32 gradients: this model keeps "
                    "working-precision ones (model_config_t.working_grads); build it with 0");
}

static int prepare(model_t *m, layer_ctx_t *c, const float *x, int batch, int train,
                   int accumulate, const model_hooks_t *hooks, const void **xin, char *err,
                   size_t errlen)
{
  if (train) CHECK(check_grads_use(m, accumulate, err, errlen));
  ctx_init(m, c, train, accumulate, hooks, err, errlen);
  m->fwd_head_in = -1; /* this forward replaces what a split step saved */
  m->head_pass = 0;    /* a fused step sets it after this */
  *xin = x;
  if (m->separate) {
    /* cast, and still stale: whoever asked for model_params may write through it again
     * (gradient checks do); only model_update and model_refresh_working vouch for the copy */
    if (m->wstale) CHECK(cast_working(m, err, errlen));
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
  m->head_pass = m->head_train && !(c.separate && c.gstage);
  int tl = timeline_begin(TIMELINE_FORWARD, model_stream(m)); /* the loss counts as forward */
  int head_in;
  CHECK(forward(m, &c, xin, batch, &head_in));
  /* The loss stays where the device wrote it (model_step_loss reads it): nothing here waits, so
   * the host never drains the GPU between forward and backward, and the whole step can be
   * captured in a CUDA graph. */
  CHECK(loss_op(m, &c, y, batch, loss_scale, err, errlen));
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

/* A forward pass of its own (DataParallel's split step, evaluation): train selects batch
 * statistics and the hooks, else running statistics; *xin gets the input as the layers read it,
 * *head_in the head's input. */
static int forward_pass(model_t *m, const float *x, int batch, int train,
                        const model_hooks_t *hooks, const void **xin, int *head_in, char *err,
                        size_t errlen)
{
  if (check_batch(m, x, batch, err, errlen) != 0) return -1;
  layer_ctx_t c;
  CHECK(prepare(m, &c, x, batch, train, 0, hooks, xin, err, errlen));
  return forward(m, &c, *xin, batch, head_in);
}

/* ---- the split step (DataParallel) ---- */

int model_forward_train(model_t *m, const float *x, int batch, const model_hooks_t *hooks,
                        void **logits, void **dlogits, size_t *elem, char *err, size_t errlen)
{
  m->fwd_head_in = -1;
  const void *xin;
  int head_in;
  CHECK(forward_pass(m, x, batch, 1, hooks, &xin, &head_in, err, errlen));
  m->fwd_x = xin;
  m->fwd_head_in = head_in;
  m->fwd_batch = batch;
  *logits = plan_ptr(m->plan, m->logits);
  *dlogits = plan_ptr(m->plan, m->dlogits); /* backward() starts from it */
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
  if (m->fwd_head_in < 0)
    return check_fail(err, errlen, "model_backward without a successful model_forward_train");
  CHECK(check_grads_use(m, accumulate, err, errlen));
  layer_ctx_t c;
  ctx_init(m, &c, 1, accumulate, hooks, err, errlen);
  m->head_pass = 0; /* the split step's forward ran the head, model_loss the loss */
  int rc = backward(m, &c, m->fwd_x, m->fwd_head_in, m->fwd_batch);
  m->fwd_head_in = -1; /* the saved activations belong to one backward */
  return rc;
}

int model_eval(model_t *m, const float *x, const int32_t *y, int batch, int32_t *pred,
               float *loss_out, char *err, size_t errlen)
{
  const void *xin;
  int head_in;
  CHECK(forward_pass(m, x, batch, 0, NULL, &xin, &head_in, err, errlen));
  size_t P = (size_t)batch * m->cfg.height * m->cfg.width;
  double sum = 0;
  long count = 0;
  CHECK_OPS(&m->ops,
            m->ops.softmax_ce(&m->ops, plan_ptr(m->plan, m->logits), y, P, m->cfg.classes, m->cfg.ignore_index, 1, 0,
                              NULL, pred, &sum, &count),
            "the loss");
  m->last_loss = count ? sum / (double)count : 0;
  if (loss_out) *loss_out = (float)m->last_loss;
  return 0;
}

int model_eval_logits(model_t *m, const float *x, int batch, int32_t *pred, float *logits,
                      char *err, size_t errlen)
{
  if (m->ops.dtype != OPS_F32)
    return check_fail(err, errlen, "logits are copied out of an fp32 model only");
  CHECK(model_eval(m, x, NULL, batch, pred, NULL, err, errlen));
  size_t bytes = (size_t)batch * m->cfg.height * m->cfg.width * m->cfg.classes * sizeof(float);
  return dev_copy_now(logits, DEV_HOST, plan_ptr(m->plan, m->logits), m->dev, bytes, err, errlen);
}
