/* world_mpi.h — a world over several machines: the MPI processes of a job (mpirun), grouped
 * into nodes; inside a node they form a shmddp group (joined by a unique id that the node's
 * first rank makes and broadcasts over MPI), between nodes the ranks of one local rank talk over
 * MPI. Collectives are hierarchical: reduce-scatter inside the node (shmddp), all-reduce of each
 * rank's shard across the nodes (inter.h), all-gather inside the node. Gradient buckets run on
 * a progress thread, so backward goes on meanwhile (MPI_THREAD_MULTIPLE; without it they run
 * when started). A job of one node is the one-machine world over the joined group.
 * Needs MPI (built with --with-mpi only); MPI_Init_thread is the program's, before. */
#ifndef SRC_WORLD_WORLD_MPI_H
#define SRC_WORLD_WORLD_MPI_H

#include <stddef.h>

#include "src/world/world.h"

typedef struct {
  int ranks_per_node; /* group ranks r/K into nodes of K; 0: the ranks that share a host */
  int gpus;           /* GPUs visible on each node: the rank drives GPU local rank % gpus; 0:
                         CPU ranks */
  double timeout_s;   /* how long a shmddp wait may last (0: SHMDDP_TIMEOUT or 300 s) */
} world_mpi_config_t;

typedef struct {
  int rank, size;          /* MPI_COMM_WORLD's */
  int node, nodes;         /* this rank's node, and how many */
  int local, per_node;     /* its rank in the node, and the ranks of each node */
  int device;              /* its GPU, or -1 */
  int cuda_aware;          /* MPI takes device buffers (MPIX_Query_cuda_support) */
  int threaded;            /* buckets on a progress thread (MPI_THREAD_MULTIPLE) */
  char host[64];           /* this rank's host name */
  char library[128];       /* the MPI library, first line of MPI_Get_library_version */
} world_mpi_info_t;

/* Collective over MPI_COMM_WORLD. *info (may be NULL) is filled as soon as the grouping is
 * known, also when a later step fails. */
int world_mpi_create(world_t **out, const world_mpi_config_t *cfg, world_mpi_info_t *info,
                     char *err, size_t errlen);

/* One line for the log: "2 nodes x 2 ranks over MPI (Open MPI v4.1.4; staged through pinned
 * host memory)". */
void world_mpi_describe(const world_mpi_info_t *info, int on_gpu, char *buf, size_t len);

#endif
