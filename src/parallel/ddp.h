/* ddp.h — the data-parallel engine: one DDP step, from a micro-batch to the updated weights
 * (ddp_step: forward, backward with the gradient buckets all-reduced while it runs, the wait
 * for them; ddp_update: the optimizer on the averaged gradients), eagerly or replayed from a
 * CUDA graph; and around it the initial broadcast, SyncBN's statistics exchange and sums over
 * the ranks. With a NULL communicator or a world of one rank nothing is communicated. */
#ifndef SRC_PARALLEL_DDP_H
#define SRC_PARALLEL_DDP_H

#include <stddef.h>
#include <stdint.h>

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
  /* Replay the step as a CUDA graph (on a GPU, over a world whose collectives can be captured;
   * the caller leaves it 0 with gradient accumulation or a timeline). The graph bakes in
   * pointers, shapes and scalars, so it serves only the steps that match the captured one:
   * graph_batch images, no accumulation, the same SyncBN setting and loss scale (fp16's
   * dynamic scale: captured again, after one eager step, when it changes). Any other step
   * runs eagerly; the graph stays valid for the next matching one. */
  int cuda_graph;
  int graph_batch;
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

/* One micro-batch of a step: x (n images) and y (their labels) on the model's device, at the
 * same addresses from step to step for a graph to be used (batch_io.c's input buffers are). */
typedef struct {
  const float *x;
  const int32_t *y;
  int n;
  float loss_scale;
  int accumulate; /* add to the gradients (every micro-batch of a step but its first) */
  int last;       /* the step's last micro-batch: all-reduce the gradients and wait for them */
  int sync_bn;    /* may change from step to step (--sync-bn-from-epoch) */
} ddp_batch_t;

/* Queue the micro-batch's forward and backward (on the last one, with the gradient buckets
 * all-reduced as backward finishes them, and the wait for every bucket: the gradients are then
 * the average over the ranks). Nothing waits on the host: read the loss with model_step_loss,
 * so more work (the optimizer, the next upload) can be queued behind the step first. */
int ddp_step(ddp_t *d, const ddp_batch_t *b, char *err, size_t errlen);

/* The step's end: the optimizer updates the weights from the averaged gradients (divided by
 * grad_scale), queued behind the step. */
struct optim;
int ddp_update(ddp_t *d, struct optim *o, double lr, double grad_scale, char *err,
               size_t errlen);

/* Copy rank 0's BatchNorm running statistics to every rank (before evaluation: without SyncBN
 * they drift apart, and PyTorch DDP evaluates rank 0's). */
int ddp_broadcast_buffers(ddp_t *d, char *err, size_t errlen);

/* Sum n doubles over ranks, in place (host memory): losses, metric counts. */
int ddp_sum_host(ddp_t *d, double *vals, size_t n, char *err, size_t errlen);

/* Seconds of communication the last step waited for after backward (exposed, not overlapped),
 * and the seconds spent in SyncBN exchanges. */
double ddp_last_exposed_comm_s(const ddp_t *d);
double ddp_last_syncbn_s(const ddp_t *d);
/* Steps replayed from the CUDA graph so far, and its number of nodes (0 before a capture). */
long ddp_graph_replays(const ddp_t *d);
size_t ddp_graph_nodes(const ddp_t *d);

#endif
