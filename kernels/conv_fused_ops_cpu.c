/* conv_fused_ops_cpu.c — the CPU backend's fused 3x3 convolutions (ops.h conv_fwd_fused and
 * its neighbours), composed of the table's own ops: the prologue into a scratch copy of the
 * input, the plain convolution, then the statistics or sums over its output. The same values
 * as the unfused sequence the model runs otherwise (apply, convolution, bn_stats; or
 * conv_bwd_data, then bn_bwd_reduce with the mask), so the model's fused schedule can be
 * checked on the CPU against its plain one; the speed is the GPU kernels' business
 * (kernels/conv_sm90.h). One source for f32 and f64 tables (elements read by the table's
 * dtype). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cpu.h"

static double ld(const ops_t *o, const void *p, size_t i)
{
  return o->dtype == OPS_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

static void st(const ops_t *o, void *p, size_t i, double v)
{
  if (o->dtype == OPS_F64)
    ((double *)p)[i] = v;
  else
    ((float *)p)[i] = (float)v;
}

/* x * scale + shift, in the table's precision: the prologue's pre-activation, whose sign is
 * the mask of the backward. */
static double pre(const ops_t *o, double x, const float *coef, int C, int c)
{
  if (o->dtype == OPS_F64) return x * (double)coef[c] + (double)coef[C + c];
  return (double)(float)((float)x * coef[c] + coef[C + c]);
}

static int check_conv(const ops_conv_t *c, int n)
{
  if (c->kind != OPS_CONV3X3)
    return ops_cpu_fail("a fused convolution is 3x3 (this layer is kind %d)", (int)c->kind);
  if (n < 0 || n > c->max_n)
    return ops_cpu_fail("a fused convolution of %d images: the layer was planned for 0 to %d", n,
                        c->max_n);
  return 0;
}

/* a = max(0, x * scale + shift) over n images of the layer's input, into a new buffer. */
static void *prologue(const ops_t *o, const ops_conv_t *c, int n, const void *x, const float *coef)
{
  size_t count = (size_t)n * c->h * c->w * c->cin;
  void *a = malloc((count ? count : 1) * o->elem);
  if (!a) {
    ops_cpu_fail("out of memory for the fused convolution's prologue (%zu elements)", count);
    return NULL;
  }
  for (size_t i = 0; i < count; i++) {
    double v = pre(o, ld(o, x, i), coef, c->cin, (int)(i % (size_t)c->cin));
    st(o, a, i, v > 0 ? v : 0);
  }
  return a;
}

static int cpu_conv_fused(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use,
                          size_t *ws_bytes)
{
  (void)use; /* every fused op is composed of the plain ones: either use runs */
  *ws_bytes = 0;
  if (c->kind != OPS_CONV3X3) return 0;
  ops_conv_t copy = *c;
  if (o->conv_plan(o, &copy, ws_bytes)) return -1;
  return 1; /* as fast as the plain ops at best: the default engine keeps those */
}

static int cpu_conv_fwd_fused(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                              const float *coef, const void *w, void *y, double *stats, void *ws)
{
  if (check_conv(c, n)) return -1;
  void *a = coef ? prologue(o, c, n, x, coef) : NULL;
  if (coef && !a) return -1;
  int rc = o->conv_fwd(o, c, n, a ? a : x, w, NULL, y, ws);
  free(a);
  if (rc == 0 && stats) rc = o->bn_stats(o, y, (size_t)n * c->h * c->w, c->cout, stats);
  return rc;
}

static int cpu_conv_bwd_data_fused(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                                   const void *w, const void *x, const float *coef,
                                   const double *saved, void *dx, double *sums, void *ws)
{
  if (check_conv(c, n)) return -1;
  if ((coef || sums) && !x) return ops_cpu_fail("the fused input gradient's mask and sums read x");
  if (sums && !saved) return ops_cpu_fail("the fused input gradient's sums need the statistics");
  if (o->conv_bwd_data(o, c, n, dy, w, dx, ws)) return -1;
  const int C = c->cin;
  const size_t P = (size_t)n * c->h * c->w;
  if (coef)
    for (size_t i = 0; i < P * (size_t)C; i++)
      if (!(pre(o, ld(o, x, i), coef, C, (int)(i % (size_t)C)) > 0)) st(o, dx, i, 0);
  if (!sums) return 0;
  /* bn_bwd_reduce of the masked gradient gives the sums (its parameter gradients unused) */
  void *dgb = malloc(2 * (size_t)C * o->elem);
  if (!dgb) return ops_cpu_fail("out of memory for the fused input gradient's sums");
  int rc = o->bn_bwd_reduce(o, dx, NULL, x, P, C, saved, sums, dgb,
                            (char *)dgb + (size_t)C * o->elem, 0);
  free(dgb);
  return rc;
}

static int cpu_conv_bwd_filter_fused(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                     const float *coef, const void *dy, void *dw, int acc,
                                     void *ws)
{
  if (check_conv(c, n)) return -1;
  void *a = coef ? prologue(o, c, n, x, coef) : NULL;
  if (coef && !a) return -1;
  int rc = o->conv_bwd_filter(o, c, n, a ? a : x, dy, dw, NULL, acc, ws);
  free(a);
  return rc;
}

static int cpu_bn_coef(const ops_t *o, const double *saved, const void *gamma, const void *beta,
                       int C, float *coef)
{
  for (int c = 0; c < C; c++) {
    double scale = ld(o, gamma, (size_t)c) * saved[C + c];
    coef[c] = (float)scale;
    coef[C + c] = (float)(ld(o, beta, (size_t)c) - saved[c] * scale);
  }
  return 0;
}

static int cpu_bn_bwd_params(const ops_t *o, const double *sums, int C, void *dgamma, void *dbeta,
                             int acc)
{
  for (int c = 0; c < C; c++) {
    st(o, dbeta, (size_t)c, (acc ? ld(o, dbeta, (size_t)c) : 0.0) + sums[c]);
    st(o, dgamma, (size_t)c, (acc ? ld(o, dgamma, (size_t)c) : 0.0) + sums[C + c]);
  }
  return 0;
}

void ops_cpu_set_fused(ops_t *o)
{
  o->conv_fused = cpu_conv_fused;
  o->conv_fwd_fused = cpu_conv_fwd_fused;
  o->conv_bwd_data_fused = cpu_conv_bwd_data_fused;
  o->conv_bwd_filter_fused = cpu_conv_bwd_filter_fused;
  o->bn_coef = cpu_bn_coef;
  o->bn_bwd_params = cpu_bn_bwd_params;
}
