/* conv_skinny_cuda.cu — 1x1 convolutions with few output channels (the U-Net's head: 64 -> 4
 * classes over every pixel) as own kernels. As GEMMs they have 4 rows, and cuBLAS ran the head
 * far below the copy rate (see bench/results/ops_cuda_1xh200.txt, fc54bc1): they are
 * memory-bound matrix-vector products, and these kernels read each input once.
 *
 *   forward      y[p][k] = b[k] + sum_c x[p][c] w[k][c]
 *   input grad   dx[p][c] = sum_k dy[p][k] w[k][c]
 *   weight grad  dw[k][c] (+)= sum_p dy[p][k] x[p][c], db[k] (+)= sum_p dy[p][k]:
 *                block b sums a fixed range of pixels and writes f32 partials to the
 *                workspace; a second kernel adds the blocks' partials, a warp per output in a
 *                fixed order. The split depends only on the pixel count and the GPU, so results
 *                repeat bit for bit.
 * A pixel's channels are spread over a group of lanes (16 bytes each at the full vector width),
 * so every warp access covers whole pixels, coalesced: one thread per pixel, reading or writing
 * its 128 bytes in eight strided pieces, left the head far below the copy ceiling (see
 * bench/results/roofline_1xh200.md). Weights [cout][cin] (ops.h) sit in shared memory as f32;
 * all sums are f32. A pixel's cout outputs (forward) or gradients (input gradient) move as one
 * access where cout fills the kernel's KC and the pointer is aligned (sk_pixel_vec), in the
 * weight gradient too, not as cout 2-byte accesses: those, in every lane of the pixel, kept the
 * L1/TEX pipe busy
 * (bench/results/ncu_small_kernels_1xh100.txt). */
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
 * hundreds of dependent iterations, latency-bound). */
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

/* Pixel groups: a pixel's cin channels are nc = cin / V chunks of V elements (16 bytes at the
 * full vector width), spread over L lanes of a warp (opc_pixel_lanes: the power of two >= nc,
 * at most 32; lane l owns chunks l, l + L, ...), so a warp reads or writes 32 / L whole pixels per access,
 * coalesced. CPL: the most chunks one lane owns (cin <= SK_MAX_CIN). Each thread keeps SK_UNROLL
 * pixels' loads in flight before their arithmetic. */
#define SK_UNROLL 4

/* The kernels' chunks per lane for vector width V: SK_MAX_CIN / V chunks over 32 lanes. */
template <int V> struct sk_cpl {
  enum { value = (SK_MAX_CIN / V + 31) / 32 };
};

/* Whether a pixel's cout values (of y or dy) move as one access of KC elements: cout == KC, the
 * access at most 16 bytes, the pointer aligned to it. Else one element at a time. */
template <typename T, int KC>
static int sk_pixel_vec(int cout, const void *p)
{
  const size_t bytes = (size_t)KC * sizeof(T);
  return cout == KC && bytes <= 16 && (uintptr_t)p % bytes == 0;
}

/* Pixel p's cout gradients (dy[p][k], zero past cout, all zero where !in) as f32: one access
 * where vin (sk_pixel_vec), else one element at a time. */
