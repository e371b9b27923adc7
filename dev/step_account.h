/* step_account.h — the account of a training step: for every (layer, pass) the FLOPs it must do
 * and the HBM bytes it must move, computed from tensor shapes; the time it costs inside the
 * replayed step (measured by dev/ops_cuda_bench); and the roofline against ceilings measured in
 * the same run. Host code only, so the arithmetic is unit-tested without a GPU
 * (tests/check_account.c).
 *
 * What is counted. FLOPs: the model's multiply-adds of the convolutions (2 per MAC; the RGB layer
 * at its 3 input channels, whatever padding a backend adds), forward, backward data and
 * backward weights alike; the element passes count 0 (their work is bytes). Bytes: the tensors
 * an operation must read and write once each (activations, weights, gradients; statistics of
 * the batch are per channel and left out, < 0.1 %, except in the fused engine's operations,
 * which replace whole passes with them), in the dtype it moves them in; what a
 * kernel reads more than once, or a workspace it spills to, is the difference between its
 * measured time and its roofline time. */
#ifndef DEV_STEP_ACCOUNT_H
#define DEV_STEP_ACCOUNT_H

#include <stddef.h>
#include <stdio.h>

#include "kernels/ops.h"

/* The step's passes, as ops_cuda_bench names its categories (the A/B scripts parse them). */
typedef enum {
  ACCT_CAST_INPUT = 0,
  ACCT_CONV_FWD,
  ACCT_BN_STATS,
  ACCT_BN_APPLY,
  ACCT_MAXPOOL,
  ACCT_BN_RECOMPUTE,
  ACCT_CONCAT,
  ACCT_LOSS,
  ACCT_CONV_BWD_FILTER,
  ACCT_CAST_GRADS,
  ACCT_CONV_BWD_DATA,
  ACCT_BN_BWD_REDUCE,
  ACCT_BN_BWD_APPLY,
  ACCT_OPTIMIZER,
  ACCT_NPASS
} acct_pass_t;

const char *acct_pass_name(acct_pass_t p);
/* The pass of a name from acct_pass_name, or -1. */
int acct_pass_of(const char *name);

typedef struct {
  double flops, bytes;
} acct_cost_t;

/* A convolution's pass (ACCT_CONV_FWD, ACCT_CONV_BWD_DATA or ACCT_CONV_BWD_FILTER) over n
 * images of shape c (ops.h: h, w are the input's; CONVT2X2 doubles them): elem bytes per
 * activation/weight element, gelem per weight-gradient element (the backward weights' output).
 * Each tensor once: a CONVT2X2 backward's gather pass (NHWC dy) or its f32 partials are not
 * counted, and with dy gathered (ops.h) there are none. */
acct_cost_t acct_conv(const ops_conv_t *c, acct_pass_t pass, int n, size_t elem, size_t gelem);

/* BatchNorm passes over P pixels of C channels (ACCT_BN_STATS, ACCT_BN_APPLY,
 * ACCT_BN_RECOMPUTE, ACCT_BN_BWD_REDUCE, ACCT_BN_BWD_APPLY; backward's ReLU mask recomputed from
 * the norm's input, so no output is read). */
acct_cost_t acct_bn(acct_pass_t pass, size_t P, int C, size_t elem);
/* The backward passes (ACCT_BN_BWD_REDUCE, ACCT_BN_BWD_APPLY) with dy formed where they read it
 * from a 1x1 head of K classes (ops.h bn_bwd_*_1x1): the head's output gradient (P x K) read
 * instead of dy, and its 2 P C K products; other passes 0. */
acct_cost_t acct_bn_head(acct_pass_t pass, size_t P, int C, int K, size_t elem);

/* 2x2 max-pool over n images of h x w x C (the full-size side): forward writes the pooled
 * tensor and a byte per pooled element (the winner); backward (acc: added into dx) reads them. */
acct_cost_t acct_maxpool_fwd(int n, int h, int w, int C, size_t elem);
acct_cost_t acct_maxpool_bwd(int n, int h, int w, int C, size_t elem, int acc);

/* Concatenation of P pixels, [a (ca channels), b (cb)]: forward with or without a's part
 * (with_a 0: a was written in place); backward splits (acc_a: da added to), b's part in NHWC or
 * gathered for the up-convolution (ops.h concat_bwd_gathered: the same bytes). */
acct_cost_t acct_concat_fwd(size_t P, int ca, int cb, int with_a, size_t elem);
acct_cost_t acct_concat_bwd(size_t P, int ca, int cb, int acc_a, size_t elem);

/* Softmax cross-entropy over P pixels and K classes: logits read, their gradient written,
 * 4-byte labels read. */
acct_cost_t acct_loss(size_t P, int K, size_t elem);

