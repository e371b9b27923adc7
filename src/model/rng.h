/* rng.h — a counter-based random number generator for parameter initialisation: value i of a
 * stream is a pure function of (key, i), so a tensor's initial values depend only on the seed
 * and the tensor's name, never on allocation or initialisation order. */
#ifndef SRC_MODEL_RNG_H
#define SRC_MODEL_RNG_H

#include <stdint.h>

/* A stream key from the seed and a name (FNV-1a of the name, mixed with the seed). */
uint64_t rng_key(uint64_t seed, const char *name);
/* 64 random bits for counter i of the stream (two rounds of the splitmix64 finaliser). */
uint64_t rng_bits(uint64_t key, uint64_t i);
/* Uniform in (0, 1) (never 0 or 1), and standard normal (Box-Muller on counters 2i, 2i+1). */
double rng_uniform(uint64_t key, uint64_t i);
double rng_normal(uint64_t key, uint64_t i);

#endif
