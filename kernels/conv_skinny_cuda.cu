/* conv_skinny_cuda.cu — 1x1 convolutions with few output channels (the U-Net's head: 64 -> 4
 * classes over every pixel) as own kernels. As GEMMs they have 4 rows: cuBLAS ran the head's
 * forward at 1.3 TFLOP/s and its weight gradient at 1.1 (0.15 and 0.18 ms for 50 MB of input,
 * bench/results/ops_cuda_1xh200.txt, run 3): they are memory-bound matrix-vector products, and
 * these kernels read each input once.
 *
 *   forward      y[p][k] = b[k] + sum_c x[p][c] w[k][c]          one thread per pixel
 *   input grad   dx[p][c] = sum_k dy[p][k] w[k][c]               one thread per pixel
 *   weight grad  dw[k][c] (+)= sum_p dy[p][k] x[p][c], db[k] (+)= sum_p dy[p][k]:
 *                block b sums a fixed range of pixels (thread = channel c and pixel lane),
 *                reduces its lanes in order and writes f32 partials to the workspace; a second
 *                kernel adds the blocks' partials, a warp per output in a fixed order. The split
 *                depends only on the pixel count and the GPU, so results repeat bit for bit.
 * Weights [cout][cin] (ops.h) sit in shared memory as f32; all sums are f32. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"
#include "shm/env.h"

#define SK_MAX_COUT 8
#define SK_MAX_CIN 256
#define SK_THREADS OPC_THREADS /* opc_blocks sizes the per-pixel grids for it */

int opc_skinny_enabled(const ops_t *o, const ops_conv_t *c)
{
  /* "cudnn", "gemm": the other paths, for tests */
  if (shm_env_is("SHMDDP_CONV1X1", "cudnn") || shm_env_is("SHMDDP_CONV1X1", "gemm")) return 0;
  return c->kind == OPS_CONV1X1 && c->cout <= SK_MAX_COUT && c->cin <= SK_MAX_CIN;
}

/* Blocks of the weight-gradient reduction for P pixels: at least 64 pixels per block, at most
 * eight blocks per multiprocessor (enough loads in flight: one per SM left each thread
 * hundreds of dependent iterations, latency-bound at 0.18 ms for the head). */
#define SK_WGRAD_BLOCKS_PER_SM 8
static int wgrad_blocks(const ops_t *o, size_t P)
{
  size_t most = SK_WGRAD_BLOCKS_PER_SM * (size_t)opc_ctx(o)->sm_count, b = (P + 63) / 64;
  return (int)(b < 1 ? 1 : b > most ? most : b);
}

size_t opc_skinny_ws(const ops_t *o, const ops_conv_t *c)
{
  return SK_WGRAD_BLOCKS_PER_SM * (size_t)opc_ctx(o)->sm_count * c->cout * (c->cin + 1) *
         sizeof(float);
}

/* ---- forward ---- */

template <typename T, int N>
__global__ void __launch_bounds__(SK_THREADS) sk_fwd(const T *x, const T *w, const T *b, T *y,
                                                     size_t P, int cin, int cout)
{
  extern __shared__ float sw[]; /* [cout][cin] weights, then cout biases */
  for (int i = threadIdx.x; i < cout * cin; i += blockDim.x) sw[i] = opc_ld(w[i]);
  for (int i = threadIdx.x; i < cout; i += blockDim.x) sw[cout * cin + i] = opc_ld(b[i]);
  __syncthreads();
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
       p += (size_t)gridDim.x * blockDim.x) {
    float acc[SK_MAX_COUT];
#pragma unroll
    for (int k = 0; k < SK_MAX_COUT; k++) acc[k] = k < cout ? sw[cout * cin + k] : 0.f;
    const T *xp = x + p * cin;
    for (int c = 0; c < cin; c += N) {
      opc_pack<T, N> v = opc_load<T, N>(xp + c);
#pragma unroll
      for (int j = 0; j < N; j++) {
        float xv = opc_ld(v.v[j]);
#pragma unroll
        for (int k = 0; k < SK_MAX_COUT; k++)
          if (k < cout) acc[k] += xv * sw[k * cin + c + j];
      }
    }
    T *yp = y + p * cout;
#pragma unroll
    for (int k = 0; k < SK_MAX_COUT; k++)
      if (k < cout) yp[k] = opc_st<T>(acc[k]);
  }
}

