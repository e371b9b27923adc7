/* check_optim.c — optimizers against a plain f64 implementation of PyTorch's update rules,
 * the learning-rate schedule, the fp16 loss scaler's state machine, the non-finite check. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/model/amp.h"
#include "src/device/arena.h"
#include "src/model/optim.h"
#include "tests/suite_main.h"

enum { N = 257, STEPS = 7 };

static double rnd_state = 0.5;
static double rnd(void) /* deterministic, non-zero */
{
  rnd_state = fmod(rnd_state * 9301 + 0.49297, 1.0);
  return 2 * rnd_state - 1;
}

/* f64 references, written directly from the algorithms in torch.optim's documentation. */
static void ref_sgd(double *p, const double *g, double *buf, int t, const optim_config_t *c,
                    double lr)
{
  for (int i = 0; i < N; i++) {
    double d = g[i] + c->weight_decay * p[i];
    if (c->momentum > 0) {
      buf[i] = t == 1 ? d : c->momentum * buf[i] + d;
      d = c->nesterov ? d + c->momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

static void ref_adamw(double *p, const double *g, double *m, double *v, int t,
                      const optim_config_t *c, double lr)
{
  for (int i = 0; i < N; i++) {
    p[i] *= 1 - lr * c->weight_decay;
    m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
    v[i] = c->beta2 * v[i] + (1 - c->beta2) * g[i] * g[i];
    double mh = m[i] / (1 - pow(c->beta1, t)), vh = v[i] / (1 - pow(c->beta2, t));
    p[i] -= lr * mh / (sqrt(vh) + c->eps);
  }
}

static void run_case(const optim_config_t *cfg, double grad_scale)
{
  char err[256];
  arena_t *a;
  ck_assert_int_eq(arena_create(&a, NULL, "cpu", err, sizeof err), 0);
  optim_t *o;
  ck_assert_msg(optim_create(&o, cfg, N, a, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(arena_current(a, ARENA_OPTIM),
                    (cfg->kind == OPTIM_ADAMW ? 2 : cfg->momentum > 0 ? 1 : 0) * N * 4);
  float p[N], g[N];
  double pr[N], gr[N], s1[N] = {0}, s2[N] = {0};
  for (int i = 0; i < N; i++) p[i] = (float)rnd(), pr[i] = p[i];
  for (int t = 1; t <= STEPS; t++) {
    for (int i = 0; i < N; i++) {
      g[i] = (float)(rnd() / grad_scale);
      gr[i] = (double)g[i] * grad_scale;
    }
    double lr = optim_lr_at(cfg, t - 1);
    ck_assert_msg(optim_step(o, p, g, lr, grad_scale, NULL, err, sizeof err) == 0, "%s", err);
    if (cfg->kind == OPTIM_SGD)
      ref_sgd(pr, gr, s1, t, cfg, lr);
    else
      ref_adamw(pr, gr, s1, s2, t, cfg, lr);
  }
  double maxmove = 0;
  for (int i = 0; i < N; i++) {
    ck_assert_msg(fabs(p[i] - pr[i]) <= 2e-6 * (1 + fabs(pr[i])), "p[%d] %.9g vs reference %.9g",
                  i, p[i], pr[i]);
  }
  for (int i = 0; i < N; i++) maxmove = fmax(maxmove, fabs(pr[i]));
  ck_assert(maxmove > 0);
  ck_assert_int_eq(optim_updates(o), STEPS);
  optim_destroy(o);
  ck_assert_uint_eq(arena_current(a, ARENA_OPTIM), 0);
  arena_destroy(a);
}

START_TEST(sgd_plain)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_SGD);
  c.momentum = 0;
  c.weight_decay = 0;
  run_case(&c, 1);
}
END_TEST

START_TEST(sgd_momentum_wd)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_SGD);
  c.weight_decay = 0.01;
  run_case(&c, 1);
}
END_TEST

START_TEST(sgd_nesterov_unscale)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_SGD);
  c.nesterov = 1;
  c.warmup_steps = 3;
  c.total_steps = 6;
  run_case(&c, 1.0 / 1024); /* gradients arrive scaled by 1024 */
}
END_TEST

