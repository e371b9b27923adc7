/* cuda_init.c — setting up and tearing down the CUDA transport of a communicator: GPU choice,
 * the IPC-exported control memory, the P2P check between every pair (a real remote write and a
 * read-back, not cudaDeviceCanAccessPeer), the host-staged fallback's shared memory, and
 * shmddp_cuda_sync (the kernels' asynchronous errors are read in cuda_check.c).
 *
 * Order of init (collective; the host barriers between steps also publish the exchange area):
 *   1. device memory is allocated and zeroed (and the zeroing finished) before its IPC handle is
 *      published, so no peer can ever see flags from an earlier life of that memory;
 *   2. every rank opens every peer's control memory, writes a value naming (writer pid, writer,
 *      reader) into the peer's verify slot with a kernel, and reads it back through the copy
 *      engine; after a barrier each rank checks what its peers wrote into its own memory;
 *   3. the verdict is all-reduced (min), so every rank picks the same transport. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/cuda/cuda_state.h"
#include "shm/abort.h"
#include "shm/env.h"
#include "shm/shmfile.h"

_Static_assert(sizeof(cuda_xchg_t) <= CUDA_XCHG_SHARE, "CUDA exchange area too large");

/* A byte-count setting (shm/env.h): dflt when unset; SHMDDP_ERR_INVALID with the message when
 * the value is not one the setting takes. */
static shmddp_status_t env_bytes(shmddp_comm_t *comm, const char *name, size_t dflt, size_t *out)
{
  uint64_t v;
  char err[256];
  int rc = shm_env_bytes(name, &v, err, sizeof err);
  if (rc < 0) return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: %s", comm->rank, err);
  *out = rc ? (size_t)v : dflt;
  return SHMDDP_OK;
}

cuda_kctl_t cuda_kctl(const shmddp_comm_t *comm)
{
  cuda_state_t *s = cuda_state(comm);
  cuda_kctl_t k;
  k.abort_word = s->abort_dev;
  k.err_host = (volatile uint32_t *)s->err_host_dev;
  k.err_dev = &s->local->err_dev;
  k.timeout_ns = (unsigned long long)(s->timeout_s * 1e9);
  return k;
}

