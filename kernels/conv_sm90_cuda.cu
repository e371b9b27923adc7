/* conv_sm90_cuda.cu — the fused 3x3 convolutions of kernels/conv_sm90.h on Hopper: an implicit
 * GEMM (M = pixels, N = 64 output channels, K = 9 taps x 64 input channels) on wgmma, fed by
 * the tensor copy engine (TMA), warp-specialised, persistent. The forward and dgrad share it:
 * dgrad is the forward convolution of dy with the flipped, transposed weights (wt[ci][8 - t][co]
 * = w[co][t][ci]: in PIXELS_M made by a small kernel into the workspace, in COUT_M read from the
 * forward's weights transposed as they are loaded), no prologue, and its own epilogue.
 *
 * Tiles. A tile is 2 image rows x 64 pixels (M = 128) of one image, all 64 output channels. Its
 * input is a halo of 4 rows x 66 pixels x 64 channels, one TMA tiled load of the NHWC tensor at
 * (c 0, x0 - 1, y0 - 1, n): the copy engine zero-fills what lies outside the image, which is the
 * convolution's padding. The nine taps are nine shifted views of that one halo (tap (ky, kx) of
 * output pixel (r, c) is halo pixel (r + ky, c + kx)), so each input byte comes from L2 about
 * 4 * 66 / 128 = 2.1 times instead of 9.
 *
 * Roles (384 threads, one block per multiprocessor, tiles blockIdx.x, +gridDim.x, ...; in
 * COUT_M's 64 -> 128 each block takes one half of the output channels and that half's tiles,
 * see params):
 *   warp 0 (one thread)  loads: the weights once (73,728 bytes, resident), then each tile's halo
 *                        into a ring of stages (3; 4 in the COUT_M forward, see the shared
 *                        memory below); full[s] completes on the bytes (expect_tx).
 *   warps 1-3            the prologue: BatchNorm apply + ReLU on the halo in place, once per
 *                        element, then arrive on ready[s]. Lines outside the image are left as
 *                        the copy engine's zeros (the padding is zero after the BN, as the
 *                        trainer's conv sees it). Without a prologue they only pass full on.
 *                        (Warpgroup 0 hands registers to the consumers: setmaxnreg 64 / 216
 *                        where these warps run the BN pass, 56 / 224 elsewhere.)
 *   warps 4-7, 8-11      two consumer warpgroups; the block's i-th tile goes to warpgroup i % 2,
 *                        so one's epilogue overlaps the other's matrix work. Per tile: 36 k-steps
 *                        (9 taps x 4 steps of 16 channels), each two wgmma m64n64k16 (one per
 *                        image row) with A from registers and B (weights) from shared memory;
 *                        then the epilogue.
 *
 * Two GEMM layouts (conv_sm90.h CONV_SM90_LAYOUT_*): the one described here and below, M =
 * the tile's pixels (PIXELS_M), and COUT_M, M = the output channels with the weights held in
 * registers (see "the COUT_M layout" further down); loader, prologue, stages and barriers are
 * the same for both.
 *
 * Why A from registers. A tap's view starts kx (0..2) pixels into a halo row, i.e. at any
 * 128-byte line, not at a 1024-byte swizzle-pattern boundary. ldmatrix takes one address per
 * lane, so the swizzle is applied by this code and is exact by construction; the shared-memory
 * bytes moved are the same as a descriptor read's. (dev/wgmma_desc_probe.cu has since shown
 * on an H100 that a descriptor starting part-way follows the address bits with base offset 0,
 * which a formulation with the pixels as N, through descriptors, can use.) The prologue then runs once per halo element (about 2.1 per output pixel and input
 * channel) rather than once per tap in registers (9 per), on its own warps. B is read through
 * descriptors only at the standard places: 1024-aligned 8 KB tap blocks, +32 bytes per k-step.
 *
 * Shared memory (from a 1024-aligned base; each pixel row of 64 bf16 channels is one 128-byte
 * line, in the copy engine's 128-byte swizzle: 16-byte chunk j of line L sits at chunk
 * j ^ (L & 7), L counted from the 1024-aligned base — the engine swizzles by address bits
 * [4:6] ^= [7:9], so every buffer below starts on a 1024 boundary):
 *   [0, 73728)             weights: tap t (= 3 ky + kx) at t * 8192, [cout 64][cin 64] lines.
 *                          B descriptor of (t, step j): start t * 8192 + 32 j, K-major,
 *                          128-byte swizzle, stride byte offset 1024 (8 lines), leading byte
 *                          offset unused (1), base offset 0.
 *   3 stages x 34816       a halo: line = hr * 66 + hc (hr < 4, hc < 66), 33,792 bytes used.
 *                          (dgrad: reused by the epilogue for the 128 output pixels, line =
 *                          row * 64 + pixel, which the copy engine stores from there.)
 *   2 x 16384              a tile buffer per consumer warpgroup: the forward's output tile
 *                          (line = row * 64 + pixel, same swizzle), stored from there; dgrad's
 *                          x tile. The COUT_M forward has a fourth stage here instead (its
 *                          output buffers are in the weights' shared memory).
 *   8192                   statistics, f64 [warpgroup 2][warp 4][Σ, Σ²][64 channels].
 *   barriers               full[S], ready[S], empty[S], weights (S stages).
 *
 * A fragments: for k-step (ky, kx, j) and image row mb of the tile, warp w of a warpgroup loads
 * its 16 pixels (16 w ..) with one ldmatrix.x4: lane l addresses pixel p = 16 w + (l & 7) +
 * 8 ((l >> 3) & 1), chunk 2 j + (l >> 4), at halo line (mb + ky) * 66 + p + kx; the four 8x8
 * matrices come back as exactly wgmma's A fragment (rows 0-7/8-15 x k 0-7/8-15). A registers
 * are triple-buffered across k-steps: step ks + 1's fragments load right after step ks is
 * committed, before wgmma.wait_group 1 (which leaves step ks in flight), into the buffer step
 * ks - 2 used, so the ldmatrix latency hides behind the tensor cores' work.
 *
 * dgrad's epilogue adds, where the mask or the sums are asked for: thread 0 of the warpgroup
 * loads the forward input x at the output tile (16 KB, TMA, into the warpgroup's own buffer;
 * x_full[wg]) when the tile starts; after the k-steps, ldmatrix with the stmatrix geometry
 * gives each thread x in the accumulators' layout: g = bf16(acc) zeroed where x * scale +
 * shift <= 0, and the f32 sums Σ g and Σ g x (exact products), folded like the forward's.
 * dgrad's output tile goes into its stage, as the forward's did before it had buffers of its
 * own.
 *
 * Epilogue (per consumer warpgroup): wait for the tile's wgmmas, round each accumulator to
 * bf16, add the rounded values (and squares) to per-thread f32 sums of its 16 channels (pixels
 * outside the image masked), write the tile with stmatrix into the warpgroup's tile buffer
 * (forward; the named barrier after the k-steps, which the storing thread meets only after its
 * last store from that buffer has read it, orders the writes after both) or into its own halo
 * stage (dgrad: all of that warpgroup's reads of it are done at that barrier),
 * fence.proxy.async, and one thread stores it with a TMA tensor store (the engine clips the
 * image's edges). The forward hands the stage back to the loader (empty[s]) right after that
 * barrier, its k-steps being done; dgrad once the store has read it, which the storing thread
 * checks when its next tile starts, before waiting for that tile's stage. So in the forward a
 * stage's next load, and the prologue's pass over it, start an epilogue and a store earlier,
 * which is what the fused forward waited on.
 * Every 8 tiles and at the end, the f32 sums (at most 32 terms) are folded in f64: a fixed
 * butterfly over the 8 lanes that share channels, then into the warp's own row of the f64
 * area. At the end, 128 threads sum the 8 rows in a fixed order into the block's partial, and
 * a second kernel sums the blocks' partials in a fixed order. Same grid, same tiles, same order:
 * bitwise reruns.
 *
 * Synchronisation (modelled, both layouts, by dev/conv_sm90_protocol.py: change the model with
 * the kernel): full[s] (1 arrival + bytes), ready[s] (96 prologue threads, each after
 * fence.proxy.async for its writes, which the copy engine overwrites later), empty[s] (1: the
 * storing thread; the forward: after its k-steps), weights (1 + bytes). Phases: the i-th tile of
 * a block uses stage i % S for the (i / S)-th time, parity (i / S) & 1.
 *
 * Built for sm_90a only (configure adds this file's rule where 90 is among the architectures);
 * the host side checks for compute capability 9.0 before it launches. */
