/* conv_sm90_wgrad_wide_cuda.cu — the weight gradient of kernels/conv_sm90.h's fused 3x3
 * convolution on Hopper for the wider layers: cin and cout any multiples of 64 up to 1024
 * (64 -> 64 stays with kernels/conv_sm90_wgrad_cuda.cu, whose head comment explains the pieces
 * this kernel shares with it: row tiles and column strips, runs, x strips through the prologue
 * once, three consumer warpgroups one per kernel row, dy^T as A by ldmatrix .trans, B = the x
 * strip MN-major through descriptors). bf16 in, f32 dW out, the prologue recomputed from x
 * optional:
 *
 *   dW[co][t][ci] = Σ_p dy[p][co] a[p + off(t)][ci],   a = bf16(max(0, x * scale + shift))
 *
 * A GEMM per tap t: M = output channels, N = input channels, K = pixels.
 *
 * Output tiles. An output tile is 64 output channels (co tile ct, of NC = cout / 64) x one
 * 64-channel chunk of the input (kc, of KC = cin / 64) x all 9 taps: OT = NC KC tiles, tile
 * o = ct KC + kc. A block computes one output tile over one K range, so it is the 64 -> 64
 * kernel on a 64-channel slice of x (channels [64 kc, 64 kc + 64), one TMA box of the cin-channel
 * image at channel 64 kc) and a 64-channel slice of dy (channels [64 ct, 64 ct + 64)): its
 * shared memory, rings, roles and barriers are those of the 64 -> 64 kernel. Why M = 64 and
 * not 128 output channels: each consumer warpgroup keeps the accumulators of its three taps
 * (ky, 0..2) across the block's tiles; with M = 64 and N = 64 that is 3 x 32 = 96 f32 a
 * thread; M = 128 (two m64 wgmmas per tap, or N = 128 with m64n128k16) doubles it to 192, more
 * than the 152 registers a consumer thread gets beside a 56-register producer warpgroup (65,536
 * / 512 threads) before its fragments and addresses. Fewer consumer warpgroups (two taps rows
 * in one) would keep the 192 and lose a warpgroup's latency hiding. So M = 64: each x chunk's
 * strips are loaded by NC blocks and each dy tile's by KC blocks, from L2 (the blocks of one
 * K split run side by side and read the same pixels).
 *
 * Split-K. The row tiles (numbered as in the 64 -> 64 kernel: t = (n tiles_x + s) h + y, down
 * column strips) are cut into S ranges of T = ceil(tiles / S) tiles, split k taking tiles
 * [k T, min((k + 1) T, tiles)). Block b = k OT + o computes output tile o over split k and
 * writes its f32 partial into the split's partial dW ([S][cout][3][3][cin] in the workspace;
 * the blocks of one split write disjoint parts of it); a second kernel adds the S partials in
 * split order (conv_wgrad_ref_reduce's order, bit for bit). With S = 1 (the deepest layers) the
 * one partial is dW: the blocks write it there and the workspace is not touched (a copy of
 * 4 x 9 cin cout bytes less, twice: 75 MB at 1024 -> 1024). The rule (wplan below), with G
 * multiprocessors:
 *   S = floor(G / OT) where OT < G, else 1        every multiprocessor gets a block, and no
 *                                                 second wave of a few blocks (OT S <= G)
 *   S <= ceil(tiles / MIN_TILES)                  a split has at least MIN_TILES = 8 row tiles
 *                                                 (or all): a block's partial (147 KB written,
 *                                                 read again by the reduction) costs about what
 *                                                 4 tiles of its tensor work do
 *   S <= floor(64 MiB / (36 cin cout)), >= 1      the partials bounded by 64 MiB (with
 *                                                 S <= G / OT it is below 20 MB on 132
 *                                                 multiprocessors; a guard)
 * Then S is recomputed as ceil(tiles / T) (no empty split). Deep layers (512 -> 512 at 16 x 16,
 * OT = 64 on 132 multiprocessors) get S = 2, 1024 -> 1024 (OT = 256 > G) S = 1 in two waves;
 * full-resolution ones (128 -> 64 at 256 x 256, OT = 2) S = 66 splits of 94 tiles. Where OT > G
 * the blocks run in waves (not persistent): ceil(OT / G) of them, the last partly idle.
 * Block order b = k OT + o puts the blocks of one split next to each other, so the blocks
 * running together share their x and dy strips in L2.
 *
 * Narrow images. A row tile of 64 pixels of one row would leave 50 % or 75 % of its pixels
 * past the edge of the U-Net's 32 x 32 and 16 x 16 deep layers (zeros multiplied). On images 32
 * or 16 pixels wide a tile is instead R = 64 / w whole rows (kernels/conv_sm90_tile.h,
 * sm90_wtile_geometry): its dy strip one box of w pixels x R rows (the same 64 lines), and its
 * k-step ks (16 pixels, within one row because w >= 16) row 16 ks / w of it, so the consumer's
 * B operand starts at line 16 ks % w + kx of x strip (image row) y0 + 16 ks / w - 1 + ky. The x
 * strips stay one image row each, w + 2 pixels now; a run of L tiles down the image loads
 * R L + 2 of them, tile k reading strips R k .. R k + R + 1 of the run and freeing R k ..
 * R k + R - 1 (read by no later tile) when it is done. With R = 1 this is the 64-pixel tiling
 * exactly. The kernel is instantiated for R = 1, 2, 4 (compile-time row offsets: no registers
 * for them beside the 96 accumulators). Other widths (2 .. 8, and all that are not powers of
 * two) keep rows of 64: below 16 pixels a k-step would span rows, which the operand's
 * consecutive lines cannot.
 *
 * Everything else — the loader's order, the prologue (with the chunk's coefficients,
 * scale[64 kc + c]), the consumer's k-steps, the barriers and their release order, the
 * deadlock argument — is the 64 -> 64 kernel's, per block; dev/conv_sm90_wgrad_protocol.py
 * models it (random interleavings of the roles and the copy engine).
 *
 * Shared memory (as the 64 -> 64 kernel, from a 1024-aligned base): XS = 14 x strips of 66
 * lines (9,216 bytes a slot with padding), DS = 11 dy strips of 64 lines (8,192), 64 barriers:
 * 129,024 + 90,112 + 512 + 1,024 slack = 220,672 bytes (static_assert <= 227 KB).
 * Registers: 128 per thread at entry; setmaxnreg gives warpgroup 0 56 and the consumers 152. */
