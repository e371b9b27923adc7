/* group.c — ncclGroupStart/End. Outside a group a call runs at once. Inside, calls are queued
 * per thread and issued at the outermost ncclGroupEnd: each communicator's calls in the order
 * given (its send/recv afterwards, in the global pair order of coll.c), and the communicators
 * of the group each on a thread of their own, because one thread may drive several ranks of one
 * group (ncclCommInitAll, or a loop over per-GPU communicators) and each rank's call may wait for
 * the others. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/internal.h"

static _Thread_local int depth;
static _Thread_local nccl_call_t *queue;
static _Thread_local size_t nqueue, capqueue;

/* Run one call with the communicator marked busy (ncclCommAbort waits for it). */
static ncclResult_t run(const nccl_call_t *k)
{
  atomic_fetch_add(&k->comm->inflight, 1);
  ncclResult_t r = atomic_load(&k->comm->aborted)
                       ? nccl_fail(k->comm, ncclInvalidUsage, "the communicator was aborted")
                       : nccl_issue(k);
  atomic_fetch_sub(&k->comm->inflight, 1);
  return r;
}

ncclResult_t nccl_submit(const nccl_call_t *k)
{
  if (depth == 0) return run(k);
  if (nqueue == capqueue) {
    size_t cap = capqueue ? 2 * capqueue : 16;
    nccl_call_t *q = realloc(queue, cap * sizeof *q);
    if (!q) return nccl_fail(k->comm, ncclSystemError, "out of host memory queueing a call");
    queue = q;
    capqueue = cap;
  }
  queue[nqueue++] = *k;
  return k->kind == NCCL_OP_INIT ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
  depth++;
  return ncclSuccess;
}

typedef struct {
  ncclComm_t comm;
  nccl_call_t **calls;
  size_t n;
  ncclResult_t result;
} lane_t;

static int is_p2p(const nccl_call_t *k) { return k->kind == NCCL_OP_SEND || k->kind == NCCL_OP_RECV; }

/* The global order of a send/recv: its pair (lower, higher rank), then its sender. */
static long p2p_key(const nccl_call_t *k)
{
  int me = k->comm->rank, peer = k->root;
  int lo = me < peer ? me : peer, hi = me ^ peer ^ lo;
  int sender = k->kind == NCCL_OP_SEND ? me : peer;
  return ((long)lo * SHMDDP_MAX_RANKS + hi) * SHMDDP_MAX_RANKS + sender;
}

static void *run_lane(void *arg)
{
  lane_t *l = arg;
  l->result = ncclSuccess;
  const nccl_call_t *first = l->calls[0];
  int dev = first->kind == NCCL_OP_INIT ? first->device : l->comm->device;
  if (dev >= 0) cudaSetDevice(dev);
  /* Collectives in order, then send/recv sorted (stable) by the global pair order. */
  for (size_t i = 0; i < l->n && l->result == ncclSuccess; i++)
    if (!is_p2p(l->calls[i])) l->result = run(l->calls[i]);
  size_t np = 0;
  for (size_t i = 0; i < l->n; i++)
    if (is_p2p(l->calls[i])) l->calls[np++] = l->calls[i];
  for (size_t i = 1; i < np; i++)
    for (size_t j = i; j > 0 && p2p_key(l->calls[j]) < p2p_key(l->calls[j - 1]); j--) {
      nccl_call_t *t = l->calls[j];
      l->calls[j] = l->calls[j - 1];
      l->calls[j - 1] = t;
    }
  for (size_t i = 0; i < np && l->result == ncclSuccess; i++) l->result = run(l->calls[i]);
  return NULL;
}

ncclResult_t ncclGroupEnd(void)
{
  if (depth == 0)
    return nccl_fail(NULL, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--depth > 0) return ncclSuccess;
  size_t n = nqueue;
  nqueue = 0;
  if (n == 0) return ncclSuccess;
  lane_t *lanes = calloc(n, sizeof *lanes);
  nccl_call_t **ptrs = calloc(n, sizeof *ptrs);
  if (!lanes || !ptrs) {
    free(lanes);
    free(ptrs);
    return nccl_fail(NULL, ncclSystemError, "out of host memory issuing a group");
  }
  /* Lanes by communicator, in order of first appearance; calls keep their order. */
  size_t nl = 0, used = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    while (l < nl && lanes[l].comm != queue[i].comm) l++;
    if (l < nl) continue;
    lanes[nl].comm = queue[i].comm;
    lanes[nl].calls = ptrs + used;
    for (size_t j = i; j < n; j++)
      if (queue[j].comm == queue[i].comm) lanes[nl].calls[lanes[nl].n++] = &queue[j];
    used += lanes[nl].n;
    nl++;
  }
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess) {
    (void)cudaGetLastError();
    saved = -1;
  }
  if (nl == 1) {
    run_lane(&lanes[0]);
  } else {
    pthread_t *th = calloc(nl, sizeof *th);
    int *started = calloc(nl, sizeof *started);
    for (size_t l = 0; th && started && l < nl; l++)
      started[l] = pthread_create(&th[l], NULL, run_lane, &lanes[l]) == 0;
    for (size_t l = 0; l < nl; l++) {
      if (th && started && started[l]) pthread_join(th[l], NULL);
      else lanes[l].result = nccl_fail(lanes[l].comm, ncclSystemError, "cannot start a thread");
    }
    free(th);
    free(started);
  }
  if (saved >= 0) cudaSetDevice(saved);
  ncclResult_t r = ncclSuccess;
  for (size_t l = 0; l < nl && r == ncclSuccess; l++) r = lanes[l].result;
  free(lanes);
  free(ptrs);
  return r;
}
