/* wait.c — spin-then-sleep waiting on the segment's wake word (wake.c: the protocol that makes
 * a lost wake-up impossible). Sleeps are bounded (at most 50 ms) so a deadline is honoured even
 * if nobody publishes, and 8 ranks on 2 cores do not burn CPU while they wait. shm_poll is the
 * same wait for conditions nobody announces (a GPU event's completion): short sleeps (on the wake
 * word, so a publication or an abort ends one early, and a sleeping rank is seen to wait in its
 * segment), the same checks.
 */
#include "config.h"

#include "shm/wait.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "shm/abort.h"
#include "shm/timeutil.h"

#define SPIN_ITERS 4000
#define YIELD_ITERS 16
#define MAX_SLEEP_S 0.05
/* shm_poll: spin, then yield for up to 2 ms, then sleep 20 us at a time; the slow path's checks
 * (abort, peers, deadline) every millisecond. */
#define POLL_SPIN_ITERS 200
#define POLL_YIELD_S 0.002
#define POLL_SLEEP_S 20e-6
#define POLL_CHECK_S 0.001

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void shm_format_ranks(uint32_t mask, char *buf, size_t len)
{
  size_t off = 0;
  buf[0] = 0;
  for (int r = 0; r < 32 && off < len; r++) {
    if (!(mask & (1u << r))) continue;
    off += (size_t)snprintf(buf + off, len - off, "%s%d", off ? ", " : "", r);
  }
}

static const char *state_word(int32_t state)
{
  return state == SHM_RANK_FAILED ? "failed" : "exited";
}

/* The slow path of every wait: the group's abort, the waiter's own check, a pending rank that
 * has exited, the deadline. SHMDDP_OK: keep waiting (*pending says for whom; 0: it is over). */
static shmddp_status_t slow_checks(shm_segment_t *seg, int self, shm_waiter_t *w,
                                   double deadline, double timeout_s, uint32_t *pending,
                                   char *err, size_t errlen)
{
  shm_header_t *h = seg->hdr;
  shmddp_status_t st = shm_abort_status(seg, err, errlen);
  if (st != SHMDDP_OK) return st;
  if (w->check) {
    char msg[SHM_ABORT_MSG_BYTES];
    st = w->check(w, msg, sizeof msg);
    if (st != SHMDDP_OK) {
      shm_abort(seg, st, self, "%s", msg);
      return shm_abort_status(seg, err, errlen);
    }
  }
  *pending = w->pending(w);
  for (int r = 0; r < seg->nranks; r++) {
    if (!(*pending & (1u << r))) continue;
    int32_t state = atomic_load(&h->rank[r].state);
    if (state == SHM_RANK_EXITED || state == SHM_RANK_FAILED) {
      shm_abort(seg, SHMDDP_ERR_ABORTED, r,
                "rank %d has %s, but rank %d is still waiting for it in %s", r,
                state_word(state), self, w->what ? w->what : "a collective");
      return shm_abort_status(seg, err, errlen);
    }
  }
  if (shm_now() >= deadline && *pending) {
    char ranks[128];
    shm_format_ranks(*pending, ranks, sizeof ranks);
    shm_abort(seg, SHMDDP_ERR_TIMEOUT, __builtin_ctz(*pending),
              "timed out after %.0f s: rank %d waited in %s for rank(s) %s, which did not "
              "arrive (raise the limit with --timeout or SHMDDP_TIMEOUT if they are just slow)",
              timeout_s, self, w->what ? w->what : "a collective", ranks);
    return shm_abort_status(seg, err, errlen);
  }
  return SHMDDP_OK;
}

shmddp_status_t shm_wait(shm_segment_t *seg, int self, shm_waiter_t *w, double timeout_s,
                         char *err, size_t errlen)
{
  shm_header_t *h = seg->hdr;
  for (int i = 0; i < SPIN_ITERS; i++) {
    if (w->pending(w) == 0) return SHMDDP_OK;
    if ((i & 255) == 255 && atomic_load_explicit(&h->abort_status, memory_order_relaxed)) break;
    cpu_relax();
  }
  for (int i = 0; i < YIELD_ITERS; i++) {
    if (w->pending(w) == 0) return SHMDDP_OK;
    sched_yield();
  }
  double deadline = shm_now() + timeout_s;
  for (;;) {
    shmddp_status_t st = shm_abort_status(seg, err, errlen);
    if (st != SHMDDP_OK) return st;

    uint32_t seen = atomic_load(&h->wake);
    atomic_fetch_add(&h->waiters, 1);
    uint32_t pending = w->pending(w);
    if (pending == 0) {
      atomic_fetch_sub(&h->waiters, 1);
      return SHMDDP_OK;
    }
    double now = shm_now();
    double left = deadline - now;
    if (left > 0) shm_wake_wait(seg, seen, left < MAX_SLEEP_S ? left : MAX_SLEEP_S);
    atomic_fetch_sub(&h->waiters, 1);
    if (w->pending(w) == 0) return SHMDDP_OK;
    st = slow_checks(seg, self, w, deadline, timeout_s, &pending, err, errlen);
    if (st != SHMDDP_OK || pending == 0) return st;
  }
}

shmddp_status_t shm_poll(shm_segment_t *seg, int self, shm_waiter_t *w, double timeout_s,
                         char *err, size_t errlen)
{
  double start = shm_now(), deadline = start + timeout_s, next_check = start + POLL_CHECK_S;
  for (unsigned i = 0;; i++) {
    if (w->pending(w) == 0) return SHMDDP_OK;
    if (i < POLL_SPIN_ITERS) {
      cpu_relax();
      continue;
    }
    double now = shm_now();
    if (now >= next_check) {
      uint32_t pending;
      shmddp_status_t st = slow_checks(seg, self, w, deadline, timeout_s, &pending, err, errlen);
      if (st != SHMDDP_OK || pending == 0) return st;
      next_check = now + POLL_CHECK_S;
    }
    /* Yield while the wait is young (the usual hand-over takes microseconds); after that, short
     * sleeps bound both the CPU spent and the latency added (POLL_SLEEP_S). */
    if (now - start < POLL_YIELD_S) sched_yield();
    else shm_sleep_on_wake(seg, atomic_load_explicit(&seg->hdr->wake, memory_order_acquire),
                           POLL_SLEEP_S);
  }
}
