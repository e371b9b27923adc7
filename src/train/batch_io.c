/* batch_io.c — batches to the model's device and predictions back (see batch_io.h).
 *
 * A batch crosses PCIe on a copy stream into one of two staging slots, while the GPU computes:
 * the model's stream only waits for that copy and moves the slot into the one input buffer pair
 * the step reads (fixed addresses: a captured CUDA graph of the step reads them there), a
 * device-to-device copy of a few microseconds instead of a host-to-device one of a few hundred.
 * A slot is refilled only after the model's stream has moved it out (event `moved`). */
#include "config.h"

#include "src/train/batch_io.h"

#include <stdio.h>
#include <stdlib.h>

#include "src/check.h"
#include "src/device/arena.h"
#include "src/device/device.h"

struct batch_io {
  int dev;           /* the model's device */
  void *stream;      /* the model's */
  void *copy;        /* host-to-device copies */
  float *x, *sx[2];  /* the step's input, the staging slots */
  int32_t *y, *sy[2], *pred;
  size_t max_pixels; /* batch * pixels */
  dev_event_t *copied[2]; /* slot filled (on copy) */
  dev_event_t *moved[2];  /* slot moved into x, y (on the model's stream) */
  int next;          /* slot of the next upload (the last one used the other) */
  struct arena *arena;
};

int batch_io_create(batch_io_t **out, model_t *m, int batch, size_t pixels, char *err,
                     size_t errlen)
{
  *out = NULL;
  void *stream = model_stream(m);
  if (!stream) return 0; /* the host: the loader's buffers are the model's input */
  batch_io_t *d = calloc(1, sizeof *d);
  if (!d) return check_fail(err, errlen, "out of memory");
  *out = d;
  d->stream = stream;
  d->arena = model_arena(m);
  d->dev = arena_device(d->arena);
  d->max_pixels = (size_t)batch * pixels;
  size_t bx = d->max_pixels * 3 * sizeof(float), by = d->max_pixels * sizeof(int32_t);
  d->x = arena_alloc(d->arena, bx, ARENA_ACTIVATIONS, "input batch");
  d->y = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "input labels");
  d->pred = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "predictions");
  for (int i = 0; i < 2; i++) {
    d->sx[i] = arena_alloc(d->arena, bx, ARENA_ACTIVATIONS, "input staging");
    d->sy[i] = arena_alloc(d->arena, by, ARENA_ACTIVATIONS, "input staging");
  }
  if (!d->x || !d->y || !d->pred || !d->sx[0] || !d->sx[1] || !d->sy[0] || !d->sy[1])
    return check_fail(err, errlen, "input buffers on the GPU: %s", arena_last_error(d->arena));
  CHECK(dev_stream_create(&d->copy, d->dev, 0, err, errlen));
  for (int i = 0; i < 2; i++) {
    CHECK(dev_event_create(&d->copied[i], d->dev, DEV_EVENT_ORDER, err, errlen));
    CHECK(dev_event_create(&d->moved[i], d->dev, DEV_EVENT_ORDER, err, errlen));
  }
  return 0;
}

void batch_io_destroy(batch_io_t *d)
{
  if (!d) return;
  char err[256];
  dev_stream_sync(d->stream, err, sizeof err);
  dev_stream_sync(d->copy, err, sizeof err);
  void *bufs[] = {d->x, d->y, d->pred, d->sx[0], d->sx[1], d->sy[0], d->sy[1]};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (bufs[i]) arena_free(d->arena, bufs[i]);
  for (int i = 0; i < 2; i++) {
    dev_event_destroy(d->copied[i]);
    dev_event_destroy(d->moved[i]);
  }
  dev_stream_destroy(d->copy);
  free(d);
}

void *batch_io_host_alloc(void *ctx, size_t bytes) { return dev_host_alloc(1, bytes); }
void batch_io_host_free(void *ctx, void *p) { dev_host_free(1, p); }

int batch_io_upload(batch_io_t *d, const loader_batch_t *b, const float **x, const int32_t **y,
                     char *err, size_t errlen)
{
  if (!d) {
    *x = b->x;
    *y = b->y;
    return 0;
  }
  int s = d->next;
  d->next ^= 1;
  /* copy whole slots: a short batch just carries a stale tail */
  size_t bx = d->max_pixels * 3 * sizeof(float), by = d->max_pixels * sizeof(int32_t);
  CHECK(dev_event_wait(d->copy, d->moved[s], err, errlen)); /* its last batch moved out */
  CHECK(dev_copy(d->sx[s], d->dev, b->x, DEV_HOST, bx, d->copy, err, errlen));
  CHECK(dev_copy(d->sy[s], d->dev, b->y, DEV_HOST, by, d->copy, err, errlen));
  CHECK(dev_event_record(d->copied[s], d->copy, err, errlen));
  CHECK(dev_event_wait(d->stream, d->copied[s], err, errlen));
  CHECK(dev_copy(d->x, d->dev, d->sx[s], d->dev, bx, d->stream, err, errlen));
  CHECK(dev_copy(d->y, d->dev, d->sy[s], d->dev, by, d->stream, err, errlen));
  CHECK(dev_event_record(d->moved[s], d->stream, err, errlen));
  *x = d->x;
  *y = d->y;
  return 0;
}

int batch_io_fence(batch_io_t *d, char *err, size_t errlen)
{
  if (!d) return 0;
  /* The last upload's slot; before any upload its event was never recorded and this returns. */
  return dev_event_sync(d->copied[d->next ^ 1], err, errlen);
}

int32_t *batch_io_pred(batch_io_t *d, int32_t *host) { return d ? d->pred : host; }

int batch_io_fetch_pred(batch_io_t *d, int32_t *host, size_t n, char *err, size_t errlen)
{
  if (!d) return 0;
  CHECK(dev_copy(host, DEV_HOST, d->pred, d->dev, n * sizeof(int32_t), d->stream, err, errlen));
  return dev_stream_sync(d->stream, err, errlen);
}
