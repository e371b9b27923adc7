/* conv_cuda.cu — the convolutions through cuDNN in NHWC: 3x3 pad 1, 1x1 with bias, and the
 * 2x2 stride-2 transposed convolution with bias, in f32 (TF32 allowed), bf16 and f16 (f32
 * accumulation). conv_plan chooses each direction's algorithm once per shape at the layer's max_n
 * and reports the workspace the chosen three need: by default cuDNN's heuristics restricted to
 * deterministic algorithms (bit-identical runs); with ops_cuda_set_deterministic(o, 0) it times
 * every algorithm (cudnnFind*Ex, the equivalent of cudnn.benchmark) and takes the fastest.
 *
 * Each layer is one cuDNN convolution "F" seen from three sides. For 3x3 and 1x1, F maps x to y
 * and the ops are F's forward, backward-filter and backward-data. The transposed convolution is
 * F's adjoint: F maps the (2h, 2w, cout) image to the (h, w, cin) one with the filter
 * [K = cin][2][2][C = cout] (exactly ops.h's layout), so the transposed forward is F's
 * backward-data, its input gradient is F's forward, and its filter gradient is F's
 * backward-filter with the two images swapped. Biases are own kernels (norm_cuda.cu). With
 * cuBLAS in the build the transposed convolution's forward and weight gradient run as GEMMs
 * (conv_up_gemm_cuda.cu), its input gradient too where the layer is bound by arithmetic, and
 * its whole backward where the gradient comes gathered (ops.h concat_bwd_gathered); its cuDNN
 * plan stays for the rest.
 *
 * A 3x3 layer whose input channels are not a multiple of the tensor cores' width (the RGB
 * input: 3) runs on channels zero-padded to 8 (4 in f32) inside the workspace: cuDNN's kernels
 * for 3 channels are far slower, and own direct kernels on the CUDA cores lost to the padded
 * layer (see bench/results/ops_cuda_1xh200.txt, 81124df); in 16-bit types, and in f32 where
 * TF32 is allowed, its forward and weight gradient run on own tensor-core kernels
 * (conv_rgb_cuda.cu, conv_rgb_tf32_cuda.cu), only its input gradient (never asked for by the
 * trainer) on cuDNN. 1x1 layers with few outputs (the head) run on own
 * kernels (conv_skinny_cuda.cu), other 1x1 layers on cuBLAS
 * (conv_gemm_cuda.cu).
 * Environment (the table of every knob: shmddp-train --help-env), read when a layer is planned,
 * never per call: SHMDDP_CONV_SEARCH=heuristic|timed (overrides the choice), SHMDDP_CONV_PAD=0 (the few-input layer on cuDNN at its
 * own width: no padding, no own kernels),
 * SHMDDP_CONV1X1=cudnn|gemm (1x1 layers on cuDNN or cuBLAS only), SHMDDP_CONV_WS_MB (search
 * workspace limit), SHMDDP_CONV_VERBOSE=1 (print each layer's algorithms to stderr); and
 * SHMDDP_TF32=0, read once per ops table (ops_cuda_init). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"
#include "shm/env.h"

/* Algorithms that need more workspace than this are not considered (bytes; an environment
 * variable overrides it, in MiB). */
#define CONV_WS_LIMIT_DEFAULT ((size_t)512 << 20)

typedef struct {
  int valid;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdFilterAlgo_t bwf;
  cudnnConvolutionBwdDataAlgo_t bwd;
  cudnnMathType_t fwd_math, bwf_math, bwd_math;
  float ms[3];                  /* the search's times (fwd, bwd filter, bwd data); -1 unknown */
} conv_algos_t;

typedef struct {
  int gemm;                     /* a GEMM through cuBLAS: nothing below is used */
  int skinny;                   /* a 1x1 with few outputs, own kernels: nothing below is used */
  int rgb;                      /* a 3x3 of few inputs: forward and weight gradient on own
                                   kernels (their partials at off_rgb), input gradient below */
  size_t off_rgb;
  opc_upc_t *upc;               /* a transposed convolution through cuBLAS (NULL: cuDNN) */
  cudnnTensorDescriptor_t a, b; /* F's input and output images, for batch cur_n */
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  int cur_n;
  int cinp;                     /* input channels as cuDNN sees them (padded), 3x3 only */
  size_t ws;                    /* cuDNN's workspace: the first ws bytes of the caller's */
  size_t off_x, off_w, off_g;   /* padded x, w, and dw or dx in the caller's workspace */
  size_t wbytes;                /* the (unpadded) weights' bytes */
  conv_algos_t *by_n;           /* [0..max_n]: max_n from the search, others by heuristics */
  int deterministic;            /* heuristics keep only deterministic algorithms */
} conv_plan_t;

