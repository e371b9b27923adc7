/* parallel_fixture.h — what the data-parallel equivalence suites (check_ddp, check_dp) train:
 * a small U-Net and data that is a pure function of (step, sample), so every rank, device and
 * single-process reference sees the same images; plus host/device copies and the choice of a
 * rank's GPU. Which GPU cases run is decided by the suites' main (tests/suite_main.h). */
#ifndef TESTS_PARALLEL_FIXTURE_H
#define TESTS_PARALLEL_FIXTURE_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

#include "src/model/model.h"

enum { PF_HW = 16, PF_CLASSES = 3 };

static inline void pf_model_config(model_config_t *mc, int group_norm, int cuda, int local_batch)
{
  model_config_default(mc);
  mc->levels = 3;
  mc->widths[0] = 8;
  mc->widths[1] = 16;
  mc->widths[2] = 16;
  mc->classes = PF_CLASSES;
  mc->norm = group_norm ? MODEL_NORM_GROUP : MODEL_NORM_BATCH;
  mc->groups = 4;
  mc->max_batch = local_batch;
  mc->height = mc->width = PF_HW;
  mc->seed = 7;
  mc->device = cuda ? MODEL_DEVICE_CUDA : MODEL_DEVICE_CPU;
}

/* Sample s of step t: PF_HW x PF_HW x 3 floats in [-0.5, 0.5) and striped labels. */
static inline void pf_sample(int t, int s, float *x, int32_t *y)
{
  unsigned st = (unsigned)(t * 1000 + s) * 2654435761u + 12345u;
  for (int i = 0; i < PF_HW * PF_HW * 3; i++) {
    st = st * 1103515245u + 12345u;
    x[i] = (float)((st >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  for (int i = 0; i < PF_HW * PF_HW; i++) {
    int py = i / PF_HW, px = i % PF_HW;
    y[i] = ((px + t) / 6 + (py + s) / 5) % PF_CLASSES;
  }
}

/* memcpy on the CPU; cudaMemcpy (to_dev: host to device, else back) for a GPU model. */
static inline int pf_copy(int cuda, void *dst, const void *src, size_t bytes, int to_dev)
{
  if (!cuda) {
    memcpy(dst, src, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  return cudaMemcpy(dst, src, bytes, to_dev ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost) ==
                 cudaSuccess ? 0 : -1;
#else
  (void)to_dev;
  return -1;
#endif
}

/* The GPU a process that wants GPU `wanted` (its rank) drives: wanted modulo the visible GPUs,
 * so that every rank of a group runs on a machine with fewer GPUs than ranks (ranks share a GPU;
 * the multi-process path of one GPU, as in shmddp_comm_init_cuda). Call it in the rank, where
 * CUDA may start; -1 and a message when there is no GPU. */
static inline int pf_cuda_device(int wanted, char *err, size_t errlen)
{
#ifdef HAVE_CUDNN
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count < 1) {
    snprintf(err, errlen, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none");
    return -1;
  }
  return (wanted < 0 ? 0 : wanted) % count;
#else
  snprintf(err, errlen, "a build without the CUDA model (device %d)", wanted);
  return -1;
#endif
}

#endif