/* Map the segment header into the GPU's address space, so kernels can watch the abort word. */
static void register_abort_word(shmddp_comm_t *comm, cuda_state_t *s)
{
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = (uintptr_t)comm->seg->hdr & ~(uintptr_t)(page - 1);
  uintptr_t hi = ((uintptr_t)comm->seg->hdr + sizeof(shm_header_t) + (uintptr_t)page - 1) &
                 ~(uintptr_t)(page - 1);
  void *dev = NULL;
  /* A second communicator of this process (shmddp_comm_dup) finds the page registered by the
   * first: share that registration (the first is torn down last) instead of failing. */
  cudaError_t e = cudaHostRegister((void *)lo, hi - lo, cudaHostRegisterMapped | cudaHostRegisterPortable);
  int shared = e == cudaErrorHostMemoryAlreadyRegistered;
  if ((e != cudaSuccess && !shared) || cudaHostGetDevicePointer(&dev, (void *)lo, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    if (comm->rank == 0)
      fprintf(stderr, "shmddp: warning: cannot map the segment header into the GPU; device "
                      "collectives will notice a dead peer only after the timeout\n");
    return;
  }
  if (shared)
    (void)cudaGetLastError(); /* the first communicator's registration: not ours to undo */
  else
    s->hdr_reg = (void *)lo;
  s->abort_dev = (const volatile uint32_t *)((char *)dev +
                                             ((uintptr_t)&comm->seg->hdr->abort_status - lo));
}

/* Host-staged transport: rank 0 creates the shared memory (shm/shmfile.h: unnamed, reserved,
 * 0600) and passes its path in the exchange area; the others map it after checking its owner,
 * mode and size; rank 0 lets go of it once all have it mapped. */
static shmddp_status_t setup_staged(shmddp_comm_t *comm, cuda_state_t *s)
{
  cuda_xchg_t *x0 = cuda_xchg(comm, 0);
  size_t bytes = (size_t)comm->nranks * CUDA_STAGED_REGION;
  int fd = -1;
  char err[384];
  if (comm->rank == 0) {
    shmddp_status_t st = shm_file_create(bytes, &fd, x0->staged_name, sizeof x0->staged_name,
                                         err, sizeof err);
    if (st != SHMDDP_OK) {
      coll_error(comm, st, "rank 0: host staging memory: %s", err);
      shm_abort(comm->seg, st, 0, "%s", comm->last_error);
      return st;
    }
  }
  shmddp_status_t st = shmddp_barrier(comm);
  if (st != SHMDDP_OK) {
    if (fd >= 0) shm_file_forget(fd, x0->staged_name);
    return st;
  }
  void *map = NULL;
  char path[sizeof x0->staged_name];
  memcpy(path, x0->staged_name, sizeof path); /* shared memory: copied, then used */
  path[sizeof path - 1] = 0;
  shmddp_status_t mst = shm_file_map(path, bytes, &map, err, sizeof err);
  if (mst != SHMDDP_OK) shm_abort(comm->seg, mst, comm->rank, "rank %d: %s", comm->rank, err);
  st = shmddp_barrier(comm);
  if (comm->rank == 0) shm_file_forget(fd, path);
  if (mst != SHMDDP_OK) return coll_error(comm, mst, "rank %d: %s", comm->rank, err);
  s->staged_map = map;
  s->staged_bytes = bytes;
  if (st != SHMDDP_OK) return st;
  TRY_AS(cuda_failed, comm,
         cudaHostRegister(map, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  s->staged_registered = 1;
  void *dev = NULL;
  TRY_AS(cuda_failed, comm, cudaHostGetDevicePointer(&dev, map, 0));
  s->staged_dev = dev;
  return SHMDDP_OK;
}

cudaError_t cuda_open_peer(cuda_state_t *s, int p, cudaIpcMemHandle_t handle, uint64_t ptr,
                           int peer_device, void **out)
{
  if (!s->peer_local[p])
    return cudaIpcOpenMemHandle(out, handle, cudaIpcMemLazyEnablePeerAccess);
  /* A rank of this process: its pointer is valid here; another GPU needs peer access on. */
  if (peer_device != s->device) {
    cudaError_t e = cudaDeviceEnablePeerAccess(peer_device, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else if (e != cudaSuccess) return e;
  }
  *out = (void *)(uintptr_t)ptr;
  return cudaSuccess;
}

/* [p, p + bytes) is device memory mapped in this process: a peer's control memory is used only
 * then, whatever its exchange area says. */
static int ctrl_mapped(cuda_state_t *s, const void *p, size_t bytes)
{
  devmem_range_t r;
  uintptr_t a = (uintptr_t)p;
  return s->drv.query && s->drv.query(s->drv.ctx, a, &r) == 0 && r.kind != DEVMEM_NONE &&
         a >= r.base && a - r.base <= r.size && bytes <= r.size - (a - r.base);
}

static uint64_t verify_value(int32_t pid, int writer, int reader)
{
  return 0x5eedULL << 48 | (uint64_t)(uint32_t)pid << 16 | (uint64_t)writer << 8 | (uint64_t)reader;
}

/* 1 when every peer's control memory could be opened, written by a kernel, read back by the
 * copy engine, and this rank's own memory holds what each peer wrote. why gets the first failure. */
static int verify_p2p(shmddp_comm_t *comm, cuda_state_t *s, int force_fail, char *why, size_t len)
{
  int ok = 1;
  int n = comm->nranks, me = comm->rank;
  uint64_t *targets[CUDA_MAXR];
  uint64_t values[CUDA_MAXR];
  int nt = 0;
  for (int p = 0; p < n && ok; p++) {
    if (p == me) continue;
    void *m = NULL;
    cudaError_t e = cuda_open_peer(s, p, cuda_xchg(comm, p)->ctrl_handle,
                                   cuda_xchg(comm, p)->ctrl_ptr, cuda_xchg(comm, p)->device, &m);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, len, "rank %d cannot open rank %d's memory (GPU %d -> GPU %d): %s", me, p,
               s->device, cuda_xchg(comm, p)->device, cudaGetErrorString(e));
      ok = 0;
      break;
    }
    s->ctrl_peer[p] = m;
    if (!ctrl_mapped(s, m, CUDA_CTRL_BYTES(n))) {
      snprintf(why, len, "rank %d's control memory (as rank %d maps it) is not %zu bytes of "
               "device memory", p, me, (size_t)CUDA_CTRL_BYTES(n));
      ok = 0;
      break;
    }
    targets[nt] = (uint64_t *)(s->ctrl_peer[p] + CUDA_OFF_VERIFY) + me;
    values[nt++] = verify_value((int32_t)getpid(), me, p);
  }
  if (ok && nt > 0) {
    cudaError_t e = (cudaError_t)cuda_launch_verify_write(targets, values, nt, NULL);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    for (int i = 0; i < nt && e == cudaSuccess; i++) {
      uint64_t back = 0;
      e = cudaMemcpy(&back, targets[i], 8, cudaMemcpyDefault);
      if (e == cudaSuccess && back != values[i]) {
        snprintf(why, len, "rank %d wrote %#llx into a peer's memory but read back %#llx", me,
                 (unsigned long long)values[i], (unsigned long long)back);
        ok = 0;
      }
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(why, len, "rank %d: a P2P write/read-back failed: %s", me, cudaGetErrorString(e));
      ok = 0;
    }
  }
  /* Everyone has written (or failed); now check what arrived here. */
  if (shmddp_barrier(comm) != SHMDDP_OK) return -1;
  uint64_t got[CUDA_MAXR] = {0};
  if (cudaMemcpy(got, s->ctrl + CUDA_OFF_VERIFY, (size_t)n * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(why, len, "rank %d cannot read its own control memory", me);
    ok = 0;
  }
  for (int p = 0; p < n && ok; p++) {
    if (p == me) continue;
    uint64_t want = verify_value(cuda_xchg(comm, p)->pid, p, me);
    if (got[p] != want) {
      snprintf(why, len, "rank %d (GPU %d) found %#llx where rank %d (GPU %d) wrote %#llx", me,
               s->device, (unsigned long long)got[p], p, cuda_xchg(comm, p)->device,
               (unsigned long long)want);
      ok = 0;
    }
  }
  if (force_fail && ok) {
    snprintf(why, len, "the P2P check was made to fail (fail_p2p_check)");
    ok = 0;
  }
  return ok;
}

static void free_state(shmddp_comm_t *comm, cuda_state_t *s)
{
  int me = comm->rank;
  (void)cuda_coloc_release(comm, s);
  for (int p = 0; p < CUDA_MAXR; p++)
    if (p != me && s->ctrl_peer[p] && !s->peer_local[p]) cudaIpcCloseMemHandle(s->ctrl_peer[p]);
  cuda_reg_release(s);
  if (s->ctrl) cudaFree(s->ctrl);
  if (s->local) cudaFree(s->local);
  if (s->scratch) cudaFree(s->scratch);
  if (s->err_host) cudaFreeHost((void *)s->err_host);
  if (s->hdr_reg) cudaHostUnregister(s->hdr_reg);
  if (s->staged_registered) cudaHostUnregister(s->staged_map);
  if (s->staged_map) munmap(s->staged_map, s->staged_bytes);
  if (s->cs_in) cudaStreamDestroy(s->cs_in);
  if (s->cs_out) cudaStreamDestroy(s->cs_out);
  cudaEvent_t *evs[] = {&s->ev_fork, &s->ev_cp[0], &s->ev_cp[1], &s->ev_red[0], &s->ev_red[1],
                        &s->ev_join_in, &s->ev_join_out};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
    if (*evs[i]) cudaEventDestroy(*evs[i]);
  (void)cudaGetLastError();
  free(s);
}

void shmddp_comm_free_cuda(shmddp_comm_t *comm)
{
  if (!comm || !comm->dev || comm->dev_ops != &cuda_device_ops) return;
  cuda_state_t *s = cuda_state(comm);
  cudaSetDevice(s->device);
  if (cuda_coloc_release(comm, s)) {
    /* The group failed after co-located calls: a stream may wait forever for a dead peer's
     * event, and synchronizing or freeing would wait with it. The process's exit frees it all. */
    free(s);
    comm->dev = NULL;
    comm->dev_ops = NULL;
    return;
  }
  /* Kernels that wait for a dead peer give up on the abort word, so this returns. */
  cudaDeviceSynchronize();
  free_state(comm, s);
  comm->dev = NULL;
  comm->dev_ops = NULL;
}

static shmddp_status_t init_device_memory(shmddp_comm_t *comm, cuda_state_t *s)
{
  int n = comm->nranks;
  void *p = NULL;
  TRY_AS(cuda_failed, comm, cudaMalloc(&p, CUDA_CTRL_BYTES(n)));
  s->ctrl = p;
  s->ctrl_peer[comm->rank] = s->ctrl;
  TRY_AS(cuda_failed, comm, cudaMemset(s->ctrl, 0, CUDA_CTRL_BYTES(n)));
  size_t lbytes = sizeof(cuda_local_t) + CUDA_LL_BLOCKS * 4 + CUDA_DIRECT_MAXB * 12 +
                  CUDA_STAGED_BLOCKS * 8 + 64;
  TRY_AS(cuda_failed, comm, cudaMalloc(&p, lbytes));
  TRY_AS(cuda_failed, comm, cudaMemset(p, 0, lbytes));
  /* The struct holds the device pointers to the arrays that follow it. */
  cuda_local_t init;
  memset(&init, 0, sizeof init);
  unsigned char *base = (unsigned char *)p + ((sizeof(cuda_local_t) + 63) & ~(size_t)63);
  init.depoch = (uint64_t *)base;
  init.sctr = init.depoch + CUDA_DIRECT_MAXB;
  init.ll_seq = (uint32_t *)(init.sctr + CUDA_STAGED_BLOCKS);
  init.ts_seq = init.ll_seq + CUDA_LL_BLOCKS;
  TRY_AS(cuda_failed, comm, cudaMemcpy(p, &init, sizeof init, cudaMemcpyHostToDevice));
  s->local = p;
  /* The device pointers of the arrays, for the host's launch arguments. */
  s->local_arrays = init;
  void *h = NULL;
  TRY_AS(cuda_failed, comm, cudaHostAlloc(&h, 64, cudaHostAllocMapped));
  memset(h, 0, 64);
  s->err_host = h;
  TRY_AS(cuda_failed, comm, cudaHostGetDevicePointer(&p, h, 0));
  s->err_host_dev = p;
  TRY_AS(cuda_failed, comm, cudaStreamCreateWithFlags(&s->cs_in, cudaStreamNonBlocking));
  TRY_AS(cuda_failed, comm, cudaStreamCreateWithFlags(&s->cs_out, cudaStreamNonBlocking));
  cudaEvent_t *evs[] = {&s->ev_fork, &s->ev_cp[0], &s->ev_cp[1], &s->ev_red[0], &s->ev_red[1],
                        &s->ev_join_in, &s->ev_join_out};
  for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
    TRY_AS(cuda_failed, comm, cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));
  TRY_AS(cuda_failed, comm, cudaDeviceSynchronize());
  return SHMDDP_OK;
}

/* The GPU this rank drives, made current, with its context created now rather than inside the
 * first collective. */
static shmddp_status_t select_device(shmddp_comm_t *comm, const shmddp_cuda_config_t *c, int *dev)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return coll_error(comm, SHMDDP_ERR_UNSUPPORTED, "rank %d: no usable CUDA device (%s)",
                      comm->rank, e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
  }
  /* Modulo the visible GPUs: several ranks may share one (the multi-process path on one GPU). */
  *dev = (c->device >= 0 ? c->device : (comm->device >= 0 ? comm->device : comm->rank)) % count;
  TRY_AS(cuda_failed, comm, cudaSetDevice(*dev));
  TRY_AS(cuda_failed, comm, cudaFree(NULL));
  return SHMDDP_OK;
}

/* The transport's settings (shm/env.h): the sizes at which the automatic choice changes
 * algorithm, the two-shot's block limit, and SHMDDP_CUDA_P2P=0 (which turns c->p2p off). A
 * value a setting does not take is SHMDDP_ERR_INVALID with the message. Defaults from the
 * two-GPU runs (see bench/results/allreduce_2xh200*): there the one-shot beats the two-shot up
 * to 1 MiB and the copy-engine path never beats the two-shot, so auto does not pick it unless
 * SHMDDP_CUDA_CE_MIN says so. Every rank must use the
 * same values (the environment is inherited from the launcher). */
static shmddp_status_t read_settings(shmddp_comm_t *comm, cuda_state_t *s,
                                     shmddp_cuda_config_t *c)
{
  char err[256];
  long blocks = c->max_blocks > 0 ? c->max_blocks : CUDA_DIRECT_MAXB;
  int env_p2p = 1;
  TRY(env_bytes(comm, "SHMDDP_CUDA_DIRECT_MAX", CUDA_LL_MAX_BYTES, &s->direct_max));
  TRY(env_bytes(comm, "SHMDDP_CUDA_TS_MAX", CUDA_TS_MAX, &s->ts_max));
  TRY(env_bytes(comm, "SHMDDP_CUDA_CE_CHUNK", 0, &s->ce_chunk_env));
  TRY(env_bytes(comm, "SHMDDP_CUDA_CE_MIN", SIZE_MAX, &s->ce_min));
  if (shm_env_count("SHMDDP_CUDA_TS_BLOCKS", &blocks, err, sizeof err) < 0 ||
      shm_env_flag("SHMDDP_CUDA_P2P", &env_p2p, err, sizeof err) < 0)
    return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: %s", comm->rank, err);
  if (s->ts_max > CUDA_TS_MAX - 16 * (size_t)comm->nranks)
    s->ts_max = CUDA_TS_MAX - 16 * (size_t)comm->nranks;
  s->ts_blocks = blocks < 1 || blocks > CUDA_DIRECT_MAXB ? CUDA_DIRECT_MAXB : (int)blocks;
  if (!env_p2p) c->p2p = 0;
  return SHMDDP_OK;
}

/* The driver's pointer query (which allocation a device buffer belongs to, for IPC). */
static shmddp_status_t find_ptr_attrs(shmddp_comm_t *comm, cuda_state_t *s)
{
  enum cudaDriverEntryPointQueryResult q;
  void *fn = NULL;
  shmddp_status_t st = SHMDDP_OK;
  if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn) {
    (void)cudaGetLastError();
    st = coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: the driver has no cuPointerGetAttributes",
                    comm->rank);
  }
  s->ptr_attrs = (cuda_ptr_attrs_fn)fn;
  return st;
}

