/* conv_sm90_wgrad_cuda.cu — the weight gradient of the fused 3x3 convolution of
 * kernels/conv_sm90.h on Hopper, with the previous layer's BatchNorm apply + ReLU recomputed
 * from its input (the forward's prologue), summed in a fixed order:
 *
 *   dW[co][t][ci] = Σ_p dy[p][co] a[p + off(t)][ci],   a = bf16(max(0, x * scale + shift))
 *
 * A GEMM per tap t = (ky, kx): M = 64 output channels, N = 64 input channels, K = pixels.
 *
 * Row tiles, column strips and blocks. A row tile is 64 pixels of one image row, columns
 * [x0, x0 + 64) with x0 = 64 s (the last segment s of a row may be cut by the image's edge); the
 * tiles of one (image n, segment s) form a column strip of h tiles, and tiles are numbered
 * strip by strip, rows down a strip: t = (n * tiles_x + s) * h + y, so vertical neighbours are
 * consecutive. Block b (one CTA) takes tiles [b T, min((b + 1) T, tiles)) with T = ceil(tiles /
 * multiprocessors) and writes the f32 partial dW of those pixels to the workspace; a second
 * kernel adds the partials in block order (conv_wgrad_ref_reduce's order, bit for bit). Where
 * w is 64 (one strip per image) the order is the raster order, and block b is conv_wgrad_ref's
 * block of 64 T pixels (kernels/conv_fused_bwd_cpu.h).
 *
 * Runs. A block's range splits into runs: consecutive rows y_a..y_b of one column strip (a run
 * ends at the strip's last row or the block's last tile). A run of L = y_b - y_a + 1 tiles
 * needs L + 2 x strips, rows y_a - 1 .. y_b + 1, each 1 row x 66 pixels from x0 - 1 (one TMA
 * box; zeros outside the image, whole strips of zeros above and below it), and L dy strips of
 * 64 pixels (zeros past the image's edge, so those pixels add nothing). Each x strip is loaded
 * and put through the BN + ReLU once, and serves the three dy rows that need it: consumer
 * warpgroup ky (the taps of kernel row ky) takes x strip y - 1 + ky for dy row y.
 *
 * Roles (512 threads):
 *   warp 0 (one thread)  loads, per run: x strips y_a - 1 and y_a, then per tile x strip
 *                        y + 1 and dy strip y, into two rings: x strips (XS slots, xfull[s])
 *                        and dy strips (DS slots, dfull[s]); expect_tx on the bytes.
 *   warps 1-3            the prologue: BN + ReLU on each x strip in place (lines outside the
 *                        image stay the copy engine's zeros), fence.proxy.async, xready[s];
 *                        without a prologue they only pass xfull on.
 *   warps 4-15           three consumer warpgroups, warpgroup ky: for each 16 pixels of a
 *                        tile (a k-step), A = dy^T (64 co x 16 pixels) from registers, by
 *                        ldmatrix .trans of the dy strip (pixels are its lines), loaded once
 *                        for three wgmma m64n64k16 (kx = 0, 1, 2), each with B = the x strip's
 *                        16 lines from line 16 ks + kx read MN-major through a descriptor (the
 *                        channels of a pixel along a line: leading byte offset 16, stride 1024,
 *                        any start line, as dev/wgmma_desc_probe.cu showed). Accumulators
 *                        (3 x 32 per thread) stay in registers across the block's tiles; at
 *                        the end each thread writes its share of the block's partial.
 *
 * Synchronisation. Every role walks the same sequence, computed from blockIdx and the plan:
 * the block's x strips j = 0, 1, ... (run after run, L + 2 each) in slot j % XS, phase
 * (j / XS) & 1, and its tiles i = 0, 1, ... whose dy strip is in slot i % DS, phase
 * (i / DS) & 1. Barriers: xfull (1 arrival + bytes), xready (the 96 prologue threads), xempty
 * (3: one thread per consumer warpgroup), dfull (1 + bytes), dempty (3). A consumer warpgroup,
 * after its wgmmas of a run's k-th tile (x strips jb + k + ky, jb the run's first) have
 * completed, frees dy slot i and x strip jb + k (row y - 1: no later tile of the run reads
 * it); after the run's last tile it waits until the run's last x strip is ready, then frees the
 * last two (jb + L, jb + L + 1). So each x strip gets one arrival per warpgroup, each after
 * that warpgroup's last read of it, and never before the strip has been loaded (the slot's
 * previous use is over). Free of deadlock: the loader's j-th x strip waits for strip j - XS
 * (XS >= 3), whose release needs only tiles that read strips up to j - XS + 2 < j, and their
 * dy strips, all issued before it; the d-th dy strip waits for tile d - DS, likewise.
 *
 * Shared memory (from a 1024-aligned base; a pixel of 64 bf16 channels is one 128-byte line in
 * the copy engine's 128-byte swizzle, which follows address bits, so each strip starts on a
 * 1024 boundary): XS = 14 x strips of 66 lines (8,448 bytes, 9,216 with padding), DS = 11 dy
 * strips of 64 lines (8,192), then the barriers: 220,672 bytes with the alignment slack.
 * Registers: 128 per thread at entry; setmaxnreg gives warpgroup 0 56 and the consumers 152. */
