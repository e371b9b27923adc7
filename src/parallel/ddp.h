/* ddp.h — the data-parallel engine as the training loop sees it: initial broadcast, gradient
 * buckets all-reduced while backward runs, SyncBN statistics exchange, scalar averaging.
 * With a NULL communicator or a world of one rank every call is a cheap no-op. */
#ifndef SRC_PARALLEL_DDP_H
#define SRC_PARALLEL_DDP_H

#include <stddef.h>

#include "shmddp.h"
#include "src/model/model.h"
#include "src/world/world.h"

typedef struct ddp ddp_t;

typedef struct {
  double bucket_mb;  /* gradient bucket size (the first bucket is smaller); default 25 */
  shmddp_dtype_t grad_comm; /* the gradients' type on the wire: SHMDDP_F32 (the default,
                               0) or SHMDDP_BF16 (each bucket rounded to bf16, averaged in
                               f32 and rounded once by the all-reduce, widened back to f32
                               after the join: half the bytes, ~3 significant digits). A
                               model with bf16 working gradients (working_grads) needs bf16:
                               they are all-reduced where they are, with no copy and no
                               conversion, the same bits */
  int sync_bn;       /* exchange BatchNorm statistics across ranks */
  void *cuda_stream; /* the model's compute stream (model_stream) when it runs on a GPU; NULL
                        for host memory */
} ddp_config_t;

/* Over the ranks of one machine's communicator (NULL: alone). */
int ddp_create(ddp_t **out, shmddp_comm_t *comm, model_t *model, const ddp_config_t *cfg,
               char *err, size_t errlen);
/* Over any world (src/world/world.h; not owned: destroy it after the engine). */
int ddp_create_world(ddp_t **out, world_t *world, model_t *model, const ddp_config_t *cfg,
                     char *err, size_t errlen);
void ddp_destroy(ddp_t *d);

/* Compare model signatures across ranks (clear error on mismatch), then broadcast parameters
 * and buffers from rank 0. Call once after model_create. */
int ddp_sync_initial(ddp_t *d, char *err, size_t errlen);

/* Copy rank 0's BatchNorm running statistics to every rank (before evaluation: without SyncBN
 * they drift apart, and PyTorch DDP evaluates rank 0's). */
int ddp_broadcast_buffers(ddp_t *d, char *err, size_t errlen);

/* The hooks to pass to model_train_step. communicate = 0 on gradient-accumulation micro-steps
 * that must not all-reduce (no_sync); sync_bn may change per step (--sync-bn-from-epoch). */
const model_hooks_t *ddp_step_hooks(ddp_t *d, int communicate, int sync_bn);

/* A model step failed: if one of this step's hooks did, put why in front of err (the model only
 * knows that the hook failed). Returns -1. */
int ddp_hook_failure(const ddp_t *d, char *err, size_t errlen);

/* After model_train_step: wait until every bucket's all-reduce is done; gradients are then the
 * average over ranks. */
int ddp_finish_step(ddp_t *d, char *err, size_t errlen);

/* CUDA graphs of the training step (train.c): ddp_set_capture(d, 1) before capturing a step
 * (ddp_step_hooks ... ddp_finish_step inside the capture), 0 after; ddp_replayed(d) after each
 * launch of the graph, in place of the hooks and ddp_finish_step, so the step's measurements
 * (exposed communication, SyncBN time) come from the replay. No-ops on the CPU. */
void ddp_set_capture(ddp_t *d, int on);
void ddp_replayed(ddp_t *d);

/* Sum n doubles over ranks, in place (host memory): losses, metric counts. */
int ddp_sum_host(ddp_t *d, double *vals, size_t n, char *err, size_t errlen);

/* Seconds of communication the last step waited for after backward (exposed, not overlapped),
 * and the seconds spent in SyncBN exchanges. */
double ddp_last_exposed_comm_s(const ddp_t *d);
double ddp_last_syncbn_s(const ddp_t *d);


#endif
