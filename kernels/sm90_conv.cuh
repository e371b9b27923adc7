/* sm90_conv.cuh — device code the Hopper convolutions (kernels/conv_sm90_cuda.cu, forward and
 * dgrad; kernels/conv_sm90_wgrad_cuda.cu) share beyond the instructions of sm90_ptx.cuh: the
 * prologue's pass over a halo of 64-channel pixel lines, the previous layer's BatchNorm apply +
 * ReLU in place, a = bf16(max(0, x * scale + shift)), on the lines inside the image (those
 * outside stay the copy engine's zeros: the padding is zero after the BN). */
#ifndef KERNELS_SM90_CONV_CUH
#define KERNELS_SM90_CONV_CUH

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
 * (y0, x0) of an h x w image: the thread takes chunk lc of lines first, first + step, ..., two
 * lines in flight. The caller fences (fence.proxy.async) before the copy engine or wgmma reads. */
__device__ __forceinline__ void bn_relu_halo(uint32_t stage, int lines, int halo_w, int y0, int x0,
                                             int h, int w, int first, int step, int lc,
                                             const float (&sc)[8], const float (&sh)[8])
{
  constexpr int U = 2;
  for (int l0 = first; l0 < lines; l0 += U * step) {
    uint32_t v[U][4], addr[U];
    bool in[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int l = l0 + u * step;
      const int hr = l / halo_w, hc = l - hr * halo_w;
      const int yy = y0 + hr, xx = x0 + hc;
      in[u] = l < lines && (unsigned)yy < (unsigned)h && (unsigned)xx < (unsigned)w;
      addr[u] = stage + swz((uint32_t)l, (uint32_t)lc);
      if (in[u]) ld_shared_v4(addr[u], v[u]);
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      if (in[u]) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
          const float lo = fmaxf(fmaf(bf16_lo(v[u][q]), sc[2 * q], sh[2 * q]), 0.f);
          const float hi = fmaxf(fmaf(bf16_hi(v[u][q]), sc[2 * q + 1], sh[2 * q + 1]), 0.f);
          v[u][q] = pack_bf16(lo, hi);
        }
        st_shared_v4(addr[u], v[u]);
      }
  }
}

} // namespace sm90

#endif
