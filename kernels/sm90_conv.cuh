/* sm90_conv.cuh — device code the Hopper convolutions (kernels/conv_sm90_cuda.cu, forward and
 * dgrad; kernels/conv_sm90_wgrad_cuda.cu) share beyond the instructions of sm90_ptx.cuh: the
 * prologue's pass over a halo of 64-channel pixel lines, the previous layer's BatchNorm apply +
 * ReLU in place, a = bf16(max(0, x * scale + shift)), on the lines inside the image (those
 * outside stay the copy engine's zeros: the padding is zero after the BN); dgrad's flipped,
 * transposed weights; and the final sums of the blocks' partials (statistics, sums, weight
 * gradients) in partial order. */
#ifndef KERNELS_SM90_CONV_CUH
#define KERNELS_SM90_CONV_CUH

#include "kernels/conv_sm90_tile.h"
#include "kernels/sm90_ptx.cuh"

namespace sm90 {

/* The coefficients of channel chunk lc (channels 8 lc .. 8 lc + 7). */
__device__ __forceinline__ void bn_coef_load(const float *scale, const float *shift, int lc,
                                             float (&sc)[8], float (&sh)[8])
{
#pragma unroll
  for (int e = 0; e < 8; e++) {
    sc[e] = __ldg(scale + 8 * lc + e);
    sh[e] = __ldg(shift + 8 * lc + e);
  }
}

/* The pass over one halo of `lines` lines, `halo_w` pixels a row, whose line 0 is pixel
 * (y0, x0) of an h x w image: the thread takes chunk lc of lines first, first + step, ..., U
 * lines in flight (more hide more of the shared-memory latency, at 4 registers a line). The
 * lines' rows and columns come from a walk (conv_sm90_tile.h sm90_walk_t: no division a line).
 * A pair is rounded to bf16 first and the ReLU taken on the pair (__hmax2 with zero: one
 * instruction for two values). The bits are those of the ReLU before the rounding: rounding
 * keeps the sign, __hmax2 takes +0 over -0 and the number over a NaN (as fmaxf does).
 * The caller fences (fence.proxy.async) before the copy engine or wgmma reads. */
template <int U = 2>
__device__ __forceinline__ void bn_relu_halo(uint32_t stage, int lines, int halo_w, int y0, int x0,
                                             int h, int w, int first, int step, int lc,
                                             const float (&sc)[8], const float (&sh)[8])
{
  const __nv_bfloat162 zero = __floats2bfloat162_rn(0.f, 0.f);
  sm90_walk_t k = sm90_walk_start(first, step, halo_w);
  while (k.l < lines) {
    uint32_t v[U][4], addr[U];
    bool in[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      in[u] = k.l < lines && (unsigned)(y0 + k.row) < (unsigned)h &&
              (unsigned)(x0 + k.col) < (unsigned)w;
      addr[u] = stage + swz((uint32_t)k.l, (uint32_t)lc);
      if (in[u]) ld_shared_v4(addr[u], v[u]);
      sm90_walk_next(&k);
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      if (in[u]) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const float lo = fmaf(bf16_lo(v[u][q]), sc[2 * q], sh[2 * q]);
          const float hi = fmaf(bf16_hi(v[u][q]), sc[2 * q + 1], sh[2 * q + 1]);
          const __nv_bfloat162 r = __hmax2(__floats2bfloat162_rn(lo, hi), zero);
          v[u][q] = *reinterpret_cast<const uint32_t *>(&r);
        }
        st_shared_v4(addr[u], v[u]);
      }
  }
}

/* dgrad's epilogue step for one packed pair of values: r holds bf16(acc) of both halves, xv the
 * forward input x at the same places. MASK: each half is zeroed unless x * sc + sh > 0 with that
 * half's coefficients (two f32 roundings, as bn_apply forms v: the forward's own decision);
 * SUMS: each kept value g and g * x (exact: bf16 times bf16) join that half's f32 sums where its
 * pixel lies inside the image (in0, in1). A pair is two channels of one pixel (pixels as M) or
 * two pixels of one channel (output channels as M: one channel's coefficients and sums, passed
 * for both halves). */