#include "config.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv_sm90.h"
#include "kernels/conv_sm90_wide.h"
#include "kernels/sm90_host.h"
#include "kernels/sm90_conv.cuh"
#include "kernels/sm90_ptx.cuh"
#include "kernels/sm90_regs.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv_sm90_wgrad_cuda.cu needs sm_90a (wgmma): compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace {

using namespace sm90;

constexpr int C = 64;
constexpr int TILE_W = 64;
constexpr int STRIP_W = TILE_W + 2;                  /* an x strip: 66 pixels from x0 - 1 */
constexpr int X_BYTES = STRIP_W * 128;               /* 8,448: one TMA box */
constexpr int X_SLOT = (X_BYTES + 1023) / 1024 * 1024; /* 9,216 */
constexpr int DY_BYTES = TILE_W * 128;               /* 8,192 */
constexpr int XS = 14;                               /* x strip slots */
constexpr int DS = 11;                               /* dy strip slots */
constexpr int OFF_DY = XS * X_SLOT;
constexpr int OFF_BAR = OFF_DY + DS * DY_BYTES;
constexpr int NBARS = 3 * XS + 2 * DS;
constexpr int SMEM_BYTES = OFF_BAR + 8 * NBARS + 1024;
constexpr int THREADS = 512;
constexpr int PRO_THREADS = 96;
constexpr int CONSUMERS = 3;
constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = 152;
constexpr int DW = 9 * C * C;                        /* floats of one partial */
constexpr int HANDOVER_REGS = 128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS;
static_assert(HANDOVER_REGS <= SM90_BLOCK_REGS(THREADS), "the block's registers from its launch");
static_assert(X_SLOT % 1024 == 0 && OFF_DY % 1024 == 0 && DY_BYTES % 1024 == 0,
              "strips on 1024-byte boundaries");
static_assert(XS >= 3 && DS >= 1, "the rings hold a tile's three x strips and its dy strip");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block on sm_90");

struct wparams {
  int n, h, w, tiles_x, ntiles, per_block;
  const float *scale, *shift;
  float *partial; /* [gridDim.x][cout][3][3][cin] */
};

/* Barrier addresses: xfull[XS], xready[XS], xempty[XS], dfull[DS], dempty[DS]. */
struct wbars {
  uint32_t xfull, xready, xempty, dfull, dempty;
  __device__ __forceinline__ explicit wbars(uint32_t sbase)
      : xfull(sbase + OFF_BAR), xready(xfull + 8 * XS), xempty(xready + 8 * XS),
        dfull(xempty + 8 * XS), dempty(dfull + 8 * DS)
  {
  }
};

