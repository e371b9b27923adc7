/* world_mpi.c — the world over several machines (see world_mpi.h): the grouping of MPI ranks
 * into nodes, the node's shmddp group joined by id, and the hierarchical collectives.
 *
 * An all-reduce of n elements on L ranks per node and M nodes: shmddp reduce-scatters it inside
 * the node (each local rank l holds the node's sum of shard l, n/L elements), inter.c
 * all-reduces shard l between the M ranks of local rank l (in a fixed ring order), and shmddp
 * all-gathers the shards inside the node. Every byte crosses the network once per local rank
 * instead of L times. The few elements past L whole shards, and small buffers (SyncBN's
 * statistics, the step's agreement), are all-reduced whole inside the node and then between the
 * nodes by every local rank at once: every group reduces the same inputs in the same order, so
 * all get the same bits, in two steps instead of three. AVG divides by L inside, by M between.
 *
 * Threads: the training thread runs SyncBN, sums and broadcasts over the node's communicator
 * and one MPI communicator; a progress thread runs the gradient buckets, in the order they were
 * started, over a duplicate of each, so neither ever waits on the other's calls and every
 * rank's calls on each pair of communicators come in the same order. On a GPU the buckets go on
 * the progress thread's stream, which waits for each bucket's `ready` event; the join waits for
 * the thread and then orders the caller's stream after that stream. The steps of a bucket that
 * cross the network are driven by the host, so this world is not captured in CUDA graphs. */
#include "config.h"

#include "src/world/world_mpi.h"

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h>
#endif

#include "shm/env.h"
#include "src/check.h"
#include "src/world/inter.h"

#define SMALL_BYTES ((size_t)64 << 10) /* all-reduced whole in the node, then between nodes */
#define MAX_JOBS 1024                  /* buckets started before a join (DDP_MAX_BUCKETS) */

typedef struct {
  void *buf;
  size_t count;
  shmddp_dtype_t dtype;
  dev_event_t *ready;
} job_t;

typedef struct {
  MPI_Comm wcomm, node_comm, inter, inter_async;
  shmddp_comm_t *intra, *intra_async; /* NULL with one rank per node */
  inter_t *x, *x_async;
  int local, L, M;
  void *stream, *async_stream; /* broadcasts; buckets (NULL on the host) */
  dev_event_t *join;
  /* the progress thread */
  int aware; /* hand MPI device pointers */
  int threaded, started, quit;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job_t jobs[MAX_JOBS];
  size_t head, tail; /* jobs [head, tail) wait */
  int failed;
  char err[1024];
} hier_t;

typedef struct {
  world_t w;
  hier_t *h;
  int view; /* a duplicate (world_dup): shares h, frees nothing */
} hier_world_t;

static hier_t *H(world_t *w) { return ((hier_world_t *)w)->h; }

/* ---- the hierarchical all-reduce ---- */

static int intra_fail(shmddp_comm_t *c, const char *what, char *err, size_t errlen)
{
  return check_fail(err, errlen, "%s inside the node: %s", what, shmddp_comm_last_error(c));
}

static int hier_all_reduce(world_t *w, shmddp_comm_t *intra, inter_t *x, void *buf, size_t count,
                           shmddp_dtype_t dtype, shmddp_op_t op, void *stream, char *err,
                           size_t errlen)
{
  hier_t *h = H(w);
  if (!x) return check_fail(err, errlen, "a collective before world_attach");
  const size_t ds = shmddp_dtype_size(dtype);
  const int L = h->L, l = h->local;
  shmddp_stream_t st = (shmddp_stream_t)stream;
  char *b = buf;
  if (count * ds <= SMALL_BYTES || count < (size_t)L) {
    if (intra && shmddp_all_reduce(intra, b, b, count, dtype, op, st) != SHMDDP_OK)
      return intra_fail(intra, "all-reduce", err, errlen);
    CHECK(inter_all_reduce(x, b, count, dtype, op, stream, err, errlen));
  } else {
    size_t shard = count / (size_t)L, whole = shard * (size_t)L, tail = count - whole;
    char *mine = b + (size_t)l * shard * ds;
    if (intra && shmddp_reduce_scatter(intra, b, mine, shard, dtype, op, st) != SHMDDP_OK)
      return intra_fail(intra, "reduce-scatter", err, errlen);
    if (intra && tail &&
        shmddp_all_reduce(intra, b + whole * ds, b + whole * ds, tail, dtype, op, st) != SHMDDP_OK)
      return intra_fail(intra, "all-reduce", err, errlen);
    CHECK(inter_all_reduce(x, mine, shard, dtype, op, stream, err, errlen));
    if (tail) CHECK(inter_all_reduce(x, b + whole * ds, tail, dtype, op, stream, err, errlen));
    if (intra && shmddp_all_gather(intra, mine, b, shard, dtype, st) != SHMDDP_OK)
      return intra_fail(intra, "all-gather", err, errlen);
  }
  if (stream && intra) return dev_comm_sync(intra, w->dev, stream, err, errlen);
  return stream ? dev_stream_sync(stream, err, errlen) : 0;
}

