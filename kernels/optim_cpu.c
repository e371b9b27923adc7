/* optim_cpu.c — CPU reference of the fused optimizer updates and the non-finite check. */
#include "config.h"

#include "kernels/optim_cpu.h"

#include <math.h>

void optim_cpu_sgd(float *p, const float *grad, float *mom, size_t n, double lr, double wd,
                   double momentum, int nesterov, double grad_scale)
{
  const float flr = (float)lr, fwd = (float)wd, fm = (float)momentum, fs = (float)grad_scale;
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * fs + fwd * p[i];
    if (mom) {
      float b = fm * mom[i] + g;
      mom[i] = b;
      g = nesterov ? g + fm * b : b;
    }
    p[i] -= flr * g;
  }
}

void optim_cpu_adamw(float *p, const float *grad, float *m, float *v, size_t n, double lr,
                     double beta1, double beta2, double eps, double wd, double bc1, double bc2,
                     double grad_scale)
{
  const float decay = (float)(1.0 - lr * wd), b1 = (float)beta1, b2 = (float)beta2;
  const float step = (float)(lr / bc1), inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  const float feps = (float)eps, fs = (float)grad_scale;
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * fs;
    float mi = b1 * m[i] + (1 - b1) * g;
    float vi = b2 * v[i] + (1 - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + feps);
  }
}

int optim_cpu_nonfinite(const float *g, size_t n)
{
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad |= !isfinite(g[i]);
  return bad;
}
