/* predict.h — a folder of PNG images through a trained network, batch-wise: per image NAME.png
 * a mask NAME.png (8-bit gray, the predicted class of every pixel, as the training masks hold
 * labels), optionally NAME.overlay.png (the image with each class's colour blended in) and
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
} predict_config_t;

/* The *.png names of dir, sorted bytewise; at least one. */
int predict_list(const char *dir, char ***names, size_t *n, char *err, size_t errlen);
void predict_free_list(char **names, size_t n);

/* Before any work: --out is not the --images folder (by device and inode), no two images would
 * write the same output name, none of the outputs exists in --out (a file the run did not
 * write is never replaced), and every image decodes under the limits. */
int predict_check(const predict_config_t *pc, char **names, size_t n, char *err, size_t errlen);

/* The images names[0, n) of pc->images; one line per batch on log (NULL: quiet). Outputs are
 * created new: one that appeared in --out since predict_check is an error, not replaced. */
int predict_run(const weights_t *w, const predict_config_t *pc, char **names, size_t n,
                FILE *log, char *err, size_t errlen);

#endif
