/* ddp_cuda.h — the device half of the DDP engine (CUDA build): bucket all-reduces queued on a
 * communication stream as backward produces them, SyncBN exchanges on the compute stream over a
 * second communicator, events that let the optimizer wait only for the buckets. */
#ifndef SRC_PARALLEL_DDP_CUDA_H
#define SRC_PARALLEL_DDP_CUDA_H

#include <stddef.h>

#include "shmddp.h"

typedef struct ddp_cuda ddp_cuda_t;

/* Collective (every rank): sets up the device transport on comm and on a duplicate for SyncBN. */
int ddp_cuda_create(ddp_cuda_t **out, shmddp_comm_t *comm, void *compute_stream, size_t nbuckets,
                    char *err, size_t errlen);
void ddp_cuda_destroy(ddp_cuda_t *d);

/* Start of a step's backward: nothing queued yet. */
void ddp_cuda_begin_step(ddp_cuda_t *d);
/* Bucket b ([grads, grads + count)) is final on the compute stream: average it across ranks on
 * the communication stream, after the compute stream's work so far. */
int ddp_cuda_bucket_ready(ddp_cuda_t *d, size_t b, float *grads, size_t count, char *err,
                          size_t errlen);
/* The compute stream waits for every queued bucket (the optimizer runs after this). */
int ddp_cuda_finish_step(ddp_cuda_t *d, char *err, size_t errlen);
/* SyncBN: sum buf over ranks, in place, in order on the given (compute) stream. */
int ddp_cuda_sync_stats(ddp_cuda_t *d, void *buf, size_t count, shmddp_dtype_t dtype,
                        void *stream, char *err, size_t errlen);
/* CUDA graphs. While on, the step being queued is captured: timing events become graph nodes
 * (so replays stay measurable). ddp_cuda_replayed: a replay of that graph was launched in place
 * of a step, so the step's measurements are the replay's. */
void ddp_cuda_set_capture(ddp_cuda_t *d, int on);
void ddp_cuda_replayed(ddp_cuda_t *d);
/* Broadcast count f32 at a device pointer from rank 0 (synchronous). */
int ddp_cuda_broadcast(ddp_cuda_t *d, float *dev, size_t count, char *err, size_t errlen);
/* Of the last finished step: seconds the compute stream waited for communication after its
 * backward was done (exposed), and the seconds SyncBN exchanges took on the compute stream.
 * Waits for the step's events. */
double ddp_cuda_exposed_s(ddp_cuda_t *d);
/* Seconds the step's SyncBN exchanges took on the compute stream (event-timed, each exchange
 * from its enqueue point to its completion), and how many there were. */
double ddp_cuda_syncbn_s(ddp_cuda_t *d);
int ddp_cuda_syncbn_count(const ddp_cuda_t *d);

#endif
