/* check.c — every argument of a call checked once, by the call that received it. A refused
 * argument is named in the message (ncclGetLastError) and returned by that call, before
 * anything is queued or any peer waits.
 *
 * Nothing below checks them again. The executor runs a call through shmddp's unchecked entries
 * (collectives/api.h), not the public shmddp_* calls: those check the same arguments for the
 * library's own users, but here they would check them a second time, and too late — inside a
 * group only at ncclGroupEnd instead of in the call that received them, and after the group's
 * other calls may have committed the peers (a failure there aborts the whole group) — and in
 * shmddp's words instead of the NCCL call's. What those entries trust holds by what is checked
 * here (dtype, op, count, buffers, root) and by construction (a stream is given only to a
 * communicator with a device transport: dev.c; send/recv's pair ranks are 0 and 1: xlate.c).
 *
 * The communicator's state (aborted, revoked, suspended, its init) is checked here as an
 * argument, and looked at again when a call runs (exec.c): not a second check of the argument
 * but the state at that time, which ncclCommAbort on another thread may have changed since. */
#include "config.h"

#include "collectives/api.h"
#include "nccl/internal.h"

ncclResult_t nccl_check_comm(ncclComm_t comm, const char *fn)
{
  if (!comm) return nccl_fail(NULL, ncclInvalidArgument, "%s: argument comm is NULL", fn);
  if (atomic_load(&comm->aborted))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was aborted", fn);
  if (atomic_load(&comm->revoked))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator was revoked "
                     "(ncclCommRevoke, or ncclCommShrink with NCCL_SHRINK_ABORT): destroy it",
                     fn);
  if (atomic_load(&comm->suspended))
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator is suspended "
                     "(ncclCommSuspend): call ncclCommResume first", fn);
  if (comm->init_result == ncclInProgress && !nccl_in_group())
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init has not run (call "
                     "ncclGroupEnd first)", fn);
  if (comm->init_result != ncclSuccess && comm->init_result != ncclInProgress)
    return nccl_fail(comm, ncclInvalidUsage, "%s: the communicator's init failed", fn);
  return ncclSuccess;
}

/* Which ranks use a buffer of a call. */
typedef enum { USED_NOWHERE, USED_EVERYWHERE, USED_AT_ROOT } used_t;

/* The arguments of one kind of call, in NCCL's names. */
typedef struct {
  const char *count; /* the count argument */
  int per_rank;      /* the larger buffer holds count elements per rank */
  int reduces;       /* takes an op */
  const char *root;  /* "root", "peer", or NULL */
  used_t send, recv;
} call_args_t;

static const call_args_t args_of[] = {
  [NCCL_CALL_ALL_REDUCE] = {.count = "count", .reduces = 1, .send = USED_EVERYWHERE,
                            .recv = USED_EVERYWHERE},
  [NCCL_CALL_BROADCAST] = {.count = "count", .root = "root", .send = USED_AT_ROOT,
                           .recv = USED_EVERYWHERE},
  [NCCL_CALL_REDUCE] = {.count = "count", .reduces = 1, .root = "root", .send = USED_EVERYWHERE,
                        .recv = USED_AT_ROOT},
  [NCCL_CALL_ALL_GATHER] = {.count = "sendcount", .per_rank = 1, .send = USED_EVERYWHERE,
                            .recv = USED_EVERYWHERE},
  [NCCL_CALL_REDUCE_SCATTER] = {.count = "recvcount", .per_rank = 1, .reduces = 1,
                                .send = USED_EVERYWHERE, .recv = USED_EVERYWHERE},
  [NCCL_CALL_ALL_TO_ALL] = {.count = "count", .per_rank = 1, .send = USED_EVERYWHERE,
                            .recv = USED_EVERYWHERE},
  [NCCL_CALL_GATHER] = {.count = "count", .per_rank = 1, .root = "root",
                        .send = USED_EVERYWHERE, .recv = USED_AT_ROOT},
  [NCCL_CALL_SCATTER] = {.count = "count", .per_rank = 1, .root = "root",
                         .send = USED_AT_ROOT, .recv = USED_EVERYWHERE},
  [NCCL_CALL_SEND] = {.count = "count", .root = "peer", .send = USED_EVERYWHERE},
  [NCCL_CALL_RECV] = {.count = "count", .root = "peer", .recv = USED_EVERYWHERE},
};

/* A buffer argument: NULL only with count 0. */
static ncclResult_t check_buf(const nccl_call_t *k, const char *arg, const void *p)
{
  if (k->count > 0 && !p)
    return nccl_fail(k->comm, ncclInvalidArgument, "%s: argument %s is NULL (count %zu)", k->fn,
                     arg, k->count);
  return ncclSuccess;
}

/* The buffers this rank uses `where`. */
static ncclResult_t check_bufs(const nccl_call_t *k, const call_args_t *a, used_t where)
{
  ncclResult_t r = ncclSuccess;
  if (a->send == where) r = check_buf(k, "sendbuff", k->send);
  if (r == ncclSuccess && a->recv == where) r = check_buf(k, "recvbuff", k->recv);
  return r;
}

/* The count: within the sizes shmddp computes with (per rank for the calls with a block per
 * rank, whose larger buffer is nranks times as large). */
static ncclResult_t check_count(const nccl_call_t *k, const call_args_t *a)
{
  size_t blocks = a->per_rank ? (size_t)k->comm->nranks : 1;
  if (coll_count_fits(k->count, k->dtype, blocks)) return ncclSuccess;
  return nccl_fail(k->comm, ncclInvalidArgument, "%s: argument %s is %zu: that many %s elements%s "
                   "overflow the addressable size", k->fn, a->count, k->count,
                   shmddp_dtype_name(k->dtype), a->per_rank ? " per rank" : "");
}

/* A root or peer: a rank of the communicator; a send or receive with oneself only in a group
 * (its match is then in the same group, and the pair is a copy). */
static ncclResult_t check_root(const nccl_call_t *k, const call_args_t *a)
{
  if (k->root < 0 || k->root >= k->comm->nranks)
    return nccl_fail(k->comm, ncclInvalidArgument, "%s: argument %s is %d, not a rank of this "
                     "communicator (0..%d)", k->fn, a->root, k->root, k->comm->nranks - 1);
  int p2p = k->kind == NCCL_CALL_SEND || k->kind == NCCL_CALL_RECV;
  if (p2p && k->root == k->comm->rank && !nccl_in_group())
    return nccl_fail(k->comm, ncclInvalidUsage, "%s: peer %d is the calling rank: a send to "
                     "oneself and its receive must be in one group (ncclGroupStart/End)", k->fn,
                     k->root);
  return ncclSuccess;
}

ncclResult_t nccl_check_call(nccl_call_t *k, ncclDataType_t datatype, ncclRedOp_t op)
{
  const call_args_t *a = &args_of[k->kind];
  ncclResult_t r = nccl_check_comm(k->comm, k->fn);
  if (r != ncclSuccess) return r;
  if (nccl_dtype(k->comm, k->fn, datatype, &k->dtype) != 0) return ncclInvalidArgument;
  if (a->reduces && nccl_op(k->comm, k->fn, op, k->dtype, &k->op, &k->premul) != 0)
    return ncclInvalidArgument;
  r = check_count(k, a);
  if (r == ncclSuccess) r = check_bufs(k, a, USED_EVERYWHERE);
  if (r == ncclSuccess && a->root) r = check_root(k, a);
  if (r == ncclSuccess && a->root && k->root == k->comm->rank) r = check_bufs(k, a, USED_AT_ROOT);
  return r;
}
