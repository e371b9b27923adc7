/* layers.c — convolution and normalisation layers: ops calls, parameter bookkeeping, hooks. */
#include "config.h"

#include "src/model/layers.h"

#include <stdio.h>

#include "src/check.h"
#include "src/device/device.h"

/* The stream the hooks are given: the CUDA backend's compute stream, NULL on the CPU. */
static void *layer_stream(const layer_ctx_t *c) { return dev_ops_stream(c->ops); }

void *layer_wparam(const layer_ctx_t *c, int id)
{
  return (char *)c->wparams + c->params[id].offset * c->ops->elem;
}

int layer_grad_acc(const layer_ctx_t *c) { return c->accumulate && !c->separate; }

/* A layer's parameters are neighbours in the flat buffers (adjacent, or apart by alignment
 * padding). Staged, its gradients keep their places in the flat buffer from its lower offset
 * rounded down to the weights' alignment (the base): each as aligned in the (256-byte aligned)
 * staging as in the flat buffers. */
static size_t stage_base(const layer_param_t *params, int id0, int id1)
{
  size_t b = params[id0].offset;
  if (id1 >= 0 && params[id1].offset < b) b = params[id1].offset;
  return b - b % MODEL_WEIGHT_ALIGN_ELEMS;
}

size_t layer_stage_elems(const layer_param_t *params, int id0, int id1)
{
  if (id0 < 0) id0 = id1, id1 = -1;
  if (id0 < 0) return 0;
  size_t end = params[id0].offset + params[id0].count;
  if (id1 >= 0 && params[id1].offset + params[id1].count > end)
    end = params[id1].offset + params[id1].count;
  return end - stage_base(params, id0, id1);
}

/* Where the working gradient of flat-buffer element `offset` is written: the one-layer staging
 * (from the layer's base offset) or the working gradient buffer. */
static void *grad_at(const layer_ctx_t *c, size_t offset, size_t base)
{
  if (c->separate && c->gstage) return (char *)c->gstage + (offset - base) * c->ops->elem;
  return (char *)c->wgrads + offset * c->ops->elem;
}

/* Where the weight-gradient op writes parameter id's gradient. */
static void *grad_out(const layer_ctx_t *c, int id, size_t base)
{
  return id < 0 ? NULL : grad_at(c, c->params[id].offset, base);
}

/* Parameters [first, first + count) of the flat buffer are final: fold their working
 * gradients into f32 (they are staged contiguously from base) and tell the grads_ready hook. */
static int grads_final(const layer_ctx_t *c, size_t first, size_t count, size_t base,
                       const char *name)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (c->separate && c->grads) /* else (working gradients) the optimizer reads them as they are */
    CHECK_OPS(c->ops,
              c->ops->to_f32(c->ops, grad_at(c, first, base), count, c->grads + first,
                             c->accumulate),
              "folding gradients into f32");
  if (c->hooks && c->hooks->grads_ready &&
      c->hooks->grads_ready(c->hooks->ctx, first, count, layer_stream(c)) != 0) {
    return check_fail(err, errlen, "the grads_ready hook failed for %s", name);
  }
  return 0;
}

/* Gradients of parameter ids (-1 entries skipped) are final. A layer's two parameters are
 * adjacent in the flat buffer when the layout needs no padding between them (it orders them so
 * wherever it can), and staged so: then they are folded by one cast and reported as one range,
 * half the launches of one per tensor (a cast is a graph node and a dependency hop), the same
 * bits. Apart, the padding between them is never written, so each is folded on its own. */
static int grads_done(const layer_ctx_t *c, int id0, int id1, size_t base)
{
  if (id0 < 0) id0 = id1, id1 = -1;
  if (id0 < 0) return 0;
  if (id1 >= 0 && c->params[id1].offset < c->params[id0].offset) {
    int t = id0;
    id0 = id1, id1 = t;
  }
  const layer_param_t *a = &c->params[id0];
  if (id1 < 0) return grads_final(c, a->offset, a->count, base, a->name);
  const layer_param_t *b = &c->params[id1];
  if (a->offset + a->count == b->offset)
    return grads_final(c, a->offset, a->count + b->count, base, a->name);
  if (grads_final(c, a->offset, a->count, base, a->name) != 0) return -1;
  return grads_final(c, b->offset, b->count, base, b->name);
}

