/* optim_config.c — the optimizer's settings: defaults, validation, names, and the learning-rate
 * schedule (a pure function of the step). Apart from optim.c so that what only reads settings
 * (the command line, its fuzzer) does not pull in the optimizer's device code. */
#include "config.h"

#include "src/model/optim.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "src/check.h"

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