template <typename T, int KC>
static __device__ __forceinline__ void sk_pixel_grads(const T *dy, size_t p, bool in, int cout,
                                                      int vin, float (&d)[KC])
{
  if (in && vin) {
    const opc_pack<T, KC> g = opc_load<T, KC>(dy + p * KC);
#pragma unroll
    for (int k = 0; k < KC; k++) d[k] = opc_ld(g.v[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < KC; k++) d[k] = in && k < cout ? opc_ld(dy[p * cout + k]) : 0.f;
}

/* The prologue of ops.h conv1x1_*_bn: the input read through a BatchNorm apply + ReLU, per
 * channel t = fmaf(x - mean, gamma invstd, beta), zero unless t > 0, rounded to T: the values
 * affine_kernel (norm_cuda.cu) stores, so the products are the unfused path's bit for bit. The
 * per-channel terms as that kernel forms them, in shared memory. */
struct sk_bn {
  const double *saved; /* NULL: no prologue */
  const void *gamma, *beta;
};

template <typename T>
static __device__ __forceinline__ void sk_bn_load(const sk_bn &bn, int cin, float *pm, float *pa,
                                                  float *pb)
{
  for (int c = threadIdx.x; c < cin; c += blockDim.x) {
    pm[c] = (float)bn.saved[c];
    pa[c] = (float)((double)opc_ld(((const T *)bn.gamma)[c]) * bn.saved[cin + c]);
    pb[c] = opc_ld(((const T *)bn.beta)[c]);
  }
}

/* Chunk ch (V channels from ch * V) of a pixel, as loaded, through the prologue. */
template <typename T, int V>
static __device__ __forceinline__ void sk_bn_apply(opc_pack<T, V> &v, int ch, const float *pm,
                                                   const float *pa, const float *pb)
{
#pragma unroll
  for (int j = 0; j < V; j++) {
    const int c = ch * V + j;
    float t = fmaf(opc_ld(v.v[j]) - pm[c], pa[c], pb[c]);
    v.v[j] = opc_st<T>(!(t > 0.f) ? 0.f : t);
  }
}

/* ---- forward ---- */

/* Each lane sums its chunks' share of the cout outputs; the pixel's L lanes then add their
 * shares by a fixed butterfly (every lane ends with the sums) and lane k % L writes output k. */
template <typename T, int V, int KC, bool PRO>
__global__ void __launch_bounds__(SK_THREADS) sk_fwd(const T *x, const T *w, const T *b, T *y,
                                                     size_t P, int cin, int cout, int L,
                                                     int vout, sk_bn bn)
{
  enum { CPL = sk_cpl<V>::value };
  extern __shared__ float sw[]; /* [cout][cin] weights, cout biases, then (PRO) the prologue's
                                   3 x cin terms */
  float *pm = sw + cout * cin + cout, *pa = pm + cin, *pb = pa + cin;
  for (int i = threadIdx.x; i < cout * cin; i += blockDim.x) sw[i] = opc_ld(w[i]);
  for (int i = threadIdx.x; i < cout; i += blockDim.x) sw[cout * cin + i] = opc_ld(b[i]);
  if (PRO) sk_bn_load<T>(bn, cin, pm, pa, pb);
  __syncthreads();
  const int l = threadIdx.x & (L - 1), nc = cin / V;
  const size_t S = (size_t)gridDim.x * (blockDim.x / L);      /* pixel slots in the grid */
  const size_t wbase = ((size_t)blockIdx.x * blockDim.x + (threadIdx.x & ~31)) / L;
  const int wslot = (threadIdx.x & 31) / L;                    /* the thread's pixel in its warp */
  /* The loop condition depends on the warp's first pixel only: whole warps shuffle together. */
  for (size_t base = wbase; base < P; base += SK_UNROLL * S) {
    opc_pack<T, V> v[SK_UNROLL][CPL];
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
      size_t p = base + wslot + u * S;
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        int ch = l + i * L;
        if (p < P && ch < nc) v[u][i] = opc_load<T, V>(x + p * cin + (size_t)ch * V);
        else
#pragma unroll
          for (int j = 0; j < V; j++) v[u][i].v[j] = opc_st<T>(0.f);
      }
    }
    if (PRO) /* after every load is in flight; the padding stays zero */
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++)
#pragma unroll
        for (int i = 0; i < CPL; i++) {
          int ch = l + i * L;
          if (base + wslot + u * S < P && ch < nc) sk_bn_apply<T, V>(v[u][i], ch, pm, pa, pb);
        }
    float acc[SK_UNROLL][KC];
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
#pragma unroll
      for (int k = 0; k < KC; k++) acc[u][k] = 0.f;
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        int ch = l + i * L;
        if (ch < nc)
#pragma unroll
          for (int j = 0; j < V; j++) {
            float xv = opc_ld(v[u][i].v[j]);
#pragma unroll
            for (int k = 0; k < KC; k++)
              if (k < cout) acc[u][k] += xv * sw[k * cin + ch * V + j];
          }
      }
    }
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
      size_t p = base + wslot + u * S;
      /* every lane of the pixel ends with every sum (a butterfly) */
#pragma unroll
      for (int k = 0; k < KC; k++) {
        if (k >= cout) break;
        for (int off = L / 2; off > 0; off >>= 1)
          acc[u][k] += __shfl_xor_sync(0xffffffffu, acc[u][k], off);
      }
      if (p >= P) continue;
      if (vout) { /* the pixel's cout outputs in one store by its first lane */
        if (l == 0) {
          opc_pack<T, KC> o;
#pragma unroll
          for (int k = 0; k < KC; k++) o.v[k] = opc_st<T>(acc[u][k] + sw[cout * cin + k]);
          opc_store<T, KC>(y + p * KC, o);
        }
        continue;
      }
#pragma unroll
      for (int k = 0; k < KC; k++) {
        if (k >= cout) break;
        if ((k & (L - 1)) == l) y[p * cout + k] = opc_st<T>(acc[u][k] + sw[cout * cin + k]);
      }
    }
  }
}

