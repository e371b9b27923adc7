/* timeutil.h — monotonic clock and short sleeps for wait loops and the supervisor. */
#ifndef SHM_TIMEUTIL_H
#define SHM_TIMEUTIL_H

#include <time.h>

static inline double shm_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline struct timespec shm_timespec(double seconds)
{
  struct timespec ts;
  if (seconds < 0) seconds = 0;
  ts.tv_sec = (time_t)seconds;
  ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  return ts;
}

static inline void shm_sleep(double seconds)
{
  struct timespec ts = shm_timespec(seconds);
  while (nanosleep(&ts, &ts) != 0) { /* resume after a signal */ }
}

#endif
