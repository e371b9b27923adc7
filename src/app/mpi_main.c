/* mpi_main.c — one MPI rank of shmddp-train (see mpi_main.h). Only this file and world_mpi.c
 * call MPI; a build without MPI gets the version at the end, which refuses and says how to get MPI.
 *
 * Failures: a rank whose training fails prints why, marks its node's shmddp group failed (its
 * node's ranks stop at once) and calls MPI_Abort, which makes mpirun end every rank on every
 * node. A rank that dies without a word (SIGKILL, a crash) is seen by mpirun itself: Open MPI's
 * default is to end the whole job when any process exits abnormally ("mpirun noticed that
 * process rank R ... on node H exited on signal 9"), and the dead rank's node peers say so too
 * (shmddp's liveness: "rank l (pid P) was killed by signal 9"). */
#include "config.h"

#include "src/app/mpi_main.h"

#include <stdio.h>

#ifdef HAVE_MPI
#include <mpi.h>

#include "src/app/job_open.h"
#include "src/train/loop_ddp.h"
#include "src/world/world_mpi.h"

static void say(const world_mpi_info_t *in, const char *err)
{
  if (in->nodes > 0)
    fprintf(stderr, "train: rank %d (node %d of %d, local rank %d, host %s): %s\n", in->rank,
            in->node, in->nodes, in->local, in->host, err);
  else
    fprintf(stderr, "train: rank %d (host %s): %s\n", in->rank, in->host, err);
  fflush(stderr);
}

int train_mpi_main(const train_config_t *cfg, const train_machine_t *m, int *argc, char ***argv)
{
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "train: MPI_Init_thread failed\n");
    return 1;
  }
  world_mpi_config_t wc = {
      .ranks_per_node = cfg->ranks_per_node,
      .gpus = cfg->device == MODEL_DEVICE_CUDA ? m->visible_gpus : 0,
      .timeout_s = cfg->timeout_s};
  world_mpi_info_t info;
  world_t *w = NULL;
  char err[1024] = "";
  if (world_mpi_create(&w, &wc, &info, err, sizeof err) != 0) {
    say(&info, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  /* The job (datasets, output folder): the same checks as without MPI. Every rank opens its
   * own; the lowest failing rank says why, and every rank exits 2. */
  train_job_t job;
  int failed = train_job_open(&job, cfg, err, sizeof err) != 0 ? info.rank : info.size;
  int first = failed;
  MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first < info.size) {
    if (first == info.rank) say(&info, err);
    if (failed == info.size) train_job_close(&job);
    world_destroy(w);
    MPI_Finalize();
    return 2;
  }
  /* World rank 0 writes --out: it makes the run's folder (the others learn its name), or
   * removes the run --overwrite replaces. */
  int claimed = info.rank == 0 ? train_job_claim(&job, stdout, err, sizeof err) : 0;
  MPI_Bcast(&claimed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(job.cfg.out_dir, (int)sizeof job.cfg.out_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  MPI_Bcast(job.run_id, (int)sizeof job.run_id, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (claimed != 0) {
    if (info.rank == 0) say(&info, err);
    train_job_close(&job);
    world_destroy(w);
    MPI_Finalize();
    return 2;
  }
  job.program = (*argv)[0];
  char desc[256];
  world_mpi_describe(&info, cfg->device == MODEL_DEVICE_CUDA, desc, sizeof desc);
  job.world_desc = desc;
  fflush(stdout);
  train_result_t res;
  if (train_run_world(w, &job, &res, err, sizeof err) != 0) {
    say(&info, err);
    world_abort(w, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  world_destroy(w);
  train_job_close(&job);
  MPI_Finalize();
  return 0;
}

#else

int train_mpi_main(const train_config_t *cfg, const train_machine_t *m, int *argc, char ***argv)
{
  (void)cfg;
  (void)m;
  (void)argc;
  (void)argv;
  fprintf(stderr, "train: started by mpirun, but this shmddp-train was built without MPI: "
                  "reconfigure with --with-mpi (Open MPI installed)\n");
  return 2;
}

#endif
