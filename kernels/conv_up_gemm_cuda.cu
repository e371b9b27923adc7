/* conv_up_gemm_cuda.cu — the 2x2 stride-2 transposed convolution as strided-batched GEMMs
 * through cuBLAS, reading and writing the NHWC images in place (no scatter or gather pass in
 * forward and input gradient).
 *
 * Input x: (n, h, w, cin); output y: (n, 2h, 2w, cout); weights [cin][i][j][cout] (ops.h).
 * Output row 2t + i (t = image * h + input row) is [w][j][cout]: for each i it is the product
 * of the weight slice Wi (the column-major 2cout x cin matrix at offset i * 2cout, ld 4cout:
 * both j taps side by side) with the input row t (cin x w, ld cin), written with ld 2cout.
 * Over all rows that is one batched GEMM per i, either batched over t (columns = the w pixels
 * of a row) or over the pixel column w (columns = the rows t, ld 4 w cout); the batching with
 * more columns per GEMM is taken. Wi is shared by the batch (stride 0).
 *   forward      y_i = Wi x (+ bias: cuBLASLt's bias epilogue, else a separate pass)
 *   input grad   dx = W0^T dy_0 + W1^T dy_1 (two GEMMs, the second accumulates)
 *   weight grad  dWi = sum over every input pixel of dy_i x^T; the pixels of dy_i are not
 *                evenly strided, so either (a) one GEMM per pixel column w (batched) writes f32
 *                partials that a pass sums in a fixed order, or (b) dy is first gathered into
 *                [pixel][i][j][cout] rows and one GEMM with K = every pixel does the rest. (a)
 *                moves w * 4 cout * cin f32 partials, (b) dy twice more: the cheaper one runs.
 * The input gradient only leaves cuDNN where the layer is bound by its arithmetic (the
 * second GEMM reads and writes dx again; where bytes bound the layer that costs more than
 * cuDNN's kernel loses). 16-bit types accumulate in f32, f32 on TF32 tensor cores unless
 * SHMDDP_TF32=0, as every convolution.
 *
 * dy gathered (ops.h concat_bwd_gathered: the concat's backward split writes the gradient as
 * method (b)'s [pixel][i][j][cout] rows z, 4cout x P, at no cost of its own): every layer on
 * these GEMMs takes it (opc_conv_gathered), and then
 *   weight grad  dW = z x^T, method (b)'s one GEMM with K = every pixel, no gather and no
 *                partials (a dW off alignment through f32 as below)
 *   input grad   dx = W^T z, one GEMM with K = 4 cout (W the column-major 4cout x cin
 *                matrix), dx written once; always here, never cuDNN (its kernels read NHWC)
 *   bias grad    the channel sum over z's 4P rows of cout (dy's rows, in another order)
 * Its sums are those of the NHWC path in another order: within rounding, not its bits.
 *
 * Alignment: cuBLAS's fast tensor-core kernels (on Hopper the ones that load through the
 * tensor memory accelerator) need every matrix 16-byte aligned; for a matrix off that it falls
 * back to slower kernels. The model's flat parameter buffer can put the weights and their
 * gradient off it: every tensor follows the head's (classes + 64 * classes elements), 8 bytes
 * off in 16-bit types at 4 classes. Such weights are first copied into the workspace (a few
 * MiB at most: microseconds), and such a weight gradient taken from the one GEMM of method
 * (b) is written as f32 into the workspace and rounded into place by the partials' pass (the
 * same rounding as the GEMM's own; method (a) writes it through that pass anyway). The
 * gathered dy's two GEMMs take the same copies and the same f32 way. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"

#ifdef HAVE_CUBLAS
#include <cublas_v2.h>
#ifdef HAVE_CUBLASLT
#include <cublasLt.h>
#endif

/* Ceilings for the choices above (H100/H200 class: dense 16-bit tensor-core rate, HBM copy
 * rate); only their ratio matters. */
#define UPC_FLOPS_PER_S 800e12
#define UPC_BYTES_PER_S 4e12

