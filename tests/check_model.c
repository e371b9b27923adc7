/* check_model.c — the whole U-Net: gradients against finite differences in f64 (BatchNorm and
 * GroupNorm), determinism, name-keyed initialisation, parameter count against an independent
 * formula, the flat layout (every tensor aligned, its padding zero, the packed checkpoint
 * layout) and the data-parallel hooks, accumulation, batch 0, eval, learning; the fused
 * convolution engine's schedule against the plain one. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "src/device/arena.h"
#include "src/model/conv_engine.h"
#include "src/model/optim.h"
#include "src/model/unet.h"
#include "src/model/unet_impl.h"
#include "tests/suite_main.h"
#include "tests/unet_fixture.h"

static char err[512];

/* Non-trivial inputs and labels (some pixels ignored), allocated. */
static void make_batch(const model_config_t *c, int n, unsigned salt, float **x, int32_t **y)
{
  size_t P = (size_t)n * c->height * c->width;
  *x = malloc((P * c->in_channels + 1) * sizeof **x);
  *y = malloc((P + 1) * sizeof **y);
  fill_batch(c, n, salt, *x, *y);
}

static model_t *build(const model_config_t *c, ops_dtype_t dt)
{
  model_t *m = NULL;
  ck_assert_msg(unet_create(&m, c, dt, err, sizeof err) == 0, "%s", err);
  return m;
}

/* dL/dp[i] by central differences; the loss is the model's f64 value. The f32 parameter's
 * perturbed values are exact, so their difference is the true step. */
static double central_difference(model_t *m, const float *x, const int32_t *y, float *p,
                                 size_t i, float h)
{
  float p0 = p[i];
  p[i] = p0 + h;
  float pp = p[i];
  ck_assert(model_train_step(m, x, y, 2, 1, 0, NULL, NULL, err, sizeof err) == 0);
  double lp = model_last_loss(m);
  p[i] = p0 - h;
  float pm = p[i];
  ck_assert(model_train_step(m, x, y, 2, 1, 0, NULL, NULL, err, sizeof err) == 0);
  double lm = model_last_loss(m);
  p[i] = p0;
  return (lp - lm) / ((double)pp - pm);
}

static void grad_check(model_norm_t norm)
{
  model_config_t c;
  small_cfg(&c, norm);
  model_t *m = build(&c, OPS_F64);
  float *x;
  int32_t *y;
  make_batch(&c, 2, 1, &x, &y);
  float loss;
  ck_assert_msg(model_train_step(m, x, y, 2, 1, 0, NULL, &loss, err, sizeof err) == 0, "%s", err);
  size_t np = model_flat_size(m);
  float *g = malloc(np * sizeof *g), *p = model_params(m);
  memcpy(g, model_grads(m), np * sizeof *g);
  int checked = 0, kinks = 0;
  for (int t = 0; t < unet_num_tensors(m); t++) {
    const layer_param_t *tp = unet_tensor(m, t);
    size_t picks[2] = {tp->offset, tp->offset + tp->count / 2 + 1};
    for (int k = 0; k < 2; k++) {
      size_t i = picks[k] < tp->offset + tp->count ? picks[k] : tp->offset;
      double fd1 = central_difference(m, x, y, p, i, 1e-6f);
      double fd2 = central_difference(m, x, y, p, i, 4e-7f);
      /* a step across a ReLU or max-pool kink makes the two differ: not a smooth point */
      if (fabs(fd1 - fd2) > 1e-6 + 1e-4 * fabs(fd1)) {
        kinks++;
        continue;
      }
      ck_assert_msg(fabs(fd1 - g[i]) <= 1e-6 + 1e-4 * fabs(fd1),
                    "%s[%zu]: backward %.8g, finite difference %.8g", tp->name, i - tp->offset,
                    g[i], fd1);
      checked++;
    }
  }
  ck_assert_int_ge(checked, 60);
  ck_assert_int_le(kinks, checked / 10);
  free(g), free(x), free(y);
  model_destroy(m);
}

START_TEST(unet_grad_batchnorm) { grad_check(MODEL_NORM_BATCH); }
END_TEST
START_TEST(unet_grad_groupnorm) { grad_check(MODEL_NORM_GROUP); }
END_TEST

START_TEST(same_seed_same_bits)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *a = build(&c, OPS_F32), *b = build(&c, OPS_F32);
  size_t np = model_flat_size(a);
  ck_assert_int_eq(memcmp(model_params(a), model_params(b), np * sizeof(float)), 0);
  float *x;
  int32_t *y;
  make_batch(&c, 3, 2, &x, &y);
  float la, lb;
  ck_assert(model_train_step(a, x, y, 3, 1, 0, NULL, &la, err, sizeof err) == 0);
  ck_assert(model_train_step(b, x, y, 3, 1, 0, NULL, &lb, err, sizeof err) == 0);
  ck_assert_int_eq(memcmp(&la, &lb, sizeof la), 0);
  ck_assert_int_eq(memcmp(model_grads(a), model_grads(b), np * sizeof(float)), 0);
  ck_assert_int_eq(memcmp(model_buffers(a), model_buffers(b),
                          model_num_buffers(a) * sizeof(float)), 0);
  ck_assert_str_eq(model_signature(a), model_signature(b));
  c.seed = 43;
  model_t *d = build(&c, OPS_F32);
  ck_assert_int_ne(memcmp(model_params(a), model_params(d), np * sizeof(float)), 0);
  model_destroy(a), model_destroy(b), model_destroy(d);
  free(x), free(y);
}
END_TEST

static const layer_param_t *find(const model_t *m, const char *name)
{
  for (int t = 0; t < unet_num_tensors(m); t++)
    if (strcmp(unet_tensor(m, t)->name, name) == 0) return unet_tensor(m, t);
  return NULL;
}

