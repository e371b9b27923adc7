/* cuda_state.h — the host side of the CUDA transport: per-rank state, the layout of the rank's
 * exchange area in the segment, and the functions its host files share. C only.
 *
 * Exchange area (the communicator's channel's share of shm_rank_xchg, written by its owner only):
 *   init part   the ctrl allocation's IPC handle, device, pid, process token, the name of the
 *               descriptor-passing socket, the staged shm's name (rank 0)
 *   rec[2]      per-call buffer records: a call that needs the peers' buffers (two-shot, copy
 *               engines, reduce-scatter, ...) numbers itself with xseq, which only such calls
 *               advance (every rank makes the same ones), fills rec[xseq & 1] (each buffer's
 *               description, devmem.h) and publishes rec.seq = xseq with a release store. Peers wait for rec.seq == xseq. A rank can write rec[xseq & 1]
 *               again only at xseq + 2, which needs every peer's record of xseq + 1, which each
 *               peer publishes only after it finished reading xseq: two records are enough. */
#ifndef COLL_CUDA_STATE_H
#define COLL_CUDA_STATE_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>

#include "collectives/comm.h"
#include "collectives/cuda/cuda_internal.h"
#include "collectives/devmem/devmem.h"
#include "collectives/devmem/devmem_cuda.h"
#include "shm/fdpass.h"
#include "shm/check.h"
#include "shmddp_cuda.h"

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t seq;
  coll_sig_t sig;
  devmem_desc_t buf[2]; /* kind DEVMEM_NONE: this rank passes no buffer here */
} cuda_xrec_t;

typedef struct {
  cudaIpcMemHandle_t ctrl_handle;
  uint64_t ctrl_ptr; /* the ctrl allocation's address, for peers in the same process */
  int32_t device, pid;
  unsigned char proc_token[16]; /* random per process: equal tokens mean one process */
  unsigned char sock_name[FDPASS_NAME_BYTES]; /* the rank's descriptor-passing listener */
  uint32_t sock_name_len;
  char pci_bus_id[32];
  char staged_name[64];
  cuda_xrec_t rec[2];
} cuda_xchg_t;

typedef int (*cuda_ptr_attrs_fn)(unsigned int, int *, void **, unsigned long long);

typedef struct {
  int device;
  int p2p;                        /* 1: P2P verified on every pair */
  double timeout_s;
  unsigned char *ctrl;            /* own ctrl allocation */
  unsigned char *ctrl_peer[CUDA_MAXR]; /* every rank's, mapped ([rank] = ctrl) */
  unsigned char peer_local[CUDA_MAXR]; /* 1: that rank lives in this process (threads as ranks):
                                          its memory is used directly, CUDA IPC cannot open it */
  int all_local;                  /* every peer is in this process */
  cuda_local_t *local;            /* device counters (device pointer) */
  cuda_local_t local_arrays;      /* host copy: the device pointers of its arrays */
  volatile uint32_t *err_host;    /* host view of the mapped error word */
  uint32_t *err_host_dev;
  void *hdr_reg;                  /* registered part of the segment header, or NULL */
  const volatile uint32_t *abort_dev;
  void *staged_map;               /* the staged shm mapping */
  size_t staged_bytes;
  int staged_registered;
  unsigned char *staged_dev;      /* its device view */
  unsigned char *scratch;         /* copy-engine landing buffers: [2][nranks-1][ce_chunk] */
  size_t ce_chunk;                /* bytes */
  cudaStream_t cs_in, cs_out;
  cudaEvent_t ev_fork, ev_cp[2], ev_red[2], ev_join_in, ev_join_out;
  uint64_t xseq;                  /* buffer exchanges made */
  size_t direct_max, ts_max, ce_min; /* auto thresholds, bytes */
  size_t ce_chunk_env;            /* SHMDDP_CUDA_CE_CHUNK: copy-engine chunk override (tuning) */
  int ts_blocks;                  /* SHMDDP_CUDA_TS_BLOCKS: most blocks a two-shot all-reduce
                                     takes (fewer leave SMs to overlapping compute) */
  cuda_ptr_attrs_fn ptr_attrs;
  devmem_driver_t drv;            /* the CUDA driver behind the user-buffer sharing */
  devmem_cuda_ctx_t drv_ctx;
  fdpass_t *mesh;                 /* sockets to the peers in other processes, or NULL */
  devmem_t *mem;                  /* exports and imports of user buffers (cuda_reg.c) */
  struct cuda_coloc *coloc;       /* the co-located path (cuda_coloc.c) */
} cuda_state_t;

/* The fail functions of TRY_AS (shm/check.h) for the CUDA transport: a CUDA runtime call, or a
 * launcher of the transport's kernels (which returns the launch's cudaError_t as an int), failed.
 * They clear CUDA's last error (the failure is handled here) and record "rank R: CALL failed:
 * CUDA's message" (a launch also names the collective) as the communicator's last error. */
