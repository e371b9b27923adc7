/* weights.h — a training checkpoint as a network to run: the U-Net it describes (read from the
 * settings line the checkpoint carries), its weights and BatchNorm statistics, loaded into a
 * model of any image size and batch on the CPU or a GPU, or exported in PyTorch's names and
 * layouts to a safetensors file.
 *
 * The export, for a plain torch.nn.Module (docs/training.md, "Predictions and exported weights"):
 *   enc{i}.conv1.weight, enc{i}.conv2.weight      Conv2d 3x3, padding 1, no bias: [out, in, 3, 3]
 *   enc{i}.norm1.*, enc{i}.norm2.*                BatchNorm2d (weight, bias, running_mean,
 *                                                 running_var, num_batches_tracked; eps 1e-5)
 *                                                 or GroupNorm (weight, bias; eps 1e-5)
 *   dec{i}.up.weight, dec{i}.up.bias              ConvTranspose2d 2x2, stride 2: [in, out, 2, 2]
 *   dec{i}.conv1/conv2/norm1/norm2                as in the encoder; conv1 takes cat(skip, up)
 *   head.weight, head.bias                        Conv2d 1x1: [classes, widths[0], 1, 1]
 * Each block is conv -> norm -> ReLU; max-pool 2x2 after every encoder level but the last; the
 * decoder runs from level L-2 up to 0. The input is NCHW float, (rgb / 255 - 0.5) * 4. */
#ifndef SRC_PREDICT_WEIGHTS_H
#define SRC_PREDICT_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "src/model/model.h"

typedef struct {
  model_config_t net;  /* classes, levels, widths, norm, groups: what the checkpoint trained */
  float *params, *buffers;
  size_t nparams, nbuffers;
  char settings[2048]; /* the checkpoint's settings line */
  uint8_t class_value[256]; /* the mask value of each class in the training masks (the
                               checkpoint's run record, ckpt_run.h; the class itself without) */
  int values_recorded;      /* the checkpoint has the record */
} weights_t;

/* Read and verify path (every CRC), and the network its settings line names. */
int weights_open(weights_t **out, const char *path, char *err, size_t errlen);
void weights_close(weights_t *w);

/* An fp32 model of this network for batches of `batch` images of height x width on `device`
 * (cuda_device: the GPU), holding the checkpoint's weights and statistics. */
int weights_model(const weights_t *w, model_device_t device, int cuda_device, int batch,
                  int height, int width, model_t **out, char *err, size_t errlen);

/* The weights as safetensors in PyTorch's names and layouts (above). */
int weights_export(const weights_t *w, const char *path, char *err, size_t errlen);

#endif
