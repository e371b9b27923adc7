/* cuda_algos.h — the algorithms of the device collectives, by family, as the table (cuda_ops.c)
 * calls them once a call has begun there (arguments checked, signature published, the calls with
 * nothing to move and the co-located path handled). Each takes the call as the table's entry made
 * it (cuda_call_t). C only.
 *
 * A *_direct algorithm exchanges the peers' buffers (cuda_exchange) and moves the data with the
 * direct kernel; when some rank's buffer cannot be shared it runs the call's *_staged version
 * instead, on every rank alike. A *_staged algorithm shares no user buffer: the data passes
 * through the staged host memory (no P2P needed). */
#ifndef COLL_CUDA_ALGOS_H
#define COLL_CUDA_ALGOS_H

#include "collectives/cuda/cuda_state.h"

/* ---- cuda_allreduce.c: all-reduce ---- */

/* One-shot: every rank pushes its input into every peer's slot (small messages). */
shmddp_status_t cuda_ar_oneshot(shmddp_comm_t *comm, const cuda_call_t *k);
/* Two-shot: through the scratch areas up to ts_max, on the users' buffers above (mid and large
 * messages). */
shmddp_status_t cuda_ar_twoshot(shmddp_comm_t *comm, const cuda_call_t *k);
/* Copy-engine ring over the users' buffers (large messages, SMs left to compute). */
shmddp_status_t cuda_ar_cering(shmddp_comm_t *comm, const cuda_call_t *k);
/* The scratch two-shot in pieces: no user buffer leaves its rank. */
shmddp_status_t cuda_ar_scratch(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_ar_staged(shmddp_comm_t *comm, const cuda_call_t *k);

/* ---- cuda_rs_ag.c: reduce-scatter, all-gather, broadcast, reduce ---- */

shmddp_status_t cuda_rs_direct(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_rs_staged(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_ag_direct(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_ag_staged(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_bc_direct(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_bc_staged(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_rd_direct(shmddp_comm_t *comm, const cuda_call_t *k);
shmddp_status_t cuda_rd_staged(shmddp_comm_t *comm, const cuda_call_t *k);

/* ---- cuda_moves.c: all-to-all, gather, scatter as block moves ----
 * staged: through the staged memory (the algorithm asked for it, or some rank's buffer cannot be
 * shared); otherwise the receivers' buffers are exchanged first, which may still turn the call
 * staged on every rank alike. */
shmddp_status_t cuda_a2a_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged);
shmddp_status_t cuda_gather_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged);
shmddp_status_t cuda_scatter_moves(shmddp_comm_t *comm, const cuda_call_t *k, int staged);

#endif
