/* inter.c — the all-reduce between nodes over MPI (see inter.h for the order of reduction).
 *
 * Why not MPI_Allreduce: its order of reduction is the implementation's business (Open MPI picks
 * among several algorithms by size and process count, and may change between versions), so a
 * rerun, or a run beside a different job size, could differ in the last bits. Point-to-point
 * MPI_Sendrecv only moves bytes; the arithmetic is ours (collectives/reduce/, the same bits on the
 * CPU and the GPU), in an order fixed by the node number. The ring moves 2(M-1)/M of the buffer
 * in and out of each node, the bandwidth-optimal amount, in M-1 + M-1 steps. */
#include "config.h"

#include "src/world/inter.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/device.h"

#define INTER_PIECE_BYTES ((size_t)4 << 20)
#define INTER_SMALL_BYTES ((size_t)32 << 10)
#define INTER_TAG 7301

struct inter {
  inter_config_t cfg;
  int rank, size;
  int mem;           /* where the ring works: DEV_HOST (host or staged) or the GPU (CUDA-aware) */
  void *scratch;     /* on mem: one piece (ring chunk, or size small buffers gathered) */
  size_t scratch_bytes;
  void *stage[2];    /* pinned host pieces (device buffers without CUDA-aware MPI) */
  dev_event_t *down[2]; /* piece k's copy to the host is done */
};

int inter_mpi_fail(int code, const char *what, char *err, size_t errlen)
{
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(code, msg, &len);
  return check_fail(err, errlen, "%s failed: %s", what, msg);
}

int inter_create(inter_t **out, const inter_config_t *cfg, char *err, size_t errlen)
{
  *out = NULL;
  inter_t *x = calloc(1, sizeof *x);
  if (!x) return check_fail(err, errlen, "out of memory for the inter-node all-reduce");
  *out = x;
  x->cfg = *cfg;
  if (x->cfg.piece_bytes == 0) x->cfg.piece_bytes = INTER_PIECE_BYTES;
  MPI_CHECK(MPI_Comm_rank(cfg->comm, &x->rank), "MPI_Comm_rank");
  MPI_CHECK(MPI_Comm_size(cfg->comm, &x->size), "MPI_Comm_size");
  int staged = cfg->dev != DEV_HOST && !cfg->cuda_aware;
  x->mem = staged ? DEV_HOST : cfg->dev;
  /* A ring chunk is at most a piece; a gathered small buffer is at most size * 32 KiB. */
  x->scratch_bytes = x->cfg.piece_bytes;
  if (x->scratch_bytes < (size_t)x->size * INTER_SMALL_BYTES)
    x->scratch_bytes = (size_t)x->size * INTER_SMALL_BYTES;
  x->scratch = x->mem == DEV_HOST ? dev_host_alloc(0, x->scratch_bytes)
                                  : dev_alloc(NULL, x->scratch_bytes);
  if (!x->scratch)
    return check_fail(err, errlen, "out of memory for %zu bytes of inter-node scratch",
                      x->scratch_bytes);
  if (staged) {
    for (int i = 0; i < 2; i++) {
      x->stage[i] = dev_host_alloc(1, x->cfg.piece_bytes);
      if (!x->stage[i])
        return check_fail(err, errlen, "out of pinned host memory for the inter-node staging");
      CHECK(dev_event_create(&x->down[i], cfg->dev, DEV_EVENT_ORDER, err, errlen));
    }
  }
  return 0;
}

void inter_destroy(inter_t *x)
{
  if (!x) return;
  if (x->mem == DEV_HOST) dev_host_free(0, x->scratch);
  else dev_free(NULL, x->scratch);
  for (int i = 0; i < 2; i++) {
    dev_host_free(1, x->stage[i]);
    dev_event_destroy(x->down[i]);
  }
  free(x);
}

/* dst = reduce(srcs) on the ring's memory, finished when it returns (the next send reads it). */
static int combine(inter_t *x, void *dst, const void *const *srcs, int nsrc, size_t n,
                   shmddp_dtype_t dtype, shmddp_op_t op, void *stream, char *err, size_t errlen)
{
  CHECK(dev_reduce(dst, srcs, nsrc, n, dtype, op, x->size, x->mem,
                   x->mem == DEV_HOST ? NULL : stream, err, errlen));
  return x->mem == DEV_HOST ? 0 : dev_stream_sync(stream, err, errlen);
}

/* The partial operation of a reduction that is finished later (AVG sums until the end). */
static shmddp_op_t partial(shmddp_op_t op) { return op == SHMDDP_AVG ? SHMDDP_SUM : op; }

/* Small buffers: every node's whole buffer, reduced in node order, at most
 * SHMDDP_MAX_RANKS at a time (the running result first in each later group). */
static int gather_reduce(inter_t *x, char *buf, size_t n, shmddp_dtype_t dtype, shmddp_op_t op,
                         void *stream, char *err, size_t errlen)
{
  size_t bytes = n * shmddp_dtype_size(dtype);
  char *all = x->scratch;
  MPI_CHECK(MPI_Allgather(buf, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, x->cfg.comm),
            "MPI_Allgather between nodes");
  const void *srcs[SHMDDP_MAX_RANKS];
  int done = 0;
  while (done < x->size) {
    int k = 0;
    if (done > 0) srcs[k++] = buf;
    while (k < SHMDDP_MAX_RANKS && done < x->size) srcs[k++] = all + (size_t)done++ * bytes;
    CHECK(combine(x, buf, srcs, k, n, dtype, done == x->size ? op : partial(op), stream, err,
                  errlen));
  }
  return 0;
}

