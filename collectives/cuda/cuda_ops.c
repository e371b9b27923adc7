/* cuda_ops.c — the device collectives: algorithm choice and the host side of each algorithm
 * (argument set-up, buffer exchange, launches, the copy-engine pipeline). Kernels are in
 * cuda_kernels.cu and cuda_staged.cu.
 *
 * Choice (all_reduce, P2P): one-shot up to direct_max bytes (SHMDDP_CUDA_DIRECT_MAX, default
 * 1 MiB), two-shot above; the copy-engine algorithm only from ce_min (SHMDDP_CUDA_CE_MIN, default
 * never: on 2 x H200 it is slower than the two-shot at every size); without P2P always staged.
 * Two-shot runs through the scratch areas up to ts_max (SHMDDP_CUDA_TS_MAX: no host rendezvous,
 * which costs more than the data there), on the users' buffers above (zero copies), on at most
 * SHMDDP_CUDA_TS_BLOCKS blocks (default 128: all it can use; DDP's buckets overlap backward, where
 * fewer blocks leave SMs to the convolutions).
 * Forced algorithms (SHMDDP_ALGO, shmddp_comm_set_algo) are honoured where they exist for the
 * collective; "ring" means the copy-engine algorithm; P2P algorithms without P2P become staged.
 * Ranks that share a GPU: auto takes the co-located path (cuda_coloc.c) for every collective and
 * size, except under CUDA-graph capture (coloc_use_path); coloc forced takes it for any placement.
 *
 * Copy-engine all-reduce (cering), per rank r owning slice r of the buffer, in chunks:
 *   cs_in   pulls chunk j of slice r from every peer's send buffer into landing buffer j & 1
 *           (after the reduction of chunk j-2 has freed it)
 *   stream  reduces chunk j (own send + landed chunks, rank order) into recv
 *   cs_out  pushes the reduced chunk j into every peer's recv
 * A barrier kernel before (peers' buffers ready) and after (all pushes into this rank done, all
 * pulls from it done) brackets the pipeline; the side streams fork from and join back into the
 * caller's stream with events, so the whole sequence can be captured in a CUDA graph. */
#include "config.h"

#include <string.h>

#include "collectives/cuda/cuda_state.h"
#include "collectives/device.h"
#include "collectives/reduce/reduce_cuda.h"
#include "shm/check.h"

/* Blocks for a two-shot over slice_bytes: the usual count, capped by SHMDDP_CUDA_TS_BLOCKS. */
static int ts_blocks(const shmddp_comm_t *comm, size_t slice_bytes)
{
  int b = cuda_direct_blocks(slice_bytes), most = cuda_state(comm)->ts_blocks;
  return b < most ? b : most;
}

static shmddp_algo_t choose(const shmddp_comm_t *comm, coll_kind_t kind, size_t bytes,
                            shmddp_algo_t req)
{
  const cuda_state_t *s = cuda_state(comm);
  if (!s->p2p) return SHMDDP_ALGO_STAGED;
  if (req == SHMDDP_ALGO_RING) req = SHMDDP_ALGO_CE_RING;
  if (req == SHMDDP_ALGO_COLOC) return req;
  if (kind == COLL_ALL_REDUCE) {
    if (req != SHMDDP_ALGO_AUTO) return req;
    if (bytes <= s->direct_max) return SHMDDP_ALGO_DIRECT;
    return bytes < s->ce_min ? SHMDDP_ALGO_TWOSHOT : SHMDDP_ALGO_CE_RING;
  }
  /* The other collectives have the direct kernel and the staged one. */
  return req == SHMDDP_ALGO_STAGED ? SHMDDP_ALGO_STAGED : SHMDDP_ALGO_DIRECT;
}

/* Start a collective on device buffers: report kernels' earlier give-ups, then the common
 * bookkeeping. */
static shmddp_status_t enter(shmddp_comm_t *comm, coll_kind_t kind, size_t count,
                             shmddp_dtype_t dtype, shmddp_op_t op, int root, shmddp_algo_t algo)
{
  TRY(shmddp_cuda_check(comm));
  return coll_begin(comm, kind, count, dtype, op, root, algo);
}

