/* unet_impl.h — the U-Net's internal layout, shared by its construction (unet_build.c:
 * configuration, parameter registry, initialisation) and its execution (unet.c). */
#ifndef SRC_MODEL_UNET_IMPL_H
#define SRC_MODEL_UNET_IMPL_H

#include "src/device/arena.h"
#include "src/device/device.h"
#include "src/model/conv_engine.h"
#include "src/model/unet.h"

/* Activations are tensors of the memory plan (src/device/plan.h): the ids below name them
 * during one pass of the schedule (unet.c), and the plan says where they live. */
typedef struct {
  layer_conv_t conv;
  layer_norm_t norm;
  int a; /* the conv output (norm input): the one tensor a block keeps for backward, which
            recomputes the norm+ReLU output from it where it needs it */
  int r; /* the norm+ReLU output of the pass (kept for backward at the levels not recomputed) */
  /* Fused convolutions (SHMDDP_CONV_ENGINE, ops.h conv_fwd_fused): a second block whose conv
   * runs fused reads the first block's conv output with that block's BatchNorm + ReLU as its
   * prologue (fused), and the first block then makes no norm output at all (feeds_fused): its
   * statistics become the prologue's coefficients (norm.coef). A first block whose conv the
   * engine takes runs it fused with no prologue (stats_fused): its BatchNorm statistics come
   * with the conv's output, and no pass reads that output for them. */
  int fused, feeds_fused, stats_fused;
} block_t;

typedef struct {
  block_t b1, b2;
  int pooled, arg; /* levels > 0: max-pool of the level above, and which input won */
} enc_t;

typedef struct {
  layer_conv_t up;
  block_t b1, b2;
  int up_out; /* the transposed convolution's output, the concat's second half */
  int cat;    /* the concat of the pass (kept for backward at the levels not recomputed) */
} dec_t;

struct model {
  model_config_t cfg;
  int dev;     /* DEV_HOST or the CUDA ordinal */
  ops_t ops;
  int ops_ready;
  arena_t *arena;
  layer_param_t *params;
  int ntensors, captensors;
  size_t nparams, nbuffers;
  size_t nflat; /* elements of each flat buffer: nparams and the alignment padding */
  float *pf32, *gf32, *buffers;
  void *wparams, *wgrads;
  int separate;
  int wstale;  /* the working copy of the weights may differ from pf32 (separate only): set
                  by model_params, cleared only by model_update and model_refresh_working */
  enc_t enc[MODEL_MAX_LEVELS];
  dec_t dec[MODEL_MAX_LEVELS];
  layer_conv_t head;
  void *x_work;
  struct plan *plan; /* the activations' layout, made by one dry pass of the schedule */
  void *act;         /* its block */
  int planning;      /* the dry pass: tensors are declared and used, no op runs */
  int recompute_levels; /* backward recomputes norm outputs, skips and concats at levels
                          below this; it uses forward's at the others (SHMDDP_RECOMPUTE) */
  int logits, dlogits; /* plan tensors of the pass */
  void *gstage;      /* one layer's low-precision weight gradients (layers.h) */
  double *loss_dev;  /* (loss sum, count) of the step where the device writes it (on the host:
                        loss_host itself) */
  double *loss_host; /* host memory (pinned on a GPU): loss sum, count, bad-label word, copied
                        there at the end of a step */
  int loss_pending;  /* a queued step's loss is not yet read into last_loss */
  dev_event_t *loss_ready; /* recorded after a queued step (model_step_queued) */
  /* Between model_forward_train and model_backward (DataParallel's split step): the input as
   * the layers saw it, the head's input and the batch. */
  const void *fwd_x;
  int fwd_head_in; /* plan tensor, -1 when no forward is pending */
  int fwd_batch;
  void *ws;
  /* Weight gradients beside the input gradients (SHMDDP_WGRAD_STREAM): at levels >= side_from
   * a convolution's weight gradient is queued on a second stream (side_ops, its own workspace
   * side_ws) while the main stream goes on with the input gradient; the main stream waits for
   * it at the next convolution's backward (or the end of backward), and the plan keeps what it
   * reads alive until then. side_from == levels: never. On the host there is no second stream:
   * the same schedule runs in order (its plan is still the side schedule's). */
  int side_from;
  /* SHMDDP_HEAD_FUSED as resolved (on, BatchNorm, at most OPS_BN_1X1_MOST_K classes, and the
   * backend has bn_bwd_*_1x1): backward forms the 1x1 head's input gradient inside the BatchNorm
   * backward of the block before it (layers.h layer_norm_bwd_1x1) instead of storing it */
  int head_fused;
  /* The forward's side (the same setting; BatchNorm, and the backend runs the planned head on the
   * apply, layers.h layer_norm_head_usable): the last block's norm output is never stored, the
   * head reads that block's conv output through its BatchNorm (forward and weight gradient) */
  int head_fwd_fused;
  /* SHMDDP_HEAD_FUSED=train as resolved (both halves above, and the backend has head_train_1x1
   * for the planned head): a training step runs the head, the loss and the head's backward down
   * to the norm's reduce as one op (layers.h layer_head_train) where its gradients are not staged
   * one layer at a time; head_pass: this step does (model_train_step_queue sets it, every other
   * pass clears it). */
  int head_train, head_pass;
  model_conv_engine_t engine; /* SHMDDP_CONV_ENGINE: which block pairs run fused */
  ops_t side_ops;
  int side_ready;
  void *side_ws;
  dev_event_t *side_fork, *side_join;
  int up_gathered;      /* SHMDDP_UPCONV_GATHERED as resolved: the up-convolutions take
                           their gradient gathered where the backend can
                           (layer_conv_t.dy_gathered, set per layer when it is planned) */
  int side_pending;     /* a weight gradient is queued beside and not yet waited for */
  int side_in, side_dy; /* the plan tensors it reads (side_in -1: the input images) */
  char *signature;
  double last_loss;
};


/* Registers every parameter tensor (forward order) and lays them out (unet_lay_out). */
int unet_register_params(model_t *m);
/* The flat layout (reverse order, every tensor aligned) and the packed one of the registry. */
void unet_lay_out(model_t *m);
/* Parameters from the seed: Kaiming normal for convolutions, norms 1 and 0, biases 0. */
void unet_init_params(model_t *m);
int unet_build_signature(model_t *m);

#endif
