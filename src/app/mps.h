/* mps.h — a private CUDA MPS control daemon for one job, run as the user: a fresh folder (mkdtemp,
 * 0700) holds its pipe and log directories, the daemon is our child (foreground mode, its own
 * process group), and stopping it (quit on its control pipe, a bounded wait, then signals) removes
 * the folder. Nothing on the GPU is changed: MPS needs no compute-mode setting, and processes
 * whose environment does not name the folder never see the daemon. A folder that MPS would use
 * and that the user does not own alone (another uid's, a link, writable by others) is never
 * trusted. The job holds a lock on its folder (the daemon too, by inheritance), so a folder left
 * by a job that was killed is swept by the next one. Process management only; no CUDA here (the
 * caller's probes make the CUDA calls, in children with the environment set). */
#ifndef SRC_APP_MPS_H
#define SRC_APP_MPS_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define MPS_CONTROL "nvidia-cuda-mps-control" /* the program, looked up on PATH */
#define MPS_DEFAULT_PIPE_DIR "/tmp/nvidia-mps"   /* where a daemon listens without the variable */

/* The folder's path is short anyway: the control pipe is a Unix socket (108 bytes at most). */
#define MPS_DIR_MAX 112

typedef struct {
  char dir[MPS_DIR_MAX];           /* the private folder; "" when none */
  char pipe_dir[MPS_DIR_MAX + 8];  /* CUDA_MPS_PIPE_DIRECTORY */
  char log_dir[MPS_DIR_MAX + 8];   /* CUDA_MPS_LOG_DIRECTORY */
  char control[PATH_MAX];  /* the control program's path */
  pid_t pid;               /* the control daemon (a child of this process); 0 when none */
  int lock_fd;             /* the folder, open and locked while the job lives (with dir set) */
} mps_daemon_t;

/* Whether a folder an MPS daemon uses (pipe or log directory) can be trusted: a directory, not a
 * symbolic link, of this user (effective uid) or of root (a system-wide daemon; root is trusted
 * anyway), writable by no one else. 0 trusted; 1 it does not exist; -1 refused, why says what is
 * wrong ("<what> <path> belongs to uid 1001, neither you (uid 1000) nor root"). */
int mps_dir_trusted(const char *what, const char *path, char *why, size_t len);

/* What MPS the ranks would meet with no daemon of the job's own. */
typedef enum {
  MPS_FOUND_NONE = 0, /* none: the driver runs them without MPS */
  MPS_FOUND_OWN,      /* the user's own daemon (or the system's): CUDA_MPS_PIPE_DIRECTORY
                         names a trusted folder, or one listens in the default folder, which is
                         trusted */
  MPS_FOUND_FOREIGN   /* a daemon in the default folder, which is not trusted (another user's,
                         a link, writable by others): never used; and one MPS server serves one
                         user at a time, so a daemon of the job's own would wait for that one's
                         clients. The driver connects to it by itself unless
                         CUDA_MPS_PIPE_DIRECTORY leads elsewhere */
} mps_found_t;

/* Looks at CUDA_MPS_PIPE_DIRECTORY (and CUDA_MPS_LOG_DIRECTORY), else at default_dir
 * (MPS_DEFAULT_PIPE_DIR; tests give another). 0 with *found and, unless NONE, why; -1 when the
 * environment names a folder that is not trusted or does not exist (CUDA itself would use it,
 * whatever the job decides): why says which, and what to do. */
int mps_in_effect(const char *default_dir, mps_found_t *found, char *why, size_t len);

/* The control program's path (name with a slash: as it is; else searched on PATH). 0 found. */
int mps_find_control(const char *name, char *path, size_t len);

/* Make the job's folder, without a daemon yet: under $XDG_RUNTIME_DIR, else $TMPDIR, else /tmp
 * (a base that others may write is passed over unless it is sticky, as /tmp is); folders of
 * this user's earlier jobs left there (shmddp-mps-*) that no process holds any more are removed
 * first. The folder is locked (the lock is inherited by every process forked from here). 0, or
 * -1 with err (nothing left). */
int mps_prepare(mps_daemon_t *d, char *err, size_t errlen);

/* Start a daemon: the folder (mps_prepare), then the control program `control` (a path) in
 * foreground mode; then wait until its control pipe appears (at most ready_s seconds, or until
 * it exits). On failure nothing is left (no process, no folder) and err says why. */
int mps_start(mps_daemon_t *d, const char *control, double ready_s, char *err, size_t errlen);
/* The same in the folder mps_prepare made in d. */
int mps_start_in(mps_daemon_t *d, const char *control, double ready_s, char *err, size_t errlen);

/* Put the daemon's variables in this process's environment (for the children it forks next). */
int mps_export(const mps_daemon_t *d);
/* Take them out again. */
void mps_unexport(void);

/* Run fn in a child with the daemon's environment (a prepared folder without a daemon: the
 * driver finds no daemon there, whatever listens elsewhere) and wait for it (at most timeout_s;
 * a child past it is killed). 0 when fn returned 0; else err has fn's message or what happened. */
typedef int (*mps_probe_fn)(void *arg, char *err, size_t errlen);
int mps_probe(const mps_daemon_t *d, mps_probe_fn fn, void *arg, double timeout_s, char *err,
              size_t errlen);

/* Stop the daemon (quit, a bounded wait, then SIGTERM and SIGKILL) and remove the folder. Safe
 * on a daemon that was never started or is already stopped, and on a folder without a daemon.
 * 0, or -1 with err when the daemon needed a signal or the folder could not be removed
 * entirely. The daemon gets SIGTERM from the kernel if this process dies first (the parent-death
 * signal); its folder is then left to the next job's sweep (mps_prepare). */
int mps_stop(mps_daemon_t *d, double timeout_s, char *err, size_t errlen);

#endif
