/* ops_cuda_testutil.h — what the CUDA Check suites share: random data rounded to the table's
 * dtype, device buffers poisoned with NaN and freed after each test, copies both ways,
 * relative-error checks. Their main() is SUITE_MAIN (tests/suite_main.h), whose GPU probe lets
 * them skip (exit 77) where there is no GPU without initialising CUDA in the suite's own
 * process. */
#ifndef TESTS_OPS_CUDA_TESTUTIL_H
#define TESTS_OPS_CUDA_TESTUTIL_H

#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collectives/reduce/half.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"

static const ops_dtype_t dtypes[] = {OPS_F32, OPS_BF16, OPS_F16};
#define NDT 3

static ops_t gpu, cpu;
static ops_dtype_t dt;

/* ---- data ---- */

static unsigned long long lcg = 0x9e3779b97f4a7c15ull;
static inline float rnd(void) /* [-1, 1) */
{
  lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(lcg >> 11) / 9007199254740992.0 * 2 - 1);
}

static inline float to_dt(float v)
{
  if (dt == OPS_BF16) return bf16_to_f32(f32_to_bf16(v));
  return dt == OPS_F16 ? f16_to_f32(f32_to_f16(v)) : v;
}

/* Host blocks and device blocks are recorded and freed at the end of each test. */
static void *blocks[1024];
static int nblocks;
static void *dblocks[1024];
static int ndblocks;

static inline void keep(void *p)
{
  ck_assert_msg(nblocks < (int)(sizeof blocks / sizeof *blocks), "too many test blocks");
  blocks[nblocks++] = p;
}

