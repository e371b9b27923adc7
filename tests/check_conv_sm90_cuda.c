/* check_conv_sm90_cuda.c — the fused convolutions on Hopper (kernels/conv_sm90.h), forward,
 * dgrad and wgrad, against their CPU references (kernels/conv_fused_cpu.h,
 * kernels/conv_fused_bwd_cpu.h) and f64 on random data: outputs poisoned with NaN first (every
 * element must be written), odd shapes that cut tiles at the image's edges, the U-Net's
 * 6 x 256 x 256 (many tiles per block, the statistics folded), with and without the prologue
 * (forward) or mask (dgrad) and the statistics or sums; two runs bit for bit; argument checks.
 * The wider layers (cin, cout multiples of 64 up to 1024) the same way: the forward with and
 * without prologue and statistics, dgrad with and without mask and sums, wgrad with and without
 * the prologue (each K split's partial against its f64 sum, dW its partials added in order bit
 * for bit, the split-K plan's rule; images 16 and 32 pixels wide in tiles of whole rows). Case
 * sm90_cm: the 64 -> 64 forward and dgrad in their other GEMM layout (CONV_SM90_LAYOUT_COUT_M).
 * Case sm90_halves: 64 -> 128 in that layout, in output-channel halves (the forward, and the
 * plain dgrad of 128 -> 64).
 * Case sanitize: small shapes through every kernel, for compute-sanitizer. Registered only
 * where an sm_90 GPU is visible and the kernels load (a forked probe, so the suite's own
 * process never initialises CUDA); otherwise the suite exits 77 (SKIP). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/conv_fused_bwd_cpu.h"
#include "kernels/conv_fused_cpu.h"
#include "kernels/conv_sm90.h"
#include "kernels/conv_sm90_tile.h"
#include "tests/conv_fused_testutil.h"
#include "tests/suite_main.h"

#define CU_OK(call)                                                                            \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                  \
  } while (0)

/* bf16 bits of a value that is already a bf16 (the test data and the reference's outputs). */
static uint16_t bits_of(float v)
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (uint16_t)(u >> 16);
}

