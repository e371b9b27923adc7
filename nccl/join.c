/* join.c — NCCL communicators as shmddp ones: joining a group by its id, the two-rank
 * communicators that carry send/recv, split, abort and free, and per-communicator scratch.
 *
 * No timeout of our own: NCCL waits for its peers as long as they live, and the client's
 * watchdog decides when to give up (PyTorch: ncclCommAbort after its own timeout). So the
 * communicators made here wait without limit unless SHMDDP_TIMEOUT asks for one; a peer that
 * dies is still named within about a second (shmddp watches every peer's process). */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"
#include "shm/env.h"

#define P2P_TAG_BASE 0x7032700000000000ULL /* tags of the pair communicators' derived ids */
#define NO_TIMEOUT_S 1e9                   /* about 30 years: no limit */

static shmddp_comm_config_t join_config(int device)
{
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = device >= 0 ? device : SHMDDP_DEVICE_NONE;
  /* Set, 0 lets the library read SHMDDP_TIMEOUT (and refuse a bad value); unset, no limit. */
  double t;
  char err[256];
  cfg.timeout_s = shm_env_number("SHMDDP_TIMEOUT", &t, err, sizeof err) != 0 ? 0 : NO_TIMEOUT_S;
  return cfg;
}

ncclComm_t nccl_comm_new(const nccl_config_t *cfg)
{
  ncclComm_t comm = calloc(1, sizeof *comm);
  if (!comm) return NULL;
  comm->device = -1;
  comm->init_result = ncclInProgress;
  comm->blocking = cfg->blocking;
  comm->split_share = cfg->split_share;
  snprintf(comm->name, sizeof comm->name, "%s", cfg->name);
  return comm;
}

ncclResult_t nccl_join(ncclComm_t comm, const char *fn, int nranks, shmddp_unique_id_t id,
                       int rank, int device)
{
  comm->nranks = nranks;
  comm->rank = rank;
  if (nccl_dev_select(device) != 0)
    return comm->init_result = nccl_fail(comm, ncclUnhandledCudaError,
                                         "cannot select GPU %d for rank %d", device, rank);
  shmddp_comm_config_t cfg = join_config(device);
  shmddp_status_t st = shmddp_comm_init_rank_config(&comm->c, nranks, id, rank, &cfg);
  if (st != SHMDDP_OK) return comm->init_result = nccl_fail_st(comm, st, NULL, fn);
  comm->device = device;
  comm->id = id;
  nccl_log(comm, 2, "communicator made: served by shmddp on %s%d (%s)",
           device >= 0 ? "GPU " : "host", device >= 0 ? device : 0, nccl_dev_transport(comm->c));
  return comm->init_result = ncclSuccess;
}

ncclResult_t nccl_pair(ncclComm_t comm, int peer, shmddp_comm_t **out)
{
  if (!comm->p2p[peer]) {
    int lo = comm->rank < peer ? comm->rank : peer, hi = comm->rank ^ peer ^ lo;
    shmddp_unique_id_t id;
    shmddp_status_t st =
        shmddp_unique_id_derive(&comm->id, P2P_TAG_BASE | (uint64_t)lo << 8 | (uint64_t)hi, &id);
    shmddp_comm_config_t cfg = join_config(comm->device);
    cfg.parent = comm->c; /* a peer that will never come is stopped by the group's failure */
    if (st == SHMDDP_OK)
      st = shmddp_comm_init_rank_config(&comm->p2p[peer], 2, id, comm->rank == lo ? 0 : 1, &cfg);
    if (st != SHMDDP_OK) return nccl_fail_st(comm, st, NULL, "send/recv: joining the pair");
  }
  *out = comm->p2p[peer];
  return ncclSuccess;
}

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
