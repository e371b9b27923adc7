/* cuda_staged.cu — the host-staged kernel: collectives between GPUs without working P2P, through
 * shared host memory that every rank has cudaHostRegister'ed (zero-copy: the kernel itself writes
 * its chunks to host memory and reads the peers' chunks from it over PCIe).
 *
 * Protocol, per block b (a fixed grid; chunk j of the posted stream belongs to block j % grid, so
 * every rank's block b handles the same chunks and its counter sctr[b] — the number of chunks it
 * has handled, advanced inside the kernel — agrees across ranks):
 *   use u = ++sctr[b]; slot = u & 1 (two slots per block, so posting chunk u overlaps reading u-1)
 *   1. wait until every reader has acked use u-2 of this slot: ack[b][reader] >= u-2
 *   2. write the chunk into region[me].data[b][slot]; every thread fences (system scope), then
 *      one thread publishes post[b] = u with a release store
 *   3. wait until every peer's post[b] >= u (acquire), then reduce or copy from their slots
 *   4. after a block barrier, ack each writer: region[writer].ack[b][me] = u (release: the reads
 *      are done before the writer may reuse the slot)
 * Every wait also watches the abort word and the deadline (cuda_device.h). */
#include <cuda_runtime.h>

#include "collectives/cuda/cuda_device.h"
#include "collectives/cuda/cuda_internal.h"
#include "collectives/reduce/reduce_cuda.h"

static __device__ __forceinline__ uint64_t *st_post(unsigned char *region, int b)
{
  return (uint64_t *)region + b;
}
static __device__ __forceinline__ uint64_t *st_ack(unsigned char *region, int b, int reader)
{
  return (uint64_t *)(region + 1024) + (size_t)b * CUDA_MAXR + reader;
}
static __device__ __forceinline__ unsigned char *st_data(unsigned char *region, int b, int slot)
{
  return region + CUDA_STAGED_HDR + ((size_t)b * 2 + slot) * CUDA_STAGED_CHUNK;
}

template <typename T>
static __global__ void __launch_bounds__(CUDA_STAGED_THREADS) staged_kernel(cuda_staged_args_t a)
{
  if (cd_gave_up(a.k)) return;
  const int b = blockIdx.x, t = threadIdx.x;
  const size_t C = CUDA_STAGED_CHUNK, ds = sizeof(T);
  const size_t nchunks = (a.src_bytes + C - 1) / C;
  uint64_t u = a.sctr[b];
  bool ok = true;
  for (size_t j = b; j < nchunks && ok; j += gridDim.x) {
    u++;
    const int slot = (int)(u & 1);
    const size_t off = j * C, len = a.src_bytes - off < C ? a.src_bytes - off : C;
    unsigned char *mine = a.region[a.rank];
    if (u > 2 && t < a.nranks && t != a.rank) cd_wait_ge(st_ack(mine, b, t), u - 2, a.k);
    if (__syncthreads_or(cd_gave_up(a.k))) { ok = false; break; }
    if (a.post_data) {
      unsigned char *dst = st_data(mine, b, slot);
      void *dsts[1] = {dst};
      rc_copy_range((const unsigned char *)a.src + off, dsts, 1, len,
                    (((uintptr_t)a.src + off) & 15) == 0, t, blockDim.x);
    }
    __threadfence_system();
    __syncthreads();
    if (t == 0) cd_st_release(st_post(mine, b), u);
    if (t < a.nranks && t != a.rank) cd_wait_ge(st_post(a.region[t], b), u, a.k);
    if (__syncthreads_or(cd_gave_up(a.k))) { ok = false; break; }

    if (a.mode == CUDA_DIRECT_REDUCE) {
      size_t e0 = off / ds, e1 = (off + len) / ds;
      size_t lo = e0 > a.rd_lo ? e0 : a.rd_lo, hi = e1 < a.rd_hi ? e1 : a.rd_hi;
      if (lo < hi) {
        const void *srcs[CUDA_MAXR];
        uintptr_t bits = 0;
        for (int r = 0; r < a.nranks; r++) {
          srcs[r] = r == a.rank ? (const void *)((const unsigned char *)a.src + lo * ds)
                                : (const void *)(st_data(a.region[r], b, slot) + (lo * ds - off));
          bits |= (uintptr_t)srcs[r];
        }
        void *dsts[1] = {(unsigned char *)a.dst + (lo - a.rd_lo) * ds};
        bits |= (uintptr_t)dsts[0];
        rc_reduce_range<T>(srcs, a.nranks, dsts, 1, hi - lo, a.op, a.avg_div, (bits & 15) == 0, t,
                           blockDim.x);
      }
    } else {
      for (int r = 0; r < a.nranks; r++) {
        if (!(a.copy_mask & (1u << r))) continue;
        const void *src = r == a.rank ? (const void *)((const unsigned char *)a.src + off)
                                      : (const void *)st_data(a.region[r], b, slot);
        void *dsts[1] = {(unsigned char *)a.dst + r * a.dst_stride + off};
        bool vec = (((uintptr_t)src | (uintptr_t)dsts[0]) & 15) == 0;
        rc_copy_range(src, dsts, 1, len, vec, t, blockDim.x);
      }
    }
    __syncthreads();
    if (t < a.nranks && t != a.rank) cd_st_release(st_ack(a.region[t], b, a.rank), u);
  }
  if (ok && t == 0) a.sctr[b] = u;
}

template <typename T>
static void staged_launch(const cuda_staged_args_t *a, cudaStream_t s)
{
  staged_kernel<T><<<CUDA_STAGED_BLOCKS, CUDA_STAGED_THREADS, 0, s>>>(*a);
}

extern "C" int cuda_launch_staged(const cuda_staged_args_t *a, void *stream)
{
  if (a->mode == CUDA_DIRECT_COPY) staged_launch<float>(a, (cudaStream_t)stream);
  else RC_DISPATCH(a->dtype, staged_launch, a, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}