/* The planner's switches (shm/env.h: the trainer has checked their values before it runs). */
static int env_is(const char *name, const char *value) { return shm_env_is(name, value); }

static cudnnDataType_t dnn_type(ops_dtype_t d)
{
  return d == OPS_BF16 ? CUDNN_DATA_BFLOAT16 : d == OPS_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* F's images for batch n (no-op when already set). */
static int set_batch(const ops_t *o, const ops_conv_t *c, conv_plan_t *pl, int n)
{
  if (pl->cur_n == n) return 0;
  cudnnDataType_t dt = dnn_type(o->dtype);
  if (c->kind == OPS_CONVT2X2) {
    OPC_DNN(o, cudnnSetTensor4dDescriptor(pl->a, CUDNN_TENSOR_NHWC, dt, n, c->cout, 2 * c->h,
                                          2 * c->w));
    OPC_DNN(o, cudnnSetTensor4dDescriptor(pl->b, CUDNN_TENSOR_NHWC, dt, n, c->cin, c->h, c->w));
  } else {
    OPC_DNN(o, cudnnSetTensor4dDescriptor(pl->a, CUDNN_TENSOR_NHWC, dt, n, pl->cinp, c->h, c->w));
    OPC_DNN(o, cudnnSetTensor4dDescriptor(pl->b, CUDNN_TENSOR_NHWC, dt, n, c->cout, c->h, c->w));
  }
  pl->cur_n = n;
  return 0;
}

static void plan_destroy(conv_plan_t *pl)
{
  if (!pl) return;
  if (pl->a) cudnnDestroyTensorDescriptor(pl->a);
  if (pl->b) cudnnDestroyTensorDescriptor(pl->b);
  if (pl->w) cudnnDestroyFilterDescriptor(pl->w);
  if (pl->conv) cudnnDestroyConvolutionDescriptor(pl->conv);
  free(pl->by_n);
  opc_upc_free(pl->upc);
  free(pl);
}

void opc_conv_plan_free(const ops_t *o, ops_conv_t *c)
{
  plan_destroy((conv_plan_t *)c->plan);
  c->plan = NULL;
}

static size_t ws_limit(void)
{
  long mb = shm_env_count_or("SHMDDP_CONV_WS_MB", 0);
  return mb > 0 ? (size_t)mb << 20 : CONV_WS_LIMIT_DEFAULT;
}

/* Times every algorithm of the three directions at batch max_n on scratch buffers filled with
 * small non-zero values (timings on zeros can flatter an algorithm). */
static int search(const ops_t *o, conv_plan_t *pl, size_t bytes_a, size_t bytes_b,
                  size_t bytes_w, conv_algos_t *best)
{
  opc_ctx_t *x = opc_ctx(o);
  cudnnHandle_t h = x->dnn;
  size_t limit = ws_limit();
  void *a = NULL, *b = NULL, *w = NULL, *ws = NULL;
  int rc = -1, got = 0;
  cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t pwf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  cudnnConvolutionBwdDataAlgoPerf_t pbd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  cudaError_t ce;
  cudnnStatus_t s;
  size_t want_ws = limit;
  if ((ce = cudaMalloc(&a, bytes_a)) || (ce = cudaMalloc(&b, bytes_b)) ||
      (ce = cudaMalloc(&w, bytes_w))) {
    opc_fail(o, "allocating %zu + %zu + %zu bytes for the convolution search: %s", bytes_a,
             bytes_b, bytes_w, cudaGetErrorString(ce));
    goto out;
  }
  /* The workspace: as much as the limit, or less if the device is short of memory. */
  while (cudaMalloc(&ws, want_ws) != cudaSuccess) {
    cudaGetLastError();
    ws = NULL;
    if ((want_ws /= 2) < ((size_t)1 << 20)) { want_ws = 0; break; }
  }
  if ((ce = cudaMemsetAsync(a, 0x3c, bytes_a, x->stream)) ||
      (ce = cudaMemsetAsync(b, 0x3c, bytes_b, x->stream)) ||
      (ce = cudaMemsetAsync(w, 0x3c, bytes_w, x->stream))) {
    opc_fail(o, "filling the convolution search buffers: %s", cudaGetErrorString(ce));
    goto out;
  }
  s = cudnnFindConvolutionForwardAlgorithmEx(h, pl->a, a, pl->w, w, pl->conv, pl->b, b,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, pf, ws,
                                             want_ws);
  for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
    if (pf[i].status == CUDNN_STATUS_SUCCESS && pf[i].memory <= want_ws) {
      best->fwd = pf[i].algo;
      best->fwd_math = pf[i].mathType;
      best->ms[0] = pf[i].time;
      rc = 0;
      break;
    }
  if (rc) {
    opc_fail(o, "cuDNN has no forward algorithm for this convolution (%s)",
             cudnnGetErrorString(s));
    goto out;
  }
  rc = -1;
  s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, pl->a, a, pl->b, b, pl->conv, pl->w, w,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                    &got, pwf, ws, want_ws);
  for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
    if (pwf[i].status == CUDNN_STATUS_SUCCESS && pwf[i].memory <= want_ws) {
      best->bwf = pwf[i].algo;
      best->bwf_math = pwf[i].mathType;
      best->ms[1] = pwf[i].time;
      rc = 0;
      break;
    }
  if (rc) {
    opc_fail(o, "cuDNN has no backward-filter algorithm for this convolution (%s)",
             cudnnGetErrorString(s));
    goto out;
  }
  rc = -1;
  s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, pl->w, w, pl->b, b, pl->conv, pl->a, a,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
                                                  pbd, ws, want_ws);
  for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < got; i++)
    if (pbd[i].status == CUDNN_STATUS_SUCCESS && pbd[i].memory <= want_ws) {
      best->bwd = pbd[i].algo;
      best->bwd_math = pbd[i].mathType;
      best->ms[2] = pbd[i].time;
      rc = 0;
      break;
    }
  if (rc)
    opc_fail(o, "cuDNN has no backward-data algorithm for this convolution (%s)",
             cudnnGetErrorString(s));
