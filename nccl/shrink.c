/* shrink.c — ncclCommShrink: the communicator of the ranks that remain when some are excluded.
 *
 * Only the remaining ranks call it; the excluded ones may be busy elsewhere or dead. So the
 * survivors cannot meet over the parent (a collective there needs every rank); they meet by an
 * id each computes alone: derived, keyed by the parent's secret, from the set of excluded ranks
 * and how many shrinks with that set this parent has made. Every survivor of a set takes part
 * in every shrink with that set, so the count agrees among them, and a second shrink with the
 * same set meets in a group of its own. New ranks keep the survivors' order.
 *
 * With NCCL_SHRINK_ABORT the parent's work is ended first: our abort is group-wide, so the
 * parent is revoked on every rank (calls in flight anywhere end, later calls are refused), and
 * its calls in flight on this rank's threads have returned before the survivors meet. That is
 * the way out after a peer died: the parent is unusable, the derived id is not.
 *
 * The new group is not tied to the parent's failure (a join watching the parent would give up
 * when an excluded rank exits, which is the normal case): like NCCL, the survivors wait for
 * each other as long as they live, unless SHMDDP_TIMEOUT sets a limit. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

/* Tag of a shrink's derived id: "shrk" above the count (16 bits) and the excluded set (8). */
#define SHRINK_TAG_BASE 0x7368726b00000000ULL
_Static_assert(SHMDDP_MAX_RANKS <= 8, "the excluded set must fit the tag's low byte");

shmddp_status_t nccl_shrink_id(const shmddp_unique_id_t *parent, uint32_t excluded,
                               unsigned count, shmddp_unique_id_t *out)
{
  uint64_t tag = SHRINK_TAG_BASE | (uint64_t)(count & 0xffffu) << 8 | (excluded & 0xffu);
  return shmddp_unique_id_derive(parent, tag, out);
}

ncclResult_t nccl_shrink(ncclComm_t comm, uint32_t excluded, int abort_first,
                         const nccl_config_t *cfg, ncclComm_t *out)
{
  const char *fn = "ncclCommShrink";
  if (abort_first) {
    char reason[160];
    snprintf(reason, sizeof reason, "rank %d shrank the communicator with NCCL_SHRINK_ABORT "
             "(its work was ended)", comm->rank);
    nccl_revoke(comm, reason);
  }
  int m = 0, newrank = 0;
  for (int r = 0; r < comm->nranks; r++) {
    if (excluded & 1u << r) continue;
    if (r == comm->rank) newrank = m;
    m++;
  }
  uint16_t *count = &comm->shrinks[excluded];
  if (*count == UINT16_MAX)
    return nccl_fail(comm, ncclInvalidUsage, "%s: %u shrinks excluding the same ranks from one "
                     "communicator: shrink the shrunk one instead", fn, (unsigned)*count);
  shmddp_unique_id_t id;
  shmddp_status_t st = nccl_shrink_id(&comm->id, excluded, *count, &id);
  if (st != SHMDDP_OK) return nccl_fail_st(comm, st, NULL, fn);
  (*count)++; /* counted whether or not the join works: the survivors counted it too */
  ncclComm_t nc = nccl_comm_new(cfg);
  if (!nc) return nccl_fail(comm, ncclSystemError, "%s: out of host memory", fn);
  ncclResult_t r = nccl_join(nc, fn, m, id, newrank, comm->device);
  if (r != ncclSuccess) {
    snprintf(comm->last_error, sizeof comm->last_error, "%s", nc->last_error);
    nccl_comm_free(nc);
    return r;
  }
  nccl_log(nc, 2, "shrunk from %d ranks (rank %d there)%s", comm->nranks, comm->rank,
           abort_first ? ", the parent's work aborted" : "");
  *out = nc;
  return ncclSuccess;
}
