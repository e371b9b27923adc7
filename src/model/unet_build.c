/* unet_build.c — the U-Net's construction: configuration defaults and validation, the
 * parameter registry (names, shapes, the padded reverse-order layout), initialisation, the
 * signature. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/model/rng.h"
#include "src/model/unet_impl.h"

void model_config_default(model_config_t *cfg)
{
  *cfg = (model_config_t){.in_channels = 3,
                          .classes = 4,
                          .levels = 4,
                          .widths = {16, 32, 64, 128},
                          .norm = MODEL_NORM_BATCH,
                          .groups = 8,
                          .max_batch = 8,
                          .height = 64,
                          .width = 64,
                          .ignore_index = -1,
                          .precision = MODEL_FP32,
                          .device = MODEL_DEVICE_CPU,
                          .seed = 1};
}

int model_config_validate(const model_config_t *c, char *err, size_t errlen)
{
  if (c->in_channels < 1 || c->in_channels > 4096)
    return check_fail(err, errlen, "input channels %d: must be between 1 and 4096", c->in_channels);
  if (c->classes < 2 || c->classes > 4096)
    return check_fail(err, errlen, "classes %d: must be between 2 and 4096", c->classes);
  if (c->levels < 1 || c->levels > MODEL_MAX_LEVELS)
    return check_fail(err, errlen, "%d widths given: give between 1 and %d (e.g. 16,32,64,128)",
                      c->levels, MODEL_MAX_LEVELS);
  for (int i = 0; i < c->levels; i++)
    if (c->widths[i] < 1 || c->widths[i] > 16384)
      return check_fail(err, errlen, "width %d (level %d): must be between 1 and 16384",
                        c->widths[i], i);
  if (c->norm != MODEL_NORM_BATCH && c->norm != MODEL_NORM_GROUP)
    return check_fail(err, errlen, "normalisation %d: use batch or group", (int)c->norm);
  if (c->norm == MODEL_NORM_GROUP) {
    if (c->groups < 1)
      return check_fail(err, errlen, "GroupNorm groups %d: must be >= 1", c->groups);
    for (int i = 0; i < c->levels; i++)
      if (c->widths[i] % c->groups)
        return check_fail(err, errlen,
                          "GroupNorm with %d groups needs every width divisible by %d; "
                          "width %d is not: change --widths or the group count",
                          c->groups, c->groups, c->widths[i]);
  }
  if (c->max_batch < 1 || c->max_batch > 65536)
    return check_fail(err, errlen, "batch size %d: must be between 1 and 65536", c->max_batch);
  int div = 1 << (c->levels - 1);
  if (c->height < div || c->width < div || c->height % div || c->width % div)
    return check_fail(err, errlen,
                      "image size %dx%d: with %d levels both sides must be positive "
                      "multiples of %d (each level halves them)",
                      c->height, c->width, c->levels, div);
  if ((double)c->height * c->width * c->max_batch > 2e9)
    return check_fail(err, errlen, "batch %d of %dx%d images is too many pixels for one device",
                      c->max_batch, c->height, c->width);
  if (c->device == MODEL_DEVICE_CPU && c->precision != MODEL_FP32)
    return check_fail(err, errlen,
                      "the CPU backend computes in fp32: use --precision fp32 with "
                      "--device cpu (bf16 and fp16 need --device cuda)");
  if (c->device != MODEL_DEVICE_CPU && c->device != MODEL_DEVICE_CUDA)
    return check_fail(err, errlen, "device %d: use cpu or cuda", (int)c->device);
  if (c->device == MODEL_DEVICE_CUDA && c->cuda_device < 0)
    return check_fail(err, errlen, "CUDA device %d: must be >= 0", c->cuda_device);
  return 0;
}

/* ---- parameter registry ---- */

