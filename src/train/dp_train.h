/* dp_train.h — `train --mode dp`: the training run of DataParallel mode, in the launcher's own
 * process (no ranks are forked: one process drives every device). */
#ifndef SRC_TRAIN_DP_TRAIN_H
#define SRC_TRAIN_DP_TRAIN_H

#include <stddef.h>

#include "src/train/train.h"

/* The whole run, by the same loop as train_run (src/train/loop.c): the same steps, data,
 * schedule, checkpoints, logs (log.jsonl, summary.json, the result line), and in --out also
 * dp_devices.json: per device its memory ledger and its mean step split (compute,
 * communication, idle, in ms). Step t's global batch is the concatenation of what DDP rank r
 * would train on at step t, in rank order, so a DP run and a DDP run without SyncBN see the same
 * images in the same chunks. Returns 0, or -1 with a message. */
int dp_train_run(const train_job_t *job, train_result_t *res, char *err, size_t errlen);

#endif
