/* step_graph.h — one training micro-step (forward, loss, backward and, on the last micro-step,
 * the gradient all-reduce) run eagerly, or captured once in a CUDA graph and replayed.
 *
 * Why: the U-Net's step is some 250 kernels, many of them a few microseconds long; launched one
 * by one the GPU waits on the CPU between them (and on the other rank's CPU, through SyncBN).
 * A replayed graph is one launch per step. The graph bakes in pointers, shapes and scalars, so
 * it is used only for steps that match the captured one: the full batch, no gradient
 * accumulation, the same SyncBN setting and loss scale (fp16's dynamic scale: captured again,
 * after one eager step, when it changes), no timeline. Any other step runs eagerly; the graph
 * stays valid for the next matching one. */
#ifndef SRC_PARALLEL_STEP_GRAPH_H
#define SRC_PARALLEL_STEP_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "src/parallel/ddp.h"
#include "src/model/model.h"

typedef struct step_graph step_graph_t;

typedef struct {
  model_t *model;
  ddp_t *ddp;
  int enabled;     /* graphs allowed at all (--cuda-graph on, GPU, no loss scaling, no
                      accumulation, no timeline) */
  int full_batch;  /* the batch size the graph is captured for */
} step_graph_config_t;

/* *out is a runner; with graphs disabled (or on the CPU) every step runs eagerly. */
int step_graph_create(step_graph_t **out, const step_graph_config_t *cfg, char *err,
                      size_t errlen);
void step_graph_destroy(step_graph_t *g);

/* One micro-step on (x, y, n) that must stay at the same device addresses from step to step
 * for a graph to be used (batch_io.c's input buffers do). accumulate: add to the gradients;
 * last: all-reduce them (DDP) and finish the step. *loss: this micro-batch's mean loss (waits
 * for the step). */
int step_graph_run(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                   int accumulate, int last, int sync_bn, float *loss, char *err, size_t errlen);

/* step_graph_run without the wait: the step is queued (the loss is read later with
 * model_step_loss), so the caller can queue more work behind it first. */
int step_graph_queue(step_graph_t *g, const float *x, const int32_t *y, int n, float loss_scale,
                     int accumulate, int last, int sync_bn, char *err, size_t errlen);

/* Steps replayed from the graph so far, and its number of nodes (0 before a capture). */
long step_graph_replays(const step_graph_t *g);
size_t step_graph_nodes(const step_graph_t *g);

#endif
