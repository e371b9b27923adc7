/* doctor_gpu.h — the doctor's GPU checks (doctor_gpu.c, CUDA build only). */
#ifndef TOOLS_DOCTOR_GPU_H
#define TOOLS_DOCTOR_GPU_H

#include "tools/doctor_report.h"

/* GPUs, driver, libraries, and P2P verified per pair with a real IPC copy between forked
 * processes. Returns the number of GPUs found (0 when none). */
int doctor_gpus(doctor_t *d);

#endif
