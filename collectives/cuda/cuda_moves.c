/* cuda_moves.c — all-to-all, gather and scatter on device buffers, as block moves: one direct
 * copy kernel per block, every rank launching the same number of kernels (a rank with nothing to
 * move takes part in the handshakes only). P2P: the receivers' buffers are exchanged and each
 * rank pushes its blocks (launch j: rank r's block (r + j) % n); staged: launch j posts the same
 * blocks and each receiver copies the one that is its own. (Ranks that share a GPU take the
 * co-located path instead, one call and one hand-over like every collective: cuda_ops.c.) */
#include "config.h"

#include "collectives/cuda/cuda_algos.h"
#include "collectives/cuda/cuda_args.h"
#include "shm/check.h"

/* Launch j of n block moves: this rank posts/pushes block `to` of send (NULL: nothing) and
 * receives the block `from` posts into recv + from * stride (from < 0: nothing). */
static shmddp_status_t block_move(shmddp_comm_t *comm, int staged, void *const *P, const void *src,
                                  size_t bytes, int to, size_t dst_off, void *recv, int from,
                                  size_t stride, shmddp_stream_t stream)
{
  if (staged) {
    cuda_staged_args_t a;
    cuda_staged_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_U8, 0);
    a.src = src;
    a.src_bytes = bytes;
    a.post_data = src != NULL;
    a.dst = recv;
    a.dst_stride = stride;
    a.copy_mask = from >= 0 ? 1u << from : 0;
    return cuda_run_staged(comm, &a, stream);
  }
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_U8, 0);
  if (src && P[to]) {
    a.nsrc = 1;
    a.src[0] = src;
    a.ndst = 1;
    a.dst[0] = (char *)P[to] + dst_off;
    a.n = bytes;
  }
  return cuda_run_direct(comm, &a, cuda_direct_blocks(bytes), stream);
}

/* All-to-all as n block moves (launch j: this rank's block for rank (me + j) % n). */
shmddp_status_t cuda_a2a_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged)
{
  int n = comm->nranks, me = comm->rank;
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  if (!staged) TRY(cuda_exchange_one(comm, k->recv, bytes * (size_t)n, k->stream, P, &staged));
  for (int j = 0; j < n; j++) {
    int to = (me + j) % n, from = (me - j + n) % n;
    TRY(block_move(comm, staged, P, (const char *)k->send + (size_t)to * bytes, bytes, to,
                   (size_t)me * bytes, k->recv, from, bytes, k->stream));
  }
  return SHMDDP_OK;
}

/* Gather: each rank's block pushed into the root's buffer, or staged. */
shmddp_status_t cuda_gather_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged)
{
  int me = comm->rank, root = k->root;
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  if (!staged)
    TRY(cuda_exchange_one(comm, me == root ? k->recv : NULL, bytes * (size_t)comm->nranks,
                          k->stream, P, &staged));
  if (staged) return cuda_staged_gather(comm, k, me == root);
  return block_move(comm, 0, P, k->send, bytes, root, (size_t)me * bytes, NULL, -1, 0,
                    k->stream);
}

/* Scatter as n block moves (launch j: the root's block for rank j). */
shmddp_status_t cuda_scatter_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged)
{
  int n = comm->nranks, me = comm->rank, root = k->root;
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  if (!staged) TRY(cuda_exchange_one(comm, k->recv, bytes, k->stream, P, &staged));
  for (int j = 0; j < n; j++) {
    const void *src = me == root ? (const char *)k->send + (size_t)j * bytes : NULL;
    TRY(block_move(comm, staged, P, src, bytes, j, 0, k->recv, me == j ? root : -1, 0,
                   k->stream));
  }
  return SHMDDP_OK;
}