static shmddp_status_t local_copy(shmddp_comm_t *comm, void *dst, const void *src, size_t bytes,
                                  shmddp_stream_t stream)
{
  if (dst != src && bytes)
    TRY_AS(cuda_failed, comm,
           cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  return SHMDDP_OK;
}

static void direct_init(const shmddp_comm_t *comm, cuda_direct_args_t *a, int mode,
                        shmddp_dtype_t dtype, shmddp_op_t op)
{
  cuda_state_t *s = cuda_state(comm);
  memset(a, 0, sizeof *a);
  a->mode = mode;
  a->dtype = dtype;
  a->op = op;
  a->avg_div = comm->nranks;
  a->nranks = comm->nranks;
  a->rank = comm->rank;
  a->barrier_start = a->barrier_end = 1;
  a->dflags = (uint64_t *)(s->ctrl + CUDA_OFF_DFLAGS);
  for (int r = 0; r < comm->nranks; r++)
    a->dflags_peer[r] = (uint64_t *)(s->ctrl_peer[r] + CUDA_OFF_DFLAGS);
  a->depoch = s->local_arrays.depoch;
  a->k = cuda_kctl(comm);
}

static void direct_set_vec(cuda_direct_args_t *a)
{
  uintptr_t bits = 0;
  for (int i = 0; i < a->nsrc; i++) bits |= (uintptr_t)a->src[i];
  for (int i = 0; i < a->ndst; i++) bits |= (uintptr_t)a->dst[i];
  a->vec = (bits & 15) == 0;
}

/* Elements per rank slice: the count split n ways, rounded up to whole 16-byte vectors so every
 * slice of an aligned buffer starts aligned. */
static size_t slice_elems(size_t count, int n, size_t ds)
{
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  size_t v = 16 / ds;
  return (per + v - 1) / v * v;
}

static shmddp_status_t barrier_launch(shmddp_comm_t *comm, shmddp_stream_t stream)
{
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_F32, SHMDDP_SUM);
  a.barrier_end = 0;
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, 1, stream));
  return SHMDDP_OK;
}

static shmddp_status_t coloc_staged(shmddp_comm_t *comm, const cuda_coloc_call_t *k);

/* The co-located path (cuda_coloc.c) for any of the collectives; when some rank's buffer cannot
 * be shared, the call's staged version after it (every rank alike). */
static shmddp_status_t coloc(shmddp_comm_t *comm, coll_kind_t kind, const void *send, void *recv,
                             size_t count, shmddp_dtype_t dtype, shmddp_op_t op, int root,
                             shmddp_stream_t stream)
{
  int me = comm->rank, staged = 0;
  cuda_coloc_call_t k = {.kind = kind, .send = send, .recv = recv, .count = count,
                         .dtype = dtype, .op = op, .root = root, .stream = stream};
  if ((kind == COLL_BROADCAST || kind == COLL_SCATTER) && me != root) k.send = NULL;
  if ((kind == COLL_REDUCE || kind == COLL_GATHER) && me != root) k.recv = NULL;
  TRY(cuda_coloc_run(comm, &k, &staged));
  return staged ? coloc_staged(comm, &k) : SHMDDP_OK;
}

/* ---------------- all_reduce ---------------- */

static shmddp_status_t ar_oneshot(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream)
{
  cuda_state_t *s = cuda_state(comm);
  size_t ds = shmddp_dtype_size(dtype), per = CUDA_LL_MAX_BYTES / ds;
  cuda_ll_args_t a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.op = op;
  a.avg_div = comm->nranks;
  a.nranks = comm->nranks;
  a.rank = comm->rank;
  for (int r = 0; r < comm->nranks; r++) a.ll_peer[r] = s->ctrl_peer[r] + CUDA_OFF_LL;
  a.ll_seq = s->local_arrays.ll_seq;
  a.k = cuda_kctl(comm);
  for (size_t off = 0; off < count; off += per) {
    a.send = (const char *)send + off * ds;
    a.recv = (char *)recv + off * ds;
    a.count = count - off < per ? count - off : per;
    TRY_AS(cuda_launch_failed, comm, cuda_launch_ll(&a, stream));
  }
  return SHMDDP_OK;
}

