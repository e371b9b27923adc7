/* cuda_args.c — the host side of the transport's kernels that every algorithm family shares:
 * their arguments filled in from the communicator's state (peers' flag arrays, staged regions,
 * device counters, the give-up words), and their launches, a failed one made the communicator's
 * error. The kernels are in cuda_kernels.cu and cuda_staged.cu. */
#include "config.h"

#include <string.h>

#include "collectives/cuda/cuda_args.h"
#include "shm/check.h"

shmddp_status_t cuda_local_copy(shmddp_comm_t *comm, void *dst, const void *src, size_t bytes,
                                shmddp_stream_t stream)
{
  if (dst != src && bytes)
    TRY_AS(cuda_failed, comm,
           cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  return SHMDDP_OK;
}

size_t cuda_slice_elems(size_t count, int n, size_t ds)
{
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  size_t v = 16 / ds;
  return (per + v - 1) / v * v;
}

int cuda_ts_blocks(const shmddp_comm_t *comm, size_t slice_bytes)
{
  int b = cuda_direct_blocks(slice_bytes), most = cuda_state(comm)->ts_blocks;
  return b < most ? b : most;
}

void cuda_direct_init(const shmddp_comm_t *comm, cuda_direct_args_t *a, int mode,
                      shmddp_dtype_t dtype, shmddp_op_t op)
{
  cuda_state_t *s = cuda_state(comm);
  memset(a, 0, sizeof *a);
  a->mode = mode;
  a->dtype = dtype;
  a->op = op;
  a->avg_div = comm->nranks;
  a->nranks = comm->nranks;
  a->rank = comm->rank;
  a->barrier_start = a->barrier_end = 1;
  a->dflags = (uint64_t *)(s->ctrl + CUDA_OFF_DFLAGS);
  for (int r = 0; r < comm->nranks; r++)
    a->dflags_peer[r] = (uint64_t *)(s->ctrl_peer[r] + CUDA_OFF_DFLAGS);
  a->depoch = s->local_arrays.depoch;
  a->k = cuda_kctl(comm);
}

shmddp_status_t cuda_run_direct(shmddp_comm_t *comm, cuda_direct_args_t *a, int blocks,
                                shmddp_stream_t stream)
{
  uintptr_t bits = 0;
  for (int i = 0; i < a->nsrc; i++) bits |= (uintptr_t)a->src[i];
  for (int i = 0; i < a->ndst; i++) bits |= (uintptr_t)a->dst[i];
  a->vec = (bits & 15) == 0;
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(a, blocks, stream));
  return SHMDDP_OK;
}

shmddp_status_t cuda_run_barrier(shmddp_comm_t *comm, shmddp_stream_t stream)
{
  cuda_direct_args_t a;
  cuda_direct_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_F32, SHMDDP_SUM);
  a.barrier_end = 0;
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, 1, stream));
  return SHMDDP_OK;
}

void cuda_staged_init(const shmddp_comm_t *comm, cuda_staged_args_t *a, int mode,
                      shmddp_dtype_t dtype, shmddp_op_t op)
{
  cuda_state_t *s = cuda_state(comm);
  memset(a, 0, sizeof *a);
  a->mode = mode;
  a->dtype = dtype;
  a->op = op;
  a->avg_div = comm->nranks;
  a->nranks = comm->nranks;
  a->rank = comm->rank;
  a->post_data = 1;
  for (int r = 0; r < comm->nranks; r++)
    a->region[r] = s->staged_dev + (size_t)r * CUDA_STAGED_REGION;
  a->sctr = s->local_arrays.sctr;
  a->k = cuda_kctl(comm);
}

shmddp_status_t cuda_run_staged(shmddp_comm_t *comm, const cuda_staged_args_t *a,
                                shmddp_stream_t stream)
{
  TRY_AS(cuda_launch_failed, comm, cuda_launch_staged(a, stream));
  return SHMDDP_OK;
}

shmddp_status_t cuda_staged_reduce(shmddp_comm_t *comm, const cuda_call_t *k, size_t src_bytes,
                                   size_t lo, size_t hi)
{
  cuda_staged_args_t a;
  cuda_staged_init(comm, &a, CUDA_DIRECT_REDUCE, k->dtype, k->op);
  a.src = k->send;
  a.src_bytes = src_bytes;
  a.rd_lo = lo;
  a.rd_hi = hi;
  a.dst = k->recv;
  return cuda_run_staged(comm, &a, k->stream);
}

shmddp_status_t cuda_staged_gather(shmddp_comm_t *comm, const cuda_call_t *k, int takers)
{
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  cuda_staged_args_t a;
  cuda_staged_init(comm, &a, CUDA_DIRECT_COPY, k->dtype, 0);
  a.src = k->send;
  a.src_bytes = bytes;
  a.dst = k->recv;
  a.dst_stride = bytes;
  a.copy_mask = takers ? (1u << comm->nranks) - 1 : 0;
  return cuda_run_staged(comm, &a, k->stream);
}
