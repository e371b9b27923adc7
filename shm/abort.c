/* abort.c — record the group's first failure and make it visible to every rank.
 * Protocol: claim (CAS 0->1 on abort_claim) so only one writer fills the message, write the
 * message and blamed rank, then publish the status with a release store and bump the futex word.
 * Readers load the status with acquire; a non-zero status means the message is complete.
 * A writer that loses the claim waits until the winner has published before it returns: its
 * caller reads the status next (`shm_abort(...); return shm_abort_status(...)`) and must not find
 * 0 there. (Without the wait, two ranks timing out together could return SHMDDP_OK from the
 * failed wait, go on into the collective and report a bogus SHMDDP_ERR_MISMATCH.) */
#include "config.h"

#include "shm/abort.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "shm/timeutil.h"
#include "shm/wake.h"

int shm_abort(shm_segment_t *seg, shmddp_status_t status, int blamed_rank, const char *fmt, ...)
{
  shm_header_t *h = seg->hdr;
  uint32_t expected = 0;
  if (!atomic_compare_exchange_strong(&h->abort_claim, &expected, 1)) {
    /* The winner is between its claim and its publication: a few stores away, unless it died
     * right there; then, after a second, this record is published instead. */
    double give_up = shm_now() + 1.0;
    while (!atomic_load_explicit(&h->abort_status, memory_order_acquire)) {
      if (shm_now() > give_up) break;
      sched_yield();
    }
    if (atomic_load_explicit(&h->abort_status, memory_order_acquire)) return 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(h->abort_msg, sizeof h->abort_msg, fmt, ap);
  va_end(ap);
  atomic_store(&h->abort_rank, blamed_rank);
  atomic_store_explicit(&h->abort_status, (uint32_t)status, memory_order_release);
  shm_wake_all(seg);
  return 1;
}

shmddp_status_t shm_abort_status(const shm_segment_t *seg, char *msg, size_t msglen)
{
  uint32_t st = atomic_load_explicit(&seg->hdr->abort_status, memory_order_acquire);
  if (st == 0) return SHMDDP_OK;
  if (msg && msglen) snprintf(msg, msglen, "%s", seg->hdr->abort_msg);
  return (shmddp_status_t)st;
}
