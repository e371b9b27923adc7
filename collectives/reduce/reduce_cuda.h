/* reduce_cuda.h — element-wise reductions on the GPU, bit-for-bit the arithmetic of
 * collectives/reduce/reduce_cpu.c: f16/bf16 accumulate in f32, f64 in f64, integers wrap; sources are
 * combined in the order given (rank order), the result is rounded once; NaN propagates through
 * min/max exactly as OP_MIN/OP_MAX there; f16/bf16 rounding (NaN encoding included) copies
 * collectives/reduce/half.h, so a GPU result equals the CPU reference's bits.
 *
 * C code sees one launcher (reduce_cuda_multi); CUDA code (the collective kernels) also gets the
 * device-side building blocks below, so every kernel reduces with the same code. */
#ifndef COLLECTIVES_REDUCE_REDUCE_CUDA_H
#define COLLECTIVES_REDUCE_REDUCE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "shmddp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = reduce(srcs[0][i], ..., srcs[nsrc-1][i]) for i < n, on stream (a cudaStream_t).
 * srcs and dst are device (or peer-mapped) pointers; dst may alias a source; 1 <= nsrc <= 8.
 * Returns 0 or the cudaError_t of the launch. */
int reduce_cuda_multi(void *dst, const void *const *srcs, int nsrc, size_t n, shmddp_dtype_t dtype,
                      shmddp_op_t op, int avg_div, void *stream);
/* buf[i] *= scalar for i < n, in the accumulator type (f32 for f16/bf16; integers wrap), rounded
 * once: the arithmetic of reduce_cpu_scale. scalar points to one dtype element, in device memory
 * when scalar_on_device (read by the kernel, so it may change between graph replays), else on
 * the host (read now). The NCCL front end's pre-multiplied sum. */
int reduce_cuda_scale(void *buf, size_t n, shmddp_dtype_t dtype, const void *scalar,
                      int scalar_on_device, void *stream);
/* reduce_cpu_convert on the GPU, queued on stream, the same bits: f32 <-> f16/bf16. Returns 0,
 * cudaErrorInvalidValue for another pair of types, or the launch's cudaError_t. */
int reduce_cuda_convert(void *dst, shmddp_dtype_t dst_t, const void *src, shmddp_dtype_t src_t,
                        size_t n, void *stream);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_fp16.h>

#include "collectives/reduce/half.h"

#define RC_MAXSRC 8

/* Storage types: f16 and bf16 are both 16-bit words, so they get distinct wrappers. */
struct rc_f16 { uint16_t u; };
struct rc_bf16 { uint16_t u; };

/* The 8-bit floats: a byte tagged with its format (mantissa bits, bias, whether it has an
 * infinity); half.h converts, on the host and here alike. */
template <int M, int B, int INF> struct rc_f8 { uint8_t u; };
typedef rc_f8<3, 7, 0> rc_f8e4m3;
typedef rc_f8<2, 15, 1> rc_f8e5m2;

/* __ldcg has no overloads for the 16- and 8-bit wrappers. */
static __device__ __forceinline__ rc_f16 __ldcg(const rc_f16 *p) { rc_f16 r; r.u = __ldcg((const unsigned short *)p); return r; }
static __device__ __forceinline__ rc_bf16 __ldcg(const rc_bf16 *p) { rc_bf16 r; r.u = __ldcg((const unsigned short *)p); return r; }
template <int M, int B, int INF>
static __device__ __forceinline__ rc_f8<M, B, INF> __ldcg(const rc_f8<M, B, INF> *p)
{
  rc_f8<M, B, INF> r;
  r.u = __ldcg((const unsigned char *)p);
  return r;
}

/* How an element is read into its accumulator type and stored back: itself for f32, f64 and every
 * integer type (integers wrap, as in reduce_cpu.c); the 16- and 8-bit floats below accumulate in
 * f32. */
template <typename T> struct rc_traits {
  typedef T acc;
  static __device__ __forceinline__ T load(T v) { return v; }
  static __device__ __forceinline__ T store(T a) { return a; }
};
template <> struct rc_traits<rc_f16> {
  typedef float acc;
  static __device__ __forceinline__ float load(rc_f16 v) { return __half2float(__ushort_as_half(v.u)); }
  static __device__ __forceinline__ rc_f16 store(float a)
  {
    rc_f16 r;
    /* half.h turns every NaN into sign|0x7e00; the hardware's rounding agrees elsewhere. */
    if (a != a) r.u = (uint16_t)(((__float_as_uint(a) >> 16) & 0x8000u) | 0x7e00u);
    else r.u = __half_as_ushort(__float2half_rn(a));
    return r;
  }
};
template <> struct rc_traits<rc_bf16> {
  typedef float acc;
  static __device__ __forceinline__ float load(rc_bf16 v) { return __uint_as_float((uint32_t)v.u << 16); }
  static __device__ __forceinline__ rc_bf16 store(float a)
  {
    uint32_t u = __float_as_uint(a);
    rc_bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) { r.u = (uint16_t)((u >> 16) | 0x40); return r; }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.u = (uint16_t)(u >> 16);
    return r;
  }
};
template <int M, int B, int INF> struct rc_traits<rc_f8<M, B, INF> > {
  typedef float acc;
  static __device__ __forceinline__ float load(rc_f8<M, B, INF> v) { return f8_to_f32(v.u, M, B, INF); }
  static __device__ __forceinline__ rc_f8<M, B, INF> store(float a)
  {
    rc_f8<M, B, INF> r;
    r.u = f32_to_f8(a, M, B, INF);
    return r;
  }
};

