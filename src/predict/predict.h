/* predict.h — a folder of PNG images through a trained network, batch-wise: per image NAME.png
 * a mask NAME.png (8-bit gray: for every pixel the mask value the training masks held for the
 * predicted class, read back through --mask-map, or with class_ids the class itself), optionally NAME.overlay.png (the image with each class's colour blended in) and
 * NAME.logits (the raw scores: height * width * classes little-endian f32, pixel-major, as the
 * exported network's output permuted to NHWC). An image whose sides are not a multiple of
 * 2^(levels-1) is padded at the bottom and right with zeros of the normalised input (as the
 * trainer pads small crops) and its outputs cut back to its size. Consecutive images of one
 * padded size share a batch. */
#ifndef SRC_PREDICT_PREDICT_H
#define SRC_PREDICT_PREDICT_H

#include <stddef.h>
#include <stdio.h>

#include "src/predict/weights.h"

typedef struct {
  const char *images, *out; /* folders */
  model_device_t device;
  int cuda_device;
  int batch;
  int overlay, logits;
  int class_ids;            /* masks hold class ids 0..K-1, not the training masks' values */
} predict_config_t;

/* An image that cannot be used, and why. */
typedef struct {
  const char *name;
  char why[512];
} predict_bad_t;

/* The *.png names of dir, sorted bytewise; at least one. */
int predict_list(const char *dir, char ***names, size_t *n, char *err, size_t errlen);
void predict_free_list(char **names, size_t n);

/* Every one of names[0..n) in pc->images decoded whole, under the limits, before anything is
 * written: those that cannot be (unreadable, not PNG, damaged, too large, out of memory) into
 * bad[0..*nbad) (bad: n entries), in order. */
void predict_check(const predict_config_t *pc, char **names, size_t n, predict_bad_t *bad,
                   size_t *nbad);

/* Before any work, for the images names[0..n) that will be predicted: --out is not the --images
 * folder (by device and inode), no two images would write the same output name, none of the
 * outputs exists in --out (a file the run did not write is never replaced). */
int predict_check_outputs(const predict_config_t *pc, char **names, size_t n, char *err,
                          size_t errlen);

/* The images names[0, n) of pc->images; one line per batch on log (NULL: quiet). Outputs are
 * created new: one that appeared in --out since predict_check_outputs is an error, not
 * replaced. */
int predict_run(const weights_t *w, const predict_config_t *pc, char **names, size_t n,
                FILE *log, char *err, size_t errlen);

#endif
