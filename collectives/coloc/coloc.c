/* coloc.c — the placement of ranks on devices, and the protocol that orders the streams of ranks
 * sharing a GPU without any kernel spinning on a peer.
 *
 * Why. Without MPS, the CUDA contexts of processes sharing a GPU take turns (time slices of about
 * 2 ms). A kernel that spins on a flag written by a peer's kernel keeps its context's turn while
 * the peer cannot run, so each such collective costs a time slice. A stream waiting on an event,
 * in contrast, gives the GPU away; and the host of each rank is a process of its own, so the host
 * can wait for the peers cheaply. Here the host waits (on words in the segment) and the GPU only
 * waits on events whose record is known to exist.
 *
 * Each group (ranks on one device) has a leader, its lowest rank; L is the set of leaders. Call
 * k (the k-th call through this protocol, the same k on every rank) on rank r:
 *   1. record READY_r(k) on the stream (r's input is ready and its output no longer in use);
 *   2. rendezvous: publish k (with the buffers) and wait until every rank has (host); then open
 *      (or check) every peer's buffers on the host;
 *   3. leader: make the stream wait for READY_q(k) of every other rank q, enqueue the work (read
 *      every rank's input, reduce in rank order, write the outputs of the group's ranks), record
 *      DONE_r(k); every rank: publish word_r = 2k-1 (host), which also says that r is done with
 *      its peers' buffers on the host;
 *   4. wait until word_q >= 2k-1 for every other rank q (host), make the stream wait for DONE_g(k)
 *      of every other leader g, publish word_r = 2k, return.
 * Teardown (coloc_quiesce): wait until word_q >= 2·calls for every rank q that is still there.
 *
 * Proof sketch. (a) Every wait sees the record meant for it — an event is recorded again only
 * once every wait on its previous record has been enqueued, so one event per kind and rank is
 * enough (no ring): a leader enqueues its wait on READY_q(k) after q's publish in step 2 (so after
 * READY_q(k)) and before its own 2k-1; q records READY_q(k+1) only after returning from call k,
 * which needs the 2k-1 of every leader. A rank enqueues its wait on DONE_g(k) after seeing g's
 * 2k-1 (so after DONE_g(k)) and before returning from call k; g records DONE_g(k+1) only after
 * the rendezvous of call k+1, which needs that rank's publish of k+1, made after it returned from
 * k. Had an event been recorded again too early, the wait would take the newer record: it would
 * wait too long, or forever, since DONE_g(k+1) depends on the waiting rank's READY(k+1).
 * (b) No cycle: READY_q(k) follows only q's work before call k; DONE_g(k) follows the READY(k)s
 * and g's work; a rank's stream passes call k after the DONE(k)s. Ordered by (call, phase), every
 * dependency points backwards. (c) Buffers: the work touches rank q's input and output only after
 * READY_q(k) — q's earlier stream work on them is finished — and q's stream continues only after
 * DONE(k) of every leader, i.e. after every read and write of them. (d) A rank destroys its events
 * only after every peer has enqueued its last wait on them: peers wait on a non-leader's READY
 * before the 2k-1 it sees before returning, and on a leader's DONE before their 2k, which the
 * leader's teardown waits for. (e) The result is bitwise the same on every rank: every leader
 * reduces all inputs in rank order with the same code. (f) Host accesses: in step 2 a rank opens
 * and checks its peers' buffers on the host (a CUDA IPC open; in-process, the pointer's
 * classification), outside any stream order, so (c) does not cover them. An owner may free a
 * buffer as soon as its call returns (a caching allocator emptying its cache, a test freeing at
 * once); an open of freed memory fails ("operation not permitted"), and in-process the pointer
 * is no longer device memory. Every rank publishes 2k-1 only after its host accesses of call k,
 * and no rank returns from call k before it has seen every other rank's 2k-1: no buffer of call k
 * is freed while a peer can still touch it on the host. The extra wait costs a leader the
 * members' host steps, which run while it enqueues its work.
 *
 * Where a rank waits (coloc_wait_t, each rank's own choice). Above, "make the stream wait" is
 * a stream wait (cudaStreamWaitEvent). A rank that waits on the host instead queries the event
 * at the same point of the protocol until it has completed, and goes on only then: its host
 * waits where its stream would have, so (a) to (e) hold as they are — a query runs in the same
 * window as the stream wait it replaces, after the record it is meant for was published and
 * before the publish that lets that event be recorded again, and what it waits for has
 * completed, not only been ordered. Why: a stream that waits for another context's event seems
 * to keep its context's turn on the GPU until the turn's time slice runs out (all-reduces with
 * stream waits cost about a time slice per context and call, at any size: see
 * bench/results/shared_gpu_1xh200_summary.txt; dev/coloc_handoff compares the ways of waiting),
 * while a context with no work gives the GPU up at once. With host waits no stream ever waits for another context. The price: the call
 * blocks its host, the leader's until every rank's input is ready, a member's until the result
 * is; calls on several communicators must then come in the same order on every rank (as NCCL
 * asks anyway), or the hosts wait for each other.
 *
 * Host cost per call: one rendezvous and one wait for every rank's 2k-1 (and the host waits).
 * A CUDA graph cannot hold host steps, so captured calls do not come here (cuda_ops.c).
 *
 * Under MPS (every rank that shares a device says so at set-up) the contexts do not take turns:
 * the kernels of all ranks on a GPU run side by side and a hand-over costs what it costs in one
 * process, so this protocol costs little more than a hand-over per call (see
 * bench/results/shared_gpu_mps2_1xh200.txt) and its one kernel reads every input at the GPU's
 * full bandwidth. A stream wait then costs no more than a host wait, and it leaves the host
 * free: host waits block each caller until the GPU reaches the call, which costs an eager
 * framework its run-ahead at every collective (PyTorch DDP on ranks sharing a GPU is much slower
 * with host waits: bench/results/shared_gpu_wait_1xh200.txt). So stream waits are the default
 * there (coloc_default_wait). Calls still come here at every size: the
 * in-kernel algorithms would spin on a peer whose kernel may be queued behind its own compute
 * (coloc_use_path). Captured calls take them, under MPS without the wait for a time slice. */
