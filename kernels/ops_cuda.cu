/* ops_cuda.cu — the CUDA backend's ops table: context (stream, cuDNN handle, scratch), error
 * reporting, the shared launch geometry, and the device allocator for the arena. The ops
 * themselves live in conv_cuda.cu, norm_cuda.cu, elem_cuda.cu and loss_cuda.cu. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"
#include "shm/env.h"

int opc_fail(const ops_t *o, const char *fmt, ...)
{
  opc_ctx_t *x = opc_ctx(o);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->err, sizeof x->err, fmt, ap);
  va_end(ap);
  return -1;
}

const char *opc_dtype_name(ops_dtype_t d)
{
  switch (d) {
  case OPS_F32: return "f32";
  case OPS_F64: return "f64";
  case OPS_BF16: return "bf16";
  case OPS_F16: return "f16";
  }
  return "?";
}

static const char *cuda_last_error(const ops_t *o)
{
  opc_ctx_t *x = opc_ctx(o);
  return x && x->err[0] ? x->err : "no error";
}

static void ctx_free(opc_ctx_t *x)
{
  if (!x) return;
  /* Queued work may still use the buffers: finish it first (errors here have no one to go to). */
  if (x->stream) cudaStreamSynchronize(x->stream);
  cudaFree(x->scratch);
  cudaFree(x->slots);
  cudaFree(x->bad);
  cudaFreeHost(x->host);
  if (x->dnn) cudnnDestroy(x->dnn);
  opc_gemm_free(x);
  if (x->own_stream && x->stream) cudaStreamDestroy(x->stream);
  free(x);
}

static void cuda_destroy(ops_t *o)
{
  ctx_free(opc_ctx(o));
  o->ctx = NULL;
}

static int cuda_fill_zero(const ops_t *o, void *dst, size_t bytes)
{
  if (bytes) OPC_CUDA(o, cudaMemsetAsync(dst, 0, bytes, opc_ctx(o)->stream));
  return 0;
}

opc_geo_t opc_geometry(const ops_t *o, size_t rows, int C, int N, int nz,
                       int target_rows_per_thread, size_t max_splits, int blocks_per_sm,
                       int gb_most)
{
  opc_geo_t g;
  g.N = N;
  g.G = C / N;
  const int gbm = gb_most < 1 ? 1 : gb_most < OPC_THREADS ? gb_most : OPC_THREADS;
  g.gb = g.G < 1 ? 1 : g.G < gbm ? g.G : gbm; /* C = 0: launch nothing useful */
  g.r = OPC_THREADS / g.gb;
  int gx = (g.G + g.gb - 1) / g.gb;
  /* Enough blocks for blocks_per_sm per multiprocessor, but each thread walks at least the
   * target rows. */
  size_t want = (size_t)opc_ctx(o)->sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 1) /
                ((size_t)gx * (nz > 0 ? nz : 1));
  size_t most = (rows + (size_t)g.r * target_rows_per_thread - 1) /
                ((size_t)g.r * target_rows_per_thread);
  size_t splits = want < most ? want : most;
  if (splits > max_splits) splits = max_splits;
  if (splits > 65535) splits = 65535;
  if (splits < 1) splits = 1;
  g.grid = dim3(gx, (unsigned)splits, nz > 0 ? nz : 1);
  g.block = dim3(g.gb * g.r);
  return g;
}

void ops_cuda_set_deterministic(ops_t *o, int on)
{
  if (opc_ctx(o)) opc_ctx(o)->deterministic = on != 0;
}

void *ops_cuda_stream(const ops_t *o) { return opc_ctx(o) ? opc_ctx(o)->stream : NULL; }

size_t ops_cuda_scratch_bytes(const ops_t *o)
{
  return (OPC_SCRATCH_DOUBLES + OPC_SLOT_DOUBLES) * sizeof(double) +
         2 * sizeof(unsigned long long) + ((size_t)4 << 20) /* cuBLAS workspace, if used */;
}

#define INIT_CUDA(call)                                                                        \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      snprintf(err, errlen, "CUDA device %d: %s failed: %s", device, #call,                   \
               cudaGetErrorString(e_));                                                        \
      ctx_free(x);                                                                             \
      return -1;                                                                               \
    }                                                                                          \
  } while (0)