__device__ __forceinline__ uint32_t xslot(uint32_t sbase, int j)
{
  return sbase + (uint32_t)(j % XS) * X_SLOT;
}
__device__ __forceinline__ uint32_t dslot(uint32_t sbase, int i)
{
  return sbase + OFF_DY + (uint32_t)(i % DS) * DY_BYTES;
}

/* A run: rows y_a .. y_a + len - 1 of column strip (n, x0). */
struct wrun_t {
  int n, x0, ya, len;
};

/* The run that starts at tile t of a block whose range ends at `end`. */
__device__ __forceinline__ wrun_t wrun_of(const wparams &p, int t, int end)
{
  wrun_t r;
  const int strip = t / p.h;
  r.ya = t - strip * p.h;
  r.len = min(end - t, p.h - r.ya);
  r.n = strip / p.tiles_x;
  r.x0 = (strip - r.n * p.tiles_x) * TILE_W;
  return r;
}

__device__ __forceinline__ int first_tile(const wparams &p) { return blockIdx.x * p.per_block; }
__device__ __forceinline__ int end_tile(const wparams &p)
{
  const int e = (blockIdx.x + 1) * p.per_block;
  return e < p.ntiles ? e : p.ntiles;
}

/* x strip j of the block: image row `row` of run r, into slot j % XS once its previous use
 * (strip j - XS) has been freed. */
__device__ __forceinline__ void load_x(const CUtensorMap *xmap, uint32_t sbase, const wbars &b,
                                       int j, const wrun_t &r, int row)
{
  const uint32_t s = (uint32_t)(j % XS);
  if (j >= XS) mbar_wait(b.xempty + 8 * s, (uint32_t)(j / XS - 1) & 1);
  mbar_expect_tx(b.xfull + 8 * s, X_BYTES);
  tma_load_4d(xslot(sbase, j), xmap, 0, r.x0 - 1, row, r.n, b.xfull + 8 * s);
}

__device__ __forceinline__ void wgrad_loader(const wparams &p, const CUtensorMap *xmap,
                                             const CUtensorMap *dymap, uint32_t sbase)
{
  const wbars b(sbase);
  asm volatile("prefetch.tensormap [%0];" ::"l"(xmap) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(dymap) : "memory");
  const int end = end_tile(p);
  int i = 0, j = 0;
  for (int t = first_tile(p); t < end;) {
    const wrun_t r = wrun_of(p, t, end);
    load_x(xmap, sbase, b, j, r, r.ya - 1);
    load_x(xmap, sbase, b, j + 1, r, r.ya);
    for (int k = 0; k < r.len; k++, i++) {
      load_x(xmap, sbase, b, j + k + 2, r, r.ya + k + 1);
      const uint32_t s = (uint32_t)(i % DS);
      if (i >= DS) mbar_wait(b.dempty + 8 * s, (uint32_t)(i / DS - 1) & 1);
      mbar_expect_tx(b.dfull + 8 * s, DY_BYTES);
      tma_load_4d(dslot(sbase, i), dymap, 0, r.x0, r.ya + k, r.n, b.dfull + 8 * s);
    }
    j += r.len + 2;
    t += r.len;
  }
}

/* The forward's prologue on each x strip, in place (sm90_conv.cuh): the thread owns channel
 * chunk (lane & 7) and walks lines (lane >> 3) + 4 (warp - 1), +12. */
