/* optim_cuda.cu — fused optimizer updates over the flat f32 parameter buffer (SGD with momentum
 * and Nesterov, AdamW) from f32 or 16-bit gradients, optionally writing the 16-bit working copy
 * of the weights in the same pass, and the non-finite check behind fp16 loss scaling. One
 * pass, 16-byte accesses; the arithmetic is optim_cpu.c's, with explicit roundings (_rn) so no
 * multiply-add is fused and the results match the CPU reference to the last bit or nearly so. */
#include "config.h"

#include <stdio.h>

#include "kernels/ops_cuda.cuh"

#define OPT_CUDA(call)                                                                         \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess)                                                                     \
      return snprintf(err, errlen, "%s failed: %s", #call, cudaGetErrorString(e_)), -1;        \
  } while (0)

static unsigned opt_blocks(size_t n)
{
  size_t b = (n + OPC_THREADS - 1) / OPC_THREADS;
  if (b > 4096) b = 4096; /* grid-stride beyond: ~8 blocks per SM on the largest GPUs */
  return (unsigned)(b ? b : 1);
}

template <typename L> static __device__ __forceinline__ void put_lowp(L *lowp, size_t i, float v)
{
  if (lowp) lowp[i] = opc_st<L>(v);
}

/* Elements 4i..4i+3 as one access (8 bytes of 16-bit copy). */
template <typename L>
static __device__ __forceinline__ void put_lowp4(L *lowp, size_t i, const opc_pack<float, 4> &v)
{
  if (!lowp) return;
  opc_pack<L, 4> o;
  for (int k = 0; k < 4; k++) o.v[k] = opc_st<L>(v.v[k]);
  opc_store<L, 4>(lowp + 4 * i, o);
}

struct sgd_args {
  float lr, wd, momentum, scale;
  int nesterov;
};

template <typename L> static __device__ __forceinline__ float sgd_one(float p, float g, float *m,
                                                                      const sgd_args &a)
{
  g = __fadd_rn(__fmul_rn(g, a.scale), __fmul_rn(a.wd, p));
  if (m) {
    float b = __fadd_rn(__fmul_rn(a.momentum, *m), g);
    *m = b;
    g = a.nesterov ? __fadd_rn(g, __fmul_rn(a.momentum, b)) : b;
  }
  return __fsub_rn(p, __fmul_rn(a.lr, g));
}

template <typename G, typename L>
__global__ void sgd_kernel(float *p, const G *g, float *mom, size_t n, sgd_args a, L *lowp,
                           int vec)
{
  const size_t stride = (size_t)gridDim.x * blockDim.x, t = (size_t)blockIdx.x * blockDim.x +
                                                              threadIdx.x;
  size_t done = 0;
  if (vec) { /* p, g, mom aligned to 4 elements (16 bytes of f32): 4 at a time */
    done = n / 4 * 4;
    for (size_t i = t; i < n / 4; i += stride) {
      opc_pack<float, 4> pv = opc_load<float, 4>(p + 4 * i);
      opc_pack<G, 4> gv = opc_load<G, 4>(g + 4 * i);
      opc_pack<float, 4> mv;
      if (mom) mv = opc_load<float, 4>(mom + 4 * i);
      for (int k = 0; k < 4; k++) {
        pv.v[k] = sgd_one<L>(pv.v[k], opc_ld(gv.v[k]), mom ? &mv.v[k] : NULL, a);
      }
      put_lowp4(lowp, i, pv);
      opc_store<float, 4>(p + 4 * i, pv);
      if (mom) opc_store<float, 4>(mom + 4 * i, mv);
    }
  }
  for (size_t i = done + t; i < n; i += stride) {
    p[i] = sgd_one<L>(p[i], opc_ld(g[i]), mom ? &mom[i] : NULL, a);
    put_lowp(lowp, i, p[i]);
  }
}

struct adamw_args {
  float decay, b1, b2, omb1, omb2, step, inv_sqrt_bc2, eps, scale;
};

