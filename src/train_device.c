/* train_device.c — batches to the GPU and predictions back (see train_device.h). One device
 * input buffer pair at fixed addresses (a captured CUDA graph of the step reads them there);
 * the copies are queued on the model's stream, so a batch's upload is ordered after the step
 * that read the previous one. */
#include "config.h"

#include "src/train_device.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "src/arena.h"
#endif

struct train_dev {
  void *stream;
  float *x;
  int32_t *y, *pred;
  size_t max_pixels; /* batch * pixels */
  void *done;        /* cudaEvent_t after the last upload */
  struct arena *arena;
};

#ifdef HAVE_CUDNN
#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));                        \
      return -1;                                                                              \
    }                                                                                         \
  } while (0)
#endif

int train_dev_create(train_dev_t **out, model_t *m, int batch, size_t pixels, char *err,
                     size_t errlen)
{
  *out = NULL;
  void *stream = model_stream(m);
  if (!stream) return 0;
#ifdef HAVE_CUDNN
  train_dev_t *d = calloc(1, sizeof *d);
  if (!d) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  *out = d;
  d->stream = stream;
  d->arena = model_arena(m);
  d->max_pixels = (size_t)batch * pixels;
  d->x = arena_alloc(d->arena, d->max_pixels * 3 * sizeof(float), ARENA_ACTIVATIONS, "input batch");
  d->y = arena_alloc(d->arena, d->max_pixels * sizeof(int32_t), ARENA_ACTIVATIONS, "input labels");
  d->pred = arena_alloc(d->arena, d->max_pixels * sizeof(int32_t), ARENA_ACTIVATIONS, "predictions");
  if (!d->x || !d->y || !d->pred) {
    snprintf(err, errlen, "input buffers on the GPU: %s", arena_last_error(d->arena));
    return -1;
  }
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  d->done = ev;
  return 0;
#else
  snprintf(err, errlen, "this build has no CUDA backend");
  return -1;
#endif
}

void train_dev_destroy(train_dev_t *d)
{
  if (!d) return;
#ifdef HAVE_CUDNN
  if (d->stream) cudaStreamSynchronize((cudaStream_t)d->stream);
  if (d->x) arena_free(d->arena, d->x);
  if (d->y) arena_free(d->arena, d->y);
  if (d->pred) arena_free(d->arena, d->pred);
  if (d->done) cudaEventDestroy((cudaEvent_t)d->done);
#endif
  free(d);
}

void *train_dev_host_alloc(void *ctx, size_t bytes)
{
  (void)ctx;
#ifdef HAVE_CUDNN
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess) return p;
  return NULL;
#else
  return malloc(bytes);
#endif
}

void train_dev_host_free(void *ctx, void *p)
{
  (void)ctx;
#ifdef HAVE_CUDNN
  if (p) cudaFreeHost(p);
#else
  free(p);
#endif
}

int train_dev_upload(train_dev_t *d, const loader_batch_t *b, const float **x, const int32_t **y,
                     char *err, size_t errlen)
{
  if (!d) {
    *x = b->x;
    *y = b->y;
    return 0;
  }
#ifdef HAVE_CUDNN
  cudaStream_t st = (cudaStream_t)d->stream;
  size_t pixels = d->max_pixels; /* copy whole slots: a short batch just carries stale tail */
  CK(cudaMemcpyAsync(d->x, b->x, pixels * 3 * sizeof(float), cudaMemcpyHostToDevice, st));
  CK(cudaMemcpyAsync(d->y, b->y, pixels * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  CK(cudaEventRecord((cudaEvent_t)d->done, st));
  *x = d->x;
  *y = d->y;
  return 0;
#else
  (void)err;
  (void)errlen;
  return -1;
#endif
}

int train_dev_fence(train_dev_t *d, char *err, size_t errlen)
{
  if (!d) return 0;
#ifdef HAVE_CUDNN
  CK(cudaEventSynchronize((cudaEvent_t)d->done));
#endif
  (void)err;
  (void)errlen;
  return 0;
}

int32_t *train_dev_pred(train_dev_t *d, int32_t *host) { return d ? d->pred : host; }

int train_dev_fetch_pred(train_dev_t *d, int32_t *host, size_t n, char *err, size_t errlen)
{
  if (!d) return 0;
#ifdef HAVE_CUDNN
  CK(cudaMemcpyAsync(host, d->pred, n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                     (cudaStream_t)d->stream));
  CK(cudaStreamSynchronize((cudaStream_t)d->stream));
#endif
  (void)err;
  (void)errlen;
  return 0;
}
