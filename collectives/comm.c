/* comm.c — communicator setup and the per-call bookkeeping every algorithm shares.
 *
 * Each call gets the next sequence number on every rank. Its signature (sequence, collective,
 * count, dtype, op, root, algorithm) is published in the rank's control block under a seqlock and
 * stamped into the header of every buffer the rank stages. Readers compare stamps with their own
 * call before consuming data, and waiters that sleep compare peers' published signatures, so a
 * rank whose call differs from its peers' produces SHMDDP_ERR_MISMATCH on every rank (through
 * the group's abort word), never a hang or silently mixed data. */
#include "config.h"

#include "collectives/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/device.h"
#include "shm/abort.h"

_Static_assert(sizeof(coll_ctrl_t) <= SHM_CTRL_BYTES, "control block exceeds its space");
_Static_assert(sizeof(coll_sig_t) <= COLL_BUF_HEADER, "signature exceeds the buffer header");
_Static_assert(sizeof(coll_sig_t) % 8 == 0, "signature must be whole words");

static const char *const kind_names[COLL_NUM_KINDS] = {
  "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier",
  "all_to_all", "gather", "scatter"};

const char *coll_kind_name(coll_kind_t kind)
{
  return (unsigned)kind < COLL_NUM_KINDS ? kind_names[kind] : "?";
}

void coll_describe(const coll_sig_t *s, char *buf, size_t len)
{
  const char *kind = coll_kind_name((coll_kind_t)s->kind);
  switch ((coll_kind_t)s->kind) {
  case COLL_BARRIER:
    snprintf(buf, len, "%s #%llu", kind, (unsigned long long)s->seq);
    break;
  case COLL_ALL_GATHER:
  case COLL_ALL_TO_ALL:
    snprintf(buf, len, "%s #%llu (count %llu, %s)", kind, (unsigned long long)s->seq,
             (unsigned long long)s->count, shmddp_dtype_name(s->dtype));
    break;
  case COLL_BROADCAST:
  case COLL_GATHER:
  case COLL_SCATTER:
    snprintf(buf, len, "%s #%llu (count %llu, %s, root %d)", kind, (unsigned long long)s->seq,
             (unsigned long long)s->count, shmddp_dtype_name(s->dtype), s->root);
    break;
  case COLL_REDUCE:
    snprintf(buf, len, "%s #%llu (count %llu, %s, %s, root %d)", kind,
             (unsigned long long)s->seq, (unsigned long long)s->count,
             shmddp_dtype_name(s->dtype), shmddp_op_name(s->op), s->root);
    break;
  default:
    snprintf(buf, len, "%s #%llu (count %llu, %s, %s)", kind, (unsigned long long)s->seq,
             (unsigned long long)s->count, shmddp_dtype_name(s->dtype), shmddp_op_name(s->op));
  }
}

void coll_comm_init(shmddp_comm_t *comm, shm_segment_t *seg, int channel, int rank, int device,
                    double timeout_s)
{
  memset(comm, 0, sizeof *comm);
  comm->rank = rank;
  comm->nranks = seg->nranks;
  comm->device = device;
  comm->channel = channel;
  comm->base = comm;
  comm->seg = seg;
  comm->timeout_s = timeout_s;
  /* Half the slot for the direct buffers, half for the ring; 64-byte aligned pieces. */
  size_t half = shm_slot_bytes(seg, channel) / 2;
  comm->direct_buf_bytes = (half / COLL_DIRECT_BUFS) & ~(size_t)63;
  comm->ring_buf_bytes = (half / COLL_RING_BUFS) & ~(size_t)63;
  for (int r = 0; r < seg->nranks; r++) {
    comm->ctrl[r] = (coll_ctrl_t *)shm_rank_ctrl(seg, channel, r);
    comm->direct_base[r] = (unsigned char *)shm_rank_slot(seg, channel, r);
    comm->ring_base[r] = comm->direct_base[r] + half;
  }
  comm->ring_min_bytes = (size_t)256 << 10;
}

void coll_comm_teardown(shmddp_comm_t *comm)
{
  if (comm->base == comm) {
    for (int i = 0; i < SHM_CHANNELS; i++)
      if (comm->dups[i]) {
        coll_comm_teardown(comm->dups[i]);
        free(comm->dups[i]);
        comm->dups[i] = NULL;
      }
  }
  if (comm->dev_ops && comm->dev_ops->teardown) comm->dev_ops->teardown(comm);
  comm->dev_ops = NULL;
}

shmddp_status_t coll_error(shmddp_comm_t *comm, shmddp_status_t status, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->last_error, sizeof comm->last_error, fmt, ap);
  va_end(ap);
  return status;
}

shmddp_status_t coll_wait_failed(shmddp_comm_t *comm, shmddp_status_t st, const char *msg)
{
  return coll_error(comm, st, "rank %d, %s: %s", comm->rank, comm->what, msg);
}

static shmddp_status_t waiter_check(shm_waiter_t *w, char *err, size_t errlen)
{
  return coll_check_peers(((coll_waiter_t *)w)->comm, err, errlen);
}

