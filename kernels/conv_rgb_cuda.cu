/* conv_rgb_cuda.cu — the 3x3 convolution of the few-channel input (the U-Net's RGB layer: 3 -> 64
 * channels) as own tensor-core kernels, 16-bit types here (f32: conv_rgb_tf32_cuda.cu). Its 27
 * taps are one K = 32 step of the tensor cores, so the layer is bound by the 50 MB it writes (forward) or reads (weight
 * gradient); cuDNN on channels zero-padded to 8 ran it far below the copy ceiling (see
 * bench/results/roofline_1xh200.md). Direct kernels on the CUDA cores lost to it (see
 * bench/results/ops_cuda_1xh200.txt, 81124df): here the arithmetic is the tensor cores' (f32
 * accumulation).
 *
 * Pixels go in groups of 16, flat over n, h, w: a group may span rows and images. A tap is (ky *
 * 3 + kx) * cin + ci, zero past 9 cin and outside the image. A warp works on a group at a time
 * with mma.sync m16n8k16 (f32 accumulation), its im2col fragments gathered from the input
 * straight into registers.
 *   forward      Y[pixel][k] = A W^T, A[pixel][tap] the im2col matrix, W[k][tap] the weights
 *                ([cout][3][3][cin], ops.h): results rounded and stored from the accumulators,
 *                no shared memory between input and output (see rgb_fwd).
 *   weight grad  dW^T[tap][k] = A^T dY over the block's fixed range of groups, dY's fragments
 *                by ldmatrix .trans from rows copied into shared memory, accumulated in
 *                registers across the groups (see rgb_wgrad_part); f32 partials per block in
 *                the workspace, then a warp per output adds them in block order. The split
 *                depends on the pixel count and the GPU only: results repeat bit for bit.
 *   forward with statistics (the fused engine's first block, ops.h conv_fwd_fused): the
 *                forward, and per output channel Σ y and Σ y² of the rounded values it writes,
 *                BatchNorm's statistics, so no pass reads y again for them: each lane sums its
 *                channels over at most 16 groups in f32 (more blocks than one wave where the
 *                image needs them), the block adds its lanes and warps in f64 in a fixed order
 *                into its partial, and a warp per value adds the partials in a fixed order. The
 *                split depends on the pixel count and the GPU: bit for bit.
 * The input gradient of this layer stays on cuDNN (the trainer never asks for it). */
#include "config.h"

#include <type_traits>

#include "kernels/conv_rgb.cuh"
#include "shm/env.h"

int opc_rgb_enabled(const ops_t *o, const ops_conv_t *c)
{
  if (shm_env_is("SHMDDP_CONV_PAD", "0")) return 0; /* the layer on cuDNN at its own width */
  /* f32 on the TF32 kernels only where TF32 is allowed (SHMDDP_TF32=0 keeps cuDNN's FMA) */
  const int type_ok = o->dtype == OPS_BF16 || o->dtype == OPS_F16 ||
                      (o->dtype == OPS_F32 && opc_ctx(o)->tf32);
  return c->kind == OPS_CONV3X3 && type_ok && c->cin <= 3 && c->cout % 16 == 0 &&
         c->cout <= RGB_MAX_COUT;
}

size_t opc_rgb_ws(const ops_t *o, const ops_conv_t *c)
{
  return (size_t)RGB_BLOCKS_PER_SM * opc_ctx(o)->sm_count * c->cout * 9 * c->cin * sizeof(float);
}

/* ---- forward ---- */

/* d += a b on the tensor cores: one m16n8k16 product of 16-bit operands with f32 accumulation
 * (PTX mma.sync; the fragments' layouts are the PTX ISA's for that shape). */