#include "config.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "kernels/conv_sm90.h"
#include "kernels/conv_sm90_tile.h"
#include "kernels/conv_sm90_wide.h"
#include "kernels/sm90_conv.cuh"
#include "kernels/sm90_host.h"
#include "kernels/sm90_ptx.cuh"
#include "kernels/sm90_regs.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv_sm90_wgrad_wide_cuda.cu needs sm_90a (wgmma): compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace sm90 {
namespace {

constexpr int CH = 64;                               /* channels of a chunk, of a co tile */
constexpr int MAX_CH = CONV_SM90_MAX_CHANNELS;
constexpr int TILE_W = SM90_TILE_M;                  /* pixels a tile */
constexpr int STRIP_W = TILE_W + 2;                  /* the widest x strip: 66 pixels from x0 - 1 */
constexpr int X_SLOT = (STRIP_W * 128 + 1023) / 1024 * 1024; /* 9,216 */
constexpr int DY_BYTES = TILE_W * 128;               /* 8,192 */

/* An x strip of a tile of R rows of 64 / R pixels: 64 / R + 2 pixels, one TMA box. */
template <int R> struct xgeom {
  static_assert(R == 1 || R == 2 || R == 4, "tiles of 1, 2 or 4 rows");
  static constexpr int TW = TILE_W / R, LINES = TW + 2, BYTES = LINES * 128;
};
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
constexpr int MIN_TILES = 8;                         /* row tiles a split has at least */
constexpr size_t WS_CAP = (size_t)64 << 20;          /* bytes of partials at most */
constexpr int HANDOVER_REGS = 128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS;
static_assert(HANDOVER_REGS <= SM90_BLOCK_REGS(THREADS), "the block's registers from its launch");
static_assert(X_SLOT % 1024 == 0 && OFF_DY % 1024 == 0 && DY_BYTES % 1024 == 0,
              "strips on 1024-byte boundaries");
static_assert(XS >= 4 + 2 && DS >= 1,
              "the rings hold a tile's x strips (R + 2, R up to 4) and its dy strip");
static_assert(SMEM_BYTES == 220672 && SMEM_BYTES <= 227 * 1024, "shared memory per block on sm_90");

struct wparams {
  int n, h, w, tiles_x, th, ntiles, per_split; /* th: tiles down a column strip */
  int cin, cout, kcn, otiles; /* KC = cin / 64; OT = (cout / 64) KC */
  const float *scale, *shift;
  float *partial; /* [splits][cout][3][3][cin] */
};

/* The block's output tile and split: channel offsets of its x chunk and dy tile. */
struct wblock_t {
  int split, c_in, c_out;
};

__device__ __forceinline__ wblock_t wblock_of(const wparams &p)
{
  wblock_t b;
  b.split = (int)blockIdx.x / p.otiles;
  const int o = (int)blockIdx.x - b.split * p.otiles, ct = o / p.kcn;
  b.c_in = CH * (o - ct * p.kcn);
  b.c_out = CH * ct;
  return b;
}

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

/* A run: len tiles of R rows from image row ya down column strip (n, x0). */
struct wrun_t {
  int n, x0, ya, len;
};

/* The run that starts at tile t of a split whose range ends at `end`. */
template <int R>
__device__ __forceinline__ wrun_t wrun_of(const wparams &p, int t, int end)
{
  wrun_t r;
  const int strip = t / p.th, ty = t - strip * p.th;
  r.ya = R * ty;
  r.len = min(end - t, p.th - ty);
  r.n = strip / p.tiles_x;
  r.x0 = (strip - r.n * p.tiles_x) * xgeom<R>::TW;
  return r;
}

__device__ __forceinline__ int first_tile(const wparams &p, const wblock_t &b)
{
  return b.split * p.per_split;
}
__device__ __forceinline__ int end_tile(const wparams &p, const wblock_t &b)
{
  const int e = (b.split + 1) * p.per_split;
  return e < p.ntiles ? e : p.ntiles;
}

/* x strip j of the block: image row `row` of run r, channels [c_in, c_in + 64), into slot
 * j % XS once its previous use (strip j - XS) has been freed. */
template <int R>
__device__ __forceinline__ void load_x(const CUtensorMap *xmap, uint32_t sbase, const wbars &b,
                                       int j, const wrun_t &r, int row, int c_in)
{
  const uint32_t s = (uint32_t)(j % XS);
  if (j >= XS) mbar_wait(b.xempty + 8 * s, (uint32_t)(j / XS - 1) & 1);
  mbar_expect_tx(b.xfull + 8 * s, xgeom<R>::BYTES);
  tma_load_4d(xslot(sbase, j), xmap, c_in, r.x0 - 1, row, r.n, b.xfull + 8 * s);
}

/* Strip j + m of a run is image row ya - 1 + m: rows ya - 1 and ya first, then before tile
 * k's dy its R rows below the previous ones. */
template <int R>
__device__ __forceinline__ void wide_loader(const wparams &p, const CUtensorMap *xmap,
                                            const CUtensorMap *dymap, uint32_t sbase)
{
  const wbars b(sbase);
  const wblock_t blk = wblock_of(p);
  asm volatile("prefetch.tensormap [%0];" ::"l"(xmap) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(dymap) : "memory");
  const int end = end_tile(p, blk);
  int i = 0, j = 0;
  for (int t = first_tile(p, blk); t < end;) {
    const wrun_t r = wrun_of<R>(p, t, end);
    load_x<R>(xmap, sbase, b, j, r, r.ya - 1, blk.c_in);
    load_x<R>(xmap, sbase, b, j + 1, r, r.ya, blk.c_in);
    for (int k = 0; k < r.len; k++, i++) {
#pragma unroll
      for (int q = 0; q < R; q++)
        load_x<R>(xmap, sbase, b, j + R * k + 2 + q, r, r.ya + R * k + 1 + q, blk.c_in);
      const uint32_t s = (uint32_t)(i % DS);
      if (i >= DS) mbar_wait(b.dempty + 8 * s, (uint32_t)(i / DS - 1) & 1);
      mbar_expect_tx(b.dfull + 8 * s, DY_BYTES);
      tma_load_4d(dslot(sbase, i), dymap, blk.c_out, r.x0, r.ya + R * k, r.n, b.dfull + 8 * s);
    }
    j += R * r.len + 2;
    t += r.len;
  }
}

/* The forward's prologue on each x strip, in place, with the chunk's coefficients: the thread
 * owns channel chunk (lane & 7) and walks lines (lane >> 3) + 4 (warp - 1), +12. */
template <bool PRO, int R>
__device__ __forceinline__ void wide_prologue(const wparams &p, uint32_t sbase, int pw, int lane)
{
  const wbars b(sbase);
  const wblock_t blk = wblock_of(p);
  const int lc = lane & 7;
  float sc[8], sh[8];
  if (PRO) bn_coef_load(p.scale + blk.c_in, p.shift + blk.c_in, lc, sc, sh);
  const int end = end_tile(p, blk);
  int j = 0;
  for (int t = first_tile(p, blk); t < end;) {
    const wrun_t r = wrun_of<R>(p, t, end);
    for (int q = 0; q < R * r.len + 2; q++, j++) {
      const uint32_t s = (uint32_t)(j % XS);
      mbar_wait(b.xfull + 8 * s, (uint32_t)(j / XS) & 1);
      if (PRO) {
        bn_relu_halo(xslot(sbase, j), xgeom<R>::LINES, xgeom<R>::LINES, r.ya - 1 + q, r.x0 - 1,
                     p.h, p.w, 4 * pw + (lane >> 3), 12, lc, sc, sh);
        fence_proxy_async();
      }
      mbar_arrive(b.xready + 8 * s);
    }
    t += r.len;
  }
}

/* A consumer warpgroup: the taps (ky, 0..2) of the block's output tile over its split's
 * tiles, then its share of the block's part of the split's partial. */
template <int R>
__device__ __forceinline__ void wide_consumer(const wparams &p, uint32_t sbase, int ky, int ti)
{
  constexpr int TW = xgeom<R>::TW;
  const wbars b(sbase);
  const wblock_t blk = wblock_of(p);
  const int wi = ti >> 5, lane = ti & 31, g = lane >> 2, t4 = lane & 3, q = lane >> 3;
  /* ldmatrix .trans geometry: matrix q covers channels 16 wi + 8 (q & 1) and pixels 8 (q >> 1)
   * of the k-step; the lane addresses the pixel line (lane & 7) of it */
  const uint32_t pix = (uint32_t)(8 * (q >> 1) + (lane & 7)), chunk = (uint32_t)(2 * wi + (q & 1));
  float acc[3][32];
#pragma unroll
  for (int v = 0; v < 32; v++) acc[0][v] = acc[1][v] = acc[2][v] = 0.f;
  const int end = end_tile(p, blk);
  int i = 0, j = 0; /* the block's tile, the run's first x strip */
  for (int t = first_tile(p, blk); t < end;) {
    const wrun_t r = wrun_of<R>(p, t, end);
    for (int k = 0; k < r.len; k++, i++) {
      const int jx = j + R * k + ky; /* x strip of the tile's first row: image row y0 - 1 + ky */
#pragma unroll
      for (int q = 0; q < R; q++)
        mbar_wait(b.xready + 8 * ((jx + q) % XS), (uint32_t)((jx + q) / XS) & 1);
      mbar_wait(b.dfull + 8 * (i % DS), (uint32_t)(i / DS) & 1);
      const uint32_t ds = dslot(sbase, i);
      uint32_t a[2][4];
#pragma unroll
      for (int ks = 0; ks < TILE_W / 16; ks++) {
        /* k-step ks: the tile's row 16 ks / TW, from its column 16 ks % TW */
        const uint32_t xs = xslot(sbase, jx + 16 * ks / TW) + (uint32_t)(16 * ks % TW) * 128u;
        ldmatrix_x4_trans(ds + swz((uint32_t)(16 * ks) + pix, chunk), a[ks & 1]);
        wgmma_fence();
#pragma unroll
        for (int kx = 0; kx < 3; kx++)
          wgmma_rs<1>(acc[kx], a[ks & 1], desc_sw128(xs + (uint32_t)kx * 128u), 1);
        wgmma_commit();
        wgmma_wait<1>();
      }
      wgmma_wait<0>(); /* the strips' lines are read */
#pragma unroll
      for (int kx = 0; kx < 3; kx++) acc_fence(acc[kx]);
      __syncwarp();
      if (ti == 0) {
        mbar_arrive(b.dempty + 8 * (i % DS));
        /* the tile's rows y0 - 1 .. y0 + R - 2: read by no later tile */
#pragma unroll
        for (int q = 0; q < R; q++) mbar_arrive(b.xempty + 8 * ((j + R * k + q) % XS));
      }
    }
    /* the run's last two x strips: freed once loaded (their slots' previous uses are over),
     * which the last one's readiness implies */
    if (ti == 0) {
      const int jl = j + R * r.len + 1;
      mbar_wait(b.xready + 8 * (jl % XS), (uint32_t)(jl / XS) & 1);
      mbar_arrive(b.xempty + 8 * ((jl - 1) % XS));
      mbar_arrive(b.xempty + 8 * (jl % XS));
    }
    __syncwarp();
    j += R * r.len + 2;
    t += r.len;
  }
  /* accumulator v = 4 jj + 2 h + e: output channel c_out + 16 wi + g + 8 h, input channel
   * c_in + 8 jj + 2 t4 + e */
  const size_t row = (size_t)9 * p.cin;
  float *part = p.partial + (size_t)blk.split * p.cout * row + blk.c_in;
#pragma unroll
  for (int kx = 0; kx < 3; kx++)
#pragma unroll
    for (int jj = 0; jj < 8; jj++)
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int co = blk.c_out + 16 * wi + g + 8 * h, ci = 8 * jj + 2 * t4, tap = 3 * ky + kx;
        float2 v = make_float2(acc[kx][4 * jj + 2 * h], acc[kx][4 * jj + 2 * h + 1]);
        *reinterpret_cast<float2 *>(part + (size_t)co * row + (size_t)tap * p.cin + ci) = v;
      }
}

