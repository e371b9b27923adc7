/* host_direct.c — one-shot collectives through the staging slots: in each round every rank
 * copies a piece of its input into its own buffer, waits until all have, and reads what it
 * needs from every buffer. Latency is one publish and one wait; every rank reduces all inputs
 * itself, in rank order 0..N-1, so results are bitwise identical everywhere.
 *
 * Protocol (per rank r, counters in its control block, round k = number of rounds posted):
 *   acquire:  buffer k % COLL_DIRECT_BUFS is free once every rank's dack >= k - BUFS + 1
 *   exchange: stamp + payload, then dpost[r] = k + 1 (release); wait all dpost >= k + 1 (acquire)
 *   release:  dack[r] = k + 1 (release)
 * Every rank takes part in every round (even with nothing to send), so the counters of all ranks
 * advance together and never need resetting. Large inputs run as several rounds; with two
 * buffers a rank can fill round k+1 while slower peers still read round k. */
#include "config.h"

#include <string.h>

#include "collectives/host.h"
#include "kernels/reduce_cpu.h"
#include "shm/wait.h"

typedef struct {
  shm_waiter_t base;
  shmddp_comm_t *comm;
  int use_ack;
  uint64_t target;
} direct_waiter_t;

static uint32_t direct_pending(shm_waiter_t *w)
{
  direct_waiter_t *d = (direct_waiter_t *)w;
  uint32_t mask = 0;
  for (int r = 0; r < d->comm->nranks; r++) {
    coll_ctrl_t *c = d->comm->ctrl[r];
    uint64_t v = atomic_load_explicit(d->use_ack ? &c->dack : &c->dpost, memory_order_acquire);
    if (v < d->target) mask |= 1u << r;
  }
  return mask;
}

static shmddp_status_t direct_check(shm_waiter_t *w, char *err, size_t errlen)
{
  return coll_check_peers(((direct_waiter_t *)w)->comm, err, errlen);
}

static shmddp_status_t direct_wait(shmddp_comm_t *comm, int use_ack, uint64_t target)
{
  direct_waiter_t d = {{direct_pending, direct_check, comm->what}, comm, use_ack, target};
  if (direct_pending(&d.base) == 0) return SHMDDP_OK;
  char msg[SHM_ABORT_MSG_BYTES];
  shmddp_status_t st = shm_wait(comm->seg, comm->rank, &d.base, comm->timeout_s, msg, sizeof msg);
  return st == SHMDDP_OK ? st : coll_wait_failed(comm, st, msg);
}

static unsigned char *direct_buf(const shmddp_comm_t *comm, int r, uint64_t round)
{
  return comm->direct_base[r] + (round % COLL_DIRECT_BUFS) * comm->direct_buf_bytes;
}

size_t host_direct_capacity(const shmddp_comm_t *comm)
{
  return comm->direct_buf_bytes - COLL_BUF_HEADER;
}

shmddp_status_t host_direct_acquire(shmddp_comm_t *comm, unsigned char **payload)
{
  uint64_t k = comm->dround;
  if (k >= COLL_DIRECT_BUFS) {
    shmddp_status_t st = direct_wait(comm, 1, k - COLL_DIRECT_BUFS + 1);
    if (st != SHMDDP_OK) return st;
  }
  *payload = direct_buf(comm, comm->rank, k) + COLL_BUF_HEADER;
  return SHMDDP_OK;
}

shmddp_status_t host_direct_exchange(shmddp_comm_t *comm, const unsigned char **payloads)
{
  uint64_t k = comm->dround;
  coll_stamp(comm, direct_buf(comm, comm->rank, k));
  atomic_store_explicit(&comm->ctrl[comm->rank]->dpost, k + 1, memory_order_release);
  comm->dround = k + 1;
  shm_wake_all(comm->seg);
  shmddp_status_t st = direct_wait(comm, 0, k + 1);
  if (st != SHMDDP_OK) return st;
  for (int r = 0; r < comm->nranks; r++) {
    const unsigned char *b = direct_buf(comm, r, k);
    st = coll_verify(comm, b, r);
    if (st != SHMDDP_OK) return st;
    if (payloads) payloads[r] = b + COLL_BUF_HEADER;
  }
  return SHMDDP_OK;
}

void host_direct_release(shmddp_comm_t *comm)
{
  atomic_store_explicit(&comm->ctrl[comm->rank]->dack, comm->dround, memory_order_release);
  shm_wake_all(comm->seg);
}

