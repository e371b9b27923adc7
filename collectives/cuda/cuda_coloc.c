/* cuda_coloc.c — the CUDA transport's co-located path: the protocol of coloc.c with interprocess
 * events, the buffer exchange of cuda_reg.c as its rendezvous, and one kernel per GPU
 * (coloc_kernel.cu) run by the group's leader, which reads every rank's input and writes the
 * outputs of the ranks on its GPU.
 *
 * Set-up: each rank creates two events (READY, DONE; cudaEventInterprocess, no timing) and
 * publishes their IPC handles, its GPU's UUID and its protocol word in its channel's share of the
 * exchange area (at the end of the share, after cuda_xchg_t). A peer's event is opened on first
 * use and kept (in-process peers' events are used as they are). The placement (ranks grouped by
 * UUID) is the same on every rank.
 *
 * Waits (SHMDDP_COLOC_WAIT, read once here when the transport is set up; each rank's own):
 * auto (the default) is stream when every rank that shares a GPU runs under MPS and host
 * otherwise (coloc_default_wait); host queries the peers' events with cudaEventQuery until they
 * have completed, so no stream ever waits for another context's event; stream makes the stream
 * wait for them (cudaStreamWaitEvent) and returns at once; leader waits on the host in leaders
 * and on the stream in members. coloc.c says why each default; bench/shared_gpu.sh compares
 * them.
 *
 * When: auto takes this path on every call of a group in which two ranks share a GPU, except
 * under CUDA-graph capture (no host step can be captured: captured calls use the in-kernel
 * algorithms, which are correct there but wait for the GPU's time slice); SHMDDP_ALGO=coloc
 * forces it for any placement (P2P needed), and then refuses capture. Under MPS too (each rank
 * publishes the driver's cudaDevAttrMpsEnabled beside its events, for shmddp_cuda_colocated_mps):
 * see coloc_use_path.
 *
 * Memory nobody else can map (cudaMallocAsync pools, managed memory, cuMem without a shareable
 * handle): the exchange says so alike on every rank and maps nothing. The call still goes through
 * the protocol, without work (so the published words and the events stay in step), and
 * cuda_coloc_run says it was staged: the caller then runs the collective's staged version (the
 * in-kernel algorithms over the segment or the scratch areas, which wait for the GPU's time
 * slice), ordered after every rank's READY by the protocol's events.
 *
 * Failure: a stream may wait on the event of a peer that died before its record ran (stream
 * waits), and such a wait never ends; host waits poll the group's abort word instead. So shmddp_cuda_sync polls (and returns the group's error), and a rank whose
 * group failed after co-located calls leaves its CUDA objects to the process's exit instead of
 * synchronizing the device to free them. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/coloc/coloc.h"
#include "collectives/coloc/coloc_jobs.h"
#include "collectives/coloc/coloc_kernel.h"
#include "collectives/cuda/cuda_state.h"
#include "shm/abort.h"
#include "shm/env.h"
#include "shm/wait.h"

typedef struct {
  _Alignas(SHM_LINE) _Atomic uint64_t word; /* coloc.c's protocol word */
  cudaIpcEventHandle_t handle[COLOC_NKINDS];
  uint64_t ptr[COLOC_NKINDS]; /* the events as this process sees them (in-process peers) */
  char key[COLOC_KEY_BYTES];  /* the GPU's UUID */
  int32_t mps;                /* 1: the driver runs this rank's context under MPS */
} coloc_xchg_t;

_Static_assert(sizeof(cuda_xchg_t) + sizeof(coloc_xchg_t) + SHM_LINE <= CUDA_XCHG_SHARE,
               "co-located exchange entry does not fit the channel's share");

struct cuda_coloc {
  coloc_state_t proto;
  cudaEvent_t own[COLOC_NKINDS];
  cudaEvent_t peer[COLOC_NKINDS][CUDA_MAXR]; /* opened on first use */
  unsigned char imported[COLOC_NKINDS][CUDA_MAXR];
  cudaEvent_t sync_ev; /* shmddp_cuda_sync's marker */
  int sms;            /* the GPU's multiprocessors (the kernel's launch fills them) */
  int wait;            /* SHMDDP_COLOC_WAIT: a coloc_wait_t, or -1 for auto */
};