#include "config.h"

#include "collectives/coloc/coloc.h"

#include <stdio.h>
#include <string.h>

#include "shm/abort.h"
#include "shm/wait.h"

static const char *const wait_names[COLOC_NWAITS] = {"host", "stream", "leader"};

int coloc_wait_parse(const char *s)
{
  for (int w = 0; s && w < COLOC_NWAITS; w++)
    if (strcmp(s, wait_names[w]) == 0) return w;
  return -1;
}

const char *coloc_wait_name(coloc_wait_t w)
{
  return w >= 0 && w < COLOC_NWAITS ? wait_names[w] : "?";
}

coloc_wait_t coloc_default_wait(int all_mps)
{
  return all_mps ? COLOC_WAIT_STREAM : COLOC_WAIT_HOST;
}

int coloc_host_waits(coloc_wait_t w, const coloc_plan_t *p, int rank)
{
  if (w == COLOC_WAIT_LEADER) return rank >= 0 && rank < p->nranks && (p->leaders >> rank & 1);
  return w == COLOC_WAIT_HOST;
}

int coloc_plan(coloc_plan_t *p, int nranks, const char (*keys)[COLOC_KEY_BYTES])
{
  memset(p, 0, sizeof *p);
  if (nranks < 1 || nranks > SHMDDP_MAX_RANKS) return -1;
  for (int r = 0; r < nranks; r++)
    if (keys[r][0] == '\0' || memchr(keys[r], '\0', COLOC_KEY_BYTES) == NULL) return -1;
  p->nranks = nranks;
  for (int r = 0; r < nranks; r++) {
    int g = 0;
    while (g < p->ngroups && strcmp(keys[p->leader[g]], keys[r]) != 0) g++;
    if (g == p->ngroups) {
      p->leader[g] = r;
      p->leaders |= 1u << r;
      p->ngroups++;
    }
    p->group[r] = g;
    p->members[g] |= 1u << r;
    if (p->members[g] != 1u << r) p->shared = 1;
  }
  return 0;
}

