/* conv_fused_bwd_cpu.c — the backward passes of the fused 3x3 convolution on the CPU
 * (conv_fused_bwd_cpu.h): dgrad as the CPU backend's conv_bwd_data, a rounding to bf16, its
 * bn_apply + relu_bwd for the mask and its bn_bwd_reduce for the sums; wgrad as the forward's
 * prologue (bn_apply, a rounding to bf16) and direct loops in the documented order. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fused_bwd_cpu.h"
#include "kernels/conv_fused_cpu.h"
#include "kernels/ops.h"

static int bwd_fail(char *err, size_t errlen, const char *which, const char *what,
                    const char *detail)
{
  snprintf(err, errlen, "fused convolution %s reference: %s%s%s", which, what,
           detail ? ": " : "", detail ? detail : "");
  return -1;
}

/* The checks both passes make: the shape, the arrays they cannot do without (have_required),
 * and scale and shift given together (pair names what needs them). */
static int check_args(const char *which, int n, int h, int w, int cin, int cout, int have_required,
                      const char *required, const float *scale, const float *shift,
                      const char *pair, char *err, size_t errlen)
{
  char what[128];
  if (n < 0 || h < 1 || w < 1 || cin < 1 || cout < 1)
    return bwd_fail(err, errlen, which, "the shape must have n >= 0 and h, w, cin, cout >= 1",
                    NULL);
  if (!have_required) {
    snprintf(what, sizeof what, "%s are required", required);
    return bwd_fail(err, errlen, which, what, NULL);
  }
  if (!scale != !shift) {
    snprintf(what, sizeof what, "%s needs both scale and shift", pair);
    return bwd_fail(err, errlen, which, what, NULL);
  }
  return 0;
}

int conv_dgrad_ref(const conv_dgrad_ref_t *a, char *err, size_t errlen)
{
  static const char which[] = "dgrad";
  if (check_args(which, a->n, a->h, a->w, a->cin, a->cout, a->dy && a->weight && a->g,
                 "dy, weight and g", a->scale, a->shift, "the mask", err, errlen))
    return -1;
  if (!a->sums != !a->saved)
    return bwd_fail(err, errlen, which, "the sums need saved (mean, invstd) and sums together",
                    NULL);
  if ((a->scale || a->sums) && !a->x)
    return bwd_fail(err, errlen, which, "the mask and the sums need x", NULL);
  const size_t P = (size_t)a->n * a->h * a->w;
  const int ci = a->cin;
  conv_fused_conv_t cv;
  if (conv_fused_conv_open(&cv, a->n, a->h, a->w, ci, a->cout, err, errlen)) return -1;
  const ops_t *o = &cv.ops;
  float *act = a->scale ? malloc((P ? P : 1) * ci * sizeof *act) : NULL;
  float *dgb = a->sums ? malloc(2 * (size_t)ci * sizeof *dgb) : NULL; /* dgamma, dbeta */
  int rc = -1;
  if ((a->scale && !act) || (a->sums && !dgb)) {
    bwd_fail(err, errlen, which, "out of memory", NULL);
    goto out;
  }
  if (o->conv_bwd_data(o, &cv.conv, a->n, a->dy, a->weight, a->g, cv.ws)) {
    bwd_fail(err, errlen, which, "conv_bwd_data", o->last_error(o));
    goto out;
  }
  for (size_t i = 0; i < P * ci; i++) a->g[i] = conv_fused_round_bf16(a->g[i]);
  if (a->scale) {
    if (conv_fused_prologue(o, a->x, P, ci, a->scale, a->shift, act, err, errlen)) goto out;
    if (o->relu_bwd(o, a->g, act, P * ci, a->g)) { /* g where act > 0, i.e. v > 0 */
      bwd_fail(err, errlen, which, "relu_bwd", o->last_error(o));
      goto out;
    }
  }
  if (a->sums &&
      o->bn_bwd_reduce(o, a->g, NULL, a->x, P, ci, a->saved, a->sums, dgb, dgb + ci, 0)) {
    bwd_fail(err, errlen, which, "bn_bwd_reduce", o->last_error(o));
    goto out;
  }
  rc = 0;
out:
  conv_fused_conv_close(&cv);
  free(act);
  free(dgb);
  return rc;
}

