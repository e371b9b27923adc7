/* api.c — the public collectives: validate arguments (before any rank waits on another), then
 * run their unchecked twins (api.h), which pick the algorithm and dispatch to the host
 * algorithms or, for device buffers, the device transport. Validation errors are local to the
 * calling rank and consume no sequence number. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "collectives/api.h"
#include "collectives/comm.h"
#include "collectives/device.h"
#include "collectives/host/host.h"
#include "collectives/reduce/reduce_cpu.h"
#include "shm/check.h"
#include "shmddp.h"

int coll_count_fits(size_t count, shmddp_dtype_t dtype, size_t blocks)
{
  return count <= SIZE_MAX / 2 / shmddp_dtype_size(dtype) / blocks;
}

static shmddp_status_t check_common(shmddp_comm_t *comm, const char *fn, size_t count,
                                    size_t multiplier, int dtype, int op, int need_op)
{
  if ((unsigned)dtype >= SHMDDP_NUM_DTYPES)
    return coll_error(comm, SHMDDP_ERR_INVALID,
                      "%s: unknown dtype %d (use SHMDDP_F32, F64, F16, BF16, F8E4M3, F8E5M2, I8, U8, I32, U32, I64 or U64)", fn,
                      dtype);
  if (need_op && (unsigned)op >= SHMDDP_NUM_OPS)
    return coll_error(comm, SHMDDP_ERR_INVALID,
                      "%s: unknown op %d (use SHMDDP_SUM, AVG, MIN, MAX or PROD)", fn, op);
  if (!coll_count_fits(count, (shmddp_dtype_t)dtype, multiplier))
    return coll_error(comm, SHMDDP_ERR_INVALID,
                      "%s: count %zu of %s overflows the addressable size", fn, count,
                      shmddp_dtype_name((shmddp_dtype_t)dtype));
  return SHMDDP_OK;
}

static shmddp_status_t check_buf(shmddp_comm_t *comm, const char *fn, const char *which,
                                 const void *p, size_t count)
{
  if (count > 0 && p == NULL)
    return coll_error(comm, SHMDDP_ERR_INVALID, "%s: the %s buffer is NULL (count %zu)", fn,
                      which, count);
  return SHMDDP_OK;
}

static shmddp_status_t check_root(shmddp_comm_t *comm, const char *fn, int root)
{
  if (root < 0 || root >= comm->nranks)
    return coll_error(comm, SHMDDP_ERR_INVALID, "%s: root %d is not a rank (0..%d)", fn, root,
                      comm->nranks - 1);
  return SHMDDP_OK;
}

static shmddp_status_t check_stream(shmddp_comm_t *comm, const char *fn, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST && !comm->dev_ops)
    return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                      "%s: a CUDA stream was given but this communicator has no device transport "
                      "(build with CUDA and enable it with shmddp_comm_init_cuda); pass "
                      "SHMDDP_HOST for host buffers",
                      fn);
  return SHMDDP_OK;
}

/* The algorithm for a host call: forced if it is a host algorithm, else by size. */
static shmddp_algo_t host_algo(const shmddp_comm_t *comm, coll_kind_t kind, size_t bytes)
{
  if (kind != COLL_ALL_REDUCE && kind != COLL_REDUCE_SCATTER) return SHMDDP_ALGO_DIRECT;
  if (comm->nranks == 1) return SHMDDP_ALGO_DIRECT;
  if (comm->algo == SHMDDP_ALGO_DIRECT || comm->algo == SHMDDP_ALGO_RING) return comm->algo;
  return bytes >= comm->ring_min_bytes ? SHMDDP_ALGO_RING : SHMDDP_ALGO_DIRECT;
}

shmddp_status_t shmddp_all_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_all_reduce";
  TRY(check_common(comm, fn, count, 1, dtype, op, 1));
  TRY(check_buf(comm, fn, "send", send, count));
  TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_all_reduce(comm, send, recv, count, dtype, op, stream);
}

