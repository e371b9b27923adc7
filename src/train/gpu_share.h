/* gpu_share.h — more ranks than GPUs: rank r drives GPU r % GPUs. Before any rank starts, the
 * launcher says which ranks share a GPU and refuses a job whose ranks' planned memory does not
 * fit one GPU. */
#ifndef SRC_TRAIN_GPU_SHARE_H
#define SRC_TRAIN_GPU_SHARE_H

#include <stddef.h>

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

#endif
