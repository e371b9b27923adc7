/* check_plan.c — the activations' memory plan (src/device/plan.h): layouts checked pair by pair
 * by an independent loop, sharing where lifetimes allow and never where they meet, replay
 * errors, and the U-Net's planned step against the same step with every tensor in its own
 * memory (SHMDDP_MEM_PLAN=separate) and with forward's outputs kept instead of recomputed
 * (SHMDDP_RECOMPUTE=none, or at the deeper levels only: 2), and with the up-convolutions'
 * gradient gathered instead of in NHWC (SHMDDP_UPCONV_GATHERED=1): the same bits in the loss, the gradients and the predictions, for BatchNorm and GroupNorm, f32 and f64 (f64 stages its weight gradients). */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/device/plan.h"
#include "src/model/unet.h"
#include "src/model/unet_impl.h"
#include "tests/suite_main.h"
#include "tests/unet_fixture.h"

static char err[512];

/* The test's own check of a finished plan: no two tensors alive together overlap, all inside
 * the block, aligned. Returns how many bytes the layout saved against one buffer each. */
static size_t check_layout(const plan_t *p)
{
  size_t n = plan_count(p), sum = 0;
  for (size_t i = 0; i < n; i++) {
    const char *ni;
    size_t bi, oi;
    int fi, li;
    plan_tensor_info(p, i, &ni, &bi, &oi, &fi, &li);
    ck_assert_uint_eq(oi % PLAN_ALIGN, 0);
    ck_assert_uint_le(oi + bi, plan_bytes(p));
    ck_assert_int_le(fi, li);
    sum += bi;
    for (size_t j = 0; j < i; j++) {
      const char *nj;
      size_t bj, oj;
      int fj, lj;
      plan_tensor_info(p, j, &nj, &bj, &oj, &fj, &lj);
      int alive_together = fi <= lj && fj <= li;
      int overlap = bi && bj && oi < oj + bj && oj < oi + bi;
      ck_assert_msg(!(alive_together && overlap), "%s [%d,%d] and %s [%d,%d] overlap", ni, fi, li,
                    nj, fj, lj);
    }
  }
  ck_assert_uint_eq(sum, plan_sum_bytes(p));
  ck_assert_uint_ge(plan_bytes(p), plan_live_peak(p));
  return sum - plan_bytes(p) < sum ? sum - plan_bytes(p) : 0;
}

START_TEST(shares_only_what_never_meets)
{
  plan_t *p;
  ck_assert_int_eq(plan_create(&p, err, sizeof err), 0);
  plan_begin(p);
  /* tick 0: a; tick 1: a -> b (an op reading a, writing b); tick 2: b -> c; tick 3: c */
  int a = plan_tensor(p, 1000, "a", err, sizeof err);
  plan_ptr(p, a);
  plan_tick(p);
  int b = plan_tensor(p, 1000, "b", err, sizeof err);
  plan_ptr(p, a), plan_ptr(p, b);
  plan_tick(p);
  int c = plan_tensor(p, 1000, "c", err, sizeof err);
  plan_ptr(p, b), plan_ptr(p, c);
  plan_tick(p);
  plan_ptr(p, c);
  size_t bytes;
  ck_assert_msg(plan_finish(p, &bytes, err, sizeof err) == 0, "%s", err);
  /* a and c never meet: two buffers are enough, and a (dead) gives c its place */
  ck_assert_uint_eq(bytes, 2 * 1024);
  ck_assert_uint_eq(plan_live_peak(p), 2000);
  size_t oa, ob, oc;
  plan_tensor_info(p, (size_t)a, NULL, NULL, &oa, NULL, NULL);
  plan_tensor_info(p, (size_t)b, NULL, NULL, &ob, NULL, NULL);
  plan_tensor_info(p, (size_t)c, NULL, NULL, &oc, NULL, NULL);
  ck_assert_uint_ne(oa, ob);
  ck_assert_uint_ne(ob, oc);
  ck_assert_uint_eq(oa, oc);
  check_layout(p);

  /* replay: the same declarations give the planned places */
  char *block = malloc(bytes);
  plan_set_base(p, block);
  plan_begin(p);
  ck_assert_int_eq(plan_tensor(p, 1000, "a", err, sizeof err), a);
  ck_assert_ptr_eq(plan_ptr(p, a), block + oa);
  ck_assert_int_eq(plan_tensor(p, 1000, "b", err, sizeof err), b);
  /* a declaration the record does not have is refused, never placed anywhere */
  ck_assert_int_eq(plan_tensor(p, 2000, "c", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "schedule changed"));
  plan_begin(p);
  ck_assert_int_eq(plan_tensor(p, 1000, "z", err, sizeof err), -1);
  ck_assert_ptr_nonnull(strstr(err, "planned as a"));
  plan_begin(p);
  for (int i = 0; i < 3; i++) plan_tensor(p, 1000, i == 0 ? "a" : i == 1 ? "b" : "c", err, sizeof err);
  ck_assert_int_eq(plan_tensor(p, 8, "extra", err, sizeof err), -1);
  free(block);
  plan_destroy(p);
}
END_TEST

