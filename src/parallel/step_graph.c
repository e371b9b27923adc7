/* step_graph.c — a training micro-step, eagerly or as a replayed CUDA graph (see step_graph.h).
 *
 * The life of the graph: the first step that matches (full batch, last micro-step, no
 * accumulation) runs eagerly, so the backend's lazy allocations (cuBLAS workspace, algorithm
 * choices for the batch) happen outside any capture; the next one is captured, from the cast
 * of the input to the join of the gradient all-reduce stream (the weights' working copy is
 * made current before it, model_refresh_working), instantiated,
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
#include "src/device/device.h"

struct step_graph {
  step_graph_config_t cfg;
  int seen;            /* matching steps so far (the first runs eagerly) */
  int sync_bn;         /* the captured step's SyncBN setting */
  float loss_scale;    /* and its loss scale */
  long replays;
  dev_graph_t *graph;  /* the captured step, instantiated */
};

int step_graph_create(step_graph_t **out, const step_graph_config_t *cfg, char *err,
                      size_t errlen)
{
  step_graph_t *g = calloc(1, sizeof *g);
  if (!g) return check_fail(err, errlen, "out of memory");
  g->cfg = *cfg;
  if (!model_stream(cfg->model)) g->cfg.enabled = 0; /* CPU ranks: nothing to capture */
  *out = g;
  return 0;
}

static void drop(step_graph_t *g)
{
  dev_graph_destroy(g->graph);
  g->graph = NULL;
}

void step_graph_destroy(step_graph_t *g)
{
  if (!g) return;
  char err[256];
  if (g->graph) dev_stream_sync(model_stream(g->cfg.model), err, sizeof err);
  drop(g);
  free(g);
}

long step_graph_replays(const step_graph_t *g) { return g ? g->replays : 0; }
size_t step_graph_nodes(const step_graph_t *g) { return g ? dev_graph_nodes(g->graph) : 0; }

static int eager(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                 int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  const model_hooks_t *hooks = ddp_step_hooks(g->cfg.ddp, last, sync_bn);
  if (model_train_step_queue(g->cfg.model, x, y, n, loss_scale, accumulate, hooks, err, errlen))
    return ddp_hook_failure(g->cfg.ddp, err, errlen);
  return last ? ddp_finish_step(g->cfg.ddp, err, errlen) : 0;
}

/* A failed graph call: what failed, and how to train without graphs. */
static int graph_fail(char *err, size_t errlen, const char *what)
{
  check_prefix(err, errlen, what);
  size_t len = strlen(err);
  snprintf(err + len, errlen - len, " (train with --cuda-graph off to run without graphs)");
  return -1;
}

/* Captures one step (queued, not run) and instantiates it. */
static int capture(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                   int sync_bn, char *err, size_t errlen)
{
  void *st = model_stream(g->cfg.model);
  drop(g);
  if (dev_graph_begin(st, err, errlen) != 0)
    return graph_fail(err, errlen, "starting the graph capture");
  ddp_set_capture(g->cfg.ddp, 1);
  int rc = eager(g, x, y, n, loss_scale, 0, 1, sync_bn, err, errlen);
  ddp_set_capture(g->cfg.ddp, 0);
  if (dev_graph_end(st, rc == 0, &g->graph, err, errlen) != 0)
    return graph_fail(err, errlen, "capturing the training step in a CUDA graph failed");
  g->sync_bn = sync_bn;
  g->loss_scale = loss_scale;
  return 0;
}

static int replay(step_graph_t *g, char *err, size_t errlen)
{
  if (dev_graph_launch(g->graph, model_stream(g->cfg.model), err, errlen) != 0)
    return graph_fail(err, errlen, "launching the step's CUDA graph");
  ddp_replayed(g->cfg.ddp);
  g->replays++;
  return 0;
}

int step_graph_queue(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                     int accumulate, int last, int sync_bn, char *err, size_t errlen)
{
  int rc;
  int match = g->cfg.enabled && n == g->cfg.full_batch && !accumulate && last;
  /* The weights' working copy is made current outside the step (a no-op behind model_update),
   * so a captured step holds no cast of them and a replay never reads a stale copy. */
  if (model_refresh_working(g->cfg.model, err, errlen) != 0) return -1;
  if (match && g->graph && (g->sync_bn != sync_bn || g->loss_scale != loss_scale)) {
    drop(g); /* SyncBN switched on (--sync-bn-from-epoch) or fp16's loss scale moved: one
                eager step (new exchanges set up their buffers), then capture again */
    g->seen = 0;
  }
  if (match && g->graph)
    rc = replay(g, err, errlen);
  else if (match && g->seen++ > 0)
    rc = capture(g, x, y, n, loss_scale, sync_bn, err, errlen) || replay(g, err, errlen);
  else
    rc = eager(g, x, y, n, loss_scale, accumulate, last, sync_bn, err, errlen);
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
