/* mpi_main.h — shmddp-train started by mpirun: every MPI process is one rank, the ranks of a
 * node train as a shmddp group and the nodes talk over MPI (src/world/world_mpi.h). */
#ifndef SRC_APP_MPI_MAIN_H
#define SRC_APP_MPI_MAIN_H

#include "src/app/options.h"

/* The whole program of one MPI rank after its configuration was parsed and checked: MPI_Init,
 * the world, the job, the training, MPI_Finalize. Returns the exit status (2: the job could not
 * start; the program exits with it). A rank that fails ends the whole job with MPI_Abort after
 * saying why on stderr (its world rank, node and host). */
int train_mpi_main(const train_config_t *cfg, const train_machine_t *machine, int *argc,
                   char ***argv);

#endif
