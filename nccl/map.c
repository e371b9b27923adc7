/* map.c — the NCCL front end's translations: results, dtypes, ops, the config struct; error
 * messages (ncclGetLastError) and debug lines (NCCL_DEBUG, SHMDDP_NCCL_DEBUG). */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nccl/internal.h"
#include "shm/env.h"

static _Thread_local char tl_last[512];

/* ---- debug lines ---- */

static _Atomic int debug_level = -1;

static int read_debug_level(void)
{
  int on = 0;
  const char *v = NULL;
  char err[256];
  /* No caller to refuse a debug switch to: a value SHMDDP_NCCL_DEBUG does not take is said and
   * ignored. NCCL_DEBUG is NCCL's own (any text; what we do not print for is ignored). */
  if (shm_env_flag("SHMDDP_NCCL_DEBUG", &on, err, sizeof err) < 0)
    fprintf(stderr, "shmddp-nccl:%d NCCL WARN %s; ignored\n", (int)getpid(), err);
  if (on) return 2;
  if (shm_env_choice("NCCL_DEBUG", &v, err, sizeof err) <= 0) return 0;
  if (strcasecmp(v, "WARN") == 0) return 1;
  if (strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0) return 2;
  return 0; /* VERSION, NONE, ABORT: nothing of ours to say */
}

int nccl_debug_level(void)
{
  int l = atomic_load(&debug_level);
  if (l < 0) {
    l = read_debug_level();
    atomic_store(&debug_level, l);
  }
  return l;
}

void nccl_debug_reset(void) { atomic_store(&debug_level, -1); }

static void vlog(ncclComm_t comm, int level, const char *fmt, va_list ap)
{
  char msg[600];
  vsnprintf(msg, sizeof msg, fmt, ap);
  char who[128] = "";
  if (comm && comm->nranks > 0)
    snprintf(who, sizeof who, " [%s%srank %d/%d]", comm->name, comm->name[0] ? " " : "",
             comm->rank, comm->nranks);
  fprintf(stderr, "shmddp-nccl:%d%s NCCL %s %s\n", (int)getpid(), who, level <= 1 ? "WARN" : "INFO",
          msg);
}

void nccl_log(ncclComm_t comm, int level, const char *fmt, ...)
{
  if (nccl_debug_level() < level) return;
  va_list ap;
  va_start(ap, fmt);
  vlog(comm, level, fmt, ap);
  va_end(ap);
}

/* ---- results and errors ---- */

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
  case ncclUnhandledCudaError: return "unhandled cuda error (ncclGetLastError says which call; "
                                      "NCCL_DEBUG=WARN prints it)";
  case ncclSystemError: return "unhandled system error (ncclGetLastError says which call; "
                               "NCCL_DEBUG=WARN prints it)";
  case ncclInternalError: return "internal error in shmddp's NCCL front end";
  case ncclInvalidArgument: return "invalid argument (ncclGetLastError names it)";
  case ncclInvalidUsage: return "invalid usage (ncclGetLastError says what)";
  case ncclRemoteError: return "remote process exited or aborted the communicator";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
NCCL_ALIAS(ncclGetErrorString)

const char *ncclGetLastError(ncclComm_t comm)
{
  if (comm && comm->last_error[0]) return comm->last_error;
  return tl_last;
}
NCCL_ALIAS(ncclGetLastError)

ncclResult_t nccl_fail(ncclComm_t comm, ncclResult_t r, const char *fmt, ...)
{
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (comm && comm->name[0]) snprintf(tl_last, sizeof tl_last, "communicator %s: %s", comm->name, msg);
  else snprintf(tl_last, sizeof tl_last, "%s", msg);
  if (comm) snprintf(comm->last_error, sizeof comm->last_error, "%s", tl_last);
  nccl_log(comm, 1, "%s (%s)", msg, ncclGetErrorString(r));
  return r;
}

ncclResult_t nccl_fail_st(ncclComm_t comm, shmddp_status_t st, shmddp_comm_t *c, const char *what)
{
  return nccl_fail(comm, nccl_result(st), "%s: %s (%s)", what,
                   c ? shmddp_comm_last_error(c) : shmddp_last_error(), shmddp_strerror(st));
}

/* ---- dtypes and ops ---- */