#include "config.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <utility>

#include "kernels/conv_sm90.h"
#include "kernels/conv_sm90_wide.h"
#include "kernels/sm90_host.h"
#include "kernels/sm90_conv.cuh"
#include "kernels/sm90_ptx.cuh"
#include "kernels/sm90_regs.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv_sm90_cuda.cu needs sm_90a (wgmma): compile it with -gencode arch=compute_90a,code=sm_90a"
#endif

namespace {

using namespace sm90;

constexpr int C = 64;                     /* input and output channels */
constexpr int TILE_W = 64, TILE_H = 2;    /* output pixels of a tile */
constexpr int HALO_W = TILE_W + 2, HALO_H = TILE_H + 2;
constexpr int HALO_LINES = HALO_W * HALO_H;      /* 264 */
constexpr int LINE = 128;                        /* bytes: 64 bf16 channels */
constexpr int HALO_BYTES = HALO_LINES * LINE;    /* 33,792: one TMA box */
constexpr int STAGE_BYTES = (HALO_BYTES + 1023) / 1024 * 1024;
constexpr int TAP_BYTES = C * LINE;              /* 8 KB: [cout][cin] of one tap */
constexpr int W_BYTES = 9 * TAP_BYTES;
constexpr int TILE_BYTES = TILE_H * TILE_W * LINE; /* 16 KB: one output tile */
constexpr int STATS_BYTES = 2 * 4 * 2 * C * 8;
constexpr int THREADS = 384;
constexpr int PRO_THREADS = 96;                  /* warps 1-3 */
/* Whether the prologue warps run the BN pass: the forward's prologue in the PIXELS_M layout
 * (COUT_M's consumers apply it themselves; dgrad has none). */
constexpr bool halo_pass(bool pro, bool dg, bool cm) { return pro && !dg && !cm; }
/* Registers a thread after the hand-over: the prologue warps' BN pass (four lines in flight) needs
 * 64, which leaves the consumers 216; where those warps only pass `full` on, 56 and 224. */
constexpr int producer_regs(bool pass) { return pass ? 64 : 56; }
constexpr int consumer_regs(bool pass) { return pass ? 216 : 224; }
constexpr int handover_regs(bool pass)
{
  return 128 * producer_regs(pass) + 256 * consumer_regs(pass);
}
static_assert(handover_regs(true) <= SM90_BLOCK_REGS(THREADS) &&
              handover_regs(false) <= SM90_BLOCK_REGS(THREADS),
              "the block's registers from its launch");
constexpr int FOLD_TILES = 8;                    /* f32 sums over at most 8 tiles x 4 pixels */
constexpr int PARTIAL = 2 * C;                   /* doubles per block */

/* The shared-memory layouts. Two tile buffers, one per consumer warpgroup, take one stage of
 * the ring: dgrad (DG true) keeps the forward input x at its output tile there (the ReLU mask
 * and the BatchNorm sums read it), and the PIXELS_M forward (DG and CM false) its output tile,
 * written there and stored from there, so the stage goes back to the loader as soon as the
 * tile's k-steps are done instead of after the store has read it. The COUT_M forward keeps four
 * stages (its output buffers are in the weights' shared memory). The mask's coefficients stay
 * in shared memory. Barriers: full[stages], ready[stages], empty[stages], weights, then (dgrad)
 * x_full[2]. */
template <bool DG, bool CM> struct lay {
  static constexpr bool tiles2 = DG || !CM; /* the two tile buffers */
  static constexpr int stages = tiles2 ? 3 : 4;
  static constexpr int off_stage = W_BYTES;
  static constexpr int off_xt = off_stage + stages * STAGE_BYTES;
  static constexpr int off_coef = off_xt + (tiles2 ? 2 * TILE_BYTES : 0);
  static constexpr int off_stats = off_coef + 2 * C * 4; /* dgrad's mask, COUT_M's prologue */
  static constexpr int off_bar = off_stats + STATS_BYTES;
  static constexpr int nbar = 3 * stages + 1 + (DG ? 2 : 0);
  static constexpr int smem = off_bar + nbar * 8 + 1024; /* + slack to align the base */
};
constexpr int smem_max(int a, int b) { return a > b ? a : b; }
constexpr int SMEM_MAX = smem_max(smem_max(lay<false, false>::smem, lay<false, true>::smem),
                                  smem_max(lay<true, false>::smem, lay<true, true>::smem));

static_assert(W_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0 && TILE_BYTES % 1024 == 0,
              "buffers on 1024-byte boundaries");
static_assert(TILE_BYTES <= STAGE_BYTES, "the output tile fits its stage");
static_assert(SMEM_MAX <= 227 * 1024, "shared memory per block on sm_90");

/* Output-channel halves (64 -> 128 in COUT_M, conv_sm90.h): the grid is `halves` groups of bph
 * blocks; block b computes output channels 64 h .. 64 h + 63, h = b / bph, of the tiles
 * b % bph, + bph, ..., with that half's weights (tap t's box at K coordinate t wk + h wk_half,
 * row h wr_half of the weights' map) and stores them at channel 64 h of the output. Each block
 * is the one-half kernel on its half: the same roles, stages and barriers, only its tiles, its
 * weights' box and its output's channel offset depend on h, so the protocol
 * (dev/conv_sm90_protocol.py, one block) is unchanged. With one half (64 -> 64) bph is the grid,
 * wk 64, wk_half and wr_half 0: the tiles, boxes and stores the kernel always had. */
struct params {
  int n, h, w, tiles_x, tiles_y, ntiles;
  int halves, bph;          /* output-channel halves, blocks per half */
  int wk, wk_half, wr_half; /* the weights' map coordinates of a tap and of a half (above) */
  const float *scale, *shift;
  double *partial; /* [gridDim.x][2C] */
};

/* The block's half and its place among that half's blocks (params). */
__device__ __forceinline__ int half_of(const params &p) { return (int)blockIdx.x / p.bph; }
__device__ __forceinline__ int blk_of(const params &p)
{
  return (int)blockIdx.x - half_of(p) * p.bph;
}

struct tile_t {
  int n, y0, x0;
};

__device__ __forceinline__ tile_t tile_of(const params &p, int t)
{
  tile_t r;
  r.x0 = (t % p.tiles_x) * TILE_W;
  t /= p.tiles_x;
  r.y0 = (t % p.tiles_y) * TILE_H;
  r.n = t / p.tiles_y;
  return r;
}

/* ---- the roles ---- */

template <bool DG, bool CM>
__device__ __forceinline__ void run_loader(const params &p, const CUtensorMap *xmap,
                                           const CUtensorMap *wmap, uint32_t sbase)
{
  using L = lay<DG, CM>;
  constexpr int STAGES = L::stages;
  const uint32_t bar = sbase + L::off_bar;
  const uint32_t full = bar, empty = bar + 16 * STAGES, wbar = bar + 24 * STAGES;
  asm volatile("prefetch.tensormap [%0];" ::"l"(xmap) : "memory");
  const int hf = half_of(p);
  mbar_expect_tx(wbar, W_BYTES);
  for (int t = 0; t < 9; t++)
    tma_load_2d(sbase + t * TAP_BYTES, wmap, t * p.wk + hf * p.wk_half, hf * p.wr_half, wbar);
  int i = 0;
  for (int t = blk_of(p); t < p.ntiles; t += p.bph, i++) {
    const int s = i % STAGES, k = i / STAGES;
    if (k > 0) mbar_wait(empty + 8 * s, (k - 1) & 1);
    const tile_t tl = tile_of(p, t);
    mbar_expect_tx(full + 8 * s, HALO_BYTES);
    tma_load_4d(sbase + L::off_stage + s * STAGE_BYTES, xmap, 0, tl.x0 - 1, tl.y0 - 1, tl.n,
                full + 8 * s);
  }
}

/* The prologue warps: y = bf16(max(0, x * scale + shift)) on each halo's lines inside the
 * image (sm90_conv.cuh); the thread owns chunk (lane & 7), 8 fixed channels whose coefficients
 * stay in registers, and walks lines (lane >> 3) + 4 (warp - 1), +12. */
template <bool PRO, bool DG, bool CM>
__device__ __forceinline__ void run_prologue(const params &p, uint32_t sbase, int pw, int lane)
{
  using L = lay<DG, CM>;
  constexpr int STAGES = L::stages;
  const uint32_t bar = sbase + L::off_bar;
  const uint32_t full = bar, ready = bar + 8 * STAGES;
  const int lc = lane & 7;
  float sc[8], sh[8];
  if (PRO) bn_coef_load(p.scale, p.shift, lc, sc, sh);
  int i = 0;
  for (int t = blk_of(p); t < p.ntiles; t += p.bph, i++) {
    const int s = i % STAGES, k = i / STAGES;
    mbar_wait(full + 8 * s, k & 1);
    if (PRO) {
      const tile_t tl = tile_of(p, t);
      bn_relu_halo<4>(sbase + L::off_stage + s * STAGE_BYTES, HALO_LINES, HALO_W, tl.y0 - 1,
                   tl.x0 - 1, p.h, p.w, 4 * pw + (lane >> 3), 12, lc, sc, sh);
      fence_proxy_async();
    }
    mbar_arrive(ready + 8 * s);
  }
}

/* The f32 sums of the thread's 16 channels (8 j + 2 t + e) folded into its warp's f64 row. */
__device__ __forceinline__ void fold_stats(float (&s1)[16], float (&s2)[16], double *row, int lane)
{
#pragma unroll
  for (int v = 0; v < 32; v++) {
    double d = v < 16 ? (double)s1[v] : (double)s2[v - 16];
    d += __shfl_xor_sync(0xffffffffu, d, 4);
    d += __shfl_xor_sync(0xffffffffu, d, 8);
    d += __shfl_xor_sync(0xffffffffu, d, 16);
    const int ch = 8 * ((v & 15) >> 1) + 2 * (lane & 3) + (v & 1);
    if (lane < 4) row[(v >> 4) * C + ch] += d;
  }
#pragma unroll
  for (int v = 0; v < 16; v++) s1[v] = s2[v] = 0.f;
}

/* The A fragments of k-step ks (tap ks / 4, 16 channels 16 (ks % 4) ..) for both image rows of
 * the tile: the halo lines the tap's view starts at, by ldmatrix (see the file's comment). */
__device__ __forceinline__ void load_a(uint32_t stage, uint32_t pix, uint32_t khalf, int ks,
                                       uint32_t (&a)[2][4])
{
  const int tap = ks >> 2, j = ks & 3, ky = tap / 3, kx = tap % 3;
#pragma unroll
  for (int mb = 0; mb < 2; mb++) {
    const uint32_t line = (uint32_t)((mb + ky) * HALO_W + kx) + pix;
    ldmatrix_x4(stage + swz(line, 2 * j + khalf), a[mb]);
  }
}

/* A consumer warpgroup. Forward (DG false): PRO is the prologue's, done by the prologue warps;
 * STATS sums y and y². dgrad (DG true): the input is dy and the weights the flipped, transposed
 * ones; PRO is the mask and STATS sums g and g * x, both reading the x tile that this
 * warpgroup's thread 0 loads at the start of each tile. */
template <bool PRO, bool STATS, bool DG>
__device__ __forceinline__ void run_consumer(const params &p, const CUtensorMap *ymap,
                                             const CUtensorMap *xtmap, uint32_t sbase,
                                             double *stats_area, const float *coef, int wg, int ti)
{
  using L = lay<DG, false>;
  constexpr int STAGES = L::stages;
  constexpr bool XT = DG && (PRO || STATS); /* the x tile is needed */
  constexpr bool OWN = !DG; /* the output tile in the warpgroup's own buffer (xt), lay */
  const uint32_t bar = sbase + L::off_bar;
  const uint32_t ready = bar + 8 * STAGES, empty = bar + 16 * STAGES, wbar = bar + 24 * STAGES;
  const uint32_t xbar = wbar + 8 + 8 * wg, xt = sbase + L::off_xt + wg * TILE_BYTES;
  const int wi = ti >> 5, lane = ti & 31, g = lane >> 2, t4 = lane & 3;
  double *row = stats_area + (wg * 4 + wi) * 2 * C;
  if (STATS && lane < 4)
    for (int v = 0; v < 32; v++) row[(v >> 4) * C + 8 * ((v & 15) >> 1) + 2 * t4 + (v & 1)] = 0;
  float s1[16], s2[16];
#pragma unroll
  for (int v = 0; v < 16; v++) s1[v] = s2[v] = 0.f;

  /* ldmatrix lane geometry (see the file's comment) */
  const int q = lane >> 3;
  const uint32_t pix = 16 * wi + (lane & 7) + 8 * (q & 1), khalf = q >> 1;
  /* stmatrix lane geometry: the same rows, matrices (rows 0-7|8-15) x (group j|j+1) */
  const uint64_t bdesc0 = desc_sw128(sbase);

  mbar_wait(wbar, 0);
  float acc[2][32];
#pragma unroll
  for (int v = 0; v < 32; v++) acc[0][v] = acc[1][v] = 0.f;
  int pending = -1, tiles_done = 0, nt = 0;
  int i = wg;
  for (int t = blk_of(p) + wg * p.bph; t < p.ntiles; t += 2 * p.bph, i += 2, nt++) {
    const int s = i % STAGES, k = i / STAGES;
    const uint32_t stage = sbase + L::off_stage + s * STAGE_BYTES;
    const tile_t tl = tile_of(p, t);
    if (XT && ti == 0) { /* the last tile's epilogue read its x tile before its final barrier */
      mbar_expect_tx(xbar, TILE_BYTES);
      tma_load_4d(xt, xtmap, 0, tl.x0, tl.y0, tl.n, xbar);
    }
    if (pending >= 0) { /* dgrad: the previous tile's stage back once its store has read it,
                           before waiting for this tile's: the loader can refill it sooner */
      if (ti == 0) {
        tma_store_wait_read();
        mbar_arrive(empty + 8 * pending);
      }
      __syncwarp();
    }
    mbar_wait(ready + 8 * s, k & 1);

    /* A fragments of k-step ks in a[ks % 3]: step ks + 1's are loaded while step ks (and
     * perhaps ks - 1) is in the tensor cores, into the buffer step ks - 2 read, done then */
    uint32_t a[3][2][4];
    load_a(stage, pix, khalf, 0, a[0]);
#pragma unroll
    for (int ks = 0; ks < 36; ks++) {
      const int tap = ks >> 2, j = ks & 3;
      wgmma_fence();
      const uint64_t bdesc = bdesc0 + (uint64_t)((tap * TAP_BYTES + 32 * j) >> 4);
      wgmma_rs(acc[0], a[ks % 3][0], bdesc, ks > 0);
      wgmma_rs(acc[1], a[ks % 3][1], bdesc, ks > 0);
      wgmma_commit();
      if (ks + 1 < 36) load_a(stage, pix, khalf, ks + 1, a[(ks + 1) % 3]);
      wgmma_wait<1>();
    }
    wgmma_wait<0>();
    acc_fence(acc[0]);
    acc_fence(acc[1]);
    if (OWN) { /* the last store from the out buffer has read it (bar.sync and stmatrix are
                  .aligned: the warp reconverges first) */
      if (ti == 0) tma_store_wait_read();
      __syncwarp();
    }
    named_bar(1 + wg, 128); /* every warp's ldmatrix of this stage is done (OWN: the out buffer is
                               free) */
    if (OWN) { /* the stage back to the loader now */
      if (ti == 0) mbar_arrive(empty + 8 * s);
      __syncwarp();
    }
    if (XT) mbar_wait(xbar, nt & 1);
    const uint32_t obuf = OWN ? xt : stage; /* where the output tile is written and stored from */

#pragma unroll
    for (int mb = 0; mb < 2; mb++) {
      const bool row_in = tl.y0 + mb < p.h;
#pragma unroll
      for (int jj = 0; jj < 4; jj++) {
        const uint32_t line = (uint32_t)(mb * TILE_W) + pix;
        uint32_t r[4], xr[4];
        if (XT) ldmatrix_x4(xt + swz(line, 2 * jj + khalf), xr);
#pragma unroll
        for (int m = 0; m < 4; m++) {
          const int j = 2 * jj + (m >> 1), h = m & 1;
          r[m] = pack_bf16(acc[mb][4 * j + 2 * h], acc[mb][4 * j + 2 * h + 1]);
          const bool in = row_in && tl.x0 + 16 * wi + g + 8 * h < p.w;
          if (DG) {
            if (XT) {
              const int c = 8 * j + 2 * t4; /* the pair's channels c, c + 1 (sm90_conv.cuh) */
              dgrad_pair<PRO, STATS>(r[m], xr[m], PRO ? coef[c] : 0.f, PRO ? coef[C + c] : 0.f,
                                     PRO ? coef[c + 1] : 0.f, PRO ? coef[C + c + 1] : 0.f, in,
                                     in, s1[2 * j], s2[2 * j], s1[2 * j + 1], s2[2 * j + 1]);
            }
          } else if (STATS) {
            const float f0 = in ? bf16_lo(r[m]) : 0.f, f1 = in ? bf16_hi(r[m]) : 0.f;
            s1[2 * j] += f0;
            s2[2 * j] = fmaf(f0, f0, s2[2 * j]);
            s1[2 * j + 1] += f1;
            s2[2 * j + 1] = fmaf(f1, f1, s2[2 * j + 1]);
          }
        }
        stmatrix_x4(obuf + swz(line, 2 * jj + khalf), r);
      }
    }
    fence_proxy_async();
    named_bar(1 + wg, 128); /* the tile is in obuf; every read of the x tile is done */
    if (ti == 0) tma_store_4d(ymap, obuf, 0, tl.x0, tl.y0, tl.n);
    __syncwarp();
    pending = OWN ? -1 : s; /* dgrad: the stage goes back once this store has read it */
    if (STATS && ++tiles_done == FOLD_TILES) {
      fold_stats(s1, s2, row, lane);
      tiles_done = 0;
    }
  }
  if (STATS && tiles_done) fold_stats(s1, s2, row, lane);
  if (ti == 0) tma_store_wait_all();
}

/* ---- the COUT_M layout (conv_sm90.h): M = the 64 output channels, A = the weights ----
 * A warpgroup holds the A fragments of all 36 k-steps in registers (144 a thread, loaded once
 * from the resident weights by ldmatrix with the geometry of load_a, lines = output channels)
 * and reads only B from shared memory: the tile's pixels, through a descriptor starting at the
 * tap's halo line (any line: the swizzle follows the address bits, dev/wgmma_desc_probe.cu),
 * K-major (a pixel line holds its 64 channels). Per k-step one wgmma m64n64k16 per image row
 * reads 2 KB of shared memory instead of 4 (2 KB of A by ldmatrix and 2 KB of B). The
 * accumulators are [channel][pixel]: thread (warp wi, lane) holds channels 16 wi + lane / 4
 * (+ 8) of pixels 8 i + 2 (lane & 3) (+ 1). The two image rows run one after the other on one
 * set of accumulators (the weights leave no room for two): row 0's are rounded, packed and
 * stored, then row 1's wgmmas issued (the other warpgroup's keep the tensor cores busy
 * meanwhile). stmatrix .trans writes the packed [channel][pixel] fragments as pixel lines into
 * the warpgroup's output buffer, 16 KB of the weights' shared memory (free once the weights are
 * in registers), so the halo stage goes back to the loader when its wgmmas are done rather than
 * after the store; dgrad reads its x tile with ldmatrix .trans into the same layout. Sums: a
 * thread's two channels over its 32 pixels of a tile in f32, folded in f64 each tile (the 4
 * lanes of a channel by a fixed butterfly, then into the warp's row). The forward's prologue
 * (BatchNorm + ReLU on the halo) is done by the consumer warpgroup itself on its own stage
 * before its wgmmas, four lines in flight a thread (the three prologue warps only pass full on
 * as ready): with the weights in registers the consumers have issue slots to spare, and 128
 * threads a stage instead of 96 for every stage. */

/* The f32 sums of the thread's two channels (ch, ch + 8) folded into its warp's f64 row. */
__device__ __forceinline__ void fold_stats_cm(float (&s1)[2], float (&s2)[2], double *row, int ch,
                                              int lane)
{
#pragma unroll
  for (int v = 0; v < 4; v++) {
    double d = v < 2 ? (double)s1[v] : (double)s2[v - 2];
    d += __shfl_xor_sync(0xffffffffu, d, 1);
    d += __shfl_xor_sync(0xffffffffu, d, 2);
    if ((lane & 3) == 0) row[(v >> 1) * C + ch + 8 * (v & 1)] += d;
  }
  s1[0] = s1[1] = s2[0] = s2[1] = 0.f;
}

/* Row mb's accumulators rounded, packed (v[m]: channel half m & 1, pixels 8 (i + m / 2) +
 * 2 (lane & 3) + {0, 1}), with dgrad's mask and the sums, and stored into the stage's lines
 * mb * 64 .. mb * 64 + 63, four 8x8 matrices at a time (so only four packed registers live).
 * xt: dgrad's x tile; coef: its mask coefficients (shared memory); epix, echunk: the lane's
 * ldmatrix/stmatrix .trans row and chunk (file comment). */
template <bool PRO, bool STATS, bool DG>
__device__ __forceinline__ void cm_epilogue(const float (&acc)[32], uint32_t stage, int mb,
                                            const tile_t &tl, const params &p, int ch, int t4,
                                            uint32_t xt, const float *coef, uint32_t epix,
                                            uint32_t echunk, float (&s1)[2], float (&s2)[2])
{
  constexpr bool XT = DG && (PRO || STATS);
  const bool row_in = tl.y0 + mb < p.h;
#pragma unroll
  for (int i = 0; i < 8; i += 2) {
    const uint32_t addr = swz((uint32_t)(mb * TILE_W + 8 * i) + epix, echunk);
    uint32_t xr[4], v[4];
    if (XT) ldmatrix_x4_trans(xt + addr, xr);
#pragma unroll
    for (int m = 0; m < 4; m++) {
      const int ii = i + (m >> 1), h = m & 1;
      v[m] = pack_bf16(acc[4 * ii + 2 * h], acc[4 * ii + 2 * h + 1]);
      const int px = tl.x0 + 8 * ii + 2 * t4;
      const bool in0 = row_in && px < p.w, in1 = row_in && px + 1 < p.w;
      if (DG) {
        if (XT) { /* one channel, two pixels (sm90_conv.cuh) */
          const float sc = PRO ? coef[ch + 8 * h] : 0.f, sh = PRO ? coef[C + ch + 8 * h] : 0.f;
          dgrad_pair<PRO, STATS>(v[m], xr[m], sc, sh, sc, sh, in0, in1, s1[h], s2[h], s1[h],
                                 s2[h]);
        }
      } else if (STATS) {
        const float f0 = in0 ? bf16_lo(v[m]) : 0.f, f1 = in1 ? bf16_hi(v[m]) : 0.f;
        s1[h] += f0;
        s2[h] = fmaf(f0, f0, s2[h]);
        s1[h] += f1;
        s2[h] = fmaf(f1, f1, s2[h]);
      }
    }
    stmatrix_x4_trans(stage + addr, v);
  }
}

/* B's offset (16-byte units) from an image row's first halo line for k-step ks: the tap's view
 * starts ky halo rows and kx lines further, channel step j 32 bytes into the line. */
__host__ __device__ constexpr uint32_t cm_off(int ks)
{
  return (uint32_t)(((((ks >> 2) / 3) * HALO_W + (ks >> 2) % 3) * LINE + 32 * (ks & 3)) >> 4);
}

/* k-step 0 writes acc without reading it (its outputs only), so the accumulators are dead
 * between a row's epilogue and the next row's first wgmma and ptxas can use their registers. */
template <int KS>
__device__ __forceinline__ void cm_step(float (&acc)[32], const uint32_t (&aw)[36][4], uint64_t d0)
{
  if constexpr (KS == 0)
    wgmma_rs_at_set<cm_off(0)>(acc, aw[0], d0);
  else
    wgmma_rs_at<cm_off(KS)>(acc, aw[KS], d0, 1);
}

template <int... KS>
__device__ __forceinline__ void cm_steps(float (&acc)[32], const uint32_t (&aw)[36][4],
                                         uint64_t d0, std::integer_sequence<int, KS...>)
{
  (cm_step<KS>(acc, aw, d0), ...);
}

/* An image row's 36 k-steps: acc = the weights (registers) times the halo's pixels
 * (descriptors; d0 that of the row's first halo line). */
__device__ __forceinline__ void cm_issue(float (&acc)[32], const uint32_t (&aw)[36][4], uint64_t d0)
{
  wgmma_fence();
  cm_steps(acc, aw, d0, std::make_integer_sequence<int, 36>());
  wgmma_commit();
}

/* A consumer warpgroup in the COUT_M layout; roles, stages and barriers as run_consumer. */
template <bool PRO, bool STATS, bool DG>
__device__ __forceinline__ void run_consumer_cm(const params &p, const CUtensorMap *ymap,
                                                const CUtensorMap *xtmap, uint32_t sbase,
                                                double *stats_area, const float *coef, int wg,
                                                int ti)
{
  using L = lay<DG, true>;
  constexpr int STAGES = L::stages;
  constexpr bool XT = DG && (PRO || STATS);
  const uint32_t bar = sbase + L::off_bar;
  const uint32_t ready = bar + 8 * STAGES, empty = bar + 16 * STAGES, wbar = bar + 24 * STAGES;
  const uint32_t xbar = wbar + 8 + 8 * wg, xt = sbase + L::off_xt + wg * TILE_BYTES;
  const int wi = ti >> 5, lane = ti & 31, t4 = lane & 3, q = lane >> 3;
  const int ch = 16 * wi + (lane >> 2); /* the accumulator rows' channels: ch, ch + 8 */
  double *row = stats_area + (wg * 4 + wi) * 2 * C;
  if (STATS)
    for (int k = lane; k < 2 * C; k += 32) row[k] = 0;
  float s1[2] = {0.f, 0.f}, s2[2] = {0.f, 0.f};
  /* ldmatrix/stmatrix .trans lane geometry: matrix q = (pixel group +q / 2, channel half q & 1) */
  const uint32_t epix = 8 * (q >> 1) + (lane & 7), echunk = 2 * wi + (q & 1);

  mbar_wait(wbar, 0);
  uint32_t aw[36][4];
  if (!DG) { /* A[co][ci] of tap t: line t * 64 + co, as load_a's geometry */
    const uint32_t wline = 16 * wi + (lane & 7) + 8 * (q & 1), khalf = q >> 1;
#pragma unroll
    for (int ks = 0; ks < 36; ks++)
      ldmatrix_x4(sbase + swz((uint32_t)((ks >> 2) * C) + wline, 2 * (ks & 3) + khalf), aw[ks]);
  } else {
    /* dgrad: A[ci][co] of tap t is w[co][8 - t][ci], the forward's weights as loaded (line
     * (8 - t) * 64 + co, chunk ci / 8) read transposed: matrix q holds ci 16 wi + 8 (q & 1) ..
     * (its rows, from chunk 2 wi + (q & 1)) and co 16 j + 8 (q >> 1) .. (the lines) */
    const uint32_t cline = 8 * (q >> 1) + (lane & 7), cchunk = 2 * wi + (q & 1);
#pragma unroll
    for (int ks = 0; ks < 36; ks++)
      ldmatrix_x4_trans(
          sbase + swz((uint32_t)((8 - (ks >> 2)) * C + 16 * (ks & 3)) + cline, cchunk), aw[ks]);
  }
  /* Both warpgroups' weights are in registers: from here the weights' shared memory holds each
   * warpgroup's output tile, so a halo stage goes back to the loader as soon as its wgmmas are
   * done, before the epilogue, instead of after the tile's store has read it. */
  named_bar(3, 256);
  const uint32_t obuf = sbase + (uint32_t)wg * TILE_BYTES;
  const int oc = C * half_of(p); /* the output channels' offset (params) */
  float acc[32];
  int nt = 0;
  int i = wg;
  for (int t = blk_of(p) + wg * p.bph; t < p.ntiles; t += 2 * p.bph, i += 2, nt++) {
    const int s = i % STAGES, k = i / STAGES;
    const uint32_t stage = sbase + L::off_stage + s * STAGE_BYTES;
    const uint64_t d0 = desc_sw128(stage);
    const tile_t tl = tile_of(p, t);
    if (XT && ti == 0) { /* the last tile's epilogue read its x tile before its final barrier */
      mbar_expect_tx(xbar, TILE_BYTES);
      tma_load_4d(xt, xtmap, 0, tl.x0, tl.y0, tl.n, xbar);
    }
    mbar_wait(ready + 8 * s, k & 1);
    if (PRO && !DG) { /* the prologue, by this warpgroup on its own stage (see above) */
      float sc[8], sh[8];
      const int lc = ti & 7;
#pragma unroll
      for (int e = 0; e < 8; e++) sc[e] = coef[8 * lc + e], sh[e] = coef[C + 8 * lc + e];
      bn_relu_halo<4>(stage, HALO_LINES, HALO_W, tl.y0 - 1, tl.x0 - 1, p.h, p.w, ti >> 3, 16, lc,
                      sc, sh);
      fence_proxy_async();
      named_bar(1 + wg, 128); /* the whole halo is normalised */
    }

    /* a rolled loop: unrolled into two rows, the code spilled the weights' registers */
#pragma unroll 1
    for (int mb = 0; mb < 2; mb++) {
      cm_issue(acc, aw, d0 + (uint64_t)(mb * HALO_W * LINE >> 4));
      if (mb == 0 && nt > 0) { /* the previous tile's store has read the output buffer */
        if (ti == 0) tma_store_wait_read();
        __syncwarp();
      }
      wgmma_wait<0>();
      acc_fence(acc);
      if (XT && mb == 0) mbar_wait(xbar, nt & 1);
      /* row 0: the output buffer is free; row 1: every warp's wgmmas of this stage are done, so
       * it goes back to the loader */
      named_bar(1 + wg, 128);
      if (mb == 1 && ti == 0) mbar_arrive(empty + 8 * s);
      cm_epilogue<PRO, STATS, DG>(acc, obuf, mb, tl, p, ch, t4, xt, coef, epix, echunk, s1, s2);
    }
    fence_proxy_async();
    named_bar(1 + wg, 128); /* the tile is in the buffer; every read of the x tile is done */
    if (ti == 0) tma_store_4d(ymap, obuf, oc, tl.x0, tl.y0, tl.n);
    __syncwarp();
    if (STATS) fold_stats_cm(s1, s2, row, ch, lane);
  }
  if (ti == 0) tma_store_wait_all();
}

/* Forward (DG false): x is the input, y the output; dgrad: x is dy, y is g, w the flipped,
 * transposed weights and xt the forward's input x, read at the output tile. */
template <bool PRO, bool STATS, bool DG, bool CM>
__global__ void __launch_bounds__(THREADS, 1)
    conv_sm90_kernel(const __grid_constant__ CUtensorMap xmap,
                     const __grid_constant__ CUtensorMap ymap,
                     const __grid_constant__ CUtensorMap wmap,
                     const __grid_constant__ CUtensorMap xtmap, const params p)
{
  using L = lay<DG, CM>;
  constexpr int STAGES = L::stages;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = (uint32_t)__cvta_generic_to_shared(smem_raw);
  const uint32_t sbase = (raw + 1023u) & ~1023u;
  double *stats_area = reinterpret_cast<double *>(smem_raw + (sbase - raw) + L::off_stats);
  float *coef = reinterpret_cast<float *>(smem_raw + (sbase - raw) + L::off_coef);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  if (threadIdx.x == 0) {
    const uint32_t bar = sbase + L::off_bar;
    for (int s = 0; s < STAGES; s++) {
      mbar_init(bar + 8 * s, 1);                           /* full */
      mbar_init(bar + 8 * (STAGES + s), PRO_THREADS);      /* ready */
      mbar_init(bar + 8 * (2 * STAGES + s), 1);            /* empty */
    }
    mbar_init(bar + 8 * 3 * STAGES, 1);                    /* weights */
    if (DG) {
      mbar_init(bar + 8 * (3 * STAGES + 1), 1);            /* x_full, warpgroup 0 */
      mbar_init(bar + 8 * (3 * STAGES + 2), 1);            /* x_full, warpgroup 1 */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if ((DG || CM) && PRO && threadIdx.x < 2 * C)
    coef[threadIdx.x] = threadIdx.x < C ? p.scale[threadIdx.x] : p.shift[threadIdx.x - C];
  __syncthreads();

  constexpr bool HALO_PASS = halo_pass(PRO, DG, CM);
  if (warp < 4) {
    regs_dec<producer_regs(HALO_PASS)>();
    if (warp == 0) {
      if (lane == 0) run_loader<DG, CM>(p, &xmap, &wmap, sbase);
    } else {
      run_prologue<HALO_PASS, DG, CM>(p, sbase, warp - 1, lane);
    }
  } else {
    regs_inc<consumer_regs(HALO_PASS)>();
    if (CM)
      run_consumer_cm<PRO, STATS, DG>(p, &ymap, &xtmap, sbase, stats_area, coef,
                                      (warp - 4) >> 2, threadIdx.x - 128 * ((warp) >> 2));
    else
      run_consumer<PRO, STATS, DG>(p, &ymap, &xtmap, sbase, stats_area, coef, (warp - 4) >> 2,
                                   threadIdx.x - 128 * ((warp) >> 2));
    /* The 8 consumer warps' rows summed in warp order into the block's partial, by the
     * consumers alone after a barrier of their own (as the wide kernel does): nothing waits
     * for the producer warps, and no block-wide barrier follows the roles' split. */
    if (STATS) {
      named_bar(3, 256); /* every consumer warp's fold is in */
      const int ct = threadIdx.x - 128;
      if (ct < PARTIAL) {
        const int k = ct / C, ch = ct % C;
        double v = 0;
        for (int r = 0; r < 8; r++) v += stats_area[r * 2 * C + k * C + ch];
        p.partial[(size_t)blockIdx.x * PARTIAL + ct] = v;
      }
    }
  }
}

/* stats[0..2 cout) = the blocks' partials summed (sum_partials_f64's fixed order), cout = 64
 * halves: channel co's from the bph blocks of its half (params), column co % 64 of the Σ or Σ²
 * half of their partials; stats[2 cout] = the pixel count. */
__global__ void __launch_bounds__(SM90_FINAL_THREADS)
    conv_sm90_stats_kernel(const double *partial, int bph, int halves, double count,
                           double *stats)
{
  const int t = blockIdx.x * blockDim.x + threadIdx.x, c = t / SM90_FINAL_LANES;
  const int cout = C * halves, valid = c < 2 * cout;
  const int k = c / cout, co = c % cout, hf = valid ? co / C : 0;
  const double v = sum_partials_f64(partial + (size_t)hf * bph * PARTIAL, bph, PARTIAL,
                                    k * C + co % C, t % SM90_FINAL_LANES, valid);
  if (t % SM90_FINAL_LANES == 0 && valid) stats[c] = v;
  if (t == 0) stats[2 * cout] = count;
}

/* dgrad's sums from the blocks' partials [Σ g, Σ g x]: sums[c] = Σ g and sums[C + c] =
 * Σ g (x - mean) invstd = (Σ g x - mean Σ g) invstd, saved = (mean, invstd). */
__global__ void __launch_bounds__(SM90_FINAL_THREADS)
    conv_sm90_dgrad_sums_kernel(const double *partial, int blocks, const double *saved,
                                double *sums)
{
  const int t = blockIdx.x * blockDim.x + threadIdx.x, c = t / SM90_FINAL_LANES;
  const int r = t % SM90_FINAL_LANES;
  const double g = sum_partials_f64(partial, blocks, PARTIAL, c, r, c < C);
  const double gx = sum_partials_f64(partial, blocks, PARTIAL, C + c, r, c < C);
  if (r == 0 && c < C) {
    sums[c] = g;
    sums[C + c] = (gx - saved[c] * g) * saved[C + c];
  }
}

/* ---- host ---- */

/* Weights [cout][9 cin] as a 2-D map (k, cout), boxes of one tap: 64 k x 64 cout (cin, cout:
 * the tensor's, 64 or 128; a box is one half's tap, params). */
int map_weights(CUtensorMap *m, const void *base, int cin, int cout, char *err, size_t len)
{
  const cuuint64_t dim[2] = {(cuuint64_t)9 * cin, (cuuint64_t)cout};
  const cuuint64_t stride[1] = {(cuuint64_t)9 * cin * 2};
  const cuuint32_t box[2] = {(cuuint32_t)C, (cuuint32_t)C};
  const cuuint32_t one[2] = {1, 1};
  CUresult r = encode_tiled()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(base),
                              dim, stride, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : fail(err, len, "cuTensorMapEncodeTiled (weights) failed: %d", (int)r);
}

typedef void (*kernel_fn)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, params);

template <bool DG, bool CM> kernel_fn pick_layout(bool pro, bool stats)
{
  if (pro)
    return stats ? conv_sm90_kernel<true, true, DG, CM> : conv_sm90_kernel<true, false, DG, CM>;
  return stats ? conv_sm90_kernel<false, true, DG, CM> : conv_sm90_kernel<false, false, DG, CM>;
}

template <bool DG> kernel_fn pick(bool pro, bool stats, bool cm)
{
  return cm ? pick_layout<DG, true>(pro, stats) : pick_layout<DG, false>(pro, stats);
}

/* The layout asked for (conv_sm90.h): 1 for COUT_M, 0 for PIXELS_M, -1 for a value not known. */
int layout_cm(int layout, char *err, size_t errlen)
{
  if (layout == 0) layout = CONV_SM90_LAYOUT_DEFAULT;
  if (layout == CONV_SM90_LAYOUT_COUT_M) return 1;
  if (layout == CONV_SM90_LAYOUT_PIXELS_M) return 0;
  return fail(err, errlen, "the sm_90 convolution has no layout %d (CONV_SM90_LAYOUT_*)", layout);
}

/* The workspace: the blocks' statistics partials, then (1024-aligned) dgrad's weights. */
size_t ws_weights_offset(int sms) { return ((size_t)sms * PARTIAL * sizeof(double) + 1023) & ~(size_t)1023; }

/* The checks both passes make, in their words; fills p's shape and tiles. */
int check_common(const char *pass, int n, int h, int w, int cin, int cout, const void *in,
                 const void *weight, const void *out, const float *scale, const float *shift,
                 params *p, int *sms, char *err, size_t errlen)
{
  if (cin != C || cout != C)
    return fail(err, errlen, "the sm_90 convolution covers %d -> %d channels, not %d -> %d", C,
                C, cin, cout);
  /* the 64 -> 64 tensors' map coordinates; the callers set halves' (params) */
  p->halves = 1;
  p->wk = C;
  p->wk_half = p->wr_half = 0;
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
  p->n = n;
  p->h = h;
  p->w = w;
  p->tiles_x = (w + TILE_W - 1) / TILE_W;
  p->tiles_y = (h + TILE_H - 1) / TILE_H;
  p->ntiles = p->tiles_x * p->tiles_y * n;
  p->scale = scale;
  p->shift = shift;
  return 0;
}

/* One persistent block per multiprocessor (fewer when there are fewer tiles): p.halves groups
 * of p.bph blocks, set here (params); returns the grid. */
int launch(kernel_fn k, int smem, const CUtensorMap maps[4], params &p, int sms,
           cudaStream_t st, char *err, size_t errlen)
{
  const int per = sms / p.halves > 0 ? sms / p.halves : 1;
  p.bph = p.ntiles < per ? p.ntiles : per;
  const int grid = p.bph * p.halves;
  cudaError_t e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem);
  if (e != cudaSuccess)
    return fail(err, errlen, "the sm_90 convolution's shared memory (%d bytes): %s", smem,
                cudaGetErrorString(e));
  k<<<grid, THREADS, smem, st>>>(maps[0], maps[1], maps[2], maps[3], p);
  if ((e = cudaGetLastError()) != cudaSuccess)
    return fail(err, errlen, "launching the sm_90 convolution: %s", cudaGetErrorString(e));
  return grid;
}

/* 0, or -1 with the launch's error. */
int launched(const char *what, char *err, size_t errlen)
{
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail(err, errlen, "launching %s: %s", what, cudaGetErrorString(e));
}

} // namespace

