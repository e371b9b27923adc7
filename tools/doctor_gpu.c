/* doctor_gpu.c — the GPU half of tools/doctor (CUDA build): driver and library versions (the
 * trainer's CUDA ops module with its cuDNN and cuBLAS), each GPU with its NUMA node, peer access
 * as CUDA reports it, and P2P *verified*: one forked process per GPU exports a buffer through
 * CUDA IPC, every other process copies it, checks the bytes and times the copy. CUDA is first
 * touched in forked children, so the parent can still fork the ranks of the IPC test
 * afterwards. */
#include "config.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm/numa.h"
#include "shmddp.h"
#include "src/device/device.h"
#include "tools/doctor_gpu.h"

#define MAX_GPUS SHMDDP_MAX_RANKS
#define COPY_BYTES ((size_t)256 << 20)

typedef struct {
  int status; /* 0 ok, else cudaError_t of the failing call */
  char err[256];
  int driver, runtime, ngpus;
  struct {
    char name[128], busid[32];
    int major, minor;
    double mem_gib;
  } gpu[MAX_GPUS];
  int can_peer[MAX_GPUS][MAX_GPUS];
  /* IPC test results: [reader][owner] */
  double gbs[MAX_GPUS][MAX_GPUS];
  int verified[MAX_GPUS][MAX_GPUS];
  char ipc_err[MAX_GPUS][256];
} probe_t;

static void probe_child(probe_t *p)
{
  cudaError_t e;
  cudaDriverGetVersion(&p->driver);
  cudaRuntimeGetVersion(&p->runtime);
  if ((e = cudaGetDeviceCount(&p->ngpus)) != cudaSuccess) {
    p->status = (int)e;
    snprintf(p->err, sizeof p->err, "%.200s", cudaGetErrorString(e));
    p->ngpus = 0;
    return;
  }
  if (p->ngpus > MAX_GPUS) p->ngpus = MAX_GPUS;
  for (int i = 0; i < p->ngpus; i++) {
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, i);
    snprintf(p->gpu[i].name, sizeof p->gpu[i].name, "%.127s", prop.name);
    p->gpu[i].major = prop.major;
    p->gpu[i].minor = prop.minor;
    p->gpu[i].mem_gib = (double)prop.totalGlobalMem / (1 << 30);
    cudaDeviceGetPCIBusId(p->gpu[i].busid, sizeof p->gpu[i].busid, i);
    for (int j = 0; j < p->ngpus; j++)
      if (i != j) cudaDeviceCanAccessPeer(&p->can_peer[i][j], i, j);
  }
}

typedef struct {
  probe_t *p;
  int ngpus;
} ipc_ctx_t;

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      snprintf(c->p->ipc_err[r], sizeof c->p->ipc_err[r], "%.100s: %.120s", #call,        \
               cudaGetErrorString(e_));                                                       \
      shmddp_abort(comm, c->p->ipc_err[r]);                                                   \
      return 1;                                                                               \
    }                                                                                         \
  } while (0)

