/* comm.c — NCCL communicators over shmddp ones: version, ids, init (rank, config, scalable,
 * all), split, finalize/destroy/abort, async errors, queries, memory, pre-multiplied sums. */
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/devmem_cuda.h"
#include "nccl/internal.h"

_Static_assert(sizeof(ncclUniqueId) == sizeof(shmddp_unique_id_t), "ids must have one size");
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t layout (x86-64, 2.28)");

#define P2P_TAG_BASE 0x7032700000000000ULL /* tags of the pair communicators' derived ids */

ncclResult_t ncclGetVersion(int *version)
{
  if (!version) return nccl_fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = SHMDDP_NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uid)
{
  if (!uid) return nccl_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  shmddp_unique_id_t id;
  shmddp_status_t st = shmddp_get_unique_id(&id);
  if (st != SHMDDP_OK) return nccl_fail_st(NULL, st, NULL, "ncclGetUniqueId");
  memcpy(uid->internal, id.internal, sizeof uid->internal);
  return ncclSuccess;
}

/* The calling thread's CUDA device, or -1 when there is no GPU. */
static int current_device(void)
{
  int n = 0, d = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return d;
}

ncclResult_t nccl_init_now(ncclComm_t comm, int nranks, shmddp_unique_id_t id, int rank,
                           int device)
{
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return comm->init_result = nccl_fail(comm, ncclUnhandledCudaError,
                                         "cannot select GPU %d for rank %d", device, rank);
  }
  shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
  cfg.device = device >= 0 ? device : SHMDDP_DEVICE_NONE;
  shmddp_status_t st = shmddp_comm_init_rank_config(&comm->c, nranks, id, rank, &cfg);
  if (st != SHMDDP_OK) {
    comm->init_result = nccl_fail_st(comm, st, NULL, "ncclCommInitRank");
    return comm->init_result;
  }
  comm->nranks = nranks;
  comm->rank = rank;
  comm->device = device;
  comm->id = id;
  if (nccl_debug())
    fprintf(stderr, "shmddp-nccl: rank %d of %d on %s%d: this communicator is served by shmddp "
            "(P2P %s)\n", rank, nranks, device >= 0 ? "GPU " : "host", device >= 0 ? device : 0,
            device < 0 ? "n/a" : shmddp_cuda_p2p(comm->c) > 0 ? "on" : "off, host-staged");
  return comm->init_result = ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, ncclUniqueId uid, int rank,
                              ncclConfig_t *config)
{
  if (!out) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  *out = NULL;
  char err[256];
  int blocking = 1;
  ncclResult_t r = nccl_parse_config(config, &blocking, err, sizeof err);
  if (r != ncclSuccess) return nccl_fail(NULL, r, "%s", err);
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS)
    return nccl_fail(NULL, ncclInvalidArgument, "nranks %d: shmddp serves groups of 1 to %d "
                     "ranks on one machine", nranks, SHMDDP_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return nccl_fail(NULL, ncclInvalidArgument, "rank %d is not in 0..%d", rank, nranks - 1);
  ncclComm_t comm = calloc(1, sizeof *comm);
  if (!comm) return nccl_fail(NULL, ncclSystemError, "out of host memory");
  comm->blocking = blocking;
  comm->device = -1;
  comm->init_result = ncclInProgress;
  nccl_call_t call = {.kind = NCCL_OP_INIT, .comm = comm, .nranks = nranks, .rank = rank,
                      .device = current_device()};
  memcpy(call.id.internal, uid.internal, sizeof call.id.internal);
  r = nccl_submit(&call);
  if (r != ncclSuccess && r != ncclInProgress) {
    free(comm);
    return r;
  }
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
  return init_rank(comm, nranks, commId, rank, NULL);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config)
{
  return init_rank(comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config)
{
  if (nId < 1 || !commIds)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitRankScalable: no ids given");
  return init_rank(comm, nranks, commIds[0], rank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
  if (!comms || ndev < 1 || ndev > SHMDDP_MAX_RANKS)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: %d devices (1 to %d)", ndev,
                     SHMDDP_MAX_RANKS);
  ncclUniqueId uid;
  ncclResult_t r = ncclGetUniqueId(&uid);
  if (r != ncclSuccess) return r;
  int saved = current_device();
  ncclGroupStart();
  for (int i = 0; i < ndev; i++) {
    if (cudaSetDevice(devlist ? devlist[i] : i) != cudaSuccess) {
      (void)cudaGetLastError();
      r = nccl_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: device %d does not exist",
                    devlist ? devlist[i] : i);
      break;
    }
    r = ncclCommInitRank(&comms[i], ndev, uid, i);
    if (r != ncclSuccess) break;
  }
  ncclResult_t r2 = ncclGroupEnd();
  if (saved >= 0) cudaSetDevice(saved);
  return r != ncclSuccess ? r : r2;
}

