/* world.c — the world of one machine: every call is the shmddp communicator's own collective.
 * Buckets run on a communication stream (an event orders each after the gradients it reads),
 * SyncBN's all-reduces over a duplicate communicator on the caller's stream, so neither queues
 * behind the other; everything can be captured in a CUDA graph. Also the dispatch of world.h. */
#include "config.h"

#include "src/world/world.h"

#include <stdlib.h>

#include "src/check.h"
#include "src/obs/timeline.h"

typedef struct {
  world_t w;
  shmddp_comm_t *comm;
  int owned;        /* joined by id: shmddp_comm_destroy at the end */
  int is_dup;       /* made by shmddp_comm_dup: shmddp_comm_free */
  void *comm_stream; /* buckets (NULL on the host) */
  dev_event_t *join;
} shm_world_t;

static shm_world_t *sw(world_t *w) { return (shm_world_t *)w; }

static int shm_all_reduce(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype,
                          shmddp_op_t op, void *stream, char *err, size_t errlen)
{
  shmddp_comm_t *comm = sw(w)->comm;
  CHECK_COLL(comm, shmddp_all_reduce(comm, buf, buf, count, dtype, op, (shmddp_stream_t)stream),
             "all-reduce");
  return 0;
}

static int shm_broadcast(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, char *err,
                         size_t errlen)
{
  shm_world_t *s = sw(w);
  CHECK_COLL(s->comm,
             shmddp_broadcast(s->comm, buf, buf, count, dtype, 0,
                              (shmddp_stream_t)s->comm_stream),
             "broadcast");
  return dev_comm_sync(s->comm, w->dev, s->comm_stream, err, errlen);
}

static int shm_all_gather(world_t *w, const void *send, void *recv, size_t count,
                          shmddp_dtype_t dtype, char *err, size_t errlen)
{
  shmddp_comm_t *comm = sw(w)->comm;
  CHECK_COLL(comm, shmddp_all_gather(comm, send, recv, count, dtype, SHMDDP_HOST), "all-gather");
  return 0;
}

static int shm_attach(world_t *w, int dev, int max_blocks, char *err, size_t errlen)
{
  shm_world_t *s = sw(w);
  if (dev != DEV_HOST) {
    CHECK(dev_comm_attach(s->comm, dev, max_blocks, err, errlen));
    CHECK(dev_stream_create(&s->comm_stream, dev, 1, err, errlen));
  }
  return dev_event_create(&s->join, dev, DEV_EVENT_ORDER, err, errlen);
}

static const world_ops_t shm_ops;

static int shm_dup(world_t *w, world_t **out, char *err, size_t errlen)
{
  shm_world_t *s = sw(w), *d = calloc(1, sizeof *d);
  if (!d) return check_fail(err, errlen, "out of memory for a communicator");
  d->w = *w;
  if (shmddp_comm_dup(s->comm, &d->comm) != SHMDDP_OK) {
    free(d);
    return check_fail(err, errlen, "duplicating the communicator: %s",
                      shmddp_comm_last_error(s->comm));
  }
  d->is_dup = 1;
  *out = &d->w;
  return 0;
}

static int shm_bucket_start(world_t *w, size_t index, void *buf, size_t count,
                            shmddp_dtype_t dtype, dev_event_t *ready, char *err, size_t errlen)
{
  shm_world_t *s = sw(w);
  CHECK(dev_event_wait(s->comm_stream, ready, err, errlen));
  /* After the wait, so the span starts when the bucket can start. */
  int tl = timeline_begin(TIMELINE_ALLREDUCE, s->comm_stream);
  timeline_args(tl, (double)index, (double)(count * shmddp_dtype_size(dtype)));
  CHECK_COLL(s->comm,
             shmddp_all_reduce(s->comm, buf, buf, count, dtype, SHMDDP_AVG,
                               (shmddp_stream_t)s->comm_stream),
             "gradient all-reduce");
  timeline_end(tl, s->comm_stream);
  return 0;
}

static int shm_bucket_join(world_t *w, void *stream, dev_event_t *done, int capturing, char *err,
                           size_t errlen)
{
  shm_world_t *s = sw(w);
  CHECK(dev_event_record_timing(done, s->comm_stream, capturing, err, errlen));
  /* In a capture this also brings the communication stream back into the graph. */
  CHECK(dev_event_record(s->join, s->comm_stream, err, errlen));
  CHECK(dev_event_wait(stream, s->join, err, errlen));
  return dev_comm_check(s->comm, w->dev, err, errlen);
}

static int shm_stop_requested(world_t *w)
{
  return sw(w)->comm && shmddp_stop_requested(sw(w)->comm);
}

static void shm_abort(world_t *w, const char *reason) { shmddp_abort(sw(w)->comm, reason); }

