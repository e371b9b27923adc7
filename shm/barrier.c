/* barrier.c — counting barrier. Rank r keeps a monotonic count of the barriers it has entered in
 * its own cache line (rank[r].barrier); barrier number n is passed when every rank's count is at
 * least n. No rank can enter barrier n+1 before all have entered n, so counts never differ by
 * more than one and no reset (or sense reversal) is needed. */
#include "config.h"

#include "shm/barrier.h"

#include <stdio.h>

#include "shm/wait.h"

typedef struct {
  shm_waiter_t base;
  shm_segment_t *seg;
  uint64_t target;
} barrier_waiter_t;

static uint32_t barrier_pending(shm_waiter_t *w)
{
  barrier_waiter_t *b = (barrier_waiter_t *)w;
  uint32_t mask = 0;
  for (int r = 0; r < b->seg->nranks; r++)
    if (atomic_load_explicit(&b->seg->hdr->rank[r].barrier, memory_order_acquire) < b->target)
      mask |= 1u << r;
  return mask;
}

shmddp_status_t shm_barrier(shm_segment_t *seg, int self, double timeout_s, char *err,
                            size_t errlen)
{
  uint64_t n = atomic_fetch_add_explicit(&seg->hdr->rank[self].barrier, 1, memory_order_release) + 1;
  shm_wake_all(seg);
  char what[48];
  snprintf(what, sizeof what, "barrier #%llu", (unsigned long long)n);
  barrier_waiter_t b = {{barrier_pending, NULL, what}, seg, n};
  return shm_wait(seg, self, &b.base, timeout_s, err, errlen);
}