template <bool PRO>
__device__ __forceinline__ void wgrad_prologue(const wparams &p, uint32_t sbase, int pw, int lane)
{
  const wbars b(sbase);
  const int lc = lane & 7;
  float sc[8], sh[8];
  if (PRO) bn_coef_load(p.scale, p.shift, lc, sc, sh);
  const int end = end_tile(p);
  int j = 0;
  for (int t = first_tile(p); t < end;) {
    const wrun_t r = wrun_of(p, t, end);
    for (int q = 0; q < r.len + 2; q++, j++) {
      const uint32_t s = (uint32_t)(j % XS);
      mbar_wait(b.xfull + 8 * s, (uint32_t)(j / XS) & 1);
      if (PRO) {
        bn_relu_halo(xslot(sbase, j), STRIP_W, STRIP_W, r.ya - 1 + q, r.x0 - 1, p.h, p.w,
                     4 * pw + (lane >> 3), 12, lc, sc, sh);
        fence_proxy_async();
      }
      mbar_arrive(b.xready + 8 * s);
    }
    t += r.len;
  }
}

/* A consumer warpgroup: the taps (ky, 0..2) over the block's tiles, then its share of the
 * block's partial. */
__device__ __forceinline__ void wgrad_consumer(const wparams &p, uint32_t sbase, int ky, int ti)
{
  const wbars b(sbase);
  const int wi = ti >> 5, lane = ti & 31, g = lane >> 2, t4 = lane & 3, q = lane >> 3;
  /* ldmatrix .trans geometry: matrix q covers channels 16 wi + 8 (q & 1) and pixels 8 (q >> 1)
   * of the k-step; the lane addresses the pixel line (lane & 7) of it */
  const uint32_t pix = (uint32_t)(8 * (q >> 1) + (lane & 7)), chunk = (uint32_t)(2 * wi + (q & 1));
  float acc[3][32];
#pragma unroll
  for (int v = 0; v < 32; v++) acc[0][v] = acc[1][v] = acc[2][v] = 0.f;
  const int end = end_tile(p);
  int i = 0, j = 0; /* the block's tile, the run's first x strip */
  for (int t = first_tile(p); t < end;) {
    const wrun_t r = wrun_of(p, t, end);
    for (int k = 0; k < r.len; k++, i++) {
      const int jx = j + k + ky; /* x strip row y - 1 + ky */
      mbar_wait(b.xready + 8 * (jx % XS), (uint32_t)(jx / XS) & 1);
      mbar_wait(b.dfull + 8 * (i % DS), (uint32_t)(i / DS) & 1);
      const uint32_t xs = xslot(sbase, jx), ds = dslot(sbase, i);
      uint32_t a[2][4];
#pragma unroll
      for (int ks = 0; ks < TILE_W / 16; ks++) {
        ldmatrix_x4_trans(ds + swz((uint32_t)(16 * ks) + pix, chunk), a[ks & 1]);
        wgmma_fence();
#pragma unroll
        for (int kx = 0; kx < 3; kx++)
          wgmma_rs<1>(acc[kx], a[ks & 1], desc_sw128(xs + (uint32_t)(16 * ks + kx) * 128u), 1);
        wgmma_commit();
        wgmma_wait<1>();
      }
      wgmma_wait<0>(); /* the strips' lines are read */
#pragma unroll
      for (int kx = 0; kx < 3; kx++) acc_fence(acc[kx]);
      __syncwarp();
      if (ti == 0) {
        mbar_arrive(b.dempty + 8 * (i % DS));
        mbar_arrive(b.xempty + 8 * ((j + k) % XS)); /* row y - 1: read by no later tile */
      }
    }
    /* the run's last two x strips: freed once loaded (their slots' previous uses are over),
     * which the last one's readiness implies */
    if (ti == 0) {
      const int jl = j + r.len + 1;
      mbar_wait(b.xready + 8 * (jl % XS), (uint32_t)(jl / XS) & 1);
      mbar_arrive(b.xempty + 8 * ((jl - 1) % XS));
      mbar_arrive(b.xempty + 8 * (jl % XS));
    }
    __syncwarp();
    j += r.len + 2;
    t += r.len;
  }
  /* accumulator v = 4 j + 2 h + e: output channel 16 wi + g + 8 h, input channel 8 j + 2 t4 + e */
  float *part = p.partial + (size_t)blockIdx.x * DW;
#pragma unroll
  for (int kx = 0; kx < 3; kx++)
#pragma unroll
    for (int jj = 0; jj < 8; jj++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int co = 16 * wi + g + 8 * h, ci = 8 * jj + 2 * t4, tap = 3 * ky + kx;
        float2 v = make_float2(acc[kx][4 * jj + 2 * h], acc[kx][4 * jj + 2 * h + 1]);
        *reinterpret_cast<float2 *>(part + (size_t)co * 9 * C + tap * C + ci) = v;
      }
}