shmddp_status_t host_direct_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op)
{
  size_t ds = shmddp_dtype_size(dtype);
  size_t piece = host_direct_capacity(comm) / ds;
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < count; off += piece) {
    size_t m = count - off < piece ? count - off : piece;
    unsigned char *mine;
    shmddp_status_t st = host_direct_acquire(comm, &mine);
    if (st != SHMDDP_OK) return st;
    memcpy(mine, (const char *)send + off * ds, m * ds);
    st = host_direct_exchange(comm, bufs);
    if (st != SHMDDP_OK) return st;
    reduce_cpu_multi((char *)recv + off * ds, (const void *const *)bufs, comm->nranks, m, dtype,
                     op, comm->nranks);
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

shmddp_status_t host_direct_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                           size_t recvcount, shmddp_dtype_t dtype,
                                           shmddp_op_t op)
{
  size_t ds = shmddp_dtype_size(dtype);
  int n = comm->nranks;
  size_t piece = host_direct_capacity(comm) / (ds * (size_t)n);
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  const void *srcs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < recvcount; off += piece) {
    size_t m = recvcount - off < piece ? recvcount - off : piece;
    unsigned char *mine;
    shmddp_status_t st = host_direct_acquire(comm, &mine);
    if (st != SHMDDP_OK) return st;
    for (int b = 0; b < n; b++)
      memcpy(mine + (size_t)b * m * ds, (const char *)send + ((size_t)b * recvcount + off) * ds,
             m * ds);
    st = host_direct_exchange(comm, bufs);
    if (st != SHMDDP_OK) return st;
    for (int r = 0; r < n; r++) srcs[r] = bufs[r] + (size_t)comm->rank * m * ds;
    reduce_cpu_multi((char *)recv + off * ds, srcs, n, m, dtype, op, n);
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

shmddp_status_t host_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                size_t sendcount, shmddp_dtype_t dtype)
{
  size_t ds = shmddp_dtype_size(dtype);
  size_t piece = host_direct_capacity(comm) / ds;
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < sendcount; off += piece) {
    size_t m = sendcount - off < piece ? sendcount - off : piece;
    unsigned char *mine;
    shmddp_status_t st = host_direct_acquire(comm, &mine);
    if (st != SHMDDP_OK) return st;
    memcpy(mine, (const char *)send + off * ds, m * ds);
    st = host_direct_exchange(comm, bufs);
    if (st != SHMDDP_OK) return st;
    for (int r = 0; r < comm->nranks; r++)
      memcpy((char *)recv + ((size_t)r * sendcount + off) * ds, bufs[r], m * ds);
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

shmddp_status_t host_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root)
{
  size_t ds = shmddp_dtype_size(dtype);
  size_t piece = host_direct_capacity(comm) / ds;
  int is_root = comm->rank == root;
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < count; off += piece) {
    size_t m = count - off < piece ? count - off : piece;
    unsigned char *mine;
    shmddp_status_t st = host_direct_acquire(comm, &mine);
    if (st != SHMDDP_OK) return st;
    if (is_root) memcpy(mine, (const char *)send + off * ds, m * ds);
    st = host_direct_exchange(comm, bufs);
    if (st != SHMDDP_OK) return st;
    if (is_root) {
      if (recv != send) memmove((char *)recv + off * ds, (const char *)send + off * ds, m * ds);
    } else {
      memcpy((char *)recv + off * ds, bufs[root], m * ds);
    }
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

shmddp_status_t host_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, shmddp_op_t op, int root)
{
  size_t ds = shmddp_dtype_size(dtype);
  size_t piece = host_direct_capacity(comm) / ds;
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < count; off += piece) {
    size_t m = count - off < piece ? count - off : piece;
    unsigned char *mine;
    shmddp_status_t st = host_direct_acquire(comm, &mine);
    if (st != SHMDDP_OK) return st;
    memcpy(mine, (const char *)send + off * ds, m * ds);
    st = host_direct_exchange(comm, bufs);
    if (st != SHMDDP_OK) return st;
    if (comm->rank == root)
      reduce_cpu_multi((char *)recv + off * ds, (const void *const *)bufs, comm->nranks, m,
                       dtype, op, comm->nranks);
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

shmddp_status_t host_barrier(shmddp_comm_t *comm)
{
  unsigned char *mine;
  shmddp_status_t st = host_direct_acquire(comm, &mine);
  if (st != SHMDDP_OK) return st;
  st = host_direct_exchange(comm, NULL);
  if (st != SHMDDP_OK) return st;
  host_direct_release(comm);
  return SHMDDP_OK;
}
