/* clock.h — the trainer's clock: the shared-memory library's monotonic clock (CLOCK_MONOTONIC),
 * which every rank on the machine shares, so host times of different ranks (the timeline's spans,
 * step times) line up. */
#ifndef SRC_CLOCK_H
#define SRC_CLOCK_H

#include "shm/timeutil.h"

/* Seconds, milliseconds and microseconds since an arbitrary fixed point. */
static inline double clock_s(void) { return shm_now(); }
static inline double clock_ms(void) { return 1e3 * shm_now(); }
static inline double clock_us(void) { return 1e6 * shm_now(); }

#endif
