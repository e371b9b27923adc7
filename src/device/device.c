/* device.c — the device interface (device.h) over the CUDA runtime, and its host fallback: on the
 * host (DEV_HOST, or a build without GPUs) a copy is a memcpy, an event the monotonic clock, a sync
 * nothing. The only file of the trainer, with the other device_*.c, that calls the CUDA runtime. */
#include "config.h"

#include "src/device/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/check.h"
#include "src/clock.h"

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

struct dev_event {
  int dev;
  double host_ms; /* host: when it was recorded */
#ifdef HAVE_CUDNN
  cudaEvent_t ev;
#endif
};

struct dev_graph {
#ifdef HAVE_CUDNN
  cudaGraph_t graph;
  cudaGraphExec_t exec;
#endif
  size_t nodes;
};

#ifndef HAVE_CUDNN
static int no_gpus(char *err, size_t errlen)
{
  return check_fail(err, errlen, "this build has no GPU support (configured without CUDA and "
                                 "cuDNN): use --device cpu");
}
#endif

int dev_count_visible(void)
{
#ifdef HAVE_CUDNN
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
#else
  return 0;
#endif
}

int dev_select(int dev, char *err, size_t errlen)
{
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaSetDevice(dev));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_mem_info(int dev, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen)
{
  *free_bytes = *total_bytes = 0;
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaSetDevice(dev));
  CHECK_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_mps_enabled(int dev, int *enabled, char *err, size_t errlen)
{
  *enabled = 0;
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaSetDevice(dev));
  CHECK_CUDA(cudaFree(NULL)); /* the context: under MPS, the connection to the server */
  CHECK_CUDA(cudaDeviceGetAttribute(enabled, cudaDevAttrMpsEnabled, dev));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_compute_mode(int dev, int *mode, char *err, size_t errlen)
{
  *mode = 0;
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaDeviceGetAttribute(mode, cudaDevAttrComputeMode, dev));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_enable_peers(const int *devs, int n, int *direct, char *err, size_t errlen)
{
  if (direct) *direct = 1;
  if (n < 2 || devs[0] == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  for (int i = 1; i < n; i++) {
    int pair[2][2] = {{devs[0], devs[i]}, {devs[i], devs[0]}};
    for (int k = 0; k < 2; k++) {
      int can = 0;
      CHECK_CUDA(cudaDeviceCanAccessPeer(&can, pair[k][0], pair[k][1]));
      if (!can) {
        if (direct) *direct = 0;
        continue;
      }
      CHECK_CUDA(cudaSetDevice(pair[k][0]));
      cudaError_t e = cudaDeviceEnablePeerAccess(pair[k][1], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError(); /* not an error: clear it */
      } else if (e != cudaSuccess) {
        return check_fail(err, errlen, "enabling peer access from GPU %d to GPU %d: %s",
                          pair[k][0], pair[k][1], cudaGetErrorString(e));
      }
    }
  }
  CHECK_CUDA(cudaSetDevice(devs[0]));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_pci_bus_id(int dev, char *buf, size_t len)
{
  if (dev == DEV_HOST || len == 0) return -1;
#ifdef HAVE_CUDNN
  return cudaDeviceGetPCIBusId(buf, (int)len, dev) == cudaSuccess ? 0 : -1;
#else
  return -1;
#endif
}

/* ---- memory ---- */

void *dev_alloc(void *ctx, size_t bytes)
{
  (void)ctx;
#ifdef HAVE_CUDNN
  void *p = NULL;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError(); /* an allocation failure is not sticky: clear it for the next call */
    return NULL;
  }
  return p;
#else
  (void)bytes;
  return NULL;
#endif
}

void dev_free(void *ctx, void *p)
{
  (void)ctx;
#ifdef HAVE_CUDNN
  if (p) cudaFree(p);
#else
  (void)p;
#endif
}

void *dev_host_alloc(int pinned, size_t bytes)
{
  if (!pinned) return malloc(bytes);
#ifdef HAVE_CUDNN
  void *p = NULL;
  /* portable: DataParallel's devices all copy from it */
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess) return p;
#endif
  return NULL;
}

