/* ckpt_state.c — a training checkpoint as named tensors in the checkpoint format
 * (ckpt_file.h): "params", "buffers", "optimizer", and the small "state" (steps, position,
 * loss scaler) as f64. Values on a GPU are copied through host memory. Parameters and
 * optimizer state are stored packed, without the flat buffers' alignment padding. */
#include "config.h"

#include "src/train/ckpt_state.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/arena.h"
#include "src/device/device.h"
#include "src/train/ckpt_file.h"

enum { ST_STEP, ST_EPOCH, ST_TAKEN, ST_EPOCH_LOSS, ST_EPOCH_STEPS, ST_INITIAL_LOSS, ST_UPDATES,
       ST_SCALE, ST_CLEAN, ST_SKIPPED, ST_TOTAL, ST_COUNT };

/* Between the model's device and host memory (at once: checkpoints are not on the hot path). */
static int copy(int device, void *dst, const void *src, size_t bytes, int to_host, char *err,
                size_t errlen)
{
  if (dev_copy_now(dst, to_host ? DEV_HOST : device, src, to_host ? device : DEV_HOST, bytes, err,
                   errlen) != 0)
    return check_prefix(err, errlen, to_host ? "copying checkpoint data from the GPU"
                                             : "copying checkpoint data to the GPU");
  return 0;
}

/* Parameters and optimizer state are flat buffers of `slots` parts of model_flat_size elements
 * on the model's device; checkpoints hold them packed (model_save_packed: slots *
 * model_num_params, no alignment padding), the same as before the flat layout was padded. */
static int fetch_packed(model_t *m, const float *flat, size_t slots, float *packed, char *err,
                        size_t errlen)
{
  if (model_save_packed(m, flat, slots, packed, err, errlen) != 0)
    return check_prefix(err, errlen, "copying checkpoint data from the model");
  return 0;
}

static int store_unpacked(model_t *m, const void *packed, size_t slots, float *flat, char *err,
                          size_t errlen)
{
  if (model_load_packed(m, packed, slots, flat, err, errlen) != 0)
    return check_prefix(err, errlen, "loading checkpoint data into the model");
  return 0;
}

void ckpt_state_run_key(const char *describe, char *key, size_t len)
{
  /* workers and the validation size change nothing trained; more epochs or steps extend the
   * run (the schedule is stretched over the new length) */
  static const char *const free_keys[] = {"workers=", "val_size=", "epochs=", "steps=", NULL};
  size_t off = 0;
  const char *p = describe;
  key[0] = 0;
  while (*p) {
    const char *end = strchr(p, ' ');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    int skip = 0;
    for (int i = 0; free_keys[i]; i++)
      if (strncmp(p, free_keys[i], strlen(free_keys[i])) == 0) skip = 1;
    if (!skip && off + n + 2 < len) {
      if (off) key[off++] = ' ';
      memcpy(key + off, p, n);
      off += n;
      key[off] = 0;
    }
    p += n;
    while (*p == ' ') p++;
  }
}