/* Two-shot through the scratch areas: no host rendezvous (mid sizes). */
static shmddp_status_t ar_twoshot_scratch(shmddp_comm_t *comm, const void *send, void *recv,
                                          size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                                          shmddp_stream_t stream)
{
  cuda_state_t *s = cuda_state(comm);
  size_t ds = shmddp_dtype_size(dtype);
  cuda_ts_args_t a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.op = op;
  a.avg_div = comm->nranks;
  a.nranks = comm->nranks;
  a.rank = comm->rank;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.sl = slice_elems(count, comm->nranks, ds);
  for (int r = 0; r < comm->nranks; r++) {
    a.ts[r] = s->ctrl_peer[r] + CUDA_OFF_TS(comm->nranks);
    a.dflags_peer[r] = (uint64_t *)(s->ctrl_peer[r] + CUDA_OFF_DFLAGS);
  }
  a.dflags = (uint64_t *)(s->ctrl + CUDA_OFF_DFLAGS);
  a.ts_seq = s->local_arrays.ts_seq;
  a.depoch = s->local_arrays.depoch;
  a.k = cuda_kctl(comm);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_ts(&a, ts_blocks(comm, a.sl * ds), stream));
  return SHMDDP_OK;
}

/* A buffer some rank cannot share: the scratch two-shot, piece by piece (no user buffer leaves
 * its rank; the pieces keep the buffers' 16-byte alignment). */
static shmddp_status_t ar_scratch_pieces(shmddp_comm_t *comm, const void *send, void *recv,
                                         size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                                         shmddp_stream_t stream)
{
  size_t ds = shmddp_dtype_size(dtype), per = cuda_state(comm)->ts_max / 16 * 16 / ds;
  for (size_t off = 0; off < count; off += per)
    TRY(ar_twoshot_scratch(comm, (const char *)send + off * ds, (char *)recv + off * ds,
                           count - off < per ? count - off : per, dtype, op, stream));
  return SHMDDP_OK;
}

/* Two-shot on the users' buffers (exchanged per call): large sizes, zero copies. */
static shmddp_status_t ar_twoshot(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                  shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream)
{
  if (count * shmddp_dtype_size(dtype) <= cuda_state(comm)->ts_max)
    return ar_twoshot_scratch(comm, send, recv, count, dtype, op, stream);
  void *P[2][CUDA_MAXR];
  const void *mine[2] = {send, recv};
  size_t ds = shmddp_dtype_size(dtype), len[2] = {count * ds, count * ds};
  int staged = 0;
  TRY(cuda_exchange(comm, 2, mine, len, stream, P, &staged));
  if (staged) return ar_scratch_pieces(comm, send, recv, count, dtype, op, stream);
  size_t sl = slice_elems(count, comm->nranks, ds);
  size_t lo = (size_t)comm->rank * sl, hi = lo + sl < count ? lo + sl : count;
  if (lo > hi) lo = hi;
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
  a.nsrc = a.ndst = comm->nranks;
  for (int r = 0; r < comm->nranks; r++) {
    a.src[r] = (const char *)P[0][r] + lo * ds;
    a.dst[r] = (char *)P[1][r] + lo * ds;
  }
  a.n = hi - lo;
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, ts_blocks(comm, sl * ds), stream));
  return SHMDDP_OK;
}

