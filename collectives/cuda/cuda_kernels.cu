/* cuda_kernels.cu — the P2P kernels of the CUDA transport: the one-shot LL all-reduce, the
 * direct kernel (two-shot all-reduce, reduce-scatter, all-gather, broadcast, reduce, barrier),
 * and the P2P check's remote write.
 *
 * One-shot LL protocol. A 16-byte packet {lo, flag, hi, flag} carries 8 payload bytes; it is
 * written with one 16-byte volatile store, and NVLink/PCIe keep each 8-byte half whole, so a
 * reader that sees both flags equal to the call's sequence number also sees the payload: no
 * fence, no barrier. Every block keeps a copy of the call counter ll_seq[b]; a launch of G blocks
 * advances its own copies and block 0 advances the copies of the blocks not launched, so all
 * copies always equal the number of one-shot calls (on every rank), whatever the grid size — the
 * grid scales with the message. Receive slots are double-buffered by the
 * parity of seq: rank s can write call k+2 into a slot only after finishing call k+1, which needed
 * the receiver's packets of k+1, sent after the receiver finished reading call k. Flags equal to
 * seq (not >=) never match a stale packet, which carries seq-2.
 *
 * Direct kernels. Block b of every rank meets block b of every peer in a barrier at start (the
 * peers' buffers are ready and no longer in use by an earlier call) and at the end (every store
 * into a peer's buffer is done): thread t signals rank t's flag [b][me] with a release store of the
 * block's epoch and acquires its own flag [b][t] >= epoch. Epochs are per block, advance by 2 per
 * launch inside the kernel, and agree across ranks because every rank launches the same grids in
 * the same order (the grid is a function of the call's size only). */
#include <cuda_runtime.h>

#include "collectives/cuda/cuda_device.h"
#include "collectives/cuda/cuda_internal.h"
#include "collectives/reduce/reduce_cuda.h"

/* ---------------- one-shot (LL) ---------------- */

static __device__ __forceinline__ void ll_store(uint4 *slot, uint64_t v, uint32_t flag)
{
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(slot), "r"((uint32_t)v),
               "r"(flag), "r"((uint32_t)(v >> 32)), "r"(flag)
               : "memory");
}

static __device__ __forceinline__ bool ll_wait(const uint4 *slot, uint32_t flag, const cuda_kctl_t &k,
                                               uint64_t *out)
{
  cd_spin sp;
  for (;;) {
#pragma unroll 1
    for (int i = 0; i < 16; i++) {
      uint32_t x, y, z, w;
      asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(x), "=r"(y), "=r"(z), "=r"(w)
                   : "l"(slot)
                   : "memory");
      if (y == flag && w == flag) {
        *out = (uint64_t)x | ((uint64_t)z << 32);
        return true;
      }
    }
    if (!sp.keep_going(k)) return false;
  }
}

/* 8 bytes of the message starting at word w (zero-padded past its end). */
static __device__ __forceinline__ uint64_t ll_load_word(const void *buf, size_t w, size_t bytes, size_t ds)
{
  const unsigned char *p = (const unsigned char *)buf + w * 8;
  if (w * 8 + 8 <= bytes && ((uintptr_t)p & 7) == 0) return *(const uint64_t *)p;
  uint64_t v = 0;
  size_t left = bytes - w * 8 < 8 ? bytes - w * 8 : 8;
  unsigned char *o = (unsigned char *)&v;
  if (ds == 2)
    for (size_t i = 0; i < left; i += 2) *(uint16_t *)(o + i) = *(const uint16_t *)(p + i);
  else if (ds == 4)
    for (size_t i = 0; i < left; i += 4) *(uint32_t *)(o + i) = *(const uint32_t *)(p + i);
  else if (ds == 8)
    v = *(const uint64_t *)p; /* 8-byte elements are 8-byte aligned */
  else
    for (size_t i = 0; i < left; i++) o[i] = p[i]; /* bytes: any alignment */
  return v;
}

