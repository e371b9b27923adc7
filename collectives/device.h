/* device.h — the hook through which device-buffer collectives (the CUDA transport) plug into
 * the API without the host library depending on CUDA. The CUDA build fills comm->dev_ops.
 * It needs only the public types: the communicator (comm.h) holds a pointer to this table, so
 * this header stands below it. */
#ifndef COLL_DEVICE_H
#define COLL_DEVICE_H

#include <stddef.h>

#include "shmddp.h"

typedef struct coll_device_ops {
  shmddp_status_t (*all_reduce)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                                shmddp_op_t, shmddp_algo_t, shmddp_stream_t);
  shmddp_status_t (*reduce_scatter)(shmddp_comm_t *, const void *, void *, size_t,
                                    shmddp_dtype_t, shmddp_op_t, shmddp_algo_t, shmddp_stream_t);
  shmddp_status_t (*all_gather)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                                shmddp_algo_t, shmddp_stream_t);
  shmddp_status_t (*broadcast)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                               int, shmddp_algo_t, shmddp_stream_t);
  shmddp_status_t (*reduce)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                            shmddp_op_t, int, shmddp_algo_t, shmddp_stream_t);
  shmddp_status_t (*all_to_all)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                                shmddp_stream_t);
  shmddp_status_t (*gather)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t, int,
                            shmddp_stream_t);
  shmddp_status_t (*scatter)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t, int,
                             shmddp_stream_t);
  /* Local: dst = src * scalar on stream (see shmddp_scale). */
  shmddp_status_t (*scale)(shmddp_comm_t *, const void *, void *, size_t, shmddp_dtype_t,
                           const void *, int, shmddp_stream_t);
  void (*teardown)(shmddp_comm_t *);
} coll_device_ops_t;

/* For communicators joined by id (collectives/join.c). The CUDA build defines these in
 * cuda_init.c; the CPU build in join.c (no GPU: -1, and attaching is unsupported).
 * The GPU a joining rank drives for a shmddp_comm_config_t.device value (SHMDDP_DEVICE_CURRENT
 * resolved; -1 for host only, also when no GPU is visible), or -2 with a message in err. */
int coll_device_resolve(int requested, char *err, size_t errlen);
/* Collective: set up the device transport on the communicator's GPU. */
shmddp_status_t coll_device_attach(shmddp_comm_t *comm, int device, int quiet);

#endif
