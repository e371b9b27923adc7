/* loss_cuda.cu — per-pixel softmax cross-entropy on the GPU: loss, gradient and argmax in one
 * pass over the logits (one thread per pixel: the K classes of a pixel are contiguous in NHWC).
 * A first, cheap pass over the labels counts them (the gradient's divisor) and records the first
 * label out of range; the loss sum is reduced in a fixed order, so it repeats bit for bit.
 *
 * The table's softmax_ce returns host values and so waits for the stream once per step;
 * ops_cuda_softmax_ce_async leaves them on the device, which is what a step captured in a CUDA
 * graph needs (the trainer then reads the loss when it logs, and checks labels now and then). */
#include "config.h"

#include <stdio.h>

#include "kernels/ops_cuda.cuh"

#define NO_BAD 0xffffffffffffffffull

/* Block sum of v in a fixed order (warp shuffles, then the warps' sums by warp 0). */
template <typename V> static __device__ V block_sum(V v)
{
  __shared__ V part[OPC_THREADS / 32];
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
  __syncthreads();
  V s = 0;
  if (threadIdx.x == 0)
    for (int i = 0; i < (int)(blockDim.x / 32); i++) s += part[i];
  __syncthreads();
  return s; /* valid in thread 0 */
}

__global__ void label_count_kernel(const int32_t *labels, size_t P, int K, int ignore,
                                   unsigned long long *bad)
{
  unsigned long long n = 0;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
       p += (size_t)gridDim.x * blockDim.x) {
    int32_t l = labels[p];
    if (l == ignore) continue;
    if (l < 0 || l >= K)
      atomicMin(&bad[0], ((unsigned long long)p << 32) | (uint32_t)l);
    else
      n++;
  }
  n = block_sum(n);
  if (threadIdx.x == 0 && n) atomicAdd(&bad[1], n); /* integer sums: order does not matter */
}

template <typename T>
__global__ void softmax_ce_kernel(const T *logits, const int32_t *labels, size_t P, int K,
                                  int ignore, double scale, double norm_count,
                                  const unsigned long long *counted, T *dlogits, int32_t *pred,
                                  double *part)
{
  double norm = norm_count > 0 ? norm_count : (double)counted[1];
  float coef = norm > 0 ? (float)(scale / norm) : 0.f;
  double loss = 0;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
       p += (size_t)gridDim.x * blockDim.x) {
    const T *z = logits + p * K;
    float zmax = opc_ld(z[0]);
    int best = 0;
    for (int k = 1; k < K; k++)
      if (opc_ld(z[k]) > zmax) { /* strict: ties go to the lower class, as on the CPU */
        zmax = opc_ld(z[k]);
        best = k;
      }
    if (pred) pred[p] = best;
    int32_t l = labels ? labels[p] : ignore;
    int use = labels && l != ignore && l >= 0 && l < K;
    float se = 0.f;
    for (int k = 0; k < K; k++) se += expf(opc_ld(z[k]) - zmax);
    float lse = zmax + logf(se);
    if (use) loss += (double)lse - (double)opc_ld(z[l]);
    if (dlogits) {
      T *d = dlogits + p * K;
      for (int k = 0; k < K; k++)
        d[k] = opc_st<T>(use ? coef * (expf(opc_ld(z[k]) - lse) - (k == l ? 1.f : 0.f)) : 0.f);
    }
  }
  loss = block_sum(loss);
  if (threadIdx.x == 0) part[blockIdx.x] = loss;
}

/* One block: every thread sums a strided subset, then the fixed-order block sum. */
__global__ void loss_final_kernel(const double *part, int nblocks,
                                  const unsigned long long *counted, double *out)
{
  double s = 0;
  for (int i = threadIdx.x; i < nblocks; i += blockDim.x) s += part[i];
  s = block_sum(s);
  if (threadIdx.x == 0) {
    out[0] = s;
    out[1] = (double)counted[1];
  }
}

/* The per-pixel passes' grid: at most one loss partial a slot. */
static unsigned loss_blocks(const ops_t *o, size_t P)
{
  unsigned b = opc_blocks(o, P);
  return b > OPC_SLOT_DOUBLES - 2 ? OPC_SLOT_DOUBLES - 2 : b;
}