struct opc_upc {
  int use_bwd_data;  /* the input gradient through GEMMs too (else cuDNN) */
#ifdef HAVE_CUBLASLT
  int lt_key_n;      /* the cached epilogue plan: batch and alignment it was chosen for */
  unsigned lt_key_align;
  int lt_ok;         /* 1: lt_algo is usable; 0: no algorithm (bias as a pass); -1: unknown */
  cublasLtMatmulAlgo_t lt_algo;
#endif
};

static size_t align256(size_t v) { return (v + 255) & ~(size_t)255; }

/* One batched view of the images: count GEMMs of ncol columns each. */
typedef struct {
  int count, ncol;
  int ldx, ldy;            /* x's and y's leading dimensions (elements) */
  long long sx, sy;        /* their batch strides */
} upc_view_t;

static upc_view_t view_of(const ops_conv_t *c, int n)
{
  const long long W = c->w, NH = (long long)n * c->h, ci = c->cin, co = c->cout;
  if (W >= NH || W >= 128) /* batch over the rows t: each GEMM one output row */
    return (upc_view_t){.count = (int)NH, .ncol = (int)W, .ldx = (int)ci, .ldy = (int)(2 * co),
                        .sx = W * ci, .sy = 4 * W * co};
  return (upc_view_t){.count = (int)W, .ncol = (int)NH, .ldx = (int)(W * ci),
                      .ldy = (int)(4 * W * co), .sx = ci, .sy = 2 * co};
}

/* Offset of output row i's part (elements) within y's first row pair. */
static size_t row_off(const ops_conv_t *c, int i) { return (size_t)i * 2 * c->w * c->cout; }

static cudaDataType_t blas_type(ops_dtype_t d)
{
  return d == OPS_BF16 ? CUDA_R_16BF : d == OPS_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static cublasComputeType_t compute_type(const ops_t *o)
{
  return o->dtype == OPS_F32 && opc_ctx(o)->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                 : CUBLAS_COMPUTE_32F;
}

/* Weight-gradient method (a) when its f32 partials move fewer bytes than gathering dy. */
static int wgrad_partials(const ops_t *o, const ops_conv_t *c, int n)
{
  double part = (double)c->w * 4 * c->cout * c->cin * 4;
  double gather = 4.0 * n * c->h * c->w * c->cout * o->elem;
  return part < gather;
}

static size_t wgrad_ws(const ops_t *o, const ops_conv_t *c, int n)
{
  if (wgrad_partials(o, c, n)) return (size_t)c->w * 4 * c->cout * c->cin * sizeof(float);
  return (size_t)4 * n * c->h * c->w * c->cout * o->elem;
}

/* Whether a matrix at p meets the 16-byte alignment the fast GEMM kernels need. */
static int aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }

static size_t weight_bytes(const ops_t *o, const ops_conv_t *c)
{
  return (size_t)4 * c->cin * c->cout * o->elem;
}

/* The workspace: the bias twice over (2 cout elements), the weights' aligned copy, then the
 * weight gradient's partials or gathered dy (and after that its f32 result where dw is not
 * aligned). */
static size_t wcopy_off(const ops_t *o, const ops_conv_t *c)
{
  return align256((size_t)2 * c->cout * o->elem);
}

static size_t scratch_off(const ops_t *o, const ops_conv_t *c)
{
  return wcopy_off(o, c) + align256(weight_bytes(o, c));
}

/* Where method (b) puts its f32 result for a weight gradient that is not aligned: after the
 * largest scratch any batch takes (at max_n, see opc_upc_plan). */
static size_t wgrad_out_off(const ops_t *o, const ops_conv_t *c)
{
  return scratch_off(o, c) + align256(wgrad_ws(o, c, c->max_n));
}

unsigned opc_upc_route(const ops_t *o, const ops_conv_t *c, int n, const void *w, const void *dw)
{
  unsigned r = 0;
  if (!aligned16(w)) r |= OPS_CUDA_UP_STAGE_WEIGHTS;
  if (!aligned16(dw) && !wgrad_partials(o, c, n)) r |= OPS_CUDA_UP_STAGE_WGRAD;
  return r;
}

/* The weights as the GEMMs read them: w itself, or its copy in the workspace when w is not
 * aligned (NULL: the copy could not be queued, the error set). */