out:
  /* cudaFree waits for the device, so the search's queued work is finished before this. */
  cudaFree(a);
  cudaFree(b);
  cudaFree(w);
  cudaFree(ws);
  best->valid = rc == 0;
  return rc;
}

/* Workspace bytes of the three algorithms at the plan's current batch. */
static int algos_ws(const ops_t *o, conv_plan_t *pl, const conv_algos_t *al, size_t *ws)
{
  cudnnHandle_t h = opc_ctx(o)->dnn;
  size_t f = 0, wf = 0, d = 0;
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->fwd_math));
  OPC_DNN(o, cudnnGetConvolutionForwardWorkspaceSize(h, pl->a, pl->w, pl->conv, pl->b, al->fwd,
                                                     &f));
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->bwf_math));
  OPC_DNN(o, cudnnGetConvolutionBackwardFilterWorkspaceSize(h, pl->a, pl->b, pl->conv, pl->w,
                                                            al->bwf, &wf));
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->bwd_math));
  OPC_DNN(o, cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl->w, pl->b, pl->conv, pl->a,
                                                          al->bwd, &d));
  *ws = f > wf ? f : wf;
  if (d > *ws) *ws = d;
  return 0;
}

/* cuDNN's heuristics' first choice per direction within `limit` bytes of workspace, at the
 * plan's current batch (no timing, no device work). */
static int heuristic(const ops_t *o, conv_plan_t *pl, size_t limit, conv_algos_t *al)
{
  cudnnHandle_t h = opc_ctx(o)->dnn;
  const int det = pl->deterministic; /* only algorithms cuDNN marks deterministic */
  int got = 0, okf = 0, okw = 0, okd = 0;
  cudnnConvolutionFwdAlgoPerf_t pf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t pwf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  cudnnConvolutionBwdDataAlgoPerf_t pbd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  if (cudnnGetConvolutionForwardAlgorithm_v7(h, pl->a, pl->w, pl->conv, pl->b,
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, pf) ==
      CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < got && !okf; i++)
      if (pf[i].status == CUDNN_STATUS_SUCCESS && pf[i].memory <= limit &&
          (!det || pf[i].determinism == CUDNN_DETERMINISTIC)) {
        al->fwd = pf[i].algo;
        al->fwd_math = pf[i].mathType;
        okf = 1;
      }
  if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, pl->a, pl->b, pl->conv, pl->w,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                    &got, pwf) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < got && !okw; i++)
      if (pwf[i].status == CUDNN_STATUS_SUCCESS && pwf[i].memory <= limit &&
          (!det || pwf[i].determinism == CUDNN_DETERMINISTIC)) {
        al->bwf = pwf[i].algo;
        al->bwf_math = pwf[i].mathType;
        okw = 1;
      }
  if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, pl->w, pl->b, pl->conv, pl->a,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
                                                  pbd) == CUDNN_STATUS_SUCCESS)
    for (int i = 0; i < got && !okd; i++)
      if (pbd[i].status == CUDNN_STATUS_SUCCESS && pbd[i].memory <= limit &&
          (!det || pbd[i].determinism == CUDNN_DETERMINISTIC)) {
        al->bwd = pbd[i].algo;
        al->bwd_math = pbd[i].mathType;
        okd = 1;
      }
  if (!okf || !okw || !okd)
    return opc_fail(o, "cuDNN has no %salgorithm for this convolution within %zu bytes of "
                    "workspace%s", det ? "deterministic " : "", limit,
                    det ? " (train with --deterministic off to allow the others)" : "");
  al->ms[0] = al->ms[1] = al->ms[2] = -1;
  al->valid = 1;
  return 0;
}

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

