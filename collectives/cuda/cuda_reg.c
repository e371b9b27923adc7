/* cuda_reg.c — user buffers shared between the ranks, per call: a call that needs the peers'
 * buffers describes its own (devmem.h: exported once per allocation, or per span of cuMem
 * chunks), publishes the descriptions in the exchange area (see cuda_state.h for the records) and
 * maps the peers' (once per export, range-checked on every use, dropped when the owner retires
 * them). The exchange is a host rendezvous: it returns once every peer has reached the same call,
 * which also detects a rank calling a different collective (SHMDDP_ERR_MISMATCH).
 * Set-up (cuda_reg_setup, collective): which peers share this process (a random per-process
 * token, never a pid: pids repeat across PID namespaces), and the socket mesh that carries cuMem
 * descriptors to the others (fdpass.h); the mesh is used only if every rank built its part. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "collectives/cuda/cuda_state.h"
#include "shm/abort.h"
#include "shm/env.h"
#include "shm/wait.h"

#define MESH_ACCEPT_S 30.0 /* peers connect right after a barrier: this only bounds a hang */

/* SHMDDP_CUDA_EXPORTS (shm/env.c): live exports per rank before the least recently used is
 * retired (default DEVMEM_EXPORTS_DEFAULT). Every rank may use its own value. */
static shmddp_status_t exports_setting(shmddp_comm_t *comm, size_t *out)
{
  long v = DEVMEM_EXPORTS_DEFAULT;
  char err[256];
  if (shm_env_count("SHMDDP_CUDA_EXPORTS", &v, err, sizeof err) < 0)
    return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: %s", comm->rank, err);
  *out = (size_t)v;
  return SHMDDP_OK;
}

typedef struct {
  shm_waiter_t w;
  shmddp_comm_t *comm;
  uint64_t xseq;
} xwait_t;

static uint32_t x_pending(shm_waiter_t *w)
{
  xwait_t *x = (xwait_t *)w;
  uint32_t mask = 0;
  for (int r = 0; r < x->comm->nranks; r++) {
    if (r == x->comm->rank) continue;
    cuda_xrec_t *rec = &cuda_xchg(x->comm, r)->rec[x->xseq & 1];
    if (atomic_load_explicit(&rec->seq, memory_order_acquire) != x->xseq) mask |= 1u << r;
  }
  return mask;
}

static shmddp_status_t x_check(shm_waiter_t *w, char *err, size_t errlen)
{
  return coll_check_peers(((xwait_t *)w)->comm, err, errlen);
}

static int sig_same(const coll_sig_t *a, const coll_sig_t *b)
{
  return a->seq == b->seq && a->kind == b->kind && a->count == b->count && a->dtype == b->dtype &&
         a->op == b->op && a->root == b->root && a->algo == b->algo;
}

/* A peer's record: its signature is ours (else the group is stopped with both calls named). */
static shmddp_status_t check_sig(shmddp_comm_t *comm, int r, const cuda_xrec_t *pr)
{
  if (sig_same(&pr->sig, &comm->cur)) return SHMDDP_OK;
  char a[96], b[96];
  coll_describe(&comm->cur, a, sizeof a);
  coll_describe(&pr->sig, b, sizeof b);
  shm_abort(comm->seg, SHMDDP_ERR_MISMATCH, comm->rank,
            "collective mismatch: rank %d called %s (algorithm %s) but rank %d called %s "
            "(algorithm %s); every rank must make the same calls in the same order",
            comm->rank, a, shmddp_algo_name(comm->cur.algo), r, b, shmddp_algo_name(pr->sig.algo));
  return coll_error(comm, SHMDDP_ERR_MISMATCH, "rank %d: %s called differently by rank %d",
                    comm->rank, a, r);
}

/* Stop the peers (they wait for this rank's record or kernel) with this rank's reason. */
static shmddp_status_t stop_group(shmddp_comm_t *comm, shmddp_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static shmddp_status_t stop_group(shmddp_comm_t *comm, shmddp_status_t st, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->last_error, sizeof comm->last_error, fmt, ap);
  va_end(ap);
  shm_abort(comm->seg, st, comm->rank, "%s", comm->last_error);
  return st;
}

/* A host step on a peer's buffer failed. If the group had stopped already, the peer may have left
 * the call, and freed the buffer, because of that: the group's reason is the one to report. */
static shmddp_status_t import_failed(shmddp_comm_t *comm, const char *err)
{
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t ast = shm_abort_status(comm->seg, msg, sizeof msg);
  if (ast != SHMDDP_OK) return coll_wait_failed(comm, ast, msg);
  return stop_group(comm, SHMDDP_ERR_CUDA, "rank %d, %s: %s", comm->rank, comm->what, err);
}

/* Whether the caller's stream is being captured into a graph (then nothing may wait for the
 * device: retirements of peer memory are put off to a later call). */
static int capturing(shmddp_stream_t stream)
{
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &cs) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1; /* unknown: do not wait */
  }
  return cs != cudaStreamCaptureStatusNone;
}

