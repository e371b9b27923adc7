/* dnn_graph_bench.c — measures whether cuDNN's graph (backend) API beats the legacy convolution
 * API on the reference U-Net's 3x3 layers, and what a fused convolution costs: the BatchNorm
 * scale/bias + ReLU applied to the input on the way in (prologue) and the per-channel sum and
 * sum of squares of the output produced by the epilogue (GenStats): could fusing BatchNorm into
 * the convolutions save its memory passes?
 *
 * For every layer shape and direction (forward, backward-data, backward-filter) it times:
 *   legacy   cudnnFind*AlgorithmEx's fastest algorithm (any / deterministic), timed as below
 *   graph    every engine configuration the graph heuristics (mode A, then FALLBACK) offer,
 *            each timed; the best one, and the best deterministic one
 * and for the forward also the fused graphs (prologue, epilogue, both). Times are CUDA events
 * around `reps` launches after warm-up, on random data, median of 5 rounds.
 * A numerical check compares the fused graph with the host's f64 on a small layer.
 *
 * Usage: dnn_graph_bench [-p bf16|f32] [-n batch] [-r reps] [-c max_configs] [-F] [-v]
 *   -l I: only layer I of the table (0: the RGB layer)
 *   -F: also the fused forward graphs (each needs runtime compilation: minutes in all)
 * Built by make in cuDNN builds (dev/dnn_graph_bench, not installed).
 *
 * What it found on one H200 (bench/results/dnn_graph_1xh200.txt): the graph API's first
 * choices for these layers are the engines the legacy API already runs (the trainer gave
 * bit-identical losses over 8000 steps on either API, at the same speed), and the fused graphs
 * run only on the runtime-compiled engine, 2-6x slower than the plain convolution, more than
 * the BatchNorm passes they would save. Neither was kept. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

typedef cudnnBackendDescriptor_t bd_t;

static int verbose;
static cudnnHandle_t H;
static cudaStream_t S;

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudnnStatus_t s_ = (x);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                           \
      if (verbose) fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                    \
                           cudnnGetErrorString(s_));                                            \
      return -1;                                                                                \
    }                                                                                           \
  } while (0)
#define CU(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));        \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

static bd_t mk(cudnnBackendDescriptorType_t t)
{
  bd_t d = NULL;
  if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "cannot create backend descriptor %d\n", (int)t);
    exit(1);
  }
  return d;
}

/* A tensor in NHWC memory order; dims are given n, c, h, w as the graph API wants them. */
static int tensor(bd_t *out, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h,
                  int64_t w, int virt)
{
  bd_t d = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, al = 16;
  bool v = virt;
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
  CK(cudnnBackendFinalize(d));
  *out = d;
  return 0;
}

static int conv_desc(bd_t *out, int pad)
{
  bd_t d = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t m = CUDNN_CROSS_CORRELATION;
  int64_t nd = 2, one[2] = {1, 1}, p[2] = {pad, pad};
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
                              &m));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p));
  CK(cudnnBackendFinalize(d));
  *out = d;
  return 0;
}

static int pointwise(bd_t *out, cudnnPointwiseMode_t mode, bd_t x, bd_t b, bd_t y)
{
  bd_t pw = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  CK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec));
  CK(cudnnBackendFinalize(pw));
  bd_t op = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b)
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CK(cudnnBackendFinalize(op));
  *out = op;
  return 0;
}

enum { DIR_FWD, DIR_DGRAD, DIR_WGRAD };
enum { FUSE_NONE = 0, FUSE_PRO = 1, FUSE_STATS = 2 };
/* unique ids of the variant pack */
enum { U_X = 1, U_W, U_Y, U_S, U_B, U_SUM, U_SQ, U_V1, U_V2, U_V3 };

typedef struct {
  int n, c, k, h, w, r;       /* batch, in, out channels, image, filter size (pad r/2) */
  cudnnDataType_t dt;
} shape_t;

