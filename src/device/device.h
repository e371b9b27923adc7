/* device.h — the one interface between the trainer and the devices it runs on: host memory (the
 * CPU "devices") or a CUDA GPU. The model, the DDP and DataParallel engines and the training loop
 * use only this (and the ops table the model's layers run through); nothing above src/device/
 * calls the CUDA runtime or knows whether this build has one.
 *
 * A device is a number: DEV_HOST, or a CUDA ordinal. A stream is a void pointer: NULL on the host,
 * where every call runs at once in the calling thread (a copy is a memcpy, an event is the host's
 * clock, a sync is nothing), so the same code is the CPU path and the GPU path. Every call that can
 * fail follows src/check.h. */
#ifndef SRC_DEVICE_DEVICE_H
#define SRC_DEVICE_DEVICE_H

#include <stddef.h>

#include "kernels/ops.h"
#include "shmddp.h"

#define DEV_HOST (-1) /* the device number of host memory (CPU "devices", pinned buffers) */

/* ---- the build and the devices ---- */

/* 1 if this build can drive GPUs (the CUDA runtime and cuDNN are linked in). */
static inline int dev_gpus_built(void)
{
#ifdef HAVE_CUDNN
  return 1;
#else
  return 0;
#endif
}

/* The GPUs this process sees (after CUDA_VISIBLE_DEVICES); 0 without any, or in a build without
 * GPUs. Starts CUDA in the calling process: a program that forks ranks asks in a child. */
int dev_count_visible(void);

/* Make device `dev` current for the calling thread (no-op for DEV_HOST): kernels are launched,
 * events created and memory allocated on the current device. */
int dev_select(int dev, char *err, size_t errlen);

/* Let devs[0] and every other device of devs[0..n) read each other's memory where the hardware
 * allows; *direct (may be NULL) gets 1 if every pair has direct peer access. Copies work either
 * way (the driver stages through the host where P2P is missing). */
int dev_enable_peers(const int *devs, int n, int *direct, char *err, size_t errlen);

/* The PCI bus id of GPU dev ("0000:19:00.0"), for NVML; -1 for the host or on failure. */
int dev_pci_bus_id(int dev, char *buf, size_t len);

/* ---- memory ---- */

/* Free and total bytes of GPU dev (creates the calling process's context there). */
int dev_mem_info(int dev, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);
/* Whether contexts on GPU dev run under MPS (the driver's answer; makes the process's first
 * CUDA call if none was made). 0 with *enabled set, or -1 with the message. */
int dev_mps_enabled(int dev, int *enabled, char *err, size_t errlen);
/* GPU dev's compute mode (cudaComputeMode: 0 Default, 2 Prohibited, 3 Exclusive_Process), read
 * without making a context. 0 with *mode set, or -1 with the message. */
int dev_compute_mode(int dev, int *mode, char *err, size_t errlen);

/* Device memory on the current device (not cleared), for the arena's allocator; NULL when it
 * cannot be had. */
void *dev_alloc(void *ctx, size_t bytes);
void dev_free(void *ctx, void *p);
/* Host memory; pinned != 0: page-locked, which a GPU copies to and from asynchronously and at
 * full speed (any GPU: portable), else plain malloc (a CPU run never touches the CUDA runtime). */
void *dev_host_alloc(int pinned, size_t bytes);
void dev_host_free(int pinned, void *p);
/* bytes of zeros at p on device dev, now (the optimizer state). */
int dev_memset_zero(void *p, int dev, size_t bytes, char *err, size_t errlen);

/* ---- streams ---- */

/* A stream of the current device; high: a priority above the compute streams' (gradient buckets
 * start as soon as they are ready). For DEV_HOST *out is NULL. */
int dev_stream_create(void **out, int dev, int high, char *err, size_t errlen);
void dev_stream_destroy(void *stream);
/* Wait until everything queued on stream has run (no-op on the host). */
int dev_stream_sync(void *stream, char *err, size_t errlen);

/* ---- copies ---- */

/* bytes from src (on src_dev) to dst (on dst_dev), queued on stream (a stream of one of the two
 * devices). Host to host without a stream is a memcpy. */
int dev_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, void *stream,
             char *err, size_t errlen);
/* The same, finished when it returns (set-up and checkpoints, not steps). */
int dev_copy_now(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, char *err,
                 size_t errlen);

/* ---- events ---- */

typedef struct dev_event dev_event_t;

enum {
  DEV_EVENT_ORDER = 0, /* orders streams only */
  DEV_EVENT_TIMING = 1 /* also measures time (dev_event_ms) */
};

/* An event of device dev (made current by the caller). */
int dev_event_create(dev_event_t **out, int dev, int flags, char *err, size_t errlen);
void dev_event_destroy(dev_event_t *e);
/* Record e on stream (a stream of e's device); on the host: now. in_capture: the stream is being
 * captured into a graph and e times it: the record becomes a node of the graph, so every replay
 * records it (dev_event_ms works on replays). */
int dev_event_record(dev_event_t *e, void *stream, char *err, size_t errlen);
int dev_event_record_timing(dev_event_t *e, void *stream, int in_capture, char *err,
                            size_t errlen);
/* Work queued on stream after this call starts once e has completed (any device's stream). */
int dev_event_wait(void *stream, dev_event_t *e, char *err, size_t errlen);
/* Wait until e has completed (at once on the host, and for an event never recorded). */
int dev_event_sync(dev_event_t *e, char *err, size_t errlen);
/* 1 if e has completed, 0 if not yet, -1 on an error. */
int dev_event_done(dev_event_t *e);
/* Milliseconds from a to b, both recorded on one device and completed: 0, or -1 when the device
 * cannot say; dev_event_ms gives 0 then. */
