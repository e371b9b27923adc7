/* api_comm.c — NCCL's communicator calls: version, ids, init (rank, config, scalable, all),
 * split, shrink, grow, finalize / destroy / abort / revoke, async errors, queries, pre-multiplied sums, debug.
 * Each checks its arguments here; init goes through the queue (it may be grouped), the others
 * call the layer below directly. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(shmddp_unique_id_t), "ids must have one size");
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t layout (x86-64, 2.28)");

ncclResult_t ncclGetVersion(int *version)
{
  if (!version) return nccl_fail(NULL, ncclInvalidArgument, "ncclGetVersion: argument version is NULL");
  *version = SHMDDP_NCCL_VERSION_CODE;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion)

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid)
{
  if (!uid) return nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: argument uniqueId is NULL");
  shmddp_unique_id_t id;
  shmddp_status_t st = shmddp_get_unique_id(&id);
  if (st != SHMDDP_OK) return nccl_fail_st(NULL, st, NULL, "ncclGetUniqueId");
  memcpy(uid->internal, id.internal, sizeof uid->internal);
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetUniqueId)

void ncclResetDebugInit(void) { nccl_debug_reset(); }
NCCL_ALIAS(ncclResetDebugInit)

static ncclResult_t init_rank(const char *fn, ncclComm_t *out, int nranks, ncclUniqueId uid,
                              int rank, ncclConfig_t *config)
{
  if (!out) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  *out = NULL;
  char err[256];
  nccl_config_t cfg;
  ncclResult_t r = nccl_parse_config(config, &cfg, err, sizeof err);
  if (r != ncclSuccess) return nccl_fail(NULL, r, "%s: argument config: %s", fn, err);
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS)
    return nccl_fail(NULL, ncclInvalidArgument, "%s: argument nranks is %d: shmddp serves "
                     "groups of 1 to %d ranks on one machine", fn, nranks, SHMDDP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return nccl_fail(NULL, ncclInvalidArgument, "%s: argument rank is %d, not in 0..%d", fn, rank,
                     nranks - 1);
  ncclComm_t comm = nccl_comm_new(&cfg);
  if (!comm) return nccl_fail(NULL, ncclSystemError, "%s: out of host memory", fn);
  comm->nranks = nranks; /* known now, for the checks of calls grouped with this init */
  comm->rank = rank;
  nccl_call_t call = {.kind = NCCL_CALL_INIT, .fn = fn, .comm = comm, .nranks = nranks,
                      .rank = rank, .device = nccl_dev_current()};
  memcpy(call.id.internal, uid.internal, sizeof call.id.internal);
  r = nccl_enqueue(&call);
  if (r != ncclSuccess) {
    nccl_comm_free(comm);
    return r;
  }
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
  return init_rank("ncclCommInitRank", comm, nranks, commId, rank, NULL);
}
NCCL_ALIAS(ncclCommInitRank)

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
  return init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}
NCCL_ALIAS(ncclCommInitRankConfig)

