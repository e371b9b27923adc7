/* barrier.h — a barrier over all ranks of the segment, with a timeout naming the absent ranks. */
#ifndef SHM_BARRIER_H
#define SHM_BARRIER_H

#include "shm/segment.h"

shmddp_status_t shm_barrier(shm_segment_t *seg, int self, double timeout_s, char *err,
                            size_t errlen);

#endif
