/* ddp_cuda.c — DDP on the GPU. Buckets are all-reduced on a communication stream: when backward
 * reports a bucket final, an event recorded on the compute stream orders the all-reduce after
 * the gradients it reads, and backward goes on while NVLink moves the bucket. The optimizer waits
 * on one event after the last bucket, so only the communication that outlasts backward is
 * exposed; it is measured as the time from "backward done" to "last bucket done".
 * SyncBN statistics travel on the compute stream over a duplicate communicator: its calls are
 * ordered independently of the buckets', so a BN exchange never queues behind a gradient bucket. */
#include "config.h"

#include "src/parallel/ddp_cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "shmddp_cuda.h"
#include "src/check.h"
#include "src/obs/timeline.h"

#define DDP_CUDA_BUCKET_BLOCKS 16
#define DDP_CUDA_MAX_BN 256 /* timed SyncBN exchanges per step (U-Net: 2 per BN layer) */

struct ddp_cuda {
  shmddp_comm_t *comm;   /* buckets, on comm_stream */
  shmddp_comm_t *bn;     /* SyncBN statistics, on the compute stream */
  cudaStream_t compute, comm_stream;
  cudaEvent_t *ready;    /* per bucket, on compute */
  size_t nbuckets;
  cudaEvent_t bwd_done, comm_done;
  cudaEvent_t join;      /* comm stream -> compute stream at the end of a step (no timing) */
  cudaEvent_t bn_ev[2 * DDP_CUDA_MAX_BN]; /* start/end pairs around each SyncBN exchange */
  int bn_used;
  int queued;            /* buckets queued this step */
  int measured;          /* events of a finished step exist */
  int capturing;         /* the compute stream is being captured into a CUDA graph */
  int graph_bn_used, graph_measured; /* what the captured step records, for its replays */
};

/* A timing event: in a stream capture it must become a node of the graph (an "external" record),
 * so every replay records it and the step stays measurable; outside, a plain record. */
static cudaError_t record_timing(const ddp_cuda_t *d, cudaEvent_t ev, cudaStream_t s)
{
  return d->capturing ? cudaEventRecordWithFlags(ev, s, cudaEventRecordExternal)
                      : cudaEventRecord(ev, s);
}

int ddp_cuda_create(ddp_cuda_t **out, shmddp_comm_t *comm, void *compute_stream, size_t nbuckets,
                    char *err, size_t errlen)
{
  *out = NULL;
  ddp_cuda_t *d = calloc(1, sizeof *d);
  if (!d) {
    return check_fail(err, errlen, "out of memory");
  }
  *out = d;
  d->comm = comm;
  d->compute = (cudaStream_t)compute_stream;
  d->nbuckets = nbuckets;
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.device = shmddp_comm_device(comm);
  /* Buckets run beside backward: 16 blocks move a 25 MB bucket in about the time backward
   * takes to produce the next one, and leave the other SMs to the convolutions (2 x H200, bf16:
   * 1616 img/s against 1579 with all 128; bench/results/ddp_2xh200.tsv). */
  cc.max_blocks = DDP_CUDA_BUCKET_BLOCKS;
  CHECK_COLL(comm, shmddp_comm_init_cuda(comm, &cc), "setting up the device transport");
  CHECK_COLL(comm, shmddp_comm_dup(comm, &d->bn), "creating the SyncBN communicator");
  cc.max_blocks = 0; /* SyncBN's exchanges are small and on the critical path */
  CHECK_COLL(d->bn, shmddp_comm_init_cuda(d->bn, &cc), "setting up the SyncBN transport");
  /* Higher priority than compute, so a ready bucket starts at once. */
  int lo, hi;
  CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  CHECK_CUDA(cudaStreamCreateWithPriority(&d->comm_stream, cudaStreamNonBlocking, hi));
  d->ready = calloc(nbuckets ? nbuckets : 1, sizeof *d->ready);
  for (size_t b = 0; b < nbuckets; b++)
    CHECK_CUDA(cudaEventCreateWithFlags(&d->ready[b], cudaEventDisableTiming));
  for (int i = 0; i < 2 * DDP_CUDA_MAX_BN; i++) CHECK_CUDA(cudaEventCreate(&d->bn_ev[i]));
  CHECK_CUDA(cudaEventCreate(&d->bwd_done));
  CHECK_CUDA(cudaEventCreate(&d->comm_done));
  CHECK_CUDA(cudaEventCreateWithFlags(&d->join, cudaEventDisableTiming));
  return 0;
}

