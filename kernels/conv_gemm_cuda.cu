/* conv_gemm_cuda.cu — convolutions that are plain GEMMs over the NHWC pixels, through cuBLAS:
 * 1x1 (cuDNN is slow for the U-Net's head, 64 -> 4 channels over every pixel) and, opt-in with
 * SHMDDP_CONVT=gemm, the 2x2 stride-2 transposed convolution (cuDNN runs those 10-20x below
 * the tensor cores' rate on the U-Net's shapes).
 *
 * Column-major view: an NHWC tensor of P pixels and C channels is a C x P matrix (ld C).
 *   1x1, weights [cout][cin] = a cin x cout matrix W:
 *     forward Y = W^T X;  input grad dX = W dY;  weight grad dW (+)= X dY^T
 *   transposed 2x2, weights [cin][2][2][cout] = a 4cout x cin matrix W; Z is the 4cout x P
 *   matrix of every input pixel's 2x2 output block ([kh][kw][cout]), kept in the workspace:
 *     forward Z = W X, then Z is scattered into the (2h, 2w) image with the bias added;
 *     backward dZ is gathered from dy, dX = W^T dZ, dW (+)= dZ X^T.
 * f32 uses TF32 tensor cores (as the convolutions do), 16-bit types accumulate in f32. Without
 * cuBLAS in the build cuDNN does all of these. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"

#ifdef HAVE_CUBLAS
#include <cublas_v2.h>

/* cuBLAS's workspace, ours so graph capture never makes it allocate. */
#define GEMM_WS_BYTES ((size_t)4 << 20)

int opc_gemm_conv_enabled(const ops_t *o, ops_conv_kind_t kind)
{
  const char *e1 = getenv("SHMDDP_CONV1X1"), *et = getenv("SHMDDP_CONVT");
  if (kind == OPS_CONV1X1) return !(e1 && !strcmp(e1, "cudnn")); /* skinny ones: see above */
  if (kind == OPS_CONVT2X2) return et && !strcmp(et, "gemm");
  return 0;
}

