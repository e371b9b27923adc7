/* inter.h — the all-reduce between nodes: over an MPI communicator that holds one rank per node
 * (those of one local rank), with an order of reduction this file fixes rather than MPI, so every
 * rank gets the same bits and a rerun gives them again. Host buffers go to MPI directly; device
 * buffers too where MPI is CUDA-aware, else through pinned host buffers, pipelined: piece k+1
 * comes down from the GPU while piece k crosses the network and piece k-1 goes back up.
 * Needs MPI (built with --with-mpi only). */
#ifndef SRC_WORLD_INTER_H
#define SRC_WORLD_INTER_H

#include <stddef.h>

#include <mpi.h>

#include "shmddp.h"

typedef struct inter inter_t;

typedef struct {
  MPI_Comm comm;     /* one rank per node, in node order (not owned) */
  int dev;           /* where the buffers are: DEV_HOST or a GPU */
  int cuda_aware;    /* MPI takes device pointers (MPIX_Query_cuda_support) */
  size_t piece_bytes; /* the pipeline's unit; 0: 4 MiB */
} inter_config_t;

int inter_create(inter_t **out, const inter_config_t *cfg, char *err, size_t errlen);
void inter_destroy(inter_t *x);

/* buf (count elements on cfg->dev) reduced over the nodes, in place. On a device the data is read
 * after the work queued on stream so far, and the result is written by work queued on stream
 * (later work on stream sees it).
 *
 * The order: a buffer is cut into as many chunks as there are nodes; chunk c starts at node c
 * and is combined with each next node's in ring order (c, c+1, ..., c-1), then passed around
 * whole (a ring reduce-scatter and all-gather over MPI_Sendrecv). Buffers of at most 32 KiB (or
 * fewer elements than nodes) are gathered whole and reduced in node order (0, 1, ..., M-1). AVG
 * sums and divides once, by the number of nodes. */
int inter_all_reduce(inter_t *x, void *buf, size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                     void *stream, char *err, size_t errlen);

/* bytes at buf (on cfg->dev) from node root to every node, finished when it returns. */
int inter_broadcast(inter_t *x, void *buf, size_t bytes, int root, char *err, size_t errlen);

/* The message of an MPI error code, with what failed: returns -1 (src/check.h). */
int inter_mpi_fail(int code, const char *what, char *err, size_t errlen);

/* The check macro of MPI calls (src/check.h's model; expects err and errlen in scope): an MPI
 * call that does not return MPI_SUCCESS returns -1 with "WHAT failed: <MPI's message>". */
#define MPI_CHECK(call, what)                                                                  \
  do {                                                                                         \
    int c_ = (call);                                                                           \
    if (c_ != MPI_SUCCESS) return inter_mpi_fail(c_, (what), err, errlen);                     \
  } while (0)

#endif