/* The operation graph for one direction (and fusion, forward only). */
static int build_graph(bd_t *out, const shape_t *s, int dir, int fuse)
{
  bd_t x, w, y, conv, ops[6];
  int nops = 0;
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  float alpha = 1.f, beta = 0.f;
  if (tensor(&w, U_W, s->dt, s->k, s->c, s->r, s->r, 0) || conv_desc(&conv, s->r / 2)) return -1;
  if (tensor(&y, U_Y, s->dt, s->n, s->k, s->h, s->w, 0)) return -1;
  if (dir == DIR_FWD) {
    bd_t xin;
    if (tensor(&x, U_X, s->dt, s->n, s->c, s->h, s->w, 0)) return -1;
    xin = x;
    if (fuse & FUSE_PRO) {
      bd_t sc, bi, v1, v2, v3;
      if (tensor(&sc, U_S, f32, 1, s->c, 1, 1, 0) || tensor(&bi, U_B, f32, 1, s->c, 1, 1, 0) ||
          tensor(&v1, U_V1, f32, s->n, s->c, s->h, s->w, 1) ||
          tensor(&v2, U_V2, f32, s->n, s->c, s->h, s->w, 1) ||
          tensor(&v3, U_V3, s->dt, s->n, s->c, s->h, s->w, 1))
        return -1;
      if (pointwise(&ops[nops++], CUDNN_POINTWISE_MUL, x, sc, v1) ||
          pointwise(&ops[nops++], CUDNN_POINTWISE_ADD, v1, bi, v2) ||
          pointwise(&ops[nops++], CUDNN_POINTWISE_RELU_FWD, v2, NULL, v3))
        return -1;
      xin = v3;
    }
    bd_t op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xin));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                CUDNN_TYPE_FLOAT, 1, &alpha));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendFinalize(op));
    ops[nops++] = op;
    if (fuse & FUSE_STATS) {
      bd_t sum, sq;
      cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
      if (tensor(&sum, U_SUM, f32, 1, s->k, 1, 1, 0) || tensor(&sq, U_SQ, f32, 1, s->k, 1, 1, 0))
        return -1;
      bd_t g = mk(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
      CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE,
                                  1, &gm));
      CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC,
                                  CUDNN_TYPE_DATA_TYPE, 1, &f32));
      CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATION_GENSTATS_XDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
      CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum));
      CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq));
      CK(cudnnBackendFinalize(g));
      ops[nops++] = g;
    }
  } else if (dir == DIR_DGRAD) {
    if (tensor(&x, U_X, s->dt, s->n, s->c, s->h, s->w, 0)) return -1;
    bd_t op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                CUDNN_TYPE_FLOAT, 1, &alpha));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                                CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendFinalize(op));
    ops[nops++] = op;
  } else {
    if (tensor(&x, U_X, s->dt, s->n, s->c, s->h, s->w, 0)) return -1;
    bd_t op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                CUDNN_TYPE_FLOAT, 1, &alpha));
    CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendFinalize(op));
    ops[nops++] = op;
  }
  bd_t g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                              nops, ops));
  CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &H));
  CK(cudnnBackendFinalize(g));
  *out = g;
  return 0;
}

#define MAXCFG 64
/* Engine configurations the heuristics offer for graph g in mode m. */
static int heuristics(bd_t g, cudnnBackendHeurMode_t m, bd_t *cfg, int max)
{
  bd_t h = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
  CK(cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &m));
  CK(cudnnBackendFinalize(h));
  for (int i = 0; i < max; i++) cfg[i] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  CK(cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, max,
                              &got, cfg));
  return (int)got;
}

typedef struct {
  int64_t engine;
  int det, rtc;
  size_t ws;
  float ms;
} result_t;

static void *dws;
static size_t dws_size;
static void *buf[U_V3 + 1];