/* A tensor's initial values depend on the seed and its name, not on where it sits. */
START_TEST(init_keyed_by_name)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *a = build(&c, OPS_F32);
  c.widths[2] = 10;
  c.classes = 5;
  model_t *b = build(&c, OPS_F32);
  const layer_param_t *ta = find(a, "enc0.conv1.weight"), *tb = find(b, "enc0.conv1.weight");
  ck_assert_ptr_nonnull(ta);
  ck_assert_uint_ne(ta->offset, tb->offset);
  ck_assert_int_eq(memcmp(model_params(a) + ta->offset, model_params(b) + tb->offset,
                          ta->count * sizeof(float)), 0);
  model_destroy(a), model_destroy(b);
  /* Kaiming: std sqrt(2 / fan_in) for 3x3 convs, BatchNorm weight 1 and bias 0 */
  model_config_default(&c);
  c.levels = 2;
  c.widths[0] = 64;
  c.widths[1] = 128;
  c.height = c.width = 4;
  c.max_batch = 1;
  model_t *m = build(&c, OPS_F32);
  const layer_param_t *t = find(m, "enc1.conv2.weight");
  double s = 0, s2 = 0;
  for (size_t i = 0; i < t->count; i++) {
    double v = model_params(m)[t->offset + i];
    s += v, s2 += v * v;
  }
  double mean = s / t->count, sd = sqrt(s2 / t->count - mean * mean);
  ck_assert_double_eq_tol(sd, sqrt(2.0 / (9 * 128)), 0.02 * sqrt(2.0 / (9 * 128)));
  ck_assert_double_lt(fabs(mean), 0.01 * sd);
  t = find(m, "enc1.norm2.weight");
  for (size_t i = 0; i < t->count; i++) ck_assert_float_eq(model_params(m)[t->offset + i], 1);
  t = find(m, "dec0.up.bias");
  for (size_t i = 0; i < t->count; i++) ck_assert_float_eq(model_params(m)[t->offset + i], 0);
  model_destroy(m);
}
END_TEST

/* Parameters of the U-Net written out level by level, independently of the model code. */
static size_t formula(const model_config_t *c)
{
  size_t n = 0, L = (size_t)c->levels;
  for (size_t i = 0; i < L; i++) {
    size_t w = (size_t)c->widths[i], cin = i ? (size_t)c->widths[i - 1] : (size_t)c->in_channels;
    n += 9 * cin * w + 2 * w + 9 * w * w + 2 * w; /* two conv3x3 + norm (gamma, beta) */
  }
  for (size_t i = 0; i + 1 < L; i++) {
    size_t w = (size_t)c->widths[i], up = (size_t)c->widths[i + 1];
    n += 4 * up * w + w;                          /* transposed conv 2x2 with bias */
    n += 9 * 2 * w * w + 2 * w + 9 * w * w + 2 * w;
  }
  return n + (size_t)c->widths[0] * c->classes + c->classes; /* 1x1 head */
}

START_TEST(param_count_formula)
{
  model_config_t c;
  model_config_default(&c);
  c.levels = 5;
  int ref[5] = {64, 128, 256, 512, 1024};
  memcpy(c.widths, ref, sizeof ref);
  c.height = c.width = 256;
  c.max_batch = 6;
  ck_assert_uint_eq(model_config_num_params(&c), formula(&c));
  ck_assert(formula(&c) > 31000000 && formula(&c) < 31100000); /* "~31 M" */
  small_cfg(&c, MODEL_NORM_GROUP);
  model_t *m = build(&c, OPS_F32);
  ck_assert_uint_eq(model_num_params(m), formula(&c));
  ck_assert_uint_eq(model_num_buffers(m), 0);
  model_destroy(m);
  small_cfg(&c, MODEL_NORM_BATCH);
  m = build(&c, OPS_F32);
  /* running mean and variance per BatchNorm channel: 2 norms per block pair, 2 per level */
  size_t bn = 0;
  for (int i = 0; i < c.levels; i++) bn += 2 * 2 * (size_t)c.widths[i];
  for (int i = 0; i + 1 < c.levels; i++) bn += 2 * 2 * (size_t)c.widths[i];
  ck_assert_uint_eq(model_num_buffers(m), bn);
  arena_t *a = model_arena(m);
  ck_assert_uint_eq(arena_current(a, ARENA_PARAMS), (model_flat_size(m) + bn) * sizeof(float));
  ck_assert_uint_eq(arena_current(a, ARENA_GRADS), model_flat_size(m) * sizeof(float));
  ck_assert(arena_current(a, ARENA_ACTIVATIONS) > 0);
  ck_assert(arena_current(a, ARENA_WORKSPACE) > 0);
  model_destroy(m);
}
END_TEST

typedef struct {
  size_t next, calls, fwd_stats, bwd_stats, covered;
  int out_of_order;
  size_t ends[256]; /* where each reported range ends */
} hook_log_t;

/* Ranges come in increasing order, apart by alignment padding at most. */
static int log_ready(void *ctx, size_t offset, size_t count, void *stream)
{
  hook_log_t *h = ctx;
  if (offset < h->next || offset - h->next >= MODEL_WEIGHT_ALIGN / 2 || count == 0)
    h->out_of_order = 1;
  h->next = offset + count;
  h->covered += count;
  if (h->calls < 256) h->ends[h->calls] = h->next;
  h->calls++;
  return 0;
}

static int log_stats(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  hook_log_t *h = ctx;
  ck_assert_int_eq(dtype, SHMDDP_F64);
  if (count % 2) {
    h->fwd_stats++;
  } else {
    h->bwd_stats++;
  }
  return 0;
}

static void hooks_case(int batch)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *m = build(&c, OPS_F32);
  float *x;
  int32_t *y;
  make_batch(&c, 2, 3, &x, &y);
  hook_log_t h = {0};
  model_hooks_t hooks = {.ctx = &h, .sync_stats = log_stats, .grads_ready = log_ready};
  float loss = -1;
  ck_assert_msg(model_train_step(m, x, y, batch, 1, 0, &hooks, &loss, err, sizeof err) == 0,
                "%s", err);
  ck_assert_int_eq(h.out_of_order, 0);
  ck_assert_uint_eq(h.next, model_flat_size(m));
  ck_assert_uint_eq(h.covered, model_num_params(m)); /* every parameter, no padding */
  /* one range per layer with parameters where its tensors are adjacent, two where alignment
   * padding parts them (widths 4 and 6 here), each ending where a tensor ends */
  int layers = 0, apart = 0;
  for (int i = 0; i < unet_num_tensors(m); i++) {
    const layer_param_t *t = unet_tensor(m, i), *u = i ? unet_tensor(m, i - 1) : NULL;
    const char *a = t->name, *dot = strrchr(a, '.');
    int joined = u && strncmp(a, u->name, (size_t)(dot - a) + 1) == 0;
    layers += !joined;
    apart += joined && t->offset + t->count != u->offset && u->offset + u->count != t->offset;
  }
  ck_assert_int_lt(layers, unet_num_tensors(m));
  ck_assert_int_gt(apart, 0);
  ck_assert_int_lt(apart, layers);
  ck_assert_uint_eq(h.calls, (size_t)(layers + apart));
  for (size_t k = 0; k < h.calls && k < 256; k++) {
    int at_end = 0;
    for (int i = 0; i < unet_num_tensors(m); i++)
      at_end |= unet_tensor(m, i)->offset + unet_tensor(m, i)->count == h.ends[k];
    ck_assert_msg(at_end, "range %zu ends at %zu, not where a tensor ends", k, h.ends[k]);
  }
  size_t norms = 4 * (size_t)c.levels - 2;
  ck_assert_uint_eq(h.fwd_stats, norms);
  ck_assert_uint_eq(h.bwd_stats, norms);
  /* the head comes first in the flat buffer: its 3 biases, then (3 x 4 weights: either order
   * needs padding) its weight at the next offset aligned for a convolution's weights */
  int nt = unet_num_tensors(m);
  ck_assert_str_eq(unet_tensor(m, nt - 1)->name, "head.bias");
  ck_assert_uint_eq(unet_tensor(m, nt - 1)->offset, 0);
  ck_assert_uint_eq(unet_tensor(m, nt - 2)->offset, MODEL_WEIGHT_ALIGN / 2);
  if (batch == 0) {
    ck_assert_float_eq(loss, 0);
    for (size_t i = 0; i < model_flat_size(m); i++) ck_assert_float_eq(model_grads(m)[i], 0);
  }
  model_destroy(m);
  free(x), free(y);
}

