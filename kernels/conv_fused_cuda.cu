/* conv_fused_cuda.cu — the CUDA backend's fused 3x3 convolutions (ops.h conv_fwd_fused and its
 * neighbours): Hopper's own kernels (kernels/conv_sm90.h) where the build has them (sm_90a), the
 * device is a 9.0 one and the table computes in bf16; nowhere else (conv_fused says 0 and the
 * model runs the plain ops), for the layers kernels/conv_fused_rank.h ranks: cin and cout
 * multiples of 64 up to 1024, every fused op, ranked 2 on the shapes measured faster than cuDNN
 * with the separate BatchNorm passes, 1 elsewhere; and the input layer (cin 1 to 3) as a first
 * block, its forward with the statistics on the few-channel kernel (conv_rgb_cuda.cu). Also the
 * two small per-channel steps around them: the prologue's coefficients from a BatchNorm's
 * statistics, and its parameter gradients from the input gradient's sums. */
#include "config.h"

#include <stdio.h>

#include "kernels/ops_cuda.cuh"
#include "kernels/conv_fused_rank.h"
#ifdef HAVE_CONV_SM90
#include "kernels/conv_sm90.h"
#endif

/* ---- the per-channel steps (any dtype) ---- */

template <typename T>
__global__ void bn_coef_kernel(const double *saved, const T *gamma, const T *beta, int C,
                               float *coef)
{
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double scale = (double)opc_ld(gamma[c]) * saved[C + c];
  coef[c] = (float)scale;
  coef[C + c] = (float)((double)opc_ld(beta[c]) - saved[c] * scale);
}

template <typename T>
static int bn_coef_t(const ops_t *o, const double *saved, const void *gamma, const void *beta,
                     int C, float *coef)
{
  if (C <= 0) return 0;
  bn_coef_kernel<T><<<(C + 255) / 256, 256, 0, opc_ctx(o)->stream>>>(
      saved, (const T *)gamma, (const T *)beta, C, coef);
  OPC_LAUNCHED(o, "the BatchNorm prologue's coefficients");
  return 0;
}

static int opc_bn_coef(const ops_t *o, const double *saved, const void *gamma, const void *beta,
                       int C, float *coef)
{
  OPC_DISPATCH(o, bn_coef_t, o, saved, gamma, beta, C, coef);
}

template <typename T>
__global__ void bn_params_kernel(const double *sums, int C, T *dgamma, T *dbeta, int acc)
{
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  dbeta[c] = opc_st<T>((float)((acc ? (double)opc_ld(dbeta[c]) : 0.0) + sums[c]));
  dgamma[c] = opc_st<T>((float)((acc ? (double)opc_ld(dgamma[c]) : 0.0) + sums[C + c]));
}

template <typename T>
static int bn_params_t(const ops_t *o, const double *sums, int C, void *dgamma, void *dbeta,
                       int acc)
{
  if (C <= 0) return 0;
  bn_params_kernel<T><<<(C + 255) / 256, 256, 0, opc_ctx(o)->stream>>>(sums, C, (T *)dgamma,
                                                                      (T *)dbeta, acc);
  OPC_LAUNCHED(o, "the BatchNorm parameter gradients");
  return 0;
}

static int opc_bn_bwd_params(const ops_t *o, const double *sums, int C, void *dgamma,
                             void *dbeta, int acc)
{
  OPC_DISPATCH(o, bn_params_t, o, sums, C, dgamma, dbeta, acc);
}

/* ---- the convolutions ---- */

#ifdef HAVE_CONV_SM90
/* The f32 weight gradient the wgrad kernel writes, placed after its partials in ws: after the
 * most any batch the layer was planned for needs (fewer images may make more blocks). */
static size_t dw_offset(int device, const ops_conv_t *c)
{
  size_t part = 0;
  for (int n = 1; n <= c->max_n; n++) {
    size_t b = conv_sm90_wgrad_ws_bytes_shape(device, n, c->h, c->w, c->cin, c->cout);
    if (b > part) part = b;
  }
  return (part + 255) / 256 * 256;
}

/* 1 when the sm_90 kernels load on the table's device (asked once per table). */
static int sm90_usable(const ops_t *o)
{
  opc_ctx_t *x = opc_ctx(o);
  if (x->sm90 == 0) {
    char why[256];
    x->sm90 = conv_sm90_check(x->device, why, sizeof why) == 0 &&
                      conv_sm90_wgrad_check(x->device, why, sizeof why) == 0
                  ? 1
                  : -1;
  }
  return x->sm90 > 0;
}

/* The input layer's forward with its statistics: the few-channel kernel (conv_rgb_cuda.cu), not
 * the Hopper ones. */
static int rgb_layer(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use)
{
  return use == OPS_FUSE_STATS && c->cin < 64 && opc_rgb_stats_covered(o, c);
}

/* The rank of the kernels for a layer and a use (ops.h conv_fused): the measured table of
 * kernels/conv_fused_rank.h where this device and table can run them, else 0. */
static int rank_of(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use)
{
  if (o->dtype != OPS_BF16 || c->kind != OPS_CONV3X3 || c->max_n < 1) return 0;
  const int rank = conv_fused_rank(use, c->cin, c->cout, c->h, c->w);
  if (!rank || !sm90_usable(o)) return 0;
  if (c->cin < 64 && !rgb_layer(o, c, use)) return 0;
  return rank;
}

/* The forward alone (OPS_FUSE_STATS) and the plain input gradient (OPS_FUSE_DGRAD: its flipped
 * weights) need only the kernels' own workspace, the pair's ops also the weight gradient's
 * partials and f32 result. */