static float value_of(uint16_t b)
{
  uint32_t u = (uint32_t)b << 16;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static void *up_bf16(const float *v, size_t n)
{
  uint16_t *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = bits_of(v[i]);
  void *d = NULL;
  CU_OK(cudaMalloc(&d, n * sizeof *h));
  CU_OK(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static void *up_f32(const float *v, size_t n)
{
  void *d = NULL;
  CU_OK(cudaMalloc(&d, n * sizeof *v));
  CU_OK(cudaMemcpy(d, v, n * sizeof *v, cudaMemcpyHostToDevice));
  return d;
}

static void *up_f64(const double *v, size_t n)
{
  void *d = NULL;
  CU_OK(cudaMalloc(&d, n * sizeof *v));
  CU_OK(cudaMemcpy(d, v, n * sizeof *v, cudaMemcpyHostToDevice));
  return d;
}

/* The 64 -> 64 kernel's GEMM layout the cases below run (conv_sm90.h CONV_SM90_LAYOUT_*; 0:
 * the default); the cm_ cases set it in their own process (each case runs forked). */
static int g_layout = 0;

typedef struct {
  float *y;        /* outputs as f32 */
  uint16_t *raw;   /* and as the bits written */
  double stats[2 * CONV_SM90_MAX_CHANNELS + 1];
} gpu_out_t;

/* The kernel on d (device 0), outputs and statistics poisoned with NaN before the run. */
static void gpu_run(const cf_data_t *d, int with_pro, int with_stats, gpu_out_t *o)
{
  CU_OK(cudaSetDevice(0));
  size_t P = (size_t)d->n * d->h * d->w, out = P * d->cout;
  void *x = up_bf16(d->x, P * d->cin), *w = up_bf16(d->weight, (size_t)9 * d->cin * d->cout);
  float *sc = up_f32(d->scale, d->cin), *sh = up_f32(d->shift, d->cin);
  void *y = NULL, *ws = NULL;
  double *st = NULL;
  CU_OK(cudaMalloc(&y, out * 2 + 2));
  CU_OK(cudaMemset(y, 0xff, out * 2 + 2));
  CU_OK(cudaMalloc((void **)&st, sizeof o->stats));
  CU_OK(cudaMemset(st, 0xff, sizeof o->stats));
  const size_t wsb = conv_sm90_ws_bytes_shape(0, d->cin, d->cout);
  ck_assert_msg(wsb > 0, "no workspace size for %d -> %d", d->cin, d->cout);
  CU_OK(cudaMalloc(&ws, wsb));
  conv_sm90_fwd_t a = {.n = d->n, .h = d->h, .w = d->w, .cin = d->cin, .cout = d->cout, .x = x,
                       .weight = w, .scale = with_pro ? sc : NULL,
                       .shift = with_pro ? sh : NULL, .y = y, .stats = with_stats ? st : NULL,
                       .ws = ws, .layout = g_layout};
  char err[256];
  ck_assert_msg(conv_sm90_fwd(&a, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaDeviceSynchronize());
  o->raw = malloc(out * 2 + 2);
  o->y = malloc((out + 1) * sizeof *o->y);
  CU_OK(cudaMemcpy(o->raw, y, out * 2 + 2, cudaMemcpyDeviceToHost));
  CU_OK(cudaMemcpy(o->stats, st, sizeof o->stats, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < out; i++) o->y[i] = value_of(o->raw[i]);
  /* the element past the end is the kernel's neighbour's: never written */
  ck_assert_msg(o->raw[out] == 0xffff, "a store past the output's end");
  cudaFree(x);
  cudaFree(w);
  cudaFree(sc);
  cudaFree(sh);
  cudaFree(y);
  cudaFree(st);
  cudaFree(ws);
}

static void gpu_out_free(gpu_out_t *o)
{
  free(o->y);
  free(o->raw);
}

/* The kernel against the CPU reference on one shape of cin -> cout channels; with_mag: the
 * per-element bound from the f64 oracle's magnitudes (small shapes), else relative to the
 * output's RMS. */
static void check_shape(int n, int h, int w, int cin, int cout, int with_pro, int with_stats,
                        int with_mag)
{
  cf_data_t d;
  cf_make(&d, n, h, w, cin, cout);
  const int C = cout;
  size_t P = (size_t)n * h * w, out = P * C;
  float *ref = malloc((out ? out : 1) * sizeof *ref);
  static double rst[2 * CONV_SM90_MAX_CHANNELS + 1];
  char err[256];
  conv_fused_ref_t ra = {.n = n, .h = h, .w = w, .cin = d.cin, .cout = C, .x = d.x,
                         .weight = d.weight, .scale = with_pro ? d.scale : NULL,
                         .shift = with_pro ? d.shift : NULL, .y = ref, .stats = rst};
  ck_assert_msg(conv_fused_ref(&ra, err, sizeof err) == 0, "%s", err);
  double *mag = malloc(out * sizeof *mag);
  if (with_mag) {
    float *yo = malloc(out * sizeof *yo);
    static double ost[2 * CONV_SM90_MAX_CHANNELS + 1];
    size_t clamped;
    cf_oracle(&d, with_pro, yo, mag, ost, &clamped);
    free(yo);
    /* the f32 accumulation's rounding grows with the accumulations into each output (a wgmma
     * adds 16 products at a time): 2^-20 mag is the bound at 64 -> 64 (36 of them), scaled by
     * cin / 64 here; a wrong tap or channel is still off by about the output itself */
    if (cin > 64)
      for (size_t i = 0; i < out; i++) mag[i] *= cin / 64.0;
  } else { /* 2^-20 mag <= 1e-4 RMS: the sum's rounding, far below one wrong tap */
    double ss = 0;
    for (size_t i = 0; i < out; i++) ss += (double)ref[i] * ref[i];
    for (size_t i = 0; i < out; i++) mag[i] = 1e-4 * sqrt(ss / (double)out) * 1048576.0;
  }
  gpu_out_t g;
  gpu_run(&d, with_pro, with_stats, &g);
  cf_cmp_t c = cf_compare(g.y, ref, mag, out);
  ck_assert_msg(c.nan == 0, "%dx%dx%d %d -> %d: %zu outputs not written (NaN)", n, h, w, cin,
                cout, c.nan);
  ck_assert_msg(c.bad == 0, "%dx%dx%d %d -> %d pro %d: %zu of %zu outputs off the reference "
                "(worst %.2f of its bound at %zu: %g vs %g)", n, h, w, cin, cout, with_pro,
                c.bad, out, c.worst, c.worst_at, g.y[c.worst_at], ref[c.worst_at]);
  ck_assert_msg(c.exact * 100 >= out * 95, "%d -> %d: only %zu of %zu outputs bit-equal", cin,
                cout, c.exact, out);
  ck_assert_msg(c.rel_l2 < 2e-3, "%d -> %d: relative L2 error %g", cin, cout, c.rel_l2);
  if (with_stats) {
    /* against the reference's statistics, and against the f64 sums of what the kernel wrote
     * (f32 partials of at most 32 terms: relative 2e-6 of the magnitudes, bounded by 1e-5) */
    ck_assert_msg(cf_stats_bad(g.stats, rst, g.y, ref, P, C, 1e-5) == 0,
                  "%dx%dx%d %d -> %d: statistics off the reference's", n, h, w, cin, cout);
    static double own[2 * CONV_SM90_MAX_CHANNELS];
    memset(own, 0, sizeof own);
    for (size_t p = 0; p < P; p++)
      for (int k = 0; k < C; k++) {
        own[k] += g.y[p * C + k];
        own[C + k] += (double)g.y[p * C + k] * g.y[p * C + k];
      }
    ck_assert_msg(cf_stats_bad(g.stats, own, g.y, g.y, P, C, 1e-5) == 0,
                  "%dx%dx%d %d -> %d: statistics off the sums of the kernel's own outputs", n,
                  h, w, cin, cout);
    ck_assert(g.stats[2 * C] == (double)P);
  }
  gpu_out_free(&g);
  free(ref);
  free(mag);
  cf_free(&d);
}

static void check_against_reference(int n, int h, int w, int with_pro, int with_stats,
                                    int with_mag)
{
  check_shape(n, h, w, CONV_SM90_CIN, CONV_SM90_COUT, with_pro, with_stats, with_mag);
}

/* ---- dgrad ---- */

typedef struct {
  float *g;        /* the masked input gradient as f32 */
  uint16_t *raw;   /* and as the bits written */
  double sums[2 * CONV_SM90_MAX_CHANNELS];
} dg_out_t;

/* dgrad on b (device 0), g and the sums poisoned with NaN before the run. */
static void dg_gpu_run(const bd_data_t *b, int mask, int with_sums, dg_out_t *o)
{
  CU_OK(cudaSetDevice(0));
  const cf_data_t *d = &b->d;
  size_t out = b->P * d->cin;
  void *dy = up_bf16(b->dy, b->P * d->cout), *x = up_bf16(d->x, b->P * d->cin);
  void *w = up_bf16(d->weight, (size_t)9 * d->cin * d->cout);
  float *sc = up_f32(d->scale, d->cin), *sh = up_f32(d->shift, d->cin);
  double *sv = up_f64(b->saved, 2 * (size_t)d->cin), *st = NULL;
  void *g = NULL, *ws = NULL;
  CU_OK(cudaMalloc(&g, out * 2 + 2));
  CU_OK(cudaMemset(g, 0xff, out * 2 + 2));
  CU_OK(cudaMalloc((void **)&st, sizeof o->sums));
  CU_OK(cudaMemset(st, 0xff, sizeof o->sums));
  const size_t wsb = conv_sm90_ws_bytes_shape(0, d->cin, d->cout);
  ck_assert_msg(wsb > 0, "no workspace size for %d -> %d", d->cin, d->cout);
  CU_OK(cudaMalloc(&ws, wsb));
  conv_sm90_dgrad_t a = {.n = d->n, .h = d->h, .w = d->w, .cin = d->cin, .cout = d->cout,
                         .dy = dy, .weight = w, .x = mask || with_sums ? x : NULL,
                         .scale = mask ? sc : NULL, .shift = mask ? sh : NULL,
                         .saved = with_sums ? sv : NULL, .g = g,
                         .sums = with_sums ? st : NULL, .ws = ws, .layout = g_layout};
  char err[256];
  ck_assert_msg(conv_sm90_dgrad(&a, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaDeviceSynchronize());
  o->raw = malloc(out * 2 + 2);
  o->g = malloc((out + 1) * sizeof *o->g);
  CU_OK(cudaMemcpy(o->raw, g, out * 2 + 2, cudaMemcpyDeviceToHost));
  CU_OK(cudaMemcpy(o->sums, st, sizeof o->sums, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < out; i++) o->g[i] = value_of(o->raw[i]);
  ck_assert_msg(o->raw[out] == 0xffff, "a store past g's end");
  void *bufs[] = {dy, x, w, sc, sh, sv, st, g, ws};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
}

static void dg_out_free(dg_out_t *o)
{
  free(o->g);
  free(o->raw);
}

/* Bounds for dgrad's sums from two gradients gg (the kernel's) and gw that may differ by a
 * rounding: |ΔΣg| <= Σ|gg - gw|, |ΔΣg x̂| <= Σ|gg - gw| |x̂|, plus the kernel's own rounding:
 * f32 partials of at most 32 terms (tol of the magnitudes Σ|g| and invstd (Σ|g x| +
 * |mean| Σ|g|), as it forms Σ g x̂ = (Σ g x - mean Σ g) invstd). Returns the sums off. */
static int dg_sums_bad(const double *sg, const double *sw, const float *gg, const float *gw,
                       const bd_data_t *b, double tol)
{
  const int C = b->d.cin;
  int bad = 0;
  for (int c = 0; c < C; c++) {
    const double mean = b->saved[c], invstd = b->saved[C + c];
    double d1 = 0, d2 = 0, m1 = 0, mx = 0;
    for (size_t p = 0; p < b->P; p++) {
      const double x = b->d.x[p * C + c], xh = (x - mean) * invstd;
      const double dg = fabs((double)gg[p * C + c] - gw[p * C + c]);
      const double mg = fmax(fabs(gg[p * C + c]), fabs(gw[p * C + c]));
      d1 += dg;
      d2 += dg * fabs(xh);
      m1 += mg;
      mx += mg * fabs(x);
    }
    bad += fabs(sg[c] - sw[c]) > d1 + tol * m1 + 1e-30;
    bad += fabs(sg[C + c] - sw[C + c]) > d2 + tol * invstd * (mx + fabs(mean) * m1) + 1e-30;
  }
  return bad;
}

/* dgrad against conv_dgrad_ref on one shape of the forward's cin -> cout channels: g within
 * one bf16 rounding (bound relative to the gradient's RMS for the sum's rounding), the sums
 * against the reference's and against the f64 sums of the kernel's own g. */
static void check_dgrad_shape(int n, int h, int w, int cin, int cout, int mask, int with_sums)
{
  const cf_shape_t sh = {n, h, w, cin, cout};
  bd_data_t b;
  bd_make(&b, &sh);
  const int C = cin;
  size_t out = b.P * C;
  float *ref = malloc((out ? out : 1) * sizeof *ref);
  static double rs[2 * CONV_SM90_MAX_CHANNELS];
  char err[256];
  conv_dgrad_ref_t ra = {.n = n, .h = h, .w = w, .cin = C, .cout = cout, .dy = b.dy,
                         .weight = b.d.weight, .x = mask || with_sums ? b.d.x : NULL,
                         .scale = mask ? b.d.scale : NULL, .shift = mask ? b.d.shift : NULL,
                         .saved = with_sums ? b.saved : NULL, .g = ref,
                         .sums = with_sums ? rs : NULL};
  ck_assert_msg(conv_dgrad_ref(&ra, err, sizeof err) == 0, "%s", err);
  double ss = 0, *mag = malloc(out * sizeof *mag);
  for (size_t i = 0; i < out; i++) ss += (double)ref[i] * ref[i];
  for (size_t i = 0; i < out; i++) mag[i] = 1e-4 * sqrt(ss / (double)out) * 1048576.0;
  dg_out_t o;
  dg_gpu_run(&b, mask, with_sums, &o);
  cf_cmp_t c = cf_compare(o.g, ref, mag, out);
  ck_assert_msg(c.nan == 0, "dgrad %dx%dx%d %d -> %d: %zu of g not written (NaN)", n, h, w, cin,
                cout, c.nan);
  ck_assert_msg(c.bad == 0, "dgrad %dx%dx%d %d -> %d mask %d: %zu of %zu off the reference "
                "(worst %.2f of its bound at %zu: %g vs %g)", n, h, w, cin, cout, mask, c.bad,
                out, c.worst, c.worst_at, o.g[c.worst_at], ref[c.worst_at]);
  ck_assert_msg(c.exact * 100 >= out * 95, "dgrad %d -> %d: only %zu of %zu bit-equal", cin,
                cout, c.exact, out);
  ck_assert_msg(c.rel_l2 < 2e-3, "dgrad %d -> %d: relative L2 error %g", cin, cout, c.rel_l2);
  if (with_sums) {
    ck_assert_msg(dg_sums_bad(o.sums, rs, o.g, ref, &b, 1e-5) == 0,
                  "dgrad %dx%dx%d: sums off the reference's", n, h, w);
    static double own[2 * CONV_SM90_MAX_CHANNELS];
    memset(own, 0, sizeof own);
    for (size_t p = 0; p < b.P; p++)
      for (int k = 0; k < C; k++) {
        own[k] += o.g[p * C + k];
        own[C + k] += o.g[p * C + k] * (((double)b.d.x[p * C + k] - b.saved[k]) * b.saved[C + k]);
      }
    ck_assert_msg(dg_sums_bad(o.sums, own, o.g, o.g, &b, 1e-5) == 0,
                  "dgrad %dx%dx%d: sums off the sums of the kernel's own g", n, h, w);
  }
  dg_out_free(&o);
  free(ref);
  free(mag);
  bd_free(&b);
}

static void check_dgrad(int n, int h, int w, int mask, int with_sums)
{
  check_dgrad_shape(n, h, w, CONV_SM90_CIN, CONV_SM90_COUT, mask, with_sums);
}

START_TEST(dgrad_odd_shapes)
{
  static const int shapes[][3] = {{2, 9, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}, {2, 64, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 1, 1);
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 0, 0);
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 0, 1);
  }
  check_dgrad(2, 9, 70, 1, 0);
}
END_TEST

START_TEST(dgrad_unet_shape)
{
  check_dgrad(6, 256, 256, 1, 1);
  g_layout = 0;
}
END_TEST

/* Two dgrad runs (mask and sums) on the U-Net's shape, bit for bit, in g_layout. */
static void check_dgrad_reruns(void)
{
  const cf_shape_t sh = {6, 256, 256, CONV_SM90_CIN, CONV_SM90_COUT};
  bd_data_t b;
  bd_make(&b, &sh);
  dg_out_t x, y;
  dg_gpu_run(&b, 1, 1, &x);
  dg_gpu_run(&b, 1, 1, &y);
  ck_assert_msg(memcmp(x.raw, y.raw, b.P * CONV_SM90_CIN * 2) == 0,
                "two dgrad runs wrote different gradients");
  ck_assert_msg(memcmp(x.sums, y.sums, sizeof x.sums) == 0, "two dgrad runs gave different sums");
  dg_out_free(&x);
  dg_out_free(&y);
  bd_free(&b);
}

START_TEST(dgrad_reruns_bitwise)
{
  check_dgrad_reruns();
}
END_TEST

START_TEST(dgrad_bad_arguments)
{
  CU_OK(cudaSetDevice(0));
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 1 << 20));
  char err[256] = "";
  conv_sm90_dgrad_t a = {.n = 1, .h = 8, .w = 8, .cin = 64, .cout = 64, .dy = buf,
                         .weight = buf, .g = buf + 65536, .ws = buf + 131072};
  a.sums = (double *)(buf + 4096);
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "saved"), "%s", err);
  a.saved = (const double *)(buf + 8192);
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "need x"), "%s", err);
  a.sums = NULL;
  a.saved = NULL;
  a.ws = NULL;
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  a.ws = buf + 131072;
  a.cout = 32;
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* nothing was queued */
  cudaFree(buf);
}
END_TEST