static void shm_destroy(world_t *w)
{
  shm_world_t *s = sw(w);
  dev_event_destroy(s->join);
  dev_stream_destroy(s->comm_stream);
  if (s->is_dup) shmddp_comm_free(s->comm);
  else if (s->owned) shmddp_comm_destroy(s->comm);
  free(s);
}

static const world_ops_t shm_ops = {
    .all_reduce = shm_all_reduce,
    .broadcast = shm_broadcast,
    .all_gather = shm_all_gather,
    .attach = shm_attach,
    .dup = shm_dup,
    .bucket_start = shm_bucket_start,
    .bucket_join = shm_bucket_join,
    .stop_requested = shm_stop_requested,
    .abort = shm_abort,
    .destroy = shm_destroy,
};

static int from_comm(world_t **out, shmddp_comm_t *comm, int owned, char *err, size_t errlen)
{
  *out = NULL;
  shm_world_t *s = calloc(1, sizeof *s);
  if (!s) return check_fail(err, errlen, "out of memory for the world");
  s->w = (world_t){.ops = &shm_ops,
                   .rank = comm ? shmddp_comm_rank(comm) : 0,
                   .size = comm ? shmddp_comm_size(comm) : 1,
                   .device = comm ? shmddp_comm_device(comm) : -1,
                   .capturable = 1,
                   .dev = DEV_HOST};
  s->comm = comm;
  s->owned = owned;
  *out = &s->w;
  return 0;
}

int world_from_comm(world_t **out, shmddp_comm_t *comm, char *err, size_t errlen)
{
  return from_comm(out, comm, 0, err, errlen);
}

int world_from_joined(world_t **out, shmddp_comm_t *comm, char *err, size_t errlen)
{
  return from_comm(out, comm, 1, err, errlen);
}

void world_share_gpus(world_t *w, int gpus)
{
  if (gpus <= 0 || w->size <= gpus || w->device < 0) return;
  w->device %= gpus;
  /* No CUDA graph for ranks that share a GPU, under MPS too: a captured collective takes the
   * in-kernel algorithm at every size, and its blocks, spinning while a peer still computes,
   * take that peer's SMs (the trainer nearly stalls: see
   * bench/results/shared_gpu_mps_1xh200_summary.txt). */
  w->capturable = 0;
}

/* ---- dispatch; a world of one rank has nothing to do ---- */

void world_destroy(world_t *w)
{
  if (w) w->ops->destroy(w);
}

int world_attach(world_t *w, int dev, int max_blocks, char *err, size_t errlen)
{
  if (w->attached) {
    if (dev == w->dev) return 0;
    return check_fail(err, errlen, "the world's collectives were set up for %s %d, not %s %d",
                      w->dev == DEV_HOST ? "host" : "GPU", w->dev,
                      dev == DEV_HOST ? "host" : "GPU", dev);
  }
  w->dev = dev;
  w->attached = 1;
  return w->size > 1 ? w->ops->attach(w, dev, max_blocks, err, errlen) : 0;
}

int world_dup(world_t *w, world_t **out, char *err, size_t errlen)
{
  CHECK(w->ops->dup(w, out, err, errlen));
  (*out)->dev = DEV_HOST;
  (*out)->attached = 0;
  return 0;
}

int world_all_reduce(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, shmddp_op_t op,
                     void *stream, char *err, size_t errlen)
{
  if (w->size == 1 || count == 0) return 0;
  return w->ops->all_reduce(w, buf, count, dtype, op, stream, err, errlen);
}

int world_broadcast(world_t *w, void *buf, size_t count, shmddp_dtype_t dtype, char *err,
                    size_t errlen)
{
  if (w->size == 1 || count == 0) return 0;
  return w->ops->broadcast(w, buf, count, dtype, err, errlen);
}

int world_all_gather(world_t *w, const void *send, void *recv, size_t count,
                     shmddp_dtype_t dtype, char *err, size_t errlen)
{
  if (w->size == 1) return dev_copy_now(recv, DEV_HOST, send, DEV_HOST,
                                        count * shmddp_dtype_size(dtype), err, errlen);
  return w->ops->all_gather(w, send, recv, count, dtype, err, errlen);
}

int world_bucket_start(world_t *w, size_t index, void *buf, size_t count, shmddp_dtype_t dtype,
                       dev_event_t *ready, char *err, size_t errlen)
{
  if (w->size == 1) return 0;
  return w->ops->bucket_start(w, index, buf, count, dtype, ready, err, errlen);
}

int world_bucket_join(world_t *w, void *stream, dev_event_t *done, int capturing, char *err,
                      size_t errlen)
{
  if (w->size == 1) return 0;
  return w->ops->bucket_join(w, stream, done, capturing, err, errlen);
}


/* Asked of a world of one rank too: the launcher forks a single rank as well. */
int world_stop_requested(world_t *w) { return w->ops->stop_requested(w); }

void world_abort(world_t *w, const char *reason)
{
  if (w && w->size > 1) w->ops->abort(w, reason);
}
