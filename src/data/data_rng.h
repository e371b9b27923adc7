/* data_rng.h — counter-based random numbers for data and augmentation: a stream is keyed by a
 * tuple such as (seed, epoch, index), so a sample never depends on which rank or thread makes it.
 * SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and its streams pass BigCrush. */
#ifndef SRC_DATA_DATA_RNG_H
#define SRC_DATA_DATA_RNG_H

#include <stdint.h>

typedef struct {
  uint64_t state;
} data_rng_t;

static inline uint64_t data_rng_mix(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A stream for the tuple (a, b, c, d): each element goes through the mixer, so nearby tuples
 * give unrelated streams. */
static inline data_rng_t data_rng_key(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
  uint64_t h = data_rng_mix(a + 0x9e3779b97f4a7c15ULL);
  h = data_rng_mix(h ^ (b + 0x632be59bd9b4e019ULL));
  h = data_rng_mix(h ^ (c + 0x8cb92ba72f3d8dd7ULL));
  h = data_rng_mix(h ^ (d + 0xd1b54a32d192ed03ULL));
  data_rng_t r = {h};
  return r;
}

static inline uint64_t data_rng_next(data_rng_t *r)
{
  r->state += 0x9e3779b97f4a7c15ULL;
  return data_rng_mix(r->state);
}

/* Uniform in [0, 1). */
static inline double data_rng_uniform(data_rng_t *r)
{
  return (double)(data_rng_next(r) >> 11) * 0x1p-53;
}

/* Uniform integer in [0, n), n > 0: Lemire's multiply-shift without rejection, whose bias of at
 * most n / 2^64 is far below anything a shuffle or a crop offset could show. */
static inline uint64_t data_rng_below(data_rng_t *r, uint64_t n)
{
  return (uint64_t)(((unsigned __int128)data_rng_next(r) * n) >> 64);
}

#endif
