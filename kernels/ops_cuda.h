/* ops_cuda.h — the CUDA backend of ops.h (cuDNN convolutions, own kernels for the rest), plus
 * the device-side pieces the trainer needs around it: an allocator for the arena, the fused
 * optimizer updates over the flat f32 buffers and the non-finite check for loss scaling. The
 * trainer reaches all of it through the ops table (the loss without a wait: softmax_ce_async and
 * the label checks) and src/device/device.h (the rest), never directly.
 * Built only with cuDNN (HAVE_CUDNN), into the CUDA ops module that the trainer loads on first
 * GPU use (kernels/ops_cuda_module.h); tests and dev/ programs that call these functions
 * themselves link libopscuda.la before the trainer's archives. */
#ifndef KERNELS_OPS_CUDA_H
#define KERNELS_OPS_CUDA_H

#include <stddef.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills o for dtype OPS_F32 (TF32 allowed in convolutions), OPS_BF16 or OPS_F16 (f32
 * accumulation) on CUDA device `device`, which becomes the calling thread's current device.
 * stream (a cudaStream_t) is the compute stream every op is queued on; NULL makes the backend
 * create its own (blocking) stream, destroyed with o. All pointers passed to the ops are device
 * memory, the f64 statistics buffers too. Only softmax_ce waits for the device (its host
 * loss_sum/count); every other op only queues work, so a step can be captured in a CUDA graph
 * (conv_plan excepted: it searches algorithms and allocates, call it before capturing).
 * Returns 0, or non-zero with a message in err. */
int ops_cuda_init(ops_t *o, ops_dtype_t dtype, int device, void *stream, char *err,
                  size_t errlen);

/* How conv_plan chooses convolution algorithms (call before planning). on != 0, the default:
 * cuDNN's heuristics, restricted to algorithms cuDNN marks deterministic, so every run on the
 * same GPU model and cuDNN version computes bit-identical results (what bitwise resume needs).
 * on == 0: time every algorithm once per shape and take the fastest, deterministic or not (the
 * equivalent of cudnn.benchmark); two runs may then differ in the last bits. The environment
 * variable SHMDDP_CONV_SEARCH=heuristic|timed overrides either, for experiments. */
void ops_cuda_set_deterministic(ops_t *o, int on);

/* The compute stream (cudaStream_t) of a CUDA ops table, for hooks and the optimizer. */
void *ops_cuda_stream(const ops_t *o);

/* How a call of the 2x2 transposed convolution planned in c, at batch n with weights w and
 * weight gradient dw, takes its operands: the bits below where one goes through an aligned
 * copy in the workspace (cuBLAS's fast kernels need 16-byte aligned matrices), 0 where all are
 * used in place or the layer does not run on cuBLAS. For tests of that choice. */
#define OPS_CUDA_UP_STAGE_WEIGHTS 1u /* forward and input gradient read a copy of w */
#define OPS_CUDA_UP_STAGE_WGRAD 2u   /* the weight gradient's one GEMM writes an f32 copy */
unsigned ops_cuda_conv_up_route(const ops_t *o, const ops_conv_t *c, int n, const void *w,
                                const void *dw);

/* Device memory the backend holds besides the conv workspaces (reduction partials, result
 * slots), for the memory ledger's workspace category. */
size_t ops_cuda_scratch_bytes(const ops_t *o);

/* softmax_ce without the wait: loss_sum (f64) and count (f64) are written to device memory
 * (two doubles at dev_out) and nothing is read back, so a step using it can be captured in a
 * CUDA graph. A bad label is then reported by the next call of ops_cuda_check_labels. */
int ops_cuda_softmax_ce_async(const ops_t *o, const void *logits, const int32_t *labels,
                              size_t P, int K, int ignore_index, double scale, double norm_count,
                              void *dlogits, int32_t *pred, double *dev_out);
/* Waits for the stream and reports a label outside [0, K) seen by a softmax_ce call since the
 * last check (0: none). */
int ops_cuda_check_labels(const ops_t *o);
/* The same check without waiting: _async queues a copy of the bad-label word into *pinned (host
 * memory the device can write, e.g. cudaMallocHost; capturable in a CUDA graph); once that copy
 * is done, ops_cuda_labels_result(o, *pinned) gives 0, or -1 with the message. */
int ops_cuda_check_labels_async(const ops_t *o, unsigned long long *pinned);
int ops_cuda_labels_result(const ops_t *o, unsigned long long word);


/* Fused optimizer updates over flat f32 device buffers on `stream`, with exactly the
 * arithmetic of optim_cpu_sgd / optim_cpu_adamw (kernels/optim_cpu.h). The gradients are
 * grad_dtype: OPS_F32, or the 16-bit working gradients (OPS_BF16, OPS_F16) read as they are —
 * widening them is exact, so the update is the one from their f32 copy, bit for bit. When lowp
 * is not NULL the updated parameters are also written there in lowp_dtype (OPS_BF16 or
 * OPS_F16): the 16-bit working copy of the weights without a separate cast pass. */
int ops_cuda_sgd(float *p, const void *grad, ops_dtype_t grad_dtype, float *mom, size_t n,
                 double lr, double wd, double momentum, int nesterov, double grad_scale,
                 void *lowp, ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen);
int ops_cuda_adamw(float *p, const void *grad, ops_dtype_t grad_dtype, float *m, float *v,
                   size_t n, double lr, double beta1, double beta2, double eps, double wd,
                   double bc1, double bc2, double grad_scale, void *lowp,
                   ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen);

/* *found = 1 if any of g[0..n) (device memory) is inf or NaN, else 0; waits for `stream`.
 * ops_cuda_nonfinite_async instead ORs the answer into the device int *dev_flag (which the
 * caller zeroes), for steps captured in a CUDA graph or flags summed over ranks on the device. */
int ops_cuda_nonfinite(const float *g, size_t n, void *stream, int *found, char *err,
                       size_t errlen);
int ops_cuda_nonfinite_async(const float *g, size_t n, int *dev_flag, void *stream, char *err,
                             size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
