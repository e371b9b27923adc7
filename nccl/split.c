/* split.c — ncclCommSplit: the ranks of a communicator that pass the same color form a new one,
 * ordered by key (ties by their rank in the parent). Collective over the parent: every rank
 * learns every rank's (color, key) and a candidate id, and the members of a color join by the
 * id of their first member. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "nccl/internal.h"

typedef struct {
  int32_t color, key;
} split_entry_t;

/* Members of my color ordered by (key, old rank); returns how many, my new rank in *me. */
static int split_members(const split_entry_t *all, int n, int color, int self, int *members,
                         int *me)
{
  int m = 0;
  for (int rk = 0; rk < n; rk++)
    if (all[rk].color == color) members[m++] = rk;
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && all[members[j]].key < all[members[j - 1]].key; j--) {
      int t = members[j];
      members[j] = members[j - 1];
      members[j - 1] = t;
    }
  for (int i = 0; i < m; i++)
    if (members[i] == self) *me = i;
  return m;
}

ncclResult_t nccl_split(ncclComm_t comm, int color, int key, const nccl_config_t *cfg,
                        ncclComm_t *out)
{
  split_entry_t mine = {color, key}, all[SHMDDP_MAX_RANKS];
  shmddp_unique_id_t cand, ids[SHMDDP_MAX_RANKS];
  shmddp_status_t st = shmddp_get_unique_id(&cand);
  /* Host buffers: every rank learns every rank's (color, key) and candidate id. */
  if (st == SHMDDP_OK) st = shmddp_all_gather(comm->c, &mine, all, 2, SHMDDP_I32, SHMDDP_HOST);
  if (st == SHMDDP_OK)
    st = shmddp_all_gather(comm->c, &cand, ids, sizeof cand, SHMDDP_U8, SHMDDP_HOST);
  if (st != SHMDDP_OK) return nccl_fail_st(comm, st, comm->c, "ncclCommSplit");
  if (color == SHMDDP_NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  /* The first member's candidate id names the new group. */
  int members[SHMDDP_MAX_RANKS], newrank = 0;
  int m = split_members(all, comm->nranks, color, comm->rank, members, &newrank);
  ncclComm_t nc = nccl_comm_new(cfg);
  if (!nc) return nccl_fail(comm, ncclSystemError, "ncclCommSplit: out of host memory");
  ncclResult_t r = nccl_join(nc, "ncclCommSplit", m, ids[members[0]], newrank, comm->device);
  if (r != ncclSuccess) {
    snprintf(comm->last_error, sizeof comm->last_error, "%s", nc->last_error);
    free(nc);
    return r;
  }
  *out = nc;
  return ncclSuccess;
}
