/* wait.h — how every rank waits for its peers: spin briefly, then sleep on the segment's futex
 * word; while waiting, watch the abort word, peers that have exited, and a deadline. */
#ifndef SHM_WAIT_H
#define SHM_WAIT_H

#include <stdint.h>

#include "shm/segment.h"
#include "shm/wake.h" /* who waits also publishes: shm_wake_all */

typedef struct shm_waiter shm_waiter_t;
struct shm_waiter {
  /* Bit r set: still waiting for rank r. 0: the wait is over. Called often: keep it cheap. */
  uint32_t (*pending)(shm_waiter_t *w);
  /* Optional, called on the slow path only: detect a protocol error (e.g. peers calling a
   * different collective). Return SHMDDP_OK to keep waiting, or an error with a message. */
  shmddp_status_t (*check)(shm_waiter_t *w, char *err, size_t errlen);
  const char *what; /* e.g. "all_reduce #12", for messages */
};

/* Wait until w->pending(w) returns 0. Returns SHMDDP_OK, or:
 *  - the group's abort status (message copied from the segment) once anyone aborted;
 *  - SHMDDP_ERR_ABORTED if a rank we wait for has exited;
 *  - SHMDDP_ERR_TIMEOUT after timeout_s, naming the ranks that did not arrive;
 *  - whatever w->check returns.
 * Errors other than the group's own abort are recorded as the group's abort, so every rank
 * stops. self is the calling rank (for messages). */
shmddp_status_t shm_wait(shm_segment_t *seg, int self, shm_waiter_t *w, double timeout_s,
                         char *err, size_t errlen);

/* shm_wait for a condition that nobody announces on the segment's wake word (e.g. a GPU event's
 * completion, which only a query sees): spins, yields, then sleeps on the wake word 20 us at a
 * time (a publication ends a sleep early; the condition is queried again), and runs shm_wait's checks (abort, exited peers, check, deadline) every
 * millisecond. Same results as shm_wait. */
shmddp_status_t shm_poll(shm_segment_t *seg, int self, shm_waiter_t *w, double timeout_s,
                         char *err, size_t errlen);

/* "2, 3" from a bitmask of ranks. */
void shm_format_ranks(uint32_t mask, char *buf, size_t len);

#endif
