/* conv_graph_cuda.cu — one convolution "F" (conv_cuda.cu's view of every cuDNN layer) through
 * cuDNN's graph API: an execution plan per direction (forward, backward-data, backward-filter
 * with beta 0 and with beta 1) for one batch size.
 *
 * Why: on Hopper the graph API's heuristics offer engines the legacy cudnnConvolution* calls
 * never reach. Measured on one H200 with tools/dnn_graph_bench.c (bench/results/
 * dnn_graph_1xh200.txt): the reference U-Net's 3x3 layers in bf16 run 2.5-4x faster on them
 * than on the legacy API's fastest algorithm (e.g. 256->256 at 64x64, batch 6, forward 0.044 ms
 * against 0.146), in f32/TF32 ~2x. The same file showed that cuDNN's fused graphs (the
 * BatchNorm scale/bias + ReLU applied on the way in, the statistics in the epilogue) run only
 * on the runtime-compiled engine and lose to the plain convolution plus our own BN kernels
 * (0.23 ms against 0.044 + ~0.03), so F stays unfused.
 *
 * Choosing the engine: deterministic (the default) takes the first configuration of the
 * heuristics (mode A) that builds, fits the workspace limit and is not marked
 * non-deterministic: a function of the shape, GPU and cuDNN version only, so runs repeat bit for
 * bit. With timed = 1 the first OPC_GRAPH_TIMED configurations that build are timed on scratch
 * buffers and the fastest is kept. Runtime-compiled engines are never taken (seconds of NVRTC
 * per plan, and they lost every comparison above). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"

/* The handle attributes below are marked deprecated in cuDNN 9 (the handle is still needed by
 * the cuDNN 9 releases this builds against, 9.14 on the GPU machine). */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#ifdef __NVCC__
#pragma nv_diag_suppress 1215
#pragma nv_diag_suppress 1444
#endif

#define OPC_GRAPH_TIMED 8   /* configurations timed per direction in timed mode */
#define OPC_GRAPH_CFGS 32   /* heuristics' configurations looked at per direction */

typedef cudnnBackendDescriptor_t bd_t;
enum { UID_A = 1, UID_W = 2, UID_B = 3 };

struct opc_graph {
  bd_t plan[OPC_G_DIRS];
  size_t ws[OPC_G_DIRS];
  long engine[OPC_G_DIRS];
  float ms[OPC_G_DIRS];
  opc_graph_shape_t s;
};

/* Descriptors made while building; destroyed together at the end (the plans keep what they
 * need). */
typedef struct {
  bd_t d[64];
  int n;
} pool_t;

static bd_t pool_new(pool_t *p, cudnnBackendDescriptorType_t t)
{
  bd_t d = NULL;
  if (p->n == (int)(sizeof p->d / sizeof p->d[0])) return NULL;
  if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) return NULL;
  p->d[p->n++] = d;
  return d;
}

static void pool_free(pool_t *p)
{
  for (int i = 0; i < p->n; i++) cudnnBackendDestroyDescriptor(p->d[i]);
  p->n = 0;
}

/* Failing calls while building mean "this graph or engine is not supported": no message. */
#define TRY(call)                                                                              \
  do {                                                                                         \
    if ((call) != CUDNN_STATUS_SUCCESS) return -1;                                             \
  } while (0)
#define NEW(var, p, type)                                                                      \
  do {                                                                                         \
    if (!((var) = pool_new((p), (type)))) return -1;                                           \
  } while (0)

