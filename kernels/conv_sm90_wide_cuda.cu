/* conv_sm90_wide_cuda.cu — the fused 3x3 convolution of kernels/conv_sm90.h on Hopper for the
 * wider layers: cin and cout any multiples of 64 up to 1024 (64 -> 64 stays with
 * kernels/conv_sm90_cuda.cu, whose file comment explains the pieces this one shares: the halo,
 * the ldmatrix A fragments, the swizzle, stmatrix + TMA store, the f64 folding). An implicit
 * GEMM (M = pixels, N = output channels, K = 9 taps x cin) on wgmma, fed by the tensor copy
 * engine (TMA), warp-specialised, persistent; bf16 in and out, f32 accumulation, the BatchNorm
 * apply + ReLU prologue and the BatchNorm statistics epilogue optional. dgrad of a wide shape
 * is this kernel on dy with the flipped, transposed weights (wt[ci][8 - t][co] = w[co][t][ci],
 * a small kernel writes them into the workspace), no prologue, and optionally the previous
 * layer's ReLU mask and BatchNorm backward sums in its epilogue (below).
 *
 * Work items. A pixel tile is 2 image rows x 64 pixels (M = 128) of one image, as in the
 * 64 -> 64 kernel; on an image narrower than 64 whose width w is a power of two (2 .. 32: the
 * U-Net's deep levels) it is 128 / w rows of the whole width instead, 64 / w rows for each
 * consumer warpgroup, so no part of it lies past the image's right edge (rows of 64 would leave
 * half of each tile idle at w = 32, three quarters at 16). The geometry and its arithmetic:
 * kernels/conv_sm90_tile.h; an N tile is BN = 128 output channels where cout is a multiple of 128, else
 * 64 (a template parameter). Item i is N tile i / P, pixel tile i % P (P pixel tiles, raster
 * order: x tiles, then rows, then images); block b takes items b, b + G, ... (G blocks, one per
 * multiprocessor). N-tile-major order keeps a block on one N tile for long runs (its statistics
 * sums belong to one set of channels; see the epilogue), and the blocks running at one time
 * read the same weights from L2.
 *
 * K loop. K = KC chunks of 64 input channels (KC = cin / 64) x 9 taps x 4 k-steps of 16. One
 * TMA box brings the halo of a chunk: 4 rows x 66 pixels x 64 channels at (channel 64 kc,
 * x0 - 1, y0 - 1, n), 33,792 bytes, zero-filled outside the image (the padding); its nine taps
 * are shifted views of it. Narrow tiles: 2 rw + 2 rows x tw + 2 pixels (hw), 180 to 264 lines,
 * within the same stage. The weights do not fit resident beside the halo for cin, cout >= 128
 * (9 cin cout 2 bytes: 295 KB for 128 -> 128), so they stream as slices: slice (kc, tap) is
 * the N tile's BN output channels x the chunk's 64 input channels of that tap, BN lines of
 * 128 bytes (16 KB for BN = 128), one TMA 2-D box of the weights seen as [cout][9 cin] at
 * (tap cin + 64 kc, BN nt). Per item: for kc, for tap: wait for the slice, four k-steps.
 *
 * Roles (384 threads, one block per multiprocessor):
 *   warp 0 (one thread)  loads: the weight slices into a ring of WST slots (wfull / wempty),
 *                        the halo chunks into a ring of HST stages (full / hempty). The halo of
 *                        the next chunk is asked for after slice (kc, 3) of the current one, so
 *                        it has five to nine slices' time to land and be normalised, and the
 *                        wait for its stage (freed when the consumers finish the previous
 *                        chunk) never holds up slices the consumers are about to need.
 *   warps 1-3            the prologue (with scale/shift): BatchNorm apply + ReLU on each halo
 *                        chunk in place (sm90_conv.cuh), with the chunk's coefficients
 *                        (scale[64 kc + c]), then ready[s]. Without a prologue (and in
 *                        dgrad) they idle and the consumers wait on full[s] directly.
 *                        setmaxnreg 64 for this warpgroup, 216 for the consumers.
 *   warps 4-7, 8-11      two consumer warpgroups, one image row of the item each: wgmma
 *                        m64nBNk16, A (the row's 64 pixels) from registers by ldmatrix from the
 *                        halo, B the slice through a descriptor. Both read the same slice and
 *                        the same halo stage; one thread of each arrives on the slice's
 *                        wempty (count 2) once the wgmmas that read it have completed (the
 *                        first k-step of the next slice has waited with wgmma.wait_group 1,
 *                        or the item's end with 0), and on hempty (count 2) the same way at a
 *                        chunk's end.
 * Why two rows in two warpgroups (and not alternate items as the 64 -> 64 kernel does): a
 * warpgroup holding 2 rows x 128 channels needs 128 accumulators, which with the statistics
 * sums and the A fragments does not fit 216 registers; with one row each, both read every
 * weight slice once from shared memory for 128 pixels. What this costs: the two warpgroups
 * reach the epilogue together, so the tensor cores idle during it (the loader keeps
 * prefetching the next item's halo and slices meanwhile); with K = 576 KC per item, that is
 * a smaller share as cin grows.
 *
 * Weight traffic. Each weight slice is used for 128 pixels: 128 FLOP per byte read from L2,
 * about 6 TB/s of L2 reads summed over the GPU at the tensor cores' 790 TFLOP/s, near what L2
 * delivers. If the measurement shows the slices' L2 reads as the limit, the next step is a
 * cluster of 2 blocks along the pixel tiles sharing each slice by TMA multicast (or M = 256
 * per block).
 *
 * Descriptors and fragments as in the 64 -> 64 kernel: B (weights, K-major, 128-byte swizzle,
 * stride byte offset 1024, leading byte offset unused) starts on a 1024-aligned slot, + 32
 * bytes per k-step; for BN = 128 the wgmma reads 128 lines, 16 groups of 8 at 1024-byte steps.
 * A for k-step (ky, kx, j) of warpgroup wg's pixels: warp wi's ldmatrix.x4, lane l for pixel
 * p = 16 wi + (l & 7) + 8 ((l >> 3) & 1) of the warpgroup's 64 at halo line
 * (wg rw + p / tw + ky) hw + p % tw + kx (rows of 64: (wg + ky) 66 + p + kx), chunk
 * 2 j + (l >> 4), swizzle by code (swz): ldmatrix takes each row's address from its lane, so
 * any tile geometry reads the same way. A fragments are triple-buffered across k-steps (36 per chunk, a multiple of 3,
 * so buffer ks % 3 is static in the unrolled chunk loop); the first fragment of the next chunk
 * loads at the current chunk's last step, after the next halo stage is ready.
 *
 * Shared memory (from a 1024-aligned base; every buffer 1024-aligned, 128-byte lines in the
 * copy engine's 128-byte swizzle):
 *                      BN = 128                BN = 64
 *   halo ring          2 x 34,816 =  69,632    3 x 34,816 = 104,448
 *   weight ring        6 x 16,384 =  98,304   12 x  8,192 =  98,304
 *   output staging     2 x 16,384 =  32,768    2 x  8,192 =  16,384   (one per warpgroup)
 *   statistics (f64)   2 x 4 x 2 x 128 x 8 = 16,384     8,192   ([warpgroup][warp][Σ, Σ²][BN])
 *   barriers           20 x 8                  35 x 8
 *   total + 1 KB slack 218,272                 228,632   (<= 227 KB = 232,448: static_assert)
 * BN = 128 keeps 2 halo stages: a chunk feeds 9 slices (about 4,600 tensor cycles), ample to
 * load and normalise the next; the weights, the larger stream, get the depth.
 * The output staging is its own buffer (not a halo stage as in the 64 -> 64 kernel), so a halo
 * stage goes back to the loader as soon as the k-loop has read it.
 *
 * Epilogue (each warpgroup, its row): wait for the item's wgmmas; thread 0 makes sure the
 * previous item's store has read the staging (cp.async.bulk.wait_group.read), named barrier;
 * each accumulator rounded to bf16, the rounded values (and squares) added to per-thread f32
 * sums of its BN / 4 channels (pixels outside the image masked), stmatrix into the staging
 * (BN / 64 boxes of 64 pixels x 64 channels, 8 KB each: line = pixel, chunk = 16-byte group of
 * the box's channels), fence.proxy.async, named barrier, thread 0 issues the BN / 64 TMA
 * tensor stores (rw rows x tw pixels x 64 channels each, line = pixel p as above; the engine
 * clips at the image's edges).
 *
 * Statistics. Each thread's f32 sums get 2 terms a channel per item (pixels g and g + 8); every
 * 16 items, when the block's N tile changes and at the end they are folded in f64: a fixed
 * butterfly over the 8 lanes sharing channels, then added to the warp's own row of the f64
 * area. When the N tile changes and at the end, the 256 consumer threads (named barrier) sum
 * the 8 rows in a fixed order into the block's partial for those BN channels (workspace,
 * [block][Σ 0..cout, Σ² 0..cout], zeroed by the block at its start, each N tile written once
 * since a block's items go up in N tile) and clear the rows. A second kernel sums the blocks'
 * partials in a fixed order. Same grid, same items, same order: bitwise reruns.
 *
 * dgrad's mask and sums (the 64 -> 64 kernel's, per row): when an item starts, thread 0 of each
 * consumer warpgroup waits until the previous item's stores have read its staging, then loads
 * the forward input x at the warpgroup's output pixels into it (BN / 64 boxes, x_full[wg]). In the
 * epilogue each warp reads its own 16 x 16 blocks of x with ldmatrix in the stmatrix geometry
 * (x in the accumulators' layout), forms g = bf16(acc) zeroed where x * scale + shift <= 0 and
 * the f32 sums of g and g x, and writes g with stmatrix over the same addresses (the warp's
 * ldmatrix has returned before its stmatrix issues; the warps' blocks are disjoint). The sums
 * are folded and flushed as the statistics, and a second kernel finishes them as
 * (Σ g x - mean Σ g) invstd. No shared memory beyond the forward's.
 *
 * Synchronisation (all mbarriers): full[s] (1 arrival + bytes), ready[s] (96 prologue threads,
 * each after fence.proxy.async), hempty[s] (2: one thread per consumer warpgroup), wfull[s]
 * (1 + bytes), wempty[s] (2), x_full[wg] (1 + bytes: its i-th item waits for parity i & 1).
 * Every role walks the same sequence of chunks and slices: the n-th use of a ring's slot
 * s = n % ST waits for phase (n / ST) & 1; the loader waits for the (n / ST - 1)-th release
 * before reusing a slot. dev/conv_sm90_wide_protocol.py models this protocol (random
 * interleavings of the roles and the copy engine): change it with the kernel.
 *
 * Built for sm_90a only (kernels/local.mk); the host side checks for compute capability 9.0
 * (conv_sm90_check). */