static coloc_xchg_t *coloc_xchg(const shmddp_comm_t *comm, int rank)
{
  size_t at = (CUDA_XCHG_SHARE - sizeof(coloc_xchg_t)) & ~(size_t)(SHM_LINE - 1);
  return (coloc_xchg_t *)((char *)cuda_xchg(comm, rank) + at);
}

/* The events and the GPU's identity; a CUDA error leaves the key empty, which turns the path
 * off on every rank (the placement then fails on every rank alike). */
static cudaError_t make_events(struct cuda_coloc *c, coloc_xchg_t *x, int device)
{
  cudaError_t e = cudaSuccess;
  for (int k = 0; k < COLOC_NKINDS && e == cudaSuccess; k++) {
    e = cudaEventCreateWithFlags(&c->own[k], cudaEventDisableTiming | cudaEventInterprocess);
    if (e == cudaSuccess) e = cudaIpcGetEventHandle(&x->handle[k], c->own[k]);
    x->ptr[k] = (uint64_t)(uintptr_t)c->own[k];
  }
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->sync_ev, cudaEventDisableTiming);
  struct cudaDeviceProp prop;
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess) return e;
  int at = snprintf(x->key, sizeof x->key, "GPU-");
  for (int i = 0; i < 16; i++)
    at += snprintf(x->key + at, sizeof x->key - (size_t)at, "%02x", (unsigned char)prop.uuid.bytes[i]);
  c->sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 32;
  int mps = 0;
#if CUDART_VERSION >= 12000
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, device) != cudaSuccess) {
    (void)cudaGetLastError(); /* an older driver: not known, so not assumed */
    mps = 0;
  }
#endif
  x->mps = mps != 0;
  return cudaSuccess;
}

/* SHMDDP_COLOC_WAIT (shm/env.c): auto (the default: *wait -1, chosen at set-up by
 * coloc_default_wait once the group's placement is known), host, stream or leader; a value it does
 * not take is SHMDDP_ERR_INVALID with the message. */
static shmddp_status_t read_wait(shmddp_comm_t *comm, int *wait)
{
  const char *v = NULL;
  char err[256];
  int rc = shm_env_choice("SHMDDP_COLOC_WAIT", &v, err, sizeof err);
  if (rc < 0) return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: %s", comm->rank, err);
  *wait = rc && strcmp(v, "auto") != 0 ? coloc_wait_parse(v) : -1;
  return SHMDDP_OK;
}

shmddp_status_t cuda_coloc_publish(shmddp_comm_t *comm, cuda_state_t *s)
{
  struct cuda_coloc *c = calloc(1, sizeof *c);
  if (!c) return coll_error(comm, SHMDDP_ERR_NOMEM, "rank %d: out of host memory", comm->rank);
  s->coloc = c;
  TRY(read_wait(comm, &c->wait));
  coloc_xchg_t *x = coloc_xchg(comm, comm->rank);
  memset(x->key, 0, sizeof x->key);
  x->mps = 0;
  cudaError_t e = make_events(c, x, s->device);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    memset(x->key, 0, sizeof x->key);
    fprintf(stderr, "shmddp: warning: rank %d: no interprocess events (%s): ranks that share a "
            "GPU will use the in-kernel algorithms (each call waits for a time slice)\n",
            comm->rank, cudaGetErrorString(e));
  }
  return SHMDDP_OK;
}