extern "C" int conv_sm90_check(int device, char *err, size_t errlen)
{
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return fail(err, errlen, "CUDA device %d: %s", device, cudaGetErrorString(e));
  if (prop.major != 9 || prop.minor != 0)
    return fail(err, errlen, "CUDA device %d (%s) has compute capability %d.%d; this convolution "
                "needs 9.0 (H100, H200)", device, prop.name, prop.major, prop.minor);
  if (prop.sharedMemPerBlockOptin < (size_t)SMEM_MAX)
    return fail(err, errlen, "CUDA device %d offers %zu bytes of shared memory per block; the "
                "convolution needs %d", device, prop.sharedMemPerBlockOptin, SMEM_MAX);
  if (!encode_tiled())
    return fail(err, errlen, "the driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)");
  cudaFuncAttributes fa;
  for (int k = 0; k < 16; k++) {
    kernel_fn f = k & 4 ? pick<true>(k & 1, k & 2, k & 8) : pick<false>(k & 1, k & 2, k & 8);
    if ((e = cudaFuncGetAttributes(&fa, (const void *)f)) != cudaSuccess) {
      cudaGetLastError();
      return fail(err, errlen, "the sm_90a convolution does not load on device %d: %s", device,
                  cudaGetErrorString(e));
    }
    const int need = handover_regs(halo_pass(k & 1, k & 4, k & 8)); /* as pick's variant */
    if (regs_fit(fa.numRegs, THREADS, need, "sm_90a convolution", err, errlen)) return -1;
  }
  return conv_wide_check(device, err, errlen); /* the wider layers' kernels */
}

