/* xlate.c — one NCCL call in shmddp's terms, on the calling thread with its device set, run on
 * the shmddp communicator init.c made ready for it, through the unchecked collectives
 * (collectives/api.h): its arguments were checked when it was called (check.c).
 *
 * A pre-multiplied sum is each rank's input multiplied by that rank's scalar (into scratch),
 * then summed: sum_r scalar_r * x_r, as NCCL defines it. The scalar was captured when the call
 * was queued (a host value, or a device pointer read in stream order when the call runs).
 *
 * Send and recv to a peer are a broadcast on the pair's two-rank communicator, rooted at the
 * sender; the executor issues a rank's pairs in one global order (lower rank, higher rank,
 * sender), so any pattern of sends and receives completes without a cycle of waits. Sends to
 * oneself are matched in order with receives from oneself inside a group, and are copies. */
#include "config.h"

#include <string.h>

#include "collectives/api.h"
#include "nccl/internal.h"

/* Remember the stream of a call on a GPU communicator, so that ncclCommFinalize can wait for it. */
static void note_stream(ncclComm_t comm, void *stream)
{
  if (comm->device < 0) return;
  for (int i = 0; i < NCCL_MAX_STREAMS; i++) {
    if (comm->streams[i] == stream && (stream || i == 0)) return;
    if (!comm->streams[i] && stream) {
      comm->streams[i] = stream;
      return;
    }
  }
}

/* The input of a reduction: send itself, or send times this rank's scalar (in scratch). */
static ncclResult_t premul_input(const nccl_call_t *k, shmddp_comm_t *c, size_t n,
                                 const void **in)
{
  *in = k->send;
  if (!k->premul.set || n == 0) return ncclSuccess;
  void *scratch;
  ncclResult_t r = nccl_scratch(k->comm, n * shmddp_dtype_size(k->dtype), &scratch);
  if (r != ncclSuccess) return r;
  const nccl_scalar_t *s = &k->premul;
  shmddp_status_t st = coll_scale(c, k->send, scratch, n, k->dtype,
                                  s->on_device ? s->dev : s->host, s->on_device,
                                  nccl_dev_stream(k->comm, k->stream));
  if (st != SHMDDP_OK) return nccl_fail_st(k->comm, st, c, k->fn);
  *in = scratch;
  return ncclSuccess;
}

/* In place on device buffers, the send blocks are copied aside first: a peer writes its block
 * into this rank's buffer while this rank may not have sent that block yet. */
static ncclResult_t a2a_input(const nccl_call_t *k, const void **in)
{
  size_t bytes = k->count * (size_t)k->comm->nranks * shmddp_dtype_size(k->dtype);
  *in = k->send;
  const char *a = k->send, *b = k->recv;
  if (k->comm->device < 0 || bytes == 0 || !(a < b + bytes && b < a + bytes)) return ncclSuccess;
  void *scratch;
  ncclResult_t r = nccl_scratch(k->comm, bytes, &scratch);
  if (r == ncclSuccess) r = nccl_dev_copy(k->comm, scratch, k->send, bytes, k->stream);
  if (r == ncclSuccess) *in = scratch;
  return r;
}

static shmddp_status_t p2p(const nccl_call_t *k, shmddp_comm_t *pair, shmddp_stream_t s)
{
  int me = k->comm->rank < k->root ? 0 : 1; /* my rank in the pair */
  if (k->kind == NCCL_CALL_SEND) /* in place on the sender: its buffer is only read */
    return coll_broadcast(pair, k->send, (void *)k->send, k->count, k->dtype, me, s);
  return coll_broadcast(pair, NULL, k->recv, k->count, k->dtype, 1 - me, s);
}

ncclResult_t nccl_xlate(const nccl_call_t *k, shmddp_comm_t *c)
{
  ncclComm_t comm = k->comm;
  note_stream(comm, k->stream);
  shmddp_stream_t s = nccl_dev_stream(comm, k->stream);
  const void *in = k->send;
  size_t n_in = k->kind == NCCL_CALL_REDUCE_SCATTER ? k->count * (size_t)comm->nranks : k->count;
  ncclResult_t r = premul_input(k, c, n_in, &in);
  if (r != ncclSuccess) return r;
  /* In place stays in place when the input moved to scratch: recv is only written. */
  shmddp_status_t st = SHMDDP_OK;
  switch (k->kind) {
  case NCCL_CALL_ALL_REDUCE:
    st = coll_all_reduce(c, in, k->recv, k->count, k->dtype, k->op, s);
    break;
  case NCCL_CALL_REDUCE:
    st = coll_reduce(c, in, k->recv, k->count, k->dtype, k->op, k->root, s);
    break;
  case NCCL_CALL_REDUCE_SCATTER:
    st = coll_reduce_scatter(c, in, k->recv, k->count, k->dtype, k->op, s);
    break;
  case NCCL_CALL_BROADCAST:
    st = coll_broadcast(c, k->send, k->recv, k->count, k->dtype, k->root, s);
    break;
  case NCCL_CALL_ALL_GATHER:
    st = coll_all_gather(c, k->send, k->recv, k->count, k->dtype, s);
    break;
  case NCCL_CALL_ALL_TO_ALL:
    r = a2a_input(k, &in);
    if (r != ncclSuccess) return r;
    st = coll_all_to_all(c, in, k->recv, k->count, k->dtype, s);
    break;
  case NCCL_CALL_GATHER:
    st = coll_gather(c, k->send, k->recv, k->count, k->dtype, k->root, s);
    break;
  case NCCL_CALL_SCATTER:
    st = coll_scatter(c, k->send, k->recv, k->count, k->dtype, k->root, s);
    break;
  case NCCL_CALL_SEND:
  case NCCL_CALL_RECV:
    st = p2p(k, c, s);
    break;
  default:
    return nccl_fail(comm, ncclInternalError, "unknown queued call %d", (int)k->kind);
  }
  return st == SHMDDP_OK ? ncclSuccess : nccl_fail_st(comm, st, c, k->fn);
}

ncclResult_t nccl_xlate_self(nccl_call_t *const *calls, size_t n)
{
  size_t si = 0, ri = 0;
  for (;;) {
    while (si < n && calls[si]->kind != NCCL_CALL_SEND) si++;
    while (ri < n && calls[ri]->kind != NCCL_CALL_RECV) ri++;
    if (si == n && ri == n) return ncclSuccess;
    const nccl_call_t *any = si < n ? calls[si] : calls[ri];
    if (si == n || ri == n)
      return nccl_fail(any->comm, ncclInvalidUsage, "%s to oneself (rank %d) has no matching "
                       "%s in the same group", any->fn, any->comm->rank,
                       si < n ? "ncclRecv" : "ncclSend");
    const nccl_call_t *snd = calls[si++], *rcv = calls[ri++];
    if (snd->count != rcv->count || snd->dtype != rcv->dtype)
      return nccl_fail(snd->comm, ncclInvalidUsage, "ncclSend to oneself of %zu %s, but the "
                       "matching ncclRecv takes %zu %s", snd->count,
                       shmddp_dtype_name(snd->dtype), rcv->count, shmddp_dtype_name(rcv->dtype));
    note_stream(rcv->comm, rcv->stream);
    ncclResult_t r = nccl_dev_copy(rcv->comm, rcv->recv, snd->send,
                                   rcv->count * shmddp_dtype_size(rcv->dtype), rcv->stream);
    if (r != ncclSuccess) return r;
  }
}