static shmddp_status_t ar_cering(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                 shmddp_dtype_t dtype, shmddp_op_t op, shmddp_stream_t stream)
{
  cuda_state_t *s = cuda_state(comm);
  cudaStream_t st = (cudaStream_t)stream;
  void *P[2][CUDA_MAXR];
  const void *mine[2] = {send, recv};
  size_t ds = shmddp_dtype_size(dtype), len[2] = {count * ds, count * ds};
  int staged = 0;
  TRY(cuda_exchange(comm, 2, mine, len, stream, P, &staged));
  if (staged) return ar_scratch_pieces(comm, send, recv, count, dtype, op, stream);
  int n = comm->nranks, me = comm->rank;
  size_t sl = slice_elems(count, n, ds);
  size_t lo = (size_t)me * sl, hi = lo + sl < count ? lo + sl : count;
  if (lo > hi) lo = hi;
  /* Chunks: about 1/32 of the slice (enough to pipeline, few enough to keep the host ahead),
   * between 1 MiB and the landing buffer, whole 4 KiB pages. */
  size_t cb = s->ce_chunk_env ? s->ce_chunk_env : sl * ds / 32;
  if (cb < ((size_t)1 << 20)) cb = (size_t)1 << 20;
  if (cb > s->ce_chunk) cb = s->ce_chunk;
  cb &= ~(size_t)4095;
  size_t ce = cb / ds;

  TRY(barrier_launch(comm, stream));
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_fork, st));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_in, s->ev_fork, 0));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_out, s->ev_fork, 0));
  size_t j = 0;
  for (size_t off = lo; off < hi; off += ce, j++) {
    size_t m = hi - off < ce ? hi - off : ce, k = j & 1;
    unsigned char *land = s->scratch + k * (size_t)(n - 1) * s->ce_chunk;
    if (j >= 2) TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_in, s->ev_red[k], 0));
    const void *srcs[CUDA_MAXR];
    for (int r = 0, q = 0; r < n; r++) {
      if (r == me) {
        srcs[r] = (const char *)send + off * ds;
        continue;
      }
      void *dst = land + (size_t)q++ * s->ce_chunk;
      TRY_AS(cuda_failed, comm, cudaMemcpyAsync(dst, (const char *)P[0][r] + off * ds, m * ds,
                                                cudaMemcpyDeviceToDevice, s->cs_in));
      srcs[r] = dst;
    }
    TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_cp[k], s->cs_in));
    TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_cp[k], 0));
    TRY_AS(cuda_launch_failed, comm,
           reduce_cuda_multi((char *)recv + off * ds, srcs, n, m, dtype, op, n, st));
    TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_red[k], st));
    TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(s->cs_out, s->ev_red[k], 0));
    for (int r = 0; r < n; r++)
      if (r != me)
        TRY_AS(cuda_failed, comm,
               cudaMemcpyAsync((char *)P[1][r] + off * ds, (char *)recv + off * ds, m * ds,
                               cudaMemcpyDeviceToDevice, s->cs_out));
  }
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_join_in, s->cs_in));
  TRY_AS(cuda_failed, comm, cudaEventRecord(s->ev_join_out, s->cs_out));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_join_in, 0));
  TRY_AS(cuda_failed, comm, cudaStreamWaitEvent(st, s->ev_join_out, 0));
  return barrier_launch(comm, stream);
}

static void staged_init(const shmddp_comm_t *comm, cuda_staged_args_t *a, int mode,
                        shmddp_dtype_t dtype, shmddp_op_t op)
{
  cuda_state_t *s = cuda_state(comm);
  memset(a, 0, sizeof *a);
  a->mode = mode;
  a->dtype = dtype;
  a->op = op;
  a->avg_div = comm->nranks;
  a->nranks = comm->nranks;
  a->rank = comm->rank;
  a->post_data = 1;
  for (int r = 0; r < comm->nranks; r++) a->region[r] = s->staged_dev + (size_t)r * CUDA_STAGED_REGION;
  a->sctr = s->local_arrays.sctr;
  a->k = cuda_kctl(comm);
}

static shmddp_status_t staged_launch(shmddp_comm_t *comm, const cuda_staged_args_t *a,
                                     shmddp_stream_t stream)
{
  TRY_AS(cuda_launch_failed, comm, cuda_launch_staged(a, stream));
  return SHMDDP_OK;
}

static shmddp_status_t cuda_all_reduce(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                                       shmddp_algo_t req, shmddp_stream_t stream)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  shmddp_algo_t algo = choose(comm, COLL_ALL_REDUCE, bytes, cuda_coloc_algo(comm, req, stream));
  TRY(enter(comm, COLL_ALL_REDUCE, count, dtype, op, -1, algo));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, bytes, stream);
  switch (algo) {
  case SHMDDP_ALGO_COLOC: return coloc(comm, COLL_ALL_REDUCE, send, recv, count, dtype, op, -1, stream);
  case SHMDDP_ALGO_DIRECT: return ar_oneshot(comm, send, recv, count, dtype, op, stream);
  case SHMDDP_ALGO_TWOSHOT: return ar_twoshot(comm, send, recv, count, dtype, op, stream);
  case SHMDDP_ALGO_CE_RING: return ar_cering(comm, send, recv, count, dtype, op, stream);
  default: {
    cuda_staged_args_t a;
    staged_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
    a.src = send;
    a.src_bytes = bytes;
    a.rd_lo = 0;
    a.rd_hi = count;
    a.dst = recv;
    return staged_launch(comm, &a, stream);
  }
  }
}

/* ---------------- reduce_scatter, all_gather, broadcast, reduce ---------------- */

/* The host-staged versions: the STAGED algorithm, and every call in which some rank's buffer
 * cannot be shared with its peers (decided alike on every rank by the exchange). */
