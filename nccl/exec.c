/* exec.c — the executor: runs one call, or the calls of a group; each call through init.c (what
 * it runs on, made on first need) and then xlate.c (the call in shmddp's terms).
 *
 * A group's calls are split into lanes, one per communicator (in order of first appearance).
 * Each lane runs its collectives in the order given, then its send/recv: copies to oneself
 * first, then the others in one global order (lower rank, higher rank, sender), which every
 * rank follows, so no pattern of sends and receives waits in a cycle. Lanes run each on a
 * thread of their own when there are several, because one thread may drive several ranks of a
 * group (ncclCommInitAll, or a loop over per-GPU communicators) and each rank's call may wait
 * for the others.
 *
 * A call that fails after it reached shmddp may have left peers committed to a call this rank
 * will not finish; the executor then aborts the communicator's whole group with the reason, so
 * every peer's pending call fails within about a second instead of waiting (NCCL has no timeout,
 * and neither do we by default). Abort is group-wide: the communicator is unusable afterwards. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "nccl/internal.h"

static void abort_on_failure(const nccl_call_t *k, ncclResult_t r)
{
  if (r == ncclSuccess || r == ncclInProgress) return;
  char reason[600];
  snprintf(reason, sizeof reason, "rank %d failed in %s: %s", k->comm->rank, k->fn,
           k->comm->last_error);
  nccl_abort_group(k->comm, reason);
}

/* Run one call: an init joins its group; any other call runs, in shmddp's terms, on what
 * init.c makes ready for it (the group, or the pair with its peer). The caller holds the
 * communicator busy: ncclCommAbort waits for that, and marks it aborted first (then aborts its
 * group itself), so the next call of a lane stops at the first line — the state now, not the
 * argument checked when the call was made. */
static ncclResult_t run(const nccl_call_t *k)
{
  if (atomic_load(&k->comm->aborted))
    return nccl_fail(k->comm, ncclInvalidUsage, "%s: the communicator was aborted", k->fn);
  if (k->kind == NCCL_CALL_INIT) return nccl_init_run(k);
  shmddp_comm_t *c;
  ncclResult_t r = nccl_init_transport(k, &c);
  if (r == ncclSuccess) r = nccl_xlate(k, c);
  abort_on_failure(k, r);
  return r;
}

ncclResult_t nccl_exec_one(const nccl_call_t *k)
{
  atomic_fetch_add(&k->comm->inflight, 1);
  ncclResult_t r = run(k);
  atomic_fetch_sub(&k->comm->inflight, 1);
  return r;
}

typedef struct {
  ncclComm_t comm;
  nccl_call_t **calls;
  size_t n;
  ncclResult_t result;
} lane_t;

static int is_p2p(const nccl_call_t *k)
{
  return k->kind == NCCL_CALL_SEND || k->kind == NCCL_CALL_RECV;
}

static int is_self(const nccl_call_t *k) { return is_p2p(k) && k->root == k->comm->rank; }

/* The global order of a send/recv: its pair (lower, higher rank), then its sender. */
static long p2p_key(const nccl_call_t *k)
{
  int me = k->comm->rank, peer = k->root;
  int lo = me < peer ? me : peer, hi = me ^ peer ^ lo;
  int sender = k->kind == NCCL_CALL_SEND ? me : peer;
  return ((long)lo * SHMDDP_MAX_RANKS + hi) * SHMDDP_MAX_RANKS + sender;
}

/* Keep the lane's send/recv to peers (sorted, stable, by p2p_key) at calls[0..*np), its copies
 * to oneself at calls[*np..*np + *nself). */
static void order_p2p(lane_t *l, size_t *np, size_t *nself)
{
  size_t a = 0, b = 0;
  nccl_call_t *self[l->n > 0 ? l->n : 1];
  for (size_t i = 0; i < l->n; i++) {
    if (is_self(l->calls[i])) self[b++] = l->calls[i];
    else if (is_p2p(l->calls[i])) l->calls[a++] = l->calls[i];
  }
  for (size_t i = 1; i < a; i++)
    for (size_t j = i; j > 0 && p2p_key(l->calls[j]) < p2p_key(l->calls[j - 1]); j--) {
      nccl_call_t *t = l->calls[j];
      l->calls[j] = l->calls[j - 1];
      l->calls[j - 1] = t;
    }
  for (size_t i = 0; i < b; i++) l->calls[a + i] = self[i];
  *np = a;
  *nself = b;
}

/* The lane's calls, in the order described at the top; the communicator is busy throughout. */
static ncclResult_t lane_calls(lane_t *l)
{
  nccl_dev_select(l->comm->device); /* none yet when the lane starts with its init */
  ncclResult_t r = ncclSuccess;
  for (size_t i = 0; i < l->n && r == ncclSuccess; i++)
    if (!is_p2p(l->calls[i])) r = run(l->calls[i]);
  if (r != ncclSuccess) return r;
  size_t np, nself;
  order_p2p(l, &np, &nself);
  if (nself) {
    r = nccl_xlate_self(l->calls + np, nself);
    abort_on_failure(l->calls[np], r);
  }
  for (size_t i = 0; i < np && r == ncclSuccess; i++) r = run(l->calls[i]);
  return r;
}

static void *run_lane(void *arg)
{
  lane_t *l = arg;
  atomic_fetch_add(&l->comm->inflight, 1);
  l->result = lane_calls(l);
  atomic_fetch_sub(&l->comm->inflight, 1);
  return NULL;
}

/* Lanes by communicator, in order of first appearance; calls keep their order. */
static size_t make_lanes(nccl_call_t *calls, size_t n, lane_t *lanes, nccl_call_t **ptrs)
{
  size_t nl = 0, used = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = 0;
    while (l < nl && lanes[l].comm != calls[i].comm) l++;
    if (l < nl) continue;
    lanes[nl].comm = calls[i].comm;
    lanes[nl].calls = ptrs + used;
    for (size_t j = i; j < n; j++)
      if (calls[j].comm == calls[i].comm) lanes[nl].calls[lanes[nl].n++] = &calls[j];
    used += lanes[nl].n;
    nl++;
  }
  return nl;
}

static void run_lanes(lane_t *lanes, size_t nl)
{
  if (nl == 1) {
    run_lane(&lanes[0]);
    return;
  }
  pthread_t th[nl];
  int started[nl];
  for (size_t l = 0; l < nl; l++)
    started[l] = pthread_create(&th[l], NULL, run_lane, &lanes[l]) == 0;
  for (size_t l = 0; l < nl; l++) {
    if (started[l]) pthread_join(th[l], NULL);
    else lanes[l].result = nccl_fail(lanes[l].comm, ncclSystemError, "cannot start a thread");
  }
}

ncclResult_t nccl_exec_group(nccl_call_t *calls, size_t n)
{
  if (n == 0) return ncclSuccess;
  lane_t *lanes = calloc(n, sizeof *lanes);
  nccl_call_t **ptrs = calloc(n, sizeof *ptrs);
  if (!lanes || !ptrs) {
    free(lanes);
    free(ptrs);
    return nccl_fail(NULL, ncclSystemError, "out of host memory issuing a group");
  }
  size_t nl = make_lanes(calls, n, lanes, ptrs);
  int saved = nccl_dev_current();
  run_lanes(lanes, nl);
  if (saved >= 0) nccl_dev_select(saved);
  ncclResult_t r = ncclSuccess;
  for (size_t l = 0; l < nl && r == ncclSuccess; l++) r = lanes[l].result;
  free(lanes);
  free(ptrs);
  return r;
}
