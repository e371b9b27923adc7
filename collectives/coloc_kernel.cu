/* coloc_kernel.cu — the co-located path's kernel: a leader reads every rank's buffer on its GPU
 * (or a peer GPU's, over P2P) and writes its group's outputs, in one launch. It never waits for
 * anything: the streams are ordered by events before it starts (cuda_coloc.c), so the time
 * slices of the contexts sharing the GPU are never spent spinning. The reduction is
 * collectives/reduce/reduce_cuda.h's, in rank order: the same bits as every other path. */
#include <cuda_runtime.h>

#include "collectives/cuda_coloc.h"
#include "collectives/reduce/reduce_cuda.h"

template <typename T>
static __global__ void __launch_bounds__(CUDA_DIRECT_THREADS) coloc_kernel(cuda_coloc_args_t a)
{
  const cuda_coloc_job_t &j = a.job[blockIdx.y];
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t nthreads = (size_t)gridDim.x * blockDim.x;
  if (a.mode == CUDA_DIRECT_REDUCE)
    rc_reduce_range<T>(j.src, j.nsrc, j.dst, j.ndst, a.n, a.op, a.avg_div, j.vec != 0, tid,
                       nthreads);
  else
    rc_copy_range(j.src[0], j.dst, j.ndst, a.n, j.vec != 0, tid, nthreads);
}

template <typename T>
static void coloc_launch(const cuda_coloc_args_t *a, int blocks, cudaStream_t s)
{
  dim3 grid((unsigned)blocks, (unsigned)a->njobs);
  coloc_kernel<T><<<grid, CUDA_DIRECT_THREADS, 0, s>>>(*a);
}

extern "C" int cuda_launch_coloc(const cuda_coloc_args_t *a, int blocks, void *stream)
{
  if (a->njobs < 1 || a->njobs > CUDA_MAXR || blocks < 1) return (int)cudaErrorInvalidValue;
  if (a->mode == CUDA_DIRECT_COPY) coloc_launch<float>(a, blocks, (cudaStream_t)stream);
  else RC_DISPATCH(a->dtype, coloc_launch, a, blocks, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}
