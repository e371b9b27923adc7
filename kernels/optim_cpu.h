/* optim_cpu.h — CPU reference of the fused optimizer updates over a flat f32 buffer (one pass:
 * unscale, weight decay, moment updates, parameter update) and of the non-finite check. */
#ifndef KERNELS_OPTIM_CPU_H
#define KERNELS_OPTIM_CPU_H

#include <stddef.h>

/* torch.optim.SGD: g = grad*grad_scale + wd*p; buf = momentum*buf + g (mom may be NULL when
 * momentum == 0); g = nesterov ? g + momentum*buf : buf; p -= lr*g. */
void optim_cpu_sgd(float *p, const float *grad, float *mom, size_t n, double lr, double wd,
                   double momentum, int nesterov, double grad_scale);
/* torch.optim.AdamW: p *= 1 - lr*wd; m, v moments; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps),
 * bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
void optim_cpu_adamw(float *p, const float *grad, float *m, float *v, size_t n, double lr,
                     double beta1, double beta2, double eps, double wd, double bc1, double bc2,
                     double grad_scale);
/* 1 if any of g[0..n) is inf or NaN. */
int optim_cpu_nonfinite(const float *g, size_t n);

#endif