/* The binary operators of reduce_cpu.c (OP_* for floats, IOP_* for integers). */
template <typename A> struct rc_op {
  static __device__ __forceinline__ A apply(A a, A b, int op)
  {
    switch (op) {
    case SHMDDP_PROD: return a * b;
    case SHMDDP_MIN: return (a != a || a < b) ? a : b;
    case SHMDDP_MAX: return (a != a || a > b) ? a : b;
    default: return a + b;
    }
  }
};
template <> struct rc_op<int32_t> {
  static __device__ __forceinline__ int32_t apply(int32_t a, int32_t b, int op)
  {
    switch (op) {
    case SHMDDP_PROD: return (int32_t)((uint32_t)a * (uint32_t)b);
    case SHMDDP_MIN: return a < b ? a : b;
    case SHMDDP_MAX: return a > b ? a : b;
    default: return (int32_t)((uint32_t)a + (uint32_t)b);
    }
  }
};
template <> struct rc_op<int64_t> {
  static __device__ __forceinline__ int64_t apply(int64_t a, int64_t b, int op)
  {
    switch (op) {
    case SHMDDP_PROD: return (int64_t)((uint64_t)a * (uint64_t)b);
    case SHMDDP_MIN: return a < b ? a : b;
    case SHMDDP_MAX: return a > b ? a : b;
    default: return (int64_t)((uint64_t)a + (uint64_t)b);
    }
  }
};

/* Integers: +, * computed unsigned (wrap), compared in their own signedness. */
#define RC_INT_OP(T, U)                                                                       \
  template <> struct rc_op<T> {                                                               \
    static __device__ __forceinline__ T apply(T a, T b, int op)                               \
    {                                                                                         \
      switch (op) {                                                                           \
      case SHMDDP_PROD: return (T)((U)a * (U)b);                                              \
      case SHMDDP_MIN: return a < b ? a : b;                                                  \
      case SHMDDP_MAX: return a > b ? a : b;                                                  \
      default: return (T)((U)a + (U)b);                                                       \
      }                                                                                       \
    }                                                                                         \
  };
RC_INT_OP(int8_t, uint32_t)
RC_INT_OP(uint8_t, uint32_t)
RC_INT_OP(uint32_t, uint32_t)
RC_INT_OP(uint64_t, uint64_t)
#undef RC_INT_OP

template <typename T>
__device__ __forceinline__ T rc_finish(typename rc_traits<T>::acc a, int op, int avg_div)
{
  typedef typename rc_traits<T>::acc A;
  if (op == SHMDDP_AVG) a = (A)(a / (A)avg_div);
  return rc_traits<T>::store(a);
}

/* Reduce n elements of T from nsrc sources into ndst destinations (every destination gets the
 * same value), as thread `tid` of `nthreads`. vec: every pointer is 16-byte aligned, so whole
 * 16-byte vectors are loaded (all sources' loads in flight before the first use) and the
 * remainder goes element by element. Sources are read through L2 only (.cg): they may be peer
 * memory written since this kernel started. */
/* The vector loop with a compile-time number of sources and U vectors per thread in flight (the
 * two-rank case: the loads of a peer's memory take microseconds, so more of them must be
 * outstanding). Same arithmetic, same order. */
template <typename T, int NS, int U>
__device__ __forceinline__ void rc_reduce_vec_fixed(const void *const *srcs, void *const *dsts,
                                                    int ndst, size_t nvec, int op, int avg_div,
                                                    size_t tid, size_t nthreads)
{
  typedef typename rc_traits<T>::acc A;
  const int V = 16 / sizeof(T);
  for (size_t base = tid; base < nvec; base += nthreads * U) {
    uint4 in[U][NS];
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t i = base + (size_t)u * nthreads;
      if (i < nvec) {
#pragma unroll
        for (int s = 0; s < NS; s++) in[u][s] = __ldcg((const uint4 *)srcs[s] + i);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      size_t i = base + (size_t)u * nthreads;
      if (i >= nvec) break;
      A acc[V];
      const T *p0 = (const T *)&in[u][0];
#pragma unroll
      for (int e = 0; e < V; e++) acc[e] = rc_traits<T>::load(p0[e]);
#pragma unroll
      for (int s = 1; s < NS; s++) {
        const T *ps = (const T *)&in[u][s];
#pragma unroll
        for (int e = 0; e < V; e++) acc[e] = rc_op<A>::apply(acc[e], rc_traits<T>::load(ps[e]), op);
      }
      uint4 out;
      T *po = (T *)&out;
#pragma unroll
      for (int e = 0; e < V; e++) po[e] = rc_finish<T>(acc[e], op, avg_div);
      for (int d = 0; d < ndst; d++) ((uint4 *)dsts[d])[i] = out;
    }
  }
}

