/* ops_cpu.c — the CPU backend's error reporting (ops_cpu_fail, which every CPU op calls, read
 * back through the tables' last_error) and the dtypes' names. The tables themselves, which hold
 * the ops, are kernels/ops_cpu_tables.c. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/ops_cpu.h"

static _Thread_local char cpu_err[256];

int ops_cpu_fail(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cpu_err, sizeof cpu_err, fmt, ap);
  va_end(ap);
  return -1;
}

const char *ops_cpu_last_error(const ops_t *o) { return cpu_err[0] ? cpu_err : "no error"; }

const char *ops_dtype_name(ops_dtype_t d)
{
  switch (d) {
  case OPS_F32: return "f32";
  case OPS_F64: return "f64";
  case OPS_BF16: return "bf16";
  case OPS_F16: return "f16";
  }
  return "?";
}