int coloc_all_mps(const coloc_plan_t *p, const int *mps)
{
  if (!p->shared) return 0;
  for (int r = 0; r < p->nranks; r++) {
    uint32_t g = p->members[p->group[r]];
    if ((g & (g - 1)) != 0 && !mps[r]) return 0; /* r shares its device and is not under MPS */
  }
  return 1;
}

int coloc_use_path(const coloc_plan_t *p, int capturing)
{
  return p->shared && !capturing;
}

void coloc_describe(const coloc_plan_t *p, const char *const *names, char *buf, size_t len)
{
  size_t at = 0;
  buf[0] = '\0';
  for (int g = 0; g < p->ngroups && at < len; g++) {
    char ranks[64];
    shm_format_ranks(p->members[g], ranks, sizeof ranks);
    int one = (p->members[g] & (p->members[g] - 1)) == 0;
    int w = snprintf(buf + at, len - at, "%s%s %s %s %s", g ? "; " : "", one ? "rank" : "ranks",
                     ranks, one ? "alone on" : "share", names[g]);
    if (w < 0) break;
    at += (size_t)w;
  }
}

void coloc_state_init(coloc_state_t *cs, const coloc_plan_t *plan,
                      _Atomic uint64_t *const *done_words)
{
  memset(cs, 0, sizeof *cs);
  cs->plan = *plan;
  uint64_t most = 0;
  for (int r = 0; r < plan->nranks; r++) {
    cs->done[r] = done_words[r];
    uint64_t w = atomic_load_explicit(done_words[r], memory_order_acquire);
    if (w > most) most = w;
  }
  cs->calls = (most + 1) / 2;
}

typedef struct {
  shm_waiter_t w;
  shmddp_comm_t *comm;
  const coloc_state_t *cs;
  uint32_t ranks; /* whose words are waited for */
  uint64_t want;
} word_wait_t;

static uint32_t words_pending(shm_waiter_t *w)
{
  word_wait_t *x = (word_wait_t *)w;
  uint32_t mask = 0;
  for (int r = 0; r < x->cs->plan.nranks; r++)
    if ((x->ranks >> r & 1) &&
        atomic_load_explicit(x->cs->done[r], memory_order_acquire) < x->want)
      mask |= 1u << r;
  return mask;
}

static shmddp_status_t words_check(shm_waiter_t *w, char *err, size_t errlen)
{
  return coll_check_peers(((word_wait_t *)w)->comm, err, errlen);
}

static shmddp_status_t wait_words(shmddp_comm_t *comm, const coloc_state_t *cs, uint32_t ranks,
                                  uint64_t want)
{
  ranks &= ~(1u << comm->rank);
  if (!ranks) return SHMDDP_OK;
  word_wait_t x = {{words_pending, words_check, comm->what}, comm, cs, ranks, want};
  char err[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &x.w, comm->timeout_s, err, sizeof err);
  return st == SHMDDP_OK ? st : coll_wait_failed(comm, st, err);
}

/* Host waits: query the events of the ranks in mask until every one has completed. */
typedef struct {
  shm_waiter_t w;
  shmddp_comm_t *comm;
  const coloc_ops_t *ops;
  void *ctx;
  int kind;
  uint64_t seq;
  uint32_t left;
  shmddp_status_t failed; /* a query's error (its message is the communicator's) */
} event_wait_t;

static uint32_t events_pending(shm_waiter_t *w)
{
  event_wait_t *x = (event_wait_t *)w;
  for (int r = 0; x->left >> r; r++) {
    if (!(x->left >> r & 1)) continue;
    int done = 0;
    shmddp_status_t st = x->ops->query(x->ctx, r, x->kind, x->seq, &done);
    if (st != SHMDDP_OK) {
      x->failed = st;
      x->left = 0;
    } else if (done) {
      x->left &= ~(1u << r);
    }
  }
  return x->left;
}

