/* conv_rgb_cuda.cu — the 3x3 convolution of the few-channel input (the U-Net's RGB layer: 3 -> 64
 * channels) as own tensor-core kernels, 16-bit types only. Its 27 taps are one K = 32 step of
 * the tensor cores, so the layer is bound by the 50 MB it writes (forward) or reads (weight
 * gradient); cuDNN on channels zero-padded to 8 ran it far below the copy ceiling (see
 * bench/results/roofline_1xh200.md). Direct kernels on the CUDA cores lost to it (see
 * bench/results/ops_cuda_1xh200.txt, 81124df): here the arithmetic is the tensor cores' (WMMA,
 * f32 accumulation).
 *
 * Pixels go in tiles of 128 (flat over n, h, w: a tile may span rows and images). A tile's
 * im2col matrix A[pixel][tap] (tap = (ky * 3 + kx) * cin + ci, zero past 9 cin and outside the
 * image) is built in shared memory by two threads per pixel, from 16-byte stores into rows
 * padded to 40 elements (no bank conflicts).
 *   forward      Y[pixel][k] = A W^T, W[k][tap] the weights ([cout][3][3][cin], ops.h): a warp
 *                per 16 pixels, the tile's f32 result through shared memory, written as 16-byte
 *                stores.
 *   weight grad  dW[k][tap] = dY^T A over the block's fixed range of tiles (a warp per 16 x 16
 *                tile of dW, accumulated in registers across the tiles); f32 partials per block
 *                in the workspace, then a warp per output adds them in block order. The split
 *                depends on the pixel count and the GPU only: results repeat bit for bit.
 *   forward with statistics (the fused engine's first block, ops.h conv_fwd_fused): the
 *                forward, and per output channel Σ y and Σ y² of the rounded values it writes,
 *                BatchNorm's statistics, so no pass reads y again for them. A thread writes the
 *                same 8 channels of every tile (cout / 8 divides the block's threads: cout 16,
 *                32 or 64), at most 4 pixels a tile, and a block takes at most 8 tiles (more
 *                blocks than one wave where the image needs them), so its f32 sums run over
 *                at most 32 values and hold no f64 registers through the tiles (16 of them
 *                would cost a block a multiprocessor); the block adds its threads' sums in f64
 *                in thread order into its partial, and a warp per value adds the partials in a
 *                fixed order. The split depends on the pixel count and the GPU: bit for bit.
 * The input gradient of this layer stays on cuDNN (the trainer never asks for it). */
#include "config.h"

#include <mma.h>

#include "kernels/ops_cuda.cuh"
#include "shm/env.h"

#define RGB_TILE 128   /* pixels per tile */
#define RGB_K 32       /* taps, padded */
#define RGB_LDA 40     /* im2col row pitch (elements) */
#define RGB_MAX_COUT 64
#define RGB_THREADS 256 /* 8 warps */
#define RGB_BLOCKS_PER_SM 4 /* weight gradient: partials in the workspace for this many */
#define RGB_STATS_TILES 8   /* forward statistics: tiles a block at most (f32 sums of 32 values) */
/* The forward's f32 result tile [pixel][k] in shared memory, rows padded from 64 to 68 floats:
 * at 64 every row starts on bank 0, so the fragments' stores (8 rows a warp) and the reads of a
 * pixel's 8 channels (4 pixels a warp) each queue up to 8 ways on the same banks; at 68 a row
 * starts 4 banks further on and a warp's accesses spread over all 32. */
#define RGB_LDC (RGB_MAX_COUT + 4)
/* The statistics' f64 sums a thread (16) in the same memory, rows padded to 17 doubles for the
 * same reason (a warp writing value j of 32 rows 128 bytes apart hit 2 banks 32 ways). */
#define RGB_LDR 17

int opc_rgb_enabled(const ops_t *o, const ops_conv_t *c)
{
  if (shm_env_is("SHMDDP_CONV_PAD", "0")) return 0; /* the layer on cuDNN at its own width */
  return c->kind == OPS_CONV3X3 && (o->dtype == OPS_BF16 || o->dtype == OPS_F16) &&
         c->cin <= 3 && c->cout % 16 == 0 && c->cout <= RGB_MAX_COUT;
}

size_t opc_rgb_ws(const ops_t *o, const ops_conv_t *c)
{
  return (size_t)RGB_BLOCKS_PER_SM * opc_ctx(o)->sm_count * c->cout * 9 * c->cin * sizeof(float);
}

