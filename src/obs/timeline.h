/* timeline.h — a per-rank trace of training steps in the Chrome trace / Perfetto JSON format
 * (--timeline N): forward, backward, each gradient bucket's all-reduce, SyncBN exchanges, the
 * optimizer, data waits, so overlap of communication and compute is visible.
 *
 * Spans given a stream are timed by CUDA events recorded on that stream, read a step later when
 * they are long done (no synchronisation per span); spans without a stream (CPU ranks, host
 * work) are timed by the host's monotonic clock, which every rank on the machine shares, so the
 * per-rank files line up on one time axis. The state is process-wide (one rank per process), so
 * the model and the DDP engine record spans without a handle being threaded through them; when
 * no window is recording, timeline_begin is one load and a branch. Not thread-safe: spans come
 * from the rank's main thread. */
#ifndef SRC_OBS_TIMELINE_H
#define SRC_OBS_TIMELINE_H

#include <stddef.h>

typedef enum {
  TIMELINE_STEP = 0,   /* host: one optimizer step, from its first batch to its optimizer */
  TIMELINE_DATA_WAIT,  /* host: waiting for the loader's next batch */
  TIMELINE_UPLOAD,     /* compute stream: the batch copied to the device */
  TIMELINE_FORWARD,    /* compute stream: forward and the loss */
  TIMELINE_BACKWARD,   /* compute stream */
  TIMELINE_SYNCBN,     /* compute stream: one SyncBN statistics exchange (args: count) */
  TIMELINE_ALLREDUCE,  /* communication stream: one gradient bucket (args: bucket, bytes) */
  TIMELINE_GRAD_WAIT,  /* compute stream: waiting for buckets after backward (exposed comm) */
  TIMELINE_OPTIMIZER,  /* compute stream */
  TIMELINE_AGREE,      /* host: the per-step agreement (loss, skip, stop) across ranks */
  TIMELINE_NUM_KINDS
} timeline_kind_t;

typedef struct {
  const char *dir;          /* timeline-rank<rank>.json is written here */
  int rank, world;
  const char *device_label; /* "cpu0", "cuda:1": shown as the process name */
  int cuda_device;          /* >= 0: spans with a stream are timed by CUDA events */
  void *stream;             /* the compute stream (a cudaStream_t): anchors event times */
  long first_step, steps;   /* record optimizer steps first_step .. first_step + steps - 1 */
} timeline_config_t;

/* Sets up a recording window (nothing is recorded before timeline_step reaches first_step).
 * steps <= 0: the timeline stays off and every call is a no-op. */
int timeline_open(const timeline_config_t *cfg, char *err, size_t errlen);
/* The loop starts optimizer step `step` (1-based, increasing). Starts recording at first_step,
 * reads the events of steps that are surely finished, and writes the file when the window is
 * over. Returns -1 with a message when the file cannot be written. */
int timeline_step(long step, char *err, size_t errlen);
/* Writes the file if a window was recording, and frees everything. */
int timeline_close(char *err, size_t errlen);
/* Path of the file written (or to be written), "" when off. */
const char *timeline_path(void);

/* Span recording. begin returns a handle (-1 when not recording); end takes it and the same
 * stream. args attach numbers shown in the viewer (their names depend on the kind). */
extern int timeline_recording_;
int timeline_begin_(timeline_kind_t kind, void *stream);
void timeline_end_(int span, void *stream);
void timeline_args_(int span, double a0, double a1);

static inline int timeline_begin(timeline_kind_t kind, void *stream)
{
  return timeline_recording_ ? timeline_begin_(kind, stream) : -1;
}
static inline void timeline_end(int span, void *stream)
{
  if (span >= 0) timeline_end_(span, stream);
}
/* Ends span and begins the next phase on the same stream (forward -> backward). */
static inline int timeline_next(int span, timeline_kind_t kind, void *stream)
{
  timeline_end(span, stream);
  return timeline_begin(kind, stream);
}
static inline void timeline_args(int span, double a0, double a1)
{
  if (span >= 0) timeline_args_(span, a0, a1);
}

#endif
