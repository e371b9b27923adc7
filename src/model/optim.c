/* optim.c — optimizer state and dispatch to the backend's fused update; the lr schedule. */
#include "config.h"

#include "src/model/optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/check.h"
#include "src/device/device.h"

struct optim {
  optim_config_t cfg;
  size_t n;
  arena_t *arena;
  float *state; /* SGD: momentum (n); AdamW: m then v (2n) */
  size_t state_count;
  long updates;
};

void optim_config_default(optim_config_t *c, optim_kind_t kind)
{
  int adamw = kind == OPTIM_ADAMW;
  *c = (optim_config_t){.kind = kind,
                        .lr = adamw ? 1e-3 : 0.05,
                        .weight_decay = adamw ? 0.01 : 1e-4,
                        .momentum = 0.9,
                        .beta1 = 0.9,
                        .beta2 = 0.999,
                        .eps = 1e-8};
}

int optim_config_validate(const optim_config_t *c, char *err, size_t errlen)
{
  if (c->kind != OPTIM_SGD && c->kind != OPTIM_ADAMW)
    return check_fail(err, errlen, "unknown optimizer %d: use sgd or adamw", (int)c->kind);
  if (!(c->lr > 0) || !isfinite(c->lr))
    return check_fail(err, errlen, "learning rate %g: must be a positive number", c->lr);
  if (!(c->weight_decay >= 0) || !isfinite(c->weight_decay))
    return check_fail(err, errlen, "weight decay %g: must be >= 0", c->weight_decay);
  if (c->kind == OPTIM_SGD) {
    if (!(c->momentum >= 0 && c->momentum < 1))
      return check_fail(err, errlen, "momentum %g: must be in [0, 1)", c->momentum);
    if (c->nesterov && !(c->momentum > 0))
      return check_fail(err, errlen, "nesterov needs a momentum > 0");
  } else {
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
      return check_fail(err, errlen, "AdamW betas %g, %g: each must be in [0, 1)", c->beta1,
                        c->beta2);
    if (!(c->eps > 0)) return check_fail(err, errlen, "AdamW eps %g: must be > 0", c->eps);
  }
  if (c->warmup_steps < 0)
    return check_fail(err, errlen, "warm-up steps %ld: must be >= 0", c->warmup_steps);
  if (c->total_steps > 0 && c->total_steps < c->warmup_steps)
    return check_fail(err, errlen, "total steps %ld is less than the warm-up steps %ld",
                      c->total_steps, c->warmup_steps);
  if (!(c->min_lr >= 0) || c->min_lr > c->lr)
    return check_fail(err, errlen, "minimum learning rate %g: must be in [0, lr = %g]", c->min_lr,
                      c->lr);
  return 0;
}

const char *optim_kind_name(optim_kind_t k) { return k == OPTIM_ADAMW ? "adamw" : "sgd"; }

int optim_kind_parse(const char *s, optim_kind_t *out)
{
  if (strcmp(s, "sgd") == 0) *out = OPTIM_SGD;
  else if (strcmp(s, "adamw") == 0) *out = OPTIM_ADAMW;
  else return -1;
  return 0;
}

double optim_lr_at(const optim_config_t *c, long step)
{
  if (step < 0) step = 0;
  if (step < c->warmup_steps) return c->lr * (double)(step + 1) / (double)c->warmup_steps;
  if (c->total_steps <= c->warmup_steps) return c->lr;
  double t = (double)(step - c->warmup_steps) / (double)(c->total_steps - c->warmup_steps);
  if (t > 1) t = 1;
  return c->min_lr + (c->lr - c->min_lr) * 0.5 * (1 + cos(M_PI * t));
}

int optim_create(optim_t **out, const optim_config_t *cfg, size_t n, arena_t *arena, char *err,
                 size_t errlen)
{
  *out = NULL;
  if (optim_config_validate(cfg, err, errlen) != 0) return -1;
  optim_t *o = calloc(1, sizeof *o);
  if (!o) return check_fail(err, errlen, "out of memory creating the optimizer");
  o->cfg = *cfg;
  o->n = n;
  o->arena = arena;
  o->state_count = cfg->kind == OPTIM_ADAMW ? 2 * n : (cfg->momentum > 0 ? n : 0);
  if (o->state_count) {
    o->state = arena_calloc(arena, o->state_count * sizeof(float), ARENA_OPTIM,
                            "optimizer state");
    if (!o->state) {
      snprintf(err, errlen, "%s", arena_last_error(arena));
      free(o);
      return -1;
    }
    /* device arenas do not clear their blocks */
    if (arena_device(arena) != DEV_HOST &&
        dev_memset_zero(o->state, arena_device(arena), o->state_count * sizeof(float), err,
                        errlen) != 0) {
      optim_destroy(o);
      return check_prefix(err, errlen, "clearing the optimizer state");
    }
  }
  *out = o;
  return 0;
}

void optim_destroy(optim_t *o)
{
  if (!o) return;
  arena_free(o->arena, o->state);
  free(o);
}

int optim_step(optim_t *o, float *params, const float *grads, double lr, double grad_scale,
               void *stream, char *err, size_t errlen)
{
  const optim_config_t *c = &o->cfg;
  if (!(lr >= 0) || !isfinite(grad_scale))
    return check_fail(err, errlen, "optimizer step with lr %g, gradient scale %g", lr, grad_scale);
  o->updates++;
  int dev = arena_device(o->arena);
  if (c->kind == OPTIM_SGD)
    return dev_sgd(dev, params, grads, o->state, o->n, lr, c->weight_decay, c->momentum,
                   c->nesterov, grad_scale, stream, err, errlen);
  double bc1 = 1 - pow(c->beta1, (double)o->updates);
  double bc2 = 1 - pow(c->beta2, (double)o->updates);
  return dev_adamw(dev, params, grads, o->state, o->state + o->n, o->n, lr, c->beta1, c->beta2,
                   c->eps, c->weight_decay, bc1, bc2, grad_scale, stream, err, errlen);
}

float *optim_state(optim_t *o, size_t *count)
{
  *count = o->state_count;
  return o->state;
}

long optim_updates(const optim_t *o) { return o->updates; }
void optim_set_updates(optim_t *o, long updates) { o->updates = updates; }
const optim_config_t *optim_config(const optim_t *o) { return &o->cfg; }
