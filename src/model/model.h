/* model.h — the segmentation network as the trainer sees it (the contract between the model
 * and the training loop; the layers, ops and backends behind it are the model's business).
 *
 * Tensors are NHWC. All pointers passed in and out live on the model's device (host memory for
 * the CPU backend, device memory for CUDA). Parameters and their gradients are each one flat
 * f32 buffer, laid out in REVERSE layer order (the head first): backward finishes gradients
 * from the front of the flat buffer to its end, so data-parallel gradient buckets are
 * contiguous ranges that complete in order. Every tensor starts MODEL_PARAM_ALIGN bytes aligned
 * (convolution weights MODEL_WEIGHT_ALIGN) in every buffer of that layout (f32 and 16-bit
 * working copies, gradients, optimizer state): the flat buffers hold model_flat_size elements,
 * the parameters and zero padding between tensors that stays zero (its gradients are zero, so
 * updates keep it so). Checkpoints and exports hold the parameters packed (model_pack), without
 * the padding.
 */
#ifndef SRC_MODEL_MODEL_H
#define SRC_MODEL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "shmddp.h"

#define MODEL_MAX_LEVELS 8
/* Bytes every parameter tensor's start is aligned to in the flat buffers, in every dtype: what
 * vectorised kernels and cuDNN's tensor-core paths need for their 16-byte loads. Convolution
 * weights start MODEL_WEIGHT_ALIGN bytes aligned in the 16-bit buffers (twice that in the f32
 * ones): the alignment cuDNN was given when it read aligned copies of them, so the same
 * kernels run on the weights in place. Norm weights and biases keep 16, so a norm's two
 * vectors stay adjacent (one gradient range per layer). */
#define MODEL_PARAM_ALIGN 16
#define MODEL_WEIGHT_ALIGN 256
/* The same as element counts of the narrowest buffers sharing the layout (the 16-bit working
 * weights and gradients): offsets in the flat layout are multiples of these, which are twice the
 * bytes in the f32 buffers. */
#define MODEL_PARAM_ALIGN_ELEMS (MODEL_PARAM_ALIGN / 2)
#define MODEL_WEIGHT_ALIGN_ELEMS (MODEL_WEIGHT_ALIGN / 2)

typedef enum { MODEL_NORM_BATCH = 0, MODEL_NORM_GROUP } model_norm_t;
typedef enum { MODEL_FP32 = 0, MODEL_BF16, MODEL_FP16 } model_precision_t;
typedef enum { MODEL_DEVICE_CPU = 0, MODEL_DEVICE_CUDA } model_device_t;

typedef struct {
  int in_channels;              /* 3 */
  int classes;                  /* output classes (>= 2) */
  int levels;                   /* number of widths used */
  int widths[MODEL_MAX_LEVELS]; /* e.g. 64,128,256,512,1024 */
  model_norm_t norm;
  int groups;                   /* GroupNorm groups (norm == GROUP) */
  int max_batch;                /* per device */
  int height, width;            /* input size: divisible by 2^(levels-1) */
  int ignore_index;             /* label ignored by the loss, or -1 */
  model_precision_t precision;
  model_device_t device;
  int cuda_device;              /* ordinal, for MODEL_DEVICE_CUDA */
  uint64_t seed;                /* deterministic initialisation */
  int conv_benchmark;           /* GPU: time the convolution algorithms and take the fastest,
                                   deterministic or not (0, the default: deterministic ones by
                                   cuDNN's heuristics, so runs repeat bit for bit) */
  int working_grads;            /* 16-bit precisions: 1 keeps the weight gradients in the
                                   compute dtype, in one buffer the optimizer reads as they are
                                   (model_update): no f32 gradients (model_grads is NULL), so no
                                   accumulation and no loss-scale check; a grads_ready hook
                                   gets the working ones (DDP all-reducing them in bf16). The
                                   same update bit for bit (widening is exact), without a cast
                                   per layer, and half the gradients' memory. 0 (the default):
                                   f32 gradients. fp32: no effect. */
} model_config_t;

/* Hooks through which data parallelism plugs into forward/backward. Any may be NULL.
 * stream is the backend's compute stream (NULL on the CPU). */
