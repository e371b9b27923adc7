/* comm.c — what a communicator holds after it is made, and its end: scratch memory (grown on
 * need, given back by ncclCommSuspend), draining the streams its calls went to, revoking and
 * aborting its group, freeing it. */
#include "config.h"

#include <sched.h>
#include <stdlib.h>

#include "nccl/internal.h"

void nccl_abort_group(ncclComm_t comm, const char *reason)
{
  if (comm->c) shmddp_abort(comm->c, reason);
  for (int p = 0; p < SHMDDP_MAX_RANKS; p++)
    if (comm->p2p[p]) shmddp_abort(comm->p2p[p], reason);
}

void nccl_revoke(ncclComm_t comm, const char *reason)
{
  atomic_store(&comm->revoked, 1);
  nccl_abort_group(comm, reason);
  /* A call blocked on another thread sees the abort within a wait's sleep bound and leaves. */
  while (atomic_load(&comm->inflight) > 0) sched_yield();
}

ncclResult_t nccl_scratch(ncclComm_t comm, size_t bytes, void **out)
{
  if (!comm->scratch || comm->scratch->bytes < bytes) {
    nccl_scratch_t *s = calloc(1, sizeof *s);
    if (!s) return nccl_fail(comm, ncclSystemError, "out of host memory");
    size_t want = bytes < 4096 ? 4096 : bytes;
    if (comm->scratch && want < 2 * comm->scratch->bytes) want = 2 * comm->scratch->bytes;
    ncclResult_t r = nccl_dev_alloc(comm, &s->p, want, comm->device >= 0);
    if (r != ncclSuccess) {
      free(s);
      return r;
    }
    s->bytes = want;
    s->older = comm->scratch;
    comm->scratch = s;
  }
  *out = comm->scratch->p;
  return ncclSuccess;
}

size_t nccl_scratch_bytes(ncclComm_t comm)
{
  size_t total = 0;
  for (nccl_scratch_t *s = comm->scratch; s; s = s->older) total += s->bytes;
  return total;
}

void nccl_scratch_release(ncclComm_t comm)
{
  while (comm->scratch) {
    nccl_scratch_t *s = comm->scratch;
    comm->scratch = s->older;
    nccl_dev_free(s->p, comm->device >= 0);
    free(s);
  }
}

ncclResult_t nccl_comm_drain(ncclComm_t comm, const char *fn)
{
  for (int i = 0; i < NCCL_MAX_STREAMS; i++) {
    if (i > 0 && !comm->streams[i]) break;
    ncclResult_t r = nccl_dev_sync(comm, comm->streams[i]);
    if (r != ncclSuccess) return r;
  }
  shmddp_status_t st = nccl_dev_check(comm->c);
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, comm->c, fn);
}

void nccl_comm_free(ncclComm_t comm)
{
  nccl_reg_release_all(comm); /* while the transport they are registered on is alive */
  for (int p = 0; p < SHMDDP_MAX_RANKS; p++)
    if (comm->p2p[p]) shmddp_comm_destroy(comm->p2p[p]);
  if (comm->c) shmddp_comm_destroy(comm->c);
  nccl_scratch_release(comm);
  free(comm);
}

void nccl_comm_abort_free(ncclComm_t comm)
{
  atomic_store(&comm->aborted, 1);
  if (comm->c) shmddp_comm_abort(comm->c);
  for (int p = 0; p < SHMDDP_MAX_RANKS; p++)
    if (comm->p2p[p]) shmddp_comm_abort(comm->p2p[p]);
  /* A call blocked on another thread sees the abort within a wait's sleep bound and leaves. */
  while (atomic_load(&comm->inflight) > 0) sched_yield();
  nccl_comm_free(comm);
}
