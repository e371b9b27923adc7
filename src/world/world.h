/* world.h — every rank of a training job, as the DDP engine sees it: the collectives it needs
 * (gradient buckets started during backward and joined before the optimizer, SyncBN's small
 * all-reduces, sums of host numbers, the initial broadcast), whatever carries them. Two worlds:
 *   world.c      one machine: a shmddp communicator (the launcher's, or one joined by id)
 *   world_mpi.c  several machines: shmddp inside each node, MPI between nodes (hierarchical)
 * Every call is a collective over the whole world and follows src/check.h. Reductions run in a
 * fixed order in both worlds: every rank gets the same bits, run after run. */
#ifndef SRC_WORLD_WORLD_H
#define SRC_WORLD_WORLD_H

#include <stddef.h>

#include "shmddp.h"
#include "src/device/device.h"

typedef struct world world_t;

typedef struct {
  /* In place over every rank; stream-ordered on a device (stream NULL: host buffers). */
  int (*all_reduce)(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                    void *stream, char *err, size_t errlen);
  /* From world rank 0 to every rank, finished when it returns. */
  int (*broadcast)(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, char *err,
                   size_t errlen);
  /* Host buffers: recv gets every rank's count elements, rank r's at r * count. */
  int (*all_gather)(world_t *w, const void *send, void *recv, size_t count, shmddp_dtype_t dtype,
                    char *err, size_t errlen);
  int (*attach)(world_t *w, int dev, int max_blocks, char *err, size_t errlen);
  int (*dup)(world_t *w, world_t **out, char *err, size_t errlen);
  int (*bucket_start)(world_t *w, size_t index, void *buf, size_t count, shmddp_dtype_t dtype,
                      dev_event_t *ready, char *err, size_t errlen);
  int (*bucket_join)(world_t *w, void *stream, dev_event_t *done, int capturing, char *err,
                     size_t errlen);
  int (*stop_requested)(world_t *w);
  void (*abort)(world_t *w, const char *reason);
  void (*destroy)(world_t *w);
} world_ops_t;

struct world {
  const world_ops_t *ops;
  int rank, size; /* in the whole world */
  int device;     /* the GPU this rank drives, or -1 */
  int capturable; /* the bucket and SyncBN collectives can be captured in a CUDA graph */
  int dev;        /* after world_attach: DEV_HOST or the GPU its buffers are on */
  int attached;
};

/* One machine: the ranks of comm (not owned; NULL: a world of one rank). */
int world_from_comm(world_t **out, shmddp_comm_t *comm, char *err, size_t errlen);
/* The same over a communicator the world owns (shmddp_comm_destroy at world_destroy). */
int world_from_joined(world_t **out, shmddp_comm_t *comm, char *err, size_t errlen);
void world_destroy(world_t *w);
/* More ranks than gpus (> 0): rank r drives GPU r % gpus, and nothing is captured in a CUDA
 * graph (a captured collective between ranks that share a GPU waits for the GPU's time slice;
 * run eagerly they take the co-located path), unless world_attach finds every rank that shares
 * a GPU under MPS (then a captured collective waits microseconds). Before world_attach. */
void world_share_gpus(world_t *w, int gpus);

static inline int world_rank(const world_t *w) { return w->rank; }
static inline int world_size(const world_t *w) { return w->size; }
static inline int world_device(const world_t *w) { return w->device; }
static inline int world_capturable(const world_t *w) { return w->capturable; }

/* Prepare the collectives for buffers on dev (DEV_HOST, or the rank's GPU): the device
 * transport, a communication stream; max_blocks > 0 caps the blocks of the bucket all-reduces.
 * Collective; before any other call but dup (a second call with the same dev does nothing:
 * several engines may train over one world, one after the other). */
int world_attach(world_t *w, int dev, int max_blocks, char *err, size_t errlen);
/* A second world over the same ranks whose all_reduce calls are ordered independently of w's
 * buckets (SyncBN on the compute stream beside the buckets on theirs); attached like w. */
int world_dup(world_t *w, world_t **out, char *err, size_t errlen);

int world_all_reduce(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                     void *stream, char *err, size_t errlen);
int world_broadcast(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, char *err,
                    size_t errlen);
int world_all_gather(world_t *w, const void *send, void *recv, size_t count,
                     shmddp_dtype_t dtype, char *err, size_t errlen);

/* Gradient buckets: average buf (count elements of dtype: f32, or bf16 for gradients sent
 * narrow; bucket `index` of the step, for the timeline) over every rank once `ready` (recorded
 * by the caller on the compute stream) has completed; backward goes on meanwhile. bucket_join
 * makes `stream` wait for every bucket started since the last join, records `done` (a timing
 * event) when the last one finished, and reports the errors they met. */
int world_bucket_start(world_t *w, size_t index, void *buf, size_t count, shmddp_dtype_t dtype,
                       dev_event_t *ready, char *err, size_t errlen);
int world_bucket_join(world_t *w, void *stream, dev_event_t *done, int capturing, char *err,
                      size_t errlen);

/* A stop (SIGINT/SIGTERM to the launcher) was asked for. */
int world_stop_requested(world_t *w);
/* Mark the world failed with reason, so every rank stops at once (the ranks of this node
 * through shmddp; an MPI program also calls MPI_Abort). */
void world_abort(world_t *w, const char *reason);

#endif