static shmddp_status_t rs_staged(shmddp_comm_t *comm, const void *send, void *recv,
                                 size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                 shmddp_stream_t stream)
{
  cuda_staged_args_t a;
  staged_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
  a.src = send;
  a.src_bytes = recvcount * shmddp_dtype_size(dtype) * (size_t)comm->nranks;
  a.rd_lo = (size_t)comm->rank * recvcount;
  a.rd_hi = a.rd_lo + recvcount;
  a.dst = recv;
  return staged_launch(comm, &a, stream);
}

/* Every rank posts send; the ranks in `takers` copy every rank's into recv, in rank order. */
static shmddp_status_t gather_staged(shmddp_comm_t *comm, const void *send, void *recv,
                                     size_t bytes, shmddp_dtype_t dtype, int takers,
                                     shmddp_stream_t stream)
{
  cuda_staged_args_t a;
  staged_init(comm, &a, CUDA_DIRECT_COPY, dtype, 0);
  a.src = send;
  a.src_bytes = bytes;
  a.dst = recv;
  a.dst_stride = bytes;
  a.copy_mask = takers ? (1u << comm->nranks) - 1 : 0;
  return staged_launch(comm, &a, stream);
}

static shmddp_status_t ag_staged(shmddp_comm_t *comm, const void *send, void *recv, size_t bytes,
                                 shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  return gather_staged(comm, send, recv, bytes, dtype, 1, stream);
}

static shmddp_status_t bc_staged(shmddp_comm_t *comm, const void *send, void *recv, size_t bytes,
                                 shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  int me = comm->rank;
  cuda_staged_args_t a;
  staged_init(comm, &a, CUDA_DIRECT_COPY, dtype, 0);
  a.src = me == root ? send : NULL;
  a.src_bytes = bytes;
  a.post_data = me == root;
  a.dst = recv;
  a.copy_mask = me != root || recv != send ? 1u << root : 0;
  return staged_launch(comm, &a, stream);
}

static shmddp_status_t rd_staged(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                 shmddp_dtype_t dtype, shmddp_op_t op, int root,
                                 shmddp_stream_t stream)
{
  cuda_staged_args_t a;
  staged_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
  a.src = send;
  a.src_bytes = count * shmddp_dtype_size(dtype);
  a.rd_lo = 0;
  a.rd_hi = comm->rank == root ? count : 0;
  a.dst = recv;
  return staged_launch(comm, &a, stream);
}

static shmddp_status_t a2a_moves(shmddp_comm_t *comm, int staged, void *const *P,
                                 const void *send, void *recv, size_t bytes,
                                 shmddp_stream_t stream);
static shmddp_status_t scatter_moves(shmddp_comm_t *comm, int staged, void *const *P,
                                     const void *send, void *recv, size_t bytes, int root,
                                     shmddp_stream_t stream);

/* A co-located call whose buffers some rank cannot share: what the other algorithms do then. */
static shmddp_status_t coloc_staged(shmddp_comm_t *comm, const cuda_coloc_call_t *k)
{
  size_t bytes = k->count * shmddp_dtype_size(k->dtype);
  int me = comm->rank;
  switch (k->kind) {
  case COLL_ALL_REDUCE:
    return ar_scratch_pieces(comm, k->send, k->recv, k->count, k->dtype, k->op, k->stream);
  case COLL_REDUCE_SCATTER:
    return rs_staged(comm, k->send, k->recv, k->count, k->dtype, k->op, k->stream);
  case COLL_ALL_GATHER: return ag_staged(comm, k->send, k->recv, bytes, k->dtype, k->stream);
  case COLL_BROADCAST:
    return bc_staged(comm, k->send, k->recv, bytes, k->dtype, k->root, k->stream);
  case COLL_ALL_TO_ALL: return a2a_moves(comm, 1, NULL, k->send, k->recv, bytes, k->stream);
  case COLL_GATHER:
    return gather_staged(comm, k->send, k->recv, bytes, k->dtype, me == k->root, k->stream);
  case COLL_SCATTER:
    return scatter_moves(comm, 1, NULL, k->send, k->recv, bytes, k->root, k->stream);
  default:
    return rd_staged(comm, k->send, k->recv, k->count, k->dtype, k->op, k->root, k->stream);
  }
}