START_TEST(hooks_in_order) { hooks_case(2); }
END_TEST
START_TEST(hooks_with_empty_batch) { hooks_case(0); }
END_TEST

static int sync_nothing(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream)
{
  (*(int *)ctx)++;
  return 0;
}

/* BatchNorm's statistics take one of two paths: statistics then finalisation with the SyncBN
 * exchange between (a sync_stats hook), or both in one op (bn_stats_finalize) without one. With
 * a hook that sums over one rank (does nothing) the two must give the same loss, gradients and
 * running statistics, bit for bit. */
START_TEST(batchnorm_paths_agree)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *a = build(&c, OPS_F32), *b = build(&c, OPS_F32);
  float *x;
  int32_t *y;
  make_batch(&c, 2, 7, &x, &y);
  int calls = 0;
  model_hooks_t hooks = {.ctx = &calls, .sync_stats = sync_nothing};
  float la = -1, lb = -2;
  for (int step = 0; step < 2; step++) {
    ck_assert(model_train_step(a, x, y, 2, 1, 0, NULL, &la, err, sizeof err) == 0);
    ck_assert(model_train_step(b, x, y, 2, 1, 0, &hooks, &lb, err, sizeof err) == 0);
  }
  ck_assert_int_eq(calls, 2 * 2 * (4 * c.levels - 2)); /* forward and backward, every BN layer */
  ck_assert_float_eq(la, lb);
  size_t np = model_flat_size(a), nb = model_num_buffers(a);
  ck_assert(nb > 0);
  ck_assert(memcmp(model_grads(a), model_grads(b), np * sizeof(float)) == 0);
  ck_assert(memcmp(model_buffers(a), model_buffers(b), nb * sizeof(float)) == 0);
  model_destroy(a);
  model_destroy(b);
  free(x), free(y);
}
END_TEST

START_TEST(groupnorm_needs_no_sync)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_GROUP);
  model_t *m = build(&c, OPS_F32);
  float *x;
  int32_t *y;
  make_batch(&c, 1, 3, &x, &y);
  hook_log_t h = {0};
  model_hooks_t hooks = {.ctx = &h, .sync_stats = log_stats, .grads_ready = log_ready};
  ck_assert(model_train_step(m, x, y, 1, 1, 0, &hooks, NULL, err, sizeof err) == 0);
  ck_assert_uint_eq(h.fwd_stats + h.bwd_stats, 0);
  ck_assert_uint_eq(h.next, model_flat_size(m));
  model_destroy(m);
  free(x), free(y);
}
END_TEST

START_TEST(accumulate_and_scale)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *m = build(&c, OPS_F32);
  size_t np = model_flat_size(m);
  float *xa, *xb;
  int32_t *ya, *yb;
  make_batch(&c, 2, 4, &xa, &ya);
  make_batch(&c, 3, 5, &xb, &yb);
  float *ga = malloc(np * 4), *gb = malloc(np * 4), la, ls;
  ck_assert(model_train_step(m, xa, ya, 2, 1, 0, NULL, &la, err, sizeof err) == 0);
  memcpy(ga, model_grads(m), np * 4);
  ck_assert(model_train_step(m, xb, yb, 3, 1, 0, NULL, NULL, err, sizeof err) == 0);
  memcpy(gb, model_grads(m), np * 4);
  ck_assert(model_train_step(m, xa, ya, 2, 1, 0, NULL, NULL, err, sizeof err) == 0);
  ck_assert(model_train_step(m, xb, yb, 3, 1, 1, NULL, NULL, err, sizeof err) == 0);
  for (size_t i = 0; i < np; i++)
    ck_assert_msg(fabsf(model_grads(m)[i] - (ga[i] + gb[i])) <= 1e-5f * (1 + fabsf(ga[i] + gb[i])),
                  "accumulated grad %zu", i);
  ck_assert(model_train_step(m, xa, ya, 2, 1024, 0, NULL, &ls, err, sizeof err) == 0);
  ck_assert_float_eq(ls, la); /* the reported loss is unscaled */
  for (size_t i = 0; i < np; i++)
    ck_assert_msg(fabsf(model_grads(m)[i] - 1024 * ga[i]) <= 1e-4f * (1e-3f + fabsf(1024 * ga[i])),
                  "scaled grad %zu: %g vs %g", i, model_grads(m)[i], 1024 * ga[i]);
  free(ga), free(gb), free(xa), free(ya), free(xb), free(yb);
  model_destroy(m);
}
END_TEST

START_TEST(eval_mode)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *m = build(&c, OPS_F32);
  float *x;
  int32_t *y;
  make_batch(&c, 3, 6, &x, &y);
  ck_assert(model_train_step(m, x, y, 3, 1, 0, NULL, NULL, err, sizeof err) == 0);
  size_t nb = model_num_buffers(m), P = 3 * (size_t)c.height * c.width;
  float *buf = malloc(nb * 4);
  memcpy(buf, model_buffers(m), nb * 4);
  int32_t *p1 = malloc(P * 4), *p2 = malloc(P * 4);
  float l1, l2;
  ck_assert(model_eval(m, x, y, 3, p1, &l1, err, sizeof err) == 0);
  ck_assert(model_eval(m, x, NULL, 3, p2, &l2, err, sizeof err) == 0);
  ck_assert_int_eq(memcmp(p1, p2, P * 4), 0);
  ck_assert_int_eq(memcmp(buf, model_buffers(m), nb * 4), 0); /* eval leaves running stats */
  ck_assert(isfinite(l1) && l1 > 0);
  for (size_t p = 0; p < P; p++) ck_assert(p1[p] >= 0 && p1[p] < c.classes);
  /* eval uses running statistics: a batch of one image gives that image's result as in a batch */
  ck_assert(model_eval(m, x + 2 * (size_t)c.height * c.width * 3, NULL, 1, p2, NULL, err,
                       sizeof err) == 0);
  ck_assert_int_eq(memcmp(p2, p1 + 2 * (size_t)c.height * c.width,
                          (size_t)c.height * c.width * 4), 0);
  free(buf), free(p1), free(p2), free(x), free(y);
  model_destroy(m);
}
END_TEST

