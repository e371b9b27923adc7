/* init.c — the NCCL front end's first-call initialisation, in one place: what is made the first
 * time it is needed.
 *   A communicator's record, made by the init call (ncclCommInitRank*, and ncclCommInitAll
 *     through it; split, shrink and grow make theirs here too).
 *   Its group, joined when the init call runs: at once, or at the outermost ncclGroupEnd when
 *     it was called inside a group (the executor runs it first in the communicator's lane).
 *     Split, shrink and grow join their new communicators at once.
 *   The two-rank communicator that carries send/recv with a peer, made at the first call with
 *     that peer (collective over the pair).
 * The executor (exec.c) comes here before it translates a call (xlate.c), so the translation
 * finds everything made. Grown on need rather than made once: scratch memory (comm.c) and the
 * streams a communicator's calls went to (xlate.c). The one setting read on first use for the
 * whole library, the debug level, is read where lines are printed (map.c), below every layer.
 *
 * No timeout of our own: NCCL waits for its peers as long as they live, and the client's
 * watchdog decides when to give up (PyTorch: ncclCommAbort after its own timeout). So the
 * communicators made here wait without limit unless SHMDDP_TIMEOUT asks for one; a peer that
 * dies is still named within about a second (shmddp watches every peer's process). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

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

ncclResult_t nccl_init_run(const nccl_call_t *k)
{
  return nccl_join(k->comm, k->fn, k->nranks, k->id, k->rank, k->device);
}

/* The two-rank communicator with peer, made at the first send/recv with it. */
static ncclResult_t pair(ncclComm_t comm, int peer, shmddp_comm_t **out)
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

ncclResult_t nccl_init_transport(const nccl_call_t *k, shmddp_comm_t **c)
{
  *c = k->comm->c;
  if (!*c) /* its init was queued in a group that has not ended */
    return nccl_fail(k->comm, ncclInvalidUsage, "%s: the communicator's init has not run (call "
                     "ncclGroupEnd first)", k->fn);
  if (k->kind == NCCL_CALL_SEND || k->kind == NCCL_CALL_RECV) return pair(k->comm, k->root, c);
  return ncclSuccess;
}
