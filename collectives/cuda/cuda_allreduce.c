/* cuda_allreduce.c — the all-reduce algorithms of the device collectives (which one a call
 * takes: cuda_ops.c):
 *   one-shot     every rank pushes (data + flag, LL packets) into every peer's slot and reduces
 *                locally; small messages
 *   two-shot     reduce-scatter by direct loads, all-gather by direct stores: through the scratch
 *                areas up to ts_max (no host rendezvous), on the users' buffers above (zero copies)
 *   copy-engine  the ring over copy engines below; large messages, the SMs left to compute
 *   staged       through the staged host memory, for GPUs without P2P
 *
 * Copy-engine all-reduce (cering), per rank r owning slice r of the buffer, in chunks:
 *   cs_in   pulls chunk j of slice r from every peer's send buffer into landing buffer j & 1
 *           (after the reduction of chunk j-2 has freed it)
 *   stream  reduces chunk j (own send + landed chunks, rank order) into recv
 *   cs_out  pushes the reduced chunk j into every peer's recv
 * A barrier kernel before (peers' buffers ready) and after (all pushes into this rank done, all
 * pulls from it done) brackets the pipeline; the side streams fork from and join back into the
 * caller's stream with events, so the whole sequence can be captured in a CUDA graph. */
#include "config.h"

#include <string.h>

#include "collectives/cuda/cuda_algos.h"
#include "collectives/cuda/cuda_args.h"
#include "collectives/reduce/reduce_cuda.h"
#include "shm/check.h"

shmddp_status_t cuda_ar_oneshot(shmddp_comm_t *comm, const cuda_call_t *k)
{
  cuda_state_t *s = cuda_state(comm);
  size_t ds = shmddp_dtype_size(k->dtype), per = CUDA_LL_MAX_BYTES / ds;
  cuda_ll_args_t a;
  memset(&a, 0, sizeof a);
  a.dtype = k->dtype;
  a.op = k->op;
  a.avg_div = comm->nranks;
  a.nranks = comm->nranks;
  a.rank = comm->rank;
  for (int r = 0; r < comm->nranks; r++) a.ll_peer[r] = s->ctrl_peer[r] + CUDA_OFF_LL;
  a.ll_seq = s->local_arrays.ll_seq;
  a.k = cuda_kctl(comm);
  for (size_t off = 0; off < k->count; off += per) {
    a.send = (const char *)k->send + off * ds;
    a.recv = (char *)k->recv + off * ds;
    a.count = k->count - off < per ? k->count - off : per;
    TRY_AS(cuda_launch_failed, comm, cuda_launch_ll(&a, k->stream));
  }
  return SHMDDP_OK;
}

/* Two-shot through the scratch areas: no host rendezvous (mid sizes). */
static shmddp_status_t twoshot_scratch(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                                       shmddp_stream_t stream)
{
  cuda_state_t *s = cuda_state(comm);
  size_t ds = shmddp_dtype_size(dtype);
  cuda_ts_args_t a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.op = op;
  a.avg_div = comm->nranks;
  a.nranks = comm->nranks;
  a.rank = comm->rank;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.sl = cuda_slice_elems(count, comm->nranks, ds);
  for (int r = 0; r < comm->nranks; r++) {
    a.ts[r] = s->ctrl_peer[r] + CUDA_OFF_TS(comm->nranks);
    a.dflags_peer[r] = (uint64_t *)(s->ctrl_peer[r] + CUDA_OFF_DFLAGS);
  }
  a.dflags = (uint64_t *)(s->ctrl + CUDA_OFF_DFLAGS);
  a.ts_seq = s->local_arrays.ts_seq;
  a.depoch = s->local_arrays.depoch;
  a.k = cuda_kctl(comm);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_ts(&a, cuda_ts_blocks(comm, a.sl * ds), stream));
  return SHMDDP_OK;
}

/* A buffer some rank cannot share: the scratch two-shot, piece by piece (no user buffer leaves
 * its rank; the pieces keep the buffers' 16-byte alignment). */
shmddp_status_t cuda_ar_scratch(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t ds = shmddp_dtype_size(k->dtype), per = cuda_state(comm)->ts_max / 16 * 16 / ds;
  for (size_t off = 0; off < k->count; off += per)
    TRY(twoshot_scratch(comm, (const char *)k->send + off * ds, (char *)k->recv + off * ds,
                        k->count - off < per ? k->count - off : per, k->dtype, k->op, k->stream));
  return SHMDDP_OK;
}