/* Each rank owns a buffer filled with its own byte; every rank reads every peer's buffer. */
static int ipc_rank(shmddp_comm_t *comm, void *arg)
{
  ipc_ctx_t *c = arg;
  int r = shmddp_comm_rank(comm), n = shmddp_comm_size(comm);
  CK(cudaSetDevice(r % c->ngpus));
  void *mine, *tmp;
  CK(cudaMalloc(&mine, COPY_BYTES));
  CK(cudaMalloc(&tmp, COPY_BYTES));
  CK(cudaMemset(mine, 0x40 + r, COPY_BYTES));
  CK(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h, all[MAX_GPUS];
  CK(cudaIpcGetMemHandle(&h, mine));
  /* gathered as 32-bit words: sizeof h is a multiple of 4 */
  if (shmddp_all_gather(comm, &h, all, sizeof h / 4, SHMDDP_I32, SHMDDP_HOST) != SHMDDP_OK) return 1;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  unsigned char check[4096];
  for (int owner = 0; owner < n; owner++) {
    /* One pair at a time, so each bandwidth is a single link's. */
    for (int reader = 0; reader < n; reader++) {
      if (shmddp_barrier(comm) != SHMDDP_OK) return 1;
      if (reader != r || owner == r) continue;
      void *peer;
      CK(cudaIpcOpenMemHandle(&peer, all[owner], cudaIpcMemLazyEnablePeerAccess));
      CK(cudaMemcpy(tmp, peer, COPY_BYTES, cudaMemcpyDeviceToDevice)); /* warm-up */
      CK(cudaEventRecord(e0, 0));
      for (int i = 0; i < 5; i++) CK(cudaMemcpyAsync(tmp, peer, COPY_BYTES, cudaMemcpyDeviceToDevice, 0));
      CK(cudaEventRecord(e1, 0));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      c->p->gbs[r][owner] = 5.0 * (double)COPY_BYTES / (ms * 1e6);
      CK(cudaMemcpy(check, (char *)tmp + COPY_BYTES - sizeof check, sizeof check, cudaMemcpyDeviceToHost));
      int ok = 1;
      for (size_t k = 0; k < sizeof check; k++) ok &= check[k] == 0x40 + owner;
      c->p->verified[r][owner] = ok ? 1 : -1;
      CK(cudaIpcCloseMemHandle(peer));
    }
  }
  if (shmddp_barrier(comm) != SHMDDP_OK) return 1;
  cudaFree(mine);
  cudaFree(tmp);
  return 0;
}

/* The trainer's GPU backend: the CUDA ops module, loaded here as a GPU run loads it, with the
 * cuDNN and cuBLAS it runs on (in this process: loading touches no GPU). */
static void check_ops_module(doctor_t *d)
{
  char info[4400], err[2048];
  if (!dev_gpus_built())
    doctor_warn(d, "GPU ops", "install cuDNN and run ./configure again",
                "this build has no CUDA ops backend (configure found no cuDNN): shmddp-train and "
                "shmddp-predict run on the CPU only");
  else if (dev_gpu_backend_load(info, sizeof info, err, sizeof err) == 0)
    doctor_ok(d, "GPU ops", "%s", info);
  else
    doctor_fail(d, "GPU ops", "shmddp-train and shmddp-predict need it on GPUs", "%s", err);
}

/* The probe, in a forked child (CUDA stays out of this process), into shared memory; NULL after
 * reporting why there is none. */
static probe_t *run_probe(doctor_t *d)
{
  probe_t *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    doctor_fail(d, "GPUs", "retry", "cannot allocate shared memory for the probe");
    return NULL;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    probe_child(p);
    _exit(0);
  }
  int ws = 0;
  waitpid(pid, &ws, 0);
  if (!WIFEXITED(ws)) {
    doctor_fail(d, "GPUs", "check the driver with nvidia-smi", "the CUDA probe crashed");
    return NULL;
  }
  return p;
}

static void report_versions(doctor_t *d, const probe_t *p)
{
  if (p->driver == 0)
    doctor_ok(d, "CUDA", "runtime %d.%d, built for compute capability %s; no NVIDIA driver loaded",
              p->runtime / 1000, (p->runtime % 1000) / 10, SHMDDP_CUDA_ARCHS);
  else
    doctor_ok(d, "CUDA", "runtime %d.%d, driver supports %d.%d; built for compute capability %s",
              p->runtime / 1000, (p->runtime % 1000) / 10, p->driver / 1000,
              (p->driver % 1000) / 10, SHMDDP_CUDA_ARCHS);
}

static void report_no_gpus(doctor_t *d, const probe_t *p)
{
  if (p->driver == 0) /* the runtime's own words would be "driver version is insufficient" */
    doctor_warn(d, "GPUs", "install the NVIDIA driver (nvidia-smi should list the GPUs)",
                "no GPU usable: no NVIDIA driver is loaded");
  else
    doctor_warn(d, "GPUs", "check nvidia-smi, the driver and CUDA_VISIBLE_DEVICES",
                "no GPU usable (%s)", p->status ? p->err : "none found");
}