shmddp_status_t cuda_coloc_setup(shmddp_comm_t *comm, cuda_state_t *s)
{
  char keys[CUDA_MAXR][COLOC_KEY_BYTES];
  _Atomic uint64_t *words[CUDA_MAXR];
  int mps[CUDA_MAXR];
  for (int r = 0; r < comm->nranks; r++) {
    memcpy(keys[r], coloc_xchg(comm, r)->key, COLOC_KEY_BYTES);
    words[r] = &coloc_xchg(comm, r)->word;
    mps[r] = coloc_xchg(comm, r)->mps == 1; /* anything else read from the segment: no */
  }
  coloc_plan_t plan;
  if (coloc_plan(&plan, comm->nranks, (const char(*)[COLOC_KEY_BYTES])keys) != 0)
    memset(&plan, 0, sizeof plan); /* a rank has no events: the path is off (nranks 0) */
  coloc_state_init(&s->coloc->proto, &plan, words);
  s->coloc->proto.all_mps = coloc_all_mps(&plan, mps);
  coloc_wait_t w = s->coloc->wait >= 0 ? (coloc_wait_t)s->coloc->wait
                                       : coloc_default_wait(s->coloc->proto.all_mps);
  s->coloc->proto.host_waits = coloc_host_waits(w, &plan, comm->rank);
  return SHMDDP_OK;
}

int cuda_coloc_shared(const shmddp_comm_t *comm)
{
  const cuda_state_t *s = cuda_state(comm);
  if (!s->coloc) return 0;
  const coloc_plan_t *p = &s->coloc->proto.plan;
  return __builtin_popcount(p->members[p->group[comm->rank]]);
}

static int capturing(cudaStream_t stream)
{
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1; /* e.g. the legacy stream while another captures: not a place for host steps */
  }
  return cs != cudaStreamCaptureStatusNone;
}

int cuda_coloc_all_mps(const shmddp_comm_t *comm)
{
  const cuda_state_t *s = cuda_state(comm);
  return s->coloc && s->coloc->proto.plan.shared && s->coloc->proto.all_mps;
}

shmddp_algo_t cuda_coloc_algo(const shmddp_comm_t *comm, shmddp_algo_t req, shmddp_stream_t stream)
{
  const cuda_state_t *s = cuda_state(comm);
  if (req != SHMDDP_ALGO_AUTO || !s->coloc || !s->coloc->proto.plan.shared) return req;
  const coloc_state_t *p = &s->coloc->proto;
  return coloc_use_path(&p->plan, capturing((cudaStream_t)stream))
             ? SHMDDP_ALGO_COLOC
             : req;
}

/* ---------------- one call ---------------- */

typedef struct {
  shmddp_comm_t *comm;
  cuda_state_t *s;
  const cuda_call_t *k;
  void *P[2][CUDA_MAXR]; /* [send, recv][rank], mapped here */
  int staged;            /* the exchange found a buffer it cannot share (alike on every rank) */
} ctx_t;

static shmddp_status_t op_record(void *vctx, int kind, uint64_t seq)
{
  ctx_t *c = vctx;
  (void)seq;
  TRY_AS(cuda_failed, c->comm, cudaEventRecord(c->s->coloc->own[kind], (cudaStream_t)c->k->stream));
  return SHMDDP_OK;
}

/* Rank peer's event kind as this process sees it (opened on first use). */
static shmddp_status_t peer_event(ctx_t *c, int peer, int kind, cudaEvent_t *ev)
{
  struct cuda_coloc *cc = c->s->coloc;
  if (!cc->peer[kind][peer]) {
    const coloc_xchg_t *x = coloc_xchg(c->comm, peer);
    if (c->s->peer_local[peer]) {
      cc->peer[kind][peer] = (cudaEvent_t)(uintptr_t)x->ptr[kind];
    } else {
      cudaIpcEventHandle_t h = x->handle[kind];
      TRY_AS(cuda_failed, c->comm, cudaIpcOpenEventHandle(&cc->peer[kind][peer], h));
      cc->imported[kind][peer] = 1;
    }
  }
  *ev = cc->peer[kind][peer];
  return SHMDDP_OK;
}

static shmddp_status_t op_wait(void *vctx, int peer, int kind, uint64_t seq)
{
  ctx_t *c = vctx;
  cudaEvent_t ev;
  (void)seq;
  TRY(peer_event(c, peer, kind, &ev));
  TRY_AS(cuda_failed, c->comm, cudaStreamWaitEvent((cudaStream_t)c->k->stream, ev, 0));
  return SHMDDP_OK;
}

