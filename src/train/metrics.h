/* metrics.h — segmentation metrics from a confusion matrix: mean IoU and pixel accuracy. The
 * matrix is plain counts, so ranks merge by summing them (ddp_sum_host) before any ratio is
 * taken: the merged metric equals the metric of all pixels, not an average of per-rank ratios. */
#ifndef SRC_TRAIN_METRICS_H
#define SRC_TRAIN_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int classes;
  /* counts[t * classes + p]: pixels of true class t predicted as p. Doubles, because they are
   * summed across ranks as f64; they stay exact up to 2^53 pixels. */
  double *counts;
} metrics_t;

int metrics_init(metrics_t *m, int classes); /* 0, or -1 when out of memory */
void metrics_free(metrics_t *m);
void metrics_reset(metrics_t *m);

/* Count n pixels; pixels whose label is outside [0, classes) (the ignore label) are skipped.
 * Predictions are an argmax over the classes, so always in range; any that is not is skipped
 * too rather than guessed at. */
void metrics_add(metrics_t *m, const int32_t *label, const int32_t *pred, size_t n);
/* dst += src (same number of classes). */
void metrics_merge(metrics_t *dst, const metrics_t *src);
size_t metrics_count_len(const metrics_t *m); /* classes * classes: what to sum across ranks */

double metrics_pixels(const metrics_t *m);        /* counted pixels */
double metrics_pixel_accuracy(const metrics_t *m); /* trace / total; 0 with no pixels */
/* Whether class c is in the labels (a class that is only predicted is absent: its IoU would be
 * 0 whatever the model learnt, and one in neither would be 0/0), and how many classes are. */
int metrics_present(const metrics_t *m, int c);
int metrics_present_count(const metrics_t *m);
/* IoU of class c: tp / (tp + fp + fn); NaN when the class is absent from the labels. */
double metrics_iou(const metrics_t *m, int c);
/* Mean IoU over the classes present in the labels (metrics_present_count of them); 0 when none
 * is. */
double metrics_miou(const metrics_t *m);

#endif
