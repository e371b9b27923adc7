/* wake.h — the segment's wake word, the futex every rank sleeps on: a publisher bumps it and
 * wakes the sleepers; a waiter sleeps on it for a bounded time. The primitive under the wait
 * loop (wait.c), the abort word (abort.c) and every publication of the layers above. */
#ifndef SHM_WAKE_H
#define SHM_WAKE_H

#include <stdint.h>

#include "shm/segment.h"

/* Call after publishing anything a peer may wait for: wakes sleeping waiters. */
void shm_wake_all(shm_segment_t *seg);

/* Sleep until something is published (hdr->wake moves from seen) or max_s passes. */
void shm_sleep_on_wake(shm_segment_t *seg, uint32_t seen, double max_s);

/* Sleep on the wake word while it still reads seen, at most max_s. The caller has already
 * counted itself in hdr->waiters and re-checked its own condition (wait.c's protocol). */
void shm_wake_wait(shm_segment_t *seg, uint32_t seen, double max_s);

#endif
