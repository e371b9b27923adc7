/* step_graph.c — a training micro-step, eagerly or as a replayed CUDA graph (see step_graph.h).
 *
 * The life of the graph: the first step that matches (full batch, last micro-step, no
 * accumulation) runs eagerly, so the backend's lazy allocations (cuBLAS workspace, algorithm
 * choices for the batch) happen outside any capture; the next one is captured, from the casts
 * of the weights and the input to the join of the gradient all-reduce stream, instantiated,
 * and launched; every later matching step is one cudaGraphLaunch. Collectives replay safely:
 * their flags and sequence numbers live in device memory and advance inside the graph, and every
 * rank captures and replays the same steps. A capture that fails stops training with a message
 * (a silent fallback could leave the ranks' collectives out of step). */
#include "config.h"

#include "src/parallel/step_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"

#ifdef HAVE_CUDNN
#include <cuda_runtime_api.h>
#endif

struct step_graph {
  step_graph_config_t cfg;
  int seen;            /* matching steps so far (the first runs eagerly) */
  int sync_bn;         /* the captured step's SyncBN setting */
  float loss_scale;    /* and its loss scale */
  long replays;
  size_t nodes;
#ifdef HAVE_CUDNN
  cudaGraph_t graph;
  cudaGraphExec_t exec;
#endif
};

int step_graph_create(step_graph_t **out, const step_graph_config_t *cfg, char *err,
                      size_t errlen)
{
  step_graph_t *g = calloc(1, sizeof *g);
  if (!g) {
    return check_fail(err, errlen, "out of memory");
  }
  g->cfg = *cfg;
#ifndef HAVE_CUDNN
  g->cfg.enabled = 0;
#endif
  if (!model_stream(cfg->model)) g->cfg.enabled = 0; /* CPU ranks: nothing to capture */
  *out = g;
  return 0;
}

static void drop(step_graph_t *g)
{
#ifdef HAVE_CUDNN
  if (g->exec) cudaGraphExecDestroy(g->exec);
  if (g->graph) cudaGraphDestroy(g->graph);
  g->exec = NULL;
  g->graph = NULL;
#endif
  g->nodes = 0;
}

void step_graph_destroy(step_graph_t *g)
{
  if (!g) return;
#ifdef HAVE_CUDNN
  if (g->exec && model_stream(g->cfg.model))
    cudaStreamSynchronize((cudaStream_t)model_stream(g->cfg.model));
#endif
  drop(g);
  free(g);
}

long step_graph_replays(const step_graph_t *g) { return g ? g->replays : 0; }
size_t step_graph_nodes(const step_graph_t *g) { return g ? g->nodes : 0; }

static int eager(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                 int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  const model_hooks_t *hooks = ddp_step_hooks(g->cfg.ddp, last, sync_bn);
  if (model_train_step_queue(g->cfg.model, x, y, n, loss_scale, accumulate, hooks, err, errlen))
    return -1;
  return last ? ddp_finish_step(g->cfg.ddp, err, errlen) : 0;
}

#ifdef HAVE_CUDNN
/* A CUDA graph call failed: what, why, and how to train without graphs. */
static int graph_fail(cudaError_t e, const char *what, char *err, size_t errlen)
{
  return check_fail(err, errlen, "%s: %s (train with --cuda-graph off to run without graphs)", what,
                    cudaGetErrorString(e));
}

/* Captures one step (queued, not run) and instantiates it. */
static int capture(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                   int sync_bn, char *err, size_t errlen)
{
  cudaStream_t st = (cudaStream_t)model_stream(g->cfg.model);
  drop(g);
  /* Thread-local: the loader's threads may touch CUDA (pinned memory) while this one captures. */
  cudaError_t ce = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal);
  if (ce != cudaSuccess) return graph_fail(ce, "starting the graph capture", err, errlen);
  ddp_set_capture(g->cfg.ddp, 1);
  char qerr[512] = "";
  int rc = eager(g, x, y, n, loss_scale, 0, 1, sync_bn, qerr, sizeof qerr);
  ddp_set_capture(g->cfg.ddp, 0);
  cudaGraph_t graph = NULL;
  ce = cudaStreamEndCapture(st, &graph);
  if (rc != 0 || ce != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return check_fail(err, errlen,
                      "capturing the training step in a CUDA graph failed: %s (train with "
                      "--cuda-graph off to run without graphs)",
                      rc != 0 ? qerr : cudaGetErrorString(ce));
  }
  g->graph = graph;
  /* Node priorities as captured: the gradient buckets' kernels keep the communication stream's
   * high priority inside the graph (without the flag every node runs at the launch stream's;
   * on 2 x H200 the two are within noise, 1653 and 1648 img/s: bench/results/ddp_2xh200.tsv,
   * call F). */
  ce = cudaGraphInstantiateWithFlags(&g->exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  if (ce != cudaSuccess) return graph_fail(ce, "instantiating the step's CUDA graph", err, errlen);
  size_t nodes = 0;
  if (cudaGraphGetNodes(graph, NULL, &nodes) == cudaSuccess) g->nodes = nodes;
  g->sync_bn = sync_bn;
  g->loss_scale = loss_scale;
  return 0;
}

static int replay(step_graph_t *g, char *err, size_t errlen)
{
  cudaError_t ce = cudaGraphLaunch(g->exec, (cudaStream_t)model_stream(g->cfg.model));
  if (ce != cudaSuccess) return graph_fail(ce, "launching the step's CUDA graph", err, errlen);
  ddp_replayed(g->cfg.ddp);
  g->replays++;
  return 0;
}
#endif

int step_graph_queue(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                     int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  int rc;
  int match = g->cfg.enabled && n == g->cfg.full_batch && !accumulate && last;
#ifdef HAVE_CUDNN
  if (match && g->exec && (g->sync_bn != sync_bn || g->loss_scale != loss_scale)) {
    drop(g); /* SyncBN switched on (--sync-bn-from-epoch) or fp16's loss scale moved: one
                eager step (new exchanges set up their buffers), then capture again */
    g->seen = 0;
  }
  if (match && g->exec)
    rc = replay(g, err, errlen);
  else if (match && g->seen++ > 0)
    rc = capture(g, x, y, n, loss_scale, sync_bn, err, errlen) || replay(g, err, errlen);
  else
#endif
    rc = eager(g, x, y, n, loss_scale, accumulate, last, sync_bn, err, errlen);
  (void)match;
  if (rc != 0) return -1;
  return model_step_queued(g->cfg.model, err, errlen);
}

int step_graph_run(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                   int accumulate, int last, int sync_bn, float *loss, char *err, size_t errlen)
{
  if (step_graph_queue(g, x, y, n, loss_scale, accumulate, last, sync_bn, err, errlen) != 0)
    return -1;
  return model_step_loss(g->cfg.model, loss, err, errlen);
}