/* ---- the training thread's calls ---- */

static int h_all_reduce(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype,
                        shmddp_op_t op, void *stream, char *err, size_t errlen)
{
  hier_t *h = H(w);
  return hier_all_reduce(w, h->intra, h->x, buf, count, dtype, op, stream, err, errlen);
}

static int h_broadcast(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, char *err,
                       size_t errlen)
{
  hier_t *h = H(w);
  /* world rank 0 is node 0's local rank 0: first between the nodes' first ranks, then inside */
  if (h->local == 0) CHECK(inter_broadcast(h->x, buf, count * shmddp_dtype_size(dtype), 0, err,
                                           errlen));
  if (!h->intra) return 0;
  if (shmddp_broadcast(h->intra, buf, buf, count, dtype, 0, (shmddp_stream_t)h->stream) !=
      SHMDDP_OK)
    return intra_fail(h->intra, "broadcast", err, errlen);
  return dev_comm_sync(h->intra, w->dev, h->stream, err, errlen);
}

static int h_all_gather(world_t *w, const void *send, void *recv, size_t count,
                        shmddp_dtype_t dtype, char *err, size_t errlen)
{
  int bytes = (int)(count * shmddp_dtype_size(dtype));
  MPI_CHECK(MPI_Allgather(send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, H(w)->wcomm),
            "MPI_Allgather");
  return 0;
}

/* ---- buckets on the progress thread ---- */

static int run_job(world_t *w, const job_t *j, char *err, size_t errlen)
{
  hier_t *h = H(w);
  CHECK(dev_event_wait(h->async_stream, j->ready, err, errlen));
  if (hier_all_reduce(w, h->intra_async, h->x_async, j->buf, j->count, j->dtype, SHMDDP_AVG,
                      h->async_stream, err, errlen) != 0)
    return check_prefix(err, errlen, "gradient all-reduce");
  return 0;
}