/* ---- wgrad ---- */

enum { DWN = 9 * CONV_SM90_CIN * CONV_SM90_COUT };

typedef struct {
  float *dw, *part; /* dW; the partials (blocks, or K splits for the wider layers) */
  int blocks, per;  /* partials, 64-pixel tiles in each */
  size_t count;     /* elements of dW: 9 cin cout */
} wg_out_t;

/* wgrad on b (device 0), dW and the workspace poisoned with NaN before the run. */
static void wg_gpu_run(const bd_data_t *b, int pro, wg_out_t *o)
{
  CU_OK(cudaSetDevice(0));
  const cf_data_t *d = &b->d;
  const size_t nw = (size_t)9 * d->cin * d->cout;
  o->count = nw;
  void *x = up_bf16(d->x, b->P * d->cin), *dy = up_bf16(b->dy, b->P * d->cout);
  float *sc = up_f32(d->scale, d->cin), *sh = up_f32(d->shift, d->cin), *dw = NULL;
  ck_assert(conv_sm90_wgrad_plan_shape(0, d->n, d->h, d->w, d->cin, d->cout, &o->blocks,
                                       &o->per) == 0);
  size_t wsb = conv_sm90_wgrad_ws_bytes_shape(0, d->n, d->h, d->w, d->cin, d->cout);
  ck_assert_uint_eq(wsb, (size_t)o->blocks * nw * sizeof(float));
  if (d->cin == CONV_SM90_CIN && d->cout == CONV_SM90_COUT) { /* the shape-aware ones agree */
    int blocks = 0, per = 0;
    ck_assert(conv_sm90_wgrad_plan(0, d->n, d->h, d->w, &blocks, &per) == 0);
    ck_assert(blocks == o->blocks && per == o->per);
    ck_assert_uint_eq(conv_sm90_wgrad_ws_bytes(0, d->n, d->h, d->w), wsb);
  }
  void *ws = NULL;
  CU_OK(cudaMalloc(&ws, wsb));
  CU_OK(cudaMemset(ws, 0xff, wsb));
  CU_OK(cudaMalloc((void **)&dw, nw * sizeof *dw));
  CU_OK(cudaMemset(dw, 0xff, nw * sizeof *dw));
  conv_sm90_wgrad_t a = {.n = d->n, .h = d->h, .w = d->w, .cin = d->cin, .cout = d->cout,
                         .x = x, .dy = dy, .scale = pro ? sc : NULL, .shift = pro ? sh : NULL,
                         .dweight = dw, .ws = ws};
  char err[256];
  ck_assert_msg(conv_sm90_wgrad(&a, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaDeviceSynchronize());
  o->dw = malloc(nw * sizeof *o->dw);
  o->part = malloc(wsb);
  CU_OK(cudaMemcpy(o->dw, dw, nw * sizeof *o->dw, cudaMemcpyDeviceToHost));
  CU_OK(cudaMemcpy(o->part, ws, wsb, cudaMemcpyDeviceToHost));
  if (o->blocks == 1 && (d->cin != CONV_SM90_CIN || d->cout != CONV_SM90_COUT)) {
    /* the wider layers' one split: written to dW directly, the workspace left as it was */
    size_t touched = 0;
    const unsigned char *pb = (const unsigned char *)o->part;
    for (size_t i = 0; i < wsb; i++) touched += pb[i] != 0xff;
    ck_assert_msg(touched == 0, "wgrad %d->%d of one split wrote %zu bytes of the workspace",
                  d->cin, d->cout, touched);
    memcpy(o->part, o->dw, nw * sizeof *o->dw);
  }
  void *bufs[] = {x, dy, sc, sh, dw, ws};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) cudaFree(bufs[i]);
}

static void wg_out_free(wg_out_t *o)
{
  free(o->dw);
  free(o->part);
}

/* What the shapes' blocks showed: a block whose row tiles run on from one column strip to the
 * next of the same image, or to the next image, and a block that starts part-way down a strip;
 * (the wider layers) a shape of several K splits and several output tiles. */
typedef struct {
  int strips, images, mid, splits;
} wg_seen_t;

/* wg_oracle_pixel over the pixels x0 .. x0 + tw - 1 of row y of image img (those inside the
 * image), output channel and tap outside the pixel loop: each element's row stays in cache for
 * the row's pixels (the per-pixel order streams all of dW once a pixel, slow for the wider
 * layers). */
static void wg_oracle_row(const bd_data_t *b, const double *act, int img, int y, int x0, int tw,
                          double *dwo, double *mag)
{
  const int H = b->d.h, W = b->d.w, ci = b->d.cin, co = b->d.cout;
  const int x1 = x0 + tw < W ? x0 + tw : W;
  for (int o = 0; o < co; o++)
    for (int ky = 0; ky < 3; ky++) {
      const int sy = y + ky - 1;
      if (sy < 0 || sy >= H) continue;
      for (int kx = 0; kx < 3; kx++) {
        double *dr = dwo + (((size_t)o * 3 + ky) * 3 + kx) * ci;
        double *mr = mag + (((size_t)o * 3 + ky) * 3 + kx) * ci;
        for (int x = x0; x < x1; x++) {
          const int sx = x + kx - 1;
          if (sx < 0 || sx >= W) continue;
          const double d = b->dy[(((size_t)img * H + y) * W + x) * co + o];
          const double *av = act + (((size_t)img * H + sy) * W + sx) * ci;
          for (int c = 0; c < ci; c++) {
            const double t = d * av[c];
            dr[c] += t;
            mr[c] += fabs(t);
          }
        }
      }
    }
}

