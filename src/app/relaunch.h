/* relaunch.h — the ranks of a training job launched and supervised (shmddp_launch), and, with
 * --max-restarts N, started again when a rank dies: once every rank has stopped, all of them
 * start again from the last checkpoint in the run's folder (from the run's start when there is
 * none yet), at most N times. Each restart is written to log.jsonl (here, while no rank runs)
 * and kept in the job, for the run's last lines and summary.json. */
#ifndef SRC_APP_RELAUNCH_H
#define SRC_APP_RELAUNCH_H

#include <stddef.h>

#include "shmddp.h"
#include "src/train/job.h"

/* The launch of a DDP job's ranks on this machine: c->nproc ranks, the --timeout, one GPU per
 * rank on cuda (rank r on GPU r % GPUs) and, there, the NUMA binding of --numa-bind; the label
 * "train". */
void train_launch_config(const train_config_t *c, shmddp_launch_config_t *lc);

/* Launch (and restart) the job's ranks with lc. SHMDDP_OK when ranks ran: res->exit_code is
 * the last launch's outcome (after the messages on stderr that say why no restart followed);
 * otherwise the group could not be started and res->message says why. */
shmddp_status_t train_relaunch(train_job_t *job, const shmddp_launch_config_t *lc,
                               shmddp_launch_result_t *res);

#endif
