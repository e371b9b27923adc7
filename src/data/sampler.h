/* sampler.h — which samples each rank sees in an epoch, with the semantics of PyTorch's
 * DistributedSampler: the epoch's order is a shuffle keyed by (seed, epoch), the same on every
 * rank; rank r takes positions r, r + world, r + 2*world, ... of it. Without drop_last the order
 * is padded by repeating its beginning until it divides evenly (every rank gets the same number
 * of samples, so every rank takes the same number of steps); padded positions are flagged, so
 * validation can leave them out of its metrics. With drop_last the uneven tail is dropped. */
#ifndef SRC_DATA_SAMPLER_H
#define SRC_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  size_t dataset_size;
  int world, rank;
  int shuffle;    /* 0: dataset order (validation) */
  int drop_last;
  uint64_t seed;
} sampler_config_t;

/* Checks world >= 1, 0 <= rank < world, and that every rank gets at least one sample when
 * drop_last is set. Message names the problem. */
int sampler_validate(const sampler_config_t *cfg, char *err, size_t errlen);

/* Samples per rank per epoch (the same on every rank). */
size_t sampler_per_rank(const sampler_config_t *cfg);

/* Fill indices[0 .. sampler_per_rank) with this rank's samples for epoch; is_pad (may be NULL)
 * gets 1 where the sample repeats one already given to some rank this epoch. Returns 0, or -1
 * when out of memory. */
int sampler_epoch(const sampler_config_t *cfg, long epoch, size_t *indices, uint8_t *is_pad);

#endif
