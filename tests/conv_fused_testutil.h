/* conv_fused_testutil.h — what the fused-convolution tests share (check_conv_fused on the CPU,
 * check_conv_sm90_cuda on the GPU): test data whose BatchNorm prologue is exact in f32, an f64
 * oracle of the fused operation, the comparison of two outputs, and the backward's data (dy, the
 * previous layer's saved statistics).
 *
 * The data: x = m / 128 (|m| <= 255: a bf16 value), scale = k / 16 (8 <= k <= 24), shift =
 * s / 64 (-32 <= s <= 48). Then x * scale + shift is a multiple of 2^-11 below 2^3 in
 * magnitude, exact in f32 with or without a fused multiply-add, so every implementation rounds
 * the same value to bf16 (ties included) and the activations agree bit for bit; what is left to
 * differ is the convolution's sum, and only by its last bits. Positive shifts make padding
 * that went through the BN (max(0, shift) instead of 0) show at the borders. */
#ifndef TESTS_CONV_FUSED_TESTUTIL_H
#define TESTS_CONV_FUSED_TESTUTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fused_cpu.h"

static unsigned long long cf_lcg = 0x2545f4914f6cdd1dull;
static inline int cf_int(int lo, int hi) /* uniform in [lo, hi] */
{
  cf_lcg = cf_lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (int)((cf_lcg >> 33) % (unsigned long long)(hi - lo + 1));
}

/* The shapes the CPU suites check: odd sizes, single rows and columns, one pixel, cin < cout and
 * cin > cout, the U-Net's 64 channels. */
typedef struct {
  int n, h, w, cin, cout;
} cf_shape_t;
static const cf_shape_t cf_shapes[] = {
    {.n = 2, .h = 5, .w = 7, .cin = 8, .cout = 16},  {.n = 1, .h = 9, .w = 4, .cin = 64, .cout = 64},
    {.n = 3, .h = 3, .w = 3, .cin = 3, .cout = 5},   {.n = 1, .h = 1, .w = 1, .cin = 4, .cout = 4},
    {.n = 2, .h = 1, .w = 11, .cin = 16, .cout = 8}, {.n = 1, .h = 6, .w = 66, .cin = 64, .cout = 64},
};

/* check(shape, v) for every shape of cf_shapes and every variant v in [0, variants). */
static inline void cf_each_shape(void (*check)(const cf_shape_t *, int), int variants)
{
  for (size_t i = 0; i < sizeof cf_shapes / sizeof *cf_shapes; i++)
    for (int v = 0; v < variants; v++) check(&cf_shapes[i], v);
}

typedef struct {
  int n, h, w, cin, cout;
  float *x, *weight, *scale, *shift;
} cf_data_t;

static inline void cf_make(cf_data_t *d, int n, int h, int w, int cin, int cout)
{
  size_t P = (size_t)n * h * w, K = (size_t)9 * cin;
  *d = (cf_data_t){.n = n, .h = h, .w = w, .cin = cin, .cout = cout};
  d->x = malloc((P ? P : 1) * cin * sizeof(float));
  d->weight = malloc(K * cout * sizeof(float));
  d->scale = malloc(cin * sizeof(float));
  d->shift = malloc(cin * sizeof(float));
  for (size_t i = 0; i < P * cin; i++) d->x[i] = (float)cf_int(-255, 255) / 128.f;
  /* weights ~ U(-1, 1) / sqrt(K), rounded to bf16: outputs of order 1 */
  double ws = 1.0 / sqrt((double)K);
  for (size_t i = 0; i < K * cout; i++)
    d->weight[i] = conv_fused_round_bf16((float)(ws * cf_int(-4096, 4096) / 4096.0));
  for (int c = 0; c < cin; c++) {
    d->scale[c] = (float)cf_int(8, 24) / 16.f;
    d->shift[c] = (float)cf_int(-32, 48) / 64.f;
  }
}

static inline void cf_free(cf_data_t *d)
{
  free(d->x);
  free(d->weight);
  free(d->scale);
  free(d->shift);
}

/* The fused operation in f64 from the definition (direct loops, no im2col): yo rounded to bf16
 * at the end, mag[p][co] = Σ |a w| over the window (the scale of the sum's rounding error),
 * stats in f64 of yo; *clamped = activations the ReLU set to 0 (with_pro). */