static shmddp_status_t events_check(shm_waiter_t *w, char *err, size_t errlen)
{
  return coll_check_peers(((event_wait_t *)w)->comm, err, errlen);
}

/* Wait for event kind of call seq of every rank in mask but this one: on the stream, or on the
 * host (cs->host_waits). */
static shmddp_status_t wait_events(shmddp_comm_t *comm, const coloc_state_t *cs,
                                   const coloc_ops_t *ops, void *ctx, uint32_t mask, int kind,
                                   uint64_t seq)
{
  mask &= ~(1u << comm->rank);
  shmddp_status_t st = SHMDDP_OK;
  if (!cs->host_waits) {
    for (int q = 0; q < cs->plan.nranks && st == SHMDDP_OK; q++)
      if (mask >> q & 1) st = ops->wait(ctx, q, kind, seq);
    return st;
  }
  if (!mask) return SHMDDP_OK;
  event_wait_t x = {{events_pending, events_check, comm->what}, comm, ops, ctx, kind, seq, mask,
                    SHMDDP_OK};
  char err[SHM_ABORT_MSG_BYTES];
  st = shm_poll(comm->seg, comm->rank, &x.w, comm->timeout_s, err, sizeof err);
  if (st != SHMDDP_OK) return coll_wait_failed(comm, st, err);
  return x.failed;
}

static void publish(shmddp_comm_t *comm, coloc_state_t *cs, uint64_t v)
{
  atomic_store_explicit(cs->done[comm->rank], v, memory_order_release);
  shm_wake_all(comm->seg);
}

/* Steps 1 to 3; returns with the stream waiting for every READY and the work enqueued. */
static shmddp_status_t ready_and_work(shmddp_comm_t *comm, coloc_state_t *cs,
                                      const coloc_ops_t *ops, void *ctx, uint64_t k)
{
  int me = comm->rank;
  shmddp_status_t st = ops->record(ctx, COLOC_READY, k);
  if (st == SHMDDP_OK) st = ops->rendezvous(ctx, k);
  if (st != SHMDDP_OK || !(cs->plan.leaders >> me & 1)) return st;
  uint32_t all = cs->plan.nranks >= 32 ? ~0u : (1u << cs->plan.nranks) - 1;
  st = wait_events(comm, cs, ops, ctx, all, COLOC_READY, k);
  if (st == SHMDDP_OK) st = ops->work(ctx);
  if (st == SHMDDP_OK) st = ops->record(ctx, COLOC_DONE, k);
  return st;
}

shmddp_status_t coloc_call(shmddp_comm_t *comm, coloc_state_t *cs, const coloc_ops_t *ops,
                           void *ctx)
{
  int me = comm->rank;
  uint64_t k = ++cs->calls;
  shmddp_status_t st = ready_and_work(comm, cs, ops, ctx, k);
  if (st == SHMDDP_OK) publish(comm, cs, 2 * k - 1);
  uint32_t all = cs->plan.nranks >= 32 ? ~0u : (1u << cs->plan.nranks) - 1;
  uint32_t others = cs->plan.leaders & ~(1u << me);
  if (st == SHMDDP_OK) st = wait_words(comm, cs, all, 2 * k - 1);
  if (st == SHMDDP_OK) st = wait_events(comm, cs, ops, ctx, others, COLOC_DONE, k);
  if (st == SHMDDP_OK) {
    publish(comm, cs, 2 * k);
    return SHMDDP_OK;
  }
  /* The peers wait for this rank's words: stop them, with the reason (the first abort wins, so
   * a wait that failed on the group's own abort changes nothing). */
  shm_abort(comm->seg, st, me, "%s", comm->last_error);
  return st;
}

shmddp_status_t coloc_quiesce(shmddp_comm_t *comm, const coloc_state_t *cs)
{
  if (cs->calls == 0) return SHMDDP_OK;
  uint32_t all = cs->plan.nranks >= 32 ? ~0u : (1u << cs->plan.nranks) - 1;
  return wait_words(comm, cs, all, 2 * cs->calls);
}