template <typename T, bool PRO>
static int fwd_as(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                  const void *b, void *y, sk_bn bn)
{
  size_t smem = ((size_t)c->cout * c->cin + c->cout + (PRO ? 3 * (size_t)c->cin : 0)) *
                sizeof(float);
  cudaStream_t st = opc_ctx(o)->stream;
  const int V = 16 / sizeof(T);
  const int vec = opc_vec_width(sizeof(T), c->cin, x) == V;
  const int L = opc_pixel_lanes(c->cin / (vec ? V : 1));
  void (*k)(const T *, const T *, const T *, T *, size_t, int, int, int, int, sk_bn) =
      vec ? (c->cout <= 4 ? sk_fwd<T, V, 4, PRO> : sk_fwd<T, V, 8, PRO>)
          : (c->cout <= 4 ? sk_fwd<T, 1, 4, PRO> : sk_fwd<T, 1, 8, PRO>);
  const int vout = c->cout <= 4 ? sk_pixel_vec<T, 4>(c->cout, y) : sk_pixel_vec<T, 8>(c->cout, y);
  k<<<opc_blocks(o, P * L), SK_THREADS, smem, st>>>((const T *)x, (const T *)w, (const T *)b,
                                                    (T *)y, P, c->cin, c->cout, L, vout, bn);
  OPC_LAUNCHED(o, PRO ? "1x1 convolution on a BatchNorm's apply (few outputs)"
                      : "1x1 convolution (few outputs)");
  return 0;
}

template <typename T>
static int fwd_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                 const void *b, void *y, sk_bn bn)
{
  return bn.saved ? fwd_as<T, true>(o, c, P, x, w, b, y, bn)
                  : fwd_as<T, false>(o, c, P, x, w, b, y, bn);
}

/* ---- input gradient ---- */

/* Lane l writes its chunks of dx for the pixel: every lane of the pixel reads the pixel's cout
 * gradients (the same addresses: one access). */
template <typename T, int V, int KC>
__global__ void __launch_bounds__(SK_THREADS) sk_bwd_data(const T *dy, const T *w, T *dx,
                                                          size_t P, int cin, int cout, int L,
                                                          int vin)
{
  enum { CPL = sk_cpl<V>::value };
  extern __shared__ float sw[];
  for (int i = threadIdx.x; i < cout * cin; i += blockDim.x) sw[i] = opc_ld(w[i]);
  __syncthreads();
  const int l = threadIdx.x & (L - 1), nc = cin / V;
  const size_t S = (size_t)gridDim.x * (blockDim.x / L);
  const size_t first = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / L;
  for (size_t base = first; base < P; base += SK_UNROLL * S) {
    float d[SK_UNROLL][KC];
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
      size_t p = base + u * S;
      sk_pixel_grads<T, KC>(dy, p, p < P, cout, vin, d[u]);
    }
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
      size_t p = base + u * S;
      if (p >= P) break;
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        int ch = l + i * L;
        if (ch >= nc) break;
        opc_pack<T, V> v;
#pragma unroll
        for (int j = 0; j < V; j++) {
          float s = 0.f;
#pragma unroll
          for (int k = 0; k < KC; k++)
            if (k < cout) s += d[u][k] * sw[k * cin + ch * V + j];
          v.v[j] = opc_st<T>(s);
        }
        opc_store<T, V>(dx + p * cin + (size_t)ch * V, v);
      }
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
  const int vec = opc_vec_width(sizeof(T), c->cin, dx) == V;
  const int L = opc_pixel_lanes(c->cin / (vec ? V : 1));
  void (*k)(const T *, const T *, T *, size_t, int, int, int, int) =
      vec ? (c->cout <= 4 ? sk_bwd_data<T, V, 4> : sk_bwd_data<T, V, 8>)
          : (c->cout <= 4 ? sk_bwd_data<T, 1, 4> : sk_bwd_data<T, 1, 8>);
  const int vin = c->cout <= 4 ? sk_pixel_vec<T, 4>(c->cout, dy) : sk_pixel_vec<T, 8>(c->cout, dy);
  k<<<opc_blocks(o, P * L), SK_THREADS, smem, st>>>((const T *)dy, (const T *)w, (T *)dx, P,
                                                    c->cin, c->cout, L, vin);
  OPC_LAUNCHED(o, "1x1 convolution input gradient (few outputs)");
  return 0;
}

/* ---- weight gradient ---- */

