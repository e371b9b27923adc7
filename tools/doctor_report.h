/* doctor_report.h — the report lines every check writes (doctor_report.c), shared by the host
 * checks (doctor.c) and the GPU checks (doctor_gpu.c, CUDA build). */
#ifndef TOOLS_DOCTOR_REPORT_H
#define TOOLS_DOCTOR_REPORT_H

typedef struct {
  int problems;
  int warnings;
} doctor_t;

typedef enum { DOCTOR_OK, DOCTOR_WARN, DOCTOR_FAIL } doctor_level_t;

/* One line: "[ ok ]", "[warn]" or "[FAIL]", what was checked and the message, then what to do
 * about it (fix; NULL for none). Warnings and failures are counted in d. */
void doctor_report(doctor_t *d, doctor_level_t level, const char *what, const char *fix,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#define doctor_ok(d, what, ...) doctor_report((d), DOCTOR_OK, (what), NULL, __VA_ARGS__)
#define doctor_warn(d, what, fix, ...) doctor_report((d), DOCTOR_WARN, (what), (fix), __VA_ARGS__)
#define doctor_fail(d, what, fix, ...) doctor_report((d), DOCTOR_FAIL, (what), (fix), __VA_ARGS__)

#endif