static shmddp_status_t cuda_reduce_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                           size_t recvcount, shmddp_dtype_t dtype, shmddp_op_t op,
                                           shmddp_algo_t req, shmddp_stream_t stream)
{
  size_t ds = shmddp_dtype_size(dtype), n = (size_t)comm->nranks;
  shmddp_algo_t algo = choose(comm, COLL_REDUCE_SCATTER, recvcount * ds * n,
                              cuda_coloc_algo(comm, req, stream));
  TRY(enter(comm, COLL_REDUCE_SCATTER, recvcount, dtype, op, -1, algo));
  if (recvcount == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, recvcount * ds, stream);
  if (algo == SHMDDP_ALGO_COLOC)
    return coloc(comm, COLL_REDUCE_SCATTER, send, recv, recvcount, dtype, op, -1, stream);
  if (algo == SHMDDP_ALGO_STAGED) return rs_staged(comm, send, recv, recvcount, dtype, op, stream);
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {send};
  size_t len[1] = {recvcount * ds * n};
  int staged = 0;
  TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  if (staged) return rs_staged(comm, send, recv, recvcount, dtype, op, stream);
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
  a.nsrc = comm->nranks;
  a.ndst = 1;
  for (int r = 0; r < comm->nranks; r++)
    a.src[r] = (const char *)P[0][r] + (size_t)comm->rank * recvcount * ds;
  a.dst[0] = recv;
  a.n = recvcount;
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm,
         cuda_launch_direct(&a, cuda_direct_blocks(recvcount * ds), stream));
  return SHMDDP_OK;
}

static shmddp_status_t cuda_all_gather(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t sendcount, shmddp_dtype_t dtype, shmddp_algo_t req,
                                       shmddp_stream_t stream)
{
  size_t ds = shmddp_dtype_size(dtype), bytes = sendcount * ds;
  shmddp_algo_t algo = choose(comm, COLL_ALL_GATHER, bytes * (size_t)comm->nranks,
                              cuda_coloc_algo(comm, req, stream));
  TRY(enter(comm, COLL_ALL_GATHER, sendcount, dtype, 0, -1, algo));
  if (sendcount == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, bytes, stream);
  if (algo == SHMDDP_ALGO_COLOC)
    return coloc(comm, COLL_ALL_GATHER, send, recv, sendcount, dtype, 0, -1, stream);
  if (algo == SHMDDP_ALGO_STAGED) return ag_staged(comm, send, recv, bytes, dtype, stream);
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {recv};
  size_t len[1] = {bytes * (size_t)comm->nranks};
  int staged = 0;
  TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  if (staged) return ag_staged(comm, send, recv, bytes, dtype, stream);
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_COPY, dtype, 0);
  a.nsrc = 1;
  a.src[0] = send;
  a.ndst = comm->nranks;
  for (int r = 0; r < comm->nranks; r++) a.dst[r] = (char *)P[0][r] + (size_t)comm->rank * bytes;
  a.n = bytes;
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, cuda_direct_blocks(bytes), stream));
  return SHMDDP_OK;
}

static shmddp_status_t cuda_broadcast(shmddp_comm_t *comm, const void *send, void *recv,
                                      size_t count, shmddp_dtype_t dtype, int root,
                                      shmddp_algo_t req, shmddp_stream_t stream)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  shmddp_algo_t algo = choose(comm, COLL_BROADCAST, bytes, cuda_coloc_algo(comm, req, stream));
  TRY(enter(comm, COLL_BROADCAST, count, dtype, 0, root, algo));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, bytes, stream);
  if (algo == SHMDDP_ALGO_COLOC)
    return coloc(comm, COLL_BROADCAST, send, recv, count, dtype, 0, root, stream);
  int me = comm->rank;
  if (algo == SHMDDP_ALGO_STAGED) return bc_staged(comm, send, recv, bytes, dtype, root, stream);
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {recv};
  size_t len[1] = {bytes};
  int staged = 0;
  TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  if (staged) return bc_staged(comm, send, recv, bytes, dtype, root, stream);
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_COPY, dtype, 0);
  if (me == root) {
    a.nsrc = 1;
    a.src[0] = send;
    for (int r = 0; r < comm->nranks; r++)
      if (r != me || recv != send) a.dst[a.ndst++] = P[0][r];
    a.n = bytes;
  }
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, cuda_direct_blocks(bytes), stream));
  return SHMDDP_OK;
}