template <bool MASK, bool SUMS>
__device__ __forceinline__ void dgrad_pair(uint32_t &r, uint32_t xv, float sc0, float sh0,
                                           float sc1, float sh1, bool in0, bool in1, float &s1a,
                                           float &s2a, float &s1b, float &s2b)
{
  const float x0 = bf16_lo(xv), x1 = bf16_hi(xv);
  if (MASK) {
    const float v0 = __fadd_rn(__fmul_rn(x0, sc0), sh0);
    const float v1 = __fadd_rn(__fmul_rn(x1, sc1), sh1);
    r = (v0 > 0.f ? r & 0xffffu : 0u) | (v1 > 0.f ? r & 0xffff0000u : 0u);
  }
  if (SUMS) {
    const float g0 = in0 ? bf16_lo(r) : 0.f, g1 = in1 ? bf16_hi(r) : 0.f;
    s1a += g0;
    s2a = fmaf(g0, x0, s2a);
    s1b += g1;
    s2b = fmaf(g1, x1, s2b);
  }
}

/* The final sums of the blocks' partials: element i of n partials laid out `stride` apart, added
 * in partial order onto v, starting at partial b. The order makes each element one chain of
 * dependent adds, but not its loads: SM90_REDUCE_U of them go out before they are added, so a
 * thread keeps that many in flight (the plain loop kept one to four). */
constexpr int SM90_REDUCE_U = 16, SM90_REDUCE_THREADS = 128;

template <typename T>
__device__ __forceinline__ T sum_partials_onto(T v, const T *p, int b, int n, size_t stride,
                                               size_t i)
{
  for (; b + SM90_REDUCE_U <= n; b += SM90_REDUCE_U) {
    T t[SM90_REDUCE_U];
#pragma unroll
    for (int u = 0; u < SM90_REDUCE_U; u++) t[u] = __ldcs(p + (size_t)(b + u) * stride + i);
#pragma unroll
    for (int u = 0; u < SM90_REDUCE_U; u++) v += t[u];
  }
  for (; b < n; b++) v += __ldcs(p + (size_t)b * stride + i);
  return v;
}

/* The weight gradients': ((p[0] + p[1]) + p[2]) + ... (the CPU reference's order, so the same
 * bits). */
__device__ __forceinline__ float sum_partials(const float *p, int n, size_t stride, size_t i)
{
  return sum_partials_onto(p[i], p, 1, n, stride, i);
}

/* dW[i] = the n partials of `count` floats added in order (sum_partials), SM90_REDUCE_THREADS a
 * block: more, smaller blocks spread the few thousand threads over every multiprocessor. */
static __global__ void __launch_bounds__(SM90_REDUCE_THREADS)
    wgrad_reduce_kernel(const float *partial, int n, size_t count, float *dw)
{
  const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) dw[i] = sum_partials(partial, n, count, i);
}

/* Queues that sum on st; the caller checks the launch. */
static inline void wgrad_reduce(const float *partial, int n, size_t count, float *dw,
                                cudaStream_t st)
{
  wgrad_reduce_kernel<<<(unsigned)((count + SM90_REDUCE_THREADS - 1) / SM90_REDUCE_THREADS),
                        SM90_REDUCE_THREADS, 0, st>>>(partial, n, count, dw);
}

/* The statistics' and sums' final sum, f64, of element i of n partials `stride` apart, by a
 * group of SM90_FINAL_LANES adjacent lanes: lane r of the group adds partials r, r + L, r + 2L,
 * ... in that order (SM90_REDUCE_U loads in flight), then an xor butterfly adds the group's L
 * sums, which leaves every lane of the group the same bits (each step adds two sums that the
 * partner lane adds the other way round, and f64 addition commutes). A fixed order, so reruns
 * repeat bit for bit. One thread walking all 132 partials of a block took 9 dependent round
 * trips at sixteen loads in flight; a lane of eight walks 17, two round trips. Every lane of the
 * warp calls it (the shuffles); where `valid` is false it adds nothing. */
