/* dp_dev.c — DataParallel's device primitives (see dp_dev.h): the CUDA runtime where a device
 * number is a GPU, plain host code for CPU "devices". */
#include "config.h"

#include "src/device/dp_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/reduce_cpu.h"
#include "src/check.h"

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "kernels/reduce_cuda.h"

#endif

struct dp_event {
  int dev;
  double host_ms; /* CPU: when it was recorded */
#ifdef HAVE_CUDNN
  cudaEvent_t ev;
#endif
};

#ifndef HAVE_CUDNN
static int no_cuda(char *err, size_t errlen)
{
  return check_fail(err, errlen,
                    "this build has no CUDA backend: DataParallel runs on CPU devices only");
}
#endif

int dp_dev_select(int dev, char *err, size_t errlen)
{
  if (dev == DP_DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaSetDevice(dev));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

int dp_dev_enable_peers(const int *devs, int n, int *direct, char *err, size_t errlen)
{
  if (direct) *direct = 1;
  if (n < 2 || devs[0] == DP_DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  for (int i = 1; i < n; i++) {
    int pair[2][2] = {{devs[0], devs[i]}, {devs[i], devs[0]}};
    for (int k = 0; k < 2; k++) {
      int can = 0;
      CHECK_CUDA(cudaDeviceCanAccessPeer(&can, pair[k][0], pair[k][1]));
      if (!can) {
        if (direct) *direct = 0;
        continue;
      }
      CHECK_CUDA(cudaSetDevice(pair[k][0]));
      cudaError_t e = cudaDeviceEnablePeerAccess(pair[k][1], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError(); /* not an error: clear it */
      } else if (e != cudaSuccess) {
        return check_fail(err, errlen, "enabling peer access from GPU %d to GPU %d: %s", pair[k][0],
                          pair[k][1], cudaGetErrorString(e));
      }
    }
  }
  CHECK_CUDA(cudaSetDevice(devs[0]));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

int dp_dev_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, void *stream,
                char *err, size_t errlen)
{
  if (!bytes) return 0;
  if (dst_dev == DP_DEV_HOST && src_dev == DP_DEV_HOST && !stream) {
    memcpy(dst, src, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  cudaStream_t st = (cudaStream_t)stream;
  if (dst_dev == DP_DEV_HOST || src_dev == DP_DEV_HOST)
    CHECK_CUDA(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st)); /* pinned host <-> device */
  else if (dst_dev == src_dev)
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
  else
    CHECK_CUDA(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, st));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

int dp_event_create(dp_event_t **out, int dev, char *err, size_t errlen)
{
  dp_event_t *e = calloc(1, sizeof *e);
  *out = e;
  if (!e) {
    return check_fail(err, errlen, "out of memory");
  }
  e->dev = dev;
  if (dev == DP_DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaEventCreate(&e->ev));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

void dp_event_destroy(dp_event_t *e)
{
  if (!e) return;
#ifdef HAVE_CUDNN
  if (e->dev != DP_DEV_HOST && e->ev) cudaEventDestroy(e->ev);
#endif
  free(e);
}

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

int dp_event_record(dp_event_t *e, void *stream, char *err, size_t errlen)
{
  if (e->dev == DP_DEV_HOST) {
    e->host_ms = now_ms();
    return 0;
  }
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaEventRecord(e->ev, (cudaStream_t)stream));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

int dp_event_wait(void *stream, dp_event_t *e, char *err, size_t errlen)
{
  if (e->dev == DP_DEV_HOST) return 0; /* the CPU ran it already */
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, e->ev, 0));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

double dp_event_ms(const dp_event_t *a, const dp_event_t *b)
{
  if (a->dev == DP_DEV_HOST) return b->host_ms - a->host_ms;
#ifdef HAVE_CUDNN
  float ms = 0;
  if (cudaEventElapsedTime(&ms, a->ev, b->ev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ms;
#else
  return 0;
#endif
}

int dp_dev_sync(void *stream, char *err, size_t errlen)
{
  if (!stream) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}

int dp_dev_sum_f32(float *dst, const float *const *srcs, int nsrc, size_t n, int dev,
                   void *stream, char *err, size_t errlen)
{
  if (nsrc < 1 || nsrc > 8) {
    return check_fail(err, errlen, "summing %d gradient copies: 1 to 8 are supported", nsrc);
  }
  if (dev == DP_DEV_HOST) {
    reduce_cpu_multi(dst, (const void *const *)srcs, nsrc, n, SHMDDP_F32, SHMDDP_SUM, 1);
    return 0;
  }
#ifdef HAVE_CUDNN
  int rc = reduce_cuda_multi(dst, (const void *const *)srcs, nsrc, n, SHMDDP_F32, SHMDDP_SUM, 1,
                             stream);
  if (rc != 0) {
    return check_fail(err, errlen, "summing gradients on GPU %d: %s", dev,
                      cudaGetErrorString((cudaError_t)rc));
  }
  return 0;
#else
  return no_cuda(err, errlen);
#endif
}
