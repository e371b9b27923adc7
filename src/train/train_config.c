/* train_config.c — what the training loop derives from a run's settings (see train_config.h):
 * the model's and the optimizer's configurations, and the settings line. Apart from the option
 * table (options.c), which only the program that reads a command line needs. */
#include "config.h"

#include "src/train/train_config.h"

#include <stdio.h>
#include <string.h>

#include "src/data/data.h"

const char *train_device_name(model_device_t d) { return d == MODEL_DEVICE_CUDA ? "cuda" : "cpu"; }

const char *train_precision_name(model_precision_t p)
{
  return p == MODEL_BF16 ? "bf16" : p == MODEL_FP16 ? "fp16" : "fp32";
}

static const char *opt_name(optim_kind_t o) { return o == OPTIM_ADAMW ? "adamw" : "sgd"; }

void train_config_model(const train_config_t *c, int local_rank, model_config_t *mc)
{
  *mc = (model_config_t){.in_channels = 3,
                         .classes = c->classes,
                         .levels = c->levels,
                         .norm = c->norm,
                         .groups = c->groups,
                         .max_batch = c->batch_size,
                         .height = c->image_size,
                         .width = c->image_size,
                         .ignore_index = c->ignore_index,
                         .precision = c->precision,
                         .device = c->device,
                         .cuda_device = c->device == MODEL_DEVICE_CUDA ? local_rank : -1,
                         .seed = c->seed,
                         .conv_benchmark = !c->deterministic};
  memcpy(mc->widths, c->widths, sizeof mc->widths);
}

void train_config_optim(const train_config_t *c, optim_config_t *oc)
{
  optim_config_default(oc, c->optimizer);
  oc->lr = c->lr;
  oc->weight_decay = c->weight_decay;
  if (c->optimizer == OPTIM_SGD) {
    oc->momentum = c->momentum;
    oc->nesterov = c->nesterov;
  } else {
    oc->beta1 = c->momentum; /* --momentum is AdamW's beta1 */
  }
  oc->warmup_steps = c->warmup_steps;
}

void train_config_describe(const train_config_t *c, char *buf, size_t len)
{
  int n = snprintf(
      buf, len,
      "device=%s nproc=%d mode=%s model=%s widths=%s norm=%s sync_bn=%s "
      "sync_bn_from_epoch=%d classes=%d image_size=%d batch_size=%d epochs=%d steps=%ld "
      "lr=%g optimizer=%s momentum=%g weight_decay=%g nesterov=%d warmup_steps=%ld "
      "precision=%s data=%s train_size=%ld val_size=%ld workers=%d seed=%llu "
      "bucket_mb=%g accum_steps=%d drop_last=%d deterministic=%d grad_comm=%s",
      train_device_name(c->device), c->nproc, c->mode == TRAIN_MODE_DP ? "dp" : "ddp", c->model,
      c->widths_name, c->norm == MODEL_NORM_GROUP ? "group" : "batch", c->sync_bn ? "on" : "off",
      c->sync_bn_from_epoch, c->classes, c->image_size, c->batch_size, c->epochs, c->steps, c->lr,
      opt_name(c->optimizer), c->momentum, c->weight_decay, c->nesterov, c->warmup_steps,
      train_precision_name(c->precision), c->synthetic ? "synthetic" : c->data_dir,
      c->train_size, c->val_size, c->workers, (unsigned long long)c->seed, c->bucket_mb,
      c->accum_steps, c->drop_last, c->deterministic, c->grad_comm_bf16 ? "bf16" : "f32");
  /* Settings added since the line's first form: only where they differ from what the line
   * meant before, so earlier checkpoints still resume. */
  if (n > 0 && (size_t)n < len && c->norm == MODEL_NORM_GROUP)
    n += snprintf(buf + n, len - (size_t)n, " groups=%d", c->groups);
  if (n > 0 && (size_t)n < len && c->ignore_index != DATA_IGNORE_LABEL)
    n += snprintf(buf + n, len - (size_t)n, " ignore_label=%d", c->ignore_index);
  if (n > 0 && (size_t)n < len && c->mask_mapped)
    snprintf(buf + n, len - (size_t)n, " mask_map=%s", c->mask_map_text);
}