static int add_param(model_t *m, size_t count, layer_init_t init, int fan_in, const char *shape,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int add_param(model_t *m, size_t count, layer_init_t init, int fan_in, const char *shape,
                     const char *fmt, ...)
{
  if (m->ntensors == m->captensors) {
    int cap = m->captensors ? 2 * m->captensors : 64;
    layer_param_t *np = realloc(m->params, (size_t)cap * sizeof *np);
    if (!np) return -1;
    m->params = np;
    m->captensors = cap;
  }
  layer_param_t *p = &m->params[m->ntensors];
  memset(p, 0, sizeof *p);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->name, sizeof p->name, fmt, ap);
  va_end(ap);
  snprintf(p->shape, sizeof p->shape, "%s", shape);
  p->count = count;
  p->align = MODEL_PARAM_ALIGN_ELEMS;
  p->init = init;
  p->fan_in = fan_in;
  m->nparams += count;
  return m->ntensors++;
}

static int reg_conv(model_t *m, layer_conv_t *l, ops_conv_kind_t kind, int h, int w, int cin,
                    int cout, const char *prefix)
{
  char shape[40];
  l->desc = (ops_conv_t){.kind = kind, .h = h, .w = w, .cin = cin, .cout = cout,
                         .max_n = m->cfg.max_batch};
  l->b_id = -1;
  switch (kind) {
  case OPS_CONV3X3:
    snprintf(shape, sizeof shape, "%dx3x3x%d", cout, cin);
    l->w_id = add_param(m, (size_t)cout * 9 * cin, LAYER_INIT_KAIMING_RELU, 9 * cin, shape,
                        "%s.weight", prefix);
    break;
  case OPS_CONV1X1:
    snprintf(shape, sizeof shape, "%dx%d", cout, cin);
    l->w_id = add_param(m, (size_t)cout * cin, LAYER_INIT_KAIMING_LINEAR, cin, shape,
                        "%s.weight", prefix);
    break;
  case OPS_CONVT2X2:
    snprintf(shape, sizeof shape, "%dx2x2x%d", cin, cout);
    /* each output pixel sees cin inputs through one tap */
    l->w_id = add_param(m, (size_t)cin * 4 * cout, LAYER_INIT_KAIMING_LINEAR, cin, shape,
                        "%s.weight", prefix);
    break;
  }
  if (l->w_id >= 0) m->params[l->w_id].align = MODEL_WEIGHT_ALIGN_ELEMS;
  if (kind != OPS_CONV3X3) {
    snprintf(shape, sizeof shape, "%d", cout);
    l->b_id = add_param(m, (size_t)cout, LAYER_INIT_ZERO, 0, shape, "%s.bias", prefix);
    if (l->b_id >= 0) m->params[l->b_id].with_prev = 1;
  }
  return (l->w_id < 0 || (kind != OPS_CONV3X3 && l->b_id < 0)) ? -1 : 0;
}

static int reg_block(model_t *m, block_t *b, int h, int w, int cin, int cout, const char *conv,
                     const char *norm)
{
  char shape[16];
  if (reg_conv(m, &b->conv, OPS_CONV3X3, h, w, cin, cout, conv) != 0) return -1;
  snprintf(shape, sizeof shape, "%d", cout);
  b->norm.kind = m->cfg.norm;
  b->norm.C = cout;
  b->norm.G = m->cfg.norm == MODEL_NORM_GROUP ? m->cfg.groups : 1;
  b->norm.gamma_id = add_param(m, (size_t)cout, LAYER_INIT_ONE, 0, shape, "%s.weight", norm);
  b->norm.beta_id = add_param(m, (size_t)cout, LAYER_INIT_ZERO, 0, shape, "%s.bias", norm);
  if (b->norm.gamma_id < 0 || b->norm.beta_id < 0) return -1;
  m->params[b->norm.beta_id].with_prev = 1;
  if (m->cfg.norm == MODEL_NORM_BATCH) m->nbuffers += 2 * (size_t)cout;
  return 0;
}

