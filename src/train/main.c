/* main.c — the `train` program: parse and validate every setting, open the datasets and the
 * output folder, then fork one rank per device (before anything touches CUDA) and exit with the
 * group's status. Under mpirun every process is one rank instead (mpi_main.c). Exit status 2:
 * bad flags or data, nothing was started. */
#include "config.h"

#include <stdio.h>
#include <unistd.h>

#include "shm/env.h"
#include "shmddp.h"
#include "src/train/job.h"
#include "src/train/loop_ddp.h"
#include "src/train/loop_dp.h"
#include "src/train/mpi_main.h"
#include "src/train/gpu_share.h"

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
  if (cfg.mode == TRAIN_MODE_DP) { /* one process drives every device: nothing is forked */
    train_result_t dres;
    rc = dp_train_run(&job, &dres, err, sizeof err);
    train_job_close(&job);
    if (rc != 0) fprintf(stderr, "train: %s\n", err);
    return rc != 0;
  }
  if (train_share_needed(&cfg)) {
    char share[256];
    if (train_share_check_memory(&cfg, err, sizeof err) != 0) {
      fprintf(stderr, "train: %s\n", err);
      train_job_close(&job);
      return 2;
    }
    train_share_describe(&cfg, share, sizeof share);
    printf("train: %d ranks on %d GPU%s: %s\n", cfg.nproc, cfg.gpus, cfg.gpus == 1 ? "" : "s",
           share);
  }
  shmddp_launch_config_t lc = {.nproc = cfg.nproc,
                               .timeout_s = cfg.timeout_s,
                               .use_gpus = cfg.device == MODEL_DEVICE_CUDA,
                               .bind_numa = cfg.device == MODEL_DEVICE_CUDA,
                               .label = "train"};
  shmddp_launch_result_t res;
  fflush(stdout); /* the ranks inherit stdio buffers: nothing may be pending at fork */
  shmddp_status_t st = shmddp_launch(&lc, train_rank, &job, &res);
  train_job_close(&job);
  if (st != SHMDDP_OK) {
    fprintf(stderr, "train: %s\n", res.message);
    return 1;
  }
  return res.exit_code;
}