/* Row px of the tile's im2col matrix, taps [16 h, 16 h + 16): pixel p (p >= P: zeros). */
template <typename T, int CIN, int H>
static __device__ void rgb_im2col_half(const T *x, size_t p, size_t P, int Hh, int Ww, T *row)
{
  opc_pack<T, 8> v[2];
  int img = 0, yy = 0, xx = 0;
  if (p < P) {
    size_t hw = (size_t)Hh * Ww;
    img = (int)(p / hw);
    int rem = (int)(p - (size_t)img * hw);
    yy = rem / Ww;
    xx = rem - yy * Ww;
  }
#pragma unroll
  for (int j = 0; j < 16; j++) {
    const int tap = 16 * H + j, r = tap / CIN, ci = tap % CIN, ky = r / 3, kx = r % 3;
    float val = 0.f;
    if (tap < 9 * CIN && p < P) {
      int sy = yy + ky - 1, sx = xx + kx - 1;
      if (sy >= 0 && sy < Hh && sx >= 0 && sx < Ww)
        val = opc_ld(x[(((size_t)img * Hh + sy) * Ww + sx) * CIN + ci]);
    }
    v[j / 8].v[j % 8] = opc_st<T>(val);
  }
  opc_store<T, 8>(row + 16 * H, v[0]);
  opc_store<T, 8>(row + 16 * H + 8, v[1]);
}

template <typename T, int CIN>
static __device__ void rgb_im2col(const T *x, size_t p0, size_t P, int Hh, int Ww,
                                  T (*sa)[RGB_LDA])
{
  const int px = threadIdx.x % RGB_TILE, half = threadIdx.x / RGB_TILE; /* warp-uniform */
  if (half == 0) rgb_im2col_half<T, CIN, 0>(x, p0 + px, P, Hh, Ww, sa[px]);
  else rgb_im2col_half<T, CIN, 1>(x, p0 + px, P, Hh, Ww, sa[px]);
}

/* ---- forward ---- */

