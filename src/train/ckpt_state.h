/* ckpt_state.h — the training state a checkpoint holds (weights, BatchNorm statistics,
 * optimizer state, loss scaler, position in the data) and how the loop saves and restores it.
 * Resuming continues bit for bit: batches are a pure function of (seed, epoch, position), so
 * the position is all the data pipeline needs. */
#ifndef SRC_TRAIN_CKPT_STATE_H
#define SRC_TRAIN_CKPT_STATE_H

#include <stddef.h>

#include "src/model/amp.h"
#include "src/model/model.h"
#include "src/model/optim.h"
#include "src/train/ckpt_run.h"

typedef struct {
  long step;          /* optimizer steps done */
  long epoch;         /* the epoch in progress */
  long batches_taken; /* batches of that epoch already trained */
  double epoch_loss;  /* sum of this epoch's step losses so far (for the reported mean) */
  long epoch_steps;
  double initial_loss;
} train_progress_t;

/* Write path atomically. run_key: the settings a resumed run must share (see
 * ckpt_state_run_key); run: the run's record (ckpt_run.h), or NULL for none. Device buffers are
 * staged through host memory. */
int ckpt_state_save(const char *path, const char *run_key, const ckpt_run_t *run, model_t *m,
                    optim_t *o, const amp_scaler_t *s, const train_progress_t *p, char *err,
                    size_t errlen);

/* Restore everything ckpt_state_save wrote; refuses a checkpoint of another configuration,
 * naming the setting that differs. */
int ckpt_state_load(const char *path, const char *run_key, model_t *m, optim_t *o,
                    amp_scaler_t *s, train_progress_t *p, char *err, size_t errlen);

/* Before the ranks start: read and verify path, compare its settings with run_key (the message
 * names the first that differs), and give the step it was written at, its settings line (stored,
 * as written) and its run record (run->id "" for a checkpoint written before runs had one). */
int ckpt_state_check(const char *path, const char *run_key, long *step, char *stored,
                     size_t stored_len, ckpt_run_t *run, char *err, size_t errlen);

/* The settings line minus those a resumed run may change (workers, validation size, and the
 * length: epochs and steps). */
void ckpt_state_run_key(const char *describe, char *key, size_t len);

#endif
