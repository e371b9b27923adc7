/* abort.h — the group's abort word: the first failure is recorded once (status, blamed rank,
 * message) and every wait loop of every rank sees it and returns that status. */
#ifndef SHM_ABORT_H
#define SHM_ABORT_H

#include "shm/segment.h"

/* Record a failure unless one is already recorded, then wake every waiter. Returns 1 if this
 * call recorded it. status must not be SHMDDP_OK. */
int shm_abort(shm_segment_t *seg, shmddp_status_t status, int blamed_rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* SHMDDP_OK, or the recorded status; copies the message into msg. */
shmddp_status_t shm_abort_status(const shm_segment_t *seg, char *msg, size_t msglen);

#endif
