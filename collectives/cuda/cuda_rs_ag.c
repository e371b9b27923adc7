/* cuda_rs_ag.c — reduce-scatter, all-gather, broadcast and reduce on device buffers. With P2P
 * (direct): the buffers the call writes or reads on the peers are exchanged, and one direct
 * kernel launch moves the data by loads (reduce-scatter, reduce) or stores (all-gather,
 * broadcast) over P2P. Without (staged: the STAGED algorithm, and every call in which some
 * rank's buffer cannot be shared with its peers, decided alike on every rank by the exchange):
 * every rank posts its input into the staged host memory, and the kernel reduces or copies from
 * there what this rank receives. */
#include "config.h"

#include "collectives/cuda/cuda_algos.h"
#include "collectives/cuda/cuda_args.h"
#include "shm/check.h"

shmddp_status_t cuda_rs_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t lo = (size_t)comm->rank * k->count;
  return cuda_staged_reduce(comm, k, k->count * shmddp_dtype_size(k->dtype) * (size_t)comm->nranks,
                            lo, lo + k->count);
}

shmddp_status_t cuda_rs_direct(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t ds = shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  int staged = 0;
  TRY(cuda_exchange_one(comm, k->send, k->count * ds * (size_t)comm->nranks, k->stream, P,
                        &staged));
  if (staged) return cuda_rs_staged(comm, k);
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_REDUCE, k->dtype, k->op);
  a.nsrc = comm->nranks;
  a.ndst = 1;
  for (int r = 0; r < comm->nranks; r++)
    a.src[r] = (const char *)P[r] + (size_t)comm->rank * k->count * ds;
  a.dst[0] = k->recv;
  a.n = k->count;
  return cuda_run_direct(comm, &a, cuda_direct_blocks(k->count * ds), k->stream);
}

shmddp_status_t cuda_ag_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  return cuda_staged_gather(comm, k, 1);
}

shmddp_status_t cuda_ag_direct(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  int staged = 0;
  TRY(cuda_exchange_one(comm, k->recv, bytes * (size_t)comm->nranks, k->stream, P, &staged));
  if (staged) return cuda_ag_staged(comm, k);
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_COPY, k->dtype, 0);
  a.nsrc = 1;
  a.src[0] = k->send;
  a.ndst = comm->nranks;
  for (int r = 0; r < comm->nranks; r++) a.dst[r] = (char *)P[r] + (size_t)comm->rank * bytes;
  a.n = bytes;
  return cuda_run_direct(comm, &a, cuda_direct_blocks(bytes), k->stream);
}

shmddp_status_t cuda_bc_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  int me = comm->rank, root = k->root;
  cuda_staged_args_t a;
  cuda_staged_init(comm, &a, CUDA_DIRECT_COPY, k->dtype, 0);
  a.src = me == root ? k->send : NULL;
  a.src_bytes = k->count * shmddp_dtype_size(k->dtype);
  a.post_data = me == root;
  a.dst = k->recv;
  a.copy_mask = me != root || k->recv != k->send ? 1u << root : 0;
  return cuda_run_staged(comm, &a, k->stream);
}

shmddp_status_t cuda_bc_direct(shmddp_comm_t *comm, const cuda_call_t *k)
{
  int me = comm->rank;
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  int staged = 0;
  TRY(cuda_exchange_one(comm, k->recv, bytes, k->stream, P, &staged));
  if (staged) return cuda_bc_staged(comm, k);
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_COPY, k->dtype, 0);
  if (me == k->root) {
    a.nsrc = 1;
    a.src[0] = k->send;
    for (int r = 0; r < comm->nranks; r++)
      if (r != me || k->recv != k->send) a.dst[a.ndst++] = P[r];
    a.n = bytes;
  }
  return cuda_run_direct(comm, &a, cuda_direct_blocks(bytes), k->stream);
}

shmddp_status_t cuda_rd_staged(shmddp_comm_t *comm, const cuda_call_t *k)
{
  return cuda_staged_reduce(comm, k, k->count * shmddp_dtype_size(k->dtype), 0,
                            comm->rank == k->root ? k->count : 0);
}

shmddp_status_t cuda_rd_direct(shmddp_comm_t *comm, const cuda_call_t *k)
{
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  void *P[CUDA_MAXR];
  int staged = 0;
  TRY(cuda_exchange_one(comm, k->send, bytes, k->stream, P, &staged));
  if (staged) return cuda_rd_staged(comm, k);
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_REDUCE, k->dtype, k->op);
  if (comm->rank == k->root) {
    a.nsrc = comm->nranks;
    for (int r = 0; r < comm->nranks; r++) a.src[r] = P[r];
    a.ndst = 1;
    a.dst[0] = k->recv;
    a.n = k->count;
  }
  return cuda_run_direct(comm, &a, cuda_direct_blocks(bytes), k->stream);
}
