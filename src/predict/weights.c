/* weights.c — checkpoints as networks (see weights.h). The network's settings come from the
 * settings line through the trainer's own option table, so a preset name (--widths small) or a
 * computed default (GroupNorm's groups) means here what it meant in training. */
#include "config.h"

#include "src/predict/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/model/layers.h"
#include "src/device/arena.h"
#include "src/device/device.h"
#include "src/model/unet.h"
#include "src/predict/safetensors.h"
#include "src/train/ckpt_file.h"
#include "src/train/ckpt_run.h"
#include "src/app/options.h"

/* The value of `key` (e.g. "widths") in a settings line, into buf; 0 when absent. */
static int setting(const char *line, const char *key, char *buf, size_t len)
{
  size_t k = strlen(key);
  for (const char *p = line; *p;) {
    size_t n = strcspn(p, " ");
    if (n > k && strncmp(p, key, k) == 0 && p[k] == '=') {
      snprintf(buf, len, "%.*s", (int)(n - k - 1), p + k + 1);
      return 1;
    }
    p += n;
    while (*p == ' ') p++;
  }
  return 0;
}

/* The network of a settings line, by the trainer's parser (on a CPU, fp32). */
static int network(const char *line, const char *path, model_config_t *mc, char *err,
                   size_t errlen)
{
  char widths[128], norm[16], classes[16], groups[16];
  if (!setting(line, "widths", widths, sizeof widths) || !setting(line, "norm", norm, sizeof norm) ||
      !setting(line, "classes", classes, sizeof classes))
    return check_fail(err, errlen, "%s: its settings line names no network (widths, norm, "
                      "classes); is it a checkpoint of shmddp-train?", path);
  char *argv[16] = {"shmddp-predict", "--device", "cpu", "--precision", "fp32", "--widths",
                    widths, "--norm", norm, "--classes", classes};
  int argc = 11;
  if (setting(line, "groups", groups, sizeof groups)) {
    argv[argc++] = "--groups";
    argv[argc++] = groups;
  }
  char image[16]; /* any size the network takes: the option table checks it */
  snprintf(image, sizeof image, "%d", 1 << MODEL_MAX_LEVELS);
  argv[argc++] = "--image-size";
  argv[argc++] = image;
  argv[argc] = NULL;
  train_machine_t cpu = {.online_cpus = 1};
  train_config_t tc;
  char perr[512];
  FILE *devnull = fopen("/dev/null", "w");
  int rc = train_config_parse(&tc, argc, argv, &cpu, devnull ? devnull : stderr, perr,
                              sizeof perr);
  if (devnull) fclose(devnull);
  if (rc != 0)
    return check_fail(err, errlen, "%s: its network settings do not parse: %s", path, perr);
  train_config_model(&tc, 0, mc);
  return 0;
}

int weights_open(weights_t **out, const char *path, char *err, size_t errlen)
{
  *out = NULL;
  ckpt_t *c;
  CHECK(ckpt_read(path, &c, err, errlen));
  weights_t *w = calloc(1, sizeof *w);
  const ckpt_tensor_t *tp = ckpt_find(c, "params"), *tb = ckpt_find(c, "buffers");
  int rc = -1;
  if (!w) {
    check_fail(err, errlen, "out of memory reading %s", path);
    goto out;
  }
  snprintf(w->settings, sizeof w->settings, "%s", ckpt_config(c));
  if (network(w->settings, path, &w->net, err, errlen) != 0) goto out;
  if (!tp || !tb || tp->dtype != CKPT_F32 || tb->dtype != CKPT_F32 ||
      tp->count != model_config_num_params(&w->net)) {
    check_fail(err, errlen, "%s: its weights do not fit the network its settings describe",
               path);
    goto out;
  }
  w->nparams = tp->count;
  w->nbuffers = tb->count;
  w->params = malloc((w->nparams ? w->nparams : 1) * sizeof(float));
  w->buffers = malloc((w->nbuffers ? w->nbuffers : 1) * sizeof(float));
  if (!w->params || !w->buffers) {
    check_fail(err, errlen, "out of memory reading %s", path);
    goto out;
  }
  memcpy(w->params, tp->data, w->nparams * sizeof(float));
  memcpy(w->buffers, tb->data, w->nbuffers * sizeof(float));
  ckpt_run_t run;
  if (ckpt_run_read(c, &run, err, errlen) != 0) {
    check_prefix(err, errlen, path);
    goto out;
  }
  for (int k = 0; k < 256; k++) w->class_value[k] = (uint8_t)k;
  if (run.classes > 0 && run.classes != w->net.classes) {
    check_fail(err, errlen, "%s: its run record has %d classes, its network %d: the file is "
               "damaged", path, run.classes, w->net.classes);
    goto out;
  }
  memcpy(w->class_value, run.class_value, (size_t)run.classes);
  w->values_recorded = run.classes > 0;
  rc = 0;
out:
  ckpt_free(c);
  if (rc == 0) *out = w;
  else weights_close(w);
  return rc;
}

void weights_close(weights_t *w)
{
  if (!w) return;
  free(w->params);
  free(w->buffers);
  free(w);
}

