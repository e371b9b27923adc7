/* shmddp_cuda.h — the CUDA transport of shmddp: collectives on device buffers, over CUDA IPC /
 * NVLink P2P between the ranks' GPUs (or through pinned shared host memory where P2P does not
 * work). Include after shmddp.h; needs the CUDA build.
 *
 * Use: in the rank function (after shmddp_launch forked the ranks — never initialise CUDA before),
 *   shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;   // device -1: rank % visible GPUs
 *   shmddp_comm_init_cuda(comm, &cc);                     // collective: every rank calls it
 *   shmddp_all_reduce(comm, d_send, d_recv, n, SHMDDP_F32, SHMDDP_SUM, (shmddp_stream_t)stream);
 * A collective on device buffers is asynchronous: it is enqueued on the stream and returns.
 * Failures that happen on the GPU (a peer died, a peer never arrived) make the kernels give up
 * and are reported by the next call on the communicator, by shmddp_cuda_check() and by
 * shmddp_cuda_sync().
 *
 * Device buffers: any device memory of the rank's process works, at any size. cudaMalloc memory
 * is shared with the peers through legacy CUDA IPC, cuMem memory whose allocation allows POSIX
 * file descriptors (PyTorch's expandable segments, ncclMemAlloc) by passing those descriptors
 * over Unix sockets between the ranks' processes, in both cases without a copy; each allocation
 * (or span of cuMem chunks) is exported once and mapped by each peer once, and a peer drops its
 * mapping once the owner frees the memory (or, past SHMDDP_CUDA_EXPORTS live exports per rank,
 * default 1024, the least recently used one; registered buffers stay). Memory no other process
 * can map (cudaMallocAsync pools, managed memory) is staged: all-reduce then runs through the
 * scratch two-shot in 4 MiB pieces, the other collectives through pinned host memory; every rank
 * takes the same path for that call. Peers in the same process use the pointers as they are.
 * The calls of one communicator must be ordered (one stream, or streams ordered by events); every
 * rank makes the same calls. Calls can be captured in a CUDA graph (flags and counters live in
 * device memory and advance inside the kernels) once each buffer has been used in one call
 * outside the capture.
 *
 * Algorithms (SHMDDP_ALGO or shmddp_comm_set_algo forces one; auto picks by size):
 *   direct  one-shot: every rank pushes LL packets (data + flag) into every peer, reduces locally
 *   twoshot reduce-scatter by direct loads from the peers, all-gather by direct stores
 *   cering  copy engines: slices pulled with cudaMemcpyAsync, reduced by a kernel, pushed back
 *           (a direct reduce-scatter/all-gather over the copy engines, not a ring)
 *   staged  through cudaHostRegister'ed shared host memory: GPUs without working P2P
 *   ring    on device buffers means cering
 *   coloc   ranks that share a GPU: no kernel waits for a peer (contexts on one GPU take turns,
 *           so a spinning kernel would hold the GPU for a whole time slice); each rank records an
 *           interprocess event when its buffers are ready, the hosts meet in the segment, one
 *           kernel per GPU (the lowest rank's) reads every rank's input and writes its GPU's
 *           outputs, and the others go on once its event has completed (SHMDDP_COLOC_WAIT
 *           below says how they wait). Auto for every call of a group in which
 *           two ranks share a GPU (mixed placements included: every GPU's lowest rank reads all
 *           inputs, over P2P for the other GPUs), except calls captured in a CUDA graph, which
 *           run the algorithms below (correct, but each waits for a time slice). Forced, it
 *           runs for any placement and refuses capture.
 * Auto: direct up to 1 MiB, twoshot above (through IPC scratch up to 4 MiB, so no host
 * rendezvous; on the users' buffers above); cering only when asked for (it measured slower).
 * Environment: SHMDDP_CUDA_P2P=0 forces the host-staged transport; SHMDDP_CUDA_DIRECT_MAX,
 * SHMDDP_CUDA_TS_MAX and SHMDDP_CUDA_CE_MIN (bytes, K/M/G suffixes) move the auto thresholds;
 * SHMDDP_COLOC_WAIT=host|stream|leader says where coloc waits for the peers' events (host, the
 * default: the call blocks its host until they have completed, and no stream ever waits for
 * another process; stream: the stream waits and the call returns at once). */
