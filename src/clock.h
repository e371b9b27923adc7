/* clock.h — the one clock of the trainer: CLOCK_MONOTONIC, which every rank on the machine shares,
 * so host times of different ranks (the timeline's spans, step times) line up. */
#ifndef SRC_CLOCK_H
#define SRC_CLOCK_H

#include <time.h>

/* Seconds, milliseconds and microseconds since an arbitrary fixed point. */
static inline double clock_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double clock_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static inline double clock_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

#endif
