/* grow.c — ncclCommGrow for the ranks a communicator already has: the grown group is joined by
 * the id ncclCommGetUniqueId made on one of them (the new ranks got it from the client, as any
 * unique id travels). Only that rank holds the id, so the existing ranks first learn it over
 * the communicator: every rank contributes whether it holds an id (and which) and the size it
 * asks for, and every rank checks the same gathered facts, so they all agree to go on or all
 * refuse with the same reason. Each keeps its rank; the new ranks take the ranks above. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

typedef struct {
  int32_t has_id, nranks;
  shmddp_unique_id_t id;
} grow_offer_t;

/* The id the existing ranks agree on, or an error every rank finds alike. */
static ncclResult_t agree(ncclComm_t comm, const grow_offer_t *all, shmddp_unique_id_t *id)
{
  int holders = 0, holder = -1;
  for (int r = 0; r < comm->nranks; r++) {
    if (all[r].nranks != all[0].nranks)
      return nccl_fail(comm, ncclInvalidArgument, "ncclCommGrow: rank %d asks for %d ranks, "
                       "rank 0 for %d: every rank passes the same nRanks", r, all[r].nranks,
                       all[0].nranks);
    if (all[r].has_id) holders++, holder = r;
  }
  if (holders != 1)
    return nccl_fail(comm, ncclInvalidArgument, "ncclCommGrow: %d ranks of the communicator "
                     "passed uniqueId: exactly one (the one whose ncclCommGetUniqueId made it) "
                     "passes it, the others NULL", holders);
  *id = all[holder].id;
  return ncclSuccess;
}

ncclResult_t nccl_grow(ncclComm_t comm, int nranks, const shmddp_unique_id_t *id,
                       const nccl_config_t *cfg, ncclComm_t *out)
{
  grow_offer_t mine, all[SHMDDP_MAX_RANKS];
  memset(&mine, 0, sizeof mine);
  mine.has_id = id != NULL;
  mine.nranks = nranks;
  if (id) mine.id = *id;
  shmddp_status_t st = shmddp_all_gather(comm->c, &mine, all, sizeof mine, SHMDDP_U8, SHMDDP_HOST);
  if (st != SHMDDP_OK) return nccl_fail_st(comm, st, comm->c, "ncclCommGrow");
  shmddp_unique_id_t gid;
  ncclResult_t r = agree(comm, all, &gid);
  if (r != ncclSuccess) return r;
  if (id) comm->grow_pending = 0; /* consumed: each id grows the communicator once */
  ncclComm_t nc = nccl_comm_new(cfg);
  if (!nc) return nccl_fail(comm, ncclSystemError, "ncclCommGrow: out of host memory");
  r = nccl_join(nc, "ncclCommGrow", nranks, gid, comm->rank, comm->device);
  if (r != ncclSuccess) {
    snprintf(comm->last_error, sizeof comm->last_error, "%s", nc->last_error);
    nccl_comm_free(nc);
    return r;
  }
  nccl_log(nc, 2, "grown from %d ranks", comm->nranks);
  *out = nc;
  return ncclSuccess;
}