shmddp_status_t coll_all_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->all_reduce(comm, send, recv, count, dtype, op, comm->algo, stream);
  size_t bytes = count * shmddp_dtype_size(dtype);
  shmddp_algo_t algo = host_algo(comm, COLL_ALL_REDUCE, bytes);
  TRY(coll_begin(comm, COLL_ALL_REDUCE, count, dtype, op, -1, algo));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, bytes);
    return SHMDDP_OK;
  }
  if (algo == SHMDDP_ALGO_RING) return host_ring_all_reduce(comm, send, recv, count, dtype, op);
  return host_direct_all_reduce(comm, send, recv, count, dtype, op);
}

shmddp_status_t shmddp_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                      size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                      shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_reduce_scatter";
  TRY(check_common(comm, fn, recvcount, (size_t)comm->nranks, dtype, op, 1));
  TRY(check_buf(comm, fn, "send", send, recvcount));
  TRY(check_buf(comm, fn, "recv", recv, recvcount));
  TRY(check_stream(comm, fn, stream));
  return coll_reduce_scatter(comm, send, recv, recvcount, dtype, op, stream);
}

shmddp_status_t coll_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                    size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                    shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->reduce_scatter(comm, send, recv, recvcount, dtype, op, comm->algo,
                                         stream);
  size_t ds = shmddp_dtype_size(dtype);
  shmddp_algo_t algo = host_algo(comm, COLL_REDUCE_SCATTER, recvcount * ds * comm->nranks);
  TRY(coll_begin(comm, COLL_REDUCE_SCATTER, recvcount, dtype, op, -1, algo));
  if (recvcount == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, recvcount * ds);
    return SHMDDP_OK;
  }
  if (algo == SHMDDP_ALGO_RING)
    return host_ring_reduce_scatter(comm, send, recv, recvcount, dtype, op);
  return host_direct_reduce_scatter(comm, send, recv, recvcount, dtype, op);
}

shmddp_status_t shmddp_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                  size_t sendcount, shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_all_gather";
  TRY(check_common(comm, fn, sendcount, (size_t)comm->nranks, dtype, 0, 0));
  TRY(check_buf(comm, fn, "send", send, sendcount));
  TRY(check_buf(comm, fn, "recv", recv, sendcount));
  TRY(check_stream(comm, fn, stream));
  return coll_all_gather(comm, send, recv, sendcount, dtype, stream);
}

shmddp_status_t coll_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                size_t sendcount, shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->all_gather(comm, send, recv, sendcount, dtype, comm->algo, stream);
  TRY(coll_begin(comm, COLL_ALL_GATHER, sendcount, dtype, 0, -1, SHMDDP_ALGO_DIRECT));
  if (sendcount == 0) return SHMDDP_OK;
  size_t bytes = sendcount * shmddp_dtype_size(dtype);
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, bytes);
    return SHMDDP_OK;
  }
  return host_all_gather(comm, send, recv, sendcount, dtype);
}

shmddp_status_t shmddp_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                 shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_broadcast";
  TRY(check_common(comm, fn, count, 1, dtype, 0, 0));
  TRY(check_root(comm, fn, root));
  if (comm->rank == root) TRY(check_buf(comm, fn, "send", send, count));
  TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_broadcast(comm, send, recv, count, dtype, root, stream);
}

shmddp_status_t coll_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->broadcast(comm, send, recv, count, dtype, root, comm->algo, stream);
  TRY(coll_begin(comm, COLL_BROADCAST, count, dtype, 0, root, SHMDDP_ALGO_DIRECT));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, count * shmddp_dtype_size(dtype));
    return SHMDDP_OK;
  }
  return host_broadcast(comm, send, recv, count, dtype, root);
}

shmddp_status_t shmddp_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                              shmddp_dtype_t dtype, shmddp_op_t op, int root,
                              shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_reduce";
  TRY(check_common(comm, fn, count, 1, dtype, op, 1));
  TRY(check_root(comm, fn, root));
  TRY(check_buf(comm, fn, "send", send, count));
  if (comm->rank == root) TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_reduce(comm, send, recv, count, dtype, op, root, stream);
}

