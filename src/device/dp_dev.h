/* dp_dev.h — what DataParallel needs from its devices besides the models: making one current,
 * copies between devices (peer copies on GPUs, memcpy between CPU "devices"), events that order
 * one device's stream after another's and time what ran between them, and the gradient sum.
 * On CPU devices every call runs at once in the calling thread and an event is a host time. */
#ifndef SRC_DEVICE_DP_DEV_H
#define SRC_DEVICE_DP_DEV_H

#include <stddef.h>

#define DP_DEV_HOST (-1) /* a device number: host memory (the CPU "devices", pinned buffers) */

typedef struct dp_event dp_event_t;

/* Make CUDA device `dev` current for the calling thread (no-op for DP_DEV_HOST): kernels are
 * launched, events created and memory allocated on the current device. */
int dp_dev_select(int dev, char *err, size_t errlen);

/* Let device 0 and every other device of devs[0..n) read each other's memory where the
 * hardware allows; *direct (may be NULL) gets 1 if every pair has direct peer access. Copies
 * work either way (the driver stages through the host where P2P is missing). */
int dp_dev_enable_peers(const int *devs, int n, int *direct, char *err, size_t errlen);

/* bytes from src (on src_dev) to dst (on dst_dev), queued on stream (the stream of one of the
 * two devices; NULL on the CPU, where it is a memcpy). */
int dp_dev_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, void *stream,
                char *err, size_t errlen);

/* An event of device dev (made current by the caller). */
int dp_event_create(dp_event_t **out, int dev, char *err, size_t errlen);
void dp_event_destroy(dp_event_t *e);
/* Record e on stream (a stream of e's device); on the CPU: now. */
int dp_event_record(dp_event_t *e, void *stream, char *err, size_t errlen);
/* Work queued on stream after this call starts once e has completed (any device's stream). */
int dp_event_wait(void *stream, dp_event_t *e, char *err, size_t errlen);
/* Milliseconds from a to b, both recorded on one device and completed. */
double dp_event_ms(const dp_event_t *a, const dp_event_t *b);

/* Wait until everything queued on stream has run (no-op on the CPU). */
int dp_dev_sync(void *stream, char *err, size_t errlen);

/* dst[i] = srcs[0][i] + ... + srcs[nsrc-1][i] (f32, summed in that order, rounded once) on
 * stream; dst may alias srcs[0]; 1 <= nsrc <= 8. The sources live on dst's device. */
int dp_dev_sum_f32(float *dst, const float *const *srcs, int nsrc, size_t n, int dev,
                   void *stream, char *err, size_t errlen);

#endif