constexpr int SM90_FINAL_LANES = 8, SM90_FINAL_THREADS = 256;

__device__ __forceinline__ double sum_partials_f64(const double *p, int n, size_t stride,
                                                   size_t i, int r, bool valid)
{
  constexpr int L = SM90_FINAL_LANES;
  double v = 0;
  if (valid) {
    int b = r;
    for (; b + (SM90_REDUCE_U - 1) * L < n; b += SM90_REDUCE_U * L) {
      double t[SM90_REDUCE_U];
#pragma unroll
      for (int u = 0; u < SM90_REDUCE_U; u++) t[u] = __ldcs(p + (size_t)(b + u * L) * stride + i);
#pragma unroll
      for (int u = 0; u < SM90_REDUCE_U; u++) v += t[u];
    }
    for (; b < n; b += L) v += __ldcs(p + (size_t)b * stride + i);
  }
#pragma unroll
  for (int m = 1; m < L; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

/* Blocks of SM90_FINAL_THREADS for `values` final sums, SM90_FINAL_LANES threads each. */
__host__ __device__ constexpr int sm90_final_blocks(int values)
{
  return (values * SM90_FINAL_LANES + SM90_FINAL_THREADS - 1) / SM90_FINAL_THREADS;
}

/* dgrad's weights: wt[ci][8 - t][co] = w[co][t][ci], the forward's taps flipped and the two
 * channel axes swapped, so that dgrad is the forward's convolution of dy with wt (cin, cout
 * multiples of 64). Per tap a cout x cin matrix transposed in 64 x 64 tiles through shared
 * memory (block (ci tile, co tile, tap), 64 x 4 threads), so that both the reads (rows of w) and
 * the writes (rows of wt) are runs of 64 elements: element by element, the writes land 18 cout
 * bytes apart and each costs a memory sector of its own (at 1024 -> 1024 that took longer than
 * the convolution). The tile's rows are padded by one element. Internal linkage: each kernel
 * file has its own. */
constexpr int FLIP_T = 64, FLIP_ROWS = 4;
static __global__ void __launch_bounds__(FLIP_T *FLIP_ROWS)
    flip_weights_kernel(const uint16_t *w, uint16_t *wt, int cin, int cout)
{
  __shared__ uint16_t tile[FLIP_T][FLIP_T + 1];
  const int ci0 = FLIP_T * (int)blockIdx.x, co0 = FLIP_T * (int)blockIdx.y, t = (int)blockIdx.z;
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  for (int r = ty; r < FLIP_T; r += FLIP_ROWS) /* row co0 + r of tap t: cin elements */
    tile[r][tx] = w[((size_t)(co0 + r) * 9 + t) * cin + ci0 + tx];
  __syncthreads();
  for (int r = ty; r < FLIP_T; r += FLIP_ROWS) /* row ci0 + r of tap 8 - t: cout elements */
    wt[((size_t)(ci0 + r) * 9 + (8 - t)) * cout + co0 + tx] = tile[tx][r];
}

/* Queues the flip of w ([cout][3][3][cin] bf16) into wt on st; the caller checks the launch. */
static inline void flip_weights(const void *w, void *wt, int cin, int cout, cudaStream_t st)
{
  flip_weights_kernel<<<dim3((unsigned)(cin / FLIP_T), (unsigned)(cout / FLIP_T), 9),
                        dim3(FLIP_T, FLIP_ROWS), 0, st>>>((const uint16_t *)w, (uint16_t *)wt,
                                                          cin, cout);
}

} // namespace sm90

#endif
