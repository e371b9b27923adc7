/* doctor_report.c — the doctor's report lines: every check, on the host (doctor.c) or the GPUs
 * (doctor_gpu.c), ends in one of them: ok, warn or FAIL, with what to do about it. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "tools/doctor_report.h"

static void line(const char *tag, const char *what, const char *fix, const char *fmt, va_list ap)
{
  printf("[%s] %-14s ", tag, what);
  vprintf(fmt, ap);
  printf("\n");
  if (fix) printf("       %-14s -> %s\n", "", fix);
}

void doctor_ok(doctor_t *d, const char *what, const char *fmt, ...)
{
  (void)d;
  va_list ap;
  va_start(ap, fmt);
  line(" ok ", what, NULL, fmt, ap);
  va_end(ap);
}

void doctor_warn(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
{
  d->warnings++;
  va_list ap;
  va_start(ap, fmt);
  line("warn", what, fix, fmt, ap);
  va_end(ap);
}

void doctor_fail(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
{
  d->problems++;
  va_list ap;
  va_start(ap, fmt);
  line("FAIL", what, fix, fmt, ap);
  va_end(ap);
}