/* With STATS, part[blockIdx.x][0 .. 2 cout): the block's Σ y and Σ y² per channel (f64). */
template <typename T, int CIN, bool STATS>
__global__ void __launch_bounds__(RGB_THREADS) rgb_fwd(const T *x, const T *w, T *y, size_t P,
                                                       int Hh, int Ww, int cout, double *part)
{
  using namespace nvcuda;
  __shared__ __align__(32) T sa[RGB_TILE][RGB_LDA];
  __shared__ __align__(32) T sb[RGB_K][RGB_MAX_COUT]; /* W^T: [tap][k] */
  __shared__ __align__(32) float sc[RGB_TILE][RGB_LDC];
  for (int i = threadIdx.x; i < RGB_K * RGB_MAX_COUT; i += blockDim.x) {
    int tap = i / RGB_MAX_COUT, k = i % RGB_MAX_COUT;
    sb[tap][k] = tap < 9 * CIN && k < cout ? w[(size_t)k * 9 * CIN + tap] : opc_st<T>(0.f);
  }
  const int warp = threadIdx.x >> 5, nt = cout / 16, c8 = cout / 8;
  const size_t tiles = (P + RGB_TILE - 1) / RGB_TILE;
  float s1[8], s2[8]; /* STATS: this thread's channels 8 (threadIdx.x % c8) + j */
#pragma unroll
  for (int j = 0; j < 8; j++) s1[j] = s2[j] = 0.f;
  for (size_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const size_t p0 = tile * RGB_TILE;
    rgb_im2col<T, CIN>(x, p0, P, Hh, Ww, sa);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
    wmma::load_matrix_sync(fa[0], &sa[16 * warp][0], RGB_LDA);
    wmma::load_matrix_sync(fa[1], &sa[16 * warp][16], RGB_LDA);
    for (int n = 0; n < nt; n++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
      wmma::fill_fragment(fc, 0.f);
      wmma::load_matrix_sync(fb, &sb[0][16 * n], RGB_MAX_COUT);
      wmma::mma_sync(fc, fa[0], fb, fc);
      wmma::load_matrix_sync(fb, &sb[16][16 * n], RGB_MAX_COUT);
      wmma::mma_sync(fc, fa[1], fb, fc);
      wmma::store_matrix_sync(&sc[16 * warp][16 * n], fc, RGB_LDC, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < RGB_TILE * c8; i += blockDim.x) {
      int px = i / c8, q = i % c8;
      if (p0 + px >= P) break; /* i grows with px */
      /* two 16-byte reads: the row pitch (272 bytes) and 8 q keep them aligned */
      const float4 *r4 = reinterpret_cast<const float4 *>(&sc[px][8 * q]);
      const float4 lo = r4[0], hi = r4[1];
      const float f8[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      opc_pack<T, 8> v;
#pragma unroll
      for (int j = 0; j < 8; j++) v.v[j] = opc_st<T>(f8[j]);
      opc_store<T, 8>(y + (p0 + px) * cout + 8 * q, v);
      if (STATS) { /* q is threadIdx.x % c8 in every iteration: c8 divides blockDim.x */
#pragma unroll
        for (int j = 0; j < 8; j++) {
          const float f = opc_ld(v.v[j]);
          s1[j] += f;
          s2[j] = fmaf(f, f, s2[j]);
        }
      }
    }
    __syncthreads(); /* sa and sc are rewritten by the next tile */
  }
  if (STATS) {
    /* the threads' f64 sums in sc's 32 KB (free after the last tile's barrier), then each value
     * added over the threads of its channels in thread order */
    static_assert(sizeof sc >= RGB_THREADS * RGB_LDR * sizeof(double), "a row of 17 a thread");
    double(*red)[RGB_LDR] = reinterpret_cast<double(*)[RGB_LDR]>(&sc[0][0]);
#pragma unroll
    for (int j = 0; j < 8; j++) red[threadIdx.x][j] = s1[j], red[threadIdx.x][8 + j] = s2[j];
    __syncthreads();
    const int rows = RGB_THREADS / c8; /* threads r c8 + q hold channels 8 q .. 8 q + 7 */
    for (int v = threadIdx.x; v < 2 * cout; v += blockDim.x) {
      const int ch = v % cout, col = (v / cout) * 8 + ch % 8, q = ch / 8;
      double s = 0.0;
      for (int r = 0; r < rows; r++) s += red[r * c8 + q][col];
      part[(size_t)blockIdx.x * 2 * cout + v] = s;
    }
  }
}

/* stats[t] for t < n (2 cout: the Σ y, then the Σ y²) = the blocks' partials of value t added
 * by a warp: lane l adds partials l, l + 32, ... in order, then a fixed tree (shfl_down) adds
 * the 32 lane sums; stats[n] = count. */
__global__ void rgb_stats_final(const double *part, int nblocks, int n, double count,
                                double *stats)
{
  const int lane = threadIdx.x & 31;
  const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
  if (blockIdx.x == 0 && threadIdx.x == 0) stats[n] = count;
  if (t >= n) return; /* whole warps leave together */
  double s = 0.0;
#pragma unroll 4
  for (int b = lane; b < nblocks; b += 32) s += part[(size_t)b * n + t];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) stats[t] = s;
}

/* ---- weight gradient ---- */

template <typename T, int CIN>
__global__ void __launch_bounds__(RGB_THREADS) rgb_wgrad_part(const T *x, const T *dy,
                                                              float *part, size_t P, int Hh,
                                                              int Ww, int cout, size_t per)
{
  using namespace nvcuda;
  __shared__ __align__(32) T sa[RGB_TILE][RGB_LDA];
  __shared__ __align__(32) T sd[RGB_TILE][RGB_MAX_COUT + 8]; /* dY tile [pixel][k] */
  __shared__ __align__(32) float sc[RGB_MAX_COUT][RGB_K];
  const int warp = threadIdx.x >> 5, mt = warp >> 1, nt = warp & 1, c8 = cout / 8;
  const bool active = mt < cout / 16;                        /* warp-uniform */
  const size_t tiles = (P + RGB_TILE - 1) / RGB_TILE;
  const size_t t0 = blockIdx.x * per, t1 = t0 + per < tiles ? t0 + per : tiles;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.f);
  for (size_t tile = t0; tile < t1; tile++) {
    const size_t p0 = tile * RGB_TILE;
    for (int i = threadIdx.x; i < RGB_TILE * c8; i += blockDim.x) {
      int px = i / c8, q = i % c8;
      opc_pack<T, 8> v;
      if (p0 + px < P) v = opc_load<T, 8>(dy + (p0 + px) * cout + 8 * q);
      else
#pragma unroll
        for (int j = 0; j < 8; j++) v.v[j] = opc_st<T>(0.f);
      opc_store<T, 8>(&sd[px][8 * q], v);
    }
    rgb_im2col<T, CIN>(x, p0, P, Hh, Ww, sa);
    __syncthreads();
    if (active)
      for (int kk = 0; kk < RGB_TILE; kk += 16) {
        /* dY^T: (k, pixel) at sd[pixel][k], column-major */
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, &sd[kk][16 * mt], RGB_MAX_COUT + 8);
        wmma::load_matrix_sync(fb, &sa[kk][16 * nt], RGB_LDA);
        wmma::mma_sync(fc, fa, fb, fc);
      }
    __syncthreads(); /* sa and sd are rewritten by the next tile */
  }
  if (active) wmma::store_matrix_sync(&sc[16 * mt][16 * nt], fc, RGB_K, wmma::mem_row_major);
  __syncthreads();
  const int taps = 9 * CIN;
  for (int i = threadIdx.x; i < cout * taps; i += blockDim.x)
    part[(size_t)blockIdx.x * cout * taps + i] = sc[i / taps][i % taps];
}

