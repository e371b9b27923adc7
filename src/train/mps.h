/* mps.h — a private CUDA MPS control daemon for one job, run as the user: a fresh folder (mkdtemp,
 * 0700) holds its pipe and log directories, the daemon is our child (foreground mode, its own
 * process group), and stopping it (quit on its control pipe, a bounded wait, then signals) removes
 * the folder. Nothing on the GPU is changed: MPS needs no compute-mode setting, and processes
 * whose environment does not name the folder never see the daemon. Process management only; no
 * CUDA here (the caller's probe makes the one CUDA call, in a child with the environment set). */
#ifndef TRAIN_MPS_H
#define TRAIN_MPS_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define MPS_CONTROL "nvidia-cuda-mps-control" /* the program, looked up on PATH */

/* The folder's path is short anyway: the control pipe is a Unix socket (108 bytes at most). */
#define MPS_DIR_MAX 112

typedef struct {
  char dir[MPS_DIR_MAX];           /* the private folder; "" when none */
  char pipe_dir[MPS_DIR_MAX + 8];  /* CUDA_MPS_PIPE_DIRECTORY */
  char log_dir[MPS_DIR_MAX + 8];   /* CUDA_MPS_LOG_DIRECTORY */
  char control[PATH_MAX];  /* the control program's path */
  pid_t pid;               /* the control daemon (a child of this process); 0 when none */
} mps_daemon_t;

/* Whether MPS is already in effect for this user: CUDA_MPS_PIPE_DIRECTORY set, or a daemon's
 * control pipe at the default place. 1 with the reason in why, else 0. */
int mps_in_effect(char *why, size_t len);

/* The control program's path (name with a slash: as it is; else searched on PATH). 0 found. */
int mps_find_control(const char *name, char *path, size_t len);

/* Start a daemon: the folder under $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp; then the control
 * program `control` (a path) in foreground mode; then wait until its control pipe appears (at
 * most ready_s seconds, or until it exits). On failure nothing is left (no process, no folder)
 * and err says why. */
int mps_start(mps_daemon_t *d, const char *control, double ready_s, char *err, size_t errlen);

/* Put the daemon's variables in this process's environment (for the children it forks next). */
int mps_export(const mps_daemon_t *d);
/* Take them out again. */
void mps_unexport(void);

/* Run fn in a child with the daemon's environment and wait for it (at most timeout_s; a child
 * past it is killed). 0 when fn returned 0; else err has fn's message or what happened. */
typedef int (*mps_probe_fn)(void *arg, char *err, size_t errlen);
int mps_probe(const mps_daemon_t *d, mps_probe_fn fn, void *arg, double timeout_s, char *err,
              size_t errlen);

/* Stop the daemon (quit, a bounded wait, then SIGTERM and SIGKILL) and remove the folder. Safe
 * on a daemon that was never started or is already stopped. 0, or -1 with err when the daemon
 * needed a signal or the folder could not be removed entirely. */
int mps_stop(mps_daemon_t *d, double timeout_s, char *err, size_t errlen);

#endif
