/* loop_ddp.h — the training loop's DDP engine (loop_ddp.c): one process per device, each with its
 * own model, gradients all-reduced by src/parallel/ddp.c; and the rank's entry points. */
#ifndef SRC_TRAIN_LOOP_DDP_H
#define SRC_TRAIN_LOOP_DDP_H

#include <stddef.h>

#include "shmddp.h"
#include "src/obs/summary.h"
#include "src/train/job.h"
#include "src/train/loop.h"
#include "src/world/world.h"

/* The engine, ready to train, over the ranks of `world`. */
int engine_ddp_create(engine_t **out, world_t *world, const train_job_t *job, char *err,
                      size_t errlen);

/* The whole run on one DDP rank (comm NULL: a single process, no group), by the training loop
 * (loop.c). Rank 0 prints progress and the result line and writes summary.json and
 * log.jsonl into --out. *result gets the same numbers on every rank. Returns 0, or -1 with a
 * message. */
int train_run(shmddp_comm_t *comm, const train_job_t *job, train_result_t *result, char *err,
              size_t errlen);

/* The same over any world (src/world/: several machines over MPI). */
int train_run_world(world_t *world, const train_job_t *job, train_result_t *result, char *err,
                    size_t errlen);

/* shmddp_rank_fn for shmddp_launch (arg: a train_job_t): train_run, and on failure the rank's
 * message on stderr and the group aborted, so the other ranks stop at once. */
int train_rank(shmddp_comm_t *comm, void *job);

#endif
