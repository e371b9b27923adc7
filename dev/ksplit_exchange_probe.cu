/* ksplit_exchange_probe.cu — what the f32 exchange of a K split inside one block would cost,
 * before such a convolution is written (bench/results/conv_sm90_notes.md item 23: dec0.conv1's
 * 128 -> 64 forward with the two consumer warpgroups each holding half of K's weights in
 * registers, each computing both image rows of a 2 x 64-pixel tile over its half, then handing
 * the other warpgroup the row that one finishes: 64 channels x 64 pixels of f32, 16 KB, through
 * shared memory, added as own + peer).
 *
 * The kernel stands in for that loop without the matrix products: one block of two warpgroups a
 * multiprocessor, each thread holding two rows of 32 accumulators (an m64n64 f32 fragment per
 * row, as wgmma leaves them); per tile each thread forms its partials, writes the row it does
 * not finish into its warpgroup's half of a double-buffered exchange area ([register][thread]:
 * consecutive threads, consecutive words), meets the other warpgroup at a barrier, and adds the
 * peer's same-position value to the row it finishes, then into a checksum. Double buffering
 * needs one barrier a tile: a warpgroup writes a buffer again only after the barrier that the
 * peer reaches after reading it. Three variants: no exchange and no barrier (the partials'
 * own cost), the barrier alone, the exchange. Every thread's checksums are compared with the
 * host's f64 sums of the same small integers (exact in f32 at these counts).
 *
 * Reported (ksplit_exchange_probe): the time a tile of each variant takes on every
 * multiprocessor at once, from CUDA events after a warm-up launch; the exchange's own cost is
 * the third minus the first. */
#include "config.h"

#include "dev/ksplit_exchange_probe.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define KX_THREADS 256 /* two warpgroups */
#define KX_WG 128
#define KX_REGS 32 /* a row's accumulators a thread: 64 x 64 f32 over 128 threads */

/* The partial of warpgroup h for row q, accumulator i, tile t: small integers, exact in f32. */
__host__ __device__ static inline float kx_partial(int h, int q, int i, int t)
{
  return (float)(h * 64 + q * 32 + i) + (float)t;
}

/* MODE 0: partials only; 1: and the barrier; 2: and the exchange. */
template <int MODE>
__global__ void __launch_bounds__(KX_THREADS, 1) kx_kernel(int tiles, double *out)
{
  extern __shared__ float kx_buf[]; /* [2 buffers][2 warpgroups][KX_REGS][KX_WG] */
  const int tid = threadIdx.x, h = tid / KX_WG, tl = tid % KX_WG;
  float cs[KX_REGS];
#pragma unroll
  for (int i = 0; i < KX_REGS; i++) cs[i] = 0.f;
#pragma unroll 1
  for (int t = 0; t < tiles; t++) {
    float a0[KX_REGS], a1[KX_REGS]; /* rows 0 and 1 */
#pragma unroll
    for (int i = 0; i < KX_REGS; i++)
      a0[i] = kx_partial(h, 0, i, t), a1[i] = kx_partial(h, 1, i, t);
    if (MODE == 2) {
      float *mine = kx_buf + ((size_t)(t & 1) * 2 + h) * KX_REGS * KX_WG;
      const float *peer = kx_buf + ((size_t)(t & 1) * 2 + (1 - h)) * KX_REGS * KX_WG;
#pragma unroll
      for (int i = 0; i < KX_REGS; i++) mine[i * KX_WG + tl] = h ? a0[i] : a1[i];
      __syncthreads();
#pragma unroll
      for (int i = 0; i < KX_REGS; i++) cs[i] += (h ? a1[i] : a0[i]) + peer[i * KX_WG + tl];
    } else {
      if (MODE == 1) __syncthreads();
#pragma unroll
      for (int i = 0; i < KX_REGS; i++) cs[i] += h ? a1[i] : a0[i];
    }
  }
  double s = 0;
#pragma unroll
  for (int i = 0; i < KX_REGS; i++) s += cs[i];
  out[(size_t)blockIdx.x * KX_THREADS + tid] = s;
}

/* The host's checksum of a thread of warpgroup h after `tiles` tiles of a mode. */
static double kx_expected(int mode, int h, int tiles)
{
  double s = 0;
  for (int i = 0; i < KX_REGS; i++)
    for (int t = 0; t < tiles; t++) {
      s += kx_partial(h, h, i, t);
      if (mode == 2) s += kx_partial(1 - h, h, i, t);
    }
  return s;
}

#define KX_CU(call, what)                                                                        \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e_));                             \
      goto done;                                                                                 \
    }                                                                                            \
  } while (0)

int ksplit_exchange_probe(int tiles, double us_tile[3], char *err, size_t errlen)
{
  const size_t smem = 2 * 2 * KX_REGS * KX_WG * sizeof(float); /* 64 KB */
  void (*k[3])(int, double *) = {kx_kernel<0>, kx_kernel<1>, kx_kernel<2>};
  int sms = 0, rc = -1;
  double *d = NULL, *hbuf = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  if (tiles < 1 || tiles > 1000) {
    snprintf(err, errlen, "ksplit_exchange_probe: %d tiles (1 to 1000: the checksums stay exact)",
             tiles);
    return -1;
  }
  KX_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "the device");
  KX_CU(cudaMalloc(&d, (size_t)sms * KX_THREADS * sizeof(double)), "cudaMalloc");
  hbuf = (double *)malloc((size_t)sms * KX_THREADS * sizeof(double));
  if (!hbuf) {
    snprintf(err, errlen, "ksplit_exchange_probe: out of host memory");
    goto done;
  }
  KX_CU(cudaEventCreate(&ev[0]), "cudaEventCreate");
  KX_CU(cudaEventCreate(&ev[1]), "cudaEventCreate");
  for (int m = 0; m < 3; m++) {
    KX_CU(cudaFuncSetAttribute((const void *)k[m], cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)smem),
          "cudaFuncSetAttribute");
    k[m]<<<sms, KX_THREADS, smem>>>(tiles, d); /* warm-up */
    KX_CU(cudaGetLastError(), "the probe's launch");
    KX_CU(cudaEventRecord(ev[0]), "cudaEventRecord");
    k[m]<<<sms, KX_THREADS, smem>>>(tiles, d);
    KX_CU(cudaEventRecord(ev[1]), "cudaEventRecord");
    KX_CU(cudaEventSynchronize(ev[1]), "the probe");
    float ms = 0;
    KX_CU(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
    us_tile[m] = ms * 1e3 / tiles;
    KX_CU(cudaMemcpy(hbuf, d, (size_t)sms * KX_THREADS * sizeof(double), cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    for (int b = 0; b < sms; b++)
      for (int t = 0; t < KX_THREADS; t++) {
        const double want = kx_expected(m, t / KX_WG, tiles), got = hbuf[b * KX_THREADS + t];
        if (got != want) {
          snprintf(err, errlen,
                   "ksplit_exchange_probe: mode %d, block %d thread %d: checksum %.17g, want %.17g",
                   m, b, t, got, want);
          goto done;
        }
      }
  }
  rc = 0;
done:
  for (int i = 0; i < 2; i++)
    if (ev[i]) cudaEventDestroy(ev[i]);
  cudaFree(d);
  free(hbuf);
  return rc;
}