static inline shmddp_status_t cuda_failed(shmddp_comm_t *comm, cudaError_t e, const char *call)
{
  (void)cudaGetLastError();
  return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: %s failed: %s", comm->rank, call,
                    cudaGetErrorString(e));
}
static inline shmddp_status_t cuda_launch_failed(shmddp_comm_t *comm, int e, const char *call)
{
  (void)cudaGetLastError();
  return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d, %s: %s failed: %s", comm->rank, comm->what,
                    call, cudaGetErrorString((cudaError_t)e));
}

static inline cuda_state_t *cuda_state(const shmddp_comm_t *comm) { return (cuda_state_t *)comm->dev; }
/* The rank's exchange area is shared by the segment's channels (shmddp_comm_dup): each
 * communicator uses its channel's share, so a duplicate can have its own CUDA transport. */
#define CUDA_XCHG_SHARE (SHM_XCHG_BYTES / SHM_CHANNELS)
static inline cuda_xchg_t *cuda_xchg(const shmddp_comm_t *comm, int rank)
{
  return (cuda_xchg_t *)((char *)shm_rank_xchg(comm->seg, rank) +
                         (size_t)comm->channel * CUDA_XCHG_SHARE);
}
cuda_kctl_t cuda_kctl(const shmddp_comm_t *comm);

/* Map rank p's allocation: through CUDA IPC, or (a rank of this process) its pointer as it is. */
cudaError_t cuda_open_peer(cuda_state_t *s, int p, cudaIpcMemHandle_t handle, uint64_t ptr,
                           int peer_device, void **out);

/* cuda_reg.c: exchange this call's buffers; out[i][r] is rank r's buffer i mapped here (NULL
 * where rank r passed none); len[i] is the bytes of buffer i the call touches on any rank (the
 * same on every rank). Waits for every peer to reach the same call on the host. When some rank's
 * buffer cannot be shared with a peer in another process, *staged is set on every rank alike and
 * out is not filled: the caller then takes a path that shares no user buffer. */
shmddp_status_t cuda_exchange(shmddp_comm_t *comm, int nbuf, const void *const *mine,
                              const size_t *len, shmddp_stream_t stream, void *out[][CUDA_MAXR],
                              int *staged);
/* The same for a call that shares one buffer: out[r] is rank r's. */
shmddp_status_t cuda_exchange_one(shmddp_comm_t *comm, const void *mine, size_t len,
                                  shmddp_stream_t stream, void *out[CUDA_MAXR], int *staged);
/* Publish what peers need to find this rank's process and sockets (before the init's barrier). */
void cuda_reg_publish(shmddp_comm_t *comm, cuda_state_t *s);
/* Set up the user-buffer sharing (collective, after that barrier): which peers share this
 * process, the socket mesh, the devmem state. */
shmddp_status_t cuda_reg_setup(shmddp_comm_t *comm, cuda_state_t *s);
/* Drop every peer buffer this rank mapped (the device is idle). */
void cuda_reg_release(cuda_state_t *s);

/* One collective call on device buffers, as the API entry made it: what the algorithms
 * (cuda_algos.h) and the co-located path take. */
typedef struct {
  coll_kind_t kind;
  const void *send; /* NULL where this rank passes none (the co-located path: a broadcast's or
                       scatter's non-root) */
  void *recv;       /* NULL where this rank passes none (the co-located path: a reduce's or
                       gather's non-root) */
  size_t count;     /* as the API call's count (per rank's block where there are blocks) */
  shmddp_dtype_t dtype;
  shmddp_op_t op;   /* 0 for the collectives that do not reduce */
  int root;         /* -1 for the collectives without one */
  shmddp_stream_t stream;
} cuda_call_t;

/* cuda_coloc.c: the co-located path. publish (before the init barrier that shows the exchange
 * area to the peers) creates the events and writes their handles and the GPU's identity; setup
 * (after it) works out the placement. */
shmddp_status_t cuda_coloc_publish(shmddp_comm_t *comm, cuda_state_t *s);
shmddp_status_t cuda_coloc_setup(shmddp_comm_t *comm, cuda_state_t *s);
/* Ranks on this rank's GPU (1: alone; 0 before setup). */
int cuda_coloc_shared(const shmddp_comm_t *comm);
/* req, or COLOC where auto should take the co-located path for a call on stream. */
shmddp_algo_t cuda_coloc_algo(const shmddp_comm_t *comm, shmddp_algo_t req, shmddp_stream_t stream);
/* 1 when ranks share a GPU and every one of them runs under MPS. */
int cuda_coloc_all_mps(const shmddp_comm_t *comm);
/* One call through the path. *staged: some rank's buffer cannot be shared (alike on every rank);
 * the protocol ran without work and the caller must run the call's staged version. */
shmddp_status_t cuda_coloc_run(shmddp_comm_t *comm, const cuda_call_t *call, int *staged);
/* shmddp_cuda_sync for a communicator that used the path: polls, watching the abort word. */
shmddp_status_t cuda_coloc_sync(shmddp_comm_t *comm, cudaStream_t stream);
/* Destroy the events (after the peers are done with them). 1: the group failed after co-located
 * calls, so the caller must leave the device alone (a stream may never drain). */
int cuda_coloc_release(shmddp_comm_t *comm, cuda_state_t *s);

/* cuda_ops.c: the device collectives' table. */
extern const struct coll_device_ops cuda_device_ops;

#endif
