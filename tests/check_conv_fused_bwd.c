/* check_conv_fused_bwd.c — the CPU references of the fused convolution's backward kernels
 * (kernels/conv_fused_bwd_cpu.h): dgrad (input gradient, ReLU mask, BatchNorm backward sums)
 * and wgrad (weight gradient in a fixed order) against f64 computations from the definition and
 * against the CPU backend's ops composed the way the trainer calls them, on small cf_shapes with
 * borders everywhere and cin != cout; their bf16 rounding, the wgrad's summation order, the
 * plain convolution (no prologue) and the argument checks. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_fused_bwd_cpu.h"
#include "kernels/ops.h"
#include "tests/conv_fused_testutil.h"
#include "tests/suite_main.h"

static int bf16_bits(float v)
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (u & 0xffffu) == 0;
}

/* v = x * scale + shift > 0, in f64 (exact for this data). */
static int bd_pass(const bd_data_t *b, size_t p, int c)
{
  int ci = b->d.cin;
  return (double)b->d.x[p * ci + c] * b->d.scale[c] + b->d.shift[c] > 0;
}

/* The CPU backend in f32, for the compositions. */
static void bd_ops(ops_t *o)
{
  char why[256];
  ck_assert_msg(ops_cpu_init(o, OPS_F32, why, sizeof why) == 0, "%s", why);
}

/* check(ops, data, shape) for every shape of cf_shapes, on the CPU backend's ops and the data
 * bd_make draws for the shape. */
static void bd_each_shape(void (*check)(const ops_t *, const bd_data_t *, const cf_shape_t *))
{
  ops_t o;
  bd_ops(&o);
  for (size_t i = 0; i < sizeof cf_shapes / sizeof *cf_shapes; i++) {
    bd_data_t b;
    bd_make(&b, &cf_shapes[i]);
    check(&o, &b, &cf_shapes[i]);
    bd_free(&b);
  }
}

/* ---- dgrad ---- */

enum { DG_PLAIN, DG_MASK_SUMS, DG_SUMS_ONLY };
static const char *const dg_mode_name[] = {"plain", "mask and sums", "sums without mask"};

/* The masked input gradient from the definition: go = bf16(Σ dy w) * [v > 0] (f64 sum), mag
 * = Σ |dy w| over the window. */
static void dg_oracle(const bd_data_t *b, int mask, float *go, double *mag, size_t *masked)
{
  const int H = b->d.h, W = b->d.w, ci = b->d.cin, co = b->d.cout;
  *masked = 0;
  for (int img = 0; img < b->d.n; img++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        size_t q = ((size_t)img * H + y) * W + x;
        for (int c = 0; c < ci; c++) {
          double s = 0, m = 0;
          /* output pixel p = q - (ky - 1, kx - 1) read input q through tap (ky, kx) */
          for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
              int py = y - ky + 1, px = x - kx + 1;
              if (py < 0 || py >= H || px < 0 || px >= W) continue;
              const float *d = b->dy + (((size_t)img * H + py) * W + px) * co;
              for (int o = 0; o < co; o++) {
                double t = (double)d[o] * b->d.weight[(((size_t)o * 3 + ky) * 3 + kx) * ci + c];
                s += t;
                m += fabs(t);
              }
            }
          float r = conv_fused_round_bf16((float)s);
          if (mask && !bd_pass(b, q, c)) r = 0, ++*masked;
          go[q * ci + c] = r;
          mag[q * ci + c] = m;
        }
      }
}