template <bool PRO>
__global__ void __launch_bounds__(THREADS, 1)
    conv_sm90_wgrad_kernel(const __grid_constant__ CUtensorMap xmap,
                           const __grid_constant__ CUtensorMap dymap, const wparams p)
{
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    const wbars b(sbase);
    for (int s = 0; s < XS; s++) {
      mbar_init(b.xfull + 8 * s, 1);
      mbar_init(b.xready + 8 * s, PRO_THREADS);
      mbar_init(b.xempty + 8 * s, CONSUMERS);
    }
    for (int s = 0; s < DS; s++) {
      mbar_init(b.dfull + 8 * s, 1);
      mbar_init(b.dempty + 8 * s, CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp < 4) {
    regs_dec<PRODUCER_REGS>();
    if (warp == 0) {
      if (lane == 0) wgrad_loader(p, &xmap, &dymap, sbase);
    } else {
      wgrad_prologue<PRO>(p, sbase, warp - 1, lane);
    }
  } else {
    regs_inc<CONSUMER_REGS>();
    wgrad_consumer(p, sbase, (warp - 4) >> 2, threadIdx.x & 127);
  }
}

typedef void (*wkernel_fn)(CUtensorMap, CUtensorMap, wparams);

wkernel_fn wpick(bool pro) { return pro ? conv_sm90_wgrad_kernel<true> : conv_sm90_wgrad_kernel<false>; }

/* Row tiles of a batch and row tiles per block on `sms` multiprocessors; the blocks. */
void plan(int n, int h, int w, int sms, int *ntiles, int *per_block, int *blocks)
{
  const long long tiles = (long long)n * h * ((w + TILE_W - 1) / TILE_W);
  *ntiles = (int)tiles;
  *per_block = tiles > 0 ? (int)((tiles + sms - 1) / sms) : 1;
  *blocks = tiles > 0 ? (int)((tiles + *per_block - 1) / *per_block) : 1;
}

} // namespace

extern "C" int conv_sm90_wgrad_plan(int device, int n, int h, int w, int *blocks,
                                    int *tiles_per_block)
{
  const int sms = sm_count(device);
  if (sms < 1 || n < 0 || h < 1 || w < 1) return -1;
  int ntiles = 0;
  plan(n, h, w, sms, &ntiles, tiles_per_block, blocks);
  return 0;
}

extern "C" size_t conv_sm90_wgrad_ws_bytes(int device, int n, int h, int w)
{
  int blocks = 0, per = 0;
  if (conv_sm90_wgrad_plan(device, n, h, w, &blocks, &per)) return 0;
  return (size_t)blocks * DW * sizeof(float);
}

extern "C" int conv_sm90_wgrad_plan_shape(int device, int n, int h, int w, int cin, int cout,
                                          int *splits, int *tiles_per_split)
{
  if (cin == C && cout == C)
    return conv_sm90_wgrad_plan(device, n, h, w, splits, tiles_per_split);
  return conv_wide_wgrad_plan(device, n, h, w, cin, cout, splits, tiles_per_split);
}

extern "C" size_t conv_sm90_wgrad_ws_bytes_shape(int device, int n, int h, int w, int cin,
                                                 int cout)
{
  int splits = 0, per = 0;
  if (conv_sm90_wgrad_plan_shape(device, n, h, w, cin, cout, &splits, &per)) return 0;
  return (size_t)splits * 9 * cin * cout * sizeof(float);
}