int dev_event_elapsed(const dev_event_t *a, const dev_event_t *b, double *ms);
double dev_event_ms(const dev_event_t *a, const dev_event_t *b);

/* ---- graphs (a stream's work captured once and replayed) ---- */

typedef struct dev_graph dev_graph_t;

/* Start capturing what the calling thread queues on stream (on the host: refused). */
int dev_graph_begin(void *stream, char *err, size_t errlen);
/* End the capture and instantiate it (graph nodes keep their streams' priorities). On a failed
 * capture (ok == 0, or the runtime says so) the capture is ended and dropped, *out is NULL. */
int dev_graph_end(void *stream, int ok, dev_graph_t **out, char *err, size_t errlen);
int dev_graph_launch(dev_graph_t *g, void *stream, char *err, size_t errlen);
size_t dev_graph_nodes(const dev_graph_t *g);
void dev_graph_destroy(dev_graph_t *g);

/* ---- the ops backend of a device ---- */

/* The model's ops table on device dev: the CPU reference for DEV_HOST, the CUDA backend
 * (kernels/ops_cuda.h, cuDNN builds) for a GPU, on a stream of its own. deterministic: the GPU's
 * convolution algorithms by cuDNN's deterministic heuristics rather than timed. The CUDA backend
 * is a shared module with cuBLAS and cuDNN, loaded by the first GPU table (src/device/
 * ops_module.c): a program that never makes one never loads them. */
int dev_ops_init(ops_t *o, ops_dtype_t dtype, int dev, int deterministic, char *err,
                 size_t errlen);
/* Loads the GPU backend now (the CUDA ops module with cuBLAS and cuDNN; at once if loaded), so
 * a program that will run on GPUs finds a missing module or library before any work starts: 0,
 * or -1 with a message that says what to install. It touches no GPU: the launcher may call it
 * before it forks the ranks. info (may be NULL) gets the module's path and the cuDNN and cuBLAS
 * versions it runs on. */
int dev_gpu_backend_load(char *info, size_t infolen, char *err, size_t errlen);
/* The stream every op of o is queued on (NULL on the host). */
void *dev_ops_stream(const ops_t *o);
/* Device memory o holds besides what its caller allocates (for the memory ledger). */
size_t dev_ops_scratch_bytes(const ops_t *o);

/* ---- arithmetic on flat f32 buffers (the optimizer, loss scaling, DataParallel's sum) ---- */

/* Fused optimizer updates on device dev, queued on stream, with exactly the arithmetic of
 * kernels/optim_cpu.h. grad: n gradients of grad_dtype (OPS_F32; on a GPU also the 16-bit
 * working gradients, read as they are); lowp: NULL, or (GPU) where the updated parameters are
 * also written in lowp_dtype, the model's 16-bit working copy. */
int dev_sgd(int dev, float *p, const void *grad, ops_dtype_t grad_dtype, float *mom, size_t n,
            double lr, double wd, double momentum, int nesterov, double grad_scale, void *lowp,
            ops_dtype_t lowp_dtype, void *stream, char *err, size_t errlen);
int dev_adamw(int dev, float *p, const void *grad, ops_dtype_t grad_dtype, float *m, float *v,
              size_t n, double lr, double beta1, double beta2, double eps, double wd, double bc1,
              double bc2, double grad_scale, void *lowp, ops_dtype_t lowp_dtype, void *stream,
              char *err, size_t errlen);
/* *found = 1 if any of g[0..n) is inf or NaN, else 0; waits for stream. */
int dev_nonfinite(int dev, const float *g, size_t n, void *stream, int *found, char *err,
                  size_t errlen);
/* dst = reduce(srcs[0], ..., srcs[nsrc-1]) element-wise in that order, in dtype's accumulator
 * type, rounded once; op AVG divides by avg_div (collectives/reduce/reduce_cpu.h's arithmetic, the same
 * bits on the GPU); dst may alias a source; 1 <= nsrc <= SHMDDP_MAX_RANKS. Queued on stream. */
int dev_reduce(void *dst, const void *const *srcs, int nsrc, size_t n, shmddp_dtype_t dtype,
               shmddp_op_t op, int avg_div, int dev, void *stream, char *err, size_t errlen);

/* dst = src converted between f32 and f16/bf16 (round to nearest even; collectives/reduce/reduce_cpu.h's
 * reduce_cpu_convert, the same bits on the GPU), n elements on dev, queued on stream. */
int dev_convert(void *dst, shmddp_dtype_t dst_t, const void *src, shmddp_dtype_t src_t, size_t n,
                int dev, void *stream, char *err, size_t errlen);

/* ---- collectives on a device's buffers ---- */

/* Prepare comm for buffers on GPU dev (the device transport; collective: every rank calls it);
 * max_blocks > 0 caps the blocks of its bandwidth-bound algorithms. No-op for DEV_HOST. */
int dev_comm_attach(shmddp_comm_t *comm, int dev, int max_blocks, char *err, size_t errlen);
/* Errors the device collectives queued so far have met (no-op for DEV_HOST). */
int dev_comm_check(shmddp_comm_t *comm, int dev, char *err, size_t errlen);
/* Wait for comm's collectives queued on stream (no-op for DEV_HOST). */
int dev_comm_sync(shmddp_comm_t *comm, int dev, void *stream, char *err, size_t errlen);

#endif
