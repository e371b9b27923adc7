/* conv1x1_cuda.cu — 1x1 convolutions as cuBLAS GEMMs over the NHWC pixels (cuDNN is slow for
 * the U-Net's head, 64 -> 4 channels over every pixel: a memory-bound GEMM with a tiny N).
 * In column-major terms an NHWC tensor of P pixels and C channels is a C x P matrix with
 * leading dimension C, and the [cout][cin] weights are a cin x cout matrix:
 *   forward      Y (cout x P)  = W^T X
 *   input grad   dX (cin x P)  = W dY
 *   weight grad  dW (cin x cout) (+)= X dY^T
 * f32 uses TF32 tensor cores (as the convolutions do), 16-bit types accumulate in f32.
 * Without cuBLAS in the build, opc_gemm1x1_enabled says no and cuDNN does these. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"

#ifdef HAVE_CUBLAS
#include <cublas_v2.h>

/* cuBLAS's workspace, ours so graph capture never makes it allocate. */
#define GEMM_WS_BYTES ((size_t)4 << 20)

int opc_gemm1x1_enabled(const ops_t *o)
{
  const char *e = getenv("SHMDDP_CONV1X1");
  return !(e && !strcmp(e, "cudnn"));
}

static int blas(const ops_t *o, cublasHandle_t *out)
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
  *out = (cublasHandle_t)x->blas;
  return 0;
}

void opc_gemm_free(opc_ctx_t *x)
{
  if (x->blas) cublasDestroy((cublasHandle_t)x->blas);
  cudaFree(x->blas_ws);
  x->blas = NULL;
  x->blas_ws = NULL;
}

static int gemm(const ops_t *o, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc)
{
  cublasHandle_t h = NULL;
  if (blas(o, &h)) return -1;
  const float alpha = 1;
  cudaDataType_t t = o->dtype == OPS_BF16 ? CUDA_R_16BF : o->dtype == OPS_F16 ? CUDA_R_16F
                                                                                : CUDA_R_32F;
  cublasComputeType_t ct = o->dtype == OPS_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = cublasGemmEx(h, ta, tb, m, n, k, &alpha, A, t, lda, B, t, ldb, &beta, C, t,
                                  ldc, ct, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS GEMM %dx%dx%d failed (status %d)", m, n, k, (int)s);
  return 0;
}

int opc_gemm1x1_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                    const void *b, void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (P > 0x7fffffff) return opc_fail(o, "1x1 convolution over %zu pixels: too many", P);
  if (gemm(o, CUBLAS_OP_T, CUBLAS_OP_N, c->cout, (int)P, c->cin, w, c->cin, x, c->cin, 0, y,
           c->cout))
    return -1;
  return opc_bias_add(o, y, P, c->cout, b);
}

int opc_gemm1x1_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                           const void *dy, void *dw, void *db, int acc)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P > 0x7fffffff) return opc_fail(o, "1x1 convolution over %zu pixels: too many", P);
  if (P == 0) { /* cuBLAS with k = 0 scales C by beta: the gradient is 0 or unchanged */
    if (acc) return 0;
    OPC_CUDA(o, cudaMemsetAsync(dw, 0, (size_t)c->cin * c->cout * o->elem, opc_ctx(o)->stream));
    OPC_CUDA(o, cudaMemsetAsync(db, 0, (size_t)c->cout * o->elem, opc_ctx(o)->stream));
    return 0;
  }
  if (gemm(o, CUBLAS_OP_N, CUBLAS_OP_T, c->cin, c->cout, (int)P, x, c->cin, dy, c->cout,
           acc ? 1.f : 0.f, dw, c->cin))
    return -1;
  return opc_channel_sum(o, dy, P, c->cout, db, acc);
}

int opc_gemm1x1_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                         const void *w, void *dx)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (P > 0x7fffffff) return opc_fail(o, "1x1 convolution over %zu pixels: too many", P);
  return gemm(o, CUBLAS_OP_N, CUBLAS_OP_N, c->cin, (int)P, c->cout, w, c->cin, dy, c->cout, 0,
              dx, c->cin);
}

#else /* no cuBLAS: cuDNN does the 1x1 convolutions */

int opc_gemm1x1_enabled(const ops_t *o) { return 0; }
void opc_gemm_free(opc_ctx_t *x) {}
int opc_gemm1x1_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                    const void *b, void *y)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_gemm1x1_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                           const void *dy, void *dw, void *db, int acc)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_gemm1x1_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                         const void *w, void *dx)
{
  return opc_fail(o, "this build has no cuBLAS");
}

#endif