typedef struct {
  void *ctx;
  /* SyncBatchNorm: sum buf (count elements of dtype) over all ranks, in place, before the
   * model uses it. The model packs per-channel statistics (sums and the element count) into
   * buf; with the hook absent, statistics stay local. */
  int (*sync_stats)(void *ctx, void *buf, size_t count, shmddp_dtype_t dtype, void *stream);
  /* Backward: gradients [offset, offset + count) of the flat buffer (model_grad_buffer) are
   * final. Called in increasing offset order, once per layer's parameters (adjacent ranges
   * reported as one). */
  int (*grads_ready)(void *ctx, size_t offset, size_t count, void *stream);
} model_hooks_t;

typedef struct model model_t;

/* Build the network and initialise parameters from cfg->seed. Allocations are charged to the
 * memory ledger. On error returns non-zero and writes a message. */
int model_create(model_t **out, const model_config_t *cfg, char *err, size_t errlen);
void model_destroy(model_t *m);

/* The number of parameters (trained values; no padding). */
size_t model_num_params(const model_t *m);
/* Elements of each flat buffer (parameters, gradients, each optimizer state): the parameters
 * and the alignment padding; the length every whole-buffer copy, reduction or update uses. */
size_t model_flat_size(const model_t *m);
/* Host memory: the parameters of a flat buffer (model_flat_size elements) packed back to back
 * (model_num_params elements, the order of the flat layout), as checkpoints store them; and
 * back, with the padding zeroed. */
void model_pack(const model_t *m, const float *flat, float *packed);
void model_unpack(const model_t *m, const float *packed, float *flat);
/* The same between host memory and flat buffers on the model's device (its parameters, or
 * state of their layout such as the optimizer's), `slots` buffers back to back: packed holds
 * slots * model_num_params values (at any alignment: file data), flat slots * model_flat_size.
 * Waits for the copies; 0, or -1 with the message. */
int model_save_packed(model_t *m, const float *flat, size_t slots, float *packed, char *err,
                      size_t errlen);
int model_load_packed(model_t *m, const void *packed, size_t slots, float *flat, char *err,
                      size_t errlen);
/* The flat f32 master weights. The caller may write them, now or later through the pointer:
 * with a 16-bit compute dtype every step casts them to the working copy again, except behind
 * model_update or model_refresh_working, which vouch for the copy until model_params is asked
 * for again. */
float *model_params(model_t *m);
/* The flat f32 gradients, same layout; NULL with working_grads in a 16-bit precision. */
float *model_grads(model_t *m);
/* The gradients a step leaves for the optimizer and the grads_ready hook: the f32 ones, or
 * (working_grads, 16-bit) the working ones; *dtype gets which (SHMDDP_F32, _BF16, _F16). */
void *model_grad_buffer(model_t *m, shmddp_dtype_t *dtype);
/* One optimizer update of the model's weights from its gradients (f32, or the working ones as
 * they are), writing the 16-bit working copy of the weights in the same pass, so the next step
 * does not cast them. Queued on the model's stream. */
struct optim;
int model_update(model_t *m, struct optim *o, double lr, double grad_scale, char *err,
                 size_t errlen);
/* Casts the f32 weights to the working copy now (queued) if model_params was asked for since
 * the last model_update or call of this, and vouches for the copy until it is asked for again:
 * a step captured behind it holds no cast, and is replayed behind model_update or this call. */
int model_refresh_working(model_t *m, char *err, size_t errlen);
/* Non-trained state that must match across ranks and be checkpointed (BN running stats). */
size_t model_num_buffers(const model_t *m);
float *model_buffers(model_t *m);
/* A stable text describing layer names, shapes and dtypes: compared across ranks at start. */
const char *model_signature(const model_t *m);

/* One training step's forward and backward on a batch (x: batch*H*W*C f32, y: batch*H*W i32
 * labels). Gradients are WRITTEN (not accumulated) unless accumulate != 0. The loss is the mean
 * over non-ignored pixels of this batch, times loss_scale in the backward pass.
 * *loss_out gets the unscaled loss (host value). batch may be 0 (still calls sync hooks). */
int model_train_step(model_t *m, const float *x, const int32_t *y, int batch, float loss_scale,
                     int accumulate, const model_hooks_t *hooks, float *loss_out, char *err,
                     size_t errlen);