/* wgrad against the f64 definition (the bound the CPU reference meets: (P + 1) 2^-24 Σ|dy a|
 * per element, relative L2 1e-5), its reduction against conv_wgrad_ref_reduce of its own
 * partials bit for bit, and each block's partial against the f64 sum over exactly that block's
 * row tiles in the documented order (kernels/conv_sm90.h: tile t = (img * tiles_x + s) * th + ty,
 * block b tiles [b T, (b + 1) T)), every pixel in one block. dW's f64 definition is the sum of
 * the blocks' (each pixel once). For the wider layers the partials are the K splits' (the same
 * ranges of row tiles, each over all channels), and a tile is `rows` whole rows on images 16 or
 * 32 pixels wide (kernels/conv_sm90_tile.h, sm90_wtile_geometry). */
static void check_wgrad_shape(int n, int h, int w, int cin, int cout, int pro, wg_seen_t *seen)
{
  const cf_shape_t sh = {n, h, w, cin, cout};
  bd_data_t b;
  bd_make(&b, &sh);
  double *act = bd_act(&b, pro);
  wg_out_t o;
  wg_gpu_run(&b, pro, &o);
  const size_t nw = o.count;
  if (o.blocks > 1 && cin * cout > 64 * 64) seen->splits = 1;
  const sm90_wtile_t g = sm90_wtile_geometry(cin == 64 && cout == 64 ? 64 : w);
  const int tiles_x = sm90_wtile_strips(&g, w), th = sm90_wtile_per_strip(&g, h);
  const long ntiles = (long)n * tiles_x * th;
  ck_assert_msg(o.per >= 1 && (long)(o.blocks - 1) * o.per < ntiles &&
                    ntiles <= (long)o.blocks * o.per,
                "wgrad %dx%dx%d %d->%d: %d partials of %d row tiles for %ld tiles", n, h, w, cin,
                cout, o.blocks, o.per, ntiles);
  double *dwo = calloc(nw, sizeof *dwo), *mag = calloc(nw, sizeof *mag);
  double *pdw = malloc(nw * sizeof *pdw), *pmag = malloc(nw * sizeof *pmag);
  unsigned char *hit = calloc(b.P, 1);
  /* a block's partial: at most 64 T f32 additions into each element, of its own terms; twice
   * that for an adder that truncates rather than rounds */
  const double ub = 2 * ldexp(1.0, -24) * (64.0 * o.per + 1);
  size_t bad = 0;
  for (int k = 0; k < o.blocks; k++) {
    memset(pdw, 0, nw * sizeof *pdw);
    memset(pmag, 0, nw * sizeof *pmag);
    const long t0 = (long)k * o.per, t1 = t0 + o.per < ntiles ? t0 + o.per : ntiles;
    if (t0 % th) seen->mid = 1;
    for (long t = t0; t < t1; t++) {
      const long strip = t / th;
      const int ty = (int)(t % th), img = (int)(strip / tiles_x), x0 = (int)(strip % tiles_x) * g.tw;
      if (t > t0 && ty == 0) {
        if ((strip - 1) / tiles_x == img)
          seen->strips = 1;
        else
          seen->images = 1;
      }
      for (int y = g.rows * ty; y < g.rows * (ty + 1) && y < h; y++) {
        for (int x = x0; x < x0 + g.tw && x < w; x++) hit[((size_t)img * h + y) * w + x]++;
        wg_oracle_row(&b, act, img, y, x0, g.tw, pdw, pmag);
      }
    }
    for (size_t i = 0; i < nw; i++) {
      bad += !(fabs(o.part[(size_t)k * nw + i] - pdw[i]) <= ub * pmag[i]);
      dwo[i] += pdw[i];
      mag[i] += pmag[i];
    }
  }
  size_t once = 0;
  for (size_t p = 0; p < b.P; p++) once += hit[p] == 1;
  ck_assert_msg(once == b.P, "wgrad %dx%dx%d: %zu of %zu pixels not in exactly one block", n, h,
                w, b.P - once, b.P);
  double u = ldexp(1.0, -24) * (double)(b.P + 1), num = 0, den = 0;
  size_t off = 0, nan = 0;
  for (size_t i = 0; i < nw; i++) {
    nan += isnan(o.dw[i]);
    if (fabs(o.dw[i] - dwo[i]) > u * mag[i]) off++;
    num += (o.dw[i] - dwo[i]) * (o.dw[i] - dwo[i]);
    den += dwo[i] * dwo[i];
  }
  ck_assert_msg(nan == 0 && off == 0,
                "wgrad %dx%dx%d %d->%d pro %d: %zu of dW off the bound, %zu NaN", n, h, w, cin,
                cout, pro, off, nan);
  ck_assert_msg(num <= 1e-10 * den, "wgrad %dx%dx%d %d->%d pro %d: relative L2 error %g", n, h,
                w, cin, cout, pro, den > 0 ? sqrt(num / den) : sqrt(num));
  float *red = malloc(nw * sizeof *red);
  conv_wgrad_ref_reduce(o.part, (size_t)o.blocks, nw, red);
  ck_assert_msg(memcmp(red, o.dw, nw * sizeof *red) == 0,
                "wgrad %dx%dx%d %d->%d: dW is not its partials added in order", n, h, w, cin,
                cout);
  ck_assert_msg(bad == 0,
                "wgrad %dx%dx%d %d->%d pro %d: %zu partial elements off their range's f64 sum",
                n, h, w, cin, cout, pro, bad);
  free(red);
  free(hit);
  free(pdw);
  free(pmag);
  wg_out_free(&o);
  free(act);
  free(dwo);
  free(mag);
  bd_free(&b);
}

static void check_wgrad(int n, int h, int w, int pro, wg_seen_t *seen)
{
  check_wgrad_shape(n, h, w, CONV_SM90_CIN, CONV_SM90_COUT, pro, seen);
}


START_TEST(wgrad_shapes)
{
  /* cut tiles (70, 130, 300), a single pixel, rows of whole tiles, more multiprocessors than
   * row tiles (the first four), blocks of several tiles whose runs go on to the next column
   * strip and the next image and start part-way down a strip (2 x 25 x 130 on 78 to 144
   * multiprocessors), one-row images (h = 1: each run one tile, three x strips), the U-Net's
   * 6 x 256 x 256 (runs of tens of rows) */
  static const int shapes[][3] = {{2, 9, 70},   {1, 1, 1},    {3, 5, 130},   {1, 2, 64},
                                  {2, 64, 128}, {2, 64, 256}, {2, 25, 130}, {40, 1, 300},
                                  {6, 256, 256}};
  wg_seen_t seen = {0, 0, 0, 0};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    check_wgrad(shapes[i][0], shapes[i][1], shapes[i][2], 1, &seen);
    check_wgrad(shapes[i][0], shapes[i][1], shapes[i][2], 0, &seen);
  }
  ck_assert_msg(seen.strips && seen.images && seen.mid,
                "the shapes' blocks never ran on to the next strip (%d) or image (%d), or "
                "started part-way down a strip (%d): choose shapes for this device",
                seen.strips, seen.images, seen.mid);
}
END_TEST

START_TEST(wgrad_reruns_bitwise)
{
  const cf_shape_t sh = {2, 64, 256, CONV_SM90_CIN, CONV_SM90_COUT};
  bd_data_t b;
  bd_make(&b, &sh);
  wg_out_t x, y;
  wg_gpu_run(&b, 1, &x);
  wg_gpu_run(&b, 1, &y);
  ck_assert_msg(memcmp(x.dw, y.dw, x.count * sizeof *x.dw) == 0,
                "two wgrad runs gave different dW");
  ck_assert_msg(memcmp(x.part, y.part, (size_t)x.blocks * x.count * sizeof *x.part) == 0,
                "two wgrad runs gave different partials");
  wg_out_free(&x);
  wg_out_free(&y);
  bd_free(&b);
}
END_TEST

START_TEST(wgrad_empty_and_bad_arguments)
{
  CU_OK(cudaSetDevice(0));
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 1 << 20));
  char err[256] = "";
  /* no pixels: dW zero */
  CU_OK(cudaMemset(buf, 0xff, 1 << 20));
  conv_sm90_wgrad_t a = {.n = 0, .h = 8, .w = 8, .cin = 64, .cout = 64, .x = buf, .dy = buf,
                         .dweight = (float *)(buf + 262144), .ws = buf + 524288};
  ck_assert_msg(conv_sm90_wgrad(&a, err, sizeof err) == 0, "%s", err);
  float h[DWN];
  CU_OK(cudaMemcpy(h, buf + 262144, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < DWN; i++) ck_assert(h[i] == 0.f);
  a.n = 1;
  a.cin = 32;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64"), "%s", err);
  a.cin = 64;
  a.dy = buf + 2;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "16-byte"), "%s", err);
  a.dy = buf;
  a.shift = (const float *)buf;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "scale and shift"), "%s", err);
  a.shift = NULL;
  a.ws = NULL;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(buf);
}
END_TEST

