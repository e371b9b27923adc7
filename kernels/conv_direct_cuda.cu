/* conv_direct_cuda.cu — the 3x3 convolution with very few input channels (the U-Net's RGB layer,
 * 3 -> 64 over 256x256 images) computed directly, forward and weight gradient. Opt-in with
 * SHMDDP_CONV_DIRECT=1 (see opc_direct_enabled for why). cuDNN needs the
 * input padded to 8 channels for its tensor-core kernels and still ran this layer at 4.9 TFLOP/s
 * forward (0.28 ms) and 7.3 backward-filter (0.19 ms; ops_cuda_1xh200.txt, run 3), plus a
 * padding pass over the input each time. Here every output pixel needs only 27 inputs.
 *
 *   forward      y[p][k] = sum_{ky,kx,c} w[k][ky][kx][c] x[p + (ky-1, kx-1)][c] (zero outside):
 *                one thread per pixel, all cout outputs, the weights in shared memory as f32.
 *   weight grad  dw[k][t] (+)= sum_p dy[p][k] patch(p)[t], t = (ky, kx, c): thread = 4 output
 *                channels and a pixel lane; each block sums a fixed range of pixels and writes
 *                f32 partials; a warp per output adds the blocks' partials in a fixed order, so
 *                results repeat bit for bit.
 * The input gradient stays with cuDNN (the RGB layer needs none; other callers get the padded
 * cuDNN path). Weights [cout][3][3][cin] (ops.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cuda.cuh"

#define DC_MAX_CIN 4
#define DC_KPT 4               /* output channels per thread in the weight gradient */
#define DC_FWD_THREADS 128
#define DC_WG_LANES 4          /* pixel lanes per weight-gradient block */
#define DC_WG_BLOCKS_PER_SM 8

int opc_direct_enabled(const ops_t *o, const ops_conv_t *c)
{
  /* Opt-in (SHMDDP_CONV_DIRECT=1): measured on an H200 (commit 81124df), the forward fell from
   * 0.28 to 0.11 ms but this weight gradient takes 0.23 ms against cuDNN's 0.19, and the
   * trainer ran at 886.8 img/s with both against 908.3 without: not the default until the
   * weight gradient beats cuDNN's (27 dependent patch loads per pixel and thread make it
   * latency-bound; staging patches in shared memory is the next thing to try). */
  const char *e = getenv("SHMDDP_CONV_DIRECT");
  if (!e || strcmp(e, "1")) return 0;
  return c->kind == OPS_CONV3X3 && c->cin <= DC_MAX_CIN && c->cout % 8 == 0 && c->cout <= 64;
}

static int wgrad_blocks(const ops_t *o, size_t P)
{
  size_t most = DC_WG_BLOCKS_PER_SM * (size_t)opc_ctx(o)->sm_count, b = (P + 255) / 256;
  return (int)(b < 1 ? 1 : b > most ? most : b);
}

size_t opc_direct_ws(const ops_t *o, const ops_conv_t *c)
{
  return DC_WG_BLOCKS_PER_SM * (size_t)opc_ctx(o)->sm_count * c->cout * 9 * c->cin *
         sizeof(float);
}

/* The 3x3 x CIN patch around pixel p (image n, row i, column j), zero outside the image. */
template <typename T, int CIN>
static __device__ __forceinline__ void dc_patch(const T *x, size_t p, int H, int W, float *in)
{
  const size_t hw = (size_t)H * W;
  const size_t img = p / hw;
  const int rem = (int)(p - img * hw), i = rem / W, j = rem - (rem / W) * W;
#pragma unroll
  for (int ky = 0; ky < 3; ky++)
#pragma unroll
    for (int kx = 0; kx < 3; kx++) {
      int ii = i + ky - 1, jj = j + kx - 1;
      bool ok = ii >= 0 && ii < H && jj >= 0 && jj < W;
      const T *q = x + ((img * H + (size_t)(ok ? ii : 0)) * W + (size_t)(ok ? jj : 0)) * CIN;
#pragma unroll
      for (int c = 0; c < CIN; c++) in[(ky * 3 + kx) * CIN + c] = ok ? opc_ld(q[c]) : 0.f;
    }
}

/* ---- forward ---- */

template <typename T, int CIN>
__global__ void __launch_bounds__(DC_FWD_THREADS) dc_fwd(const T *x, const T *w, T *y, size_t P,
                                                         int H, int W, int cout)
{
  extern __shared__ float sw[]; /* [cout][9 * CIN] */
  const int K9 = 9 * CIN;
  for (int i = threadIdx.x; i < cout * K9; i += blockDim.x) sw[i] = opc_ld(w[i]);
  __syncthreads();
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
       p += (size_t)gridDim.x * blockDim.x) {
    float in[9 * CIN];
    dc_patch<T, CIN>(x, p, H, W, in);
    T *yp = y + p * cout;
    for (int k0 = 0; k0 < cout; k0 += 8) {
      float acc[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        float s = 0.f;
#pragma unroll
        for (int t = 0; t < 9 * CIN; t++) s += in[t] * sw[(k0 + u) * K9 + t];
        acc[u] = s;
      }
      opc_pack<T, 8> v;
#pragma unroll
      for (int u = 0; u < 8; u++) v.v[u] = opc_st<T>(acc[u]);
      opc_store<T, 8>(yp + k0, v);
    }
  }
}