template <typename T>
static __global__ void __launch_bounds__(CUDA_LL_THREADS) ll_kernel(cuda_ll_args_t a)
{
  typedef typename rc_traits<T>::acc A;
  const int E = 8 / sizeof(T);
  if (cd_gave_up(a.k)) return;
  const int b = blockIdx.x;
  const uint32_t seq = a.ll_seq[b] + 1;
  const size_t par = seq & 1;
  const size_t bytes = a.count * sizeof(T);
  const size_t nwords = (bytes + 7) / 8;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid0 = (size_t)b * blockDim.x + threadIdx.x;

  for (size_t w = tid0; w < nwords; w += stride) {
    uint64_t v = ll_load_word(a.send, w, bytes, sizeof(T));
    for (int p = 0; p < a.nranks; p++) {
      if (p == a.rank) continue;
      uint4 *slot = (uint4 *)a.ll_peer[p] + ((par * a.nranks + a.rank) * CUDA_LL_WORDS + w);
      ll_store(slot, v, seq);
    }
  }
  const uint4 *mine = (const uint4 *)a.ll_peer[a.rank] + par * a.nranks * CUDA_LL_WORDS;
  for (size_t w = tid0; w < nwords; w += stride) {
    A acc[8 / sizeof(T)];
    bool ok = true;
    for (int r = 0; r < a.nranks && ok; r++) {
      uint64_t v;
      if (r == a.rank) v = ll_load_word(a.send, w, bytes, sizeof(T));
      else ok = ll_wait(mine + (size_t)r * CUDA_LL_WORDS + w, seq, a.k, &v);
      if (!ok) break;
      const T *e = (const T *)&v;
#pragma unroll
      for (int i = 0; i < E; i++)
        acc[i] = r == 0 ? rc_traits<T>::load(e[i]) : rc_op<A>::apply(acc[i], rc_traits<T>::load(e[i]), a.op);
    }
    if (!ok) break;
    uint64_t out;
    T *o = (T *)&out;
#pragma unroll
    for (int i = 0; i < E; i++) o[i] = rc_finish<T>(acc[i], a.op, a.avg_div);
    T *dst = (T *)a.recv + w * E;
    size_t left = a.count - w * E;
    if (left >= (size_t)E && ((uintptr_t)dst & 7) == 0) *(uint64_t *)dst = out;
    else
      for (int i = 0; i < E && (size_t)i < left; i++) dst[i] = o[i];
  }
  __syncthreads();
  if (threadIdx.x == 0 && !cd_gave_up(a.k)) {
    a.ll_seq[b] = seq;
    if (b == 0)
      for (int i = gridDim.x; i < CUDA_LL_BLOCKS; i++) a.ll_seq[i] = seq;
  }
}

template <typename T>
static void ll_launch(const cuda_ll_args_t *a, cudaStream_t s)
{
  /* about two packets per thread: enough parallelism to fill the links, few blocks when small */
  size_t words = (a->count * sizeof(T) + 7) / 8;
  size_t g = (words + 2 * CUDA_LL_THREADS - 1) / (2 * CUDA_LL_THREADS);
  if (g < 1) g = 1;
  if (g > CUDA_LL_BLOCKS) g = CUDA_LL_BLOCKS;
  ll_kernel<T><<<(int)g, CUDA_LL_THREADS, 0, s>>>(*a);
}

