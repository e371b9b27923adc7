/* ops.h — the layer operations the model calls, as a table of function pointers per backend and
 * compute dtype. The CPU reference (ops_cpu_init, f32 and f64 from one source) is the oracle;
 * the CUDA backend fills the same table with cuDNN/cuBLAS calls and its own kernels, so the model
 * code does not change. Tensors are NHWC in the table's dtype; pointers are on the backend's
 * device. Per-channel statistics are f64 (sums that SyncBN all-reduces, saved mean/invstd).
 *
 * Every op returns 0 or non-zero with a message in last_error. "P" is a pixel count (n*h*w).
 * Weight-gradient outputs take `acc`: 0 writes, 1 adds to what is there (gradient accumulation). */
#ifndef KERNELS_OPS_H
#define KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { OPS_F32 = 0, OPS_F64, OPS_BF16, OPS_F16 } ops_dtype_t;

typedef enum { OPS_CONV3X3 = 0, OPS_CONV1X1, OPS_CONVT2X2 } ops_conv_kind_t;

/* A convolution layer's fixed shape. Input is (n, h, w, cin); the output is (n, h, w, cout)
 * for CONV3X3 (pad 1, no bias) and CONV1X1 (bias), and (n, 2h, 2w, cout) for CONVT2X2 (stride 2,
 * bias). Weights: CONV3X3 [cout][3][3][cin]; CONV1X1 [cout][cin]; CONVT2X2 [cin][2][2][cout].
 * plan belongs to the backend (descriptors, chosen algorithms); conv_plan fills it once. */
typedef struct {
  ops_conv_kind_t kind;
  int h, w, cin, cout;
  int max_n;
  void *plan;
} ops_conv_t;

/* The fused ReLU of a normalisation, as its backward sees it: dy passes where the forward's
 * output was positive. With y, that is y > 0 (y: the forward's output, kept); without y, the
 * decision is recomputed from the normalisation's input x with gamma, beta and the saved
 * statistics, by the same arithmetic as the forward's apply (so the backward needs no copy of
 * the output: the model stores only x). */
typedef struct {
  const void *y;
  const void *gamma, *beta;
} ops_relu_t;

/* The most classes of a 1x1 head whose input gradient bn_bwd_*_1x1 form (below). */
#define OPS_BN_1X1_MOST_K 8

/* What a layer would use of the fused convolutions (ops.h conv_fused): all of them, as a block
 * pair's second convolution does (the forward with the previous BatchNorm + ReLU as its prologue
 * and its statistics, the input gradient with the mask and sums, the weight gradient with the
 * prologue); only the forward without a prologue, with its statistics (a first block); or only
 * the plain input gradient, conv_bwd_data_fused with no mask and no sums (x, coef, saved and
 * sums NULL: the same values as conv_bwd_data), for a layer whose input gradient meets no
 * BatchNorm of its own (a first block's, into a pooled tensor or a concat). */
typedef enum { OPS_FUSE_PAIR = 0, OPS_FUSE_STATS, OPS_FUSE_DGRAD } ops_fuse_use_t;

typedef struct ops ops_t;
struct ops {
  const char *name;    /* "cpu-f32", "cuda-bf16", ... */
  ops_dtype_t dtype;
  size_t elem;         /* bytes per tensor element */
  int device;          /* -1 host, else CUDA ordinal */
  void *ctx;           /* backend state (stream, handles); NULL on the CPU */
  const char *(*last_error)(const ops_t *o);
  void (*destroy)(ops_t *o);