#ifndef SHMDDP_CUDA_H
#define SHMDDP_CUDA_H

#include "shmddp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int device;            /* GPU ordinal (modulo the visible GPUs); -1: the launcher's local rank */
  int p2p;               /* -1: verify and use P2P where it works; 0: host-staged only */
  int fail_p2p_check;    /* testing: make the P2P verification fail (fallback path) */
  int quiet;             /* no warning on stderr when falling back to host-staged */
  double timeout_s;      /* how long a kernel waits for a peer before giving up; 0: the group's */
  int max_blocks;        /* most thread blocks a large all-reduce (two-shot) occupies; 0: all it
                            can use (128). Fewer leave SMs to compute that overlaps it, as DDP's
                            backward does. SHMDDP_CUDA_TS_BLOCKS overrides. Same on every rank. */
} shmddp_cuda_config_t;

#define SHMDDP_CUDA_CONFIG_INIT {-1, -1, 0, 0, 0.0, 0}

/* Collective: set the GPU, allocate and exchange the transport's buffers and flags, verify P2P
 * between every pair with a real IPC write and read-back (falling back to host-staged with a
 * warning when any pair fails). Afterwards device buffers may be passed with a stream. */
shmddp_status_t shmddp_comm_init_cuda(shmddp_comm_t *comm, const shmddp_cuda_config_t *cfg);

/* 1 when the device collectives go over P2P, 0 when through host memory, -1 without CUDA init. */
int shmddp_cuda_p2p(const shmddp_comm_t *comm);

/* How many ranks of the group use this rank's GPU (1: it has the GPU to itself), -1 without
 * CUDA init. Ranks that share a GPU take the co-located algorithm (see above). */
int shmddp_cuda_colocated(const shmddp_comm_t *comm);
/* 1 when ranks of the group share a GPU and every one of them runs under MPS (the driver's
 * cudaDevAttrMpsEnabled, published at set-up): their small collectives then take the in-kernel
 * algorithms, which also serve CUDA-graph capture at full speed. 0 otherwise, -1 without CUDA
 * init. */
int shmddp_cuda_colocated_mps(const shmddp_comm_t *comm);

/* SHMDDP_OK, or the error a kernel recorded (peer died: ABORTED; peer absent: TIMEOUT), or the
 * group's abort. Does not wait. */
shmddp_status_t shmddp_cuda_check(shmddp_comm_t *comm);

/* Wait for stream (a cudaStream_t) to drain, then shmddp_cuda_check(). */
shmddp_status_t shmddp_cuda_sync(shmddp_comm_t *comm, shmddp_stream_t stream);

/* Register [ptr, ptr + bytes) with comm: exported now and never evicted until deregistered (its
 * owner must deregister before freeing it); peers map it at its first use. Not collective.
 * *handle is what shmddp_cuda_deregister takes. */
shmddp_status_t shmddp_cuda_register(shmddp_comm_t *comm, void *ptr, size_t bytes, void **handle);
/* Release a registration; peers drop their mappings at the next call that shares buffers. */
shmddp_status_t shmddp_cuda_deregister(shmddp_comm_t *comm, void *handle);
/* Live exports of this rank's buffers and mappings of its peers' (diagnostics and tests). */
shmddp_status_t shmddp_cuda_mem_stats(const shmddp_comm_t *comm, size_t *exports, size_t *imports);

/* Release the transport (also done when the rank function returns). Not collective. */
void shmddp_comm_free_cuda(shmddp_comm_t *comm);

#ifdef __cplusplus
}
#endif
#endif