/* The fused engine's pass of a 3x3 convolution (ops.h conv_fwd_fused, conv_bwd_data_fused,
 * conv_bwd_filter_fused; the previous BatchNorm + ReLU applied as the input's prologue): the
 * convolution's FLOPs, and the bytes acct_conv counts plus what the fusion reads and writes
 * besides: every pass reads the prologue's coefficients (2 cin f32); forward writes y's
 * statistics (2 cout + 1 f64); the input gradient also reads x (the ReLU mask is recomputed from
 * it) and the previous BatchNorm's saved statistics (2 cin + 1 f64), and writes its backward sums
 * (2 cin f64). The fused passes' per-channel vectors are counted: they replace whole passes. */
acct_cost_t acct_conv_fused(const ops_conv_t *c, acct_pass_t pass, int n, size_t elem,
                            size_t gelem);

/* BatchNorm's per-channel steps over C channels, which the fused schedule runs apart from its
 * tensor passes (bytes of the f64 statistics, f32 running statistics and coefficients, elem-byte
 * gamma and beta, gelem-byte parameter gradients):
 *   acct_bn_finalize: bn_finalize (statistics read; running statistics read and written; saved
 *                     written)
 *   acct_bn_coef:     bn_coef (saved, gamma and beta read; the coefficients written)
 *   acct_bn_params:   bn_bwd_params (the sums read; dgamma and dbeta written) */
acct_cost_t acct_bn_finalize(int C);
acct_cost_t acct_bn_coef(int C, size_t elem);
acct_cost_t acct_bn_params(int C, size_t gelem);

/* A cast of count elements between f32 and a elem-byte dtype. */
acct_cost_t acct_cast(size_t count, size_t elem);

/* SGD with momentum over count parameters: f32 parameters and momentum read and written, the
 * gradients read (gelem bytes each), and the working copy written (welem bytes; 0: none). */
acct_cost_t acct_sgd(size_t count, size_t gelem, size_t welem);

/* ---- the account of one step ---- */

/* Which convolution engine ran an operation (SHMDDP_CONV_ENGINE): the library's (cuDNN's
 * convolutions, the separate BatchNorm passes) or the fused one (a fused convolution, or a
 * BatchNorm step the fused schedule runs in place of a plain one: its statistics finalised from
 * the convolution's sums, its coefficients, its backward from the input gradient's sums). */
typedef enum { ACCT_LIBRARY = 0, ACCT_FUSED } acct_engine_t;

/* "library" or "fused". */
const char *acct_engine_name(acct_engine_t e);

typedef struct {
  char layer[32];
  acct_pass_t pass;
  acct_engine_t engine; /* ACCT_FUSED when any of its operations is the fused engine's */
  int ops;             /* operations merged into this row */
  double flops, bytes;
  double ms;           /* cost inside the replayed step; negative: not measured */
} acct_row_t;

typedef struct {
  acct_row_t *rows;
  int n, cap;
} acct_t;

/* Adds an operation's cost to its (layer, pass) row (a new row in order of first sight), run
 * by engine e (acct_add: the library's). Returns 0, or -1 when out of memory. */
int acct_add(acct_t *a, const char *layer, acct_pass_t pass, acct_cost_t c);
int acct_add_on(acct_t *a, const char *layer, acct_pass_t pass, acct_engine_t e, acct_cost_t c);

/* How many layers have a convolution pass run by the fused engine. */
int acct_fused_layers(const acct_t *a);
void acct_free(acct_t *a);

/* The ceilings the roofline is drawn against, measured in the same run. */
typedef struct {
  double flops; /* FLOP/s of a large matrix product in the step's dtype */
  double bw;    /* bytes/s (read + written) of a device-to-device copy */
} acct_ceiling_t;

/* The time an operation of cost c takes at the ceilings: max(FLOPs / flops, bytes / bw), ms. */
double acct_roofline_ms(acct_cost_t c, const acct_ceiling_t *k);

/* Totals of one pass (or of the whole step, pass = ACCT_NPASS). ms: the sum of the measured
 * rows (unmeasured rows count 0); roof_ms: their roofline times. */
typedef struct {
  int ops, rows;
  double flops, bytes, ms, roof_ms;
} acct_total_t;

acct_total_t acct_total(const acct_t *a, acct_pass_t pass);

/* What the report says beside the rows. pass_ms[p]: the pass's cost inside the step with all its
 * operations left out at once (negative: not measured). */
typedef struct {
  const char *device, *config;
  const char *engine; /* the SHMDDP_CONV_ENGINE setting the step ran under (NULL: not said) */
  double step_ms; /* the graph-replayed step */
  int images;     /* per step */
  acct_ceiling_t ceiling;
  double pass_ms[ACCT_NPASS];
} acct_report_t;

/* Model FLOP utilisation of the step: its FLOPs per step time against the matrix ceiling. */
double acct_mfu(const acct_t *a, const acct_report_t *r);

/* The account as markdown (bench/results/roofline_*.md) and as JSON (tools/report --account).
 * Return 0, or -1 when writing failed. */
int acct_write_markdown(FILE *f, const acct_t *a, const acct_report_t *r);
int acct_write_json(FILE *f, const acct_t *a, const acct_report_t *r);

#endif