extern "C" int cuda_launch_ll(const cuda_ll_args_t *a, void *stream)
{
  RC_DISPATCH(a->dtype, ll_launch, a, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}

/* ---------------- direct ---------------- */

static __device__ __forceinline__ bool block_barrier(const uint64_t *mine, uint64_t *const *peers,
                                                     int nranks, int rank, int b, uint64_t ep,
                                                     const cuda_kctl_t &k)
{
  __syncthreads();
  int t = threadIdx.x;
  if (t < nranks && t != rank) {
    /* The block's stores into peers (made before the __syncthreads) are ordered before the flag
     * by this thread's system-scope fence and release (cumulative), as NCCL's protocols do:
     * one fence per signalling thread, not one per thread of the block. */
    __threadfence_system();
    cd_st_release(peers[t] + (size_t)b * CUDA_MAXR + rank, ep);
    cd_wait_ge(mine + (size_t)b * CUDA_MAXR + t, ep, k);
  }
  /* one answer for the whole block, so no thread is left alone at a later __syncthreads */
  return !__syncthreads_or(cd_gave_up(k));
}

static __device__ __forceinline__ bool block_barrier(const cuda_direct_args_t &a, int b, uint64_t ep)
{
  return block_barrier(a.dflags, a.dflags_peer, a.nranks, a.rank, b, ep, a.k);
}

template <typename T>
static __global__ void __launch_bounds__(CUDA_DIRECT_THREADS) direct_kernel(cuda_direct_args_t a)
{
  if (cd_gave_up(a.k)) return;
  const int b = blockIdx.x;
  const uint64_t ep = a.depoch[b];
  if (a.barrier_start && !block_barrier(a, b, ep + 1)) return;
  size_t tid = (size_t)b * blockDim.x + threadIdx.x, nthreads = (size_t)gridDim.x * blockDim.x;
  if (a.mode == CUDA_DIRECT_REDUCE)
    rc_reduce_range<T>(a.src, a.nsrc, a.dst, a.ndst, a.n, a.op, a.avg_div, a.vec != 0, tid, nthreads);
  else
    rc_copy_range(a.src[0], a.dst, a.ndst, a.n, a.vec != 0, tid, nthreads);
  if (a.barrier_end && !block_barrier(a, b, ep + 2)) return;
  if (threadIdx.x == 0) a.depoch[b] = ep + 2;
}

template <typename T>
static void direct_launch(const cuda_direct_args_t *a, int blocks, cudaStream_t s)
{
  direct_kernel<T><<<blocks, CUDA_DIRECT_THREADS, 0, s>>>(*a);
}

extern "C" int cuda_direct_blocks(size_t bytes)
{
  size_t b = (bytes + (16u << 10) - 1) / (16u << 10);
  if (b < 1) b = 1;
  if (b > CUDA_DIRECT_MAXB) b = CUDA_DIRECT_MAXB;
  return (int)b;
}

extern "C" int cuda_launch_direct(const cuda_direct_args_t *a, int blocks, void *stream)
{
  if (a->mode == CUDA_DIRECT_COPY) direct_launch<float>(a, blocks, (cudaStream_t)stream);
  else RC_DISPATCH(a->dtype, direct_launch, a, blocks, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}

/* ---------------- scratch two-shot ----------------
 * For mid sizes, where a host rendezvous per call (to learn the peers' buffers) would cost more
 * than the data: every rank copies its input into its own IPC-exported scratch (IN), block b of
 * every rank meets block b of every peer (barrier 1), reduces its part of its own slice from all
 * ranks' IN into its output and its scratch RES, meets again (barrier 2), and copies the peers'
 * parts of their slices from their RES into its output. Block b handles the same element range of
 * every slice on every rank, so the per-block barriers order exactly the data they guard.
 * Scratch is double-buffered by the parity of the call counter ts_seq (kept like ll_seq): a rank
 * writes parity p again at call k+2, and its call k+1 passed barrier 1 with every peer, whose
 * kernel k had therefore finished reading. */

template <typename T>
static __global__ void __launch_bounds__(CUDA_DIRECT_THREADS) ts_kernel(cuda_ts_args_t a)
{
  if (cd_gave_up(a.k)) return;
  const int b = blockIdx.x, G = gridDim.x, t = threadIdx.x, T_ = blockDim.x;
  const size_t ds = sizeof(T), V = 16 / sizeof(T);
  const uint32_t seq = a.ts_seq[b];
  const size_t par = seq & 1;
  const uint64_t ep = a.depoch[b];
  const size_t per = ((a.sl / V + G - 1) / G) * V;
  const size_t lo = (size_t)b * per, hi = lo + per < a.sl ? lo + per : a.sl;
  const unsigned char *send = (const unsigned char *)a.send;
  unsigned char *recv = (unsigned char *)a.recv;
#define TS_IN(r) (a.ts[r] + par * 2 * CUDA_TS_MAX)
#define TS_RES(r) (a.ts[r] + par * 2 * CUDA_TS_MAX + CUDA_TS_MAX)
  for (int s = 0; s < a.nranks; s++) {
    if (s == a.rank) continue;
    size_t e0 = s * a.sl + lo, e1 = s * a.sl + hi < a.count ? s * a.sl + hi : a.count;
    if (e0 >= e1) continue;
    void *dst[1] = {TS_IN(a.rank) + e0 * ds};
    rc_copy_range(send + e0 * ds, dst, 1, (e1 - e0) * ds, (((uintptr_t)send + e0 * ds) & 15) == 0, t, T_);
  }
  if (!block_barrier(a.dflags, a.dflags_peer, a.nranks, a.rank, b, ep + 1, a.k)) return;
  {
    size_t e0 = a.rank * a.sl + lo, e1 = a.rank * a.sl + hi < a.count ? a.rank * a.sl + hi : a.count;
    if (e0 < e1) {
      const void *srcs[CUDA_MAXR];
      uintptr_t bits = (uintptr_t)send + e0 * ds | (uintptr_t)recv + e0 * ds;
      for (int r = 0; r < a.nranks; r++)
        srcs[r] = r == a.rank ? (const void *)(send + e0 * ds) : (const void *)(TS_IN(r) + e0 * ds);
      void *dsts[2] = {recv + e0 * ds, TS_RES(a.rank) + lo * ds};
      rc_reduce_range<T>(srcs, a.nranks, dsts, 2, e1 - e0, a.op, a.avg_div, (bits & 15) == 0, t, T_);
    }
  }
  if (!block_barrier(a.dflags, a.dflags_peer, a.nranks, a.rank, b, ep + 2, a.k)) return;
  for (int s = 0; s < a.nranks; s++) {
    if (s == a.rank) continue;
    size_t e0 = s * a.sl + lo, e1 = s * a.sl + hi < a.count ? s * a.sl + hi : a.count;
    if (e0 >= e1) continue;
    void *dst[1] = {recv + e0 * ds};
    rc_copy_range(TS_RES(s) + lo * ds, dst, 1, (e1 - e0) * ds, (((uintptr_t)recv + e0 * ds) & 15) == 0, t, T_);
  }
#undef TS_IN
#undef TS_RES
  if (t == 0) {
    a.depoch[b] = ep + 2;
    a.ts_seq[b] = seq + 1;
    if (b == 0)
      for (int i = G; i < CUDA_DIRECT_MAXB; i++) a.ts_seq[i] = seq + 1;
  }
}

template <typename T>
static void ts_launch(const cuda_ts_args_t *a, int blocks, cudaStream_t s)
{
  ts_kernel<T><<<blocks, CUDA_DIRECT_THREADS, 0, s>>>(*a);
}

extern "C" int cuda_launch_ts(const cuda_ts_args_t *a, int blocks, void *stream)
{
  RC_DISPATCH(a->dtype, ts_launch, a, blocks, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}

/* ---------------- P2P check ---------------- */

typedef struct {
  uint64_t *targets[CUDA_MAXR];
  uint64_t values[CUDA_MAXR];
  int n;
} verify_args_t;

static __global__ void verify_write_kernel(verify_args_t a)
{
  int t = threadIdx.x;
  if (t < a.n) {
    *(volatile uint64_t *)a.targets[t] = a.values[t];
    __threadfence_system();
  }
}

extern "C" int cuda_launch_verify_write(uint64_t *const *targets, const uint64_t *values, int n,
                                        void *stream)
{
  verify_args_t a;
  a.n = n;
  for (int i = 0; i < n && i < CUDA_MAXR; i++) {
    a.targets[i] = targets[i];
    a.values[i] = values[i];
  }
  verify_write_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(a);
  return (int)cudaGetLastError();
}
