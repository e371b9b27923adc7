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

#include "collectives/host/host.h"
#include "collectives/reduce/reduce_cpu.h"
#include "shm/check.h"
#include "shm/wait.h"

typedef struct {
  coll_waiter_t cw;
  int use_ack;
  uint64_t target;
} direct_waiter_t;

static uint32_t direct_pending(shm_waiter_t *w)
{
  direct_waiter_t *d = (direct_waiter_t *)w;
  uint32_t mask = 0;
  for (int r = 0; r < d->cw.comm->nranks; r++) {
    coll_ctrl_t *c = d->cw.comm->ctrl[r];
    uint64_t v = atomic_load_explicit(d->use_ack ? &c->dack : &c->dpost, memory_order_acquire);
    if (v < d->target) mask |= 1u << r;
  }
  return mask;
}

static shmddp_status_t direct_wait(shmddp_comm_t *comm, int use_ack, uint64_t target)
{
  direct_waiter_t d = {.cw.comm = comm, .use_ack = use_ack, .target = target};
  if (direct_pending(&d.cw.base) == 0) return SHMDDP_OK;
  return coll_wait(&d.cw, direct_pending);
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
    TRY(direct_wait(comm, 1, k - COLL_DIRECT_BUFS + 1));
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
  TRY(direct_wait(comm, 0, k + 1));
  for (int r = 0; r < comm->nranks; r++) {
    const unsigned char *b = direct_buf(comm, r, k);
    TRY(coll_verify(comm, b, r));
    if (payloads) payloads[r] = b + COLL_BUF_HEADER;
  }
  return SHMDDP_OK;
}

void host_direct_release(shmddp_comm_t *comm)
{
  atomic_store_explicit(&comm->ctrl[comm->rank]->dack, comm->dround, memory_order_release);
  shm_wake_all(comm->seg);
}

/* The direct protocol over count elements, `piece` at a time: post() fills this rank's buffer
 * with the piece's share [off, off + m), everyone exchanges, take() reads every rank's buffer.
 * One loop for every host collective below; they differ only in what they post and take. */
typedef struct {
  const void *send;
  void *recv;
  size_t ds, total; /* element size; the per-rank count (reduce-scatter, all-gather) */
  shmddp_dtype_t dtype;
  shmddp_op_t op;
  int root, rank, nranks;
} piece_ctx_t;

typedef void (*post_fn)(const piece_ctx_t *x, unsigned char *mine, size_t off, size_t m);
typedef void (*take_fn)(const piece_ctx_t *x, const unsigned char *const *bufs, size_t off,
                        size_t m);

static shmddp_status_t direct_pieces(shmddp_comm_t *comm, size_t count, size_t piece,
                                     const piece_ctx_t *x, post_fn post, take_fn take)
{
  const unsigned char *bufs[SHMDDP_MAX_RANKS];
  for (size_t off = 0; off < count; off += piece) {
    size_t m = count - off < piece ? count - off : piece;
    unsigned char *mine;
    TRY(host_direct_acquire(comm, &mine));
    post(x, mine, off, m);
    TRY(host_direct_exchange(comm, bufs));
    take(x, bufs, off, m);
    host_direct_release(comm);
  }
  return SHMDDP_OK;
}

static piece_ctx_t piece_ctx(const shmddp_comm_t *comm, const void *send, void *recv,
                             shmddp_dtype_t dtype, shmddp_op_t op, int root, size_t total)
{
  piece_ctx_t x = {send, recv, shmddp_dtype_size(dtype), total, dtype, op, root, comm->rank,
                   comm->nranks};
  return x;
}

/* This rank's elements [off, off + m) of send. */
static void post_own(const piece_ctx_t *x, unsigned char *mine, size_t off, size_t m)
{
  memcpy(mine, (const char *)x->send + off * x->ds, m * x->ds);
}

static void take_reduce(const piece_ctx_t *x, const unsigned char *const *bufs, size_t off,
                        size_t m)
{
  reduce_cpu_multi((char *)x->recv + off * x->ds, (const void *const *)bufs, x->nranks, m,
                   x->dtype, x->op, x->nranks);
}

shmddp_status_t host_direct_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, op, -1, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / x.ds, &x, post_own,
                       take_reduce);
}

/* Reduce-scatter: the piece of every rank's block, block b at b * m in this rank's buffer. */
static void post_blocks(const piece_ctx_t *x, unsigned char *mine, size_t off, size_t m)
{
  for (int b = 0; b < x->nranks; b++)
    memcpy(mine + (size_t)b * m * x->ds,
           (const char *)x->send + ((size_t)b * x->total + off) * x->ds, m * x->ds);
}

