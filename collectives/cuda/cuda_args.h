/* cuda_args.h — the host side of the transport's kernels that every algorithm family
 * (cuda_algos.h) shares: their arguments filled in from the communicator's state, and their
 * launches. C only. */
#ifndef COLL_CUDA_ARGS_H
#define COLL_CUDA_ARGS_H

#include "collectives/cuda/cuda_state.h"

/* dst = src on stream (nothing when they are the same buffer or bytes is 0). */
shmddp_status_t cuda_local_copy(shmddp_comm_t *comm, void *dst, const void *src, size_t bytes,
                                shmddp_stream_t stream);
/* Elements per rank slice: the count split n ways, rounded up to whole 16-byte vectors so every
 * slice of an aligned buffer starts aligned. */
size_t cuda_slice_elems(size_t count, int n, size_t ds);
/* Blocks for a two-shot over slice_bytes: the usual count, capped by SHMDDP_CUDA_TS_BLOCKS. */
int cuda_ts_blocks(const shmddp_comm_t *comm, size_t slice_bytes);
/* The direct kernel's arguments for this rank: no source or destination yet, barriers at both
 * ends. */
void cuda_direct_init(const shmddp_comm_t *comm, cuda_direct_args_t *a, int mode,
                      shmddp_dtype_t dtype, shmddp_op_t op);
/* Set a->vec from the pointers and launch the direct kernel on blocks blocks. */
shmddp_status_t cuda_run_direct(shmddp_comm_t *comm, cuda_direct_args_t *a, int blocks,
                                shmddp_stream_t stream);
/* A direct kernel that moves nothing: a barrier of the ranks on their streams. */
shmddp_status_t cuda_run_barrier(shmddp_comm_t *comm, shmddp_stream_t stream);
/* The staged kernel's arguments for this rank: posting src (not set yet), copying nothing. */
void cuda_staged_init(const shmddp_comm_t *comm, cuda_staged_args_t *a, int mode,
                      shmddp_dtype_t dtype, shmddp_op_t op);
shmddp_status_t cuda_run_staged(shmddp_comm_t *comm, const cuda_staged_args_t *a,
                                shmddp_stream_t stream);
/* The staged launches of several families. Reduce: every rank posts src_bytes of k->send, and
 * elements [lo, hi) of the reduced stream go to k->recv. Gather: every rank posts k->send; where
 * takers, this rank copies every rank's into k->recv, in rank order. */
shmddp_status_t cuda_staged_reduce(shmddp_comm_t *comm, const cuda_call_t *k, size_t src_bytes,
                                   size_t lo, size_t hi);
shmddp_status_t cuda_staged_gather(shmddp_comm_t *comm, const cuda_call_t *k, int takers);

#endif
