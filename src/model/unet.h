/* unet.h — what the model exposes beyond model.h, for its tests and the CUDA backend's
 * cross-checks: building the network with a chosen compute dtype (f64 on the CPU for
 * gradient checks) and the table of parameter tensors. */
#ifndef SRC_MODEL_UNET_H
#define SRC_MODEL_UNET_H

#include "kernels/ops.h"
#include "src/model/layers.h"
#include "src/model/model.h"

/* model_create with an explicit compute dtype (model_create derives it from cfg->precision). */
int unet_create(model_t **out, const model_config_t *cfg, ops_dtype_t compute, char *err,
                size_t errlen);

/* The parameter tensors in forward order; offsets are into the flat buffers. */
int unet_num_tensors(const model_t *m);
const layer_param_t *unet_tensor(const model_t *m, int i);

#endif
