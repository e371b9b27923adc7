/* augment.h — from a dataset sample (8-bit, its own size) to the network's input: a crop of the
 * training size, a horizontal flip, and normalisation to f32 NHWC with i32 labels. The random
 * choices are keyed by (seed, epoch, index) only, never by rank or worker. */
#ifndef SRC_DATA_AUGMENT_H
#define SRC_DATA_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int crop;          /* output is crop x crop */
  int random;        /* training: random crop and flip; otherwise a centre crop, no flip */
  uint64_t seed;
  int classes;       /* mask values >= classes become ignore_label */
  int ignore_label;  /* label of pixels outside a sample smaller than the crop, too */
} augment_config_t;

/* rgb: h*w*3, mask: h*w. x: crop*crop*3 floats, y: crop*crop labels. A sample smaller than the
 * crop is centred and padded with zeros and ignore_label. */
void augment_sample(const augment_config_t *cfg, long epoch, size_t index, const uint8_t *rgb,
                    const uint8_t *mask, int width, int height, float *x, int32_t *y);

/* The crop offset and flip augment_sample uses (exposed for tests). */
void augment_choice(const augment_config_t *cfg, long epoch, size_t index, int width, int height,
                    int *off_x, int *off_y, int *flip);

#endif
