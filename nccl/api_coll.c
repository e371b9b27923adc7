/* api_coll.c — NCCL's collectives and send/recv: each fills a call descriptor and submits it;
 * its arguments are checked once (check.c, which also translates the types and copies a
 * pre-multiplied sum's scalar into the descriptor), then it goes to the queue. A refused
 * argument is returned by this call, named in ncclGetLastError. */
#include "config.h"

#include "nccl/internal.h"

/* Check every argument of the call (check.c), then hand it to the queue. */
static ncclResult_t submit_op(nccl_call_t *k, ncclDataType_t datatype, ncclRedOp_t op)
{
  ncclResult_t r = nccl_check_call(k, datatype, op);
  return r == ncclSuccess ? nccl_enqueue(k) : r;
}

/* A call without a reduction: no op to check. */
static ncclResult_t submit(nccl_call_t *k, ncclDataType_t datatype)
{
  return submit_op(k, datatype, ncclSum);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_REDUCE, .fn = "ncclAllReduce", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .stream = stream};
  return submit_op(&k, datatype, op);
}
NCCL_ALIAS(ncclAllReduce)

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_BROADCAST, .fn = "ncclBroadcast", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .root = root,
                   .stream = stream};
  return submit(&k, datatype);
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
  return submit_op(&k, datatype, op);
}
NCCL_ALIAS(ncclReduce)

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_GATHER, .fn = "ncclAllGather", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = sendcount, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclAllGather)

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_REDUCE_SCATTER, .fn = "ncclReduceScatter", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = recvcount, .stream = stream};
  return submit_op(&k, datatype, op);
}
NCCL_ALIAS(ncclReduceScatter)

/* Block j (count elements) of this rank's sendbuff goes to block `rank` of rank j's recvbuff. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_ALL_TO_ALL, .fn = "ncclAlltoAll", .comm = comm,
                   .send = sendbuff, .recv = recvbuff, .count = count, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclAlltoAll)

/* Root's recvbuff receives every rank's count elements, in rank order. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_GATHER, .fn = "ncclGather", .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = count, .root = root, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclGather)

/* Rank i receives block i (count elements) of root's sendbuff. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm,
                         shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_SCATTER, .fn = "ncclScatter", .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = count, .root = root, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclScatter)

/* Send and recv: a peer of the communicator; oneself only inside a group (the matching call
 * is then in the same group, and the pair is a copy). */
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_SEND, .fn = "ncclSend", .comm = comm, .send = sendbuff,
                   .count = count, .root = peer, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclSend)

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_CALL_RECV, .fn = "ncclRecv", .comm = comm, .recv = recvbuff,
                   .count = count, .root = peer, .stream = stream};
  return submit(&k, datatype);
}
NCCL_ALIAS(ncclRecv)
