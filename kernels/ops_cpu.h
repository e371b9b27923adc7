/* ops_cpu.h — the CPU backend's functions behind ops.h, declared once per element type
 * (suffix _f32 and _f64) so ops_cpu.c can fill a table for each. Internal to kernels/. */
#ifndef KERNELS_OPS_CPU_H
#define KERNELS_OPS_CPU_H

#include "kernels/ops.h"

/* Record a message for ops->last_error (per thread); returns -1 for `return ops_cpu_fail(...)`. */
int ops_cpu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *ops_cpu_last_error(const ops_t *o);

#define OPS_CPU_DECLARE(S)                                                                      \
  int cpu_conv_plan_##S(const ops_t *o, ops_conv_t *c, size_t *ws_bytes);                      \
  int cpu_conv_fwd_##S(const ops_t *o, const ops_conv_t *c, int n, const void *x,              \
                       const void *w, const void *b, void *y, void *ws);                        \
  int cpu_conv_bwd_filter_##S(const ops_t *o, const ops_conv_t *c, int n, const void *x,       \
                              const void *dy, void *dw, void *db, int acc, void *ws);          \
  int cpu_conv_bwd_data_##S(const ops_t *o, const ops_conv_t *c, int n, const void *dy,        \
                            const void *w, void *dx, void *ws);                                 \
  int cpu_bn_stats_##S(const ops_t *o, const void *x, size_t P, int C, double *stats);         \
  int cpu_bn_apply_##S(const ops_t *o, const void *x, size_t P, int C, const double *saved,    \
                       const void *gamma, const void *beta, int relu, void *y);                 \
  int cpu_bn_apply_ld_##S(const ops_t *o, const void *x, size_t P, int C, const double *saved, \
                          const void *gamma, const void *beta, int relu, void *y, size_t ldy);  \
  int cpu_bn_bwd_reduce_##S(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, \
                            size_t P, int C, const double *saved, double *sums, void *dgamma,  \
                            void *dbeta, int acc);                                              \
  int cpu_bn_bwd_apply_##S(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,  \
                           size_t P, int C, const double *saved, const double *sums,           \
                           const void *gamma, void *dx);                                        \
  void cpu_conv1x1_dgrad_##S(const void *dy, const void *w, size_t P, int co, int ci, void *dx); \
  int cpu_bn_bwd_reduce_1x1_##S(const ops_t *o, const void *g, const void *w, int K,            \
                                const ops_relu_t *relu, const void *x, size_t P, int C,         \
                                const double *saved, double *sums, void *dgamma, void *dbeta,  \
                                int acc);                                                       \
  int cpu_bn_bwd_apply_1x1_##S(const ops_t *o, const void *g, const void *w, int K,             \
                               const ops_relu_t *relu, const void *x, size_t P, int C,          \
                               const double *saved, const double *sums, const void *gamma,     \
                               void *dx);                                                       \
  int cpu_conv1x1_fwd_bn_##S(const ops_t *o, const ops_conv_t *c, int n, const void *x,         \
                             const double *saved, const void *gamma, const void *beta,          \
                             const void *w, const void *b, void *y, void *ws);                  \
  int cpu_conv1x1_bwd_filter_bn_##S(const ops_t *o, const ops_conv_t *c, int n, const void *x,  \
                                    const double *saved, const void *gamma, const void *beta,   \
                                    const void *dy, void *dw, void *db, int acc, void *ws);     \
  int cpu_gn_fwd_##S(const ops_t *o, const void *x, int n, size_t hw, int C, int G, double eps, \
                     const void *gamma, const void *beta, int relu, void *y, double *saved);    \
  int cpu_gn_bwd_##S(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, int n, \
                     size_t hw, int C, int G, const double *saved, const void *gamma,          \
                     void *dx, void *dgamma, void *dbeta, int acc);                             \
  int cpu_relu_fwd_##S(const ops_t *o, const void *x, size_t count, void *y);                  \
  int cpu_relu_bwd_##S(const ops_t *o, const void *dy, const void *y, size_t count, void *dx); \
  int cpu_maxpool_fwd_##S(const ops_t *o, const void *x, int n, int h, int w, int C, void *y,  \
                          uint8_t *arg);                                                        \
  int cpu_bn_apply_pool_##S(const ops_t *o, const void *x, int n, int h, int w, int C,          \
                            const double *saved, const void *gamma, const void *beta, int relu, \
                            void *y, size_t ldy, void *pooled, uint8_t *arg);                   \
  int cpu_maxpool_bwd_##S(const ops_t *o, const void *dy, const uint8_t *arg, int n, int h,    \
                          int w, int C, void *dx, int acc);                                     \
  int cpu_concat_fwd_##S(const ops_t *o, const void *a, int ca, const void *b, int cb,         \
                         size_t P, void *y);                                                    \
  int cpu_concat_bwd_##S(const ops_t *o, const void *dy, int ca, int cb, size_t P, void *da,   \
                         int acc_a, void *db);                                                  \
  int cpu_concat_bwd_gathered_##S(const ops_t *o, const void *dy, int ca, int cb, int n, int H, \
                                  int W, void *da, int acc_a, void *db);                       \
  int cpu_conv_bwd_filter_gathered_##S(const ops_t *o, const ops_conv_t *c, int n,              \
                                       const void *x, const void *dy, void *dw, void *db,       \
                                       int acc, void *ws);                                      \
  int cpu_conv_bwd_data_gathered_##S(const ops_t *o, const ops_conv_t *c, int n, const void *dy, \
                                     const void *w, void *dx, void *ws);                        \
  int cpu_softmax_ce_##S(const ops_t *o, const void *logits, const int32_t *labels, size_t P,  \
                         int K, int ignore_index, double scale, double norm_count,             \
                         void *dlogits, int32_t *pred, double *loss_sum, long *count);          \
  int cpu_from_f32_##S(const ops_t *o, const float *src, size_t count, void *dst);             \
  int cpu_to_f32_##S(const ops_t *o, const void *src, size_t count, float *dst, int acc);

OPS_CPU_DECLARE(f32)
OPS_CPU_DECLARE(f64)

/* The fused convolutions' entries (kernels/conv_fused_ops_cpu.c), for either table. */
void ops_cpu_set_fused(ops_t *o);

/* dtype-independent (statistics are f64 everywhere) */
int cpu_bn_finalize(const ops_t *o, const double *stats, int C, double eps, double momentum,
                    float *running_mean, float *running_var, double *saved);
int cpu_bn_stats_finalize(const ops_t *o, const void *x, size_t P, int C, double eps,
                          double momentum, float *running_mean, float *running_var,
                          double *stats, double *saved);
int cpu_bn_saved_from_running(const ops_t *o, const float *running_mean,
                              const float *running_var, int C, double eps, double *saved);

#endif
