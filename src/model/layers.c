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

void *layer_wgrad(const layer_ctx_t *c, int id)
{
  return (char *)c->wgrads + c->params[id].offset * c->ops->elem;
}

int layer_grad_acc(const layer_ctx_t *c) { return c->accumulate && !c->separate; }

static int grads_done_one(const layer_ctx_t *c, int id)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  if (id < 0) return 0;
  const layer_param_t *p = &c->params[id];
  if (c->separate)
    CHECK_OPS(
        c->ops,
        c->ops->to_f32(c->ops, layer_wgrad(c, id), p->count, c->grads + p->offset, c->accumulate),
        "folding gradients into f32");
  if (c->hooks && c->hooks->grads_ready &&
      c->hooks->grads_ready(c->hooks->ctx, p->offset, p->count, layer_stream(c)) != 0) {
    return check_fail(err, errlen, "the grads_ready hook failed for %s", p->name);
  }
  return 0;
}

int layer_grads_done(const layer_ctx_t *c, int id0, int id1)
{
  if (grads_done_one(c, id0) != 0) return -1;
  return grads_done_one(c, id1);
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

int layer_conv_bwd(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x,
                   const void *dy, void *dx)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  void *db = l->b_id >= 0 ? layer_wgrad(c, l->b_id) : NULL;
  /* Weight gradients first, so data parallelism can start reducing them during bwd_data. */
  CHECK_OPS(c->ops,
            c->ops->conv_bwd_filter(c->ops, &l->desc, n, x, dy, layer_wgrad(c, l->w_id), db,
                                    layer_grad_acc(c), c->ws),
            c->params[l->w_id].name);
  /* The bias precedes the weight in the flat buffer (reverse layer order within the layer). */
  if (layer_grads_done(c, l->b_id, l->w_id) != 0) return -1;
  if (dx)
    CHECK_OPS(c->ops,
              c->ops->conv_bwd_data(c->ops, &l->desc, n, dy, layer_wparam(c, l->w_id), dx, c->ws),
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

int layer_norm_fwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                   void *y)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const void *gamma = layer_wparam(c, l->gamma_id), *beta = layer_wparam(c, l->beta_id);
  const char *name = c->params[l->gamma_id].name;
  if (l->kind == MODEL_NORM_GROUP) {
    CHECK_OPS(c->ops,
              o->gn_fwd(o, x, n, hw, l->C, l->G, LAYER_NORM_EPS, gamma, beta, 1, y, l->saved),
              name);
    return 0;
  }
  size_t P = (size_t)n * hw;
  if (c->train) {
    CHECK_OPS(c->ops, o->bn_stats(o, x, P, l->C, l->stats), name);
    if (sync_stats(c, l->stats, 2 * (size_t)l->C + 1, name) != 0) return -1;
    CHECK_OPS(c->ops,
              o->bn_finalize(o, l->stats, l->C, LAYER_NORM_EPS, LAYER_BN_MOMENTUM, l->running,
                             l->running + l->C, l->saved),
              name);
  } else {
    CHECK_OPS(
        c->ops,
        o->bn_saved_from_running(o, l->running, l->running + l->C, l->C, LAYER_NORM_EPS, l->saved),
        name);
  }
  CHECK_OPS(c->ops, o->bn_apply(o, x, P, l->C, l->saved, gamma, beta, 1, y), name);
  return 0;
}

int layer_norm_bwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, void *d,
                   const void *x, const void *y)
{
  char *err = c->err;
  size_t errlen = c->errlen;
  const ops_t *o = c->ops;
  const void *gamma = layer_wparam(c, l->gamma_id);
  void *dgamma = layer_wgrad(c, l->gamma_id), *dbeta = layer_wgrad(c, l->beta_id);
  const char *name = c->params[l->gamma_id].name;
  int acc = layer_grad_acc(c);
  if (l->kind == MODEL_NORM_GROUP) {
    CHECK_OPS(c->ops,
              o->gn_bwd(o, d, y, x, n, hw, l->C, l->G, l->saved, gamma, d, dgamma, dbeta, acc),
              name);
  } else {
    size_t P = (size_t)n * hw;
    /* dgamma/dbeta are this rank's sums (data parallelism averages them like any gradient);
     * dx needs the sums over every rank's pixels. */
    CHECK_OPS(c->ops, o->bn_bwd_reduce(o, d, y, x, P, l->C, l->saved, l->stats, dgamma, dbeta, acc),
              name);
    if (sync_stats(c, l->stats, 2 * (size_t)l->C, name) != 0) return -1;
    CHECK_OPS(c->ops, o->bn_bwd_apply(o, d, y, x, P, l->C, l->saved, l->stats, gamma, d), name);
  }
  /* beta follows gamma in forward order, so it comes first in the flat buffer. */
  return layer_grads_done(c, l->beta_id, l->gamma_id);
}