START_TEST(odd_shapes)
{
  /* widths and heights that end tiles (64 x 2) part-way; a single pixel; one image row */
  static const int shapes[][3] = {{2, 9, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}, {2, 64, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    check_against_reference(shapes[i][0], shapes[i][1], shapes[i][2], 1, 1, 1);
    check_against_reference(shapes[i][0], shapes[i][1], shapes[i][2], 0, 0, 1);
  }
}
END_TEST

START_TEST(unet_shape)
{
  check_against_reference(6, 256, 256, 1, 1, 0);
  check_against_reference(6, 256, 256, 0, 1, 0);
}
END_TEST

/* Two forward runs (prologue and statistics) on d, bit for bit, in g_layout; the first's
 * outputs into *a (the caller frees them). */
static void check_reruns(const cf_data_t *d, gpu_out_t *a)
{
  gpu_out_t b;
  gpu_run(d, 1, 1, a);
  gpu_run(d, 1, 1, &b);
  size_t out = (size_t)d->n * d->h * d->w * d->cout;
  ck_assert_msg(memcmp(a->raw, b.raw, out * 2) == 0, "two runs wrote different outputs");
  ck_assert_msg(memcmp(a->stats, b.stats, sizeof a->stats) == 0,
                "two runs gave different statistics");
  gpu_out_free(&b);
}

START_TEST(reruns_bitwise)
{
  cf_data_t d;
  cf_make(&d, 6, 256, 256, CONV_SM90_CIN, CONV_SM90_COUT);
  gpu_out_t a;
  check_reruns(&d, &a);
  gpu_out_free(&a);
  cf_free(&d);
}
END_TEST

/* The COUT_M layout (output channels as M, the weights in registers): the same cases. */
START_TEST(cm_odd_shapes)
{
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  static const int shapes[][3] = {{2, 9, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}, {2, 64, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    check_against_reference(shapes[i][0], shapes[i][1], shapes[i][2], 1, 1, 1);
    check_against_reference(shapes[i][0], shapes[i][1], shapes[i][2], 0, 0, 1);
    check_against_reference(shapes[i][0], shapes[i][1], shapes[i][2], 0, 1, 1);
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 1, 1);
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 0, 0);
    check_dgrad(shapes[i][0], shapes[i][1], shapes[i][2], 0, 1);
  }
  check_dgrad(2, 9, 70, 1, 0);
  check_against_reference(2, 9, 70, 1, 0, 1);
  g_layout = 0;
}
END_TEST

START_TEST(cm_unet_shape)
{
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  check_against_reference(6, 256, 256, 1, 1, 0);
  check_against_reference(6, 256, 256, 0, 1, 0);
  check_dgrad(6, 256, 256, 1, 1);
  g_layout = 0;
}
END_TEST

/* Two runs of each layout bit for bit; the layouts against each other: the same products
 * added k-step by k-step in the same order, so they may differ only inside a wgmma's own
 * 16-product sums (reported, not required). */
START_TEST(cm_reruns_bitwise)
{
  cf_data_t d;
  cf_make(&d, 6, 256, 256, CONV_SM90_CIN, CONV_SM90_COUT);
  gpu_out_t a, c;
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  check_reruns(&d, &a);
  g_layout = CONV_SM90_LAYOUT_PIXELS_M;
  gpu_run(&d, 1, 1, &c);
  size_t out = (size_t)6 * 256 * 256 * CONV_SM90_COUT, same = 0;
  for (size_t i = 0; i < out; i++) same += a.raw[i] == c.raw[i];
  printf("conv_sm90 layouts: %zu of %zu outputs bit-equal between COUT_M and PIXELS_M\n", same,
         out);
  gpu_out_free(&a);
  gpu_out_free(&c);
  cf_free(&d);
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  check_dgrad_reruns();
  g_layout = 0;
}
END_TEST

START_TEST(cm_bad_layout)
{
  CU_OK(cudaSetDevice(0));
  void *buf = NULL;
  CU_OK(cudaMalloc(&buf, 1 << 20));
  char err[256] = "";
  conv_sm90_fwd_t a = {.n = 1, .h = 8, .w = 8, .cin = 64, .cout = 64, .x = buf, .weight = buf,
                       .y = (char *)buf + 65536, .ws = buf, .layout = 3};
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "layout 3") != NULL, "%s", err);
  conv_sm90_dgrad_t g = {.n = 1, .h = 8, .w = 8, .cin = 64, .cout = 64, .dy = buf,
                         .weight = buf, .g = (char *)buf + 65536, .ws = buf, .layout = -1};
  err[0] = 0;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "layout -1") != NULL, "%s", err);
  cudaFree(buf);
}
END_TEST

START_TEST(empty_batch)
{
  CU_OK(cudaSetDevice(0));
  double *st = NULL, h[2 * CONV_SM90_COUT + 1];
  void *buf = NULL;
  CU_OK(cudaMalloc(&buf, 4096));
  CU_OK(cudaMalloc((void **)&st, sizeof h));
  CU_OK(cudaMemset(st, 0xff, sizeof h));
  conv_sm90_fwd_t a = {.n = 0, .h = 8, .w = 8, .cin = 64, .cout = 64, .x = buf, .weight = buf,
                       .y = buf, .stats = st, .ws = buf};
  char err[256];
  ck_assert_msg(conv_sm90_fwd(&a, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaMemcpy(h, st, sizeof h, cudaMemcpyDeviceToHost));
  for (int k = 0; k <= 2 * CONV_SM90_COUT; k++) ck_assert(h[k] == 0);
  cudaFree(buf);
  cudaFree(st);
}
END_TEST

START_TEST(bad_arguments)
{
  CU_OK(cudaSetDevice(0));
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 1 << 20));
  char err[256] = "";
  conv_sm90_fwd_t a = {.n = 1, .h = 8, .w = 8, .cin = 32, .cout = 64, .x = buf,
                       .weight = buf, .y = buf + 65536};
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64"), "%s", err);
  a.cin = 64;
  a.x = buf + 2;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "16-byte"), "%s", err);
  a.x = buf;
  a.scale = (const float *)buf;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "scale and shift"), "%s", err);
  a.scale = NULL;
  a.stats = (double *)(buf + 4096);
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* nothing was queued */
  cudaFree(buf);
}
END_TEST

/* ---- the wider layers (kernels/conv_sm90_wide_cuda.cu) ---- */

/* cin -> cout pairs: N tiles of 128 (cout % 128 == 0) and of 64, one chunk of input channels
 * (64 -> 128) and several (up to 16 in 1024 -> 1024), an odd number of chunks and of N tiles
 * (192 -> 320). */
enum { WIDE_PAIRS = 6 };
static const int wide_pairs[WIDE_PAIRS][2] = {{64, 128},  {128, 64},  {128, 128},
                                              {256, 128}, {192, 320}, {512, 256}};

START_TEST(wide_odd_shapes)
{
  /* widths and heights that end tiles part-way, a single pixel, one image row */
  static const int shapes[][3] = {{2, 5, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}};
  for (size_t k = 0; k < sizeof wide_pairs / sizeof *wide_pairs; k++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
      const int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
      check_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 1, 1, 1);
      check_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 0, 0, 1);
    }
  check_shape(2, 5, 70, 128, 128, 1, 0, 1);
  check_shape(2, 5, 70, 128, 128, 0, 1, 1);
  check_shape(1, 2, 64, 1024, 1024, 1, 1, 1);
}
END_TEST

START_TEST(wide_unet_shapes)
{
  /* the U-Net's 128 -> 128 at 128 x 128 (several items per block); 128 -> 256 at 64 x 128,
   * batch 2 (256 items: on 78 to 144 multiprocessors a block's items change N tile, so its
   * statistics are flushed part-way); 64 -> 128 at 256 x 256, batch 6 (3,072 items: more than
   * 16 per block, the f32 sums folded part-way) */
  check_shape(6, 128, 128, 128, 128, 1, 1, 0);
  check_shape(6, 128, 128, 128, 128, 0, 1, 0);
  check_shape(2, 64, 128, 128, 256, 1, 1, 0);
  check_shape(6, 256, 256, 64, 128, 1, 1, 0);
}
END_TEST

START_TEST(wide_reruns_bitwise)
{
  cf_data_t d;
  cf_make(&d, 6, 128, 128, 128, 256);
  gpu_out_t a, b;
  gpu_run(&d, 1, 1, &a);
  gpu_run(&d, 1, 1, &b);
  size_t out = (size_t)6 * 128 * 128 * 256;
  ck_assert_msg(memcmp(a.raw, b.raw, out * 2) == 0, "two wide runs wrote different outputs");
  ck_assert_msg(memcmp(a.stats, b.stats, (2 * 256 + 1) * sizeof *a.stats) == 0,
                "two wide runs gave different statistics");
  gpu_out_free(&a);
  gpu_out_free(&b);
  cf_free(&d);
}
END_TEST