int opc_conv_plan(const ops_t *o, ops_conv_t *c, size_t *ws_bytes)
{
  if (c->h <= 0 || c->w <= 0 || c->cin <= 0 || c->cout <= 0 || c->max_n < 1)
    return opc_fail(o, "convolution shape %dx%d, %d -> %d channels, batch %d is invalid", c->h,
                    c->w, c->cin, c->cout, c->max_n);
  if (c->kind != OPS_CONV3X3 && c->kind != OPS_CONV1X1 && c->kind != OPS_CONVT2X2)
    return opc_fail(o, "unknown convolution kind %d", (int)c->kind);
  opc_conv_plan_free(o, c);
  conv_plan_t *pl = (conv_plan_t *)calloc(1, sizeof *pl);
  if (!pl) return opc_fail(o, "out of memory planning a convolution");
  c->plan = pl;
  *ws_bytes = 0;
  if (opc_skinny_enabled(o, c)) {
    pl->skinny = 1;
    *ws_bytes = opc_skinny_ws(o, c);
    return 0;
  }
  if (opc_gemm_conv_enabled(o, c->kind)) {
    pl->gemm = 1;
    return 0;
  }
  pl->by_n = (conv_algos_t *)calloc((size_t)c->max_n + 1, sizeof *pl->by_n);
  if (!pl->by_n) return opc_fail(o, "out of memory planning a convolution");
  int k = c->kind == OPS_CONV3X3 ? 3 : c->kind == OPS_CONV1X1 ? 1 : 2;
  int pad = c->kind == OPS_CONV3X3 ? 1 : 0, stride = c->kind == OPS_CONVT2X2 ? 2 : 1;
  int align = o->dtype == OPS_F32 ? 4 : 8;
  pl->cinp = c->cin;
  if (c->kind == OPS_CONV3X3 && c->cin % align && !env_is("SHMDDP_CONV_PAD", "0"))
    pl->cinp = (c->cin + align - 1) / align * align;
  /* F's filter: [K][k][k][C] with K its output channels (cin for the transposed conv). */
  int fk = c->kind == OPS_CONVT2X2 ? c->cin : c->cout;
  int fc = c->kind == OPS_CONVT2X2 ? c->cout : pl->cinp;
  OPC_DNN(o, cudnnCreateTensorDescriptor(&pl->a));
  OPC_DNN(o, cudnnCreateTensorDescriptor(&pl->b));
  OPC_DNN(o, cudnnCreateFilterDescriptor(&pl->w));
  OPC_DNN(o, cudnnCreateConvolutionDescriptor(&pl->conv));
  OPC_DNN(o, cudnnSetFilter4dDescriptor(pl->w, dnn_type(o->dtype), CUDNN_TENSOR_NHWC, fk, fc, k,
                                        k));
  OPC_DNN(o, cudnnSetConvolution2dDescriptor(pl->conv, pad, pad, stride, stride, 1, 1,
                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  /* Tensor cores: TF32 for f32 (like PyTorch's allow_tf32 for convolutions), 16-bit otherwise.
   * SHMDDP_TF32=0 keeps f32 convolutions in plain f32 FMA (for cross-checks against f64). */
  int no_tf32 = o->dtype == OPS_F32 && !opc_ctx(o)->tf32;
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, no_tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  pl->cur_n = -1;
  if (set_batch(o, c, pl, c->max_n)) return -1;
  size_t img = (size_t)c->max_n * c->h * c->w * o->elem;
  size_t bytes_in = img * pl->cinp, bytes_out = img * c->cout * (c->kind == OPS_CONVT2X2 ? 4 : 1);
  size_t bytes_a = c->kind == OPS_CONVT2X2 ? bytes_out : bytes_in;
  size_t bytes_b = c->kind == OPS_CONVT2X2 ? bytes_in : bytes_out;
  size_t bytes_w = (size_t)fk * fc * k * k * o->elem;
  conv_algos_t *best = &pl->by_n[c->max_n];
  /* Deterministic (the default): heuristics, deterministic algorithms only; the choice depends
   * on nothing but the shape, GPU and cuDNN version, so runs repeat bit for bit. Otherwise the
   * timed search. SHMDDP_CONV_SEARCH=heuristic|timed overrides, for experiments. */
  int use_heuristic = opc_ctx(o)->deterministic;
  if (env_is("SHMDDP_CONV_SEARCH", "heuristic")) use_heuristic = 1;
  if (env_is("SHMDDP_CONV_SEARCH", "timed")) use_heuristic = 0;
  pl->deterministic = opc_ctx(o)->deterministic && use_heuristic;
  if (use_heuristic) {
    if (heuristic(o, pl, ws_limit(), best)) return -1;
  } else if (search(o, pl, bytes_a, bytes_b, bytes_w, best)) {
    return -1;
  }
  if (algos_ws(o, pl, best, &pl->ws)) return -1;
  *ws_bytes = pl->ws;
  pl->wbytes = (size_t)c->cin * c->cout * k * k * o->elem;
  if (pl->cinp != c->cin) { /* padded input, weights, and their gradients after cuDNN's part */
    pl->off_x = align256(pl->ws);
    pl->off_w = pl->off_x + align256(bytes_in);
    pl->off_g = pl->off_w + align256(bytes_w);
    *ws_bytes = pl->off_g + (bytes_in > bytes_w ? bytes_in : bytes_w);
  } else { /* room for an aligned copy of weights that are not 16-byte aligned (see below) */
    pl->off_w = align256(pl->ws);
    *ws_bytes = pl->off_w + bytes_w;
  }
  if (opc_rgb_enabled(o, c)) {
    pl->rgb = 1;
    pl->off_rgb = align256(*ws_bytes);
    *ws_bytes = pl->off_rgb + opc_rgb_ws(o, c);
  }
  if (c->kind == OPS_CONVT2X2) { /* its GEMMs use the workspace when cuDNN's part does not */
    size_t up_ws = 0;
    if (opc_upc_plan(o, c, &pl->upc, &up_ws)) return -1;
    if (up_ws > *ws_bytes) *ws_bytes = up_ws;
  }
  if (env_is("SHMDDP_CONV_VERBOSE", "1"))
    fprintf(stderr, "conv kind %d %dx%d %d(%d)->%d n=%d %s: fwd algo %d math %d %.3f ms, "
            "bwd-filter %d math %d %.3f ms, bwd-data %d math %d %.3f ms, workspace %zu\n",
            (int)c->kind, c->h, c->w, c->cin, pl->cinp, c->cout, c->max_n, o->name,
            (int)best->fwd, (int)best->fwd_math, best->ms[0], (int)best->bwf,
            (int)best->bwf_math, best->ms[1], (int)best->bwd, (int)best->bwd_math, best->ms[2],
            *ws_bytes);
  return 0;
}

/* The algorithms for batch n: the searched ones at max_n; for a smaller batch (the last one of
 * an epoch, evaluation) cuDNN's heuristics' first choice that fits the planned workspace. */
static const conv_algos_t *algos_for(const ops_t *o, const ops_conv_t *c, conv_plan_t *pl, int n)
{
  if (n > c->max_n) {
    opc_fail(o, "convolution called with batch %d, planned for at most %d", n, c->max_n);
    return NULL;
  }
  if (set_batch(o, c, pl, n)) return NULL;
  conv_algos_t *al = &pl->by_n[n];
  if (!al->valid && heuristic(o, pl, pl->ws, al)) return NULL;
  return al;
}

static conv_plan_t *plan_of(const ops_t *o, const ops_conv_t *c, int n)
{
  if (!c->plan) {
    opc_fail(o, "convolution used before conv_plan");
    return NULL;
  }
  if (n > c->max_n) { /* the workspace was sized for max_n */
    opc_fail(o, "convolution called with batch %d, planned for at most %d", n, c->max_n);
    return NULL;
  }
  return (conv_plan_t *)c->plan;
}

/* The three primitive directions of F. */
static int f_forward(const ops_t *o, conv_plan_t *pl, const conv_algos_t *al, const void *a,
                     const void *w, void *b, void *ws)
{
  const float one = 1, zero = 0;
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->fwd_math));
  OPC_DNN(o, cudnnConvolutionForward(opc_ctx(o)->dnn, &one, pl->a, a, pl->w, w, pl->conv,
                                     al->fwd, ws, pl->ws, &zero, pl->b, b));
  return 0;
}