/* part[block][k][c] for c < cin: sum of dy[p][k] x[p][c] over the block's pixels; c == cin:
 * sum of dy[p][k]. The block's blockDim / L pixel slots walk its pixel range; each lane sums its
 * chunks' channels. Then, in a fixed order: the slots of a warp by a butterfly over the lanes
 * L apart, the warps through shared memory (one output row k at a time). */
template <typename T, int V, int KC, bool PRO>
__global__ void __launch_bounds__(SK_THREADS) sk_wgrad_part(const T *x, const T *dy, float *part,
                                                            size_t P, size_t per, int cin,
                                                            int cout, int L, int vin, sk_bn bn)
{
  enum { CPL = sk_cpl<V>::value };
  __shared__ float red[SK_THREADS / 32][SK_MAX_CIN + 1];
  __shared__ float pro[PRO ? 3 : 1][PRO ? SK_MAX_CIN : 1]; /* the prologue's terms (PRO) */
  if (PRO) {
    sk_bn_load<T>(bn, cin, pro[0], pro[PRO ? 1 : 0], pro[PRO ? 2 : 0]);
    __syncthreads();
  }
  const int l = threadIdx.x & (L - 1), nc = cin / V, warp = threadIdx.x >> 5;
  const int slots = blockDim.x / L, slot = threadIdx.x / L, row = cin + 1;
  const size_t p0 = (size_t)blockIdx.x * per, p1 = p0 + per < P ? p0 + per : P;
  float acc[KC][CPL * V], accb[KC];
#pragma unroll
  for (int k = 0; k < KC; k++) {
    accb[k] = 0.f;
#pragma unroll
    for (int e = 0; e < CPL * V; e++) acc[k][e] = 0.f;
  }
  for (size_t base = p0 + slot; base < p1; base += (size_t)SK_UNROLL * slots) {
    opc_pack<T, V> v[SK_UNROLL][CPL];
    float d[SK_UNROLL][KC];
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++) {
      size_t p = base + (size_t)u * slots;
      bool in = p < p1;
      sk_pixel_grads<T, KC>(dy, p, in, cout, vin, d[u]);
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        int ch = l + i * L;
        if (in && ch < nc) v[u][i] = opc_load<T, V>(x + p * cin + (size_t)ch * V);
        else
#pragma unroll
          for (int j = 0; j < V; j++) v[u][i].v[j] = opc_st<T>(0.f);
      }
    }
    if (PRO) /* after every load is in flight; pixels past the range stay zero */
#pragma unroll
      for (int u = 0; u < SK_UNROLL; u++)
#pragma unroll
        for (int i = 0; i < CPL; i++) {
          int ch = l + i * L;
          if (base + (size_t)u * slots < p1 && ch < nc)
            sk_bn_apply<T, V>(v[u][i], ch, pro[0], pro[PRO ? 1 : 0], pro[PRO ? 2 : 0]);
        }
#pragma unroll
    for (int u = 0; u < SK_UNROLL; u++)
#pragma unroll
      for (int k = 0; k < KC; k++) {
        if (k >= cout) break;
        accb[k] += d[u][k];
#pragma unroll
        for (int i = 0; i < CPL; i++)
#pragma unroll
          for (int j = 0; j < V; j++) acc[k][i * V + j] += d[u][k] * opc_ld(v[u][i].v[j]);
      }
  }
  /* The warp's slots: lanes L, 2L, ... apart hold the same channels. */
#pragma unroll
  for (int k = 0; k < KC; k++) {
    if (k >= cout) break;
    for (int off = L; off < 32; off <<= 1) {
      accb[k] += __shfl_xor_sync(0xffffffffu, accb[k], off);
#pragma unroll
      for (int e = 0; e < CPL * V; e++) acc[k][e] += __shfl_xor_sync(0xffffffffu, acc[k][e], off);
    }
  }
  /* The warps, one output row at a time: the first slot of each warp stores its sums. */
  const int nw = blockDim.x >> 5;