template <typename T>
static int fwd_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                 const void *b, void *y)
{
  size_t smem = ((size_t)c->cout * c->cin + c->cout) * sizeof(float);
  cudaStream_t st = opc_ctx(o)->stream;
  const int V = 16 / sizeof(T);
  if (opc_vec_width(sizeof(T), c->cin, x) == V)
    sk_fwd<T, V><<<opc_blocks(o, P), SK_THREADS, smem, st>>>(
        (const T *)x, (const T *)w, (const T *)b, (T *)y, P, c->cin, c->cout);
  else
    sk_fwd<T, 1><<<opc_blocks(o, P), SK_THREADS, smem, st>>>(
        (const T *)x, (const T *)w, (const T *)b, (T *)y, P, c->cin, c->cout);
  OPC_LAUNCHED(o, "1x1 convolution (few outputs)");
  return 0;
}

/* ---- input gradient ---- */

template <typename T, int N>
__global__ void __launch_bounds__(SK_THREADS) sk_bwd_data(const T *dy, const T *w, T *dx,
                                                          size_t P, int cin, int cout)
{
  extern __shared__ float sw[];
  for (int i = threadIdx.x; i < cout * cin; i += blockDim.x) sw[i] = opc_ld(w[i]);
  __syncthreads();
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
       p += (size_t)gridDim.x * blockDim.x) {
    float d[SK_MAX_COUT];
#pragma unroll
    for (int k = 0; k < SK_MAX_COUT; k++) d[k] = k < cout ? opc_ld(dy[p * cout + k]) : 0.f;
    T *dxp = dx + p * cin;
    for (int c = 0; c < cin; c += N) {
      opc_pack<T, N> v;
#pragma unroll
      for (int j = 0; j < N; j++) {
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < SK_MAX_COUT; k++)
          if (k < cout) s += d[k] * sw[k * cin + c + j];
        v.v[j] = opc_st<T>(s);
      }
      opc_store<T, N>(dxp + c, v);
    }
  }
}

template <typename T>
static int bwd_data_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *dy,
                      const void *w, void *dx)
{
  size_t smem = (size_t)c->cout * c->cin * sizeof(float);
  cudaStream_t st = opc_ctx(o)->stream;
  const int V = 16 / sizeof(T);
  if (opc_vec_width(sizeof(T), c->cin, dx) == V)
    sk_bwd_data<T, V><<<opc_blocks(o, P), SK_THREADS, smem, st>>>(
        (const T *)dy, (const T *)w, (T *)dx, P, c->cin, c->cout);
  else
    sk_bwd_data<T, 1><<<opc_blocks(o, P), SK_THREADS, smem, st>>>(
        (const T *)dy, (const T *)w, (T *)dx, P, c->cin, c->cout);
  OPC_LAUNCHED(o, "1x1 convolution input gradient (few outputs)");
  return 0;
}

/* ---- weight gradient ---- */

/* part[block][k][c] for c < cin: sum of dy[p][k] x[p][c] over the block's pixels; c == cin:
 * sum of dy[p][k]. Thread t: channel t % cin, lane t / cin (lanes = blockDim / cin). */
