/* conv_sm90_bench.c — the fused 3x3 convolutions on Hopper (kernels/conv_sm90.h), forward,
 * dgrad and wgrad, on one layer shape, checked and timed against cuDNN. On random data (never
 * zeros):
 *
 *   check   ours (BN prologue + statistics, and plain) against the CPU reference
 *           (kernels/conv_fused_cpu.h, one thread per image) with every output poisoned first:
 *           relative L2 error, bit-equal share, elements off the bound, NaN left; the
 *           statistics against the reference's and against the f64 sums of what the kernel
 *           wrote; two runs bit for bit; cuDNN's plain output against ours; our plain dgrad
 *           against cuDNN's (the GPU test checks it against the CPU reference). Then
 *           dev/wgmma_desc_probe.cu: wgmma descriptors starting part-way into a swizzle
 *           pattern, K-major A and MN-major B.
 *   time    with CUDA events after warm-up, the median over rounds of a batch of launches,
 *           rotating over 3 input/output sets: ours fused, ours plain; cuDNN's forward with the
 *           trainer's choice (heuristics, deterministic) and with cudnnFind's fastest; and what
 *           the trainer does today for the same work (bn_apply with ReLU, cuDNN's forward,
 *           bn_stats: the CUDA ops table's passes). dgrad the same way: ours with the ReLU mask
 *           and the BatchNorm backward sums, ours plain, cuDNN's backward data (trainer's
 *           choice, fastest), and today's cuDNN backward data + bn_bwd_reduce with its ReLU.
 *           wgrad: ours with the prologue recomputed from x, ours plain, cuDNN's backward
 *           filter on the activations the trainer keeps (trainer's choice, fastest).
 *
 * Prints the shape's two numbers (FLOPs, the fewest HBM bytes: x read, y written, weights) and
 * their floors, then one row per variant: time, TFLOP/s, share of the bf16 matrix ceiling
 * (-p, default 790 TFLOP/s), the bytes it must move and the rate that is. Exits 1 when a check
 * fails (after printing the table), 2 on a usage or device error.
 *
 * The shape: -i cin -o cout channels (multiples of 64 up to 1024; default 64 -> 64), batch -b,
 * image -s size (square) or -H height -W width (default 6 x 256 x 256). For a shape other than
 * 64 -> 64 the wide kernels run (kernels/conv_sm90_wide_cuda.cu, and
 * kernels/conv_sm90_wgrad_wide_cuda.cu for wgrad); -i 64 -o 128 adds the COUT_M rows (the
 * 64 -> 64 kernel in output-channel halves) and -i 128 -o 64 the COUT_M plain dgrad row in
 * those halves, each checked first (the forward against the CPU reference, dgrad against
 * cuDNN's). The wgrad check: ours plain against cuDNN's
 * backward filter of the same x and dy (cuDNN's dW is bf16 in the trainer's table: relative L2
 * within 4e-3), and ours with the prologue twice, bit for bit (the split plan is printed).
 *
 * With -X tiles it runs only dev/ksplit_exchange_probe.cu: what the f32 exchange of a K split
 * between a block's two consumer warpgroups costs a tile, against the tile's matrix time at the
 * ceiling (-p) for the shape's 2 x 64-pixel tile (-i, -o), then exits.
 *
 * usage: conv_sm90_bench [-i cin] [-o cout] [-b batch] [-s size | -H height -W width]
 *                        [-r rounds] [-k launches] [-p peak-tflops] [-X tiles]
 * (bench/conv_sm90_gpu.sh runs it on the GPU machine; SHMDDP_CONV_VERBOSE=1 prints cuDNN's
 * algorithms) */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/conv_fused_cpu.h"
#include "kernels/conv_sm90.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"
#include "dev/cuda_harness.h"
#include "dev/ksplit_exchange_probe.h"
#include "dev/wgmma_desc_probe.h"
#include "tests/conv_fused_testutil.h"

#define DIE(...) harness_die(2, __VA_ARGS__)

enum { SETS = 3 };

static int CIN = CONV_SM90_CIN, COUT = CONV_SM90_COUT;
static int N = 6, H = 256, W = 256, ROUNDS = 21, LAUNCHES = 10;
static int WIDE;          /* not 64 -> 64: the wide kernel */
/* 64 -> 128 (-i 64 -o 128): the forward also in COUT_M's output-channel halves; 128 -> 64
 * (-i 128 -o 64): its plain dgrad (dy 64 channels, g 128) also in those (conv_sm90.h) */
static int HALVES_FWD, HALVES_DG;
static double PEAK = 790e12;
static cudaStream_t S;
static size_t P;          /* pixels */
/* dx: inputs (cin channels, random); dy: forward outputs (cout); dz: dgrad's inputs (cout,
 * random); dg: dgrad's outputs (cin) */
