/* host.h — the host-memory algorithms (direct and ring through the segment's staging slots) and
 * the two message-passing primitives they are written against. */
#ifndef COLL_HOST_H
#define COLL_HOST_H

#include "collectives/comm.h"

/* ---- direct rounds: every rank posts one buffer, every rank may read all of them ----
 * acquire: wait until this rank's next buffer is free (all ranks done with its last use) and
 *          return its payload area;
 * exchange: publish it and wait until every rank has published this round; payloads[r] is rank
 *          r's payload (stamps verified);
 * release: tell the others this rank has finished reading the round. */
size_t host_direct_capacity(const shmddp_comm_t *comm);
shmddp_status_t host_direct_acquire(shmddp_comm_t *comm, unsigned char **payload);
shmddp_status_t host_direct_exchange(shmddp_comm_t *comm, const unsigned char **payloads);
void host_direct_release(shmddp_comm_t *comm);

/* ---- ring messages: to the next rank, from the previous one ---- */
size_t host_ring_capacity(const shmddp_comm_t *comm);
shmddp_status_t host_ring_acquire(shmddp_comm_t *comm, unsigned char **payload);
void host_ring_send(shmddp_comm_t *comm);
shmddp_status_t host_ring_recv(shmddp_comm_t *comm, const unsigned char **payload);
void host_ring_release(shmddp_comm_t *comm);

/* ---- collectives on host buffers (arguments already validated, coll_begin done) ---- */
shmddp_status_t host_direct_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op);
shmddp_status_t host_ring_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                     size_t count, shmddp_dtype_t dtype, shmddp_op_t op);
shmddp_status_t host_direct_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                           size_t recvcount, shmddp_dtype_t dtype,
                                           shmddp_op_t op);
shmddp_status_t host_ring_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                         size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op);
shmddp_status_t host_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                size_t sendcount, shmddp_dtype_t dtype);
shmddp_status_t host_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root);
shmddp_status_t host_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, shmddp_op_t op, int root);
shmddp_status_t host_barrier(shmddp_comm_t *comm);
shmddp_status_t host_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype);
shmddp_status_t host_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, int root);
shmddp_status_t host_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                             shmddp_dtype_t dtype, int root);

#endif
