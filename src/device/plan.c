/* plan.c — the lifetime planner behind plan.h. */
#include "config.h"

#include "src/device/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"

typedef struct {
  char name[48];
  size_t bytes, offset;
  int first, last; /* ticks, inclusive */
} plan_entry_t;

struct plan {
  plan_entry_t *e;
  size_t n, cap;
  size_t cursor; /* next declaration in this pass */
  int tick;
  int recording; /* until plan_finish */
  int separate;  /* no sharing */
  size_t total;
  char *base;
};

int plan_create(plan_t **out, char *err, size_t errlen)
{
  *out = calloc(1, sizeof **out);
  if (!*out) return check_fail(err, errlen, "out of memory creating a memory plan");
  (*out)->recording = 1;
  return 0;
}

void plan_destroy(plan_t *p)
{
  if (!p) return;
  free(p->e);
  free(p);
}

void plan_begin(plan_t *p)
{
  p->cursor = 0;
  p->tick = 0;
}


static size_t round_up(size_t v) { return (v + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN; }

int plan_tensor(plan_t *p, size_t bytes, const char *name, char *err, size_t errlen)
{
  if (!p->recording) {
    if (p->cursor >= p->n)
      return check_fail(err, errlen,
                        "memory plan: the schedule declares tensor %zu (%s) but only %zu were "
                        "planned (a bug: the schedule changed between planning and running)",
                        p->cursor, name, p->n);
    plan_entry_t *e = &p->e[p->cursor];
    if (e->bytes != bytes || strncmp(e->name, name, sizeof e->name - 1) != 0)
      return check_fail(err, errlen,
                        "memory plan: tensor %zu is %s of %zu bytes, planned as %s of %zu "
                        "(a bug: the schedule changed between planning and running)",
                        p->cursor, name, bytes, e->name, e->bytes);
    return (int)p->cursor++;
  }
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    plan_entry_t *e = realloc(p->e, cap * sizeof *e);
    if (!e) return check_fail(err, errlen, "out of memory planning tensor %s", name);
    p->e = e;
    p->cap = cap;
  }
  plan_entry_t *e = &p->e[p->n];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->bytes = bytes;
  e->first = e->last = p->tick;
  p->cursor = ++p->n;
  return (int)(p->n - 1);
}

void *plan_ptr(plan_t *p, int id)
{
  if (id < 0 || (size_t)id >= p->n) return NULL;
  plan_entry_t *e = &p->e[id];
  if (p->recording) {
    if (p->tick > e->last) e->last = p->tick;
    return NULL;
  }
  return p->base ? p->base + e->offset : NULL;
}

void plan_tick(plan_t *p) { p->tick++; }

static int meets(const plan_entry_t *a, const plan_entry_t *b)
{
  return a->first <= b->last && b->first <= a->last;
}

void plan_set_separate(plan_t *p, int separate) { p->separate = separate; }

static int overlaps(const plan_entry_t *a, const plan_entry_t *b)
{
  return a->bytes && b->bytes && a->offset < b->offset + b->bytes &&
         b->offset < a->offset + a->bytes;
}

int plan_verify(const plan_t *p, char *err, size_t errlen)
{
  for (size_t i = 0; i < p->n; i++) {
    if (p->e[i].offset % PLAN_ALIGN || p->e[i].offset + p->e[i].bytes > p->total)
      return check_fail(err, errlen, "memory plan: %s at %zu+%zu lies outside the %zu-byte block",
                        p->e[i].name, p->e[i].offset, p->e[i].bytes, p->total);
    for (size_t j = i + 1; j < p->n; j++)
      if (meets(&p->e[i], &p->e[j]) && overlaps(&p->e[i], &p->e[j]))
        return check_fail(err, errlen,
                          "memory plan: %s (ticks %d-%d, bytes %zu-%zu) and %s (ticks %d-%d, "
                          "bytes %zu-%zu) are alive together and overlap",
                          p->e[i].name, p->e[i].first, p->e[i].last, p->e[i].offset,
                          p->e[i].offset + p->e[i].bytes, p->e[j].name, p->e[j].first,
                          p->e[j].last, p->e[j].offset, p->e[j].offset + p->e[j].bytes);
  }
  return 0;
}

/* Largest first; ties by declaration order, so the layout depends on the schedule alone. */
static int by_size(const void *a, const void *b, void *ctx)
{
  const plan_entry_t *e = ctx;
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  if (e[i].bytes != e[j].bytes) return e[i].bytes > e[j].bytes ? -1 : 1;
  return i < j ? -1 : i > j;
}

/* qsort without a context argument: insertion sort, n is a few hundred. */
static void sort_ids(size_t *ids, size_t n, const plan_entry_t *e)
{
  for (size_t i = 1; i < n; i++) {
    size_t v = ids[i], j = i;
    while (j > 0 && by_size(&v, &ids[j - 1], (void *)e) < 0) {
      ids[j] = ids[j - 1];
      j--;
    }
    ids[j] = v;
  }
}

/* Lays the tensors out in the order ids, each at the lowest offset clear of every tensor placed
 * before it that is alive at the same time (any tensor, when separate); placed: scratch of n.
 * Writes the offsets and returns the block's size. */