/* The ring on one piece (on the ring's memory): reduce-scatter, then all-gather. */
static int ring(inter_t *x, char *buf, size_t n, shmddp_dtype_t dtype, shmddp_op_t op,
                void *stream, char *err, size_t errlen)
{
  const int M = x->size, r = x->rank, next = (r + 1) % M, prev = (r + M - 1) % M;
  const size_t ds = shmddp_dtype_size(dtype);
#define LO(c) ((size_t)(c) * n / (size_t)M)
#define LEN(c) (LO((c) + 1) - LO(c))
  for (int s = 0; s < M - 1; s++) {
    int send_c = (r - s + M) % M, recv_c = (r - s - 1 + 2 * M) % M;
    MPI_CHECK(MPI_Sendrecv(buf + LO(send_c) * ds, (int)(LEN(send_c) * ds), MPI_BYTE, next,
                           INTER_TAG, x->scratch, (int)(LEN(recv_c) * ds), MPI_BYTE, prev,
                           INTER_TAG, x->cfg.comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv between nodes (reduce-scatter)");
    /* what came from the previous nodes first, then this node's */
    const void *srcs[2] = {x->scratch, buf + LO(recv_c) * ds};
    CHECK(combine(x, buf + LO(recv_c) * ds, srcs, 2, LEN(recv_c), dtype,
                  s == M - 2 ? op : partial(op), stream, err, errlen));
  }
  for (int s = 0; s < M - 1; s++) {
    int send_c = (r + 1 - s + M) % M, recv_c = (r - s + M) % M;
    MPI_CHECK(MPI_Sendrecv(buf + LO(send_c) * ds, (int)(LEN(send_c) * ds), MPI_BYTE, next,
                           INTER_TAG, buf + LO(recv_c) * ds, (int)(LEN(recv_c) * ds), MPI_BYTE,
                           prev, INTER_TAG, x->cfg.comm, MPI_STATUS_IGNORE),
              "MPI_Sendrecv between nodes (all-gather)");
  }
#undef LO
#undef LEN
  return 0;
}

static int reduce_piece(inter_t *x, char *buf, size_t n, shmddp_dtype_t dtype, shmddp_op_t op,
                        void *stream, char *err, size_t errlen)
{
  if (n * shmddp_dtype_size(dtype) <= INTER_SMALL_BYTES || n < (size_t)x->size)
    return gather_reduce(x, buf, n, dtype, op, stream, err, errlen);
  return ring(x, buf, n, dtype, op, stream, err, errlen);
}

int inter_all_reduce(inter_t *x, void *buf, size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                     void *stream, char *err, size_t errlen)
{
  if (x->size == 1 || count == 0) return 0;
  const size_t ds = shmddp_dtype_size(dtype);
  /* pieces of whole elements, and (for the ring's int counts) far below 2 GiB */
  const size_t per = x->cfg.piece_bytes / ds;
  const size_t npieces = (count + per - 1) / per;
  char *b = buf;
  if (x->mem == x->cfg.dev) { /* host buffers, or device buffers MPI reads itself */
    if (x->mem != DEV_HOST) CHECK(dev_stream_sync(stream, err, errlen));
    for (size_t k = 0; k < npieces; k++) {
      size_t n = k + 1 < npieces ? per : count - k * per;
      CHECK(reduce_piece(x, b + k * per * ds, n, dtype, op, stream, err, errlen));
    }
    return 0;
  }
  /* Staged: piece k+1 comes down (queued on stream behind piece k-1's way up, which read the
   * same host piece) while piece k crosses the network. */
  const int dev = x->cfg.dev;
#define PIECE_N(k) ((k) + 1 < npieces ? per : count - (k) * per)
  CHECK(dev_copy(x->stage[0], DEV_HOST, b, dev, PIECE_N(0) * ds, stream, err, errlen));
  CHECK(dev_event_record(x->down[0], stream, err, errlen));
  for (size_t k = 0; k < npieces; k++) {
    int i = (int)(k % 2);
    if (k + 1 < npieces) {
      int j = 1 - i;
      CHECK(dev_copy(x->stage[j], DEV_HOST, b + (k + 1) * per * ds, dev, PIECE_N(k + 1) * ds,
                     stream, err, errlen));
      CHECK(dev_event_record(x->down[j], stream, err, errlen));
    }
    CHECK(dev_event_sync(x->down[i], err, errlen));
    CHECK(reduce_piece(x, x->stage[i], PIECE_N(k), dtype, op, NULL, err, errlen));
    CHECK(dev_copy(b + k * per * ds, dev, x->stage[i], DEV_HOST, PIECE_N(k) * ds, stream, err,
                   errlen));
  }
#undef PIECE_N
  return 0;
}

int inter_broadcast(inter_t *x, void *buf, size_t bytes, int root, char *err, size_t errlen)
{
  if (x->size == 1 || bytes == 0) return 0;
  int staged = x->mem != x->cfg.dev;
  char *host = buf;
  if (staged) {
    host = malloc(bytes);
    if (!host) return check_fail(err, errlen, "out of memory broadcasting %zu bytes", bytes);
    if (dev_copy_now(host, DEV_HOST, buf, x->cfg.dev, bytes, err, errlen) != 0) {
      free(host);
      return -1;
    }
  }
  int rc = 0;
  for (size_t off = 0; rc == 0 && off < bytes; off += (size_t)INT_MAX / 2) {
    size_t n = bytes - off < (size_t)INT_MAX / 2 ? bytes - off : (size_t)INT_MAX / 2;
    int c = MPI_Bcast(host + off, (int)n, MPI_BYTE, root, x->cfg.comm);
    if (c != MPI_SUCCESS) rc = inter_mpi_fail(c, "MPI_Bcast between nodes", err, errlen);
  }
  if (rc == 0 && staged) rc = dev_copy_now(buf, x->cfg.dev, host, DEV_HOST, bytes, err, errlen);
  if (staged) free(host);
  return rc;
}
