/* window.c — a communicator's registrations: buffers of ncclCommRegister and windows of
 * ncclCommWindowRegister, one record each, kept on the communicator.
 *
 * Both are served as the same thing, shmddp's registration on the device transport (the buffer
 * is exported once and stays exported until it is released, so every collective on it is
 * zero-copy); a host-only communicator has nothing to export and keeps the record only. The
 * record is the handle the client gets: a handle given back is looked up on the communicator
 * before it is used, so one that is unknown, of another communicator or already released is
 * refused instead of followed. What the client leaves registered is released by
 * ncclCommDestroy / ncclCommAbort. One lock for every communicator's list: registering is not
 * on any hot path, and a client may register from its allocator's thread. */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "nccl/internal.h"

struct ncclWindow_vidmem {
  struct ncclWindow_vidmem *next;
  void *buff;
  size_t bytes;
  int window;  /* 1: a window (ncclCommWindowRegister), 0: ncclCommRegister's buffer */
  int flags;   /* winFlags */
  void *dev;   /* shmddp's registration; NULL on a host-only communicator */
};

static pthread_mutex_t regs_lock = PTHREAD_MUTEX_INITIALIZER;

ncclResult_t nccl_reg_add(ncclComm_t comm, const char *fn, void *buff, size_t bytes, int window,
                          int flags, ncclWindow_t *out)
{
  *out = NULL;
  ncclWindow_t w = malloc(sizeof *w);
  if (!w) return nccl_fail(comm, ncclSystemError, "%s: out of host memory", fn);
  void *dev = NULL;
  ncclResult_t r = nccl_dev_register(comm, buff, bytes, &dev);
  if (r != ncclSuccess) {
    free(w);
    return r;
  }
  *w = (struct ncclWindow_vidmem){.buff = buff, .bytes = bytes, .window = window,
                                  .flags = flags, .dev = dev};
  pthread_mutex_lock(&regs_lock);
  w->next = comm->regs;
  comm->regs = w;
  pthread_mutex_unlock(&regs_lock);
  nccl_log(comm, 2, "%s: %zu bytes at %p registered%s", fn, bytes, buff,
           w->dev ? " (exported to the peers)" : "");
  *out = w;
  return ncclSuccess;
}

ncclResult_t nccl_reg_remove(ncclComm_t comm, const char *fn, const char *arg, void *handle,
                             int window)
{
  if (!handle) return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is NULL", fn, arg);
  pthread_mutex_lock(&regs_lock);
  ncclWindow_t *p = &comm->regs;
  while (*p && (*p != handle || (*p)->window != window)) p = &(*p)->next;
  ncclWindow_t w = *p;
  if (w) *p = w->next;
  pthread_mutex_unlock(&regs_lock);
  if (!w)
    return nccl_fail(comm, ncclInvalidArgument, "%s: argument %s is %p, not a %s registered on "
                     "this communicator (or already deregistered)", fn, arg, handle,
                     window ? "window" : "buffer");
  ncclResult_t r = nccl_dev_deregister(comm, w->dev);
  free(w);
  return r;
}

void nccl_reg_release_all(ncclComm_t comm)
{
  pthread_mutex_lock(&regs_lock);
  ncclWindow_t w = comm->regs;
  comm->regs = NULL;
  pthread_mutex_unlock(&regs_lock);
  while (w) {
    ncclWindow_t next = w->next;
    nccl_dev_deregister(comm, w->dev);
    free(w);
    w = next;
  }
}

size_t nccl_reg_bytes(ncclComm_t comm)
{
  size_t total = 0;
  pthread_mutex_lock(&regs_lock);
  for (ncclWindow_t w = comm->regs; w; w = w->next)
    if (w->dev) total += w->bytes;
  pthread_mutex_unlock(&regs_lock);
  return total;
}