ncclResult_t nccl_comm_usable(ncclComm_t comm, const char *fn)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (atomic_load(&comm->aborted))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", fn);
  if (comm->init_result == ncclInProgress)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init has not run (call "
                     "ncclGroupEnd first)", fn);
  if (comm->init_result != ncclSuccess || !comm->c)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init failed", fn);
  return ncclSuccess;
}

ncclResult_t nccl_p2p_comm(ncclComm_t comm, int peer, shmddp_comm_t **out)
{
  if (peer < 0 || peer >= comm->nranks || peer == comm->rank)
    return nccl_fail(comm, ncclInvalidArgument, "peer %d is not another rank (0..%d, not %d)",
                     peer, comm->nranks - 1, comm->rank);
  if (!comm->p2p[peer]) {
    int lo = comm->rank < peer ? comm->rank : peer, hi = comm->rank ^ peer ^ lo;
    shmddp_unique_id_t id;
    shmddp_status_t st = shmddp_unique_id_derive(&comm->id, P2P_TAG_BASE | (uint64_t)lo << 8 | (uint64_t)hi, &id);
    shmddp_comm_config_t cfg = SHMDDP_COMM_CONFIG_INIT;
    cfg.device = comm->device >= 0 ? comm->device : SHMDDP_DEVICE_NONE;
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

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
  ncclResult_t r = nccl_comm_usable(comm, "ncclCommSplit");
  if (r != ncclSuccess) return r;
  if (!newcomm) return nccl_fail(comm, ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  *newcomm = NULL;
  if (color < SHMDDP_NCCL_SPLIT_NOCOLOR)
    return nccl_fail(comm, ncclInvalidArgument, "ncclCommSplit: color %d (use >= 0, or "
                     "NCCL_SPLIT_NOCOLOR)", color);
  char err[256];
  int blocking = 1;
  r = nccl_parse_config(config, &blocking, err, sizeof err);
  if (r != ncclSuccess) return nccl_fail(comm, r, "%s", err);
  int n = comm->nranks;
  split_entry_t mine = {color, key}, all[SHMDDP_MAX_RANKS];
  shmddp_unique_id_t cand, ids[SHMDDP_MAX_RANKS];
  shmddp_status_t st = shmddp_get_unique_id(&cand);
  /* Host buffers: every rank learns every rank's (color, key) and candidate id. */
  if (st == SHMDDP_OK)
    st = shmddp_all_gather(comm->c, &mine, all, 2, SHMDDP_I32, SHMDDP_HOST);
  if (st == SHMDDP_OK)
    st = shmddp_all_gather(comm->c, &cand, ids, sizeof cand, SHMDDP_U8, SHMDDP_HOST);
  if (st != SHMDDP_OK) return nccl_fail_st(comm, st, comm->c, "ncclCommSplit");
  if (color == SHMDDP_NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  /* Members: my color, ordered by (key, rank); the first one's id names the new group. */
  int members[SHMDDP_MAX_RANKS], m = 0;
  for (int rk = 0; rk < n; rk++)
    if (all[rk].color == color) members[m++] = rk;
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && all[members[j]].key < all[members[j - 1]].key; j--) {
      int t = members[j];
      members[j] = members[j - 1];
      members[j - 1] = t;
    }
  int newrank = 0;
  for (int i = 0; i < m; i++)
    if (members[i] == comm->rank) newrank = i;
  ncclComm_t nc = calloc(1, sizeof *nc);
  if (!nc) return nccl_fail(comm, ncclSystemError, "ncclCommSplit: out of host memory");
  nc->blocking = blocking;
  r = nccl_init_now(nc, m, ids[members[0]], newrank, comm->device);
  if (r != ncclSuccess) {
    snprintf(comm->last_error, sizeof comm->last_error, "%s", nc->last_error);
    free(nc);
    return r;
  }
  *newcomm = nc;
  return ncclSuccess;
}

static void free_comm(ncclComm_t comm)
{
  for (int p = 0; p < SHMDDP_MAX_RANKS; p++)
    if (comm->p2p[p]) shmddp_comm_destroy(comm->p2p[p]);
  if (comm->c) shmddp_comm_destroy(comm->c);
  free(comm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  /* Calls are complete when their stream is: nothing of shmddp's own is left to flush. */
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
  if (!comm) return ncclSuccess;
  free_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
  if (!comm) return ncclSuccess;
  atomic_store(&comm->aborted, 1);
  if (comm->c) shmddp_comm_abort(comm->c);
  for (int p = 0; p < SHMDDP_MAX_RANKS; p++)
    if (comm->p2p[p]) shmddp_comm_abort(comm->p2p[p]);
  /* A call blocked on another thread sees the abort within a wait's sleep bound and leaves. */
  while (atomic_load(&comm->inflight) > 0) sched_yield();
  free_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
  if (!comm || !asyncError)
    return nccl_fail(comm, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  if (comm->init_result != ncclSuccess) {
    *asyncError = comm->init_result;
    return ncclSuccess;
  }
  shmddp_status_t st = shmddp_cuda_check(comm->c);
  for (int p = 0; p < SHMDDP_MAX_RANKS && st == SHMDDP_OK; p++)
    if (comm->p2p[p]) st = shmddp_cuda_check(comm->p2p[p]);
  if (st != SHMDDP_OK) nccl_fail_st(comm, st, comm->c, "asynchronous error");
  *asyncError = nccl_result(st);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
  if (!comm || !count) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommCount: NULL argument");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
  if (!comm || !device)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
  if (!comm || !rank) return nccl_fail(NULL, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
  *rank = comm->rank;
  return ncclSuccess;
}

/* Memory the peers map without a copy: collectives/devmem_cuda.c. */
ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
  if (!ptr) return nccl_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  char err[256];
  if (devmem_cuda_alloc(ptr, size, err, sizeof err) != 0)
    return nccl_fail(NULL, ncclUnhandledCudaError, "ncclMemAlloc(%zu): %s", size, err);
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr)
{
  char err[256];
  if (devmem_cuda_free(ptr, err, sizeof err) != 0)
    return nccl_fail(NULL, ncclInvalidArgument, "ncclMemFree: %s", err);
  return ncclSuccess;
}

/* Registered on the main communicator; the pairs of send/recv share buffers on first use. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle)
{
  ncclResult_t r = nccl_comm_usable(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  if (!handle || !buff)
    return nccl_fail(comm, ncclInvalidArgument, "ncclCommRegister: %s is NULL",
                     handle ? "buff" : "handle");
  *handle = NULL;
  if (comm->device < 0) return ncclSuccess; /* host-only communicator: nothing to share */
  shmddp_status_t st = shmddp_cuda_register(comm->c, buff, size, handle);
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, comm->c, "ncclCommRegister");
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
  ncclResult_t r = nccl_comm_usable(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  if (comm->device < 0 || !handle) return ncclSuccess;
  shmddp_status_t st = shmddp_cuda_deregister(comm->c, handle);
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, comm->c, "ncclCommDeregister");
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm)
{
  ncclResult_t r = nccl_comm_usable(comm, "ncclRedOpCreatePreMulSum");
  if (r != ncclSuccess) return r;
  shmddp_dtype_t dt;
  if (!op || !scalar)
    return nccl_fail(comm, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: NULL argument");
  if (nccl_dtype(comm, datatype, &dt) != 0) return ncclInvalidArgument;
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return nccl_fail(comm, ncclInvalidArgument, "unknown scalar residence %d", (int)residence);
  for (int i = 0; i < NCCL_MAX_PREMUL; i++) {
    nccl_premul_t *p = &comm->premul[i];
    if (p->in_use) continue;
    memset(p, 0, sizeof *p);
    p->in_use = 1;
    p->dtype = dt;
    p->on_device = residence == ncclScalarDevice && comm->device >= 0;
    if (p->on_device) p->dev_scalar = scalar;
    else memcpy(p->host_scalar, scalar, shmddp_dtype_size(dt));
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
  }
  return nccl_fail(comm, ncclInvalidUsage, "more than %d pre-multiplied sums at once: destroy "
                   "some with ncclRedOpDestroy", NCCL_MAX_PREMUL);
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
  int i = (int)op - ncclNumOps;
  if (!comm || i < 0 || i >= NCCL_MAX_PREMUL || !comm->premul[i].in_use)
    return nccl_fail(comm, ncclInvalidArgument, "ncclRedOpDestroy: %d is not an op made by "
                     "ncclRedOpCreatePreMulSum on this communicator", (int)op);
  comm->premul[i].in_use = 0;
  return ncclSuccess;
}