extern "C" int conv_sm90_wgrad(const conv_sm90_wgrad_t *a, char *err, size_t errlen)
{
  if (a->cin != C || a->cout != C) return conv_wide_wgrad(a, err, errlen); /* the wider layers */
  if (a->n < 0 || a->h < 1 || a->w < 1 || (a->n > 0 && (size_t)a->n * a->h * a->w > (1u << 30)))
    return fail(err, errlen, "the sm_90 convolution: batch %d of %dx%d is invalid", a->n, a->h,
                a->w);
  if (!a->x || !a->dy || !a->dweight || !aligned16(a->x) || !aligned16(a->dy) ||
      !aligned16(a->dweight))
    return fail(err, errlen, "the sm_90 wgrad needs x, dy and dweight in device memory on "
                "16-byte boundaries");
  if (!a->scale != !a->shift)
    return fail(err, errlen, "the sm_90 wgrad's prologue needs both scale and shift");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return fail(err, errlen, "no current CUDA device");
  }
  const int sms = sm_count(device);
  if (sms < 1) return fail(err, errlen, "CUDA device %d: no multiprocessor count", device);
  if (!a->ws)
    return fail(err, errlen, "the sm_90 wgrad needs conv_sm90_wgrad_ws_bytes() of workspace");
  cudaStream_t st = (cudaStream_t)a->stream;
  wparams p;
  int blocks = 0;
  plan(a->n, a->h, a->w, sms, &p.ntiles, &p.per_block, &blocks);
  if (p.ntiles == 0) { /* no pixels: one partial of zeros, dW zero */
    cudaError_t e = cudaMemsetAsync(a->ws, 0, DW * sizeof(float), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(a->dweight, 0, DW * sizeof(float), st);
    return e == cudaSuccess ? 0 : fail(err, errlen, "clearing dW: %s", cudaGetErrorString(e));
  }
  if (!encode_tiled())
    return fail(err, errlen, "the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
  CUtensorMap xm, dym;
  if (map_image(&xm, a->x, a->n, a->h, a->w, STRIP_W, 1, err, errlen) ||
      map_image(&dym, a->dy, a->n, a->h, a->w, TILE_W, 1, err, errlen))
    return -1;
  p.n = a->n;
  p.h = a->h;
  p.w = a->w;
  p.tiles_x = (a->w + TILE_W - 1) / TILE_W;
  p.scale = a->scale;
  p.shift = a->shift;
  p.partial = (float *)a->ws;
  wkernel_fn k = wpick(a->scale != NULL);
  cudaError_t e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SMEM_BYTES);
  if (e != cudaSuccess)
    return fail(err, errlen, "the sm_90 wgrad's shared memory (%d bytes): %s", SMEM_BYTES,
                cudaGetErrorString(e));
  k<<<blocks, THREADS, SMEM_BYTES, st>>>(xm, dym, p);
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 wgrad: %s", cudaGetErrorString(e));
  wgrad_reduce(p.partial, blocks, DW, a->dweight, st); /* in block order */
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 wgrad's reduction: %s", cudaGetErrorString(e));
  return 0;
}

extern "C" int conv_sm90_wgrad_check(int device, char *err, size_t errlen)
{
  cudaFuncAttributes fa;
  for (int k = 0; k < 2; k++) {
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, (const void *)wpick(k));
    if (e != cudaSuccess) {
      cudaGetLastError();
      return fail(err, errlen, "the sm_90a wgrad does not load on device %d: %s", device,
                  cudaGetErrorString(e));
    }
    if (regs_fit(fa.numRegs, THREADS, HANDOVER_REGS, "sm_90a wgrad", err, errlen)) return -1;
  }
  return conv_wide_wgrad_check(device, err, errlen); /* the wider layers' kernels */
}