/* model_train_step in three parts. _queue does the work but, on a GPU, only queues it (the loss
 * and the label check are copied to pinned host memory at the step's end) and nothing waits,
 * so the call can be captured in a CUDA graph (after one uncaptured step, which makes the
 * backend's lazy allocations). model_step_queued marks the end of the step on the stream: call
 * it after _queue, or after launching a graph of it, outside any capture. model_step_loss waits
 * for that mark only (work queued after it, such as the optimizer or the next upload, keeps
 * running) and gives the unscaled loss. On the CPU _queue does the work; the others report. */
int model_train_step_queue(model_t *m, const float *x, const int32_t *y, int batch,
                           float loss_scale, int accumulate, const model_hooks_t *hooks,
                           char *err, size_t errlen);
int model_step_queued(model_t *m, char *err, size_t errlen);
int model_step_loss(model_t *m, float *loss_out, char *err, size_t errlen);

/* Forward in eval mode (running statistics); writes the predicted class per pixel to pred
 * (batch*H*W i32, device memory) and the loss (if y is not NULL) to *loss_out. */
int model_eval(model_t *m, const float *x, const int32_t *y, int batch, int32_t *pred,
               float *loss_out, char *err, size_t errlen);
/* model_eval without labels that also copies the logits (batch*H*W*classes f32, NHWC) into
 * host memory `logits`; fp32 models only (the logits are then f32 where they are made). */
int model_eval_logits(model_t *m, const float *x, int batch, int32_t *pred, float *logits,
                      char *err, size_t errlen);

/* The configuration before a model exists, and what a built model exposes: */
struct arena;
/* Fills cfg with the small CPU preset (widths 16-32-64-128, 3 -> 4 classes, 64x64, batch 8,
 * BatchNorm, fp32, CPU, ignore_index -1, seed 1). */
void model_config_default(model_config_t *cfg);
/* Checks cfg without allocating anything (the CLI calls it before starting ranks); the message
 * says what is wrong and what is allowed. */
int model_config_validate(const model_config_t *cfg, char *err, size_t errlen);
/* Parameter count for cfg, computed without building the model. */
size_t model_config_num_params(const model_config_t *cfg);
/* model_flat_size for cfg, computed without building the model. */
size_t model_config_flat_size(const model_config_t *cfg);
/* The memory arena (and ledger) of the model's device: optimizers and the DDP engine allocate
 * from it so everything on one device is in one ledger. */
struct arena *model_arena(model_t *m);
/* The activations' memory plan in one line: tensors, the planned block, what they would take
 * each on its own, and the most alive at one time (the bound no layout can beat). */
void model_plan_describe(const model_t *m, char *buf, size_t len);
/* The compute stream (a cudaStream_t) every op of a GPU model is queued on; NULL on the CPU.
 * Inputs copied to the device on this stream are ordered before the step that reads them. */
void *model_stream(const model_t *m);
/* The loss of the last model_train_step / model_eval as computed (f64 accumulation), for
 * gradient checks that need more digits than *loss_out's float. */
double model_last_loss(const model_t *m);

/* DataParallel's split of model_train_step (the loss is computed where the outputs are
 * gathered, on one device, over every replica's logits):
 *   model_forward_train: forward in training mode (batch statistics, sync hooks); *logits is
 *     the model's logits buffer and *dlogits the buffer model_backward starts from (each
 *     batch*H*W*classes elements of *elem bytes, the compute dtype, on the model's device;
 *     the caller fills *dlogits before model_backward).
 *   model_loss: softmax cross-entropy over `pixels` pixels (any number: e.g. the gathered
 *     batch) with this model's kernels on its device; dlogits (may be NULL) gets
 *     loss_scale * (softmax - onehot) / counted pixels. Queued only; model_loss_value waits
 *     for it and gives the mean (it is also what model_last_loss returns afterwards).
 *   model_backward: backward from *dlogits after model_forward_train; gradients written, or
 *     added when accumulate != 0; grads_ready hooks called as in model_train_step. */
int model_forward_train(model_t *m, const float *x, int batch, const model_hooks_t *hooks,
                        void **logits, void **dlogits, size_t *elem, char *err, size_t errlen);
int model_loss(model_t *m, const void *logits, const int32_t *y, size_t pixels,
               float loss_scale, void *dlogits, char *err, size_t errlen);
int model_loss_value(model_t *m, double *loss, char *err, size_t errlen);
int model_backward(model_t *m, int accumulate, const model_hooks_t *hooks, char *err,
                   size_t errlen);

#endif
