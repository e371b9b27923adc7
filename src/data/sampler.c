/* sampler.c — the epoch order (a Fisher-Yates shuffle keyed by (seed, epoch)) cut into strided
 * per-rank shards, padded or truncated to a multiple of the world size. */
#include "config.h"

#include "src/data/sampler.h"

#include <stdio.h>
#include <stdlib.h>

#include "src/check.h"
#include "src/data/data_rng.h"

int sampler_validate(const sampler_config_t *c, char *err, size_t errlen)
{
  if (c->world < 1 || c->rank < 0 || c->rank >= c->world) {
    return check_fail(err, errlen, "sampler: rank %d of world %d is not a valid rank", c->rank,
                      c->world);
  }
  if (c->dataset_size == 0) {
    return check_fail(err, errlen, "sampler: the dataset is empty");
  }
  if (c->drop_last && c->dataset_size < (size_t)c->world) {
    return check_fail(err, errlen,
                      "sampler: %zu samples over %d ranks with drop-last leaves every rank "
                      "without data; use more samples or leave --drop-last off",
                      c->dataset_size, c->world);
  }
  return 0;
}

size_t sampler_per_rank(const sampler_config_t *c)
{
  size_t n = c->dataset_size, w = (size_t)c->world;
  return c->drop_last ? n / w : (n + w - 1) / w;
}

int sampler_epoch(const sampler_config_t *c, long epoch, size_t *indices, uint8_t *is_pad)
{
  size_t n = c->dataset_size, per = sampler_per_rank(c), w = (size_t)c->world;
  size_t *order = malloc(n * sizeof *order);
  if (!order) return -1;
  for (size_t i = 0; i < n; i++) order[i] = i;
  if (c->shuffle) {
    data_rng_t r = data_rng_key(c->seed, 0x53414d50ULL /* "SAMP" */, (uint64_t)epoch, 0);
    for (size_t i = n - 1; i > 0; i--) {
      size_t j = (size_t)data_rng_below(&r, i + 1);
      size_t t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
  }
  /* Position p of the padded order is order[p % n]: padding wraps around to the start. */
  for (size_t k = 0; k < per; k++) {
    size_t p = k * w + (size_t)c->rank;
    indices[k] = order[p % n];
    if (is_pad) is_pad[k] = p >= n;
  }
  free(order);
  return 0;
}
