/* api.h — the collectives behind the public shmddp_* calls, without their argument checks.
 *
 * The public calls (include/shmddp.h, api.c) check every argument and then run these. A caller
 * inside the library that has checked the same arguments itself, where its user gave them (the
 * NCCL front end: nccl/check.c), calls these instead, so that nothing is checked twice. Each
 * trusts its caller for what its public twin checks:
 *   comm is a communicator; dtype and op are valid values; coll_count_fits(count, dtype,
 *   blocks) holds, blocks being the communicator's size for the calls whose larger buffer holds
 *   count elements per rank (reduce-scatter, all-gather, all-to-all, gather, scatter) and 1
 *   otherwise; a buffer is NULL only with count 0 or on a rank that does not use it; root is a
 *   rank of comm; a stream other than SHMDDP_HOST is given only where comm has its device
 *   transport; scale's scalar is not NULL.
 * What they still refuse is what only the call itself can find (a peer in another call, an
 * aborted group, a device-side failure). */
#ifndef COLL_API_H
#define COLL_API_H

#include <stddef.h>

#include "shmddp.h"

/* Whether count elements of dtype, blocks times over, stay within the sizes the collectives
 * compute with (the public calls refuse a count for which this is 0). */
int coll_count_fits(size_t count, shmddp_dtype_t dtype, size_t blocks);

shmddp_status_t coll_all_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream);
shmddp_status_t coll_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                    size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                    shmddp_stream_t stream);
shmddp_status_t coll_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                size_t sendcount, shmddp_dtype_t dtype, shmddp_stream_t stream);
shmddp_status_t coll_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root, shmddp_stream_t stream);
shmddp_status_t coll_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, shmddp_op_t op, int root,
                            shmddp_stream_t stream);
shmddp_status_t coll_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype, shmddp_stream_t stream);
shmddp_status_t coll_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, int root, shmddp_stream_t stream);
shmddp_status_t coll_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                             shmddp_dtype_t dtype, int root, shmddp_stream_t stream);
shmddp_status_t coll_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                           shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                           shmddp_stream_t stream);

#endif