/* A handful of SGD steps on one batch must reduce its loss a lot. */
START_TEST(learns_a_batch)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  c.height = c.width = 16;
  model_t *m = build(&c, OPS_F32);
  size_t P = 2 * (size_t)c.height * c.width;
  float *x = malloc(P * 3 * 4);
  int32_t *y = malloc(P * 4);
  for (size_t p = 0; p < P; p++) {
    int cls = (int)((p % c.width) * c.classes / c.width); /* vertical stripes */
    y[p] = cls;
    for (int k = 0; k < 3; k++) x[p * 3 + k] = (float)(0.5 * cls - 0.5 + 0.2 * sin(p * 0.7 + k));
  }
  optim_config_t oc;
  optim_config_default(&oc, OPTIM_SGD);
  oc.lr = 0.1;
  optim_t *o;
  ck_assert(optim_create(&o, &oc, model_flat_size(m), model_arena(m), err, sizeof err) == 0);
  float first = 0, loss = 0;
  for (int s = 0; s < 30; s++) {
    ck_assert(model_train_step(m, x, y, 2, 1, 0, NULL, &loss, err, sizeof err) == 0);
    if (s == 0) first = loss;
    ck_assert(optim_step(o, model_params(m), model_grads(m), oc.lr, 1, NULL, err, sizeof err) == 0);
  }
  ck_assert_msg(loss < 0.3f * first, "loss %g -> %g", first, loss);
  optim_destroy(o);
  model_destroy(m);
  free(x), free(y);
}
END_TEST

/* model_update is optim_step on the model's buffers: the same weights after a few steps; in
 * fp32 working_grads changes nothing (the working gradients are the f32 ones). */
START_TEST(update_is_optim_step)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  c.height = c.width = 16;
  model_t *a = build(&c, OPS_F32);
  c.working_grads = 1;
  model_t *b = build(&c, OPS_F32);
  ck_assert_ptr_nonnull(model_grads(b));
  size_t P = 2 * (size_t)c.height * c.width, np = model_flat_size(a);
  float *x = malloc(P * 3 * 4);
  int32_t *y = malloc(P * 4);
  for (size_t p = 0; p < P; p++) {
    y[p] = (int32_t)(p * 7 % (size_t)c.classes);
    for (int k = 0; k < 3; k++) x[p * 3 + k] = (float)sin(p * 0.37 + k);
  }
  optim_config_t oc;
  optim_config_default(&oc, OPTIM_ADAMW);
  optim_t *oa, *ob;
  ck_assert(optim_create(&oa, &oc, np, model_arena(a), err, sizeof err) == 0);
  ck_assert(optim_create(&ob, &oc, np, model_arena(b), err, sizeof err) == 0);
  for (int s = 0; s < 3; s++) {
    float la, lb;
    ck_assert(model_train_step(a, x, y, 2, 1, 0, NULL, &la, err, sizeof err) == 0);
    ck_assert(model_train_step(b, x, y, 2, 1, 0, NULL, &lb, err, sizeof err) == 0);
    ck_assert_float_eq(la, lb);
    ck_assert(optim_step(oa, model_params(a), model_grads(a), 1e-3, 1, NULL, err, sizeof err) == 0);
    ck_assert_msg(model_update(b, ob, 1e-3, 1, err, sizeof err) == 0, "%s", err);
  }
  ck_assert_int_eq(memcmp(model_params(a), model_params(b), np * 4), 0);
  ck_assert_int_eq(optim_updates(ob), 3);
  optim_destroy(oa), optim_destroy(ob);
  model_destroy(a), model_destroy(b);
  free(x), free(y);
}
END_TEST

/* ---- the flat layout: alignment, padding, packing ---- */

/* A convolution's weight (not a norm's): 256-byte aligned in 16-bit buffers, not 16 only. */
static int conv_weight(const layer_param_t *t)
{
  size_t n = strlen(t->name);
  return n > 7 && !strcmp(t->name + n - 7, ".weight") && !strstr(t->name, ".norm");
}

/* The registry of cfg alone (names, counts, offsets), without allocating the model. */
static model_t *registry(const model_config_t *cfg)
{
  model_t *m = calloc(1, sizeof *m);
  ck_assert_ptr_nonnull(m);
  m->cfg = *cfg;
  ck_assert_int_eq(unet_register_params(m), 0);
  return m;
}

static void registry_free(model_t *m)
{
  free(m->params);
  free(m);
}

/* The prefix of a tensor's name before its last '.': its layer. */
static int same_layer(const layer_param_t *a, const layer_param_t *b)
{
  const char *dot = strrchr(a->name, '.');
  return strncmp(a->name, b->name, (size_t)(dot - a->name) + 1) == 0;
}

/* Every tensor starts 16-byte aligned in 16-bit buffers (so 32 in f32 ones), convolution
 * weights 256-byte; tensors do not overlap and lie in the flat buffer, layers in reverse order;
 * the padding is less than one alignment unit per tensor; the packed offsets are the tensors
 * back to back in reverse order (the layout before padding, which checkpoints keep). Returns
 * the number of layers whose two tensors are not adjacent. */
