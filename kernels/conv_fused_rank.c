/* conv_fused_rank.c — the measured table behind conv_fused_rank (kernels/conv_fused_rank.h). */
#include "config.h"

#include "kernels/conv_fused_rank.h"

#include <stddef.h>

#include "kernels/conv_sm90.h"

/* The shapes measured faster than cuDNN with the separate BatchNorm passes, per use, alone and
 * in the trainer's step. A pair (OPS_FUSE_PAIR: a block's second convolution with the first's
 * BatchNorm + ReLU applied as it loads, its statistics, the masked input gradient with the
 * backward sums, the weight gradient) wins when its three fused passes together take less than
 * the library's; a first block (OPS_FUSE_STATS) when the convolution with its statistics takes
 * less than cuDNN's convolution and the statistics pass; a plain input gradient (OPS_FUSE_DGRAD)
 * when it takes less than cuDNN's (128 -> 64 on the COUT_M kernel's output-channel halves,
 * 64 -> 128 and 256 -> 256 on the wide kernel: 85.5, 35.3 and 45.4 us against 110.3, 76.6 and
 * 68.4, bench/results/conv_sm90_1xh100.txt; in the trainer's step,
 * bench/results/ab_dgrad_route_1xh100.txt). 512 -> 256 at 64 x 64 was faster alone (87.7 against
 * 101.3 us) but left the step no faster: not here. Five more first blocks (256 -> 128,
 * 128 -> 256, 512 -> 256, 256 -> 512, 512 -> 1024) were faster alone but left the trainer's
 * step no faster (bench/results/conv_engine_1xh100.txt): not here. min_pixels: the image size
 * (h x w) it was measured at; 0 for the 64 -> 64 kernels, the first ones, which auto has taken
 * at every size. */
static const struct {
  ops_fuse_use_t use;
  int cin, cout;
  long min_pixels;
} measured[] = {
    {OPS_FUSE_PAIR, 64, 64, 0},
    {OPS_FUSE_STATS, 64, 64, 0},
    {OPS_FUSE_PAIR, 128, 128, 128L * 128},
    {OPS_FUSE_STATS, 64, 128, 128L * 128},
    {OPS_FUSE_STATS, 128, 64, 256L * 256},
    {OPS_FUSE_DGRAD, 64, 128, 128L * 128},
    {OPS_FUSE_DGRAD, 128, 64, 256L * 256},
    {OPS_FUSE_DGRAD, 256, 256, 64L * 64},
};

/* The input layer (few channels in) as a first block: its forward with the statistics (on trial:
 * ranked 2 to be measured in the step against the plain forward and the statistics pass). */
#define RGB_RANK 2

int conv_fused_rank(ops_fuse_use_t use, int cin, int cout, int h, int w)
{
  if (use == OPS_FUSE_STATS && cin >= 1 && cin <= 3 && (cout == 16 || cout == 32 || cout == 64))
    return h >= 1 && w >= 1 ? RGB_RANK : 0;
  if (cin < 64 || cout < 64 || cin % 64 || cout % 64 || cin > CONV_SM90_MAX_CHANNELS ||
      cout > CONV_SM90_MAX_CHANNELS || h < 1 || w < 1)
    return 0;
  const long pixels = (long)h * w;
  for (size_t i = 0; i < sizeof measured / sizeof *measured; i++)
    if (measured[i].use == use && measured[i].cin == cin && measured[i].cout == cout &&
        pixels >= measured[i].min_pixels)
      return 2;
  return 1;
}