static const void *weights_for_gemm(const ops_t *o, const ops_conv_t *c, const void *w, void *ws)
{
  if (aligned16(w)) return w;
  void *cp = (char *)ws + wcopy_off(o, c);
  cudaError_t e = cudaMemcpyAsync(cp, w, weight_bytes(o, c), cudaMemcpyDeviceToDevice,
                                  opc_ctx(o)->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    opc_fail(o, "copying a transposed convolution's weights to an aligned buffer failed: %s",
             cudaGetErrorString(e));
    return NULL;
  }
  return cp;
}

int opc_upc_plan(const ops_t *o, const ops_conv_t *c, opc_upc_t **out, size_t *ws_bytes)
{
  *out = NULL;
  *ws_bytes = 0;
  if (c->kind != OPS_CONVT2X2) return 0;
  if ((long long)4 * c->w * c->cout > 0x7fffffffLL || (long long)c->w * c->cin > 0x7fffffffLL ||
      (long long)c->max_n * c->h > 0x7fffffffLL)
    return 0; /* leading dimensions past int: cuDNN */
  opc_upc_t *u = (opc_upc_t *)calloc(1, sizeof *u);
  if (!u) return opc_fail(o, "out of memory planning a convolution");
  /* bytes each tensor once against the FLOPs, at the planned batch */
  double P = (double)c->max_n * c->h * c->w;
  double flops = 8 * P * c->cin * c->cout;
  double bytes = (P * c->cin + 4 * P * c->cout + 4.0 * c->cin * c->cout) * o->elem;
  u->use_bwd_data = flops / UPC_FLOPS_PER_S > bytes / UPC_BYTES_PER_S;
#ifdef HAVE_CUBLASLT
  u->lt_ok = -1;
#endif
  /* the weight-gradient method at a smaller batch needs no more than at max_n (see
   * wgrad_partials: the partials' size does not depend on the batch); the f32 result of a
   * gradient off alignment always has its room (the pointer is only known at the call) */
  *ws_bytes = wgrad_out_off(o, c) + (size_t)4 * c->cin * c->cout * sizeof(float);
  *out = u;
  return 0;
}

void opc_upc_free(opc_upc_t *u) { free(u); }

int opc_upc_bwd_data_enabled(const opc_upc_t *u) { return u && u->use_bwd_data; }

/* C (+)= op(A) op(B) for `count` GEMMs with the given batch strides. ct_out: C's type. */
static int batched(const ops_t *o, cublasOperation_t ta, cublasOperation_t tb, int m, int ncol,
                   int k, const void *A, int lda, long long sa, const void *B, int ldb,
                   long long sb, float beta, void *C, cudaDataType_t ct_out, int ldc,
                   long long sc, int count)
{
  cublasHandle_t h = NULL;
  if (opc_blas(o, (void **)&h)) return -1;
  const float alpha = 1;
  cudaDataType_t t = blas_type(o->dtype);
  cublasStatus_t s = cublasGemmStridedBatchedEx(h, ta, tb, m, ncol, k, &alpha, A, t, lda, sa, B,
                                                t, ldb, sb, &beta, C, ct_out, ldc, sc, count,
                                                compute_type(o), CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS batched GEMM %dx%dx%d (%d of them) failed (status %d)", m, ncol,
                    k, count, (int)s);
  return 0;
}

/* ---- small passes: the bias twice over, dy gathered, the partials summed ---- */

template <typename T> __global__ void bias2_kernel(const T *b, T *b2, int cout)
{
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < 2 * cout) b2[r] = b[r % cout];
}

template <typename T> static int bias2_t(const ops_t *o, const void *b, void *b2, int cout)
{
  bias2_kernel<T><<<(2 * cout + 255) / 256, 256, 0, opc_ctx(o)->stream>>>((const T *)b, (T *)b2,
                                                                          cout);
  OPC_LAUNCHED(o, "transposed convolution bias copy");
  return 0;
}

static int bias2(const ops_t *o, const void *b, void *b2, int cout)
{
  OPC_DISPATCH(o, bias2_t, o, b, b2, cout);
}

