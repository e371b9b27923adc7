/* main.c — the `train` program: parse and validate every setting, open the datasets and the
 * output folder, then fork one rank per device (before anything touches CUDA) and exit with the
 * group's status. Under mpirun every process is one rank instead (mpi_main.c). Exit status 2:
 * bad flags or data, nothing was started. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "shm/env.h"
#include "shmddp.h"
#include "src/app/gpu_share.h"
#include "src/app/job_open.h"
#include "src/app/mpi_main.h"
#include "src/app/options.h"
#include "src/app/relaunch.h"
#include "src/train/loop_ddp.h"
#include "src/train/loop_dp.h"

static volatile sig_atomic_t stop_signal; /* SIGINT/SIGTERM before the launcher took them */

static void note_stop(int sig) { stop_signal = sig; }

/* While the job's MPS daemon runs, SIGINT and SIGTERM outside the launcher (which takes them
 * itself while the ranks run) are only noted, so the daemon is stopped before this process
 * exits. A signal inherited as ignored stays ignored (see shm/launcher.c). */
static void note_stop_signals(void)
{
  const int sigs[] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    struct sigaction sa;
    if (sigaction(sigs[i], NULL, &sa) == 0 && !(sa.sa_flags & SA_SIGINFO) &&
        sa.sa_handler == SIG_IGN)
      continue;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = note_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

/* Ranks that share a GPU: the MPS daemon (--mps), the memory check and the start lines. 0: go on
 * (mps set up, running or not); -1: refused, the message printed, nothing left running. */
static int share_start(const train_config_t *cfg, mps_daemon_t *mps)
{
  char err[1024], line[1024];
  memset(mps, 0, sizeof *mps);
  if (!train_share_needed(cfg)) return 0;
  if (cfg->mps != TRAIN_MPS_OFF) note_stop_signals();
  if (train_share_mps_start(cfg, NULL, mps, line, sizeof line, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    return -1;
  }
  if (train_share_check_memory(cfg, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    train_share_mps_stop(mps);
    return -1;
  }
  char share[256];
  train_share_describe(cfg, share, sizeof share);
  printf("train: %d ranks on %d GPU%s: %s\n", cfg->nproc, cfg->gpus, cfg->gpus == 1 ? "" : "s",
         share);
  printf("train: %s\n", line);
  return 0;
}

int main(int argc, char **argv)
{
  train_machine_t machine;
  train_machine_probe(&machine);
  train_config_t cfg;
  char err[1024];
  int rc = train_config_parse(&cfg, argc, argv, &machine, stdout, err, sizeof err);
  if (rc == 1) return 0; /* --help */
  if (rc != 0) {
    fprintf(stderr, "train: %s\n", err);
    return 2;
  }
  if (shm_env_check_environ(environ, "train", stderr, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    return 2;
  }
  if (machine.mpi_ranks > 0) return train_mpi_main(&cfg, &machine, &argc, &argv);
  train_job_t job;
  if (train_job_open(&job, &cfg, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    return 2;
  }
  job.program = argv[0];
  if (job.swept)
    printf("train: removed %zu temporary file%s a killed run left in %s\n", job.swept,
           job.swept == 1 ? "" : "s", cfg.out_dir);
  if (cfg.mode == TRAIN_MODE_DP) { /* one process drives every device: nothing is forked */
    train_result_t dres;
    rc = train_job_claim(&job, stdout, err, sizeof err);
    if (rc != 0) {
      fprintf(stderr, "train: %s\n", err);
      train_job_close(&job);
      return 2;
    }
    rc = dp_train_run(&job, &dres, err, sizeof err);
    train_job_close(&job);
    if (rc != 0) fprintf(stderr, "train: %s\n", err);
    return rc != 0;
  }
  mps_daemon_t mps;
  if (share_start(&cfg, &mps) != 0) {
    train_job_close(&job);
    return 2;
  }
  /* Every check passed: the run's folder is made (or the run it replaces removed) now. */
  if (train_job_claim(&job, stdout, err, sizeof err) != 0) {
    fprintf(stderr, "train: %s\n", err);
    train_share_mps_stop(&mps);
    train_job_close(&job);
    return 2;
  }
  shmddp_launch_config_t lc;
  train_launch_config(&cfg, &lc);
  shmddp_launch_result_t res;
  shmddp_status_t st = SHMDDP_OK;
  int early = stop_signal; /* a stop before the launcher took the signals: no rank started */
  if (!early) st = train_relaunch(&job, &lc, &res);
  train_share_mps_stop(&mps);
  train_job_close(&job);
  if (early) {
    fprintf(stderr, "train: stopped by %s before the ranks started\n", strsignal(early));
    return 128 + early;
  }
  if (st != SHMDDP_OK) {
    fprintf(stderr, "train: %s\n", res.message);
    return 1;
  }
  return res.exit_code;
}