static int f_backward_data(const ops_t *o, conv_plan_t *pl, const conv_algos_t *al,
                           const void *w, const void *b, void *a, void *ws)
{
  const float one = 1, zero = 0;
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->bwd_math));
  OPC_DNN(o, cudnnConvolutionBackwardData(opc_ctx(o)->dnn, &one, pl->w, w, pl->b, b, pl->conv,
                                          al->bwd, ws, pl->ws, &zero, pl->a, a));
  return 0;
}

static int f_backward_filter(const ops_t *o, conv_plan_t *pl, const conv_algos_t *al,
                             const void *a, const void *b, void *dw, int acc, void *ws)
{
  const float one = 1, beta = acc ? 1.f : 0.f;
  OPC_DNN(o, cudnnSetConvolutionMathType(pl->conv, al->bwf_math));
  OPC_DNN(o, cudnnConvolutionBackwardFilter(opc_ctx(o)->dnn, &one, pl->a, a, pl->b, b, pl->conv,
                                            al->bwf, ws, pl->ws, &beta, pl->w, dw));
  return 0;
}

/* The padded copies in the workspace (3x3 layers with pl->cinp > cin). */
static void *ws_at(void *ws, size_t off) { return (char *)ws + off; }

/* cuDNN's tensor-core kernels want 16-byte aligned tensors. The model lays its weights out
 * aligned (256 bytes), so for it these copies are not taken; weights of other callers that are
 * not 16-byte aligned (a flat buffer at 8-byte offsets) are copied to an aligned place in the
 * workspace first (a few MB per layer at most). */