static int check_layout(const model_t *m)
{
  int nt = unet_num_tensors(m), apart = 0;
  size_t flat = model_flat_size(m), np = model_num_params(m), packed = 0, total = 0;
  for (int i = nt - 1; i >= 0; i--) {
    const layer_param_t *t = unet_tensor(m, i);
    size_t align = conv_weight(t) ? MODEL_WEIGHT_ALIGN : MODEL_PARAM_ALIGN;
    ck_assert_msg(t->offset * 2 % align == 0 && t->offset * 4 % align == 0,
                  "%s at element %zu: not %zu-byte aligned", t->name, t->offset, align);
    ck_assert_msg(t->offset + t->count <= flat, "%s past the flat buffer", t->name);
    ck_assert_uint_eq(t->packed, packed);
    packed += t->count;
    total += t->count;
    for (int j = 0; j < nt; j++) {
      const layer_param_t *u = unet_tensor(m, j);
      if (j != i)
        ck_assert_msg(t->offset + t->count <= u->offset || u->offset + u->count <= t->offset,
                      "%s and %s overlap", t->name, u->name);
      if (j > i && !same_layer(t, u))
        ck_assert_msg(u->offset < t->offset, "%s (later layer) not before %s", u->name,
                      t->name);
    }
    if (i > 0 && same_layer(t, unet_tensor(m, i - 1))) {
      const layer_param_t *u = unet_tensor(m, i - 1);
      apart += t->offset + t->count != u->offset && u->offset + u->count != t->offset;
    }
  }
  ck_assert_uint_eq(total, np);
  ck_assert_uint_ge(flat, np);
  ck_assert_uint_lt(flat - np, (size_t)nt * (MODEL_WEIGHT_ALIGN / 2));
  int ends = 0; /* no padding after the last tensor */
  for (int i = 0; i < nt; i++) ends |= unet_tensor(m, i)->offset + unet_tensor(m, i)->count == flat;
  ck_assert(ends);
  return apart;
}

/* The trainer's networks (its width presets and the reference, any class count) and odd widths:
 * every tensor aligned. With channel counts that are multiples of 8 no layer's tensors are
 * parted by padding (one gradient range per layer): biases go after their weights where that
 * needs none (the reference head's 4). */
START_TEST(layout_every_tensor_aligned)
{
  static const int presets[][6] = {{5, 64, 128, 256, 512, 1024}, {4, 16, 32, 64, 128},
                                   {3, 8, 16, 32}, {3, 16, 32, 64}};
  model_config_t c;
  for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
    for (int classes = 2; classes <= 33; classes++) {
      model_config_default(&c);
      c.levels = presets[p][0];
      for (int i = 0; i < c.levels; i++) c.widths[i] = presets[p][1 + i];
      c.height = c.width = 256;
      c.classes = classes;
      for (int norm = 0; norm < 2; norm++) {
        c.norm = norm ? MODEL_NORM_GROUP : MODEL_NORM_BATCH;
        model_t *m = registry(&c);
        ck_assert_uint_eq(model_num_params(m), formula(&c));
        ck_assert_int_eq(check_layout(m), 0);
        registry_free(m);
      }
    }
  }
  /* the reference network of the default job: the head's weight first, its bias right after */
  model_config_default(&c);
  c.levels = 5;
  for (int i = 0; i < 5; i++) c.widths[i] = 64 << i;
  c.height = c.width = 256;
  model_t *m = registry(&c);
  int nt = unet_num_tensors(m);
  ck_assert_str_eq(unet_tensor(m, nt - 2)->name, "head.weight");
  ck_assert_uint_eq(unet_tensor(m, nt - 2)->offset, 0);
  ck_assert_uint_eq(unet_tensor(m, nt - 1)->offset, 64 * 4);
  registry_free(m);
  /* odd widths and classes: still aligned, with layers parted by padding */
  static const int odd[][4] = {{3, 4, 6, 8}, {3, 12, 20, 28}, {2, 5, 7, 0}, {1, 3, 0, 0}};
  for (size_t p = 0; p < sizeof odd / sizeof odd[0]; p++) {
    model_config_default(&c);
    c.levels = odd[p][0];
    for (int i = 0; i < c.levels; i++) c.widths[i] = odd[p][1 + i];
    c.classes = 3 + (int)p;
    m = registry(&c);
    ck_assert_uint_eq(model_num_params(m), formula(&c));
    check_layout(m);
    registry_free(m);
  }
  small_cfg(&c, MODEL_NORM_BATCH);
  m = registry(&c);
  ck_assert_int_gt(check_layout(m), 0);
  registry_free(m);
}
END_TEST

static void assert_padding_zero(const model_t *m, const unsigned char *pad, const float *v,
                                const char *what)
{
  for (size_t i = 0; i < model_flat_size(m); i++)
    if (pad[i])
      ck_assert_msg(v[i] == 0 && !signbit(v[i]), "%s: padding element %zu is %g", what, i, v[i]);
}

/* Training leaves the padding of weights, gradients and optimizer state exactly zero: SGD
 * (momentum, weight decay, Nesterov) and AdamW, fresh and accumulated gradients, and the f64
 * working copies (gradients staged one layer at a time, folded into f32). */
START_TEST(padding_stays_zero)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  float *x;
  int32_t *y;
  make_batch(&c, 2, 9, &x, &y);
  for (int variant = 0; variant < 4; variant++) {
    model_t *m = build(&c, variant == 3 ? OPS_F64 : OPS_F32);
    unsigned char *pad = padding_map(m);
    ck_assert_ptr_nonnull(pad);
    size_t flat = model_flat_size(m), nstate = 0, pads = 0;
    for (size_t i = 0; i < flat; i++) pads += pad[i];
    ck_assert_uint_gt(pads, 0); /* this network has padding to check */
    assert_padding_zero(m, pad, model_params(m), "initial weights");
    optim_config_t oc;
    optim_config_default(&oc, variant == 1 ? OPTIM_ADAMW : OPTIM_SGD);
    oc.weight_decay = 0.1;
    oc.nesterov = variant == 2;
    optim_t *o;
    ck_assert(optim_create(&o, &oc, flat, model_arena(m), err, sizeof err) == 0);
    for (int s = 0; s < 3; s++) {
      ck_assert_msg(model_train_step(m, x, y, 2, 8, variant == 2 && s == 2, NULL, NULL, err,
                                     sizeof err) == 0, "%s", err);
      assert_padding_zero(m, pad, model_grads(m), "gradients");
      ck_assert(optim_step(o, model_params(m), model_grads(m), 0.1, 0.125, NULL, err,
                           sizeof err) == 0);
      assert_padding_zero(m, pad, model_params(m), "weights");
      float *st = optim_state(o, &nstate);
      ck_assert_uint_eq(nstate % flat, 0);
      for (size_t k = 0; k < nstate / flat; k++)
        assert_padding_zero(m, pad, st + k * flat, "optimizer state");
    }
    optim_destroy(o);
    free(pad);
    model_destroy(m);
  }
  free(x), free(y);
}
END_TEST

/* model_pack is the layout before padding (tensors back to back, head first), computed here
 * from the names and counts alone; model_unpack inverts it and clears the padding. */