/* z[p][i][j][cout] = dy[(2t + i)][2w + j][cout], p = t * w + column: rows of 2 cout elements
 * moved in units U (the widest that divides the row and both pointers); indices in I (32 bits
 * where they fit: the divisions are most of the work besides the copy). */
template <typename U, typename I>
__global__ void gather_kernel(const U *dy, U *z, I units, I row_units, I W)
{
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < units; e += (I)gridDim.x * blockDim.x) {
    I q = e / row_units, r = e - q * row_units; /* q = p * 2 + i */
    I p = q >> 1, t = p / W, col = p - t * W, i = q & 1;
    z[e] = dy[((t * 2 + i) * W + col) * row_units + r];
  }
}

template <typename U>
static void gather_launch(const ops_t *o, const void *dy, void *z, size_t units, size_t ru, int W)
{
  unsigned blocks = opc_blocks(o, units);
  cudaStream_t st = opc_ctx(o)->stream;
  if (units + (size_t)blocks * OPC_THREADS < 0xffffffffu) /* e never wraps */
    gather_kernel<U, unsigned><<<blocks, OPC_THREADS, 0, st>>>(
        (const U *)dy, (U *)z, (unsigned)units, (unsigned)ru, (unsigned)W);
  else
    gather_kernel<U, size_t><<<blocks, OPC_THREADS, 0, st>>>((const U *)dy, (U *)z, units, ru,
                                                             (size_t)W);
}

static int gather(const ops_t *o, const ops_conv_t *c, int n, const void *dy, void *z)
{
  size_t row = (size_t)2 * c->cout * o->elem, P = (size_t)n * c->h * c->w;
  uintptr_t m = (uintptr_t)dy | (uintptr_t)z | (uintptr_t)row;
  size_t u = m % 16 == 0 ? 16 : m % 8 == 0 ? 8 : m % 4 == 0 ? 4 : 2;
  size_t units = 2 * P * row / u, ru = row / u;
  switch (u) {
  case 16: gather_launch<uint4>(o, dy, z, units, ru, c->w); break;
  case 8: gather_launch<uint2>(o, dy, z, units, ru, c->w); break;
  case 4: gather_launch<unsigned>(o, dy, z, units, ru, c->w); break;
  default: gather_launch<unsigned short>(o, dy, z, units, ru, c->w);
  }
  OPC_LAUNCHED(o, "transposed convolution gradient gather");
  return 0;
}

/* dw[e] (+)= sum over k < parts of part[k * len + e], in that order. */
template <typename T>
__global__ void partial_sum_kernel(const float *part, int parts, size_t len, T *dw, int acc)
{
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < len;
       e += (size_t)gridDim.x * blockDim.x) {
    float s = 0;
    for (int k = 0; k < parts; k++) s += part[(size_t)k * len + e];
    dw[e] = opc_st<T>(acc ? opc_ld(dw[e]) + s : s);
  }
}

template <typename T>
static int partial_sum_t(const ops_t *o, const float *part, int parts, size_t len, void *dw,
                         int acc)
{
  partial_sum_kernel<T><<<opc_blocks(o, len), OPC_THREADS, 0, opc_ctx(o)->stream>>>(
      part, parts, len, (T *)dw, acc);
  OPC_LAUNCHED(o, "transposed convolution weight-gradient sum");
  return 0;
}

static int partial_sum(const ops_t *o, const float *part, int parts, size_t len, void *dw,
                       int acc)
{
  switch (o->dtype) {
  case OPS_F32: return partial_sum_t<float>(o, part, parts, len, dw, acc);
  case OPS_BF16: return partial_sum_t<__nv_bfloat16>(o, part, parts, len, dw, acc);
  case OPS_F16: return partial_sum_t<__half>(o, part, parts, len, dw, acc);
  default: return opc_fail(o, "the CUDA backend has no %s ops", opc_dtype_name(o->dtype));
  }
}

/* ---- forward ---- */

#ifdef HAVE_CUBLASLT
/* The largest power of two up to 256 that divides every address and stride given. */
static unsigned align_of(uintptr_t m)
{
  unsigned a = 256;
  while (a > 1 && m % a) a >>= 1;
  return a;
}

