/* batch_io.h — where the training loop's batches meet the model's device: on a GPU, pinned
 * host buffers for the loader, each batch copied on a copy stream (overlapping the step before
 * it) and then moved into the fixed input buffers on the model's stream, and the predictions
 * brought back for the metrics; on the CPU, the batch's own buffers pass through. */
#ifndef SRC_TRAIN_BATCH_IO_H
#define SRC_TRAIN_BATCH_IO_H

#include <stddef.h>
#include <stdint.h>

#include "src/data/loader.h"
#include "src/model/model.h"

typedef struct batch_io batch_io_t;

/* For a CPU model *out is NULL and every call below passes data through. */
int batch_io_create(batch_io_t **out, model_t *m, int batch, size_t pixels, char *err,
                     size_t errlen);
void batch_io_destroy(batch_io_t *d);

/* Loader allocation hooks: pinned host memory on a GPU (copies overlap and run at full speed). */
void *batch_io_host_alloc(void *ctx, size_t bytes);
void batch_io_host_free(void *ctx, void *p);

/* The batch as the model wants it: on a GPU always the same two device buffers, filled in the
 * model's stream order (work queued on it after this call sees this batch); on the CPU, b's own.
 * The loader buffer may be reused only once the copy has read it: after batch_io_fence, or
 * after a step queued behind this upload has finished. */
int batch_io_upload(batch_io_t *d, const loader_batch_t *b, const float **x, const int32_t **y,
                     char *err, size_t errlen);
/* Wait until the last upload has read its host buffer (before a loader buffer is reused). */
int batch_io_fence(batch_io_t *d, char *err, size_t errlen);
/* Where model_eval writes predictions, and bringing n of them to host memory. */
int32_t *batch_io_pred(batch_io_t *d, int32_t *host);
int batch_io_fetch_pred(batch_io_t *d, int32_t *host, size_t n, char *err, size_t errlen);

#endif
