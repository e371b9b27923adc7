/* rng.c — counter-based random numbers for deterministic initialisation. */
#include "config.h"

#include "src/model/rng.h"

#include <math.h>

static uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rng_key(uint64_t seed, const char *name)
{
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 1099511628211ULL;
  return mix64(h ^ mix64(seed + 0x9e3779b97f4a7c15ULL));
}

uint64_t rng_bits(uint64_t key, uint64_t i)
{
  return mix64(mix64(key + 0x9e3779b97f4a7c15ULL * (i + 1)) ^ key);
}

double rng_uniform(uint64_t key, uint64_t i)
{
  return ((double)(rng_bits(key, i) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double rng_normal(uint64_t key, uint64_t i)
{
  double u1 = rng_uniform(key, 2 * i), u2 = rng_uniform(key, 2 * i + 1);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
