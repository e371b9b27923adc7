/* conv_fused_bwd_cpu.h — the CPU references of the two backward kernels of the fused 3x3
 * convolution (kernels/conv_fused_cpu.h is the forward's): the input gradient with the previous
 * layer's ReLU mask and BatchNorm backward sums fused in (dgrad), and the weight gradient summed
 * in a fixed order (wgrad). The forward was
 *
 *   v = x * scale[ci] + shift[ci]       (f32: the previous layer's BatchNorm, its affine)
 *   a = bf16(max(0, v))                 (a = x without scale/shift)
 *   y = bf16(conv3x3(a, weight))        (stride 1, pad 1, no bias)
 *
 * and dy is the gradient of y. Tensors are f32 arrays holding bf16 values where the GPU reads
 * bf16 (x, weight, dy); NHWC, weights [cout][3][3][cin]; P = n*h*w pixels, p = (img*h + y)*w + x.
 *
 * dgrad, one pass over dy (a GPU kernel: the forward's pipeline with the flipped, transposed
 * weights; the mask and the sums in its epilogue, where the f32 accumulator is rounded):
 *
 *   g = bf16(conv_transpose3x3(dy, weight)) * [v > 0]      (stored; f32 accumulation)
 *   sums[ci] = Σ_p g,   sums[cin + ci] = Σ_p g * x̂,   x̂ = (x - mean[ci]) * invstd[ci]
 *
 * g is the gradient w.r.t. the BatchNorm's output before its ReLU, the dy of ops.h's
 * bn_bwd_reduce and bn_bwd_apply with the ReLU already applied (their relu argument NULL). The
 * sums are f64, per term as bn_bwd_reduce forms them ((f64)x - mean) * invstd, of the stored
 * (rounded) g, in bn_bwd_reduce's layout: SyncBN sums them over ranks, dbeta = sums[0..cin),
 * dgamma = sums[cin..2cin), and bn_bwd_apply(g, NULL, x, ..., sums, gamma) is the pass after
 * that makes the input gradient of x. The mask is v > 0 with v = x * scale + shift rounded as
 * two f32 operations (product, then sum: a GPU kernel writes __fmul_rn / __fadd_rn), the
 * decision bn_bwd_reduce recomputes from gamma, beta and the saved statistics when
 * scale = f32(gamma * invstd) and shift = f32(beta - mean * gamma * invstd), as its bn_apply
 * forms them. Composed of the CPU backend's ops: conv_bwd_data, a rounding to bf16, bn_apply
 * and relu_bwd (the mask), bn_bwd_reduce (the sums).
 *
 * wgrad, over pixel blocks (a GPU kernel: pixels as the GEMM's K, one block of pixels per CTA):
 *
 *   dweight[co][ky][kx][ci] = Σ_p dy[p][co] * a[p + (ky - 1, kx - 1)][ci]    (0 outside)
 *
 * with a recomputed from x, scale and shift as the forward makes it (bf16), summed in f32 in
 * this fixed order: block b covers pixels [b * block_pixels, min(P, (b + 1) * block_pixels));
 * its partial starts at +0 and adds the products dy * a (exact in f32: bf16 times bf16) one
 * pixel after the other, p increasing, a pixel whose tap falls in the padding adding nothing;
 * then dweight = (((partial[0] + partial[1]) + partial[2]) + ...), in block order, in f32. A
 * GPU kernel's partials come from its tensor cores, whose accumulation order within an MMA is
 * the hardware's, so they match these within the f32 sum's rounding; its reduction of its own
 * partials, run as conv_wgrad_ref_reduce, matches that function bit for bit. The result equals
 * the CPU backend's conv_bwd_filter of the same a and dy within the two sums' rounding:
 * |difference| <= 2 P 2^-24 Σ_p |dy * a| per element. */
#ifndef KERNELS_CONV_FUSED_BWD_CPU_H
#define KERNELS_CONV_FUSED_BWD_CPU_H

#include <stddef.h>

typedef struct {
  int n, h, w, cin, cout;     /* the forward convolution's shape: cin -> cout */
  const float *dy;            /* (n, h, w, cout) */
  const float *weight;        /* [cout][3][3][cin] */
  const float *x;             /* (n, h, w, cin): the prologue's input; NULL with neither the
                               * prologue nor sums */
  const float *scale, *shift; /* [cin] each: the forward's prologue (the mask); both NULL: none */
  const double *saved;        /* [2 cin + 1] (ops.h bn_finalize's: mean, invstd, count): x̂ for
                               * the sums; NULL without sums */
  float *g;                   /* (n, h, w, cin): the masked input gradient */
  double *sums;               /* [2 cin] f64, or NULL: no sums */
} conv_dgrad_ref_t;

/* Returns 0, or -1 with a message in err (bad shape or arguments, out of memory). */
int conv_dgrad_ref(const conv_dgrad_ref_t *a, char *err, size_t errlen);

typedef struct {
  int n, h, w, cin, cout;
  const float *x;             /* (n, h, w, cin) */
  const float *dy;            /* (n, h, w, cout) */
  const float *scale, *shift; /* [cin] each: the forward's prologue; both NULL: a = x */
  int block_pixels;           /* pixels per block, >= 1 */
  float *dweight;             /* [cout][3][3][cin] */
  float *partials;            /* conv_wgrad_ref_blocks() x [cout][3][3][cin], or NULL */
} conv_wgrad_ref_t;

/* The number of pixel blocks of P pixels in blocks of block_pixels (>= 1): at least 1, so that
 * P = 0 has one partial (zeros). */
size_t conv_wgrad_ref_blocks(size_t P, int block_pixels);

/* Returns 0, or -1 with a message in err (bad shape or arguments, out of memory). */
int conv_wgrad_ref(const conv_wgrad_ref_t *a, char *err, size_t errlen);

/* dweight[i] = (((partials[0][i] + partials[1][i]) + ...) + partials[blocks - 1][i]) in f32,
 * for i < count (blocks >= 1): the fixed-order reduction of the blocks' partials. */
void conv_wgrad_ref_reduce(const float *partials, size_t blocks, size_t count, float *dweight);

#endif
