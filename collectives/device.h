/* device.h — the hook through which device-buffer collectives (the CUDA transport) plug into
 * the API without the host library depending on CUDA. The CUDA build fills comm->dev_ops. */
#ifndef COLL_DEVICE_H
#define COLL_DEVICE_H

#include "collectives/comm.h"

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
  void (*teardown)(shmddp_comm_t *);
} coll_device_ops_t;

#endif