static int cmpf(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median over 5 rounds of the mean time of one launch (reps launches per round). */
static float time_it(int (*launch)(void *), void *arg, int reps)
{
  cudaEvent_t e0, e1;
  float t[5];
  CU(cudaEventCreate(&e0));
  CU(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++)
    if (launch(arg)) return -1;
  for (int r = 0; r < 5; r++) {
    CU(cudaEventRecord(e0, S));
    for (int i = 0; i < reps; i++)
      if (launch(arg)) return -1;
    CU(cudaEventRecord(e1, S));
    CU(cudaEventSynchronize(e1));
    CU(cudaEventElapsedTime(&t[r], e0, e1));
    t[r] /= reps;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  qsort(t, 5, sizeof t[0], cmpf);
  return t[2];
}

typedef struct {
  bd_t plan, vp;
} exec_t;

static int run_plan(void *a)
{
  exec_t *e = a;
  CK(cudnnBackendExecute(H, e->plan, e->vp));
  return 0;
}

static int make_plan(bd_t cfg, bd_t *plan, size_t *ws)
{
  bd_t p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &H));
  CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
  CK(cudnnBackendFinalize(p));
  int64_t w = 0, got = 0;
  CK(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                              &got, &w));
  *plan = p;
  *ws = (size_t)w;
  return 0;
}

static int variant_pack(bd_t *out, int dir, int fuse)
{
  int64_t uids[8];
  void *ptrs[8];
  int n = 0;
  uids[n] = U_X, ptrs[n++] = buf[U_X];
  uids[n] = U_W, ptrs[n++] = buf[U_W];
  uids[n] = U_Y, ptrs[n++] = buf[U_Y];
  if (dir == DIR_FWD && (fuse & FUSE_PRO)) {
    uids[n] = U_S, ptrs[n++] = buf[U_S];
    uids[n] = U_B, ptrs[n++] = buf[U_B];
  }
  if (dir == DIR_FWD && (fuse & FUSE_STATS)) {
    uids[n] = U_SUM, ptrs[n++] = buf[U_SUM];
    uids[n] = U_SQ, ptrs[n++] = buf[U_SQ];
  }
  bd_t v = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
  CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                              ptrs));
  CK(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &dws));
  CK(cudnnBackendFinalize(v));
  *out = v;
  return 0;
}

static void cfg_notes(bd_t cfg, result_t *r)
{
  bd_t e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t got = 0;
  r->engine = -1;
  r->det = 1;
  r->rtc = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &got, &e) != CUDNN_STATUS_SUCCESS)
    return;
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                           &r->engine);
  cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got, nn) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < got; i++)
      if (nn[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) r->det = 0;
  cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got, bn) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < got; i++)
      if (bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) r->rtc = 1;
}

/* Best over the heuristics' configurations: *best (any), *bestd (deterministic); returns the
 * number of configurations that ran, -1 when the graph is not supported. */
