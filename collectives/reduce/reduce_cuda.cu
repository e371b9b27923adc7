/* reduce_cuda.cu — the stand-alone multi-source reduction kernel (the copy-engine all-reduce
 * reduces each pulled chunk with it; the tests compare it with reduce_cpu_multi bit for bit). */
#include "collectives/reduce/reduce_cuda.h"

#include <cuda_runtime.h>
#include <string.h>

struct rc_multi_args {
  const void *srcs[RC_MAXSRC];
  void *dst;
  int nsrc, op, avg_div;
  size_t n;
  bool vec;
};

template <typename T>
static __device__ void rc_multi_body(const rc_multi_args &a)
{
  void *dsts[1] = {a.dst};
  rc_reduce_range<T>(a.srcs, a.nsrc, dsts, 1, a.n, a.op, a.avg_div, a.vec,
                     (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}

template <typename T>
static __global__ void __launch_bounds__(512) rc_multi_kernel(rc_multi_args a)
{
  rc_multi_body<T>(a);
}

template <typename T>
static void rc_multi_launch(const rc_multi_args &a, int blocks, cudaStream_t s)
{
  rc_multi_kernel<T><<<blocks, 512, 0, s>>>(a);
}

extern "C" int reduce_cuda_multi(void *dst, const void *const *srcs, int nsrc, size_t n,
                                 shmddp_dtype_t dtype, shmddp_op_t op, int avg_div, void *stream)
{
  if (n == 0) return 0;
  if (nsrc < 1 || nsrc > RC_MAXSRC || shmddp_dtype_size(dtype) == 0) return (int)cudaErrorInvalidValue;
  rc_multi_args a;
  a.dst = dst;
  a.nsrc = nsrc;
  a.op = (int)op;
  a.avg_div = avg_div > 0 ? avg_div : 1;
  a.n = n;
  uintptr_t bits = (uintptr_t)dst;
  for (int i = 0; i < nsrc; i++) {
    a.srcs[i] = srcs[i];
    bits |= (uintptr_t)srcs[i];
  }
  a.vec = (bits & 15) == 0;
  size_t bytes = n * shmddp_dtype_size(dtype);
  /* One 16-byte vector per thread per pass, at most 4 passes' worth of blocks... capped so a
   * chunk reduction leaves SMs to the compute it overlaps with. */
  size_t blocks = (bytes + 512 * 16 * 4 - 1) / (512 * 16 * 4);
  if (blocks < 1) blocks = 1;
  if (blocks > 264) blocks = 264;
  RC_DISPATCH(dtype, rc_multi_launch, a, (int)blocks, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}

/* ---- scaling (pre-multiplied sums) ---- */

template <typename T> struct rc_scalar { T v; };

template <typename T>
static __global__ void rc_scale_kernel(T *buf, size_t n, const T *dev_scalar, rc_scalar<T> host)
{
  typedef typename rc_traits<T>::acc A;
  A s = rc_traits<T>::load(dev_scalar ? *dev_scalar : host.v);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    buf[i] = rc_traits<T>::store(rc_op<A>::apply(rc_traits<T>::load(buf[i]), s, SHMDDP_PROD));
}

template <typename T>
static void rc_scale_launch(void *buf, size_t n, const void *scalar, int on_device, cudaStream_t st)
{
  rc_scalar<T> host;
  memset(&host, 0, sizeof host);
  if (!on_device) memcpy(&host.v, scalar, sizeof(T));
  size_t blocks = (n + 1023) / 1024;
  if (blocks > 1056) blocks = 1056;
  rc_scale_kernel<T><<<(unsigned)blocks, 256, 0, st>>>((T *)buf, n,
                                                       on_device ? (const T *)scalar : NULL, host);
}

extern "C" int reduce_cuda_scale(void *buf, size_t n, shmddp_dtype_t dtype, const void *scalar,
                                 int scalar_on_device, void *stream)
{
  if (n == 0) return 0;
  if (shmddp_dtype_size(dtype) == 0 || !scalar) return (int)cudaErrorInvalidValue;
  RC_DISPATCH(dtype, rc_scale_launch, buf, n, scalar, scalar_on_device, (cudaStream_t)stream);
  return (int)cudaGetLastError();
}

/* ---- conversions between f32 and the 16-bit float types ---- */

template <typename T>
static __global__ void rc_narrow_kernel(T *dst, const float *src, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = rc_traits<T>::store(src[i]);
}

template <typename T>
static __global__ void rc_widen_kernel(float *dst, const T *src, size_t n)
{
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = rc_traits<T>::load(src[i]);
}

template <typename T>
static void rc_convert_launch(void *dst, const void *src, size_t n, int narrow, cudaStream_t st)
{
  size_t blocks = (n + 1023) / 1024;
  if (blocks > 1056) blocks = 1056; /* grid-stride beyond: 8 per SM of the largest GPUs */
  if (narrow) rc_narrow_kernel<T><<<(unsigned)blocks, 256, 0, st>>>((T *)dst, (const float *)src, n);
  else rc_widen_kernel<T><<<(unsigned)blocks, 256, 0, st>>>((float *)dst, (const T *)src, n);
}

extern "C" int reduce_cuda_convert(void *dst, shmddp_dtype_t dst_t, const void *src,
                                   shmddp_dtype_t src_t, size_t n, void *stream)
{
  cudaStream_t st = (cudaStream_t)stream;
  if (dst_t == src_t) {
    size_t es = shmddp_dtype_size(dst_t);
    if (!es) return (int)cudaErrorInvalidValue;
    if (n && dst != src)
      return (int)cudaMemcpyAsync(dst, src, n * es, cudaMemcpyDeviceToDevice, st);
    return 0;
  }
  int narrow = src_t == SHMDDP_F32, half = narrow ? dst_t : src_t;
  if ((narrow ? src_t : dst_t) != SHMDDP_F32 || (half != SHMDDP_BF16 && half != SHMDDP_F16))
    return (int)cudaErrorInvalidValue;
  if (n == 0) return 0;
  if (half == SHMDDP_BF16) rc_convert_launch<rc_bf16>(dst, src, n, narrow, st);
  else rc_convert_launch<rc_f16>(dst, src, n, narrow, st);
  return (int)cudaGetLastError();
}