void dev_host_free(int pinned, void *p)
{
  if (!pinned) {
    free(p);
    return;
  }
#ifdef HAVE_CUDNN
  if (p) cudaFreeHost(p);
#endif
}

int dev_memset_zero(void *p, int dev, size_t bytes, char *err, size_t errlen)
{
  if (dev == DEV_HOST) {
    memset(p, 0, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaMemset(p, 0, bytes));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

/* ---- streams ---- */

int dev_stream_create(void **out, int dev, int high, char *err, size_t errlen)
{
  *out = NULL;
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  cudaStream_t s;
  if (high) {
    int lo, hi;
    CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    CHECK_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi));
  } else {
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  *out = s;
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

void dev_stream_destroy(void *stream)
{
#ifdef HAVE_CUDNN
  if (stream) cudaStreamDestroy((cudaStream_t)stream);
#else
  (void)stream;
#endif
}

int dev_stream_sync(void *stream, char *err, size_t errlen)
{
  if (!stream) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

/* ---- copies ---- */

int dev_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, void *stream,
             char *err, size_t errlen)
{
  if (!bytes) return 0;
  if (dst_dev == DEV_HOST && src_dev == DEV_HOST && !stream) {
    memcpy(dst, src, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  cudaStream_t st = (cudaStream_t)stream;
  if (dst_dev == DEV_HOST || src_dev == DEV_HOST)
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st)); /* pinned host memory */
  else if (dst_dev == src_dev)
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st));
  else
    CHECK_CUDA(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, st));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_copy_now(void *dst, int dst_dev, const void *src, int src_dev, size_t bytes, char *err,
                 size_t errlen)
{
  if (!bytes) return 0;
  if (dst_dev == DEV_HOST && src_dev == DEV_HOST) {
    memcpy(dst, src, bytes);
    return 0;
  }
#ifdef HAVE_CUDNN
  enum cudaMemcpyKind kind = dst_dev == DEV_HOST   ? cudaMemcpyDeviceToHost
                             : src_dev == DEV_HOST ? cudaMemcpyHostToDevice
                                                   : cudaMemcpyDefault;
  CHECK_CUDA(cudaMemcpy(dst, src, bytes, kind));
  /* From pageable host memory cudaMemcpy may return once the data is staged, before the DMA
   * lands; work queued next on a non-blocking stream is not ordered behind it. "Now" means
   * done: wait for the legacy stream the copy ran on (seen as a wrong first all-reduce in
   * dev/mpi_allreduce_bench on the H200). */
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDefault)
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

/* ---- events ---- */

