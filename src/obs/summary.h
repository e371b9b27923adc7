/* summary.h — the end of a run: one machine-readable `result: key=value ...` line on stdout and
 * the same numbers (plus the configuration, per-class IoU and the memory ledger) in
 * summary.json in --out. */
#ifndef SRC_OBS_SUMMARY_H
#define SRC_OBS_SUMMARY_H

#include <stddef.h>
#include <stdio.h>

#include "shmddp.h"

#define SUMMARY_MAX_CLASSES 256

/* A restart of every rank after one died (--max-restarts). */
typedef struct {
  long step;        /* the checkpoint's step it started from (0: the beginning) */
  char reason[512]; /* what happened to the rank (the launcher's message) */
} summary_restart_t;

typedef struct {
  long steps, epochs;     /* optimizer steps taken; epochs started */
  int world;
  double images_per_s;    /* training images over all ranks / training time (after step 1) */
  double initial_loss;    /* the first step's loss, averaged over ranks */
  double train_loss;      /* mean loss over the steps of the last epoch */
  double val_loss, val_miou, val_acc; /* NaN (null, "none") when nothing was validated */
  double wall_s;
  long skipped_steps;     /* fp16 steps skipped for non-finite gradients */
  int classes;
  double class_iou[SUMMARY_MAX_CLASSES]; /* NaN where a class was absent from the labels */
  int miou_classes;       /* the classes present in the validation labels: val_miou's mean */
  /* Pixels per label in the training [0] and validation [1] masks, and ignored ones, where
   * the dataset was scanned (labels_counted). */
  int labels_counted;
  double label_pixels[2][SUMMARY_MAX_CLASSES], ignored_pixels[2];
  double peak_mib[SHMDDP_MAX_RANKS]; /* per rank (device): peak of its memory ledger */
  const char *run_id;                /* the run's id (ckpt_run.h), or NULL */
  const summary_restart_t *restarts; /* the run's restarts so far, in order */
  int nrestarts;
} train_result_t;

/* "result: steps=... images_per_s=... train_loss=... val_loss=... val_miou=... val_acc=...";
 * a value there is none of (nothing validated) is "none" (null in summary.json). */
void summary_print_result(FILE *f, const train_result_t *r);

/* "val IoU per class (mIoU over K of N classes, the others absent from the validation labels):
 * 0 0.9812, 1 0.6120, 2 absent". */
void summary_print_classes(FILE *f, const train_result_t *r);

/* "train labels (pixels): 0 81.2%, 1 18.8%, ignored 0.0%; val labels: ..." (scanned datasets). */
void summary_print_labels(FILE *f, const train_result_t *r);

/* Writes dir/summary.json (through a temporary file and rename). config: the settings line;
 * memory_json: the ledger object, or NULL. */
int summary_write_json(const char *dir, const train_result_t *r, const char *config,
                       const char *memory_json, char *err, size_t errlen);

#endif