int layer_conv_fwd(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x, void *y)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const void *b = l->b_id >= 0 ? layer_wparam(c, l->b_id) : NULL;
  CHECK_OPS(c->ops, c->ops->conv_fwd(c->ops, &l->desc, n, x, layer_wparam(c, l->w_id), b, y, c->ws),
            c->params[l->w_id].name);
  return 0;
}

int layer_conv_bwd_filter(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x,
                          const void *dy)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  size_t base = stage_base(c->params, l->w_id, l->b_id);
  int (*bwd_filter)(const ops_t *, const ops_conv_t *, int, const void *, const void *, void *,
                    void *, int, void *) =
      l->dy_gathered ? c->ops->conv_bwd_filter_gathered : c->ops->conv_bwd_filter;
  CHECK_OPS(c->ops,
            bwd_filter(c->ops, &l->desc, n, x, dy, grad_out(c, l->w_id, base),
                       grad_out(c, l->b_id, base), layer_grad_acc(c), c->ws),
            c->params[l->w_id].name);
  return grads_done(c, l->b_id, l->w_id, base);
}

int layer_conv_bwd_data(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *dy,
                        void *dx)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (l->dgrad_fused) { /* the one fused entry the use takes (conv_engine.c) */
    if (!c->ops->conv_bwd_data_fused)
      return check_fail(err, errlen, "%s: the %s backend has no fused input gradient",
                        c->params[l->w_id].name, c->ops->name);
    CHECK_OPS(c->ops,
              c->ops->conv_bwd_data_fused(c->ops, &l->desc, n, dy, layer_wparam(c, l->w_id),
                                          NULL, NULL, NULL, dx, NULL, c->ws),
              c->params[l->w_id].name);
    return 0;
  }
  int (*bwd_data)(const ops_t *, const ops_conv_t *, int, const void *, const void *, void *,
                  void *) = l->dy_gathered ? c->ops->conv_bwd_data_gathered : c->ops->conv_bwd_data;
  CHECK_OPS(c->ops, bwd_data(c->ops, &l->desc, n, dy, layer_wparam(c, l->w_id), dx, c->ws),
            c->params[l->w_id].name);
  return 0;
}

/* The fused entries exist in this table (checked where the model chose them; a table without
 * them here is an error, not a fallback). */
static int fused_present(const layer_ctx_t *c, const layer_conv_t *l)
{
  const ops_t *o = c->ops;
  if (o->conv_fwd_fused && o->conv_bwd_data_fused && o->conv_bwd_filter_fused && o->bn_coef &&
      o->bn_bwd_params)
    return 0;
  return check_fail(c->err, c->errlen, "%s: the %s backend has no fused convolutions",
                    c->params[l->w_id].name, o->name);
}

int layer_conv_fwd_fused(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x,
                         const layer_norm_t *pro, void *y, double *stats)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  CHECK(fused_present(c, l));
  CHECK_OPS(c->ops,
            c->ops->conv_fwd_fused(c->ops, &l->desc, n, x, pro ? pro->coef : NULL,
                                   layer_wparam(c, l->w_id), y, stats, c->ws),
            c->params[l->w_id].name);
  return 0;
}

int layer_conv_bwd_filter_fused(const layer_ctx_t *c, const layer_conv_t *l, int n,
                                const void *x, const layer_norm_t *pro, const void *dy)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  CHECK(fused_present(c, l));
  if (l->b_id >= 0)
    return check_fail(err, errlen, "%s: a fused convolution has no bias", c->params[l->w_id].name);
  size_t base = stage_base(c->params, l->w_id, l->b_id);
  CHECK_OPS(c->ops,
            c->ops->conv_bwd_filter_fused(c->ops, &l->desc, n, x, pro->coef, dy,
                                          grad_out(c, l->w_id, base), layer_grad_acc(c), c->ws),
            c->params[l->w_id].name);
  return grads_done(c, l->b_id, l->w_id, base);
}