#include "config.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/conv_sm90.h"
#include "kernels/conv_sm90_tile.h"
#include "kernels/conv_sm90_wide.h"
#include "kernels/sm90_conv.cuh"
#include "kernels/sm90_host.h"
#include "kernels/sm90_ptx.cuh"
#include "kernels/sm90_regs.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv_sm90_wide_cuda.cu needs sm_90a (wgmma): compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace sm90 {
namespace {

constexpr int KCH = 64;                   /* input channels of a chunk */
constexpr int TILE_W = 64, TILE_H = 2;    /* output pixels of a pixel tile (rows of 64) */
constexpr int HALO_W = TILE_W + 2, HALO_H = TILE_H + 2;
constexpr int HALO_LINES = HALO_W * HALO_H;      /* 264: the largest halo of any geometry */
static_assert(HALO_LINES == SM90_TILE_LINES, "kernels/conv_sm90_tile.h's largest halo");
constexpr int LINE = 128;                        /* bytes: 64 bf16 channels */
constexpr int HALO_BYTES = HALO_LINES * LINE;    /* 33,792: one TMA box */
constexpr int STAGE_BYTES = (HALO_BYTES + 1023) / 1024 * 1024;
constexpr int BOX_BYTES = TILE_W * LINE;         /* 8 KB: 64 pixels x 64 channels of a row */
constexpr int THREADS = 384;
constexpr int PRO_THREADS = 96;                  /* warps 1-3 */
constexpr int PRODUCER_REGS = 64, CONSUMER_REGS = 216; /* the prologue keeps 4 lines in flight */
constexpr int HANDOVER_REGS = 128 * PRODUCER_REGS + 256 * CONSUMER_REGS;
static_assert(HANDOVER_REGS <= SM90_BLOCK_REGS(THREADS), "the block's registers from its launch");
constexpr int FOLD_ITEMS = 16;                   /* f32 sums of at most 16 items x 2 pixels */
constexpr int HALO_AT = 3;                       /* the next halo is asked for after this tap */
constexpr int MAX_CH = 1024;

/* The shared-memory layout for N tiles of BN channels (see the file's comment). */
template <int BN> struct lay {
  static constexpr int hst = BN == 128 ? 2 : 3;          /* halo stages */
  static constexpr int wst = BN == 128 ? 6 : 12;         /* weight slots */
  static constexpr int slice = BN * LINE;                /* one (kc, tap) weight slice */
  static constexpr int out_bytes = BN / 64 * BOX_BYTES;  /* a warpgroup's output row */
  static constexpr int off_halo = 0;
  static constexpr int off_w = off_halo + hst * STAGE_BYTES;
  static constexpr int off_out = off_w + wst * slice;
  static constexpr int off_stats = off_out + 2 * out_bytes;
  static constexpr int stats_bytes = 2 * 4 * 2 * BN * 8;
  static constexpr int off_bar = off_stats + stats_bytes;
  /* full[hst], ready[hst], hempty[hst], wfull[wst], wempty[wst], x_full[2] (dgrad) */
  static constexpr int bar_full = 0, bar_ready = 8 * hst, bar_hempty = 16 * hst,
                       bar_wfull = 24 * hst, bar_wempty = 24 * hst + 8 * wst,
                       bar_xfull = 24 * hst + 16 * wst;
  static constexpr int nbar = 3 * hst + 2 * wst + 2;
  static constexpr int smem = off_bar + nbar * 8 + 1024; /* + slack to align the base */
  static_assert(off_w % 1024 == 0 && off_out % 1024 == 0 && off_stats % 1024 == 0 &&
                    slice % 1024 == 0 && out_bytes % 1024 == 0,
                "buffers on 1024-byte boundaries");
  static_assert(smem <= 227 * 1024, "shared memory per block on sm_90");
  static_assert(hst >= 2 && wst >= 2, "the rings' depth (the loader's order assumes 2)");
};
constexpr int SMEM_MAX = lay<64>::smem > lay<128>::smem ? lay<64>::smem : lay<128>::smem;

struct params {
  int n, h, w, tiles_x, tiles_y, npix, nitems, kc, cin, cout;
  sm90_tile_t g; /* the pixel tile (kernels/conv_sm90_tile.h) */
  const float *scale, *shift;
  double *partial; /* [gridDim.x][2 cout] */
};

struct tile_t {
  int n, y0, x0;
};

__device__ __forceinline__ tile_t tile_of(const params &p, int t)
{
  tile_t r;
  r.x0 = (t % p.tiles_x) * p.g.tw;
  t /= p.tiles_x;
  r.y0 = (t % p.tiles_y) * 2 * p.g.rw;
  r.n = t / p.tiles_y;
  return r;
}

/* ---- the roles ---- */

template <int BN>
__device__ __forceinline__ void run_loader(const params &p, const CUtensorMap *xmap,
                                           const CUtensorMap *wmap, uint32_t sbase)
{
  using L = lay<BN>;
  const uint32_t bar = sbase + L::off_bar;
  asm volatile("prefetch.tensormap [%0];" ::"l"(xmap) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(wmap) : "memory");
  /* the halo stream: chunk (hitem, hkc), its hn-th load */
  int hitem = blockIdx.x, hkc = 0, hn = 0;
  auto next_halo = [&]() {
    if (hitem >= p.nitems) return;
    const int s = hn % L::hst;
    if (hn >= L::hst) mbar_wait(bar + L::bar_hempty + 8 * s, (hn / L::hst - 1) & 1);
    const int nt = hitem / p.npix;
    const tile_t tl = tile_of(p, hitem - nt * p.npix);
    mbar_expect_tx(bar + L::bar_full + 8 * s, p.g.halo_lines * LINE);
    tma_load_4d(sbase + L::off_halo + s * STAGE_BYTES, xmap, KCH * hkc, tl.x0 - 1, tl.y0 - 1,
                tl.n, bar + L::bar_full + 8 * s);
    hn++;
    if (++hkc == p.kc) {
      hkc = 0;
      hitem += gridDim.x;
    }
  };
  next_halo();
  int wn = 0;
  for (int item = blockIdx.x; item < p.nitems; item += gridDim.x) {
    const int co0 = (item / p.npix) * BN;
    for (int kc = 0; kc < p.kc; kc++)
      for (int tap = 0; tap < 9; tap++) {
        const int s = wn % L::wst;
        if (wn >= L::wst) mbar_wait(bar + L::bar_wempty + 8 * s, (wn / L::wst - 1) & 1);
        mbar_expect_tx(bar + L::bar_wfull + 8 * s, L::slice);
        tma_load_2d(sbase + L::off_w + s * L::slice, wmap, tap * p.cin + KCH * kc, co0,
                    bar + L::bar_wfull + 8 * s);
        wn++;
        if (tap == HALO_AT) next_halo();
      }
  }
}

/* The prologue warps: a = bf16(max(0, x * scale + shift)) on each halo chunk's lines inside
 * the image; the thread owns 16-byte chunk lc = lane & 7 of the lines (lane >> 3) + 4 pw, +12,
 * with the chunk's coefficients of its 8 channels. */
template <int BN>
__device__ __forceinline__ void run_prologue(const params &p, uint32_t sbase, int pw, int lane)
{
  using L = lay<BN>;
  const uint32_t bar = sbase + L::off_bar;
  const int lc = lane & 7;
  int hn = 0;
  for (int item = blockIdx.x; item < p.nitems; item += gridDim.x) {
    const int nt = item / p.npix;
    const tile_t tl = tile_of(p, item - nt * p.npix);
    for (int kc = 0; kc < p.kc; kc++, hn++) {
      const int s = hn % L::hst;
      float sc[8], sh[8];
      bn_coef_load(p.scale + KCH * kc, p.shift + KCH * kc, lc, sc, sh);
      mbar_wait(bar + L::bar_full + 8 * s, (hn / L::hst) & 1);
      bn_relu_halo<4>(sbase + L::off_halo + s * STAGE_BYTES, p.g.halo_lines, p.g.hw, tl.y0 - 1,
                   tl.x0 - 1, p.h, p.w, 4 * pw + (lane >> 3), 12, lc, sc, sh);
      fence_proxy_async();
      mbar_arrive(bar + L::bar_ready + 8 * s);
    }
  }
}

/* The f32 sums of the thread's BN / 4 channels (8 (v >> 1) + 2 (lane & 3) + (v & 1) for sum v)
 * folded into its warp's f64 row [Σ][Σ²] of BN channels each, then cleared. */
template <int BN>
__device__ __forceinline__ void fold_stats(float (&s1)[BN / 4], float (&s2)[BN / 4],
                                           double *row, int lane)
{
  constexpr int V = BN / 4;
#pragma unroll
  for (int v = 0; v < 2 * V; v++) {
    double d = v < V ? (double)s1[v] : (double)s2[v - V];
    d += __shfl_xor_sync(0xffffffffu, d, 4);
    d += __shfl_xor_sync(0xffffffffu, d, 8);
    d += __shfl_xor_sync(0xffffffffu, d, 16);
    const int u = v % V, ch = 8 * (u >> 1) + 2 * (lane & 3) + (u & 1);
    if (lane < 4) row[(v / V) * BN + ch] += d;
  }
#pragma unroll
  for (int v = 0; v < V; v++) s1[v] = s2[v] = 0.f;
}

/* The 8 warps' f64 rows summed in warp order into the block's partial of N tile nt, the rows
 * cleared: the 256 consumer threads (ct), between two named barriers (id 3). */
template <int BN>
__device__ __forceinline__ void flush_stats(const params &p, double *area, int nt, int ct)
{
  named_bar(3, 256); /* every warp's fold is in */
  double *part = p.partial + (size_t)blockIdx.x * 2 * p.cout;
  for (int c = ct; c < 2 * BN; c += 256) {
    double v = 0;
#pragma unroll
    for (int r = 0; r < 8; r++) {
      v += area[r * 2 * BN + c];
      area[r * 2 * BN + c] = 0;
    }
    part[(c / BN) * p.cout + nt * BN + c % BN] = v;
  }
  named_bar(3, 256); /* the rows are clear before the next fold */
}

/* The A fragment of k-step ks (tap ks / 4, channels 16 (ks % 4) ..) of the warpgroup's pixels:
 * line0 = the halo line of the lane's pixel at tap (0, 0), hw the halo's width (see the file's
 * comment). */
__device__ __forceinline__ void load_a(uint32_t stage, uint32_t line0, int hw, uint32_t khalf,
                                       int ks, uint32_t (&a)[4])
{
  const int tap = ks >> 2, j = ks & 3, ky = tap / 3, kx = tap % 3;
  /* the row offset formed at each use (not three per-lane bases held across the k-loop: the
   * statistics variants have no registers to spare) */
  uint32_t row;
  asm volatile("mul.lo.u32 %0, %1, %2;" : "=r"(row) : "r"(hw), "r"(ky));
  const uint32_t line = line0 + row + (uint32_t)kx;
  ldmatrix_x4(stage + swz(line, 2 * j + khalf), a);
}

/* A consumer warpgroup (wg: the item's image row; ti: its thread 0..127). Forward (DG false):
 * PRO is the prologue's (done by the prologue warps), STATS sums y and y². dgrad (DG true):
 * the input is dy and the weights the flipped, transposed ones; PRO is the ReLU mask and STATS
 * sums g and g x, both reading the forward's input x at the output row, which thread 0 loads
 * into the warpgroup's staging when the item starts (the epilogue turns it into g in place). */
template <int BN, bool PRO, bool STATS, bool DG>
__device__ __forceinline__ void run_consumer(const params &p, const CUtensorMap *ymap,
                                             const CUtensorMap *xtmap, uint32_t sbase,
                                             double *stats_area, int wg, int ti)
{
  using L = lay<BN>;
  constexpr int V = BN / 4;
  constexpr bool XT = DG && (PRO || STATS); /* the x row is needed */
  const uint32_t bar = sbase + L::off_bar;
  const uint32_t hwait = bar + (PRO && !DG ? L::bar_ready : L::bar_full);
  const uint32_t xbar = bar + L::bar_xfull + 8 * wg;
  const uint32_t out = sbase + L::off_out + wg * L::out_bytes;
  const int wi = ti >> 5, lane = ti & 31, g = lane >> 2;
  double *row = stats_area + (wg * 4 + wi) * 2 * BN;
  float s1[V], s2[V];
#pragma unroll
  for (int v = 0; v < V; v++) s1[v] = s2[v] = 0.f;

  /* ldmatrix / stmatrix lane geometry (see the 64 -> 64 kernel) */
  const int q = lane >> 3;
  const uint32_t pix = 16 * wi + (lane & 7) + 8 * (q & 1), khalf = q >> 1;
  /* the lane's pixel: row wg rw + pix / tw of the tile, column pix % tw */
  const uint32_t line0 = (uint32_t)sm90_tile_line0(&p.g, wg, (int)pix);
  const uint64_t bdesc0 = desc_sw128(sbase + L::off_w);

  float acc[BN / 2];
  int hn = 0, wn = 0, items_done = 0, cur_nt = -1, nit = 0;
  for (int item = blockIdx.x; item < p.nitems; item += gridDim.x, nit++) {
    const int nt = item / p.npix;
    const tile_t tl = tile_of(p, item - nt * p.npix);
    if (XT && ti == 0) { /* x at the output row, into the staging once the last store read it */
      tma_store_wait_read();
      mbar_expect_tx(xbar, L::out_bytes);
      for (int cb = 0; cb < BN / 64; cb++)
        tma_load_4d(out + cb * BOX_BYTES, xtmap, nt * BN + 64 * cb, tl.x0, tl.y0 + wg * p.g.rw, tl.n,
                    xbar);
    }
    __syncwarp();
    if (STATS && nt != cur_nt) {
      if (cur_nt >= 0) {
        fold_stats<BN>(s1, s2, row, lane);
        flush_stats<BN>(p, stats_area, cur_nt, ti + 128 * wg);
        items_done = 0;
      }
      cur_nt = nt;
    }

    int hs = hn % L::hst;
    mbar_wait(hwait + 8 * hs, (hn / L::hst) & 1);
    uint32_t stage = sbase + L::off_halo + hs * STAGE_BYTES;
    uint32_t a[3][4];
    load_a(stage, line0, p.g.hw, khalf, 0, a[0]);
    int prev_ws = 0, prev_hs = 0;
    for (int kc = 0; kc < p.kc; kc++) {
      int next_hs = hs;
      uint32_t next_stage = stage;
#pragma unroll
      for (int ks = 0; ks < 36; ks++) {
        const int j = ks & 3;
        const int ws = wn % L::wst;
        if (j == 0) mbar_wait(bar + L::bar_wfull + 8 * ws, (wn / L::wst) & 1);
        wgmma_fence();
        wgmma_rs(acc, a[ks % 3], bdesc0 + (uint64_t)((ws * L::slice + 32 * j) >> 4),
                 (kc | ks) != 0);
        wgmma_commit();
        if (ks + 1 < 36) {
          load_a(stage, line0, p.g.hw, khalf, ks + 1, a[(ks + 1) % 3]);
        } else if (kc + 1 < p.kc) { /* the next chunk's first fragment, once it is ready */
          next_hs = (hn + 1) % L::hst;
          next_stage = sbase + L::off_halo + next_hs * STAGE_BYTES;
          mbar_wait(hwait + 8 * next_hs, ((hn + 1) / L::hst) & 1);
          load_a(next_stage, line0, p.g.hw, khalf, 0, a[0]);
        }
        wgmma_wait<1>();
        if (j == 0 && (kc | ks) != 0) { /* the previous slice's wgmmas are complete */
          if (ti == 0) {
            mbar_arrive(bar + L::bar_wempty + 8 * prev_ws);
            if (ks == 0) mbar_arrive(bar + L::bar_hempty + 8 * prev_hs);
          }
          __syncwarp();
        }
        if (j == 3) {
          prev_ws = ws;
          wn++;
        }
      }
      prev_hs = hs;
      hn++;
      hs = next_hs;
      stage = next_stage;
    }
    wgmma_wait<0>();
    acc_fence(acc);
    if (ti == 0) {
      mbar_arrive(bar + L::bar_wempty + 8 * prev_ws);
      mbar_arrive(bar + L::bar_hempty + 8 * prev_hs);
      if (!XT) tma_store_wait_read(); /* the previous item's stores have read the staging */
    }
    named_bar(1 + wg, 128);
    if (XT) mbar_wait(xbar, nit & 1);

    /* the thread's two pixels (accumulator rows g and g + 8 of its warp) inside the image */
    const bool in_h[2] = {sm90_tile_pixel_in(&p.g, tl.y0, tl.x0, p.h, p.w, wg, 16 * wi + g) != 0,
                          sm90_tile_pixel_in(&p.g, tl.y0, tl.x0, p.h, p.w, wg, 16 * wi + g + 8) !=
                              0};
#pragma unroll
    for (int jj = 0; jj < BN / 16; jj++) {
      const uint32_t addr = out + (jj >> 2) * BOX_BYTES + swz(pix, 2 * (jj & 3) + khalf);
      uint32_t r[4], xr[4];
      if (XT) ldmatrix_x4(addr, xr); /* the warp's own 16 x 16 block, rewritten below */
#pragma unroll
      for (int m = 0; m < 4; m++) {
        const int j = 2 * jj + (m >> 1), h = m & 1;
        r[m] = pack_bf16(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        if (DG) {
          if (XT) {
            const bool in = in_h[h];
            const int c = nt * BN + 8 * j + 2 * (lane & 3); /* channels c, c + 1 */
            dgrad_pair<PRO, STATS>(r[m], xr[m], PRO ? __ldg(p.scale + c) : 0.f,
                                   PRO ? __ldg(p.shift + c) : 0.f,
                                   PRO ? __ldg(p.scale + c + 1) : 0.f,
                                   PRO ? __ldg(p.shift + c + 1) : 0.f, in, in, s1[2 * j],
                                   s2[2 * j], s1[2 * j + 1], s2[2 * j + 1]);
          }
        } else if (STATS) {
          const bool in = in_h[h];
          const float f0 = in ? bf16_lo(r[m]) : 0.f, f1 = in ? bf16_hi(r[m]) : 0.f;
          s1[2 * j] += f0;
          s2[2 * j] = fmaf(f0, f0, s2[2 * j]);
          s1[2 * j + 1] += f1;
          s2[2 * j + 1] = fmaf(f1, f1, s2[2 * j + 1]);
        }
      }
      stmatrix_x4(addr, r);
    }
    fence_proxy_async();
    named_bar(1 + wg, 128); /* the row is in the staging */
    if (ti == 0)
      for (int cb = 0; cb < BN / 64; cb++)
        tma_store_4d(ymap, out + cb * BOX_BYTES, nt * BN + 64 * cb, tl.x0, tl.y0 + wg * p.g.rw, tl.n);
    __syncwarp();
    if (STATS && ++items_done == FOLD_ITEMS) {
      fold_stats<BN>(s1, s2, row, lane);
      items_done = 0;
    }
  }
  if (STATS && cur_nt >= 0) {
    fold_stats<BN>(s1, s2, row, lane);
    flush_stats<BN>(p, stats_area, cur_nt, ti + 128 * wg);
  }
  if (ti == 0) tma_store_wait_all();
}

/* x: the input (cin channels), y: the output (cout), w: the weights as [cout][9 cin]; dgrad:
 * x is dy, y is g, w the flipped, transposed weights and xt the forward's input x (cout
 * channels here), read at the output row. */
template <int BN, bool PRO, bool STATS, bool DG>
__global__ void __launch_bounds__(THREADS, 1)
    conv_wide_kernel(const __grid_constant__ CUtensorMap xmap,
                     const __grid_constant__ CUtensorMap ymap,
                     const __grid_constant__ CUtensorMap wmap,
                     const __grid_constant__ CUtensorMap xtmap, const params p)
{
  using L = lay<BN>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  double *stats_area = reinterpret_cast<double *>(smem_raw + (sbase - raw) + L::off_stats);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) {
    const uint32_t bar = sbase + L::off_bar;
    for (int s = 0; s < L::hst; s++) {
      mbar_init(bar + L::bar_full + 8 * s, 1);
      mbar_init(bar + L::bar_ready + 8 * s, PRO_THREADS);
      mbar_init(bar + L::bar_hempty + 8 * s, 2);
    }
    for (int s = 0; s < L::wst; s++) {
      mbar_init(bar + L::bar_wfull + 8 * s, 1);
      mbar_init(bar + L::bar_wempty + 8 * s, 2);
    }
    mbar_init(bar + L::bar_xfull, 1);
    mbar_init(bar + L::bar_xfull + 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (STATS) {
    for (int i = threadIdx.x; i < L::stats_bytes / 8; i += THREADS) stats_area[i] = 0;
    double *part = p.partial + (size_t)blockIdx.x * 2 * p.cout;
    for (int i = threadIdx.x; i < 2 * p.cout; i += THREADS) part[i] = 0;
  }
  __syncthreads();

  if (warp < 4) {
    regs_dec<PRODUCER_REGS>();
    if (warp == 0) {
      if (lane == 0) run_loader<BN>(p, &xmap, &wmap, sbase);
    } else if (PRO && !DG) {
      run_prologue<BN>(p, sbase, warp - 1, lane);
    }
  } else {
    regs_inc<CONSUMER_REGS>();
    run_consumer<BN, PRO, STATS, DG>(p, &ymap, &xtmap, sbase, stats_area, (warp - 4) >> 2,
                                     threadIdx.x - 128 * (warp >> 2));
  }
}

/* stats[0..2 cout) = the blocks' partials summed (sum_partials_f64's fixed order); stats[2 cout]
 * = the count. No thread leaves before the sum's shuffles. */
__global__ void __launch_bounds__(SM90_FINAL_THREADS)
    conv_wide_stats_kernel(const double *partial, int blocks, int cout, double count,
                           double *stats)
{
  const int t = blockIdx.x * blockDim.x + threadIdx.x, c = t / SM90_FINAL_LANES;
  const double v = sum_partials_f64(partial, blocks, 2 * (size_t)cout, c, t % SM90_FINAL_LANES,
                                    c < 2 * cout);
  if (t % SM90_FINAL_LANES == 0 && c < 2 * cout) stats[c] = v;
  if (t == 0) stats[2 * cout] = count;
}

/* dgrad's sums from the blocks' partials [Σ g, Σ g x] (C channels): sums[c] = Σ g and
 * sums[C + c] = Σ g (x - mean) invstd = (Σ g x - mean Σ g) invstd, saved = (mean, invstd). */
__global__ void __launch_bounds__(SM90_FINAL_THREADS)
    conv_wide_dgrad_sums_kernel(const double *partial, int blocks, int C, const double *saved,
                                double *sums)
{
  const int t = blockIdx.x * blockDim.x + threadIdx.x, c = t / SM90_FINAL_LANES;
  const int r = t % SM90_FINAL_LANES;
  const double g = sum_partials_f64(partial, blocks, 2 * (size_t)C, c, r, c < C);
  const double gx = sum_partials_f64(partial, blocks, 2 * (size_t)C, C + c, r, c < C);
  if (r == 0 && c < C) {
    sums[c] = g;
    sums[C + c] = (gx - saved[c] * g) * saved[C + c];
  }
}

/* ---- host ---- */

bool covered(int cin, int cout)
{
  return cin >= 64 && cout >= 64 && cin <= MAX_CH && cout <= MAX_CH && cin % 64 == 0 &&
         cout % 64 == 0 && !(cin == 64 && cout == 64);
}

/* Weights [cout][9 cin] as a 2-D map (k, cout), boxes of one slice: 64 k x bn cout. */
int map_weights(CUtensorMap *m, const void *base, int cin, int cout, int bn, char *err,
                size_t len)
{
  const cuuint64_t dim[2] = {(cuuint64_t)9 * cin, (cuuint64_t)cout};
  const cuuint64_t stride[1] = {(cuuint64_t)9 * cin * 2};
  const cuuint32_t box[2] = {(cuuint32_t)KCH, (cuuint32_t)bn};
  const cuuint32_t one[2] = {1, 1};
  CUresult r = encode_tiled()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(base),
                              dim, stride, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0
                           : fail(err, len, "cuTensorMapEncodeTiled (weights) failed: %d", (int)r);
}

typedef void (*kernel_fn)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, params);

/* Forward: pro = the prologue, stats = the statistics; dgrad: pro = the mask, stats = the
 * sums (plain dgrad is the plain forward kernel). */
template <int BN> kernel_fn pick_bn(bool dg, bool pro, bool stats)
{
  if (dg && (pro || stats)) {
    if (pro)
      return stats ? conv_wide_kernel<BN, true, true, true>
                   : conv_wide_kernel<BN, true, false, true>;
    return conv_wide_kernel<BN, false, true, true>;
  }
  if (pro)
    return stats ? conv_wide_kernel<BN, true, true, false>
                 : conv_wide_kernel<BN, true, false, false>;
  return stats ? conv_wide_kernel<BN, false, true, false>
               : conv_wide_kernel<BN, false, false, false>;
}

kernel_fn pick(int bn, bool dg, bool pro, bool stats)
{
  return bn == 128 ? pick_bn<128>(dg, pro, stats) : pick_bn<64>(dg, pro, stats);
}

int bn_of(int cout) { return cout % 128 == 0 ? 128 : 64; }

/* The workspace: the blocks' statistics partials ([sms][2 max(cin, cout)] f64, enough for
 * either pass), then (1024-aligned) dgrad's flipped weights. */
size_t ws_weights_offset(int sms, int cin, int cout)
{
  const size_t c = (size_t)(cin > cout ? cin : cout);
  return ((size_t)sms * 2 * c * sizeof(double) + 1023) & ~(size_t)1023;
}

/* Checks of either pass (cin, cout: the kernel's input and output channels); fills p. */
int check_common(const char *pass, int n, int h, int w, int cin, int cout, const void *in,
                 const void *weight, const void *out, const float *scale, const float *shift,
                 params *p, int *sms, char *err, size_t errlen)
{
  if (!covered(cin, cout))
    return fail(err, errlen, "the sm_90 convolution covers 64 -> 64 channels and cin, cout "
                "multiples of 64 up to %d, not %d -> %d", MAX_CH, cin, cout);
  if (n < 0 || h < 1 || w < 1 || (n > 0 && (size_t)h * w > (1u << 30)))
    return fail(err, errlen, "the sm_90 convolution: batch %d of %dx%d is invalid", n, h, w);
  if (!in || !weight || !out || !aligned16(in) || !aligned16(weight) || !aligned16(out))
    return fail(err, errlen, "the sm_90 convolution's %s needs its tensors in device memory on "
                "16-byte boundaries", pass);
  if (!scale != !shift)
    return fail(err, errlen, "the sm_90 convolution's %s needs both scale and shift", pass);
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return fail(err, errlen, "no current CUDA device");
  }
  *sms = sm_count(device);
  if (*sms < 1) return fail(err, errlen, "CUDA device %d: no multiprocessor count", device);
  if (n > 0 && !encode_tiled())
    return fail(err, errlen, "the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
  p->g = sm90_tile_geometry(w);
  if (p->g.halo_lines > HALO_LINES)
    return fail(err, errlen, "the sm_90 convolution: a %d-pixel-wide tile's halo has %d lines, "
                "more than a stage holds (%d)", p->g.tw, p->g.halo_lines, HALO_LINES);
  const int tiles_x = (w + p->g.tw - 1) / p->g.tw,
            tiles_y = (h + 2 * p->g.rw - 1) / (2 * p->g.rw);
  const long long npix = (long long)tiles_x * tiles_y * n;
  if (npix * (cout / bn_of(cout)) > (1ll << 30))
    return fail(err, errlen, "the sm_90 convolution: batch %d of %dx%d has too many tiles", n, h,
                w);
  p->n = n;
  p->h = h;
  p->w = w;
  p->tiles_x = tiles_x;
  p->tiles_y = tiles_y;
  p->npix = (int)npix;
  p->nitems = (int)npix * (cout / bn_of(cout));
  p->kc = cin / KCH;
  p->cin = cin;
  p->cout = cout;
  p->scale = scale;
  p->shift = shift;
  p->partial = NULL;
  return 0;
}

/* Maps x (cin channels), y (cout), the weights [cout][9 cin] and (dgrad's mask or sums) xt
 * (cout); launches one persistent block per multiprocessor (fewer when there are fewer
 * items). Returns the grid, or -1. */
int launch(const params &p, const void *x, const void *y, const void *weight, const void *xt,
           bool dg, bool pro, bool stats, int sms, cudaStream_t st, char *err, size_t errlen)
{
  const int bn = bn_of(p.cout);
  CUtensorMap m[4];
  if (map_image_c(&m[0], x, p.n, p.h, p.w, p.cin, p.g.hw, 2 * p.g.rw + 2, err,
                  errlen) ||
      map_image_c(&m[1], y, p.n, p.h, p.w, p.cout, p.g.tw, p.g.rw, err, errlen) ||
      map_weights(&m[2], weight, p.cin, p.cout, bn, err, errlen))
    return -1;
  if (xt) {
    if (map_image_c(&m[3], xt, p.n, p.h, p.w, p.cout, p.g.tw, p.g.rw, err, errlen)) return -1;
  } else {
    m[3] = m[1]; /* not read */
  }
  const kernel_fn k = pick(bn, dg, pro, stats);
  const int smem = bn == 128 ? lay<128>::smem : lay<64>::smem;
  const int grid = p.nitems < sms ? p.nitems : sms;
  cudaError_t e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem);
  if (e != cudaSuccess)
    return fail(err, errlen, "the sm_90 convolution's shared memory (%d bytes): %s", smem,
                cudaGetErrorString(e));
  k<<<grid, THREADS, smem, st>>>(m[0], m[1], m[2], m[3], p);
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 convolution: %s", cudaGetErrorString(e));
  return grid;
}

int launched(const char *what, char *err, size_t errlen)
{
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail(err, errlen, "launching %s: %s", what, cudaGetErrorString(e));
}

} // namespace