static void dg_check(const cf_shape_t *s, int mode)
{
  bd_data_t b;
  bd_make(&b, s);
  const int ci = s->cin;
  const size_t P = b.P, cnt = P * ci;
  float *g = malloc((cnt ? cnt : 1) * sizeof *g), *go = malloc((cnt ? cnt : 1) * sizeof *go);
  double *mag = malloc((cnt ? cnt : 1) * sizeof *mag), *sums = malloc(2 * ci * sizeof *sums);
  size_t masked;
  char err[256];
  int mask = mode == DG_MASK_SUMS, with_sums = mode != DG_PLAIN;
  conv_dgrad_ref_t a = {.n = s->n, .h = s->h, .w = s->w, .cin = ci, .cout = s->cout,
                        .dy = b.dy, .weight = b.d.weight, .x = with_sums || mask ? b.d.x : NULL,
                        .scale = mask ? b.d.scale : NULL, .shift = mask ? b.d.shift : NULL,
                        .saved = with_sums ? b.saved : NULL, .g = g,
                        .sums = with_sums ? sums : NULL};
  ck_assert_msg(conv_dgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  dg_oracle(&b, mask, go, mag, &masked);
  const char *what = dg_mode_name[mode];
  if (mask && cnt >= 64) /* the mask is exercised, and not everywhere */
    ck_assert_msg(masked > cnt / 20 && masked < cnt / 2, "%zu of %zu gradients masked", masked,
                  cnt);
  cf_cmp_t c = cf_compare(g, go, mag, cnt);
  ck_assert_msg(c.nan == 0 && c.bad == 0,
                "dgrad %dx%dx%d %d->%d %s: %zu of %zu gradients off the f64 result (worst %.2f "
                "of its bound at %zu: %g vs %g), %zu NaN", s->n, s->h, s->w, ci, s->cout, what,
                c.bad, cnt, c.worst, c.worst_at, g[c.worst_at], go[c.worst_at], c.nan);
  ck_assert_msg(c.exact * 100 >= cnt * 95, "dgrad %s: only %zu of %zu gradients bit-equal", what,
                c.exact, cnt);
  ck_assert_msg(c.rel_l2 < 2e-3, "dgrad %s: relative L2 error %g", what, c.rel_l2);
  for (size_t i = 0; i < cnt; i++) /* stored as bf16 */
    ck_assert_msg(bf16_bits(g[i]), "dgrad %s: g[%zu] = %a is not a bf16 value", what, i,
                  (double)g[i]);
  if (with_sums)
    for (int ch = 0; ch < ci; ch++) {
      /* against the f64 sums of the oracle's g: bounded by the differences of the g's */
      double s1 = 0, s2 = 0, d1 = 0, d2 = 0, m1 = 0, m2 = 0;
      for (size_t p = 0; p < P; p++) {
        double xh = ((double)b.d.x[p * ci + ch] - b.saved[ch]) * b.saved[ci + ch];
        double want = go[p * ci + ch], diff = fabs((double)g[p * ci + ch] - want);
        s1 += want;
        s2 += want * xh;
        d1 += diff;
        d2 += diff * fabs(xh);
        m1 += fabs(want);
        m2 += fabs(want * xh);
      }
      ck_assert_msg(fabs(sums[ch] - s1) <= d1 + 1e-12 * m1 + 1e-30,
                    "dgrad %s: Σg of channel %d is %.17g, the f64 oracle's %.17g", what, ch,
                    sums[ch], s1);
      ck_assert_msg(fabs(sums[ci + ch] - s2) <= d2 + 1e-12 * m2 + 1e-30,
                    "dgrad %s: Σg·x̂ of channel %d is %.17g, the f64 oracle's %.17g", what, ch,
                    sums[ci + ch], s2);
    }
  free(g);
  free(go);
  free(mag);
  free(sums);
  bd_free(&b);
}

START_TEST(dgrad_matches_f64)
{
  cf_each_shape(dg_check, DG_SUMS_ONLY + 1); /* every mode */
}
END_TEST

/* The trainer's path, op by op: conv_bwd_data, the rounding the GPU's store makes, and the
 * BatchNorm backward's reduction with its ReLU mask recomputed from x, gamma, beta and the saved
 * statistics; the masked gradient through relu_bwd on the forward's bn_apply output. The
 * reference gives the same bits. */
static void dg_ops_check(const ops_t *o, const bd_data_t *b, const cf_shape_t *s)
{
  const int ci = s->cin;
  const size_t cnt = b->P * ci;
  float *g = malloc(cnt * sizeof *g), *da = malloc(cnt * sizeof *da);
  float *y = malloc(cnt * sizeof *y), *dgb = malloc(2 * ci * sizeof *dgb);
  double *sums = malloc(2 * ci * sizeof *sums), *want = malloc(2 * ci * sizeof *want);
  ops_conv_t conv = {.kind = OPS_CONV3X3, .h = s->h, .w = s->w, .cin = ci, .cout = s->cout,
                     .max_n = s->n};
  size_t ws_bytes = 0;
  ck_assert_msg(o->conv_plan(o, &conv, &ws_bytes) == 0, "%s", o->last_error(o));
  void *ws = malloc(ws_bytes ? ws_bytes : 1);
  ck_assert(o->conv_bwd_data(o, &conv, s->n, b->dy, b->d.weight, da, ws) == 0);
  for (size_t k = 0; k < cnt; k++) da[k] = conv_fused_round_bf16(da[k]);
  ops_relu_t relu = {.gamma = b->gamma, .beta = b->beta};
  ck_assert_msg(o->bn_bwd_reduce(o, da, &relu, b->d.x, b->P, ci, b->saved, want, dgb, dgb + ci,
                                0) == 0, "%s", o->last_error(o));
  ck_assert(o->bn_apply(o, b->d.x, b->P, ci, b->saved, b->gamma, b->beta, 1, y) == 0);
  ck_assert(o->relu_bwd(o, da, y, cnt, da) == 0);
  char err[256];
  conv_dgrad_ref_t a = {.n = s->n, .h = s->h, .w = s->w, .cin = ci, .cout = s->cout,
                        .dy = b->dy, .weight = b->d.weight, .x = b->d.x, .scale = b->d.scale,
                        .shift = b->d.shift, .saved = b->saved, .g = g, .sums = sums};
  ck_assert_msg(conv_dgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  for (size_t k = 0; k < cnt; k++)
    ck_assert_msg(g[k] == da[k], "%dx%dx%d %d->%d: g[%zu] = %g, the ops' %g", s->n, s->h,
                  s->w, ci, s->cout, k, g[k], da[k]);
  for (int k = 0; k < 2 * ci; k++)
    ck_assert_msg(sums[k] == want[k], "%dx%dx%d %d->%d: sums[%d] = %.17g, bn_bwd_reduce's "
                  "%.17g", s->n, s->h, s->w, ci, s->cout, k, sums[k], want[k]);
  /* what the trainer takes from them: dbeta = Σg, dgamma = Σg·x̂ */
  for (int k = 0; k < ci; k++)
    ck_assert(dgb[ci + k] == (float)sums[k] && dgb[k] == (float)sums[ci + k]);
  o->conv_plan_free(o, &conv);
  free(ws);
  free(g);
  free(da);
  free(y);
  free(dgb);
  free(sums);
  free(want);
}

START_TEST(dgrad_matches_ops)
{
  bd_each_shape(dg_ops_check);
}
END_TEST

/* The sums are of the stored, rounded g: summed again here from the returned g in pixel order,
 * per term as bn_bwd_reduce forms it, they agree to the bit. */
START_TEST(dgrad_sums_of_stored)
{
  const cf_shape_t s = {.n = 2, .h = 5, .w = 7, .cin = 8, .cout = 16};
  bd_data_t b;
  bd_make(&b, &s);
  const int ci = s.cin;
  float *g = malloc(b.P * ci * sizeof *g);
  double sums[16];
  char err[256];
  conv_dgrad_ref_t a = {.n = s.n, .h = s.h, .w = s.w, .cin = ci, .cout = s.cout, .dy = b.dy,
                        .weight = b.d.weight, .x = b.d.x, .scale = b.d.scale,
                        .shift = b.d.shift, .saved = b.saved, .g = g, .sums = sums};
  ck_assert_msg(conv_dgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  for (int c = 0; c < ci; c++) {
    double s1 = 0, s2 = 0;
    for (size_t p = 0; p < b.P; p++) {
      double v = g[p * ci + c];
      s1 += v;
      s2 += v * (((double)b.d.x[p * ci + c] - b.saved[c]) * b.saved[ci + c]);
    }
    ck_assert_msg(sums[c] == s1 && sums[ci + c] == s2,
                  "channel %d: sums %.17g, %.17g; of the stored g %.17g, %.17g", c, sums[c],
                  sums[ci + c], s1, s2);
  }
  free(g);
  bd_free(&b);
}
END_TEST

/* ---- wgrad ---- */

/* Block sizes for P pixels: one pixel, cut blocks (7, 64), exactly P, more than P. */
static int wg_blocks(size_t P, int k)
{
  static const int fixed[] = {1, 7, 64};
  if (k < 3) return fixed[k];
  return k == 3 ? (int)(P ? P : 1) : (int)P + 5;
}

static void wg_check(const cf_shape_t *s, int with_pro)
{
  bd_data_t b;
  bd_make(&b, s);
  const size_t count = (size_t)9 * s->cin * s->cout;
  double *act = bd_act(&b, with_pro);
  double *dwo = malloc(count * sizeof *dwo), *mag = malloc(count * sizeof *mag);
  float *dw = malloc(count * sizeof *dw);
  wg_oracle(&b, act, dwo, mag);
  const char *what = with_pro ? "with the prologue" : "plain";
  for (int k = 0; k < 5; k++) {
    int bp = wg_blocks(b.P, k);
    char err[256];
    conv_wgrad_ref_t a = {.n = s->n, .h = s->h, .w = s->w, .cin = s->cin, .cout = s->cout,
                          .x = b.d.x, .dy = b.dy, .scale = with_pro ? b.d.scale : NULL,
                          .shift = with_pro ? b.d.shift : NULL, .block_pixels = bp,
                          .dweight = dw};
    ck_assert_msg(conv_wgrad_ref(&a, err, sizeof err) == 0, "%s", err);
    /* at most block_pixels - 1 + blocks - 1 <= P f32 additions into each element */
    double u = ldexp(1.0, -24) * (double)(b.P + 1), num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
      ck_assert_msg(fabs(dw[i] - dwo[i]) <= u * mag[i],
                    "wgrad %dx%dx%d %d->%d %s, blocks of %d: dW[%zu] = %.9g, f64 %.17g (Σ|t| "
                    "%g)", s->n, s->h, s->w, s->cin, s->cout, what, bp, i, dw[i], dwo[i],
                    mag[i]);
      num += (dw[i] - dwo[i]) * (dw[i] - dwo[i]);
      den += dwo[i] * dwo[i];
    }
    ck_assert_msg(num <= 1e-10 * den, "wgrad %s: relative L2 error %g", what,
                  den > 0 ? sqrt(num / den) : sqrt(num));
  }
  free(act);
  free(dwo);
  free(mag);
  free(dw);
  bd_free(&b);
}

START_TEST(wgrad_matches_f64)
{
  cf_each_shape(wg_check, 2); /* plain, then with the prologue */
}
END_TEST

/* The trainer's path: bn_apply with the saved statistics, gamma and beta, the forward's rounding
 * to bf16, conv_bwd_filter. Equal within the stated tolerance, 2 P 2^-24 Σ|dy a|. */
static void wg_ops_check(const ops_t *o, const bd_data_t *b, const cf_shape_t *s)
{
  const size_t count = (size_t)9 * s->cin * s->cout, cnt = b->P * s->cin;
  float *act = malloc(cnt * sizeof *act), *dw = malloc(count * sizeof *dw);
  float *dwop = malloc(count * sizeof *dwop);
  double *a64 = bd_act(b, 1), *dwo = malloc(count * sizeof *dwo);
  double *mag = malloc(count * sizeof *mag);
  ck_assert(o->bn_apply(o, b->d.x, b->P, s->cin, b->saved, b->gamma, b->beta, 1, act) == 0);
  for (size_t k = 0; k < cnt; k++) act[k] = conv_fused_round_bf16(act[k]);
  ops_conv_t conv = {.kind = OPS_CONV3X3, .h = s->h, .w = s->w, .cin = s->cin,
                     .cout = s->cout, .max_n = s->n};
  size_t ws_bytes = 0;
  ck_assert_msg(o->conv_plan(o, &conv, &ws_bytes) == 0, "%s", o->last_error(o));
  void *ws = malloc(ws_bytes ? ws_bytes : 1);
  ck_assert(o->conv_bwd_filter(o, &conv, s->n, act, b->dy, dwop, NULL, 0, ws) == 0);
  wg_oracle(b, a64, dwo, mag);
  char err[256];
  conv_wgrad_ref_t a = {.n = s->n, .h = s->h, .w = s->w, .cin = s->cin, .cout = s->cout,
                        .x = b->d.x, .dy = b->dy, .scale = b->d.scale, .shift = b->d.shift,
                        .block_pixels = 7, .dweight = dw};
  ck_assert_msg(conv_wgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  double tol = 2.0 * (double)b->P * ldexp(1.0, -24);
  size_t exact = 0;
  for (size_t k = 0; k < count; k++) {
    ck_assert_msg(fabs((double)dw[k] - dwop[k]) <= tol * mag[k],
                  "%dx%dx%d %d->%d: dW[%zu] = %.9g, conv_bwd_filter's %.9g (Σ|t| %g)", s->n,
                  s->h, s->w, s->cin, s->cout, k, dw[k], dwop[k], mag[k]);
    exact += dw[k] == dwop[k];
  }
  ck_assert_msg(exact > 0, "no element equal to conv_bwd_filter's");
  o->conv_plan_free(o, &conv);
  free(ws);
  free(act);
  free(dw);
  free(dwop);
  free(a64);
  free(dwo);
  free(mag);
}

START_TEST(wgrad_matches_ops)
{
  bd_each_shape(wg_ops_check);
}
END_TEST

/* The documented order, rewritten element by element: each partial sums its pixels in
 * increasing order from +0 in f32, the result is the partials summed left to right, with or
 * without the partials kept; conv_wgrad_ref_reduce of the partials is that result. All to the
 * bit. Summed in the reverse block order the result differs (so the comparisons see the order). */
START_TEST(wgrad_fixed_order)
{
  const cf_shape_t s = {.n = 2, .h = 5, .w = 7, .cin = 8, .cout = 16};
  const int bp = 4; /* 70 pixels: 18 blocks, the last of 2 */
  bd_data_t b;
  bd_make(&b, &s);
  const int H = s.h, W = s.w, ci = s.cin, co = s.cout;
  const size_t count = (size_t)9 * ci * co, nb = conv_wgrad_ref_blocks(b.P, bp);
  ck_assert_uint_eq(nb, 18);
  float *part = malloc(nb * count * sizeof *part), *dw = malloc(count * sizeof *dw);
  float *dw2 = malloc(count * sizeof *dw2), *dw3 = malloc(count * sizeof *dw3);
  double *act = bd_act(&b, 1);
  char err[256];
  conv_wgrad_ref_t a = {.n = s.n, .h = H, .w = W, .cin = ci, .cout = co, .x = b.d.x,
                        .dy = b.dy, .scale = b.d.scale, .shift = b.d.shift, .block_pixels = bp,
                        .dweight = dw, .partials = part};
  ck_assert_msg(conv_wgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  for (size_t blk = 0; blk < nb; blk++)
    for (int o = 0; o < co; o++)
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++)
          for (int c = 0; c < ci; c++) {
            float acc = 0.0f;
            for (size_t p = blk * bp; p < (blk + 1) * bp && p < b.P; p++) {
              size_t img = p / ((size_t)H * W);
              int sy = (int)(p / W % H) + ky - 1, sx = (int)(p % W) + kx - 1;
              if (sy < 0 || sy >= H || sx < 0 || sx >= W) continue;
              acc += b.dy[p * co + o] * (float)act[((img * H + sy) * W + sx) * ci + c];
            }
            size_t i = (((size_t)o * 3 + ky) * 3 + kx) * ci + c;
            ck_assert_msg(memcmp(&acc, &part[blk * count + i], sizeof acc) == 0,
                          "block %zu, element %zu: %a, the pixel-order sum %a", blk, i,
                          (double)part[blk * count + i], (double)acc);
          }
  size_t differ = 0;
  for (size_t i = 0; i < count; i++) {
    float fwd = part[i], rev = part[(nb - 1) * count + i];
    for (size_t blk = 1; blk < nb; blk++) fwd += part[blk * count + i];
    for (size_t blk = nb - 1; blk-- > 0;) rev += part[blk * count + i];
    ck_assert_msg(memcmp(&fwd, &dw[i], sizeof fwd) == 0, "element %zu: %a, in block order %a",
                  i, (double)dw[i], (double)fwd);
    differ += rev != fwd;
  }
  ck_assert_msg(differ > 0, "the reverse block order gave the same bits everywhere");
  conv_wgrad_ref_reduce(part, nb, count, dw2);
  ck_assert(memcmp(dw, dw2, count * sizeof *dw) == 0);
  a.partials = NULL;
  a.dweight = dw3;
  ck_assert_msg(conv_wgrad_ref(&a, err, sizeof err) == 0, "%s", err);
  ck_assert(memcmp(dw, dw3, count * sizeof *dw) == 0);
  free(part);
  free(dw);
  free(dw2);
  free(dw3);
  free(act);
  bd_free(&b);
}
END_TEST

/* No pixels: one partial of zeros, dW zero; dgrad writes nothing and sums zeros. */
START_TEST(empty_batch)
{
  float w[9 * 2 * 3], dw[9 * 2 * 3], part[9 * 2 * 3], s[2] = {1, 1}, t[2] = {0, 0};
  double saved[5] = {0, 0, 1, 1, 0}, sums[4] = {1, 1, 1, 1};
  float x[1] = {0}, dy[1] = {0}, g[1] = {42};
  for (int i = 0; i < 54; i++) w[i] = 1, dw[i] = 7, part[i] = 7;
  char err[256];
  ck_assert_uint_eq(conv_wgrad_ref_blocks(0, 16), 1);
  conv_wgrad_ref_t wa = {.n = 0, .h = 3, .w = 3, .cin = 2, .cout = 3, .x = x, .dy = dy,
                         .scale = s, .shift = t, .block_pixels = 16, .dweight = dw,
                         .partials = part};
  ck_assert_msg(conv_wgrad_ref(&wa, err, sizeof err) == 0, "%s", err);
  for (int i = 0; i < 54; i++) ck_assert(dw[i] == 0 && part[i] == 0);
  conv_dgrad_ref_t da = {.n = 0, .h = 3, .w = 3, .cin = 2, .cout = 3, .dy = dy, .weight = w,
                         .x = x, .scale = s, .shift = t, .saved = saved, .g = g, .sums = sums};
  ck_assert_msg(conv_dgrad_ref(&da, err, sizeof err) == 0, "%s", err);
  ck_assert(g[0] == 42);
  for (int i = 0; i < 4; i++) ck_assert(sums[i] == 0);
}
END_TEST

/* Case i of a pass: refused with a message naming the pass and word, or (word NULL) done. */
static void expect_case(int rc, const char *err, const char *pass, const char *word, size_t i)
{
  if (!word) {
    ck_assert_msg(rc == 0, "%s case %zu: %s", pass, i, err);
    return;
  }
  ck_assert_msg(rc == -1, "%s case %zu: returned %d, not -1", pass, i, rc);
  ck_assert_msg(strstr(err, pass) && strstr(err, word), "%s case %zu: '%s' lacks '%s'", pass, i,
                err, word);
}

START_TEST(bad_arguments)
{
  float x[64] = {1}, w[9 * 64] = {1}, dy[64] = {1}, g[64], s[8] = {1};
  double saved[17] = {0}, sums[16];
  char err[256] = "";
  /* Each call lacks one thing, or pairs one wrongly; the last of each table is whole. */
  const struct {
    conv_dgrad_ref_t a;
    const char *word;
  } dg[] = {
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 0, .dy = dy, .weight = w, .g = g}, "shape"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .weight = w}, "required"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .weight = w, .g = g, .x = x,
        .scale = s},
       "scale and shift"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .weight = w, .g = g, .x = x,
        .sums = sums},
       "saved"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .weight = w, .g = g,
        .sums = sums, .saved = saved},
       "need x"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .weight = w, .g = g, .x = x,
        .sums = sums, .saved = saved},
       NULL},
  };
  for (size_t i = 0; i < sizeof dg / sizeof *dg; i++)
    expect_case(conv_dgrad_ref(&dg[i].a, err, sizeof err), err, "dgrad", dg[i].word, i);
  const struct {
    conv_wgrad_ref_t a;
    const char *word;
  } wg[] = {
      {{.n = -1, .h = 2, .w = 2, .cin = 4, .cout = 4, .x = x, .dy = dy, .block_pixels = 4,
        .dweight = w},
       "shape"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .dy = dy, .block_pixels = 4, .dweight = w},
       "required"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .x = x, .dy = dy, .shift = s,
        .block_pixels = 4, .dweight = w},
       "scale and shift"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .x = x, .dy = dy, .dweight = w},
       "block_pixels"},
      {{.n = 1, .h = 2, .w = 2, .cin = 4, .cout = 4, .x = x, .dy = dy, .block_pixels = 3,
        .dweight = w},
       NULL},
  };
  for (size_t i = 0; i < sizeof wg / sizeof *wg; i++)
    expect_case(conv_wgrad_ref(&wg[i].a, err, sizeof err), err, "wgrad", wg[i].word, i);
}
END_TEST

static Suite *make_conv_fused_bwd_suite(const suite_env_t *env)
{
  Suite *s = suite_create("conv_fused_bwd");
  SUITE_CASE(s, "dgrad", dgrad_matches_f64, dgrad_matches_ops, dgrad_sums_of_stored);
  SUITE_CASE(s, "wgrad", wgrad_matches_f64, wgrad_matches_ops, wgrad_fixed_order);
  SUITE_CASE(s, "arguments", empty_batch, bad_arguments);
  return s;
}

SUITE_MAIN("check_conv_fused_bwd", make_conv_fused_bwd_suite, SUITE_CPU_ONLY)
