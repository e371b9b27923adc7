/* layers.h — the model's layers on top of the ops table: a convolution (3x3, 1x1, transposed
 * 2x2) and a normalisation (BatchNorm or GroupNorm, ReLU fused) with their forward and
 * backward, the parameter bookkeeping between compute-dtype working copies and the f32 flat
 * buffers, and the data-parallel hooks (SyncBN statistics, gradients ready). */
#ifndef SRC_MODEL_LAYERS_H
#define SRC_MODEL_LAYERS_H

#include <stddef.h>

#include "kernels/ops.h"
#include "src/model/model.h"

/* One parameter tensor in the flat buffers. */
typedef enum { LAYER_INIT_ZERO = 0, LAYER_INIT_ONE, LAYER_INIT_KAIMING_RELU, LAYER_INIT_KAIMING_LINEAR } layer_init_t;

typedef struct {
  char name[40];
  char shape[40];
  size_t offset, count; /* where it starts in the flat buffers (padded: see unet_build.c) */
  size_t packed;        /* where it starts in the packed layout (checkpoints, exports) */
  size_t align;         /* its offset in the flat buffers is a multiple of this many elements */
  layer_init_t init;
  int fan_in;
  int with_prev;        /* the second tensor of a layer (a bias): laid out next to the first */
} layer_param_t;

/* What every layer call needs. wparams/wgrads are the compute-dtype working copies; when the
 * compute dtype is f32 they are the f32 flat buffers themselves. With gstage (separate copies
 * only), a layer's working gradients are staged there instead of in wgrads: one layer's worth,
 * folded into the f32 buffer as soon as the layer's weight gradients are done, so no full-size
 * low-precision gradient buffer exists (wgrads may then be NULL). Without gstage and grads
 * (working gradients), the weight gradients are written to wgrads and stay there. */
typedef struct {
  const ops_t *ops;
  const layer_param_t *params;
  void *wparams, *wgrads;
  void *gstage;
  float *grads;   /* the f32 gradients; NULL when the working ones are the gradients */
  int separate;   /* working copies differ from the f32 buffers */
  int accumulate; /* gradients add to the f32 buffer */
  int train;
  const model_hooks_t *hooks;
  void *ws;       /* the convolutions' shared workspace */
  char *err;
  size_t errlen;
} layer_ctx_t;

typedef struct {
  ops_conv_t desc;
  int w_id, b_id; /* parameter ids; b_id -1 without bias */
  int dy_gathered; /* a transposed convolution whose backward takes dy in the gathered order
                      (ops.h concat_bwd_gathered): layer_conv_bwd_filter and _data call the
                      table's _gathered entries */
  int dgrad_fused; /* a 3x3 whose plain input gradient runs on the fused kernels
                      (OPS_FUSE_DGRAD): layer_conv_bwd_data calls conv_bwd_data_fused with no
                      mask and no sums */
} layer_conv_t;

typedef struct {
  model_norm_t kind;
  int C, G;
  int gamma_id, beta_id;
  float *running; /* BatchNorm: running mean (C) then running variance (C) */
  double *stats;  /* BatchNorm: 2C+1 forward sums, then 2C backward sums */
  double *saved;  /* BatchNorm: 2C+1 (mean, invstd, count); GroupNorm: 2*max_n*G */
  float *coef;    /* BatchNorm feeding a fused convolution: its apply as that convolution's
                     prologue, scale (C) then shift (C) (ops.h conv_fwd_fused); else NULL */
} layer_norm_t;

#define LAYER_BN_MOMENTUM 0.1
#define LAYER_NORM_EPS 1e-5

/* Pointer to parameter id's working values. */
void *layer_wparam(const layer_ctx_t *c, int id);
/* Elements of gstage a layer with parameters id0, id1 (id1 may be -1) needs. */
size_t layer_stage_elems(const layer_param_t *params, int id0, int id1);
/* Weight-gradient ops write (0) or add (1): add only when accumulating straight into f32. */
int layer_grad_acc(const layer_ctx_t *c);
int layer_conv_fwd(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x, void *y);
/* Weight (and bias) gradients from x and dy, folded and reported final. dy is in the gathered
 * order where l->dy_gathered says so, else NHWC (both layer_conv_bwd_*). */
int layer_conv_bwd_filter(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x,
                          const void *dy);
/* The input gradient dx from dy (does not read x: dx may take x's memory); on the fused kernels
 * with no mask and no sums where l->dgrad_fused. */
int layer_conv_bwd_data(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *dy,
                        void *dx);

/* The fused 3x3 convolution (ops.h conv_fwd_fused): y = conv(relu(pro(x))), pro the previous
 * layer's BatchNorm (its coef, layer_norm_coef; NULL: y = conv(x)), and the statistics of y
 * into stats (NULL: none; layer_norm_stats with ready then uses them). */
int layer_conv_fwd_fused(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *x,
                         const layer_norm_t *pro, void *y, double *stats);
/* Its weight (no bias) gradients from x and dy, the prologue recomputed: as conv_bwd_filter. */
int layer_conv_bwd_filter_fused(const layer_ctx_t *c, const layer_conv_t *l, int n,
                                const void *x, const layer_norm_t *pro, const void *dy);