START_TEST(wide_dgrad_shapes)
{
  /* dgrad's output has the forward's cin channels: its N tiles are 128 where cin % 128 == 0 */
  static const int shapes[][3] = {{2, 5, 70}, {1, 1, 1}, {3, 5, 130}};
  for (size_t k = 0; k < sizeof wide_pairs / sizeof *wide_pairs; k++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
      const int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
      check_dgrad_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 1, 1);
      check_dgrad_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 0, 0);
    }
  check_dgrad_shape(2, 5, 70, 128, 128, 1, 0);
  check_dgrad_shape(2, 5, 70, 128, 128, 0, 1);
  check_dgrad_shape(1, 2, 64, 1024, 1024, 1, 1);
  /* many items per block; N-tile changes within blocks (2 x 64 x 128, 256 <- 128) */
  check_dgrad_shape(6, 128, 128, 128, 128, 1, 1);
  check_dgrad_shape(2, 64, 128, 256, 128, 1, 1);
  check_dgrad_shape(2, 64, 128, 256, 128, 0, 0);
}
END_TEST

/* Images narrower than 64 pixels whose width is a power of two (2 .. 32): tiles of 64 / w rows
 * of the whole width per consumer warpgroup. Heights that end tiles part-way, every such width,
 * the U-Net's deep shapes (32 x 32, 16 x 16), forward with and without prologue and statistics,
 * dgrad with and without mask and sums; reruns bit for bit. Widths that are no power of two (24,
 * 48) keep rows of 64 and are checked beside them. */
START_TEST(wide_narrow_images)
{
  static const int shapes[][3] = {{2, 9, 32}, {1, 5, 16}, {3, 7, 8}, {1, 33, 4}, {2, 3, 2},
                                  {2, 5, 24}, {1, 3, 48}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
    check_shape(n, h, w, 192, 320, 1, 1, 1);
    check_shape(n, h, w, 128, 128, 0, 0, 1);
    check_dgrad_shape(n, h, w, 192, 320, 1, 1);
    check_dgrad_shape(n, h, w, 128, 128, 0, 0);
  }
  check_shape(2, 32, 32, 256, 512, 1, 1, 0);
  check_shape(2, 16, 16, 1024, 1024, 1, 1, 0);
  check_dgrad_shape(2, 32, 32, 512, 512, 1, 1);
  check_dgrad_shape(2, 16, 16, 512, 1024, 1, 1);
  cf_data_t d;
  cf_make(&d, 6, 16, 16, 512, 1024);
  gpu_out_t a, b;
  gpu_run(&d, 1, 1, &a);
  gpu_run(&d, 1, 1, &b);
  const size_t out = (size_t)6 * 16 * 16 * 1024;
  ck_assert_msg(memcmp(a.raw, b.raw, out * 2) == 0, "two narrow-image runs wrote different outputs");
  ck_assert_msg(memcmp(a.stats, b.stats, (2 * 1024 + 1) * sizeof *a.stats) == 0,
                "two narrow-image runs gave different statistics");
  gpu_out_free(&a);
  gpu_out_free(&b);
  cf_free(&d);
}
END_TEST

START_TEST(wide_dgrad_reruns_bitwise)
{
  const cf_shape_t sh = {6, 128, 128, 256, 128};
  bd_data_t b;
  bd_make(&b, &sh);
  dg_out_t x, y;
  dg_gpu_run(&b, 1, 1, &x);
  dg_gpu_run(&b, 1, 1, &y);
  ck_assert_msg(memcmp(x.raw, y.raw, b.P * 256 * 2) == 0,
                "two wide dgrad runs wrote different gradients");
  ck_assert_msg(memcmp(x.sums, y.sums, 2 * 256 * sizeof *x.sums) == 0,
                "two wide dgrad runs gave different sums");
  dg_out_free(&x);
  dg_out_free(&y);
  bd_free(&b);
}
END_TEST

START_TEST(wide_empty_and_bad_arguments)
{
  CU_OK(cudaSetDevice(0));
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 1 << 20));
  char err[256] = "";
  /* the workspace sizes: 64 -> 64 the first kernel's, others grow with the channels, 0 for a
   * shape not covered */
  ck_assert_uint_eq(conv_sm90_ws_bytes_shape(0, 64, 64), conv_sm90_ws_bytes(0));
  ck_assert(conv_sm90_ws_bytes_shape(0, 128, 256) > conv_sm90_ws_bytes_shape(0, 128, 128));
  ck_assert_uint_eq(conv_sm90_ws_bytes_shape(0, 128, 256), conv_sm90_ws_bytes_shape(0, 256, 128));
  ck_assert_uint_eq(conv_sm90_ws_bytes_shape(0, 96, 128), 0);
  ck_assert_uint_eq(conv_sm90_ws_bytes_shape(0, 128, 2048), 0);
  /* no pixels: zero sums, count 0 */
  double *st = (double *)(buf + 524288), h[2 * 256 + 1];
  CU_OK(cudaMemset(st, 0xff, sizeof h));
  conv_sm90_fwd_t a = {.n = 0, .h = 8, .w = 8, .cin = 128, .cout = 256, .x = buf,
                       .weight = buf, .y = buf, .stats = st, .ws = buf + 262144};
  ck_assert_msg(conv_sm90_fwd(&a, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaMemcpy(h, st, sizeof h, cudaMemcpyDeviceToHost));
  for (int k = 0; k <= 2 * 256; k++) ck_assert(h[k] == 0);
  /* shapes not covered */
  a.n = 1;
  a.cin = 96;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64") && strstr(err, "1024"), "%s", err);
  a.cin = 2048;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "2048 -> 256"), "%s", err);
  a.cin = 128;
  a.ws = NULL;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  a.ws = buf + 262144;
  a.y = buf + 2;
  ck_assert_int_eq(conv_sm90_fwd(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "16-byte"), "%s", err);
  /* dgrad: no pixels, zero sums; its argument checks */
  double *sums = (double *)(buf + 786432), hs[2 * 128];
  CU_OK(cudaMemset(sums, 0xff, sizeof hs));
  conv_sm90_dgrad_t g = {.n = 0, .h = 8, .w = 8, .cin = 128, .cout = 256, .dy = buf,
                         .weight = buf, .x = buf, .saved = (const double *)buf, .g = buf,
                         .sums = sums, .ws = buf + 262144};
  ck_assert_msg(conv_sm90_dgrad(&g, err, sizeof err) == 0, "%s", err);
  CU_OK(cudaMemcpy(hs, sums, sizeof hs, cudaMemcpyDeviceToHost));
  for (int k = 0; k < 2 * 128; k++) ck_assert(hs[k] == 0);
  g.n = 1;
  g.g = buf + 65536;
  g.saved = NULL;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "saved"), "%s", err);
  g.saved = (const double *)buf;
  g.x = NULL;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "need x"), "%s", err);
  g.sums = NULL;
  g.saved = NULL;
  g.scale = (const float *)buf;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "scale and shift"), "%s", err);
  g.shift = (const float *)buf;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "need x"), "%s", err);
  g.scale = g.shift = NULL;
  g.ws = NULL;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  g.ws = buf + 262144;
  g.cout = 1056;
  ck_assert_int_eq(conv_sm90_dgrad(&g, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* nothing was queued */
  cudaFree(buf);
}
END_TEST

/* ---- wgrad of the wider layers (kernels/conv_sm90_wgrad_wide_cuda.cu) ---- */

START_TEST(wide_wgrad_shapes)
{
  /* tiles cut at the image's edges (70, 130), one pixel, one row of one tile; 3 x 5 x 130 has
   * 45 row tiles: several K splits (5 for 64 -> 128 and 192 -> 320, 4 for 512 -> 256 on 132
   * multiprocessors) whose ranges run on to the next column strip and image and start part-way
   * down a strip, each over several output tiles */
  static const int shapes[][3] = {{2, 5, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}};
  wg_seen_t seen = {0, 0, 0, 0};
  for (size_t k = 0; k < WIDE_PAIRS; k++)
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
      const int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
      check_wgrad_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 1, &seen);
      check_wgrad_shape(n, h, w, wide_pairs[k][0], wide_pairs[k][1], 0, &seen);
    }
  /* 256 output tiles: more blocks than multiprocessors (waves) */
  check_wgrad_shape(1, 2, 64, 1024, 1024, 1, &seen);
  /* the deep layers' narrow images: most of each row tile past the image's edge */
  check_wgrad_shape(2, 16, 16, 512, 256, 1, &seen);
  check_wgrad_shape(1, 32, 32, 256, 256, 0, &seen);
  ck_assert_msg(seen.splits && seen.strips && seen.images && seen.mid,
                "the wide shapes never had several K splits (%d), ranges running on to the next "
                "strip (%d) or image (%d), or starting part-way down a strip (%d): choose "
                "shapes for this device", seen.splits, seen.strips, seen.images, seen.mid);
}
END_TEST

