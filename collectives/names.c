/* names.c — names of statuses, dtypes, ops and algorithms, and their parsers (the size of each
 * dtype is the reductions' business: reduce/dtype.c). */
#include "config.h"

#include <string.h>

#include "shmddp.h"

static const char *const status_names[SHMDDP_NUM_STATUS] = {
  [SHMDDP_OK] = "success",
  [SHMDDP_ERR_INVALID] = "invalid argument",
  [SHMDDP_ERR_NOMEM] = "out of memory",
  [SHMDDP_ERR_SYSTEM] = "system call failed",
  [SHMDDP_ERR_NOSPACE] = "not enough space in /dev/shm",
  [SHMDDP_ERR_ABORTED] = "the group was aborted (a rank failed)",
  [SHMDDP_ERR_TIMEOUT] = "timed out waiting for a peer rank",
  [SHMDDP_ERR_MISMATCH] = "ranks called different collectives",
  [SHMDDP_ERR_UNSUPPORTED] = "not supported in this build or on this machine",
  [SHMDDP_ERR_CUDA] = "CUDA error",
  [SHMDDP_ERR_INTERRUPTED] = "interrupted by a signal",
  [SHMDDP_ERR_INTERNAL] = "internal error",
};

static const char *const dtype_names[SHMDDP_NUM_DTYPES] = {
  [SHMDDP_F32] = "f32", [SHMDDP_F64] = "f64", [SHMDDP_F16] = "f16", [SHMDDP_BF16] = "bf16",
  [SHMDDP_I32] = "i32", [SHMDDP_I64] = "i64", [SHMDDP_I8] = "i8", [SHMDDP_U8] = "u8",
  [SHMDDP_U32] = "u32", [SHMDDP_U64] = "u64", [SHMDDP_F8E4M3] = "f8e4m3",
  [SHMDDP_F8E5M2] = "f8e5m2"};
static const char *const op_names[SHMDDP_NUM_OPS] = {"sum", "avg", "min", "max", "prod"};
static const char *const algo_names[SHMDDP_NUM_ALGOS] = {"auto", "direct", "ring", "twoshot",
                                                         "cering", "staged", "coloc"};

const char *shmddp_strerror(shmddp_status_t status)
{
  if ((int)status < 0 || status >= SHMDDP_NUM_STATUS) return "unknown status";
  return status_names[status];
}

const char *shmddp_dtype_name(shmddp_dtype_t dtype)
{
  return ((int)dtype >= 0 && dtype < SHMDDP_NUM_DTYPES) ? dtype_names[dtype] : "?";
}

const char *shmddp_op_name(shmddp_op_t op)
{
  return ((int)op >= 0 && op < SHMDDP_NUM_OPS) ? op_names[op] : "?";
}

const char *shmddp_algo_name(shmddp_algo_t algo)
{
  return ((int)algo >= 0 && algo < SHMDDP_NUM_ALGOS) ? algo_names[algo] : "?";
}

static int lookup(const char *name, const char *const *names, int n)
{
  if (!name) return -1;
  for (int i = 0; i < n; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

int shmddp_dtype_parse(const char *name)
{
  if (name && strcmp(name, "float") == 0) return SHMDDP_F32;
  if (name && strcmp(name, "half") == 0) return SHMDDP_F16;
  if (name && strcmp(name, "double") == 0) return SHMDDP_F64;
  return lookup(name, dtype_names, SHMDDP_NUM_DTYPES);
}

int shmddp_op_parse(const char *name) { return lookup(name, op_names, SHMDDP_NUM_OPS); }

int shmddp_algo_parse(const char *name) { return lookup(name, algo_names, SHMDDP_NUM_ALGOS); }