void ddp_cuda_destroy(ddp_cuda_t *d)
{
  if (!d) return;
  for (size_t b = 0; d->ready && b < d->nbuckets; b++) cudaEventDestroy(d->ready[b]);
  free(d->ready);
  for (int i = 0; i < 2 * DDP_CUDA_MAX_BN; i++)
    if (d->bn_ev[i]) cudaEventDestroy(d->bn_ev[i]);
  if (d->bwd_done) cudaEventDestroy(d->bwd_done);
  if (d->comm_done) cudaEventDestroy(d->comm_done);
  if (d->join) cudaEventDestroy(d->join);
  if (d->comm_stream) cudaStreamDestroy(d->comm_stream);
  if (d->bn) shmddp_comm_free(d->bn);
  free(d);
}

void ddp_cuda_begin_step(ddp_cuda_t *d)
{
  d->queued = 0;
  d->bn_used = 0;
}

int ddp_cuda_bucket_ready(ddp_cuda_t *d, size_t b, float *grads, size_t count, char *err,
                          size_t errlen)
{
  CHECK_CUDA(cudaEventRecord(d->ready[b], d->compute));
  CHECK_CUDA(cudaStreamWaitEvent(d->comm_stream, d->ready[b], 0));
  /* After the wait, so the span starts when the bucket can start. */
  int tl = timeline_begin(TIMELINE_ALLREDUCE, d->comm_stream);
  timeline_args(tl, (double)b, (double)(count * sizeof(float)));
  CHECK_COLL(d->comm,
             shmddp_all_reduce(d->comm, grads, grads, count, SHMDDP_F32, SHMDDP_AVG,
                               (shmddp_stream_t)d->comm_stream),
             "gradient all-reduce");
  timeline_end(tl, d->comm_stream);
  d->queued++;
  return 0;
}

int ddp_cuda_finish_step(ddp_cuda_t *d, char *err, size_t errlen)
{
  CHECK_CUDA(record_timing(d, d->bwd_done, d->compute));
  CHECK_CUDA(record_timing(d, d->comm_done, d->comm_stream));
  /* The join: in a capture this also brings the communication stream back into the graph. */
  CHECK_CUDA(cudaEventRecord(d->join, d->comm_stream));
  CHECK_CUDA(cudaStreamWaitEvent(d->compute, d->join, 0));
  d->measured = d->queued > 0;
  CHECK_COLL(d->comm, shmddp_cuda_check(d->comm), "gradient all-reduce");
  return 0;
}

int ddp_cuda_sync_stats(ddp_cuda_t *d, void *buf, size_t count, shmddp_dtype_t dtype,
                        void *stream, char *err, size_t errlen)
{
  int timed = d->bn_used < DDP_CUDA_MAX_BN;
  if (timed) CHECK_CUDA(record_timing(d, d->bn_ev[2 * d->bn_used], (cudaStream_t)stream));
  CHECK_COLL(d->bn,
             shmddp_all_reduce(d->bn, buf, buf, count, dtype, SHMDDP_SUM, (shmddp_stream_t)stream),
             "SyncBN statistics all-reduce");
  if (timed) CHECK_CUDA(record_timing(d, d->bn_ev[2 * d->bn_used++ + 1], (cudaStream_t)stream));
  return 0;
}

void ddp_cuda_set_capture(ddp_cuda_t *d, int on)
{
  if (d->capturing && !on) { /* the capture ended: its replays record what it recorded */
    d->graph_bn_used = d->bn_used;
    d->graph_measured = d->measured;
  }
  d->capturing = on != 0;
}

void ddp_cuda_replayed(ddp_cuda_t *d)
{
  d->bn_used = d->graph_bn_used;
  d->measured = d->graph_measured;
}

int ddp_cuda_broadcast(ddp_cuda_t *d, float *dev, size_t count, char *err, size_t errlen)
{
  CHECK_COLL(
      d->comm,
      shmddp_broadcast(d->comm, dev, dev, count, SHMDDP_F32, 0, (shmddp_stream_t)d->comm_stream),
      "broadcasting the initial parameters");
  CHECK_COLL(d->comm, shmddp_cuda_sync(d->comm, (shmddp_stream_t)d->comm_stream),
             "broadcasting the initial parameters");
  return 0;
}

double ddp_cuda_syncbn_s(ddp_cuda_t *d)
{
  double total = 0;
  if (d->bn_used == 0 || cudaEventSynchronize(d->bn_ev[2 * d->bn_used - 1]) != cudaSuccess)
    return 0;
  for (int i = 0; i < d->bn_used; i++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, d->bn_ev[2 * i], d->bn_ev[2 * i + 1]) == cudaSuccess) total += ms;
  }
  return total * 1e-3;
}

int ddp_cuda_syncbn_count(const ddp_cuda_t *d) { return d->bn_used; }

double ddp_cuda_exposed_s(ddp_cuda_t *d)
{
  if (!d->measured) return 0;
  float ms = 0;
  if (cudaEventSynchronize(d->comm_done) != cudaSuccess ||
      cudaEventElapsedTime(&ms, d->bwd_done, d->comm_done) != cudaSuccess)
    return 0;
  return ms > 0 ? ms * 1e-3 : 0;
}
