/* host_ring.c — ring reduce-scatter and all-reduce through the staging slots.
 *
 * The input is cut into N segments (segment i starts at i*count/N). In reduce-scatter, rank r
 * starts by sending segment r-1 (converted to the accumulator type) to rank r+1; at each of the
 * next N-1 steps it receives a partial sum of segment r-1-t, adds its own contribution and
 * passes it on, until at the last step it holds segment r complete. All-reduce then passes each
 * finished segment around the ring once more (all-gather). Each rank moves 2(N-1)/N of the data
 * instead of the direct algorithm's N-1 copies, which pays off for large messages.
 * Segments longer than a ring buffer are handled in rounds of one buffer per segment.
 *
 * Partial sums travel in the accumulator type (f32 for f16/bf16), so rounding happens once.
 * Segment s is always accumulated in the order s, s+1, ..., s-1 (mod N): the result does not
 * depend on the slot size, and every rank gets the same bits.
 *
 * Message protocol (rank r sends to r+1, counters in the control blocks):
 *   acquire: buffer m % COLL_RING_BUFS of r is free once rack[r+1] >= m - BUFS + 1
 *   send:    stamp + payload, then rpost[r] = m + 1 (release)
 *   recv:    wait rpost[r-1] >= j + 1 (acquire), read buffer j % BUFS of r-1, verify its stamp
 *   release: rack[r] = j + 1 (release)
 */
#include "config.h"

#include <string.h>

#include "collectives/host/host.h"
#include "collectives/reduce/reduce_cpu.h"
#include "shm/check.h"
#include "shm/wait.h"

typedef struct {
  coll_waiter_t cw;
  _Atomic uint64_t *counter;
  int peer;
  uint64_t target;
} ring_waiter_t;

static uint32_t ring_pending(shm_waiter_t *w)
{
  ring_waiter_t *rw = (ring_waiter_t *)w;
  return atomic_load_explicit(rw->counter, memory_order_acquire) >= rw->target
             ? 0u
             : 1u << rw->peer;
}

static shmddp_status_t ring_wait(shmddp_comm_t *comm, _Atomic uint64_t *counter, int peer,
                                 uint64_t target)
{
  if (atomic_load_explicit(counter, memory_order_acquire) >= target) return SHMDDP_OK;
  ring_waiter_t rw = {.cw.comm = comm, .counter = counter, .peer = peer, .target = target};
  return coll_wait(&rw.cw, ring_pending);
}

static int next_rank(const shmddp_comm_t *c) { return (c->rank + 1) % c->nranks; }
static int prev_rank(const shmddp_comm_t *c) { return (c->rank + c->nranks - 1) % c->nranks; }

static unsigned char *ring_buf(const shmddp_comm_t *comm, int r, uint64_t m)
{
  return comm->ring_base[r] + (m % COLL_RING_BUFS) * comm->ring_buf_bytes;
}

size_t host_ring_capacity(const shmddp_comm_t *comm)
{
  return comm->ring_buf_bytes - COLL_BUF_HEADER;
}

shmddp_status_t host_ring_acquire(shmddp_comm_t *comm, unsigned char **payload)
{
  uint64_t m = comm->rsent;
  if (m >= COLL_RING_BUFS) {
    int nx = next_rank(comm);
    TRY(ring_wait(comm, &comm->ctrl[nx]->rack, nx, m - COLL_RING_BUFS + 1));
  }
  *payload = ring_buf(comm, comm->rank, m) + COLL_BUF_HEADER;
  return SHMDDP_OK;
}

void host_ring_send(shmddp_comm_t *comm)
{
  coll_stamp(comm, ring_buf(comm, comm->rank, comm->rsent));
  comm->rsent++;
  atomic_store_explicit(&comm->ctrl[comm->rank]->rpost, comm->rsent, memory_order_release);
  shm_wake_all(comm->seg);
}

shmddp_status_t host_ring_recv(shmddp_comm_t *comm, const unsigned char **payload)
{
  int pv = prev_rank(comm);
  TRY(ring_wait(comm, &comm->ctrl[pv]->rpost, pv, comm->rrecv + 1));
  const unsigned char *b = ring_buf(comm, pv, comm->rrecv);
  TRY(coll_verify(comm, b, pv));
  *payload = b + COLL_BUF_HEADER;
  return SHMDDP_OK;
}

void host_ring_release(shmddp_comm_t *comm)
{
  comm->rrecv++;
  atomic_store_explicit(&comm->ctrl[comm->rank]->rack, comm->rrecv, memory_order_release);
  shm_wake_all(comm->seg);
}

/* One round of reduce-scatter over sub-ranges [start[s], start[s] + len[s]) of the segments
 * that begin at seg_off[s]; the finished sub-range of segment comm->rank goes to dst_mine. */