size_t opc_gemm_conv_ws(const ops_t *o, const ops_conv_t *c)
{
  return c->kind == OPS_CONVT2X2 ? (size_t)c->max_n * c->h * c->w * 4 * c->cout * o->elem : 0;
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

static int gemm(const ops_t *o, cublasOperation_t ta, cublasOperation_t tb, int m, size_t n,
                size_t k, const void *A, int lda, const void *B, int ldb, float beta, void *C,
                int ldc)
{
  cublasHandle_t h = NULL;
  if (n > 0x7fffffff || k > 0x7fffffff)
    return opc_fail(o, "a convolution GEMM over %zu pixels is too large", n > k ? n : k);
  if (blas(o, &h)) return -1;
  const float alpha = 1;
  cudaDataType_t t = o->dtype == OPS_BF16 ? CUDA_R_16BF : o->dtype == OPS_F16 ? CUDA_R_16F
                                                                                : CUDA_R_32F;
  const char *tf32 = getenv("SHMDDP_TF32"); /* "0": plain f32, as in conv_cuda.cu */
  cublasComputeType_t ct = o->dtype == OPS_F32 && !(tf32 && strcmp(tf32, "0") == 0)
                               ? CUBLAS_COMPUTE_32F_FAST_TF32
                               : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = cublasGemmEx(h, ta, tb, m, (int)n, (int)k, &alpha, A, t, lda, B, t, ldb,
                                  &beta, C, t, ldc, ct, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS GEMM %dx%zux%zu failed (status %d)", m, n, k, (int)s);
  return 0;
}

/* Z (rows q = 2p + kh of 2cout elements: [kw][cout]) <-> the (2h, 2w) image y: forward copies
 * Z into y adding the bias, backward copies y (the gradient) into Z. */
template <typename T, int N>
__global__ void convt_move_kernel(int to_y, T *z, T *y, const T *bias, size_t rows, int w,
                                  int cout, int gb, int r)
{
  const int gi = threadIdx.x % gb, row = threadIdx.x / gb, g = blockIdx.x * gb + gi;
  const int C2 = 2 * cout;
  if (g * N >= C2) return;
  float b[N];
  for (int k = 0; k < N; k++) b[k] = to_y ? opc_ld(bias[(g * N + k) % cout]) : 0.f;
  for (size_t q = (size_t)blockIdx.y * r + row; q < rows; q += (size_t)gridDim.y * r) {
    size_t p = q >> 1, t = p / w; /* t = image * h + input row */
    int kh = (int)(q & 1), j = (int)(p % w);
    T *yp = y + ((t * 2 + kh) * (size_t)(2 * w) + 2 * (size_t)j) * cout + (size_t)g * N;
    T *zp = z + q * C2 + (size_t)g * N;
    if (to_y) {
      opc_pack<T, N> v = opc_load<T, N>(zp);
      for (int k = 0; k < N; k++) v.v[k] = opc_st<T>(opc_ld(v.v[k]) + b[k]);
      opc_store<T, N>(yp, v);
    } else {
      opc_store<T, N>(zp, opc_load<T, N>(yp));
    }
  }
}

template <typename T>
static int convt_move_t(const ops_t *o, int to_y, void *z, void *y, const void *bias, size_t P,
                        int w, int cout)
{
  const int V = 16 / sizeof(T);
  int N = opc_vec_width(sizeof(T), 2 * (size_t)cout, z, y);
  if (cout % V) N = 1; /* each 2cout row starts cout-aligned in y */
  opc_geo_t g = OPC_PASS_GEO(o, 2 * P, 2 * cout, N, 1);
  cudaStream_t st = opc_ctx(o)->stream;
  if (N == V)
    convt_move_kernel<T, V><<<g.grid, g.block, 0, st>>>(to_y, (T *)z, (T *)y, (const T *)bias,
                                                        2 * P, w, cout, g.gb, g.r);
  else
    convt_move_kernel<T, 1><<<g.grid, g.block, 0, st>>>(to_y, (T *)z, (T *)y, (const T *)bias,
                                                        2 * P, w, cout, g.gb, g.r);
  OPC_LAUNCHED(o, to_y ? "transposed convolution scatter" : "transposed convolution gather");
  return 0;
}

static int convt_move(const ops_t *o, int to_y, void *z, void *y, const void *bias, size_t P,
                      int w, int cout)
{
  OPC_DISPATCH(o, convt_move_t, o, to_y, z, y, bias, P, w, cout);
}

int opc_gemm_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                 const void *b, void *y, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (c->kind == OPS_CONV1X1) {
    if (gemm(o, CUBLAS_OP_T, CUBLAS_OP_N, c->cout, P, c->cin, w, c->cin, x, c->cin, 0, y,
             c->cout))
      return -1;
    return opc_bias_add(o, y, P, c->cout, b);
  }
  if (gemm(o, CUBLAS_OP_N, CUBLAS_OP_N, 4 * c->cout, P, c->cin, w, 4 * c->cout, x, c->cin, 0, ws,
           4 * c->cout))
    return -1;
  return convt_move(o, 1, ws, y, b, P, c->w, c->cout);
}

int opc_gemm_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const void *dy, void *dw, void *db, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) { /* cuBLAS with k = 0 scales C by beta: the gradient is 0 or unchanged */
    if (acc) return 0;
    size_t k = c->kind == OPS_CONVT2X2 ? 4 : 1;
    OPC_CUDA(o, cudaMemsetAsync(dw, 0, k * c->cin * c->cout * o->elem, opc_ctx(o)->stream));
    OPC_CUDA(o, cudaMemsetAsync(db, 0, (size_t)c->cout * o->elem, opc_ctx(o)->stream));
    return 0;
  }
  if (c->kind == OPS_CONV1X1) {
    if (gemm(o, CUBLAS_OP_N, CUBLAS_OP_T, c->cin, c->cout, P, x, c->cin, dy, c->cout,
             acc ? 1.f : 0.f, dw, c->cin))
      return -1;
    return opc_channel_sum(o, dy, P, c->cout, db, acc);
  }
  if (convt_move(o, 0, ws, (void *)dy, NULL, P, c->w, c->cout) ||
      gemm(o, CUBLAS_OP_N, CUBLAS_OP_T, 4 * c->cout, c->cin, P, ws, 4 * c->cout, x, c->cin,
           acc ? 1.f : 0.f, dw, 4 * c->cout))
    return -1;
  return opc_channel_sum(o, dy, 4 * P, c->cout, db, acc);
}

int opc_gemm_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy, const void *w,
                      void *dx, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (c->kind == OPS_CONV1X1)
    return gemm(o, CUBLAS_OP_N, CUBLAS_OP_N, c->cin, P, c->cout, w, c->cin, dy, c->cout, 0, dx,
                c->cin);
  if (convt_move(o, 0, ws, (void *)dy, NULL, P, c->w, c->cout)) return -1;
  return gemm(o, CUBLAS_OP_T, CUBLAS_OP_N, c->cin, P, 4 * c->cout, w, 4 * c->cout, ws,
              4 * c->cout, 0, dx, c->cin);
}

#else /* no cuBLAS: cuDNN does these convolutions */

int opc_gemm_conv_enabled(const ops_t *o, ops_conv_kind_t kind) { return 0; }
size_t opc_gemm_conv_ws(const ops_t *o, const ops_conv_t *c) { return 0; }
void opc_gemm_free(opc_ctx_t *x) {}
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
