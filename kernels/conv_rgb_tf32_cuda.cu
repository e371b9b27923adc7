/* conv_rgb_tf32_cuda.cu — the few-channel 3x3 convolution (the U-Net's input layer, 3 -> 64) in
 * f32 on the TF32 tensor cores, as cuDNN runs f32 convolutions while SHMDDP_TF32 allows it:
 * operands rounded to TF32 (cvt.rna), products accumulated in f32. The 16-bit kernels'
 * structure (conv_rgb_cuda.cu): groups of 16 pixels, a warp a group, the im2col fragments
 * gathered from the input straight into registers (conv_rgb.cuh), mma.sync m16n8k8; cuDNN ran
 * this layer on its input padded to 4 channels, with a copy of the input and of the weights a
 * call.
 *   forward      Y = A W^T: M = the group's pixels, N = the cout channels (tiles of 8), K = the
 *                taps in k-steps of 8 (as many as 9 cin needs). Lane (g, t) gathers taps 8 s +
 *                t and 8 s + t + 4 of pixels g and g + 8; the weights' B fragments sit in shared
 *                memory in lane order; each lane stores its accumulators as 8-byte pairs (a
 *                quad writes a whole 32-byte sector of a pixel's row).
 *   weight grad  dW^T = A^T dY: M = the taps (tiles of 16), N = cout, K = the group's pixels in
 *                two k-steps of 8. Lane (g, t) gathers taps 16 m + g and 16 m + g + 8 of the
 *                group's pixels t, t + 4, t + 8, t + 12, and loads its B fragments, dY of pixels
 *                8 s + t and 8 s + t + 4 at channel 8 j + g, straight from global memory (a
 *                load instruction reads 4 pixels' 32-byte sectors whole); the accumulators stay
 *                in registers across the block's range of groups, the block adds its warps in
 *                warp order into its f32 partial, and rgb_wgrad_final adds the partials in
 *                block order: results repeat bit for bit.
 * No statistics variant: the fused engine that asks for them is bf16's. */
#include "config.h"

#include "kernels/conv_rgb.cuh"