shmddp_status_t coll_wait(coll_waiter_t *w, uint32_t (*pending)(shm_waiter_t *w))
{
  shmddp_comm_t *comm = w->comm;
  w->base = (shm_waiter_t){.pending = pending, .check = waiter_check, .what = comm->what};
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &w->base, comm->timeout_s, msg, sizeof msg);
  return st == SHMDDP_OK ? st : coll_wait_failed(comm, st, msg);
}

static void publish_sig(shmddp_comm_t *comm)
{
  coll_ctrl_t *c = comm->ctrl[comm->rank];
  uint64_t words[sizeof(coll_sig_t) / 8];
  memcpy(words, &comm->cur, sizeof words);
  uint32_t v = atomic_load_explicit(&c->sig_ver, memory_order_relaxed);
  atomic_store_explicit(&c->sig_ver, v + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  for (size_t i = 0; i < sizeof words / 8; i++)
    atomic_store_explicit(&c->sig_words[i], words[i], memory_order_relaxed);
  atomic_store_explicit(&c->sig_ver, v + 2, memory_order_release);
}

/* 1 when a consistent snapshot of rank r's signature was read. */
static int read_sig(const shmddp_comm_t *comm, int r, coll_sig_t *out)
{
  coll_ctrl_t *c = comm->ctrl[r];
  uint32_t v1 = atomic_load_explicit(&c->sig_ver, memory_order_acquire);
  if (v1 & 1) return 0;
  uint64_t words[sizeof(coll_sig_t) / 8];
  for (size_t i = 0; i < sizeof words / 8; i++)
    words[i] = atomic_load_explicit(&c->sig_words[i], memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&c->sig_ver, memory_order_relaxed) != v1) return 0;
  memcpy(out, words, sizeof *out);
  return 1;
}

shmddp_status_t coll_begin(shmddp_comm_t *comm, coll_kind_t kind, size_t count,
                           shmddp_dtype_t dtype, shmddp_op_t op, int root, shmddp_algo_t algo)
{
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_abort_status(comm->seg, msg, sizeof msg);
  if (st != SHMDDP_OK)
    return coll_error(comm, st, "rank %d: the group has stopped: %s", comm->rank, msg);
  memset(&comm->cur, 0, sizeof comm->cur);
  comm->cur.seq = ++comm->seq;
  comm->cur.kind = kind;
  comm->cur.count = count;
  comm->cur.dtype = dtype;
  comm->cur.op = op;
  comm->cur.root = root;
  comm->cur.algo = algo;
  coll_describe(&comm->cur, comm->what, sizeof comm->what);
  publish_sig(comm);
  return SHMDDP_OK;
}

static int sig_equal(const coll_sig_t *a, const coll_sig_t *b)
{
  return a->seq == b->seq && a->count == b->count && a->kind == b->kind &&
         a->dtype == b->dtype && a->op == b->op && a->root == b->root && a->algo == b->algo;
}

static void mismatch_message(const shmddp_comm_t *comm, int peer, const coll_sig_t *theirs,
                             char *err, size_t errlen)
{
  char mine[96], other[96];
  coll_describe(&comm->cur, mine, sizeof mine);
  coll_describe(theirs, other, sizeof other);
  if (theirs->seq == comm->cur.seq && theirs->kind == comm->cur.kind &&
      theirs->count == comm->cur.count && theirs->algo != comm->cur.algo)
    snprintf(err, errlen, "rank %d called %s with algorithm %s but rank %d with %s (force the "
             "same SHMDDP_ALGO on every rank)", comm->rank, mine,
             shmddp_algo_name(comm->cur.algo), peer, shmddp_algo_name(theirs->algo));
  else
    snprintf(err, errlen, "collective mismatch: rank %d called %s but rank %d called %s; every "
             "rank must make the same calls in the same order", comm->rank, mine, peer, other);
}

shmddp_status_t coll_check_peers(shmddp_comm_t *comm, char *err, size_t errlen)
{
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank) continue;
    coll_sig_t s;
    if (!read_sig(comm, r, &s) || s.seq != comm->cur.seq) continue;
    if (!sig_equal(&s, &comm->cur)) {
      mismatch_message(comm, r, &s, err, errlen);
      return SHMDDP_ERR_MISMATCH;
    }
  }
  return SHMDDP_OK;
}

void coll_stamp(const shmddp_comm_t *comm, unsigned char *buf)
{
  memcpy(buf, &comm->cur, sizeof comm->cur);
}

shmddp_status_t coll_verify(shmddp_comm_t *comm, const unsigned char *buf, int writer)
{
  coll_sig_t s;
  memcpy(&s, buf, sizeof s);
  if (sig_equal(&s, &comm->cur)) return SHMDDP_OK;
  char msg[SHM_ABORT_MSG_BYTES];
  mismatch_message(comm, writer, &s, msg, sizeof msg);
  shm_abort(comm->seg, SHMDDP_ERR_MISMATCH, comm->rank, "%s", msg);
  return coll_error(comm, SHMDDP_ERR_MISMATCH, "%s", msg);
}
