/* coll.c — the NCCL collectives and send/recv, translated to shmddp calls. Each public entry
 * checks the communicator and queues or runs one call (group.c); nccl_issue makes it.
 *
 * Send and recv to a peer are a broadcast on the pair's two-rank communicator, rooted at the
 * sender; a group issues a rank's pairs in one global order (lower rank, higher rank, sender),
 * so any pattern of sends and receives completes without a cycle of waits. A pre-multiplied sum
 * is computed as the sum scaled once by the scalar: the same value where every rank passes the
 * same scalar (as PyTorch does), exact for integers, one rounding apart for floats. */
#include "config.h"

#include <string.h>

#include "collectives/reduce/reduce_cpu.h"
#include "collectives/reduce/reduce_cuda.h"
#include "nccl/internal.h"

static ncclResult_t scale(ncclComm_t comm, const nccl_premul_t *p, void *buf, size_t count,
                          shmddp_dtype_t dt, cudaStream_t stream)
{
  if (!p || count == 0) return ncclSuccess;
  if (p->dtype != dt)
    return nccl_fail(comm, ncclInvalidArgument, "the pre-multiplied sum was made for %s data, "
                     "not %s", shmddp_dtype_name(p->dtype), shmddp_dtype_name(dt));
  if (comm->device < 0) {
    reduce_cpu_scale(buf, count, dt, p->host_scalar);
    return ncclSuccess;
  }
  int e = reduce_cuda_scale(buf, count, dt, p->on_device ? p->dev_scalar : p->host_scalar,
                            p->on_device, nccl_stream(comm, stream));
  if (e != 0)
    return nccl_fail(comm, ncclUnhandledCudaError, "scaling a pre-multiplied sum: %s",
                     cudaGetErrorString((cudaError_t)e));
  return ncclSuccess;
}

ncclResult_t nccl_issue(const nccl_call_t *k)
{
  ncclComm_t comm = k->comm;
  if (k->kind == NCCL_OP_INIT) return nccl_init_now(comm, k->nranks, k->id, k->rank, k->device);
  shmddp_dtype_t dt;
  shmddp_op_t op = SHMDDP_SUM;
  const nccl_premul_t *pre = NULL;
  if (nccl_dtype(comm, k->dtype, &dt) != 0) return ncclInvalidArgument;
  int reduces = k->kind == NCCL_OP_ALL_REDUCE || k->kind == NCCL_OP_REDUCE ||
                k->kind == NCCL_OP_REDUCE_SCATTER;
  if (reduces && nccl_op(comm, k->op, &op, &pre) != 0) return ncclInvalidArgument;
  shmddp_stream_t s = nccl_stream(comm, k->stream);
  shmddp_comm_t *c = comm->c;
  shmddp_status_t st = SHMDDP_OK;
  const char *what = "?";
  switch (k->kind) {
  case NCCL_OP_ALL_REDUCE:
    what = "ncclAllReduce";
    st = shmddp_all_reduce(c, k->send, k->recv, k->count, dt, op, s);
    if (st == SHMDDP_OK) return scale(comm, pre, k->recv, k->count, dt, k->stream);
    break;
  case NCCL_OP_REDUCE:
    what = "ncclReduce";
    st = shmddp_reduce(c, k->send, k->recv, k->count, dt, op, k->root, s);
    if (st == SHMDDP_OK && comm->rank == k->root)
      return scale(comm, pre, k->recv, k->count, dt, k->stream);
    break;
  case NCCL_OP_REDUCE_SCATTER:
    what = "ncclReduceScatter";
    st = shmddp_reduce_scatter(c, k->send, k->recv, k->count, dt, op, s);
    if (st == SHMDDP_OK) return scale(comm, pre, k->recv, k->count, dt, k->stream);
    break;
  case NCCL_OP_BROADCAST:
    what = "ncclBroadcast";
    st = shmddp_broadcast(c, k->send, k->recv, k->count, dt, k->root, s);
    break;
  case NCCL_OP_ALL_GATHER:
    what = "ncclAllGather";
    st = shmddp_all_gather(c, k->send, k->recv, k->count, dt, s);
    break;
  case NCCL_OP_SEND:
  case NCCL_OP_RECV: {
    int sending = k->kind == NCCL_OP_SEND;
    what = sending ? "ncclSend" : "ncclRecv";
    ncclResult_t r = nccl_p2p_comm(comm, k->root, &c);
    if (r != ncclSuccess) return r;
    int me = comm->rank < k->root ? 0 : 1; /* my rank in the pair */
    if (sending) /* in place on the sender: its buffer is only read */
      st = shmddp_broadcast(c, k->send, (void *)k->send, k->count, dt, me, s);
    else
      st = shmddp_broadcast(c, NULL, k->recv, k->count, dt, 1 - me, s);
    break;
  }
  default:
    return nccl_fail(comm, ncclInternalError, "unknown queued call %d", (int)k->kind);
  }
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, c, what);
}

static ncclResult_t submit(nccl_call_t *k, const char *fn)
{
  ncclResult_t r = nccl_comm_usable(k->comm, fn);
  if (r != ncclSuccess) return r;
  return nccl_submit(k);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_ALL_REDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff,
                   .count = count, .dtype = datatype, .op = op, .stream = (cudaStream_t)stream};
  return submit(&k, "ncclAllReduce");
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_BROADCAST, .comm = comm, .send = sendbuff, .recv = recvbuff,
                   .count = count, .dtype = datatype, .root = root, .stream = (cudaStream_t)stream};
  return submit(&k, "ncclBroadcast");
}

ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_REDUCE, .comm = comm, .send = sendbuff, .recv = recvbuff,
                   .count = count, .dtype = datatype, .op = op, .root = root,
                   .stream = (cudaStream_t)stream};
  return submit(&k, "ncclReduce");
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_ALL_GATHER, .comm = comm, .send = sendbuff, .recv = recvbuff,
                   .count = sendcount, .dtype = datatype, .stream = (cudaStream_t)stream};
  return submit(&k, "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_REDUCE_SCATTER, .comm = comm, .send = sendbuff,
                   .recv = recvbuff, .count = recvcount, .dtype = datatype, .op = op,
                   .stream = (cudaStream_t)stream};
  return submit(&k, "ncclReduceScatter");
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_SEND, .comm = comm, .send = sendbuff, .count = count,
                   .dtype = datatype, .root = peer, .stream = (cudaStream_t)stream};
  return submit(&k, "ncclSend");
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, shmddp_nccl_stream_t stream)
{
  nccl_call_t k = {.kind = NCCL_OP_RECV, .comm = comm, .recv = recvbuff, .count = count,
                   .dtype = datatype, .root = peer, .stream = (cudaStream_t)stream};
  return submit(&k, "ncclRecv");
}