static __device__ __forceinline__ float adamw_one(float p, float g, float *m, float *v,
                                                  const adamw_args &a)
{
  g = __fmul_rn(g, a.scale);
  float mi = __fadd_rn(__fmul_rn(a.b1, *m), __fmul_rn(a.omb1, g));
  float vi = __fadd_rn(__fmul_rn(a.b2, *v), __fmul_rn(__fmul_rn(a.omb2, g), g));
  *m = mi;
  *v = vi;
  float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2), a.eps);
  return __fsub_rn(__fmul_rn(p, a.decay), __fdiv_rn(__fmul_rn(a.step, mi), den));
}

template <typename G, typename L>
__global__ void adamw_kernel(float *p, const G *g, float *m, float *v, size_t n,
                             adamw_args a, L *lowp, int vec)
{
  const size_t stride = (size_t)gridDim.x * blockDim.x, t = (size_t)blockIdx.x * blockDim.x +
                                                              threadIdx.x;
  size_t done = 0;
  if (vec) {
    done = n / 4 * 4;
    for (size_t i = t; i < n / 4; i += stride) {
      opc_pack<float, 4> pv = opc_load<float, 4>(p + 4 * i);
      opc_pack<G, 4> gv = opc_load<G, 4>(g + 4 * i);
      opc_pack<float, 4> mv = opc_load<float, 4>(m + 4 * i), vv = opc_load<float, 4>(v + 4 * i);
      for (int k = 0; k < 4; k++) {
        pv.v[k] = adamw_one(pv.v[k], opc_ld(gv.v[k]), &mv.v[k], &vv.v[k], a);
      }
      put_lowp4(lowp, i, pv);
      opc_store<float, 4>(p + 4 * i, pv);
      opc_store<float, 4>(m + 4 * i, mv);
      opc_store<float, 4>(v + 4 * i, vv);
    }
  }
  for (size_t i = done + t; i < n; i += stride) {
    p[i] = adamw_one(p[i], opc_ld(g[i]), &m[i], &v[i], a);
    put_lowp(lowp, i, p[i]);
  }
}

/* The f32 buffers 16-byte aligned, the gradients and the 16-bit copy aligned to 4 of their
 * elements: the vector path's accesses. */
static int aligned_vec(const void *grad, size_t gelem, const void *lowp, const void *a,
                       const void *b, const void *c)
{
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16) == 0 &&
         ((uintptr_t)grad % (4 * gelem)) == 0 && ((uintptr_t)lowp % 8) == 0;
}

/* The kernel for the low-precision copy's dtype (none, bf16, f16), gradients of type G. */
#define LAUNCH_LOWP(KERNEL, G, ...)                                                            \
  do {                                                                                         \
    const unsigned nb_ = opt_blocks(n / 4 + 1);                                                \
    if (!lowp)                                                                                 \
      KERNEL<G, float><<<nb_, OPC_THREADS, 0, st>>>(__VA_ARGS__, (float *)NULL, vec);         \
    else if (lowp_dtype == OPS_BF16)                                                           \
      KERNEL<G, __nv_bfloat16><<<nb_, OPC_THREADS, 0, st>>>(__VA_ARGS__,                      \
                                                            (__nv_bfloat16 *)lowp, vec);       \
    else if (lowp_dtype == OPS_F16)                                                            \
      KERNEL<G, __half><<<nb_, OPC_THREADS, 0, st>>>(__VA_ARGS__, (__half *)lowp, vec);       \
    else                                                                                       \
      return snprintf(err, errlen, "the optimizer writes 16-bit weight copies in bf16 or f16, " \
                      "not dtype %d", (int)lowp_dtype), -1;                                    \
    OPT_CUDA(cudaGetLastError());                                                              \
  } while (0)

/* ... and on the gradients' dtype (f32, or the working bf16/f16 read straight from backward). */
#define LAUNCH_GRAD(KERNEL, g, ...)                                                            \
  do {                                                                                         \
    if (grad_dtype == OPS_F32)                                                                 \
      LAUNCH_LOWP(KERNEL, float, p, (const float *)(g), __VA_ARGS__);                         \
    else if (grad_dtype == OPS_BF16)                                                           \
      LAUNCH_LOWP(KERNEL, __nv_bfloat16, p, (const __nv_bfloat16 *)(g), __VA_ARGS__);         \
    else if (grad_dtype == OPS_F16)                                                            \
      LAUNCH_LOWP(KERNEL, __half, p, (const __half *)(g), __VA_ARGS__);                       \
    else                                                                                       \
      return snprintf(err, errlen, "the optimizer reads f32, bf16 or f16 gradients, not "      \
                      "dtype %d", (int)grad_dtype), -1;                                        \
  } while (0)