/* nId ids, all equal here (one machine needs one): the first is used. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config)
{
  const char *fn = "ncclCommInitRankScalable";
  if (nId < 1 || !commIds)
    return nccl_fail(NULL, ncclInvalidArgument, "%s: arguments nId (%d) and commIds: no ids "
                     "given", fn, nId);
  return init_rank(fn, comm, nranks, commIds[0], rank, config);
}
NCCL_ALIAS(ncclCommInitRankScalable)

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
  if (!comms || ndev < 1 || ndev > SHMDDP_MAX_RANKS)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: arguments comms / ndev (%d): "
                     "1 to %d communicators", ndev, SHMDDP_MAX_RANKS);
  ncclUniqueId uid;
  ncclResult_t r = ncclGetUniqueId(&uid);
  if (r != ncclSuccess) return r;
  int saved = nccl_dev_current();
  ncclGroupStart();
  for (int i = 0; i < ndev && r == ncclSuccess; i++) {
    int dev = devlist ? devlist[i] : i;
    if (nccl_dev_select(dev) != 0)
      r = nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: argument devlist[%d] is %d, "
                    "not a GPU of this machine", i, dev);
    else
      r = ncclCommInitRank(&comms[i], ndev, uid, i);
  }
  ncclResult_t r2 = ncclGroupEnd();
  if (saved >= 0) nccl_dev_select(saved);
  return r != ncclSuccess ? r : r2;
}
NCCL_ALIAS(ncclCommInitAll)

/* The config of a communicator made from comm: the client's, or comm's own when it passes none. */
static ncclResult_t child_config(ncclComm_t comm, const char *fn, const ncclConfig_t *config,
                                 nccl_config_t *cfg)
{
  char err[256];
  ncclResult_t r = nccl_parse_config(config, cfg, err, sizeof err);
  if (r != ncclSuccess) return nccl_fail(comm, r, "%s: argument config: %s", fn, err);
  if (!config) {
    cfg->blocking = comm->blocking;
    cfg->split_share = comm->split_share;
    snprintf(cfg->name, sizeof cfg->name, "%s", comm->name);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
  const char *fn = "ncclCommSplit";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (!newcomm) return nccl_fail(comm, ncclInvalidArgument, "%s: argument newcomm is NULL", fn);
  *newcomm = NULL;
  if (color < SHMDDP_NCCL_SPLIT_NOCOLOR)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument color is %d (use >= 0, or "
                     "NCCL_SPLIT_NOCOLOR)", fn, color);
  nccl_config_t cfg;
  r = child_config(comm, fn, config, &cfg);
  if (r != ncclSuccess) return r;
  atomic_fetch_add(&comm->inflight, 1);
  r = nccl_split(comm, color, key, &cfg, newcomm);
  atomic_fetch_sub(&comm->inflight, 1);
  return r;
}
NCCL_ALIAS(ncclCommSplit)

/* The excluded ranks as a set (bit r: rank r), or an error naming the bad entry. */
static ncclResult_t excluded_set(ncclComm_t comm, const char *fn, const int *list, int count,
                                 uint32_t *set)
{
  *set = 0;
  if (count < 0 || count >= comm->nranks)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument excludeRanksCount is %d: exclude "
                     "0 to %d of the %d ranks (at least one must remain)", fn, count,
                     comm->nranks - 1, comm->nranks);
  if (count > 0 && !list)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument excludeRanksList is NULL "
                     "(excludeRanksCount %d)", fn, count);
  for (int i = 0; i < count; i++) {
    int r = list[i];
    if (r < 0 || r >= comm->nranks)
      return nccl_fail(comm, ncclInvalidArgument, "%s: argument excludeRanksList[%d] is %d, not "
                       "a rank of this communicator (0..%d)", fn, i, r, comm->nranks - 1);
    if (r == comm->rank)
      return nccl_fail(comm, ncclInvalidArgument, "%s: argument excludeRanksList[%d] is the "
                       "calling rank %d: only the ranks that remain call ncclCommShrink", fn, i, r);
    if (*set & 1u << r)
      return nccl_fail(comm, ncclInvalidArgument, "%s: argument excludeRanksList[%d] repeats "
                       "rank %d", fn, i, r);
    *set |= 1u << r;
  }
  return ncclSuccess;
}

/* Called by the ranks that remain. A revoked or failed parent may be shrunk (that is what
 * shrinking is for), so only its existence and init are checked. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
  const char *fn = "ncclCommShrink";
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  if (comm->init_result != ncclSuccess)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init %s", fn,
                     comm->init_result == ncclInProgress ? "has not run (call ncclGroupEnd "
                     "first)" : "failed");
  if (atomic_load(&comm->aborted))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", fn);
  if (!newcomm) return nccl_fail(comm, ncclInvalidArgument, "%s: argument newcomm is NULL", fn);
  *newcomm = NULL;
  if (shrinkFlags != SHMDDP_NCCL_SHRINK_DEFAULT && shrinkFlags != SHMDDP_NCCL_SHRINK_ABORT)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument shrinkFlags is %#x: use "
                     "NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)", fn, (unsigned)shrinkFlags);
  uint32_t set;
  ncclResult_t r = excluded_set(comm, fn, excludeRanksList, excludeRanksCount, &set);
  nccl_config_t cfg;
  if (r == ncclSuccess) r = child_config(comm, fn, config, &cfg);
  if (r != ncclSuccess) return r;
  int abort_first = shrinkFlags == SHMDDP_NCCL_SHRINK_ABORT;
  if (abort_first) return nccl_shrink(comm, set, 1, &cfg, newcomm); /* waits for inflight */
  atomic_fetch_add(&comm->inflight, 1);
  r = nccl_shrink(comm, set, 0, &cfg, newcomm);
  atomic_fetch_sub(&comm->inflight, 1);
  return r;
}
NCCL_ALIAS(ncclCommShrink)

