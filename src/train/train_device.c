/* train_device.c — batches to the GPU and predictions back (see train_device.h).
 *
 * A batch crosses PCIe on a copy stream into one of two staging slots, while the GPU computes:
 * the model's stream only waits for that copy and moves the slot into the one input buffer pair
 * the step reads (fixed addresses: a captured CUDA graph of the step reads them there), a
 * device-to-device copy of a few microseconds instead of a host-to-device one of a few hundred.
 * A slot is refilled only after the model's stream has moved it out (event `moved`). */
#include "config.h"

#include "src/train/train_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "src/check.h"

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>

#include "src/device/arena.h"
#endif

struct train_dev {
  void *stream;      /* the model's */
  void *copy;        /* cudaStream_t for host-to-device copies */
  float *x, *sx[2];  /* the step's input, the staging slots */
  int32_t *y, *sy[2], *pred;
  size_t max_pixels; /* batch * pixels */
  void *copied[2];   /* cudaEvent_t: slot filled (on copy) */
  void *moved[2];    /* cudaEvent_t: slot moved into x, y (on the model's stream) */
  int next;          /* slot of the next upload (the last one used the other) */
  struct arena *arena;
};

#ifdef HAVE_CUDNN
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
    return check_fail(err, errlen, "out of memory");
  }
  *out = d;
  d->stream = stream;
  d->arena = model_arena(m);
  d->max_pixels = (size_t)batch * pixels;
  size_t bx = d->max_pixels * 3 * sizeof(float), by = d->max_pixels * sizeof(int32_t);
  d->x = arena_alloc(d->arena, bx, ARENA_ACTIVATIONS, "input batch");
  d->y = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "input labels");
  d->pred = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "predictions");
  for (int i = 0; i < 2; i++) {
    d->sx[i] = arena_alloc(d->arena, bx, ARENA_ACTIVATIONS, "input staging");
    d->sy[i] = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "input staging");
  }
  if (!d->x || !d->y || !d->pred || !d->sx[0] || !d->sx[1] || !d->sy[0] || !d->sy[1]) {
    return check_fail(err, errlen, "input buffers on the GPU: %s", arena_last_error(d->arena));
  }
  cudaStream_t cs;
  CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  d->copy = cs;
  for (int i = 0; i < 2; i++) {
    cudaEvent_t a, b;
    CHECK_CUDA(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
    d->copied[i] = a;
    CHECK_CUDA(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
    d->moved[i] = b;
  }
  return 0;
#else
  return check_fail(err, errlen, "this build has no CUDA backend");
#endif
}

void train_dev_destroy(train_dev_t *d)
{
  if (!d) return;
#ifdef HAVE_CUDNN
  if (d->stream) cudaStreamSynchronize((cudaStream_t)d->stream);
  if (d->copy) cudaStreamSynchronize((cudaStream_t)d->copy);
  void *bufs[] = {d->x, d->y, d->pred, d->sx[0], d->sx[1], d->sy[0], d->sy[1]};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) arena_free(d->arena, bufs[i]);
  for (int i = 0; i < 2; i++) {
    if (d->copied[i]) cudaEventDestroy((cudaEvent_t)d->copied[i]);
    if (d->moved[i]) cudaEventDestroy((cudaEvent_t)d->moved[i]);
  }
  if (d->copy) cudaStreamDestroy((cudaStream_t)d->copy);
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
  cudaStream_t st = (cudaStream_t)d->stream, cs = (cudaStream_t)d->copy;
  int s = d->next;
  d->next ^= 1;
  /* copy whole slots: a short batch just carries a stale tail */
  size_t bx = d->max_pixels * 3 * sizeof(float), by = d->max_pixels * sizeof(int32_t);
  CHECK_CUDA(cudaStreamWaitEvent(cs, (cudaEvent_t)d->moved[s], 0)); /* its last batch moved out */
  CHECK_CUDA(cudaMemcpyAsync(d->sx[s], b->x, bx, cudaMemcpyHostToDevice, cs));
  CHECK_CUDA(cudaMemcpyAsync(d->sy[s], b->y, by, cudaMemcpyHostToDevice, cs));
  CHECK_CUDA(cudaEventRecord((cudaEvent_t)d->copied[s], cs));
  CHECK_CUDA(cudaStreamWaitEvent(st, (cudaEvent_t)d->copied[s], 0));
  CHECK_CUDA(cudaMemcpyAsync(d->x, d->sx[s], bx, cudaMemcpyDeviceToDevice, st));
  CHECK_CUDA(cudaMemcpyAsync(d->y, d->sy[s], by, cudaMemcpyDeviceToDevice, st));
  CHECK_CUDA(cudaEventRecord((cudaEvent_t)d->moved[s], st));
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
  /* The last upload's slot; before any upload its event was never recorded and this returns. */
  CHECK_CUDA(cudaEventSynchronize((cudaEvent_t)d->copied[d->next ^ 1]));
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
  CHECK_CUDA(cudaMemcpyAsync(host, d->pred, n * sizeof(int32_t), cudaMemcpyDeviceToHost,
                             (cudaStream_t)d->stream));
  CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)d->stream));
#endif
  (void)err;
  (void)errlen;
  return 0;
}
