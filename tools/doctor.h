/* doctor.h — the report lines every check writes (doctor_report.c), shared by the host checks
 * (doctor.c) and the GPU checks (doctor_gpu.c, CUDA build). */
#ifndef TOOLS_DOCTOR_H
#define TOOLS_DOCTOR_H

typedef struct {
  int problems;
  int warnings;
} doctor_t;

void doctor_ok(doctor_t *d, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void doctor_warn(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void doctor_fail(doctor_t *d, const char *what, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef HAVE_CUDA
/* GPUs, driver, libraries, and P2P verified per pair with a real IPC copy between forked
 * processes. Returns the number of GPUs found (0 when none). */
int doctor_gpus(doctor_t *d);
#endif

#endif