/* One warp per output: lane l adds blocks l, l + 32, ... in order, then a fixed shuffle tree. */
template <typename T>
__global__ void rgb_wgrad_final(const float *part, int nblocks, int n, T *dw, int accumulate)
{
  const int lane = threadIdx.x & 31;
  const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
  if (t >= n) return; /* whole warps leave together */
  float s = 0.f;
  for (int b = lane; b < nblocks; b += 32) s += part[(size_t)b * n + t];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) dw[t] = opc_st<T>(accumulate ? opc_ld(dw[t]) + s : s);
}

/* ---- launches ---- */

/* The forward's grid: one wave of the blocks that fit, at most one a tile; with the statistics
 * at least one a RGB_STATS_TILES tiles. */
template <typename T, int CIN, bool STATS>
static size_t fwd_blocks(const ops_t *o, size_t P)
{
  const size_t tiles = (P + RGB_TILE - 1) / RGB_TILE;
  const size_t most =
      (size_t)opc_fit_blocks((const void *)rgb_fwd<T, CIN, STATS>) * opc_ctx(o)->sm_count;
  const size_t nb = tiles < most ? tiles : most;
  const size_t least = (tiles + RGB_STATS_TILES - 1) / RGB_STATS_TILES;
  return STATS && nb < least ? least : nb;
}

/* stats NULL: the forward alone; else its statistics too, the blocks' partials in part. */
template <typename T, int CIN>
static int fwd_cin(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                   void *y, double *stats, double *part)
{
  cudaStream_t st = opc_ctx(o)->stream;
  if (!stats) {
    rgb_fwd<T, CIN, false><<<(unsigned)fwd_blocks<T, CIN, false>(o, P), RGB_THREADS, 0, st>>>(
        (const T *)x, (const T *)w, (T *)y, P, c->h, c->w, c->cout, NULL);
    OPC_LAUNCHED(o, "3x3 convolution of few input channels");
    return 0;
  }
  const unsigned nb = (unsigned)fwd_blocks<T, CIN, true>(o, P);
  rgb_fwd<T, CIN, true><<<nb, RGB_THREADS, 0, st>>>((const T *)x, (const T *)w, (T *)y, P, c->h,
                                                    c->w, c->cout, part);
  OPC_LAUNCHED(o, "3x3 convolution of few input channels with its statistics");
  const int n = 2 * c->cout; /* values, a warp each */
  rgb_stats_final<<<(n + 7) / 8, 256, 0, st>>>(part, (int)nb, n, (double)P, stats);
  OPC_LAUNCHED(o, "the few-channel convolution's statistics (final sums)");
  return 0;
}

template <typename T, int CIN>
static int wgrad_cin(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                     const void *dy, void *dw, int acc, void *ws)
{
  size_t tiles = (P + RGB_TILE - 1) / RGB_TILE;
  int fit = opc_fit_blocks((const void *)rgb_wgrad_part<T, CIN>);
  size_t most = (size_t)(fit < RGB_BLOCKS_PER_SM ? fit : RGB_BLOCKS_PER_SM) * opc_ctx(o)->sm_count;
  size_t nb = tiles < most ? tiles : most;
  if (nb < 1) nb = 1;
  size_t per = (tiles + nb - 1) / nb;
  cudaStream_t st = opc_ctx(o)->stream;
  rgb_wgrad_part<T, CIN><<<(unsigned)nb, RGB_THREADS, 0, st>>>(
      (const T *)x, (const T *)dy, (float *)ws, P, c->h, c->w, c->cout, per);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient of few input channels (partial sums)");
  int n = c->cout * 9 * CIN; /* outputs, one warp each */
  rgb_wgrad_final<T><<<(n + 7) / 8, 256, 0, st>>>((const float *)ws, (int)nb, n, (T *)dw, acc);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient of few input channels (final sums)");
  return 0;
}

