/* doctor.c — `tools/doctor`: checks a machine for what shmddp needs and says, for every
 * problem, what to do. Host checks here (shared memory, NUMA, NCCL); GPUs, topology and P2P in
 * doctor_gpu.c when built with CUDA. Exit status: 0 when nothing blocks a run, 1 otherwise. */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifdef HAVE_NUMA
#include <numa.h>
#endif

#include "build_version.h"
#include "shmddp.h"
#include "tools/doctor_report.h"
#ifdef HAVE_CUDA
#include "tools/doctor_gpu.h"
#endif

static void check_shm(doctor_t *d, int nranks)
{
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) {
    doctor_fail(d, "/dev/shm", "mount a tmpfs on /dev/shm (containers: docker run --shm-size=1g)",
                "not mounted or not readable");
    return;
  }
  double total = (double)v.f_blocks * v.f_frsize / 1048576.0;
  double avail = (double)v.f_bavail * v.f_frsize / 1048576.0;
  double need = (double)shmddp_segment_bytes(nranks, 0) / 1048576.0;
  if (avail < need)
    doctor_fail(d, "/dev/shm", "give the container more: docker run --shm-size=256m (or free /dev/shm)",
                "%.0f MiB free of %.0f MiB; a run of %d ranks needs %.1f MiB", avail, total, nranks, need);
  else
    doctor_ok(d, "/dev/shm", "%.0f MiB free of %.0f MiB; a run of %d ranks needs %.1f MiB", avail,
              total, nranks, need);
}

static void check_numa(doctor_t *d)
{
#ifdef HAVE_NUMA
  if (numa_available() < 0) {
    doctor_ok(d, "NUMA", "not available (single node assumed)");
    return;
  }
  int nodes = numa_max_node() + 1;
  doctor_ok(d, "NUMA", "%d node(s), %ld CPUs; shmddp-train binds each GPU rank to its GPU's node "
            "(--numa-bind)%s", nodes, sysconf(_SC_NPROCESSORS_ONLN),
            nodes == 1 ? " (one node: nothing to bind)" : "");
#else
  doctor_ok(d, "NUMA", "built without libnuma: the NUMA layout is not read, and ranks are not "
            "bound to their GPU's node");
#endif
}

static void check_nccl(doctor_t *d)
{
  void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    doctor_ok(d, "NCCL", "not installed; shmddp does not need it (allreduce_bench --compare nccl "
              "needs libnccl.so.2)");
    return;
  }
  int (*get_version)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
  int v = 0;
  if (get_version && get_version(&v) == 0)
    doctor_ok(d, "NCCL", "libnccl.so.2 %d.%d.%d present (used only for comparisons)", v / 10000,
              (v / 100) % 100, v % 100);
  else
    doctor_ok(d, "NCCL", "libnccl.so.2 present (used only for comparisons)");
  dlclose(h);
}

int main(int argc, char **argv)
{
  if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
    printf("usage: shmddp-doctor [--version]\n  Checks GPUs, driver, P2P between every pair (a "
           "real IPC copy between two processes, with its bandwidth), /dev/shm, NUMA, "
           "libraries.\n");
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    printf("shmddp-doctor %s\n", SHMDDP_BUILD_VERSION);
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "shmddp-doctor: unexpected argument '%s'; run with --help\n", argv[1]);
    return 2;
  }
  doctor_t d = {0};
  printf("shmddp %s doctor\n", PACKAGE_VERSION);
  int ngpus = 0;
#ifdef HAVE_CUDA
  ngpus = doctor_gpus(&d);
#else
  doctor_warn(&d, "CUDA", "install the CUDA toolkit and run ./configure again for the GPU build",
              "this build has no CUDA: CPU ranks only (shmddp-train --device cpu, host "
              "collectives)");
#endif
  if (ngpus == 0)
    printf("       %-14s    without a GPU, everything still runs on CPU ranks: "
           "shmddp-train --device cpu, shmddp-allreduce-bench --device cpu\n", "");
  check_shm(&d, ngpus > 1 ? ngpus : 2);
  check_numa(&d);
  check_nccl(&d);
  printf("%d problem(s), %d warning(s)\n", d.problems, d.warnings);
  return d.problems ? 1 : 0;
}