START_TEST(pack_is_the_unpadded_layout)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_GROUP);
  model_t *m = build(&c, OPS_F32);
  size_t flat = model_flat_size(m), np = model_num_params(m);
  ck_assert_uint_gt(flat, np);
  float *p = model_params(m), *packed = malloc(np * sizeof *packed);
  float *back = malloc(flat * sizeof *back);
  for (size_t i = 0; i < flat; i++) back[i] = NAN;
  model_pack(m, p, packed);
  size_t at = 0;
  for (int i = unet_num_tensors(m) - 1; i >= 0; i--) {
    const layer_param_t *t = unet_tensor(m, i);
    ck_assert_int_eq(memcmp(packed + at, p + t->offset, t->count * sizeof *p), 0);
    at += t->count;
  }
  ck_assert_uint_eq(at, np);
  model_unpack(m, packed, back);
  ck_assert_int_eq(memcmp(back, p, flat * sizeof *p), 0); /* padding included: zero */
  free(packed), free(back);
  model_destroy(m);
}
END_TEST

START_TEST(bad_configs)
{
  model_config_t c;
  model_t *m;
  small_cfg(&c, MODEL_NORM_GROUP);
  c.groups = 4; /* 6 is not divisible by 4 */
  ck_assert_int_ne(model_create(&m, &c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "divisible"));
  small_cfg(&c, MODEL_NORM_BATCH);
  c.height = 10; /* 3 levels need multiples of 4 */
  ck_assert_int_ne(model_config_validate(&c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "multiples of 4"));
  small_cfg(&c, MODEL_NORM_BATCH);
  c.precision = MODEL_BF16;
  ck_assert_int_ne(model_create(&m, &c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "fp32"));
  small_cfg(&c, MODEL_NORM_BATCH);
  c.levels = 0;
  ck_assert_int_ne(model_config_validate(&c, err, sizeof err), 0);
  ck_assert_uint_eq(model_config_num_params(&c), 0);
  small_cfg(&c, MODEL_NORM_BATCH);
  m = build(&c, OPS_F32);
  float x[1] = {0};
  ck_assert_int_ne(model_train_step(m, x, NULL, 4, 1, 0, NULL, NULL, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "0 to 3"));
  model_destroy(m);
}
END_TEST

/* ---- the fused engine (SHMDDP_CONV_ENGINE=fused): on the CPU every block's second
 * convolution runs fused with the first block's BatchNorm + ReLU, and every first block's with
 * its own statistics (ops.h conv_fwd_fused, composed of the plain ops), so the fused schedule is
 * checked against the plain one ---- */

static model_t *build_engine(const model_config_t *c, const char *engine)
{
  setenv("SHMDDP_CONV_ENGINE", engine, 1);
  model_t *m = build(c, OPS_F64);
  unsetenv("SHMDDP_CONV_ENGINE");
  return m;
}

static int blocks_fused(const model_t *m)
{
  int k = 0;
  for (int i = 0; i < m->cfg.levels; i++) {
    k += m->enc[i].b2.fused;
    if (i < m->cfg.levels - 1) k += m->dec[i].b2.fused;
  }
  return k;
}

/* The first blocks whose conv makes their statistics (and none of the second blocks). */
static int firsts_fused(const model_t *m)
{
  int k = 0;
  for (int i = 0; i < m->cfg.levels; i++) {
    k += m->enc[i].b1.stats_fused;
    ck_assert_int_eq(m->enc[i].b2.stats_fused, 0);
    if (i < m->cfg.levels - 1) {
      k += m->dec[i].b1.stats_fused;
      ck_assert_int_eq(m->dec[i].b2.stats_fused, 0);
    }
  }
  return k;
}

/* The convolutions whose plain input gradient runs on the fused kernels (layer_conv_t
 * dgrad_fused), of those that make one (all but the input layer's). */
static int dgrads_fused(const model_t *m)
{
  int k = 0;
  for (int i = 0; i < m->cfg.levels; i++) {
    if (i > 0) k += m->enc[i].b1.conv.dgrad_fused;
    k += m->enc[i].b2.conv.dgrad_fused;
    ck_assert(!(m->enc[i].b2.fused && m->enc[i].b2.conv.dgrad_fused)); /* masked, not plain */
    if (i < m->cfg.levels - 1) {
      k += m->dec[i].b1.conv.dgrad_fused + m->dec[i].b2.conv.dgrad_fused;
      ck_assert(!(m->dec[i].b2.fused && m->dec[i].b2.conv.dgrad_fused));
    }
  }
  return k;
}

/* Every tensor of b within tol of a's largest magnitude in that tensor. */
static void assert_close(const model_t *m, const float *a, const float *b, double tol,
                         const char *what)
{
  for (int t = 0; t < unet_num_tensors(m); t++) {
    const layer_param_t *tp = unet_tensor(m, t);
    double big = 0, worst = 0;
    for (size_t i = tp->offset; i < tp->offset + tp->count; i++) {
      big = fmax(big, fabs(a[i]));
      worst = fmax(worst, fabs((double)a[i] - b[i]));
    }
    ck_assert_msg(worst <= tol * big + 1e-12, "%s of %s: off by %.3g of %.3g", what, tp->name,
                  worst, big);
  }
}

/* The fused schedule's loss, gradients and running statistics equal the plain one's (f64; the
 * prologue's f32 coefficients make the difference ~1e-7), through two steps with the SyncBN
 * hook (called as often: forward statistics and backward sums of every BatchNorm), in eval,
 * and with a batch of 0. auto fuses nothing on the CPU (its fused ops are not faster). */