/* What the peers need to open this rank's control memory, published in its exchange area. */
static shmddp_status_t publish_ctrl(shmddp_comm_t *comm, cuda_state_t *s)
{
  shmddp_status_t st = SHMDDP_OK;
  cuda_xchg_t *x = cuda_xchg(comm, comm->rank);
  cudaError_t e = cudaIpcGetMemHandle(&x->ctrl_handle, s->ctrl);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    st = coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: cudaIpcGetMemHandle: %s", comm->rank,
                    cudaGetErrorString(e));
  }
  x->ctrl_ptr = (uint64_t)(uintptr_t)s->ctrl;
  x->device = s->device;
  x->pid = (int32_t)getpid();
  cuda_reg_publish(comm, s);
  cudaDeviceGetPCIBusId(x->pci_bus_id, sizeof x->pci_bus_id, s->device);
  /* Continue the exchange numbering of an earlier transport on this segment (every rank made
   * the same exchanges): resetting it could hide a record from a peer still waiting for it. */
  uint64_t a0 = atomic_load(&x->rec[0].seq), a1 = atomic_load(&x->rec[1].seq);
  s->xseq = a0 > a1 ? a0 : a1;
  return st;
}

/* Whether the device collectives use P2P: each rank verifies it with a real IPC write and
 * read-back (unless it is switched off), and all must agree; otherwise they use the host-staged
 * transport, and say so. A collective: every rank calls it. */
