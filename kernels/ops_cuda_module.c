/* ops_cuda_module.c — the entry point of the CUDA ops module (shmddp-ops-cuda.so): the table of
 * kernels/ops_cuda_module.h over ops_cuda.h's functions, and the library versions for the
 * doctor. The only symbol the module exports (kernels/ops_cuda_module.map). */
#include "config.h"

#include "kernels/ops_cuda_module.h"

#include <cudnn.h>
#ifdef HAVE_CUBLAS
#include <cublas_api.h>
#endif

#include "build_version.h"
#include "kernels/ops_cuda.h"

static void library_versions(long *cudnn, long *cublas)
{
  *cudnn = (long)cudnnGetVersion();
  *cublas = 0;
#ifdef HAVE_CUBLAS
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    *cublas = major * 10000L + minor * 100 + patch;
#endif
}

static const ops_cuda_module_t table = {
    .build = SHMDDP_BUILD_VERSION,
    .ops_size = sizeof(ops_t),
    .init = ops_cuda_init,
    .set_deterministic = ops_cuda_set_deterministic,
    .stream = ops_cuda_stream,
    .scratch_bytes = ops_cuda_scratch_bytes,
    .sgd = ops_cuda_sgd,
    .adamw = ops_cuda_adamw,
    .nonfinite = ops_cuda_nonfinite,
    .library_versions = library_versions,
};

const ops_cuda_module_t *ops_cuda_module(void) { return &table; }
