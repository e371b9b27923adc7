/* cuda_harness.c — what the CUDA harnesses of dev/ share (dev/cuda_harness.h). */
#include "config.h"

#include "dev/cuda_harness.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void harness_die(int status, const char *fmt, ...)
{
  fprintf(stderr, "%s: ", program_invocation_short_name);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(status);
}

static int cmp_double(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

#define TRY(call)                                                                             \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));                         \
      goto out;                                                                               \
    }                                                                                         \
  } while (0)

double harness_copy_rate(cudaStream_t s, char *err, size_t errlen)
{
  const size_t bytes = (size_t)512 << 20;
  void *src = NULL, *dst = NULL;
  cudaEvent_t a = NULL, b = NULL;
  double t[7], rate = -1;
  TRY(cudaMalloc(&src, bytes));
  TRY(cudaMalloc(&dst, bytes));
  TRY(cudaMemsetAsync(src, 0x5a, bytes, s));
  TRY(cudaEventCreate(&a));
  TRY(cudaEventCreate(&b));
  for (int rep = -2; rep < 7; rep++) {
    TRY(cudaEventRecord(a, s));
    TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    TRY(cudaEventRecord(b, s));
    TRY(cudaEventSynchronize(b));
    float ms;
    TRY(cudaEventElapsedTime(&ms, a, b));
    if (rep >= 0) t[rep] = ms * 1e-3;
  }
  qsort(t, 7, sizeof *t, cmp_double);
  rate = 2.0 * bytes / t[3];
out:
  cudaFree(src);
  cudaFree(dst);
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  return rate;
}