static shmddp_status_t ring_rs_round(shmddp_comm_t *comm, const char *send, const size_t *seg_off,
                                     const size_t *start, const size_t *len, char *dst_mine,
                                     shmddp_dtype_t dtype, shmddp_op_t op)
{
  int n = comm->nranks, me = comm->rank;
  size_t ds = shmddp_dtype_size(dtype);
  unsigned char *out;
  const unsigned char *in;
#define OWN(s) (send + (seg_off[s] + start[s]) * ds)
  int s = (me - 1 + n) % n;
  TRY(host_ring_acquire(comm, &out));
  reduce_cpu_load(out, OWN(s), len[s], dtype);
  host_ring_send(comm);
  for (int t = 1; t < n; t++) {
    s = (me - 1 - t + 2 * n) % n;
    TRY(host_ring_recv(comm, &in));
    if (t < n - 1) {
      TRY(host_ring_acquire(comm, &out));
      reduce_cpu_combine(out, in, OWN(s), len[s], dtype, op);
      host_ring_send(comm);
    } else {
      reduce_cpu_finish(dst_mine, in, OWN(s), len[s], dtype, op, n);
    }
    host_ring_release(comm);
  }
#undef OWN
  return SHMDDP_OK;
}

/* One round of all-gather: segment s's sub-range lives at recv + (seg_off[s] + start[s]). */
static shmddp_status_t ring_ag_round(shmddp_comm_t *comm, char *recv, const size_t *seg_off,
                                     const size_t *start, const size_t *len, size_t ds)
{
  int n = comm->nranks, me = comm->rank;
  unsigned char *out;
  const unsigned char *in;
  TRY(host_ring_acquire(comm, &out));
  memcpy(out, recv + (seg_off[me] + start[me]) * ds, len[me] * ds);
  host_ring_send(comm);
  for (int u = 1; u < n; u++) {
    int s = (me - u + n) % n;
    TRY(host_ring_recv(comm, &in));
    memcpy(recv + (seg_off[s] + start[s]) * ds, in, len[s] * ds);
    if (u < n - 1) {
      TRY(host_ring_acquire(comm, &out));
      memcpy(out, in, len[s] * ds);
      host_ring_send(comm);
    }
    host_ring_release(comm);
  }
  return SHMDDP_OK;
}

/* Sub-ranges of round q: at most chunk elements of each segment. */
static void round_ranges(int n, const size_t *seg_len, size_t q, size_t chunk, size_t *start,
                         size_t *len)
{
  for (int s = 0; s < n; s++) {
    size_t b = q * chunk;
    start[s] = b;
    len[s] = b >= seg_len[s] ? 0 : (seg_len[s] - b < chunk ? seg_len[s] - b : chunk);
  }
}

/* The ring over n segments (segment s: seg_len[s] elements at element seg_off[s] of send), in
 * rounds of at most a staging buffer's worth of each: the reduce-scatter, whose result for
 * segment comm->rank goes to mine; with gather (the all-reduce), then the all-gather of every
 * segment into recv at the same offsets. */
static shmddp_status_t ring_rounds(shmddp_comm_t *comm, const void *send, void *recv, char *mine,
                                   const size_t *seg_off, const size_t *seg_len,
                                   shmddp_dtype_t dtype, shmddp_op_t op, int gather)
{
  int n = comm->nranks, me = comm->rank;
  size_t ds = shmddp_dtype_size(dtype);
  size_t chunk = host_ring_capacity(comm) / reduce_acc_size(dtype);
  size_t start[SHMDDP_MAX_RANKS], len[SHMDDP_MAX_RANKS], longest = 0;
  for (int s = 0; s < n; s++)
    if (seg_len[s] > longest) longest = seg_len[s];
  size_t rounds = (longest + chunk - 1) / chunk;
  for (size_t q = 0; q < rounds; q++) {
    round_ranges(n, seg_len, q, chunk, start, len);
    TRY(ring_rs_round(comm, send, seg_off, start, len, mine + start[me] * ds, dtype, op));
    if (gather) TRY(ring_ag_round(comm, recv, seg_off, start, len, ds));
  }
  return SHMDDP_OK;
}

shmddp_status_t host_ring_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                     size_t count, shmddp_dtype_t dtype, shmddp_op_t op)
{
  int n = comm->nranks;
  size_t seg_off[SHMDDP_MAX_RANKS], seg_len[SHMDDP_MAX_RANKS];
  for (int s = 0; s < n; s++) {
    seg_off[s] = count / (size_t)n * (size_t)s + count % (size_t)n * (size_t)s / (size_t)n;
  }
  for (int s = 0; s < n; s++) {
    size_t end = s + 1 < n ? seg_off[s + 1] : count;
    seg_len[s] = end - seg_off[s];
  }
  char *mine = (char *)recv + seg_off[comm->rank] * shmddp_dtype_size(dtype);
  return ring_rounds(comm, send, recv, mine, seg_off, seg_len, dtype, op, 1);
}

shmddp_status_t host_ring_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                         size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op)
{
  size_t seg_off[SHMDDP_MAX_RANKS], seg_len[SHMDDP_MAX_RANKS];
  for (int s = 0; s < comm->nranks; s++) {
    seg_off[s] = (size_t)s * recvcount;
    seg_len[s] = recvcount;
  }
  return ring_rounds(comm, send, recv, recv, seg_off, seg_len, dtype, op, 0);
}