int layer_conv_bwd_data_fused(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *dy,
                              const void *x, layer_norm_t *pro, void *dx)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  CHECK(fused_present(c, l));
  CHECK_OPS(c->ops,
            c->ops->conv_bwd_data_fused(c->ops, &l->desc, n, dy, layer_wparam(c, l->w_id), x,
                                        pro->coef, pro->saved, dx, pro->stats, c->ws),
            c->params[l->w_id].name);
  return 0;
}

static int sync_stats(const layer_ctx_t *c, double *buf, size_t count, const char *name)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (!c->hooks || !c->hooks->sync_stats) return 0;
  if (c->hooks->sync_stats(c->hooks->ctx, buf, count, SHMDDP_F64, layer_stream(c)) != 0) {
    return check_fail(err, errlen, "the SyncBN statistics hook failed for %s", name);
  }
  return 0;
}

/* The forward's statistics of x: BatchNorm's batch statistics in training (synced by the hook
 * when there is one) or its running ones; GroupNorm's come with its apply. */
static int norm_stats(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x)
{
  return layer_norm_stats(c, l, n, hw, x, 0);
}

int layer_norm_stats(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                     int ready)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const char *name = c->params[l->gamma_id].name;
  if (ready && l->kind != MODEL_NORM_BATCH)
    return check_fail(err, errlen, "%s: only BatchNorm takes a convolution's statistics", name);
  if (ready && c->train) { /* the fused convolution's sums of x are in l->stats */
    if (sync_stats(c, l->stats, 2 * (size_t)l->C + 1, name) != 0) return -1;
    CHECK_OPS(c->ops,
              o->bn_finalize(o, l->stats, l->C, LAYER_NORM_EPS, LAYER_BN_MOMENTUM, l->running,
                             l->running + l->C, l->saved),
              name);
    return 0;
  }
  /* BatchNorm's saved statistics first (GroupNorm's come with its apply) */
  if (l->kind == MODEL_NORM_BATCH && c->train && !(c->hooks && c->hooks->sync_stats)) {
    CHECK_OPS(c->ops,
              o->bn_stats_finalize(o, x, (size_t)n * hw, l->C, LAYER_NORM_EPS, LAYER_BN_MOMENTUM,
                                   l->running, l->running + l->C, l->stats, l->saved),
              name);
  } else if (l->kind == MODEL_NORM_BATCH && c->train) {
    CHECK_OPS(c->ops, o->bn_stats(o, x, (size_t)n * hw, l->C, l->stats), name);
    if (sync_stats(c, l->stats, 2 * (size_t)l->C + 1, name) != 0) return -1;
    CHECK_OPS(c->ops,
              o->bn_finalize(o, l->stats, l->C, LAYER_NORM_EPS, LAYER_BN_MOMENTUM, l->running,
                             l->running + l->C, l->saved),
              name);
  } else if (l->kind == MODEL_NORM_BATCH) {
    CHECK_OPS(
        c->ops,
        o->bn_saved_from_running(o, l->running, l->running + l->C, l->C, LAYER_NORM_EPS, l->saved),
        name);
  }
  return 0;
}

int layer_norm_fwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                   void *y)
{
  CHECK(norm_stats(c, l, n, hw, x));
  return layer_norm_recompute(c, l, n, hw, x, y);
}

int layer_norm_fwd_pool(const layer_ctx_t *c, layer_norm_t *l, int n, int h, int w,
                        const void *x, void *y, size_t ldy, void *pooled, uint8_t *arg)
{
  char *err = c->err;
  size_t errlen = c->errlen, hw = (size_t)h * (size_t)w;
  if (l->kind != MODEL_NORM_BATCH && ldy != (size_t)l->C)
    return check_fail(err, errlen, "%s: only BatchNorm writes into a wider tensor",
                      c->params[l->gamma_id].name);
  CHECK(norm_stats(c, l, n, hw, x));
  return layer_norm_apply_pool(c, l, n, h, w, x, y, ldy, pooled, arg);
}

