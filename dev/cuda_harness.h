/* cuda_harness.h — what the CUDA harnesses of dev/ share (cuda_harness.c): giving up with a
 * message, and the copy rate of the GPU, the yardstick of their bandwidth figures. A harness
 * defines DIE(...) as harness_die(its exit status, ...), which CU uses. */
#ifndef DEV_CUDA_HARNESS_H
#define DEV_CUDA_HARNESS_H

#include <cuda_runtime_api.h>
#include <stddef.h>

/* "PROGRAM: message" on stderr, then exit(status). */
void harness_die(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* A CUDA call that must succeed. */
#define CU(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) DIE("%s: %s", #call, cudaGetErrorString(e_));                      \
  } while (0)

/* Bytes read and written per second by a device-to-device copy of 512 MiB on stream s of the
 * current GPU: the median of 7 copies after 2 unmeasured. < 0 with the failed call in err. */
double harness_copy_rate(cudaStream_t s, char *err, size_t errlen);

#endif