static cublasLtMatrixLayout_t lt_layout(cudaDataType_t t, int rows, int cols, int ld, int count,
                                        long long stride)
{
  cublasLtMatrixLayout_t l = NULL;
  if (cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld) != CUBLAS_STATUS_SUCCESS) return NULL;
  if (cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof count) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                       sizeof stride) != CUBLAS_STATUS_SUCCESS) {
    cublasLtMatrixLayoutDestroy(l);
    return NULL;
  }
  return l;
}

/* Forward with the bias in cuBLASLt's epilogue. Returns 1 when cuBLASLt has no algorithm for
 * it (nothing was run: the caller takes the plain path), 0 done, -1 error. */
static int lt_forward(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                      const void *w, const void *b2, void *y)
{
  if (!u->lt_ok) return 1;
  void *lt = NULL, *lt_ws = NULL;
  size_t lt_ws_bytes = 0;
  if (opc_blaslt(o, &lt, &lt_ws, &lt_ws_bytes)) return -1;
  const upc_view_t v = view_of(c, n);
  const size_t e = o->elem;
  const int co2 = 2 * c->cout;
  unsigned al_a = align_of((uintptr_t)w | (co2 * e) | (4 * c->cout * e));
  unsigned al_b = align_of((uintptr_t)x | (v.ldx * e) | (size_t)(v.sx * e));
  unsigned al_c = align_of((uintptr_t)y | (row_off(c, 1) * e) | (v.ldy * e) | (size_t)(v.sy * e));
  unsigned al_bias = align_of((uintptr_t)b2);
  unsigned key = al_a | al_b << 9 | al_c << 18 | (al_bias >= 16) << 27;
  cudaDataType_t t = blas_type(o->dtype);
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasOperation_t opn = CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  int rc = -1;
  const float one = 1, zero = 0;
  if (cublasLtMatmulDescCreate(&desc, compute_type(o), CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opn, sizeof opn) ||
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn) ||
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ||
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b2, sizeof b2)) {
    rc = opc_fail(o, "cuBLASLt: setting up the transposed convolution's product failed");
    goto out;
  }
  la = lt_layout(t, co2, c->cin, 4 * c->cout, v.count, 0);
  lb = lt_layout(t, c->cin, v.ncol, v.ldx, v.count, v.sx);
  lc = lt_layout(t, co2, v.ncol, v.ldy, v.count, v.sy);
  if (!la || !lb || !lc) {
    rc = opc_fail(o, "cuBLASLt: describing the transposed convolution's matrices failed");
    goto out;
  }
  if (u->lt_ok < 0 || u->lt_key_n != n || u->lt_key_align != key) {
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    uint64_t wsb = lt_ws_bytes;
    uint32_t a32 = al_a, b32 = al_b, c32 = al_c;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &wsb, sizeof wsb) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &a32, sizeof a32) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &b32, sizeof b32) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &c32, sizeof c32) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &c32, sizeof c32)) {
      rc = opc_fail(o, "cuBLASLt: setting the search preferences failed");
      goto out;
    }
    u->lt_key_n = n;
    u->lt_key_align = key;
    u->lt_ok = al_bias >= 16 &&
               cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)lt, desc, la, lb, lc, lc, pref, 1,
                                              &res, &got) == CUBLAS_STATUS_SUCCESS &&
               got > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (u->lt_ok) u->lt_algo = res.algo;
  }
  if (!u->lt_ok) {
    rc = 1;
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    const char *wi = (const char *)w + (size_t)i * co2 * e;
    char *yi = (char *)y + row_off(c, i) * e;
    cublasStatus_t s = cublasLtMatmul((cublasLtHandle_t)lt, desc, &one, wi, la, x, lb, &zero, yi,
                                      lc, yi, lc, &u->lt_algo, lt_ws, lt_ws_bytes,
                                      opc_ctx(o)->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
      if (i == 0) { /* nothing ran: the plain path, and not this algorithm again */
        u->lt_ok = 0;
        rc = 1;
      } else {
        rc = opc_fail(o, "cuBLASLt transposed convolution failed (status %d)", (int)s);
      }
      goto out;
    }
  }
  rc = 0;
out:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return rc;
}
#endif

