/* launch.c — shmddp_launch(): settings (config, then environment, then defaults), validated
 * before anything is created; then the shm launcher forks the ranks, each GPU rank binds itself
 * to its GPU's NUMA node (when the config asks), and each gets a communicator over the segment.
 * Also the small communicator accessors. */
#include "config.h"

#include "collectives/launch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/comm.h"
#include "collectives/device.h"
#include "shm/abort.h"
#include "shm/env.h"
#include "shm/launcher.h"
#include "shm/numa.h"

typedef struct {
  shmddp_rank_fn fn;
  void *arg;
  int use_gpus;
  int bind_numa;
  int quiet;
  const char *label;
  const coll_numa_binder_t *binder;
  double timeout_s;
  shmddp_algo_t algo;
} launch_ctx_t;

static const coll_numa_binder_t real_binder = {
  .bus_id = coll_device_pci_bus_id,
  .sysfs_root = "/sys",
  .nodes = shm_numa_nodes,
  .bind = shm_numa_bind_node,
};

const coll_numa_binder_t *coll_numa_binder(void) { return &real_binder; }

shmddp_status_t coll_numa_bind_gpu(const coll_numa_binder_t *b, int device, int *node, char *msg,
                                   size_t len)
{
  *node = -1;
  if (len) msg[0] = '\0';
  char busid[64] = "", why[256] = "";
  int rc = b->bus_id(device, busid, sizeof busid, why, sizeof why);
  if (rc > 0) return SHMDDP_OK; /* no GPU: the device set-up reports that, not the binding */
  if (rc < 0) {
    snprintf(msg, len, "cannot bind to the NUMA node of GPU %d: its PCI bus id is unknown (%s)",
             device, why);
    return SHMDDP_ERR_CUDA;
  }
  int pick = shm_numa_pick_node(b->sysfs_root, busid, b->nodes());
  if (pick < 0) return SHMDDP_OK; /* one node, or sysfs gives the GPU none */
  shmddp_status_t st = b->bind(pick, why, sizeof why);
  if (st != SHMDDP_OK) {
    snprintf(msg, len, "GPU %s is on NUMA node %d, but %s", busid, pick, why);
    return st;
  }
  *node = pick;
  return SHMDDP_OK;
}

/* A GPU rank's NUMA binding, the first thing it does after fork: before the rank's function
 * allocates host memory (pinned staging, loader buffers) or starts threads (data loaders), so
 * that they live on the GPU's node; the CUDA context made afterwards is bound too. Finding the
 * bus id starts the CUDA driver here, in the rank (never in the launcher: a CUDA process cannot
 * fork usable ranks), but makes no context yet.
 *
 * A failure is a warning, and the rank runs unbound: binding changes where the rank's CPU work
 * and host memory are, never what it computes, and the usual causes (a container's cpuset
 * without that node's CPUs, a kernel without NUMA support, a driver that cannot name the GPU's
 * bus) are properties of the machine the run cannot change. Ending the rank would stop a job
 * that works, only slower; silence would hide the slowdown. */
static void bind_rank(const launch_ctx_t *ctx, int rank)
{
  char msg[512];
  int node = -1;
  if (coll_numa_bind_gpu(ctx->binder, rank, &node, msg, sizeof msg) != SHMDDP_OK && !ctx->quiet)
    fprintf(stderr, "%s: warning: rank %d: %s; the rank runs without NUMA binding\n",
            ctx->label, rank, msg);
}

static int rank_main(shm_segment_t *seg, int rank, void *arg)
{
  launch_ctx_t *ctx = arg;
  if (ctx->use_gpus && ctx->bind_numa) bind_rank(ctx, rank);
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
  return coll_launch(cfg, fn, arg, NULL, res);
}

shmddp_status_t coll_launch(const shmddp_launch_config_t *cfg, shmddp_rank_fn fn, void *arg,
                            const coll_numa_binder_t *binder, shmddp_launch_result_t *res)
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
  launch_ctx_t ctx = {.fn = fn, .arg = arg, .use_gpus = cfg->use_gpus,
                      .bind_numa = cfg->bind_numa != 0, .quiet = cfg->quiet,
                      .label = cfg->label ? cfg->label : "shmddp",
                      .binder = binder ? binder : &real_binder};
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