int ckpt_state_save(const char *path, const char *run_key, const ckpt_run_t *run, model_t *m,
                    optim_t *o, const amp_scaler_t *s, const train_progress_t *p, char *err,
                    size_t errlen)
{
  int dev = arena_device(model_arena(m));
  size_t np = model_num_params(m), nb = model_num_buffers(m), no = 0;
  float *ostate = optim_state(o, &no);
  size_t slots = no / model_flat_size(m); /* optimizer states: 0, 1 or 2 flat buffers */
  no = slots * np;
  float *hp = malloc((np ? np : 1) * sizeof *hp), *hb = malloc((nb ? nb : 1) * sizeof *hb),
        *ho = malloc((no ? no : 1) * sizeof *ho);
  int rc = -1;
  if (!hp || !hb || !ho) {
    snprintf(err, errlen, "out of memory staging the checkpoint");
    goto out;
  }
  if (fetch_packed(m, model_params(m), 1, hp, err, errlen) ||
      copy(dev, hb, model_buffers(m), nb * sizeof *hb, 1, err, errlen) ||
      fetch_packed(m, ostate, slots, ho, err, errlen))
    goto out;
  double st[ST_COUNT] = {0};
  st[ST_STEP] = (double)p->step;
  st[ST_EPOCH] = (double)p->epoch;
  st[ST_TAKEN] = (double)p->batches_taken;
  st[ST_EPOCH_LOSS] = p->epoch_loss;
  st[ST_EPOCH_STEPS] = (double)p->epoch_steps;
  st[ST_INITIAL_LOSS] = p->initial_loss;
  st[ST_UPDATES] = (double)optim_updates(o);
  st[ST_SCALE] = s->scale;
  st[ST_CLEAN] = (double)s->clean_steps;
  st[ST_SKIPPED] = (double)s->skipped_steps;
  st[ST_TOTAL] = (double)s->total_steps;
  uint8_t record[CKPT_RUN_MAX_BYTES];
  size_t record_bytes = run ? ckpt_run_encode(run, record, sizeof record) : 0;
  ckpt_tensor_t t[] = {
      {.name = "params", .dtype = CKPT_F32, .count = np, .data = hp},
      {.name = "buffers", .dtype = CKPT_F32, .count = nb, .data = hb},
      {.name = "optimizer", .dtype = CKPT_F32, .count = no, .data = ho},
      {.name = "state", .dtype = CKPT_F64, .count = ST_COUNT, .data = st},
      {.name = CKPT_RUN_TENSOR, .dtype = CKPT_U8, .count = record_bytes, .data = record}};
  int nt = (int)(sizeof t / sizeof t[0]) - (record_bytes == 0); /* the record last, if any */
  rc = ckpt_write(path, run_key, t, nt, err, errlen);
out:
  free(hp);
  free(hb);
  free(ho);
  return rc;
}

/* The saved progress counters are whole numbers from 0 to 2^53 (every one a double holds
 * exactly; far beyond any run), and the loss scale a positive finite number: anything else is a
 * damaged or crafted file, refused before it can become a step of -9223372036854775808. */
static int check_state(const double *st, char *err, size_t errlen)
{
  static const struct {
    int at;
    const char *name;
  } counters[] = {{ST_STEP, "step"},         {ST_EPOCH, "epoch"},
                  {ST_TAKEN, "batches taken"}, {ST_EPOCH_STEPS, "steps of the epoch"},
                  {ST_UPDATES, "optimizer updates"}, {ST_CLEAN, "clean steps"},
                  {ST_SKIPPED, "skipped steps"}, {ST_TOTAL, "scaler steps"}};
  const double max = 9007199254740992.0; /* 2^53 */
  for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
    double v = st[counters[i].at];
    if (!(v >= 0 && v <= max) || v != (double)(long long)v)
      return check_fail(err, errlen, "the checkpoint's %s is %g, not a whole number from 0 to "
                        "2^53: the file is damaged", counters[i].name, v);
  }
  if (!(st[ST_SCALE] > 0 && isfinite(st[ST_SCALE])))
    return check_fail(err, errlen, "the checkpoint's loss scale is %g, not a positive finite "
                      "number: the file is damaged", st[ST_SCALE]);
  return 0;
}

/* Name the first setting that differs between two key lines. */
static void first_difference(const char *a, const char *b, char *out, size_t len)
{
  while (*a && *b) {
    size_t na = strcspn(a, " "), nb = strcspn(b, " ");
    if (na != nb || strncmp(a, b, na) != 0) {
      snprintf(out, len, "the checkpoint has %.*s, this run %.*s", (int)na, a, (int)nb, b);
      return;
    }
    a += na + (a[na] == ' ');
    b += nb + (b[nb] == ' ');
  }
  snprintf(out, len, "the settings lines differ in length");
}

/* The checkpoint's settings against run_key, both as keys (a checkpoint written when more
 * settings were part of the key still compares by today's). */
static int key_differs(const char *path, const ckpt_t *c, const char *run_key, char *err,
                       size_t errlen)
{
  char stored[2048];
  ckpt_state_run_key(ckpt_config(c), stored, sizeof stored);
  if (strcmp(stored, run_key) == 0) return 0;
  char diff[256];
  first_difference(stored, run_key, diff, sizeof diff);
  snprintf(err, errlen, "--resume %s: the checkpoint was written by a run with other settings "
           "(%s); resume with the same settings (only --epochs, --steps, --workers and "
           "--val-size may change)", path, diff);
  return 1;
}