extern "C" size_t conv_sm90_ws_bytes(int device)
{
  return ws_weights_offset(sm_count(device)) + W_BYTES;
}

/* The output-channel halves (params) for a forward of cin -> cout in `layout`: 2 for 64 -> 128
 * in COUT_M, 1 for 64 -> 64, 0 for the shapes the wide kernel takes (any other, or 64 -> 128 in
 * another layout). */
int fwd_halves(int cin, int cout, int layout)
{
  if (cin == C && cout == C) return 1;
  return cin == C && cout == 2 * C && layout == CONV_SM90_LAYOUT_COUT_M ? 2 : 0;
}

extern "C" int conv_sm90_fwd(const conv_sm90_fwd_t *a, char *err, size_t errlen)
{
  const int halves = fwd_halves(a->cin, a->cout, a->layout);
  if (!halves) return conv_wide_fwd(a, err, errlen); /* the wider layers */
  params p;
  int sms = 0;
  const int cm = layout_cm(a->layout, err, errlen);
  if (cm < 0) return -1;
  if (check_common("forward", a->n, a->h, a->w, a->cin, a->cout / halves, a->x, a->weight, a->y,
                   a->scale, a->shift, &p, &sms, err, errlen))
    return -1;
  /* 64 -> 128: a block's half is rows 64 h .. of the weights [128][9][64] (params) */
  p.halves = halves;
  p.wr_half = C;
  if (a->stats && !a->ws)
    return fail(err, errlen, "the sm_90 convolution's statistics need conv_sm90_ws_bytes() of "
                "workspace");
  cudaStream_t st = (cudaStream_t)a->stream;
  if (a->n == 0) { /* no pixels: zero sums, count 0 */
    if (a->stats) {
      cudaError_t e = cudaMemsetAsync(a->stats, 0, (2 * C * halves + 1) * sizeof(double), st);
      if (e != cudaSuccess)
        return fail(err, errlen, "clearing the statistics: %s", cudaGetErrorString(e));
    }
    return 0;
  }
  CUtensorMap m[4];
  if (map_image(&m[0], a->x, a->n, a->h, a->w, HALO_W, HALO_H, err, errlen) ||
      map_image_c(&m[1], a->y, a->n, a->h, a->w, C * halves, TILE_W, TILE_H, err, errlen) ||
      map_weights(&m[2], a->weight, C, C * halves, err, errlen))
    return -1;
  m[3] = m[1]; /* no x tile in the forward */
  p.partial = (double *)a->ws;
  const int grid = launch(pick<false>(a->scale != NULL, a->stats != NULL, cm),
                          cm ? lay<false, true>::smem : lay<false, false>::smem, m, p, sms, st,
                          err, errlen);
  if (grid < 0) return -1;
  if (a->stats) {
    conv_sm90_stats_kernel<<<sm90_final_blocks(PARTIAL * halves), SM90_FINAL_THREADS, 0, st>>>(
        p.partial, p.bph, halves, (double)a->n * a->h * a->w, a->stats);
    return launched("the sm_90 convolution's statistics", err, errlen);
  }
  return 0;
}