/* An id for growing comm (NCCL 2.29): one at a time, each used by one ncclCommGrow. */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId)
{
  const char *fn = "ncclCommGetUniqueId";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (!uniqueId) return nccl_fail(comm, ncclInvalidArgument, "%s: argument uniqueId is NULL", fn);
  if (comm->grow_pending)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the id made before has not grown the "
                     "communicator yet: call ncclCommGrow with it first", fn);
  shmddp_status_t st = shmddp_get_unique_id(&comm->grow_id);
  if (st != SHMDDP_OK) return nccl_fail_st(comm, st, NULL, fn);
  memcpy(uniqueId->internal, comm->grow_id.internal, sizeof uniqueId->internal);
  comm->grow_pending = 1;
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetUniqueId)

/* A rank joining by the id: a communicator of nRanks in which it is rank. */
static ncclResult_t grow_new_rank(int nRanks, const ncclUniqueId *uniqueId, int rank,
                                  ncclComm_t *newcomm, ncclConfig_t *config)
{
  const char *fn = "ncclCommGrow";
  if (!uniqueId)
    return nccl_fail(NULL, ncclInvalidArgument, "%s: argument uniqueId is NULL: a new rank "
                     "(comm NULL) joins by the id the communicator's ncclCommGetUniqueId made", fn);
  if (rank < 0 || rank >= nRanks)
    return nccl_fail(NULL, ncclInvalidArgument, "%s: argument rank is %d, not in 0..%d", fn,
                     rank, nRanks - 1);
  char err[256];
  nccl_config_t cfg;
  ncclResult_t r = nccl_parse_config(config, &cfg, err, sizeof err);
  if (r != ncclSuccess) return nccl_fail(NULL, r, "%s: argument config: %s", fn, err);
  ncclComm_t nc = nccl_comm_new(&cfg);
  if (!nc) return nccl_fail(NULL, ncclSystemError, "%s: out of host memory", fn);
  shmddp_unique_id_t id;
  memcpy(id.internal, uniqueId->internal, sizeof id.internal);
  r = nccl_join(nc, fn, nRanks, id, rank, nccl_dev_current());
  if (r != ncclSuccess) {
    nccl_comm_free(nc);
    return r;
  }
  *newcomm = nc;
  return ncclSuccess;
}

/* NCCL 2.29. Ranks of comm: uniqueId on the one that made it, NULL on the others, rank -1 (they
 * keep theirs); new ranks: comm NULL, the id, their rank (above the existing ones). */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config)
{
  const char *fn = "ncclCommGrow";
  if (!newcomm) return nccl_fail(comm, ncclInvalidArgument, "%s: argument newcomm is NULL", fn);
  *newcomm = NULL;
  int have = comm ? comm->nranks : 0;
  if (nRanks <= (have ? have : 1) || nRanks > SHMDDP_MAX_RANKS)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument nRanks is %d: the grown "
                     "communicator has %d to %d ranks", fn, nRanks, (have ? have : 1) + 1,
                     SHMDDP_MAX_RANKS);
  if (!comm) return grow_new_rank(nRanks, uniqueId, rank, newcomm, config);
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  if (rank != -1)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument rank is %d: ranks of comm pass "
                     "-1 (they keep their rank)", fn, rank);
  if (uniqueId && (!comm->grow_pending ||
                   memcmp(uniqueId->internal, comm->grow_id.internal, sizeof uniqueId->internal)))
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument uniqueId is not the id this "
                     "communicator's ncclCommGetUniqueId made (or it was used already)", fn);
  nccl_config_t cfg;
  r = child_config(comm, fn, config, &cfg);
  if (r != ncclSuccess) return r;
  shmddp_unique_id_t id;
  if (uniqueId) memcpy(id.internal, uniqueId->internal, sizeof id.internal);
  atomic_fetch_add(&comm->inflight, 1);
  r = nccl_grow(comm, nRanks, uniqueId ? &id : NULL, &cfg, newcomm);
  atomic_fetch_sub(&comm->inflight, 1);
  return r;
}
NCCL_ALIAS(ncclCommGrow)

/* Every call of this front end has been handed to its stream or completed when it returned:
 * finalizing waits for the streams this communicator's calls were enqueued on, then reports
 * what failed there. */
ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommFinalize: argument comm is NULL");
  if (comm->init_result != ncclSuccess) return ncclSuccess;
  return nccl_comm_drain(comm, "ncclCommFinalize");
}
NCCL_ALIAS(ncclCommFinalize)

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
  if (!comm) return ncclSuccess;
  nccl_comm_free(comm);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommDestroy)

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
  if (!comm) return ncclSuccess;
  nccl_comm_abort_free(comm);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommAbort)