static shmddp_status_t op_query(void *vctx, int peer, int kind, uint64_t seq, int *done)
{
  ctx_t *c = vctx;
  cudaEvent_t ev;
  (void)seq;
  TRY(peer_event(c, peer, kind, &ev));
  cudaError_t e = cudaEventQuery(ev);
  *done = e == cudaSuccess;
  if (e == cudaSuccess) return SHMDDP_OK;
  (void)cudaGetLastError(); /* so the leader's launch check cannot see "not ready" */
  if (e == cudaErrorNotReady) return SHMDDP_OK;
  return coll_error(c->comm, SHMDDP_ERR_CUDA, "rank %d, %s: querying rank %d's event: %s",
                    c->comm->rank, c->comm->what, peer, cudaGetErrorString(e));
}

/* The exchange is the rendezvous: it returns once every rank has published its buffers (the
 * bytes the call touches of each: coloc_jobs_lengths, the same on every rank). */
static shmddp_status_t op_rendezvous(void *vctx, uint64_t seq)
{
  ctx_t *c = vctx;
  const cuda_call_t *k = c->k;
  const void *mine[2] = {k->send, k->recv};
  size_t len[2];
  (void)seq;
  coloc_jobs_lengths(k->kind, k->count, k->dtype, c->comm->nranks, len);
  return cuda_exchange(c->comm, 2, mine, len, k->stream, c->P, &c->staged);
}

/* This leader's jobs (coloc_jobs.c). -1: a buffer is missing. */
static int build_jobs(const ctx_t *c, coloc_args_t *a)
{
  const cuda_call_t *k = c->k;
  const coloc_plan_t *p = &c->s->coloc->proto.plan;
  int g = p->group[c->comm->rank];
  coloc_work_t w = {.kind = k->kind, .count = k->count, .dtype = k->dtype, .op = k->op,
                    .root = k->root, .nranks = c->comm->nranks, .group = p->members[g],
                    .slice = g, .nslices = p->ngroups};
  for (int r = 0; r < w.nranks; r++) {
    w.send[r] = c->P[0][r];
    w.recv[r] = c->P[1][r];
  }
  return coloc_jobs_build(&w, a);
}

static shmddp_status_t op_work(void *vctx)
{
  ctx_t *c = vctx;
  if (c->staged) return SHMDDP_OK; /* no buffer was mapped: the caller stages the call */
  coloc_args_t a;
  if (build_jobs(c, &a) != 0)
    return coll_error(c->comm, SHMDDP_ERR_INTERNAL, "rank %d, %s: a peer's buffer is missing",
                      c->comm->rank, c->comm->what);
  if (a.njobs == 0) return SHMDDP_OK;
  int e = coloc_kernel_launch(&a, c->s->coloc->sms, c->k->stream);
  if (e != 0) {
    (void)cudaGetLastError();
    return coll_error(c->comm, SHMDDP_ERR_CUDA, "rank %d, %s: co-located kernel launch failed: %s",
                      c->comm->rank, c->comm->what, cudaGetErrorString((cudaError_t)e));
  }
  return SHMDDP_OK;
}

static const coloc_ops_t cuda_coloc_ops = {.record = op_record, .wait = op_wait, .query = op_query,
                                           .rendezvous = op_rendezvous, .work = op_work};

shmddp_status_t cuda_coloc_run(shmddp_comm_t *comm, const cuda_call_t *call, int *staged)
{
  cuda_state_t *s = cuda_state(comm);
  *staged = 0;
  if (!s->coloc || s->coloc->proto.plan.nranks == 0)
    return coll_error(comm, SHMDDP_ERR_UNSUPPORTED, "rank %d, %s: the co-located algorithm is "
                      "off (a rank could not create interprocess events)", comm->rank, comm->what);
  if (capturing((cudaStream_t)call->stream))
    return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                      "rank %d, %s: the co-located algorithm (SHMDDP_ALGO=coloc) cannot be "
                      "captured in a CUDA graph (it needs the host in every call); leave the "
                      "algorithm on auto, which captures the in-kernel algorithms",
                      comm->rank, comm->what);
  ctx_t c = {.comm = comm, .s = s, .k = call};
  shmddp_status_t st = coloc_call(comm, &s->coloc->proto, &cuda_coloc_ops, &c);
  *staged = st == SHMDDP_OK && c.staged;
  return st;
}

