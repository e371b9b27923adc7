/* cuda_check.c — the asynchronous error reporting of the CUDA transport: a kernel that gave up
 * waiting for a peer leaves a code in the error word (cuda_internal.h); the check turns it, or the
 * group's abort word, into a status with its message. Below both the set-up (cuda_init.c) and the
 * co-located path (cuda_coloc.c), which wait on the host and check when the abort word is raised. */
#include "config.h"

#include "collectives/cuda/cuda_state.h"
#include "shm/abort.h"

shmddp_status_t shmddp_cuda_check(shmddp_comm_t *comm)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  char msg[SHM_ABORT_MSG_BYTES];
  cuda_state_t *s = comm->dev_ops == &cuda_device_ops ? cuda_state(comm) : NULL;
  uint32_t code = s ? *s->err_host : 0;
  if (code == CUDA_GAVE_UP_TIMEOUT)
    shm_abort(comm->seg, SHMDDP_ERR_TIMEOUT, comm->rank,
              "timed out after %.0f s: a device collective on rank %d waited for a peer that did "
              "not arrive (raise the limit with SHMDDP_TIMEOUT if the peers are just slow)",
              s->timeout_s, comm->rank);
  shmddp_status_t st = shm_abort_status(comm->seg, msg, sizeof msg);
  if (st == SHMDDP_OK && code)
    return coll_error(comm, code == CUDA_GAVE_UP_TIMEOUT ? SHMDDP_ERR_TIMEOUT : SHMDDP_ERR_ABORTED,
                      "rank %d: a device collective gave up waiting for a peer", comm->rank);
  if (st != SHMDDP_OK)
    return coll_error(comm, st, "rank %d: the group has stopped: %s", comm->rank, msg);
  return SHMDDP_OK;
}
