/* check.h — the library's one family of check macros (shm/, collectives/, nccl/).
 *
 * The library's error model: a function that can fail returns a status in which 0 is success
 * (shmddp_status_t's SHMDDP_OK; the NCCL front end's ncclSuccess), after recording its message
 * where its layer keeps messages (the group's abort word, the communicator's last error, the
 * caller's buffer). Callers pass the status up unchanged:
 *   TRY(call)                  propagate: return the failed call's status
 * A call from outside the library (the CUDA runtime, a kernel launcher) reports failure as its
 * own non-zero code; it becomes a status where it is met:
 *   TRY_AS(fail, ctx, call)    when call returns non-zero e, return fail(ctx, e, "the call")
 * where fail records the message and returns the status (e.g. cuda_failed in
 * collectives/cuda/cuda_state.h). The trainer (src/) has its own model: src/check.h. */
#ifndef SHM_CHECK_H
#define SHM_CHECK_H

#define TRY(call)                                                                                  \
  do {                                                                                             \
    __typeof__(call) st_ = (call);                                                                 \
    if (st_ != 0) return st_;                                                                      \
  } while (0)

#define TRY_AS(fail, ctx, call)                                                                    \
  do {                                                                                             \
    __typeof__(call) e_ = (call);                                                                  \
    if (e_ != 0) return fail((ctx), e_, #call);                                                    \
  } while (0)

#endif
