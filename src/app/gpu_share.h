/* gpu_share.h — more ranks than GPUs: rank r drives GPU r % GPUs. Before any rank starts, the
 * launcher says which ranks share a GPU and refuses a job whose ranks' planned memory does not
 * fit one GPU. */
#ifndef SRC_APP_GPU_SHARE_H
#define SRC_APP_GPU_SHARE_H

#include <stddef.h>

#include "src/app/mps.h"
#include "src/train/train_config.h"

/* 1 when some GPU gets more than one rank (cuda, one machine). */
int train_share_needed(const train_config_t *c);
/* "ranks 0, 2 share GPU 0; ranks 1, 3 share GPU 1" ("" when no GPU is shared). */
void train_share_describe(const train_config_t *c, char *buf, size_t len);
/* Builds the model once on GPU 0 in a child process (CUDA never touches this one) and compares
 * what the ranks of the busiest GPU need, each its memory plan (parameters, gradients, optimizer
 * state, planned activations, workspace) plus its CUDA context, with the GPU's free memory.
 * 0, or -1 with a message that says what to change. */
int train_share_check_memory(const train_config_t *c, char *err, size_t errlen);

/* What the MPS policy asks of the machine (NULL, or a NULL field: the real one; tests give
 * their own). */
typedef struct {
  const char *default_dir;   /* MPS's own pipe folder (MPS_DEFAULT_PIPE_DIR) */
  mps_probe_fn compute_mode; /* in a child, arg the config: 0 when the compute mode of every GPU
                                the ranks use lets a daemon of the user's serve them (Default,
                                or not known: the next check decides), else -1 with why */
  mps_probe_fn served;       /* in a child under the daemon: 0 when the driver runs a CUDA
                                context under it, else -1 with why */
} train_mps_probes_t;

/* --mps (auto, the default; --no-mps is --mps off): when ranks share a GPU and MPS can serve
 * them, start the job's private MPS daemon (mps.h), check with one CUDA call in a child that it
 * serves, and put its variables in this process's environment for the ranks forked next. MPS can
 * serve when no daemon of another user listens in the default folder, every GPU's compute mode
 * is Default, the control program is on PATH, and the daemon starts and serves; a daemon of the
 * user's own already in effect is used as it is. line gets the start line ("MPS: private daemon
 * (...)", or which MPS is used, or why none; "" when no GPU is shared). 0: go on (d->pid > 0
 * when a daemon runs: train_share_mps_stop it on every path); -1: refused, err says why and
 * nothing is left running: --mps on and no daemon could serve, or the environment names an MPS
 * folder that is not the user's alone (CUDA would use it whatever --mps says). */
int train_share_mps_start(const train_config_t *c, const train_mps_probes_t *probes,
                          mps_daemon_t *d, char *line, size_t len, char *err, size_t errlen);
/* Stop it (if one runs) and remove its folder; a message on stderr if that needed force. */
void train_share_mps_stop(mps_daemon_t *d);

#endif