START_TEST(fused_matches_library)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *a = build_engine(&c, "library"), *b = build_engine(&c, "fused"),
          *u = build_engine(&c, "auto");
  ck_assert_int_eq(blocks_fused(a), 0);
  ck_assert_int_eq(blocks_fused(u), 0);
  ck_assert_int_eq(blocks_fused(b), 2 * c.levels - 1);
  ck_assert_int_eq(firsts_fused(a) + firsts_fused(u), 0);
  ck_assert_int_eq(firsts_fused(b), 2 * c.levels - 1);
  /* the first blocks' plain input gradients (the second ones' are masked in the pairs) */
  ck_assert_int_eq(dgrads_fused(a) + dgrads_fused(u), 0);
  ck_assert_int_eq(dgrads_fused(b), 2 * c.levels - 2);
  float *x;
  int32_t *y;
  make_batch(&c, 3, 9, &x, &y);
  int ca = 0, cb = 0;
  model_hooks_t ha = {.ctx = &ca, .sync_stats = sync_nothing};
  model_hooks_t hb = {.ctx = &cb, .sync_stats = sync_nothing};
  size_t np = model_flat_size(a), nb = model_num_buffers(a);
  float la = -1, lb = -2;
  for (int step = 0; step < 2; step++) {
    ck_assert_msg(model_train_step(a, x, y, 3, 1, 0, &ha, &la, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_train_step(b, x, y, 3, 1, 0, &hb, &lb, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(fabs(la - lb) <= 1e-6 * fabs(la), "step %d: loss %.9g fused, %.9g plain", step,
                  lb, la);
    assert_close(a, model_grads(a), model_grads(b), 1e-4, "gradient");
    for (size_t i = 0; i < nb; i++)
      ck_assert_msg(fabs(model_buffers(a)[i] - model_buffers(b)[i]) <=
                        1e-5 * (1 + fabs(model_buffers(a)[i])),
                    "running statistic %zu: %.9g fused, %.9g plain", i, model_buffers(b)[i],
                    model_buffers(a)[i]);
  }
  ck_assert_int_eq(ca, cb);
  size_t P = 3 * (size_t)c.height * c.width;
  int32_t *pa = malloc(P * 4), *pb = malloc(P * 4);
  float ea, eb;
  ck_assert(model_eval(a, x, y, 3, pa, &ea, err, sizeof err) == 0);
  ck_assert_msg(model_eval(b, x, y, 3, pb, &eb, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(fabs(ea - eb) <= 1e-6 * fabs(ea), "eval loss %.9g fused, %.9g plain", eb, ea);
  size_t same = 0;
  for (size_t p = 0; p < P; p++) same += pa[p] == pb[p];
  ck_assert_uint_ge(same, P - 2); /* a near-tie may break either way */
  ck_assert_msg(model_train_step(b, x, y, 0, 1, 0, &hb, NULL, err, sizeof err) == 0, "%s", err);
  for (size_t i = 0; i < np; i++) ck_assert(model_grads(b)[i] == 0);
  free(pa), free(pb), free(x), free(y);
  model_destroy(a), model_destroy(b), model_destroy(u);
}
END_TEST

/* The fused schedule's memory plan: with every tensor in its own memory
 * (SHMDDP_MEM_PLAN=separate) the same bits as with shared memory, so no tensor it still reads
 * was given to another; and reruns give the same bits. */
START_TEST(fused_plan_holds)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *a = build_engine(&c, "fused");
  setenv("SHMDDP_MEM_PLAN", "separate", 1);
  model_t *b = build_engine(&c, "fused");
  unsetenv("SHMDDP_MEM_PLAN");
  float *x;
  int32_t *y;
  make_batch(&c, 2, 10, &x, &y);
  float la, lb, lr;
  size_t np = model_flat_size(a);
  ck_assert_msg(model_train_step(a, x, y, 2, 1, 0, NULL, &la, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(model_train_step(b, x, y, 2, 1, 0, NULL, &lb, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(memcmp(&la, &lb, sizeof la), 0);
  ck_assert_int_eq(memcmp(model_grads(a), model_grads(b), np * sizeof(float)), 0);
  float *g = malloc(np * sizeof *g);
  memcpy(g, model_grads(a), np * sizeof *g);
  ck_assert(model_train_step(a, x, y, 2, 1, 0, NULL, &lr, err, sizeof err) == 0);
  ck_assert_int_eq(memcmp(g, model_grads(a), np * sizeof(float)), 0);
  free(g), free(x), free(y);
  model_destroy(a), model_destroy(b);
}
END_TEST

/* An engine that is not one of the choices stops the build, naming them; GroupNorm models fuse
 * no convolution with a norm (the fused ops carry BatchNorm), only the plain input gradients:
 * every block's but the input layer's. */
START_TEST(engine_choices)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  model_t *m = NULL;
  setenv("SHMDDP_CONV_ENGINE", "cudnn9", 1);
  ck_assert_int_ne(unet_create(&m, &c, OPS_F64, err, sizeof err), 0);
  unsetenv("SHMDDP_CONV_ENGINE");
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err, "SHMDDP_CONV_ENGINE") && strstr(err, "library"), "%s", err);
  small_cfg(&c, MODEL_NORM_GROUP);
  m = build_engine(&c, "fused");
  ck_assert_int_eq(blocks_fused(m), 0);
  ck_assert_int_eq(firsts_fused(m), 0);
  ck_assert_int_eq(dgrads_fused(m), 4 * c.levels - 3);
  model_destroy(m);
}
END_TEST

/* The choice the model and dev/ops_cuda_bench share (src/model/conv_engine.h), on the CPU
 * table, which ranks its fused convolutions 1 (it has them, none measured faster): auto (also
 * when unset) and library leave a layer on the plain ops, fused takes it, for either use; a
 * table missing a fused entry the use needs never fuses for it (the statistics-only forward
 * needs only conv_fwd_fused). */
START_TEST(engine_choice_per_layer)
{
  ops_t o;
  ck_assert_int_eq(ops_cpu_init(&o, OPS_F64, err, sizeof err), 0);
  ops_conv_t c = {.kind = OPS_CONV3X3, .h = 8, .w = 8, .cin = 4, .cout = 4, .max_n = 2};
  size_t ws = 0;
  ck_assert_int_eq(o.conv_plan(&o, &c, &ws), 0);
  const struct {
    const char *value, *setting;
    int fuses;
  } cases[] = {{NULL, "auto", 0}, {"auto", "auto", 0}, {"library", "library", 0},
               {"fused", "fused", 1}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    if (cases[k].value) setenv("SHMDDP_CONV_ENGINE", cases[k].value, 1);
    else unsetenv("SHMDDP_CONV_ENGINE");
    model_conv_engine_t e;
    ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), 0);
    ck_assert_str_eq(e.setting, cases[k].setting);
    for (int use = OPS_FUSE_PAIR; use <= OPS_FUSE_DGRAD; use++) {
      ws = 7;
      ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, use, &ws), cases[k].fuses);
      if (!cases[k].fuses) ck_assert_uint_eq(ws, 0); /* no fused workspace for the plain ops */
    }
  }
  setenv("SHMDDP_CONV_ENGINE", "fused", 1);
  model_conv_engine_t e;
  ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), 0);
  ops_conv_t head = {.kind = OPS_CONV1X1, .h = 8, .w = 8, .cin = 4, .cout = 2, .max_n = 2};
  ck_assert_int_eq(o.conv_plan(&o, &head, &ws), 0);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &head, OPS_FUSE_PAIR, &ws), 0); /* not 3x3 */
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &head, OPS_FUSE_STATS, &ws), 0);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &head, OPS_FUSE_DGRAD, &ws), 0);
  o.conv_plan_free(&o, &head);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_PAIR, &ws), 1);
  o.bn_bwd_params = NULL; /* the pair's backward lacks a step: the other uses are left */
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_PAIR, &ws), 0);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_STATS, &ws), 1);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_DGRAD, &ws), 1);
  int (*bwd_data_fused)(const ops_t *, const ops_conv_t *, int, const void *, const void *,
                        const void *, const float *, const double *, void *, double *, void *) =
      o.conv_bwd_data_fused;
  o.conv_bwd_data_fused = NULL; /* the plain input gradient's one op */
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_DGRAD, &ws), 0);
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_STATS, &ws), 1);
  o.conv_bwd_data_fused = bwd_data_fused;
  o.conv_fwd_fused = NULL;
  ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_STATS, &ws), 0);
  setenv("SHMDDP_CONV_ENGINE", "Fused", 1);
  ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "SHMDDP_CONV_ENGINE") && strstr(err, "fused"), "%s", err);
  unsetenv("SHMDDP_CONV_ENGINE");
  o.conv_plan_free(&o, &c);
  o.destroy(&o);
}
END_TEST

