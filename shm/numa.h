/* numa.h — place a rank on the NUMA node of its GPU (found from the PCI bus id in sysfs). */
#ifndef SHM_NUMA_H
#define SHM_NUMA_H

#include <stddef.h>

#include "shmddp.h"

/* The NUMA node of a PCI device such as "0000:1B:00.0" (any case), or -1 when unknown or the
 * machine has one node. sysfs_root is "/sys" except in tests. */
int shm_numa_node_of_pci(const char *sysfs_root, const char *busid);

/* Run this process's threads on, and prefer memory from, the node of that PCI device. Does
 * nothing (and succeeds) on single-node machines or builds without libnuma; *node_out gets the
 * node used or -1. */
shmddp_status_t shm_numa_bind_pci(const char *busid, int *node_out, char *err, size_t errlen);

#endif