static void *dx[SETS], *dy[SETS], *dz[SETS], *dg[SETS], *dw, *dxa, *dws, *dgamma, *dbeta, *ddg,
    *ddb, *dwg, *dwgws;
static float *dscale, *dshift;
static double *dstats, *dsaved, *dsums;
static void *cws;         /* the ops tables' convolution workspace */
static ops_t trainer, fastest;
static ops_conv_t conv_t, conv_f;
static int failed;

static void *dev(size_t bytes)
{
  void *p = NULL;
  CU(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

static uint16_t bits_of(float v) /* v is a bf16 value */
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return (uint16_t)(u >> 16);
}

static void *up_bf16(const float *v, size_t n)
{
  uint16_t *h = malloc(n * sizeof *h);
  if (!h) DIE("out of memory");
  for (size_t i = 0; i < n; i++) h[i] = bits_of(conv_fused_round_bf16(v[i]));
  void *d = dev(n * sizeof *h);
  CU(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
  free(h);
  return d;
}

static float *down_bf16(const void *d, size_t n, uint16_t **raw)
{
  uint16_t *h = malloc(n * sizeof *h);
  float *f = malloc(n * sizeof *f);
  if (!h || !f) DIE("out of memory");
  CU(cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)h[i] << 16;
    memcpy(&f[i], &u, sizeof u);
  }
  if (raw) *raw = h;
  else free(h);
  return f;
}

/* ---- the CPU reference, one thread per image ---- */

typedef struct {
  const cf_data_t *d;
  int img, pro;
  float *y;
  double stats[2 * CONV_SM90_MAX_CHANNELS + 1];
  int rc;
  char err[256];
} ref_job_t;

static void *ref_image(void *arg)
{
  ref_job_t *j = arg;
  size_t hw = (size_t)H * W;
  conv_fused_ref_t a = {.n = 1, .h = H, .w = W, .cin = CIN, .cout = COUT,
                        .x = j->d->x + j->img * hw * CIN, .weight = j->d->weight,
                        .scale = j->pro ? j->d->scale : NULL, .shift = j->pro ? j->d->shift : NULL,
                        .y = j->y + j->img * hw * COUT, .stats = j->stats};
  j->rc = conv_fused_ref(&a, j->err, sizeof j->err);
  return NULL;
}

static void reference(const cf_data_t *d, int pro, float *y, double *stats)
{
  ref_job_t *jobs = calloc((size_t)N, sizeof *jobs);
  pthread_t *th = calloc((size_t)N, sizeof *th);
  if (!jobs || !th) DIE("out of memory");
  for (int i = 0; i < N; i++) {
    jobs[i] = (ref_job_t){.d = d, .img = i, .pro = pro, .y = y};
    if (pthread_create(&th[i], NULL, ref_image, &jobs[i])) DIE("pthread_create failed");
  }
  memset(stats, 0, (2 * (size_t)COUT + 1) * sizeof *stats);
  for (int i = 0; i < N; i++) { /* image order: the sums do not depend on thread timing */
    pthread_join(th[i], NULL);
    if (jobs[i].rc) DIE("%s", jobs[i].err);
    for (int k = 0; k <= 2 * COUT; k++) stats[k] += jobs[i].stats[k];
  }
  free(jobs);
  free(th);
}

/* ---- the variants ---- */

/* The 64 -> 64 kernel's GEMM layout of the rows below (conv_sm90.h; 0: the default). */
static int layout = 0;

static void ours(int set, int pro, int stats, void *y)
{
  conv_sm90_fwd_t a = {.n = N, .h = H, .w = W, .cin = CIN, .cout = COUT, .x = dx[set],
                       .weight = dw,
                       .scale = pro ? dscale : NULL, .shift = pro ? dshift : NULL,
                       .y = y ? y : dy[set], .stats = stats ? dstats : NULL, .ws = dws,
                       .stream = S, .layout = layout};
  char err[256];
  if (conv_sm90_fwd(&a, err, sizeof err)) DIE("%s", err);
}

static void v_fused(int set) { ours(set, 1, 1, NULL); }
static void v_plain(int set) { ours(set, 0, 0, NULL); }
/* a first block's use (ops.h OPS_FUSE_STATS): no prologue, the statistics in the output pass */
static void v_stats(int set) { ours(set, 0, 1, NULL); }
/* the prologue alone (no statistics): with v_plain and v_stats, what each fused part costs */
static void v_pro(int set) { ours(set, 1, 0, NULL); }

static void cudnn_fwd(ops_t *o, ops_conv_t *c, const void *x, void *y)
{
  if (o->conv_fwd(o, c, N, x, dw, NULL, y, cws)) DIE("cuDNN forward: %s", o->last_error(o));
}

static void v_cudnn_trainer(int set) { cudnn_fwd(&trainer, &conv_t, dx[set], dy[set]); }
static void v_cudnn_fastest(int set) { cudnn_fwd(&fastest, &conv_f, dx[set], dy[set]); }

/* cuDNN's forward of x into dy[set], then this layer's BN statistics as a pass. */
static void cudnn_fwd_stats(const void *x, int set)
{
  cudnn_fwd(&trainer, &conv_t, x, dy[set]);
  if (trainer.bn_stats(&trainer, dy[set], P, COUT, dstats))
    DIE("bn_stats: %s", trainer.last_error(&trainer));
}

/* The same work as the trainer does it today: the previous layer's BN apply + ReLU as a pass,
 * the convolution, this layer's BN statistics as a pass. */
static void v_trainer_today(int set)
{
  if (trainer.bn_apply(&trainer, dx[set], P, CIN, dsaved, dgamma, dbeta, 1, dxa))
    DIE("bn_apply: %s", trainer.last_error(&trainer));
  cudnn_fwd_stats(dxa, set);
}

/* The same work for a first block: the convolution, its BN statistics as a pass. */
static void v_stats_today(int set) { cudnn_fwd_stats(dx[set], set); }

/* dgrad: dy is dz[set] (random, never zero), x the next set's input, g written to dg[set]. */
static void ours_dgrad(int set, int mask, int sums)
{
  conv_sm90_dgrad_t a = {.n = N, .h = H, .w = W, .cin = CIN, .cout = COUT, .dy = dz[set],
                         .weight = dw, .x = mask ? dx[(set + 1) % SETS] : NULL,
                         .scale = mask ? dscale : NULL, .shift = mask ? dshift : NULL,
                         .saved = sums ? dsaved : NULL, .g = dg[set],
                         .sums = sums ? dsums : NULL, .ws = dws, .stream = S, .layout = layout};
  char err[256];
  if (conv_sm90_dgrad(&a, err, sizeof err)) DIE("%s", err);
}

/* the same in the COUT_M layout (64 -> 64; 64 -> 128 in halves) */
static void ours_cm(int set, int pro, int stats)
{
  layout = CONV_SM90_LAYOUT_COUT_M;
  ours(set, pro, stats, NULL);
  layout = 0;
}
static void v_cm_fused(int set) { ours_cm(set, 1, 1); }
static void v_cm_plain(int set) { ours_cm(set, 0, 0); }
static void v_cm_pro(int set) { ours_cm(set, 1, 0); }

static void v_dgrad_fused(int set) { ours_dgrad(set, 1, 1); }
static void v_dgrad_plain(int set) { ours_dgrad(set, 0, 0); }
/* the mask alone (no sums): with the two above, what each fused part costs */
static void v_dgrad_mask(int set) { ours_dgrad(set, 1, 0); }
static void ours_dgrad_cm(int set, int mask, int sums)
{
  layout = CONV_SM90_LAYOUT_COUT_M;
  ours_dgrad(set, mask, sums);
  layout = 0;
}
static void v_cm_dgrad_fused(int set) { ours_dgrad_cm(set, 1, 1); }
static void v_cm_dgrad_plain(int set) { ours_dgrad_cm(set, 0, 0); }

static void cudnn_dgrad(ops_t *o, ops_conv_t *c, const void *gy, void *gx)
{
  if (o->conv_bwd_data(o, c, N, gy, dw, gx, cws))
    DIE("cuDNN backward data: %s", o->last_error(o));
}

static void v_dgrad_cudnn_trainer(int set) { cudnn_dgrad(&trainer, &conv_t, dz[set], dg[set]); }
static void v_dgrad_cudnn_fastest(int set) { cudnn_dgrad(&fastest, &conv_f, dz[set], dg[set]); }

/* dgrad as the trainer does it today: cuDNN's backward data, then the BatchNorm backward's
 * reduction with the ReLU mask recomputed from x (bn_bwd_apply follows in both ways). */
static void v_dgrad_today(int set)
{
  cudnn_dgrad(&trainer, &conv_t, dz[set], dg[set]);
  ops_relu_t relu = {.gamma = dgamma, .beta = dbeta};
  if (trainer.bn_bwd_reduce(&trainer, dg[set], &relu, dx[(set + 1) % SETS], P, CIN, dsaved, dsums,
                            ddg, ddb, 0))
    DIE("bn_bwd_reduce: %s", trainer.last_error(&trainer));
}

/* wgrad: x is dx[set], dy the next set's dgrad input (random), dW into dwg. */
static void ours_wgrad(int set, int pro)
{
  conv_sm90_wgrad_t a = {.n = N, .h = H, .w = W, .cin = CIN, .cout = COUT, .x = dx[set],
                         .dy = dz[(set + 1) % SETS], .scale = pro ? dscale : NULL,
                         .shift = pro ? dshift : NULL, .dweight = dwg, .ws = dwgws, .stream = S};
  char err[256];
  if (conv_sm90_wgrad(&a, err, sizeof err)) DIE("%s", err);
}

static void v_wgrad_fused(int set) { ours_wgrad(set, 1); }
static void v_wgrad_plain(int set) { ours_wgrad(set, 0); }

static void cudnn_wgrad(ops_t *o, ops_conv_t *c, int set)
{
  if (o->conv_bwd_filter(o, c, N, dx[set], dz[(set + 1) % SETS], dwg, NULL, 0, cws))
    DIE("cuDNN backward filter: %s", o->last_error(o));
}

static void v_wgrad_cudnn_trainer(int set) { cudnn_wgrad(&trainer, &conv_t, set); }
static void v_wgrad_cudnn_fastest(int set) { cudnn_wgrad(&fastest, &conv_f, set); }

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median over ROUNDS of the time per launch of LAUNCHES back-to-back launches (microseconds). */
static double time_us(void (*fn)(int))
{
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  for (int i = 0; i < 3 * SETS; i++) fn(i % SETS); /* warm-up */
  CU(cudaStreamSynchronize(S));
  double *t = malloc(ROUNDS * sizeof *t);
  for (int r = 0; r < ROUNDS; r++) {
    CU(cudaEventRecord(a, S));
    for (int i = 0; i < LAUNCHES; i++) fn(i % SETS);
    CU(cudaEventRecord(b, S));
    CU(cudaEventSynchronize(b));
    float ms;
    CU(cudaEventElapsedTime(&ms, a, b));
    t[r] = 1e3 * ms / LAUNCHES;
  }
  CU(cudaGetLastError());
  qsort(t, ROUNDS, sizeof *t, cmp_double);
  double med = t[ROUNDS / 2];
  free(t);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return med;
}

/* ---- checks ---- */

static void verdict(int ok, const char *what)
{
  printf("check %-58s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failed = 1;
}

/* got against ref (what it is checked against: `against`) within cf_compare's bound. */
static void check_output(const char *what, const char *against, const float *got,
                         const float *ref, double rms, size_t out)
{
  double *mag = malloc(out * sizeof *mag);
  if (!mag) DIE("out of memory");
  for (size_t i = 0; i < out; i++) mag[i] = 1e-4 * rms * 1048576.0; /* 2^-20 mag = 1e-4 RMS */
  cf_cmp_t c = cf_compare(got, ref, mag, out);
  printf("      %s: relative L2 %.2e, bit-equal %.2f%%, off the bound %zu, unwritten (NaN) %zu\n",
         what, c.rel_l2, 100.0 * c.exact / out, c.bad, c.nan);
  char line[128];
  snprintf(line, sizeof line, "%s against %s", what, against);
  verdict(c.nan == 0 && c.bad == 0 && c.rel_l2 < 2e-3 && c.exact * 100 >= out * 95, line);
  free(mag);
}

static double rms_of(const float *v, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)v[i] * v[i];
  return sqrt(s / (double)(n ? n : 1));
}

/* wgrad: plain against cuDNN's backward filter (bf16 dW), with the prologue twice bit for
 * bit; dW poisoned with NaN before each of ours. */
static void wgrad_checks(void)
{
  const size_t nw = (size_t)9 * CIN * COUT;
  float *a = malloc(nw * sizeof *a), *b = malloc(nw * sizeof *b), *c = malloc(nw * sizeof *c);
  if (!a || !b || !c) DIE("out of memory");
  int splits = 0, per = 0;
  if (conv_sm90_wgrad_plan_shape(0, N, H, W, CIN, COUT, &splits, &per))
    DIE("no wgrad plan for %d -> %d", CIN, COUT);
  printf("      wgrad: %d K splits of %d row tiles, %d output tiles of 64 x 64 channels\n", splits,
         per, (CIN / 64) * (COUT / 64));
  CU(cudaMemset(dwg, 0xff, nw * sizeof(float)));
  ours_wgrad(0, 0);
  CU(cudaStreamSynchronize(S));
  CU(cudaGetLastError());
  CU(cudaMemcpy(a, dwg, nw * sizeof *a, cudaMemcpyDeviceToHost));
  cudnn_wgrad(&trainer, &conv_t, 0);
  CU(cudaStreamSynchronize(S));
  float *dn = down_bf16(dwg, nw, NULL);
  double num = 0, den = 0;
  size_t nan = 0;
  for (size_t i = 0; i < nw; i++) {
    nan += isnan(a[i]);
    num += ((double)a[i] - dn[i]) * ((double)a[i] - dn[i]);
    den += (double)dn[i] * dn[i];
  }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  printf("      plain wgrad against cuDNN's: relative L2 %.2e, unwritten (NaN) %zu\n", rel, nan);
  verdict(nan == 0 && rel < 4e-3, "plain wgrad against cuDNN's backward filter");
  CU(cudaMemset(dwg, 0xff, nw * sizeof(float)));
  ours_wgrad(0, 1);
  CU(cudaStreamSynchronize(S));
  CU(cudaMemcpy(b, dwg, nw * sizeof *b, cudaMemcpyDeviceToHost));
  CU(cudaMemset(dwg, 0xff, nw * sizeof(float)));
  ours_wgrad(0, 1);
  CU(cudaStreamSynchronize(S));
  CU(cudaMemcpy(c, dwg, nw * sizeof *c, cudaMemcpyDeviceToHost));
  verdict(!memcmp(b, c, nw * sizeof *b), "wgrad with the prologue, two runs bit for bit");
  free(dn);
  free(a);
  free(b);
  free(c);
}

static void checks(const cf_data_t *d)
{
  const int C = COUT;
  size_t out = P * C;
  float *ref = malloc(out * sizeof *ref);
  static double rst[2 * CONV_SM90_MAX_CHANNELS + 1], st[2 * CONV_SM90_MAX_CHANNELS + 1],
      st2[2 * CONV_SM90_MAX_CHANNELS + 1];
  const size_t stb = (2 * (size_t)C + 1) * sizeof *st;
  if (!ref) DIE("out of memory");
  /* fused: prologue + statistics, outputs and statistics poisoned with NaN */
  reference(d, 1, ref, rst);
  CU(cudaMemset(dy[0], 0xff, out * 2));
  CU(cudaMemset(dstats, 0xff, stb));
  ours(0, 1, 1, NULL);
  CU(cudaStreamSynchronize(S));
  CU(cudaGetLastError());
  uint16_t *raw1, *raw2;
  float *got = down_bf16(dy[0], out, &raw1);
  CU(cudaMemcpy(st, dstats, stb, cudaMemcpyDeviceToHost));
  check_output("fused output", "the CPU reference", got, ref, rms_of(ref, out), out);
  static double own[2 * CONV_SM90_MAX_CHANNELS];
  memset(own, 0, 2 * (size_t)C * sizeof *own);
  for (size_t p = 0; p < P; p++)
    for (int k = 0; k < C; k++) {
      own[k] += got[p * C + k];
      own[C + k] += (double)got[p * C + k] * got[p * C + k];
    }
  double worst = 0;
  for (int k = 0; k < 2 * C; k++) worst = fmax(worst, fabs(st[k] - rst[k]) / fmax(fabs(rst[k]), 1e-30));
  printf("      statistics: largest relative difference from the reference's %.2e\n", worst);
  verdict(cf_stats_bad(st, rst, got, ref, P, C, 1e-5) == 0 && st[2 * C] == (double)P,
          "statistics against the reference's");
  verdict(cf_stats_bad(st, own, got, got, P, C, 1e-5) == 0,
          "statistics against the sums of the kernel's outputs");
  /* a second run, bit for bit */
  CU(cudaMemset(dy[1], 0xff, out * 2));
  ours(0, 1, 1, dy[1]);
  CU(cudaStreamSynchronize(S));
  free(down_bf16(dy[1], out, &raw2));
  CU(cudaMemcpy(st2, dstats, stb, cudaMemcpyDeviceToHost));
  verdict(!memcmp(raw1, raw2, out * 2) && !memcmp(st, st2, stb), "two runs bit for bit");
  free(raw1);
  free(raw2);
  free(got);
  /* plain: no prologue, no statistics; cuDNN's output of the same convolution beside it */
  reference(d, 0, ref, rst);
  CU(cudaMemset(dy[0], 0xff, out * 2));
  ours(0, 0, 0, NULL);
  CU(cudaStreamSynchronize(S));
  CU(cudaGetLastError());
  got = down_bf16(dy[0], out, NULL);
  double rms = rms_of(ref, out);
  check_output("plain output", "the CPU reference", got, ref, rms, out);
  CU(cudaMemset(dy[1], 0xff, out * 2));
  cudnn_fwd(&trainer, &conv_t, dx[0], dy[1]);
  CU(cudaStreamSynchronize(S));
  float *dn = down_bf16(dy[1], out, NULL);
  check_output("cuDNN's output (the reference checked)", "the CPU reference", dn, ref, rms, out);
  free(dn);
  free(got);
  if (HALVES_FWD) { /* COUT_M's output-channel halves, plain */
    CU(cudaMemset(dy[0], 0xff, out * 2));
    ours_cm(0, 0, 0);
    CU(cudaStreamSynchronize(S));
    CU(cudaGetLastError());
    got = down_bf16(dy[0], out, NULL);
    check_output("COUT_M halves' plain output", "the CPU reference", got, ref, rms, out);
    free(got);
  }
  /* plain dgrad of dz[0] against cuDNN's backward data of the same */
  const size_t gout = P * CIN;
  CU(cudaMemset(dg[0], 0xff, gout * 2));
  ours_dgrad(0, 0, 0);
  CU(cudaMemset(dg[1], 0xff, gout * 2));
  cudnn_dgrad(&trainer, &conv_t, dz[0], dg[1]);
  CU(cudaStreamSynchronize(S));
  CU(cudaGetLastError());
  got = down_bf16(dg[0], gout, NULL);
  dn = down_bf16(dg[1], gout, NULL);
  check_output("plain dgrad", "cuDNN's", got, dn, rms_of(dn, gout), gout);
  free(got);
  if (HALVES_DG) { /* COUT_M's output-channel halves (g's 128 channels), plain */
    CU(cudaMemset(dg[0], 0xff, gout * 2));
    ours_dgrad_cm(0, 0, 0);
    CU(cudaStreamSynchronize(S));
    CU(cudaGetLastError());
    got = down_bf16(dg[0], gout, NULL);
    check_output("COUT_M halves' plain dgrad", "cuDNN's", got, dn, rms_of(dn, gout), gout);
    free(got);
  }
  free(dn);
  free(ref);
  wgrad_checks();
}

/* ---- setup, table ---- */

static void usage(void)
{
  fprintf(stderr, "usage: conv_sm90_bench [-i cin] [-o cout] [-b batch] [-s size | -H height "
          "-W width] [-r rounds] [-k launches] [-p peak-tflops] [-X tiles]\n");
  exit(2);
}

static void row(const char *name, double us, double bytes, double flops)
{
  double s = us * 1e-6;
  printf("%-44s %9.1f %8.1f %6.1f%% %9.1f %8.0f\n", name, us, flops / s / 1e12,
         100.0 * flops / s / PEAK, bytes / 1e6, bytes / s / 1e9);
}

int main(int argc, char **argv)
{
  int opt, xtiles = 0;
  while ((opt = getopt(argc, argv, "i:o:b:s:H:W:r:k:p:X:")) != -1) {
    char *end;
    long v = strtol(optarg, &end, 10);
    if (opt == 'p') {
      double pk = strtod(optarg, &end);
      if (*end || !(pk > 0)) usage();
      PEAK = pk * 1e12;
      continue;
    }
    if (*end || v < 1 || v > 100000) usage();
    if (opt == 'b') N = (int)v;
    else if (opt == 's') H = W = (int)v;
    else if (opt == 'H') H = (int)v;
    else if (opt == 'W') W = (int)v;
    else if (opt == 'i') CIN = (int)v;
    else if (opt == 'o') COUT = (int)v;
    else if (opt == 'r') ROUNDS = (int)v;
    else if (opt == 'k') LAUNCHES = (int)v;
    else if (opt == 'X') xtiles = (int)v;
    else usage();
  }
  if (optind != argc) usage();
  if (CIN % 64 || COUT % 64 || CIN > CONV_SM90_MAX_CHANNELS || COUT > CONV_SM90_MAX_CHANNELS) {
    fprintf(stderr, "conv_sm90_bench: cin and cout must be multiples of 64 up to %d\n",
            CONV_SM90_MAX_CHANNELS);
    usage();
  }
  WIDE = CIN != CONV_SM90_CIN || COUT != CONV_SM90_COUT;
  HALVES_FWD = CIN == 64 && COUT == 128;
  HALVES_DG = CIN == 128 && COUT == 64;
  char err[256];
  CU(cudaSetDevice(0));
  if (xtiles) { /* the K split's exchange alone */
    double us[3];
    struct cudaDeviceProp xp;
    CU(cudaGetDeviceProperties(&xp, 0));
    if (ksplit_exchange_probe(xtiles, us, err, sizeof err)) DIE("%s", err);
    /* a 2 x 64-pixel tile of COUT channels over 9 CIN, at the ceiling on one multiprocessor */
    const double tile_us = 2.0 * 128 * COUT * 9 * CIN / (PEAK / xp.multiProcessorCount) * 1e6;
    printf("# K-split exchange probe: %s (%d SMs), %d tiles a block, every checksum ok\n",
           xp.name, xp.multiProcessorCount, xtiles);
    printf("partials only %.3f us a tile; with a barrier %.3f; with the f32 exchange %.3f: the "
           "exchange %.3f us a tile, %.1f %% of a %d -> %d tile's %.2f us at %.0f TFLOP/s\n",
           us[0], us[1], us[2], us[2] - us[0], 100 * (us[2] - us[0]) / tile_us, CIN, COUT,
           tile_us, PEAK / 1e12);
    return 0;
  }
  if (conv_sm90_check(0, err, sizeof err) || conv_sm90_wgrad_check(0, err, sizeof err))
    DIE("%s", err);
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  CU(cudaStreamCreateWithFlags(&S, cudaStreamNonBlocking));
  P = (size_t)N * H * W;
  const double flops = 2.0 * P * COUT * 9 * CIN;
  const double act_in = (double)P * CIN * 2, act_out = (double)P * COUT * 2;
  const double wbytes = 9.0 * CIN * COUT * 2;
  const double min_bytes = act_in + act_out + wbytes;

  cf_data_t d, dd; /* dd: dgrad's input dy (cout channels) as its x */
  cf_make(&d, N, H, W, CIN, COUT);
  cf_make(&dd, N, H, W, COUT, CIN);
  for (int s = 0; s < SETS; s++) {
    dx[s] = s ? dev(P * CIN * 2) : up_bf16(d.x, P * CIN);
    if (s) CU(cudaMemcpy(dx[s], dx[0], P * CIN * 2, cudaMemcpyDeviceToDevice));
    dz[s] = s ? dev(P * COUT * 2) : up_bf16(dd.x, P * COUT);
    if (s) CU(cudaMemcpy(dz[s], dz[0], P * COUT * 2, cudaMemcpyDeviceToDevice));
    dy[s] = dev(P * COUT * 2);
    dg[s] = dev(P * CIN * 2);
  }
  cf_free(&dd);
  dw = up_bf16(d.weight, (size_t)9 * CIN * COUT);
  dscale = dev(CIN * sizeof(float));
  dshift = dev(CIN * sizeof(float));
  CU(cudaMemcpy(dscale, d.scale, CIN * sizeof(float), cudaMemcpyHostToDevice));
  CU(cudaMemcpy(dshift, d.shift, CIN * sizeof(float), cudaMemcpyHostToDevice));
  dstats = dev((2 * (size_t)COUT + 1) * sizeof(double));
  const size_t wsb = conv_sm90_ws_bytes_shape(0, CIN, COUT);
  if (!wsb) DIE("no workspace size for %d -> %d channels", CIN, COUT);
  dws = dev(wsb);
  dxa = dev(P * CIN * 2);
  dsums = dev(2 * (size_t)CIN * sizeof(double));
  ddg = dev(CIN * 2);
  ddb = dev(CIN * 2);
  dwg = dev((size_t)9 * CIN * COUT * sizeof(float));
  const size_t wgwsb = conv_sm90_wgrad_ws_bytes_shape(0, N, H, W, CIN, COUT);
  if (!wgwsb) DIE("no wgrad workspace size for %d -> %d channels", CIN, COUT);
  dwgws = dev(wgwsb);
  /* the trainer's BN apply with mean 0, invstd 1: gamma, beta = scale, shift (in bf16) */
  double *saved = malloc((2 * (size_t)CIN + 1) * sizeof *saved);
  if (!saved) DIE("out of memory");
  for (int c = 0; c < CIN; c++) saved[c] = 0, saved[CIN + c] = 1;
  saved[2 * CIN] = (double)P;
  dsaved = dev((2 * (size_t)CIN + 1) * sizeof *saved);
  CU(cudaMemcpy(dsaved, saved, (2 * (size_t)CIN + 1) * sizeof *saved, cudaMemcpyHostToDevice));
  free(saved);
  dgamma = up_bf16(d.scale, CIN);
  dbeta = up_bf16(d.shift, CIN);

  /* cuDNN: the trainer's table (heuristics, deterministic algorithms) and the timed search */
  if (ops_cuda_init(&trainer, OPS_BF16, 0, S, err, sizeof err)) DIE("%s", err);
  if (ops_cuda_init(&fastest, OPS_BF16, 0, S, err, sizeof err)) DIE("%s", err);
  ops_cuda_set_deterministic(&fastest, 0);
  conv_t = (ops_conv_t){.kind = OPS_CONV3X3, .h = H, .w = W, .cin = CIN, .cout = COUT,
                        .max_n = N};
  conv_f = conv_t;
  size_t ws_t = 0, ws_f = 0;
  if (trainer.conv_plan(&trainer, &conv_t, &ws_t)) DIE("%s", trainer.last_error(&trainer));
  if (fastest.conv_plan(&fastest, &conv_f, &ws_f)) DIE("%s", fastest.last_error(&fastest));
  cws = dev(ws_t > ws_f ? ws_t : ws_f);

  double bw = harness_copy_rate(S, err, sizeof err);
  if (bw < 0) DIE("%s", err);
  printf("# conv_sm90_bench: %s (%d SMs), bf16, batch %d, %dx%d, %d -> %d channels (%s)\n",
         prop.name, prop.multiProcessorCount, N, H, W, CIN, COUT,
         WIDE ? "the wide kernel" : "the 64 -> 64 kernel");
  printf("# FLOPs %.2f G; fewest HBM bytes (x read, y written, weights) %.1f MB; floors %.1f us "
         "at %.0f TFLOP/s, %.1f us at %.0f GB/s (a device copy, read + written, measured now)\n",
         flops / 1e9, min_bytes / 1e6, flops / PEAK * 1e6, PEAK / 1e12, min_bytes / bw * 1e6,
         bw / 1e9);
  checks(&d);
  int bad[2][8], bad_mn[2][8];
  if (wgmma_desc_probe(0, bad, err, sizeof err) || wgmma_desc_probe(1, bad_mn, err, sizeof err))
    DIE("%s", err);
  for (int b = 0; b < 2; b++) {
    printf("# descriptor probe, A starting 0..7 lines into a swizzle pattern, base offset %s: "
           "wrong elements", b ? "(start >> 7) & 7" : "0");
    for (int s = 0; s < 8; s++) printf(" %d", bad[b][s]);
    printf("\n");
  }
  for (int b = 0; b < 2; b++) {
    printf("# descriptor probe, B MN-major starting 0..7 lines in, (leading, stride) bytes %s: "
           "wrong elements", b ? "(1024, 16)" : "(16, 1024)");
    for (int s = 0; s < 8; s++) printf(" %d", bad_mn[b][s]);
    printf("\n");
  }
  verdict(bad[0][0] == 0 && bad[1][0] == 0, "wgmma accumulator layout (probe, shift 0)");

  printf("%-44s %9s %8s %7s %9s %8s\n", "variant", "time_us", "TFLOP/s", "ceil%", "HBM_MB",
         "GB/s");
  row("ours: BN prologue + conv + statistics", time_us(v_fused), min_bytes, flops);
  row("ours: conv only", time_us(v_plain), min_bytes, flops);
  row("ours: conv + statistics (first block)", time_us(v_stats), min_bytes, flops);
  row("ours: BN prologue + conv, no statistics", time_us(v_pro), min_bytes, flops);
  if (!WIDE || HALVES_FWD) { /* the other GEMM layout: output channels as M, the weights in
                                 registers (64 -> 128: in output-channel halves) */
    row("ours COUT_M: BN prologue + conv + stats", time_us(v_cm_fused), min_bytes, flops);
    row("ours COUT_M: conv only", time_us(v_cm_plain), min_bytes, flops);
    row("ours COUT_M: BN prologue + conv", time_us(v_cm_pro), min_bytes, flops);
  }
  row("cuDNN conv, trainer's choice (heuristic)", time_us(v_cudnn_trainer), min_bytes, flops);
  row("cuDNN conv, fastest (cudnnFind)", time_us(v_cudnn_fastest), min_bytes, flops);
  /* today: bn_apply reads x and writes a, the conv reads a and writes y, bn_stats reads y */
  row("today: bn_apply + cuDNN conv + bn_stats", time_us(v_trainer_today),
      3 * act_in + 2 * act_out + wbytes, flops);
  row("today, first block: cuDNN conv + bn_stats", time_us(v_stats_today),
      act_in + 2 * act_out + wbytes, flops);
  /* dgrad: ours reads dy and x, writes g; today cuDNN reads dy, writes da, bn_bwd_reduce reads
   * da and x */
  row("ours dgrad: ReLU mask + BN backward sums", time_us(v_dgrad_fused),
      2 * act_in + act_out + wbytes, flops);
  row("ours dgrad: plain", time_us(v_dgrad_plain), min_bytes, flops);
  row("ours dgrad: ReLU mask, no sums", time_us(v_dgrad_mask), 2 * act_in + act_out + wbytes,
      flops);
  if (!WIDE) {
    row("ours COUT_M dgrad: mask + BN sums", time_us(v_cm_dgrad_fused),
        2 * act_in + act_out + wbytes, flops);
    row("ours COUT_M dgrad: plain", time_us(v_cm_dgrad_plain), min_bytes, flops);
  }
  if (HALVES_DG) /* 128 -> 64's plain dgrad in COUT_M's halves of g's channels */
    row("ours COUT_M dgrad halves: plain", time_us(v_cm_dgrad_plain), min_bytes, flops);
  row("cuDNN dgrad, trainer's choice (heuristic)", time_us(v_dgrad_cudnn_trainer), min_bytes,
      flops);
  row("cuDNN dgrad, fastest (cudnnFind)", time_us(v_dgrad_cudnn_fastest), min_bytes, flops);
  row("today: cuDNN dgrad + bn_bwd_reduce (ReLU)", time_us(v_dgrad_today),
      3 * act_in + act_out + wbytes, flops);
  /* wgrad: x and dy read, dW written (f32, and the partials: small beside them at full
   * resolution) */
  row("ours wgrad: BN prologue recomputed", time_us(v_wgrad_fused), act_in + act_out, flops);
  row("ours wgrad: plain", time_us(v_wgrad_plain), act_in + act_out, flops);
  row("cuDNN wgrad, trainer's choice (heuristic)", time_us(v_wgrad_cudnn_trainer),
      act_in + act_out, flops);
  row("cuDNN wgrad, fastest (cudnnFind)", time_us(v_wgrad_cudnn_fastest), act_in + act_out,
      flops);
  if (failed) fprintf(stderr, "conv_sm90_bench: a check FAILED (above)\n");

  trainer.conv_plan_free(&trainer, &conv_t);
  fastest.conv_plan_free(&fastest, &conv_f);
  trainer.destroy(&trainer);
  fastest.destroy(&fastest);
  cf_free(&d);
  return failed ? 1 : 0;
}
