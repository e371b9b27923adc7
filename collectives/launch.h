/* launch.h — the parts of shmddp_launch() that tests reach: a GPU rank's NUMA binding, with the
 * functions it uses given by the caller, and the launch with that binder. Internal. */
#ifndef COLL_LAUNCH_H
#define COLL_LAUNCH_H

#include <stddef.h>

#include "shmddp.h"

/* How a rank finds its GPU's NUMA node and binds to it. coll_numa_binder() gives the real one;
 * tests give their own, to see what a rank asks for without a GPU or a second node. */
typedef struct {
  /* The PCI bus id of the GPU of communicator device `device`: 0; 1 when there is no GPU to ask
   * about; -1 with the reason in err (coll_device_pci_bus_id). */
  int (*bus_id)(int device, char *buf, size_t len, char *err, size_t errlen);
  const char *sysfs_root; /* where the GPU's numa_node is read: "/sys" */
  int (*nodes)(void);     /* the machine's NUMA nodes (shm_numa_nodes) */
  /* Bind the calling process to node (shm_numa_bind_node). */
  shmddp_status_t (*bind)(int node, char *err, size_t errlen);
} coll_numa_binder_t;

const coll_numa_binder_t *coll_numa_binder(void);

/* Bind the calling rank, which drives GPU `device`, to that GPU's NUMA node: bus id, its node
 * (shm_numa_pick_node), bind. *node gets the node bound to, or -1 when there was nothing to do
 * (one node, no GPU, a node sysfs does not give): SHMDDP_OK either way. On a failure, the status
 * and a message naming the GPU, its bus id and node, and why. */
shmddp_status_t coll_numa_bind_gpu(const coll_numa_binder_t *b, int device, int *node, char *msg,
                                   size_t len);

/* shmddp_launch with this binder for its GPU ranks (NULL: coll_numa_binder()). */
shmddp_status_t coll_launch(const shmddp_launch_config_t *cfg, shmddp_rank_fn fn, void *arg,
                            const coll_numa_binder_t *binder, shmddp_launch_result_t *res);

#endif
