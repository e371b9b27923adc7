/* loader.h — batches for one rank, prepared ahead of the step by loader threads. A batch is a
 * fixed run of this rank's sample list (from the sampler), augmented by (seed, epoch, sample
 * index): its contents never depend on how many threads made it or which one did. */
#ifndef SRC_DATA_LOADER_H
#define SRC_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "src/data/augment.h"
#include "src/data/data.h"

typedef struct {
  float *x;         /* n * crop * crop * 3, NHWC */
  int32_t *y;       /* n * crop * crop labels */
  int n;            /* samples in this batch (the last one may be short) */
  int valid;        /* samples that are not padding */
  const size_t *indices;  /* the n dataset indices */
  const uint8_t *is_pad;  /* the n padding flags */
  size_t batch_index;     /* within the epoch */
} loader_batch_t;

typedef struct {
  const data_set_t *data;
  augment_config_t augment;
  int batch_size;
  int workers; /* threads; 0 loads in the caller's thread when it asks for a batch */
  int depth;   /* batches prepared ahead; 0: workers + 1 */
  /* Where batch buffers live (pinned host memory for a GPU); NULL: malloc/free. */
  void *(*alloc)(void *ctx, size_t bytes);
  void (*free)(void *ctx, void *p);
  void *alloc_ctx;
} loader_config_t;

typedef struct loader loader_t;

int loader_create(loader_t **out, const loader_config_t *cfg, char *err, size_t errlen);
void loader_destroy(loader_t *l);

/* Begin an epoch over indices[0..n) (copied; is_pad may be NULL). drop_incomplete drops a short
 * final batch. Batches of a previous epoch not yet taken are abandoned. */
int loader_start(loader_t *l, long epoch, const size_t *indices, const uint8_t *is_pad, size_t n,
                 int drop_incomplete, char *err, size_t errlen);
size_t loader_num_batches(const loader_t *l);

/* The next batch, in order: 1 and *out set; 0 when the epoch is over; -1 with a message when a
 * sample could not be loaded. Blocks until the batch is ready. Call loader_release() when done
 * with it (before asking for `depth` more). */
int loader_next(loader_t *l, const loader_batch_t **out, char *err, size_t errlen);
void loader_release(loader_t *l, const loader_batch_t *batch);

/* Seconds the last loader_next() waited (or, without workers, spent loading). */
double loader_last_wait_s(const loader_t *l);

#endif
