/* loop.h — the training loop and the interface of the two engines it drives. One loop (loop.c)
 * takes the optimizer steps, makes the stop decision, writes checkpoints, the log and the
 * progress, and validates; an engine says how one micro-batch is trained across the devices and how the processes agree:
 *   DDP (loop_ddp.c, over src/parallel/ddp.c): one process per device, this rank's model,
 *     gradients all-reduced
 *   DataParallel (loop_dp.c, over src/parallel/dp.c): one process driving every device, the
 *     master weights on device 0
 * Everything the loop reports has the same meaning in both modes. */
#ifndef SRC_TRAIN_LOOP_H
#define SRC_TRAIN_LOOP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "src/data/loader.h"
#include "src/model/optim.h"
#include "src/obs/summary.h"
#include "src/train/job.h"
#include "src/train/metrics.h"

/* What one micro-batch cost, as the engine measured it. */
typedef struct {
  double loss;      /* its mean loss (DDP: over this rank's images; DP: over the whole batch) */
  double comm_s;    /* exposed communication: from the end of backward (rank 0's, device 0's)
                       until the gradients were reduced (0 on micro-batches that do not reduce) */
  double syncbn_s;  /* SyncBN exchanges */
} engine_micro_t;

typedef struct engine engine_t;

typedef struct {
  /* The first line of the run (after "train: "). */
  void (*describe)(engine_t *e, const train_job_t *job, char *buf, size_t len);
  /* Start epoch `epoch` on e->loader, skipping its first `skip` batches (a resumed epoch). */
  int (*epoch_start)(engine_t *e, long epoch, size_t skip, char *err, size_t errlen);
  /* A training batch where the step reads it (queued; on the host: b's own buffers). */
  int (*upload)(engine_t *e, const loader_batch_t *b, const float **x, const int32_t **y,
                char *err, size_t errlen);
  /* Wait until the last upload has read its host buffer (before a loader buffer is reused). */
  int (*fence)(engine_t *e, char *err, size_t errlen);
  /* Queue one micro-batch's forward and backward; accumulate: add to the gradients; last: the
   * step's last micro-batch (DDP reduces its gradients then). */
  int (*queue)(engine_t *e, const float *x, const int32_t *y, int n, float loss_scale,
               int accumulate, int last, int sync_bn, char *err, size_t errlen);
  /* Wait for the queued micro-batch (work queued after it keeps running) and measure it. */
  int (*finish)(engine_t *e, int last, engine_micro_t *out, char *err, size_t errlen);
  /* Sum n doubles over the processes, in place (DataParallel: one process, nothing to do). */
  int (*sum)(engine_t *e, double *vals, size_t n, char *err, size_t errlen);
  /* A rank asked to stop (SIGINT/SIGTERM), seen before the step's agreement. */
  int (*stop_requested)(engine_t *e);
  /* The optimizer o updates e->model's weights from the reduced gradients (divided by
   * grad_scale), queued behind the step (DataParallel times it as device 0's compute). */
  int (*update)(engine_t *e, optim_t *o, double lr, double grad_scale, char *err,
                size_t errlen);
  /* After every step: timed (past the timing warm-up), and its seconds. May be NULL. */
  void (*step_done)(engine_t *e, int timed, double seconds);
  /* Validation: the confusion counts and the mean loss over the validation set, the same on
   * every process. */
  int (*validate)(engine_t *e, const train_job_t *job, metrics_t *conf, double *loss, char *err,
                  size_t errlen);
  /* Per-process numbers riding on the step's agreement (DDP: every rank's ledger and GPU use),
   * and what rank 0 does with them; NULL when the engine has none. */
  size_t (*extra_slots)(engine_t *e);
  void (*extra_fill)(engine_t *e, double *slots);
  void (*extra_step)(engine_t *e, int timed, const double *slots, double step_ms, double wait_ms,
                     double comm_ms, double syncbn_ms);
  const char *(*extra_json)(engine_t *e);
  /* The memory peak per device (MiB), every process. */
  int (*peaks)(engine_t *e, double *peak_mib, char *err, size_t errlen);
  /* Rank 0 at the end: the tables and files only this engine has (run_steps: the steps this
   * run took, a resumed run's counted from where it resumed). */
  int (*report)(engine_t *e, const train_job_t *job, FILE *out, const train_result_t *res,
                long run_steps, char *err, size_t errlen);
  void (*destroy)(engine_t *e);
} engine_ops_t;

struct engine {
  const engine_ops_t *ops;
  model_t *model;   /* the master weights: this rank's model, DataParallel's device 0 */
  loader_t *loader; /* this process's training batches */
  int rank, ranks;  /* this process, and the processes that agree every step */
  int world;        /* devices training (DDP: ranks; DataParallel: devices) */
  int pipelined;    /* the optimizer and the next upload may be queued behind a step */
  int timeline;     /* the engine records a timeline (--timeline) */
  void *impl;
};

/* For the engines: a zeroed engine with ops and impl_bytes of zeroed state in e->impl (*out is
 * set, for ops->destroy, as soon as there is one). */
int engine_new(engine_t **out, const engine_ops_t *ops, size_t impl_bytes, char *err,
               size_t errlen);
/* The run's loaders: e->loader (training batches of `batch` images, random crops and flips,
 * `workers` threads) and *val (centre crops, one thread when there are any); host buffers
 * pinned when pinned != 0 (a GPU copies them asynchronously). */
int engine_loaders(engine_t *e, const train_job_t *job, int batch, int workers, int pinned,
                   loader_t **val, char *err, size_t errlen);
/* train_loop on e when its creation succeeded (created_rc == 0), then e destroyed. */
int engine_train(engine_t *e, int created_rc, const train_job_t *job, train_result_t *res,
                 char *err, size_t errlen);

/* The whole run over engine e. Rank 0 prints progress and the result line and writes
 * summary.json and log.jsonl into --out; *res gets the same numbers on every rank. */
int train_loop(engine_t *e, const train_job_t *job, train_result_t *res, char *err,
               size_t errlen);

#endif