int ckpt_state_check(const char *path, const char *run_key, long *step, char *stored,
                     size_t stored_len, ckpt_run_t *run, char *err, size_t errlen)
{
  ckpt_t *c;
  if (ckpt_read(path, &c, err, errlen) != 0) return -1;
  snprintf(stored, stored_len, "%s", ckpt_config(c));
  int rc = key_differs(path, c, run_key, err, errlen) ? -1 : 0;
  const ckpt_tensor_t *ts = rc == 0 ? ckpt_expect(c, "state", CKPT_F64, ST_COUNT, err, errlen)
                                    : NULL;
  if (rc == 0 && !ts) {
    check_prefix(err, errlen, "--resume: the checkpoint holds no training state");
    rc = -1;
  }
  double st[ST_COUNT]; /* tensors are packed in the file: their data need not be 8-byte aligned */
  if (rc == 0) {
    memcpy(st, ts->data, sizeof st);
    if (check_state(st, err, errlen) != 0) rc = check_prefix(err, errlen, "--resume");
  }
  if (rc == 0 && ckpt_run_read(c, run, err, errlen) != 0) rc = check_prefix(err, errlen, path);
  if (rc == 0) *step = (long)st[ST_STEP];
  ckpt_free(c);
  return rc;
}

int ckpt_state_load(const char *path, const char *run_key, model_t *m, optim_t *o,
                    amp_scaler_t *s, train_progress_t *p, char *err, size_t errlen)
{
  ckpt_t *c;
  if (ckpt_read(path, &c, err, errlen) != 0) return -1;
  int rc = -1;
  if (key_differs(path, c, run_key, err, errlen)) goto out;
  int dev = arena_device(model_arena(m));
  size_t np = model_num_params(m), nb = model_num_buffers(m), no = 0;
  float *ostate = optim_state(o, &no);
  size_t slots = no / model_flat_size(m);
  no = slots * np; /* packed in the file */
  /* Every tensor's type and length checked before anything is copied. */
  const ckpt_tensor_t *tp = ckpt_expect(c, "params", CKPT_F32, np, err, errlen);
  const ckpt_tensor_t *tb = tp ? ckpt_expect(c, "buffers", CKPT_F32, nb, err, errlen) : NULL;
  const ckpt_tensor_t *to = tb ? ckpt_expect(c, "optimizer", CKPT_F32, no, err, errlen) : NULL;
  const ckpt_tensor_t *ts = to ? ckpt_expect(c, "state", CKPT_F64, ST_COUNT, err, errlen) : NULL;
  if (!ts) {
    check_prefix(err, errlen, "--resume: the checkpoint does not fit this model and optimizer");
    goto out;
  }
  double st[ST_COUNT]; /* tensors are packed in the file: their data need not be 8-byte aligned */
  memcpy(st, ts->data, sizeof st);
  if (check_state(st, err, errlen) != 0) {
    check_prefix(err, errlen, "--resume");
    goto out;
  }
  if (store_unpacked(m, tp->data, 1, model_params(m), err, errlen) ||
      copy(dev, model_buffers(m), tb->data, nb * sizeof(float), 0, err, errlen) ||
      store_unpacked(m, to->data, slots, ostate, err, errlen))
    goto out;
  p->step = (long)st[ST_STEP];
  p->epoch = (long)st[ST_EPOCH];
  p->batches_taken = (long)st[ST_TAKEN];
  p->epoch_loss = st[ST_EPOCH_LOSS];
  p->epoch_steps = (long)st[ST_EPOCH_STEPS];
  p->initial_loss = st[ST_INITIAL_LOSS];
  optim_set_updates(o, (long)st[ST_UPDATES]);
  s->scale = st[ST_SCALE];
  s->clean_steps = (long)st[ST_CLEAN];
  s->skipped_steps = (long)st[ST_SKIPPED];
  s->total_steps = (long)st[ST_TOTAL];
  rc = 0;
out:
  ckpt_free(c);
  return rc;
}
