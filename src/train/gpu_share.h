/* gpu_share.h — more ranks than GPUs: rank r drives GPU r % GPUs. Before any rank starts, the
 * launcher says which ranks share a GPU and refuses a job whose ranks' planned memory does not
 * fit one GPU. */
#ifndef SRC_TRAIN_GPU_SHARE_H
#define SRC_TRAIN_GPU_SHARE_H

#include <stddef.h>

#include "src/train/mps.h"
#include "src/train/options.h"

/* 1 when some GPU gets more than one rank (cuda, one machine). */
int train_share_needed(const train_config_t *c);
/* "ranks 0, 2 share GPU 0; ranks 1, 3 share GPU 1" ("" when no GPU is shared). */
void train_share_describe(const train_config_t *c, char *buf, size_t len);
/* Builds the model once on GPU 0 in a child process (CUDA never touches this one) and compares
 * what the ranks of the busiest GPU need, each its memory plan (parameters, gradients, optimizer
 * state, planned activations, workspace) plus its CUDA context, with the GPU's free memory.
 * 0, or -1 with a message that says what to change. */
int train_share_check_memory(const train_config_t *c, char *err, size_t errlen);

/* --mps: when ranks share a GPU, start the job's private MPS daemon (mps.h), check with one CUDA
 * call in a child that it serves, and put its variables in this process's environment for the
 * ranks forked next. line gets the start line ("MPS: private daemon (...)" or why not; "" when
 * no GPU is shared). 0: go on (d->pid > 0 when a daemon runs: train_share_mps_stop it on every
 * path); -1: --mps on and no daemon could serve (err says why; nothing is left running). */
int train_share_mps_start(const train_config_t *c, mps_daemon_t *d, char *line, size_t len,
                          char *err, size_t errlen);
/* Stop it (if one runs) and remove its folder; a message on stderr if that needed force. */
void train_share_mps_stop(mps_daemon_t *d);

#endif