int layer_norm_apply_pool(const layer_ctx_t *c, layer_norm_t *l, int n, int h, int w,
                          const void *x, void *y, size_t ldy, void *pooled, uint8_t *arg)
{
  char *err = c->err;
  size_t errlen = c->errlen, hw = (size_t)h * (size_t)w;
  const ops_t *o = c->ops;
  const char *name = c->params[l->gamma_id].name;
  if (l->kind != MODEL_NORM_BATCH && ldy != (size_t)l->C)
    return check_fail(err, errlen, "%s: only BatchNorm writes into a wider tensor", name);
  if (l->kind != MODEL_NORM_BATCH) {
    CHECK(layer_norm_recompute(c, l, n, hw, x, y));
    CHECK_OPS(c->ops, o->maxpool_fwd(o, y, n, h, w, l->C, pooled, arg), name);
    return 0;
  }
  const void *gamma = layer_wparam(c, l->gamma_id), *beta = layer_wparam(c, l->beta_id);
  CHECK_OPS(c->ops,
            o->bn_apply_pool(o, x, n, h, w, l->C, l->saved, gamma, beta, 1, y, ldy, pooled, arg),
            name);
  return 0;
}

int layer_norm_recompute(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                         void *y)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  if (l->kind != MODEL_NORM_GROUP) return layer_norm_recompute_ld(c, l, n, hw, x, y, l->C);
  const void *gamma = layer_wparam(c, l->gamma_id), *beta = layer_wparam(c, l->beta_id);
  CHECK_OPS(c->ops,
            o->gn_fwd(o, x, n, hw, l->C, l->G, LAYER_NORM_EPS, gamma, beta, 1, y, l->saved),
            c->params[l->gamma_id].name);
  return 0;
}

int layer_norm_recompute_ld(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                            const void *x, void *y, size_t ldy)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const char *name = c->params[l->gamma_id].name;
  if (l->kind != MODEL_NORM_BATCH)
    return check_fail(err, errlen, "%s: only BatchNorm writes into a wider tensor", name);
  const void *gamma = layer_wparam(c, l->gamma_id), *beta = layer_wparam(c, l->beta_id);
  CHECK_OPS(c->ops,
            o->bn_apply_ld(o, x, (size_t)n * hw, l->C, l->saved, gamma, beta, 1, y, ldy), name);
  return 0;
}

/* layer_norm_bwd's work from dy into dx (may be dy), or, with head, from the 1x1 head's output
 * gradient dy (layer_norm_bwd_1x1; BatchNorm only, checked by the caller). */
static int norm_bwd_into(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                         const void *dy, const layer_conv_t *head, const void *x, const void *y,
                         void *dx, int reduced)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const void *gamma = layer_wparam(c, l->gamma_id);
  size_t base = stage_base(c->params, l->gamma_id, l->beta_id);
  void *dgamma = grad_out(c, l->gamma_id, base), *dbeta = grad_out(c, l->beta_id, base);
  const char *name = c->params[l->gamma_id].name;
  int acc = layer_grad_acc(c);
  ops_relu_t relu = {.y = y, .gamma = gamma, .beta = layer_wparam(c, l->beta_id)};
  if (l->kind == MODEL_NORM_GROUP) {
    CHECK_OPS(c->ops,
              o->gn_bwd(o, dy, &relu, x, n, hw, l->C, l->G, l->saved, gamma, dx, dgamma, dbeta,
                        acc),
              name);
  } else {
    size_t P = (size_t)n * hw;
    const void *wh = head ? layer_wparam(c, head->w_id) : NULL;
    const int K = head ? head->desc.cout : 0;
    /* dgamma/dbeta are this rank's sums (data parallelism averages them like any gradient);
     * dx needs the sums over every rank's pixels. */
    if (!reduced) /* else layer_head_train made the sums, dgamma and dbeta */
      CHECK_OPS(c->ops,
                head ? o->bn_bwd_reduce_1x1(o, dy, wh, K, &relu, x, P, l->C, l->saved, l->stats,
                                            dgamma, dbeta, acc)
                     : o->bn_bwd_reduce(o, dy, &relu, x, P, l->C, l->saved, l->stats, dgamma,
                                        dbeta, acc),
                name);
    if (sync_stats(c, l->stats, 2 * (size_t)l->C, name) != 0) return -1;
    CHECK_OPS(c->ops,
              head ? o->bn_bwd_apply_1x1(o, dy, wh, K, &relu, x, P, l->C, l->saved, l->stats,
                                         gamma, dx)
                   : o->bn_bwd_apply(o, dy, &relu, x, P, l->C, l->saved, l->stats, gamma, dx),
              name);
  }
  return grads_done(c, l->beta_id, l->gamma_id, base);
}

