/* numa.c — NUMA placement of a rank. The GPU's node comes from
 * /sys/bus/pci/devices/<bus id>/numa_node; binding uses libnuma when it was found at configure
 * time. On one-node machines (numa_node reads -1, or libnuma counts one node) there is nothing
 * to do. The decision (shm_numa_pick_node) reads only files, so tests give it a sysfs tree of
 * their own; the binding itself (shm_numa_bind_node) is the only part that needs libnuma. */
#include "config.h"

#include "shm/numa.h"

#include <ctype.h>
#include <errno.h>
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
  /* A bus id is hex digits, colons and a dot: nothing that could leave the devices folder. */
  for (const char *q = p; *q; q++)
    if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.') return -1;
  char path[256];
  snprintf(path, sizeof path, "%s/bus/pci/devices/%s/numa_node", sysfs_root ? sysfs_root : "/sys", p);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int node = -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node;
}

int shm_numa_pick_node(const char *sysfs_root, const char *busid, int nodes)
{
  if (nodes <= 1) return -1;
  int node = shm_numa_node_of_pci(sysfs_root, busid);
  return node >= 0 && node < nodes ? node : -1;
}

int shm_numa_nodes(void)
{
#ifdef HAVE_NUMA
  if (numa_available() < 0) return 1;
  int max = numa_max_node();
  return max >= 0 ? max + 1 : 1;
#else
  return 1;
#endif
}

shmddp_status_t shm_numa_bind_node(int node, char *err, size_t errlen)
{
#ifdef HAVE_NUMA
  if (numa_available() < 0) {
    snprintf(err, errlen, "cannot bind to NUMA node %d: the kernel has no NUMA support", node);
    return SHMDDP_ERR_UNSUPPORTED;
  }
  if (node < 0 || node > numa_max_node()) {
    snprintf(err, errlen, "cannot bind to NUMA node %d: this machine has nodes 0 to %d", node,
             numa_max_node());
    return SHMDDP_ERR_SYSTEM;
  }
  errno = 0;
  if (numa_run_on_node(node) != 0) {
    int e = errno;
    snprintf(err, errlen, "cannot run on the CPUs of NUMA node %d (numa_run_on_node: %s)", node,
             e ? strerror(e) : "failed");
    return SHMDDP_ERR_SYSTEM;
  }
  numa_set_preferred(node);
  return SHMDDP_OK;
#else
  snprintf(err, errlen, "cannot bind to NUMA node %d: this shmddp was built without libnuma",
           node);
  return SHMDDP_ERR_UNSUPPORTED;
#endif
}