int weights_model(const weights_t *w, model_device_t device, int cuda_device, int batch,
                  int height, int width, model_t **out, char *err, size_t errlen)
{
  model_config_t mc = w->net;
  mc.device = device;
  mc.cuda_device = device == MODEL_DEVICE_CUDA ? cuda_device : -1;
  mc.precision = MODEL_FP32;
  mc.max_batch = batch;
  mc.height = height;
  mc.width = width;
  mc.ignore_index = -1;
  /* Prediction needs no run-to-run identical bits, and the deterministic algorithms' filter can
   * leave a backward direction (which prediction never runs) without an algorithm inside the
   * planned workspace: let cuDNN time every algorithm instead. */
  mc.conv_benchmark = 1;
  CHECK(model_config_validate(&mc, err, errlen));
  CHECK(model_create(out, &mc, err, errlen));
  model_t *m = *out;
  int dev = arena_device(model_arena(m));
  int rc = model_num_params(m) == w->nparams && model_num_buffers(m) == w->nbuffers
               ? 0
               : check_fail(err, errlen, "the checkpoint's weights do not fit the network");
  /* the checkpoint holds them packed: into the model's padded layout */
  if (rc == 0) rc = model_load_packed(m, w->params, 1, model_params(m), err, errlen);
  if (rc == 0 && w->nbuffers)
    rc = dev_copy_now(model_buffers(m), dev, w->buffers, DEV_HOST, w->nbuffers * sizeof(float),
                      err, errlen);
  if (rc == 0) rc = model_refresh_working(m, err, errlen);
  if (rc != 0) {
    model_destroy(m);
    *out = NULL;
  }
  return rc;
}

/* Tensor t of the model's registry in PyTorch's layout, into dst: convolutions [out][kh][kw][in]
 * and transposed convolutions [in][kh][kw][out] to [., ., kh, kw]; 1x1 [out][in] to
 * [out][in][1][1]. */
static void to_torch(const layer_param_t *t, const float *src, float *dst, st_tensor_t *st)
{
  int d[4] = {0}, n = sscanf(t->shape, "%dx%dx%dx%d", &d[0], &d[1], &d[2], &d[3]);
  snprintf(st->name, sizeof st->name, "%s", t->name);
  st->dtype = ST_F32;
  st->data = dst;
  if (n == 4) { /* [a][h][w][b] -> [a][b][h][w] */
    st->ndim = 4;
    int64_t shape[4] = {d[0], d[3], d[1], d[2]};
    memcpy(st->shape, shape, sizeof shape);
    for (int a = 0; a < d[0]; a++)
      for (int y = 0; y < d[1]; y++)
        for (int x = 0; x < d[2]; x++)
          for (int b = 0; b < d[3]; b++)
            dst[(((size_t)a * d[3] + b) * d[1] + y) * d[2] + x] =
                src[(((size_t)a * d[1] + y) * d[2] + x) * d[3] + b];
    return;
  }
  memcpy(dst, src, t->count * sizeof *dst);
  st->ndim = n == 2 ? 4 : 1;
  int64_t shape[4] = {d[0], n == 2 ? d[1] : 0, 1, 1};
  memcpy(st->shape, shape, sizeof shape);
}

int weights_export(const weights_t *w, const char *path, char *err, size_t errlen)
{
  model_t *m = NULL; /* the registry: names, shapes and packed offsets of the parameters */
  CHECK(weights_model(w, MODEL_DEVICE_CPU, -1, 1, 1 << w->net.levels, 1 << w->net.levels, &m,
                      err, errlen));
  int nt = unet_num_tensors(m), batch_norm = w->net.norm == MODEL_NORM_BATCH;
  int cap = nt + (batch_norm ? 3 * nt : 0);
  st_tensor_t *st = calloc((size_t)cap, sizeof *st);
  float *data = malloc((w->nparams ? w->nparams : 1) * sizeof *data);
  static const int64_t zero = 0;
  int n = 0, rc = -1;
  if (!st || !data) {
    check_fail(err, errlen, "out of memory exporting the weights");
    goto out;
  }
  size_t off = 0, boff = 0;
  for (int i = 0; i < nt; i++) {
    const layer_param_t *t = unet_tensor(m, i);
    to_torch(t, w->params + t->packed, data + off, &st[n++]);
    off += t->count;
    size_t len = strlen(t->name);
    /* BatchNorm's running statistics follow its weight, in the layers' order (the buffers'). */
    if (batch_norm && strstr(t->name, ".norm") && len > 7 && !strcmp(t->name + len - 7, ".weight")) {
      size_t C = t->count;
      const char *suffix[3] = {"running_mean", "running_var", "num_batches_tracked"};
      for (int k = 0; k < 3; k++) {
        st_tensor_t *b = &st[n++];
        snprintf(b->name, sizeof b->name, "%.*s.%s", (int)(len - 7), t->name, suffix[k]);
        b->dtype = k == 2 ? ST_I64 : ST_F32;
        b->ndim = k == 2 ? 0 : 1;
        b->shape[0] = (int64_t)C;
        b->data = k == 2 ? (const void *)&zero : (const void *)(w->buffers + boff + k * C);
      }
      boff += 2 * C;
    }
  }
  if (boff != w->nbuffers) {
    check_fail(err, errlen, "internal error: %zu of %zu BatchNorm statistics exported", boff,
               w->nbuffers);
    goto out;
  }
  char classes[16], levels[16], groups[16];
  snprintf(classes, sizeof classes, "%d", w->net.classes);
  snprintf(levels, sizeof levels, "%d", w->net.levels);
  snprintf(groups, sizeof groups, "%d", w->net.norm == MODEL_NORM_GROUP ? w->net.groups : 0);
  const char *meta[] = {"format", "pt", "network", "shmddp unet", "classes", classes,
                        "levels", levels, "norm", batch_norm ? "batch" : "group",
                        "groups", groups, "input", "NCHW float, (rgb / 255 - 0.5) * 4",
                        "settings", w->settings};
  rc = safetensors_write(path, st, n, meta, (int)(sizeof meta / sizeof meta[0] / 2), err,
                         errlen);
out:
  free(st);
  free(data);
  model_destroy(m);
  return rc;
}