int nccl_dtype(ncclComm_t comm, const char *fn, ncclDataType_t t, shmddp_dtype_t *out)
{
  static const int map[] = {
    [ncclInt8] = SHMDDP_I8, [ncclUint8] = SHMDDP_U8, [ncclInt32] = SHMDDP_I32,
    [ncclUint32] = SHMDDP_U32, [ncclInt64] = SHMDDP_I64, [ncclUint64] = SHMDDP_U64,
    [ncclFloat16] = SHMDDP_F16, [ncclFloat32] = SHMDDP_F32, [ncclFloat64] = SHMDDP_F64,
    [ncclBfloat16] = SHMDDP_BF16, [ncclFloat8e4m3] = SHMDDP_F8E4M3,
    [ncclFloat8e5m2] = SHMDDP_F8E5M2};
  if ((unsigned)t < sizeof map / sizeof map[0]) {
    *out = (shmddp_dtype_t)map[t];
    return 0;
  }
  nccl_fail(comm, ncclInvalidArgument, "%s: argument datatype is %d, not an ncclDataType_t "
            "(0..%d)", fn, (int)t, ncclNumTypes - 1);
  return -1;
}

int nccl_op(ncclComm_t comm, const char *fn, ncclRedOp_t op, shmddp_dtype_t dt, shmddp_op_t *out,
            nccl_scalar_t *premul)
{
  memset(premul, 0, sizeof *premul);
  switch (op) {
  case ncclSum: *out = SHMDDP_SUM; return 0;
  case ncclProd: *out = SHMDDP_PROD; return 0;
  case ncclMax: *out = SHMDDP_MAX; return 0;
  case ncclMin: *out = SHMDDP_MIN; return 0;
  case ncclAvg: *out = SHMDDP_AVG; return 0;
  default: break;
  }
  int i = (int)op - ncclNumOps;
  if (!comm || i < 0 || i >= NCCL_MAX_PREMUL || !comm->premul[i].in_use) {
    nccl_fail(comm, ncclInvalidArgument, "%s: argument op is %d, neither a built-in op nor one "
              "made by ncclRedOpCreatePreMulSum on this communicator (and not destroyed)", fn,
              (int)op);
    return -1;
  }
  const nccl_premul_t *p = &comm->premul[i];
  if (p->dtype != dt) {
    nccl_fail(comm, ncclInvalidArgument, "%s: argument op is a pre-multiplied sum made for %s "
              "data, but datatype is %s", fn, shmddp_dtype_name(p->dtype), shmddp_dtype_name(dt));
    return -1;
  }
  *out = SHMDDP_SUM;
  *premul = p->scalar;
  return 0;
}

/* ---- the config struct ---- */

/* Copy a C string the client owns into a bounded field; NULL and "" leave it empty. */
static void copy_name(char *dst, size_t len, const char *src)
{
  dst[0] = 0;
  if (!src) return;
  size_t n = strnlen(src, len - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

ncclResult_t nccl_parse_config(const ncclConfig_t *config, nccl_config_t *out, char *err,
                               size_t len)
{
  memset(out, 0, sizeof *out);
  out->blocking = 1;
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
  size_t have = config->size;
#define HAS(field) (have >= offsetof(ncclConfig_t, field) + sizeof c.field)
  if (c.blocking != SHMDDP_NCCL_UNSET_INT) {
    if (c.blocking != 0 && c.blocking != 1) {
      snprintf(err, len, "ncclConfig_t.blocking is %d: use 0 or 1", c.blocking);
      return ncclInvalidArgument;
    }
    out->blocking = c.blocking;
  }
  /* CTA bounds steer NCCL's kernels; shmddp sizes its own, so valid bounds are accepted. */
  if (HAS(maxCTAs)) {
    int lo = c.minCTAs, hi = c.maxCTAs;
    if ((lo != SHMDDP_NCCL_UNSET_INT && lo < 1) || (hi != SHMDDP_NCCL_UNSET_INT && hi < 1) ||
        (lo != SHMDDP_NCCL_UNSET_INT && hi != SHMDDP_NCCL_UNSET_INT && lo > hi)) {
      snprintf(err, len, "ncclConfig_t.minCTAs %d / maxCTAs %d: use 1 <= minCTAs <= maxCTAs",
               lo, hi);
      return ncclInvalidArgument;
    }
  }
  if (HAS(splitShare) && c.splitShare != SHMDDP_NCCL_UNSET_INT) {
    if (c.splitShare != 0 && c.splitShare != 1) {
      snprintf(err, len, "ncclConfig_t.splitShare is %d: use 0 or 1", c.splitShare);
      return ncclInvalidArgument;
    }
    out->split_share = c.splitShare;
  }
  if (HAS(commName)) copy_name(out->name, sizeof out->name, c.commName);
#undef HAS
  return ncclSuccess;
}

ncclResult_t nccl_unsupported(const char *name, const char *why)
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
    fprintf(stderr, "shmddp-nccl: %s is not supported by shmddp's NCCL front end (%s); "
            "returning ncclInvalidUsage\n", name, why);
  return nccl_fail(NULL, ncclInvalidUsage, "%s is not supported by shmddp's NCCL front end: %s",
                   name, why);
}
