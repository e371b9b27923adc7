/* api_coll.c — NCCL's collectives and send/recv: check every argument, fill a call descriptor
 * with what the call needs (types translated, a pre-multiplied sum's scalar copied) and hand it
 * to the queue. A refused argument is returned by this call, named in ncclGetLastError. */
#include "config.h"

#include "nccl/internal.h"

/* The checks every call makes: comm, datatype, op (reducing calls), buffers. */
static ncclResult_t describe(nccl_call_t *k, ncclDataType_t datatype, int reduces, ncclRedOp_t op,
                             size_t send_count, size_t recv_count)
{
  ncclResult_t r = nccl_check_comm(k->comm, k->fn);
  if (r != ncclSuccess) return r;
  if (nccl_dtype(k->comm, k->fn, datatype, &k->dtype) != 0) return ncclInvalidArgument;
  if (reduces && nccl_op(k->comm, k->fn, op, k->dtype, &k->op, &k->premul) != 0)
    return ncclInvalidArgument;
  r = nccl_check_buf(k->comm, k->fn, "sendbuff", k->send, send_count);
  if (r == ncclSuccess) r = nccl_check_buf(k->comm, k->fn, "recvbuff", k->recv, recv_count);
  return r;
}

static ncclResult_t submit(nccl_call_t *k, ncclResult_t checked)
{
  return checked == ncclSuccess ? nccl_enqueue(k) : checked;
}

/* The checks of a rooted call: its root, and the buffer only the root uses (arg). */
static ncclResult_t rooted(const nccl_call_t *k, ncclResult_t checked, const char *arg,
                           const void *buf, size_t count)
{
  ncclResult_t r = checked;
  if (r == ncclSuccess) r = nccl_check_rank(k->comm, k->fn, "root", k->root);
  if (r == ncclSuccess && k->comm->rank == k->root) r = nccl_check_buf(k->comm, k->fn, arg, buf, count);
  return r;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_REDUCE, .fn = "ncclAllReduce", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .stream = stream};
  return submit(&k, describe(&k, datatype, 1, op, count, count));
}
NCCL_ALIAS(ncclAllReduce)

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_BROADCAST, .fn = "ncclBroadcast", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .root = root,
                   .stream = stream};
  return submit(&k, rooted(&k, describe(&k, datatype, 0, ncclSum, 0, count), "sendbuff",
                           sendbuff, count));
}
NCCL_ALIAS(ncclBroadcast)

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
NCCL_ALIAS(ncclBcast)

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_REDUCE, .fn = "ncclReduce", .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = count, .root = root, .stream = stream};
  return submit(&k, rooted(&k, describe(&k, datatype, 1, op, count, 0), "recvbuff", recvbuff,
                           count));
}
NCCL_ALIAS(ncclReduce)

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_GATHER, .fn = "ncclAllGather", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = sendcount, .stream = stream};
  return submit(&k, describe(&k, datatype, 0, ncclSum, sendcount, sendcount));
}
NCCL_ALIAS(ncclAllGather)

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_REDUCE_SCATTER, .fn = "ncclReduceScatter", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = recvcount, .stream = stream};
  return submit(&k, describe(&k, datatype, 1, op, recvcount, recvcount));
}
NCCL_ALIAS(ncclReduceScatter)

/* Block j (count elements) of this rank's sendbuff goes to block `rank` of rank j's recvbuff. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_TO_ALL, .fn = "ncclAlltoAll", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .stream = stream};
  return submit(&k, describe(&k, datatype, 0, ncclSum, count, count));
}
NCCL_ALIAS(ncclAlltoAll)

/* Root's recvbuff receives every rank's count elements, in rank order. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_GATHER, .fn = "ncclGather", .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = count, .root = root, .stream = stream};
  return submit(&k, rooted(&k, describe(&k, datatype, 0, ncclSum, count, 0), "recvbuff",
                           recvbuff, count));
}
NCCL_ALIAS(ncclGather)

/* Rank i receives block i (count elements) of root's sendbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_SCATTER, .fn = "ncclScatter", .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = count, .root = root, .stream = stream};
  return submit(&k, rooted(&k, describe(&k, datatype, 0, ncclSum, 0, count), "sendbuff",
                           sendbuff, count));
}
NCCL_ALIAS(ncclScatter)

/* Send and recv: a peer of the communicator; oneself only inside a group (the matching call
 * is then in the same group, and the pair is a copy). */
static ncclResult_t p2p(nccl_call_t *k, ncclDataType_t datatype)
{
  int sending = k->kind == NCCL_CALL_SEND;
  ncclResult_t r = describe(k, datatype, 0, ncclSum, sending ? k->count : 0,
                            sending ? 0 : k->count);
  if (r == ncclSuccess) r = nccl_check_rank(k->comm, k->fn, "peer", k->root);
  if (r == ncclSuccess && k->root == k->comm->rank && !nccl_in_group())
    r = nccl_fail(k->comm, ncclInvalidUsage, "%s: peer %d is the calling rank: a send to "
                  "oneself and its receive must be in one group (ncclGroupStart/End)", k->fn,
                  k->root);
  return submit(k, r);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_SEND, .fn = "ncclSend", .comm = comm, .send = sendbuff,
                   .count = count, .root = peer, .stream = stream};
  return p2p(&k, datatype);
}
NCCL_ALIAS(ncclSend)

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_RECV, .fn = "ncclRecv", .comm = comm, .recv = recvbuff,
                   .count = count, .root = peer, .stream = stream};
  return p2p(&k, datatype);
}
NCCL_ALIAS(ncclRecv)
