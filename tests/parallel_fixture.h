/* parallel_fixture.h — what the data-parallel equivalence suites (check_ddp, check_dp, and
 * mpi_ddp across nodes) train: a small U-Net and data that is a pure function of (step, sample),
 * so every rank, device and single-process reference sees the same images; host/device copies,
 * the choice of a rank's GPU, and the DDP training loop itself. Which GPU cases run is decided
 * by the suites' main (tests/suite_main.h). */
#ifndef TESTS_PARALLEL_FIXTURE_H
#define TESTS_PARALLEL_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

#include "src/model/model.h"
#include "src/model/optim.h"
#include "src/parallel/ddp.h"

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

/* Trains model m with the DDP engine d for `steps` steps of SGD (lr 0.05, momentum 0.9): every
 * step `accum` micro-batches of micro_n samples, samples [first, first + accum * micro_n) of
 * that step (pf_sample), the gradients averaged over d's ranks after the last micro-batch. cuda:
 * m is a GPU model (the batches are uploaded). 0, or -1 with the reason in err. */
static inline int pf_ddp_train(model_t *m, ddp_t *d, int cuda, int steps, int first, int micro_n,
                               int accum, int sync_bn, char *err, size_t errlen)
{
  size_t xb = sizeof(float) * (size_t)micro_n * PF_HW * PF_HW * 3;
  size_t yb = sizeof(int32_t) * (size_t)micro_n * PF_HW * PF_HW;
  float *x = malloc(xb);
  int32_t *y = malloc(yb);
  void *xd = x, *yd = y;
  optim_t *o = NULL;
  int rc = x && y ? 0 : -1;
  if (rc) snprintf(err, errlen, "out of memory for the batches");
#ifdef HAVE_CUDNN
  if (rc == 0 && cuda && (cudaMalloc(&xd, xb) != cudaSuccess || cudaMalloc(&yd, yb) != cudaSuccess))
    rc = -1, snprintf(err, errlen, "no device memory for the batches");
#endif
  optim_config_t oc;
  optim_config_default(&oc, OPTIM_SGD);
  oc.lr = 0.05;
  oc.momentum = 0.9;
  if (rc == 0) rc = optim_create(&o, &oc, model_flat_size(m), model_arena(m), err, errlen);
  for (int t = 0; rc == 0 && t < steps; t++) {
    for (int k = 0; rc == 0 && k < accum; k++) {
      for (int s = 0; s < micro_n; s++)
        pf_sample(t, first + k * micro_n + s, x + (size_t)s * PF_HW * PF_HW * 3,
                  y + (size_t)s * PF_HW * PF_HW);
      if (pf_copy(cuda, xd, x, xb, 1) || pf_copy(cuda, yd, y, yb, 1)) {
        snprintf(err, errlen, "uploading a batch failed");
        rc = -1;
        break;
      }
      ddp_batch_t b = {.x = xd, .y = yd, .n = micro_n, .loss_scale = 1.0f, .accumulate = k > 0,
                       .last = k == accum - 1, .sync_bn = sync_bn};
      float loss;
      rc = ddp_step(d, &b, err, errlen);
      if (rc == 0) rc = model_step_loss(m, &loss, err, errlen);
    }
    if (rc == 0) rc = ddp_update(d, o, optim_lr_at(&oc, t), 1.0 / accum, err, errlen);
  }
  if (o) optim_destroy(o);
#ifdef HAVE_CUDNN
  if (cuda) {
    if (xd != x) cudaFree(xd);
    if (yd != y) cudaFree(yd);
  }
#endif
  free(x);
  free(y);
  return rc;
}

#endif