template <typename T, int CIN>
static int fwd_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                 void *y)
{
  size_t smem = (size_t)c->cout * 9 * CIN * sizeof(float);
  size_t b = (P + DC_FWD_THREADS - 1) / DC_FWD_THREADS, most = (size_t)opc_ctx(o)->sm_count * 16;
  unsigned blocks = (unsigned)(b < 1 ? 1 : b > most ? most : b);
  dc_fwd<T, CIN><<<blocks, DC_FWD_THREADS, smem, opc_ctx(o)->stream>>>(
      (const T *)x, (const T *)w, (T *)y, P, c->h, c->w, c->cout);
  OPC_LAUNCHED(o, "3x3 convolution, few input channels (direct)");
  return 0;
}

template <typename T>
static int fwd_dispatch(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                        const void *w, void *y)
{
  switch (c->cin) {
  case 1: return fwd_t<T, 1>(o, c, P, x, w, y);
  case 2: return fwd_t<T, 2>(o, c, P, x, w, y);
  case 3: return fwd_t<T, 3>(o, c, P, x, w, y);
  default: return fwd_t<T, 4>(o, c, P, x, w, y);
  }
}

/* ---- weight gradient ---- */

/* Block: (cout / DC_KPT) channel groups x DC_WG_LANES pixel lanes; thread = group g (channels
 * 4g .. 4g+3), lane l. part[block][k][t] = the block's sum for output k, patch element t. */
template <typename T, int CIN>
__global__ void dc_wgrad_part(const T *x, const T *dy, float *part, size_t P, size_t per, int H,
                              int W, int cout)
{
  extern __shared__ float red[]; /* [lane][cout][9 * CIN] */
  const int K9 = 9 * CIN, groups = cout / DC_KPT;
  const int g = threadIdx.x % groups, lane = threadIdx.x / groups;
  const size_t p0 = (size_t)blockIdx.x * per, p1 = p0 + per < P ? p0 + per : P;
  float acc[DC_KPT][9 * CIN];
#pragma unroll
  for (int u = 0; u < DC_KPT; u++)
#pragma unroll
    for (int t = 0; t < 9 * CIN; t++) acc[u][t] = 0.f;
  for (size_t p = p0 + lane; p < p1; p += DC_WG_LANES) {
    float in[9 * CIN], d[DC_KPT];
    dc_patch<T, CIN>(x, p, H, W, in);
#pragma unroll
    for (int u = 0; u < DC_KPT; u++) d[u] = opc_ld(dy[p * cout + g * DC_KPT + u]);
#pragma unroll
    for (int u = 0; u < DC_KPT; u++)
#pragma unroll
      for (int t = 0; t < 9 * CIN; t++) acc[u][t] += d[u] * in[t];
  }
#pragma unroll
  for (int u = 0; u < DC_KPT; u++)
#pragma unroll
    for (int t = 0; t < 9 * CIN; t++)
      red[((size_t)lane * cout + g * DC_KPT + u) * K9 + t] = acc[u][t];
  __syncthreads();
  const int n = cout * K9;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float s = 0.f;
    for (int l = 0; l < DC_WG_LANES; l++) s += red[(size_t)l * n + i];
    part[(size_t)blockIdx.x * n + i] = s;
  }
}

/* One warp per weight: lane l adds blocks l, l + 32, ... in order, then a fixed shuffle tree. */
template <typename T>
__global__ void dc_wgrad_final(const float *part, int nblocks, int n, T *dw, int accumulate)
{
  const int lane = threadIdx.x & 31;
  const int t = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
  if (t >= n) return; /* per warp */
  float s = 0.f;
  for (int b = lane; b < nblocks; b += 32) s += part[(size_t)b * n + t];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) dw[t] = opc_st<T>(accumulate ? opc_ld(dw[t]) + s : s);
}

template <typename T, int CIN>
static int wgrad_t(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *dy,
                   void *dw, int acc, void *ws)
{
  int nb = wgrad_blocks(o, P);
  size_t per = (P + nb - 1) / nb;
  int threads = c->cout / DC_KPT * DC_WG_LANES, n = c->cout * 9 * CIN;
  size_t smem = (size_t)DC_WG_LANES * n * sizeof(float);
  cudaStream_t st = opc_ctx(o)->stream;
  dc_wgrad_part<T, CIN><<<nb, threads, smem, st>>>((const T *)x, (const T *)dy, (float *)ws, P,
                                                   per, c->h, c->w, c->cout);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient, few input channels (partial sums)");
  dc_wgrad_final<T><<<(n + 7) / 8, 256, 0, st>>>((const float *)ws, nb, n, (T *)dw, acc);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient, few input channels (final sums)");
  return 0;
}

template <typename T>
static int wgrad_dispatch(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                          const void *dy, void *dw, int acc, void *ws)
{
  switch (c->cin) {
  case 1: return wgrad_t<T, 1>(o, c, P, x, dy, dw, acc, ws);
  case 2: return wgrad_t<T, 2>(o, c, P, x, dy, dw, acc, ws);
  case 3: return wgrad_t<T, 3>(o, c, P, x, dy, dw, acc, ws);
  default: return wgrad_t<T, 4>(o, c, P, x, dy, dw, acc, ws);
  }
}

int opc_direct_fwd(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                   void *y)
{
  size_t P = (size_t)n * c->h * c->w;
  if (P == 0) return 0;
  if (((uintptr_t)y | (size_t)c->cout * o->elem) % (8 * o->elem))
    return opc_fail(o, "direct 3x3 convolution: output not aligned for 8-channel stores");
  OPC_DISPATCH(o, fwd_dispatch, o, c, P, x, w, y);
}

int opc_direct_bwd_filter(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                          const void *dy, void *dw, int acc, void *ws)
{
  size_t P = (size_t)n * c->h * c->w; /* 0 still writes zeros (or leaves dw when acc) */
  OPC_DISPATCH(o, wgrad_dispatch, o, c, P, x, dy, dw, acc, ws);
}