int conv_wide_check(int device, char *err, size_t errlen)
{
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return fail(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
  if (prop.sharedMemPerBlockOptin < (size_t)SMEM_MAX)
    return fail(err, errlen, "CUDA device %d offers %zu bytes of shared memory per block; the "
                "wide convolution needs %d", device, prop.sharedMemPerBlockOptin, SMEM_MAX);
  cudaFuncAttributes fa;
  for (int k = 0; k < 16; k++) {
    const kernel_fn f = pick(k & 4 ? 128 : 64, k & 8, k & 1, k & 2);
    if ((e = cudaFuncGetAttributes(&fa, (const void *)f)) != cudaSuccess) {
      cudaGetLastError();
      return fail(err, errlen, "the sm_90a wide convolution does not load on device %d: %s",
                  device, cudaGetErrorString(e));
    }
    if (regs_fit(fa.numRegs, THREADS, HANDOVER_REGS, "sm_90a wide convolution", err, errlen))
      return -1;
  }
  return 0;
}

int conv_wide_fwd(const conv_sm90_fwd_t *a, char *err, size_t errlen)
{
  params p;
  int sms = 0;
  if (check_common("forward", a->n, a->h, a->w, a->cin, a->cout, a->x, a->weight, a->y,
                   a->scale, a->shift, &p, &sms, err, errlen))
    return -1;
  if (a->stats && !a->ws)
    return fail(err, errlen, "the sm_90 convolution's statistics need conv_sm90_ws_bytes_shape() "
                "of workspace");
  cudaStream_t st = (cudaStream_t)a->stream;
  if (a->n == 0) { /* no pixels: zero sums, count 0 */
    if (a->stats) {
      cudaError_t e = cudaMemsetAsync(a->stats, 0, (2 * (size_t)a->cout + 1) * sizeof(double), st);
      if (e != cudaSuccess)
        return fail(err, errlen, "clearing the statistics: %s", cudaGetErrorString(e));
    }
    return 0;
  }
  p.partial = (double *)a->ws;
  const int grid = launch(p, a->x, a->y, a->weight, NULL, false, a->scale != NULL,
                          a->stats != NULL, sms, st, err, errlen);
  if (grid < 0) return -1;
  if (a->stats) {
    conv_wide_stats_kernel<<<sm90_final_blocks(2 * a->cout), SM90_FINAL_THREADS, 0, st>>>(
        p.partial, grid, a->cout, (double)a->n * a->h * a->w, a->stats);
    return launched("the sm_90 convolution's statistics", err, errlen);
  }
  return 0;
}

int conv_wide_dgrad(const conv_sm90_dgrad_t *a, char *err, size_t errlen)
{
  params p;
  int sms = 0;
  /* the kernel's input is dy (cout channels), its output g (cin) */
  if (check_common("dgrad", a->n, a->h, a->w, a->cout, a->cin, a->dy, a->weight, a->g,
                   a->scale, a->shift, &p, &sms, err, errlen))
    return -1;
  if (!a->sums != !a->saved)
    return fail(err, errlen, "the sm_90 dgrad's sums need saved (mean, invstd) and sums "
                "together");
  const bool xt = a->scale || a->sums;
  if (xt && (!a->x || !aligned16(a->x)))
    return fail(err, errlen, "the sm_90 dgrad's mask and sums need x in device memory on a "
                "16-byte boundary");
  if (!a->ws)
    return fail(err, errlen, "the sm_90 dgrad needs conv_sm90_ws_bytes_shape() of workspace");
  cudaStream_t st = (cudaStream_t)a->stream;
  if (a->n == 0) { /* no pixels: zero sums */
    if (a->sums) {
      cudaError_t e = cudaMemsetAsync(a->sums, 0, 2 * (size_t)a->cin * sizeof(double), st);
      if (e != cudaSuccess)
        return fail(err, errlen, "clearing the sums: %s", cudaGetErrorString(e));
    }
    return 0;
  }
  void *wt = (char *)a->ws + ws_weights_offset(sms, a->cin, a->cout);
  flip_weights(a->weight, wt, a->cin, a->cout, st);
  if (launched("the sm_90 dgrad's weight flip", err, errlen)) return -1;
  p.partial = (double *)a->ws;
  const int grid = launch(p, a->dy, a->g, wt, xt ? a->x : NULL, true, a->scale != NULL,
                          a->sums != NULL, sms, st, err, errlen);
  if (grid < 0) return -1;
  if (a->sums) {
    conv_wide_dgrad_sums_kernel<<<sm90_final_blocks(a->cin), SM90_FINAL_THREADS, 0, st>>>(
        p.partial, grid, a->cin, a->saved, a->sums);
    return launched("the sm_90 dgrad's sums", err, errlen);
  }
  return 0;
}

} // namespace sm90

extern "C" size_t conv_sm90_ws_bytes_shape(int device, int cin, int cout)
{
  if (cin == 64 && cout == 64) return conv_sm90_ws_bytes(device);
  if (!sm90::covered(cin, cout)) return 0;
  const int sms = sm90::sm_count(device);
  if (sms < 1) return 0;
  return sm90::ws_weights_offset(sms, cin, cout) + (size_t)9 * cin * cout * 2;
}
