/* timeline_dev.h — the timeline's device clock: a fixed pool of timing events recorded on the
 * spans' streams, converted to the host's monotonic clock through one anchor event per recording
 * window. */
#ifndef SRC_OBS_TIMELINE_DEV_H
#define SRC_OBS_TIMELINE_DEV_H

#include <stddef.h>

typedef struct timeline_dev timeline_dev_t;

/* nevents timing events on device dev (current; created here, outside the hot path). */
int timeline_dev_create(timeline_dev_t **out, int dev, size_t nevents, char *err, size_t errlen);
void timeline_dev_destroy(timeline_dev_t *t);
/* Records the anchor on stream and waits for it: event times are measured from it and placed
 * at the host time it completed (a one-off wait at the start of a window). */
int timeline_dev_anchor(timeline_dev_t *t, void *stream, char *err, size_t errlen);
/* Records event `slot` (mod nevents) on stream; 0 or -1. Asynchronous. */
int timeline_dev_record(timeline_dev_t *t, size_t slot, void *stream);
/* The host-clock time in microseconds at which event `slot` completed; waits for it (callers
 * ask only for events of finished steps, so it returns at once). */
int timeline_dev_time_us(timeline_dev_t *t, size_t slot, double *us);

#endif