START_TEST(adamw)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_ADAMW);
  c.lr = 0.01;
  run_case(&c, 1);
}
END_TEST

START_TEST(adamw_unscale_schedule)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_ADAMW);
  c.weight_decay = 0.1;
  c.warmup_steps = 2;
  c.total_steps = 5;
  c.min_lr = 1e-5;
  run_case(&c, 1.0 / 65536);
}
END_TEST

START_TEST(lr_schedule)
{
  optim_config_t c;
  optim_config_default(&c, OPTIM_SGD);
  c.lr = 0.4;
  c.warmup_steps = 4;
  c.total_steps = 104;
  c.min_lr = 0.004;
  for (long s = 0; s < 4; s++) ck_assert_double_eq_tol(optim_lr_at(&c, s), 0.4 * (s + 1) / 4, 1e-15);
  ck_assert_double_eq_tol(optim_lr_at(&c, 4), 0.4, 1e-15);
  ck_assert_double_eq_tol(optim_lr_at(&c, 54), 0.004 + (0.4 - 0.004) * 0.5, 1e-12);
  ck_assert_double_eq_tol(optim_lr_at(&c, 104), 0.004, 1e-15);
  ck_assert_double_eq_tol(optim_lr_at(&c, 500), 0.004, 1e-15);
  for (long s = 4; s < 104; s++) ck_assert(optim_lr_at(&c, s + 1) <= optim_lr_at(&c, s));
  c.total_steps = 0; /* constant after warm-up */
  ck_assert_double_eq(optim_lr_at(&c, 1000), 0.4);
}
END_TEST

START_TEST(config_errors)
{
  char err[256];
  optim_config_t c;
  optim_config_default(&c, OPTIM_SGD);
  ck_assert_int_eq(optim_config_validate(&c, err, sizeof err), 0);
  c.momentum = 1.0;
  ck_assert_int_ne(optim_config_validate(&c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "momentum"));
  optim_config_default(&c, OPTIM_SGD);
  c.lr = -1;
  ck_assert_int_ne(optim_config_validate(&c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "learning rate"));
  optim_config_default(&c, OPTIM_ADAMW);
  c.beta2 = 1;
  ck_assert_int_ne(optim_config_validate(&c, err, sizeof err), 0);
  ck_assert_ptr_nonnull(strstr(err, "betas"));
  optim_kind_t k;
  ck_assert_int_eq(optim_kind_parse("adamw", &k), 0);
  ck_assert_int_eq(k, OPTIM_ADAMW);
  ck_assert_int_ne(optim_kind_parse("adam", &k), 0);
}
END_TEST

START_TEST(scaler_state_machine)
{
  amp_scaler_t s;
  amp_scaler_init(&s, MODEL_FP16);
  ck_assert_double_eq(amp_scaler_scale(&s), 65536);
  ck_assert_int_eq(amp_scaler_update(&s, 1), 0); /* overflow: skip, halve */
  ck_assert_double_eq(amp_scaler_scale(&s), 32768);
  ck_assert_int_eq(s.skipped_steps, 1);
  for (int i = 0; i < 1999; i++) ck_assert_int_eq(amp_scaler_update(&s, 0), 1);
  ck_assert_double_eq(amp_scaler_scale(&s), 32768);
  ck_assert_int_eq(amp_scaler_update(&s, 0), 1); /* the 2000th clean step doubles */
  ck_assert_double_eq(amp_scaler_scale(&s), 65536);
  for (int i = 0; i < 1000; i++) amp_scaler_update(&s, 0);
  ck_assert_int_eq(amp_scaler_update(&s, 1), 0); /* an overflow resets the clean run */
  for (int i = 0; i < 1999; i++) amp_scaler_update(&s, 0);
  ck_assert_double_eq(amp_scaler_scale(&s), 32768);
  ck_assert_int_eq(s.skipped_steps, 2);
  ck_assert_int_eq(s.total_steps, 1 + 2000 + 1000 + 1 + 1999);
  amp_scaler_t f;
  amp_scaler_init(&f, MODEL_BF16); /* no scaling outside fp16 */
  ck_assert_double_eq(amp_scaler_scale(&f), 1);
  ck_assert_int_eq(amp_scaler_update(&f, 1), 1);
  ck_assert_int_eq(f.skipped_steps, 0);
}
END_TEST