/* Largest first leaves a hole here: a (2 units, ticks 0-1) and d (2 units, tick 5) take offset
 * 0, b (1 unit, ticks 1-4) goes above a, and c (1 unit, ticks 4-5) meets both b and d, so it
 * lands above b: 4 units where at most 3 are ever alive. Moving c before d in the order puts c
 * at 0 and d above it: 3 units. The search must find that, and give the same layout each time. */
START_TEST(fills_the_hole_largest_first_leaves)
{
  const size_t U = 4 * PLAN_ALIGN;
  size_t offs[2][4], bytes[2];
  for (int run = 0; run < 2; run++) {
    plan_t *p;
    ck_assert_int_eq(plan_create(&p, err, sizeof err), 0);
    plan_begin(p);
    int a = plan_tensor(p, 2 * U, "a", err, sizeof err); /* tick 0 */
    plan_tick(p);
    int b = plan_tensor(p, U, "b", err, sizeof err); /* tick 1 */
    plan_ptr(p, a);
    plan_tick(p), plan_tick(p), plan_tick(p);
    int c = plan_tensor(p, U, "c", err, sizeof err); /* tick 4 */
    plan_ptr(p, b);
    plan_tick(p);
    int d = plan_tensor(p, 2 * U, "d", err, sizeof err); /* tick 5 */
    plan_ptr(p, c);
    ck_assert_msg(plan_finish(p, &bytes[run], err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(plan_live_peak(p), 3 * U);
    ck_assert_uint_eq(bytes[run], 3 * U);
    check_layout(p);
    const int ids[4] = {a, b, c, d};
    for (int i = 0; i < 4; i++)
      plan_tensor_info(p, (size_t)ids[i], NULL, NULL, &offs[run][i], NULL, NULL);
    plan_destroy(p);
  }
  ck_assert_uint_eq(bytes[0], bytes[1]);
  ck_assert_mem_eq(offs[0], offs[1], sizeof offs[0]);
}
END_TEST

/* Random schedules: the layout holds, is never larger than one buffer each nor smaller than the
 * most alive at once, and the separate layout shares nothing. */
START_TEST(random_schedules)
{
  unsigned s = 12345;
  for (int round = 0; round < 40; round++) {
    for (int sep = 0; sep < 2; sep++) {
      plan_t *p;
      ck_assert_int_eq(plan_create(&p, err, sizeof err), 0);
      plan_set_separate(p, sep);
      plan_begin(p);
      int n = 1 + round * 5, live[256], nlive = 0;
      for (int k = 0; k < n; k++) {
        s = s * 1103515245u + 12345u;
        size_t bytes = (s >> 8) % 5000 + (k % 7 == 0 ? 0 : 1);
        char name[16];
        snprintf(name, sizeof name, "t%d", k);
        int id = plan_tensor(p, bytes, name, err, sizeof err);
        ck_assert_int_ge(id, 0);
        live[nlive++] = id;
        /* use a few earlier tensors at this tick, then let some die by never using them again */
        for (int u = 0; u < nlive; u++)
          if ((s >> (u % 24)) & 1) plan_ptr(p, live[u]);
        if (nlive > 8) {
          int victim = (int)((s >> 4) % (unsigned)nlive);
          nlive--;
          live[victim] = live[nlive];
        }
        plan_tick(p);
      }
      size_t bytes;
      ck_assert_msg(plan_finish(p, &bytes, err, sizeof err) == 0, "%s", err);
      ck_assert_int_eq(plan_verify(p, err, sizeof err), 0);
      check_layout(p);
      if (sep) {
        size_t aligned = 0;
        for (size_t i = 0; i < plan_count(p); i++) {
          size_t b;
          plan_tensor_info(p, i, NULL, &b, NULL, NULL, NULL);
          aligned += (b + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
        }
        ck_assert_uint_eq(bytes, aligned);
      }
      plan_destroy(p);
    }
  }
}
END_TEST

/* ---- the U-Net's plan ---- */

typedef struct {
  double loss[3];
  float *grads;
  int32_t *pred;
  size_t plan_bytes, plan_sum;
  int gathered;   /* up-convolutions whose gradient the concat's split wrote gathered */
  int head_fused; /* backward formed the head's input gradient inside the BatchNorm's */
  int head_fwd_fused; /* forward ran the head on the BatchNorm's apply, its output not stored */
  int head_train; /* a training step ran the head, the loss and the head's backward to the
                     norm's reduce as one op (where its gradients were not staged) */
} step_out_t;

/* SHMDDP_UPCONV_GATHERED and SHMDDP_HEAD_FUSED for the next run_side (NULL: unset, the
 * defaults) */
static const char *upconv_env, *head_env;

/* Three steps (full batch, a short one, an accumulated one) and an eval. */
static void run_side(model_norm_t norm, ops_dtype_t dt, const char *mode, const char *recompute,
                     const char *side, step_out_t *o)
{
  model_config_t c;
  small_cfg(&c, norm);
  setenv("SHMDDP_MEM_PLAN", mode, 1);
  setenv("SHMDDP_RECOMPUTE", recompute, 1);
  setenv("SHMDDP_WGRAD_STREAM", side, 1);
  if (upconv_env) setenv("SHMDDP_UPCONV_GATHERED", upconv_env, 1);
  if (head_env) setenv("SHMDDP_HEAD_FUSED", head_env, 1);
  model_t *m = NULL;
  ck_assert_msg(unet_create(&m, &c, dt, err, sizeof err) == 0, "%s", err);
  unsetenv("SHMDDP_MEM_PLAN");
  unsetenv("SHMDDP_RECOMPUTE");
  unsetenv("SHMDDP_WGRAD_STREAM");
  unsetenv("SHMDDP_UPCONV_GATHERED");
  unsetenv("SHMDDP_HEAD_FUSED");
  o->head_fused = m->head_fused;
  o->head_fwd_fused = m->head_fwd_fused;
  o->head_train = m->head_train;
  o->gathered = 0;
  for (int i = 0; i < c.levels - 1; i++) o->gathered += m->dec[i].up.dy_gathered;
  /* the host has no second stream: auto is off; a level asks for the side schedule, which f64
   * (weight gradients staged one layer at a time) never takes */
  int want = strcmp(side, "auto") && strcmp(side, "off") ? atoi(side) : c.levels;
  ck_assert_int_eq(m->side_from, dt == OPS_F64 ? c.levels : want);
  ck_assert_int_eq(m->side_ready, 0);
  /* NaN everywhere: a tensor read before the schedule wrote it would show in every result */
  memset(m->act, 0xff, plan_bytes(m->plan));
  o->plan_bytes = plan_bytes(m->plan);
  o->plan_sum = plan_sum_bytes(m->plan);
  check_layout(m->plan);
  size_t P = (size_t)c.max_batch * c.height * c.width;
  float *x = malloc(P * c.in_channels * sizeof *x);
  int32_t *y = malloc(P * sizeof *y);
  int batches[3] = {3, 2, 3};
  for (int k = 0; k < 3; k++) {
    fill_batch(&c, batches[k], (unsigned)k, x, y);
    float loss;
    ck_assert_msg(model_train_step(m, x, y, batches[k], 1.0f, k == 2, NULL, &loss, err,
                                   sizeof err) == 0,
                  "%s", err);
    o->loss[k] = model_last_loss(m);
  }
  size_t np = model_flat_size(m);
  o->grads = malloc(np * sizeof *o->grads);
  memcpy(o->grads, model_grads(m), np * sizeof *o->grads);
  o->pred = malloc(P * sizeof *o->pred);
  fill_batch(&c, 3, 9, x, y);
  float loss;
  ck_assert_msg(model_eval(m, x, y, 3, o->pred, &loss, err, sizeof err) == 0, "%s", err);
  free(x), free(y);
  model_destroy(m);
}

static void run_model(model_norm_t norm, ops_dtype_t dt, const char *mode, const char *recompute,
                      step_out_t *o)
{
  run_side(norm, dt, mode, recompute, "auto", o);
}

static void same_bits(model_norm_t norm, ops_dtype_t dt)
{
  step_out_t a, b, k, h;
  run_model(norm, dt, "shared", "all", &a);
  run_model(norm, dt, "separate", "all", &b);
  /* keeping forward's outputs instead of recomputing them: the same numbers, more memory */
  run_model(norm, dt, "shared", "none", &k);
  /* and keeping them at the deeper levels only (recomputing at the two shallowest) */
  run_model(norm, dt, "shared", "2", &h);
  model_config_t c;
  small_cfg(&c, norm);
  size_t np = model_config_flat_size(&c), P = (size_t)c.max_batch * c.height * c.width;
  for (int k = 0; k < 3; k++) ck_assert_msg(a.loss[k] == b.loss[k], "step %d loss", k);
  ck_assert_msg(memcmp(a.grads, b.grads, np * sizeof *a.grads) == 0, "gradients differ");
  ck_assert_msg(memcmp(a.pred, b.pred, P * sizeof *a.pred) == 0, "predictions differ");
  /* the plan shares: under two thirds of one buffer each, while the separate layout is that */
  ck_assert_uint_lt(3 * a.plan_bytes, 2 * a.plan_sum);
  ck_assert_uint_ge(b.plan_bytes, b.plan_sum);
  for (int i = 0; i < 3; i++) ck_assert_msg(a.loss[i] == k.loss[i], "step %d loss (kept)", i);
  ck_assert_msg(memcmp(a.grads, k.grads, np * sizeof *a.grads) == 0, "gradients differ (kept)");
  ck_assert_msg(memcmp(a.pred, k.pred, P * sizeof *a.pred) == 0, "predictions differ (kept)");
  ck_assert_uint_gt(k.plan_bytes, a.plan_bytes);
  for (int i = 0; i < 3; i++) ck_assert_msg(a.loss[i] == h.loss[i], "step %d loss (half kept)", i);
  ck_assert_msg(memcmp(a.grads, h.grads, np * sizeof *a.grads) == 0, "gradients differ (half)");
  ck_assert_msg(memcmp(a.pred, h.pred, P * sizeof *a.pred) == 0, "predictions differ (half)");
  ck_assert_uint_gt(h.plan_bytes, a.plan_bytes); /* between the two */
  ck_assert_uint_lt(h.plan_bytes, k.plan_bytes);
  /* weight gradients beside the input gradients, from every level and from level 1: the schedule
   * the GPU runs on two streams, in order on the host. The same bits; the plan keeps each
   * weight gradient's inputs alive until the next convolution's backward, so it may grow. */
  const char *sides[] = {"0", "1"};
  for (int v = 0; v < 2; v++) {
    step_out_t sd;
    run_side(norm, dt, "shared", "all", sides[v], &sd);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(a.loss[i] == sd.loss[i], "step %d loss (side %s)", i, sides[v]);
    ck_assert_msg(memcmp(a.grads, sd.grads, np * sizeof *a.grads) == 0, "gradients differ (side %s)",
                  sides[v]);
    ck_assert_msg(memcmp(a.pred, sd.pred, P * sizeof *a.pred) == 0, "predictions differ (side %s)",
                  sides[v]);
    if (dt == OPS_F64) ck_assert_uint_eq(sd.plan_bytes, a.plan_bytes); /* never beside */
    else ck_assert_uint_ge(sd.plan_bytes, a.plan_bytes);
    free(sd.grads), free(sd.pred);
  }
  /* the up-convolutions' gradient gathered (SHMDDP_UPCONV_GATHERED=1: the CPU takes it at every
   * level) against NHWC (the default on the CPU, whose types are not 16-bit, and 0): the CPU's
   * gathered ops give the plain ones' bits, so any misplaced element of the split or misread
   * one of the backward shows */
  ck_assert_int_eq(a.gathered, 0);
  step_out_t pl, ga;
  upconv_env = "0";
  run_model(norm, dt, "shared", "all", &pl);
  upconv_env = "1";
  run_model(norm, dt, "shared", "all", &ga);
  upconv_env = NULL;
  ck_assert_int_eq(pl.gathered, 0);
  ck_assert_int_eq(ga.gathered, c.levels - 1);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(ga.loss[i] == a.loss[i] && pl.loss[i] == a.loss[i],
                  "step %d loss (up-convolution gradient gathered or NHWC)", i);
  ck_assert_msg(memcmp(ga.grads, a.grads, np * sizeof *a.grads) == 0 &&
                    memcmp(pl.grads, a.grads, np * sizeof *a.grads) == 0,
                "gradients differ (up-convolution gradient gathered or NHWC)");
  ck_assert_msg(memcmp(ga.pred, a.pred, P * sizeof *a.pred) == 0 &&
                    memcmp(pl.pred, a.pred, P * sizeof *a.pred) == 0,
                "predictions differ (up-convolution gradient gathered or NHWC)");
  ck_assert_uint_eq(ga.plan_bytes, a.plan_bytes); /* the same tensors, the same sizes */
  free(pl.grads), free(pl.pred), free(ga.grads), free(ga.pred);
  /* the head fused with the BatchNorm before it (the default where the norm is BatchNorm: the
   * CPU backend has both halves) against each half alone and neither (SHMDDP_HEAD_FUSED=forward,
   * backward, 0): forward runs the head on the norm's apply and never stores the last block's
   * output, backward forms the head's input gradient inside the norm's backward. The same bits
   * every way; each half's plan no larger than without it, and the forward half's smaller (the
   * last block's output gone) */
  ck_assert_int_eq(a.head_fused, norm == MODEL_NORM_BATCH);
  ck_assert_int_eq(a.head_fwd_fused, norm == MODEL_NORM_BATCH);
  const char *halves[] = {"0", "forward", "backward"};
  step_out_t hv[3];
  for (int v = 0; v < 3; v++) {
    head_env = halves[v];
    run_model(norm, dt, "shared", "all", &hv[v]);
    head_env = NULL;
    ck_assert_int_eq(hv[v].head_fwd_fused, v == 1 && norm == MODEL_NORM_BATCH);
    ck_assert_int_eq(hv[v].head_fused, v == 2 && norm == MODEL_NORM_BATCH);
    for (int i = 0; i < 3; i++)
      ck_assert_msg(hv[v].loss[i] == a.loss[i], "step %d loss (head fused: %s)", i, halves[v]);
    ck_assert_msg(memcmp(hv[v].grads, a.grads, np * sizeof *a.grads) == 0,
                  "gradients differ (head fused: %s)", halves[v]);
    ck_assert_msg(memcmp(hv[v].pred, a.pred, P * sizeof *a.pred) == 0,
                  "predictions differ (head fused: %s)", halves[v]);
  }
  ck_assert_uint_le(a.plan_bytes, hv[1].plan_bytes);
  ck_assert_uint_le(a.plan_bytes, hv[2].plan_bytes);
  ck_assert_uint_le(hv[1].plan_bytes, hv[0].plan_bytes);
  ck_assert_uint_le(hv[2].plan_bytes, hv[0].plan_bytes);
  if (norm == MODEL_NORM_BATCH) ck_assert_uint_lt(hv[1].plan_bytes, hv[0].plan_bytes);
  for (int v = 0; v < 3; v++) free(hv[v].grads), free(hv[v].pred);
  /* The default, SHMDDP_HEAD_FUSED=train: a training step's head, loss and head backward down
   * to the norm's reduce as one op (on the CPU its four ops in their order: the same bits; with
   * f64 gradients staged one layer at a time the step keeps them apart), against both halves as
   * separate ops (1), on the same plan (the same tensors and ticks; the activations poisoned, so
   * a tensor read outside its planned life would show) */
  step_out_t tr;
  head_env = "1";
  run_model(norm, dt, "shared", "all", &tr);
  head_env = NULL;
  ck_assert_int_eq(tr.head_train, 0);
  ck_assert_int_eq(a.head_train, norm == MODEL_NORM_BATCH);
  ck_assert_int_eq(tr.head_fused && tr.head_fwd_fused, norm == MODEL_NORM_BATCH);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(tr.loss[i] == a.loss[i], "step %d loss (head's training pass or not)", i);
  ck_assert_msg(memcmp(tr.grads, a.grads, np * sizeof *a.grads) == 0,
                "gradients differ (head's training pass or not)");
  ck_assert_msg(memcmp(tr.pred, a.pred, P * sizeof *a.pred) == 0,
                "predictions differ (head's training pass or not)");
  ck_assert_uint_eq(tr.plan_bytes, a.plan_bytes);
  free(tr.grads), free(tr.pred);
  free(a.grads), free(a.pred), free(b.grads), free(b.pred), free(k.grads), free(k.pred);
  free(h.grads), free(h.pred);
}

START_TEST(unet_batchnorm_f32) { same_bits(MODEL_NORM_BATCH, OPS_F32); }
END_TEST
START_TEST(unet_groupnorm_f32) { same_bits(MODEL_NORM_GROUP, OPS_F32); }
END_TEST
START_TEST(unet_batchnorm_f64_staged) { same_bits(MODEL_NORM_BATCH, OPS_F64); }
END_TEST

START_TEST(bad_mode_refused)
{
  model_config_t c;
  small_cfg(&c, MODEL_NORM_BATCH);
  setenv("SHMDDP_MEM_PLAN", "sometimes", 1);
  model_t *m = NULL;
  ck_assert_int_ne(unet_create(&m, &c, OPS_F32, err, sizeof err), 0);
  unsetenv("SHMDDP_MEM_PLAN");
  ck_assert_ptr_null(m);
  ck_assert_ptr_nonnull(strstr(err, "SHMDDP_MEM_PLAN"));
  const char *bad[] = {"no", "-1", "9", "2x", ""};
  for (int i = 0; i < 4; i++) { /* "" is auto */
    setenv("SHMDDP_RECOMPUTE", bad[i], 1);
    ck_assert_int_ne(unet_create(&m, &c, OPS_F32, err, sizeof err), 0);
    unsetenv("SHMDDP_RECOMPUTE");
    ck_assert_ptr_nonnull(strstr(err, "SHMDDP_RECOMPUTE"));
    setenv("SHMDDP_WGRAD_STREAM", bad[i], 1);
    ck_assert_int_ne(unet_create(&m, &c, OPS_F32, err, sizeof err), 0);
    unsetenv("SHMDDP_WGRAD_STREAM");
    ck_assert_ptr_nonnull(strstr(err, "SHMDDP_WGRAD_STREAM"));
    setenv("SHMDDP_UPCONV_GATHERED", bad[i], 1);
    ck_assert_int_ne(unet_create(&m, &c, OPS_F32, err, sizeof err), 0);
    unsetenv("SHMDDP_UPCONV_GATHERED");
    ck_assert_ptr_nonnull(strstr(err, "SHMDDP_UPCONV_GATHERED"));
    setenv("SHMDDP_HEAD_FUSED", bad[i], 1);
    ck_assert_int_ne(unet_create(&m, &c, OPS_F32, err, sizeof err), 0);
    unsetenv("SHMDDP_HEAD_FUSED");
    ck_assert_ptr_nonnull(strstr(err, "SHMDDP_HEAD_FUSED"));
  }
}
END_TEST

static Suite *make_plan_suite(const suite_env_t *env)
{
  (void)env;
  Suite *s = suite_create("plan");
  SUITE_CASE(s, "planner", shares_only_what_never_meets, fills_the_hole_largest_first_leaves,
             random_schedules);
  SUITE_CASE(s, "unet", unet_batchnorm_f32, unet_groupnorm_f32, unet_batchnorm_f64_staged,
             bad_mode_refused);
  return s;
}

SUITE_MAIN("check_plan", make_plan_suite, SUITE_CPU_ONLY)