int ops_cuda_init(ops_t *o, ops_dtype_t dtype, int device, void *stream, char *err,
                  size_t errlen)
{
  memset(o, 0, sizeof *o);
  size_t elem;
  const char *name;
  switch (dtype) {
  case OPS_F32: elem = 4; name = "cuda-f32"; break;
  case OPS_BF16: elem = 2; name = "cuda-bf16"; break;
  case OPS_F16: elem = 2; name = "cuda-f16"; break;
  default:
    snprintf(err, errlen, "the CUDA backend computes in f32, bf16 or f16, not %s (f64 is the "
             "CPU reference's)", opc_dtype_name(dtype));
    return -1;
  }
  opc_ctx_t *x = (opc_ctx_t *)calloc(1, sizeof *x);
  if (!x) return snprintf(err, errlen, "out of memory creating the CUDA ops context"), -1;
  x->device = device;
  x->deterministic = 1;
  /* SHMDDP_TF32=0: plain f32 FMA, for cross-checks against f64 */
  x->tf32 = 1;
  if (shm_env_flag("SHMDDP_TF32", &x->tf32, err, errlen) < 0) {
    ctx_free(x);
    return -1;
  }
  int count = 0;
  INIT_CUDA(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    snprintf(err, errlen, "CUDA device %d does not exist (this machine has %d)", device, count);
    ctx_free(x);
    return -1;
  }
  INIT_CUDA(cudaSetDevice(device));
  INIT_CUDA(cudaDeviceGetAttribute(&x->sm_count, cudaDevAttrMultiProcessorCount, device));
  if (stream) {
    x->stream = (cudaStream_t)stream;
  } else {
    INIT_CUDA(cudaStreamCreate(&x->stream));
    x->own_stream = 1;
  }
  INIT_CUDA(cudaMalloc(&x->scratch, OPC_SCRATCH_DOUBLES * sizeof(double)));
  INIT_CUDA(cudaMalloc(&x->slots, OPC_SLOT_DOUBLES * sizeof(double)));
  INIT_CUDA(cudaMalloc(&x->bad, 2 * sizeof(unsigned long long)));
  INIT_CUDA(cudaMemset(x->bad, 0xff, sizeof(unsigned long long)));
  INIT_CUDA(cudaMallocHost(&x->host, 4 * sizeof(double)));
  cudnnStatus_t s = cudnnCreate(&x->dnn);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(x->dnn, x->stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    snprintf(err, errlen, "cuDNN on CUDA device %d: %s (is libcudnn 9 installed for this "
             "driver?)", device, cudnnGetErrorString(s));
    ctx_free(x);
    return -1;
  }
  o->name = name;
  o->dtype = dtype;
  o->elem = elem;
  o->device = device;
  o->ctx = x;
  o->last_error = cuda_last_error;
  o->destroy = cuda_destroy;
  o->conv_plan = opc_conv_plan;
  o->conv_plan_free = opc_conv_plan_free;
  o->conv_fwd = opc_conv_fwd;
  o->conv1x1_bn_ok = opc_conv1x1_bn_ok;
  o->conv1x1_fwd_bn = opc_conv1x1_fwd_bn;
  o->conv1x1_bwd_filter_bn = opc_conv1x1_bwd_filter_bn;
  o->head_train_1x1 = opc_head_train_1x1;
  o->conv_bwd_filter = opc_conv_bwd_filter;
  o->conv_bwd_data = opc_conv_bwd_data;
  o->bn_stats = opc_bn_stats;
  o->bn_finalize = opc_bn_finalize;
  o->bn_stats_finalize = opc_bn_stats_finalize;
  o->bn_saved_from_running = opc_bn_saved_from_running;
  o->bn_apply = opc_bn_apply;
  o->bn_apply_ld = opc_bn_apply_ld;
  o->bn_apply_pool = opc_bn_apply_pool;
  o->bn_bwd_reduce = opc_bn_bwd_reduce;
  o->bn_bwd_apply = opc_bn_bwd_apply;
  o->bn_bwd_reduce_1x1 = opc_bn_bwd_reduce_1x1;
  o->bn_bwd_apply_1x1 = opc_bn_bwd_apply_1x1;
  o->gn_fwd = opc_gn_fwd;
  o->gn_bwd = opc_gn_bwd;
  o->relu_fwd = opc_relu_fwd;
  o->relu_bwd = opc_relu_bwd;
  o->maxpool_fwd = opc_maxpool_fwd;
  o->maxpool_bwd = opc_maxpool_bwd;
  o->concat_fwd = opc_concat_fwd;
  o->concat_bwd = opc_concat_bwd;
  o->concat_bwd_gathered = opc_concat_bwd_gathered;
  o->conv_gathered = opc_conv_gathered;
  o->conv_bwd_filter_gathered = opc_conv_bwd_filter_gathered;
  o->conv_bwd_data_gathered = opc_conv_bwd_data_gathered;
  o->softmax_ce = opc_softmax_ce;
  o->from_f32 = opc_from_f32;
  o->to_f32 = opc_to_f32;
  o->fill_zero = cuda_fill_zero;
  o->softmax_ce_async = ops_cuda_softmax_ce_async;
  o->labels_check_async = ops_cuda_check_labels_async;
  o->labels_result = ops_cuda_labels_result;
  o->labels_check = ops_cuda_check_labels;
  opc_set_fused(o);
  return 0;
}