/* Two-shot on the users' buffers (exchanged per call): large sizes, zero copies. */
shmddp_status_t cuda_ar_twoshot(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t ds = shmddp_dtype_size(k->dtype), count = k->count;
  if (count * ds <= cuda_state(comm)->ts_max)
    return twoshot_scratch(comm, k->send, k->recv, count, k->dtype, k->op, k->stream);
  void *P[2][CUDA_MAXR];
  const void *mine[2] = {k->send, k->recv};
  size_t len[2] = {count * ds, count * ds};
  int staged = 0;
  TRY(cuda_exchange(comm, 2, mine, len, k->stream, P, &staged));
  if (staged) return cuda_ar_scratch(comm, k);
  size_t sl = cuda_slice_elems(count, comm->nranks, ds);
  size_t lo = (size_t)comm->rank * sl, hi = lo + sl < count ? lo + sl : count;
  if (lo > hi) lo = hi;
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_REDUCE, k->dtype, k->op);
  a.nsrc = a.ndst = comm->nranks;
  for (int r = 0; r < comm->nranks; r++) {
    a.src[r] = (const char *)P[0][r] + lo * ds;
    a.dst[r] = (char *)P[1][r] + lo * ds;
  }
  a.n = hi - lo;
  return cuda_run_direct(comm, &a, cuda_ts_blocks(comm, sl * ds), k->stream);
}

shmddp_status_t cuda_ar_cering(shmddp_comm_t *comm, const cuda_call_t *k)
{
  cuda_state_t *s = cuda_state(comm);
  cudaStream_t st = (cudaStream_t)k->stream;
  const void *send = k->send;
  void *recv = k->recv;
  void *P[2][CUDA_MAXR];
  const void *mine[2] = {send, recv};
  size_t ds = shmddp_dtype_size(k->dtype), len[2] = {k->count * ds, k->count * ds};
  int staged = 0;
  TRY(cuda_exchange(comm, 2, mine, len, k->stream, P, &staged));
  if (staged) return cuda_ar_scratch(comm, k);
  int n = comm->nranks, me = comm->rank;
  size_t sl = cuda_slice_elems(k->count, n, ds);
  size_t lo = (size_t)me * sl, hi = lo + sl < k->count ? lo + sl : k->count;
  if (lo > hi) lo = hi;
  /* Chunks: about 1/32 of the slice (enough to pipeline, few enough to keep the host ahead),
   * between 1 MiB and the landing buffer, whole 4 KiB pages. */
  size_t cb = s->ce_chunk_env ? s->ce_chunk_env : sl * ds / 32;
  if (cb < ((size_t)1 << 20)) cb = (size_t)1 << 20;
  if (cb > s->ce_chunk) cb = s->ce_chunk;
  cb &= ~(size_t)4095;
  size_t ce = cb / ds;

  TRY(cuda_run_barrier(comm, k->stream));
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_fork, st));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_in, s->ev_fork, 0));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_out, s->ev_fork, 0));
  size_t j = 0;
  for (size_t off = lo; off < hi; off += ce, j++) {
    size_t m = hi - off < ce ? hi - off : ce, b = j & 1;
    unsigned char *land = s->scratch + b * (size_t)(n - 1) * s->ce_chunk;
    if (j >= 2) TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_in, s->ev_red[b], 0));
    const void *srcs[CUDA_MAXR];
    for (int r = 0, q = 0; r < n; r++) {
      if (r == me) {
        srcs[r] = (const char *)send + off * ds;
        continue;
      }
      void *dst = land + (size_t)q++ * s->ce_chunk;
      TRY_AS(cuda_failed, comm, cudaMemcpyAsync(dst, (const char *)P[0][r] + off * ds, m * ds,
                                                cudaMemcpyDeviceToDevice, s->cs_in));
      srcs[r] = dst;
    }
    TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_cp[b], s->cs_in));
    TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_cp[b], 0));
    TRY_AS(cuda_launch_failed, comm,
           reduce_cuda_multi((char *)recv + off * ds, srcs, n, m, k->dtype, k->op, n, st));
    TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_red[b], st));
    TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_out, s->ev_red[b], 0));
    for (int r = 0; r < n; r++)
      if (r != me)
        TRY_AS(cuda_failed, comm,
               cudaMemcpyAsync((char *)P[1][r] + off * ds, (char *)recv + off * ds, m * ds,
                               cudaMemcpyDeviceToDevice, s->cs_out));
  }
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_join_in, s->cs_in));
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_join_out, s->cs_out));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_join_in, 0));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_join_out, 0));
  return cuda_run_barrier(comm, k->stream);
}

shmddp_status_t cuda_ar_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  return cuda_staged_reduce(comm, k, k->count * shmddp_dtype_size(k->dtype), 0, k->count);
}