static int misaligned(const void *p) { return ((uintptr_t)p % 16) != 0; }

static const void *aligned_weights(const ops_t *o, conv_plan_t *pl, const void *w, void *ws,
                                   int *rc)
{
  *rc = 0;
  if (!misaligned(w)) return w;
  cudaError_t e = cudaMemcpyAsync(ws_at(ws, pl->off_w), w, pl->wbytes, cudaMemcpyDeviceToDevice,
                                  opc_ctx(o)->stream);
  if (e != cudaSuccess)
    *rc = opc_fail(o, "copying weights to an aligned buffer: %s", cudaGetErrorString(e));
  return ws_at(ws, pl->off_w);
}

static int pad_input(const ops_t *o, const ops_conv_t *c, conv_plan_t *pl, int n, const void *x,
                     void *ws)
{
  return opc_repack_channels(o, x, c->cin, ws_at(ws, pl->off_x), pl->cinp,
                             (size_t)n * c->h * c->w, 0);
}

static int pad_weights(const ops_t *o, const ops_conv_t *c, conv_plan_t *pl, const void *w,
                       void *ws)
{
  return opc_repack_channels(o, w, c->cin, ws_at(ws, pl->off_w), pl->cinp, (size_t)c->cout * 9,
                             0);
}

int opc_conv_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws)
{
  conv_plan_t *pl = plan_of(o, c, n);
  if (!pl) return -1;
  if (pl->skinny) return opc_skinny_fwd(o, c, n, x, w, b, y);
  if (pl->gemm) return opc_gemm_fwd(o, c, n, x, w, b, y, ws);
  if (pl->rgb && opc_rgb_usable(y)) return opc_rgb_fwd(o, c, n, x, w, y);
  if (pl->upc) return opc_upc_fwd(o, c, pl->upc, n, x, w, b, y, ws);
  if (n == 0) return 0;
  const conv_algos_t *al = algos_for(o, c, pl, n);
  if (!al) return -1;
  size_t P = (size_t)n * c->h * c->w;
  int rc = 0;
  if (pl->cinp == c->cin) w = aligned_weights(o, pl, w, ws, &rc);
  if (rc) return -1;
  switch (c->kind) {
  case OPS_CONV3X3:
    if (pl->cinp != c->cin) {
      if (pad_input(o, c, pl, n, x, ws) || pad_weights(o, c, pl, w, ws)) return -1;
      return f_forward(o, pl, al, ws_at(ws, pl->off_x), ws_at(ws, pl->off_w), y, ws);
    }
    return f_forward(o, pl, al, x, w, y, ws);
  case OPS_CONV1X1:
    if (f_forward(o, pl, al, x, w, y, ws)) return -1;
    return opc_bias_add(o, y, P, c->cout, b);
  case OPS_CONVT2X2:
    if (f_backward_data(o, pl, al, w, x, y, ws)) return -1;
    return opc_bias_add(o, y, 4 * P, c->cout, b);
  }
  return opc_fail(o, "unknown convolution kind %d", (int)c->kind);
}

