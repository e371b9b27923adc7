/* sm90_host.cu — the host side the Hopper convolutions share (kernels/sm90_host.h). */
#include "config.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/sm90_host.h"
#include "kernels/sm90_regs.h"

namespace sm90 {

encode_tiled_fn encode_tiled()
{
  static const encode_tiled_fn fn = [] {
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      f = NULL;
    }
    return (encode_tiled_fn)f;
  }();
  return fn;
}

int fail(char *err, size_t len, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  if (err && len) vsnprintf(err, len, fmt, ap);
  va_end(ap);
  return -1;
}

int map_image_c(CUtensorMap *m, const void *base, int n, int h, int w, int channels, int bw,
                int bh, char *err, size_t len)
{
  const cuuint64_t C = (cuuint64_t)channels;
  const cuuint64_t dim[4] = {C, (cuuint64_t)w, (cuuint64_t)h, (cuuint64_t)n};
  const cuuint64_t stride[3] = {C * 2, (cuuint64_t)w * C * 2, (cuuint64_t)h * w * C * 2};
  const cuuint32_t box[4] = {64, (cuuint32_t)bw, (cuuint32_t)bh, 1};
  const cuuint32_t one[4] = {1, 1, 1, 1};
  CUresult r = encode_tiled()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void *>(base),
                              dim, stride, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : fail(err, len, "cuTensorMapEncodeTiled (image) failed: %d", (int)r);
}

int map_image(CUtensorMap *m, const void *base, int n, int h, int w, int bw, int bh, char *err,
              size_t len)
{
  return map_image_c(m, base, n, h, w, 64, bw, bh, err, len);
}

int sm_count(int device)
{
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return v;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

int regs_fit(int num_regs, int threads, int need, const char *what, char *err, size_t len)
{
  if (sm90_regs_fit(num_regs, threads, need)) return 0;
  return fail(err, len, "the %s was built with %d registers a thread (%d for its %d threads), but "
              "its warpgroups take %d after the hand-over and would wait for them forever: build "
              "it again with this source's __launch_bounds__", what, num_regs, num_regs * threads,
              threads, need);
}

} // namespace sm90
