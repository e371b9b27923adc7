/* cuda_ops.c — the device collectives' table (cuda_device_ops). Every entry makes its call a
 * descriptor (cuda_call_t) and runs it the one way: the choice of algorithm, the kernels'
 * earlier give-ups reported, the signature published, the calls with nothing to move between
 * ranks, then the co-located path (cuda_coloc.c) or the call's algorithm family (cuda_algos.h):
 *   cuda_allreduce.c  all-reduce: one-shot, two-shot, copy-engine ring, staged
 *   cuda_rs_ag.c      reduce-scatter, all-gather, broadcast, reduce: direct kernel or staged
 *   cuda_moves.c      all-to-all, gather, scatter: block moves
 *   cuda_args.c       the kernels' arguments and launches they share
 *
 * Choice (all_reduce, P2P): one-shot up to direct_max bytes (SHMDDP_CUDA_DIRECT_MAX, default
 * 1 MiB), two-shot above; the copy-engine algorithm only from ce_min (SHMDDP_CUDA_CE_MIN, default
 * never: it is slower than the two-shot at every size measured, see
 * bench/results/allreduce_2xh200_algos.txt); without P2P always staged.
 * Two-shot runs through the scratch areas up to ts_max (SHMDDP_CUDA_TS_MAX: no host rendezvous,
 * which costs more than the data there), on the users' buffers above (zero copies), on at most
 * SHMDDP_CUDA_TS_BLOCKS blocks (default 128: all it can use; DDP's buckets overlap backward, where
 * fewer blocks leave SMs to the convolutions).
 * Forced algorithms (SHMDDP_ALGO, shmddp_comm_set_algo) are honoured where they exist for the
 * collective; "ring" means the copy-engine algorithm; P2P algorithms without P2P become staged.
 * Ranks that share a GPU: auto takes the co-located path (cuda_coloc.c) for every collective and
 * size, except under CUDA-graph capture (coloc_use_path); coloc forced takes it for any placement.
 * All-to-all, gather and scatter take only the co-located path from a forced algorithm. */
#include "config.h"

#include "collectives/cuda/cuda_algos.h"
#include "collectives/cuda/cuda_args.h"
#include "collectives/device.h"
#include "collectives/reduce/reduce_cuda.h"
#include "shm/check.h"

static shmddp_algo_t choose(const shmddp_comm_t *comm, coll_kind_t kind, size_t bytes,
                            shmddp_algo_t req)
{
  const cuda_state_t *s = cuda_state(comm);
  if (!s->p2p) return SHMDDP_ALGO_STAGED;
  if (req == SHMDDP_ALGO_RING) req = SHMDDP_ALGO_CE_RING;
  if (req == SHMDDP_ALGO_COLOC) return req;
  if (kind == COLL_ALL_REDUCE) {
    if (req != SHMDDP_ALGO_AUTO) return req;
    if (bytes <= s->direct_max) return SHMDDP_ALGO_DIRECT;
    return bytes < s->ce_min ? SHMDDP_ALGO_TWOSHOT : SHMDDP_ALGO_CE_RING;
  }
  /* The other collectives have the direct kernel and the staged one. */
  return req == SHMDDP_ALGO_STAGED ? SHMDDP_ALGO_STAGED : SHMDDP_ALGO_DIRECT;
}

/* A co-located call whose buffers some rank cannot share: what the other algorithms do then. */
static shmddp_status_t coloc_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  switch (k->kind) {
  case COLL_ALL_REDUCE: return cuda_ar_scratch(comm, k);
  case COLL_REDUCE_SCATTER: return cuda_rs_staged(comm, k);
  case COLL_ALL_GATHER: return cuda_ag_staged(comm, k);
  case COLL_BROADCAST: return cuda_bc_staged(comm, k);
  case COLL_ALL_TO_ALL: return cuda_a2a_moves(comm, k, 1);
  case COLL_GATHER: return cuda_staged_gather(comm, k, comm->rank == k->root);
  case COLL_SCATTER: return cuda_scatter_moves(comm, k, 1);
  default: return cuda_rd_staged(comm, k);
  }
}

/* The co-located path (cuda_coloc.c) for any of the collectives; when some rank's buffer cannot
 * be shared, the call's staged version after it (every rank alike). */
static shmddp_status_t coloc(shmddp_comm_t *comm, const cuda_call_t *call)
{
  int me = comm->rank, staged = 0;
  cuda_call_t k = *call;
  if ((k.kind == COLL_BROADCAST || k.kind == COLL_SCATTER) && me != k.root) k.send = NULL;
  if ((k.kind == COLL_REDUCE || k.kind == COLL_GATHER) && me != k.root) k.recv = NULL;
  TRY(cuda_coloc_run(comm, &k, &staged));
  return staged ? coloc_staged(comm, &k) : SHMDDP_OK;
}

static int is_move(coll_kind_t kind)
{
  return kind == COLL_ALL_TO_ALL || kind == COLL_GATHER || kind == COLL_SCATTER;
}

