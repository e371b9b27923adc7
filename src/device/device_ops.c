/* device_ops.c — the ops backend of each device and the flat f32 arithmetic of the optimizer and
 * loss scaling: the CPU reference (kernels/..._cpu.c) on the host, the CUDA backend
 * (kernels/ops_cuda.h, in the CUDA ops module that ops_module.c loads on first use) on a GPU.
 * Apart from device.c the only place that knows which backends this build has. */
#include "config.h"

#include "src/device/device.h"

#include <stdio.h>

#include "kernels/optim_cpu.h"
#include "src/check.h"
#include "src/device/ops_module.h"

int dev_ops_init(ops_t *o, ops_dtype_t dtype, int dev, int deterministic, char *err,
                 size_t errlen)
{
  if (dev == DEV_HOST) return ops_cpu_init(o, dtype, err, errlen);
  const ops_cuda_module_t *m = ops_module_get(err, errlen);
  if (!m) return -1;
  CHECK(m->init(o, dtype, dev, NULL, err, errlen));
  m->set_deterministic(o, deterministic);
  return 0;
}

/* A GPU ops table was made by the module, so it is loaded (NULL: o is no table of a GPU). */
void *dev_ops_stream(const ops_t *o)
{
  const ops_cuda_module_t *m = o->device >= 0 ? ops_module_loaded() : NULL;
  return m ? m->stream(o) : NULL;
}

size_t dev_ops_scratch_bytes(const ops_t *o)
{
  const ops_cuda_module_t *m = o->device >= 0 ? ops_module_loaded() : NULL;
  return m ? m->scratch_bytes(o) : 0;
}

/* The CPU reference updates f32 parameters from f32 gradients; it keeps no 16-bit copy (the CPU
 * backend computes in f32). */
static int host_update_io(ops_dtype_t grad_dtype, const void *lowp, char *err, size_t errlen)
{
  if (grad_dtype == OPS_F32 && !lowp) return 0;
  snprintf(err, errlen, "the CPU optimizer reads f32 gradients and writes no 16-bit weight copy "
           "(gradients in %s%s)", ops_dtype_name(grad_dtype), lowp ? ", a copy asked for" : "");
  return -1;
}

int dev_sgd(int dev, float *p, const void *grad, ops_dtype_t grad_dtype, float *mom, size_t n,
            double lr, double wd, double momentum, int nesterov, double grad_scale, void *lowp,
            ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen)
{
  if (dev == DEV_HOST) {
    if (host_update_io(grad_dtype, lowp, err, errlen) != 0) return -1;
    optim_cpu_sgd(p, grad, mom, n, lr, wd, momentum, nesterov, grad_scale);
    return 0;
  }
  const ops_cuda_module_t *m = ops_module_get(err, errlen);
  if (!m) return -1;
  return m->sgd(p, grad, grad_dtype, mom, n, lr, wd, momentum, nesterov, grad_scale, lowp,
                lowp_dtype, stream, err, errlen);
}

int dev_adamw(int dev, float *p, const void *grad, ops_dtype_t grad_dtype, float *m, float *v,
              size_t n, double lr, double beta1, double beta2, double eps, double wd, double bc1,
              double bc2, double grad_scale, void *lowp, ops_dtype_t lowp_dtype, void *stream,
              char *err, size_t errlen)
{
  if (dev == DEV_HOST) {
    if (host_update_io(grad_dtype, lowp, err, errlen) != 0) return -1;
    optim_cpu_adamw(p, grad, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale);
    return 0;
  }
  const ops_cuda_module_t *mod = ops_module_get(err, errlen);
  if (!mod) return -1;
  return mod->adamw(p, grad, grad_dtype, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2,
                    grad_scale, lowp, lowp_dtype, stream, err, errlen);
}

int dev_nonfinite(int dev, const float *g, size_t n, void *stream, int *found, char *err,
                  size_t errlen)
{
  if (dev == DEV_HOST) {
    *found = optim_cpu_nonfinite(g, n);
    return 0;
  }
  const ops_cuda_module_t *m = ops_module_get(err, errlen);
  if (!m) return -1;
  return m->nonfinite(g, n, stream, found, err, errlen);
}