  /* Convolutions. conv_plan prepares c (may be a no-op) and sets *ws_bytes to the workspace
   * every call on c needs; the caller allocates the largest over its layers and passes it. */
  int (*conv_plan)(const ops_t *o, ops_conv_t *c, size_t *ws_bytes);
  void (*conv_plan_free)(const ops_t *o, ops_conv_t *c);
  int (*conv_fwd)(const ops_t *o, const ops_conv_t *c, int n, const void *x, const void *w,
                  const void *b, void *y, void *ws);
  /* dw (and db when the kind has a bias) from x and dy. */
  int (*conv_bwd_filter)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                         const void *dy, void *dw, void *db, int acc, void *ws);
  int (*conv_bwd_data)(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                       const void *w, void *dx, void *ws);

  /* Fused 3x3 convolutions (OPS_CONV3X3, no bias), as kernels/conv_fused_cpu.h and
   * conv_fused_bwd_cpu.h define them: the previous layer's BatchNorm apply + ReLU as the input's
   * prologue, a = max(0, x * scale + shift) with coef = [scale (cin) | shift (cin)], f32 in the
   * table's memory (coef NULL: a = x), and in the same pass this layer's BatchNorm statistics
   * (forward) or the previous layer's BatchNorm backward sums (input gradient). NULL entries:
   * the backend has none (the model then runs the plain ops).
   *   conv_fused:  for the use (ops_fuse_use_t), 0 when the backend cannot run the fused ops
   *                it takes on c (after conv_plan); 1 when it can; 2 when it can and they were
   *                measured faster than the plain ops (the default engine takes those);
   *                *ws_bytes: the workspace they need (pass the larger of it and conv_plan's)
   *   conv_fwd_fused:        y = conv(a); stats (may be NULL) as bn_stats of y
   *   conv_bwd_data_fused:   dx = conv_bwd_data(dy) * [x * scale + shift > 0] (no mask without
   *                          coef); sums (may be NULL) = bn_bwd_reduce's sums of dx (Σdx,
   *                          Σdx·(x - mean)·invstd, mean and invstd from saved, bn_finalize's)
   *   conv_bwd_filter_fused: dw from a and dy (acc as conv_bwd_filter)
   *   bn_coef:       coef of a BatchNorm from its saved statistics, gamma and beta: scale =
   *                  gamma·invstd, shift = beta - mean·scale
   *   bn_bwd_params: dgamma = sums[C..2C), dbeta = sums[0..C) (added with acc): the parameter
   *                  gradients bn_bwd_reduce gives, from sums made by conv_bwd_data_fused */
  int (*conv_fused)(const ops_t *o, const ops_conv_t *c, ops_fuse_use_t use, size_t *ws_bytes);
  int (*conv_fwd_fused)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const float *coef, const void *w, void *y, double *stats, void *ws);
  int (*conv_bwd_data_fused)(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                             const void *w, const void *x, const float *coef,
                             const double *saved, void *dx, double *sums, void *ws);
  int (*conv_bwd_filter_fused)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                               const float *coef, const void *dy, void *dw, int acc, void *ws);
  int (*bn_coef)(const ops_t *o, const double *saved, const void *gamma, const void *beta, int C,
                 float *coef);
  int (*bn_bwd_params)(const ops_t *o, const double *sums, int C, void *dgamma, void *dbeta,
                       int acc);

  /* BatchNorm (training), split so SyncBN can sum the statistics in between:
   *   bn_stats:    stats[0..C) = Σx, stats[C..2C) = Σx², stats[2C] = P (local, f64)
   *   (sync_stats hook sums stats over ranks)
   *   bn_finalize: saved[0..C) = mean, saved[C..2C) = 1/sqrt(var + eps), saved[2C] = count;
   *                running stats (f32) move by momentum toward mean and the unbiased var
   *                (skipped when the count is 0; running may be NULL)
   *   bn_apply:    y = gamma * (x - mean) * invstd + beta, then ReLU when relu != 0
   * Backward, with dy masked by the fused ReLU when relu (ops_relu_t, below) is not NULL:
   *   bn_bwd_reduce: sums[0..C) = Σdy, sums[C..2C) = Σdy·x̂ (local), and dgamma/dbeta from them
   *   (sync_stats hook sums `sums`)
   *   bn_bwd_apply:  dx = gamma * invstd * (dy - Σdy/count - x̂ Σdy·x̂/count) */
  int (*bn_stats)(const ops_t *o, const void *x, size_t P, int C, double *stats);
  int (*bn_finalize)(const ops_t *o, const double *stats, int C, double eps, double momentum,
                     float *running_mean, float *running_var, double *saved);
  /* bn_stats then bn_finalize with nothing between (no SyncBN): the same stats, saved and
   * running statistics, in one step (the CUDA backend finalises in the statistics' last pass). */
  int (*bn_stats_finalize)(const ops_t *o, const void *x, size_t P, int C, double eps,
                           double momentum, float *running_mean, float *running_var,
                           double *stats, double *saved);
  /* Eval mode: saved from the running statistics. */
  int (*bn_saved_from_running)(const ops_t *o, const float *running_mean,
                               const float *running_var, int C, double eps, double *saved);
  int (*bn_apply)(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                  const void *gamma, const void *beta, int relu, void *y);
  /* bn_apply into rows of y ldy >= C elements apart (its first C channels: e.g. the first part
   * of a concat, with no tensor of its own); the other channels of y are not touched. */
  int (*bn_apply_ld)(const ops_t *o, const void *x, size_t P, int C, const double *saved,
                     const void *gamma, const void *beta, int relu, void *y, size_t ldy);
  /* bn_apply_ld over n images of h x w (both even), and the 2x2 max-pool of its output into
   * pooled and arg as maxpool_fwd makes them (the same values and winners), in one pass: the
   * pooling reads nothing again. */
  int (*bn_apply_pool)(const ops_t *o, const void *x, int n, int h, int w, int C,
                       const double *saved, const void *gamma, const void *beta, int relu,
                       void *y, size_t ldy, void *pooled, uint8_t *arg);
  int (*bn_bwd_reduce)(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                       size_t P, int C, const double *saved, double *sums, void *dgamma,
                       void *dbeta, int acc);
  int (*bn_bwd_apply)(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x,
                      size_t P, int C, const double *saved, const double *sums,
                      const void *gamma, void *dx);
  /* bn_bwd_reduce and bn_bwd_apply where dy is the input gradient of a 1x1 convolution that
   * reads this normalisation's output (the U-Net's head) and is never stored:
   * dy = g w, g (P, K) that convolution's output gradient, w its [K][C] weights, formed as this
   * backend's conv_bwd_data forms it in this dtype (CUDA: as its few-output 1x1 kernels, the
   * route for up to 8 outputs and 256 inputs), so the results are bn_bwd_reduce's and
   * bn_bwd_apply's on conv_bwd_data's dy, bit for bit, for a convolution that conv1x1_bn_ok
   * (below) says 1 for (on CUDA a head planned on cuDNN or cuBLAS forms dy otherwise). K is 1
   * to OPS_BN_1X1_MOST_K, g and w are required, and the ReLU mask comes from gamma and beta
   * (relu->y NULL). NULL where a backend has no such path: the caller forms dy with
   * conv_bwd_data then. */
  int (*bn_bwd_reduce_1x1)(const ops_t *o, const void *g, const void *w, int K,
                           const ops_relu_t *relu, const void *x, size_t P, int C,
                           const double *saved, double *sums, void *dgamma, void *dbeta, int acc);
  int (*bn_bwd_apply_1x1)(const ops_t *o, const void *g, const void *w, int K,
                          const ops_relu_t *relu, const void *x, size_t P, int C,
                          const double *saved, const double *sums, const void *gamma, void *dx);
  /* The forward's side of the same pair: the 1x1 convolution c (OPS_CONV1X1, cout at most
   * OPS_BN_1X1_MOST_K, the U-Net's head) reading bn_apply(x) with its ReLU, whose output is
   * never stored; each op gives the bits of bn_apply (relu on) into a tensor followed by this
   * backend's op on it.
   *   conv1x1_bn_ok:         1 when the planned c can be run so, else 0
   *   conv1x1_fwd_bn:        y = conv_fwd(c, bn_apply(x)) (b: the bias)
   *   conv1x1_bwd_filter_bn: conv_bwd_filter(c, bn_apply(x), dy): dw, db, acc as there
   * x: n images of c's shape with c->cin channels; saved, gamma, beta as bn_apply's (all three
   * required). NULL where a backend has no such path: the caller applies the norm into a tensor
   * then. */
  int (*conv1x1_bn_ok)(const ops_t *o, const ops_conv_t *c);
  int (*conv1x1_fwd_bn)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const double *saved, const void *gamma, const void *beta, const void *w,
                        const void *b, void *y, void *ws);
  int (*conv1x1_bwd_filter_bn)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                               const double *saved, const void *gamma, const void *beta,
                               const void *dy, void *dw, void *db, int acc, void *ws);

  /* The head's training pass as one op: the 1x1 head c (as conv1x1_fwd_bn takes it: K = c->cout
   * classes, conv1x1_bn_ok 1) on bn_apply(x) with its ReLU, the loss over its logits and its
   * backward down to the BatchNorm's reduce, in this order:
   *   logits = conv1x1_fwd_bn(c, n, x, saved, gamma, beta, w, b)
   *   softmax_ce_async(logits, labels, P = n h w, K, ignore_index, scale, norm_count) -> g (its
   *                    dlogits) and dev_out[0..1]; no prediction
   *   conv1x1_bwd_filter_bn(c, n, x, saved, gamma, beta, g) -> dw, db (added to when acc)
   *   bn_bwd_reduce_1x1(g, w, K, ReLU mask from gamma and beta, x, P, c->cin, saved) -> sums,
   *                    dgamma, dbeta (added to when acc)
   * logits and g are those ops' bits; dw, db, sums, dgamma, dbeta and the loss are their values
   * within rounding (summed in an order of the backend's, fixed, so reruns repeat bit for bit;
   * the CPU backend runs the four ops). A backend may read x once for all of it (CUDA, where the
   * head's few-output kernels take c). ws: c's planned workspace. NULL where a backend has none:
   * the caller runs the four ops. */
  int (*head_train_1x1)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                        const double *saved, const void *gamma, const void *beta, const void *w,
                        const void *b, const int32_t *labels, int ignore_index, double scale,
                        double norm_count, void *logits, void *g, double *dev_out, void *dw,
                        void *db, double *sums, void *dgamma, void *dbeta, int acc, void *ws);

  /* GroupNorm over (h*w, C/G channels) per sample and group; saved: n*G means then n*G
   * invstds (f64). ReLU fused as for BN. */
  int (*gn_fwd)(const ops_t *o, const void *x, int n, size_t hw, int C, int G, double eps,
                const void *gamma, const void *beta, int relu, void *y, double *saved);
  int (*gn_bwd)(const ops_t *o, const void *dy, const ops_relu_t *relu, const void *x, int n,
                size_t hw, int C, int G, const double *saved, const void *gamma, void *dx,
                void *dgamma, void *dbeta, int acc);

  int (*relu_fwd)(const ops_t *o, const void *x, size_t count, void *y);
  int (*relu_bwd)(const ops_t *o, const void *dy, const void *y, size_t count, void *dx);

  /* 2x2 max-pool, stride 2; arg (n*h/2*w/2*C bytes) remembers which input won. */
  int (*maxpool_fwd)(const ops_t *o, const void *x, int n, int h, int w, int C, void *y,
                     uint8_t *arg);
  int (*maxpool_bwd)(const ops_t *o, const void *dy, const uint8_t *arg, int n, int h, int w,
                     int C, void *dx, int acc); /* acc: add into dx */

  /* y[p] = [a[p] (ca channels), b[p] (cb channels)]; backward splits (da added when acc).
   * Forward with a == NULL writes only b's part (the first ca channels were written in place,
   * bn_apply_ld). */
  int (*concat_fwd)(const ops_t *o, const void *a, int ca, const void *b, int cb, size_t P,
                    void *y);
  int (*concat_bwd)(const ops_t *o, const void *dy, int ca, int cb, size_t P, void *da,
                    int acc_a, void *db);

  /* The transposed convolution's output gradient in its GEMM's order ("gathered"). For an
   * OPS_CONVT2X2 output of n images of (2h, 2w) pixels and C = cout channels, the gathered z
   * holds, for each input pixel p = (image * h + t) * w + s, the 4C values
   * dy[image][2t + i][2s + j][c] for i, j in {0, 1} and c < C, in that order:
   *   z[((p * 2 + i) * 2 + j) * C + c] = dy[image][2t + i][2s + j][c]
   * the same elements as the NHWC dy, moved: row i j of pixel p is the GEMM's row for tap
   * (i, j), so the convolution's backward needs no gather pass of its own. NULL entries: the
   * backend has none (the model then runs concat_bwd, conv_bwd_filter and conv_bwd_data).
   *   concat_bwd_gathered:      concat_bwd over n images of H x W pixels (H and W even, P =
   *                             n H W) with db written gathered (C = cb, h = H/2, w = W/2);
   *                             da as concat_bwd's
   *   conv_gathered:            1 when the planned transposed convolution c takes dy gathered
   *                             in the two entries below, else 0 (other kinds, or a plan whose
   *                             backward cannot read that order)
   *   conv_bwd_filter_gathered: conv_bwd_filter of c (dw, db, acc as there) from dy gathered
   *   conv_bwd_data_gathered:   conv_bwd_data of c from dy gathered
   * The CPU backend's results are its plain ops' bits (the same sums in the same order). */
  int (*concat_bwd_gathered)(const ops_t *o, const void *dy, int ca, int cb, int n, int H,
                             int W, void *da, int acc_a, void *db);
  int (*conv_gathered)(const ops_t *o, const ops_conv_t *c);
  int (*conv_bwd_filter_gathered)(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                  const void *dy, void *dw, void *db, int acc, void *ws);
  int (*conv_bwd_data_gathered)(const ops_t *o, const ops_conv_t *c, int n, const void *dy,
                                const void *w, void *dx, void *ws);

  /* Per-pixel softmax cross-entropy over K classes, labels == ignore_index skipped.
   * *loss_sum = Σ -log p[label] and *count = number of counted pixels (host values).
   * dlogits (may be NULL) = scale * (softmax - onehot) / count (0 on ignored pixels), where
   * count is this call's count, or norm_count when norm_count > 0. Labels outside [0, K) that
   * are not ignore_index are an error. pred (may be NULL) gets the argmax class. */
  int (*softmax_ce)(const ops_t *o, const void *logits, const int32_t *labels, size_t P, int K,
                    int ignore_index, double scale, double norm_count, void *dlogits,
                    int32_t *pred, double *loss_sum, long *count);
  /* softmax_ce without the wait, for a step queued ahead or captured in a CUDA graph: the loss
   * sum and the counted pixels (f64) go to dev_out[0..1] in the table's memory, and a label out of
   * range is reported by the next labels check (the CPU reports it here, at once).
   * labels_check_async queues a copy of the check's word into *host (host memory the device can
   * write); once it has arrived, labels_result(o, *host) gives 0, or -1 with the message.
   * labels_check waits for the table's work and reports a label seen since the last check. */
  int (*softmax_ce_async)(const ops_t *o, const void *logits, const int32_t *labels, size_t P,
                          int K, int ignore_index, double scale, double norm_count, void *dlogits,
                          int32_t *pred, double *dev_out);
  int (*labels_check_async)(const ops_t *o, unsigned long long *host);
  int (*labels_result)(const ops_t *o, unsigned long long word);
  int (*labels_check)(const ops_t *o);

  /* dst (table dtype) = src (f32), and dst (f32) = src (table dtype) (+ dst when acc). */
  int (*from_f32)(const ops_t *o, const float *src, size_t count, void *dst);
  int (*to_f32)(const ops_t *o, const void *src, size_t count, float *dst, int acc);
  int (*fill_zero)(const ops_t *o, void *dst, size_t bytes);
};

