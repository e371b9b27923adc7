/* conv_fused_rank.h — which 3x3 layers the CUDA backend's fused convolutions take, and how
 * sure that choice is (ops.h conv_fused's answer on a device that can run them: a Hopper 9.0
 * GPU, bf16, a build with sm_90a). Host logic alone, so the table is tested on any machine.
 *
 *   0  no fused kernels for the layer: cin or cout not a multiple of 64, or above
 *      CONV_SM90_MAX_CHANNELS (kernels/conv_sm90.h); except the input layer's forward with
 *      its statistics (OPS_FUSE_STATS, cin 1 to 3, cout 16, 32 or 64: the few-channel
 *      kernel of kernels/conv_rgb_cuda.cu)
 *   1  kernels exist but were not shown faster than cuDNN with the separate BatchNorm passes
 *      in the trainer's step: SHMDDP_CONV_ENGINE=fused takes them, auto does not
 *   2  measured faster, alone on the layer's shape (dev/conv_sm90_bench) and in the trainer's
 *      step (bench/results/conv_engine_1xh100.txt): auto takes them too
 *
 * A shape was measured at the reference U-Net's image size for its level, batch 6; a rank-2
 * entry applies to images of at least that many pixels (more pixels per weight, where the
 * kernels do better) and is rank 1 below. */
#ifndef KERNELS_CONV_FUSED_RANK_H
#define KERNELS_CONV_FUSED_RANK_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

int conv_fused_rank(ops_fuse_use_t use, int cin, int cout, int h, int w);

#ifdef __cplusplus
}
#endif

#endif