/* An NHWC tensor (dims given n, c, h, w as the graph API orders them). */
static int tensor(pool_t *p, bd_t *out, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                  int64_t h, int64_t w)
{
  bd_t d;
  NEW(d, p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, al = 16;
  TRY(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
  TRY(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  TRY(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
  TRY(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  TRY(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
  TRY(cudnnBackendFinalize(d));
  *out = d;
  return 0;
}

/* The operation graph of one direction of F. */
static int op_graph(const ops_t *o, pool_t *p, const opc_graph_shape_t *s, int dir, bd_t *out)
{
  cudnnHandle_t h = opc_ctx(o)->dnn;
  bd_t a, w, b, conv, op, g;
  if (tensor(p, &a, UID_A, s->dt, s->n, s->ca, s->ha, s->wa) ||
      tensor(p, &w, UID_W, s->dt, s->cb, s->ca, s->k, s->k) ||
      tensor(p, &b, UID_B, s->dt, s->n, s->cb, s->hb, s->wb))
    return -1;
  NEW(conv, p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t nd = 2, one[2] = {1, 1}, st[2] = {s->stride, s->stride}, pad[2] = {s->pad, s->pad};
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                               &ct));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                               CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                               &nd));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2,
                               st));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2,
                               pad));
  TRY(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2,
                               pad));
  TRY(cudnnBackendFinalize(conv));
  float alpha = 1.f, beta = dir == OPC_G_WGRAD_ACC ? 1.f : 0.f;
  /* The three operations name the same three tensors: a is x or dx, b is y or dy. */
  static const cudnnBackendAttributeName_t attrs[3][6] = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  static const cudnnBackendDescriptorType_t types[3] = {
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  int t = dir == OPC_G_WGRAD_ACC ? OPC_G_WGRAD : dir;
  NEW(op, p, types[t]);
  TRY(cudnnBackendSetAttribute(op, attrs[t][0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  TRY(cudnnBackendSetAttribute(op, attrs[t][1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
  TRY(cudnnBackendSetAttribute(op, attrs[t][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  TRY(cudnnBackendSetAttribute(op, attrs[t][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
  TRY(cudnnBackendSetAttribute(op, attrs[t][4], CUDNN_TYPE_FLOAT, 1, &alpha));
  TRY(cudnnBackendSetAttribute(op, attrs[t][5], CUDNN_TYPE_FLOAT, 1, &beta));
  TRY(cudnnBackendFinalize(op));
  NEW(g, p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  TRY(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               1, &op));
  TRY(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  TRY(cudnnBackendFinalize(g));
  *out = g;
  return 0;
}

/* An engine configuration's notes: global index, non-deterministic, runtime-compiled. */
static void cfg_notes(bd_t cfg, long *engine, int *nondet, int *rtc)
{
  bd_t e = NULL;
  int64_t got = 0, idx = -1;
  *engine = -1, *nondet = 0, *rtc = 0;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e) != CUDNN_STATUS_SUCCESS)
    return;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &got, &e) == CUDNN_STATUS_SUCCESS) {
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                                 &idx) == CUDNN_STATUS_SUCCESS)
      *engine = (long)idx;
    cudnnBackendNumericalNote_t nn[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got,
                                 nn) == CUDNN_STATUS_SUCCESS)
      for (int i = 0; i < got; i++) *nondet |= nn[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    cudnnBackendBehaviorNote_t bn[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got,
                                 bn) == CUDNN_STATUS_SUCCESS)
      for (int i = 0; i < got; i++) *rtc |= bn[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  cudnnBackendDestroyDescriptor(e);
}

static int make_plan(const ops_t *o, bd_t cfg, bd_t *plan, size_t *ws)
{
  cudnnHandle_t h = opc_ctx(o)->dnn;
  bd_t p = NULL;
  int64_t w = 0, got = 0;
  TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
  if (cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
      cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) ||
      cudnnBackendFinalize(p) ||
      cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               &got, &w)) {
    cudnnBackendDestroyDescriptor(p);
    return -1;
  }
  *plan = p;
  *ws = (size_t)w;
  return 0;
}

/* Runs plan on (a, w, b) with workspace ws. */
static int run(const ops_t *o, bd_t plan, void *a, void *w, void *b, void *ws)
{
  int64_t uids[3] = {UID_A, UID_W, UID_B};
  void *ptrs[3] = {a, w, b};
  bd_t vp = NULL;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3,
                                 uids);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                 3, ptrs);
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                 &ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(vp);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(opc_ctx(o)->dnn, plan, vp);
  if (vp) cudnnBackendDestroyDescriptor(vp);
  if (s != CUDNN_STATUS_SUCCESS)
    return opc_fail(o, "running a cuDNN graph-API convolution: %s", cudnnGetErrorString(s));
  return 0;
}

/* Scratch images for timing: small non-zero values (timings on zeros can flatter an engine). */
typedef struct {
  void *a, *w, *b, *ws;
  size_t ws_bytes;
} scratch_t;

static float time_plan(const ops_t *o, bd_t plan, const scratch_t *sc)
{
  cudaStream_t st = opc_ctx(o)->stream;
  cudaEvent_t e0 = NULL, e1 = NULL;
  float ms = -1;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto out;
  for (int i = 0; i < 2; i++)
    if (run(o, plan, sc->a, sc->w, sc->b, sc->ws)) goto out;
  cudaEventRecord(e0, st);
  for (int i = 0; i < 5; i++)
    if (run(o, plan, sc->a, sc->w, sc->b, sc->ws)) goto out;
  cudaEventRecord(e1, st);
  if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
    ms /= 5;
  else
    ms = -1;
out:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return ms;
}

static int allow_rtc(void)
{
  const char *e = getenv("SHMDDP_CONV_RTC");
  return e && !strcmp(e, "1");
}

/* The plan for direction dir; 0 on success, -1 (no message) when no engine qualifies. */
static int choose(const ops_t *o, const opc_graph_shape_t *s, int dir, int deterministic,
                  size_t ws_limit, const scratch_t *sc, opc_graph_t *g)
{
  pool_t p = {{0}, 0};
  bd_t graph, heur, cfg[OPC_GRAPH_CFGS];
  int64_t got = 0;
  int rc = -1, timed = 0;
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  for (int i = 0; i < OPC_GRAPH_CFGS; i++) cfg[i] = NULL;
  if (op_graph(o, &p, s, dir, &graph)) goto out;
  if (!(heur = pool_new(&p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR))) goto out;
  if (cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
      cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ||
      cudnnBackendFinalize(heur))
    goto out;
  for (int i = 0; i < OPC_GRAPH_CFGS; i++)
    if (!(cfg[i] = pool_new(&p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))) goto out;
  if (cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                               OPC_GRAPH_CFGS, &got, cfg))
    goto out;
  for (int i = 0; i < got; i++) {
    long engine;
    int nondet, rtc;
    bd_t plan;
    size_t ws;
    cfg_notes(cfg[i], &engine, &nondet, &rtc);
    if ((rtc && !allow_rtc()) || (deterministic && nondet)) continue;
    if (make_plan(o, cfg[i], &plan, &ws)) continue;
    if (ws > ws_limit || (sc && ws > sc->ws_bytes)) {
      cudnnBackendDestroyDescriptor(plan);
      continue;
    }
    float ms = sc ? time_plan(o, plan, sc) : -1;
    if (sc && ms < 0) { /* it would not run here: not a candidate */
      cudnnBackendDestroyDescriptor(plan);
      continue;
    }
    if (!g->plan[dir] || (ms >= 0 && ms < g->ms[dir])) {
      if (g->plan[dir]) cudnnBackendDestroyDescriptor(g->plan[dir]);
      g->plan[dir] = plan, g->ws[dir] = ws, g->engine[dir] = engine, g->ms[dir] = ms;
    } else {
      cudnnBackendDestroyDescriptor(plan);
    }
    rc = 0;
    if (!sc || ++timed == OPC_GRAPH_TIMED) break;
  }
out:
  pool_free(&p);
  cudaGetLastError(); /* a failed timing launch must not poison the next check */
  return rc;
}

void opc_graph_free(opc_graph_t *g)
{
  if (!g) return;
  for (int d = 0; d < OPC_G_DIRS; d++)
    if (g->plan[d]) cudnnBackendDestroyDescriptor(g->plan[d]);
  free(g);
}

int opc_graph_make(const ops_t *o, const opc_graph_shape_t *s, int deterministic, int timed,
                   size_t ws_limit, opc_graph_t **out, size_t *ws)
{
  *out = NULL;
  *ws = 0;
  opc_graph_t *g = (opc_graph_t *)calloc(1, sizeof *g);
  if (!g) return opc_fail(o, "out of memory planning a convolution");
  g->s = *s;
  scratch_t sc = {NULL, NULL, NULL, NULL, 0}, *scp = NULL;
  size_t es = s->dt == CUDNN_DATA_FLOAT ? 4 : 2;
  size_t ba = (size_t)s->n * s->ca * s->ha * s->wa * es, bb = (size_t)s->n * s->cb * s->hb * s->wb * es,
         bw = (size_t)s->cb * s->ca * s->k * s->k * es;
  int rc = 0;
  if (timed) {
    cudaStream_t st = opc_ctx(o)->stream;
    sc.ws_bytes = ws_limit;
    if (cudaMalloc(&sc.a, ba) || cudaMalloc(&sc.b, bb) || cudaMalloc(&sc.w, bw)) {
      cudaGetLastError();
      rc = opc_fail(o, "allocating %zu + %zu + %zu bytes to time convolution engines", ba, bb,
                    bw);
      goto out;
    }
    while (sc.ws_bytes && cudaMalloc(&sc.ws, sc.ws_bytes) != cudaSuccess) {
      cudaGetLastError();
      sc.ws = NULL;
      sc.ws_bytes = sc.ws_bytes >= ((size_t)2 << 20) ? sc.ws_bytes / 2 : 0;
    }
    if (cudaMemsetAsync(sc.a, 0x3c, ba, st) || cudaMemsetAsync(sc.b, 0x3c, bb, st) ||
        cudaMemsetAsync(sc.w, 0x3c, bw, st)) {
      rc = opc_fail(o, "filling the buffers to time convolution engines");
      goto out;
    }
    scp = &sc;
  }
  for (int d = 0; d < OPC_G_DIRS; d++) {
    if (choose(o, s, d, deterministic, ws_limit, scp, g)) {
      rc = -1; /* not supported: the caller falls back, no message */
      goto out;
    }
    if (g->ws[d] > *ws) *ws = g->ws[d];
  }
out:
  if (timed) {
    cudaFree(sc.a), cudaFree(sc.w), cudaFree(sc.b), cudaFree(sc.ws);
  }
  if (rc) {
    opc_graph_free(g);
    *ws = 0;
    return rc;
  }
  *out = g;
  return 0;
}

int opc_graph_fwd(const ops_t *o, const opc_graph_t *g, const void *a, const void *w, void *b,
                  void *ws)
{
  return run(o, g->plan[OPC_G_FWD], (void *)a, (void *)w, b, ws);
}

int opc_graph_bwd_data(const ops_t *o, const opc_graph_t *g, const void *w, const void *b, void *a,
                       void *ws)
{
  return run(o, g->plan[OPC_G_DGRAD], a, (void *)w, (void *)b, ws);
}

int opc_graph_bwd_filter(const ops_t *o, const opc_graph_t *g, const void *a, const void *b,
                         void *dw, int acc, void *ws)
{
  return run(o, g->plan[acc ? OPC_G_WGRAD_ACC : OPC_G_WGRAD], (void *)a, dw, (void *)b, ws);
}

void opc_graph_describe(const opc_graph_t *g, char *buf, size_t len)
{
  snprintf(buf, len, "graph engines fwd %ld (%.3f ms), bwd-data %ld (%.3f ms), bwd-filter %ld/%ld "
           "(%.3f ms)", g->engine[OPC_G_FWD], g->ms[OPC_G_FWD], g->engine[OPC_G_DGRAD],
           g->ms[OPC_G_DGRAD], g->engine[OPC_G_WGRAD], g->engine[OPC_G_WGRAD_ACC],
           g->ms[OPC_G_WGRAD]);
}