shmddp_status_t cuda_exchange(shmddp_comm_t *comm, int nbuf, const void *const *mine,
                              const size_t *len, shmddp_stream_t stream, void *out[][CUDA_MAXR],
                              int *staged)
{
  cuda_state_t *s = cuda_state(comm);
  *staged = 0;
  uint64_t xseq = ++s->xseq;
  cuda_xrec_t *rec = &cuda_xchg(comm, comm->rank)->rec[xseq & 1];
  char err[SHM_ABORT_MSG_BYTES];
  for (int i = 0; i < nbuf; i++) {
    memset(&rec->buf[i], 0, sizeof rec->buf[i]);
    if (mine[i] && devmem_export(s->mem, xseq, mine[i], len[i], &rec->buf[i], err, sizeof err) != 0)
      return stop_group(comm, SHMDDP_ERR_INVALID, "rank %d, %s: buffer %d: %s", comm->rank,
                        comm->what, i, err);
  }
  rec->sig = comm->cur;
  atomic_store_explicit(&rec->seq, xseq, memory_order_release);
  shm_wake_all(comm->seg);

  xwait_t xw = {{x_pending, x_check, comm->what}, comm, xseq};
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &xw.w, comm->timeout_s, err, sizeof err);
  if (st != SHMDDP_OK) return coll_wait_failed(comm, st, err);
  for (int r = 0; r < comm->nranks; r++) {
    const cuda_xrec_t *pr = &cuda_xchg(comm, r)->rec[xseq & 1];
    if (r != comm->rank && (st = check_sig(comm, r, pr)) != SHMDDP_OK) return st;
    for (int i = 0; i < nbuf; i++) *staged |= pr->buf[i].kind == DEVMEM_PRIVATE;
  }
  if (devmem_begin_imports(s->mem, xseq, !capturing(stream), err, sizeof err) != 0)
    return stop_group(comm, SHMDDP_ERR_CUDA, "rank %d, %s: %s", comm->rank, comm->what, err);
  /* Every rank maps what it was sent, staged or not, so no peer's descriptor lingers. */
  for (int r = 0; r < comm->nranks; r++) {
    const cuda_xrec_t *pr = &cuda_xchg(comm, r)->rec[xseq & 1];
    for (int i = 0; i < nbuf; i++) {
      out[i][r] = r == comm->rank ? (void *)mine[i] : NULL;
      devmem_desc_t d = pr->buf[i]; /* one read of the segment: checked and used alike */
      if (r == comm->rank || d.kind == DEVMEM_NONE || d.kind == DEVMEM_PRIVATE) continue;
      if (devmem_import(s->mem, xseq, r, &d, len[i], &out[i][r], err, sizeof err) != 0)
        return import_failed(comm, err);
    }
  }
  return SHMDDP_OK;
}

shmddp_status_t cuda_exchange_one(shmddp_comm_t *comm, const void *mine, size_t len,
                                  shmddp_stream_t stream, void *out[CUDA_MAXR], int *staged)
{
  return cuda_exchange(comm, 1, &mine, &len, stream, (void *(*)[CUDA_MAXR])out, staged);
}

static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char token[16];
static pid_t token_pid; /* the process that drew it: a forked child draws its own */

/* This process's token (random, drawn once per process). */
static void proc_token(unsigned char out[16])
{
  pthread_mutex_lock(&token_lock);
  if (token_pid != getpid()) {
    token_pid = getpid();
    if (getrandom(token, sizeof token, 0) != (ssize_t)sizeof token) {
      /* No entropy source: the address of this table and the pid still differ per process of
       * one namespace, and the mesh refuses other users anyway. */
      uintptr_t a = (uintptr_t)&token;
      memcpy(token, &a, sizeof a);
      memcpy(token + 8, &token_pid, sizeof token_pid);
    }
  }
  memcpy(out, token, sizeof token);
  pthread_mutex_unlock(&token_lock);
}

void cuda_reg_publish(shmddp_comm_t *comm, cuda_state_t *s)
{
  cuda_xchg_t *x = cuda_xchg(comm, comm->rank);
  proc_token(x->proc_token);
  size_t nl = 0;
  char err[256];
  x->sock_name_len = 0;
  if (comm->nranks > 1 &&
      fdpass_listen(&s->mesh, comm->rank, comm->nranks, x->sock_name, &nl, err, sizeof err) == 0)
    x->sock_name_len = (uint32_t)nl;
}

/* After a barrier: connect to the lower ranks in other processes, barrier, accept the higher;
 * 1 when this rank's part of the mesh is complete. */