static inline void cf_oracle(const cf_data_t *d, int with_pro, float *yo, double *mag,
                             double *stats, size_t *clamped)
{
  const int H = d->h, W = d->w, ci = d->cin, co = d->cout;
  size_t P = (size_t)d->n * H * W;
  double *a = malloc((P ? P : 1) * ci * sizeof *a);
  *clamped = 0;
  for (size_t p = 0; p < P; p++)
    for (int c = 0; c < ci; c++) {
      double v = d->x[p * ci + c];
      if (with_pro) {
        v = v * d->scale[c] + d->shift[c];
        if (!(v > 0)) v = 0, ++*clamped;
        v = conv_fused_round_bf16((float)v); /* exact in f32 (see above) */
      }
      a[p * ci + c] = v;
    }
  for (int k = 0; k < 2 * co; k++) stats[k] = 0;
  for (int img = 0; img < d->n; img++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        size_t p = ((size_t)img * H + y) * W + x;
        for (int o = 0; o < co; o++) {
          double s = 0, m = 0;
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              int sy = y + ky - 1, sx = x + kx - 1;
              if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
              const double *av = a + (((size_t)img * H + sy) * W + sx) * ci;
              const float *wv = d->weight + (((size_t)o * 3 + ky) * 3 + kx) * ci;
              for (int c = 0; c < ci; c++) {
                s += av[c] * wv[c];
                m += fabs(av[c] * wv[c]);
              }
            }
          float r = conv_fused_round_bf16((float)s);
          yo[p * co + o] = r;
          mag[p * co + o] = m;
          stats[o] += r;
          stats[co + o] += (double)r * r;
        }
      }
  stats[2 * co] = (double)P;
  free(a);
}

typedef struct {
  size_t count, exact, bad, nan; /* elements; bit-equal; beyond the bound; NaN in got */
  double rel_l2, worst;          /* ‖got - want‖ / ‖want‖; largest |diff| / bound */
  size_t worst_at;
} cf_cmp_t;

/* got against want, element by element: |got - want| <= 2^-7 max(|got|, |want|) (one bf16
 * rounding that fell the other way) + 2^-20 mag (the f32 sum's rounding). */
static inline cf_cmp_t cf_compare(const float *got, const float *want, const double *mag,
                                  size_t count)
{
  cf_cmp_t r = {.count = count};
  double num = 0, den = 0;
  for (size_t i = 0; i < count; i++) {
    double g = got[i], w = want[i], diff = fabs(g - w);
    if (isnan(got[i])) {
      r.nan++;
      continue;
    }
    r.exact += got[i] == want[i];
    num += diff * diff;
    den += w * w;
    double bound = ldexp(fmax(fabs(g), fabs(w)), -7) + ldexp(mag[i], -20);
    if (diff > bound) r.bad++;
    if (bound > 0 && diff / bound > r.worst) r.worst = diff / bound, r.worst_at = i;
  }
  r.rel_l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  return r;
}

/* Bounds for statistics computed from two outputs that differ by those differences:
 * |Σgot - Σwant| <= Σ|got - want|, |Σgot² - Σwant²| <= Σ|got - want| (|got| + |want|), plus a
 * relative slack (summation order) of tol times the sums of magnitudes. Returns how many of the
 * 2C sums break their bound. */
static inline int cf_stats_bad(const double *sg, const double *sw, const float *got,
                               const float *want, size_t P, int C, double tol)
{
  int bad = 0;
  for (int c = 0; c < C; c++) {
    double d1 = 0, d2 = 0, m1 = 0, m2 = 0;
    for (size_t p = 0; p < P; p++) {
      double g = got[p * C + c], w = want[p * C + c];
      d1 += fabs(g - w);
      d2 += fabs(g - w) * (fabs(g) + fabs(w));
      m1 += fabs(w);
      m2 += w * w;
    }
    bad += fabs(sg[c] - sw[c]) > d1 + tol * m1 + 1e-30;
    bad += fabs(sg[C + c] - sw[C + c]) > d2 + tol * m2 + 1e-30;
  }
  return bad;
}