/* Images 16 and 32 pixels wide: tiles of 4 and 2 whole rows (heights that end a tile part-way,
 * K splits that start part-way down an image and run on to the next), the U-Net's deep shapes,
 * reruns bit for bit; widths 8 and 24 keep rows of 64. */
START_TEST(wide_wgrad_narrow_images)
{
  wg_seen_t seen = {0, 0, 0, 0};
  check_wgrad_shape(2, 7, 32, 64, 128, 1, &seen);
  check_wgrad_shape(2, 7, 32, 64, 128, 0, &seen);
  check_wgrad_shape(3, 9, 16, 192, 320, 1, &seen);
  check_wgrad_shape(3, 9, 16, 192, 320, 0, &seen);
  check_wgrad_shape(2, 5, 8, 128, 64, 1, &seen);
  check_wgrad_shape(2, 5, 24, 128, 64, 1, &seen);
  check_wgrad_shape(6, 32, 32, 256, 256, 1, &seen);
  ck_assert_msg(seen.splits && seen.images && seen.mid,
                "the narrow shapes never had several K splits (%d), ranges running on to the "
                "next image (%d) or starting part-way down one (%d)", seen.splits, seen.images,
                seen.mid);
  check_wgrad_shape(6, 32, 32, 512, 512, 1, &seen);
  check_wgrad_shape(6, 16, 16, 1024, 1024, 1, &seen);
  const cf_shape_t sh = {6, 16, 16, 512, 512};
  bd_data_t b;
  bd_make(&b, &sh);
  wg_out_t x, y;
  wg_gpu_run(&b, 1, &x);
  wg_gpu_run(&b, 1, &y);
  ck_assert_msg(memcmp(x.dw, y.dw, x.count * sizeof *x.dw) == 0,
                "two narrow-image wgrad runs gave different dW");
  wg_out_free(&x);
  wg_out_free(&y);
  bd_free(&b);
}
END_TEST

START_TEST(wide_wgrad_unet_shape)
{
  /* the U-Net's 128 -> 128 at 128 x 128, batch 6: 1,536 row tiles in tens of K splits */
  wg_seen_t seen = {0, 0, 0, 0};
  check_wgrad_shape(6, 128, 128, 128, 128, 1, &seen);
  check_wgrad_shape(6, 128, 128, 128, 128, 0, &seen);
  ck_assert(seen.splits);
}
END_TEST

START_TEST(wide_wgrad_reruns_bitwise)
{
  const cf_shape_t sh = {6, 128, 128, 128, 128};
  bd_data_t b;
  bd_make(&b, &sh);
  wg_out_t x, y;
  wg_gpu_run(&b, 1, &x);
  wg_gpu_run(&b, 1, &y);
  ck_assert_msg(memcmp(x.dw, y.dw, x.count * sizeof *x.dw) == 0,
                "two wide wgrad runs gave different dW");
  ck_assert_msg(memcmp(x.part, y.part, (size_t)x.blocks * x.count * sizeof *x.part) == 0,
                "two wide wgrad runs gave different partials");
  wg_out_free(&x);
  wg_out_free(&y);
  bd_free(&b);
}
END_TEST

/* The split-K plan's rule (kernels/conv_sm90_wgrad_wide_cuda.cu) on this device's
 * multiprocessors, the workspace sizes, a batch of no pixels, the argument checks. */
START_TEST(wide_wgrad_plan_and_arguments)
{
  CU_OK(cudaSetDevice(0));
  int sms = 0;
  CU_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  static const int plans[][5] = {{6, 256, 256, 128, 64}, {6, 128, 128, 64, 128},
                                 {6, 128, 128, 128, 128}, {6, 64, 64, 256, 256},
                                 {6, 32, 32, 512, 512},  {6, 16, 16, 1024, 1024},
                                 {6, 16, 16, 512, 1024}, {2, 5, 70, 192, 320},
                                 {1, 1, 1, 128, 64},     {1, 9, 64, 128, 64}};
  for (size_t i = 0; i < sizeof plans / sizeof *plans; i++) {
    const int n = plans[i][0], h = plans[i][1], w = plans[i][2], ci = plans[i][3],
              co = plans[i][4];
    const sm90_wtile_t g = sm90_wtile_geometry(w);
    const long tiles = (long)n * sm90_wtile_per_strip(&g, h) * sm90_wtile_strips(&g, w),
               ot = (long)(ci / 64) * (co / 64);
    int splits = 0, per = 0;
    ck_assert(conv_sm90_wgrad_plan_shape(0, n, h, w, ci, co, &splits, &per) == 0);
    ck_assert_msg(per >= 1 && (long)(splits - 1) * per < tiles && tiles <= (long)splits * per,
                  "%d->%d %dx%dx%d: %d splits of %d for %ld tiles", ci, co, n, h, w, splits, per,
                  tiles);
    ck_assert_msg(splits == 1 || per >= 8, "%d->%d: splits of %d tiles", ci, co, per);
    ck_assert_msg(splits * ot <= (ot > sms ? ot : sms), "%d->%d: %d splits x %ld tiles on %d SMs",
                  ci, co, splits, ot, sms);
    const size_t ws = conv_sm90_wgrad_ws_bytes_shape(0, n, h, w, ci, co);
    ck_assert_uint_eq(ws, (size_t)splits * 9 * ci * co * sizeof(float));
    ck_assert(ws <= (size_t)64 << 20);
  }
  /* full resolution: every multiprocessor busy; deep and wide: no split */
  int splits = 0, per = 0;
  ck_assert(conv_sm90_wgrad_plan_shape(0, 6, 256, 256, 128, 64, &splits, &per) == 0);
  ck_assert_msg(splits <= sms / 2 && 10 * splits >= 9 * (sms / 2), "%d splits on %d SMs", splits,
                sms);
  ck_assert(conv_sm90_wgrad_plan_shape(0, 6, 16, 16, 1024, 1024, &splits, &per) == 0);
  ck_assert_int_eq(splits, 1);
  /* 64 -> 64 is the first kernel's plan; shapes not covered have none */
  ck_assert_uint_eq(conv_sm90_wgrad_ws_bytes_shape(0, 6, 256, 256, 64, 64),
                    conv_sm90_wgrad_ws_bytes(0, 6, 256, 256));
  ck_assert_uint_eq(conv_sm90_wgrad_ws_bytes_shape(0, 1, 8, 8, 96, 128), 0);
  ck_assert_uint_eq(conv_sm90_wgrad_ws_bytes_shape(0, 1, 8, 8, 128, 2048), 0);
  ck_assert_int_eq(conv_sm90_wgrad_plan_shape(0, 1, 8, 8, 128, 32, &splits, &per), -1);
  ck_assert_int_eq(conv_sm90_wgrad_plan_shape(0, 1, 0, 8, 128, 64, &splits, &per), -1);
  /* no pixels: dW zero */
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 8 << 20));
  CU_OK(cudaMemset(buf, 0xff, 8 << 20));
  const size_t nw = (size_t)9 * 128 * 256;
  char err[256] = "";
  conv_sm90_wgrad_t a = {.n = 0, .h = 8, .w = 8, .cin = 128, .cout = 256, .x = buf, .dy = buf,
                         .dweight = (float *)(buf + (2 << 20)), .ws = buf + (4 << 20)};
  ck_assert_msg(conv_sm90_wgrad(&a, err, sizeof err) == 0, "%s", err);
  float *hw = malloc(nw * sizeof *hw);
  CU_OK(cudaMemcpy(hw, a.dweight, nw * sizeof *hw, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < nw; i++) ck_assert(hw[i] == 0.f);
  free(hw);
  /* the argument checks: nothing queued */
  a.n = 1;
  a.cin = 96;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "64 -> 64") && strstr(err, "1024"), "%s", err);
  a.cin = 2048;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "2048 -> 256"), "%s", err);
  a.cin = 128;
  a.dy = buf + 2;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "16-byte"), "%s", err);
  a.dy = buf;
  a.shift = (const float *)buf;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "scale and shift"), "%s", err);
  a.shift = NULL;
  a.ws = NULL;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "workspace"), "%s", err);
  a.ws = buf + (4 << 20);
  a.h = 0;
  ck_assert_int_eq(conv_sm90_wgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "invalid"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(buf);
}
END_TEST

/* 64 -> 128 in the COUT_M layout: the 64 -> 64 kernel with each block on one half of the
 * output channels (conv_sm90.h), the forward (prologue, statistics) and the plain dgrad of
 * 128 -> 64 (dy 64 channels, g 128), against the same references as 64 -> 64; odd shapes with
 * fewer tiles than blocks (the halves' block counts cut down), edges cutting tiles, batches. */
