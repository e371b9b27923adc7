/* timeline_cuda.c — CUDA events as the timeline's clock. cudaEventElapsedTime between the
 * window's anchor and an event gives device time with ~0.5 us resolution; adding the host time
 * at which the anchor completed puts it on the monotonic clock the host spans (and the other
 * ranks) use. The anchor is taken by spinning on cudaEventQuery, so its error is the spin's
 * latency, a few us. */
#include "config.h"

#include "src/obs/timeline_cuda.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "src/check.h"

struct timeline_cuda {
  cudaEvent_t *ev;
  size_t n;
  cudaEvent_t anchor;
  double anchor_us;
};

static double host_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

int timeline_cuda_create(timeline_cuda_t **out, size_t nevents, char *err, size_t errlen)
{
  *out = NULL;
  timeline_cuda_t *t = calloc(1, sizeof *t);
  if (!t || !(t->ev = calloc(nevents, sizeof *t->ev))) {
    free(t);
    return check_fail(err, errlen, "timeline: out of memory for %zu CUDA events", nevents);
  }
  cudaError_t e = cudaEventCreate(&t->anchor);
  for (size_t i = 0; e == cudaSuccess && i < nevents; i++, t->n++) e = cudaEventCreate(&t->ev[i]);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "timeline: creating CUDA events: %s", cudaGetErrorString(e));
    timeline_cuda_destroy(t);
    return -1;
  }
  *out = t;
  return 0;
}

void timeline_cuda_destroy(timeline_cuda_t *t)
{
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) cudaEventDestroy(t->ev[i]);
  if (t->anchor) cudaEventDestroy(t->anchor);
  free(t->ev);
  free(t);
}

int timeline_cuda_anchor(timeline_cuda_t *t, void *stream, char *err, size_t errlen)
{
  cudaError_t e = cudaEventRecord(t->anchor, (cudaStream_t)stream);
  if (e == cudaSuccess)
    while ((e = cudaEventQuery(t->anchor)) == cudaErrorNotReady) {
    }
  t->anchor_us = host_us();
  if (e != cudaSuccess) {
    return check_fail(err, errlen, "timeline: anchoring CUDA events: %s", cudaGetErrorString(e));
  }
  return 0;
}

int timeline_cuda_record(timeline_cuda_t *t, size_t slot, void *stream)
{
  return cudaEventRecord(t->ev[slot % t->n], (cudaStream_t)stream) == cudaSuccess ? 0 : -1;
}

int timeline_cuda_time_us(timeline_cuda_t *t, size_t slot, double *us)
{
  cudaEvent_t e = t->ev[slot % t->n];
  float ms = 0;
  if (cudaEventSynchronize(e) != cudaSuccess ||
      cudaEventElapsedTime(&ms, t->anchor, e) != cudaSuccess)
    return -1;
  *us = t->anchor_us + 1e3 * (double)ms;
  return 0;
}
