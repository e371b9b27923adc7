/* wake.c — the segment's wake word.
 *
 * Protocol. Publishers store their counter (release) and then call shm_wake_all(), which bumps
 * hdr->wake and issues FUTEX_WAKE only when hdr->waiters is non-zero. A waiter reads wake, bumps
 * waiters, re-checks its condition and only then sleeps on wake with the value it read. All
 * operations on wake and waiters are sequentially consistent, so either the waiter's re-check
 * sees the publication or the publisher sees the waiter (and wake has moved, so FUTEX_WAIT
 * returns at once): a wake-up cannot be lost. */
#include "config.h"

#include "shm/wake.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm/timeutil.h"

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
  /* Not FUTEX_PRIVATE: the word lives in memory shared between processes. */
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void shm_wake_all(shm_segment_t *seg)
{
  shm_header_t *h = seg->hdr;
  atomic_fetch_add(&h->wake, 1);
  if (atomic_load(&h->waiters) != 0) futex(&h->wake, FUTEX_WAKE, INT_MAX, NULL);
}

void shm_wake_wait(shm_segment_t *seg, uint32_t seen, double max_s)
{
  struct timespec ts = shm_timespec(max_s);
  futex(&seg->hdr->wake, FUTEX_WAIT, seen, &ts);
}

void shm_sleep_on_wake(shm_segment_t *seg, uint32_t seen, double max_s)
{
  shm_header_t *h = seg->hdr;
  atomic_fetch_add(&h->waiters, 1);
  if (atomic_load(&h->wake) == seen) shm_wake_wait(seg, seen, max_s);
  atomic_fetch_sub(&h->waiters, 1);
}