START_TEST(halves_odd_shapes)
{
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  static const int shapes[][3] = {{2, 9, 70}, {1, 1, 1}, {3, 5, 130}, {1, 2, 64}, {2, 64, 128}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    const int n = shapes[i][0], h = shapes[i][1], w = shapes[i][2];
    check_shape(n, h, w, 64, 128, 1, 1, 1);
    check_shape(n, h, w, 64, 128, 0, 0, 1);
    check_shape(n, h, w, 64, 128, 0, 1, 1);
    check_dgrad_shape(n, h, w, 128, 64, 0, 0);
  }
  check_shape(2, 9, 70, 64, 128, 1, 0, 1);
  g_layout = 0;
}
END_TEST

/* The U-Net's two: enc1.conv1's forward (64 -> 128 at 128 x 128, prologue and statistics) and
 * dec0.conv1's input gradient (its forward 128 -> 64 at 256 x 256: dy 64 channels, g the
 * concat's 128). */
START_TEST(halves_unet_shapes)
{
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  check_shape(6, 128, 128, 64, 128, 1, 1, 0);
  check_dgrad_shape(6, 256, 256, 128, 64, 0, 0);
  g_layout = 0;
}
END_TEST

/* Two runs of each bit for bit; against the wide kernel at the same shapes (the default
 * layout), reported, not required. */
START_TEST(halves_reruns_bitwise)
{
  cf_data_t d;
  cf_make(&d, 6, 128, 128, 64, 128);
  gpu_out_t a, c;
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  check_reruns(&d, &a);
  g_layout = 0;
  gpu_run(&d, 1, 1, &c);
  size_t out = (size_t)6 * 128 * 128 * 128, same = 0;
  for (size_t i = 0; i < out; i++) same += a.raw[i] == c.raw[i];
  printf("conv_sm90 64 -> 128: %zu of %zu outputs bit-equal between COUT_M halves and the wide "
         "kernel\n", same, out);
  gpu_out_free(&a);
  gpu_out_free(&c);
  cf_free(&d);

  const cf_shape_t sh = {6, 256, 256, 128, 64};
  bd_data_t b;
  bd_make(&b, &sh);
  dg_out_t x, y;
  g_layout = CONV_SM90_LAYOUT_COUT_M;
  dg_gpu_run(&b, 0, 0, &x);
  dg_gpu_run(&b, 0, 0, &y);
  ck_assert_msg(memcmp(x.raw, y.raw, b.P * 128 * 2) == 0,
                "two 128 -> 64 dgrad runs wrote different gradients");
  dg_out_free(&x);
  dg_out_free(&y);
  bd_free(&b);
  g_layout = 0;
}
END_TEST

/* The halves' dgrad is plain: a mask or sums asked for is refused before anything is queued. */
START_TEST(halves_bad_arguments)
{
  CU_OK(cudaSetDevice(0));
  char *buf = NULL;
  CU_OK(cudaMalloc((void **)&buf, 1 << 20));
  char err[256] = "";
  conv_sm90_dgrad_t a = {.n = 1, .h = 8, .w = 8, .cin = 128, .cout = 64, .dy = buf,
                         .weight = buf, .x = buf, .g = buf + 65536, .ws = buf + 131072,
                         .layout = CONV_SM90_LAYOUT_COUT_M};
  a.scale = (const float *)(buf + 4096);
  a.shift = (const float *)(buf + 8192);
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "plain"), "%s", err);
  a.scale = a.shift = NULL;
  a.saved = (const double *)(buf + 4096);
  a.sums = (double *)(buf + 8192);
  err[0] = 0;
  ck_assert_int_eq(conv_sm90_dgrad(&a, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "plain"), "%s", err);
  ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess); /* nothing was queued */
  cudaFree(buf);
}
END_TEST

/* In a child process: whether device 0 can run the kernel (0), else why not. */
static int sm90_check_device0(char *msg, size_t len) { return conv_sm90_check(0, msg, len); }
static int sm90_wgrad_check_device0(char *msg, size_t len)
{
  return conv_sm90_wgrad_check(0, msg, len);
}

/* Small shapes through every kernel, the narrow and the wide ones, each direction with and
 * without its fused parts, each variant with statistics: the case bench/gpu_check.sh runs under
 * compute-sanitizer, small enough to finish there in seconds. Tiles cut at the images' edges; the wide
 * kernels with several input chunks and an odd number of N tiles (192 -> 320) and, for wgrad,
 * several K splits (3 x 5 x 130). */
START_TEST(sanitize_small)
{
  wg_seen_t seen = {0, 0, 0, 0};
  check_against_reference(2, 9, 70, 1, 1, 1);
  check_against_reference(2, 9, 70, 0, 0, 1);
  check_against_reference(2, 9, 70, 0, 1, 1); /* statistics without the prologue */
  check_dgrad(2, 9, 70, 1, 1);
  check_dgrad(2, 9, 70, 0, 0);
  check_dgrad(2, 9, 70, 0, 1); /* sums without the mask */
  check_wgrad(2, 9, 70, 1, &seen);
  check_wgrad(2, 9, 70, 0, &seen);
  check_shape(2, 5, 70, 192, 320, 1, 1, 1);
  check_shape(2, 5, 70, 192, 320, 0, 0, 1);
  check_shape(2, 9, 16, 192, 320, 1, 1, 1); /* a narrow image: tiles of 4 rows of 16 */
  check_dgrad_shape(2, 5, 70, 192, 320, 1, 1);
  check_dgrad_shape(2, 9, 16, 192, 320, 1, 1);
  check_dgrad_shape(2, 5, 70, 192, 320, 0, 0);
  check_wgrad_shape(3, 5, 130, 64, 128, 1, &seen);
  check_wgrad_shape(3, 5, 130, 64, 128, 0, &seen);
  check_wgrad_shape(2, 9, 16, 192, 320, 1, &seen); /* narrow: tiles of 4 rows of 16 */
  check_wgrad_shape(2, 5, 32, 64, 128, 0, &seen);  /* and of 2 rows of 32 */
  g_layout = CONV_SM90_LAYOUT_COUT_M; /* the 64 -> 64 kernel's other layout */
  check_against_reference(2, 9, 70, 1, 1, 1);
  check_against_reference(2, 9, 70, 0, 0, 1);
  check_against_reference(2, 9, 70, 0, 1, 1);
  check_dgrad(2, 9, 70, 1, 1);
  check_dgrad(2, 9, 70, 0, 0);
  check_dgrad(2, 9, 70, 0, 1);
  check_shape(2, 9, 70, 64, 128, 1, 1, 1); /* 64 -> 128 in output-channel halves */
  check_dgrad_shape(2, 9, 70, 128, 64, 0, 0);
  g_layout = 0;
}
END_TEST

static Suite *make_conv_sm90_suite(const suite_env_t *env)
{
  Suite *s = suite_create("conv_sm90");
  if (!suite_gpu_cases(env, 1, 1, "the sm_90 convolution")) return s;
  char why[256];
  if (suite_ask_child(sm90_check_device0, why, sizeof why) != 0) {
    printf("%s: not registered (SKIP): the sm_90 convolution: %s\n", env->name, why);
    return s;
  }
  TCase *tc = SUITE_CASE(s, "sm90", odd_shapes, unet_shape, reruns_bitwise, empty_batch,
                         bad_arguments);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sm90_dgrad", dgrad_odd_shapes, dgrad_unet_shape, dgrad_reruns_bitwise,
                  dgrad_bad_arguments);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sm90_cm", cm_odd_shapes, cm_unet_shape, cm_reruns_bitwise, cm_bad_layout);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sm90_halves", halves_odd_shapes, halves_unet_shapes, halves_reruns_bitwise,
                  halves_bad_arguments);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sm90_wide", wide_odd_shapes, wide_unet_shapes, wide_reruns_bitwise,
                  wide_dgrad_shapes, wide_narrow_images, wide_dgrad_reruns_bitwise,
                  wide_empty_and_bad_arguments);
  tcase_set_timeout(tc, 300);
  if (suite_ask_child(sm90_wgrad_check_device0, why, sizeof why) != 0) {
    printf("%s: wgrad not registered (SKIP): %s\n", env->name, why);
    return s;
  }
  tc = SUITE_CASE(s, "sm90_wgrad", wgrad_shapes, wgrad_reruns_bitwise,
                  wgrad_empty_and_bad_arguments);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sm90_wgrad_wide", wide_wgrad_shapes, wide_wgrad_narrow_images,
                  wide_wgrad_unet_shape, wide_wgrad_reruns_bitwise,
                  wide_wgrad_plan_and_arguments);
  tcase_set_timeout(tc, 300);
  tc = SUITE_CASE(s, "sanitize", sanitize_small);
  tcase_set_timeout(tc, 300);
  return s;
}

SUITE_MAIN("check_conv_sm90_cuda", make_conv_sm90_suite, SUITE_SOME_GPU)
