/* amp.h — precision modes and fp16 dynamic loss scaling.
 *
 * fp32 computes in f32; bf16 and fp16 compute in 16 bits with f32 master weights and f32
 * gradients (model.h's flat buffers). fp16 needs loss scaling: the loss is multiplied by the
 * scale before backward, gradients are checked for inf/NaN, and a step with any non-finite
 * gradient is skipped and the scale halved; after growth_interval clean steps in a row the
 * scale doubles. In data-parallel training the non-finite flag must be the same on every rank
 * (sum it over ranks before amp_scaler_update) so every rank skips the same steps. */
#ifndef SRC_MODEL_AMP_H
#define SRC_MODEL_AMP_H

#include <stddef.h>

#include "src/model/model.h"

const char *amp_precision_name(model_precision_t p);           /* "fp32", "bf16", "fp16" */
int amp_precision_parse(const char *s, model_precision_t *out); /* 0 on success */

typedef struct {
  int enabled;          /* fp16 only; otherwise the scale stays 1 and nothing is skipped */
  double scale;         /* current loss scale (init 65536) */
  double growth_factor; /* 2 */
  double backoff_factor;/* 0.5 */
  long growth_interval; /* 2000 clean steps */
  long clean_steps;     /* clean steps since the last change of scale */
  long skipped_steps;   /* total steps skipped for non-finite gradients */
  long total_steps;     /* total calls to amp_scaler_update */
} amp_scaler_t;

void amp_scaler_init(amp_scaler_t *s, model_precision_t precision);
/* Loss scale to pass to model_train_step (1 when disabled). */
double amp_scaler_scale(const amp_scaler_t *s);
/* After backward: found_nonfinite != 0 if any gradient (on any rank) is inf/NaN. Returns 1 if
 * the optimizer step must be applied, 0 if it is skipped (the scale has been backed off). */
int amp_scaler_update(amp_scaler_t *s, int found_nonfinite);

/* *found = 1 if any of g[0..n) is inf or NaN, else 0. g lives on device (DEV_HOST or the CUDA
 * ordinal), stream is the backend's stream (NULL on the host). */
int amp_check_nonfinite(const float *g, size_t n, int device, void *stream, int *found,
                        char *err, size_t errlen);

#endif