static shmddp_status_t agree_p2p(shmddp_comm_t *comm, cuda_state_t *s,
                                 const shmddp_cuda_config_t *c)
{
  int want_p2p = c->p2p != 0; /* off by the config or SHMDDP_CUDA_P2P=0 (read_settings) */
  char why[256] = "P2P disabled (SHMDDP_CUDA_P2P=0 or config)";
  int ok = 0;
  shmddp_status_t st = SHMDDP_OK;
  if (want_p2p && comm->nranks > 1) {
    ok = verify_p2p(comm, s, c->fail_p2p_check, why, sizeof why);
    if (ok < 0) st = shmddp_barrier(comm); /* returns the group's error */
  } else if (comm->nranks == 1) {
    ok = 1;
  }
  int32_t agreed = ok > 0;
  if (st == SHMDDP_OK)
    st = shmddp_all_reduce(comm, &agreed, &agreed, 1, SHMDDP_I32, SHMDDP_MIN, SHMDDP_HOST);
  if (st == SHMDDP_OK && !agreed) {
    if (!c->quiet && (ok == 0 || comm->rank == 0))
      fprintf(stderr, "shmddp: warning: rank %d: %s; device collectives use the host-staged "
                      "transport (slower)\n",
              comm->rank, ok == 0 ? why : "a peer's P2P check failed");
  }
  s->p2p = agreed;
  return st;
}

