/* ops_cpu_tables.c — the CPU backend's ops tables (f32 and f64): every CPU op of kernels/ (the
 * files named *_cpu.c) in the ops.h table, and ops_cpu_init, which hands one out. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/ops_cpu.h"

static void cpu_destroy(ops_t *o) { (void)o; }
static void cpu_conv_plan_free(const ops_t *o, ops_conv_t *c) { c->plan = NULL; }
static int cpu_conv1x1_bn_ok(const ops_t *o, const ops_conv_t *c)
{
  return c->kind == OPS_CONV1X1 && c->cout <= OPS_BN_1X1_MOST_K;
}

/* Every transposed convolution takes its gradient gathered (ops.h). */
static int cpu_conv_gathered(const ops_t *o, const ops_conv_t *c)
{
  return c->kind == OPS_CONVT2X2;
}

static int cpu_fill_zero(const ops_t *o, void *dst, size_t bytes)
{
  memset(dst, 0, bytes);
  return 0;
}

/* The CPU finishes every op before it returns: the "async" loss is the loss, a bad label has
 * already failed it, and the checks have nothing left to report. */
static int cpu_softmax_ce_async(const ops_t *o, const void *logits, const int32_t *labels,
                                size_t P, int K, int ignore_index, double scale,
                                double norm_count, void *dlogits, int32_t *pred, double *dev_out)
{
  double sum = 0;
  long count = 0;
  if (o->softmax_ce(o, logits, labels, P, K, ignore_index, scale, norm_count, dlogits, pred, &sum,
                    &count))
    return -1;
  dev_out[0] = sum;
  dev_out[1] = (double)count;
  return 0;
}

#define CPU_NO_BAD_LABEL (~0ULL)
static int cpu_labels_check_async(const ops_t *o, unsigned long long *host)
{
  *host = CPU_NO_BAD_LABEL;
  return 0;
}
static int cpu_labels_result(const ops_t *o, unsigned long long word) { return 0; }
static int cpu_labels_check(const ops_t *o) { return 0; }

#define OPS_CPU_TABLE(S, DT)                                                                    \
  {                                                                                            \
    .name = "cpu-" #S, .dtype = DT, .elem = sizeof(S##_t), .device = -1, .ctx = NULL,           \
    .last_error = ops_cpu_last_error, .destroy = cpu_destroy,                                  \
    .conv_plan = cpu_conv_plan_##S, .conv_plan_free = cpu_conv_plan_free,                       \
    .conv_fwd = cpu_conv_fwd_##S, .conv_bwd_filter = cpu_conv_bwd_filter_##S,                   \
    .conv_bwd_data = cpu_conv_bwd_data_##S, .bn_stats = cpu_bn_stats_##S,                       \
    .bn_finalize = cpu_bn_finalize, .bn_stats_finalize = cpu_bn_stats_finalize,                 \
    .bn_saved_from_running = cpu_bn_saved_from_running,         \
    .bn_apply = cpu_bn_apply_##S, .bn_apply_ld = cpu_bn_apply_ld_##S,                           \
    .bn_apply_pool = cpu_bn_apply_pool_##S,                                                     \
    .bn_bwd_reduce = cpu_bn_bwd_reduce_##S,                                                     \
    .bn_bwd_apply = cpu_bn_bwd_apply_##S, .gn_fwd = cpu_gn_fwd_##S, .gn_bwd = cpu_gn_bwd_##S,   \
    .bn_bwd_reduce_1x1 = cpu_bn_bwd_reduce_1x1_##S, .bn_bwd_apply_1x1 = cpu_bn_bwd_apply_1x1_##S, \
    .conv1x1_bn_ok = cpu_conv1x1_bn_ok, .conv1x1_fwd_bn = cpu_conv1x1_fwd_bn_##S,                 \
    .conv1x1_bwd_filter_bn = cpu_conv1x1_bwd_filter_bn_##S,                                       \
    .head_train_1x1 = ops_head_train_by_ops,                                                      \
    .relu_fwd = cpu_relu_fwd_##S, .relu_bwd = cpu_relu_bwd_##S,                                 \
    .maxpool_fwd = cpu_maxpool_fwd_##S, .maxpool_bwd = cpu_maxpool_bwd_##S,                     \
    .concat_fwd = cpu_concat_fwd_##S, .concat_bwd = cpu_concat_bwd_##S,                         \
    .concat_bwd_gathered = cpu_concat_bwd_gathered_##S, .conv_gathered = cpu_conv_gathered,      \
    .conv_bwd_filter_gathered = cpu_conv_bwd_filter_gathered_##S,                               \
    .conv_bwd_data_gathered = cpu_conv_bwd_data_gathered_##S,                                   \
    .softmax_ce = cpu_softmax_ce_##S, .from_f32 = cpu_from_f32_##S, .to_f32 = cpu_to_f32_##S,   \
    .fill_zero = cpu_fill_zero, .softmax_ce_async = cpu_softmax_ce_async,                        \
    .labels_check_async = cpu_labels_check_async, .labels_result = cpu_labels_result,           \
    .labels_check = cpu_labels_check,                                                           \
  }

typedef float f32_t;
typedef double f64_t;
static const ops_t cpu_f32 = OPS_CPU_TABLE(f32, OPS_F32);
static const ops_t cpu_f64 = OPS_CPU_TABLE(f64, OPS_F64);

int ops_cpu_init(ops_t *o, ops_dtype_t dtype, char *err, size_t errlen)
{
  switch (dtype) {
  case OPS_F32: *o = cpu_f32; ops_cpu_set_fused(o); return 0;
  case OPS_F64: *o = cpu_f64; ops_cpu_set_fused(o); return 0;
  default:
    snprintf(err, errlen, "the CPU backend computes in f32 (or f64 for tests), not %s: use "
             "--precision fp32 with --device cpu", ops_dtype_name(dtype));
    return -1;
  }
}