int layer_norm_bwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, void *d,
                   const void *x, const void *y)
{
  return norm_bwd_into(c, l, n, hw, d, NULL, x, y, d, 0);
}

int layer_norm_bwd_1x1(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                       const layer_conv_t *head, const void *g, const void *x, void *dx)
{
  if (l->kind != MODEL_NORM_BATCH || !c->ops->bn_bwd_reduce_1x1 || !c->ops->bn_bwd_apply_1x1 ||
      head->desc.kind != OPS_CONV1X1 || head->desc.cin != l->C || head->dy_gathered)
    return check_fail(c->err, c->errlen, "%s: no BatchNorm backward through a 1x1 head here",
                      c->params[l->gamma_id].name);
  /* the ReLU mask from gamma and beta (no y), as ops.h bn_bwd_*_1x1 take it */
  return norm_bwd_into(c, l, n, hw, g, head, x, NULL, dx, 0);
}

int layer_norm_bwd_1x1_rest(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                            const layer_conv_t *head, const void *g, const void *x, void *dx)
{
  if (l->kind != MODEL_NORM_BATCH || !c->ops->bn_bwd_apply_1x1 ||
      head->desc.kind != OPS_CONV1X1 || head->desc.cin != l->C || head->dy_gathered)
    return check_fail(c->err, c->errlen, "%s: no BatchNorm backward through a 1x1 head here",
                      c->params[l->gamma_id].name);
  return norm_bwd_into(c, l, n, hw, g, head, x, NULL, dx, 1);
}

int layer_head_train(const layer_ctx_t *c, layer_norm_t *l, const layer_conv_t *head, int n,
                     const void *x, const int32_t *labels, int ignore_index, float loss_scale,
                     void *logits, void *g, double *dev_out)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const char *name = c->params[head->w_id].name;
  if (!o->head_train_1x1 || !layer_norm_head_usable(c, l, head) || head->dy_gathered)
    return check_fail(err, errlen, "%s: no training pass of the head here", name);
  if (c->separate && c->gstage)
    return check_fail(err, errlen, "%s: the head's training pass with gradients staged one layer "
                      "at a time", name);
  size_t hb = stage_base(c->params, head->w_id, head->b_id);
  size_t nb = stage_base(c->params, l->gamma_id, l->beta_id);
  const void *b = head->b_id >= 0 ? layer_wparam(c, head->b_id) : NULL;
  CHECK_OPS(o,
            o->head_train_1x1(o, &head->desc, n, x, l->saved, layer_wparam(c, l->gamma_id),
                              layer_wparam(c, l->beta_id), layer_wparam(c, head->w_id), b, labels,
                              ignore_index, loss_scale, 0, logits, g, dev_out,
                              grad_out(c, head->w_id, hb), grad_out(c, head->b_id, hb), l->stats,
                              grad_out(c, l->gamma_id, nb), grad_out(c, l->beta_id, nb),
                              layer_grad_acc(c), c->ws),
            name);
  return grads_done(c, head->b_id, head->w_id, hb);
}

