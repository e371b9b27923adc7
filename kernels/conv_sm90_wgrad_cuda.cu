/* conv_sm90_wgrad_cuda.cu — the weight gradient of the fused 3x3 convolution of
 * kernels/conv_sm90.h on Hopper, with the previous layer's BatchNorm apply + ReLU recomputed
 * from its input (the forward's prologue), summed in a fixed order:
 *
 *   dW[co][t][ci] = Σ_p dy[p][co] a[p + off(t)][ci],   a = bf16(max(0, x * scale + shift))
 *
 * A GEMM per tap t = (ky, kx): M = 64 output channels, N = 64 input channels, K = pixels.
 *
 * Tiles and blocks. A tile is 64 pixels of one image row (the last of a row may be cut by the
 * image's edge); tiles are numbered in raster order (image, row, segment), so consecutive tiles
 * are consecutive pixels. Block b (one CTA) takes tiles [b T, (b + 1) T) with T = ceil(tiles /
 * multiprocessors): a contiguous run of pixels, whose f32 partial dW it writes to the workspace;
 * a second kernel adds the partials in block order. Where the width is a multiple of 64, block
 * b is exactly conv_wgrad_ref's block of 64 T pixels (kernels/conv_fused_bwd_cpu.h), and the
 * reduction is conv_wgrad_ref_reduce's, bit for bit.
 *
 * Per tile, one TMA load brings the halo of x (3 rows x 66 pixels, zero outside the image) and
 * one the tile's dy (64 pixels; zero past the image's edge, so those pixels add nothing). Roles
 * (512 threads): warp 0 loads into a 4-stage ring (full[s]); warps 1-3 apply the BN + ReLU to
 * the halo in place, leaving the lines outside the image zero (ready[s]); three consumer
 * warpgroups, warpgroup j doing the taps of row ky = j. For each 16 pixels of the tile (a
 * k-step): A = dy^T (64 co x 16 pixels) from registers, by ldmatrix .trans of the dy tile
 * (pixels are its lines), loaded once for three wgmma m64n64k16 (kx = 0, 1, 2), each with B = the
 * halo's 16 lines starting at (ky, c + kx) read MN-major through a descriptor (the channels of a
 * pixel along a line: leading byte offset 16, stride 1024, any start line, as
 * dev/wgmma_desc_probe.cu showed). Accumulators (3 x 32 per thread) stay in registers across
 * the block's tiles; each warpgroup waits for its wgmmas before it hands a stage back (empty[s],
 * one arrival per warpgroup). At the end each thread writes its share of the block's partial.
 *
 * Shared memory: 4 stages of [halo 198 lines (25,344 bytes, 25,600 with padding) | dy 64 lines
 * (8,192)], 1024-aligned, 128-byte swizzle as the copy engine writes it; barriers after them.
 * Registers: 128 per thread at entry; setmaxnreg gives warpgroup 0 56 and the consumers 152. */
#include "config.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv_sm90.h"
#include "kernels/sm90_host.h"
#include "kernels/sm90_conv.cuh"
#include "kernels/sm90_ptx.cuh"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv_sm90_wgrad_cuda.cu needs sm_90a (wgmma): compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace {

using namespace sm90;

constexpr int C = 64;
constexpr int TILE_W = 64;
constexpr int HALO_W = TILE_W + 2, HALO_H = 3;
constexpr int HALO_LINES = HALO_W * HALO_H;          /* 198 */
constexpr int HALO_BYTES = HALO_LINES * 128;         /* 25,344: one TMA box */
constexpr int DY_OFF = (HALO_BYTES + 1023) / 1024 * 1024;
constexpr int DY_BYTES = TILE_W * 128;               /* 8,192 */
constexpr int STAGE_BYTES = DY_OFF + DY_BYTES;       /* 33,792 */
constexpr int STAGES = 4;
constexpr int OFF_BAR = STAGES * STAGE_BYTES;
constexpr int SMEM_BYTES = OFF_BAR + 3 * STAGES * 8 + 1024;
constexpr int THREADS = 512;
constexpr int PRO_THREADS = 96;
constexpr int CONSUMERS = 3;
constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = 152;
constexpr int DW = 9 * C * C;                        /* floats of one partial */
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "the register file");
static_assert(STAGE_BYTES % 1024 == 0 && DY_OFF % 1024 == 0, "buffers on 1024-byte boundaries");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory per block on sm_90");

