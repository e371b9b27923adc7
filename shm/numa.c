/* numa.c — NUMA placement of a rank. The GPU's node comes from
 * /sys/bus/pci/devices/<bus id>/numa_node; binding uses libnuma when it was found at configure
 * time. On one-node machines (numa_node reads -1) there is nothing to do. */
#include "config.h"

#include "shm/numa.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_NUMA
#include <numa.h>
#endif

int shm_numa_node_of_pci(const char *sysfs_root, const char *busid)
{
  if (!busid || !*busid) return -1;
  char id[32];
  size_t n = strlen(busid);
  if (n >= sizeof id) return -1;
  for (size_t i = 0; i <= n; i++) id[i] = (char)tolower((unsigned char)busid[i]);
  /* CUDA reports an 8-digit domain ("00000000:1b:00.0"); sysfs uses 4. */
  const char *p = id;
  if (n == 16 && strncmp(id, "0000", 4) == 0) p = id + 4;
  char path[256];
  snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", sysfs_root ? sysfs_root : "/sys", p);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int node = -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node;
}

shmddp_status_t shm_numa_bind_pci(const char *busid, int *node_out, char *err, size_t errlen)
{
  int node = shm_numa_node_of_pci("/sys", busid);
  if (node_out) *node_out = -1;
  if (node < 0) return SHMDDP_OK;
#ifdef HAVE_NUMA
  if (numa_available() < 0 || numa_max_node() == 0) return SHMDDP_OK;
  if (numa_run_on_node(node) != 0) {
    snprintf(err, errlen, "cannot bind to NUMA node %d of GPU %s (numa_run_on_node failed); "
             "run without NUMA binding", node, busid);
    return SHMDDP_ERR_SYSTEM;
  }
  numa_set_preferred(node);
  if (node_out) *node_out = node;
#else
  (void)err;
  (void)errlen;
#endif
  return SHMDDP_OK;
}