static void *progress(void *arg)
{
  world_t *w = arg;
  hier_t *h = H(w);
  char err[1024] = "";
  int rc = dev_select(w->dev, err, sizeof err);
  pthread_mutex_lock(&h->mu);
  if (rc != 0) {
    h->failed = 1;
    snprintf(h->err, sizeof h->err, "%s", err);
  }
  for (;;) {
    while (h->head == h->tail && !h->quit) pthread_cond_wait(&h->cv, &h->mu);
    if (h->head == h->tail) break;
    job_t j = h->jobs[h->head % MAX_JOBS];
    int skip = h->failed;
    pthread_mutex_unlock(&h->mu);
    rc = skip ? 0 : run_job(w, &j, err, sizeof err);
    pthread_mutex_lock(&h->mu);
    if (rc != 0 && !h->failed) {
      h->failed = 1;
      snprintf(h->err, sizeof h->err, "%s", err);
    }
    h->head++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static int h_bucket_start(world_t *w, size_t index, void *buf, size_t count,
                          shmddp_dtype_t dtype, dev_event_t *ready, char *err, size_t errlen)
{
  hier_t *h = H(w);
  job_t j = {.buf = buf, .count = count, .dtype = dtype, .ready = ready};
  if (!h->started) return run_job(w, &j, err, errlen);
  pthread_mutex_lock(&h->mu);
  if (h->tail - h->head >= MAX_JOBS) {
    pthread_mutex_unlock(&h->mu);
    return check_fail(err, errlen, "more than %d gradient buckets started before a join",
                      MAX_JOBS);
  }
  h->jobs[h->tail++ % MAX_JOBS] = j;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return 0;
}

static int h_bucket_join(world_t *w, void *stream, dev_event_t *done, int capturing, char *err,
                         size_t errlen)
{
  hier_t *h = H(w);
  int failed = 0;
  if (h->started) {
    pthread_mutex_lock(&h->mu);
    while (h->head != h->tail) pthread_cond_wait(&h->cv, &h->mu);
    failed = h->failed;
    if (failed) snprintf(err, errlen, "%s", h->err);
    pthread_mutex_unlock(&h->mu);
  }
  if (failed) return -1;
  CHECK(dev_event_record_timing(done, h->async_stream, capturing, err, errlen));
  CHECK(dev_event_record(h->join, h->async_stream, err, errlen));
  CHECK(dev_event_wait(stream, h->join, err, errlen));
  return h->intra_async ? dev_comm_check(h->intra_async, w->dev, err, errlen) : 0;
}

/* ---- set-up ---- */

static int h_attach(world_t *w, int dev, int max_blocks, char *err, size_t errlen)
{
  hier_t *h = H(w);
  if (((hier_world_t *)w)->view) return 0; /* the base world did it */
  CHECK(dev_select(dev, err, errlen));
  if (dev != DEV_HOST) {
    if (h->intra) {
      CHECK(dev_comm_attach(h->intra, dev, 0, err, errlen)); /* small, critical: every block */
      CHECK(dev_comm_attach(h->intra_async, dev, max_blocks, err, errlen));
    }
    CHECK(dev_stream_create(&h->stream, dev, 0, err, errlen));
    CHECK(dev_stream_create(&h->async_stream, dev, 1, err, errlen));
  }
  CHECK(dev_event_create(&h->join, dev, DEV_EVENT_ORDER, err, errlen));
  inter_config_t ic = {.comm = h->inter, .dev = dev, .cuda_aware = dev != DEV_HOST && h->aware};
  CHECK(inter_create(&h->x, &ic, err, errlen));
  ic.comm = h->inter_async;
  CHECK(inter_create(&h->x_async, &ic, err, errlen));
  if (h->threaded) {
    if (pthread_create(&h->thread, NULL, progress, w) != 0)
      return check_fail(err, errlen, "cannot start the communication thread");
    h->started = 1;
  }
  return 0;
}

static const world_ops_t hier_ops;

static int h_dup(world_t *w, world_t **out, char *err, size_t errlen)
{
  /* The training thread's calls are ordered already (SyncBN, sums and broadcasts come one
   * after the other, each finished before the next): a view of the same world will do. */
  hier_world_t *v = calloc(1, sizeof *v);
  if (!v) return check_fail(err, errlen, "out of memory for a world");
  v->w = *w;
  v->h = H(w);
  v->view = 1;
  *out = &v->w;
  return 0;
}

static int h_stop_requested(world_t *w) { return 0; }

static void h_abort(world_t *w, const char *reason)
{
  hier_t *h = H(w);
  if (h->intra) shmddp_abort(h->intra, reason); /* this node's ranks stop at once */
}

static void free_comm(MPI_Comm *c)
{
  if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

static void hier_free(hier_t *h)
{
  if (h->started) {
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
  }
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  inter_destroy(h->x);
  inter_destroy(h->x_async);
  dev_event_destroy(h->join);
  dev_stream_destroy(h->stream);
  dev_stream_destroy(h->async_stream);
  if (h->intra_async) shmddp_comm_free(h->intra_async);
  if (h->intra) shmddp_comm_destroy(h->intra);
  free_comm(&h->inter_async);
  free_comm(&h->inter);
  free_comm(&h->node_comm);
  free_comm(&h->wcomm);
  free(h);
}

static void h_destroy(world_t *w)
{
  hier_world_t *hw = (hier_world_t *)w;
  if (!hw->view) hier_free(hw->h);
  free(hw);
}

static const world_ops_t hier_ops = {
    .all_reduce = h_all_reduce,
    .broadcast = h_broadcast,
    .all_gather = h_all_gather,
    .attach = h_attach,
    .dup = h_dup,
    .bucket_start = h_bucket_start,
    .bucket_join = h_bucket_join,
    .stop_requested = h_stop_requested,
    .abort = h_abort,
    .destroy = h_destroy,
};

/* Whether MPI takes device pointers: what the library says (Open MPI's MPIX_Query_cuda_support),
 * unless SHMDDP_MPI_CUDA_AWARE says 0 (or 1: trust it; the table in shm/env.c). Read
 * once, at set-up. */
static int cuda_aware(void)
{
  int lib = 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  lib = MPIX_Query_cuda_support() == 1;
#endif
  int v = lib;
  char err[256];
  /* A bad value was refused by shmddp-train's environment check before MPI started. */
  if (shm_env_flag("SHMDDP_MPI_CUDA_AWARE", &v, err, sizeof err) < 0) return lib;
  return v;
}

/* The node's ranks: by host, or r / K. Every node must have as many. */
static int group(hier_t *h, const world_mpi_config_t *cfg, world_mpi_info_t *in, char *err,
                 size_t errlen)
{
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &h->wcomm), "MPI_Comm_dup");
  /* Our MPI calls return their errors (with a message) instead of Open MPI's default,
   * MPI_ERRORS_ARE_FATAL, which aborts the job from inside the call; the communicators split
   * from this one inherit it. */
  MPI_CHECK(MPI_Comm_set_errhandler(h->wcomm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  MPI_CHECK(MPI_Comm_rank(h->wcomm, &in->rank), "MPI_Comm_rank");
  MPI_CHECK(MPI_Comm_size(h->wcomm, &in->size), "MPI_Comm_size");
  const int K = cfg->ranks_per_node;
  if (K > 0) {
    if (in->size % K != 0)
      return check_fail(err, errlen, "--ranks-per-node %d: %d MPI ranks do not make whole nodes "
                        "of %d; start a multiple of %d ranks", K, in->size, K, K);
    MPI_CHECK(MPI_Comm_split(h->wcomm, in->rank / K, in->rank, &h->node_comm), "MPI_Comm_split");
  } else {
    MPI_CHECK(MPI_Comm_split_type(h->wcomm, MPI_COMM_TYPE_SHARED, in->rank, MPI_INFO_NULL,
                                  &h->node_comm),
              "MPI_Comm_split_type");
  }
  MPI_CHECK(MPI_Comm_rank(h->node_comm, &h->local), "MPI_Comm_rank");
  MPI_CHECK(MPI_Comm_size(h->node_comm, &h->L), "MPI_Comm_size");
  int mm[2] = {-h->L, h->L};
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_INT, MPI_MAX, h->wcomm), "MPI_Allreduce");
  if (-mm[0] != mm[1])
    return check_fail(err, errlen, "the nodes have %d to %d ranks each; start the same number "
                      "on every node (mpirun -npernode K, or --ranks-per-node K)", -mm[0], mm[1]);
  if (h->L > SHMDDP_MAX_RANKS)
    return check_fail(err, errlen, "%d ranks on one node; at most %d (one per GPU) are "
                      "supported: start fewer per node (mpirun -npernode K)", h->L,
                      SHMDDP_MAX_RANKS);
  MPI_CHECK(MPI_Comm_split(h->wcomm, h->local, in->rank, &h->inter), "MPI_Comm_split");
  MPI_CHECK(MPI_Comm_rank(h->inter, &in->node), "MPI_Comm_rank");
  MPI_CHECK(MPI_Comm_size(h->inter, &h->M), "MPI_Comm_size");
  in->nodes = h->M;
  in->local = h->local;
  in->per_node = h->L;
  in->device = cfg->gpus > 0 ? h->local % cfg->gpus : -1;
  return 0;
}

/* The node's shmddp group: its first rank makes the id, MPI carries it to the others. */
static int join_node(hier_t *h, const world_mpi_config_t *cfg, char *err, size_t errlen)
{
  struct {
    int status;
    shmddp_unique_id_t id;
  } pkt;
  memset(&pkt, 0, sizeof pkt);
  if (h->local == 0) pkt.status = shmddp_get_unique_id(&pkt.id);
  MPI_CHECK(MPI_Bcast(&pkt, (int)sizeof pkt, MPI_BYTE, 0, h->node_comm), "MPI_Bcast of the id");
  if (pkt.status != SHMDDP_OK)
    return check_fail(err, errlen, "the node's first rank could not make a shmddp id (%s)",
                      shmddp_strerror((shmddp_status_t)pkt.status));
  shmddp_comm_config_t cc = SHMDDP_COMM_CONFIG_INIT;
  cc.timeout_s = cfg->timeout_s;
  cc.device = SHMDDP_DEVICE_NONE; /* the device transport comes with world_attach */
  if (shmddp_comm_init_rank_config(&h->intra, h->L, pkt.id, h->local, &cc) != SHMDDP_OK)
    return check_fail(err, errlen, "joining the node's shmddp group: %s", shmddp_last_error());
  return 0;
}

int world_mpi_create(world_t **out, const world_mpi_config_t *cfg, world_mpi_info_t *info,
                     char *err, size_t errlen)
{
  *out = NULL;
  world_mpi_info_t local_info;
  world_mpi_info_t *in = info ? info : &local_info;
  memset(in, 0, sizeof *in);
  in->device = -1;
  int len = 0;
  MPI_Get_processor_name(in->host, &len); /* fits: MPI_MAX_PROCESSOR_NAME may be larger */
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_library_version(lib, &len);
  lib[strcspn(lib, ",\n")] = 0;
  snprintf(in->library, sizeof in->library, "%.120s", lib);
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);

  hier_t *h = calloc(1, sizeof *h);
  if (!h) return check_fail(err, errlen, "out of memory for the world");
  h->wcomm = h->node_comm = h->inter = h->inter_async = MPI_COMM_NULL;
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  int rc = group(h, cfg, in, err, errlen);
  if (rc == 0 && h->L > 1) rc = join_node(h, cfg, err, errlen);
  if (rc != 0) {
    hier_free(h);
    return -1;
  }
  if (h->M == 1) { /* one node: the one-machine world over the joined group */
    shmddp_comm_t *c = h->intra;
    h->intra = NULL;
    hier_free(h);
    rc = c ? world_from_joined(out, c, err, errlen) : world_from_comm(out, NULL, err, errlen);
    if (rc == 0) (*out)->device = in->device;
    else if (c) shmddp_comm_destroy(c);
    return rc;
  }
  in->threaded = provided == MPI_THREAD_MULTIPLE;
  in->cuda_aware = cuda_aware();
  h->aware = in->cuda_aware;
  h->threaded = in->threaded;
  int c = MPI_Comm_dup(h->inter, &h->inter_async);
  if (c != MPI_SUCCESS) rc = inter_mpi_fail(c, "MPI_Comm_dup", err, errlen);
  if (rc == 0 && h->intra && shmddp_comm_dup(h->intra, &h->intra_async) != SHMDDP_OK)
    rc = check_fail(err, errlen, "duplicating the node's communicator: %s",
                    shmddp_comm_last_error(h->intra));
  hier_world_t *hw = rc == 0 ? calloc(1, sizeof *hw) : NULL;
  if (rc == 0 && !hw) rc = check_fail(err, errlen, "out of memory for the world");
  if (rc != 0) {
    hier_free(h);
    return -1;
  }
  hw->h = h;
  hw->w = (world_t){.ops = &hier_ops,
                    .rank = in->rank,
                    .size = in->size,
                    .device = in->device,
                    .capturable = 0,
                    .dev = DEV_HOST};
  *out = &hw->w;
  return 0;
}

void world_mpi_describe(const world_mpi_info_t *in, int on_gpu, char *buf, size_t len)
{
  const char *how = !on_gpu || in->nodes == 1 ? ""
                    : in->cuda_aware          ? "; CUDA-aware: device buffers to MPI"
                                              : "; not CUDA-aware: staged through pinned host memory";
  snprintf(buf, len, "%d node%s x %d rank%s over MPI (%s%s%s)", in->nodes,
           in->nodes == 1 ? "" : "s", in->per_node, in->per_node == 1 ? "" : "s", in->library,
           how, in->nodes > 1 && !in->threaded ? "; no MPI_THREAD_MULTIPLE: buckets not "
                                                 "overlapped with backward" : "");
}
