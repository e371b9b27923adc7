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

int optim_step_io(optim_t *o, float *params, const void *grads, ops_dtype_t grad_dtype,
                  void *lowp, ops_dtype_t lowp_dtype, double lr, double grad_scale, void *stream,
                  char *err, size_t errlen)
{
  const optim_config_t *c = &o->cfg;
  if (!(lr >= 0) || !isfinite(grad_scale))
    return check_fail(err, errlen, "optimizer step with lr %g, gradient scale %g", lr, grad_scale);
  int dev = arena_device(o->arena);
  int rc;
  if (c->kind == OPTIM_SGD) {
    rc = dev_sgd(dev, params, grads, grad_dtype, o->state, o->n, lr, c->weight_decay,
                 c->momentum, c->nesterov, grad_scale, lowp, lowp_dtype, stream, err, errlen);
  } else {
    double bc1 = 1 - pow(c->beta1, (double)(o->updates + 1));
    double bc2 = 1 - pow(c->beta2, (double)(o->updates + 1));
    rc = dev_adamw(dev, params, grads, grad_dtype, o->state, o->state + o->n, o->n, lr, c->beta1,
                   c->beta2, c->eps, c->weight_decay, bc1, bc2, grad_scale, lowp, lowp_dtype,
                   stream, err, errlen);
  }
  if (rc == 0) o->updates++; /* a refused update is not counted */
  return rc;
}

int optim_step(optim_t *o, float *params, const float *grads, double lr, double grad_scale,
               void *stream, char *err, size_t errlen)
{
  return optim_step_io(o, params, grads, OPS_F32, NULL, OPS_F32, lr, grad_scale, stream, err,
                       errlen);
}

float *optim_state(optim_t *o, size_t *count)
{
  *count = o->state_count;
  return o->state;
}

long optim_updates(const optim_t *o) { return o->updates; }
void optim_set_updates(optim_t *o, long updates) { o->updates = updates; }