/* Its input gradient, masked by pro's ReLU (recomputed from x), with pro's BatchNorm backward
 * sums into pro->stats: the first half of layer_norm_bwd_fused's work. */
int layer_conv_bwd_data_fused(const layer_ctx_t *c, const layer_conv_t *l, int n, const void *dy,
                              const void *x, layer_norm_t *pro, void *dx);

/* A 1x1 convolution (the head) reading l's BatchNorm apply + ReLU of x, that output never
 * stored (ops.h conv1x1_*_bn; l's statistics already saved, layer_norm_stats):
 *   layer_norm_head_fwd:          y = head(norm(x))
 *   layer_conv1x1_bwd_filter_bn:  the head's weight and bias gradients from x and dy, folded
 *                                 and reported final, as layer_conv_bwd_filter.
 * layer_norm_head_usable: 1 when this backend runs them for l and the planned head. */
int layer_norm_head_usable(const layer_ctx_t *c, const layer_norm_t *l, const layer_conv_t *head);
int layer_norm_head_fwd(const layer_ctx_t *c, const layer_norm_t *l, const layer_conv_t *head,
                        int n, const void *x, void *y);
int layer_conv1x1_bwd_filter_bn(const layer_ctx_t *c, const layer_conv_t *l, int n,
                                const void *x, const layer_norm_t *pro, const void *dy);

/* The BatchNorm's statistics for its apply: from x (ready 0), or from the sums a fused
 * convolution left in l->stats (ready 1); synced by the hook in training. */
int layer_norm_stats(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                     int ready);
/* l->coef from the statistics layer_norm_stats made (BatchNorm). */
int layer_norm_coef(const layer_ctx_t *c, layer_norm_t *l);
/* layer_norm_fwd_pool after layer_norm_stats: the apply and the max-pool. */
int layer_norm_apply_pool(const layer_ctx_t *c, layer_norm_t *l, int n, int h, int w,
                          const void *x, void *y, size_t ldy, void *pooled, uint8_t *arg);
/* layer_norm_bwd for a BatchNorm whose gradient d came masked from layer_conv_bwd_data_fused,
 * with its sums in l->stats: parameter gradients, the sums synced, dx in place of d. */
int layer_norm_bwd_fused(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, void *d,
                         const void *x);

/* y = relu(norm(x)); in training BatchNorm uses (and syncs) batch statistics. */
int layer_norm_fwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                   void *y);
/* layer_norm_fwd over n images of h x w into rows of y ldy elements apart, and the 2x2
 * max-pool of y into pooled and arg (as maxpool_fwd): BatchNorm in one pass over x
 * (bn_apply_pool), GroupNorm in two (and only ldy = C). */
int layer_norm_fwd_pool(const layer_ctx_t *c, layer_norm_t *l, int n, int h, int w,
                        const void *x, void *y, size_t ldy, void *pooled, uint8_t *arg);
/* y = relu(norm(x)) again, after layer_norm_fwd on the same x: the same values, from the saved
 * statistics (BatchNorm; no exchange) or recomputed ones (GroupNorm, per sample). */
int layer_norm_recompute(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, const void *x,
                         void *y);
/* layer_norm_recompute into rows of y ldy elements apart (its first C channels, e.g. the first
 * part of a concat). BatchNorm only (GroupNorm: an error). */
int layer_norm_recompute_ld(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                            const void *x, void *y, size_t ldy);
/* d (in: gradient w.r.t. y; out: gradient w.r.t. x, in place), x from forward. y, the forward's
 * output, may be NULL: the ReLU's mask is then recomputed from x (ops_relu_t). */
int layer_norm_bwd(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw, void *d,
                   const void *x, const void *y);
/* layer_norm_bwd of a BatchNorm whose output only the 1x1 convolution head reads, with that
 * convolution's input gradient never stored: from its output gradient g (n hw x K) and weights
 * into dx, as layer_norm_bwd on conv_bwd_data's gradient gives it (ops.h bn_bwd_*_1x1; an error
 * where the table has no such ops or the norm is not BatchNorm). */
int layer_norm_bwd_1x1(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                       const layer_conv_t *head, const void *g, const void *x, void *dx);

/* The head's training pass (ops.h head_train_1x1) for a head reading l's BatchNorm apply of x
 * (n images): the logits into logits, their loss over labels (ignore_index skipped, scaled by
 * loss_scale) into dev_out (sum, count) and its gradient into g, the head's weight and bias
 * gradients (folded and reported final, as layer_conv_bwd_filter), and l's backward sums,
 * dgamma and dbeta (into l->stats and the gradients; reported final by layer_norm_bwd_1x1_rest).
 * Not with one-layer staged gradients (an error: the head's and the norm's would share the
 * staging). layer_norm_bwd_1x1_rest: the rest of layer_norm_bwd_1x1 after it (the sums across
 * ranks, the apply into dx). */
int layer_head_train(const layer_ctx_t *c, layer_norm_t *l, const layer_conv_t *head, int n,
                     const void *x, const int32_t *labels, int ignore_index, float loss_scale,
                     void *logits, void *g, double *dev_out);
int layer_norm_bwd_1x1_rest(const layer_ctx_t *c, layer_norm_t *l, int n, size_t hw,
                            const layer_conv_t *head, const void *g, const void *x, void *dx);

#endif
