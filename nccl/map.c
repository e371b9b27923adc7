/* map.c — the NCCL front end's translations: results, dtypes, ops, the config struct, streams,
 * error messages. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "nccl/internal.h"
#include "shm/env.h"

static _Thread_local char tl_last[512];

int nccl_debug(void)
{
  return shm_env_is("SHMDDP_NCCL_DEBUG", "1");
}

ncclResult_t nccl_result(shmddp_status_t st)
{
  switch (st) {
  case SHMDDP_OK: return ncclSuccess;
  case SHMDDP_ERR_INVALID: return ncclInvalidArgument;
  case SHMDDP_ERR_MISMATCH: return ncclInvalidUsage;
  case SHMDDP_ERR_UNSUPPORTED: return ncclInvalidUsage;
  case SHMDDP_ERR_CUDA: return ncclUnhandledCudaError;
  case SHMDDP_ERR_ABORTED: return ncclRemoteError;
  /* ncclTimeout is unknown to clients built before 2.30: a peer that never came is remote. */
  case SHMDDP_ERR_TIMEOUT: return ncclRemoteError;
  case SHMDDP_ERR_INTERRUPTED: return ncclRemoteError;
  case SHMDDP_ERR_NOMEM: case SHMDDP_ERR_SYSTEM: case SHMDDP_ERR_NOSPACE: return ncclSystemError;
  default: return ncclInternalError;
  }
}

const char *ncclGetErrorString(ncclResult_t r)
{
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with SHMDDP_NCCL_DEBUG=1 for details)";
  case ncclSystemError: return "unhandled system error (run with SHMDDP_NCCL_DEBUG=1 for details)";
  case ncclInternalError: return "internal error in shmddp's NCCL front end";
  case ncclInvalidArgument: return "invalid argument (run with SHMDDP_NCCL_DEBUG=1 for details)";
  case ncclInvalidUsage: return "invalid usage (run with SHMDDP_NCCL_DEBUG=1 for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm)
{
  if (comm && comm->last_error[0]) return comm->last_error;
  return tl_last;
}

static ncclResult_t vfail(ncclComm_t comm, ncclResult_t r, const char *fmt, va_list ap)
{
  vsnprintf(tl_last, sizeof tl_last, fmt, ap);
  if (comm) snprintf(comm->last_error, sizeof comm->last_error, "%s", tl_last);
  if (nccl_debug()) fprintf(stderr, "shmddp-nccl: %s\n", tl_last);
  return r;
}

ncclResult_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vfail(comm, r, fmt, ap);
  va_end(ap);
  return r;
}

ncclResult_t nccl_fail_st(ncclComm_t comm, shmddp_status_t st, shmddp_comm_t *c, const char *what)
{
  return nccl_fail(comm, nccl_result(st), "%s: %s (%s)", what,
                   c ? shmddp_comm_last_error(c) : shmddp_last_error(), shmddp_strerror(st));
}

int nccl_dtype(ncclComm_t comm, ncclDataType_t t, shmddp_dtype_t *out)
{
  static const int map[] = {
    [ncclInt8] = SHMDDP_I8, [ncclUint8] = SHMDDP_U8, [ncclInt32] = SHMDDP_I32,
    [ncclUint32] = SHMDDP_U32, [ncclInt64] = SHMDDP_I64, [ncclUint64] = SHMDDP_U64,
    [ncclFloat16] = SHMDDP_F16, [ncclFloat32] = SHMDDP_F32, [ncclFloat64] = SHMDDP_F64,
    [ncclBfloat16] = SHMDDP_BF16};
  if ((unsigned)t < sizeof map / sizeof map[0]) {
    *out = (shmddp_dtype_t)map[t];
    return 0;
  }
  if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2)
    nccl_fail(comm, ncclInvalidArgument, "8-bit float data (ncclDataType_t %d) is not supported "
              "by shmddp: send it as ncclUint8 where no reduction is needed", (int)t);
  else
    nccl_fail(comm, ncclInvalidArgument, "unknown ncclDataType_t %d", (int)t);
  return -1;
}

int nccl_op(ncclComm_t comm, ncclRedOp_t op, shmddp_op_t *out, const nccl_premul_t **premul)
{
  *premul = NULL;
  switch (op) {
  case ncclSum: *out = SHMDDP_SUM; return 0;
  case ncclProd: *out = SHMDDP_PROD; return 0;
  case ncclMax: *out = SHMDDP_MAX; return 0;
  case ncclMin: *out = SHMDDP_MIN; return 0;
  case ncclAvg: *out = SHMDDP_AVG; return 0;
  default: break;
  }
  int i = (int)op - ncclNumOps;
  if (comm && i >= 0 && i < NCCL_MAX_PREMUL && comm->premul[i].in_use) {
    *out = SHMDDP_SUM;
    *premul = &comm->premul[i];
    return 0;
  }
  nccl_fail(comm, ncclInvalidArgument, "unknown ncclRedOp_t %d (not a built-in op, nor one made "
            "by ncclRedOpCreatePreMulSum on this communicator)", (int)op);
  return -1;
}

ncclResult_t nccl_parse_config(const ncclConfig_t *config, int *blocking, char *err, size_t len)
{
  *blocking = 1;
  if (!config) return ncclSuccess;
  /* size, magic and version come first in every release's layout. */
  if (config->magic != SHMDDP_NCCL_CONFIG_MAGIC) {
    snprintf(err, len, "ncclConfig_t has magic %#x, not %#x: initialise it with "
             "NCCL_CONFIG_INITIALIZER", config->magic, SHMDDP_NCCL_CONFIG_MAGIC);
    return ncclInvalidArgument;
  }
  if (config->size < 24) {
    snprintf(err, len, "ncclConfig_t of %zu bytes is smaller than any release's (24)",
             config->size);
    return ncclInvalidArgument;
  }
  ncclConfig_t c;
  memset(&c, 0, sizeof c);
  memcpy(&c, config, config->size < sizeof c ? config->size : sizeof c);
  if (c.blocking != SHMDDP_NCCL_UNSET_INT) {
    if (c.blocking != 0 && c.blocking != 1) {
      snprintf(err, len, "ncclConfig_t.blocking is %d: use 0 or 1", c.blocking);
      return ncclInvalidArgument;
    }
    *blocking = c.blocking;
  }
  return ncclSuccess;
}

ncclResult_t nccl_unsupported(const char *name)
{
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static char said[32][48];
  static int nsaid;
  pthread_mutex_lock(&lock);
  int seen = 0;
  for (int i = 0; i < nsaid; i++) seen |= strcmp(said[i], name) == 0;
  if (!seen && nsaid < 32) snprintf(said[nsaid++], sizeof said[0], "%s", name);
  pthread_mutex_unlock(&lock);
  if (!seen)
    fprintf(stderr, "shmddp-nccl: %s is not supported by shmddp's NCCL front end; returning "
            "ncclInvalidUsage\n", name);
  return nccl_fail(NULL, ncclInvalidUsage, "%s is not supported by shmddp's NCCL front end", name);
}

shmddp_stream_t nccl_stream(ncclComm_t comm, cudaStream_t stream)
{
  if (comm->device < 0) return SHMDDP_HOST;
  return (shmddp_stream_t)(stream ? stream : cudaStreamLegacy);
}