/* f32 rounded to TF32 (to nearest, ties away), as a register for mma */
static __device__ __forceinline__ uint32_t tf32_of(float f)
{
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

/* d += a b: one m16n8k8 product of TF32 operands, f32 accumulation (the PTX ISA's fragments) */
static __device__ __forceinline__ void tf32_mma(float (&d)[4], const uint32_t (&a)[4], uint2 b)
{
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

/* k-steps of 8 taps the 9 CIN taps need */
template <int CIN> constexpr int tf32_ksteps() { return (9 * CIN + 7) / 8; }

/* ---- forward ---- */

template <int CIN>
__global__ void __launch_bounds__(RGB_THREADS, 2)
    rgb_tf32_fwd(const float *x, const float *w, float *y, size_t P, int Hh, int Ww, int cout)
{
  constexpr int KS = tf32_ksteps<CIN>(), NTAP = 2 * KS;
  /* the B fragments [k-step][column tile][lane]: taps 8 s + l % 4 and + 4, channel 8 j + l / 4 */
  __shared__ uint2 sb[KS][RGB_NT][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nt = cout / 8;
  for (int i = threadIdx.x; i < KS * RGB_NT * 32; i += blockDim.x) {
    const int s = i / (RGB_NT * 32), j = i / 32 % RGB_NT, l = i % 32, k = 8 * j + l / 4;
    const int t0 = 8 * s + l % 4, t1 = t0 + 4;
    const float b0 = t0 < 9 * CIN && k < cout ? w[(size_t)k * 9 * CIN + t0] : 0.f;
    const float b1 = t1 < 9 * CIN && k < cout ? w[(size_t)k * 9 * CIN + t1] : 0.f;
    sb[s][j][l] = make_uint2(tf32_of(b0), tf32_of(b1));
  }
  /* the lane's taps: i = 2 s + h, tap 8 s + t + 4 h */
  int off[NTAP];
  const unsigned code =
      rgb_taps<CIN, NTAP>(Ww, [t](int i) { return 8 * (i >> 1) + t + 4 * (i & 1); }, off);
  __syncthreads();
  const size_t groups = (P + 15) / 16, nw = (size_t)gridDim.x * RGB_WARPS;
  size_t grp = (size_t)blockIdx.x * RGB_WARPS + warp;
  float va[NTAP], vb[NTAP]; /* the taps of pixels g and g + 8 of the group */
  size_t pa = grp * 16 + g, pb = pa + 8;
  if (grp < groups) {
    rgb_gather<CIN, NTAP>(x, pa, rgb_locate(pa, P, Hh, Ww), code, off, va);
    rgb_gather<CIN, NTAP>(x, pb, rgb_locate(pb, P, Hh, Ww), code, off, vb);
  }
  for (; grp < groups; grp += nw) {
    /* A fragments of k-step s: (pixel g, tap 8 s + t), (g + 8, the same), (g, tap + 4), (g + 8) */
    uint32_t a[KS][4];
#pragma unroll
    for (int s = 0; s < KS; s++) {
      a[s][0] = tf32_of(va[2 * s]);
      a[s][1] = tf32_of(vb[2 * s]);
      a[s][2] = tf32_of(va[2 * s + 1]);
      a[s][3] = tf32_of(vb[2 * s + 1]);
    }
    const size_t ca = pa, cb = pb;
    pa += nw * 16, pb += nw * 16;
    if (grp + nw < groups) { /* the next group's taps, in flight during this one's products */
      rgb_gather<CIN, NTAP>(x, pa, rgb_locate(pa, P, Hh, Ww), code, off, va);
      rgb_gather<CIN, NTAP>(x, pb, rgb_locate(pb, P, Hh, Ww), code, off, vb);
    }
#pragma unroll
    for (int j = 0; j < RGB_NT; j++) {
      if (j >= nt) break;
      float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int s = 0; s < KS; s++) tf32_mma(d, a[s], sb[s][j][lane]);
      const int ch = 8 * j + 2 * t;
      if (ca < P) *reinterpret_cast<float2 *>(y + ca * cout + ch) = make_float2(d[0], d[1]);
      if (cb < P) *reinterpret_cast<float2 *>(y + cb * cout + ch) = make_float2(d[2], d[3]);
    }
  }
}

/* ---- weight gradient ---- */

template <int CIN>
__global__ void __launch_bounds__(RGB_THREADS, 2)
    rgb_tf32_wgrad_part(const float *x, const float *dy, float *part, size_t P, int Hh, int Ww,
                        int cout, size_t per)
{
  constexpr int MT = (9 * CIN + 15) / 16; /* tiles of 16 taps */
  __shared__ float sums[16 * MT][RGB_MAX_COUT];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int nt = cout / 8;
  /* the lane's taps 16 m + g + 8 h (i = 2 m + h) */
  int off[2 * MT];
  const unsigned code =
      rgb_taps<CIN, 2 * MT>(Ww, [g](int i) { return 16 * (i >> 1) + g + 8 * (i & 1); }, off);
  const size_t groups = (P + 15) / 16;
  /* group numbers fit 32 bits (wgrad_tf32 checks): fewer registers than size_t */
  const unsigned g0 = (unsigned)(blockIdx.x * per);
  const unsigned g1 = (unsigned)(g0 + per < groups ? g0 + per : groups);
  float acc[MT][RGB_NT][4];
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int j = 0; j < RGB_NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.f;
  for (unsigned grp = g0 + warp; grp < g1; grp += RGB_WARPS) {
    const size_t p0 = (size_t)grp * 16;
#pragma unroll
    for (int s = 0; s < 2; s++) {
      /* pixels 8 s + t (e = 0) and 8 s + t + 4 (e = 1): their taps, and dY's rows */
      float v[2][2 * MT];
      size_t pe[2];
      bool in[2];
#pragma unroll
      for (int e = 0; e < 2; e++) {
        pe[e] = p0 + 8 * s + t + 4 * e;
        in[e] = pe[e] < P;
        rgb_gather<CIN, 2 * MT>(x, pe[e], rgb_locate(pe[e], P, Hh, Ww), code, off, v[e]);
      }
      uint32_t a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; m++) {
        a[m][0] = tf32_of(v[0][2 * m]);     /* tap 16 m + g, pixel 8 s + t */
        a[m][1] = tf32_of(v[0][2 * m + 1]); /* tap + 8 */
        a[m][2] = tf32_of(v[1][2 * m]);     /* pixel + 4 */
        a[m][3] = tf32_of(v[1][2 * m + 1]);
      }
#pragma unroll
      for (int j = 0; j < RGB_NT; j++) {
        if (j >= nt) break;
        const float b0 = in[0] ? dy[pe[0] * cout + 8 * j + g] : 0.f;
        const float b1 = in[1] ? dy[pe[1] * cout + 8 * j + g] : 0.f;
        const uint2 b = make_uint2(tf32_of(b0), tf32_of(b1));
#pragma unroll
        for (int m = 0; m < MT; m++) tf32_mma(acc[m][j], a[m], b);
      }
    }
  }
  rgb_wgrad_block_sum<MT, CIN>(acc, sums, part, cout);
}

/* ---- launches ---- */

template <int CIN>
static int fwd_tf32(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                    void *y)
{
  const size_t groups = (P + 15) / 16, need = (groups + RGB_WARPS - 1) / RGB_WARPS;
  const size_t most =
      (size_t)opc_fit_blocks((const void *)rgb_tf32_fwd<CIN>) * opc_ctx(o)->sm_count;
  const size_t nb = need < most ? need : most;
  rgb_tf32_fwd<CIN><<<(unsigned)nb, RGB_THREADS, 0, opc_ctx(o)->stream>>>(
      (const float *)x, (const float *)w, (float *)y, P, c->h, c->w, c->cout);
  OPC_LAUNCHED(o, "3x3 convolution of few input channels (TF32)");
  return 0;
}

template <int CIN>
static int wgrad_tf32(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                      const void *dy, void *dw, int acc, void *ws)
{
  const size_t groups = (P + 15) / 16;
  if (groups + RGB_WARPS > 0xffffffffu)
    return opc_fail(o, "the few-channel weight gradient takes at most 2^36 pixels, not %zu", P);
  const int fit = opc_fit_blocks((const void *)rgb_tf32_wgrad_part<CIN>);
  const size_t most =
      (size_t)(fit < RGB_BLOCKS_PER_SM ? fit : RGB_BLOCKS_PER_SM) * opc_ctx(o)->sm_count;
  size_t nb = (groups + RGB_WARPS - 1) / RGB_WARPS;
  if (nb > most) nb = most;
  if (nb < 1) nb = 1;
  const size_t per = (groups + nb - 1) / nb;
  cudaStream_t st = opc_ctx(o)->stream;
  rgb_tf32_wgrad_part<CIN><<<(unsigned)nb, RGB_THREADS, 0, st>>>(
      (const float *)x, (const float *)dy, (float *)ws, P, c->h, c->w, c->cout, per);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient of few input channels (TF32, partial sums)");
  const int n = c->cout * 9 * CIN; /* outputs, one warp each */
  rgb_wgrad_final<float><<<(n + 7) / 8, 256, 0, st>>>((const float *)ws, (int)nb, n, (float *)dw,
                                                      acc);
  OPC_LAUNCHED(o, "3x3 convolution weight gradient of few input channels (TF32, final sums)");
  return 0;
}

int opc_rgb_tf32_fwd(const ops_t *o, const ops_conv_t *c, size_t P, const void *x, const void *w,
                     void *y)
{
  switch (c->cin) {
  case 1: return fwd_tf32<1>(o, c, P, x, w, y);
  case 2: return fwd_tf32<2>(o, c, P, x, w, y);
  default: return fwd_tf32<3>(o, c, P, x, w, y);
  }
}

int opc_rgb_tf32_bwd_filter(const ops_t *o, const ops_conv_t *c, size_t P, const void *x,
                            const void *dy, void *dw, int acc, void *ws)
{
  switch (c->cin) {
  case 1: return wgrad_tf32<1>(o, c, P, x, dy, dw, acc, ws);
  case 2: return wgrad_tf32<2>(o, c, P, x, dy, dw, acc, ws);
  default: return wgrad_tf32<3>(o, c, P, x, dy, dw, acc, ws);
  }
}
