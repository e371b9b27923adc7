/* coloc_kernel.cu — the co-located path's kernel: a leader reads every rank's buffer on its GPU
 * (or a peer GPU's, over P2P) and writes its group's outputs, in one launch, whatever the
 * collective (coloc_jobs.c makes the jobs; all-to-all, gather and scatter are CONCAT jobs). It
 * never waits for anything: the streams are ordered by events before it starts (cuda_coloc.c),
 * so the time slices of the contexts sharing the GPU are never spent spinning. The reduction is
 * collectives/reduce/reduce_cuda.h's, in rank order: the same bits as every other path.
 *
 * Bandwidth. An all-reduce of S bytes among n ranks on one GPU must read n inputs and write n
 * outputs: 2nS bytes through the GPU's memory, against 2S for a device-to-device copy of S. So
 * at best algbw = copy/n, and busbw (algbw * 2(n-1)/n, the multi-GPU convention the tables use)
 * = copy * 2(n-1)/n^2: 0.5 of the copy for 2 ranks, 0.375 for 4, 0.22 for 8. The kernel streams
 * at the memory's pace when every thread keeps several 16-byte loads in flight: each element is
 * read once from every input and its result stored once to every output of the group, in one
 * pass (grid-stride over 16-byte vectors, all sources' loads of U vectors issued before the
 * first use; 2 to 4 sources with a compile-time count). What is left between calls is the
 * protocol's hand-over (cuda_coloc.c), which no kernel can hide: bench/coloc_bandwidth_gpu.sh
 * measures both. */
#include <cuda_runtime.h>

#include "collectives/coloc/coloc_kernel.h"
#include "collectives/reduce/reduce_cuda.h"

#define COLOC_THREADS 512 /* per block */

/* Vectors by a loop with a compile-time count of sources (NS) and U vectors per thread in flight,
 * the elements after the last whole vector one by one: the arithmetic and order of
 * rc_reduce_range. */
template <typename T, int NS, int U>
static __device__ __forceinline__ void coloc_reduce_fixed(const coloc_job_t &j,
                                                          const coloc_args_t &a, size_t tid,
                                                          size_t nthreads)
{
  const size_t V = 16 / sizeof(T);
  size_t nvec = a.n / V, done = nvec * V;
  rc_reduce_vec_fixed<T, NS, U>(j.src, j.dst, j.ndst, nvec, a.op, a.avg_div, tid, nthreads);
  if (done == a.n) return;
  const void *src[NS];
  void *dst[SHMDDP_MAX_RANKS];
#pragma unroll
  for (int s = 0; s < NS; s++) src[s] = (const T *)j.src[s] + done;
  for (int d = 0; d < j.ndst; d++) dst[d] = (T *)j.dst[d] + done;
  rc_reduce_range<T>(src, NS, dst, j.ndst, a.n - done, a.op, a.avg_div, false, tid, nthreads);
}

template <typename T>
static __global__ void __launch_bounds__(COLOC_THREADS) coloc_kernel(coloc_args_t a)
{
  const coloc_job_t &j = a.job[blockIdx.y];
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t nthreads = (size_t)gridDim.x * blockDim.x;
  if (a.mode == COLOC_CONCAT) { /* source s to bytes [s n, (s + 1) n) of each destination */
    void *dst[SHMDDP_MAX_RANKS];
    for (int s = 0; s < j.nsrc; s++) {
      if (!j.src[s]) continue; /* already in place */
      for (int d = 0; d < j.ndst; d++) dst[d] = (char *)j.dst[d] + (size_t)s * a.n;
      rc_copy_range(j.src[s], dst, j.ndst, a.n, j.vec != 0, tid, nthreads);
    }
  } else if (a.mode != COLOC_REDUCE) {
    rc_copy_range(j.src[0], j.dst, j.ndst, a.n, j.vec != 0, tid, nthreads);
  } else if (j.vec && j.nsrc == 3) {
    coloc_reduce_fixed<T, 3, 2>(j, a, tid, nthreads);
  } else if (j.vec && j.nsrc == 4) {
    coloc_reduce_fixed<T, 4, 2>(j, a, tid, nthreads);
  } else { /* 2 sources: rc_reduce_range's own fixed loop (4 vectors in flight); 5 to 8: one */
    rc_reduce_range<T>(j.src, j.nsrc, j.dst, j.ndst, a.n, a.op, a.avg_div, j.vec != 0, tid,
                       nthreads);
  }
}

/* One wave: as many blocks as can be resident on every SM at once (the kernel's registers
 * decide how many per SM), shared among the jobs, and no more than one per 16 KiB; grid-stride
 * then keeps every SM busy to the end, where a second, partial wave would leave most of them idle
 * while it runs. */
template <typename T>
static void coloc_launch(const coloc_args_t *a, int sms, cudaStream_t s, int *err)
{
  /* The same for every GPU of a process (one architecture per build); ranks may be threads. */
  static int cached;
  int per_sm = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (per_sm == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coloc_kernel<T>,
                                                      COLOC_THREADS, 0) != cudaSuccess) {
      *err = (int)cudaGetLastError();
      return;
    }
    __atomic_store_n(&cached, per_sm, __ATOMIC_RELAXED);
  }
  size_t bytes = a->mode == COLOC_REDUCE ? a->n * sizeof(T) : a->n;
  if (a->mode == COLOC_CONCAT) { /* a job moves n bytes from each of its sources */
    int most_src = 1;
    for (int i = 0; i < a->njobs; i++)
      if (a->job[i].nsrc > most_src) most_src = a->job[i].nsrc;
    bytes *= (size_t)most_src;
  }
  size_t most = (size_t)(per_sm > 0 ? per_sm : 1) * (size_t)sms / (size_t)a->njobs;
  size_t blocks = (bytes + (16u << 10) - 1) / (16u << 10);
  if (blocks > most) blocks = most;
  if (blocks < 1) blocks = 1;
  dim3 grid((unsigned)blocks, (unsigned)a->njobs);
  coloc_kernel<T><<<grid, COLOC_THREADS, 0, s>>>(*a);
}

extern "C" int coloc_kernel_launch(const coloc_args_t *a, int sms, void *stream)
{
  if (a->njobs < 1 || a->njobs > SHMDDP_MAX_RANKS || sms < 1) return (int)cudaErrorInvalidValue;
  int err = 0;
  if (a->mode != COLOC_REDUCE) coloc_launch<float>(a, sms, (cudaStream_t)stream, &err);
  else RC_DISPATCH(a->dtype, coloc_launch, a, sms, (cudaStream_t)stream, &err);
  return err ? err : (int)cudaGetLastError();
}
