/* dp.h — DataParallel, the way torch.nn.DataParallel moves data: ONE process drives N devices,
 * each with its own model replica (same model, same kernels as DDP). Every step: the whole
 * batch goes to device 0 and is scattered in contiguous chunks; parameters and BatchNorm
 * buffers are copied from device 0 to the others; forward runs on every device (its own
 * stream on GPUs); the logits are gathered on device 0, where the loss over the whole batch is
 * computed; the logit gradients are scattered back; backward runs everywhere; gradients are
 * summed on device 0, where the optimizer (the caller's, dp_update) updates the only
 * master copy. BatchNorm statistics are per replica, and only device 0's running statistics
 * persist (the replicas' are overwritten by the next copy), as in PyTorch.
 *
 * What device 0 holds that the others do not is charged to its ledger: the whole input batch
 * and its labels, the gathered logits and their gradients, and one staging copy of the
 * gradients per other device (ARENA_DP_GATHER); the optimizer state (ARENA_OPTIM) is the
 * caller's. Device 0 reads its own chunk in place from the whole batch, so it lacks the input
 * slot (activations) the others have. CPU "devices" (N replicas in host memory, run one after
 * another) take the same path with memcpy for copies, so the data flow is testable without a
 * GPU. */
#ifndef SRC_PARALLEL_DP_H
#define SRC_PARALLEL_DP_H

#include <stddef.h>
#include <stdint.h>

#include "shmddp.h"
#include "src/model/model.h"

#define DP_MAX_DEVICES SHMDDP_MAX_RANKS

typedef struct {
  model_config_t model; /* one replica: max_batch = images per device; device: CPU or CUDA
                           (CUDA devices 0..ndev-1; cuda_device is ignored) */
  int ndev;             /* 1..DP_MAX_DEVICES */
} dp_config_t;

typedef struct dp dp_t;

/* Builds the replicas (all initialised from the same seed), the buffers above and enables
 * peer access between device 0 and the others. */
int dp_create(dp_t **out, const dp_config_t *cfg, char *err, size_t errlen);
void dp_destroy(dp_t *d);

model_t *dp_model(dp_t *d, int i);      /* replica i; replica 0 holds the master weights */
int dp_direct_peers(const dp_t *d);     /* 1 if every copy to/from device 0 is direct P2P */

/* One forward and backward of n images (1 <= n <= ndev * max_batch; host memory, pinned for
 * GPUs, not read after dp_finish_step returns): chunk i = images [i*c, i*c + c) with
 * c = ceil(n / ndev), as torch's scatter cuts them. The loss is the mean over the whole
 * batch's counted pixels times loss_scale; device 0's gradients (model_grads(dp_model(d, 0)))
 * get the sum over replicas, added to what they hold when accumulate != 0. Queued on the
 * GPUs; dp_finish_step waits. */
int dp_train_step(dp_t *d, const float *x, const int32_t *y, int n, float loss_scale,
                  int accumulate, char *err, size_t errlen);
/* Waits for the step; *loss (may be NULL) gets its unscaled mean loss. */
int dp_finish_step(dp_t *d, double *loss, char *err, size_t errlen);

/* The optimizer o updates the master weights on device 0 from the summed gradients (divided
 * by grad_scale; model_update), queued there; its time counts as device 0's compute (in the next
 * step's times). */
struct optim;
int dp_update(dp_t *d, struct optim *o, double lr, double grad_scale, char *err,
              size_t errlen);

/* Exposed communication of the last finished step, in ms: from the end of device 0's backward
 * until the gradients were summed there (the replicas' backward, their copies and the sum), the
 * same measure as DDP's from the end of backward to the last bucket. */
double dp_last_exposed_ms(const dp_t *d);

/* Device i's time in the last finished step, in ms: compute (forward, backward; on device 0
 * also the loss and the previous optimizer update) and communication (the copies: on the
 * others replication, scatter and logit gradients in; on device 0 the gather, the logit
 * gradients out and the gradient reduction). The rest of a step is idle (waiting). */
void dp_last_times(const dp_t *d, int i, double *compute_ms, double *comm_ms);

/* Copy device 0's parameters and buffers to every replica (before evaluating on them). */
int dp_replicate(dp_t *d, char *err, size_t errlen);

/* Evaluation of n images scattered like training (after dp_replicate): predictions (n*H*W,
 * host memory) and, per chunk, the mean loss times its counted pixels summed into
 * *loss_sum (labels outside [0, classes) are not counted). */
int dp_eval(dp_t *d, const float *x, const int32_t *y, int n, int32_t *pred, double *loss_sum,
            char *err, size_t errlen);

#endif