/* The forward's data (cf_make) and what the backward adds: dy bf16 values of exponents 2^-9 to
 * 2^0, so that the f32 sums of its products round (on a coarser grid they would be exact, in
 * any order, and an order could not be told from another); the
 * previous layer's saved statistics and gamma, beta chosen so that bn_apply's affine
 * (f32(gamma * invstd), f32(beta - mean * gamma * invstd)) is exactly scale, shift: mean =
 * k / 64, invstd a power of 2, gamma = scale / invstd, beta = shift + mean * scale (all exact). */
typedef struct {
  cf_data_t d;
  size_t P;
  float *dy, *gamma, *beta;
  double *saved; /* [2 cin + 1] */
} bd_data_t;

static inline void bd_make(bd_data_t *b, const cf_shape_t *s)
{
  cf_make(&b->d, s->n, s->h, s->w, s->cin, s->cout);
  b->P = (size_t)s->n * s->h * s->w;
  b->dy = malloc((b->P ? b->P : 1) * s->cout * sizeof *b->dy);
  b->gamma = malloc(s->cin * sizeof *b->gamma);
  b->beta = malloc(s->cin * sizeof *b->beta);
  b->saved = malloc((2 * (size_t)s->cin + 1) * sizeof *b->saved);
  for (size_t i = 0; i < b->P * s->cout; i++)
    b->dy[i] = conv_fused_round_bf16(ldexp(cf_int(-4096, 4096) / 4096.0, -cf_int(0, 8)));
  for (int c = 0; c < s->cin; c++) {
    double mean = cf_int(-32, 32) / 64.0, invstd = ldexp(1.0, cf_int(-1, 1));
    b->saved[c] = mean;
    b->saved[s->cin + c] = invstd;
    b->gamma[c] = (float)(b->d.scale[c] / invstd);
    b->beta[c] = (float)(b->d.shift[c] + mean * b->d.scale[c]);
  }
  b->saved[2 * s->cin] = (double)b->P;
}

static inline void bd_free(bd_data_t *b)
{
  cf_free(&b->d);
  free(b->dy);
  free(b->gamma);
  free(b->beta);
  free(b->saved);
}


/* The activations the forward convolved, in f64: bf16(max(0, v)), or x. */
static inline double *bd_act(const bd_data_t *b, int with_pro)
{
  int ci = b->d.cin;
  double *a = malloc((b->P ? b->P : 1) * ci * sizeof *a);
  for (size_t p = 0; p < b->P; p++)
    for (int c = 0; c < ci; c++) {
      double v = b->d.x[p * ci + c];
      if (with_pro) {
        v = v * b->d.scale[c] + b->d.shift[c];
        v = conv_fused_round_bf16((float)(v > 0 ? v : 0));
      }
      a[p * ci + c] = v;
    }
  return a;
}

/* Pixel p's terms of dW's definition, in f64, added to dwo, and their magnitudes |dy a| to mag. */
static inline void wg_oracle_pixel(const bd_data_t *b, const double *act, size_t p, double *dwo,
                                   double *mag)
{
  const int H = b->d.h, W = b->d.w, ci = b->d.cin, co = b->d.cout;
  size_t img = p / ((size_t)H * W);
  int y = (int)(p / W % H), x = (int)(p % W);
  for (int o = 0; o < co; o++)
    for (int ky = 0; ky < 3; ky++)
      for (int kx = 0; kx < 3; kx++) {
        int sy = y + ky - 1, sx = x + kx - 1;
        if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
        const double *av = act + ((img * H + sy) * W + sx) * ci;
        size_t at = (((size_t)o * 3 + ky) * 3 + kx) * ci;
        for (int c = 0; c < ci; c++) {
          double t = (double)b->dy[p * co + o] * av[c];
          dwo[at + c] += t;
          mag[at + c] += fabs(t);
        }
      }
}

/* dW from the definition in f64, and S = Σ |dy a| per element (the scale of the f32 sums'
 * rounding). */
static inline void wg_oracle(const bd_data_t *b, const double *act, double *dwo, double *mag)
{
  size_t count = (size_t)9 * b->d.cin * b->d.cout;
  memset(dwo, 0, count * sizeof *dwo);
  memset(mag, 0, count * sizeof *mag);
  for (size_t p = 0; p < b->P; p++) wg_oracle_pixel(b, act, p, dwo, mag);
}

#endif