template <typename T>
static __device__ __forceinline__ void rgb_mma(float (&d)[4], const uint32_t (&a)[4], uint2 b)
{
  if constexpr (std::is_same<T, __half>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

template <typename T>
static __device__ __forceinline__ uint32_t rgb_round_pair(float lo, float hi, float &rlo,
                                                          float &rhi)
{
  const T a = opc_st<T>(lo), b = opc_st<T>(hi);
  rlo = opc_ld(a), rhi = opc_ld(b);
  return rgb_pair(*reinterpret_cast<const unsigned short *>(&a),
                  *reinterpret_cast<const unsigned short *>(&b));
}

/* The forward works on groups of 16 pixels (flat over n, h, w: a group may span rows and
 * images), a warp per group, with no shared memory between the input and the output: lane l
 * (g = l / 4, t = l % 4) gathers the A fragments of pixels g and g + 8 of the group straight
 * from the input, taps 16 s + 2 t + {0, 1, 8, 9} of k-step s (8 taps of the 27, zero past
 * them and outside the image), the mma.sync products run over the cout / 8 column tiles of the
 * weights, and each lane rounds its accumulators, channels 8 j + 2 t and 8 j + 2 t + 1 of its
 * two pixels, into 4-byte pairs. Where the tiles come in fours (cout 32, 64) the quad transposes
 * each four's pairs (rgb_quad_transpose) so that a lane stores a whole tile of a pixel, 8
 * channels, as one 16-byte access: 4-byte stores reached L2 as partial sectors, four times the
 * requests, and bound the kernel there (bench/results/ab_rgb_mma_regs_1xh100.txt). The weights' B
 * fragments sit in shared memory in lane order, one 8-byte read a product. A warp gathers its
 * next group's taps before it works on the current one, so their loads overlap its products
 * and stores.
 * With statistics each lane sums the rounded values of its 16 channels in f32 over at most
 * RGB_GROUPS_MOST groups (32 values: the block count keeps it so), then in f64: the 8 lanes of a
 * channel by a fixed butterfly, the block's warps in warp order into the block's partial. */
#define RGB_GROUPS_MOST 16        /* groups a warp at most with statistics */

/* A 4 x 4 transpose of 32-bit words across a quad (lanes 4 g .. 4 g + 3, t = lane % 4): after it
 * lane t holds u[s] = lane s's u[t] before. Two exchanges, on bit 1 of the lane and then bit 0:
 * a lane swaps with its partner the two words whose position differs from the lane in that bit. */
static __device__ __forceinline__ void rgb_quad_transpose(uint32_t (&u)[4], int t)
{
#pragma unroll
  for (int b = 1; b >= 0; b--) {
    const int m = 1 << b, own = (t >> b) & 1;
#pragma unroll
    for (int k = 0; k < 2; k++) {
      const int lo = b ? k : 2 * k, hi = lo | m; /* the positions whose other bit is k */
      const uint32_t got = __shfl_xor_sync(0xffffffffu, own ? u[lo] : u[hi], m);
      if (own) u[lo] = got;
      else u[hi] = got;
    }
  }
}

/* With STATS, part[blockIdx.x][0 .. 2 cout): the block's Σ y and Σ y² per channel (f64). Two
 * blocks a multiprocessor (at most 128 registers): with no bound ptxas spilled the one-input
 * variant at 48. */
template <typename T, int CIN, bool STATS>
__global__ void __launch_bounds__(RGB_THREADS, 2) rgb_fwd(const T *x, const T *w, T *y, size_t P,
                                                       int Hh, int Ww, int cout, double *part)
{
  /* the B fragments [k-step][column tile][lane]; with STATS, the warps' f64 sums after them */
  __shared__ uint2 sb[2][RGB_NT][32];
  __shared__ double red[STATS ? RGB_WARPS : 1][STATS ? 2 * RGB_MAX_COUT : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nt = cout / 8;
  for (int i = threadIdx.x; i < 2 * RGB_NT * 32; i += blockDim.x) {
    /* lane l's b0, b1 of k-step s, tile j: taps 16 s + 2 (l % 4) + {0, 1} and {8, 9}, channel
     * 8 j + l / 4 */
    const int s = i / (RGB_NT * 32), j = i / 32 % RGB_NT, l = i % 32, k = 8 * j + l / 4;
    unsigned short e[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const int tap = 16 * s + 2 * (l % 4) + (u & 1) + 8 * (u >> 1);
      const T v = tap < 9 * CIN && k < cout ? w[(size_t)k * 9 * CIN + tap] : opc_st<T>(0.f);
      e[u] = *reinterpret_cast<const unsigned short *>(&v);
    }
    sb[s][j][l] = make_uint2(rgb_pair(e[0], e[1]), rgb_pair(e[2], e[3]));
  }
  /* the lane's 8 taps: i = 4 s + u, tap 16 s + 2 t + (u & 1) + 8 (u >> 1) (rgb_gather's code) */
  int off[8];
  const unsigned code = rgb_taps<CIN, 8>(
      Ww, [t](int i) { return 16 * (i >> 2) + 2 * t + (i & 1) + 8 * ((i >> 1) & 1); }, off);
  __syncthreads();
  const unsigned short *xs = reinterpret_cast<const unsigned short *>(x);
  const size_t groups = (P + 15) / 16, nw = (size_t)gridDim.x * RGB_WARPS;
  size_t grp = (size_t)blockIdx.x * RGB_WARPS + warp;
  float s1[RGB_NT][2], s2[RGB_NT][2]; /* STATS: channels 8 j + 2 t + e */
#pragma unroll
  for (int j = 0; j < RGB_NT; j++) s1[j][0] = s1[j][1] = s2[j][0] = s2[j][1] = 0.f;
  unsigned short va[8], vb[8]; /* the taps of pixels g and g + 8 of the group */
  size_t pa = grp * 16 + g, pb = pa + 8;
  if (grp < groups) {
    rgb_gather<CIN, 8>(xs, pa, rgb_locate(pa, P, Hh, Ww), code, off, va);
    rgb_gather<CIN, 8>(xs, pb, rgb_locate(pb, P, Hh, Ww), code, off, vb);
  }
  for (; grp < groups; grp += nw) {
    uint32_t a[2][4];
#pragma unroll
    for (int s = 0; s < 2; s++) {
      a[s][0] = rgb_pair(va[4 * s], va[4 * s + 1]);
      a[s][1] = rgb_pair(vb[4 * s], vb[4 * s + 1]);
      a[s][2] = rgb_pair(va[4 * s + 2], va[4 * s + 3]);
      a[s][3] = rgb_pair(vb[4 * s + 2], vb[4 * s + 3]);
    }
    const size_t ca = pa, cb = pb;
    const bool oka = ca < P, okb = cb < P;
    /* the next group's taps, in flight while this one is multiplied and stored */
    pa += nw * 16, pb += nw * 16;
    if (grp + nw < groups) {
      rgb_gather<CIN, 8>(xs, pa, rgb_locate(pa, P, Hh, Ww), code, off, va);
      rgb_gather<CIN, 8>(xs, pb, rgb_locate(pb, P, Hh, Ww), code, off, vb);
    }
#pragma unroll
    for (int q = 0; q < RGB_NT / 4; q++) { /* column tiles 4 q .. 4 q + 3 */
      if (4 * q >= nt) break;
      uint32_t wa[4], wb[4]; /* pixel a's and b's channels 8 j + 2 t, + 1 of tile j = 4 q + u */
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const int j = 4 * q + u;
        wa[u] = wb[u] = 0;
        if (j >= nt) continue;
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        rgb_mma<T>(d, a[0], sb[0][j][lane]);
        rgb_mma<T>(d, a[1], sb[1][j][lane]);
        float r[4];
        wa[u] = rgb_round_pair<T>(d[0], d[1], r[0], r[1]);
        wb[u] = rgb_round_pair<T>(d[2], d[3], r[2], r[3]);
        if (STATS) {
          /* rows past P are zero: they add nothing */
          s1[j][0] += r[0] + r[2];
          s1[j][1] += r[1] + r[3];
          s2[j][0] = fmaf(r[0], r[0], fmaf(r[2], r[2], s2[j][0]));
          s2[j][1] = fmaf(r[1], r[1], fmaf(r[3], r[3], s2[j][1]));
        }
      }
      if (nt % 4 == 0) {
        /* whole tiles of four: the quad's words transposed, lane t stores tile 4 q + t of each
         * pixel, 8 channels, as one 16-byte access */
        rgb_quad_transpose(wa, t);
        rgb_quad_transpose(wb, t);
        const int ch = 8 * (4 * q + t);
        if (oka)
          *reinterpret_cast<uint4 *>(y + ca * cout + ch) = make_uint4(wa[0], wa[1], wa[2], wa[3]);
        if (okb)
          *reinterpret_cast<uint4 *>(y + cb * cout + ch) = make_uint4(wb[0], wb[1], wb[2], wb[3]);
      } else {
#pragma unroll
        for (int u = 0; u < 4; u++) {
          const int ch = 8 * (4 * q + u) + 2 * t;
          if (4 * q + u >= nt) break;
          if (oka) *reinterpret_cast<uint32_t *>(y + ca * cout + ch) = wa[u];
          if (okb) *reinterpret_cast<uint32_t *>(y + cb * cout + ch) = wb[u];
        }
      }
    }
  }
  if (STATS) {
    /* the 8 lanes of each channel (same t) by a fixed butterfly, then the warps in order */
#pragma unroll
    for (int j = 0; j < RGB_NT; j++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        double u = s1[j][e], v = s2[j][e];
#pragma unroll
        for (int m = 4; m < 32; m <<= 1) {
          u += __shfl_xor_sync(0xffffffffu, u, m);
          v += __shfl_xor_sync(0xffffffffu, v, m);
        }
        const int ch = 8 * j + 2 * t + e;
        if (g == 0 && j < nt) red[warp][ch] = u, red[warp][cout + ch] = v;
      }
    __syncthreads();
    for (int v = threadIdx.x; v < 2 * cout; v += blockDim.x) {
      double s = 0.0;
      for (int k = 0; k < RGB_WARPS; k++) s += red[k][v];
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

/* Four 8 x 8 matrices of 16-bit values from shared memory, transposed (lane l gives the address
 * of row l % 8 of matrix l / 8; lane (g, t) gets rows 2 t, 2 t + 1 of column g of each). */
static __device__ __forceinline__ void rgb_ldmatrix_trans(uint32_t addr, uint32_t (&r)[4])
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

/* The weight gradient as dW^T[tap][k] = Σ_p A[p][tap] dY[p][k]: M = the taps (two tiles of 16),
 * N = the cout channels (tiles of 8), K = a group's 16 pixels; a warp per group, a block's
 * warps over its fixed range of groups. Lane (g, t) gathers its A^T fragments straight from the
 * input: taps 16 m + g and 16 m + g + 8 of the group's pixels 2 t, 2 t + 1, 2 t + 8, 2 t + 9
 * (rgb_gather's nibbles, four taps a pixel). The group's dY rows go to the warp's own shared
 * buffer by 16-byte asynchronous copies, a pixel's row of 8 chunks of 8 channels at chunk c ^
 * (pixel % 8) so that the 8 rows of one ldmatrix fall on different banks, and its B fragments
 * come out by ldmatrix .trans (lane (g, t): pixels 2 t, 2 t + 1 of channel g). Two buffers: the
 * next group's copies and gathers are in flight while this one is multiplied. The accumulators
 * stay in registers across the warp's groups; then the block adds its warps' in warp order in
 * shared memory and writes its f32 partial ([cout][taps]), which rgb_wgrad_final adds in block
 * order. The split depends on the pixel count and the GPU only: bit for bit. */
#define RGB_WG_ROW 128 /* bytes of a pixel's staged dY row: 64 channels, 8 chunks of 16 bytes */

template <typename T, int CIN>
__global__ void __launch_bounds__(RGB_THREADS, 2)
    rgb_wgrad_part(const T *x, const T *dy, float *part, size_t P, int Hh, int Ww, int cout,
                   size_t per)
{
  /* per warp two buffers of 16 pixels; after the loop, the block's sums [tap][k] */
  __shared__ __align__(128) unsigned char stage[RGB_WARPS][2][16 * RGB_WG_ROW];
  static_assert(sizeof stage >= RGB_K * RGB_MAX_COUT * sizeof(float), "the sums fit the buffers");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nt = cout / 8; /* column tiles, and 16-byte chunks of a pixel's dY row */
  /* the lane's 4 taps 16 m + g + 8 h (i = 2 m + h) as rgb_gather nibbles, for each of its pixels */
  int off[4];
  const unsigned code =
      rgb_taps<CIN, 4>(Ww, [g](int i) { return 16 * (i >> 1) + g + 8 * (i & 1); }, off);
  const unsigned short *xs = reinterpret_cast<const unsigned short *>(x);
  const size_t groups = (P + 15) / 16;
  /* group numbers fit 32 bits (wgrad_cin checks): fewer registers than size_t, no spills */
  const unsigned g0 = (unsigned)(blockIdx.x * per);
  const unsigned g1 = (unsigned)(g0 + per < groups ? g0 + per : groups);
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(&stage[warp][0][0]);
  /* the group's copies into buffer b: chunk q = pixel * chunks + c, lane q, q + 32, ... */
  auto copy_group = [&](unsigned grp, int b) {
    const size_t p0 = (size_t)grp * 16;
    for (int q = lane; q < 16 * nt; q += 32) {
      const int px = q / nt, c = q % nt;
      const bool in = p0 + px < P;
      const T *src = dy + (in ? (p0 + px) * cout + 8 * c : 0);
      opc_copy16(sbase + b * 16 * RGB_WG_ROW + px * RGB_WG_ROW + ((c ^ (px & 7)) << 4), src,
                 in ? 16 : 0);
    }
    opc_copy_commit();
  };
  /* the lane's 4 taps of each of its pixels 2 t, 2 t + 1, 2 t + 8, 2 t + 9 (v[k][i]) */
  auto gather_group = [&](unsigned grp, unsigned short(&v)[4][4]) {
    const size_t p = (size_t)grp * 16 + 2 * t;
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const size_t pk = p + (k & 1) + 8 * (k >> 1);
      rgb_gather<CIN, 4>(xs, pk, rgb_locate(pk, P, Hh, Ww), code, off, v[k]);
    }
  };
  float acc[2][RGB_NT][4];
#pragma unroll
  for (int m = 0; m < 2; m++)
#pragma unroll
    for (int j = 0; j < RGB_NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
  unsigned short v[4][4];
  unsigned grp = g0 + warp;
  int buf = 0;
  if (grp < g1) {
    copy_group(grp, 0);
    gather_group(grp, v);
  }
  for (; grp < g1; grp += RGB_WARPS, buf ^= 1) {
    /* A^T fragments of tile m: (tap 16 m + g, pixels 2 t, 2 t + 1), (tap + 8, the same),
     * (tap, pixels 2 t + 8, 2 t + 9), (tap + 8, those) */
    uint32_t a[2][4];
#pragma unroll
    for (int m = 0; m < 2; m++) {
      a[m][0] = rgb_pair(v[0][2 * m], v[1][2 * m]);
      a[m][1] = rgb_pair(v[0][2 * m + 1], v[1][2 * m + 1]);
      a[m][2] = rgb_pair(v[2][2 * m], v[3][2 * m]);
      a[m][3] = rgb_pair(v[2][2 * m + 1], v[3][2 * m + 1]);
    }
    __syncwarp(); /* every lane has read the other buffer (the previous group) */
    if (grp + RGB_WARPS < g1) {
      copy_group(grp + RGB_WARPS, buf ^ 1);
      gather_group(grp + RGB_WARPS, v);
      opc_copy_wait<1>();
    } else {
      opc_copy_wait<0>();
    }
    __syncwarp(); /* the group's rows, copied by every lane, are in the buffer */
    const uint32_t bb = sbase + buf * 16 * RGB_WG_ROW;
#pragma unroll
    for (int j = 0; j < RGB_NT; j += 2) {
      if (j >= nt) break;
      /* matrices: tile j pixels 0-7, tile j pixels 8-15, tile j + 1 the same */
      const int mi = lane >> 3, px = (mi & 1) * 8 + (lane & 7), c = j + (mi >> 1);
      uint32_t r[4];
      rgb_ldmatrix_trans(bb + px * RGB_WG_ROW + ((c ^ (px & 7)) << 4), r);
#pragma unroll
      for (int m = 0; m < 2; m++) {
        rgb_mma<T>(acc[m][j], a[m], make_uint2(r[0], r[1]));
        rgb_mma<T>(acc[m][j + 1], a[m], make_uint2(r[2], r[3]));
      }
    }
  }
  /* the block's warps added in warp order into sums[tap][k] (the buffers are free now) */
  __syncthreads();
  rgb_wgrad_block_sum<2, CIN>(acc, reinterpret_cast<float(*)[RGB_MAX_COUT]>(&stage[0][0][0]),
                              part, cout);
}

/* ---- launches ---- */

/* The forward's grid: one wave of the blocks that fit, at most one a RGB_WARPS groups; with the
 * statistics at least one a RGB_WARPS RGB_GROUPS_MOST groups (each warp's f32 sums then run over
 * at most 32 values a channel). */
template <typename T, int CIN, bool STATS>
static size_t fwd_blocks(const ops_t *o, size_t P)
{
  const size_t groups = (P + 15) / 16;
  const size_t need = (groups + RGB_WARPS - 1) / RGB_WARPS;
  const size_t most =
      (size_t)opc_fit_blocks((const void *)rgb_fwd<T, CIN, STATS>) * opc_ctx(o)->sm_count;
  const size_t nb = need < most ? need : most;
  const size_t least = (groups + RGB_WARPS * RGB_GROUPS_MOST - 1) / (RGB_WARPS * RGB_GROUPS_MOST);
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
  const size_t groups = (P + 15) / 16;
  if (groups + RGB_WARPS > 0xffffffffu)
    return opc_fail(o, "the few-channel weight gradient takes at most 2^36 pixels, not %zu", P);
  int fit = opc_fit_blocks((const void *)rgb_wgrad_part<T, CIN>);
  size_t most = (size_t)(fit < RGB_BLOCKS_PER_SM ? fit : RGB_BLOCKS_PER_SM) * opc_ctx(o)->sm_count;
  size_t nb = (groups + RGB_WARPS - 1) / RGB_WARPS;
  if (nb > most) nb = most;
  if (nb < 1) nb = 1;
  const size_t per = (groups + nb - 1) / nb;
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
  case OPS_F32: return opc_rgb_tf32_fwd(o, c, P, x, w, y);
  default: return opc_fail(o, "the few-channel 3x3 kernels take bf16, f16 and f32 only");
  }
}

int opc_rgb_stats_covered(const ops_t *o, const ops_conv_t *c)
{
  return opc_rgb_enabled(o, c) && o->dtype != OPS_F32 && RGB_THREADS % (c->cout / 8) == 0;
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
  default: return opc_fail(o, "the few-channel forward with statistics takes bf16 and f16 only");
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
  case OPS_F32: return opc_rgb_tf32_bwd_filter(o, c, P, x, dy, dw, acc, ws);
  default: return opc_fail(o, "the few-channel 3x3 kernels take bf16, f16 and f32 only");
  }
}
