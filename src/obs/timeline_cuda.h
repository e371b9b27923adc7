/* timeline_cuda.h — the timeline's device clock (CUDA build): a fixed pool of timing events
 * recorded on the spans' streams, converted to the host's monotonic clock through one anchor
 * event per recording window. */
#ifndef SRC_OBS_TIMELINE_CUDA_H
#define SRC_OBS_TIMELINE_CUDA_H

#include <stddef.h>

typedef struct timeline_cuda timeline_cuda_t;

/* nevents timing events on the current device (created here, outside the hot path). */
int timeline_cuda_create(timeline_cuda_t **out, size_t nevents, char *err, size_t errlen);
void timeline_cuda_destroy(timeline_cuda_t *t);
/* Records the anchor on stream and waits for it: event times are measured from it and placed
 * at the host time it completed (a one-off wait at the start of a window). */
int timeline_cuda_anchor(timeline_cuda_t *t, void *stream, char *err, size_t errlen);
/* Records event `slot` (mod nevents) on stream; 0 or -1. Asynchronous. */
int timeline_cuda_record(timeline_cuda_t *t, size_t slot, void *stream);
/* The host-clock time in microseconds at which event `slot` completed; waits for it (callers
 * ask only for events of finished steps, so it returns at once). */
int timeline_cuda_time_us(timeline_cuda_t *t, size_t slot, double *us);

#endif