static inline float *hvec(size_t n, float scale, float offset) /* random, rounded to the dtype */
{
  float *v = malloc((n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  keep(v);
  for (size_t i = 0; i < n; i++) v[i] = to_dt(offset + scale * rnd());
  return v;
}

static inline void *dalloc(size_t bytes) /* poisoned: 0xff bytes are NaN in every float type */
{
  void *d = NULL;
  ck_assert_int_eq(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
  ck_assert_int_eq(cudaMemset(d, 0xff, bytes), cudaSuccess);
  ck_assert_msg(ndblocks < (int)(sizeof dblocks / sizeof *dblocks), "too many device blocks");
  dblocks[ndblocks++] = d;
  return d;
}

static inline void *up(const float *h, size_t n) /* to the device in the table's dtype */
{
  size_t es = dt == OPS_F32 ? 4 : 2;
  void *d = dalloc(n * es);
  uint16_t *t = malloc(n * 2 + 2);
  const void *src = h;
  if (dt != OPS_F32) {
    for (size_t i = 0; i < n; i++) t[i] = dt == OPS_BF16 ? f32_to_bf16(h[i]) : f32_to_f16(h[i]);
    src = t;
  }
  ck_assert_int_eq(cudaMemcpy(d, src, n * es, cudaMemcpyHostToDevice), cudaSuccess);
  free(t);
  return d;
}

static inline void *up_raw(const void *h, size_t bytes)
{
  void *d = dalloc(bytes);
  ck_assert_int_eq(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

static inline float *down(const void *d, size_t n) /* back as f32; fails on a device error */
{
  size_t es = dt == OPS_F32 ? 4 : 2;
  float *h = malloc((n ? n : 1) * sizeof *h);
  keep(h);
  uint16_t *t = malloc(n * 2 + 2);
  cudaError_t e = cudaMemcpy(dt == OPS_F32 ? (void *)h : (void *)t, d, n * es,
                             cudaMemcpyDeviceToHost);
  ck_assert_msg(e == cudaSuccess, "copy back: %s", cudaGetErrorString(e));
  if (dt != OPS_F32)
    for (size_t i = 0; i < n; i++) h[i] = dt == OPS_BF16 ? bf16_to_f32(t[i]) : f16_to_f32(t[i]);
  free(t);
  return h;
}

static inline void *down_raw(const void *d, size_t bytes)
{
  void *h = malloc(bytes ? bytes : 1);
  keep(h);
  cudaError_t e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
  ck_assert_msg(e == cudaSuccess, "copy back: %s", cudaGetErrorString(e));
  return h;
}

static inline void free_all(void)
{
  while (nblocks) free(blocks[--nblocks]);
  while (ndblocks) cudaFree(dblocks[--ndblocks]);
}

/* ‖got - ref‖ / ‖ref‖; infinite when got has a non-finite element that ref does not. */
static inline double rel_err(const float *got, const float *ref, size_t n)
{
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i]) && isfinite(ref[i])) return INFINITY;
    d += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
    r += (double)ref[i] * ref[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

static inline double rel_err64(const double *got, const double *ref, size_t n)
{
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) return INFINITY;
    d += (got[i] - ref[i]) * (got[i] - ref[i]);
    r += ref[i] * ref[i];
  }
  return r > 0 ? sqrt(d / r) : sqrt(d);
}

/* Tolerances per dtype: element results (one rounding to the dtype) and long reductions. */
static inline double tol_elem(void)
{
  return dt == OPS_F32 ? 2e-6 : dt == OPS_BF16 ? 6e-3 : 8e-4;
}
static inline double tol_conv(void)
{
  return dt == OPS_F32 ? 5e-3 : dt == OPS_BF16 ? 1.5e-2 : 4e-3;
}

#define CLOSE(got, ref, n, tol, what)                                                          \
  do {                                                                                         \
    double e_ = rel_err((got), (ref), (n));                                                    \
    ck_assert_msg(e_ <= (tol), "%s %s: relative error %.3g > %.3g", gpu.name, (what), e_,      \
                  (double)(tol));                                                              \
  } while (0)
/* got is evaluated once (it is often a down() call). */
#define EXACT(got, ref, n, what)                                                               \
  do {                                                                                         \
    const __typeof__(*(got)) *g_ = (got);                                                      \
    const __typeof__(*(ref)) *r_ = (ref); /* each argument evaluated once */                   \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                                \
      ck_assert_msg(g_[i_] == r_[i_] || (isnan(g_[i_]) && isnan(r_[i_])),                      \
                    "%s %s[%zu]: %g, expected %g", gpu.name, (what), i_, (double)g_[i_],       \
                    (double)r_[i_]);                                                           \
  } while (0)
#define EXACT_INT(got, ref, n, what)                                                           \
  do {                                                                                         \
    const __typeof__(*(got)) *g_ = (got);                                                      \
    const __typeof__(*(ref)) *r_ = (ref);                                                      \
    for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                                \
      ck_assert_msg(g_[i_] == r_[i_], "%s %s[%zu]: %ld, expected %ld", gpu.name, (what), i_,   \
                    (long)g_[i_], (long)r_[i_]);                                               \
  } while (0)
#define GPU_OK(call) ck_assert_msg((call) == 0, "%s: %s", #call, gpu.last_error(&gpu))
#define CPU_OK(call) ck_assert_msg((call) == 0, "%s: %s", #call, cpu.last_error(&cpu))

/* Whether this build and device run the Hopper fused convolutions (a 9.0 GPU, an sm_90a
 * build); the device's compute capability into *major, *minor. */
static inline int fused_sm90_device(int *major, int *minor)
{
  ck_assert(cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  ck_assert(cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, 0) == cudaSuccess);
#ifdef HAVE_CONV_SM90
  return *major == 9 && *minor == 0;
#else
  return 0;
#endif
}

static inline void use_dtype(int i)
{
  char err[512];
  free_all();
  if (gpu.destroy) gpu.destroy(&gpu);
  dt = dtypes[i];
  ck_assert_msg(ops_cuda_init(&gpu, dt, 0, NULL, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ops_cpu_init(&cpu, OPS_F32, err, sizeof err) == 0, "%s", err);
}

static inline void teardown(void)
{
  free_all();
  if (gpu.destroy) gpu.destroy(&gpu);
  memset(&gpu, 0, sizeof gpu);
}

#endif
