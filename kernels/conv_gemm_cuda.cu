/* conv_gemm_cuda.cu — 1x1 convolutions as plain GEMMs over the NHWC pixels, through cuBLAS
 * (cuDNN is slow for them), and the cuBLAS handles the transposed convolutions' GEMMs use
 * (conv_up_gemm_cuda.cu).
 *
 * Column-major view: an NHWC tensor of P pixels and C channels is a C x P matrix (ld C).
 *   1x1, weights [cout][cin] = a cin x cout matrix W:
 *     forward Y = W^T X;  input grad dX = W dY;  weight grad dW (+)= X dY^T
 * f32 uses TF32 tensor cores (as the convolutions do; SHMDDP_TF32=0 turns them off), 16-bit types
 * accumulate in f32. Without cuBLAS in the build cuDNN does these too. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"
#include "shm/env.h"

#ifdef HAVE_CUBLAS
#include <cublas_v2.h>
#ifdef HAVE_CUBLASLT
#include <cublasLt.h>
#endif

/* cuBLAS's workspace, ours so graph capture never makes it allocate. */
#define GEMM_WS_BYTES ((size_t)4 << 20)

/* At planning time (SHMDDP_CONV1X1 is read there, not per call). */
int opc_gemm_conv_enabled(const ops_t *o, ops_conv_kind_t kind)
{
  return kind == OPS_CONV1X1 && !shm_env_is("SHMDDP_CONV1X1", "cudnn"); /* skinny ones: above */
}

int opc_blas(const ops_t *o, void **out)
{
  opc_ctx_t *x = opc_ctx(o);
  if (!x->blas) {
    cublasHandle_t h = NULL;
    if (!x->blas_ws) OPC_CUDA(o, cudaMalloc(&x->blas_ws, GEMM_WS_BYTES));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
      return opc_fail(o, "cuBLAS could not be initialised on device %d", x->device);
    if (cublasSetStream(h, x->stream) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, x->blas_ws, GEMM_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h);
      return opc_fail(o, "cuBLAS: setting the stream and workspace failed");
    }
    x->blas = h;
  }
  *out = x->blas;
  return 0;
}

#ifdef HAVE_CUBLASLT
/* cuBLASLt shares cuBLAS's workspace: both run on the table's one stream, one call at a time. */
int opc_blaslt(const ops_t *o, void **out, void **ws, size_t *ws_bytes)
{
  opc_ctx_t *x = opc_ctx(o);
  void *h = NULL;
  if (opc_blas(o, &h)) return -1; /* allocates the workspace */
  if (!x->blaslt) {
    cublasLtHandle_t lt = NULL;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS)
      return opc_fail(o, "cuBLASLt could not be initialised on device %d", x->device);
    x->blaslt = lt;
  }
  *out = x->blaslt;
  *ws = x->blas_ws;
  *ws_bytes = GEMM_WS_BYTES;
  return 0;
}
#endif

void opc_gemm_free(opc_ctx_t *x)
{
  if (x->blas) cublasDestroy((cublasHandle_t)x->blas);
#ifdef HAVE_CUBLASLT
  if (x->blaslt) cublasLtDestroy((cublasLtHandle_t)x->blaslt);
  x->blaslt = NULL;
#endif
  cudaFree(x->blas_ws);
  x->blas = NULL;
  x->blas_ws = NULL;
}

static int gemm(const ops_t *o, cublasOperation_t ta, cublasOperation_t tb, int m, size_t n,
                size_t k, const void *A, int lda, const void *B, int ldb, float beta, void *C,
                int ldc)
{
  cublasHandle_t h = NULL;
  if (n > 0x7fffffff || k > 0x7fffffff)
    return opc_fail(o, "a convolution GEMM over %zu pixels is too large", n > k ? n : k);
  if (opc_blas(o, (void **)&h)) return -1;
  const float alpha = 1;
  cudaDataType_t t = o->dtype == OPS_BF16 ? CUDA_R_16BF : o->dtype == OPS_F16 ? CUDA_R_16F
                                                                                : CUDA_R_32F;
  cublasComputeType_t ct = o->dtype == OPS_F32 && opc_ctx(o)->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                    : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = cublasGemmEx(h, ta, tb, m, (int)n, (int)k, &alpha, A, t, lda, B, t, ldb,
                                  &beta, C, t, ldc, ct, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS GEMM %dx%zux%zu failed (status %d)", m, n, k, (int)s);
  return 0;
}

int opc_gemm_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (gemm(o, CUBLAS_OP_T, CUBLAS_OP_N, c->cout, P, c->cin, w, c->cin, x, c->cin, 0, y, c->cout))
    return -1;
  return opc_bias_add(o, y, P, c->cout, b);
}

int opc_gemm_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) { /* cuBLAS with k = 0 scales C by beta: the gradient is 0 or unchanged */
    if (acc) return 0;
    OPC_CUDA(o, cudaMemsetAsync(dw, 0, (size_t)c->cin * c->cout * o->elem, opc_ctx(o)->stream));
    OPC_CUDA(o, cudaMemsetAsync(db, 0, (size_t)c->cout * o->elem, opc_ctx(o)->stream));
    return 0;
  }
  if (gemm(o, CUBLAS_OP_N, CUBLAS_OP_T, c->cin, c->cout, P, x, c->cin, dy, c->cout,
           acc ? 1.f : 0.f, dw, c->cin))
    return -1;
  return opc_channel_sum(o, dy, P, c->cout, db, acc);
}

int opc_gemm_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  return gemm(o, CUBLAS_OP_N, CUBLAS_OP_N, c->cin, P, c->cout, w, c->cin, dy, c->cout, 0, dx,
              c->cin);
}

#else /* no cuBLAS: cuDNN does these convolutions */

int opc_gemm_conv_enabled(const ops_t *o, ops_conv_kind_t kind) { return 0; }
void opc_gemm_free(opc_ctx_t *x) {}
int opc_blas(const ops_t *o, void **out) { return opc_fail(o, "this build has no cuBLAS"); }
int opc_gemm_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_gemm_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_gemm_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}

#endif