static shmddp_status_t cuda_reduce(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                   shmddp_dtype_t dtype, shmddp_op_t op, int root,
                                   shmddp_algo_t req, shmddp_stream_t stream)
{
  size_t ds = shmddp_dtype_size(dtype), bytes = count * ds;
  shmddp_algo_t algo = choose(comm, COLL_REDUCE, bytes, cuda_coloc_algo(comm, req, stream));
  TRY(enter(comm, COLL_REDUCE, count, dtype, op, root, algo));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, bytes, stream);
  if (algo == SHMDDP_ALGO_COLOC)
    return coloc(comm, COLL_REDUCE, send, recv, count, dtype, op, root, stream);
  int me = comm->rank;
  if (algo == SHMDDP_ALGO_STAGED) return rd_staged(comm, send, recv, count, dtype, op, root, stream);
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {send};
  size_t len[1] = {bytes};
  int staged = 0;
  TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  if (staged) return rd_staged(comm, send, recv, count, dtype, op, root, stream);
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_REDUCE, dtype, op);
  if (me == root) {
    a.nsrc = comm->nranks;
    for (int r = 0; r < comm->nranks; r++) a.src[r] = P[0][r];
    a.ndst = 1;
    a.dst[0] = recv;
    a.n = count;
  }
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, cuda_direct_blocks(bytes), stream));
  return SHMDDP_OK;
}

/* ---------------- all-to-all, gather, scatter ----------------
 * Ranks that share a GPU: the co-located path, one call (one hand-over) like every collective.
 * Otherwise block moves, one direct copy kernel per block, every rank launching the same number
 * of kernels (a rank with nothing to move takes part in the handshakes only). P2P: the receivers' buffers
 * are exchanged and each rank pushes its blocks (launch j: rank r's block (r + j) % n); staged:
 * launch j posts the same blocks and each receiver copies the one that is its own. */

/* Launch j of n block moves: this rank posts/pushes block `to` of send (NULL: nothing) and
 * receives the block `from` posts into recv + from * stride (from < 0: nothing). */
static shmddp_status_t block_move(shmddp_comm_t *comm, int staged, void *const *P, const void *src,
                                  size_t bytes, int to, size_t dst_off, void *recv, int from,
                                  size_t stride, shmddp_stream_t stream)
{
  if (staged) {
    cuda_staged_args_t a;
    staged_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_U8, 0);
    a.src = src;
    a.src_bytes = bytes;
    a.post_data = src != NULL;
    a.dst = recv;
    a.dst_stride = stride;
    a.copy_mask = from >= 0 ? 1u << from : 0;
    return staged_launch(comm, &a, stream);
  }
  cuda_direct_args_t a;
  direct_init(comm, &a, CUDA_DIRECT_COPY, SHMDDP_U8, 0);
  if (src && P[to]) {
    a.nsrc = 1;
    a.src[0] = src;
    a.ndst = 1;
    a.dst[0] = (char *)P[to] + dst_off;
    a.n = bytes;
  }
  direct_set_vec(&a);
  TRY_AS(cuda_launch_failed, comm, cuda_launch_direct(&a, cuda_direct_blocks(bytes), stream));
  return SHMDDP_OK;
}

/* The start of a block-moving call: bookkeeping, the cases with nothing to move between ranks
 * (*done), and ranks that share a GPU: the co-located path (one call, *done). Returns the
 * algorithm through *staged. Only the co-located path is taken from a forced algorithm. */
static shmddp_status_t enter_moves(shmddp_comm_t *comm, coll_kind_t kind, const void *send,
                                   void *recv, size_t count, shmddp_dtype_t dtype, int root,
                                   shmddp_stream_t stream, int *staged, int *done)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  shmddp_algo_t req = cuda_coloc_algo(comm, comm->algo, stream);
  shmddp_algo_t algo = choose(comm, kind, bytes, req == SHMDDP_ALGO_COLOC ? req : SHMDDP_ALGO_AUTO);
  *staged = algo == SHMDDP_ALGO_STAGED;
  *done = 1;
  TRY(enter(comm, kind, count, dtype, 0, root, algo));
  if (count == 0) return SHMDDP_OK;
  if (comm->nranks == 1) return local_copy(comm, recv, send, bytes, stream);
  if (algo == SHMDDP_ALGO_COLOC) return coloc(comm, kind, send, recv, count, dtype, 0, root, stream);
  *done = 0;
  return SHMDDP_OK;
}

/* All-to-all as n block moves (launch j: this rank's block for rank (me + j) % n). */
static shmddp_status_t a2a_moves(shmddp_comm_t *comm, int staged, void *const *P,
                                 const void *send, void *recv, size_t bytes,
                                 shmddp_stream_t stream)
{
  int n = comm->nranks, me = comm->rank;
  for (int j = 0; j < n; j++) {
    int to = (me + j) % n, from = (me - j + n) % n;
    TRY(block_move(comm, staged, P, (const char *)send + (size_t)to * bytes, bytes, to,
                   (size_t)me * bytes, recv, from, bytes, stream));
  }
  return SHMDDP_OK;
}

