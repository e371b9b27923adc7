/* arena.c — the per-device memory ledger: blocks from a backend allocator, each recorded with
 * its category, so current and peak bytes per category are exact. */
#include "config.h"

#include "src/device/arena.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"

typedef struct {
  void *ptr;
  size_t bytes;
  arena_category_t cat;
} arena_block_t;

struct arena {
  arena_allocator_t alloc;
  char label[32];
  arena_block_t *blocks;
  size_t nblocks, capblocks;
  size_t current[ARENA_NUM_CATEGORIES], peak[ARENA_NUM_CATEGORIES];
  size_t total, total_peak;
  char err[384];
};

static const char *const category_names[ARENA_NUM_CATEGORIES] = {
    "parameters", "gradients", "optimizer", "activations",
    "workspace",  "communication", "dp_gather", "other"};

const char *arena_category_name(arena_category_t cat)
{
  return (unsigned)cat < ARENA_NUM_CATEGORIES ? category_names[cat] : "?";
}

static void *host_alloc(void *ctx, size_t bytes)
{
  void *p = NULL;
  return posix_memalign(&p, 64, bytes) == 0 ? p : NULL;
}

static void host_free(void *ctx, void *p) { free(p); }

int arena_create(arena_t **out, const arena_allocator_t *allocator, const char *label,
                 char *err, size_t errlen)
{
  *out = NULL;
  arena_t *a = calloc(1, sizeof *a);
  if (!a) {
    return check_fail(err, errlen, "out of memory creating the memory arena");
  }
  if (allocator)
    a->alloc = *allocator;
  else
    a->alloc = (arena_allocator_t){.alloc = host_alloc, .free = host_free, .device = -1};
  snprintf(a->label, sizeof a->label, "%s", label ? label : "cpu");
  *out = a;
  return 0;
}

void arena_destroy(arena_t *a)
{
  if (!a) return;
  for (size_t i = 0; i < a->nblocks; i++) a->alloc.free(a->alloc.ctx, a->blocks[i].ptr);
  free(a->blocks);
  free(a);
}

static void ledger_add(arena_t *a, arena_category_t cat, size_t bytes)
{
  a->current[cat] += bytes;
  if (a->current[cat] > a->peak[cat]) a->peak[cat] = a->current[cat];
  a->total += bytes;
  if (a->total > a->total_peak) a->total_peak = a->total;
}

static void ledger_sub(arena_t *a, arena_category_t cat, size_t bytes)
{
  a->current[cat] -= bytes < a->current[cat] ? bytes : a->current[cat];
  a->total -= bytes < a->total ? bytes : a->total;
}

void *arena_alloc(arena_t *a, size_t bytes, arena_category_t cat, const char *name)
{
  if ((unsigned)cat >= ARENA_NUM_CATEGORIES) cat = ARENA_OTHER;
  if (bytes == 0) bytes = 1; /* a valid, distinct pointer for empty tensors */
  if (a->nblocks == a->capblocks) {
    size_t cap = a->capblocks ? 2 * a->capblocks : 64;
    arena_block_t *nb = realloc(a->blocks, cap * sizeof *nb);
    if (!nb) {
      snprintf(a->err, sizeof a->err, "out of host memory for the arena's block list");
      return NULL;
    }
    a->blocks = nb;
    a->capblocks = cap;
  }
  void *p = a->alloc.alloc(a->alloc.ctx, bytes);
  if (!p) {
    snprintf(a->err, sizeof a->err,
             "%s: cannot allocate %.1f MiB for %s (%s); %.1f MiB already in use, of which "
             "activations %.1f MiB: reduce --batch-size or --image-size",
             a->label, bytes / ARENA_MIB, name ? name : "a tensor", arena_category_name(cat),
             a->total / ARENA_MIB, a->current[ARENA_ACTIVATIONS] / ARENA_MIB);
    return NULL;
  }
  a->blocks[a->nblocks++] = (arena_block_t){p, bytes, cat};
  ledger_add(a, cat, bytes);
  return p;
}

void *arena_calloc(arena_t *a, size_t bytes, arena_category_t cat, const char *name)
{
  void *p = arena_alloc(a, bytes, cat, name);
  if (p && a->alloc.device < 0) memset(p, 0, bytes);
  return p;
}

void arena_free(arena_t *a, void *p)
{
  if (!a || !p) return;
  /* Recent blocks are freed first (LIFO-ish), so search from the end. */
  for (size_t i = a->nblocks; i-- > 0;) {
    if (a->blocks[i].ptr != p) continue;
    ledger_sub(a, a->blocks[i].cat, a->blocks[i].bytes);
    a->alloc.free(a->alloc.ctx, p);
    a->blocks[i] = a->blocks[--a->nblocks];
    return;
  }
}

void arena_charge(arena_t *a, arena_category_t cat, size_t bytes)
{
  if ((unsigned)cat >= ARENA_NUM_CATEGORIES) cat = ARENA_OTHER;
  ledger_add(a, cat, bytes);
}

void arena_release(arena_t *a, arena_category_t cat, size_t bytes)
{
  if ((unsigned)cat >= ARENA_NUM_CATEGORIES) cat = ARENA_OTHER;
  ledger_sub(a, cat, bytes);
}

size_t arena_current(const arena_t *a, arena_category_t cat)
{
  return (unsigned)cat < ARENA_NUM_CATEGORIES ? a->current[cat] : 0;
}

size_t arena_peak(const arena_t *a, arena_category_t cat)
{
  return (unsigned)cat < ARENA_NUM_CATEGORIES ? a->peak[cat] : 0;
}

size_t arena_total_current(const arena_t *a) { return a->total; }
size_t arena_total_peak(const arena_t *a) { return a->total_peak; }
int arena_device(const arena_t *a) { return a->alloc.device; }
const char *arena_label(const arena_t *a) { return a->label; }
const char *arena_last_error(const arena_t *a) { return a->err[0] ? a->err : "no error"; }

void arena_reset_peaks(arena_t *a)
{
  memcpy(a->peak, a->current, sizeof a->peak);
  a->total_peak = a->total;
}

void arena_print(const arena_t *a, FILE *f)
{
  fprintf(f, "memory ledger %-10s %12s %12s\n", a->label, "current MiB", "peak MiB");
  for (int c = 0; c < ARENA_NUM_CATEGORIES; c++)
    fprintf(f, "  %-22s %12.2f %12.2f\n", category_names[c], a->current[c] / ARENA_MIB,
            a->peak[c] / ARENA_MIB);
  fprintf(f, "  %-22s %12.2f %12.2f\n", "total", a->total / ARENA_MIB,
          a->total_peak / ARENA_MIB);
}
