/* loader.c — a ring of batch slots filled by worker threads. Batch b always goes to slot
 * b % depth, and a worker may only claim it once the step has released batch b - depth, so
 * workers run at most `depth` batches ahead and the consumer takes batches strictly in order.
 * One mutex and one condition variable: the work per batch (decode + augment) dwarfs the
 * locking. */
#include "config.h"

#include "src/clock.h"
#include "src/data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/check.h"

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_TAKEN };

typedef struct {
  loader_batch_t batch;
  int state;
  int failed;
  char err[256];
} slot_t;

typedef struct {
  uint8_t *rgb, *mask; /* one sample at the dataset's largest size */
} scratch_t;

struct loader {
  loader_config_t cfg;
  size_t pixels;        /* crop * crop */
  int depth;
  slot_t *slots;
  scratch_t own;        /* for loading without workers */
  pthread_t *threads;
  int nthreads;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int stop;
  long epoch;
  size_t *indices;
  uint8_t *is_pad;
  size_t n, cap;
  size_t nbatches, next_fill, next_take;
  double wait_s;
};

static int scratch_init(scratch_t *s, const data_set_t *d)
{
  size_t px = (size_t)d->max_width * d->max_height;
  s->rgb = malloc(3 * px);
  s->mask = malloc(px);
  return s->rgb && s->mask ? 0 : -1;
}

static void scratch_free(scratch_t *s)
{
  free(s->rgb);
  free(s->mask);
}

/* Called without the lock: the slot is FILLING, owned by this thread; the index list does not
 * change while any slot is FILLING (loader_start waits for them). */
static void fill(loader_t *l, slot_t *s, size_t b, scratch_t *sc)
{
  const int B = l->cfg.batch_size;
  size_t first = b * (size_t)B;
  int n = (int)(l->n - first < (size_t)B ? l->n - first : (size_t)B);
  loader_batch_t *bt = &s->batch;
  bt->n = n;
  bt->valid = 0;
  bt->batch_index = b;
  bt->indices = l->indices + first;
  bt->is_pad = l->is_pad + first;
  s->failed = 0;
  for (int k = 0; k < n; k++) {
    size_t idx = l->indices[first + k];
    int w, h;
    if (data_get(l->cfg.data, idx, sc->rgb, sc->mask, &w, &h, s->err, sizeof s->err) != 0) {
      s->failed = 1;
      return;
    }
    augment_sample(&l->cfg.augment, l->epoch, idx, sc->rgb, sc->mask, w, h,
                   bt->x + (size_t)k * l->pixels * 3, bt->y + (size_t)k * l->pixels);
    bt->valid += !l->is_pad[first + k];
  }
}