/* Scatter as n block moves (launch j: the root's block for rank j). */
static shmddp_status_t scatter_moves(shmddp_comm_t *comm, int staged, void *const *P,
                                     const void *send, void *recv, size_t bytes, int root,
                                     shmddp_stream_t stream)
{
  int n = comm->nranks, me = comm->rank;
  for (int j = 0; j < n; j++) {
    const void *src = me == root ? (const char *)send + (size_t)j * bytes : NULL;
    TRY(block_move(comm, staged, P, src, bytes, j, 0, recv, me == j ? root : -1, 0, stream));
  }
  return SHMDDP_OK;
}

static shmddp_status_t cuda_all_to_all(shmddp_comm_t *comm, const void *send, void *recv,
                                       size_t count, shmddp_dtype_t dtype, shmddp_stream_t stream)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  int staged, done;
  size_t all = bytes * (size_t)comm->nranks;
  if ((const char *)send < (const char *)recv + all && (const char *)recv < (const char *)send + all)
    return coll_error(comm, SHMDDP_ERR_INVALID, "shmddp_all_to_all: on device buffers send and "
                      "recv must not overlap (a peer may overwrite a block before it is sent)");
  TRY(enter_moves(comm, COLL_ALL_TO_ALL, send, recv, count, dtype, -1, stream, &staged, &done));
  if (done) return SHMDDP_OK;
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {recv};
  size_t len[1] = {all};
  if (!staged) TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  return a2a_moves(comm, staged, P[0], send, recv, bytes, stream);
}

static shmddp_status_t cuda_gather(shmddp_comm_t *comm, const void *send, void *recv, size_t count,
                                   shmddp_dtype_t dtype, int root, shmddp_stream_t stream)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  int staged, done;
  TRY(enter_moves(comm, COLL_GATHER, send, recv, count, dtype, root, stream, &staged, &done));
  if (done) return SHMDDP_OK;
  int me = comm->rank;
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {me == root ? recv : NULL};
  size_t len[1] = {bytes * (size_t)comm->nranks};
  if (!staged) TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  if (staged) return gather_staged(comm, send, recv, bytes, dtype, me == root, stream);
  return block_move(comm, 0, P[0], send, bytes, root, (size_t)me * bytes, NULL, -1, 0, stream);
}

static shmddp_status_t cuda_scatter(shmddp_comm_t *comm, const void *send, void *recv,
                                    size_t count, shmddp_dtype_t dtype, int root,
                                    shmddp_stream_t stream)
{
  size_t bytes = count * shmddp_dtype_size(dtype);
  int staged, done;
  TRY(enter_moves(comm, COLL_SCATTER, send, recv, count, dtype, root, stream, &staged, &done));
  if (done) return SHMDDP_OK;
  void *P[1][CUDA_MAXR];
  const void *mine[1] = {recv};
  size_t len[1] = {bytes};
  if (!staged) TRY(cuda_exchange(comm, 1, mine, len, stream, P, &staged));
  return scatter_moves(comm, staged, P[0], send, recv, bytes, root, stream);
}

static shmddp_status_t cuda_scale(shmddp_comm_t *comm, const void *src, void *dst, size_t count,
                                  shmddp_dtype_t dtype, const void *scalar, int scalar_on_device,
                                  shmddp_stream_t stream)
{
  TRY(local_copy(comm, dst, src, count * shmddp_dtype_size(dtype), stream));
  TRY_AS(cuda_launch_failed, comm,
         reduce_cuda_scale(dst, count, dtype, scalar, scalar_on_device, stream));
  return SHMDDP_OK;
}

static void cuda_teardown(shmddp_comm_t *comm) { shmddp_comm_free_cuda(comm); }

const struct coll_device_ops cuda_device_ops = {
  .all_reduce = cuda_all_reduce,
  .reduce_scatter = cuda_reduce_scatter,
  .all_gather = cuda_all_gather,
  .broadcast = cuda_broadcast,
  .reduce = cuda_reduce,
  .all_to_all = cuda_all_to_all,
  .gather = cuda_gather,
  .scatter = cuda_scatter,
  .scale = cuda_scale,
  .teardown = cuda_teardown,
};