static size_t grad_elem(ops_dtype_t d) { return d == OPS_F32 ? 4 : 2; }

int ops_cuda_sgd(float *p, const void *grad, ops_dtype_t grad_dtype, float *mom, size_t n,
                 double lr, double wd, double momentum, int nesterov, double grad_scale,
                 void *lowp, ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen)
{
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  sgd_args a = {(float)lr, (float)wd, (float)momentum, (float)grad_scale, nesterov};
  int vec = aligned_vec(grad, grad_elem(grad_dtype), lowp, p, mom, NULL);
  LAUNCH_GRAD(sgd_kernel, grad, momentum > 0 ? mom : NULL, n, a);
  return 0;
}

int ops_cuda_adamw(float *p, const void *grad, ops_dtype_t grad_dtype, float *m, float *v,
                   size_t n, double lr, double beta1, double beta2, double eps, double wd,
                   double bc1, double bc2, double grad_scale, void *lowp,
                   ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen)
{
  if (n == 0) return 0;
  cudaStream_t st = (cudaStream_t)stream;
  const float b1 = (float)beta1, b2 = (float)beta2;
  adamw_args a = {(float)(1.0 - lr * wd), b1, b2, 1 - b1, 1 - b2, (float)(lr / bc1),
                  (float)(1.0 / sqrt(bc2)), (float)eps, (float)grad_scale};
  int vec = aligned_vec(grad, grad_elem(grad_dtype), lowp, p, m, v);
  LAUNCH_GRAD(adamw_kernel, grad, m, v, n, a);
  return 0;
}

/* ---- non-finite check: any inf/NaN sets the flag (one atomic per block that saw one) ---- */

__global__ void nonfinite_kernel(const float *g, size_t n, int *flag, int vec)
{
  const size_t stride = (size_t)gridDim.x * blockDim.x, t = (size_t)blockIdx.x * blockDim.x +
                                                              threadIdx.x;
  int bad = 0;
  size_t done = 0;
  if (vec) {
    done = n / 4 * 4;
    for (size_t i = t; i < n / 4; i += stride) {
      opc_pack<float, 4> v = opc_load<float, 4>(g + 4 * i);
      for (int k = 0; k < 4; k++) bad |= !isfinite(v.v[k]);
    }
  }
  for (size_t i = done + t; i < n; i += stride) bad |= !isfinite(g[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1);
}

int ops_cuda_nonfinite_async(const float *g, size_t n, int *dev_flag, void *stream, char *err,
                             size_t errlen)
{
  if (n == 0) return 0;
  nonfinite_kernel<<<opt_blocks(n / 4 + 1), OPC_THREADS, 0, (cudaStream_t)stream>>>(
      g, n, dev_flag, ((uintptr_t)g % 16) == 0);
  OPT_CUDA(cudaGetLastError());
  return 0;
}

/* The synchronous check's flag: one per device (a __device__ variable exists per context). */
static __device__ int nonfinite_flag;

int ops_cuda_nonfinite(const float *g, size_t n, void *stream, int *found, char *err,
                       size_t errlen)
{
  cudaStream_t st = (cudaStream_t)stream;
  int *flag = NULL;
  OPT_CUDA(cudaGetSymbolAddress((void **)&flag, nonfinite_flag));
  OPT_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), st));
  if (ops_cuda_nonfinite_async(g, n, flag, stream, err, errlen)) return -1;
  int h = 0;
  OPT_CUDA(cudaMemcpyAsync(&h, flag, sizeof h, cudaMemcpyDeviceToHost, st));
  OPT_CUDA(cudaStreamSynchronize(st));
  *found = h != 0;
  return 0;
}