struct wparams {
  int n, h, w, tiles_x, ntiles, per_block;
  const float *scale, *shift;
  float *partial; /* [gridDim.x][cout][3][3][cin] */
};

struct wtile_t {
  int n, y, x0;
};

__device__ __forceinline__ wtile_t wtile_of(const wparams &p, int t)
{
  wtile_t r;
  r.x0 = (t % p.tiles_x) * TILE_W;
  t /= p.tiles_x;
  r.y = t % p.h;
  r.n = t / p.h;
  return r;
}

__device__ __forceinline__ int first_tile(const wparams &p) { return blockIdx.x * p.per_block; }
__device__ __forceinline__ int end_tile(const wparams &p)
{
  const int e = (blockIdx.x + 1) * p.per_block;
  return e < p.ntiles ? e : p.ntiles;
}

__device__ __forceinline__ void wgrad_loader(const wparams &p, const CUtensorMap *xmap,
                                             const CUtensorMap *dymap, uint32_t sbase)
{
  const uint32_t full = sbase + OFF_BAR, empty = full + 16 * STAGES;
  asm volatile("prefetch.tensormap [%0];" ::"l"(xmap) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(dymap) : "memory");
  int i = 0;
  for (int t = first_tile(p); t < end_tile(p); t++, i++) {
    const int s = i % STAGES, k = i / STAGES;
    if (k > 0) mbar_wait(empty + 8 * s, (k - 1) & 1);
    const wtile_t tl = wtile_of(p, t);
    const uint32_t stage = sbase + s * STAGE_BYTES;
    mbar_expect_tx(full + 8 * s, HALO_BYTES + DY_BYTES);
    tma_load_4d(stage, xmap, 0, tl.x0 - 1, tl.y - 1, tl.n, full + 8 * s);
    tma_load_4d(stage + DY_OFF, dymap, 0, tl.x0, tl.y, tl.n, full + 8 * s);
  }
}

/* The forward's prologue on the halo, in place (sm90_conv.cuh): the thread owns channel chunk
 * (lane & 7) and walks lines (lane >> 3) + 4 (warp - 1), +12. */
template <bool PRO>
__device__ __forceinline__ void wgrad_prologue(const wparams &p, uint32_t sbase, int pw, int lane)
{
  const uint32_t full = sbase + OFF_BAR, ready = full + 8 * STAGES;
  const int lc = lane & 7;
  float sc[8], sh[8];
  if (PRO) bn_coef_load(p.scale, p.shift, lc, sc, sh);
  int i = 0;
  for (int t = first_tile(p); t < end_tile(p); t++, i++) {
    const int s = i % STAGES, k = i / STAGES;
    mbar_wait(full + 8 * s, k & 1);
    if (PRO) {
      const wtile_t tl = wtile_of(p, t);
      bn_relu_halo(sbase + s * STAGE_BYTES, HALO_LINES, HALO_W, tl.y - 1, tl.x0 - 1, p.h, p.w,
                   4 * pw + (lane >> 3), 12, lc, sc, sh);
      fence_proxy_async();
    }
    mbar_arrive(ready + 8 * s);
  }
}

/* A consumer warpgroup: the taps (ky, 0..2) over the block's tiles, then its share of the
 * block's partial. */
