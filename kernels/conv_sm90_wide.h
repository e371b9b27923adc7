/* conv_sm90_wide.h — the entry points of the wider Hopper convolution (kernels/
 * conv_sm90_wide_cuda.cu, and its weight gradient in kernels/conv_sm90_wgrad_wide_cuda.cu) that
 * kernels/conv_sm90_cuda.cu's conv_sm90_fwd, conv_sm90_dgrad and conv_sm90_check and
 * kernels/conv_sm90_wgrad_cuda.cu's conv_sm90_wgrad entries hand the shapes other than 64 -> 64
 * to. C++ (namespace sm90), internal to those files; the public interface is
 * kernels/conv_sm90.h. */
#ifndef KERNELS_CONV_SM90_WIDE_H
#define KERNELS_CONV_SM90_WIDE_H

#include <stddef.h>

#include "kernels/conv_sm90.h"

namespace sm90 {

/* The forward of conv_sm90_fwd for a shape other than 64 -> 64 (a message naming what is
 * covered otherwise). */
int conv_wide_fwd(const conv_sm90_fwd_t *a, char *err, size_t errlen);

/* dgrad of conv_sm90_dgrad for a shape other than 64 -> 64. */
int conv_wide_dgrad(const conv_sm90_dgrad_t *a, char *err, size_t errlen);

/* 0 when device can run the wide kernels (shared memory, the sm_90a image loads), else -1. */
int conv_wide_check(int device, char *err, size_t errlen);

/* wgrad of conv_sm90_wgrad for a shape other than 64 -> 64 (kernels/
 * conv_sm90_wgrad_wide_cuda.cu). */
int conv_wide_wgrad(const conv_sm90_wgrad_t *a, char *err, size_t errlen);

/* Its split-K plan on device: the K splits (partials) and the row tiles of each. 0, or -1 for
 * a bad device or shape (one it does not cover). */
int conv_wide_wgrad_plan(int device, int n, int h, int w, int cin, int cout, int *splits,
                         int *tiles_per_split);

/* 0 when device can run the wide wgrad kernels, else -1. */
int conv_wide_wgrad_check(int device, char *err, size_t errlen);

} // namespace sm90

#endif