template <bool PRO, int R>
__global__ void __launch_bounds__(THREADS, 1)
    conv_wide_wgrad_kernel(const __grid_constant__ CUtensorMap xmap,
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
      if (lane == 0) wide_loader<R>(p, &xmap, &dymap, sbase);
    } else {
      wide_prologue<PRO, R>(p, sbase, warp - 1, lane);
    }
  } else {
    regs_inc<CONSUMER_REGS>();
    wide_consumer<R>(p, sbase, (warp - 4) >> 2, threadIdx.x & 127);
  }
}

typedef void (*wkernel_fn)(CUtensorMap, CUtensorMap, wparams);

/* The kernel for a prologue or none and tiles of `rows` rows (1, 2 or 4). */
wkernel_fn wpick(bool pro, int rows)
{
  if (rows == 4) return pro ? conv_wide_wgrad_kernel<true, 4> : conv_wide_wgrad_kernel<false, 4>;
  if (rows == 2) return pro ? conv_wide_wgrad_kernel<true, 2> : conv_wide_wgrad_kernel<false, 2>;
  return pro ? conv_wide_wgrad_kernel<true, 1> : conv_wide_wgrad_kernel<false, 1>;
}

bool covered(int cin, int cout)
{
  return cin >= CH && cout >= CH && cin <= MAX_CH && cout <= MAX_CH && cin % CH == 0 &&
         cout % CH == 0;
}

