/* machine.c — what the trainer's defaults depend on: the GPUs this process may use, found
 * without initialising CUDA (a CUDA context does not survive the launcher's fork), the CPUs, and
 * whether an MPI launcher started this process. */
#include "config.h"

#include "src/app/machine.h"

#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/env.h"
#include "src/device/device.h"

static int count_entries(const char *dir, int nvidia_nodes)
{
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (nvidia_nodes) { /* /dev/nvidia0, nvidia1, ...: not nvidiactl, nvidia-uvm */
      const char *p = e->d_name;
      if (strncmp(p, "nvidia", 6) != 0 || p[6] < '0' || p[6] > '9') continue;
      p += 6;
      while (*p >= '0' && *p <= '9') p++;
      if (*p) continue;
    }
    n++;
  }
  closedir(d);
  return n;
}

int train_count_gpus(const char *proc_dir, const char *dev_dir, const char *cuda_visible)
{
  int n = proc_dir ? count_entries(proc_dir, 0) : -1;
  if (n <= 0 && dev_dir) n = count_entries(dev_dir, 1);
  if (n < 0) n = 0;
  if (!cuda_visible) return n;
  /* CUDA reads the list up to the first entry it cannot use; an empty list hides every GPU. */
  int visible = 0;
  const char *p = cuda_visible;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    while (len && *p == ' ') p++, len--;
    if (len == 0) break;
    if (*p >= '0' && *p <= '9') {
      char buf[32];
      if (len >= sizeof buf) break;
      memcpy(buf, p, len);
      buf[len] = 0;
      char *q;
      long idx = strtol(buf, &q, 10);
      while (*q == ' ') q++;
      if (*q || idx < 0 || idx >= n) break;
    } else if (strncmp(p, "GPU-", 4) != 0 && strncmp(p, "MIG-", 4) != 0) {
      break;
    }
    visible++;
    if (!end) break;
    p = end + 1;
  }
  return visible < n ? visible : n;
}

/* The number of processes of the MPI job that started this one (Open MPI's mpirun, or a
 * PMI launcher: MPICH's, srun), read from the environment before MPI_Init; 0 outside MPI. The
 * value is read as shm/env.c reads numbers (plain digits, exact); any other is named in bad. */
static int mpi_ranks(char *bad, size_t badlen)
{
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
  bad[0] = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    uint64_t n;
    if (!v || !*v) continue;
    if (shm_env_parse_whole(v, INT_MAX, &n) == 0) return (int)n;
    snprintf(bad, badlen, "%s=%.60s", vars[i], v);
    return 0;
  }
  return 0;
}

void train_machine_probe(train_machine_t *m)
{
  m->visible_gpus = train_count_gpus("/proc/driver/nvidia/gpus", "/dev",
                                     getenv("CUDA_VISIBLE_DEVICES"));
  m->cuda_built = dev_gpus_built();
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  m->online_cpus = c > 0 ? (int)c : 1;
  m->mpi_ranks = mpi_ranks(m->mpi_bad, sizeof m->mpi_bad);
#ifdef HAVE_MPI
  m->mpi_built = 1;
#else
  m->mpi_built = 0;
#endif
}

