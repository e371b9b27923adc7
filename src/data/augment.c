/* augment.c — random crop and horizontal flip keyed by (seed, epoch, index), and the pixel
 * normalisation the network sees: (v / 255 - 0.5) / 0.25, roughly zero mean and unit spread. */
#include "config.h"

#include "src/data/augment.h"

#include "src/data/data_rng.h"

void augment_choice(const augment_config_t *cfg, long epoch, size_t index, int width, int height,
                    int *off_x, int *off_y, int *flip)
{
  int slack_x = width - cfg->crop, slack_y = height - cfg->crop;
  if (!cfg->random) {
    /* Centre crop (negative: the sample is centred inside a padded crop). */
    *off_x = slack_x / 2;
    *off_y = slack_y / 2;
    *flip = 0;
    return;
  }
  data_rng_t r = data_rng_key(cfg->seed, 0x415547ULL /* "AUG" */, (uint64_t)epoch, index);
  *off_x = slack_x > 0 ? (int)data_rng_below(&r, (uint64_t)slack_x + 1) : slack_x / 2;
  *off_y = slack_y > 0 ? (int)data_rng_below(&r, (uint64_t)slack_y + 1) : slack_y / 2;
  *flip = (int)(data_rng_next(&r) >> 63);
}

void augment_sample(const augment_config_t *cfg, long epoch, size_t index, const uint8_t *rgb,
                    const uint8_t *mask, int width, int height, float *x, int32_t *y)
{
  int ox, oy, flip;
  augment_choice(cfg, epoch, index, width, height, &ox, &oy, &flip);
  const int S = cfg->crop;
  for (int r = 0; r < S; r++) {
    int sy = oy + r;
    for (int c = 0; c < S; c++) {
      int sx = ox + (flip ? S - 1 - c : c);
      size_t o = (size_t)r * S + c;
      if (sy < 0 || sy >= height || sx < 0 || sx >= width) {
        x[3 * o] = x[3 * o + 1] = x[3 * o + 2] = 0.0f;
        y[o] = cfg->ignore_label;
        continue;
      }
      size_t i = (size_t)sy * width + sx;
      for (int ch = 0; ch < 3; ch++) x[3 * o + ch] = ((float)rgb[3 * i + ch] / 255.0f - 0.5f) * 4.0f;
      y[o] = mask[i] < cfg->classes ? (int32_t)mask[i] : cfg->ignore_label;
    }
  }
}