#pragma unroll
  for (int k = 0; k < KC; k++) {
    if (k >= cout) break;
    if ((threadIdx.x & 31) < L) {
#pragma unroll
      for (int i = 0; i < CPL; i++) {
        int ch = l + i * L;
        if (ch < nc)
#pragma unroll
          for (int j = 0; j < V; j++) red[warp][ch * V + j] = acc[k][i * V + j];
      }
      if (l == 0) red[warp][cin] = accb[k];
    }
    __syncthreads();
    for (int t = threadIdx.x; t < row; t += blockDim.x) {
      float s = 0.f;
      for (int q = 0; q < nw; q++) s += red[q][t];
      part[((size_t)blockIdx.x * cout + k) * row + t] = s;
    }
    __syncthreads();
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

template <typename T, int V, int KC, bool PRO>
static int wgrad_launch(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                        const void *dy, void *ws, int *nb_out, sk_bn bn)
{
  /* One wave of the blocks that fit, at least 256 pixels per block, at most the planned
   * SK_WGRAD_BLOCKS_PER_SM per multiprocessor (the workspace). The prologue's variant takes the
   * plain one's split, so both sum the same pixels in the same order. */
  size_t most = (size_t)opc_fit_blocks((const void *)sk_wgrad_part<T, V, KC, false>) *
                opc_ctx(o)->sm_count;
  size_t cap = wgrad_blocks(o, P), b = (P + 255) / 256;
  if (most > cap) most = cap;
  int nb = (int)(b < 1 ? 1 : b > most ? most : b);
  size_t per = (P + nb - 1) / nb;
  int L = opc_pixel_lanes(c->cin / V);
  sk_wgrad_part<T, V, KC, PRO><<<nb, SK_THREADS, 0, opc_ctx(o)->stream>>>(
      (const T *)x, (const T *)dy, (float *)ws, P, per, c->cin, c->cout, L,
      sk_pixel_vec<T, KC>(c->cout, dy), bn);
  *nb_out = nb;
  return 0;
}

template <typename T, bool PRO>
static void wgrad_as(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *dy,
                     void *ws, int *nb, sk_bn bn)
{
  const int V = 16 / sizeof(T);
  const int vec = opc_vec_width(sizeof(T), c->cin, x) == V;
  if (vec && c->cout <= 4) wgrad_launch<T, V, 4, PRO>(o, c, P, x, dy, ws, nb, bn);
  else if (vec) wgrad_launch<T, V, 8, PRO>(o, c, P, x, dy, ws, nb, bn);
  else if (c->cout <= 4) wgrad_launch<T, 1, 4, PRO>(o, c, P, x, dy, ws, nb, bn);
  else wgrad_launch<T, 1, 8, PRO>(o, c, P, x, dy, ws, nb, bn);
}

template <typename T>
static int wgrad_final_t(const ops_t *o, const ops_conv_t *c, int nb, const void *ws, void *dw,
                         void *db, int acc)
{
  int n = c->cout * (c->cin + 1); /* outputs, one warp each */
  sk_wgrad_final<T><<<(n + 7) / 8, 256, 0, opc_ctx(o)->stream>>>((const float *)ws, nb, (T *)dw,
                                                                 (T *)db, c->cin, c->cout, acc);
  OPC_LAUNCHED(o, "1x1 convolution weight gradient (final sums)");
  return 0;
}

template <typename T>
static int wgrad_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *dy,
                   void *dw, void *db, int acc, void *ws, sk_bn bn)
{
  int nb = 1;
  if (bn.saved) wgrad_as<T, true>(o, c, P, x, dy, ws, &nb, bn);
  else wgrad_as<T, false>(o, c, P, x, dy, ws, &nb, bn);
  OPC_LAUNCHED(o, "1x1 convolution weight gradient (partial sums)");
  return wgrad_final_t<T>(o, c, nb, ws, dw, db, acc);
}

int opc_skinny_wgrad_final(const ops_t *o, const ops_conv_t *c, int nblocks, const void *ws,
                           void *dw, void *db, int acc)
{
  if (nblocks < 1 ||
      (size_t)nblocks * c->cout * (c->cin + 1) * sizeof(float) > opc_skinny_ws(o, c))
    return opc_fail(o, "%d weight-gradient partials exceed the head's workspace", nblocks);
  OPC_DISPATCH(o, wgrad_final_t, o, c, nblocks, ws, dw, db, acc);
}

/* ---- entry points (conv_cuda.cu routes a planned skinny 1x1 here) ---- */

int opc_skinny_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                   const void *b, void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  OPC_DISPATCH(o, fwd_t, o, c, P, x, w, b, y, sk_bn{NULL, NULL, NULL});
}

int opc_skinny_fwd_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                      const double *saved, const void *gamma, const void *beta, const void *w,
                      const void *b, void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  OPC_DISPATCH(o, fwd_t, o, c, P, x, w, b, y, sk_bn{saved, gamma, beta});
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
  OPC_DISPATCH(o, wgrad_t, o, c, P, x, dy, dw, db, acc, ws, sk_bn{NULL, NULL, NULL});
}

int opc_skinny_bwd_filter_bn(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                             const double *saved, const void *gamma, const void *beta,
                             const void *dy, void *dw, void *db, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  OPC_DISPATCH(o, wgrad_t, o, c, P, x, dy, dw, db, acc, ws, sk_bn{saved, gamma, beta});
}