static void *worker_main(void *arg)
{
  loader_t *l = arg;
  scratch_t sc;
  int ok = scratch_init(&sc, l->cfg.data) == 0;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    slot_t *s = l->next_fill < l->nbatches ? &l->slots[l->next_fill % l->depth] : NULL;
    if (!s || s->state != SLOT_FREE) {
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    size_t b = l->next_fill++;
    s->state = SLOT_FILLING;
    pthread_mutex_unlock(&l->mu);
    if (ok) {
      fill(l, s, b, &sc);
    } else {
      s->failed = 1;
      snprintf(s->err, sizeof s->err, "loader: out of memory for a sample buffer");
    }
    pthread_mutex_lock(&l->mu);
    s->state = SLOT_READY;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  scratch_free(&sc);
  return NULL;
}

static void *buf_alloc(loader_t *l, size_t bytes)
{
  return l->cfg.alloc ? l->cfg.alloc(l->cfg.alloc_ctx, bytes) : malloc(bytes);
}

static void buf_free(loader_t *l, void *p)
{
  if (!p) return;
  if (l->cfg.free) l->cfg.free(l->cfg.alloc_ctx, p);
  else free(p);
}

int loader_create(loader_t **out, const loader_config_t *cfg, char *err, size_t errlen)
{
  *out = NULL;
  if (!cfg->data || cfg->batch_size < 1 || cfg->workers < 0 || cfg->depth < 0 ||
      cfg->augment.crop < 1) {
    return check_fail(err, errlen,
                      "loader: needs a dataset, batch size >= 1, crop >= 1, workers >= 0");
  }
  loader_t *l = calloc(1, sizeof *l);
  if (!l) {
    return check_fail(err, errlen, "loader: out of memory");
  }
  l->cfg = *cfg;
  l->pixels = (size_t)cfg->augment.crop * cfg->augment.crop;
  l->depth = cfg->depth > 0 ? cfg->depth : cfg->workers + 1;
  l->slots = calloc((size_t)l->depth, sizeof *l->slots);
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  int ok = l->slots && scratch_init(&l->own, cfg->data) == 0;
  for (int i = 0; ok && i < l->depth; i++) {
    l->slots[i].batch.x = buf_alloc(l, (size_t)cfg->batch_size * l->pixels * 3 * sizeof(float));
    l->slots[i].batch.y = buf_alloc(l, (size_t)cfg->batch_size * l->pixels * sizeof(int32_t));
    ok = l->slots[i].batch.x && l->slots[i].batch.y;
  }
  if (ok && cfg->workers > 0) {
    l->threads = calloc((size_t)cfg->workers, sizeof *l->threads);
    ok = l->threads != NULL;
    for (int i = 0; ok && i < cfg->workers; i++) {
      ok = pthread_create(&l->threads[i], NULL, worker_main, l) == 0;
      if (ok) l->nthreads++;
    }
  }
  if (!ok) {
    loader_destroy(l);
    return check_fail(err, errlen,
                      "loader: out of memory (or threads) for %d batches of %d at %dx%d",
                      cfg->workers + 1, cfg->batch_size, cfg->augment.crop, cfg->augment.crop);
  }
  *out = l;
  return 0;
}

void loader_destroy(loader_t *l)
{
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  for (int i = 0; i < l->nthreads; i++) pthread_join(l->threads[i], NULL);
  free(l->threads);
  for (int i = 0; l->slots && i < l->depth; i++) {
    buf_free(l, l->slots[i].batch.x);
    buf_free(l, l->slots[i].batch.y);
  }
  free(l->slots);
  scratch_free(&l->own);
  free(l->indices);
  free(l->is_pad);
  pthread_mutex_destroy(&l->mu);
  pthread_cond_destroy(&l->cv);
  free(l);
}

int loader_start(loader_t *l, long epoch, const size_t *indices, const uint8_t *is_pad, size_t n,
                 int drop_incomplete, char *err, size_t errlen)
{
  pthread_mutex_lock(&l->mu);
  /* Stop handing out batches of the old epoch and let the ones being filled finish: they read
   * the index list about to be replaced. */
  l->nbatches = l->next_fill;
  for (;;) {
    int busy = 0;
    for (int i = 0; i < l->depth; i++) busy |= l->slots[i].state == SLOT_FILLING;
    if (!busy) break;
    pthread_cond_wait(&l->cv, &l->mu);
  }
  int rc = 0;
  if (n > l->cap) {
    size_t *ni = realloc(l->indices, n * sizeof *ni);
    if (ni) l->indices = ni;
    uint8_t *np = realloc(l->is_pad, n);
    if (np) l->is_pad = np;
    if (ni && np) l->cap = n;
    else rc = -1;
  }
  if (rc == 0) {
    if (n) memcpy(l->indices, indices, n * sizeof *indices);
    for (size_t i = 0; i < n; i++) l->is_pad[i] = is_pad ? is_pad[i] : 0;
    l->n = n;
    l->epoch = epoch;
    size_t B = (size_t)l->cfg.batch_size;
    l->nbatches = drop_incomplete ? n / B : (n + B - 1) / B;
  } else {
    l->n = l->nbatches = 0;
    snprintf(err, errlen, "loader: out of memory for %zu sample indices", n);
  }
  for (int i = 0; i < l->depth; i++) l->slots[i].state = SLOT_FREE;
  l->next_fill = l->next_take = 0;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
  return rc;
}

size_t loader_num_batches(const loader_t *l) { return l->nbatches; }

int loader_next(loader_t *l, const loader_batch_t **out, char *err, size_t errlen)
{
  double t0 = clock_s();
  *out = NULL;
  pthread_mutex_lock(&l->mu);
  if (l->next_take >= l->nbatches) {
    pthread_mutex_unlock(&l->mu);
    l->wait_s = 0;
    return 0;
  }
  size_t b = l->next_take;
  slot_t *s = &l->slots[b % l->depth];
  if (l->nthreads == 0) {
    if (s->state != SLOT_FREE) {
      pthread_mutex_unlock(&l->mu);
      return check_fail(err, errlen, "loader: batch %zu asked for before batch %zu was released", b,
                        b >= (size_t)l->depth ? b - (size_t)l->depth : 0);
    }
    s->state = SLOT_FILLING;
    l->next_fill = b + 1;
    pthread_mutex_unlock(&l->mu);
    fill(l, s, b, &l->own);
    pthread_mutex_lock(&l->mu);
  } else {
    while (s->state != SLOT_READY || s->batch.batch_index != b) pthread_cond_wait(&l->cv, &l->mu);
  }
  s->state = SLOT_TAKEN;
  l->next_take = b + 1;
  pthread_mutex_unlock(&l->mu);
  l->wait_s = clock_s() - t0;
  if (s->failed) {
    return check_fail(err, errlen, "%s", s->err);
  }
  *out = &s->batch;
  return 1;
}

void loader_release(loader_t *l, const loader_batch_t *batch)
{
  if (!batch) return;
  pthread_mutex_lock(&l->mu);
  slot_t *s = &l->slots[batch->batch_index % l->depth];
  if (&s->batch == batch && s->state == SLOT_TAKEN) s->state = SLOT_FREE;
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

double loader_last_wait_s(const loader_t *l) { return l->wait_s; }