static void take_my_block(const piece_ctx_t *x, const unsigned char *const *bufs, size_t off,
                          size_t m)
{
  const void *srcs[SHMDDP_MAX_RANKS];
  for (int r = 0; r < x->nranks; r++) srcs[r] = bufs[r] + (size_t)x->rank * m * x->ds;
  reduce_cpu_multi((char *)x->recv + off * x->ds, srcs, x->nranks, m, x->dtype, x->op,
                   x->nranks);
}

shmddp_status_t host_direct_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                           size_t recvcount, shmddp_dtype_t dtype,
                                           shmddp_op_t op)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, op, -1, recvcount);
  return direct_pieces(comm, recvcount, host_direct_capacity(comm) / (x.ds * (size_t)x.nranks),
                       &x, post_blocks, take_my_block);
}

static void take_gather(const piece_ctx_t *x, const unsigned char *const *bufs, size_t off,
                        size_t m)
{
  for (int r = 0; r < x->nranks; r++)
    memcpy((char *)x->recv + ((size_t)r * x->total + off) * x->ds, bufs[r], m * x->ds);
}

shmddp_status_t host_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                size_t sendcount, shmddp_dtype_t dtype)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, SHMDDP_SUM, -1, sendcount);
  return direct_pieces(comm, sendcount, host_direct_capacity(comm) / x.ds, &x, post_own,
                       take_gather);
}

static void post_if_root(const piece_ctx_t *x, unsigned char *mine, size_t off, size_t m)
{
  if (x->rank == x->root) post_own(x, mine, off, m);
}

static void take_broadcast(const piece_ctx_t *x, const unsigned char *const *bufs, size_t off,
                           size_t m)
{
  char *dst = (char *)x->recv + off * x->ds;
  if (x->rank != x->root)
    memcpy(dst, bufs[x->root], m * x->ds);
  else if (x->recv != x->send)
    memmove(dst, (const char *)x->send + off * x->ds, m * x->ds);
}

shmddp_status_t host_broadcast(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                               shmddp_dtype_t dtype, int root)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, SHMDDP_SUM, root, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / x.ds, &x, post_if_root,
                       take_broadcast);
}

static void take_reduce_at_root(const piece_ctx_t *x, const unsigned char *const *bufs,
                                size_t off, size_t m)
{
  if (x->rank == x->root) take_reduce(x, bufs, off, m);
}

shmddp_status_t host_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, shmddp_op_t op, int root)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, op, root, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / x.ds, &x, post_own,
                       take_reduce_at_root);
}

shmddp_status_t host_barrier(shmddp_comm_t *comm)
{
  unsigned char *mine;
  TRY(host_direct_acquire(comm, &mine));
  TRY(host_direct_exchange(comm, NULL));
  host_direct_release(comm);
  return SHMDDP_OK;
}

/* All-to-all: the piece of every block is posted as for reduce-scatter; rank r's buffer holds
 * at block `rank` what this rank receives from r. */
static void take_from_every_rank(const piece_ctx_t *x, const unsigned char *const *bufs,
                                 size_t off, size_t m)
{
  for (int r = 0; r < x->nranks; r++)
    memcpy((char *)x->recv + ((size_t)r * x->total + off) * x->ds,
           bufs[r] + (size_t)x->rank * m * x->ds, m * x->ds);
}

shmddp_status_t host_all_to_all(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                shmddp_dtype_t dtype)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, SHMDDP_SUM, -1, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / (x.ds * (size_t)x.nranks), &x,
                       post_blocks, take_from_every_rank);
}

static void take_gather_at_root(const piece_ctx_t *x, const unsigned char *const *bufs,
                                size_t off, size_t m)
{
  if (x->rank == x->root) take_gather(x, bufs, off, m);
}

shmddp_status_t host_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                            shmddp_dtype_t dtype, int root)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, SHMDDP_SUM, root, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / x.ds, &x, post_own,
                       take_gather_at_root);
}

static void post_blocks_if_root(const piece_ctx_t *x, unsigned char *mine, size_t off, size_t m)
{
  if (x->rank == x->root) post_blocks(x, mine, off, m);
}

static void take_my_block_of_root(const piece_ctx_t *x, const unsigned char *const *bufs,
                                  size_t off, size_t m)
{
  memmove((char *)x->recv + off * x->ds, bufs[x->root] + (size_t)x->rank * m * x->ds, m * x->ds);
}

shmddp_status_t host_scatter(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                             shmddp_dtype_t dtype, int root)
{
  piece_ctx_t x = piece_ctx(comm, send, recv, dtype, SHMDDP_SUM, root, count);
  return direct_pieces(comm, count, host_direct_capacity(comm) / (x.ds * (size_t)x.nranks), &x,
                       post_blocks_if_root, take_my_block_of_root);
}