/* The split-K plan (the head comment's rule) for a batch of n h x w, cin -> cout on `sms`
 * multiprocessors. */
struct wplan_t {
  int ntiles, per_split, splits, otiles;
};

wplan_t wplan(int n, int h, int w, int cin, int cout, int sms)
{
  wplan_t r;
  const sm90_wtile_t g = sm90_wtile_geometry(w);
  const long long tiles =
      (long long)n * sm90_wtile_per_strip(&g, h) * sm90_wtile_strips(&g, w);
  r.ntiles = (int)tiles;
  r.otiles = (cin / CH) * (cout / CH);
  long long s = r.otiles < sms ? sms / r.otiles : 1;
  const long long by_tiles = tiles / MIN_TILES; /* so that a split of several has >= 8 */
  long long by_ws = (long long)(WS_CAP / ((size_t)36 * cin * cout));
  if (by_ws < 1) by_ws = 1;
  if (s > by_tiles) s = by_tiles;
  if (s > by_ws) s = by_ws;
  if (s < 1) s = 1;
  r.per_split = tiles > 0 ? (int)((tiles + s - 1) / s) : 1;
  r.splits = tiles > 0 ? (int)((tiles + r.per_split - 1) / r.per_split) : 1;
  return r;
}

} // namespace

int conv_wide_wgrad_plan(int device, int n, int h, int w, int cin, int cout, int *splits,
                         int *tiles_per_split)
{
  const int sms = sm_count(device);
  if (sms < 1 || n < 0 || h < 1 || w < 1 || !covered(cin, cout) ||
      (n > 0 && (size_t)n * h * w > (1u << 30)))
    return -1;
  const wplan_t pl = wplan(n, h, w, cin, cout, sms);
  *splits = pl.splits;
  *tiles_per_split = pl.per_split;
  return 0;
}