/* The algorithm family of a call that moves data between ranks, off the co-located path. */
static shmddp_status_t dispatch(shmddp_comm_t *comm, const cuda_call_t *k, shmddp_algo_t algo)
{
  int staged = algo == SHMDDP_ALGO_STAGED;
  switch (k->kind) {
  case COLL_ALL_REDUCE:
    if (algo == SHMDDP_ALGO_DIRECT) return cuda_ar_oneshot(comm, k);
    if (algo == SHMDDP_ALGO_TWOSHOT) return cuda_ar_twoshot(comm, k);
    if (algo == SHMDDP_ALGO_CE_RING) return cuda_ar_cering(comm, k);
    return cuda_ar_staged(comm, k);
  case COLL_REDUCE_SCATTER: return staged ? cuda_rs_staged(comm, k) : cuda_rs_direct(comm, k);
  case COLL_ALL_GATHER: return staged ? cuda_ag_staged(comm, k) : cuda_ag_direct(comm, k);
  case COLL_BROADCAST: return staged ? cuda_bc_staged(comm, k) : cuda_bc_direct(comm, k);
  case COLL_REDUCE: return staged ? cuda_rd_staged(comm, k) : cuda_rd_direct(comm, k);
  case COLL_ALL_TO_ALL: return cuda_a2a_moves(comm, k, staged);
  case COLL_GATHER: return cuda_gather_moves(comm, k, staged);
  default: return cuda_scatter_moves(comm, k, staged);
  }
}

/* Every call: the algorithm (from req: the caller's, or the communicator's), the kernels' earlier
 * give-ups reported, the common bookkeeping; the calls with nothing to move between ranks (count
 * 0, one rank); then the co-located path or the algorithm family. */
static shmddp_status_t run(shmddp_comm_t *comm, const cuda_call_t *k, shmddp_algo_t req)
{
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  /* What the choice weighs: a reduce-scatter's or all-gather's count is one rank's block. */
  size_t weight = bytes;
  if (k->kind == COLL_REDUCE_SCATTER || k->kind == COLL_ALL_GATHER) weight *= (size_t)comm->nranks;
  req = cuda_coloc_algo(comm, req, k->stream);
  if (is_move(k->kind) && req != SHMDDP_ALGO_COLOC) req = SHMDDP_ALGO_AUTO;
  shmddp_algo_t algo = choose(comm, k->kind, weight, req);
  TRY(shmddp_cuda_check(comm));
  TRY(coll_begin(comm, k->kind, k->count, k->dtype, k->op, k->root, algo));
  if (k->count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return cuda_local_copy(comm, k->recv, k->send, bytes, k->stream);
  if (algo == SHMDDP_ALGO_COLOC) return coloc(comm, k);
  return dispatch(comm, k, algo);
}

/* ---- the table's entries: the call as a descriptor ---- */

static shmddp_status_t cuda_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                                       shmddp_algo_t req, shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_ALL_REDUCE, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = op, .root = -1, .stream = stream};
  return run(comm, &k, req);
}

static shmddp_status_t cuda_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                           size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                           shmddp_algo_t req, shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_REDUCE_SCATTER, .send = send, .recv = recv, .count = recvcount,
                   .dtype = dtype, .op = op, .root = -1, .stream = stream};
  return run(comm, &k, req);
}

static shmddp_status_t cuda_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t sendcount, shmddp_dtype_t dtype, shmddp_algo_t req,
                                       shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_ALL_GATHER, .send = send, .recv = recv, .count = sendcount,
                   .dtype = dtype, .op = 0, .root = -1, .stream = stream};
  return run(comm, &k, req);
}

static shmddp_status_t cuda_broadcast(shmddp_comm_t *comm, const void *send, void *recv,
                                      size_t count, shmddp_dtype_t dtype, int root,
                                      shmddp_algo_t req, shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_BROADCAST, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = 0, .root = root, .stream = stream};
  return run(comm, &k, req);
}

static shmddp_status_t cuda_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                   shmddp_dtype_t dtype, shmddp_op_t op, int root,
                                   shmddp_algo_t req, shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_REDUCE, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = op, .root = root, .stream = stream};
  return run(comm, &k, req);
}

static shmddp_status_t cuda_all_to_all(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  size_t all = count * shmddp_dtype_size(dtype) * (size_t)comm->nranks;
  if ((const char *)send < (const char *)recv + all && (const char *)recv < (const char *)send + all)
    return coll_error(comm, SHMDDP_ERR_INVALID, "shmddp_all_to_all: on device buffers send and "
                      "recv must not overlap (a peer may overwrite a block before it is sent)");
  cuda_call_t k = {.kind = COLL_ALL_TO_ALL, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = 0, .root = -1, .stream = stream};
  return run(comm, &k, comm->algo);
}

static shmddp_status_t cuda_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                   shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_GATHER, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = 0, .root = root, .stream = stream};
  return run(comm, &k, comm->algo);
}

static shmddp_status_t cuda_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                    size_t count, shmddp_dtype_t dtype, int root,
                                    shmddp_stream_t stream)
{
  cuda_call_t k = {.kind = COLL_SCATTER, .send = send, .recv = recv, .count = count,
                   .dtype = dtype, .op = 0, .root = root, .stream = stream};
  return run(comm, &k, comm->algo);
}

static shmddp_status_t cuda_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                                  shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                                  shmddp_stream_t stream)
{
  TRY(cuda_local_copy(comm, dst, src, count * shmddp_dtype_size(dtype), stream));
  TRY_AS(cuda_launch_failed, comm,
         reduce_cuda_scale(dst, count, dtype, scalar, scalar_on_device, stream));
  return SHMDDP_OK;
}

static void cuda_teardown(shmddp_comm_t *comm) { shmddp_comm_free_cuda(comm); }

const struct coll_device_ops cuda_device_ops = {
  .all_reduce = cuda_all_reduce,
  .reduce_scatter = cuda_reduce_scatter,
  .all_gather = cuda_all_gather,
  .broadcast = cuda_broadcast,
  .reduce = cuda_reduce,
  .all_to_all = cuda_all_to_all,
  .gather = cuda_gather,
  .scatter = cuda_scatter,
  .scale = cuda_scale,
  .teardown = cuda_teardown,
};
