/* loop_dp.h — `train --mode dp`: the training loop's DataParallel engine (loop_dp.c) over the
 * replicas of src/parallel/dp.c, in the launcher's own process (no ranks are forked: one process
 * drives every device). */
#ifndef SRC_TRAIN_LOOP_DP_H
#define SRC_TRAIN_LOOP_DP_H

#include <stddef.h>

#include "src/train/job.h"
#include "src/train/loop.h"

/* The engine, ready to train. */
int engine_dp_create(engine_t **out, const train_job_t *job, char *err, size_t errlen);

/* The whole run, by the same loop as train_run (loop.c): the same steps, data,
 * schedule, checkpoints, logs (log.jsonl, summary.json, the result line), and in --out also
 * dp_devices.json: per device its memory ledger and its mean step split (compute,
 * communication, idle, in ms). Step t's global batch is the concatenation of what DDP rank r
 * would train on at step t, in rank order, so a DP run and a DDP run without SyncBN see the same
 * images in the same chunks. Returns 0, or -1 with a message. */
int dp_train_run(const train_job_t *job, train_result_t *res, char *err, size_t errlen);

#endif
