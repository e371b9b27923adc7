/* ops_cuda_module.h — the CUDA backend (kernels/ops_cuda.h) as a shared module of its own,
 * shmddp-ops-cuda.so, with cuBLAS, cuBLASLt and cuDNN as its dependencies: the programs do not
 * link them, and load the module on first GPU use (src/device/ops_module.c says why). The
 * module exports one symbol, OPS_CUDA_MODULE_ENTRY, a function that returns the table below:
 * the part of ops_cuda.h the trainer calls (the ops themselves are in the ops_t that init
 * fills). A program takes the module only from its own build (build and ops_size). */
#ifndef KERNELS_OPS_CUDA_MODULE_H
#define KERNELS_OPS_CUDA_MODULE_H

#include <stddef.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPS_CUDA_MODULE_FILE "shmddp-ops-cuda.so"
#define OPS_CUDA_MODULE_ENTRY "ops_cuda_module"

typedef struct {
  const char *build; /* SHMDDP_BUILD_VERSION of the module's build */
  size_t ops_size;   /* sizeof(ops_t) there */
  /* ops_cuda.h's functions of the same names */
  int (*init)(ops_t *o, ops_dtype_t dtype, int device, void *stream, char *err, size_t errlen);
  void (*set_deterministic)(ops_t *o, int on);
  void *(*stream)(const ops_t *o);
  size_t (*scratch_bytes)(const ops_t *o);
  int (*sgd)(float *p, const void *grad, ops_dtype_t grad_dtype, float *mom, size_t n, double lr,
             double wd, double momentum, int nesterov, double grad_scale, void *lowp,
             ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen);
  int (*adamw)(float *p, const void *grad, ops_dtype_t grad_dtype, float *m, float *v, size_t n,
               double lr, double beta1, double beta2, double eps, double wd, double bc1,
               double bc2, double grad_scale, void *lowp, ops_dtype_t lowp_dtype, void *stream,
               char *err, size_t errlen);
  int (*nonfinite)(const float *g, size_t n, void *stream, int *found, char *err, size_t errlen);
  /* The versions of the cuDNN and cuBLAS the module runs on, as MAJOR*10000 + MINOR*100 +
   * PATCH (0: built without it). Touches no GPU. */
  void (*library_versions)(long *cudnn, long *cublas);
} ops_cuda_module_t;

typedef const ops_cuda_module_t *(*ops_cuda_module_fn)(void);

const ops_cuda_module_t *ops_cuda_module(void);

#ifdef __cplusplus
}
#endif

#endif
