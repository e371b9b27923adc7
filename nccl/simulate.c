/* simulate.c — what ncclGroupSimulateEnd reports: an estimate of how long a group's calls take,
 * from our own coarse model, not from a measurement.
 *
 * The model is the textbook latency-bandwidth one: a call costs steps * ALPHA + bytes / BW,
 * where bytes is what each rank moves in a ring-shaped schedule of the collective (all-reduce
 * 2(n-1)/n of the buffer, reduce-scatter and all-gather (n-1)/n of the whole, all-to-all (n-1)
 * blocks, broadcast/reduce/gather/scatter and send/recv the buffer once) and steps the rounds it
 * waits for peers. Two settings: host-only communicators (staging through the segment) and
 * device ones (peer-to-peer between GPUs, near what one H200 pair reaches; ranks that share a GPU
 * or lack P2P are slower than this says). The calls of one communicator add up; different
 * communicators run side by side, so a group takes as long as its slowest communicator.
 * Times are in microseconds, the unit of NCCL's own estimates. */
#include "config.h"

#include "nccl/internal.h"

#define HOST_ALPHA_US 10.0  /* per round, host-only communicators */
#define HOST_BYTES_PER_US 5e3 /* 5 GB/s per rank through the segment */
#define DEV_ALPHA_US 15.0   /* per round, device communicators */
#define DEV_BYTES_PER_US 150e3 /* 150 GB/s per rank, peer to peer */

static double call_us(const nccl_call_t *k)
{
  if (k->kind == NCCL_CALL_INIT) return 0;
  double n = k->comm->nranks, s = (double)k->count * (double)shmddp_dtype_size(k->dtype);
  double bytes = s, steps = 1;
  switch (k->kind) {
  case NCCL_CALL_ALL_REDUCE: bytes = 2 * (n - 1) / n * s, steps = 2 * (n - 1); break;
  case NCCL_CALL_REDUCE_SCATTER: /* count is per rank */
  case NCCL_CALL_ALL_GATHER:
  case NCCL_CALL_ALL_TO_ALL: bytes = (n - 1) * s, steps = n - 1; break;
  case NCCL_CALL_GATHER:
  case NCCL_CALL_SCATTER: bytes = (n - 1) * s; break;
  default: break; /* broadcast, reduce, send, recv: the buffer once */
  }
  if (steps < 1) steps = 1;
  int dev = k->comm->device >= 0;
  return steps * (dev ? DEV_ALPHA_US : HOST_ALPHA_US) +
         bytes / (dev ? DEV_BYTES_PER_US : HOST_BYTES_PER_US);
}

float nccl_sim_estimate(const nccl_call_t *calls, size_t n)
{
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    int first = 1; /* sum each communicator's calls once, at its first call */
    for (size_t j = 0; j < i && first; j++) first = calls[j].comm != calls[i].comm;
    if (!first) continue;
    double t = 0;
    for (size_t j = i; j < n; j++)
      if (calls[j].comm == calls[i].comm) t += call_us(&calls[j]);
    if (t > worst) worst = t;
  }
  return (float)worst;
}