/* Copy-engine landing buffers: two chunks per peer, chunks of up to 64 MiB in all. */
static shmddp_status_t alloc_ce_buffers(shmddp_comm_t *comm, cuda_state_t *s)
{
  shmddp_status_t st = SHMDDP_OK;
  size_t chunk = ((size_t)64 << 20) / (size_t)(comm->nranks - 1);
  if (chunk > ((size_t)32 << 20)) chunk = (size_t)32 << 20;
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, 2 * (size_t)(comm->nranks - 1) * chunk);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    st = coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: cannot allocate %zu MiB for the copy-engine "
                    "buffers: %s", comm->rank, (2 * (size_t)(comm->nranks - 1) * chunk) >> 20,
                    cudaGetErrorString(e));
  }
  s->scratch = p;
  s->ce_chunk = chunk;
  return st;
}

/* A failed set-up stops the group (the peers are inside the same collective set-up) and frees
 * what was made. */
static shmddp_status_t init_failed(shmddp_comm_t *comm, cuda_state_t *s, shmddp_status_t st)
{
  shm_abort(comm->seg, st, comm->rank, "%s", comm->last_error);
  free_state(comm, s);
  return st;
}

shmddp_status_t shmddp_comm_init_cuda(shmddp_comm_t *comm, const shmddp_cuda_config_t *cfg)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  if (comm->dev_ops)
    return coll_error(comm, SHMDDP_ERR_INVALID, "shmddp_comm_init_cuda: already initialised");
  shmddp_cuda_config_t c = SHMDDP_CUDA_CONFIG_INIT;
  if (cfg) c = *cfg;
  int dev = 0;
  TRY(select_device(comm, &c, &dev));

  cuda_state_t *s = calloc(1, sizeof *s);
  if (!s) return coll_error(comm, SHMDDP_ERR_NOMEM, "rank %d: out of host memory", comm->rank);
  s->device = dev;
  s->timeout_s = c.timeout_s > 0 ? c.timeout_s : comm->timeout_s;
  shmddp_status_t st = read_settings(comm, s, &c);
  if (st == SHMDDP_OK) st = init_device_memory(comm, s);
  if (st == SHMDDP_OK) st = find_ptr_attrs(comm, s);
  register_abort_word(comm, s);
  if (st == SHMDDP_OK) st = publish_ctrl(comm, s);
  if (st == SHMDDP_OK) st = cuda_coloc_publish(comm, s);
  if (st != SHMDDP_OK) return init_failed(comm, s, st);

  st = shmddp_barrier(comm);
  if (st == SHMDDP_OK) st = cuda_reg_setup(comm, s);
  if (st == SHMDDP_OK) st = cuda_coloc_setup(comm, s);
  if (st == SHMDDP_OK) st = agree_p2p(comm, s, &c);
  if (st == SHMDDP_OK) st = setup_staged(comm, s);
  if (st == SHMDDP_OK && s->p2p && comm->nranks > 1) st = alloc_ce_buffers(comm, s);
  if (st == SHMDDP_OK) st = shmddp_barrier(comm);
  if (st != SHMDDP_OK) return init_failed(comm, s, st);
  comm->dev = s;
  comm->dev_ops = &cuda_device_ops;
  return SHMDDP_OK;
}