int opc_upc_fwd(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                const void *w, const void *b, void *y, void *ws)
{
  if (n == 0) return 0;
  const upc_view_t v = view_of(c, n);
  const size_t e = o->elem;
  if (!(w = weights_for_gemm(o, c, w, ws))) return -1;
#ifdef HAVE_CUBLASLT
  if (b) {
    if (bias2(o, b, ws, c->cout)) return -1;
    int r = lt_forward(o, c, u, n, x, w, ws, y);
    if (r <= 0) return r;
  }
#endif
  for (int i = 0; i < 2; i++)
    if (batched(o, CUBLAS_OP_N, CUBLAS_OP_N, 2 * c->cout, v.ncol, c->cin,
                (const char *)w + (size_t)i * 2 * c->cout * e, 4 * c->cout, 0, x, v.ldx, v.sx, 0,
                (char *)y + row_off(c, i) * e, blas_type(o->dtype), v.ldy, v.sy, v.count))
      return -1;
  return b ? opc_bias_add(o, y, (size_t)4 * n * c->h * c->w, c->cout, b) : 0;
}

/* ---- input gradient ---- */

int opc_upc_bwd_data(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *dy,
                     const void *w, void *dx, void *ws)
{
  if (n == 0) return 0;
  const upc_view_t v = view_of(c, n);
  const size_t e = o->elem;
  if (!(w = weights_for_gemm(o, c, w, ws))) return -1;
  for (int i = 0; i < 2; i++)
    if (batched(o, CUBLAS_OP_T, CUBLAS_OP_N, c->cin, v.ncol, 2 * c->cout,
                (const char *)w + (size_t)i * 2 * c->cout * e, 4 * c->cout, 0,
                (const char *)dy + row_off(c, i) * e, v.ldy, v.sy, i ? 1.f : 0.f, dx,
                blas_type(o->dtype), v.ldx, v.sx, v.count))
      return -1;
  return 0;
}

/* ---- weight gradient ---- */

/* dW (4cout x cin, ld 4cout) (+)= z (4cout x P, ld 4cout) x^T over every pixel at once: method
 * (b)'s GEMM, from the gathered dy; a dW off alignment through an aligned f32 buffer and the
 * partials' sum pass (one part). */
static int wgrad_gathered(const ops_t *o, const ops_conv_t *c, size_t P, const void *z,
                          const void *x, void *dw, int acc, void *ws)
{
  const size_t len = (size_t)4 * c->cout * c->cin;
  const int via_f32 = !aligned16(dw);
  float *out32 = (float *)((char *)ws + wgrad_out_off(o, c));
  cublasHandle_t h = NULL;
  if (opc_blas(o, (void **)&h)) return -1;
  if (P > 0x7fffffff)
    return opc_fail(o, "a transposed convolution over %zu pixels is too large", P);
  const float one = 1, beta = acc && !via_f32 ? 1.f : 0.f;
  cudaDataType_t t = blas_type(o->dtype);
  cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, 4 * c->cout, c->cin, (int)P, &one,
                                  z, t, 4 * c->cout, x, t, c->cin, &beta,
                                  via_f32 ? (void *)out32 : dw, via_f32 ? CUDA_R_32F : t,
                                  4 * c->cout, compute_type(o), CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS transposed convolution weight gradient failed (status %d)",
                    (int)s);
  return via_f32 ? partial_sum(o, out32, 1, len, dw, acc) : 0;
}

/* A weight gradient over no pixels: zero, or unchanged when accumulating. */
static int no_pixels(const ops_t *o, const ops_conv_t *c, void *dw, void *db, int acc)
{
  if (acc) return 0;
  cudaStream_t st = opc_ctx(o)->stream;
  OPC_CUDA(o, cudaMemsetAsync(dw, 0, (size_t)4 * c->cout * c->cin * o->elem, st));
  if (db) OPC_CUDA(o, cudaMemsetAsync(db, 0, c->cout * o->elem, st));
  return 0;
}