/* Stops the calls in flight (on every rank: abort is group-wide here) and refuses new ones;
 * the communicator stays allocated until ncclCommDestroy. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
  const char *fn = "ncclCommRevoke";
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  if (revokeFlags != 0)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument revokeFlags is %#x: only "
                     "NCCL_REVOKE_DEFAULT (0) is defined", fn, (unsigned)revokeFlags);
  nccl_revoke(comm, "the communicator was revoked (ncclCommRevoke)");
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommRevoke)

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
  if (!comm || !asyncError)
    return nccl_fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: argument %s is NULL",
                     comm ? "asyncError" : "comm");
  if (comm->init_result != ncclSuccess) {
    *asyncError = comm->init_result;
    return ncclSuccess;
  }
  char why[512];
  shmddp_status_t st = shmddp_comm_check(comm->c, why, sizeof why);
  for (int p = 0; p < SHMDDP_MAX_RANKS && st == SHMDDP_OK; p++)
    if (comm->p2p[p]) st = shmddp_comm_check(comm->p2p[p], why, sizeof why);
  if (st == SHMDDP_OK) st = nccl_dev_check(comm->c);
  if (st != SHMDDP_OK)
    nccl_log(comm, 1, "asynchronous error: %s (%s)", why[0] ? why : shmddp_comm_last_error(comm->c),
             shmddp_strerror(st));
  *asyncError = nccl_result(st);
  return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError)

static ncclResult_t query(const char *fn, ncclComm_t comm, int *out, int value)
{
  if (!comm || !out)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn,
                     comm ? "the result pointer" : "comm");
  *out = value;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
  return query("ncclCommCount", comm, count, comm ? comm->nranks : 0);
}
NCCL_ALIAS(ncclCommCount)

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
  return query("ncclCommCuDevice", comm, device, comm ? comm->device : -1);
}
NCCL_ALIAS(ncclCommCuDevice)

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
  return query("ncclCommUserRank", comm, rank, comm ? comm->rank : -1);
}
NCCL_ALIAS(ncclCommUserRank)

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm)
{
  const char *fn = "ncclRedOpCreatePreMulSum";
  ncclResult_t r = nccl_check_comm(comm, fn);
  if (r != ncclSuccess) return r;
  shmddp_dtype_t dt;
  if (!op || !scalar)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn, op ? "scalar" : "op");
  if (nccl_dtype(comm, fn, datatype, &dt) != 0) return ncclInvalidArgument;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument residence is %d (use "
                     "ncclScalarDevice or ncclScalarHostImmediate)", fn, (int)residence);
  for (int i = 0; i < NCCL_MAX_PREMUL; i++) {
    nccl_premul_t *p = &comm->premul[i];
    if (p->in_use) continue;
    memset(p, 0, sizeof *p);
    p->in_use = 1;
    p->dtype = dt;
    p->scalar.set = 1;
    /* A device scalar is read when each call runs, in its stream's order; on a host-only
     * communicator it is host memory, read when the call runs. */
    p->scalar.on_device = residence == ncclScalarDevice;
    if (p->scalar.on_device) p->scalar.dev = scalar;
    else memcpy(p->scalar.host, scalar, shmddp_dtype_size(dt));
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
  }
  return nccl_fail(comm, ncclInvalidUsage, "%s: more than %d pre-multiplied sums at once: "
                   "destroy some with ncclRedOpDestroy", fn, NCCL_MAX_PREMUL);
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum)

/* The calls already queued keep their copy of the scalar: destroying the op, even inside a
 * group before ncclGroupEnd, changes nothing for them. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
  int i = (int)op - ncclNumOps;
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "ncclRedOpDestroy: argument comm is NULL");
  if (i < 0 || i >= NCCL_MAX_PREMUL || !comm->premul[i].in_use)
    return nccl_fail(comm, ncclInvalidArgument, "ncclRedOpDestroy: argument op is %d, not an op "
                     "made by ncclRedOpCreatePreMulSum on this communicator", (int)op);
  comm->premul[i].in_use = 0;
  return ncclSuccess;
}
NCCL_ALIAS(ncclRedOpDestroy)
