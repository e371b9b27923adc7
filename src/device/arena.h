/* arena.h — memory per device with a ledger: every allocation is charged to a category, so the
 * trainer can print (and reports can query) current and peak bytes per category per device.
 *
 * The arena hands out whole blocks from a backend allocator (host: 64-byte aligned malloc;
 * CUDA: the CUDA backend's allocator) and records each one; it does not sub-allocate, so a
 * freed block goes straight back. Memory that someone else allocates (collective buffers, a
 * cuDNN workspace) can be charged to the ledger without the arena owning it. Not thread-safe:
 * one arena per rank, used by that rank's main thread. */
#ifndef SRC_DEVICE_ARENA_H
#define SRC_DEVICE_ARENA_H

#include <stddef.h>
#include <stdio.h>

#define ARENA_MIB 1048576.0 /* bytes in a MiB: the ledger's printouts */

typedef enum {
  ARENA_PARAMS = 0,   /* master weights (and low-precision working copies) */
  ARENA_GRADS,        /* gradients */
  ARENA_OPTIM,        /* optimizer state: momentum, Adam moments */
  ARENA_ACTIVATIONS,  /* tensors saved by forward for backward, and their gradients */
  ARENA_WORKSPACE,    /* scratch: im2col, conv workspaces, statistics buffers */
  ARENA_COMM,         /* communication buffers (buckets, staging) */
  ARENA_DP_GATHER,    /* DataParallel's gather/scatter buffers on the driving device */
  ARENA_OTHER,
  ARENA_NUM_CATEGORIES
} arena_category_t;

/* Where the arena's blocks come from. alloc returns NULL on failure. */
typedef struct {
  void *(*alloc)(void *ctx, size_t bytes);
  void (*free)(void *ctx, void *p);
  void *ctx;
  int device; /* -1: host memory; otherwise the CUDA device ordinal */
} arena_allocator_t;

typedef struct arena arena_t;

/* allocator NULL: host memory. label names the device in printouts ("cpu0", "cuda:1"). */
int arena_create(arena_t **out, const arena_allocator_t *allocator, const char *label,
                 char *err, size_t errlen);
void arena_destroy(arena_t *a); /* frees every block still allocated */

/* bytes (> 0) charged to cat; name (may be NULL) is kept for the error message and listing.
 * Returns NULL when the backend allocator fails; arena_last_error() then says how much was
 * asked for, for what, and how much each category already holds. */
void *arena_alloc(arena_t *a, size_t bytes, arena_category_t cat, const char *name);
/* Zero-filled (host arenas only; the CUDA backend clears device blocks itself). */
void *arena_calloc(arena_t *a, size_t bytes, arena_category_t cat, const char *name);
void arena_free(arena_t *a, void *p); /* p NULL or from arena_alloc; anything else is ignored */

/* Memory owned elsewhere, charged to (and later released from) the ledger. */
void arena_charge(arena_t *a, arena_category_t cat, size_t bytes);
void arena_release(arena_t *a, arena_category_t cat, size_t bytes);

size_t arena_current(const arena_t *a, arena_category_t cat);
size_t arena_peak(const arena_t *a, arena_category_t cat);
size_t arena_total_current(const arena_t *a);
size_t arena_total_peak(const arena_t *a); /* peak of the sum, not the sum of the peaks */
void arena_reset_peaks(arena_t *a);        /* peaks := current (e.g. after warm-up) */
int arena_device(const arena_t *a);        /* -1 host, else CUDA ordinal */
const char *arena_label(const arena_t *a);
const char *arena_last_error(const arena_t *a);

const char *arena_category_name(arena_category_t cat); /* "parameters", "gradients", ... */

/* The ledger as a table: one line per category, current and peak in MiB, and the totals. (As
 * JSON: run_summary_ledger_json, beside the run's other JSON.) */
void arena_print(const arena_t *a, FILE *f);

#endif