shmddp_status_t coll_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, shmddp_op_t op, int root,
                            shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->reduce(comm, send, recv, count, dtype, op, root, comm->algo, stream);
  TRY(coll_begin(comm, COLL_REDUCE, count, dtype, op, root, SHMDDP_ALGO_DIRECT));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, count * shmddp_dtype_size(dtype));
    return SHMDDP_OK;
  }
  return host_reduce(comm, send, recv, count, dtype, op, root);
}

shmddp_status_t shmddp_barrier(shmddp_comm_t *comm)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  TRY(coll_begin(comm, COLL_BARRIER, 0, SHMDDP_F32, 0, -1, SHMDDP_ALGO_DIRECT));
  if (comm->nranks == 1) return SHMDDP_OK;
  return host_barrier(comm);
}

shmddp_status_t shmddp_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_all_to_all";
  TRY(check_common(comm, fn, count, (size_t)comm->nranks, dtype, 0, 0));
  TRY(check_buf(comm, fn, "send", send, count));
  TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_all_to_all(comm, send, recv, count, dtype, stream);
}

shmddp_status_t coll_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST) return comm->dev_ops->all_to_all(comm, send, recv, count, dtype, stream);
  TRY(coll_begin(comm, COLL_ALL_TO_ALL, count, dtype, 0, -1, SHMDDP_ALGO_DIRECT));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, count * shmddp_dtype_size(dtype));
    return SHMDDP_OK;
  }
  return host_all_to_all(comm, send, recv, count, dtype);
}

shmddp_status_t shmddp_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                              shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_gather";
  TRY(check_common(comm, fn, count, (size_t)comm->nranks, dtype, 0, 0));
  TRY(check_root(comm, fn, root));
  TRY(check_buf(comm, fn, "send", send, count));
  if (comm->rank == root) TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_gather(comm, send, recv, count, dtype, root, stream);
}

shmddp_status_t coll_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST) return comm->dev_ops->gather(comm, send, recv, count, dtype, root, stream);
  TRY(coll_begin(comm, COLL_GATHER, count, dtype, 0, root, SHMDDP_ALGO_DIRECT));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, count * shmddp_dtype_size(dtype));
    return SHMDDP_OK;
  }
  return host_gather(comm, send, recv, count, dtype, root);
}

shmddp_status_t shmddp_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_scatter";
  TRY(check_common(comm, fn, count, (size_t)comm->nranks, dtype, 0, 0));
  TRY(check_root(comm, fn, root));
  if (comm->rank == root) TRY(check_buf(comm, fn, "send", send, count));
  TRY(check_buf(comm, fn, "recv", recv, count));
  TRY(check_stream(comm, fn, stream));
  return coll_scatter(comm, send, recv, count, dtype, root, stream);
}

shmddp_status_t coll_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                             shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  if (stream != SHMDDP_HOST) return comm->dev_ops->scatter(comm, send, recv, count, dtype, root, stream);
  TRY(coll_begin(comm, COLL_SCATTER, count, dtype, 0, root, SHMDDP_ALGO_DIRECT));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) {
    if (recv != send) memmove(recv, send, count * shmddp_dtype_size(dtype));
    return SHMDDP_OK;
  }
  return host_scatter(comm, send, recv, count, dtype, root);
}

shmddp_status_t shmddp_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                             shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                             shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  const char *fn = "shmddp_scale";
  TRY(check_common(comm, fn, count, 1, dtype, 0, 0));
  TRY(check_buf(comm, fn, "src", src, count));
  TRY(check_buf(comm, fn, "dst", dst, count));
  if (!scalar) return coll_error(comm, SHMDDP_ERR_INVALID, "%s: the scalar is NULL", fn);
  TRY(check_stream(comm, fn, stream));
  return coll_scale(comm, src, dst, count, dtype, scalar, scalar_on_device, stream);
}

shmddp_status_t coll_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                           shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                           shmddp_stream_t stream)
{
  if (count == 0) return SHMDDP_OK;
  if (stream != SHMDDP_HOST)
    return comm->dev_ops->scale(comm, src, dst, count, dtype, scalar, scalar_on_device, stream);
  if (dst != src) memmove(dst, src, count * shmddp_dtype_size(dtype));
  reduce_cpu_scale(dst, count, dtype, scalar);
  return SHMDDP_OK;
}