int opc_conv_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws)
{
  conv_plan_t *pl = plan_of(o, c, n);
  if (!pl) return -1;
  if (pl->skinny) return opc_skinny_bwd_filter(o, c, n, x, dy, dw, db, acc, ws);
  if (pl->gemm) return opc_gemm_bwd_filter(o, c, n, x, dy, dw, db, acc, ws);
  if (pl->rgb && opc_rgb_usable(dy))
    return opc_rgb_bwd_filter(o, c, n, x, dy, dw, acc, ws_at(ws, pl->off_rgb));
  if (pl->upc) return opc_upc_bwd_filter(o, c, pl->upc, n, x, dy, dw, db, acc, ws);
  int k = c->kind == OPS_CONV3X3 ? 3 : c->kind == OPS_CONV1X1 ? 1 : 2;
  if (n == 0) { /* no pixels: the gradient is zero (or unchanged when accumulating) */
    if (acc) return 0;
    cudaStream_t st = opc_ctx(o)->stream;
    OPC_CUDA(o, cudaMemsetAsync(dw, 0, (size_t)c->cin * c->cout * k * k * o->elem, st));
    if (c->kind != OPS_CONV3X3) OPC_CUDA(o, cudaMemsetAsync(db, 0, c->cout * o->elem, st));
    return 0;
  }
  const conv_algos_t *al = algos_for(o, c, pl, n);
  if (!al) return -1;
  size_t P = (size_t)n * c->h * c->w;
  if (pl->cinp == c->cin && misaligned(dw)) { /* into an aligned buffer, then (+)= into dw */
    void *dwa = ws_at(ws, pl->off_w);
    int count = (int)(pl->wbytes / o->elem);
    if (opc_conv_bwd_filter(o, c, n, x, dy, dwa, NULL, 0, ws) ||
        (db && opc_channel_sum(o, dy, P * (c->kind == OPS_CONVT2X2 ? 4 : 1), c->cout, db, acc)))
      return -1;
    return opc_repack_channels(o, dwa, count, dw, count, 1, acc);
  }
  switch (c->kind) {
  case OPS_CONV3X3:
    if (pl->cinp != c->cin) { /* dw of the padded layer, then its real channels (+)= into dw */
      if (pad_input(o, c, pl, n, x, ws) ||
          f_backward_filter(o, pl, al, ws_at(ws, pl->off_x), dy, ws_at(ws, pl->off_g), 0, ws))
        return -1;
      return opc_repack_channels(o, ws_at(ws, pl->off_g), pl->cinp, dw, c->cin,
                                 (size_t)c->cout * 9, acc);
    }
    return f_backward_filter(o, pl, al, x, dy, dw, acc, ws);
  case OPS_CONV1X1: /* db NULL: the caller sums it (the misaligned-dw path above) */
    if (f_backward_filter(o, pl, al, x, dy, dw, acc, ws)) return -1;
    return db ? opc_channel_sum(o, dy, P, c->cout, db, acc) : 0;
  case OPS_CONVT2X2:
    if (f_backward_filter(o, pl, al, dy, x, dw, acc, ws)) return -1;
    return db ? opc_channel_sum(o, dy, 4 * P, c->cout, db, acc) : 0;
  }
  return opc_fail(o, "unknown convolution kind %d", (int)c->kind);
}

int opc_conv_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws)
{
  conv_plan_t *pl = plan_of(o, c, n);
  if (!pl) return -1;
  if (pl->skinny) return opc_skinny_bwd_data(o, c, n, dy, w, dx);
  if (pl->gemm) return opc_gemm_bwd_data(o, c, n, dy, w, dx, ws);
  if (opc_upc_bwd_data_enabled(pl->upc))
    return opc_upc_bwd_data(o, c, pl->upc, n, dy, w, dx, ws);
  if (n == 0) return 0;
  const conv_algos_t *al = algos_for(o, c, pl, n);
  if (!al) return -1;
  int rc = 0;
  if (pl->cinp == c->cin) w = aligned_weights(o, pl, w, ws, &rc);
  if (rc) return -1;
  if (c->kind == OPS_CONVT2X2) return f_forward(o, pl, al, dy, w, dx, ws);
  if (pl->cinp != c->cin) {
    if (pad_weights(o, c, pl, w, ws) ||
        f_backward_data(o, pl, al, ws_at(ws, pl->off_w), dy, ws_at(ws, pl->off_g), ws))
      return -1;
    return opc_repack_channels(o, ws_at(ws, pl->off_g), pl->cinp, dx, c->cin,
                               (size_t)n * c->h * c->w, 0);
  }
  return f_backward_data(o, pl, al, w, dy, dx, ws);
}