template <typename T>
__device__ __forceinline__ void rc_reduce_range(const void *const *srcs, int nsrc, void *const *dsts,
                                                int ndst, size_t n, int op, int avg_div, bool vec,
                                                size_t tid, size_t nthreads)
{
  typedef typename rc_traits<T>::acc A;
  const size_t V = 16 / sizeof(T);
  size_t nvec = vec ? n / V : 0;
  /* two sources (two ranks): the unrolled loop does the vectors; then only the tail below */
  if (nsrc == 2) rc_reduce_vec_fixed<T, 2, 4>(srcs, dsts, ndst, nvec, op, avg_div, tid, nthreads);
  for (size_t i = tid; i < (nsrc == 2 ? 0 : nvec); i += nthreads) {
    uint4 in[RC_MAXSRC];
#pragma unroll
    for (int s = 0; s < RC_MAXSRC; s++)
      if (s < nsrc) in[s] = __ldcg((const uint4 *)srcs[s] + i);
    A acc[16 / sizeof(T)];
    const T *p0 = (const T *)&in[0];
#pragma unroll
    for (size_t e = 0; e < V; e++) acc[e] = rc_traits<T>::load(p0[e]);
#pragma unroll
    for (int s = 1; s < RC_MAXSRC; s++) {
      if (s >= nsrc) break;
      const T *ps = (const T *)&in[s];
#pragma unroll
      for (size_t e = 0; e < V; e++) acc[e] = rc_op<A>::apply(acc[e], rc_traits<T>::load(ps[e]), op);
    }
    uint4 out;
    T *po = (T *)&out;
#pragma unroll
    for (size_t e = 0; e < V; e++) po[e] = rc_finish<T>(acc[e], op, avg_div);
    for (int d = 0; d < ndst; d++) ((uint4 *)dsts[d])[i] = out;
  }
  for (size_t i = nvec * V + tid; i < n; i += nthreads) {
    A acc = rc_traits<T>::load(__ldcg((const T *)srcs[0] + i));
    for (int s = 1; s < nsrc; s++)
      acc = rc_op<A>::apply(acc, rc_traits<T>::load(__ldcg((const T *)srcs[s] + i)), op);
    T v = rc_finish<T>(acc, op, avg_div);
    for (int d = 0; d < ndst; d++) ((T *)dsts[d])[i] = v;
  }
}

/* Copy n bytes to ndst destinations (16-byte vectors when vec). */
__device__ __forceinline__ void rc_copy_range(const void *src, void *const *dsts, int ndst, size_t n,
                                              bool vec, size_t tid, size_t nthreads)
{
  size_t nvec = vec ? n / 16 : 0;
  for (size_t i = tid; i < nvec; i += nthreads) {
    uint4 v = __ldcg((const uint4 *)src + i);
    for (int d = 0; d < ndst; d++) ((uint4 *)dsts[d])[i] = v;
  }
  for (size_t i = nvec * 16 + tid; i < n; i += nthreads) {
    unsigned char v = (unsigned char)__ldcg((const unsigned char *)src + i);
    for (int d = 0; d < ndst; d++) ((unsigned char *)dsts[d])[i] = v;
  }
}

/* Call F<T>(args...) for the storage type of dtype. */
#define RC_DISPATCH(dtype, F, ...)                                                            \
  do {                                                                                        \
    switch (dtype) {                                                                          \
    case SHMDDP_F32: F<float>(__VA_ARGS__); break;                                            \
    case SHMDDP_F64: F<double>(__VA_ARGS__); break;                                           \
    case SHMDDP_F16: F<rc_f16>(__VA_ARGS__); break;                                           \
    case SHMDDP_BF16: F<rc_bf16>(__VA_ARGS__); break;                                         \
    case SHMDDP_I32: F<int32_t>(__VA_ARGS__); break;                                          \
    case SHMDDP_I64: F<int64_t>(__VA_ARGS__); break;                                          \
    case SHMDDP_I8: F<int8_t>(__VA_ARGS__); break;                                            \
    case SHMDDP_U8: F<uint8_t>(__VA_ARGS__); break;                                           \
    case SHMDDP_U32: F<uint32_t>(__VA_ARGS__); break;                                         \
    case SHMDDP_U64: F<uint64_t>(__VA_ARGS__); break;                                         \
    case SHMDDP_F8E4M3: F<rc_f8e4m3>(__VA_ARGS__); break;                                     \
    case SHMDDP_F8E5M2: F<rc_f8e5m2>(__VA_ARGS__); break;                                     \
    default: break;                                                                           \
    }                                                                                         \
  } while (0)

#endif /* __CUDACC__ */
#endif