int opc_loss_count(const ops_t *o, const int32_t *labels, size_t P, int K, int ignore_index)
{
  opc_ctx_t *x = opc_ctx(o);
  cudaStream_t st = x->stream;
  OPC_CUDA(o, cudaMemsetAsync(&x->bad[1], 0, sizeof(unsigned long long), st));
  const unsigned b = loss_blocks(o, P);
  if (labels && P) {
    label_count_kernel<<<b, OPC_THREADS, 0, st>>>(labels, P, K, ignore_index, x->bad);
    OPC_LAUNCHED(o, "label count");
  }
  return 0;
}

int opc_loss_final(const ops_t *o, int nblocks, double *dev_out)
{
  opc_ctx_t *x = opc_ctx(o);
  if (nblocks < 1 || nblocks > (int)OPC_SLOT_DOUBLES - 2)
    return opc_fail(o, "%d loss partials: 1 to %u", nblocks, OPC_SLOT_DOUBLES - 2);
  loss_final_kernel<<<1, OPC_THREADS, 0, x->stream>>>(x->slots + 2, nblocks, x->bad, dev_out);
  OPC_LAUNCHED(o, "loss sum");
  return 0;
}

template <typename T>
static int softmax_ce_t(const ops_t *o, const void *logits, const int32_t *labels, size_t P,
                        int K, int ignore_index, double scale, double norm_count, void *dlogits,
                        int32_t *pred, double *dev_out)
{
  opc_ctx_t *x = opc_ctx(o);
  cudaStream_t st = x->stream;
  if (K < 1) return opc_fail(o, "softmax cross-entropy over %d classes", K);
  if (opc_loss_count(o, labels, P, K, ignore_index)) return -1;
  const unsigned b = loss_blocks(o, P);
  softmax_ce_kernel<T><<<b, OPC_THREADS, 0, st>>>((const T *)logits, labels, P, K, ignore_index,
                                                  scale, norm_count, x->bad, (T *)dlogits, pred,
                                                  x->slots + 2);
  OPC_LAUNCHED(o, "softmax cross-entropy");
  return opc_loss_final(o, (int)b, dev_out);
}

int ops_cuda_softmax_ce_async(const ops_t *o, const void *logits, const int32_t *labels,
                              size_t P, int K, int ignore_index, double scale, double norm_count,
                              void *dlogits, int32_t *pred, double *dev_out)
{
  OPC_DISPATCH(o, softmax_ce_t, o, logits, labels, P, K, ignore_index, scale, norm_count,
               dlogits, pred, dev_out);
}

/* Waits for the stream; reports (and forgets) a bad label seen since the last check. */
int ops_cuda_check_labels(const ops_t *o)
{
  opc_ctx_t *x = opc_ctx(o);
  unsigned long long *h = (unsigned long long *)(x->host + 2);
  if (ops_cuda_check_labels_async(o, h)) return -1;
  OPC_CUDA(o, cudaStreamSynchronize(x->stream));
  return ops_cuda_labels_result(o, *h);
}

int ops_cuda_check_labels_async(const ops_t *o, unsigned long long *pinned)
{
  opc_ctx_t *x = opc_ctx(o);
  OPC_CUDA(o, cudaMemcpyAsync(pinned, x->bad, sizeof *pinned, cudaMemcpyDeviceToHost, x->stream));
  return 0;
}

int ops_cuda_labels_result(const ops_t *o, unsigned long long word)
{
  if (word == NO_BAD) return 0;
  OPC_CUDA(o, cudaMemsetAsync(opc_ctx(o)->bad, 0xff, sizeof word, opc_ctx(o)->stream));
  return opc_fail(o, "label %d at pixel %llu is outside [0, K) and is not the ignore index",
                  (int)(int32_t)(uint32_t)(word & 0xffffffffu), word >> 32);
}

int opc_softmax_ce(const ops_t *o, const void *logits, const int32_t *labels, size_t P, int K,
                   int ignore_index, double scale, double norm_count, void *dlogits,
                   int32_t *pred, double *loss_sum, long *count)
{
  opc_ctx_t *x = opc_ctx(o);
  if (ops_cuda_softmax_ce_async(o, logits, labels, P, K, ignore_index, scale, norm_count,
                                dlogits, pred, x->slots))
    return -1;
  OPC_CUDA(o, cudaMemcpyAsync(x->host, x->slots, 2 * sizeof(double), cudaMemcpyDeviceToHost,
                              x->stream));
  if (ops_cuda_check_labels(o)) return -1; /* synchronises: host[0..1] are valid after it */
  *loss_sum = x->host[0];
  *count = (long)x->host[1];
  return 0;
}