int shmddp_cuda_p2p(const shmddp_comm_t *comm)
{
  if (!comm || !comm->dev || comm->dev_ops != &cuda_device_ops) return -1;
  return cuda_state(comm)->p2p;
}

shmddp_status_t shmddp_cuda_sync(shmddp_comm_t *comm, shmddp_stream_t stream)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  cudaError_t e;
  if (comm->dev_ops == &cuda_device_ops && cuda_state(comm)->coloc) {
    shmddp_status_t cst = cuda_coloc_sync(comm, (cudaStream_t)stream);
    if (cst != SHMDDP_OK) return cst;
    e = cudaSuccess;
  } else {
    e = cudaStreamSynchronize((cudaStream_t)stream);
  }
  shmddp_status_t st = shmddp_cuda_check(comm);
  if (st != SHMDDP_OK) return st;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: cudaStreamSynchronize: %s", comm->rank,
                      cudaGetErrorString(e));
  }
  return SHMDDP_OK;
}

int coll_device_pci_bus_id(int device, char *buf, size_t len, char *err, size_t errlen)
{
  if (len) buf[0] = '\0';
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return 1; /* no GPU visible: the transport's set-up says so when the rank attaches */
  }
  if (device < 0 || len > (size_t)INT32_MAX) {
    snprintf(err, errlen, "GPU %d has no PCI bus id", device);
    return -1;
  }
  e = cudaDeviceGetPCIBusId(buf, (int)len, device % count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "cudaDeviceGetPCIBusId(GPU %d): %s", device % count,
             cudaGetErrorString(e));
    if (len) buf[0] = '\0';
    return -1;
  }
  return 0;
}

int coll_device_resolve(int requested, char *err, size_t errlen)
{
  if (requested == SHMDDP_DEVICE_NONE) return -1;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    if (requested == SHMDDP_DEVICE_CURRENT) return -1; /* no GPU here: host buffers only */
    snprintf(err, errlen, "shmddp_comm_init_rank: GPU %d was asked for, but no GPU is visible (%s)",
             requested, e != cudaSuccess ? cudaGetErrorString(e) : "none");
    return -2;
  }
  if (requested == SHMDDP_DEVICE_CURRENT) {
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess) {
      (void)cudaGetLastError();
      d = 0;
    }
    return d;
  }
  if (requested < 0 || requested >= count) {
    snprintf(err, errlen, "shmddp_comm_init_rank: device %d is not a visible GPU (0 to %d, or "
             "SHMDDP_DEVICE_CURRENT / SHMDDP_DEVICE_NONE)", requested, count - 1);
    return -2;
  }
  return requested;
}

shmddp_status_t coll_device_attach(shmddp_comm_t *comm, int device, int quiet)
{
  shmddp_cuda_config_t c = SHMDDP_CUDA_CONFIG_INIT;
  c.device = device;
  c.quiet = quiet;
  return shmddp_comm_init_cuda(comm, &c);
}
