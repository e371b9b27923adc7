/* launcher.h — fork the ranks of a group (before any CUDA call) and supervise them. */
#ifndef SHM_LAUNCHER_H
#define SHM_LAUNCHER_H

#include "shm/segment.h"

/* After SIGINT/SIGTERM, how long ranks get to stop at a step boundary (and checkpoint) before
 * they are killed, unless the launch or SHMDDP_STOP_GRACE says otherwise. */
#define SHM_DEFAULT_STOP_GRACE_S 30.0

typedef struct {
  int nranks;
  size_t slot_bytes;
  double timeout_s;    /* any single wait */
  double grace_s;      /* after a failure, time the survivors get before SIGKILL */
  double stop_grace_s; /* after SIGINT/SIGTERM, time the ranks get to stop cleanly */
  const char *label;
  int quiet;
} shm_launch_opts_t;

/* Runs in each forked rank; its return value is the rank's exit status. */
typedef int (*shm_rank_main)(shm_segment_t *seg, int rank, void *arg);

/* Creates the segment, forks opts->nranks ranks running fn, supervises them and tears down.
 * SHMDDP_OK means the ranks ran: res->exit_code says how it went. Fills every field of res. */
shmddp_status_t shm_launch(const shm_launch_opts_t *opts, shm_rank_main fn, void *arg,
                           shmddp_launch_result_t *res);

/* Inside a rank: the signal the launcher forwarded (SIGINT/SIGTERM), or 0. */
int shm_stop_requested(const shm_segment_t *seg);

#endif
