/* launch.c — shmddp_launch(): settings (config, then environment, then defaults), validated
 * before anything is created; then the shm launcher forks the ranks and each gets a
 * communicator over the segment. Also the small communicator accessors. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/device.h"
#include "shm/abort.h"
#include "shm/env.h"
#include "shm/launcher.h"

typedef struct {
  shmddp_rank_fn fn;
  void *arg;
  int use_gpus;
  double timeout_s;
  shmddp_algo_t algo;
} launch_ctx_t;

static int rank_main(shm_segment_t *seg, int rank, void *arg)
{
  launch_ctx_t *ctx = arg;
  shmddp_comm_t comm;
  coll_comm_init(&comm, seg, 0, rank, ctx->use_gpus ? rank : -1, ctx->timeout_s);
  comm.algo = ctx->algo;
  int rc = ctx->fn(&comm, ctx->arg);
  coll_comm_teardown(&comm);
  return rc;
}

size_t shmddp_segment_bytes(int nproc, size_t slot_bytes)
{
  if (slot_bytes == 0) slot_bytes = SHM_DEFAULT_SLOT_BYTES;
  return shm_segment_size(nproc, slot_bytes);
}

shmddp_status_t coll_env_settings(size_t *slot_bytes, double *timeout_s, shmddp_algo_t *algo,
                                  char *err, size_t errlen)
{
  double v;
  int rc;
  if (*slot_bytes == 0) {
    /* The range (64 KiB to 64 GiB) keeps the product exact and far from overflow. */
    if ((rc = shm_env_number("SHMDDP_SLOT_MB", &v, err, errlen)) < 0) return SHMDDP_ERR_INVALID;
    *slot_bytes = rc ? (size_t)(v * 1048576.0) : SHM_DEFAULT_SLOT_BYTES;
  }
  if (*timeout_s == 0) {
    if ((rc = shm_env_number("SHMDDP_TIMEOUT", &v, err, errlen)) < 0) return SHMDDP_ERR_INVALID;
    *timeout_s = rc ? v : 300;
  }
  *algo = SHMDDP_ALGO_AUTO;
  const char *name;
  if ((rc = shm_env_choice("SHMDDP_ALGO", &name, err, errlen)) < 0) return SHMDDP_ERR_INVALID;
  if (rc) *algo = (shmddp_algo_t)shmddp_algo_parse(name);
  return SHMDDP_OK;
}

shmddp_status_t shmddp_launch(const shmddp_launch_config_t *cfg, shmddp_rank_fn fn, void *arg,
                              shmddp_launch_result_t *res)
{
  memset(res, 0, sizeof *res);
  res->failed_rank = -1;
  res->exit_code = 1;
  if (!cfg || !fn) {
    snprintf(res->message, sizeof res->message, "shmddp_launch: config and rank function are required");
    return SHMDDP_ERR_INVALID;
  }
  if (cfg->nproc < 1 || cfg->nproc > SHMDDP_MAX_RANKS) {
    snprintf(res->message, sizeof res->message,
             "cannot launch %d ranks: the world size must be 1 to %d", cfg->nproc,
             SHMDDP_MAX_RANKS);
    return SHMDDP_ERR_INVALID;
  }
  if (cfg->timeout_s < 0 || cfg->grace_s < 0 || cfg->stop_grace_s < 0) {
    snprintf(res->message, sizeof res->message, "timeouts must not be negative");
    return SHMDDP_ERR_INVALID;
  }
  double stop_grace = cfg->stop_grace_s;
  if (stop_grace == 0) {
    int rc = shm_env_number("SHMDDP_STOP_GRACE", &stop_grace, res->message, sizeof res->message);
    if (rc < 0) return SHMDDP_ERR_INVALID;
    if (rc == 0) stop_grace = SHM_DEFAULT_STOP_GRACE_S;
  }
  shm_launch_opts_t o = {
    .nranks = cfg->nproc,
    .label = cfg->label,
    .quiet = cfg->quiet,
    .slot_bytes = cfg->slot_bytes,
    .timeout_s = cfg->timeout_s,
    .grace_s = cfg->grace_s > 0 ? cfg->grace_s : 2.0,
    .stop_grace_s = stop_grace,
  };
  launch_ctx_t ctx = {.fn = fn, .arg = arg, .use_gpus = cfg->use_gpus};
  shmddp_status_t st = coll_env_settings(&o.slot_bytes, &o.timeout_s, &ctx.algo, res->message,
                                         sizeof res->message);
  if (st != SHMDDP_OK) return st;
  ctx.timeout_s = o.timeout_s;
  return shm_launch(&o, rank_main, &ctx, res);
}

int shmddp_comm_rank(const shmddp_comm_t *comm) { return comm ? comm->rank : -1; }
int shmddp_comm_size(const shmddp_comm_t *comm) { return comm ? comm->nranks : 0; }
int shmddp_comm_device(const shmddp_comm_t *comm) { return comm ? comm->device : -1; }

const char *shmddp_comm_last_error(const shmddp_comm_t *comm)
{
  return comm ? comm->last_error : "no communicator";
}

shmddp_status_t shmddp_comm_set_algo(shmddp_comm_t *comm, shmddp_algo_t algo)
{
  if (!comm) return SHMDDP_ERR_INVALID;
  if ((unsigned)algo >= SHMDDP_NUM_ALGOS)
    return coll_error(comm, SHMDDP_ERR_INVALID, "unknown algorithm %d", (int)algo);
  comm->algo = algo;
  return SHMDDP_OK;
}

shmddp_status_t shmddp_comm_dup(shmddp_comm_t *comm, shmddp_comm_t **out)
{
  if (!comm || !out) return SHMDDP_ERR_INVALID;
  *out = NULL;
  shmddp_comm_t *base = comm->base;
  int ch = 0;
  for (int i = 1; i < SHM_CHANNELS && !ch; i++)
    if (!base->dups[i]) ch = i;
  if (!ch)
    return coll_error(comm, SHMDDP_ERR_UNSUPPORTED,
                      "shmddp_comm_dup: all %d channels are in use; free a duplicate first",
                      SHM_CHANNELS - 1);
  shmddp_comm_t *d = malloc(sizeof *d);
  if (!d) return coll_error(comm, SHMDDP_ERR_NOMEM, "shmddp_comm_dup: out of memory");
  coll_comm_init(d, base->seg, ch, base->rank, base->device, base->timeout_s);
  d->base = base;
  d->algo = comm->algo;
  base->dups[ch] = d;
  *out = d;
  return SHMDDP_OK;
}

void shmddp_comm_free(shmddp_comm_t *comm)
{
  if (!comm || comm->base == comm) return;
  shmddp_comm_t *base = comm->base;
  coll_comm_teardown(comm);
  base->dups[comm->channel] = NULL;
  free(comm);
}

shmddp_algo_t shmddp_comm_last_algo(const shmddp_comm_t *comm)
{
  return comm ? (shmddp_algo_t)comm->cur.algo : SHMDDP_ALGO_AUTO;
}

void shmddp_abort(shmddp_comm_t *comm, const char *reason)
{
  if (!comm) return;
  shm_abort(comm->seg, SHMDDP_ERR_ABORTED, comm->rank, "rank %d aborted the group: %s",
            comm->rank, reason ? reason : "no reason given");
}

int shmddp_stop_requested(const shmddp_comm_t *comm)
{
  return comm ? shm_stop_requested(comm->seg) : 0;
}
