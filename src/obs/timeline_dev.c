/* timeline_dev.c — device events as the timeline's clock. The elapsed time between the window's
 * anchor and an event gives device time with ~0.5 us resolution (CUDA events); adding the host
 * time at which the anchor completed puts it on the monotonic clock the host spans (and the other
 * ranks) use. The anchor is taken by spinning on its completion, so its error is the spin's
 * latency, a few us. */
#include "config.h"

#include "src/clock.h"
#include "src/obs/timeline_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "src/check.h"
#include "src/device/device.h"

struct timeline_dev {
  dev_event_t **ev;
  size_t n;
  dev_event_t *anchor;
  double anchor_us;
};

int timeline_dev_create(timeline_dev_t **out, int dev, size_t nevents, char *err, size_t errlen)
{
  *out = NULL;
  timeline_dev_t *t = calloc(1, sizeof *t);
  if (!t || !(t->ev = calloc(nevents, sizeof *t->ev))) {
    free(t);
    return check_fail(err, errlen, "timeline: out of memory for %zu device events", nevents);
  }
  int rc = dev_event_create(&t->anchor, dev, DEV_EVENT_TIMING, err, errlen);
  for (size_t i = 0; rc == 0 && i < nevents; i++, t->n++)
    rc = dev_event_create(&t->ev[i], dev, DEV_EVENT_TIMING, err, errlen);
  if (rc != 0) {
    timeline_dev_destroy(t);
    return check_prefix(err, errlen, "timeline: creating device events");
  }
  *out = t;
  return 0;
}

void timeline_dev_destroy(timeline_dev_t *t)
{
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) dev_event_destroy(t->ev[i]);
  dev_event_destroy(t->anchor);
  free(t->ev);
  free(t);
}

int timeline_dev_anchor(timeline_dev_t *t, void *stream, char *err, size_t errlen)
{
  int rc = dev_event_record(t->anchor, stream, err, errlen), done = 0;
  if (rc == 0)
    while ((done = dev_event_done(t->anchor)) == 0) {
    }
  t->anchor_us = clock_us();
  if (rc != 0) return check_prefix(err, errlen, "timeline: anchoring device events");
  if (done < 0) return check_fail(err, errlen, "timeline: anchoring device events failed");
  return 0;
}

int timeline_dev_record(timeline_dev_t *t, size_t slot, void *stream)
{
  char err[8];
  return dev_event_record(t->ev[slot % t->n], stream, err, sizeof err);
}

int timeline_dev_time_us(timeline_dev_t *t, size_t slot, double *us)
{
  dev_event_t *e = t->ev[slot % t->n];
  char err[8];
  double ms = 0;
  if (dev_event_sync(e, err, sizeof err) != 0 || dev_event_elapsed(t->anchor, e, &ms) != 0)
    return -1;
  *us = t->anchor_us + 1e3 * ms;
  return 0;
}