/* ---------------- waiting and teardown ---------------- */

/* The stream's marker, queried until it has completed (shm_poll's pending). Pending names this
 * rank itself: the wait is for no peer in particular (a peer that has finished and left is no
 * error here); a failed one raises the abort word (launcher or liveness watcher). */
typedef struct {
  shm_waiter_t w;
  cudaEvent_t ev;
  uint32_t self;
  cudaError_t failed;
} stream_wait_t;

static uint32_t stream_pending(shm_waiter_t *w)
{
  stream_wait_t *x = (stream_wait_t *)w;
  cudaError_t e = cudaEventQuery(x->ev);
  if (e == cudaErrorNotReady) return x->self;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    x->failed = e;
  }
  return 0;
}

shmddp_status_t cuda_coloc_sync(shmddp_comm_t *comm, cudaStream_t stream)
{
  struct cuda_coloc *c = cuda_state(comm)->coloc;
  if (c->proto.calls == 0 && !c->proto.plan.shared) {
    TRY_AS(cuda_failed, comm, cudaStreamSynchronize(stream));
    return SHMDDP_OK;
  }
  /* The stream may wait for a co-located peer: on its event (stream waits), or in a kernel that
   * spins on its flags (the in-kernel algorithms under MPS), which gives up only once the abort
   * word is raised. So poll, as every wait of the group does: a peer that has exited or an abort
   * ends the wait, and the sleeps are on the segment's wake word (seen from outside as a wait of
   * the group). No deadline: the stream's own work may take as long as it takes. */
  TRY_AS(cuda_failed, comm, cudaEventRecord(c->sync_ev, stream));
  stream_wait_t x = {{stream_pending, NULL, "waiting for the stream"}, c->sync_ev,
                     1u << comm->rank, cudaSuccess};
  char err[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_poll(comm->seg, comm->rank, &x.w, 1e9, err, sizeof err);
  if (st != SHMDDP_OK) {
    shmddp_status_t ast = shmddp_cuda_check(comm); /* the group's reason, when it has one */
    return ast != SHMDDP_OK ? ast : coll_error(comm, st, "rank %d, waiting for the stream: %s",
                                                comm->rank, err);
  }
  if (x.failed != cudaSuccess)
    return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: waiting for the stream: %s", comm->rank,
                      cudaGetErrorString(x.failed));
  return SHMDDP_OK;
}

int cuda_coloc_release(shmddp_comm_t *comm, cuda_state_t *s)
{
  struct cuda_coloc *c = s->coloc;
  if (!c) return 0;
  int used = c->proto.calls > 0 && c->proto.plan.nranks > 0;
  char msg[SHM_ABORT_MSG_BYTES];
  if (used && shm_abort_status(comm->seg, msg, sizeof msg) == SHMDDP_OK)
    (void)coloc_quiesce(comm, &c->proto);
  if (used && shm_abort_status(comm->seg, msg, sizeof msg) != SHMDDP_OK) {
    /* A stream may wait forever on a dead peer's event: freeing would block. */
    free(c);
    s->coloc = NULL;
    return 1;
  }
  for (int k = 0; k < COLOC_NKINDS; k++) {
    for (int r = 0; r < CUDA_MAXR; r++)
      if (c->imported[k][r]) cudaEventDestroy(c->peer[k][r]);
    if (c->own[k]) cudaEventDestroy(c->own[k]);
  }
  if (c->sync_ev) cudaEventDestroy(c->sync_ev);
  (void)cudaGetLastError();
  free(c);
  s->coloc = NULL;
  return 0;
}

int shmddp_cuda_colocated(const shmddp_comm_t *comm)
{
  if (!comm || !comm->dev || comm->dev_ops != &cuda_device_ops) return -1;
  return cuda_coloc_shared(comm);
}

int shmddp_cuda_colocated_mps(const shmddp_comm_t *comm)
{
  if (!comm || !comm->dev || comm->dev_ops != &cuda_device_ops) return -1;
  return cuda_coloc_all_mps(comm);
}