/* The 1x1 head on a BatchNorm's apply (ops.h conv1x1_*_bn): only the few-output kernels have the
 * prologue, so a layer planned on cuDNN or cuBLAS (SHMDDP_CONV1X1) says 0 and is refused. */
int opc_conv1x1_bn_ok(const ops_t *o, const ops_conv_t *c)
{
  return c->kind == OPS_CONV1X1 && c->cout <= OPS_BN_1X1_MOST_K && c->plan &&
         ((const conv_plan_t *)c->plan)->skinny;
}

static conv_plan_t *bn_plan_of(const ops_t *o, const ops_conv_t *c, int n, const double *saved,
                               const void *gamma, const void *beta)
{
  if (!saved || !gamma || !beta) {
    opc_fail(o, "a 1x1 convolution on a BatchNorm's apply needs the norm's saved statistics, "
             "gamma and beta (one is NULL)");
    return NULL;
  }
  conv_plan_t *pl = plan_of(o, c, n);
  if (pl && !opc_conv1x1_bn_ok(o, c)) {
    opc_fail(o, "this convolution (kind %d, %d outputs) does not run on a BatchNorm's apply "
             "(conv1x1_bn_ok says 0)", (int)c->kind, c->cout);
    return NULL;
  }
  return pl;
}

int opc_conv1x1_fwd_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const double *saved, const void *gamma, const void *beta, const void *w,
                       const void *b, void *y, void *ws)
{
  if (!bn_plan_of(o, c, n, saved, gamma, beta)) return -1;
  return opc_skinny_fwd_bn(o, c, n, x, saved, gamma, beta, w, b, y);
}

int opc_conv1x1_bwd_filter_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                              const double *saved, const void *gamma, const void *beta,
                              const void *dy, void *dw, void *db, int acc, void *ws)
{
  if (!bn_plan_of(o, c, n, saved, gamma, beta)) return -1;
  return opc_skinny_bwd_filter_bn(o, c, n, x, saved, gamma, beta, dy, dw, db, acc, ws);
}

/* The transposed convolution's gradient gathered (ops.h): only its cuBLAS GEMMs read that order
 * (cuDNN's kernels take the NHWC image), so a layer planned without them (no cuBLAS in the
 * build, leading dimensions past int) says 0, and the two entries refuse it. */
int opc_conv_gathered(const ops_t *o, const ops_conv_t *c)
{
  return c->kind == OPS_CONVT2X2 && c->plan && ((const conv_plan_t *)c->plan)->upc;
}

static conv_plan_t *gathered_plan_of(const ops_t *o, const ops_conv_t *c, int n)
{
  conv_plan_t *pl = plan_of(o, c, n);
  if (pl && (c->kind != OPS_CONVT2X2 || !pl->upc)) {
    opc_fail(o, "this convolution (kind %d) does not take its gradient in the gathered order "
             "(conv_gathered says 0)", (int)c->kind);
    return NULL;
  }
  return pl;
}

int opc_conv_bwd_filter_gathered(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                 const void *dy, void *dw, void *db, int acc, void *ws)
{
  conv_plan_t *pl = gathered_plan_of(o, c, n);
  if (!pl) return -1;
  return opc_upc_bwd_filter_gathered(o, c, pl->upc, n, x, dy, dw, db, acc, ws);
}

int opc_conv_bwd_data_gathered(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                               const void *w, void *dx, void *ws)
{
  conv_plan_t *pl = gathered_plan_of(o, c, n);
  if (!pl) return -1;
  return opc_upc_bwd_data_gathered(o, c, pl->upc, n, dy, w, dx, ws);
}

unsigned ops_cuda_conv_up_route(const ops_t *o, const ops_conv_t *c, int n, const void *w,
                                const void *dw)
{
  conv_plan_t *pl = c->kind == OPS_CONVT2X2 ? plan_of(o, c, n) : NULL;
  return pl && pl->upc ? opc_upc_route(o, c, n, w, dw) : 0;
}
