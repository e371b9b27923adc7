/* unet_fixture.h — the small U-Net the model suites train (check_model, check_plan): its
 * configuration and non-trivial batches; which elements of the flat buffers are padding. */
#ifndef TESTS_UNET_FIXTURE_H
#define TESTS_UNET_FIXTURE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/model/model.h"
#include "src/model/unet.h"

/* 3 levels (4-6-8), 8x12, batch 3, 3 classes (label 5 ignored), 2 groups for GroupNorm. */
static inline void small_cfg(model_config_t *c, model_norm_t norm)
{
  model_config_default(c);
  c->levels = 3;
  c->widths[0] = 4;
  c->widths[1] = 6;
  c->widths[2] = 8;
  c->height = 8;
  c->width = 12;
  c->max_batch = 3;
  c->classes = 3;
  c->ignore_index = 5;
  c->norm = norm;
  c->groups = 2;
  c->seed = 42;
}

/* n images and labels into x and y (some pixels ignored); salt varies them. */
static inline void fill_batch(const model_config_t *c, int n, unsigned salt, float *x, int32_t *y)
{
  size_t P = (size_t)n * c->height * c->width;
  for (size_t i = 0; i < P * c->in_channels; i++)
    x[i] = (float)(sin(0.37 * i + salt) + 0.3 * cos(1.3 * i * (salt + 1)));
  for (size_t p = 0; p < P; p++)
    y[p] = (p * 7 + salt) % 11 == 3 ? c->ignore_index : (int32_t)((p / 3 + salt) % c->classes);
}

/* 1 where flat-buffer element i is alignment padding (in no tensor); malloc'ed (NULL when out
 * of memory). */
static inline unsigned char *padding_map(const model_t *m)
{
  unsigned char *pad = malloc(model_flat_size(m));
  if (!pad) return NULL;
  memset(pad, 1, model_flat_size(m));
  for (int i = 0; i < unet_num_tensors(m); i++)
    memset(pad + unet_tensor(m, i)->offset, 0, unet_tensor(m, i)->count);
  return pad;
}

#endif