extern "C" int conv_sm90_dgrad(const conv_sm90_dgrad_t *a, char *err, size_t errlen)
{
  /* dgrad's output channels are the forward's input channels: 128 -> 64's dgrad (dy 64
   * channels, g 128) in halves of g's channels */
  const int halves = fwd_halves(a->cout, a->cin, a->layout);
  if (!halves) return conv_wide_dgrad(a, err, errlen); /* the wider layers */
  params p;
  int sms = 0;
  const int cm = layout_cm(a->layout, err, errlen);
  if (cm < 0) return -1;
  if (check_common("dgrad", a->n, a->h, a->w, a->cin / halves, a->cout, a->dy, a->weight, a->g,
                   a->scale, a->shift, &p, &sms, err, errlen))
    return -1;
  if (halves > 1 && (a->scale || a->sums))
    return fail(err, errlen, "the sm_90 dgrad of %d -> %d channels is plain: no mask, no sums",
                a->cin, a->cout);
  /* a block's half is input channels 64 h .. of the forward's weights [64][9][128]: tap t's box
   * at K coordinate t 128 + 64 h (params) */
  p.halves = halves;
  p.wk = C * halves;
  p.wk_half = C;
  if (!a->sums != !a->saved)
    return fail(err, errlen, "the sm_90 dgrad's sums need saved (mean, invstd) and sums "
                "together");
  if ((a->scale || a->sums) && (!a->x || !aligned16(a->x)))
    return fail(err, errlen, "the sm_90 dgrad's mask and sums need x in device memory on a "
                "16-byte boundary");
  if (!a->ws)
    return fail(err, errlen, "the sm_90 dgrad needs conv_sm90_ws_bytes() of workspace");
  cudaStream_t st = (cudaStream_t)a->stream;
  if (a->n == 0) { /* no pixels: zero sums */
    if (a->sums) {
      cudaError_t e = cudaMemsetAsync(a->sums, 0, 2 * C * sizeof(double), st);
      if (e != cudaSuccess)
        return fail(err, errlen, "clearing the sums: %s", cudaGetErrorString(e));
    }
    return 0;
  }
  /* PIXELS_M reads dgrad's weights flipped and transposed (made here in the workspace); COUT_M
   * transposes the forward's own as it loads them into registers (ldmatrix .trans, taps
   * reversed) */
  const void *wt = a->weight;
  if (!cm) {
    void *f = (char *)a->ws + ws_weights_offset(sms);
    flip_weights(a->weight, f, C, C, st); /* sm90_conv.cuh */
    if (launched("the sm_90 dgrad's weight flip", err, errlen)) return -1;
    wt = f;
  }
  CUtensorMap m[4];
  if (map_image(&m[0], a->dy, a->n, a->h, a->w, HALO_W, HALO_H, err, errlen) ||
      map_image_c(&m[1], a->g, a->n, a->h, a->w, C * halves, TILE_W, TILE_H, err, errlen) ||
      map_weights(&m[2], wt, C * halves, C, err, errlen))
    return -1;
  if (a->x && halves == 1) { /* the halves' dgrad has no x tile (plain) */
    if (map_image(&m[3], a->x, a->n, a->h, a->w, TILE_W, TILE_H, err, errlen)) return -1;
  } else {
    m[3] = m[1];
  }
  p.partial = (double *)a->ws;
  const int grid = launch(pick<true>(a->scale != NULL, a->sums != NULL, cm),
                          cm ? lay<true, true>::smem : lay<true, false>::smem, m, p, sms, st, err,
                          errlen);
  if (grid < 0) return -1;
  if (a->sums) {
    conv_sm90_dgrad_sums_kernel<<<sm90_final_blocks(C), SM90_FINAL_THREADS, 0, st>>>(
        p.partial, grid, a->saved, a->sums);
    return launched("the sm_90 dgrad's sums", err, errlen);
  }
  return 0;
}
