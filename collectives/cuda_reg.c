/* cuda_reg.c — user buffers shared between the ranks: each allocation is exported once (IPC
 * handle of its base; calls send the offset), each peer allocation is opened once per rank and
 * kept until teardown (deduplicated by the exporter's allocation id), and a call that needs the
 * peers' buffers exchanges them through the exchange area (see cuda_state.h for the protocol).
 * The exchange is a host rendezvous: it returns once every peer has reached the same call, which
 * also detects a rank calling a different collective (SHMDDP_ERR_MISMATCH). */
#include "config.h"

#include <cuda.h>
#include <stdio.h>
#include <string.h>

#include "collectives/cuda_state.h"
#include "shm/abort.h"
#include "shm/wait.h"

/* The allocation holding ptr, exported (cached by allocation id). */
static shmddp_status_t export_own(shmddp_comm_t *comm, cuda_state_t *s, const void *ptr,
                                  cuda_xbuf_t *out)
{
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long id = 0;
  void *data[3] = {&base, &size, &id};
  int r = s->ptr_attrs(3, (int *)attrs, data, (unsigned long long)(uintptr_t)ptr);
  if (r != 0 || base == 0)
    return coll_error(comm, SHMDDP_ERR_INVALID,
                      "rank %d, %s: buffer %p is not device memory of this GPU (cuPointerGetAttributes "
                      "error %d); device collectives need buffers from cudaMalloc",
                      comm->rank, comm->what, ptr, r);
  cuda_own_t *o = NULL;
  for (int i = 0; i < s->nown; i++)
    if (s->own[i].bufid == id) o = &s->own[i];
  if (!o) {
    if (s->nown == CUDA_OWN_MAX)
      return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                        "rank %d: more than %d distinct allocations used in device collectives; "
                        "reuse buffers (e.g. one arena)", comm->rank, CUDA_OWN_MAX);
    o = &s->own[s->nown];
    cudaError_t e = cudaIpcGetMemHandle(&o->handle, (void *)(uintptr_t)base);
    if (e != cudaSuccess && s->all_local) {
      /* Peers in this process use the address; no handle needed (e.g. cudaMallocAsync). */
      (void)cudaGetLastError();
      memset(&o->handle, 0, sizeof o->handle);
      e = cudaSuccess;
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                        "rank %d, %s: cannot share buffer %p with the peers (cudaIpcGetMemHandle: "
                        "%s); allocate device buffers with cudaMalloc (not cudaMallocAsync or "
                        "managed memory)", comm->rank, comm->what, ptr, cudaGetErrorString(e));
    }
    o->bufid = id;
    o->base = (uintptr_t)base;
    o->size = size;
    s->nown++;
  }
  out->handle = o->handle;
  out->base = (uint64_t)o->base;
  out->bufid = o->bufid;
  out->offset = (uint64_t)((uintptr_t)ptr - o->base);
  out->present = 1;
  return SHMDDP_OK;
}

/* Peer p's buffer described by b, mapped into this process. */
static shmddp_status_t map_peer(shmddp_comm_t *comm, cuda_state_t *s, int p, const cuda_xbuf_t *b,
                                void **out)
{
  if (s->peer_local[p]) {
    *out = (unsigned char *)(uintptr_t)b->base + b->offset;
    return SHMDDP_OK;
  }
  cuda_peer_map_t *m = NULL;
  for (int i = 0; i < s->npeer_map[p]; i++)
    if (s->peer_map[p][i].bufid == b->bufid) m = &s->peer_map[p][i];
  if (!m) {
    if (s->npeer_map[p] == CUDA_PEER_MAX)
      return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                        "rank %d: rank %d used more than %d distinct allocations in device "
                        "collectives; reuse buffers", comm->rank, p, CUDA_PEER_MAX);
    void *base = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&base, b->handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return coll_error(comm, SHMDDP_ERR_CUDA, "rank %d, %s: cannot open rank %d's buffer: %s",
                        comm->rank, comm->what, p, cudaGetErrorString(e));
    }
    m = &s->peer_map[p][s->npeer_map[p]++];
    m->bufid = b->bufid;
    m->base = base;
  }
  *out = (unsigned char *)m->base + b->offset;
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

shmddp_status_t cuda_exchange(shmddp_comm_t *comm, int nbuf, const void *const *mine,
                              void *out[][CUDA_MAXR])
{
  cuda_state_t *s = cuda_state(comm);
  uint64_t xseq = ++s->xseq;
  cuda_xrec_t *rec = &cuda_xchg(comm, comm->rank)->rec[xseq & 1];
  for (int i = 0; i < nbuf; i++) {
    memset(&rec->buf[i], 0, sizeof rec->buf[i]);
    if (mine[i]) {
      shmddp_status_t st = export_own(comm, s, mine[i], &rec->buf[i]);
      if (st != SHMDDP_OK) {
        /* The peers would wait for this record: stop them with the reason. */
        shm_abort(comm->seg, st, comm->rank, "%s", comm->last_error);
        return st;
      }
    }
  }
  rec->sig = comm->cur;
  atomic_store_explicit(&rec->seq, xseq, memory_order_release);
  shm_wake_all(comm->seg);

  xwait_t xw = {{x_pending, x_check, comm->what}, comm, xseq};
  char err[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &xw.w, comm->timeout_s, err, sizeof err);
  if (st != SHMDDP_OK) return coll_wait_failed(comm, st, err);
  for (int r = 0; r < comm->nranks; r++) {
    for (int i = 0; i < nbuf; i++) out[i][r] = NULL;
    if (r == comm->rank) {
      for (int i = 0; i < nbuf; i++) out[i][r] = (void *)mine[i];
      continue;
    }
    const cuda_xrec_t *pr = &cuda_xchg(comm, r)->rec[xseq & 1];
    if (!sig_same(&pr->sig, &comm->cur)) {
      char a[96], b[96];
      coll_describe(&comm->cur, a, sizeof a);
      coll_describe(&pr->sig, b, sizeof b);
      shm_abort(comm->seg, SHMDDP_ERR_MISMATCH, comm->rank,
                "collective mismatch: rank %d called %s (algorithm %s) but rank %d called %s "
                "(algorithm %s); every rank must make the same calls in the same order",
                comm->rank, a, shmddp_algo_name(comm->cur.algo), r, b,
                shmddp_algo_name(pr->sig.algo));
      return coll_error(comm, SHMDDP_ERR_MISMATCH, "rank %d: %s called differently by rank %d",
                        comm->rank, a, r);
    }
    for (int i = 0; i < nbuf; i++) {
      if (!pr->buf[i].present) continue;
      st = map_peer(comm, s, r, &pr->buf[i], &out[i][r]);
      if (st != SHMDDP_OK) {
        shm_abort(comm->seg, st, comm->rank, "%s", comm->last_error);
        return st;
      }
    }
  }
  return SHMDDP_OK;
}

void cuda_reg_release(cuda_state_t *s)
{
  for (int p = 0; p < CUDA_MAXR; p++) {
    for (int i = 0; i < s->npeer_map[p]; i++) cudaIpcCloseMemHandle(s->peer_map[p][i].base);
    s->npeer_map[p] = 0;
  }
  s->nown = 0;
  (void)cudaGetLastError();
}
