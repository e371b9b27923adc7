/* conv_fused_cpu.h — the CPU reference of the fused forward 3x3 convolution that
 * kernels/conv_sm90.h runs on Hopper: the previous layer's BatchNorm apply + ReLU on the input,
 * the convolution (stride 1, pad 1, no bias), and this layer's BatchNorm statistics of the
 * output, with bf16 rounding where the GPU rounds:
 *
 *   a = bf16(max(0, x * scale[ci] + shift[ci]))    (a = x when scale is NULL)
 *   y = bf16(conv3x3(a, weight))
 *   stats = [Σ y per channel, Σ y² per channel, n*h*w]   (f64: ops.h bn_stats's layout)
 *
 * Composed of the CPU backend's own ops (bn_apply, conv_fwd, bn_stats in f32), so the fused
 * kernel is checked against the same arithmetic the trainer's CPU path uses. Tensors are f32
 * arrays holding bf16 values (x, weight: as the GPU reads them); NHWC, weights
 * [cout][3][3][cin]. */
#ifndef KERNELS_CONV_FUSED_CPU_H
#define KERNELS_CONV_FUSED_CPU_H

#include <stddef.h>

#include "kernels/ops.h"

typedef struct {
  int n, h, w, cin, cout;
  const float *x;             /* (n, h, w, cin) */
  const float *weight;        /* [cout][3][3][cin] */
  const float *scale, *shift; /* [cin] each, or both NULL: no prologue */
  float *y;                   /* (n, h, w, cout) */
  double *stats;              /* [2 cout + 1], or NULL */
} conv_fused_ref_t;

/* Returns 0, or -1 with a message in err (bad shape or arguments, out of memory). */
int conv_fused_ref(const conv_fused_ref_t *a, char *err, size_t errlen);

/* The CPU backend's 3x3 convolution as the references run it: its ops, a plan for one shape and
 * the plan's workspace. */
typedef struct {
  ops_t ops;
  ops_conv_t conv;
  void *ws;
} conv_fused_conv_t;

/* Opens the ops and a plan for n images of h x w pixels, cin -> cout channels. Returns 0, or -1
 * with a message in err (nothing is then held). conv_fused_conv_close gives it all back. */
int conv_fused_conv_open(conv_fused_conv_t *c, int n, int h, int w, int cin, int cout, char *err,
                         size_t errlen);
void conv_fused_conv_close(conv_fused_conv_t *c);

/* The prologue's activations, not rounded: act = max(0, x * scale + shift) per channel, over P
 * pixels of C channels, through ops's bn_apply with mean 0 and invstd 1 (its affine is then
 * exactly x * scale + shift, in f32). Returns 0, or -1 with a message in err. */
int conv_fused_prologue(const ops_t *ops, const float *x, size_t P, int C, const float *scale,
                        const float *shift, float *act, char *err, size_t errlen);

/* The activations the convolution reads: conv_fused_prologue's, rounded to bf16. */
int conv_fused_activations(const ops_t *ops, const float *x, size_t P, int C,
                           const float *scale, const float *shift, float *act, char *err,
                           size_t errlen);

/* v rounded to the nearest bf16 (ties to even), as an f32; NaN stays NaN. */
float conv_fused_round_bf16(float v);

#endif