/* SHMDDP_CONV_FUSE_SHAPES: under auto, the listed shapes run fused for their use where the
 * table has kernels (the CPU's, rank 1), others stay plain; in a model, exactly the blocks of
 * those shapes. Refused with another engine, and every malformed entry refused naming the
 * variable and the form, before the model is built. */
START_TEST(engine_extra_shapes)
{
  ops_t o;
  ck_assert_int_eq(ops_cpu_init(&o, OPS_F64, err, sizeof err), 0);
  ops_conv_t c = {.kind = OPS_CONV3X3, .h = 8, .w = 8, .cin = 4, .cout = 6, .max_n = 2};
  size_t ws = 0;
  ck_assert_int_eq(o.conv_plan(&o, &c, &ws), 0);
  const struct {
    const char *shapes;
    int pair, stats, dgrad;
  } cases[] = {{"", 0, 0, 0},
               {"pair:4:6", 1, 0, 0},
               {"stats:4:6", 0, 1, 0},
               {"dgrad:4:6", 0, 0, 1},
               {"pair:6:4,stats:4:4,pair:4:8,dgrad:6:4", 0, 0, 0},
               {"stats:8:8,pair:4:6,stats:4:6,dgrad:4:6", 1, 1, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    setenv("SHMDDP_CONV_FUSE_SHAPES", cases[k].shapes, 1);
    model_conv_engine_t e;
    ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), 0);
    ck_assert_str_eq(e.setting, "auto");
    ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_PAIR, &ws), cases[k].pair);
    ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_STATS, &ws), cases[k].stats);
    ck_assert_int_eq(model_conv_engine_fuses(&e, &o, &c, OPS_FUSE_DGRAD, &ws), cases[k].dgrad);
  }
  static const char *bad[] = {"pair:4",   "pairs:4:6",   "pair:4:6,",   ",pair:4:6",
                              "pair:-4:6", "pair:4:6x",  "pair:0:6",   "pair:4:65537",
                              "PAIR:4:6", "pair::6",     "pair:4:6:8", "stats 4 6",
                              "dgrads:4:6", "dgrad:4"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    setenv("SHMDDP_CONV_FUSE_SHAPES", bad[k], 1);
    model_conv_engine_t e;
    ck_assert_msg(model_conv_engine_read(&e, err, sizeof err) == -1, "%s accepted", bad[k]);
    ck_assert_msg(strstr(err, "SHMDDP_CONV_FUSE_SHAPES") && strstr(err, "USE:CIN:COUT"),
                  "%s: %s", bad[k], err);
  }
  char many[512] = "";
  for (int k = 0; k <= MODEL_CONV_SHAPES_MAX; k++)
    snprintf(many + strlen(many), sizeof many - strlen(many), "%spair:%d:%d", k ? "," : "",
             64 * (k + 1), 64);
  setenv("SHMDDP_CONV_FUSE_SHAPES", many, 1);
  model_conv_engine_t e;
  ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "more than"), "%s", err);
  setenv("SHMDDP_CONV_FUSE_SHAPES", "pair:4:6", 1);
  for (int k = 0; k < 2; k++) {
    setenv("SHMDDP_CONV_ENGINE", k ? "fused" : "library", 1);
    ck_assert_int_eq(model_conv_engine_read(&e, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "SHMDDP_CONV_FUSE_SHAPES") && strstr(err, k ? "fused" : "library"),
                  "%s", err);
  }
  unsetenv("SHMDDP_CONV_ENGINE");
  o.conv_plan_free(&o, &c);
  o.destroy(&o);
  /* a model (widths 4-6-8): the 6 -> 6 pairs (encoder and decoder, level 1), the first block
   * 4 -> 6, and the plain input gradient of the decoder's 8 -> 4 after the concat; a malformed
   * list stops the build */
  model_config_t mc;
  small_cfg(&mc, MODEL_NORM_BATCH);
  setenv("SHMDDP_CONV_FUSE_SHAPES", "pair:6:6,stats:4:6,dgrad:8:4", 1);
  model_t *m = build(&mc, OPS_F64);
  ck_assert_int_eq(blocks_fused(m), 2);
  ck_assert_int_eq(m->enc[1].b2.fused + m->dec[1].b2.fused, 2);
  ck_assert_int_eq(firsts_fused(m), 1);
  ck_assert_int_eq(m->enc[1].b1.stats_fused, 1);
  ck_assert_int_eq(dgrads_fused(m), 1);
  ck_assert_int_eq(m->dec[0].b1.conv.dgrad_fused, 1);
  model_destroy(m);
  setenv("SHMDDP_CONV_FUSE_SHAPES", "pair:6", 1);
  m = NULL;
  ck_assert_int_ne(unet_create(&m, &mc, OPS_F64, err, sizeof err), 0);
  ck_assert_ptr_null(m);
  ck_assert_msg(strstr(err, "SHMDDP_CONV_FUSE_SHAPES"), "%s", err);
  unsetenv("SHMDDP_CONV_FUSE_SHAPES");
}
END_TEST

static Suite *make_model_suite(const suite_env_t *env)
{
  Suite *s = suite_create("model");
  SUITE_CASE(s, "gradients", unet_grad_batchnorm, unet_grad_groupnorm);
  SUITE_CASE(s, "structure", same_seed_same_bits, init_keyed_by_name, param_count_formula,
             hooks_in_order, hooks_with_empty_batch, batchnorm_paths_agree,
             groupnorm_needs_no_sync, accumulate_and_scale, eval_mode, learns_a_batch,
             update_is_optim_step, layout_every_tensor_aligned, padding_stays_zero,
             pack_is_the_unpadded_layout, bad_configs);
  SUITE_CASE(s, "fused", fused_matches_library, fused_plan_holds, engine_choices,
             engine_choice_per_layer, engine_extra_shapes);
  return s;
}

SUITE_MAIN("check_model", make_model_suite, SUITE_CPU_ONLY)