static size_t lay_out(plan_t *p, const size_t *ids, size_t *placed)
{
  size_t np = 0, total = 0;
  for (size_t k = 0; k < p->n; k++) {
    plan_entry_t *e = &p->e[ids[k]];
    size_t need = round_up(e->bytes), off = 0;
    /* try 0 and the end of each placed tensor alive with it, keep the smallest that fits */
    size_t best = SIZE_MAX;
    for (size_t c = 0; c <= np; c++) {
      off = c == np ? 0 : round_up(p->e[placed[c]].offset + p->e[placed[c]].bytes);
      if (c < np && !p->separate && !meets(e, &p->e[placed[c]])) continue;
      if (off >= best) continue;
      int clear = 1;
      for (size_t q = 0; q < np && clear; q++) {
        const plan_entry_t *o = &p->e[placed[q]];
        if ((p->separate || meets(e, o)) && off < o->offset + o->bytes && o->offset < off + need)
          clear = 0;
      }
      if (clear) best = off;
    }
    e->offset = best;
    if (best + need > total) total = best + need;
    placed[np++] = ids[k];
  }
  return total;
}

/* The largest sum of the tensors' sizes (rounded: as laid out, PLAN_ALIGN multiples) alive at
 * one tick: no layout is smaller. */
static size_t live_peak(const plan_t *p, int rounded)
{
  int last = 0;
  for (size_t i = 0; i < p->n; i++)
    if (p->e[i].last > last) last = p->e[i].last;
  size_t peak = 0;
  for (int t = 0; t <= last; t++) {
    size_t live = 0;
    for (size_t i = 0; i < p->n; i++)
      if (p->e[i].first <= t && t <= p->e[i].last)
        live += rounded ? round_up(p->e[i].bytes) : p->e[i].bytes;
    if (live > peak) peak = live;
  }
  return peak;
}

/* The search below tries at most PLAN_SEARCH_WORK / n^3 orders (a layout of n tensors costs
 * O(n^3) steps at worst): about 200 for the U-Net's plan of about 90 tensors, which reaches its
 * lower bound within 30 (3.5 ms); none beyond 512 tensors. */
#define PLAN_SEARCH_WORK ((size_t)1 << 27)

/* Largest first leaves holes where a smaller tensor's lifetime straddles two larger ones (the
 * reference U-Net's block came out 6.8 % above what is ever alive at once). From that order, a
 * search: move one tensor to an earlier place in the order, keep the move when the block
 * shrinks, start over; it ends at the lower bound (live_peak, rounded), when no move helps, or
 * when PLAN_SEARCH_WORK is spent. Deterministic: the layout depends on the schedule alone. */
int plan_finish(plan_t *p, size_t *bytes, char *err, size_t errlen)
{
  size_t n = p->n, m = n ? n : 1;
  size_t *ids = calloc(m, sizeof *ids), *trial = malloc(m * sizeof *trial);
  size_t *placed = malloc(m * sizeof *placed);
  if (!ids || !trial || !placed) {
    free(ids), free(trial), free(placed);
    return check_fail(err, errlen, "out of memory laying out %zu tensors", n);
  }
  for (size_t i = 0; i < n; i++) ids[i] = i;
  sort_ids(ids, n, p->e);
  size_t total = lay_out(p, ids, placed);
  if (!p->separate) {
    const size_t bound = live_peak(p, 1), most = n ? PLAN_SEARCH_WORK / n / n / n : 0;
    size_t tried = 1;
    int better = 1;
    while (better && total > bound && tried < most) {
      better = 0;
      for (size_t i = 1; i < n && !better && tried < most; i++)
        for (size_t j = 0; j < i && !better && tried < most; j++) {
          memcpy(trial, ids, j * sizeof *ids); /* ids with ids[i] moved to place j */
          trial[j] = ids[i];
          memcpy(trial + j + 1, ids + j, (i - j) * sizeof *ids);
          memcpy(trial + i + 1, ids + i + 1, (n - i - 1) * sizeof *ids);
          size_t t = lay_out(p, trial, placed);
          tried++;
          if (t < total) {
            total = t;
            memcpy(ids, trial, n * sizeof *ids);
            better = 1;
          }
        }
    }
    total = lay_out(p, ids, placed); /* the offsets of the order kept */
  }
  free(ids), free(trial), free(placed);
  p->total = total;
  p->recording = 0;
  *bytes = total;
  return plan_verify(p, err, errlen);
}

void plan_set_base(plan_t *p, void *base) { p->base = base; }

size_t plan_count(const plan_t *p) { return p->n; }
size_t plan_bytes(const plan_t *p) { return p->total; }

size_t plan_sum_bytes(const plan_t *p)
{
  size_t s = 0;
  for (size_t i = 0; i < p->n; i++) s += p->e[i].bytes;
  return s;
}

size_t plan_live_peak(const plan_t *p) { return live_peak(p, 0); }

void plan_tensor_info(const plan_t *p, size_t id, const char **name, size_t *bytes, size_t *offset,
                      int *first, int *last)
{
  const plan_entry_t *e = &p->e[id];
  if (name) *name = e->name;
  if (bytes) *bytes = e->bytes;
  if (offset) *offset = e->offset;
  if (first) *first = e->first;
  if (last) *last = e->last;
}