/* ops.h head_train_1x1 as its four ops on o, in their order (x read four times): the CPU's
 * entry, and the route of a backend's entry where its one pass does not take the head. */
static inline int ops_head_train_by_ops(const ops_t *o, const ops_conv_t *c, int n, const void *x,
                                        const double *saved, const void *gamma,
                                        const void *beta, const void *w, const void *b,
                                        const int32_t *labels, int ignore_index, double scale,
                                        double norm_count, void *logits, void *g,
                                        double *dev_out, void *dw, void *db, double *sums,
                                        void *dgamma, void *dbeta, int acc, void *ws)
{
  const size_t P = (size_t)n * c->h * c->w;
  ops_relu_t relu;
  relu.y = NULL, relu.gamma = gamma, relu.beta = beta;
  if (o->conv1x1_fwd_bn(o, c, n, x, saved, gamma, beta, w, b, logits, ws) ||
      o->softmax_ce_async(o, logits, labels, P, c->cout, ignore_index, scale, norm_count, g, NULL,
                          dev_out) ||
      o->conv1x1_bwd_filter_bn(o, c, n, x, saved, gamma, beta, g, dw, db, acc, ws) ||
      o->bn_bwd_reduce_1x1(o, g, w, c->cout, &relu, x, P, c->cin, saved, sums, dgamma, dbeta,
                           acc))
    return -1;
  return 0;
}

/* The CPU reference backend in f32 or f64 (other dtypes: an error that says so). */
int ops_cpu_init(ops_t *o, ops_dtype_t dtype, char *err, size_t errlen);

const char *ops_dtype_name(ops_dtype_t d);

#endif
