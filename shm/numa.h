/* numa.h — place a rank on the NUMA node of its GPU (found from the PCI bus id in sysfs). */
#ifndef SHM_NUMA_H
#define SHM_NUMA_H

#include <stddef.h>

#include "shmddp.h"

/* The NUMA node of a PCI device such as "0000:1B:00.0" (any case), or -1 when unknown or the
 * machine has one node. sysfs_root is "/sys" except in tests. */
int shm_numa_node_of_pci(const char *sysfs_root, const char *busid);

/* The node a process that drives this PCI device should be bound to, on a machine of `nodes`
 * NUMA nodes: the device's node when there is more than one node and sysfs names one of them
 * (0 to nodes-1); -1, meaning "leave the process where it is", on a one-node machine, for a
 * device sysfs does not know or gives no node (-1), or a node out of range. */
int shm_numa_pick_node(const char *sysfs_root, const char *busid, int nodes);

/* The machine's NUMA nodes as libnuma counts them (the highest node number + 1); 1 in a build
 * without libnuma or where the kernel has no NUMA support. */
int shm_numa_nodes(void);

/* Run the calling thread, and the threads and processes it starts afterwards, on the CPUs of
 * `node`, and prefer that node's memory for its allocations. Threads that already run keep
 * their CPUs. SHMDDP_ERR_UNSUPPORTED without libnuma; SHMDDP_ERR_SYSTEM when the kernel refuses
 * (a cpuset without any of the node's CPUs, a node that does not exist), with the reason. */
shmddp_status_t shm_numa_bind_node(int node, char *err, size_t errlen);

#endif