__device__ __forceinline__ void wgrad_consumer(const wparams &p, uint32_t sbase, int ky, int ti)
{
  const uint32_t full = sbase + OFF_BAR, ready = full + 8 * STAGES, empty = full + 16 * STAGES;
  const int wi = ti >> 5, lane = ti & 31, g = lane >> 2, t4 = lane & 3, q = lane >> 3;
  /* ldmatrix .trans geometry: matrix q covers channels 16 wi + 8 (q & 1) and pixels 8 (q >> 1)
   * of the k-step; the lane addresses the pixel line (lane & 7) of it */
  const uint32_t pix = (uint32_t)(8 * (q >> 1) + (lane & 7)), chunk = (uint32_t)(2 * wi + (q & 1));
  float acc[3][32];
#pragma unroll
  for (int v = 0; v < 32; v++) acc[0][v] = acc[1][v] = acc[2][v] = 0.f;
  int i = 0;
  for (int t = first_tile(p); t < end_tile(p); t++, i++) {
    const int s = i % STAGES, k = i / STAGES;
    const uint32_t stage = sbase + s * STAGE_BYTES;
    mbar_wait(ready + 8 * s, k & 1);
    uint32_t a[2][4];
#pragma unroll
    for (int ks = 0; ks < TILE_W / 16; ks++) {
      ldmatrix_x4_trans(stage + DY_OFF + swz((uint32_t)(16 * ks) + pix, chunk), a[ks & 1]);
      wgmma_fence();
#pragma unroll
      for (int kx = 0; kx < 3; kx++) {
        const uint32_t line = (uint32_t)(ky * HALO_W + 16 * ks + kx);
        wgmma_rs<1>(acc[kx], a[ks & 1], desc_sw128(stage + line * 128u), 1);
      }
      wgmma_commit();
      wgmma_wait<1>();
    }
    wgmma_wait<0>(); /* the stage's lines are read */
#pragma unroll
    for (int kx = 0; kx < 3; kx++) acc_fence(acc[kx]);
    __syncwarp();
    if (ti == 0) mbar_arrive(empty + 8 * s);
  }
  /* accumulator v = 4 j + 2 h + e: output channel 16 wi + g + 8 h, input channel 8 j + 2 t4 + e */
  float *part = p.partial + (size_t)blockIdx.x * DW;
#pragma unroll
  for (int kx = 0; kx < 3; kx++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int co = 16 * wi + g + 8 * h, ci = 8 * j + 2 * t4, tap = 3 * ky + kx;
        float2 v = make_float2(acc[kx][4 * j + 2 * h], acc[kx][4 * j + 2 * h + 1]);
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
    const uint32_t bar = sbase + OFF_BAR;
    for (int s = 0; s < STAGES; s++) {
      mbar_init(bar + 8 * s, 1);                          /* full */
      mbar_init(bar + 8 * (STAGES + s), PRO_THREADS);     /* ready */
      mbar_init(bar + 8 * (2 * STAGES + s), CONSUMERS);   /* empty */
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

/* dW[i] = (((partial[0][i] + partial[1][i]) + ...) in block order, f32. */
__global__ void conv_sm90_wgrad_reduce_kernel(const float *partial, int blocks, float *dw)
{
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= DW) return;
  float v = partial[i];
  for (int b = 1; b < blocks; b++) v += partial[(size_t)b * DW + i];
  dw[i] = v;
}

typedef void (*wkernel_fn)(CUtensorMap, CUtensorMap, wparams);

wkernel_fn wpick(bool pro) { return pro ? conv_sm90_wgrad_kernel<true> : conv_sm90_wgrad_kernel<false>; }

/* Tiles of a batch and tiles per block on `sms` multiprocessors; the blocks. */
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

extern "C" int conv_sm90_wgrad(const conv_sm90_wgrad_t *a, char *err, size_t errlen)
{
  if (a->cin != C || a->cout != C)
    return fail(err, errlen, "the sm_90 convolution covers %d -> %d channels, not %d -> %d", C,
                C, a->cin, a->cout);
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
  if (map_image(&xm, a->x, a->n, a->h, a->w, HALO_W, HALO_H, err, errlen) ||
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
  conv_sm90_wgrad_reduce_kernel<<<(DW + 255) / 256, 256, 0, st>>>(p.partial, blocks, a->dweight);
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
  }
  return 0;
}