int dev_event_create(dev_event_t **out, int dev, int flags, char *err, size_t errlen)
{
  dev_event_t *e = calloc(1, sizeof *e);
  *out = e;
  if (!e) return check_fail(err, errlen, "out of memory for an event");
  e->dev = dev;
  if (dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  if (flags & DEV_EVENT_TIMING)
    CHECK_CUDA(cudaEventCreate(&e->ev));
  else
    CHECK_CUDA(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
  return 0;
#else
  (void)flags;
  return no_gpus(err, errlen);
#endif
}

void dev_event_destroy(dev_event_t *e)
{
  if (!e) return;
#ifdef HAVE_CUDNN
  if (e->dev != DEV_HOST && e->ev) cudaEventDestroy(e->ev);
#endif
  free(e);
}

int dev_event_record(dev_event_t *e, void *stream, char *err, size_t errlen)
{
  return dev_event_record_timing(e, stream, 0, err, errlen);
}

int dev_event_record_timing(dev_event_t *e, void *stream, int in_capture, char *err,
                            size_t errlen)
{
  if (e->dev == DEV_HOST) {
    e->host_ms = clock_ms();
    return 0;
  }
#ifdef HAVE_CUDNN
  if (in_capture)
    CHECK_CUDA(cudaEventRecordWithFlags(e->ev, (cudaStream_t)stream, cudaEventRecordExternal));
  else
    CHECK_CUDA(cudaEventRecord(e->ev, (cudaStream_t)stream));
  return 0;
#else
  (void)stream;
  (void)in_capture;
  return no_gpus(err, errlen);
#endif
}

int dev_event_wait(void *stream, dev_event_t *e, char *err, size_t errlen)
{
  if (e->dev == DEV_HOST) return 0; /* the host ran it already */
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaStreamWaitEvent((cudaStream_t)stream, e->ev, 0));
  return 0;
#else
  (void)stream;
  return no_gpus(err, errlen);
#endif
}

int dev_event_sync(dev_event_t *e, char *err, size_t errlen)
{
  if (e->dev == DEV_HOST) return 0;
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaEventSynchronize(e->ev));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_event_done(dev_event_t *e)
{
  if (e->dev == DEV_HOST) return 1;
#ifdef HAVE_CUDNN
  cudaError_t r = cudaEventQuery(e->ev);
  return r == cudaSuccess ? 1 : r == cudaErrorNotReady ? 0 : -1;
#else
  return -1;
#endif
}

int dev_event_elapsed(const dev_event_t *a, const dev_event_t *b, double *ms)
{
  if (a->dev == DEV_HOST) {
    *ms = b->host_ms - a->host_ms;
    return 0;
  }
#ifdef HAVE_CUDNN
  float f = 0;
  if (cudaEventElapsedTime(&f, a->ev, b->ev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  *ms = f;
  return 0;
#else
  return -1;
#endif
}

double dev_event_ms(const dev_event_t *a, const dev_event_t *b)
{
  double ms = 0;
  return dev_event_elapsed(a, b, &ms) == 0 ? ms : 0;
}

/* ---- graphs ---- */

int dev_graph_begin(void *stream, char *err, size_t errlen)
{
  if (!stream) return check_fail(err, errlen, "there is nothing to capture on the host");
#ifdef HAVE_CUDNN
  /* Thread-local: the loader's threads may touch CUDA (pinned memory) while this one captures. */
  CHECK_CUDA(cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal));
  return 0;
#else
  return no_gpus(err, errlen);
#endif
}

int dev_graph_end(void *stream, int ok, dev_graph_t **out, char *err, size_t errlen)
{
  *out = NULL;
#ifdef HAVE_CUDNN
  cudaGraph_t graph = NULL;
  cudaError_t ce = cudaStreamEndCapture((cudaStream_t)stream, &graph);
  if (!ok || ce != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (!ok) return -1; /* the caller's message stands */
    return check_fail(err, errlen, "cudaStreamEndCapture: %s", cudaGetErrorString(ce));
  }
  dev_graph_t *g = calloc(1, sizeof *g);
  if (!g) {
    cudaGraphDestroy(graph);
    return check_fail(err, errlen, "out of memory for a graph");
  }
  g->graph = graph;
  /* Node priorities as captured: kernels of a high-priority stream (the gradient buckets') keep
   * their priority inside the graph; without the flag every node runs at the launch stream's
   * (the two are within noise in DDP: see bench/results/ddp_2xh200.tsv, c4429ca, the
   * SHMDDP_GRAPH_PRIORITY=0 row). */
  ce = cudaGraphInstantiateWithFlags(&g->exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  if (ce != cudaSuccess) {
    dev_graph_destroy(g);
    return check_fail(err, errlen, "cudaGraphInstantiateWithFlags: %s", cudaGetErrorString(ce));
  }
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, NULL, &nodes) == cudaSuccess) g->nodes = nodes;
  *out = g;
  return 0;
#else
  (void)stream;
  (void)ok;
  return no_gpus(err, errlen);
#endif
}

int dev_graph_launch(dev_graph_t *g, void *stream, char *err, size_t errlen)
{
#ifdef HAVE_CUDNN
  CHECK_CUDA(cudaGraphLaunch(g->exec, (cudaStream_t)stream));
  return 0;
#else
  (void)g;
  (void)stream;
  return no_gpus(err, errlen);
#endif
}

size_t dev_graph_nodes(const dev_graph_t *g) { return g ? g->nodes : 0; }

void dev_graph_destroy(dev_graph_t *g)
{
  if (!g) return;
#ifdef HAVE_CUDNN
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
#endif
  free(g);
}
