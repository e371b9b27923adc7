/* conv_fused_cpu.c — the fused forward 3x3 convolution on the CPU (conv_fused_cpu.h): the CPU
 * backend's bn_apply (with mean 0 and invstd 1, its affine is exactly x * scale + shift), a
 * rounding to bf16, its conv_fwd, a rounding to bf16, its bn_stats. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fused_cpu.h"
#include "kernels/ops.h"

float conv_fused_round_bf16(float v)
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return v; /* NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&v, &u, sizeof v);
  return v;
}

static void round_all(float *v, size_t count)
{
  for (size_t i = 0; i < count; i++) v[i] = conv_fused_round_bf16(v[i]);
}

static int ref_fail(char *err, size_t errlen, const char *what, const char *detail)
{
  snprintf(err, errlen, "fused convolution reference: %s%s%s", what, detail ? ": " : "",
           detail ? detail : "");
  return -1;
}

int conv_fused_conv_open(conv_fused_conv_t *c, int n, int h, int w, int cin, int cout, char *err,
                         size_t errlen)
{
  char why[256];
  if (ops_cpu_init(&c->ops, OPS_F32, why, sizeof why)) return ref_fail(err, errlen, why, NULL);
  c->conv = (ops_conv_t){.kind = OPS_CONV3X3, .h = h, .w = w, .cin = cin, .cout = cout,
                         .max_n = n};
  size_t ws_bytes = 0;
  if (c->ops.conv_plan(&c->ops, &c->conv, &ws_bytes))
    return ref_fail(err, errlen, c->ops.last_error(&c->ops), NULL);
  c->ws = malloc(ws_bytes ? ws_bytes : 1);
  if (!c->ws) {
    c->ops.conv_plan_free(&c->ops, &c->conv);
    return ref_fail(err, errlen, "out of memory", NULL);
  }
  return 0;
}

void conv_fused_conv_close(conv_fused_conv_t *c)
{
  c->ops.conv_plan_free(&c->ops, &c->conv);
  free(c->ws);
  c->ws = NULL;
}

int conv_fused_prologue(const ops_t *o, const float *x, size_t P, int C, const float *scale,
                        const float *shift, float *act, char *err, size_t errlen)
{
  double *saved = calloc(2 * (size_t)C + 1, sizeof *saved);
  if (!saved) return ref_fail(err, errlen, "out of memory", NULL);
  for (int c = 0; c < C; c++) saved[C + c] = 1.0;
  int rc = o->bn_apply(o, x, P, C, saved, scale, shift, 1, act);
  free(saved);
  return rc ? ref_fail(err, errlen, "bn_apply", o->last_error(o)) : 0;
}

int conv_fused_activations(const ops_t *o, const float *x, size_t P, int C, const float *scale,
                           const float *shift, float *act, char *err, size_t errlen)
{
  if (conv_fused_prologue(o, x, P, C, scale, shift, act, err, errlen)) return -1;
  round_all(act, P * C);
  return 0;
}

int conv_fused_ref(const conv_fused_ref_t *a, char *err, size_t errlen)
{
  if (a->n < 0 || a->h < 1 || a->w < 1 || a->cin < 1 || a->cout < 1)
    return ref_fail(err, errlen, "the shape must have n >= 0 and h, w, cin, cout >= 1", NULL);
  if (!a->x || !a->weight || !a->y)
    return ref_fail(err, errlen, "x, weight and y are required", NULL);
  if (!a->scale != !a->shift)
    return ref_fail(err, errlen, "the prologue needs both scale and shift", NULL);
  const size_t P = (size_t)a->n * a->h * a->w;
  const int ci = a->cin, co = a->cout;
  conv_fused_conv_t cv;
  if (conv_fused_conv_open(&cv, a->n, a->h, a->w, ci, co, err, errlen)) return -1;
  const ops_t *o = &cv.ops;
  float *act = malloc((P ? P : 1) * ci * sizeof *act);
  int rc = -1;
  if (!act) {
    ref_fail(err, errlen, "out of memory", NULL);
    goto out;
  }
  if (a->scale) {
    if (conv_fused_activations(o, a->x, P, ci, a->scale, a->shift, act, err, errlen)) goto out;
  } else {
    memcpy(act, a->x, P * ci * sizeof *act);
  }
  if (o->conv_fwd(o, &cv.conv, a->n, act, a->weight, NULL, a->y, cv.ws)) {
    ref_fail(err, errlen, "conv_fwd", o->last_error(o));
    goto out;
  }
  round_all(a->y, P * co);
  if (a->stats && o->bn_stats(o, a->y, P, co, a->stats)) {
    ref_fail(err, errlen, "bn_stats", o->last_error(o));
    goto out;
  }
  rc = 0;
out:
  conv_fused_conv_close(&cv);
  free(act);
  return rc;
}