/* Each GPU: what it is, where it sits, and whether this build has code for it. */
static void report_gpus(doctor_t *d, const probe_t *p)
{
  const char *visible = getenv("CUDA_VISIBLE_DEVICES");
  for (int i = 0; i < p->ngpus; i++) {
    char cc[8];
    snprintf(cc, sizeof cc, "%d%d", p->gpu[i].major, p->gpu[i].minor);
    int node = shm_numa_node_of_pci("/sys", p->gpu[i].busid);
    char what[32], numa[16];
    snprintf(what, sizeof what, "GPU %d", i);
    snprintf(numa, sizeof numa, node >= 0 ? "%d" : "-", node);
    doctor_ok(d, what, "%.100s, %.0f GiB, compute %d.%d, PCI %s, NUMA node %s%s", p->gpu[i].name,
              p->gpu[i].mem_gib, p->gpu[i].major, p->gpu[i].minor, p->gpu[i].busid, numa,
              visible && i == 0 ? " (CUDA_VISIBLE_DEVICES is set)" : "");
    if (!strstr(SHMDDP_CUDA_ARCHS, cc)) {
      char fix[160];
      snprintf(fix, sizeof fix, "./configure --with-cuda-arch=%s (or add it: %s,%s)", cc,
               SHMDDP_CUDA_ARCHS, cc);
      doctor_warn(d, what, fix, "this build has no code for compute capability %s; kernels will be "
                  "JIT-compiled from PTX if possible, else fail", cc);
    }
  }
}

/* P2P as CUDA reports it, then as it really works between processes: the IPC copy test, one
 * rank per GPU (two on GPU 0 where there is one). */
static void report_ipc(doctor_t *d, probe_t *p)
{
  int nranks = p->ngpus > 1 ? p->ngpus : 2;
  ipc_ctx_t ctx = {p, p->ngpus};
  shmddp_launch_config_t cfg = {.nproc = nranks, .label = "doctor", .timeout_s = 60};
  shmddp_launch_result_t res;
  shmddp_status_t st = shmddp_launch(&cfg, ipc_rank, &ctx, &res);
  if (st != SHMDDP_OK || res.exit_code != 0) {
    const char *why = "";
    for (int r = 0; r < nranks && !*why; r++) why = p->ipc_err[r];
    doctor_fail(d, "CUDA IPC", "shmddp falls back to host-staged collectives (SHMDDP_ALGO=staged); "
                "check that the processes may share GPU memory (same container, no MIG)",
                "the IPC copy test failed: %s", *why ? why : res.message);
    return;
  }
  if (p->ngpus == 1) {
    doctor_ok(d, "CUDA IPC", "two processes on GPU 0 share memory through IPC: %.0f GB/s, bytes "
              "verified", p->gbs[1][0]);
    return;
  }
  for (int a = 0; a < p->ngpus; a++)
    for (int b = 0; b < p->ngpus; b++) {
      if (a == b) continue;
      char what[40];
      snprintf(what, sizeof what, "P2P %d<-%d", a, b);
      if (p->verified[a][b] != 1)
        doctor_fail(d, what, "use the host-staged path (SHMDDP_ALGO=staged); check the PCIe "
                    "ACS/IOMMU settings", "GPU %d read wrong bytes from GPU %d over IPC", a, b);
      else if (!p->can_peer[a][b])
        doctor_warn(d, what, "expected without P2P: shmddp stages through host memory",
                    "copy works (%.1f GB/s) but CUDA reports no peer access: it goes through "
                    "the host", p->gbs[a][b]);
      else
        doctor_ok(d, what, "IPC copy verified, %.1f GB/s", p->gbs[a][b]);
    }
}

int doctor_gpus(doctor_t *d)
{
  probe_t *p = run_probe(d);
  if (!p) return 0;
  report_versions(d, p);
  check_ops_module(d);
  int n = p->ngpus;
  if (n == 0) {
    report_no_gpus(d, p);
  } else {
    if (p->driver < p->runtime)
      doctor_fail(d, "driver", "update the NVIDIA driver or build with an older CUDA toolkit",
                  "the driver supports CUDA %d.%d but this build needs %d.%d", p->driver / 1000,
                  (p->driver % 1000) / 10, p->runtime / 1000, (p->runtime % 1000) / 10);
    report_gpus(d, p);
    report_ipc(d, p);
  }
  munmap(p, sizeof *p);
  return n;
}