size_t conv_wgrad_ref_blocks(size_t P, int block_pixels)
{
  if (block_pixels < 1 || P == 0) return 1;
  return (P + (size_t)block_pixels - 1) / (size_t)block_pixels;
}

/* Block b's partial into the sum of the blocks before it: the reduction's one step. */
static void add_block(float *dweight, const float *part, size_t b, size_t count)
{
  if (b == 0)
    memcpy(dweight, part, count * sizeof *dweight);
  else
    for (size_t i = 0; i < count; i++) dweight[i] += part[i];
}

void conv_wgrad_ref_reduce(const float *partials, size_t blocks, size_t count, float *dweight)
{
  for (size_t b = 0; b < blocks; b++) add_block(dweight, partials + b * count, b, count);
}

/* One block's partial: pixels [p0, p1), each adding its products in turn. */
static void wgrad_block(const conv_wgrad_ref_t *a, const float *act, size_t p0, size_t p1,
                        float *part)
{
  const int H = a->h, W = a->w, ci = a->cin, co = a->cout;
  const size_t hw = (size_t)H * W;
  memset(part, 0, (size_t)9 * ci * co * sizeof *part);
  for (size_t p = p0; p < p1; p++) {
    size_t img = p / hw;
    int py = (int)(p % hw / W), px = (int)(p % W);
    const float *d = a->dy + p * co;
    for (int ky = 0; ky < 3; ky++) {
      int sy = py + ky - 1;
      if (sy < 0 || sy >= H) continue;
      for (int kx = 0; kx < 3; kx++) {
        int sx = px + kx - 1;
        if (sx < 0 || sx >= W) continue;
        const float *av = act + ((img * H + sy) * W + sx) * ci;
        for (int o = 0; o < co; o++) {
          float *row = part + (((size_t)o * 3 + ky) * 3 + kx) * ci, dv = d[o];
          for (int c = 0; c < ci; c++) row[c] += dv * av[c];
        }
      }
    }
  }
}

int conv_wgrad_ref(const conv_wgrad_ref_t *a, char *err, size_t errlen)
{
  static const char which[] = "wgrad";
  if (check_args(which, a->n, a->h, a->w, a->cin, a->cout, a->x && a->dy && a->dweight,
                 "x, dy and dweight", a->scale, a->shift, "the prologue", err, errlen))
    return -1;
  if (a->block_pixels < 1)
    return bwd_fail(err, errlen, which, "block_pixels must be at least 1", NULL);
  ops_t o;
  char why[256];
  if (ops_cpu_init(&o, OPS_F32, why, sizeof why)) return bwd_fail(err, errlen, which, why, NULL);
  const size_t P = (size_t)a->n * a->h * a->w, count = (size_t)9 * a->cin * a->cout;
  const size_t blocks = conv_wgrad_ref_blocks(P, a->block_pixels);
  float *act = a->scale ? malloc((P ? P : 1) * a->cin * sizeof *act) : NULL;
  float *tmp = a->partials ? NULL : malloc(count * sizeof *tmp);
  int rc = -1;
  if ((a->scale && !act) || (!a->partials && !tmp)) {
    bwd_fail(err, errlen, which, "out of memory", NULL);
    goto out;
  }
  if (a->scale) {
    if (conv_fused_activations(&o, a->x, P, a->cin, a->scale, a->shift, act, err, errlen))
      goto out;
  }
  const float *av = a->scale ? act : a->x;
  for (size_t b = 0; b < blocks; b++) {
    size_t p0 = b * (size_t)a->block_pixels, p1 = p0 + (size_t)a->block_pixels;
    if (p1 > P) p1 = P;
    float *part = a->partials ? a->partials + b * count : tmp;
    wgrad_block(a, av, p0 < P ? p0 : P, p1, part);
    if (a->partials) continue;
    add_block(a->dweight, part, b, count); /* the running sum, in block order */
  }
  if (a->partials) conv_wgrad_ref_reduce(a->partials, blocks, count, a->dweight);
  rc = 0;
out:
  free(act);
  free(tmp);
  return rc;
}