template <typename T>
__global__ void __launch_bounds__(SK_THREADS) sk_wgrad_part(const T *x, const T *dy, float *part,
                                                            size_t P, size_t per, int cin,
                                                            int cout)
{
  extern __shared__ float red[]; /* [lane][cout][cin + 1] */
  const int lanes = blockDim.x / cin, c = threadIdx.x % cin, lane = threadIdx.x / cin;
  const int row = cin + 1, stride = cout * row;
  const size_t p0 = (size_t)blockIdx.x * per, p1 = p0 + per < P ? p0 + per : P;
  float acc[SK_MAX_COUT], accb[SK_MAX_COUT];
#pragma unroll
  for (int k = 0; k < SK_MAX_COUT; k++) acc[k] = accb[k] = 0.f;
  if (lane < lanes) {
    /* Four pixels per iteration, their loads issued before their arithmetic. */
    size_t p = p0 + lane;
    for (; p + 3 * (size_t)lanes < p1; p += 4 * (size_t)lanes) {
      float xv[4], d[4][SK_MAX_COUT];
#pragma unroll
      for (int u = 0; u < 4; u++) {
        size_t q = p + (size_t)u * lanes;
        xv[u] = opc_ld(x[q * cin + c]);
#pragma unroll
        for (int k = 0; k < SK_MAX_COUT; k++) d[u][k] = k < cout ? opc_ld(dy[q * cout + k]) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < 4; u++)
#pragma unroll
        for (int k = 0; k < SK_MAX_COUT; k++) {
          acc[k] += d[u][k] * xv[u];
          accb[k] += d[u][k];
        }
    }
    for (; p < p1; p += lanes) {
      float xv = opc_ld(x[p * cin + c]);
#pragma unroll
      for (int k = 0; k < SK_MAX_COUT; k++)
        if (k < cout) {
          float d = opc_ld(dy[p * cout + k]);
          acc[k] += d * xv;
          accb[k] += d;
        }
    }
  }
  if (lane < lanes) {
#pragma unroll
    for (int k = 0; k < SK_MAX_COUT; k++)
      if (k < cout) {
        red[lane * stride + k * row + c] = acc[k];
        if (c == 0) red[lane * stride + k * row + cin] = accb[k];
      }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < stride; t += blockDim.x) {
    float s = 0.f;
    for (int l = 0; l < lanes; l++) s += red[l * stride + t];
    part[(size_t)blockIdx.x * stride + t] = s;
  }
}

/* One warp per output: lane l adds blocks l, l + 32, ... in order, then a fixed shuffle tree. */
template <typename T>
__global__ void sk_wgrad_final(const float *part, int nblocks, T *dw, T *db, int cin, int cout,
                               int accumulate)
{
  const int row = cin + 1, stride = cout * row, lane = threadIdx.x & 31;
  const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
  if (t >= stride) return; /* whole warps leave together: stride is per warp */
  float s = 0.f;
  for (int b = lane; b < nblocks; b += 32) s += part[(size_t)b * stride + t];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) {
    int k = t / row, c = t % row;
    T *dst = c < cin ? dw + (size_t)k * cin + c : db + k;
    *dst = opc_st<T>(accumulate ? opc_ld(*dst) + s : s);
  }
}

template <typename T>
static int wgrad_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *dy,
                   void *dw, void *db, int acc, void *ws)
{
  int nb = wgrad_blocks(o, P);
  size_t per = (P + nb - 1) / nb;
  int lanes = SK_THREADS / c->cin;
  size_t smem = (size_t)lanes * c->cout * (c->cin + 1) * sizeof(float);
  cudaStream_t st = opc_ctx(o)->stream;
  sk_wgrad_part<T><<<nb, lanes * c->cin, smem, st>>>((const T *)x, (const T *)dy, (float *)ws, P,
                                                     per, c->cin, c->cout);
  OPC_LAUNCHED(o, "1x1 convolution weight gradient (partial sums)");
  int n = c->cout * (c->cin + 1); /* outputs, one warp each */
  sk_wgrad_final<T><<<(n + 7) / 8, 256, 0, st>>>((const float *)ws, nb, (T *)dw, (T *)db, c->cin,
                                                 c->cout, acc);
  OPC_LAUNCHED(o, "1x1 convolution weight gradient (final sums)");
  return 0;
}

/* ---- entry points (conv_cuda.cu routes a planned skinny 1x1 here) ---- */

int opc_skinny_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                   const void *b, void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  OPC_DISPATCH(o, fwd_t, o, c, P, x, w, b, y);
}

int opc_skinny_bwd_data(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                        const void *w, void *dx)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  OPC_DISPATCH(o, bwd_data_t, o, c, P, dy, w, dx);
}

int opc_skinny_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                          const void *dy, void *dw, void *db, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  /* P == 0 still writes the sums (zero) or leaves them (accumulate), like the other paths. */
  OPC_DISPATCH(o, wgrad_t, o, c, P, x, dy, dw, db, acc, ws);
}