int opc_upc_bwd_filter(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                       const void *dy, void *dw, void *db, int acc, void *ws)
{
  const size_t e = o->elem, len = (size_t)4 * c->cout * c->cin;
  const size_t P = (size_t)n * c->h * c->w;
  if (n == 0) return no_pixels(o, c, dw, db, acc);
  void *scratch = (char *)ws + scratch_off(o, c);
  if (wgrad_partials(o, c, n)) {
    /* per pixel column: dWi partial = dy_i (2cout x n*h, ld 4 w cout) x (n*h x cin) */
    const int NH = n * c->h;
    for (int i = 0; i < 2; i++)
      if (batched(o, CUBLAS_OP_N, CUBLAS_OP_T, 2 * c->cout, c->cin, NH,
                  (const char *)dy + row_off(c, i) * e, 4 * c->w * c->cout, 2 * c->cout, x,
                  c->w * c->cin, c->cin, 0, (float *)scratch + (size_t)i * 2 * c->cout,
                  CUDA_R_32F, 4 * c->cout, (long long)len, c->w))
        return -1;
    if (partial_sum(o, (const float *)scratch, c->w, len, dw, acc)) return -1;
  } else {
    /* dy gathered into z (4cout x P), then dW = z x^T over every pixel at once */
    if (gather(o, c, n, dy, scratch) || wgrad_gathered(o, c, P, scratch, x, dw, acc, ws))
      return -1;
  }
  return db ? opc_channel_sum(o, dy, 4 * P, c->cout, db, acc) : 0;
}

/* ---- the backward from dy gathered (ops.h): the gather's result handed over ---- */

int opc_upc_bwd_filter_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                                const void *x, const void *z, void *dw, void *db, int acc,
                                void *ws)
{
  const size_t P = (size_t)n * c->h * c->w;
  if (n == 0) return no_pixels(o, c, dw, db, acc);
  if (wgrad_gathered(o, c, P, z, x, dw, acc, ws)) return -1;
  /* the 4P rows of cout in z are dy's rows in another order: the same per-channel sums */
  return db ? opc_channel_sum(o, z, 4 * P, c->cout, db, acc) : 0;
}

/* dx (cin x P, ld cin) = W^T z with K = 4 cout: W the column-major 4cout x cin matrix, z 4cout x
 * P; one GEMM writes dx once (the NHWC path's two GEMMs read and write it twice). */
int opc_upc_bwd_data_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                              const void *z, const void *w, void *dx, void *ws)
{
  if (n == 0) return 0;
  const size_t P = (size_t)n * c->h * c->w;
  if (P > 0x7fffffff)
    return opc_fail(o, "a transposed convolution over %zu pixels is too large", P);
  cublasHandle_t h = NULL;
  if (!(w = weights_for_gemm(o, c, w, ws)) || opc_blas(o, (void **)&h)) return -1;
  const float one = 1, zero = 0;
  cudaDataType_t t = blas_type(o->dtype);
  cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, c->cin, (int)P, 4 * c->cout, &one,
                                  w, t, 4 * c->cout, z, t, 4 * c->cout, &zero, dx, t, c->cin,
                                  compute_type(o), CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return opc_fail(o, "cuBLAS transposed convolution input gradient failed (status %d)",
                    (int)s);
  return 0;
}

#else /* no cuBLAS: cuDNN does the transposed convolutions */

int opc_upc_plan(const ops_t *o, const ops_conv_t *c, opc_upc_t **out, size_t *ws_bytes)
{
  *out = NULL;
  *ws_bytes = 0;
  return 0;
}
void opc_upc_free(opc_upc_t *u) {}
int opc_upc_bwd_data_enabled(const opc_upc_t *u) { return 0; }
int opc_upc_fwd(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                const void *w, const void *b, void *y, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_upc_bwd_data(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *dy,
                     const void *w, void *dx, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
unsigned opc_upc_route(const ops_t *o, const ops_conv_t *c, int n, const void *w, const void *dw)
{
  return 0;
}
int opc_upc_bwd_filter(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n, const void *x,
                       const void *dy, void *dw, void *db, int acc, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_upc_bwd_filter_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                                const void *x, const void *z, void *dw, void *db, int acc,
                                void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}
int opc_upc_bwd_data_gathered(const ops_t *o, const ops_conv_t *c, opc_upc_t *u, int n,
                              const void *z, const void *w, void *dx, void *ws)
{
  return opc_fail(o, "this build has no cuBLAS");
}

#endif