static int mesh_connect(shmddp_comm_t *comm, cuda_state_t *s, shmddp_status_t *st)
{
  int ok = s->mesh != NULL;
  unsigned want = 0;
  char err[256] = "";
  for (int p = 0; p < comm->nranks; p++) {
    const cuda_xchg_t *px = cuda_xchg(comm, p);
    if (p == comm->rank || s->peer_local[p]) continue;
    if (px->sock_name_len == 0 || px->sock_name_len > FDPASS_NAME_BYTES) ok = 0;
    else if (p < comm->rank && ok)
      ok = fdpass_connect(s->mesh, p, px->sock_name, px->sock_name_len, err, sizeof err) == 0;
    else if (p > comm->rank)
      want |= 1u << p;
  }
  *st = shmddp_barrier(comm);
  if (*st == SHMDDP_OK && s->mesh)
    ok &= fdpass_accept(s->mesh, want, MESH_ACCEPT_S, err, sizeof err) == 0;
  if (!ok && err[0] && shm_env_is("SHMDDP_NCCL_DEBUG", "1"))
    fprintf(stderr, "shmddp: rank %d: no descriptor-passing sockets (%s): cuMem buffers are "
            "staged\n", comm->rank, err);
  return ok;
}

shmddp_status_t cuda_reg_setup(shmddp_comm_t *comm, cuda_state_t *s)
{
  size_t max_exports = DEVMEM_EXPORTS_DEFAULT;
  TRY(exports_setting(comm, &max_exports));
  unsigned char mine[16];
  proc_token(mine);
  int nremote = 0;
  for (int p = 0; p < comm->nranks; p++) {
    s->peer_local[p] = p != comm->rank &&
                       memcmp(cuda_xchg(comm, p)->proc_token, mine, sizeof mine) == 0;
    nremote += p != comm->rank && !s->peer_local[p];
  }
  s->all_local = nremote == 0;
  shmddp_status_t st = SHMDDP_OK;
  int32_t ok = mesh_connect(comm, s, &st);
  if (st == SHMDDP_OK) /* the mesh only if every rank has its part */
    st = shmddp_all_reduce(comm, &ok, &ok, 1, SHMDDP_I32, SHMDDP_MIN, SHMDDP_HOST);
  if (st != SHMDDP_OK) return st;
  if (!ok || nremote == 0) {
    fdpass_close(s->mesh);
    s->mesh = NULL;
  }
  char err[256];
  s->drv_ctx.device = s->device;
  if (devmem_cuda_driver(&s->drv, &s->drv_ctx, err, sizeof err) != 0)
    return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d: %s", comm->rank, err);
  s->mem = devmem_new(&s->drv, s->mesh, comm->rank, comm->nranks, max_exports);
  if (!s->mem) return coll_error(comm, SHMDDP_ERR_NOMEM, "rank %d: out of host memory", comm->rank);
  for (int p = 0; p < comm->nranks; p++) devmem_set_local(s->mem, p, s->peer_local[p]);
  return SHMDDP_OK;
}

void cuda_reg_release(cuda_state_t *s)
{
  devmem_free(s->mem);
  s->mem = NULL;
  fdpass_close(s->mesh);
  s->mesh = NULL;
  (void)cudaGetLastError();
}

shmddp_status_t shmddp_cuda_register(shmddp_comm_t *comm, void *ptr, size_t bytes, void **handle)
{
  if (!comm || !handle) return SHMDDP_ERR_INVALID;
  *handle = NULL;
  if (comm->dev_ops != &cuda_device_ops)
    return coll_error(comm, SHMDDP_ERR_INVALID, "shmddp_cuda_register: the communicator has no "
                      "CUDA transport (shmddp_comm_init_cuda)");
  cuda_state_t *s = cuda_state(comm);
  uint64_t reg = 0;
  devmem_kind_t kind;
  char err[256];
  if (cudaSetDevice(s->device) != cudaSuccess) (void)cudaGetLastError();
  if (devmem_register(s->mem, ptr, bytes, &reg, &kind, err, sizeof err) != 0)
    return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: cannot register %p (%zu bytes): %s",
                      comm->rank, ptr, bytes, err);
  *handle = (void *)(uintptr_t)reg;
  return SHMDDP_OK;
}

shmddp_status_t shmddp_cuda_deregister(shmddp_comm_t *comm, void *handle)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  if (comm->dev_ops != &cuda_device_ops)
    return coll_error(comm, SHMDDP_ERR_INVALID, "shmddp_cuda_deregister: the communicator has "
                      "no CUDA transport");
  char err[256];
  if (devmem_deregister(cuda_state(comm)->mem, (uint64_t)(uintptr_t)handle, err, sizeof err) != 0)
    return coll_error(comm, SHMDDP_ERR_INVALID, "rank %d: %s", comm->rank, err);
  return SHMDDP_OK;
}

shmddp_status_t shmddp_cuda_mem_stats(const shmddp_comm_t *comm, size_t *exports, size_t *imports)
{
  if (!comm || comm->dev_ops != &cuda_device_ops) return SHMDDP_ERR_INVALID;
  devmem_stats_t st;
  devmem_stats(cuda_state(comm)->mem, &st);
  if (exports) *exports = st.exports;
  if (imports) *imports = st.imports;
  return SHMDDP_OK;
}