template <typename T>
static int fwd_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                 void *y, double *stats, double *part)
{
  switch (c->cin) {
  case 1: return fwd_cin<T, 1>(o, c, P, x, w, y, stats, part);
  case 2: return fwd_cin<T, 2>(o, c, P, x, w, y, stats, part);
  default: return fwd_cin<T, 3>(o, c, P, x, w, y, stats, part);
  }
}

template <typename T>
static int wgrad_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *dy,
                   void *dw, int acc, void *ws)
{
  switch (c->cin) {
  case 1: return wgrad_cin<T, 1>(o, c, P, x, dy, dw, acc, ws);
  case 2: return wgrad_cin<T, 2>(o, c, P, x, dy, dw, acc, ws);
  default: return wgrad_cin<T, 3>(o, c, P, x, dy, dw, acc, ws);
  }
}

/* ---- entry points (conv_cuda.cu routes a planned layer here when opc_rgb_usable) ---- */

int opc_rgb_usable(const void *y_or_dy)
{
  return ((uintptr_t)y_or_dy % 16) == 0; /* 16-byte accesses of the cout channels */
}

int opc_rgb_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  switch (o->dtype) {
  case OPS_BF16: return fwd_t<__nv_bfloat16>(o, c, P, x, w, y, NULL, NULL);
  case OPS_F16: return fwd_t<__half>(o, c, P, x, w, y, NULL, NULL);
  default: return opc_fail(o, "the few-channel 3x3 kernels take 16-bit types only");
  }
}

int opc_rgb_stats_covered(const ops_t *o, const ops_conv_t *c)
{
  return opc_rgb_enabled(o, c) && RGB_THREADS % (c->cout / 8) == 0;
}

/* The most blocks the forward with statistics takes for up to max_n images. */
template <typename T>
static size_t stats_blocks_most(const ops_t *o, const ops_conv_t *c)
{
  const size_t P = (size_t)c->max_n * c->h * c->w;
  return c->cin == 1   ? fwd_blocks<T, 1, true>(o, P)
         : c->cin == 2 ? fwd_blocks<T, 2, true>(o, P)
                       : fwd_blocks<T, 3, true>(o, P);
}

size_t opc_rgb_stats_ws(const ops_t *o, const ops_conv_t *c)
{
  const size_t most = o->dtype == OPS_F16 ? stats_blocks_most<__half>(o, c)
                                          : stats_blocks_most<__nv_bfloat16>(o, c);
  return most * 2 * c->cout * sizeof(double);
}

int opc_rgb_fwd_stats(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                      void *y, double *stats, void *ws)
{
  if (!opc_rgb_stats_covered(o, c))
    return opc_fail(o, "no few-channel forward with statistics for a %d -> %d layer in %s",
                    c->cin, c->cout, opc_dtype_name(o->dtype));
  if (!opc_rgb_usable(y) || (stats && (!ws || (uintptr_t)ws % sizeof(double))))
    return opc_fail(o, "the few-channel forward with statistics needs a 16-byte aligned output "
                    "and an 8-byte aligned workspace of opc_rgb_stats_ws bytes");
  const size_t P = (size_t)n * c->h * c->w;
  if (P == 0) {
    if (!stats) return 0;
    cudaError_t e = cudaMemsetAsync(stats, 0, (2 * (size_t)c->cout + 1) * sizeof(double),
                                    opc_ctx(o)->stream); /* zero sums over zero pixels */
    return e == cudaSuccess ? 0 : opc_fail(o, "clearing the statistics: %s",
                                            cudaGetErrorString(e));
  }
  double *part = (double *)ws;
  switch (o->dtype) {
  case OPS_BF16: return fwd_t<__nv_bfloat16>(o, c, P, x, w, y, stats, part);
  case OPS_F16: return fwd_t<__half>(o, c, P, x, w, y, stats, part);
  default: return opc_fail(o, "the few-channel 3x3 kernels take 16-bit types only");
  }
}

int opc_rgb_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                       const void *dy, void *dw, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w;
  /* P == 0 still writes the sums (zero) or leaves them (accumulate), like the other paths. */
  switch (o->dtype) {
  case OPS_BF16: return wgrad_t<__nv_bfloat16>(o, c, P, x, dy, dw, acc, ws);
  case OPS_F16: return wgrad_t<__half>(o, c, P, x, dy, dw, acc, ws);
  default: return opc_fail(o, "the few-channel 3x3 kernels take 16-bit types only");
  }
}
