/* doctor_report.h — the report lines every check writes (doctor_report.c), shared by the host
 * checks (doctor.c) and the GPU checks (doctor_gpu.c, CUDA build). */
#ifndef TOOLS_DOCTOR_REPORT_H
#define TOOLS_DOCTOR_REPORT_H

typedef struct {
  int problems;
  int warnings;
} doctor_t;

void doctor_ok(doctor_t *d, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void doctor_warn(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void doctor_fail(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
