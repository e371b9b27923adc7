/* optim.h — optimizers fused over the flat parameter buffer (SGD with momentum, weight decay and
 * Nesterov; AdamW), and the learning-rate schedule (linear warm-up, then cosine decay).
 *
 * The optimizer runs on the device that owns the arena it was created with (host arena: the
 * CPU reference kernels; CUDA arena: the CUDA kernels). Its state is charged to ARENA_OPTIM.
 * The schedule is a pure function of the step, so resuming from a checkpoint needs only the
 * step number. Update rules follow PyTorch's torch.optim.SGD and torch.optim.AdamW. */
#ifndef SRC_MODEL_OPTIM_H
#define SRC_MODEL_OPTIM_H

#include <stddef.h>

#include "kernels/ops.h"
#include "src/device/arena.h"

typedef enum { OPTIM_SGD = 0, OPTIM_ADAMW } optim_kind_t;

typedef struct {
  optim_kind_t kind;
  double lr;             /* peak learning rate (after warm-up) */
  double weight_decay;   /* SGD: L2 added to the gradient; AdamW: decoupled, p -= lr*wd*p */
  double momentum;       /* SGD; 0 = plain SGD */
  int nesterov;          /* SGD; needs momentum > 0 */
  double beta1, beta2;   /* AdamW */
  double eps;            /* AdamW */
  long warmup_steps;     /* lr rises linearly from lr/warmup_steps to lr over these steps */
  long total_steps;      /* cosine decays from lr at warmup_steps to min_lr at total_steps; */
  double min_lr;         /*   <= 0 total_steps: constant lr after warm-up */
} optim_config_t;

/* Defaults: SGD lr 0.05 momentum 0.9 wd 1e-4; AdamW lr 1e-3 betas 0.9/0.999 eps 1e-8 wd 0.01;
 * no warm-up, constant lr. */
void optim_config_default(optim_config_t *c, optim_kind_t kind);
/* Checks ranges (lr > 0, 0 <= momentum < 1, betas in [0,1), ...); message says what is allowed. */
int optim_config_validate(const optim_config_t *c, char *err, size_t errlen);
int optim_kind_parse(const char *s, optim_kind_t *out);      /* 0 on success */

/* Learning rate for step (0-based, the step about to be taken). */
double optim_lr_at(const optim_config_t *c, long step);

typedef struct optim optim_t;

/* State for n parameters, allocated from arena (ARENA_OPTIM) and zeroed. */
int optim_create(optim_t **out, const optim_config_t *cfg, size_t n, arena_t *arena, char *err,
                 size_t errlen);
void optim_destroy(optim_t *o);

/* One update of params (n f32) from grads (n f32), both on the optimizer's device:
 * g = grads * grad_scale (grad_scale = 1/loss_scale unscales fp16 gradients in the same pass;
 * pass 1 otherwise), then the update with learning rate lr (usually optim_lr_at(cfg, step)).
 * stream: the backend's compute stream (NULL on the CPU). grads is not modified. */
int optim_step(optim_t *o, float *params, const float *grads, double lr, double grad_scale,
               void *stream, char *err, size_t errlen);
/* optim_step from gradients of grad_dtype (OPS_F32; on a GPU also a 16-bit working dtype, read
 * as they are: the same update as from their exact f32 widening) that also writes the updated
 * parameters into lowp (NULL: nowhere) in lowp_dtype, the model's 16-bit working copy, in the
 * same pass (model_update does both). */
int optim_step_io(optim_t *o, float *params, const void *grads, ops_dtype_t grad_dtype,
                  void *lowp, ops_dtype_t lowp_dtype, double lr, double grad_scale, void *stream,
                  char *err, size_t errlen);

/* Checkpointing: the flat state (SGD: momentum buffer, n floats, or 0 floats without momentum;
 * AdamW: m then v, 2n floats) on the optimizer's device, and the number of updates taken
 * (AdamW's bias correction uses it). */
float *optim_state(optim_t *o, size_t *count);
long optim_updates(const optim_t *o);
void optim_set_updates(optim_t *o, long updates);

#endif