int layer_norm_head_usable(const layer_ctx_t *c, const layer_norm_t *l, const layer_conv_t *head)
{
  const ops_t *o = c->ops;
  return l->kind == MODEL_NORM_BATCH && o->conv1x1_bn_ok && o->conv1x1_fwd_bn &&
         o->conv1x1_bwd_filter_bn && head->desc.kind == OPS_CONV1X1 && head->desc.cin == l->C &&
         o->conv1x1_bn_ok(o, &head->desc) == 1;
}

int layer_norm_head_fwd(const layer_ctx_t *c, const layer_norm_t *l, const layer_conv_t *head,
                        int n, const void *x, void *y)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const char *name = c->params[head->w_id].name;
  if (!layer_norm_head_usable(c, l, head))
    return check_fail(err, errlen, "%s: no 1x1 convolution on a BatchNorm's apply here", name);
  const void *b = head->b_id >= 0 ? layer_wparam(c, head->b_id) : NULL;
  CHECK_OPS(c->ops,
            c->ops->conv1x1_fwd_bn(c->ops, &head->desc, n, x, l->saved,
                                   layer_wparam(c, l->gamma_id), layer_wparam(c, l->beta_id),
                                   layer_wparam(c, head->w_id), b, y, c->ws),
            name);
  return 0;
}

int layer_conv1x1_bwd_filter_bn(const layer_ctx_t *c, const layer_conv_t *l, int n,
                                const void *x, const layer_norm_t *pro, const void *dy)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (!layer_norm_head_usable(c, pro, l))
    return check_fail(err, errlen, "%s: no 1x1 convolution on a BatchNorm's apply here",
                      c->params[l->w_id].name);
  size_t base = stage_base(c->params, l->w_id, l->b_id);
  CHECK_OPS(c->ops,
            c->ops->conv1x1_bwd_filter_bn(c->ops, &l->desc, n, x, pro->saved,
                                          layer_wparam(c, pro->gamma_id),
                                          layer_wparam(c, pro->beta_id), dy,
                                          grad_out(c, l->w_id, base), grad_out(c, l->b_id, base),
                                          layer_grad_acc(c), c->ws),
            c->params[l->w_id].name);
  return grads_done(c, l->b_id, l->w_id, base);
}

int layer_norm_coef(const layer_ctx_t *c, layer_norm_t *l)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const char *name = c->params[l->gamma_id].name;
  if (l->kind != MODEL_NORM_BATCH || !l->coef || !c->ops->bn_coef)
    return check_fail(err, errlen, "%s: no BatchNorm coefficients here", name);
  CHECK_OPS(c->ops,
            c->ops->bn_coef(c->ops, l->saved, layer_wparam(c, l->gamma_id),
                            layer_wparam(c, l->beta_id), l->C, l->coef),
            name);
  return 0;
}

int layer_norm_bwd_fused(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, void *d,
                         const void *x)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const char *name = c->params[l->gamma_id].name;
  if (l->kind != MODEL_NORM_BATCH || !o->bn_bwd_params)
    return check_fail(err, errlen, "%s: only BatchNorm takes a convolution's backward sums", name);
  size_t base = stage_base(c->params, l->gamma_id, l->beta_id);
  void *dgamma = grad_out(c, l->gamma_id, base), *dbeta = grad_out(c, l->beta_id, base);
  /* as layer_norm_bwd: this rank's sums give the parameter gradients, everyone's give dx; d is
   * masked already (no ReLU here) */
  CHECK_OPS(c->ops, o->bn_bwd_params(o, l->stats, l->C, dgamma, dbeta, layer_grad_acc(c)), name);
  if (sync_stats(c, l->stats, 2 * (size_t)l->C, name) != 0) return -1;
  CHECK_OPS(c->ops,
            o->bn_bwd_apply(o, d, NULL, x, (size_t)n * hw, l->C, l->saved, l->stats,
                            layer_wparam(c, l->gamma_id), d),
            name);
  return grads_done(c, l->beta_id, l->gamma_id, base);
}