int unet_register_params(model_t *m)
{
  const model_config_t *c = &m->cfg;
  int L = c->levels;
  char a[32], b[32];
  for (int i = 0; i < L; i++) {
    int h = c->height >> i, w = c->width >> i;
    int cin = i == 0 ? c->in_channels : c->widths[i - 1];
    snprintf(a, sizeof a, "enc%d.conv1", i);
    snprintf(b, sizeof b, "enc%d.norm1", i);
    if (reg_block(m, &m->enc[i].b1, h, w, cin, c->widths[i], a, b) != 0) return -1;
    snprintf(a, sizeof a, "enc%d.conv2", i);
    snprintf(b, sizeof b, "enc%d.norm2", i);
    if (reg_block(m, &m->enc[i].b2, h, w, c->widths[i], c->widths[i], a, b) != 0) return -1;
  }
  for (int i = L - 2; i >= 0; i--) {
    int h = c->height >> i, w = c->width >> i;
    snprintf(a, sizeof a, "dec%d.up", i);
    if (reg_conv(m, &m->dec[i].up, OPS_CONVT2X2, h / 2, w / 2, c->widths[i + 1], c->widths[i],
                 a) != 0)
      return -1;
    snprintf(a, sizeof a, "dec%d.conv1", i);
    snprintf(b, sizeof b, "dec%d.norm1", i);
    if (reg_block(m, &m->dec[i].b1, h, w, 2 * c->widths[i], c->widths[i], a, b) != 0) return -1;
    snprintf(a, sizeof a, "dec%d.conv2", i);
    snprintf(b, sizeof b, "dec%d.norm2", i);
    if (reg_block(m, &m->dec[i].b2, h, w, c->widths[i], c->widths[i], a, b) != 0) return -1;
  }
  if (reg_conv(m, &m->head, OPS_CONV1X1, c->height, c->width, c->widths[0], c->classes,
               "head") != 0)
    return -1;
  unet_lay_out(m);
  return 0;
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* 1 when tensor b, placed right after tensor a (a at its alignment from off), needs no padding
 * before it. */
static int adjacent(const layer_param_t *a, const layer_param_t *b, size_t off)
{
  size_t end = align_up(off, a->align) + a->count;
  return align_up(end, b->align) == end;
}

/* Places tensor t at its next aligned offset from *off. */
static void place(model_t *m, int t, size_t *off)
{
  m->params[t].offset = align_up(*off, m->params[t].align);
  *off = m->params[t].offset + m->params[t].count;
}

/* The flat layout: layers in reverse order (the head first), every tensor at a multiple of its
 * alignment (layer_param_t.align), the gaps zero padding. A layer's two tensors stay
 * neighbours, the bias first unless that would leave padding between them and the weight first
 * would not (the head's few classes, the up-convolutions): then they are one range of
 * gradients (layers.c). No padding after the last tensor, so the last gradient range ends the
 * buffer. The packed layout (checkpoints) is the tensors back to back in reverse order, as the
 * flat one was before it was padded. */
void unet_lay_out(model_t *m)
{
  size_t off = 0, packed = 0;
  layer_param_t *p = m->params;
  for (int t = m->ntensors - 1; t >= 0; t--) {
    p[t].packed = packed;
    packed += p[t].count;
  }
  for (int t = m->ntensors - 1; t >= 0; t--) {
    if (!p[t].with_prev || t == 0) {
      place(m, t, &off);
      continue;
    }
    int first = t, second = t - 1;
    if (!adjacent(&p[t], &p[t - 1], off) && adjacent(&p[t - 1], &p[t], off))
      first = t - 1, second = t;
    place(m, first, &off);
    place(m, second, &off);
    t--;
  }
  m->nflat = off;
}

size_t model_flat_size(const model_t *m) { return m->nflat; }

void model_pack(const model_t *m, const float *flat, float *packed)
{
  for (int t = 0; t < m->ntensors; t++)
    memcpy(packed + m->params[t].packed, flat + m->params[t].offset,
           m->params[t].count * sizeof *flat);
}

void model_unpack(const model_t *m, const float *packed, float *flat)
{
  memset(flat, 0, m->nflat * sizeof *flat);
  for (int t = 0; t < m->ntensors; t++)
    memcpy(flat + m->params[t].offset, packed + m->params[t].packed,
           m->params[t].count * sizeof *flat);
}

int model_save_packed(model_t *m, const float *flat, size_t slots, float *packed, char *err,
                      size_t errlen)
{
  size_t nf = m->nflat, np = m->nparams;
  if (!slots) return 0;
  float *h = malloc(slots * nf * sizeof *h);
  if (!h) return check_fail(err, errlen, "out of memory staging %zu parameters", slots * nf);
  int rc = dev_copy_now(h, DEV_HOST, flat, m->dev, slots * nf * sizeof *h, err, errlen);
  for (size_t k = 0; rc == 0 && k < slots; k++) model_pack(m, h + k * nf, packed + k * np);
  free(h);
  return rc;
}

int model_load_packed(model_t *m, const void *packed, size_t slots, float *flat, char *err,
                      size_t errlen)
{
  size_t nf = m->nflat, np = m->nparams;
  if (!slots) return 0;
  float *h = malloc(slots * nf * sizeof *h), *p = malloc(slots * np * sizeof *p);
  int rc = h && p ? 0 : check_fail(err, errlen, "out of memory staging %zu parameters", slots * nf);
  if (rc == 0) {
    memcpy(p, packed, slots * np * sizeof *p); /* file data need not be 4-byte aligned */
    for (size_t k = 0; k < slots; k++) model_unpack(m, p + k * np, h + k * nf);
    rc = dev_copy_now(flat, m->dev, h, DEV_HOST, slots * nf * sizeof *h, err, errlen);
  }
  free(h);
  free(p);
  return rc;
}

/* The registry of cfg alone: its parameter count, or (flat) its flat buffers' length. */
static size_t config_count(const model_config_t *cfg, int flat)
{
  char err[256];
  if (model_config_validate(cfg, err, sizeof err) != 0) return 0;
  model_t *m = calloc(1, sizeof *m);
  if (!m) return 0;
  m->cfg = *cfg;
  size_t n = unet_register_params(m) == 0 ? (flat ? m->nflat : m->nparams) : 0;
  free(m->params);
  free(m);
  return n;
}

size_t model_config_num_params(const model_config_t *cfg) { return config_count(cfg, 0); }
size_t model_config_flat_size(const model_config_t *cfg) { return config_count(cfg, 1); }

void unet_init_params(model_t *m)
{
  memset(m->pf32, 0, m->nflat * sizeof *m->pf32); /* the padding too */
  for (int t = 0; t < m->ntensors; t++) {
    const layer_param_t *p = &m->params[t];
    float *v = m->pf32 + p->offset;
    uint64_t key = rng_key(m->cfg.seed, p->name);
    double std = p->init == LAYER_INIT_KAIMING_RELU ? sqrt(2.0 / p->fan_in)
                 : p->init == LAYER_INIT_KAIMING_LINEAR ? sqrt(1.0 / p->fan_in) : 0;
    for (size_t i = 0; i < p->count; i++)
      v[i] = p->init == LAYER_INIT_ONE ? 1.0f
             : p->init == LAYER_INIT_ZERO ? 0.0f : (float)(std * rng_normal(key, i));
  }
}

int unet_build_signature(model_t *m)
{
  size_t cap = 256 + (size_t)m->ntensors * 128, off = 0;
  m->signature = malloc(cap);
  if (!m->signature) return -1;
  const model_config_t *c = &m->cfg;
  off += (size_t)snprintf(m->signature + off, cap - off,
                          "unet in=%d classes=%d norm=%s groups=%d size=%dx%d compute=%s "
                          "params=%zu buffers=%zu\n", c->in_channels, c->classes,
                          c->norm == MODEL_NORM_GROUP ? "group" : "batch",
                          c->norm == MODEL_NORM_GROUP ? c->groups : 0, c->height, c->width,
                          ops_dtype_name(m->ops.dtype), m->nparams, m->nbuffers);
  for (int t = 0; t < m->ntensors && off < cap; t++)
    off += (size_t)snprintf(m->signature + off, cap - off, "%s %s @%zu\n", m->params[t].name,
                            m->params[t].shape, m->params[t].offset);
  return 0;
}
