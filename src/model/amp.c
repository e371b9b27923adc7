/* amp.c — precision names and the fp16 dynamic loss scaler's state machine. */
#include "config.h"

#include "src/model/amp.h"

#include <stdio.h>
#include <string.h>

#include "src/device/device.h"

const char *amp_precision_name(model_precision_t p)
{
  switch (p) {
  case MODEL_FP32: return "fp32";
  case MODEL_BF16: return "bf16";
  case MODEL_FP16: return "fp16";
  }
  return "?";
}

int amp_precision_parse(const char *s, model_precision_t *out)
{
  if (strcmp(s, "fp32") == 0) *out = MODEL_FP32;
  else if (strcmp(s, "bf16") == 0) *out = MODEL_BF16;
  else if (strcmp(s, "fp16") == 0) *out = MODEL_FP16;
  else return -1;
  return 0;
}

void amp_scaler_init(amp_scaler_t *s, model_precision_t precision)
{
  int fp16 = precision == MODEL_FP16;
  *s = (amp_scaler_t){.enabled = fp16,
                      .scale = fp16 ? 65536.0 : 1.0,
                      .growth_factor = 2.0,
                      .backoff_factor = 0.5,
                      .growth_interval = 2000};
}

double amp_scaler_scale(const amp_scaler_t *s) { return s->enabled ? s->scale : 1.0; }

int amp_scaler_update(amp_scaler_t *s, int found_nonfinite)
{
  s->total_steps++;
  if (!s->enabled) return 1;
  if (found_nonfinite) {
    s->scale *= s->backoff_factor;
    s->clean_steps = 0;
    s->skipped_steps++;
    return 0;
  }
  if (++s->clean_steps >= s->growth_interval) {
    s->scale *= s->growth_factor;
    s->clean_steps = 0;
  }
  return 1;
}

int amp_check_nonfinite(const float *g, size_t n, int device, void *stream, int *found,
                        char *err, size_t errlen)
{
  return dev_nonfinite(device, g, n, stream, found, err, errlen);
}