int conv_wide_wgrad_check(int device, char *err, size_t errlen)
{
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return fail(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
  if (prop.sharedMemPerBlockOptin < (size_t)SMEM_BYTES)
    return fail(err, errlen, "CUDA device %d offers %zu bytes of shared memory per block; the "
                "wide wgrad needs %d", device, prop.sharedMemPerBlockOptin, SMEM_BYTES);
  cudaFuncAttributes fa;
  for (int k = 0; k < 6; k++) {
    if ((e = cudaFuncGetAttributes(&fa, (const void *)wpick(k & 1, 1 << (k >> 1)))) !=
        cudaSuccess) {
      cudaGetLastError();
      return fail(err, errlen, "the sm_90a wide wgrad does not load on device %d: %s", device,
                  cudaGetErrorString(e));
    }
    if (regs_fit(fa.numRegs, THREADS, HANDOVER_REGS, "sm_90a wide wgrad", err, errlen)) return -1;
  }
  return 0;
}

int conv_wide_wgrad(const conv_sm90_wgrad_t *a, char *err, size_t errlen)
{
  if (!covered(a->cin, a->cout))
    return fail(err, errlen, "the sm_90 wgrad covers 64 -> 64 channels and cin, cout multiples "
                "of 64 up to %d, not %d -> %d", MAX_CH, a->cin, a->cout);
  if (a->n < 0 || a->h < 1 || a->w < 1 || (a->n > 0 && (size_t)a->n * a->h * a->w > (1u << 30)))
    return fail(err, errlen, "the sm_90 wgrad: batch %d of %dx%d is invalid", a->n, a->h, a->w);
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
  if (!a->ws || !aligned16(a->ws))
    return fail(err, errlen, "the sm_90 wgrad needs conv_sm90_wgrad_ws_bytes_shape() of "
                "workspace on a 16-byte boundary");
  cudaStream_t st = (cudaStream_t)a->stream;
  const wplan_t pl = wplan(a->n, a->h, a->w, a->cin, a->cout, sms);
  const size_t count = (size_t)9 * a->cin * a->cout;
  if (pl.ntiles == 0) { /* no pixels: one partial of zeros, dW zero */
    cudaError_t e = cudaMemsetAsync(a->ws, 0, count * sizeof(float), st);
    if (e == cudaSuccess) e = cudaMemsetAsync(a->dweight, 0, count * sizeof(float), st);
    return e == cudaSuccess ? 0 : fail(err, errlen, "clearing dW: %s", cudaGetErrorString(e));
  }
  if (!encode_tiled())
    return fail(err, errlen, "the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
  const sm90_wtile_t g = sm90_wtile_geometry(a->w);
  CUtensorMap xm, dym;
  if (map_image_c(&xm, a->x, a->n, a->h, a->w, a->cin, g.tw + 2, 1, err, errlen) ||
      map_image_c(&dym, a->dy, a->n, a->h, a->w, a->cout, g.tw, g.rows, err, errlen))
    return -1;
  wparams p;
  p.n = a->n;
  p.h = a->h;
  p.w = a->w;
  p.tiles_x = sm90_wtile_strips(&g, a->w);
  p.th = sm90_wtile_per_strip(&g, a->h);
  p.ntiles = pl.ntiles;
  p.per_split = pl.per_split;
  p.cin = a->cin;
  p.cout = a->cout;
  p.kcn = a->cin / CH;
  p.otiles = pl.otiles;
  p.scale = a->scale;
  p.shift = a->shift;
  /* one split: its partial is dW, written there directly (no copy through the workspace) */
  p.partial = pl.splits == 1 ? a->dweight : (float *)a->ws;
  const wkernel_fn k = wpick(a->scale != NULL, g.rows);
  cudaError_t e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       SMEM_BYTES);
  if (e != cudaSuccess)
    return fail(err, errlen, "the sm_90 wide wgrad's shared memory (%d bytes): %s", SMEM_BYTES,
                cudaGetErrorString(e));
  k<<<pl.splits * pl.otiles, THREADS, SMEM_BYTES, st>>>(xm, dym, p);
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 wide wgrad: %s", cudaGetErrorString(e));
  if (pl.splits == 1) return 0;
  wgrad_reduce(p.partial, pl.splits, count, a->dweight, st); /* in split order */
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 wide wgrad's reduction: %s",
                cudaGetErrorString(e));
  return 0;
}

} // namespace sm90
