/* norm_cpu.c — CPU reference BatchNorm (split into local statistics, finalisation and apply,
 * so SyncBN can sum statistics across ranks in between) and GroupNorm, each with an optional
 * fused ReLU. Sums are f64: Σx² of f32 data is exact per term, so the variance stays accurate
 * for activations whose mean is far larger than their spread. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ops_cpu.h"

int cpu_bn_finalize(const ops_t *o, const double *stats, int C, double eps, double momentum,
                    float *running_mean, float *running_var, double *saved)
{
  double n = stats[2 * C];
  for (int c = 0; c < C; c++) {
    double mean = 0, var = 0;
    if (n > 0) {
      mean = stats[c] / n;
      var = stats[C + c] / n - mean * mean;
      if (var < 0) var = 0; /* rounding when var << mean² */
    }
    saved[c] = mean;
    saved[C + c] = 1.0 / sqrt(var + eps);
    if (n > 0 && running_mean && running_var) {
      /* PyTorch: the running variance uses the unbiased estimate. */
      double unbiased = n > 1 ? var * n / (n - 1) : var;
      running_mean[c] = (float)((1 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = (float)((1 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
  saved[2 * C] = n;
  return 0;
}

/* The two steps, composed: the reference the CUDA backend's fused version is checked against. */
int cpu_bn_stats_finalize(const ops_t *o, const void *x, size_t P, int C, double eps,
                          double momentum, float *running_mean, float *running_var,
                          double *stats, double *saved)
{
  if (o->bn_stats(o, x, P, C, stats) != 0) return -1;
  return cpu_bn_finalize(o, stats, C, eps, momentum, running_mean, running_var, saved);
}

int cpu_bn_saved_from_running(const ops_t *o, const float *running_mean,
                              const float *running_var, int C, double eps, double *saved)
{
  for (int c = 0; c < C; c++) {
    saved[c] = running_mean[c];
    saved[C + c] = 1.0 / sqrt((double)running_var[c] + eps);
  }
  saved[2 * C] = 0;
  return 0;
}

#define CPU_TMPL "kernels/norm_cpu_tmpl.h"
#include "kernels/cpu_tmpl.h"
