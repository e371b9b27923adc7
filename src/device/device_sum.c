/* device_sum.c — element-wise reductions of buffers on one device, with the collectives'
 * reduction kernels (collectives/reduce/): DataParallel's gradient sum over replicas and the
 * inter-node all-reduce's combining step (src/world/). A file of its own: it needs the shmddp
 * library, which the model does not. */
#include "config.h"

#include "src/device/device.h"

#include <stdio.h>

#include "collectives/reduce/reduce_cpu.h"
#include "src/check.h"

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "collectives/reduce/reduce_cuda.h"
#endif

int dev_reduce(void *dst, const void *const *srcs, int nsrc, size_t n, shmddp_dtype_t dtype,
               shmddp_op_t op, int avg_div, int dev, void *stream, char *err, size_t errlen)
{
  if (nsrc < 1 || nsrc > SHMDDP_MAX_RANKS)
    return check_fail(err, errlen, "reducing %d buffers: 1 to %d are supported", nsrc,
                      SHMDDP_MAX_RANKS);
  if (dev == DEV_HOST) {
    reduce_cpu_multi(dst, srcs, nsrc, n, dtype, op, avg_div);
    return 0;
  }
#ifdef HAVE_CUDNN
  int rc = reduce_cuda_multi(dst, srcs, nsrc, n, dtype, op, avg_div, stream);
  if (rc != 0)
    return check_fail(err, errlen, "reducing buffers on GPU %d: %s", dev,
                      cudaGetErrorString((cudaError_t)rc));
  return 0;
#else
  (void)stream;
  return check_fail(err, errlen, "this build has no GPU support: use --device cpu");
#endif
}

int dev_convert(void *dst, shmddp_dtype_t dst_t, const void *src, shmddp_dtype_t src_t, size_t n,
                int dev, void *stream, char *err, size_t errlen)
{
  int bad = 0;
  if (dev == DEV_HOST) {
    bad = reduce_cpu_convert(dst, dst_t, src, src_t, n) != 0;
  } else {
#ifdef HAVE_CUDNN
    int rc = reduce_cuda_convert(dst, dst_t, src, src_t, n, stream);
    if (rc == (int)cudaErrorInvalidValue) bad = 1;
    else if (rc != 0)
      return check_fail(err, errlen, "converting %zu values on GPU %d: %s", n, dev,
                        cudaGetErrorString((cudaError_t)rc));
#else
    (void)stream;
    return check_fail(err, errlen, "this build has no GPU support: use --device cpu");
#endif
  }
  if (bad)
    return check_fail(err, errlen, "converting %s to %s: only f32 <-> f16/bf16 is supported",
                      shmddp_dtype_name(src_t), shmddp_dtype_name(dst_t));
  return 0;
}