/* The CPU optimizer reads f32 gradients only and keeps no 16-bit copy: asked otherwise it says
 * so, touches nothing and counts no update. */
START_TEST(cpu_refuses_16bit_io)
{
  char err[256];
  arena_t *a;
  ck_assert_int_eq(arena_create(&a, NULL, "cpu", err, sizeof err), 0);
  for (int kind = 0; kind < 2; kind++) {
    optim_config_t c;
    optim_config_default(&c, kind ? OPTIM_ADAMW : OPTIM_SGD);
    optim_t *o;
    ck_assert_msg(optim_create(&o, &c, N, a, err, sizeof err) == 0, "%s", err);
    float p[N], g[N];
    uint16_t low[N];
    for (int i = 0; i < N; i++) p[i] = (float)rnd(), g[i] = (float)rnd();
    float p0[N];
    memcpy(p0, p, sizeof p);
    ck_assert_int_ne(optim_step_io(o, p, g, OPS_BF16, NULL, OPS_F32, 0.1, 1, NULL, err,
                                   sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "reads f32 gradients"));
    ck_assert_int_ne(optim_step_io(o, p, g, OPS_F32, low, OPS_BF16, 0.1, 1, NULL, err,
                                   sizeof err), 0);
    ck_assert_ptr_nonnull(strstr(err, "no 16-bit weight copy"));
    ck_assert_int_eq(memcmp(p, p0, sizeof p), 0);
    ck_assert_int_eq(optim_updates(o), 0);
    /* f32 in, no copy: optim_step's update exactly */
    ck_assert_msg(optim_step_io(o, p, g, OPS_F32, NULL, OPS_F32, 0.1, 0.5, NULL, err,
                                sizeof err) == 0, "%s", err);
    optim_t *o2;
    ck_assert_msg(optim_create(&o2, &c, N, a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(optim_step(o2, p0, g, 0.1, 0.5, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(memcmp(p, p0, sizeof p), 0);
    ck_assert_int_eq(optim_updates(o), 1);
    optim_destroy(o2);
    optim_destroy(o);
  }
  arena_destroy(a);
}
END_TEST

START_TEST(nonfinite_check)
{
  char err[128];
  float g[100];
  for (int i = 0; i < 100; i++) g[i] = (float)rnd() * 1e30f;
  int found = -1;
  ck_assert_int_eq(amp_check_nonfinite(g, 100, -1, NULL, &found, err, sizeof err), 0);
  ck_assert_int_eq(found, 0);
  float bad[3] = {INFINITY, -INFINITY, NAN};
  for (int b = 0; b < 3; b++)
    for (int pos = 0; pos < 100; pos += 33) {
      float keep = g[pos];
      g[pos] = bad[b];
      ck_assert_int_eq(amp_check_nonfinite(g, 100, -1, NULL, &found, err, sizeof err), 0);
      ck_assert_int_eq(found, 1);
      g[pos] = keep;
    }
  model_precision_t p;
  ck_assert_int_eq(amp_precision_parse("bf16", &p), 0);
  ck_assert_int_eq(p, MODEL_BF16);
  ck_assert_str_eq(amp_precision_name(MODEL_FP16), "fp16");
  ck_assert_int_ne(amp_precision_parse("fp8", &p), 0);
}
END_TEST

static Suite *make_optim_suite(const suite_env_t *env)
{
  Suite *s = suite_create("optim");
  SUITE_CASE(s, "updates", sgd_plain, sgd_momentum_wd, sgd_nesterov_unscale, adamw,
             adamw_unscale_schedule, lr_schedule, config_errors);
  SUITE_CASE(s, "amp", scaler_state_machine, nonfinite_check, cpu_refuses_16bit_io);
  return s;
}

SUITE_MAIN("check_optim", make_optim_suite, SUITE_CPU_ONLY)