static int opc_conv_fused(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use,
                          size_t *ws_bytes)
{
  *ws_bytes = 0;
  const int rank = rank_of(o, c, use);
  if (!rank) return 0;
  if (rgb_layer(o, c, use)) {
    *ws_bytes = opc_rgb_stats_ws(o, c);
    return rank;
  }
  const int dev = opc_ctx(o)->device;
  size_t f = conv_sm90_ws_bytes_shape(dev, c->cin, c->cout);
  size_t w = use == OPS_FUSE_PAIR
                 ? dw_offset(dev, c) + (size_t)9 * c->cin * c->cout * sizeof(float)
                 : 0;
  *ws_bytes = w > f ? w : f;
  return rank;
}

/* An op of the use refused where the layer has no kernels for it. */
static int not_covered(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use, int n)
{
  if (!rank_of(o, c, use))
    return opc_fail(o, "no fused %s on this device for a %s %d -> %d layer",
                    use == OPS_FUSE_PAIR    ? "input or weight gradient"
                    : use == OPS_FUSE_DGRAD ? "plain input gradient"
                                            : "convolution",
                    opc_dtype_name(o->dtype), c->cin, c->cout);
  if (n < 0 || n > c->max_n)
    return opc_fail(o, "a fused convolution of %d images: the layer was planned for 0 to %d", n,
                    c->max_n);
  return 0;
}

static int opc_conv_fwd_fused(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                              const float *coef, const void *w, void *y, double *stats, void *ws)
{
  /* with a prologue only as the pair's second convolution */
  if (not_covered(o, c, coef ? OPS_FUSE_PAIR : OPS_FUSE_STATS, n)) return -1;
  if (!coef && rgb_layer(o, c, OPS_FUSE_STATS))
    return opc_rgb_fwd_stats(o, c, n, x, w, y, stats, ws);
  conv_sm90_fwd_t a = {.n = n, .h = c->h, .w = c->w, .cin = c->cin, .cout = c->cout, .x = x,
                       .weight = w, .scale = coef, .shift = coef ? coef + c->cin : NULL, .y = y,
                       .stats = stats, .ws = ws, .stream = opc_ctx(o)->stream};
  opc_ctx_t *cx = opc_ctx(o);
  return conv_sm90_fwd(&a, cx->err, sizeof cx->err);
}

/* The plain input gradients of 64 -> 64 and 128 -> 64 (dy 64 channels, dx 64 or 128: the
 * latter in output-channel halves) on the COUT_M kernel (conv_sm90.h): 44.7 and 85.5 us against
 * 55.7 and 95.4 on the default kernels at the reference U-Net's 256 x 256
 * (bench/results/conv_sm90_1xh100.txt); every other shape and use on the default. */
static int dgrad_layout(const ops_conv_t *c, int plain)
{
  return plain && (c->cin == CONV_SM90_CIN || c->cin == 2 * CONV_SM90_CIN) &&
                 c->cout == CONV_SM90_COUT
             ? CONV_SM90_LAYOUT_COUT_M
             : 0;
}

static int opc_conv_bwd_data_fused(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                                   const void *w, const void *x, const float *coef,
                                   const double *saved, void *dx, double *sums, void *ws)
{
  const int plain = !coef && !sums;
  if (not_covered(o, c, plain ? OPS_FUSE_DGRAD : OPS_FUSE_PAIR, n)) return -1;
  conv_sm90_dgrad_t a = {.n = n, .h = c->h, .w = c->w, .cin = c->cin, .cout = c->cout, .dy = dy,
                         .weight = w, .x = x, .scale = coef,
                         .shift = coef ? coef + c->cin : NULL, .saved = saved, .g = dx,
                         .sums = sums, .ws = ws, .stream = opc_ctx(o)->stream,
                         .layout = dgrad_layout(c, plain)};
  opc_ctx_t *cx = opc_ctx(o);
  return conv_sm90_dgrad(&a, cx->err, sizeof cx->err);
}

__global__ void dw_store_kernel(const float *src, size_t count, __nv_bfloat16 *dst, int acc)
{
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  dst[i] = __float2bfloat16_rn(acc ? opc_ld(dst[i]) + src[i] : src[i]);
}

static int opc_conv_bwd_filter_fused(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                     const float *coef, const void *dy, void *dw, int acc,
                                     void *ws)
{
  if (not_covered(o, c, OPS_FUSE_PAIR, n)) return -1;
  opc_ctx_t *cx = opc_ctx(o);
  float *dw32 = (float *)((char *)ws + dw_offset(cx->device, c));
  conv_sm90_wgrad_t a = {.n = n, .h = c->h, .w = c->w, .cin = c->cin, .cout = c->cout, .x = x,
                         .dy = dy, .scale = coef, .shift = coef ? coef + c->cin : NULL,
                         .dweight = dw32, .ws = ws, .stream = cx->stream};
  if (conv_sm90_wgrad(&a, cx->err, sizeof cx->err)) return -1;
  const size_t count = (size_t)9 * c->cin * c->cout;
  dw_store_kernel<<<(unsigned)((count + 255) / 256), 256, 0, cx->stream>>>(
      dw32, count, (__nv_bfloat16 *)dw, acc);
  OPC_LAUNCHED(o, "the fused weight gradient's store");
  return 0;
}
#endif

void opc_set_fused(ops_t *o)
{
  o->bn_coef = opc_bn_coef;
  o->bn_bwd_params = opc_bn_bwd_params;
#ifdef HAVE_CONV_SM90
  o->conv_fused = opc_conv_fused;
  o->conv_fwd_fused = opc_conv_fwd_fused;
  o->conv_bwd_data_fused = opc_conv_bwd_data_fused;
  o->conv_bwd_filter_fused = opc_conv_bwd_filter_fused;
#endif
}