static int graph_best(const shape_t *s, int dir, int fuse, int maxcfg, int reps, result_t *best,
                      result_t *bestd, result_t *first)
{
  bd_t g;
  best->ms = bestd->ms = first->ms = -1;
  if (build_graph(&g, s, dir, fuse)) return -1;
  bd_t cfg[MAXCFG];
  int ran = 0;
  cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  int64_t seen[2 * MAXCFG];
  int nseen = 0;
  for (int mi = 0; mi < 2; mi++) {
    int n = heuristics(g, modes[mi], cfg, maxcfg);
    if (verbose) fprintf(stderr, "  heuristics mode %d: %d configurations\n", (int)modes[mi], n);
    for (int i = 0; i < n; i++) {
      result_t r;
      bd_t plan, vp;
      cfg_notes(cfg[i], &r);
      int dup = 0;
      for (int j = 0; j < nseen; j++) dup |= seen[j] == r.engine && mi == 1;
      if (dup) continue;
      seen[nseen++] = r.engine;
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      int bad = make_plan(cfg[i], &plan, &r.ws);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      if (verbose)
        fprintf(stderr, "  engine %ld: plan %s in %.1f ms\n", (long)r.engine, bad ? "failed" : "built",
                (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
      if (bad || r.ws > dws_size) continue;
      if (variant_pack(&vp, dir, fuse)) continue;
      exec_t e = {plan, vp};
      r.ms = time_it(run_plan, &e, reps);
      if (verbose)
        fprintf(stderr, "  engine %ld det %d rtc %d ws %zu: %.4f ms\n", (long)r.engine, r.det,
                r.rtc, r.ws, r.ms);
      if (r.ms < 0) continue;
      ran++;
      if (first->ms < 0) *first = r;
      if (best->ms < 0 || r.ms < best->ms) *best = r;
      if (r.det && (bestd->ms < 0 || r.ms < bestd->ms)) *bestd = r;
    }
  }
  return ran;
}

/* The legacy API: cudnnFind*Ex's fastest (deterministic, if det_only) algorithm, then timed
 * like the graph plans (events around back-to-back launches). cudnnFind's own times are single
 * launches and overstate short kernels 2-3x (a comparison against them is wrong: see
 * bench/results/dnn_graph_1xh200.txt). In ms; -1 if none. */
typedef struct {
  int dir, algo;
  cudnnTensorDescriptor_t a, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
} legacy_t;

static int run_legacy(void *arg)
{
  legacy_t *l = arg;
  const float one = 1, zero = 0;
  if (l->dir == DIR_FWD)
    CK(cudnnConvolutionForward(H, &one, l->a, buf[U_X], l->w, buf[U_W], l->c,
                               (cudnnConvolutionFwdAlgo_t)l->algo, dws, dws_size, &zero, l->b,
                               buf[U_Y]));
  else if (l->dir == DIR_DGRAD)
    CK(cudnnConvolutionBackwardData(H, &one, l->w, buf[U_W], l->b, buf[U_Y], l->c,
                                    (cudnnConvolutionBwdDataAlgo_t)l->algo, dws, dws_size, &zero,
                                    l->a, buf[U_X]));
  else
    CK(cudnnConvolutionBackwardFilter(H, &one, l->a, buf[U_X], l->b, buf[U_Y], l->c,
                                      (cudnnConvolutionBwdFilterAlgo_t)l->algo, dws, dws_size,
                                      &zero, l->w, buf[U_W]));
  return 0;
}

static float legacy_best(const shape_t *s, int dir, int det_only, int reps)
{
  legacy_t l = {dir, -1, NULL, NULL, NULL, NULL};
  cudnnCreateTensorDescriptor(&l.a);
  cudnnCreateTensorDescriptor(&l.b);
  cudnnCreateFilterDescriptor(&l.w);
  cudnnCreateConvolutionDescriptor(&l.c);
  cudnnSetTensor4dDescriptor(l.a, CUDNN_TENSOR_NHWC, s->dt, s->n, s->c, s->h, s->w);
  cudnnSetTensor4dDescriptor(l.b, CUDNN_TENSOR_NHWC, s->dt, s->n, s->k, s->h, s->w);
  cudnnSetFilter4dDescriptor(l.w, s->dt, CUDNN_TENSOR_NHWC, s->k, s->c, s->r, s->r);
  cudnnSetConvolution2dDescriptor(l.c, s->r / 2, s->r / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                  CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(l.c, CUDNN_TENSOR_OP_MATH);
  float best = -1;
  int got = 0;
#define PICK(p)                                                                                 \
  for (int i = 0; i < got; i++)                                                                 \
    if (p[i].status == CUDNN_STATUS_SUCCESS &&                                                  \
        (!det_only || p[i].determinism == CUDNN_DETERMINISTIC) && (best < 0 || p[i].time < best)) \
      best = p[i].time, l.algo = (int)p[i].algo;
  if (dir == DIR_FWD) {
    cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    if (cudnnFindConvolutionForwardAlgorithmEx(H, l.a, buf[U_X], l.w, buf[U_W], l.c, l.b, buf[U_Y],
                                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p, dws,
                                               dws_size) == CUDNN_STATUS_SUCCESS)
      PICK(p)
  } else if (dir == DIR_DGRAD) {
    cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardDataAlgorithmEx(H, l.w, buf[U_W], l.b, buf[U_Y], l.c, l.a,
                                                    buf[U_X], CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                    &got, p, dws, dws_size) == CUDNN_STATUS_SUCCESS)
      PICK(p)
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    if (cudnnFindConvolutionBackwardFilterAlgorithmEx(H, l.a, buf[U_X], l.b, buf[U_Y], l.c, l.w,
                                                      buf[U_W],
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                      &got, p, dws,
                                                      dws_size) == CUDNN_STATUS_SUCCESS)
      PICK(p)
  }
#undef PICK
  float ms = l.algo >= 0 ? time_it(run_legacy, &l, reps) : -1;
  cudnnDestroyTensorDescriptor(l.a);
  cudnnDestroyTensorDescriptor(l.b);
  cudnnDestroyFilterDescriptor(l.w);
  cudnnDestroyConvolutionDescriptor(l.c);
  return ms;
}

/* ---- host data ---- */
static uint16_t f2bf(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t b)
{
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint64_t rng = 88172645463325252ull;
static float urand(void)
{
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}

/* Fills device buffer p with count random values in [-amp, amp] (host copy in *h if wanted). */
static void fill(void *p, size_t count, cudnnDataType_t dt, float amp, float *h)
{
  size_t es = dt == CUDNN_DATA_FLOAT ? 4 : 2;
  void *t = malloc(count * es);
  for (size_t i = 0; i < count; i++) {
    float v = urand() * amp;
    if (es == 2) {
      ((uint16_t *)t)[i] = f2bf(v);
      v = bf2f(((uint16_t *)t)[i]);
    } else
      ((float *)t)[i] = v;
    if (h) h[i] = v;
  }
  CU(cudaMemcpy(p, t, count * es, cudaMemcpyHostToDevice));
  free(t);
}

static void alloc_for(const shape_t *s)
{
  size_t es = s->dt == CUDNN_DATA_FLOAT ? 4 : 2;
  size_t nx = (size_t)s->n * s->c * s->h * s->w, ny = (size_t)s->n * s->k * s->h * s->w,
         nw = (size_t)s->k * s->c * s->r * s->r;
  for (int i = 0; i <= U_V3; i++) cudaFree(buf[i]), buf[i] = NULL;
  CU(cudaMalloc(&buf[U_X], nx * es));
  CU(cudaMalloc(&buf[U_Y], ny * es));
  CU(cudaMalloc(&buf[U_W], nw * es));
  CU(cudaMalloc(&buf[U_S], s->c * 4));
  CU(cudaMalloc(&buf[U_B], s->c * 4));
  CU(cudaMalloc(&buf[U_SUM], s->k * 4));
  CU(cudaMalloc(&buf[U_SQ], s->k * 4));
  fill(buf[U_X], nx, s->dt, 1.f, NULL);
  fill(buf[U_Y], ny, s->dt, 1.f, NULL);
  fill(buf[U_W], nw, s->dt, 0.05f, NULL);
  fill(buf[U_S], s->c, CUDNN_DATA_FLOAT, 1.f, NULL);
  fill(buf[U_B], s->c, CUDNN_DATA_FLOAT, 0.5f, NULL);
}

/* The fused forward (prologue + stats) against the host's f64 on a small layer. */
static int check_fused(cudnnDataType_t dt)
{
  shape_t s = {2, 16, 32, 12, 10, 3, dt};
  size_t es = dt == CUDNN_DATA_FLOAT ? 4 : 2;
  size_t nx = (size_t)s.n * s.c * s.h * s.w, ny = (size_t)s.n * s.k * s.h * s.w,
         nw = (size_t)s.k * s.c * 9;
  float *hx = malloc(nx * 4), *hw = malloc(nw * 4), hs[16], hb[16];
  alloc_for(&s);
  fill(buf[U_X], nx, dt, 1.f, hx);
  fill(buf[U_W], nw, dt, 0.1f, hw);
  fill(buf[U_S], s.c, CUDNN_DATA_FLOAT, 1.f, hs);
  fill(buf[U_B], s.c, CUDNN_DATA_FLOAT, 0.5f, hb);
  bd_t g, cfg[MAXCFG], plan, vp;
  if (build_graph(&g, &s, DIR_FWD, FUSE_PRO | FUSE_STATS)) {
    printf("check: the fused graph does not build\n");
    return 1;
  }
  int n = heuristics(g, CUDNN_HEUR_MODE_A, cfg, 8), ok = 0;
  for (int i = 0; i < n && !ok; i++) {
    size_t ws;
    if (make_plan(cfg[i], &plan, &ws) || ws > dws_size || variant_pack(&vp, DIR_FWD, 3)) continue;
    exec_t e = {plan, vp};
    if (run_plan(&e)) continue;
    ok = 1;
  }
  if (!ok) {
    printf("check: no engine runs the fused graph\n");
    return 1;
  }
  CU(cudaDeviceSynchronize());
  void *hy = malloc(ny * es);
  float gsum[32], gsq[32];
  CU(cudaMemcpy(hy, buf[U_Y], ny * es, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(gsum, buf[U_SUM], sizeof gsum, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(gsq, buf[U_SQ], sizeof gsq, cudaMemcpyDeviceToHost));
  double maxerr = 0, maxref = 0, serr = 0, qerr = 0;
  double rsum[32] = {0}, rsq[32] = {0};
  for (int nn = 0; nn < s.n; nn++)
    for (int y = 0; y < s.h; y++)
      for (int x = 0; x < s.w; x++)
        for (int k = 0; k < s.k; k++) {
          double acc = 0;
          for (int r = 0; r < 3; r++)
            for (int q = 0; q < 3; q++) {
              int yy = y + r - 1, xx = x + q - 1;
              if (yy < 0 || yy >= s.h || xx < 0 || xx >= s.w) continue;
              for (int c = 0; c < s.c; c++) {
                double v = hx[(((size_t)nn * s.h + yy) * s.w + xx) * s.c + c] * (double)hs[c] + hb[c];
                if (v < 0) v = 0;
                if (dt != CUDNN_DATA_FLOAT) v = bf2f(f2bf((float)v)); /* the prologue's output */
                acc += v * hw[(((size_t)k * 3 + r) * 3 + q) * s.c + c];
              }
            }
          size_t i = (((size_t)nn * s.h + y) * s.w + x) * s.k + k;
          double got = es == 2 ? bf2f(((uint16_t *)hy)[i]) : ((float *)hy)[i];
          double e = fabs(got - acc);
          if (e > maxerr) maxerr = e;
          if (fabs(acc) > maxref) maxref = fabs(acc);
          rsum[k] += got, rsq[k] += got * got;
        }
  for (int k = 0; k < s.k; k++) {
    double e1 = fabs(gsum[k] - rsum[k]) / (fabs(rsum[k]) + 1), e2 = fabs(gsq[k] - rsq[k]) / (rsq[k] + 1);
    if (e1 > serr) serr = e1;
    if (e2 > qerr) qerr = e2;
  }
  double tol = dt == CUDNN_DATA_FLOAT ? 2e-3 : 1e-2;
  int pass = maxerr <= tol * maxref && serr < 1e-3 && qerr < 1e-3;
  printf("check fused fwd (scale+bias+ReLU prologue, sum/sqsum epilogue) vs host f64: max |err| %.3g "
         "of max |y| %.3g; stats rel err sum %.3g sqsum %.3g: %s\n",
         maxerr, maxref, serr, qerr, pass ? "PASS" : "FAIL");
  free(hx), free(hw), free(hy);
  return !pass;
}

int main(int argc, char **argv)
{
  int n = 6, reps = 20, maxcfg = 24, fused = 0, only = -1;
  cudnnDataType_t dt = CUDNN_DATA_BFLOAT16;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-p") && i + 1 < argc) {
      const char *p = argv[++i];
      dt = !strcmp(p, "f32") ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
    } else if (!strcmp(argv[i], "-n") && i + 1 < argc)
      n = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-r") && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-c") && i + 1 < argc)
      maxcfg = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-v"))
      verbose = 1;
    else if (!strcmp(argv[i], "-l") && i + 1 < argc)
      only = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-F"))
      fused = 1;
    else {
      fprintf(stderr, "usage: %s [-p bf16|f32] [-n batch] [-r reps] [-c max_configs] [-F] [-v]\n",
              argv[0]);
      return 2;
    }
  }
  if (maxcfg > MAXCFG) maxcfg = MAXCFG;
  CU(cudaStreamCreate(&S));
  if (cudnnCreate(&H) != CUDNN_STATUS_SUCCESS) {
    fprintf(stderr, "cudnnCreate failed\n");
    return 1;
  }
  cudnnSetStream(H, S);
  dws_size = (size_t)512 << 20;
  CU(cudaMalloc(&dws, dws_size));
  struct cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, 0));
  printf("# dnn_graph_bench: %s, cuDNN %zu, %s, batch %d, %d launches x 5 rounds (median)\n",
         prop.name, cudnnGetVersion(), dt == CUDNN_DATA_FLOAT ? "f32 (TF32)" : "bf16", n, reps);
  int fails = fused ? check_fused(dt) : 0;
  /* the reference U-Net's 3x3 layers: (in, out, size, how many in the net) */
  static const int L[][4] = {{8, 64, 256, 1},    {64, 64, 256, 2},    {64, 128, 128, 1},
                             {128, 128, 128, 2}, {128, 256, 64, 1},   {256, 256, 64, 2},
                             {256, 512, 32, 1},  {512, 512, 32, 2},   {512, 1024, 16, 1},
                             {1024, 1024, 16, 1}, {1024, 512, 32, 1}, {512, 256, 64, 1},
                             {256, 128, 128, 1}, {128, 64, 256, 1}};
  const char *dn[3] = {"fwd", "dgrad", "wgrad"};
  double tot_leg[3] = {0}, tot_g[3] = {0}, tot_gd[3] = {0}, tot_f[4] = {0};
  printf("%-16s %-6s %9s %9s %9s %9s %8s %s\n", "layer", "dir", "legacy", "leg-det", "graph",
         "graph-det", "engine", "first(heur A)");
  for (size_t li = 0; li < sizeof L / sizeof L[0]; li++) {
    shape_t s = {n, L[li][0], L[li][1], L[li][2], L[li][2], 3, dt};
    int cnt = L[li][3];
    if (only >= 0 && (int)li != only) continue;
    char name[32];
    snprintf(name, sizeof name, "%d->%d@%d", s.c, s.k, s.h);
    alloc_for(&s);
    for (int d = 0; d < 3; d++) {
      if (d == DIR_DGRAD && s.c == 8) continue; /* the RGB layer has no input gradient */
      float leg = legacy_best(&s, d, 0, reps), legd = legacy_best(&s, d, 1, reps);
      result_t b, bd, f;
      int ran = graph_best(&s, d, FUSE_NONE, maxcfg, reps, &b, &bd, &f);
      printf("%-16s %-6s %9.4f %9.4f %9.4f %9.4f %8ld %.4f (engine %ld)  [%d configs]\n", name,
             dn[d], leg, legd, b.ms, bd.ms, (long)bd.engine, f.ms, (long)f.engine, ran);
      tot_leg[d] += cnt * (legd > 0 ? legd : 0);
      tot_g[d] += cnt * (b.ms > 0 ? b.ms : 0);
      tot_gd[d] += cnt * (bd.ms > 0 ? bd.ms : leg);
      fflush(stdout);
    }
    for (int fu = 1; fused && fu <= 3; fu++) {
      if ((fu & FUSE_PRO) && s.c == 8) continue;
      result_t b, bd, f;
      int ran = graph_best(&s, DIR_FWD, fu, maxcfg, reps, &b, &bd, &f);
      printf("%-16s fwd+%-5s %6s %9s %9.4f %9.4f %8ld %.4f (engine %ld)  [%d configs]\n", name,
             fu == 1 ? "pro" : fu == 2 ? "stats" : "both", "", "", b.ms, bd.ms, (long)bd.engine,
             f.ms, (long)f.engine, ran);
      tot_f[fu] += cnt * (bd.ms > 0 ? bd.ms : 0);
      fflush(stdout);
    }
  }
  printf("\n# sums over the net's 3x3 layers (count-weighted), ms: legacy deterministic / graph best / "
         "graph deterministic\n");
  for (int d = 0; d < 3; d++)
    printf("%-6s %8.3f %8.3f %8.3f\n", dn[d], tot_leg[d], tot_g[d], tot_gd[d]);
  printf("fused fwd deterministic sums (where supported): prologue %.3f, stats %.3f, both %.3f\n",
         tot_f[1], tot_f[2], tot_f[3]);
  return fails;
}
