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
/* The PCI bus id ("00000000:1B:00.0", as cudaDeviceGetPCIBusId writes it) of the GPU that a
 * launched rank with communicator device `device` drives: the visible GPU device % their count,
 * as the transport's set-up picks it. 0; 1 when there is no GPU to ask about (a build without
 * CUDA, no GPU visible); -1 with the reason in err. It starts the CUDA driver in the calling
 * process (no context is made): call it in a rank, after fork, never in the launcher. */
int coll_device_pci_bus_id(int device, char *buf, size_t len, char *err, size_t errlen);

#endif
