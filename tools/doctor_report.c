/* doctor_report.c — the doctor's report lines: every check, on the host (doctor.c) or the GPUs
 * (doctor_gpu.c), ends in one of them: ok, warn or FAIL, with what to do about it. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "tools/doctor_report.h"

void doctor_report(doctor_t *d, doctor_level_t level, const char *what, const char *fix,
                   const char *fmt, ...)
{
  static const char *const tag[] = {[DOCTOR_OK] = " ok ", [DOCTOR_WARN] = "warn",
                                    [DOCTOR_FAIL] = "FAIL"};
  if (level == DOCTOR_WARN) d->warnings++;
  if (level == DOCTOR_FAIL) d->problems++;
  printf("[%s] %-14s ", tag[level], what);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  if (fix) printf("       %-14s -> %s\n", "", fix);
}
