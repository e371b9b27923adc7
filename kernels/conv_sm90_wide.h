/* conv_sm90_wide.h — the entry points of the wider Hopper convolution (kernels/
 * conv_sm90_wide_cuda.cu) that kernels/conv_sm90_cuda.cu's conv_sm90_fwd, conv_sm90_dgrad and
 * conv_sm90_check hand the shapes other than 64 -> 64 to. C++ (namespace sm90), internal to
 * those two files; the public interface is kernels/conv_sm90.h. */
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

} // namespace sm90

#endif
