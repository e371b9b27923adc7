/* conv_rgb.cuh — what the few-channel 3x3 kernels share (conv_rgb_cuda.cu for 16-bit types,
 * conv_rgb_tf32_cuda.cu for f32 on TF32 tensor cores): their sizes, the pixel's position and its
 * taps' gather straight from the input, asynchronous 16-byte copies, and the weight gradient's
 * final sum over the blocks' partials. Device code; included by those two files only. */
#ifndef KERNELS_CONV_RGB_CUH
#define KERNELS_CONV_RGB_CUH

#include "kernels/ops_cuda.cuh"

#define RGB_K 32       /* taps, padded */
#define RGB_MAX_COUT 64
#define RGB_THREADS 256 /* 8 warps */
#define RGB_BLOCKS_PER_SM 4 /* weight gradient: partials in the workspace for this many */

#define RGB_WARPS (RGB_THREADS / 32)
#define RGB_NT (RGB_MAX_COUT / 8) /* column tiles of 8 channels */

/* Two 16-bit values as one 32-bit fragment register, lo in the low half. */
static __device__ __forceinline__ uint32_t rgb_pair(unsigned short lo, unsigned short hi)
{
  return (uint32_t)lo | (uint32_t)hi << 16;
}

/* Which of the pixel's neighbouring rows and columns lie in the image: bit k of rows (cols) for
 * the row (column) offset k - 1, k = 0, 1, 2; both 0 where the pixel does not exist (p >= P). */
struct rgb_px {
  unsigned rows, cols;
};

static __device__ __forceinline__ rgb_px rgb_locate(size_t p, size_t P, int Hh, int Ww)
{
  rgb_px r = {0u, 0u};
  if (p < P) {
    size_t rem;
    if (P <= 0xffffffffu) rem = (unsigned)p % ((unsigned)Hh * (unsigned)Ww);
    else rem = p % ((size_t)Hh * Ww);
    const unsigned yy = (unsigned)rem / (unsigned)Ww, xx = (unsigned)rem - yy * (unsigned)Ww;
    r.rows = 2u | (yy > 0 ? 1u : 0u) | (yy + 1 < (unsigned)Hh ? 4u : 0u);
    r.cols = 2u | (xx > 0 ? 1u : 0u) | (xx + 1 < (unsigned)Ww ? 4u : 0u);
  }
  return r;
}

/* The lane's N taps of pixel p into v (the bits of a 16-bit T as unsigned short, or f32; zero outside the image or past 9 CIN). Tap i's
 * offsets are the nibble i of code: row offset + 1 in its bits 0-1, column offset + 1 in bits
 * 2-3; 0xf for a tap past 9 CIN (rows has no bit 3). off[i]: its element offset from p's. */
template <int CIN, int N, typename E>
static __device__ __forceinline__ void rgb_gather(const E *x, size_t p, rgb_px q, unsigned code,
                                                  const int (&off)[N], E (&v)[N])
{
#pragma unroll
  for (int i = 0; i < N; i++) {
    const unsigned c = code >> (4 * i);
    const bool in = (q.rows >> (c & 3u)) & (q.cols >> ((c >> 2) & 3u)) & 1u;
    v[i] = in ? x[(ptrdiff_t)(p * CIN) + off[i]] : (E)0;
  }
}

/* The weight gradient's block partial: the warps' accumulators (M = the taps in MT tiles of 16,
 * N = the channels; lane 4 g + t holds tap 16 m + g (+ 8) and channels 8 j + 2 t, + 1) added in
 * warp order into sums[tap][k], then written to the block's part as [k][tap]. Every thread of
 * the block calls it; sums is free shared memory of 16 MT rows. */
template <int MT, int CIN>
static __device__ __forceinline__ void rgb_wgrad_block_sum(const float (&acc)[MT][RGB_NT][4],
                                                           float (*sums)[RGB_MAX_COUT],
                                                           float *part, int cout)
{
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  for (int w = 0; w < RGB_WARPS; w++) {
    if (warp == w)
#pragma unroll
      for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < RGB_NT; j++)
#pragma unroll
          for (int e = 0; e < 4; e++) {
            /* d0, d1: tap 16 m + g, channels 8 j + 2 t, + 1; d2, d3: tap + 8 */
            const int tap = 16 * m + g + 8 * (e >> 1), k = 8 * j + 2 * t + (e & 1);
            sums[tap][k] = (w ? sums[tap][k] : 0.f) + acc[m][j][e];
          }
    __syncthreads();
  }
  const int taps = 9 * CIN;
  for (int i = threadIdx.x; i < cout * taps; i += blockDim.x)
    part[(size_t)blockIdx.x * cout * taps + i] = sums[i % taps][i / taps];
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

/* The lane's taps' rgb_gather nibbles and element offsets: tap_of(i) for i < N, past 9 CIN a
 * nibble of 0xf. */
template <int CIN, int N, typename F>
static __device__ __forceinline__ unsigned rgb_taps(int Ww, F tap_of, int (&off)[N])
{
  unsigned code = 0;
#pragma unroll
  for (int i = 0; i < N; i++) {
    const int tap = tap_of(i);
    const int r = tap / CIN, ci = tap % CIN, ky = r / 3, kx = r % 3;
    const bool real = tap < 9 * CIN;
    off[i] = real ? ((ky - 1) * Ww + kx - 1) * CIN + ci : 0;
    code |= (real ? (unsigned)(ky | kx << 2) : 0xfu) << (4 * i);
  }
  return code;
}

/* The f32 kernels (conv_rgb_tf32_cuda.cu), for P = n h w pixels; conv_rgb_cuda.cu's entry points
 * route OPS_F32 here. Return 0, or -1 with the message in o. */
int opc_rgb_tf32_fwd(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                     void *y);
int opc_rgb_tf32_bwd_filter(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                            const void *dy, void *dw, int acc, void *ws);

#endif
