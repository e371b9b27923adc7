/* device_comm.c — the collectives' device transport (include/shmddp_cuda.h) for the engines:
 * after dev_comm_attach the stream-aware collectives take device buffers; host buffers need
 * nothing. A file of its own: it needs the shmddp library, which the model does not. */
#include "config.h"

#include "src/device/device.h"

#include <stdio.h>

#include "src/check.h"

#ifdef HAVE_CUDNN
#include "shmddp_cuda.h"
#endif

int dev_comm_attach(shmddp_comm_t *comm, int dev, int max_blocks, char *err, size_t errlen)
{
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  shmddp_cuda_config_t cc = SHMDDP_CUDA_CONFIG_INIT;
  cc.device = dev; /* the launcher's rank-th GPU, or the one a joined rank chose */
  cc.max_blocks = max_blocks;
  CHECK_COLL(comm, shmddp_comm_init_cuda(comm, &cc), "setting up the device transport");
  return 0;
#else
  (void)comm;
  (void)max_blocks;
  return check_fail(err, errlen, "this build has no GPU support: use --device cpu");
#endif
}

int dev_comm_check(shmddp_comm_t *comm, int dev, char *err, size_t errlen)
{
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_COLL(comm, shmddp_cuda_check(comm), "gradient all-reduce");
#else
  (void)comm;
#endif
  (void)err;
  (void)errlen;
  return 0;
}

int dev_comm_sync(shmddp_comm_t *comm, int dev, void *stream, char *err, size_t errlen)
{
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_COLL(comm, shmddp_cuda_sync(comm, (shmddp_stream_t)stream), "waiting for a collective");
#else
  (void)comm;
  (void)stream;
#endif
  (void)err;
  (void)errlen;
  return 0;
}
